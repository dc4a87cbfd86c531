"""``vtrain gui``: open the desktop window (the one place the core reaches the GUI, lazily)."""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import decimal_arg, path_arg
from core.cli.common import UsageError, check_outputs, field_error

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``gui`` subcommand to ``vtrain``'s sub-parsers."""
    gui = sub.add_parser("gui", help="open the desktop window",
                         description="Open the desktop window on PATH or the shipped example.")
    gui.add_argument("path", type=path_arg, metavar="PATH", nargs="?", help="session file or vTrain config")
    gui.add_argument("--screenshot", type=path_arg, metavar="OUT.png",
                     help="simulate, save a picture of the window to OUT.png and exit (0); a "
                          "session that breaks a rule is not simulated: the picture shows the "
                          "fields marked in red, one line on stderr names the file, the fields "
                          "and the rules, and the exit status is 2 (a file that cannot be "
                          "opened: exit status 2 and no picture); study settings of the file "
                          "that the Studies tab cannot use (unknown, of the wrong type or out of "
                          "range): the picture shows its defaults, one line names the file, "
                          "the settings and the rules, exit status 2")
    gui.add_argument("--trace", type=path_arg, metavar="TRACE.json", nargs="+",
                     help="PyTorch profiler traces of a run of the plan (one file per rank): the "
                          "measured iteration under the simulated one on the Plan tab's timeline, "
                          "and the per-class table (docs/trace_import.md)")
    gui.add_argument("--explore", action="store_true",
                     help="with --screenshot: run the plan sweep and picture the Explore tab")
    gui.add_argument("--timeout", metavar="SECONDS", type=decimal_arg, default=300.0,
                     help="with --screenshot: give up (exit status 3, a line on stderr naming "
                          "what it waited for: the simulation, the --explore sweep ...) when "
                          "the picture is not ready after this long; default %(default)g")
    gui.add_argument("--size", metavar="WxH", type=_size_arg,
                     help="with --screenshot: the window's size in pixels, e.g. 1280x800 (a "
                          "laptop), 1024x768 or 1920x1080; default 1600x1000 (a size under "
                          "the window's minimum: the picture is at that minimum and a line on "
                          "stderr says so)")
    gui.add_argument("--tab", choices=("plan", "explore", "profiles", "studies", "compare"),
                     help="the tab to open on (with --screenshot: to picture); default plan")


def _size_arg(text: str) -> tuple[int, int]:
    """``--size``'s ``WxH`` as (width, height) in pixels, each at least 320."""
    width, sep, height = text.lower().partition("x")
    try:
        size = (int(width), int(height))
    except ValueError:
        size = None
    if not sep or size is None or min(size) < 320:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT in pixels (each at "
                                         f"least 320), e.g. 1280x800")
    return size


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain gui``; returns the window's exit status.

    Raises
    ------
    ConfigError
        ``--screenshot`` names a file that cannot be written (:func:`core.cli.common.check_outputs`)
        or whose suffix names no image format Qt writes (``.svg``: a PNG was written under it),
        before the window opens, exit status 2.
    UsageError
        The GUI libraries are missing, or ``--timeout`` is not above 0.
    """
    if not args.timeout > 0:  # (nan too)
        raise UsageError(f"--timeout: {args.timeout:g} is not a number of seconds above 0")
    if args.screenshot is not None:  # "" too: refused, not the window opened instead
        check_outputs([("--screenshot", args.screenshot)], [args.path, *(args.trace or [])])
    try:
        from vtrain_gui.app import image_format, run_gui
    except ImportError as exc:
        raise UsageError(f"the desktop window needs PySide6 and pyqtgraph: {exc}") from None
    if args.screenshot is not None:  # a picture in the format its name says, or none
        try:
            image_format(args.screenshot)
        except ValueError as exc:
            raise field_error("--screenshot", f"{args.screenshot}: {exc}") from None
    return run_gui(args.path, screenshot=args.screenshot, explore=args.explore, tab=args.tab,
                   traces=args.trace, timeout_s=args.timeout, size=args.size)
