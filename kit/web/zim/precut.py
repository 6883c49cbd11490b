"""The noise cut before parsing (issue 32): the children of navboxes, reference lists and citation
markers removed from a page's bytes before libxml2 builds its tree, only where libxml2 would keep
them inside their element, so the tree is the one it would build less those children.

On pages as heavy as current Wikipedia three quarters of the elements are citation apparatus and
navigation (realistic pages: 655 elements, 147 kept), which extraction then removes
(:func:`kit.web.zim.html._clean_tree`); libxml2 and every tree pass paid for each first. The cut
keeps each noise element's own start and end tags (whatever they close, open or imply happens as
before) and removes what lies between them. The rules are libxml2 2.14's HTML parser
(``HTMLparser.c``: ``htmlStartClose``, ``htmlEndPriority``, ``htmlParseEndTag``, raw-text ends).

* **Where** (:func:`_plan`): a double-quoted ``class`` whose value holds a noise class word
  (:data:`NOISE_CLASSES`, as ``_clean_tree`` removes them), or a legacy marker's
  ``id="cite_ref...``, in the start tag opened by the last ``<`` before it; that tag must be a
  ``div``/``span``/``sup``/``ol``/``ul``/``table``/``dl``/``section``/``nav``/``aside`` of a
  strict grammar (whitespace-separated attributes, quoted or simple unquoted values, no ``/>``,
  no repeated attribute, no ``&`` in its class or id).
* **What** (:func:`_interior_end`): every ``<`` up to the element's end tag is a tag of a grammar
  HTML5's tokenizer, and libxml2 2.14's, reads the same way (:data:`_TOKEN`; no comment, doctype
  or processing instruction);
  ``<style>`` runs to its end tag as raw text; no ``script``, ``textarea``, ``title``, ``xmp``,
  ``iframe``, ``noembed``, ``noframes``, ``plaintext``, ``meta``, ``base``, ``html``, ``head``,
  ``body``, ``frameset`` or ``frame``; no ``/>`` on a non-void element (libxml2 closes it at once,
  HTML5 does not). Replaying the tags on a stack that starts with the noise element, with
  libxml2's void elements, implied ends (a start tag closing the current element) and end-tag
  priorities, never closes the noise element early nor reaches an element outside it, and its own
  end tag closes it; at most :data:`MAX_DEPTH` elements deep.
* **Whether it was a tag at all** (and not text of a comment, raw-text element or attribute value
  opened before it) depends on everything before it, so it is checked after parsing: each cut
  element carries an attribute named with a per-process random nonce (:data:`MARKER`), and the
  tree is accepted only when every marker is on an element of the expected name, empty, and noise
  to ``_clean_tree`` (:func:`verify`); else the page is parsed uncut. Pages that declare a charset
  other than UTF-8 are not cut.
* **Bounded**: the scans of one page read at most :data:`SCAN_FACTOR` times its bytes (thousands
  of unclosed noise elements would each read to the end), class values over :data:`MAX_CLASS`
  bytes are skipped.

What it changes: nothing. Extraction removes noise elements before any rule that reads the
page's text (``kit.web.zim.html._prepare_tree``), so the tree those rules see is the same whether
the elements were emptied here or not, and pages whose head declares only UTF-8 are read as UTF-8
from their first byte (libxml2's guess at a non-ASCII byte before the meta tag searched the rest
of the page, cut or not; pages it still reads the declarations of are not cut).
``tests/test_zim_precut.py`` extracts every page of the shared archives, a generated realistic
archive and 4,000 random pages of hostile fragments with and without the cut. The one difference
left: a page nested deeper than libxml2's limit (256) loses its rest uncut, and keeps it when the
cut removes enough of the nesting.

``_tagscan.c`` makes the same decisions ~20x faster (``tests/test_zim_precut.py`` compares the
two on real and random pages); this module's Python is the reference and the fallback when it is
not built. Written here because no library cuts HTML so that libxml2's tree-building stays as it
was (an HTML5 parser's cut, tried on 2026-12-06, changed it: ``docs/local_web.md``).
"""

