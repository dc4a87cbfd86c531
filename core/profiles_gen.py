"""Generate analytic profile stores from public GPU specifications.

``vtrain profile generate --gpu A100-SXM4-80GB --out profiles/A100-SXM4-80GB.h5``
rebuilds a shipped store. Op tables hold the analytic model's times (see
:mod:`core.ops`) for the shapes of the preset models at t in {1, 2, 4, 8} and
micro-batch sizes 1..16; the model parameters are stored too, so shapes not
tabulated are computed with the same model. Collective curves come from a ring
model with the NVLink bus bandwidth times an efficiency.

Specification sources (vendor data sheets): NVIDIA A100 Tensor Core GPU data
sheet (SXM4 80 GB: 312 TFLOP/s dense BF16/FP16, 156 TF32, 19.5 FP32, 2,039 GB/s
HBM2e, NVLink 600 GB/s both directions); NVIDIA H100 Tensor Core GPU data sheet
(SXM5: 989 TFLOP/s dense BF16/FP16, 495 TF32, 67 FP32, 3.35 TB/s HBM3, NVLink
900 GB/s both directions). Efficiencies are assumptions stated in the store's
provenance, not measurements.
"""

from __future__ import annotations

import datetime as _dt
import itertools
from pathlib import Path
from typing import Callable

import numpy as np

from .comm import _FACTOR, _STEPS
from .config import MODEL_PRESETS, padded_vocab_size
from .ops import ALL_OPS, OP_KEYS, OPTIMIZER_OP, analytic_op_time, full_op_key
from .profile_store import ProfileStore

__all__ = ["DEVICE_SPECS", "generate_store"]

GiB = 2**30
DEVICE_SPECS = {
    "A100-SXM4-80GB": dict(
        peak_flops={"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
        memory_bytes=80 * GiB, memory_bandwidth_bytes_per_s=2.039e12,
        nvlink_bytes_per_s=300e9,
        op_model={"gemm_efficiency_max": 0.80, "gemm_half_size": 160.0,
                  "memory_efficiency": 0.75, "kernel_overhead_s": 4e-6},
        source="NVIDIA A100 Tensor Core GPU data sheet (SXM4 80GB)",
    ),
    "H100-SXM5-80GB": dict(
        peak_flops={"bf16": 989e12, "fp16": 989e12, "tf32": 495e12, "fp32": 67e12},
        memory_bytes=80 * GiB, memory_bandwidth_bytes_per_s=3.35e12,
        nvlink_bytes_per_s=450e9,
        op_model={"gemm_efficiency_max": 0.75, "gemm_half_size": 224.0,
                  "memory_efficiency": 0.75, "kernel_overhead_s": 4e-6},
        source="NVIDIA H100 Tensor Core GPU data sheet (SXM5)",
    ),
}
NVLINK_EFFICIENCY = 0.8
COLLECTIVE_ALPHA_S = 2e-6  # latency per ring step
TP_SIZES = (1, 2, 4, 8)
MICRO_BATCHES = (1, 2, 4, 8, 16)
DTYPES = ("bf16", "fp16")
SEQ_LENGTHS = (1024, 2048, 4096)


def generate_store(gpu: str, date: str | None = None) -> ProfileStore:
    """An analytic :class:`ProfileStore` for ``gpu`` (a key of :data:`DEVICE_SPECS`).

    Raises
    ------
    KeyError
        Unknown GPU kind.
    """
    if gpu not in DEVICE_SPECS:
        raise KeyError(f"no specification for gpu={gpu!r}; known: {', '.join(DEVICE_SPECS)}")
    spec = DEVICE_SPECS[gpu]
    busbw = spec["nvlink_bytes_per_s"] * NVLINK_EFFICIENCY
    store = ProfileStore(
        device_name=gpu, peak_flops=spec["peak_flops"], memory_bytes=spec["memory_bytes"],
        memory_bandwidth_bytes_per_s=spec["memory_bandwidth_bytes_per_s"],
        provenance={"method": "analytic", "date": date or _dt.date.today().isoformat(),
                    "source": spec["source"], "generator": "core.profiles_gen",
                    "model": "roofline with efficiency (core.ops); ring collectives",
                    "nvlink_bytes_per_s": spec["nvlink_bytes_per_s"],
                    "nvlink_efficiency": NVLINK_EFFICIENCY,
                    "collective_alpha_s": COLLECTIVE_ALPHA_S},
        op_model=dict(spec["op_model"]),
    )
    fill_op_tables(store)
    sizes = 2.0 ** np.arange(10, 32)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "send_recv"):
        for group in ((2,) if kind == "send_recv" else (2, 4, 8)):
            times = COLLECTIVE_ALPHA_S * _STEPS[kind](group) + sizes * _FACTOR[kind](group) / busbw
            store.add_collective(kind, group, sizes, times)
    return store


