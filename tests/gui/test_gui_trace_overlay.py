"""File > Overlay measured trace…: measured lanes under the simulated ones, the per-class table.

Uses the shipped CPU traces of a two-stage pipeline (tests/data/traces/, made by
scripts/make_test_traces.py) over the GPT-3 1.3B example at t=1 p=2 d=1.
"""

from __future__ import annotations

import numpy as np
import pytest
from PySide6 import QtGui, QtWidgets

from core.accuracy.trace_compare import compare, measured_lanes
from core.cli.common import apply_sets
from core.io.kineto import choose_step, read_traces
from core.io.kineto_classes import measure_step
from core.io.session import load_any, save_session
from tests.conftest import EXAMPLES, ROOT
from vtrain_gui.timeline.measured import CLASS_COLORS, LANE_COLOR, phase_of

TRACES = ROOT / "tests" / "data" / "traces"
P2 = [str(TRACES / "cpu_p2_rank0.json.gz"), str(TRACES / "cpu_p2_rank1.json.gz")]
P2_SETS = ["plan.tensor_parallel=1", "plan.data_parallel=1", "plan.global_batch_size=8"]


@pytest.fixture
def overlaid(window, qtbot, tmp_path, real_simulate):
    """The window on the two-stage session with the two ranks' traces overlaid."""
    path = tmp_path / "p2.json"
    save_session(apply_sets(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"), P2_SETS), path)
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(path)
    with qtbot.waitSignal(window.trace_overlay.settled, timeout=30_000):
        window.trace_overlay.load(P2)
    return window


def _core(window):
    trace = read_traces(P2)
    m = measure_step(trace, choose_step(trace))
    return (measured_lanes(trace, m, window.result.session.plan), compare(m, window.result))


def test_measured_lanes_are_core_lanes_under_the_simulated_rows(overlaid):
    w = overlaid
    lanes, _ = _core(w)
    item = w.timeline.measured
    assert item.num_rows == len(lanes.lane_names) == 2
    assert list(item.lanes.lane_stage) == [0, 1]  # matched by stage, stage 0 on top
    sim_rows = w.timeline.gantt.num_rows
    assert item.first_row == sim_rows + 1  # one empty row between
    np.testing.assert_array_equal(item.lanes.start_s, lanes.start_s)
    np.testing.assert_array_equal(item.lanes.duration_s, lanes.duration_s)
    # every event is found where it is drawn (the innermost at its middle)
    for i in range(0, lanes.lane.size, 7):
        x = lanes.start_s[i] + lanes.duration_s[i] / 2
        y = item.first_row + lanes.lane[i] + 0.5
        j = item.event_at(x, y)
        assert j >= 0 and lanes.lane[j] == lanes.lane[i]
        assert lanes.start_s[j] <= x <= lanes.start_s[j] + lanes.duration_s[j]
    assert item.event_at(lanes.start_s.min() + 1e-9, sim_rows + 0.5) == -1  # the gap row


def test_table_is_cores_comparison_largest_departures_first(overlaid):
    w = overlaid
    _, comparison = _core(w)
    panel = w.trace_overlay.panel
    assert panel.isVisibleTo(w)
    shown = [r for r in comparison.rows if r.measured_s or r.predicted_s]
    assert panel.table.rowCount() == len(shown)
    for i, row in enumerate(shown):
        assert panel.cell(i, "stage") == str(row.stage)
        assert panel.cell(i, "class") == row.title
    deps = [abs(r.departure_s) for r in shown if r.departure_s is not None]
    assert deps == sorted(deps, reverse=True)


def test_hover_matches_stage_phase_and_micro_batch(overlaid):
    w = overlaid
    item = w.timeline.measured
    L = item.lanes
    i = next(k for k, r in enumerate(L.ranges) if phase_of(r) == ("forward", 1)
             and L.lane_stage[L.lane[k]] == 1)
    g, s = w.result.graph, w.result.schedule
    from core.sim.graph_types import KINDS
    sel = (g.stage == 1) & (g.microbatch == 1) & (g.kind == KINDS.index("forward"))
    text = w.timeline.measured_text(i)
    assert "simulated stage 1 forward micro-batch 1" in text
    w.timeline._set_measured_hover(i, None)
    # the matched simulated work is outlined on the stage's compute row
    x, y, width, _ = np.asarray(w.timeline.gantt._highlight).reshape(-1, 4)[0]
    assert x == pytest.approx(float(s.start_s[sel].min()))
    assert x + width == pytest.approx(float(s.end_s[sel].max()))
    assert int(y) == 1 * len(g.lanes)
    w.timeline._set_measured_hover(-1, None)


def test_measured_lanes_are_drawn_in_class_colours(overlaid, tmp_path):
    w = overlaid
    w.timeline.resize(1200, 500)
    image = w.timeline.plot.grab().toImage().convertToFormat(QtGui.QImage.Format.Format_RGB32)
    arr = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.width(), 4)
    rgb = arr[..., 2].astype(int) << 16 | arr[..., 1].astype(int) << 8 | arr[..., 0]
    send_recv = int(CLASS_COLORS["send_recv"][1:], 16)
    rows, _ = np.nonzero(rgb == send_recv)
    assert rows.size > 0  # the measured send/recv (most of the toy pipeline's time)
    # ... and it is drawn in the lower part, under the simulated rows (whose pipeline sends,
    # thin bars, share the colour: the kind that runs them)
    assert (rows > image.height() * 0.5).mean() > 0.9


def test_unreadable_trace_is_refused_in_a_dialog(window, qtbot, tmp_path, real_simulate):
    bad = tmp_path / "bad_rank0.json"
    bad.write_text("{not json")
    with qtbot.waitSignal(window.trace_overlay.settled, timeout=30_000):
        window.trace_overlay.load([str(bad)])
    overlay = window.trace_overlay
    assert overlay.last_error and str(bad) in overlay.last_error
    assert "Traceback" not in overlay.last_error
    assert not overlay.panel.isVisibleTo(window) and window.timeline.measured.num_rows == 0
    box = overlay.dialog
    assert isinstance(box, QtWidgets.QMessageBox) and str(bad) in box.text()
    box.close()


def test_gui_trace_option_pictures_the_overlay(tmp_path):
    """``vtrain gui S.json --trace ... --screenshot OUT.png`` waits for the measured lanes."""
    import os
    import subprocess
    import sys
    path = tmp_path / "p2.json"
    save_session(apply_sets(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"), P2_SETS), path)
    out = tmp_path / "overlay.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui", str(path), "--trace", *P2,
                           "--screenshot", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr
    image = QtGui.QImage(str(out)).convertToFormat(QtGui.QImage.Format.Format_RGB32)
    arr = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.width(), 4)
    rgb = arr[..., 2].astype(int) << 16 | arr[..., 1].astype(int) << 8 | arr[..., 0]
    lane = rgb == int(LANE_COLOR[1:], 16)  # the measured lanes' background: theirs alone
    assert lane.sum() > 50
    rows = np.flatnonzero(lane.any(axis=1))
    yellow = rgb[rows.min():rows.max() + 1] == int(CLASS_COLORS["send_recv"][1:], 16)
    assert yellow.sum() > 20  # the measured send/recv on them


def test_traces_of_another_plan_size_drop_the_old_lanes_and_settle(overlaid, qtbot, tmp_path):
    """After the overlay, a plan of another GPU count: core refuses the traces (their job had
    2 ranks); the window says so, shows no lanes or table of the older plan, and is not busy."""
    window = overlaid
    assert window.timeline.measured.num_rows > 0
    path = tmp_path / "p4.json"
    save_session(apply_sets(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"),
                            ["plan.tensor_parallel=2", "plan.data_parallel=1",
                             "plan.global_batch_size=8"]), path)
    with qtbot.waitSignal(window.trace_overlay.settled, timeout=30_000):
        assert window.open_path(path)
    overlay = window.trace_overlay
    assert "job of 2 ranks" in overlay.last_error and "4 GPUs" in overlay.last_error
    assert not overlay.busy and overlay.lanes is None
    assert window.timeline.measured.num_rows == 0 and not overlay.panel.isVisibleTo(window)
    overlay.dialog.close()


def test_gui_trace_option_refusal_exits_2_with_one_line(tmp_path):
    """``--trace`` with traces that do not fit the plan: exit 2, one line naming the rule (it
    used to wait for the layout until the screenshot's time-out)."""
    import os
    import subprocess
    import sys
    out = tmp_path / "overlay.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui",
                           str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--trace", *P2,
                           "--screenshot", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("vtrain")]  # not Qt's notes
    assert len(lines) == 1 and lines[0].startswith("vtrain gui: --trace: plan.num_gpus:")
    assert "Traceback" not in proc.stderr


def test_the_overlay_names_vtrains_own_trace(tmp_path):
    """``vtrain gui S.json --trace t.json`` with the trace ``--trace-out`` wrote: the job ends
    with core's message naming it (never "no ProfilerStep#N range")."""
    from core.cli import main
    from vtrain_gui.background import JobFailed
    from vtrain_gui.trace_overlay import read_job
    path = tmp_path / "sim.json"
    assert main(["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"),
                 "--trace-out", str(path)]) == 0
    with pytest.raises(JobFailed) as exc:
        read_job([str(path)])(None, None)
    assert str(exc.value).startswith(f"{path}: this is vtrain's simulated trace (written by "
                                     "--trace-out), not a PyTorch profiler trace of a run: ")
