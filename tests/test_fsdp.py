"""Data-parallel sharding and recomputation features of published FSDP runs: hybrid sharding
(plan.data_parallel_shard_size, HSDP), torchtitan's per-op selective activation checkpointing
(plan.recompute = "selective_op") and the FP8 parameter all-gather (plan.fp8_param_gather)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.model import model_math as mm
from core.sim.comm import INTER_NODE_LATENCY_S, CommModel
from core.plan.presets import MODEL_PRESETS
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.parallel import ParallelPlan, zero_replicas, zero_shard_size
from core.plan.session import Session
from core.plan.rules import validate
from core.plan.model_config import padded_vocab_size
from core.sim.stages import _data_parallel, stage_times
from core.sim.op_times import lookup_op_times
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.megatron.to_session import import_file
from core.io.megatron.export import export_script
from core.model.ops import device_key, kernel_arrays, kernel_peak_flops, kernel_times
from core.store.profiles_gen import generate_store
from core.sim.simulate import simulate

A100, H100 = "A100-SXM4-80GB", "H100-SXM5-80GB"
_STORES: dict = {}


def store(kind: str = A100):
    """The analytic store of ``kind`` (the generator's, at the spec's efficiencies)."""
    if kind not in _STORES:
        _STORES[kind] = generate_store(kind)
    return _STORES[kind]


def llama(**plan) -> Session:
    """Llama 2 7B at s=4096 (fms-fsdp's runs): FSDP over d=32, 8 GPUs per node, 400 Gb/s."""
    model = dataclasses.replace(MODEL_PRESETS["Llama 2 7B"], seq_length=4096)
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=32, micro_batch_size=1,
                global_batch_size=64, schedule="1f1b", recompute="none", precision="bf16",
                zero_stage=3)
    return Session(model, ParallelPlan(**{**base, **plan}),
                   ClusterConfig(A100, 8, intra_node_bandwidth_gbytes_per_s=200.0,
                                 inter_node_bandwidth_gbits_per_s=400.0), CostConfig())


# --------------------------------------------------------------------------- HSDP

def _ring(cm: CommModel, kind: str, n: int, nbytes: float) -> float:
    """Closed form of one intra-node ring collective with the cluster's NVLink bandwidth."""
    steps = {"all_gather": n - 1, "reduce_scatter": n - 1, "all_reduce": 2 * (n - 1)}[kind]
    factor = {"all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_reduce": 2 * (n - 1) / n}[kind]
    alpha = cm.store.ring_model(kind)[0]
    return alpha * steps + nbytes * factor / (cm.cluster.intra_node_bandwidth_gbytes_per_s * 1e9)


def test_hsdp_collectives_closed_form_inside_a_node():
    """d=32, t=1, shard size 8 (one node): the all-gather runs among the node's 8 GPUs only; the
    reduce-scatter too, then each GPU all-reduces its B/8 shard over the 4 replicas, one per
    node, at its share of the node's network bandwidth (ring: 2(R-1) steps, 2(R-1)/R of it)."""
    s = llama(data_parallel_shard_size=8)
    assert (zero_shard_size(s.plan), zero_replicas(s.plan)) == (8, 4)
    cm = CommModel(store(), s.plan, s.cluster)
    ov, B = cm.collective_overhead_s, 64e6
    gpu_bw = 400e9 / 8 / 8 * cm.inter_node_efficiency
    assert cm.dp_collective("all_gather", B) == pytest.approx(ov + _ring(cm, "all_gather", 8, B))
    inter = 2 * 3 * INTER_NODE_LATENCY_S + 2 * 3 / 4 * (B / 8) / gpu_bw
    assert cm.dp_collective("reduce_scatter", B) == pytest.approx(
        ov + _ring(cm, "reduce_scatter", 8, B) + ov + inter)
    # without hybrid sharding the all-gather spans the 4 nodes (a ring over nodes of B/8)
    full = CommModel(store(), llama().plan, s.cluster)
    assert full.dp_collective("all_gather", B) == pytest.approx(
        ov + _ring(cm, "all_gather", 8, B) + 3 * INTER_NODE_LATENCY_S + 3 / 4 * (B / 8) / gpu_bw)
    # an all-reduce (unsharded gradients) still spans every data-parallel rank
    assert cm.dp_collective("all_reduce", B) == full.dp_collective("all_reduce", B)


