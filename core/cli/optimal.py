"""``vtrain optimal``: the compute-optimal model for a GPU budget (argument parsing and output).

The study itself is :func:`core.studies.optimal.compute_optimal`.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from core.cli.common import decimal_arg, integer_arg, path_arg
from core.cli.common import SET_HELP, check_number, check_outputs, session_from_args
from core.cli.common import NO_TIGHT_OPTIMAL_HELP, NO_TIGHT_OPTIMAL_NOTE, study_progress
from core.util.text import days_phrase

if TYPE_CHECKING:  # rich and numpy (core.studies.optimal) are imported when the command runs
    from core.util.console import Console

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``optimal`` subcommand to ``vtrain``'s sub-parsers."""
    op = sub.add_parser(
        "optimal", help="compute-optimal model size for N GPUs and D days (Chinchilla, then "
                        "the plan that really runs)",
        description="Size models shaped like CONFIG's (its family, head size, query groups "
                    "and MLP ratio; only the layers L and the width h change) around the "
                    "Chinchilla-optimal size for the FLOPs that N GPUs deliver in D days at an "
                    "assumed MFU (or for a FLOP budget: --flops, or GPU-hours: --gpu-hours), "
                    "find each model's fastest plan "
                    "that fits on exactly N GPUs, train it for the tokens that plan processes in "
                    "D days (with --flops C: on C / 6N tokens, in the days its plan takes), and "
                    "rank the models by Chinchilla's fitted loss. Each model's plans "
                    "are those vtrain sweep tries by default (t, p, d, b, schedule, "
                    "recomputation, sequence parallelism, ZeRO stage, cp, the overlaps: what a "
                    "Megatron-Core user would run; printed with the result as swept and held). "
                    "CONFIG supplies the cluster, global batch size, precision and price, "
                    "every plan field the sweep does not choose, and the model the candidates "
                    "are shaped like (a mixture-of-experts or latent-attention model is "
                    "refused: the loss law is fitted on dense models). A plan outside what "
                    "the profile was calibrated on is marked with ⚠ (it is still chosen when "
                    "fastest).")
    op.add_argument("path", type=path_arg, metavar="CONFIG", help="session file (.json) or vTrain config (.json)")
    op.add_argument("--gpus", type=integer_arg, required=True, metavar="N", help="GPUs of the budget")
    budget = op.add_mutually_exclusive_group(required=True)
    budget.add_argument("--days", type=_typed_decimal, metavar="D", help="wall-clock days")
    budget.add_argument("--flops", type=decimal_arg, metavar="C",
                        help="a FLOP budget (Chinchilla's 6 N D, e.g. 1e23) instead of --days: "
                             "each candidate trains on C / 6N tokens (N its parameters), whole "
                             "iterations of B x s tokens, so its 6 N D is C or just under it, "
                             "in the days its fastest plan takes (a days column); no MFU is "
                             "assumed (--assumed-mfu is refused with it)")
    budget.add_argument("--gpu-hours", type=_typed_decimal, metavar="H",
                        help="a budget of GPU-hours (e.g. 2e6 H100-hours) instead of --days: "
                             "the days H / (GPUs x 24)")
    op.add_argument("--assumed-mfu", type=decimal_arg, default=None, metavar="U",
                    help="MFU the Chinchilla rule's FLOP budget assumes for a budget of days "
                         "or GPU-hours (default 0.4; not with --flops)")
    op.add_argument("--candidates", type=integer_arg, default=9, metavar="K",
                    help="candidate model sizes (default 9)")
    op.add_argument("--spread", type=decimal_arg, default=8.0, metavar="R",
                    help="largest / smallest candidate size (default 8)")
    op.add_argument("--price-per-gpu-hour", type=decimal_arg, metavar="USD",
                    help="price of one GPU-hour in USD (overrides the file)")
    op.add_argument("--hold-session-values", action="store_true",
                    help="sweep only CONFIG's own sequence parallelism, ZeRO stage, cp, overlaps "
                         "and fusions (the study before it searched vtrain sweep's default "
                         "space)")
    op.add_argument("--no-tight", action="store_true", help=NO_TIGHT_OPTIMAL_HELP)
    op.add_argument("--profile", type=path_arg, metavar="STORE.h5", help="profile store to use instead of the shipped one")
    op.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help=SET_HELP)
    op.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    op.add_argument("--out", type=path_arg, metavar="SESSION.json",
                    help="write the lowest-loss candidate (the one the table marks \"lowest "
                         "loss\": its model, its fastest plan, CONFIG's cluster and price, and "
                         "as token budget the tokens it trains in the budget's days, with "
                         "--flops its C / 6N tokens) as a "
                         "session file (atomically), so that vtrain simulate SESSION.json gives "
                         "the study's figures for it; nothing is written when no candidate has "
                         "a plan")


