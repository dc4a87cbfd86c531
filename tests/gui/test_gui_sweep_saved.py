"""The Explore tab saves its last sweep with the session and shows it on reopening, marked
stale (naming the field) when the session's inputs changed since."""

from __future__ import annotations

import json

from core.io.session import load_session
from core.studies.sweep import SweepSpace, restore_sweep
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
SETTINGS = {"space": SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4),
                                schedules=("1f1b", "gpipe")).to_dict(), "deadline_days": 5.0}


def test_last_sweep_is_saved_reopened_and_marked_stale(window, qtbot, tmp_path, real_simulate):
    doc = json.loads(SMALL.read_text())
    doc["sweep"] = SETTINGS
    path = tmp_path / "small.json"
    path.write_text(json.dumps(doc))
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(path)
    explore = window.explore
    assert explore.result is None
    with qtbot.waitSignal(explore.sweep_finished, timeout=60_000) as blocker:
        assert explore.run()
    ran = blocker.args[0]
    assert window.isWindowModified()  # the result is part of the session now
    out = tmp_path / "with_result.json"
    assert window.save_to(out)
    saved = load_session(out).sweep
    assert saved["space"] == SETTINGS["space"] and saved["result"]["num_plans"] == ran.num_plans

    window.new_session()
    assert explore.result is None
    with qtbot.waitSignal(window.result_shown, timeout=30_000):
        assert window.open_path(out)
    shown = explore.result
    assert shown is not None and shown.saved["num_plans"] == ran.num_plans
    assert shown.plans[shown.fastest] == ran.plans[ran.fastest]
    assert shown.training_days[shown.fastest] == ran.training_days[ran.fastest]
    assert shown.num_plans == restore_sweep(saved["result"]).num_plans
    assert not explore.is_stale
    # saving again without a new sweep writes the same file
    again = tmp_path / "again.json"
    assert window.save_to(again)
    assert again.read_bytes() == out.read_bytes()

    # a changed cost makes it stale, naming the field; changing it back does not
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(3.5)
    assert explore.is_stale
    assert "cost.price_per_gpu_hour_usd" in explore.findChild(
        type(explore._stale), "sweep.stale").text()
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(
        load_session(out).cost.price_per_gpu_hour_usd)
    assert not explore.is_stale
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)
