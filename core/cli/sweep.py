"""``vtrain sweep``: every valid parallel plan of a config, its cost and the Pareto front.

One module of :mod:`core.cli` per subcommand, so that several people can add
subcommands without touching the same lines. Errors
are raised as :class:`~core.plan.fields.ConfigError` (exit status 2, one line).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import TYPE_CHECKING, Any

from core.plan.fields import ConfigError, FieldError
from core.plan.parallel import (CP_COMM_TYPES, MOE_DISPATCHERS, RECOMPUTE_CHOICES,
                                RECOMPUTE_MODES, SCHEDULES, SWEEP_SCHEDULES)
from core.plan.rules import check_all_but_the_plan
from core.util.text import days_phrase, format_params
from core.cli.common import (NO_TIGHT_HELP, SET_HELP, check_number, decimal_arg, fmt_days, integer_arg, path_arg,
                             list_items, check_outputs, session_from_args, session_inputs, workers_arg,
                             SignalCancel, tight_front_note, megatron_lm_options)

if TYPE_CHECKING:  # numpy and rich are imported by the functions that use them (fast ``vtrain --help``)
    from rich.table import Table

    from core.util.console import Console

__all__ = ["add_parser", "run", "print_dimensions", "calibration_mark",
           "outside_calibration_text"]

GiB = 2**30


def add_parser(sub: Any) -> None:
    """Add the ``sweep`` subcommand to ``vtrain``'s sub-parsers."""
    sw = sub.add_parser(
        "sweep", help="search every valid parallel plan: time, cost, Pareto front",
        description="Enumerate every valid plan (tensor, pipeline and data parallel sizes, "
                    "micro-batch size, schedule, recomputation) for the model and global batch "
                    "size of CONFIG within a GPU budget, predict each plan's iteration time and "
                    "print the fastest and cheapest plans and the (days, dollars) Pareto front. "
                    "Without --gpus, --max-gpus or --max-data-parallel the budget is at most "
                    "the GPU count of CONFIG's plan.")
    sw.add_argument("path", type=path_arg, metavar="CONFIG", help="session file (.json) or vTrain config (.json)")
    budget = sw.add_mutually_exclusive_group()
    budget.add_argument("--gpus", metavar="N[,N...]", help="exact GPU count(s)")
    budget.add_argument("--max-gpus", metavar="N", help="largest GPU count")
    sw.add_argument("--max-data-parallel", metavar="D", help="largest data-parallel size")
    sw.add_argument("--tensor-parallel", metavar="T[,T...]",
                    help="tensor-parallel sizes to try (default: divisors of the GPUs per node)")
    sw.add_argument("--tensor-parallel-across-nodes", action="store_true",
                    help="also try tensor-parallel sizes that are multiples of a node")
    sw.add_argument("--pipeline-parallel", metavar="P[,P...]",
                    help="pipeline-parallel sizes to try (default: divisors of the layer count "
                         "and of one or two more layer slots, and the powers of two from 4 "
                         "that split the layers unevenly, with uneven first / last stages and "
                         "the embedding / loss slot flags off)")
    sw.add_argument("--micro-batch-sizes", metavar="B[,B...]",
                    help="micro-batch sizes to try (default: every divisor of the global batch "
                         "while the smallest-memory plan of that size fits in memory)")
    sw.add_argument("--schedules", metavar="S[,S...]", default=",".join(SWEEP_SCHEDULES),
                    help=f"pipeline schedules to try, of {','.join(SCHEDULES)} (default "
                         f"{','.join(SWEEP_SCHEDULES)}: zb-v only when asked)")
    sw.add_argument("--virtual-pipeline-stages", metavar="V[,V...]",
                    help="virtual stages per rank to try with the interleaved schedule "
                         "(default: 2 to 8 where the layers divide by p*v)")
    sw.add_argument("--recompute", metavar="R[,R...]", default=",".join(RECOMPUTE_MODES),
                    help=f"recomputation modes to try, of {','.join(RECOMPUTE_CHOICES)} "
                         f"(default {','.join(RECOMPUTE_MODES)})")
    sw.add_argument("--recompute-num-layers", metavar="all|N[,N...]",
                    help="under full recomputation, the layers recomputed per model chunk "
                         "to try (Megatron-LM's --recompute-method block --recompute-num-layers "
                         "N): all (every layer, '-' in the table) and / or counts from 1 to the "
                         "model's layers; a chunk of N layers or fewer recomputes them all "
                         "(default: every layer, and the fewest per chunk that fit; the "
                         "session's count when it sets one). 'all' keeps the sweep to what "
                         "DeepSpeed, Hugging Face Trainer and torchtitan run")
    sw.add_argument("--sequence-parallel", metavar="N|Y[,...]",
                    help="sequence parallelism off (n) and/or on (y) (default: on wherever t > 1, "
                         "as Megatron-Core users run it; off at t = 1)")
    sw.add_argument("--expert-parallel", metavar="EP[,EP...]",
                    help="expert-parallel sizes to try (default: the divisors of the number of "
                         "experts for a mixture-of-experts model, 1 for a dense one; with t > 1 "
                         "each with the expert tensor-parallel size t, 1 and the session's)")
    sw.add_argument("--overlap-moe-expert-parallel-comm", metavar="N|Y[,...]",
                    help="the EP all-to-all overlap (combined 1F1B) off (n) and/or on (y), on "
                         "only where a plan allows it (default: both for a mixture-of-experts "
                         "model)")
    sw.add_argument("--moe-token-dispatcher", metavar="D[,D...]",
                    help=f"MoE token dispatchers to try with expert parallelism (ep > 1), of "
                         f"{','.join(MOE_DISPATCHERS)} (default: both for a mixture-of-experts "
                         "model); a plan with ep = 1 keeps the session's, or alltoall where flex "
                         "cannot run (expert_tensor_parallel * ep = 1: Megatron-Core's flex "
                         "dispatcher requires TPxEP > 1)")
    sw.add_argument("--cross-entropy-fusion", metavar="C[,C...]",
                    help="the loss's cross-entropy, of off,native,te (--cross-entropy-loss-fusion, "
                         "with --cross-entropy-fusion-impl te) (default: te, held)")
    sw.add_argument("--zero-stages", metavar="Z[,Z...]",
                    help="ZeRO stages to try, of 0,1,2,3 (default: all four, where valid)")
    sw.add_argument("--tp-comm-overlap", metavar="N|Y[,...]",
                    help="the tensor-parallel communication overlap off (n) and/or on (y), on only "
                         "where a plan allows it (default: on where allowed)")
    sw.add_argument("--dp-overlap", metavar="N|Y[,...]",
                    help="the data-parallel overlaps (--overlap-grad-reduce, and "
                         "--overlap-param-gather with ZeRO >= 1) off (n) and/or on (y) "
                         "(default: on)")
    sw.add_argument("--context-parallel", metavar="CP[,CP...]",
                    help="context-parallel sizes to try (world size t*p*cp*d; default: the powers "
                         "of two that split the sequence in 2*cp chunks, up to the budget)")
    sw.add_argument("--cp-comm-types", metavar="X[,X...]",
                    help=f"context-parallel exchanges (--cp-comm-type) to try with cp > 1, of "
                         f"{','.join(CP_COMM_TYPES)}: p2p Megatron-Core's ring, a2a its "
                         "all-to-all (Ulysses), a2a+p2p its hierarchical one, all_gather its "
                         "all-gather of K and V, allgather PyTorch's (torchtitan's "
                         "context_parallel_rotate_method; Megatron-LM cannot run it) "
                         "(default: p2p, a2a where the heads divide by "
                         "cp, and the session's own; a2a+p2p keeps the session's "
                         "plan.cp_a2a_size)")
    sw.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE", help=SET_HELP)
    sw.add_argument("--tokens", type=decimal_arg, metavar="T", help="training token budget (overrides the file)")
    sw.add_argument("--price-per-gpu-hour", type=decimal_arg, metavar="USD",
                    help="price of one GPU-hour in USD (overrides the file)")
    sw.add_argument("--deadline-days", type=decimal_arg, metavar="D",
                    help="also report the cheapest plan that trains within D days (the "
                         "failure-free days, iterations x iteration time; --pick deadline "
                         "writes it as a session; with --gpus-from, the expected days with "
                         "failures and checkpoints, across the GPU kinds)")
    sw.add_argument("--profile", type=path_arg, metavar="STORE.h5", help="profile store to use instead of the shipped one")
    sw.add_argument("--out", type=path_arg, metavar="FILE.csv|S.json",
                    help="write every plan to a CSV file; with --pick, write the picked plan as a "
                         "session file (.json) instead")
    sw.add_argument("--pick", metavar="fastest|cheapest|deadline|N",
                    help="with --out S.json: the plan to write as a session (the sweep's model, "
                         "cluster and cost): the fastest or cheapest plan that fits, the "
                         "cheapest that fits and trains within --deadline-days (deadline), or "
                         "the N-th plan of the Pareto front, fastest first (1 = the fastest)")
    sw.add_argument("--workers", metavar="N",
                    help="processes to sweep on (default: all cores; 1: this process only); with "
                         "--dask local, the size of the local Dask cluster")
    sw.add_argument("--dask", metavar="ADDRESS",
                    help="send the plans to the Dask scheduler at ADDRESS (tcp://host:8786), or "
                         "'local' to start a local Dask cluster of --workers processes; needs "
                         "dask[distributed] (see docs/sweep_parallel.md)")
    sw.add_argument("--max-work", metavar="STEPS", type=integer_arg,
                    help="refuse the sweep when its plans that fit need more than STEPS pipeline "
                         "steps to simulate (default: no limit; a sweep of more than "
                         "300,000,000, about two minutes, is run with a warning and its time "
                         "estimate)")
    sw.add_argument("--no-tight", action="store_true", help=NO_TIGHT_HELP)
    sw.add_argument("--exhaustive", action="store_true",
                    help="simulate every plan that fits (no branch and bound; the same answers, "
                         "slower)")
    sw.add_argument("--json", action="store_true",
                    help="print one JSON object (num_plans, num_fit: those that fit in "
                         "memory, num_feasible: those of them simulated, wall_s, fastest, "
                         "cheapest, pareto, ...) instead of tables")
    from core.cli.sweep_gpus import add_arguments as add_gpu_choice_arguments
    add_gpu_choice_arguments(sw)  # --gpus-from: which GPUs to rent (core/cli/sweep_gpus.py)


