"""Explore tab: the expert all-to-all overlap is a sweep setting of MoE sessions (hidden for dense
ones), saved with the session; the cost panel names its hidden part."""

from __future__ import annotations

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.io.session import load_any
from core.studies.sweep import SweepSpace
from tests.conftest import EXAMPLES
from vtrain_gui.sweep_settings import SweepSettingsPanel


def _moe() -> Session:
    return Session(MODEL_PRESETS["Mixtral 8x7B"],
                   ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=16,
                                micro_batch_size=1, global_batch_size=64, recompute="none",
                                expert_parallel=8, overlap_moe_expert_parallel_comm=True),
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=4))


def test_overlap_row_round_trips_for_moe_and_stays_out_of_dense_sweeps(qtbot):
    panel = SweepSettingsPanel()
    qtbot.addWidget(panel)
    dense = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    panel.reset(dense)
    assert not panel.ep_overlap_boxes["on"].isVisibleTo(panel)
    assert panel.space().overlap_moe_expert_parallel_comm is None
    s = _moe()
    panel.reset(s)
    assert panel.ep_overlap_boxes["on"].isVisibleTo(panel)
    assert panel.space().overlap_moe_expert_parallel_comm is None  # the default: off and on
    panel.ep_overlap_default.setChecked(False)
    assert panel.space().overlap_moe_expert_parallel_comm == (False, True)  # what it sweeps
    panel.ep_overlap_boxes["off"].setChecked(False)
    assert panel.space().overlap_moe_expert_parallel_comm == (True,)
    panel.ep_overlap_boxes["off"].setChecked(True)
    assert panel.space().overlap_moe_expert_parallel_comm == (False, True)
    s.sweep = {"space": panel.settings()["space"], "deadline_days": None}
    panel.reset(s)
    assert panel.space().overlap_moe_expert_parallel_comm == (False, True)
    panel.ep_overlap_boxes["off"].setChecked(False)
    panel.ep_overlap_boxes["on"].setChecked(False)
    assert [e.field for e in panel.errors()] == ["sweep.overlap_moe_expert_parallel_comm"]
    s.sweep = {"space": SweepSpace(num_gpus=16, overlap_moe_expert_parallel_comm=(False,)).to_dict(),
               "deadline_days": None}
    panel.reset(s)
    assert (panel.ep_overlap_boxes["off"].isChecked(), panel.ep_overlap_boxes["on"].isChecked()) \
        == (True, False)


def test_cost_panel_names_the_hidden_all_to_all(qtbot):
    from core.sim.simulate import simulate
    from vtrain_gui.cost_panel import CostPanel
    from vtrain_gui.formatting import format_duration
    panel = CostPanel()
    qtbot.addWidget(panel)
    r = simulate(_moe()).report
    assert r.ep_hidden_s > 0
    panel.set_report(r)
    text = panel._values["ep_comm"].text()
    assert f"({format_duration(r.ep_hidden_s)} hidden)" in text
