"""The ``vtrain`` command line.

``vtrain simulate PATH``   predict one iteration of a session or vTrain config
``vtrain gui [PATH]``      open the desktop window
``vtrain profile ...``     generate or inspect profile stores
``vtrain sweep CONFIG``    every valid plan, time and cost, Pareto front
``vtrain optimal CONFIG``  compute-optimal model size for a GPU budget
``vtrain schedule TRACE``  replay a job trace on a shared cluster
``vtrain validate CSV``    predict measured iteration times, report the error
``vtrain calibrate CSV..`` fit a profile to measured iteration times
``vtrain import hf CONFIG`` a Hugging Face config.json into a session
``vtrain import megatron-args FILE``     a Megatron-LM launch into a session
``vtrain import deepspeed DS_CONFIG --model M --num-gpus N``  a DeepSpeed config into a session
``vtrain import bridge --recipe NAME | RUN_CONFIG.yaml``  a Megatron-Bridge recipe or checkpoint config
``vtrain export megatron-args SESSION``  the Megatron-LM launch of a session
``vtrain diff A B``        the difference of two plans' iteration times, term by term
``vtrain trace import TRACE.json.. --session S``  a measured profiler trace against the prediction

One module of this package per subcommand (``core/cli/<name>.py``, with
``add_parser`` and ``run``); shared helpers in :mod:`core.cli.common`.

Invalid input exits with status 2 and one message on stderr, never a traceback.

Start-up: the subcommand modules import h5py, rich and the simulator only in
the subcommand that runs (``vtrain --help`` loads none of them, ``vtrain
simulate --json`` no rich, and nothing on the simulate path loads matplotlib
or scipy; tests/test_headless.py checks this in a fresh process).
"""

from __future__ import annotations

import argparse
import os
import sys

from core.util.text import printable
from core.cli import (calibrate, diff, exports, gui, imports, optimal, profile, schedule, simulate,
               sweep, trace, validate)
from core.cli.common import UsageError

__all__ = ["main", "build_parser", "SUBCOMMANDS", "USER_ERRORS"]

#: Exceptions that are bad input, not bugs (module, class name): one line on stderr, exit
#: status 2. Looked up in ``sys.modules`` when one is raised: an instance of a class exists
#: only once its module is imported, so no module (numpy, h5py) is imported for this.
USER_ERRORS = (("core.plan.fields", "ConfigError"), ("core.io.session", "SessionFileError"),
               ("core.store.format", "ProfileStoreError"), ("core.accuracy.measured", "MeasurementFileError"),
               ("core.store.nccl_tests", "NcclTestsError"), ("core.util.inputs", "NonFiniteError"),
               ("core.io.megatron.arguments", "MegatronArgsError"), ("core.io.kineto", "TraceFileError"))

# one module per subcommand, each with ``add_parser(sub)`` and ``run(args) -> int``;
# the order is the order of ``vtrain --help``
SUBCOMMANDS = {"simulate": simulate, "gui": gui, "profile": profile, "sweep": sweep,
               "optimal": optimal, "schedule": schedule, "validate": validate,
               "calibrate": calibrate, "import": imports, "export": exports, "diff": diff,
               "trace": trace}


class _Parser(argparse.ArgumentParser):
    """argparse's parser, reading a word that is a negative number in any of Python's float
    forms (``-1e20``, ``-inf``, ``-nan``, ``-1.5E+3``) as an option's value, so that the
    option's own check names it and its rule (``--flops: -1e+20 must be a positive number
    of FLOPs``). argparse's own pattern knows only ``-5`` and ``-.5``: ``--flops -1e20`` was
    "argument --flops: expected one argument". Every sub-parser is of this class
    (``add_subparsers`` makes its parsers of the parent's class).

    Options are never abbreviated (``allow_abbrev=False``, as Megatron-LM's parser): argparse
    took ``vtrain diff A.json --set X`` as ``--set-b X`` (the only option starting ``--set``),
    changing plan B alone where the user meant both; a prefix is now "unrecognized arguments"
    (exit 2)."""

    def __init__(self, *args, **kwargs):
        import re
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(
            r"^-(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``vtrain`` (subcommands simulate, gui, profile, sweep, optimal,
    schedule, validate, calibrate, import, export, diff, trace)."""
    parser = _Parser(
        prog="vtrain", description="Predict the iteration time, cost and memory of LLM training "
                                   "plans (after vTrain, MICRO 2024).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS.values():
        module.add_parser(sub)
    return parser


def _command_parser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The (sub)command parser the words select (``vtrain import megatron-args ...``: that
    one's), for a usage message that shows the command's own options."""
    for action in parser._actions:  # argparse keeps its sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            for i, word in enumerate(words):
                if word in action.choices:
                    return _command_parser(action.choices[word], words[i + 1:])
    return parser


def _user_error_types() -> tuple[type[BaseException], ...]:
    """:class:`UsageError` and the classes of :data:`USER_ERRORS` whose module is imported."""
    found = [getattr(sys.modules[mod], name) for mod, name in USER_ERRORS if mod in sys.modules]
    return (UsageError, *found)


def _error(text: object) -> int:
    """Print ``vtrain: error: TEXT`` as one line on stderr (control characters and line
    breaks from files shown as escapes) and return exit status 2."""
    line = printable(" ".join(str(text).split("\n")))
    print(f"vtrain: error: {line}", file=sys.stderr)
    return 2


#: What to narrow when a command runs out of memory (the plan space of a sweep or study grows
#: with every GPU count and value it tries: an MoE model's expert-parallel sizes, dispatchers
#: and overlaps multiply it).
_MEMORY_HINTS = {
    "sweep": "; narrow the plan space: --gpus N (one count) instead of --max-gpus, or fewer "
             "values of --micro-batch-sizes, --expert-parallel, --context-parallel, "
             "--zero-stages, --schedules, --recompute (with --gpus-from: a lower max_gpus in "
             "the price sheet); vtrain sweep --help",
    "optimal": "; fewer --gpus or --candidates, or --hold-session-values (a smaller plan space "
               "for each candidate)",
}


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit status.

    0: done; 2: bad input (one line naming the file, field and rule on stderr; argparse's
    usage errors too); 1: an internal error (one line, never a traceback; set
    ``VTRAIN_DEBUG=1`` to see it); 130: interrupted.
    """
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # argparse's own message, with the usage of the command that was given
        words = list(sys.argv[1:] if argv is None else argv)
        _command_parser(parser, words).error(f"unrecognized arguments: {' '.join(extras)}")
    try:
        return SUBCOMMANDS[args.command].run(args)
    except KeyboardInterrupt:
        print("vtrain: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # sorted here, in this order: USER_ERRORS are looked up lazily
        if isinstance(exc, _user_error_types()):
            return _error(exc)
        if isinstance(exc, KeyError):  # the profile lacks data the plan needs
            return _error(exc.args[0] if exc.args else exc)
        if isinstance(exc, BrokenPipeError):  # the reader went away (``vtrain ... | head``): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        if isinstance(exc, OSError):  # a file that cannot be written or read: name it
            name = exc.filename or ""
            return _error(f"{name}: {exc.strerror or exc}" if name else (exc.strerror or exc))
        if isinstance(exc, MemoryError):
            return _error("out of memory: the inputs are too large for this machine"
                          + _MEMORY_HINTS.get(args.command, ""))
        if os.environ.get("VTRAIN_DEBUG"):  # a bug: one line, not a traceback
            raise
        line = printable(" ".join(f"{type(exc).__name__}: {exc}".split("\n")))
        print(f"vtrain: internal error (please report it, with the input): {line}", file=sys.stderr)
        return 1
