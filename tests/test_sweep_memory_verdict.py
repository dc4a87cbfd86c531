"""The sweep's ``memory_verdict`` column (issue 27): the verdict of each plan's whole-process
need against the GPU's capacity, the margin (cluster.memory_reserve_fraction) only making a fit
tight; tight plans fit, so the margin changes no plan kept and no answer of the sweep."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.io.session import load_any
from core.sim.report import memory_verdict
from core.studies.sweep import COLUMNS, SweepSpace, run_sweep
from core.studies.sweep.saved import restore_sweep, saved_sweep
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node
SPACE = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4), schedules=("1f1b", "gpipe"))


def _sweep(margin: float):
    session = load_any(SMALL)
    session = dataclasses.replace(session, cluster=dataclasses.replace(
        session.cluster, memory_reserve_fraction=margin))
    return run_sweep(session, SPACE, prune=False)


@pytest.fixture(scope="module")
def sweeps():
    return _sweep(0.1), _sweep(0.8)


def test_column_is_the_scalar_rule_plan_by_plan(sweeps):
    for r, margin in zip(sweeps, (0.1, 0.8)):
        cap = r.memory_capacity_bytes
        assert cap == 80 * 2**30
        want = [memory_verdict(need, cap, margin) for need in r.max_memory_per_gpu_bytes.tolist()]
        assert r.memory_verdict.tolist() == want
        assert "memory_verdict" in COLUMNS
        assert [row["memory_verdict"] for row in r.rows()] == want
        assert r.csv_text().splitlines()[0].split(",").count("memory_verdict") == 1


def test_the_margin_marks_tight_plans_and_keeps_them(sweeps):
    narrow, wide = sweeps
    need, cap = wide.max_memory_per_gpu_bytes, wide.memory_capacity_bytes
    tight = wide.memory_verdict == "tight"
    # closed form: tight is (1 - 0.8) * C < need <= C
    assert np.array_equal(tight, (need > 0.2 * cap) & (need <= cap))
    assert tight.any() and (~tight).any()
    assert wide.fits_in_memory[tight].all()  # a tight plan fits: the sweep keeps it
    # the margin takes nothing away: the same plans fit, the same answers
    assert np.array_equal(narrow.fits_in_memory, wide.fits_in_memory)
    assert np.array_equal(narrow.fits_in_memory,
                          (need <= cap) & np.isfinite(narrow.iteration_time_s))
    assert (narrow.fastest, narrow.cheapest) == (wide.fastest, wide.cheapest)
    assert np.array_equal(narrow.pareto, wide.pareto)
    doc = json.loads(json.dumps(wide.to_dict()))
    assert doc["fastest"]["memory_verdict"] == wide.memory_verdict[wide.fastest]


def test_saved_sweep_keeps_the_verdicts(sweeps):
    wide = sweeps[1]
    back = restore_sweep(json.loads(json.dumps(saved_sweep(wide))))
    rows = saved_sweep(wide)["rows"]
    assert back.memory_capacity_bytes == wide.memory_capacity_bytes
    assert back.memory_verdict.tolist() == [row["memory_verdict"] for row in rows]


def test_sweep_cli_marks_tight_plans(capsys):
    """``vtrain sweep``: the GiB column marks a tight plan with ``~`` (the margin named in the
    legend) and ``--json`` rows carry the verdict."""
    from core.cli import main
    args = ["sweep", str(SMALL), "--gpus", "8", "--set", "cluster.memory_reserve_fraction=0.8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "~ = tight: inside the 80 % margin of the GPU's memory" in out
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    fastest = doc["fastest"]
    cap = 80 * 2**30
    assert fastest["memory_verdict"] == memory_verdict(fastest["max_memory_per_gpu_bytes"], cap, 0.8)
    assert fastest["memory_verdict"] == "tight"  # 0.2 * C < need <= C: the fastest is tight
    assert all(row["memory_verdict"] in ("fits", "tight") for row in doc["pareto"])
