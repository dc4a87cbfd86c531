"""FP8 training as Transformer Engine runs it: GEMM dtypes, quantization (cast) kernels, the
FP8 copies TE keeps and their bytes per parameter; :func:`linear_kernels` builds every
component's linear layers (BF16 or FP8 GEMMs with their casts).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from core.model.base import DTYPE_BYTES, Kernel, gemm, mem
from core.plan.parallel import FP8_DEFAULT_RECIPE, ParallelPlan, tensor_dtype

__all__ = [
    "FP8_BYTES", "FP8_WEIGHT_CAST_OP", "fp8_cast_kernels", "fp8_copies",
    "fp8_gathered_cast_kernels", "fp8_gathers_params", "fp8_gemm", "fp8_gemm_dtype",
    "fp8_keeps_weight_copies", "fp8_saves_fp8_inputs", "fp8_scale_bytes", "fp8_tn_only",
    "fp8_weight_bytes_per_parameter", "linear_kernels",
    "param_gather_bytes",
]


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
                     weight: bool = False, groups: int = 1) -> list[Kernel]:
    """Memory-bound kernels that quantize one BF16 tensor of ``elements`` elements to FP8.

    Bytes (Transformer Engine's ``cast_transpose`` / quantize kernels, one fused kernel writes
    every copy; NVIDIA TE docs, "Using FP8 with Transformer Engine" and the FP8 primer):

    * the cast reads the BF16 tensor (2 bytes per element) and writes :func:`fp8_copies` FP8
      copies of 1 byte plus :func:`fp8_scale_bytes` each:
      ``elements * (2 + copies * (1 + scale))``;
    * ``tensorwise`` (per-tensor current scaling) first reduces the tensor's absolute maximum,
      one more read (``2 * elements``, kernel ``<name>_amax``), then turns the amax into the
      scale (kernel ``<name>_scale``, no bytes to speak of: its launch); Transformer Engine
      2.11 ``Float8CurrentScalingQuantizer::quantize_impl`` (``csrc/quantizer.cpp``) launches
      ``nvte_compute_amax_with_config``, ``nvte_compute_scale_from_amax`` and
      ``nvte_quantize_v2``, three kernels per tensor (the weights' per-iteration cast,
      ``weight``, keeps amax and cast: with FP8 parameters the optimizer's multi-tensor cast
      makes them);
    * ``delayed`` takes the scale from the amax history of earlier iterations (the cast kernel
      records the amax as it goes: no extra pass; the history update, a few bytes per tensor,
      is neglected); ``mxfp8`` and ``blockwise`` compute each block's scale inside the cast
      kernel (no extra pass).

    ``groups``: a grouped linear layer's input split into ``groups`` tensors, one per local
    expert (TE's ``GroupedLinear``: ``tex.split_quantize(inp, m_splits, quantizers)``, one
    quantizer per GEMM). TE 2.11 ``split_quantize`` (``csrc/extensions/cast.cpp``,
    ``multi_tensor_quantize_impl``) has one fused kernel for all of them with delayed scaling
    only (``nvte_multi_cast_transpose``); every other recipe quantizes each split on its own,
    so the kernels above repeat ``groups`` times on ``elements / groups`` elements each (the
    same bytes, ``groups`` times the launches).

    Per linear layer the forward quantizes its input (and keeps the copy the wgrad reads), the
    backward its output gradient; weights are quantized once per iteration
    (:data:`FP8_WEIGHT_CAST_OP`; TE caches them over the micro-batches, Megatron-Core's
    ``is_first_microbatch``).
    """
    c = fp8_copies(recipe, tn_only)
    n = 1 if recipe == "delayed" else max(int(groups), 1)
    per = elements / n
    cast = mem(f"{name}_cast", per * (2 + c * (FP8_BYTES + fp8_scale_bytes(recipe, weight))))
    if recipe != "tensorwise":
        return [cast] * n
    one = [mem(f"{name}_amax", 2.0 * per), cast]
    if not weight:
        one.insert(1, mem(f"{name}_scale", 0.0))
    return one * n


def linear_kernels(key: Mapping[str, Any]) -> tuple[Callable[[str, int, int, int], Kernel],
                                                     Callable[[str, float], list[Kernel]]]:
    """``(linear, cast)`` kernel makers of an op key, for every family's linear layers (the
    dense layer's QKV, projection and MLP; MoE experts the same way):

    * ``linear(name, m, n, k, batch=1)``: the GEMM ``(m, k) x (k, n)`` (``batch`` of them, a
      grouped GEMM), in FP8 with ``dtype="fp8"``
      (:func:`fp8_gemm_dtype` of ``key["fp8"]``; 1-byte inputs, BF16 output), else in the
      key's 16-bit (or fp32) dtype;
    * ``cast(name, elements, gathered=False, groups=1)``: the quantization of the GEMM's BF16
      input or output gradient, :func:`fp8_cast_kernels` (``key["fp8"]``, ``key["fp8_tn"]``,
      default true; ``groups`` the splits of a grouped GEMM), none without FP8.
    """
    fp8 = str(key["dtype"]) == "fp8"
    recipe = str(key.get("fp8") or FP8_DEFAULT_RECIPE)
    tn = bool(key.get("fp8_tn", True))
    e = DTYPE_BYTES[tensor_dtype(str(key["dtype"]))]
    sp_t = int(key.get("t", 1)) if key.get("sp") else 1

    def linear(name: str, m: int, n: int, k: int, batch: int = 1) -> Kernel:
        return fp8_gemm(name, m, n, k, recipe, batch) if fp8 else gemm(name, m, n, k, e, batch)

    def cast(name: str, elements: float, gathered: bool = False, groups: int = 1) -> list[Kernel]:
        if not fp8:
            return []
        if gathered and sp_t > 1:
            return fp8_gathered_cast_kernels(name, elements, sp_t, recipe, tn)
        return fp8_cast_kernels(name, elements, recipe, tn, groups=groups)

    return linear, cast


def fp8_gathered_cast_kernels(name: str, elements: float, t: int, recipe: str,
                              tn_only: bool) -> list[Kernel]:
    """The quantization of a tensor that sequence parallelism all-gathers over the ``t``
    tensor-parallel ranks before its GEMM (the QKV and fc1 inputs; in the backward the
    projection's and fc2's output gradients), ``elements`` the gathered tensor's: Transformer
    Engine quantizes the rank's ``elements / t`` before the all-gather, which then moves FP8
    (TE ``gather_along_first_dim`` with a quantizer; ``grad_output_preprocess`` in the
    backward), so the cast and the ``tensorwise`` amax (and its scale kernel, as in
    :func:`fp8_cast_kernels`) read the local shard. The copies the
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
    out = [mem(f"{name}_cast", local * (2 + c * (FP8_BYTES + fp8_scale_bytes(recipe))))]
    if recipe == "tensorwise":
        out[:0] = [mem(f"{name}_amax", 2.0 * local), mem(f"{name}_scale", 0.0)]
    if per_tensor and tn_only:
        out.append(mem(f"{name}_transpose", 2.0 * FP8_BYTES * elements))
    return out


