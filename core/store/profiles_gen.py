"""Generate analytic profile stores from GPU spec files (data-sheet figures).

``vtrain profile generate --spec resources/gpu_specs/H100-SXM5-80GB.json --out
profiles/H100-SXM5-80GB.h5`` (or ``--gpu H100-SXM5-80GB``, the shipped spec of
that kind) rebuilds a shipped store; any GPU is added the same way from a
spec file of its own (format: :mod:`core.store.gpu_spec`, ``docs/profile_store.md``).
The shipped spec files in ``resources/gpu_specs/`` are the one source of the
figures: every shipped analytic store is generated from them
(``scripts/generate_profiles.sh``). The A100 store shipped in ``profiles/`` is
calibrated from the A100 spec's analytic store and is not regenerated here.

Op tables hold the analytic model's times (see :mod:`core.model.ops`) for the shapes
of the preset models at t in {1, 2, 4, 8} and micro-batch sizes 1..16; the
model parameters are stored too, so shapes not tabulated are computed with
the same model. Collective curves come from a ring model with the spec's
NVLink bandwidth (one direction) times an assumed efficiency, for the group
sizes a node of the GPU's NVLink domain holds (:func:`collective_group_sizes`;
up to 72 for a GB200 NVL72): inside a node the simulator uses them for every
group.
Efficiencies are assumptions stated in the spec and the store's provenance,
not measurements.
"""

from __future__ import annotations

import datetime as _dt
import itertools
from pathlib import Path
from typing import Callable

import numpy as np

from core.store.nccl_tests import BUS_BANDWIDTH_FACTOR, RING_STEPS
from core.model.kernels import family_key_columns
from core.plan.presets import MODEL_PRESETS
from core.plan.model_config import padded_vocab_size
from core.store.gpu_spec import GpuSpec, read_gpu_spec, shipped_spec_path, shipped_specs
from core.model.ops import (ALL_OPS, FAMILY_KEY_DEFAULTS, OP_KEYS, OPTIMIZER_OP, analytic_op_time,
                  table_covers)
from core.store.profile_store import ProfileStore

__all__ = ["generate_store", "store_from_spec", "collective_group_sizes", "write_store",
           "fill_op_tables", "shipped_gpu_names"]

TP_SIZES = (1, 2, 4, 8)
MICRO_BATCHES = (1, 2, 4, 8, 16)
DTYPES = ("bf16", "fp16")
SEQ_LENGTHS = (1024, 2048, 4096)


def shipped_gpu_names() -> list[str]:
    """GPU kinds with a shipped spec file (``resources/gpu_specs/*.json``)."""
    return list(shipped_specs())


def collective_group_sizes(gpus_per_nvlink_domain: int) -> list[int]:
    """Group sizes with a collective curve: powers of two from 2 up to the NVLink domain and
    every divisor of the domain above 1, i.e. the tensor- and data-parallel groups a node of
    that size holds (``8 -> [2, 4, 8]``, ``72 -> [2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 32, 36,
    64, 72]``)."""
    n = gpus_per_nvlink_domain
    sizes = {2 ** k for k in range(1, 31) if 2 ** k <= n} | {k for k in range(2, n + 1) if n % k == 0}
    return sorted(sizes)


def store_from_spec(spec: GpuSpec, date: str | None = None) -> ProfileStore:
    """An analytic :class:`ProfileStore` built from ``spec``'s data-sheet figures.

    Peaks (every dtype of the spec, ``fp8`` included), HBM capacity and bandwidth
    go to the store's device section; the op tables are the analytic op model
    (:mod:`core.model.ops`) with the spec's assumed efficiencies; collective curves
    are ring collectives ``alpha * steps(n) + nbytes * factor(n) / busbw`` with
    ``busbw = nvlink_bytes_per_s (one direction) * nvlink_efficiency`` and
    ``alpha`` the spec's ``collective_latency_s`` (nccl-tests conventions,
    ``doc/PERFORMANCE.md``), over 1 KiB .. 2 GiB. The provenance names the
    method (``analytic``), each figure's source, the assumed efficiencies, the
    NVLink and NIC figures and the spec file's name.
    """
    busbw = spec.nvlink_bytes_per_s * spec.nvlink_efficiency
    provenance = {
        "method": "analytic", "date": date or _dt.date.today().isoformat(),
        "source": spec.source, "generator": "core.store.profiles_gen",
        "model": "roofline with efficiency (core.model.ops); ring collectives",
        "figures": "data sheet; efficiencies assumed, not calibrated",
        "sources": dict(spec.sources),
        "efficiencies": dict(spec.efficiencies),
        "nvlink_bytes_per_s": spec.nvlink_bytes_per_s,
        "nvlink_efficiency": spec.nvlink_efficiency,
        "collective_alpha_s": spec.collective_latency_s,
        "gpus_per_nvlink_domain": spec.gpus_per_nvlink_domain,
        "nic_bits_per_s": spec.nic_bits_per_s,
        "spec_file": spec.path.name if spec.path else "",
    }
    if spec.peak_fraction_fitted:  # no data sheet of its own: calibration fits peak_fraction
        provenance["peak_fraction_fitted"] = True
        provenance["figures"] = ("peaks of the reference part's data sheet, the share of them "
                                 "this part sustains (peak_fraction) to be fitted on its runs; "
                                 "efficiencies assumed, not calibrated")
    store = ProfileStore(
        device_name=spec.name, peak_flops=dict(spec.peak_flops), memory_bytes=spec.memory_bytes,
        memory_bandwidth_bytes_per_s=spec.memory_bandwidth_bytes_per_s,
        provenance=provenance, op_model=spec.op_model)
    fill_op_tables(store)
    sizes = 2.0 ** np.arange(10, 32)
    groups = collective_group_sizes(spec.gpus_per_nvlink_domain)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "send_recv"):
        for group in ((2,) if kind == "send_recv" else groups):
            if group > spec.gpus_per_nvlink_domain:
                continue
            times = (spec.collective_latency_s * RING_STEPS[kind](group)
                     + sizes * BUS_BANDWIDTH_FACTOR[kind](group) / busbw)
            store.add_collective(kind, group, sizes, times)
    return store


