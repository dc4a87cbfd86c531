"""The token shape of an op key: what every component's kernels of one op share.

Tokens in the micro-batch, bytes per element and per ``(b, s, h)`` activation, the norm's
tokens under sequence parallelism, the linear-layer and FP8 cast kernel makers
(:func:`core.model.fp8.linear_kernels`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core.model.base import DTYPE_BYTES, wgrad_accumulate_bytes
from core.model.fp8 import linear_kernels
from core.plan.parallel import tensor_dtype

__all__ = ["OpShape", "op_shape"]


@dataclass(frozen=True)
class OpShape:
    """One op's shape (the values of its key, :func:`op_shape`).

    Attributes
    ----------
    key : dict
        The op key, every family column set.
    b, s, h, t : int
        Micro-batch size, the rank's tokens per sequence, hidden size, tensor-parallel size.
    e : int
        Bytes per element of the tensor dtype.
    acc, plain_acc : float
        Bytes per parameter of the separate kernel that adds a weight gradient to the gradient
        buffer, for the linear layers' weights and for plain parameters (the embedding):
        :func:`core.model.base.wgrad_accumulate_bytes` (0 where none runs).
    T : int
        Tokens in the micro-batch, ``b*s``.
    act : float
        Bytes of one ``(b, s, h)`` activation.
    tok : float
        Bytes of the ``(b, s, h)`` tensor a norm or dropout runs on: ``act/t`` under sequence
        parallelism (Korthikanti et al. 2022, Sec. 4.2.2: the rank's ``s/t`` tokens), else ``act``.
    norm : str
        ``rmsnorm`` or ``layernorm`` (the norm kernels' name).
    linear, cast : callable
        :func:`core.model.fp8.linear_kernels` of the key.
    """

    key: Mapping[str, Any]
    b: int
    s: int
    h: int
    t: int
    e: int
    acc: float
    plain_acc: float
    T: int
    act: float
    tok: float
    norm: str
    linear: Callable
    cast: Callable


def op_shape(key: Mapping[str, Any]) -> OpShape:
    """The :class:`OpShape` of ``key`` (every family column set; ``b``, ``s``, ``h``, ``t`` and
    ``dtype`` given).

    Raises
    ------
    KeyError
        A shape column missing.
    """
    dtype = tensor_dtype(str(key["dtype"]))
    e = DTYPE_BYTES[dtype]
    linear, cast = linear_kernels(key)
    b, s, h, t = int(key["b"]), int(key["s"]), int(key["h"]), int(key["t"])
    T = b * s  # tokens in the micro-batch
    act = T * h * e  # bytes of one (b, s, h) activation
    tok = act / t if key.get("sp") else act
    norm = "rmsnorm" if key.get("norm") == "rmsnorm" else "layernorm"
    acc, plain_acc = wgrad_accumulate_bytes(key, dtype)
    return OpShape(key, b, s, h, t, e, acc, plain_acc, T, act, tok, norm,
                   linear, cast)
