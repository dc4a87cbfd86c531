"""MLP component: its activations (a registry: :func:`register_activation`), dense (GeLU,
squared ReLU) or gated (SwiGLU, GeGLU) MLPs, their parameters and kernels.

A new activation is one :func:`register_activation` call here (its name must be one of the
session field's choices, :data:`core.plan.model_config.ACTIVATIONS`): whether it is gated and
the activation whose profile rows time it (the op key's ``act`` column).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.model.base import Kernel, mem, wgrad_accumulate
from core.model.tokens import OpShape
from core.plan.model_config import ACTIVATIONS, ModelConfig

__all__ = ["Activation", "ACTIVATION_KINDS", "GLU_CLAMP_KERNELS", "register_activation",
           "activation_kind", "glu_clamp_kernels", "is_gated", "mlp_parameters", "mlp_kernels",
           "mlp_saved_per_f", "UNFUSED_ACT_KERNELS"]


@dataclass(frozen=True)
class Activation:
    """An MLP activation.

    Attributes
    ----------
    name : str
        ``model.activation``'s value.
    gated : bool
        Three ffn matrices (gate and up fused in a ``2f``-wide fc1, Megatron-Core), else two.
    timed_as : str
        The activation whose ops time it (the op key's ``act`` column): one with the same GEMMs
        and a fused element-wise kernel that moves the same bytes; itself for a tabulated one.
    """

    name: str
    gated: bool
    timed_as: str


#: Registered activations by name (:func:`register_activation`).
ACTIVATION_KINDS: dict[str, Activation] = {}


def register_activation(activation: Activation) -> Activation:
    """Register ``activation`` and return it.

    Raises
    ------
    ValueError
        Registered already, not a choice of the session field
        (:data:`core.plan.model_config.ACTIVATIONS`), or timed as an activation that is not
        registered or is itself timed as another.
    """
    name = activation.name
    if name in ACTIVATION_KINDS:
        raise ValueError(f"activation {name!r} is registered already")
    if name not in ACTIVATIONS:
        raise ValueError(f"activation {name!r} is not a choice of model.activation "
                         "(core.plan.model_config.ACTIVATIONS)")
    timer = ACTIVATION_KINDS.get(activation.timed_as, activation if activation.timed_as == name
                                 else None)
    if timer is None or timer.timed_as != timer.name or timer.gated != activation.gated:
        raise ValueError(f"activation {name!r}: timed as {activation.timed_as!r}, which is not a "
                         "registered tabulated activation of the same gating")
    ACTIVATION_KINDS[name] = activation
    return activation


#: GeLU (two ffn matrices; Megatron-LM's default) and SwiGLU (gated, Shazeer 2020; Llama).
register_activation(Activation("gelu", gated=False, timed_as="gelu"))
register_activation(Activation("swiglu", gated=True, timed_as="swiglu"))
#: Squared ReLU (Nemotron-4's ``relu(x)**2``, Megatron-Core's ``squared_relu`` under
#: ``jit_fuser``: one fused element-wise kernel per pass that reads the fc1 output and writes
#: the activation, and in the backward reads the saved input and the gradient and writes one
#: gradient) is timed as ``gelu``, whose ``bias_gelu`` kernels move the same bytes; both are
#: non-gated (two ffn matrices, the same GEMMs).
register_activation(Activation("squared_relu", gated=False, timed_as="gelu"))
#: GeGLU (Gemma's gated tanh-approximated GeLU) is timed as ``swiglu``: the same three ffn
#: matrices and one fused kernel that reads ``2f`` and writes ``f`` per token. The FLOPs of
#: the element-wise kernels are not counted (memory-bound).
register_activation(Activation("geglu", gated=True, timed_as="swiglu"))


def activation_kind(activation: str) -> Activation:
    """The registered :class:`Activation` of ``activation``.

    Raises
    ------
    ValueError
        Not registered.
    """
    if activation not in ACTIVATION_KINDS:
        raise ValueError(f"activation {activation!r} is not modelled; known: "
                         f"{', '.join(ACTIVATION_KINDS)}")
    return ACTIVATION_KINDS[activation]


def is_gated(activation: str) -> bool:
    """Whether the MLP of ``activation`` (a registered activation, or an op key's ``act``) is
    gated (:class:`Activation`; an unregistered name is not)."""
    kind = ACTIVATION_KINDS.get(activation)
    return kind is not None and kind.gated


#: Names of the kernels that clamp a gated MLP's inputs before its fused activation
#: (:func:`glu_clamp_kernels`), forward: part of the activation that selective recomputation
#: of ``moe_act`` runs again.
GLU_CLAMP_KERNELS = ("glu_clamp", "glu_clamp_cat")


def glu_clamp_kernels(op_pass: str, fc1_bytes: float) -> list[Kernel]:
    """Kernels that clamp a gated MLP's fc1 output before its activation (``glc`` key column:
    ``model.activation_func_clamp_value`` set, GPT-OSS's 7), for ``fc1_bytes`` bytes of fc1
    output (rows x ``2 f/t`` x element bytes), ``op_pass`` ``"fwd"`` or ``"bwd"``.

    Megatron-Core runs the clamp eagerly before the fused activation, in PyTorch
    (``weighted_bias_quick_geglu_impl`` and ``bias_quick_geglu_impl``,
    ``megatron/core/fusions/fused_bias_geglu.py``, Megatron-Core 0.16.1 and 0.19.2; what
    ``TEGroupedMLP`` and ``MLP`` call with ``bias_activation_fusion``, which GPT-OSS's
    Megatron-Bridge provider sets; 0.19.2's Transformer Engine op-fuser path for the experts,
    ``TEGroupedMLP._is_fused_impl_supported``, opt-in with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP`` and
    TE 2.14, is not modelled): ``chunk`` into the gate and linear halves (views), ``clamp`` of each half (read and
    write ``fc1_bytes/2`` each) and ``torch.cat`` back (read and write ``fc1_bytes``): ``4
    fc1_bytes`` forward. Backward (autograd): each clamp's gradient is a masked copy (read the
    gradient's half and the saved input's half, write a half: ``1.5 fc1_bytes`` for both) and the
    chunk's gradient concatenates the halves' gradients (read and write ``fc1_bytes``): ``3.5
    fc1_bytes``. The cat's own gradient is two views (no kernel). The fused activation after it
    reads the clamped copy, the same bytes as without the clamp (``bias_swiglu``).
    """
    x = float(fc1_bytes)
    if op_pass == "fwd":
        return [mem("glu_clamp", x), mem("glu_clamp", x), mem("glu_clamp_cat", 2 * x)]
    return [mem("glu_clamp_bwd", 0.75 * x), mem("glu_clamp_bwd", 0.75 * x),
            mem("glu_clamp_cat_bwd", 2 * x)]


#: Names of the memory-bound kernels of an unfused MLP activation (Megatron-Core's MLP with
#: ``bias_activation_fusion`` false, torchtitan's eager FeedForward; :func:`mlp_kernels`):
#: the bias add, silu, the gate-times-up product and their gradients, the chunk's gradient.
UNFUSED_ACT_KERNELS = ("bias_add", "silu", "glu_mul", "gelu", "silu_bwd", "glu_mul_bwd",
                       "glu_chunk_bwd", "gelu_bwd")


def mlp_saved_per_f(model: ModelConfig) -> int:
    """16-bit bytes per token per MLP hidden unit ``f`` that one dense MLP keeps for its
    backward (the ``sbh`` term is this times ``f/h``).

    Fused (``model.bias_activation_fusion``, Megatron-Core ``bias_swiglu_impl`` /
    ``bias_gelu_impl``, ``megatron/core/transformer/mlp.py``): the activation's input (fc1's
    output, ``2f`` gated, ``f`` plain) and fc2's input (``f``): 6 gated, 4 plain. Unfused
    gated (Megatron-Core 0.16.1 ``MLP.forward``'s ``glu``: ``torch.chunk`` then
    ``activation_func(x_glu) * x_linear``; torchtitan's ``w2(F.silu(w1(x)) * w3(x))``): silu
    saves its input (``silu_backward(grad, self)``, torch ``derivatives.yaml``), the product
    saves both operands (``mul``: ``grad * other``, ``grad * self``), silu's output ``f`` and
    the up half ``f`` (Megatron-Core: the two halves are views of fc1's ``2f`` output, which
    they keep whole), and fc2 its input ``f``: 4 ``f``-wide tensors, 8. Unfused plain: gelu
    saves its input (``gelu_backward(grad, self)``) and fc2 its input, as fused: 4 (the bias
    add saves nothing)."""
    if not is_gated(model.activation):
        return 4
    return 6 if getattr(model, "bias_activation_fusion", True) is not False else 8


def mlp_parameters(model: ModelConfig, f: int) -> tuple[float, float]:
    """``(sharded over its tensor-parallel group, replicated)`` parameters of one MLP of hidden
    size ``f`` with the model's activation (fc1 ``h f``, ``2 h f`` gated; fc2 ``f h``; fc1's
    bias sharded, fc2's replicated with ``add_bias_linear`` or ``add_mlp_bias``, Hugging Face's
    ``mlp_bias``: ``fc1 + h``, ``2f + h`` gated) and, for the layer's dense MLP, its
    pre-MLP norm (``2h`` LayerNorm, ``h`` RMSNorm) in the replicated part."""
    h = model.hidden_size
    fc1 = 2 * f if is_gated(model.activation) else f
    bias = model.add_bias_linear or getattr(model, "add_mlp_bias", False)
    norm = 2 * h if model.normalization == "layernorm" else h
    return h * fc1 + f * h + (fc1 if bias else 0), norm + (h if bias else 0)


def activation_kernels(op_pass: str, gated: bool, fusion: str, inner: float) -> list[Kernel]:
    """Memory-bound kernels of a dense MLP's activation, ``op_pass`` ``"fwd"`` or ``"bwd"``,
    for ``inner`` bytes of one ``f/t``-wide activation (rows x ``f/t`` x element bytes), by the
    op key's ``actf`` column ``fusion``: ``fused`` (Megatron-Core ``bias_swiglu_impl`` /
    ``bias_gelu_impl``: a gated one reads ``2f`` and writes ``f``, ``3 inner``; its backward
    reads the gradient and the saved ``2f`` and writes ``2f``, ``5 inner``; plain ``2`` and
    ``3``), ``unfused`` or ``unfused_bias`` (Megatron-Core's eager path, ``bias_activation_fusion``
    false, ``megatron/core/transformer/mlp.py`` 0.16.1; ``_bias``: with fc1's bias, added first:
    read and write fc1's output, ``4 inner`` gated, ``2`` plain). Unfused gated forward:
    ``torch.chunk`` (views), silu (read and write ``f``: 2), the product (read ``2f``, write
    ``f``: 3). Backward (autograd, torch ``derivatives.yaml``): the product's two gradients
    (each reads the gradient and a saved operand and writes ``f``: 3 each), silu's (reads the
    gradient and its input, writes ``f``: 3), the chunk's (concatenates the halves: reads and
    writes ``2f``, 4). Unfused plain: gelu as ``bias_gelu`` (2 forward, 3 backward). The bias
    gradient (a reduction over the rows) is the same fused or not and is not counted either way.

    Raises ValueError for another ``fusion``."""
    x = float(inner)
    if fusion == "fused":
        if op_pass == "fwd":
            return [mem("bias_swiglu", 3 * x) if gated else mem("bias_gelu", 2 * x)]
        return [mem("bias_swiglu_bwd", 5 * x) if gated else mem("bias_gelu_bwd", 3 * x)]
    if fusion not in ("unfused", "unfused_bias"):
        raise ValueError(f"activation fusion {fusion!r} is not fused, unfused or unfused_bias")
    if op_pass == "fwd":
        bias = [mem("bias_add", (4 if gated else 2) * x)] if fusion == "unfused_bias" else []
        if gated:
            return [*bias, mem("silu", 2 * x), mem("glu_mul", 3 * x)]
        return [*bias, mem("gelu", 2 * x)]
    if gated:
        return [mem("glu_mul_bwd", 3 * x), mem("glu_mul_bwd", 3 * x), mem("silu_bwd", 3 * x),
                mem("glu_chunk_bwd", 4 * x)]
    return [mem("gelu_bwd", 3 * x)]


def mlp_kernels(op: str, sh: OpShape) -> list[Kernel]:
    """Kernels of one rank's dense MLP op (``mlp_fwd``, ``mlp_bwd``): the residual add of the
    attention, the pre-MLP norm, fc1 (``2f/t`` wide gated: gate and up fused, Megatron-Core), the
    activation (a gated one reads ``2f`` and writes ``f`` per token; with the ``glc`` key column
    the clamp before it, :func:`glu_clamp_kernels`), fc2, the residual add (see
    :func:`core.model.layer.dense_op_kernels`)."""
    key, h, t, e, T = sh.key, sh.h, sh.t, sh.e, sh.T
    tok, norm, acc, linear, cast = sh.tok, sh.norm, sh.acc, sh.linear, sh.cast
    f = int(key["f"])
    gated = is_gated(key.get("act"))
    fc1 = (2 if gated else 1) * f // t  # gate and up projections fused (Megatron-Core)
    inner = T * (f // t) * e
    clamp = bool(key.get("glc", 0))  # GPT-OSS's clamped gated MLP (glc: gated only)
    fusion = str(key.get("actf") or "fused")
    if op == "mlp_fwd":
        return [
            mem("bias_dropout_add", 3.5 * tok),
            mem(norm, 2 * tok),
            *cast("fc1_input", T * h, True),
            linear("fc1", T, fc1, h),                         # (b*s, h) x (h, f/t or 2f/t)
            *(glu_clamp_kernels("fwd", 2 * inner) if clamp else ()),
            *activation_kernels("fwd", gated, fusion, inner),
            *cast("fc2_input", T * (f // t)),
            linear("fc2", T, h, f // t),                      # (b*s, f/t) x (f/t, h)
            mem("bias_dropout_add", 3.5 * tok),
        ]
    return [
        mem("bias_dropout_add_bwd", 2 * tok),
        *cast("fc2_grad", T * h, True),
        linear("fc2_dgrad", T, f // t, h), linear("fc2_wgrad", f // t, h, T),
        *activation_kernels("bwd", gated, fusion, inner),
        *(glu_clamp_kernels("bwd", 2 * inner) if clamp else ()),
        *cast("fc1_grad", T * fc1),
        linear("fc1_dgrad", T, h, fc1), linear("fc1_wgrad", fc1, h, T),
        *wgrad_accumulate(acc * (h * fc1 + h * f // t)),
        mem(f"{norm}_bwd", 4 * tok),
        mem("bias_dropout_add_bwd", 2 * tok),
    ]
