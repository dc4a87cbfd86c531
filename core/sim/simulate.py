"""One entry point, the same for the command line and the GUI: session in, result out.

``simulate(session)`` validates the session, opens the profile store of its
GPU kind, builds the execution graph, solves it and computes the report.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.model import model_math
from core.model.cuda_graphs import cuda_graph_memory_note
from core.model.moe import flex_buffer_memory_note
from core.plan.cluster import GPU_FP8_DTYPES
from core.plan.fields import ConfigError, FieldError, path_problem
from core.plan.parallel import fp8_recipe, gemm_peak_dtype, recompute_modules
from core.plan.rules import check
from core.plan.session import Session
from core.sim.costing import costing, mfu_peak_flops
from core.sim.energy import no_power_figures, run_energy
from core.sim.fastpath import pipeline_iteration_times
from core.store.gpu_spec import fits_peak_fraction
from core.sim.goodput import run_goodput
from core.sim.pipeline_graph import build_pipeline_graph
from core.sim.stages import StageTimes, stage_times
from core.sim.graph import build_graph
from core.sim.graph_types import KIND_COMPUTE, KINDS, ExecutionGraph, Schedule
from core.store.interval import DEFAULT_COVERAGE, check_coverage, session_interval
from core.store.profiles import PROFILES_DIR
from core.store.format import NOT_A_STORE, ProfileStoreError
from core.store.profile_store import ProfileStore
from core.sim.report import Report, StageMemory
from core.sim.report import gib_texts, memory_verdict as report_verdict
from core.schedules import get as get_schedule
from core.sim.solver import solve
from core.util.text import file_name_part

__all__ = ["SimulationResult", "simulate", "open_profile", "profile_path", "PROFILES_DIR",
           "stage_memory", "fp8_tn", "model_flops_per_iteration", "memory_verdict", "tight_note",
           "session_profile", "profile_gpu_note", "device_gpu_note",
           "graph_size_estimate", "graph_too_large", "graph_tasks_bound", "MAX_GRAPH_TASKS",
           "check_finite"]

#: Most tasks a simulated iteration's graph may have: about 100 bytes and 1.5 us each,
#: so 10 million tasks take about 1 GB and 15 s (GPT-3 175B at B=1536, t=8, p=16, d=1:
#: 1.8 million). Larger plans are refused by name rather than left to exhaust memory.
MAX_GRAPH_TASKS = 10_000_000

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
    #: What would make a plan that does not fit (or is tight) fit, when the caller asked
    #: (:func:`core.studies.fit_changes.fit_changes`; ``vtrain simulate`` does, and the window
    #: sets it when its search after the simulation answers).
    fit_changes: Any = None


def profile_path(session: Session) -> Path:
    """The profile store a session uses: ``cluster.profile_path`` (``~`` expanded) or the
    shipped one for its GPU (``profiles/<gpu>.h5``, the GPU kind made a file name by
    :func:`core.util.text.file_name_part`: a kind like ``"../x"`` names a missing store in that
    folder, never a file outside it). A ``~user`` this machine does not know stays as written
    (opening it then fails as a missing store does; :func:`core.plan.fields.path_problem` names it)."""
    if session.cluster.profile_path:
        return Path(os.path.expanduser(session.cluster.profile_path))
    return PROFILES_DIR / f"{file_name_part(session.cluster.gpu)}.h5"


def session_profile(session: Session) -> ProfileStore:
    """Open the profile store ``session`` uses (:func:`profile_path`, cached).

    A store named by ``cluster.profile_path`` must be an ``.h5`` file (nothing else is
    opened), and its errors name that field; whether the path exists or what it holds
    otherwise is not told (:data:`core.store.format.NOT_A_STORE`). The session file
    (``session.source``, set by :func:`core.io.session.load_any`) is named too.

    Raises
    ------
    ProfileStoreError
        Not a readable store, or a corrupted one.
    """
    path = profile_path(session)
    if not session.cluster.profile_path:
        return open_profile(path)
    source = getattr(session, "source", None)
    field = f"{source}: cluster.profile_path" if source else "cluster.profile_path"
    problem = path_problem(session.cluster.profile_path)
    if problem:  # a session built in code or in the window, not checked by a reader
        raise ProfileStoreError(f"{field}: {session.cluster.profile_path!r} {problem}")
    if path.suffix.lower() not in (".h5", ".hdf5"):
        raise ProfileStoreError(f"{field}: {path}: {NOT_A_STORE} (a store is an .h5 file)")
    try:
        return open_profile(path)
    except ProfileStoreError as exc:
        raise ProfileStoreError(f"{field}: {exc}") from None


def open_profile(path: str | Path) -> ProfileStore:
    """Open a profile store, cached by path and modification time (stores are read-only here).

    The cache key is the resolved path; messages (and the store's ``path``) name ``path`` as
    given, never what a link resolves to.

    Raises
    ------
    ProfileStoreError
        Missing or unreadable store, or a path that cannot be resolved (a NUL byte, a
        symlink loop), with the message of any unreadable store.
    """
    path = Path(path)
    try:
        real = path.resolve()
        key = (str(real), real.stat().st_mtime)
    except (OSError, RuntimeError, ValueError):  # RuntimeError: a symlink loop (Python < 3.13)
        return ProfileStore.open(path)  # raises a clear ProfileStoreError
    if key not in _STORE_CACHE:
        _STORE_CACHE[key] = ProfileStore.open(path)
    return _STORE_CACHE[key]


def model_flops_per_iteration(session: Session, recomputed: bool = False) -> float:
    """Model FLOPs of one iteration of ``session`` (:func:`core.model.counts.model_flops_per_iteration`);
    with ``recomputed``, the hardware FLOPs (recomputation included, for HFU)."""
    if recomputed:
        return model_math.hardware_flops_per_iteration(session.model, session.plan)
    return model_math.model_flops_per_iteration(session.model, session.plan)


def stage_memory(session: Session, store=None) -> list[StageMemory]:
    """Memory of one GPU of each pipeline stage (:func:`core.model.memory.stage_memory`); with FP8,
    whether the GPU keeps transposed FP8 weight copies comes from ``store``'s peaks, or without
    a store from the shipped GPU kind (:func:`fp8_tn`)."""
    return model_math.stage_memory(session.model, session.plan, fp8_tn(session, store))


def fp8_tn(session: Session, store=None) -> bool:
    """Whether the session's GPU runs only TN FP8 GEMMs (Hopper; :func:`core.model.fp8.fp8_tn_only`):
    from ``store``'s peaks, else from :data:`core.plan.cluster.GPU_FP8_DTYPES` of ``cluster.gpu``
    (true for a kind not listed)."""
    if store is not None:
        return model_math.fp8_tn_only(store.peak_flops)
    return "mxfp8" not in GPU_FP8_DTYPES.get(session.cluster.gpu, ())


def memory_verdict(memory: list[StageMemory], capacity_bytes: float
                   ) -> tuple[float, bool, str]:
    """``(largest per-GPU bytes, fits, reason)`` of a plan's stages (bytes each,
    :attr:`StageMemory.total_bytes`, the whole process) against the GPU's ``capacity_bytes``:
    it fits when no stage's :attr:`StageMemory.required_bytes` (the whole process less the
    caching allocator's reserve, which PyTorch frees before it fails) exceeds the capacity
    (:func:`core.sim.report.memory_verdict`; the largest stage is the same by either figure:
    the reserve grows with the tensors and the other terms are the same on every stage).
    The planner's margin (``cluster.memory_reserve_fraction``) takes no memory away, so the fit
    does not read it: it only makes a fit tight (:func:`tight_note`,
    :func:`core.sim.report.memory_verdict`). ``reason`` is "" when the plan fits, tight or
    not: it says why a plan is left out."""
    worst = max(memory, key=lambda mm: mm.total_bytes)
    return _verdict(worst.stage, worst.total_bytes, worst.required_bytes, capacity_bytes)


def memory_verdict_arrays(parts: tuple[np.ndarray, ...], capacity_bytes: float
                          ) -> tuple[float, bool, str]:
    """:func:`memory_verdict` of :func:`core.model.memory.stage_memory_arrays`' four arrays
    (weights, gradients, optimizer state, activations; shape (p,)) and, when ``parts`` carries
    them (:class:`core.model.memory.StageMemoryArrays`), the process's other terms: the same
    rule, totals and message."""
    w, g, o, a = parts
    totals = w + g + o + a  # StageMemory.total_bytes' order
    reserve = np.zeros_like(totals)
    if hasattr(parts, "workspace"):  # StageMemory's allocated, reserved, total order
        totals = (totals + parts.workspace + parts.allocator_reserve + parts.cuda_context
                  + parts.nccl_buffers)
        reserve = parts.allocator_reserve
    i = int(np.argmax(totals))  # the first largest, as max() picks
    return _verdict(i, totals[i], totals[i] - reserve[i], capacity_bytes)


def memory_verdict_rows(parts: tuple[np.ndarray, ...], capacity_bytes: float
                        ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """:func:`memory_verdict_arrays` of ``k`` plans of one stage count at once: ``parts`` holds
    (k, p) arrays, row ``j`` one plan's (:meth:`core.model.memory.StageMemoryArrays.rows`).
    Returns each plan's largest bytes per GPU (float64 (k,)), whether it fits (bool (k,)) and
    its reason ("" when it fits): bit-identical to :func:`memory_verdict_arrays` plan by plan
    (the same elementwise sums in the same order, the first largest stage, the same message)."""
    w, g, o, a = parts
    totals = w + g + o + a
    reserve = np.zeros_like(totals)
    if hasattr(parts, "workspace"):
        totals = (totals + parts.workspace + parts.allocator_reserve + parts.cuda_context
                  + parts.nccl_buffers)
        reserve = parts.allocator_reserve
    stage = np.argmax(totals, axis=1)                       # the first largest of each row
    rows = np.arange(totals.shape[0])
    need = totals[rows, stage]
    fits = need - reserve[rows, stage] <= capacity_bytes
    why = [""] * need.shape[0]
    bad = np.flatnonzero(~fits)
    texts: dict[tuple[int, float], str] = {}  # plans alike but for their exchange share theirs
    for j, s, n in zip(bad.tolist(), stage[bad].tolist(), need[bad].tolist()):
        text = texts.get((s, n))
        if text is None:
            text = texts[s, n] = _unfit_text(s, n, capacity_bytes)
        why[j] = text
    return need, fits, why


def _verdict(stage: int, need: float, required: float, capacity_bytes: float
             ) -> tuple[float, bool, str]:
    """``(need, fits, reason)`` of the largest ``stage``: ``need`` the whole process, bytes,
    ``required`` it less the allocator's reserve (what decides the fit)."""
    if required <= capacity_bytes:
        return need, True, ""
    return need, False, _unfit_text(stage, need, capacity_bytes)


