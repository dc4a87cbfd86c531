"""The rich console the command line prints through.

rich's own :class:`rich.console.Console` exits with status 1 when the reader of a pipe goes
away (``vtrain ... | head``); this one raises :class:`BrokenPipeError` instead, which
:func:`core.cli.main` turns into a quiet exit with status 0, as for plain output. Written
to a pipe or a file (and with no ``COLUMNS`` set) it does not hard-wrap text at 80
columns, so values and warnings stay on one line for ``grep`` and logs; there its lines
carry no trailing spaces (rich pads every row of a table to the table's width), with
``COLUMNS`` set too.

Text that comes from files (model names, GPU kinds, job names, paths, provenance, warnings
quoting them) goes through :func:`esc` before it is put into markup or a table cell.
"""
from __future__ import annotations

import os
from typing import IO, Any

import rich.console
import rich.markup

from core.util.text import printable

__all__ = ["Console", "esc", "printable", "PIPE_WIDTH"]

#: Width of tables written to a pipe or a file.
PIPE_WIDTH = 160


class Console(rich.console.Console):
    """A :class:`rich.console.Console` whose broken pipe is an ordinary ``BrokenPipeError``
    and whose text is not wrapped when it goes to a pipe or a file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_terminal:
            if "COLUMNS" not in os.environ and "width" not in kwargs:
                self.width = PIPE_WIDTH
                self.soft_wrap = True
            self.file = _StripTrailingSpaces(self.file)

    def on_broken_pipe(self) -> None:
        """Stop printing and raise ``BrokenPipeError`` (rich's default raises ``SystemExit(1)``)."""
        self.quiet = True
        raise BrokenPipeError


class _StripTrailingSpaces:
    """A text stream that writes each complete line of what it is given without trailing spaces
    (what a table padded to its width leaves in a pipe or a file); a line not yet ended is kept
    until its end arrives or the stream is flushed."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def esc(text: Any) -> str:
    """``text`` as data inside rich markup: :func:`printable`, then rich's markup escaped, so
    a model name like ``[/x]`` or ``[bold]`` prints as written and never as markup."""
    return rich.markup.escape(printable(text))
