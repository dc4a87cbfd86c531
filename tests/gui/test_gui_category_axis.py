"""Labels of named bars never overlap (vtrain_gui.category_axis): the Compare tab's waterfall
ran "overlap wait" into "imbalance" at 1,280 px, and the memory chart's sixteen stages ran
"9101112"."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from synthetic import synthetic_report
from vtrain_gui.category_axis import LABEL_GAP_PX, fit_labels


def _width(text: str) -> float:  # a monospaced font of 7 px a character
    return 7.0 * len(text)


def _elide(text: str, px: float) -> str:
    keep = max(int(px // 7) - 1, 0)
    return text[:keep] + "…"


def _extent(label: str) -> float:
    return max(_width(line) for line in label.split("\n"))


def test_wrap_breaks_at_a_space_then_elides_and_never_overlaps():
    labels = ["compute", "recompute", "overlap wait", "imbalance", "EP all-to-all", "total"]
    shown = fit_labels(labels, slot_px=80.0, width=_width, elide=_elide, fit="wrap")
    assert shown[0] == "compute" and shown[-1] == "total"  # short ones stay as they are
    assert shown[2] == "overlap\nwait"  # at the space
    assert shown[4] == "EP\nall-to-all"  # at the space, not after a hyphen
    for a, b in itertools.pairwise(shown):  # neighbours' half-widths plus the gap fit a slot
        assert _extent(a) / 2 + _extent(b) / 2 + LABEL_GAP_PX <= 80.0
    narrow = fit_labels(labels, slot_px=40.0, width=_width, elide=_elide, fit="wrap")
    assert any("…" in t for t in narrow)
    for a, b in itertools.pairwise(narrow):
        assert _extent(a) / 2 + _extent(b) / 2 + LABEL_GAP_PX <= 40.0


def test_a_long_word_takes_the_room_its_short_neighbours_leave():
    shown = fit_labels(["TP", "recompute", "DP"], slot_px=60.0, width=_width, elide=_elide)
    assert shown == ["TP", "recompute", "DP"]  # 63 px in a 60 px slot between 14 px ones


def test_thin_keeps_every_kth_label():
    labels = [str(i) for i in range(16)]
    assert fit_labels(labels, 40.0, _width, _elide, fit="thin") == labels
    shown = fit_labels(labels, 12.0, _width, _elide, fit="thin")  # "10" is 14 px + the gap
    assert shown[::2] == labels[::2] and not any(shown[1::2])


def _assert_apart(axis):
    rects = [r for _, r in axis.label_rects()]
    assert rects
    for a, b in itertools.pairwise(sorted(rects, key=lambda r: r.left())):
        assert a.right() + LABEL_GAP_PX / 2 <= b.left(), (axis.label_rects())


def _moe_session():
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    model = dataclasses.replace(MODEL_PRESETS["Qwen3-30B-A3B"], num_layers=4)
    return Session(model=model, plan=ParallelPlan(
        tensor_parallel=2, pipeline_parallel=1, data_parallel=4, expert_parallel=4,
        micro_batch_size=1, global_batch_size=8, sequence_parallel=True))


@pytest.mark.parametrize("width", [1280, 900])
def test_waterfall_labels_do_not_overlap_on_a_laptop(qtbot, width):
    """Ten bars (the MoE terms) in a 1,280 px window, and narrower: wrapped or elided, the
    names stay apart, and each bar's name says on hover what the term is, with its seconds."""
    from core.sim.simulate import simulate
    from vtrain_gui.compare import CompareTab

    a_session = _moe_session()
    b_session = a_session.copy()
    b_session.plan = dataclasses.replace(a_session.plan, tensor_parallel=1, data_parallel=8)
    tab = CompareTab()
    qtbot.addWidget(tab)
    tab.resize(width, 750)
    tab.show()
    tab.set_pinned(simulate(a_session))
    tab.set_current(simulate(b_session))
    axis = tab.waterfall.getPlotItem().getAxis("bottom")
    assert "ep_comm" in tab.bar_names()
    qtbot.waitUntil(lambda: len(axis.label_rects()) == len(tab.bar_names()), timeout=5000)
    tab.grab()  # paint at the final size
    _assert_apart(axis)
    shown = [t for t, _ in axis.label_rects()]
    assert "forward +\nbackward" in shown or any("…" in t for t in shown)
    # the terms vtrain diff prints: not one neither plan has (no overlapped communication)
    assert "overlap_wait" not in tab.bar_names() and "rest" not in tab.bar_names()
    for rect in (r for _, r in axis.label_rects()):  # whole lines, inside the axis's height
        assert rect.bottom() <= axis.height() + 0.5
    tips = tab.bar_tooltips()
    assert tips[tab.bar_names().index("ep_comm")].startswith("exposed EP all-to-all: ")
    assert tips[-1].startswith("iteration time B − A: ")
    # hovering a name shows its tooltip
    from PySide6 import QtTest
    plot = tab.waterfall
    k = tab.bar_names().index("forward_backward")
    rect = axis.label_rects()[k][1]
    QtTest.QTest.mouseMove(plot.viewport(), plot.mapFromScene(axis.mapToScene(rect.center())))
    qtbot.waitUntil(lambda: axis.toolTip() == tips[k], timeout=5000)


def test_memory_chart_thins_sixteen_stage_numbers(qtbot):
    from vtrain_gui.cost_panel import CostPanel

    panel = CostPanel()
    qtbot.addWidget(panel)
    panel.resize(780, 440)  # the Plan tab's cost panel in a 1,280 x 800 window
    panel.show()
    panel.set_report(synthetic_report(p=16))
    axis = panel.memory_plot.getPlotItem().getAxis("bottom")
    qtbot.waitUntil(lambda: bool(axis.label_rects()), timeout=5000)
    panel.grab()
    _assert_apart(axis)
    shown = [t for t, _ in axis.label_rects()]
    assert shown[0] == "0" and len(shown) < 16


def test_one_long_word_breaks_inside_with_a_hyphen_before_it_is_cut():
    """At 1,280 px the Compare tab's "recomputation" between two full slots was cut to
    "recomputat…": it breaks inside, with a hyphen, when both halves fit."""
    shown = fit_labels(["forward + backward", "recomputation", "TP collectives"], slot_px=70.0,
                       width=_width, elide=_elide)
    first, second = shown[1].split("\n")
    assert first.endswith("-") and first[:-1] + second == "recomputation"
    assert max(_width(first), _width(second)) <= 70.0 - LABEL_GAP_PX
    # room enough from short neighbours: whole, as before
    assert fit_labels(["TP", "recompute", "DP"], 60.0, _width, _elide) == ["TP", "recompute", "DP"]
