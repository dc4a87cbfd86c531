"""The lanes of the timeline: one per stream a stage uses, and a further one of a stream for
the tasks the simulator runs on it at the same time as another.

A stream's tasks mostly run one after another, but the simulator runs some at once on one
stream: with the distributed optimizer's overlapped parameter all-gather (``zero_stage`` 1 or
2 with ``overlap_param_gather``) a DP collective and a TP collective share the comm stream of a
stage. Drawn on one lane the later bar hid the earlier one (the TP all-reduce under the DP
all-gathers of stage 0 of the GPT-3 1.3B example). :func:`lane_rows` gives such a task a row of
its own, "comm (2)" under "comm", as the Chrome trace export puts it on a thread "comm (2)"
(:func:`core.io.trace._nesting_threads`), so no two bars of one drawn row overlap in time.
"""

from __future__ import annotations

import numpy as np

from core.sim.graph_types import STREAMS, ExecutionGraph, Schedule

__all__ = ["OVERLAP_TOLERANCE_S", "Lane", "lane_rows", "lane_name"]

#: Bars of one row may overlap by this much (seconds): the simulator's consecutive tasks of a
#: stream meet at times that differ in their last bits (an embedding ending 5.6e-17 s after the
#: next one starts); a nanosecond is the trace export's resolution, far below a pixel.
OVERLAP_TOLERANCE_S = 1e-9

#: A lane of a stage: (stream index into STREAMS, its row of that stream: 0 its own, 1 the
#: second ...).
Lane = tuple[int, int]


def lane_name(lane: Lane) -> str:
    """``"comm"`` for a stream's own lane, ``"comm (2)"`` for its second, as the trace names
    its threads."""
    stream, k = lane
    return STREAMS[stream] if k == 0 else f"{STREAMS[stream]} ({k + 1})"


def lane_rows(graph: ExecutionGraph, schedule: Schedule) -> tuple[np.ndarray, tuple[Lane, ...]]:
    """The row of each task and the lanes of each stage, top to bottom.

    Every stage has the same lanes: each stream of :attr:`ExecutionGraph.lanes` and, for a
    stream on which some stage runs tasks at the same time (overlapping by more than
    :data:`OVERLAP_TOLERANCE_S`), as many further lanes as that stage needs, right under the
    stream's own. The tasks of one (stage, stream) are taken by start time, each on the first
    of the stream's rows whose last bar has ended (first fit over intervals sorted by start:
    the fewest rows that keep the bars apart). Runs on the GUI thread (the lanes are needed
    before the layout): grouping is a radix sort and each group is nearly in time order
    already, 0.1 s for 213,510 tasks. Without such tasks this is
    ``(graph.row, one lane per stream)``.

    Returns
    -------
    rows : int32 array (n,)
        ``stage * len(lanes) + lanes.index((stream, k))``.
    lanes : tuple of :data:`Lane`
    """
    streams = graph.lanes
    n = int(graph.num_tasks)
    sub = np.zeros(n, np.int32)
    if n:
        start = np.asarray(schedule.start_s, np.float64)
        end = np.asarray(schedule.end_s, np.float64)
        # grouped by (stage, stream) with a radix sort (stable: the graph's order within a
        # group, which is nearly the order of start times), then each group by start (timsort:
        # a few passes over a nearly sorted group); the GUI thread pays this for every
        # iteration shown, 6.4 million tasks included
        key = graph.stage.astype(np.int64) * len(STREAMS) + graph.stream.astype(np.int64)
        key = key.astype(np.int32 if key.max() >= 2**15 else np.int16)
        group = np.argsort(key, kind="stable")
        k = key[group]
        bounds = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1, n].tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b - a < 2:
                continue
            idx = group[a:b]
            st = start[idx]
            if (st[1:] < st[:-1]).any():
                idx = idx[np.argsort(st, kind="stable")]
                st = start[idx]
            en = end[idx]
            if not (st[1:] < np.maximum.accumulate(en[:-1]) - OVERLAP_TOLERANCE_S).any():
                continue  # one after another: the stream's own row
            row_end: list[float] = []  # the last end on each of the stream's rows
            for i, t0, t1 in zip(idx.tolist(), st.tolist(), en.tolist()):
                for r, e in enumerate(row_end):
                    if e - OVERLAP_TOLERANCE_S <= t0:
                        break
                else:
                    r = len(row_end)
                    row_end.append(t1)
                row_end[r] = t1
                sub[i] = r
    depth = {s: 1 for s in streams}  # rows per stream (the most any stage needs)
    if sub.any():
        for s in streams:
            on = graph.stream == s
            if on.any():
                depth[s] = int(sub[on].max()) + 1
    lanes = tuple((s, r) for s in streams for r in range(depth[s]))
    first = np.zeros(len(STREAMS), np.int32)  # a stream's first lane
    for i, (s, r) in enumerate(lanes):
        if r == 0:
            first[s] = i
    rows = (graph.stage.astype(np.int32) * len(lanes) + first[graph.stream.astype(np.int32)]
            + sub)
    return rows.astype(np.int32), lanes
