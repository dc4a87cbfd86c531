"""Goodput: failures, restarts and checkpoints of a whole run (core/sim/goodput.py, docs/goodput.md).

Closed forms against an event-by-event Monte Carlo, the Young/Daly interval, checkpoint sizes
against the memory model, and the Llama 3 405B interruption interval (Dubey et al. 2024).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.model import model_math
from core.plan.cluster import (LLAMA3_FAILURES_PER_GPU_HOUR, ClusterConfig, CostConfig,
                               ReliabilityConfig)
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.goodput import (
    CheckpointSize,
    checkpoint_bytes_per_parameter,
    checkpoint_size,
    daly_interval_s,
    goodput,
    sample_run_times,
    segment_expected_s,
    young_interval_s,
)


def _event_simulation(segments, M, R, runs, seed):
    """Reference: every run lives its timeline failure by failure (vectorized over runs only).

    A segment's attempt lasts its length (the first) or restart + length (the others); an
    exponential failure time shorter than the attempt wastes that time and starts another."""
    rng = np.random.default_rng(seed)
    total = np.zeros(runs)
    for x, count in segments:
        for _ in range(count):
            need = np.full(runs, float(x))  # the first attempt has no restart
            active = np.ones(runs, bool)
            while active.any():
                n = int(active.sum())
                fail = rng.exponential(M, n)
                ok = fail >= need[active]
                idx = np.flatnonzero(active)
                total[idx] += np.where(ok, need[active], fail)
                need[idx[~ok]] = R + x
                active[idx[ok]] = False
    return total


@pytest.mark.parametrize("M,R,tau,C,n", [
    (3 * 3600.0, 600.0, 1800.0, 60.0, 100),      # 60 failures per run, restarts dominate
    (3600.0, 300.0, 1200.0, 30.0, 40),           # failures every hour, long segments
])
def test_closed_form_against_event_simulation(M, R, tau, C, n):
    segs = [(tau + C, n), (0.4 * tau + C, 1)]  # a partial last segment too
    closed = sum(c * segment_expected_s(x, M, R) for x, c in segs)
    ref = _event_simulation(segs, M, R, runs=3000, seed=1)
    assert abs(ref.mean() / closed - 1) < 0.01
    # Daly's W / tau form is the sum when tau divides W
    W = n * tau
    assert n * segment_expected_s(tau + C, M, R) == pytest.approx(
        M * math.exp(R / M) * math.expm1((tau + C) / M) * W / tau, rel=1e-12)
    # the spread's sampler: the same model, its mean and percentiles match the reference's
    draws = sample_run_times(segs, M, R, num_samples=6000, seed=2)
    assert abs(draws.mean() / closed - 1) < 0.01
    for q in (10, 90):
        assert np.percentile(draws, q) == pytest.approx(np.percentile(ref, q), rel=0.01)


def test_sampler_normal_limit_matches_exact_draws(monkeypatch):
    """Above EXACT_DRAWS the wasted times are drawn from their normal limit: same spread."""
    import core.sim.goodput as gp
    segs = [(300.0, 20000)]
    exact = gp.sample_run_times(segs, 3 * 3600.0, 600.0, 3000, seed=3)
    monkeypatch.setattr(gp, "EXACT_DRAWS", 0)
    normal = gp.sample_run_times(segs, 3 * 3600.0, 600.0, 3000, seed=3)
    for q in (10, 50, 90):
        assert np.percentile(normal, q) == pytest.approx(np.percentile(exact, q), rel=2e-3)


def test_young_and_daly_intervals():
    C, M = 30.0, 3 * 3600.0
    assert young_interval_s(C, M) == pytest.approx(math.sqrt(2 * 30 * 10800))  # 804.98 s
    r = C / (2 * M)
    assert daly_interval_s(C, M) == pytest.approx(
        math.sqrt(2 * C * M) * (1 + math.sqrt(r) / 3 + r / 9) - C)
    assert daly_interval_s(3 * M, M) == M  # C >= 2M: checkpoint every MTBF
    # Daly's interval is close to the exact model's minimum (expected time per unit of work)
    taus = np.linspace(200, 3000, 2801)
    cost = segment_expected_s(taus + C, M, 600.0) / taus
    best = taus[np.argmin(cost)]
    assert daly_interval_s(C, M) == pytest.approx(best, rel=0.01)


def _rel(**kw):
    return ReliabilityConfig(**kw)


def test_terms_sum_and_goodput():
    size = CheckpointSize(total_bytes=1e12, per_gpu_bytes=1e9, per_node_bytes=8e9,
                          stage_bytes=[1e12])
    g = goodput(iteration_time_s=10.0, num_iterations=100_000, num_gpus=4096,
                reliability=_rel(), size=size, price_per_gpu_hour_usd=2.0)
    assert g.checkpoint_save_s == pytest.approx(8.0)  # 8 GB at 1 GB/s per node
    assert g.mtbi_s == pytest.approx(3600 / (LLAMA3_FAILURES_PER_GPU_HOUR * 4096))
    assert g.checkpoint_interval_iterations == round(daly_interval_s(8.0, g.mtbi_s) / 10)
    assert g.work_s + g.checkpoint_s + g.restart_s + g.lost_work_s == pytest.approx(
        g.expected_time_s, rel=1e-12)
    assert g.goodput == pytest.approx(g.work_s / g.expected_time_s)
    assert g.p10_time_s < g.expected_time_s < g.p90_time_s
    assert g.gpu_hours_checkpoints == pytest.approx(g.checkpoint_s * 4096 / 3600)
    assert g.cost_usd_failures == pytest.approx(2.0 * (g.restart_s + g.lost_work_s) * 4096 / 3600)
    # first order: restarts ~ failures * R, lost work ~ failures * tau / 2
    assert g.restart_s == pytest.approx(g.expected_interruptions * 600, rel=0.05)
    assert g.expected_interruptions == pytest.approx(g.expected_time_s / g.mtbi_s, rel=0.01)
    # async: the stall is the copy to host memory; no failures: one save at the end, no spread
    a = goodput(iteration_time_s=10.0, num_iterations=100_000, num_gpus=4096,
                reliability=_rel(async_save=True), size=size, price_per_gpu_hour_usd=2.0)
    assert a.checkpoint_save_s == pytest.approx(1e9 / 25e9) and a.goodput > g.goodput
    z = goodput(iteration_time_s=10.0, num_iterations=100_000, num_gpus=4096,
                reliability=_rel(failure_rate_per_gpu_hour=0.0), size=size,
                price_per_gpu_hour_usd=2.0)
    assert z.mtbi_s is None and z.num_checkpoints == 1
    assert z.expected_time_s == z.p10_time_s == z.p90_time_s == pytest.approx(1e6 + 8.0)
    given = goodput(iteration_time_s=10.0, num_iterations=1000, num_gpus=8,
                    reliability=_rel(checkpoint_interval_iterations=300), size=size,
                    price_per_gpu_hour_usd=2.0)
    assert given.num_checkpoints == 4 and given.checkpoint_interval_rule == "given"


# ----------------------------------------------------------------------------- checkpoint size

def _plan(**kw):
    base = {"tensor_parallel": 8, "pipeline_parallel": 4, "data_parallel": 4,
            "micro_batch_size": 1, "global_batch_size": 64, "recompute": "full",
            "precision": "bf16"}
    return ParallelPlan(**{**base, **kw})


@pytest.mark.parametrize("zero", [0, 1])
@pytest.mark.parametrize("preset", ["GPT-3 175B", "Llama 3 70B"])
def test_checkpoint_size_is_the_memory_models_weights_and_optimizer(zero, preset):
    """bf16 with fp32 gradients: the memory model's weights (2 bytes) and optimizer state (fp32
    main weights and two moments, 12 bytes; divided by d under ZeRO-1) are what is saved."""
    m, pl = MODEL_PRESETS[preset], _plan(zero_stage=zero)
    mem = model_math.stage_memory(m, pl)
    d = pl.data_parallel
    state = sum(s.weights_bytes + s.optimizer_bytes * (d if zero else 1) for s in mem)
    size = checkpoint_size(m, pl, gpus_per_host=8)
    assert size.total_bytes == pytest.approx(state * pl.tensor_parallel, rel=1e-12)
    assert size.per_gpu_bytes == pytest.approx(max(size.stage_bytes) / (8 * 4))
    assert size.per_node_bytes == pytest.approx(8 * size.per_gpu_bytes)
    assert checkpoint_bytes_per_parameter(ParallelPlan(precision="bf16")) == 14
    assert checkpoint_bytes_per_parameter(ParallelPlan(precision="fp32")) == 12
    assert checkpoint_bytes_per_parameter(ParallelPlan(precision="fp8")) == 14
    # precision-aware optimizer, BF16 moments: 2 weights + 2 remainders + the moments saved
    # unscaled, fp32 (distrib_optimizer.py:883-908, TE get_unscaled_state)
    assert checkpoint_bytes_per_parameter(ParallelPlan(
        precision="bf16", zero_stage=1, use_precision_aware_optimizer=True,
        exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")) == 12


def test_a_node_holding_several_stages_writes_their_shares_never_more_than_the_whole():
    """t=2 p=4 d=1 on one node of 8: the node holds all four stages and writes the whole
    checkpoint (it read 8 shares of the largest stage, more than the whole); on 2 nodes of 4
    each node holds two consecutive stages, the larger pair's sum."""
    m = MODEL_PRESETS["GPT-3 1.3B"]
    pl = _plan(tensor_parallel=2, pipeline_parallel=4, data_parallel=1, global_batch_size=8)
    one = checkpoint_size(m, pl, gpus_per_host=8)
    assert max(one.stage_bytes) > min(one.stage_bytes)  # the embedding's stages are larger
    assert one.per_node_bytes == pytest.approx(one.total_bytes, rel=1e-12)
    two = checkpoint_size(m, pl, gpus_per_host=4)
    st = two.stage_bytes
    assert two.per_node_bytes == pytest.approx(max(st[0] + st[1], st[2] + st[3]), rel=1e-12)
    assert two.per_node_bytes < two.total_bytes