def _unfit_text(stage: int, need: float, capacity_bytes: float) -> str:
    """:func:`_verdict`'s message for a plan whose ``stage`` needs ``need`` bytes, more than
    ``capacity_bytes`` (the figures of :func:`core.sim.report.gib_texts`)."""
    n, cap = gib_texts(need, capacity_bytes)
    return f"does not fit: stage {stage} needs {n} GiB per GPU, the GPU has {cap} GiB"


def tight_note(memory: list[StageMemory], capacity_bytes: float, margin: float) -> str:
    """The report's warning for a plan that fits within the planner's ``margin``
    (``cluster.memory_reserve_fraction``, a share of ``capacity_bytes`` in [0, 1); capacity in
    bytes): its largest stage, its need and the margin named; "" when the plan is not tight
    (:func:`core.sim.report.memory_verdict`)."""
    worst = max(memory, key=lambda mm: mm.total_bytes)
    need = worst.total_bytes
    fits = worst.required_bytes <= capacity_bytes
    if report_verdict(need, capacity_bytes, margin, fits) != "tight":
        return ""
    if need > capacity_bytes:
        return (f"tight: stage {worst.stage} needs {need / 2**30:.1f} GiB per GPU with the "
                f"caching allocator's cached blocks, more than the GPU's "
                f"{capacity_bytes / 2**30:.1f} GiB, and {worst.required_bytes / 2**30:.1f} GiB "
                "without them: it runs only if PyTorch's allocator can free enough of its "
                "cache (fragmentation decides), and each time it must it synchronizes "
                "(torch.cuda.memory_stats()['num_alloc_retries']); "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps")
    return (f"tight: stage {worst.stage} needs {need / 2**30:.1f} GiB per GPU of the GPU's "
            f"{capacity_bytes / 2**30:.1f} GiB, inside the {margin * 100:g} % margin "
            "(cluster.memory_reserve_fraction): a larger NCCL buffer or allocator "
            "fragmentation than modelled can tip it over")


def _kind_mask(kinds) -> np.ndarray:
    """Bool lookup table over :data:`KINDS` (shape ``(len(KINDS),)``), True at the indices ``kinds``
    (index it with ``graph.kind``: one gather instead of ``np.isin``'s sort)."""
    mask = np.zeros(len(KINDS), bool)
    mask[list(kinds)] = True
    return mask


#: Category of each task kind for :func:`simulate`'s per-stage sums: compute, tensor- or
#: data-parallel communication, expert all-to-all, context-parallel ring, other (pipeline
#: transfers and what overlaps the compute stream), and the hidden parts of the context-parallel
#: ring and of the tensor- and data-parallel collectives (those overlapped with compute).
_COMPUTE, _COMM, _EP, _CP, _OTHER, _CP_HIDDEN, _TP_HIDDEN, _DP_HIDDEN = range(8)
_CATEGORIES = 8
_KIND_CATEGORY = np.full(len(KINDS), _OTHER, np.int32)
_KIND_CATEGORY[_kind_mask(KIND_COMPUTE)] = _COMPUTE
_KIND_CATEGORY[[KINDS.index("tp_comm"), KINDS.index("dp_comm")]] = _COMM
_KIND_CATEGORY[KINDS.index("ep_all_to_all")] = _EP
_KIND_CATEGORY[KINDS.index("cp_p2p")] = _CP


def _ep_hidden_s(session: Session, graph, st: StageTimes, stage_ep: np.ndarray) -> float:
    """Seconds of expert all-to-all hidden by ``overlap_moe_expert_parallel_comm``, mean over
    stages: each stage's all-to-alls at their whole time (:attr:`StageTimes.moe_comm_s`) less
    their exposed time in the graph (``stage_ep``); 0 without the overlap."""
    if not (model_math.ep_overlap_on(session.plan) and st.moe_comm_s):
        return 0.0
    p = session.plan.pipeline_parallel
    count = np.bincount(graph.stage[graph.kind == KINDS.index("ep_all_to_all")], minlength=p)
    whole = count * float(st.moe_comm_s["ep_all_to_all"])
    hidden = float((whole - stage_ep).mean())
    return hidden if hidden > 1e-12 * float(whole.mean()) else 0.0  # not float noise


def schedule_times_without_transfers(session: Session, st: StageTimes
                                     ) -> tuple[float, float, float]:
    """Iteration time of ``session``'s plan with free pipeline transfers, as planned, with
    balanced stages, and with balanced stages that never wait for overlapped communication:
    ``(T0, T_balanced, T_free)``, seconds.

    The same stage programs as :func:`core.sim.graph.build_graph` at work-item
    granularity (``st``, the plan's :func:`core.sim.stages.stage_times`) with every
    send set to 0, all solved in one call of
    :func:`core.sim.fastpath.pipeline_iteration_times` (or by the general solver for
    schedules without a fast path). ``T_balanced`` gives every stage the mean
    over stages of each work item's time (and of its data-parallel and
    optimizer tail); ``T_free`` the mean of each item's busy time (its span
    without waiting for the overlapped collectives beside it: ZeRO-3 prefetch,
    bucketed gradient reduce-scatters, the parameter all-gathers of
    ``overlap_param_gather``). The idle time of ``T_free`` is the schedule's
    bubble, ``T_balanced - T_free`` the waits for overlapped communication, and
    ``T0 - T_balanced`` what unequal stages add.
    """
    pl = session.plan
    p = pl.pipeline_parallel

    def mean(a: np.ndarray) -> np.ndarray:
        return np.broadcast_to(a.mean(axis=0), a.shape)

    spans = [np.asarray(x, np.float64) for x in (st.fwd_s, st.bwd_s, st.wgrad_s)]
    busy = [st.busy_fwd_s, st.busy_bwd_s, st.busy_wgrad_s]
    busy = spans if any(b is None for b in busy) else [np.asarray(b, np.float64) for b in busy]
    ready = np.asarray(st.ready_s, np.float64)
    over = np.asarray(st.chunk_tail_s, np.float64)
    # nothing overlapped is waited for (no side tasks): T_free is T_balanced, one solve fewer
    waits = (any(not np.array_equal(a, b) for a, b in zip(spans, busy)) or np.any(ready != 0)
             or np.any(over != -np.inf))
    # the plan as planned (column 0), with balanced stages (1), balanced and free of waits (2)
    per_chunk = [np.stack([a, mean(a)] + ([mean(b)] if waits else []), axis=-1)
                 for a, b in zip(spans, busy)]
    per_chunk += [np.stack([ready, mean(ready)] + ([np.zeros_like(ready)] if waits else []),
                           axis=-1),
                  np.stack([over, mean(over)] + ([np.full_like(over, -np.inf)] if waits else []),
                           axis=-1)]
    n = 3 if waits else 2
    tails = [np.stack([a] + [np.full(p, a.mean())] * (n - 1), axis=-1)
             for a in (np.asarray(x, np.float64) for x in (st.dp_comm_s, st.optimizer_s))]
    if get_schedule(pl.schedule).fast_path:
        zero = np.zeros((p, n))
        fwd, bwd, wgd, ready, over = per_chunk
        T = pipeline_iteration_times(pl.schedule, pl.num_microbatches, fwd, bwd, zero, zero,
                                     *tails, wgrad_s=wgd, ready_s=ready, chunk_tail_s=over)
        return float(T[0]), float(T[1]), float(T[n - 1])
    zeros = np.zeros(p)
    out = []
    for j in range(n):
        chunks = [a[..., j] for a in per_chunk]
        programs = StageTimes(*chunks[:3], zeros, zeros, tails[0][:, j], tails[1][:, j],
                              st.has_dp_comm, chunks[3], chunks[4], zeros, zeros).programs()
        out.append(solve(build_pipeline_graph(programs, pl.num_microbatches, pl.schedule)
                         ).iteration_time_s)
    return out[0], out[1], out[n - 1]


def profile_gpu_note(store, cluster) -> str | None:
    """A warning when ``store`` (a :class:`core.store.ProfileStore`, ``--profile`` or
    ``cluster.profile_path``) is of another GPU kind than ``cluster.gpu``: the times, the
    MFU's peak and the memory capacity are then the store's GPU's, while the report names the
    cluster's; None when they agree."""
    return device_gpu_note(store.device_name, cluster)


def device_gpu_note(device: str, cluster) -> str | None:
    """:func:`profile_gpu_note` of a store whose GPU kind is ``device`` (a report's
    ``profile["device"]``, as the Compare tab has it for its pinned plan)."""
    if device == cluster.gpu:
        return None
    return (f"the profile is of {device}, not of cluster.gpu {cluster.gpu}: times, "
            f"MFU and memory capacity are {device}'s")


def small_nvlink_domain_note(c, n: int) -> str | None:
    """A warning when cluster ``c``'s nodes are of 8 GPUs or fewer (an HGX board's, the
    default, kept when the GPU is changed) while its GPU kind's NVLink domain has more (a GB200
    NVL72 rack: 72) and a job of ``n`` GPUs spans several nodes: what crosses a node is priced
    over the network, which on such a system it need not be; None otherwise. A job that uses
    part of each rack (64 of 72) sets ``gpus_per_node`` to that, and is not warned."""
    from core.plan.cluster import GPU_NVLINK_DOMAIN
    domain = GPU_NVLINK_DOMAIN.get(c.gpu)
    if not domain or domain <= 8 or c.gpus_per_node > 8 or n <= c.gpus_per_node:
        return None
    return (f"cluster.gpus_per_node={c.gpus_per_node} is below the {c.gpu}'s NVLink domain of "
            f"{domain} GPUs: what spans more than {c.gpus_per_node} GPUs is priced over the "
            f"network; set {domain} (or the GPUs the job uses of each rack, e.g. 64)")


def partial_node_note(c, n: int) -> str | None:
    """A one-line warning when a job of ``n`` GPUs spans several nodes of cluster ``c`` without
    filling them (``n % gpus_per_node != 0``): ranks sit on nodes consecutively, so the last
    node holds the rest, and the collectives of the groups that cross into it move a larger
    share per GPU over its network and set the pace (:func:`core.sim.comm.partial_node_share`);
    None otherwise."""
    g = c.gpus_per_node
    if n <= g or not n % g:
        return None
    return (f"{n} GPUs on nodes of {g}: the last node holds {n % g}; "
            "collectives across nodes are paced by it")


def cp_straddle_note(session: Session) -> str | None:
    """A warning when context-parallel groups straddle node boundaries: ``t*cp`` smaller than
    the node but not dividing it, in a job of several nodes (Megatron-Core's rank order puts
    each group on ``t*cp`` consecutive ranks, so some groups cross from one node into the next
    and their exchanges, priced over the network, set the pace; :func:`core.sim.comm.groups_in_node`);
    None otherwise."""
    from core.sim.comm import groups_in_node
    pl, c = session.plan, session.cluster
    tc, g = pl.tensor_parallel * pl.context_parallel, c.gpus_per_node
    if pl.context_parallel <= 1 or tc >= g or groups_in_node(pl.context_parallel,
                                                              pl.tensor_parallel, g, pl.num_gpus):
        return None
    return (f"context-parallel groups of t*cp={tc} GPUs straddle the {g}-GPU nodes ({tc} does not "
            f"divide {g}): the exchanges of the groups that cross a node boundary run over the "
            "network and set the pace" + (" (a job that uses 64 GPUs of each rack sets "
                                          "cluster.gpus_per_node 64)" if g > 8 else ""))


def simulate(session: Session, store: ProfileStore | None = None,
             coverage: float = DEFAULT_COVERAGE) -> SimulationResult:
    """Simulate one training iteration of ``session``.

    The steps: :func:`_check_session` (rules and graph size), the profile store,
    :func:`_build` (stage times and graph), :func:`core.sim.solver.solve`,
    :func:`_breakdown` (where each stage's time goes), :func:`_memory_and_notes`,
    :func:`_assemble_report` and :func:`_whole_run` (goodput, energy, finiteness).

    Parameters
    ----------
    session : Session
    store : ProfileStore, optional
        Profile to use; by default the one :func:`profile_path` names.
    coverage : float
        Nominal coverage of the report's error band (:mod:`core.store.interval`), in (0, 1).

    Raises
    ------
    ConfigError
        The session breaks a configuration rule.
    ProfileStoreError
        The profile store cannot be opened.
    KeyError
        The profile lacks data the plan needs (dtype peak, collectives).
    ValueError
        ``coverage`` outside (0, 1).
    """
    check_coverage(coverage)
    t0 = time.perf_counter()
    _check_session(session)
    if store is None:
        store = session_profile(session)
    t1 = time.perf_counter()
    st, graph, warnings = _build(session, store)
    t2 = time.perf_counter()
    schedule = solve(graph)
    t3 = time.perf_counter()
    T = schedule.iteration_time_s
    parts = _breakdown(session, graph, st, T)
    report = _assemble_report(session, store, graph, st, T, parts, warnings, coverage)
    _whole_run(session, report)
    timings = {"profile": t1 - t0, "graph": t2 - t1, "solve": t3 - t2, "report": time.perf_counter() - t3}
    return SimulationResult(session, graph, schedule, report, timings)


def _check_session(session: Session) -> None:
    """Check ``session`` against the configuration rules and refuse a graph larger than
    :data:`MAX_GRAPH_TASKS` (by :func:`graph_size_estimate`).

    Raises
    ------
    ConfigError
        A rule is broken, or the graph would be too large (named at ``plan.global_batch_size``).
    """
    check(session)
    why = graph_too_large(session.model, session.plan)
    if why:
        raise ConfigError([FieldError("plan.global_batch_size", why)])


def graph_too_large(model, plan) -> str:
    """Why :func:`simulate` refuses ``plan`` of ``model`` (a
    :class:`~core.plan.model_config.ModelConfig` and a :class:`~core.plan.parallel.ParallelPlan`):
    its graph would have more than :data:`MAX_GRAPH_TASKS` tasks (:func:`graph_size_estimate`);
    "" when it does not. The sweep lists such plans without figures, with this reason."""
    tasks = _graph_tasks(model, plan)
    if tasks <= MAX_GRAPH_TASKS:
        return ""
    return (f"the iteration's graph would have about {tasks:,} tasks "
            f"(num_microbatches={plan.num_microbatches:,} x num_layers={model.num_layers:,}), "
            f"more than the {MAX_GRAPH_TASKS:,} this simulator holds in memory; use fewer "
            "micro-batches (a larger micro_batch_size or data_parallel) or layers")


def _build(session: Session, store: ProfileStore) -> tuple[StageTimes, ExecutionGraph, list[str]]:
    """The stage times and the execution graph of ``session`` on ``store``, and the
    graph builder's warnings (first among them, when the profile is of another GPU than
    ``cluster.gpu``, a warning saying so)."""
    cache: dict = {}
    st = stage_times(session, store, cache)
    graph, warnings = build_graph(session, store, cache=cache, times=st)
    note = profile_gpu_note(store, session.cluster)
    if note:
        warnings.insert(0, note)
    return st, graph, warnings


@dataclass
class _Breakdown:
    """Where each pipeline stage's time goes in a solved iteration (seconds; the ``stage_*``
    arrays have shape ``(p,)``): see :func:`_breakdown`."""

    sums: np.ndarray  # (p, _CATEGORIES): summed durations per stage and category
    stage_compute: np.ndarray
    stage_ep: np.ndarray  # expert all-to-alls (blocking the compute stream)
    stage_comm: np.ndarray  # tensor- and data-parallel communication, blocking or exposed
    stage_cp: np.ndarray  # the context-parallel ring's exposed part
    stage_idle: np.ndarray
    stage_pp: np.ndarray  # exposed pipeline communication, T - T0 on every stage
    bubble_s: float
    overlap_wait_s: float
    imbalance_s: float
    T_free: float  # the balanced schedule's time without transfers nor overlap waits


def _breakdown(session: Session, graph: ExecutionGraph, st: StageTimes, T: float) -> _Breakdown:
    """Split the iteration time ``T`` of ``graph`` per stage into compute, communication
    (blocking, expert, context-parallel, pipeline) and idle time, and the mean idle time into
    bubble, overlap waits and imbalance (the schedule solved again without transfers,
    :func:`schedule_times_without_transfers`)."""
    p = session.plan.pipeline_parallel
    # per stage, the summed durations of each category of _KIND_CATEGORY in one bincount
    # (each bin adds its tasks in task order, as a masked sum does)
    category = _KIND_CATEGORY[graph.kind]
    if graph.overlapped is not None:  # beside the compute stream: what it exposes is in T
        category[graph.overlapped & (category == _CP)] = _CP_HIDDEN
        category[graph.overlapped & (graph.kind == KINDS.index("tp_comm"))] = _TP_HIDDEN
        category[graph.overlapped & (graph.kind == KINDS.index("dp_comm"))] = _DP_HIDDEN
        category[graph.overlapped & (category == _COMM)] = _OTHER
    sums = np.bincount(graph.stage * _CATEGORIES + category, graph.duration_s,
                       minlength=_CATEGORIES * p).reshape(p, _CATEGORIES)
    stage_compute = sums[:, _COMPUTE].copy()
    stage_ep = sums[:, _EP].copy()
    # the expert all-to-alls block the compute stream: blocking communication, named apart
    stage_comm = sums[:, _COMM].copy()
    stage_all_comm = stage_comm + stage_ep  # blocking or exposed
    # the context-parallel ring's exposed part (what the attention core's steps wait for)
    stage_cp = sums[:, _CP].copy()
    # The bubble is the schedule's idle time: each stage's idle time when pipeline transfers
    # are free (T0). What the transfers add to the iteration, T - T0, is exposed pipeline
    # communication, the same on every stage, never bubble.
    T0, T_bal, T_free = schedule_times_without_transfers(session, st)
    stage_idle = np.maximum(T0 - stage_compute - stage_all_comm - stage_cp, 0.0)

    def clean(x: float) -> float:  # float noise of the differences below is not time
        return x if x > 1e-12 * T else 0.0

    stage_pp = np.full(p, clean(T - T0))
    # Of the mean idle time, the balanced schedule's idle time without waits for overlapped
    # communication is bubble, what those waits add is overlap_wait, the rest imbalance.
    bubble_s = clean(T_free - float(stage_compute.mean() + stage_all_comm.mean()
                                    + stage_cp.mean()))
    overlap_wait_s = clean(T_bal - T_free)
    imbalance_s = clean(float(stage_idle.mean()) - bubble_s - overlap_wait_s)
    return _Breakdown(sums, stage_compute, stage_ep, stage_comm, stage_cp, stage_idle, stage_pp,
                      bubble_s, overlap_wait_s, imbalance_s, T_free)


def _memory_and_notes(session: Session, store: ProfileStore, warnings: list[str]
                      ) -> tuple[list[StageMemory], float, float, float, bool]:
    """Each stage's memory and the verdict against ``store``'s capacity (the reserve is the
    planner's margin: it makes a fit tight, :func:`tight_note`); appends to ``warnings`` (in
    place) why the plan does not fit or that it is tight, the notes on small NVLink
    domains, a last partial node and straddling context-parallel groups, that the memory does not count CUDA
    graphs' pools (:func:`core.model.cuda_graphs.cuda_graph_memory_note`) nor the flex
    dispatcher's buffers (:func:`core.model.moe.flex_buffer_memory_note`), and a note when the profile's
    ``peak_fraction`` was never fitted.

    Returns
    -------
    (memory, capacity_bytes, reserve_fraction, max_memory_per_gpu_bytes, fits)
    """
    memory = stage_memory(session, store)
    capacity = float(store.memory_bytes)
    reserve = float(session.cluster.memory_reserve_fraction)
    max_mem, fits, reason = memory_verdict(memory, capacity)
    if not fits:
        warnings.append(reason)
    tight = tight_note(memory, capacity, reserve)
    if tight:
        warnings.append(tight)
    for note in (small_nvlink_domain_note(session.cluster, session.plan.num_gpus),
                 partial_node_note(session.cluster, session.plan.num_gpus),
                 cp_straddle_note(session), cuda_graph_memory_note(session.plan),
                 flex_buffer_memory_note(session.model, session.plan)):
        if note:
            warnings.append(note)
    if fits_peak_fraction(store) and store.op_model.get("peak_fraction", 1.0) == 1.0:
        warnings.append(f"profile {store.device_name} has no data sheet of its own and its "
                        "peak_fraction was never fitted: its GEMMs run at the reference part's "
                        "peaks (calibrate the store on runs of this GPU: vtrain calibrate)")
    return memory, capacity, reserve, max_mem, fits


def _profile_provenance(store: ProfileStore) -> dict:
    """The report's ``profile`` entry: ``store``'s scalar provenance, its device and path, and
    its fitted ``peak_fraction`` when not 1."""
    return {**{k: v for k, v in store.provenance.items() if isinstance(v, (str, int, float))},
            "device": store.device_name, "path": str(store.path) if store.path else "",
            **({"peak_fraction": float(store.op_model["peak_fraction"])}
               if store.op_model.get("peak_fraction", 1.0) != 1.0 else {})}


def _assemble_report(session: Session, store: ProfileStore, graph: ExecutionGraph,
                     st: StageTimes, T: float, b: _Breakdown, warnings: list[str],
                     coverage: float) -> Report:
    """The :class:`Report` of a solved iteration of time ``T`` seconds: the breakdown ``b``,
    throughput and cost (:func:`core.sim.costing.costing`), parameter counts, memory
    (:func:`_memory_and_notes`, which adds to ``warnings``) and the error band at
    ``coverage`` (:func:`core.store.interval.session_interval`); without the whole run's
    figures (:func:`_whole_run`)."""
    pl = session.plan
    p = pl.pipeline_parallel
    flops = model_flops_per_iteration(session)
    hw_flops = model_flops_per_iteration(session, recomputed=True)
    tokens_per_iter = pl.global_batch_size * session.model.seq_length
    cost = costing(T, tokens_per_iteration=tokens_per_iter, model_flops=flops, hardware_flops=hw_flops,
                   num_gpus=pl.num_gpus, peak_flops_per_gpu=mfu_peak_flops(store, pl),
                   training_tokens=session.cost.training_tokens,
                   price_per_gpu_hour_usd=session.cost.price_per_gpu_hour_usd)
    memory, capacity, reserve, max_mem, fits = _memory_and_notes(session, store, warnings)
    causal = model_math.causal_model_flops_per_iteration(session.model, pl)
    return Report(
        num_gpus=pl.num_gpus,
        num_microbatches=pl.num_microbatches,
        iteration_time_s=T,
        tokens_per_s=cost.tokens_per_s,
        num_parameters=model_math.num_parameters(session.model, pl.tensor_parallel),
        num_active_parameters=model_math.num_active_parameters(session.model, pl.tensor_parallel),
        num_active_parameters_with_embedding=model_math.num_active_parameters_with_embedding(
            session.model, pl.tensor_parallel),
        model_flops_per_iteration=flops,
        mfu=cost.mfu,
        hfu=cost.hfu,
        bubble_fraction=b.bubble_s / b.T_free if b.T_free > 0 else 0.0,
        compute_s=float(b.stage_compute.mean()),
        comm_s=float(b.stage_comm.mean()),
        ep_comm_s=float(b.stage_ep.mean()),
        stage_ep_comm_s=b.stage_ep.tolist(),
        pp_comm_s=float(b.stage_pp.mean()),
        cp_comm_s=float(b.stage_cp.mean()),
        cp_hidden_s=float(b.sums[:, _CP_HIDDEN].sum()) / p,
        tp_hidden_s=float(b.sums[:, _TP_HIDDEN].sum()) / p,
        dp_hidden_s=float(b.sums[:, _DP_HIDDEN].sum()) / p,
        ep_hidden_s=_ep_hidden_s(session, graph, st, b.stage_ep),
        stage_cp_comm_s=b.stage_cp.tolist(),
        bubble_s=b.bubble_s,
        overlap_wait_s=b.overlap_wait_s,
        imbalance_s=b.imbalance_s,
        stage_compute_s=b.stage_compute.tolist(),
        stage_comm_s=b.stage_comm.tolist(),
        stage_pp_comm_s=b.stage_pp.tolist(),
        stage_idle_s=b.stage_idle.tolist(),
        num_iterations=cost.num_iterations,
        training_days=cost.training_days,
        gpu_hours=cost.gpu_hours,
        cost_usd=cost.cost_usd,
        memory=memory,
        precision=pl.precision, fp8_recipe=fp8_recipe(pl), mfu_peak_dtype=gemm_peak_dtype(pl),
        mfu_causal=(cost.mfu * causal / flops if flops > 0 else cost.mfu),
        model_tflops_per_gpu=causal / T / pl.num_gpus / 1e12 if T > 0 else 0.0,
        memory_capacity_bytes=capacity,
        max_memory_per_gpu_bytes=max_mem,
        fits_in_memory=fits,
        memory_reserve_fraction=reserve,
        profile=_profile_provenance(store),
        warnings=warnings,
        interval=session_interval(session, T, store, coverage),
    )


def _whole_run(session: Session, report: Report) -> None:
    """Add the whole run's figures to ``report`` in place (goodput with failures and
    checkpoints, :func:`core.sim.goodput.run_goodput`; energy, :func:`core.sim.energy.run_energy`,
    or a warning when the GPU has no power figures) and check every figure is finite.

    Raises
    ------
    ConfigError
        A figure of the report is not finite (:func:`check_finite`).
    """
    report.run = run_goodput(session, report)  # the whole run: failures, checkpoints, energy
    report.energy = run_energy(session, report, report.run)
    if report.energy is None:
        report.warnings.append(no_power_figures(session.cluster.gpu))
    check_finite(report)


def graph_size_estimate(session: Session) -> int:
    """Upper estimate of the tasks of :func:`core.sim.graph.build_graph`'s op-level graph.

    Per micro-batch: attention and MLP forward and backward per layer (twice more under
    full recomputation), each followed by a tensor-parallel all-reduce when ``t > 1``;
    embedding and output tasks; two pipeline transfers per stage boundary; with context
    parallelism each attention op's ring (its core, the exposed and the hidden exchange);
    each MoE layer's MLP half as up to 12 tasks in the forward (router, permutation, two
    all-to-alls, two expert tensor-parallel collectives, experts, un-permutation, shared
    experts and their collectives) where the dense MLP has 3, the same in the backward and the
    recomputed forward, and two more weight-gradient parts; each multi-token prediction layer
    as one more layer and 16 tasks of its embedding, projection and output layer (17 with
    context parallelism: its ``roll_tensor`` exchanges).
    """
    return _graph_tasks(session.model, session.plan)


def _graph_tasks(m, pl) -> int:
    """:func:`graph_size_estimate` of model ``m`` and plan ``pl``."""
    v = pl.virtual_pipeline_stages or 1
    per_layer = _tasks_per_layer(pl) + (9 if pl.context_parallel > 1 else 0)
    n_moe = model_math.num_moe_layers(m)
    mods = recompute_modules(pl)
    # selectively recomputed MoE modules: the MoE layer (as under full), the shared experts with
    # their collectives, the experts' activation
    moe_rec = 9 if (pl.recompute == "full" or "moe" in mods) else (
        3 * ("shared_experts" in mods) + ("moe_act" in mods))
    moe_extra = n_moe * (20 + moe_rec)
    # multi-token prediction: each MTP layer's transformer layer, its embedding, eh_proj and
    # one more output layer, forward and backward with their collectives and W parts
    n_mtp = model_math.mtp_layers(m)
    # (and with context parallelism one more: roll_tensor's exchanges, cp_mtp_roll)
    mtp_extra = n_mtp * (per_layer + 16 + (pl.context_parallel > 1)
                         + ((20 + moe_rec) if model_math.mtp_layer_is_moe(m) else 0))
    per_microbatch = (m.num_layers * per_layer + moe_extra + mtp_extra + 8
                      + 2 * pl.pipeline_parallel * v)
    return pl.num_microbatches * per_microbatch + 2 * pl.pipeline_parallel


#: The most tasks one layer adds per micro-batch (:func:`_tasks_per_layer`'s largest value, 55,
#: plus the 9 of context parallelism), an MoE layer's MLP half the most it adds (20 + 9), an
#: MTP layer the most it adds beside them (16, 17 with context parallelism's roll exchanges):
#: :func:`graph_tasks_bound`'s constants.
_MAX_TASKS_PER_LAYER, _MAX_MOE_EXTRA, _MAX_MTP_EXTRA = 64, 29, 17


def graph_tasks_bound(model, num_microbatches: np.ndarray, pipeline_steps: np.ndarray,
                      pipeline_parallel: np.ndarray) -> np.ndarray:
    """An upper bound of :func:`graph_size_estimate` for many plans of ``model`` at once
    (int64 arrays of shape (n,): micro-batches, ``p * m * v`` pipeline steps and ``p``): each
    layer at its most tasks whatever the plan's settings. A plan whose bound is at most
    :data:`MAX_GRAPH_TASKS` needs no exact count (:func:`graph_too_large`): the sweep counts
    exactly only the few plans above it."""
    n_moe = model_math.num_moe_layers(model)
    n_mtp = model_math.mtp_layers(model)
    per_microbatch = (model.num_layers * _MAX_TASKS_PER_LAYER + n_moe * _MAX_MOE_EXTRA
                      + n_mtp * (_MAX_TASKS_PER_LAYER + _MAX_MTP_EXTRA + _MAX_MOE_EXTRA) + 8)
    return (np.asarray(num_microbatches, np.int64) * per_microbatch
            + 2 * np.asarray(pipeline_steps, np.int64) + 2 * np.asarray(pipeline_parallel, np.int64))


def _tasks_per_layer(pl) -> int:
    """Upper count of one layer's tasks per micro-batch: attention and MLP forward and
    backward, the weight-gradient halves of a split backward, the recomputed forward;
    each with its tensor-parallel all-reduce when ``t > 1`` (an all-gather before and a
    reduce-scatter after with sequence parallelism, and their hidden parts under
    ``tp_comm_overlap``); selective recomputation's modules: the
    attention core, the two norms, the MLP module with its collectives, MLA's
    up-projections; per-op selective checkpointing's two recomputed parts (attention and
    MLP), each after its all-gather again with sequence parallelism (and the all-gather's
    hidden part under ``tp_comm_overlap``)."""
    # the collectives' hidden parts under tp_comm_overlap: two side tasks more
    overlap = 2 * bool(pl.tp_comm_overlap and pl.sequence_parallel)
    comm = (1 + (2 + overlap if pl.sequence_parallel else 1)) if pl.tensor_parallel > 1 else 1
    mods = recompute_modules(pl)
    return ((6 + (2 if pl.recompute == "full" else 0) + ("mlp" in mods)) * comm
            + ("core_attn" in mods) + 2 * ("layernorm" in mods) + ("mla_up_proj" in mods)
            + 2 * (pl.recompute == "selective_op")
            * (1 + 2 * bool(pl.tensor_parallel > 1 and pl.sequence_parallel)))


def _all_finite(report: Report) -> bool:
    """Whether every float :meth:`Report.to_dict` would hold is finite (a superset is read: the
    report's attributes, each stage's memory and total, the interval's attributes and the
    bands of the figures that scale with the iteration time)."""
    def ok(value: object) -> bool:
        if isinstance(value, float):
            return math.isfinite(value)
        if isinstance(value, dict):
            return all(ok(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return all(ok(v) for v in value)
        if isinstance(value, StageMemory):
            return ok(list(vars(value).values())) and ok(value.total_bytes)
        if dataclasses.is_dataclass(value):  # the run's and the energy's figures
            return ok(list(vars(value).values()))
        return True

    iv = report.interval
    return (ok([v for k, v in vars(report).items() if k != "interval"])
            and (iv is None or (ok(iv.to_dict()) and ok([iv.low_s, iv.high_s] if iv.available else [])))
            and ok([report.band(getattr(report, k)) or () for k in
                    ("training_days", "gpu_hours", "cost_usd")]))


def check_finite(report: Report) -> None:
    """Raise :class:`ConfigError` naming the first figure of ``report`` that is not a finite
    number (no result is ever Infinity or NaN)."""
    def walk(where: str, value: object) -> str | None:
        if isinstance(value, float) and not math.isfinite(value):
            return where
        if isinstance(value, dict):
            return next((w for k, v in value.items() if (w := walk(f"{where}.{k}", v))), None)
        if isinstance(value, (list, tuple)):
            return next((w for i, v in enumerate(value) if (w := walk(f"{where}[{i}]", v))), None)
        return None

    if _all_finite(report):  # the common case, without building the report's dict
        return
    bad = walk("report", report.to_dict())
    if bad:
        raise ConfigError([FieldError(bad, "is not a finite number: the inputs lie beyond what "
                                           "this simulator can compute (check the sizes, "
                                           "bandwidths and the profile store)")])
