"""Energy of a run (core/sim/energy.py, docs/goodput.md "Energy"): closed forms and tables."""

from __future__ import annotations

import pytest

from core.plan.cluster import GPU_KINDS
from core.sim.energy import (
    GPU_BOARD_POWER_W,
    IDLE_POWER_FRACTION,
    NODE_OVERHEAD_W_PER_GPU,
    POWER_SOURCES,
    energy,
    gpu_power_w,
)


def test_every_gpu_kind_has_power_figures_and_a_source():
    assert set(GPU_BOARD_POWER_W) == set(NODE_OVERHEAD_W_PER_GPU) == set(POWER_SOURCES) \
        == set(GPU_KINDS)
    assert GPU_BOARD_POWER_W["H100-SXM5-80GB"] == 700
    assert NODE_OVERHEAD_W_PER_GPU["H100-SXM5-80GB"] == (10200 - 5600) / 8  # DGX H100


def test_linear_power_model():
    assert gpu_power_w("H100-SXM5-80GB", 1.0) == (700.0, 700.0 * IDLE_POWER_FRACTION)
    assert gpu_power_w("H100-SXM5-80GB", 0.0)[0] == 700.0 * IDLE_POWER_FRACTION
    busy, idle = gpu_power_w("A100-SXM4-80GB", 0.5)
    assert busy == pytest.approx(idle + (400 - idle) / 2)
    assert gpu_power_w("unknown GPU", 2.0)[0] == 700.0  # H100's figures, busy clipped to 1


def test_energy_terms():
    e = energy(gpu="H100-SXM5-80GB", num_gpus=1000, busy=1.0, work_s=3600.0, lost_work_s=0.0,
               stalled_s=3600.0, pue=1.5, price_per_kwh_usd=0.1)
    gpu = 1000 * (700 + 105) / 1000  # kWh: an hour at 700 W and an hour at 105 W
    assert e.gpu_kwh == pytest.approx(gpu)
    assert e.node_kwh == pytest.approx(gpu * 575 / 700)
    assert e.energy_kwh == pytest.approx(1.5 * (e.gpu_kwh + e.node_kwh))
    assert e.facility_kwh == pytest.approx(0.5 * (e.gpu_kwh + e.node_kwh))
    assert e.energy_cost_usd == pytest.approx(0.1 * e.energy_kwh)
    assert e.energy_kwh_without_failures == pytest.approx(1.5 * 1000 * (700 + 575) / 1000)
    # Meta's model-card convention is the GPU term at u = 1, no overhead, PUE 1
    card = energy(gpu="H100-SXM5-80GB", num_gpus=1, busy=1.0, work_s=30.84e6 * 3600,
                  lost_work_s=0.0, stalled_s=0.0, pue=1.0, price_per_kwh_usd=0.0)
    assert card.gpu_kwh == pytest.approx(21.588e6)  # 30.84 M GPU-hours x 700 W
