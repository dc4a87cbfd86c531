"""One entry point, the same for the command line and the GUI: session in, result out.

``simulate(session)`` validates the session, opens the profile store of its
GPU kind, builds the execution graph, solves it and computes the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import model_math
from .config import Session, check
from .costing import costing
from .fastpath import pipeline_iteration_times
from .graph import (StageTimes, build_graph, build_pipeline_graph, num_chunks, stage_times)
from .graph_types import KIND_COMPUTE, KINDS, ExecutionGraph, Schedule
from .profile_store import ProfileStore
from .report import Report, StageMemory
from .schedules import get as get_schedule
from .schedules import in_flight_microbatches
from .solver import solve

__all__ = ["SimulationResult", "simulate", "open_profile", "profile_path", "PROFILES_DIR",
           "stage_memory", "model_flops_per_iteration", "memory_verdict"]

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
_STORE_CACHE: dict[tuple[str, float], ProfileStore] = {}


@dataclass
class SimulationResult:
    """A simulated iteration: the inputs, the graph, its solved schedule and the report.

    ``timings_s`` holds the wall time of each step of :func:`simulate` in
    seconds: ``profile`` (opening the profile store; near 0 when cached),
    ``graph``, ``solve`` and ``report``.
    """

    session: Session
    graph: ExecutionGraph
    schedule: Schedule
    report: Report
    timings_s: dict[str, float] = field(default_factory=dict)


def profile_path(session: Session) -> Path:
    """The profile store a session uses: ``cluster.profile_path`` or the shipped one for its GPU."""
    if session.cluster.profile_path:
        return Path(session.cluster.profile_path).expanduser()
    return PROFILES_DIR / f"{session.cluster.gpu}.h5"


def open_profile(path: str | Path) -> ProfileStore:
    """Open a profile store, cached by path and modification time (stores are read-only here).

    Raises
    ------
    ProfileStoreError
        Missing or unreadable store.
    """
    path = Path(path).resolve()
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return ProfileStore.open(path)  # raises a clear ProfileStoreError
    if key not in _STORE_CACHE:
        _STORE_CACHE[key] = ProfileStore.open(path)
    return _STORE_CACHE[key]


def model_flops_per_iteration(session: Session, recomputed: bool = False) -> float:
    """Model FLOPs of one iteration of ``session`` (:func:`core.model_math.model_flops_per_iteration`);
    with ``recomputed``, the hardware FLOPs (recomputation included, for HFU)."""
    if recomputed:
        return model_math.hardware_flops_per_iteration(session.model, session.plan)
    return model_math.model_flops_per_iteration(session.model, session.plan)


def stage_memory(session: Session) -> list[StageMemory]:
    """Memory of one GPU of each pipeline stage (:func:`core.model_math.stage_memory`)."""
    return model_math.stage_memory(session.model, session.plan)


def memory_verdict(memory: list[StageMemory], capacity_bytes: float, reserve_fraction: float
                   ) -> tuple[float, bool, str]:
    """``(largest per-GPU bytes, fits, reason)``: a plan fits when every stage needs at most
    ``(1 - reserve_fraction) * capacity_bytes`` (the rest is kept for the framework, the CUDA
    context and fragmentation); ``reason`` is "" when it fits."""
    worst = max(memory, key=lambda mm: mm.total_bytes)
    need = worst.total_bytes
    usable = capacity_bytes * (1 - reserve_fraction)
    if need <= usable:
        return need, True, ""
    return need, False, (f"does not fit: stage {worst.stage} needs {need / 2**30:.1f} GiB per GPU, "
                         f"the GPU has {capacity_bytes / 2**30:.1f} GiB of which "
                         f"{usable / 2**30:.1f} GiB usable ({reserve_fraction:.0%} reserved)")


def _kind_mask(kinds) -> np.ndarray:
    """Bool lookup table over :data:`KINDS` (shape ``(len(KINDS),)``), True at the indices ``kinds``
    (index it with ``graph.kind``: one gather instead of ``np.isin``'s sort)."""
    mask = np.zeros(len(KINDS), bool)
    mask[list(kinds)] = True
    return mask


def schedule_times_without_transfers(session: Session, store: ProfileStore, cache: dict | None = None
                                     ) -> tuple[float, float]:
    """Iteration time of ``session``'s plan with free pipeline transfers, as planned and with
    balanced stages: ``(T0, T_balanced)``, seconds.

    The same stage programs as :func:`core.graph.build_graph` at work-item
    granularity with every send set to 0, solved with
    :func:`core.fastpath.pipeline_iteration_times` (or the general solver for
    schedules without a fast path). ``T_balanced`` gives every stage the mean
    over stages of each work item's time (and of its data-parallel and
    optimizer tail): its idle time is the schedule's bubble; ``T0 - T_balanced``
    is what unequal stages add.
    """
    pl = session.plan
    st = stage_times(session, store, cache)
    p = pl.pipeline_parallel
    per_chunk = [np.asarray(a, np.float64)
                 for a in (st.fwd_s, st.bwd_s, st.wgrad_s, st.ready_s, st.chunk_tail_s)]
    tails = [np.asarray(a, np.float64) for a in (st.dp_comm_s, st.optimizer_s)]
    out = []
    for balanced in (False, True):
        chunks = [np.broadcast_to(a.mean(axis=0), a.shape) if balanced else a for a in per_chunk]
        tail = [np.full(p, a.mean()) if balanced else a for a in tails]
        if get_schedule(pl.schedule).fast_path:
            zero = np.zeros((p, 1))
            fwd, bwd, wgd, ready, over = (a[..., None] for a in chunks)
            out.append(float(pipeline_iteration_times(
                pl.schedule, pl.num_microbatches, fwd, bwd, zero, zero, tail[0][:, None],
                tail[1][:, None], wgrad_s=wgd, ready_s=ready, chunk_tail_s=over)[0]))
            continue
        zeros = np.zeros(p)
        programs = StageTimes(*chunks[:3], zeros, zeros, *tail, st.has_dp_comm, chunks[3],
                              chunks[4], zeros, zeros).programs()
        out.append(solve(build_pipeline_graph(programs, pl.num_microbatches, pl.schedule)
                         ).iteration_time_s)
    return out[0], out[1]


def simulate(session: Session, store: ProfileStore | None = None) -> SimulationResult:
    """Simulate one training iteration of ``session``.

    Parameters
    ----------
    session : Session
    store : ProfileStore, optional
        Profile to use; by default the one :func:`profile_path` names.

    Raises
    ------
    ConfigError
        The session breaks a configuration rule.
    ProfileStoreError
        The profile store cannot be opened.
    KeyError
        The profile lacks data the plan needs (dtype peak, collectives).
    """
    t0 = time.perf_counter()
    check(session)
    if store is None:
        store = open_profile(profile_path(session))
    t1 = time.perf_counter()
    cache: dict = {}
    graph, warnings = build_graph(session, store, cache=cache)
    t2 = time.perf_counter()
    if store.device_name != session.cluster.gpu:
        warnings.insert(0, f"the profile is of {store.device_name}, not of cluster.gpu "
                           f"{session.cluster.gpu}: times, MFU and memory capacity are "
                           f"{store.device_name}'s")
    schedule = solve(graph)
    t3 = time.perf_counter()
    pl = session.plan
    T = schedule.iteration_time_s
    p = pl.pipeline_parallel
    kind = graph.kind
    compute_mask = _kind_mask(KIND_COMPUTE)[kind]
    comm_mask = _kind_mask([KINDS.index("tp_comm"), KINDS.index("dp_comm")])[kind]
    if graph.overlapped is not None:  # beside the compute stream: what it exposes is in T
        comm_mask &= ~graph.overlapped
    stage_compute = np.bincount(graph.stage[compute_mask], graph.duration_s[compute_mask], minlength=p)
    stage_comm = np.bincount(graph.stage[comm_mask], graph.duration_s[comm_mask], minlength=p)
    # The bubble is the schedule's idle time: each stage's idle time when pipeline transfers
    # are free (T0). What the transfers add to the iteration, T - T0, is exposed pipeline
    # communication, the same on every stage, never bubble.
    T0, T_bal = schedule_times_without_transfers(session, store, cache)
    stage_idle = np.maximum(T0 - stage_compute - stage_comm, 0.0)

    def clean(x: float) -> float:  # float noise of the differences below is not time
        return x if x > 1e-12 * T else 0.0

    stage_pp = np.full(p, clean(T - T0))
    # Of the mean idle time, the balanced schedule's share is bubble, the rest imbalance.
    bubble_s = clean(T_bal - float(stage_compute.mean() + stage_comm.mean()))
    imbalance_s = clean(float(stage_idle.mean()) - bubble_s)
    flops = model_flops_per_iteration(session)
    hw_flops = model_flops_per_iteration(session, recomputed=True)
    tokens_per_iter = pl.global_batch_size * session.model.seq_length
    cost = costing(T, tokens_per_iteration=tokens_per_iter, model_flops=flops, hardware_flops=hw_flops,
                   num_gpus=pl.num_gpus, peak_flops_per_gpu=float(store.peak_flops[pl.precision]),
                   training_tokens=session.cost.training_tokens,
                   price_per_gpu_hour_usd=session.cost.price_per_gpu_hour_usd)
    memory = stage_memory(session)
    capacity = float(store.memory_bytes)
    reserve = float(session.cluster.memory_reserve_fraction)
    max_mem, fits, reason = memory_verdict(memory, capacity, reserve)
    if not fits:
        warnings.append(reason)
    report = Report(
        num_gpus=pl.num_gpus,
        num_microbatches=pl.num_microbatches,
        iteration_time_s=T,
        tokens_per_s=cost.tokens_per_s,
        num_parameters=model_math.num_parameters(session.model, pl.tensor_parallel),
        model_flops_per_iteration=flops,
        mfu=cost.mfu,
        hfu=cost.hfu,
        bubble_fraction=bubble_s / T_bal if T_bal > 0 else 0.0,
        compute_s=float(stage_compute.mean()),
        comm_s=float(stage_comm.mean()),
        pp_comm_s=float(stage_pp.mean()),
        bubble_s=bubble_s,
        imbalance_s=imbalance_s,
        stage_compute_s=stage_compute.tolist(),
        stage_comm_s=stage_comm.tolist(),
        stage_pp_comm_s=stage_pp.tolist(),
        stage_idle_s=stage_idle.tolist(),
        num_iterations=cost.num_iterations,
        training_days=cost.training_days,
        gpu_hours=cost.gpu_hours,
        cost_usd=cost.cost_usd,
        memory=memory,
        memory_capacity_bytes=capacity,
        max_memory_per_gpu_bytes=max_mem,
        fits_in_memory=fits,
        memory_reserve_fraction=reserve,
        profile={**{k: v for k, v in store.provenance.items() if isinstance(v, (str, int, float))},
                 "device": store.device_name, "path": str(store.path) if store.path else ""},
        warnings=warnings,
    )
    timings = {"profile": t1 - t0, "graph": t2 - t1, "solve": t3 - t2, "report": time.perf_counter() - t3}
    return SimulationResult(session, graph, schedule, report, timings)
