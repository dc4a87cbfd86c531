"""A sweep's plans held as columns (:class:`core.studies.sweep.plan_rows.PlanRows`): no
``ParallelPlan`` per plan once the columns are made, each row's plan built equal to the plan
the enumeration made; the columns of several lists joined as those of one list; the bound
memo emptied past its size with the same bounds (``docs/sweep_parallel.md``, "Memory")."""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest

from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.sim.simulate import session_profile
from core.studies.sweep import SweepSpace, enumerate_plans, run_sweep
from core.studies.sweep import bound
from core.studies.sweep.bound import fill_lower_bounds
from core.studies.sweep.plan_rows import (PlanRows, concat_plan_columns, plan_column_arrays,
                                          plan_keys, plans_at, row_of_plan)
from core.studies.sweep.variants import plan_maker
from tests.test_sweep_prune import gpt3_small, moe_session

#: The default micro-batch sizes (None): the plans enumerated one b at a time, as columns.
SPACE = dict(num_gpus=8, pipeline_parallel=(1, 2, 4), context_parallel=(1,), zero_stages=(0, 1))


@pytest.fixture(scope="module")
def listed():
    session = moe_session()
    return session, enumerate_plans(session, SweepSpace(**SPACE, micro_batch_sizes=(1, 2, 4)))


def _columns_equal(a: dict, b: dict) -> None:
    for name in PLAN_FIELDS:
        x, y = a[name], b[name]
        assert x.dtype == y.dtype, name
        assert x.tolist() == y.tolist(), name
        assert [type(v) for v in x.tolist()] == [type(v) for v in y.tolist()], name
        assert (x.strides == (0,)) == (y.strides == (0,)), name  # one value: broadcast in both


