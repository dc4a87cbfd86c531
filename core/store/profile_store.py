"""HDF5 profile store: measured or modelled times of one GPU kind (schema version 2).

One file per device kind holds the device's peak FLOP/s, HBM size and bandwidth,
how the numbers were obtained (provenance), per-operation timing tables keyed by
the shapes that change them, and collective-communication curves (bytes ->
seconds) per group size and, for a calibrated store, the out-of-sample
residuals of its calibration runs (the error band, :mod:`core.store.interval`). The file
layout is specified in ``docs/profile_store.md``.

:meth:`ProfileStore.open` reads everything into memory and closes the file, so a
store never holds an HDF5 handle; :meth:`ProfileStore.save` writes a temporary
file in the target folder and renames it into place. Lookups interpolate in
log-log space (vTrain, Bang et al. MICRO 2024, profiles each operation once per
shape and reuses the times) and say when they extrapolate.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.store.residuals import ResidualTable
from core.util.atomic import atomic_target

if TYPE_CHECKING:  # annotations only: h5py is loaded through _h5py(), plugins switched off
    import h5py

__all__ = ["IMAGE_VERSION", "image_cache_dir", "image_name", "SHIPPED_IMAGES", "SCHEMA_VERSION", "COLLECTIVE_KINDS", "PROVENANCE_METHODS", "ProfileStoreError",
           "Lookup", "PeakFlops", "ProfileStore", "ALLOWED_FILTERS", "CURVE_DIP_TOLERANCE",
           "PROVENANCE_FLAGS"]

SCHEMA_VERSION = 2
#: Collective kinds a store can hold curves for.
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
#: Allowed values of ``provenance["method"]``.
PROVENANCE_METHODS = ("measured", "analytic", "calibrated")

_ROOT_TYPE = "vtrain-profile-store"
_ENC_TYPE, _ENC_VERSION = "encoding-type", "encoding-version"
_JSON_KEYS = "json-keys"  # attribute listing the dict-group attributes that hold JSON text
_RESERVED = (_ENC_TYPE, _ENC_VERSION, _JSON_KEYS)
# encoding-type -> newest encoding-version this build reads
_GROUP_VERSIONS = {_ROOT_TYPE: SCHEMA_VERSION, "dict": 1, "op-table": 1, "collective-curve": 1,
                   "residual-table": 1}


#: The one message for a path that is not a readable store (missing, unreadable, not a
#: regular file, not HDF5, not a vTrain store): errors must not tell whether a path exists.
NOT_A_STORE = "not a readable vTrain profile store"
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Most objects (groups and datasets), deepest path and largest dataset a store may have
#: (the shipped stores have about 100 objects, depth 4 and datasets of a few hundred rows).
MAX_OBJECTS = 100_000
MAX_DEPTH = 8
MAX_DATASET_ELEMENTS = 10_000_000
#: Filters a store's datasets may use, by HDF5 filter id: the ones h5py always has (HDF5's
#: deflate (gzip), shuffle and Fletcher-32, and h5py's own LZF, registered as 32000). Any
#: other id would make HDF5 look for a plugin library when a chunk is read.
ALLOWED_FILTERS = {1: "gzip", 2: "shuffle", 3: "fletcher32", 32000: "lzf"}
#: How far a collective curve's time may fall below the largest time at a smaller size, as a
#: share of it: moving more bytes cannot take less time, so a curve rises with the size, but a
#: measured one dips by noise (4.2 % in the shipped A100 curves, more in timings on a loaded
#: machine) and where NCCL switches protocol or algorithm (LL, LL128, Simple; ring, tree).
#: A quarter allows those and refuses a curve that falls (a reversed or corrupted one).
CURVE_DIP_TOLERANCE = 0.25
#: Bounds of a store's numbers: (low, high, low inclusive). Peak FLOP/s, memory size and
#: bandwidth of any accelerator lie far inside them; an efficiency is the share of a peak
#: (FLOP/s, HBM or link bandwidth) that a kernel or transfer sustains: at most 1 (nothing
#: runs faster than its peak) and at least 0.01 (no working GEMM, kernel or link sustains
#: under 1 % of its peak on the large operations of a training step; the calibration's own
#: bounds start at 5 %, and a smaller number, such as 5e-324, only divides times into
#: overflow); the FP8 GEMM efficiency, a share of the BF16 curve's, 0.01 to 2 (FP8's peak is
#: twice BF16's); an overhead is a host time (0 to 10 s); a measured time lies between a
#: picosecond and about 11 days; a collective buffer is at most 1 PiB; a key of an op table
#: is a count, size or flag (0 to 2^53).
STORE_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "peak_flops": (1e6, 1e19, True),
    "memory_bytes": (2.0**20, 2.0**50, True),
    "memory_bandwidth_bytes_per_s": (1e6, 1e16, True),
    "efficiency": (0.01, 1.0, True),
    "overhead_s": (0.0, 10.0, True),
    "gemm_half_size": (0.0, 1e7, False),
    "relative_efficiency": (0.01, 2.0, True),
    "time_s": (1e-12, 1e6, True),
    "nbytes": (1.0, 2.0**50, True),
    "group_size": (2, 2**20, True),
    "key": (0.0, 2.0**53, True),
}
#: Which bound each op-model parameter has; other parameters must be finite.
OP_MODEL_BOUND = {
    "gemm_efficiency_max": "efficiency", "memory_efficiency": "efficiency",
    "inter_node_efficiency": "efficiency", "p2p_efficiency": "efficiency",
    "all_to_all_efficiency": "efficiency", "flex_all_to_all_efficiency": "efficiency",
    "peak_fraction": "efficiency",
    "fp8_gemm_efficiency": "relative_efficiency",
    "gemm_half_size": "gemm_half_size",
    "kernel_overhead_s": "overhead_s", "op_overhead_s": "overhead_s",
    "kernel_launch_s": "overhead_s", "iteration_overhead_s": "overhead_s",
    "collective_overhead_s": "overhead_s", "p2p_overhead_s": "overhead_s",
}


#: First bytes of :meth:`ProfileStore.to_image`; its version (a change of layout invalidates
#: the cached images, which are keyed by it too).
IMAGE_MAGIC = b"vtrain-store-image\n"
IMAGE_VERSION = 1
#: Most parsed-store images kept in the cache folder (:func:`image_cache_dir`); older ones
#: are removed.
IMAGE_CACHE_SIZE = 32


def image_cache_dir() -> Path | None:
    """Folder of the cached images of parsed stores: ``$VTRAIN_CACHE_DIR/profile-stores``, else
    ``$XDG_CACHE_HOME/vtrain/profile-stores`` or ``~/.cache/vtrain/profile-stores``; None
    when ``VTRAIN_CACHE_DIR`` is set but empty (no cache).

    Reading an HDF5 store costs about 0.1 s (h5py's import and its per-object overhead);
    a cached image, keyed by the SHA-256 of the store file's bytes (so any change of the
    file is a new key), is read in a few milliseconds and checked as a store is.
    """
    env = os.environ.get("VTRAIN_CACHE_DIR")
    if env is not None:
        return Path(os.path.expanduser(env)) / "profile-stores" if env.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vtrain" / "profile-stores"


#: Images of the shipped stores (``profiles/*.h5``), named like the cache's: the first run
#: after installing needs no HDF5 either (``scripts/store_images.py`` writes them; a test
#: checks that they match the stores).
SHIPPED_IMAGES = Path(__file__).resolve().parents[2] / "profiles" / "images"


def image_name(digest: str) -> str:
    """File name of the image of a store file whose bytes have SHA-256 ``digest`` (hex)."""
    return f"{digest}.v{IMAGE_VERSION}.img"


def _image_path(digest: str) -> Path | None:
    folder = image_cache_dir()
    return None if folder is None else folder / image_name(digest)


def _cached_image(digest: str) -> "ProfileStore | None":
    """The store of the cached (else shipped) image for a store file of SHA-256 ``digest``;
    None when the cache is off, there is none or it cannot be used (unreadable, of another
    version, invalid: it is then ignored, and the caller parses the store and rewrites it)."""
    path = _image_path(digest)
    if path is None:
        return None
    for candidate in (path, SHIPPED_IMAGES / image_name(digest)):
        try:
            with open(candidate, "rb") as fh:
                data = fh.read(MAX_IMAGE_BYTES + 1)
            if len(data) <= MAX_IMAGE_BYTES:
                return ProfileStore.from_image(data)
        except Exception:  # noqa: BLE001 -- a cache: any fault means "parse the store"
            continue
    return None


def _cache_image(digest: str, store: "ProfileStore") -> None:
    """Write ``store``'s image for ``digest`` atomically (best effort: a folder that cannot be
    written means no cache); keep the newest :data:`IMAGE_CACHE_SIZE` images."""
    path = _image_path(digest)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_target(path) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(store.to_image())
        images = sorted(path.parent.glob("*.img"), key=lambda q: q.stat().st_mtime)
        for old in images[:-IMAGE_CACHE_SIZE]:
            old.unlink()
    except (OSError, ValueError, TypeError):
        pass


#: Largest cached image read (a store file is at most ``MAX_BYTES["store"]``; its image is smaller).
MAX_IMAGE_BYTES = 512 * 2**20


class ProfileStoreError(ValueError):
    """A profile store file cannot be read; the message names the file and the problem."""


def _is_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (python or numpy), not a bool or a string."""
    return (isinstance(value, (int, float, np.integer, np.floating))
            and not isinstance(value, (bool, np.bool_)))


