"""Plans of current Megatron-Core: sequence parallelism, selective and block recomputation, ZeRO
stages, overlapped data-parallel communication, gradient dtype, uneven pipelines, the plan
record, and the shared cases about them. Expected values are closed forms from the papers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from core.model import model_math
from core.model.wgrad_buffers import dummy_wgrad_bytes
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.layout import stage_layer_counts
from core.plan.model_config import ModelConfig
from core.plan.parallel import PLAN_FIELDS, ParallelPlan, plan_key
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.graph import build_graph
from core.sim.stages import stage_times
from core.sim.graph_types import KINDS, OPS
from core.store.profile_store import ProfileStore
from core.sim.report import StageMemory
from core.io.session import load_any
from core.sim.simulate import (memory_verdict, open_profile, profile_path, simulate, stage_memory,
                               tight_note)
from core.model.counts import num_parameters
from tests.conftest import case_file

GPT3 = MODEL_PRESETS["GPT-3 175B"]


def plan(**kw) -> ParallelPlan:
    base = dict(tensor_parallel=8, pipeline_parallel=16, data_parallel=4, micro_batch_size=1,
                global_batch_size=1536, schedule="1f1b", recompute="none", precision="bf16")
    return ParallelPlan(**{**base, **kw})


# --------------------------------------------------------------------------- shared cases

def test_case_bf16_memory_is_18_bytes_per_parameter():
    s = load_any(case_file("bf16_memory_1p3b.json"))
    mem = stage_memory(s)[0]
    n = num_parameters(s.model, s.plan.tensor_parallel)
    assert n == pytest.approx(1.316e9, rel=1e-3)
    # the gradients term also holds TE's placeholder weight gradients (one per weight shape,
    # tests/test_wgrad_buffers.py), which are no per-parameter state
    placeholders = float(dummy_wgrad_bytes(s.model, s.plan)[0])
    states = mem.weights_bytes + mem.gradients_bytes - placeholders + mem.optimizer_bytes
    # Megatron-LM: bf16 weights 2 + fp32 main gradients 4 + fp32 master weights 4 + Adam 8
    assert states == pytest.approx(18 * n, rel=1e-12)
    assert states / 1e9 == pytest.approx(23.7, abs=0.05)
    assert (mem.weights_bytes, mem.gradients_bytes - placeholders, mem.optimizer_bytes) == \
        pytest.approx((2 * n, 4 * n, 12 * n), rel=1e-12)


def test_case_bf16_gradient_all_reduce_moves_fp32():
    s = load_any(case_file("bf16_grad_allreduce_6p7b.json"))
    store = open_profile(profile_path(s))
    fp32 = float(stage_times(s, store).dp_comm_s[0])
    assert fp32 == pytest.approx(0.63, abs=0.01)
    res = simulate(s, store)
    dp = res.graph.kind == KINDS.index("dp_comm")
    assert res.graph.duration_s[dp].sum() == pytest.approx(fp32, rel=1e-12)
    # Megatron's option to reduce in bf16 halves the bytes (about 0.31 s here)
    s.plan.grad_reduce_dtype = "bf16"
    bf16 = float(stage_times(s, store).dp_comm_s[0])
    assert bf16 == pytest.approx(0.31, abs=0.01)
    assert bf16 < fp32 / 1.9


def test_case_model_flops_use_the_padded_vocabulary():
    s = load_any(case_file("padded_vocab_flops.json"))
    r = simulate(s).report
    per_sequence = r.model_flops_per_iteration / s.plan.global_batch_size
    # 72 s L h^2 (1 + s/(6h) + V'/(12 h L)) with V' = 51,200 (multiple of 128 * t = 1,024)
    h, L, seq, V = 512, 1, 128, 51200
    assert per_sequence == pytest.approx(72 * seq * L * h**2 * (1 + seq / (6 * h) + V / (12 * h * L)),
                                         rel=1e-12)
    assert per_sequence / 1e9 == pytest.approx(22.65, abs=0.005)


# --------------------------------------------------------------------------- memory

@pytest.mark.parametrize("sp, recompute, per_layer", [
    # Korthikanti et al. 2022, Table 2 (bytes per layer, 16-bit activations)
    (False, "none", lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    (True, "none", lambda s, b, h, a, t: s * b * h / t * (34 + 5 * a * s / h)),
    (False, "selective", lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    (True, "selective", lambda s, b, h, a, t: 34 * s * b * h / t),
])
def test_activation_memory_korthikanti_table_2(sp, recompute, per_layer):
    pl = plan(sequence_parallel=sp, recompute=recompute)
    mem = model_math.stage_memory(GPT3, pl)
    seq, b, h, a, t = 2048, 1, 12288, 96, 8
    # a middle stage: 6 layers, p - i micro-batches in flight under 1F1B
    for i in (3, 9):
        assert mem[i].activations_bytes == pytest.approx(per_layer(seq, b, h, a, t) * 6 * (16 - i),
                                                         rel=1e-12)


@pytest.mark.parametrize("schedule, losses", [("1f1b", 1), ("gpipe", 12)])
def test_last_stage_keeps_each_waiting_loss_softmax(schedule, losses):
    """The last stage adds the logits (e bytes) and the cross entropy's fp32 softmax (4 bytes)
    of each micro-batch whose loss awaits its backward (Megatron-Core
    VocabParallelCrossEntropy saves exp_logits): 1 under 1F1B, all m = 12 under GPipe; and
    the final norm's bf16 input and output of each, 2 s b h / t with sequence parallelism."""
    pl = plan(sequence_parallel=True, recompute="selective", schedule=schedule,
              global_batch_size=48)
    mem = model_math.stage_memory(GPT3, pl)
    seq, b, h, t = 2048, 1, 12288, 8
    V = 51200  # 50257 padded to a multiple of 128 * t
    in_flight = 1 if schedule == "1f1b" else 12
    want = (34 * seq * b * h / t * 6 * in_flight + seq * b * V / t * (2 + 4 * losses)
            + 2 * seq * b * h * 2 / t * losses)
    assert pl.num_microbatches == 12
    assert mem[-1].activations_bytes == pytest.approx(want, rel=1e-12)


