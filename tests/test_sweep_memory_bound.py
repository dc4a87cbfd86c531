"""The sweep's memory and lower-bound phases, fast paths against their per-plan references.

:func:`core.studies.sweep.bound.memory_verdicts` adds up the memory of many plans at once from
parts shared between plans, and :func:`core.studies.sweep.bound.fill_lower_bounds` bounds
each plan from the compute stream's busy times alone
(:func:`core.sim.stages.stage_busy_times`). Both must give, bit for bit, what the per-plan
computations give: :func:`core.sim.simulate.memory_verdict_arrays` of
:func:`core.model.memory.stage_memory_arrays` (bytes, fits, reason), and
:func:`core.studies.sweep.bound.iteration_lower_bound_s` of the full
:func:`core.sim.stages.stage_times` of each plan's :func:`bound_plan`. Checked on every plan
of spaces with dense 1F1B / GPipe / interleaved / ZB-H1 / ZB-V schedules, ZeRO 0-3 with the
data-parallel overlaps, every recompute mode, context parallelism, an MoE model with expert
parallelism, DeepSeek-V3 (MLA, MTP) with every ep, Gemma 2 (soft caps, post norms) and FP8.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from core.model import model_math
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.simulate import memory_verdict_arrays, session_profile
from core.sim.stages import stage_busy_times, stage_times
from core.studies.sweep import SweepCancelled, SweepSpace, enumerate_plans
from core.studies.sweep.bound import (bound_plan, fill_lower_bounds, iteration_lower_bound_s,
                                      memory_verdicts)
from core.studies.sweep.result import plan_column_arrays
from core.plan.fields import ConfigError
from core.sim.op_times import num_chunks
from tests.test_sweep_prune import gpt3_small, moe_session




def deepseek_session() -> Session:
    model = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], seq_length=4096)
    plan = ParallelPlan(8, 4, 8, 1, 512, "1f1b", "full", "bf16")
    return Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8),
                   CostConfig())


def gemma_session() -> Session:
    """Gemma 2 9B (soft-capped logits and scores, post norms, sliding windows) at 4k."""
    from core.io.hf_import import session_from_hf_config
    from tests.test_gemma import GEMMA2_9B
    s = session_from_hf_config(GEMMA2_9B, "config.json", seq_length=4096).session
    s.plan = dataclasses.replace(s.plan, global_batch_size=64)
    s.cluster = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8)
    return s


def fp8_session() -> Session:
    s = gpt3_small()
    s.plan = dataclasses.replace(s.plan, precision="fp8")
    s.cluster = ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8)
    return s


SPACES = {
    "gemma-softcap": (gemma_session, dict(max_gpus=8, context_parallel=(1, 2),
                                          micro_batch_sizes=(1, 2), zero_stages=(0, 3))),
    "fp8-zero": (fp8_session, dict(max_gpus=8, context_parallel=(1,), micro_batch_sizes=(1, 4),
                                   zero_stages=(0, 1, 2, 3))),
    "dense-zero-recompute": (gpt3_small, dict(max_gpus=8, context_parallel=(1,),
                                              zero_stages=(0, 1, 2, 3), dp_overlap=(False, True))),
    "schedules": (gpt3_small, dict(max_gpus=8, context_parallel=(1,), micro_batch_sizes=(1, 2),
                                   schedules=("1f1b", "gpipe", "interleaved", "zb-h1", "zb-v"))),
    "context-parallel": (gpt3_small, dict(num_gpus=8, context_parallel=(1, 2, 4),
                                          micro_batch_sizes=(1, 2),
                                          zero_stages=(0, 1, 3))),
    "moe-expert-parallel": (moe_session, dict(num_gpus=8, pipeline_parallel=(1, 2, 4),
                                              micro_batch_sizes=(1, 2), zero_stages=(0, 1, 2, 3))),
    "deepseek-mla-mtp": (deepseek_session, dict(num_gpus=(256,), tensor_parallel=(4, 8),
                                                context_parallel=(1,), micro_batch_sizes=(1,),
                                                zero_stages=(0, 1))),
}


@pytest.fixture(scope="module", params=sorted(SPACES))
def space_plans(request):
    make, kw = SPACES[request.param]
    session = make()
    plans = enumerate_plans(session, SweepSpace(**kw))
    assert len(plans) >= 20, "too few plans to compare"
    return session, plans, session_profile(session)


def test_memory_verdicts_equal_the_per_plan_verdicts(space_plans):
    session, plans, store = space_plans
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    mem, fits, why = memory_verdicts(plans, session.model, store)
    for i, pl in enumerate(plans):
        want = memory_verdict_arrays(model_math.stage_memory_arrays(session.model, pl, fp8_tn),
                                     float(store.memory_bytes))
        assert (mem[i], bool(fits[i]), why[i]) == want, pl.label()
    assert mem.dtype == np.float64 and fits.dtype == bool


def test_memory_verdicts_of_partial_recomputations_share_a_memo_exactly(space_plans):
    """The sweep's partial recomputations (each fully recomputing plan with 1 .. all of its
    chunks' layers recomputed) sized with the memo of the plans they come from (the per-layer
    bytes and the micro-batches in flight shared, only the recomputed layers new): the
    per-plan verdicts."""
    from core.plan.layout import largest_model_chunk
    session, plans, store = space_plans
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    memo: dict = {}
    memory_verdicts(plans, session.model, store, memo=memo)
    trials = [dataclasses.replace(pl, recompute_num_layers=n) for pl in plans
              if pl.recompute == "full" and pl.recompute_num_layers is None
              for n in range(1, (largest_model_chunk(session.model.num_layers, pl) or 1) + 1)]
    if not trials:
        pytest.skip("no plan recomputes every layer")
    mem, fits, why = memory_verdicts(trials, session.model, store, memo=memo)
    for i, pl in enumerate(trials):
        want = memory_verdict_arrays(model_math.stage_memory_arrays(session.model, pl, fp8_tn),
                                     float(store.memory_bytes))
        assert (mem[i], bool(fits[i]), why[i]) == want, pl.label()


def test_memory_verdicts_of_a_tight_gpu_give_reasons_as_the_per_plan_ones(space_plans):
    """A GPU so small that most plans do not fit: every reason string as the reference's."""
    session, plans, store = space_plans
    fp8_tn = model_math.fp8_tn_only(store.peak_flops)
    need = [memory_verdict_arrays(model_math.stage_memory_arrays(session.model, pl, fp8_tn),
                                  1.0)[0] for pl in plans]
    capacity = float(np.median(need))

    class Small:
        peak_flops, memory_bytes = store.peak_flops, capacity

    mem, fits, why = memory_verdicts(plans, session.model, Small)
    assert 0 < fits.sum() < len(plans)
    for i, pl in enumerate(plans):
        want = memory_verdict_arrays(model_math.stage_memory_arrays(session.model, pl, fp8_tn),
                                     capacity)
        assert (mem[i], bool(fits[i]), why[i]) == want