def fp8_gemm(name: str, m: int, n: int, k: int, recipe: str, batch: int = 1) -> Kernel:
    """A linear layer's GEMM in FP8 (``batch`` of them: a grouped GEMM): both inputs FP8
    (1 byte), the output BF16 (2 bytes)."""
    return Kernel(name, 2.0 * m * n * k * batch,
                  float(batch * (FP8_BYTES * (m * k + k * n) + 2 * m * n)), m, n, k, batch,
                  fp8_gemm_dtype(recipe))


def fp8_gathers_params(plan: ParallelPlan) -> bool:
    """Whether the sharded optimizer all-gathers the FP8 linear layers' weights in FP8
    (``plan.fp8_param_gather`` with ``precision="fp8"``)."""
    return bool(getattr(plan, "fp8_param_gather", False)) and plan.precision == "fp8"


def fp8_keeps_weight_copies(plan: ParallelPlan) -> bool:
    """Whether an FP8 plan keeps persistent FP8 copies of the linear layers' weights: with
    ``plan.fp8_impl`` transformer_engine (the default: TE caches them across micro-batches),
    not with torchao. torchtitan's float8 linears (torchao ``Float8Linear``, torchao 0.18.0
    ``torchao/float8/float8_linear.py``: ``from_float`` keeps the module's high-precision
    ``weight``; ``matmul_with_hp_or_float8_args`` saves that weight for the backward and casts
    it with ``hp_tensor_to_float8_dynamic`` in the forward and again in the backward) keep
    none. False outside FP8 plans."""
    return plan.precision == "fp8" and getattr(plan, "fp8_impl", "transformer_engine") != "torchao"


def fp8_saves_fp8_inputs(plan: ParallelPlan) -> bool:
    """Whether an FP8 plan's linear layers save their inputs for the backward in float8
    (1 byte per element) rather than in the 16-bit training dtype. False outside FP8 plans.

    Transformer Engine (``plan.fp8_impl`` transformer_engine): yes, the FP8 copy its forward
    quantized (TE ``Linear`` / ``LayerNormLinear``). torchao (torchtitan's float8):
    ``matmul_with_hp_or_float8_args.forward`` runs ``ctx.save_for_backward(input_hp,
    weight_hp_t)`` on its arguments before casting them (torchao 0.18.0
    ``torchao/float8/float8_linear.py``), so the input is saved as it arrives: BF16 without
    tensor parallelism (2 bytes, the tensor BF16 training saves), float8 under torchtitan's
    float8 tensor parallelism (tensor_parallel > 1 with the tensorwise recipe: torchtitan
    0.2.0 ``models/llama3/infra/parallelize.py`` applies torchao's ``Float8ColwiseParallel``,
    ``Float8RowwiseParallel`` and ``PrepareFloat8ModuleInput``, whose ``_prepare_input_fn``
    casts every linear's input with ``hp_tensor_to_float8_dynamic`` before the all-gather and
    the matmul; the cast's amax runs under ``torch.no_grad``, so no BF16 copy is saved). The
    weight it saves is the parameter itself (nothing added)."""
    if plan.precision != "fp8":
        return False
    if getattr(plan, "fp8_impl", "transformer_engine") != "torchao":
        return True
    return plan.tensor_parallel > 1


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
