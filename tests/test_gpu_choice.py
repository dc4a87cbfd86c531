"""Which GPUs to rent: price sheets, the per-kind sweeps and their combined front of expected
days against expected dollars (core.io.price_sheet, core.studies.gpu_choice, vtrain sweep
--gpus-from)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from core.cli import main
from core.io.price_sheet import PriceRow, PriceSheet, parse_price_sheet, read_price_sheet
from core.io.session import save_session
from core.plan.cluster import ClusterConfig, CostConfig, ReliabilityConfig
from core.plan.fields import ConfigError
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, plan_key
from core.plan.session import Session
from core.sim.goodput import checkpoint_size, goodput, run_goodput
from core.sim.simulate import simulate
from core.studies.gpu_choice import choose_gpus, row_session
from core.studies.sweep import SweepSpace, run_sweep
from core.studies.sweep.result import best_row
from tests.conftest import ROOT

TINY = ModelConfig("tiny", num_layers=4, hidden_size=256, num_attention_heads=8,
                   ffn_hidden_size=None, seq_length=256, vocab_size=1000)
HEADER = "gpu,price_per_gpu_hour_usd,max_gpus,gpus_per_node,source,date\n"


def tiny_session(gpu="A100-SXM4-80GB") -> Session:
    # a failure rate high enough that goodput differs between GPU counts
    return Session(TINY, ParallelPlan(1, 1, 1, 1, 16, "1f1b", "none", "bf16"),
                   ClusterConfig(gpu=gpu, gpus_per_node=8),
                   CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=2e11),
                   ReliabilityConfig(failure_rate_per_gpu_hour=1e-2, restart_time_s=600.0))


SHEET = [PriceRow("A100-SXM4-80GB", 0.3, 8, row=2), PriceRow("H100-SXM5-80GB", 2.9, 4, row=3)]


def _brute_front(days: np.ndarray, cost: np.ndarray) -> set[int]:
    """Points no other point dominates (both minimized), by pairwise comparison."""
    out = set()
    for i in range(days.size):
        if not any(days[j] <= days[i] and cost[j] <= cost[i]
                   and (days[j] < days[i] or cost[j] < cost[i]) for j in range(days.size)):
            out.add(i)
    return out


def _expected_points(s, res, mask, n_iter, price):
    """``(plan index, expected days, expected dollars)`` of each plan of sweep ``res`` where
    ``mask``, costed with failures and checkpoints (:func:`goodput`) at ``price`` per GPU-hour."""
    for i in np.flatnonzero(mask):
        g = goodput(iteration_time_s=float(res.iteration_time_s[i]), num_iterations=n_iter,
                    num_gpus=int(res.num_gpus[i]), reliability=s.reliability,
                    size=checkpoint_size(s.model, res.plans[i], 8),
                    price_per_gpu_hour_usd=price, num_samples=1)
        yield int(i), g.expected_time_s / 86400, g.expected_time_s * res.num_gpus[i] / 3600 * price


def test_combined_front_is_the_front_of_the_union_of_exhaustive_sweeps():
    session = tiny_session()
    choice = choose_gpus(session, PriceSheet(SHEET))
    # independently: each kind's exhaustive sweep, every plan that fits costed with failures
    keys, days, cost = [], [], []
    n_iter = math.ceil(2e11 / (16 * 256))
    for r in SHEET:
        s = session.copy()
        s.cluster = ClusterConfig(gpu=r.gpu, gpus_per_node=8)
        s.cost = dataclasses.replace(s.cost, price_per_gpu_hour_usd=r.price_per_gpu_hour_usd)
        space = dataclasses.replace(SweepSpace.default_for(s), max_gpus=r.max_gpus,
                                    max_data_parallel=None)  # the CLI's default space
        res = run_sweep(s, space, prune=False)
        for i, d, c in _expected_points(s, res, res.fits_in_memory, n_iter,
                                        r.price_per_gpu_hour_usd):
            keys.append((r.gpu, plan_key(res.plans[i])))
            days.append(d)
            cost.append(c)
    days_a, cost_a = np.array(days), np.array(cost)
    want = {keys[i]: (days_a[i], cost_a[i]) for i in _brute_front(days_a, cost_a)}
    got = {(choice.sheet.rows[int(choice.row[k])].gpu,
            plan_key(choice.sweeps[int(choice.row[k])].plans[int(choice.index[k])])):
           (choice.expected_days[k], choice.expected_cost_usd[k]) for k in choice.front}
    assert choice.undecided == 0
    assert got.keys() == want.keys()
    for key, (d, c) in want.items():
        assert got[key][0] == pytest.approx(d, rel=1e-12)
        assert got[key][1] == pytest.approx(c, rel=1e-12)
    kinds = {k for k, _ in got}
    assert kinds == {"A100-SXM4-80GB", "H100-SXM5-80GB"}  # both kinds reach the front here
    # fastest first, and the best by days and by dollars are the front's two ends
    d = choice.expected_days[choice.front]
    assert np.all(np.diff(d) >= 0)
    assert choice.best_by_days == choice.front[0]
    assert choice.best_by_dollars == choice.front[-1]


def test_a_front_point_is_what_simulate_and_the_goodput_report_say():
    choice = choose_gpus(tiny_session(), PriceSheet(SHEET))
    k = int(choice.front[0])
    s = choice.session_for(k)
    assert s.cluster.gpu == choice.sheet.rows[int(choice.row[k])].gpu
    rep = simulate(s).report
    g = rep.run  # the report's own goodput section
    assert g.expected_time_s == run_goodput(s, rep).expected_time_s
    p = choice.point(k)
    assert p["iteration_time_s"] == pytest.approx(rep.iteration_time_s, rel=1e-9)
    assert p["expected_days"] == pytest.approx(g.expected_time_s / 86400, rel=1e-9)
    assert p["goodput"] == pytest.approx(g.goodput, rel=1e-9)
    assert p["expected_cost_usd"] == pytest.approx(
        g.expected_time_s * rep.num_gpus / 3600 * s.cost.price_per_gpu_hour_usd, rel=1e-9)
    assert p["days_p10"] <= p["days_p90"]
    assert 0 < p["goodput"] < 1


def test_one_kind_sheet_reproduces_vtrain_sweep_at_that_price(tmp_path, capsys):
    session = tiny_session("H100-SXM5-80GB")
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    assert main(["sweep", str(cfg), "--max-gpus", "4", "--price-per-gpu-hour", "3.25",
                 "--json", "--workers", "1"]) == 0
    plain = json.loads(capsys.readouterr().out)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,4,,test,2026-01-01\n")
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--json", "--workers", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    choice = choose_gpus(session, read_price_sheet(sheet))
    own = choice.sweeps[0].to_dict()
    assert [r["cost_usd"] for r in own["pareto"]] == [r["cost_usd"] for r in plain["pareto"]]
    assert [r["training_days"] for r in own["pareto"]] == [r["training_days"]
                                                         for r in plain["pareto"]]
    assert own["price_per_gpu_hour_usd"] == 3.25
    # the CLI's front is the library's; each point's failure-free days are the sweep's
    assert [p["expected_days"] for p in doc["front"]] == [choice.point(k)["expected_days"]
                                                          for k in choice.front]
    plain_days = {r["training_days"] for r in plain["pareto"]}
    front_days = {p["training_days_without_failures"] for p in doc["front"]}
    assert front_days <= {r["training_days"] for r in own["pareto"]} | front_days
    assert doc["best_by_days"]["expected_days"] == min(p["expected_days"] for p in doc["front"])
    assert plain_days  # the plain sweep found a front
    assert doc["undecided"] == 0


def test_each_rows_counts_are_vtrain_sweeps_plans_that_fit_and_those_simulated(tmp_path, capsys):
    """A row's line said ``327,738 plans, 8,160 fit and simulated`` where vtrain sweep of the
    same kind says 73,238 fit in memory, 8,160 of them simulated: it read as if 8,160 fit.
    The line now says both as vtrain sweep does, and --json's rows have ``num_fit``
    (GpuChoice.counts' docstring promised it), equal to the plain sweep's."""
    session = tiny_session("H100-SXM5-80GB")
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    assert main(["sweep", str(cfg), "--max-gpus", "4", "--price-per-gpu-hour", "3.25",
                 "--json", "--workers", "1"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["num_fit"] > plain["num_feasible"] > 0  # some pruned: the counts differ
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,4,,test,2026-01-01\n")
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--json", "--workers", "1"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert (row["num_plans"], row["num_fit"], row["num_feasible"], row["num_pruned"]) == (
        plain["num_plans"], plain["num_fit"], plain["num_feasible"], plain["num_pruned"])
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (f"{plain['num_plans']:,} plans, {plain['num_fit']:,} fit in memory, "
            f"{plain['num_feasible']:,} of them simulated") in text
    assert "fit and simulated" not in text


def test_a_best_point_megatron_lm_refuses_is_said_as_vtrain_sweep_says_it(tmp_path, capsys):
    """A Megatron-LM session's --gpus-from picked te cross-entropy plans (the default space's,
    Megatron-Bridge's recipes) without a word, where vtrain sweep says Megatron-LM cannot run
    its fastest plan and the options that keep to plans it runs. Now said of the best points;
    with those options every point is one Megatron-LM runs, and nothing is said."""
    from core.io.megatron.export import megatron_blockers
    cfg = tmp_path / "s.json"
    save_session(tiny_session("H100-SXM5-80GB"), cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,2,,test,2026-01-01\n")
    base = ["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1",
            "--pipeline-parallel", "1"]
    assert main(base) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Megatron-LM cannot run the best plan by fewest days and by fewest dollars "
            "(--cross-entropy-fusion-impl te is disabled; use native), though it runs the "
            "session's (other frameworks run it): --cross-entropy-fusion native --schedules "
            "1f1b,interleaved keeps the sweeps to plans it runs") in text
    assert main(base + ["--cross-entropy-fusion", "native"]) == 0
    assert "Megatron-LM cannot run" not in capsys.readouterr().out
    choice = choose_gpus(tiny_session("H100-SXM5-80GB"), read_price_sheet(sheet),
                         space_for=lambda row: SweepSpace(max_gpus=2, pipeline_parallel=(1,),
                                                          cross_entropy_fusion=("native",)))
    assert not megatron_blockers(choice.session_for(choice.best_by_days))


def test_row_session_keeps_the_sessions_own_cluster_and_resets_another_kinds():
    s = tiny_session()
    s.cluster.inter_node_bandwidth_gbits_per_s = 800.0
    same = row_session(s, PriceRow("A100-SXM4-80GB", 1.0, 8))
    assert same.cluster == s.cluster and same.cost.price_per_gpu_hour_usd == 1.0
    other = row_session(s, PriceRow("GB200-NVL72", 9.0, 72))
    assert (other.cluster.gpu, other.cluster.gpus_per_node) == ("GB200-NVL72", 72)
    assert other.cluster.inter_node_bandwidth_gbits_per_s is None
    assert s.cluster.gpu == "A100-SXM4-80GB"  # the session is not changed


@pytest.mark.parametrize("line, column", [
    ("Z100,2,8,,,", "gpu"),
    ("H100 SXM,abc,8,,,", "price_per_gpu_hour_usd"),
    ("H100 SXM,0,8,,,", "price_per_gpu_hour_usd"),
    ("H100 SXM,nan,8,,,", "price_per_gpu_hour_usd"),
    ("H100 SXM,2,0,,,", "max_gpus"),
    ("H100 SXM,2,8.5,,,", "max_gpus"),
    ("H100 SXM,2,,,,", "max_gpus"),
    ("H100 SXM,2,8,16,,", "gpus_per_node"),
    ("H100 SXM,2,8,8,,2026-13-01", "date"),
    ("H100 SXM,2,8,8,,2025-02-29", "date"),  # read as a date before: no 29 February in 2025
    ("H100 SXM,2,8,8,,2026-04-31", "date"),
    ("missing.h5,2,8,,,", "gpu"),
    ("H100 SXM,1_5,8,,,", "price_per_gpu_hour_usd"),  # float() read it as 15
    ("H100 SXM,1e-320,8,,,", "price_per_gpu_hour_usd"),  # was named by GPU kind, not file
])
def test_malformed_rows_are_refused_by_file_row_and_column(tmp_path, line, column):
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + "B200,5,8,,ok,2026-01\n" + line + "\n")
    with pytest.raises(ConfigError) as info:
        read_price_sheet(path)
    assert [e.field for e in info.value.errors] == [f"{path}: row 3: {column}"]


def test_malformed_header_and_cli_exit_status(tmp_path, capsys):
    with pytest.raises(ConfigError) as info:
        parse_price_sheet("gpu,price,max_gpus\nH100,2,8\n", "p.csv")
    assert {e.field for e in info.value.errors} == {"p.csv: row 1: price",
                                                   "p.csv: row 1: price_per_gpu_hour_usd"}
    with pytest.raises(ConfigError) as info:
        parse_price_sheet(HEADER, "p.csv")
    assert [e.field for e in info.value.errors] == ["p.csv"]
    with pytest.raises(ConfigError) as info:
        parse_price_sheet(HEADER + "H100,2,8,8,a,2026-01,extra\n", "p.csv")
    assert [e.field for e in info.value.errors] == ["p.csv: row 2"]
    cfg = tmp_path / "s.json"
    save_session(tiny_session(), cfg)
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "H100,2,-1,,,\n")
    assert main(["sweep", str(cfg), "--gpus-from", str(bad)]) == 2
    assert f"{bad}: row 2: max_gpus" in capsys.readouterr().err
    assert main(["sweep", str(cfg), "--gpus-from", str(bad), "--max-gpus", "8"]) == 2
    assert main(["sweep", str(cfg), "--gpus-from", str(tmp_path / "none.csv")]) == 2


def test_the_shipped_example_sheet_reads_with_sources_and_dates():
    sheet = read_price_sheet(ROOT / "resources" / "prices" / "example_2026.csv")
    assert [r.gpu for r in sheet.rows] == ["B200-180GB", "H200-SXM-141GB", "H100-SXM5-80GB"]
    assert all(r.source and r.date and r.price_per_gpu_hour_usd > 0 for r in sheet.rows)
    # a price per GPU is the node's list price over its eight GPUs
    assert sheet.rows[0].price_per_gpu_hour_usd == pytest.approx(68.80 / 8, abs=0.005)


def test_overhead_lower_bound_is_below_every_checkpoint_interval():
    from core.sim.goodput import segment_expected_s
    from core.studies.gpu_choice import overhead_lower_bound
    rng = np.random.default_rng(7)
    for _ in range(200):
        C, M, R = rng.uniform(1, 600), rng.uniform(600, 1e6), rng.uniform(0, 3600)
        bound = overhead_lower_bound(C, M, R)
        x = np.geomspace(1e-2, 30 * M, 4001)  # seconds of work per segment
        per_work = segment_expected_s(x + C, M, R) / x
        assert bound <= per_work.min() * (1 + 1e-12)
        assert bound - 1 >= 0.5 * (per_work.min() - 1)  # most of the least overhead
    assert overhead_lower_bound(60.0, math.inf, 600.0) == 1.0


def test_no_point_says_why_none_fits_or_none_finishes(tmp_path, capsys):
    """Without a point the GPU choice says why (here: no plan fits in memory on any kind, a
    64-layer 16k-hidden model on at most 8 GPUs), not "no plan fits" whatever the cause; with
    points, none is given and each carries its sweep row's memory verdict."""
    big = dataclasses.replace(TINY, name="big", num_layers=64, hidden_size=16384,
                              num_attention_heads=128, seq_length=2048, vocab_size=50000)
    session = dataclasses.replace(tiny_session(), model=big)
    choice = choose_gpus(session, PriceSheet(SHEET))
    assert choice.num_points == 0 and choice.best_by_days is None
    assert not any(res.fits_in_memory.any() for res in choice.sweeps)
    assert choice.no_point_reason() == "no plan fits in memory on any GPU kind"
    cfg = tmp_path / "big.json"
    save_session(session, cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,0.3,8,,test,2026-01-01\n")
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "best by fewest days: none (no plan fits in memory on any GPU kind)" in out
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1",
                 "--deadline-days", "30"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("cheapest within 30 expected days: none (no plan fits in memory on any GPU kind)"
            in out)
    fine = choose_gpus(tiny_session(), PriceSheet(SHEET))
    assert fine.no_point_reason() == ""
    for k in range(fine.num_points):
        res = fine.sweeps[int(fine.row[k])]
        assert fine.point(k)["memory_verdict"] == res.memory_verdict[int(fine.index[k])]


def test_plan_space_options_apply_to_every_row(tmp_path, capsys):
    """``--gpus-from`` with plan-space options (--micro-batch-sizes, --schedules, --zero-stages,
    --context-parallel ...) sweeps each row over that space, up to its max_gpus: each row is
    ``vtrain sweep --max-gpus max_gpus`` with the same options (they were dropped silently:
    a front plan had b=1 under --micro-batch-sizes 2,4); --max-work is refused by name, and
    options that leave no valid plan on any row exit 2 saying why, per row."""
    cfg = tmp_path / "s.json"
    save_session(tiny_session(), cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,0.3,8,,test,2026-01-01\n"
                     "H100-SXM5-80GB,2.9,4,,test,2026-01-01\n")
    opts = ["--micro-batch-sizes", "2,4", "--schedules", "1f1b", "--zero-stages", "1",
            "--context-parallel", "1", "--workers", "1"]
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--json"] + opts) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["front"], "the case needs a front"
    labels = [p["plan"].split() for p in doc["front"]]  # "t=1 p=1 d=8 b=2 1f1b ... zero=1"
    assert all(("b=2" in w or "b=4" in w) and "1f1b" in w and "zero=1" in w for w in labels)
    # each row's plan count is vtrain sweep's with the row's budget and the same options
    counts = []
    for gpu, budget in (("A100-SXM4-80GB", 8), ("H100-SXM5-80GB", 4)):
        assert main(["sweep", str(cfg), "--max-gpus", str(budget), "--json",
                     "--set", f"cluster.gpu={gpu}"] + opts) == 0
        counts.append(json.loads(capsys.readouterr().out)["num_plans"])
    assert [r["num_plans"] for r in doc["rows"]] == counts
    # refused by name
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--max-gpus", "5"]) == 2
    assert "--max-gpus: does not apply with --gpus-from" in capsys.readouterr().err
    # no valid plan on any row: exit 2, why per row, not "no plan fits in memory"
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--tensor-parallel", "3",
                 "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "A100-SXM4-80GB: sweep: no valid plan" in err and "--tensor-parallel 3" in err
    assert "H100-SXM5-80GB: sweep: no valid plan" in err and "fits in memory" not in err


def test_the_text_says_what_each_row_held_and_its_sweeps_warnings(tmp_path, capsys):
    """The text output named neither each row's node (a GB200 row of gpus_per_node 8 ran on
    8-GPU nodes, 8 x 400 Gb/s) nor the plan space (--schedules 1f1b was not said), and dropped
    every sweep warning (the row's own: 8 is below the GB200's NVLink domain of 72). Now: the
    sequence length, each row's node and network, vtrain sweep's swept/held lines, and each
    row's warnings, labelled (and in --json per row)."""
    cfg = tmp_path / "s.json"
    save_session(tiny_session(), cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,0.3,16,,test,2026-01-01\n"
                     "GB200-NVL72,2.9,16,8,test,2026-01-01\n")
    opts = ["--micro-batch-sizes", "2", "--schedules", "1f1b", "--zero-stages", "1",
            "--context-parallel", "1", "--tensor-parallel", "2", "--pipeline-parallel", "1",
            "--workers", "1"]
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet)] + opts) == 0
    out = capsys.readouterr().out
    lines = [" ".join(x.split()) for x in out.splitlines()]
    assert lines[0].startswith("tiny, sequence 256, global batch 16,")
    # the reference nodes: 8 x 200 Gb/s for the A100 (DGX A100), 8 x 400 Gb/s for the GB200
    assert lines[1].startswith("A100-SXM4-80GB: $0.30/GPU-hour, up to 16 GPUs, 8 per node "
                               "(1,600 Gb/s per node)")
    assert lines[2].startswith("GB200-NVL72: $2.90/GPU-hour, up to 16 GPUs, 8 per node "
                               "(3,200 Gb/s per node)")
    text = " ".join(lines)
    assert "swept: " in text and "schedule 1f1b (the value given)" in text
    assert ("warning: GB200-NVL72: cluster.gpus_per_node=8 is below the GB200-NVL72's NVLink "
            "domain of 72 GPUs") in text
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--json"] + opts) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["gpus_per_node"], r["node_network_gbits_per_s"]) for r in rows] == [
        (8, 1600.0), (8, 3200.0)]
    assert rows[0]["warnings"] == [] or not any("NVLink domain" in w for w in rows[0]["warnings"])
    assert any("NVLink domain of 72" in w for w in rows[1]["warnings"])
    assert {d["field"] for d in rows[1]["dimensions"]} >= {"schedule", "tensor_parallel"}


