"""TimelineWidget: data, hover lookup, batched drawing and what a person sees."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6 import QtCore, QtGui

from core.sim.graph_types import KINDS
from synthetic import synthetic_iteration
from vtrain_gui.timeline import colors as colors_module
from vtrain_gui.timeline import items as items_module
from vtrain_gui.timeline import layout as layout_module
from vtrain_gui.formatting import KIND_COLORS
from vtrain_gui.timeline.items import GanttItem
from vtrain_gui.timeline.layout import BAR_HEIGHT, BAR_TOP
from vtrain_gui.timeline.widget import TimelineWidget


def _shown_timeline(qtbot, width: int, height: int) -> TimelineWidget:
    """A new timeline widget of ``width`` x ``height`` px, shown and exposed."""
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.resize(width, height)
    w.show()
    qtbot.waitExposed(w)
    return w


@pytest.fixture
def timeline(qtbot):
    return _shown_timeline(qtbot, 1200, 500)


def _view_to_viewport(w: TimelineWidget, x: float, y: float) -> QtCore.QPoint:
    scene = w.view_box.mapViewToScene(QtCore.QPointF(x, y))
    return w.plot.mapFromScene(scene)



def _draw_texts(axis) -> list:
    """The ``(rect, flags, text)`` of each tick label ``axis`` would draw (pyqtgraph's
    ``AxisItem.generateDrawSpecs``, on a scratch painter)."""
    image = QtGui.QImage(10, 10, QtGui.QImage.Format.Format_ARGB32)
    painter = QtGui.QPainter(image)
    try:
        return axis.generateDrawSpecs(painter)[2]
    finally:
        painter.end()

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


def _alpha(pixels: np.ndarray) -> np.ndarray:
    """Alpha channel (0..255) of premultiplied ARGB32 pixels."""
    return (pixels >> 24).astype(np.int64)


def test_200k_tasks_are_laid_out_off_the_gui_thread_and_draw_a_bounded_number_of_rectangles(
        timeline, qtbot):
    graph, schedule = synthetic_iteration(p=16, m=128, layers_per_stage=16)
    assert graph.num_tasks >= 200_000 > items_module.SYNC_MAX_TASKS
    timeline.set_data(graph, schedule)
    # set_data returned before the layout: a worker thread builds it, hover waits for it
    assert timeline.gantt.layout is None and timeline.num_tasks == graph.num_tasks
    assert "Preparing the timeline of" in timeline._info.text()
    i = int(np.argmax(graph.duration_s))
    mid = 0.5 * (schedule.start_s[i] + schedule.end_s[i])
    assert timeline.task_at(mid, graph.row[i] + 0.5) == -1
    assert timeline.wait_ready()
    assert timeline.task_at(mid, graph.row[i] + 0.5) == i
    assert timeline._info.text() == "Hover a bar for details"
    layout = timeline.gantt.layout
    assert set(layout.images) == set(range(layout.num_bands))
    timeline.plot.grab()
    assert timeline.gantt.last_paint_band < layout.num_bands  # zoomed out: a band image
    assert timeline.gantt.last_paint_num_rects < 30_000
    t = schedule.iteration_time_s
    timeline.view_box.setXRange(0.5 * t, 0.5 * t + 1e-3 * t, padding=0)
    timeline.plot.grab()
    assert timeline.gantt.last_paint_band == layout.num_bands  # zoomed in beyond the bands
    assert 0 < timeline.gantt.last_paint_num_rects < 2_000


def test_a_large_iteration_draws_the_same_pixels_prepared_in_a_thread_or_at_once(
        qtbot, monkeypatch):
    """The worker thread's layout and band images are the ones computed synchronously."""
    graph, schedule = synthetic_iteration(p=4, m=32, layers_per_stage=4)
    pictures = []
    for sync_max in (10**9, 1000):  # at once; then in a worker thread
        monkeypatch.setattr(items_module, "SYNC_MAX_TASKS", sync_max)
        w = _shown_timeline(qtbot, 900, 400)
        w.set_data(graph, schedule)
        assert (w.gantt.layout is None) == (sync_max == 1000)
        assert w.wait_ready()
        qtbot.wait(20)  # the legend's new text settles the layout
        t = schedule.iteration_time_s
        shots = []
        for x0, x1 in ((0.0, t), (0.3 * t, 0.4 * t), (0.35 * t, 0.351 * t)):
            w.view_box.setXRange(x0, x1, padding=0)
            shots.append(w.plot.grab().toImage())
        pictures.append(shots)
    for a, b in zip(*pictures):
        assert a == b


