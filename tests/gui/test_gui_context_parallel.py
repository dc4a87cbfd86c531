"""Explore tab: context-parallel sizes are a sweep setting (default 1 only), saved with the session."""

from __future__ import annotations

from core.session import load_any
from core.sweep import SweepSpace
from tests.conftest import EXAMPLES
from vtrain_gui.sweep_settings import SweepSettingsPanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def test_context_parallel_sizes_round_trip_and_are_checked(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    s = load_any(SMALL)
    panel.reset(s)
    assert panel.space().context_parallel == (1,)  # the default sweep does not grow
    s.sweep = {"space": SweepSpace(max_gpus=8, context_parallel=(1, 2)).to_dict(),
               "deadline_days": None}
    panel.reset(s)
    assert panel.context_parallel.text() == "1, 2"
    assert panel.space().context_parallel == (1, 2)
    qtbot.keyClicks(panel.context_parallel, ", 4")
    assert panel.space().context_parallel == (1, 2, 4)
    assert panel.settings()["space"]["context_parallel"] == [1, 2, 4]
    panel.context_parallel.setText("0")
    panel.context_parallel.textEdited.emit("0")
    assert [e.field for e in panel.errors()] == ["sweep.context_parallel"]
