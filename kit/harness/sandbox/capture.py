"""Bounded capture of one call's stdout/stderr, and the framed command/response channel.

The child's fds 1 and 2 are pipes read here, so output of ``print``, subprocesses and C extensions is
captured alike; the driver ends each call's output with a random sentinel. Memory stays bounded: a
:class:`_Capture` keeps the head and tail of a stream (``max_output_chars``) and counts the rest, and
:func:`_pump` raises :class:`_OutputOverflow` past ``max_output_bytes`` (the call is then killed).
Commands and responses travel as 4-byte big-endian length + UTF-8 JSON frames on separate pipes.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import struct
from collections.abc import Mapping

_FRAME = struct.Struct(">I")
MAX_RESPONSE_BYTES = 1 << 20  # responses are a few hundred bytes; more means a corrupt channel
_READ_CHUNK = 1 << 18
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


class _Capture:
    """Bounded capture of one output stream for one call: keeps the first and last bytes (enough for
    ``max_chars`` characters each side) and counts everything, so memory stays O(max_chars)."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.side_bytes = 4 * max_chars  # UTF-8 needs at most 4 bytes per character
        self.head = bytearray()
        self.tail = bytearray()
        self.total_bytes = 0
        self.total_chars = 0  # counted as UTF-8 lead bytes; exact for valid UTF-8
        self.trimmed = False  # bytes were dropped between head and tail

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total_bytes += len(data)
        # isascii() is a fast scan; only non-ASCII chunks pay for counting UTF-8 lead bytes.
        self.total_chars += len(data) if data.isascii() else len(data.translate(None, _UTF8_CONTINUATION))
        room = self.side_bytes - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self.side_bytes:  # the whole old tail falls out: keep only the newest bytes
            self.trimmed = self.trimmed or bool(self.tail) or len(data) > self.side_bytes
            self.tail = bytearray(data[-self.side_bytes:])
            return
        self.tail += data
        extra = len(self.tail) - self.side_bytes
        if extra > 0:
            del self.tail[:extra]
            self.trimmed = True

    def text(self) -> str:
        if not self.trimmed:
            full = bytes(self.head + self.tail).decode("utf-8", errors="replace")
            if len(full) <= self.max_chars:
                return full
            head_text, tail_text = full, full
        else:
            head_text = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self.head), final=False)
            tail = bytes(self.tail)
            start = 0
            while start < min(len(tail), 3) and 0x80 <= tail[start] < 0xC0:  # skip a split character
                start += 1
            tail_text = tail[start:].decode("utf-8", errors="replace")
        keep_head = self.max_chars // 2
        keep_tail = self.max_chars - keep_head
        shown_head = head_text[:keep_head]
        shown_tail = tail_text[-keep_tail:] if keep_tail else ""
        omitted = max(self.total_chars - len(shown_head) - len(shown_tail), 0)
        return (f"{shown_head}\n[... output truncated: {omitted:,} characters omitted "
                f"({self.total_bytes:,} bytes in total; limit {self.max_chars:,} characters) ...]\n{shown_tail}")


class _OutputOverflow(Exception):
    pass


async def _pump(stream: asyncio.StreamReader, cap: _Capture, sentinel: bytes, carry: bytes,
                hard_limit: int, spill: list[bytes]) -> bool:
    """Read ``stream`` into ``cap`` until this call's ``sentinel``; bytes after it are left in
    ``spill`` for the next call. Returns False at EOF without the sentinel; raises
    :class:`_OutputOverflow` past ``hard_limit`` bytes."""
    keep = len(sentinel) - 1  # a sentinel may straddle two reads
    pending = carry
    try:
        while True:
            i = pending.find(sentinel)
            if i >= 0:
                cap.feed(pending[:i])
                spill.append(pending[i + len(sentinel):])
                return True
            if len(pending) > keep:
                cap.feed(pending[: len(pending) - keep])
                pending = pending[len(pending) - keep:]
            if cap.total_bytes > hard_limit:
                raise _OutputOverflow
            data = await stream.read(_READ_CHUNK)
            if not data:
                cap.feed(pending)
                pending = b""
                return False
            pending += data
    except asyncio.CancelledError:
        cap.feed(pending)
        raise


async def finish_pumps(pumps: Mapping[int, asyncio.Future]) -> None:
    """Cancel the pumps still reading and wait for all of them."""
    for t in pumps.values():
        if not t.done():
            t.cancel()
    await asyncio.gather(*pumps.values(), return_exceptions=True)


async def read_frame(reader: asyncio.StreamReader) -> dict:
    """One response frame as a dict. Raises ``asyncio.IncompleteReadError`` at EOF, ``ValueError``
    for an oversized frame or a body that is not a JSON object."""
    (n,) = _FRAME.unpack(await reader.readexactly(_FRAME.size))
    if n > MAX_RESPONSE_BYTES:
        raise ValueError(f"response frame of {n} bytes")
    msg = json.loads((await reader.readexactly(n)).decode("utf-8"))
    if not isinstance(msg, dict):
        raise ValueError("response is not a JSON object")
    return msg


def encode_frame(obj: dict) -> bytes:
    """``obj`` as one command frame."""
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
    return _FRAME.pack(len(data)) + data
