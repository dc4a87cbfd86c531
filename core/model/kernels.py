"""The kernels of an op for one GPU (:func:`op_kernels`), dispatched to the model family's
kernels by the op key, and the key of a model's ops under a plan (:func:`op_key`).
"""

from __future__ import annotations

from typing import Any, Mapping

from core.model.base import WGRAD_ACCUMULATION_KEY, Kernel
from core.model.context_parallel import cp_a2a_size, cp_all_gather
from core.model.families import family_of, family_of_key
from core.model.fp8 import linear_kernels
from core.model.keys import (DERIVED_OPS, FAMILY_KEY, FAMILY_KEY_DEFAULTS, OP_KEYS, PART_OPS,
                             SELECTIVE_OP_GEMMS, SELECTIVE_OP_OPS, SWA_OPS, UNTABULATED_OP_KEYS,
                             activation_fusion, activation_key, cross_entropy_fusion, full_op_key, mla_key,
                             with_family_defaults)
from core.model.mlp import is_gated
from core.model.moe import expert_tensor_parallel, moe_ffn
from core.model.recompute import SELECTIVE_OP_SAVED, selective_op_linears
from core.model.tf32 import TF32_KEY, tf32_kernels, tf32_key
from core.plan.model_config import ModelConfig, padded_vocab_size
from core.plan.parallel import ParallelPlan, fp8_recipe, tf32_matmuls, wgrad_accumulation

__all__ = ["op_kernels", "selective_op_kernels", "op_key", "family_key_columns"]


def _family(model: ModelConfig | None, key: Mapping[str, Any]):
    """The family whose kernels ``key``'s ops take: ``model``'s when given, else the key's
    (:func:`core.model.families.family_of_key`)."""
    return family_of(model) if model is not None else family_of_key(key)


def op_kernels(op: str, key: Mapping[str, Any], model: ModelConfig | None = None) -> list[Kernel]:
    """The kernels of ``op`` for one GPU, given the key columns of :data:`OP_KEYS`.

    With a true ``key["tf32"]`` and ``dtype="fp32"`` (:func:`core.model.tf32.tf32_key`) the
    GEMMs run at the TF32 peak (:func:`core.model.tf32.tf32_kernels`).

    An optional ``key["sp"]`` (true under sequence parallelism) runs the
    LayerNorm and dropout kernels on ``s/t`` tokens. A family column missing from
    ``key`` takes GPT's value (:func:`full_op_key`). ``attention_core_fwd``
    is the attention core (scores, softmax, dropout, values) that selective
    recomputation runs again; it takes ``attention_fwd``'s key; ``attention_core_bwd``
    its backward (the ring's share of ``attention_bwd`` under context parallelism). The
    other derived ops (:data:`PART_OPS`) are the base op's kernels that a recomputed module
    runs again (``layernorm_fwd``, ``mlp_core_fwd``, ``router_gate_fwd``,
    ``moe_unpermute_core_fwd``, ``experts_act_fwd``). The kernels are the family's: that of
    ``model`` when given, else the key's :data:`core.model.keys.FAMILY_KEY` entry (``dense``
    without one).

    Raises
    ------
    KeyError
        Unknown op or a key column missing.
    """
    kernels = _op_kernels(op, key, model)
    return tf32_kernels(kernels) if tf32_key(key) else kernels


def _op_kernels(op: str, key: Mapping[str, Any], model: ModelConfig | None) -> list[Kernel]:
    """:func:`op_kernels` before TF32 (each kernel at its dtype's or the key's peak)."""
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
        return _family(model, key).op_kernels(SWA_OPS[op], full_op_key(base, key))
    if op in SELECTIVE_OP_OPS:  # what per-op checkpointing runs again of its base op
        return selective_op_kernels(base, key, model)
    if op in SELECTIVE_OP_GEMMS:  # the recomputed GEMM of a recomputed all-gather's output
        name = SELECTIVE_OP_GEMMS[op][1]
        return [k for k in selective_op_kernels(base, key, model) if k.name == name]
    if op in PART_OPS:  # a part of its base op: the base op's kernels that it runs
        keep = PART_OPS[op]
        return [k for k in _family(model, key).op_kernels(base, full_op_key(base, key)) if keep(k.name)]
    return _family(model, key).op_kernels(op, full_op_key(op, key))


