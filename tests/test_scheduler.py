"""The multi-tenant cluster study: event replay against hand-worked schedules, policies,
trace errors, the throughput table against the simulator, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.cli import main
from core.plan.fields import ConfigError
from core.plan.parallel import PLAN_FIELDS
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.studies.scheduler import (Job, gpu_counts, jobs_from_list, read_jobs, run_schedule, target_index,
                            throughput_table)
from core.sim.simulate import simulate
from tests.conftest import ROOT

TRACE = ROOT / "resources" / "traces" / "jobs_trace.json"

COUNTS = [1, 2, 4, 8]
#: tokens/s at 1, 2, 4, 8 GPUs: per GPU 100, 95, 85, 62.5
TPS = np.array([100.0, 190.0, 340.0, 500.0])


def job(name, arrival_h, tokens, gpus):
    return Job(name, arrival_h, MODEL_PRESETS["GPT-3 1.3B"], 64, tokens, gpus)


def table(n):
    return np.tile(TPS, (n, 1))


def test_one_job_on_an_empty_cluster_runs_at_once_for_tokens_over_throughput():
    r = run_schedule([job("a", 2.0, 3600 * 500 * 3, 8)], table(1), COUNTS, 8, "requested")
    (run,) = r.runs
    assert (run.start_h, run.end_h, run.gpus) == (2.0, 5.0, 8)  # 3 hours at 500 tokens/s
    m = r.metrics()
    assert m["mean_jct_h"] == 3.0 and m["mean_wait_h"] == 0.0 and m["makespan_h"] == 3.0
    assert m["utilization"] == 1.0 and m["gpu_hours"] == 24.0


def test_first_come_first_served_and_backfilling():
    # a takes half the cluster for 10 h; b wants all of it; c, small, arrives next
    jobs = [job("a", 0.0, 3600 * 340 * 10, 4), job("b", 0.5, 3600 * 500 * 2, 8),
            job("c", 1.0, 3600 * 100 * 1, 1)]
    fifo = {x.job.name: x for x in run_schedule(jobs, table(3), COUNTS, 8, "requested").runs}
    assert fifo["b"].start_h == 10.0 and fifo["b"].end_h == 12.0
    assert fifo["c"].start_h == 12.0 and fifo["c"].end_h == 13.0  # waits behind b
    bf = {x.job.name: x for x in run_schedule(jobs, table(3), COUNTS, 8, "requested",
                                              backfill=True).runs}
    assert bf["c"].start_h == 1.0 and bf["c"].end_h == 2.0  # fills the free half at once
    assert bf["b"].start_h == 10.0


def test_efficient_cuts_a_request_to_where_gpus_still_pay():
    j = job("a", 0.0, 3600 * 340, 8)
    # per GPU relative to the best: 1, .95, .85, .625 -> at 80 %: 4 GPUs; at 90 %: 2
    assert COUNTS[target_index(j, np.array(COUNTS), TPS, 0.8)] == 4
    assert COUNTS[target_index(j, np.array(COUNTS), TPS, 0.9)] == 2
    (run,) = run_schedule([j], table(1), COUNTS, 8, "efficient").runs
    assert run.gpus == 4 and run.end_h == pytest.approx(1.0)
    # never more than the request
    assert COUNTS[target_index(job("b", 0, 1, 2), np.array(COUNTS), TPS, 0.5)] == 2


def test_adaptive_starts_on_half_its_target_rather_than_wait():
    jobs = [job("a", 0.0, 3600 * 340 * 10, 4), job("b", 1.0, 3600 * 190 * 2, 4),
            job("c", 1.5, 3600 * 100, 4)]
    runs = {x.job.name: x for x in run_schedule(jobs, table(3), COUNTS, 6, "adaptive").runs}
    assert runs["b"].start_h == 1.0 and runs["b"].gpus == 2  # 2 free: half of its 4
    assert runs["c"].start_h == 3.0  # nothing free until b ends (a holds 4 for 10 h)
    eff = {x.job.name: x for x in run_schedule(jobs, table(3), COUNTS, 6, "efficient").runs}
    assert eff["b"].start_h == 10.0 and eff["b"].gpus == 4


def test_a_job_with_no_plan_is_reported_not_scheduled():
    tps = table(2)
    tps[1] = 0.0
    r = run_schedule([job("a", 0, 100, 1), job("b", 0, 100, 1)], tps, COUNTS, 8, "requested")
    assert r.unrunnable == ["b"] and [x.job.name for x in r.runs] == ["a"]


@pytest.mark.parametrize("policy, kw, needle", [
    ("fastest", {}, "--policy"),
    ("efficient", {"min_efficiency": 0.0}, "--min-efficiency"),
])
def test_bad_policy_arguments(policy, kw, needle):
    with pytest.raises(ConfigError, match=needle):
        run_schedule([job("a", 0, 1, 1)], table(1), COUNTS, 8, policy, **kw)


def test_request_above_the_cluster_is_an_error():
    with pytest.raises(ConfigError, match="a.requested_gpus: 16 is more than the cluster's 8"):
        run_schedule([job("a", 0, 1, 16)], table(1), COUNTS, 8, "requested")


def test_trace_errors_name_the_job_and_key():
    with pytest.raises(ConfigError) as info:
        jobs_from_list([{"arrival_h": 0, "model": "GPT-9", "global_batch_size": 8, "tokens": 1,
                         "requested_gpus": 8},
                        {"arrival_h": -1, "model": "GPT-3 1.3B", "global_batch_size": 8,
                         "tokens": 1, "requested_gpus": 8, "colour": "red"}])
    fields = [e.field for e in info.value.errors]
    assert "trace[0].model" in fields and "trace[1].arrival_h" in fields
    assert "trace[1].colour" in fields
    with pytest.raises(ConfigError, match="non-empty JSON list"):
        jobs_from_list({})


def test_a_session_given_as_the_trace_is_named_and_pointed_to_cluster(tmp_path, capsys):
    """New-user trial: ``vtrain schedule SESSION.json`` said only "must be a non-empty JSON list
    of jobs". A JSON object whose ``format`` is ``vtrain-session`` is named as a session, with
    what a trace is and where a session goes (--cluster), exit 2, no traceback."""
    session = ROOT / "resources" / "examples" / "gpt3_175b.json"
    assert json.loads(session.read_text())["format"] == "vtrain-session"
    with pytest.raises(ConfigError) as info:
        read_jobs(str(session))
    (e,) = info.value.errors
    assert e.field == "gpt3_175b.json"
    assert e.message.startswith('is a vtrain session ("format": "vtrain-session"), not a job trace: '
                                "a job trace is a JSON list of jobs")
    assert "docs/study_scheduler.md" in e.message
    assert e.message.endswith(f"vtrain schedule TRACE.json --gpus N --cluster {session}")
    assert main(["schedule", str(session), "--gpus", "64"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("vtrain: error: gpt3_175b.json: is a vtrain session") and "Traceback" not in err
    # another JSON object is no session: the list rule as before
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ConfigError, match="o.json: must be a non-empty JSON list of jobs"):
        read_jobs(str(other))


def test_gpu_counts():
    assert gpu_counts(64, 8, [24, 128]) == [1, 2, 4, 8, 16, 24, 32, 64]


def test_throughput_table_is_the_best_simulated_plan_at_each_count():
    jobs = read_jobs(str(TRACE))[:1]  # GPT-3 1.3B, B=512
    session = Session()
    counts = [8, 16]
    tps, plans = throughput_table(jobs, session, counts, hold_session_values=True)
    for k, n in enumerate(counts):
        p = plans[0][k]
        assert p["num_gpus"] == n and p["fits_in_memory"]
        s = session.copy()
        s.model = jobs[0].model
        s.plan.global_batch_size = 512
        for key in ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size",
                    "schedule", "recompute"):
            setattr(s.plan, key, p[key])
        r = simulate(s).report
        assert tps[0, k] == pytest.approx(512 * 2048 / r.iteration_time_s, rel=1e-9)
    assert tps[0, 1] > tps[0, 0]


def test_throughput_table_searches_the_default_sweep_space():
    """Without hold_session_values each job's sweep is vtrain sweep's default space (it held
    Megatron-LM's argparse defaults, ZeRO 0 and no overlaps, the sweep fault of issue 27's kind):
    at each count its best plan is the simulated time of that whole plan and at least as fast
    as the held search's, here faster, with switches the held search never tries."""
    jobs = read_jobs(str(TRACE))[:1]  # GPT-3 1.3B, B=512
    session = Session()
    counts = [8]
    held, _ = throughput_table(jobs, session, counts, hold_session_values=True)
    tps, plans = throughput_table(jobs, session, counts)
    p = plans[0][0]
    assert tps[0, 0] > held[0, 0] * 1.01
    assert p["zero_stage"] > 0 or p["overlap_grad_reduce"] or p["sequence_parallel"]
    s = session.copy()
    s.model = jobs[0].model
    s.plan.global_batch_size = 512
    for key in PLAN_FIELDS:
        if key in p:
            setattr(s.plan, key, p[key])
    r = simulate(s).report
    assert tps[0, 0] == pytest.approx(512 * 2048 / r.iteration_time_s, rel=1e-9)