def test_hsdp_shard_group_larger_than_a_node_spans_nodes_by_rank_placement():
    """t=2, shard size 8: the 8 ranks tp + 2j fill 16 GPUs, 4 per node over 2 nodes; the 2
    replicas sit 16 GPUs apart, one per node."""
    s = llama(tensor_parallel=2, data_parallel=16, data_parallel_shard_size=8)
    cm = CommModel(store(), s.plan, s.cluster)
    ov, B = cm.collective_overhead_s, 32e6
    gpu_bw = 400e9 / 8 / 8 * cm.inter_node_efficiency
    ag = ov + _ring(cm, "all_gather", 4, B) + 1 * INTER_NODE_LATENCY_S + 1 / 2 * (B / 4) / gpu_bw
    assert cm.dp_collective("all_gather", B) == pytest.approx(ag)
    rs = ov + _ring(cm, "reduce_scatter", 4, B) + INTER_NODE_LATENCY_S + 1 / 2 * (B / 4) / gpu_bw
    ar = ov + 2 * INTER_NODE_LATENCY_S + 1.0 * (B / 8) / gpu_bw
    assert cm.dp_collective("reduce_scatter", B) == pytest.approx(rs + ar)


def test_hsdp_memory_per_gpu_divides_by_the_shard_size():
    """ZeRO-3 with shard size 8 of d=32: weights, gradients and optimizer state per GPU are the
    stage's parameters times (2 + 4 + 12)/8 bytes (bf16 weights, fp32 main gradients, fp32
    master and moments), plus one gathered layer and its unsharded fp32 gradients (PyTorch FSDP
    ``BackwardPrefetch``: the peak holds the current set of gradients); as d=8 without hybrid
    sharding."""
    s = llama(data_parallel_shard_size=8)
    n = float(mm.params_per_gpu(s.model, s.plan)[0])
    w, g, o, _ = mm.stage_memory_arrays(s.model, s.plan)
    sharded, replicated = mm.family_of(s.model).layer_parameters(s.model)
    live = 2 if s.plan.overlap_param_gather else 1  # the next layer's weights prefetched
    assert w[0] == pytest.approx(n * 2 / 8 + (sharded + replicated) * 2 * live)
    assert (g[0], o[0]) == (pytest.approx(n * 4 / 8 + (sharded + replicated) * 4),
                            pytest.approx(n * 12 / 8))
    eight = mm.stage_memory_arrays(s.model, dataclasses.replace(
        s.plan, data_parallel=8, data_parallel_shard_size=None, global_batch_size=16))
    for a, b in zip((w, g, o), eight[:3]):
        assert a[0] == pytest.approx(b[0])
    # ZeRO-1: only the optimizer state shards, over the 8
    z1 = dataclasses.replace(s.plan, zero_stage=1)
    assert mm.bytes_per_parameter(z1) == (2, 4, 12 / 8)


def test_hsdp_moves_the_forward_all_gathers_into_the_node():
    """ZeRO-3's forward holds only the per-layer all-gathers (blocking here): with shard size 8
    they stay in the node, so each layer's forward is shorter by the all-gather difference; the
    optimizer steps over 1/8 of the parameters, not 1/32; a shard group of all d ranks is
    plain FSDP."""
    st = store()
    a, b = stage_times(llama(), st), stage_times(llama(data_parallel_shard_size=8), st)
    L = 32
    assert a.fwd_s[0, 0] - b.fwd_s[0, 0] == pytest.approx(
        L * (a.dp[0].layer_ag - b.dp[0].layer_ag) + a.dp[0].first_ag - b.dp[0].first_ag
        + a.dp[0].last_ag - b.dp[0].last_ag, rel=1e-9)
    assert b.dp[0].layer_ag < a.dp[0].layer_ag
    fsdp = simulate(llama(), st).report.iteration_time_s
    same = simulate(llama(data_parallel_shard_size=32), st).report.iteration_time_s
    assert same == fsdp


@pytest.mark.parametrize("plan, moe, words", [
    (dict(data_parallel_shard_size=5), False, "does not divide data_parallel=32"),
    (dict(data_parallel_shard_size=8, zero_stage=0), False, "needs a sharded optimizer"),
    (dict(data_parallel_shard_size=8), True, "mixture-of-experts model is not modelled"),
])
def test_hsdp_refusals_name_the_field(plan, moe, words):
    s = llama(**plan)
    if moe:
        s.model.num_experts, s.model.moe_top_k = 8, 2
    errs = [e for e in validate(s) if e.field == "plan.data_parallel_shard_size"]
    assert errs and words in errs[0].message


# --------------------------------------------------------------------------- per-op SAC

def test_selective_op_order_recomputes_every_second_matmul():
    assert [n for n, again in mm.selective_op_linears(True) if again] == ["k", "o", "w3"]
    assert [n for n, again in mm.selective_op_linears(False) if again] == ["k", "o", "w2"]


def _key(s: Session) -> dict:
    from core.sim.op_times import op_key
    return device_key(op_key(s), store(H100).peak_flops)


