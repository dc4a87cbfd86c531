"""Kernel records and per-element byte counts shared by every component.

A :class:`Kernel` is one GEMM or memory-bound kernel of an op (FLOPs, bytes, GEMM shape);
:func:`gemm` and :func:`mem` build them. Byte sizes per element (:data:`DTYPE_BYTES`) and
per parameter (gradient accumulation, the Adam step) live here too.
"""

from __future__ import annotations

from dataclasses import dataclass


__all__ = [
    "ADAM_BYTES_PER_PARAM", "DTYPE_BYTES", "GRAD_ACCUMULATE_BYTES_PER_PARAM", "Kernel", "gemm",
    "mem",
]


DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Bytes per parameter of accumulating a weight gradient into the gradient buffer
#: (read, read, write), by dtype.
GRAD_ACCUMULATE_BYTES_PER_PARAM = {"bf16": 6, "fp16": 6, "fp32": 12}
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