def fill_op_tables(store: ProfileStore, extra_keys: list[dict] | None = None,
                   factor: Callable[[str, dict], float] | None = None) -> None:
    """Tabulate every op of :mod:`core.ops` with ``store``'s analytic model.

    The grid: the preset models' (h, a, f, V) at sequence lengths 1024-4096,
    t in {1, 2, 4, 8} and micro-batch sizes 1-16, for bf16 and fp16, plus
    ``extra_keys`` (full op keys with every column of :data:`core.ops.OP_KEYS`
    except ``b``, and optionally ``ops``, the op names it is for; each is
    tabulated at the grid's micro-batch sizes and its own ``b``); the optimizer step for 10^6..10^11 parameters. Each
    tabulated time is the model's times ``factor(op, key)`` (default 1).
    """
    shapes = sorted({(m.hidden_size, m.num_attention_heads, m.ffn, m.vocab_size, m.query_groups,
                      m.activation, m.normalization, m.position_embedding, m.attention_kernel,
                      int(m.qk_layernorm))
                     for m in MODEL_PRESETS.values()})
    keys = []
    for (h, a, f, vocab, g, act, norm, pos, attn, qkn), s, t, b, dtype in itertools.product(
            shapes, SEQ_LENGTHS, TP_SIZES, MICRO_BATCHES, DTYPES):
        if a % t == 0 and f % t == 0 and g % t == 0:
            keys.append(dict(b=b, s=s, h=h, a=a, f=f, t=t, V=padded_vocab_size(vocab, t), dtype=dtype,
                             g=g, act=act, norm=norm, pos=pos, attn=attn, qkn=qkn))
    for k in extra_keys or []:
        k = {**k, **{c: v for c, v in full_op_key("attention_fwd", k).items() if c not in k}}
        k.update({c: v for c, v in full_op_key("mlp_fwd", k).items() if c not in k})
        keys += [{**k, "b": b} for b in sorted(set(MICRO_BATCHES) | {k["b"]})]
    for op in ALL_OPS:
        if op == OPTIMIZER_OP:
            continue
        rows = {}
        for key in keys:
            if op not in key.get("ops", ALL_OPS):
                continue
            sub = tuple((c, key[c]) for c in OP_KEYS[op])
            rows[sub] = key  # unique per op key; later keys (extra) win
        op_keys = list(rows.values())
        times = [analytic_op_time(op, k, store) * (factor(op, k) if factor else 1.0) for k in op_keys]
        cols = {c: np.array([k[c] for k in op_keys]) for c in OP_KEYS[op]}
        store.add_op_table(op, cols, np.array(times), axis="b")
    n = np.unique(np.logspace(6, 11, 26).astype(np.int64))
    opt_rows = [(int(x), dt, analytic_op_time(OPTIMIZER_OP, {"n": int(x), "dtype": dt}, store))
                for dt in DTYPES for x in n]
    store.add_op_table(OPTIMIZER_OP, {"n": np.array([r[0] for r in opt_rows]),
                                      "dtype": np.array([r[1] for r in opt_rows])},
                       np.array([r[2] for r in opt_rows]), axis="n")


def write_store(gpu: str, out: str | Path, date: str | None = None) -> Path:
    """Generate the store for ``gpu`` and save it atomically to ``out``."""
    store = generate_store(gpu, date)
    store.save(out)
    return Path(out)