from __future__ import annotations

import importlib
import logging
import re
import secrets
from types import ModuleType

import lxml.etree

#: The marker attribute of cut elements: random, so no page can carry it.
MARKER = f"data-kit-cut-{secrets.token_hex(6)}"
_MARKER_BYTES = b" " + MARKER.encode("ascii")
#: The marked elements in document order (``//@...`` then ``..`` is faster on a page's ~30 marks but
#: quadratic in them: 80,000 took 7.8 s against 0.04).
_MARKED = lxml.etree.XPath(f"//*[@{MARKER}]")
#: Deepest nesting replayed inside one cut element (``_tagscan.c`` is built with the same).
MAX_DEPTH = 100
#: Attributes of a cut element's start tag (more: not cut).
MAX_ATTRS = 256

_WS = rb"[ \t\n\r\f]"
#: A tag in a grammar that HTML5's tokenizer (and libxml2 2.14's) reads the same way: a name
#: ending at whitespace, ``/`` or ``>``; whitespace-separated attributes, each a name and maybe
#: ``=`` and a value, quoted or unquoted without ``"'=<>`` or a backtick; maybe ``/`` just before
#: ``>``. Or any other ``<`` (group 2 None: the cut is refused). Group 3: ``/`` when the tag ends
#: with ``/>`` (after an unquoted value ending in ``/`` too: then refused on a non-void element).
_TOKEN = re.compile(
    rb"<(/?)([A-Za-z][A-Za-z0-9]*+)(?=[ \t\n\r\f/>])(?:" + _WS + rb"++[A-Za-z_:][-A-Za-z0-9_:.]*+"
    rb"(?:" + _WS + rb"*+=" + _WS + rb"*+(?:\"[^\"]*+\"|'[^']*+'|[^ \t\n\r\f\"'=<>`]++))?+)*+"
    + _WS + rb"*+(?:(/)>|>)|<")
#: The strict grammar of a cut element's own start tag (attributes separated by whitespace; values
#: quoted, or unquoted without ``/``; no ``/>``).
_START = re.compile(
    rb"<([A-Za-z][A-Za-z0-9]*+)((?:" + _WS + rb"++[A-Za-z_:][-A-Za-z0-9_:.]*+(?:" + _WS
    + rb"*+=" + _WS + rb"*+(?:\"[^\"]*+\"|'[^']*+'|[^ \t\n\r\f\"'=<>`/]++))?+)*+)" + _WS
    + rb"*+>")
_ATTR = re.compile(rb"([A-Za-z_:][-A-Za-z0-9_:.]*)(?:" + _WS + rb"*=" + _WS
                   + rb"*(\"[^\"]*\"|'[^']*'|[^ \t\n\r\f\"'=<>`/]+))?")
#: Elements that can be cut.
_CUT_TAGS = frozenset(b"div span sup ol ul table dl section nav aside".split())
#: MediaWiki / mwoffliner classes of navigation, maintenance boxes and citation apparatus: elements
#: that ``kit.web.zim.html._clean_tree`` removes.
NOISE_CLASSES = (
    "navbox", "navbox-styles", "vertical-navbox", "navbox-container", "sidebar",
    "authority-control", "bandeau-portail", "mw-editsection", "catlinks", "noprint", "metadata",
    "ambox", "mbox-small", "sistersitebox", "navigation-only", "mw-empty-elt",
    "reference", "mw-ref", "mw-references-wrap", "references", "reflist", "refbegin",
)
_NOISE_BYTES = frozenset(c.encode("ascii") for c in NOISE_CLASSES)
_NOISE = frozenset(NOISE_CLASSES)
#: Where a cut may start: a double-quoted class attribute (its value, up to the next ``"``, must
#: hold a noise class word) or a legacy citation marker's id (``<sup id="cite_ref-3">``); the tag
#: is the one opened by the last ``<`` before it (:func:`_plan`).
_TRIGGER = re.compile(rb'class="|id="cite_ref')
#: A class value longer than this is never a trigger (bounds the work on hostile pages).
MAX_CLASS = 4096
#: The interior scans of one page read at most this many times its length, plus the slack.
SCAN_FACTOR, SCAN_SLACK = 4, 1 << 16