def test_selective_op_kernels_are_the_unsaved_ops():
    """Llama 3 8B (a=32, g=8, kv=128, f=14336), FP8 tensorwise on an H100: the attention part
    runs the norm, the casts and the scale each computes from its amax (not the amax, aten.max
    is saved; torchao's amax_to_scale is a clamp and a division), RoPE, the k projection
    (g kv columns) and o again; the MLP part the residual adds, the norm, the casts with their
    scales, w3 (f columns of the fused 2f fc1) and SwiGLU; never the flash attention, q, v, w1,
    w2."""
    s = llama(precision="fp8", recompute="selective_op")
    s.model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=4096)
    key = _key(s)
    T, h, f = 4096, 4096, 14336
    attn = mm.op_kernels("attention_sac_fwd", key)
    names = [k.name for k in attn]
    assert names == ["rmsnorm", "qkv_input_scale", "qkv_input_cast", "k", "rope",
                     "proj_input_scale", "proj_input_cast", "o"]
    gemms = {k.name: k for k in attn if k.is_gemm}
    assert gemms["k"].flops == 2 * T * h * 8 * 128 and gemms["k"].dtype == "fp8"
    assert gemms["o"].flops == 2 * T * 32 * 128 * h
    mlp = mm.op_kernels("mlp_sac_fwd", key)
    assert [k.name for k in mlp] == ["bias_dropout_add", "rmsnorm", "fc1_input_scale",
                                     "fc1_input_cast", "w3", "bias_swiglu", "fc2_input_scale",
                                     "fc2_input_cast", "bias_dropout_add"]
    assert sum(k.flops for k in mlp) == 2 * T * h * f
    # per token and layer, as the HFU count: k, o, w3
    assert mm.selective_op_flops_per_token(s.model) == 2 * h * 1024 + 2 * h * h + 2 * h * f


def test_selective_op_recompute_time_is_the_sum_of_its_kernels_and_adds_to_each_backward():
    """The recomputed op's time is the roofline sum of its kernels (max with the host time), each
    kernel timed as in the base op's table (the norms, casts, RoPE and o are the base op's own
    kernels); every layer's backward grows by exactly the two recomputed ops."""
    st = store(H100)
    s = llama(precision="fp8", recompute="selective_op", data_parallel=8, global_batch_size=8)
    s.model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=4096)
    key = _key(s)
    p = st.op_model

    def kernel_sum(kernels) -> float:
        t = kernel_times(*kernel_arrays(kernels), kernel_peak_flops(kernels, "fp8", st.peak_flops,
                                                                    "H100"),
                         st.memory_bandwidth_bytes_per_s, p, np.array([k.dtype for k in kernels]))
        return float(t.sum())

    base = {k.name: k for k in mm.op_kernels("attention_fwd", key)}
    k_proj = mm.fp8_gemm("k", 4096, 1024, 4096, "tensorwise")
    expected = kernel_sum([base["rmsnorm"], base["qkv_input_scale"], base["qkv_input_cast"],
                           k_proj, base["rope"], base["proj_input_scale"],
                           base["proj_input_cast"], dataclasses.replace(base["proj"], name="o")])
    times = lookup_op_times(s, st).times
    assert times["attention_sac_fwd"] == pytest.approx(expected, rel=1e-12)
    none = dataclasses.replace(s.plan, recompute="none")
    a, b = stage_times(s, st), stage_times(dataclasses.replace(s, plan=none), st)
    layers = s.model.num_layers
    assert a.bwd_s[0, 0] - b.bwd_s[0, 0] == pytest.approx(
        layers * (times["attention_sac_fwd"] + times["mlp_sac_fwd"]), rel=1e-9)
    assert a.fwd_s[0, 0] == b.fwd_s[0, 0]


def test_selective_op_activation_memory_is_what_the_policy_saves():
    """Per layer: the block input (h), q (a kv), v (g kv), the attention output (a kv) and its
    fp32 log-sum-exp (a), w1 (f) and w2 (h) per token, BF16 (also under FP8)."""
    s = llama(recompute="selective_op")
    m = s.model  # Llama 2 7B: h=4096, a=g=32, kv=128, f=11008
    per_token = 2 * (4096 + 4096 + 4096 + 4096 + 11008 + 4096) + 4 * 32
    assert mm.activation_bytes_per_layer(m, s.plan) == 4096 * per_token
    assert mm.activation_bytes_per_layer(m, s.plan) < mm.activation_bytes_per_layer(m, s.plan, "none")
    _, _, _, acts = mm.stage_memory_arrays(m, s.plan)
    V = padded_vocab_size(m.vocab_size, 1)
    # outside the blocks: the logits, the final norm's bf16 input and output (2 s h) and the
    # token embedding's int64 ids (8 s; no dropout)
    assert acts[0] == pytest.approx(32 * 4096 * per_token + 4096 * V * (2 + 4)
                                    + 2 * 4096 * 4096 * 2 + 8 * 4096)


