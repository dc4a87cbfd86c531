"""Context parallelism with multi-head latent attention (DeepSeek-V3; Megatron-Core 0.16.1
``MLASelfAttention`` through Transformer Engine 2.20's context-parallel attention).

MLA's core has Q and K heads of ``qk + rope`` channels (DeepSeek-V3: 128 + 64 = 192) and V and
the output of ``v`` (128), K/V heads = query heads. TE's p2p ring (``torch.cat`` of the
flattened K and V), all_gather (K and V gathered apart), a2a and a2a+p2p (each tensor
all-to-all'd apart) all take those sizes, so every exchanged byte, buffer and kernel uses the
per-tensor sizes. Closed forms below, with the non-MLA numbers frozen from main before the
change (bit for bit).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.cli import main
from core.io.session import save_session
from core.model import model_math as mm
from core.model.memory import activation_bytes_per_layer
from core.model.ops import op_kernels
from core.plan.cluster import ClusterConfig
from core.plan.fields import NOT_MODELLED
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.sim.op_times import op_key
from core.sim.simulate import simulate

#: a DeepSeek-V3 of 4 layers (the first dense, the others MoE) at 16K tokens, without MTP
V3 = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=0, num_layers=4,
                         moe_first_dense_layers=1, seq_length=16384)
B, S, A, DQK, DV = 1, 16384, 128, 128 + 64, 128  # micro-batch, tokens, heads, head sizes
E = 2  # BF16


def _session(cp: int = 4, t: int = 2, kind: str = "p2p", model=V3, **kw) -> Session:
    plan = dict(tensor_parallel=t, pipeline_parallel=1, data_parallel=2, micro_batch_size=B,
                global_batch_size=8, recompute="selective", recompute_modules="core_attn",
                sequence_parallel=True, expert_parallel=8, expert_tensor_parallel=1,
                context_parallel=cp, cp_comm_type=kind,
                cp_a2a_size=2 if kind == "a2a+p2p" else None)
    plan.update(kw)
    return Session(model=model, plan=ParallelPlan(**plan),
                   cluster=ClusterConfig(gpu="H100-SXM5-80GB"))


def test_head_sizes_are_mla_per_tensor_and_kv_channels_otherwise():
    assert mm.cp_head_sizes(V3) == (192, 128)
    assert mm.cp_head_sizes(MODEL_PRESETS["Llama 3 8B"]) == (128, 128)


@pytest.mark.parametrize("cp,t", [(2, 1), (4, 2), (8, 8)])
def test_kv_block_query_output_and_ring_bytes_closed_forms(cp, t):
    s = _session(cp=cp, t=t)
    tok, heads = B * S // cp, A // t
    blk = tok * heads * (192 + 128) * E  # K (qk+rope) and V (v) of the rank's s/cp tokens
    assert mm.cp_kv_block_bytes(s.model, s.plan) == blk
    # one head size (192) for both would be wrong: that is 2 * 192, not 192 + 128
    assert blk != tok * heads * 2 * 192 * E
    assert mm.cp_query_bytes(s.model, s.plan) == tok * heads * 192 * E
    assert mm.cp_output_bytes(s.model, s.plan) == tok * heads * 128 * E
    assert mm.cp_exchange_bytes(s.model, s.plan) == ((cp - 1) * blk, 2 * (cp - 1) * blk)


def test_all_to_all_bytes_closed_form():
    s = _session(cp=4, t=2, kind="a2a")
    tok, heads = B * S // 4, A // 2
    before = tok * (heads * 192 + heads * (192 + 128)) * E  # Q, K, V
    after = tok * heads * 128 * E  # the output
    assert mm.cp_a2a_bytes(s.model, s.plan) == (before, after)
    hier = _session(cp=4, t=2, kind="a2a+p2p")  # same per-rank tensors, a group of 2
    assert mm.cp_a2a_bytes(hier.model, hier.plan) == (before, after)


@pytest.mark.parametrize("kind", ["p2p", "all_gather", "a2a", "a2a+p2p"])
def test_exchange_buffers_closed_forms(kind):
    cp, t = 4, 2
    s = _session(cp=cp, t=t, kind=kind)
    tok, heads = B * S // cp, A // t
    blk = tok * heads * 320 * E
    dq = tok * heads * 192 * E  # the second dQ (ring) / the chunks' dQ (all-gather)
    a2a = tok * heads * (192 + 320) * E  # the larger all-to-all buffer (Q, K, V)
    want = {"p2p": 4 * blk + dq, "all_gather": (3.5 * cp - 0.5) * blk + dq,
            "a2a": 2 * a2a, "a2a+p2p": 2 * a2a + 4 * blk + dq}[kind]
    assert mm.cp_exchange_buffer_bytes(s.model, s.plan) == want


def _kernels(s: Session, op: str):
    return op_kernels(op, op_key(s))


def test_ring_kernels_use_the_mla_head_sizes():
    cp, t = 4, 2
    s = _session(cp=cp, t=t)
    sl, heads = S // cp, A // t
    step = 2.0 * B * heads * (192 + 128) * sl * sl / 2  # one causal s/cp x s/cp step
    fwd = _kernels(s, "attention_core_fwd")
    flash = [k for k in fwd if k.name == "flash_attn"]
    assert len(flash) == cp and all(k.flops == step for k in flash)
    assert {(k.m, k.n, k.k, k.batch) for k in flash} == {(sl, sl, 192, B * heads)}
    assert flash[0].bytes == E * B * sl * heads * 2 * (192 + 128)  # Q, O; K, V
    corr = [k.bytes for k in fwd if k.name == "cp_out_correction"]
    assert corr == [3 * E * B * sl * heads * 128] * (cp - 1)  # the output: v channels
    bwd = _kernels(s, "attention_core_bwd")
    assert sum(k.flops for k in bwd) == 2.5 * cp * step
    acc = [k.bytes for k in bwd if k.name == "cp_grad_accumulate"]
    assert acc == [3 * E * B * sl * (heads * 192 + heads * (192 + 128))] * (cp - 1)
    # the attention op holds the ring core
    assert sum(k.flops for k in _kernels(s, "attention_fwd") if k.name == "flash_attn") == \
        cp * step


def test_all_gather_and_a2a_kernels_use_the_mla_head_sizes():
    cp, t = 4, 2
    sl, heads = S // cp, A // t
    step = 2.0 * B * heads * 320 * sl * sl / 2
    ag = _kernels(_session(cp=cp, t=t, kind="all_gather"), "attention_core_fwd")
    assert sum(k.flops for k in ag) == cp * step
    kv_all = E * B * cp * sl * heads * 320
    assert [k.bytes for k in ag if k.name == "cp_ag_reorder"] == [2 * kv_all]
    assert [k.bytes for k in ag if k.name == "cp_ag_out_copy"] == [2 * E * B * sl * heads * 128]
    a2a = _kernels(_session(cp=cp, t=t, kind="a2a"), "attention_core_fwd")
    (flash,) = [k for k in a2a if k.name == "flash_attn"]  # the whole sequence, heads/cp
    assert flash.flops == 2.0 * B * (heads // cp) * 320 * S * S / 2
    assert (flash.m, flash.k, flash.batch) == (S, 192, B * heads // cp)


def test_a2a_keeps_mla_core_output_twice():
    none = dict(recompute="none", recompute_modules=None)
    p2p, a2a = _session(kind="p2p", **none), _session(kind="a2a", **none)
    extra = (activation_bytes_per_layer(a2a.model, a2a.plan, "none")
             - activation_bytes_per_layer(p2p.model, p2p.plan, "none"))
    # TE's a2a saves its head-split output beside the projection's input: (s/cp) b (a/t) v
    assert extra == pytest.approx(S // 4 * B * (A // 2) * DV * E, rel=1e-12)


@pytest.mark.parametrize("kind", ["p2p", "all_gather", "a2a", "a2a+p2p"])
def test_deepseek_v3_like_session_validates_and_simulates(kind):
    s = _session(kind=kind)
    assert validate(s) == []
    r = simulate(s).report
    assert r.iteration_time_s > 0
    one = simulate(dataclasses.replace(s, plan=dataclasses.replace(
        s.plan, context_parallel=1, cp_comm_type="p2p", cp_a2a_size=None, data_parallel=8)))
    # the same GPUs, each with a quarter of the tokens: less activation memory per GPU
    assert r.max_memory_per_gpu_bytes < one.report.max_memory_per_gpu_bytes


def test_cli_simulates_mla_with_cp_and_refuses_allgather_by_name(tmp_path, capsys):
    path = tmp_path / "v3_cp2.json"
    save_session(_session(cp=2, data_parallel=4), path)
    assert main(["simulate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_time_s"] > 0 and out["num_gpus"] == 16
    assert main(["simulate", str(path), "--set", "plan.cp_comm_type=allgather"]) != 0
    assert "allgather" in capsys.readouterr().err


def test_refused_by_name():
    def errs(s):
        return {e.field: e for e in validate(s)}
    ag = errs(_session(kind="allgather"))  # PyTorch's context_parallel: not TE's
    assert ag["plan.cp_comm_type"].rule == NOT_MODELLED and "allgather" in \
        ag["plan.cp_comm_type"].message
    up = errs(_session(recompute_modules="mla_up_proj"))  # TE's saved K/V copies
    assert up["plan.recompute_modules"].rule == NOT_MODELLED
    assert "plan.recompute_modules" not in errs(_session(cp=1, recompute_modules="mla_up_proj",
                                                         cp_comm_type="p2p"))
    # MTP with cp is modelled (roll_tensor's exchanges: tests/test_mtp_context_parallel.py)
    assert errs(_session(model=dataclasses.replace(V3, mtp_num_layers=1))) == {}


#: Llama 3 8B at 8K tokens, t = 2, sequence parallelism, selective recomputation, on H200,
#: computed on main before per-tensor head sizes (commit ee3e7a6): (K/V block, all-to-all
#: buffers, exchange buffers, activation bytes per layer, the core's forward FLOPs and bytes,
#: backward FLOPs and bytes, iteration time, peak memory per GPU; the last without the
#: embedding's ids and the final norm's input and output, added later: :func:`_edges`)
BEFORE = {
    "p2p/cp2": (8388608.0, (0.0, 0.0), 50331648.0, 285212672.0, 137438953472.0, 134217728.0, 343597383680.0, 243269632.0, 1.0813865765837234, 87813071708.16),  # noqa: E501
    "allgather/cp2": (8388608.0, (0.0, 0.0), 33554432.0, 285212672.0, 137438953472.0, 134217728.0, 343597383680.0, 243269632.0, 1.084625192761496, 87795740844.032),  # noqa: E501
    "a2a/cp2": (8388608.0, (25165824.0, 16777216.0), 50331648.0, 285212672.0, 137438953472.0, 125829120.0, 343597383680.0, 167772160.0, 1.099811914571607, 87813071708.16),  # noqa: E501
    "all_gather/cp2": (8388608.0, (0.0, 0.0), 71303168.0, 285212672.0, 137438953472.0, 117440512.0, 343597383680.0, 218103808.0, 1.1053979755222516, 87834735288.32),  # noqa: E501
    "p2p/cp4": (4194304.0, (0.0, 0.0), 25165824.0, 142606336.0, 68719476736.0, 159383552.0, 171798691840.0, 281018368.0, 0.6993657124310059, 82259071344.64),  # noqa: E501
    "allgather/cp4": (4194304.0, (0.0, 0.0), 25165824.0, 142606336.0, 68719476736.0, 159383552.0, 171798691840.0, 281018368.0, 0.7011130205198931, 82259071344.64),  # noqa: E501
    "a2a/cp4": (4194304.0, (12582912.0, 8388608.0), 25165824.0, 142606336.0, 68719476736.0, 62914560.0, 171798691840.0, 83886080.0, 0.7063293952851227, 82259071344.64),  # noqa: E501
    "a2a+p2p/cp4": (4194304.0, (12582912.0, 8388608.0), 50331648.0, 142606336.0, 68719476736.0, 109051904.0, 171798691840.0, 163577856.0, 0.70395272614426, 82285067640.832),  # noqa: E501
    "all_gather/cp4": (4194304.0, (0.0, 0.0), 65011712.0, 142606336.0, 68719476736.0, 83886080.0, 171798691840.0, 184549376.0, 0.720101029764338, 82300232146.944),  # noqa: E501
}


def _edges(cp: int) -> float:
    """The whole-process bytes the one stage added later outside its layers: the embedding's
    int64 ids (8 s/cp; no mask, the preset's hidden_dropout is 0) and the final norm's bf16
    input and output over t = 2 with sequence parallelism (2 (s/cp) h 2 / 2), with the
    allocator's 3.3 % reserve on them (core.model.memory.ALLOCATOR_RESERVE_FRACTION)."""
    tokens = 8192 // cp
    return (8 * tokens + 2 * tokens * 4096 * 2 / 2) * 1.033


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_llama3_8b_cp_numbers_unchanged_bit_for_bit(name):
    kind, cp = name.split("/cp")
    m = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=8192)
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                      global_batch_size=4, recompute="selective", sequence_parallel=True,
                      context_parallel=int(cp), cp_comm_type=kind,
                      cp_a2a_size=2 if kind == "a2a+p2p" else None)
    s = Session(model=m, plan=pl, cluster=ClusterConfig(
        gpu="H200-SXM-141GB", inter_node_bandwidth_gbits_per_s=3200.0))
    fwd, bwd = _kernels(s, "attention_core_fwd"), _kernels(s, "attention_core_bwd")
    r = simulate(s).report
    got = (mm.cp_kv_block_bytes(m, pl), mm.cp_a2a_bytes(m, pl), mm.cp_exchange_buffer_bytes(m, pl),
           activation_bytes_per_layer(m, pl, "selective"),
           sum(k.flops for k in fwd), sum(k.bytes for k in fwd),
           sum(k.flops for k in bwd), sum(k.bytes for k in bwd),
           r.iteration_time_s, float(r.max_memory_per_gpu_bytes))
    assert got[:-1] == BEFORE[name][:-1]
    assert got[-1] == pytest.approx(BEFORE[name][-1] + _edges(int(cp)), rel=1e-15)