def test_checkpoint_of_an_moe_model_counts_each_expert_once():
    m = MODEL_PRESETS["Mixtral 8x7B"]
    pl = _plan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, expert_parallel=8,
               global_batch_size=64)
    size = checkpoint_size(m, pl, gpus_per_host=8)
    assert size.total_bytes == pytest.approx(model_math.num_parameters(m, 1) * 14, rel=1e-9)


# ----------------------------------------------------------------------------- Llama 3 405B

def llama3_405b_session(**reliability):
    """Dubey et al. 2024, Table 4, the 8k phase on 16,384 H100s: t=8, p=16, cp=1, d=128, B=2048
    sequences of 8,192 tokens (16M tokens), b=1, interleaved (v=4: 2 layer slots per virtual
    stage, the first and last stage one layer fewer)."""
    pl = ParallelPlan(tensor_parallel=8, pipeline_parallel=16, data_parallel=128,
                      micro_batch_size=1, global_batch_size=2048, schedule="interleaved",
                      virtual_pipeline_stages=4, recompute="selective", precision="bf16",
                      sequence_parallel=True, zero_stage=1,
                      account_for_embedding_in_pipeline_split=True,
                      account_for_loss_in_pipeline_split=True)
    return Session(MODEL_PRESETS["Llama 3.1 405B"], pl, ClusterConfig(gpu="H100-SXM5-80GB"),
                   CostConfig(training_tokens=15.6e12), ReliabilityConfig(**reliability))


