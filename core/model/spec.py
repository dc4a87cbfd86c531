"""The layer spec and the family registry (after Megatron-Core's ``gpt_layer_specs.py``).

A transformer layer is built from named components: its attention (:class:`AttentionSpec`:
multi-head / grouped-query with an optional sliding window and soft-capped scores, or
multi-head latent attention), its MLP (:class:`MlpSpec`: a registered activation,
:mod:`core.model.mlp`, dense or gated, or a mixture of experts with shared experts), where its
norms sit (:class:`NormSpec`: pre-norms, extra post-norms) and the model's extras around the
layers (multi-token prediction, embedding scaling, final-logit soft-capping): a
:class:`LayerSpec`. Each component's formulas (parameters, FLOPs, kernels and their profile
keys, activation memory) live in its own module (:mod:`core.model.attention`,
:mod:`core.model.mla`, :mod:`core.model.mlp`, :mod:`core.model.moe`, :mod:`core.model.mtp`,
:mod:`core.model.norms`, :mod:`core.model.softcap`, :mod:`core.model.embedding`).

A model family is a registered :class:`ModelFamily`: the components it fixes for every model
of the family (post-norms, soft-capping, embedding scale); the rest of its layer spec comes
from the model's fields (:meth:`ModelFamily.layer_spec`), and its formulas are the components'
composed by the spec (:meth:`ModelFamily.op_kernels`, :meth:`ModelFamily.layer_parameters`,
...). :func:`register_family` adds one; :mod:`core.model.families` imports every module in its
folder (each registers its families) and finds a model's (:func:`core.model.families.family_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from core.model.base import DTYPE_BYTES, Kernel
from core.model.embedding import embedding_scale_kernels
from core.model.keys import MOE_OPS, MTP_OPS, with_family_defaults
from core.model.layer import (dense_activation_bytes_per_layer, dense_edge_parameters,
                              dense_forward_flops_per_token, dense_layer_parameters,
                              dense_op_kernels)
from core.model.mlp import is_gated
from core.model.moe import moe_ffn, moe_op_kernels
from core.model.mtp import mtp_layers, mtp_op_kernels
from core.model.norms import post_norm_activation_bytes, post_norm_kernels, post_norm_parameters
from core.model.softcap import (final_logit_softcap_kernels, softcapped_attention_kernels,
                                softcapped_scores_bytes)
from core.model.tokens import op_shape
from core.plan.model_config import MODEL_FAMILIES, ModelConfig
from core.plan.parallel import ParallelPlan, recompute_modules, tensor_dtype

__all__ = ["AttentionSpec", "MlpSpec", "NormSpec", "LayerSpec", "ModelFamily", "FAMILIES",
           "register_family"]


@dataclass(frozen=True)
class AttentionSpec:
    """A layer's attention.

    Attributes
    ----------
    kind : str
        ``"mha"`` (one K/V head per query head), ``"gqa"`` (``groups < heads``) or ``"mla"``
        (multi-head latent attention).
    heads, groups, head_dim : int
        ``a``, ``g`` and the head size ``kv`` (``--kv-channels``).
    window : int
        Sliding window in tokens (0: full causal attention).
    window_skip_freq : int
        With a window, every ``N``-th layer keeps full attention (0: every layer windowed).
    qk_norm, flash : bool
        QK-norm; FlashAttention (else Megatron's unfused core).
    logit_softcap : bool
        ``c tanh(scores / c)`` on the attention scores (Gemma 2).
    """

    kind: str
    heads: int
    groups: int
    head_dim: int
    window: int = 0
    window_skip_freq: int = 0
    qk_norm: bool = False
    flash: bool = False
    logit_softcap: bool = False


@dataclass(frozen=True)
class MlpSpec:
    """A layer's MLP: ``activation`` (``gelu``, ``squared_relu``, ``swiglu``, ``geglu``),
    ``gated`` (three ffn matrices: gate and up fused in fc1), ``ffn`` its hidden size; a
    mixture of experts has ``experts`` > 0 (``top_k`` routed, ``shared`` shared experts)."""

    activation: str
    gated: bool
    ffn: int
    experts: int = 0
    top_k: int = 0
    shared: int = 0


@dataclass(frozen=True)
class NormSpec:
    """Where a layer's norms sit: ``kind`` (``layernorm``, ``rmsnorm``), the pre-norms before
    attention and MLP (always), and ``post_attention`` / ``post_mlp`` norms on each sublayer's
    output before its residual add (Gemma 2/3: four norms per layer)."""

    kind: str
    post_attention: bool = False
    post_mlp: bool = False

    @property
    def per_layer(self) -> int:
        """Norms in one layer: the two pre-norms and the post-norms."""
        return 2 + int(self.post_attention) + int(self.post_mlp)


@dataclass(frozen=True)
class LayerSpec:
    """A model's transformer layer and the extras around the layers.

    Attributes
    ----------
    family : str
        The registered family that built it.
    attention : AttentionSpec
    mlp : MlpSpec
    norm : NormSpec
    mtp_layers : int
        Multi-token prediction layers (0: none).
    embedding_scale : bool
        The embedding's output is multiplied by ``sqrt(h)`` (Gemma).
    final_logit_softcap : bool
        ``c tanh(logits / c)`` on the output layer's logits (Gemma 2).
    """

    family: str
    attention: AttentionSpec
    mlp: MlpSpec
    norm: NormSpec
    mtp_layers: int = 0
    embedding_scale: bool = False
    final_logit_softcap: bool = False


@dataclass(frozen=True)
class ModelFamily:
    """A model family: Megatron-Core's GPT layer (``get_gpt_layer_with_transformer_engine_spec``:
    pre-norms only) with the components the family fixes for every model of it. The rest of a
    model's :class:`LayerSpec` (attention kind and sizes, the MLP's activation and experts, the
    norm kind, multi-token prediction) comes from its fields. The formulas read the family's
    components from the fields below (the ones its :meth:`layer_spec` sets: building a spec on
    every call would slow the sweeps) and the model's fields for the rest, as the spec does.

    Attributes
    ----------
    name : str
        The ``model.family`` value (one of :data:`core.plan.model_config.MODEL_FAMILIES`).
    post_attention_norm, post_mlp_norm : bool
        A norm on the attention's / the MLP's output before its residual add
        (:mod:`core.model.norms`).
    attention_softcap, final_logit_softcap : bool
        Soft-capped attention scores / output logits (:mod:`core.model.softcap`).
    embedding_scale : bool
        The embedding's output scaled by ``sqrt(h)`` (:mod:`core.model.embedding`).
    dense_only : bool
        Experts, latent attention and multi-token prediction are not the family's: refused
        (ValueError) rather than simulated as something the family never built.
    """

    name: str
    post_attention_norm: bool = False
    post_mlp_norm: bool = False
    attention_softcap: bool = False
    final_logit_softcap: bool = False
    embedding_scale: bool = False
    dense_only: bool = False

    @property
    def adds_kernels(self) -> bool:
        """Whether the family's ops have kernels the dense family's lack (its op keys then name
        it, :func:`core.model.kernels.family_key_columns`)."""
        return (self.post_attention_norm or self.post_mlp_norm or self.attention_softcap
                or self.final_logit_softcap or self.embedding_scale)

    @property
    def post_norms(self) -> int:
        """Post-norms per layer (the layer spec's ``norm.per_layer - 2``)."""
        return int(self.post_attention_norm) + int(self.post_mlp_norm)

    def _refuse(self, model: ModelConfig) -> None:
        """ValueError for a ``dense_only`` family's model with experts, latent attention or
        multi-token prediction."""
        if self.dense_only and (model.is_moe or getattr(model, "multi_latent_attention", False)
                                is True or int(model.mtp_num_layers or 0)):
            raise ValueError(f"model family {self.name!r} with experts, latent attention or "
                             "multi-token prediction is not modelled (the family has none)")

    def layer_spec(self, model: ModelConfig) -> LayerSpec:
        """The layer spec of ``model``: its fields' attention, MLP, norm kind and multi-token
        prediction with the family's components.

        Raises
        ------
        ValueError
            A ``dense_only`` family's model with experts, latent attention or multi-token
            prediction.
        """
        self._refuse(model)
        mla = getattr(model, "multi_latent_attention", False) is True
        a, g = model.num_attention_heads, model.query_groups
        attention = AttentionSpec(
            kind="mla" if mla else ("gqa" if g < a else "mha"), heads=a, groups=g,
            head_dim=model.head_dim, window=int(model.window_size or 0),
            window_skip_freq=int(model.window_attn_skip_freq or 0),
            qk_norm=bool(model.qk_layernorm), flash=model.attention_kernel == "flash",
            logit_softcap=self.attention_softcap)
        moe = model.is_moe
        mlp = MlpSpec(activation=model.activation, gated=is_gated(model.activation),
                      ffn=moe_ffn(model) if moe else model.ffn,
                      experts=int(model.num_experts or 0),
                      top_k=int(model.moe_top_k) if moe else 0,
                      shared=int(model.num_shared_experts) if moe else 0)
        norm = NormSpec(kind=model.normalization, post_attention=self.post_attention_norm,
                        post_mlp=self.post_mlp_norm)
        return LayerSpec(family=self.name, attention=attention, mlp=mlp, norm=norm,
                         mtp_layers=mtp_layers(model), embedding_scale=self.embedding_scale,
                         final_logit_softcap=self.final_logit_softcap)

    def op_kernels(self, op: str, key: Mapping[str, Any]) -> list[Kernel]:
        """Kernels of one GPU's share of op ``op`` with ``key`` (every column set): the MoE
        ops' (:func:`core.model.moe.moe_op_kernels`), the MTP ops'
        (:func:`core.model.mtp.mtp_op_kernels`), else the dense layer's, embedding's, output
        layer's and optimizer step's (:func:`core.model.layer.dense_op_kernels`); then the
        family's components: soft-capped attention scores (every ``attention_*`` op,
        :func:`~core.model.softcap.softcapped_attention_kernels`), the post-norms
        (:func:`~core.model.norms.post_norm_kernels`), the embedding scale
        (:func:`~core.model.embedding.embedding_scale_kernels`) and the capped output logits
        (:func:`~core.model.softcap.final_logit_softcap_kernels`)."""
        if op in MOE_OPS:
            kernels = moe_op_kernels(op, key)
        elif op in MTP_OPS:
            kernels = mtp_op_kernels(op, key)
        else:
            kernels = dense_op_kernels(op, key)
        if not self.adds_kernels:
            return kernels
        full = with_family_defaults(key)
        if op == "optimizer_step" or "b" not in full:
            return kernels
        sh = op_shape(full)
        if op.startswith("attention_") and self.attention_softcap:
            kernels = softcapped_attention_kernels(kernels, sh.e)
        kernels = post_norm_kernels(op, kernels, sh, self.post_attention_norm, self.post_mlp_norm)
        if self.embedding_scale:
            kernels = embedding_scale_kernels(op, kernels, sh)
        if self.final_logit_softcap:
            kernels = final_logit_softcap_kernels(op, kernels, sh, int(full["V"]))
        return kernels

    def layer_parameters(self, model: ModelConfig) -> tuple[float, float]:
        """``(sharded over t, replicated)`` parameters of one layer: the dense layer's
        (:func:`core.model.layer.dense_layer_parameters`) and the spec's post-norms, replicated
        (:func:`core.model.norms.post_norm_parameters`). Gemma 2 9B (42 layers, h 3584, 16
        heads of 256, 8 groups, f 14336, vocabulary 256000, tied): 9,241,705,984 in all."""
        self._refuse(model)
        sharded, replicated = dense_layer_parameters(model)
        post = self.post_norms
        if not post:
            return sharded, replicated
        return sharded, replicated + post_norm_parameters(model.normalization, post,
                                                          model.hidden_size)

    def edge_parameters(self, model: ModelConfig, t: int
                        ) -> tuple[tuple[float, float], tuple[float, float]]:
        """``((sharded, replicated), (sharded, replicated))`` parameters of the first and the
        last stage outside the layers (:func:`core.model.layer.dense_edge_parameters`; the
        embedding scale and the caps have none)."""
        return dense_edge_parameters(model, t)

    def forward_flops_per_token(self, model: ModelConfig, t: int) -> tuple[float, float, float]:
        """``(layer, attention core, output)`` forward FLOPs per token: the dense layer's GEMMs
        (:func:`core.model.layer.dense_forward_flops_per_token`; model FLOPs count GEMMs only,
        as Megatron does, so norms and caps add none)."""
        return dense_forward_flops_per_token(model, t)

    def activation_bytes_per_layer(self, model: ModelConfig, plan: ParallelPlan,
                                   mode: str) -> float:
        """Activation bytes one layer keeps per micro-batch on one GPU under recomputation
        ``mode``: the dense layer's (:func:`core.model.layer.dense_activation_bytes_per_layer`)
        and, without full recomputation, the spec's post-norms' inputs
        (:func:`core.model.norms.post_norm_activation_bytes`) and, with soft-capped scores on
        the unfused attention path without ``core_attn`` recomputation, the capped scores the
        cap's backward reads (:func:`core.model.softcap.softcapped_scores_bytes`), scaled to the
        training precision's bytes. Torchtitan's per-op checkpointing recomputes the norms
        (none kept)."""
        self._refuse(model)
        out = dense_activation_bytes_per_layer(model, plan, mode)
        post = self.post_norms
        capped = self.attention_softcap and model.attention_kernel != "flash"
        if not (post or capped) or mode not in ("none", "selective"):
            return out
        s, b, h, t = (model.seq_length // plan.context_parallel, plan.micro_batch_size,
                      model.hidden_size, plan.tensor_parallel)
        scale = DTYPE_BYTES[tensor_dtype(plan.precision)] / 2
        norms = post_norm_activation_bytes(post, s, b, h, t, plan.sequence_parallel)
        mods = recompute_modules(plan) if mode == "selective" else ()
        scores = 0.0
        if capped and (mode == "none" or "core_attn" not in mods):
            scores = softcapped_scores_bytes(b, s, model.num_attention_heads // t)
        return out + (norms + scores) * scale


#: Registered model families by name (:func:`register_family`).
FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
    """Register ``family`` under its name and return it.

    Raises
    ------
    ValueError
        A family of that name is registered already, or its name is not a choice of the
        session's ``model.family`` (:data:`core.plan.model_config.MODEL_FAMILIES`: the plan
        validates sessions without importing the model layer, so it holds the names).
    """
    if family.name in FAMILIES:
        raise ValueError(f"model family {family.name!r} is registered already")
    if family.name not in MODEL_FAMILIES:
        raise ValueError(f"model family {family.name!r} is not a choice of model.family "
                         "(add it to core.plan.model_config.MODEL_FAMILIES)")
    FAMILIES[family.name] = family
    return family
