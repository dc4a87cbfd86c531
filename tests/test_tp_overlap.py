"""Tensor-parallel communication overlap (plan.tp_comm_overlap, Megatron --tp-comm-overlap)."""
from __future__ import annotations

import dataclasses

import pytest

from core.model import model_math
from core.sim.comm import CommModel
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.op_times import lookup_op_times, tp_overlap_split
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.io.megatron.export import export_script
from core.sim.simulate import open_profile, profile_path, simulate


def test_overlap_split_is_the_pipelined_pair():
    # max(c, g) + min(c, g)/t for the pair, so the collective exposes max(c-g, 0) + min(c, g)/t
    assert tp_overlap_split(3.0, 2.0, 4) == pytest.approx((1.0 + 2.0 / 4, 3.0 - 1.5))
    assert tp_overlap_split(1.0, 5.0, 8) == pytest.approx((1.0 / 8, 7.0 / 8))
    exposed, hidden = tp_overlap_split(0.0, 5.0, 8)
    assert exposed == 0.0 and hidden == 0.0


def _session(**plan) -> Session:
    base = dict(tensor_parallel=4, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                global_batch_size=2, schedule="1f1b", recompute="none", precision="bf16",
                sequence_parallel=True)
    return Session(MODEL_PRESETS["Llama 3 8B"], ParallelPlan(**{**base, **plan}),
                   ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))


def test_needs_sequence_parallelism():
    errs = validate(_session(sequence_parallel=False, tp_comm_overlap=True))
    assert [e.field for e in errs] == ["plan.tp_comm_overlap"]
    assert "sequence_parallel" in errs[0].message
    assert not validate(_session(tp_comm_overlap=True))


def test_refused_at_one_rank_and_across_nodes():
    errs = validate(_session(tensor_parallel=1, data_parallel=4, global_batch_size=4,
                             tp_comm_overlap=True))
    assert [e.field for e in errs] == ["plan.tp_comm_overlap"] and "t = 1" in errs[0].message
    s = _session(tensor_parallel=16, tp_comm_overlap=True)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, num_attention_heads=32,
                                                         num_query_groups=16))
    errs = validate(s)
    assert [e.field for e in errs] == ["plan.tp_comm_overlap"] and "across nodes" in errs[0].message


def test_hidden_time_is_the_closed_form_and_leaves_the_critical_path():
    """One stage, one replica: every task is on the critical path, so the iteration is
    shorter by exactly what the GEMMs hide: per layer and micro-batch, the all-gather and
    reduce-scatter of the attention and MLP, forward and backward, each split by
    tp_overlap_split against its GEMM."""
    off, on = _session(), _session(tp_comm_overlap=True)
    store = open_profile(profile_path(on))
    r_off, r_on = simulate(off).report, simulate(on).report
    t, m = 4, on.plan.num_microbatches
    times = lookup_op_times(on, store).times
    comm = CommModel(store, on.plan, on.cluster)
    nbytes = 1 * on.model.seq_length * on.model.hidden_size * 2
    c = {k: comm.tp_collective(k, nbytes) for k in ("all_gather", "reduce_scatter")}
    per_layer = sum(tp_overlap_split(c[kind], times[gemm], t)[1]
                    for (_, kind), gemm in model_math.TP_OVERLAP_GEMMS.items())
    expected = per_layer * on.model.num_layers * m
    assert r_off.tp_hidden_s == 0.0
    assert r_on.tp_hidden_s == pytest.approx(expected, rel=1e-9)
    assert r_off.comm_s - r_on.comm_s == pytest.approx(expected, rel=1e-9)
    assert r_off.iteration_time_s - r_on.iteration_time_s == pytest.approx(expected, rel=1e-9)
    # the GEMM the first all-gather hides is the QKV projection: (b s) x h x (a + 2g) kv / t
    key = dict(b=1, s=on.model.seq_length, h=4096, a=32, g=8, kv=128, t=t, dtype="bf16",
               f=14336, V=128256, act="swiglu", norm="rmsnorm", pos="rope", attn="flash")
    (k,) = model_math.op_kernels("attention_qkv_gemm", key)
    assert k.flops == 2 * 8192 * 4096 * (32 + 16) * 128 / 4


