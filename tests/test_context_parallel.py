"""Context parallelism (plan.context_parallel, cp): Megatron-Core's ring attention.

Closed forms: the K/V exchange volume per layer, the ring's hidden and exposed parts, the
rank's share of the attention FLOPs and of every token-wise op, the world size, the data-
parallel group with the cp ranks, the activation memory with s -> s/cp; cp = 1 is the
simulator of before, bit for bit (values recorded on main before context parallelism).
"""

from __future__ import annotations

import dataclasses

import pytest

from core.model import model_math
from core.sim.comm import CommModel
from core.plan.cluster import ClusterConfig
from core.plan.fields import ConfigError
from core.plan.presets import MODEL_PRESETS
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.rules import check, validate
from core.plan.model_config import padded_vocab_size
from core.sim.stage_comm import _cp_ring_times
from core.sim.stages import stage_times
from core.sim.graph import build_graph
from core.sim.op_times import op_key
from core.sim.graph_types import KINDS, STREAMS
from core.model.ops import op_kernels
from core.sim.simulate import session_profile, simulate
from core.studies.sweep import SweepSpace, enumerate_plans

LLAMA3_8B = MODEL_PRESETS["Llama 3 8B"]
CP_KIND = KINDS.index("cp_p2p")


def _session(seq: int = 131072, cp: int = 8, t: int = 8, p: int = 1, d: int = 1, B: int = 4,
             gpu: str = "H200-SXM-141GB", **plan) -> Session:
    model = dataclasses.replace(LLAMA3_8B, seq_length=seq)
    kw = dict(tensor_parallel=t, pipeline_parallel=p, data_parallel=d, micro_batch_size=1,
              global_batch_size=B, recompute="selective", sequence_parallel=True,
              context_parallel=cp)
    kw.update(plan)
    return Session(model=model, plan=ParallelPlan(**kw),
                   cluster=ClusterConfig(gpu=gpu, inter_node_bandwidth_gbits_per_s=3200.0))


# --------------------------------------------------------------------------- volume

