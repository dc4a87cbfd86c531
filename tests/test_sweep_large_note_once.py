"""``vtrain sweep`` says its "large sweep" note once.

A trial user's DeepSeek-V2 sweep (338,962 plans that fit, 369,024,588 pipeline steps) printed
"warning: large sweep: ... about 2 minutes on one core before pruning" on standard error as the
sweep started and again, word for word, among the warnings under the Pareto front: the
note the run told (``run_sweep``'s ``notice``) was also in the result's warnings, and the text
report printed every warning. It is now said once, on standard error before the wait (its time
estimate is for deciding whether to wait); ``--json`` keeps it in ``warnings``.
"""
from __future__ import annotations

import json

from core.cli import main
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node
ARGS = ["sweep", str(SMALL), "--max-gpus", "8", "--micro-batch-sizes", "1", "--schedules", "1f1b",
        "--workers", "1"]


def test_the_large_sweep_note_is_said_once(capsys, monkeypatch):
    import core.studies.sweep.bound as bound
    monkeypatch.setattr(bound, "LARGE_SWEEP_WORK", 0)  # every sweep is "large"
    assert main(ARGS) == 0
    cap = capsys.readouterr()
    both = cap.err + cap.out
    assert both.count("large sweep: the ") == 1
    assert " ".join(cap.err.split()).startswith("warning: large sweep: the ")
    assert "pipeline steps to simulate" in " ".join(cap.err.split())
    assert main(ARGS + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum(w.startswith("large sweep: the ") for w in doc["warnings"]) == 1


def test_a_sweep_that_is_not_large_has_no_note(capsys):
    assert main(ARGS) == 0
    cap = capsys.readouterr()
    assert "large sweep" not in cap.err + cap.out
