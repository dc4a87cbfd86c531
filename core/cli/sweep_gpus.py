"""``vtrain sweep CONFIG --gpus-from prices.csv``: which GPUs to rent.

The option is registered on ``vtrain sweep``'s parser (:func:`add_arguments`, called by
:mod:`core.cli.sweep`) and handled here (:func:`run_gpu_choice`): one sweep per row of the
price sheet (:mod:`core.io.price_sheet`), the combined front of expected days against expected
dollars across GPU kinds (:mod:`core.studies.gpu_choice`), as a table or ``--json``.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.plan.fields import ConfigError, FieldError

__all__ = ["add_arguments", "run_gpu_choice", "SHEET_OPTIONS_REFUSED"]

#: ``vtrain sweep`` options that make no sense with a price sheet (each row has its own budget,
#: GPUs, store and price), refused by name.
SHEET_OPTIONS_REFUSED = (("gpus", "--gpus"), ("max_gpus", "--max-gpus"),
                         ("profile", "--profile"), ("price_per_gpu_hour", "--price-per-gpu-hour"),
                         ("pick", "--pick"), ("out", "--out"), ("dask", "--dask"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--gpus-from`` to ``vtrain sweep``'s parser."""
    from core.cli.common import path_arg
    parser.add_argument(
        "--gpus-from", type=path_arg, metavar="PRICES.csv",
        help="which GPUs to rent: sweep CONFIG's model on each GPU kind of a price sheet (CSV "
             "columns gpu, price_per_gpu_hour_usd, max_gpus, optional gpus_per_node, source, "
             "date; docs/gpu_choice.md) up to its max_gpus, and print the front of expected "
             "days (with failures and checkpoints, CONFIG's reliability section) against "
             "expected dollars across the kinds; --deadline-days D adds the cheapest plan "
             "within D expected days; --tokens, --set, --workers, --exhaustive, --no-tight, "
             "--json, --max-work (each kind's sweep) and the plan-space options (--micro-batch-sizes, --schedules, "
             "--zero-stages, --context-parallel ...) apply to each kind's sweep, up to its "
             "max_gpus")


def _money(usd: float | None) -> str:
    if usd is None:
        return "-"
    if usd >= 1e6:
        return f"${usd / 1e6:,.2f}M"
    if usd >= 1e3:
        return f"${usd / 1e3:,.1f}k"
    return f"${usd:,.0f}"


def _days(d: float | None) -> str:
    from core.cli.common import fmt_days
    return "-" if d is None else fmt_days(d)


def _band(lo: float | None, hi: float | None, fmt) -> str:
    return "" if lo is None or hi is None else f" ({fmt(lo)}-{fmt(hi)})"


def _check(args: argparse.Namespace) -> None:
    given = [opt for attr, opt in SHEET_OPTIONS_REFUSED if getattr(args, attr, None) is not None]
    if given:
        raise ConfigError([FieldError(opt, "does not apply with --gpus-from (each row of the "
                                           "price sheet has its own GPUs, budget and price)")
                           for opt in given])


