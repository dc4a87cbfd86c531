"""Energy of a run (core/sim/energy.py, docs/goodput.md "Energy"): closed forms and the power
figures of the GPU spec files."""

from __future__ import annotations

import json

import pytest

from core.plan.cluster import GPU_KINDS
from core.sim.energy import IDLE_POWER_FRACTION, energy, gpu_power_w, run_energy
from core.store.gpu_spec import GpuPower, GpuSpecError, gpu_power, gpu_spec_from_dict, shipped_spec_path

H100 = GpuPower(board_w=700.0, node_overhead_w_per_gpu=575.0, source="test")


def test_every_gpu_kind_has_power_figures_and_a_source():
    for kind in GPU_KINDS:
        p = gpu_power(kind)
        assert p is not None and p.board_w > 0 and p.node_overhead_w_per_gpu >= 0 and p.source
    assert gpu_power("H100-SXM5-80GB") == GpuPower(700.0, (10200 - 5600) / 8, gpu_power(
        "H100-SXM5-80GB").source)  # DGX H100: 10.2 kW for 8 GPUs of 700 W
    assert gpu_power("GB200-NVL72").node_overhead_w_per_gpu == (120000 - 72 * 1200) / 72
    assert gpu_power("GH200-96GB").node_overhead_w_per_gpu == 150.0  # assumed in its file
    assert gpu_power("no such GPU") is None


def _spec(power):
    raw = json.loads(shipped_spec_path("H100-SXM5-80GB").read_text())
    raw["power"] = power
    return raw


@pytest.mark.parametrize("power, field", [
    ({"board_w": 700, "source": "x"}, "power.system_max_w"),  # neither system nor overhead
    ({"board_w": 700, "system_max_w": 5000, "gpus_per_system": 8, "source": "x"},
     "power.system_max_w"),  # below the GPUs' own power
    ({"board_w": 700, "system_max_w": 10200, "gpus_per_system": 8, "node_overhead_w_per_gpu": 1,
      "source": "x"}, "power.system_max_w"),  # both
    ({"board_w": -1, "node_overhead_w_per_gpu": 1, "source": "x"}, "power.board_w"),
    ({"board_w": 700, "node_overhead_w_per_gpu": 1}, "power.source"),
    ({"board_w": 700, "node_overhead_w_per_gpu": 1, "source": "x", "idle_w": 3}, "power.idle_w"),
    ([700], "power"),
])
def test_broken_power_figures_are_refused_by_field(power, field):
    with pytest.raises(GpuSpecError) as err:
        gpu_spec_from_dict(_spec(power), "h100.json")
    assert f"h100.json: {field}" in str(err.value)


def test_linear_power_model():
    assert gpu_power_w(H100, 1.0) == (700.0, 700.0 * IDLE_POWER_FRACTION)
    assert gpu_power_w(H100, 0.0)[0] == 700.0 * IDLE_POWER_FRACTION
    busy, idle = gpu_power_w(gpu_power("A100-SXM4-80GB"), 0.5)
    assert busy == pytest.approx(idle + (400 - idle) / 2)
    assert gpu_power_w(H100, 2.0)[0] == 700.0  # busy clipped to 1


def test_energy_terms():
    e = energy(power=H100, num_gpus=1000, busy=1.0, work_s=3600.0, lost_work_s=0.0,
               stalled_s=3600.0, pue=1.5, price_per_kwh_usd=0.1)
    gpu = 1000 * (700 + 105) / 1000  # kWh: an hour at 700 W and an hour at 105 W
    assert e.gpu_kwh == pytest.approx(gpu)
    assert e.node_kwh == pytest.approx(gpu * 575 / 700)
    assert e.energy_kwh == pytest.approx(1.5 * (e.gpu_kwh + e.node_kwh))
    assert e.facility_kwh == pytest.approx(0.5 * (e.gpu_kwh + e.node_kwh))
    assert e.energy_cost_usd == pytest.approx(0.1 * e.energy_kwh)
    assert e.energy_kwh_without_failures == pytest.approx(1.5 * 1000 * (700 + 575) / 1000)
    # Meta's model-card convention is the GPU term at u = 1, no overhead, PUE 1
    card = energy(power=H100, num_gpus=1, busy=1.0, work_s=30.84e6 * 3600,
                  lost_work_s=0.0, stalled_s=0.0, pue=1.0, price_per_kwh_usd=0.0)
    assert card.gpu_kwh == pytest.approx(21.588e6)  # 30.84 M GPU-hours x 700 W


def test_a_gpu_kind_without_power_figures_gets_no_energy_not_another_kinds():
    from types import SimpleNamespace
    session = SimpleNamespace(cluster=SimpleNamespace(gpu="my-own-gpu"))
    assert run_energy(session, None, None) is None


def test_small_amounts_never_read_zero_beside_a_nonzero_cost():
    """A single-node run's energy and lost GPU-hours are below one MWh / ten hours: they read
    in kWh and with three significant digits, never "0 MWh ($34)"."""
    from core.util.text import format_amount, format_energy
    assert format_energy(17_300) == "17 MWh" and format_energy(1_400) == "1.4 MWh"
    assert format_energy(422.4) == "422 kWh" and format_energy(0.81) == "0.81 kWh"
    assert format_amount(19_740.2) == "19,740" and format_amount(0.399) == "0.399"
    assert format_amount(3.84) == "3.84" and format_amount(0) == "0"
