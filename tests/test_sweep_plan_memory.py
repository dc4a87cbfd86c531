"""What a sweep holds per plan (benchmarks/bench_sweep_memory.py measures it): plans in slots,
plan columns of one value broadcast, the row of a plan found without an index of every plan,
and the memo keys of one op key sharing its items; the same rows and figures as before."""

from __future__ import annotations

import dataclasses
import pickle
import sys

import numpy as np
import pytest

from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.sim.op_times import lookup_op_times
from core.sim.simulate import open_profile, profile_path
from core.sim.stages import stage_times
from core.studies.sweep import SweepSpace, run_sweep
from tests.test_sweep import check_against_simulate
from tests.test_sweep_prune import moe_session


@pytest.fixture(scope="module")
def moe_result():
    session = moe_session()
    space = SweepSpace(num_gpus=8, pipeline_parallel=(1, 2, 4), micro_batch_sizes=(1, 2),
                       context_parallel=(1,), zero_stages=(0, 1))
    return run_sweep(session, space)


def test_a_plan_keeps_its_fields_in_slots():
    plan = ParallelPlan(2, 4, 8, 1, 64, "interleaved", "full", "bf16", virtual_pipeline_stages=2)
    assert not hasattr(plan, "__dict__")
    # the object header and one pointer per field (CPython 3.11: 56 + 8 * 47 = 432 bytes at
    # most; an instance dict of 47 keys alone was 1,584)
    assert sys.getsizeof(plan) <= 56 + 8 * len(PLAN_FIELDS)
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert dataclasses.replace(plan, data_parallel=2).num_gpus == 2 * 4 * 2


def test_plan_columns_are_the_plans_and_one_value_costs_no_bytes(moe_result):
    r, n = moe_result, moe_result.num_plans
    assert n > 100
    per_plan = 0
    for j, name in enumerate(PLAN_FIELDS):
        col = r.plan_columns[name]
        values = [plan_key(pl)[j] for pl in r.plans]
        assert col.tolist() == values
        assert [type(v) for v in col.tolist()] == [type(v) for v in values]
        if len({(type(v), repr(v)) for v in values}) == 1:
            assert col.strides == (0,) and not col.flags.writeable  # broadcast: no bytes
        else:
            assert col.strides == (col.itemsize,)
            per_plan += col.itemsize
    # the fields that vary, one item each: int64 and object 8 bytes, bool 1, text 4 per char
    held = sum(c.nbytes for c in r.plan_columns.values() if c.strides != (0,))
    assert held == per_plan * n
    assert per_plan < 8 * len(PLAN_FIELDS)


def test_index_of_is_the_row_of_each_plan(moe_result):
    r = moe_result
    index = {plan_key(pl): i for i, pl in enumerate(r.plans)}  # what index_of kept before
    assert len(index) == r.num_plans
    for i, pl in enumerate(r.plans):
        assert r.index_of(pl) == i
        assert r.index_of(dataclasses.replace(pl)) == i  # equal fields, another object
    pl = r.plans[0]
    assert r.index_of(dataclasses.replace(pl, micro_batch_size=3)) is None
    assert r.index_of(dataclasses.replace(pl, zero_stage=2)) is None
    t1 = next(i for i, p in enumerate(r.plans)
              if p.tensor_parallel == 1 and not p.sequence_parallel)
    # at t = 1 sequence parallelism changes nothing: the plan with it is the row without
    assert r.index_of(dataclasses.replace(r.plans[t1], sequence_parallel=True)) == t1


def test_the_sweep_figures_are_each_plans_own(moe_result):
    r = moe_result
    simulated = np.flatnonzero(np.isfinite(r.iteration_time_s))
    assert simulated.size
    check_against_simulate(r, simulated[:: max(1, simulated.size // 6)].tolist())


def test_memo_keys_of_one_op_key_share_its_items():
    session = moe_session()
    store = open_profile(profile_path(session))
    memo: dict = {}
    stage_times(session, store, memo)
    other = session.copy()
    other.plan = dataclasses.replace(session.plan, pipeline_parallel=2, data_parallel=4)
    stage_times(other, store, memo)  # another layout, the same op key
    lookup_op_times(session, store, memo)
    analytic = [k for k in memo if isinstance(k, tuple) and k and k[0] == "analytic op"]
    assert analytic
    items = {k[3] for k in analytic}
    # one tuple object per distinct key (equal keys: the one kept), not one per op
    assert len({id(k[3]) for k in analytic}) == len(items)
    layouts = [v for k, v in memo.items() if isinstance(k, tuple) and k and k[0] == "layout"]
    assert len(layouts) == 2
    assert layouts[0].op_key_items == layouts[1].op_key_items
    assert layouts[0].op_key_items is layouts[1].op_key_items
    assert layouts[0].op_key is layouts[1].op_key


def test_pruned_plans_share_the_text_of_their_bound(moe_result):
    r = moe_result
    pruned = np.flatnonzero(r.pruned).tolist()
    assert pruned
    for i in pruned:  # the text of each plan's own bound, to the millisecond
        assert r.reason[i] == (f"not simulated: its lower bound {r.lower_bound_s[i]:.3f} s per "
                               "iteration shows it cannot reach the Pareto front nor be the "
                               "best plan of any of its values")
    texts = {r.reason[i] for i in pruned}
    assert len({id(r.reason[i]) for i in pruned}) == len(texts)  # one object per text