@pytest.mark.parametrize("change, words", [
    (dict(tensor_parallel=2, data_parallel=16), "with tensor_parallel_size=2 needs sequence_parallel"),
    (dict(attention_kernel="unfused"), "needs model.attention_kernel = flash"),
])
def test_selective_op_refusals(change, words):
    plan = {k: v for k, v in change.items() if k != "attention_kernel"}
    s = llama(recompute="selective_op", **plan)
    if "attention_kernel" in change:
        s.model.attention_kernel = change["attention_kernel"]
    assert any(e.field == "plan.recompute" and words in e.message for e in validate(s))


def _sac_tp(**plan) -> Session:
    """Llama 3 8B at s=8192 on H100s with t=8, sequence-parallel (torchtitan's async TP
    benchmark), FSDP over d=4, per-op selective checkpointing."""
    base = dict(tensor_parallel=8, data_parallel=4, sequence_parallel=True,
                recompute="selective_op", global_batch_size=8)
    s = llama(**{**base, **plan})
    s.model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=8192)
    s.cluster.gpu = H100
    return s


def _tp_all_gather(s: Session, st) -> float:
    """One tensor-parallel all-gather of a layer's (b, s, h) BF16 activation."""
    nbytes = s.plan.micro_batch_size * s.model.seq_length * s.model.hidden_size * 2
    return CommModel(st, s.plan, s.cluster).tp_collective("all_gather", nbytes)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_selective_op_with_tensor_parallelism_gathers_again_in_the_backward(precision):
    """t=8 with sequence parallelism: each layer's backward grows by the two recomputed ops and
    the two all-gathers they run again (attention's and the MLP's inputs; the reduce-scatters
    are saved), each one tensor-parallel all-gather of a (b, s, h) activation; the forward is
    unchanged; the recomputed kernels are the t=1 ones over t (k: g kv/t columns)."""
    st = store(H100)
    s = _sac_tp(precision=precision)
    assert validate(s) == []
    none = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none"))
    a, b = stage_times(s, st), stage_times(none, st)
    times = lookup_op_times(s, st).times
    ag = _tp_all_gather(s, st)
    assert ag > 0 and "attention_sac_gemm" not in times  # no overlap: no GEMM to pipeline with
    assert a.bwd_s[0, 0] - b.bwd_s[0, 0] == pytest.approx(
        32 * (times["attention_sac_fwd"] + times["mlp_sac_fwd"] + 2 * ag), rel=1e-9)
    assert a.fwd_s[0, 0] == b.fwd_s[0, 0]
    k = [x for x in mm.op_kernels("attention_sac_fwd", _key(s)) if x.name == "k"]
    assert len(k) == 1 and k[0].flops == 2 * 8192 * 4096 * 8 * 128 / 8
    # the per-op graph: per layer and micro-batch (2 here) two more recompute tasks and two
    # more tensor-parallel collectives, within the size estimate
    from core.sim.pipeline_graph import K
    from core.sim.simulate import graph_size_estimate
    g, g0 = simulate(s).graph, simulate(none).graph
    assert g.num_tasks - g0.num_tasks == 32 * 2 * 4 and g.num_tasks <= graph_size_estimate(s)
    tp = int(K["tp_comm"])
    assert np.sum(g.kind == tp) - np.sum(g0.kind == tp) == 32 * 2 * 2


def test_selective_op_with_async_tp_pipelines_the_recomputed_all_gathers():
    """tp_comm_overlap (torchtitan's async TP): each recomputed all-gather is pipelined with the
    recomputed GEMM its output feeds (k for the attention's, w3 for the MLP's), as the forward
    ones with theirs (tp_overlap_split): only the exposed parts lengthen the backward."""
    from core.sim.op_times import tp_overlap_split
    st = store(H100)
    s = _sac_tp(tp_comm_overlap=True)
    assert validate(s) == []
    none = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none"))
    times = lookup_op_times(s, st).times
    key = _key(s)
    sac = {k.name: k for k in mm.op_kernels("attention_sac_fwd", key)}
    assert [k.name for k in mm.op_kernels("attention_sac_gemm", key)] == ["k"]
    assert mm.op_kernels("attention_sac_gemm", key)[0] == sac["k"]
    assert [k.name for k in mm.op_kernels("mlp_sac_gemm", key)] == ["w3"]
    ag = _tp_all_gather(s, st)
    split = [tp_overlap_split(ag, times[g], 8) for g in ("attention_sac_gemm", "mlp_sac_gemm")]
    exposed = [e for e, _ in split]
    assert 0 < exposed[0] < ag and 0 < exposed[1] < ag
    a, b = stage_times(s, st), stage_times(none, st)
    assert a.bwd_s[0, 0] - b.bwd_s[0, 0] == pytest.approx(
        32 * (times["attention_sac_fwd"] + times["mlp_sac_fwd"] + sum(exposed)), rel=1e-9)
    # the hidden parts run beside the recomputed GEMMs: the report's hidden TP time grows by
    # them, per layer and micro-batch (2 here)
    from core.sim.simulate import graph_size_estimate
    r, r0 = simulate(s, st), simulate(none, st)
    assert r.graph.num_tasks <= graph_size_estimate(s)
    assert r.report.tp_hidden_s - r0.report.tp_hidden_s == pytest.approx(
        2 * 32 * sum(h for _, h in split), rel=1e-9)
    # without the overlap the whole all-gathers are exposed
    plain = dataclasses.replace(s, plan=dataclasses.replace(s.plan, tp_comm_overlap=False))
    assert stage_times(plain, st).bwd_s[0, 0] > a.bwd_s[0, 0]