class _TypedNumber(float):
    """A number option's value that remembers how it was typed (``text``), to print it so."""

    text: str = ""


def _typed_decimal(text: str) -> float:
    """:func:`core.cli.common.decimal_arg`, remembering the text typed (``--days 9.05674321``
    prints as typed, never rounded)."""
    out = _TypedNumber(decimal_arg(text))
    out.text = text.strip()
    return out


def days_text(days: float) -> str:
    """Computed days (``--gpu-hours``' budget) for people: 3 significant figures, whole days from
    100 on (``9.05674`` -> ``"9.06"``, ``1234.5`` -> ``"1,234"``); a value the user typed
    (:func:`_typed_decimal`) as typed."""
    typed = getattr(days, "text", "")
    if typed:
        return typed
    return f"{days:,.0f}" if days >= 100 else f"{days:.3g}"


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain optimal``; returns the exit status."""
    from core.plan.fields import ConfigError
    from core.util.console import Console
    from core.util.inputs import strict_dumps
    from core.studies.optimal import compute_optimal

    check_number("--price-per-gpu-hour", args.price_per_gpu_hour, allow_zero=True)
    check_outputs([("--out", args.out)], [args.path, args.profile])
    session = session_from_args(args, validate=False)
    from core.plan.rules import check_all_but_the_plan
    from core.studies.optimal import check_template, shape_like
    # the candidates are shaped like the session's model, the plan is the study's; the
    # cluster, batch and sequence must be valid (a candidate's shape stands for the model)
    try:
        check_template(session.model)
        check_all_but_the_plan(session, shape_like(session.model, 1e9))
    except ConfigError as exc:  # name the file, in its own terms
        raise session.in_its_terms(exc) from None
    given = {"option": "--days", "value": args.days}
    if args.flops is not None:
        from core.cli.common import field_error
        if args.assumed_mfu is not None:  # it would change nothing: said, not ignored
            raise field_error("--assumed-mfu", f"{args.assumed_mfu:g} with --flops: a FLOP "
                                               "budget assumes no MFU (each candidate trains "
                                               "on C / 6N tokens in the days its plan takes); "
                                               "leave it out, or give --days or --gpu-hours")
        given = {"option": "--flops", "value": args.flops}
        from core.sim.costing import mfu_peak_flops
        from core.sim.simulate import session_profile
        from core.studies.optimal import check_flops
        check_flops(args.gpus, args.flops, mfu_peak_flops(session_profile(session),
                                                          session.plan))
    elif args.gpu_hours is not None:
        from core.studies.optimal import days_for_gpu_hours
        given = {"option": "--gpu-hours", "value": float(args.gpu_hours)}
        args.days = days_for_gpu_hours(args.gpus, args.gpu_hours)
    if given["value"] is not None:
        given["value"] = float(given["value"])
    if args.assumed_mfu is None:
        args.assumed_mfu = 0.4
    from core.studies.optimal import check_budget  # refused before any warning is printed
    check_budget(args.gpus, 1.0 if args.flops is not None else args.days, args.assumed_mfu,
                 args.candidates, args.spread)
    budget_given = None  # a refusal names the budget as given, not --days when it was not
    if given["option"] != "--days":
        unit = "FLOPs" if given["option"] == "--flops" else "GPU-hours"
        budget_given = (given["option"], f"{given['value']:g} {unit}")
    notice = None
    if not args.json:  # said before the sweeps run (minutes), not only under the table
        from core.studies.optimal import small_batch_note
        from core.util.console import esc
        err = Console(stderr=True)

        def notice(text: str) -> None:  # a candidate's large sweep, as it starts
            err.print(f"[yellow]warning:[/] {esc(text)}", highlight=False)
        note = small_batch_note(session, args.gpus)
        if note:
            notice(note)
    progress = study_progress(args.json)
    result = compute_optimal(session, args.gpus, args.days, assumed_mfu=args.assumed_mfu,
                             num_candidates=args.candidates, spread=args.spread, progress=progress,
                             hold_session_values=args.hold_session_values, notice=notice,
                             no_tight=args.no_tight, budget_given=budget_given,
                             flops=args.flops)
    # the study is printed before --out is refused (no candidate has a plan): its minutes of
    # sweeps and its reasons are not lost
    if args.json:
        doc = result.to_dict()
        doc["price_per_gpu_hour_usd"] = session.cost.price_per_gpu_hour_usd
        doc["cost_usd"] = _cost(result, session)  # None with --flops: each candidate's own
        price = session.cost.price_per_gpu_hour_usd
        for c in doc["candidates"]:  # its days on the budget's GPUs
            c["cost_usd"] = (None if c["days"] is None else
                             result.num_gpus * c["days"] * 24 * price)
        doc["budget_given"] = given  # the budget as the command gave it
        print(strict_dumps(doc))
        if args.out:
            _save_best(result, session, args.out)
        return 0
    console = Console()
    if args.flops is not None:
        shown = f"{args.flops:g} FLOPs"
    elif args.gpu_hours is not None:  # as typed, with the days they are
        shown = f"{days_text(args.gpu_hours)} GPU-hours, {days_phrase(days_text(float(args.days)))}"
    else:
        shown = days_phrase(days_text(args.days))
    _print(result, session, console, shown)
    if args.out:
        _save_best(result, session, args.out)
        from core.util.console import esc
        from core.studies.optimal import format_params
        b = result.candidates[result.best]
        console.print(f"[dim]the lowest-loss candidate ({format_params(b.n_params)}, its plan and "
                      f"{format_params(b.tokens)} tokens) written as a session to "
                      f"{esc(args.out)}[/]", highlight=False)
    return 0


def _save_best(result, session, path: str) -> None:
    """Write the lowest-loss candidate as a session to ``path``
    (:func:`core.studies.optimal.candidate_session`, :func:`core.io.session.save_session`).

    Raises
    ------
    ConfigError
        No candidate has a plan that trains in the budget (named ``--out``, with why:
        :func:`core.studies.optimal.no_plan_explanation`); nothing is written."""
    from core.cli.common import field_error
    from core.io.session import save_session
    from core.studies.optimal import candidate_session, no_plan_explanation
    try:
        best = candidate_session(session, result)
    except ValueError as exc:
        why = ("" if result.best is not None else
               f" ({no_plan_explanation(result, session.plan.global_batch_size)})")
        raise field_error(f"--out {path}", f"{exc}{why}") from None
    save_session(best, path)


#: Plan fields of the candidates' table beside t, p, d and b (the default space sweeps them).
_SWITCHES = ("sequence_parallel", "zero_stage", "context_parallel")


def _recompute_cell(p: dict) -> str:
    """The recomp column: the mode, and with full recomputation of a block of layers
    (``recompute_num_layers``, Megatron-LM's ``--recompute-method block
    --recompute-num-layers N``: the first N layers of each model chunk) that count, "full
    (block, 4)"; a plan recomputing every layer is "full"."""
    n = p.get("recompute_num_layers")
    return f"{p['recompute']} (block, {n})" if n else str(p["recompute"])


