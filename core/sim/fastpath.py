"""The sweep's fast path: iteration times of many plans of one pipeline structure at once.

Used by :mod:`core.studies.sweep` for every plan of a sweep and by :mod:`core.sim.simulate`
for the schedule's idle share with free pipeline transfers. It reads the
schedule's order from :mod:`core.schedules` and equals the general solver on
the coarse graph of :func:`core.sim.pipeline_graph.build_pipeline_graph` (tests check it).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from core.sim import fastpath_kernel
from core import schedules as pipeline_schedules

__all__ = ["pipeline_iteration_times", "COMPILED_MIN_ELEMENTS"]

#: Batches of at least this many (stage, item, plan) elements use the compiled pass by
#: default (the numpy sweeps take about 45 ns per element, ~0.2 s here; Numba's import 0.3 s).
COMPILED_MIN_ELEMENTS = 5_000_000


@lru_cache(maxsize=32)
def _pipeline_structure(schedule: str, p: int, m: int, v: int = 1):
    """Program order of every stage as arrays (read-only), from :mod:`core.schedules`.

    Returns ``phase``, ``chunk`` (p, K) of each stage's K work items; ``src``
    (p, K), the row of the flattened ``(p*K + 1, n)`` end-time array that item
    ``k`` waits for (the F of the same micro-batch on the previous virtual
    stage, or the B on the next one; the last row, always 0, when it waits for
    no transfer); ``sends`` (p, K) bool, whether the item's output is sent
    (an F below the last virtual stage, a B above the first); ``deps``, for
    each stage the tuple of stages its items wait for; ``asyn`` (p, K) bool, the sending items
    whose sends run asynchronously when the plan overlaps them
    (:meth:`core.schedules.PipelineSchedule.async_sends`), or None.
    """
    try:
        phase, mbs, chunk = pipeline_schedules.work_orders(schedule, p, m, v)
    except ValueError as exc:  # stages with programs of different lengths: a schedule bug
        raise AssertionError(str(exc)) from None
    K = phase.shape[1]
    stage = np.arange(p)[:, None]
    # item index of (stage, phase, chunk, mb), flattened
    pos = np.full(p * 3 * v * m, -1, np.int64)
    cm = chunk * m + mbs                               # (chunk, mb) part of a flat index
    pos[((stage * 3 + phase) * (v * m)) + cm] = np.arange(K)
    sched = pipeline_schedules.get(schedule)
    stage_of, chunk_of = sched.placement(p, v)          # (stage, chunk) of each virtual stage
    vstage = sched.virtual_stages(p, v)[stage, chunk]   # virtual stage of each item
    F, B = pipeline_schedules.PHASE_F, pipeline_schedules.PHASE_B
    # An F waits for the F of its micro-batch on virtual stage k-1, a B for the B on k+1 (with
    # Megatron's placement stage (i -/+ 1) mod p, the previous / next chunk at the wrap); the
    # items that wait are masked.
    i = np.arange(p)
    src = np.full((p, K), p * K, np.int64)
    last_vs = p * v - 1
    for ph, waits, k_other in ((F, (phase == F) & (vstage > 0), vstage - 1),
                               (B, (phase == B) & (vstage < last_vs), vstage + 1)):
        k_other = np.clip(k_other, 0, last_vs)
        other, other_c = stage_of[k_other], chunk_of[k_other]                  # (p, K)
        flat = np.take(pos, ((other * 3 + ph) * v + other_c) * m + mbs, mode="clip")
        flat += other * K
        np.copyto(src, flat, where=waits)
    # an item sends its output to another stage (a transfer between two chunks of one stage,
    # ZB-V's turn on stage p-1, takes no time)
    to_f = stage_of[np.minimum(vstage + 1, last_vs)]
    to_b = stage_of[np.maximum(vstage - 1, 0)]
    sends = (((phase == F) & (vstage < last_vs) & (to_f != stage))
             | ((phase == B) & (vstage > 0) & (to_b != stage)))
    waited = np.zeros((p, p + 1), bool)                # stage i waits for stage j
    waited[np.broadcast_to(stage, (p, K)), np.minimum(src // K, p)] = True
    # a stage depends on itself only when an item waits for another of the same stage (ZB-V)
    waited[i, i] = (src // K == stage).any(axis=1)
    rows, cols = np.nonzero(waited[:, :p])           # row-major: each stage's in order
    cols, ends = cols.tolist(), np.searchsorted(rows, np.arange(p + 1)).tolist()
    deps = tuple(tuple(cols[ends[j]:ends[j + 1]]) for j in range(p))
    pos = pos.reshape(p, 3, v, m)
    # first forward (micro-batch 0) and last weight-gradient item (B, or W when the backward is
    # split; micro-batch m-1) of each (stage, chunk)
    grad = pipeline_schedules.PHASE_W if pipeline_schedules.get(schedule).splits_backward else B
    first_f = pos[:, F, :, 0]                          # (p, v)
    last_g = pos[:, grad, :, m - 1]                    # (p, v)
    # the hop each (stage, phase, chunk)'s transfer takes: True for the stage's send_bwd hop
    # (to stage i-1 mod p), False for send_fwd (to i+1 mod p); None when every F goes up and
    # every B down (all schedules but ZB-V)
    vs = sched.virtual_stages(p, v)                                           # (p, v)
    up = stage_of[np.minimum(vs + 1, last_vs)] == (i[:, None] + 1) % p        # F's receiver
    down = stage_of[np.maximum(vs - 1, 0)] == (i[:, None] - 1) % p            # B's receiver
    f_sends = (vs < last_vs) & (stage_of[np.minimum(vs + 1, last_vs)] != i[:, None])
    b_sends = (vs > 0) & (stage_of[np.maximum(vs - 1, 0)] != i[:, None])
    flipped = (f_sends & ~up).any() or (b_sends & ~down).any()
    bwd_hop = None
    if flipped:
        bwd_hop = np.stack([~up, down, np.zeros_like(up)], axis=1)            # (p, 3, v)
        bwd_hop.setflags(write=False)
    asyn = sched.async_sends(p, m, v)  # items whose sends overlap when the plan overlaps them
    if asyn is not None:
        asyn = asyn & sends
        if bwd_hop is not None:
            raise AssertionError(f"schedule {schedule!r}: asynchronous sends with per-chunk hops")
        asyn.setflags(write=False)
    out = (phase, chunk, src, sends, first_f, last_g)
    for a in out:
        a.setflags(write=False)
    return out + (deps, bwd_hop, asyn)


def pipeline_iteration_times(schedule: str, num_microbatches: int, fwd_s: np.ndarray,
                             bwd_s: np.ndarray, send_fwd_s: np.ndarray, send_bwd_s: np.ndarray,
                             dp_comm_s: np.ndarray, optimizer_s: np.ndarray,
                             return_updates: bool = False, wgrad_s: np.ndarray | None = None,
                             ready_s: np.ndarray | None = None,
                             chunk_tail_s: np.ndarray | None = None,
                             compiled: bool | None = None,
                             overlap_p2p: bool | np.ndarray = False
                             ) -> np.ndarray | tuple[np.ndarray, int]:
    """Iteration times of many plans with one pipeline structure, without building graphs.

    Equals the critical path of :func:`core.sim.pipeline_graph.build_pipeline_graph` on
    stage programs with one task per work item (forward, backward and, for
    schedules that split it, weight gradient, per virtual chunk), transfers,
    data-parallel all-reduce and optimizer step, up to float rounding (tests
    compare with :func:`core.sim.solver.solve`). A blocking send is folded into the item
    that sends it; an overlapped one (``overlap_p2p``) delays only the item that waits for it
    and the stage's tail.

    Method: the end time of item ``k`` of stage ``i`` is
    ``E[k] = max(E[k-1], R[k]) + D[k]`` where ``R[k]`` is the end of the item
    whose transfer it waits for (0 when none). With prefix sums ``S`` of the
    durations this is ``E[k] = S[k] + max_{l<=k}(R[l] - S[l-1])``, a running
    maximum over the stage's program. Stages are updated in alternating
    ascending and descending sweeps, starting from the lower bound ``-inf``,
    and a stage is recomputed only when a stage it waits for changed since its
    last update; every update is monotone, so the fixed point reached is the
    least one, i.e. the longest-path times of the DAG. The iteration time is
    ``max_i (E_i[last] + dp_comm_s[i]) + optimizer_s[i]``. An asynchronous send (``overlap_p2p``)
    is not in its item's ``D[k]``; the items waiting for it read the arrival ``E[src] + hop``,
    kept as a second array ``A = E + lag`` (``lag`` the hop of an asynchronous send, 0
    otherwise), and ``E_i[last]`` becomes ``A_i[last]``.

    With Numba (:mod:`core.sim.fastpath_kernel`) the same recurrence is evaluated in
    one compiled pass over the items in dependency order, each item once; the
    end times are bit for bit those of the sweeps (the same operations per element).

    Parameters
    ----------
    schedule : str
        A schedule of :mod:`core.schedules` with ``fast_path``.
    num_microbatches : int
        m >= 1.
    fwd_s, bwd_s : float array, shape (p, n) or (p, v, n)
        Forward / backward (B when split) of one micro-batch per stage (rows),
        virtual chunk and plan (last axis), seconds.
    send_fwd_s, send_bwd_s : float array, shape (p, n)
        Transfer from stage i to (i+1) mod p (resp. (i-1) mod p); hops no item
        uses are ignored.
    dp_comm_s, optimizer_s : float array, shape (p, n)
        Tail of each stage after its last work item (0 for a missing all-reduce).
    return_updates : bool
        Also return the number of stage updates made (diagnostics).
    wgrad_s : float array, shape of ``fwd_s``, optional
        Weight-gradient items W, for schedules that split the backward.
    ready_s : float array, shape of ``fwd_s``, optional
        Earliest start of the first forward (micro-batch 0) of each stage and chunk
        (:attr:`core.sim.stages.StageTimes.ready_s`: its parameters' all-gather from the
        iteration's start); default 0.
    chunk_tail_s : float array, shape of ``fwd_s``, optional
        The stage's tail (``dp_comm_s``, optimizer) also waits until this long after the
        compute of the chunk's last weight-gradient item (B, or W when split, of
        micro-batch m-1) ends (:attr:`core.sim.stages.StageTimes.chunk_tail_s`: overlapped
        gradient buckets); ``-inf`` for none.
    compiled : bool, optional
        Use the compiled pass (when Numba is available): True, yes; False, the numpy
        sweeps; None (default), yes when it is already loaded or the batch has at least
        :data:`COMPILED_MIN_ELEMENTS` (stage, item, plan) elements, ``m / 3`` times as many
        under ZB-V, whose sweeps grow with ``m`` (:func:`_sweep_elements`; importing Numba
        costs about 0.3 s, so a single simulation of a small plan never does).
    overlap_p2p : bool or bool array, shape (n,)
        Per plan: the sends the schedule runs asynchronously then
        (:meth:`core.schedules.PipelineSchedule.async_sends`, the interleaved schedule's steady
        state; none for the others) run beside its compute
        (:func:`core.sim.pipeline_graph.build_pipeline_graph`'s ``overlap_p2p``). Other
        plans' times are the same bit for bit either way.

    Returns
    -------
    float64 array, shape (n,)
        Iteration time of each plan, seconds.

    Raises
    ------
    ValueError
        Unknown schedule, one without a fast path, ``m < 1``, a (p, m, v) the schedule's
        order cannot run (:meth:`core.schedules.PipelineSchedule.order_errors`: the interleaved
        schedule with ``m`` not a multiple of ``p``), arrays of
        different shapes, ``wgrad_s`` missing for a split schedule, or per-stage arrays for
        a schedule that places a fixed number of chunks (ZB-V: give (p, 2, n)).

    Steps: the inputs checked and shaped (:func:`_stage_arrays`), the schedule's structure
    (:func:`_pipeline_structure`), the items' durations and their sends' hops, shared by
    the compiled pass (:func:`_solve_compiled`) and the numpy sweeps (:func:`_solve_sweeps`)
    so that their operations per element stay the same (bit for bit), then the tail
    (:func:`_tail`).
    """
    sched = pipeline_schedules.get(schedule)
    if not sched.fast_path:
        raise ValueError(f"schedule {schedule!r} has no fast path; build its graph")
    F, Bw, W, (cf, cb, dp, opt) = _stage_arrays(
        schedule, sched, fwd_s, bwd_s, wgrad_s,
        (send_fwd_s, send_bwd_s, dp_comm_s, optimizer_s))
    p, v, n = F.shape
    m = int(num_microbatches)
    if m < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
    sched.check_order(p, m, v)  # e.g. interleaved with m % p (a ValueError, not a schedule bug)
    phase, chunk, src, sends, first_f, last_g, deps, bwd_hop, asyn = _pipeline_structure(
        schedule, p, m, v)
    K = phase.shape[1]
    # durations of each stage's items, (p, K, n); a sending item ends when its transfer does
    table = np.stack([F, Bw, W], axis=1)                                    # (p, 3, v, n)
    # the hop each phase's send uses (F forward, B backward; W never sends), per chunk when
    # the schedule sends some chunk the other way (ZB-V) ...
    hops = np.stack([cf, cb, np.zeros_like(cf)], axis=1)                   # (p, 3, n)
    # ... and which plans run the schedule's asynchronous sends so (None: none)
    ov = np.broadcast_to(np.asarray(overlap_p2p, bool), (n,))
    ov = ov if asyn is not None and ov.any() and asyn.any() else None
    hop4 = hops[:, :, None, :]                                              # (p, 3, 1 or v, n)
    if bwd_hop is not None:
        hop4 = np.where(bwd_hop[..., None], cb[:, None, None, :], cf[:, None, None, :])
        hop4[:, 2] = 0.0
    R = None
    if ready_s is not None:
        R = np.asarray(ready_s, np.float64)
        R = R[:, None, :] if R.ndim == 2 else R
        if R.shape != F.shape:
            raise ValueError("ready_s must have the shape of fwd_s")
    if compiled is None:
        compiled = fastpath_kernel.loaded() or _sweep_elements(p, K, n, m, bwd_hop) >= \
            COMPILED_MIN_ELEMENTS
    if compiled and fastpath_kernel.available():
        E, A = _solve_compiled(table, hops, hop4, phase, chunk, src, sends, first_f, bwd_hop, R,
                               asyn, ov)
        return _tail(E, A, p, K, v, phase, chunk, sends, last_g, hop4, F, dp, opt, chunk_tail_s,
                     p if return_updates else None, asyn, ov)
    E, A, updates = _solve_sweeps(table, hop4, phase, chunk, src, sends, first_f, deps, R, asyn, ov)
    return _tail(E, A, p, K, v, phase, chunk, sends, last_g, hop4, F, dp, opt, chunk_tail_s,
                 updates if return_updates else None, asyn, ov)


def _sweep_elements(p: int, K: int, n: int, m: int, bwd_hop) -> int:
    """The (stage, item, plan) elements the numpy sweeps' cost is measured in (see
    :data:`COMPILED_MIN_ELEMENTS`): ``p*K*n``, where a few updates per stage settle the
    schedule; times ``m / 3`` where some chunk sends the other way (ZB-V, ``bwd_hop``): there
    each micro-batch's turn of the V takes more sweeps, about ``2*m`` updates per stage
    (p = 8, m = 1,024: 15,293 updates, 0.7 s for one plan, against 41 under 1F1B)."""
    return p * K * n * (max(1, m // 3) if bwd_hop is not None else 1)


def _stage_arrays(schedule: str, sched, fwd_s, bwd_s, wgrad_s, per_stage: tuple):
    """The inputs of :func:`pipeline_iteration_times` as float64 arrays, checked: the
    per-chunk ``F``, ``B``, ``W`` (zeros without ``wgrad_s``) of shape (p, v, n), and the per-stage ``per_stage`` arrays (sends, tail) of shape
    (p, n). Raises ValueError as :func:`pipeline_iteration_times` says."""
    F = np.asarray(fwd_s, np.float64)
    if F.ndim == 2:
        F = F[:, None, :]
    if F.ndim != 3:
        raise ValueError(f"fwd_s must have shape (p, n) or (p, v, n), got {F.shape}")
    p, v, n = F.shape
    Bw = np.asarray(bwd_s, np.float64).reshape(-1, n) if np.ndim(bwd_s) else None
    Bw = np.asarray(bwd_s, np.float64)
    Bw = Bw[:, None, :] if Bw.ndim == 2 else Bw
    if sched.fixed_chunks and v != sched.fixed_chunks:
        raise ValueError(f"schedule {schedule!r} places {sched.fixed_chunks} chunks per stage: "
                         f"give per-chunk arrays, shape (p, {sched.fixed_chunks}, n)")
    if sched.splits_backward and wgrad_s is None:
        raise ValueError(f"schedule {schedule!r} splits the backward: give wgrad_s")
    W = np.zeros_like(F) if wgrad_s is None else np.asarray(wgrad_s, np.float64)
    W = W[:, None, :] if W.ndim == 2 else W
    arrays = [np.asarray(a, np.float64) for a in per_stage]
    if Bw.shape != F.shape or W.shape != F.shape or any(a.shape != (p, n) for a in arrays):
        raise ValueError("all stage arrays must have the shape of fwd_s, (p, n) or (p, v, n) for "
                         "the per-chunk ones")
    return F, Bw, W, arrays


def _solve_compiled(table, hops, hop4, phase, chunk, src, sends, first_f, bwd_hop, R, asyn, ov
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The items' end times ``E`` (flattened (p, K) rows and a last row of zeros, shape
    (p*K + 1, n)) and their sends' arrivals ``A`` (``E`` itself unless ``ov``, the plans
    whose ``asyn`` items send asynchronously, bool (n,)) by the compiled pass of
    :mod:`core.sim.fastpath_kernel`, which takes one hop per phase: with per-chunk hops (ZB-V)
    the sends are folded into the items' durations."""
    p, K = phase.shape
    v, n = table.shape[2], table.shape[3]
    E = np.empty((p * K + 1, n))  # flattened (p, K) end times, all written, + a row of zeros
    E[-1] = 0.0
    A = E
    if ov is not None:
        A = np.empty_like(E)
        A[-1] = 0.0
    floor_of = np.full((p, K), -1, np.int64)
    if R is not None:
        floor_of[np.arange(p)[:, None], first_f] = np.arange(v)
    k_table, k_hops, k_sends = table, hops, sends
    if bwd_hop is not None:  # the kernel takes one hop per phase: fold the sends in
        item_sends = np.zeros((p, 3, v), bool)
        item_sends[np.arange(p)[:, None], phase, chunk] = sends
        k_table = np.where(item_sends[..., None], table + hop4, table)
        k_hops, k_sends = np.zeros_like(hops), np.zeros_like(sends)
    fastpath_kernel.solve_items(k_table, k_hops, phase, chunk, k_sends, src, floor_of,
                                R if R is not None else np.zeros((p, v, n)), E,
                                A, asyn, ov)
    return E, A


