"""Predict measured runs and report the error: the run-and-report half of accuracy checks.

:func:`predict_rows` predicts every run of a measurement file that is not skipped
(:mod:`core.accuracy.measured` reads the files) and :class:`ValidationResult` holds the
predictions, the error bands and the figures (:mod:`core.accuracy.metrics`). The memory model
is run here, not by the readers: :func:`row_memory` gives each predicted run's estimated need
against its GPU's memory, and :func:`over_capacity` lists the runs that ran although the memory
model says they cannot fit (simulate's verdict; reported, never dropped).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from core.accuracy.measured import PROGRESS_EVERY, MeasuredRun
from core.accuracy.metrics import error_metrics, interval_metrics
from core.plan.session import Session

__all__ = ["ValidationResult", "predict_rows", "predict_memory", "row_memory", "row_memory_fit",
           "over_capacity", "unit_warnings", "TIME_UNIT_SUSPECT_RATIO", "MEMORY_UNIT_SUSPECT_RATIO",
           "TIME_COLUMN_SLIPS", "repeated_rows", "measurement_key", "time_unit_slips"]


@dataclass
class ValidationResult:
    """Predictions for measured rows and their error figures.

    Attributes
    ----------
    measurements : list of MeasuredRun
    predicted_s : float array, shape (len(measurements),)
        NaN for skipped rows.
    """

    measurements: list[MeasuredRun]
    predicted_s: np.ndarray
    #: error band per row (seconds, NaN where none), shape (len(measurements),), or None
    #: when no band was computed; its nominal coverage
    interval_low_s: np.ndarray | None = None
    interval_high_s: np.ndarray | None = None
    coverage: float | None = None
    #: predicted peak memory per GPU (GiB) at each row's memory_scale, NaN where the row has no
    #: measured memory or was skipped; None when not computed (:func:`predict_memory`)
    predicted_memory_gib: np.ndarray | None = None
    #: why the first predicted row without an error band has none (the interval's note); ""
    #: when every predicted row has one or no band was computed
    band_note: str = ""

    @property
    def used(self) -> np.ndarray:
        """Boolean mask of rows that were predicted."""
        return ~np.isnan(self.predicted_s)

    @property
    def timed(self) -> np.ndarray:
        """Boolean mask of predicted rows that have a measured time (the time metrics' rows)."""
        return self.used & ~np.isnan(self.measured_s)

    @property
    def measured_memory_gib(self) -> np.ndarray:
        """Measured peak memory per GPU (GiB) per row, NaN where none, shape (n,)."""
        return np.array([m.measured_memory_gib for m in self.measurements])

    def memory_errors_percent(self) -> np.ndarray:
        """Signed memory error per row, (predicted - measured) / measured in percent; NaN
        where the row has no measured or no predicted memory."""
        if self.predicted_memory_gib is None:
            return np.full(len(self.measurements), np.nan)
        meas = self.measured_memory_gib
        return (self.predicted_memory_gib - meas) / meas * 100

    def memory_metrics(self) -> dict[str, Any]:
        """``n`` (rows with measured and predicted memory), MAPE, median and max absolute
        percentage error (percent; NaN without rows) and the rows per memory scale."""
        err = self.memory_errors_percent()
        has = ~np.isnan(err)
        ape = np.abs(err[has])
        scales: dict[str, int] = {}
        for m, h in zip(self.measurements, has):
            if h:
                scales[m.memory_scale] = scales.get(m.memory_scale, 0) + 1
        if not ape.size:
            return {"n": 0, "mape_percent": math.nan, "median_ape_percent": math.nan,
                    "max_ape_percent": math.nan, "rows_by_scale": scales}
        return {"n": int(ape.size), "mape_percent": float(ape.mean()),
                "median_ape_percent": float(np.median(ape)), "max_ape_percent": float(ape.max()),
                "rows_by_scale": scales}

    @property
    def measured_s(self) -> np.ndarray:
        """Measured seconds per row, shape (n,)."""
        return np.array([m.measured_iteration_time_s for m in self.measurements])

    def metrics(self) -> dict[str, float]:
        """Time error figures over predicted rows with a measured time (see
        :func:`error_metrics`), the skipped count and, under ``memory``, :meth:`memory_metrics`."""
        used = self.timed
        out = error_metrics(self.predicted_s[used], self.measured_s[used])
        out["skipped"] = sum(1 for m in self.measurements if m.skip_reason)
        out["memory"] = self.memory_metrics()
        if self.interval_low_s is not None and self.interval_high_s is not None:
            out.update(interval_metrics(self.measured_s[used], self.predicted_s[used],
                                        self.interval_low_s[used], self.interval_high_s[used]))
            out["interval_nominal_coverage"] = self.coverage
        return out

    def by_group(self, key: str) -> list[tuple[str, int, float, float]]:
        """``(label, n, MAPE %, max APE %)`` per value of group label ``key``."""
        ape = np.abs(self.predicted_s - self.measured_s) / self.measured_s * 100
        groups: dict[str, list[float]] = defaultdict(list)
        for m, e in zip(self.measurements, ape):
            if not np.isnan(e):
                groups[m.group.get(key, "?")].append(float(e))

        def order(label: str) -> tuple:
            try:
                return (0, float(label.rstrip("B")), label)
            except ValueError:
                return (1, 0.0, label)

        return [(g, len(v), float(np.mean(v)), float(np.max(v)))
                for g, v in sorted(groups.items(), key=lambda kv: order(kv[0]))]


def predict_rows(measurements: list[MeasuredRun], predict: Callable[[Session], Any],
                 progress: Callable[[int, int], None] | None = None) -> ValidationResult:
    """Predict every non-skipped row with ``predict(session)``.

    ``progress(done, total)``, if given, is called as rows are predicted (every 50 rows and at
    the end; ``total`` counts every row, skipped ones too).

    ``predict`` returns seconds, or ``(seconds, interval)`` with a
    :class:`core.store.interval.PredictionInterval` (then the result carries the
    bands). A row the predictor rejects (``ValueError`` or ``KeyError``)
    becomes skipped with that message as its reason.
    """
    out = np.full(len(measurements), np.nan)
    low, high = np.full(len(measurements), np.nan), np.full(len(measurements), np.nan)
    coverage, note = None, ""
    for i, m in enumerate(measurements):
        if progress and i and (i % PROGRESS_EVERY == 0):
            progress(i, len(measurements))
        if m.skip_reason:
            continue
        try:
            value = predict(m.session)
        except (ValueError, KeyError) as exc:
            m.skip_reason = f"simulator: {exc.args[0] if exc.args else exc}"
            m.skip_causes = ["simulator refused the plan"]
            continue
        if isinstance(value, tuple):
            value, iv = value
            coverage = iv.coverage
            if iv.available:
                low[i], high[i] = iv.low_s, iv.high_s
            elif not note:
                note = iv.note
        out[i] = value
    if progress:
        progress(len(measurements), len(measurements))
    memory = predict_memory(measurements)
    if coverage is None:
        return ValidationResult(measurements, out, predicted_memory_gib=memory)
    return ValidationResult(measurements, out, low, high, coverage, memory, note)


def predict_memory(measurements: list[MeasuredRun]) -> np.ndarray:
    """Predicted peak memory per GPU (GiB) of every non-skipped row with a measured memory, at
    the row's ``memory_scale`` (:meth:`core.sim.report.StageMemory.at_scale`), of the fullest GPU:
    the maximum over the pipeline stages (:func:`core.sim.simulate.stage_memory`). NaN elsewhere,
    and where the memory model cannot take the plan (the row stays predicted for time).

    A source that measured one rank (Megatron-LM's CI memory tests write the last rank's) is
    compared with the fullest stage all the same; benchmarks/bench_memory.py picks that rank."""
    from core.sim.simulate import stage_memory

    out = np.full(len(measurements), np.nan)
    for i, m in enumerate(measurements):
        if m.skip_reason or m.session is None or math.isnan(m.measured_memory_gib):
            continue
        try:
            out[i] = max(sm.at_scale(m.memory_scale) for sm in stage_memory(m.session)) / 2**30
        except (ValueError, KeyError):
            continue
    return out


def row_memory(m: MeasuredRun) -> tuple[float, float] | None:
    """``(need, capacity)`` in bytes: what the memory model gives the fullest GPU of a row's plan
    (:func:`core.sim.simulate.stage_memory`, no reserve) and the GPU's whole memory; None when the
    row has no session or its store cannot be read (:func:`row_memory_fit` without the fit)."""
    fit = row_memory_fit(m)
    return None if fit is None else fit[:2]


def row_memory_fit(m: MeasuredRun) -> tuple[float, float, bool] | None:
    """``(need, capacity, fits)``: :func:`row_memory` and whether the plan fits as simulate
    decides it (:func:`core.sim.simulate.memory_verdict`: the need less the caching allocator's
    reserve against the capacity; a need above the capacity only with the reserve is tight, not
    unfit). A run that was measured ran: a predicted row that does not fit is a miss of the
    memory model (or of an assumption)."""
    from core.sim.simulate import memory_verdict, session_profile, stage_memory

    if m.session is None:
        return None
    try:
        store = session_profile(m.session)
        capacity = float(store.memory_bytes)
        # the store's peaks decide FP8's transposed weight copies, as simulate's do
        need, fits, _ = memory_verdict(stage_memory(m.session, store), capacity)
    except Exception:  # noqa: BLE001 - the simulator names what it cannot model when predicting
        return None
    return float(need), capacity, bool(fits)


def over_capacity(runs: list[MeasuredRun]) -> list[tuple[MeasuredRun, float, float]]:
    """``(run, need, capacity)`` (bytes, :func:`row_memory`) of every predicted run that does
    not fit in its GPU's memory by simulate's verdict (:func:`row_memory_fit`; a run whose need
    exceeds the capacity only with the allocator's reserve is tight, and ran as the verdict
    allows): runs that ran, so misses of the memory model or of an assumption (a
    recomputation or offloading the source does not state), reported by ``vtrain validate``
    and kept in the figures."""
    out = []
    for m in runs:
        if m.skip_reason:
            continue
        mem = row_memory_fit(m)
        if mem is not None and not mem[2]:
            out.append((m, mem[0], mem[1]))
    return out


#: A measured time this many times its prediction (or this fraction of it, in a milliseconds
#: column) is taken for a unit slip and warned of: the simulator's errors on the shipped files
#: stay well within a factor of two, so a factor of 100 is no model error, while milliseconds
#: written in a seconds column give about 1,000.
TIME_UNIT_SUSPECT_RATIO = 100.0
#: A measured peak memory this many times the GPU's whole memory cannot have been measured on
#: one GPU (nothing per GPU exceeds its capacity; the margin leaves room for GB written as GiB,
#: 7 %, and a store of a smaller variant), and is warned of: MiB written in the GiB column give
#: about 1,024 times.
MEMORY_UNIT_SUSPECT_RATIO = 2.0
#: Time column (or JSON-lines key) -> (measured / predicted ratio that is suspect: at least it
#: when above 1, at most it when below, and the unit slip it suggests).
TIME_COLUMN_SLIPS = {
    "measured_iteration_time_s": (TIME_UNIT_SUSPECT_RATIO, "milliseconds? the column is in seconds"),
    "iteration time (ms)": (1 / TIME_UNIT_SUSPECT_RATIO, "seconds? the column is in milliseconds"),
}


def _time_slip(m: MeasuredRun, pred: float) -> dict[str, Any] | None:
    """The unit-slip warning of run ``m``'s measured time against its prediction ``pred``
    (seconds; :data:`TIME_COLUMN_SLIPS`), ``{"row", "column", "message"}``, or None."""
    slip = TIME_COLUMN_SLIPS.get(m.time_column)
    if not m.has_time or slip is None or not pred > 0:
        return None
    ratio = m.measured_iteration_time_s / pred
    if not ((ratio >= slip[0]) if slip[0] > 1 else (ratio <= slip[0])):
        return None
    return {"row": m.row, "column": m.time_column, "message": (
        f"measured {m.measured_iteration_time_s:,.6g} is {ratio:,.4g} times the prediction, "
        f"{pred:.4g} s: {slip[1]}")}


def time_unit_slips(runs: list[MeasuredRun], predict: Callable[[Session], float]
                    ) -> list[dict[str, Any]]:
    """The unit slips of the measured times of ``runs`` (as :func:`unit_warnings` finds them),
    each predicted with ``predict(session)`` (seconds): for ``vtrain calibrate``, which fits
    the times as they are (a column of milliseconds drives every parameter to a bound). Rows
    skipped, without a time or that ``predict`` refuses (``ValueError``, ``KeyError``) are
    left out; the runs are not changed."""
    out = []
    for m in runs:
        if m.skip_reason or not m.has_time or m.time_column not in TIME_COLUMN_SLIPS:
            continue
        try:
            pred = float(predict(m.session))
        except (ValueError, KeyError):
            continue  # the fit names what it refuses
        slip = _time_slip(m, pred)
        if slip is not None:
            out.append(slip)
    return out


def unit_warnings(result: ValidationResult) -> list[dict[str, Any]]:
    """Rows whose measurement looks like a unit slip, each ``{"row", "column", "message"}``:
    a measured time :data:`TIME_UNIT_SUSPECT_RATIO` times its prediction (the other way round
    for a milliseconds column, :data:`TIME_COLUMN_SLIPS`), and a measured peak memory
    :data:`MEMORY_UNIT_SUSPECT_RATIO` times the GPU's whole memory (:func:`row_memory`: the
    store's). Warnings, not refusals: the rows stay in the figures."""
    out = []
    for m, pred in zip(result.measurements, result.predicted_s):
        if m.skip_reason or math.isnan(pred):
            continue
        slip = _time_slip(m, pred)
        if slip is not None:
            out.append(slip)
        if not math.isnan(m.measured_memory_gib):
            mem = row_memory(m)
            if mem is not None and m.measured_memory_gib * 2**30 > MEMORY_UNIT_SUSPECT_RATIO * mem[1]:
                out.append({"row": m.row, "column": "measured_memory_gib", "message": (
                    f"measured {m.measured_memory_gib:,.6g} GiB is {m.measured_memory_gib * 2**30 / mem[1]:,.4g} "
                    f"times the GPU's whole memory, {mem[1] / 2**30:,.4g} GiB, which no run can "
                    "use: MiB? the column is GiB")})
    return out


def repeated_rows(runs: list[MeasuredRun]) -> list[tuple[int, list[int]]]:
    """Rows that repeat an earlier row of ``runs``: the same session and the same measured time
    and memory (a row pasted twice, a file concatenated with itself), each ``(first row, [its
    repeats])``, in file order; skipped rows left out (they are in no figure). A repeat counts
    again in every figure, and in a cross-validation the copy in another fold is a row its fit
    has seen. Two runs of one plan measured apart differ in their times: they are not repeats."""
    first: dict[tuple, int] = {}
    repeats: dict[int, list[int]] = {}
    for m in runs:
        if m.skip_reason or m.session is None:
            continue
        key = measurement_key(m)
        if key in first:
            repeats.setdefault(first[key], []).append(m.row)
        else:
            first[key] = m.row
    return list(repeats.items())


def measurement_key(run: MeasuredRun) -> tuple:
    """What makes two runs repeats of one another (:func:`repeated_rows`): the session (all
    its fields), the measured time and memory (NaN equal to NaN) and the memory's scale."""
    return (repr(run.session), repr(run.measured_iteration_time_s),
            repr(run.measured_memory_gib), run.memory_scale)
