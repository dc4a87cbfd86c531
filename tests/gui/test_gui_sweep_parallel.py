"""Explore tab: where the sweep runs (workers, Dask scheduler) is a setting, saved when set."""

from __future__ import annotations

import os
import threading

from core.io.session import load_any
from core.studies.sweep import SweepSpace
from tests.conftest import EXAMPLES
from vtrain_gui.explore import ExploreTab
from vtrain_gui.sweep_settings import SweepSettingsPanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
SPACE = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2), schedules=("1f1b",)).to_dict()


def _session(sweep):
    s = load_any(SMALL)
    s.sweep = sweep
    return s


def test_old_settings_load_with_the_defaults_and_stay_as_they_were(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    old = {"space": SPACE, "deadline_days": 5.0}  # a file from before the setting
    panel.reset(_session(old))
    assert panel.errors() == [] and panel.error_label.isHidden()
    assert panel.execution() == {"workers": os.cpu_count() or 1, "dask": None}
    assert panel.settings() == old
    panel.deadline.setValue(6.0)  # an edit: still no workers/dask keys (defaults)
    edited = panel.settings()
    assert set(edited) == {"space", "deadline_days"} and edited["deadline_days"] == 6.0


def test_workers_and_dask_round_trip_and_edits(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    saved = {"space": SPACE, "deadline_days": None, "workers": 3, "dask": "tcp://host:8786"}
    panel.reset(_session(saved))
    assert panel.workers.value() == 3 and panel.dask.text() == "tcp://host:8786"
    assert panel.settings() == saved  # unedited: the loaded dict
    assert panel.execution() == {"workers": 3, "dask": "tcp://host:8786"}
    panel.workers.setValue(0)
    panel.dask.setText("local")
    panel.dask.textEdited.emit("local")
    edited = panel.settings()
    assert {k: v for k, v in edited.items() if k != "space"} == {"deadline_days": None,
                                                                  "dask": "local"}
    assert panel.execution() == {"workers": os.cpu_count() or 1, "dask": "local"}


def test_bad_workers_in_a_file_are_named(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    for bad in ({"workers": 0}, {"workers": "2"}, {"dask": 5}):
        panel.reset(_session({"space": SPACE, "deadline_days": None, **bad}))
        text = panel.error_label.text()
        assert not panel.error_label.isHidden() and "not understood" in text
        assert ("sweep.workers" in text) == ("workers" in bad)


def test_explore_run_passes_workers_and_dask_to_the_sweep(qtbot):
    seen = {}

    def fake(session, space, deadline_days, progress, cancel, **options):
        seen["options"] = options
        seen["thread"] = threading.current_thread()
        progress(0, 1)
        from core.studies.sweep import run_sweep
        return run_sweep(session, space, deadline_days=deadline_days)

    tab = ExploreTab(fake)
    qtbot.addWidget(tab)
    try:
        tab.reset(_session({"space": SPACE, "deadline_days": None, "workers": 2, "dask": "local"}))
        with qtbot.waitSignal(tab.sweep_finished, timeout=60_000):
            assert tab.run()
        assert seen["options"] == {"workers": 2, "dask": "local"}
        assert seen["thread"] is not threading.main_thread()
    finally:
        assert tab.runner.shutdown()


def test_explore_sweeps_on_two_workers_like_serial(qtbot, monkeypatch):
    from core.studies import sweep as sweep_module
    from core.studies.sweep import run as sweep_run
    monkeypatch.setattr(sweep_run, "_PARALLEL_MIN_PLANS", 0)
    tab = ExploreTab()
    qtbot.addWidget(tab)
    try:
        session = _session({"space": SPACE, "deadline_days": None, "workers": 2})
        tab.reset(session)
        with qtbot.waitSignal(tab.sweep_finished, timeout=60_000) as blocker:
            assert tab.run()
        result = blocker.args[0]
        serial = sweep_module.run_sweep(session, result.space)  # pruned, as the window
        assert result.num_plans == serial.num_plans > 10
        assert result.iteration_time_s.tobytes() == serial.iteration_time_s.tobytes()
        assert tab.progress_bar.value() == tab.progress_bar.maximum()
    finally:
        assert tab.runner.shutdown()
