"""``vtrain calibrate --trace``: fit a store's op model to a measured profiler trace.

Part of the ``calibrate`` subcommand (:mod:`core.cli.calibrate` parses the arguments and
hands ``--trace`` here); the fit is :mod:`core.accuracy.trace_fit`'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import check_outputs, check_profile_option, field_error, session_from_args

__all__ = ["run_trace"]


def run_trace(args: argparse.Namespace) -> int:
    """``vtrain calibrate --trace TRACE.json... --session S.json --store BASE.h5 --out NEW.h5``.

    Prints the fitted parameters (base against fitted), those left as they were with why, and
    per stage and class the measured time against the prediction before and after.

    Raises
    ------
    ConfigError
        (:func:`core.cli.common.field_error`, exit 2) A missing ``--session``/``--store``/``--out``, CSV files given too, ``--out-dir``,
        ``--file-weights``/``--gpus`` (CSV-only), ``--kernel-classes`` (the efficiencies it
        adds are not determined by a trace's classes), or nothing to fit.
    """
    from core.accuracy.trace_fit import fit_trace, trace_calibrated_store
    from core.io.kineto import choose_step, read_traces
    from core.io.kineto_classes import load_class_table, measure_step
    from core.plan.fields import ConfigError
    from core.store.profile_store import ProfileStore
    from core.util.inputs import strict_dumps

    if args.csv:
        raise field_error("--trace", "give either measurement files or --trace, not both")
    for name, bad in (("--out-dir", args.out_dir), ("--gpus", args.gpus),
                      ("--file-weights", args.file_weights)):
        if bad:
            raise field_error(name, "not with --trace")
    if args.kernel_classes:  # trace_fit's _NEVER: neither efficiency is a candidate
        raise field_error("--kernel-classes", "not with --trace: a trace's gemm class holds the "
                          "grouped expert GEMMs with the dense ones and its attention time is "
                          "fitted through gemm_efficiency_max, so the trace fit cannot determine "
                          "grouped_gemm_efficiency or flash_attention_efficiency; use "
                          "--kernel-classes with --out-dir (the shared fit of measured runs)")
    for name in ("session", "profile", "out"):
        if not getattr(args, name):
            raise field_error("--store" if name == "profile" else f"--{name}", "required with --trace")
    if args.step is not None and args.step < 0:
        raise field_error("--step", f"{args.step} must be a step number at or above 0")
    check_outputs([("--out", args.out)], [*args.trace, args.profile, args.session])
    base = check_profile_option(args.profile, "--store", opener=ProfileStore.open)
    table = load_class_table(args.classes)
    trace = read_traces(args.trace)
    step = choose_step(trace, args.step)
    measurement = measure_step(trace, step, table)
    args.path = args.session
    session = session_from_args(args)
    try:
        result = fit_trace(measurement, session, base)
    except ConfigError as exc:
        raise session.in_its_terms(exc) from None
    except ValueError as exc:
        raise field_error("--trace", str(exc)) from None
    store = trace_calibrated_store(base, result, [str(f) for f in trace.files])
    store.save(args.out)
    if args.json:
        print(strict_dumps({"out": str(args.out), "step": step, "files": trace.files,
                            **result.to_dict()}, indent=2))
        return 0
    _print(result, str(args.out), base, step)
    return 0


def _print(result: Any, out: str, base: Any, step: int) -> None:
    """The trace fit as tables: parameters, those left, and the classes before and after."""
    from rich.table import Table

    from core.util.console import Console, esc
    console = Console()
    console.print(f"[bold]wrote {esc(out)}[/]: calibrated from {esc(base.summary())} on "
                  f"ProfilerStep#{step}")
    t = Table(title="Fitted parameters", title_justify="left")
    for col in ("parameter", "base", "fitted"):
        t.add_column(col, justify="left" if col == "parameter" else "right")
    for name in result.fitted:
        t.add_row(esc(name), f"{result.base_op_model[name]:.4g}", f"{result.op_model[name]:.4g}")
    console.print(t)
    n = Table(title="Left as they were (the trace cannot determine them)", title_justify="left")
    n.add_column("parameter")
    n.add_column("value", justify="right")
    n.add_column("why")
    for name, why in result.not_determined.items():
        n.add_row(esc(name), f"{result.op_model[name]:.4g}", esc(why))
    console.print(n)
    o = Table(title="Per stage and class: measured against predicted", title_justify="left")
    for col in ("stage", "class", "measured", "before", "after"):
        o.add_column(col, justify="left" if col == "class" else "right")
    for ob in result.observations:
        o.add_row(str(ob.stage), esc(ob.cls), f"{ob.measured_s * 1e3:,.3f} ms",
                  f"{ob.before_s * 1e3:,.3f} ms", f"{ob.after_s * 1e3:,.3f} ms")
    console.print(o)
    for line in result.left_out:
        console.print(f"[dim]left out: {esc(line)}[/]", highlight=False)
