"""Closed forms of pipeline schedules."""

from __future__ import annotations

import time

import numpy as np
import pytest

from core import schedules
from core.sim.pipeline_graph import StageProgram, build_pipeline_graph, schedule_order
from core.sim.graph_types import KINDS
from core.sim.solver import solve


def uniform(p, tf=1.0, tb=2.0, **kw):
    return [StageProgram.from_tasks([(0, 0, tf, -1)], [(1, 0, tb, -1)], **kw) for _ in range(p)]


def bubble_fraction(graph, sched):
    compute = np.bincount(graph.stage, graph.duration_s, minlength=graph.num_stages)
    return float(np.mean(1 - compute / sched.iteration_time_s))


@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (2, 8), (4, 4), (4, 16), (8, 3), (16, 64)])
def test_1f1b_bubble_closed_form(p, m):
    tf, tb = 1.0, 2.0
    g = build_pipeline_graph(uniform(p, tf, tb), m, "1f1b")
    s = solve(g)
    assert s.iteration_time_s == pytest.approx((m + p - 1) * (tf + tb))
    assert bubble_fraction(g, s) == pytest.approx((p - 1) / (m + p - 1))


@pytest.mark.parametrize("p,m", [(2, 8), (4, 4), (8, 3), (5, 11)])
def test_gpipe_equals_1f1b_without_communication(p, m):
    t_1f1b = solve(build_pipeline_graph(uniform(p, 1.3, 2.9), m, "1f1b")).iteration_time_s
    t_gpipe = solve(build_pipeline_graph(uniform(p, 1.3, 2.9), m, "gpipe")).iteration_time_s
    assert t_gpipe == pytest.approx(t_1f1b)


def test_p2p_latency_adds_per_stage_hop():
    # With transfers of c seconds, the first forward reaches the last stage after (p-1)(tf+c),
    # and the critical path crosses 2(p-1) transfers: T = (m+p-1)(tf+tb) + 2(p-1)c when m = 1.
    p, c = 4, 0.25
    g = build_pipeline_graph(uniform(p, send_fwd_s=c, send_bwd_s=c), 1, "1f1b")
    assert solve(g).iteration_time_s == pytest.approx(p * 3.0 + 2 * (p - 1) * c)


def test_blocking_send_keeps_the_sender_waiting():
    # p=2, m=2, 1F1B, transfers of c: stage 0 runs F0 F1 B0 B1, stage 1 runs F0 B0 F1 B1.
    # Stage 1's B0 send (c) holds its F1, so B1 reaches stage 0 at 3tf + 2tb + 3c and
    # T = 3(tf + tb) + 3c; with a non-blocking send it would be 3(tf + tb) + 2c.
    tf, tb, c = 1.0, 2.0, 0.25
    g = build_pipeline_graph(uniform(2, tf, tb, send_fwd_s=c, send_bwd_s=c), 2, "1f1b")
    assert solve(g).iteration_time_s == pytest.approx(3 * (tf + tb) + 3 * c)


def test_dp_and_optimizer_follow_the_last_backward():
    p, m = 3, 5
    g = build_pipeline_graph(uniform(p, dp_comm_s=0.5, optimizer_s=0.25), m, "1f1b")
    s = solve(g)
    assert s.iteration_time_s == pytest.approx((m + p - 1) * 3.0 + 0.75)
    dp = g.kind == KINDS.index("dp_comm")
    assert dp.sum() == p


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("p,m,stage", [(4, 8, 0), (4, 8, 3), (4, 2, 0), (8, 3, 1)])
def test_schedule_order_runs_each_microbatch_once_forward_before_backward(schedule, p, m, stage):
    is_bwd, mb = schedule_order(schedule, p, m, stage)
    assert sorted(mb[~is_bwd].tolist()) == list(range(m))
    assert sorted(mb[is_bwd].tolist()) == list(range(m))
    pos_f = {int(x): i for i, x in enumerate(mb) if not is_bwd[i]}
    pos_b = {int(x): i for i, x in enumerate(mb) if is_bwd[i]}
    assert all(pos_f[j] < pos_b[j] for j in range(m))


def test_1f1b_warmup_depth_limits_in_flight_microbatches():
    is_bwd, _ = schedule_order("1f1b", 4, 8, 0)
    in_flight = np.cumsum(np.where(is_bwd, -1, 1))
    assert in_flight.max() == 4  # p - stage micro-batches in flight on stage 0


def test_unknown_schedule():
    with pytest.raises(ValueError, match="schedule='zb'"):
        schedule_order("zb", 2, 2, 0)


# --------------------------------------------------------------------------- interleaved and zero-bubble

def chunked(p, v, tf=1.0, tb=2.0, tw=None, **kw):
    """Uniform stages of v chunks; each chunk does 1/v of the stage's work."""
    return [StageProgram.from_chunks([[(0, 0, tf / v, -1)]] * v, [[(1, 0, tb / v, -1)]] * v,
                                     None if tw is None else [[(9, 0, tw / v, -1)]] * v, **kw)
            for _ in range(p)]