def test_plan_rows_are_the_plans_the_columns_were_read_from(listed):
    session, plans = listed
    rows = PlanRows(plan_column_arrays(plans), plan_maker(session.plan))
    n = len(plans)
    assert n > 200 and len(rows) == n
    assert rows == plans and list(rows) == plans
    for i in (0, 1, n // 2, n - 1, -1, -n):
        assert rows[i] == plans[i] and type(rows[i]) is ParallelPlan
        assert [type(v) for v in plan_key(rows[i])] == [type(v) for v in plan_key(plans[i])]
    assert rows[10:20] == plans[10:20] and rows[::-7] == plans[::-7]
    pick = np.array([5, 3, n - 1, 0])
    assert list(rows.take(pick)) == [plans[i] for i in pick]
    assert list(plan_keys(rows, pick.tolist())) == [plan_key(plans[i]) for i in pick]
    with pytest.raises(IndexError):
        rows[n]
    # no plan is held: a field of one value is broadcast, the others one item per plan
    assert sum(c.nbytes for c in rows.columns.values() if c.strides != (0,)) < 16 * 8 * n


def test_plans_at_builds_the_rows_plans_from_their_keys(listed):
    """``plans_at`` (the sweep's plans of many rows, read a chunk of columns at a time): the
    plans ``rows[i]`` builds, in the rows' order (repeats kept), of the same field types; of a
    list, its own plans; of no rows, none."""
    session, plans = listed
    rows = PlanRows(plan_column_arrays(plans), plan_maker(session.plan))
    pick = [len(plans) - 1, 0, 7, 7, 3]
    got = list(plans_at(rows, pick))
    assert got == [plans[i] for i in pick] == [rows[i] for i in pick]
    assert [type(pl) for pl in got] == [ParallelPlan] * len(pick)
    assert [[type(v) for v in plan_key(pl)] for pl in got] == [
        [type(v) for v in plan_key(plans[i])] for i in pick]
    assert list(plans_at(plans, pick)) == [plans[i] for i in pick]
    assert all(a is plans[i] for a, i in zip(plans_at(plans, pick), pick))
    assert list(plans_at(rows, [])) == [] and list(plans_at(rows, np.arange(0))) == []
    assert list(plans_at(rows, range(len(plans)))) == plans


def test_concat_plan_columns_is_the_columns_of_the_joined_list(listed):
    _, plans = listed
    whole = plan_column_arrays(plans)
    b = np.asarray(whole["micro_batch_size"])
    cuts = [0, 1, int(np.argmax(b == 2)), int(np.argmax(b == 4)), len(plans) - 1, len(plans)]
    parts = [plan_column_arrays(plans[s:e]) for s, e in zip(cuts, cuts[1:])]
    assert any(p["micro_batch_size"].strides == (0,) for p in parts[1:])  # b: one per part
    _columns_equal(concat_plan_columns(parts), whole)
    _columns_equal(concat_plan_columns([parts[0], plan_column_arrays([])] + parts[1:]), whole)
    for i in (0, len(plans) // 3, len(plans) - 1):
        assert row_of_plan(whole, plans[i]) == i
    assert row_of_plan(whole, dataclasses.replace(plans[0], micro_batch_size=3)) is None


def test_a_sweep_holds_no_plan_object_per_plan():
    """Before: one ParallelPlan per row in ``result.plans`` (408 bytes each); now the result,
    the batches and the bounds read the plan columns, and a row's plan is built when asked."""
    session = moe_session()
    gc.collect()
    before = sum(type(o) is ParallelPlan for o in gc.get_objects())
    r = run_sweep(session, SweepSpace(**SPACE))
    gc.collect()
    held = sum(type(o) is ParallelPlan for o in gc.get_objects()) - before
    assert r.num_plans > 500
    assert isinstance(r.plans, PlanRows)
    assert held < 10  # the session's plan and a few, not one per row
    assert r.plans[r.fastest].num_gpus == r.num_gpus[r.fastest] == 8
    assert [plan_key(pl) for pl in r.plans] == [
        tuple(r.plan_columns[f][i].item() if isinstance(r.plan_columns[f][i], np.generic)
              else r.plan_columns[f][i] for f in PLAN_FIELDS) for i in range(r.num_plans)]
    cut = r.take(np.array([0, r.fastest]), saved={})
    assert isinstance(cut.plans, PlanRows) and list(cut.plans) == [r.plans[0], r.plans[r.fastest]]


def test_bound_memo_emptied_past_its_size_gives_the_same_bounds(monkeypatch):
    """fill_lower_bounds empties the lookup memo (but the analytic op times and the templates'
    source counts) once it passes
    BOUND_MEMO_ENTRIES: each entry is a function of its key, so the bounds are the same bit for
    bit, and the memo stays near the limit."""
    session = gpt3_small()
    plans = enumerate_plans(session, SweepSpace(max_gpus=8, context_parallel=(1,),
                                                micro_batch_sizes=(1, 2),
                                                schedules=("1f1b", "interleaved", "zb-h1")))
    store = session_profile(session)
    rows = np.arange(len(plans))
    whole, whole_memo = np.full(len(plans), np.nan), {}
    fill_lower_bounds(whole, plans, rows, session.model, session.cluster, session.cost, store,
                      whole_memo, None)
    limit = len(whole_memo) // 10
    assert limit > 50
    monkeypatch.setattr(bound, "BOUND_MEMO_ENTRIES", limit)
    small, small_memo = np.full(len(plans), np.nan), {}
    fill_lower_bounds(small, plans, rows, session.model, session.cluster, session.cost, store,
                      small_memo, None)
    assert np.isfinite(whole).all()
    assert whole.tobytes() == small.tobytes()
    ops = sum(1 for k in whole_memo if k[0] == "analytic op")
    kept = sum(1 for k in whole_memo if k[0] in bound._KEPT_MEMO)
    assert ops and kept > ops  # the counts of each normalized structure kept too
    assert len(small_memo) < kept + 2 * limit < len(whole_memo)


def test_keys_of_plans_alike_in_every_field_end(listed):
    """One plan (or plans equal in every field): every column is one value, held as a repeat;
    keys() zipped unbounded repeats and never returned (a sweep of one plan that recomputes
    every layer grew without bound in the partial-recompute search: the breaker's cp=8 a2a
    case of tests/test_context_parallel.py)."""
    session, plans = listed
    one = PlanRows(plan_column_arrays(plans[:1]), plan_maker(session.plan))
    assert one.keys(np.array([0])) == [plan_key(plans[0])]
    assert list(plan_keys(one, [0, 0, 0])) == [plan_key(plans[0])] * 3
    same = PlanRows(plan_column_arrays([plans[3]] * 4), plan_maker(session.plan))
    assert same.keys(np.array([2, 0])) == [plan_key(plans[3])] * 2
    assert same.keys(np.zeros(0, np.int64)) == []


def test_memory_verdicts_of_keys_are_those_of_the_plans(listed):
    """``memory_verdicts(None, keys=..., make=...)`` (the bisection's trial plans as keys, a plan
    built per new key only) gives the bytes, fits and reasons of the plans themselves, with an
    empty memo and with one the plans' call filled."""
    session, plans = listed
    store = session_profile(session)
    want = bound.memory_verdicts(plans, session.model, store)
    keys = [plan_key(pl) for pl in plans]
    make = plan_maker(session.plan)
    for memo in ({}, None):
        got = bound.memory_verdicts(None, session.model, store, keys=keys, make=make, memo=memo)
        assert got[0].tobytes() == want[0].tobytes() and got[1].tolist() == want[1].tolist()
        assert got[2] == want[2]
    memo: dict = {}
    bound.memory_verdicts(plans, session.model, store, memo=memo)
    again = bound.memory_verdicts(None, session.model, store, keys=keys[::-1], make=make, memo=memo)
    assert again[0].tobytes() == want[0][::-1].tobytes() and again[2] == want[2][::-1]
    assert want[1].any() and not want[1].all()  # some fit, some do not