def test_a_large_rows_sweep_is_announced_with_its_time_estimate(tmp_path, capsys, monkeypatch):
    """vtrain sweep warns before simulating more than LARGE_SWEEP_WORK pipeline steps, with
    its time estimate; --gpus-from ran each row's sweep silently (Qwen3-30B-A3B on four kinds
    up to 256 GPUs: 25 minutes and 20 GB without a word). Each row now says it, as vtrain
    sweep does, labelled with the row."""
    import core.studies.sweep.bound as bound
    monkeypatch.setattr(bound, "LARGE_SWEEP_WORK", 0)  # every sweep is "large"
    session = tiny_session("H100-SXM5-80GB")
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    assert main(["sweep", str(cfg), "--max-gpus", "4", "--workers", "1", "--json"]) == 0
    plain = capsys.readouterr().err.strip()
    assert plain.startswith("warning: large sweep: the ") and "pipeline steps to simulate" in plain
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,4,,test,2026-01-01\n"
                     "A100-SXM4-80GB,1.5,2,,test,2026-01-01\n")
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--json", "--workers", "1"]) == 0
    lines = [" ".join(x.split()) for x in capsys.readouterr().err.split("warning: ")[1:]]
    # the H100 row's is the plain sweep's own (same model, GPUs and space), labelled
    assert lines[0] == "H100-SXM5-80GB: " + " ".join(plain.removeprefix("warning: ").split())
    assert lines[1].startswith("A100-SXM4-80GB: large sweep: the ") and len(lines) == 2
    # without --json the table says it once, under the front, not on standard error too
    # (new-user trial: each row's warning was printed twice)
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1"]) == 0
    cap = capsys.readouterr()
    assert "large sweep" not in cap.err
    out = [" ".join(x.split()) for x in cap.out.split("warning: ")[1:]]
    assert [x.split(": large sweep: the ")[0] for x in out if ": large sweep: the " in x] == [
        "H100-SXM5-80GB", "A100-SXM4-80GB"]
    assert out[0].startswith(lines[0])  # the --json run's standard-error note, word for word


