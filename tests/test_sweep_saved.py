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


@pytest.mark.parametrize("bad", [None, {}, {"version": 99}, {"version": 1, "rows": []}])
def test_an_unreadable_saved_sweep_is_a_config_error(bad):
    with pytest.raises(ConfigError) as info:
        restore_sweep(bad)
    assert all(e.field.startswith("sweep.result") for e in info.value.errors)
