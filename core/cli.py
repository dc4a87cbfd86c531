"""The ``vtrain`` command line.

``vtrain simulate PATH``   predict one iteration of a session or vTrain config
``vtrain gui [PATH]``      open the desktop window
``vtrain profile ...``     generate or inspect profile stores
``vtrain sweep CONFIG``    every valid plan, time and cost, Pareto front (core/sweep_cmd.py)
``vtrain validate CSV``    predict measured iteration times, report the error (core/accuracy_cmd.py)
``vtrain calibrate CSV..`` fit a profile to measured iteration times (core/accuracy_cmd.py)
``vtrain import hf CONFIG`` a Hugging Face config.json into a session (core/import_cmd.py)

Invalid input exits with status 2 and one message on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.table import Table

from .console import Console
from .config import ConfigError
from .nccl_tests import NcclTestsError
from .profile_store import ProfileStoreError
from .session import SessionFileError, load_any
from .validate import MeasurementFileError

__all__ = ["main", "build_parser"]

GiB = 2**30


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``vtrain`` (subcommands simulate, gui, profile, sweep, optimal,
    schedule, validate, calibrate)."""
    parser = argparse.ArgumentParser(
        prog="vtrain", description="Predict the iteration time, cost and memory of LLM training "
                                   "plans (after vTrain, MICRO 2024).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = sub.add_parser("simulate", help="simulate one training iteration and print the report",
                         description="Simulate one training iteration of a session file or a vTrain "
                                     "authors'-format JSON config and print the report.")
    sim.add_argument("path", metavar="PATH", help="session file (.json) or vTrain config (.json)")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    sim.add_argument("--trace-out", metavar="FILE",
                     help="write the timeline as Chrome trace-event JSON (open in Perfetto)")
    sim.add_argument("--profile", metavar="STORE.h5", help="profile store to use instead of the shipped one")
    sim.add_argument("--tokens", type=float, metavar="T", help="training token budget (overrides the file)")
    sim.add_argument("--price-per-gpu-hour", type=float, metavar="USD",
                     help="price of one GPU-hour in USD (overrides the file)")

    gui = sub.add_parser("gui", help="open the desktop window",
                         description="Open the desktop window on PATH or the shipped example.")
    gui.add_argument("path", metavar="PATH", nargs="?", help="session file or vTrain config")
    gui.add_argument("--screenshot", metavar="OUT.png",
                     help="simulate, save a picture of the window to OUT.png and exit")
    gui.add_argument("--explore", action="store_true",
                     help="with --screenshot: run the plan sweep and picture the Explore tab")

    prof = sub.add_parser("profile", help="generate or inspect profile stores")
    psub = prof.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    gen = psub.add_parser("generate", help="write an analytic store from public GPU specifications")
    gen.add_argument("--gpu", required=True, help="GPU kind, e.g. A100-SXM4-80GB")
    gen.add_argument("--out", required=True, metavar="STORE.h5")
    show = psub.add_parser("show", help="print a store's device, provenance and contents")
    show.add_argument("store", metavar="STORE.h5")
    from .profile_cmd import add_profiling_parsers  # profile run / collectives (torch when run)
    add_profiling_parsers(psub)
    from .sweep_cmd import add_sweep_parser  # vtrain sweep (design-space explorer)
    add_sweep_parser(sub)
    from .optimal_cmd import add_optimal_parser  # vtrain optimal (compute-optimal model size)
    add_optimal_parser(sub)
    from .schedule_cmd import add_schedule_parser  # vtrain schedule (multi-tenant cluster)
    add_schedule_parser(sub)
    from .accuracy_cmd import add_accuracy_parsers, add_import_parser  # validate, calibrate
    add_accuracy_parsers(sub)
    add_import_parser(psub)
    from . import import_cmd  # vtrain import hf (Hugging Face config.json)
    import_cmd.add_parser(sub)
    return parser