def test_full_recomputation_memory_with_sequence_parallelism_and_block_method():
    seq, b, h, a, t = 2048, 1, 12288, 96, 8
    none_sp = seq * b * h / t * (34 + 5 * a * seq / h)
    full = model_math.stage_memory(GPT3, plan(sequence_parallel=True, recompute="full"))
    # the layer input of each layer (2sbh/t with sequence parallelism) plus one layer's working set
    assert full[4].activations_bytes == pytest.approx(2 * seq * b * h / t * 6 * 12 + none_sp, rel=1e-12)
    # block method: 2 of the 6 layers recomputed, the other 4 keep everything
    block = model_math.stage_memory(GPT3, plan(sequence_parallel=True, recompute="full",
                                               recompute_num_layers=2))
    assert block[4].activations_bytes == pytest.approx(
        (2 * 2 * seq * b * h / t + 4 * none_sp) * 12 + none_sp, rel=1e-12)


@pytest.mark.parametrize("precision, grads, w, g, k", [
    # Megatron-LM's table (distributed optimizer page): weights, gradients, optimizer state
    ("fp16", None, 2, 2, 16),    # 20 bytes; 4 + 16/d with the distributed optimizer
    ("bf16", None, 2, 4, 12),    # 18 bytes; 6 + 12/d
    ("fp32", None, 4, 4, 8),     # 16 bytes; 8 + 8/d
    ("bf16", "bf16", 2, 2, 16),  # gradients reduced in bf16: an fp32 copy in the optimizer
])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_bytes_per_parameter_per_zero_stage(precision, grads, w, g, k, zero):
    d = 8
    pl = plan(precision=precision, grad_reduce_dtype=grads, zero_stage=zero, data_parallel=d,
              global_batch_size=8 * 96)
    got = model_math.bytes_per_parameter(pl)
    # Rajbhandari et al. 2020, Sec. 5: stage 1 divides the optimizer state by d, 2 the gradients
    # too, 3 the parameters too
    assert got == pytest.approx((w / d if zero >= 3 else w, g / d if zero >= 2 else g,
                                 k / d if zero >= 1 else k), rel=1e-12)
    if zero == 0:
        assert sum(got) == {"fp16": 20, "bf16": 18 if grads is None else 20, "fp32": 16}[precision]
    if zero == 1 and grads is None:
        assert sum(got) == pytest.approx({"fp16": 4 + 16 / d, "bf16": 6 + 12 / d, "fp32": 8 + 8 / d}
                                         [precision])
    mem = model_math.stage_memory(GPT3, pl)[5]
    n = model_math.params_per_gpu(GPT3, pl)[5]
    gathered = gathered_grads = 0.0
    if zero == 3:  # one layer's parameters gathered at a time, and its unsharded gradients
        sharded, replicated = model_math.family_of(GPT3).layer_parameters(GPT3)
        gathered = (sharded / 8 + replicated) * w
        gathered_grads = (sharded / 8 + replicated) * (4 if grads is None and precision == "bf16"
                                                       else g)
    assert mem.weights_bytes == pytest.approx(n * got[0] + gathered, rel=1e-12)
    placeholders = float(dummy_wgrad_bytes(GPT3, pl)[5])  # none under ZeRO-3
    assert (placeholders == 0.0) == (zero == 3)
    # 16-bit gradients: their fp32 copy (4 bytes, 4/d under ZeRO) exists only in the optimizer
    # step, so the peak holds the larger of it and the activations
    copy = (4 / d if zero >= 1 else 4) if g == 2 else 0
    assert model_math.grad_copy_bytes_per_parameter(pl) == copy
    assert mem.gradients_bytes + mem.optimizer_bytes == pytest.approx(
        n * (got[1] + got[2]) + gathered_grads + placeholders
        - min(n * copy, mem.activations_bytes), rel=1e-12)
    if zero == 3:  # with the next layer's all-gather prefetched: two layers' weights gathered
        ov = model_math.stage_memory(GPT3, dataclasses.replace(pl, overlap_param_gather=True))[5]
        assert ov.weights_bytes - mem.weights_bytes == pytest.approx(gathered, rel=1e-12)
        assert ov.gradients_bytes == mem.gradients_bytes