def test_kv_exchange_volume_per_layer_is_the_closed_form():
    """Per layer and micro-batch, one GPU sends cp-1 blocks of K and V of its s/cp tokens in
    the forward, and those plus as many blocks of dK/dV in the backward; a block is
    b * s/cp * 2 * (g/t) * kv_channels elements (Llama 3 8B: g=8, kv_channels=128)."""
    s = _session(seq=131072, cp=8, t=2, micro_batch_size=2)
    block = 2 * (131072 // 8) * 2 * (8 // 2) * 128 * 2  # b * s/cp * (K, V) * g/t * dh * bf16
    assert block == 67_108_864
    assert model_math.cp_kv_block_bytes(s.model, s.plan) == block
    assert model_math.cp_exchange_bytes(s.model, s.plan) == (7 * block, 14 * block)
    one = dataclasses.replace(s.plan, context_parallel=1)
    assert model_math.cp_exchange_bytes(s.model, one) == (0.0, 0.0)


def test_ring_steps_hide_the_exchange_under_the_core_and_expose_the_rest():
    """cp=4, core 4 s forward and 8 s backward (1 s and 2 s per step), a K/V block 1.5 s and
    K/V with dK/dV 3 s: forward 3 transfers of 1.5 s under 1 s steps (3 s hidden, 1.5 s
    exposed); backward transfers 1.5, 3, 3, 1.5 s under 2 s steps (7 s hidden, 2 s exposed)."""
    out = _cp_ring_times(4, 4.0, 8.0, 1.5, 3.0)
    assert out == {"cp_fwd_hidden": 3.0, "cp_fwd_exposed": 1.5,
                   "cp_bwd_hidden": 7.0, "cp_bwd_exposed": 2.0}
    # cp = 2: one forward transfer, two backward (K/V, then dK/dV), no double block
    assert _cp_ring_times(2, 2.0, 2.0, 0.5, 99.0) == {
        "cp_fwd_hidden": 0.5, "cp_fwd_exposed": 0.0, "cp_bwd_hidden": 1.0, "cp_bwd_exposed": 0.0}


def test_allgather_exchange_hides_the_gather_under_the_first_step_only():
    """PyTorch's context_parallel all-gather (plan.cp_comm_type allgather), cp=4, core 4 s
    forward and 8 s backward (1 s and 2 s per step), the K/V all-gather 2.5 s, a dK/dV block
    1.5 s: forward 1 s of the gather hidden under the first step, 1.5 s exposed; backward the
    gather under the first step (2 s hidden, 0.5 s exposed), three dK/dV transfers under the
    next steps (4.5 s hidden) and the last one waited for after the loop (1.5 s exposed)."""
    from core.sim.stage_comm import _cp_allgather_times
    assert _cp_allgather_times(4, 4.0, 8.0, 2.5, 1.5) == {
        "cp_fwd_hidden": 1.0, "cp_fwd_exposed": 1.5, "cp_bwd_hidden": 6.5, "cp_bwd_exposed": 2.0}


def test_allgather_is_the_cp_groups_all_gather_of_every_block():
    """The gathered buffer is cp blocks; inside a node it takes the profile's all-gather of cp
    GPUs (plus the collective overhead), across nodes the hierarchical one."""
    from core.sim.comm import CommModel
    s = _session(seq=131072, cp=4, t=2, gpu="H100-SXM5-80GB", cp_comm_type="allgather")
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    blk = model_math.cp_kv_block_bytes(s.model, s.plan)
    assert comm.cp_all_gather(4 * blk) == pytest.approx(
        comm.collective_overhead_s + comm.intra("all_gather", 4, 4 * blk), rel=1e-12)
    r_ag, r_ring = simulate(s).report, simulate(dataclasses.replace(
        s, plan=dataclasses.replace(s.plan, cp_comm_type="p2p"))).report
    # same work, another exchange: only the context-parallel part and what waits on it differ
    assert r_ag.compute_s == pytest.approx(r_ring.compute_s, rel=1e-9)
    assert r_ag.iteration_time_s != r_ring.iteration_time_s


# --------------------------------------------------------------------------- work per rank

def _flops(op: str, key: dict) -> float:
    return sum(k.flops for k in op_kernels(op, key))


@pytest.mark.parametrize("cp", [2, 4, 16])
def test_each_rank_computes_one_cpth_of_the_causal_attention_and_of_every_token_wise_op(cp):
    S = 32768
    full = op_key(_session(seq=S, cp=1, t=2))
    part = op_key(_session(seq=S, cp=cp, t=2))
    assert (part["s"], part["cp"]) == (S // cp, cp)
    for core in ("attention_core_fwd", "attention_core_bwd"):
        assert _flops(core, part) == pytest.approx(_flops(core, full) / cp, rel=1e-12)
        # in cp steps of a causal s/cp x s/cp FlashAttention problem each
        steps = [k for k in op_kernels(core, part) if k.is_gemm]
        assert len(steps) == cp and all((k.m, k.n) == (S // cp, S // cp) for k in steps)
    for op in ("attention_fwd", "attention_bwd"):  # QKV, projection and core together
        assert _flops(op, part) == pytest.approx(_flops(op, full) / cp, rel=1e-12)
    for op in ("mlp_fwd", "mlp_bwd", "output_fwd", "output_bwd"):
        assert _flops(op, part) == pytest.approx(_flops(op, full) / cp, rel=1e-12)
        assert sum(k.bytes for k in op_kernels(op, part)) < sum(k.bytes for k in op_kernels(op, full))


def test_with_free_communication_the_ring_is_all_hidden_and_the_core_takes_its_share():
    """cp=2 inside a node at an absurd NVLink bandwidth: no exposed exchange; the graph holds,
    per attention op, its part outside the ring, the core and the hidden exchange on the
    "CP exchange" stream; the times sum to the attention op's."""
    s = _session(seq=65536, cp=2, t=2, gpu="H100-SXM5-80GB", recompute="none")
    s.cluster.intra_node_bandwidth_gbytes_per_s = 100_000.0
    store = session_profile(s)
    st = stage_times(s, store)
    times = st.op_times_s
    assert times["cp_fwd_exposed"] == 0.0 and times["cp_bwd_exposed"] == 0.0
    assert 0 < times["cp_fwd_hidden"] < times["attention_core_fwd"] / 2
    graph, _ = build_graph(s, store, times=st)
    cp_tasks = graph.kind == CP_KIND
    assert set(graph.stream[cp_tasks].tolist()) == {STREAMS.index("CP exchange")}
    assert graph.lanes == (0, 1, 2)
    layers = s.model.num_layers
    m = s.plan.num_microbatches
    # per layer and micro-batch: forward and backward, each an exposed and a hidden task
    assert cp_tasks.sum() == 4 * layers * m
    core = graph.op == list(graph_ops()).index("attention_core_fwd")
    pre = (graph.op == list(graph_ops()).index("attention_fwd"))
    assert core.sum() == pre.sum() == layers * m
    assert graph.duration_s[core][0] + graph.duration_s[pre][0] == pytest.approx(
        times["attention_fwd"], rel=1e-12)
    r = simulate(s).report
    assert r.cp_comm_s == 0.0 and r.num_gpus == 4


def graph_ops():
    from core.sim.graph_types import OPS
    return OPS


# --------------------------------------------------------------------------- exposed time

def test_exposed_exchange_in_the_report_is_per_layer_rings_times_layers_and_micro_batches():
    """Inter-node ring (t=8, cp=8 on 8-GPU nodes with 400 Gb/s each: a K/V block of 8 MiB takes
    longer than a ring step's attention): the report's context-parallel exchange is
    L * m * (forward + backward + the selectively recomputed core's forward) exposed parts,
    and the breakdown still sums to the iteration time."""
    s = _session(seq=131072, cp=8, t=8, B=2, gpu="H100-SXM5-80GB")
    s.cluster.inter_node_bandwidth_gbits_per_s = 400.0
    r = simulate(s).report
    st = stage_times(s, session_profile(s))
    per_layer = 2 * st.op_times_s["cp_fwd_exposed"] + st.op_times_s["cp_bwd_exposed"]
    assert per_layer > 0
    expected = s.model.num_layers * s.plan.num_microbatches * per_layer
    assert r.cp_comm_s == pytest.approx(expected, rel=1e-9)
    total = r.compute_s + r.comm_s + r.pp_comm_s + r.cp_comm_s + r.bubble_s + r.imbalance_s
    assert total == pytest.approx(r.iteration_time_s, rel=1e-9)
    # inside a node (t=2, cp=4: 8 ranks) the ring is faster than across nodes
    near = _session(seq=131072, cp=4, t=2, B=2, gpu="H100-SXM5-80GB")
    near.cluster.inter_node_bandwidth_gbits_per_s = 400.0
    near = simulate(near).report
    assert near.cp_comm_s < r.cp_comm_s


# --------------------------------------------------------------------------- placement

def test_rank_order_is_tp_cp_dp_pp_and_the_gradient_group_is_d_times_cp():
    s = _session(seq=8192, cp=2, t=2, p=2, d=2, B=8)
    s.cluster.gpus_per_node = 4
    comm = CommModel(session_profile(s), s.plan, s.cluster)
    # global rank tp + t*(cp_rank + cp*(dp + d*pp)); 4 GPUs per node
    assert comm.node_of(1, 0, 0, cp_rank=1) == (1 + 2 * 1) // 4 == 0
    assert comm.node_of(0, 1, 0) == (2 * 2 * 1) // 4 == 1
    assert comm.node_of(0, 0, 1) == (2 * 2 * 2) // 4 == 2
    assert comm.cp_ring_in_node()
    assert not CommModel(comm.store, dataclasses.replace(s.plan, context_parallel=4),
                         s.cluster).cp_ring_in_node()
    # the data-parallel gradient reduction runs over the d*cp = 4 ranks tp + 2j (2 per node)
    plain = dataclasses.replace(s.plan, context_parallel=1, data_parallel=4)
    assert comm.dp_all_reduce(1e8) == CommModel(comm.store, plain, s.cluster).dp_all_reduce(1e8)
    assert s.plan.dp_cp_size == 4


# --------------------------------------------------------------------------- rules

def test_world_size_is_t_p_cp_d():
    s = _session(seq=131072, cp=4, t=2, p=2, d=3, B=6)
    assert s.plan.num_gpus == 2 * 2 * 4 * 3
    assert s.plan.num_microbatches == 6 // 3  # cp ranks share each micro-batch
    assert "cp=4" in s.plan.label()
    check(s)


@pytest.mark.parametrize("change, words", [
    (dict(seq=131072 + 8), "seq_length=131080 is not divisible by 2*context_parallel_size=16"),
    (dict(t=4, cp=4, seq=4 * 2 * 3), "seq_length/context_parallel_size=6 is not divisible by "
                                     "tensor_parallel_size=4"),
    (dict(t=4, cp=3, seq=6 * 1024), "tensor_parallel_size*context_parallel_size=4*3=12 spans nodes"),
])
def test_megatron_rules_of_context_parallelism_name_the_field(change, words):
    kw = dict(cp=8, t=1)
    kw.update(change)
    errs = validate(_session(**kw))
    assert [e.field for e in errs] == ["plan.context_parallel"]
    assert words in errs[0].message


def test_a_cp_group_across_nvl72_racks_says_how_to_use_64_gpus_of_each():
    """t*cp = 128 on GB200 NVL72 (72 GPUs per NVLink domain) spans racks unevenly; the message
    says how a job that uses 64 GPUs of each rack is described; with gpus_per_node 64 it runs."""
    s = _session(seq=131072, cp=16, t=8, gpu="GB200-NVL72", B=1)
    s.cluster.gpus_per_node = 72
    (err,) = validate(s)
    assert err.field == "plan.context_parallel" and "64 of a GB200 NVL72 rack" in err.message
    s.cluster.gpus_per_node = 64
    assert validate(s) == []


def test_gb200_with_8_gpu_nodes_is_simulated_with_a_warning_that_names_the_domain():
    """A session moved to GB200 NVL72 keeps gpus_per_node 8 (a common default): the report and
    the sweep warn that what spans more than 8 GPUs is priced over the network (tester: GB200
    silently modelled as 8-GPU nodes); at 72 (or 64) there is no such warning, nor on an H100."""
    s = _session(seq=131072, cp=16, t=8, gpu="GB200-NVL72", B=1)
    r = simulate(s).report
    assert any("cluster.gpus_per_node=8 is below the GB200-NVL72's NVLink domain of 72" in w
               for w in r.warnings)
    space = SweepSpace(num_gpus=128, tensor_parallel=[8], pipeline_parallel=[1],
                       micro_batch_sizes=[1], context_parallel=[16])
    from core.studies.sweep import run_sweep
    assert any("NVLink domain of 72" in w for w in run_sweep(s, space).warnings)
    s.cluster.gpus_per_node = 64
    assert not any("NVLink domain" in w for w in simulate(s).report.warnings)
    h100 = _session(seq=131072, cp=16, t=8, gpu="H100-SXM5-80GB", B=1)
    assert not any("NVLink domain" in w for w in simulate(h100).report.warnings)


def test_gathers_and_all_to_alls_of_a_straddling_cp_group_cross_the_node_too():
    """A cp group of 4 ranks (t = 1) on 6-GPU nodes: the second group straddles two nodes, its
    ring's steps are priced over the network, and so are its all-gather, reduce-scatter and
    all-to-all: half the group on each side (tester: they stayed on NVLink, which made every
    all-gather exchange look far cheaper than the ring)."""
    s = _session(seq=65536, cp=4, t=1, d=3, B=3, gpu="H200-SXM-141GB", sequence_parallel=False)
    s.cluster.gpus_per_node = 6
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    assert not comm.cp_ring_in_node()
    full = 4 * model_math.cp_kv_block_bytes(s.model, s.plan)
    for kind, method in (("all_gather", comm.cp_all_gather),
                         ("reduce_scatter", comm.cp_reduce_scatter)):
        assert method(full) == pytest.approx(comm.hierarchical(kind, 4, 2, full), rel=1e-12)
        assert method(full) > comm.collective_overhead_s + comm.intra(kind, 4, full)
    a2a = CommModel(store, dataclasses.replace(s.plan, cp_comm_type="a2a"), s.cluster)
    before = model_math.cp_a2a_bytes(s.model, dataclasses.replace(s.plan, cp_comm_type="a2a"))[0]
    assert a2a.cp_all_to_all(before) == pytest.approx(a2a.all_to_all(4, 2, before), rel=1e-12)


def test_cp_groups_straddling_racks_are_simulated_with_a_warning():
    """t*cp = 64 on 72-GPU NVL72 racks with d = 2: the second group crosses from the first rack
    into the second, its ring runs over the network; the report says so (tester: the hidden
    exchange jumped 14x without a word); with 64 GPUs per node, or one group, no warning."""
    s = _session(seq=131072, cp=8, t=8, d=2, B=2, gpu="GB200-NVL72")
    s.cluster.gpus_per_node = 72
    check(s)
    (w,) = [w for w in simulate(s).report.warnings if "straddle" in w]
    assert "t*cp=64 GPUs straddle the 72-GPU nodes" in w and "gpus_per_node 64" in w
    s.cluster.gpus_per_node = 64
    assert not any("straddle" in w for w in simulate(s).report.warnings)
    one = _session(seq=131072, cp=8, t=8, d=1, B=2, gpu="GB200-NVL72")
    one.cluster.gpus_per_node = 72
    assert not any("straddle" in w for w in simulate(one).report.warnings)


def test_the_unfused_attention_has_no_ring_and_is_refused_by_name():
    s = _session(cp=2, t=8)
    s.model.attention_kernel = "unfused"
    (err,) = validate(s)
    assert err.field == "plan.context_parallel" and "attention_kernel = flash" in err.message


def test_world_size_bound_counts_cp():
    s = _session(seq=131072, cp=64, t=8, p=1, d=4096, B=4096)
    errs = validate(s)
    assert any(e.field == "plan.data_parallel" and "8*1*64*4096=2,097,152" in e.message for e in errs)


# --------------------------------------------------------------------------- memory

def test_activation_memory_is_korthikantis_with_s_over_cp():
    for mode in ("none", "selective", "full"):
        s = _session(seq=131072, cp=8, t=4, recompute=mode)
        local = dataclasses.replace(s.model, seq_length=131072 // 8)
        one = dataclasses.replace(s.plan, context_parallel=1)
        assert model_math.activation_bytes_per_layer(s.model, s.plan) == \
            model_math.activation_bytes_per_layer(local, one)
    s = _session(seq=131072, cp=8, t=4, recompute="none")
    mem = model_math.stage_memory(s.model, s.plan)[-1]
    one = model_math.stage_memory(s.model, dataclasses.replace(s.plan, context_parallel=1))[-1]
    # plus the ring's buffers of the layer running: K/V and dK/dV, sent and received, and
    # the second dQ of its backward (dq_buffer beside each step's dq_)
    blk = 1 * (131072 // 8) * 2 * (8 // 4) * 128 * 2
    q = 1 * (131072 // 8) * (32 // 4) * 128 * 2
    assert model_math.cp_kv_block_bytes(s.model, s.plan) == blk
    assert model_math.cp_query_bytes(s.model, s.plan) == q
    assert mem.activations_bytes == pytest.approx(one.activations_bytes / 8 + 4 * blk + q,
                                                  rel=1e-12)
    assert mem.weights_bytes == one.weights_bytes  # every cp rank holds the weights


@pytest.mark.parametrize("kind, size, blocks, queries", [
    ("p2p", None, 4, 1), ("allgather", None, 4 + 2, 0), ("all_gather", None, 3.5 * 4 - 0.5, 1),
    ("a2a", None, None, 0), ("a2a+p2p", 2, None, 1)])
def test_exchange_buffers_of_one_layer_are_counted_once_on_every_stage(kind, size, blocks,
                                                                        queries):
    """The exchange's buffers (transient, one layer's at a time) join every stage's activations
    once, whatever the micro-batches in flight, beyond the dQ, dK, dV of a kernel without
    context parallelism (Transformer Engine 2.11 / 2.20, context_parallel.py): the ring's two
    (2, K/V) buffers, K/V and dK/dV sent and received (4 blocks), and its second dQ (dq_buffer
    beside each step's dq_); PyTorch's gathered K/V plus the ring's dK/dV (cp + 2); TE's
    all-gather's reordered gathered K/V (cp), the two chunks' dK/dV (cp + 1/2), the whole
    dK/dV (cp) and one reordered copy (cp/2), less the kernel's own dK/dV (1), and the chunks'
    dQ; the all-to-all's send and receive buffers of Q, K, V (twice the larger buffer;
    a2a+p2p plus the ring's 4 blocks and dQ). Llama 3 8B at s = 131072, cp = 4, t = 2: a
    block 32768 tokens x 2 x 4 K/V heads x 128 x 2 bytes, the queries 16 heads."""
    s = _session(seq=131072, cp=4, t=2, p=2, B=8, recompute="none", cp_comm_type=kind,
                 cp_a2a_size=size)
    check(s)
    blk = model_math.cp_kv_block_bytes(s.model, s.plan)
    q = model_math.cp_query_bytes(s.model, s.plan)
    assert (blk, q) == (32768 * 2 * 4 * 128 * 2, 32768 * 16 * 128 * 2)
    if blocks is None:
        before = model_math.cp_a2a_bytes(s.model, s.plan)[0]
        assert before == 1 * (131072 // 4) * (16 + 2 * 4) * 128 * 2  # Q, K, V of the rank
        expect = 2 * before + (4 * blk if size else 0.0) + queries * q
    else:
        expect = blocks * blk + queries * q
    assert model_math.cp_exchange_buffer_bytes(s.model, s.plan) == pytest.approx(expect, rel=1e-12)
    base = dataclasses.replace(s.plan, cp_comm_type="p2p", cp_a2a_size=None)
    got = [m.activations_bytes for m in model_math.stage_memory(s.model, s.plan)]
    ring = [m.activations_bytes for m in model_math.stage_memory(s.model, base)]
    # a2a keeps the core's output twice per layer (test_a2a_layer_keeps_the_core_output_twice):
    # 16 layers a stage, 1F1B's 2 and 1 micro-batches in flight
    extra = [q * 16 * 2, q * 16 * 1] if kind == "a2a" else [0.0, 0.0]
    assert got == pytest.approx([r - 4 * blk - q + expect + x for r, x in zip(ring, extra)],
                                rel=1e-12)


@pytest.mark.parametrize("recompute, modules, precision, recipe, twice", [
    ("none", None, "bf16", None, True), ("selective", "core_attn", "bf16", None, False),
    ("selective", "layernorm", "bf16", None, True), ("full", None, "bf16", None, False),
    ("none", None, "fp8", "delayed", False), ("none", None, "fp8", "tensorwise", True)])
def test_a2a_layer_keeps_the_core_output_twice(recompute, modules, precision, recipe, twice):
    """Transformer Engine's AttnFuncWithCPAndQKVOA2A saves its output in the head-split layout
    (out_part) and returns a new tensor, the output all-to-all'd back, which the projection
    keeps as its input: one more b s/cp (a/t) kv bytes per layer than the ring, whose saved
    output is the tensor it returns. Not with core_attn recomputed (the checkpoint keeps Q, K,
    V), full recomputation, or FP8 delayed scaling (the projection keeps its FP8 copy, already
    counted, and frees the BF16 input); FP8 with another recipe saves the BF16 input."""
    s = _session(seq=131072, cp=4, t=2, recompute=recompute, recompute_modules=modules,
                 precision=precision, fp8_recipe=recipe, cp_comm_type="a2a")
    check(s)
    ring = dataclasses.replace(s.plan, cp_comm_type="p2p")
    q = 1 * (131072 // 4) * (32 // 2) * 128 * 2  # BF16 under FP8 too
    assert model_math.cp_core_output_kept_twice(s.plan)
    assert not model_math.cp_core_output_kept_twice(ring)
    got = model_math.activation_bytes_per_layer(s.model, s.plan)
    base = model_math.activation_bytes_per_layer(s.model, ring)
    assert got - base == pytest.approx(q if twice else 0.0, rel=1e-12)


def test_distributed_optimizer_shards_over_d_times_cp():
    s = _session(cp=4, t=8, d=2, B=8, zero_stage=1)
    w, g, o = model_math.bytes_per_parameter(s.plan)
    assert (w, g, o) == (2, 4, 12 / 8)  # bf16 with fp32 main gradients: 6 + 12/(d*cp)


# --------------------------------------------------------------------------- cp = 1 unchanged

#: (iteration time, peak memory per GPU, exposed TP/DP communication) on main before context
#: parallelism was modelled (commit 1df7c0d): cp = 1 must give the same floats, bit for bit
#: (with the network of the time's default, 800 Gb/s per node, now given explicitly, and each
#: weight gradient added by a kernel of its own, as then: gradient_accumulation_fusion off;
#: the interleaved schedule's transfers blocking, as then: the test builds the graph so, since
#: Megatron-LM refuses p = 2 with overlap_p2p_comm off).
_BEFORE = [
    (Session(plan=ParallelPlan(gradient_accumulation_fusion=False),
             cluster=ClusterConfig(inter_node_bandwidth_gbits_per_s=800.0)),
     # memory: + the largest weight gradient of the peak stage, a tensor of its own without
     # fused accumulation (core.model.wgrad_buffers.separate_wgrad_bytes), added later: fc1,
     # 4h/t x h = 6144 x 12288 in fp16; + the first stage's embedding of its 16 micro-batches
     # in flight (p = 16), int64 ids and the dropout mask without sequence parallelism, 8 s + s h
     # (core.model.memory.embedding_activation_bytes), added later
     (57.69900268826715, 31749519360.0 + 2 * 6144 * 12288 + 16 * (8 * 2048 + 2048 * 12288),
      7.481048043229236)),
    # (the Llama models with Megatron-LM's dropout of 0.1, as when these were frozen: the
    # presets train without dropout now, and keep no masks)
    (Session(model=dataclasses.replace(LLAMA3_8B, hidden_dropout=0.1, attention_dropout=0.1),
             plan=ParallelPlan(
        tensor_parallel=2, pipeline_parallel=4, data_parallel=2, micro_batch_size=1,
        global_batch_size=32, schedule="zb-h1", recompute="selective", sequence_parallel=True,
        zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True,
        gradient_accumulation_fusion=False),
        cluster=ClusterConfig(gpu="H100-SXM5-80GB", inter_node_bandwidth_gbits_per_s=800.0)),
     # memory: + the loss stage's output-layer weight gradient (V'/t x h = 64128 x 4096 in
     # bf16), likewise; + its final norm's input and output, 2 s h / t in bf16
     # (core.model.memory.final_norm_activation_bytes), added later
     (2.0320441570691243, 36101210112.0 + 2 * 64128 * 4096 + 2 * 8192 * 4096 * 2 / 2,
      0.0990150257777756)),
    (Session(model=dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], hidden_dropout=0.1,
                                       attention_dropout=0.1), plan=ParallelPlan(
        tensor_parallel=4, pipeline_parallel=2, data_parallel=4, micro_batch_size=2,
        global_batch_size=64, schedule="interleaved", virtual_pipeline_stages=2, recompute="full",
        zero_stage=3, overlap_grad_reduce=True), cluster=ClusterConfig(gpu="H200-SXM-141GB",
                                                  inter_node_bandwidth_gbits_per_s=800.0)),
     # memory: + one layer's unsharded fp32 gradients under ZeRO-3 (50,601,984 parameters per
     # GPU x 4 bytes; PyTorch FSDP BackwardPrefetch: the peak holds the current set of
     # gradients), added after the CP change; the time and the communication are unchanged
     # but for the weight-gradient accumulation FSDP does not run (each micro-batch's gradients
     # are reduce-scattered: core.plan.parallel.wgrad_accumulation), taken out later
     # (1.8535172632932921 s with it); + the first stage's embedding, b = 2, no sequence
     # parallelism, 2p = 4 micro-batches of its first chunk in flight: 4 (8 s b + s b h),
     # added later
     (1.8404889351866232, 7115456512.0 + 50601984 * 4 + 4 * (8 * 4096 * 2 + 4096 * 2 * 4096),
      0.8006491248541721)),
]


@pytest.mark.parametrize("session, before", _BEFORE)
def test_cp_1_is_unchanged_bit_for_bit(session, before, monkeypatch):
    # the values were taken with the analytic stores of the time (the shipped H100/H200 stores
    # are calibrated since): the generator's store of the session's GPU, as then, and the
    # FlashAttention backward at the forward's efficiency, as then (core.model.ops)
    import core.model.ops
    import core.sim.graph
    monkeypatch.setattr(core.model.ops, "FLASH_BWD_RELATIVE_EFFICIENCY", 1.0)
    monkeypatch.setattr(core.sim.graph, "p2p_overlapped", lambda plan: False)
    store = None
    if session.cluster.gpu != "A100-SXM4-80GB":
        from core.store.profiles_gen import generate_store
        store = generate_store(session.cluster.gpu)
    r = simulate(session, store).report
    # the model's tensors (the figure before the process terms, workspaces, allocator reserve,
    # CUDA context and NCCL buffers, joined the total: those do not depend on cp either)
    tensors = max(sm.weights_bytes + sm.gradients_bytes + sm.optimizer_bytes + sm.activations_bytes
                  for sm in r.memory)
    assert (r.iteration_time_s, tensors, r.comm_s) == before
    assert r.cp_comm_s == 0.0


# --------------------------------------------------------------------------- long sequences

@pytest.mark.parametrize("seq, cp, fits", [
    (131072, 8, True), (131072, 16, True), (131072, 32, True),
    (1048576, 8, True), (1048576, 16, True), (1048576, 32, True), (1048576, 1, False),
])
def test_llama3_8b_at_long_sequences_runs_and_fits_or_is_reported(seq, cp, fits):
    """Llama 3 8B, t=8, selective recomputation, sequence parallelism, on H200 nodes of 8."""
    s = _session(seq=seq, cp=cp, t=8, B=2, zero_stage=1)
    r = simulate(s).report
    assert r.num_gpus == 8 * cp
    assert r.fits_in_memory is fits
    if not fits:
        assert any("does not fit" in w for w in r.warnings)
    assert r.iteration_time_s > 0 and 0 < r.mfu < 1


def test_unfused_attention_at_a_million_tokens_is_reported_as_not_fitting():
    """Without FlashAttention the (s, s) scores of one layer alone are 5*a*s^2*b/t bytes:
    about 20 TiB at s=2^20 (Korthikanti et al. 2022): reported, never hidden."""
    s = _session(seq=1048576, cp=1, t=8, B=1, recompute="none")
    s.model.attention_kernel = "unfused"
    r = simulate(s).report
    assert not r.fits_in_memory
    assert r.max_memory_per_gpu_bytes > 5 * 32 * 2**40 / 8


# --------------------------------------------------------------------------- sweep

def test_the_default_sweep_tries_the_cp_the_budget_allows_and_cp_is_swept_when_asked():
    s = _session(seq=16384, cp=1, t=1, B=8)
    kw = dict(num_gpus=16, tensor_parallel=[8], pipeline_parallel=[1], micro_batch_sizes=[1],
              schedules=["1f1b"], recompute=["selective"])
    default = enumerate_plans(s, SweepSpace(**kw))
    assert {pl.context_parallel for pl in default} == {1, 2}  # t*cp*d = 16 with t = 8
    held = enumerate_plans(s, SweepSpace(hold_session_values=True, **kw))
    assert {pl.context_parallel for pl in held} == {1}  # the session's
    both = enumerate_plans(s, SweepSpace(hold_session_values=True, num_gpus=16, tensor_parallel=[8], pipeline_parallel=[1],
                                         micro_batch_sizes=[1], schedules=["1f1b"],
                                         recompute=["selective"], context_parallel=[1, 2]))
    assert sorted((pl.context_parallel, pl.data_parallel) for pl in both) == [(1, 2), (2, 1)]
    assert all(pl.num_gpus == 16 for pl in both)
    errs = SweepSpace(max_gpus=8, context_parallel=[0]).errors()
    assert [e.field for e in errs] == ["sweep.context_parallel"]


def test_cli_sweep_tries_the_context_parallel_sizes_asked_for(tmp_path, capsys):
    import csv
    import json

    from core.cli import main
    from core.io.session import save_session

    path = tmp_path / "llama.json"
    save_session(_session(seq=16384, cp=1, t=8, B=8), path)
    out = tmp_path / "plans.csv"
    assert main(["sweep", str(path), "--json", "--gpus", "16", "--tensor-parallel", "8",
                 "--pipeline-parallel", "1", "--micro-batch-sizes", "1", "--schedules", "1f1b",
                 "--recompute", "selective", "--context-parallel", "1,2", "--zero-stages", "0",
                 "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["num_plans"] == 2
    with out.open() as fh:
        rows = sorted((r["context_parallel"], r["data_parallel"], r["num_gpus"])
                      for r in csv.DictReader(fh))
    assert rows == [("1", "2", "16"), ("2", "1", "16")]
    # a size the model cannot take is refused by name, with the option
    path2 = tmp_path / "gpt.json"
    save_session(Session(model=MODEL_PRESETS["GPT-3 1.3B"]), path2)
    assert main(["sweep", str(path2), "--context-parallel", "2"]) == 2
    assert "--context-parallel 2" in capsys.readouterr().err


def _exchanges(plans) -> dict:
    """{(t, cp): {(cp_comm_type, cp_a2a_size), ...}} of ``plans``."""
    out: dict = {}
    for pl in plans:
        out.setdefault((pl.tensor_parallel, pl.context_parallel), set()).add(
            (pl.cp_comm_type, pl.cp_a2a_size))
    return out


_SMALL_SPACE = dict(max_gpus=64, tensor_parallel=(1, 2, 4, 8), context_parallel=(1, 2, 4, 8),
                    pipeline_parallel=(1,), micro_batch_sizes=(1,), recompute=("full",),
                    zero_stages=(0,))


def test_the_sweep_tries_a2a_only_where_the_heads_split_over_cp():
    """Llama 3 8B (32 query heads, 8 query groups): the default tries p2p and a2a with cp > 1,
    a2a only where a tensor-parallel rank's 8/t query groups divide by cp; at cp = 1 the
    session's exchange (a2a here: no effect without context parallelism)."""
    s = _session(seq=131072, cp=1, t=1, B=8, gpu="H100-SXM5-80GB", cp_comm_type="a2a")
    got = _exchanges(enumerate_plans(s, SweepSpace(**_SMALL_SPACE)))
    assert set(got) == {(t, cp) for t in (1, 2, 4, 8) for cp in (1, 2, 4, 8) if t * cp <= 64}
    for (t, cp), kinds in got.items():
        if cp == 1:
            assert kinds == {("a2a", None)}
        elif (8 // t) % cp == 0:
            assert kinds == {("p2p", None), ("a2a", None)}
        else:
            assert kinds == {("p2p", None)}
    assert {k for k, v in got.items() if ("a2a", None) in v and k[1] > 1} == {
        (1, 2), (1, 4), (1, 8), (2, 2), (2, 4), (4, 2)}
    # held: the session's exchange everywhere (a2a, where its rules allow it)
    held = _exchanges(enumerate_plans(s, SweepSpace(**_SMALL_SPACE, hold_session_values=True)))
    assert set().union(*held.values()) == {("a2a", None)}
    assert (8, 2) not in held and (4, 4) not in held


def test_the_sweep_tries_the_named_exchanges_and_keeps_the_a2a_group_size():
    """a2a+p2p and the all-gathers only when named; a2a+p2p keeps the session's group size (2),
    so only at the cp it divides and is smaller than (4, 8); without one it is refused."""
    s = _session(seq=131072, cp=1, t=1, B=8, gpu="H100-SXM5-80GB", cp_comm_type="a2a+p2p",
                 cp_a2a_size=2)
    named = ("p2p", "a2a+p2p", "all_gather", "allgather")
    space = SweepSpace(**{**_SMALL_SPACE, "tensor_parallel": (1,)}, cp_comm_type=named)
    got = _exchanges(enumerate_plans(s, space))
    assert got[(1, 1)] == {("a2a+p2p", 2)}  # the session's, as it is
    assert got[(1, 2)] == {("p2p", None), ("all_gather", None), ("allgather", None)}
    for cp in (4, 8):
        assert got[(1, cp)] == {("p2p", None), ("a2a+p2p", 2), ("all_gather", None),
                                ("allgather", None)}
    # by default p2p, a2a and the session's own exchange (with its group size)
    default = _exchanges(enumerate_plans(s, dataclasses.replace(space, cp_comm_type=None)))
    assert default[(1, 4)] == {("p2p", None), ("a2a", None), ("a2a+p2p", 2)}
    assert default[(1, 2)] == {("p2p", None), ("a2a", None)}  # 2 is not above the group size
    tt = dataclasses.replace(s, plan=dataclasses.replace(s.plan, cp_comm_type="allgather",
                                                         cp_a2a_size=None))
    assert _exchanges(enumerate_plans(tt, dataclasses.replace(space, cp_comm_type=None)))[
        (1, 4)] == {("p2p", None), ("a2a", None), ("allgather", None)}  # torchtitan's
    s.plan.cp_a2a_size = None
    s.plan.cp_comm_type = "p2p"
    with pytest.raises(ConfigError) as exc:
        enumerate_plans(s, space)
    assert [e.field for e in exc.value.errors] == ["sweep.cp_comm_type"]
    assert [e.field for e in SweepSpace(max_gpus=8, cp_comm_type=("ring",)).errors()] == [
        "sweep.cp_comm_type"]
    assert SweepSpace.from_dict(space.to_dict()) == space


def test_cli_sweep_tries_the_cp_exchanges_asked_for(tmp_path, capsys):
    import csv
    import json

    from core.cli import main
    from core.io.session import save_session

    path = tmp_path / "llama.json"
    save_session(_session(seq=131072, cp=1, t=2, B=8, gpu="H100-SXM5-80GB"), path)
    out = tmp_path / "plans.csv"
    args = ["sweep", str(path), "--json", "--gpus", "16", "--tensor-parallel", "2",
            "--pipeline-parallel", "1", "--micro-batch-sizes", "1", "--schedules", "1f1b",
            "--recompute", "full", "--context-parallel", "2,4", "--zero-stages", "0",
            "--workers", "1", "--out", str(out)]

    def kinds() -> list:
        with out.open() as fh:
            return sorted({(r["context_parallel"], r["cp_comm_type"]) for r in csv.DictReader(fh)})

    assert main(args) == 0  # the default: p2p and a2a (t=2: 4 query groups over cp 2 or 4)
    both = json.loads(capsys.readouterr().out)
    assert kinds() == [("2", "a2a"), ("2", "p2p"), ("4", "a2a"), ("4", "p2p")]
    dims = {d["field"]: d for d in both["dimensions"]}
    assert dims["cp_comm_type"]["values"] == ["a2a", "p2p"]
    assert main(args + ["--cp-comm-types", "A2A"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert kinds() == [("2", "a2a"), ("4", "a2a")]
    assert 2 * one["num_plans"] == both["num_plans"]
    assert main(args + ["--cp-comm-types", "p2p,ring"]) == 2
    err = capsys.readouterr().err
    assert "--cp-comm-types" in err and all(k in err for k in ("p2p", "a2a+p2p", "all_gather"))


def test_megatron_script_round_trip_keeps_cp_and_the_world_size():
    from core.io.megatron.launch import read_launch
    from core.io.megatron.to_session import session_from_launch
    from core.io.megatron.export import export_script

    s = _session(seq=131072, cp=4, t=2, p=2, d=3, B=6)
    text = export_script(s)
    assert "--context-parallel-size 4" in text
    back = session_from_launch(read_launch(text)).session
    assert back.plan.context_parallel == 4 and back.plan.data_parallel == 3
    assert back.plan.num_gpus == s.plan.num_gpus == 48


def test_a_cp_group_straddling_a_node_boundary_is_priced_across_nodes():
    """GB200 NVL72 (72 GPUs a node), t=8, cp=2: groups of 16 ranks; 72 is no multiple of 16,
    so with more than one node some group straddles a boundary and its ring crosses nodes."""
    s = _session(seq=131072, cp=2, t=8, d=4, B=8, gpu="GB200-NVL72")
    s.cluster.gpus_per_node = 72
    check(s)
    store = session_profile(s)
    assert CommModel(store, s.plan, s.cluster).cp_ring_in_node()  # 64 GPUs: one node
    wide = dataclasses.replace(s.plan, data_parallel=8)  # 128 GPUs: ranks 64-79 straddle
    assert not CommModel(store, wide, s.cluster).cp_ring_in_node()
    even = dataclasses.replace(wide, tensor_parallel=4, context_parallel=2)  # 8 divides 72
    assert CommModel(store, even, s.cluster).cp_ring_in_node()


@pytest.mark.parametrize("plan", [
    dict(schedule="zb-h1", p=2, zero_stage=1),
    dict(schedule="interleaved", p=2, virtual_pipeline_stages=2, zero_stage=3,
         overlap_grad_reduce=True, overlap_param_gather=True),
    dict(schedule="1f1b", p=2, recompute="full", zero_stage=2, overlap_grad_reduce=True),
    dict(schedule="1f1b", p=2, cp_comm_type="a2a"),
    dict(schedule="zb-h1", p=2, cp_comm_type="a2a+p2p", cp_a2a_size=2),
    dict(schedule="interleaved", p=2, virtual_pipeline_stages=2, cp_comm_type="all_gather"),
])
def test_the_sweeps_fast_path_equals_the_op_graph_with_the_ring(plan):
    """The sweep's per-stage spans (side tasks of the ring included) give the op-level graph's
    iteration time, and every attention op's parts sum to the op (B part of a split backward
    too: the part outside the ring is never clipped at 0 here)."""
    from core.studies.sweep import run_sweep
    kw = dict(seq=32768, cp=4, t=2, d=2, B=8, gpu="H100-SXM5-80GB")
    kw.update(plan)
    s = _session(**kw)
    s.model.num_layers = 8
    s.cluster.inter_node_bandwidth_gbits_per_s = 200.0
    check(s)
    T = simulate(s).report.iteration_time_s
    space = SweepSpace(num_gpus=s.plan.num_gpus, tensor_parallel=[2], pipeline_parallel=[kw["p"]],
                       micro_batch_sizes=[1], schedules=[s.plan.schedule],
                       virtual_pipeline_stages=[2], recompute=[s.plan.recompute],
                       sequence_parallel=[True], zero_stages=[s.plan.zero_stage],
                       context_parallel=[4])
    res = run_sweep(s, space)
    i = res.index_of(s.plan)
    assert i is not None and res.iteration_time_s[i] == pytest.approx(T, rel=1e-9)
    times = stage_times(s, session_profile(s)).op_times_s
    from core.sim.op_times import weight_gradient_share
    b_part = times["attention_bwd"] * (1 - weight_gradient_share("attention_bwd", s))
    assert b_part - times["attention_core_bwd"] > 0


@pytest.mark.parametrize("seq", [2048, 32768])
def test_causal_model_flops_close_form(seq):
    """GPT-3 175B: Eq. 3 is 72 B s L h^2 (1 + s/(6h) + V'/(12 L h)); counting only the causal
    half of the attention core (Megatron-Core 0.19) halves the s/(6h) term."""
    m = dataclasses.replace(MODEL_PRESETS["GPT-3 175B"], seq_length=seq)
    pl = ParallelPlan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                      micro_batch_size=1, global_batch_size=4, recompute="none")
    B, s, L, h = 4, seq, m.num_layers, m.hidden_size
    V = padded_vocab_size(m.vocab_size, 8)
    eq3 = 72 * B * s * L * h**2 * (1 + s / (6 * h) + V / (12 * L * h))
    causal = 72 * B * s * L * h**2 * (1 + s / (12 * h) + V / (12 * L * h))
    assert model_math.model_flops_per_iteration(m, pl) == pytest.approx(eq3, rel=1e-12)
    assert model_math.causal_model_flops_per_iteration(m, pl) == pytest.approx(causal, rel=1e-12)


def test_long_sequence_report_gives_the_causal_mfu():
    """A 1M-token Llama 3 8B plan (cp 64): Eq. 3's MFU credits the masked half of the core
    (most of the FLOPs at this length); the causal MFU divides the FLOPs the GPUs run, and
    without recomputation equals the HFU (which counts the same causal core)."""
    m = dataclasses.replace(LLAMA3_8B, seq_length=1 << 20)
    s = Session(model=m, plan=ParallelPlan(tensor_parallel=2, pipeline_parallel=1,
                                           data_parallel=1, context_parallel=64,
                                           micro_batch_size=1, global_batch_size=1,
                                           recompute="none", sequence_parallel=True,
                                           zero_stage=1),
                cluster=ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    r = simulate(s, session_profile(s)).report
    ratio = (model_math.causal_model_flops_per_iteration(m, s.plan)
             / model_math.model_flops_per_iteration(m, s.plan))
    assert ratio < 0.6  # the masked half of the core is over 40 % of Eq. 3 at 1M tokens
    assert r.mfu_causal == pytest.approx(r.mfu * ratio, rel=1e-12)
    assert r.mfu_causal == pytest.approx(r.hfu, rel=1e-9)


# --------------------------------------------------------------------------- all-to-all exchanges

def test_a2a_buffers_are_the_closed_form():
    """Megatron-Core's --cp-comm-type a2a (Ulysses): before the core Q, K and V of the rank's
    s/cp tokens (a/t + 2 g/t heads of kv_channels), after it the output (a/t heads); Llama 3
    8B at s = 65536, cp = 8, t = 2, b = 1: 8192 tokens x 128 channels x 2 bytes x 24 and x 16
    heads. No all-to-all for the ring or the all-gather."""
    s = _session(seq=65536, cp=8, t=2, cp_comm_type="a2a")
    tok = 8192 * 128 * 2
    assert model_math.cp_a2a_size(s.plan) == 8
    assert model_math.cp_a2a_bytes(s.model, s.plan) == (tok * (16 + 2 * 4), tok * 16)
    h = dataclasses.replace(s.plan, cp_comm_type="a2a+p2p", cp_a2a_size=2)
    assert model_math.cp_a2a_size(h) == 2
    assert model_math.cp_a2a_bytes(s.model, h) == model_math.cp_a2a_bytes(s.model, s.plan)
    for kind in ("p2p", "allgather"):
        other = dataclasses.replace(s.plan, cp_comm_type=kind)
        assert model_math.cp_a2a_size(other) == 1
        assert model_math.cp_a2a_bytes(s.model, other) == (0.0, 0.0)


@pytest.mark.parametrize("kind, size, steps", [("a2a", None, 1), ("a2a+p2p", 2, 4),
                                               ("a2a+p2p", 4, 2)])
def test_a2a_core_is_the_rings_flops_on_cpa_times_the_tokens_for_a_cpath_of_the_heads(
        kind, size, steps):
    """The all-to-all turns the sequence split into a head split: the core runs in cp/cpa
    ring steps of a causal (cpa * s/cp)^2 problem on 1/cpa of the heads (one kernel for a2a),
    the same FLOPs as the ring's cp steps; the token-wise ops are the ring's."""
    S, cp = 65536, 8
    ring = op_key(_session(seq=S, cp=cp, t=2))
    a2a = op_key(_session(seq=S, cp=cp, t=2, cp_comm_type=kind, cp_a2a_size=size))
    cpa = cp // steps
    assert a2a["cpa"] == cpa and ring["cpa"] == 1
    for core in ("attention_core_fwd", "attention_core_bwd"):
        assert _flops(core, a2a) == pytest.approx(_flops(core, ring), rel=1e-12)
        gemms = [k for k in op_kernels(core, a2a) if k.is_gemm]
        assert len(gemms) == steps
        assert all((k.m, k.n, k.batch) == (cpa * S // cp, cpa * S // cp, 16 // cpa)
                   for k in gemms)
    for op in ("mlp_fwd", "mlp_bwd", "output_fwd"):
        assert op_kernels(op, a2a) == op_kernels(op, ring)


def test_a2a_exchange_is_exposed_before_and_after_every_core():
    """Nothing of the all-to-alls is hidden: per layer and micro-batch the forward and the
    backward each wait for the all-to-all of Q, K, V and the one of the output (CommModel's
    all-to-all over the cp ranks, t apart: in one node at t*cp = 8); the report's exchange is
    L * m * (forward + backward) without recomputation."""
    s = _session(seq=65536, cp=4, t=2, B=2, gpu="H100-SXM5-80GB", cp_comm_type="a2a",
                 recompute="none")
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    before, after = model_math.cp_a2a_bytes(s.model, s.plan)
    one = comm.cp_all_to_all(before) + comm.cp_all_to_all(after)
    assert comm.cp_all_to_all(before) == pytest.approx(
        comm.collective_overhead_s + comm.intra("all_to_all", 4, before), rel=1e-12)
    times = stage_times(s, store).op_times_s
    assert times["cp_fwd_hidden"] == times["cp_bwd_hidden"] == 0.0
    assert times["cp_fwd_exposed"] == pytest.approx(one, rel=1e-12)
    assert times["cp_bwd_exposed"] == pytest.approx(one, rel=1e-12)
    r = simulate(s).report
    assert r.cp_comm_s == pytest.approx(s.model.num_layers * s.plan.num_microbatches * 2 * one,
                                        rel=1e-9)
    total = r.compute_s + r.comm_s + r.pp_comm_s + r.cp_comm_s + r.bubble_s + r.imbalance_s
    assert total == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_a2a_p2p_adds_the_all_to_all_to_a_ring_of_cp_over_cpa_steps():
    """a2a+p2p with groups of 2 at cp = 8: the ring's part is the ring of 4 steps with the
    same K/V block (cpa times the tokens, 1/cpa of the K/V heads), plus the exposed
    all-to-alls over the group of 2."""
    from core.sim.stage_comm import _cp_ring_times
    s = _session(seq=65536, cp=8, t=1, d=1, B=1, gpu="H100-SXM5-80GB", cp_comm_type="a2a+p2p",
                 cp_a2a_size=2, recompute="none", sequence_parallel=False)
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    times = stage_times(s, store).op_times_s
    blk = model_math.cp_kv_block_bytes(s.model, s.plan)
    ring = _cp_ring_times(4, times["attention_core_fwd"], times["attention_core_bwd"],
                          comm.cp_send_recv(blk), comm.cp_send_recv(2 * blk))
    a2a = sum(comm.cp_all_to_all(n) for n in model_math.cp_a2a_bytes(s.model, s.plan))
    assert comm.cp_all_to_all(1e6) == pytest.approx(
        comm.collective_overhead_s + comm.intra("all_to_all", 2, 1e6), rel=1e-12)
    assert times["cp_fwd_hidden"] == pytest.approx(ring["cp_fwd_hidden"], rel=1e-12)
    assert times["cp_fwd_exposed"] == pytest.approx(ring["cp_fwd_exposed"] + a2a, rel=1e-12)
    assert times["cp_bwd_exposed"] == pytest.approx(ring["cp_bwd_exposed"] + a2a, rel=1e-12)


@pytest.mark.parametrize("change, field, words", [
    (dict(cp_comm_type="a2a", context_parallel=16, data_parallel=1), "plan.cp_comm_type",
     "K/V heads (query groups) (8) over 16 ranks"),
    (dict(cp_comm_type="a2a", tensor_parallel=4), "plan.cp_comm_type",
     "K/V heads (query groups) (2) over 8 ranks"),
    (dict(cp_comm_type="a2a+p2p"), "plan.cp_a2a_size", "needs cp_a2a_size"),
    (dict(cp_comm_type="a2a+p2p", cp_a2a_size=3), "plan.cp_a2a_size", "must divide"),
    (dict(cp_comm_type="a2a+p2p", cp_a2a_size=8), "plan.cp_a2a_size", "smaller than it"),
    (dict(cp_comm_type="p2p", cp_a2a_size=2), "plan.cp_a2a_size", "leave it empty"),
])
def test_a2a_rules_name_the_field(change, field, words):
    s = _session(seq=65536, cp=8, t=1, **{"sequence_parallel": False, **change})
    errs = [e for e in validate(s) if e.field == field]
    assert errs and words in errs[0].message, [e.message for e in validate(s)]


def test_megatron_round_trip_of_the_a2a_exchanges():
    from core.io.megatron.from_session import export_arguments
    from core.io.megatron.launch import read_launch
    from core.io.megatron.to_session import session_from_launch
    for kind, size in (("a2a", None), ("a2a+p2p", 2)):
        s = _session(seq=65536, cp=8, t=1, d=2, B=4, sequence_parallel=False, cp_comm_type=kind,
                     cp_a2a_size=size)
        check(s)
        args = export_arguments(s)
        text = " ".join(args)
        assert f"--cp-comm-type {kind}" in text
        assert ("--hierarchical-context-parallel-sizes 2 4" in text) == (size is not None)
        back = session_from_launch(read_launch(text, "x.sh"), num_gpus=16).session.plan
        assert (back.cp_comm_type, back.cp_a2a_size, back.context_parallel) == (kind, size, 8)


# --------------------------------------------------------------------------- all_gather

def test_all_gather_core_is_the_rings_flops_in_two_chunk_kernels():
    """Megatron-Core's all-gather exchange (TE's AttnFuncWithCPAndKVAllGather): the rank's two
    chunks of s/(2cp) queries each attend to their K/V prefix in one kernel, as many pairs as the
    ring's cp causal steps (cp * (s/cp)^2 / 2 in all), plus the gathered K/V's reorder
    (read and write 2 (s) g/t kv elements of K and V) and the output's copy; the backward
    adds the gradients' zeroing, accumulation and reorder. The token-wise ops are the ring's."""
    S, cp = 65536, 8
    ring = op_key(_session(seq=S, cp=cp, t=2))
    ag = op_key(_session(seq=S, cp=cp, t=2, cp_comm_type="all_gather"))
    assert (ag["cpg"], ring["cpg"], ag["cpa"]) == (1, 0, 1)
    heads, groups, dh, e = 32 // 2, 8 // 2, 128, 2
    kv_all = e * S * dh * 2 * groups  # the gathered K and V of the whole sequence, bytes
    for core in ("attention_core_fwd", "attention_core_bwd"):
        assert _flops(core, ag) == pytest.approx(_flops(core, ring), rel=1e-12)
        gemms = [k for k in op_kernels(core, ag) if k.is_gemm]
        assert [(k.m, k.n, k.k, k.batch) for k in gemms] == [(S // cp // 2, S // 2, dh, heads)] * 2
    fwd_mem = sum(k.bytes for k in op_kernels("attention_core_fwd", ag) if not k.is_gemm)
    assert fwd_mem == pytest.approx(2 * kv_all + 2 * e * (S // cp) * dh * heads, rel=1e-12)
    bwd_mem = sum(k.bytes for k in op_kernels("attention_core_bwd", ag) if not k.is_gemm)
    assert bwd_mem == pytest.approx(7 * kv_all, rel=1e-12)
    for op in ("mlp_fwd", "mlp_bwd", "output_fwd"):
        assert op_kernels(op, ag) == op_kernels(op, ring)


def test_all_gather_exchange_is_exposed_gather_forward_gather_and_reduce_scatter_backward():
    """Nothing of it is hidden: per attention op the forward waits for the all-gather of the
    cp K/V blocks, the backward for the all-gather again and the reduce-scatter of the K/V
    gradients (CommModel's collectives over the cp ranks, t apart: one node at t*cp = 8); the
    report's exchange is L * m * (forward + backward) without recomputation."""
    s = _session(seq=65536, cp=4, t=2, B=2, gpu="H100-SXM5-80GB", cp_comm_type="all_gather",
                 recompute="none")
    check(s)
    store = session_profile(s)
    comm = CommModel(store, s.plan, s.cluster)
    full = 4 * model_math.cp_kv_block_bytes(s.model, s.plan)
    gather, scatter = comm.cp_all_gather(full), comm.cp_reduce_scatter(full)
    assert gather == pytest.approx(comm.collective_overhead_s + comm.intra("all_gather", 4, full),
                                   rel=1e-12)
    assert scatter == pytest.approx(
        comm.collective_overhead_s + comm.intra("reduce_scatter", 4, full), rel=1e-12)
    times = stage_times(s, store).op_times_s
    assert times["cp_fwd_hidden"] == times["cp_bwd_hidden"] == 0.0
    assert times["cp_fwd_exposed"] == pytest.approx(gather, rel=1e-12)
    assert times["cp_bwd_exposed"] == pytest.approx(gather + scatter, rel=1e-12)
    r = simulate(s).report
    assert r.cp_comm_s == pytest.approx(
        s.model.num_layers * s.plan.num_microbatches * (2 * gather + scatter), rel=1e-9)
    total = r.compute_s + r.comm_s + r.pp_comm_s + r.cp_comm_s + r.bubble_s + r.imbalance_s
    assert total == pytest.approx(r.iteration_time_s, rel=1e-9)


def test_an_unknown_exchange_is_refused_saying_what_each_value_is():
    """allgather and all_gather are a letter apart: the refusal of another spelling says which
    is PyTorch's and which Transformer Engine's (tester)."""
    s = _session(seq=65536, cp=4, t=2, cp_comm_type="all-gather")
    (err,) = [e for e in validate(s) if e.field == "plan.cp_comm_type"]
    assert ("allgather (PyTorch's, overlapped)" in err.message
            and "all_gather (Megatron-Core's / Transformer Engine's, not overlapped)" in err.message)


def test_megatron_round_trip_of_the_all_gather_exchange():
    """plan.cp_comm_type all_gather exports as --cp-comm-type all_gather (Transformer Engine's
    value, which Megatron-Core passes on) and reads back; PyTorch's allgather has no Megatron
    argument."""
    from core.io.megatron.arguments import MegatronArgsError
    from core.io.megatron.from_session import export_arguments
    from core.io.megatron.launch import read_launch
    from core.io.megatron.to_session import session_from_launch
    s = _session(seq=65536, cp=8, t=1, d=2, B=4, sequence_parallel=False, cp_comm_type="all_gather")
    check(s)
    text = " ".join(export_arguments(s))
    assert "--cp-comm-type all_gather" in text
    back = session_from_launch(read_launch(text, "x.sh"), num_gpus=16).session.plan
    assert (back.cp_comm_type, back.context_parallel) == ("all_gather", 8)
    with pytest.raises(MegatronArgsError, match="no Megatron-LM argument"):
        export_arguments(dataclasses.replace(s, plan=dataclasses.replace(
            s.plan, cp_comm_type="allgather")))


def test_trace_names_the_cp_exchange_and_its_lane_for_every_exchange(tmp_path):
    """The Perfetto trace names the exchange's tasks cp_exchange (a ring, an all-gather or an
    all-to-all) on a "CP exchange" thread."""
    import json
    from core.io.trace import trace_events
    from core.sim.simulate import simulate
    for kind in ("p2p", "a2a", "all_gather"):
        res = simulate(_session(seq=65536, cp=4, t=2, B=2, gpu="H100-SXM5-80GB", cp_comm_type=kind))
        trace = trace_events(res.graph, res.schedule)
        names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
        threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
        assert "cp_exchange" in names and "cp_p2p" not in names and "CP exchange" in threads
        json.dumps(trace)


def test_cli_sweep_gives_the_causal_mfu_factor_at_long_sequences(tmp_path, capsys):
    """A 64k-token sweep says its MFU column is Eq. 3's and gives the causal factor (the ratio
    of the model FLOPs counts, the fastest plan's causal MFU); a 2k one does not."""
    from core.cli import main
    from core.model.counts import causal_model_flops_per_iteration, model_flops_per_iteration
    from core.io.session import save_session
    for seq, said in ((65536, True), (2048, False)):
        s = _session(seq=seq, cp=2, t=8, B=8, cp_comm_type="a2a")
        s.model.num_layers = 4
        path = tmp_path / f"s{seq}.json"
        save_session(s, path)
        assert main(["sweep", str(path), "--gpus", "16", "--tensor-parallel", "8",
                     "--pipeline-parallel", "1", "--micro-batch-sizes", "1", "--schedules", "1f1b",
                     "--recompute", "selective", "--context-parallel", "1,2"]) == 0
        out = capsys.readouterr().out
        ratio = causal_model_flops_per_iteration(s.model, s.plan) / model_flops_per_iteration(s.model, s.plan)
        assert ("MFU: Narayanan et al.'s Eq. 3" in out) is said
        if said:
            assert f"is {ratio:.2f} x that" in out


def test_an_exchange_no_plan_can_use_is_named():
    """The breaker's cases: a2a asked at t = 2, cp = 8 (4 query groups per rank do not divide
    by 8): with p2p beside it a2a is listed as unused; alone the "no valid plan" error names
    the all-to-all rules instead of saying nothing more."""
    from core.studies.sweep import run_sweep
    from core.studies.sweep.explain import no_plan_errors, unused_values
    s = _session(t=2, cp=8, d=1, B=16, gpu="H100-SXM5-80GB")
    kw = dict(num_gpus=16, tensor_parallel=(2,), pipeline_parallel=(1,), context_parallel=(8,),
              micro_batch_sizes=(1,), recompute=("full",), schedules=("1f1b",),
              zero_stages=(1,))
    both = SweepSpace(**kw, cp_comm_type=("p2p", "a2a"))
    res = run_sweep(s, both, workers=1)
    assert {pl.cp_comm_type for pl in res.plans} == {"p2p"}
    unused = unused_values(s, both, res)
    assert [e.field for e in unused] == ["--cp-comm-types a2a"]
    alone = SweepSpace(**kw, cp_comm_type=("a2a",))
    assert not enumerate_plans(s, alone)
    errs = no_plan_errors(s, alone)
    assert errs[-1].field == "--cp-comm-types a2a" and "divisible by cp" in errs[-1].message


def test_held_exchange_says_it_is_the_sessions():
    """hold_session_values: the exchange (and the other held fields) are the session's, said
    so, not the default's text (the breaker: "default: p2p and a2a ..." for a held a2a)."""
    from core.studies.sweep import run_sweep
    s = _session(t=2, cp=4, d=1, B=16, gpu="H100-SXM5-80GB", cp_comm_type="a2a")
    r = run_sweep(s, SweepSpace(num_gpus=8, tensor_parallel=(2,), pipeline_parallel=(1,),
                                micro_batch_sizes=(1,), recompute=("full",), schedules=("1f1b",),
                                hold_session_values=True), workers=1)
    dims = {d["field"]: d for d in r.dimensions}
    assert dims["cp_comm_type"]["values"] == ["a2a"]
    for name in ("cp_comm_type", "zero_stage", "sequence_parallel"):
        assert dims[name]["why"] == "the session's value (held: hold_session_values)", name
