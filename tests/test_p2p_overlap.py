"""Overlapped pipeline transfers (plan.overlap_p2p_comm, Megatron-LM's default with virtual
stages): the interleaved schedule's sends run beside the sender's compute; every other
schedule's block the sender. The fast path's equality with the general solver on random cases
is in tests/test_fastpath_kernel.py; here the plan rule, bounds the overlap must respect, a
real plan's report and sweep, and the Megatron round trip."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from core.io.megatron.export import export_script
from core.io.megatron.from_session import export_arguments
from core.io.megatron.to_session import import_file
from core.io.session import load_session
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan, p2p_overlapped
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import inactive_fields, validate
from core.plan.session import Session
from core.sim.fastpath import pipeline_iteration_times
from core.sim.simulate import simulate
from core.sim.solver import solve
from core.sim.graph import build_graph
from core.studies.sweep import SweepSpace, run_sweep
from tests.conftest import EXAMPLES
from tests.test_sweep_prune import answers


def _session(**plan) -> Session:
    base = dict(tensor_parallel=2, pipeline_parallel=4, data_parallel=1, micro_batch_size=1,
                global_batch_size=16, schedule="interleaved", virtual_pipeline_stages=2,
                recompute="none", precision="bf16")
    return Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(**{**base, **plan}),
                   ClusterConfig(gpus_per_node=8), CostConfig())


@pytest.mark.parametrize("schedule,flag,want", [
    ("interleaved", True, True), ("interleaved", False, False), ("1f1b", True, False),
    ("gpipe", True, False), ("zb-h1", True, False), ("zb-v", True, False)])
def test_only_the_interleaved_schedule_overlaps(schedule, flag, want):
    pl = ParallelPlan(1, 4, 1, 1, 16, schedule, "none", "bf16", overlap_p2p_comm=flag)
    assert p2p_overlapped(pl) is want
    assert ParallelPlan().overlap_p2p_comm is True  # Megatron-LM's default


def test_overlapped_sends_lie_between_free_and_blocking_ones():
    """Per random case: free transfers <= overlapped <= blocking; with free transfers the
    overlap changes nothing, bit for bit."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        p, v = int(rng.integers(2, 6)), int(rng.integers(2, 4))
        m, n = p * int(rng.integers(1, 4)), 3
        F, B = rng.uniform(0.1, 3, (p, v, n)), rng.uniform(0.1, 5, (p, v, n))
        sends = [rng.uniform(0, 2, (p, n)), rng.uniform(0, 2, (p, n))]
        tail = [rng.uniform(0, 1, (p, n)), rng.uniform(0, 1, (p, n))]
        zero = [np.zeros((p, n))] * 2
        free = pipeline_iteration_times("interleaved", m, F, B, *zero, *tail)
        over = pipeline_iteration_times("interleaved", m, F, B, *sends, *tail, overlap_p2p=True)
        block = pipeline_iteration_times("interleaved", m, F, B, *sends, *tail)
        assert np.all(free <= over * (1 + 1e-12)) and np.all(over <= block * (1 + 1e-12))
        assert np.array_equal(
            pipeline_iteration_times("interleaved", m, F, B, *zero, *tail, overlap_p2p=True), free)


def test_only_the_steady_state_sends_asynchronously():
    """Megatron-Core's interleaved schedule (overlap_p2p_comm_warmup_flush at its default)
    waits for the warm-up forwards' and the cool-down backwards' transfers: stage i's items
    ``warm_i <= k < 2*m*v - warm_i`` send asynchronously, ``warm_i = (p-i-1)*2 + (v-1)*p``."""
    from core import schedules
    p, m, v = 4, 8, 2
    steady = schedules.get("interleaved").async_sends(p, m, v)
    assert steady.shape == (p, 2 * m * v)
    for i in range(p):
        warm = (p - i - 1) * 2 + (v - 1) * p
        assert steady[i].tolist() == [warm <= k < 2 * m * v - warm for k in range(2 * m * v)]
    # m*v = 8 items, all in stage 0's warm-up (10, capped at 8): none of its sends overlaps
    few = schedules.get("interleaved").async_sends(4, 4, 2)
    assert not few[0].any() and few[3].sum() == 2 * (8 - 4)
    for name in ("1f1b", "gpipe", "zb-h1", "zb-v"):
        assert schedules.get(name).async_sends(p, m, 2 if name == "zb-v" else 1) is None
    # the overlap asked of a schedule without asynchronous sends changes nothing
    one = np.ones((3, 2, 1))
    args = ("zb-v", 6, one, one, np.ones((3, 1)), np.ones((3, 1)), np.zeros((3, 1)),
            np.zeros((3, 1)))
    assert np.array_equal(pipeline_iteration_times(*args, wgrad_s=one, overlap_p2p=True),
                          pipeline_iteration_times(*args, wgrad_s=one))


def test_overlapped_plan_reports_less_exposed_pipeline_communication():
    """GPT-3 1.3B, t2 p4 v2: the same compute, less exposed transfer time; the op-level graph,
    the micro-batch graph and the fast path agree on the overlapped plan."""
    over, block = _session(), _session(overlap_p2p_comm=False)
    r_over, r_block = simulate(over).report, simulate(block).report
    assert r_over.compute_s == pytest.approx(r_block.compute_s, rel=1e-12)
    assert 0 <= r_over.pp_comm_s < r_block.pp_comm_s
    assert r_over.iteration_time_s < r_block.iteration_time_s
    parts = r_over.compute_s + r_over.comm_s + r_over.pp_comm_s + r_over.bubble_s + r_over.imbalance_s
    assert parts == pytest.approx(r_over.iteration_time_s, rel=1e-12)
    coarse, _ = build_graph(over, _store(over), detail="microbatch")
    assert solve(coarse).iteration_time_s == pytest.approx(r_over.iteration_time_s, rel=1e-9)


