"""ZB-V (core/schedules/zb_v.py): its V-shape placement, its work order, its memory (1F1B's
peak), closed forms with uniform F = B = W, and the fast path equal to the graph solver and to a
plain reference solver written here from the schedule's definition."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core import schedules
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.session import load_any
from core.model import model_math
from core.plan.parallel import SCHEDULES, ParallelPlan
from core.plan.parallel import SWEEP_SCHEDULES
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.session import Session
from core.plan.rules import validate
from core.schedules.zb_v import zbv_unit_schedule
from core.sim.fastpath import pipeline_iteration_times
from core.sim.pipeline_graph import StageProgram, build_pipeline_graph
from core.sim.stages import stage_times
from core.sim.graph_types import KINDS
from core.sim.simulate import open_profile, profile_path, simulate
from core.studies.sweep import SweepSpace
from tests.conftest import EXAMPLES
from tests.test_sweep import general_solver_time

F_, B_, W_ = schedules.PHASE_F, schedules.PHASE_B, schedules.PHASE_W


def reference_time(p, m, F, B, W, send_f, send_b, tail):
    """Iteration time of ZB-V by direct event simulation, from the definition: chunk 0 of stage
    ``i`` is virtual stage ``i``, chunk 1 is ``2p-1-i``; an F waits for the F of the previous
    virtual stage, a B for the B of the next (the last virtual stage's B for its own F), a W for
    its B; each stage runs its program in order; a transfer to another stage (send_f: to
    ``i+1``, send_b: to ``i-1``; none between the two chunks of stage ``p-1``) keeps the sender
    busy (blocking); then the stage's tail.
    ``F, B, W``: (p, 2) seconds; ``send_f, send_b, tail``: (p,)."""
    def vs(i, c):
        return i if c == 0 else 2 * p - 1 - i

    def where(k):
        return (k, 0) if k < p else (2 * p - 1 - k, 1)

    progs = [schedules.work_order("zb-v", p, m, i) for i in range(p)]
    done: dict = {}                      # (phase, virtual stage, micro-batch) -> data ready at
    free = [0.0] * p
    ptr = [0] * p
    left = sum(len(o) for o in progs)
    while left:
        moved = False
        for i in range(p):
            o = progs[i]
            while ptr[i] < len(o):
                ph, j, c = int(o.phase[ptr[i]]), int(o.microbatch[ptr[i]]), int(o.chunk[ptr[i]])
                k = vs(i, c)
                dep = {F_: (F_, k - 1, j) if k > 0 else None,
                       B_: (B_, k + 1, j) if k < 2 * p - 1 else (F_, k, j),
                       W_: (B_, k, j)}[ph]
                if dep is not None and dep not in done:
                    break
                start = max(free[i], done[dep] if dep is not None else 0.0)
                end = start + (F, B, W)[ph][i, c]
                to = {F_: k + 1, B_: k - 1, W_: None}[ph]
                if to is not None and 0 <= to < 2 * p and where(to)[0] != i:
                    r = where(to)[0]  # an activation to i+1 or a gradient to i-1 goes the usual
                    # way (with p = 2 both hops join the same two stages)
                    usual = r == ((i + 1) % p if ph == F_ else (i - 1) % p)
                    end += (send_f[i] if usual else send_b[i]) if ph == F_ else \
                        (send_b[i] if usual else send_f[i])
                done[(ph, k, j)] = end
                free[i] = end
                ptr[i] += 1
                left -= 1
                moved = True
        assert moved, "deadlock"
    return max(free[i] + tail[i] for i in range(p))


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7])
def test_v_shape_placement(p):
    sched = schedules.get("zb-v")
    vs = sched.virtual_stages(p, 2)
    assert vs.tolist() == [[i, 2 * p - 1 - i] for i in range(p)]
    stage_of, chunk_of = sched.placement(p, 2)
    assert stage_of.tolist() == list(range(p)) + list(range(p - 1, -1, -1))
    assert chunk_of.tolist() == [0] * p + [1] * p
    assert sched.loss_stage(p, 2) == 0 and sched.chunks(None) == 2
    assert schedules.get("interleaved").virtual_stages(p, 3).tolist() == \
        [[c * p + i for c in range(3)] for i in range(p)]
    assert schedules.get("1f1b").loss_stage(p, 1) == p - 1


@pytest.mark.parametrize("p, m", [(1, 1), (1, 5), (2, 1), (2, 7), (3, 2), (4, 8), (5, 13), (6, 4)])
def test_each_item_runs_once_in_dependency_order(p, m):
    for i in range(p):
        o = schedules.work_order("zb-v", p, m, i)
        assert len(o) == 6 * m
        seen = {}
        for n, (ph, j, c) in enumerate(zip(o.phase.tolist(), o.microbatch.tolist(), o.chunk.tolist())):
            assert (ph, j, c) not in seen
            seen[(ph, j, c)] = n
        for j in range(m):
            for c in (0, 1):
                assert seen[(F_, j, c)] < seen[(B_, j, c)] < seen[(W_, j, c)]
            assert seen[(F_, j, 0)] < seen[(F_, j, 1)] or i != p - 1  # the turn on stage p-1
    # the orders run with unit times (the reference would report a deadlock)
    ones = np.ones((p, 2))
    assert reference_time(p, m, ones, ones, ones, np.zeros(p), np.zeros(p), np.zeros(p)) > 0


@pytest.mark.parametrize("p", range(1, 9))
def test_peak_activations_equal_1f1b(p):
    for m in range(1, 4 * p + 2):
        zb = schedules.in_flight_all("zb-v", p, m)
        one = schedules.in_flight_all("1f1b", p, m)
        # 2p chunk activations at most, each half the stage's layers: p micro-batches, 1F1B's
        # stage-0 peak min(p, m)
        assert max(zb) == max(one) == min(p, m)
        assert all(x <= min(p, m) for x in zb)
        assert schedules.loss_in_flight("zb-v", p, m) == 1


@pytest.mark.parametrize("p", range(1, 13))
def test_uniform_bubble_closed_form(p):
    """F = B = W = 1 per chunk (1F1B's stage: F = 2, B + W = 4), free transfers: ZB-V takes
    6m + p - 1 (stage p-1 waits p-1 before its first forward: the lower bound) to 6m + p when
    m >= 2p, never more than 1F1B's 6(m + p - 1); so its bubble share is at most p/(6m + p)
    against 1F1B's (p - 1)/(m + p - 1)."""
    for m in range(1, 4 * p + 3):
        ones = np.ones((p, 2, 1))
        z = np.zeros((p, 1))
        T = float(pipeline_iteration_times("zb-v", m, ones, ones, z, z, z, z, wgrad_s=ones)[0])
        one = float(pipeline_iteration_times("1f1b", m, 2 * ones[:, 0], 4 * ones[:, 0],
                                             z, z, z, z)[0])
        assert one == 6 * (m + p - 1)
        assert 6 * m + p - 1 <= T <= one
        if m >= 2 * p:
            assert T <= 6 * m + p
            assert (T - 6 * m) / T <= p / (6 * m + p)
            if p > 1:
                assert (T - 6 * m) / T < (p - 1) / (m + p - 1)


def test_unit_schedule_is_cached_and_read_only():
    a = zbv_unit_schedule(4, 8)
    assert a is zbv_unit_schedule(4, 8)
    o = schedules.work_order("zb-v", 4, 8, 2)
    assert not o.phase.flags.writeable


def test_fast_path_equals_graph_and_reference_solver():
    rng = np.random.default_rng(11)
    for _ in range(25):
        p, m, n = int(rng.integers(1, 6)), int(rng.integers(1, 12)), 2
        per_chunk = [rng.uniform(0.1, 3, (p, 2, n)), rng.uniform(0.1, 5, (p, 2, n)),
                     rng.uniform(0.0, 2, (p, 2, n))]
        per_stage = [rng.uniform(0, 1, (p, n)), rng.uniform(0, 1, (p, n)),
                     rng.uniform(0, 2, (p, n)), rng.uniform(0, 1, (p, n))]
        for compiled in (False, True):
            got = pipeline_iteration_times("zb-v", m, per_chunk[0], per_chunk[1], *per_stage,
                                           wgrad_s=per_chunk[2], compiled=compiled)
            for j in range(n):
                graph = general_solver_time("zb-v", p, 2, m, per_chunk, per_stage, j)
                ref = reference_time(p, m, *(a[..., j] for a in per_chunk),
                                     per_stage[0][:, j], per_stage[1][:, j],
                                     per_stage[2][:, j] + per_stage[3][:, j])
                assert got[j] == pytest.approx(graph, rel=1e-12)
                assert got[j] == pytest.approx(ref, rel=1e-12)


def test_fast_path_wants_both_chunks():
    ones = np.ones((3, 4))
    with pytest.raises(ValueError, match="2 chunks per stage"):
        pipeline_iteration_times("zb-v", 4, ones, ones, ones, ones, ones, ones, wgrad_s=ones)


def _session(schedule: str, **plan) -> Session:
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.plan = dataclasses.replace(s.plan, pipeline_parallel=4, data_parallel=1, schedule=schedule,
                                 **plan)
    return s


def test_simulation_puts_the_output_layer_and_the_loss_on_stage_0():
    zb, one = _session("zb-v"), _session("1f1b")
    assert validate(zb) == []
    r = simulate(zb)
    # the per-op graph's critical path equals the fast path on the stage times (the sweep's way)
    st = stage_times(zb, open_profile(profile_path(zb)))
    assert st.fwd_s.shape == (4, 2)
    fast = pipeline_iteration_times(
        "zb-v", zb.plan.num_microbatches, st.fwd_s[..., None], st.bwd_s[..., None],
        *(np.asarray(a, float)[:, None] for a in (st.send_fwd_s, st.send_bwd_s, st.dp_comm_s,
                                                  st.optimizer_s)),
        wgrad_s=st.wgrad_s[..., None], ready_s=st.ready_s[..., None],
        chunk_tail_s=st.chunk_tail_s[..., None])
    assert r.report.iteration_time_s == pytest.approx(float(fast[0]), rel=1e-9)
    p_zb = model_math.params_per_gpu(zb.model, zb.plan)
    p_one = model_math.params_per_gpu(one.model, one.plan)
    t = zb.plan.tensor_parallel
    (first_sh, _), _ = model_math.family_of(zb.model).edge_parameters(zb.model, t)
    # the tied output layer shares stage 0's embedding: no second copy
    assert zb.model.tied_embeddings
    assert p_zb.sum() + first_sh / t == pytest.approx(p_one.sum())
    assert p_zb[1:].tolist() == [p_one[1]] * 3
    acts = [x.activations_bytes for x in r.report.memory]
    assert acts[0] > acts[1] == acts[2] == acts[3]


def test_rules():
    assert schedules.schedule_errors("zb-v", 4, 8, None, 24) == []
    assert schedules.schedule_errors("zb-v", 4, 3, None, 24) == []   # any m
    assert [f for f, _ in schedules.schedule_errors("zb-v", 4, 8, None, 20)] == ["plan.pipeline_parallel"]
    assert [f for f, _ in schedules.schedule_errors("zb-v", 4, 8, 4, 24)] == ["plan.virtual_pipeline_stages"]
    assert [f for f, _ in schedules.schedule_errors("zb-v", 4, 8, None, None)] == ["plan.schedule"]
    s = _session("zb-v")
    s.plan.pipeline_parallel = 5  # 24 layers over 2*5 chunks
    assert "plan.pipeline_parallel" in {e.field for e in validate(s)}


def test_megatron_export_refuses_it_by_name():
    s = Session(ModelConfig("x", 4, 256, 4, None, 128, 1000),
                ParallelPlan(1, 2, 1, 1, 8, "zb-v", "none", "bf16"), ClusterConfig(), CostConfig())
    with pytest.raises(MegatronArgsError, match="plan.schedule 'zb-v': .*no ZB-V"):
        export_arguments(s)
    assert not schedules.get("zb-v").in_megatron
    assert schedules.get("interleaved").megatron_args(4) == ["--num-virtual-stages-per-pipeline-rank", "4"]


def test_sweep_tries_it_only_when_asked():
    assert "zb-v" in SCHEDULES and "zb-v" not in SWEEP_SCHEDULES
    assert tuple(SweepSpace().schedules) == SWEEP_SCHEDULES
    assert all(schedules.get(n).in_megatron or n in ("gpipe", "zb-h1") for n in SWEEP_SCHEDULES)


def test_graph_tasks_name_their_virtual_stage():
    p, m = 3, 4
    programs = [StageProgram.from_chunks([[(0, 0, 1.0, -1)]] * 2, [[(1, 0, 1.0, -1)]] * 2,
                                         [[(9, 0, 1.0, -1)]] * 2, send_fwd_s=0.5, send_bwd_s=0.5)
                for _ in range(p)]
    g = build_pipeline_graph(programs, m, "zb-v")
    work = np.flatnonzero((g.chunk >= 0) & (g.phase >= 0))
    got = {(int(g.stage[k]), int(g.chunk[k])): g.virtual_stage(int(k)) for k in work.tolist()}
    assert got == {(i, c): (i if c == 0 else 2 * p - 1 - i) for i in range(p) for c in (0, 1)}
    # the hand-over between the two chunks of stage p-1 costs nothing; the others 0.5 each
    p2p = g.kind == KINDS.index("pp_p2p")
    assert np.count_nonzero(p2p & (g.duration_s == 0.0)) == 2 * m   # F and B of each micro-batch
    assert np.count_nonzero(p2p) == 2 * m * (2 * p - 1)


@pytest.mark.parametrize("name", schedules.names())
def test_every_schedule_places_each_virtual_stage_once(name):
    sched = schedules.get(name)
    for p in (1, 2, 3, 5):
        v = sched.chunks(3 if sched.uses_virtual_stages else None)
        vs = sched.virtual_stages(p, v)
        assert sorted(vs.ravel().tolist()) == list(range(p * v))
        stage_of, chunk_of = sched.placement(p, v)
        assert all(vs[s, c] == k for k, (s, c) in enumerate(zip(stage_of.tolist(), chunk_of.tolist())))
        assert sched.loss_stage(p, v) == stage_of[-1]
        assert vs[0, 0] == 0  # the embedding is on stage 0
        if sched.in_megatron:
            assert isinstance(sched.megatron_args(v), list)
        else:
            with pytest.raises(schedules.NotInMegatron, match="1F1B and interleaved 1F1B only"):
                sched.megatron_args(v)


def test_megatron_schedule_and_stage_times_kinds():
    assert schedules.megatron_schedule(None) == schedules.megatron_schedule(1) == "1f1b"
    assert schedules.megatron_schedule(4) == "interleaved"
    kinds = {n: schedules.get(n).stage_times_kind for n in schedules.names()}
    assert kinds["1f1b"] == kinds["gpipe"]              # they share stage times in a sweep
    assert len({kinds[n] for n in ("1f1b", "interleaved", "zb-h1", "zb-v")}) == 4