def _memory_cell(plan: dict[str, Any]) -> str:
    """The plan's memory per GPU in GiB, marked ``~`` when tight (as ``vtrain sweep``'s GiB
    column: :attr:`core.studies.sweep.SweepResult.memory_verdict`); a chosen plan fits."""
    mem = f"{plan['max_memory_per_gpu_bytes'] / 2 ** 30:.1f}"
    return f"[yellow]{mem}~[/]" if plan["memory_verdict"] == "tight" else mem


def _spent(candidate) -> str:
    """The FLOPs a candidate spends, Chinchilla's ``6 N D`` (N its parameters, D the tokens
    its plan trains on): with a budget of days above the rule's C when its plan runs faster
    than the assumed MFU, below it when slower; with ``--flops`` C, C or just under it (whole
    iterations)."""
    return f"6 N D = {6.0 * candidate.n_params * candidate.tokens:.3g} FLOPs"


def _in_days(result, candidate, session) -> str:
    """With a FLOP budget, ", in D days ($X)": the candidate's days and their cost on the
    budget's GPUs; "" with a budget of days (every candidate's)."""
    if result.flops is None:
        return ""
    usd = result.num_gpus * candidate.days * 24 * session.cost.price_per_gpu_hour_usd
    return f", in {candidate.days:.3g} days (${usd:,.0f})"


