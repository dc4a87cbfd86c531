"""Op names and their profile-store keys: the key columns of each op (:data:`OP_KEYS`), the
model family's columns and their GPT values (:data:`FAMILY_KEY_DEFAULTS`), derived ops
(parts of a tabulated op: :data:`DERIVED_OPS`, :data:`PART_OPS`, sliding-window, per-op
checkpointing and TP-overlap variants) and what a table without a family column covers.
The key of a model's ops is built from a model and a plan in one place,
:func:`core.model.kernels.op_key`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from core.model.fp8 import FP8_WEIGHT_CAST_OP
from core.model.mlp import ACTIVATION_KINDS, GLU_CLAMP_KERNELS, UNFUSED_ACT_KERNELS, is_gated
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan

__all__ = [
    "FAMILY_KEY", "DERIVED_OPS", "FAMILY_KEY_DEFAULTS", "MLA_KEY", "MLA_UP_PREFIXES", "MODULE_OPS",
    "MOE_DERIVED_OPS", "MOE_KEY", "MOE_OPS", "MTP_KEY", "MTP_OPS", "OP_KEYS", "PART_OPS",
    "SELECTIVE_OP_GEMMS", "SELECTIVE_OP_OPS", "SWA_OPS", "TP_OVERLAP_GEMMS", "TP_OVERLAP_OPS",
    "UNTABULATED_OP_KEYS", "activation_fusion", "activation_key", "cross_entropy_fusion", "family_key_value",
    "full_op_key", "mla_key", "table_covers", "with_family_defaults",
]


#: The op key's entry naming a model family other than ``dense`` (absent for dense models, so
#: their keys are unchanged). Not a table column: the profile store's tables hold dense ops, and
#: another family's op takes the dense row scaled by the ratio of their analytic times
#: (:func:`core.sim.op_times.lookup_op_times`).
FAMILY_KEY = "fam"

#: Key columns the dense family added to the GPT op keys, with the value that is Megatron-LM's
#: GPT (``g``: ``None`` stands for ``a``, full multi-head attention; ``kv``: ``None`` stands for
#: the head size ``h/a``). A profile-store table
#: without such a column holds GPT ops: it is used only for keys at these values.
FAMILY_KEY_DEFAULTS: dict[str, Any] = {"g": None, "act": "gelu", "norm": "layernorm",
                                       "pos": "learned", "attn": "unfused", "qkn": 0, "kv": None,
                                       "cp": 1, "qlr": 0, "kvlr": 0, "qkd": 0, "qpe": 0, "vd": 0,
                                       "ce": "unfused", "glc": 0, "eb": 0, "disp": "alltoall",
                                       "actf": "fused"}


def activation_key(activation: str) -> str:
    """The ``act`` key column that times ``model.activation``'s MLP: the registered activation's
    :attr:`~core.model.mlp.Activation.timed_as` (``squared_relu`` is timed as ``gelu``,
    ``geglu`` as ``swiglu``: the same GEMMs and fused kernel bytes); an unregistered name
    itself."""
    kind = ACTIVATION_KINDS.get(activation)
    return kind.timed_as if kind is not None else activation


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


def with_family_defaults(key: Mapping[str, Any]) -> dict[str, Any]:
    """``key`` with each family column it lacks set to GPT's value."""
    out = dict(key)
    for c in FAMILY_KEY_DEFAULTS:
        needs = _DERIVED_DEFAULTS[c][0] if c in _DERIVED_DEFAULTS else ()
        if c not in out and all(n in out for n in needs):
            out[c] = family_key_value(c, out)
    return out


def activation_fusion(model: ModelConfig) -> str:
    """The ``actf`` key column of ``model``'s MLP ops: ``fused`` with
    ``model.bias_activation_fusion`` (Megatron-Core's ``bias_swiglu_impl`` / ``bias_gelu_impl``,
    what the profile store's tables hold), else ``unfused_bias`` with fc1's bias
    (``add_bias_linear`` or ``add_mlp_bias``: a separate bias add first) or ``unfused``
    (:func:`core.model.mlp.activation_kernels`). A plain (not gated) MLP without a bias is
    ``fused`` either way: its unfused activation is one kernel of ``bias_gelu``'s bytes (and
    Megatron-LM's ``validate_args`` turns ``bias_gelu_fusion`` off without biases)."""
    if getattr(model, "bias_activation_fusion", True) is not False:
        return "fused"
    bias = model.add_bias_linear or getattr(model, "add_mlp_bias", False)
    if not bias and not is_gated(model.activation):
        return "fused"
    return "unfused_bias" if bias else "unfused"


def cross_entropy_fusion(plan: ParallelPlan) -> str:
    """The loss's cross-entropy kernels: ``unfused`` (Megatron's default, one kernel per step on
    an fp32 copy), or with ``plan.cross_entropy_loss_fusion`` its
    ``cross_entropy_fusion_impl``, ``native`` or ``te`` (the op key's ``ce`` column)."""
    if getattr(plan, "cross_entropy_loss_fusion", False) is not True:
        return "unfused"
    return str(getattr(plan, "cross_entropy_fusion_impl", "native") or "native")


#: Kernel-name prefixes of MLA's up-projection part (the latent norms, the up-projections with
#: their FP8 quantization, RoPE and the assembly of Q, K, V): what ``mla_up_proj`` recomputes.
MLA_UP_PREFIXES = ("q_latent_", "kv_latent_", "q_up_proj", "kv_up_proj", "q_proj",
                    "mla_rope_concat")


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
#: ``ns`` shared experts, ``imb`` tokens of the busiest rank's experts over the mean, ``disp``
#: the token dispatcher (``plan.moe_token_dispatcher_type``: ``alltoall`` or ``flex``, whose
#: permutations differ, :func:`core.model.moe.moe_op_kernels`).
MOE_KEY = ("b", "s", "h", "t", "dtype", "act", "norm", "E", "topk", "fe", "ep", "etp", "ns",
           "imb", "glc", "eb", "disp")


#: Key columns of each op (the profile store's op tables use the same names and columns):
#: the GPT shape (``b s h a f V t dtype``, ``n`` parameters of the optimizer step) and the
#: family columns that change an op's kernels (:data:`FAMILY_KEY_DEFAULTS`; ``actf`` the MLP
#: activation's fusion, ``fused``, ``unfused`` or ``unfused_bias``, :func:`activation_fusion`): ``g`` query
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
    "mlp_fwd": ("b", "s", "h", "f", "t", "dtype", "act", "norm", "glc", "actf"),
    "mlp_bwd": ("b", "s", "h", "f", "t", "dtype", "act", "norm", "glc", "actf"),
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
_ACTS = ("bias_swiglu", "bias_gelu", *GLU_CLAMP_KERNELS, *UNFUSED_ACT_KERNELS)
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
    "mla_up_proj_fwd": lambda n: n.startswith(MLA_UP_PREFIXES),
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