def test_a_newer_data_set_wins_over_one_still_being_prepared(timeline, monkeypatch):
    monkeypatch.setattr(items_module, "SYNC_MAX_TASKS", 100)
    first, s1 = synthetic_iteration(p=4, m=64, layers_per_stage=8)
    second, s2 = synthetic_iteration(p=2, m=4, layers_per_stage=2)
    timeline.set_data(first, s1)
    timeline.set_data(second, s2)
    assert timeline.wait_ready()
    assert timeline.gantt.layout.num_tasks == second.num_tasks
    QtCore.QCoreApplication.processEvents()  # late results of the first set are dropped
    assert timeline.gantt.layout.num_tasks == second.num_tasks
    i = int(np.argmax(second.duration_s))
    mid = 0.5 * (s2.start_s[i] + s2.end_s[i])
    assert timeline.task_at(mid, second.row[i] + 0.5) == i


def _covered_bins(n_rows: int, start: np.ndarray, row: np.ndarray, w: float, nbins: int) -> np.ndarray:
    need = np.zeros((n_rows, nbins), dtype=bool)
    need[row.astype(int), np.minimum((start / w).astype(int), nbins - 1)] = True
    return need


def test_band_image_marks_every_bin_where_a_sub_bin_bar_starts_and_no_other():
    """Zoomed out: bins are 1 to 2 pixels wide; a bin is coloured iff a bar narrower than a bin
    starts in it, its STRIPS strips in the kinds' colours, each kind over a number of strips
    that is its share of the bin's time times STRIPS rounded down or up."""
    item = GanttItem()
    rng = np.random.default_rng(1)
    n = 50_000
    start = np.sort(rng.uniform(0, 1.0, n))
    start[-1] = 1.0  # the iteration ends at 1 s (plus the last bar's nanosecond)
    dur = np.full(n, 1e-9)
    row = rng.integers(0, 4, n).astype(float)
    kind = rng.integers(0, 3, n)
    item.set_tasks(start, dur, kind, row, 4)
    layout = item.layout
    columns = 800
    px = 1.0 / columns
    assert item.draw_list(0.0, 1.0, px) == []  # no bar is a bin wide
    pixels, left, w = item.band_image_in_view(0.0, 1.0, px)
    assert left == 0.0 and 1.0 <= w / px < 2.0
    nbins = int(round(layout.t_end / w))
    strips = layout_module.STRIPS
    assert pixels.shape == (4, strips, nbins)
    need = _covered_bins(4, start, row, w, nbins)
    assert ((pixels != 0).all(axis=1) == need).all() and ((pixels != 0).any(axis=1) == need).all()
    # the strips of each coloured bin: its kinds by their share (all bars equally long)
    colors = colors_module.color_table()
    cell = row.astype(int) * nbins + np.minimum((start / w).astype(int), nbins - 1)
    counts = np.zeros((4 * nbins, 3))
    np.add.at(counts, (cell, kind), 1)
    busy = counts.sum(axis=1) > 0
    share = counts[busy] / counts[busy].sum(axis=1, keepdims=True)       # (c, 3)
    by_strip = pixels.transpose(0, 2, 1).reshape(4 * nbins, strips)[busy]  # (c, STRIPS)
    # 1 ns in a bin: the lowest opacity step
    got = np.stack([(by_strip == colors[k, 1]).sum(axis=1) for k in range(3)], axis=1)
    assert (got.sum(axis=1) == strips).all()
    assert ((got >= np.floor(share * strips)) & (got <= np.ceil(share * strips))).all()
    assert ((share >= 1 / strips) <= (got >= 1)).all()  # a kind with a quarter of the time shows
    assert ((share > 0) & (share < 1) & (got > 0)).sum() > 100  # bins with several kinds: checked


