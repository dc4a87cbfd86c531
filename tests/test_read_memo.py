"""A function of a plan memoized by the fields it reads (core.sim.read_memo.ReadMemo), and the
stage layouts a sweep shares with it (core.sim.stages._layout_shape): the answers are the
function's own, and plans that differ only in fields it does not read share one."""

from __future__ import annotations

import dataclasses

import numpy as np

from core.plan.parallel import ParallelPlan
from core.sim import stages
from core.sim.read_memo import ReadMemo
from tests.test_sweep_prune import moe_session


def _fn(pl):
    # reads t always, p only when t > 1, and b (unkeyed below)
    out = pl.tensor_parallel * 10
    if pl.tensor_parallel > 1:
        out += pl.pipeline_parallel
    return out + 1000 * pl.micro_batch_size


def test_answers_are_the_functions_and_reads_are_learnt():
    calls = []
    memo = ReadMemo(lambda pl: calls.append(1) or _fn(pl))
    base = ParallelPlan(1, 1, 8, 1, 64, "1f1b", "none", "bf16")
    plans = [dataclasses.replace(base, tensor_parallel=t, pipeline_parallel=p, data_parallel=d)
             for t in (1, 2) for p in (1, 2, 4) for d in (1, 2)]
    assert [memo(pl) for pl in plans] == [_fn(pl) for pl in plans]
    # t and b first (one run for t = 1); p once t > 1 was met (one run per p); d never
    assert memo.fields == frozenset({"tensor_parallel", "pipeline_parallel", "micro_batch_size"})
    assert len(calls) == 4
    # the answers under fewer fields were dropped: t = 1 once per p again, then none
    assert [memo(pl) for pl in plans] == [_fn(pl) for pl in plans] and len(calls) == 7
    assert [memo(pl) for pl in plans] == [_fn(pl) for pl in plans] and len(calls) == 7
    # True is not 1: compared with its type
    assert memo(dataclasses.replace(base, tensor_parallel=True)) == _fn(base) and len(calls) == 8


def test_unkeyed_fields_are_not_compared():
    memo = ReadMemo(_fn, frozenset({"micro_batch_size"}))
    base = ParallelPlan(2, 1, 8, 1, 64, "1f1b", "none", "bf16")
    assert memo(base) == 20 + 1 + 1000
    # b is the caller's to keep apart: the first answer stands
    assert memo(dataclasses.replace(base, micro_batch_size=2)) == 1021
    assert memo.fields == frozenset({"tensor_parallel", "pipeline_parallel"})


def test_layout_shapes_shared_across_the_moe_dispatcher_equal_their_own():
    """An MoE plan's stage layout does not read the token dispatcher: the plans that differ
    only in it share one shape (they were two), equal to each plan's shape made alone."""
    s = moe_session()
    a = dataclasses.replace(s.plan, tensor_parallel=2, data_parallel=4, expert_parallel=4,
                            moe_token_dispatcher_type="alltoall")
    b = dataclasses.replace(a, moe_token_dispatcher_type="flex")
    cache: dict = {}
    shapes = []
    for pl in (a, b):
        sess = dataclasses.replace(s, plan=pl)
        shapes.append(stages._layout_shape(sess, stages._layout_key(sess, cache), cache))
    assert shapes[0] is shapes[1]
    for pl, got in zip((a, b), shapes):
        sess = dataclasses.replace(s, plan=pl)
        alone = stages._layout_shape(sess, stages._layout_key(sess), None)
        assert (got.v, got.alike, got.reps, got.structs) == (alone.v, alone.alike, alone.reps,
                                                             alone.structs)
        assert np.array_equal(got.params, alone.params)
        assert np.array_equal(got.experts, alone.experts)



def test_op_keys_learnt_once_for_plans_that_differ_only_where_op_key_does_not_read():
    """The layouts' op keys (core.sim.op_times.op_key, what the op times are looked up by) are
    memoized by the plan fields op_key reads: plans that differ in p and the schedule take the
    first one's (one op_key run), equal to each plan's own; one that differs in b gets its own."""
    from core.sim.op_times import op_key
    s = moe_session()
    cache: dict = {}
    runs = []
    real = stages.op_key
    try:
        stages.op_key = lambda sess: runs.append(1) or real(sess)
        plans = [dataclasses.replace(s.plan, pipeline_parallel=p, schedule=sch, data_parallel=8 // p)
                 for p in (1, 2) for sch in ("1f1b", "gpipe")]
        plans.append(dataclasses.replace(plans[0], micro_batch_size=2))
        got = [stages._stage_layout(dataclasses.replace(s, plan=pl), cache) for pl in plans]
    finally:
        stages.op_key = real
    assert len(runs) == 2
    for pl, layout in zip(plans, got):
        own = op_key(dataclasses.replace(s, plan=pl))
        assert layout.op_key == own and layout.op_key_items == tuple(sorted(own.items()))
    assert got[0].op_key is got[3].op_key and got[4].op_key["b"] == 2
