"""``vtrain simulate``: predict one iteration of a session or vTrain config and print the report."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from core.cli.common import decimal_arg, path_arg
from core.cli.common import (SET_HELP, field_error, fmt_bytes, fmt_days, check_outputs,
                     session_from_args, session_inputs, verdict_markup)
from core.util.text import format_amount, format_energy, format_params

if TYPE_CHECKING:  # rich is imported when tables are printed (not for --json)
    from core.util.console import Console

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``simulate`` subcommand to ``vtrain``'s sub-parsers."""
    sim = sub.add_parser("simulate", help="simulate one training iteration and print the report",
                         description="Simulate one training iteration of a session file or a vTrain "
                                     "authors'-format JSON config and print the report.",
                         epilog="The plan in the report's first line, in Megatron-LM's terms: t "
                                "tensor-parallel, p pipeline-parallel, d data-parallel size, b "
                                "micro-batch size, B global batch size (sequences), m "
                                "micro-batches per iteration (B / (d*b)), v virtual stages per "
                                "rank, cp context-parallel and ep expert-parallel size; sp "
                                "sequence parallelism, zero=N the ZeRO stage (1: Megatron's "
                                "distributed optimizer, 3: FSDP); no-X names a switch that is "
                                "off. MFU is model FLOPs utilization (Narayanan et al. 2021, "
                                "Eq. 3), HFU counts the recomputed FLOPs too.")
    sim.add_argument("path", type=path_arg, metavar="PATH", help="session file (.json) or vTrain config (.json)")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    sim.add_argument("--trace-out", type=path_arg, metavar="FILE",
                     help="write the timeline as Chrome trace-event JSON (open in Perfetto); gzip-compressed when FILE ends in .gz")
    sim.add_argument("--profile", type=path_arg, metavar="STORE.h5", help="profile store to use instead of the shipped one")
    sim.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help=SET_HELP)
    sim.add_argument("--tokens", type=decimal_arg, metavar="T", help="training token budget (overrides the file)")
    sim.add_argument("--price-per-gpu-hour", type=decimal_arg, metavar="USD",
                     help="price of one GPU-hour in USD (overrides the file)")
    sim.add_argument("--coverage", type=decimal_arg, metavar="C", default=0.9,
                     help="nominal coverage of the error band, between 0 and 1 (default 0.9): "
                          "the share of runs whose measured time should fall inside it")


def _print_report(result, console: Console, trace_path: str | None, wall_s: float,
                  fit=None) -> None:
    """The text report of one simulated iteration: the headline (model, GPUs, plan, profile),
    the summary table, the measured run (when the session has one), the memory per pipeline
    stage, the warnings, what would make the plan fit (``fit``, a
    :class:`core.studies.fit_changes.FitChanges`, when it does not fit or is tight; with the
    fewest GPUs that fit when nothing on the plan's GPU count does) and a
    footer with the task count, ``wall_s`` (seconds) and the trace written to ``trace_path``."""
    from core.util.console import esc

    from core.cli.profile import profile_line
    s, r, pl = result.session, result.report, result.session.plan
    console.print(f"[bold]{esc(s.model.name)}[/] on {pl.num_gpus:,} x {esc(s.cluster.gpu)}  "
                  f"({esc(pl.label(full=True))}; m={pl.num_microbatches})")
    console.print(esc(profile_line(r.profile)))
    console.print(_summary_table(s, r))
    if r.run is not None:
        console.print(_run_table(r, s))
    console.print(_stage_memory_table(r, pl.pipeline_parallel))
    for w in r.warnings:
        console.print(f"[yellow]warning:[/] {esc(w)}")
    if fit is not None:
        console.print(_fit_changes_table(fit, r))
        if fit.fewest_gpus is not None:
            console.print(_fewest_gpus_line(fit.fewest_gpus))
    console.print(f"[dim]{result.graph.num_tasks:,} tasks simulated in {wall_s * 1000:,.0f} ms"
                  + (f"; trace written to {esc(trace_path)}" if trace_path else "") + "[/]")