def run_gpu_choice(args: argparse.Namespace, space_from_args: Any,
                   print_dimensions: Any = None) -> int:
    """Run ``vtrain sweep CONFIG --gpus-from PRICES.csv``; returns the exit status (errors
    raise ConfigError and friends: exit 2). ``space_from_args(args, session)`` is
    ``vtrain sweep``'s reading of the plan-space options and ``print_dimensions(dimensions,
    plan, console)`` its swept/held lines (passed in: this module is ``core.cli.sweep``'s,
    which imports it)."""
    from core.cli.common import check_number, session_from_args, workers_arg
    from core.io.price_sheet import read_price_sheet
    from core.plan.rules import check_all_but_the_plan
    from core.studies.gpu_choice import choose_gpus
    from core.util.console import Console, esc
    from core.util.inputs import strict_dumps

    _check(args)
    # --workers refused by its name before the sheet is read or any row swept (--dask is
    # refused with --gpus-from: the processes are this machine's)
    workers = workers_arg(args.workers, local=True)
    check_number("--tokens", args.tokens)
    check_number("--deadline-days", args.deadline_days)
    if args.max_work is not None and args.max_work < 1:
        raise ConfigError([FieldError("--max-work", f"{args.max_work} must be a positive number "
                                                    "of pipeline steps")])
    sheet = read_price_sheet(args.gpus_from)
    session = session_from_args(args, validate=False)
    try:
        check_all_but_the_plan(session)
    except ConfigError as exc:
        raise session.in_its_terms(exc) from None
    from core.studies.sweep.parallel import default_workers
    workers = workers or default_workers()
    # the plan-space options given apply to every row's sweep, up to the row's max_gpus (the
    # defaults are vtrain sweep's: SweepSpace.default_for's space with max_gpus=row.max_gpus)
    import dataclasses

    # (a stand-in budget: each row's max_gpus replaces it, and the session's own plan, which
    # need not be valid here, is not asked for its GPU count)
    base = space_from_args(argparse.Namespace(**{**vars(args), "max_gpus": "1"}), session)

    def space_for(row):
        return dataclasses.replace(base, num_gpus=None, max_gpus=row.max_gpus)

    err = Console(stderr=True)

    def notice(text: str) -> None:  # a large row's sweep, with its time estimate (vtrain sweep's)
        err.print(f"[yellow]warning:[/] {esc(text)}", highlight=False)

    # the table prints each row's sweep warnings, its large-sweep note among them, under the
    # front (print_choice): said once, there, where the report's reader sees it; with --json
    # the note is in the rows' "warnings", and standard error says it as the row's sweep starts
    announce = notice if args.json else None

    from core.cli.common import cancel_on_signals
    from core.studies.sweep import SweepCancelled
    # Ctrl+C and SIGTERM cancel the rows' sweeps (their worker processes ended), as vtrain
    # sweep's: one line and status 130 (143), not a traceback or workers left running
    with cancel_on_signals() as cancel:
        try:
            if args.json or not err.is_terminal:
                choice = choose_gpus(session, sheet, prune=not args.exhaustive, workers=workers,
                                     space_for=space_for, notice=announce, max_work=args.max_work,
                                     cancel=cancel.event, no_tight=args.no_tight)
            else:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
                with Progress(TextColumn("{task.description}"), BarColumn(),
                              MofNCompleteColumn(), console=err, transient=True) as bar:
                    tasks = [bar.add_task(f"sweeping {lab}", total=None)
                             for lab in sheet.labels]
                    choice = choose_gpus(
                        session, sheet, prune=not args.exhaustive, workers=workers,
                        space_for=space_for, notice=announce, max_work=args.max_work,
                        cancel=cancel.event, no_tight=args.no_tight,
                        progress=lambda r, d, t: bar.update(tasks[r], completed=d, total=t))
        except SweepCancelled:
            err.print("vtrain: sweep cancelled", highlight=False)
            return cancel.exit_status()
    if not any(c["num_plans"] for c in choice.counts):
        # the plan-space options leave no valid plan on any row: say why, as vtrain sweep does
        # (exit 2), for each row's own GPU kind and budget
        from core.studies.gpu_choice import row_session
        from core.studies.sweep import no_plan_errors
        why = []
        for r, row in enumerate(sheet.rows):
            why += [dataclasses.replace(e, field=f"{sheet.labels[r]}: {e.field}")
                    for e in no_plan_errors(row_session(session, row), space_for(row))]
        raise ConfigError(why)
    if args.json:
        doc = choice.to_dict()
        if args.deadline_days is not None:
            k = choice.within_deadline(args.deadline_days)
            doc["deadline_days"] = args.deadline_days
            doc["cheapest_within_deadline"] = None if k is None else choice.point(k)
        print(strict_dumps(doc))
    else:
        print_choice(choice, Console(), print_dimensions, deadline_days=args.deadline_days)
    return 0


