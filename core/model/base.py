"""Kernel records and per-element byte counts shared by every component.

A :class:`Kernel` is one GEMM or memory-bound kernel of an op (FLOPs, bytes, GEMM shape);
:func:`gemm` and :func:`mem` build them. Byte sizes per element (:data:`DTYPE_BYTES`) and
per parameter (gradient accumulation, the Adam step) live here too.
"""

from __future__ import annotations

from dataclasses import dataclass


__all__ = [
    "ADAM_BYTES_PER_PARAM", "DTYPE_BYTES", "GRAD_ACCUMULATE_BYTES_PER_PARAM", "Kernel",
    "WGRAD_ACCUMULATION_KEY", "WGRAD_ACCUMULATION_TABLE", "gemm", "mem", "wgrad_accumulate",
    "wgrad_accumulate_bytes",
]


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Bytes per parameter of accumulating a weight gradient into the gradient buffer
#: (read, read, write), by dtype.
GRAD_ACCUMULATE_BYTES_PER_PARAM = {"bf16": 6, "fp16": 6, "fp32": 12}
#: The op key's column of how weight gradients are accumulated
#: (:func:`core.plan.parallel.wgrad_accumulation`), and its value in a key without it (the
#: profile stores' tables: every weight gradient added by a kernel of its own).
WGRAD_ACCUMULATION_KEY = "wacc"
WGRAD_ACCUMULATION_TABLE = "separate"


def wgrad_accumulate_bytes(key, dtype: str) -> tuple[float, float]:
    """Bytes per parameter of the separate accumulation kernel ``(linear, plain)``: for the
    weights of the linear layers (GEMMs of Transformer Engine or Megatron-Core's tensor-parallel
    linears) and for the plain parameters outside them (the embedding, the MoE router's gate),
    under the key's :data:`WGRAD_ACCUMULATION_KEY` (:func:`core.plan.parallel.wgrad_accumulation`):
    ``separate`` both :data:`GRAD_ACCUMULATE_BYTES_PER_PARAM`, ``fused`` the plain parameters'
    only (the linear layers' GEMMs accumulate into the fp32 main gradients), ``none`` neither."""
    mode = key.get(WGRAD_ACCUMULATION_KEY, WGRAD_ACCUMULATION_TABLE)
    b = float(GRAD_ACCUMULATE_BYTES_PER_PARAM[dtype])
    return (b if mode == "separate" else 0.0), (b if mode != "none" else 0.0)


def wgrad_accumulate(nbytes: float) -> list["Kernel"]:
    """The ``wgrad_accumulate`` kernel of ``nbytes`` bytes, or none when nothing is added."""
    return [mem("wgrad_accumulate", nbytes)] if nbytes > 0 else []
#: Bytes moved per parameter by the fused Adam step, by dtype. Mixed precision: read fp32
#: master, m, v and the half-precision gradient, write master, m, v and the half-precision
#: copy, plus gradient scaling (32). fp32: read p, g, m, v and write p, m, v (28).
ADAM_BYTES_PER_PARAM = {"bf16": 32, "fp16": 32, "fp32": 28}


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


def gemm(name: str, m: int, n: int, k: int, e: int, batch: int = 1) -> Kernel:
    return Kernel(name, 2.0 * m * n * k * batch, float(e * batch * (m * k + k * n + m * n)),
                  m, n, k, batch)


def mem(name: str, nbytes: float) -> Kernel:
    return Kernel(name, 0.0, float(nbytes))