def test_zoomed_in_beyond_the_bands_merged_rectangles_cover_every_pixel_that_has_a_task(monkeypatch):
    """Merged rectangles cover each (row, pixel column) holding a sub-pixel bar, and no other."""
    monkeypatch.setattr(layout_module, "_BAND_MAX_PIXELS", 1 << 12)  # bands up to 1,024 bins
    item = GanttItem()
    rng = np.random.default_rng(1)
    n = 50_000
    start = np.sort(rng.uniform(0, 1.0, n))
    dur = np.full(n, 1e-9)
    row = rng.integers(0, 4, n).astype(float)
    kind = rng.integers(0, 3, n)
    item.set_tasks(start, dur, kind, row, 4)
    x1, columns = 0.05, 800
    px = x1 / columns
    assert item.layout.band_for(px) == item.layout.num_bands
    assert item.band_image_in_view(0.0, x1, px) is None
    parts = item.draw_list(0.0, x1, px)
    assert parts and all(not exact for _, _, exact, _ in parts)
    covered = np.zeros((4, columns + 2), dtype=bool)
    for _, rects, _, _ in parts:
        assert rects.flags["C_CONTIGUOUS"] and rects.dtype == np.float64
        r = np.floor(rects[:, 1]).astype(int)
        c0 = np.round(rects[:, 0] / px).astype(int)
        c1 = np.round((rects[:, 0] + rects[:, 2]) / px).astype(int)
        for rr, a, b in zip(r, c0, c1):
            covered[rr, max(a, 0):min(b, columns + 2)] = True
        # a cell of one kind whole, one of several kinds as strips of the bar area
        strip_h = BAR_HEIGHT / layout_module.STRIPS
        assert np.isclose(rects[:, 3][:, None], [BAR_HEIGHT, strip_h]).any(axis=1).all()
        top = rects[:, 1] % 1 - BAR_TOP
        assert np.isclose(top[:, None] / strip_h, np.arange(layout_module.STRIPS)).any(axis=1).all()
    need = np.zeros_like(covered)
    inside = start <= x1
    need[row[inside].astype(int), (start[inside] / px).astype(int)] = True
    assert not (need & ~covered).any()
    assert not (covered[:, :columns] & ~need[:, :columns]).any()
    assert sum(r.shape[0] for _, r, _, _ in parts) < layout_module.STRIPS * 4 * (columns + 2)


def _busy_rows(n: int) -> tuple[np.ndarray, ...]:
    """Row 0 busy 10 % of [0, 1) and row 1 all of it, each in ``n`` bars of its own slot."""
    slot = 1.0 / n
    start = np.concatenate([np.arange(n) * slot, np.arange(n) * slot])
    dur = np.concatenate([np.full(n, 0.1 * slot), np.full(n, slot)])
    row = np.repeat([0.0, 1.0], n)
    return start, dur, row


@pytest.mark.parametrize("n", [500, 20_000])
def test_band_image_shades_a_bin_by_the_busy_part_of_its_time(n):
    """Bars below a bin: row 0 (busy 10 %) draws at the lowest opacity step, row 1 (busy all the
    time) opaque, whether a bin holds two bars or a hundred."""
    item = GanttItem()
    start, dur, row = _busy_rows(n)
    item.set_tasks(start, dur, np.zeros(2 * n, np.int64), row, 2)
    px = 1.0 / 400
    assert item.draw_list(0.0, 1.0, px) == []
    pixels, _, w = item.band_image_in_view(0.0, 1.0, px)
    assert w > 1.0 / n  # every bar is narrower than a bin
    alpha = _alpha(pixels[:, :, : int(1.0 / w)])
    assert set(alpha[0].reshape(-1).tolist()) == {round(255 * 0.2)}
    assert set(alpha[1].reshape(-1).tolist()) == {255}


@pytest.mark.parametrize("n, full", [(500, 0.8), (20_000, 1.0)],
                         ids=["few bars widened", "many bars merged"])
