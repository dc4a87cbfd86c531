"""The rich console the command line prints through.

rich's own :class:`rich.console.Console` exits with status 1 when the reader of a pipe goes
away (``vtrain ... | head``); this one raises :class:`BrokenPipeError` instead, which
:func:`core.cli.main` turns into a quiet exit with status 0, as for plain output. Written
to a pipe or a file (and with no ``COLUMNS`` set) it does not hard-wrap text at 80
columns, so values and warnings stay on one line for ``grep`` and logs.

Text that comes from files (model names, GPU kinds, job names, paths, provenance, warnings
quoting them) goes through :func:`esc` before it is put into markup or a table cell.
"""
from __future__ import annotations

import os
import re
from typing import Any

import rich.console
import rich.markup

__all__ = ["Console", "esc", "printable", "PIPE_WIDTH"]

#: Width of tables written to a pipe or a file.
PIPE_WIDTH = 160


class Console(rich.console.Console):
    """A :class:`rich.console.Console` whose broken pipe is an ordinary ``BrokenPipeError``
    and whose text is not wrapped when it goes to a pipe or a file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_terminal and "COLUMNS" not in os.environ and "width" not in kwargs:
            self.width = PIPE_WIDTH
            self.soft_wrap = True

    def on_broken_pipe(self) -> None:
        """Stop printing and raise ``BrokenPipeError`` (rich's default raises ``SystemExit(1)``)."""
        self.quiet = True
        raise BrokenPipeError


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


def esc(text: Any) -> str:
    """``text`` as data inside rich markup: :func:`printable`, then rich's markup escaped, so
    a model name like ``[/x]`` or ``[bold]`` prints as written and never as markup."""
    return rich.markup.escape(printable(text))