def _number(what: str, value: Any) -> float:
    """``value`` as a float; ValueError naming ``what`` unless it is an int or a float (a
    string such as ``"1.0"`` or a boolean is a value of the wrong type, not a number)."""
    if not _is_number(value):
        raise ValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.60}")
    return float(value)


def _in_bound(what: str, value: Any, bound: str) -> float:
    """``value`` as a float; ValueError naming ``what`` unless a number (:func:`_number`),
    finite and inside ``STORE_BOUNDS[bound]``."""
    lo, hi, lo_in = STORE_BOUNDS[bound]
    v = _number(what, value)
    if not math.isfinite(v) or v > hi or v < lo or (v == lo and not lo_in):
        low = f"{'at least' if lo_in else 'above'} {lo:g}"
        raise ValueError(f"{what} = {v!r} must be finite, {low} and at most {hi:g}")
    return v


#: Provenance keys that are flags (true or false); ``peak_fraction_fitted`` is read by
#: :func:`core.store.gpu_spec.fits_peak_fraction` down the chain of ``base_provenance``.
PROVENANCE_FLAGS = ("peak_fraction_fitted",)


def _check_flags(provenance: dict[str, Any]) -> None:
    """ValueError naming the key unless every :data:`PROVENANCE_FLAGS` entry of
    ``provenance`` and of its chain of ``base_provenance`` dicts is a boolean (the string
    ``"false"`` would read as true)."""
    prov, where = provenance, "provenance"
    for _ in range(64):
        if not isinstance(prov, dict):
            return
        for flag in PROVENANCE_FLAGS:
            if flag in prov and not isinstance(prov[flag], bool):
                raise ValueError(f"{where}[{flag!r}] must be true or false, got "
                                 f"{type(prov[flag]).__name__} {prov[flag]!r:.60}")
        prov, where = prov.get("base_provenance"), f"{where}['base_provenance']"


@dataclass(frozen=True)
class Lookup:
    """Result of a time lookup.

    Attributes
    ----------
    time_s : float
        Predicted time in seconds.
    extrapolated : bool
        True outside the tabulated range or when a fitted model was used.
    source : str
        ``"table"`` (exact or interpolated), ``"extrapolated"`` (log-log line
        extended past the table) or ``"fit"`` (alpha-beta or ring model).
    """

    time_s: float
    extrapolated: bool
    source: str


def _steps_factor(kind: str, n: np.ndarray | int) -> tuple[Any, Any]:
    """Latency steps and bus-bandwidth factor of a ring collective (nccl-tests PERFORMANCE.md)."""
    n = np.asarray(n, dtype=np.float64)
    if kind == "all_reduce":
        return 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n
    if kind in ("all_gather", "reduce_scatter"):
        return n - 1.0, (n - 1.0) / n
    return np.ones_like(n), np.ones_like(n)  # send_recv


