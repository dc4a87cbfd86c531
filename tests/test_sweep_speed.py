"""What the sweep's speed-ups rely on, checked: stage times that depend on the schedule only
through splits_backward / uses_virtual_stages (solve_batch shares them between 1F1B and GPipe),
and a sweep whose every plan's time equals the general solver's on the per-op graph."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core import schedules
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.graph import build_graph
from core.sim.stages import stage_times
from core.io.session import load_any
from core.sim.simulate import open_profile, profile_path
from core.sim.solver import solve
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES

_BASE = dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=2, micro_batch_size=1,
             global_batch_size=32, schedule="1f1b", recompute="full", precision="bf16")


@pytest.mark.parametrize("changes", [
    {}, dict(recompute="selective", sequence_parallel=True), dict(zero_stage=1, overlap_grad_reduce=True),
    dict(zero_stage=3, overlap_grad_reduce=True, overlap_param_gather=True),
    dict(zero_stage=1, overlap_param_gather=True), dict(first_stage_layers=4, last_stage_layers=4),
], ids=repr)
def test_stage_times_depend_on_the_schedule_only_through_its_two_properties(changes):
    """solve_batch shares stage times between plans whose schedules have the same
    stage_times_kind (splits_backward, uses_virtual_stages, chunks, placement): if this fails,
    stage_times reads more of the
    schedule and core.studies.sweep.solve_batch's sharing key must grow."""
    model = MODEL_PRESETS["GPT-3 1.3B"]
    groups: dict[tuple, list] = {}
    for name in schedules.names():
        sched = schedules.get(name)
        if sched.uses_virtual_stages:
            continue
        plan = ParallelPlan(**{**_BASE, **changes, "schedule": name})
        s = Session(model, plan, ClusterConfig(gpus_per_node=4), CostConfig())
        if validate(s):
            continue
        st = stage_times(s, open_profile(profile_path(s)))
        groups.setdefault(sched.stage_times_kind, []).append((name, st))
    shared = [g for g in groups.values() if len(g) > 1]
    assert shared, "no two schedules share the properties any more"
    for members in shared:
        (_, a), *rest = members
        for name, b in rest:
            for f in dataclasses.fields(a):
                x, y = getattr(a, f.name), getattr(b, f.name)
                if isinstance(x, np.ndarray):
                    assert np.array_equal(x, y), (name, f.name)
                else:
                    assert x == y, (name, f.name)


def test_swept_times_equal_the_general_solver_on_the_per_op_graph():
    """A sweep (fast path, compiled when Numba is there, shared stage times) against the
    chain-merging solver on each plan's per-op graph, on a sample of the plans of every schedule."""
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    result = run_sweep(session, SweepSpace(hold_session_values=True, max_gpus=session.plan.num_gpus,
                                           schedules=schedules.names()), prune=False)
    store = open_profile(profile_path(session))
    rng = np.random.default_rng(3)
    picked = []
    for name in schedules.names():
        rows = np.flatnonzero(result.plan_columns["schedule"] == name)
        picked += rng.choice(rows, size=min(4, rows.size), replace=False).tolist()
    assert len(picked) >= 8
    for i in picked:
        s = result.session_for(i)
        graph, _ = build_graph(s, store)
        assert result.iteration_time_s[i] == pytest.approx(solve(graph).iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("preset, changes", [
    ("GPT-3 1.3B", {}),
    ("GPT-3 1.3B", dict(zero_stage=3, precision="fp8", fp8_param_gather=True)),
    ("GPT-3 1.3B", dict(zero_stage=1, precision="fp8", fp8_param_gather=True, sequence_parallel=True)),
    ("Llama 3 8B", dict(zero_stage=2, data_parallel_shard_size=2, context_parallel=2)),
    ("Mixtral 8x7B", dict(expert_parallel=2, zero_stage=1, sequence_parallel=True)),
    ("DeepSeek-V3", dict(expert_parallel=4, zero_stage=3, sequence_parallel=True, pipeline_parallel=1)),
], ids=repr)
def test_memory_state_does_not_depend_on_the_micro_batch_or_the_recomputation(preset, changes):
    """core.model.model_math memoizes the weights, gradients and optimizer state of
    stage_memory_arrays without the fields of STATE_FREE_PLAN_FIELDS in the key: if this
    fails, they read one of those fields and the key must take it."""
    from core.model import model_math as mm
    model = MODEL_PRESETS[preset]
    base = ParallelPlan(**{**_BASE, "data_parallel": 4, **changes})
    variants = [dict(micro_batch_size=b, recompute=rc, recompute_num_layers=n, recompute_modules=mods)
                for b in (1, 2) for rc, n, mods in (("none", None, None), ("full", None, None),
                                                   ("full", 1, None), ("selective", None, None),
                                                   ("selective", None, "core_attn,mlp"))]
    states = []
    for v in variants:
        plan = dataclasses.replace(base, **v)
        s = Session(model, plan, ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8), CostConfig())
        if validate(s):
            continue
        state = mm.state_bytes_of(model, plan, True)
        states.append((v, state))
        # the memoized figures are those computed (the optimizer state at the peak: less the
        # smaller of its fp32 gradient copy and the activations)
        w, g, o, acts = mm.stage_memory_arrays(model, plan)
        for got, want in zip((w, g, o), (state[0], state[1], state[2] - np.minimum(state[3], acts))):
            assert np.array_equal(got, want)
    assert len(states) >= 4, "too few valid variants to compare"
    (_, first), *rest = states
    for v, state in rest:
        for a, b in zip(first, state):
            assert np.array_equal(a, b), v
    assert set(mm.STATE_FREE_PLAN_FIELDS) == set(variants[0])
