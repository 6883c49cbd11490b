"""Structure of one assistant turn (WeAgent Table 6 grammar) and of the JSON inside a tool call.

Two scanners, both linear and exception-free on any input:

* :func:`scan_json` walks a JSON object by structure (string and escape state, bracket stack, what the
  last token was), so a tag such as ``</tool_call>`` inside a JSON string is text, not a tag, and a
  body cut inside a string, key or number is recognised as cut rather than completed.
* :func:`segment` splits a turn into ``think`` / ``tool_call`` / ``response`` / ``text`` blocks; a
  ``tool_call`` body ends where its JSON ends (:func:`scan_call`), not at the first closing tag.

The grammar decisions built on these blocks (which departure is which, what is executed, what is
scored) are in :mod:`kit.harness.parsing` and docs/contracts.md "Turn grammar".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>")
_TAG_RE = re.compile("|".join(re.escape(t) for t in TAGS))
# A double- or single-quoted string from its opening quote; group 1 is the closing quote (None when the
# string runs to the end of the text).
_STRING = {'"': re.compile(r'"(?:[^"\\]|\\.)*(")?', re.S), "'": re.compile(r"'(?:[^'\\]|\\.)*(')?", re.S)}
_WORD = re.compile(r"[^\s{}\[\]:,\"'<]+")
_FENCE_OPEN = re.compile(r"```(?:json)?[ \t]*\r?\n?", re.I)
LITERALS = {"true": True, "false": False, "null": None, "none": None}  # "none"/"True": Python literals


@dataclass
class JsonScan:
    """Where a JSON value written by a model ends and in what state.

    ``end`` is the offset just past the value (``complete``), or where scanning stopped: the end of the
    text, or a turn tag outside any string (``tag``). ``in_string`` means the text ended inside a string
    (a key or a value); ``last`` is the last token kind (``open`` / ``key`` / ``colon`` / ``comma`` /
    ``string`` / ``word`` / ``close``); ``closers`` are the brackets still open, innermost last;
    ``scalars`` are ``(kind, text)`` for every bracket, key and scalar value in order (kind ``o`` a
    bracket, ``s`` a string with its raw inner text, ``w`` a bare word such as a number, literal or
    unquoted key); ``error`` names a
    structural fault (``mismatched_bracket``).
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


def scan_json(s: str, i: int = 0) -> JsonScan:
    """Scan the JSON object or array starting at ``s[i]`` (which must be ``{`` or ``[``)."""
    stack: list[str] = []
    out = JsonScan(end=i)
    n = len(s)
    while i < n:
        c = s[i]
        if c in " \t\r\n":
            i += 1
            continue
        if c in "\"'":
            m = _STRING[c].match(s, i)
            if m.group(1) is None:
                out.in_string, out.end = True, n
                return _done(out, stack)
            out.scalars.append(("s", s[i + 1:m.end() - 1]))
            out.last = "key" if _expects_key(stack, out.last) else "string"
            i = m.end()
        elif c in "{[":
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
        elif c == "<" and _TAG_RE.match(s, i):
            out.tag, out.end = _TAG_RE.match(s, i).group(0), i
            return _done(out, stack)
        else:
            m = _WORD.match(s, i)
            j = m.end() if m else i + 1  # a lone "<" that is no tag: one character of text
            out.scalars.append(("w", s[i:j]))
            out.last = "key" if _expects_key(stack, out.last) else "word"
            out.last_word = s[i:j]
            i = j
    out.end = n
    return _done(out, stack)


def _expects_key(stack: list[str], last: str) -> bool:
    return bool(stack) and stack[-1] == "}" and last in ("open", "comma")


def _done(out: JsonScan, stack: list[str]) -> JsonScan:
    out.closers = list(stack)
    return out


def cut_reason(scan: JsonScan, *, at_eof: bool, length_cut: bool) -> tuple[str, str] | None:
    """Why an incomplete scan cannot be completed with one reading: ``(code, message)``, or None when
    appending the missing closing brackets is the only reading.

    ``truncated``: the text stopped inside a string, after a key, colon or comma, inside a bare word
    (number or literal) at the end of the text, or anywhere when the turn hit the length limit.
    ``non_json``: an explicit end (a tag) after a key, colon or comma: a value is missing.
    """
    if scan.in_string:
        return "truncated", "the tool call was cut off inside a string (a key or a value)"
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
    inner: list["Block"] = field(default_factory=list)  # tool calls written inside a response


