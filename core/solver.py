"""Critical path of an execution graph, vectorized with numpy.

Earliest start times obey ``start[v] = max(end[u] for edges u -> v)`` (0 when
``v`` has no predecessor) and ``end = start + duration``. The solver walks the
graph in topological levels (Kahn's algorithm, one level per numpy pass): it
finishes every task of the current frontier at once, pushes their end times
to their successors with ``np.maximum.at`` and releases successors whose last
predecessor has finished. Work is O(n + e) numpy element operations plus a
fixed cost per level.
"""

from __future__ import annotations

import numpy as np

from .graph_types import ExecutionGraph, Schedule

__all__ = ["solve", "earliest_times", "critical_path", "CycleError"]


class CycleError(ValueError):
    """The dependency edges contain a cycle, so no schedule exists."""


def earliest_times(duration_s: np.ndarray, src: np.ndarray, dst: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Earliest start and end of every task of a DAG.

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
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise ValueError(f"edge endpoints must be in 0..{n - 1}")
    order = np.argsort(src, kind="stable")
    dst_by_src = dst[order]
    out_count = np.bincount(src, minlength=n)
    out_ptr = np.concatenate([[0], np.cumsum(out_count)])
    indeg = np.bincount(dst, minlength=n)
    start = np.zeros(n)
    end = np.empty(n)
    frontier = np.flatnonzero(indeg == 0)
    done = 0
    while frontier.size:
        done += frontier.size
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
    if done != n:
        raise CycleError(f"dependency graph has a cycle ({n - done} of {n} tasks never become ready)")
    return start, end


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
