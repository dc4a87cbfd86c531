"""The window where a planner works: the plan above the fold, the Explore table's key columns on
screen, a running sweep said so, a shipped example not overwritten by Save."""

from __future__ import annotations

import threading

import pytest
from PySide6 import QtWidgets

from core.io.session import load_any
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES
from vtrain_gui.explore import ExploreTab
from vtrain_gui.session_files import examples_dir, is_shipped_example
from vtrain_gui.sweep_table import COLUMN_INDEX

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
SPACE = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4), schedules=("1f1b", "gpipe"))


def _wait_layout(qtbot, window, width, height):
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.width() == width, timeout=5000)
    QtWidgets.QApplication.processEvents()


def test_the_plan_is_above_the_fold_at_1920_by_1080(window, qtbot):
    _wait_layout(qtbot, window, 1920, 1080)
    window.show_tab("plan")
    QtWidgets.QApplication.processEvents()
    widget = window.editor.field_widget("plan.tensor_parallel")
    viewport = widget.parentWidget()
    while not isinstance(viewport.parentWidget(), QtWidgets.QScrollArea):
        viewport = viewport.parentWidget()
    scroll = viewport.parentWidget()
    assert scroll.verticalScrollBar().value() == 0
    top = widget.mapTo(viewport, widget.rect().topLeft()).y()
    assert 0 <= top and top + widget.height() <= viewport.height(), (top, viewport.height())
    # the model's fields follow the plan and the cluster
    model = window.editor.field_widget("model.num_layers")
    assert model.mapTo(viewport, model.rect().topLeft()).y() > top


def test_memory_fits_and_front_stay_on_screen_at_1600_px(window, qtbot, real_simulate):
    session = load_any(SMALL)
    result = run_sweep(session, SPACE, deadline_days=5.0, prune=False)
    _wait_layout(qtbot, window, 1600, 1000)
    window.show_tab("explore")
    window.explore.set_result(result)
    QtWidgets.QApplication.processEvents()
    table = window.explore.table
    header = table.horizontalHeader()
    width = table.viewport().width()
    for attr in ("max_memory_per_gpu_bytes", "memory_verdict", "front", "training_days",
                 "cost_usd"):
        col = COLUMN_INDEX[attr]
        assert not table.isColumnHidden(col)
        right = header.sectionViewportPosition(col) + header.sectionSize(col)
        assert 0 <= header.sectionViewportPosition(col) and right <= width, (attr, right, width)
    # the near-empty v column is narrow; reason is the last column
    assert header.sectionSize(COLUMN_INDEX["virtual_pipeline_stages"]) < 60
    assert header.visualIndex(COLUMN_INDEX["reason"]) == header.count() - 1


def test_the_header_says_a_sweep_is_running(qtbot):
    release = threading.Event()

    def slow(session, space, deadline_days, progress, cancel, **options):
        progress(0, 1)
        release.wait(30)
        return run_sweep(session, space, deadline_days=deadline_days)

    tab = ExploreTab(slow)
    qtbot.addWidget(tab)
    try:
        session = load_any(SMALL)
        session.sweep = {"space": SweepSpace(max_gpus=8, micro_batch_sizes=(1,),
                                             schedules=("1f1b",)).to_dict(),
                         "deadline_days": None}
        tab.reset(session)
        assert "No sweep yet" in tab.summary_text
        assert tab.run()
        qtbot.waitUntil(lambda: tab.runner.busy and "running" in tab.summary_text, timeout=5000)
        assert "No sweep yet" not in tab.summary_text
        with qtbot.waitSignal(tab.sweep_finished, timeout=60_000):
            release.set()
        assert "running" not in tab.summary_text
        assert "plans shown" in tab.summary_text
    finally:
        release.set()
        assert tab.runner.shutdown()


def test_a_shipped_example_opens_as_an_untitled_copy(window, qtbot, monkeypatch, tmp_path):
    example = examples_dir() / SMALL.name
    assert is_shipped_example(example) and is_shipped_example(tmp_path / ".." / example)
    assert not is_shipped_example(tmp_path / SMALL.name)
    before = example.read_bytes()
    mtime = example.stat().st_mtime_ns
    assert window.open_path(example)
    assert window.path is None
    assert window.windowTitle() == f"vTrain — copy of {example.name}[*]"
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(9.75)
    assert window.isWindowModified()

    asked = []
    out = tmp_path / "mine.json"

    def fake_dialog(parent, caption, start, filters, *args, **kwargs):
        asked.append(start)
        return str(out), filters

    monkeypatch.setattr(QtWidgets.QFileDialog, "getSaveFileName", fake_dialog)
    window.action_save.trigger()  # Ctrl+S
    assert asked and asked[0].endswith(example.name)  # Save acted as Save As
    assert example.read_bytes() == before and example.stat().st_mtime_ns == mtime
    assert out.exists() and window.path == out
    assert load_any(out).cost.price_per_gpu_hour_usd == pytest.approx(9.75)
    assert window.windowTitle() == "vTrain — mine.json[*]"
