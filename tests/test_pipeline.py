"""Closed forms of pipeline schedules."""

from __future__ import annotations

import numpy as np
import pytest

from core.graph import StageProgram, build_pipeline_graph, schedule_order
from core.graph_types import KINDS
from core.solver import solve


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
