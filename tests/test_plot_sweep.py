"""benchmarks/plot_sweep.py (docs/img/mtnlg_sweep.png): every plan of the scatter has its days
and cost. The sweep's branch and bound leaves the plans it prunes without figures (NaN), so the
script, which ran the pruning sweep, drew a NaN axis range and failed ("Cannot set range
[nan, nan]"); it now runs the exhaustive sweep (``prune=False``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_module
from core.io.session import load_any
from core.studies.sweep import run_sweep

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def plot_sweep():
    return load_module(ROOT / "benchmarks" / "plot_sweep.py")


@pytest.fixture(scope="module")
def session():
    s = load_any(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json")
    s.cost.training_tokens = 270e9
    return s


def test_every_fitting_plan_has_figures_as_the_pruning_sweep_gives_them(plot_sweep, session):
    result = plot_sweep.sweep_for_plot(session)
    fits = result.fits_in_memory
    assert fits.sum() > 0
    assert np.isfinite(result.training_days[fits]).all()
    assert np.isfinite(result.cost_usd[fits]).all()
    # the pruning sweep of the same space: the plans it simulated have the same figures, bit
    # for bit, and it leaves others without (what broke the plot)
    pruned = run_sweep(session, plot_sweep.space("all"))
    assert pruned.num_plans == result.num_plans
    done = fits & np.isfinite(pruned.training_days)
    assert 0 < done.sum() < fits.sum()
    assert np.array_equal(result.training_days[done], pruned.training_days[done])
    assert result.pareto_indices().tolist() == pruned.pareto_indices().tolist()


def test_the_plot_is_written(plot_sweep, session, tmp_path):
    pytest.importorskip("pyqtgraph")
    out = tmp_path / "sweep.png"
    plot_sweep.plot(plot_sweep.sweep_for_plot(session), out, "GPT-3 1.3B")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
