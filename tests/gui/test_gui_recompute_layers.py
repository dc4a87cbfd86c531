"""The Explore tab's "Recomputed layers" field (``SweepSpace.recompute_num_layers``, ``vtrain
sweep --recompute-num-layers``): empty is the command line's default, ``all`` / counts round
trip through a session file's sweep settings, bad items are named."""
from __future__ import annotations

from core.io.session import load_any
from core.studies.sweep import SweepSpace
from tests.conftest import EXAMPLES
from vtrain_gui.sweep_settings import SweepSettingsPanel

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def test_recomputed_layers_round_trip_and_are_checked(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    s = load_any(SMALL)
    panel.reset(s)
    assert panel.recompute_num_layers.text() == ""
    assert panel.space().recompute_num_layers is None  # the command line's default
    s.sweep = {"space": SweepSpace(max_gpus=8, recompute_num_layers=("all",)).to_dict(),
               "deadline_days": None}
    panel.reset(s)
    assert panel.recompute_num_layers.text() == "all"
    assert panel.space().recompute_num_layers == ("all",)
    qtbot.keyClicks(panel.recompute_num_layers, ", 2")
    assert panel.space().recompute_num_layers == ("all", 2)
    assert panel.settings()["space"]["recompute_num_layers"] == ["all", 2]
    for bad, message in (("two", "'two' is neither all nor a whole number"),
                         ("0", "0 is neither 'all' (every layer) nor a positive integer")):
        panel.recompute_num_layers.setText(bad)
        panel.recompute_num_layers.textEdited.emit(bad)
        errors = panel.errors()
        assert [e.field for e in errors] == ["sweep.recompute_num_layers"]
        assert errors[0].message.startswith(message)
    panel.recompute_num_layers.setText("")
    panel.recompute_num_layers.textEdited.emit("")
    assert panel.space().recompute_num_layers is None and not panel.errors()
