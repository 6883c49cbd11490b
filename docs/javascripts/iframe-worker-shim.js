/* A Worker for pages opened from disk (file://), where browsers refuse `new Worker(url)`: the worker script runs in
 * a hidden iframe and messages cross with postMessage. The site's search runs its index in a worker; with this
 * shim it works offline without a script from the network (mkdocs.yml: extra.polyfills; the offline plugin adds
 * a CDN copy of such a shim only when none is named). Written for this kit: only what the search worker uses
 * (postMessage both ways, message listeners, terminate). */
(function () {
  "use strict";
  if (location.protocol !== "file:" || window.__kitFileWorker) return;
  window.__kitFileWorker = true;

  /* lunr's TokenSet key is fixed in the built worker itself (scripts/docs_lunr_hook.py), for file:// and http. */
  function FileWorker(url) {
    var target = new EventTarget();
    var frame = document.createElement("iframe");
    var queue = [];
    var ready = false;
    var src = new URL(String(url), location.href).href;
    frame.hidden = true;
    frame.setAttribute("aria-hidden", "true");
    // inside the frame: the worker's global postMessage answers the page; importScripts loads in order
    var boot = "<script>(function(){var p=window.parent,o=window.postMessage.bind(window);" +
      "window.__kitDeliver=function(d){o(d,'*')};" +
      "window.postMessage=function(d){p.postMessage({__kitWorker:true,data:d},'*')};" +
      "window.importScripts=function(){for(var i=0;i<arguments.length;i++){" +
      "document.write('<scr'+'ipt src=\"'+arguments[i]+'\"></scr'+'ipt>')}};})()<\/script>" +
      "<script src=\"" + src.replace(/"/g, "&quot;") + "\"><\/script>";
    frame.srcdoc = boot;
    // the frame's own postMessage is the worker's (it answers the page): deliver with the original, kept at boot
    var deliver = function (d) { frame.contentWindow.__kitDeliver(d); };
    frame.addEventListener("load", function () {
      ready = true;
      queue.splice(0).forEach(deliver);
    });
    window.addEventListener("message", function (e) {
      if (e.source !== frame.contentWindow || !e.data || !e.data.__kitWorker) return;
      var ev = new MessageEvent("message", { data: e.data.data });
      if (typeof target.onmessage === "function") target.onmessage(ev);
      target.dispatchEvent(ev);
    });
    (document.body || document.documentElement).appendChild(frame);
    target.postMessage = function (d) {
      if (ready) deliver(d); else queue.push(d);
    };
    target.terminate = function () { frame.remove(); };
    target.onmessage = null;
    target.onerror = null;
    return target;
  }

  window.Worker = FileWorker;
})();