def test_llama3_405b_interrupted_about_every_three_hours():
    from core.sim.simulate import simulate
    s = llama3_405b_session()
    r = simulate(s).report
    g = r.run
    assert r.num_gpus == 16_384
    assert 2.5 * 3600 <= g.mtbi_s <= 3.5 * 3600  # 3.09 h
    # the checkpoint: 405 B parameters x 14 bytes, spread over 2,048 nodes
    assert g.checkpoint_bytes == pytest.approx(r.num_parameters * 14, rel=0.01)
    assert g.checkpoint_bytes_per_node == pytest.approx(g.checkpoint_bytes / 2048, rel=0.05)
    assert 0.85 < g.goodput < 0.97
    assert g.work_s + g.checkpoint_s + g.restart_s + g.lost_work_s == pytest.approx(
        g.expected_time_s)
    assert r.energy.energy_kwh > r.energy.gpu_kwh > 0
    assert r.energy.energy_cost_usd == pytest.approx(r.energy.energy_kwh * 0.08)
    json.dumps(r.to_dict(), allow_nan=False)
    assert r.to_dict()["run"]["expected_training_days_with_failures"] == pytest.approx(
        g.expected_time_s / 86400)


# ----------------------------------------------------------------------------- session files

def test_session_round_trip_with_and_without_reliability(tmp_path):
    from core.io.session import load_session, save_session, session_to_json
    s = llama3_405b_session(restart_time_s=0.1 + 0.2, async_save=True,
                            checkpoint_interval_iterations=50)
    path = tmp_path / "s.json"
    save_session(s, path)
    back = load_session(path)
    assert back.reliability == s.reliability and back.cost == s.cost
    doc = json.loads(session_to_json(s))
    del doc["reliability"]
    path.write_text(json.dumps(doc))
    assert load_session(path).reliability == ReliabilityConfig()  # the documented defaults