def test_a_sweep_out_of_memory_says_what_to_narrow(tmp_path, capsys, monkeypatch):
    """Qwen3-30B-A3B's default space up to 256 GPUs (vtrain sweep --max-gpus 256, or a price
    sheet of four kinds) ran out of memory with "the inputs are too large for this machine",
    which named nothing to change; it now names the options that narrow the space."""
    import core.studies.gpu_choice as gc

    def exhausted(*_a, **_k):
        raise MemoryError
    session = tiny_session("H100-SXM5-80GB")
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,4,,test,2026-01-01\n")
    monkeypatch.setattr(gc, "run_sweep", exhausted)
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("vtrain: error: out of memory: the inputs are too large for this "
                          "machine; narrow the plan space: --gpus N (one count) instead of "
                          "--max-gpus")
    assert "a lower max_gpus in the price sheet" in err


def _full_answer(session, sheet, prune):
    """The GPU choice's answer from each row's whole sweep, every plan kept (as it was
    computed before the rows were cut): per row the plan keys of its fastest and cheapest
    point by expected figures, and the combined best by days and by dollars."""
    keys, days, cost, rows = [], [], [], []
    for r, row in enumerate(sheet.rows):
        s = row_session(session, row)
        space = dataclasses.replace(SweepSpace.default_for(s), max_gpus=row.max_gpus,
                                    max_data_parallel=None)
        res = run_sweep(s, space, prune=prune)
        n_iter = math.ceil(s.cost.training_tokens / (s.plan.global_batch_size
                                                     * s.model.seq_length))
        for i, d, c in _expected_points(s, res, res.feasible, n_iter,
                                        row.price_per_gpu_hour_usd):
            keys.append((row.gpu, plan_key(res.plans[i])))
            days.append(d)
            cost.append(c)
            rows.append(r)
    d, c, rows = np.array(days), np.array(cost), np.array(rows)
    by = (lambda a, b, m: keys[int(np.flatnonzero(m)[np.lexsort((b[m], a[m]))[0]])])
    per_row = [(by(d, c, rows == r), by(c, d, rows == r)) for r in range(len(sheet.rows))]
    every = np.ones(d.size, bool)
    return per_row, by(d, c, every), by(c, d, every), len(keys)


