"""The operations of one transformer layer and their times.

Operation names and the keys they depend on (the profile store's op tables
use the same names and key columns):

============================  =========================================
op                             key columns
============================  =========================================
attention_fwd, attention_bwd   b, s, h, a, t, dtype
mlp_fwd, mlp_bwd               b, s, h, f, t, dtype
embedding_fwd, embedding_bwd   b, s, h, V, t, dtype
output_fwd, output_bwd         b, s, h, V, t, dtype
optimizer_step                 n, dtype
============================  =========================================

``b`` micro-batch size, ``s`` sequence length, ``h`` hidden size, ``a``
attention heads, ``f`` MLP hidden size, ``V`` padded vocabulary, ``t``
tensor-parallel size, ``n`` parameters held by one GPU.

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

The optimizer step adds ``iteration_overhead_s`` (per-iteration framework
work: loss scaling, gradient norm, logging). Attention is the unfused form
Megatron-LM used (baddbmm, fused scale-mask-softmax, dropout, bmm). Each
backward op also accumulates its weight gradients into the gradient buffer
(read, read, write: ``6`` bytes per parameter in half precision). The output
op runs Megatron-LM's vocab-parallel cross-entropy on fp32 logits one kernel
per step (copy to fp32, max, subtract, exp, sum, divide: 38 bytes per logit
in half precision; backward: scale in place and copy back, 14 bytes), and the
embedding backward builds the dense ``(V/t, h)`` weight gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

__all__ = [
    "DTYPE_BYTES", "LAYER_OPS", "EDGE_OPS", "OPTIMIZER_OP", "ALL_OPS", "OP_KEYS", "Kernel",
    "op_kernels", "kernel_times", "kernel_arrays", "analytic_op_time", "DEFAULT_OP_MODEL",
    "combine_op_time",
]

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
LAYER_OPS = ("attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd")
EDGE_OPS = ("embedding_fwd", "embedding_bwd", "output_fwd", "output_bwd")
OPTIMIZER_OP = "optimizer_step"
ALL_OPS = LAYER_OPS + EDGE_OPS + (OPTIMIZER_OP,)
OP_KEYS: dict[str, tuple[str, ...]] = {
    "attention_fwd": ("b", "s", "h", "a", "t", "dtype"),
    "attention_bwd": ("b", "s", "h", "a", "t", "dtype"),
    "mlp_fwd": ("b", "s", "h", "f", "t", "dtype"),
    "mlp_bwd": ("b", "s", "h", "f", "t", "dtype"),
    "embedding_fwd": ("b", "s", "h", "V", "t", "dtype"),
    "embedding_bwd": ("b", "s", "h", "V", "t", "dtype"),
    "output_fwd": ("b", "s", "h", "V", "t", "dtype"),
    "output_bwd": ("b", "s", "h", "V", "t", "dtype"),
    "optimizer_step": ("n", "dtype"),
}
#: Parameters of the analytic op and communication model when a store gives none.
#: ``collective_overhead_s``, ``inter_node_efficiency``, ``p2p_efficiency`` and ``p2p_overhead_s``
#: are read by core.comm.
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
}
#: Bytes per parameter of accumulating a weight gradient into the gradient buffer
#: (read, read, write), by dtype.
GRAD_ACCUMULATE_BYTES_PER_PARAM = {"bf16": 6, "fp16": 6, "fp32": 12}
#: Bytes moved per parameter by the fused Adam step, by dtype. Mixed precision: read fp32
#: master, m, v and the half-precision gradient, write master, m, v and the half-precision
#: copy, plus gradient scaling (32). fp32: read p, g, m, v and write p, m, v (28).
ADAM_BYTES_PER_PARAM = {"bf16": 32, "fp16": 32, "fp32": 28}


@dataclass(frozen=True)
class Kernel:
    """One kernel of an op: a GEMM (``m, n, k`` set, ``batch`` >= 1) or a memory-bound kernel."""

    name: str
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1

    @property
    def is_gemm(self) -> bool:
        return self.m > 0


def _gemm(name: str, m: int, n: int, k: int, e: int, batch: int = 1) -> Kernel:
    return Kernel(name, 2.0 * m * n * k * batch, float(e * batch * (m * k + k * n + m * n)),
                  m, n, k, batch)


def _mem(name: str, nbytes: float) -> Kernel:
    return Kernel(name, 0.0, float(nbytes))


def op_kernels(op: str, key: Mapping[str, Any]) -> list[Kernel]:
    """The kernels of ``op`` for one GPU, given the key columns of :data:`OP_KEYS`.

    Raises
    ------
    KeyError
        Unknown op or a key column missing.
    """
    if op not in OP_KEYS:
        raise KeyError(f"unknown op {op!r}; known: {', '.join(ALL_OPS)}")
    missing = [c for c in OP_KEYS[op] if c not in key]
    if missing:
        raise KeyError(f"op {op!r} needs key columns {missing}")
    e = DTYPE_BYTES[str(key["dtype"])]
    if op == OPTIMIZER_OP:
        return [_mem("adam", ADAM_BYTES_PER_PARAM[str(key["dtype"])] * float(key["n"]))]
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    acc = GRAD_ACCUMULATE_BYTES_PER_PARAM[str(key["dtype"])]
    T = b * s  # tokens in the micro-batch
    act = T * h * e  # bytes of one (b, s, h) activation
    if op in ("attention_fwd", "attention_bwd"):
        a = int(key["a"])
        heads, dh = a // t, h // a
        score = b * heads * s * s * e  # bytes of one (b, a/t, s, s) score tensor
        fwd = [
            _mem("layernorm", 2 * act),
            _gemm("qkv", T, 3 * h // t, h, e),                  # (b*s, h) x (h, 3h/t)
            _gemm("attn_scores", s, s, dh, e, b * heads),       # (b*a/t, s, h/a) x (h/a, s)
            _mem("scale_mask_softmax", 2 * score),
            _mem("attn_dropout", 2.5 * score),
            _gemm("attn_values", s, dh, s, e, b * heads),       # (b*a/t, s, s) x (s, h/a)
            _gemm("proj", T, h, h // t, e),                     # (b*s, h/t) x (h/t, h)
        ]
        if op == "attention_fwd":
            return fwd
        return [
            _mem("bias_dropout_add_bwd", 2 * act),
            _gemm("proj_dgrad", T, h // t, h, e), _gemm("proj_wgrad", h // t, h, T, e),
            _mem("wgrad_accumulate", acc * 4 * h * h // t),
            _gemm("attn_values_dgrad_p", s, s, dh, e, b * heads),
            _gemm("attn_values_dgrad_v", s, dh, s, e, b * heads),
            _mem("attn_dropout_bwd", 2.5 * score),
            _mem("softmax_bwd", 3 * score),
            _gemm("attn_scores_dgrad_q", s, dh, s, e, b * heads),
            _gemm("attn_scores_dgrad_k", s, dh, s, e, b * heads),
            _gemm("qkv_dgrad", T, h, 3 * h // t, e), _gemm("qkv_wgrad", 3 * h // t, h, T, e),
            _mem("layernorm_bwd", 4 * act),
        ]
    if op in ("mlp_fwd", "mlp_bwd"):
        f = int(key["f"])
        inner = T * (f // t) * e
        if op == "mlp_fwd":
            return [
                _mem("bias_dropout_add", 3.5 * act),
                _mem("layernorm", 2 * act),
                _gemm("fc1", T, f // t, h, e),                  # (b*s, h) x (h, f/t)
                _mem("bias_gelu", 2 * inner),
                _gemm("fc2", T, h, f // t, e),                  # (b*s, f/t) x (f/t, h)
                _mem("bias_dropout_add", 3.5 * act),
            ]
        return [
            _mem("bias_dropout_add_bwd", 2 * act),
            _gemm("fc2_dgrad", T, f // t, h, e), _gemm("fc2_wgrad", f // t, h, T, e),
            _mem("bias_gelu_bwd", 3 * inner),
            _gemm("fc1_dgrad", T, h, f // t, e), _gemm("fc1_wgrad", f // t, h, T, e),
            _mem("wgrad_accumulate", acc * 2 * h * f // t),
            _mem("layernorm_bwd", 4 * act),
            _mem("bias_dropout_add_bwd", 2 * act),
        ]
    V = int(key["V"])
    cells = T * (V // t)  # logits of this rank: (b*s, V/t)
    to_fp32 = 4 + e if e < 4 else 0  # bytes per logit of the .float() copy (none in fp32)
    if op == "embedding_fwd":
        return [_mem("embedding_lookup", 2 * act), _mem("position_add_dropout", 3.5 * act)]
    if op == "embedding_bwd":
        # dense (V/t, h) gradient: zero-filled, rows scattered in, accumulated into the buffer
        return [_mem("dropout_bwd", 2 * act), _mem("embedding_grad_zero", e * V * h // t),
                _mem("embedding_grad_scatter_add", 3 * act),
                _mem("wgrad_accumulate", acc * V * h // t)]
    if op == "output_fwd":
        # Megatron's vocab-parallel cross-entropy on fp32 logits, one kernel per step:
        # .float() copy, max, subtract max, exp, sum, divide (softmax kept for backward).
        ce = [_mem("logits_to_fp32", to_fp32 * cells)] if to_fp32 else []
        return [
            _mem("final_layernorm", 2 * act),
            _gemm("logits", T, V // t, h, e),                   # (b*s, h) x (h, V/t)
            *ce,
            _mem("ce_max", 4 * cells), _mem("ce_sub_max", 8 * cells), _mem("ce_exp", 8 * cells),
            _mem("ce_sum", 4 * cells), _mem("ce_softmax_div", 8 * cells),
        ]
    # output_bwd: softmax minus one-hot, scaled by the loss gradient in place, then the copy
    # back to the half-precision logits' gradient
    ce_bwd = [_mem("ce_grad_to_half", to_fp32 * cells)] if to_fp32 else []
    return [
        _mem("ce_grad_scale", 8 * cells), *ce_bwd,
        _gemm("logits_dgrad", T, h, V // t, e), _gemm("logits_wgrad", V // t, h, T, e),
        _mem("wgrad_accumulate", acc * V * h // t),
        _mem("final_layernorm_bwd", 4 * act),
    ]


def kernel_times(flops: np.ndarray, nbytes: np.ndarray, size: np.ndarray, is_gemm: np.ndarray,
                 peak_flops: float, memory_bandwidth_bytes_per_s: float,
                 op_model: Mapping[str, float]) -> np.ndarray:
    """Seconds per kernel under the roofline-with-efficiency model (see module doc), vectorized.

    Parameters
    ----------
    flops, nbytes, size : float arrays, shape (k,)
        FLOPs, bytes moved and, for GEMMs, the geometric mean of M, N, K.
    is_gemm : bool array, shape (k,)
    peak_flops, memory_bandwidth_bytes_per_s : float
    op_model : mapping
        Parameters; missing ones take :data:`DEFAULT_OP_MODEL`.
    """
    p = {**DEFAULT_OP_MODEL, **op_model}
    mem_s = nbytes / (memory_bandwidth_bytes_per_s * p["memory_efficiency"])
    eff = p["gemm_efficiency_max"] * size / (size + p["gemm_half_size"])
    gemm_s = np.where(is_gemm, flops / (peak_flops * np.where(is_gemm, eff, 1.0)), 0.0)
    return np.maximum(gemm_s, mem_s) + p["kernel_overhead_s"]


def kernel_arrays(kernels: list[Kernel]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(flops, nbytes, size, is_gemm)`` arrays of a kernel list for :func:`kernel_times`."""
    flops = np.array([k.flops for k in kernels], float)
    nbytes = np.array([k.bytes for k in kernels], float)
    size = np.array([(float(k.m) * k.n * k.k) ** (1 / 3) for k in kernels], float)
    is_gemm = np.array([k.is_gemm for k in kernels], bool)
    return flops, nbytes, size, is_gemm