def scan_call(text: str, start: int) -> tuple[str, int, bool, bool]:
    """The body of a ``<tool_call>`` whose opening tag ends at ``start``.

    Returns ``(body, end, closed, at_eof)``: ``end`` is where the next block starts. A JSON body ends
    where its object ends (tags inside strings are text); a body that is not JSON ends at the first
    ``</tool_call>``; a JSON object followed by more text before ``</tool_call>`` keeps that text in the
    body (the decoder reports it as ``trailing_text``).
    """
    n = len(text)
    i = start
    while i < n and text[i] in " \t\r\n":
        i += 1
    fence = _FENCE_OPEN.match(text, i) if text.startswith("```", i) else None
    if fence:
        i = fence.end()
        while i < n and text[i] in " \t\r\n":
            i += 1
    if i < n and text[i] == "{":
        sc = scan_json(text, i)
        if sc.complete:
            j = sc.end
            while j < n and text[j] in " \t\r\n":
                j += 1
            if fence and text.startswith("```", j):
                j += 3
                while j < n and text[j] in " \t\r\n":
                    j += 1
            if text.startswith("</tool_call>", j):
                return text[start:j], j + len("</tool_call>"), True, False
            if j >= n:
                return text[start:j], n, False, True
            nxt = _TAG_RE.search(text, j)  # the first tag after the object (one search: linear overall)
            if nxt is not None and nxt.group(0) == "</tool_call>":
                return text[start:nxt.start()], nxt.end(), True, False
            return text[start:sc.end], sc.end, False, False
        if sc.tag == "</tool_call>":
            return text[start:sc.end], sc.end + len("</tool_call>"), True, False
        if sc.tag is not None or sc.error:
            return text[start:sc.end], sc.end, False, False
        return text[start:], n, False, True
    k = text.find("</tool_call>", i)
    if k >= 0:
        return text[start:k], k + len("</tool_call>"), True, False
    return text[start:], n, False, True


def segment(text: str) -> list[Block]:
    """Split one assistant turn into blocks, in order (see :class:`Block`)."""
    close = text.find("</think>")
    if close >= 0 and "<think>" not in text[:close]:
        # Reasoning opened by the chat template: everything before the first "</think>" is reasoning,
        # unless that tag is text inside a tool call's JSON string.
        if not any(b.kind == "tool_call" and b.start < close < b.end for b in _blocks(text, 0, [])):
            head = Block("think", 0, close + len("</think>"), text[:close], implicit=True)
            return _blocks(text, close + len("</think>"), [head])
    return _blocks(text, 0, [])


def _blocks(text: str, i: int, blocks: list[Block]) -> list[Block]:
    n = len(text)
    while i < n:
        m = _TAG_RE.search(text, i)
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
            body, end, closed, at_eof = scan_call(text, m.end())
            blocks.append(Block("tool_call", m.start(), end, body, closed=closed, at_eof=at_eof))
            i = end
        elif tag == "<response>":
            i = _response(blocks, text, m.start(), m.end())
        else:  # a closing tag with nothing open: outside the grammar
            blocks.append(Block("text", m.start(), m.end(), tag))
            i = m.end()
    return blocks


def _response(blocks: list[Block], text: str, start: int, i: int) -> int:
    """A response block from its opening tag; tool calls written inside it are cut out of the answer
    text and kept in ``inner`` (they are calls after ``<response>``)."""
    n = len(text)
    parts: list[str] = []
    inner: list[Block] = []
    while True:
        k = text.find("</response>", i)
        t = text.find("<tool_call>", i)
        if t >= 0 and (k < 0 or t < k):
            parts.append(text[i:t])
            body, end, closed, at_eof = scan_call(text, t + len("<tool_call>"))
            inner.append(Block("tool_call", t, end, body, closed=closed, at_eof=at_eof))
            i = end
            continue
        if k < 0:
            parts.append(text[i:])
            blocks.append(Block("response", start, n, "".join(parts), closed=False, at_eof=True, inner=inner))
            return n
        parts.append(text[i:k])
        blocks.append(Block("response", start, k + len("</response>"), "".join(parts), inner=inner))
        return k + len("</response>")


def _text_block(blocks: list[Block], text: str, a: int, b: int) -> None:
    if a < b and text[a:b].strip():
        blocks.append(Block("text", a, b, text[a:b]))
