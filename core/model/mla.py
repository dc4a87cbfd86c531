"""Multi-head latent attention (DeepSeek-V2/V3; Megatron-Core ``MLASelfAttention``): its
parameters, FLOPs, kernels and activation terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.model.attention import attention_core_kernels
from core.model.base import DTYPE_BYTES, Kernel, mem, wgrad_accumulate, wgrad_accumulate_bytes
from core.model.fp8 import linear_kernels
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, tensor_dtype

__all__ = [
    "mla_activation_terms", "mla_attention_parameters", "mla_dims",
    "mla_forward_flops_per_token", "mla_op_kernels", "mla_tp_latent_width",
    "mla_up_proj_forward_flops_per_token",
]


def mla_dims(model_or_key: Any) -> tuple[int, int, int, int, int]:
    """``(q_lora_rank or 0, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim)`` of a
    model or of an op key (:data:`MLA_KEY`)."""
    if isinstance(model_or_key, Mapping):
        k = model_or_key
        return int(k["qlr"]), int(k["kvlr"]), int(k["qkd"]), int(k["qpe"]), int(k["vd"])
    m = model_or_key
    return (int(m.q_lora_rank or 0), int(m.kv_lora_rank), int(m.qk_head_dim),
            int(m.qk_pos_emb_head_dim), int(m.v_head_dim))


def mla_attention_parameters(model: ModelConfig) -> tuple[float, float]:
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
      ``add_bias_linear`` or ``add_proj_bias`` (MLA's other linears have none).

    DeepSeek-V3 (h 7168, 128 heads, q_l 1536, kv_l 512, 128 + 64, v 128, RMSNorm, QK-norm):
    171,966,464 sharded and 15,148,032 replicated per layer (187,114,496 with the input norm).
    """
    h, a = model.hidden_size, model.num_attention_heads
    ql, kvl, qk, pe, dv = mla_dims(model)
    q = ql * a * (qk + pe) if ql else h * a * (qk + pe)
    sharded = q + kvl * a * (qk + dv) + a * dv * h
    w = 2 if model.normalization == "layernorm" else 1  # weights per normalized channel
    latent_norms = w * (ql + kvl) if model.qk_layernorm else 0
    replicated = (h * ql + h * (kvl + pe) + latent_norms + w * h
                  + (h if model.add_bias_linear or getattr(model, "add_proj_bias", False)
                     else 0))
    return sharded, replicated


def mla_forward_flops_per_token(model: ModelConfig) -> tuple[float, float]:
    """``(linear layers, core)`` forward FLOPs per token of multi-head latent attention (2 FLOPs
    per multiply-add; names as :func:`mla_attention_parameters`).

    Linear: query ``2 q_l (h + a (d_qk + d_pe))`` (without compression ``2 h a (d_qk + d_pe)``),
    key/value ``2 h (kv_l + d_pe) + 2 kv_l a (d_qk + d_v)``, projection ``2 a d_v h``; core
    ``2 s a (d_qk + d_pe) + 2 s a d_v`` (scores over heads of ``d_qk + d_pe`` channels, values
    of ``d_v``; the full ``s x s`` as this module counts dense attention). Megatron-LM's
    ``num_floating_point_operations`` counts the same GEMMs, but halves the core for the causal
    mask and adds one FLOP per latent channel for the norms.
    """
    h, s, a = model.hidden_size, model.seq_length, model.num_attention_heads
    ql, kvl, qk, pe, dv = mla_dims(model)
    q = 2 * ql * (h + a * (qk + pe)) if ql else 2 * h * a * (qk + pe)
    kv = 2 * h * (kvl + pe) + 2 * kvl * a * (qk + dv)
    return q + kv + 2 * a * dv * h, 2 * s * a * (qk + pe + dv)


def mla_up_proj_forward_flops_per_token(model: ModelConfig) -> float:
    """Forward FLOPs per token of MLA's up-projections (what recompute module ``mla_up_proj``
    runs again): ``2 q_l a (d_qk + d_pe) + 2 kv_l a (d_qk + d_v)`` (without query compression
    the query projection ``2 h a (d_qk + d_pe)``)."""
    h, a = model.hidden_size, model.num_attention_heads
    ql, kvl, qk, pe, dv = mla_dims(model)
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
    ql, kvl, _, pe, _ = mla_dims(model)
    return (ql or model.hidden_size) + kvl + pe


