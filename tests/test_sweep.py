"""Design-space explorer: enumeration, batch simulation, cost, Pareto front and ``vtrain sweep``."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from core import schedules
from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import ConfigError
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, p2p_overlapped
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.pipeline_graph import StageProgram, build_pipeline_graph
from core.sim.graph import build_graph
from core.sim.stages import stage_times
from core.sim.graph_types import KINDS
from core.sim.simulate import open_profile, profile_path, simulate
from core.sim.solver import solve
from core.sim.fastpath import pipeline_iteration_times
from core.studies.sweep import (one_stage_schedule, SweepCancelled, SweepSpace, enumerate_plans,
                                pareto_front, run_sweep)
from tests.conftest import EXAMPLES, ROOT, shared_file

TINY = ModelConfig("tiny", num_layers=4, hidden_size=64, num_attention_heads=8, ffn_hidden_size=None,
                   seq_length=32, vocab_size=1000)


def tiny_session(global_batch=8, gpus_per_node=4, **cost) -> Session:
    return Session(TINY, ParallelPlan(1, 1, 1, 1, global_batch, "1f1b", "none", "bf16"),
                   ClusterConfig(gpus_per_node=gpus_per_node), CostConfig(**{"price_per_gpu_hour_usd": 2.0,
                                                                             "training_tokens": 1e9, **cost}))


def key(plan: ParallelPlan) -> tuple:
    return (plan.tensor_parallel, plan.pipeline_parallel, plan.data_parallel, plan.micro_batch_size,
            plan.schedule, plan.recompute, plan.virtual_pipeline_stages,
            plan.account_for_embedding_in_pipeline_split, plan.account_for_loss_in_pipeline_split)


# --------------------------------------------------------------------------- enumeration

def test_exact_budget_count_by_hand():
    # gpus_per_node=4 -> t in {1,2,4}; L=4 -> p in {1,2,4}; d = 4/(t*p):
    # (t,p,d) = (1,1,4) (1,2,2) (1,4,1) (2,1,2) (2,2,1) (4,1,1); b in {1,2}; B=8 divisible by every d*b.
    space = SweepSpace(hold_session_values=True, num_gpus=4, micro_batch_sizes=(1, 2), schedules=("1f1b",), recompute=("none",))
    plans = enumerate_plans(tiny_session(8), space)
    assert len(plans) == 12
    assert {(p.tensor_parallel, p.pipeline_parallel, p.data_parallel) for p in plans} == {
        (1, 1, 4), (1, 2, 2), (1, 4, 1), (2, 1, 2), (2, 2, 1), (4, 1, 1)}
    # B=4: d=4 with b=2 breaks B % (d*b) == 0, the only one
    assert len(enumerate_plans(tiny_session(4), space)) == 11
    # three recomputation modes (none, selective, full). The 6 (t,p,d,b) with p=1 have no
    # pipeline: one schedule each, 6 * 3 = 18. The 6 with p > 1: 1f1b, gpipe and zb-h1,
    # 6 * 3 * 3 = 54; interleaved needs p >= 2, L=4 divisible by p*v and m divisible by p: only
    # p=2, v=2, for (t,d) in {(1,2), (2,1)} and b in {1,2} (m = 4, 2, 8, 4): 4 * 3 = 12; and
    # p=2, v=3 with the embedding and the loss as layer slots (L + 2 = 6 slots over 6 virtual
    # stages, one each: the embedding's chunk and the loss's are alone, and their ranks hold
    # layers in their other chunks, as Megatron-Bridge's Llama 3.1 405B p16 v8 recipes run):
    # 12 more. 96 in all.
    plans = enumerate_plans(tiny_session(8), SweepSpace(hold_session_values=True, num_gpus=4,
                                                        micro_batch_sizes=(1, 2)))
    assert len(plans) == 96
    flagged = [p for p in plans if p.account_for_embedding_in_pipeline_split]
    assert len(flagged) == 12 and all(
        p.account_for_loss_in_pipeline_split and (p.pipeline_parallel, p.virtual_pipeline_stages)
        == (2, 3) for p in flagged)


def test_max_budget_count_by_hand():
    # t*p*d <= 4: t=1: p=1 (d 1,2,4), p=2 (d 1,2), p=4 (d 1) -> 6; t=2: p=1 (d 1,2), p=2 (d 1) -> 3;
    # t=4: p=1, d=1 -> 1; and t=1, p=3, d=1 with the embedding and the loss as layer slots
    # (L + 2 = 6 slots, 2 per stage; Megatron-Core's --account-for-embedding/loss-in-pipeline-
    # split, set where the layers need them). Eleven (t,p,d) times b in {1,2}.
    space = SweepSpace(hold_session_values=True, max_gpus=4, micro_batch_sizes=(1, 2), schedules=("gpipe",), recompute=("full",))
    plans = enumerate_plans(tiny_session(8), space)
    assert len(plans) == 22
    assert {(p.pipeline_parallel, p.account_for_embedding_in_pipeline_split,
             p.account_for_loss_in_pipeline_split) for p in plans
            if p.account_for_embedding_in_pipeline_split
            or p.account_for_loss_in_pipeline_split} == {(3, True, True)}
    assert all(p.num_gpus <= 4 and p.schedule == "gpipe" and p.recompute == "full" for p in plans)
    # a list of exact counts is the union of the exact sweeps
    both = enumerate_plans(tiny_session(8), SweepSpace(hold_session_values=True, num_gpus=(2, 4), micro_batch_sizes=(1, 2),
                                                       schedules=("gpipe",), recompute=("full",)))
    two = enumerate_plans(tiny_session(8), SweepSpace(hold_session_values=True, num_gpus=2, micro_batch_sizes=(1, 2),
                                                      schedules=("gpipe",), recompute=("full",)))
    assert len(both) == len(two) + 12 and len(two) == 2 * 3  # (1,1,2) (1,2,1) (2,1,1)


def brute_force(session: Session, space: SweepSpace, max_size: int = 16) -> set[tuple]:
    out = set()
    counts = space.gpu_counts()
    for t, p, d in itertools.product(range(1, max_size + 1), repeat=3):
        n = t * p * d
        if counts is not None and n not in counts:
            continue
        if space.max_gpus is not None and n > space.max_gpus:
            continue
        if space.max_data_parallel is not None and d > space.max_data_parallel:
            continue
        if space.tensor_parallel is not None and t not in space.tensor_parallel:
            continue
        if space.pipeline_parallel is not None and p not in space.pipeline_parallel:
            continue
        if space.data_parallel is not None and d not in space.data_parallel:
            continue
        if (space.tensor_parallel is None and not space.tensor_parallel_across_nodes
                and t > session.cluster.gpus_per_node):
            continue
        vs = space.virtual_pipeline_stages or range(2, 9)
        for b, sched, rc, v in itertools.product(space.micro_batch_sizes, space.schedules,
                                                 space.recompute, [None, *vs]):
            if p == 1 and sched != one_stage_schedule(space.schedules):
                continue  # no pipeline: one schedule stands for all
            for emb, loss in _split_flags(session.model.num_layers, p, sched, v):
                plan = ParallelPlan(t, p, d, b, session.plan.global_batch_size, sched, rc,
                                    session.plan.precision, virtual_pipeline_stages=v,
                                    account_for_embedding_in_pipeline_split=emb,
                                    account_for_loss_in_pipeline_split=loss)
                if not validate(Session(session.model, plan, session.cluster, session.cost)):
                    out.add(key(plan))
    return out


def _split_flags(L: int, p: int, sched: str, v) -> list[tuple[bool, bool]]:
    """The (embedding, loss) layer-slot flags a sweep gives the plans of (p, sched, v) of a
    session without them: none where the L layers split over the p*chunks virtual stages,
    else those of the fewest slots that split, two or more per virtual stage (one under the
    interleaved schedule with two or more chunks per rank) (L + 1: the loss's; L + 2: both);
    none when no slot count splits."""
    from core.schedules import get as schedule_get
    least = 2
    try:
        chunks = schedule_get(sched).chunks(v)
        n = p * chunks
        least = 1 if schedule_get(sched).uses_virtual_stages and chunks > 1 else 2
    except (TypeError, ValueError):
        n = p
    fits = [f for f in ((False, False), (False, True), (True, True))
            if (L + sum(f)) % n == 0 and (sum(f) == 0 or (L + sum(f)) // n >= least)]
    return [f for f in fits if sum(f) == sum(fits[0])] if fits else [(False, False)]


@pytest.mark.parametrize("space", [
    SweepSpace(hold_session_values=True, num_gpus=8),
    SweepSpace(hold_session_values=True, num_gpus=(3, 6, 12), micro_batch_sizes=(1, 3)),
    SweepSpace(hold_session_values=True, max_gpus=16, micro_batch_sizes=(1, 2, 4)),
    SweepSpace(hold_session_values=True, max_gpus=16, tensor_parallel_across_nodes=True),
    SweepSpace(hold_session_values=True, max_data_parallel=5, micro_batch_sizes=(2,)),
    SweepSpace(hold_session_values=True, max_gpus=12, tensor_parallel=(1, 2, 3), pipeline_parallel=(1, 2, 3)),
    SweepSpace(hold_session_values=True, data_parallel=(1, 2, 5, 6), micro_batch_sizes=(1, 2)),
], ids=["exact", "list", "max", "across-nodes", "max-d", "given-t-p", "given-d"])
def test_enumeration_is_exactly_the_valid_plans(space):
    session = tiny_session(12)
    plans = enumerate_plans(session, space)
    keys = [key(p) for p in plans]
    assert len(keys) == len(set(keys))
    for p in plans:  # every emitted plan is valid
        assert validate(Session(session.model, p, session.cluster, session.cost)) == []
    assert set(keys) == brute_force(session, space)  # and none is missed


def test_space_errors_are_reported_per_field():
    with pytest.raises(ConfigError) as exc:
        enumerate_plans(tiny_session(), SweepSpace(hold_session_values=True, num_gpus=4, max_gpus=8, micro_batch_sizes=(0,),
                                                   schedules=("zigzag",)))
    fields = {e.field for e in exc.value.errors}
    assert fields == {"sweep.num_gpus", "sweep.micro_batch_sizes", "sweep.schedules"}
    with pytest.raises(ConfigError, match="no GPU budget"):
        enumerate_plans(tiny_session(), SweepSpace(hold_session_values=True))
    bad_model = tiny_session()
    bad_model.model = ModelConfig("bad", 4, 65, 8, None, 32, 1000)  # h not divisible by a
    with pytest.raises(ConfigError, match="hidden_size=65"):
        enumerate_plans(bad_model, SweepSpace(hold_session_values=True, num_gpus=1))


def test_space_round_trips_through_json():
    space = SweepSpace(hold_session_values=True, num_gpus=(64, 128), tensor_parallel=(2, 4), micro_batch_sizes=(1, 2),
                       schedules=("1f1b",), max_data_parallel=8)
    again = SweepSpace.from_dict(json.loads(json.dumps(space.to_dict())))
    assert again == space
    with pytest.raises(ConfigError, match="unknown field"):
        SweepSpace.from_dict({"gpus": 3})


# --------------------------------------------------------------------------- batch simulation

@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_batch_recurrence_matches_graph_solver(schedule):
    rng = np.random.default_rng(7)
    for _ in range(60):
        p, m, n = int(rng.integers(1, 8)), int(rng.integers(1, 11)), 3
        arr = [rng.uniform(0.1, 3, (p, n)), rng.uniform(0.1, 5, (p, n)),
               rng.uniform(0, 1, (p, n)) * (rng.random() < 0.7), rng.uniform(0, 1, (p, n)),
               rng.uniform(0, 2, (p, n)) * (rng.random() < 0.7), rng.uniform(0, 1, (p, n))]
        got = pipeline_iteration_times(schedule, m, *arr)
        for j in range(n):
            programs = [StageProgram.from_tasks(
                [(0, 0, arr[0][i, j], -1)], [(1, 0, arr[1][i, j], -1)], send_fwd_s=arr[2][i, j],
                send_bwd_s=arr[3][i, j], dp_comm_s=arr[4][i, j], optimizer_s=arr[5][i, j])
                for i in range(p)]
            want = solve(build_pipeline_graph(programs, m, schedule)).iteration_time_s
            assert got[j] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("schedule", ["interleaved", "zb-h1"])
def test_batch_recurrence_matches_graph_solver_on_chunks_and_split_backward(schedule):
    rng = np.random.default_rng(11)
    for _ in range(40):
        p = int(rng.integers(2, 6))
        v = int(rng.integers(2, 4)) if schedule == "interleaved" else 1
        m = p * int(rng.integers(1, 4)) if schedule == "interleaved" else int(rng.integers(1, 9))
        n = 2
        per_chunk = [rng.uniform(0.1, 3, (p, v, n)), rng.uniform(0.1, 5, (p, v, n)),
                     rng.uniform(0.0, 2, (p, v, n))]
        per_stage = [rng.uniform(0, 1, (p, n)) * (rng.random() < 0.7), rng.uniform(0, 1, (p, n)),
                     rng.uniform(0, 2, (p, n)) * (rng.random() < 0.7), rng.uniform(0, 1, (p, n))]
        split = schedules.get(schedule).splits_backward
        got = pipeline_iteration_times(schedule, m, per_chunk[0], per_chunk[1], *per_stage,
                                       wgrad_s=per_chunk[2] if split else None)
        for j in range(n):
            want = general_solver_time(schedule, p, v, m, per_chunk, per_stage, j)
            assert got[j] == pytest.approx(want, rel=1e-12)


def general_solver_time(schedule: str, p: int, v: int, m: int, per_chunk, per_stage, j: int,
                        overlap_p2p: bool = False) -> float:
    """Iteration time of plan ``j`` of a random fast-path case by the general solver (the
    reference of the fast path's tests), its sends overlapped or not."""
    split = schedules.get(schedule).splits_backward
    programs = [StageProgram.from_chunks(
        [[(0, 0, per_chunk[0][i, c, j], -1)] for c in range(v)],
        [[(1, 0, per_chunk[1][i, c, j], -1)] for c in range(v)],
        [[(9, 0, per_chunk[2][i, c, j], -1)] for c in range(v)] if split else None,
        send_fwd_s=per_stage[0][i, j], send_bwd_s=per_stage[1][i, j],
        dp_comm_s=per_stage[2][i, j], optimizer_s=per_stage[3][i, j]) for i in range(p)]
    return solve(build_pipeline_graph(programs, m, schedule, overlap_p2p)).iteration_time_s


def test_batch_recurrence_closed_form():
    # uniform stages without communication: (m + p - 1)(tf + tb) for 1F1B and GPipe
    p, m = 6, 9
    ones = np.ones((p, 2))
    T = pipeline_iteration_times("1f1b", m, ones * [[1.0, 2.0]], ones * [[2.0, 3.0]], 0 * ones, 0 * ones,
                                 0 * ones, 0 * ones)
    assert T == pytest.approx([(m + p - 1) * 3.0, (m + p - 1) * 5.0])
    with pytest.raises(ValueError, match="shape"):
        pipeline_iteration_times("1f1b", m, ones, ones[:, :1], ones, ones, ones, ones)


@pytest.mark.parametrize("plan", [
    ParallelPlan(2, 3, 2, 2, 24, "1f1b", "full", "bf16"),
    ParallelPlan(1, 4, 1, 1, 16, "gpipe", "none", "bf16"),
    ParallelPlan(8, 2, 2, 1, 32, "1f1b", "none", "fp16"),   # t across nodes
    ParallelPlan(1, 1, 4, 2, 16, "1f1b", "full", "bf16"),
])
def test_microbatch_graph_keeps_every_remaining_task_time(plan):
    check_microbatch_graph(plan)


_MODERN = dict(tensor_parallel=2, pipeline_parallel=3, data_parallel=2, micro_batch_size=2,
               global_batch_size=24, schedule="1f1b", recompute="full", precision="bf16")


@pytest.mark.parametrize("changes", [
    dict(sequence_parallel=True), dict(recompute="selective"), dict(recompute_num_layers=3),
    dict(zero_stage=1), dict(zero_stage=1, overlap_grad_reduce=True),
    dict(zero_stage=1, overlap_param_gather=True),
    dict(zero_stage=2, overlap_grad_reduce=True, overlap_param_gather=True), dict(zero_stage=3),
    dict(zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True),
    dict(overlap_grad_reduce=True, grad_reduce_dtype="bf16"), dict(first_stage_layers=6, last_stage_layers=6),
    dict(schedule="gpipe", zero_stage=3, overlap_param_gather=True, sequence_parallel=True),
    dict(schedule="zb-h1", zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True),
    dict(schedule="zb-h1", zero_stage=1, overlap_grad_reduce=True, sequence_parallel=True),
    dict(schedule="interleaved", virtual_pipeline_stages=2, pipeline_parallel=2, global_batch_size=16,
         zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True),
    dict(schedule="interleaved", virtual_pipeline_stages=2, pipeline_parallel=2, global_batch_size=16,
         zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True, recompute="selective"),
    dict(schedule="interleaved", virtual_pipeline_stages=2, pipeline_parallel=2, global_batch_size=16,
         zero_stage=1, overlap_grad_reduce=True, overlap_p2p_comm=False),
], ids=repr)
def test_microbatch_graph_and_batch_solver_agree_on_modern_plans(changes):
    plan = ParallelPlan(**{**_MODERN, **changes})
    fine, coarse = check_microbatch_graph(plan)
    s = Session(MODEL_PRESETS["GPT-3 1.3B"], plan, ClusterConfig(gpus_per_node=4), CostConfig())
    st = stage_times(s, open_profile(profile_path(s)))
    T = pipeline_iteration_times(plan.schedule, plan.num_microbatches, st.fwd_s[..., None],
                                 st.bwd_s[..., None],
                                 *(x[:, None] for x in (st.send_fwd_s, st.send_bwd_s, st.dp_comm_s,
                                                        st.optimizer_s)),
                                 wgrad_s=st.wgrad_s[..., None], ready_s=st.ready_s[..., None],
                                 chunk_tail_s=st.chunk_tail_s[..., None],
                                 overlap_p2p=p2p_overlapped(plan))
    assert T[0] == pytest.approx(fine.iteration_time_s, rel=1e-12)


def check_microbatch_graph(plan):
    s = Session(MODEL_PRESETS["GPT-3 1.3B"], plan, ClusterConfig(gpus_per_node=4), CostConfig())
    store = open_profile(profile_path(s))
    fine, _ = build_graph(s, store)
    coarse, _ = build_graph(s, store, detail="microbatch")
    a, b = solve(fine), solve(coarse)
    assert coarse.num_tasks < fine.num_tasks
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s, rel=1e-12)
    # data-parallel tasks differ (overlapped buckets merge into the tail); the rest keep their times
    # (ZeRO 1/2 all-gather the parameters after the step; the merged tail puts it before)
    gather_after = plan.zero_stage in (1, 2) and not plan.overlap_param_gather
    for kind in ("pp_p2p",) + (() if gather_after else ("optimizer",)) + (
            ("dp_comm",) if plan.zero_stage == 0 and not plan.overlap_grad_reduce else ()):
        k = KINDS.index(kind)
        fa, fb = fine.kind == k, coarse.kind == k
        assert fa.sum() == fb.sum()
        np.testing.assert_allclose(b.start_s[fb], a.start_s[fa], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(b.end_s[fb], a.end_s[fa], rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="detail"):
        build_graph(s, store, detail="kernel")
    return a, b


def check_against_simulate(result, rows):
    for i in rows:
        r = simulate(result.session_for(i)).report
        assert result.iteration_time_s[i] == pytest.approx(r.iteration_time_s, rel=1e-9)
        assert result.max_memory_per_gpu_bytes[i] == r.max_memory_per_gpu_bytes
        assert bool(result.fits_in_memory[i]) == r.fits_in_memory
        assert result.training_days[i] == pytest.approx(r.training_days, rel=1e-9)
        assert result.gpu_hours[i] == pytest.approx(r.gpu_hours, rel=1e-9)
        assert result.cost_usd[i] == pytest.approx(r.cost_usd, rel=1e-9)
        assert result.mfu[i] == pytest.approx(r.mfu, rel=1e-9)
        assert result.hfu[i] == pytest.approx(r.hfu, rel=1e-9)
        assert result.tokens_per_s[i] == pytest.approx(r.tokens_per_s, rel=1e-9)
        assert (result.reason[i] != "") == (not r.fits_in_memory)
        if result.reason[i]:
            assert result.reason[i] in r.warnings


def test_batch_equals_single_plan_simulate_tiny():
    result = run_sweep(tiny_session(16), SweepSpace(hold_session_values=True, max_gpus=16, micro_batch_sizes=(1, 2),
                                                    tensor_parallel_across_nodes=True), prune=False)
    assert result.num_plans > 200
    check_against_simulate(result, range(result.num_plans))


def test_batch_equals_single_plan_simulate_gpt3_1_3b():
    s = Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(1, 1, 1, 1, 64, "1f1b", "none", "bf16"),
                ClusterConfig(), CostConfig(2.5, 26e9))
    result = run_sweep(s, SweepSpace(hold_session_values=True, num_gpus=(4, 16), micro_batch_sizes=(1, 4)), prune=False)
    assert result.num_plans > 50 and result.fits_in_memory.any()
    check_against_simulate(result, range(0, result.num_plans, 3))


def test_batch_equals_simulate_over_sequence_parallel_and_zero_stages():
    s = Session(MODEL_PRESETS["GPT-3 1.3B"],
                ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                             global_batch_size=32, schedule="1f1b", recompute="none", precision="bf16",
                             overlap_grad_reduce=True),
                ClusterConfig(gpus_per_node=4), CostConfig(2.0, 1e9))
    result = run_sweep(s, SweepSpace(hold_session_values=True, num_gpus=(8,), micro_batch_sizes=(1, 2), sequence_parallel=(False, True),
                                     zero_stages=(0, 1, 2, 3)), prune=False)
    assert set(result.zero_stage.tolist()) == {0, 1, 2, 3}
    assert set(result.sequence_parallel.tolist()) == {False, True}
    assert result.overlap_grad_reduce.all()  # not swept: the session plan's
    check_against_simulate(result, range(0, result.num_plans, 5))


