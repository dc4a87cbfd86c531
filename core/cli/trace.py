"""``vtrain trace import TRACE.json [TRACE_rank*.json] --session S.json``: a measured PyTorch
profiler trace against the prediction, per operation class and pipeline stage.

Reading: :mod:`core.io.kineto`; classes and sums: :mod:`core.io.kineto_classes`; the
comparison: :mod:`core.accuracy.trace_compare` (docs/trace_import.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import integer_arg, path_arg
from core.cli.common import SET_HELP, field_error, session_from_args

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``trace`` subcommand (verb ``import``) to ``vtrain``'s sub-parsers."""
    tr = sub.add_parser("trace", help="compare a measured PyTorch profiler trace with the "
                                      "prediction",
                        description="Measured PyTorch profiler (Kineto) traces against the "
                                    "simulator's prediction.")
    tsub = tr.add_subparsers(dest="trace_command", required=True, metavar="VERB")
    imp = tsub.add_parser(
        "import", help="read profiler traces of one or more ranks and compare them per class",
        description="Read PyTorch profiler Chrome traces (one file per rank, .json or .json.gz), "
                    "measure one iteration (a ProfilerStep#N range) per operation class (GEMM, "
                    "attention, norm and elementwise, optimizer, each collective, other, idle) "
                    "and print it against the session's prediction, stage by stage (ranks in "
                    "Megatron-LM's order, pipeline outermost), the largest departures first. "
                    "Classes the simulator has no figure for say so.")
    imp.add_argument("traces", type=path_arg, nargs="+", metavar="TRACE.json",
                     help="trace files, one per rank (rank from the file's distributedInfo, "
                          "else rank<N> in its name, else its position)")
    imp.add_argument("--session", type=path_arg, required=True, metavar="S.json",
                     help="the session (or vTrain config) the traces were taken of")
    imp.add_argument("--step", type=integer_arg, metavar="N",
                     help="the ProfilerStep#N to measure (default: the last complete one)")
    imp.add_argument("--classes", type=path_arg, metavar="TABLE.json",
                     help="operation class table (default: the shipped "
                          "resources/trace_classes.json)")
    imp.add_argument("--profile", type=path_arg, metavar="STORE.h5", help="profile store to use instead of the "
                                                           "shipped one")
    imp.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help=SET_HELP)
    imp.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1:
        return f"{value:,.3f} s"
    return f"{value * 1e3:,.3f} ms"


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain trace import``; returns the exit status."""
    from core.accuracy.trace_compare import compare
    from core.io.kineto import choose_step, read_traces
    from core.io.kineto_classes import load_class_table, measure_step
    from core.plan.fields import ConfigError
    from core.sim.simulate import simulate
    from core.util.inputs import strict_dumps
    if args.step is not None and args.step < 0:
        raise field_error("--step", f"{args.step} must be a step number at or above 0")
    table = load_class_table(args.classes)
    trace = read_traces(args.traces)
    step = choose_step(trace, args.step)
    measurement = measure_step(trace, step, table)
    args.path = args.session
    session = session_from_args(args)
    try:
        result = simulate(session)
    except ConfigError as exc:
        raise session.in_its_terms(exc) from None
    try:
        comparison = compare(measurement, result)
    except ConfigError as exc:  # traces of another job's size, a rank beyond the plan
        raise session.in_its_terms(exc) from None
    if args.json:
        doc = {"session": args.session, "files": trace.files, "classes": table.source,
               **comparison.to_dict()}
        print(strict_dumps(doc))
        return 0
    from rich.table import Table

    from core.util.console import Console, esc
    console = Console()
    s = result.session
    console.print(f"[bold]{esc(s.model.name)}[/] on {s.plan.num_gpus:,} x {esc(s.cluster.gpu)} "
                  f"({esc(s.plan.label(full=True))}): ProfilerStep#{step} of "
                  f"{len(trace.ranks)} rank{'s' if len(trace.ranks) != 1 else ''}")
    for i, rank in enumerate(measurement.ranks):
        console.print(f"  rank {rank} -> stage {comparison.rank_stages[rank]}: "
                      f"{esc(trace.file_of(rank))} ({measurement.source[i]} events)",
                      highlight=False)
    t = Table(title="Predicted against measured, largest departures first")
    for col, just in (("stage", "right"), ("class", "left"), ("predicted", "right"),
                      ("measured", "right"), ("departure", "right"), ("measured/predicted", "right"),
                      ("note", "left")):
        t.add_column(col, justify=just)
    zero = [row for row in comparison.rows if row.measured_s == 0 and not row.predicted_s]
    for row in comparison.rows:
        if row in zero:
            continue
        dep = row.departure_s
        t.add_row(str(row.stage), esc(row.title), _seconds(row.predicted_s),
                  _seconds(row.measured_s), "-" if dep is None else ("+" if dep >= 0 else "-")
                  + _seconds(abs(dep)),
                  "-" if row.ratio is None else f"{row.ratio:.3g}x", f"[dim]{esc(row.note)}[/]")
    console.print(t)
    if zero:
        names = sorted({row.title for row in zero})
        console.print(f"[dim]0 s predicted and measured, left out: {esc(', '.join(names))} "
                      "(--json lists every row)[/]", highlight=False)
    return 0
