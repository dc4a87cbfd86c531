"""GPU specification files: the data-sheet figures an analytic profile store is built from.

A GPU spec file is one JSON object (documented in ``docs/profile_store.md``,
"GPU spec files"; the shipped ones are ``resources/gpu_specs/*.json``, one per
GPU kind, and the shipped analytic stores are rebuilt from them)::

    {"format": "vtrain-gpu-spec", "version": 1,
     "name": "H100-SXM5-80GB",
     "peak_tflops": {"bf16": 989, "fp16": 989, "fp8": 1979, "tf32": 495, "fp32": 67},
     "memory_gib": 80,
     "memory_bandwidth_tbytes_per_s": 3.35,
     "nvlink_gbytes_per_s_bidirectional": 900,
     "gpus_per_nvlink_domain": 8,
     "nic_gbits_per_s": 400,
     "efficiencies": {"gemm_efficiency_max": 0.75, "gemm_half_size": 224},
     "source": "NVIDIA H100 Tensor Core GPU data sheet (SXM5)",
     "sources": {"peak_tflops": "...", "memory": "...", "nvlink": "...", "nic": "..."}}

Units are in the field names: dense peaks (no structured sparsity) in 10^12
FLOP/s per dtype; HBM capacity in GiB (2^30 bytes); HBM bandwidth in 10^12
bytes/s; NVLink bandwidth per GPU in 10^9 bytes/s, both directions together
as data sheets state it (the collective model uses half of it per
direction); NIC bandwidth per GPU in 10^9 bits/s. ``efficiencies`` are
assumed model parameters (:data:`core.model.ops.DEFAULT_OP_MODEL` keys plus
``nvlink_efficiency`` and ``collective_latency_s``), never measurements.

:func:`read_gpu_spec` checks every rule and raises :class:`GpuSpecError`
naming the file, the field and the rule.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.plan.fields import ConfigError, FieldError
from core.model.ops import DEFAULT_OP_MODEL
from core.util.text import file_name_part

__all__ = ["GpuPower", "POWER_FIELDS", "gpu_power", "GPU_SPEC_FORMAT", "GPU_SPEC_VERSION", "GPU_SPECS_DIR", "SPEC_SOURCES",
           "SPEC_PEAK_DTYPES", "SPEC_EFFICIENCIES", "GpuSpec", "GpuSpecError", "read_gpu_spec", "gpu_spec_from_dict",
           "shipped_spec_path", "shipped_specs", "kind_fits_peak_fraction", "fits_peak_fraction"]

GPU_SPEC_FORMAT = "vtrain-gpu-spec"
GPU_SPEC_VERSION = 1
#: Folder of the shipped spec files (one per GPU kind, ``<name>.json``).
GPU_SPECS_DIR = Path(__file__).resolve().parents[2] / "resources" / "gpu_specs"
#: Keys of ``sources``: each data-sheet figure names where it comes from.
SPEC_SOURCES = ("peak_tflops", "memory", "nvlink", "nic")
#: Defaults of the spec-only assumptions (the op-model keys default to DEFAULT_OP_MODEL).
_SPEC_ONLY = {"nvlink_efficiency": 0.8, "collective_latency_s": 2e-6}
#: Upper bounds of the spec's figures, in the spec's units: far above any GPU (GB300's dense FP4
#: is 15,000 TFLOP/s, its HBM 288 GB at 8 TB/s, NVLink 5 1,800 GB/s, 800 Gb/s NICs), so a figure
#: above one is in another unit (FLOP/s for TFLOP/s, bytes for GiB) and is named as such.
SPEC_LIMITS = {"peak_tflops": 1e5, "memory_gib": 1e4, "memory_bandwidth_tbytes_per_s": 1e3,
               "nvlink_gbytes_per_s_bidirectional": 1e5, "nic_gbits_per_s": 1e5}
#: Keys of ``peak_tflops``: the dtypes whose dense peak the op model reads (GEMMs in fp32
#: without and with TF32 matmuls, FP16, BF16, per-tensor or blockwise FP8 and Blackwell's
#: MXFP8; core.model.fp8.fp8_gemm_dtype, core.plan.parallel.gemm_peak_dtype). Another key
#: (a typo such as ``bf61``, or ``fp4``, which nothing times) is refused by name.
SPEC_PEAK_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8")
#: Allowed keys of ``efficiencies``.
SPEC_EFFICIENCIES = tuple(DEFAULT_OP_MODEL) + tuple(_SPEC_ONLY)
_FIELDS = ("format", "version", "name", "peak_tflops", "memory_gib", "memory_bandwidth_tbytes_per_s",
           "nvlink_gbytes_per_s_bidirectional", "gpus_per_nvlink_domain", "nic_gbits_per_s",
           "efficiencies", "power", "source", "sources", "peak_fraction_fitted")
_REQUIRED = ("name", "peak_tflops", "memory_gib", "memory_bandwidth_tbytes_per_s",
             "nvlink_gbytes_per_s_bidirectional", "gpus_per_nvlink_domain", "nic_gbits_per_s",
             "sources")
#: Largest NVLink domain accepted (NVIDIA's NVL576 is the largest announced).
MAX_NVLINK_DOMAIN = 576


class GpuSpecError(ConfigError):
    """A GPU spec file breaks a rule; each :class:`~core.plan.fields.FieldError` names
    ``FILE: field`` and the rule (printed as one line, exit status 2, by the CLI)."""


def _decimal(value: float, exponent: int) -> float:
    """``value * 10**exponent`` rounded once from the decimal text (``2.039, 12 -> 2.039e12``
    exactly as the literal would be), so spec figures equal the literals written in code.
    Decimal arithmetic, not text: ``f"{1e-05!r}e12"`` is no number (a ValueError, exit 1)."""
    from decimal import Decimal
    return float(Decimal(repr(value)).scaleb(exponent))


#: Keys of a spec's ``power`` object: ``board_w`` and ``source`` always, and either the data
#: sheet's whole system (``system_max_w`` with its ``gpus_per_system``) or, without one, an
#: assumed ``node_overhead_w_per_gpu``.
POWER_FIELDS = ("board_w", "system_max_w", "gpus_per_system", "node_overhead_w_per_gpu", "source")


@dataclass(frozen=True)
class GpuPower:
    """Power figures of a GPU kind for the energy of a run (:mod:`core.sim.energy`), watts.

    Attributes
    ----------
    board_w : float
        The data sheet's maximum board power (TDP) of one GPU.
    node_overhead_w_per_gpu : float
        The rest of a node (CPUs, memory, NICs, NVSwitches, fans) per GPU with its GPUs at
        board power: ``(system_max_w - gpus_per_system * board_w) / gpus_per_system`` from
        the system's data sheet, or the spec's assumed ``node_overhead_w_per_gpu``.
    source : str
        Where the figures come from (data sheets; what is assumed).
    """

    board_w: float
    node_overhead_w_per_gpu: float
    source: str


def _power(raw: Any, bad: Any) -> GpuPower | None:
    """The spec's ``power`` object as :class:`GpuPower` (None when absent or broken); each broken
    rule goes to ``bad(field, message)``: ``board_w`` a positive number; either ``system_max_w``
    (above ``gpus_per_system * board_w``) with ``gpus_per_system`` (an integer of at least 1)
    or ``node_overhead_w_per_gpu`` (zero or more), not both; ``source`` a non-empty string."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        bad("power", "must be an object: board_w, system_max_w and gpus_per_system (or "
                     "node_overhead_w_per_gpu), source")
        return None
    errors: list[str] = []

    def no(fld: str, msg: str) -> None:
        errors.append(fld)
        bad(f"power.{fld}", msg)

    for k in sorted(set(raw) - set(POWER_FIELDS)):
        no(k, f"unknown field (known: {', '.join(POWER_FIELDS)})")
    board = raw.get("board_w")
    if not _is_number(board) or board <= 0:
        no("board_w", f"{board!r} must be a positive number (W)")
    src = raw.get("source")
    if not isinstance(src, str) or not src.strip():
        no("source", "missing: name the data sheet (or the assumption) of the power figures")
    system = "system_max_w" in raw or "gpus_per_system" in raw
    if system == ("node_overhead_w_per_gpu" in raw):
        no("system_max_w", "give system_max_w with gpus_per_system, or node_overhead_w_per_gpu "
                           "(one of the two)")
    elif system:
        n, sysw = raw.get("gpus_per_system"), raw.get("system_max_w")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            no("gpus_per_system", f"{n!r} must be an integer of at least 1")
        elif not _is_number(sysw) or (_is_number(board) and sysw <= n * board):
            no("system_max_w", f"{sysw!r} must be a number above gpus_per_system x board_w (W)")
    else:
        o = raw["node_overhead_w_per_gpu"]
        if not _is_number(o) or o < 0:
            no("node_overhead_w_per_gpu", f"{o!r} must be zero or more (W)")
    if errors:
        return None
    overhead = ((raw["system_max_w"] - raw["gpus_per_system"] * board) / raw["gpus_per_system"]
                if system else raw["node_overhead_w_per_gpu"])
    return GpuPower(board_w=float(board), node_overhead_w_per_gpu=float(overhead), source=src)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU kind's data-sheet figures, in base units.

    Attributes
    ----------
    name : str
        GPU kind, the store's ``device_name`` (e.g. ``"H100-SXM5-80GB"``).
    peak_flops : dict[str, float]
        Dense peak FLOP/s per dtype (``"bf16"``, ``"fp16"``, ``"fp8"``, ``"tf32"``, ``"fp32"`` ...).
    memory_bytes : float
        HBM capacity, bytes (``memory_gib * 2**30``).
    memory_bandwidth_bytes_per_s : float
        HBM bandwidth, bytes/s.
    nvlink_bytes_per_s : float
        NVLink bandwidth of one GPU in one direction, bytes/s (half the data sheet's total).
    gpus_per_nvlink_domain : int
        GPUs that reach each other over NVLink (8 on HGX boards, 72 in a GB200 NVL72 rack).
    nic_bits_per_s : float
        Scale-out network bandwidth of one GPU, bits/s.
    efficiencies : dict[str, float]
        Assumed model parameters as given (op-model keys and ``nvlink_efficiency``,
        ``collective_latency_s``); see :attr:`op_model`.
    source : str
        Short source line shown with the store.
    sources : dict[str, str]
        Source of each figure (keys :data:`SPEC_SOURCES`).
    power : GpuPower or None
        Board and node power for the energy of a run (``power`` in the file; None when it
        gives none, and then the energy is not computed).
    peak_fraction_fitted : bool
        The part has no data sheet of its own (a power-capped variant): ``peak_tflops`` are
        the reference part's, and the share of them it sustains (the op model's
        ``peak_fraction``) is fitted on its measured runs by ``vtrain calibrate``
        (:mod:`core.accuracy.calibrate`); False (the default) for a data-sheet part, whose
        ``peak_fraction`` stays 1.
    path : Path or None
        The file it was read from.
    raw : dict
        The file's JSON object as read (kept in the store's provenance).
    """

    name: str
    peak_flops: dict[str, float]
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    nvlink_bytes_per_s: float
    gpus_per_nvlink_domain: int
    nic_bits_per_s: float
    efficiencies: dict[str, float]
    source: str
    sources: dict[str, str]
    peak_fraction_fitted: bool = False
    power: GpuPower | None = None
    path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def op_model(self) -> dict[str, float]:
        """The op-model parameters among :attr:`efficiencies` (the rest take
        :data:`core.model.ops.DEFAULT_OP_MODEL` where used)."""
        return {k: v for k, v in self.efficiencies.items() if k in DEFAULT_OP_MODEL}

    @property
    def nvlink_efficiency(self) -> float:
        """Share of the NVLink bandwidth the ring collectives achieve (assumed; default 0.8)."""
        return self.efficiencies.get("nvlink_efficiency", _SPEC_ONLY["nvlink_efficiency"])

    @property
    def collective_latency_s(self) -> float:
        """Latency per ring step of an NVLink collective, seconds (assumed; default 2 us)."""
        return self.efficiencies.get("collective_latency_s", _SPEC_ONLY["collective_latency_s"])


def _subnormals(raw: dict[str, Any]) -> list[tuple[str, float]]:
    """``(dotted field, value)`` of each subnormal float (0 < |x| < 2.2e-308) in a spec's
    fields and their objects (``peak_tflops.bf16``, ``power.board_w``)."""
    out, stack = [], [("", raw)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in node.items())
        elif isinstance(node, float) and 0.0 < abs(node) < sys.float_info.min:
            out.append((where, node))
    return sorted(out)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_header(raw: dict[str, Any], bad: Any) -> None:
    """The spec object's envelope (see :func:`gpu_spec_from_dict`): ``format`` and ``version``
    when given, no unknown field, every required one present; each broken rule goes to
    ``bad(field, message)``."""
    if "format" in raw and raw["format"] != GPU_SPEC_FORMAT:
        bad("format", f"{raw['format']!r} is not {GPU_SPEC_FORMAT!r} (not a GPU spec file)")
    if "version" in raw:
        v = raw["version"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            bad("version", f"{v!r} must be a positive integer")
        elif v > GPU_SPEC_VERSION:
            bad("version", f"version {v} is newer than this program reads ({GPU_SPEC_VERSION}); "
                           "update vtrain")
    for k in sorted(set(raw) - set(_FIELDS)):
        bad(k, f"unknown field (known: {', '.join(_FIELDS)})")
    for k in _REQUIRED:
        if k not in raw:
            bad(k, "missing required field")


#: The efficiencies an analytic store assumes that a spec may leave out, said with their
#: values (:func:`assumed_efficiencies`).
ASSUMED_EFFICIENCIES = ("gemm_efficiency_max", "gemm_half_size", "memory_efficiency",
                        "inter_node_efficiency", "nvlink_efficiency")


def assumed_efficiencies(given: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    """``(values, defaulted)``: each of :data:`ASSUMED_EFFICIENCIES` as a spec's
    ``efficiencies`` (``given``) sets it or, where it does not, the default it takes
    (:data:`core.model.ops.DEFAULT_OP_MODEL`, ``nvlink_efficiency`` 0.8), and the names of
    those defaulted, in that order."""
    defaults = {**DEFAULT_OP_MODEL, **_SPEC_ONLY}
    values = {k: float(given.get(k, defaults[k])) for k in ASSUMED_EFFICIENCIES}
    return values, [k for k in ASSUMED_EFFICIENCIES if k not in given]


def _beyond(v: float, limit: float, unit: str) -> str:
    """The message for a figure above its :data:`SPEC_LIMITS` bound: another unit, likely."""
    return (f"{v:g} is above {limit:,g} {unit}, beyond any GPU: the field is in {unit} (a figure "
            "in another unit, such as FLOP/s or bytes?)")


def _peaks(pt: Any, bad: Any) -> dict[str, float]:
    """``peak_tflops`` (dtype -> TFLOP/s, a non-empty object of positive numbers) as dtype ->
    FLOP/s; the broken entries go to ``bad(field, message)`` and are left out."""
    peaks: dict[str, float] = {}
    if not isinstance(pt, dict) or not pt:
        bad("peak_tflops", "must be a non-empty object: dtype -> dense peak in TFLOP/s")
    else:
        for dtype, v in pt.items():
            if dtype not in SPEC_PEAK_DTYPES:
                bad(f"peak_tflops.{dtype}", f"unknown dtype (known: {', '.join(SPEC_PEAK_DTYPES)}"
                                            "; a peak nothing is timed at is left out)")
            elif not _is_number(v) or v <= 0:
                bad(f"peak_tflops.{dtype}", f"{v!r} must be a positive number (TFLOP/s)")
            elif v > SPEC_LIMITS["peak_tflops"]:
                bad(f"peak_tflops.{dtype}", _beyond(v, SPEC_LIMITS["peak_tflops"], "TFLOP/s"))
            else:
                peaks[str(dtype)] = _decimal(v, 12)
    return peaks


def _efficiencies(e: Any, bad: Any) -> dict[str, float]:
    """``efficiencies`` (keys from :data:`SPEC_EFFICIENCIES`; efficiencies and ``peak_fraction``
    in (0, 1], ``gemm_half_size`` above 0, the others at or above 0) as floats; the broken
    entries go to ``bad(field, message)`` and are left out."""
    eff: dict[str, float] = {}
    if not isinstance(e, dict):
        bad("efficiencies", "must be an object: parameter -> number")
    else:
        for k, v in e.items():
            if k not in SPEC_EFFICIENCIES:
                bad(f"efficiencies.{k}", f"unknown parameter (known: {', '.join(SPEC_EFFICIENCIES)})")
            elif not _is_number(v):
                bad(f"efficiencies.{k}", f"{v!r} must be a finite number")
            elif ("efficiency" in k or k == "peak_fraction") and not 0 < v <= 1:
                bad(f"efficiencies.{k}", f"{v!r} must be in (0, 1]")
            elif k == "gemm_half_size" and not v > 0:
                bad(f"efficiencies.{k}", f"{v!r} must be above 0")
            elif v < 0:
                bad(f"efficiencies.{k}", f"{v!r} must be zero or more")
            else:
                eff[k] = float(v)
    return eff


def _sources(src: Any, bad: Any) -> dict[str, str]:
    """``sources``: a non-empty string for each of :data:`SPEC_SOURCES` and no other key; the
    broken entries go to ``bad(field, message)`` and are left out."""
    sources: dict[str, str] = {}
    if not isinstance(src, dict):
        bad("sources", f"must be an object naming the source of each of {', '.join(SPEC_SOURCES)}")
    else:
        for k in SPEC_SOURCES:
            if not isinstance(src.get(k), str) or not src[k].strip():
                bad(f"sources.{k}", "missing: name the data sheet (or measurement) this figure comes from")
            else:
                sources[k] = src[k]
        for k in sorted(set(src) - set(SPEC_SOURCES)):
            bad(f"sources.{k}", f"unknown figure (known: {', '.join(SPEC_SOURCES)})")
    return sources


def gpu_spec_from_dict(raw: Any, where: str = "spec", path: Path | None = None) -> GpuSpec:
    """Check a parsed spec object and convert it to base units.

    Rules: a JSON object; ``format`` (when given) is ``"vtrain-gpu-spec"`` and
    ``version`` (when given) at most :data:`GPU_SPEC_VERSION`; no unknown
    field; every required field present; ``name`` a non-empty string usable as
    a file name (no ``/``); ``peak_tflops`` a non-empty object of positive
    numbers keyed by dtype; capacities and bandwidths positive numbers;
    ``gpus_per_nvlink_domain`` an integer from 1 to 576; ``efficiencies``
    keys from :data:`SPEC_EFFICIENCIES`, the efficiencies in (0, 1],
    ``gemm_half_size`` above 0, the other (times) at or above 0;
    ``sources`` a non-empty string for each of :data:`SPEC_SOURCES`; ``peak_fraction_fitted``
    (optional) true or false; ``power`` (optional) by the rules of :func:`_power`.

    Raises
    ------
    GpuSpecError
        Listing every broken rule, each as ``<where>: <field>`` and its message.
    """
    errs: list[FieldError] = []

    def bad(fld: str, msg: str) -> None:
        errs.append(FieldError(f"{where}: {fld}", msg))

    if not isinstance(raw, dict):
        raise GpuSpecError([FieldError(where, "must be a JSON object (a GPU spec)")])
    for fld, v in _subnormals(raw):  # no figure means one; 1e-320 Gb/s was written to a store
        bad(fld, f"{v!r} is a subnormal number (under 2.2e-308 in magnitude): give 0 or a normal "
                 "number")
    _check_header(raw, bad)
    if errs:
        raise GpuSpecError(errs)

    name = raw["name"]
    if not isinstance(name, str) or not name.strip() or "/" in name or "\\" in name:
        bad("name", f"{name!r} must be a non-empty string without '/' (it names the store file)")
    peaks = _peaks(raw["peak_tflops"], bad)
    numbers = {}
    for k, unit in (("memory_gib", "GiB"), ("memory_bandwidth_tbytes_per_s", "TB/s"),
                    ("nvlink_gbytes_per_s_bidirectional", "GB/s, both directions"),
                    ("nic_gbits_per_s", "Gb/s per GPU")):
        v = raw[k]
        if not _is_number(v) or v <= 0:
            bad(k, f"{v!r} must be a positive number ({unit})")
        elif v > SPEC_LIMITS[k]:
            bad(k, _beyond(v, SPEC_LIMITS[k], unit))
        else:
            numbers[k] = float(v)
    dom = raw["gpus_per_nvlink_domain"]
    if isinstance(dom, bool) or not isinstance(dom, int) or not 1 <= dom <= MAX_NVLINK_DOMAIN:
        bad("gpus_per_nvlink_domain", f"{dom!r} must be an integer from 1 to {MAX_NVLINK_DOMAIN}")
    eff = _efficiencies(raw.get("efficiencies", {}), bad)
    sources = _sources(raw["sources"], bad)
    source = raw.get("source", sources.get("peak_tflops", ""))
    if "source" in raw and (not isinstance(source, str) or not source.strip()):
        bad("source", f"{source!r} must be a non-empty string")
    power = _power(raw.get("power"), bad)
    fitted = raw.get("peak_fraction_fitted", False)
    if not isinstance(fitted, bool):
        bad("peak_fraction_fitted", f"{json.dumps(fitted)[:40]} must be true or false")
    if errs:
        raise GpuSpecError(errs)
    return GpuSpec(
        name=name.strip(), peak_flops=peaks, memory_bytes=numbers["memory_gib"] * 2**30,
        memory_bandwidth_bytes_per_s=_decimal(raw["memory_bandwidth_tbytes_per_s"], 12),
        nvlink_bytes_per_s=_decimal(raw["nvlink_gbytes_per_s_bidirectional"], 9) / 2,
        gpus_per_nvlink_domain=dom, nic_bits_per_s=_decimal(raw["nic_gbits_per_s"], 9),
        efficiencies=eff, source=source, sources=sources, peak_fraction_fitted=fitted, power=power,
        path=path,
        raw=json.loads(json.dumps(raw)))


def read_gpu_spec(path: str | Path) -> GpuSpec:
    """Read and check a GPU spec file (see the module doc and :func:`gpu_spec_from_dict`).

    Raises
    ------
    GpuSpecError
        Missing or unreadable file, not JSON, or a broken rule; the message names
        the file, the field and the rule.
    """
    from core.util.inputs import read_json_file

    path = Path(path)

    class _Unreadable(Exception):
        pass

    try:
        raw = read_json_file(path, _Unreadable)  # regular file, bounded size and depth
    except _Unreadable as exc:
        raise GpuSpecError([FieldError(str(path), str(exc)[len(str(path)) + 2:])]) from None
    return gpu_spec_from_dict(raw, str(path), path)


def shipped_spec_path(name: str) -> Path:
    """The shipped spec file of GPU kind ``name`` (``resources/gpu_specs/<name>.json``, the
    name made a file name by :func:`core.util.text.file_name_part`, so it never leaves that
    folder); it may not exist."""
    return GPU_SPECS_DIR / f"{file_name_part(name)}.json"


def shipped_specs() -> dict[str, GpuSpec]:
    """Every shipped spec, by GPU kind, read and checked (sorted by file name)."""
    return {s.name: s for s in (read_gpu_spec(p) for p in sorted(GPU_SPECS_DIR.glob("*.json")))}


@lru_cache(maxsize=None)
def kind_fits_peak_fraction(kind: str) -> bool:
    """Whether GPU kind ``kind``'s shipped spec says ``peak_fraction_fitted`` (a part without a
    data sheet of its own, whose sustained share of the reference peaks is fitted); False for
    a kind without a shipped spec."""
    path = shipped_spec_path(kind)
    return path.is_file() and read_gpu_spec(path).peak_fraction_fitted


def fits_peak_fraction(store: Any) -> bool:
    """Whether ``store``'s device has no data sheet of its own, so that its op model's
    ``peak_fraction`` is fitted: its spec said ``peak_fraction_fitted``, which the analytic
    store's provenance records and every store calibrated from it keeps in its
    ``base_provenance`` (followed down the whole chain of calibrations)."""
    prov = getattr(store, "provenance", None) or {}
    for _ in range(64):  # a chain of calibrated stores, each on the one before
        if not isinstance(prov, dict):
            return False
        if prov.get("peak_fraction_fitted"):
            return True
        prov = prov.get("base_provenance")
    return False


@lru_cache(maxsize=None)
def gpu_power(kind: str) -> GpuPower | None:
    """The power figures of GPU kind ``kind`` from its shipped spec file; None when the kind has
    no shipped spec or its spec gives no ``power`` (the energy of a run is then not computed).
    Raises GpuSpecError when the shipped file is broken."""
    path = shipped_spec_path(kind)
    return read_gpu_spec(path).power if path.is_file() else None