def test_lower_bounds_equal_the_bound_of_the_full_stage_times(space_plans):
    session, plans, store = space_plans
    model = session.model
    rows = np.arange(len(plans))
    lower = np.full(len(plans), np.nan)
    fill_lower_bounds(lower, plans, rows, model, session.cluster, session.cost, store, {}, None)
    cache: dict = {}
    for i, pl in enumerate(plans):
        st = stage_times(Session(model, bound_plan(pl, model), session.cluster, session.cost),
                         store, cache)
        assert lower[i] == iteration_lower_bound_s(st, pl.num_microbatches, busy_only=True), \
            pl.label()
        if i % 7 == 0:  # the busy times alone are the full stage times' busy times
            busy = stage_busy_times(Session(model, pl, session.cluster, session.cost), store)
            full = stage_times(Session(model, pl, session.cluster, session.cost), store)
            for a, b in zip(busy, (full.busy_fwd_s, full.busy_bwd_s, full.busy_wgrad_s)):
                assert np.array_equal(a, b)


def test_stage_times_with_one_cache_for_the_space_equal_each_plans_own(space_plans):
    """A sweep's stage times come from one memo for all its plans (the layout shared by plans
    that differ only in d and b, each stage's source values by plans with the same op times
    and collectives, the data-parallel buckets by plans with the same groups): every field
    as the plan's own, computed without a memo."""
    session, plans, store = space_plans
    cache: dict = {}
    shared = [stage_times(Session(session.model, pl, session.cluster, session.cost), store,
                          cache) for pl in plans]
    for pl, got in list(zip(plans, shared))[::3]:
        want = stage_times(Session(session.model, pl, session.cluster, session.cost), store)
        for f in dataclasses.fields(want):
            a, b = getattr(got, f.name), getattr(want, f.name)
            if isinstance(b, np.ndarray):
                assert np.array_equal(a, b), (pl.label(), f.name)
            else:
                assert a == b, (pl.label(), f.name)


def test_memory_and_bound_phases_cancel_and_report():
    session = gpt3_small()
    plans = enumerate_plans(session, SweepSpace(max_gpus=8, context_parallel=(1,)))
    store = session_profile(session)
    seen: list = []
    memory_verdicts(plans, session.model, store, phase=lambda *a: seen.append(a))
    assert seen[0] == ("memory", 0, len(plans)) and seen[-1] == ("memory", len(plans), len(plans))
    stop = threading.Event()
    stop.set()
    with pytest.raises(SweepCancelled):
        memory_verdicts(plans, session.model, store, cancel=stop)
    with pytest.raises(SweepCancelled):
        fill_lower_bounds(np.zeros(len(plans)), plans, np.arange(len(plans)), session.model,
                          session.cluster, session.cost, store, {}, stop)


