"""``vtrain sweep --deadline-days D --pick deadline --out S.json`` writes the plan the sweep
reports as the cheapest within the deadline (the ``<= D d`` row, ``cheapest_within_deadline``
in --json), not the cheapest overall, which may take longer than D days."""

from __future__ import annotations

import json

from core.cli import main
from core.io.session import load_any
from tests.conftest import EXAMPLES

PLAN_KEYS = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size",
             "schedule", "recompute", "sequence_parallel", "zero_stage")


def _args(tmp_path):
    cfg = EXAMPLES / "gpt3_1.3b_single_node.json"
    return ["sweep", str(cfg), "--gpus", "2,4,8", "--context-parallel", "1",
            "--zero-stages", "1", "--schedules", "1f1b", "--recompute", "selective",
            "--workers", "1", "--tokens", "2e9", "--price-per-gpu-hour", "2"]


def test_pick_deadline_writes_the_cheapest_plan_within_the_deadline(tmp_path, capsys):
    args = _args(tmp_path)
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    days = sorted(r["training_days"] for r in doc["pareto"])
    assert len(days) >= 2, "the case needs a front of at least two plans"
    # a deadline between the fastest and the slowest plan of the front: the cheapest overall
    # misses it, the deadline plan meets it
    deadline = (days[0] + days[-1]) / 2
    out = tmp_path / "dl.json"
    assert main(args + ["--json", "--deadline-days", repr(deadline), "--pick", "deadline",
                        "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    within, cheapest = doc["cheapest_within_deadline"], doc["cheapest"]
    assert within["training_days"] <= deadline < cheapest["training_days"]
    picked = load_any(out).plan
    assert all(getattr(picked, k) == within[k] for k in PLAN_KEYS)
    assert picked.data_parallel != cheapest["data_parallel"]


def test_pick_deadline_refusals_exit_2_and_write_nothing(tmp_path, capsys):
    args = _args(tmp_path)
    out = tmp_path / "none.json"
    # no --deadline-days: refused by name before the sweep
    assert main(args + ["--pick", "deadline", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--pick" in err and "--deadline-days" in err and "Traceback" not in err
    # a deadline no plan meets: refused, naming the fastest plan's days
    assert main(args + ["--deadline-days", "1e-9", "--pick", "deadline", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--pick" in err and "no plan that fits finishes within 1e-09 days" in err
    assert not out.exists()


def test_a_one_day_deadline_is_one_day_not_1_days(tmp_path, capsys):
    """"No plan that fits finishes within 1 days": one day is singular. 2e12 tokens of GPT-3
    1.3B (6 x 1.3e9 x 2e12 = 1.6e22 FLOPs) take months on 8 GPUs, so no plan meets it."""
    args = [*_args(tmp_path)[:-4], "--tokens", "2e12", "--deadline-days", "1"]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "No plan that fits finishes within 1 day; the fastest plan that fits takes" in out
    assert main(args + ["--pick", "deadline", "--out", str(tmp_path / "s.json")]) == 2
    assert "no plan that fits finishes within 1 day; the fastest" in capsys.readouterr().err
