"""The timeline draws collectives that the simulator runs at once on one stream (zero_stage 1
with overlap_param_gather: a TP collective beside the DP all-gathers on stage 0's comm stream)
on a further lane "comm (2)", as the Chrome trace export puts them on a thread "comm (2)": on
one lane the DP bars hid the TP all-reduce under them."""

from __future__ import annotations

import numpy as np
import pytest

from core.cli.common import apply_sets
from core.io.session import load_any
from core.sim.graph_types import KINDS, STREAMS
from tests.conftest import EXAMPLES
from vtrain_gui.timeline.lanes import OVERLAP_TOLERANCE_S, lane_rows
from vtrain_gui.timeline.widget import TimelineWidget

OVERLAP = ["plan.overlap_grad_reduce=true", "plan.zero_stage=1",
           "plan.overlap_param_gather=true"]


@pytest.fixture(scope="module")
def overlapping():
    from core.sim.simulate import simulate
    return simulate(apply_sets(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"), OVERLAP))


def _overlaps(rows: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
    """The tasks that start more than OVERLAP_TOLERANCE_S before a task that started before
    them on their row ends."""
    out = []
    for r in np.unique(rows).tolist():
        on = np.flatnonzero(rows == r)
        on = on[np.lexsort((-end[on], start[on]))]
        ended = np.maximum.accumulate(end[on])[:-1] - OVERLAP_TOLERANCE_S
        out += on[1:][start[on[1:]] < ended].tolist()
    return out


def _shown(qtbot) -> TimelineWidget:
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.resize(1366, 420)
    w.show()
    qtbot.waitExposed(w)
    return w


def test_no_two_bars_of_one_drawn_row_overlap(qtbot, overlapping):
    g, s = overlapping.graph, overlapping.schedule
    # on the stream's own rows (graph.row) the TP all-reduce of stage 0 lies under DP bars
    hidden = _overlaps(g.row, s.start_s, s.end_s)
    assert hidden and {KINDS[g.kind[i]] for i in hidden} <= {"dp_comm", "tp_comm"}
    w = _shown(qtbot)
    w.set_data(g, s)
    assert w.wait_ready()
    comm = STREAMS.index("comm")
    assert w._stage_lanes == ((0, 0), (comm, 0), (comm, 1), (STREAMS.index("PP send/recv"), 0))
    layout = w.gantt.layout
    assert w.gantt.num_rows == g.num_stages * 4 and layout.num_tasks == g.num_tasks
    # what is drawn: each row's bars, in the layout's (row, start) order, end before the next
    bounds = layout.row_bounds
    for r in range(bounds.size - 1):
        starts = layout.rs_start[bounds[r]:bounds[r + 1]]
        ends = layout.rs_end[bounds[r]:bounds[r + 1]]
        if starts.size > 1:
            assert (starts[1:] >= np.maximum.accumulate(ends[:-1]) - OVERLAP_TOLERANCE_S).all(), r
    rows, lanes = lane_rows(g, s)
    assert _overlaps(rows, s.start_s, s.end_s) == []
    # every task on its stage and on a lane of its stream; the TP all-reduce on "comm (2)"
    assert np.array_equal(rows // len(lanes), g.stage)
    lane = [lanes[r % len(lanes)] for r in rows.tolist()]
    assert [stream for stream, _ in lane] == g.stream.tolist()
    second = [i for i, (_, k) in enumerate(lane) if k]
    assert second and {KINDS[g.kind[i]] for i in second} <= {"dp_comm", "tp_comm"}


def test_the_second_lane_is_labelled_and_hovered(qtbot, overlapping):
    g, s = overlapping.graph, overlapping.schedule
    w = _shown(qtbot)
    w.set_data(g, s)
    assert w.wait_ready()
    qtbot.wait(20)
    labels = [text for _, text in w._ticks]
    assert labels[:4] == ["stage 0 compute", "stage 0 comm", "stage 0 comm (2)",
                          "stage 0 PP send/recv"]
    assert "comm&nbsp;(2)" in w.legend.text()
    rows, _ = lane_rows(g, s)
    tp = int(np.flatnonzero((rows == 2) & (g.kind == KINDS.index("tp_comm")))[0])
    mid = 0.5 * (s.start_s[tp] + s.end_s[tp])
    assert w.task_at(mid, 2.5) == tp
    assert "TP collectives · stage 0 comm (2) · micro-batch 0" in w.task_text(tp)
    dp = w.task_at(mid, 1.5)  # the DP all-gather drawn over it before, on the comm lane
    assert dp >= 0 and KINDS[g.kind[dp]] == "dp_comm" and s.start_s[dp] < mid < s.end_s[dp]
    assert " · stage 0 comm · " in w.task_text(dp)


def test_a_plan_without_overlap_keeps_one_lane_per_stream(real_simulate):
    r = real_simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    rows, lanes = lane_rows(r.graph, r.schedule)
    assert lanes == tuple((stream, 0) for stream in r.graph.lanes)
    assert np.array_equal(rows, r.graph.row)


def test_first_fit_by_start_time_whatever_the_graphs_order():
    """Three collectives of stage 1's comm stream, given latest first: A 0-10 s, B 2-4 s inside
    it, C 5-12 s starting inside A after B ended. Two rows keep them apart (A; B then C), the
    fewest; stage 0's compute task and stage 1's compute task stay on their lanes, and every
    stage gets the second comm lane."""
    from core.sim.graph_types import ExecutionGraph, Schedule
    start = np.array([0.0, 5.0, 2.0, 0.0, 0.0])
    end = np.array([1.0, 12.0, 4.0, 10.0, 3.0])
    g = ExecutionGraph(duration_s=end - start,
                       kind=np.array([KINDS.index("forward"), *[KINDS.index("dp_comm")] * 3,
                                      KINDS.index("forward")], np.int8),
                       stream=np.array([0, 1, 1, 1, 0], np.int8),
                       stage=np.array([0, 1, 1, 1, 1], np.int32),
                       microbatch=np.zeros(5, np.int32), layer=np.zeros(5, np.int32),
                       src=np.empty(0, np.int64), dst=np.empty(0, np.int64), num_stages=2)
    rows, lanes = lane_rows(g, Schedule(start, end, 12.0))
    assert lanes == ((0, 0), (1, 0), (1, 1))
    # stage 0 compute; C on stage 1's comm (2); B there too; A on stage 1's comm; compute
    assert rows.tolist() == [0, 3 + 2, 3 + 2, 3 + 1, 3 + 0]
    assert _overlaps(rows, start, end) == []
