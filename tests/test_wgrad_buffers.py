"""Transformer Engine's placeholder weight gradients (core.model.wgrad_buffers): one buffer in the
weights' dtype per distinct linear-weight shape of a stage, kept for the process (TE 2.3+
``get_dummy_wgrad``), counted in the gradients; closed forms per layer kind."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from core.model import model_math as mm
from core.model.wgrad_buffers import (dummy_wgrad_bytes, separate_wgrad_bytes, stage_weight_shapes,
                                      weight_gradient_buffer_bytes)
from core.plan.model_config import ModelConfig
from core.plan.presets import MODEL_PRESETS
from core.plan.parallel import ParallelPlan

# Llama 3 70B's layer (h 8192, 64 heads of 128, 8 groups, SwiGLU f 28672, vocabulary 128256)
LLAMA70B = ModelConfig(name="llama70b", num_layers=8, hidden_size=8192, num_attention_heads=64,
                       num_query_groups=8, ffn_hidden_size=28672, activation="swiglu",
                       normalization="rmsnorm", position_embedding="rope", add_bias_linear=False,
                       vocab_size=128256, seq_length=4096, tied_embeddings=False)


def _plan(**kw) -> ParallelPlan:
    base = dict(tensor_parallel=1, pipeline_parallel=2, data_parallel=4, micro_batch_size=1,
                global_batch_size=16, recompute="none", zero_stage=1)
    return ParallelPlan(**{**base, **kw})


def _layer_elements(t: int) -> int:
    """QKV ((64 + 2*8)*128/t x 8192), projection (8192 x 8192/t), fc1 (2*28672/t x 8192),
    fc2 (8192 x 28672/t): all distinct, one layer's linear weights."""
    return (10240 * 8192 + 8192 * 8192 + 57344 * 8192 + 8192 * 28672) // t


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_dense_stage_holds_one_layer_and_the_output_layer(t):
    plan = _plan(tensor_parallel=t, data_parallel=8 // t)
    got = dummy_wgrad_bytes(LLAMA70B, plan)
    vocab = -(-128256 // (128 * t)) * 128 * t  # padded for t (--make-vocab-size-divisible-by 128)
    assert vocab == {1: 128256, 2: 128256, 4: 128512, 8: 129024}[t]
    assert got.tolist() == [2.0 * _layer_elements(t),
                            2.0 * (_layer_elements(t) + vocab // t * 8192)]
    # in the gradients term, on top of the fp32 main gradients
    mem = mm.stage_memory(LLAMA70B, plan)
    params = mm.params_per_gpu(LLAMA70B, plan)
    assert [m.gradients_bytes for m in mem] == pytest.approx((4 * params + got).tolist(), rel=1e-12)


def test_the_bytes_are_the_weights_dtype():
    bf16 = dummy_wgrad_bytes(LLAMA70B, _plan())
    assert dummy_wgrad_bytes(LLAMA70B, _plan(precision="fp8")).tolist() == bf16.tolist()
    assert dummy_wgrad_bytes(LLAMA70B, _plan(precision="fp16")).tolist() == bf16.tolist()
    assert dummy_wgrad_bytes(LLAMA70B, _plan(precision="fp32")).tolist() == (2 * bf16).tolist()


@pytest.mark.parametrize("kw", [dict(gradient_accumulation_fusion=False), dict(zero_stage=3)])
def test_no_placeholders_without_fused_wgrad_accumulation(kw):
    """The placeholder is TE's answer to fuse_wgrad_accumulation; without it (or under FSDP, which
    reduce-scatters each micro-batch's gradients) the weight gradients are real tensors."""
    assert dummy_wgrad_bytes(LLAMA70B, _plan(**kw)).tolist() == [0.0, 0.0]


def test_separate_accumulation_holds_the_largest_weight_gradient_once():
    """Without the fusion each weight gradient lives until the data-parallel hook adds it to
    main_grad: the largest of the stage counts, fc1 (57344 x 8192) on stage 0, the output layer
    (128256 x 8192) on the loss stage; nothing with the fusion or under ZeRO-3."""
    plan = _plan(gradient_accumulation_fusion=False)
    want = [2.0 * 57344 * 8192, 2.0 * 128256 * 8192]
    assert separate_wgrad_bytes(LLAMA70B, plan).tolist() == want
    assert weight_gradient_buffer_bytes(LLAMA70B, plan).tolist() == want
    assert separate_wgrad_bytes(LLAMA70B, _plan()).tolist() == [0.0, 0.0]
    assert weight_gradient_buffer_bytes(LLAMA70B, _plan(zero_stage=3)).tolist() == [0.0, 0.0]
    fused = mm.stage_memory(LLAMA70B, _plan())
    apart = mm.stage_memory(LLAMA70B, plan)
    placeholders = dummy_wgrad_bytes(LLAMA70B, _plan())
    for i in range(2):
        assert apart[i].gradients_bytes - fused[i].gradients_bytes == pytest.approx(
            want[i] - placeholders[i], rel=1e-12)


def test_shared_and_routed_experts_of_one_shape_share_a_buffer():
    """DeepSeek-V3: the shared expert (f 2048, over t) and a routed expert (2048, over etp) have
    the same shapes when etp == t: one buffer each shape; with etp 1 and t 2 they differ."""
    v3 = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=0, num_layers=8,
                             moe_first_dense_layers=1)
    h = 7168
    same = stage_weight_shapes(v3, _plan(tensor_parallel=2, expert_tensor_parallel=2,
                                         expert_parallel=4, pipeline_parallel=1, data_parallel=4))
    apart = stage_weight_shapes(v3, _plan(tensor_parallel=2, expert_tensor_parallel=1,
                                          expert_parallel=8, pipeline_parallel=1, data_parallel=4))
    assert {(4096 // 2, h), (h, 2048 // 2)} <= same[0]
    assert (4096, h) in apart[0] and (4096 // 2, h) in apart[0]
    assert len(apart[0]) == len(same[0]) + 2
    # MLA (q_l 1536, kv_l 512, 128 + 64 query/key channels, 128 value channels, 128 heads, t 2):
    # down projections replicated, up projections and the output projection over t
    mla = {(1536, h), (512 + 64, h), (128 * 192 // 2, 1536), (128 * 256 // 2, 512),
           (h, 128 * 128 // 2)}
    assert mla <= same[0]
    # the dense first layer's MLP (f 18432) and the output layer (vocabulary 129280)
    assert {(2 * 18432 // 2, h), (h, 18432 // 2), (129280 // 2, h)} <= same[0]


def test_mtp_adds_eh_proj_on_the_loss_stage():
    v3 = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], num_layers=8, moe_first_dense_layers=1)
    assert v3.mtp_num_layers == 1
    shapes = stage_weight_shapes(v3, _plan(tensor_parallel=2, expert_parallel=4,
                                           pipeline_parallel=2, data_parallel=4))
    assert (7168 // 2, 2 * 7168) in shapes[1] and (7168 // 2, 2 * 7168) not in shapes[0]


def test_stage_without_layers_holds_only_what_it_runs():
    """A loss stage of no transformer layers (a pipeline layout putting the loss alone) holds
    the output layer's placeholder only."""
    plan = _plan(pipeline_parallel=2, pipeline_model_parallel_layout="Et*8|L")
    shapes = stage_weight_shapes(LLAMA70B, plan)
    assert shapes[1] == {(128256, 8192)}
    assert np.isclose(dummy_wgrad_bytes(LLAMA70B, plan)[1], 2.0 * 128256 * 8192)
