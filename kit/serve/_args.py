"""argparse types shared by ``serve-web`` and ``serve-mcp``: a bad number is an argparse error (exit 2,
usage line) before any archive is opened or index loaded, not a traceback after."""

from __future__ import annotations

import argparse


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: the system picks a free one). Raises ``argparse.ArgumentTypeError``."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port {n} is out of range (0-65535)")
    return n


def positive_int(text: str) -> int:
    """An integer >= 1. Raises ``argparse.ArgumentTypeError``."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n