def test_zoomed_in_merged_bars_are_shaded_by_the_busy_part_of_their_pixels(n, full, monkeypatch):
    """Zoomed in beyond the bands, row 0 busy 10 % of its time and row 1 all of it, both in bars
    below a pixel: row 0 draws at the lowest opacity step; row 1 opaque when merged, and at the
    step of each bar's own width (0.8 px) when few bars are widened one by one."""
    monkeypatch.setattr(layout_module, "_BAND_MAX_PIXELS", 1 << 7)  # bands up to 64 bins
    item = GanttItem()
    start, dur, row = _busy_rows(n)
    item.set_tasks(start, dur, np.zeros(2 * n, np.int64), row, 2)
    px = 1.0 / 400
    assert item.layout.band_for(px) == item.layout.num_bands
    parts = item.draw_list(0.0, 1.0, px)
    shade = {}
    for _, rects, exact, opacity in parts:
        assert not exact
        for r in np.unique(np.floor(rects[:, 1]).astype(int)):
            shade.setdefault(r, set()).add(opacity)
    assert shade[0] == {0.2}
    assert shade[1] == {full}


def test_each_zoom_band_draws_wide_bars_as_rectangles_and_narrow_ones_in_its_image(timeline):
    """Zooming through every band: bars at least a bin wide are exact rectangles (at most one per
    pixel and row), narrower ones are in the image, and nothing is drawn twice or left out."""
    graph, schedule = synthetic_iteration(p=4, m=16, layers_per_stage=4)
    timeline.set_data(graph, schedule)
    assert timeline.wait_ready()
    layout = timeline.gantt.layout
    t = schedule.iteration_time_s
    width_px = timeline.view_box.width()
    seen = set()
    for frac in np.geomspace(1.0, 1e-4, 40):
        x0, x1 = 0.3 * t, 0.3 * t + frac * t
        timeline.view_box.setXRange(x0, x1, padding=0)
        timeline.plot.grab()
        gantt = timeline.gantt
        band = gantt.last_paint_band
        seen.add(band)
        px = gantt.pixelWidth()
        if band == layout.num_bands:
            continue
        w = float(layout.widths[band])
        assert px <= w < 2 * px * (1 + 1e-9)
        rect_ids = set()
        for kind, rects, exact, _ in gantt.draw_list(x0, x1, px):
            assert exact and (rects[:, 2] >= w).all()
            rect_ids.update(zip(rects[:, 0].tolist(), np.floor(rects[:, 1]).astype(int).tolist()))
        assert gantt.last_paint_num_rects <= layout.num_rows * (width_px + 2)
        visible = (schedule.end_s >= x0) & (schedule.start_s <= x1)
        wide = visible & (graph.duration_s >= w)
        assert rect_ids == set(zip(schedule.start_s[wide].tolist(), graph.row[wide].tolist()))
        image = gantt.band_image_in_view(x0, x1, px)
        narrow = visible & (graph.duration_s < w)
        if narrow.any():
            pixels, left, _ = image
            cols = ((schedule.start_s[narrow] - left) / w).astype(int)
            ok = (cols >= 0) & (cols < pixels.shape[1])
            assert (pixels[graph.row[narrow][ok], :, cols[ok]] != 0).any(axis=1).all()
    assert len(seen) >= 8 and layout.num_bands in seen


@pytest.mark.parametrize("shares, strips", [
    ((1 / 3, 2 / 3), [1, 3]),      # recompute beside a backward step twice as long
    ((0.25, 0.75), [1, 3]),        # exactly a strip's share
    ((0.2, 0.8), [1, 3]),          # 0.8 and 3.2 strips: the larger remainder rounds up
    ((0.1, 0.9), [0, 4]),          # below 1/STRIPS and the smaller remainder: not drawn
    ((0.26, 0.26, 0.48), [1, 1, 2]),
    ((1.0, 0.0), [4, 0]),
])
def test_stack_kinds_gives_each_kind_its_share_of_the_strips_by_largest_remainder(shares, strips):
    """Hamilton's rounding of share * STRIPS (STRIPS = 4), stacked in kind order."""
    assert layout_module.STRIPS == 4
    kinds = np.array([2, 1, 6][:len(shares)])
    got = layout_module.stack_kinds(np.array([shares]) * 0.01, kinds)
    assert got.shape == (1, 4)
    assert [int((got[0] == k).sum()) for k in kinds] == strips
    assert got[0].tolist() == sorted(got[0].tolist(), key=kinds.tolist().index)


