"""The operations of one transformer layer and their times.

Operation names and the keys they depend on (the profile store's op tables
use the same names and key columns):

============================  ==================================================
op                             key columns
============================  ==================================================
attention_fwd, attention_bwd   b, s, h, a, t, dtype, g, norm, pos, attn, qkn, kv
mlp_fwd, mlp_bwd               b, s, h, f, t, dtype, act, norm
embedding_fwd, embedding_bwd   b, s, h, V, t, dtype, pos
output_fwd, output_bwd         b, s, h, V, t, dtype, norm
optimizer_step                 n, dtype
============================  ==================================================

``b`` micro-batch size, ``s`` sequence length, ``h`` hidden size, ``a``
attention heads, ``f`` MLP hidden size, ``V`` padded vocabulary, ``t``
tensor-parallel size, ``n`` parameters held by one GPU; the model family's
columns (:data:`core.model.keys.FAMILY_KEY_DEFAULTS`): ``g`` query groups
(grouped-query attention; ``a`` without it), ``norm`` layernorm / rmsnorm,
``pos`` learned / rope, ``attn`` unfused / flash, ``qkn`` 1 with QK-norm,
``act`` gelu / swiglu, ``kv`` the attention head size (``--kv-channels``;
``h/a`` without it). A
store table without a family column (stores written before the columns
existed) holds GPT ops: it times GPT shapes only, and the analytic or
calibrated model times the others (:func:`core.model.keys.table_covers`).

Each op is one rank's share under Megatron-LM tensor parallelism
(Shoeybi et al. 2019, Fig. 3): QKV and the first MLP GEMM are
column-parallel (N/t), the projection and second MLP GEMM row-parallel
(K/t), attention runs on ``a/t`` heads. The tensor-parallel all-reduces are
not part of an op; the graph inserts them.

The analytic time of an op is the larger of its device time and its host
time (the GPU runs kernels asynchronously, so whichever side is slower sets
the pace; small models are host-bound):

* device: the sum over its kernels of a roofline with efficiency,
  ``max(flops / (peak * eff_gemm), bytes / (bw * eff_mem)) +
  kernel_overhead_s``, where ``eff_gemm = gemm_efficiency_max * x / (x +
  gemm_half_size)`` with ``x`` the geometric mean of the GEMM's M, N and K;
* host: ``op_overhead_s + num_kernels * kernel_launch_s`` (framework time
  per module call and per kernel launch).

Kernel classes (:func:`kernel_class`) each have an efficiency of their own, so that the shared
calibration cannot absorb one class's error in another's: a routed experts' grouped GEMM runs at
the curve (of its per-expert ``M``, ``N``, ``K``) times ``grouped_gemm_efficiency``, a
FlashAttention kernel at the curve times ``flash_attention_efficiency`` (both 1 by default, the
dense curve: a store without them times every op as before), element-wise and norm kernels at
``memory_efficiency``, FP8 GEMMs at the curve times ``fp8_gemm_efficiency``. An fp32 plan's
GEMMs run at the ``fp32`` peak (PyTorch's default, TF32 matmuls off) or, with TF32 matmuls
(``plan.tf32``; the op key's ``tf32`` entry, :mod:`core.model.tf32`), at the ``tf32`` peak on
the same curve: every GEMM (the linear layers', the logits', the unfused attention's
``bmm``) but a FlashAttention kernel, which keeps the fp32 peak; element-wise, norm and
softmax kernels keep their fp32 bytes. A store without a ``tf32`` peak refuses such a plan
naming the dtype (:func:`kernel_peak_flops`).

``peak_fraction`` (1 by default) scales every GEMM's efficiency: the share of the
store's peak FLOP/s the part sustains. It is 1 for a GPU run at its data sheet's
power; a part without a data sheet of its own (a power-capped H100, whose spec
holds the 700 W part's peaks and says ``peak_fraction_fitted``) has it fitted on
its measured runs (:mod:`core.accuracy.calibrate`, :func:`core.accuracy.fit_params.store_op_model`).

The optimizer step adds ``iteration_overhead_s`` (per-iteration framework
work: loss scaling, gradient norm, logging). Attention is the unfused form
Megatron-LM used (baddbmm, fused scale-mask-softmax, dropout, bmm) or, with
``attn=flash``, one FlashAttention kernel per pass (the kernel lists of each
family are in :mod:`core.model.model_math`); FlashAttention's backward sustains
:data:`FLASH_BWD_RELATIVE_EFFICIENCY` (0.8) of the forward's efficiency. Each
backward op also accumulates its weight gradients into the gradient buffer
(read, read, write: ``6`` bytes per parameter in half precision). The output
op runs Megatron-LM's vocab-parallel cross-entropy on fp32 logits one kernel
per step (copy to fp32, max, subtract, exp, sum, divide: 38 bytes per logit
in half precision; backward: scale in place and copy back, 14 bytes), and the
embedding backward builds the dense ``(V/t, h)`` weight gradient.

FP8 training: ``dtype="fp8"`` with the recipe in an extra key entry ``fp8``
(and ``fp8_tn``, which the device decides, :func:`device_key`). Each kernel
runs at the peak of its own dtype (:func:`kernel_peak_flops`): the linear
layers' GEMMs at the ``fp8`` (or ``mxfp8``) peak, the rest at BF16's; the
quantization kernels are memory-bound (:func:`core.model.fp8.fp8_cast_kernels`).
Store tables hold no FP8 rows: :func:`core.sim.op_times.lookup_op_times` scales the
BF16 row by the analytic ratio.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

# The kernel lists and byte counts live with the rest of the model's formulas (core.model.base,
# keys, kernels); they are re-exported here, where the profile store and the profiling code look.
from core.model.base import (ADAM_BYTES_PER_PARAM, DTYPE_BYTES,  # noqa: F401
                             GRAD_ACCUMULATE_BYTES_PER_PARAM, Kernel)
from core.model.fp8 import fp8_tn_only
from core.model.kernels import op_kernels
from core.model.keys import DERIVED_OPS, FAMILY_KEY_DEFAULTS, OP_KEYS, full_op_key, table_covers  # noqa: F401
from core.plan.parallel import tensor_dtype

__all__ = [
    "DTYPE_BYTES", "LAYER_OPS", "EDGE_OPS", "OPTIMIZER_OP", "ALL_OPS", "OP_KEYS", "Kernel",
    "op_kernels", "no_peak_error", "kernel_times", "kernel_arrays", "analytic_op_time", "DEFAULT_OP_MODEL",
    "combine_op_time", "DERIVED_OPS", "FAMILY_KEY_DEFAULTS", "full_op_key", "table_covers",
    "kernel_peak_flops", "device_key", "effective_op_model", "kernel_class", "kernel_fp8",
    "KERNEL_DENSE_GEMM", "KERNEL_GROUPED_GEMM", "KERNEL_FLASH", "KERNEL_MEMORY",
]


LAYER_OPS = ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd")
EDGE_OPS = ("embedding_fwd", "embedding_bwd", "output_fwd", "output_bwd")
OPTIMIZER_OP = "optimizer_step"
ALL_OPS = LAYER_OPS + EDGE_OPS + (OPTIMIZER_OP,)
#: Parameters of the analytic op and communication model when a store gives none.
#: ``collective_overhead_s``, ``inter_node_efficiency``, ``p2p_efficiency`` and ``p2p_overhead_s``
#: are read by core.sim.comm.
DEFAULT_OP_MODEL = {
    "gemm_efficiency_max": 0.8,
    "gemm_half_size": 160.0,
    "memory_efficiency": 0.75,
    "kernel_overhead_s": 4e-6,
    "op_overhead_s": 0.0,
    "kernel_launch_s": 0.0,
    "iteration_overhead_s": 0.0,
    "collective_overhead_s": 0.0,
    "inter_node_efficiency": 1.0,
    "p2p_efficiency": 1.0,
    "p2p_overhead_s": 0.0,
    "fp8_gemm_efficiency": 1.0,
    "all_to_all_efficiency": 1.0,
    "flex_all_to_all_efficiency": 1.0,
    "peak_fraction": 1.0,
    "grouped_gemm_efficiency": 1.0,
    "flash_attention_efficiency": 1.0,
}
#: Kernel classes of :func:`kernel_class` (each with its own efficiency, so that one class's
#: error is not absorbed by another's; docs/accuracy.md "Kernel classes"): a dense GEMM (the
#: curve ``gemm_efficiency_max``, ``gemm_half_size``), a grouped expert GEMM (the curve times
#: ``grouped_gemm_efficiency``), a FlashAttention kernel, forward or backward (the curve times
#: ``flash_attention_efficiency``), a memory-bound kernel (``memory_efficiency``).
KERNEL_DENSE_GEMM, KERNEL_GROUPED_GEMM, KERNEL_FLASH, KERNEL_MEMORY = 0, 1, 2, 3
#: Name prefixes of the routed experts' grouped GEMMs (:func:`core.model.moe.moe_op_kernels`:
#: ``experts_fc1``, ``experts_fc2`` and their gradients; Megatron-Core's ``TEGroupedMLP``).
GROUPED_GEMM_PREFIX = "experts_fc"


def effective_op_model(op_model: Mapping[str, float] | None) -> dict[str, float]:
    """The op-model parameters a store's ``op_model`` stands for: :data:`DEFAULT_OP_MODEL`
    overlaid with it, and ``flex_all_to_all_efficiency`` (DeepEP / HybridEP) equal to its
    ``all_to_all_efficiency`` when it has none of its own (stores and fits that never pinned
    the flex dispatcher: its exchanges are timed as the NCCL all-to-all's)."""
    op_model = dict(op_model or {})
    p = {**DEFAULT_OP_MODEL, **op_model}
    if "flex_all_to_all_efficiency" not in op_model:
        p["flex_all_to_all_efficiency"] = p["all_to_all_efficiency"]
    return p


def kernel_times(flops: np.ndarray, nbytes: np.ndarray, size: np.ndarray, is_gemm: np.ndarray,
                 peak_flops: float | np.ndarray, memory_bandwidth_bytes_per_s: float,
                 op_model: Mapping[str, float], fp8: np.ndarray | None = None,
                 kclass: np.ndarray | None = None) -> np.ndarray:
    """Seconds per kernel under the roofline-with-efficiency model (see module doc), vectorized.

    Parameters
    ----------
    flops, nbytes, size : float arrays, shape (k,)
        FLOPs, bytes moved and, for GEMMs, the geometric mean of M, N, K.
    is_gemm : bool array, shape (k,)
    peak_flops : float or float array, shape (k,)
        Peak FLOP/s of the kernels' dtype (per kernel with FP8 GEMMs, :func:`kernel_peak_flops`).
    memory_bandwidth_bytes_per_s : float
    op_model : mapping
        Parameters; missing ones take :data:`DEFAULT_OP_MODEL`.
    fp8 : bool array, shape (k,), optional
        The FP8 (MXFP8) GEMMs: their efficiency is the curve's times ``fp8_gemm_efficiency``
        (what FP8 GEMMs achieve of their peak relative to what BF16 GEMMs achieve of theirs;
        1 by default, fitted by the shared calibration, docs/accuracy.md).
    kclass : int array, shape (k,), optional
        Each kernel's class (:func:`kernel_class`): a grouped expert GEMM's efficiency is the
        curve's times ``grouped_gemm_efficiency``, a FlashAttention kernel's the curve's times
        ``flash_attention_efficiency`` (both 1 by default: the dense curve). Without it every
        GEMM is timed as a dense one.
    """
    p = {**DEFAULT_OP_MODEL, **op_model}
    mem_s = nbytes / (memory_bandwidth_bytes_per_s * p["memory_efficiency"])
    eff = p["gemm_efficiency_max"] * p["peak_fraction"] * size / (size + p["gemm_half_size"])
    if fp8 is not None:
        eff = np.where(fp8, eff * p["fp8_gemm_efficiency"], eff)
    if kclass is not None:
        eff = np.where(kclass == KERNEL_GROUPED_GEMM, eff * p["grouped_gemm_efficiency"], eff)
        eff = np.where(kclass == KERNEL_FLASH, eff * p["flash_attention_efficiency"], eff)
    gemm_s = np.where(is_gemm, flops / (peak_flops * np.where(is_gemm, eff, 1.0)), 0.0)
    return np.maximum(gemm_s, mem_s) + p["kernel_overhead_s"]


def kernel_arrays(kernels: list[Kernel]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(flops, nbytes, size, is_gemm)`` arrays of a kernel list for :func:`kernel_times`."""
    cols = np.array([(k.flops, k.bytes, (float(k.m) * k.n * k.k) ** (1 / 3), k.m > 0)
                     for k in kernels], float).reshape(-1, 4)  # one pass; k.m > 0: is_gemm
    return (np.ascontiguousarray(cols[:, 0]), np.ascontiguousarray(cols[:, 1]),
            np.ascontiguousarray(cols[:, 2]), cols[:, 3] != 0)


def kernel_fp8(kernels: list[Kernel]) -> np.ndarray:
    """Whether each kernel is an FP8 (MXFP8) GEMM, shape (k,) (for :func:`kernel_times`)."""
    return np.array([bool(k.is_gemm and k.dtype in ("fp8", "mxfp8")) for k in kernels], bool)


def kernel_class(kernels: list[Kernel]) -> np.ndarray:
    """Each kernel's class for :func:`kernel_times`, int array of shape (k,): a FlashAttention
    kernel (``flash_attn``, ``flash_attn_bwd``) :data:`KERNEL_FLASH`, a routed experts' grouped
    GEMM (:data:`GROUPED_GEMM_PREFIX`, FP8 or not) :data:`KERNEL_GROUPED_GEMM`, any other GEMM
    :data:`KERNEL_DENSE_GEMM` (the unfused attention's batched GEMMs, the shared experts', the
    router's), the rest :data:`KERNEL_MEMORY`."""
    def one(k: Kernel) -> int:
        if k.name.startswith("flash_attn"):
            return KERNEL_FLASH
        if not k.is_gemm:
            return KERNEL_MEMORY
        return KERNEL_GROUPED_GEMM if k.name.startswith(GROUPED_GEMM_PREFIX) else KERNEL_DENSE_GEMM
    return np.array([one(k) for k in kernels], np.int64)


#: What FlashAttention's backward kernel sustains of the FLOP/s its forward sustains, on the
#: FLOP counts of each (backward 2.5 times the forward: five matmuls to two). Dao, "FlashAttention-2"
#: (2023), Sec. 4.1: on A100 the forward reaches up to 73 % of the peak, the backward
#: about 63 % (0.86); Shah et al., "FlashAttention-3" (2024), Sec. 4.1, H100 BF16: the forward up
#: to 740 TFLOP/s, the backward 1.5-1.75 times FlashAttention-2's, some 500-550 (about 0.7-0.75).
#: The middle, 0.8, applies to every GPU kind (cuDNN's fused attention, which Transformer Engine
#: runs, behaves alike): measured on an H200, cuDNN's backward sustains 0.81 of its forward's
#: efficiency over s 1k-32k, head size 128 (``benchmarks/data/h200_kernel_classes.json``,
#: ``vtrain profile check-kernels``; docs/accuracy.md, twelfth round); no end-to-end run pins it.
FLASH_BWD_RELATIVE_EFFICIENCY = 0.8


def kernel_peak_flops(kernels: list[Kernel], dtype: str, peak_flops: Mapping[str, float],
                      device_name: str = "device") -> np.ndarray:
    """Peak FLOP/s of each kernel, shape (k,): its own ``dtype`` (the FP8 GEMMs of FP8 training)
    or the op's tensor dtype (:func:`core.plan.parallel.tensor_dtype` of ``dtype``: BF16 for FP8); a
    FlashAttention backward kernel (``flash_attn_bwd``) at :data:`FLASH_BWD_RELATIVE_EFFICIENCY`
    of it, so that its efficiency is that share of the forward's.

    Raises
    ------
    KeyError
        ``peak_flops`` lacks a dtype a kernel needs (named with the device).
    """
    base = tensor_dtype(dtype)
    dtypes = [k.dtype or base for k in kernels]
    peaks: dict[str, float] = {}
    for d in dtypes:  # each dtype once, the first missing one named
        if d not in peaks:
            if d not in peak_flops:
                raise no_peak_error(device_name, d, peak_flops)
            peaks[d] = float(peak_flops[d])
    out = np.array([peaks[d] for d in dtypes], float).reshape(-1)
    flash = np.array([k.name == "flash_attn_bwd" for k in kernels], bool).reshape(-1)
    if flash.any():
        out[flash] *= FLASH_BWD_RELATIVE_EFFICIENCY
    return out


def no_peak_error(device_name: str, dtype: str, peaks) -> KeyError:
    """The refusal of a dtype a device has no peak FLOP/s for: names the device, the dtype, the
    dtypes it has (``peaks``' keys) and the plan fields that choose the dtypes."""
    return KeyError(f"profile of {device_name} has no peak FLOP/s for dtype {dtype!r} (it has "
                    f"{', '.join(peaks) or 'none'}; plan.precision and plan.fp8_recipe choose "
                    "the dtypes)")


def device_key(key: Mapping[str, Any], peak_flops: Mapping[str, float]) -> dict[str, Any]:
    """``key`` with what the device decides added: for an FP8 key, ``fp8_tn`` (whether its FP8
    GEMMs are TN-only and need transposed copies, :func:`core.model.fp8.fp8_tn_only`)."""
    out = dict(key)
    if str(out.get("dtype")) == "fp8" and "fp8_tn" not in out:
        out["fp8_tn"] = fp8_tn_only(peak_flops)
    return out


def combine_op_time(device_s: np.ndarray | float, num_kernels: np.ndarray | float, is_optimizer,
                    op_model: Mapping[str, float], host: bool = True) -> np.ndarray | float:
    """Op time from its device time and kernel count: ``max(device, host)`` plus, for the
    optimizer step, ``iteration_overhead_s`` (see module doc). Vectorized over ops. Without
    ``host`` (an op a CUDA graph captured, :mod:`core.model.cuda_graphs`: its kernels replay
    with one launch) the device time alone."""
    p = {**DEFAULT_OP_MODEL, **op_model}
    host_s = (p["op_overhead_s"] + np.asarray(num_kernels) * p["kernel_launch_s"]) if host else 0.0
    return np.maximum(device_s, host_s) + np.where(is_optimizer, p["iteration_overhead_s"], 0.0)


def analytic_op_time(op: str, key: Mapping[str, Any], device: Any, host: bool = True) -> float:
    """Seconds for ``op`` on ``device`` (anything with ``peak_flops`` by dtype,
    ``memory_bandwidth_bytes_per_s`` and ``op_model``, e.g. a ProfileStore); without ``host``
    its device time alone (an op a CUDA graph captured, :func:`combine_op_time`).

    Raises
    ------
    KeyError
        Unknown op, missing key column, or no peak FLOP/s for the dtype.
    """
    dtype = str(key["dtype"])
    name = getattr(device, 'device_name', 'device')
    if tensor_dtype(dtype) not in device.peak_flops or dtype not in device.peak_flops:
        raise no_peak_error(name, dtype, device.peak_flops)
    op_model = device.op_model or {}
    kernels = op_kernels(op, device_key(key, device.peak_flops))
    if not kernels:
        return 0.0
    times = kernel_times(*kernel_arrays(kernels), kernel_peak_flops(kernels, dtype, device.peak_flops, name),
                         device.memory_bandwidth_bytes_per_s, op_model, kernel_fp8(kernels),
                         kernel_class(kernels))
    return float(combine_op_time(times.sum(), len(kernels), op == OPTIMIZER_OP, op_model, host))
