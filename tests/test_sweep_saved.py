"""A sweep's result saved with its session (the ``sweep`` section's ``result``): round trips
through a session file, and is marked stale, naming the field, when the inputs change."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.io.session import load_any, load_session, save_session
from core.plan.fields import ConfigError
from core.studies.sweep import (SweepSpace, restore_sweep, run_sweep, saved_sweep,
                                stale_reasons)
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"
SPACE = SweepSpace(max_gpus=8, micro_batch_sizes=(1, 2, 4), schedules=("1f1b", "gpipe"))


@pytest.fixture(scope="module")
def swept():
    session = load_any(SMALL)
    return session, run_sweep(session, SPACE, deadline_days=5.0, workers=1)


def test_the_front_and_best_plans_round_trip_through_a_session_file(swept, tmp_path):
    session, r = swept
    s = session.copy()
    s.sweep = {"space": SPACE.to_dict(), "deadline_days": 5.0, "result": saved_sweep(r)}
    path = tmp_path / "with_result.json"
    save_session(s, path)
    loaded = load_session(path)
    assert loaded.sweep == s.sweep
    back = restore_sweep(loaded.sweep["result"])
    # the front, fastest first, with the same figures and plans
    front, front_back = r.pareto_indices(), back.pareto_indices()
    assert [r.plans[i] for i in front] == [back.plans[i] for i in front_back]
    for col in ("iteration_time_s", "training_days", "cost_usd", "mfu",
                "max_memory_per_gpu_bytes"):
        assert np.array_equal(getattr(r, col)[front], getattr(back, col)[front_back])
    for mark in ("fastest", "cheapest", "cheapest_within_deadline"):
        i, j = getattr(r, mark), getattr(back, mark)
        assert r.plans[i] == back.plans[j] and r.cost_usd[i] == back.cost_usd[j]
    own = r.index_of(session.plan)
    assert back.index_of(session.plan) is not None
    assert back.iteration_time_s[back.index_of(session.plan)] == r.iteration_time_s[own]
    assert back.space == SPACE and back.dimensions == r.dimensions
    assert back.saved == {"num_plans": r.num_plans, "num_feasible": r.num_feasible,
                          "num_pruned": int(r.pruned.sum()), "wall_s": r.wall_s}
    # the recomputed front of the rows saved is the saved one
    assert back.num_plans < r.num_plans
    # saving the restored result again gives the same document
    assert saved_sweep(back)["rows"] == loaded.sweep["result"]["rows"]


def test_stale_when_model_cluster_cost_or_an_unswept_plan_field_changes(swept):
    session, r = swept
    doc = saved_sweep(r)
    assert stale_reasons(doc, session) == []
    s = session.copy()
    s.plan = dataclasses.replace(s.plan, tensor_parallel=4, micro_batch_size=2)  # swept fields
    assert stale_reasons(doc, s) == []
    for section, name, value in (("cost", "price_per_gpu_hour_usd", 3.5),
                                 ("model", "num_layers", 12),
                                 ("cluster", "gpus_per_node", 4),
                                 ("plan", "global_batch_size", 512)):
        s = session.copy()
        setattr(s, section, dataclasses.replace(getattr(s, section), **{name: value}))
        (reason,) = stale_reasons(doc, s)
        assert reason.startswith(f"{section}.{name}:") and repr(value) in reason
    assert stale_reasons(doc, session, profile=r.profile) == []
    assert len(stale_reasons(doc, session, profile={**r.profile, "device": "other"})) == 1


def test_a_sweep_saved_before_a_plan_field_existed_restores_and_is_not_stale(swept):
    """A session file written before ``plan.tf32`` holds a saved sweep without it (rows,
    inputs, the session's plan): the rows take the session plan's value (the field's default),
    and a new field at its default is no change; set, it is one, named."""
    import copy
    session, r = swept
    doc = copy.deepcopy(saved_sweep(r))
    for row in doc["rows"]:
        del row["tf32"]
    del doc["inputs"]["plan"]["tf32"]
    del doc["config_plan"]["tf32"]
    back = restore_sweep(doc)
    assert [pl.tf32 for pl in back.plans] == [False] * len(doc["rows"])
    assert [r.plans[i] for i in r.pareto_indices()] == [back.plans[i] for i in back.pareto_indices()]
    assert back.iteration_time_s.tolist() == [row["iteration_time_s"] for row in doc["rows"]]
    assert stale_reasons(doc, session) == []
    s = session.copy()
    s.plan = dataclasses.replace(s.plan, tf32=True)
    assert stale_reasons(doc, s) == ["plan.tf32: None -> True"]


@pytest.mark.parametrize("bad", [None, {}, {"version": 99}, {"version": 1, "rows": []}])
def test_an_unreadable_saved_sweep_is_a_config_error(bad):
    with pytest.raises(ConfigError) as info:
        restore_sweep(bad)
    assert all(e.field.startswith("sweep.result") for e in info.value.errors)


def test_column_is_constant_tells_values_apart_as_repr_does():
    from core.studies.sweep.result import column_is_constant

    n = 1000
    assert column_is_constant(np.full(n, 4))
    assert not column_is_constant(np.r_[np.full(n, 4), 8])
    assert column_is_constant(np.full(n, np.nan))
    assert not column_is_constant(np.r_[np.full(n, np.nan), 1.0])
    assert column_is_constant(np.array(["1f1b"] * n))
    assert column_is_constant(np.array([None] * n, dtype=object))
    assert not column_is_constant(np.array([None] * n + [2], dtype=object))
    # equal under ==, told apart by their type (repr): 1 and True, None and nan
    assert not column_is_constant(np.array([1] * n + [True], dtype=object))
    assert not column_is_constant(np.array([None] * n + [float("nan")], dtype=object))
    assert column_is_constant(np.array([float("nan")] * n, dtype=object))
    tuples = np.empty(n, dtype=object)
    tuples[:] = [("core_attn",)] * n
    assert column_is_constant(tuples)
    tuples[-1] = ("core_attn", "mlp")
    assert not column_is_constant(tuples)


def test_constant_plan_fields_and_saved_form_are_computed_once(swept):
    _, r = swept
    constant = r.constant_plan_fields()
    assert "tensor_parallel" not in constant and "schedule" not in constant
    assert "global_batch_size" in constant
    for f, column in r.plan_columns.items():
        assert (f in constant) == (len({repr(v) for v in np.asarray(column).tolist()}) == 1), f
    assert r.constant_plan_fields() is constant
    assert saved_sweep(r) is saved_sweep(r)
    assert r.within_calibration is r.within_calibration
    np.testing.assert_array_equal(
        r.within_calibration,
        r.in_calibration_range & (np.asarray(r.calibration_departures, dtype=str) == ""))


def test_a_sweep_saved_before_a_field_became_a_dimension_says_so(swept):
    """A save whose inputs held plan.cp_comm_type (before the exchange was a dimension) is
    stale, named as a field the sweep chooses now (not "'p2p' -> None")."""
    session, r = swept
    doc = saved_sweep(r)
    assert "cp_comm_type" not in doc["inputs"]["plan"]
    doc["inputs"]["plan"]["cp_comm_type"] = "p2p"
    assert stale_reasons(doc, session) == [
        "plan.cp_comm_type: held at 'p2p' by the saved sweep, chosen by the sweep now"]
