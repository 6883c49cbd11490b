"""Structure of one assistant turn (WeAgent Table 6 grammar) and of the JSON inside a tool call.

Two scanners, both linear and exception-free on any input:

* :func:`scan_json` walks a JSON object by structure (string and escape state, bracket stack, what the
  last token was), so a tag such as ``</tool_call>`` inside a JSON string is text, not a tag, and a
  body cut inside a string, key or number is recognised as cut rather than completed.
* :func:`segment` splits a turn into ``think`` / ``tool_call`` / ``response`` / ``text`` blocks; a
  ``tool_call`` body ends where its JSON ends (:func:`scan_call`), not at the first closing tag.

Bounds that keep every decoder linear and safe: JSON nesting deeper than :data:`MAX_DEPTH` levels is
an error of the scanner (``too_deep``), before ``json.loads`` or json-repair see the text; inside a
``<response>`` a tool call is scanned only up to that response's ``</response>`` (the answer's end is
never eaten), and a ``<tool_call>`` there that opens no JSON object is answer text.

The grammar decisions built on these blocks (which departure is which, what is executed, what is
scored) are in :mod:`kit.harness.parsing` and docs/contracts.md "Turn grammar".
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>")
_TAG_RE = re.compile("|".join(re.escape(t) for t in TAGS))


@dataclass(frozen=True)
class TurnTags:
    """The tags of one turn grammar: ``answer`` names the final-answer block (WeAgent Table 6:
    ``response``; POINTS-Seeker §3.2.2: ``answer``); ``<think>`` and ``<tool_call>`` are shared.
    ``tags``: every tag the scanners treat as a turn tag; ``regex`` matches any of them."""

    answer: str
    tags: tuple[str, ...]
    regex: re.Pattern

    @property
    def open(self) -> str:
        return f"<{self.answer}>"

    @property
    def close(self) -> str:
        return f"</{self.answer}>"


@functools.lru_cache(maxsize=8)
def turn_tags(answer: str = "response") -> TurnTags:
    """The :class:`TurnTags` whose final-answer block is ``<answer>...</answer>`` for ``answer``.

    Raises:
        ValueError: ``answer`` is not a lower-case tag name, or is ``think`` / ``tool_call``."""
    if not isinstance(answer, str) or not re.fullmatch(r"[a-z][a-z_]{0,31}", answer) or answer in ("think", "tool_call"):
        raise ValueError(f"answer tag {answer!r}: a lower-case name other than 'think' and 'tool_call' is needed")
    tags = ("<think>", "</think>", "<tool_call>", "</tool_call>", f"<{answer}>", f"</{answer}>")
    regex = _TAG_RE if answer == "response" else re.compile("|".join(re.escape(t) for t in tags))
    return TurnTags(answer, tags, regex)


# A double- or single-quoted string from its opening quote; group 1 is the closing quote (None when the
# string runs to the end of the text).
_STRING = {'"': re.compile(r'"(?:[^"\\]|\\.)*(")?', re.S), "'": re.compile(r"'(?:[^'\\]|\\.)*(')?", re.S)}
_WORD = re.compile(r"[^\s{}\[\]:,\"'<]+")
_FENCE_OPEN = re.compile(r"```(?:json)?[ \t]*\r?\n?", re.I)
LITERALS = {"true": True, "false": False, "null": None, "none": None}  # "none"/"True": Python literals
MAX_DEPTH = 64  # JSON nesting levels a tool call may use (real calls use 2-4)


@dataclass
class JsonScan:
    """Where a JSON value written by a model ends and in what state.

    ``end`` is the offset just past the value (``complete``), or where scanning stopped: the end of the
    text, or a turn tag outside any string (``tag``). ``in_string`` means the text ended inside a string
    (a key or a value); ``last`` is the last token kind (``open`` / ``key`` / ``colon`` / ``comma`` /
    ``string`` / ``word`` / ``close``); ``closers`` are the brackets still open, innermost last;
    ``scalars`` are ``(kind, text)`` for every bracket, key and scalar value in order (kind ``o`` a
    bracket, ``s`` a string value with its raw inner text, ``w`` a bare-word value such as a number or
    literal, ``k`` a quoted key (raw inner text), ``kw`` an unquoted key); ``error`` names a structural
    fault: ``mismatched_bracket``, ``missing_colon`` (a key not followed by ``:``, e.g. an unescaped
    quote ends a string early), ``too_deep`` (more than :data:`MAX_DEPTH` levels); ``end`` is then
    where the fault is.
    """

    end: int
    complete: bool = False
    in_string: bool = False
    tag: str | None = None
    last: str = "open"
    last_word: str = ""
    closers: list[str] = field(default_factory=list)
    scalars: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None


def scan_json(s: str, i: int = 0, end: int | None = None, tags: TurnTags | None = None) -> JsonScan:
    """Scan the JSON object or array starting at ``s[i]`` (which must be ``{`` or ``[``), reading no
    further than ``end`` (default: the end of ``s``); ``tags``: the turn tags that end it outside a
    string (default: Table 6's)."""
    tag_re = _TAG_RE if tags is None else tags.regex
    stack: list[str] = []
    out = JsonScan(end=i)
    n = len(s) if end is None else end
    while i < n:
        c = s[i]
        if c in " \t\r\n":
            i += 1
            continue
        if out.last == "key" and c != ":":
            out.error, out.end = "missing_colon", i
            return _done(out, stack)
        if c in "\"'":
            m = _STRING[c].match(s, i, n)
            assert m is not None  # the pattern matches the opening quote at least
            if m.group(1) is None:
                out.in_string, out.end = True, n
                return _done(out, stack)
            key = _expects_key(stack, out.last)
            out.scalars.append(("k" if key else "s", s[i + 1:m.end() - 1]))
            out.last = "key" if key else "string"
            i = m.end()
        elif c in "{[":
            if len(stack) >= MAX_DEPTH:
                out.error, out.end = "too_deep", i
                return _done(out, stack)
            stack.append("}" if c == "{" else "]")
            out.scalars.append(("o", c))
            out.last = "open"
            i += 1
        elif c in "}]":
            if not stack or stack[-1] != c:
                out.error, out.end = "mismatched_bracket", i
                return _done(out, stack)
            stack.pop()
            out.scalars.append(("o", c))
            out.last = "close"
            i += 1
            if not stack:
                out.complete, out.end = True, i
                return _done(out, stack)
        elif c == ":":
            out.last, i = "colon", i + 1
        elif c == ",":
            out.last, i = "comma", i + 1
        elif c == "<" and (tag := tag_re.match(s, i, n)):
            out.tag, out.end = tag.group(0), i
            return _done(out, stack)
        else:
            m = _WORD.match(s, i, n)
            j = m.end() if m else i + 1  # a lone "<" that is no tag: one character of text
            key = _expects_key(stack, out.last)
            out.scalars.append(("kw" if key else "w", s[i:j]))
            out.last = "key" if key else "word"
            out.last_word = s[i:j]
            i = j
    out.end = n
    return _done(out, stack)


def _expects_key(stack: list[str], last: str) -> bool:
    # in an object, a token after "{" or "," is a key; one right after a value is a key with its comma
    # missing (a colon must follow, else ``missing_colon``)
    return bool(stack) and stack[-1] == "}" and last in ("open", "comma", "string", "word", "close")


def _done(out: JsonScan, stack: list[str]) -> JsonScan:
    out.closers = list(stack)
    return out


def cut_reason(scan: JsonScan, *, at_eof: bool, length_cut: bool) -> tuple[str, str] | None:
    """Why an incomplete scan cannot be completed with one reading: ``(code, message)``, or None when
    appending the missing closing brackets is the only reading.

    ``truncated``: the text stopped at the end of the output inside a string, after a key, colon or
    comma, or inside a bare word (number or literal), or anywhere when the turn hit the length limit.
    ``non_json``: an explicit end (a tag, or the ``</response>`` that bounds a call inside an answer)
    after a key, colon or comma, or inside a string: a value is missing.
    """
    if scan.in_string:
        if at_eof:
            return "truncated", "the tool call was cut off inside a string (a key or a value)"
        return "non_json", "incomplete JSON: a string is not closed before the end of the response"
    if length_cut and at_eof:
        return "truncated", "the tool call was cut off by the response length limit before it was complete"
    if scan.last in ("open", "key", "colon", "comma"):
        where = {"open": "an opening bracket", "key": "a key", "colon": "a colon", "comma": "a comma"}[scan.last]
        if at_eof:
            return "truncated", f"the tool call was cut off after {where}"
        return "non_json", f"incomplete JSON: a value is missing after {where}"
    if scan.last == "word" and at_eof and scan.last_word.lower() not in LITERALS:
        return "truncated", f"the tool call was cut off after {scan.last_word[:40]!r} (a number may be cut)"
    return None


@dataclass
class Block:
    """One span of a turn: ``kind`` is ``think`` / ``tool_call`` / ``response`` / ``text`` (anything
    outside the grammar, including stray closing tags). ``body`` is the inner text; ``closed`` whether
    the closing tag was written; ``implicit`` for a reasoning block whose ``<think>`` the chat template
    wrote (the turn starts with reasoning and a lone ``</think>``); ``at_eof`` when the body runs to the
    end of the turn without its closing tag."""

    kind: str
    start: int
    end: int
    body: str
    closed: bool = True
    implicit: bool = False
    at_eof: bool = False
    inner: list[Block] = field(default_factory=list)  # tool calls written inside a response


def scan_call(text: str, start: int, limit: int | None = None,
              tags: TurnTags | None = None) -> tuple[str, int, bool, bool]:
    """The body of a ``<tool_call>`` whose opening tag ends at ``start``, read no further than ``limit``
    (default: the end of ``text``).

    Returns ``(body, end, closed, at_eof)``: ``end`` is where the next block starts; ``at_eof`` when the
    body runs to the end of ``text`` unclosed. A JSON body ends where its object ends (tags inside
    strings are text); a JSON object followed by more text before ``</tool_call>`` keeps that text in
    the body (the decoder reports it as ``trailing_text``). A body that is not JSON, or whose JSON has a
    structural fault, ends at the first ``</tool_call>``, or unclosed at the first other turn tag
    (``tags``: default Table 6's).
    """
    tag_re = _TAG_RE if tags is None else tags.regex
    n = len(text) if limit is None else limit
    i = _skip_fence(text, start, n)
    if i < n and text[i] == "{":
        sc = scan_json(text, i, n, tags)
        if sc.complete:
            j = sc.end
            while j < n and text[j] in " \t\r\n":
                j += 1
            if text.startswith("```", j, n):
                j += 3
                while j < n and text[j] in " \t\r\n":
                    j += 1
            if text.startswith("</tool_call>", j, n):
                return text[start:j], j + len("</tool_call>"), True, False
            if j >= n:
                return text[start:j], n, False, n == len(text)
            nxt = tag_re.search(text, j, n)  # the first tag after the object (one search: linear overall)
            if nxt is not None and nxt.group(0) == "</tool_call>":
                return text[start:nxt.start()], nxt.end(), True, False
            return text[start:sc.end], sc.end, False, False
        if sc.tag == "</tool_call>":
            return text[start:sc.end], sc.end + len("</tool_call>"), True, False
        if sc.tag is not None:
            return text[start:sc.end], sc.end, False, False
        if not sc.error:
            return text[start:n], n, False, n == len(text)
        i = sc.end
    nxt = tag_re.search(text, i, n)
    if nxt is not None and nxt.group(0) == "</tool_call>":
        return text[start:nxt.start()], nxt.end(), True, False
    if nxt is not None:
        return text[start:nxt.start()], nxt.start(), False, False
    return text[start:n], n, False, n == len(text)


def _skip_fence(text: str, i: int, n: int) -> int:
    """Past leading whitespace and an opening code fence (```json) of a tool-call body."""
    while i < n and text[i] in " \t\r\n":
        i += 1
    fence = _FENCE_OPEN.match(text, i, n) if text.startswith("```", i, n) else None
    if fence:
        i = fence.end()
        while i < n and text[i] in " \t\r\n":
            i += 1
    return i


class _Next:
    """First occurrence of ``needle`` at or after a position; for non-decreasing positions each search
    resumes past the last one, so all searches together read the text once (a cached miss stays a
    miss)."""

    def __init__(self, text: str, needle: str):
        self.text, self.needle, self.frm = text, needle, 0
        self.hit: int | None = None

    def at(self, i: int) -> int:
        hit = self.hit
        if hit is None or i < self.frm or 0 <= hit < i:
            self.frm, hit = i, self.text.find(self.needle, i)
            self.hit = hit
        return hit


def segment(text: str, answer_tag: str = "response") -> list[Block]:
    """Split one assistant turn into blocks, in order (see :class:`Block`). ``answer_tag``: the
    final-answer block's tag name (:func:`turn_tags`); its blocks have kind ``response`` whatever
    the name.

    Raises:
        ValueError: a bad ``answer_tag`` (:func:`turn_tags`)."""
    tags = turn_tags(answer_tag)
    close = text.find("</think>")
    if close >= 0 and "<think>" not in text[:close]:
        # Reasoning opened by the chat template: everything before the first "</think>" is reasoning,
        # unless that tag is text inside a tool call (a JSON string) or inside an answer.
        plain = _blocks(text, 0, [], tags)
        if not any(b.kind in ("tool_call", "response") and b.start < close < b.end for b in plain):
            head = Block("think", 0, close + len("</think>"), text[:close], implicit=True)
            return _blocks(text, close + len("</think>"), [head], tags)
        return plain
    return _blocks(text, 0, [], tags)


def _blocks(text: str, i: int, blocks: list[Block], tags: TurnTags) -> list[Block]:
    n = len(text)
    nxt = {t: _Next(text, t) for t in (tags.close, tags.open, "<tool_call>")}
    while i < n:
        m = tags.regex.search(text, i)
        if m is None:
            _text_block(blocks, text, i, n)
            break
        _text_block(blocks, text, i, m.start())
        tag = m.group(0)
        if tag == "<think>":
            k = text.find("</think>", m.end())
            if k < 0:
                blocks.append(Block("think", m.start(), n, text[m.end():], closed=False, at_eof=True))
                break
            blocks.append(Block("think", m.start(), k + len("</think>"), text[m.end():k]))
            i = k + len("</think>")
        elif tag == "<tool_call>":
            body, end, closed, at_eof = scan_call(text, m.end(), tags=tags)
            blocks.append(Block("tool_call", m.start(), end, body, closed=closed, at_eof=at_eof))
            i = end
        elif tag == tags.open:
            i = _response(blocks, text, m.start(), m.end(), nxt, tags)
        else:  # a closing tag with nothing open: outside the grammar
            blocks.append(Block("text", m.start(), m.end(), tag))
            i = m.end()
    return blocks


def _response(blocks: list[Block], text: str, start: int, i: int, nxt: dict[str, _Next], tags: TurnTags) -> int:
    """A response (final-answer) block from its opening tag (``tags.open``); returns where the next block starts.

    Tool calls written inside it (a ``<tool_call>`` that opens a JSON object) are cut out of the answer
    text and kept in ``inner`` (they are calls after ``<response>``); they are scanned no further than
    this response's ``</response>``. A ``<tool_call>`` that opens no object is answer text. A
    ``<response>`` before the closing tag ends this response unclosed and starts the next one.
    """
    n = len(text)
    k = nxt[tags.close].at(i)
    lim = k if k >= 0 else n
    parts: list[str] = []
    inner: list[Block] = []
    while True:
        t, r = nxt["<tool_call>"].at(i), nxt[tags.open].at(i)
        t = t if 0 <= t < lim else -1
        r = r if 0 <= r < lim else -1
        if r >= 0 and (t < 0 or r < t):
            parts.append(text[i:r])
            blocks.append(Block("response", start, r, "".join(parts), closed=False, inner=inner))
            return r
        if t >= 0:
            parts.append(text[i:t])
            j = t + len("<tool_call>")
            b = _skip_fence(text, j, lim)
            if b >= lim or text[b] != "{":  # the tag is mentioned in the answer, not a call
                parts.append("<tool_call>")
                i = j
                continue
            body, end, closed, at_eof = scan_call(text, j, lim, tags)
            inner.append(Block("tool_call", t, end, body, closed=closed, at_eof=at_eof))
            i = end
            continue
        parts.append(text[i:lim])
        if k < 0:
            blocks.append(Block("response", start, n, "".join(parts), closed=False, at_eof=True, inner=inner))
            return n
        blocks.append(Block("response", start, k + len(tags.close), "".join(parts), inner=inner))
        return k + len(tags.close)


def _text_block(blocks: list[Block], text: str, a: int, b: int) -> None:
    if a < b and text[a:b].strip():
        blocks.append(Block("text", a, b, text[a:b]))