def _kind_pixels(picture: QtGui.QImage, kind: str, y0: int, y1: int) -> np.ndarray:
    """Boolean (y1 - y0, width): where ``picture``'s rows y0:y1 are kind ``kind``'s colour."""
    image = picture.convertToFormat(QtGui.QImage.Format.Format_RGB32)  # alive while read
    w, h = image.width(), image.height()
    assert image.bytesPerLine() == 4 * w
    rgb = np.frombuffer(image.constBits(), np.uint32, w * h).reshape(h, w)[y0:y1].copy() & 0xFFFFFF
    return rgb == (QtGui.QColor(KIND_COLORS[kind]).rgb() & 0xFFFFFF)


def test_recomputation_beside_a_backward_twice_as_long_is_seen_zoomed_out(timeline):
    """A lane of 3,000 recompute steps (0.1 ms) each followed by a backward step twice as long,
    all below a pixel: a pixel column held the colour of its kind with the most time, so every
    column was backward and recomputation, a third of the time, never showed. Now each column
    is 4 strips stacked by share: one strip recomputation (4/3 rounds to 1), three backward,
    so a quarter of the lane's pixels, in every column, are recomputation's colour."""
    n, d = 3000, 1e-4
    start = np.repeat(np.arange(n) * 3 * d, 2) + np.tile([0.0, d], n)
    dur = np.tile([d, 2 * d], n)
    kind = np.tile([KINDS.index("recompute"), KINDS.index("backward")], n)
    gantt = timeline.gantt
    gantt.set_tasks(start, dur, kind, np.zeros(2 * n), 1)
    timeline.view_box.setRange(xRange=(0.0, 3 * n * d), yRange=(0.0, 1.0), padding=0)
    picture = timeline.plot.grab().toImage()
    assert gantt.last_paint_band < gantt.layout.num_bands  # the zoom band's merged image
    ratio = picture.devicePixelRatio()
    top = timeline.plot.mapFromScene(timeline.view_box.mapViewToScene(QtCore.QPointF(0, BAR_TOP)))
    bottom = timeline.plot.mapFromScene(timeline.view_box.mapViewToScene(
        QtCore.QPointF(0, BAR_TOP + BAR_HEIGHT)))
    y0, y1 = round(top.y() * ratio) + 1, round(bottom.y() * ratio) - 1  # inside the bar area
    recompute = _kind_pixels(picture, "recompute", y0, y1)
    backward = _kind_pixels(picture, "backward", y0, y1)
    columns = np.flatnonzero(backward.any(axis=0))
    assert columns.size > 0.8 * timeline.view_box.width() * ratio
    assert recompute[:, columns].any(axis=0).mean() > 0.97  # in (nearly) every column
    share = recompute[:, columns].sum() / (recompute[:, columns].sum() + backward[:, columns].sum())
    assert 0.2 < share < 0.35


def test_recomputation_beside_a_backward_twice_as_long_is_seen_zoomed_in_beyond_the_bands(
        monkeypatch):
    """The same lane zoomed in beyond the finest band, where sub-pixel bars are merged per
    (row, pixel): each pixel's strips are stacked as in the band images, one recomputation
    strip (a quarter of the bar's height) per pixel beside three backward ones."""
    monkeypatch.setattr(layout_module, "_BAND_MAX_PIXELS", 1 << 7)  # bands up to 128 bins
    n, d = 3000, 1e-4
    start = np.repeat(np.arange(n) * 3 * d, 2) + np.tile([0.0, d], n)
    kind = np.tile([KINDS.index("recompute"), KINDS.index("backward")], n)
    item = GanttItem()
    item.set_tasks(start, np.tile([d, 2 * d], n), kind, np.zeros(2 * n), 1)
    columns = 1000  # a pixel holds 0.9 recompute/backward pairs
    px = 3 * n * d / columns
    assert item.layout.band_for(px) == item.layout.num_bands
    height = {}  # kind -> bar height in pixel columns, rows of the bar area
    for k, rects, exact, opacity in item.draw_list(0.0, 3 * n * d, px):
        assert not exact and opacity == 1.0
        cols = np.zeros(columns + 1)
        for x, _, w, h in rects.tolist():
            cols[round(x / px):round((x + w) / px)] += h
        height[KINDS[k]] = cols[:columns] / BAR_HEIGHT
    assert set(height) == {"recompute", "backward"}
    assert np.allclose(height["recompute"] + height["backward"], 1.0)
    assert (height["recompute"] >= 0.25 - 1e-9).all()  # at least a strip in every pixel
    assert height["recompute"].mean() == pytest.approx(0.25, abs=0.05)