def mla_op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """Kernels of one GPU's share of a multi-head latent attention op (``attention_fwd``,
    ``attention_bwd`` and the core's ``attention_core_fwd/bwd`` of a key with ``kvlr > 0``).
    (The forward's and the backward's kernel lists are written out in execution order,
    :func:`_mla_forward_kernels` and :func:`_mla_backward_kernels`, to read top to bottom
    against Megatron-Core's module.)

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
    refuses MLA with the unfused kernel); under context parallelism (the key's ``s`` the rank's
    ``s/cp`` tokens) every token-wise kernel runs on the rank's tokens (Megatron-Core's fused
    MLA RoPE takes the cp rank's positions) and the core is the exchange's
    (:func:`_mla_core_kernels`).
    """
    sh = _mla_shape(key)
    core, core_bwd = _mla_core_kernels(sh, key)
    if op == "attention_core_fwd":
        return core
    if op == "attention_core_bwd":
        return core_bwd
    if op == "attention_fwd":
        return _mla_forward_kernels(sh, core)
    return _mla_backward_kernels(sh, core_bwd)


@dataclass(frozen=True)
class _MlaShape:
    """One rank's sizes of an MLA op (see :func:`mla_op_kernels`): ``e`` bytes per element and
    ``acc`` per weight gradient added by a kernel of its own
    (:func:`core.model.base.wgrad_accumulate_bytes`), ``linear`` / ``cast`` the linear-layer kernel
    makers (:func:`core.model.fp8.linear_kernels`), ``T = b s`` tokens and ``T_in`` the down
    projections' (``T/t`` with sequence parallelism), ``tok`` bytes of ``T_in`` hidden states,
    the MLA widths (:func:`mla_dims`; ``dqk = d_qk + d_pe``), ``q_cols``, ``kv_cols`` and ``ctx``
    the up projections' and the core output's columns on ``heads = a/t`` heads, ``norm`` the
    norm kernel's name and ``qkn`` the latent norms (QK-norm)."""

    e: int
    acc: float
    linear: Any
    cast: Any
    b: int
    s: int
    h: int
    heads: int
    ql: int
    kvl: int
    qk: int
    pe: int
    dv: int
    dqk: int
    T: int
    T_in: int
    tok: int
    norm: str
    qkn: bool
    q_cols: int
    kv_cols: int
    ctx: int


def _mla_shape(key: Mapping[str, Any]) -> _MlaShape:
    """The :class:`_MlaShape` of an MLA op key (:data:`core.model.keys.MLA_KEY` columns)."""
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    acc = wgrad_accumulate_bytes(key, dtype)[0]  # Transformer Engine linears
    linear, cast = linear_kernels(key)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    heads = int(key["a"]) // t
    ql, kvl, qk, pe, dv = mla_dims(key)
    dqk = qk + pe
    T = b * s
    sp = bool(key.get("sp"))
    T_in = T // t if sp else T  # the down projections' tokens (replicated layers)
    tok = T_in * h * e
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    qkn = bool(int(key.get("qkn", 0) or 0))
    q_cols, kv_cols, ctx = heads * dqk, heads * (qk + dv), heads * dv
    return _MlaShape(e=e, acc=acc, linear=linear, cast=cast, b=b, s=s, h=h, heads=heads, ql=ql,
                     kvl=kvl, qk=qk, pe=pe, dv=dv, dqk=dqk, T=T, T_in=T_in, tok=tok, norm=norm,
                     qkn=qkn, q_cols=q_cols, kv_cols=kv_cols, ctx=ctx)


def _mla_core_kernels(sh: _MlaShape, key: Mapping[str, Any]) -> tuple[list[Kernel], list[Kernel]]:
    """``(forward, backward)`` FlashAttention kernels of the MLA core: causal, ``2 b (a/t)
    (s^2/2) (d_qk + d_pe + d_v)`` FLOPs forward, 2.5x that backward (see :func:`mla_op_kernels`);
    the dense core's kernels (:func:`core.model.attention.attention_core_kernels`) with K/V
    heads = query heads, Q and K of ``d_qk + d_pe`` channels, V and the output of ``d_v``, so
    that context parallelism (the key's ``cp``, ``cpa``, ``cpg``: the ring's steps, the
    all-gather's two chunks, the all-to-all's head split) runs as for any other model."""
    flash = {**key, "attn": "flash"}  # MLA runs in FlashAttention only (validation)
    return attention_core_kernels(flash, sh.b, sh.s, sh.heads, sh.heads, sh.dqk, sh.e, sh.dv)


def _mla_assemble_bytes(sh: _MlaShape) -> int:
    """Bytes of the RoPE-and-assembly kernel (either pass): it reads the up projections' outputs
    and the rotary key and writes Q, K (``a/t`` heads of ``d_qk + d_pe``) and V (``d_v``)."""
    return sh.e * sh.T * (sh.q_cols + sh.kv_cols + sh.pe + 2 * sh.q_cols + sh.ctx)