def selective_op_kernels(base: str, key: Mapping[str, Any], model: ModelConfig | None = None
                         ) -> list[Kernel]:
    """The kernels of ``base`` (``attention_fwd`` or ``mlp_fwd``) that torchtitan's per-op
    selective activation checkpointing runs again in the layer's backward.

    torchtitan's save list (``_save_list``): ``aten.mm`` (every other one, see
    :func:`selective_op_linears`), the SDPA kernels, ``reduce_scatter_tensor`` and ``aten.max``
    (the absolute maximum of float8 scaling); every other op of the block is recomputed
    (norms, RoPE, QK-norm, the activation, the residual adds, the float8 casts and the scale
    each computes from its saved amax: torchao ``float8_utils.amax_to_scale``, a clamp and a
    division, the ``_scale`` kernels). So of the
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
    full = with_family_defaults(key)
    if full.get("attn") != "flash":
        raise ValueError("selective_op recomputation needs the flash attention kernel (the "
                         "unfused core is not modelled under per-op checkpointing)")
    kernels = _family(model, key).op_kernels(base, full_op_key(base, key))
    linear, _ = linear_kernels(full)
    t = int(full["t"])
    gated = is_gated(full.get("act"))
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
        elif k.name in SELECTIVE_OP_SAVED or k.name.endswith("_amax"):
            continue
        else:
            out.append(k)
    return out


def family_key_columns(model: ModelConfig) -> dict[str, Any]:
    """The model's own columns of its op keys: ``h``, ``a`` and the family columns
    (:data:`core.model.keys.FAMILY_KEY_DEFAULTS` but ``cp`` and ``ce``, which the plan sets:
    ``g`` query groups, ``act`` the timed activation, ``glc`` its clamp, ``actf`` its
    fusion, ``norm``, ``pos``,
    ``attn``, ``qkn``,
    ``kv`` the head size, the MLA columns) and, for a family other than ``dense``, its name
    (:data:`core.model.keys.FAMILY_KEY`) when the family's components add kernels
    (:attr:`core.model.spec.ModelFamily.adds_kernels`; absent for dense models, whose keys
    predate it, and for any family whose ops are the dense ones)."""
    out = dict(a=model.num_attention_heads, g=model.query_groups,
               act=activation_key(model.activation), norm=model.normalization,
               pos=model.position_embedding, attn=model.attention_kernel,
               qkn=int(model.qk_layernorm), h=model.hidden_size, kv=model.head_dim,
               glc=int(model.activation_func_clamp_value is not None
                       and is_gated(model.activation)),
               actf=activation_fusion(model),
               **mla_key(model))
    family = family_of(model)
    if family.adds_kernels:
        out[FAMILY_KEY] = family.name
    return out


def op_key(model: ModelConfig, plan: ParallelPlan) -> dict[str, Any]:
    """Key of a model's ops under ``plan``: the profile store's key columns
    (:data:`core.model.keys.OP_KEYS`) plus ``sp`` (sequence parallelism, which changes the
    LayerNorm and dropout kernels), ``cpa`` / ``cpg`` (the context-parallel exchange) and, with
    ``precision="fp8"``, ``fp8``, the scaling recipe (:func:`core.plan.parallel.fp8_recipe`);
    with TF32 matmuls (:func:`core.plan.parallel.tf32_matmuls`: ``plan.tf32`` in fp32),
    ``tf32`` true (:data:`core.model.tf32.TF32_KEY`; absent otherwise, so every other key is
    unchanged); ``dtype`` is the precision, so FP8 and BF16 op times (and TF32 and FP32 ones)
    never share a cache entry or a table row. MoE models add :data:`core.model.keys.MOE_KEY`'s
    columns. ``wacc`` (:data:`core.model.base.WGRAD_ACCUMULATION_KEY`) is
    :func:`core.plan.parallel.wgrad_accumulation`: which weight gradients a kernel of their own
    adds to the gradient buffer (no table column: the tables hold ``separate``).

    ``s`` is the tokens of one rank's share of a sequence, ``seq_length / cp`` under context
    parallelism (every token-wise op runs on them); ``cp`` tells the attention ops that their
    core attends to the whole sequence in a ring of ``cp`` steps."""
    m, pl = model, plan
    t, cp = pl.tensor_parallel, pl.context_parallel
    fam = family_key_columns(m)
    V = padded_vocab_size(m.vocab_size, t, divisible_by=m.make_vocab_size_divisible_by)
    key = dict(b=pl.micro_batch_size, s=m.seq_length // cp, cp=cp, h=fam.pop("h"),
               a=fam.pop("a"), f=m.ffn, t=t, V=V,
               dtype=pl.precision, g=fam.pop("g"), act=fam.pop("act"), norm=fam.pop("norm"),
               cpa=cp_a2a_size(pl), cpg=int(cp_all_gather(pl)), pos=fam.pop("pos"),
               attn=fam.pop("attn"), qkn=fam.pop("qkn"), kv=fam.pop("kv"),
               sp=bool(pl.sequence_parallel and t > 1), **fam,
               ce=cross_entropy_fusion(pl), **{WGRAD_ACCUMULATION_KEY: wgrad_accumulation(pl)},
               **({"fp8": fp8_recipe(pl)} if pl.precision == "fp8" else {}),
               **({TF32_KEY: True} if tf32_matmuls(pl) else {}))
    if m.is_moe:  # the MoE ops' columns (core.model.keys.MOE_KEY)
        key.update(E=m.num_experts, topk=m.moe_top_k, fe=moe_ffn(m), ep=pl.expert_parallel,
                   etp=expert_tensor_parallel(pl), ns=m.num_shared_experts,
                   imb=float(pl.moe_imbalance_factor), eb=int(bool(m.add_bias_linear)),
                   disp=getattr(pl, "moe_token_dispatcher_type", None) or "alltoall")
    return key