def test_a_kind_added_to_kinds_gets_its_own_colour(monkeypatch):
    """Colours are keyed by core.sim.graph_types.KINDS: a kind the palette does not know yet (a
    weight-gradient task, say) is drawn in a spare colour unlike the others."""
    kinds = KINDS + ("weight_grad",)
    monkeypatch.setattr(colors_module, "KINDS", kinds)
    colors = colors_module.color_table()
    assert colors.shape == (len(kinds), layout_module.SHADES + 1)
    new = colors_module.kind_color(len(kinds) - 1).name()
    assert new not in {colors_module.kind_color(k).name() for k in range(len(KINDS))}
    item = GanttItem()
    item.set_tasks(np.array([0.0, 1.0]), np.array([1.0, 1e-6]), np.array([len(kinds) - 1] * 2),
                   np.array([0, 0]), 1)
    parts = item.draw_list(0.0, 1.0, 1.0 / 500)
    assert [(k, r.shape[0]) for k, r, _, _ in parts] == [(len(kinds) - 1, 1)]
    pixels, _, _ = item.band_image_in_view(0.0, 1.0, 1.0 / 500)
    assert set(pixels[pixels != 0].tolist()) == {int(colors[len(kinds) - 1, 1])}


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
    from core.io.session import load_any
    from tests.conftest import EXAMPLES

    result = real_simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    timeline.set_data(result.graph, result.schedule)
    assert timeline.num_tasks == result.graph.num_tasks
    i = int(np.argmax(result.graph.duration_s))
    mid = 0.5 * (result.schedule.start_s[i] + result.schedule.end_s[i])
    assert timeline.task_at(mid, result.graph.row[i] + 0.5) == i
    timeline.plot.grab()


def test_a_hidden_timeline_lays_out_nothing_until_it_is_painted(qtbot, monkeypatch):
    """Large data given to a view that is not shown (the Explore tab's preview behind the Plan
    tab) starts no worker thread; its first paint (or wait_ready) does."""
    monkeypatch.setattr(items_module, "SYNC_MAX_TASKS", 100)
    w = TimelineWidget()
    qtbot.addWidget(w)
    graph, schedule = synthetic_iteration(p=2, m=8, layers_per_stage=2)
    w.set_data(graph, schedule)
    QtCore.QCoreApplication.processEvents()
    assert w.gantt._prep is None and w.gantt.layout is None and not w.is_ready
    w.resize(800, 300)
    w.show()
    qtbot.waitExposed(w)
    w.plot.grab()  # the first paint starts the worker
    assert w.gantt._prep is not None or w.gantt.layout is not None
    assert w.wait_ready()
    i = int(np.argmax(graph.duration_s))
    assert w.task_at(0.5 * (schedule.start_s[i] + schedule.end_s[i]), graph.row[i] + 0.5) == i


