"""Reading trace files whose layout is not known in advance (issue 14 part 4: "a damaged file is
quarantined with a reason, never a traceback").

A file is one of: a JSON document (an object, or a list of objects), several JSON documents one
after another (pretty-printed cases concatenated), or JSON lines. The layout is decided by the
content, never by the suffix or by the first line alone:

1. the whole text parses as a sequence of JSON documents -> those documents (a top-level list is
   its items);
2. otherwise, if at least two non-empty lines are JSON objects on their own, or one is and no line
   is indented (pretty-printed JSON is indented, JSON lines never are) -> JSON lines, each line on
   its own: a damaged line is one marker;
3. otherwise a sequence of documents with damage: documents are read with ``raw_decode``; at a
   damaged place one marker covers the text up to the next line that starts a new top-level
   object (``{`` in column 0), where reading resumes.

A marker is ``{"_unparsable", "_reason", "_error"}`` (reason ``unparsable_json``, ``bad_encoding``
or ``empty_file``: no content, or an empty list); its ``_error`` names the file and line. JSON nested deeper than Python's
recursion limit is ``unparsable_json`` (the decoders raise ``RecursionError`` there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")
_NEW_OBJECT = re.compile(r"^\{", re.M)


def marker(reason: str, detail: str, raw: str = "") -> dict:
    """A row the normalizer quarantines with ``reason`` (see the module docstring)."""
    return {"_unparsable": raw[:200], "_reason": reason, "_error": detail}


def _loads(text: str) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, why)``: never raises on content."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, str(e)
    except RecursionError:
        return None, "nested too deeply to decode"


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _documents(text: str, name: str, strict: bool) -> tuple[list[Any], bool]:
    """JSON documents one after another; ``(rows, clean)``. With ``strict`` stop at the first damage
    (``clean`` False); otherwise damaged stretches become markers and reading resumes at the next
    top-level object."""
    out: list[Any] = []
    pos, n = _WS.match(text, 0).end(), len(text)
    clean = True
    while pos < n:
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as e:
            clean = False
            if strict:
                return out, False
            why = str(e) if isinstance(e, json.JSONDecodeError) else "nested too deeply to decode"
            nxt = _NEW_OBJECT.search(text, pos + 1)
            end = nxt.start() if nxt else n
            out.append(marker("unparsable_json", f"{name} line {_line_of(text, pos)}: {why}", text[pos:end]))
        else:
            out.extend(obj if isinstance(obj, list) else [obj])
        pos = _WS.match(text, end).end()
    return out, clean


def read_json_rows(path: str | Path) -> Iterator[Any]:
    """Rows of a JSON / JSON-lines file laid out in any of the ways above (a UTF-8 byte-order mark
    is ignored). Never raises on content: damage becomes markers (an empty or blank file is one
    ``empty_file`` marker, so it is counted).

    Raises:
        OSError: the file cannot be opened.
    """
    p = Path(path)
    data = p.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        yield marker("empty_file", f"{p.name}: no content")
        return
    try:
        whole: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        whole = None
    if whole is not None:
        rows, clean = _documents(whole, p.name, strict=True)
        if clean:
            if not rows:  # "[]": nothing to normalize is still a line in the report
                yield marker("empty_file", f"{p.name}: no rows")
            yield from rows
            return
    lines = [(i, ln) for i, ln in enumerate(data.split(b"\n"), 1) if ln.strip()]
    parsed: list[tuple[int, Any, str | None, str]] = []
    for i, ln in lines:
        try:
            text = ln.decode("utf-8")
        except UnicodeDecodeError as e:
            parsed.append((i, None, f"bad_encoding:{e}", ln.decode("utf-8", "replace")))
            continue
        obj, why = _loads(text)
        parsed.append((i, obj, why, text))
    objects = sum(isinstance(obj, dict) and why is None for _, obj, why, _ in parsed)
    indented = any(ln[:1] in (b" ", b"\t") for _, ln in lines)
    if objects < 2 and (objects == 0 or indented) and whole is None:  # not text, not JSON lines
        yield marker("bad_encoding", f"{p.name}: not UTF-8 and no line is a JSON object")
        return
    if objects >= 2 or (objects == 1 and not indented) or whole is None:
        for i, obj, why, text in parsed:
            if why is None:
                yield obj
            elif why.startswith("bad_encoding:"):
                yield marker("bad_encoding", f"{p.name} line {i}: {why.split(':', 1)[1]}", text)
            else:
                yield marker("unparsable_json", f"{p.name} line {i}: {why}", text)
        return
    yield from _documents(whole, p.name, strict=False)[0]
