"""The ``vtrain`` command line.

``vtrain simulate PATH``   predict one iteration of a session or vTrain config
``vtrain gui [PATH]``      open the desktop window
``vtrain profile ...``     generate or inspect profile stores
``vtrain sweep CONFIG``    every valid plan, time and cost, Pareto front
``vtrain optimal CONFIG``  compute-optimal model size for a GPU budget
``vtrain schedule TRACE``  replay a job trace on a shared cluster
``vtrain validate CSV``    predict measured iteration times, report the error
``vtrain calibrate CSV..`` fit a profile to measured iteration times

One module of this package per subcommand (``core/cli/<name>.py``, with
``add_parser`` and ``run``); shared helpers in :mod:`core.cli.common`.

Invalid input exits with status 2 and one message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..config import ConfigError
from ..console import printable
from ..inputs import NonFiniteError
from ..nccl_tests import NcclTestsError
from ..profile_store import ProfileStoreError
from ..session import SessionFileError
from ..validate import MeasurementFileError
from . import calibrate, gui, optimal, profile, schedule, simulate, sweep, validate
from .common import UsageError

__all__ = ["main", "build_parser", "SUBCOMMANDS"]

# one module per subcommand, each with ``add_parser(sub)`` and ``run(args) -> int``;
# the order is the order of ``vtrain --help``
SUBCOMMANDS = {"simulate": simulate, "gui": gui, "profile": profile, "sweep": sweep,
               "optimal": optimal, "schedule": schedule, "validate": validate,
               "calibrate": calibrate}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``vtrain`` (subcommands simulate, gui, profile, sweep, optimal,
    schedule, validate, calibrate)."""
    parser = argparse.ArgumentParser(
        prog="vtrain", description="Predict the iteration time, cost and memory of LLM training "
                                   "plans (after vTrain, MICRO 2024).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS.values():
        module.add_parser(sub)
    return parser


def _error(text: object) -> int:
    """Print ``vtrain: error: TEXT`` as one line on stderr (control characters and line
    breaks from files shown as escapes) and return exit status 2."""
    line = printable(" ".join(str(text).split("\n")))
    print(f"vtrain: error: {line}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit status.

    0: done; 2: bad input (one line naming the file, field and rule on stderr; argparse's
    usage errors too); 1: an internal error (one line, never a traceback; set
    ``VTRAIN_DEBUG=1`` to see it); 130: interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return SUBCOMMANDS[args.command].run(args)
    except (ConfigError, SessionFileError, ProfileStoreError, UsageError, MeasurementFileError,
            NcclTestsError, NonFiniteError) as exc:
        return _error(exc)
    except KeyError as exc:  # the profile lacks data the plan needs
        return _error(exc.args[0] if exc.args else exc)
    except BrokenPipeError:  # the reader went away (``vtrain ... | head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file that cannot be written or read: name it
        name = exc.filename or ""
        return _error(f"{name}: {exc.strerror or exc}" if name else (exc.strerror or exc))
    except KeyboardInterrupt:
        print("vtrain: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        return _error("out of memory: the inputs are too large for this machine")
    except Exception as exc:  # a bug: one line, not a traceback (VTRAIN_DEBUG=1 shows it)
        if os.environ.get("VTRAIN_DEBUG"):
            raise
        line = printable(" ".join(f"{type(exc).__name__}: {exc}".split("\n")))
        print(f"vtrain: internal error (please report it, with the input): {line}", file=sys.stderr)
        return 1
