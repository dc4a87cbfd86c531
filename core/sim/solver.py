"""Critical path of an execution graph, vectorized with numpy.

Earliest start times obey ``start[v] = max(end[u] for edges u -> v)`` (0 when
``v`` has no predecessor) and ``end = start + duration``.

:func:`earliest_times` first merges chains: a chain is a maximal path
``u1 -> u2 -> ... -> uk`` whose every link ``ui -> ui+1`` is the only out-edge
of ``ui`` and the only in-edge of ``ui+1`` (a stage's compute stream between
two pipeline transfers, say). Inside a chain each task starts when the one
before it ends, so a chain behaves as one task of the summed duration: every
edge that is not a link leaves a chain's last task and enters a chain's first
task. The merged graph (on the shipped examples 10x smaller, on one-stage
plans 10,000x) is solved level by level as below (with a dense successor table,
for fewer numpy calls per level), and each task's start is its chain's start
plus the durations before it in the chain (prefix sums). Start times equal
:func:`earliest_times_levels`'s up to float rounding of those sums.

:func:`earliest_times_levels` walks a graph in topological levels (Kahn's
algorithm, one level per numpy pass): it finishes every task of the current
frontier at once, pushes their end times to their successors with
``np.maximum.at`` and releases successors whose last predecessor has finished.
Work is O(n + e) numpy element operations plus a fixed cost per level, so it
is slow on long chains (one level per task); it is kept as the reference the
tests and ``benchmarks/bench_simulate.py`` compare with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.sim.graph_types import ExecutionGraph, Schedule

__all__ = ["solve", "earliest_times", "earliest_times_levels", "merge_chains", "Chains", "critical_path",
           "CycleError"]


class CycleError(ValueError):
    """The dependency edges contain a cycle, so no schedule exists."""


def earliest_times_levels(duration_s: np.ndarray, src: np.ndarray, dst: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start and end of every task of a DAG, one topological level per numpy pass.

    The reference solver (no chain merging); :func:`earliest_times` gives the
    same times faster.

    Parameters
    ----------
    duration_s : float array, shape (n,)
        Non-negative task durations.
    src, dst : int arrays, shape (e,)
        Edge ``src[k] -> dst[k]``: ``dst[k]`` starts after ``src[k]`` ends.

    Returns
    -------
    start_s, end_s : float64 arrays, shape (n,)

    Raises
    ------
    CycleError
        The edges contain a cycle.
    ValueError
        An edge names a task outside ``0..n-1``.
    """
    dur = np.asarray(duration_s, dtype=np.float64)
    n = dur.shape[0]
    src, dst = _check_edges(n, src, dst)
    start, end, ready = _levels(dur, src, dst)
    if not ready.all():
        raise CycleError(f"dependency graph has a cycle ({n - int(ready.sum())} of {n} tasks never "
                         "become ready)")
    return start, end


