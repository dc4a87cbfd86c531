"""``vtrain export FORMAT SESSION``: write a session in another tool's form.

``megatron-args``: the torchrun command and Megatron-LM arguments that run the plan
(core/io/megatron/from_session.py), or, with ``--into train.sh --out new.sh``, the user's own launch script
with the plan's arguments replaced (core/io/megatron/export.py). Text from the session is data: the
script quotes it for the shell (:mod:`core.util.text`), and what reaches the terminal shows control
characters as escapes.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import field_error, check_outputs, path_arg

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``export`` subcommand (and its formats) to ``vtrain``'s sub-parsers."""
    exp = sub.add_parser("export", help="write a session in another tool's form")
    esub = exp.add_subparsers(dest="export_command", required=True, metavar="FORMAT")
    e = esub.add_parser(
        "megatron-args", help="Megatron-LM arguments and the torchrun line that run the plan",
        description="Print the torchrun command with the Megatron-LM arguments that run the "
                    "session's model and plan (one argument per line), with the environment "
                    "Megatron-LM requires. A plan Megatron-LM refuses at start-up is refused, "
                    "naming Megatron's rule (exit status 2). With --into SCRIPT --out NEW, "
                    "rewrite your own launch script instead: the plan's arguments replaced, "
                    "every other line kept, the diff printed.")
    e.add_argument("session", type=path_arg, metavar="SESSION.json", help="session file (or vTrain config)")
    e.add_argument("--out", type=path_arg, metavar="FILE.sh", help="write the script to FILE.sh instead "
                   "(atomically; required with --into)")
    e.add_argument("--into", type=path_arg, metavar="SCRIPT.sh", help="your launch script: write it to --out "
                   "with the plan's arguments in place of its own, and print the diff")
    e.add_argument("--script", default="pretrain_gpt.py", help="training script (default %(default)s)")
    e.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="with --into: a value of your script's environment or a positional "
                        "parameter (--var TP=2, --var 1=/data/ckpt), as vtrain import "
                        "megatron-args takes it; repeatable. The script is read with it, never "
                        "run, and written without it. A tokenizer whose vocabulary size is in "
                        "its files is read with the session's model.vocab_size")


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain export``; returns the exit status."""
    from core.io.megatron.export import export_script
    from core.io.session import atomic_write_text, load_any
    from core.util.text import printable, terminal_text

    if args.var and not args.into:
        raise field_error("--var", "reads your launch script: give it with --into SCRIPT.sh")
    if args.into and not args.out:
        raise field_error("--into", "needs --out NEW.sh (the script is never rewritten in place)")
    if not args.script.strip():  # torchrun '' runs nothing: no launch at all
        raise field_error("--script", f"{args.script!r}: give the training script (default "
                                      "pretrain_gpt.py)")
    check_outputs([("--out", args.out)], [args.session, args.into])
    session = load_any(args.session)
    if args.into:
        return _into(session, args)
    text = export_script(session, args.script)
    if args.out:
        atomic_write_text(args.out, text)
        print(f"wrote {printable(args.out)}")
    else:  # the script holds no raw control character; terminal_text keeps it that way
        print(terminal_text(text), end="")
    return 0


def _into(session: Any, args: argparse.Namespace) -> int:
    """``--into SCRIPT --out NEW``: the user's script with the plan; the diff on stdout."""
    from core.util.inputs import read_text
    from core.io.megatron.arguments import MegatronArgsError
    from core.io.megatron.export import rewrite_script, unified_diff
    from core.io.megatron.to_session import parse_variables
    from core.io.session import atomic_write_text
    from core.util.text import printable, terminal_text

    old = read_text(args.into, MegatronArgsError, "launch", encoding="utf-8")
    variables = parse_variables(args.var)
    new = rewrite_script(session, old, str(args.into), args.script, variables)
    atomic_write_text(args.out, new)
    print(terminal_text(unified_diff(old, new, str(args.into), str(args.out))), end="")
    print(f"wrote {printable(args.out)}")
    return 0