def test_cli_json(capsys):
    assert main(["schedule", str(TRACE), "--gpus", "1024", "--json",
                 "--hold-session-values"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hold_session_values"] is True
    assert [p["policy"] for p in doc["policies"]] == ["requested", "efficient", "adaptive"]
    req = doc["policies"][0]
    assert len(req["runs"]) == 12
    by_name = {j["name"]: j for j in doc["jobs"]}
    for run in req["runs"]:
        assert run["gpus"] == by_name[run["job"]]["requested_gpus"]
    eff = doc["policies"][1]
    assert eff["metrics"]["gpu_hours"] <= req["metrics"]["gpu_hours"]


def test_cli_names_the_network_and_the_switches_the_sweeps_keep(capsys):
    """The default cluster's network (the GPU's reference node: 8 x 200 Gb/s) and the plan
    switches every job's sweep keeps are printed (the help once gave 800 Gb/s)."""
    assert main(["schedule", str(TRACE), "--gpus", "1024", "--hold-session-values"]) == 0
    head = capsys.readouterr().out.splitlines()[:2]
    assert "(8 per node, 1,600 Gb/s per node)" in head[0]
    assert head[1].startswith("each job's plans keep: precision=bf16 ") and "zero_stage=0" in head[1]


def test_cli_says_the_sweeps_search_the_default_space(tmp_path, capsys):
    trace = tmp_path / "one.json"
    trace.write_text(json.dumps([{"name": "j", "arrival_h": 0, "num_layers": 2,
                                  "hidden_size": 256, "num_attention_heads": 4,
                                  "seq_length": 256, "vocab_size": 1000,
                                  "global_batch_size": 16, "tokens": 1e8,
                                  "requested_gpus": 8}]))
    assert main(["schedule", str(trace), "--gpus", "8", "--policies", "requested"]) == 0
    line = " ".join(capsys.readouterr().out.split())
    assert ("each job's plans: vtrain sweep's default space (t, p, d, b, schedule, "
            "recomputation, sequence parallelism, ZeRO stage, cp, overlaps and fusions swept; "
            "precision=bf16 held;") in line
    assert main(["schedule", str(trace), "--gpus", "8", "--policies", "requested",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hold_session_values"] is False


def test_cli_bad_policy_exits_2(capsys):
    assert main(["schedule", str(TRACE), "--gpus", "64",
                 "--policies", "random"]) == 2
    assert "--policies" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["requested,,efficient", "requested,", ""])
def test_cli_empty_policy_item_exits_2(capsys, text):
    assert main(["schedule", str(TRACE), "--gpus", "64", "--policies", text]) == 2
    assert f"--policies: {text!r} has an empty item" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["requested", "efficient", "adaptive"])
@pytest.mark.parametrize("backfill", [False, True])
def test_random_traces_never_overcommit_and_keep_fifo_without_backfill(policy, backfill):
    rng = np.random.default_rng(7)
    n = 40
    jobs = [job(f"j{i}", float(a), float(t), int(g)) for i, (a, t, g) in enumerate(zip(
        np.round(rng.uniform(0, 20, n), 1), rng.uniform(1e5, 1e7, n), rng.choice(COUNTS, n)))]
    tps = TPS[None, :] * rng.uniform(0.5, 2.0, (n, 1))
    r = run_schedule(jobs, tps, COUNTS, 8, policy, backfill=backfill)
    assert len(r.runs) == n
    events = sorted([(x.start_h, 1, x.gpus) for x in r.runs] + [(x.end_h, 0, -x.gpus) for x in r.runs])
    in_use = np.cumsum([g for _, _, g in events])
    assert in_use.max() <= 8  # ends sort before starts at the same instant
    for x in r.runs:
        assert x.start_h >= x.job.arrival_h
        k = COUNTS.index(x.gpus)
        assert x.end_h - x.start_h == pytest.approx(x.job.tokens / x.tokens_per_s / 3600)
        assert x.tokens_per_s == tps[int(x.job.name[1:]), k]
        if policy != "adaptive":
            assert x.gpus <= x.job.requested_gpus
    if not backfill:  # first come, first served: starts follow arrivals (ties: trace order)
        by_arrival = sorted(r.runs, key=lambda x: (x.job.arrival_h, int(x.job.name[1:])))
        starts = [x.start_h for x in by_arrival]
        assert starts == sorted(starts)


def test_a_request_with_no_plan_runs_on_the_nearest_count_and_is_reported():
    tps = table(2)
    tps[:, 2] = 0.0  # nothing fits on 4 GPUs
    tps[1, :2] = 0.0  # job b fits on 8 only
    jobs = [job("a", 0, 3600 * 190, 4), job("b", 0, 3600 * 500, 4)]
    r = run_schedule(jobs, tps, COUNTS, 16, "requested")
    assert [(x.job.name, x.gpus) for x in r.runs] == [("a", 2), ("b", 8)]
    assert r.adjusted == [("a", 4, 2), ("b", 4, 8)]
    eff = run_schedule(jobs, tps, COUNTS, 16, "efficient")
    assert eff.adjusted == [("b", 4, 8)]  # a at 2 is within its request


def test_trace_rejects_duplicate_names_and_a_preset_with_shape_keys():
    base = {"arrival_h": 0, "global_batch_size": 8, "tokens": 1, "requested_gpus": 8}
    with pytest.raises(ConfigError) as info:
        jobs_from_list([{**base, "name": "a", "model": "GPT-3 1.3B"},
                        {**base, "name": "a", "model": "GPT-3 1.3B", "num_layers": 3},
                        {**base, "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 15,
                         "seq_length": 2048, "vocab_size": 50257}])
    msgs = [str(e) for e in info.value.errors]
    assert any("trace[1].name" in m and "unique" in m for m in msgs)
    assert any("trace[1].model: give a preset or num_layers, not both" in m for m in msgs)
    assert any(m.startswith("trace[2].hidden_size") for m in msgs)


def test_gpu_counts_reject_a_zero_node_size():
    with pytest.raises(ValueError):
        gpu_counts(16, 0)


def test_cli_plans_carry_no_figures_of_another_token_budget(capsys):
    assert main(["schedule", str(TRACE), "--gpus", "1024", "--json", "--policies", "requested",
                 "--hold-session-values"]) == 0
    run = json.loads(capsys.readouterr().out)["policies"][0]["runs"][0]
    assert "training_days" not in run["plan"] and "cost_usd" not in run["plan"]


def test_cli_policy_names_are_the_schedulers():
    """The parser spells the policies out (no scheduler import for ``vtrain --help``)."""
    from core.studies.scheduler import POLICIES
    from core.cli.schedule import POLICY_NAMES
    assert POLICY_NAMES == POLICIES


@pytest.mark.parametrize("extra, option", [(["--min-efficiency", "2.5"], "--min-efficiency"),
                                           (["--min-efficiency", "1.0000001"], "--min-efficiency")])
def test_a_policy_argument_out_of_range_is_refused_before_any_sweep(monkeypatch, capsys, extra,
                                                                    option):
    # --min-efficiency 2.5 on 512 GPUs was refused only after every job's sweeps (13.7 s)
    from core.studies import scheduler

    def no_sweep(*args, **kw):
        raise AssertionError("a sweep ran before the arguments were checked")

    monkeypatch.setattr(scheduler, "throughput_table", no_sweep)
    assert main(["schedule", str(TRACE), "--gpus", "512", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vtrain: error: {option}: ") and "must be in (0, 1]" in err
    with pytest.raises(ConfigError, match="--min-efficiency"):
        scheduler.schedule_study(read_jobs(str(TRACE)), Session(), 512, min_efficiency=float("nan"))


def test_a_job_plan_above_the_throughput_ceiling_carries_its_departures(capsys):
    """GPT-3 13B (B=1024) on 256 A100s, the Plan tab's switches held: its fastest plan's
    predicted model FLOP/s per GPU (Eq. 3's count over the predicted time) is above the
    highest measured among the A100 store's calibration runs, so the plan carries that
    departure (the study printed 482,269 tokens/s with no caution); the jobs table marks it
    and names it under the table, and --json gives it per job and per run."""
    from core.cli.schedule import job_cells, outside_calibration_lines
    from core.sim.simulate import session_profile
    from core.store.calibration_range import throughput_ceiling
    from core.studies.scheduler import job_rows

    session = Session()
    jobs = [j for j in read_jobs(str(TRACE)) if j.name == "gpt3-13b-a"]
    counts = [256]
    tps, plans = throughput_table(jobs, session, counts, hold_session_values=True)
    plan = plans[0][0]
    store = session_profile(session)
    ceiling = throughput_ceiling(store.residuals, "A100-SXM4-80GB", "bf16")
    # the plan's model FLOP/s per GPU: MFU times the A100's dense BF16 peak (312 TFLOP/s,
    # the data sheet's)
    peak = store.peak_flops["bf16"]
    assert peak == 312e12
    flops = plan["mfu"] * peak
    assert flops > ceiling.flops_per_s
    assert plan["within_calibration"] is False
    deps = plan["calibration_departures"]
    assert f"predicted MFU {plan['mfu'] * 100:.0f} %" in deps
    assert f"highest measured MFU {ceiling.flops_per_s / peak * 100:.0f} %" in deps
    assert f"{ceiling.file} row {ceiling.row}" in deps
    (row,) = job_rows(jobs, counts, tps, plans, 0.8)
    assert (row.efficient_gpus, row.tokens_per_s) == (256, tps[0, 0])
    assert row.within_calibration is False and row.calibration_departures == deps
    assert job_cells(row)[-1] == f"{tps[0, 0]:,.0f} ⚠"
    assert outside_calibration_lines([row]) == [
        "⚠ 1 of 1 jobs' plans at the efficient count leave what the profile was calibrated "
        "on (error band of unknown coverage):", f"gpt3-13b-a: {deps}"]
    # the run under every policy carries the same plan
    r = run_schedule(jobs, tps, counts, 256, "requested", plans=plans)
    assert r.runs[0].within_calibration is False and r.runs[0].calibration_departures == deps


def test_cli_marks_and_names_the_plans_outside_calibration(capsys, tmp_path):
    """The printed jobs table puts ⚠ after each such job's tokens/s and a footnote names what
    its plan leaves; --json has the same per job and per run."""
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps([{"name": "big", "arrival_h": 0, "model": "GPT-3 13B",
                                  "global_batch_size": 1024, "tokens": 1e9,
                                  "requested_gpus": 256}]))
    argv = ["schedule", str(trace), "--gpus", "256", "--policies", "requested",
            "--hold-session-values"]
    assert main(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (j,) = doc["jobs"]
    deps = j["calibration_departures"]
    assert j["within_calibration"] is False and "highest measured MFU 46 %" in deps
    assert j["efficient_gpus"] == 256 and j["efficient_plan"]["calibration_departures"] == deps
    (run,) = doc["policies"][0]["runs"]
    assert run["within_calibration"] is False and run["calibration_departures"] == deps
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{j['tokens_per_s'][-1]:,.0f} ⚠" in out
    assert "⚠ 1 of 1 jobs' plans at the efficient count leave what the profile was calibrated" in out
    assert "highest measured MFU 46 %" in " ".join(out.split())