def _fit_linear(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Fit ``t ~ alpha*a + beta*b`` by relative least squares with alpha >= 0, beta > 0.

    Residuals are divided by ``t`` so that small and large sizes weigh alike.
    If the unconstrained fit breaks a bound, alpha is fixed at 0 (beta then is
    positive for positive data).
    """
    w = 1.0 / t
    if len(t) >= 2:
        (alpha, beta), *_ = np.linalg.lstsq(np.column_stack([a * w, b * w]), t * w, rcond=None)
        if alpha >= 0.0 and beta > 0.0:
            return float(alpha), float(beta)
    bw = b * w
    return 0.0, float(np.dot(bw, t * w) / np.dot(bw, bw))


def _loglog(x: float, xs: np.ndarray, ts: np.ndarray) -> tuple[float, bool]:
    """Time at ``x`` on the log-log polyline through ``(xs, ts)`` (sorted); flag if outside."""
    if xs[0] <= x <= xs[-1]:
        i = int(np.searchsorted(xs, x))
        if xs[i] == x:
            return float(ts[i]), False
        return float(np.exp(np.interp(math.log(x), np.log(xs), np.log(ts)))), False
    if len(xs) == 1:
        return float(ts[0] * x / xs[0]), True
    j = 0 if x < xs[0] else len(xs) - 2
    slope = math.log(ts[j + 1] / ts[j]) / math.log(xs[j + 1] / xs[j])
    k = j if x < xs[0] else j + 1
    return float(ts[k] * math.exp(slope * math.log(x / xs[k]))), True


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _as_column(name: str, values: Any, n: int) -> np.ndarray:
    """Key column as int64 or str array; ValueError for other types or lengths."""
    arr = np.asarray(values)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"key column {name!r} must be 1-D of length {n} (like time_s), "
                         f"got shape {arr.shape}")
    lo, hi, _ = STORE_BOUNDS["key"]
    if arr.dtype.kind in "iuf" and not (np.all(np.isfinite(arr)) and np.all(arr >= lo)
                                        and np.all(arr <= hi)):
        raise ValueError(f"key column {name!r} must hold finite values from 0 to 2^53")
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    if arr.dtype.kind == "U" or (arr.dtype.kind == "O"
                                 and all(issubclass(t, str) for t in set(map(type, arr.tolist())))):
        return arr.astype(str)
    raise ValueError(f"key column {name!r} must hold integers or strings, got dtype {arr.dtype}")


def _norm(value: Any) -> Any:
    """Key value as a hashable python int/str (floats with integral value become ints)."""
    if isinstance(value, (str, np.str_)):
        return str(value)
    f = float(value)
    return int(f) if f.is_integer() else f


class _OpTable:
    """One op's rows plus, per non-axis key tuple, the sorted axis and time arrays.

    ``groups`` maps the tuple of non-axis key values (python ints/strs, in
    ``others`` order) to ``(axis values as float64, times)``, both sorted by
    the axis value; built with one lexsort, no per-row python loop.

    Raises
    ------
    ValueError
        Two rows share all key values.
    """

    def __init__(self, keys: dict[str, np.ndarray], time_s: np.ndarray, axis: str):
        self.keys, self.time_s, self.axis = keys, time_s, axis
        self.others = tuple(c for c in keys if c != axis)
        n = len(time_s)
        x = keys[axis].astype(np.float64)
        codes = [np.unique(keys[c], return_inverse=True)[1].reshape(-1) for c in self.others]
        order = np.lexsort((x, *codes[::-1]))  # by the other keys (first primary), then the axis
        new_group = np.zeros(n, bool)
        new_group[0] = True
        for code in codes:
            c = code[order]
            new_group[1:] |= c[1:] != c[:-1]
        xs, ts = x[order], time_s[order].astype(np.float64)
        xs.flags.writeable = ts.flags.writeable = False
        dup = np.flatnonzero(~new_group[1:] & (xs[1:] == xs[:-1]))
        if dup.size:
            row = int(order[dup[0]])
            raise ValueError(f"duplicate rows for {dict(zip(self.others, (keys[c][row].item() for c in self.others)))} "
                             f"at {axis}={xs[dup[0]]:g}")
        starts = np.flatnonzero(new_group)
        first_rows = order[starts]
        # each group's key as a tuple of python ints / strs (tolist), built column-wise
        group_keys = (zip(*[keys[c][first_rows].tolist() for c in self.others]) if self.others
                      else [()] * starts.size)
        bounds = starts.tolist() + [n]
        self.groups: dict[tuple, tuple[np.ndarray, np.ndarray]] = {
            k: (xs[a:b], ts[a:b]) for k, a, b in zip(group_keys, bounds, bounds[1:])}


class PeakFlops(dict):
    """``dtype -> FLOP/s`` of one device; a dtype it lacks raises a ``KeyError`` whose
    message names the device, the dtype and the dtypes it has (so a plan in a precision
    the device has no peak for is refused by name wherever the peak is looked up)."""

    def __init__(self, values: dict[str, float], device_name: str = "device"):
        super().__init__(values)
        self.device_name = device_name

    def __missing__(self, dtype: str) -> float:
        raise KeyError(f"profile of {self.device_name} has no peak FLOP/s for dtype {dtype!r} "
                       f"(it has {', '.join(self) or 'none'})")


class ProfileStore:
    """Timing profile of one GPU kind, held in memory.

    Parameters
    ----------
    device_name : str
        Device kind, e.g. ``"A100-SXM4-80GB"``.
    peak_flops : dict[str, float]
        Dense peak throughput in FLOP/s per dtype (``"fp32"``, ``"tf32"``, ``"bf16"``, ``"fp16"``).
    memory_bytes : float
        HBM capacity in bytes.
    memory_bandwidth_bytes_per_s : float
        HBM bandwidth in bytes/s.
    provenance : dict[str, Any]
        How the numbers were obtained: ``"method"`` in :data:`PROVENANCE_METHODS`
        plus free keys (``date``, ``torch_version``, ``cuda_version``, ``source``,
        ``parameters`` ...). Nested values are stored as JSON.
    op_model : dict[str, float], optional
        Free parameters of the analytic op model (e.g. ``gemm_efficiency_max``).

    Attributes
    ----------
    residuals : core.store.interval.ResidualTable or None
        Out-of-sample predictions of the runs the store was calibrated on
        (schema 2, optional); they give every prediction its error band. None
        for analytic and measured stores.

    Raises
    ------
    ValueError
        Unknown provenance method; a peak FLOP/s, memory figure or op-model parameter
        that is not a number (a string or a boolean), not finite or outside
        :data:`STORE_BOUNDS` (an efficiency 0.01 to 1, the FP8 GEMM efficiency 0.01 to 2,
        an overhead 0 to 10 s); a provenance flag (:data:`PROVENANCE_FLAGS`) that is not
        a boolean.

    Notes
    -----
    Construction performs no I/O; :attr:`path` is set by :meth:`open` and :meth:`save`.
    """

    def __init__(self, device_name: str, peak_flops: dict[str, float], memory_bytes: float,
                 memory_bandwidth_bytes_per_s: float, provenance: dict[str, Any],
                 op_model: dict[str, float] | None = None):
        if provenance.get("method") not in PROVENANCE_METHODS:
            raise ValueError(f"provenance['method'] must be one of {PROVENANCE_METHODS}, "
                             f"got {provenance.get('method')!r}")
        self.device_name = str(device_name)
        self.peak_flops = PeakFlops({str(k): _in_bound(f"peak_flops[{k!r}]", v, "peak_flops")
                                     for k, v in peak_flops.items()}, str(device_name))
        self.memory_bytes = _in_bound("memory_bytes", memory_bytes, "memory_bytes")
        self.memory_bandwidth_bytes_per_s = _in_bound(
            "memory_bandwidth_bytes_per_s", memory_bandwidth_bytes_per_s, "memory_bandwidth_bytes_per_s")
        _check_flags(provenance)
        self.provenance = dict(provenance)
        self.op_model = {}
        for k, v in (op_model or {}).items():
            bound = OP_MODEL_BOUND.get(str(k))
            if bound is None:
                v = _number(f"op_model[{k!r}]", v)
                if not math.isfinite(v):
                    raise ValueError(f"op_model[{k!r}] = {v!r} must be finite")
            self.op_model[str(k)] = _in_bound(f"op_model[{k!r}]", v, bound) if bound else v
        self.path: Path | None = None
        self._ops: dict[str, _OpTable] = {}
        self._curves: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
        self._fits: dict[tuple[str, int | None], tuple[float, float]] = {}
        self.residuals = None  # core.store.interval.ResidualTable or None

    # ------------------------------------------------------------------ op tables
    def add_op_table(self, op: str, keys: dict[str, np.ndarray], time_s: np.ndarray,
                     axis: str) -> None:
        """Add (or replace) the timing table of ``op``.

        Parameters
        ----------
        op : str
            Operation name (no ``/``).
        keys : dict[str, array_like]
            Key column name -> values, shape (n_rows,): integers from 0 to 2^53 (``b, s,
            h, a, t``...) or strings (``dtype``). Integral floats are accepted as integers
            here (a store file must hold integer datasets).
        time_s : array_like
            Time of each row in seconds, shape (n_rows,), positive and finite.
        axis : str
            Key column interpolated over (positive integers), e.g. ``"b"``.

        Raises
        ------
        ValueError
            Bad name, unequal lengths, wrong column types, non-positive or
            non-finite times or axis values, ``axis`` not a column, duplicate rows.
        """
        if not op or "/" in op or op in (".", ".."):
            raise ValueError(f"invalid op name {op!r}")
        t = np.asarray(time_s, dtype=np.float64)
        if t.ndim != 1 or len(t) == 0:
            raise ValueError(f"op {op!r}: time_s must be 1-D and non-empty, got shape {t.shape}")
        lo, hi, _ = STORE_BOUNDS["time_s"]
        if not np.all(np.isfinite(t) & (t >= lo) & (t <= hi)):
            raise ValueError(f"op {op!r}: time_s must be positive and finite, from {lo:g} to {hi:g} s")
        if axis not in keys:
            raise ValueError(f"op {op!r}: axis {axis!r} is not a key column ({list(keys)})")
        cols = {}
        for name, values in keys.items():
            if not name or "/" in name or name == "time_s":
                raise ValueError(f"op {op!r}: invalid key column name {name!r}")
            cols[name] = _readonly(_as_column(name, values, len(t)))
        if cols[axis].dtype.kind != "i" or np.any(cols[axis] <= 0):
            raise ValueError(f"op {op!r}: axis column {axis!r} must hold positive integers")
        try:
            self._ops[op] = _OpTable(cols, _readonly(t.copy()), axis)
        except ValueError as exc:
            raise ValueError(f"op {op!r}: {exc}") from None

    def op_names(self) -> list[str]:
        """Names of the ops with a table, in insertion order."""
        return list(self._ops)

    def op_table(self, op: str) -> tuple[dict[str, np.ndarray], np.ndarray, str]:
        """``(keys, time_s, axis)`` of ``op`` as added (read-only arrays, shape (n_rows,)).

        Raises ``KeyError`` if ``op`` has no table.
        """
        if op not in self._ops:
            raise KeyError(f"no table for op {op!r}; ops: {self.op_names()}")
        tab = self._ops[op]
        return dict(tab.keys), tab.time_s, tab.axis

    def op_time(self, op: str, key: dict[str, int | str]) -> Lookup | None:
        """Time of ``op`` at ``key``, interpolated in log-log space along the table's axis.

        Only rows whose non-axis key columns all equal ``key``'s values are used.
        Outside their axis range the log-log line through the two nearest points
        is extended (proportional scaling if there is one point).

        Parameters
        ----------
        op : str
            Operation name.
        key : dict[str, int | str]
            A value for every key column of the table; extra entries are ignored.

        Returns
        -------
        Lookup or None
            ``None`` if ``op`` is unknown or no row matches the non-axis keys
            (the caller then uses its analytic model).

        Raises
        ------
        KeyError
            ``key`` lacks a key column of the table.
        ValueError
            The axis value is not positive.
        """
        tab = self._ops.get(op)
        if tab is None:
            return None
        missing = [c for c in tab.keys if c not in key]
        if missing:
            raise KeyError(f"op {op!r} lookup needs key columns {missing} "
                           f"(table keys: {list(tab.keys)})")
        group = tab.groups.get(tuple(_norm(key[c]) for c in tab.others))
        if group is None:
            return None
        x = float(key[tab.axis])
        if not x > 0:
            raise ValueError(f"op {op!r}: axis {tab.axis}={key[tab.axis]!r} must be positive")
        time, outside = _loglog(x, *group)
        return Lookup(time, outside, "extrapolated" if outside else "table")

    # --------------------------------------------------------------- collectives
    def add_collective(self, kind: str, group_size: int, nbytes: np.ndarray,
                       time_s: np.ndarray) -> None:
        """Add (or replace) the curve of ``kind`` over ``group_size`` ranks.

        Parameters
        ----------
        kind : str
            One of :data:`COLLECTIVE_KINDS`.
        group_size : int
            Number of ranks (>= 2).
        nbytes : array_like
            Buffer sizes in bytes as nccl-tests reports them, shape (n_points,),
            positive and distinct (sorted here).
        time_s : array_like
            Time per size in seconds, shape (n_points,), positive and finite.

        Raises
        ------
        ValueError
            Unknown kind, group size < 2, bad shapes, non-positive or repeated sizes, bad times,
            or a time more than :data:`CURVE_DIP_TOLERANCE` below the largest time at a
            smaller size (time must not fall as the size grows).
        """
        if kind not in COLLECTIVE_KINDS:
            raise ValueError(f"unknown collective kind {kind!r}; expected one of {COLLECTIVE_KINDS}")
        glo, ghi, _ = STORE_BOUNDS["group_size"]
        if isinstance(group_size, bool) or int(group_size) != group_size or not glo <= group_size <= ghi:
            raise ValueError(f"{kind}: group_size must be an integer from {glo} to {ghi:,}, "
                             f"got {group_size!r}")
        x = np.asarray(nbytes, dtype=np.float64)
        t = np.asarray(time_s, dtype=np.float64)
        if x.ndim != 1 or x.shape != t.shape or len(x) == 0:
            raise ValueError(f"{kind}/{group_size}: nbytes and time_s must be 1-D, non-empty "
                             f"and of equal length, got {x.shape} and {t.shape}")
        order = np.argsort(x, kind="stable")
        x, t = x[order], t[order]
        blo, bhi, _ = STORE_BOUNDS["nbytes"]
        if not (np.all(np.isfinite(x)) and x[0] >= blo and x[-1] <= bhi and np.all(np.diff(x) > 0)):
            raise ValueError(f"{kind}/{group_size}: nbytes must be positive, finite and distinct, from "
                             f"{blo:g} to {bhi:g}")
        tlo, thi, _ = STORE_BOUNDS["time_s"]
        if not np.all(np.isfinite(t) & (t >= tlo) & (t <= thi)):
            raise ValueError(f"{kind}/{group_size}: time_s must be positive and finite, from {tlo:g} to {thi:g} s")
        floor = np.maximum.accumulate(t) * (1.0 - CURVE_DIP_TOLERANCE)
        if np.any(t < floor):
            i = int(np.flatnonzero(t < floor)[0])
            raise ValueError(f"{kind}/{group_size}: time_s falls as the size grows ({t[i]:.4g} s at "
                             f"{x[i]:.6g} bytes, more than {CURVE_DIP_TOLERANCE:.0%} below "
                             f"{float(np.max(t[:i])):.4g} s at a smaller size)")
        self._curves.setdefault(kind, {})[int(group_size)] = (_readonly(x), _readonly(t))
        self._fits = {k: v for k, v in self._fits.items() if k[0] != kind}

    def collective_kinds(self) -> dict[str, list[int]]:
        """Kind -> sorted group sizes that have a curve."""
        return {k: sorted(c) for k, c in self._curves.items() if c}

    def collective_curve(self, kind: str, group_size: int) -> tuple[np.ndarray, np.ndarray]:
        """``(nbytes, time_s)`` of one curve, sorted by size, read-only, shape (n_points,).

        Raises ``KeyError`` if there is no such curve.
        """
        try:
            return self._curves[kind][int(group_size)]
        except KeyError:
            raise KeyError(f"no {kind} curve for group size {group_size}; curves: "
                           f"{self.collective_kinds()}") from None

    def collective_time(self, kind: str, group_size: int, nbytes: float) -> Lookup:
        """Time of one collective of ``nbytes`` bytes over ``group_size`` ranks.

        Inside a measured curve's byte range: log-log interpolation (``"table"``).
        Outside it: alpha-beta fit ``time = alpha + nbytes * beta`` to that curve.
        No curve for the group size: the kind's ring model (:meth:`ring_model`).
        Both fits give ``extrapolated=True, source="fit"``.

        Parameters
        ----------
        kind : str
            One of :data:`COLLECTIVE_KINDS`.
        group_size : int
            Number of ranks; 1 costs nothing.
        nbytes : float
            Total buffer size in bytes (nccl-tests convention); 0 costs nothing.

        Raises
        ------
        KeyError
            ``kind`` is unknown or has no curves at all.
        ValueError
            ``nbytes`` is negative or ``group_size`` < 1.
        """
        if kind not in COLLECTIVE_KINDS:
            raise KeyError(f"unknown collective kind {kind!r}; expected one of {COLLECTIVE_KINDS}")
        if nbytes < 0 or group_size < 1:
            raise ValueError(f"{kind}: need nbytes >= 0 and group_size >= 1, "
                             f"got {nbytes!r} and {group_size!r}")
        if group_size == 1 or nbytes == 0:
            return Lookup(0.0, False, "table")
        curve = self._curves.get(kind, {}).get(int(group_size))
        if curve is None:
            alpha, bus_bw = self.ring_model(kind)
            steps, factor = _steps_factor(kind, group_size)
            return Lookup(float(alpha * steps + nbytes * factor / bus_bw), True, "fit")
        xs, ts = curve
        if xs[0] <= nbytes <= xs[-1]:
            return Lookup(_loglog(float(nbytes), xs, ts)[0], False, "table")
        fit_key = (kind, int(group_size))
        if fit_key not in self._fits:
            self._fits[fit_key] = _fit_linear(np.ones_like(xs), xs, ts)
        alpha, beta = self._fits[fit_key]
        return Lookup(alpha + float(nbytes) * beta, True, "fit")

    def ring_model(self, kind: str) -> tuple[float, float]:
        """Ring model of ``kind`` fitted across all its curves.

        ``time = alpha * steps(n) + nbytes * factor(n) / bus_bandwidth`` with
        steps 2(n-1), (n-1), (n-1), 1 and factor 2(n-1)/n, (n-1)/n, (n-1)/n, 1 for
        all_reduce, all_gather, reduce_scatter, send_recv (nccl-tests bus-bandwidth
        conventions, PERFORMANCE.md). Fitted by relative least squares, alpha >= 0.

        Returns
        -------
        alpha_s : float
            Per-step latency in seconds.
        bus_bandwidth_bytes_per_s : float
            Bus bandwidth in bytes/s.

        Raises
        ------
        KeyError
            ``kind`` has no curves.
        """
        curves = self._curves.get(kind)
        if not curves:
            raise KeyError(f"no {kind!r} curves in profile store {self.device_name!r}; "
                           f"curves: {self.collective_kinds()}")
        if (kind, None) not in self._fits:
            n = np.concatenate([np.full(len(c[0]), g, dtype=np.float64) for g, c in curves.items()])
            x = np.concatenate([c[0] for c in curves.values()])
            t = np.concatenate([c[1] for c in curves.values()])
            steps, factor = _steps_factor(kind, n)
            alpha, inv_bw = _fit_linear(steps, x * factor, t)
            self._fits[(kind, None)] = (alpha, 1.0 / inv_bw)
        return self._fits[(kind, None)]

    # --------------------------------------------------------------------- files
    def summary(self) -> str:
        """One line: device, method, date and source."""
        p = self.provenance
        source = p.get("source") or (self.path.name if self.path else "unsaved")
        return f"{self.device_name} — {p['method']}, {p.get('date', 'undated')}, source: {source}"

    def save(self, path: str | Path) -> None:
        """Write the store to ``path`` atomically (temporary file in the same folder, then rename).

        Sets :attr:`path`. Raises ``OSError`` if the folder is not writable; on any
        error the previous file at ``path`` is left as it was.
        """
        path = Path(path)
        image = self.to_bytes()
        with atomic_target(path) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(image)
                fh.flush()
                os.fsync(fh.fileno())
        self.path = path

    def to_bytes(self) -> bytes:
        """The store as the bytes of an HDF5 file (built in memory).

        Saving writes these bytes with plain file I/O: the HDF5 library never writes to
        the disk, so a full disk or a failed write is an ``OSError`` naming the file and
        never leaves the library in a state that crashes the process later.
        """
        h5py = _h5py()  # on first use only: a cached store needs no HDF5

        buf = io.BytesIO()
        with h5py.File(buf, "w", track_order=True) as f:
            self._write(f)
        return buf.getvalue()

    def _write(self, f: h5py.File) -> None:
        h5py = _h5py()
        # the oldest version that holds everything: a store without residuals is a version-1 file
        version = SCHEMA_VERSION if self.residuals is not None else 1
        f.attrs.update({_ENC_TYPE: _ROOT_TYPE, _ENC_VERSION: np.int64(version),
                        "device_name": self.device_name,
                        "memory_bytes": self.memory_bytes,
                        "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s})
        for name, d in (("peak_flops", self.peak_flops), ("provenance", self.provenance),
                        ("op_model", self.op_model)):
            _write_dict(f.create_group(name, track_order=True), d)
        ops = _write_dict(f.create_group("ops", track_order=True), {})
        for op, tab in self._ops.items():
            g = ops.create_group(op, track_order=True)
            g.attrs.update({_ENC_TYPE: "op-table", _ENC_VERSION: np.int64(1), "axis": tab.axis})
            for c, v in tab.keys.items():
                if v.dtype.kind == "U":
                    g.create_dataset(c, data=v.astype(object), dtype=h5py.string_dtype("utf-8"))
                else:
                    g.create_dataset(c, data=v)
            g.create_dataset("time_s", data=tab.time_s)
        coll = _write_dict(f.create_group("collectives", track_order=True), {})
        for kind, curves in self._curves.items():
            kg = _write_dict(coll.create_group(kind, track_order=True), {})
            for n, (x, t) in sorted(curves.items()):
                g = kg.create_group(str(n))
                g.attrs.update({_ENC_TYPE: "collective-curve", _ENC_VERSION: np.int64(1)})
                g.create_dataset("bytes", data=x)
                g.create_dataset("time_s", data=t)
        if self.residuals is not None:
            _write_residuals(f.create_group("residuals", track_order=True), self.residuals)

    @classmethod
    def open(cls, path: str | Path) -> "ProfileStore":
        """Read a store file completely into memory and close it.

        The file is read as bytes (a regular file of at most ``MAX_BYTES["store"]``,
        :mod:`core.util.inputs`) and parsed from memory; before any value is used, every
        link and dataset is audited (:func:`_audit`): external and soft links, external
        raw storage and virtual datasets are refused, so a store never makes the tool read
        another file; a filter other than :data:`ALLOWED_FILTERS` is refused before any
        chunk is read, and HDF5's plugin folders are emptied (:func:`_h5py`), so a store
        never makes HDF5 load a library; datasets must have the expected dtype and a
        bounded size; every stored value must have its type (numbers, not strings or
        booleans; float times; integer keys; boolean flags), every number must be finite
        and inside :data:`STORE_BOUNDS`, and collective curves must not fall as the size
        grows (:data:`CURVE_DIP_TOLERANCE`).

        A path that is missing, unreadable, not a regular file, not HDF5 or not a vTrain
        store gives one and the same message, so an error does not tell whether an
        arbitrary path exists.

        Raises
        ------
        ProfileStoreError
            Not a readable store (see above), or a store that is corrupted, of a newer
            schema version, or holds invalid values; the message names the file, the
            part and the rule.
        """
        path = Path(path)
        data = _read_store_bytes(path)
        digest = hashlib.sha256(data).hexdigest()
        store = _cached_image(digest)
        if store is not None:
            store.path = path
            return store
        store = cls._parse(path, data)
        _cache_image(digest, store)
        store.path = path
        return store

    @classmethod
    def _parse(cls, path: Path, data: bytes) -> "ProfileStore":
        """The store of the HDF5 file bytes ``data`` read from ``path`` (audited, checked)."""
        h5py = _h5py()  # on first use only: a cached store needs no HDF5

        try:
            with h5py.File(io.BytesIO(data), "r") as f:
                if f.attrs.get(_ENC_TYPE) != _ROOT_TYPE:
                    raise ProfileStoreError(f"{path}: {NOT_A_STORE}")
                _audit(f)
                store = cls._read(f)
        except ProfileStoreError as exc:
            raise ProfileStoreError(str(exc) if str(exc).startswith(str(path))
                                    else f"{path}: {exc}") from None
        except (OSError, KeyError, ValueError, TypeError, RuntimeError, AttributeError,
                IndexError, OverflowError, RecursionError) as exc:
            raise ProfileStoreError(f"{path}: corrupted profile store: "
                                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                    ) from None
        return store

    # ------------------------------------------------------------ memory image
    def to_image(self) -> bytes:
        """The store as a compact image (no HDF5): what :meth:`from_image` reads back.

        Layout: :data:`IMAGE_MAGIC`, the length of a JSON header (8 bytes, little
        endian), the header (UTF-8; scalars, dicts, string key columns and the layout
        of the arrays) and the arrays' raw little-endian bytes. It holds everything
        the store holds, in the same order; no pickle. Used for the on-disk cache of
        parsed stores (:meth:`open`) and to send a store to sweep workers.
        """
        blobs: list[bytes] = []
        offset = 0

        def put(a: np.ndarray) -> dict[str, Any]:
            nonlocal offset
            if a.dtype.kind in "US":
                values, codes = np.unique(a, return_inverse=True)
                return {"str": values.tolist(), "codes": put(codes.reshape(-1).astype("<i8"))}
            a = np.ascontiguousarray(a, "<i8" if a.dtype.kind in "iub" else "<f8")
            ref = {"dtype": a.dtype.str, "offset": offset, "count": int(a.size)}
            blobs.append(a.tobytes())
            offset += a.nbytes
            return ref

        header: dict[str, Any] = {
            "version": IMAGE_VERSION, "device_name": self.device_name,
            "peak_flops": dict(self.peak_flops), "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "provenance": self.provenance, "op_model": self.op_model,
            "ops": [{"op": op, "axis": tab.axis, "keys": [[c, put(v)] for c, v in tab.keys.items()],
                     "time_s": put(tab.time_s)} for op, tab in self._ops.items()],
            "collectives": [{"kind": kind, "curves": [[n, put(x), put(t)] for n, (x, t) in c.items()]}
                            for kind, c in self._curves.items()],
            "residuals": None if self.residuals is None else {
                "procedure": str(self.residuals.procedure),
                "columns": [[c, put(np.asarray(getattr(self.residuals, c)))]
                            for c in self.residuals.COLUMNS]},
        }
        text = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
        return IMAGE_MAGIC + len(text).to_bytes(8, "little") + text + b"".join(blobs)

    @classmethod
    def from_image(cls, data: bytes) -> "ProfileStore":
        """Inverse of :meth:`to_image`; every value goes through the same checks as a store
        read from HDF5 (constructor, :meth:`add_op_table`, :meth:`add_collective`).

        Raises
        ------
        ValueError
            Not an image of this version, truncated, or holding invalid values.
        """
        if not data.startswith(IMAGE_MAGIC):
            raise ValueError("not a profile store image")
        start = len(IMAGE_MAGIC) + 8
        size = int.from_bytes(data[len(IMAGE_MAGIC):start], "little")
        try:
            header = json.loads(data[start:start + size].decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"profile store image header: {exc}") from None
        if not isinstance(header, dict) or header.get("version") != IMAGE_VERSION:
            raise ValueError("profile store image of another version")
        body = memoryview(data)[start + size:]

        def get(ref: dict[str, Any]) -> np.ndarray:
            if "str" in ref:
                return np.asarray(ref["str"], dtype=str)[get(ref["codes"])]
            dtype = np.dtype(ref["dtype"])
            if dtype.str not in ("<i8", "<f8"):
                raise ValueError(f"profile store image: dtype {ref['dtype']!r}")
            count, off = int(ref["count"]), int(ref["offset"])
            if off < 0 or count < 0 or off + count * 8 > len(body):
                raise ValueError("profile store image is truncated")
            return np.frombuffer(body, dtype, count, off).copy()

        store = cls(header["device_name"], header["peak_flops"], header["memory_bytes"],
                    header["memory_bandwidth_bytes_per_s"], header["provenance"],
                    header["op_model"])
        for entry in header["ops"]:
            store.add_op_table(entry["op"], {c: get(ref) for c, ref in entry["keys"]},
                               get(entry["time_s"]), entry["axis"])
        for entry in header["collectives"]:
            for n, x, t in entry["curves"]:
                store.add_collective(entry["kind"], int(n), get(x), get(t))
        res = header["residuals"]
        if res is not None:
            store.residuals = ResidualTable(**{c: get(ref) for c, ref in res["columns"]},
                                            procedure=res["procedure"])
        return store

    @classmethod
    def _read(cls, f: h5py.File) -> "ProfileStore":
        _h5py()  # the plugin search list emptied again before any chunk is read
        _check(f, _ROOT_TYPE)
        a = f.attrs
        for name in ("device_name", "memory_bytes", "memory_bandwidth_bytes_per_s"):
            if name not in a:
                raise ProfileStoreError(f"missing root attribute {name!r}")
        for name in ("peak_flops", "provenance", "op_model", "ops", "collectives"):
            if name not in f:
                raise ProfileStoreError(f"missing group /{name}")
        device = a["device_name"]
        device = device.decode("utf-8", "replace") if isinstance(device, bytes) else device
        if not isinstance(device, str) or not 0 < len(device) <= 200:
            raise ProfileStoreError("root attribute 'device_name' must be a name of 1 to 200 "
                                    "characters")
        sizes = {name: _number_attr(f, name) for name in ("memory_bytes", "memory_bandwidth_bytes_per_s")}
        numbers = {}
        for name in ("peak_flops", "op_model"):
            numbers[name] = _read_dict(f[name])
            for k, v in numbers[name].items():
                if not _is_number(v):
                    raise ProfileStoreError(f"/{name}: attribute {k!r} is {_type_name(v)} "
                                            f"{v!r:.60}, expected a number")
        provenance = _read_dict(f["provenance"])
        try:
            store = cls(device, numbers["peak_flops"], sizes["memory_bytes"],
                        sizes["memory_bandwidth_bytes_per_s"], provenance, numbers["op_model"])
        except ValueError as exc:
            raise ProfileStoreError(str(exc)) from None
        _check(f["ops"], "dict")
        for op, g in f["ops"].items():
            _check(g, "op-table")
            if "axis" not in g.attrs or "time_s" not in g:
                raise ProfileStoreError(f"{g.name}: missing 'axis' attribute or 'time_s' dataset")
            axis = g.attrs["axis"]
            if not isinstance(axis, str):
                raise ProfileStoreError(f"{g.name}: attribute 'axis' is {_type_name(axis)}, "
                                        "expected a string")
            _typed_dataset(g["time_s"], "float")
            keys = {c: _typed_dataset(ds, "key") for c, ds in g.items() if c != "time_s"}
            try:
                store.add_op_table(op, keys, g["time_s"][()], axis)
            except ValueError as exc:
                raise ProfileStoreError(f"{g.name}: {exc}") from None
        _check(f["collectives"], "dict")
        for kind, kg in f["collectives"].items():
            _check(kg, "dict")
            for n, g in kg.items():
                _check(g, "collective-curve")
                if not (n.isascii() and n.isdigit() and str(int(n)) == n):
                    raise ProfileStoreError(f"{g.name}: group name {n!r} is not a decimal rank count")
                for name in ("bytes", "time_s"):
                    if name not in g:
                        raise ProfileStoreError(f"{g.name}: missing dataset {name!r}")
                    _typed_dataset(g[name], "float")
                try:
                    store.add_collective(kind, int(n), g["bytes"][()], g["time_s"][()])
                except (ValueError, KeyError) as exc:
                    raise ProfileStoreError(f"{g.name}: {exc}") from None
        if "residuals" in f:  # schema 2, optional
            store.residuals = _read_residuals(f["residuals"])
        return store


def _h5py() -> Any:
    """The h5py module, with HDF5's plugin folders emptied for this process.

    Before h5py is first imported, ``HDF5_PLUGIN_PATH`` is set empty and
    ``HDF5_PLUGIN_PRELOAD`` to ``"::"`` (HDF5's value for "load no plugin"); after any import
    (h5py may have been imported first by someone else) the plugin search path is cleared
    with ``h5py.h5pl``. A store's filters are audited before any chunk is read
    (:data:`ALLOWED_FILTERS`), so HDF5 never needs a plugin; this keeps any library in a
    plugin folder from being loaded even if a check missed one. (The installed h5py has no
    binding of ``H5PLset_loading_state``.)
    """
    if "h5py" not in sys.modules:
        os.environ["HDF5_PLUGIN_PATH"] = ""
        os.environ["HDF5_PLUGIN_PRELOAD"] = "::"
    import h5py

    while h5py.h5pl.size():
        h5py.h5pl.remove(0)
    return h5py


def _type_name(value: Any) -> str:
    """A short name of ``value``'s type for messages ("a boolean", "a string"...)."""
    if isinstance(value, (bool, np.bool_)):
        return "a boolean"
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return "a string"
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape}"
    return f"a {type(value).__name__}"


def _number_attr(node: Any, name: str) -> float:
    """Attribute ``name`` of ``node`` as a float; ProfileStoreError naming it unless it is a
    stored int or float (not a string, boolean or array)."""
    value = node.attrs[name]
    value = value.item() if isinstance(value, np.generic) else value
    if not _is_number(value):
        raise ProfileStoreError(f"{node.name}: attribute {name!r} is {_type_name(value)} "
                                f"{value!r:.60}, expected a number")
    return float(value)


#: dtype rule of each role of a dataset: ``float`` times, sizes and measured values
#: (float32 or float64: float16 holds 3 significant digits and tops out at 65504), ``int``
#: counts (signed or unsigned integers), ``str`` names (HDF5 strings), ``key`` an op-table key
#: column (integers or strings; floats are not keys).
_DTYPE_RULES = {"float": "float32 or float64", "int": "integers", "str": "strings",
                "key": "integers or strings"}


def _typed_dataset(ds: Any, role: str) -> np.ndarray:
    """The values of dataset ``ds`` of ``role`` (a key of :data:`_DTYPE_RULES`): strings
    decoded as UTF-8 to a str array; ProfileStoreError naming the dataset and the expected
    dtype when it has another."""
    h5py = _h5py()
    if not isinstance(ds, h5py.Dataset):
        raise ProfileStoreError(f"{ds.name}: expected a dataset of {_DTYPE_RULES[role]}, "
                                f"got {type(ds).__name__}")
    dtype = ds.dtype
    is_str = h5py.check_string_dtype(dtype) is not None
    ok = {"float": dtype.kind == "f" and dtype.itemsize in (4, 8),
          "int": dtype.kind in "iu" and not is_str,
          "str": is_str,
          "key": is_str or dtype.kind in "iu"}[role]
    if not ok:
        got = "strings" if is_str else str(dtype)
        raise ProfileStoreError(f"{ds.name}: dataset of {got}, expected {_DTYPE_RULES[role]}")
    if is_str:
        return np.asarray(ds.asstr()[()], dtype=str)
    return ds[()]


def _check(node: h5py.Group, expected: str) -> None:
    """Dispatch check: ``node`` must carry ``expected`` encoding-type at a known version."""
    where = node.name
    etype, ever = node.attrs.get(_ENC_TYPE), node.attrs.get(_ENC_VERSION)
    if etype is None or ever is None:
        raise ProfileStoreError(f"{where}: missing '{_ENC_TYPE}' or '{_ENC_VERSION}' attribute"
                                + (" (not a vTrain profile store)" if where == "/" else ""))
    if etype != expected:
        raise ProfileStoreError(f"{where}: encoding-type {etype!r}, expected {expected!r}")
    ever = ever.item() if isinstance(ever, np.generic) else ever
    if not isinstance(ever, int) or isinstance(ever, bool):
        raise ProfileStoreError(f"{where}: attribute {_ENC_VERSION!r} is {_type_name(ever)}, "
                                "expected an integer")
    newest = _GROUP_VERSIONS[expected]
    if int(ever) > newest:
        raise ProfileStoreError(f"{where}: {expected} encoding-version {int(ever)} is newer than "
                                f"this program supports (version {newest}); update vtrain")
    if int(ever) < 1:
        raise ProfileStoreError(f"{where}: unknown {expected} encoding-version {int(ever)}")


_STR_COLUMNS = ("set", "file")
#: dtype role (:data:`_DTYPE_RULES`) of each residual column; the others are floats.
_RESIDUAL_ROLES = {"set": "str", "file": "str", "row": "int", "num_gpus": "int",
                   "gpus_per_node": "int"}


def _write_residuals(g: h5py.Group, table: Any) -> None:
    """Write a :class:`core.store.interval.ResidualTable` as a "residual-table" group."""
    h5py = _h5py()  # on first use only: a cached store needs no HDF5

    g.attrs.update({_ENC_TYPE: "residual-table", _ENC_VERSION: np.int64(1),
                    "procedure": str(table.procedure)})
    for c in table.COLUMNS:
        v = getattr(table, c)
        if c in _STR_COLUMNS:
            g.create_dataset(c, data=v.astype(object), dtype=h5py.string_dtype("utf-8"))
        else:
            g.create_dataset(c, data=v)


def _read_residuals(g: h5py.Group) -> Any:
    """Inverse of :func:`_write_residuals`; ProfileStoreError naming the group when invalid."""
    _check(g, "residual-table")
    missing = [c for c in ResidualTable.COLUMNS if c not in g]
    if missing:
        raise ProfileStoreError(f"{g.name}: missing column(s) {', '.join(missing)}")
    cols = {c: _typed_dataset(g[c], _RESIDUAL_ROLES.get(c, "float")) for c in ResidualTable.COLUMNS}
    procedure = g.attrs.get("procedure", "")
    if not isinstance(procedure, str):
        raise ProfileStoreError(f"{g.name}: attribute 'procedure' is {_type_name(procedure)}, "
                                "expected a string")
    try:
        return ResidualTable(**cols, procedure=procedure)
    except (ValueError, TypeError) as exc:
        raise ProfileStoreError(f"{g.name}: {exc}") from None


def _write_dict(g: h5py.Group, d: dict[str, Any]) -> h5py.Group:
    """Store ``d`` as attributes of a "dict" group; non-scalar values as JSON text."""
    g.attrs.update({_ENC_TYPE: "dict", _ENC_VERSION: np.int64(1)})
    json_keys = []
    for k, v in d.items():
        if k in _RESERVED or "/" in k:
            raise ValueError(f"{g.name}: key {k!r} is reserved or invalid")
        if isinstance(v, str):
            g.attrs[k] = str(v)  # plain str: h5py cannot write str subclasses (torch's version)
        elif isinstance(v, (bool, int, float, np.generic)):
            g.attrs[k] = v
        else:
            g.attrs[k] = json.dumps(v)
            json_keys.append(k)
    if json_keys:
        g.attrs[_JSON_KEYS] = json.dumps(json_keys)
    return g


def _read_dict(g: h5py.Group) -> dict[str, Any]:
    """Inverse of :func:`_write_dict`: scalar attributes (str, bool, int, float) and JSON text
    (bounded nesting, finite numbers); any other attribute is refused."""
    _check(g, "dict")
    json_keys = _parse_attr_json(g, _JSON_KEYS, g.attrs.get(_JSON_KEYS, "[]"))
    if not isinstance(json_keys, list) or not all(isinstance(k, str) for k in json_keys):
        raise ProfileStoreError(f"{g.name}: attribute {_JSON_KEYS!r} must be a JSON list of names")
    out = {}
    for k, v in g.attrs.items():
        if k in _RESERVED:
            continue
        v = v.item() if isinstance(v, np.generic) else v
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if k in json_keys:
            out[k] = _parse_attr_json(g, k, v)
        elif isinstance(v, (str, bool, int)):
            out[k] = v
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise ProfileStoreError(f"{g.name}: attribute {k!r} is {v!r}, not a finite number")
            out[k] = v
        else:
            raise ProfileStoreError(f"{g.name}: attribute {k!r} is not a scalar "
                                    f"(got {type(v).__name__})")
    return out


def _parse_attr_json(g: h5py.Group, key: str, text: Any) -> Any:
    from core.util.inputs import parse_json
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise ProfileStoreError(f"{g.name}: attribute {key!r} must be JSON text")
    return parse_json(text, f"{g.name}: attribute {key!r}", ProfileStoreError)


def _read_store_bytes(path: Path) -> bytes:
    """The bytes of a store file; :data:`NOT_A_STORE` for anything that is not a readable
    regular HDF5 file (missing, unreadable, a folder, a FIFO, another kind of file)."""
    from core.util.inputs import read_bytes

    class _Unreadable(Exception):
        pass

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        raise ProfileStoreError(f"{path}: {NOT_A_STORE}") from None
    try:
        st = os.fstat(fd)
        head = os.read(fd, len(_HDF5_SIGNATURE)) if stat.S_ISREG(st.st_mode) else b""
    except OSError:
        head = b""
    finally:
        os.close(fd)
    if head != _HDF5_SIGNATURE:
        raise ProfileStoreError(f"{path}: {NOT_A_STORE}")
    try:
        return read_bytes(path, _Unreadable, "store")
    except _Unreadable as exc:
        raise ProfileStoreError(str(exc)) from None


def _audit(f: h5py.File) -> None:
    """Refuse what a store must not hold before any value is read: external links (a link
    to another file), soft links, external raw storage and virtual datasets (data in other
    files), filters other than :data:`ALLOWED_FILTERS` (an unknown one makes HDF5 load
    plugin libraries), committed datatypes, datasets of an unexpected dtype or of more than
    :data:`MAX_DATASET_ELEMENTS` elements, more than :data:`MAX_OBJECTS` objects or paths
    deeper than :data:`MAX_DEPTH` (a hard-link cycle ends there)."""
    h5py = _h5py()  # on first use only: a cached store needs no HDF5

    count = 0
    stack: list[h5py.Group] = [f]
    while stack:
        g = stack.pop()
        for name in list(g.keys()):
            where = f"{g.name.rstrip('/')}/{name}"
            link = g.get(name, getlink=True)
            if isinstance(link, h5py.ExternalLink):
                raise ProfileStoreError(f"{where}: an external link to another file "
                                        f"({link.filename!r}); a store must not pull in other files")
            if isinstance(link, h5py.SoftLink):
                raise ProfileStoreError(f"{where}: a soft link ({link.path!r}); a store holds "
                                        "only its own groups and datasets")
            count += 1
            if count > MAX_OBJECTS:
                raise ProfileStoreError(f"more than {MAX_OBJECTS:,} objects")
            if where.count("/") > MAX_DEPTH:
                raise ProfileStoreError(f"{where}: nested deeper than {MAX_DEPTH} groups")
            obj = g[name]
            if isinstance(obj, h5py.Group):
                stack.append(obj)
            elif isinstance(obj, h5py.Dataset):
                _audit_filters(obj, where)
                if obj.external:
                    raise ProfileStoreError(f"{where}: dataset stored in external files "
                                            f"{[e[0] for e in obj.external]}; a store must not "
                                            "pull in other files")
                if obj.is_virtual:
                    raise ProfileStoreError(f"{where}: a virtual dataset (data in other files); "
                                            "a store must not pull in other files")
                if obj.ndim != 1:
                    raise ProfileStoreError(f"{where}: dataset of shape {obj.shape}, expected 1-D")
                if obj.size > MAX_DATASET_ELEMENTS:
                    raise ProfileStoreError(f"{where}: dataset of {obj.size:,} elements, more than "
                                            f"{MAX_DATASET_ELEMENTS:,}")
                kind = obj.dtype.kind
                if not (kind in "iuf" or h5py.check_string_dtype(obj.dtype) is not None):
                    raise ProfileStoreError(f"{where}: dataset of dtype {obj.dtype}, expected "
                                            "numbers or strings")
            else:
                raise ProfileStoreError(f"{where}: unexpected object {type(obj).__name__}")


def _audit_filters(ds: Any, where: str) -> None:
    """Refuse dataset ``ds`` (at path ``where``) if its filter pipeline holds a filter other
    than :data:`ALLOWED_FILTERS`, naming the filter's id and stored name. Only the dataset's
    creation property list is read (no chunk), so HDF5 never looks for a filter plugin."""
    plist = ds.id.get_create_plist()
    for i in range(plist.get_nfilters()):
        fid, _flags, _values, name = plist.get_filter(i)
        if fid not in ALLOWED_FILTERS:
            text = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
            text = "".join(c if c.isprintable() else "?" for c in text)[:60]
            raise ProfileStoreError(
                f"{where}: filter {fid}{f' ({text})' if text else ''} in the dataset's filter "
                f"pipeline; a store may use only {', '.join(ALLOWED_FILTERS.values())}")
