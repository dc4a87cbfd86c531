"""``vtrain export FORMAT SESSION``: write a session in another tool's form.

``megatron-args``: the torchrun command and Megatron-LM arguments that run the plan
(core/megatron_args.py). Text from the session is data: the script quotes it for the shell
(:mod:`core.text`), and what reaches the terminal shows control characters as escapes.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import refuse_output_is_input

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``export`` subcommand (and its formats) to ``vtrain``'s sub-parsers."""
    exp = sub.add_parser("export", help="write a session in another tool's form")
    esub = exp.add_subparsers(dest="export_command", required=True, metavar="FORMAT")
    e = esub.add_parser(
        "megatron-args", help="Megatron-LM arguments and the torchrun line that run the plan",
        description="Print the torchrun command with the Megatron-LM arguments that run the "
                    "session's model and plan (one argument per line).")
    e.add_argument("session", metavar="SESSION.json", help="session file (or vTrain config)")
    e.add_argument("--out", metavar="FILE.sh", help="write the script to FILE.sh instead")
    e.add_argument("--script", default="pretrain_gpt.py", help="training script (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain export``; returns the exit status."""
    from ..megatron_args import export_script
    from ..session import atomic_write_text, load_any
    from ..text import printable, terminal_text

    refuse_output_is_input([("--out", args.out)], [args.session])
    text = export_script(load_any(args.session), args.script)
    if args.out:
        atomic_write_text(args.out, text)
        print(f"wrote {printable(args.out)}")
    else:  # the script holds no raw control character; terminal_text keeps it that way
        print(terminal_text(text), end="")
    return 0
