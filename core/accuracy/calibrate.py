"""Fit a profile's free parameters to measured iteration times.

The free parameters (:data:`FIT_PARAMS`) are those of the analytic op and
communication model (:mod:`core.model.ops`, :mod:`core.sim.comm`): GEMM efficiency curve,
achieved memory bandwidth, per-kernel, per-op, per-collective, per-pipeline-
transfer and per-iteration overheads, and the achieved share of the
inter-node bandwidth.
Collective curves measured with nccl-tests stay as measured.

Method (a Gauss-Newton-style fixed point around the critical path):

1. simulate every measured plan with the current parameters and take its
   critical path;
2. along that path the iteration time is an explicit function of the
   parameters: sum of kernel roofline times (vectorized over all rows), plus
   communication time ``A + B / inter_node_efficiency + C *
   collective_overhead_s + N * p2p_overhead_s`` (A, B, C, N read off graphs
   built at moved parameter points, exact because those terms are linear);
3. fit the parameters by bounded robust least squares (soft-L1) on
   ``log(predicted / measured)`` (scipy.optimize.least_squares), then repeat from 1 with the
   new parameters (the critical path may move) for a few rounds. Before the first round's
   solve, a parameter no row's linearized time depends on (:func:`parameter_sensitivity`:
   its Jacobian column is below :data:`MIN_SENSITIVITY` over all rows, e.g. the inter-node
   efficiency when no row sends across nodes) is dropped from the fit: it keeps the base
   store's value and is reported as not determined by these rows;
4. then, as a profile would, give each measured shape its own op times: a
   factor on the model's time of the transformer-layer ops (attention, MLP)
   and the embedding and output ops, per shape (s, h, a, f, V, t, b, dtype)
   measured in at least three runs, fitted with a ridge penalty on the log
   factor so a shape seen in few runs stays close to the model. The calibrated store tabulates the
   corrected times; shapes never measured use the fitted model.

Every reported accuracy is out-of-sample: k-fold cross-validation where each
fold's held-out rows are predicted by the full simulator with the parameters
fitted on the other folds, or a fit on one file predicting another.

The parameter tables, shape keys and the stores a fit makes are
:mod:`core.accuracy.fit_params`'s, the linearization of steps 1-2
:mod:`core.accuracy.linearize`'s; their public names are importable from here too.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from core.plan.session import Session
from core.model.ops import effective_op_model
from core.store.profile_store import ProfileStore
from core.sim.simulate import simulate
from core.accuracy.fit_params import (FIT_PARAMS, FIT_START, HALF_PRECISIONS, SHARED_FIT_PARAMS,
                                      apply_fit, base_of, model_store, param_bounds, shape_key,
                                      shared_fit_params, store_op_model)
from core.accuracy.linearize import LinearizedRow, linearize, predict_linearized, row_parts
from core.accuracy.measured import MeasuredRun
from core.accuracy.metrics import error_metrics

if TYPE_CHECKING:  # pragma: no cover
    from core.store.interval import ResidualTable

__all__ = ["FIT_PARAMS", "model_store", "LinearizedRow", "linearize", "predict_linearized",
           "fit", "FitResult", "cross_validate", "calibrated_store", "apply_fit",
           "measured_sessions", "shape_key", "FIT_START", "HALF_PRECISIONS", "store_op_model"]

#: Ridge weight on the log of a shape's correction factor, per unit of log residual.
DEFAULT_RIDGE = 0.05
#: A shape gets its own factor only when measured at least this often: one or two runs
#: cannot tell a property of the shape from an anomaly of a run.
MIN_ROWS_PER_SHAPE = 3
#: Robust loss on log residuals (scipy's soft_l1 with this scale): a run far off the rest
#: (a measurement anomaly) pulls the fit as a ~5% error would, not quadratically.
ROBUST_LOSS = "soft_l1"
ROBUST_SCALE = 0.05
#: A parameter whose move across its whole bound range changes no row's linearized log
#: iteration time by more than this carries no information in the rows (:func:`fit` keeps the
#: base store's value): a structural zero, not a weak dependence.
MIN_SENSITIVITY = 1e-6
#: What a row lacks when its time does not depend on a parameter, for the parameters whose
#: dependence is one kind of traffic on the critical path (the reason :func:`fit` reports).
_TRAFFIC_OF = {"inter_node_efficiency": "inter-node traffic",
               "p2p_overhead_s": "PP send/recv", "p2p_efficiency": "PP send/recv",
               "collective_overhead_s": "collective",
               "all_to_all_efficiency": "all-to-all", "flex_all_to_all_efficiency": "all-to-all"}


class _FittedStores:
    """:func:`apply_fit` of each distinct base store, made once (stores keyed by identity)."""

    def __init__(self, base, op_model: dict[str, float], corrections: dict | None = None):
        self.base, self.op_model, self.corrections = base, op_model, corrections
        self._made: dict[int, ProfileStore] = {}

    def __call__(self, session: Session) -> ProfileStore:
        b = base_of(self.base, session)
        if id(b) not in self._made:
            self._made[id(b)] = apply_fit(b, self.op_model, self.corrections)
        return self._made[id(b)]



@dataclass
class FitResult:
    """Fitted parameters, shape corrections and in-sample figures.

    In-sample figures flatter the model: use :func:`cross_validate` for accuracy.
    """

    op_model: dict[str, float]
    corrections: dict[tuple, float]
    rounds: int
    train_metrics: dict[str, float] = field(default_factory=dict)
    #: the parameters fitted, in order, and the bounds each was fitted within (``(low, high)``,
    #: SI units; :func:`core.accuracy.fit_params.param_bounds`)
    fitted: tuple[str, ...] = ()
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: parameters asked for but not determined by the rows (name -> why): they kept the base
    #: store's values (:func:`parameter_sensitivity`)
    not_determined: dict[str, str] = field(default_factory=dict)


def parameter_sensitivity(rows: Sequence[LinearizedRow], names: Sequence[str],
                          op_model: dict[str, float],
                          bounds: dict[str, tuple[float, float]] | None = None) -> np.ndarray:
    """Jacobian of the rows' log iteration time over each parameter's bound range.

    Column ``j`` is ``log t(high_j) - log t(low_j)`` per row, the linearized time
    (:func:`predict_linearized`) with parameter ``names[j]`` at the two ends of its bounds
    (:func:`param_bounds`) and every other at ``op_model``: how far the whole admissible range
    of the parameter moves each row. A column of zeros means no row's critical path depends on
    the parameter (no inter-node traffic, no pipeline transfer ...): the rows cannot determine it.

    Returns
    -------
    float array, shape (len(rows), len(names))
    """
    out = np.zeros((len(rows), len(names)))
    for j, name in enumerate(names):
        lo, hi = param_bounds(name, bounds)
        out[:, j] = (np.log(predict_linearized(rows, {**op_model, name: hi}))
                     - np.log(predict_linearized(rows, {**op_model, name: lo})))
    return out


def _not_determined(rows, names, op_model, bounds) -> dict[str, str]:
    """The ``names`` no row depends on (:func:`parameter_sensitivity` below
    :data:`MIN_SENSITIVITY` on every row), each with why."""
    sens = np.abs(parameter_sensitivity(rows, names, op_model, bounds))
    out = {}
    for j, name in enumerate(names):
        if np.all(np.isfinite(sens[:, j])) and sens[:, j].max(initial=0.0) < MIN_SENSITIVITY:
            what = _TRAFFIC_OF.get(name)
            out[name] = (f"no {what} on any row's critical path" if what
                         else "no row's critical path depends on it")
    return out


def _fit_globals(sessions, measured_s, base, names, current, rounds, say, sqrt_w, prior=0.0,
                 bounds=None, held=None):
    """Fit ``names`` (steps 1-3 of the module doc) from ``current``. A parameter the rows do
    not determine (:func:`_not_determined`, on the first round's linearization) is dropped and
    set to its ``held`` value (the base store's).

    Returns
    -------
    (dict, list of str, dict)
        The op model, the parameters fitted, the ones not determined (name -> why).
    """
    from scipy.optimize import least_squares

    rows = [linearize(s, base_of(base, s), current) for s in sessions]
    undetermined = _not_determined(rows, names, current, bounds)
    names = [n for n in names if n not in undetermined]
    current = {**current, **{n: (held or current)[n] for n in undetermined}}
    for n, why in undetermined.items():
        say(f"{n} kept at {current[n]:.4g}: not determined by these rows ({why})")
    if not names:
        return current, names, undetermined
    lim = {n: param_bounds(n, bounds) for n in names}
    lo = np.array([lim[n][0] for n in names])
    hi = np.array([lim[n][1] for n in names])
    centre = np.array([current[n] for n in names], float)  # the prior's centre: the start
    for rnd in range(rounds):
        if rnd:  # the first round's rows are those the determination read
            rows = [linearize(s, base_of(base, s), current) for s in sessions]

        def residuals(u: np.ndarray) -> np.ndarray:
            x = lo + u * (hi - lo)
            values = dict(zip(names, x))
            r = sqrt_w * np.log(predict_linearized(rows, {**current, **values}) / measured_s)
            if prior:  # log-normal prior around the start: one pseudo-run per parameter
                r = np.concatenate([r, np.sqrt(prior) * np.log(x / centre)])
            return r

        u0 = np.clip((np.array([current[n] for n in names]) - lo) / (hi - lo), 0, 1)
        sol = least_squares(residuals, u0, bounds=(0, 1), x_scale="jac", max_nfev=400,
                            loss=ROBUST_LOSS, f_scale=ROBUST_SCALE)
        current = {**current, **dict(zip(names, (lo + sol.x * (hi - lo)).tolist()))}
        say(f"model round {rnd + 1}/{rounds}: in-sample RMS log error {np.sqrt(np.mean(sol.fun**2)):.4f}")
    return current, names, undetermined


def _fit_corrections(rows, measured_s, op_model, ridge, sqrt_w):
    """Log factor per shape measured in at least MIN_ROWS_PER_SHAPE runs (ridge-penalized)."""
    from scipy.optimize import least_squares

    p = effective_op_model(op_model)
    parts = np.array([row_parts(r, p) for r in rows])  # (n, 2)
    counts: dict[tuple, int] = {}
    for r in rows:
        counts[r.key] = counts.get(r.key, 0) + 1
    keys = sorted((k for k, n in counts.items() if n >= MIN_ROWS_PER_SHAPE), key=repr)
    if not keys:
        return {}
    index = {k: i for i, k in enumerate(keys)}
    ki = np.array([index.get(r.key, len(keys)) for r in rows])  # len(keys): no factor

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = parts[:, 0] * np.exp(np.append(x, 0.0))[ki] + parts[:, 1]
        return np.concatenate([sqrt_w * np.log(pred / measured_s), np.sqrt(ridge) * x])

    sol = least_squares(residuals, np.zeros(len(keys)), method="trf", x_scale=1.0,
                        loss=ROBUST_LOSS, f_scale=ROBUST_SCALE)
    return {k: float(np.exp(v)) for k, v in zip(keys, sol.x)}


def fit(sessions: Sequence[Session], measured_s: np.ndarray, base: ProfileStore, *,
        params: Sequence[str] | None = None, start: dict[str, float] | None = None, rounds: int = 2,
        corrections: bool = True, ridge: float = DEFAULT_RIDGE, weights: np.ndarray | None = None,
        prior: float = 0.0, bounds: dict[str, tuple[float, float]] | None = None,
        progress: Callable[[str], None] | None = None) -> FitResult:
    """Fit ``params`` (default all of :data:`FIT_PARAMS`; an empty list fits none) and per-shape
    corrections to measured times.

    Parameters
    ----------
    sessions : sequence of Session, length n
    measured_s : float array, shape (n,)
        Measured iteration times, seconds.
    base : ProfileStore or function Session -> ProfileStore
        Supplies the device (peaks) and the collective curves; a function gives each
        session its own (runs on several GPU kinds fitted with shared parameters, which
        are fractions of each device's peaks).
    params : sequence of str, optional
        Parameters to fit. One no row's time depends on (its column of
        :func:`parameter_sensitivity` under :data:`MIN_SENSITIVITY` on every row, read off the
        linearization at the start: the Jacobian, not the rows' features, decides) is not
        fitted: it keeps ``base``'s value (``start``'s where given; the start when ``base``
        is a function) and is listed in :attr:`FitResult.not_determined`.
    start : dict, optional
        Starting parameter values (default :data:`FIT_START` for the fitted ones; the others
        keep ``base``'s own values when ``base`` is a store, else the defaults).
    rounds : int
        Re-linearization rounds for each stage.
    corrections : bool
        Fit per-shape factors after the model (stage 4 of the module doc).
    ridge : float
        Weight of the penalty on log factors.
    weights : float array, shape (n,), optional
        Weight of each run in the fit (default 1), e.g. to let a small file
        count as much as a large one.
    prior : float
        Weight of a log-normal prior on each fitted parameter, centred on its start value:
        the residual ``sqrt(prior) * log(value / start)`` joins the runs' log errors, so with
        ``prior=1`` a parameter 20 % off its start costs what one run 20 % off costs. 0 (the
        default) fits the runs alone; the shared fit of a few runs uses
        :data:`core.accuracy.shared_fit.SHARED_PRIOR`.
    bounds : dict, optional
        Bounds that replace :data:`FIT_PARAMS`' for some parameters (the shared fit's
        :data:`core.accuracy.shared_fit.SHARED_BOUNDS`).

    Raises
    ------
    ValueError
        No rows, or a measured time that is not positive.
    """
    measured_s = np.asarray(measured_s, float)
    if len(sessions) == 0 or len(sessions) != measured_s.size:
        raise ValueError("fit needs one measured time per session and at least one session")
    if not np.all(measured_s > 0):
        raise ValueError("measured times must be positive")
    names = list(FIT_PARAMS) if params is None else list(params)
    for n in names:
        param_bounds(n)  # KeyError for a parameter without bounds
    say = progress or (lambda _msg: None)
    # what the runs do not fit keeps the base store's value (a calibrated store keeps its FP8 and
    # all-to-all efficiencies); the fitted ones start at FIT_START, then ``start``
    own = getattr(base, "op_model", None) or {}
    kept = {k: v for k, v in own.items() if k not in names}
    current = effective_op_model({**FIT_START, **kept, **(start or {})})
    # a flex (DeepEP / HybridEP) efficiency that starts tied to the NCCL all-to-all's and that
    # no run pins follows it (core.model.ops.effective_op_model's fallback)
    tied = current["flex_all_to_all_efficiency"] == current["all_to_all_efficiency"]
    sqrt_w = np.sqrt(np.ones(len(sessions)) if weights is None else np.asarray(weights, float))
    # a parameter the rows do not determine keeps the value the base times with
    held = {**(current if callable(base) else effective_op_model(own)), **(start or {})}
    undetermined: dict[str, str] = {}
    if names:
        current, names, undetermined = _fit_globals(sessions, measured_s, base, names, current,
                                                    rounds, say, sqrt_w, prior, bounds, held)
    if tied and "flex_all_to_all_efficiency" not in names:
        current["flex_all_to_all_efficiency"] = current["all_to_all_efficiency"]
    corr: dict[tuple, float] = {}
    if corrections:
        for rnd in range(rounds):
            stores = _FittedStores(base, current, corr)
            rows = [linearize(s, base_of(base, s), current, stores(s)) for s in sessions]
            corr = _fit_corrections(rows, measured_s, current, ridge, sqrt_w)
            say(f"shape round {rnd + 1}/{rounds}: {len(corr)} shape factors")
    stores = _FittedStores(base, current, corr)
    pred = np.array([simulate(s, stores(s)).report.iteration_time_s for s in sessions])
    return FitResult(current, corr, rounds, error_metrics(pred, measured_s), tuple(names),
                     {n: tuple(map(float, param_bounds(n, bounds))) for n in names}, undetermined)


def cross_validate(sessions: Sequence[Session], measured_s: np.ndarray, base: ProfileStore, *,
                   folds: int = 5, seed: int = 0, progress: Callable[[str], None] | None = None,
                   **fit_kw) -> tuple[np.ndarray, dict[str, float]]:
    """k-fold cross-validated predictions: each fold predicted by the simulator fitted on the others.

    Returns
    -------
    predicted_s : float array, shape (n,)
    metrics : dict
        :func:`core.accuracy.metrics.error_metrics` of the out-of-fold predictions.
    """
    # one file: its runs all weigh 1, as in an unweighted fit
    return cross_validate_files([(sessions, measured_s)], 0, base, folds=folds, seed=seed,
                                progress=progress, **fit_kw)


def underdetermined(rows: int, fitted: int) -> str:
    """What a fit of ``fitted`` parameters to fewer ``rows`` is worth: each row pins one
    combination of the parameters at most, so many sets of values match the rows as well."""
    return (f"{rows} rows for {fitted} fitted parameters: the rows cannot pin them all; the "
            "fitted values are one fit among many that match the rows")


def calibrated_store(base: ProfileStore, result: FitResult, data: Sequence[str],
                     cv: dict[str, dict[str, float]],
                     file_weights: Sequence[float] | None = None,
                     residuals: "ResidualTable | None" = None) -> ProfileStore:
    """The calibrated store for ``base``'s device, with provenance (source: the base store
    and the data; data, file weights, parameters, the fitted ones and their bounds, those the
    rows did not determine and why, the rows fitted (``num_rows``; with fewer rows than fitted
    parameters ``underdetermined`` says so, :func:`underdetermined`), CV error) and the out-of-sample ``residuals`` that give
    predictions their error band (:mod:`core.store.interval`). ``vtrain profile show`` names
    a fitted parameter that ended at a bound (:func:`core.accuracy.shared_fit.bound_hits`)."""
    store = apply_fit(base, result.op_model, result.corrections)
    store.residuals = residuals
    rows = int(result.train_metrics.get("n", 0))  # the rows fitted (every file's)
    weights = [1.0] * len(data) if file_weights is None else [float(w) for w in file_weights]
    # the source is where the numbers come from: the base store refitted to the data (without
    # it, ProfileStore.summary() would name the calibrated file itself)
    base_name = (base.path.name if getattr(base, "path", None)
                 else base.provenance.get("source") or base.device_name)
    store.provenance = {
        "method": "calibrated", "source": f"{base_name} fitted to {', '.join(data)}",
        "date": _dt.date.today().isoformat(),
        "base_profile": base.summary(), "data": "; ".join(data),
        "file_weights": {name: w for name, w in zip(data, weights)},
        "parameters": {k: float(v) for k, v in result.op_model.items()},
        "fitted_parameters": list(result.fitted),
        "parameter_bounds": {n: {"low": lo, "high": hi} for n, (lo, hi) in result.bounds.items()},
        "not_determined": dict(result.not_determined),
        "num_shape_factors": len(result.corrections),
        "num_rows": rows,
        "cross_validation": cv,
        "cross_validation_procedure": (
            "k-fold per file; each fold fitted on the other files plus the other folds of this "
            "one, with the file weights above (core.accuracy.calibrate.cross_validate_files)"),
        "fit": "bounded least squares on log(predicted/measured), critical-path linearization, "
               "ridge-penalized per-shape factors (core.accuracy.calibrate)",
    }
    if rows < len(result.fitted):  # each row pins one combination of them at most
        store.provenance["underdetermined"] = underdetermined(rows, len(result.fitted))
    if residuals is not None:
        store.provenance["error_band"] = (
            f"split conformal intervals from the {len(residuals)} out-of-sample residuals in "
            "/residuals (core.store.interval): " + residuals.procedure)
    return store


def scale_transfer(sessions: Sequence[Session], measured_s: np.ndarray, base: ProfileStore, *,
                   progress: Callable[[str], None] | None = None, **fit_kw
                   ) -> tuple[np.ndarray, np.ndarray] | None:
    """Fit on the single-node runs only and predict the multi-node runs.

    The error of that prediction is what extrapolating in scale costs (the
    ``scale_transfer`` residuals of :mod:`core.store.interval`).

    Returns
    -------
    (indices, predicted_s) : int array (k,), float array (k,)
        The multi-node runs among ``sessions`` and their predictions; None
        when there are no single-node or no multi-node runs.
    """
    from core.store.interval import node_class

    cls = np.array([node_class(s.plan.num_gpus, s.cluster.gpus_per_node) for s in sessions])
    single, multi = np.flatnonzero(cls == "single_node"), np.flatnonzero(cls == "multi_node")
    if not single.size or not multi.size:
        return None
    measured_s = np.asarray(measured_s, float)
    (progress or (lambda _m: None))(f"scale transfer: fit on {single.size} single-node runs, "
                                    f"predict {multi.size} multi-node runs")
    res = fit([sessions[i] for i in single], measured_s[single], base, **fit_kw)
    stores = _FittedStores(base, res.op_model, res.corrections)
    return multi, np.array([simulate(sessions[i], stores(sessions[i])).report.iteration_time_s
                            for i in multi])


def calibration_residuals(files: Sequence[tuple[str, Sequence[Session], np.ndarray, Sequence[int]]],
                          cv_predicted: Sequence[np.ndarray | None], base: ProfileStore, *,
                          folds: int | Sequence[int], file_weights: Sequence[float] | None = None,
                          transfer: bool = True,
                          progress: Callable[[str], None] | None = None) -> "ResidualTable | None":
    """The residual table of a calibration: every run's k-fold prediction plus the scale transfer.

    Parameters
    ----------
    files : sequence of (name, sessions, measured_s, rows)
        Per measurement file: its name, usable runs, measured seconds (n,) and
        1-based data rows (n,).
    cv_predicted : sequence of float arrays or None
        Per file, the out-of-fold predictions of :func:`cross_validate_files` (n,); None for
        a file that was not cross-validated (too few rows): it adds no cross-validated rows.
    folds : int or sequence of int
        Folds used, for all files or per file (for the procedure text).
    transfer : bool
        Add the ``scale_transfer`` rows (:func:`scale_transfer`, one more fit).

    Returns
    -------
    ResidualTable or None
        None when no file was cross-validated and there is no scale transfer.
    """
    from core.store.interval import residual_table_from_cv

    weights = ("equal file weights" if file_weights is None else "file weights "
               + ", ".join(f"{n} {w:g}" for (n, *_), w in zip(files, file_weights)))
    per_file = [folds] * len(files) if isinstance(folds, int) else list(folds)
    used = {k for k, pred in zip(per_file, cv_predicted) if pred is not None}
    how = (f"{used.pop()}-fold" if len(used) == 1 else "k-fold ("
           + ", ".join(f"{n}: {k}" for (n, *_), k, pred in zip(files, per_file, cv_predicted)
                       if pred is not None) + " folds)")
    procedure = (f"cross_validated: {how} cross-validation per file, folds from "
                 f"numpy default_rng(0), each fold fitted on the other files plus the other folds "
                 f"({weights}; core.accuracy.calibrate.cross_validate_files)")
    table = None
    for (name, sessions, measured, rows), pred in zip(files, cv_predicted):
        if pred is None:
            continue
        part = residual_table_from_cv(sessions, measured, pred, name, rows, procedure=procedure)
        table = part if table is None else table.concat(part)
    if transfer:
        sessions = [s for _, ss, _, _ in files for s in ss]
        measured = np.concatenate([np.asarray(y, float) for _, _, y, _ in files])
        names = [n for n, ss, _, _ in files for _ in ss]
        rows = [r for _, _, _, rr in files for r in rr]
        got = scale_transfer(sessions, measured, base, progress=progress)
        if got is not None:
            idx, pred = got
            part = residual_table_from_cv([sessions[i] for i in idx], measured[idx], pred,
                                          [names[i] for i in idx], [rows[i] for i in idx],
                                          set_name="scale_transfer")
            table = part if table is None else table.concat(part)
            table.procedure = procedure + ("; scale_transfer: fitted on all single-node runs "
                                           "(weighted equally), predicting every multi-node run")
    return table


__all__ += ["scale_transfer", "calibration_residuals", "underdetermined"]


def measured_sessions(runs: Sequence[MeasuredRun]) -> tuple[list[Session], np.ndarray]:
    """Sessions and measured seconds of the runs that are not skipped and have a measured time
    (a run that measured only memory has none)."""
    used = [m for m in runs if not m.skip_reason and m.has_time]
    return [m.session for m in used], np.array([m.measured_iteration_time_s for m in used])


def balanced_weights(sizes: Sequence[int], shares: Sequence[float] | None = None) -> np.ndarray:
    """Per-run weights that give file ``j`` the share ``shares[j]`` of the total weight.

    Default: equal shares, ``total / (files * size)`` per run. The weights sum
    to the number of runs; shape (sum(sizes),).

    Raises
    ------
    ValueError
        ``shares`` of another length than ``sizes``, or a share that is not a positive finite
        number.
    """
    shares = [1.0] * len(sizes) if shares is None else [float(x) for x in shares]
    if len(shares) != len(sizes) or not all(0 < x < math.inf for x in shares):
        raise ValueError(f"need one positive finite share per file, got {shares} for "
                         f"{len(sizes)} files")
    top = max(shares)  # relative shares: 1e308 and 1e308 are 1 and 1, their sum finite
    shares = [x / top for x in shares]
    total, norm = float(sum(sizes)), sum(shares)
    return np.concatenate([np.full(n, total * (w / norm) / n) for n, w in zip(sizes, shares)])


def cross_validate_files(files: Sequence[tuple[Sequence[Session], np.ndarray]], target: int,
                         base: ProfileStore, *, folds: int = 5, seed: int = 0,
                         shares: Sequence[float] | None = None,
                         progress: Callable[[str], None] | None = None,
                         **fit_kw) -> tuple[np.ndarray, dict[str, float]]:
    """k-fold cross-validation of the several-file fit on file ``target``.

    Each fold fits on every other file plus the other folds of ``target``
    (file ``j`` weighted by ``shares[j]``, default equally, see
    :func:`balanced_weights`) and predicts the held-out fold with the full
    simulator: the out-of-sample error of a store calibrated on all the files.

    Returns
    -------
    predicted_s : float array, shape (len(files[target][0]),)
    metrics : dict
        :func:`core.accuracy.metrics.error_metrics` of the out-of-fold predictions.
    """
    sessions, measured = files[target][0], np.asarray(files[target][1], float)
    if len(sessions) < folds:
        raise ValueError(f"{len(sessions)} rows are fewer than {folds} folds")
    fold_of = np.random.default_rng(seed).permutation(len(sessions)) % folds
    pred = np.empty(len(sessions))
    say = progress or (lambda _msg: None)
    for k in range(folds):
        train = np.flatnonzero(fold_of != k)
        test = np.flatnonzero(fold_of == k)
        parts = [([sessions[i] for i in train], measured[train])]
        parts += [(list(s), np.asarray(y, float)) for j, (s, y) in enumerate(files) if j != target]
        order = [target] + [j for j in range(len(files)) if j != target]
        part_shares = None if shares is None else [shares[j] for j in order]
        res = fit([s for ss, _ in parts for s in ss], np.concatenate([y for _, y in parts]), base,
                  weights=balanced_weights([len(ss) for ss, _ in parts], part_shares), **fit_kw)
        stores = _FittedStores(base, res.op_model, res.corrections)
        for i in test:
            pred[i] = simulate(sessions[i], stores(sessions[i])).report.iteration_time_s
        say(f"fold {k + 1}/{folds}: held-out MAPE "
            f"{error_metrics(pred[test], measured[test])['mape_percent']:.2f}%")
    return pred, error_metrics(pred, measured)


__all__ += ["balanced_weights", "cross_validate_files", "SHARED_FIT_PARAMS", "shared_fit_params",
            "base_of", "param_bounds"]