#: libxml2's void elements (``html40ElementTable``, ``empty``): never pushed.
_VOID = frozenset(b"area base basefont br col frame hr img input isindex link meta param".split())
#: Names refused inside a cut: raw text, encodings, document structure.
_REFUSED = frozenset(b"script textarea title xmp iframe noembed noframes plaintext meta base html "
                     b"head body frameset frame".split())
#: ``htmlStartClose`` as written there, (current element, new start tag): the start tag closes it.
_START_CLOSE_PAIRS = """
a/a a/fieldset a/table a/td a/th address/dd address/dl address/dt address/form address/li
address/ul b/center b/p b/td b/th big/p caption/col caption/colgroup caption/tbody caption/tfoot
caption/thead caption/tr col/col col/colgroup col/tbody col/tfoot col/thead col/tr
colgroup/colgroup colgroup/tbody colgroup/tfoot colgroup/thead colgroup/tr dd/dt dir/dd dir/dl
dir/dt dir/form dir/ul dl/form dl/li dt/dd dt/dl font/center font/td font/th form/form
h1/fieldset h1/form h1/li h1/p h1/table h2/fieldset h2/form h2/li h2/p h2/table h3/fieldset
h3/form h3/li h3/p h3/table h4/fieldset h4/form h4/li h4/p h4/table h5/fieldset h5/form h5/li
h5/p h5/table h6/fieldset h6/form h6/li h6/p h6/table hr/form i/center i/p i/td i/th
legend/fieldset li/li link/body link/frameset listing/dd listing/dl listing/dt listing/fieldset
listing/form listing/li listing/table listing/ul menu/dd menu/dl menu/dt menu/form menu/ul
ol/form option/optgroup option/option p/address p/blockquote p/body p/caption p/center p/col
p/colgroup p/dd p/dir p/div p/dl p/dt p/fieldset p/form p/frameset p/h1 p/h2 p/h3 p/h4 p/h5 p/h6
p/head p/hr p/li p/listing p/menu p/ol p/p p/pre p/table p/tbody p/td p/tfoot p/th p/title p/tr
p/ul p/xmp pre/dd pre/dl pre/dt pre/fieldset pre/form pre/li pre/table pre/ul s/p
script/noscript small/p span/td span/th strike/p style/body style/frameset tbody/tbody
tbody/tfoot td/tbody td/td td/tfoot td/th td/tr tfoot/tbody th/tbody th/td th/tfoot th/th th/tr
thead/tbody thead/tfoot title/body title/frameset tr/tbody tr/tfoot tr/tr tt/p u/p u/td u/th
ul/address ul/form ul/menu ul/pre xmp/dd xmp/dl xmp/dt xmp/fieldset xmp/form xmp/li xmp/table
xmp/ul"""
#: The same by new start tag: the current elements it closes.
_CLOSES: dict[bytes, frozenset[bytes]] = {}
for _pair in _START_CLOSE_PAIRS.split():
    _old, _new = _pair.encode().split(b"/")
    _CLOSES[_new] = _CLOSES.get(_new, frozenset()) | {_old}
_NO_CLOSE: frozenset[bytes] = frozenset()
#: ``htmlEndPriority``: an end tag closes only elements of lower or equal priority (others 100).
_PRIORITY = {b"div": 150, b"td": 160, b"th": 160, b"tr": 170, b"thead": 180, b"tbody": 180,
             b"tfoot": 180, b"table": 190, b"head": 200, b"body": 200, b"html": 220}
_STYLE_END = re.compile(rb"</style[ \t\n\r\f/>]", re.IGNORECASE)