def _solve_sweeps(table, hop4, phase, chunk, src, sends, first_f, deps, R, asyn, ov
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """The items' end times ``E`` and arrivals ``A`` (as :func:`_solve_compiled`) by the numpy
    sweeps of :func:`pipeline_iteration_times`' method, and the number of stage updates made.

    The sweep loop (one iteration per stage update, 23 to 46 updates for p = 8 to 16 with
    m = 4p under 1F1B) stays whole here: it fits on a screen, and its body shares the eight
    arrays set up above. Speed does not force it either way: an update is a handful of numpy
    calls on (K, n) arrays, measured at about 10 us for one plan (n = 1) and 14 ms for
    n = 20,000 (p = 8, m = 32), against well under 1 us for a Python call."""
    p, K = phase.shape
    n = table.shape[3]
    E = np.full((p * K + 1, n), -np.inf)  # flattened (p, K) end times + a row of zeros
    E[-1] = 0.0
    A, L = E, None  # the sends' arrivals, and the lag each item's send adds (asynchronous)
    stage = np.arange(p)[:, None]
    # ... and each item's duration without (+ 0.0) and with its send, gathered in one step
    with_send = np.stack([table + 0.0, table + hop4], axis=3)               # (p, 3, v, 2, n)
    D = with_send[stage, phase, chunk, sends.view(np.int8)]                 # (p, K, n)
    if ov is not None:  # the plans ov send the asyn items' outputs beside their compute
        D = np.where(ov, with_send[stage, phase, chunk, (sends & ~asyn).view(np.int8)], D)
        A = E.copy()
        L = np.where(asyn[..., None] & ov, hop4[stage, phase, 0], 0.0)
    S = np.cumsum(D, axis=1)                                                # (p, K, n) prefix sums
    Q = D - S                                                               # R[k] - S[k-1] = E[src] + Q
    floors = None  # per stage: (items, (v, n) lower bounds on R[k] - S[k-1] from their ready time)
    if R is not None:
        floors = [(first_f[i], R[i] + Q[i, first_f[i]]) for i in range(p)]
    version = [0] * p                     # changes of each stage so far
    seen: list[tuple | None] = [None] * p  # versions of a stage's sources at its last update
    updates = 0
    sweep = 0
    up, down = list(range(p)), list(range(p - 1, -1, -1))
    while True:
        changed = False
        for i in (up if sweep % 2 == 0 else down):
            nbr = tuple([version[j] for j in deps[i]])
            if seen[i] == nbr:
                continue  # inputs unchanged since the last update: still a fixed point
            seen[i] = nbr
            new = np.take(A, src[i], axis=0)
            new += Q[i]
            if floors is not None:  # the first forward of each chunk waits for its ready time
                k, lower = floors[i]
                new[k] = np.maximum(new[k], lower)
            np.maximum.accumulate(new, axis=0, out=new)
            new += S[i]
            updates += 1
            old = E[i * K:(i + 1) * K]
            if (new != old).any():
                old[...] = new
                if L is not None:
                    np.add(new, L[i], out=A[i * K:(i + 1) * K])
                version[i] += 1
                changed = True
        sweep += 1
        if not changed:
            break
        if sweep > p * K + 1:  # an acyclic structure settles within its longest chain
            raise AssertionError("pipeline structure has a cycle")
    return E, A, updates


def _tail(E, A, p, K, v, phase, chunk, sends, last_g, hop4, F, dp, opt, chunk_tail_s, updates,
          asyn=None, ov=None):
    """Iteration times from the items' end times ``E`` and their sends' arrivals ``A`` (see
    :func:`pipeline_iteration_times`)."""
    last = A[K - 1:p * K:K]  # (p, n): end of each stage's last item, and of its send
    if chunk_tail_s is not None:
        X = np.asarray(chunk_tail_s, np.float64)
        X = X[:, None, :] if X.ndim == 2 else X
        if X.shape != F.shape:
            raise ValueError("chunk_tail_s must have the shape of fwd_s")
        for c in range(v):
            k = last_g[:, c]                                                # (p,)
            rows = np.arange(p) * K + k
            # E includes the item's blocking send (not an asynchronous one); the buckets
            # follow its compute
            ii = np.arange(p)
            hop = hop4[ii, phase[ii, k], np.minimum(chunk[ii, k], hop4.shape[2] - 1)]
            blocking = sends[ii, k][:, None]
            if ov is not None:
                blocking = blocking & ~(asyn[ii, k][:, None] & ov)
            send_of = np.where(blocking, hop, 0.0)
            last = np.maximum(last, E[rows] - send_of + X[:, c])
    T = ((last + dp) + opt).max(axis=0)
    return (T, updates) if updates is not None else T