def test_the_fit_reads_the_capacity_only_and_the_tight_note_the_margin():
    """memory_verdict, memory_verdict_arrays and memory_verdict_rows decide the fit from the
    capacity alone (they take no margin); the margin (cluster.memory_reserve_fraction) is
    tight_note's. Stage totals 10 and 81 GiB on an 80 GiB GPU: stage 1 does not fit; a plan
    whose stages need 10 and 20 GiB fits; 72.5 GiB fits, tight within a 10 % margin."""
    from core.sim.simulate import memory_verdict_arrays, memory_verdict_rows
    gib = 2**30
    cap = 80.0 * gib
    w, zero = np.array([10.0, 20.0]) * gib, np.zeros(2)
    a = np.array([0.0, 61.0]) * gib
    why = "does not fit: stage 1 needs 81.0 GiB per GPU, the GPU has 80.0 GiB"
    assert memory_verdict_arrays((w, zero, zero, a), cap) == (81.0 * gib, False, why)
    rows = tuple(np.stack([x, y]) for x, y in ((w, w), (zero, zero), (zero, zero), (a, zero)))
    need, fits, reasons = memory_verdict_rows(rows, cap)
    assert need.tolist() == [81.0 * gib, 20.0 * gib] and fits.tolist() == [False, True]
    assert reasons == [why, ""]
    inside = [StageMemory(0, 0.0, 0.0, 0.0, 72.5 * gib)]
    assert memory_verdict(inside, cap) == (72.5 * gib, True, "")
    assert tight_note(inside, cap, margin=0.1).startswith("tight: stage 0 needs 72.5 GiB")
    assert tight_note(inside, cap, margin=0.05) == ""


