"""A job whose GPU count is not a multiple of the node size: ranks sit on nodes consecutively
(Megatron-Core's order, tp fastest), so the last node holds the rest; a data-parallel group
crossing into it has fewer members there, each moving a larger share of the inter-node shard
(core.sim.comm.partial_node_share), and the ring goes at that node's pace."""
from __future__ import annotations

import dataclasses

import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.comm import INTER_NODE_LATENCY_S, CommModel, partial_node_share
from core.sim.simulate import partial_node_note, simulate
from core.store.profiles_gen import generate_store
from core.studies.sweep import SweepSpace, run_sweep

A100 = "A100-SXM4-80GB"
_STORE: list = []


def store():
    if not _STORE:
        _STORE.append(generate_store(A100))
    return _STORE[0]


def llama(d: int, **plan) -> Session:
    """Llama 2 7B over d GPUs of 8-GPU A100 nodes with 400 Gb/s each."""
    model = dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], seq_length=4096)
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=d, micro_batch_size=1,
                global_batch_size=96, schedule="1f1b", recompute="full", precision="bf16")
    return Session(model, ParallelPlan(**{**base, **plan}),
                   ClusterConfig(A100, 8, intra_node_bandwidth_gbytes_per_s=200.0,
                                 inter_node_bandwidth_gbits_per_s=400.0), CostConfig())


def test_partial_node_share_counts_the_fewest_members_on_the_last_node():
    # 12 ranks on nodes of 8: the d=12 group (stride 1) has 4 of them on the second node
    assert partial_node_share(12, 1, 8, 12) == 4
    # 512 GB200 on 72-GPU racks, t=8, d=64: ranks 504..511 hold one member of each dp group
    assert partial_node_share(64, 8, 72, 512) == 1
    # t=8, p=4, d=16: the last stage's groups (ranks 384..511) have 1 member on the last node
    assert partial_node_share(16, 8, 72, 512) == 1
    # t=4, d=6 on 8-GPU nodes, 24 GPUs: whole nodes -> None (the uniform model)
    assert partial_node_share(6, 4, 8, 24) is None
    # one node, or a group that stays inside the partial node, -> None
    assert partial_node_share(6, 1, 8, 6) is None
    assert partial_node_share(2, 1, 8, 12) is None   # pairs (8,9), (10,11) inside node 1
    # 20 on 8 (t=2, d=10): ranks 16..19 hold 2 members of each tp rank's group
    assert partial_node_share(10, 2, 8, 20) == 2


def test_dp_all_reduce_of_12_gpus_on_8_gpu_nodes_moves_a_quarter_per_gpu_over_2_nodes():
    """d=12 on nodes of 8 and 4: reduce-scatter in the node (8 GPUs), ring all-reduce over the
    2 nodes of the B/4 shard of the 4-GPU node (2(n-1) = 2 steps, 2(n-1)/n = 1 of it at one
    GPU's share of the node's 400 Gb/s), all-gather in the node."""
    s = llama(12)
    cm = CommModel(store(), s.plan, s.cluster)
    B, ov = 64e6, cm.collective_overhead_s
    gpu_bw = 400e9 / 8 / 8 * cm.inter_node_efficiency
    inter = 2 * INTER_NODE_LATENCY_S + 1.0 * (B / 4) / gpu_bw
    intra = cm.intra("reduce_scatter", 8, B) + cm.intra("all_gather", 8, B)
    assert cm.dp_all_reduce(B) == pytest.approx(ov + intra + inter, rel=1e-12)
    assert cm.dp_collective("all_reduce", B) == cm.dp_all_reduce(B)
    # the reduce-scatter and all-gather of ZeRO: one ring step each, half the all-reduce's bytes
    half = INTER_NODE_LATENCY_S + 0.5 * (B / 4) / gpu_bw
    assert cm.dp_collective("reduce_scatter", B) == pytest.approx(
        ov + cm.intra("reduce_scatter", 8, B) + half, rel=1e-12)
    # before: B/8 per GPU, as on two full nodes
    assert cm.dp_all_reduce(B) - cm.hierarchical_all_reduce(12, 8, B) == pytest.approx(
        (B / 4 - B / 8) / gpu_bw, rel=1e-9)


def test_a_job_filling_whole_nodes_is_unchanged():
    """d=16 on two 8-GPU nodes: the B/8 shard, as before (and as the uniform formula)."""
    s = llama(16)
    cm = CommModel(store(), s.plan, s.cluster)
    B, ov = 64e6, cm.collective_overhead_s
    gpu_bw = 400e9 / 8 / 8 * cm.inter_node_efficiency
    inter = 2 * INTER_NODE_LATENCY_S + 1.0 * (B / 8) / gpu_bw
    expect = ov + cm.intra("reduce_scatter", 8, B) + inter + cm.intra("all_gather", 8, B)
    assert cm.dp_all_reduce(B) == expect == cm.hierarchical_all_reduce(16, 8, B)


def test_the_partial_node_note():
    c = ClusterConfig(A100, 8)
    assert partial_node_note(c, 12) == ("12 GPUs on nodes of 8: the last node holds 4; "
                                        "collectives across nodes are paced by it")
    assert partial_node_note(c, 16) is None and partial_node_note(c, 6) is None
    assert partial_node_note(ClusterConfig("GB200-NVL72", 72), 512) == (
        "512 GPUs on nodes of 72: the last node holds 8; collectives across nodes are paced by it")
    r = simulate(llama(12)).report
    assert partial_node_note(c, 12) in r.warnings
    assert not any("the last node holds" in w for w in simulate(llama(16)).report.warnings)


def test_sweep_and_simulate_agree_on_a_partial_node():
    """d=12 at p=1 (12 GPUs, a last node of 4) and at p=2 (24 GPUs, whole nodes) in one sweep:
    the sweep's memoized collectives (core.sim.stage_comm) give simulate's times (the note
    is simulate's, per plan: a sweep of many GPU counts does not list one per count)."""
    s = llama(12, zero_stage=1)
    s.model = dataclasses.replace(s.model, num_layers=24)
    res = run_sweep(s, SweepSpace(hold_session_values=True, num_gpus=(12, 24), tensor_parallel=(1,),
                                  pipeline_parallel=(1, 2), data_parallel=(12,),
                                  micro_batch_sizes=(1,), recompute=("full",)), prune=False)
    assert set(res.num_gpus.tolist()) == {12, 24}
    for i in range(res.num_plans):
        r = simulate(res.session_for(i)).report
        assert res.iteration_time_s[i] == pytest.approx(r.iteration_time_s, rel=1e-9)
        assert (partial_node_note(s.cluster, 12) in r.warnings) == (res.num_gpus[i] == 12)