def test_selective_op_async_tp_with_a_plain_mlp_exposes_its_all_gather():
    """A GeLU MLP saves fc1 (w1) and recomputes fc2: no recomputed GEMM reads the MLP's
    gathered input, so its recomputed all-gather has nothing to hide under (0 s GEMM)."""
    s = _sac_tp(tp_comm_overlap=True)
    s.model = dataclasses.replace(s.model, activation="gelu")
    assert mm.op_kernels("mlp_sac_gemm", _key(s)) == []
    assert lookup_op_times(s, store(H100)).times["mlp_sac_gemm"] == 0.0


def test_selective_op_t1_looks_up_no_recomputed_gemm():
    """At t = 1 (and without the overlap) the lookups and times are those of before: no
    recomputed all-gather, no GEMM op for one."""
    s = llama(recompute="selective_op", tp_comm_overlap=False)
    assert not {"attention_sac_gemm", "mlp_sac_gemm"} & set(lookup_op_times(s, store()).times)


def test_selective_op_activation_memory_with_tensor_parallelism():
    """t=8, sequence-parallel (Llama 3 8B: h=4096, a=32, g=8, kv=128, f=14336): per token the
    block input h/t, q, v, the attention output (a kv/t, g kv/t, a kv/t), w1 (f/t), the two
    reduce-scatters' outputs (2h/t), w2's partial-sum output (h, full width before its
    reduce-scatter) in BF16, and the fp32 log-sum-exp (a/t)."""
    s = _sac_tp()
    h, a, g, kv, f, t = 4096, 32, 8, 128, 14336, 8
    per_token = 2 * ((h + a * kv + g * kv + a * kv + f + 2 * h) / t + h) + 4 * a / t
    assert mm.activation_bytes_per_layer(s.model, s.plan) == pytest.approx(8192 * per_token,
                                                                           rel=1e-15)
    # less than Megatron's no-recomputation layer with sequence parallelism, more than full's
    assert (mm.activation_bytes_per_layer(s.model, s.plan, "full")
            < mm.activation_bytes_per_layer(s.model, s.plan)
            < mm.activation_bytes_per_layer(s.model, s.plan, "none"))


# --------------------------------------------------------------------------- FP8 all-gather

def test_fp8_param_gather_halves_the_linear_weights_all_gather_bytes():
    """Per layer bucket: the linear weights (QKV, o, fc1, fc2) move in 1 byte instead of 2, the
    norms in 2; the first stage's embedding stays BF16."""
    s = llama(precision="fp8")
    s.cluster.gpu = H100

    def record(flag: bool) -> dict:
        out: list = []
        pl = dataclasses.replace(s.plan, fp8_param_gather=flag)
        _data_parallel(dataclasses.replace(s, plan=pl), 0,
                       lambda kind, nbytes: out.append((kind, nbytes)) or 0.0)
        return out

    bf16, fp8 = record(False), record(True)
    lin = mm.fp8_linear_params_per_layer(s.model, 1)
    h, f, kv = 4096, 11008, 4096
    assert lin == h * 3 * kv + kv * h + 3 * h * f
    layer = [nb for kind, nb in bf16 if kind == "all_gather"]
    layer8 = [nb for kind, nb in fp8 if kind == "all_gather"]
    assert layer[0] - layer8[0] == lin  # 2 bytes -> 1 byte per linear weight
    assert layer8[0] == (layer[0] / 2 - lin) * 2 + lin
    assert layer[1:] == layer8[1:]  # the embedding bucket
    assert [x for x in bf16 if x[0] != "all_gather"] == [x for x in fp8 if x[0] != "all_gather"]


def test_fp8_param_gather_memory():
    """ZeRO-1 (Megatron --fp8-param-gather): the linear weights' BF16 compute copy is gone (2
    bytes each less); ZeRO-3 (torchtitan): the gathered layer's linear weights in 1 byte."""
    for zero in (1, 3):
        s = llama(precision="fp8", zero_stage=zero)
        s.cluster.gpu = H100
        on = dataclasses.replace(s.plan, fp8_param_gather=True)
        w0 = mm.stage_memory_arrays(s.model, s.plan)[0][0]
        w1 = mm.stage_memory_arrays(s.model, on)[0][0]
        lin = mm.fp8_linear_params_per_layer(s.model, 1)
        less = 2 * lin * s.model.num_layers if zero == 1 else lin
        assert w0 - w1 == pytest.approx(less)


