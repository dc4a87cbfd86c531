"""The sweep's ``memory_verdict`` column (issue 27): the verdict of each plan's whole-process
need against the GPU's capacity, the margin (cluster.memory_reserve_fraction) only making a fit
tight; tight plans fit, so the margin changes no plan kept and no answer of the sweep."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.io.session import load_any
from core.sim.report import memory_verdict
from core.studies.sweep import COLUMNS, SweepSpace, run_sweep
from core.cli import main
from core.studies.sweep.result import plan_label
from core.studies.sweep.saved import restore_sweep, saved_sweep
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node


def too_large_session():
    """GPT-3 1.3B at B = 2**17 on t1 p8 d1 (1F1B, full recomputation): 6 GiB of 80, a graph of
    28 M tasks, too large to simulate (the tests of such plans share it)."""
    session = load_any(SMALL)
    return dataclasses.replace(session, plan=dataclasses.replace(
        session.plan, global_batch_size=2**17, tensor_parallel=1, pipeline_parallel=8,
        data_parallel=1, micro_batch_size=1, recompute="full"))


def too_large_sweep():
    """:func:`too_large_session` and its sweep over p in (1, 8) at t = 1, b = 1, 1F1B, full
    recomputation on 8 GPUs."""
    session = too_large_session()
    return session, run_sweep(session, SweepSpace(
        num_gpus=8, micro_batch_sizes=(1,), schedules=("1f1b",), recompute=("full",),
        tensor_parallel=(1,), pipeline_parallel=(1, 8)))
SPACE = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4), schedules=("1f1b", "gpipe"))


def _sweep(margin: float):
    session = load_any(SMALL)
    session = dataclasses.replace(session, cluster=dataclasses.replace(
        session.cluster, memory_reserve_fraction=margin))
    return run_sweep(session, SPACE, prune=False)


@pytest.fixture(scope="module")
def sweeps():
    return _sweep(0.1), _sweep(0.8)


def _required(r) -> np.ndarray:
    """Each plan's largest stage need without the allocator's reserve (StageMemory.required_bytes),
    from the scalar memory model plan by plan: what decides the fit."""
    from core.sim.simulate import stage_memory
    return np.array([max(sm.required_bytes for sm in stage_memory(
        dataclasses.replace(r.session, plan=pl))) for pl in r.plans])


def test_column_is_the_scalar_rule_plan_by_plan(sweeps):
    for r, margin in zip(sweeps, (0.1, 0.8)):
        cap = r.memory_capacity_bytes
        assert cap == 80 * 2**30
        assert np.array_equal(r.fits_in_memory, _required(r) <= cap)
        want = [memory_verdict(need, cap, margin, fit) for need, fit in
                zip(r.max_memory_per_gpu_bytes.tolist(), r.fits_in_memory.tolist())]
        assert r.memory_verdict.tolist() == want
        assert "memory_verdict" in COLUMNS
        assert [row["memory_verdict"] for row in r.rows()] == want
        assert r.csv_text().splitlines()[0].split(",").count("memory_verdict") == 1


def test_the_margin_marks_tight_plans_and_keeps_them(sweeps):
    narrow, wide = sweeps
    need, cap = wide.max_memory_per_gpu_bytes, wide.memory_capacity_bytes
    tight = wide.memory_verdict == "tight"
    required = _required(wide)
    # closed form: tight is (1 - 0.8) * C < need, need less the allocator's reserve <= C
    assert np.array_equal(tight, (need > 0.2 * cap) & (required <= cap))
    assert tight.any() and (~tight).any()
    assert wide.fits_in_memory[tight].all()  # a tight plan fits: the sweep keeps it
    # a plan over the capacity only with the allocator's cache is tight, not unfit (none here:
    # the sweep's partial recomputations keep the whole need within the capacity; the rule's
    # own cases are in tests/test_memory_verdict.py)
    cached_only = (need > cap) & (required <= cap)
    assert (wide.memory_verdict[cached_only] == "tight").all()
    partial = np.array([pl.recompute_num_layers is not None for pl in wide.plans])
    assert partial.any() and not (partial & (need > cap)).any()
    # the margin takes nothing away: the same plans fit, the same answers
    assert np.array_equal(narrow.fits_in_memory, wide.fits_in_memory)
    assert np.array_equal(narrow.fits_in_memory, required <= cap)
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
    assert fastest["memory_verdict"] == memory_verdict(fastest["max_memory_per_gpu_bytes"], cap, 0.8,
                                                       fastest["fits_in_memory"])
    assert fastest["memory_verdict"] == "tight"  # 0.2 * C < need <= C: the fastest is tight
    assert all(row["memory_verdict"] in ("fits", "tight") for row in doc["pareto"])


def _too_large_sweep(prune: bool = False):
    """GPT-3 1.3B at B = 2**17 on 8 GPUs: p = 1 plans simulate (d = 8, m = 16,384: 3.3 M
    tasks); p = 8 plans (d = 1, m = 2**17) would have 28 M tasks, more than ``vtrain
    simulate`` builds, yet need only about 6-14 GiB of 80."""
    session = load_any(SMALL)
    session = dataclasses.replace(session, plan=dataclasses.replace(
        session.plan, global_batch_size=2**17))
    space = SweepSpace(num_gpus=8, micro_batch_sizes=(1,), schedules=("1f1b",),
                       recompute=("full",), tensor_parallel=(1,), pipeline_parallel=(1, 8))
    return run_sweep(session, space, prune=prune)


def test_a_plan_too_large_to_simulate_fits_in_memory_as_its_verdict_says():
    r = _too_large_sweep()
    cap = r.memory_capacity_bytes
    need = r.max_memory_per_gpu_bytes
    big = ~np.isfinite(r.iteration_time_s)
    assert big.any() and (~big).any()
    assert (r.pipeline_parallel[big] == 8).all()
    assert (need[big] < 0.9 * cap).all()                 # a fit by far: 6-14 of 80 GiB
    assert (r.memory_verdict[big] == "fits").all()
    # one answer to "does it fit": the column is the verdict, row by row, simulated or not
    assert np.array_equal(r.fits_in_memory, need <= cap)
    assert np.array_equal(r.fits_in_memory, r.memory_verdict != "does not fit")
    assert all(r.reason[i].startswith("too large to simulate") for i in np.flatnonzero(big))
    # the sweep's limit is simulate's: the plan it lists without figures, simulate refuses
    from core.plan.fields import ConfigError
    from core.sim.simulate import simulate
    for i in np.flatnonzero(big).tolist():
        with pytest.raises(ConfigError) as exc:
            simulate(r.session_for(i))
        assert r.reason[i] == f"too large to simulate: {exc.value.errors[0].message}"
    # a plan without figures is never an answer
    assert not r.pareto[big].any()
    assert r.fastest is not None and not big[r.fastest] and not big[r.cheapest]
    assert r.num_feasible == int(np.count_nonzero(~big))  # those that fit and have figures
    for row in r.rows(np.flatnonzero(big).tolist()):
        assert (row["fits_in_memory"], row["memory_verdict"], row["iteration_time_s"]) == (
            True, "fits", None)


def test_pruned_plans_fit_in_memory_as_their_verdict_says():
    r = run_sweep(load_any(SMALL), SPACE)  # pruning on
    assert r.pruned.any()
    assert (r.memory_verdict[r.pruned] != "does not fit").all()
    assert r.fits_in_memory[r.pruned].all()
    assert np.array_equal(r.fits_in_memory, r.memory_verdict != "does not fit")
    assert not r.pareto[r.pruned].any()
    assert r.num_feasible == int(np.count_nonzero(np.isfinite(r.iteration_time_s)
                                                  & r.fits_in_memory))


def test_sweep_cli_counts_a_plan_too_large_to_simulate_as_fitting(capsys, tmp_path):
    """``vtrain sweep``: the plans that fit in memory include the one too large to simulate
    (3 of 3 here, 2 of them simulated); its GiB cell carries no ``!``."""
    from core.cli import main
    out_csv = tmp_path / "rows.csv"
    args = ["sweep", str(SMALL), "--gpus", "8", "--set", "plan.global_batch_size=131072",
            "--micro-batch-sizes", "1", "--schedules", "1f1b", "--recompute", "full",
            "--tensor-parallel", "1", "--pipeline-parallel", "1,8", "--exhaustive",
            "--out", str(out_csv)]
    assert main(args) == 0
    out = capsys.readouterr().out
    import csv
    rows = list(csv.DictReader(out_csv.open()))
    fit = sum(r["memory_verdict"] != "does not fit" for r in rows)
    simulated = sum(r["iteration_time_s"] not in ("", "nan", "None") for r in rows)
    assert fit > simulated >= 1
    assert all(r["fits_in_memory"] == ("True" if r["memory_verdict"] != "does not fit" else "False")
               for r in rows)
    assert f"{len(rows):,} valid plans, {fit:,} fit in memory, {simulated:,} of them simulated" in out


def test_no_answer_when_every_plan_that_fits_is_too_large_says_so_not_that_none_fits():
    """Only p = 8, d = 1 plans at B = 2**17: the 1F1B ones fit (6-14 GiB of 80) and are too
    large to simulate (28 M tasks), the GPipe one needs every micro-batch's activations (does not fit). No
    fastest plan; the reasons (best by value, the compute-optimal study's candidate) name the
    simulator's limit where plans fit, the memory where none does."""
    from core.studies.optimal import OptimalResult, _candidate
    session = too_large_session()
    space = SweepSpace(num_gpus=8, micro_batch_sizes=(1,), schedules=("1f1b", "gpipe"),
                       recompute=("full",), tensor_parallel=(1,), pipeline_parallel=(8,))
    r = run_sweep(session, space)
    gpipe = r.schedule == "gpipe"
    assert r.fits_in_memory[~gpipe].all() and not r.fits_in_memory[gpipe].any()
    assert r.fastest is None and r.num_feasible == 0
    why = r.why_none(np.ones(r.num_plans, bool))
    assert why.startswith(f"none of its {r.num_plans} plans was simulated: too large to simulate")
    best = {row["value"]: row for row in r.best_by()["schedule"]}
    assert best["1f1b"]["plan"] is None and best["gpipe"]["plan"] is None
    assert "was simulated: too large to simulate" in best["1f1b"]["reason"]
    assert best["gpipe"]["reason"].startswith("none of its 1 plan fits in memory")
    out = OptimalResult.__new__(OptimalResult)
    out.warnings = []
    cand = _candidate(session, session.model, space, None, None, 86400.0, out)
    assert cand.plan is None and cand.reason == why


def test_saved_row_of_a_plan_too_large_to_simulate_restores_as_fitting():
    """The session's own plan (t1 p8 d1, too large to simulate, 6 GiB of 80) is saved with
    the sweep: its row says it fits, and a row saved before (fits_in_memory False beside the
    verdict "fits") restores as the verdict says."""
    session, r = too_large_sweep()
    doc = json.loads(json.dumps(saved_sweep(r)))
    k = doc["marks"]["config"]
    assert doc["rows"][k]["memory_verdict"] == "fits" and doc["rows"][k]["fits_in_memory"] is True
    assert doc["rows"][k]["iteration_time_s"] is None
    doc["rows"][k]["fits_in_memory"] = False  # as written before
    back = restore_sweep(doc)
    assert back.fits_in_memory.tolist() == [row["memory_verdict"] != "does not fit"
                                            for row in doc["rows"]]
    assert back.fits_in_memory[k] and not back.feasible[k]


def test_pick_with_every_fitting_plan_too_large_names_the_limit(capsys, tmp_path):
    """``vtrain sweep --pick fastest`` where the only plans that fit are too large to simulate:
    refused (exit 2, nothing written) naming the simulator's limit, not "no plan fits"."""
    from core.cli import main
    out = tmp_path / "picked.json"
    args = ["sweep", str(SMALL), "--gpus", "8", "--set", "plan.global_batch_size=131072",
            "--set", "plan.tensor_parallel=1", "--set", "plan.pipeline_parallel=8",
            "--set", "plan.data_parallel=1", "--set", "plan.micro_batch_size=1",
            "--set", "plan.recompute=full", "--micro-batch-sizes", "1", "--schedules", "1f1b",
            "--recompute", "full", "--tensor-parallel", "1", "--pipeline-parallel", "8",
            "--pick", "fastest", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "too large to simulate" in err and "no plan fits in memory" not in err
    assert not out.exists()


def test_graph_tasks_bound_is_above_every_plans_exact_count():
    """core.sim.simulate.graph_tasks_bound (the sweep's prefilter before the exact count of
    graph_too_large) is at least graph_size_estimate for plans of every setting that adds
    tasks: t > 1 with sequence parallelism and TP overlap, full and selective recomputation of
    every module, per-op checkpointing, context parallelism, interleaving, MoE layers and MTP."""
    import itertools
    from core.plan.presets import MODEL_PRESETS
    from core.sim.simulate import graph_size_estimate, graph_tasks_bound
    models = [MODEL_PRESETS[n] for n in ("GPT-3 1.3B", "DeepSeek-V3")]
    settings = [dict(recompute="full"), dict(recompute="none"),
                dict(recompute="selective", recompute_modules="core_attn,layernorm,mlp,moe_act"),
                dict(recompute="selective_op")]
    for model, kw, (t, sp, ov), cp, v in itertools.product(
            models, settings, [(1, False, False), (2, True, True), (2, False, False)],
            (1, 2), (None, 2)):
        plan = dataclasses.replace(
            ParallelPlan(t, 2, 1, 1, 64, "interleaved" if v else "1f1b", kw["recompute"], "bf16"),
            sequence_parallel=sp, tp_comm_overlap=ov, context_parallel=cp,
            virtual_pipeline_stages=v, recompute_modules=kw.get("recompute_modules"))
        s = Session(model, plan)
        steps = plan.pipeline_parallel * plan.num_microbatches * (v or 1)
        bound = graph_tasks_bound(model, [plan.num_microbatches], [steps],
                                  [plan.pipeline_parallel])[0]
        assert bound >= graph_size_estimate(s), (model.name, kw, t, sp, ov, cp, v)


def test_a_tight_pick_names_the_best_plan_outside_the_margin(capsys, tmp_path):
    """``--pick fastest`` of a tight plan says so and names the fastest simulated plan that fits
    outside the margin, with what it costs in days (a planner whose run ran out of memory may
    want that one); the plans of that kind left unsimulated are counted."""
    from core.cli import main
    out = tmp_path / "fast.json"
    args = ["sweep", str(SMALL), "--gpus", "8", "--set", "cluster.memory_reserve_fraction=0.8",
            "--pick", "fastest", "--out", str(out)]
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the picked plan is tight: " in text and "inside the 80 % margin" in text
    assert "the fastest simulated plan that fits outside the margin: t=1" in text
    assert "% days" in text and out.exists()
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fastest"]["memory_verdict"] == "tight"


def test_fewest_gpus_that_fit_simulated_or_not(capsys):
    """"How many GPUs does this model need": the fewest GPUs of the plans that fit (tight ones
    too), and of those that fit outside the margin; every plan on fewer GPUs does not fit (or,
    for the second, is tight); the command line and --json give both. GPT-3 1.3B with an 80 %
    margin: 1 GPU (tight), 2 outside the margin."""
    from core.cli import main
    session = load_any(SMALL)
    session = dataclasses.replace(session, cluster=dataclasses.replace(
        session.cluster, memory_reserve_fraction=0.8), plan=dataclasses.replace(
        session.plan, global_batch_size=64))
    r = run_sweep(session, SweepSpace(max_gpus=8))
    few = r.fewest_gpus()
    assert few == {"fits or tight": 1, "fits": 2}
    gpus, verdict = np.asarray(r.num_gpus), np.asarray(r.memory_verdict)
    assert (verdict[gpus == 1] != "fits").all() and (verdict[gpus == 1] == "tight").any()
    assert (verdict[gpus == 2] == "fits").any()
    # GPT-3 175B on A100-80GB (the shipped example): 48 GPUs, no plan on fewer fits
    big = load_any(EXAMPLES / "gpt3_175b.json")
    r = run_sweep(big, SweepSpace(max_gpus=64))
    gpus, fits = np.asarray(r.num_gpus), np.asarray(r.fits_in_memory, bool)
    assert r.fewest_gpus()["fits or tight"] == 48
    assert not fits[gpus < 48].any() and (gpus < 48).any() and fits[gpus == 48].any()
    args = ["sweep", str(SMALL), "--max-gpus", "8", "--set", "cluster.memory_reserve_fraction=0.8",
            "--set", "plan.global_batch_size=64"]
    assert main(args) == 0
    assert ("fewest GPUs with a plan that fits in memory: 1 (tight); outside the margin: 2"
            in " ".join(capsys.readouterr().out.split()))
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fewest_gpus"] == few


def _tight_at_half():
    """GPT-3 1.3B with a margin of half the GPU (cluster.memory_reserve_fraction 0.5, 40 of
    80 GiB): the fastest plan on 8 GPUs needs 49.6 GiB, tight; and the space of the test."""
    session = load_any(SMALL)
    session.cluster.memory_reserve_fraction = 0.5
    return session, SweepSpace(max_gpus=8, schedules=("1f1b",), recompute=("none", "full"))


def test_no_tight_answers_among_the_plans_that_fit_outside_the_margin_exactly():
    """A cluster owner cannot run a plan inside the margin: ``no_tight`` leaves the tight
    plans out, unsimulated, and its answers are those of an exhaustive sweep restricted to the
    plans whose verdict is "fits" (the branch and bound runs on those alone: exact); here the
    fastest plan changes, from a tight one (49.6 GiB > 40) to one that fits (b = 2)."""
    from core.studies.sweep.result import best_row, pareto_front
    session, space = _tight_at_half()
    every = run_sweep(session, space, prune=False)
    kept = run_sweep(session, space, no_tight=True)
    assert every.memory_verdict[every.fastest] == "tight"
    # t1 p1 d8 b4, no recomputation: 49.57 GiB before the activations outside the layers
    # (e62da17), which add per micro-batch in flight (one here) the embedding's int64 input ids
    # 8sb, its dropout mask sbh (hidden_dropout 0.1) and the final norm's bf16 input and
    # output 2 * 2sbh: sb (8 + 5h) = 2048 * 4 * (8 + 5 * 2048) bytes = 0.078 GiB
    extra = 2048 * 4 * (8 + 5 * 2048) / 2**30
    assert every.max_memory_per_gpu_bytes[every.fastest] / 2**30 == pytest.approx(
        49.5692 + extra, abs=0.001)
    fits = every.feasible & (every.memory_verdict == "fits")
    for mine, by, then in ((kept.fastest, every.training_days, every.cost_usd),
                           (kept.cheapest, every.cost_usd, every.training_days)):
        theirs = best_row(by, then, fits)
        assert kept.plans[mine] == every.plans[theirs]
        assert kept.iteration_time_s[mine] == every.iteration_time_s[theirs]
        assert kept.memory_verdict[mine] == "fits"
    assert kept.plans[kept.fastest] != every.plans[every.fastest]
    assert ({plan_label(every.plans[i]) for i in np.flatnonzero(
        pareto_front(every.training_days, every.cost_usd, fits))}
        == {plan_label(kept.plans[i]) for i in np.flatnonzero(kept.pareto)})
    tight = kept.memory_verdict == "tight"
    assert kept.no_tight and kept.num_tight_left_out == int(tight.sum()) > 0
    assert kept.num_tight_on_front == 0 and not np.isfinite(kept.iteration_time_s[tight]).any()
    assert not kept.pruned[tight].any() and kept.fits_in_memory[tight].all()  # still their verdict
    i = int(np.flatnonzero(tight)[0])
    assert kept.reason[i].startswith("tight: needs ") and kept.reason[i].endswith(
        "left out, not simulated (--no-tight)")
    assert every.num_tight_left_out == 0 and every.num_tight_on_front == int(
        (every.pareto & (every.memory_verdict == "tight")).sum()) > 0


def test_sweep_cli_counts_the_tight_front_plans_and_no_tight_leaves_them_out(capsys):
    """Without --no-tight the front says how many of its plans are tight; with it, how many
    plans were left out, and --json carries both counts and the fastest plan that fits."""
    args = ["sweep", str(SMALL), "--max-gpus", "8", "--schedules", "1f1b", "--recompute",
            "none,full", "--set", "cluster.memory_reserve_fraction=0.5", "--workers", "1"]
    assert main([*args, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--json", "--no-tight"]) == 0
    kept = json.loads(capsys.readouterr().out)
    n_front, n_tight = len(plain["pareto"]), plain["num_tight_on_front"]
    assert n_tight == sum(r["memory_verdict"] == "tight" for r in plain["pareto"]) > 0
    assert plain["fastest"]["memory_verdict"] == "tight" and not plain["no_tight"]
    assert kept["no_tight"] and kept["num_tight_on_front"] == 0 and kept["num_tight_left_out"] > 0
    assert kept["fastest"]["memory_verdict"] == "fits"
    assert kept["fastest"]["iteration_time_s"] > plain["fastest"]["iteration_time_s"]
    assert all(r["memory_verdict"] == "fits" for r in kept["pareto"])
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"{n_tight} of {n_front} front plans {'are' if n_tight != 1 else 'is'} tight (~): "
            "--no-tight keeps only plans that fit outside the margin") in out
    assert main([*args, "--no-tight"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"--no-tight: {kept['num_tight_left_out']:,} tight plans left out (not simulated); "
            "every plan shown fits outside the margin") in out


def test_no_tight_with_every_fitting_plan_tight_says_so_not_too_large(capsys):
    """GPT-3 1.3B at t1 p1 d8 on 8 A100s with half the GPU as margin: b = 4 and 8 without
    recomputation fit only inside the 40 GiB margin (tight) or not at all, so --no-tight
    leaves every fitting plan out. The summary said "No plan that fits was simulated (too
    large to simulate ...)" (the simulator's limit, wrong here) and the deadline line that
    no plan finishes within it; it says the tight plans were left out by --no-tight."""
    args = ["sweep", str(SMALL), "--gpus", "8", "--tensor-parallel", "1", "--pipeline-parallel",
            "1", "--schedules", "1f1b", "--recompute", "none", "--micro-batch-sizes", "4,8",
            "--set", "cluster.memory_reserve_fraction=0.5", "--workers", "1", "--no-tight"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    n_fit = doc["num_fit"]
    assert doc["num_feasible"] == 0 and n_fit == doc["num_tight_left_out"] > 0
    assert main([*args, "--deadline-days", "1000"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (f"No plan fits outside the memory margin: of the {n_fit} plans that fit in memory, "
            f"{n_fit} are tight (inside the 50 % margin) and left out by --no-tight; without "
            "--no-tight the tight plans are simulated and marked ~") in out
    assert "too large to simulate" not in out and "finishes within" not in out


def test_a_saved_no_tight_sweep_reads_back_as_filtered():
    """A sweep saved into a session file (``sweep["result"]``) records ``no_tight`` and how
    many tight plans it left out: read back, it says so (the front alone is saved, so the
    count cannot be recounted from its rows); a document saved before these keys reads as a
    sweep that kept its tight plans (no_tight false, none left out), and a bad value is
    refused by name."""
    from core.plan.fields import ConfigError
    session, space = _tight_at_half()
    kept = run_sweep(session, space, no_tight=True)
    plain = run_sweep(session, space)
    assert kept.num_tight_left_out > 0 and plain.num_tight_on_front > 0
    doc = json.loads(json.dumps(saved_sweep(kept)))
    assert doc["no_tight"] is True and doc["num_tight_left_out"] == kept.num_tight_left_out
    back = restore_sweep(doc)
    assert back.no_tight and back.num_tight_left_out == kept.num_tight_left_out
    assert back.num_plans < kept.num_plans  # the rows saved: the front and the marked plans
    assert back.num_tight_on_front == 0
    assert back.to_dict()["num_tight_left_out"] == kept.num_tight_left_out
    assert saved_sweep(back)["num_tight_left_out"] == kept.num_tight_left_out  # saved again
    plain_doc = json.loads(json.dumps(saved_sweep(plain)))
    assert plain_doc["no_tight"] is False and plain_doc["num_tight_left_out"] == 0
    plain_back = restore_sweep(plain_doc)
    assert not plain_back.no_tight and plain_back.num_tight_left_out == 0
    assert plain_back.num_tight_on_front == plain.num_tight_on_front
    older = {k: v for k, v in doc.items() if k not in ("no_tight", "num_tight_left_out")}
    old_back = restore_sweep(older)
    assert not old_back.no_tight and old_back.num_tight_left_out == 0
    with pytest.raises(ConfigError, match=r"sweep\.result.*no_tight must be true or false"):
        restore_sweep({**doc, "no_tight": "yes"})
    with pytest.raises(ConfigError, match=r"num_tight_left_out must be a whole number"):
        restore_sweep({**doc, "num_tight_left_out": -1})


def _csv_of_rows(rows: list[dict]) -> str:
    """The CSV of ``rows`` written row by row (the header, then each row's values: "" for null,
    ``repr`` of a float, :func:`core.util.text.spreadsheet_cell` of the rest)."""
    import csv
    import io
    from core.util.text import spreadsheet_cell
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in rows:
        w.writerow(["" if v is None else repr(v) if isinstance(v, float)
                    else spreadsheet_cell(v) for v in row.values()])
    return buf.getvalue()


def test_rows_and_csv_read_column_by_column_are_each_rows_own(sweeps):
    """``rows()`` (built column by column) is ``row(i)`` of each row, with the same Python
    types (null for a plan without figures, never NaN), in the order asked, and the CSV is
    those rows written row by row."""
    big_r = _too_large_sweep()
    for r in (*sweeps, big_r):
        every = [r.row(i) for i in range(r.num_plans)]
        rows = r.rows()
        assert rows == every and list(rows[0]) == list(COLUMNS)
        assert [[type(v) for v in a.values()] for a in rows] == [
            [type(v) for v in a.values()] for a in every]
        pick = [r.num_plans - 1, 0, 0]
        assert r.rows(pick) == [every[i] for i in pick] and r.rows([]) == []
        assert r.csv_text() == _csv_of_rows(every)
    assert any(row["iteration_time_s"] is None for row in big_r.rows())
    assert ",," in big_r.csv_text()  # the null figures: empty cells
