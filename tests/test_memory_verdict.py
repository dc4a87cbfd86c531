"""The memory verdict (fits / tight / does not fit) and where a planner reads it: the report,
``vtrain diff`` and the Compare tab (case s3/compare_unfit_plan_shown_better.json)."""

from __future__ import annotations

import json

import pytest

from core.sim.report import MEMORY_TIGHT_MARGIN, memory_verdict
from tests.conftest import case_file

GiB = 2**30


@pytest.mark.parametrize("need_gib, verdict", [
    (10.0, "fits"), (72.0 * (1 - MEMORY_TIGHT_MARGIN), "fits"),
    (72.0 * (1 - MEMORY_TIGHT_MARGIN) + 0.01, "tight"), (72.0, "tight"),
    (72.01, "does not fit"), (87.9, "does not fit")])
def test_memory_verdict_boundaries(need_gib, verdict):
    assert memory_verdict(need_gib * GiB, 72.0 * GiB) == verdict


def _diff_json(capsys, path) -> dict:
    from core.cli import main
    assert main(["diff", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_diff_marks_the_plan_that_does_not_fit(capsys):
    path = case_file("s3/compare_unfit_plan_shown_better.json")
    doc = _diff_json(capsys, path)
    a, b = doc["a"], doc["b"]
    # B (the session's own plan) is faster and cheaper, but needs 92.1 of 72.0 usable GiB (87.9
    # GiB of tensors, plus the process terms: workspaces, allocator reserve, CUDA context, NCCL
    # buffers); A fits, within 5 % of the limit since those terms count
    assert doc["difference_s"] < 0 and doc["cost_difference_usd"] < 0
    assert b["max_memory_per_gpu_bytes"] / GiB == pytest.approx(92.1, abs=0.05)
    assert b["usable_memory_bytes"] / GiB == pytest.approx(72.0, abs=0.05)
    assert (b["memory_verdict"], b["fits_in_memory"]) == ("does not fit", False)
    assert a["memory_verdict"] == "tight" and a["fits_in_memory"]

    from core.cli import main
    assert main(["diff", str(path)]) == 0
    out = capsys.readouterr().out
    verdict_line = [line for line in out.splitlines() if line.startswith("B DOES NOT FIT")]
    assert len(verdict_line) == 1
    assert "92.1 GiB" in verdict_line[0] and "72.0 GiB" in verdict_line[0]


def test_simulate_json_carries_the_verdict(capsys):
    from core.cli import main
    path = case_file("s3/compare_unfit_plan_shown_better.json")
    assert main(["simulate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory_verdict"] == "does not fit"
    assert doc["usable_memory_bytes"] == pytest.approx(
        doc["memory_capacity_bytes"] * (1 - doc["memory_reserve_fraction"]))
