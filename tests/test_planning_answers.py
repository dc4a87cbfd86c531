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


def test_a_sweeps_days_are_iterations_times_the_iteration_time_and_say_so(capsys):
    """days = ceil(tokens / (B x s)) x T / 86,400 and cost = days x 24 x GPUs x price: no
    failures, restarts or checkpoints, which the legend now says (it said "cost: for the
    token budget" only, while vtrain simulate's goodput lines and --gpus-from count them)."""
    import math
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    s = load_any(path)
    opts = ["--gpus", "8", "--tensor-parallel", "1,2", "--pipeline-parallel", "1",
            "--schedules", "1f1b", "--recompute", "full", "--context-parallel", "1",
            "--zero-stages", "1", "--workers", "1"]
    assert main(["sweep", path, "--json"] + opts) == 0
    f = json.loads(capsys.readouterr().out)["fastest"]
    n = math.ceil(s.cost.training_tokens / (s.plan.global_batch_size * s.model.seq_length))
    days = n * f["iteration_time_s"] / 86400
    assert abs(f["training_days"] - days) <= 1e-9 * days
    cost = days * 24 * 8 * s.cost.price_per_gpu_hour_usd
    assert abs(f["cost_usd"] - cost) <= 1e-9 * cost
    assert main(["sweep", path] + opts) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("days and cost: for the token budget, iterations x iteration time (without "
            "failures, restarts or checkpoints") in out
    # what the tokens per iteration and the network rest on, held: the sequence length (B x s)
    # and the node (this vTrain example's own 800 Gb/s per node, not the A100's reference)
    assert out.startswith("GPT-3 1.3B on A100-SXM4-80GB (8 per node, 800 Gb/s per node), "
                          f"sequence {s.model.seq_length:,}, global batch "
                          f"{s.plan.global_batch_size}, ")