def test_capacity_decides_fits_and_the_reserve_only_tight():
    """Issue 27: the whole process is held against the whole capacity; the margin
    (cluster.memory_reserve_fraction) only makes a fit tight, with its warning."""
    cap = 80 * 2**30
    inside = [StageMemory(0, 0.0, 0.0, 0.0, 0.9 * cap + 1)]
    at_cap = [StageMemory(0, 0.0, 0.0, 0.0, float(cap))]
    above = [StageMemory(0, 0.0, 0.0, 0.0, cap + 1.0)]
    assert memory_verdict(inside, cap) == (0.9 * cap + 1, True, "")
    assert memory_verdict(at_cap, cap)[1]
    need, fits, reason = memory_verdict(above, cap)
    # one byte over: marked above, never "needs 80.0 GiB per GPU, the GPU has 80.0 GiB"
    assert not fits and reason == ("does not fit: stage 0 needs >80.0 GiB per GPU, "
                                   "the GPU has 80.0 GiB")
    assert tight_note(inside, cap, 0.1).startswith(
        "tight: stage 0 needs 72.0 GiB per GPU of the GPU's 80.0 GiB, inside the 10 % margin")
    assert tight_note(inside, cap, 0.0) == "" and tight_note(above, cap, 0.1) == ""
    s = load_any(case_file("bf16_memory_1p3b.json"))
    r = simulate(s).report
    assert r.memory_reserve_fraction == 0.1
    assert r.fits_in_memory == (r.max_memory_per_gpu_bytes <= r.memory_capacity_bytes)


# --------------------------------------------------------------------------- communication

def small_session(**kw) -> Session:
    base = dict(tensor_parallel=2, pipeline_parallel=1, data_parallel=16, micro_batch_size=1,
                global_batch_size=64, schedule="1f1b", recompute="none", precision="bf16")
    return Session(MODEL_PRESETS["GPT-3 1.3B"], ParallelPlan(**{**base, **kw}),
                   ClusterConfig(gpus_per_node=8, inter_node_bandwidth_gbits_per_s=100.0),
                   CostConfig())


def test_overlapped_gradient_reduction_hides_at_most_the_backward():
    store = open_profile(profile_path(small_session()))
    blocking = simulate(small_session(), store)
    overlap = simulate(small_session(overlap_grad_reduce=True), store)
    # the same per-GPU work without data parallelism: one replica, same micro-batches
    alone = simulate(small_session(data_parallel=1, global_batch_size=4), store).report.iteration_time_s
    st = stage_times(small_session(), store)
    reduce_s = float(st.dp_reduce_s[0])          # one all-reduce of all gradients
    backward_s = float(st.bwd_s[0, 0])           # the last micro-batch's backward
    g = overlap.graph
    buckets = (g.kind == KINDS.index("dp_comm")) & (g.stream == 1)
    bucket_s = float(g.duration_s[buckets].sum())
    T_block, T_over = blocking.report.iteration_time_s, overlap.report.iteration_time_s
    assert T_block == pytest.approx(alone + reduce_s, rel=1e-9)
    assert alone < T_over < T_block
    # overlap hides at most the last backward: what is left of the buckets is exposed
    assert T_over >= alone + bucket_s - backward_s - 1e-12
    # the buckets run on the communication stream while the last backward computes
    last_bwd_end = g.kind == KINDS.index("backward")
    end_of_backward = overlap.schedule.end_s[last_bwd_end].max()
    assert overlap.schedule.start_s[buckets].min() < end_of_backward
    # and they are graph tasks: one per layer, the embedding's and the output layer's (p = 1)
    assert buckets.sum() == 24 + 2


