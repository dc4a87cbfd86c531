"""A prediction outside the profile's calibration range and without an error band warns as one
with a band does (⚠, orange): Llama 3 70B on 8 H100s (35.7 B layer parameters, the store's
single-node runs 4.55-6.98 B) read "outside the calibration range, and no band there" in the
grey of a mere lack of residuals."""

from __future__ import annotations

import pytest

from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from vtrain_gui.cost_panel import CostPanel


@pytest.fixture
def panel(qtbot):
    p = CostPanel()
    qtbot.addWidget(p)
    return p


def test_no_band_outside_the_calibration_range_warns(panel, real_simulate):
    session = Session(MODEL_PRESETS["Llama 3 70B"],
                      ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                                   micro_batch_size=1, global_batch_size=8),
                      ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    report = real_simulate(session).report
    iv = report.interval
    assert iv is not None and not iv.available and iv.in_calibration_range is False
    panel.set_report(report)
    assert panel.value_text("iteration_band") == "none"
    assert panel.value_text("band_note") == (
        "⚠ outside the calibration range, and no band there (hover for why)")
    assert "B35C00" in panel._values["band_note"].styleSheet()
    assert "calibration range" in panel._values["band_note"].toolTip()
