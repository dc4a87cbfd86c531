"""One entry point, the same for the command line and the GUI: session in, result out.

``simulate(session)`` validates the session, opens the profile store of its
GPU kind, builds the execution graph, solves it and computes the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import model_math
from .config import Session, check
from .costing import costing
from .graph import build_graph
from .graph_types import KINDS, ExecutionGraph, Schedule
from .profile_store import ProfileStore
from .report import Report, StageMemory
from .solver import solve

__all__ = ["SimulationResult", "simulate", "open_profile", "profile_path", "PROFILES_DIR",
           "stage_memory", "model_flops_per_iteration", "memory_verdict"]

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
_STORE_CACHE: dict[tuple[str, float], ProfileStore] = {}


@dataclass
class SimulationResult:
    """A simulated iteration: the inputs, the graph, its solved schedule and the report."""

    session: Session
    graph: ExecutionGraph
    schedule: Schedule
    report: Report


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
    check(session)
    if store is None:
        store = open_profile(profile_path(session))
    graph, warnings = build_graph(session, store)
    if store.device_name != session.cluster.gpu:
        warnings.insert(0, f"the profile is of {store.device_name}, not of cluster.gpu "
                           f"{session.cluster.gpu}: times, MFU and memory capacity are "
                           f"{store.device_name}'s")
    schedule = solve(graph)
    pl = session.plan
    T = schedule.iteration_time_s
    p = pl.pipeline_parallel
    kind = graph.kind
    compute_mask = np.isin(kind, [KINDS.index(k) for k in
                                  ("forward", "backward", "recompute", "embedding", "output", "optimizer")])
    comm_mask = np.isin(kind, [KINDS.index("tp_comm"), KINDS.index("dp_comm")])
    stage_compute = np.bincount(graph.stage[compute_mask], graph.duration_s[compute_mask], minlength=p)
    stage_comm = np.bincount(graph.stage[comm_mask], graph.duration_s[comm_mask], minlength=p)
    stage_idle = np.maximum(T - stage_compute - stage_comm, 0.0)
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
        bubble_fraction=float(stage_idle.mean() / T),
        compute_s=float(stage_compute.mean()),
        comm_s=float(stage_comm.mean()),
        bubble_s=float(stage_idle.mean()),
        stage_compute_s=stage_compute.tolist(),
        stage_comm_s=stage_comm.tolist(),
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
    return SimulationResult(session, graph, schedule, report)
