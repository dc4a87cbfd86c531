"""Text from files shown safely: control characters as escapes (no third-party imports, so
the command line's error path loads nothing heavy)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["printable", "format_params"]

# Characters that must not reach a terminal raw: C0/C1 controls (escape sequences, carriage
# returns, bells) and the Unicode line separators and bidirectional overrides that reorder
# or hide text.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: Any) -> str:
    """``str(text)`` with control characters shown as escapes (``\\x1b``, ``\\n``, ``\\u202e``):
    what a file says is printed literally, never acted on by the terminal."""
    def sub(m: re.Match) -> str:
        c = m.group()
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return _UNSAFE.sub(sub, str(text))


def format_params(n: float) -> str:
    """A count of parameters or tokens for people: ``"65.7B"``, ``"154M"``, ``"1.2T"``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"
