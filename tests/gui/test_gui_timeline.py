"""TimelineWidget: data, hover lookup, batched drawing and what a person sees."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6 import QtCore, QtGui

from core.graph_types import KINDS
from synthetic import synthetic_iteration
from vtrain_gui.formatting import KIND_COLORS
from vtrain_gui.timeline import _BAR_HEIGHT, _BAR_TOP, GanttItem, TimelineWidget


@pytest.fixture
def timeline(qtbot):
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.resize(1200, 500)
    w.show()
    qtbot.waitExposed(w)
    return w


def _view_to_viewport(w: TimelineWidget, x: float, y: float) -> QtCore.QPoint:
    scene = w.view_box.mapViewToScene(QtCore.QPointF(x, y))
    return w.plot.mapFromScene(scene)


def test_set_data_and_lookup_every_sampled_task(timeline):
    graph, schedule = synthetic_iteration(p=4, m=8, layers_per_stage=2)
    timeline.set_data(graph, schedule)
    assert timeline.num_tasks == graph.num_tasks
    rng = np.random.default_rng(0)
    for i in rng.choice(graph.num_tasks, 200, replace=False):
        mid = 0.5 * (schedule.start_s[i] + schedule.end_s[i])
        assert timeline.task_at(mid, graph.row[i] + 0.5) == i


def test_lookup_in_a_bubble_and_between_rows_finds_nothing(timeline):
    graph, schedule = synthetic_iteration(p=4, m=8, layers_per_stage=2)
    timeline.set_data(graph, schedule)
    last_stage_compute = (4 - 1) * 2
    first_start = schedule.start_s[graph.row == last_stage_compute].min()
    assert first_start > 0  # the warm-up bubble of the last stage
    assert timeline.task_at(0.5 * first_start, last_stage_compute + 0.5) == -1
    i = int(np.flatnonzero(graph.row == 0)[0])
    mid = 0.5 * (schedule.start_s[i] + schedule.end_s[i])
    assert timeline.task_at(mid, 0.0 + 0.01) == -1  # gap above the bar
    assert timeline.task_at(mid, 99.5) == -1


def test_hover_with_the_mouse_shows_the_task(timeline, qtbot):
    graph, schedule = synthetic_iteration(p=2, m=4, layers_per_stage=1)
    timeline.set_data(graph, schedule)
    i = int(np.argmax(graph.duration_s))  # the widest bar is easiest to hit
    mid = 0.5 * (schedule.start_s[i] + schedule.end_s[i])
    pos = _view_to_viewport(timeline, mid, graph.row[i] + 0.5)
    with qtbot.waitSignal(timeline.task_hovered, timeout=2000) as blocker:
        qtbot.mouseMove(timeline.plot.viewport(), pos)
    assert blocker.args == [i]
    assert timeline.hovered_task == i
    text = timeline.task_text(i)
    assert "stage" in text and "micro-batch" in text and "duration" in text
    assert timeline._info.text() == text


def test_bars_and_bubbles_are_drawn_in_the_right_colours(timeline, qtbot):
    graph, schedule = synthetic_iteration(p=4, m=8, layers_per_stage=2)
    timeline.set_data(graph, schedule)
    image = timeline.plot.grab().toImage()

    def colour_at(x, y):
        p = _view_to_viewport(timeline, x, y)
        return image.pixelColor(p.x(), p.y()).name()

    # a data-parallel all-reduce bar (wide, on a comm row)
    i = int(np.flatnonzero(graph.kind == KINDS.index("dp_comm"))[0])
    mid = 0.5 * (schedule.start_s[i] + schedule.end_s[i])
    assert colour_at(mid, graph.row[i] + 0.5) == QtGui.QColor(KIND_COLORS["dp_comm"]).name()
    # the warm-up bubble of the last stage is empty lane background
    row = 3 * 2
    first = schedule.start_s[graph.row == row].min()
    bubble = colour_at(0.5 * first, row + 0.5)
    assert bubble not in {QtGui.QColor(c).name() for c in KIND_COLORS.values()}


def test_200k_tasks_draw_a_bounded_number_of_rectangles(timeline, qtbot):
    graph, schedule = synthetic_iteration(p=16, m=128, layers_per_stage=16)
    assert graph.num_tasks >= 200_000
    timeline.set_data(graph, schedule)
    timeline.plot.grab()
    zoomed_out = timeline.gantt.last_paint_num_rects
    assert 0 < zoomed_out < 30_000
    t = schedule.iteration_time_s
    timeline.view_box.setXRange(0.5 * t, 0.5 * t + 1e-3 * t, padding=0)
    timeline.plot.grab()
    zoomed_in = timeline.gantt.last_paint_num_rects
    assert 0 < zoomed_in < 2_000


@pytest.mark.parametrize("x1, columns", [(1.0, 800), (0.05, 800)],
                         ids=["whole-iteration level", "visible bars only"])
def test_level_of_detail_covers_every_pixel_that_has_a_task(x1, columns):
    """Merged rectangles cover each (row, pixel column) holding a sub-pixel bar, and no other."""
    item = GanttItem()
    rng = np.random.default_rng(1)
    n = 50_000
    start = np.sort(rng.uniform(0, 1.0, n))
    dur = np.full(n, 1e-9)
    row = rng.integers(0, 4, n).astype(float)
    kind = rng.integers(0, 3, n)
    item.set_tasks(start, dur, kind, row, 4)
    px = x1 / columns
    parts = item.draw_list(0.0, x1, px)
    assert parts and all(not exact for _, _, exact, _ in parts)
    covered = np.zeros((4, columns + 2), dtype=bool)
    for _, rects, _, _ in parts:
        assert rects.flags["C_CONTIGUOUS"] and rects.dtype == np.float64
        r = np.floor(rects[:, 1]).astype(int)
        c0 = np.round(rects[:, 0] / px).astype(int)
        c1 = np.round((rects[:, 0] + rects[:, 2]) / px).astype(int)
        keep = (c0 <= columns) & (c1 >= 0)  # the whole-iteration level reaches past x1
        for rr, a, b in zip(r[keep], c0[keep], c1[keep]):
            covered[rr, max(a, 0):min(b, columns + 2)] = True
        assert np.allclose(rects[:, 3], _BAR_HEIGHT) and np.allclose(rects[:, 1] % 1, _BAR_TOP)
    need = np.zeros_like(covered)
    inside = start <= x1
    need[row[inside].astype(int), (start[inside] / px).astype(int)] = True
    assert not (need & ~covered).any()
    assert not (covered[:, :columns] & ~need[:, :columns]).any()
    assert sum(r.shape[0] for _, r, _, _ in parts) < 4 * (columns + 2) * (1.0 / x1)


@pytest.mark.parametrize("n, full", [(500, 0.8), (20_000, 1.0)],
                         ids=["few bars widened", "many bars merged"])
def test_merged_bars_are_shaded_by_the_busy_part_of_their_pixels(n, full):
    """Row 0 busy 10 % of its time, row 1 busy all of it, both in bars below a pixel: row 0
    draws at the lowest opacity step; row 1 opaque when merged, and at the step of each
    bar's own width (0.8 px) when few bars are widened one by one."""
    item = GanttItem()
    columns = 400
    px = 1.0 / columns
    slot = 1.0 / n  # n bars per row, each in its own slot of the unit interval
    start = np.concatenate([np.arange(n) * slot, np.arange(n) * slot])
    dur = np.concatenate([np.full(n, 0.1 * slot), np.full(n, slot)])
    row = np.repeat([0.0, 1.0], n)
    item.set_tasks(start, dur, np.zeros(2 * n, np.int64), row, 2)
    parts = item.draw_list(0.0, 1.0, px)
    shade = {}
    for _, rects, exact, opacity in parts:
        assert not exact
        for r in np.unique(np.floor(rects[:, 1]).astype(int)):
            shade.setdefault(r, set()).add(opacity)
    assert shade[0] == {0.2}
    assert shade[1] == {full}


def test_clear_removes_everything(timeline):
    graph, schedule = synthetic_iteration(p=2, m=2, layers_per_stage=1)
    timeline.set_data(graph, schedule)
    timeline.clear()
    assert timeline.num_tasks == 0
    assert timeline.task_at(0.0, 0.5) == -1
    timeline.plot.grab()  # paints without data
    # the empty axis reads in seconds, not in the picoseconds of a zero-length range
    assert timeline.view_box.viewRange()[0][1] == pytest.approx(1.0, abs=0.01)
    assert "(s)" in timeline.plot.getAxis("bottom").labelString()


def test_real_simulation_shows_every_task(timeline, real_simulate):
    from core.session import load_any
    from tests.conftest import EXAMPLES

    result = real_simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    timeline.set_data(result.graph, result.schedule)
    assert timeline.num_tasks == result.graph.num_tasks
    i = int(np.argmax(result.graph.duration_s))
    mid = 0.5 * (result.schedule.start_s[i] + result.schedule.end_s[i])
    assert timeline.task_at(mid, result.graph.row[i] + 0.5) == i
    timeline.plot.grab()