def test_batch_equals_simulate_on_mtnlg_plans():
    s = Session(MODEL_PRESETS["MT-NLG 530B"], ParallelPlan(8, 35, 12, 1, 1920, "1f1b", "full", "fp16"),
                ClusterConfig(intra_node_bandwidth_gbytes_per_s=150.0), CostConfig(2.0, 270e9))
    result = run_sweep(s, SweepSpace(hold_session_values=True, tensor_parallel=(4, 8), pipeline_parallel=(15, 35),
                                     data_parallel=(12, 16), micro_batch_sizes=(1, 2),
                                     max_data_parallel=16, schedules=("1f1b", "gpipe")), prune=False)
    assert result.num_plans == 2 * 2 * 2 * 2 * 2 * 3  # t, p, d, b, schedule, recompute
    rows = [result.index_of(s.plan)] + list(range(0, result.num_plans, 9))
    check_against_simulate(result, rows)


def test_batch_equals_simulate_on_modern_schedules():
    # interleaved (L=24: p=2 with v in 2, 3, 4, 6; p=4 with v=2, 3, 6 and m % p == 0) and zb-h1
    s = Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(2, 2, 2, 1, 32, "1f1b", "full", "bf16"),
                ClusterConfig(), CostConfig(2.0, 1e9))
    result = run_sweep(s, SweepSpace(hold_session_values=True, num_gpus=(8, 16), tensor_parallel=(1, 2),
                                     pipeline_parallel=(2, 4), micro_batch_sizes=(1, 4),
                                     schedules=("interleaved", "zb-h1")), prune=False)
    assert set(result.schedule) == {"interleaved", "zb-h1"}
    assert set(result.virtual_pipeline_stages[result.schedule == "interleaved"]) == {2, 3, 4, 6}
    check_against_simulate(result, range(result.num_plans))