@pytest.mark.parametrize("plan, words", [
    (dict(precision="bf16", fp8_param_gather=True), "fp8_param_gather needs precision='fp8'"),
    (dict(precision="fp8", zero_stage=0, fp8_param_gather=True), "zero_stage >= 1"),
])
def test_fp8_param_gather_refusals(plan, words):
    s = llama(**plan)
    s.cluster.gpu = H100
    errs = [e for e in validate(s) if e.field == "plan.fp8_param_gather"]
    assert errs and words in errs[0].message


def test_defaults_are_unchanged():
    """The new fields at their defaults are the plan of before: no shard size, no FP8 gather."""
    pl = ParallelPlan()
    assert (pl.data_parallel_shard_size, pl.fp8_param_gather) == (None, False)
    assert zero_shard_size(pl) == pl.dp_cp_size and zero_replicas(pl) == 1


# --------------------------------------------------------------------------- Megatron-LM

@pytest.mark.parametrize("plan", [
    dict(zero_stage=1, data_parallel_shard_size=8),
    dict(zero_stage=1, data_parallel_shard_size=32),
    # zero_stage 3 with a shard size: Megatron-LM's FSDP2 has no hybrid sharding (refused at
    # export, tests/test_megatron_export.py)
    dict(zero_stage=1, data_parallel_shard_size=4, precision="fp8", fp8_param_gather=True),
    dict(zero_stage=1, precision="fp8", fp8_param_gather=True),
])
def test_megatron_round_trip(tmp_path, plan):
    s = llama(**plan)
    s.cluster = ClusterConfig(H100, 8)
    args = export_arguments(s)
    size = s.plan.data_parallel_shard_size
    if size:
        i = args.index("--num-distributed-optimizer-instances")
        assert int(args[i + 1]) == 32 // size
    assert ("--fp8-param-gather" in args) == s.plan.fp8_param_gather
    path = tmp_path / "run.sh"
    path.write_text(export_script(s))
    back = import_file(path, name=s.model.name).session
    assert back.plan == s.plan


def test_megatron_import_refuses_instances_not_dividing_d(tmp_path):
    s = llama(zero_stage=1, data_parallel_shard_size=8)
    s.cluster = ClusterConfig(H100, 8)
    text = export_script(s).replace("--num-distributed-optimizer-instances 4",
                                    "--num-distributed-optimizer-instances 5")
    path = tmp_path / "run.sh"
    path.write_text(text)
    with pytest.raises(MegatronArgsError, match="instances 5 does not divide the data-parallel"):
        import_file(path, name="x")


def test_megatron_export_refuses_selective_op():
    with pytest.raises(MegatronArgsError, match="selective_op"):
        export_arguments(llama(recompute="selective_op"))


def test_fp8_param_gather_after_the_optimizer_step():
    """ZeRO-1 without overlap: the updated parameters are all-gathered after the step, the
    stage's FP8 linear weights in 1 byte, the rest (embedding, output layer, norms) in 2."""
    s = llama(precision="fp8", zero_stage=1)
    s.cluster.gpu = H100
    st = store(H100)
    on = dataclasses.replace(s, plan=dataclasses.replace(s.plan, fp8_param_gather=True))
    n = float(mm.params_per_gpu(s.model, s.plan)[0])
    lin = float(mm.fp8_weights_per_gpu(s.model, s.plan)[0])
    assert lin == 32 * mm.fp8_linear_params_per_layer(s.model, 1)
    cm = CommModel(st, s.plan, s.cluster)
    assert stage_times(s, st).after_optimizer_s[0] == pytest.approx(
        cm.dp_collective("all_gather", n * 2))
    assert stage_times(on, st).after_optimizer_s[0] == pytest.approx(
        cm.dp_collective("all_gather", (n - lin) * 2 + lin))


def test_shared_cache_keeps_selective_op_apart():
    """A sweep's shared cache: the op times of a plan without per-op checkpointing lack the
    recomputed ops; a selective_op plan with the same op key looks its own up."""
    st, cache = store(), {}
    s = llama(recompute="selective_op")
    none = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="none"))
    stage_times(none, st, cache)
    assert stage_times(s, st, cache).bwd_s[0, 0] == stage_times(s, st).bwd_s[0, 0]