def test_pytorch_async_tp_leaves_the_backward_reduce_scatters_exposed():
    """tp_comm_overlap_backend symmetric_memory (PyTorch's micro-pipeline TP, torchtitan's
    async TP): the backward's reduce-scatters after the QKV and fc1 input-gradient GEMMs, whose
    input is a sum of matmuls (dq Wq + dk Wk + dv Wv; d1 W1 + d3 W3), are not fused
    (torch/_inductor/fx_passes/micro_pipeline_tp.py, _find_producer_matmul), so per layer and
    micro-batch the GEMMs hide all of userbuffers' but those two reduce-scatters' hidden parts:
    the iteration is longer by exactly them. The Megatron-LM export refuses it."""
    ub, sm = _session(tp_comm_overlap=True), _session(
        tp_comm_overlap=True, tp_comm_overlap_backend="symmetric_memory")
    store = open_profile(profile_path(ub))
    r_ub, r_sm = simulate(ub).report, simulate(sm).report
    t, m = 4, ub.plan.num_microbatches
    times = lookup_op_times(ub, store).times
    comm = CommModel(store, ub.plan, ub.cluster)
    rs = comm.tp_collective("reduce_scatter", 1 * ub.model.seq_length * ub.model.hidden_size * 2)
    lost = sum(tp_overlap_split(rs, times[model_math.TP_OVERLAP_GEMMS[op, "reduce_scatter"]],
                                t)[1] for op in ("attention_bwd", "mlp_bwd"))
    assert lost > 0
    expected = lost * ub.model.num_layers * m
    assert r_ub.tp_hidden_s - r_sm.tp_hidden_s == pytest.approx(expected, rel=1e-9)
    assert r_sm.iteration_time_s - r_ub.iteration_time_s == pytest.approx(expected, rel=1e-9)
    # without the overlap the backend changes nothing
    off = simulate(_session(tp_comm_overlap_backend="symmetric_memory")).report
    assert off.iteration_time_s == simulate(_session()).report.iteration_time_s
    from core.io.megatron.arguments import MegatronArgsError
    with pytest.raises(MegatronArgsError, match="tp_comm_overlap_backend 'symmetric_memory'"):
        export_arguments(sm)


def test_pipelined_plan_with_recompute_and_interleaving_gets_faster_not_slower():
    base = dict(pipeline_parallel=2, data_parallel=1, global_batch_size=8, recompute="full")
    for extra in (dict(), dict(schedule="interleaved", virtual_pipeline_stages=2),
                  dict(schedule="zb-h1", recompute="none")):
        off = _session(**{**base, **extra})
        on = dataclasses.replace(off, plan=dataclasses.replace(off.plan, tp_comm_overlap=True))
        r_off, r_on = simulate(off).report, simulate(on).report
        assert r_on.tp_hidden_s > 0, extra
        assert r_on.iteration_time_s < r_off.iteration_time_s, extra
        # at most what the GEMMs hid on all stages together (tp_hidden_s is the stage mean)
        assert (r_off.iteration_time_s - r_on.iteration_time_s
                <= r_on.tp_hidden_s * on.plan.pipeline_parallel * 1.000001)


def test_megatron_flag_round_trip():
    s = _session(tp_comm_overlap=True)
    assert "--tp-comm-overlap" in export_arguments(s)
    back = session_from_launch(read_launch(export_script(s)), gpu="H100-SXM5-80GB")
    assert back.session.plan.tp_comm_overlap is True
    off = session_from_launch(read_launch(export_script(_session())), gpu="H100-SXM5-80GB")
    assert off.session.plan.tp_comm_overlap is False


def test_sweep_keeps_plans_without_sequence_parallelism():
    from core.studies.sweep import SweepSpace, enumerate_plans
    s = _session(tp_comm_overlap=True, global_batch_size=8)
    space = SweepSpace(tensor_parallel=[1, 2, 4], pipeline_parallel=[1], micro_batch_sizes=[1],
                       sequence_parallel=[False, True], num_gpus=8, schedules=["1f1b"],
                       recompute=["none"])
    plans = enumerate_plans(s, space)
    with_sp = {(p.tensor_parallel, p.sequence_parallel, p.tp_comm_overlap) for p in plans}
    # t = 1 keeps one plan (the first sequence_parallel value); overlap only where t > 1 and sp
    assert with_sp == {(1, False, False), (2, False, False), (2, True, True),
                       (4, False, False), (4, True, True)}