def _ints(option: str, text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    items = list_items(option, text)
    try:  # ASCII digits (integer_arg): int() reads "1_6" as 16
        values = tuple(integer_arg(v) for v in items)
    except argparse.ArgumentTypeError:
        raise ConfigError([FieldError(option, f"{text!r} is not a comma-separated list of "
                                              "integers")]) from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError([FieldError(option, f"{text!r}: every value must be a positive integer")])
    return values


def _one_int(option: str, text: str | None) -> int | None:
    values = _ints(option, text)
    if values is not None and len(values) != 1:
        raise ConfigError([FieldError(option, f"{text!r}: give one positive integer")])
    return None if values is None else values[0]


def _names(option: str, text: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    values = tuple(v.lower() for v in list_items(option, text))
    bad = [v for v in values if v not in choices]
    if not values or bad:
        raise ConfigError([FieldError(option, f"{text!r}: choose from {', '.join(choices)}")])
    return values


def _flags(option: str, text: str | None) -> tuple[bool, ...] | None:
    """``"n,y"`` -> ``(False, True)``; None when the option is not given."""
    return None if text is None else tuple(v == "y" for v in _names(option, text, ("n", "y")))


def _recompute_layers(option: str, text: str | None, num_layers: int,
                      recompute: tuple[str, ...]) -> tuple[int | str, ...] | None:
    """``"all,2"`` -> ``("all", 2)``: the values of ``--recompute-num-layers``
    (:attr:`core.studies.sweep.SweepSpace.recompute_num_layers`); None when not given.

    Raises
    ------
    ConfigError
        (naming ``option``) an item that is neither ``all`` nor a whole number from 1 to
        ``num_layers`` (the model's layers: Megatron-LM's block method counts a model chunk's
        layers), or counts given while ``recompute`` (the sweep's ``--recompute``) has no
        ``full``.
    """
    from core.studies.sweep.space import RECOMPUTE_ALL_LAYERS
    if text is None:
        return None
    out: list[int | str] = []
    for item in list_items(option, text):
        if item.lower() == RECOMPUTE_ALL_LAYERS:
            out.append(RECOMPUTE_ALL_LAYERS)
            continue
        try:
            n = integer_arg(item)
        except argparse.ArgumentTypeError:
            n = None
        if n is None or not 1 <= n <= num_layers:
            raise ConfigError([FieldError(option, (
                f"{item!r}: give {RECOMPUTE_ALL_LAYERS} (every layer) or a number of layers "
                f"per model chunk from 1 to the model's {num_layers} (model.num_layers)"))])
        out.append(n)
    if "full" not in recompute:
        raise ConfigError([FieldError(option, (
            "the recomputed layers apply under full recomputation only, which --recompute "
            f"{','.join(recompute)} does not try: add full to --recompute"))])
    return tuple(dict.fromkeys(out))


def _space_from_args(args: argparse.Namespace, session) -> Any:
    from core.studies.sweep import SweepSpace
    gpus = _ints("--gpus", args.gpus)
    max_gpus = _one_int("--max-gpus", args.max_gpus)
    max_d = _one_int("--max-data-parallel", args.max_data_parallel)
    if gpus is None and max_gpus is None and max_d is None:
        max_gpus = session.plan.num_gpus
    recompute = _names("--recompute", args.recompute, RECOMPUTE_CHOICES)
    return SweepSpace(
        num_gpus=gpus, max_gpus=max_gpus, max_data_parallel=max_d,
        tensor_parallel=_ints("--tensor-parallel", args.tensor_parallel),
        tensor_parallel_across_nodes=args.tensor_parallel_across_nodes,
        pipeline_parallel=_ints("--pipeline-parallel", args.pipeline_parallel),
        micro_batch_sizes=_ints("--micro-batch-sizes", args.micro_batch_sizes),
        schedules=_names("--schedules", args.schedules, SCHEDULES),
        recompute=recompute,
        recompute_num_layers=_recompute_layers("--recompute-num-layers",
                                               args.recompute_num_layers,
                                               session.model.num_layers, recompute),
        sequence_parallel=(None if args.sequence_parallel is None else tuple(
            v == "y" for v in _names("--sequence-parallel", args.sequence_parallel, ("n", "y")))),
        overlap_moe_expert_parallel_comm=(
            None if args.overlap_moe_expert_parallel_comm is None else tuple(
                v == "y" for v in _names("--overlap-moe-expert-parallel-comm",
                                         args.overlap_moe_expert_parallel_comm, ("n", "y")))),
        moe_token_dispatcher_type=(
            None if args.moe_token_dispatcher is None
            else _names("--moe-token-dispatcher", args.moe_token_dispatcher, MOE_DISPATCHERS)),
        cross_entropy_fusion=(
            None if args.cross_entropy_fusion is None
            else _names("--cross-entropy-fusion", args.cross_entropy_fusion,
                        ("off", "native", "te"))),
        tp_comm_overlap=_flags("--tp-comm-overlap", args.tp_comm_overlap),
        dp_overlap=_flags("--dp-overlap", args.dp_overlap),
        zero_stages=(None if args.zero_stages is None else tuple(
            int(v) for v in _names("--zero-stages", args.zero_stages, ("0", "1", "2", "3")))),
        virtual_pipeline_stages=_ints("--virtual-pipeline-stages", args.virtual_pipeline_stages),
        expert_parallel=_ints("--expert-parallel", args.expert_parallel),
        context_parallel=_ints("--context-parallel", args.context_parallel),
        cp_comm_type=(None if args.cp_comm_types is None
                      else _names("--cp-comm-types", args.cp_comm_types, CP_COMM_TYPES)),
    )


def run(args: argparse.Namespace) -> int:
    """Run ``vtrain sweep``; returns the exit status (errors raise ConfigError and friends)."""
    if getattr(args, "gpus_from", None) is not None:  # which GPUs to rent: its own module
        from core.cli.sweep_gpus import run_gpu_choice
        return run_gpu_choice(args, _space_from_args, print_dimensions)

    from core.util.console import Console
    from core.util.inputs import strict_dumps
    from core.util.console import esc
    from core.studies.sweep import no_plan_errors, run_sweep, unused_values

    check_number("--tokens", args.tokens)
    check_number("--price-per-gpu-hour", args.price_per_gpu_hour, allow_zero=True)
    check_number("--deadline-days", args.deadline_days)
    check_outputs([("--out", args.out)], [args.path, args.profile])
    if args.max_work is not None and args.max_work < 1:
        raise ConfigError([FieldError("--max-work", f"{args.max_work} must be a positive number "
                                                    "of pipeline steps")])
    pick = _pick_arg(args.pick, args.out, args.deadline_days)
    dask = args.dask.strip() if args.dask is not None else None
    if dask is not None and not dask:
        raise ConfigError([FieldError("--dask", "give a scheduler address (tcp://host:8786) or "
                                                "'local'")])
    # the option's own value, refused naming --workers before any plan is swept (a remote
    # scheduler's workers are its own: not bounded by this machine's cores)
    from core.studies.sweep.parallel import default_workers
    workers = workers_arg(args.workers, local=dask is None or dask == "local") or default_workers()
    session = session_from_args(args, validate=False)
    check_outputs([("--out", args.out)], session_inputs(session))
    try:
        check_all_but_the_plan(session)  # the file's own plan is only a starting point
    except ConfigError as exc:  # name the file, in its own terms
        raise session.in_its_terms(exc) from None
    space = _space_from_args(args, session)
    err_console = Console(stderr=True)
    told: list[str] = []  # the notes said on stderr as the sweep starts: not repeated under it

    def notice(text: str) -> None:
        told.append(text)
        err_console.print(f"[yellow]warning:[/] {esc(text)}", highlight=False)

    def sweep(**kw: Any):
        try:
            return run_sweep(session, space, deadline_days=args.deadline_days, workers=workers,
                             dask=dask, prune=not args.exhaustive, max_work=args.max_work,
                             no_tight=args.no_tight, notice=notice, **kw)
        except ConfigError as exc:  # a rule of the file's plan fields: name the file
            if any(e.field.startswith("plan.") for e in exc.errors):
                raise session.in_its_terms(exc) from None
            raise

    result = _sweep_interruptibly(sweep, err_console, show=not args.json)
    if isinstance(result, SignalCancel):  # Ctrl+C or SIGTERM: the sweep stopped cleanly
        err_console.print("vtrain: sweep cancelled", highlight=False)
        return result.exit_status()
    if result.num_plans == 0:
        why = no_plan_errors(session, space)
        if args.json:  # the reasons as data too; the exit status and the error line stay
            print(strict_dumps({"num_plans": 0, "no_plan": [
                {"values": e.field, "reason": e.message} for e in why]}))
        raise ConfigError(why)
    unused = unused_values(session, space, result)
    if pick is not None:
        picked = _write_pick(result, pick, args.out)
    elif args.out:
        result.write_csv(args.out)
    if args.json:
        doc = result.to_dict()
        doc["unused_values"] = [{"values": e.field, "reason": e.message} for e in unused]
        print(strict_dumps(doc))
    else:
        console = Console()
        _print_result(result, console, None if pick is not None else args.out, told=told)
        if pick is not None:
            what = (f"plan {pick} of the front" if not isinstance(pick, str)
                    else f"cheapest plan within {days_phrase(f'{result.deadline_days:g}')}"
                    if pick == "deadline" else pick)
            console.print(f"[dim]the {what} written as a session to {esc(args.out)}[/]")
            refused = _megatron_pick_note(result, picked)
            if refused:
                console.print(esc(refused), highlight=False)
            tight = _tight_pick_note(result, pick, picked)
            if tight:
                console.print(esc(tight), highlight=False)
        if unused:
            from core.util.console import esc
            console.print("\nValues given but in no valid plan:")
            for e in unused:
                console.print(f"  {esc(e.field)}: {esc(e.message)}")
    return 0


#: What each phase of a sweep is called on the progress display.
_PHASE_TEXT = {"enumerate": "enumerating plans", "memory": "memory of each plan",
               "bound": "lower bound of each plan", "simulate": "simulating plans"}


def _sweep_interruptibly(sweep: Any, err_console: Console, show: bool) -> Any:
    """Run ``sweep(cancel=..., phase=..., progress=...)`` with Ctrl+C and SIGTERM as its Cancel
    (:func:`core.cli.common.cancel_on_signals`): either signal sets the sweep's cancel event
    (on the main thread; the sweep stops within 0.5 s in every phase and ends its worker
    processes), so the command exits with one line and status 130 (143 for SIGTERM) instead
    of a traceback (or, for SIGTERM, of ending at once with its workers left running). With ``show``
    and a terminal, a rich progress display names the phase (enumeration, memory, lower
    bounds, simulation) and its progress. Returns the result, or the
    :class:`~core.cli.common.SignalCancel` that cancelled it."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    from core.cli.common import cancel_on_signals
    from core.studies.sweep import SweepCancelled

    with cancel_on_signals() as cancel:
        try:
            if not show or not err_console.is_terminal:
                return sweep(cancel=cancel.event)
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err_console, transient=True) as bar:
                task = bar.add_task(_PHASE_TEXT["enumerate"], total=None)

                def phase(name: str, done: int, total: int) -> None:
                    bar.update(task, description=_PHASE_TEXT.get(name, name), completed=done,
                               total=max(total, 1))

                return sweep(cancel=cancel.event, phase=phase)
        except SweepCancelled:
            return cancel


def _pick_arg(text: str | None, out: str | None,
              deadline_days: float | None = None) -> str | int | None:
    """``--pick``'s value: ``"fastest"``, ``"cheapest"``, ``"deadline"`` (the cheapest plan
    that fits within ``--deadline-days``, which it needs) or a 1-based rank on the front; it
    needs ``--out S.json``, and ``--out S.json`` needs it (a CSV of every plan is ``--out
    FILE.csv``): ConfigError otherwise."""
    if text is None:
        if out and out.lower().endswith(".json"):
            raise ConfigError([FieldError("--out", f"{out!r}: a .json file holds one plan as a "
                                                   "session: add --pick fastest|cheapest|"
                                                   "deadline|N, or "
                                                   "give --out FILE.csv for every plan "
                                                   "(--json prints the sweep as JSON)")])
        return None
    value = text.strip().lower()
    if value not in ("fastest", "cheapest", "deadline"):
        try:
            value = int(value)
        except ValueError:
            value = 0
        if value < 1:
            raise ConfigError([FieldError("--pick", f"{text!r}: give fastest, cheapest, "
                                                    "deadline or a positive rank on the Pareto "
                                                    "front")])
    if value == "deadline" and deadline_days is None:
        raise ConfigError([FieldError("--pick", "deadline: the cheapest plan within a deadline "
                                                "needs --deadline-days D")])
    if not out or not out.lower().endswith(".json"):
        raise ConfigError([FieldError("--out", "--pick writes a session: give --out S.json")])
    return value


def _write_pick(result, pick: str | int, path: str) -> int:
    """Write the picked plan of ``result`` as a session file at ``path`` (atomically,
    :func:`core.io.session.save_session`); returns its row."""
    from core.io.session import save_session
    if pick == "fastest":
        i = result.fastest
    elif pick == "cheapest":
        i = result.cheapest
    elif pick == "deadline":
        i = result.cheapest_within_deadline
        if i is None and result.fastest is not None:
            raise ConfigError([FieldError("--pick", (
                f"deadline: no plan that fits finishes within {days_phrase(f'{result.deadline_days:g}')}; "
                f"the fastest plan that fits takes "
                f"{fmt_days(result.training_days[result.fastest])} days"))])
    else:
        front = result.pareto_indices()
        if pick > front.size:
            raise ConfigError([FieldError("--pick", f"{pick}: the Pareto front has "
                                                    f"{front.size} plan{'s' if front.size != 1 else ''}")])
        i = int(front[pick - 1])
    if i is None:  # none fits, or none of those that fit was simulated: say which
        import numpy as np
        why = result.why_none(np.ones(result.num_plans, bool)) if result.num_plans else "no plan"
        raise ConfigError([FieldError("--pick", f"{pick}: {why}")])
    save_session(result.session_for(i), path)
    return i


def _megatron_pick_note(result, i: int) -> str:
    """"" unless Megatron-LM runs the session's plan but not the picked plan ``i`` (the
    default space's Transformer Engine cross-entropy, a zero-bubble schedule ...): then that
    ``vtrain export megatron-args`` refuses the written session, Megatron-LM's reasons
    (:func:`core.io.megatron.export.megatron_blockers`) and the sweep options that keep to
    plans it runs (:func:`megatron_lm_options`). A session Megatron-LM does not run (a
    DeepSpeed, torchtitan or Bridge one) gets none: nothing to keep to."""
    from core.io.megatron.export import megatron_blockers
    if megatron_blockers(result.session):
        return ""
    why = megatron_blockers(result.session_for(i))
    if not why:
        return ""
    options = megatron_lm_options(result.space, result.session.plan)
    return ("Megatron-LM cannot run the picked plan (" + "; ".join(dict.fromkeys(why))
            + "): vtrain export megatron-args refuses it"
            + (f"; {options} keeps the sweep to plans it runs" if options else ""))


def _tight_pick_note(result, pick: str | int, i: int) -> str:
    """"" unless the picked plan ``i`` is tight in memory; then its verdict and, for
    ``fastest`` or ``cheapest``, the best plan by the same measure among those that fit
    outside the margin (a planner whose run ran out of memory may want that one)."""
    import numpy as np

    from core.sim.report import memory_verdict_text
    from core.studies.sweep.result import best_row, plan_label
    if result.memory_verdict[i] != "tight":
        return ""
    need = float(result.max_memory_per_gpu_bytes[i])
    note = ("the picked plan is " + memory_verdict_text(
        need, result.memory_capacity_bytes, result.session.cluster.memory_reserve_fraction,
        bool(result.fits_in_memory[i])))
    roomy = result.feasible & (np.asarray(result.memory_verdict) == "fits")
    if pick in ("fastest", "cheapest"):
        by, then = ((result.training_days, result.cost_usd) if pick == "fastest"
                    else (result.cost_usd, result.training_days))
        j = best_row(by, then, roomy, result.max_memory_per_gpu_bytes)
        if j is None:
            note += "; no plan that fits outside the margin was simulated"
        else:
            more = (by[j] / by[i] - 1) * 100
            note += (f"; the {pick} simulated plan that fits outside the margin: "
                     f"{plan_label(result.plans[j])}, "
                     f"{float(result.max_memory_per_gpu_bytes[j]) / 2**30:,.1f} GiB, "
                     f"{more:+.1f} % {'days' if pick == 'fastest' else 'cost'}")
        pruned = int(np.count_nonzero(np.asarray(result.pruned, bool)
                                      & (np.asarray(result.memory_verdict) == "fits")))
        if pruned:
            note += (f" ({pruned:,} plan{'s' if pruned != 1 else ''} that fit outside the margin "
                     "were pruned unsimulated: --exhaustive simulates them)")
    return note


def _money(usd: float) -> str:
    if usd >= 1e6:
        return f"${usd / 1e6:,.2f}M"
    if usd >= 1e3:
        return f"${usd / 1e3:,.1f}k"
    return f"${usd:,.0f}"


#: Set by :func:`_print_result` while it prints: True on a terminal too narrow for a column per
#: plan field, where the tables show each plan as one wrapping ``plan`` column (its label).
_COMPACT = False
#: The figure columns after the plan's: title and the width their values need.
_FIGURE_COLUMNS = (("GPUs", 6), ("iter s", 9), ("days", 7), ("cost", 7), ("MFU", 6), ("GiB", 7))


def _wide_fields(result) -> list[str]:
    """The plan fields a wide table shows, a column each: t, p, d, b, schedule, recompute and
    any other field whose value differs between the swept plans."""
    from core.plan.parallel import ParallelPlan
    constant = result.constant_plan_fields()  # computed once per result, not once per row
    return [f.name for f in dataclasses.fields(ParallelPlan)
            if f.metadata.get("label") == "always" or f.name not in constant]


def _plan_fields(result) -> list[str]:
    """The plan columns of the tables: :func:`_wide_fields`, or ``["plan"]`` (the label)
    when compact."""
    return ["plan"] if _COMPACT else _wide_fields(result)


def _wide_width(result) -> int:
    """Characters a table with one column per plan field needs (titles or values, and a
    label column of 8)."""
    from core.plan.parallel import plan_field_title
    return 9 + sum(max(len(plan_field_title(n)), 5) + 1 for n in _wide_fields(result)) + sum(
        w + 1 for _, w in _FIGURE_COLUMNS)


#: What a plan outside calibration with no feature departure leaves: the GPU count or the
#: model size (:attr:`core.studies.sweep.SweepResult.in_calibration_range`).
OUTSIDE_RANGE = "GPU count or model size outside the calibration runs'"


def calibration_mark(within: bool | None, departures: str) -> str:
    """``" ⚠"`` beside the figures of a plan outside what its profile was calibrated on
    (``within`` false: :attr:`core.studies.sweep.SweepResult.within_calibration`, its GPU
    count or model size beyond the calibration runs' or a feature none of them had, named in
    ``departures``), else ``""``: the tables' mark, as the window's Explore table puts it,
    which a footnote explains (:func:`outside_calibration_text`)."""
    return "" if within or within is None else " ⚠"


def outside_calibration_text(departures: list[str]) -> str:
    """What the marked plans (their ``departures``, one per plan, "" for a plan outside the
    GPU-count or model-size range only) leave, each kind once, joined by " | "."""
    return " | ".join(dict.fromkeys(d or OUTSIDE_RANGE for d in departures))


def _plan_cells(result, i: int) -> list[str]:
    from core.util.console import esc
    mem = f"{result.max_memory_per_gpu_bytes[i] / GiB:,.1f}"
    plan = result.plans[i]
    if _COMPACT:
        cells = [esc(plan.label())]
    else:
        from core.studies.sweep.dimensions import value_text
        cells = [value_text(getattr(plan, name)) for name in _wide_fields(result)]
    outside = calibration_mark(result.within_calibration[i], result.calibration_departures[i])
    if not math.isfinite(result.iteration_time_s[i]):  # not simulated (it does not fit): no figures
        return [*cells, f"{result.num_gpus[i]:,}", "-", "-", "-", "-",
                f"[red]{mem}![/]" if not result.fits_in_memory[i] else mem]
    return [*cells,
            f"{result.num_gpus[i]:,}", f"{result.iteration_time_s[i]:,.2f}{outside}",
            fmt_days(result.training_days[i]),
            _money(result.cost_usd[i]), f"{result.mfu[i]:.1%}",
            f"[red]{mem}![/]" if not result.fits_in_memory[i] else
            f"[yellow]{mem}~[/]" if result.memory_verdict[i] == "tight" else mem]


def _plan_table(title: str, result, first_col: str | None = None) -> Table:
    from rich import box
    from rich.table import Table

    from core.plan.parallel import plan_field_title
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
              padding=0)
    if first_col is not None:
        t.add_column(first_col, style="bold", no_wrap=True)
    # on a narrow terminal one column holds the plan's label, wrapping between its words, and
    # the figures keep their width: a figure cut to "179.0…" or a GiB without its mark would
    # be misread
    if _COMPACT:
        t.add_column("plan", overflow="fold", ratio=1)
    else:
        for name in _wide_fields(result):
            t.add_column(plan_field_title(name), justify="right"
                         if result.plan_columns[name].dtype.kind == "i" else "left", no_wrap=True)
    for col, width in _FIGURE_COLUMNS:
        t.add_column(col, justify="right", no_wrap=True, min_width=width)
    return t


def _print_result(result, console: Console, csv_path: str | None,
                  told: list[str] | tuple[str, ...] = ()) -> None:
    """The text report of a sweep: the headline and counts, the notes on MFU and precision,
    the best plans, where the config's own plan stands, the Pareto front, the warnings (less
    those in ``told``: said on stderr as the sweep started, the "large sweep" note), the best
    plan by each dimension and where the CSV of every plan went (``csv_path``)."""
    global _COMPACT
    _COMPACT = console.width < _wide_width(result)
    try:
        _print_tables(result, console, csv_path, told)
    finally:
        _COMPACT = False


def _print_tables(result, console: Console, csv_path: str | None,
                  told: list[str] | tuple[str, ...] = ()) -> None:
    """:func:`_print_result`'s body, with :data:`_COMPACT` set for the console's width."""
    from core.util.console import esc
    _print_header(result, console)
    _print_mfu_notes(result, console)
    best, own = _best_table(result)
    console.print(best)
    _print_megatron_lm(result, console)
    console.print()
    _print_own_plan(result, console, own)
    console.print()
    _print_front(result, console)
    _print_warnings(result, console, told)
    _print_best_by(result, console)
    if csv_path:
        console.print(f"[dim]all {result.num_plans:,} plans written to {esc(csv_path)}[/]")


def _print_header(result, console: Console) -> None:
    """The sweep's headline (model, GPU, batch, token budget, price, budget), the profile, the
    plan counts (valid, fitting, simulated, pruned) with the wall time, the swept dimensions, a
    kept pipeline layout, and the legend of the tables."""
    import numpy as np

    from core.util.console import esc
    from core.studies.sweep import budget_text
    s = result.session
    from core.plan.cluster import node_network
    net = node_network(s.cluster)
    console.print(f"[bold]{esc(s.model.name)}[/] on {esc(s.cluster.gpu)} ({s.cluster.gpus_per_node} per "
                  f"node{f', {net:,.0f} Gb/s per node' if net else ''}), sequence "
                  f"{s.model.seq_length:,}, global batch {s.plan.global_batch_size}, "
                  f"{format_params(s.cost.training_tokens)} tokens at ${s.cost.price_per_gpu_hour_usd:,.2f}"
                  f"/GPU-hour; budget: {budget_text(result.space)}", highlight=False)
    prov = result.profile
    console.print(esc(f"profile: {prov.get('device')} ({prov.get('method')}) {prov.get('path', '')}"))
    n_pruned = int(np.count_nonzero(result.pruned))
    n_fit = int(np.count_nonzero(result.fits_in_memory))
    console.print(f"{result.num_plans:,} valid plans, {n_fit:,} fit in "
                  f"memory, {result.num_feasible:,} of them simulated"
                  + (f" ({n_pruned:,} pruned: their lower bound cannot change the answers)"
                     if n_pruned else "") + f"; swept in {result.wall_s:.2f} s")
    print_dimensions(result.dimensions, result.session.plan, console)
    most = int(np.max(result.num_gpus)) if result.num_plans else 0
    tokens = s.plan.global_batch_size * s.model.seq_length
    if most > s.plan.global_batch_size:  # e.g. a preset's or an import's small batch
        console.print(f"[yellow]note:[/] the global batch ({s.plan.global_batch_size:,} sequences, "
                      f"{tokens:,} tokens) is smaller than the {most:,} GPUs of the largest plan: "
                      "data parallelism stops at the batch, and the rest of the GPUs split "
                      "sequences (t, p, cp); set the run's batch with --set "
                      "plan.global_batch_size=N (pretraining runs use a few million tokens)")
    from core.plan.layout import expand_pipeline_layout, pipeline_layout_text
    layout = pipeline_layout_text(s.plan)
    if layout is not None:  # every plan keeps it: only its p*v is tried
        n = len(expand_pipeline_layout(layout))
        console.print(esc(f"pipeline layout {layout} kept in every plan: only p*v = {n} tried"))
    if n_fit and len(np.unique(result.num_gpus)) > 1:  # how many GPUs the model needs
        few = result.fewest_gpus()
        text = f"fewest GPUs with a plan that fits in memory: {few['fits or tight']:,}"
        if few["fits"] != few["fits or tight"]:
            text += (" (tight)" if few["fits"] is None else
                     f" (tight); outside the margin: {few['fits']:,}")
        console.print(text + " (simulated or not; --out FILE.csv lists each plan)",
                      highlight=False)
    if n_fit == 0:
        console.print("[red]No plan fits in GPU memory[/] (the GiB column marks them with !).")
        if result.num_plans:  # how far the closest plan is: the least memory one needs
            import numpy as np
            from core.studies.sweep.result import plan_label
            mem = np.asarray(result.max_memory_per_gpu_bytes, float)
            j = int(np.nanargmin(mem))
            console.print(esc(
                f"the plan needing the least memory: {mem[j] / 2**30:,.1f} GiB per GPU of "
                f"{result.memory_capacity_bytes / 2**30:,.1f} ({plan_label(result.plans[j])}, "
                f"{int(result.num_gpus[j]):,} GPUs)"), highlight=False)
    elif result.num_feasible == 0:
        left = result.num_tight_left_out
        if left:  # --no-tight left them out: not the simulator's limit
            n_fit, others = f"{n_fit:,} plan{'s' if n_fit != 1 else ''}", n_fit - left
            console.print(
                f"[red]No plan fits outside the memory margin[/]: of the {n_fit} that fit in "
                f"memory, {left:,} {'are' if left != 1 else 'is'} tight (inside the "
                f"{result.session.cluster.memory_reserve_fraction * 100:g} % margin) and left "
                "out by --no-tight"
                + (f", {others:,} too large to simulate" if others else "")
                + "; without --no-tight the tight plans are simulated and marked ~ (--out "
                "FILE.csv gives each plan's reason).", highlight=False)
        else:
            console.print("[red]No plan that fits was simulated[/] (too large to simulate: "
                          "--out FILE.csv gives each plan's reason).")
    margin = result.session.cluster.memory_reserve_fraction * 100
    console.print("[dim]days and cost: for the token budget, iterations x iteration time "
                  "(without failures, restarts or checkpoints: vtrain simulate's goodput lines, "
                  "--gpus-from's expected figures); GiB: memory per GPU (! = does not fit, "
                  f"~ = tight: inside the {margin:g} % margin of the GPU's memory, or over it "
                  "only with the allocator's cache)[/]")


def _print_mfu_notes(result, console: Console) -> None:
    """Notes on the MFU column: the causal-mask share of the model FLOPs when under 0.97 (long
    sequences) and the fp8 recipe with the peak MFU is measured against."""
    s = result.session
    from core.model.counts import causal_model_flops_per_iteration, model_flops_per_iteration
    causal = causal_model_flops_per_iteration(s.model, s.plan) / model_flops_per_iteration(s.model, s.plan)
    if causal < 0.97 and result.fastest is not None:  # long sequences: the square vs the mask
        console.print(f"[dim]MFU: Narayanan et al.'s Eq. 3, the whole s x s attention square (it "
                      f"can pass HFU, even 100 %, at long sequences); counting only the causal "
                      f"half, as Megatron-Core 0.19 logs it, is {causal:.2f} x that (the fastest "
                      f"plan: {result.mfu[result.fastest] * causal:.1%})[/]")
    if s.plan.precision == "fp8":
        from core.plan.parallel import fp8_recipe
        from core.sim.costing import MFU_PEAK_NOTE
        console.print(f"[dim]precision fp8, recipe {fp8_recipe(s.plan)}; {MFU_PEAK_NOTE}[/]")


def _best_table(result):
    """The "Best plans" table (fastest, cheapest, cheapest within the deadline when one is set,
    the config's own plan when swept; ``-`` cells where there is none) and the index of the
    config's own plan among the swept ones (None when not swept)."""
    best = _plan_table("Best plans", result, "")
    rows = [("fastest", result.fastest), ("cheapest", result.cheapest)]
    if result.deadline_days is not None:
        rows.append((f"<= {result.deadline_days:g} d", result.cheapest_within_deadline))
    own = result.index_of(result.session.plan)
    if own is not None:
        rows.append(("config", own))
    for label, i in rows:
        if i is None:
            best.add_row(label, *(["-"] * (len(_plan_fields(result)) + 6)))
        else:
            best.add_row(label, *_plan_cells(result, i))
    return best, own


def _print_megatron_lm(result, console: Console) -> None:
    """When Megatron-LM runs the session's plan but not the fastest or the cheapest one: which,
    why (its own assertion messages), and the options of a sweep kept to what it runs
    (:func:`megatron_lm_options`; none when the space asks for nothing Megatron-LM refuses)."""
    from core.util.console import esc
    refused = result.megatron_lm()
    if not refused:
        return
    whys = {name: "; ".join(dict.fromkeys(ws)) for name, ws in refused.items()}
    if len(set(whys.values())) == 1:  # one reason for both: said once
        what = f"the {' and the '.join(whys)} plan ({esc(next(iter(whys.values())))})"
    else:  # each plan with its own reasons
        what = " nor ".join(f"the {name} plan ({esc(w)})" for name, w in whys.items())
    options = megatron_lm_options(result.space, result.session.plan)
    console.print(f"[yellow]Megatron-LM cannot run[/] {what}, though it "
                  "runs the session's (other frameworks run it)"
                  + (f": {options} keeps the sweep to plans it runs" if options else ""))


def _print_own_plan(result, console: Console, own: int | None) -> None:
    """No plan within the deadline (when one is set), then where the config's own plan (index
    ``own``, None when not swept) stands: not swept and why, on the Pareto front, not fitting, or
    dominated (by how many, and the cheapest of them with its time and cost change)."""
    import numpy as np

    from core.util.console import esc
    if result.deadline_days is not None and result.cheapest_within_deadline is None \
            and result.num_feasible:  # none simulated: the summary above says why
        quick = (f"; the fastest plan that fits takes {fmt_days(result.training_days[result.fastest])} days"
                 if result.fastest is not None else "")
        console.print(f"No plan that fits finishes within {days_phrase(f'{result.deadline_days:g}')}"
                      f"{quick}.")
    if own is None:
        p = result.session.plan
        why = result.space.excludes(p)
        console.print(f"The config's own plan ({p.label()}) is not among the swept plans: "
                      + (f"{why}." if why else "outside the budget or the candidate values, or it "
                         "breaks a configuration rule."))
    elif result.pareto[own]:
        console.print("The config's plan is on the Pareto front.")
    elif not result.feasible[own]:  # "does not fit: ..." or "too large to simulate: ..."
        console.print(f"The config's plan: {esc(result.reason[own])}")
    else:
        dom = result.dominated_by(own)
        j = int(dom[np.lexsort((result.training_days[dom], result.cost_usd[dom]))[0]])
        console.print(
            f"The config's plan is dominated by {len(dom):,} plan{'s' if len(dom) != 1 else ''} "
            f"(as fast or faster and as cheap or cheaper); the cheapest of them, "
            f"{result.plans[j].label()}, "
            f"takes {_change(result.training_days[j] / result.training_days[own] - 1)} time at "
            f"{_change(_ratio(result.cost_usd[j], result.cost_usd[own]) - 1)} cost.")


def _print_front(result, console: Console) -> None:
    """The Pareto front of (days, cost), fastest first, and the plans outside calibration;
    nothing when no plan was simulated."""
    n_front = int(result.pareto.sum())
    front = _plan_table(f"Pareto front of (days, cost): {n_front} plan{'s' if n_front != 1 else ''}, "
                        f"fastest first", result)
    for i in result.pareto_indices().tolist():
        front.add_row(*_plan_cells(result, i))
    if result.num_feasible:
        console.print(front)
        note = tight_front_note(result.num_tight_on_front, n_front,
                                result.num_tight_left_out if result.no_tight else None)
        if note:
            console.print(note, highlight=False)
        _print_outside_calibration(result, console)


def _print_warnings(result, console: Console, told: list[str] | tuple[str, ...] = ()) -> None:
    """The first three of the sweep's summarized warnings, the rest counted (all in --json);
    those in ``told`` (already said on stderr as the sweep started) are not repeated."""
    from core.util.console import esc
    from core.sim.comm import summarize_warnings
    warnings = summarize_warnings([w for w in result.warnings if w not in told])
    for w in warnings[:3]:
        console.print(f"[yellow]warning:[/] {esc(w)}", highlight=False)
    if len(warnings) > 3:
        console.print(f"[yellow]... and {len(warnings) - 3} more warnings "
                      f"(all in --json)[/]")


def _print_outside_calibration(result, console: Console) -> None:
    """The plans that fit but leave what the store was calibrated on (⚠ in the tables: a
    feature none of its runs had, or a GPU count or model size beyond theirs), counted among
    the simulated ones ("simulated" said when branch and bound pruned some), with the front's
    departures named."""
    n = result.num_outside_calibration
    if not n:
        return
    from core.util.console import esc
    within = result.within_calibration
    named = sorted({result.calibration_departures[i] or OUTSIDE_RANGE
                    for i in result.pareto_indices().tolist() if not within[i]})
    # counted among the simulated plans: a pruned plan has no figures (--exhaustive counts all)
    pruned = bool(result.pruned.any())
    console.print(f"[yellow]⚠[/] {n:,} {'simulated ' if pruned else ''}plan{'s' if n != 1 else ''}"
                  " that fit leave what the profile was calibrated on (error band of unknown "
                  "coverage)"
                  + (f"; on the front: {esc(' | '.join(named))}" if named else ""),
                  highlight=False)


def print_dimensions(dimensions: list[dict[str, Any]], plan, console: Console) -> None:
    """What a sweep chose (each field with its values) and what it held, and why, from its
    ``dimensions`` (:func:`core.studies.sweep.sweep_dimensions`); the precision (with TF32
    matmuls, ``plan.tf32``) and the CUDA graphs (``plan.cuda_graph_impl``) the session's
    ``plan`` holds. ``vtrain optimal`` prints its sweeps' the same way."""
    from core.plan.parallel import plan_field_title, tf32_matmuls
    from core.util.console import esc

    from core.studies.sweep import held_dimensions
    from core.studies.sweep.dimensions import value_text as text
    swept = [d for d in dimensions if d["swept"]]
    held = held_dimensions(dimensions, plan)

    def left_out(d: dict) -> str:
        return "".join(f" [dim]({esc(text(x['value']))} left out: {esc(x['why'])})[/]"
                       for x in d.get("left_out", ()))

    if swept:
        console.print("swept: " + "; ".join(
            f"{esc(plan_field_title(d['field']))} {esc(', '.join(map(text, d['values'])))}"
            + (f" [dim]({esc(d['stopped'])})[/]" if d.get("stopped") else "")
            + (f" [dim]({esc(d['note'])})[/]" if d.get("note") else "") + left_out(d)
            for d in swept))
    if held:
        console.print("held: " + "; ".join(
            f"{esc(plan_field_title(d['field']))} {esc(text(d['values'][0]))} "
            f"[dim]({esc(d['why'])})[/]" + left_out(d) for d in held))
    # the precision and TF32 are the session's framework settings, never swept: say which
    pl = plan
    precision = f"precision {pl.precision}" + (" with TF32 matmuls" if tf32_matmuls(pl) else "")
    if getattr(pl, "cuda_graph_impl", "none") != "none":  # a framework setting too, never swept
        precision += f"; CUDA graphs {pl.cuda_graph_impl}" + (
            f" of {pl.cuda_graph_modules}" if pl.cuda_graph_modules else "")
    console.print(f"[dim]every other plan field is the session's ({esc(precision)}; --json: "
                  "dimensions)[/]")


def _print_best_by(result, console: Console) -> None:
    """The fastest plan that fits for each value of each swept dimension."""
    from core.plan.parallel import plan_field_title
    best = result.best_by()
    if not best or not result.num_feasible:
        return
    table = _plan_table("Fastest plan that fits for each value of each swept dimension", result,
                        "value")
    unfit = []
    for name, rows in best.items():
        for r in rows:
            v = r["value"]
            label = (f"{'GPUs' if name == 'num_gpus' else plan_field_title(name)} "
                     f"{'-' if v is None else 'y' if v is True else 'n' if v is False else v}")
            if r["plan"] is None:
                table.add_row(label, *(["-"] * (len(_plan_fields(result)) + 6)))
                if r.get("reason"):
                    unfit.append(f"{label}: {r['reason']}")
            else:
                table.add_row(label, *_plan_cells(result, _row_index(result, r["plan"])))
    console.print()
    console.print(table)
    for line in unfit:  # the rows of dashes, why
        console.print(f"[dim]{line}[/]")


def _row_index(result, row: dict) -> int:
    """The row of ``result`` whose plan a ``best_by`` entry names."""
    from core.plan.parallel import ParallelPlan
    plan = ParallelPlan(**{f.name: row[f.name] for f in dataclasses.fields(ParallelPlan)})
    return result.index_of(plan)


def _ratio(x: float, y: float) -> float:
    """``x / y``, 1 when both are 0 (a free GPU-hour: every cost is $0)."""
    return 1.0 if x == y else x / y


def _change(rel: float) -> str:
    """``-0.1772`` -> ``"17.72% less"``; ``0.05`` -> ``"5.00% more"``; ``0`` -> ``"the same"``."""
    if abs(rel) < 5e-5:
        return "the same"
    return f"{abs(rel):.2%} {'less' if rel < 0 else 'more'}"
