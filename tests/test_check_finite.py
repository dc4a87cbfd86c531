"""core.sim.simulate.check_finite names the first non-finite figure of a report (its quick path for
all-finite reports must not hide one)."""

from __future__ import annotations

import copy
import math

import pytest

from core.plan.fields import ConfigError
from core.io.session import load_any
from core.sim.simulate import check_finite, simulate
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def report():
    return simulate(load_any(EXAMPLES / "gpt3_1.3b_single_node.json")).report


@pytest.mark.parametrize("where, change", [
    ("report.iteration_time_s", lambda r: setattr(r, "iteration_time_s", math.inf)),
    ("report.stage_idle_s[0]", lambda r: r.stage_idle_s.__setitem__(0, math.nan)),
    ("report.memory[0].activations_bytes", lambda r: setattr(r.memory[0], "activations_bytes", math.inf)),
    ("report.memory[0].total_bytes", lambda r: setattr(r.memory[0], "weights_bytes", 1.7e308)
     or setattr(r.memory[0], "gradients_bytes", 1.7e308)),
    ("report.training_days_interval[1]", lambda r: setattr(r, "training_days", 1.7976931348623157e308)
     if r.interval is not None and r.interval.available else pytest.skip("no band")),
])
def test_a_non_finite_figure_is_named(report, where, change):
    bad = copy.deepcopy(report)
    check_finite(bad)  # finite as simulated
    change(bad)
    with pytest.raises(ConfigError) as exc:
        check_finite(bad)
    assert exc.value.errors[0].field == where