def _levels(dur: np.ndarray, src: np.ndarray, dst: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kahn's algorithm one level per numpy pass; also returns which tasks became ready (bool (n,))."""
    n = dur.shape[0]
    order = np.argsort(src, kind="stable")
    dst_by_src = dst[order]
    out_count = np.bincount(src, minlength=n)
    out_ptr = np.concatenate([[0], np.cumsum(out_count)])
    indeg = np.bincount(dst, minlength=n)
    start = np.zeros(n)
    end = np.empty(n)
    ready = indeg == 0
    frontier = np.flatnonzero(ready)
    while frontier.size:
        f_end = start[frontier] + dur[frontier]
        end[frontier] = f_end
        counts = out_count[frontier]
        num_edges = int(counts.sum())
        if num_edges == 0:
            break
        # Flat indices of all out-edges of the frontier (concatenated CSR ranges).
        offsets = np.repeat(out_ptr[frontier] - np.cumsum(counts) + counts, counts)
        succ = dst_by_src[offsets + np.arange(num_edges)]
        np.maximum.at(start, succ, np.repeat(f_end, counts))
        np.subtract.at(indeg, succ, 1)
        cand = np.unique(succ)
        frontier = cand[indeg[cand] == 0]
        ready[frontier] = True
    return start, end, ready


#: Largest out-degree for which :func:`_levels_padded` stores successors as a dense (n, D) table.
PADDED_MAX_DEGREE = 8


def _levels_padded(dur: np.ndarray, src: np.ndarray, dst: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_levels` with fewer numpy calls per level, for graphs of small out-degree.

    Successors sit in a dense ``(n, D)`` table (``D`` the largest out-degree)
    padded with a sink task ``n`` that never becomes ready, so a level is a
    row gather instead of concatenated CSR ranges, and new frontier tasks are
    deduplicated with a scatter instead of a sort. Falls back to
    :func:`_levels` when ``D > PADDED_MAX_DEGREE``. Same results.
    """
    n = dur.shape[0]
    out_count = np.bincount(src, minlength=n)
    width = int(out_count.max()) if src.size else 0
    if width > PADDED_MAX_DEGREE:
        return _levels(dur, src, dst)
    order = np.argsort(src, kind="stable")
    src_sorted = src[order]
    first = np.cumsum(out_count) - out_count
    succ = np.full((n, max(width, 1)), n, np.int64)
    succ[src_sorted, np.arange(src.size) - first[src_sorted]] = dst[order]
    indeg = np.bincount(dst, minlength=n + 1)
    indeg[n] = succ.size + 1  # the sink is never released (it is hit at most succ.size times)
    start = np.zeros(n + 1)
    frontier = np.flatnonzero(indeg[:n] == 0)
    slot = np.empty(n + 1, np.int64)
    width = succ.shape[1]
    while frontier.size:
        f_end = start[frontier] + dur[frontier]
        nxt = succ[frontier].ravel()
        # contiguous 1-d operands: numpy's fast path of ufunc.at (a broadcast view is ~2x slower)
        np.maximum.at(start, nxt, np.repeat(f_end, width))
        np.subtract.at(indeg, nxt, 1)
        frontier = nxt[indeg[nxt] == 0]
        if frontier.size > 1:  # a task released by two frontier tasks appears twice: keep one
            k = np.arange(frontier.size)
            slot[frontier] = k
            frontier = frontier[slot[frontier] == k]
    start = start[:n]
    return start, start + dur, indeg[:n] == 0  # a task became ready when its count reached 0


@dataclass
class Chains:
    """Tasks grouped into chains (see the module docstring); from :func:`merge_chains`.

    Attributes
    ----------
    order : int64 array, shape (n,), or None
        Every task once, chain after chain, each chain from its first task to
        its last; None when that is ``0..n-1`` (every link is ``u -> u+1``).
    head : int64 array, shape (c,)
        Position in ``order`` of each chain's first task (increasing; ``head[0] == 0``
        when ``n > 0``); chain ``i`` holds positions ``head[i]`` to ``head[i+1] - 1``.
    chain : int64 array, shape (n,)
        Chain of each task (indexed by task).
    src, dst : int64 arrays, shape (e',)
        The edges that are not chain links, as chain indices: chain ``src[k]``'s
        last task precedes chain ``dst[k]``'s first task.
    """

    order: np.ndarray | None
    head: np.ndarray
    chain: np.ndarray
    src: np.ndarray
    dst: np.ndarray

    @property
    def num_chains(self) -> int:
        """Number of chains c."""
        return int(self.head.shape[0])


def _check_edges(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.shape != dst.shape or src.ndim != 1:
        raise ValueError(f"src and dst must be 1-d arrays of one length, not {src.shape} and {dst.shape}")
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise ValueError(f"edge endpoints must be in 0..{n - 1}")
    return src, dst


def _chain_heads(n: int, l_src: np.ndarray, l_dst: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Head of each task's chain and its distance from it, by pointer jumping over the links.

    Returns ``(head, rank, ring)``: int64 (n,), int64 (n,), and None or a bool
    (n,) mask of the tasks on rings of links (which have no head; their
    ``head``/``rank`` are meaningless).
    """
    is_head = np.ones(n, bool)
    is_head[l_dst] = False
    ptr = np.arange(n, dtype=np.int64)
    ptr[l_dst] = l_src
    rank = np.zeros(n, np.int64)
    rank[l_dst] = 1
    for _ in range(n.bit_length() + 2):
        if is_head[ptr].all():
            return ptr, rank, None
        rank += rank[ptr]
        ptr = ptr[ptr]
    return ptr, rank, ~is_head[ptr]  # after log2(n) jumps only tasks on rings miss a head


def merge_chains(n: int, src: np.ndarray, dst: np.ndarray) -> Chains:
    """Group the ``n`` tasks of a graph into maximal chains.

    An edge ``u -> v`` is a chain link when it is ``u``'s only out-edge and
    ``v``'s only in-edge (and ``u != v``); a chain is a maximal path of links
    (a task without links is a chain of one). Every other edge leaves a
    chain's last task and enters a chain's first task.

    When every link is ``u -> u+1`` (how :func:`core.sim.pipeline_graph.build_pipeline_graph`
    numbers a stage's program order) chains are runs of consecutive task
    indices and the grouping is a few O(n) passes; otherwise each task's chain
    head and rank are found by pointer jumping (O(n log k) for chains of at most
    k tasks) and tasks are sorted by (head, rank). Links that close a ring (a
    cycle of tasks with one predecessor and one successor each) are not
    merged: those tasks stay one-task chains, so the cycle stays in the merged
    graph for the solver to report.

    Parameters
    ----------
    n : int
        Number of tasks.
    src, dst : int arrays, shape (e,)
        Edges ``src[k] -> dst[k]``.

    Returns
    -------
    Chains

    Raises
    ------
    ValueError
        An edge names a task outside ``0..n-1``.
    """
    src, dst = _check_edges(n, src, dst)
    out_deg = np.bincount(src, minlength=n)
    in_deg = np.bincount(dst, minlength=n)
    link = (out_deg[src] == 1) & (in_deg[dst] == 1) & (src != dst)
    l_src, l_dst = src[link], dst[link]
    if np.array_equal(l_dst, l_src + 1):
        order = None
        is_head = np.ones(n, bool)
        is_head[l_dst] = False
        head = np.flatnonzero(is_head)
        # each task's chain: head i repeated over its run (a cumulative sum of a bool mask is slower)
        chain = np.repeat(np.arange(head.size, dtype=np.int64), np.diff(head, append=n))
    else:
        ptr, rank, ring = _chain_heads(n, l_src, l_dst)
        if ring is not None:  # a ring of links (a cycle): its tasks become one-task chains
            link[link] = ~ring[l_src]
            ptr, rank, _ = _chain_heads(n, src[link], dst[link])
        order = np.lexsort((rank, ptr))
        is_head_sorted = rank[order] == 0
        head = np.flatnonzero(is_head_sorted)
        chain = np.empty(n, np.int64)
        chain[order] = np.cumsum(is_head_sorted) - 1
    cross = ~link
    return Chains(order, head, chain, chain[src[cross]], chain[dst[cross]])


def earliest_times(duration_s: np.ndarray, src: np.ndarray, dst: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start and end of every task of a DAG, by chain merging (module docstring).

    Equal to :func:`earliest_times_levels` up to float rounding: a task's start
    is its chain's start plus a prefix sum of the durations before it in the
    chain, where the level solver adds them one at a time.

    Parameters
    ----------
    duration_s : float array, shape (n,)
        Non-negative task durations.
    src, dst : int arrays, shape (e,)
        Edge ``src[k] -> dst[k]``: ``dst[k]`` starts after ``src[k]`` ends.

    Returns
    -------
    start_s, end_s : float64 arrays, shape (n,)

    Raises
    ------
    CycleError
        The edges contain a cycle.
    ValueError
        An edge names a task outside ``0..n-1``.
    """
    dur = np.asarray(duration_s, dtype=np.float64)
    n = dur.shape[0]
    ch = merge_chains(n, src, dst)
    if n == 0:
        return np.zeros(0), np.zeros(0)
    identity = ch.order is None
    dur_o = dur if identity else dur[ch.order]
    total = np.add.reduceat(dur_o, ch.head)
    c_start, _, ready = _levels_padded(total, ch.src, ch.dst)
    lengths = np.diff(np.append(ch.head, n))
    if not ready.all():
        raise CycleError(f"dependency graph has a cycle ({int(lengths[~ready].sum())} of {n} tasks "
                         "never become ready)")
    # start = chain start + exclusive prefix sum of the durations before the task in its chain
    excl = np.cumsum(dur_o)
    excl -= dur_o
    start_o = excl
    start_o += np.repeat(c_start - excl[ch.head], lengths)
    if identity:
        start = start_o
    else:
        start = np.empty(n)
        start[ch.order] = start_o
    return start, start + dur


def solve(graph: ExecutionGraph) -> Schedule:
    """Solve ``graph``: earliest start/end of every task and the iteration time (critical path length)."""
    start, end = earliest_times(graph.duration_s, graph.src, graph.dst)
    return Schedule(start_s=start, end_s=end, iteration_time_s=float(end.max()) if end.size else 0.0)


def critical_path(graph: ExecutionGraph, schedule: Schedule, rtol: float = 1e-9) -> np.ndarray:
    """Task indices of one critical path, in execution order.

    Starts from the task that ends last and walks back through predecessors
    whose end equals the task's start (within ``rtol`` of the iteration time);
    tasks on it sum to the iteration time.

    Returns
    -------
    int64 array, shape (k,)
    """
    n = graph.num_tasks
    if n == 0:
        return np.zeros(0, np.int64)
    start, end = schedule.start_s, schedule.end_s
    tol = rtol * max(schedule.iteration_time_s, 1e-300)
    src, dst = graph.src, graph.dst
    tight = end[src] >= start[dst] - tol
    pred = np.full(n, -1, np.int64)
    # among tight in-edges keep the one whose source ends last
    order = np.argsort(end[src[tight]], kind="stable")
    pred[dst[tight][order]] = src[tight][order]
    pred_list = pred.tolist()
    start_list = start.tolist()
    v = int(np.argmax(end))
    path = [v]
    while start_list[v] > tol and pred_list[v] >= 0:
        v = pred_list[v]
        path.append(v)
    return np.array(path[::-1], np.int64)