def test_mla_without_cp_unchanged_bit_for_bit():
    """MLA's core is now built by the shared attention core: its cp = 1 numbers are those of
    main before (commit ee3e7a6; the session of test_mla's latent-collectives test)."""
    m = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=0, num_layers=8,
                            moe_first_dense_layers=1)
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=8, micro_batch_size=1,
                      global_batch_size=32, recompute="selective", recompute_modules="core_attn",
                      sequence_parallel=True, expert_parallel=16, expert_tensor_parallel=1,
                      zero_stage=1)
    s = Session(model=m, plan=pl, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    (f,), (b,) = _kernels(s, "attention_core_fwd"), _kernels(s, "attention_core_bwd")
    assert (f.name, f.flops, f.bytes, f.m, f.n, f.k, f.batch) == (
        "flash_attn", 343597383680.0, 335544320.0, 4096, 4096, 192, 64)
    assert (b.name, b.flops, b.bytes) == ("flash_attn_bwd", 858993459200.0, 671088640.0)
    r = simulate(s).report
    # + the loss stage's final norm's bf16 input and output, 2 s h / t with sequence
    # parallelism, and the allocator's 3.3 % reserve on them: added later
    assert r.iteration_time_s == 0.8951318102992758
    assert float(r.max_memory_per_gpu_bytes) == pytest.approx(
        68217371353.6 + 2 * 4096 * 7168 * 2 / 2 * 1.033, rel=1e-15)
    assert activation_bytes_per_layer(m, pl, "selective") == 696254464.0
