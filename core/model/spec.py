"""The layer spec and the family registry (after Megatron-Core's ``gpt_layer_specs.py``).

A transformer layer is built from named components: its attention (:class:`AttentionSpec`:
multi-head / grouped-query with an optional sliding window, or multi-head latent attention),
its MLP (:class:`MlpSpec`: dense GeLU or squared ReLU, gated SwiGLU / GeGLU, mixture of experts
with shared experts), where its norms sit (:class:`NormSpec`: pre-norm, extra post-norms) and the
model's extras around the layers (multi-token prediction, embedding scaling, logit
soft-capping): a :class:`LayerSpec`. Each component's formulas (parameters, FLOPs, kernels and
their profile keys, activation memory) live in its own module (:mod:`core.model.attention`,
:mod:`core.model.mla`, :mod:`core.model.mlp`, :mod:`core.model.moe`, :mod:`core.model.mtp`).

A model family is a registered :class:`ModelFamily`: a builder of a model's layer spec and the
family's formulas. :func:`register_family` adds one; :mod:`core.model.families` registers the
shipped ones (one module each) and finds a model's (:func:`core.model.families.family_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core.model.base import Kernel
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan

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
    """The formulas of one model family.

    Attributes
    ----------
    name : str
    layer_spec : callable ``model -> LayerSpec``
    op_kernels : callable ``(op, key) -> list[Kernel]``
    layer_parameters : callable ``model -> (sharded over t, replicated)`` per layer
    edge_parameters : callable ``(model, t) -> ((sharded, replicated), (sharded, replicated))``
        of the first and the last stage outside the layers
    forward_flops_per_token : callable ``(model, t) -> (layer, attention core, output)``
    activation_bytes_per_layer : callable ``(model, plan, mode) -> bytes``
    """

    name: str
    layer_spec: Callable[[ModelConfig], LayerSpec]
    op_kernels: Callable[[str, Mapping[str, Any]], list[Kernel]]
    layer_parameters: Callable[[ModelConfig], tuple[float, float]]
    edge_parameters: Callable[[ModelConfig, int], tuple[tuple[float, float], tuple[float, float]]]
    forward_flops_per_token: Callable[[ModelConfig, int], tuple[float, float, float]]
    activation_bytes_per_layer: Callable[[ModelConfig, ParallelPlan, str], float]


#: Registered model families by name (:func:`register_family`).
FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
    """Register ``family`` under its name and return it.

    Raises
    ------
    ValueError
        A family of that name is registered already.
    """
    if family.name in FAMILIES:
        raise ValueError(f"model family {family.name!r} is registered already")
    FAMILIES[family.name] = family
    return family