def test_a_context_parallel_plan_draws_a_cp_ring_lane_per_stage(timeline, real_simulate):
    """cp=4 (ring attention): each stage gets a lane "CP exchange" holding the K/V exchange (and,
    p = 2, one "PP send/recv" for the pipeline transfers); a plan without context parallelism
    has compute, comm and the transfers' lane per stage."""
    import dataclasses

    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session

    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=16384, num_layers=4)
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=1, micro_batch_size=1,
                        global_batch_size=2, recompute="selective", context_parallel=4)
    result = real_simulate(Session(model=model, plan=plan, cluster=ClusterConfig(gpu="H100-SXM5-80GB")))
    graph = result.graph
    timeline.set_data(graph, result.schedule)
    assert timeline.gantt.num_rows == 2 * 4
    labels = [text for _, text in timeline._ticks]
    assert labels[:4] == ["stage 0 compute", "stage 0 comm", "stage 0 CP exchange",
                          "stage 0 PP send/recv"]
    ring = np.flatnonzero((graph.kind == KINDS.index("cp_p2p")) & (graph.duration_s > 0))
    assert ring.size and set(graph.row[ring].tolist()) == {2, 6}
    sends = np.flatnonzero(graph.kind == KINDS.index("pp_p2p"))
    assert sends.size and set(graph.row[sends].tolist()) <= {3, 7}
    i = int(ring[np.argmax(graph.duration_s[ring])])
    mid = 0.5 * (result.schedule.start_s[i] + result.schedule.end_s[i])
    assert timeline.task_at(mid, graph.row[i] + 0.5) == i
    timeline.plot.grab()
    plain = real_simulate(Session(model=model, plan=dataclasses.replace(plan, context_parallel=1),
                                  cluster=ClusterConfig(gpu="H100-SXM5-80GB")))
    timeline.set_data(plain.graph, plain.schedule)
    assert timeline.gantt.num_rows == 2 * 3


def test_legend_breaks_lines_only_between_items(qtbot):
    """At 1,280 px the legend broke "PP send/recv" after the slash, "PP send/" ending one line
    and "recv" starting the next: every name is one unbreakable run, so a line only ever
    starts after the plain space that separates two items."""
    graph, schedule = synthetic_iteration(p=2, m=4)
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.set_data(graph, schedule)
    text = w.legend.text()
    assert "PP send/" in QtGui.QTextDocumentFragment.fromHtml(text).toPlainText()
    for width in range(400, 1400, 7):  # (each item fits on a line)
        doc = QtGui.QTextDocument()
        doc.setDefaultFont(w.legend.font())
        doc.setHtml(text)
        doc.setTextWidth(width)
        doc.size()  # lays the lines out
        block = doc.begin()
        while block.isValid():
            layout, plain = block.layout(), block.text()
            for i in range(1, layout.lineCount()):
                start = layout.lineAt(i).textStart()
                assert plain[start - 1] == " ", (width, plain[max(0, start - 12):start + 12])
            block = block.next()


def test_the_time_axis_names_its_start(qtbot):
    """The time axis labels 0 at its left end (pyqtgraph dropped the "0", half outside the
    axis: the Plan tab's timeline began at "5")."""
    graph, schedule = synthetic_iteration(p=2, m=4)
    w = _shown_timeline(qtbot, 760, 300)
    w.set_data(graph, schedule)
    assert w.wait_ready()
    axis = w.plot.getPlotItem().getAxis("bottom")
    texts = _draw_texts(axis)
    shown = [text for _, _, text in texts]
    assert shown and shown[0] == "0", shown


def test_legend_and_cost_panel_name_and_colour_a_quantity_alike(qtbot):
    """The timeline's legend and the cost panel's time breakdown name the pipeline bubble and
    the pipeline transfers with core's names (core.sim.labels) and draw the bubble in one colour:
    they said "idle (bubble)" in #DCE1EA and "Idle (bubble)" in #C9CED6, "PP send/recv" and
    "Pipeline sends"."""
    import re

    from core.sim.labels import KIND_NAMES, TIME_TERMS, capitalized

    graph, schedule = synthetic_iteration(p=2, m=4)
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.set_data(graph, schedule)
    legend = w.legend.text()
    plain = QtGui.QTextDocumentFragment.fromHtml(legend).toPlainText().replace("\u2060", "")
    # a compute lane's idle time is the bubble, stage imbalance and overlap wait alike
    assert (f"idle ({TIME_TERMS['bubble']}, {TIME_TERMS['imbalance']}, "
            f"{TIME_TERMS['overlap_wait']})") in plain.replace("\u00a0", " ").replace("\u2011", "-")
    assert KIND_NAMES["pp_p2p"] in plain.replace("\u00a0", " ")
    idle_swatch = re.search(r'color:(#[0-9A-Fa-f]{6})[^>]*>&#9632;</span>&nbsp;idle', legend)
    from vtrain_gui import cost_panel
    parts = {attr: (name, color) for attr, name, color in cost_panel._BREAKDOWN}
    assert parts["bubble_s"][0] == TIME_TERMS["bubble"]
    assert QtGui.QColor(parts["bubble_s"][1]) == QtGui.QColor(idle_swatch.group(1))
    assert parts["pp_comm_s"][0] == "exposed " + KIND_NAMES["pp_p2p"]
    assert dict(cost_panel._FIGURE_ROWS)["pp_comm"] == capitalized(TIME_TERMS["pp_comm"])


