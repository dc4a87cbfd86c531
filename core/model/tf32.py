"""TF32 matmuls of fp32 training: which kernels of an fp32 op run on TF32 tensor cores when the
plan allows it (``plan.tf32``, PyTorch's ``torch.backends.cuda.matmul.allow_tf32``).

With TF32 on, cuBLAS runs every fp32 matmul (``torch.mm``, ``addmm``, ``bmm``, ``baddbmm``) with
its inputs rounded to TF32 (10-bit mantissa) on the tensor cores, accumulating in fp32; the
tensors stay fp32 (4 bytes), so only the GEMMs' peak changes. Element-wise, norm and softmax
kernels are not matmuls and keep their fp32 bytes (NVIDIA, "TensorFloat-32 in the A100 GPU
Accelerates AI Training, HPC up to 20x", 2020; PyTorch docs, "TensorFloat-32 (TF32) on Ampere
(and later) devices").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from core.model.base import Kernel

__all__ = ["TF32_DTYPE", "TF32_KEY", "tf32_key", "tf32_kernels"]


#: Peak FLOP/s dtype (``peak_flops`` of a store, a GPU spec's ``peak_tflops``) of TF32 GEMMs.
TF32_DTYPE = "tf32"
#: The op key's entry that is true when an fp32 op's matmuls run in TF32 (absent otherwise, so
#: the keys of every other plan are unchanged; :func:`core.model.kernels.op_key`).
TF32_KEY = "tf32"


def tf32_key(key: Mapping[str, Any]) -> bool:
    """Whether the op key ``key`` runs its matmuls in TF32: its :data:`TF32_KEY` entry is true
    and its ``dtype`` is ``"fp32"`` (in bf16, fp16 or fp8 there are no fp32 matmuls)."""
    return bool(key.get(TF32_KEY)) and str(key.get("dtype")) == "fp32"


def tf32_kernels(kernels: list[Kernel]) -> list[Kernel]:
    """``kernels`` of an fp32 op with its GEMMs at the :data:`TF32_DTYPE` peak (their
    ``Kernel.dtype``; :func:`core.model.ops.kernel_peak_flops`): every GEMM, the linear layers',
    the output layer's logits, the router's and the unfused attention's batched GEMMs (PyTorch's
    flag covers ``bmm`` and ``baddbmm`` as well), except a FlashAttention kernel (``flash_attn``
    and its backward), which keeps the fp32 peak it has today: FlashAttention does not run in
    fp32, and what PyTorch's SDPA falls back to in fp32 is not modelled apart. Memory-bound
    kernels are unchanged. Shape (k,) in, shape (k,) out, the order kept."""
    return [dataclasses.replace(k, dtype=TF32_DTYPE)
            if k.is_gemm and not k.dtype and not k.name.startswith("flash_attn") else k
            for k in kernels]
