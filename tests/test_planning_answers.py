"""Planning answers a user reads off the report, against their closed forms."""

from __future__ import annotations

import json

from core.cli import main
from core.io.session import load_any
from tests.conftest import EXAMPLES


def test_throughput_is_given_per_gpu_with_the_tokens_of_one_iteration(capsys):
    """tokens/s = B x s / T, and per GPU that over t*p*cp*d (the figure planners compare:
    "how many tokens/s per GPU"; the report gave the cluster's total only)."""
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    s = load_any(path)
    assert main(["simulate", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    tokens = s.plan.global_batch_size * s.model.seq_length
    tps = tokens / doc["iteration_time_s"]
    assert abs(doc["tokens_per_s"] - tps) <= 1e-9 * tps
    assert main(["simulate", path]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"Throughput {tps:,.0f} tokens/s, {tps / doc['num_gpus']:,.0f} per GPU ({tokens:,} "
            f"tokens per iteration: B={s.plan.global_batch_size:,} sequences of "
            f"{s.model.seq_length:,})") in out