def _noise_start(html: bytes, pos: int) -> tuple[bytes, int] | None:
    """(lower-case name, end offset) of the start tag at ``pos`` when it is of the strict grammar
    (:data:`_START`), of an element that can be cut, with unique attribute names, no ``&`` in
    its class or id, and noise (:func:`is_noise_bytes`); else None."""
    m = _START.match(html, pos)
    if m is None:
        return None
    name = m.group(1).lower()
    if name not in _CUT_TAGS:
        return None
    attrs: dict[bytes, bytes] = {}
    for a in _ATTR.finditer(m.group(2)):
        key = a.group(1).lower()
        if key in attrs or len(attrs) >= MAX_ATTRS:  # libxml2 keeps the first: refused
            return None
        value = a.group(2) or b""
        attrs[key] = value[1:-1] if value[:1] in (b'"', b"'") else value
    cls, id_ = attrs.get(b"class", b""), attrs.get(b"id", b"")
    if b"&" in cls or b"&" in id_:  # entities: libxml2 decodes them
        return None
    if (not _NOISE_BYTES.isdisjoint(cls.split())) or (name == b"sup" and id_.startswith(b"cite_ref")):
        return name, m.end()
    return None


def is_noise(tag: str, cls: str | None, id_: str | None) -> bool:
    """Whether ``_clean_tree`` removes an element of this tag, class and id (a noise class, or a
    ``sup`` whose id starts ``cite_ref``)."""
    return (bool(cls) and not _NOISE.isdisjoint(cls.split())) or (
        tag == "sup" and bool(id_) and id_.startswith("cite_ref"))


def _interior_end(html: bytes, pos: int, name: bytes, budget: list[int]) -> int | None:
    """The offset of the end tag that closes the element ``name`` whose start tag ends at
    ``pos``, when the bytes between are safe to cut (module docstring); else None. ``budget``:
    bytes the page's scans may still read (less each token with the text before it, and each
    style element's raw text)."""
    stack = [name]
    prio = _PRIORITY
    search = _TOKEN.search
    while (m := search(html, pos)) is not None:
        budget[0] -= m.end() - pos
        pos = m.end()
        tag = m.group(2)
        if tag is None or budget[0] < 0:
            return None
        tag = tag.lower()
        if tag in _REFUSED:
            return None
        if m.group(1):  # an end tag
            if stack[-1] == tag:
                stack.pop()
            else:
                level = prio.get(tag, 100)
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i] == tag:
                        del stack[i:]
                        break
                    if prio.get(stack[i], 100) > level:
                        break  # libxml2 ignores this end tag
                else:
                    return None  # libxml2 would look for it outside the element
            if not stack:
                return m.start()
            continue
        closes = _CLOSES.get(tag, _NO_CLOSE)
        while stack[-1] in closes:
            if len(stack) == 1:
                return None  # it would close the noise element itself
            stack.pop()
        if tag in _VOID:
            continue
        if m.group(3) == b"/":  # "/>" closes it at once to libxml2, not to HTML5 (refused)
            return None
        if tag == b"style":  # raw text up to its end tag
            end = _STYLE_END.search(html, pos)
            close = None if end is None else _TOKEN.match(html, end.start())
            if close is None or close.group(2) is None or close.group(3) == b"/":
                budget[0] -= len(html) - pos  # what a failed search may have read: no rescans
                return None
            budget[0] -= close.end() - pos
            pos = close.end()
            if budget[0] < 0:
                return None
            continue
        if len(stack) >= MAX_DEPTH:
            return None
        stack.append(tag)
    return None


