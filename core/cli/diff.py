"""``vtrain diff A B``: the iteration time of two plans and their difference, term by term
(``vtrain diff SESSION``: the session's pinned plan against its own)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from core.cli.common import fmt_days, verdict_markup, path_arg
from core.util.text import signed
from core.sim.labels import DIFF_TERMS, MEMORY_FIGURES, TIME_TERMS, short_name

__all__ = ["add_parser", "run"]



def add_parser(sub: Any) -> None:
    """Add the ``diff`` subcommand to ``vtrain``'s sub-parsers."""
    d = sub.add_parser(
        "diff", help="explain the difference between two plans, term by term",
        description="Simulate two sessions (or vTrain configs) and split the difference of their "
                    "iteration times (B minus A) into "
                    + ", ".join(TIME_TERMS[t] for t in DIFF_TERMS if t != "rest")
                    + " (and, where a plan has them, "
                    + ", ".join(TIME_TERMS[t] for t in ("cp_comm", "ep_comm"))
                    + "); the terms sum to the difference. Also memory per GPU, days and cost. "
                    "vtrain diff A.json --set-b plan.tensor_parallel=8 compares A with A "
                    "changed in one field (B = A with the change).")
    d.add_argument("a", type=path_arg, metavar="A.json", help="plan A: a session file or vTrain config; alone, "
                                               "a session with a pinned plan (the window's "
                                               "Plan > Pin plan for comparison, saved with it): "
                                               "A is the pinned plan, B the session's own")
    d.add_argument("b", type=path_arg, metavar="B.json", nargs="?", default=None,
                   help="plan B, compared with A (B minus A); with --set-b and no B.json, B is "
                        "A with the changes")
    d.add_argument("--set-b", action="append", metavar="SECTION.FIELD=VALUE",
                   help="change one field of B only, SECTION.FIELD=VALUE (repeatable), e.g. "
                        "--set-b plan.tensor_parallel=8 --set-b plan.data_parallel=1; read as "
                        "--set reads it (JSON or else text; a field given twice takes the last "
                        "value); B is B.json, or A.json when B.json is not given (never the "
                        "pinned plan); A is never changed; the files are not changed")
    d.add_argument("--json", action="store_true",
                   help="print one JSON object (difference_s, terms, and both plans)")


def _simulated(session: Any, file: str, pinned: bool = False) -> Any:
    """``simulate(session)``; its errors name ``file`` and, for the pinned plan, the field under
    ``compare.pinned`` (a plan too large to simulate, an unreadable profile store)."""
    from core.plan.fields import ConfigError
    from core.store.format import ProfileStoreError
    from core.sim.simulate import simulate

    try:
        return simulate(session)
    except ConfigError as exc:
        if not pinned:
            raise session.in_its_terms(exc) from None
        raise ConfigError([dataclasses.replace(e, field=f"compare.pinned.{e.field}")
                           if not e.field.startswith("compare.") else e
                           for e in exc.errors], file) from None
    except ProfileStoreError as exc:
        if not pinned:
            raise
        text = str(exc)
        raise ProfileStoreError(f"{file}: compare.pinned.{text}" if text.startswith("cluster.")
                                else f"{file}: compare.pinned.cluster: {text}") from None