def _band(iv):
    """A formatter of the error band after a figure: ``band(value, fmt)`` gives
    ``"  (90 % band low - high)"`` (dim markup) with ``value`` times the band's factors formatted
    by ``fmt``, or ``""`` when ``iv`` (an interval or None) has no band."""
    return ((lambda v, fmt: f"  [dim]({iv.coverage:.0%} band {fmt(v * iv.low_factor)} - "
                            f"{fmt(v * iv.high_factor)})[/]")
            if iv is not None and iv.available else (lambda v, fmt: ""))


def _summary_table(s, r):
    """The report's summary table (a rich Table without header) of session ``s`` and report
    ``r``: parameters, iteration time with its band, throughput, MFU, bubble, per-stage time,
    training time and cost, memory per GPU."""
    from rich.table import Table

    from core.cli.sweep import calibration_mark
    from core.store.interval import interval_line
    from core.sim.op_times import num_chunks
    from core.schedules import get as get_schedule
    from core.plan.model_config import padded_vocab_size
    pl = s.plan
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    sched = get_schedule(s.plan.schedule)
    ideal = sched.ideal_bubble_fraction(pl.pipeline_parallel, pl.num_microbatches,
                                        num_chunks(s.plan))
    V = padded_vocab_size(s.model.vocab_size, pl.tensor_parallel,
                          divisible_by=s.model.make_vocab_size_divisible_by)
    t.add_row("Parameters", f"{r.num_parameters / 1e9:,.2f} B" + (
        f" (vocabulary padded to {V:,} for t={pl.tensor_parallel})" if V != s.model.vocab_size else ""))
    if s.model.is_moe:
        t.add_row("Active parameters", f"{r.num_active_parameters / 1e9:,.2f} B per token "
                  "without the input embedding (as OpenAI and DeepSeek publish them; "
                  f"{r.num_active_parameters_with_embedding / 1e9:,.2f} B with it); MFU counts "
                  "their GEMMs")
    iv = r.interval
    band = _band(iv)
    # ⚠ as the sweep's tables: the plan leaves what the store was calibrated on (its GPU count
    # or model size, or a feature: the band line names which)
    outside = (calibration_mark(iv.within_calibration, iv.departure_text)
               if iv is not None and iv.in_calibration_range is not None else "")
    t.add_row("Iteration time", f"{r.iteration_time_s:,.3f} s"
              + band(r.iteration_time_s, lambda x: f"{x:,.3f} s") + outside)
    if iv is not None:
        t.add_row("Error band", interval_line(iv))
    per_iteration = pl.global_batch_size * s.model.seq_length
    t.add_row("Throughput", f"{r.tokens_per_s:,.0f} tokens/s, {r.tokens_per_s / r.num_gpus:,.0f} "
              f"per GPU ({per_iteration:,} tokens per iteration: B={pl.global_batch_size:,} "
              f"sequences of {s.model.seq_length:,})")
    if r.fp8_recipe is not None:
        t.add_row("Precision", f"fp8, recipe {r.fp8_recipe}: the linear layers' GEMMs in FP8, "
                               "attention core, embedding and output layer in BF16")
    t.add_row("MFU / HFU", _mfu_text(r))
    if r.model_tflops_per_gpu:
        t.add_row("Model TFLOP/s", f"{r.model_tflops_per_gpu:,.1f} per GPU  [dim](what Megatron-LM's "
                  "--log-throughput logs as throughput per GPU: its FLOP count, the causal "
                  "attention half)[/]")
    t.add_row("Pipeline bubble", f"{r.bubble_fraction:.1%} of the {sched.title} schedule"
              + (f" (uniform-stage ideal {ideal:.1%})" if ideal is not None else ""))
    from core.plan.layout import layout_summary
    summary = layout_summary(s.model.num_layers, s.plan)
    if summary:
        t.add_row("Pipeline layout", f"{s.plan.pipeline_model_parallel_layout}: {summary} "
                                     "(virtual stage k is chunk k//p of stage k%p)")
    t.add_row("Per stage (mean)", _per_stage_text(s, r))
    t.add_row("Training", f"{format_params(s.cost.training_tokens)} tokens: {r.num_iterations:,.0f} "
                          f"iterations, {fmt_days(r.training_days)} days"
              + band(r.training_days, fmt_days))
    t.add_row("Cost", f"{format_amount(r.gpu_hours)} GPU-hours, ${r.cost_usd:,.0f} at "
                      f"${s.cost.price_per_gpu_hour_usd:,.2f}/GPU-hour"
              + band(r.cost_usd, lambda x: f"${x:,.0f}"))
    fit = verdict_markup(r.memory_verdict)
    from core.sim.report import gib_texts, tight_reason
    margin = (", " + tight_reason(r.max_memory_per_gpu_bytes, r.memory_capacity_bytes,
                                  r.memory_reserve_fraction)
              if r.memory_verdict == "tight" else
              f"; margin {r.memory_reserve_fraction * 100:g} %")
    need, cap = gib_texts(r.max_memory_per_gpu_bytes, r.memory_capacity_bytes)
    t.add_row("Memory per GPU", f"max {need} GiB of {cap} GiB ({fit}{margin})")
    return t


