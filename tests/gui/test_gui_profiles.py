"""Profiles tab: the stores and their provenance, profiling this machine in the background
(progress, cancel, no thread left behind), "Use for this session", no torch.

The profiler is replaced by a fast fake that reports progress, checks the cancel
event between steps and writes a small measured store through
:class:`core.store.profile_store.ProfileStore`, so these tests need no torch.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from core import profiling
from core.plan.cluster import GPU_KINDS
from core.store.profile_store import ProfileStore
from core.profiling import ProfileProgress, ProfileRunResult
from vtrain_gui.profiles_view import COLUMNS, ProfilesTab, format_provenance
from vtrain_gui.workers import ProfileRunner

_METHOD = COLUMNS.index("Method")


@pytest.fixture(autouse=True)
def profiles_dir(monkeypatch, tmp_path) -> Path:
    """The user's stores go to a private folder (never the home directory)."""
    folder = tmp_path / "profiles"
    monkeypatch.setenv("VTRAIN_PROFILES_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def torch_here(monkeypatch):
    """Pretend torch is installed (no import of the real one on the worker thread)."""
    monkeypatch.setattr(profiling, "torch_status", lambda: (True, "torch 9.9.9 (fake), 0 CUDA device(s)"))


def _small_store(num_groups: int) -> ProfileStore:
    store = ProfileStore("cpu-test", {"fp32": 1e11}, 8e9, 1e10,
                         {"method": "measured", "date": "2030-01-02T03:04:05Z", "source": "fake",
                          "torch_version": "9.9.9", "threads": 2,
                          "shapes": '[{"s": 16, "h": 32, "a": 2, "t": [1]}]',
                          "timing": {"clock": "wall", "statistic": "median"}})
    if num_groups:
        b = np.array([1, 2, 4] * num_groups)
        keys = {"b": b, "s": np.full(len(b), 16), "h": np.full(len(b), 32), "a": np.full(len(b), 2),
                "t": np.repeat(np.arange(1, num_groups + 1), 3), "dtype": ["fp32"] * len(b)}
        store.add_op_table("attention_fwd", keys, 1e-4 * b, axis="b")
    return store


class FakeProfiler:
    """Stands in for ``core.profiling.run_profile``: ``num_groups`` steps of ``step_s`` seconds;
    with ``gate``, each step after the first waits for it (or for cancel)."""

    def __init__(self, num_groups: int = 3, step_s: float = 0.01, gate: threading.Event | None = None):
        self.num_groups = num_groups
        self.step_s = step_s
        self.gate = gate
        self.calls: list[dict] = []
        self.threads: list[threading.Thread] = []
        self.first_step_done = threading.Event()

    def __call__(self, out, device="cpu", shapes=None, *, threads=None, progress=None, cancel=None,
                 **_):
        self.calls.append({"out": Path(out), "device": device, "shapes": shapes, "threads": threads})
        self.threads.append(threading.current_thread())
        done = 0
        _small_store(0).save(out)  # the device probe is saved first, as the real profiler does
        for g in range(self.num_groups):
            if cancel is not None and cancel.is_set():
                break
            if g and self.gate is not None:
                while not self.gate.wait(0.01):
                    if cancel is not None and cancel.is_set():
                        break
                if cancel is not None and cancel.is_set():
                    break
            threading.Event().wait(self.step_s)
            done = g + 1
            _small_store(done).save(out)
            if progress is not None:
                progress(ProfileProgress(done, self.num_groups, f"group {done} (fake)", done))
            self.first_step_done.set()
        cancelled = bool(cancel is not None and cancel.is_set())
        return ProfileRunResult(Path(out), ProfileStore.open(out), done, self.num_groups,
                                cancelled, 0.01)


@pytest.fixture
def tab(qtbot):
    w = ProfilesTab()
    qtbot.addWidget(w)
    yield w
    w.shutdown()


def _row_of(tab: ProfilesTab, device: str) -> int:
    return next(i for i, info in enumerate(tab.stores()) if info.device_name == device)


# --------------------------------------------------------------------------- the list

def test_lists_the_shipped_stores_with_their_method(tab, profiles_dir):
    stores = {info.device_name: info for info in tab.stores()}
    assert stores["A100-SXM4-80GB"].method == "calibrated" and stores["A100-SXM4-80GB"].shipped
    assert stores["H100-SXM5-80GB"].method == "calibrated" and stores["H100-SXM5-80GB"].shipped
    for device, method in (("A100-SXM4-80GB", "calibrated"), ("H100-SXM5-80GB", "calibrated")):
        assert tab.table.item(_row_of(tab, device), _METHOD).text() == method
    # the shipped stores, one per GPU kind (the user folder does not exist yet)
    assert tab.table.rowCount() == len(tab.stores()) == len(GPU_KINDS)
    assert str(profiles_dir) in tab.folder_label.text()


def test_a_store_not_measured_with_torch_says_so_instead_of_blank_cells(tab):
    """A calibrated store has no torch version and no CPU thread count: its cells are a dash
    that says why on hover, not blank."""
    from vtrain_gui.profiles_view import COLUMNS
    row = _row_of(tab, "H100-SXM5-80GB")
    for name in ("Torch", "Threads"):
        item = tab.table.item(row, COLUMNS.index(name))
        assert item.text() == "—" and item.toolTip()
    for col in range(len(COLUMNS)):  # no cell of a readable store is blank
        assert tab.table.item(row, col).text().strip()


def test_an_unreadable_store_is_listed_with_its_error(tab, profiles_dir):
    profiles_dir.mkdir()
    (profiles_dir / "broken.h5").write_bytes(b"not an HDF5 file")
    tab.refresh()
    broken = [info for info in tab.stores() if info.path.name == "broken.h5"]
    assert len(broken) == 1 and broken[0].error
    row = tab.stores().index(broken[0])
    assert tab.table.item(row, _METHOD).text() == "error"
    assert tab.select_path(broken[0].path)
    assert "Cannot read this store" in tab.details_text()
    assert not tab.use_button.isEnabled()


def test_selecting_a_store_shows_its_provenance(tab):
    tab.table.selectRow(_row_of(tab, "H100-SXM5-80GB"))
    text = tab.details_text()
    assert "H100-SXM5-80GB.h5" in text and "(shipped with vTrain)" in text
    assert "method: analytic" in text and "NVIDIA H100 Tensor Core GPU data sheet" in text
    assert "attention_fwd: 840 rows" in text and "all_reduce: group sizes" in text
    assert tab.use_button.isEnabled()

    tab.table.selectRow(_row_of(tab, "A100-SXM4-80GB"))
    text = tab.details_text()
    assert "method: calibrated" in text
    # nested provenance is indented under its key, not a one-line repr
    assert "\n  parameters:\n    gemm_efficiency_max: " in text


def test_format_provenance_expands_nested_and_json_values():
    text = format_provenance({"method": "measured", "timing": {"clock": "wall", "reps": [3, 20]},
                              "shapes": '[{"s": 16, "t": [1, 2]}]', "threads": 2})
    assert text.splitlines() == ["method: measured", "timing:", "  clock: wall", "  reps: [3, 20]",
                                 "shapes:", "  -", "    s: 16", "    t: [1, 2]", "threads: 2"]


# --------------------------------------------------------------------------- profiling

def test_profile_runs_in_the_background_then_the_new_store_is_selected(
        window, qtbot, monkeypatch, profiles_dir):
    fake = FakeProfiler(num_groups=3)
    monkeypatch.setattr(profiling, "run_profile", fake)
    window.show_tab("profiles")
    tab = window.profiles
    qtbot.waitUntil(lambda: tab.torch_available is True, timeout=5000)
    assert "Ready to profile with torch 9.9.9" in tab.torch_label.text()
    assert tab.profile_button.isEnabled() and not tab.cancel_button.isEnabled()
    seen: list[tuple[int, int]] = []
    tab.runner.progress.connect(lambda run_id, report: seen.append((report.done, report.total)))

    with qtbot.waitSignal(tab.profile_finished, timeout=10_000) as blocker:
        tab.threads_spin.setValue(1)
        tab.profile_button.click()
        assert not tab.profile_button.isEnabled()
    result = blocker.args[0]
    assert not result.cancelled and result.groups_done == 3

    call = fake.calls[0]
    assert call["device"] == "cpu" and call["threads"] == 1 and call["shapes"] is None
    assert call["out"].parent == profiles_dir and call["out"].name.startswith("local-cpu-")
    assert fake.threads[0] is not threading.main_thread()
    assert seen[-1] == (3, 3)
    assert tab.progress_bar.value() == tab.progress_bar.maximum()
    assert "Profiled 3 of 3 shape groups" in tab.status_text

    selected = tab.selected_info()
    assert selected is not None and selected.path == call["out"] and not selected.shipped
    assert selected.method == "measured" and selected.num_op_rows == {"attention_fwd": 9}
    assert tab.table.item(tab.stores().index(selected), _METHOD).text() == "measured"
    assert "torch_version: 9.9.9" in tab.details_text()
    assert tab.profile_button.isEnabled() and not tab.cancel_button.isEnabled()

    window.close()
    assert not tab.runner.is_thread_running()


def test_profile_of_the_session_shapes(window, qtbot, monkeypatch):
    fake = FakeProfiler(num_groups=1)
    monkeypatch.setattr(profiling, "run_profile", fake)
    tab = window.profiles
    tab.shapes_combo.setCurrentIndex(tab.shapes_combo.findData("session"))
    with qtbot.waitSignal(tab.profile_finished, timeout=10_000):
        assert tab.start_profile()
    (group,) = fake.calls[0]["shapes"]
    session = window.session()
    assert (group.h, group.s, group.t) == (session.model.hidden_size, session.model.seq_length,
                                           session.plan.tensor_parallel)


def test_cancel_keeps_the_finished_groups(tab, qtbot, monkeypatch):
    gate = threading.Event()  # never set: the run waits after its first group until cancelled
    fake = FakeProfiler(num_groups=4, gate=gate)
    monkeypatch.setattr(profiling, "run_profile", fake)
    assert tab.start_profile()
    assert not tab.start_profile()  # one run at a time
    qtbot.waitUntil(lambda: tab.progress_bar.value() == 1, timeout=5000)
    assert tab.cancel_button.isEnabled()
    with qtbot.waitSignal(tab.profile_cancelled, timeout=5000) as blocker:
        tab.cancel_button.click()
        assert not tab.cancel_button.isEnabled()
    result = blocker.args[0]
    assert result.cancelled and result.groups_done == 1
    assert "Cancelled: 1 of 4 shape groups kept" in tab.status_text
    selected = tab.selected_info()
    assert selected is not None and selected.path == result.path
    assert selected.num_op_rows == {"attention_fwd": 3}
    assert tab.profile_button.isEnabled() and not tab.runner.busy


def test_a_failed_profile_is_reported(tab, qtbot, monkeypatch):
    def broken(*args, **kwargs):
        raise profiling.ProfilingUnavailable("torch is not installed; pip install torch==2.13.0")

    monkeypatch.setattr(profiling, "run_profile", broken)
    with qtbot.waitSignal(tab.profile_failed, timeout=5000) as blocker:
        assert tab.start_profile()
    assert "torch is not installed" in blocker.args[0]
    assert "Profiling failed" in tab.status_text and tab.profile_button.isEnabled()


def test_closing_the_window_stops_a_running_profile(window, qtbot, monkeypatch):
    fake = FakeProfiler(num_groups=4, gate=threading.Event())
    monkeypatch.setattr(profiling, "run_profile", fake)
    tab = window.profiles
    assert tab.start_profile()
    assert fake.first_step_done.wait(5)
    assert tab.runner.is_thread_running()
    window.setWindowModified(False)
    window.close()
    assert not tab.runner.is_thread_running()
    assert fake.calls and ProfileStore.open(fake.calls[0]["out"]).op_names() == ["attention_fwd"]


def test_without_torch_the_button_is_off_and_says_how_to_install(qtbot, monkeypatch):
    hint = "torch is not installed; " + profiling.INSTALL_HINT
    monkeypatch.setattr(profiling, "torch_status", lambda: (False, hint))
    tab = ProfilesTab()
    qtbot.addWidget(tab)
    try:
        with qtbot.waitSignal(tab.torch_checked, timeout=5000):
            tab.show()
        assert tab.torch_available is False
        assert not tab.profile_button.isEnabled()
        assert "pip install torch" in tab.torch_label.text()
        assert not tab.start_profile()
    finally:
        tab.close()
        tab.shutdown()


def test_runner_shutdown_is_idempotent_and_refuses_new_work(qtbot):
    runner = ProfileRunner(profile_fn=lambda *a: None, status_fn=lambda: (True, "x"))
    assert runner.shutdown() and runner.shutdown()
    with pytest.raises(RuntimeError):
        runner.start("x.h5")


# --------------------------------------------------------------------------- using a store

def test_use_for_this_session_sets_the_profile_path_and_resimulates(window, qtbot):
    tab = window.profiles
    window.show_tab("profiles")
    assert window.current_tab() == "profiles"
    h100 = tab.stores()[_row_of(tab, "H100-SXM5-80GB")]
    tab.table.selectRow(_row_of(tab, "H100-SXM5-80GB"))
    requests_before = window.runner.latest_request_id
    tab.use_button.click()
    assert window.session().cluster.profile_path == str(h100.path)
    assert window.editor.field_widget("cluster.profile_path").text() == str(h100.path)
    assert window.isWindowModified()
    # the edit schedules a new simulation after the usual pause
    qtbot.waitUntil(lambda: window.runner.latest_request_id > requests_before, timeout=5000)


def test_provenance_text_nested_too_deeply_is_shown_as_text():
    """A store's provenance note of 100,000 "[" raised RecursionError in the Profiles tab; JSON
    text is read under the session files' bounds, and what they refuse is shown as written."""
    from vtrain_gui.profiles_view import format_provenance
    deep = "[" * 100_000 + "]" * 100_000
    assert format_provenance({"note": deep}) == f"note: {deep}"
    assert format_provenance({"note": "[" * 65 + "]" * 65}) == "note: " + "[" * 65 + "]" * 65
    assert format_provenance({"fit": '{"a": [1, 2]}'}) == "fit:\n  a: [1, 2]"


def test_every_shipped_store_is_in_view_on_a_laptop(tab, qtbot):
    """In a 1,280 x 800 window the table showed five of the eleven shipped stores (a third of
    the height, two thirds for the provenance text): every row is in view."""
    tab.resize(1280, 720)  # the tab in a 1,280 x 800 window
    tab.show()
    qtbot.waitExposed(tab)
    rows = sum(tab.table.rowHeight(r) for r in range(tab.table.rowCount()))
    assert tab.table.rowCount() >= 11 and tab.table.viewport().height() >= rows