def _fmt_bytes(n: float) -> str:
    return f"{n / GiB:,.1f} GiB"


def _print_report(result, console: Console, trace_path: str | None, wall_s: float) -> None:
    s, r, pl = result.session, result.report, result.session.plan
    p, m = pl.pipeline_parallel, pl.num_microbatches
    console.print(f"[bold]{s.model.name}[/] on {pl.num_gpus:,} x {s.cluster.gpu}  "
                  f"({pl.label(full=True)}; m={m})")
    prov = r.profile
    from .profile_cmd import profile_line
    console.print(profile_line(prov))
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    ideal = (p - 1) / (m + p - 1)
    from .config import padded_vocab_size
    V = padded_vocab_size(s.model.vocab_size, pl.tensor_parallel)
    t.add_row("Parameters", f"{r.num_parameters / 1e9:,.2f} B" + (
        f" (vocabulary padded to {V:,} for t={pl.tensor_parallel})" if V != s.model.vocab_size else ""))
    t.add_row("Iteration time", f"{r.iteration_time_s:,.3f} s")
    t.add_row("Throughput", f"{r.tokens_per_s:,.0f} tokens/s")
    t.add_row("MFU / HFU", f"{r.mfu:.1%} / {r.hfu:.1%}")
    t.add_row("Pipeline bubble", f"{r.bubble_fraction:.1%} of the iteration "
                                 f"(1F1B ideal (p-1)/(m+p-1) = {ideal:.1%})")
    t.add_row("Per stage (mean)", f"compute {r.compute_s:,.3f} s, blocking communication "
                                  f"{r.comm_s:,.3f} s, idle {r.bubble_s:,.3f} s")
    t.add_row("Training", f"{s.cost.training_tokens / 1e9:,.0f}B tokens: {r.num_iterations:,.0f} "
                          f"iterations, {r.training_days:,.1f} days")
    t.add_row("Cost", f"{r.gpu_hours:,.0f} GPU-hours, ${r.cost_usd:,.0f} at "
                      f"${s.cost.price_per_gpu_hour_usd:,.2f}/GPU-hour")
    fit = "[green]fits[/]" if r.fits_in_memory else "[red]DOES NOT FIT[/]"
    usable = r.memory_capacity_bytes * (1 - r.memory_reserve_fraction)
    t.add_row("Memory per GPU", f"max {_fmt_bytes(r.max_memory_per_gpu_bytes)} of "
                                f"{_fmt_bytes(usable)} usable ({fit}; "
                                f"{r.memory_reserve_fraction:.0%} of {_fmt_bytes(r.memory_capacity_bytes)} "
                                "reserved)")
    console.print(t)
    mem = Table(title="Memory per GPU by pipeline stage", title_justify="left")
    for col in ("stage", "weights", "gradients", "optimizer", "activations", "total"):
        mem.add_column(col, justify="right")
    rows = r.memory if p <= 8 else r.memory[:4] + [None] + r.memory[-2:]
    for sm in rows:
        if sm is None:
            mem.add_row("...", "", "", "", "", "")
            continue
        mem.add_row(str(sm.stage), _fmt_bytes(sm.weights_bytes), _fmt_bytes(sm.gradients_bytes),
                    _fmt_bytes(sm.optimizer_bytes), _fmt_bytes(sm.activations_bytes),
                    _fmt_bytes(sm.total_bytes))
    console.print(mem)
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(f"[dim]{result.graph.num_tasks:,} tasks simulated in {wall_s * 1000:,.0f} ms"
                  + (f"; trace written to {trace_path}" if trace_path else "") + "[/]")


