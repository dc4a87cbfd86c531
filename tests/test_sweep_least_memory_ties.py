"""``vtrain sweep``'s front and best plans keep, of plans tied on days and dollars, the one
needing the least memory per GPU (:func:`core.studies.sweep.result.least_memory_of_ties`), as
the GPU choice's combined front does: ZeRO-1 and ZeRO-2 of one plan at one micro-batch per
iteration move the same bytes once, so their times are equal and ZeRO-2 (1/d of the fp32
gradients) holds less."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.cli import main
from core.io.session import load_any
from core.studies.sweep import SweepSpace, run_sweep
from core.studies.sweep.result import least_memory_of_ties, pareto_front
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B = 256


def _space() -> SweepSpace:
    """Up to 64 GPUs, t = 1, b = 4, 1F1B, no recomputation, ZeRO 1 and 2: at d = 64 the
    global batch of 256 is one micro-batch (tests/test_gpu_choice.py's setup)."""
    return SweepSpace(max_gpus=64, tensor_parallel=(1,), micro_batch_sizes=(4,),
                      schedules=("1f1b",), recompute=("none",), zero_stages=(1, 2))


def _twins(res):
    """The two plans at 64 GPUs, p = 1 (one micro-batch): (ZeRO-1 row, ZeRO-2 row)."""
    at = {int(pl.zero_stage): i for i, pl in enumerate(res.plans)
          if pl.num_gpus == 64 and pl.pipeline_parallel == 1}
    return at[1], at[2]


@pytest.mark.parametrize("prune", [True, False])
def test_zero_1_and_zero_2_at_one_micro_batch_are_one_front_point(prune):
    """Both simulated (branch and bound prunes only strictly dominated plans), same days and
    dollars to the bit, ZeRO-2 less memory; the front keeps ZeRO-2 alone, and it is the
    fastest plan; the raw Pareto front (no memory rule) had both."""
    res = run_sweep(load_any(SMALL), _space(), workers=1, prune=prune)
    z1, z2 = _twins(res)
    assert res.feasible[z1] and res.feasible[z2]
    assert res.num_microbatches[z1] == res.num_microbatches[z2] == 1
    assert res.training_days[z1] == res.training_days[z2]
    assert res.cost_usd[z1] == res.cost_usd[z2]
    assert res.max_memory_per_gpu_bytes[z2] < res.max_memory_per_gpu_bytes[z1]
    raw = pareto_front(res.training_days, res.cost_usd, res.feasible)
    assert raw[z1] and raw[z2]  # without the rule: two points with identical figures
    assert res.pareto[z2] and not res.pareto[z1]
    assert np.array_equal(res.pareto, least_memory_of_ties(
        res.training_days, res.cost_usd, res.max_memory_per_gpu_bytes, raw))
    assert res.fastest == z2  # the fastest of the two ties: ZeRO-2 (row order put ZeRO-1 first)
    assert z1 < z2
    # the filter's front and picks (the window's Explore tab) follow the same rule
    every = np.ones(res.num_plans, bool)
    assert np.array_equal(res.front_of(every), res.pareto)
    assert res.best_of("days", every) == res.fastest
    assert res.best_of("cost", every) == res.cheapest
    with pytest.raises(ValueError, match="'days' or 'cost'"):
        res.best_of("memory", every)


def test_least_memory_of_ties_looks_for_twins_on_the_front_only():
    """A front point's twin outside ``on`` (a filter hides it) does not take it off."""
    days = np.array([1.0, 1.0, 2.0])
    cost = np.array([5.0, 5.0, 1.0])
    mem = np.array([10.0, 8.0, 1.0])
    assert least_memory_of_ties(days, cost, mem, np.array([True, True, True])).tolist() == [
        False, True, True]
    assert least_memory_of_ties(days, cost, mem, np.array([True, False, True])).tolist() == [
        True, False, True]
    same = np.array([4.0, 4.0, 1.0])  # tied on all three: both stay
    assert least_memory_of_ties(days, cost, same, np.ones(3, bool)).tolist() == [True] * 3


def test_sweep_cli_lists_one_of_the_tied_plans(capsys):
    """``vtrain sweep --json``: the 64-GPU front point is ZeRO-2 alone, and it is the
    fastest."""
    args = ["sweep", str(SMALL), "--max-gpus", "64", "--zero-stages", "1,2", "--tensor-parallel",
            "1", "--micro-batch-sizes", "4", "--schedules", "1f1b", "--recompute", "none",
            "--workers", "1", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    at64 = [r for r in doc["pareto"] if r["num_gpus"] == 64]
    assert [r["zero_stage"] for r in at64] == [2]
    assert doc["fastest"]["zero_stage"] == 2 and doc["fastest"]["num_gpus"] == 64
    assert doc["fastest"]["iteration_time_s"] == at64[0]["iteration_time_s"]
