"""The sweep's batch solver: plans of one pipeline structure solved together.

:func:`group_batches` cuts a sweep's plans into batches of one pipeline structure
(p, m, schedule, v); :func:`solve_batch` gives each batch's iteration times (one
:func:`core.sim.fastpath.pipeline_iteration_times` call over the batch, compiled or numpy,
from each plan's :func:`core.sim.stages.stage_times`) and closed-form memory. The serial loop
(:mod:`core.studies.sweep.run`) and the worker processes (:mod:`core.studies.sweep.parallel`)
both solve batches here, so their results are the same bit for bit.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

from core import schedules as pipeline_schedules
from core.model import model_math
from core.plan.parallel import PLAN_FIELDS, ParallelPlan, p2p_overlapped, plan_key
from core.plan.session import Session
from core.sim.fastpath import pipeline_iteration_times
from core.sim.graph import build_graph
from core.sim.op_times import num_chunks
from core.sim.stages import stage_times
from core.sim.simulate import memory_verdict_arrays
from core.sim.solver import solve
from core.studies.sweep.pace import yield_interpreter
from core.studies.sweep.plan_rows import plans_at

__all__ = ["solve_batch", "group_batches", "stage_times_key"]

#: Key in a lookup memo of the stage times of the last (p, m) solved (see :func:`solve_batch`).
_SHARED_STAGE_TIMES = ("sweep", "stage times of one (p, m)")
_SCHEDULE_FIELD = PLAN_FIELDS.index("schedule")
#: Plans are solved in batches of at most this many (stage, op, plan) elements.
_MAX_BATCH_ELEMENTS = 2_000_000


def solve_batch(model, cluster, cost, key: tuple[int, int, str, int], plans: list[ParallelPlan],
                store, lookup_cache: dict, compiled: bool | None = None,
                fits: Sequence[bool] | None = None
                ) -> tuple[np.ndarray, np.ndarray, list[str], dict[str, list[int]]]:
    """Iteration time and memory of a batch of plans of one pipeline structure.

    Parameters
    ----------
    model, cluster, cost : the session's parts
    key : (p, m, schedule, v)
        The plans' pipeline size, micro-batches, schedule and chunks per stage.
    plans : list of ParallelPlan, length n
    store : ProfileStore
    lookup_cache : dict
        Memo of op and communication lookups (:func:`core.sim.stages.stage_times`), shared
        between batches of one process.
    compiled : bool, optional
        Passed to :func:`pipeline_iteration_times` (the compiled pass or the numpy
        sweeps; the same times bit for bit).
    fits : sequence of n bool, optional
        Whether each plan fits in memory, when the caller knows (a sweep's
        :func:`core.studies.sweep.bound.memory_verdicts`, the same verdicts): the memory is
        then not computed again (its bytes NaN and its reasons empty in what is returned).

    Returns
    -------
    (iteration_time_s float64 (n,), max_memory_per_gpu_bytes float64 (n,), reasons
    (list of n str, "" when the plan fits), warnings of the plans that fit (dict: warning ->
    the batch positions of the plans it concerns))
    """
    p, m, schedule, v = key
    sched = pipeline_schedules.get(schedule)
    capacity = float(store.memory_bytes)
    n = len(plans)
    per_chunk = np.empty((5, p, v, n))
    per_stage = np.empty((4, p, n))
    max_mem = np.zeros(n)
    reason = [""] * n
    warnings: dict[str, list[int]] = {}
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    # Stage times read the schedule only through its stage_times_kind (core.sim.stages.stage_times;
    # tests/test_sweep_speed.py checks it): plans that differ only in a schedule of the same
    # kind (1F1B and GPipe) share them. Batches come sorted
    # by (p, m, schedule, v), so those of one (p, m) follow each other: keep theirs only.
    kept = lookup_cache.get(_SHARED_STAGE_TIMES)
    if kept is None or kept[0] != (p, m):
        kept = lookup_cache[_SHARED_STAGE_TIMES] = ((p, m), {})
    shared = kept[1]
    kind = sched.stage_times_kind
    for j, pl in enumerate(plans):
        yield_interpreter()
        skey = stage_times_key(pl, kind)
        st = shared.get(skey)
        if st is None:
            st = shared[skey] = stage_times(Session(model, pl, cluster, cost), store, lookup_cache)
        per_chunk[:, :, :, j] = (st.fwd_s, st.bwd_s, st.wgrad_s, st.ready_s, st.chunk_tail_s)
        per_stage[:, :, j] = (st.send_fwd_s, st.send_bwd_s, st.dp_comm_s, st.optimizer_s)
        if fits is None:  # same rule and message as core.sim.simulate
            max_mem[j], fit, reason[j] = memory_verdict_arrays(
                model_math.stage_memory_arrays(model, pl, fp8_tn), capacity)
        else:
            max_mem[j], fit = math.nan, fits[j]
        if fit:
            for w in st.warnings:
                warnings.setdefault(w, []).append(j)
    if sched.fast_path:
        ready = per_chunk[3] if per_chunk[3].any() else None
        tails = per_chunk[4] if np.isfinite(per_chunk[4]).any() else None
        iteration = pipeline_iteration_times(
            schedule, m, per_chunk[0], per_chunk[1], *per_stage,
            wgrad_s=per_chunk[2] if sched.splits_backward else None,
            ready_s=ready, chunk_tail_s=tails, compiled=compiled,
            overlap_p2p=np.array([p2p_overlapped(pl) for pl in plans], bool))
    else:  # the general solver on the coarse graph
        iteration = np.empty(n)
        for j, pl in enumerate(plans):
            g, _ = build_graph(Session(model, pl, cluster, cost), store,
                               detail="microbatch", cache=lookup_cache)
            iteration[j] = solve(g).iteration_time_s
    return iteration, max_mem, reason, warnings


def stage_times_key(pl: ParallelPlan, kind: tuple) -> tuple:
    """The key of a plan's stage times: every field but the schedule, and what stage times read
    of the schedule (:attr:`core.schedules.PipelineSchedule.stage_times_kind`)."""
    fields = plan_key(pl)
    return (kind, fields[:_SCHEDULE_FIELD] + fields[_SCHEDULE_FIELD + 1:])

def group_batches(plans: list[ParallelPlan], rows: Iterable[int]
                   ) -> list[tuple[tuple[int, int, str, int], list[int]]]:
    """``rows`` of ``plans`` in batches of one pipeline structure (p, m, schedule, v), sorted by
    it, each small enough for the batch solver's arrays (about 16 MB)."""
    groups: dict[tuple[int, int, str, int], list[int]] = defaultdict(list)
    rows = list(rows)
    for i, pl in zip(rows, plans_at(plans, rows)):
        groups[(pl.pipeline_parallel, pl.num_microbatches, pl.schedule, num_chunks(pl))].append(i)
    batches = []
    for key, group in sorted(groups.items()):
        p, m, _, v = key
        step = max(1, _MAX_BATCH_ELEMENTS // (p * 3 * m * v))
        batches += [(key, group[start:start + step]) for start in range(0, len(group), step)]
    return batches

