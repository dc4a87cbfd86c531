"""Profile store: measured or modelled times of one GPU kind, held in memory, and its lookups.

One store per device kind holds the device's peak FLOP/s, HBM size and bandwidth,
how the numbers were obtained (provenance), per-operation timing tables keyed by
the shapes that change them, and collective-communication curves (bytes ->
seconds) per group size and, for a calibrated store, the out-of-sample
residuals of its calibration runs (the error band, :mod:`core.store.interval`).

What belongs here: :class:`ProfileStore` (its values and their bounds, and the lookups:
op times, collective times, ring fits) and the checks of the values it holds. The file
format is :mod:`core.store.format` (HDF5, specified in ``docs/profile_store.md``), the
cached image :mod:`core.store.image`; :meth:`ProfileStore.open` and
:meth:`ProfileStore.save` use them.

:meth:`ProfileStore.open` reads everything into memory and closes the file, so a
store never holds an HDF5 handle; :meth:`ProfileStore.save` writes a temporary
file in the target folder and renames it into place. Lookups interpolate in
log-log space (vTrain, Bang et al. MICRO 2024, profiles each operation once per
shape and reuses the times) and say when they extrapolate.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core.store import format as store_format
from core.store import image as store_image
from core.store.format import is_number
from core.util.atomic import atomic_target

__all__ = ["COLLECTIVE_KINDS", "PROVENANCE_METHODS", "Lookup", "PeakFlops", "ProfileStore",
           "CURVE_DIP_TOLERANCE", "STORE_BOUNDS", "OP_MODEL_BOUND", "PROVENANCE_FLAGS",
           "PROVENANCE_TYPES"]

#: Collective kinds a store can hold curves for.
COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
#: Allowed values of ``provenance["method"]``.
PROVENANCE_METHODS = ("measured", "analytic", "calibrated")
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
#: twice BF16's), and the grouped-GEMM and FlashAttention efficiencies, shares of the dense curve's, alike; an overhead is a host time (0 to 10 s); a measured time lies between a
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
    "grouped_gemm_efficiency": "relative_efficiency",
    "flash_attention_efficiency": "relative_efficiency",
    "gemm_half_size": "gemm_half_size",
    "kernel_overhead_s": "overhead_s", "op_overhead_s": "overhead_s",
    "kernel_launch_s": "overhead_s", "iteration_overhead_s": "overhead_s",
    "collective_overhead_s": "overhead_s", "p2p_overhead_s": "overhead_s",
}



def _number(what: str, value: Any) -> float:
    """``value`` as a float; ValueError naming ``what`` unless it is an int or a float (a
    string such as ``"1.0"`` or a boolean is a value of the wrong type, not a number)."""
    if not is_number(value):
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


def _finite(v: Any) -> bool:
    return is_number(v) and math.isfinite(v)


#: Provenance entries that code reads as structures or counts, with the rule each must meet
#: (a JSON object written as text, ``"0"`` for a count, would be read as something else or
#: fail where it is used): name -> (test, what it must be).
PROVENANCE_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{k: (lambda v: isinstance(v, dict), "a JSON object") for k in (
        "base_provenance", "cross_validation", "cross_validation_this_kind", "efficiencies",
        "file_weights", "collectives", "kernels")},
    "parameters": (lambda v: isinstance(v, dict), "a JSON object"),
    "parameter_bounds": (lambda v: isinstance(v, dict) and all(
        isinstance(b, dict) and _finite(b.get("low")) and _finite(b.get("high"))
        for b in v.values()), "a JSON object of {\"low\": number, \"high\": number}"),
    # a list of names (vtrain calibrate), or an object keyed by them, each with its base and
    # fitted values (vtrain calibrate-trace, core.accuracy.trace_fit); readers iterate the names
    "fitted_parameters": (lambda v: isinstance(v, (list, dict)) and all(isinstance(x, str)
                                                                       for x in v),
                          "a JSON list of names (or an object keyed by them)"),
    **{k: (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
           "a whole number at or above 0") for k in (
        "num_shape_factors", "num_rows", "rows_of_this_kind", "threads")},
    **{k: (lambda v: isinstance(v, bool), "true or false") for k in PROVENANCE_FLAGS},
}


def _check_flags(provenance: dict[str, Any]) -> None:
    """ValueError naming the key unless every :data:`PROVENANCE_TYPES` entry of
    ``provenance`` and of its chain of ``base_provenance`` dicts meets its rule (a flag is a
    boolean: the string ``"false"`` would read as true; a structure is one, not JSON text)."""
    prov, where = provenance, "provenance"
    for _ in range(64):
        if not isinstance(prov, dict):
            return
        for key, (ok, rule) in PROVENANCE_TYPES.items():
            if key in prov and not ok(prov[key]):
                raise ValueError(f"{where}[{key!r}] must be {rule}, got "
                                 f"{type(prov[key]).__name__} {prov[key]!r:.60}")
        params = prov.get("parameters") or {}
        for name in prov.get("fitted_parameters") or ():
            if name in params and not _finite(params[name]):
                raise ValueError(f"{where}['parameters'][{name!r}] must be a finite number (a "
                                 f"fitted parameter), got {type(params[name]).__name__} "
                                 f"{params[name]!r:.60}")
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
        from core.model.ops import no_peak_error
        raise no_peak_error(self.device_name, dtype, self)


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
        Free parameters of the analytic op model (e.g. ``gemm_efficiency_max``): names of
        :data:`OP_MODEL_BOUND` only (ValueError naming any other, with the closest name: a
        misspelled parameter would silently take its default), each within its bound.

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
            if bound is None:  # a misspelled parameter would silently take its default
                close = difflib.get_close_matches(str(k), sorted(OP_MODEL_BOUND), n=1)
                raise ValueError(f"op_model[{k!r}] is not a parameter of the op model"
                                 + (f" (did you mean {close[0]!r}?)" if close else "")
                                 + f"; the parameters are {', '.join(sorted(OP_MODEL_BOUND))}")
            self.op_model[str(k)] = _in_bound(f"op_model[{k!r}]", v, bound)
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
        """The store as the bytes of an HDF5 file (built in memory:
        :func:`core.store.format.store_bytes`)."""
        return store_format.store_bytes(self)

    def op_tables(self) -> list[tuple[str, dict[str, np.ndarray], np.ndarray, str]]:
        """``(op, keys, time_s, axis)`` of every op table, in insertion order (what a store
        file and an image hold; read-only arrays of shape (n_rows,))."""
        return [(op, dict(tab.keys), tab.time_s, tab.axis) for op, tab in self._ops.items()]

    def curves(self) -> dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]:
        """Kind -> group size -> ``(nbytes, time_s)``, in insertion order (read-only arrays)."""
        return {kind: dict(c) for kind, c in self._curves.items()}

    @classmethod
    def open(cls, path: str | Path) -> "ProfileStore":
        """Read a store file completely into memory and close it.

        The file is read as bytes (a regular file of at most ``MAX_BYTES["store"]``,
        :mod:`core.util.inputs`) and parsed from memory; before any value is used, every
        link and dataset is audited (:func:`core.store.format.audit`): external and soft
        links, external raw storage and virtual datasets are refused, so a store never makes
        the tool read another file; a filter other than
        :data:`core.store.format.ALLOWED_FILTERS` is refused before any chunk is read, and
        HDF5's plugin folders are emptied (:func:`core.store.format.load_h5py`), so a store
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
        data = store_format.read_store_bytes(path)
        digest = hashlib.sha256(data).hexdigest()
        store = store_image.cached_image(digest, cls)
        if store is not None:
            store.path = path
            return store
        store = cls._parse(path, data)
        store_image.cache_image(digest, store)
        store.path = path
        return store

    @classmethod
    def _parse(cls, path: Path, data: bytes) -> "ProfileStore":
        """The store of the HDF5 file bytes ``data`` read from ``path`` (audited, checked)."""
        return store_format.parse_store(path, data, cls)

    def to_image(self) -> bytes:
        """The store as a compact image without HDF5 (:func:`core.store.image.to_image`): the
        on-disk cache of parsed stores (:meth:`open`) and what sweep workers receive."""
        return store_image.to_image(self)

    @classmethod
    def from_image(cls, data: bytes) -> "ProfileStore":
        """Inverse of :meth:`to_image` (:func:`core.store.image.from_image`); every value goes
        through the same checks as a store read from HDF5.

        Raises
        ------
        ValueError
            Not an image of this version, truncated, or holding invalid values.
        """
        return store_image.from_image(data, cls)