def test_sequence_parallel_moves_the_same_tensor_parallel_volume():
    # with an explicit NVLink bandwidth the collectives follow the ring model, where a
    # reduce-scatter plus an all-gather takes what one all-reduce takes (plus one more call)
    cl = dict(intra_node_bandwidth_gbytes_per_s=100.0)
    plain = small_session(data_parallel=1, global_batch_size=4)
    plain.cluster = dataclasses.replace(plain.cluster, **cl)
    sp = dataclasses.replace(plain, plan=dataclasses.replace(plain.plan, sequence_parallel=True))
    a100 = open_profile(profile_path(plain))
    # the A100's device without measured curves: one ring latency for every kind of collective
    store = ProfileStore(a100.device_name, a100.peak_flops, a100.memory_bytes,
                         a100.memory_bandwidth_bytes_per_s, {"method": "analytic"},
                         {"collective_overhead_s": 1e-5})
    ga, gb = build_graph(plain, store)[0], build_graph(sp, store)[0]
    tp = KINDS.index("tp_comm")
    n_ar = int((ga.kind == tp).sum())
    assert set(OPS[o] for o in gb.op[gb.kind == tp]) == {"tp_reduce_scatter", "tp_all_gather"}
    assert int((gb.kind == tp).sum()) == 2 * n_ar
    overhead = 1e-5
    assert gb.duration_s[gb.kind == tp].sum() == pytest.approx(
        ga.duration_s[ga.kind == tp].sum() + n_ar * overhead, rel=1e-9)
    # LayerNorm and dropout on s/t tokens: less compute
    comp = np.isin(ga.kind, [KINDS.index(k) for k in ("forward", "backward")])
    comp_b = np.isin(gb.kind, [KINDS.index(k) for k in ("forward", "backward")])
    assert gb.duration_s[comp_b].sum() < ga.duration_s[comp].sum()


def test_zero_stages_communication():
    store = open_profile(profile_path(small_session()))
    times = {z: stage_times(small_session(zero_stage=z), store) for z in (0, 1, 2, 3)}
    n = model_math.params_per_gpu(small_session().model, small_session().plan)[0]
    # the optimizer steps over 1/d of the parameters from stage 1 on
    for z in (1, 2, 3):
        assert times[z].optimizer_s[0] < times[0].optimizer_s[0] / 4
    # stage 1: reduce-scatter after the backward and all-gather after the step, no per-micro-batch work
    assert times[1].dp_reduce_s[0] > 0 and times[1].after_optimizer_s[0] > 0
    assert times[1].bwd_s[0, 0] == pytest.approx(times[0].bwd_s[0, 0], rel=1e-12)
    # stage 2: gradients reduce-scattered in every micro-batch's backward (blocking here)
    assert times[2].dp_reduce_s[0] == 0 and times[2].bwd_s[0, 0] > times[0].bwd_s[0, 0]
    # stage 3: parameters gathered before every layer's forward and backward as well
    assert times[3].fwd_s[0, 0] > times[0].fwd_s[0, 0] and times[3].after_optimizer_s[0] == 0
    g = build_graph(small_session(zero_stage=3), store)[0]
    gathers = g.op == OPS.index("dp_all_gather")
    m = small_session().plan.num_microbatches
    # forward: layers, embedding, output; backward: layers, output (the embedding's backward
    # needs no weights)
    assert gathers.sum() == m * (2 * 24 + 2 + 1)
    assert n > 0


def test_overlap_param_gather_needs_a_sharded_optimizer():
    errs = validate(small_session(overlap_param_gather=True))
    assert [e.field for e in errs] == ["plan.overlap_param_gather"]
    assert not validate(small_session(zero_stage=1, overlap_param_gather=True))


# --------------------------------------------------------------------------- recomputation

def test_selective_recomputation_redoes_the_attention_core():
    store = open_profile(profile_path(small_session()))
    none = simulate(small_session(data_parallel=1, global_batch_size=4), store)
    sel = simulate(small_session(data_parallel=1, global_batch_size=4, recompute="selective"), store)
    core = sel.graph.op == OPS.index("attention_core_fwd")
    assert core.sum() == 4 * 24 and (sel.graph.kind[core] == KINDS.index("recompute")).all()
    extra = sel.graph.duration_s[core].sum()
    assert sel.report.iteration_time_s == pytest.approx(none.report.iteration_time_s + extra, rel=1e-9)
    # HFU counts what runs: the recomputed attention core once more (forward only); the
    # unfused path computes every core's whole s x s square, as Eq. 3 credits it (4 s h FLOPs
    # per token and layer)
    m, seq, h = sel.session.model, 2048, 2048
    tokens = 4 * seq
    core = 4 * seq * h
    assert m.attention_kernel == "unfused"
    assert (sel.report.hfu / sel.report.mfu - 1) * sel.report.model_flops_per_iteration == pytest.approx(
        tokens * 24 * core, rel=1e-9)
    assert m.num_layers == 24