def test_selective_op_hardware_flops():
    """HFU counts the recomputed matmuls: per token and layer 2h(g kv) + 2(a kv)h + 2hf for
    Llama 2 7B (k, o, w3), over B*s tokens and L layers."""
    s = llama(recompute="selective_op")
    m, pl = s.model, s.plan
    extra = mm.hardware_flops_per_iteration(m, pl) - mm.model_flops_per_iteration(m, pl)
    h, f = 4096, 11008
    # less the masked half of the three attention cores (fwd + 2x bwd) Eq. 3 credits in full
    masked = 64 * 4096 * 3 * 32 * (4 * 4096 * h) / 2
    assert extra == pytest.approx(64 * 4096 * 32 * (2 * h * h + 2 * h * h + 2 * h * f) - masked,
                                  rel=1e-12)


def test_a_sweep_tries_per_op_checkpointing_when_asked():
    """selective_op is not among the default recomputation modes (Megatron's three) and is
    swept when named; its plans at t > 1 without sequence parallelism are refused, so only
    t = 1 plans carry it then; with sequence parallelism the t = 2 plans carry it too."""
    from core.plan.presets import MODEL_PRESETS
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.session import Session
    from core.studies.sweep import SweepSpace, enumerate_plans

    s = Session(MODEL_PRESETS["Llama 3 8B"],
                ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                             micro_batch_size=1, global_batch_size=16, recompute="selective_op",
                             zero_stage=3, precision="bf16"),
                ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8))
    space = SweepSpace(hold_session_values=True, num_gpus=8, tensor_parallel=[1, 2], pipeline_parallel=[1],
                       micro_batch_sizes=[1], schedules=["1f1b"])
    assert "selective_op" not in {p.recompute for p in enumerate_plans(s, space)}
    space = dataclasses.replace(space, recompute=["selective_op", "full"])
    got = {(p.tensor_parallel, p.recompute) for p in enumerate_plans(s, space)}
    assert got == {(1, "selective_op"), (1, "full"), (2, "full")}
    space = dataclasses.replace(space, sequence_parallel=[True])
    got = {(p.tensor_parallel, p.recompute) for p in enumerate_plans(s, space)}
    assert got == {(1, "selective_op"), (1, "full"), (2, "selective_op"), (2, "full")}
    assert not SweepSpace(num_gpus=8, recompute=["selective_op"]).errors()
    assert [e.field for e in SweepSpace(num_gpus=8, recompute=["op"]).errors()] == ["sweep.recompute"]


@pytest.mark.parametrize("precision, grad_reduce", [("bf16", "fp32"), ("bf16", "bf16"),
                                                    ("fp8", "fp32")])
def test_fsdp2_fp32_shards_hold_16_bytes_per_parameter(precision, grad_reduce):
    """torchtitan's FSDP2 (fully_shard with MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=fp32) over the fp32 model; torch 2.13 fsdp/_fully_shard/_fsdp_api.py: FSDP
    "keeps the high-precision sharded parameters in memory anyway ... does not require any
    extra memory to keep a high-precision copy of the parameters for the optimizer step";
    _fsdp_collectives.py casts the reduce-scattered gradient to the original dtype): fp32
    shards 4/d, fp32 gradient shards 4/d, Adam's moments 8/d: 16/d, not Megatron's 2 + 4 + 12 =
    18/d (the model showed 12 B/param/d of optimizer state beside separate bf16 weights). ZeRO
    0-2 and fp32 training hold the same bytes either way; so does a plan without the field."""
    d = 8
    base = ParallelPlan(data_parallel=d, global_batch_size=8, micro_batch_size=1,
                        zero_stage=3, precision=precision, grad_reduce_dtype=grad_reduce)
    fsdp2 = dataclasses.replace(base, fsdp_fp32_params=True)
    assert mm.bytes_per_parameter(fsdp2) == (4 / d, 4 / d, 8 / d)
    assert sum(mm.bytes_per_parameter(fsdp2)) * d == 16
    megatron = {"fp32": 18, "bf16": 20}[grad_reduce]  # 2 + g + (4 + 4 + 4 [+ 4 copy])
    assert sum(mm.bytes_per_parameter(base)) * d == pytest.approx(megatron)
    assert mm.grad_copy_bytes_per_parameter(fsdp2) == 0
    for zero in (0, 1, 2):
        a, b = (dataclasses.replace(p, zero_stage=zero) for p in (base, fsdp2))
        assert mm.bytes_per_parameter(a) == mm.bytes_per_parameter(b)
    fp32 = dataclasses.replace(fsdp2, precision="fp32")
    assert mm.bytes_per_parameter(fp32) == mm.bytes_per_parameter(
        dataclasses.replace(fp32, fsdp_fp32_params=False))
    # the stage's state: 2 bytes per local parameter less than Megatron's (the gathered bf16
    # units are the same), and the checkpoint fp32 weights and moments, 12 bytes
    model = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=2048)
    m_a, m_b = mm.stage_memory(model, base)[0], mm.stage_memory(model, fsdp2)[0]
    n = mm.params_per_gpu(model, base)[0]  # the model-parallel rank's, before ZeRO's 1/d
    state = lambda m: m.weights_bytes + m.gradients_bytes + m.optimizer_bytes  # noqa: E731
    # Megatron's fp32 copy of bf16 gradients lives only in the step, not at the peak: there
    # its 2 + 2 + 12 equals FSDP2's 4 + 4 + 8
    at_peak = {"fp32": 18, "bf16": 16}[grad_reduce]
    assert state(m_a) - state(m_b) == pytest.approx(n * (at_peak - 16) / d, rel=1e-9)
    assert m_a.activations_bytes == m_b.activations_bytes
    from core.sim.goodput import checkpoint_bytes_per_parameter
    assert checkpoint_bytes_per_parameter(fsdp2) == 12
    assert checkpoint_bytes_per_parameter(base) == 14