def generate_store(gpu: str, date: str | None = None) -> ProfileStore:
    """The analytic :class:`ProfileStore` of a shipped GPU kind, from its spec file
    ``resources/gpu_specs/<gpu>.json`` (see :func:`store_from_spec`).

    Raises
    ------
    KeyError
        No shipped spec for ``gpu`` (the message lists the shipped kinds).
    GpuSpecError
        The shipped spec file breaks a rule.
    """
    path = shipped_spec_path(gpu)
    if not path.is_file():
        raise KeyError(f"no specification for gpu={gpu!r}; known: {', '.join(shipped_gpu_names())}"
                       " (or give a spec file: vtrain profile generate --spec GPU.json)")
    return store_from_spec(read_gpu_spec(path), date)


def fill_op_tables(store: ProfileStore, extra_keys: list[dict] | None = None,
                   factor: Callable[[str, dict], float] | None = None) -> None:
    """Tabulate every op of :mod:`core.model.ops` with ``store``'s analytic model.

    The grid: the GPT preset models' (h, a, f, V) at sequence lengths 1024-4096,
    t in {1, 2, 4, 8} and micro-batch sizes 1-16, for bf16 and fp16 (those of them the
    store has a peak for), plus
    ``extra_keys`` (full op keys with every GPT column of :data:`core.model.ops.OP_KEYS`
    except ``b``, and optionally ``ops``, the op names it is for; each is
    tabulated at the grid's micro-batch sizes and its own ``b``); the optimizer step for 10^6..10^11 parameters. Each
    tabulated time is the model's times ``factor(op, key)`` (default 1).

    The tables hold GPT ops and leave out the model family's key columns
    (:data:`core.model.keys.FAMILY_KEY_DEFAULTS`), as stores written before them
    do: a lookup of another family's shape finds no row and takes the store's
    model (:func:`core.model.keys.table_covers`), which is what a table of it
    would hold. An extra key of another family is refused.

    Raises
    ------
    ValueError
        An extra key of a model family other than GPT.
    """
    gpt = [m for m in MODEL_PRESETS.values() if table_covers("attention_fwd", family_key_columns(m), ())
           and table_covers("mlp_fwd", family_key_columns(m), ())]
    shapes = sorted({(m.hidden_size, m.num_attention_heads, m.ffn, m.vocab_size,
                      m.make_vocab_size_divisible_by) for m in gpt})
    keys = []
    dtypes = [d for d in DTYPES if d in store.peak_flops]  # a spec may give only some
    for (h, a, f, vocab, divisor), s, t, b, dtype in itertools.product(
            shapes, SEQ_LENGTHS, TP_SIZES, MICRO_BATCHES, dtypes):
        if a % t == 0 and f % t == 0:
            V = padded_vocab_size(vocab, t, divisible_by=divisor)
            keys.append(dict(b=b, s=s, h=h, a=a, f=f, t=t, V=V, dtype=dtype))
    for k in extra_keys or []:
        if not all(table_covers(op, k, ()) for op in ("attention_fwd", "mlp_fwd", "embedding_fwd",
                                                      "output_fwd")):
            raise ValueError(f"op tables hold GPT shapes only, not {k}")
        keys += [{**k, "b": b} for b in sorted(set(MICRO_BATCHES) | {k["b"]})]
    for op in ALL_OPS:
        if op == OPTIMIZER_OP:
            continue
        columns = [c for c in OP_KEYS[op] if c not in FAMILY_KEY_DEFAULTS]
        rows = {}
        for key in keys:
            if op not in key.get("ops", ALL_OPS):
                continue
            sub = tuple((c, key[c]) for c in columns)
            rows[sub] = key  # unique per op key; later keys (extra) win
        op_keys = list(rows.values())
        if not op_keys:
            continue
        times = [analytic_op_time(op, k, store) * (factor(op, k) if factor else 1.0) for k in op_keys]
        cols = {c: np.array([k[c] for k in op_keys]) for c in columns}
        store.add_op_table(op, cols, np.array(times), axis="b")
    n = np.unique(np.logspace(6, 11, 26).astype(np.int64))
    opt_rows = [(int(x), dt, analytic_op_time(OPTIMIZER_OP, {"n": int(x), "dtype": dt}, store))
                for dt in dtypes for x in n]
    if not opt_rows:
        return
    store.add_op_table(OPTIMIZER_OP, {"n": np.array([r[0] for r in opt_rows]),
                                      "dtype": np.array([r[1] for r in opt_rows])},
                       np.array([r[2] for r in opt_rows]), axis="n")


def write_store(gpu: str | GpuSpec, out: str | Path, date: str | None = None) -> Path:
    """Generate the store for ``gpu`` (a shipped kind or a :class:`GpuSpec`) and save it
    atomically to ``out``."""
    store = store_from_spec(gpu, date) if isinstance(gpu, GpuSpec) else generate_store(gpu, date)
    store.save(out)
    return Path(out)
