"""MainWindow: open, edit, simulate in the background, save, reopen; errors; unsaved changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from PySide6 import QtGui, QtWidgets

from core.plan.session import Session
from core.io.session import load_any
from tests.conftest import EXAMPLES, ROOT
from vtrain_gui.session_files import MAX_RECENT_FILES

EXAMPLE = EXAMPLES / "gpt3_1.3b_single_node.json"


@pytest.fixture
def example(tmp_path):
    path = tmp_path / "example.json"
    shutil.copy(EXAMPLE, path)
    return path


def test_open_edit_simulate_save_reopen(window, qtbot, example, tmp_path, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(example)
    assert window.path == example
    assert window.windowTitle() == "vTrain — example.json[*]"
    assert not window.isWindowModified()
    first = window.result
    assert window.timeline.num_tasks == first.graph.num_tasks
    assert "Simulated in" in window.status_text and "tasks" in window.status_text

    # edit a field as a user would; the new simulation runs after the pause
    old_b = window.session().plan.global_batch_size
    with qtbot.waitSignal(window.result_shown, timeout=30_000) as blocker:
        window.editor.field_widget("plan.global_batch_size").setValue(old_b * 2)
    assert window.isWindowModified()
    result = blocker.args[0]
    assert result.session.plan.global_batch_size == old_b * 2
    assert result.report.num_microbatches == 2 * first.report.num_microbatches
    assert window.cost_panel.report is result.report

    out = tmp_path / "saved.json"
    assert window.save_to(out)
    assert not window.isWindowModified()
    assert window.windowTitle() == "vTrain — saved.json[*]"
    saved = load_any(out)
    assert saved.to_dict() == window.session().to_dict()

    window.new_session()
    assert window.path is None
    assert window.session().to_dict() == Session().to_dict()
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(out)
    assert window.session().to_dict() == saved.to_dict()
    assert str(out.resolve()) == window.recent_files()[0]
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_corrupt_file_leaves_the_session_untouched(window, qtbot, tmp_path, message_boxes,
                                                   example):
    window.open_path(example)
    before = window.session().to_dict()
    bad = tmp_path / "corrupt.json"
    bad.write_text("{ this is not json", encoding="utf-8")
    assert not window.open_path(bad)
    (kind, title, text), = message_boxes.of_kind("critical")
    assert "not a valid JSON" in text and "corrupt.json" in text
    assert window.session().to_dict() == before
    assert window.path == example
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": 1}), encoding="utf-8")
    assert not window.open_path(other)
    assert "neither a vTrain session" in message_boxes.of_kind("critical")[-1][2]
    assert window.session().to_dict() == before
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_invalid_edit_keeps_the_last_result(window, qtbot, example, real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(example)
    shown = window.result
    requests = window.runner.latest_request_id
    window.editor.field_widget("plan.tensor_parallel").setValue(5)
    assert "Invalid configuration" in window.status_text
    assert "tensor_parallel" in window.editor.error_text("plan.tensor_parallel") or \
        "divisible" in window.editor.error_text("plan.tensor_parallel")
    qtbot.wait(500)  # longer than the debounce pause
    assert window.runner.latest_request_id == requests
    assert window.result is shown
    assert window.timeline.num_tasks == shown.graph.num_tasks
    # the kept result is marked as not the editor's: banner, veiled timeline and figures
    assert window.results_stale and window.cost_panel.is_stale
    assert "last valid configuration" in window.stale_text
    assert window._timeline_veil.isVisible()
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.editor.field_widget("plan.tensor_parallel").setValue(1)
    assert not window.results_stale and not window.cost_panel.is_stale
    assert not window._timeline_veil.isVisible()


def test_simulation_failure_is_shown_and_keeps_the_result(window, qtbot, monkeypatch, example,
                                                          real_simulate):
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        window.open_path(example)
    shown = window.result

    def broken(session):
        raise RuntimeError("profile store is missing")

    monkeypatch.setattr("core.sim.simulate.simulate", broken)
    with qtbot.waitSignal(window.simulation_failed, timeout=10_000):
        window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(3.0)
    assert "profile store is missing" in window.status_text
    assert window.result is shown
    assert window.results_stale and "failed" in window.stale_text


def test_unsaved_changes_are_asked_about_on_close(window, qtbot, message_boxes, tmp_path):
    window.editor.field_widget("plan.data_parallel").setValue(2)
    assert window.isWindowModified()
    message_boxes.answer = QtWidgets.QMessageBox.StandardButton.Cancel
    assert not window.close()
    assert window.isVisible()
    assert message_boxes.of_kind("warning")
    message_boxes.answer = QtWidgets.QMessageBox.StandardButton.Discard
    assert window.close()
    assert not window.isVisible()
    assert not window.runner.is_thread_running()


def test_new_with_unsaved_changes_can_be_cancelled(window, message_boxes):
    window.editor.field_widget("plan.data_parallel").setValue(2)
    message_boxes.answer = QtWidgets.QMessageBox.StandardButton.Cancel
    window.action_new.trigger()
    assert window.session().plan.data_parallel == 2
    message_boxes.answer = QtWidgets.QMessageBox.StandardButton.Discard
    window.action_new.trigger()
    assert window.session().plan.data_parallel == Session().plan.data_parallel
    assert not window.isWindowModified()


def test_recent_files_keep_the_newest_eight(window, tmp_path):
    for i in range(MAX_RECENT_FILES + 2):
        assert window.save_to(tmp_path / f"s{i}.json")
    recent = window.recent_files()
    assert len(recent) == MAX_RECENT_FILES
    assert recent[0].endswith(f"s{MAX_RECENT_FILES + 1}.json")
    window.recent_menu.aboutToShow.emit()
    names = [a.text() for a in window.recent_menu.actions() if a.text()]
    assert names[0] == f"&1 s{MAX_RECENT_FILES + 1}.json"


def test_preset_menu_changes_the_model(window):
    presets = [a for a in window.findChildren(QtGui.QAction) if a.data() == "GPT-3 13B"]
    presets[0].trigger()
    assert window.session().model.name == "GPT-3 13B"
    assert window.isWindowModified()


def test_screenshot_command(tmp_path, real_simulate):
    out = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui", str(EXAMPLE),
                           "--screenshot", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (1600, 1000)


@pytest.mark.parametrize("content", [None, "{not json"])
def test_screenshot_of_a_file_that_cannot_open_exits_2(tmp_path, content):
    # no dialog may wait for a click: the error goes to stderr and the process exits
    path = tmp_path / "session.json"
    if content is not None:
        path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui", str(path),
                           "--screenshot", str(tmp_path / "shot.png")], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 2
    assert str(path) in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "shot.png").exists()


def test_file_export_megatron_arguments(window, tmp_path, monkeypatch, message_boxes, example):
    """File > Export > Megatron-LM arguments writes the launch that imports back to the plan."""
    from core.io.megatron.to_session import import_file
    window.open_path(example)
    out = tmp_path / "launch.sh"
    monkeypatch.setattr(QtWidgets.QFileDialog, "getSaveFileName",
                        staticmethod(lambda *a, **k: (str(out), "")))
    window.action_export_megatron.trigger()
    assert out.read_text().startswith("#!/usr/bin/env bash\n# ") and "torchrun --nnodes 1 --nproc-per-node 8" in out.read_text()
    back = import_file(out).session
    assert back.plan == window.session().plan and back.model.num_layers == window.session().model.num_layers
    # a plan Megatron cannot run is refused with the reason, and nothing is written
    window.editor.set_field("plan.schedule", "gpipe")
    out.unlink()
    window.action_export_megatron.trigger()
    (kind, title, text), = message_boxes.of_kind("warning")
    assert "gpipe" in text and not out.exists()


def test_gui_tab_option_opens_on_that_tab(tmp_path):
    """``vtrain gui S.json --tab studies --screenshot OUT.png`` pictures the Studies tab; a tab
    that does not exist is argparse's exit 2."""
    import os
    import subprocess
    import sys

    from tests.conftest import EXAMPLES, ROOT
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    out = tmp_path / "studies.png"
    args = [sys.executable, "-m", "core.cli", "gui", str(EXAMPLES / "gpt3_1.3b_single_node.json")]
    proc = subprocess.run([*args, "--tab", "studies", "--screenshot", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    plan = tmp_path / "plan.png"
    proc = subprocess.run([*args, "--screenshot", str(plan)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 10_000 and out.read_bytes() != plan.read_bytes()
    bad = subprocess.run([*args, "--tab", "nowhere"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert bad.returncode == 2 and "invalid choice: 'nowhere'" in bad.stderr


def test_a_modern_plan_fits_a_1280_pixel_screen(window, qtbot, real_simulate):
    """A Llama 3 plan in FP8 with context parallelism and the overlaps on H100s: its figures
    (MFU with the causal count, the exposed context-parallel exchange, the wait for overlapped
    communication) and the memory chart's one-line title made the window at least 1,323 px
    wide, past a 1,280 x 800 screen. The chart's title and legend wrap instead."""
    import dataclasses

    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS

    session = Session(model=MODEL_PRESETS["Llama 3 8B"], plan=ParallelPlan(
        tensor_parallel=2, pipeline_parallel=2, data_parallel=2, context_parallel=2,
        micro_batch_size=1, global_batch_size=16, schedule="interleaved",
        virtual_pipeline_stages=2, sequence_parallel=True, zero_stage=1,
        overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True,
        precision="fp8", fp8_recipe="tensorwise"))
    session.cluster = dataclasses.replace(session.cluster, gpu="H100-SXM5-80GB")
    window.resize(1280, 800)
    with qtbot.waitSignal(window.result_shown, timeout=60_000) as blocker:
        window.open_session(session)
        window.simulate_now()
    report = blocker.args[0].report
    assert report.memory_capacity_bytes > 0
    assert "causal" in window.cost_panel.value_text("mfu")
    qtbot.wait(100)  # the figures' width follows their new values
    assert window.minimumSizeHint().width() <= 1280
    qtbot.waitUntil(lambda: window.width() <= 1280)
    # tight in memory (a 90 % margin): the verdict's words, not the field's long name
    session.cluster = dataclasses.replace(session.cluster, memory_reserve_fraction=0.9)
    with qtbot.waitSignal(window.result_shown, timeout=60_000) as blocker:
        window.open_session(session)
        window.simulate_now()
    assert blocker.args[0].report.memory_verdict == "tight"
    qtbot.wait(100)
    assert window.minimumSizeHint().width() <= 1280


def test_the_profiles_tab_selects_the_sessions_store(window):
    """The Profiles tab opened on the first store listed (the A100's) for a GB200 session: shown,
    it selects the session's store; one the user picks then stays until the store changes."""
    import dataclasses

    session = window.session()
    session.cluster = dataclasses.replace(session.cluster, gpu="GB200-NVL72", gpus_per_node=72)
    window.open_session(session)
    window.tabs.setCurrentIndex(window.profiles_tab_index)
    assert window.profiles.selected_info().path.name == "GB200-NVL72.h5"
    window.profiles.table.selectRow(0)
    picked = window.profiles.selected_info().path
    window.tabs.setCurrentIndex(window.plan_tab_index)
    window.tabs.setCurrentIndex(window.profiles_tab_index)
    assert window.profiles.selected_info().path == picked