def _mfu_text(r) -> str:
    """The MFU / HFU cell: both utilizations, the peak's dtype when it differs from the
    precision, and the causal-mask MFU when it is below 98 % of the reported one."""
    causal = r.mfu_causal
    return (f"{r.mfu:.1%} / {r.hfu:.1%}"
            + (f"  [dim](of the {r.mfu_peak_dtype.upper()} dense peak)[/]"
               if r.mfu_peak_dtype != r.precision else "")
            + (f"; MFU {causal:.1%} counting only the attention under the causal mask "
               "(Megatron-Core 0.19's count; Eq. 3 credits the full s x s square)"
               if causal is not None and causal < 0.98 * r.mfu else "")
            + ("  [dim](HFU below MFU: HFU counts the FLOPs run, and FlashAttention skips the "
               "masked half of the attention square that MFU's Eq. 3 credits)[/]"
               if r.hfu < r.mfu else ""))


def _per_stage_text(s, r) -> str:
    """The per-stage (mean) cell: compute, exposed and hidden communication by kind, bubble,
    overlap wait and stage imbalance, in seconds, each named by
    :data:`core.sim.labels.TIME_TERMS` (hidden parts by :func:`core.sim.labels.hidden`)."""
    from core.sim.labels import TIME_TERMS as N, hidden

    def term(name: str, seconds: float, hidden_kind: str = "", hidden_s: float = 0.0,
             *more: tuple[str, float]) -> str:
        shown = [f"{hidden(k)} {h:,.3f} s" for k, h in ((hidden_kind, hidden_s), *more)
                 if h > 0]
        return f"{N[name]} {seconds:,.3f} s" + (f" ({', '.join(shown)})" if shown else "")

    parts = [term("compute", r.compute_s),
             term("comm", r.comm_s, "tp_comm", r.tp_hidden_s,
                  ("dp_comm", getattr(r, "dp_hidden_s", 0.0)))]
    if r.ep_comm_s or r.ep_hidden_s:
        parts.append(term("ep_comm", r.ep_comm_s, "ep_all_to_all", r.ep_hidden_s))
    parts.append(term("pp_comm", r.pp_comm_s))
    if s.plan.context_parallel > 1:
        parts.append(term("cp_comm", r.cp_comm_s, "cp_p2p", r.cp_hidden_s))
    parts.append(term("bubble", r.bubble_s))
    if r.overlap_wait_s:
        parts.append(term("overlap_wait", r.overlap_wait_s))
    parts.append(term("imbalance", r.imbalance_s))
    return ", ".join(parts)


