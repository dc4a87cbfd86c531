"""The rich console the command line prints through.

rich's own :class:`rich.console.Console` exits with status 1 when the reader of a pipe goes
away (``vtrain ... | head``); this one raises :class:`BrokenPipeError` instead, which
:func:`core.cli.main` turns into a quiet exit with status 0, as for plain output.
"""
from __future__ import annotations

import rich.console


class Console(rich.console.Console):
    """A :class:`rich.console.Console` whose broken pipe is an ordinary ``BrokenPipeError``."""

    def on_broken_pipe(self) -> None:
        """Stop printing and raise ``BrokenPipeError`` (rich's default raises ``SystemExit(1)``)."""
        self.quiet = True
        raise BrokenPipeError
