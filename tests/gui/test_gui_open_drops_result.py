"""Opening another session drops the result of the one before: an opened file that breaks a
rule showed the previous file's timeline and figures as "the last valid configuration", and
Plan > Pin plan for comparison (and the Explore preview's Pin button) pinned that plan, which
the window no longer showed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"


def _invalid_copy(tmp_path: Path) -> Path:
    """The 1.3B example with t=3 (32 attention heads are not divisible by 3)."""
    data = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    path = tmp_path / "invalid.json"
    shutil.copy(EXAMPLES / "gpt3_1.3b_single_node.json", path)
    session = json.loads(path.read_text())
    session["plan"]["tensor_parallel"] = 3
    path.write_text(json.dumps(session))
    assert data["plan"]["tensor_parallel"] != 3
    return path


def test_opening_an_invalid_file_after_a_result_shows_no_result_and_pins_nothing(
        window, qtbot, tmp_path, real_simulate):
    explore_pin = window.explore.pin_button
    assert not explore_pin.isEnabled()  # nothing simulated yet: nothing to pin
    valid = tmp_path / "valid.json"
    shutil.copy(EXAMPLES / "gpt3_1.3b_single_node.json", valid)
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(valid)
    assert window.result is not None
    assert window.action_pin.isEnabled() and explore_pin.isEnabled()

    assert window.open_path(_invalid_copy(tmp_path))
    qtbot.wait(300)
    assert window.editor.session().plan.tensor_parallel == 3
    assert window.result is None
    assert window.results_view.is_empty and not window.results_stale
    assert "breaks a rule" in window.results_view.message_text
    assert not window.action_pin.isEnabled() and not explore_pin.isEnabled()
    assert window.pin_plan() is False and window.compare.pinned is None

    # the file fixed in the editor simulates and can be pinned again
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        window.editor.field_widget("plan.tensor_parallel").setValue(1)
    assert window.result.session.plan.tensor_parallel == 1
    assert window.action_pin.isEnabled() and explore_pin.isEnabled()
    assert window.pin_plan() and window.compare.pinned.session.plan.tensor_parallel == 1
    window.unpin_plan()


def test_a_pinned_plan_stays_pinned_but_the_other_files_result_is_not_plan_b(
        window, qtbot, tmp_path, real_simulate):
    valid = tmp_path / "valid.json"
    shutil.copy(EXAMPLES / "gpt3_1.3b_single_node.json", valid)
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.open_path(valid)
    assert window.pin_plan()
    pinned = window.compare.pinned
    assert window.open_path(_invalid_copy(tmp_path))
    qtbot.wait(300)
    assert window.compare.pinned is pinned  # the pin is the user's: it stays
    window.show_tab("compare")
    assert window.compare.is_empty and window.compare.diff is None  # no plan B to compare
    window.unpin_plan()