def _stage_memory_table(r, p: int):
    """The memory per GPU by pipeline stage (bytes, formatted): every stage when ``p`` <= 8, else
    the first four and the last two with a ``...`` row between."""
    from rich.table import Table
    from core.sim.labels import MEMORY_TERM_MEANINGS, MEMORY_TERMS, PROCESS_TERMS
    mem = Table(title=f"Memory per GPU by pipeline stage ({MEMORY_TERMS['gradients_bytes']}: "
                      f"{MEMORY_TERM_MEANINGS['gradients_bytes']}; process: "
                      + ", ".join(MEMORY_TERMS[k] for k in PROCESS_TERMS) + ")",
                title_justify="left")
    shown = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes")
    for col in ("stage", *(MEMORY_TERMS[k] for k in shown), "process", "total"):
        mem.add_column(col, justify="right")
    rows = r.memory if p <= 8 else r.memory[:4] + [None] + r.memory[-2:]
    for sm in rows:
        if sm is None:
            mem.add_row("...", *[""] * (len(shown) + 2))
            continue
        process = sum(getattr(sm, k) for k in PROCESS_TERMS)
        mem.add_row(str(sm.stage), *(fmt_bytes(getattr(sm, k)) for k in shown),
                    fmt_bytes(process), fmt_bytes(sm.total_bytes))
    return mem


def _fit_changes_table(fit, r):
    """What would make the plan fit (:func:`core.studies.fit_changes.fit_changes`): one row per
    changed plan, its GPUs, memory per GPU, verdict, iteration time and the change in time; a
    line saying so when nothing within three changes fits."""
    from rich.table import Table

    from core.util.console import esc
    want = "outside the margin" if fit.verdict == "tight" else "in memory"
    if not fit.rows:
        return (f"[bold]To fit {want}:[/] none of the {fit.tried} valid plans tried fits (up to "
                "three changes away, then twice the pipeline or tensor parallel size); "
                "vtrain sweep searches every plan")
    fewest, most = min(x.levers for x in fit.rows), max(x.levers for x in fit.rows)
    away = ("one change" if most == 1 else f"{most} changes" if fewest == most
            else f"{fewest} to {most} changes")
    gpus = r.num_gpus
    more = all(x.num_gpus != gpus for x in fit.rows)
    tight = any(x.verdict == "tight" for x in fit.rows)
    t = Table(title=f"To fit {want}: the plans {away} away that do"
                    + (" (fewer fit nothing, or only tightly)" if fewest > 1 else "")
                    + (f", with more GPUs (nothing on {gpus:,} fits; the time is theirs)"
                       if more else "")
                    + (", those that fit first, then the tight ones; fastest first in each"
                       if tight else ", fastest first") + f" (held: {fit.held})",
              title_justify="left")
    for col, just in (("change", "left"), ("GPUs", "right"), ("memory per GPU", "right"),
                      ("verdict", "left"), ("iteration time", "right"), ("vs this plan", "right")):
        t.add_column(col, justify=just)
    cap = r.memory_capacity_bytes / 2**30
    for x in fit.rows:
        t.add_row(esc(x.text), f"{x.num_gpus:,}",
                  f"{x.max_memory_per_gpu_bytes / 2**30:.1f} of {cap:.1f} GiB",
                  verdict_markup(x.verdict), f"{x.iteration_time_s:,.3f} s",
                  f"{x.iteration_time_s / fit.iteration_time_s - 1:+.1%}")
    return t