def test_the_legend_swatches_of_idle_time_are_the_colours_the_idle_lanes_show(timeline):
    """In 1F1B, stage 1's compute lane waits for stage 0's first forward (pipeline bubble) and
    stage 0's communication lane carries nothing before it: the pixels there are the colours
    of the legend's "idle (pipeline bubble)" and "no communication" swatches (the lanes were
    #EEF1F6 and #F7F7F7, the idle swatch #DCE1EA)."""
    import re

    graph, schedule = synthetic_iteration(p=2, m=4)
    timeline.set_data(graph, schedule)
    legend = timeline.legend.text()
    swatch = {name: QtGui.QColor(color) for color, name in re.findall(
        r'color:(#[0-9A-Fa-f]{6})[^>]*>&#9632;</span>&nbsp;([a-z]+(?:&nbsp;[a-z]+)?)', legend)}
    t_first = schedule.end_s[graph.kind == KINDS.index("forward")].min()
    timeline.view_box.setRange(xRange=(0.0, schedule.iteration_time_s), padding=0)
    picture = timeline.plot.grab().toImage()
    ratio = picture.devicePixelRatio()
    streams = timeline.gantt.streams_per_stage

    def colour_at(row: int) -> QtGui.QColor:
        seen = []
        for x in np.linspace(0.2, 0.8, 5) * t_first:  # the most frequent: off any grid line
            point = _view_to_viewport(timeline, x, row + 0.5)
            seen.append(picture.pixel(round(point.x() * ratio), round(point.y() * ratio)))
        return QtGui.QColor.fromRgb(max(set(seen), key=seen.count))

    assert colour_at(streams) == swatch["idle"]  # stage 1 compute
    assert colour_at(1) == swatch["no&nbsp;communication"]  # stage 0 comm
    assert swatch["idle"] != swatch["no&nbsp;communication"]


@pytest.mark.parametrize("height", [110, 130, 160])
def test_lane_labels_of_a_short_timeline_lie_inside_the_view(qtbot, height):
    """The Explore tab's preview (about 870 x 130 px at 1,366 x 768) of a 35-stage pipeline:
    rows thinner than a line of text, every k-th stage labelled. "stage 0" was centred on
    stage 0's lanes, under a pixel from the view's top, and its upper half was cut by the
    widget's edge; now every label drawn lies inside the view (vertically) and the first
    one is still "stage 0"."""
    from vtrain_gui.plan_preview import LEGEND_LINES

    graph, schedule = synthetic_iteration(p=35, m=35, layers_per_stage=1)
    w = TimelineWidget(legend_lines=LEGEND_LINES, hover_line=False)
    qtbot.addWidget(w)
    w.resize(870, height)
    w.show()
    qtbot.waitExposed(w)
    w.set_data(graph, schedule)
    assert w.wait_ready()
    qtbot.wait(20)
    row_px = w.view_box.height() / w.gantt.num_rows
    axis = w.plot.getPlotItem().getAxis("left")
    assert row_px < QtGui.QFontMetrics(axis.style.get("tickFont") or w.font()).height()
    texts = _draw_texts(axis)
    assert texts and texts[0][2] == "stage 0", texts
    view = w.view_box.sceneBoundingRect()
    for rect, _, text in texts:
        r = axis.mapRectToScene(rect)
        assert view.top() - 0.5 <= r.top() and r.bottom() <= view.bottom() + 0.5, (text, r, view)
    # the labels do not overlap one another
    tops = sorted(axis.mapRectToScene(rect).top() for rect, _, _ in texts)
    heights = texts[0][0].height()
    assert all(b - a >= heights - 0.5 for a, b in zip(tops, tops[1:])), tops