@pytest.mark.parametrize("overlap", [False, True])
def test_per_op_checkpointing_adds_its_recomputed_all_gathers_to_the_iteration(overlap):
    """One stage, one replica (every task on the critical path), torchtitan's per-op selective
    checkpointing at t=4: the iteration is longer than without recomputation by exactly the
    recomputed ops and their all-gathers, per layer and micro-batch: two all-gathers of a
    (b, s, h) activation, whole without the overlap, their exposed parts against the
    recomputed k and w3 GEMMs with it (the hidden parts are tp_hidden_s's growth)."""
    s = _session(recompute="selective_op", tp_comm_overlap=overlap)
    none = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none"))
    assert not validate(s)
    store = open_profile(profile_path(s))
    times = lookup_op_times(s, store).times
    ag = CommModel(store, s.plan, s.cluster).tp_collective(
        "all_gather", 1 * s.model.seq_length * s.model.hidden_size * 2)
    split = ([tp_overlap_split(ag, times[g], 4) for g in ("attention_sac_gemm", "mlp_sac_gemm")]
             if overlap else [(ag, 0.0), (ag, 0.0)])
    n = s.model.num_layers * s.plan.num_microbatches
    r, r0 = simulate(s, store).report, simulate(none, store).report
    added = times["attention_sac_fwd"] + times["mlp_sac_fwd"] + sum(e for e, _ in split)
    assert r.iteration_time_s - r0.iteration_time_s == pytest.approx(n * added, rel=1e-9)
    assert r.tp_hidden_s - r0.tp_hidden_s == pytest.approx(n * sum(h for _, h in split),
                                                           rel=1e-9, abs=1e-15)
    assert (r.tp_hidden_s > r0.tp_hidden_s) == overlap


def test_graph_size_estimate_bounds_overlapped_graphs():
    """The hidden parts of the overlapped collectives are side tasks of the graph: the size
    estimate (the simulator's memory guard) counts them."""
    from core.sim.simulate import graph_size_estimate
    for recompute in ("none", "selective", "full", "selective_op"):
        s = _session(tp_comm_overlap=True, recompute=recompute, data_parallel=2,
                     global_batch_size=4, zero_stage=3)
        assert simulate(s).graph.num_tasks <= graph_size_estimate(s), recompute


def test_side_tasks_leave_out_the_edges_their_chains_imply(monkeypatch):
    """An item's overlapped collectives are chains: only a chain's first task waits for the
    item's predecessors and only its last gates the item's successors. The times equal the
    graph with every such edge (bit for bit), with a fraction of the edges (Llama 3.1 405B with
    ZeRO-3 and tp_comm_overlap had 18 edges per task, 49.8 M, and took 16 s and 3.3 GB)."""
    import numpy as np
    from core.sim import graph as graph_mod
    from core.sim.solver import earliest_times

    s = _session(tp_comm_overlap=True, pipeline_parallel=2, data_parallel=2, zero_stage=3,
                 overlap_grad_reduce=True, overlap_param_gather=True, global_batch_size=8)
    pruned = simulate(s).graph
    plan_of = graph_mod._SideTasks.plan_of

    def every_edge(self, tmpl):  # the edges before the chains were used
        dep, _free, c_prev, c_next, ends, _end_idx = plan_of(self, tmpl)
        return dep, np.flatnonzero(~dep), c_prev, c_next, ends, np.flatnonzero(ends)

    monkeypatch.setattr(graph_mod._SideTasks, "plan_of", every_edge)
    full = simulate(s).graph
    assert full.num_tasks == pruned.num_tasks
    assert pruned.src.size < full.src.size / 2
    assert pruned.src.size < 2 * pruned.num_tasks
    _, end_full = earliest_times(full.duration_s, full.src, full.dst)
    _, end_pruned = earliest_times(pruned.duration_s, pruned.src, pruned.dst)
    assert np.array_equal(end_full, end_pruned)
