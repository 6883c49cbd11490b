"""mkdocs hook: the built site's search worker gets lunr 2.3.9's ``TokenSet`` key fixed.

lunr merges the nodes of its term automaton by ``TokenSet.prototype.toString``, a key that runs each
edge label and child id together (``"a1" + "2"`` and ``"a" + "12"`` are one key), so two different
nodes can be merged and a search can reach a term the index lacks and throw (``Cannot read
properties of undefined (reading '_index')``: seen with "harness" on this site once
``docs/local_web.md`` grew). Material bundles lunr inside its search worker, out of reach of page
scripts, so the built worker's text is patched: each edge is written as ``|label:id`` (a label is
one character, so the key reads back one way). The patch must apply exactly once: a Material
release whose bundle differs fails the build here, loudly, rather than shipping the bug again.
Why text: no mkdocs or Material option replaces lunr's key function.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

#: lunr's loop body as Material's minified bundle writes it: ``e=e+s+o.id}return e}``
_KEY = re.compile(r"(TokenSet\.prototype\.toString=function\(\)\{[^{}]*\{[^{}]*?)"
                  r"(\w+)=\2\+(\w+)\+(\w+)\.id\}return \2\}")


#: the key function once patched (a ``--dirty`` build keeps the worker it patched before)
_PATCHED = re.compile(r"TokenSet\.prototype\.toString=function\(\)\{[^{}]*\{[^{}]*?"
                      r"(\w+)=\1\+\"\|\"\+(\w+)\+\":\"\+(\w+)\.id\}return \1\}")


def patch_worker(text: str) -> str:
    """``text`` (a search worker bundle) with lunr's ``TokenSet`` key made unambiguous (unchanged
    when it already is). Raises PluginError unless the key function is found exactly once."""
    if len(_PATCHED.findall(text)) == 1 and not _KEY.search(text):
        return text
    found = len(_KEY.findall(text))
    if found != 1:
        raise PluginError(f"lunr's TokenSet key function found {found} times in the search worker "
                          "(expected 1): scripts/docs_lunr_hook.py needs updating for this Material")
    return _KEY.sub(lambda m: f'{m[1]}{m[2]}={m[2]}+"|"+{m[3]}+":"+{m[4]}.id}}return {m[2]}}}', text)


def on_post_build(config, **kwargs) -> None:
    workers = sorted(Path(config["site_dir"]).glob("assets/javascripts/workers/search.*.min.js"))
    if not workers:
        raise PluginError("no search worker in the built site: scripts/docs_lunr_hook.py found nothing to fix")
    for path in workers:
        path.write_text(patch_worker(path.read_text(encoding="utf-8")), encoding="utf-8")
