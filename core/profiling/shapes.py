"""Which shapes a profile run measures (no torch here).

A *shape group* is one transformer shape on one device for one tensor-parallel
size and dtype: ``(s, h, a, f, V, t, dtype)`` plus the micro-batch sizes ``b``
to measure it at and the layer counts whose optimizer step to time. Every op
table row of the store (see :data:`core.model.ops.OP_KEYS`) comes from one group.

A ``--shapes`` file is a JSON list whose items are either shape dicts or
paths (relative to the file) of session files / vTrain configs::

    [
      {"s": 256, "h": 512, "a": 8, "vocab_size": 8192, "t": [1, 2], "b": [1, 2, 4]},
      "sessions/gpt3_1.3b.json"
    ]

Shape dict keys: ``s``, ``h``, ``a`` (required); ``f`` (MLP hidden size,
default ``4h``); ``vocab_size`` (unpadded, padded per ``t`` as Megatron-LM
does) or ``V`` (already padded; default vocabulary 50257); ``t`` and ``b``
(int or list; defaults 1 and [1, 2, 4]); ``dtype`` (default: the device's,
``fp32`` on a CPU, ``bf16`` on a GPU); ``layers`` (list of layer counts for the
optimizer-step table, default [1, 2, 4, 8]). A session contributes its model's
shape at its plan's ``t``, ``b`` and precision, and its number of layers per
pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from core.plan.fields import ConfigError
from core.plan.layout import stage_layer_counts
from core.plan.model_config import padded_vocab_size
from core.plan.session import Session
from core.model.keys import MLA_KEY
from core.model.ops import DTYPE_BYTES

__all__ = ["ShapeGroup", "ShapeFileError", "default_shapes", "load_shapes", "shapes_from_session",
           "shape_from_dict", "merge_groups"]

DEFAULT_MICRO_BATCHES = (1, 2, 4)
DEFAULT_LAYERS = (1, 2, 4, 8)
DEFAULT_VOCAB = 50257


class ShapeFileError(ValueError):
    """A ``--shapes`` file or shape dict is invalid; the message names the item and the problem."""


@dataclass(frozen=True)
class ShapeGroup:
    """One shape to profile at several micro-batch sizes.

    Attributes
    ----------
    s, h, a, f : int
        Sequence length, hidden size, attention heads, MLP hidden size.
    V : int
        Padded vocabulary (divisible by ``t``), the store's ``V`` key.
    t : int
        Tensor-parallel size; one rank's shard is measured.
    dtype : str
        ``"fp32"``, ``"bf16"`` or ``"fp16"``.
    b : tuple of int
        Micro-batch sizes, sorted, distinct.
    layers : tuple of int
        Layer counts whose optimizer step is timed (rows of ``optimizer_step``).
    """

    s: int
    h: int
    a: int
    f: int
    V: int
    t: int
    dtype: str
    b: tuple[int, ...] = DEFAULT_MICRO_BATCHES
    layers: tuple[int, ...] = field(default=DEFAULT_LAYERS)

    def __post_init__(self) -> None:
        problems = []
        for name in ("s", "h", "a", "f", "V", "t"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                problems.append(f"{name}={v!r} must be a positive integer")
        if not problems:
            if self.h % self.a:
                problems.append(f"h={self.h} is not divisible by a={self.a}")
            if self.a % self.t:
                problems.append(f"a={self.a} is not divisible by t={self.t}")
            if self.f % self.t:
                problems.append(f"f={self.f} is not divisible by t={self.t}")
            if self.V % self.t:
                problems.append(f"V={self.V} is not divisible by t={self.t}")
        if self.dtype not in DTYPE_BYTES:
            problems.append(f"dtype={self.dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        for name in ("b", "layers"):
            v = getattr(self, name)
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x <= 0 for x in v):
                problems.append(f"{name}={list(v)!r} must be a non-empty list of positive integers")
        if problems:
            raise ShapeFileError("; ".join(problems))
        object.__setattr__(self, "b", tuple(sorted(set(self.b))))
        object.__setattr__(self, "layers", tuple(sorted(set(self.layers))))

    @property
    def group_key(self) -> tuple:
        """``(s, h, a, f, V, t, dtype)``: what identifies the group apart from ``b``."""
        return (self.s, self.h, self.a, self.f, self.V, self.t, self.dtype)

    def key(self, b: int) -> dict[str, Any]:
        """The store key (every column of :data:`core.model.ops.OP_KEYS`) at micro-batch ``b``; the
        profiler measures Megatron-LM GPT layers, so the family columns are GPT's."""
        return dict(b=int(b), s=self.s, h=self.h, a=self.a, f=self.f, V=self.V, t=self.t,
                    dtype=self.dtype, g=self.a, act="gelu", norm="layernorm", pos="learned",
                    attn="unfused", qkn=0, kv=self.h // self.a, cp=1, ce="unfused", glc=0,
                    actf="fused", **{c: 0 for c in MLA_KEY})  # no multi-head latent attention, no GLU clamp

    def label(self) -> str:
        """Short text for progress lines, e.g. ``s=256 h=512 a=8 f=2048 V=8192 t=1 fp32``."""
        return (f"s={self.s} h={self.h} a={self.a} f={self.f} V={self.V} t={self.t} "
                f"{self.dtype}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict that :func:`shape_from_dict` reads back."""
        return dict(s=self.s, h=self.h, a=self.a, f=self.f, V=self.V, t=self.t, dtype=self.dtype,
                    b=list(self.b), layers=list(self.layers))


def _int_list(value: Any, name: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ShapeFileError(f"{name}={value!r} must be an integer or a list of integers")
    return values


_SHAPE_KEYS = {"s", "h", "a", "f", "V", "vocab_size", "t", "b", "dtype", "layers"}


def shape_from_dict(d: dict[str, Any], default_dtype: str = "fp32") -> list[ShapeGroup]:
    """Shape groups (one per ``t``) of one shape dict (format in the module doc).

    Raises
    ------
    ShapeFileError
        Unknown or missing keys, wrong types, or shapes that do not divide.
    """
    if not isinstance(d, dict):
        raise ShapeFileError(f"a shape must be a JSON object, got {type(d).__name__}")
    unknown = sorted(set(d) - _SHAPE_KEYS)
    if unknown:
        raise ShapeFileError(f"unknown shape keys {unknown}; known: {sorted(_SHAPE_KEYS)}")
    missing = [k for k in ("s", "h", "a") if k not in d]
    if missing:
        raise ShapeFileError(f"shape {d} lacks keys {missing}")
    if "V" in d and "vocab_size" in d:
        raise ShapeFileError("give either V (padded vocabulary) or vocab_size, not both")
    h = d["h"]
    groups = []
    for t in _int_list(d.get("t", 1), "t"):
        if "V" in d:
            V = d["V"]
        else:
            vocab = d.get("vocab_size", DEFAULT_VOCAB)
            if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab <= 0:
                raise ShapeFileError(f"vocab_size={vocab!r} must be a positive integer")
            # a shape file gives a vocabulary, no model: Megatron-LM's default padding (128*t);
            # a file that needs another padding gives the padded V itself
            V = padded_vocab_size(vocab, t)
        f = d.get("f", 4 * h if isinstance(h, int) else h)
        groups.append(ShapeGroup(
            s=d["s"], h=h, a=d["a"], f=f, V=V, t=t, dtype=str(d.get("dtype", default_dtype)),
            b=tuple(_int_list(d.get("b", list(DEFAULT_MICRO_BATCHES)), "b")),
            layers=tuple(_int_list(d.get("layers", list(DEFAULT_LAYERS)), "layers"))))
    return groups


def shapes_from_session(session: Session, dtype: str | None = None) -> ShapeGroup:
    """The shape group a session's simulation looks up (its ``t``, ``b``, precision).

    ``layers`` holds the distinct layer counts of the pipeline stages
    (:func:`core.plan.layout.stage_layer_counts`: an even split, uneven first / last stages or a
    custom pipeline layout), so the optimizer-step rows match each stage's parameter count
    (stages of equal counts differ by the embedding only). A stage that holds no layer
    counts as one.

    Raises
    ------
    ShapeFileError
        The model is not a GPT (grouped-query attention, SwiGLU, RMSNorm, RoPE, sinks or
        FlashAttention): the profiler builds GPT layers only, never another model.
    """
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    gpt = {"num_query_groups": (None, m.num_attention_heads), "activation": ("gelu",),
           "normalization": ("layernorm",), "position_embedding": ("learned",),
           "attention_kernel": ("unfused",), "qk_layernorm": (False,),
           "kv_channels": (None, m.hidden_size // m.num_attention_heads),
           "softmax_type": ("vanilla",)}
    other = [f"model.{n}={getattr(m, n)!r}" for n, ok in gpt.items() if getattr(m, n) not in ok]
    if other:  # the profiler builds GPT layers; the analytic model times the others
        raise ShapeFileError(f"profiling measures Megatron-LM GPT layers only; not {', '.join(other)}")
    V = padded_vocab_size(m.vocab_size, t, divisible_by=m.make_vocab_size_divisible_by)
    return ShapeGroup(s=m.seq_length, h=m.hidden_size, a=m.num_attention_heads, f=m.ffn,
                      V=V, t=t, dtype=dtype or pl.precision,
                      b=(pl.micro_batch_size,),
                      layers=tuple(sorted({max(1, n) for n in stage_layer_counts(m.num_layers,
                                                                                  pl)})))


def merge_groups(groups: Iterable[ShapeGroup]) -> list[ShapeGroup]:
    """Groups with equal :attr:`ShapeGroup.group_key` merged (union of ``b`` and ``layers``),
    in first-seen order."""
    out: dict[tuple, ShapeGroup] = {}
    for g in groups:
        if g.group_key in out:
            o = out[g.group_key]
            g = ShapeGroup(*g.group_key, b=tuple(set(o.b) | set(g.b)),
                           layers=tuple(set(o.layers) | set(g.layers)))
        out[g.group_key] = g
    return list(out.values())


def load_shapes(path: str | Path, default_dtype: str = "fp32") -> list[ShapeGroup]:
    """Read a ``--shapes`` file (format in the module doc), groups merged.

    Parameters
    ----------
    path : str or Path
        JSON file: a list of shape dicts and/or session-file paths.
    default_dtype : str
        dtype of shape dicts that name none (sessions use their precision).

    Raises
    ------
    ShapeFileError
        The file is unreadable, not a JSON list, or an item is invalid; the
        message names the file and the item's index.
    """
    from core.io.session import SessionFileError, load_any, read_json  # lazy: sessions only when used

    path = Path(path)
    doc = read_json(path, ShapeFileError, "utf-8")
    if not isinstance(doc, list) or not doc:
        raise ShapeFileError(f"{path}: expected a non-empty JSON list of shapes or session files")
    groups: list[ShapeGroup] = []
    for i, item in enumerate(doc):
        try:
            if isinstance(item, str):
                groups.append(shapes_from_session(load_any(path.parent / item)))
            else:
                groups += shape_from_dict(item, default_dtype)
        except (ShapeFileError, SessionFileError, ConfigError) as exc:
            raise ShapeFileError(f"{path}: item {i}: {exc}") from None
    return merge_groups(groups)


def default_shapes(device_type: str) -> list[ShapeGroup]:
    """The shapes measured when no ``--shapes`` file is given.

    On a CPU (``device_type="cpu"``) one small GPT shape (s=128, h=256, a=4,
    vocabulary 8192) at t in {1, 2} and b in {1, 2, 4}, fp32: about a minute
    on two cores. On a GPU the shapes of GPT-3 1.3B, 2.7B and 6.7B (s=2048,
    vocabulary 50257) at t in {1, 2, 4, 8} and b in {1, 2, 4}, bf16.
    """
    if device_type == "cpu":
        return shape_from_dict({"s": 128, "h": 256, "a": 4, "vocab_size": 8192, "t": [1, 2],
                                "b": [1, 2, 4], "dtype": "fp32"})
    groups: list[ShapeGroup] = []
    for h, a in ((2048, 16), (2560, 32), (4096, 32)):
        groups += shape_from_dict({"s": 2048, "h": h, "a": a, "vocab_size": DEFAULT_VOCAB,
                                   "t": [1, 2, 4, 8], "b": [1, 2, 4], "dtype": "bf16"})
    return groups