def _s(x: float) -> str:
    return f"{x:,.3f} s"


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain diff``; returns the exit status."""
    from rich.table import Table

    from core.plan.fields import ConfigError
    from core.util.console import Console, esc
    from core.studies.diff import diff_results
    from core.io.session import load_any

    if args.set_b:
        from core.cli.common import apply_sets
        from core.plan.rules import check
        a = load_any(args.a)
        b = apply_sets(a if args.b is None else load_any(args.b), args.set_b, "--set-b")
        try:
            check(b)
        except ConfigError as exc:  # named "FILE with --set-b ..." (apply_sets' source)
            raise b.in_its_terms(exc) from None
        d = diff_results(_simulated(a, args.a), _simulated(b, b.source or args.a))
    elif args.b is None:
        from core.plan.rules import check
        from core.io.session import SessionFileError
        b = load_any(args.a)
        if b.compare is None:
            raise SessionFileError(f"{args.a}: compare: no pinned plan in this file; give two "
                                   "files (vtrain diff A.json B.json) or save the session with "
                                   "a plan pinned (Plan > Pin plan for comparison)")
        try:
            a = check(b.pinned())
        except ConfigError as exc:
            raise ConfigError([dataclasses.replace(e, field=f"compare.pinned.{e.field}")
                               if not e.field.startswith("compare.") else e
                               for e in exc.errors]).in_file(args.a) from None
        d = diff_results(_simulated(a, args.a, pinned=True), _simulated(b, args.a))
    else:
        a, b = load_any(args.a), load_any(args.b)
        d = diff_results(_simulated(a, args.a), _simulated(b, args.b))
    if args.json:
        from core.util.inputs import strict_dumps
        print(strict_dumps(d.to_dict()))
        return 0
    doc = d.to_dict()
    con = Console()
    name_a, name_b = ((f"{args.a} (pinned)", args.a) if args.b is None and not args.set_b
                      else (args.a, args.b or args.a))
    if args.set_b:
        name_b += " with " + " ".join(f"--set-b {x}" for x in args.set_b)
    con.print(f"[bold]A[/] {esc(name_a)}: {esc(doc['a']['label'])}, {doc['a']['num_gpus']:,} GPUs",
              highlight=False)
    con.print(f"[bold]B[/] {esc(name_b)}: {esc(doc['b']['label'])}, {doc['b']['num_gpus']:,} GPUs",
              highlight=False)
    if doc["beyond_plan"]:
        from core.studies.diff import beyond_plan_text
        con.print("[bold]A and B differ beyond the plan[/] (the differences below are not the "
                  "plans' alone): " + esc(beyond_plan_text(doc["beyond_plan"])), highlight=False)
    if doc["idle_plan_differences"]:
        from core.studies.diff import beyond_plan_text
        con.print("[bold]The plans also differ in fields that change nothing here[/] (left out "
                  "of the labels): " + esc(beyond_plan_text(doc["idle_plan_differences"])),
                  highlight=False)
    t = Table(title="Iteration time, mean over pipeline stages", title_justify="left")
    for col in ("term", "A", "B", "B - A"):
        t.add_column(col, justify="left" if col == "term" else "right")
    for name in d.shown_terms():  # not a term neither plan has (the rounding rest ...)
        a, b, delta = d.terms_a.get(name, 0.0), d.terms_b.get(name, 0.0), d.terms[name]
        # a difference under half a millisecond prints 0.000 s, neither +0.000 nor -0.000
        t.add_row(esc(TIME_TERMS.get(name, name.replace("_", " "))), _s(a), _s(b),
                  signed(delta, _s))
    ra, rb = d.a.report, d.b.report
    t.add_row("[bold]iteration time[/]", _s(ra.iteration_time_s), _s(rb.iteration_time_s),
              f"[bold]{signed(d.difference_s, _s)} "
              f"({signed(d.difference_s / ra.iteration_time_s, lambda x: f'{x:.1%}')})[/]")
    con.print(t)
    for name, res, hidden in (("A", d.a, d.overlapped_a), ("B", d.b, d.overlapped_b)):
        if hidden:
            con.print(f"[dim]{name}: communication overlapped with compute, not in the terms "
                      "(what it does not hide shows as idle): "
                      + ", ".join(f"{short_name(k)} {v:,.3f} s"
                                  for k, v in hidden.items())
                      + "[/]", highlight=False)
    o = Table(show_header=True)
    for col in ("", "A", "B", "B - A"):
        o.add_column(col, justify="left" if not col else "right")
    from core.sim.report import gib_texts, tight_reason
    figures = [gib_texts(r.max_memory_per_gpu_bytes, r.memory_capacity_bytes) for r in (ra, rb)]
    o.add_row(MEMORY_FIGURES["max_memory_per_gpu_bytes"], *(f"{need} GiB" for need, _ in figures),
              signed((rb.max_memory_per_gpu_bytes - ra.max_memory_per_gpu_bytes) / 2**30,
                     lambda x: f"{x:,.1f} GiB"))
    o.add_row(MEMORY_FIGURES["memory_capacity_bytes"], *(f"{cap} GiB" for _, cap in figures), "")
    o.add_row(MEMORY_FIGURES["memory_verdict"], *(verdict_markup(r.memory_verdict) for r in (ra, rb)), "")
    delta = rb.training_days - ra.training_days
    o.add_row("training days", fmt_days(ra.training_days), fmt_days(rb.training_days),
              signed(delta, fmt_days))
    o.add_row("cost", f"${ra.cost_usd:,.0f}", f"${rb.cost_usd:,.0f}",
              signed(rb.cost_usd - ra.cost_usd, lambda x: f"${x:,.0f}"))
    con.print(o)
    for name, r in (("A", ra), ("B", rb)):
        if r.memory_verdict != "fits":
            need, cap = gib_texts(r.max_memory_per_gpu_bytes, r.memory_capacity_bytes)
            con.print(f"[bold]{name}[/] {verdict_markup(r.memory_verdict)}: "
                      f"{need} GiB per GPU of {cap} GiB"
                      + ("; its time and cost cannot be had as planned"
                         if r.memory_verdict == "does not fit" else
                         ", " + tight_reason(r.max_memory_per_gpu_bytes,
                                             r.memory_capacity_bytes, r.memory_reserve_fraction)
                         + (" (cluster.memory_reserve_fraction)"  # the margin's setting
                            if r.max_memory_per_gpu_bytes <= r.memory_capacity_bytes else "")),
                      highlight=False)
    for name, r in (("A", ra), ("B", rb)):  # as vtrain simulate prints them, under the letter
        for w in r.warnings:
            con.print(f"[yellow]warning:[/] {name}: {esc(w)}", highlight=False)
    return 0