def test_fsdp2_fp32_shards_are_set_by_torchtitan_and_refused_by_the_megatron_export():
    """vtrain import torchtitan sets plan.fsdp_fp32_params where it applies FSDP; Megatron-LM's
    --use-torch-fsdp2 (bf16 shards beside fp32 main weights) does not run it: refused by name."""
    from pathlib import Path
    from core.io.torchtitan_import import read_torchtitan_config
    toml = Path(__file__).resolve().parent / "data" / "torchtitan" / "llama3_8b.toml"
    plan = read_torchtitan_config(toml, num_gpus=8).session.plan
    assert plan.fsdp_fp32_params and plan.zero_stage == 3
    with pytest.raises(MegatronArgsError, match="plan.fsdp_fp32_params"):
        export_arguments(Session(model=MODEL_PRESETS["Llama 3 8B"],
                                 plan=dataclasses.replace(plan, recompute="full")))
    export_arguments(Session(model=MODEL_PRESETS["Llama 3 8B"], plan=dataclasses.replace(
        plan, recompute="full", fsdp_fp32_params=False)))  # Megatron-LM's FSDP2: exported


def test_a_torchtitan_ddp_session_keeps_fsdp2s_fp32_shards_when_swept_to_zero_3(tmp_path, capsys):
    """torchtitan without FSDP (DDP: data_parallel_replicate_degree 8, shard 1) imports with
    plan.fsdp_fp32_params on, where it changes nothing (ZeRO 0: not in the label, greyed); a
    vtrain sweep over the ZeRO stages then counts its ZeRO-3 plans as torchtitan's FSDP2 (fp32
    shards, 16/d bytes per parameter), not Megatron-Core's 16-bit shards (18/d: every ZeRO-3
    plan was fsdp_fp32_params false, silently Megatron's memory for a torchtitan job)."""
    import csv
    from pathlib import Path

    from core.cli import main
    from core.io.torchtitan_import import load_toml, session_from_torchtitan
    from core.plan.parallel import fsdp_fp32_applies
    from core.plan.rules import inactive_fields
    toml = Path(__file__).resolve().parent / "data" / "torchtitan" / "llama3_8b.toml"
    raw = load_toml(toml)
    raw["parallelism"].update(data_parallel_replicate_degree=8, data_parallel_shard_degree=1)
    s = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB").session
    assert (s.plan.zero_stage, s.plan.precision, s.plan.fsdp_fp32_params) == (0, "bf16", True)
    assert not fsdp_fp32_applies(s.plan) and "fsdp_fp32" not in s.plan.label()
    assert "plan.fsdp_fp32_params" in inactive_fields(s)
    z3 = dataclasses.replace(s.plan, zero_stage=3)
    assert fsdp_fp32_applies(z3) and z3.label().endswith(" fsdp_fp32")
    assert "plan.fsdp_fp32_params" not in inactive_fields(dataclasses.replace(s, plan=z3))
    assert sum(mm.bytes_per_parameter(z3)) * 8 == 16
    # the Megatron export still takes the DDP session (the field changes nothing there)
    export_arguments(dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute="full")))
    out = tmp_path / "ddp.json"
    from core.io.session import save_session
    save_session(s, out)
    plans = tmp_path / "plans.csv"
    assert main(["sweep", str(out), "--cross-entropy-fusion", "off", "--recompute",
                 "selective_op", "--schedules", "1f1b", "--tp-comm-overlap", "n",
                 "--tensor-parallel", "1", "--pipeline-parallel", "1", "--context-parallel",
                 "1", "--workers", "1", "--out", str(plans)]) == 0
    capsys.readouterr()
    rows = list(csv.DictReader(plans.open()))
    assert "3" in {r["zero_stage"] for r in rows}
    assert {r["fsdp_fp32_params"] for r in rows if r["zero_stage"] == "3"} == {"True"}