def test_block_recomputation_recomputes_that_many_layers_per_stage():
    s = small_session(data_parallel=1, global_batch_size=4, pipeline_parallel=2, recompute="full",
                      recompute_num_layers=5)
    r = simulate(s)
    rec = (r.graph.kind == KINDS.index("recompute")) & (r.graph.op == OPS.index("attention_fwd"))
    assert rec.sum() == 2 * 5 * 4  # stages, layers, micro-batches
    assert set(r.graph.layer[rec].tolist()) == set(range(5)) | set(range(12, 17))
    errs = validate(dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute_num_layers=13)))
    assert any(e.field == "plan.recompute_num_layers" for e in errs)


def test_block_recomputation_counts_per_model_chunk_under_interleaving():
    """Megatron applies --recompute-num-layers to each model chunk (TransformerBlock): with
    p=2, v=2 and 24 layers a chunk holds 6, so 6 recomputes every layer and 8 (a per-stage
    reading: a stage holds 12) is refused naming the chunk; 4 recomputes 4 of each chunk."""
    s = small_session(data_parallel=1, global_batch_size=4, pipeline_parallel=2, recompute="full",
                      schedule="interleaved", virtual_pipeline_stages=2, recompute_num_layers=4)
    assert validate(s) == []
    assert model_math.recomputed_layers(s.model, s.plan).tolist() == [8, 8]
    six = dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute_num_layers=6))
    assert validate(six) == []
    assert model_math.recomputed_layers(six.model, six.plan).tolist() == [12, 12]
    errs = validate(dataclasses.replace(s, plan=dataclasses.replace(s.plan, recompute_num_layers=8)))
    assert [e.field for e in errs] == ["plan.recompute_num_layers"]
    assert "the 6 layers of the largest model chunk" in errs[0].message and "v=2" in errs[0].message


# --------------------------------------------------------------------------- uneven pipelines

def test_bloom_layers_on_twelve_stages():
    bloom = ModelConfig("BLOOM-like", 70, 14336, 112, None, 2048, 250880)
    pl = plan(tensor_parallel=4, pipeline_parallel=12, data_parallel=8, global_batch_size=2048,
              first_stage_layers=5, last_stage_layers=5)
    assert stage_layer_counts(70, pl) == [5] + [6] * 10 + [5]
    s = Session(bloom, pl)
    assert not [e for e in validate(s) if e.field.startswith("plan")]
    ranges = model_math.stage_layers(bloom, pl)
    assert [x for r in ranges for x in r] == list(range(70))
    assert not validate(s) or all(not e.field.startswith("plan") for e in validate(s))
    even = dataclasses.replace(pl, first_stage_layers=None, last_stage_layers=None)
    assert any("not divisible" in e.message for e in validate(Session(bloom, even)))


@pytest.mark.parametrize("L, p, first, last", [(24, 4, 3, None), (24, 4, None, 9), (24, 4, 6, 6),
                                               (10, 2, 4, 6), (24, 4, 5, 5), (24, 1, 3, None),
                                               (24, 4, 20, 4), (24, 3, 2, 2)])
def test_uneven_layers_are_never_dropped(L, p, first, last):
    pl = plan(pipeline_parallel=p, first_stage_layers=first, last_stage_layers=last)
    try:
        counts = stage_layer_counts(L, pl)
    except ValueError as exc:
        assert str(exc)  # refused with a reason
        return
    assert sum(counts) == L and len(counts) == p and min(counts) >= 1
    if first is not None:
        assert counts[0] == first
    if last is not None:
        assert counts[-1] == last


