"""What a sweep costs before it runs, and what it may skip: memory first, then lower bounds.

Every plan's memory is known in closed form (:func:`memory_verdicts`): plans that do not fit
are never simulated, and plans too large to simulate are named (:func:`mark_too_large`). The
work of the rest is estimated (:func:`sweep_work`, :func:`work_notes`). Under branch and bound
each plan that fits gets an iteration-time lower bound from its stage times
(:func:`fill_lower_bounds`, :func:`iteration_lower_bound_s`), and
:func:`branch_and_bound` simulates the plans in rounds by increasing bound, dropping those
whose bound shows they cannot change the sweep's answers (:func:`prunable`). The batches
themselves are solved by :mod:`core.studies.sweep.batch`.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Sequence

import numpy as np

from core import schedules as pipeline_schedules
from core.model import memory, model_math
from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.plan.fields import ConfigError, FieldError
from core.plan.session import Session
from core.sim.op_times import num_chunks
from core.sim.stages import stage_busy_times
from core.sim.simulate import (MAX_GRAPH_TASKS, graph_tasks_bound, graph_too_large,
                               memory_verdict_rows)
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.pace import yield_interpreter
from core.studies.sweep.phase import PhaseFn, PhaseTicker
from core.studies.sweep.plan_rows import PlanRows, plan_keys
from core.studies.sweep.result import BEST_BY_FIELDS, best_by_values, column_codes
from core.studies.sweep.variants import plan_maker

__all__ = ["MAX_PIPELINE_STEPS", "STEPS_PER_S", "LARGE_SWEEP_WORK", "sweep_work", "work_seconds",
           "duration_text", "work_notes", "pipeline_steps", "plan_microbatches", "memory_verdicts",
           "mark_too_large", "bound_plan",
           "iteration_lower_bound_s", "fill_lower_bounds", "value_codes", "prunable",
           "branch_and_bound"]

#: Plans with more pipeline steps than this (``p * m * v``) are listed without figures.
MAX_PIPELINE_STEPS = 10_000_000
#: Pipeline steps (:func:`sweep_work`) one core simulates per second, roughly (the MT-NLG
#: study, 9,000 plans and about 6e7 steps, took about half a minute before the compiled
#: solver; 3e8 about two minutes): the time estimate of a large sweep.
STEPS_PER_S = 2.5e6
#: Sweeps whose plans that fit need more work than this (about two minutes on one core) say
#: so before they start, with a time estimate (``run_sweep``'s ``notice``, the result's
#: warnings); nothing refuses them unless ``max_work`` (``--max-work``) is given.
LARGE_SWEEP_WORK = 300_000_000

def sweep_work(plans: list[ParallelPlan], num_layers: int) -> int:
    """Work of simulating ``plans``, in pipeline steps: the sum over plans of ``p * m * v``
    (the batch solver's arrays) plus ``10 * L / p`` (the per-layer lookups of each plan's
    stage times, about ten steps' time each); plans above :data:`MAX_PIPELINE_STEPS` count 0
    (they are listed without figures)."""
    return sum(pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl)
               + 10 * num_layers // pl.pipeline_parallel for pl in plans
               if pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl) <= MAX_PIPELINE_STEPS)


def work_seconds(work: float) -> float:
    """Rough wall time of ``work`` pipeline steps on one core, seconds
    (:data:`STEPS_PER_S`)."""
    return work / STEPS_PER_S


def duration_text(seconds: float) -> str:
    """``seconds`` in words for a time estimate: seconds below 90, minutes below 90 minutes,
    hours above."""
    if seconds < 90:
        return f"{seconds:,.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:,.0f} minutes"
    return f"{seconds / 3600:,.1f} hours"


def work_notes(plans: list[ParallelPlan], rows: np.ndarray, num_layers: int, prune: bool,
               max_work: int | None, steps: np.ndarray | None = None) -> list[str]:
    """The sweep's note when the plans ``rows`` (those that fit and are simulated, int (k,))
    need more than :data:`LARGE_SWEEP_WORK` pipeline steps (:func:`sweep_work`): one string
    with a time estimate, or none. ``steps``: every plan's :func:`pipeline_steps`, when known
    (the same sum without a pass over the plans).

    Raises
    ------
    ConfigError
        They need more than ``max_work`` steps (field ``sweep.max_work``).
    """
    if steps is None:
        work = sweep_work([plans[i] for i in rows.tolist()], num_layers)
    else:  # sweep_work's sum, with numpy
        s = steps[rows]
        p = (np.asarray(plans.columns["pipeline_parallel"], np.int64)[rows]
             if isinstance(plans, PlanRows)  # the column: no plan built
             else np.array([plans[i].pipeline_parallel for i in rows.tolist()], np.int64))
        work = int(np.where(s <= MAX_PIPELINE_STEPS, s + 10 * num_layers // p, 0).sum())
    estimate = (f"the {rows.size:,} plans that fit in memory and are within the simulation's "
                f"limit ({MAX_PIPELINE_STEPS:,} pipeline steps each) need up to {work:,} pipeline "
                f"steps to simulate, about {duration_text(work_seconds(work))} on one core"
                + (" before pruning" if prune else ""))
    if max_work is not None and work > max_work:
        raise ConfigError([FieldError("sweep.max_work", f"{estimate}, more than the limit of "
                                      f"{max_work:,} (raise it, or narrow the space)")])
    return [f"large sweep: {estimate}"] if work > LARGE_SWEEP_WORK else []


def pipeline_steps(plans: list[ParallelPlan], columns: dict[str, np.ndarray] | None = None
                   ) -> np.ndarray:
    """Each plan's pipeline steps ``p * m * v`` (int64 (n,); ``v`` :func:`num_chunks`). From
    the plans' :func:`core.studies.sweep.result.plan_column_arrays` ``columns`` when given:
    :func:`num_chunks` once per (schedule, v), the products with numpy (the same integers)."""
    if columns is None:
        return np.array([pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl)
                         for pl in plans], np.int64).reshape(-1)
    of, firsts = column_codes(columns, ("schedule", "virtual_pipeline_stages"), len(plans))
    chunks = np.array([num_chunks(plans[i]) for i in firsts], np.int64)
    p = np.asarray(columns["pipeline_parallel"], np.int64)
    return p * plan_microbatches(columns) * (chunks[of] if firsts else of)


def plan_microbatches(columns: dict[str, np.ndarray]) -> np.ndarray:
    """Each plan's micro-batch count ``B // (d*b)`` (int64 (n,),
    :attr:`core.plan.parallel.ParallelPlan.num_microbatches`) from its
    :func:`core.studies.sweep.result.plan_column_arrays` ``columns``."""
    return (np.asarray(columns["global_batch_size"], np.int64)
            // (np.asarray(columns["data_parallel"], np.int64)
                * np.asarray(columns["micro_batch_size"], np.int64)))


def mark_too_large(plans: list[ParallelPlan], fits: np.ndarray, reason: list[str], model,
                   columns: dict[str, np.ndarray] | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Each plan's pipeline steps ``p * m * v`` (int64 (n,)) and whether it is too large to
    simulate (bool (n,)): more than :data:`MAX_PIPELINE_STEPS` steps, or a plan of ``model``
    that ``vtrain simulate`` refuses (:func:`core.sim.simulate.graph_too_large`), so that the
    sweep never answers with a plan whose figures ``simulate`` cannot give. The reason of
    each such plan that ``fits`` (bool (n,)) in memory is set in ``reason`` (list of n str,
    changed). ``columns``: the plans' :func:`core.studies.sweep.result.plan_column_arrays`,
    when known (:func:`pipeline_steps`)."""
    steps = pipeline_steps(plans, columns)
    too_large = steps > MAX_PIPELINE_STEPS
    for i in np.flatnonzero(too_large & fits).tolist():
        pl = plans[i]
        reason[i] = (f"too large to simulate: pipeline_parallel*num_microbatches"
                     f"*virtual_pipeline_stages={pl.pipeline_parallel}*{pl.num_microbatches}"
                     f"*{num_chunks(pl)}={int(steps[i]):,} is more than {MAX_PIPELINE_STEPS:,}")
    # the exact count only where the bound over every setting passes the limit (a few plans)
    if columns is None:
        m = [pl.num_microbatches for pl in plans]
        p = [pl.pipeline_parallel for pl in plans]
    else:
        m, p = plan_microbatches(columns), columns["pipeline_parallel"]
    bound = graph_tasks_bound(model, m, steps, p)
    for i in np.flatnonzero(~too_large & fits & (bound > MAX_GRAPH_TASKS)).tolist():
        why = graph_too_large(model, plans[i])
        if why:
            too_large[i] = True
            reason[i] = f"too large to simulate: {why}"
    return steps, too_large