# --------------------------------------------------------------------------- cost and Pareto

def dominates(dj, cj, di, ci):
    return dj <= di and cj <= ci and (dj < di or cj < ci)


def check_front(days, cost, mask, front):
    idx = np.flatnonzero(mask)
    for i in range(len(days)):
        dominated = any(dominates(days[j], cost[j], days[i], cost[i]) for j in idx)
        if front[i]:
            assert mask[i] and not dominated
        elif mask[i]:
            assert dominated
    assert not front[~mask].any()


def test_pareto_front_random_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        days = rng.integers(1, 8, n).astype(float)   # many ties
        cost = rng.integers(1, 8, n).astype(float)
        mask = rng.random(n) < 0.8
        check_front(days, cost, mask, pareto_front(days, cost, mask))
    # duplicates of a front point are both on the front
    assert pareto_front(np.array([1.0, 1.0, 2.0]), np.array([5.0, 5.0, 6.0])).tolist() == [True, True, False]


def test_sweep_summary_is_consistent():
    s = tiny_session(16, training_tokens=5e10, price_per_gpu_hour_usd=3.0)
    result = run_sweep(s, SweepSpace(hold_session_values=True, max_gpus=16, micro_batch_sizes=(1, 2, 4)), deadline_days=2.0)
    fits = result.feasible  # fit and simulated: the pruned plans fit, with no figures
    assert np.array_equal(fits, result.fits_in_memory & np.isfinite(result.iteration_time_s))
    check_front(result.training_days, result.cost_usd, fits, result.pareto)
    assert result.fastest == int(np.flatnonzero(fits)[np.argmin(result.training_days[fits])])
    assert result.cost_usd[result.cheapest] == result.cost_usd[fits].min()
    ok = fits & (result.training_days <= 2.0)
    if ok.any():
        assert result.cost_usd[result.cheapest_within_deadline] == result.cost_usd[ok].min()
    assert result.cheapest_within(1e9) == result.cheapest
    front = result.pareto_indices()
    assert np.all(np.diff(result.training_days[front]) >= 0)
    assert result.fastest in front and result.cheapest in front
    np.testing.assert_allclose(result.gpu_hours, result.training_days * 24 * result.num_gpus, rtol=1e-12)
    np.testing.assert_allclose(result.cost_usd, result.gpu_hours * 3.0, rtol=1e-12)
    for i in range(result.num_plans):
        assert result.index_of(result.plan(i)) == i
    assert result.select(fits_only=True, deadline_days=2.0).sum() == ok.sum()