def print_choice(choice, console: Any, print_dimensions: Any = None,
                 deadline_days: float | None = None) -> None:
    """What was held (the model, sequence length, batch, tokens and failure model; each row's
    node and network; with ``print_dimensions``, ``vtrain sweep``'s swept/held lines of the
    rows' sweeps as one), the combined front as a rich table, the best by days and by
    dollars, with more than one row each row's own fastest and cheapest plan, and each row's
    sweep warnings (the first three, summarized)."""
    from rich import box
    from rich.table import Table

    from core.sim.comm import summarize_warnings
    from core.plan.cluster import node_network
    from core.util.console import esc
    from core.util.text import format_params
    s = choice.sweeps[0].session if choice.sweeps else None
    if s is not None:
        console.print(f"[bold]{esc(s.model.name)}[/], sequence {s.model.seq_length:,}, global "
                      f"batch {s.plan.global_batch_size}, "
                      f"{format_params(s.cost.training_tokens)} tokens; failures "
                      f"{s.reliability.failure_rate_per_gpu_hour:.3g} per GPU-hour, restart "
                      f"{s.reliability.restart_time_s:,.0f} s", highlight=False)
    for r, (row, res, n) in enumerate(zip(choice.sheet.rows, choice.sweeps, choice.counts)):
        c = res.session.cluster
        net = node_network(c)
        console.print(esc(f"{choice.sheet.labels[r]}: ${row.price_per_gpu_hour_usd:,.2f}/GPU-hour, "
                          f"up to {row.max_gpus:,} GPUs, {c.gpus_per_node} per node "
                          + (f"({net:,.0f} Gb/s per node) " if net else "")
                          + f"({row.source or 'no source'}"
                          f"{', ' + row.date if row.date else ''}); {n['num_plans']:,} plans, "
                          # as vtrain sweep says them: those that fit, simulated or not, then
                          # those simulated (the others pruned or too large to simulate)
                          f"{n['num_fit']:,} fit in memory, {n['num_feasible']:,} of them "
                          "simulated"), highlight=False)
    dims = [res.dimensions for res in choice.sweeps if res.dimensions]
    if print_dimensions is not None and s is not None and dims:
        from core.studies.sweep import merge_dimensions
        print_dimensions(merge_dimensions(dims), s.plan, console)
    cov = f"{choice.coverage:.0%}"
    n_front = int(choice.front.size)
    t = Table(title=f"Combined front of expected days and dollars: {n_front} "
                    f"plan{'s' if n_front != 1 else ''}, fastest first", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False)
    for col, just in (("GPU kind", "left"), ("GPUs", "right"), ("plan", "left"),
                      (f"expected days ({cov} band)", "right"),
                      (f"expected $ ({cov} band)", "right"), ("goodput", "right"),
                      ("MFU", "right"), ("GiB/GPU", "right")):
        t.add_column(col, justify=just, no_wrap=col != "plan")
    for k in choice.front.tolist():
        p = choice.point(k)
        tight = "~" if p["memory_verdict"] == "tight" else ""
        t.add_row(esc(p["gpu"]), f"{p['num_gpus']:,}{tight}", esc(p["plan"]),
                  _days(p["expected_days"]) + _band(p["expected_days_low"],
                                                    p["expected_days_high"], _days),
                  _money(p["expected_cost_usd"]) + _band(p["expected_cost_usd_low"],
                                                         p["expected_cost_usd_high"], _money),
                  f"{p['goodput']:.1%}", f"{p['mfu']:.1%}",
                  "" if p["max_memory_per_gpu_bytes"] is None
                  else f"{p['max_memory_per_gpu_bytes'] / 2**30:.1f}")
    console.print(t)
    from core.cli.common import tight_front_note
    note = tight_front_note(choice.num_tight_on_front, n_front,
                            choice.num_tight_left_out if choice.no_tight else None)
    if note:
        console.print(note, highlight=False)
    if choice.num_tight_on_front:
        console.print("[dim]~ after the GPUs: tight, within the planner's memory margin "
                      "(cluster.memory_reserve_fraction), or over the GPU's memory only with the "
                      "allocator's cache[/]")
    for name, k in (("fewest days", choice.best_by_days), ("fewest dollars", choice.best_by_dollars)):
        if k is None:
            console.print(esc(f"best by {name}: none ({choice.no_point_reason()})"))
            continue
        p = choice.point(k)
        console.print(esc(
            f"best by {name}: {p['num_gpus']:,} {p['gpu']}, {p['plan']}: "
            f"{_days(p['expected_days'])} days (failures' 10-90 %: {_days(p['days_p10'])}-"
            f"{_days(p['days_p90'])}), {_money(p['expected_cost_usd'])}, goodput {p['goodput']:.1%}"))
    _print_megatron_lm(choice, console)
    if deadline_days is not None:
        _print_deadline(choice, console, deadline_days)
    if len(choice.sweeps) > 1:
        _print_row_best(choice, console)
    console.print("[dim]expected: with failures, restarts and checkpoints (docs/goodput.md); "
                  f"band: the iteration time's {cov} error band of each store carried through "
                  "(none where the store has no calibration runs)[/]")
    for r, res in enumerate(choice.sweeps):
        for w in summarize_warnings(res.warnings)[:3]:
            console.print(f"[yellow]warning:[/] {esc(choice.sheet.labels[r])}: {esc(w)}",
                          highlight=False)
    if choice.undecided:
        console.print(f"[yellow]warning:[/] {choice.undecided:,} plans pruned by their sweep "
                      "could still reach this front; --exhaustive simulates them")
    if choice.never_finish:
        console.print(f"[dim]{choice.never_finish:,} plans that fit never finish at this failure "
                      "rate and are left out[/]")


