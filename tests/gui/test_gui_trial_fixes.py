"""Faults a new user found: cut-off figures, empty views that look like data, hidden marks,
faint axes, a label over a bar, a plan that cannot run shown without a flag."""

from __future__ import annotations

import numpy as np
import pytest

from PySide6.QtCore import QCoreApplication, QEvent, Qt

from synthetic import synthetic_report
from tests.conftest import EXAMPLES
from vtrain_gui.cost_panel import CostPanel


@pytest.fixture
def panel(qtbot):
    w = CostPanel()
    qtbot.addWidget(w)
    w.resize(1000, 460)
    w.show()
    return w


def test_a_plan_that_does_not_fit_flags_its_time_and_cost(panel):
    panel.set_report(synthetic_report(p=4, fits=False))
    assert panel.no_fit_text.startswith("⚠ Does not fit in GPU memory")
    assert "cannot run" in panel.no_fit_text
    for key in ("iteration_time", "training_days", "cost_usd", "gpu_hours"):
        assert "C62828" in panel._values[key].styleSheet()
        assert "does not fit" in panel._values[key].toolTip()
    panel.set_report(synthetic_report(p=4, fits=True))
    assert panel.no_fit_text == ""
    assert panel._values["cost_usd"].styleSheet() == ""


def test_capacity_is_named_in_the_legend_not_over_a_bar(panel):
    panel.set_report(synthetic_report(p=4, fits=False))
    assert getattr(panel._capacity_line, "label", None) is None
    assert "capacity&nbsp;74.5&nbsp;GiB" in panel._memory_legend.text()  # 80e9 bytes
    panel.clear()
    assert "capacity" not in panel._memory_legend.text()


def test_the_plan_tab_figures_fit_at_1600_by_1000(window, qtbot, real_simulate):
    window.resize(1600, 1000)
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(EXAMPLES / "mtnlg_530b.json", as_template=True)
    for _ in range(5):  # run the pending layouts (no waiting on the clock); with warnings and
        # the does-not-fit flag: test_gui_cost_panel_fit.py
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        qtbot.wait(1)
    scroll = window.cost_panel._figures_scroll
    assert scroll.verticalScrollBar().maximum() == 0  # nothing cut off at the bottom
    assert scroll.height() >= window.cost_panel.figures_height()
    assert window.timeline.height() >= 350


def test_empty_explore_says_what_to_do(window, qtbot, real_simulate):
    explore = window.explore
    assert explore.plans_view.is_empty and "No sweep yet" in explore.plans_view.message_text
    assert explore.progress_bar.text() == "no sweep run yet"  # not "0 / 1 plans"
    assert not explore.fits_only.isEnabled() and not explore.gpu_filter_mode.isEnabled()
    window.open_path(EXAMPLES / "gpt3_1.3b_single_node.json", as_template=True)
    with qtbot.waitSignal(explore.sweep_finished, timeout=60_000):
        assert explore.run()
    assert not explore.plans_view.is_empty
    n = explore.result.num_plans
    assert explore.progress_bar.text() == f"{n:,} / {n:,} plans"  # thousands separated
    assert explore.fits_only.isEnabled()
    explore.gpu_filter_mode.setCurrentText("exactly")
    explore.gpu_filter.setValue(1)
    assert explore.gpu_filter.text() == "1 GPU"
    explore.gpu_filter.setValue(8)
    assert explore.gpu_filter.text() == "8 GPUs"
    window.new_session()
    assert explore.plans_view.is_empty and explore.progress_bar.text() == "no sweep run yet"


def test_the_editors_plan_never_hides_the_fastest_mark(window, qtbot, real_simulate):
    items = window.explore.plot.scatter_items()
    current, fastest = items["current"], items["fastest"]
    assert current.zValue() < fastest.zValue()  # the mark is drawn over the diamond...
    assert current.opts["size"] > fastest.opts["size"] + 6  # ...and shows inside it
    assert current.opts["brush"].style() == Qt.BrushStyle.NoBrush  # hollow


def test_empty_studies_say_what_to_do_and_axes_are_dark(window, qtbot, real_simulate):
    studies = window.studies
    for panel in (studies.optimal, studies.schedule):
        assert panel.results_view.is_empty
        assert "No study yet" in panel.results_view.message_text
    optimal = studies.optimal
    for side in ("left", "bottom"):
        assert optimal.plot.getAxis(side).textPen().color().name() == "#202020"
        assert studies.schedule.gantt.getAxis(side).textPen().color().name() == "#202020"
    window.open_path(EXAMPLES / "gpt3_1.3b_single_node.json", as_template=True)
    optimal.gpus.setValue(8)
    optimal.days.setValue(2.0)
    optimal.candidates.setValue(3)
    with qtbot.waitSignal(optimal.runner.finished, timeout=120_000):
        assert optimal.run() is not None
    qtbot.waitUntil(lambda: not optimal.results_view.is_empty, timeout=5_000)
    assert optimal.table.rowCount() == 3
    window.new_session()
    assert optimal.results_view.is_empty


def test_the_timeline_legend_explains_the_shading(window, qtbot, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.open_path(EXAMPLES / "gpt3_1.3b_single_node.json", as_template=True)
    legend = window.timeline._legend
    assert "paler&nbsp;=&nbsp;busy&nbsp;part&nbsp;of&nbsp;the&nbsp;time" in legend.text()
    assert "share of its time the lane is busy" in legend.toolTip()


def test_blend_of_the_legend_swatches():
    from PySide6 import QtGui

    from vtrain_gui.timeline.colors import blend
    white, red = QtGui.QColor("#FFFFFF"), QtGui.QColor("#FF0000")
    assert blend(red, white, 1.0) == "#FF0000" and blend(red, white, 0.0) == "#FFFFFF"
    assert blend(red, white, 0.2) == "#FFCCCC"
    assert np.isclose(int("CC", 16), 255 * 0.8, atol=0.5)


def test_an_empty_plan_tab_says_why(window, qtbot, tmp_path, real_simulate):
    """A first session that breaks a rule: no placeholder axes, the reason and what to do."""
    import json
    doc = json.loads((EXAMPLES / "gpt3_175b.json").read_text())
    doc["plan"]["tensor_parallel"] = 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert window.result is None
    assert window.open_path(bad)
    assert window.results_view.is_empty
    assert "Nothing simulated yet" in window.results_view.message_text
    assert not window.results_stale  # nothing to mark: nothing is shown
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.field_widget("plan.tensor_parallel").setValue(8)
    assert not window.results_view.is_empty