#: Plans whose memory :func:`memory_verdicts` adds up at once (numpy arrays of this many rows).
_MEMORY_ROWS = 8192


def memory_verdicts(plans: list[ParallelPlan] | None, model, store, *,
                    cancel: Any = None, phase: PhaseFn | None = None,
                    memo: dict | None = None, keys: list[tuple] | None = None,
                    make: Callable[[dict], ParallelPlan] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Closed-form memory of every plan (:func:`core.model.memory.stage_memory_arrays`, the
    rule and message of :func:`core.sim.simulate.memory_verdict_arrays`): largest bytes per GPU
    float64 (n,), fits bool (n,), reasons ("" when it fits). No graph is built.

    Bit-identical to :func:`core.sim.simulate.memory_verdict_arrays` of
    :func:`core.model.memory.stage_memory_arrays` plan by plan, computed by parts: the
    activations once per plan key without :data:`core.model.memory.ACTIVATION_FREE_PLAN_FIELDS`
    (:func:`core.model.memory.stage_activation_rows`: many plans' at once, their parts
    shared), the weights, gradients, optimizer state and NCCL buffers once per key without
    :data:`core.model.memory.STATE_FREE_PLAN_FIELDS`
    (:func:`core.model.memory.stage_state_bytes`), then the sums and verdicts of up to
    :data:`_MEMORY_ROWS` plans of one stage count as (k, p) arrays
    (:func:`core.sim.simulate.memory_verdict_rows`).

    ``cancel`` is checked every few plans and before each batch (:class:`SweepCancelled`) and
    ``phase`` told the progress (phase ``"memory"``, :class:`core.studies.sweep.phase.PhaseTicker`:
    the keys up to a fifth of ``n``, the activations up to four fifths, then the verdicts).
    ``memo`` (a dict, empty at first) keeps the weights, gradients, optimizer state and the
    activations' shared parts for further calls with the same ``model`` and ``store`` (the
    sweep's calls for each micro-batch size share them).

    ``keys`` (with ``plans`` None): the plans given as their :func:`plan_key` tuples instead,
    a plan built (``make``, :func:`core.studies.sweep.variants.plan_maker`'s) only for each
    activation key and each state key not in ``memo``: the same figures, without a plan
    object per plan."""
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    capacity = float(store.memory_bytes)
    n = len(plans) if keys is None else len(keys)
    act_key = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                    if f not in memory.ACTIVATION_FREE_PLAN_FIELDS))
    state_key = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                      if f not in memory.STATE_FREE_PLAN_FIELDS))
    acts: dict[tuple, int] = {}
    act_plans: list[ParallelPlan] = []       # one plan per activation key
    memo = {} if memo is None else memo
    known_states: dict[tuple, tuple] = memo.setdefault("state", {})
    states: dict[tuple, int] = {}
    # (weights, gradients, optimizer state, its fp32 gradient copy, NCCL bytes)
    state_list: list[tuple] = []
    act_of, state_of = np.empty(n, np.int64), np.empty(n, np.int64)
    ticker = PhaseTicker("memory", n, cancel, phase)
    for start in range(0, n, _KEY_ROWS):
        yield_interpreter()
        ticker.tick(start // 5)
        if keys is None:
            chunk = plans[start:start + _KEY_ROWS]
            chunk_keys = list(map(plan_key, chunk))
            plan_at = chunk.__getitem__
        else:
            chunk_keys = keys[start:start + _KEY_ROWS]
            plan_at = (lambda j, chunk_keys=chunk_keys:
                       make(dict(zip(PLAN_FIELDS, chunk_keys[j]))))
        codes, firsts = _codes_of(acts, map(act_key, chunk_keys))
        act_of[start:start + len(chunk_keys)] = codes
        act_plans += [plan_at(j) for j in firsts]
        codes, firsts = _codes_of(states, map(state_key, chunk_keys))
        state_of[start:start + len(chunk_keys)] = codes
        for j in firsts:
            ks = state_key(chunk_keys[j])
            state = known_states.get(ks)
            if state is None:
                pl = plan_at(j)
                state = known_states[ks] = (*memory.stage_state_bytes(model, pl, fp8_tn),
                                            float(memory.nccl_buffer_bytes(pl)))
            state_list.append(state)
    tables, act_row = _activation_tables(act_plans, model, n, ticker,
                                         memo.setdefault("activation_parts", {}))
    mem, fits, why = np.zeros(n), np.zeros(n, bool), [""] * n
    stages = np.array([len(s[0]) for s in state_list], np.int64)[state_of] if n else state_of
    done = 0
    for p in np.unique(stages).tolist():
        for rows in _chunks(np.flatnonzero(stages == p), _MEMORY_ROWS):
            yield_interpreter()
            ticker.tick(4 * n // 5 + done // 5)
            done += rows.size
            su, si = np.unique(state_of[rows], return_inverse=True)
            st = [np.array([state_list[j][c] for j in su.tolist()]) for c in range(5)]
            act = tables[p][act_row[act_of[rows]]]
            parts = memory.StageMemoryArrays.rows(
                st[0][si], st[1][si], memory.optimizer_at_peak(st[2][si], st[3][si], act), act,
                st[4][si].reshape(-1, 1))
            need, ok, reasons = memory_verdict_rows(parts, capacity)
            mem[rows], fits[rows] = need, ok
            for r, text in zip(rows.tolist(), reasons):
                why[r] = text
    ticker.finish()
    return mem, fits, why


#: Plans whose keys :func:`memory_verdicts` codes at once (a few milliseconds).
_KEY_ROWS = 2048


def _codes_of(index: dict, keys) -> tuple[np.ndarray, list[int]]:
    """Each of ``keys`` (an iterable of k hashable keys) as its number in ``index`` (dict:
    key -> number; a key not in it gets the next number, ``len(index)``, and is added), int64
    (k,), and the positions of the keys added, in the order of their numbers."""
    before = len(index)
    setdefault = index.setdefault
    codes = np.array([setdefault(k, len(index)) for k in keys], np.int64)
    new = np.flatnonzero(codes >= before)
    if not new.size:
        return codes, []
    _, first = np.unique(codes[new], return_index=True)  # numbers in order of first appearance
    return codes, new[first].tolist()


#: Plans whose activations :func:`memory_verdicts` computes at once.
_ACTIVATION_ROWS = 2048


def _activation_tables(act_plans: list[ParallelPlan], model, n: int, ticker: PhaseTicker,
                       parts: dict) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """The activations of ``act_plans`` (:func:`core.model.memory.stage_activation_rows`, in
    batches of :data:`_ACTIVATION_ROWS` plans of one stage count): a table per stage count p
    (float64 (u, p)) and each plan's row in its table (int (k,)). ``ticker`` (of ``n``
    plans) is told from a fifth to four fifths of ``n`` and checks Cancel before each batch;
    ``parts`` is :func:`core.model.memory.stage_activation_rows`' memo (this model's)."""
    act_p = np.array([pl.pipeline_parallel for pl in act_plans], np.int64)
    act_row = np.empty(len(act_plans), np.int64)
    tables: dict[int, np.ndarray] = {}
    done = 0
    for p in np.unique(act_p).tolist():
        idx = np.flatnonzero(act_p == p)
        act_row[idx] = np.arange(idx.size)
        table = tables[p] = np.empty((idx.size, p))
        for start in range(0, idx.size, _ACTIVATION_ROWS):
            yield_interpreter()
            ticker.tick(n // 5 + (3 * n * done) // (5 * max(len(act_plans), 1)))
            chunk = idx[start:start + _ACTIVATION_ROWS]
            table[start:start + chunk.size] = memory.stage_activation_rows(
                model, [act_plans[j] for j in chunk.tolist()], parts)
            done += chunk.size
    return tables, act_row


def _chunks(rows: np.ndarray, size: int) -> list[np.ndarray]:
    """``rows`` (int (k,)) in consecutive pieces of at most ``size``."""
    return [rows[s:s + size] for s in range(0, rows.size, size)]

def bound_plan(pl: ParallelPlan, model) -> ParallelPlan:
    """The plan whose compute-stream times bound ``pl``'s from below, shared by many plans:
    ``pl`` without the data-parallel side (ZeRO 0, no data-parallel overlaps; d = 1 for a
    dense model, whose work items do not depend on d), which only adds communication to the
    work items and a tail after them. An FSDP plan (ZeRO 3) keeps its data-parallel side but
    d: its backward adds no weight gradient to a gradient buffer
    (:func:`core.plan.parallel.wgrad_accumulation`), which ZeRO 0 would, and its parameter
    gathers and gradient reduce-scatters are its own work items (on the compute stream unless
    overlapped), which at ZeRO 3 without the overlaps would be exposed where the plan hides
    them; over fewer ranks (d = 1 for a dense model) they take no longer."""
    d = 1 if not model.is_moe else pl.data_parallel
    if pl.zero_stage == 3:
        return pl if pl.data_parallel == d else dataclasses.replace(pl, data_parallel=d)
    if (pl.zero_stage == 0 and not pl.overlap_grad_reduce and not pl.overlap_param_gather
            and pl.data_parallel == d and not pl.fp8_param_gather):
        return pl
    return dataclasses.replace(pl, zero_stage=0, overlap_grad_reduce=False,
                               overlap_param_gather=False, data_parallel=d,
                               fp8_param_gather=False)


def iteration_lower_bound_s(st, num_microbatches: int, busy_only: bool = False) -> float:
    """A lower bound of the iteration time the batch solver gives a plan with stage times
    ``st`` (:class:`core.sim.stages.StageTimes`, shapes (p, v) and (p,)) and m micro-batches,
    seconds: its compute plus the schedule's least bubble (branch and bound's bound).

    Each stage runs its items one after another (:func:`core.sim.fastpath.pipeline_iteration_times`). Stage
    ``i``'s first item is a forward, which waits for micro-batch 0's forward of chunk 0 on
    every stage before it (``sum_{r<i} F[r, 0]``); the stage then works ``m * sum_c (F + B +
    W)[i, c]`` (transfers only add), and its tail ``dp_comm_s + optimizer_s`` follows. Its
    last input-gradient item B comes after all its forwards and backwards (each forward's B
    follows it), and that micro-batch's B then runs on every stage before it, chunk 0's
    ``sum_{r<i} B[r, 0]`` at least, before stage 0's tail. So

        T >= max_i max(sum_{r<i} F[r,0] + m sum_c (F+B+W)[i,c] + dp[i] + opt[i],
                       sum_{r<i} F[r,0] + m sum_c (F+B)[i,c] + sum_{r<i} B[r,0] + dp[0] + opt[0]).

    For 1F1B this is the busiest stage's compute plus the (p - 1)(F + B) bubble of Narayanan
    et al. 2021; for ZB-H1 it stays below the (p - 1)(F + B - W) bubble plus the W left after
    the last B (Qi et al. 2024); for the interleaved schedule below the (p - 1)/v bubble. The
    tests check it against the solver on every plan of several spaces.

    ``busy_only`` bounds every plan that differs from ``st``'s only on the data-parallel
    side (:func:`bound_plan`): the compute stream's own time of each item (``busy_*_s``)
    and no tail.
    """
    F, Bw, W = st.fwd_s, st.bwd_s, st.wgrad_s                 # (p, v) each
    if busy_only and st.busy_fwd_s is not None:
        F, Bw, W = st.busy_fwd_s, st.busy_bwd_s, st.busy_wgrad_s
    return _lower_bound(F, Bw, W, float(num_microbatches),
                        None if busy_only else st.dp_comm_s + st.optimizer_s)


def _lower_bound(F: np.ndarray, Bw: np.ndarray, W: np.ndarray, m: float,
                 tail: np.ndarray | None) -> float:
    """:func:`iteration_lower_bound_s` of forward, backward and weight-gradient times ``F``,
    ``Bw``, ``W`` (float64 (p, v) each), ``m`` micro-batches and the stages' tails ``tail``
    (float64 (p,); None: none, as ``busy_only``), seconds (:func:`_lower_bounds` of one m)."""
    return float(_lower_bounds(F, Bw, W, np.array([float(m)]), tail)[0])


def _lower_bounds(F: np.ndarray, Bw: np.ndarray, W: np.ndarray, m: np.ndarray,
                  tail: np.ndarray | None) -> np.ndarray:
    """:func:`_lower_bound` of several micro-batch counts ``m`` (float64 (g,)) at once,
    float64 (g,): each row the same IEEE operations as one count alone."""
    before_f = np.concatenate(([0.0], np.cumsum(F[:-1, 0])))  # (p,)
    before_b = np.concatenate(([0.0], np.cumsum(Bw[:-1, 0])))
    if tail is None:
        tail = np.zeros(F.shape[0])
    m = m.reshape(-1, 1)
    busy = (before_f + m * (F + Bw + W).sum(axis=1) + tail).max(axis=1)
    chain = (before_f + m * (F + Bw).sum(axis=1) + before_b + tail[0]).max(axis=1)
    return np.where(chain > busy, chain, busy)  # max(busy, chain), the first when equal


_FIRST_ROUND = 32
_MAX_ROUND = 4096


def prunable(lb_days: np.ndarray, lb_cost: np.ndarray, lb_time: np.ndarray, rows: np.ndarray,
              days: np.ndarray, cost: np.ndarray, time_s: np.ndarray, done: np.ndarray,
              codes: list[np.ndarray]) -> np.ndarray:
    """Which of ``rows`` (int (k,)) cannot change the result (bool (k,)): a plan simulated and
    fitting (``done``) is faster than its bound and no more expensive, or no slower and
    cheaper (so the plan is strictly dominated, off the front, neither fastest, cheapest nor
    cheapest within a deadline), and for every dimension of :data:`BEST_BY_FIELDS`, a plan
    with the same value (``codes``, int (n,) each) is already faster than its bound (so it
    is no dimension value's best either). Exact: the bounds never exceed the figures."""
    if not done.any() or not rows.size:
        return np.zeros(rows.size, bool)
    idx = np.flatnonzero(done)
    order = idx[np.argsort(days[idx], kind="stable")]
    d_sorted, c_prefix = days[order], np.minimum.accumulate(cost[order])
    le = np.searchsorted(d_sorted, lb_days[rows], side="right")    # plans with days <= bound
    lt = np.searchsorted(d_sorted, lb_days[rows], side="left")     # days < bound
    best_le = np.where(le > 0, c_prefix[np.maximum(le - 1, 0)], np.inf)
    best_lt = np.where(lt > 0, c_prefix[np.maximum(lt - 1, 0)], np.inf)
    out = (best_le < lb_cost[rows]) | (best_lt <= lb_cost[rows])
    for code in codes:
        fastest = np.full(int(code.max()) + 1, np.inf)
        np.minimum.at(fastest, code[idx], time_s[idx])
        out &= fastest[code[rows]] < lb_time[rows]
    return out


def fill_lower_bounds(lower: np.ndarray, plans: list[ParallelPlan], rows: np.ndarray, model,
                      cluster, cost, store, lookup_cache: dict, cancel: Any,
                      phase: PhaseFn | None = None) -> None:
    """Set ``lower[i]`` (float64 (n,), changed) to the iteration-time lower bound of each plan
    ``i`` of ``rows`` (int (k,)), seconds: :func:`iteration_lower_bound_s` (``busy_only``) of
    the compute stream's busy times of its :func:`bound_plan`
    (:func:`core.sim.stages.stage_busy_times`: the figures of
    :func:`core.sim.stages.stage_times` without the spans, which the bound does not read),
    each computed once (memo ``lookup_cache``, as :func:`core.sim.stages.stage_times`), and
    the bounds of the plans sharing them at once (:func:`_lower_bounds` of their
    micro-batch counts). The bound plans that differ only in d and b are taken one after
    another, and the memo is emptied but its analytic op times once it grows past
    :data:`BOUND_MEMO_ENTRIES` entries (the same bounds: each entry is a function of its key).
    ``plans``: a list, or a :class:`~core.studies.sweep.plan_rows.PlanRows` (read from its
    columns: a plan is built per bound plan only).

    Raises
    ------
    SweepCancelled
        ``cancel`` was set (checked every few plans and before each bound plan; ``phase`` is
        told the progress, phase ``"bound"``: the keys up to a fifth, then the bound plans).
    """
    ticker = PhaseTicker("bound", rows.size, cancel, phase)
    zero = dict(_BOUND_FIELDS)
    if not model.is_moe:
        zero["data_parallel"] = 1
    subst = [(PLAN_FIELDS.index(f), v) for f, v in zero.items()]
    d_only = [(j, v) for j, v in subst if PLAN_FIELDS[j] == "data_parallel"]  # FSDP's
    zero_at = PLAN_FIELDS.index("zero_stage")
    groups: dict[tuple, list[int]] = {}
    firsts: list[list] = []  # each group's first bound_plan fields, in the groups' order
    at = rows.tolist()
    for step, (i, key) in enumerate(zip(at, plan_keys(plans, at))):
        if not step & 31:
            yield_interpreter()
            ticker.tick(step // 5)
        fields = list(key)                   # bound_plan(plans[i], model)'s fields
        for j, v in (d_only if fields[zero_at] == 3 else subst):
            fields[j] = v
        schedule = fields.pop(_SCHEDULE_FIELD)
        bkey = (pipeline_schedules.get(schedule).stage_times_kind, tuple(fields))
        group = groups.get(bkey)
        if group is None:
            groups[bkey] = [i]
            fields.insert(_SCHEDULE_FIELD, schedule)
            firsts.append(fields)
        else:
            group.append(i)
    del at
    # each plan's micro-batches B // (d*b) (ParallelPlan.num_microbatches): from the columns
    micro = (plan_microbatches(plans.columns) if isinstance(plans, PlanRows) else None)
    # the bound plans that differ only in d and b one after another: they share their layout
    # shapes, so that the memo, once emptied (BOUND_MEMO_ENTRIES), seldom makes one again (the
    # plans come one b after another); each bound is its plan's alone, in any order
    near: dict[tuple, int] = {}
    codes = [near.setdefault(_NEAR_FIELDS(fields), len(near)) for fields in firsts]
    order = np.argsort(np.array(codes, np.int64), kind="stable").tolist()
    del near, codes
    group_rows = list(groups.values())
    rows_make = plans.maker if isinstance(plans, PlanRows) else None
    done, kept = 0, len(lookup_cache)
    for g in order:
        idx, fields = group_rows[g], firsts[g]
        yield_interpreter()
        ticker.tick(rows.size // 5 + 4 * done // 5)
        done += len(idx)
        if len(lookup_cache) > kept + BOUND_MEMO_ENTRIES:
            kept = _release_memo(lookup_cache, store)
        # bound_plan(plans[idx[0]], model): its fields are known, the plan made without
        # __init__ (plan rows' own maker: the first plan is not built)
        make = rows_make if rows_make is not None else plan_maker(plans[idx[0]])
        bound = make(dict(zip(PLAN_FIELDS, fields)))
        st = stage_busy_times(Session(model, bound, cluster, cost), store, lookup_cache)
        m = (np.array([float(plans[i].num_microbatches) for i in idx]) if micro is None
             else micro[idx].astype(float))
        lower[idx] = _lower_bounds(*st, m, None)
    ticker.finish()


#: Entries of the lookup memo past which :func:`fill_lower_bounds` empties it between two bound
#: plans (about 850 bytes each: most are one bound plan's stage layout, few are shared).
BOUND_MEMO_ENTRIES = 50_000

def _release_memo(memo: dict, store) -> int:
    """Empty the lookup memo ``memo`` (:func:`core.sim.stages.stage_busy_times`') but its
    analytic op times and the source counts of each normalized stage structure's templates
    (shared by many bound plans, and costly to make again: a template built for each; kept
    with the ``store`` the op times are keyed by): the stage layouts, spans and counts of the
    bound plans done, a few hundred bytes each, are made again where a later plan needs them
    (each entry is a function of its key: the same figures). Returns the entries kept."""
    kept = {k: v for k, v in memo.items() if type(k) is tuple and k and (
        k[0] in _KEPT_MEMO or k == ("pinned", id(store)))}
    memo.clear()
    memo.update(kept)
    return len(memo)


#: The lookup memo's entries :func:`_release_memo` keeps, by their keys' first item.
_KEPT_MEMO = frozenset(("analytic op", "span counts of"))

#: The plan fields :func:`bound_plan` sets (but ``data_parallel``, 1 for a dense model; of an
#: FSDP plan only that).
_BOUND_FIELDS = {"zero_stage": 0, "overlap_grad_reduce": False, "overlap_param_gather": False,
                 "fp8_param_gather": False}
_SCHEDULE_FIELD = PLAN_FIELDS.index("schedule")
#: A bound plan's fields but d and b (:func:`fill_lower_bounds` takes those alike together).
_NEAR_FIELDS = operator.itemgetter(*(j for j, f in enumerate(PLAN_FIELDS)
                                     if f not in ("data_parallel", "micro_batch_size")))


def value_codes(plans: list[ParallelPlan], num_gpus: np.ndarray, several_counts: bool,
                cancel: Any = None, columns: dict[str, np.ndarray] | None = None,
                fields: Sequence[str] = BEST_BY_FIELDS) -> list[np.ndarray]:
    """For each dimension whose best plans the sweep answers (:data:`BEST_BY_FIELDS`, and the
    GPU count when the space names ``several_counts``), each plan's value as a code (unsigned
    int (n,), the smallest type that holds its codes): plans of one value share a code (numbered by first appearance; values told apart
    by type too, as their ``repr`` would: ``1`` is not ``True``), the values as
    :meth:`~core.studies.sweep.result.SweepResult.best_by` groups them
    (:func:`core.studies.sweep.result.best_by_values`: None where the field does not act). :func:`prunable`'s
    ``codes``. ``columns``: the plans'
    :func:`core.studies.sweep.result.plan_column_arrays`, when known (a column of one type is
    coded with numpy). ``cancel`` is checked before each dimension (:class:`SweepCancelled`).
    ``fields``: the dimensions coded after the GPU count (default every one)."""
    codes = []
    if several_counts:
        codes.append(np.unique(num_gpus, return_inverse=True)[1].reshape(-1))

    def column(name: str) -> np.ndarray:
        if columns is not None:
            return columns[name]
        return np.array(list(map(operator.attrgetter(name), plans)), dtype=object)

    for name in fields:
        check_cancelled(cancel)  # each field: about 15 ms per 100,000 plans
        # the values as best_by groups them ("-" where the field does not act)
        col = best_by_values(column, name)
        if col.dtype != object:  # one type: numpy's equality is Python's
            codes.append(_first_seen_codes(col))
            continue
        keys = col.tolist()
        if len(set(map(type, keys)) - {type(None)}) > 1:  # 1 == True, 1 == 1.0: told apart
            keys = list(zip(map(type, keys), keys))
        index = {k: i for i, k in enumerate(dict.fromkeys(keys))}  # by first appearance
        codes.append(np.fromiter(map(index.__getitem__, keys), np.int64, len(keys)))
    # held through the branch and bound: each in the smallest unsigned type of its codes
    # (a byte per plan for a dimension of a few values, not eight)
    return [c.astype(np.min_scalar_type(int(c.max(initial=0))), copy=False) for c in codes]


def _first_seen_codes(col: np.ndarray) -> np.ndarray:
    """Each value of ``col`` (a numpy array of one type, (n,)) as a code, numbered by its first
    appearance (int64 (n,))."""
    _, first, inverse = np.unique(col, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.reshape(-1)]


def branch_and_bound(order: np.ndarray, lower: np.ndarray, lb_days: np.ndarray,
                     lb_cost: np.ndarray, iteration: np.ndarray, codes: list[np.ndarray],
                     solve_rows: Callable[[list[int]], None],
                     figures_of: Callable[[np.ndarray], Any],
                     on_pruned: Callable[[int], None]) -> np.ndarray:
    """Simulate the plans ``order`` (int (k,), by increasing lower bound) in rounds of
    :data:`_FIRST_ROUND` plans, doubling up to :data:`_MAX_ROUND`, and after each round drop
    the plans left that cannot change the result (:func:`prunable`).

    Parameters
    ----------
    order : int array (k,)
        Rows to simulate, the first first.
    lower : float64 (n,)
        Each plan's iteration-time lower bound, seconds; ``lb_days``, ``lb_cost`` (float64
        (n,)) its training days and cost.
    iteration : float64 (n,)
        Iteration times, NaN until simulated; ``solve_rows(rows)`` fills those of ``rows``.
    codes : list of int (n,)
        :func:`value_codes`.
    figures_of : callable
        Iteration times (float64 (n,)) -> their costing (``training_days``, ``cost_usd``).
    on_pruned : callable
        Told after each round how many plans it dropped.

    Returns
    -------
    bool (n,)
        The plans dropped (not simulated).
    """
    pruned = np.zeros(iteration.shape[0], bool)
    pending = np.ones(order.size, bool)
    size, start = _FIRST_ROUND, 0
    while start < order.size:
        chosen = []
        while start < order.size and len(chosen) < size:
            if pending[start]:
                chosen.append(int(order[start]))
                pending[start] = False
            start += 1
        solve_rows(chosen)
        size = min(2 * size, _MAX_ROUND)
        rest = np.flatnonzero(pending)
        if not rest.size:
            break
        done = np.isfinite(iteration)
        fig = figures_of(np.where(done, iteration, np.inf))
        drop = prunable(lb_days, lb_cost, lower, order[rest],
                        fig.training_days, fig.cost_usd, iteration, done, codes)
        pending[rest[drop]] = False
        pruned[order[rest[drop]]] = True
        on_pruned(int(drop.sum()))
    return pruned