def test_value_codes_group_plans_as_their_values_repr(space_plans):
    """Branch and bound's per-dimension codes: the same partition of the plans as grouping
    them by each field's ``repr`` (what the codes stand for), a field that acts only with a
    size above 1 (the cp exchange with cp, the dispatcher with ep, SP with t) as None where
    that size is 1: the best plans of each value group them so (``cp_comm -``)."""
    from core.studies.sweep.bound import value_codes
    from core.studies.sweep.result import BEST_BY_FIELDS
    _, plans, _ = space_plans
    num_gpus = np.array([pl.num_gpus for pl in plans], np.int64)
    codes = value_codes(plans, num_gpus, True)
    assert len(codes) == 1 + len(BEST_BY_FIELDS)
    size = {"cp_comm_type": "context_parallel", "moe_token_dispatcher_type": "expert_parallel",
            "sequence_parallel": "tensor_parallel"}
    for code, name in zip(codes, ("num_gpus",) + BEST_BY_FIELDS):
        values = [repr(None if name in size and getattr(pl, size[name]) == 1
                       else getattr(pl, name)) for pl in plans]
        pairs = set(zip(code.tolist(), values))
        assert len(pairs) == len(set(values)) == len(set(code.tolist())), name
        # held through the branch and bound: the smallest unsigned type of its codes
        assert code.dtype == np.min_scalar_type(len(set(values)) - 1), name
    # from the plans' columns (numpy where a column has one type): the same codes
    columns = plan_column_arrays(plans)
    for a, b in zip(codes, value_codes(plans, num_gpus, True, columns=columns)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("limit", [2**62, 6])
def test_column_codes_number_the_groups_as_field_by_field(space_plans, monkeypatch, limit):
    """column_codes combines the fields in mixed radix and numbers once (or whenever the radix
    passes the limit): the codes and first rows of numbering after every field."""
    from core.plan.parallel import PLAN_FIELDS
    from core.studies.sweep import result
    _, plans, _ = space_plans
    columns = plan_column_arrays(plans)
    n = len(plans)
    want = np.zeros(n, np.int64)
    for name in PLAN_FIELDS:  # the reference: numbered after each field
        values = columns[name].tolist()
        index = {v: i for i, v in enumerate(dict.fromkeys(values))}
        if columns[name].dtype != object:
            distinct, part = np.unique(columns[name], return_inverse=True)
            part, m = part.reshape(-1), distinct.size
        else:
            part = np.array([index[v] for v in values], np.int64)
            m = len(index)
        want = np.unique(want * m + part, return_inverse=True)[1].reshape(-1)
    monkeypatch.setattr(result, "_RADIX_LIMIT", limit)
    got, firsts = result.column_codes(columns, PLAN_FIELDS, n)
    assert np.array_equal(got, want)
    assert firsts == np.unique(want, return_index=True)[1].tolist()


def test_dimensions_from_the_columns_equal_those_from_the_plans(space_plans):
    from core.studies.sweep.dimensions import sweep_dimensions
    session, plans, _ = space_plans
    space = SweepSpace(max_gpus=64)
    assert (sweep_dimensions(session, space, plans, plan_column_arrays(plans))
            == sweep_dimensions(session, space, plans))


def test_plan_sizes_from_the_columns_equal_each_plans_own(space_plans):
    """The pipeline steps, micro-batch counts and work estimate the sweep computes from the
    plans' columns are each plan's own (ParallelPlan.num_microbatches, num_chunks)."""
    from core.studies.sweep.bound import (pipeline_steps, plan_microbatches, sweep_work,
                                          work_notes)
    session, plans, _ = space_plans
    columns = plan_column_arrays(plans)
    steps = pipeline_steps(plans, columns)
    assert steps.dtype == np.int64
    assert steps.tolist() == pipeline_steps(plans).tolist() == [
        pl.pipeline_parallel * pl.num_microbatches * num_chunks(pl) for pl in plans]
    assert plan_microbatches(columns).tolist() == [pl.num_microbatches for pl in plans]
    rows = np.arange(0, len(plans), 2)
    L = session.model.num_layers
    work = sweep_work([plans[i] for i in rows.tolist()], L)
    for limit in (work, work - 1):  # the same sum: refused exactly above it
        try:
            a = work_notes(plans, rows, L, True, limit)
        except ConfigError as exc:
            a = str(exc)
        try:
            b = work_notes(plans, rows, L, True, limit, steps)
        except ConfigError as exc:
            b = str(exc)
        assert a == b


def test_plan_bands_equal_each_plans_own(space_plans):
    """The sweep's error bands and departures, evaluated once per distinct GPU count and
    features, are each plan's own (interval_factors and plan_departures of its features)."""
    from core.store.calibration_range import features_of
    from core.store.interval import interval_factors, layer_parameters, plan_departures
    from core.studies.sweep.result import _plan_bands
    session, plans, store = space_plans
    num_gpus = np.array([pl.num_gpus for pl in plans], np.int64)
    residuals = getattr(store, "residuals", None)
    got = _plan_bands(plans, session.model, session.cluster, residuals, num_gpus, 0.9)
    feats = ([features_of(session.model, session.cluster, pl) for pl in plans]
             if residuals is not None and residuals.has_features else None)
    want = interval_factors(residuals, num_gpus, session.cluster.gpus_per_node,
                            layer_parameters(session.model), 0.9, features=feats)
    for a, b in zip(got[:3], want):
        assert np.array_equal(a, b, equal_nan=True)
    assert got[3] == ([""] * len(plans) if feats is None else plan_departures(residuals, feats))