@pytest.mark.parametrize("p,m,v", [(2, 2, 2), (2, 8, 3), (4, 4, 2), (4, 8, 2), (4, 16, 4), (8, 8, 2),
                                   (3, 9, 5)])
def test_interleaved_bubble_is_p_minus_1_over_v_m_of_the_ideal_time(p, m, v):
    # Narayanan et al. 2021 Sec. 2.2.2: bubble (p-1)/(v*m) of the ideal time m*(tf+tb)
    tf, tb = 1.0, 2.0
    g = build_pipeline_graph(chunked(p, v, tf, tb), m, "interleaved")
    s = solve(g)
    ideal = m * (tf + tb)
    assert s.iteration_time_s == pytest.approx(ideal * (1 + (p - 1) / (v * m)))
    assert bubble_fraction(g, s) == pytest.approx((p - 1) / (v * m + p - 1))
    # each micro-batch crosses all p*v virtual stages: v chunks per stage, 2 transfers per hop
    pp = g.kind == KINDS.index("pp_p2p")
    assert pp.sum() == 2 * m * (p * v - 1)
    assert set(np.unique(g.chunk[g.kind == 0])) == set(range(v))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 4), (4, 12), (8, 16), (6, 7)])
@pytest.mark.parametrize("tf,tb,tw", [(1.0, 1.0, 1.0), (1.0, 1.2, 0.8), (2.0, 1.5, 0.5)])
def test_zb_h1_bubble_closed_form(p, m, tf, tb, tw):
    # Qi et al. 2024 Sec. 3.1: ZB-H1's bubble (p-1)(T_F + T_B - T_W) against 1F1B's
    # (p-1)(T_F + T_B + T_W), for uniform stages and free communication (T_W <= T_F)
    zb = solve(build_pipeline_graph(chunked(p, 1, tf, tb, tw), m, "zb-h1")).iteration_time_s
    one = solve(build_pipeline_graph(uniform(p, tf, tb + tw), m, "1f1b")).iteration_time_s
    work = m * (tf + tb + tw)
    assert one == pytest.approx(work + (p - 1) * (tf + tb + tw))
    assert zb == pytest.approx(work + (p - 1) * (tf + tb - tw))
    assert zb < one


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2),
                                        ("interleaved", 4), ("zb-h1", 1)])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (8, 16)])
def test_every_item_runs_once_and_forward_precedes_backward(schedule, p, m, v):
    for stage in range(p):
        o = schedules.work_order(schedule, p, m, stage, v)
        for c in range(v):
            for ph in (schedules.PHASE_F, schedules.PHASE_B):
                sel = (o.chunk == c) & (o.phase == ph)
                assert sorted(o.microbatch[sel].tolist()) == list(range(m))
        pos = {(int(ph), int(c), int(j)): k for k, (ph, c, j) in
               enumerate(zip(o.phase, o.chunk, o.microbatch))}
        for c in range(v):
            for j in range(m):
                assert pos[(0, c, j)] < pos[(1, c, j)]
                if schedules.get(schedule).splits_backward:
                    assert pos[(1, c, j)] < pos[(2, c, j)]


@pytest.mark.parametrize("p,m", [(4, 8), (8, 8), (8, 32), (3, 2)])
def test_in_flight_microbatches(p, m):
    for i in range(p):
        assert schedules.in_flight_microbatches("1f1b", p, m, i) == min(p - i, m)
        assert schedules.in_flight_microbatches("gpipe", p, m, i) == m
        # ZB-H1 defers W on later stages up to 1F1B's peak (stage 0), never beyond
        zb = schedules.in_flight_microbatches("zb-h1", p, m, i)
        assert min(p - i, m) <= zb <= min(p, m)
    assert schedules.in_flight_microbatches("zb-h1", p, m, 0) == min(p, m)


def test_one_stage_has_no_pipeline_whatever_the_schedule():
    # Megatron's forward_backward_no_pipelining: one micro-batch in flight, F and B in turn
    for name in ("gpipe", "1f1b", "zb-h1"):
        assert schedules.in_flight_microbatches(name, 1, 16, 0) == 1
    assert schedules.work_order("gpipe", 1, 3, 0).phase.tolist() == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 16, 3), (2, 8, 4)])
def test_interleaved_in_flight_follows_megatron_warmup(p, m, v):
    # Megatron-Core: (p - i - 1)*2 + (v - 1)*p warm-up items on rank i, plus the one in flight
    for i in range(p):
        warm = min((p - i - 1) * 2 + (v - 1) * p, m * v)
        want = (warm + 1) / v if warm < m * v else m
        assert schedules.in_flight_microbatches("interleaved", p, m, i, v) == pytest.approx(want)