def _mla_forward_kernels(sh: _MlaShape, core: list[Kernel]) -> list[Kernel]:
    """``attention_fwd``'s MLA kernels in execution order (see :func:`mla_op_kernels`)."""
    linear, cast, e, h = sh.linear, sh.cast, sh.e, sh.h
    T, T_in, ql, kvl, pe, norm = sh.T, sh.T_in, sh.ql, sh.kvl, sh.pe, sh.norm
    q_norm = [mem(f"q_latent_{norm}", 2 * T_in * ql * e)] if (sh.qkn and ql) else []
    kv_norm = [mem(f"kv_latent_{norm}", 2 * T_in * kvl * e)] if sh.qkn else []
    if ql:
        q_up = [*q_norm, *cast("q_up_proj_input", T * ql),
                linear("q_up_proj", T, sh.q_cols, ql)]          # (b*s, q_l) x (q_l, a dqk/t)
    else:
        q_up = [*cast("q_proj_input", T * h), linear("q_proj", T, sh.q_cols, h)]
    return [
        mem(norm, 2 * sh.tok),
        *cast("down_proj_input", T_in * h),
        *([linear("q_down_proj", T_in, ql, h)] if ql else []),   # (T_in, h) x (h, q_l)
        linear("kv_down_proj", T_in, kvl + pe, h),                # (T_in, h) x (h, kv_l+pe)
        *q_up,
        *kv_norm, *cast("kv_up_proj_input", T * kvl),
        linear("kv_up_proj", T, sh.kv_cols, kvl),                # (b*s, kv_l) x (kv_l, .)
        mem("mla_rope_concat", _mla_assemble_bytes(sh)),
        *core,
        *cast("proj_input", T * sh.ctx),
        linear("proj", T, h, sh.ctx),                            # (b*s, a dv/t) x (., h)
    ]


def _mla_backward_kernels(sh: _MlaShape, core_bwd: list[Kernel]) -> list[Kernel]:
    """``attention_bwd``'s MLA kernels in execution order (see :func:`mla_op_kernels`): each
    GEMM's input and weight gradients, the weight gradients accumulated once."""
    linear, cast, e, h = sh.linear, sh.cast, sh.e, sh.h
    T, T_in, ql, kvl, pe, norm = sh.T, sh.T_in, sh.ql, sh.kvl, sh.pe, sh.norm
    q_cols, kv_cols, ctx, qkn = sh.q_cols, sh.kv_cols, sh.ctx, sh.qkn
    weights = (h * ql + h * (kvl + pe) + (ql * q_cols if ql else h * q_cols) + kvl * kv_cols
               + ctx * h)
    if ql:
        q_up_bwd = [*cast("q_up_proj_grad", T * q_cols),
                    linear("q_up_proj_dgrad", T, ql, q_cols), linear("q_up_proj_wgrad", q_cols, ql, T),
                    *([mem(f"q_latent_{norm}_bwd", 4 * T_in * ql * e)] if qkn else [])]
    else:
        q_up_bwd = [*cast("q_proj_grad", T * q_cols),
                    linear("q_proj_dgrad", T, h, q_cols), linear("q_proj_wgrad", q_cols, h, T)]
    return [
        mem("bias_dropout_add_bwd", 2 * sh.tok),
        *cast("proj_grad", T * h),
        linear("proj_dgrad", T, ctx, h), linear("proj_wgrad", ctx, h, T),
        *wgrad_accumulate(sh.acc * weights),
        *core_bwd,
        mem("mla_rope_concat_bwd", _mla_assemble_bytes(sh)),
        *cast("kv_up_proj_grad", T * kv_cols),
        linear("kv_up_proj_dgrad", T, kvl, kv_cols), linear("kv_up_proj_wgrad", kv_cols, kvl, T),
        *([mem(f"kv_latent_{norm}_bwd", 4 * T_in * kvl * e)] if qkn else []),
        *q_up_bwd,
        *cast("down_proj_grad", T_in * (ql + kvl + pe)),
        *([linear("q_down_proj_dgrad", T_in, h, ql), linear("q_down_proj_wgrad", ql, h, T_in)]
          if ql else []),
        linear("kv_down_proj_dgrad", T_in, h, kvl + pe),
        linear("kv_down_proj_wgrad", kvl + pe, h, T_in),
        mem(f"{norm}_bwd", 4 * sh.tok),
    ]


def mla_activation_terms(model: ModelConfig, plan: ParallelPlan, mods: tuple[str, ...]
                          ) -> tuple[float, float]:
    """``(attention, latent)`` activation terms of multi-head latent attention in the units of
    :func:`dense_activation_bytes_per_layer` (bytes per token over ``h``, 16-bit tensors):
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
    ql, kvl, qk, pe, dv = mla_dims(model)
    fp8 = plan.precision == "fp8"
    if "mla_up_proj" in mods:
        return 2 * a * dv / h, 2 * (ql + kvl + pe) / h
    attention = 2 * a * (2 * (qk + pe) + 2 * dv) / h
    if model.qk_layernorm:
        latent = (3 if fp8 else 4) * (ql + kvl) / h
    else:
        latent = (1 if fp8 else 2) * (ql + kvl) / h
    return attention, latent