def test_progress_and_cancel():
    calls = []
    result = run_sweep(tiny_session(16), SweepSpace(hold_session_values=True, max_gpus=16),
                       progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, result.num_plans) and calls[-1] == (result.num_plans, result.num_plans)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    event = threading.Event()
    event.set()
    with pytest.raises(SweepCancelled):
        run_sweep(tiny_session(16), SweepSpace(hold_session_values=True, max_gpus=16), cancel=event)
    stop_after = iter(range(3))
    with pytest.raises(SweepCancelled):  # a callable works too; stops mid-way
        run_sweep(tiny_session(16), SweepSpace(hold_session_values=True, max_gpus=16), cancel=lambda: next(stop_after, None) is None)


# --------------------------------------------------------------------------- CLI

PLAN_KEYS = ("tensor_parallel", "pipeline_parallel", "data_parallel", "micro_batch_size", "num_gpus",
             "iteration_time_s", "training_days", "cost_usd", "fits_in_memory")


def test_cli_json_keys_and_csv(tmp_path, capsys):
    cfg = shared_file("configs", "mtnlg_530b_3360gpu_t8_d12_p35.json")
    out = tmp_path / "plans.csv"
    assert main(["sweep", str(cfg), "--json", "--tokens", "270e9", "--price-per-gpu-hour", "2",
                 "--deadline-days", "60", "--out", str(out), "--micro-batch-sizes", "1,2",
                 "--schedules", "1f1b"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for k in ("num_plans", "num_feasible", "wall_s", "fastest", "cheapest", "pareto"):
        assert k in doc
    assert 0 < doc["num_feasible"] <= doc["num_plans"]
    for plan in [doc["fastest"], doc["cheapest"], doc["cheapest_within_deadline"], *doc["pareto"]]:
        assert set(PLAN_KEYS) <= set(plan)
        assert plan["fits_in_memory"] is True and plan["num_gpus"] <= 3360
    assert doc["cheapest_within_deadline"]["training_days"] <= 60
    days = [p["training_days"] for p in doc["pareto"]]
    assert days == sorted(days) and doc["fastest"]["training_days"] == days[0]
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == doc["num_plans"]
    assert sum(r["on_pareto_front"] == "True" for r in rows) == len(doc["pareto"])


def test_cli_json_names_the_config_plan_and_what_dominates_it(capsys):
    cfg = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    assert main(["sweep", str(cfg), "--json"]) == 0
    own = json.loads(capsys.readouterr().out)["config"]
    assert own["in_sweep"] and (own["plan"]["tensor_parallel"], own["plan"]["pipeline_parallel"],
                                own["plan"]["data_parallel"], own["plan"]["micro_batch_size"]) == (2, 2, 2, 4)
    if own["on_pareto_front"]:
        assert own["num_dominating"] == 0 and own["cheapest_dominating"] is None
    else:
        dom = own["cheapest_dominating"]
        assert own["num_dominating"] >= 1
        assert dom["training_days"] <= own["plan"]["training_days"]
        assert dom["cost_usd"] <= own["plan"]["cost_usd"]
    assert main(["sweep", str(cfg), "--json", "--micro-batch-sizes", "16"]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == {
        "in_sweep": False, "why_not": "its micro-batch size 4 is not among the sweep's 16"}


def test_cli_says_when_no_plan_meets_the_deadline_or_the_config_is_not_swept(capsys):
    cfg = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    assert main(["sweep", str(cfg), "--micro-batch-sizes", "16", "--deadline-days", "0.01"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "No plan that fits finishes within 0.01 days; the fastest plan that fits takes" in out
    assert ("The config's own plan (t=2 p=2 d=2 b=4 1f1b recompute=none no-grad_acc_fusion) is not among the swept "
            "plans: its micro-batch size 4 is not among the sweep's 16.") in out
    assert main(["sweep", str(cfg), "--gpus", "16"]) == 0  # the config's plan has 8 GPUs
    out = " ".join(capsys.readouterr().out.split())
    assert "is not among the swept plans: it uses 8 GPUs and the sweep 16." in out


def test_space_says_why_it_excludes_a_plan():
    """SweepSpace.excludes names the first of the plan's GPU count and swept sizes the space
    does not allow (tester: 'not among the swept plans' gave no reason)."""
    from core.plan.parallel import ParallelPlan
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2,
                        micro_batch_size=4, global_batch_size=64, context_parallel=1)
    assert SweepSpace(hold_session_values=True, num_gpus=8).excludes(plan) is None
    assert SweepSpace(hold_session_values=True, max_gpus=4).excludes(plan) == "it uses 8 GPUs, more than the sweep's 4"
    assert SweepSpace(hold_session_values=True, num_gpus=8, tensor_parallel=[1, 4]).excludes(plan) == \
        "its tensor-parallel size 2 is not among the sweep's 1, 4"
    assert SweepSpace(hold_session_values=True, num_gpus=8, context_parallel=[2]).excludes(plan) == \
        "its context-parallel size 1 is not among the sweep's 2"
    assert SweepSpace(hold_session_values=True, num_gpus=8, schedules=["interleaved"]).excludes(plan) == \
        "its schedule 1f1b is not among the sweep's interleaved"


def test_cli_table_output(capsys):
    cfg = shared_file("configs", "mtnlg_530b_3360gpu_t8_d12_p35.json")
    assert main(["sweep", str(cfg), "--gpus", "3360", "--micro-batch-sizes", "1"]) == 0
    out = capsys.readouterr().out
    assert "Pareto front" in out and "fastest" in out and "config" in out


@pytest.mark.parametrize("args,needle", [
    (["--gpus", "0"], "--gpus"),
    (["--max-gpus", "x"], "--max-gpus"),
    (["--micro-batch-sizes", "1,-2"], "--micro-batch-sizes"),
    (["--schedules", "zigzag"], "--schedules"),
    (["--deadline-days", "0"], "--deadline-days"),
    (["--tokens", "-5"], "--tokens"),
    (["--gpus", "7", "--tensor-parallel", "3"], "no valid plan"),
    (["--tensor-parallel", "3"], "--tensor-parallel 3: num_attention_heads=16 is not divisible by "
                                 "tensor_parallel_size=3"),
    # 7 divides neither 24 layers nor 25 or 26 slots (5 would, with the embedding's), and
    # interleaving takes no uneven first / last stages (without it, 2 + 5 x 4 + 2 is swept)
    (["--pipeline-parallel", "7", "--schedules", "interleaved"],
     "--pipeline-parallel 7: splits the 24 layers unevenly: its plans have uneven first / last "
     "stages"),
])
def test_cli_bad_input_exits_2_with_one_message(args, needle):
    proc = subprocess.run([sys.executable, "-m", "core.cli", "sweep",
                           str(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"), *args],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert needle in proc.stderr and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_sweeps_a_file_whose_own_plan_breaks_a_rule(tmp_path, capsys):
    """The file's t, p, d, b are only a starting point: a plan with heads not divisible by its
    t still sweeps (and its own row is absent); a model rule it breaks is still an error."""
    doc = json.loads((ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json").read_text())
    doc["plan"]["tensor_parallel"] = 3  # 32 heads are not divisible by 3
    path = tmp_path / "bad_plan.json"
    path.write_text(json.dumps(doc))
    assert main(["sweep", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_plans"] > 0 and all(row["tensor_parallel"] != 3 for row in out["pareto"])
    doc["model"]["hidden_size"] = 2050  # not divisible by 32 heads: the model itself is wrong
    path.write_text(json.dumps(doc))
    assert main(["sweep", str(path)]) == 2
    assert "hidden_size" in capsys.readouterr().err


def test_cli_missing_config_exits_2(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in capsys.readouterr().err


def test_warnings_come_from_plans_that_fit():
    # a plan that does not fit is never run, so its extrapolated lookups are no one's concern
    from core.sim.stages import stage_times
    from core.io.session import load_any
    from core.sim.simulate import open_profile, profile_path
    session = load_any(EXAMPLES / "mtnlg_530b.json")
    result = run_sweep(session, SweepSpace(hold_session_values=True, max_gpus=3360, tensor_parallel=(1, 8),
                                           micro_batch_sizes=(1,), schedules=("1f1b",)))
    store = open_profile(profile_path(session))
    expect, others = set(), set()
    for i in range(result.num_plans):
        warned = stage_times(result.session_for(i), store).warnings
        (expect if result.fits_in_memory[i] else others).update(warned)
    assert set(result.warnings) == expect
    assert others - expect  # t=1 plans: huge all-reduces, and far too big for the GPU


def test_cli_names_a_virtual_stage_count_no_pipeline_can_hold(capsys):
    # GPT-3 1.3B: 24 layers; 5 divides no p*v with p among the divisors of 24
    from core.cli import main
    rc = main(["sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
               "--schedules", "interleaved", "--virtual-pipeline-stages", "5"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--virtual-pipeline-stages 5" in err and "num_layers=24" in err


def test_batch_equals_simulate_with_the_embedding_and_loss_in_the_pipeline_split():
    # 22 layers + embedding + loss = 24 slots: p in 2, 4 (not divisors of 22) with v = 2, 3, 6
    m = dataclasses.replace(MODEL_PRESETS["GPT-3 1.3B"], num_layers=22)
    s = Session(m, ParallelPlan(2, 2, 2, 1, 32, "1f1b", "full", "bf16",
                                account_for_embedding_in_pipeline_split=True,
                                account_for_loss_in_pipeline_split=True),
                ClusterConfig(), CostConfig(2.0, 1e9))
    result = run_sweep(s, SweepSpace(hold_session_values=True, num_gpus=(8,), tensor_parallel=(1, 2), pipeline_parallel=(2, 4),
                                     micro_batch_sizes=(1,), schedules=("1f1b", "interleaved")), prune=False)
    assert set(result.pipeline_parallel.tolist()) == {2, 4}
    assert {2, 3, 6} <= set(result.virtual_pipeline_stages[result.schedule == "interleaved"])
    check_against_simulate(result, range(result.num_plans))


def test_a_base_with_uneven_stages_is_swept_at_its_own_pipeline_size():
    """61 layers (DeepSeek-V3's count) split evenly only over p = 1 or 61; a base plan with
    uneven first and last stages at p = 4 is among the default candidates, with its stages;
    p = 2 splits evenly with the loss's slot, p = 8 unevenly, Megatron-style
    (core.studies.sweep.space.uneven_splits: 7 or 8 + 6 x 8 + 6 or 5)."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], num_layers=61)
    s = Session(m, ParallelPlan(tensor_parallel=1, pipeline_parallel=4, data_parallel=2,
                                micro_batch_size=1, global_batch_size=16, recompute="full",
                                first_stage_layers=16, last_stage_layers=15, precision="bf16"),
                ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    plans = enumerate_plans(s, SweepSpace(hold_session_values=True, num_gpus=8, tensor_parallel=[1], micro_batch_sizes=[1],
                                          schedules=["1f1b"], recompute=["full"]))
    got = {(p.pipeline_parallel, p.first_stage_layers, p.last_stage_layers) for p in plans}
    # and p = 2 with the loss's layer slot (62 slots; Megatron-Core refuses
    # them with uneven stages, so never at p = 4)
    assert got == {(1, None, None), (2, None, None), (4, 16, 15), (8, 7, 6), (8, 8, 5)}
    assert {(p.account_for_embedding_in_pipeline_split, p.account_for_loss_in_pipeline_split)
            for p in plans if p.pipeline_parallel == 2} == {(False, True)}
    assert not any(p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split
                   for p in plans if p.pipeline_parallel != 2)



def test_the_bases_block_recompute_count_is_capped_per_model_chunk():
    """The base's recompute_num_layers reaches every full-recomputation plan; Megatron applies
    it per model chunk, so a plan whose chunks hold no more layers than the count recomputes
    every layer (None) and stays valid, instead of being refused as above its chunks. 24
    layers, p = 2: a 12-layer stage keeps 4; interleaved v = 2, 3, 4, 6 (chunks of 6, 4, 3, 2)
    keep 4, then every layer."""
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    m = MODEL_PRESETS["GPT-3 1.3B"]
    s = Session(m, ParallelPlan(tensor_parallel=1, pipeline_parallel=2, data_parallel=1,
                                micro_batch_size=1, global_batch_size=12, recompute="full",
                                recompute_num_layers=4, precision="bf16"),
                ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8))
    plans = enumerate_plans(s, SweepSpace(hold_session_values=True, num_gpus=2, tensor_parallel=[1], pipeline_parallel=[2],
                                          micro_batch_sizes=[1], recompute=["full"],
                                          schedules=["1f1b", "interleaved"]))
    got = {(p.schedule, p.virtual_pipeline_stages, p.recompute_num_layers) for p in plans}
    assert got == {("1f1b", None, 4), ("interleaved", 2, 4), ("interleaved", 3, None),
                   ("interleaved", 4, None), ("interleaved", 6, None)}

def _qwen_session():
    import dataclasses

    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    return Session(model=dataclasses.replace(MODEL_PRESETS["Qwen3-30B-A3B"], seq_length=4096),
                   plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=16,
                                     micro_batch_size=1, global_batch_size=256,
                                     expert_parallel=16, zero_stage=1),
                   cluster=ClusterConfig(gpu="H100-SXM5-80GB"))


def test_no_plan_reasons_name_the_value_and_its_own_rule():
    """Tester: --expert-parallel 3 was explained by ep=16 (the file's), which was never tried,
    and one message repeated per micro-batch size; --gpus 100 said nothing about the count."""
    from core.studies.sweep import SweepSpace, no_plan_errors
    s = _qwen_session()
    errs = no_plan_errors(s, SweepSpace(hold_session_values=True, num_gpus=16, expert_parallel=[3], recompute=("none",),
                                        schedules=("1f1b",)))
    text = [f"{e.field}: {e.message}" for e in errs]
    assert "--expert-parallel 3: num_experts=128 is not divisible by expert_parallel=3" in text
    assert not any("16" in e.field for e in errs[1:])
    assert len(text) == len(set(text))
    # 110 (not 100: t=4 p=25 with the embedding / loss slots, 50 slots, makes 100)
    errs = no_plan_errors(s, SweepSpace(hold_session_values=True, num_gpus=110, recompute=("none",)))
    assert [e.field for e in errs[1:]] == ["--gpus 110"]
    assert "no t*p*cp*d makes 110 GPUs" in errs[1].message


def test_values_in_no_valid_plan_are_named_not_dropped():
    from core.studies.sweep import SweepSpace, run_sweep, unused_values
    s = _qwen_session()
    space = SweepSpace(hold_session_values=True, num_gpus=16, expert_parallel=[3, 8], recompute=("none",),
                       schedules=("1f1b",), micro_batch_sizes=[1])
    result = run_sweep(s, space, workers=1)
    assert set(result.plan_columns["expert_parallel"].tolist()) == {8}
    notes = unused_values(s, space, result)
    assert [(e.field, e.message) for e in notes] == [
        ("--expert-parallel 3", "num_experts=128 is not divisible by expert_parallel=3")]
    space = SweepSpace(hold_session_values=True, num_gpus=16, expert_parallel=[8], recompute=("none",), schedules=("1f1b",),
                       micro_batch_sizes=[1])
    assert unused_values(s, space, run_sweep(s, space, workers=1)) == []


def test_no_plan_reasons_for_sizes_beyond_the_budget_and_unused_gpu_counts():
    """Tester: --tensor-parallel 16 on an 8-GPU budget and --expert-parallel 16 with --gpus 8
    said nothing; --gpus 8,7 dropped 7 without a word."""
    from core.studies.sweep import SweepSpace, no_plan_errors, run_sweep, unused_values
    s = _qwen_session()
    errs = no_plan_errors(s, SweepSpace(hold_session_values=True, num_gpus=8, expert_parallel=[16], recompute=("none",)))
    assert [(e.field, e.message) for e in errs[1:]] == [
        ("--expert-parallel 16", "more GPUs than the budget allows (at most 8)")]
    # 11 (not 7: p = 7 splits 49 slots, the loss's counted)
    space = SweepSpace(hold_session_values=True, num_gpus=[8, 11], expert_parallel=[8], recompute=("none",),
                       schedules=("1f1b",), micro_batch_sizes=[1])
    notes = unused_values(s, space, run_sweep(s, space, workers=1))
    assert [e.field for e in notes] == ["--gpus 11"]
    assert notes[0].message.startswith("no t*p*cp*d makes 11 GPUs")


@pytest.mark.parametrize("option, text", [
    ("--tensor-parallel", "1,,2"), ("--micro-batch-sizes", "4,"), ("--recompute", "none,,full"),
    ("--overlap-moe-expert-parallel-comm", "n,,y"), ("--schedules", ",1f1b"),
])
def test_cli_refuses_an_empty_list_item_naming_the_option(option, text, capsys):
    """``1,,2`` is a typo, not a request for 1 and 2: it exits 2 with one line naming the
    option (it used to be dropped silently)."""
    cfg = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    assert main(["sweep", str(cfg), "--json", option, text]) == 2
    err = capsys.readouterr().err
    assert f"{option}: {text!r} has an empty item" in err and "Traceback" not in err


def test_the_configs_plan_at_t_1_is_found_whatever_its_sequence_parallel_flag():
    """A config at t = 1 with sequence_parallel on (left from a t > 1 plan) is the swept plan
    with it off: the flag changes nothing at t = 1 (tester: 'not among the swept plans')."""
    import dataclasses as dc

    from core.io.session import load_any
    from core.studies.sweep import run_sweep
    s = load_any(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json")
    s.plan = dc.replace(s.plan, tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                        micro_batch_size=1, sequence_parallel=True)
    space = SweepSpace(hold_session_values=True, num_gpus=8, tensor_parallel=[1], pipeline_parallel=[1],
                       micro_batch_sizes=[1], schedules=[s.plan.schedule],
                       recompute=[s.plan.recompute], sequence_parallel=[False, True])
    res = run_sweep(s, space)
    i = res.index_of(s.plan)
    assert i is not None and res.plans[i].tensor_parallel == 1
    assert res.to_dict()["config"]["in_sweep"] is True


def test_cli_tables_on_a_narrow_terminal_keep_every_figure(capsys, monkeypatch):
    """At 80 columns the plan fields become one wrapping ``plan`` column (the plan's label) and
    every figure keeps its width: no iteration time, cost or GiB cut to an ellipsis (a new
    user's trial: "179.04..." and "75.…" hid the tight mark). A plan that was not simulated
    shows dashes, never nan."""
    monkeypatch.setenv("COLUMNS", "80")
    cfg = ROOT / "resources" / "examples" / "mtnlg_530b.json"
    assert main(["sweep", str(cfg), "--gpus", "3360", "--micro-batch-sizes", "1",
                 "--schedules", "1f1b,zb-h1"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Best plans"):out.index("Pareto front")]
    assert "…" not in table and "nan" not in out
    assert " plan " in table.splitlines()[1] and "iter s" in table and "GiB" in table
    assert "t=8 p=35 d=12 b=1" in table
    assert max(len(line) for line in out.splitlines()) <= 80


def test_cli_says_when_the_global_batch_is_smaller_than_the_gpus(capsys):
    """A preset's or an import's small global batch (8 sequences) swept on 64 GPUs: the header
    says that data parallelism stops at the batch and how to set the run's batch."""
    cfg = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    assert main(["sweep", str(cfg), "--gpus", "64", "--set", "plan.global_batch_size=8",
                 "--micro-batch-sizes", "1"]) == 0
    out = capsys.readouterr().out
    assert "the global batch (8 sequences" in out and "plan.global_batch_size=N" in out


def test_best_by_says_why_a_value_has_no_plan(capsys):
    """A swept value none of whose plans fits (b = 64 without recomputation on 8 GPUs) has no
    plan in ``best_by``, and a reason naming its plans and the least memory they need; the
    table prints the reason under its row of dashes."""
    from core.io.session import load_any
    cfg = ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    s = load_any(cfg)
    r = run_sweep(s, SweepSpace(max_gpus=8, micro_batch_sizes=(1, 64), recompute=("none",)),
                  workers=1)
    row = {x["value"]: x for x in r.best_by()["micro_batch_size"]}[64]
    has = r.micro_batch_size == 64
    assert row["plan"] is None and not r.fits_in_memory[has].any()
    least = r.max_memory_per_gpu_bytes[has].min() / 2**30
    assert row["reason"] == (f"none of its {int(has.sum()):,} plans fits in memory (the smallest "
                             f"needs {least:,.1f} GiB per GPU)")
    assert main(["sweep", str(cfg), "--max-gpus", "8", "--micro-batch-sizes", "1,64",
                 "--recompute", "none"]) == 0
    assert "b 64: none of its" in capsys.readouterr().out


def test_cli_refuses_a_virtual_stage_count_below_two(capsys):
    # v = 1 is no interleaving (Megatron-Core needs v >= 2): refused by name, not dropped
    # silently (the interleaved schedule vanished from the sweep, or "no valid plan" with
    # no reason when it was the only schedule)
    from core.cli import main
    for extra in ([], ["--schedules", "interleaved"]):
        rc = main(["sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
                   "--virtual-pipeline-stages", "1", *extra])
        assert rc == 2
        err = capsys.readouterr().err
        assert "virtual" in err and "1" in err and ">= 2" in err
    assert any(e.field == "sweep.virtual_pipeline_stages"
               for e in SweepSpace(num_gpus=8, virtual_pipeline_stages=(1, 2)).errors())


def test_dimensions_say_default_for_the_default_schedules_and_recompute(capsys):
    # schedules and recomputation modes have a default list (not None): when held at one
    # value by another rule (p = 1 keeps 1F1B) the reason is the default, not "the values
    # given" the user did not give
    from core.cli import main
    rc = main(["sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "8",
               "--pipeline-parallel", "1", "--recompute", "full", "--workers", "1", "--json"])
    assert rc == 0
    dims = {d["field"]: d for d in json.loads(capsys.readouterr().out)["dimensions"]}
    assert dims["schedule"]["values"] == ["1f1b"]
    assert "the values given" not in dims["schedule"]["why"]
    assert "default" in dims["schedule"]["why"]
    assert dims["recompute"]["why"] == "the value given"  # given: --recompute full


def test_a_free_gpu_hour_prints_no_nan(capsys):
    # --price-per-gpu-hour 0 (GPUs already owned): every cost is $0; the config's plan line
    # said "at nan% more cost" (0/0) and numpy warned twice on stderr (0 * inf for plans not
    # simulated, 0/0 here); the dominating plan named is the fastest of the equally cheap
    import warnings
    from core.cli import main
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(["sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"),
                   "--price-per-gpu-hour", "0", "--workers", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert "nan%" not in out and " nan " not in out
    line = " ".join(out[out.index("The config's plan is dominated"):].split())
    assert "at the same cost" in line
    fastest = " ".join(out[out.index("\nfastest ") + 1:].split("\n")[0].split()[1:6])
    assert fastest in line
