"""Huge iterations (millions of tasks) are summarized first: the whole iteration's picture,
merged straight from the task arrays, is drawn (and grabbed by ``--screenshot``) before the
exact layout (zoom, hover) is built."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from core.sim.graph_types import KINDS
from synthetic import synthetic_iteration
from vtrain_gui.timeline import items as items_module
from vtrain_gui.timeline import layout as layout_module
from vtrain_gui.timeline.layout import STRIPS, Layout, cell_code, summary_image
from vtrain_gui.timeline.widget import TimelineWidget


def _tasks(n: int, seed: int = 3, width: float = 1e-4):
    rng = np.random.default_rng(seed)
    start = np.sort(rng.uniform(0, 1.0, n))
    end = start + rng.uniform(0, width, n)
    end[-1] = max(end[-1], 1.0)
    return start, end, rng.integers(0, 4, n), rng.integers(0, 6, n)


@pytest.mark.parametrize("nbins", [256, 1024])
def test_summary_of_narrow_bars_is_the_band_image(nbins, monkeypatch):
    """Bars narrower than a bin: the summary is the layout's band image (same tallies)."""
    monkeypatch.setattr(layout_module, "_CHUNK", 4096)  # several blocks
    start, end, kind, row = _tasks(40_000)
    layout = Layout(start, end, kind, row, 6)
    i = int(np.log2(nbins)) - layout.band_lo
    assert (layout.rs_group > i).all()  # every bar below a bin
    band = layout.band_image(i)
    summary = summary_image(start, end, kind, row, 6, layout.t_end, nbins)
    assert summary.shape == band.shape == (6, STRIPS, nbins)
    assert ((summary != 0) == (band != 0)).all()
    assert (summary == band).mean() > 0.999  # the shade step may round apart at an edge


def test_summary_counts_the_whole_time_of_wide_bars():
    """A bar over many bins colours each at full opacity; its partial end bins by their share."""
    nbins, t_end = 100, 1.0
    # kind 1 over bins 10.5 .. 40.25 on row 0; kind 2 a quarter of bin 60 on row 1
    start, end = np.array([0.105, 0.6, 0.0]), np.array([0.4025, 0.6025, 1.0])
    kind, row = np.array([1, 2, 0]), np.array([0, 1, 2])
    image = summary_image(start, end, kind, row, 3, t_end, nbins)
    full = layout_module.SHADES
    assert (image[0, :, 11:40] == cell_code(1, full)).all()
    # 1/2, 1/4 of a bin
    assert (image[0, :, 10] == cell_code(1, 3)).all() and (image[0, :, 40] == cell_code(1, 2)).all()
    assert (image[0, :, :10] == 0).all() and (image[0, :, 41:] == 0).all()
    assert (image[1, :, 60] == cell_code(2, 2)).all() and np.count_nonzero(image[1]) == STRIPS
    assert (image[2] == cell_code(0, full)).all()


def test_summary_stacks_the_kinds_of_a_bin_by_their_time():
    """Recomputation a third of a bin's time beside backward (two thirds): the summary gives it
    a strip (of STRIPS = 4: 4/3 rounds to 1), instead of the bin's whole colour to backward."""
    backward, recompute = KINDS.index("backward"), KINDS.index("recompute")
    # bin 0 of 10: recompute 1/30 s then backward 2/30 s; both fully busy the bin
    start, end = np.array([0.0, 1 / 30, 0.5]), np.array([1 / 30, 0.1, 1.0])
    image = summary_image(start, end, np.array([recompute, backward, 0]), np.zeros(3, int), 1,
                          1.0, 10)
    full = layout_module.SHADES
    assert image[0, :, 0].tolist() == [cell_code(backward, full)] * 3 + [cell_code(recompute, full)]


def test_a_huge_iteration_shows_its_summary_before_the_layout(qtbot, monkeypatch):
    monkeypatch.setattr(items_module, "SYNC_MAX_TASKS", 100)
    monkeypatch.setattr(items_module, "SUMMARY_MIN_TASKS", 1000)
    graph, schedule = synthetic_iteration(p=4, m=32, layers_per_stage=4)
    w = TimelineWidget()
    qtbot.addWidget(w)
    w.resize(900, 400)
    w.show()
    qtbot.waitExposed(w)
    # hold the exact layout back: only the summary can make the view ready
    gate = threading.Event()
    real_layout = layout_module.Layout

    def slow_layout(*args, **kwargs):
        gate.wait(30)
        return real_layout(*args, **kwargs)

    monkeypatch.setattr(layout_module, "Layout", slow_layout)
    w.set_data(graph, schedule)
    assert "at a glance" in w._info.text()
    assert w.wait_view_ready(timeout_s=30)
    assert w.gantt.layout is None and w.gantt.summary is not None
    bins, image = w.gantt.summary
    assert image.shape == (w.gantt.num_rows, STRIPS, bins) and np.count_nonzero(image)
    picture = w.plot.grab().toImage()
    gate.set()
    assert w.wait_ready()
    assert w.gantt.summary is None and w.gantt.layout.num_tasks == graph.num_tasks
    assert not picture.isNull()
    # the exact layout's picture at this zoom but for the wide bars (outlined rectangles there,
    # over the narrow ones: here each bin takes the kind with the most time; 94 % agree)
    exact = w.plot.grab().toImage()
    same = sum(picture.pixel(x, y) == exact.pixel(x, y)
               for x in range(0, picture.width(), 7) for y in range(0, picture.height(), 7))
    total = len(range(0, picture.width(), 7)) * len(range(0, picture.height(), 7))
    assert same / total > 0.9