def _json_report(result, wall_s: float) -> dict:
    r = result.report
    doc = r.to_dict()
    doc.update({
        "iteration_time_s": r.iteration_time_s, "bubble_fraction": r.bubble_fraction, "mfu": r.mfu,
        "tokens_per_s": r.tokens_per_s, "num_gpus": r.num_gpus,
        "max_memory_per_gpu_bytes": r.max_memory_per_gpu_bytes, "fits_in_memory": r.fits_in_memory,
        "training_days": r.training_days, "cost_usd": r.cost_usd, "num_tasks": result.graph.num_tasks,
        "wall_s": wall_s, "session": result.session.to_dict(),
    })
    return doc


def session_from_args(args: argparse.Namespace, validate: bool = True):
    """Load ``args.path`` (checking the configuration rules with ``validate``) and apply
    ``--profile``, ``--tokens`` and ``--price-per-gpu-hour``."""
    session = load_any(args.path, validate=validate)
    if getattr(args, "profile", None):
        session.cluster.profile_path = str(Path(args.profile).resolve())
    if getattr(args, "tokens", None) is not None:
        session.cost.training_tokens = args.tokens
    if getattr(args, "price_per_gpu_hour", None) is not None:
        session.cost.price_per_gpu_hour_usd = args.price_per_gpu_hour
    return session


def _cmd_simulate(args: argparse.Namespace) -> int:
    from .simulate import simulate
    session = session_from_args(args)
    t0 = time.perf_counter()
    result = simulate(session)
    wall = time.perf_counter() - t0
    if args.trace_out:
        from .trace import write_trace
        write_trace(result.graph, result.schedule, args.trace_out)
    if args.json:
        print(json.dumps(_json_report(result, wall)))
    else:
        _print_report(result, Console(), args.trace_out, wall)
    return 0


def _cmd_gui(args: argparse.Namespace) -> int:
    try:
        from vtrain_gui.app import run_gui
    except ImportError as exc:
        raise UsageError(f"the desktop window needs PySide6 and pyqtgraph: {exc}") from None
    return run_gui(args.path, screenshot=args.screenshot, explore=args.explore)


def _cmd_profile(args: argparse.Namespace) -> int:
    from .profile_store import ProfileStore
    if args.profile_command == "import-nccl-tests":
        from .accuracy_cmd import run_import_nccl
        return run_import_nccl(args)
    if args.profile_command in ("run", "collectives"):
        from .profile_cmd import run_command
        return run_command(args)
    if args.profile_command == "generate":
        from .profiles_gen import DEVICE_SPECS, write_store
        if args.gpu not in DEVICE_SPECS:
            raise UsageError(f"--gpu {args.gpu!r}: no specification; known: {', '.join(DEVICE_SPECS)}")
        path = write_store(args.gpu, args.out)
        print(f"wrote {path}")
        return 0
    store = ProfileStore.open(args.store)
    from .profile_cmd import print_store
    print_store(store, Console())
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep_cmd import run_command
    return run_command(args)


def _cmd_optimal(args: argparse.Namespace) -> int:
    from .optimal_cmd import run_command
    return run_command(args)


def _cmd_schedule(args: argparse.Namespace) -> int:
    from .schedule_cmd import run_command
    return run_command(args)


def _cmd_validate(args: argparse.Namespace) -> int:
    from .accuracy_cmd import run_validate
    return run_validate(args)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from .accuracy_cmd import run_calibrate
    return run_calibrate(args)


def _cmd_import(args: argparse.Namespace) -> int:
    from .import_cmd import run
    return run(args)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"simulate": _cmd_simulate, "gui": _cmd_gui, "profile": _cmd_profile,
                "sweep": _cmd_sweep, "validate": _cmd_validate, "calibrate": _cmd_calibrate,
                "optimal": _cmd_optimal, "schedule": _cmd_schedule, "import": _cmd_import}
    try:
        return handlers[args.command](args)
    except (ConfigError, SessionFileError, ProfileStoreError, UsageError, MeasurementFileError,
            NcclTestsError) as exc:
        print(f"vtrain: error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:  # the profile lacks data the plan needs
        print(f"vtrain: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (``vtrain ... | head``): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"vtrain: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
