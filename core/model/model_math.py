"""Per-layer model math, by model family: parameters, FLOPs, activation bytes and kernels.

One home for every formula that depends on the model's shape: the profile
store's op keys and kernel lists (:func:`op_kernels`), the graph's parameter
counts (:func:`params_per_gpu`), the report's FLOPs and memory
(:func:`model_flops_per_iteration`, :func:`stage_memory`) and the studies'
model sizes (:func:`num_parameters`) all ask it; nothing else repeats a
formula.

Families are registered by name in :data:`FAMILIES` (one :class:`ModelFamily`
each); :func:`family_of` picks a model's. Only ``"dense"`` exists now: a dense
decoder as Megatron-LM / Megatron-Core builds it, GPT at the defaults of the
model's family fields (learned positions, LayerNorm, GeLU MLP with ``f`` =
``ffn_hidden_size``, biases, word embedding tied with the output layer, full
multi-head attention, unfused attention) and Llama-style models with them set
(grouped-query attention with ``g`` query groups, SwiGLU, RMSNorm, RoPE, no
biases, untied output layer, FlashAttention). Mixture-of-experts models are
dense decoders whose MoE layers (:func:`moe_layer_mask`) replace the dense MLP by a
router, routed experts and shared experts (section "mixture of experts": parameters
total and active, FLOPs on active parameters, kernels of :data:`MOE_OPS`, activation
bytes, experts' parameters sharded over ``ep*etp``).

Terms: ``b`` micro-batch size, ``s`` sequence length, ``h`` hidden size, ``a``
attention heads, ``f`` MLP hidden size, ``V`` vocabulary padded as Megatron
does, ``t`` tensor-parallel size, ``L`` layers; bytes and FLOPs (a multiply-add
is 2 FLOPs).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

import numpy as np

from core import schedules
from core.plan.config import (FP8_DEFAULT_RECIPE, PLAN_FIELDS, ModelConfig, ParallelPlan, fp8_recipe,
                     grad_dtype, padded_vocab_size, pipeline_layout_text, plan_key,
                     recompute_modules, stage_layer_counts, tensor_dtype,
                     virtual_stage_layer_counts, zero_shard_size)
from core.model.stage_memory import StageMemory

__all__ = [
    "DTYPE_BYTES", "GRAD_ACCUMULATE_BYTES_PER_PARAM", "ADAM_BYTES_PER_PARAM", "Kernel",
    "ModelFamily", "FAMILIES", "family_of", "activation_key", "op_kernels", "num_parameters", "params_per_gpu",
    "stage_layers", "stage_chunk_layers", "model_flops_per_iteration", "hardware_flops_per_iteration",
    "causal_model_flops_per_iteration",
    "activation_bytes_per_layer", "in_flight_microbatches", "bytes_per_parameter", "stage_memory",
    "stage_memory_arrays", "stage_state_bytes", "ACTIVATION_FREE_PLAN_FIELDS", "SELECTIVE_OP_OPS", "SELECTIVE_OP_GEMMS", "selective_op_linears",
    "selective_op_kernels",
    "selective_op_flops_per_token", "fp8_gathers_params", "fp8_linear_params_per_layer",
    "param_gather_bytes",
    "recomputed_layers", "recomputed_in_chunk", "chunks_per_stage", "FAMILY_KEY_DEFAULTS",
    "family_key_value", "full_op_key", "table_covers", "edge_params_per_gpu",
    "MOE_OPS", "MOE_KEY", "PART_OPS", "TP_OVERLAP_GEMMS", "TP_OVERLAP_OPS", "SWA_OPS", "window_layer_mask", "attended_pairs", "MODULE_OPS", "MOE_DERIVED_OPS", "num_active_parameters", "num_active_parameters_with_embedding", "input_embedding_parameters", "moe_layer_mask", "num_moe_layers", "moe_layer_parameters",
    "MoeLayerParameters", "expert_params_per_gpu", "stage_moe_layer_counts", "moe_ffn",
    "expert_tensor_parallel", "expert_data_parallel", "moe_activation_bytes_per_layer",
    "FP8_BYTES", "FP8_WEIGHT_CAST_OP", "fp8_tn_only", "fp8_gemm_dtype", "fp8_copies",
    "fp8_scale_bytes", "fp8_cast_kernels", "fp8_weights_per_gpu", "fp8_weight_bytes_per_parameter",
    "cp_kv_block_bytes", "cp_exchange_bytes", "cp_a2a_size", "cp_a2a_bytes",
    "MLA_KEY", "mla_key", "mla_forward_flops_per_token", "mla_up_proj_forward_flops_per_token",
    "attention_forward_flops_per_token", "causal_core_fraction", "mla_tp_latent_width",
    "flex_remote_node_copies",
    "MTP_OPS", "MTP_KEY", "mtp_layers", "mtp_layer_is_moe", "mtp_extra_parameters",
    "mtp_tp_collectives", "mtp_edge_parameters",
    "GEMM_WORKSPACE_BYTES", "ALLOCATOR_RESERVE_FRACTION", "CUDA_CONTEXT_BYTES",
    "NCCL_BUFFSIZE_BYTES", "NCCL_CHANNELS", "NCCL_RING_PEERS", "nccl_communicators",
    "nccl_buffer_bytes", "StageMemoryArrays", "process_memory_terms",
]

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Bytes per parameter of accumulating a weight gradient into the gradient buffer
#: (read, read, write), by dtype.
GRAD_ACCUMULATE_BYTES_PER_PARAM = {"bf16": 6, "fp16": 6, "fp32": 12}
#: Bytes moved per parameter by the fused Adam step, by dtype. Mixed precision: read fp32
#: master, m, v and the half-precision gradient, write master, m, v and the half-precision
#: copy, plus gradient scaling (32). fp32: read p, g, m, v and write p, m, v (28).
ADAM_BYTES_PER_PARAM = {"bf16": 32, "fp16": 32, "fp32": 28}


# --- what a training process holds besides the model's tensors (docs/simulator.md, "Memory
# model"); named constants with their sources, the same for every plan (never fitted per row)

#: GEMM workspaces allocated through PyTorch's caching allocator (so in
#: ``torch.cuda.max_memory_allocated``), bytes: PyTorch's cuBLAS/cuBLASLt workspace, 32 MiB
#: on Hopper and later (``CUDABlasHandlePool.cpp``, ``getChosenWorkspaceSize``: ``:4096:8``;
#: 8.125 MiB before Hopper), and Transformer Engine's, 32 MiB on sm90 and later
#: (``transformer_engine.pytorch.module.base.get_cublas_workspace_size_bytes``; 4 MiB before).
#: The Ampere figure (12 MiB in all) is not told apart: 52 MiB, below any figure's precision.
GEMM_WORKSPACE_BYTES = 2 * 32 * 2**20
#: Share of the allocated peak (``torch.cuda.max_memory_allocated``) that PyTorch's caching
#: allocator keeps reserved beyond it (``max_memory_reserved - max_memory_allocated``): blocks
#: freed by short-lived tensors (activations, their gradients, workspaces) and cached in
#: segments that later requests split or cannot use (PyTorch docs, "CUDA semantics: memory
#: management"; ZeRO, Rajbhandari et al. 2020, Sec. 3.2, "memory fragmentation"). An
#: empirical share, one global constant set on the development data (../shared/data/
#: measured-memory: 2.8-6.5 % on its 8 SimuMax plans, median 3.3 %; the share is steadier than
#: one of the activations alone, 0.23-0.88), never fitted per row; ``benchmarks/
#: bench_memory.py`` prints how it does.
ALLOCATOR_RESERVE_FRACTION = 0.033
#: The CUDA context of a training process, bytes: outside PyTorch's allocator, seen by
#: ``nvidia-smi`` only (PyTorch docs, "CUDA semantics: memory management": memory not managed
#: by the caching allocator). With lazy module loading (``CUDA_MODULE_LOADING=LAZY``, CUDA
#: 11.7+, PyTorch's default) and the kernels of PyTorch, cuBLAS, cuDNN, NCCL and Transformer
#: Engine loaded it is 0.5-1 GiB per GPU; the middle of that range. No measured
#: ``nvidia-smi`` row checks it yet.
CUDA_CONTEXT_BYTES = 0.75 * 2**30
#: NCCL's buffer of one protocol per channel and peer, bytes: ``NCCL_BUFFSIZE``'s default,
#: 4 MiB (NCCL docs, "Environment variables: NCCL_BUFFSIZE"), allocated by NCCL with
#: ``cudaMalloc`` outside PyTorch's allocator.
NCCL_BUFFSIZE_BYTES = 4 * 2**20
#: Channels NCCL opens per communicator: it picks the count per topology (NCCL docs,
#: ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``); 16 is a typical ring count on NVLink
#: nodes (nccl-tests' "16 coll channels" on DGX A100/H100 logs). An assumption, named.
NCCL_CHANNELS = 16
#: Peers of a rank per channel in NCCL's ring: the one it receives from and the one it sends
#: to (a buffer each).
NCCL_RING_PEERS = 2


@dataclass(frozen=True)
class Kernel:
    """One kernel of an op: a GEMM (``m, n, k`` set, ``batch`` >= 1) or a memory-bound kernel.

    ``dtype`` names the peak FLOP/s a GEMM runs at when it differs from the op's tensor dtype
    (``"fp8"`` or ``"mxfp8"`` for the linear layers' GEMMs of FP8 training); empty otherwise.
    """

    name: str
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    dtype: str = ""

    @property
    def is_gemm(self) -> bool:
        return self.m > 0


def _gemm(name: str, m: int, n: int, k: int, e: int, batch: int = 1) -> Kernel:
    return Kernel(name, 2.0 * m * n * k * batch, float(e * batch * (m * k + k * n + m * n)),
                  m, n, k, batch)


def _mem(name: str, nbytes: float) -> Kernel:
    return Kernel(name, 0.0, float(nbytes))


# --------------------------------------------------------------------------- FP8 (Transformer Engine)

#: Bytes of one FP8 element (E4M3 forward, E5M2 gradients with Megatron's ``--fp8-format hybrid``).
FP8_BYTES = 1
#: The per-iteration quantization of the linear layers' weights to FP8 (not a table of the
#: profile store; timed with the optimizer step, see :func:`fp8_cast_kernels`).
FP8_WEIGHT_CAST_OP = "fp8_weight_cast"


def fp8_tn_only(peak_flops: Mapping[str, float]) -> bool:
    """Whether a GPU's FP8 GEMMs take only the TN layout, given its peaks by dtype: true on
    Hopper, false on Blackwell, the GPUs with an ``mxfp8`` peak (Transformer Engine keeps a
    transposed FP8 copy of each tensor a wgrad or dgrad GEMM reads when the GPU cannot run
    non-TN FP8 GEMMs; TE 2.x ``is_non_tn_fp8_gemm_supported``: compute capability 10.0 and
    later; NVIDIA Transformer Engine docs, "Using FP8 with Transformer Engine")."""
    return "mxfp8" not in peak_flops


def fp8_gemm_dtype(recipe: str) -> str:
    """Peak the FP8 GEMMs of ``recipe`` run at: ``"mxfp8"`` for MXFP8 (Blackwell's block-scaled
    tensor-core instructions), ``"fp8"`` for the per-tensor and blockwise recipes."""
    return "mxfp8" if recipe == "mxfp8" else "fp8"


def fp8_copies(recipe: str, tn_only: bool) -> int:
    """FP8 copies Transformer Engine keeps of each quantized tensor (weights, saved inputs,
    gradients): 2 (row-wise and column-wise) with ``mxfp8`` and ``blockwise``, whose scaling
    blocks run along the GEMM's reduction dimension, which differs between the fprop/dgrad and
    the wgrad GEMMs, so TE quantizes each tensor both ways (TE docs, FP8 primer: "MXFP8 ...
    both rowwise and columnwise quantized copies"); 2 with a per-tensor recipe (``delayed``,
    ``tensorwise``) on a TN-only GPU (Hopper: the transposed copy for wgrad and dgrad); 1 with
    a per-tensor recipe on Blackwell (one copy read in any layout)."""
    if recipe in ("mxfp8", "blockwise"):
        return 2
    return 2 if tn_only else 1


def fp8_scale_bytes(recipe: str, weight: bool = False) -> float:
    """Scale bytes per element of one FP8 copy: ``mxfp8`` one E8M0 byte per 32 elements
    (OCP Microscaling Formats spec v1.0); ``blockwise`` one fp32 scale per 1x128 block of an
    activation or gradient (``4/128``) and per 128x128 block of a weight (``4/16384``;
    DeepSeek-V3 report, Sec. 3.3; TE ``Float8BlockScaling``); per-tensor recipes one scale per
    tensor (0 per element)."""
    if recipe == "mxfp8":
        return 1 / 32
    if recipe == "blockwise":
        return 4 / (128 * 128) if weight else 4 / 128
    return 0.0


def fp8_cast_kernels(name: str, elements: float, recipe: str, tn_only: bool,
                     weight: bool = False) -> list[Kernel]:
    """Memory-bound kernels that quantize one BF16 tensor of ``elements`` elements to FP8.

    Bytes (Transformer Engine's ``cast_transpose`` / quantize kernels, one fused kernel writes
    every copy; NVIDIA TE docs, "Using FP8 with Transformer Engine" and the FP8 primer):

    * the cast reads the BF16 tensor (2 bytes per element) and writes :func:`fp8_copies` FP8
      copies of 1 byte plus :func:`fp8_scale_bytes` each:
      ``elements * (2 + copies * (1 + scale))``;
    * ``tensorwise`` (per-tensor current scaling) first reduces the tensor's absolute maximum,
      one more read (``2 * elements``, kernel ``<name>_amax``);
    * ``delayed`` takes the scale from the amax history of earlier iterations (the cast kernel
      records the amax as it goes: no extra pass; the history update, a few bytes per tensor,
      is neglected); ``mxfp8`` and ``blockwise`` compute each block's scale inside the cast
      kernel (no extra pass).

    Per linear layer the forward quantizes its input (and keeps the copy the wgrad reads), the
    backward its output gradient; weights are quantized once per iteration
    (:data:`FP8_WEIGHT_CAST_OP`; TE caches them over the micro-batches, Megatron-Core's
    ``is_first_microbatch``).
    """
    c = fp8_copies(recipe, tn_only)
    cast = _mem(f"{name}_cast", elements * (2 + c * (FP8_BYTES + fp8_scale_bytes(recipe, weight))))
    if recipe == "tensorwise":
        return [_mem(f"{name}_amax", 2.0 * elements), cast]
    return [cast]


def linear_kernels(key: Mapping[str, Any]) -> tuple[Callable[[str, int, int, int], Kernel],
                                                     Callable[[str, float], list[Kernel]]]:
    """``(linear, cast)`` kernel makers of an op key, for every family's linear layers (the
    dense layer's QKV, projection and MLP; MoE experts the same way):

    * ``linear(name, m, n, k, batch=1)``: the GEMM ``(m, k) x (k, n)`` (``batch`` of them, a
      grouped GEMM), in FP8 with ``dtype="fp8"``
      (:func:`fp8_gemm_dtype` of ``key["fp8"]``; 1-byte inputs, BF16 output), else in the
      key's 16-bit (or fp32) dtype;
    * ``cast(name, elements)``: the quantization of the GEMM's BF16 input or output gradient,
      :func:`fp8_cast_kernels` (``key["fp8"]``, ``key["fp8_tn"]``, default true), none
      without FP8.
    """
    fp8 = str(key["dtype"]) == "fp8"
    recipe = str(key.get("fp8") or FP8_DEFAULT_RECIPE)
    tn = bool(key.get("fp8_tn", True))
    e = DTYPE_BYTES[tensor_dtype(str(key["dtype"]))]
    sp_t = int(key.get("t", 1)) if key.get("sp") else 1

    def linear(name: str, m: int, n: int, k: int, batch: int = 1) -> Kernel:
        return _fp8_gemm(name, m, n, k, recipe, batch) if fp8 else _gemm(name, m, n, k, e, batch)

    def cast(name: str, elements: float, gathered: bool = False) -> list[Kernel]:
        if not fp8:
            return []
        if gathered and sp_t > 1:
            return fp8_gathered_cast_kernels(name, elements, sp_t, recipe, tn)
        return fp8_cast_kernels(name, elements, recipe, tn)

    return linear, cast


def fp8_gathered_cast_kernels(name: str, elements: float, t: int, recipe: str,
                              tn_only: bool) -> list[Kernel]:
    """The quantization of a tensor that sequence parallelism all-gathers over the ``t``
    tensor-parallel ranks before its GEMM (the QKV and fc1 inputs; in the backward the
    projection's and fc2's output gradients), ``elements`` the gathered tensor's: Transformer
    Engine quantizes the rank's ``elements / t`` before the all-gather, which then moves FP8
    (TE ``gather_along_first_dim`` with a quantizer; ``grad_output_preprocess`` in the
    backward), so the cast and the ``tensorwise`` amax read the local shard. The copies the
    cast writes: with a per-tensor recipe the row-wise one, and on a TN-only GPU (Hopper) the
    wgrad's transposed copy is made afterwards from the gathered FP8 tensor (TE
    ``fp8_transpose``: read and write 1 byte per element of it); ``mxfp8`` and ``blockwise``
    quantize both ways locally (:func:`fp8_copies`). The all-gather itself is communication,
    still timed at the BF16 tensor's size (an upper bound: TE moves the FP8 copies, half of it
    with a per-tensor recipe; halving it moved the published FP8 rows by 1-2 %).
    """
    local = elements / t
    per_tensor = recipe not in ("mxfp8", "blockwise")
    c = 1 if per_tensor else fp8_copies(recipe, tn_only)
    out = [_mem(f"{name}_cast", local * (2 + c * (FP8_BYTES + fp8_scale_bytes(recipe))))]
    if recipe == "tensorwise":
        out.insert(0, _mem(f"{name}_amax", 2.0 * local))
    if per_tensor and tn_only:
        out.append(_mem(f"{name}_transpose", 2.0 * FP8_BYTES * elements))
    return out


def _fp8_gemm(name: str, m: int, n: int, k: int, recipe: str, batch: int = 1) -> Kernel:
    """A linear layer's GEMM in FP8 (``batch`` of them: a grouped GEMM): both inputs FP8
    (1 byte), the output BF16 (2 bytes)."""
    return Kernel(name, 2.0 * m * n * k * batch,
                  float(batch * (FP8_BYTES * (m * k + k * n) + 2 * m * n)), m, n, k, batch,
                  fp8_gemm_dtype(recipe))


# --------------------------------------------------------------------------- dense decoders

#: Key columns the dense family added to the GPT op keys, with the value that is Megatron-LM's
#: GPT (``g``: ``None`` stands for ``a``, full multi-head attention; ``kv``: ``None`` stands for
#: the head size ``h/a``). A profile-store table
#: without such a column holds GPT ops: it is used only for keys at these values.
FAMILY_KEY_DEFAULTS: dict[str, Any] = {"g": None, "act": "gelu", "norm": "layernorm",
                                       "pos": "learned", "attn": "unfused", "qkn": 0, "kv": None,
                                       "cp": 1, "qlr": 0, "kvlr": 0, "qkd": 0, "qpe": 0, "vd": 0,
                                       "ce": "unfused"}
def activation_key(activation: str) -> str:
    """The ``act`` key column that times ``model.activation``'s MLP: the activation itself, but
    ``squared_relu`` (Nemotron-4's ``relu(x)**2``, Megatron-Core's ``squared_relu`` under
    ``jit_fuser``: one fused element-wise kernel per pass that reads the fc1 output and writes
    the activation, and in the backward reads the saved input and the gradient and writes one
    gradient) is timed as ``gelu``, whose ``bias_gelu`` kernels move the same bytes; both are
    non-gated (two ffn matrices, the same GEMMs). The FLOPs of the element-wise kernels are
    not counted in either case (memory-bound)."""
    return "gelu" if activation == "squared_relu" else activation


#: Key columns of multi-head latent attention (:func:`mla_key`), 0 without MLA: ``qlr`` the
#: query latent's rank (0: no query compression), ``kvlr`` the key/value latent's rank (0: not
#: MLA), ``qkd``, ``qpe``, ``vd`` the query/key head's channels without and with rotary
#: embedding and the value head's.
MLA_KEY = ("qlr", "kvlr", "qkd", "qpe", "vd")


def mla_key(model: ModelConfig) -> dict[str, int]:
    """The MLA key columns (:data:`MLA_KEY`) of ``model``: its latent ranks and head sizes with
    ``multi_latent_attention``, all 0 without (the attention ops' GPT values)."""
    if getattr(model, "multi_latent_attention", False) is not True:
        return dict.fromkeys(MLA_KEY, 0)
    return dict(qlr=int(model.q_lora_rank or 0), kvlr=int(model.kv_lora_rank),
                qkd=int(model.qk_head_dim), qpe=int(model.qk_pos_emb_head_dim),
                vd=int(model.v_head_dim))
#: Family columns whose GPT value derives from the shape columns (``None`` in
#: :data:`FAMILY_KEY_DEFAULTS`): ``g`` is ``a`` (one query group per head), ``kv`` the head
#: size ``h/a`` (Megatron's ``--kv-channels`` default).
_DERIVED_DEFAULTS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any]], Any]]] = {
    "g": (("a",), lambda k: k["a"]),
    "kv": (("h", "a"), lambda k: int(k["h"]) // int(k["a"])),
}


def family_key_value(column: str, key: Mapping[str, Any]) -> Any:
    """GPT's value of family column ``column`` for ``key`` (``g`` is ``key["a"]``, ``kv`` is
    ``key["h"] // key["a"]``)."""
    default = FAMILY_KEY_DEFAULTS[column]
    if default is None and column in _DERIVED_DEFAULTS:
        return _DERIVED_DEFAULTS[column][1](key)
    return default


def _full(key: Mapping[str, Any]) -> dict[str, Any]:
    """``key`` with each family column it lacks set to GPT's value."""
    out = dict(key)
    for c in FAMILY_KEY_DEFAULTS:
        needs = _DERIVED_DEFAULTS[c][0] if c in _DERIVED_DEFAULTS else ()
        if c not in out and all(n in out for n in needs):
            out[c] = family_key_value(c, out)
    return out


def _dense_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of a dense decoder op (see :func:`op_kernels`).

    GPT (Megatron-LM) at the family columns' defaults. The head size is ``kv``
    (Megatron's ``--kv-channels``; ``h/a`` by default): the QKV GEMM has
    ``(a + 2g) kv`` columns (Megatron-Core's fused ``linear_qkv``: Q ``a kv``
    wide, K and V ``g kv`` each), the projection's input is ``a kv`` wide and
    the attention core works on heads of ``kv`` channels. Grouped-query attention
    (``g < a``) shrinks K and V and, on the unfused path, expands K and V to ``a`` heads
    before the core (``repeat_interleave``); RoPE adds a rotary kernel on Q and K
    (read and write); a SwiGLU MLP's fc1 is ``2f`` wide (gate and up fused) and
    its activation reads ``2f`` and writes ``f`` per token; RMSNorm kernels move
    the same bytes as LayerNorm's; QK-norm adds a norm kernel over Q and K (read
    and write; backward twice that, as the layer norms). FlashAttention is one kernel per pass
    (Dao 2023): causal, so half of the ``s x s`` products are computed
    (FlashAttention-2 paper's FLOP count for causal masks; a sliding window of ``w`` tokens,
    key entry ``w``, computes the band, :func:`attended_pairs`); the forward reads Q,
    K, V and writes the output, the backward (five GEMMs against the forward's
    two: 2.5x its FLOPs) reads Q, K, V, the output and its gradient and writes
    the gradients of Q, K and V.

    Softmax type (``model.softmax_type``; not a key column): off-by-one and learnable
    (attention sinks, GPT-OSS) add one logit per query row to the softmax's denominator, inside
    the same kernel (Transformer Engine's fused attention with ``softmax_type``, TE >= 2.8, and
    Megatron-Core's unfused ``FusedScaleMaskSoftmax`` with ``softmax_offset``): one more
    exponential per row against the row's ``s/2`` (causal) or ``w`` (windowed) ones and no GEMM
    FLOPs; the backward's sink gradient is one more product per row (FlashAttention's
    ``rowsum(dO * O)`` is already computed) reduced over the rows to ``a`` numbers. Negligible,
    so these kernels are timed as the vanilla ones: the profile store has no sink variant of the
    FlashAttention op, and a layer with sinks takes ``flash_attn``'s time (a named assumption,
    not a measurement of TE's sink kernel). The sinks' ``a`` parameters are counted
    (:func:`_attention_parameters`).

    Gated MLP with a clamp and a linear offset (``activation_func_clamp_value``,
    ``glu_linear_offset``; GPT-OSS's ``quick_geglu``, ``x sigmoid(1.702 x)`` gate): the clamp
    and the offset are element-wise operations on values the fused activation kernel has in
    registers (Megatron-Core's ``weighted_bias_quick_geglu_impl``): the same bytes as
    ``bias_swiglu``, which times it.

    FP8 (``dtype="fp8"``, the recipe in ``key["fp8"]``, default tensorwise, and
    ``key["fp8_tn"]``, :func:`fp8_tn_only`, default true): as Megatron-Core with Transformer
    Engine, the linear layers' GEMMs (QKV, projection, fc1, fc2 and their dgrad and wgrad)
    run in FP8 at the GPU's FP8 peak (:func:`fp8_gemm_dtype`), reading 1-byte inputs and
    writing BF16; each one's input (forward) and output gradient (backward) is quantized by
    :func:`fp8_cast_kernels`. The attention core (FlashAttention or unfused) stays BF16 (TE's
    ``DotProductAttention`` runs FP8 only with ``fp8_dpa``, off by default), and so do the norms,
    the activation, the embedding and the output layer (Megatron-Core builds the word embedding
    and the output layer outside TE: its ``ColumnParallelLinear`` ignores FP8; with
    ``--first-last-layers-bf16``, off by default, the first and last transformer layers would
    stay BF16 too, not modelled). The tensors between kernels are BF16.

    All-to-all context parallelism (key ``cpa`` > 1, the all-to-all group's size:
    ``cp`` for Megatron-Core's ``--cp-comm-type a2a``, DeepSpeed-Ulysses in TE's
    ``AttnFuncWithCPAndKVAll2All``; ``plan.cp_a2a_size`` for ``a2a+p2p``): Q, K and V go from a
    sequence split to a head split, so the core runs on ``cpa * s`` tokens for ``1/cpa`` of the
    rank's heads and K/V heads, in a ring of ``cp/cpa`` steps as below (one kernel per pass for
    a2a), the same FLOPs as the ring's; TE copies Q, K, V and O (backward dO, dQ, dK, dV) into
    the exchange's layout, one read and one write of each. The exchanges themselves are
    communication (:func:`cp_a2a_bytes`, timed by the graph).

    Context parallelism (``cp`` > 1; Megatron-Core's ring attention in Transformer Engine,
    ``AttnFuncWithCPAndKVP2P``): ``s`` is the rank's ``s_full/cp`` tokens (every token-wise
    kernel runs on them) and the sequence is split into ``2*cp`` chunks, the rank holding
    chunks ``r`` and ``2cp-1-r`` (causal load balance). The core runs in ``cp`` steps, one
    per K/V block passing around the ring: the diagonal step is causal attention over the
    rank's own ``s`` tokens, every other step attends half of the queries to all of the
    block's keys or all queries to half of them, the same FLOPs; so each step is one
    FlashAttention kernel of a causal ``s x s`` problem, and the rank computes ``1/cp``
    of the causal attention over the whole sequence. Each step after the first merges its
    partial output into the running one with the softmax statistics (read both, write
    one); in the backward each step's partial gradients of Q, K and V are accumulated
    (read both, write one). FlashAttention only: the unfused path has no ring attention.
    """
    if op in MOE_OPS:
        return _moe_op_kernels(op, key)
    if op in MTP_OPS:
        return _mtp_op_kernels(op, key)
    key = _full(key)
    fp8 = str(key["dtype"]) == "fp8"
    recipe = str(key.get("fp8") or FP8_DEFAULT_RECIPE)
    tn = bool(key.get("fp8_tn", True))
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    linear, cast = linear_kernels(key)
    if op == "optimizer_step":
        return [_mem("adam", ADAM_BYTES_PER_PARAM[dtype] * float(key["n"]))]
    if op == FP8_WEIGHT_CAST_OP:
        return fp8_cast_kernels("weights", float(key["n"]), recipe, tn, weight=True) if fp8 else []
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    acc = GRAD_ACCUMULATE_BYTES_PER_PARAM[dtype]

    T = b * s  # tokens in the micro-batch
    act = T * h * e  # bytes of one (b, s, h) activation
    # Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2): LayerNorm and dropout run on
    # the rank's s/t tokens, (b, s/t, h)
    tok = act / t if key.get("sp") else act
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    if op in ("attention_fwd", "attention_bwd", "attention_core_fwd", "attention_core_bwd") \
            and int(key.get("kvlr", 0) or 0):
        return _mla_op_kernels(op, key)
    if op in ("attention_fwd", "attention_bwd", "attention_core_fwd", "attention_core_bwd"):
        a, g = int(key["a"]), int(key["g"])
        heads, groups, dh = a // t, g // t, int(key["kv"])
        qkv = (a + 2 * g) * dh // t  # columns of this rank's QKV GEMM (3h/t without GQA)
        ctx = heads * dh  # this rank's attention output, the projection's input (h/t for GPT)
        rope = key.get("pos") == "rope"
        qk_bytes = 2 * T * (heads + groups) * dh * e  # read and write Q and K
        kv_expand = T * 2 * (heads + groups) * dh * e  # read g/t, write a/t heads of K and V
        cp = int(key.get("cp", 1))
        if key.get("attn") == "flash":
            # the all-to-all exchanges (cpa > 1): the core runs on cpa times the tokens for
            # 1/cpa of the heads, in a ring of cp/cpa steps (one step for a2a)
            cpa = int(key.get("cpa", 1) or 1)
            ring, sc, hc, gc = cp // cpa, s * cpa, heads // cpa, groups // cpa
            causal = 4.0 * b * hc * dh * attended_pairs(sc, int(key.get("w", 0) or 0))
            io_fwd = e * b * sc * dh * (2 * hc + 2 * gc)  # Q, K, V in, O out
            core = [Kernel("flash_attn", causal, float(io_fwd), sc, sc, dh, b * hc)]
            core_bwd = [Kernel("flash_attn_bwd", 2.5 * causal,
                               float(e * b * sc * dh * (4 * hc + 4 * gc)), sc, sc, dh, b * hc)]
            if cp > 1 and int(key.get("cpg", 0) or 0):
                core, core_bwd = _cp_all_gather_core(b, s, cp, heads, groups, dh, e, causal)
            elif ring > 1:  # ring attention: cp steps, each a causal s x s problem (see above)
                core = core * ring + [_mem("cp_out_correction", 3 * e * T * heads * dh)] * (ring - 1)
                core_bwd = core_bwd * ring + [_mem("cp_grad_accumulate", 3 * e * T * dh * (
                    heads + 2 * groups))] * (ring - 1)
            if cpa > 1:  # TE's a2a copies Q, K, V and O (dO, dQ, dK, dV) into its exchanges'
                # layout: each read and written once
                core = [_mem("cp_a2a_layout", 2.0 * io_fwd), *core]
                core_bwd = [*core_bwd, _mem("cp_a2a_layout_bwd", 2.0 * io_fwd)]
        elif cp > 1:
            raise ValueError(f"context parallelism (cp={cp}) with attn={key.get('attn')!r} is not "
                             "modelled: ring attention runs in FlashAttention / TE fused attention")
        else:
            score = b * heads * s * s * e  # bytes of one (b, a/t, s, s) score tensor
            expand = [_mem("kv_expand", kv_expand)] if groups < heads else []
            core = [
                *expand,
                _gemm("attn_scores", s, s, dh, e, b * heads),       # (b*a/t, s, kv) x (kv, s)
                _mem("scale_mask_softmax", 2 * score),
                _mem("attn_dropout", 2.5 * score),
                _gemm("attn_values", s, dh, s, e, b * heads),       # (b*a/t, s, s) x (s, kv)
            ]
            core_bwd = [
                _gemm("attn_values_dgrad_p", s, s, dh, e, b * heads),
                _gemm("attn_values_dgrad_v", s, dh, s, e, b * heads),
                _mem("attn_dropout_bwd", 2.5 * score),
                _mem("softmax_bwd", 3 * score),
                _gemm("attn_scores_dgrad_q", s, dh, s, e, b * heads),
                _gemm("attn_scores_dgrad_k", s, dh, s, e, b * heads),
                *([_mem("kv_expand_bwd", kv_expand)] if groups < heads else []),
            ]
        if op == "attention_core_fwd":  # what selective recomputation runs again
            return core
        if op == "attention_core_bwd":  # the ring's share of the backward (context parallelism)
            return core_bwd
        rotary = [_mem("rope", qk_bytes)] if rope else []
        if int(key.get("qkn", 0)):  # a norm over each query and key head (read and write)
            rotary = [_mem(f"qk_{norm}", qk_bytes), *rotary]
        if op == "attention_fwd":
            return [
                _mem(norm, 2 * tok),
                *cast("qkv_input", T * h, True),
                linear("qkv", T, qkv, h),                          # (b*s, h) x (h, (a+2g)kv/t)
                *rotary,
                *core,
                *cast("proj_input", T * ctx),
                linear("proj", T, h, ctx),                        # (b*s, a kv/t) x (a kv/t, h)
            ]
        return [
            _mem("bias_dropout_add_bwd", 2 * tok),
            *cast("proj_grad", T * h, True),
            linear("proj_dgrad", T, ctx, h), linear("proj_wgrad", ctx, h, T),
            _mem("wgrad_accumulate", acc * (h * qkv + h * ctx)),
            *core_bwd,
            *([_mem("rope_bwd", qk_bytes)] if rope else []),
            *([_mem(f"qk_{norm}_bwd", 2 * qk_bytes)] if int(key.get("qkn", 0)) else []),
            *cast("qkv_grad", T * qkv),
            linear("qkv_dgrad", T, h, qkv), linear("qkv_wgrad", qkv, h, T),
            _mem(f"{norm}_bwd", 4 * tok),
        ]
    if op in ("mlp_fwd", "mlp_bwd"):
        f = int(key["f"])
        gated = key.get("act") == "swiglu"
        fc1 = (2 if gated else 1) * f // t  # gate and up projections fused (Megatron-Core)
        inner = T * (f // t) * e
        if op == "mlp_fwd":
            return [
                _mem("bias_dropout_add", 3.5 * tok),
                _mem(norm, 2 * tok),
                *cast("fc1_input", T * h, True),
                linear("fc1", T, fc1, h),                         # (b*s, h) x (h, f/t or 2f/t)
                _mem("bias_swiglu", 3 * inner) if gated else _mem("bias_gelu", 2 * inner),
                *cast("fc2_input", T * (f // t)),
                linear("fc2", T, h, f // t),                      # (b*s, f/t) x (f/t, h)
                _mem("bias_dropout_add", 3.5 * tok),
            ]
        return [
            _mem("bias_dropout_add_bwd", 2 * tok),
            *cast("fc2_grad", T * h, True),
            linear("fc2_dgrad", T, f // t, h), linear("fc2_wgrad", f // t, h, T),
            _mem("bias_swiglu_bwd", 5 * inner) if gated else _mem("bias_gelu_bwd", 3 * inner),
            *cast("fc1_grad", T * fc1),
            linear("fc1_dgrad", T, h, fc1), linear("fc1_wgrad", fc1, h, T),
            _mem("wgrad_accumulate", acc * (h * fc1 + h * f // t)),
            _mem(f"{norm}_bwd", 4 * tok),
            _mem("bias_dropout_add_bwd", 2 * tok),
        ]
    V = int(key["V"])
    cells = T * (V // t)  # logits of this rank: (b*s, V/t)
    to_fp32 = 4 + e if e < 4 else 0  # bytes per logit of the .float() copy (none in fp32)
    if op == "embedding_fwd":
        if key.get("pos") == "rope":  # no position table: dropout only (read, write, mask)
            return [_mem("embedding_lookup", 2 * act), _mem("embedding_dropout", 2.5 * tok)]
        return [_mem("embedding_lookup", 2 * act), _mem("position_add_dropout", 3.5 * tok)]
    if op == "embedding_bwd":
        # dense (V/t, h) gradient: zero-filled, rows scattered in, accumulated into the buffer
        return [_mem("dropout_bwd", 2 * tok), _mem("embedding_grad_zero", e * V * h // t),
                _mem("embedding_grad_scatter_add", 3 * act),
                _mem("wgrad_accumulate", acc * V * h // t)]
    fusion = str(key.get("ce") or "unfused")
    if op == "output_fwd":
        if fusion == "te":
            # Transformer Engine's parallel_cross_entropy: one pass for each row's max and
            # sum of exponentials, one that reads the logits again and writes the loss's
            # gradient in their place (the gradient is computed in the forward)
            ce = [_mem("ce_te_stats", e * cells), _mem("ce_te_loss_grad", 2 * e * cells)]
        elif fusion == "native":
            # Megatron-Core's fused_vocab_parallel_cross_entropy (jit-fused): the fp32 copy
            # with the max, the in-place subtract and exp with the sum, the in-place divide
            ce = [_mem("ce_fp32_max", (e + 4 if to_fp32 else 4) * cells),
                  _mem("ce_sub_exp_sum", 8 * cells), _mem("ce_softmax_div", 8 * cells)]
        else:
            # Megatron's vocab-parallel cross-entropy on fp32 logits, one kernel per step:
            # .float() copy, max, subtract max, exp, sum, divide (softmax kept for backward).
            ce = ([_mem("logits_to_fp32", to_fp32 * cells)] if to_fp32 else []) + [
                _mem("ce_max", 4 * cells), _mem("ce_sub_max", 8 * cells), _mem("ce_exp", 8 * cells),
                _mem("ce_sum", 4 * cells), _mem("ce_softmax_div", 8 * cells)]
        return [
            _mem(f"final_{norm}", 2 * tok),
            _gemm("logits", T, V // t, h, e),                   # (b*s, h) x (h, V/t)
            *ce,
        ]
    # output_bwd: softmax minus one-hot, scaled by the loss gradient in place, then the copy
    # back to the half-precision logits' gradient (Transformer Engine: the forward's
    # half-precision gradient scaled in place)
    if fusion == "te":
        ce_bwd = [_mem("ce_te_grad_scale", 2 * e * cells)]
    else:
        ce_bwd = [_mem("ce_grad_scale", 8 * cells)] + (
            [_mem("ce_grad_to_half", to_fp32 * cells)] if to_fp32 else [])
    return [
        *ce_bwd,
        _gemm("logits_dgrad", T, h, V // t, e), _gemm("logits_wgrad", V // t, h, T, e),
        _mem("wgrad_accumulate", acc * V * h // t),
        _mem(f"final_{norm}_bwd", 4 * tok),
    ]


def cross_entropy_fusion(plan: ParallelPlan) -> str:
    """The loss's cross-entropy kernels: ``unfused`` (Megatron's default, one kernel per step on
    an fp32 copy), or with ``plan.cross_entropy_loss_fusion`` its
    ``cross_entropy_fusion_impl``, ``native`` or ``te`` (the op key's ``ce`` column)."""
    if getattr(plan, "cross_entropy_loss_fusion", False) is not True:
        return "unfused"
    return str(getattr(plan, "cross_entropy_fusion_impl", "native") or "native")


def _cp_all_gather_core(b: int, s: int, cp: int, heads: int, groups: int, dh: int, e: int,
                        step_flops: float) -> tuple[list[Kernel], list[Kernel]]:
    """The attention core of Megatron-Core's all-gather context parallelism (``--cp-comm-type
    all_gather``; Transformer Engine's ``AttnFuncWithCPAndKVAllGather``, the Llama 3 paper's
    Sec. 3.3.2), forward and backward kernel lists for a rank of ``s`` tokens (``s_full/cp``,
    its two load-balanced chunks), ``heads`` / ``groups`` its query and K/V heads, ``dh`` the
    head size, ``e`` bytes per element, ``step_flops`` the FLOPs of one causal ``s x s``
    FlashAttention pass (the ring's step).

    The all-gather (communication, timed by the graph) leaves the whole sequence's K and V on
    every rank; TE puts its ``2*cp`` chunks in sequence order (an index_select of each: one
    read and one write of the gathered K and V). Each of the rank's two chunks of ``s/2``
    queries then attends to the keys up to its own end in one FlashAttention kernel (the two on
    two streams; their outputs copied into the output, one read and one write of it): as many
    query-key pairs as the ring's ``cp`` causal steps, ``cp * step_flops`` in all, half per
    chunk on the rank average (chunk ``r`` and ``2cp-1-r`` attend ``r+1/2`` and ``2cp-r-1/2``
    chunks of keys). The backward gathers K and V again (TE keeps only the rank's own), runs
    the two chunks' backward kernels into a zeroed whole-sequence dK and dV (write, then
    read and write per chunk), and puts those back in chunk order (one read and one write)
    before their reduce-scatter (communication)."""
    kv_all = e * b * cp * s * dh * 2 * groups  # the gathered K and V
    q = e * b * s * dh * heads  # the rank's queries (and its output)
    half_q, mean_kv = s // 2, cp * s // 2  # a chunk's queries; the keys it attends to, on average
    io = float(e * b * dh * (half_q * 2 * heads + mean_kv * 2 * groups))
    fwd = [_mem("cp_ag_reorder", 2 * kv_all),
           *[Kernel("flash_attn", cp * step_flops / 2, io, half_q, mean_kv, dh, b * heads)] * 2,
           _mem("cp_ag_out_copy", 2 * q)]
    bwd = [_mem("cp_ag_reorder", 2 * kv_all), _mem("cp_ag_grad_zero", kv_all),
           *[Kernel("flash_attn_bwd", 2.5 * cp * step_flops / 2, 2 * io, half_q, mean_kv, dh,
                    b * heads)] * 2,
           _mem("cp_ag_grad_accumulate", 2 * kv_all), _mem("cp_ag_grad_reorder", 2 * kv_all)]
    return fwd, bwd


def attended_pairs(s: int, w: int = 0) -> float:
    """Query-key pairs a causal FlashAttention pass computes over ``s`` tokens, in the causal
    count's convention (the area under the mask: ``s^2/2`` for full causal attention,
    FlashAttention-2's FLOP count); with a sliding window of ``w`` tokens (``w > 0``, each
    query attends to the ``w`` tokens before it) the area of the band, ``s w - w^2/2`` for
    ``w <= s`` (exact for the banded causal mask in that convention: the causal triangle less
    the triangle of side ``s - w`` beyond the window), ``s^2/2`` for ``w >= s``."""
    if w <= 0 or w >= s:
        return 0.5 * s * s
    return s * w - 0.5 * w * w


def window_layer_mask(model: ModelConfig) -> np.ndarray:
    """Which layers use sliding-window attention, bool array shape (L,): every layer when the
    model has a ``window_size`` and no ``window_attn_skip_freq``; with ``N``, layer ``i``
    (0-based) unless ``(i + 1) % N == 0`` (Megatron-Core ``is_layer_window_attention`` on the
    1-based layer number; GPT-OSS, ``N = 2``: windowed, full, windowed ...); none without a
    window."""
    L = model.num_layers
    w = getattr(model, "window_size", None)
    if not w:
        return np.zeros(L, bool)
    n = getattr(model, "window_attn_skip_freq", None)
    if not n:
        return np.ones(L, bool)
    return (np.arange(1, L + 1) % n) != 0


def _dense_layer_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of one layer.

    Megatron-LM tensor parallelism (Shoeybi et al. 2019): QKV and fc1
    column-parallel (weights and biases sharded), projection and fc2
    row-parallel (their biases replicated), the two norms replicated. With head
    size ``kv`` (``--kv-channels``, default ``h/a``): QKV is ``h (a + 2g) kv``
    (grouped-query attention: K and V have ``g`` heads; ``3h^2`` without it and
    at ``kv = h/a``), projection ``a kv h`` (``h^2``), fc1 ``h f`` (``2 h f``
    gated: SwiGLU has three ffn matrices), fc2 ``f h``; biases with
    ``add_bias_linear`` (QKV's also with ``add_qkv_bias``); LayerNorm ``2h``,
    RMSNorm ``h`` (no bias); QK-norm one norm over a head for the queries and
    one for the keys (``2 kv`` with RMSNorm). GPT: ``4h^2 + 2hf + 3h + f`` and
    ``6h``. Qwen3-8B (36 layers, h 4096, 32 heads of 128, 8 groups, f 12288,
    vocabulary 151936, untied, QK-norm): 8,190,735,360 in all (8.19 B, the
    Hugging Face model card).
    """
    attn_sharded, attn_replicated = _attention_parameters(model)
    mlp_sharded, mlp_replicated = _mlp_parameters(model, model.ffn)
    return attn_sharded + mlp_sharded, attn_replicated + mlp_replicated


def _attention_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of a layer's attention half: QKV, projection,
    their column-parallel biases, the projection's replicated bias, the input norm and QK-norm
    (see :func:`_dense_layer_parameters`); with ``softmax_type`` learnable the ``a`` attention
    sinks (Megatron-Core's ``softmax_offset``, one logit per head, sharded with the heads over
    ``t``; off-by-one's zero logit is a buffer, no parameter). Multi-head latent attention:
    :func:`_mla_attention_parameters`."""
    if getattr(model, "multi_latent_attention", False) is True:
        return _mla_attention_parameters(model)
    h, a, g = model.hidden_size, model.num_attention_heads, model.query_groups
    kv = model.head_dim
    qkv = (a + 2 * g) * kv
    bias = model.add_bias_linear
    sharded = h * qkv + a * kv * h + (qkv if bias or model.add_qkv_bias else 0)
    if getattr(model, "softmax_type", "vanilla") == "learnable":
        sharded += a  # attention sinks: one logit per head, split with the heads over t
    norm = 2 * h if model.normalization == "layernorm" else h
    qk_norm = 2 * norm // h * kv if model.qk_layernorm else 0  # over one head, shared
    return sharded, norm + (h if bias else 0) + qk_norm


def _mlp_parameters(model: ModelConfig, f: int) -> tuple[float, float]:
    """``(sharded over its tensor-parallel group, replicated)`` parameters of one MLP of hidden
    size ``f`` with the model's activation (fc1 ``h f``, ``2 h f`` gated; fc2 ``f h``; fc1's
    bias sharded, fc2's replicated with ``add_bias_linear``) and, for the layer's dense MLP, its
    pre-MLP norm (``2h`` LayerNorm, ``h`` RMSNorm) in the replicated part."""
    h = model.hidden_size
    fc1 = 2 * f if model.activation == "swiglu" else f
    bias = model.add_bias_linear
    norm = 2 * h if model.normalization == "layernorm" else h
    return h * fc1 + f * h + (fc1 if bias else 0), norm + (h if bias else 0)


def _dense_edge_parameters(model: ModelConfig, t: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((sharded, replicated) of the first stage, (sharded, replicated) of the last)`` outside
    the layers: the vocab-parallel word embedding ``V'h`` and, with learned positions, the
    ``s*h`` table first (RoPE has none); the final norm (``2h`` LayerNorm, ``h`` RMSNorm) last,
    with an untied output layer its own ``V'h`` too (a tied one shares the embedding: with
    ``p > 1`` the last stage holds a copy, see :func:`edge_params_per_gpu`). ``V'`` is padded
    for ``t``."""
    h = model.hidden_size
    V = padded_vocab_size(model.vocab_size, t)
    positions = model.seq_length * h if model.position_embedding == "learned" else 0.0
    norm = 2 * h if model.normalization == "layernorm" else h
    output = 0.0 if model.tied_embeddings else V * h
    return (V * h, positions), (output, norm)


def _dense_forward_flops_per_token(model: ModelConfig, t: int) -> tuple[float, float, float]:
    """``(per layer, attention core per layer, output layer)`` forward FLOPs per token.

    Every GEMM at 2 FLOPs per multiply-add, with head size ``kv`` (``h/a`` by
    default): QKV ``2h(a + 2g)kv`` (``6h^2`` without GQA), projection ``2 a kv h``
    (``2h^2``), MLP ``4hf`` (``6hf`` gated), scores and values ``4 s a kv``
    (``4sh``) over the full ``s x s`` (the attention core, what selective
    recomputation redoes; Megatron counts it unmasked); output layer ``2hV'``
    with the padded vocabulary. GPT: ``8h^2 + 4hf + 4sh`` (Narayanan et al.
    2021, Eq. 3; Megatron counts the padded ``V``).
    """
    h = model.hidden_size
    V = padded_vocab_size(model.vocab_size, t)
    linear, core = attention_forward_flops_per_token(model)
    mlp = (6 if model.activation == "swiglu" else 4) * h * model.ffn
    return linear + mlp + core, core, 2 * h * V


def attention_forward_flops_per_token(model: ModelConfig) -> tuple[float, float]:
    """``(linear layers, core)`` forward FLOPs per token of one layer's attention.

    Multi-head or grouped-query attention with head size ``kv``: QKV ``2h(a + 2g)kv`` and
    projection ``2 a kv h``; core ``4 s a kv`` (scores and values over the full ``s x s``,
    Megatron's unmasked count). Multi-head latent attention: :func:`mla_forward_flops_per_token`.
    """
    if getattr(model, "multi_latent_attention", False) is True:
        return mla_forward_flops_per_token(model)
    h, s, a, g = model.hidden_size, model.seq_length, model.num_attention_heads, model.query_groups
    kv = model.head_dim
    return 2 * h * (a + 2 * g) * kv + 2 * a * kv * h, 4 * s * a * kv


def _dense_activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str,
                                      mlp: float | None = None) -> float:
    """Activation bytes one layer keeps for its backward, per micro-batch, on one GPU.

    ``mlp`` replaces the MLP's term (``4f/h``, ``6f/h`` gated; see below) for an MoE layer,
    whose dense MLP is its shared experts' (:func:`moe_activation_bytes_per_layer`).

    Korthikanti et al. 2022, Table 2 (16-bit activations; scaled by ``e/2`` for fp32):

    ========================  ===================================  ==========================
    mode                      tensor parallel                      + sequence parallel
    ========================  ===================================  ==========================
    ``none``                  ``sbh (10 + 24/t + 5as/(ht))``       ``sbh/t (34 + 5as/h)``
    ``selective``             ``sbh (10 + 24/t)``                  ``34 sbh/t``
    ``full`` (checkpointed)   ``2 sbh`` (the layer's input)        ``2 sbh/t``
    ========================  ===================================  ==========================

    The ``24`` is Q, K, V and the projection's input (``8``) plus the MLP's
    fc1 output and fc2 input (``4f/h``, ``16`` at ``f = 4h``); written for any
    ``f`` here. Family changes: with grouped-query attention and FlashAttention
    K and V keep ``g`` heads (``4 + 4g/a`` for Q, K, V and the projection
    input; the unfused path keeps K and V expanded to ``a`` heads); a SwiGLU
    MLP keeps its ``2f`` wide fc1 output and the ``f`` wide product (``6f/h``);
    FlashAttention keeps no ``s x s`` tensor (no ``5as/h`` term; it recomputes
    the scores in the backward). RMSNorm keeps its input as LayerNorm does;
    RoPE keeps nothing (a rotation's gradient needs no input); QK-norm keeps
    its inputs, Q and K (``2 + 2g/a``). A head size ``kv`` other than ``h/a``
    (``--kv-channels``) scales these Q, K, V and projection-input terms by
    ``a kv / h`` (they are ``a kv`` and ``g kv`` wide, not ``h`` and ``g h/a``);
    the ``s x s`` terms do not depend on it.

    FP8 (Transformer Engine saves a linear layer's input for its wgrad as the FP8 copy the
    forward quantized, 1 byte per element; TE ``Linear`` / ``LayerNormLinear``): QKV's and
    fc1's inputs ``2 -> 1`` each (the ``10`` becomes ``8``), fc2's input ``2f/h -> f/h``, the
    projection's input ``2 -> 1`` except with FlashAttention and no recomputation, whose
    kernel keeps that tensor (its output) in BF16 anyway: ``+1`` for the FP8 copy. The rest
    (norm inputs, Q, K, V, activation inputs, masks, the checkpointed layer input) stays BF16.
    In an MoE layer the router keeps the second norm's output in BF16 (its gate is not a TE
    module): only QKV's input saves (``10 -> 9``), and the shared experts' FP8 copy of that
    tensor adds it back (``10``); their fc2 input is ``mlp/(4 or 6)`` of ``mlp``.
    Context parallelism: every term with ``s -> s/cp``
    (each rank keeps its own tokens' activations; ring attention needs FlashAttention, so
    no ``s x s`` term; the exchange's K/V buffers are transient, one layer's at a time:
    :func:`cp_exchange_buffer_bytes`, added by :func:`stage_memory_arrays`).

    Selective recomputation by module (Megatron-Core ``--recompute-modules``,
    :func:`core.plan.config.recompute_modules`): ``core_attn`` drops the ``5as/h`` term (the
    table's ``selective`` row); without it the unfused core keeps that term as with ``none``;
    ``layernorm`` drops the outputs of the norms that are modules of their own
    (:func:`norms_separate`; ``CheckpointWithoutOutput`` discards them and the backward runs
    the norms again), ``2`` each of the ``10``: both on the unfused (local spec) path; on the
    flash (Transformer Engine spec) path the pre-MLP norm of an MoE layer and the input norm
    with MLA only, so a dense GQA layer keeps both. ``mlp`` checkpoints the dense MLP on its
    input and drops its fc1 and activation outputs (``4f/h``, ``6f/h`` gated); on the flash
    path that input is the residual (kept anyway: the fused norm's input), so fc1's fused norm
    output (``2``) goes too, while the local spec's checkpoint keeps the norm output; in an
    MoE layer ``moe`` and ``shared_experts`` drop the shared experts' share
    (the routed part in :func:`moe_activation_bytes_per_layer`). Under FP8 each drops what the
    tensor costs there (the linears that read a recomputed output save their original input,
    Megatron-Core ``set_save_original_input``, freed with it; a checkpointed module's FP8
    copies are not kept): ``layernorm`` the pre-MLP norm's ``2`` (the router's BF16) plus the
    shared experts' FP8 copy, the MLA input norm's two FP8 copies; ``mlp`` fc1's FP8 copy,
    fc1's output and fc2's FP8 input.
    """
    if mode == "selective_op":  # torchtitan's per-op checkpointing: what its policy saves
        return _selective_op_activation_bytes(model, plan)
    s, b, h, a = model.seq_length, plan.micro_batch_size, model.hidden_size, model.num_attention_heads
    s //= plan.context_parallel  # the rank's tokens (context parallelism, Megatron-Core)
    t = plan.tensor_parallel
    scale = DTYPE_BYTES[tensor_dtype(plan.precision)] / 2
    sbh = s * b * h
    sp = plan.sequence_parallel
    flash = model.attention_kernel == "flash"
    mods = recompute_modules(plan) if mode == "selective" else ()
    mla = getattr(model, "multi_latent_attention", False) is True
    base = 10.0
    if mla:  # multi-head latent attention: its heads and latents (_mla_activation_terms)
        attn, latent = _mla_activation_terms(model, plan, mods)
        base += latent
        proj_width = a * model.v_head_dim  # the projection's input: a heads of v_head_dim
    else:
        attn = 4 + 4 * model.query_groups / a if flash else 8
        if model.qk_layernorm:  # the norms keep their inputs, Q and K before the norm
            attn += 2 + 2 * model.query_groups / a
        attn *= a * model.head_dim / h  # heads of kv_channels: Q, K, V a kv and g kv wide
        proj_width = a * model.head_dim  # the projection's input is a kv wide
    per_f = 6 if model.activation == "swiglu" else 4
    moe = mlp is not None
    if mlp is None:
        mlp = per_f * model.ffn / h
    split = attn + mlp  # 24 for GPT
    # what the two norms' outputs cost here (QKV's and fc1's inputs), and the MLP's term
    norm_in, norm_mlp, mlp_kept, shared_copy = 2.0, 2.0, mlp, 0
    fp8 = plan.precision == "fp8"
    if fp8:  # TE keeps the linear layers' inputs in FP8 (1 byte, not 2)
        # QKV's input (the first norm's output) 2 -> 1 (MLA: two TE linears read it, two FP8
        # copies: 2 -> 2); fc1's (the second's) 2 -> 1, but in an MoE layer the router keeps
        # that tensor in BF16 (its gate is a plain BF16 linear), so the shared experts' FP8 copy
        # adds 1 (and without shared experts nothing changes). With a recipe other than delayed
        # scaling Megatron-Core has the shared experts' fc1 save its original input instead
        # (shared_experts.py: set_save_original_input unless they are recomputed): no copy
        delayed = fp8_recipe(plan) == "delayed"
        qkv_in = 0 if mla else 1
        shared_copy = 1 if (moe and mlp and delayed) else 0
        if not moe:
            base -= qkv_in + 1  # QKV's and fc1's inputs
            norm_mlp = 1.0
        else:
            base -= qkv_in - shared_copy  # QKV's input; the shared experts' FP8 copy
            norm_mlp = 2.0 + shared_copy
        norm_in = 2.0 - qkv_in
        mlp_in = mlp / per_f  # fc2's input, f wide: 2f/h -> f/h
        mlp_kept = mlp - mlp_in
        # the projection's input: 2 -> 1; FlashAttention not recomputed keeps its output (the
        # same tensor) in BF16 for its own backward, so the FP8 copy adds 1. With a recipe other
        # than delayed scaling the projection saves its original BF16 input (attention.py:
        # set_save_original_input): 2, as in BF16
        if not delayed:
            proj = 0
        else:
            proj = 1 if (flash and (mode == "none" or "core_attn" not in mods)) else -1
        split += proj * proj_width / h - mlp_in
    # Megatron-Core's TE layer spec (the flash attention path) fuses the input norm into QKV
    # (TELayerNormColumnParallelLinear) except with MLA, and the pre-MLP norm into fc1 except in
    # MoE layers (the router reads it); ``layernorm`` recomputes the separate norms only
    # (transformer_layer.py: not IdentityOp); the local spec (the unfused path) has both
    # separate. Their outputs are then not kept: under FP8 the linears that read them save
    # their original BF16 input instead of an FP8 copy (set_save_original_input), freed with it.
    in_separate, mlp_separate = _norms_separate(flash, mla)
    shared_recomputed = moe and bool(mods) and ("moe" in mods or "shared_experts" in mods)
    if "layernorm" in mods:  # (the shared experts' copy once: dropped below when recomputed)
        base -= (norm_in if in_separate else 0.0) + (
            norm_mlp - (shared_copy if (fp8 and shared_recomputed) else 0.0)
            if (moe or mlp_separate) else 0.0)
    if mla and fp8 and not model.q_lora_rank:
        # without query compression (q_lora_rank empty) the query projection reads the input
        # norm's output inside the up projections' checkpoint (Megatron-Core
        # multi_latent_attention.py: q_compressed is the hidden states): only the key/value
        # down projection saves its original input under layernorm recomputation, so the query
        # projection's FP8 copy stays (1 of the 2); mla_up_proj keeps the BF16 hidden states
        # (2) as the checkpoint's input instead of that FP8 copy (1); with both, the norm's
        # output is discarded and the query projection runs inside the checkpoint: nothing kept
        if ("layernorm" in mods and in_separate) != ("mla_up_proj" in mods):
            base += 1.0
    if mla and "mla_up_proj" in mods and sp and t > 1:
        # the checkpoint keeps the rotary key gathered to the whole sequence (Megatron-Core
        # gathers k_pos_emb before it): 2 pe per token on every rank, not on s/t tokens
        base += 2 * model.qk_pos_emb_head_dim * (t - 1) / h
    if "mlp" in mods and not moe:  # the dense MLP under a checkpoint of its input
        if not mlp_separate:  # the residual (kept anyway): fc1's fused norm output is not kept
            base -= norm_mlp
        split -= mlp_kept  # nor fc1's and the activation's outputs
    elif shared_recomputed:
        split -= mlp_kept  # the shared experts' fc1 and activation outputs (fc2's input)
        if fp8:
            base -= shared_copy  # and their FP8 copy of their input (the router keeps the BF16)
    if mode == "full":
        out = 2 * sbh / t if sp else 2 * sbh
    elif mode in ("none", "selective"):
        # the unfused core keeps its s x s tensors unless selective recomputation redoes it
        ss = 5 * a * s / h if (not flash and (mode == "none" or "core_attn" not in mods)) else 0.0
        out = sbh / t * (base + split + ss) if sp else sbh * (base + (split + ss) / t)
    else:
        raise ValueError(f"recompute mode {mode!r} is not one of none, selective, full")
    return out * scale


# --------------------------------------------------------------------------- multi-head latent attention

def norms_separate(model: ModelConfig) -> tuple[bool, bool]:
    """Whether a layer's input norm and a dense layer's pre-MLP norm are modules of their own,
    ``(input, pre_mlp)`` (an MoE layer's pre-MLP norm always is: the router reads its output).

    Megatron-Core 0.19 ``gpt_layer_specs``: the Transformer Engine spec, which the FlashAttention
    path (``model.attention_kernel = "flash"``) stands for, fuses the input norm into QKV
    (``TELayerNormColumnParallelLinear``; separate with MLA, whose down projections read it) and
    the dense pre-MLP norm into fc1 (``IdentityOp``); the local spec, Megatron's old unfused
    path, keeps both separate. ``--recompute-modules layernorm`` recomputes only the separate
    ones (``TransformerLayer``: a norm that is not ``IdentityOp``)."""
    return _norms_separate(model.attention_kernel == "flash",
                           getattr(model, "multi_latent_attention", False) is True)


def _norms_separate(flash: bool, mla: bool) -> tuple[bool, bool]:
    """:func:`norms_separate` of the flash path and MLA flags (the activation formulas' own)."""
    return (not flash) or mla, not flash


def _mla_dims(model_or_key: Any) -> tuple[int, int, int, int, int]:
    """``(q_lora_rank or 0, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim)`` of a
    model or of an op key (:data:`MLA_KEY`)."""
    if isinstance(model_or_key, Mapping):
        k = model_or_key
        return int(k["qlr"]), int(k["kvlr"]), int(k["qkd"]), int(k["qpe"]), int(k["vd"])
    m = model_or_key
    return (int(m.q_lora_rank or 0), int(m.kv_lora_rank), int(m.qk_head_dim),
            int(m.qk_pos_emb_head_dim), int(m.v_head_dim))


def _mla_attention_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of a layer's multi-head latent attention.

    Megatron-Core ``MLASelfAttention`` with the Transformer Engine layer spec
    (``gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(multi_latent_attention=True)``):
    the down projections are ``TELinear`` with ``parallel_mode="duplicated"`` (every
    tensor-parallel rank holds them whole: replicated), the up projections column-parallel and
    the output projection row-parallel (sharded over ``t``, their heads split). With ``a``
    heads, ranks ``q_l`` (0: no query compression), ``kv_l`` and head sizes ``d_qk`` (without
    rotary), ``d_pe`` (rotary), ``d_v``:

    * sharded: query up-projection ``q_l a (d_qk + d_pe)`` (without compression the query
      projection ``h a (d_qk + d_pe)``), key/value up-projection ``kv_l a (d_qk + d_v)``,
      output projection ``a d_v h``;
    * replicated: query down-projection ``h q_l``, key/value down-projection
      ``h (kv_l + d_pe)`` (the rotary key is shared by the heads), the latent norms with
      ``qk_layernorm`` (Megatron's ``q_layernorm`` over ``q_l``, ``kv_layernorm`` over ``kv_l``;
      twice that with LayerNorm), the input norm and the projection's bias with
      ``add_bias_linear`` (MLA's other linears have none).

    DeepSeek-V3 (h 7168, 128 heads, q_l 1536, kv_l 512, 128 + 64, v 128, RMSNorm, QK-norm):
    171,966,464 sharded and 15,148,032 replicated per layer (187,114,496 with the input norm).
    """
    h, a = model.hidden_size, model.num_attention_heads
    ql, kvl, qk, pe, dv = _mla_dims(model)
    q = ql * a * (qk + pe) if ql else h * a * (qk + pe)
    sharded = q + kvl * a * (qk + dv) + a * dv * h
    w = 2 if model.normalization == "layernorm" else 1  # weights per normalized channel
    latent_norms = w * (ql + kvl) if model.qk_layernorm else 0
    replicated = (h * ql + h * (kvl + pe) + latent_norms + w * h
                  + (h if model.add_bias_linear else 0))
    return sharded, replicated


def mla_forward_flops_per_token(model: ModelConfig) -> tuple[float, float]:
    """``(linear layers, core)`` forward FLOPs per token of multi-head latent attention (2 FLOPs
    per multiply-add; names as :func:`_mla_attention_parameters`).

    Linear: query ``2 q_l (h + a (d_qk + d_pe))`` (without compression ``2 h a (d_qk + d_pe)``),
    key/value ``2 h (kv_l + d_pe) + 2 kv_l a (d_qk + d_v)``, projection ``2 a d_v h``; core
    ``2 s a (d_qk + d_pe) + 2 s a d_v`` (scores over heads of ``d_qk + d_pe`` channels, values
    of ``d_v``; the full ``s x s`` as this module counts dense attention). Megatron-LM's
    ``num_floating_point_operations`` counts the same GEMMs, but halves the core for the causal
    mask and adds one FLOP per latent channel for the norms.
    """
    h, s, a = model.hidden_size, model.seq_length, model.num_attention_heads
    ql, kvl, qk, pe, dv = _mla_dims(model)
    q = 2 * ql * (h + a * (qk + pe)) if ql else 2 * h * a * (qk + pe)
    kv = 2 * h * (kvl + pe) + 2 * kvl * a * (qk + dv)
    return q + kv + 2 * a * dv * h, 2 * s * a * (qk + pe + dv)


def mla_up_proj_forward_flops_per_token(model: ModelConfig) -> float:
    """Forward FLOPs per token of MLA's up-projections (what recompute module ``mla_up_proj``
    runs again): ``2 q_l a (d_qk + d_pe) + 2 kv_l a (d_qk + d_v)`` (without query compression
    the query projection ``2 h a (d_qk + d_pe)``)."""
    h, a = model.hidden_size, model.num_attention_heads
    ql, kvl, qk, pe, dv = _mla_dims(model)
    return 2 * (ql or h) * a * (qk + pe) + 2 * kvl * a * (qk + dv)


def mla_tp_latent_width(model: ModelConfig) -> int:
    """Channels per token of MLA's tensor-parallel collective on the attention's input side,
    in place of the dense layer's ``h``: the up projections' inputs, ``(q_l or h) + kv_l``,
    and the rotary key ``d_pe``.

    Megatron-Core ``MLASelfAttention``: with sequence parallelism the replicated down
    projections run on the rank's ``s/t`` tokens and the column-parallel up projections
    all-gather their latents (and the rotary key is all-gathered), instead of the dense
    layer's all-gather of the ``h``-wide input; the backward reduce-scatters their gradients.
    Without sequence parallelism the backward all-reduces the gradients of the up projections'
    inputs and of the rotary key (identical latents on every rank) instead of the ``h``-wide
    input gradient. Without query compression the query projection's input is the ``h``-wide
    hidden state."""
    ql, kvl, _, pe, _ = _mla_dims(model)
    return (ql or model.hidden_size) + kvl + pe


#: Kernel-name prefixes of MLA's up-projection part (the latent norms, the up-projections with
#: their FP8 quantization, RoPE and the assembly of Q, K, V): what ``mla_up_proj`` recomputes.
_MLA_UP_PREFIXES = ("q_latent_", "kv_latent_", "q_up_proj", "kv_up_proj", "q_proj",
                    "mla_rope_concat")


def _mla_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of a multi-head latent attention op (``attention_fwd``,
    ``attention_bwd`` and the core's ``attention_core_fwd/bwd`` of a key with ``kvlr > 0``).

    Megatron-Core ``MLASelfAttention`` (``get_query_key_value_tensors``, TE layer spec), per
    micro-batch of ``T = b s`` tokens, ``a/t`` heads per rank: the input norm; the down
    projections, replicated ``TELinear`` layers, on the rank's ``T_in`` tokens (``T/t`` with
    sequence parallelism: the input is not gathered; ``T`` without, every rank computes them
    whole): query ``(T_in, h) x (h, q_l)``, key/value ``(T_in, h) x (h, kv_l + d_pe)``; the
    latent norms with QK-norm (key ``qkn``; Megatron's ``q_layernorm`` / ``kv_layernorm``,
    fused into the up projections' ``TELayerNormColumnParallelLinear``) on ``T_in`` tokens;
    the column-parallel up projections on the ``T`` gathered tokens, query ``(T, q_l) x (q_l,
    a (d_qk + d_pe)/t)`` (without compression the query projection from ``h``), key/value
    ``(T, kv_l) x (kv_l, a (d_qk + d_v)/t)``; RoPE on the rotary channels and the assembly of
    Q and K (``a/t`` heads of ``d_qk + d_pe``, the rotary key expanded to every head) and V
    (``d_v``), one kernel reading the up projections' outputs and writing Q, K, V (Megatron's
    fused MLA RoPE kernels); the core in FlashAttention (TE fused attention; causal, half the
    ``s x s`` products: ``2 b (a/t) (s^2/2) (d_qk + d_pe + d_v)`` FLOPs forward, 2.5x that
    backward as the dense core); the row-parallel output projection ``(T, a d_v/t) x (a
    d_v/t, h)``. The backward runs each GEMM's input and weight gradients and accumulates the
    weight gradients; FP8 quantizes each linear layer's input and output gradient as the dense
    layer's (:func:`linear_kernels`). The attention is FlashAttention only (validation
    refuses MLA with the unfused kernel and with context parallelism).
    """
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    acc = GRAD_ACCUMULATE_BYTES_PER_PARAM[dtype]
    linear, cast = linear_kernels(key)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    heads = int(key["a"]) // t
    ql, kvl, qk, pe, dv = _mla_dims(key)
    dqk = qk + pe
    T = b * s
    sp = bool(key.get("sp"))
    T_in = T // t if sp else T  # the down projections' tokens (replicated layers)
    tok = T_in * h * e
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    qkn = bool(int(key.get("qkn", 0) or 0))
    q_cols, kv_cols, ctx = heads * dqk, heads * (qk + dv), heads * dv
    pairs = attended_pairs(s)
    flops = 2.0 * b * heads * pairs * (dqk + dv)
    core = [Kernel("flash_attn", flops, float(e * T * heads * (2 * dqk + 2 * dv)), s, s, dqk,
                   b * heads)]
    core_bwd = [Kernel("flash_attn_bwd", 2.5 * flops, float(e * T * heads * (4 * dqk + 4 * dv)),
                       s, s, dqk, b * heads)]
    if op == "attention_core_fwd":
        return core
    if op == "attention_core_bwd":
        return core_bwd
    # read the up projections' outputs and the rotary key, write Q, K (a/t heads of d_qk + d_pe)
    # and V (d_v)
    assemble = e * T * (q_cols + kv_cols + pe + 2 * q_cols + ctx)
    q_norm = [_mem(f"q_latent_{norm}", 2 * T_in * ql * e)] if (qkn and ql) else []
    kv_norm = [_mem(f"kv_latent_{norm}", 2 * T_in * kvl * e)] if qkn else []
    if ql:
        q_up = [*q_norm, *cast("q_up_proj_input", T * ql),
                linear("q_up_proj", T, q_cols, ql)]             # (b*s, q_l) x (q_l, a dqk/t)
    else:
        q_up = [*cast("q_proj_input", T * h), linear("q_proj", T, q_cols, h)]
    if op == "attention_fwd":
        return [
            _mem(norm, 2 * tok),
            *cast("down_proj_input", T_in * h),
            *([linear("q_down_proj", T_in, ql, h)] if ql else []),   # (T_in, h) x (h, q_l)
            linear("kv_down_proj", T_in, kvl + pe, h),                # (T_in, h) x (h, kv_l+pe)
            *q_up,
            *kv_norm, *cast("kv_up_proj_input", T * kvl),
            linear("kv_up_proj", T, kv_cols, kvl),                   # (b*s, kv_l) x (kv_l, .)
            _mem("mla_rope_concat", assemble),
            *core,
            *cast("proj_input", T * ctx),
            linear("proj", T, h, ctx),                               # (b*s, a dv/t) x (., h)
        ]
    weights = (h * ql + h * (kvl + pe) + (ql * q_cols if ql else h * q_cols) + kvl * kv_cols
               + ctx * h)
    if ql:
        q_up_bwd = [*cast("q_up_proj_grad", T * q_cols),
                    linear("q_up_proj_dgrad", T, ql, q_cols), linear("q_up_proj_wgrad", q_cols, ql, T),
                    *([_mem(f"q_latent_{norm}_bwd", 4 * T_in * ql * e)] if qkn else [])]
    else:
        q_up_bwd = [*cast("q_proj_grad", T * q_cols),
                    linear("q_proj_dgrad", T, h, q_cols), linear("q_proj_wgrad", q_cols, h, T)]
    return [
        _mem("bias_dropout_add_bwd", 2 * tok),
        *cast("proj_grad", T * h),
        linear("proj_dgrad", T, ctx, h), linear("proj_wgrad", ctx, h, T),
        _mem("wgrad_accumulate", acc * weights),
        *core_bwd,
        _mem("mla_rope_concat_bwd", assemble),
        *cast("kv_up_proj_grad", T * kv_cols),
        linear("kv_up_proj_dgrad", T, kvl, kv_cols), linear("kv_up_proj_wgrad", kv_cols, kvl, T),
        *([_mem(f"kv_latent_{norm}_bwd", 4 * T_in * kvl * e)] if qkn else []),
        *q_up_bwd,
        *cast("down_proj_grad", T_in * (ql + kvl + pe)),
        *([linear("q_down_proj_dgrad", T_in, h, ql), linear("q_down_proj_wgrad", ql, h, T_in)]
          if ql else []),
        linear("kv_down_proj_dgrad", T_in, h, kvl + pe),
        linear("kv_down_proj_wgrad", kvl + pe, h, T_in),
        _mem(f"{norm}_bwd", 4 * tok),
    ]


def _mla_activation_terms(model: ModelConfig, plan: ParallelPlan, mods: tuple[str, ...]
                          ) -> tuple[float, float]:
    """``(attention, latent)`` activation terms of multi-head latent attention in the units of
    :func:`_dense_activation_bytes_per_layer` (bytes per token over ``h``, 16-bit tensors):
    ``attention`` is split over ``t`` (the ``a/t`` heads), ``latent`` is kept whole by every
    tensor-parallel rank without sequence parallelism (the replicated down projections'
    outputs) and split with it (each rank's ``s/t`` tokens), as the table's ``10``.

    What Megatron-Core's ``MLASelfAttention`` saves for the backward (TE layer spec):

    * attention: the core's Q and K (``a (d_qk + d_pe)`` each), V and the output, which is
      the projection's input (``a d_v`` each): ``2a (2 (d_qk + d_pe) + 2 d_v)/h``;
    * latent: each latent the up projections read, ``q_l + kv_l`` channels, twice with
      QK-norm (the norm's input and output, ``TELayerNormColumnParallelLinear``): ``4 (q_l +
      kv_l)/h``, else ``2 (q_l + kv_l)/h``. RoPE and the assembly of Q, K, V keep nothing.

    Selective recomputation ``mla_up_proj`` (Megatron-Core ``CheckpointWithoutOutput`` around
    the up projections and RoPE): Q, K and V are freed after the core's forward and rebuilt in
    the backward (attention ``2a d_v/h``: the output only), and the checkpoint keeps its
    inputs, the latents before their norms and the rotary key: ``2 (q_l + kv_l + d_pe)/h``.

    FP8 (``precision="fp8"``): the up projections keep their input as TE's FP8 copy (1 byte:
    ``3 (q_l + kv_l)/h`` with QK-norm, ``(q_l + kv_l)/h`` without); the checkpoint's inputs
    stay BF16. (The input norm's output is read by two TE linears, the two down projections,
    or the query projection and the key/value down projection, each keeping its FP8 copy:
    ``2`` as in BF16, applied by the caller, as is the projection input's FP8 rule.)
    """
    h, a = model.hidden_size, model.num_attention_heads
    ql, kvl, qk, pe, dv = _mla_dims(model)
    fp8 = plan.precision == "fp8"
    if "mla_up_proj" in mods:
        return 2 * a * dv / h, 2 * (ql + kvl + pe) / h
    attention = 2 * a * (2 * (qk + pe) + 2 * dv) / h
    if model.qk_layernorm:
        latent = (3 if fp8 else 4) * (ql + kvl) / h
    else:
        latent = (1 if fp8 else 2) * (ql + kvl) / h
    return attention, latent


# --------------------------------------------------------------------------- mixture of experts

#: Ops of an MoE layer's MLP half (Megatron-Core ``MoELayer`` with the all-to-all token
#: dispatcher, ``--moe-token-dispatcher-type alltoall``), in forward order: the router
#: (pre-MLP norm, gate GEMM ``h x E``, softmax and top-k), the permutation of each token's
#: ``k`` copies by expert, the experts (grouped GEMMs), the un-permutation (weighted sum of
#: the copies), the shared experts (a dense MLP). The expert all-to-alls and the expert
#: tensor-parallel collectives between them are communication (:mod:`core.sim.graph`).
MOE_OPS = ("router_fwd", "router_bwd", "moe_permute_fwd", "moe_permute_bwd", "experts_fwd",
           "experts_bwd", "moe_unpermute_fwd", "moe_unpermute_bwd", "shared_experts_fwd",
           "shared_experts_bwd")
#: Key columns of the MoE ops: the dense ones and ``E`` experts, ``topk``, ``fe`` the expert
#: MLP's hidden size, ``ep`` expert-parallel size, ``etp`` expert tensor-parallel size,
#: ``ns`` shared experts, ``imb`` tokens of the busiest rank's experts over the mean.
MOE_KEY = ("b", "s", "h", "t", "dtype", "act", "norm", "E", "topk", "fe", "ep", "etp", "ns",
           "imb")


def flex_remote_node_copies(num_experts: int, top_k: int, num_nodes: int,
                            num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected copies of one token that leave its node under a node-deduplicating dispatcher
    (Megatron-Core's ``flex`` dispatcher: DeepEP / HybridEP, which send a token once to each
    other node that holds one of its experts and forward it there over NVLink), with the
    ``num_experts`` experts spread evenly over ``num_nodes`` nodes and each token routed to
    ``top_k`` distinct experts uniformly (balanced routing):
    ``(N - 1) (1 - C(E - E/N, k) / C(E, k))``, the other nodes times the chance that at least
    one of the token's experts is there. The plain all-to-all sends ``k (N - 1)/N`` copies
    (every expert's copy): Qwen3-30B-A3B (E = 128, k = 8) over 2 nodes, 0.996 against 4.

    Node-limited routing (``num_groups`` G, ``group_topk`` M; Megatron-Core
    ``moe_utils.group_limited_topk``, DeepSeek-V3's "each token is sent to at most 4 nodes"):
    the experts split into G contiguous groups of ``s = E/G``; a token's M groups are those with
    the highest sum of their top ``k/M`` scores, and its k experts the top k among them, so
    nearly every chosen group supplies about ``k/M`` of them. Modelled so: the M groups
    uniform (balanced routing), ``k/M`` experts uniform within each (with ``k = qM + r``, r
    groups of ``q + 1``: each group misses a node holding ``o`` of its experts with
    ``((M - r) C(s - o, q) + r C(s - o, q + 1)) / (M C(s, q))`` on average). A node is missed
    with the mean over the ``C(G, M)`` group choices of the product of its groups' misses,
    ``e_M(miss_1 .. miss_G) / C(G, M)`` (the elementary symmetric polynomial, no enumeration);
    the copies are ``(N - 1)/N`` times the sum over the nodes of the chance to be reached (the
    token's own node is any of the N alike). With ``M = G`` (or no groups) the formula above.
    DeepSeek-V3 (E = 256, k = 8, G = 8, M = 4) over 8 nodes, a group per node: each chosen
    group's node is reached, ``7/8 * 4 = 3.5`` copies, against 4.63 without the limit and 7
    with the plain all-to-all (a simulation of Megatron's routing on uniform scores: 3.46).

    Raises
    ------
    ValueError
        ``num_nodes`` does not divide ``num_experts``, a size below 1, or groups that do not
        split the experts or hold fewer than ``top_k`` experts.
    """
    E, k, N = int(num_experts), int(top_k), int(num_nodes)
    if min(E, k, N) < 1 or E % N or k > E:
        raise ValueError(f"num_experts={E}, top_k={k}, num_nodes={N}: the nodes must split the "
                         "experts evenly and top_k be at most num_experts")
    if N == 1:
        return 0.0
    if not num_groups or num_groups == 1:
        miss = math.comb(E - E // N, k) / math.comb(E, k)  # none of the k experts on that node
        return (N - 1) * (1.0 - miss)
    G, M = int(num_groups), int(group_topk or num_groups)
    if E % G or not 1 <= M <= G or M * (E // G) < k:
        raise ValueError(f"num_groups={G}, group_topk={M}: the groups must split the "
                         f"{E} experts evenly and the chosen ones hold at least top_k={k}")
    if M == G:  # every group chosen: the top k of all experts
        return flex_remote_node_copies(E, k, N)
    return _group_limited_copies(E, k, N, G, M)


@lru_cache(maxsize=256)
def _group_limited_copies(E: int, k: int, N: int, G: int, M: int) -> float:
    """:func:`flex_remote_node_copies` with node-limited routing (cached)."""
    s = E // G
    expert = np.arange(E)
    overlap = np.zeros((N, G), np.int64)  # experts of node n in group g
    np.add.at(overlap, (expert // (E // N), expert // s), 1)
    q, r = divmod(k, M)

    def miss(n: int) -> np.ndarray:  # a group with o of a node's experts misses it, by o
        return np.array([math.comb(s - o, n) for o in range(s + 1)], float) / math.comb(s, n)
    per_group = ((M - r) * miss(q) + r * miss(min(q + 1, s))) / M  # (s + 1,)
    x = per_group[overlap]  # (N, G): each group's chance to miss each node
    e = np.zeros((N, M + 1))
    e[:, 0] = 1.0
    for g in range(G):  # elementary symmetric polynomials e_j of x[:, :g+1], j <= M
        e[:, 1:] = e[:, 1:] + e[:, :-1] * x[:, g:g + 1]
    reached = 1.0 - e[:, M] / math.comb(G, M)
    return (N - 1) / N * float(reached.sum())


def expert_tensor_parallel(plan: ParallelPlan) -> int:
    """Expert tensor-parallel size ``etp``: ``plan.expert_tensor_parallel``, or ``t`` when unset
    (Megatron-Core's ``--expert-tensor-parallel-size`` default)."""
    return plan.expert_tensor_parallel or plan.tensor_parallel


def expert_data_parallel(plan: ParallelPlan) -> int:
    """Expert-data-parallel size ``edp = t*cp*d / (etp*ep)``: the ranks that hold the same
    experts and reduce their gradients (Megatron-Core ``parallel_state``: the expert rank
    generator over tp-ep-dp-pp with ``world / (etp*ep*p)`` data-parallel ranks)."""
    cp = getattr(plan, "context_parallel", 1) or 1
    return max(1, plan.tensor_parallel * cp * plan.data_parallel
               // (expert_tensor_parallel(plan) * plan.expert_parallel))


def moe_layer_mask(model: ModelConfig) -> np.ndarray:
    """Which layers are MoE layers, bool array shape (L,): layer ``i`` (0-based) when the model
    has experts, ``i >= moe_first_dense_layers`` and ``i % moe_layer_frequency == 0``
    (Megatron-Core's ``--moe-layer-freq k`` pattern ``[1 if i % k == 0 else 0]``; Hugging Face
    DeepSeek's ``first_k_dense_replace`` and ``moe_layer_freq``). The others keep the dense MLP."""
    i = np.arange(model.num_layers)
    if not model.is_moe:
        return np.zeros(model.num_layers, bool)
    return (i >= model.moe_first_dense_layers) & (i % model.moe_layer_frequency == 0)


def num_moe_layers(model: ModelConfig) -> int:
    """How many layers :func:`moe_layer_mask` marks, in closed form (no per-layer array: the
    editor asks for sizes before they are checked): the multiples of ``moe_layer_frequency``
    from ``moe_first_dense_layers`` to ``L - 1``; 0 for a dense model."""
    if not model.is_moe:
        return 0
    k, first, L = model.moe_layer_frequency, model.moe_first_dense_layers, model.num_layers
    return max(0, (L - 1) // k - (-(-first // k)) + 1)


def moe_ffn(model: ModelConfig) -> int:
    """Hidden size of one expert's MLP: ``moe_ffn_hidden_size``, or the dense MLP's when unset."""
    return model.moe_ffn_hidden_size or model.ffn


@dataclass(frozen=True)
class MoeLayerParameters:
    """Parameters of one MoE layer by how they are split over the GPUs.

    ``sharded``: over ``t`` (attention and the shared experts' MLP); ``replicated``: norms,
    the router's ``h x E`` gate (Megatron-Core keeps it on every rank) and replicated biases;
    ``experts``: the ``E`` routed experts, split over ``ep * etp`` ranks; ``expert``: one
    routed expert.
    """

    sharded: float
    replicated: float
    experts: float
    expert: float


def moe_layer_parameters(model: ModelConfig) -> MoeLayerParameters:
    """Parameters of one MoE layer: the attention half (:func:`_attention_parameters`), the
    pre-MLP norm, the router gate ``h E`` (and its bias ``E`` with ``add_bias_linear``:
    Megatron-Core's ``TopKRouter``; GPT-OSS's router bias), ``E`` experts each an MLP of ``moe_ffn`` width
    with the model's activation (:func:`_mlp_parameters`; Mixtral: ``3 h f_e``) and the shared
    experts as one dense MLP of ``num_shared_experts * moe_ffn`` width (Megatron-Core
    ``SharedExpertMLP``)."""
    h, E = model.hidden_size, model.num_experts or 0
    fe = moe_ffn(model)
    attn_sh, attn_rep = _attention_parameters(model)
    expert_w, mlp_rep = _mlp_parameters(model, fe)  # mlp_rep: pre-MLP norm (+ fc2 bias)
    expert = expert_w + (h if model.add_bias_linear else 0)  # each expert's own fc2 bias
    norm = 2 * h if model.normalization == "layernorm" else h
    shared = _mlp_parameters(model, model.num_shared_experts * fe)[0] if model.num_shared_experts else 0
    shared_bias = h if (model.num_shared_experts and model.add_bias_linear) else 0
    router_bias = E if model.add_bias_linear else 0  # TopKRouter's bias (add_bias_linear)
    return MoeLayerParameters(attn_sh + shared, attn_rep + norm + h * E + router_bias + shared_bias,
                              E * expert, expert)


def _moe_forward_flops_per_token(model: ModelConfig) -> float:
    """Forward FLOPs per token of one MoE layer, counting the GEMMs a token passes through:
    the attention half as a dense layer's, the router ``2hE``, its ``k`` experts'
    ``4 h f_e`` each (``6 h f_e`` gated) and the shared experts' MLP (model FLOPs on the
    active parameters, as MFU of MoE models is reported)."""
    h, E, k = model.hidden_size, model.num_experts or 0, model.moe_top_k
    per_f = (6 if model.activation == "swiglu" else 4) * h
    dense_layer, _, _ = _dense_forward_flops_per_token(model, 1)
    attention = dense_layer - per_f * model.ffn
    return attention + 2 * h * E + per_f * moe_ffn(model) * (k + model.num_shared_experts)


def _moe_routed_rows(key: Mapping[str, Any]) -> float:
    """Token copies one GPU's experts process per micro-batch: ``b s k etp imb / t``.

    With balanced routing the ``d b s`` tokens of a step (``t`` ranks each) send ``k``
    copies each, spread evenly over ``E`` experts; each expert lives on ``edp = t d /
    (etp ep)`` replicas, split over ``etp`` ranks that all see its tokens: per GPU
    ``E/ep`` local experts of ``b s k etp ep / (E t)`` tokens; ``imb`` scales it to the
    busiest rank, which sets the step's time."""
    T = int(key["b"]) * int(key["s"])
    return T * int(key["topk"]) * int(key["etp"]) * float(key["imb"]) / int(key["t"])


def _moe_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of an MoE layer's op (:data:`MOE_OPS`).

    ``T = b s`` tokens; ``T_in = T/t`` enter the layer on a rank with sequence parallelism
    (``T`` without); ``R`` (:func:`_moe_routed_rows`) copies reach the rank's ``E/ep``
    experts, ``M = R ep / E`` each. Router: ``(T_in, h) x (h, E)`` GEMM, softmax and top-k
    in fp32 (read the logits, write probabilities, write ``k`` probabilities and indices);
    permutation: a gather of ``k`` copies of each token (read and write ``T_in k h``) and,
    with ``ep > 1``, the sort of the received chunks by local expert (read and write ``R h``);
    experts: Megatron-Core's grouped GEMM (``TEGroupedMLP``), ``E/ep`` GEMMs of ``M`` rows,
    fc1 ``(M, h) x (h, f_e/etp)`` (``2 f_e/etp`` gated), the activation, fc2 ``(M, f_e/etp)
    x (f_e/etp, h)``; un-permutation: the weighted sum of the copies (read ``T_in k h`` and
    the probabilities, write ``T_in h``); shared experts: a dense MLP of ``ns f_e`` width on
    the ``T`` tokens of the tensor-parallel group. The residual adds and the pre-MLP norm
    are those of the dense MLP (:func:`_dense_op_kernels`), split between the router and the
    un-permutation, so that with ``E = k = 1`` the MoE ops are the dense MLP's kernels plus
    the router's and the permutations'. FP8 (``dtype="fp8"``): the routed and shared
    experts' GEMMs run in FP8 with their quantization kernels, as the dense MLP's
    (:func:`linear_kernels`; TE's ``GroupedLinear`` in ``TEGroupedMLP``); the router's gate
    stays BF16 (a plain ``torch`` linear in Megatron-Core's ``TopKRouter``), and so do the
    permutations and the all-to-alls' tokens.
    """
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    acc = GRAD_ACCUMULATE_BYTES_PER_PARAM[dtype]
    linear, cast = linear_kernels(key)  # FP8 experts and shared experts (TE GroupedLinear)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    E, k, fe = int(key["E"]), int(key["topk"]), int(key["fe"])
    ep, etp, ns = int(key["ep"]), int(key["etp"]), int(key.get("ns", 0))
    T = b * s
    sp = bool(key.get("sp"))
    T_in = T / t if sp else T
    tok = T_in * h * e
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    gated = key.get("act") == "swiglu"
    R = _moe_routed_rows(key)
    local = E // ep
    M = R / local
    fc1 = (2 if gated else 1) * fe // etp
    inner = R * (fe // etp) * e
    sort = [_mem("moe_sort_chunks", 2 * R * h * e)] if ep > 1 else []
    if op == "router_fwd":
        return [_mem("bias_dropout_add", 3.5 * tok), _mem(norm, 2 * tok),
                _gemm("router", T_in, E, h, e),                     # (T_in, h) x (h, E)
                _mem("router_softmax_topk", T_in * (E * (e + 8) + 12 * k))]
    if op == "router_bwd":
        return [_mem("router_softmax_topk_bwd", T_in * E * (e + 8)),
                _gemm("router_dgrad", T_in, h, E, e), _gemm("router_wgrad", E, h, T_in, e),
                _mem("wgrad_accumulate", acc * h * E),
                _mem(f"{norm}_bwd", 4 * tok), _mem("bias_dropout_add_bwd", 2 * tok)]
    if op == "moe_permute_fwd":
        return [_mem("moe_permute", 2 * T_in * k * h * e + 8 * T_in * k), *sort]
    if op == "moe_permute_bwd":
        return [*sort, _mem("moe_permute_bwd", (k + 1) * T_in * h * e)]
    if op == "experts_fwd":
        return [*cast("experts_fc1_input", R * h),
                linear("experts_fc1", M, fc1, h, local),              # E/ep x (M, h) x (h, fc1)
                _mem("bias_swiglu", 3 * inner) if gated else _mem("bias_gelu", 2 * inner),
                *cast("experts_fc2_input", R * (fe // etp)),
                linear("experts_fc2", M, h, fe // etp, local)]       # E/ep x (M, fe/etp) x (., h)
    if op == "experts_bwd":
        return [*cast("experts_fc2_grad", R * h),
                linear("experts_fc2_dgrad", M, fe // etp, h, local),
                linear("experts_fc2_wgrad", fe // etp, h, M, local),
                _mem("bias_swiglu_bwd", 5 * inner) if gated else _mem("bias_gelu_bwd", 3 * inner),
                *cast("experts_fc1_grad", R * fc1),
                linear("experts_fc1_dgrad", M, h, fc1, local),
                linear("experts_fc1_wgrad", fc1, h, M, local),
                _mem("wgrad_accumulate", acc * local * (h * fc1 + h * fe // etp))]
    if op == "moe_unpermute_fwd":
        return [*sort, _mem("moe_unpermute", T_in * k * (h * e + 4) + T_in * h * e),
                _mem("bias_dropout_add", 3.5 * tok)]
    if op == "moe_unpermute_bwd":
        return [_mem("bias_dropout_add_bwd", 2 * tok),
                _mem("moe_unpermute_bwd", T_in * h * e + T_in * k * (2 * h * e + 8)), *sort]
    if op in ("shared_experts_fwd", "shared_experts_bwd"):
        if not ns:
            return []  # no shared experts: no kernels
        fs = ns * fe
        fc1s = (2 if gated else 1) * fs // t
        inner_s = T * (fs // t) * e
        if op == "shared_experts_fwd":
            return [*cast("shared_fc1_input", T * h), linear("shared_fc1", T, fc1s, h),
                    _mem("bias_swiglu", 3 * inner_s) if gated else _mem("bias_gelu", 2 * inner_s),
                    *cast("shared_fc2_input", T * (fs // t)), linear("shared_fc2", T, h, fs // t)]
        return [*cast("shared_fc2_grad", T * h),
                linear("shared_fc2_dgrad", T, fs // t, h), linear("shared_fc2_wgrad", fs // t, h, T),
                _mem("bias_swiglu_bwd", 5 * inner_s) if gated else _mem("bias_gelu_bwd", 3 * inner_s),
                *cast("shared_fc1_grad", T * fc1s),
                linear("shared_fc1_dgrad", T, h, fc1s), linear("shared_fc1_wgrad", fc1s, h, T),
                _mem("wgrad_accumulate", acc * (h * fc1s + h * fs // t))]
    raise KeyError(f"unknown MoE op {op!r}")


def moe_activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str) -> float:
    """Activation bytes one MoE layer keeps for its backward, per micro-batch, on one GPU.

    The dense layer's (:func:`_dense_activation_bytes_per_layer`) with the shared experts as
    its MLP (``6 ns f_e/h`` gated, ``4 ns f_e/h`` otherwise; 0 without shared experts), plus,
    unless the layer is checkpointed (``full``), the routed part in 16-bit bytes: each of the
    ``R`` token copies on the rank (:func:`_moe_routed_rows`; the busiest rank) keeps the
    experts' fc1 input (``2h``) and fc1 output and activation output (``6 f_e/etp`` gated,
    ``4 f_e/etp`` otherwise) and the router its fp32 probabilities (``4E`` per token). The
    un-permutation keeps nothing: Megatron-Core applies the routing probabilities inside the
    experts' activation (``TEGroupedMLP.forward``: ``weighted_bias_swiglu_impl`` /
    ``activation * permuted_probs``, whose backward reads the fc1 output already kept), and
    the all-to-all dispatcher's ``combine_postprocess`` calls ``unpermute`` without ``probs``
    (a gather / scatter-add whose backward needs only the indices; megatron-core 0.19.2,
    ``transformer/moe/experts.py``, ``token_dispatcher.py``). Nor do the permutation and the
    all-to-alls keep their outputs. FP8: the experts' fc1 input and fc2 input are the FP8
    copies TE keeps (``h`` and ``f_e/etp`` bytes per row instead of ``2h`` and ``2 f_e/etp``).
    Selective recomputation by module (:func:`core.plan.config.recompute_modules`): ``moe``
    (Megatron-Core ``MoELayer`` under ``tensor_parallel.checkpoint``) keeps none of the routed
    part nor the shared experts'; ``moe_act`` (``TEGroupedMLP``'s activation under
    ``CheckpointWithoutOutput``) drops the activation output, ``2 f_e/etp`` per row (under FP8
    its FP8 copy, ``f_e/etp``: fc2 saves its original input, freed with it);
    ``shared_experts`` the shared experts' share.
    """
    h = model.hidden_size
    per_f = 6 if model.activation == "swiglu" else 4
    fe = moe_ffn(model)
    shared = per_f * model.num_shared_experts * fe / h
    out = _dense_activation_bytes_per_layer(model, plan, mode, mlp=shared)
    if mode == "full":
        return out
    t = plan.tensor_parallel
    sp = bool(plan.sequence_parallel and t > 1)
    etp = expert_tensor_parallel(plan)
    cp = plan.context_parallel
    key = dict(b=plan.micro_batch_size, s=model.seq_length // cp, topk=model.moe_top_k, etp=etp,
               imb=plan.moe_imbalance_factor, t=t)
    R = _moe_routed_rows(key)
    T = plan.micro_batch_size * model.seq_length // cp
    T_in = T / t if sp else T
    # FP8: the experts' fc1 input (2h) and fc2 input (2 f_e/etp) are TE's FP8 copies (1 byte)
    fp8 = plan.precision == "fp8"
    routed = R * ((1 if fp8 else 2) * h + (per_f - fp8) * (fe // etp)) \
        + T_in * 4 * (model.num_experts or 0)
    mods = recompute_modules(plan) if mode == "selective" else ()
    if "moe" in mods:  # the whole MoE layer checkpointed: only its input (the norm output) kept
        routed = 0.0
    elif "moe_act" in mods:  # the experts' activation output (fc2's input) is not kept; under
        # FP8 fc2 saves its original input (set_save_original_input), freed with the output
        routed -= R * (1 if fp8 else 2) * (fe // etp)
    return out + routed * DTYPE_BYTES[tensor_dtype(plan.precision)] / 2


@dataclass(frozen=True)
class ModelFamily:
    """The formulas of one model family (see the module doc).

    Attributes
    ----------
    name : str
    op_kernels : callable ``(op, key) -> list[Kernel]``
    layer_parameters : callable ``model -> (sharded over t, replicated)`` per layer
    edge_parameters : callable ``(model, t) -> ((sharded, replicated), (sharded, replicated))``
        of the first and the last stage outside the layers
    forward_flops_per_token : callable ``(model, t) -> (layer, attention core, output)``
    activation_bytes_per_layer : callable ``(model, plan, mode) -> bytes``
    """

    name: str
    op_kernels: Callable[[str, Mapping[str, Any]], list[Kernel]]
    layer_parameters: Callable[[ModelConfig], tuple[float, float]]
    edge_parameters: Callable[[ModelConfig, int], tuple[tuple[float, float], tuple[float, float]]]
    forward_flops_per_token: Callable[[ModelConfig, int], tuple[float, float, float]]
    activation_bytes_per_layer: Callable[[ModelConfig, ParallelPlan, str], float]


#: Registered model families by name.
FAMILIES: dict[str, ModelFamily] = {
    "dense": ModelFamily("dense", _dense_op_kernels, _dense_layer_parameters,
                         _dense_edge_parameters, _dense_forward_flops_per_token,
                         _dense_activation_bytes_per_layer),
}


def family_of(model: ModelConfig | None = None) -> ModelFamily:
    """The family of ``model`` (its ``family`` field when it has one; GPT otherwise).

    Raises
    ------
    ValueError
        A family that is not registered (never simulated as another family).
    """
    name = getattr(model, "family", None) or "dense"
    if name not in FAMILIES:
        raise ValueError(f"model family {name!r} is not modelled; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


# --------------------------------------------------------------------------- kernels

#: Key columns of each op (the profile store's op tables use the same names and columns):
#: the GPT shape (``b s h a f V t dtype``, ``n`` parameters of the optimizer step) and the
#: family columns that change an op's kernels (:data:`FAMILY_KEY_DEFAULTS`): ``g`` query
#: groups, ``norm`` normalization, ``pos`` position embedding, ``attn`` attention kernel,
#: ``qkn`` 1 with QK-norm (0 without), ``act`` MLP activation, ``kv`` the head size
#: (``--kv-channels``; ``h/a`` by default), ``cp`` context-parallel size (``s`` is then the
#: rank's ``s/cp`` tokens; the attention core attends to ``s*cp``). A table written before the
#: family columns existed lacks them and holds GPT ops (see :func:`table_covers`).
#: Ops of a multi-token prediction layer besides its transformer layer, the embedding and the
#: output layer (Megatron-Core ``MultiTokenPredictionLayer``): the norms of the shifted tokens'
#: embedding and of the previous hidden state and the projection of their concatenation.
MTP_OPS = ("mtp_proj_fwd", "mtp_proj_bwd")
#: Key columns of :data:`MTP_OPS`.
MTP_KEY = ("b", "s", "h", "t", "dtype", "norm")
OP_KEYS: dict[str, tuple[str, ...]] = {
    "attention_fwd": ("b", "s", "h", "a", "t", "dtype", "g", "norm", "pos", "attn", "qkn", "kv",
                      "cp", *MLA_KEY),
    "attention_bwd": ("b", "s", "h", "a", "t", "dtype", "g", "norm", "pos", "attn", "qkn", "kv",
                      "cp", *MLA_KEY),
    "mlp_fwd": ("b", "s", "h", "f", "t", "dtype", "act", "norm"),
    "mlp_bwd": ("b", "s", "h", "f", "t", "dtype", "act", "norm"),
    "embedding_fwd": ("b", "s", "h", "V", "t", "dtype", "pos"),
    "embedding_bwd": ("b", "s", "h", "V", "t", "dtype", "pos"),
    "output_fwd": ("b", "s", "h", "V", "t", "dtype", "norm", "ce"),
    "output_bwd": ("b", "s", "h", "V", "t", "dtype", "norm", "ce"),
    "optimizer_step": ("n", "dtype"),
    **{op: MOE_KEY for op in MOE_OPS},
}
#: Ops the analytic model times that have no profile-store table, with their key columns.
UNTABULATED_OP_KEYS: dict[str, tuple[str, ...]] = {FP8_WEIGHT_CAST_OP: ("n", "dtype"),
                                                   **{op: MTP_KEY for op in MTP_OPS}}


def full_op_key(op: str, key: Mapping[str, Any]) -> dict[str, Any]:
    """``key`` with every column of :data:`OP_KEYS` for ``op`` (a family column it lacks takes
    GPT's value, :data:`FAMILY_KEY_DEFAULTS`); other entries kept."""
    out = dict(key)
    for c in OP_KEYS.get(DERIVED_OPS.get(op, op), ()):
        if c not in out and c in FAMILY_KEY_DEFAULTS:
            out[c] = family_key_value(c, out)
    return out


def table_covers(op: str, key: Mapping[str, Any], columns) -> bool:
    """Whether a profile-store table of ``op`` with key ``columns`` can hold ``key``'s shape.

    A family column the table lacks (a store written before the column existed, or a
    profile of GPT ops only) means the table's rows are GPT's: it covers ``key`` only when
    ``key`` has GPT's value there. Otherwise a Llama-style op would take a GPT op's time
    (a shape hidden by the key); the caller then uses the analytic or calibrated model.
    """
    key = full_op_key(op, key)
    return all(c in columns or key[c] == family_key_value(c, key)
               for c in OP_KEYS[DERIVED_OPS.get(op, op)] if c in FAMILY_KEY_DEFAULTS)


#: Ops with no table of their own: part of a tabulated op, timed as that op's time scaled by
#: their share of its analytic time (:func:`core.sim.op_times.lookup_op_times`).
DERIVED_OPS: dict[str, str] = {"attention_core_fwd": "attention_fwd",
                               "attention_core_bwd": "attention_bwd",
                               "layernorm_fwd": "attention_fwd",
                               "mlp_core_fwd": "mlp_fwd",
                               "router_gate_fwd": "router_fwd",
                               "moe_unpermute_core_fwd": "moe_unpermute_fwd",
                               "experts_act_fwd": "experts_fwd",
                               "attention_swa_fwd": "attention_fwd",
                               "attention_swa_bwd": "attention_bwd",
                               "attention_core_swa_fwd": "attention_fwd",
                               "mla_up_proj_fwd": "attention_fwd",
                               "attention_sac_fwd": "attention_fwd",
                               "mlp_sac_fwd": "mlp_fwd"}
#: The derived ops torchtitan's per-op selective activation checkpointing runs again in each
#: layer's backward (``plan.recompute = "selective_op"``, :func:`selective_op_kernels`).
SELECTIVE_OP_OPS: dict[str, str] = {"attention_sac_fwd": "attention_fwd",
                                    "mlp_sac_fwd": "mlp_fwd"}
#: Under per-op checkpointing with tensor parallelism and ``tp_comm_overlap`` (torchtitan's
#: async TP): the recomputed GEMM that consumes each recomputed all-gather's output and is
#: pipelined with it, by derived op: (the recomputed op, the GEMM kernel's name) -- the ``k``
#: projection of the attention's gathered input, ``w3`` of the MLP's (a plain MLP recomputes
#: no GEMM of its gathered input: ``w1`` is saved, so the op has no kernel and takes 0 s).
SELECTIVE_OP_GEMMS: dict[str, tuple[str, str]] = {"attention_sac_gemm": ("attention_sac_fwd", "k"),
                                                  "mlp_sac_gemm": ("mlp_sac_fwd", "w3")}
DERIVED_OPS.update({op: SELECTIVE_OP_OPS[src] for op, (src, _) in SELECTIVE_OP_GEMMS.items()})
#: Sliding-window variants of the attention ops (a windowed layer's ops; the key's ``w`` is
#: the window) and the op each is a variant of.
SWA_OPS: dict[str, str] = {"attention_swa_fwd": "attention_fwd",
                           "attention_swa_bwd": "attention_bwd",
                           "attention_core_swa_fwd": "attention_core_fwd"}
#: Derived ops of MoE layers (looked up for MoE models only).
MOE_DERIVED_OPS = ("router_gate_fwd", "moe_unpermute_core_fwd", "experts_act_fwd")
_NORMS = ("layernorm", "rmsnorm")
_ACTS = ("bias_swiglu", "bias_gelu")
#: Parts of an op that selective recomputation runs again (Megatron-Core ``--recompute-modules``),
#: as a test on the base op's kernel names: the input layernorm (``layernorm``), the MLP module
#: without the norm before and the residual add after (``mlp``), the router without the norm
#: and the residual add and the un-permutation without the residual add (``moe``, the whole
#: ``MoELayer``), the experts' activation (``moe_act``), MLA's latent norms, up-projections
#: and the assembly of Q, K, V (``mla_up_proj``).
PART_OPS: dict[str, Callable[[str], bool]] = {
    "layernorm_fwd": lambda n: n in _NORMS,
    "mlp_core_fwd": lambda n: n not in _NORMS and n != "bias_dropout_add",
    "router_gate_fwd": lambda n: n not in _NORMS and n != "bias_dropout_add",
    "moe_unpermute_core_fwd": lambda n: n != "bias_dropout_add",
    "experts_act_fwd": lambda n: n in _ACTS,
    "mla_up_proj_fwd": lambda n: n.startswith(_MLA_UP_PREFIXES),
}
#: Tensor-parallel communication overlap (``plan.tp_comm_overlap``): the GEMM each sequence-
#: parallel collective of a layer overlaps, by (op, collective), as a derived op of the op's
#: kernels of that name. Transformer Engine's userbuffers (Megatron-Core ``--tp-comm-overlap``)
#: pipeline the all-gather before a column-parallel linear with its GEMM (forward: QKV and fc1;
#: backward: the projection's and fc2's input-gradient GEMMs, whose output gradient is
#: gathered) and the reduce-scatter after a row-parallel one with its GEMM (forward: the
#: projection and fc2; backward: the QKV's and fc1's input-gradient GEMMs).
_TP_OVERLAP_KERNELS: dict[tuple[str, str], str] = {
    ("attention_fwd", "all_gather"): "qkv", ("attention_fwd", "reduce_scatter"): "proj",
    ("attention_bwd", "all_gather"): "proj_dgrad", ("attention_bwd", "reduce_scatter"): "qkv_dgrad",
    ("mlp_fwd", "all_gather"): "fc1", ("mlp_fwd", "reduce_scatter"): "fc2",
    ("mlp_bwd", "all_gather"): "fc2_dgrad", ("mlp_bwd", "reduce_scatter"): "fc1_dgrad",
}
#: (op, collective) -> the derived op of that GEMM ("attention_qkv_gemm", "mlp_fc1_dgrad_gemm" ...)
TP_OVERLAP_GEMMS: dict[tuple[str, str], str] = {
    (base, kind): f"{base.split('_')[0]}_{kernel}_gemm"
    for (base, kind), kernel in _TP_OVERLAP_KERNELS.items()}
for (_base, _kind), _op in TP_OVERLAP_GEMMS.items():
    DERIVED_OPS[_op] = _base
    PART_OPS[_op] = (lambda name, _k=_TP_OVERLAP_KERNELS[_base, _kind]: name == _k)
#: Derived ops only plans with ``tp_comm_overlap`` look up.
TP_OVERLAP_OPS = tuple(TP_OVERLAP_GEMMS.values())

#: The derived ops each recomputed module runs (core_attn: ``attention_core_fwd``).
MODULE_OPS: dict[str, tuple[str, ...]] = {
    "core_attn": ("attention_core_fwd",), "layernorm": ("layernorm_fwd",),
    "mlp": ("mlp_core_fwd",), "moe": ("router_gate_fwd", "moe_unpermute_core_fwd"),
    "moe_act": ("experts_act_fwd",), "shared_experts": (), "mla_up_proj": ("mla_up_proj_fwd",)}


def op_kernels(op: str, key: Mapping[str, Any], model: ModelConfig | None = None) -> list[Kernel]:
    """The kernels of ``op`` for one GPU, given the key columns of :data:`OP_KEYS`.

    An optional ``key["sp"]`` (true under sequence parallelism) runs the
    LayerNorm and dropout kernels on ``s/t`` tokens. A family column missing from
    ``key`` takes GPT's value (:func:`full_op_key`). ``attention_core_fwd``
    is the attention core (scores, softmax, dropout, values) that selective
    recomputation runs again; it takes ``attention_fwd``'s key; ``attention_core_bwd``
    its backward (the ring's share of ``attention_bwd`` under context parallelism). The
    other derived ops (:data:`PART_OPS`) are the base op's kernels that a recomputed module
    runs again (``layernorm_fwd``, ``mlp_core_fwd``, ``router_gate_fwd``,
    ``moe_unpermute_core_fwd``, ``experts_act_fwd``).

    Raises
    ------
    KeyError
        Unknown op or a key column missing.
    """
    base = DERIVED_OPS.get(op, op)
    columns = OP_KEYS.get(base) or UNTABULATED_OP_KEYS.get(base)
    if columns is None:
        raise KeyError(f"unknown op {op!r}; known: "
                       f"{', '.join([*OP_KEYS, *DERIVED_OPS, *UNTABULATED_OP_KEYS])}")
    missing = [c for c in columns if c not in key and c not in FAMILY_KEY_DEFAULTS]
    if missing:
        raise KeyError(f"op {op!r} needs key columns {missing}")
    if op in SWA_OPS:  # a windowed layer's attention op: the op with the key's window
        if not int(key.get("w", 0) or 0):
            raise KeyError(f"op {op!r} needs a window (key entry 'w' > 0)")
        return family_of(model).op_kernels(SWA_OPS[op], full_op_key(base, key))
    if op in SELECTIVE_OP_OPS:  # what per-op checkpointing runs again of its base op
        return selective_op_kernels(base, key, model)
    if op in SELECTIVE_OP_GEMMS:  # the recomputed GEMM of a recomputed all-gather's output
        name = SELECTIVE_OP_GEMMS[op][1]
        return [k for k in selective_op_kernels(base, key, model) if k.name == name]
    if op in PART_OPS:  # a part of its base op: the base op's kernels that it runs
        keep = PART_OPS[op]
        return [k for k in family_of(model).op_kernels(base, full_op_key(base, key)) if keep(k.name)]
    return family_of(model).op_kernels(op, full_op_key(op, key))


def selective_op_linears(gated: bool) -> tuple[tuple[str, bool], ...]:
    """The matmuls of one transformer block's forward in the order torchtitan runs them, each
    with whether per-op selective activation checkpointing recomputes it (``True``) or saves
    its output (``False``).

    Order (torchtitan ``models/llama3/model.py`` ``Attention.forward``: ``xq, xk, xv =
    self.wq(x), self.wk(x), self.wv(x)``, SDPA, ``self.wo``; ``FeedForward.forward``:
    ``self.w2(F.silu(self.w1(x)) * self.w3(x))``): ``q, k, v, o, w1, w3, w2`` with a gated
    (SwiGLU) MLP, ``q, k, v, o, w1, w2`` with a plain one (fc1, fc2). Policy (torchtitan
    ``infra/parallelize.py`` ``_apply_ac_to_transformer_block``, ``mode = "op"``; from 2025 in
    ``torchtitan/distributed/activation_checkpoint.py``): a per-block counter counts the
    ``aten.mm`` calls and the output of every other one is saved, the 1st, 3rd, 5th ...
    (``to_save = func in _save_list and not (func == aten.mm and mm_count % 2 == 0)``), so
    ``k``, ``o`` and ``w3`` (``w2`` with a plain MLP) are recomputed and ``q``, ``v``,
    ``w1`` (and ``w2`` gated) saved. The counter restarts in every block (each block is
    checkpointed on its own). FP8 linears (torchao ``Float8Linear``) still dispatch
    ``aten.mm`` on float8 tensor subclasses, which the checkpoint's dispatch mode sees
    before the subclass turns it into ``_scaled_mm``: assumed counted the same way.
    """
    order = ("q", "k", "v", "o", "w1", "w3", "w2") if gated else ("q", "k", "v", "o", "w1", "w2")
    return tuple((name, i % 2 == 1) for i, name in enumerate(order))


#: Kernels of the attention and MLP ops whose outputs per-op checkpointing saves besides the
#: matmuls: the fused attention (SDPA's flash / efficient / cuDNN kernels are in torchtitan's
#: save list; with context parallelism the ring's output corrections belong to it).
_SELECTIVE_OP_SAVED = ("flash_attn", "cp_out_correction")


def selective_op_kernels(base: str, key: Mapping[str, Any], model: ModelConfig | None = None
                         ) -> list[Kernel]:
    """The kernels of ``base`` (``attention_fwd`` or ``mlp_fwd``) that torchtitan's per-op
    selective activation checkpointing runs again in the layer's backward.

    torchtitan's save list (``_save_list``): ``aten.mm`` (every other one, see
    :func:`selective_op_linears`), the SDPA kernels, ``reduce_scatter_tensor`` and ``aten.max``
    (the absolute maximum of float8 scaling); every other op of the block is recomputed
    (norms, RoPE, QK-norm, the activation, the residual adds, the float8 casts). So of the
    base op's kernels: the fused QKV GEMM contributes the recomputed ``k`` projection alone
    (``T x g kv/t`` of its ``(a + 2g) kv/t`` columns), the projection ``o`` is recomputed, the
    fused gate/up fc1 contributes ``w3`` (``f/t`` of its ``2f/t`` columns), fc2 (``w2``) is
    saved with a gated MLP and recomputed with a plain one (whose fc1 is saved); the attention
    core (FlashAttention) and the tensorwise amax reductions are saved; every memory-bound
    kernel else runs again. With tensor parallelism the widths are the rank's (``/t``) and the
    norms run on the rank's ``s/t`` tokens (``key["sp"]``); the all-gathers that the
    recomputation runs again are collectives of the graph (:func:`core.sim.graph.build_graph`),
    not kernels of these ops. Needs FlashAttention (ValueError otherwise: the unfused core's
    batched GEMMs and softmax are not in the save list, not modelled).
    """
    full = _full(key)
    if full.get("attn") != "flash":
        raise ValueError("selective_op recomputation needs the flash attention kernel (the "
                         "unfused core is not modelled under per-op checkpointing)")
    kernels = family_of(model).op_kernels(base, full_op_key(base, key))
    linear, _ = linear_kernels(full)
    t = int(full["t"])
    gated = full.get("act") == "swiglu"
    recomputed = {name for name, again in selective_op_linears(gated) if again}
    dh = int(full["kv"])
    f = int(full["f"]) if "f" in full else 0
    parts = {"qkv": (("q", int(full["a"]) // t * dh), ("k", int(full["g"]) // t * dh),
                     ("v", int(full["g"]) // t * dh)),
             "proj": (("o", None),),
             "fc1": (("w1", f // t), ("w3", f // t)) if gated else (("w1", f // t),),
             "fc2": (("w2", None),)}
    out: list[Kernel] = []
    for k in kernels:
        if k.name in parts:
            for name, cols in parts[k.name]:
                if name in recomputed:
                    out.append(linear(name, k.m, k.n if cols is None else cols, k.k))
        elif k.name in _SELECTIVE_OP_SAVED or k.name.endswith("_amax"):
            continue
        else:
            out.append(k)
    return out


def _selective_op_activation_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Activation bytes one dense layer keeps per micro-batch under per-op selective
    checkpointing (``recompute="selective_op"``): the block's input (the checkpoint's input,
    ``s b h``) and the outputs of the saved ops (:func:`selective_op_linears`): ``q`` (``a kv``
    per token), ``v`` (``g kv``), the attention output (``a kv``) and its fp32 log-sum-exp
    (``a`` floats per token), ``w1`` (``f``) and, with a gated MLP, ``w2`` (``h``); in the
    tensor dtype (BF16 under FP8: a float8 matmul's output is BF16); ``s/cp`` tokens.

    With tensor parallelism (``t > 1``, sequence-parallel as torchtitan's plan always is) each
    rank keeps its shards: the block's input is sequence-sharded (``h/t`` per token), the
    column-parallel outputs (``q``, ``v``, ``w1``), the attention output and the log-sum-exp
    are ``1/t`` wide; a row-parallel matmul's output is the full ``h`` wide partial sum that
    its reduce-scatter then reduces (``w2``, gated: ``h`` per token on every rank), and the
    outputs of the two reduce-scatters (after ``o`` and ``w2``), which the save list holds,
    add ``2 h/t``. The all-gathered inputs of the linears are not kept (the all-gathers are
    not in the save list: the recomputation gathers them again, :func:`core.sim.graph.build_graph`).
    The policy's cache keeps every saved op's output until the recomputation replays it
    (eager ``torch.utils.checkpoint`` with a selective-checkpoint context), whether or not
    the backward reads it."""
    s = model.seq_length // plan.context_parallel
    b, h, a, t = (plan.micro_batch_size, model.hidden_size, model.num_attention_heads,
                  plan.tensor_parallel)
    kv, g, f = model.head_dim, model.query_groups, model.ffn
    # column-parallel outputs (split over t) and row-parallel ones (partial sums, h wide)
    width = {"q": a * kv, "k": g * kv, "v": g * kv, "w1": f, "w3": f}
    full = {"o": h, "w2": h}
    saved = [n for n, again in selective_op_linears(model.activation == "swiglu") if not again]
    cols = sum(width.get(n, 0) for n in saved)
    rows = sum(full.get(n, 0) for n in saved)
    scattered = 2 * h if t > 1 else 0  # the reduce-scatters' outputs
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    return float(s * b * (e * ((h + cols + a * kv + scattered) / t + rows) + 4 * a / t))


def selective_op_flops_per_token(model: ModelConfig) -> float:
    """FLOPs per token and layer of the matmuls per-op selective checkpointing recomputes
    (:func:`selective_op_linears`): ``2 * in * out`` of each recomputed linear, ``k``
    ``(h, g kv)``, ``o`` ``(a kv, h)``, ``w3`` ``(h, f)`` or ``w2`` ``(f, h)``."""
    h, a, kv, g, f = (model.hidden_size, model.num_attention_heads, model.head_dim,
                      model.query_groups, model.ffn)
    dims = {"q": (h, a * kv), "k": (h, g * kv), "v": (h, g * kv), "o": (a * kv, h),
            "w1": (h, f), "w3": (h, f), "w2": (f, h)}
    return float(sum(2 * dims[n][0] * dims[n][1]
                     for n, again in selective_op_linears(model.activation == "swiglu") if again))


def cp_kv_block_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes of one K/V block a context-parallel rank sends per ring step, per tensor-parallel
    rank: K and V of its ``s/cp`` tokens, ``b * s/cp * 2 * (g/t) * kv_channels`` elements in
    the tensors' dtype (:func:`core.plan.config.tensor_dtype`: BF16 under FP8, whose attention runs
    in BF16; Transformer Engine's ``AttnFuncWithCPAndKVP2P`` passes K and V together; tensor
    parallelism splits the K/V heads, each tensor-parallel rank exchanges its own). 0 without
    context parallelism."""
    cp = plan.context_parallel
    if cp <= 1:
        return 0.0
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]  # FP8 training keeps K and V in BF16
    g = model.query_groups // plan.tensor_parallel
    return float(plan.micro_batch_size * (model.seq_length // cp) * 2 * g * model.head_dim * e)


def cp_all_gather(plan: ParallelPlan) -> bool:
    """Whether the plan's context parallelism is Megatron-Core's all-gather exchange
    (``plan.cp_comm_type`` ``all_gather``, Transformer Engine's ``AttnFuncWithCPAndKVAllGather``)
    with ``cp`` > 1 (at cp = 1 the type has no effect)."""
    return plan.context_parallel > 1 and getattr(plan, "cp_comm_type", "p2p") == "all_gather"


def cp_a2a_size(plan: ParallelPlan) -> int:
    """Ranks of each all-to-all group of context parallelism: ``cp`` for ``cp_comm_type`` a2a,
    ``plan.cp_a2a_size`` for a2a+p2p, 1 for the ring and the all-gather (no all-to-all)."""
    kind = getattr(plan, "cp_comm_type", "p2p")
    if plan.context_parallel <= 1:
        return 1
    if kind == "a2a":
        return int(plan.context_parallel)
    if kind == "a2a+p2p":
        return int(getattr(plan, "cp_a2a_size", None) or 1)
    return 1


def cp_a2a_bytes(model: ModelConfig, plan: ParallelPlan) -> tuple[float, float]:
    """``(before, after)`` send buffers, bytes per GPU, of the all-to-alls of one attention
    forward under all-to-all context parallelism (:func:`cp_a2a_size` > 1; TE's
    ``flash_attn_a2a_communicate``): before the core Q, K and V of the rank's ``s/cp`` tokens,
    ``b * s/cp * (a/t + 2 g/t) * kv_channels`` elements; after it the output,
    ``b * s/cp * (a/t) * kv_channels``; in the tensors' dtype (BF16 under FP8). The backward
    moves the same two buffers the other way round (dO before its core; dQ, dK, dV after).
    Each rank keeps ``1/cpa`` of each buffer (nccl-tests' all-to-all convention). (0, 0)
    without an all-to-all."""
    if cp_a2a_size(plan) <= 1:
        return 0.0, 0.0
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    t = plan.tensor_parallel
    tok = plan.micro_batch_size * (model.seq_length // plan.context_parallel) * model.head_dim * e
    heads, groups = model.num_attention_heads // t, model.query_groups // t
    return float(tok * (heads + 2 * groups)), float(tok * heads)


def cp_exchange_bytes(model: ModelConfig, plan: ParallelPlan) -> tuple[float, float]:
    """``(forward, backward)`` bytes one GPU sends around the context-parallel ring per layer
    and micro-batch: forward ``cp-1`` K/V blocks (:func:`cp_kv_block_bytes`); backward
    ``cp-1`` K/V blocks and ``cp-1`` blocks of their gradients dK/dV (Transformer Engine's
    backward sends K/V in its first ``cp-1`` steps and the accumulated dK/dV in its last
    ``cp-1``). (0, 0) without context parallelism."""
    blk = cp_kv_block_bytes(model, plan)
    n = plan.context_parallel - 1
    return n * blk, 2 * n * blk


def cp_exchange_buffer_bytes(model: ModelConfig, plan: ParallelPlan) -> float:
    """Bytes of the context-parallel exchange's buffers that one GPU holds at once while one
    attention layer runs (transient: one layer at a time, freed after it; the backward's, the
    larger), per exchange (``plan.cp_comm_type``), with ``blk`` the K/V block of
    :func:`cp_kv_block_bytes`:

    * ``p2p`` (Transformer Engine's ring): the K/V block being sent and the one being received,
      and in the backward those of the dK/dV blocks too, ``4 blk``;
    * ``allgather`` (PyTorch's): the gathered K/V of the whole sequence, ``cp blk``, and the
      dK/dV blocks passed around the ring, ``2 blk``;
    * ``all_gather`` (TE's ``AttnFuncWithCPAndKVAllGather``): the gathered K/V put in sequence
      order, the whole sequence's dK/dV and their copy put back in chunk order for the
      reduce-scatter, ``3 cp blk``;
    * ``a2a``: the all-to-all's send and receive buffers of Q, K and V (the larger of its two,
      :func:`cp_a2a_bytes`), twice that; ``a2a+p2p`` adds the ring's ``4 blk``.

    0 without context parallelism. Approximate: TE's own temporaries (the softmax statistics,
    the per-step outputs) are not counted."""
    cp = plan.context_parallel
    if cp <= 1:
        return 0.0
    blk = cp_kv_block_bytes(model, plan)
    kind = getattr(plan, "cp_comm_type", "p2p")
    if kind == "allgather":
        return (cp + 2) * blk
    if kind == "all_gather":
        return 3 * cp * blk
    ring = 4 * blk if cp // cp_a2a_size(plan) > 1 else 0.0
    if cp_a2a_size(plan) > 1:
        return 2 * max(cp_a2a_bytes(model, plan)) + ring
    return ring


# --------------------------------------------------------------------------- multi-token prediction



def mtp_layers(model: ModelConfig) -> int:
    """Multi-token prediction layers ``N`` (``model.mtp_num_layers``; 0 without)."""
    return int(getattr(model, "mtp_num_layers", 0) or 0)


def mtp_layer_is_moe(model: ModelConfig) -> bool:
    """Whether an MTP layer's transformer layer is an MoE layer: Megatron-Core builds it with
    the decoder's last layer's spec (``get_gpt_mtp_block_spec(config,
    transformer_layer_spec.layer_specs[-1])``), so it is one when layer ``L - 1`` is
    (:func:`moe_layer_mask`; DeepSeek-V3: yes)."""
    if not model.is_moe:
        return False
    i = model.num_layers - 1
    return i >= model.moe_first_dense_layers and i % model.moe_layer_frequency == 0


def mtp_extra_parameters(model: ModelConfig) -> tuple[float, float]:
    """``(sharded over t, replicated)`` parameters of one MTP layer besides its transformer
    layer (Megatron-Core ``MultiTokenPredictionLayer``; DeepSeek-V3 report, Sec. 2.2): the
    projection ``eh_proj`` of the concatenated ``2h`` to ``h`` (column-parallel, no bias:
    ``2h^2``) and three norms, ``enorm`` and ``hnorm`` on its two inputs and the final norm
    before the shared output layer (``h`` each with RMSNorm, ``2h`` with LayerNorm). The
    embedding and the output layer are the main model's (shared)."""
    h = model.hidden_size
    w = 2 if model.normalization == "layernorm" else 1
    return 2.0 * h * h, 3.0 * w * h


def mtp_edge_parameters(model: ModelConfig, t: int, p: int) -> float:
    """Parameters one GPU of the last stage holds for multi-token prediction besides the MTP
    layers' transformer layers: their :func:`mtp_extra_parameters` (sharded ones over ``t``)
    and, with ``p > 1``, the embedding's copy (an untied model's word embedding ``V'h/t``, and
    learned positions), part of :func:`edge_params_per_gpu`'s last stage; 0 without MTP."""
    n = mtp_layers(model)
    if not n:
        return 0.0
    sh, rep = mtp_extra_parameters(model)
    out = n * (sh / t + rep)
    if p > 1:  # Megatron-Core builds the embedding there too (a tied one is there already)
        (first_sh, first_rep), _ = family_of(model).edge_parameters(model, t)
        out += (0.0 if model.tied_embeddings else first_sh / t) + first_rep
    return out


def _mtp_layer_total_parameters(model: ModelConfig) -> float:
    """All parameters of one MTP layer: its transformer layer (an MoE layer's with every
    expert when :func:`mtp_layer_is_moe`) and :func:`mtp_extra_parameters`."""
    if mtp_layer_is_moe(model):
        moe = moe_layer_parameters(model)
        layer = moe.sharded + moe.replicated + moe.experts
    else:
        layer = sum(family_of(model).layer_parameters(model))
    return layer + sum(mtp_extra_parameters(model))


def _mtp_forward_flops_per_token(model: ModelConfig, dense_layer: float, out: float) -> float:
    """Forward FLOPs per token of the ``N`` MTP layers: each its transformer layer's (dense
    ``dense_layer`` or :func:`_moe_forward_flops_per_token`), ``eh_proj``'s ``2 * 2h * h`` and
    one more output layer ``out`` (``2hV'``; Megatron-LM's ``num_floating_point_operations``
    counts the same, with the norms' few FLOPs besides)."""
    n = mtp_layers(model)
    if not n:
        return 0.0
    layer = _moe_forward_flops_per_token(model) if mtp_layer_is_moe(model) else dense_layer
    return n * (layer + 4.0 * model.hidden_size ** 2 + out)


def _mtp_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of an MTP layer's projection (:data:`MTP_OPS`), per micro-batch
    of ``T = b s`` tokens (``T_in = T/t`` with sequence parallelism): ``enorm`` of the shifted
    tokens' embedding and ``hnorm`` of the previous hidden state (``T_in`` tokens each), their
    concatenation (read and write ``2h`` per token), ``eh_proj`` ``(T, 2h) x (2h, h/t)``
    (column-parallel on the gathered tokens; FP8 as the layers' linears); backward its input
    and weight gradients, the concatenation's split and the two norms' backward."""
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    acc = GRAD_ACCUMULATE_BYTES_PER_PARAM[dtype]
    linear, cast = linear_kernels(key)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    T = b * s
    T_in = T // t if key.get("sp") else T
    tok = T_in * h * e
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    if op == "mtp_proj_fwd":
        return [_mem(f"mtp_e{norm}", 2 * tok), _mem(f"mtp_h{norm}", 2 * tok),
                _mem("mtp_concat", 4 * tok), *cast("eh_proj_input", T * 2 * h),
                linear("eh_proj", T, h // t, 2 * h)]              # (b*s, 2h) x (2h, h/t)
    if op == "mtp_proj_bwd":
        return [*cast("eh_proj_grad", T * (h // t)),
                linear("eh_proj_dgrad", T, 2 * h, h // t), linear("eh_proj_wgrad", h // t, 2 * h, T),
                _mem("wgrad_accumulate", acc * 2 * h * (h // t)),
                _mem("mtp_concat_bwd", 4 * tok),
                _mem(f"mtp_e{norm}_bwd", 4 * tok), _mem(f"mtp_h{norm}_bwd", 4 * tok)]
    raise KeyError(f"unknown MTP op {op!r}")


def mtp_tp_collectives(model: ModelConfig, sequence_parallel: bool
                       ) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]]:
    """``(forward, backward)`` tensor-parallel collectives around an MTP layer's ``eh_proj``,
    each ``(kind, elements per token)`` of one GPU's full (gathered) tensor.

    Megatron-Core ``MultiTokenPredictionLayer``: ``eh_proj`` is column-parallel, its ``h/t``
    output all-gathered along the hidden dimension, then (sequence parallelism) split back to
    the rank's tokens. With sequence parallelism: forward the all-gather of the ``2h``-wide
    input and of the output (``h``); backward the gathered output's gradient all-gathered
    (``h``; the backward of the split), the input all-gathered again for the weight gradient
    and its gradient reduce-scattered (``2h`` each). Without: forward the output's all-gather
    (``h``), backward the all-reduce of the input gradient (``2h``; the split needs none)."""
    h = float(model.hidden_size)
    if sequence_parallel:
        return ((("all_gather", 2 * h), ("all_gather", h)),
                (("all_gather", h), ("all_gather", 2 * h), ("reduce_scatter", 2 * h)))
    return (("all_gather", h),), (("all_reduce", 2 * h),)


# --------------------------------------------------------------------------- parameters

def num_parameters(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """Total parameter count; a tied word embedding counted once.

    ``L`` times the family's layer parameters plus the first and last stage's
    others (:func:`core.model.model_math._dense_layer_parameters`,
    ``_dense_edge_parameters``). GPT: per layer QKV ``3h^2+3h``, projection
    ``h^2+h``, MLP ``2*h*f+f+h``, two layer norms ``4h``; plus embedding
    ``V'h``, positions ``s*h`` and the final layer norm ``2h``. Llama 2 7B
    (GQA off, SwiGLU, RMSNorm, RoPE, no biases, untied): 6,738,415,616. ``V'`` is
    the vocabulary padded for ``tensor_parallel``. Multi-token prediction adds ``N`` MTP
    layers (:func:`_mtp_layer_total_parameters`; their embedding and output layer are the main
    model's, counted once).
    """
    fam = family_of(model)
    layer = sum(fam.layer_parameters(model))
    first, last = fam.edge_parameters(model, tensor_parallel)
    n_moe = num_moe_layers(model)
    moe = moe_layer_parameters(model) if n_moe else None
    moe_layer = moe.sharded + moe.replicated + moe.experts if moe else 0.0
    mtp = mtp_layers(model) * _mtp_layer_total_parameters(model) if mtp_layers(model) else 0.0
    return int(round((model.num_layers - n_moe) * layer + n_moe * moe_layer + sum(first) + sum(last)
                     + mtp))


def num_active_parameters(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """Active parameters as the model cards of OpenAI and DeepSeek publish them: the
    parameters a token's GEMMs use, :func:`num_active_parameters_with_embedding` less the input
    embedding (:func:`input_embedding_parameters`, a table lookup: no FLOPs). GPT-OSS 20B:
    3.61 B (model card, Table 1: 4.19 B with the embedding); DeepSeek-V3: 36.6 B ("37B
    activated", technical report). Mistral AI's "12.9B" of Mixtral 8x7B and Qwen's "3.3B" of
    Qwen3-30B-A3B count the input embedding (12.88 B and 3.35 B, 12.75 B and 3.04 B without):
    compare those with :func:`num_active_parameters_with_embedding`. Model FLOPs (MFU) do not
    use this count (:func:`model_flops_per_iteration` counts the GEMMs)."""
    return num_active_parameters_with_embedding(model, tensor_parallel) - \
        input_embedding_parameters(model, tensor_parallel)


def input_embedding_parameters(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """The input embedding's own parameters: the word embedding ``V'h`` when the output layer
    has its own weights (tied, the matrix is the output layer's GEMM weight and stays active)
    and the learned position table ``s*h`` (RoPE has none). ``V'`` is padded for
    ``tensor_parallel``."""
    (word, positions), _ = family_of(model).edge_parameters(model, tensor_parallel)
    return int(round(positions + (0.0 if model.tied_embeddings else word)))


def num_active_parameters_with_embedding(model: ModelConfig, tensor_parallel: int = 1) -> int:
    """Parameters a token passes through, the input embedding included: :func:`num_parameters`
    with each MoE layer's routed experts counted ``moe_top_k`` times one expert instead of
    ``num_experts`` times (the router, shared experts, attention and embeddings all count).
    Equal to :func:`num_parameters` for a dense model. Mixtral 8x7B: 12.9 B of 46.7 B (Mistral
    AI's announcement: "12.9B active parameters per token")."""
    total = num_parameters(model, tensor_parallel)
    n_moe = num_moe_layers(model) + (mtp_layers(model) if mtp_layer_is_moe(model) else 0)
    if not n_moe:
        return total
    moe = moe_layer_parameters(model)
    return int(round(total - n_moe * (moe.experts - model.moe_top_k * moe.expert)))


def stage_layers(model: ModelConfig, plan: ParallelPlan) -> list[range]:
    """Global layer indices of each pipeline stage, length p (see
    :func:`core.plan.config.stage_layer_counts`; raises ValueError when the layers do not split)."""
    out, start = [], 0
    for c in _stage_counts(model, plan):
        out.append(range(start, start + c))
        start += c
    return out


def stage_chunk_layers(model: ModelConfig, plan: ParallelPlan) -> list[list[range]]:
    """Global layer indices of each model chunk of each pipeline stage: ``p`` lists of ``v``
    ranges (``v`` = :func:`chunks_per_stage`; chunk ``c`` of stage ``i`` is virtual stage
    ``c*p + i`` of :func:`core.plan.config.virtual_stage_layer_counts`, or as the schedule
    places it, :meth:`core.schedules.PipelineSchedule.virtual_stages`). Raises ValueError when
    the layers do not split."""
    return [list(chunks) for chunks in _chunk_layout(model, plan)[0]]


_LAYOUTS: dict[tuple, tuple] = {}
_COUNTS: dict[tuple, tuple[int, ...]] = {}


def _layout_key(plan: ParallelPlan) -> tuple | None:
    """The custom pipeline layout and the ``v`` it is read with (part of the layer-count
    cache keys), or None without a layout."""
    layout = pipeline_layout_text(plan)
    if layout is None:
        return None
    return layout, schedules.get(plan.schedule).uses_virtual_stages and plan.virtual_pipeline_stages


def _stage_counts(model: ModelConfig, plan: ParallelPlan) -> tuple[int, ...]:
    """:func:`core.plan.config.stage_layer_counts` memoized, keyed by every field it reads (the
    model's layers, ``p``, ``first_stage_layers``, ``last_stage_layers``, the two
    pipeline-split flags as booleans); a tuple. Raises ValueError as it does."""
    key = (model.num_layers, plan.pipeline_parallel, plan.first_stage_layers,
           plan.last_stage_layers, bool(plan.account_for_embedding_in_pipeline_split),
           bool(plan.account_for_loss_in_pipeline_split), _layout_key(plan))
    hit = _COUNTS.get(key)
    if hit is None:
        if len(_COUNTS) > 4096:
            _COUNTS.clear()
        hit = _COUNTS[key] = tuple(stage_layer_counts(model.num_layers, plan))
    return hit




def _chunk_layout(model: ModelConfig, plan: ParallelPlan
                  ) -> tuple[tuple[tuple[range, ...], ...], np.ndarray, tuple[tuple[int, ...], ...]]:
    """The chunks of :func:`stage_chunk_layers` (tuples), their layers as a read-only int64
    array shape (p, v) and as tuples, memoized (sweeps ask for the same few layouts often).

    The key is every field :func:`core.plan.config.virtual_stage_layer_counts` reads with ``v``
    given (and :func:`core.plan.config.stage_layer_counts` for ``v = 1``): the model's layers,
    ``p``, ``v`` (:func:`chunks_per_stage`), ``first_stage_layers``, ``last_stage_layers``
    and the two pipeline-split flags (read as booleans). Raises ValueError as they do (errors
    are not memoized)."""
    p, v = plan.pipeline_parallel, chunks_per_stage(plan)
    sched = schedules.get(plan.schedule)
    key = (model.num_layers, p, v, plan.first_stage_layers, plan.last_stage_layers,
           bool(plan.account_for_embedding_in_pipeline_split),
           bool(plan.account_for_loss_in_pipeline_split), pipeline_layout_text(plan),
           sched.placement_kind)
    hit = _LAYOUTS.get(key)
    if hit is None:
        counts = virtual_stage_layer_counts(model.num_layers, plan, v)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        chunks = tuple(tuple(range(starts[k], starts[k + 1]) for k in row)
                       for row in sched.virtual_stages(p, v).tolist())
        lengths = tuple(tuple(len(r) for r in ch) for ch in chunks)
        arr = np.array(lengths, np.int64).reshape(p, v)
        arr.setflags(write=False)
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        hit = _LAYOUTS[key] = (chunks, arr, lengths)
    return hit


def edge_params_per_gpu(model: ModelConfig, t: int, p: int) -> tuple[float, float]:
    """Parameters outside the layers held by one GPU of the first and of the last stage.

    The family's first- and last-stage parameters (sharded ones divided by
    ``t``); with a tied output layer and ``p > 1`` the last stage adds its copy of
    the word embedding ``V'h/t`` (Megatron keeps one on each end and all-reduces
    their gradients). With ``p = 1`` both are on the one stage: add both. Multi-token
    prediction adds to the last stage its layers' :func:`mtp_extra_parameters` and, with
    ``p > 1``, a copy of the embedding (Megatron-Core's ``GPTModel`` builds it on the MTP
    stage; an untied model's word embedding and learned positions) whose gradients are summed
    with the first stage's, as a tied output layer's are (that sum is not timed, as for tied
    embeddings). The MTP layers' transformer layers are counted with the stage's layers
    (:func:`params_per_gpu`).
    """
    fam = family_of(model)
    (first_sh, first_rep), (last_sh, last_rep) = fam.edge_parameters(model, t)
    tied_copy = first_sh / t if (p > 1 and model.tied_embeddings) else 0.0
    last = last_sh / t + last_rep + tied_copy + mtp_edge_parameters(model, t, p)
    return first_sh / t + first_rep, last


_MODEL_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(ModelConfig)))
_PARAMS: dict[tuple, np.ndarray] = {}


def params_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Parameters held by one GPU of each pipeline stage before any ZeRO sharding, shape (p,).

    Per layer the family's sharded and replicated parameters (GPT:
    ``(4h^2 + 2hf + 3h + f)/t + 6h``), times the stage's layers; stage 0 adds the
    vocabulary-parallel embedding ``V'h/t`` and learned positions ``s*h``; the last stage
    adds the final norm and its output layer ``V'h/t`` (untied; tied: a copy of the word
    embedding when ``p > 1``), see :func:`edge_params_per_gpu`; the MTP layers' transformer
    layers count on the last stage (:func:`_stage_layers_with_mtp`).

    Memoized (sweeps ask for the same few layouts often; a new array is returned), keyed by
    every field it reads: all the model's, and the plan's ``t``, ``p``, chunks per stage,
    uneven first / last stages and pipeline-split flags (the layout), ``ep`` and ``etp``, and
    the schedule's placement (ZB-V's loss stage is stage 0).
    """
    key = (_MODEL_FIELD_VALUES(model), plan.tensor_parallel,
           plan.pipeline_parallel, chunks_per_stage(plan), plan.first_stage_layers,
           plan.last_stage_layers, bool(plan.account_for_embedding_in_pipeline_split),
           bool(plan.account_for_loss_in_pipeline_split), pipeline_layout_text(plan),
           plan.expert_parallel,
           expert_tensor_parallel(plan), schedules.get(plan.schedule).placement_kind)
    hit = _PARAMS.get(key)
    if hit is None:
        if len(_PARAMS) > 4096:
            _PARAMS.clear()
        hit = _PARAMS[key] = _params_per_gpu(model, plan)
    return hit.copy()


def _params_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """:func:`params_per_gpu`, computed."""
    fam = family_of(model)
    t = plan.tensor_parallel
    sharded, replicated = fam.layer_parameters(model)
    counts = _stage_layers_with_mtp(model, plan)
    moe_counts = stage_moe_layer_counts(model, plan)
    n = (counts - moe_counts) * (sharded / t + replicated)
    if moe_counts.any():
        moe = moe_layer_parameters(model)
        n += moe_counts * (moe.sharded / t + moe.replicated) + expert_params_per_gpu(model, plan)
    first, last = edge_params_per_gpu(model, t, edge_stages(plan))
    n[0] += first
    n[loss_stage(plan)] += last
    return n


def stage_moe_layer_counts(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """MoE layers of each pipeline stage (:func:`moe_layer_mask` over the layers of all the
    stage's model chunks, :func:`stage_chunk_layers`), float array shape (p,); the last stage
    adds the MTP layers when theirs is an MoE layer (:func:`mtp_layer_is_moe`)."""
    if not model.is_moe:
        return np.zeros(plan.pipeline_parallel, float)
    mask = moe_layer_mask(model)
    out = np.array([sum(mask[r.start:r.stop].sum() for r in chunks)
                    for chunks in _chunk_layout(model, plan)[0]], float)
    if mtp_layer_is_moe(model):
        out[loss_stage(plan)] += mtp_layers(model)
    return out


def _stage_layers_with_mtp(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Transformer layers one GPU of each stage holds, float array shape (p,): the stage's
    decoder layers (:func:`_stage_counts`) and, on the last stage, the ``N`` MTP layers'
    (Megatron-Core runs the MTP block on the last pipeline stage)."""
    counts = np.array(_stage_counts(model, plan), float)
    counts[loss_stage(plan)] += mtp_layers(model)
    return counts


def expert_params_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Routed-expert parameters one GPU of each stage holds, shape (p,): the stage's MoE layers
    times ``E`` experts over ``ep * etp`` ranks (Megatron-Core: ``E/ep`` local experts, each
    split over the expert tensor-parallel group). Their gradients reduce over the
    expert-data-parallel group (:func:`expert_data_parallel`), not over ``d``."""
    counts = stage_moe_layer_counts(model, plan)
    if not counts.any():
        return np.zeros_like(counts)
    moe = moe_layer_parameters(model)
    return counts * moe.experts / (plan.expert_parallel * expert_tensor_parallel(plan))


# --------------------------------------------------------------------------- FLOPs

def recomputed_in_chunk(plan: ParallelPlan, layers: int) -> int:
    """Layers of a model chunk of ``layers`` layers whose forward full recomputation runs again:
    0 without full recomputation; with Megatron's block method the chunk's first
    ``min(recompute_num_layers, layers)``; every layer when ``recompute_num_layers`` is unset."""
    if plan.recompute != "full":
        return 0
    n = plan.recompute_num_layers
    return layers if n is None else min(n, layers)


def chunks_per_stage(plan: ParallelPlan) -> int:
    """Model chunks per pipeline stage (:meth:`core.schedules.PipelineSchedule.chunks`):
    ``virtual_pipeline_stages`` under a schedule that uses virtual stages (interleaved 1F1B),
    2 under ZB-V, 1 otherwise."""
    return schedules.get(plan.schedule).chunks(getattr(plan, "virtual_pipeline_stages", None))


def loss_stage(plan: ParallelPlan) -> int:
    """The pipeline stage that holds the output layer, the loss and the MTP block: ``p - 1``,
    stage 0 under ZB-V (:meth:`core.schedules.PipelineSchedule.loss_stage`)."""
    return schedules.get(plan.schedule).loss_stage(plan.pipeline_parallel, chunks_per_stage(plan))


def edge_stages(plan: ParallelPlan) -> int:
    """The ``p`` to give :func:`edge_params_per_gpu`: 1 when the first and the last layers are on
    one stage (one stage, or ZB-V: no second copy of a tied embedding), else ``p``."""
    return 1 if loss_stage(plan) == 0 else plan.pipeline_parallel


def recomputed_layers(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Layers of each stage whose forward full recomputation runs again, shape (p,):
    :func:`recomputed_in_chunk` of each of the stage's model chunks (Megatron applies
    ``--recompute-num-layers`` per chunk; chunks of :func:`stage_chunk_layers`)."""
    lengths = _chunk_layout(model, plan)[1]  # (p, v); recomputed_in_chunk of each, vectorized
    if plan.recompute != "full":
        return np.zeros(len(lengths), np.int64)
    n = plan.recompute_num_layers
    return (lengths if n is None else np.minimum(lengths, n)).sum(axis=1)


def model_flops_per_iteration(model: ModelConfig, plan: ParallelPlan) -> float:
    """Model FLOPs of one iteration (Narayanan et al. 2021, Eq. 3, general MLP size).

    Forward FLOPs per token: ``L*(8h^2 + 4hf + 4sh) + 2hV'`` with ``V'`` the
    vocabulary padded to a multiple of ``128*t``, as Megatron computes it;
    training is 3x forward. With ``f = 4h`` this is
    ``72*B*s*L*h^2*(1 + s/(6h) + V'/(12*L*h))``. MoE layers count the GEMMs a token
    passes through (router, ``k`` experts, shared experts: the active parameters).
    Multi-token prediction adds :func:`_mtp_forward_flops_per_token`.
    """
    layer, _, out = family_of(model).forward_flops_per_token(model, plan.tensor_parallel)
    tokens = plan.global_batch_size * model.seq_length
    return tokens * 3 * (_layers_forward_flops_per_token(model, layer) + out
                         + _mtp_forward_flops_per_token(model, layer, out))


def _layers_forward_flops_per_token(model: ModelConfig, dense_layer: float) -> float:
    """Forward FLOPs per token of all ``L`` layers: the dense layers' ``dense_layer`` each and
    the MoE layers' :func:`_moe_forward_flops_per_token` (active parameters only)."""
    n_moe = num_moe_layers(model)
    moe = _moe_forward_flops_per_token(model) if n_moe else 0.0
    return (model.num_layers - n_moe) * dense_layer + n_moe * moe


def hardware_flops_per_iteration(model: ModelConfig, plan: ParallelPlan) -> float:
    """Model FLOPs plus the recomputed ones (for HFU): full recomputation runs the forward of
    :func:`recomputed_layers` again (Narayanan et al. 2021, Eq. 3's factor 4 instead of 3
    when every layer is recomputed); selective recomputation the GEMMs of its modules
    (:func:`core.plan.config.recompute_modules`): ``core_attn`` the attention core, ``4sh``
    per token and layer (Korthikanti et al. 2022, Sec. 5), ``mlp`` the dense layers' MLP,
    ``moe`` the MoE layers' router, active experts and shared experts, ``shared_experts``
    those alone, ``mla_up_proj`` MLA's up-projections
    (:func:`mla_up_proj_forward_flops_per_token`; ``layernorm`` and ``moe_act`` are
    element-wise: no GEMM FLOPs); per-op selective checkpointing (``selective_op``) its
    recomputed matmuls, :func:`selective_op_flops_per_token` per layer.

    Unlike the model FLOPs, whose Eq. 3 credits the attention core's full ``s x s`` square,
    these are the FLOPs the GPUs execute: with FlashAttention (``attention_kernel="flash"``)
    the core of every forward (and recomputed forward) counts only the part under the mask,
    :func:`causal_core_fraction` of it (half for causal attention, a windowed layer its band;
    FlashAttention skips the masked blocks), so that HFU stays a share of the peak at long
    sequences; the unfused path (``baddbmm``, softmax, ``bmm``) computes the whole square,
    and counts it (Eq. 3's factor 96 for full recomputation) (with the full square
    credited, a 128k-token plan would report more than 100 %). Megatron-LM's own count
    halves the core the same way since Megatron-Core 0.19."""
    layer, core, _ = family_of(model).forward_flops_per_token(model, plan.tensor_parallel)
    tokens = plan.global_batch_size * model.seq_length
    extra = 0.0
    n_mtp = mtp_layers(model)
    core_passes = 3.0 * (model.num_layers + n_mtp)  # cores in the model FLOPs (fwd + 2x bwd)
    if plan.recompute == "full":  # MoE models: the mean layer's FLOPs per recomputed layer
        mean = _layers_forward_flops_per_token(model, layer) / model.num_layers
        extra = float(recomputed_layers(model, plan).sum()) * mean
        core_passes += float(recomputed_layers(model, plan).sum())
        if n_mtp:  # the MTP layers' transformer layers are checkpointed under full
            extra += n_mtp * (_moe_forward_flops_per_token(model) if mtp_layer_is_moe(model)
                              else layer)
            core_passes += n_mtp
    elif plan.recompute == "selective":
        mods = recompute_modules(plan)
        mtp_moe = n_mtp if mtp_layer_is_moe(model) else 0
        n_moe = num_moe_layers(model) + mtp_moe
        n_all = model.num_layers + n_mtp  # the MTP layers' modules are recomputed too
        h, per_f = model.hidden_size, (6 if model.activation == "swiglu" else 4) * model.hidden_size
        if "core_attn" in mods:
            extra += n_all * core
            core_passes += n_all
        if "mlp" in mods:  # the dense layers' MLP GEMMs
            extra += (n_all - n_moe) * per_f * model.ffn
        if n_moe and "moe" in mods:  # router, the k routed experts and the shared experts
            extra += n_moe * (2 * h * (model.num_experts or 0)
                              + per_f * moe_ffn(model) * (model.moe_top_k + model.num_shared_experts))
        elif n_moe and "shared_experts" in mods:
            extra += n_moe * per_f * moe_ffn(model) * model.num_shared_experts
        if "mla_up_proj" in mods and model.multi_latent_attention is True:
            extra += n_all * mla_up_proj_forward_flops_per_token(model)
        # layernorm and moe_act re-run element-wise kernels only: no GEMM FLOPs
    elif plan.recompute == "selective_op":  # the recomputed matmuls of every (dense) layer
        extra = model.num_layers * selective_op_flops_per_token(model)
    # FlashAttention skips the masked blocks; the unfused path (baddbmm, softmax, bmm) computes
    # the whole s x s square
    masked = (core_passes * core * (1.0 - causal_core_fraction(model))
              if model.attention_kernel == "flash" else 0.0)
    return model_flops_per_iteration(model, plan) + tokens * (extra - masked)


def causal_model_flops_per_iteration(model: ModelConfig, plan: ParallelPlan) -> float:
    """Model FLOPs of one iteration counting only the attention core under the causal mask:
    :func:`model_flops_per_iteration` less ``1 - causal_core_fraction`` of the core in each of
    its three passes (forward, and twice that backward) over every layer and MTP layer, FLOPs.

    Narayanan et al.'s Eq. 3 credits the core's full ``s x s`` square (``4sh`` per token and
    layer forward); FlashAttention skips the masked half, and Megatron-Core 0.19's
    ``num_floating_point_operations`` counts only that half (``2 * sum(L^2) * h``), as
    Meta's Llama 3 paper's MFU does. At long sequences the two differ by most of the core:
    a 1M-token plan's Eq. 3 MFU counts twice the attention FLOPs the GPUs run."""
    _, core, _ = family_of(model).forward_flops_per_token(model, plan.tensor_parallel)
    tokens = plan.global_batch_size * model.seq_length
    passes = 3.0 * (model.num_layers + mtp_layers(model))
    return model_flops_per_iteration(model, plan) - tokens * passes * core * (
        1.0 - causal_core_fraction(model))


def causal_core_fraction(model: ModelConfig) -> float:
    """Share of the full ``s x s`` attention core under the causal mask, averaged over the
    layers: ``1/2`` for causal attention; on a sliding-window layer the exact average causal
    context over ``s``, ``(W - W(W-1)/(2s)) / s`` with ``W = window_size + 1`` (the query and
    the ``w`` tokens before it), ``1/2`` when ``W >= s``. The same fractions as Megatron-Core
    0.19's ``num_floating_point_operations`` ("causal mask (only half of the mask is
    non-zero)") and Megatron-Bridge 0.6's ``flop_utils`` ("exact average causal SWA
    context"); the model FLOPs here keep Narayanan et al.'s Eq. 3 (fraction 1), the hardware
    FLOPs use this (:func:`hardware_flops_per_iteration`)."""
    s = model.seq_length
    windowed = window_layer_mask(model)
    n_swa = int(windowed.sum())
    if not n_swa:
        return 0.5
    W = int(model.window_size) + 1
    swa = (W - W * (W - 1) / (2 * s)) / s if W < s else 0.5
    return (0.5 * (model.num_layers - n_swa) + swa * n_swa) / model.num_layers


# --------------------------------------------------------------------------- memory

def activation_bytes_per_layer(model: ModelConfig, plan: ParallelPlan, mode: str | None = None
                               ) -> float:
    """Activation bytes one layer keeps per micro-batch on one GPU under recompute ``mode``
    (default the plan's), Korthikanti et al. 2022, Table 2 (see the family's formula)."""
    return family_of(model).activation_bytes_per_layer(model, plan, mode or plan.recompute)


def in_flight_microbatches(plan: ParallelPlan, stage: int, model: ModelConfig | None = None
                           ) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of one
    micro-batch through all the stage's layers: the schedule's count
    (:func:`core.schedules.in_flight_microbatches`; 1F1B ``min(p - stage, m)``, Korthikanti
    et al. 2022, Sec. 4.2.3; GPipe ``m``). ``model`` is needed (ValueError otherwise) when the
    embedding / loss take layer slots under interleaving: the chunks' layers weigh the count."""
    return _ep_overlap_in_flight(plan, _in_flight(
        plan.schedule, plan.pipeline_parallel, plan.num_microbatches, chunks_per_stage(plan),
        _uneven_chunks(plan, model)), model)[stage]


def ep_overlap_on(plan: ParallelPlan) -> bool:
    """Whether the plan overlaps its expert all-to-alls: ``overlap_moe_expert_parallel_comm``
    with ``ep > 1``."""
    return bool(getattr(plan, "overlap_moe_expert_parallel_comm", False) is True
                and plan.expert_parallel > 1)


def ep_overlap_paired_share(plan: ParallelPlan, stage: int) -> float:
    """Share of stage ``stage``'s forwards and backwards that run paired under
    ``overlap_moe_expert_parallel_comm`` (:func:`core.schedules.combined_1f1b_paired_share`);
    0 without it (or without expert parallelism)."""
    if not ep_overlap_on(plan):
        return 0.0
    return schedules.combined_1f1b_paired_share(plan.schedule, plan.pipeline_parallel,
                                                plan.num_microbatches, chunks_per_stage(plan),
                                                stage)


def _ep_overlap_in_flight(plan: ParallelPlan, in_flight: tuple[float, ...],
                          model: ModelConfig | None) -> tuple[float, ...]:
    """``in_flight`` (per stage) under ``overlap_moe_expert_parallel_comm`` (unchanged without
    it), at most ``m`` in all:

    * with pipelining one forward more before the first backward
      (``schedules.get_pp_rank_microbatches``: one more warm-up micro-batch chunk with
      interleaving, ``1/v`` of the stage's layers);
    * while a forward runs beside a backward (``TransformerModelChunkSchedulePlan.run``: the
      forward's layer ``i`` with the backward's layer ``n-1-i``, each backward layer freeing
      what it saved) the two hold one layer more than one micro-batch: ``1/n`` of a stage of
      ``n`` layers, on stages that pair any items (:func:`ep_overlap_paired_share`; without
      pipelining ``m > 1``).

    Raises ValueError without ``model`` when the plan overlaps (the stages' layer counts)."""
    if not ep_overlap_on(plan):
        return in_flight
    if model is None:
        raise ValueError("the in-flight activations of the expert all-to-all overlap need the model")
    m = plan.num_microbatches
    counts = stage_layer_counts(model.num_layers, plan)
    warm = 1.0 / chunks_per_stage(plan) if plan.pipeline_parallel > 1 else 0.0
    return tuple(min(x + warm + (1.0 / max(n, 1) if ep_overlap_paired_share(plan, i) > 0 else 0.0),
                     float(m)) for i, (x, n) in enumerate(zip(in_flight, counts)))


def _uneven_chunks(plan: ParallelPlan, model: ModelConfig | None = None
                   ) -> tuple[tuple[int, ...], ...] | None:
    """Layers of each chunk of each stage when the embedding / loss take layer slots under
    interleaving (chunks of one stage differ), else None."""
    if chunks_per_stage(plan) == 1 or not (plan.account_for_embedding_in_pipeline_split
                                           or plan.account_for_loss_in_pipeline_split
                                           or pipeline_layout_text(plan) is not None):
        return None
    if model is None:
        raise ValueError("the layers of uneven chunks need the model")
    return _chunk_layout(model, plan)[2]


@lru_cache(maxsize=1024)
def _in_flight(schedule: str, p: int, m: int, v: int,
               chunk_layers: tuple[tuple[int, ...], ...] | None = None) -> tuple[float, ...]:
    """:func:`core.schedules.in_flight_microbatches` of every stage (cached: sweeps ask often);
    ``chunk_layers``: each stage's chunks' layers when they differ."""
    return schedules.in_flight_all(schedule, p, m, v, chunk_layers)


def fp8_weights_per_gpu(model: ModelConfig, plan: ParallelPlan) -> np.ndarray:
    """Weights of the FP8 linear layers held by one GPU of each stage, shape (p,): the
    family's sharded layer parameters without biases and attention sinks, over ``t``, times the
    stage's layers (the embedding, the output layer and the norms stay BF16; see :func:`op_kernels`). MoE
    layers: attention and shared experts over ``t``, the routed experts over ``ep*etp``
    (the router's gate stays BF16). Multi-head latent attention adds its replicated down
    projections, ``h (q_l + kv_l + d_pe)`` per layer on every rank."""
    weights = dataclasses.replace(model, add_bias_linear=False, add_qkv_bias=False,
                                  softmax_type="vanilla")  # attention sinks stay BF16 too
    sharded, _ = family_of(model).layer_parameters(weights)
    counts = _stage_layers_with_mtp(model, plan)
    moe_counts = stage_moe_layer_counts(model, plan)
    out = (counts - moe_counts) * sharded / plan.tensor_parallel
    out[loss_stage(plan)] += mtp_layers(model) * mtp_extra_parameters(model)[0] / plan.tensor_parallel
    if getattr(model, "multi_latent_attention", False) is True:
        # MLA's down projections: replicated TELinear layers, FP8 like the others
        ql, kvl, _, pe, _ = _mla_dims(model)
        out += counts * model.hidden_size * (ql + kvl + pe)
    if moe_counts.any():  # MoE layers: attention and shared experts over t, experts over ep*etp
        moe = moe_layer_parameters(weights)
        out += moe_counts * (moe.sharded / plan.tensor_parallel
                             + moe.experts / (plan.expert_parallel * expert_tensor_parallel(plan)))
    return out


def fp8_gathers_params(plan: ParallelPlan) -> bool:
    """Whether the sharded optimizer all-gathers the FP8 linear layers' weights in FP8
    (``plan.fp8_param_gather`` with ``precision="fp8"``)."""
    return bool(getattr(plan, "fp8_param_gather", False)) and plan.precision == "fp8"


def fp8_linear_params_per_layer(model: ModelConfig, tensor_parallel: int) -> float:
    """Weights of one dense layer's FP8 linear layers on one GPU: the family's sharded layer
    parameters without biases, over ``t`` (QKV, projection, fc1, fc2; the norms and biases stay
    BF16, as :func:`fp8_weights_per_gpu`)."""
    weights = dataclasses.replace(model, add_bias_linear=False, add_qkv_bias=False)
    return family_of(model).layer_parameters(weights)[0] / tensor_parallel


def param_gather_bytes(plan: ParallelPlan, n_params, fp8_linear=0.0):
    """Bytes of the all-gather of ``n_params`` parameters (a number or an array) of which
    ``fp8_linear`` are FP8 linear layers' weights: ``n_params * e`` (the training precision's
    tensor dtype, BF16 under FP8), or with :func:`fp8_gathers_params` ``(n_params -
    fp8_linear) * e + fp8_linear * 1`` (Megatron-LM ``--fp8-param-gather``: "Keep the compute
    param in fp8 ... and perform the param all-gather in fp8"; torchao/torchtitan
    ``enable_fsdp_float8_all_gather``: FSDP2 casts each weight shard to float8 before the
    all-gather). The scales (one per tensor, or per block) are neglected."""
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    if not fp8_gathers_params(plan):
        return n_params * e
    return (n_params - fp8_linear) * e + fp8_linear * FP8_BYTES


def fp8_weight_bytes_per_parameter(recipe: str, tn_only: bool = True) -> float:
    """Bytes of FP8 weight copies per linear-layer weight, besides its BF16 weight: TE keeps
    :func:`fp8_copies` copies of 1 byte plus their scales (:func:`fp8_scale_bytes`): per-tensor
    recipes 2 on Hopper (the weight and its transpose), 1 on Blackwell; ``mxfp8``
    ``2 * (1 + 1/32) = 2.0625``; ``blockwise`` ``2 * (1 + 4/128^2)``."""
    return fp8_copies(recipe, tn_only) * (FP8_BYTES + fp8_scale_bytes(recipe, weight=True))


def bytes_per_parameter(plan: ParallelPlan, data_parallel: int | None = None
                        ) -> tuple[float, float, float]:
    """``(weights, gradients, optimizer state)`` bytes per parameter on one GPU.

    Megatron-LM (docs, distributed optimizer table): 16-bit weights (4 with fp32),
    gradients in :func:`core.plan.config.grad_dtype` (fp32 main gradients with bf16), and
    an optimizer holding fp32 master weights (mixed precision only), Adam's two fp32
    moments and, when gradients are 16-bit, their fp32 copy: fp16/fp16 20, bf16/fp32 18,
    fp32/fp32 16 bytes. ZeRO (Rajbhandari et al. 2020, Sec. 5): stage 1 divides the
    optimizer state by ``d`` (Megatron's distributed optimizer: 4 + 16/d, 6 + 12/d,
    8 + 8/d), stage 2 the gradients too, stage 3 the weights too.

    FP8 training (Megatron-LM ``--bf16 --fp8-format``) keeps BF16 weights, fp32 main
    gradients and the same optimizer state as bf16 (18, or 6 + 12/d); the FP8 copies of the
    linear layers' weights come on top (:func:`fp8_weight_bytes_per_parameter`, added by
    :func:`stage_memory`): e.g. 20 bytes per linear weight with per-tensor scaling on Hopper
    (8 + 12/d with the distributed optimizer), 19 on Blackwell. With context parallelism
    ``d`` is ``d*cp`` (Megatron-Core shards over the data-parallel group with the cp ranks).
    With hybrid sharding (``plan.data_parallel_shard_size``, HSDP) ``d`` is the shard group's
    ``size*cp`` (:func:`core.plan.config.zero_shard_size`): the state is replicated over ``d/size``.
    ``data_parallel`` replaces ``d*cp`` (routed experts' parameters shard over the
    expert-data-parallel group, :func:`expert_data_parallel`: Megatron-Core's distributed
    optimizer shards them there).
    """
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    g = DTYPE_BYTES[grad_dtype(plan)]
    half = e < 4
    opt = (4 if half else 0) + 8 + (4 if g < 4 else 0)
    # Megatron-Core shards over d*cp; with hybrid sharding over the size*cp of a shard group
    d, z = data_parallel or zero_shard_size(plan), plan.zero_stage
    return (e / d if z >= 3 else e, g / d if z >= 2 else g, opt / d if z >= 1 else opt)


def nccl_communicators(plan: ParallelPlan) -> int:
    """NCCL communicators one rank of ``plan`` opens: one per process group with more than one
    rank that training communicates over (PyTorch creates a group's communicator at its first
    collective): tensor-parallel (``t > 1``), context-parallel (``cp > 1``), data-parallel
    (``d*cp > 1``: the gradient reduction and, sharded, the parameter gather), pipeline
    (``p > 1``: the stage-to-stage sends), the model-parallel group (``t*p > 1`` with ``p > 1``:
    Megatron-Core's gradient-norm all-reduce, ``parallel_state.get_model_parallel_group``) and
    expert-parallel (``ep > 1``)."""
    t, p = plan.tensor_parallel, plan.pipeline_parallel
    cp = getattr(plan, "context_parallel", 1) or 1
    ep = getattr(plan, "expert_parallel", 1) or 1
    return int(t > 1) + int(cp > 1) + int(plan.data_parallel * cp > 1) + int(p > 1) \
        + int(p > 1 and t * p > 1) + int(ep > 1)


def nccl_buffer_bytes(plan: ParallelPlan) -> float:
    """NCCL's own buffers on one GPU, bytes: :data:`NCCL_BUFFSIZE_BYTES` per channel and ring
    peer (:data:`NCCL_CHANNELS`, :data:`NCCL_RING_PEERS`) for each of
    :func:`nccl_communicators` (NCCL docs, ``NCCL_BUFFSIZE``: "the size of the buffer NCCL uses
    for each pair of ranks" per channel); 128 MiB per communicator."""
    return nccl_communicators(plan) * NCCL_CHANNELS * NCCL_RING_PEERS * NCCL_BUFFSIZE_BYTES


class StageMemoryArrays(tuple):
    """:func:`stage_memory_arrays`' result: a tuple of the four tensor arrays (weights,
    gradients, optimizer state, activations; float64, shape (p,)) that unpacks as four, with
    the process's other terms as attributes, float64 (p,) each: ``workspace``,
    ``allocator_reserve``, ``cuda_context``, ``nccl_buffers`` (:func:`process_memory_terms`)."""

    workspace: np.ndarray
    allocator_reserve: np.ndarray
    cuda_context: np.ndarray
    nccl_buffers: np.ndarray

    def __new__(cls, tensors: tuple, terms: dict[str, np.ndarray]) -> "StageMemoryArrays":
        out = super().__new__(cls, tensors)
        for name, value in terms.items():
            setattr(out, name, value)
        return out

    @classmethod
    def of(cls, plan: ParallelPlan, weights: np.ndarray, grads: np.ndarray, opt: np.ndarray,
           acts: np.ndarray) -> "StageMemoryArrays":
        """The four tensor arrays (bytes, float64 (p,) each) with the process's other terms
        for ``plan`` (:func:`process_memory_terms` of their sum)."""
        return cls((weights, grads, opt, acts),
                   process_memory_terms(plan, weights + grads + opt + acts))

    @property
    def overhead_bytes(self) -> np.ndarray:
        """The terms beyond the four tensor arrays, summed per stage, float64 (p,)."""
        return self.workspace + self.allocator_reserve + self.cuda_context + self.nccl_buffers


def process_memory_terms(plan: ParallelPlan, tensors: np.ndarray) -> dict[str, np.ndarray]:
    """What a training process holds on each GPU besides the model's tensors, bytes, float64
    (p,) each, given the stages' tensor bytes:

    * ``workspace``: :data:`GEMM_WORKSPACE_BYTES` (in ``max_memory_allocated``);
    * ``allocator_reserve``: :data:`ALLOCATOR_RESERVE_FRACTION` of the allocated memory,
      ``tensors`` (weights, gradients, optimizer state and activations, shape (p,)) plus the
      workspaces (``max_memory_reserved`` less ``max_memory_allocated``);
    * ``cuda_context``: :data:`CUDA_CONTEXT_BYTES`; ``nccl_buffers``: :func:`nccl_buffer_bytes`
      (outside PyTorch's allocator: ``nvidia-smi`` only).
    """
    tensors = np.asarray(tensors, float)
    workspace = np.full(tensors.shape, float(GEMM_WORKSPACE_BYTES))
    return {"workspace": workspace,
            "allocator_reserve": ALLOCATOR_RESERVE_FRACTION * (tensors + workspace),
            "cuda_context": np.full(tensors.shape, float(CUDA_CONTEXT_BYTES)),
            "nccl_buffers": np.full(tensors.shape, float(nccl_buffer_bytes(plan)))}


def stage_memory_arrays(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool = True
                        ) -> StageMemoryArrays:
    """Memory of one GPU of each pipeline stage (bytes): weights, gradients, optimizer state and
    activations, four float64 arrays shape (p,) (:func:`stage_memory` as arrays), with the
    process's other terms as attributes (:class:`StageMemoryArrays`,
    :func:`process_memory_terms`).

    Weights, gradients and optimizer state: :func:`params_per_gpu` times
    :func:`bytes_per_parameter` (routed experts' parameters, :func:`expert_params_per_gpu`,
    with the expert-data-parallel size in place of ``d``). Under ZeRO-3 parameters are gathered
    layer by layer (Rajbhandari et al. 2020, Sec. 5.3) and a layer's gradients exist unsharded
    until their reduce-scatter: at the peak a GPU holds the current layer's gathered weights and
    its unsharded gradients (in :func:`core.plan.config.grad_dtype`, the reduce-scatter's input) and,
    with ``overlap_param_gather`` (the next layer's all-gather prefetched under the current
    layer's compute), the next layer's gathered weights too: PyTorch FSDP, ``BackwardPrefetch``
    ("at the peak, it holds the current set of parameters, next set of parameters, and current
    set of gradients in memory"; FSDP2 and Megatron-FSDP's double buffer prefetch alike).
    Activations: :func:`activation_bytes_per_layer` of each layer times
    :func:`in_flight_microbatches`; under full recomputation the recomputed layers
    keep only their input and the layer being recomputed needs its full
    activations once (Korthikanti et al. 2022, Sec. 4.3); the last stage adds the
    logits and their fp32 copy for the loss, ``s*b*V'/t*(e + 4)`` (Megatron-Core
    ``VocabParallelCrossEntropy``: the logits cast to fp32, exponentiated in place and saved
    for the backward), and ``s*b*V'/t*4`` more for each further micro-batch whose loss awaits
    its backward (with Transformer Engine's fused cross-entropy,
    :func:`cross_entropy_fusion` ``te``, the logits' place holds their gradient instead:
    ``s*b*V'/t*e`` per such micro-batch) (:func:`core.schedules.loss_in_flight`: GPipe's ``m``; 1 otherwise). With FP8 the weights add
    the FP8 copies of the linear layers' weights, :func:`fp8_weights_per_gpu` times
    :func:`fp8_weight_bytes_per_parameter` (``fp8_tn``: the GPU's FP8 GEMMs are TN-only,
    :func:`fp8_tn_only`; divided by ``d`` under ZeRO-3 as the weights are). With
    ``fp8_param_gather`` (:func:`fp8_gathers_params`): under ZeRO 1/2 the linear layers' BF16
    compute weights are not kept, their FP8 copies are (Megatron-LM ``--fp8-param-gather``
    keeps the compute parameters in FP8: ``e`` bytes less per linear weight); under ZeRO-3 the
    shards stay BF16 (torchao casts them to float8 for the all-gather) and the gathered layer's
    linear weights take 1 byte (:func:`param_gather_bytes`). With context parallelism
    every activation is of the rank's ``s/cp`` tokens. Multi-token prediction (``N`` layers on
    the last stage): their transformer layers count with the stage's layers (checkpointed under
    full recomputation: Megatron-Core's MTP layer recomputes its transformer layer then), each
    keeps its two norms' inputs and ``eh_proj``'s input (``4h`` elements per token, split over
    ``t`` with sequence parallelism) and adds its logits, ``N + 1`` times the logits in all.
    Context parallelism adds, on every stage with layers, the buffers of the exchange of the
    attention layer running (:func:`cp_exchange_buffer_bytes`: one layer's, transient).
    """
    t = plan.tensor_parallel
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    weights, grads, opt = _state_bytes(model, plan, fp8_tn)
    counts = _stage_layers_with_mtp(model, plan)
    moe_counts = stage_moe_layer_counts(model, plan)
    recomputed = recomputed_layers(model, plan)
    n_mtp = mtp_layers(model)
    if n_mtp and plan.recompute == "full":  # the MTP layers' transformer layers: checkpointed
        recomputed = recomputed.copy()
        recomputed[loss_stage(plan)] += n_mtp
    keep_mode = "none" if plan.recompute == "full" else plan.recompute
    keep = activation_bytes_per_layer(model, plan, keep_mode)
    ckpt = activation_bytes_per_layer(model, plan, "full")
    working = activation_bytes_per_layer(model, plan, "none")
    if moe_counts.any():
        moe_keep = moe_activation_bytes_per_layer(model, plan, keep_mode)
        working = max(working, moe_activation_bytes_per_layer(model, plan, "none"))
    V = padded_vocab_size(model.vocab_size, t)
    in_flight = _ep_overlap_in_flight(plan, _in_flight(  # of every stage
        plan.schedule, plan.pipeline_parallel, plan.num_microbatches, chunks_per_stage(plan),
        _uneven_chunks(plan, model)), model)
    # every stage at once (numpy: the same IEEE operations in the same order as one by one)
    layers = np.array(counts, np.int64)
    keep_s = np.full(len(counts), keep)
    if moe_counts.any():  # an MoE model's stage keeps its mean layer's activations
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = (keep * (layers - moe_counts) + moe_keep * moe_counts) / layers
        keep_s = np.where(moe_counts != 0, mean, keep_s)
    acts = (recomputed * ckpt + (layers - recomputed) * keep_s) * np.array(in_flight, float)
    acts = np.where(recomputed != 0, acts + working, acts)  # the layer being recomputed
    tokens = model.seq_length // plan.context_parallel * plan.micro_batch_size
    # the logits of the output layer and of each MTP layer's (one loss each)
    losses = schedules.loss_in_flight(plan.schedule, plan.pipeline_parallel, plan.num_microbatches,
                                      chunks_per_stage(plan))
    last = loss_stage(plan)
    if cross_entropy_fusion(plan) == "te":  # the forward's gradient, in the logits' place
        acts[last] += (1 + n_mtp) * tokens * V / t * e * losses
    else:
        acts[last] += (1 + n_mtp) * tokens * V / t * (e + 4 * losses)
    if n_mtp:  # each MTP layer's enorm and hnorm inputs and eh_proj's 2h-wide input
        sp = plan.sequence_parallel and t > 1
        acts[last] += n_mtp * tokens * 4 * model.hidden_size * e / (t if sp else 1) * in_flight[last]
    if plan.context_parallel > 1:  # the exchange's buffers of the layer running (transient)
        acts = np.where(layers > 0, acts + cp_exchange_buffer_bytes(model, plan), acts)
    return StageMemoryArrays.of(plan, weights.copy(), grads.copy(), opt.copy(), acts)


#: Plan fields the weights, gradients and optimizer state of :func:`stage_memory_arrays` do
#: not read (the micro-batch size and the recomputation: activations only).
STATE_FREE_PLAN_FIELDS = ("micro_batch_size", "recompute", "recompute_num_layers",
                          "recompute_modules")
_STATE_KEY = operator.itemgetter(*(i for i, f in enumerate(PLAN_FIELDS)
                                   if f not in STATE_FREE_PLAN_FIELDS))
_STATE: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def stage_state_bytes(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool = True
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The weights, gradients and optimizer state of :func:`stage_memory_arrays` (bytes per
    GPU, float64 (p,) each, read-only; memoized): what the sweep adds to activations it
    shares between plans that differ only on the data-parallel side."""
    return _state_bytes(model, plan, fp8_tn)


#: Plan fields the activations of :func:`stage_memory_arrays` do not read (the data-parallel
#: side but d, which sets the micro-batch count): the sweep shares them.
ACTIVATION_FREE_PLAN_FIELDS = ("zero_stage", "overlap_grad_reduce", "overlap_param_gather")


def _state_bytes(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The weights, gradients and optimizer state of :func:`stage_memory_arrays`, float64 (p,)
    each (read-only), memoized: a sweep's plans that differ only in the micro-batch size or the
    recomputation share them. Keyed by every model field, ``fp8_tn`` and every plan field but
    :data:`STATE_FREE_PLAN_FIELDS` (tests check that none of those changes them)."""
    key = (_MODEL_FIELD_VALUES(model), _STATE_KEY(plan_key(plan)), bool(fp8_tn))
    hit = _STATE.get(key)
    if hit is None:
        if len(_STATE) > 4096:
            _STATE.clear()
        hit = _STATE[key] = _state_bytes_of(model, plan, fp8_tn)
        for a in hit:
            a.setflags(write=False)
    return hit


def _state_bytes_of(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_state_bytes` computed (see :func:`stage_memory_arrays` for the formulas)."""
    t = plan.tensor_parallel
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    experts = expert_params_per_gpu(model, plan)
    n = params_per_gpu(model, plan) - experts
    w, g, o = bytes_per_parameter(plan)
    we, ge, oe = bytes_per_parameter(plan, expert_data_parallel(plan)) if experts.any() else (0, 0, 0)
    sharded, replicated = family_of(model).layer_parameters(model)
    gathered = gathered_grads = 0.0
    if plan.zero_stage >= 3:  # the current layer (and, prefetched, the next) unsharded
        layer_n = sharded / t + replicated
        live = 2 if plan.overlap_param_gather else 1
        gathered = live * param_gather_bytes(plan, layer_n, fp8_linear_params_per_layer(model, t))
        gathered_grads = layer_n * DTYPE_BYTES[grad_dtype(plan)]
    recipe = fp8_recipe(plan)
    fp8_w = np.zeros(len(n))
    if recipe is not None:
        fp8_w = fp8_weights_per_gpu(model, plan) * fp8_weight_bytes_per_parameter(recipe, fp8_tn)
        if plan.zero_stage >= 3:
            fp8_w = fp8_w / zero_shard_size(plan)  # FSDP shards over d*cp (size*cp with HSDP)
        elif fp8_gathers_params(plan):  # --fp8-param-gather: the compute weights are FP8 only
            fp8_w = fp8_w - fp8_weights_per_gpu(model, plan) * e
    return (n * w + experts * we + gathered + fp8_w, n * g + experts * ge + gathered_grads,
            n * o + experts * oe)


def stage_memory(model: ModelConfig, plan: ParallelPlan, fp8_tn: bool = True) -> list[StageMemory]:
    """Memory of one GPU of each pipeline stage (bytes; see :class:`core.model.stage_memory.StageMemory`):
    :func:`stage_memory_arrays` stage by stage."""
    parts = stage_memory_arrays(model, plan, fp8_tn)
    weights, grads, opt = parts[:3]
    acts = parts[3].tolist()
    return [StageMemory(i, weights[i], grads[i], opt[i], acts[i],
                        workspace_bytes=float(parts.workspace[i]),
                        allocator_reserve_bytes=float(parts.allocator_reserve[i]),
                        cuda_context_bytes=float(parts.cuda_context[i]),
                        nccl_buffer_bytes=float(parts.nccl_buffers[i]))
            for i in range(len(acts))]