def test_uneven_stages_change_stage_times():
    m = MODEL_PRESETS["GPT-3 1.3B"]
    base = dict(tensor_parallel=1, pipeline_parallel=4, data_parallel=1, micro_batch_size=1,
                global_batch_size=8, schedule="1f1b", recompute="none", precision="bf16")
    s = Session(m, ParallelPlan(**base, first_stage_layers=3, last_stage_layers=3))
    st = stage_times(s, open_profile(profile_path(s)))
    even = stage_times(Session(m, ParallelPlan(**base)), open_profile(profile_path(s)))
    assert st.fwd_s[1, 0] == pytest.approx(even.fwd_s[1, 0] * 9 / 6, rel=1e-9)  # middle: 9 layers, was 6
    assert st.fwd_s[0, 0] < even.fwd_s[0, 0]


# --------------------------------------------------------------------------- the plan record

def test_plan_key_and_label_derive_from_every_field():
    p0 = plan()
    changed = dict(tensor_parallel=4, pipeline_parallel=8, data_parallel=2, micro_batch_size=2,
                   global_batch_size=768, schedule="gpipe", recompute="full", precision="fp16",
                   sequence_parallel=True, recompute_num_layers=2, zero_stage=1,
                   overlap_grad_reduce=True, overlap_param_gather=True, grad_reduce_dtype="fp32",
                   first_stage_layers=5, last_stage_layers=7, context_parallel=2, expert_parallel=4,
                   expert_tensor_parallel=1, moe_imbalance_factor=1.5, fp8_recipe="mxfp8",
                   account_for_embedding_in_pipeline_split=True,
                   account_for_loss_in_pipeline_split=True, recompute_modules="mlp",
                   tp_comm_overlap=True, data_parallel_shard_size=2, fp8_param_gather=True,
                   pipeline_model_parallel_layout="Et*8|t*8L", moe_token_dispatcher_type="flex",
                   overlap_moe_expert_parallel_comm=True, delay_wgrad_compute=True,
                   cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te",
                   cp_comm_type="allgather", cp_a2a_size=2, tf32=True, gradient_accumulation_fusion=False,
                   cuda_graph_impl="transformer_engine", cuda_graph_modules="attn",
                   overlap_p2p_comm=False, use_precision_aware_optimizer=True,
                   te_master_weights=False, main_params_dtype="fp16", exp_avg_dtype="bf16",
                   exp_avg_sq_dtype="fp8", tp_comm_overlap_backend="symmetric_memory",
                   fsdp_fp32_params=True, fp8_impl="torchao",
                   tp_saved_input="gathered")
    assert set(PLAN_FIELDS) <= set(changed) | {"virtual_pipeline_stages"}
    for name, value in changed.items():
        meta = ParallelPlan.__dataclass_fields__[name].metadata
        # a field that qualifies another (label_needs) is labelled while that one is on
        base = dataclasses.replace(p0, **{meta["label_needs"]: True}) if "label_needs" in meta else p0
        if name in ("cp_comm_type", "cp_a2a_size"):  # labelled with context parallelism only
            base = dataclasses.replace(base, context_parallel=2)
        if name == "fp8_impl":  # labelled in fp8 only (no FP8 linears otherwise)
            base = dataclasses.replace(base, precision="fp8")
        if name == "fsdp_fp32_params":  # labelled under ZeRO-3 only (no shards otherwise)
            assert dataclasses.replace(p0, fsdp_fp32_params=True).label() == p0.label()
            base = dataclasses.replace(base, zero_stage=3)
        if name == "tf32":  # labelled in fp32 only (no fp32 matmuls otherwise)
            base = dataclasses.replace(base, precision="fp32")
        if name == "overlap_p2p_comm":  # labelled under the interleaved schedule only
            base = dataclasses.replace(base, schedule="interleaved", virtual_pipeline_stages=2)
        p1 = dataclasses.replace(base, **{name: value})
        assert plan_key(p1) != plan_key(base), name
        if meta.get("label") != "never":
            assert p1.label() != base.label(), name
        assert p1.label(full=True) != base.label(full=True), name
    assert p0.label() == "t=8 p=16 d=4 b=1 1f1b recompute=none"
    # the fused cross-entropy's kernels change nothing while the fusion is off: not labelled
    assert plan(cross_entropy_fusion_impl="te").label() == p0.label()
    assert plan(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te").label().endswith(
        "ce_fusion ce_impl=te")
    assert plan(sequence_parallel=True, zero_stage=1).label() == "t=8 p=16 d=4 b=1 1f1b recompute=none sp zero=1"
    # at t = 1 sequence parallelism and the TP overlap change nothing: not labelled (tester)
    one = plan(tensor_parallel=1, data_parallel=32)
    assert plan(tensor_parallel=1, data_parallel=32, sequence_parallel=True,
                tp_comm_overlap=True).label() == one.label() == "t=1 p=16 d=32 b=1 1f1b recompute=none"
    # nor the context-parallel exchange at cp = 1
    assert plan(cp_comm_type="all_gather").label() == p0.label()
    # nor TF32 outside fp32 (Hugging Face's --bf16 --tf32 runs no fp32 matmul)
    assert plan(tf32=True).label(full=True) == p0.label(full=True)
    assert plan(precision="fp32", tf32=True).label(full=True).endswith("precision=fp32 tf32")
    # the routing imbalance only when it is not the balanced 1.0 (every dense model's)
    assert "imbalance" not in p0.label(full=True)
    assert plan(moe_imbalance_factor=1.2).label(full=True).endswith("imbalance=1.2")
    assert plan(precision="fp32", tf32=True).label() == p0.label()  # never in the short label
    assert plan(cp_comm_type="all_gather", context_parallel=2, data_parallel=2).label().endswith(
        "cp=2 cp_comm=all_gather")