def _store(s: Session):
    from core.sim.simulate import session_profile
    return session_profile(s)


def test_sweep_of_interleaved_plans_prunes_exactly_with_overlapped_sends():
    """The bound leaves transfers out, so it stays under overlapped plans' times: the pruned
    sweep answers as the exhaustive one, and its interleaved plans' times are the simulator's."""
    s = _session(data_parallel=2, global_batch_size=32)
    space = SweepSpace(num_gpus=16, schedules=("1f1b", "interleaved"), micro_batch_sizes=(1, 2),
                       recompute=("none", "full"))
    full = run_sweep(s, space, prune=False)
    assert answers(run_sweep(s, space)) == answers(full)
    checked = 0
    for pl, t in zip(full.plans, full.iteration_time_s):
        if np.isfinite(t) and pl.schedule == "interleaved" and pl.pipeline_parallel > 1:
            assert pl.overlap_p2p_comm is True
            assert t == pytest.approx(simulate(Session(s.model, pl, s.cluster, s.cost)
                                               ).report.iteration_time_s, rel=1e-9)
            checked += 1
            if checked == 3:
                break
    assert checked == 3


def test_the_editor_greys_the_field_outside_the_interleaved_schedule():
    assert "plan.overlap_p2p_comm" not in inactive_fields(_session())
    assert inactive_fields(_session(schedule="1f1b", virtual_pipeline_stages=None))[
        "plan.overlap_p2p_comm"].startswith("needs the interleaved schedule")


def test_label_and_validation():
    assert "no-overlap_p2p" in _session(overlap_p2p_comm=False).plan.label()
    assert "overlap_p2p" not in _session().plan.label()
    assert "overlap_p2p" not in _session(schedule="1f1b", virtual_pipeline_stages=None,
                                         overlap_p2p_comm=False).plan.label(full=True)
    assert any(e.field == "plan.overlap_p2p_comm" for e in validate(_session(overlap_p2p_comm=1)))


def test_megatron_launch_round_trip(tmp_path):
    s = _session(data_parallel=2, global_batch_size=32)
    assert "--no-overlap-p2p-communication" not in export_arguments(s)
    off = dataclasses.replace(s, plan=dataclasses.replace(s.plan, overlap_p2p_comm=False))
    assert export_arguments(off).count("--no-overlap-p2p-communication") == 1
    script = tmp_path / "run.sh"
    script.write_text(export_script(off))
    assert import_file(script).session.plan.overlap_p2p_comm is False
    script.write_text(export_script(s))
    assert import_file(script).session.plan.overlap_p2p_comm is True
    # 1F1B: Megatron turns the overlap off itself; nothing to write
    one = dataclasses.replace(off, plan=dataclasses.replace(off.plan, schedule="1f1b",
                                                            virtual_pipeline_stages=None))
    assert "--no-overlap-p2p-communication" not in export_arguments(one)


def test_a_session_without_the_field_loads_overlapped(tmp_path):
    doc = json.loads((EXAMPLES / "gpt3_175b.json").read_text())
    assert doc["plan"].pop("overlap_p2p_comm") is True
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert load_session(tmp_path / "old.json").plan.overlap_p2p_comm is True


def test_interleaved_with_two_stages_needs_the_overlap():
    """Megatron-LM's rule interleaved-pipeline-size: with --no-overlap-p2p-communication the
    interleaved schedule needs p > 2; a sweep of such a session tries no p = 2 interleaved plan
    (the export would refuse it)."""
    errs = validate(_session(pipeline_parallel=2, data_parallel=2, overlap_p2p_comm=False))
    assert [e.field for e in errs] == ["plan.overlap_p2p_comm"]
    assert not validate(_session(pipeline_parallel=2, data_parallel=2))
    assert not validate(_session(overlap_p2p_comm=False))  # p = 4
    s = _session(data_parallel=2, global_batch_size=32, overlap_p2p_comm=False)
    r = run_sweep(s, SweepSpace(num_gpus=16, schedules=("interleaved",), micro_batch_sizes=(1,),
                                recompute=("none",)))
    ps = {pl.pipeline_parallel for pl in r.plans}
    assert 2 not in ps and 4 in ps


def test_trace_puts_the_transfers_on_a_thread_of_their_own():
    """Overlapped sends run beside the tensor-parallel collectives of the comm stream: the
    Perfetto trace gives them a "PP send/recv" thread, so no two slices of one thread overlap
    (a viewer would nest them; on the comm thread, 139 pairs in this plan across 25 Gb/s
    nodes)."""
    from core.io.trace import PP_TID, trace_events
    s = _session()
    s = dataclasses.replace(s, cluster=ClusterConfig(gpus_per_node=2,
                                                     inter_node_bandwidth_gbits_per_s=25.0))
    res = simulate(s)
    events = trace_events(res.graph, res.schedule)["traceEvents"]
    x = [e for e in events if e["ph"] == "X"]
    assert {e["tid"] for e in x if e["args"]["kind"] == "pp_p2p"} == {PP_TID}
    assert {e["name"] for e in x if e["args"]["kind"] == "pp_p2p"} == {"p2p_fwd", "p2p_bwd"}
    assert {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"
            and e["tid"] == PP_TID} == {(i, "PP send/recv") for i in range(4)}
    by_thread: dict = {}
    for e in x:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    overlapping = 0
    for spans in by_thread.values():
        spans.sort()
        overlapping += sum(b0 < a1 - 0.01 for (_, a1), (b0, _) in zip(spans, spans[1:]))
    assert overlapping == 0  # (ts and dur are rounded to 1 ns)
