"""The default plan space, branch and bound and the answers per dimension of ``vtrain sweep``.

Pruning must be exact: on small spaces (dense 1F1B, interleaved and ZB-H1, context
parallelism, expert parallelism) the pruned sweep's front, fastest, cheapest and deadline
plans and best plan per dimension value equal an exhaustive sweep's (the oracle), and every
bound is at most the simulated time.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.io.session import load_any
from core.studies.sweep import SweepSpace, enumerate_plans, run_sweep, sweep_work
from tests.conftest import EXAMPLES


def gpt3_small(global_batch=64) -> Session:
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.plan = dataclasses.replace(s.plan, global_batch_size=global_batch)
    return s


def moe_session() -> Session:
    model = dataclasses.replace(MODEL_PRESETS["GPT-OSS 20B"], seq_length=2048)
    plan = ParallelPlan(1, 1, 8, 1, 64, "1f1b", "none", "bf16")
    return Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
                   CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e11))


CASES = {
    "dense-schedules": (gpt3_small, dict(max_gpus=8, context_parallel=(1,))),
    "zb-v": (gpt3_small, dict(max_gpus=8, context_parallel=(1,), schedules=("1f1b", "zb-h1", "zb-v"),
                              micro_batch_sizes=(1, 2))),
    "context-parallel": (gpt3_small, dict(num_gpus=8, context_parallel=(1, 2, 4),
                                          micro_batch_sizes=(1, 2), recompute=("none", "full"))),
    "expert-parallel": (moe_session, dict(num_gpus=8, pipeline_parallel=(1, 2, 4),
                                          micro_batch_sizes=(1, 2), context_parallel=(1,),
                                          zero_stages=(0, 1))),
}


def answers(r) -> dict:
    """What a sweep answers: the front, the best plans and the best plan per dimension value."""
    key = (lambda i: None if i is None else r.plans[i].label())
    return {"front": sorted(r.plans[i].label() for i in r.pareto_indices().tolist()),
            "fastest": key(r.fastest), "cheapest": key(r.cheapest),
            "deadline": key(r.cheapest_within_deadline),
            "best_by": {k: [(row["value"], None if row["plan"] is None else
                             (row["plan"]["iteration_time_s"], row["plan"]["cost_usd"]))
                            for row in rows] for k, rows in r.best_by().items()}}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request):
    make, kw = CASES[request.param]
    session, space = make(), SweepSpace(**kw)
    exhaustive = run_sweep(session, space, prune=False)
    deadline = float(np.nanmedian(exhaustive.training_days[exhaustive.fits_in_memory]))
    return (run_sweep(session, space, prune=True, deadline_days=deadline),
            run_sweep(session, space, prune=False, deadline_days=deadline))


def test_pruned_sweep_answers_as_the_exhaustive_one(pair):
    pruned, exhaustive = pair
    assert answers(pruned) == answers(exhaustive)
    # every plan that fits is simulated or pruned
    assert pruned.best_by() and pruned.num_feasible + int(pruned.pruned.sum()) == \
        exhaustive.num_feasible


def test_simulated_plans_have_the_exhaustive_figures_and_bounds_stay_below(pair):
    pruned, exhaustive = pair
    done = np.isfinite(pruned.iteration_time_s)
    assert np.array_equal(pruned.iteration_time_s[done], exhaustive.iteration_time_s[done])
    has = np.isfinite(pruned.lower_bound_s)
    assert has.any()
    assert np.all(pruned.lower_bound_s[has] <= exhaustive.iteration_time_s[has] * (1 + 1e-12))
    # pruned plans fit in memory (those that do not are never simulated) and have no figures
    assert np.all(np.isnan(pruned.iteration_time_s[pruned.pruned]))
    assert np.all(exhaustive.fits_in_memory[pruned.pruned])


def test_a_sweep_without_best_by_answers_the_front_and_best_plans_as_the_exhaustive_one(pair):
    """``best_by=False`` (the compute-optimal study's sweeps): the front, fastest, cheapest and
    deadline plans stay exact, fewer plans are simulated, and best_by is empty (not wrong)."""
    pruned, exhaustive = pair
    lean = run_sweep(pruned.session, pruned.space, deadline_days=pruned.deadline_days,
                     best_by=False)
    want = {k: v for k, v in answers(exhaustive).items() if k != "best_by"}
    assert {k: v for k, v in answers(lean).items() if k != "best_by"} == want
    assert lean.best_by() == {} and not lean.answers_best_by and pruned.answers_best_by
    assert lean.num_feasible <= pruned.num_feasible
    assert lean.num_feasible + int(lean.pruned.sum()) == exhaustive.num_feasible


def test_pruning_skips_plans_somewhere():
    make, kw = CASES["dense-schedules"]
    r = run_sweep(make(), SweepSpace(**kw))
    assert r.pruned.sum() > 0 and r.num_feasible < int(r.pruned.sum()) + r.num_feasible


def test_default_space_sweeps_megatron_choices_and_says_so():
    session = gpt3_small()
    plans = enumerate_plans(session, SweepSpace(max_gpus=8))
    # sequence parallelism on exactly where t > 1; ZeRO 0-3; the overlaps on where allowed
    assert all(p.sequence_parallel == (p.tensor_parallel > 1) for p in plans)
    assert {p.zero_stage for p in plans} == {0, 1, 2, 3}
    flash = session.copy()
    flash.model = dataclasses.replace(flash.model, attention_kernel="flash")
    assert {p.context_parallel for p in enumerate_plans(flash, SweepSpace(max_gpus=8))} == {
        1, 2, 4, 8}  # the powers of two up to the budget (s = 2,048 splits in 2*cp)
    assert all(p.tp_comm_overlap == (p.tensor_parallel > 1) for p in plans)
    assert all(p.overlap_grad_reduce == (p.data_parallel * p.context_parallel > 1) for p in plans)
    assert all(p.overlap_param_gather == (p.overlap_grad_reduce and p.zero_stage >= 1)
               for p in plans)
    held = enumerate_plans(session, SweepSpace(max_gpus=8, hold_session_values=True))
    assert {(p.sequence_parallel, p.zero_stage, p.context_parallel) for p in held} == {
        (False, 0, 1)}


def test_session_plan_outside_the_default_values_is_still_simulated():
    session = gpt3_small()  # t=2 without sequence parallelism: not a default value
    r = run_sweep(session, SweepSpace(max_gpus=8, context_parallel=(1,)))
    own = r.index_of(session.plan)
    assert own is not None and np.isfinite(r.iteration_time_s[own])
    dims = {d["field"]: d for d in r.dimensions}
    assert dims["sequence_parallel"]["values"] == [False, True]  # t = 1 off, t > 1 on
    assert dims["precision"]["swept"] is False


def test_cli_json_has_dimensions_best_by_and_no_cap(capsys):
    cfg = EXAMPLES / "gpt3_1.3b_single_node.json"
    assert main(["sweep", str(cfg), "--json", "--context-parallel", "1", "--zero-stages",
                 "0,1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dims = {d["field"]: d for d in doc["dimensions"]}
    assert dims["zero_stage"]["swept"] and dims["zero_stage"]["values"] == [0, 1]
    assert not dims["global_batch_size"]["swept"]
    fastest = doc["fastest"]["iteration_time_s"]
    assert min(row["plan"]["iteration_time_s"] for row in doc["best_by"]["zero_stage"]
               if row["plan"]) == fastest
    assert main(["sweep", str(cfg), "--json", "--context-parallel", "1", "--zero-stages",
                 "0,1", "--exhaustive"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["num_pruned"] == 0 and full["fastest"] == doc["fastest"]
    assert full["best_by"] == doc["best_by"] and full["pareto"] == doc["pareto"]
    # the plans that fit, simulated or not, as the table counts them ("N fit in memory, M of
    # them simulated"): the exhaustive sweep simulates each of them; num_feasible is those
    # simulated, fewer where branch and bound pruned
    assert doc["num_pruned"] > 0 and doc["num_feasible"] < doc["num_fit"]
    assert doc["num_fit"] == doc["num_feasible"] + doc["num_pruned"] == full["num_fit"] \
        == full["num_feasible"]
    # --max-work refuses by name, exit 2, with the estimate; no limit otherwise
    assert main(["sweep", str(cfg), "--context-parallel", "1", "--max-work", "10"]) == 2
    err = capsys.readouterr().err
    assert "max_work" in err and "pipeline steps" in err


def test_work_estimate_is_a_warning_not_a_refusal(monkeypatch):
    from core.studies.sweep import bound
    monkeypatch.setattr(bound, "LARGE_SWEEP_WORK", 1)
    told = []
    session = gpt3_small()
    r = run_sweep(session, SweepSpace(max_gpus=8, context_parallel=(1,), zero_stages=(1,)),
                  notice=told.append)
    assert len(told) == 1 and told[0] in " ".join(r.warnings)
    assert r.num_feasible > 0
    with pytest.raises(ConfigError):
        run_sweep(session, SweepSpace(max_gpus=8, context_parallel=(1,)), max_work=10)
    assert sweep_work(r.plans, session.model.num_layers) > 10


def test_cli_pick_writes_the_plan_as_a_session(tmp_path, capsys):
    cfg = EXAMPLES / "gpt3_1.3b_single_node.json"
    out = tmp_path / "fast.json"
    args = ["sweep", str(cfg), "--context-parallel", "1", "--zero-stages", "0,1"]
    assert main(args + ["--json", "--pick", "fastest", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    picked = load_any(out)
    fastest = doc["fastest"]
    assert all(getattr(picked.plan, k) == fastest[k] for k in (
        "tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size", "schedule",
        "recompute", "sequence_parallel", "zero_stage"))
    assert picked.model == load_any(cfg).model
    front = tmp_path / "front2.json"
    assert main(args + ["--json", "--pick", "2", "--out", str(front)]) == 0
    second = json.loads(capsys.readouterr().out)["pareto"][1]
    assert load_any(front).plan.data_parallel == second["data_parallel"]
    # bad picks: exit 2, nothing written
    bad = tmp_path / "bad.json"
    assert main(args + ["--pick", "999", "--out", str(bad)]) == 2
    assert main(args + ["--pick", "fastest", "--out", str(tmp_path / "x.csv")]) == 2
    assert main(args + ["--pick", "soonest", "--out", str(bad)]) == 2
    assert not bad.exists()
    # a .json out without --pick: no CSV written under a .json name; the message says what to do
    capsys.readouterr()
    assert main(args + ["--out", str(bad)]) == 2
    assert "--out" in (err := capsys.readouterr().err) and "--pick fastest|cheapest|deadline|N" in err
    assert "--out FILE.csv" in err and not bad.exists()


def test_best_plan_per_gpu_count_is_exact_under_pruning():
    session = gpt3_small()
    space = SweepSpace(num_gpus=(2, 4, 8), context_parallel=(1,), zero_stages=(0, 1),
                       micro_batch_sizes=(2, 4))
    pruned, exhaustive = run_sweep(session, space), run_sweep(session, space, prune=False)
    assert [r["value"] for r in pruned.best_by()["num_gpus"]] == [2, 4, 8]
    assert pruned.best_by() == exhaustive.best_by()


def test_activations_do_not_depend_on_the_data_parallel_side():
    """The sweep shares activations between plans that differ only in ZeRO and its overlaps
    (core.model.memory.ACTIVATION_FREE_PLAN_FIELDS): check it on every plan of a space."""
    from core.model import model_math
    session = gpt3_small()
    by_key: dict = {}
    for pl in enumerate_plans(session, SweepSpace(max_gpus=8, context_parallel=(1,))):
        k = repr(dataclasses.replace(pl, zero_stage=0, overlap_grad_reduce=False,
                                     overlap_param_gather=False))
        acts = model_math.stage_memory_arrays(session.model, pl)[3]
        if k in by_key:
            assert np.array_equal(by_key[k], acts)
        by_key.setdefault(k, acts)


def test_default_space_tries_the_moe_dispatchers_and_the_expert_overlap():
    # GPT-OSS 20B on two H100 nodes: the fastest plan with the dispatcher and the expert
    # all-to-all overlap held at the session's (alltoall, off) is beaten by the same plan
    # with flex and the overlap, simulated by hand (the breaker's check of issue 26:
    # DeepSeek-V3 on 256 H100s, flex 13 % faster than the sweep's fastest; Mixtral 8x7B on
    # 64 A100s, the overlap 2 %); the default space has both, and its pruning stays exact
    from core.sim.simulate import simulate
    session = moe_session()
    session.plan = dataclasses.replace(session.plan, data_parallel=16)
    kw = dict(num_gpus=16, pipeline_parallel=(1, 2), micro_batch_sizes=(1, 2),
              context_parallel=(1,), zero_stages=(0, 1))
    held = run_sweep(session, SweepSpace(**kw, overlap_moe_expert_parallel_comm=(False,),
                                         moe_token_dispatcher_type=("alltoall",)), workers=1)
    f = held.plans[held.fastest]
    hand = []
    for ov in (False, True):
        for disp in ("alltoall", "flex"):
            rep = simulate(dataclasses.replace(session, plan=dataclasses.replace(
                f, overlap_moe_expert_parallel_comm=ov, moe_token_dispatcher_type=disp))).report
            if rep.fits_in_memory:
                hand.append(rep.iteration_time_s)
    assert min(hand) < held.iteration_time_s[held.fastest] * 0.96  # 4.6 % faster
    space = SweepSpace(**kw)
    r = run_sweep(session, space, workers=1)
    # the sweep's fast path sums the same times in another order: equal to the last bits
    assert r.iteration_time_s[r.fastest] <= min(hand) * (1 + 1e-12)
    best = r.plans[r.fastest]
    assert best.expert_parallel > 1 and best.moe_token_dispatcher_type == "flex"
    dims = {d["field"]: d for d in r.dimensions}
    assert dims["moe_token_dispatcher_type"]["values"] == ["alltoall", "flex"]
    assert dims["overlap_moe_expert_parallel_comm"]["values"] == [False, True]
    assert answers(r) == answers(run_sweep(session, space, workers=1, prune=False))


def long_context_session() -> Session:
    """Llama 3 8B (32 query heads, 8 query groups) at 128k tokens on 16 H100s, global batch 16."""
    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=131072)
    plan = ParallelPlan(1, 1, 16, 1, 16, "1f1b", "none", "bf16")
    return Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
                   CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e11))


def test_default_space_tries_the_all_to_all_cp_exchange():
    # t <= 2, where Ulysses' all-to-all splits a tensor-parallel rank's 4 or 8 query groups
    # over cp = 2 or 4: the fastest plan with the exchange held at the ring (t=2 cp=4 d=2,
    # 6 of its 32 layers recomputed, 44.38 s; 5 and 44.03 s before the embedding's dropout
    # mask and the final norm were counted) needs more with a2a as it is (TE's all-to-all
    # keeps the core's output twice per layer, 32768 tokens x 16 heads x 128 x 2 bytes = 128
    # MiB on each of the 26 layers kept); with 7 layers recomputed it fits and beats the ring
    # (43.99 s). The default space tries both, and its pruning stays exact
    from core.sim.simulate import simulate
    session = long_context_session()  # with Megatron-LM's dropout (its masks), as computed
    session = dataclasses.replace(session, model=dataclasses.replace(
        session.model, hidden_dropout=0.1, attention_dropout=0.1))
    kw = dict(max_gpus=16, tensor_parallel=(1, 2), context_parallel=(2, 4),
              micro_batch_sizes=(1,))
    held = run_sweep(session, SweepSpace(**kw, cp_comm_type=("p2p",)), workers=1)
    f = held.plans[held.fastest]
    assert f.context_parallel > 1 and f.cp_comm_type == "p2p"
    assert (f.tensor_parallel, f.context_parallel, f.recompute_num_layers) == (2, 4, 6)
    assert {pl.cp_comm_type for pl in held.plans} == {"p2p"}
    a2a = dataclasses.replace(f, cp_comm_type="a2a")
    ring_mem = simulate(dataclasses.replace(session, plan=f)).report.max_memory_per_gpu_bytes
    a2a_mem = simulate(dataclasses.replace(session, plan=a2a)).report.max_memory_per_gpu_bytes
    assert a2a_mem - ring_mem == pytest.approx(26 * 128 * 2**20 * 1.033, rel=1e-9)
    space = SweepSpace(**kw)
    r = run_sweep(session, space, workers=1)
    assert r.plans[r.fastest] == dataclasses.replace(a2a, recompute_num_layers=7)
    rep = simulate(dataclasses.replace(session, plan=r.plans[r.fastest])).report
    assert rep.fits_in_memory
    assert rep.iteration_time_s < held.iteration_time_s[held.fastest]
    # the sweep's fast path sums the same times in another order: equal to the last bits
    assert r.iteration_time_s[r.fastest] <= rep.iteration_time_s * (1 + 1e-12)
    # a2a valid wherever t*cp <= 16 with t <= 2; of the partial recomputations the sweep adds
    # (the fewest layers that fit, when fewer than all), 9 of the ring's have none with a2a
    assert r.num_plans == 2 * held.num_plans - 9
    dims = {d["field"]: d for d in r.dimensions}
    assert dims["cp_comm_type"]["swept"] and dims["cp_comm_type"]["values"] == ["a2a", "p2p"]
    assert dims["cp_a2a_size"]["values"] == [None]
    held_dims = {d["field"]: d for d in held.dimensions}
    assert held_dims["cp_comm_type"]["values"] == ["p2p"]
    assert answers(r) == answers(run_sweep(session, space, workers=1, prune=False))


def test_a_dense_sweep_without_context_parallelism_enumerates_the_plans_it_did():
    # GPT-3 1.3B's example (no flash attention: no cp > 1) enumerates the 4,325 plans of its
    # default space, each with the session's p2p (4,316 before the loss stage counted the larger
    # of its logits and the recomputed layer's working set, not both: the memory-bounded
    # dimensions, micro-batch sizes and block recomputation's layer counts, changed)
    session = gpt3_small()
    r = run_sweep(session, SweepSpace.default_for(session), workers=1)
    assert r.num_plans == 4325
    assert {(pl.context_parallel, pl.cp_comm_type, pl.cp_a2a_size) for pl in r.plans} == {
        (1, "p2p", None)}
    dims = {d["field"]: d for d in r.dimensions}
    assert not dims["cp_comm_type"]["swept"] and dims["cp_comm_type"]["values"] == ["p2p"]


def test_default_space_fuses_the_cross_entropy_and_no_hand_choice_beats_it(capsys):
    # the breaker's check of issue 26: in every case tried (Llama 3 8B on 8 and 64 H100s,
    # Qwen3-30B-A3B, GPT-OSS 120B, Llama 3 70B on GB200 ...) ticking the fused cross-entropy
    # by hand on the sweep's fastest plan beat it (0.5 to 3.7 %); the sweep held the session's
    # unfused one
    from core.sim.simulate import simulate
    session = gpt3_small()
    kw = dict(max_gpus=8, context_parallel=(1,), micro_batch_sizes=(1, 2))
    held = run_sweep(session, SweepSpace(**kw, hold_session_values=True), workers=1)
    f = held.plans[held.fastest]
    assert not f.cross_entropy_loss_fusion
    r = run_sweep(session, SweepSpace(**kw), workers=1)
    best = r.plans[r.fastest]
    assert (best.cross_entropy_loss_fusion, best.cross_entropy_fusion_impl) == (True, "te")
    # each choice by hand on the default's fastest: none faster and fitting
    for ce, impl in ((False, "native"), (True, "native"), (True, "te")):
        rep = simulate(dataclasses.replace(session, plan=dataclasses.replace(
            best, cross_entropy_loss_fusion=ce, cross_entropy_fusion_impl=impl))).report
        assert not (rep.fits_in_memory  # (the sweep equals simulate within 1e-9)
                    and rep.iteration_time_s < r.iteration_time_s[r.fastest] * (1 - 1e-9))
    # te by hand on the held space's fastest beats it: the gap the default closes
    rep = simulate(dataclasses.replace(session, plan=dataclasses.replace(
        f, cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te"))).report
    assert rep.fits_in_memory and rep.iteration_time_s < held.iteration_time_s[held.fastest]
    # all three given: swept, and te is still the fastest
    every = run_sweep(session, SweepSpace(**kw, cross_entropy_fusion=("off", "native", "te")),
                      workers=1)
    assert every.iteration_time_s[every.fastest] == r.iteration_time_s[r.fastest]
    dims = {d["field"]: d for d in every.dimensions}
    assert dims["cross_entropy_fusion_impl"]["values"] == ["native", "te"]
    assert main(["sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
                 "--cross-entropy-fusion", "fast"]) == 2
    assert "--cross-entropy-fusion" in capsys.readouterr().err


def test_default_space_recomputes_the_fewest_layers_that_fit():
    # the breaker's check of issue 26: Llama 3.1 405B on 2,048 B200s, the sweep's fastest
    # t8 p1 d256 b8 full recomputation (20.89 s) recomputing 121 of its 126 layers by hand
    # (Megatron's --recompute-method block --recompute-num-layers 121) took 20.68 s and fit
    # Here GPT-3 13B's shape with 44 layers (40 until issue 27: the whole 80 GiB now holds a
    # plan that needs no recomputation at 40 layers, tight at 76.3 GiB; 44 layers need it again
    # at t = 1, the sweep's fastest recomputing 6 layers under FSDP at 79.1 GiB, tight; since
    # gradient accumulation fusion a t = 2 plan without recomputation is faster, so t = 1 here)
    from core.sim.simulate import simulate
    model = dataclasses.replace(MODEL_PRESETS["GPT-3 13B"], seq_length=2048, num_layers=44)
    session = Session(model, ParallelPlan(1, 1, 8, 1, 64, "1f1b", "full", "bf16"),
                      ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8),
                      CostConfig(price_per_gpu_hour_usd=2.0, training_tokens=1e11))
    space = SweepSpace(num_gpus=8, context_parallel=(1,), pipeline_parallel=(1, 2),
                       schedules=("1f1b",), tensor_parallel=(1,), micro_batch_sizes=(1, 2, 4))
    r = run_sweep(session, space, workers=1)
    best = r.plans[r.fastest]
    n = best.recompute_num_layers
    assert best.recompute == "full" and n is not None
    assert 1 < n < model.num_layers // best.pipeline_parallel
    # faster than every plan that recomputes all layers or none (what the sweep had before)
    whole = [i for i, pl in enumerate(r.plans) if pl.recompute_num_layers is None
             and np.isfinite(r.iteration_time_s[i])]
    assert r.iteration_time_s[r.fastest] < min(r.iteration_time_s[whole])
    # the fewest that fit with the allocator's cache (the sweep builds no partial recomputation
    # that needs PyTorch to free it): by direct simulation, n's whole need is within the GPU's
    # memory with the sweep's time, n - 1's is not
    run = lambda k: simulate(dataclasses.replace(session, plan=dataclasses.replace(
        best, recompute_num_layers=k))).report
    cap = run(n).memory_capacity_bytes
    assert run(n).fits_in_memory and run(n).max_memory_per_gpu_bytes <= cap
    assert run(n - 1).max_memory_per_gpu_bytes > cap
    assert run(n).iteration_time_s == pytest.approx(r.iteration_time_s[r.fastest], rel=1e-9)
    dims = {d["field"]: d for d in r.dimensions}
    assert n in dims["recompute_num_layers"]["values"]
    assert answers(r) == answers(run_sweep(session, space, workers=1, prune=False))
    # held session values: every layer, as the session says
    held = run_sweep(session, dataclasses.replace(space, hold_session_values=True), workers=1)
    assert all(pl.recompute_num_layers is None for pl in held.plans)


def test_a_session_with_the_tp_overlap_on_sweeps(capsys):
    # the breaker's check of issue 26: Megatron-Bridge's published sessions (Llama 3 70B on
    # 64 H100s, t4 p8 v5 with --tp-comm-overlap; Llama 3.1 405B on 128 B200s and 256 GB200s)
    # simulate, but `vtrain sweep` refused them: the check of everything but the plan set
    # t = 1 and kept the overlap, which needs t > 1
    cfg = str(EXAMPLES / "gpt3_1.3b_single_node.json")  # t = 2
    sets = ["--set", "plan.sequence_parallel=true", "--set", "plan.tp_comm_overlap=true"]
    assert main(["simulate", cfg, *sets]) == 0
    capsys.readouterr()
    assert main(["sweep", cfg, "--gpus", "8", "--micro-batch-sizes", "4", "--workers", "1",
                 "--json", *sets]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["num_plans"] > 0 and doc["config"]["in_sweep"] is True  # its own plan too


def test_variant_plans_share_the_overlap_rule_only_where_it_reads_the_same_fields(monkeypatch):
    """The expert all-to-all overlap's rules are asked once per combination of the fields they
    read (variants._EP_OVERLAP_RULE_FIELDS); every field shared, the same plans come out, and
    each overlapped plan passes its own rules."""
    from core.plan.parallel import PLAN_FIELDS
    from core.plan.rules import ep_overlap_errors
    from core.studies.sweep import variants

    session = moe_session()
    space = SweepSpace(num_gpus=16, pipeline_parallel=(1, 2), micro_batch_sizes=(1, 2),
                       context_parallel=(1,), zero_stages=(0, 1))
    shared = enumerate_plans(session, space)
    assert any(p.overlap_moe_expert_parallel_comm for p in shared)
    assert not any(ep_overlap_errors(session.model, p) for p in shared)
    monkeypatch.setattr(variants, "_EP_OVERLAP_RULE_FIELDS", PLAN_FIELDS)
    own = enumerate_plans(session, space)
    assert [dataclasses.asdict(p) for p in shared] == [dataclasses.asdict(p) for p in own]


def test_a_sweep_keeping_each_gpu_counts_best_answers_those_as_the_exhaustive_one():
    """``best_by="num_gpus"`` (the scheduler study's sweeps, which read each count's fastest plan
    alone): the fastest plan of every exact GPU count, the front, fastest and cheapest plans
    equal the exhaustive sweep's; fewer plans are simulated than with every value's best kept,
    and best_by is empty (not partly answered)."""
    session = gpt3_small()
    space = SweepSpace(num_gpus=[2, 4, 8], context_parallel=(1,))
    exhaustive = run_sweep(session, space, prune=False)
    full = run_sweep(session, space)
    lean = run_sweep(session, space, best_by="num_gpus")

    def per_count(r):
        out = {}
        for n in (2, 4, 8):
            idx = np.flatnonzero((r.num_gpus == n) & r.feasible)
            i = int(idx[np.argmax(r.tokens_per_s[idx])])
            out[n] = (r.plans[i].label(), float(r.tokens_per_s[i]))
        return out

    assert per_count(lean) == per_count(exhaustive)
    want = {k: v for k, v in answers(exhaustive).items() if k != "best_by"}
    assert {k: v for k, v in answers(lean).items() if k != "best_by"} == want
    assert lean.best_by() == {} and not lean.answers_best_by
    assert lean.num_feasible < full.num_feasible
    assert lean.num_feasible + int(lean.pruned.sum()) == exhaustive.num_feasible