@pytest.mark.parametrize("field,value", [
    ("failure_rate_per_gpu_hour", -1e-5), ("restart_time_s", "600"),
    ("checkpoint_write_gbytes_per_s_per_node", 0), ("async_save", 0),
    ("checkpoint_interval_iterations", 0), ("checkpoint_interval_iterations", 10.0),
    ("bogus", 1)])
def test_bad_reliability_values_refused(tmp_path, field, value):
    from core.cli import main
    from core.io.session import session_to_json
    doc = json.loads(session_to_json(llama3_405b_session()))
    doc["reliability"][field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError):
        Session.from_dict({k: v for k, v in doc.items() if k not in ("format", "version")})
    assert main(["simulate", str(path)]) == 2


def test_set_reaches_reliability(capsys):
    from core.cli import main
    assert main(["simulate", "resources/examples/gpt3_1.3b_single_node.json", "--json",
                 "--set", "reliability.failure_rate_per_gpu_hour=0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"]["mtbi_s"] is None and doc["run"]["goodput"] < 1
    assert doc["energy"]["energy_kwh"] > 0


def test_report_prints_a_given_checkpoint_interval(capsys):
    """reliability.checkpoint_interval_iterations set (Megatron-LM's --save-interval): the
    report says so; it raised formatting the Daly and Young figures, None for a given interval."""
    from core.cli import main
    ex = "resources/examples/gpt3_1.3b_single_node.json"
    assert main(["simulate", ex, "--set", "reliability.checkpoint_interval_iterations=500"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Checkpoint interval every 500 iterations (" in out and "given);" in out
    assert main(["simulate", ex, "--json", "--set",
                 "reliability.checkpoint_interval_iterations=500"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert (run["checkpoint_interval_iterations"], run["checkpoint_interval_rule"],
            run["daly_interval_s"]) == (500, "given", None)


def test_a_job_that_never_finishes_is_refused(tmp_path, capsys):
    from core.cli import main
    from core.io.session import session_to_json
    doc = json.loads(session_to_json(llama3_405b_session(failure_rate_per_gpu_hour=0.5)))
    path = tmp_path / "doomed.json"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "reliability.failure_rate_per_gpu_hour" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("t,p,d,cp,g", [
    (1, 2, 3, 1, 8),   # 6 GPUs on one node of 8: the whole checkpoint, not 8 shares of 3 GPUs
    (1, 3, 3, 1, 8),   # 3-GPU stages on 8-GPU nodes: a node holds 2 stages and part of a third
    (1, 3, 2, 2, 6),   # 4-GPU stages on 6-GPU nodes: stage boundaries inside nodes
    (2, 2, 3, 1, 4),   # 6-GPU stages on 4-GPU nodes
])
def test_checkpoint_per_node_is_the_most_any_node_writes_in_megatron_rank_order(t, p, d, cp, g):
    """Ranks run tp fastest, then cp, dp, pp outermost: rank r holds stage r // (t*cp*d) and
    writes that stage's state over its GPUs; node n holds ranks n*g .. n*g+g-1. The per-node
    figure is the most any node holds, and never more than the checkpoint."""
    m = MODEL_PRESETS["GPT-3 1.3B"]
    pl = _plan(tensor_parallel=t, pipeline_parallel=p, data_parallel=d, context_parallel=cp,
               global_batch_size=12 * d)
    size = checkpoint_size(m, pl, gpus_per_host=g)
    gps = t * cp * d
    share = np.repeat(np.asarray(size.stage_bytes) / gps, gps)
    want = max(share[i:i + g].sum() for i in range(0, len(share), g))
    assert size.per_node_bytes <= size.total_bytes * (1 + 1e-12)
    assert size.per_node_bytes == pytest.approx(want, rel=1e-12)


def test_a_gb200_checkpoint_is_written_per_host_of_4_not_per_rack():
    """A GB200 NVL72 rack (cluster.gpus_per_node 72) is 18 hosts of 4 GPUs, each with its own
    storage link (core.plan.cluster.gpus_per_host): the save takes the most one host of 4
    consecutive ranks writes over the per-host bandwidth, 18 times less than a rack's share
    when every rank writes an equal part."""
    from core.sim.goodput import run_goodput
    from core.sim.simulate import simulate
    m = MODEL_PRESETS["GPT-3 1.3B"]
    pl = _plan(tensor_parallel=1, pipeline_parallel=1, data_parallel=144,
               global_batch_size=144)
    s = Session(m, pl, ClusterConfig("GB200-NVL72", 72), CostConfig(2.0, 2048 * 144 * 10))
    g = run_goodput(s, simulate(s).report)
    host = checkpoint_size(m, pl, gpus_per_host=4)
    assert g.checkpoint_bytes_per_node == pytest.approx(host.per_node_bytes, rel=1e-12)
    assert host.per_node_bytes == pytest.approx(host.total_bytes * 4 / 144, rel=1e-12)
    assert checkpoint_size(m, pl, gpus_per_host=72).per_node_bytes == pytest.approx(
        18 * host.per_node_bytes, rel=1e-12)


def test_report_prints_a_small_expected_count(capsys):
    """A single-node run expects well under one interruption; the report prints it to three
    significant digits (core.util.text.format_amount), as --json gives it, not rounded to "0"."""
    import re

    from core.cli import main
    ex = "resources/examples/gpt3_1.3b_single_node.json"
    assert main(["simulate", ex, "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["run"]["expected_interruptions"]
    assert 0 < expected < 1
    assert main(["simulate", ex]) == 0
    out = " ".join(capsys.readouterr().out.split())
    printed = re.search(r"([\d.,]+) expected in the run", out).group(1)
    assert printed == f"{expected:.3g}" and float(printed) > 0


def test_no_checkpoint_saves_nothing_and_a_failure_restarts_the_run():
    """checkpoint_interval_iterations 2^40 is no checkpoint at all (a Megatron-LM launch without
    --save, a Megatron-Bridge run_config.yaml with checkpoint.save null; docs/goodput.md): the
    run is one segment without a save (Daly's E[x] of the whole work). It was charged one save
    at the end: a 50-iteration Bridge benchmark of Llama 3 70B on 64 H100s read "1 saves,
    checkpoints cost 10.4%" beside the import's "Megatron-Bridge saves no checkpoint". 2^40 - 1
    (--save-interval 0 with --save) still saves once, at the end."""
    from core.plan.cluster import NO_CHECKPOINT_INTERVAL
    assert NO_CHECKPOINT_INTERVAL == 2 ** 40
    size = CheckpointSize(total_bytes=1e12, per_gpu_bytes=1e9, per_node_bytes=8e9,
                          stage_bytes=[1e12])
    kw = dict(iteration_time_s=10.0, num_iterations=50, num_gpus=64, size=size,
              price_per_gpu_hour_usd=2.0)
    none = goodput(reliability=_rel(checkpoint_interval_iterations=2 ** 40), **kw)
    assert (none.num_checkpoints, none.checkpoint_s, none.gpu_hours_checkpoints) == (0, 0.0, 0.0)
    assert none.checkpoint_interval_rule == "no checkpoint"
    assert none.work_s == 500.0
    assert none.expected_time_s == pytest.approx(segment_expected_s(500.0, none.mtbi_s, 600.0),
                                                 rel=1e-12)
    assert none.work_s + none.restart_s + none.lost_work_s == pytest.approx(
        none.expected_time_s, rel=1e-12)
    end = goodput(reliability=_rel(checkpoint_interval_iterations=2 ** 40 - 1), **kw)
    assert (end.num_checkpoints, end.checkpoint_interval_rule) == (1, "given")
    assert end.checkpoint_s == pytest.approx(8.0)
    assert end.expected_time_s == pytest.approx(segment_expected_s(508.0, end.mtbi_s, 600.0),
                                                rel=1e-12)
    # async saves change nothing when nothing is saved
    a = goodput(reliability=_rel(checkpoint_interval_iterations=2 ** 40, async_save=True), **kw)
    assert a.expected_time_s == none.expected_time_s and a.num_checkpoints == 0


def test_report_says_no_checkpoint(capsys):
    from core.cli import main
    ex = "resources/examples/gpt3_1.3b_single_node.json"
    assert main(["simulate", ex, "--set",
                 f"reliability.checkpoint_interval_iterations={2 ** 40}"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Checkpoint interval none: no checkpoint is saved" in out
    assert "checkpoints cost 0.0%" in out and " saves" not in out.split("Checkpoint interval")[1]


def test_no_failures_lose_exactly_nothing():
    """failure_rate_per_gpu_hour 0: the run is the work and one save at the end, in closed form
    (W + C). The trial's GPT-3 13B on 64 A100s (vtrain simulate --set
    reliability.failure_rate_per_gpu_hour=0) printed "failures 8.22e-10 GPU-hours ($0)": the
    expected time was summed over segments (n T + C) and the lost work taken as that minus W
    minus C, a float residue. Here 286,103 iterations of 10 s and a 181.2 s save, whose
    (n T + C) - n T - C is 1.86e-10 s in float64."""
    n, T = 286_103, 10.0
    assert (n * T + 181.2) - n * T - 181.2 > 0  # the residue the old sum left
    size = CheckpointSize(total_bytes=1e12, per_gpu_bytes=1e9, per_node_bytes=181.2e9,
                          stage_bytes=[1e12])
    g = goodput(iteration_time_s=T, num_iterations=n, num_gpus=64,
                reliability=_rel(failure_rate_per_gpu_hour=0.0), size=size,
                price_per_gpu_hour_usd=2.0)
    C = g.checkpoint_save_s
    assert C == 181.2e9 / 1e9 and g.num_checkpoints == 1 and g.mtbi_s is None
    assert (g.lost_work_s, g.restart_s, g.expected_interruptions) == (0.0, 0.0, 0.0)
    assert (g.gpu_hours_failures, g.cost_usd_failures) == (0.0, 0.0)
    assert g.expected_time_s == g.p10_time_s == g.p90_time_s == n * T + C
    assert g.goodput == n * T / (n * T + C)
    assert g.gpu_hours_checkpoints == C * 64 / 3600


def test_report_counts_one_save_and_no_failures(capsys):
    """The report said "1 saves" (the trial); one save is "1 save", and no failure loses "0
    GPU-hours ($0)"."""
    from core.cli import main
    ex = "resources/examples/gpt3_1.3b_single_node.json"
    assert main(["simulate", ex, "--set", "reliability.failure_rate_per_gpu_hour=0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "once, at the end (no failures)); 1 save Expected time" in out and "1 saves" not in out
    assert "failures 0 GPU-hours ($0) at $" in out
    assert main(["simulate", ex, "--set", "reliability.checkpoint_interval_iterations=1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Checkpoint interval every 1 iteration (" in out