@pytest.mark.parametrize("prune", [True, False])
def test_the_answer_is_unchanged_while_only_the_simulated_plans_are_kept(prune):
    """--gpus-from held every row's whole sweep (every plan, fitting or not) until the end:
    Qwen3-30B-A3B on four kinds up to 256 GPUs, 20 GB. Each row's sweep is now cut to the
    plans that fit and were simulated once its points are costed; the answer (each row's
    fastest and cheapest, the best by days and by dollars) is that of the whole sweeps."""
    session, sheet = tiny_session(), PriceSheet(SHEET)
    choice = choose_gpus(session, sheet, prune=prune)
    per_row, fastest, cheapest, n_points = _full_answer(session, sheet, prune)
    key = (lambda k: (choice.label(k), plan_key(choice.sweeps[int(choice.row[k])].plans[
        int(choice.index[k])])))
    doc = choice.to_dict()
    for r in range(len(SHEET)):
        ks = np.flatnonzero(choice.row == r)
        f = ks[np.lexsort((choice.expected_cost_usd[ks], choice.expected_days[ks]))[0]]
        c = ks[np.lexsort((choice.expected_days[ks], choice.expected_cost_usd[ks]))[0]]
        assert (key(f), key(c)) == per_row[r]
        assert doc["rows"][r]["fastest"]["plan"] == choice.point(f)["plan"]
    assert key(choice.best_by_days) == fastest and key(choice.best_by_dollars) == cheapest
    assert choice.num_points == n_points
    # what is kept: the simulated plans only; the counts are the whole sweeps'
    for res, n in zip(choice.sweeps, choice.counts):
        assert len(res.plans) == res.num_plans == n["num_feasible"] == res.num_feasible
        assert n["num_plans"] >= n["num_feasible"] and res.saved == n
        assert n["num_plans"] > n["num_feasible"] or not prune
        assert n["num_pruned"] == (n["num_fit"] - n["num_feasible"] if prune else 0)