def _print_megatron_lm(choice, console: Any) -> None:
    """When Megatron-LM runs the session's plan but not the best point by days or by dollars
    (the default space's Transformer Engine cross-entropy, a zero-bubble schedule ...): which,
    Megatron-LM's reasons (:func:`core.io.megatron.export.megatron_blockers`) and the options
    that keep the sweeps to plans it runs (:func:`core.cli.common.megatron_lm_options`), as
    ``vtrain sweep`` says them of its fastest and cheapest plan."""
    from core.cli.common import megatron_lm_options
    from core.io.megatron.export import megatron_blockers
    from core.util.console import esc
    if not choice.sweeps or megatron_blockers(choice.sweeps[0].session):
        return  # not a plan Megatron-LM runs: nothing to keep to
    whys = {}
    for name, k in (("fewest days", choice.best_by_days),
                    ("fewest dollars", choice.best_by_dollars)):
        if k is not None:
            why = megatron_blockers(choice.session_for(k))
            if why:
                whys[name] = "; ".join(dict.fromkeys(why))
    if not whys:
        return
    if len(set(whys.values())) == 1:
        what = f"the best plan by {' and by '.join(whys)} ({next(iter(whys.values()))})"
    else:
        what = " nor ".join(f"the best plan by {n} ({w})" for n, w in whys.items())
    res = choice.sweeps[0]
    options = megatron_lm_options(res.space, res.session.plan)
    console.print("[yellow]Megatron-LM cannot run[/] " + esc(
        f"{what}, though it runs the session's (other frameworks run it)"
        + (f": {options} keeps the sweeps to plans it runs" if options else "")))


def _print_row_best(choice, console: Any) -> None:
    """Each sheet row's own fastest and cheapest plan by expected figures
    (:meth:`~core.studies.gpu_choice.GpuChoice.row_best`, ``--json``'s ``rows``), one table:
    the combined front may hold one kind only, and the others' figures are the comparison a
    price sheet is for. A row without a plan that fits and finishes says so."""
    from rich import box
    from rich.table import Table

    from core.util.console import esc
    t = Table(title="Each kind's own fastest and cheapest plan (--json: rows)",
              title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, just in (("GPU kind", "left"), ("best by", "left"), ("GPUs", "right"),
                      ("plan", "left"), ("expected days", "right"), ("expected $", "right"),
                      ("goodput", "right"), ("MFU", "right"), ("GiB/GPU", "right")):
        t.add_column(col, justify=just, no_wrap=col != "plan")
    tight_here = False
    for r in range(len(choice.sweeps)):
        fastest, cheapest = choice.row_best(r)
        if fastest is None:
            t.add_row(esc(choice.sheet.labels[r]), "-", "", "no plan that fits and finishes",
                      "", "", "", "", "")
            continue
        picks = ([("fewest days, dollars", fastest)] if fastest == cheapest else
                 [("fewest days", fastest), ("fewest dollars", cheapest)])
        for name, k in picks:
            p = choice.point(k)
            tight = "~" if p["memory_verdict"] == "tight" else ""
            tight_here = tight_here or bool(tight)
            t.add_row(esc(choice.sheet.labels[r]), name, f"{p['num_gpus']:,}{tight}",
                      esc(p["plan"]), _days(p["expected_days"]),
                      _money(p["expected_cost_usd"]), f"{p['goodput']:.1%}", f"{p['mfu']:.1%}",
                      "" if p["max_memory_per_gpu_bytes"] is None
                      else f"{p['max_memory_per_gpu_bytes'] / 2**30:.1f}")
    console.print(t)
    if tight_here and not choice.num_tight_on_front:  # the front's note explains ~ otherwise
        console.print("[dim]~ after the GPUs: tight, within the planner's memory margin "
                      "(cluster.memory_reserve_fraction), or over the GPU's memory only with the "
                      "allocator's cache[/]")


def _print_deadline(choice, console: Any, deadline_days: float) -> None:
    """``--deadline-days D``'s line: the cheapest point whose expected days (failures
    included) are at most ``D`` (:meth:`~core.studies.gpu_choice.GpuChoice.within_deadline`),
    or, when none is, the fastest point's expected days, or, without any point, why none
    (:meth:`~core.studies.gpu_choice.GpuChoice.no_point_reason`: "none" alone said nothing)."""
    from core.util.console import esc
    k = choice.within_deadline(deadline_days)
    if k is not None:
        p = choice.point(k)
        console.print(esc(
            f"cheapest within {deadline_days:g} expected days: {p['num_gpus']:,} {p['gpu']}, "
            f"{p['plan']}: {_days(p['expected_days'])} days, {_money(p['expected_cost_usd'])}, "
            f"goodput {p['goodput']:.1%}"))
        return
    fastest = (f" ({choice.no_point_reason()})" if choice.best_by_days is None else
               f"; the fastest takes {_days(choice.point(choice.best_by_days)['expected_days'])}"
               " expected days (more GPUs: raise the sheet's max_gpus)")
    console.print(esc(f"cheapest within {deadline_days:g} expected days: none{fastest}"),
                  style="yellow")