def _plan(html: bytes, budget: int) -> tuple[list[tuple[int, int, bytes]], int]:
    """The cuts of a page: [(end of the noise element's start tag, start of its end tag, its
    lower-case name)] in document order, and the budget left (:data:`SCAN_FACTOR`). The
    reference for ``_tagscan.plan``, which makes the same decisions ~20x faster."""
    cuts: list[tuple[int, int, bytes]] = []
    done, last, prev_trig, prev_lt, quote = 0, -1, 0, -1, -1
    left = [max(budget, -1)]
    for m in _TRIGGER.finditer(html):
        at, t = m.start(), m.end()
        lt = html.rfind(b"<", prev_trig, at)  # the last "<" before it, scanning each byte once
        start = lt if lt >= 0 else prev_lt
        prev_trig, prev_lt = at, start
        if t - at == 7:  # class="
            if quote < t:
                quote = html.find(b'"', t)
                if quote < 0:
                    quote = len(html)
            if (quote >= len(html) or quote - t > MAX_CLASS
                    or _NOISE_BYTES.isdisjoint(html[t:quote].split())):
                continue
        if start < 0 or start < done or start == last:
            continue
        last = start
        head = _noise_start(html, start)
        if head is None:
            continue
        name, tag_end = head
        end = _interior_end(html, tag_end, name, left)
        if end is None:
            if left[0] < 0:
                break
            continue
        cuts.append((tag_end, end, name))
        done = end
    return cuts, left[0]


_tagscan: ModuleType | None
try:
    _tagscan = importlib.import_module("kit.web.zim._tagscan")
except ImportError:  # not built (no C compiler at install): the same rules in Python, slower
    _tagscan = None
    logging.getLogger(__name__).warning(
        "kit.web.zim._tagscan is not built: the local web's noise cut runs in Python (~20x slower "
        "at that step); `pip install -e .` with a C compiler builds it")
else:
    if _tagscan.MAX_DEPTH != MAX_DEPTH:
        raise ImportError(f"kit.web.zim._tagscan was built with MAX_DEPTH {_tagscan.MAX_DEPTH}: rebuild it")
    _tagscan.configure(sorted(_VOID), sorted(_REFUSED), sorted(_PRIORITY.items()), 100,
                       [tuple(p.encode().split(b"/")) for p in _START_CLOSE_PAIRS.split()],
                       sorted(_CUT_TAGS), sorted(_NOISE_BYTES))


def plan(html: bytes) -> list[tuple[int, int, bytes]]:
    """:func:`_plan` of ``html`` with the page's budget, in C when ``_tagscan`` is built."""
    budget = SCAN_FACTOR * len(html) + SCAN_SLACK
    return (_tagscan.plan(html, budget) if _tagscan is not None else _plan(html, budget))[0]


def precut(html: bytes) -> tuple[bytes, list[str]]:
    """``html`` with the children of its safely cut noise elements removed and each such element
    marked (:data:`MARKER`), and the cut elements' names in document order (empty: ``html``
    itself, nothing cut). The result must pass :func:`verify` after parsing."""
    cuts = plan(html)
    if not cuts:
        return html, []
    out: list[bytes] = []
    done = 0
    for tag_end, end, _name in cuts:
        out += (html[done:tag_end - 1], _MARKER_BYTES, b">")
        done = end
    out.append(html[done:])
    return b"".join(out), [name.decode("ascii") for _, _, name in cuts]


def verify(root: lxml.etree._Element, names: list[str],
           tagged: list[tuple[lxml.etree._Element, str | None, list[str]]] | None = None) -> bool:
    """True when the parsed ``root`` of :func:`precut`'s bytes holds one marked element per cut,
    in document order, of the cut's name and with no children or text: every cut start tag was a
    tag (not text of a comment, raw-text element or attribute value). Removes the markers.

    ``tagged``: the parsed page's ``kit.web.text_clean.tagged_elements`` (elements with an id or
    class, in document order), when the caller has them: the markers are then looked for among
    their noise elements only, with no walk over the tree (~0.1 ms a realistic page). The answer
    is the same: libxml2 makes at most one attribute of each marker written in the bytes, so a
    marker on any other element leaves one fewer here, as the count check then sees."""
    if tagged is None:
        marked = _MARKED(root)
    else:
        marked = [el for el, id_, classes in tagged
                  if ((classes and not _NOISE.isdisjoint(classes)) or (id_ and id_.startswith("cite_ref")))
                  and el.get(MARKER) is not None]
    if len(marked) != len(names):
        return False
    for el, name in zip(marked, names, strict=True):
        if el.tag != name or len(el) or el.text or not is_noise(name, el.get("class"), el.get("id")):
            return False
    for el in marked:
        del el.attrib[MARKER]
    return True