def test_each_rows_whole_sweep_is_freed_before_the_next_row(monkeypatch):
    """Memory is one row's sweep at a time: when a row's sweep starts, no earlier row's
    whole result is alive."""
    import gc as pygc
    import weakref

    import core.studies.gpu_choice as gc
    refs, alive_at_start = [], []
    real = gc.run_sweep

    def tracked(*a, **k):
        pygc.collect()
        alive_at_start.append(sum(r() is not None for r in refs))
        res = real(*a, **k)
        refs.append(weakref.ref(res))
        return res
    monkeypatch.setattr(gc, "run_sweep", tracked)
    choice = choose_gpus(tiny_session(), PriceSheet(SHEET))
    pygc.collect()
    assert alive_at_start == [0, 0] and all(r() is None for r in refs)
    assert choice.num_points > 0


def test_max_work_applies_to_each_rows_sweep(tmp_path, capsys):
    """--max-work was refused with --gpus-from; it now caps each row's sweep as it caps vtrain
    sweep's, refused by the row's name before that row is simulated."""
    session = tiny_session("H100-SXM5-80GB")
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,4,,test,2026-01-01\n")
    assert main(["sweep", str(cfg), "--max-gpus", "4", "--max-work", "5", "--workers",
                 "1"]) == 2
    plain = " ".join(capsys.readouterr().err.split())
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--max-work", "5", "--workers",
                 "1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert plain.startswith("vtrain: error: sweep.max_work: the ")
    assert err == plain.replace("error: sweep.max_work", "error: H100-SXM5-80GB: sweep.max_work")
    assert "more than the limit of 5 (raise it, or narrow the space)" in err
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--max-work", "0"]) == 2
    assert "--max-work: 0 must be a positive number" in capsys.readouterr().err
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--max-work", "1000000000",
                 "--workers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best_by_days"] is not None


