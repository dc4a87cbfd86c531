"""``vtrain schedule``: replay a job trace on a shared cluster under several GPU-allocation
policies (argument parsing and output). The study itself is :mod:`core.studies.scheduler`."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from core.cli.common import decimal_arg, integer_arg, path_arg
from core.cli.common import check_number, check_profile_option, list_items, study_progress

if TYPE_CHECKING:  # rich is imported when the command runs (fast ``vtrain --help``)
    from core.util.console import Console

#: :data:`core.studies.scheduler.POLICIES`, spelled out so that building the parser does not import the
#: scheduler; tests/test_scheduler.py checks that the two agree.
POLICY_NAMES = ("requested", "efficient", "adaptive")

__all__ = ["add_parser", "run", "job_columns", "job_cells", "outside_calibration_lines"]


def add_parser(sub: Any) -> None:
    """Add the ``schedule`` subcommand to ``vtrain``'s sub-parsers."""
    sc = sub.add_parser(
        "schedule", help="replay a job trace on a shared GPU cluster under allocation policies",
        description="Predict every job's best throughput at each GPU count (one plan sweep per "
                    "job), then replay the trace first come, first served on a cluster of "
                    "--gpus GPUs under each policy: 'requested' (the GPUs each job asked for), "
                    "'efficient' (at most the request, cut to where tokens/s per GPU stays "
                    "within --min-efficiency of the job's best) and 'adaptive' (efficient, but "
                    "start at once on at least half of it rather than wait). Prints job "
                    "completion time, queueing delay, makespan, utilization and GPU-hours.")
    sc.add_argument("trace", type=path_arg, metavar="TRACE.json",
                    help="JSON list of jobs: name, arrival_h, model (preset name) or num_layers/"
                         "hidden_size/num_attention_heads, global_batch_size, tokens, "
                         "requested_gpus")
    sc.add_argument("--gpus", type=integer_arg, required=True, metavar="N", help="GPUs of the cluster")
    sc.add_argument("--cluster", type=path_arg, metavar="CONFIG",
                    help="session file or vTrain config whose cluster, profile, precision and "
                         "(with --hold-session-values) plan switches to use (default: 8-GPU "
                         "A100-SXM4-80GB nodes with the GPU's reference network, bf16)")
    sc.add_argument("--hold-session-values", action="store_true",
                    help="each job's sweep keeps --cluster's sequence parallelism, ZeRO stage, "
                         "cp, overlaps and fusions (Megatron-LM's defaults without --cluster) "
                         "instead of searching vtrain sweep's default space: about 18 times "
                         "faster")
    sc.add_argument("--policies", default=",".join(POLICY_NAMES), metavar="P[,P...]",
                    help=f"policies to compare (default {','.join(POLICY_NAMES)})")
    sc.add_argument("--backfill", action="store_true",
                    help="let a later job start ahead of a waiting one when it fits")
    sc.add_argument("--min-efficiency", type=decimal_arg, default=0.8, metavar="F",
                    help="least tokens/s per GPU, relative to the job's best, that 'efficient' "
                         "and 'adaptive' accept (default 0.8)")
    sc.add_argument("--runs", action="store_true", help="also print every job's run per policy")
    sc.add_argument("--profile", type=path_arg, metavar="STORE.h5", help="profile store to use instead of the shipped one")
    sc.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain schedule``; returns the exit status."""
    from pathlib import Path

    from core.plan.fields import ConfigError, FieldError
    from core.plan.rules import check_all_but_the_plan
    from core.plan.session import Session
    from core.util.console import Console
    from core.util.inputs import strict_dumps
    from core.studies.optimal import gpt_shape
    from core.studies.scheduler import POLICIES, job_rows, read_jobs, schedule_study
    from core.io.session import load_any

    from core.plan.fields import BOUNDS
    if not 0 < args.gpus <= BOUNDS["parallel"].hi:
        raise ConfigError([FieldError("--gpus", f"{args.gpus!r} must be a positive integer up to "
                                      f"{BOUNDS['parallel'].hi:,.0f} ({BOUNDS['parallel'].why})")])
    check_number("--min-efficiency", args.min_efficiency)
    policies = list(dict.fromkeys(list_items("--policies", args.policies)))
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise ConfigError([FieldError("--policies", f"{args.policies!r}: choose from "
                                                    f"{', '.join(POLICIES)}")])
    jobs = read_jobs(args.trace)
    session = load_any(args.cluster, validate=False) if args.cluster else Session()
    if args.profile:
        check_profile_option(args.profile)
        session.cluster.profile_path = os.path.abspath(args.profile)  # links kept: messages name the path given
    # the jobs bring their own models and batches; the cluster, precision and profile must be valid
    try:
        check_all_but_the_plan(session, gpt_shape(1e9), global_batch_size=1)
    except ConfigError as exc:  # name the file, in its own terms
        raise session.in_its_terms(exc) from None
    from core.sim.simulate import profile_gpu_note, session_profile
    store = session_profile(session)  # opened once: its GPU kind is checked against the cluster's
    warnings = [w for w in [profile_gpu_note(store, session.cluster)] if w]
    progress = study_progress(args.json)
    counts, tps, plans, results = schedule_study(jobs, session, args.gpus, policies=policies,
                                          backfill=args.backfill,
                                          min_efficiency=args.min_efficiency,
                                          source=Path(args.trace).name, store=store,
                                          progress=progress, warnings=warnings,
                                          hold_session_values=args.hold_session_values)
    from core.sim.comm import summarize_warnings
    warnings = summarize_warnings(warnings)  # the sweeps' (the profile's note is theirs too)
    rows = job_rows(jobs, counts, tps, plans, args.min_efficiency)
    if args.json:
        print(strict_dumps({**_document(rows, counts, tps, results, args),
                            "profile": store.device_name, "warnings": warnings}))
        return 0
    console = Console()
    _print(rows, results, args, session, console, store)
    from core.util.console import esc
    for w in warnings[:3]:
        console.print(f"[yellow]warning: {esc(w)}[/]", highlight=False)
    if len(warnings) > 3:
        console.print(f"[yellow]... and {len(warnings) - 3} more warnings (--json: warnings)[/]")
    return 0


def job_columns(min_efficiency: float) -> list[str]:
    """Titles of the jobs table (``vtrain schedule`` and the window's study)."""
    return ["job", "model", "arrival h", "tokens", "requested", "per GPU there",
            f"efficient (>= {min_efficiency:.0%})", "tokens/s there"]


def job_cells(row) -> list[str]:
    """One :class:`core.studies.scheduler.JobRow` as the jobs table's plain-text cells
    (:func:`job_columns`): ``⚠`` after the tokens/s of a plan outside what the profile was
    calibrated on (:func:`core.cli.sweep.calibration_mark`), which
    :func:`outside_calibration_lines` explains."""
    from core.cli.sweep import calibration_mark
    job = row.job
    head = [job.name, job.model.name, f"{job.arrival_h:g}", f"{job.tokens / 1e9:,.0f}B",
            str(job.requested_gpus)]
    if row.efficient_gpus is None:
        return [*head, "-", "no plan fits", "-"]
    return [*head, "no plan" if row.share_at_request is None else f"{row.share_at_request:.0%}",
            f"{row.efficient_gpus} ({row.efficient_share:.0%})",
            f"{row.tokens_per_s:,.0f}{calibration_mark(row.within_calibration, row.calibration_departures)}"]


def outside_calibration_lines(rows) -> list[str]:
    """The footnote of the jobs table's ``⚠``: a line saying how many jobs' plans (at the
    efficient count) leave what the profile was calibrated on, then per distinct departure
    (:attr:`core.studies.sweep.SweepResult.calibration_departures`, or the GPU count or model
    size: :data:`core.cli.sweep.OUTSIDE_RANGE`) the jobs and what they leave; [] when none."""
    from core.cli.sweep import OUTSIDE_RANGE, calibration_mark
    marked = [r for r in rows if calibration_mark(r.within_calibration, r.calibration_departures)]
    if not marked:
        return []
    by: dict[str, list[str]] = {}
    for r in marked:
        by.setdefault(r.calibration_departures or OUTSIDE_RANGE, []).append(r.job.name)
    n = len(marked)
    return [f"⚠ {n} of {len(rows)} jobs' plans at the efficient "
            f"count leave what the profile was calibrated on (error band of unknown coverage):"
            ] + [f"{', '.join(names)}: {why}" for why, names in by.items()]


def _run_dict(r) -> dict[str, Any]:
    return {"job": r.job.name, "start_h": r.start_h, "end_h": r.end_h, "gpus": r.gpus,
            "tokens_per_s": r.tokens_per_s, "jct_h": r.jct_h, "wait_h": r.wait_h,
            "within_calibration": r.within_calibration,
            "calibration_departures": r.calibration_departures, "plan": r.plan}


def _document(rows, counts, tps, results, args) -> dict[str, Any]:
    return {
        "gpus": args.gpus, "backfill": args.backfill, "min_efficiency": args.min_efficiency,
        "hold_session_values": bool(args.hold_session_values),
        "counts": list(counts),
        "jobs": [{"name": r.job.name, "model": r.job.model.name, "arrival_h": r.job.arrival_h,
                  "tokens": r.job.tokens, "requested_gpus": r.job.requested_gpus,
                  "tokens_per_s": [float(x) for x in row],
                  "share_at_request": r.share_at_request, "efficient_gpus": r.efficient_gpus,
                  "efficient_share": r.efficient_share,
                  "within_calibration": r.within_calibration,
                  "calibration_departures": r.calibration_departures,
                  "efficient_plan": r.plan} for r, row in zip(rows, tps)],
        "policies": [{"policy": r.policy, "metrics": r.metrics(), "unrunnable": r.unrunnable,
                      "adjusted": [{"job": n, "requested_gpus": a, "gpus": g}
                                   for n, a, g in r.adjusted],
                      "runs": [_run_dict(x) for x in r.runs]} for r in results],
    }


def _print(rows, results, args, session, console: Console, store=None) -> None:
    from rich.table import Table

    from core.util.console import esc
    from core.cli.sweep import calibration_mark
    from core.plan.cluster import node_network_gbits_per_s
    from core.studies.scheduler import schedule_notes
    from core.studies.sweep.dimensions import kept_switches_text
    console.print(f"[bold]{len(rows)} jobs[/] on {args.gpus:,} x {esc(session.cluster.gpu)} "
                  f"({session.cluster.gpus_per_node} per node, "
                  f"{node_network_gbits_per_s(session.cluster):,.0f} Gb/s per node), first come first "
                  f"served{', with backfilling' if args.backfill else ''}", highlight=False)
    if args.hold_session_values:
        console.print(f"each job's plans keep: {esc(kept_switches_text(session.plan))} (t, p, d, "
                      "b, schedule and recomputation are swept)", highlight=False)
    else:
        console.print(f"each job's plans: vtrain sweep's default space (t, p, d, b, schedule, "
                      "recomputation, sequence parallelism, ZeRO stage, cp, overlaps and fusions "
                      f"swept; precision={esc(session.plan.precision)} held; "
                      "--hold-session-values keeps the session's switches)", highlight=False)
    if store is not None:  # the store the throughputs come from (--profile or the GPU's own)
        console.print(esc(f"profile: {store.device_name} {store.path or ''}"), highlight=False)
    jt = Table(title="Jobs: predicted tokens/s per GPU as a share of the job's best over all "
                     "counts, at the request and at the efficient count", title_justify="left")
    for col in job_columns(args.min_efficiency):
        jt.add_column(col, justify="left" if col in ("job", "model") else "right")
    for row in rows:
        jt.add_row(*map(esc, job_cells(row)))
    console.print(jt)
    for k, line in enumerate(outside_calibration_lines(rows)):
        console.print(f"[yellow]{esc(line)}[/]" if k == 0 else f"  {esc(line)}", highlight=False)
    pt = Table(title="Policies", title_justify="left")
    for col in ("policy", "mean JCT h", "median JCT h", "mean wait h", "makespan h",
                "utilization", "GPU-hours"):
        pt.add_column(col, justify="left" if col == "policy" else "right")
    def fmt(v, spec: str) -> str:
        return "–" if v is None else format(v, spec)

    for r in results:
        m = r.metrics()
        pt.add_row(r.policy, fmt(m["mean_jct_h"], ",.1f"), fmt(m["median_jct_h"], ",.1f"),
                   fmt(m["mean_wait_h"], ",.1f"), fmt(m["makespan_h"], ",.1f"),
                   fmt(m["utilization"], ".1%"), fmt(m["gpu_hours"], ",.0f"))
    console.print(pt)
    for note in schedule_notes(results):
        console.print(f"[yellow]{esc(note)}[/]", highlight=False)
    for r in results:
        if not args.runs:
            continue
        rt = Table(title=f"Runs under {r.policy}", title_justify="left")
        for col in ("job", "GPUs", "t p d b", "start h", "end h", "wait h", "JCT h"):
            rt.add_column(col, justify="left" if col == "job" else "right")
        for x in r.runs:
            p = x.plan or {}
            rt.add_row(esc(x.job.name), str(x.gpus),
                       " ".join(str(p.get(k, "-")) for k in ("tensor_parallel", "pipeline_parallel",
                                                              "data_parallel", "micro_batch_size"))
                       + calibration_mark(x.within_calibration, x.calibration_departures),
                       f"{x.start_h:,.1f}", f"{x.end_h:,.1f}", f"{x.wait_h:,.1f}", f"{x.jct_h:,.1f}")
        console.print(rt)