def test_stage_time_cache_never_serves_another_plans_times():
    m = MODEL_PRESETS["GPT-3 1.3B"]
    base = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, micro_batch_size=1,
                        global_batch_size=8, schedule="1f1b", recompute="none", precision="bf16")
    store = open_profile(profile_path(Session(m, base)))
    cache: dict = {}
    variants = [dict(), dict(sequence_parallel=True), dict(recompute="selective"), dict(zero_stage=2),
                dict(zero_stage=3, overlap_param_gather=True), dict(overlap_grad_reduce=True),
                dict(grad_reduce_dtype="bf16"), dict(first_stage_layers=10), dict(recompute="full"),
                dict(recompute="full", recompute_num_layers=3), dict(precision="fp16"),
                dict(schedule="zb-h1", zero_stage=3, overlap_grad_reduce=True),
                dict(schedule="interleaved", virtual_pipeline_stages=2, zero_stage=1,
                     overlap_param_gather=True, overlap_grad_reduce=True),
                dict(sequence_parallel=True, tp_comm_overlap=True),
                dict(sequence_parallel=True, tp_comm_overlap=True, schedule="zb-h1"),
                dict(sequence_parallel=True, tp_comm_overlap=True, recompute="full")]
    # every variant at two data-parallel sizes: the bucket times differ, the structure does not
    variants += [{**v, "data_parallel": 4, "global_batch_size": 16} for v in variants]
    for v in variants:
        s = Session(m, dataclasses.replace(base, **v))
        assert not validate(s), v
        a, b = stage_times(s, store, cache), stage_times(s, store)
        for f in ("fwd_s", "bwd_s", "wgrad_s", "dp_comm_s", "optimizer_s", "ready_s", "chunk_tail_s",
                  "send_fwd_s"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f"{v} {f}")


def test_session_without_the_new_fields_opens_with_defaults():
    s = Session.from_dict({"plan": {"tensor_parallel": 2}})
    assert s.plan.sequence_parallel is False and s.plan.zero_stage == 0
    assert s.plan.recompute_num_layers is None and s.plan.grad_reduce_dtype is None
    assert s.cluster.memory_reserve_fraction == 0.1
    with pytest.raises(Exception, match="sequence_parallel"):
        Session.from_dict({"plan": {"sequence_parallel": "false"}})
    assert math.isfinite(simulate(load_any(case_file("bf16_memory_1p3b.json"))).report.mfu)