def test_schedule_rules():
    assert schedules.schedule_errors("1f1b", 4, 8, None, 24) == []
    assert schedules.schedule_errors("interleaved", 4, 8, 2, 24) == []
    fields = [f for f, _ in schedules.schedule_errors("interleaved", 4, 6, 4, 24)]
    assert fields == ["plan.virtual_pipeline_stages", "plan.global_batch_size"]  # 24 % 16, 6 % 4
    assert schedules.schedule_errors("interleaved", 4, 8, None, 24)[0][0] == "plan.virtual_pipeline_stages"
    assert schedules.schedule_errors("1f1b", 4, 8, 2, 24)[0][0] == "plan.virtual_pipeline_stages"
    assert "is not one of" in schedules.schedule_errors("zb-x", 4, 8, None, 24)[0][1]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved", "zb-h1"])
def test_all_stage_orders_equal_the_per_stage_orders(schedule):
    # work_orders (one numpy pass over the stages, used by the fast path and the memory model)
    # must give each stage's order of PipelineSchedule.order, and in_flight_all its peaks
    sched = schedules.get(schedule)
    checked = 0
    for p in range(1, 10):
        for m in range(1, 20):
            for v in ((2, 3) if sched.uses_virtual_stages else (1,)):
                if sched.uses_virtual_stages and (p < 2 or m % p):
                    continue
                phase, mb, chunk = sched.orders(p, m, v)
                for i in range(p):
                    o = sched.order(p, m, i, v)
                    assert phase[i].tolist() == o.phase.tolist()
                    assert mb[i].tolist() == o.microbatch.tolist()
                    assert chunk[i].tolist() == o.chunk.tolist()
                assert schedules.in_flight_all(schedule, p, m, v) == tuple(
                    schedules.in_flight_microbatches(schedule, p, m, i, v) for i in range(p))
                if v > 1:  # uneven chunks (embedding / loss in the pipeline split) weigh the items
                    layers = tuple((3,) + (4,) * (v - 1) if i == 0 else (4,) * v for i in range(p))
                    assert schedules.in_flight_all(schedule, p, m, v, layers) == tuple(
                        schedules.in_flight_microbatches(schedule, p, m, i, v, layers[i])
                        for i in range(p))
                checked += 1
    assert checked > 20


def _in_flight_from_the_orders(name, p, m, v, chunk_layers=None):
    """The peak in-flight counts and losses from the full orders (the definition)."""
    from core.schedules import base
    s = base.get(name)
    phase, _, chunk = base.work_orders(name, p, m, v)
    release = base.PHASE_W if s.splits_backward else base.PHASE_B
    step = np.where(phase == base.PHASE_F, 1, np.where(phase == release, -1, 0))
    vv = s.chunks(v)
    out = [float(x) / vv for x in np.cumsum(step, axis=1).max(axis=1).tolist()]
    if vv > 1 and chunk_layers is not None:
        for i, layers in enumerate(chunk_layers):
            w = np.asarray(layers, np.int64)[chunk[i]]
            out[i] = float(np.cumsum(step[i] * w).max()) / float(sum(layers))
    stage_of, chunk_of = s.placement(p, vv)
    st, c = int(stage_of[-1]), int(chunk_of[-1])
    last = chunk[st] == c
    loss = np.where(last & (phase[st] == base.PHASE_F), 1,
                    np.where(last & (phase[st] == base.PHASE_B), -1, 0))
    return tuple(out), int(np.cumsum(loss).max())


def test_in_flight_counts_past_the_steady_state_equal_the_full_orders():
    """Beyond ``in_flight_steady_from`` the counts come from a shorter order (GPipe's from
    its closed form): equal, for every valid m up to 10 p v, to the full orders'."""
    from core.schedules import base
    checked = 0
    for name in base.names():
        s = base.get(name)
        for p in range(1, 7):
            for v in ([1] if not s.uses_virtual_stages else [2, 3]):
                ch = s.chunks(v)
                layers = (tuple(tuple((i + j) % 3 + 1 for j in range(ch)) for i in range(p))
                          if ch > 1 else None)
                for m in range(1, 10 * p * ch + 1):
                    if s.order_errors(p, m, ch):
                        continue
                    want, want_loss = _in_flight_from_the_orders(name, p, m, v, layers)
                    assert base.in_flight_all(name, p, m, v, layers) == want, (name, p, v, m)
                    assert base.loss_in_flight(name, p, m, v) == want_loss, (name, p, v, m)
                    checked += 1
    assert checked > 1000


def test_in_flight_of_millions_of_micro_batches_needs_no_order_of_millions():
    # a sweep of a 2^24-sequence global batch asked for orders of 8M items per stage for every
    # (p, m, v): no output after minutes
    from core.schedules import base
    t0 = time.perf_counter()
    assert base.in_flight_all("1f1b", 4, 8_388_608) == (4.0, 3.0, 2.0, 1.0)
    assert base.in_flight_all("interleaved", 4, 8_388_608, 2) == base.in_flight_all(
        "interleaved", 4, 16, 2)
    assert base.in_flight_all("gpipe", 4, 8_388_608) == (8_388_608.0,) * 4
    assert base.loss_in_flight("gpipe", 4, 8_388_608) == 8_388_608
    assert base.loss_in_flight("zb-v", 4, 8_388_608) == base.loss_in_flight("zb-v", 4, 16)
    assert time.perf_counter() - t0 < 1.0