def test_with_max_work_every_row_is_checked_before_any_is_swept(monkeypatch):
    """--gpus-from --max-work: the rows are swept one after another, so a refusal (or the
    large-sweep note) of a later row came only after the earlier rows' whole sweeps. Every
    row's plans that fit are now counted first: the large-sweep notes of all rows, then the
    sweeps; a row over the limit is refused before any row is swept."""
    import core.studies.gpu_choice as gc
    import core.studies.sweep.bound as bound
    monkeypatch.setattr(bound, "LARGE_SWEEP_WORK", 0)  # every sweep is "large"
    events = []
    real = gc.run_sweep

    def tracked(*a, **k):
        events.append("sweep")
        return real(*a, **k)
    monkeypatch.setattr(gc, "run_sweep", tracked)
    session = tiny_session()
    choice = choose_gpus(session, PriceSheet(SHEET), max_work=10**12,
                         notice=lambda text: events.append(text.split(":")[0]))
    assert events == ["A100-SXM4-80GB", "H100-SXM5-80GB", "sweep", "sweep"]
    # the notes are the sweeps' own (their warnings keep them)
    for res in choice.sweeps:
        assert any(w.startswith("large sweep: ") for w in res.warnings)
    # the second row (H100, 4 GPUs) over a limit the first (A100, 8 GPUs) is not: checked
    # against each row's own work; here a limit under both refuses at the first row, unswept
    events.clear()
    with pytest.raises(ConfigError) as err:
        choose_gpus(session, PriceSheet(SHEET), max_work=5)
    assert events == [] and err.value.errors[0].field == "A100-SXM4-80GB: sweep.max_work"
    works = []
    for row in SHEET:
        s = row_session(session, row)
        space = dataclasses.replace(SweepSpace.default_for(s), max_gpus=row.max_gpus,
                                    max_data_parallel=None)
        with pytest.raises(ConfigError) as e:
            run_sweep(s, space, max_work=1)
        works.append(int(e.value.errors[0].message.split(" need up to ")[1].split()[0]
                         .replace(",", "")))
    assert works[0] > works[1]  # the A100 row (8 GPUs) has more work than the H100 row (4)
    with pytest.raises(ConfigError) as err:
        choose_gpus(session, PriceSheet(SHEET[::-1]), max_work=(works[0] + works[1]) // 2)
    assert events == [] and err.value.errors[0].field == "A100-SXM4-80GB: sweep.max_work"


def test_a_front_of_one_plan_is_titled_in_the_singular(tmp_path, capsys):
    """The trial's sheet (Llama 3 70B, B200 cheapest and fastest) printed "Combined front of
    expected days and dollars: 1 plans"; on one GPU, days and dollars are proportional, so one
    plan is the whole front and the title says "1 plan"."""
    cfg = tmp_path / "s.json"
    save_session(tiny_session(), cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "A100-SXM4-80GB,0.3,1,,test,2026-01-01\n")
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--json", "--workers", "1"]) == 0
    assert len(json.loads(capsys.readouterr().out)["front"]) == 1
    assert main(["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "Combined front of expected days and dollars: 1 plan, fastest first" in out
    assert ": 1 plans" not in out


def test_deadline_days_picks_the_cheapest_point_within_it_across_kinds(tmp_path, capsys):
    """The trial's cluster owner (Llama 3 70B, 15T tokens, 90 days) was refused --deadline-days
    with --gpus-from; the cheapest plan of any kind whose expected days (failures included)
    are within D is the answer, checked here against every point by brute force."""
    session = tiny_session()
    choice = choose_gpus(session, PriceSheet(SHEET))
    front_days = choice.expected_days[choice.front]
    assert front_days.size >= 2
    for deadline in (*front_days.tolist(), float(np.mean(front_days[:2])), 1e9):
        k = choice.within_deadline(deadline)
        ok = np.flatnonzero(choice.expected_days <= deadline)
        cheapest = ok[np.argmin(choice.expected_cost_usd[ok])]
        assert choice.expected_cost_usd[k] == choice.expected_cost_usd[cheapest]
        assert choice.expected_days[k] <= deadline and k in choice.front.tolist()
    assert choice.within_deadline(1e9) == choice.best_by_dollars
    assert choice.within_deadline(0.5 * front_days[0]) is None
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "".join(f"{r.gpu},{r.price_per_gpu_hour_usd},{r.max_gpus},,,\n"
                                      for r in SHEET))
    deadline = float(np.mean(front_days[:2]))
    k = choice.within_deadline(deadline)
    args = ["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1",
            "--deadline-days", repr(deadline)]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deadline_days"] == deadline
    assert doc["cheapest_within_deadline"]["expected_cost_usd"] == pytest.approx(
        choice.expected_cost_usd[k], rel=1e-12)
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    p = choice.point(k)
    assert f"cheapest within {deadline:g} expected days: {p['num_gpus']:,} {p['gpu']}," in out
    tight = repr(float(0.5 * front_days[0]))
    assert main([*args[:-1], tight]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"cheapest within {float(tight):g} expected days: none; the fastest takes" in out
    assert main([*args[:-1], "0"]) == 2
    assert "--deadline-days" in capsys.readouterr().err


def test_least_memory_of_ties_keeps_the_point_with_more_headroom():
    from core.studies.gpu_choice import least_memory_of_ties
    days = np.array([1.0, 1.0, 2.0, 3.0, 3.0, np.nan])
    cost = np.array([5.0, 5.0, 3.0, 1.0, 1.0, np.nan])
    mem = np.array([10.0, 8.0, 1.0, 4.0, 4.0, 1.0])
    on = np.array([True, True, True, True, True, False])
    # the first pair: same days and dollars, the second needs less memory; the last pair ties
    # on all three and both stay
    assert least_memory_of_ties(days, cost, mem, on).tolist() == [False, True, True, True, True,
                                                                   False]


def test_zero_1_and_zero_2_at_one_micro_batch_are_one_front_point(tmp_path, capsys):
    """GPT-3 1.3B's example on up to 64 H100s, t = 1, b = 4, 1F1B, no recomputation, ZeRO
    stages 1 and 2: at d = 64 the global batch of 256 is one micro-batch, where the distributed
    optimizer (ZeRO-1: the gradient buffer whole, reduce-scattered after the last micro-batch)
    and ZeRO-2 (Megatron-FSDP optim_grads: each micro-batch's gradients reduce-scattered) move
    the same bytes once: the same time, days and dollars. The front listed both with identical
    figures; ZeRO-2 holds 1/d of the fp32 gradients, so the front keeps it alone, and shows
    each point's memory per GPU."""
    from core.io.session import load_any
    from core.model.counts import params_per_gpu
    sheet = tmp_path / "prices.csv"
    sheet.write_text("gpu,price_per_gpu_hour_usd,max_gpus\nH100-SXM5-80GB,6.16,64\n")
    example = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    assert main(["sweep", str(example), "--gpus-from", str(sheet), "--zero-stages", "1,2",
                 "--tensor-parallel", "1", "--micro-batch-sizes", "4", "--schedules", "1f1b",
                 "--recompute", "none", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    front = doc["front"]
    at64 = [p for p in front if p["num_gpus"] == 64]
    assert len(at64) == 1 and " zero=2 " in at64[0]["plan"]
    # the row's own fastest plan breaks the tie as the front and best_by_days do (it was the
    # ZeRO-1 twin, 5 GiB more per GPU, while best_by_days named ZeRO-2)
    assert doc["rows"][0]["fastest"] == doc["best_by_days"] == at64[0]
    # its ZeRO-1 twin: the same iteration time, memory more by the unsharded fp32 gradients
    session = load_any(example)
    k = front.index(at64[0])
    plan2 = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=64,
                         micro_batch_size=4, global_batch_size=256, schedule="1f1b",
                         recompute="none", precision="bf16", zero_stage=2,
                         overlap_grad_reduce=True, overlap_param_gather=True,
                         gradient_accumulation_fusion=False, cross_entropy_loss_fusion=True,
                         cross_entropy_fusion_impl="te")
    assert plan2.label() == at64[0]["plan"] and plan2.num_microbatches == 1
    h100 = dataclasses.replace(session, plan=plan2, cluster=ClusterConfig(
        gpu="H100-SXM5-80GB", gpus_per_node=8))
    r2 = simulate(h100).report
    r1 = simulate(dataclasses.replace(h100, plan=dataclasses.replace(plan2, zero_stage=1))).report
    assert r1.iteration_time_s == pytest.approx(r2.iteration_time_s, rel=1e-12)
    assert r2.iteration_time_s == pytest.approx(front[k]["iteration_time_s"], rel=1e-12)
    n = float(params_per_gpu(session.model, plan2)[0])
    assert r1.max_memory_per_gpu_bytes - r2.max_memory_per_gpu_bytes == pytest.approx(
        n * 4 * (1 - 1 / 64) * 1.033, rel=1e-9)
    assert at64[0]["max_memory_per_gpu_bytes"] == pytest.approx(r2.max_memory_per_gpu_bytes,
                                                                rel=1e-12)


def test_no_tight_leaves_tight_plans_off_the_combined_front_exactly(tmp_path, capsys):
    """A cluster owner buying GPUs cannot run a plan inside the memory margin: every front
    plan of GPT-3 1.3B with half the GPU as margin (40 of 80 GiB) is tight, and no_tight
    (--no-tight) chooses among the plans that fit outside it; its best plans are those of the
    exhaustive choice restricted to points whose verdict is "fits" (same plan, same expected
    days and dollars), and the text says how many front plans were tight."""
    from core.io.session import load_any
    from tests.conftest import EXAMPLES
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    session.cluster.memory_reserve_fraction = 0.5
    sheet = PriceSheet([PriceRow("A100-SXM4-80GB", 1.5, 8, row=2),
                        PriceRow("H100-SXM5-80GB", 2.9, 8, row=3)])

    def space_for(row):
        return SweepSpace(max_gpus=row.max_gpus, schedules=("1f1b",), recompute=("none", "full"))
    every = choose_gpus(session, sheet, prune=False, space_for=space_for)
    kept = choose_gpus(session, sheet, no_tight=True, space_for=space_for)
    verdict = [every.point(k)["memory_verdict"] for k in range(every.num_points)]
    assert every.num_tight_on_front == every.front.size > 0  # every front plan is tight
    assert kept.no_tight and kept.num_tight_on_front == 0 and kept.num_tight_left_out > 0
    fits = np.array([v == "fits" for v in verdict])
    for mine, first, second in ((kept.best_by_days, every.expected_days, every.expected_cost_usd),
                                (kept.best_by_dollars, every.expected_cost_usd,
                                 every.expected_days)):
        theirs = best_row(first, second, fits & np.isfinite(first))
        a, b = kept.point(mine), every.point(theirs)
        assert (a["gpu"], a["num_gpus"], a["plan"]) == (b["gpu"], b["num_gpus"], b["plan"])
        assert a["expected_days"] == b["expected_days"] and a["memory_verdict"] == "fits"
    assert every.point(every.best_by_days)["memory_verdict"] == "tight"
    assert kept.point(kept.best_by_days)["plan"] != every.point(every.best_by_days)["plan"]
    cfg, prices = tmp_path / "s.json", tmp_path / "p.csv"
    save_session(session, cfg)
    prices.write_text(HEADER + "A100-SXM4-80GB,1.5,8,,test,2026-01-01\n"
                      "H100-SXM5-80GB,2.9,8,,test,2026-01-01\n")
    args = ["sweep", str(cfg), "--gpus-from", str(prices), "--workers", "1", "--schedules",
            "1f1b", "--recompute", "none,full"]
    assert main(args) == 0
    n = every.front.size
    assert (f"{n} of {n} front plans are tight (~): --no-tight keeps only plans that fit "
            "outside the margin") in " ".join(capsys.readouterr().out.split())
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--no-tight", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not plain["no_tight"] and plain["num_tight_on_front"] == len(plain["front"])
    assert doc["no_tight"] and doc["num_tight_left_out"] > 0 and doc["num_tight_on_front"] == 0
    assert plain["best_by_days"]["memory_verdict"] == "tight"
    assert doc["best_by_days"]["memory_verdict"] == "fits"
    assert doc["best_by_days"]["expected_days"] > plain["best_by_days"]["expected_days"]
    assert {p["memory_verdict"] for p in doc["front"]} == {"fits"}


def test_no_tight_with_every_fitting_plan_tight_names_no_others(tmp_path):
    """--gpus-from --no-tight where every plan that fits is tight (GPT-3 1.3B at t1 p1 d8
    without recomputation, half the GPU as margin): the reason said "N plans fit ... N of
    them are tight and left out (--no-tight), the others too large to simulate" though there
    were no others."""
    from core.io.session import load_any
    from tests.conftest import EXAMPLES
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    session.cluster.memory_reserve_fraction = 0.5
    sheet = PriceSheet([PriceRow("A100-SXM4-80GB", 1.5, 8, row=2)])

    def space_for(row):
        return SweepSpace(num_gpus=8, tensor_parallel=(1,), pipeline_parallel=(1,),
                          schedules=("1f1b",), recompute=("none",), micro_batch_sizes=(4, 8))
    kept = choose_gpus(session, sheet, no_tight=True, space_for=space_for)
    fit = sum(c["num_fit"] for c in kept.counts)
    assert kept.num_points == 0 and fit == kept.num_tight_left_out > 1
    assert kept.no_point_reason() == (f"{fit} plans fit in memory but none was simulated: "
                                      "every one is tight and left out (--no-tight)")


def test_max_work_with_no_tight_counts_only_the_plans_it_sweeps():
    """--gpus-from --max-work --no-tight: each row's work estimate, made before any sweep, leaves
    the tight plans out (their verdict is closed-form), as the sweep does; a limit between the
    work of the plans that fit outside the margin and that of every plan that fits passes with
    no_tight and is refused without it."""
    from core.io.session import load_any
    from core.plan.fields import ConfigError
    from core.studies.sweep.bound import sweep_work
    from core.studies.sweep.run import check_sweep_work
    from tests.conftest import EXAMPLES
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    session.cluster.memory_reserve_fraction = 0.5
    sheet = PriceSheet([PriceRow("A100-SXM4-80GB", 1.5, 8, row=2)])
    space = SweepSpace(max_gpus=8, schedules=("1f1b",), recompute=("none", "full"))
    every = run_sweep(row_session(session, sheet.rows[0]), space, prune=False)
    L = session.model.num_layers
    fits = sweep_work([pl for pl, v in zip(every.plans, every.memory_verdict) if v == "fits"], L)
    fit_or_tight = sweep_work([pl for pl, ok in zip(every.plans, every.fits_in_memory) if ok], L)
    assert 0 < fits < fit_or_tight
    assert check_sweep_work(row_session(session, sheet.rows[0]), space, max_work=fits,
                            no_tight=True) == []
    with pytest.raises(ConfigError, match="sweep.max_work"):
        check_sweep_work(row_session(session, sheet.rows[0]), space, max_work=fits)
    choice = choose_gpus(session, sheet, no_tight=True, max_work=fits,
                         space_for=lambda row: space)
    assert choice.no_tight and choice.num_tight_left_out > 0
    with pytest.raises(ConfigError, match="A100-SXM4-80GB: sweep.max_work"):
        choose_gpus(session, sheet, max_work=fits, space_for=lambda row: space)


def test_the_text_gives_each_kinds_own_fastest_and_cheapest_plan(tmp_path, capsys):
    """The trial's cluster owner (Llama 3 70B, 2T tokens; H100, H200 and B200 rows) saw a
    combined front of one B200 plan and no figure of the H100 or H200: each kind's own best
    was in --json's rows only. The text now has a table of them, the same points as --json's
    rows, each figure the point's own."""
    session = tiny_session()
    choice = choose_gpus(session, PriceSheet(SHEET))
    cfg = tmp_path / "s.json"
    save_session(session, cfg)
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "".join(f"{r.gpu},{r.price_per_gpu_hour_usd},{r.max_gpus},,,\n"
                                      for r in SHEET))
    args = ["sweep", str(cfg), "--gpus-from", str(sheet), "--workers", "1"]
    assert main([*args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Each kind's own fastest and cheapest plan (--json: rows)" in out
    table = out.split("Each kind's own fastest and cheapest plan", 1)[1].split("expected:", 1)[0]
    lines = [" ".join(line.split()) for line in table.splitlines()]
    for r, row in enumerate(rows):
        fastest, cheapest = choice.row_best(r)
        assert row["fastest"]["expected_days"] == pytest.approx(
            choice.expected_days[fastest], rel=1e-12)
        assert row["cheapest"]["expected_cost_usd"] == pytest.approx(
            choice.expected_cost_usd[cheapest], rel=1e-12)
        # each row's fastest takes no more days than any point of its kind, the cheapest no more $
        own = np.flatnonzero(choice.row == r)
        assert choice.expected_days[fastest] == choice.expected_days[own].min()
        assert choice.expected_cost_usd[cheapest] == choice.expected_cost_usd[own].min()
        picks = ([("fewest days, dollars", row["fastest"])] if fastest == cheapest else
                 [("fewest days", row["fastest"]), ("fewest dollars", row["cheapest"])])
        for name, p in picks:
            days = f"{p['expected_days']:,.1f}"
            assert any(line.startswith(f"{row['label']} {name} {p['num_gpus']:,}")
                       and f" {days} " in f" {line} " for line in lines), (name, days, lines)
    assert len(rows) == 2 and rows[0]["label"] != rows[1]["label"]