def _cost(result, session) -> float | None:
    """The budget's cost in USD: GPUs x days x 24 x price; None with a FLOP budget (each
    candidate's days differ: its ``cost_usd`` in ``--json``)."""
    if result.days is None:
        return None
    return result.num_gpus * result.days * 24 * session.cost.price_per_gpu_hour_usd


def _print(result, session, console: Console, days: str | None = None) -> None:
    """The study's tables and lines; ``days``: the budget's days as the header prints them,
    with their unit (default :func:`days_text` of ``result.days``, ``"1 day"``, ``"2 days"``)."""
    from rich.table import Table

    from core.util.console import esc
    from core.studies.optimal import format_params
    from core.plan.cluster import node_network
    s = session
    net = node_network(s.cluster)
    node = (f"{s.cluster.gpus_per_node} per node"
            + (f", {net:,.0f} Gb/s per node" if net else "")
            + f"; peak {result.peak_flops / 1e12:,.1f} TFLOP/s per GPU")
    cost = _cost(result, s)
    price = f"${s.cost.price_per_gpu_hour_usd:,.2f}/GPU-hour"
    if result.flops is not None:  # each candidate's own days: the days column
        budget = f"{days or f'{result.flops:g} FLOPs'} (each candidate's days at {price})"
    else:
        budget = (f"{days or days_phrase(days_text(result.days))} "
                  f"(${cost:,.{0 if cost >= 100 else 2}f} at {price})")
    console.print(f"[bold]Compute-optimal model[/] for {result.num_gpus:,} x {esc(s.cluster.gpu)} "
                  f"({esc(node)}) for {budget}; global batch "
                  f"{s.plan.global_batch_size}, sequence {s.model.seq_length}, {s.plan.precision}",
                  highlight=False)
    if result.template:  # which model the candidates' shapes follow
        from core.studies.optimal import template_text
        t = template_text(result.template)
        console.print(esc(f"Candidates {t}"), highlight=False)
    from core.cli.sweep import calibration_mark, print_dimensions
    from core.studies.sweep.dimensions import value_text
    print_dimensions(result.dimensions, s.plan, console)  # the candidates' sweeps, as one
    assumed = ("for the FLOP budget" if result.flops is not None else
               f"at an assumed MFU of {result.assumed_mfu:.0%}")
    console.print(f"Chinchilla rule (loss fit of Besiroglu et al. 2024) {assumed}: "
                  f"C = {result.budget_flops:.3g} FLOPs, N_opt = {format_params(result.rule_params)} "
                  f"parameters, D_opt = {format_params(result.rule_tokens)} tokens "
                  f"({result.rule_tokens / result.rule_params:.0f} tokens per parameter)",
                  highlight=False)
    by_flops = result.flops is not None
    title = ("Candidates: each trained on C / 6N tokens (whole iterations of B x s, not above C) "
             "with its fastest plan that fits, in the days that plan takes" if by_flops else
             "Candidates: each trained with its fastest plan that fits, for the whole budget")
    t = Table(title=title, title_justify="left")
    from core.plan.parallel import plan_field_title
    swept = [plan_field_title(name) for name in _SWITCHES]  # sp, zero, cp: now swept too
    for col in ("params", "L", "h", "a", "t p d b", *swept, "sched", "recomp", "MFU", "GiB",
                "tokens", *(("days",) if by_flops else ()), "tok/param", "loss", "note"):
        t.add_column(col, justify="left" if col in ("sched", "recomp", "note") else "right")
    from core.studies.optimal import candidate_fit_note  # "loss extrapolated", above ln V
    for k, c in enumerate(result.candidates):
        m = c.model
        mark = ", ".join(x for x, on in (("lowest loss", k == result.best),
                                         ("rule's size", k == result.rule_index)) if on)
        style = "bold" if k == result.best else None
        if c.plan is None:
            t.add_row(format_params(c.n_params), str(m.num_layers), str(m.hidden_size),
                      str(m.num_attention_heads), *["-"] * (8 + len(swept) + by_flops),
                      esc(c.reason) + (f" ({mark})" if mark else ""))
            continue
        p = c.plan
        t.add_row(format_params(c.n_params), str(m.num_layers), str(m.hidden_size),
                  str(m.num_attention_heads), f"{p['tensor_parallel']} {p['pipeline_parallel']} "
                  f"{p['data_parallel']} {p['micro_batch_size']}",
                  *(value_text(p[name]) for name in _SWITCHES), p["schedule"],
                  _recompute_cell(p),
                  f"{c.mfu:.1%}{calibration_mark(c.within_calibration, c.calibration_departures)}",
                  _memory_cell(p), format_params(c.tokens),
                  *((f"{c.days:.3g}" if math.isfinite(c.days) else "-",) if by_flops else ()),
                  f"{c.tokens_per_parameter:.3g}",
                  f"{c.loss:.4f}" if math.isfinite(c.loss) else "-",
                  ", ".join(x for x in (esc(c.reason), mark, candidate_fit_note(c)) if x),
                  style=style)
    console.print(t)
    margin = s.cluster.memory_reserve_fraction * 100
    console.print("[dim]MFU counts attention and the output layer too (Megatron-LM's "
                  "definition); the rule's budget counts 6 N D. GiB: memory per GPU (~ = tight: "
                  f"inside the {margin:g} % margin of the GPU's memory, or over it only with the "
                  "allocator's cache)[/]")
    if result.no_tight:
        console.print(NO_TIGHT_OPTIMAL_NOTE, highlight=False)
    _print_outside_calibration(result, console)
    from core.studies.optimal import left_out_note
    left = left_out_note(result)  # sizes that are no row of their own, shapes with no plan
    if left:
        console.print(esc(left), highlight=False)
    if result.rule_index is None and result.candidates:
        from core.studies.optimal import no_rule_candidate_note
        console.print(no_rule_candidate_note(result), highlight=False)
    from core.studies.optimal import fit_range_note
    fit = fit_range_note(result)  # the loss fit's data and the candidates outside it
    if fit:
        console.print(esc(fit), highlight=False)
    if result.best is None:
        from core.studies.optimal import no_plan_explanation
        console.print(f"[red]{esc(no_plan_explanation(result, s.plan.global_batch_size))}[/]",
                      highlight=False)
        return
    b = result.candidates[result.best]
    line = (f"Lowest loss: {format_params(b.n_params)} parameters (L={b.model.num_layers}, "
            f"h={b.model.hidden_size}) trained on {format_params(b.tokens)} tokens "
            f"({_spent(b)}{_in_days(result, b, s)}) at {b.mfu:.1%} MFU, loss {b.loss:.4f}")
    if b.loss_above_ln_vocab:  # then every candidate's is: the ranking says nothing
        from core.studies.optimal import ln_vocab
        every = "the only candidate's" if len(result.candidates) == 1 else "every candidate's"
        line += (f", above ln V = {ln_vocab(b.model.vocab_size):.2f} as {every}: the fit says "
                 "nothing here")
    elif b.outside_fit:
        line += " (extrapolated)"
    if result.rule_index is not None and result.best != result.rule_index:
        r = result.candidates[result.rule_index]
        if r.plan is not None:
            line += (f"; the rule's size ({format_params(r.n_params)}) reaches {r.loss:.4f} on "
                     f"{format_params(r.tokens)} tokens ({_spent(r)}{_in_days(result, r, s)}) "
                     f"at {r.mfu:.1%} MFU")
    console.print(line + ".", highlight=False)
    from core.sim.comm import summarize_warnings
    warnings = summarize_warnings(result.warnings)
    for w in warnings[:3]:
        console.print(f"[yellow]warning:[/] {esc(w)}", highlight=False)
    if len(warnings) > 3:
        console.print(f"[yellow]... and {len(warnings) - 3} more warnings (all in --json)[/]")


def _print_outside_calibration(result, console: Console) -> None:
    """The candidates whose plan leaves what the profile was calibrated on (⚠ beside their
    MFU, :func:`core.cli.sweep.calibration_mark`), counted, with their departures named."""
    from core.cli.sweep import calibration_mark, outside_calibration_text
    from core.util.console import esc
    marked = [c for c in result.candidates if c.plan is not None
              and calibration_mark(c.within_calibration, c.calibration_departures)]
    if not marked:
        return
    named = outside_calibration_text([c.calibration_departures for c in marked])
    n = len(marked)
    whose = "candidates' fastest plans leave" if n != 1 else "candidate's fastest plan leaves"
    console.print(f"[yellow]⚠[/] {n} {whose} what the profile was calibrated on (error band of "
                  f"unknown coverage): {esc(named)}", highlight=False)