def combine_op_time(device_s: np.ndarray | float, num_kernels: np.ndarray | float, is_optimizer,
                    op_model: Mapping[str, float]) -> np.ndarray | float:
    """Op time from its device time and kernel count: ``max(device, host)`` plus, for the
    optimizer step, ``iteration_overhead_s`` (see module doc). Vectorized over ops."""
    p = {**DEFAULT_OP_MODEL, **op_model}
    host_s = p["op_overhead_s"] + np.asarray(num_kernels) * p["kernel_launch_s"]
    return np.maximum(device_s, host_s) + np.where(is_optimizer, p["iteration_overhead_s"], 0.0)


def analytic_op_time(op: str, key: Mapping[str, Any], device: Any) -> float:
    """Seconds for ``op`` on ``device`` (anything with ``peak_flops`` by dtype,
    ``memory_bandwidth_bytes_per_s`` and ``op_model``, e.g. a ProfileStore).

    Raises
    ------
    KeyError
        Unknown op, missing key column, or no peak FLOP/s for the dtype.
    """
    dtype = str(key["dtype"])
    if dtype not in device.peak_flops:
        raise KeyError(f"profile of {getattr(device, 'device_name', 'device')} has no peak FLOP/s "
                       f"for dtype {dtype!r}")
    op_model = device.op_model or {}
    kernels = op_kernels(op, key)
    times = kernel_times(*kernel_arrays(kernels), float(device.peak_flops[dtype]),
                         device.memory_bandwidth_bytes_per_s, op_model)
    return float(combine_op_time(times.sum(), len(kernels), op == OPTIMIZER_OP, op_model))