def _fewest_gpus_line(fewest) -> str:
    """The fewest GPUs that fit (:func:`core.studies.fit_changes.fewest_gpus`, a
    :class:`~core.studies.fit_changes.FewestGpus`): one line (markup escaped)."""
    from core.util.console import esc
    if fewest.num_gpus is None:
        return f"[bold]Fewest GPUs:[/] {esc(fewest.text)}"
    return (f"[bold]Fewest GPUs that fit:[/] {esc(fewest.text)} (counts tried: "
            f"{esc(fewest.counts_text)}; t and cp doubled, every p that divides the count; "
            "memory only, not timed)")


def _days(seconds: float) -> str:
    return f"{fmt_days(seconds / 86400)} days"


def _run_table(r, s):
    """The "Run" table: the whole run with failures, checkpoints and energy, term by term
    (:mod:`core.sim.goodput`, :mod:`core.sim.energy`)."""
    from rich.table import Table
    g, e, rel = r.run, r.energy, s.reliability
    t = Table(title="Run with failures and checkpoints (docs/goodput.md)", title_justify="left",
              show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    gpus = r.num_gpus
    if g.mtbi_s is None:
        t.add_row("Interruptions", "none (reliability.failure_rate_per_gpu_hour is 0)")
    else:
        t.add_row("Interruptions", f"one every {g.mtbi_s / 3600:,.2f} h ({gpus:,} GPUs x "
                                   f"{rel.failure_rate_per_gpu_hour:.3g} per GPU-hour); "
                                   f"{format_amount(g.expected_interruptions)} expected in the run")
    mode = ("async: stall to copy to host memory, "
            f"{g.checkpoint_write_s:,.1f} s write in the background" if g.async_save
            else "sync: the host's share over its write bandwidth")
    t.add_row("Checkpoint", f"{fmt_bytes(g.checkpoint_bytes)} (weights and optimizer state), "
                            f"{fmt_bytes(g.checkpoint_bytes_per_node)} per host; "
                            f"{g.checkpoint_save_s:,.1f} s per save ({mode})")
    # the optimum's figures exist only where it chose the interval (None for a given one)
    rule = {"given": "given", "no failures": "once, at the end (no failures)",
            "no checkpoint": "none"}.get(g.checkpoint_interval_rule) or (
        f"Daly 2006 optimum {g.daly_interval_s:,.0f} s, Young 1974 {g.young_interval_s:,.0f} s, "
        "rounded to whole iterations")
    if g.checkpoint_interval_rule == "no checkpoint":
        t.add_row("Checkpoint interval", "none: no checkpoint is saved (reliability."
                  "checkpoint_interval_iterations 2^40: Megatron-LM without --save, Megatron-"
                  "Bridge's checkpoint.save null, torchtitan's checkpoint.enable false); a "
                  "failure restarts the run from its start")
    else:
        k, saves = g.checkpoint_interval_iterations, g.num_checkpoints
        t.add_row("Checkpoint interval", f"every {k:,} iteration{'s' if k != 1 else ''} "
                                         f"({g.checkpoint_interval_s / 60:,.1f} min; {rule}); "
                                         f"{saves:,} save{'s' if saves != 1 else ''}")
    t.add_row("Expected time", f"{_days(g.expected_time_s)} (10th-90th percentile "
                               f"{fmt_days(g.p10_time_s / 86400)} - "
                               f"{fmt_days(g.p90_time_s / 86400)}) = "
                               f"work {_days(g.work_s)} + checkpoints {_days(g.checkpoint_s)} + "
                               f"restarts {_days(g.restart_s)} + lost work "
                               f"{_days(g.lost_work_s)}")
    t.add_row("Goodput", f"{g.goodput:.1%} of the time trains (work / expected time): "
                         f"checkpoints cost {g.checkpoint_s / g.expected_time_s:.1%}, restarts "
                         f"{g.restart_s / g.expected_time_s:.1%}, work lost to failures "
                         f"{g.lost_work_s / g.expected_time_s:.1%}")
    price = s.cost.price_per_gpu_hour_usd
    t.add_row("Lost", f"checkpoints {format_amount(g.gpu_hours_checkpoints)} GPU-hours "
                      f"(${g.cost_usd_checkpoints:,.0f}), failures "
                      f"{format_amount(g.gpu_hours_failures)} "
                      f"GPU-hours (${g.cost_usd_failures:,.0f}) at ${price:,.2f}/GPU-hour")
    total_h = g.expected_time_s * gpus / 3600
    if e is None:
        from core.sim.energy import no_power_figures
        t.add_row("GPU-hours", f"{format_amount(total_h)} GPU-hours (${total_h * price:,.0f}); "
                               + no_power_figures(s.cluster.gpu))
        return t
    t.add_row("GPU-hours, energy", f"{format_amount(total_h)} GPU-hours "
                                   f"(${total_h * price:,.0f}); "
                                   f"{format_energy(e.energy_kwh)} (${e.energy_cost_usd:,.0f} at "
                                   f"${s.cost.price_per_kwh_usd:,.3f}/kWh)")
    t.add_row("Energy terms", f"GPUs {format_energy(e.gpu_kwh)} ({e.gpu_power_w:,.0f} W training "
                              f"at {e.busy_fraction:.0%} busy, {e.gpu_idle_power_w:,.0f} W "
                              f"waiting) + node overhead {format_energy(e.node_kwh)} "
                              f"({e.node_overhead_w_per_gpu:,.0f} W per GPU at board power, "
                              "following the GPUs' load) + facility "
                              f"{format_energy(e.facility_kwh)} (PUE "
                              f"{e.power_usage_effectiveness:g})")
    return t


def _json_report(result, wall_s: float, fit=None) -> dict:
    r = result.report
    doc = r.to_dict()
    doc["fit_changes"] = fit.as_dict() if fit is not None else None
    doc.update({
        "iteration_time_s": r.iteration_time_s, "bubble_fraction": r.bubble_fraction, "mfu": r.mfu,
        "tokens_per_s": r.tokens_per_s, "num_gpus": r.num_gpus,
        "max_memory_per_gpu_bytes": r.max_memory_per_gpu_bytes, "fits_in_memory": r.fits_in_memory,
        "training_days": r.training_days, "cost_usd": r.cost_usd, "num_tasks": result.graph.num_tasks,
        "wall_s": wall_s, "wall_parts_s": result.timings_s, "session": result.session.to_dict(),
    })
    from core.plan.layout import pipeline_layout_text, virtual_stage_layer_counts
    s = result.session
    if pipeline_layout_text(s.plan) is not None:  # the layers of each virtual stage it places
        doc["virtual_stage_layers"] = virtual_stage_layer_counts(s.model.num_layers, s.plan)
    return doc


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain simulate``; returns the exit status."""
    from core.plan.fields import ConfigError
    from core.util.inputs import strict_dumps
    from core.sim.simulate import simulate
    outputs = [("--trace-out", args.trace_out)]
    check_outputs(outputs, [args.path, args.profile])
    session = session_from_args(args, note_gpu_count=True)
    check_outputs(outputs, session_inputs(session))
    try:
        from core.store.interval import check_coverage
        check_coverage(args.coverage)
    except ValueError as exc:
        raise field_error("--coverage", str(exc)) from None
    t0 = time.perf_counter()
    try:
        result = simulate(session, coverage=args.coverage)
    except ConfigError as exc:  # name the file the session came from, in its own terms
        raise session.in_its_terms(exc) from None
    wall = time.perf_counter() - t0
    if args.trace_out:
        from core.io.trace import write_trace
        write_trace(result.graph, result.schedule, args.trace_out)
    fit = None
    if result.report.memory_verdict != "fits":
        from core.studies.fit_changes import fit_changes
        fit = result.fit_changes = fit_changes(result.session)
    if args.json:
        print(strict_dumps(_json_report(result, wall, fit)))
    else:
        from core.util.console import Console
        _print_report(result, Console(), args.trace_out, wall, fit)
    return 0
