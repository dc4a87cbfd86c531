"""Error band of a prediction: conformal intervals from cross-validated residuals.

A calibrated profile store keeps, per measured run it was calibrated on, the
run's out-of-fold prediction: the iteration time predicted by the simulator
fitted *without* that run (k-fold cross-validation, :mod:`core.accuracy.calibrate`).
Their log residuals ``r = log(measured / predicted)`` are the store's error
sample. A new prediction ``T`` gets the interval

    ``[T * exp(r_(i)), T * exp(r_(i + m))]``,  ``m = ceil((n + 1) * (1 - alpha))``,

where ``r_(1) <= ... <= r_(n)`` are the sorted residuals of the plan's group,
``1 - alpha`` is the nominal coverage (default 90 %) and ``i`` picks the
shortest such window. This is split conformal
prediction (Vovk, Gammerman and Shafer 2005; Lei et al. 2018,
"Distribution-free predictive inference for regression", JASA 113(523)) with
the k-fold residuals in place of a held-out calibration set (the "CV" interval
of Barber et al. 2021, "Predictive inference with the jackknife+", Ann. Stat.
49(1)), and the shortest window instead of the equal-tailed one: a new
exchangeable residual falls between ``r_(i)`` and ``r_(i+m)`` for any fixed
``i`` with probability ``m/(n+1) >= 1 - alpha`` (its rank among the ``n + 1``
is uniform); choosing ``i`` from the same residuals makes that approximate,
so the coverage is checked on held-out folds instead (docs/accuracy.md). Shortest rather
than equal-tailed because the multi-node residuals have a heavy right tail
(a few runs 45-90 % slower than every model): equal tails put the upper bound
inside that tail (+62 %), the shortest window leaves the tail outside and
keeps the band informative (-6 % / +20 %) at the same measured coverage. The
window is asymmetric around 0 when the model is biased for a group.

Groups follow what drives the error:

* ``single_node`` (world size <= GPUs per node) and ``multi_node`` runs are
  separate samples (the multi-node error is about three times the
  single-node one on the A100 data);
* a plan whose GPU count or model size lies outside the range of its node
  class's calibration runs is *outside the calibration range* and says so.
  Its band is the hull of its node class's band and the band of the
  ``scale_transfer`` residuals (a fit on the single-node runs predicting the
  multi-node runs: the error measured when the calibration data is 8-64 times
  smaller in GPU count and tens of times smaller in model size than the
  predicted runs). On the A100 data that transfer under-predicts every time
  (by 4 % to 79 % at 90 %); a store fitted on both files need not share the
  bias, so the hull keeps the in-range band's lower side. Its coverage that
  far out is not established, and the note says so. A store without
  scale-transfer residuals gives no band for such a plan.

Within a node class, a table with the run features
(:data:`core.store.residuals.FEATURE_COLUMNS`) gives each plan the residuals of calibration
runs *like it*: the same GPU kind, model family, precision, use of context and expert
parallelism and recompute mode, the conditions tried in the order of the residual spread
they explain (:func:`core.store.calibration_range.condition_order`, computed on the node
class's residuals) and each applied only where at least
:data:`~core.store.calibration_range.MIN_LIKE_RUNS` runs remain
(:func:`core.store.calibration_range.conditioned_rows`). When those runs are at least the
conformal minimum (:func:`min_residuals`), the band is theirs alone (a Mondrian conformal
band, Vovk et al. 2005, ch. 4). When fewer (too few for a distribution-free band of their
own), the band is the normal-theory prediction interval of one more residual from theirs
(:func:`normal_prediction_bounds`: ``mean +- t * sd * sqrt(1 + 1/k)`` over the k like runs'
log residuals; Hahn and Meeker 1991, "Statistical Intervals", Sec. 4.7): it assumes their log
residuals normal, a guarantee conformal prediction does not need, so its coverage is the one
measured on held-out folds (docs/accuracy.md "Error band": 88.5-92.3 % at 90 % on the modern
stores' runs, where the normalized conformal band it replaced, each residual scaled by its like
runs' root mean square, covered 84.6-96.2 % at nearly twice the width). The band names the
conditions applied, those left out and how many like runs it rests on
(:attr:`PredictionInterval.like_runs`). The plan's features outside the calibration runs
(:func:`core.store.calibration_range.feature_departures`) are listed with the band, and so
is a predicted throughput above every calibration run of the plan's GPU kind and precision
class (its model FLOPs per GPU over the predicted time against the runs' measured ones,
:func:`core.store.calibration_range.throughput_departure`; a table with the
``model_flops_per_gpu`` column), a departure like the others. A table without the features (stores written before them) groups by node class only,
as above; so does a table whose runs share every condition (the A100 store).

A plan with such departures keeps that band when the table has no ``feature_transfer``
residuals (the modern stores: their runs cover most features; the note says its coverage for
the plan is not established). With them (the A100 store since 2026-12-05:
the out-of-fold predictions of the 30 published runs on modern GPUs, with FlashAttention, no
or selective recomputation, BF16 and FP8, cp and ep, which none of the A100 runs had;
``scripts/feature_transfer.py``), the band is the hull of the in-range band and the band of
those residuals' runs like the plan (the conditions, minimum and normal-theory fallback of the
like runs above, on that set's own rows: a dense plan is not given the MoE runs' errors), as
the scale-transfer residuals do for size, and the note says so;
its coverage for the plan is not established either. A plan both outside the range and
departing gets the hull of all three. The ``feature_transfer`` rows are never the store's
calibration runs: its range, features, like runs and held-out check (:func:`cross_conformal`)
ignore them.

A store without residuals (an analytic or measured store) gives no interval
and says why; no band is ever made up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from core.store.calibration_range import (MIN_LIKE_RUNS, Departure, condition_key,
                                          condition_order, conditioned_rows, feature_departures,
                                          plan_features, unchecked_note)
from core.store.residuals import (FEATURE_COLUMNS, NODE_CLASSES, RESIDUAL_SETS,
                                  THROUGHPUT_COLUMN, ResidualTable, node_class)

if TYPE_CHECKING:  # pragma: no cover
    from core.plan.session import Session
    from core.store.profile_store import ProfileStore

__all__ = ["DEFAULT_COVERAGE", "RESIDUAL_SETS", "NODE_CLASSES", "ResidualTable",
           "PredictionInterval", "conformal_bounds", "node_class", "interval_for",
           "interval_factors", "cross_conformal", "cross_conformal_intervals", "check_coverage",
           "residual_table_from_cv"]

#: Nominal coverage of the band when none is asked for.
DEFAULT_COVERAGE = 0.9
def check_coverage(coverage: float) -> float:
    """``coverage`` as a float in (0, 1); ValueError naming the rule otherwise."""
    try:
        c = float(coverage)
    except (TypeError, ValueError):
        raise ValueError(f"coverage {coverage!r} must be a number between 0 and 1") from None
    if not (0.0 < c < 1.0) or math.isnan(c):
        raise ValueError(f"coverage {coverage!r} must lie strictly between 0 and 1 (e.g. 0.9)")
    return c


def layer_parameters(model) -> float:
    """Parameters of a model's transformer layers: its size for the calibration range.

    ``L`` times the family's layer parameters (:mod:`core.model.model_math`), without
    the embedding, positions, final norm and output layer: two models with the
    same layers trained at other sequence lengths or vocabularies do the same
    work per token in their layers, so they are the same size here. GPT:
    ``L*(4h^2 + 2hf + f + 9h)``. MoE layers count their active parameters (the router,
    ``moe_top_k`` experts and the shared experts: the work per token).
    """
    from core.model.families import family_of
    from core.model.moe import moe_layer_parameters, num_moe_layers

    n_moe = num_moe_layers(model)
    out = (model.num_layers - n_moe) * sum(family_of(model).layer_parameters(model))
    if n_moe:
        moe = moe_layer_parameters(model)
        out += n_moe * (moe.sharded + moe.replicated + model.moe_top_k * moe.expert)
    return float(out)


def conformal_bounds(sorted_residuals: np.ndarray, coverage: float) -> tuple[float, float] | None:
    """Split conformal bounds ``(r_(i), r_(i+m))`` of sorted residuals: the shortest window
    spanning ``m = ceil((n+1)*coverage)`` gaps between consecutive order statistics.

    A new exchangeable residual has a uniform rank among the ``n + 1``, so it
    falls between ``r_(i)`` and ``r_(i+m)`` with probability ``m/(n+1) >=
    coverage`` for any fixed ``i`` (Lei et al. 2018, Sec. 2.1; the equal-tailed
    window is ``i = floor((n+1)*alpha/2)``); the shortest window is picked (ties:
    the lowest). Returns None when there are too few residuals for the coverage
    (``m > n - 1``, i.e. ``n < (1 + c)/(1 - c)``: a bound would be infinite).
    """
    r = np.asarray(sorted_residuals, dtype=np.float64)
    c = check_coverage(coverage)
    n = r.size
    m = math.ceil((n + 1) * c - 1e-9)
    if m > n - 1:
        return None
    widths = r[m:] - r[:n - m]  # window i (0-based) spans r[i] .. r[i+m]
    i = int(np.argmin(widths))
    return float(r[i]), float(r[i + m])


def min_residuals(coverage: float) -> int:
    """Fewest residuals that give a finite band at ``coverage``: ``ceil((1 + c) / (1 - c))``."""
    c = check_coverage(coverage)
    return math.ceil((1.0 + c) / (1.0 - c) - 1e-9)


@dataclass(frozen=True)
class PredictionInterval:
    """The error band of one predicted iteration time.

    Attributes
    ----------
    coverage : float
        Nominal coverage, 0..1 (share of runs whose measured time should fall inside).
    low_s, high_s : float or None
        The band in seconds; None when there is none (``note`` says why).
    low_factor, high_factor : float or None
        ``low_s / predicted``, ``high_s / predicted``: every figure proportional to the
        iteration time (training days, GPU-hours, dollars) has the band ``value * factor``.
    group : str
        Residual group(s) the band came from (``single_node``, ``multi_node``,
        ``<node class>+scale_transfer`` outside the calibration range, ``+feature_transfer``
        appended for a plan with features outside the calibration runs when the table has that
        set), "" when none.
    num_residuals : int
        Size of those groups.
    in_calibration_range : bool or None
        Whether the plan's GPU count and model size lie within the calibration
        runs of its node class; None when the store has no residuals. Its features are
        :attr:`departures`; both together: :attr:`within_calibration`.
    note : str
        Why there is no band, or that the plan is outside the calibration range; "" otherwise.
    departures : tuple of Departure
        The plan's features outside the store's calibration runs
        (:func:`core.store.calibration_range.feature_departures`); empty when the store's
        residuals have no feature columns.
    conditioned_on, not_conditioned_on : tuple of str
        The conditions (:data:`core.store.calibration_range.CONDITIONS`) the band's residuals
        share with the plan, in the order applied, and those left out because too few runs
        like the plan exist; both empty without feature columns.
    like_runs : int
        Calibration runs sharing :attr:`conditioned_on` with the plan: the band's own residuals
        when as many as :attr:`num_residuals` (or the conformal minimum); when fewer, the band
        is their normal-theory prediction interval (module doc). 0 without feature columns.
    """

    coverage: float
    low_s: float | None
    high_s: float | None
    low_factor: float | None
    high_factor: float | None
    group: str = ""
    num_residuals: int = 0
    in_calibration_range: bool | None = None
    note: str = ""
    departures: tuple[Departure, ...] = ()
    conditioned_on: tuple[str, ...] = ()
    not_conditioned_on: tuple[str, ...] = ()
    like_runs: int = 0

    @property
    def available(self) -> bool:
        """True when there is a band."""
        return self.low_s is not None

    @property
    def within_calibration(self) -> bool:
        """False when the plan leaves what the store was calibrated on: its GPU count or model
        size (:attr:`in_calibration_range` False) or any feature (:attr:`departures`)."""
        return self.in_calibration_range is not False and not self.departures

    @property
    def departure_text(self) -> str:
        """The departures as one clause each, joined by "; " ("" when none)."""
        return "; ".join(d.text for d in self.departures)

    def band(self, value: float) -> tuple[float, float] | None:
        """``(low, high)`` of a figure proportional to the iteration time, or None."""
        if self.low_factor is None or self.high_factor is None:
            return None
        return value * self.low_factor, value * self.high_factor

    def to_dict(self) -> dict:
        """JSON-able dict of the attributes (departures as dicts, conditions as lists), with
        ``within_calibration`` (:attr:`within_calibration`: false when the GPU count or model
        size is outside the calibration range or any feature departs, as the sweep rows'
        column; None when the store has no residuals, like ``in_calibration_range``):
        ``in_calibration_range`` covers the GPU count and model size only."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["within_calibration"] = (None if self.in_calibration_range is None
                                     else self.within_calibration)
        out["departures"] = [d.to_dict() for d in self.departures]
        out["conditioned_on"] = list(self.conditioned_on)
        out["not_conditioned_on"] = list(self.not_conditioned_on)
        return out


def _fmt_params(n: float) -> str:
    return f"{n / 1e12:.3g} T" if n >= 1e12 else f"{n / 1e9:.3g} B"


def _range_note(cls: str, num_gpus: int, num_params: float,
                rng: tuple[int, int, float, float] | None) -> str:
    """"" when inside ``rng``, else which quantity is outside and the calibrated range."""
    what = "single-node" if cls == "single_node" else "multi-node"
    if rng is None:
        return f"no {what} runs were calibrated"
    g0, g1, n0, n1 = rng
    parts = []
    if not g0 <= num_gpus <= g1:
        parts.append(f"{num_gpus:,} GPUs (calibrated {what} runs: {g0:,}-{g1:,})")
    if not n0 * (1 - 1e-9) <= num_params <= n1 * (1 + 1e-9):
        parts.append(f"{_fmt_params(num_params)} layer parameters (calibrated {what} runs: "
                     f"{_fmt_params(n0)}-{_fmt_params(n1)})")
    return " and ".join(parts)


def _no_band(coverage: float, note: str, in_range: bool | None = None, group: str = "",
             n: int = 0, departures: tuple = ()) -> PredictionInterval:
    return PredictionInterval(coverage, None, None, None, None, group, n, in_range, note,
                              departures)


def interval_for(table: ResidualTable | None, predicted_s: float, num_gpus: int,
                 gpus_per_node: int, layer_params: float, coverage: float = DEFAULT_COVERAGE,
                 store_name: str = "the profile store", features: dict | None = None
                 ) -> PredictionInterval:
    """The band of a predicted iteration time (see the module doc for the method).

    Parameters
    ----------
    table : ResidualTable or None
        The store's residuals (:attr:`core.store.profile_store.ProfileStore.residuals`).
    predicted_s : float
        Predicted iteration time, seconds.
    num_gpus, gpus_per_node : int
        World size of the plan and GPUs per node of its cluster.
    layer_params : float
        Model size as its transformer layers' parameters (:func:`layer_parameters`).
    coverage : float
        Nominal coverage in (0, 1).
    store_name : str
        How notes name the store.
    features : dict, optional
        The plan's features (:func:`core.store.calibration_range.plan_features`): with a table
        that has the feature columns, the band is conditioned on them and the features
        outside the calibration runs are listed; None: grouped by node class only. With
        ``"model_flops_per_gpu"`` (the plan's model FLOPs per GPU per iteration) and
        optionally ``"mfu_peak_flops"`` (its MFU peak, FLOP/s per GPU), a plan predicted
        faster than every calibration run of its GPU kind and precision class departs too
        (:func:`core.store.calibration_range.throughput_departure`; :func:`session_interval`
        adds both).

    Raises
    ------
    ValueError
        ``coverage`` outside (0, 1).
    """
    coverage = check_coverage(coverage)
    if table is None or len(table) == 0:
        return _no_band(coverage, f"no error band: {store_name} holds no cross-validated "
                                  "residuals (a store gets them from vtrain calibrate with "
                                  "cross-validation on measured runs)")
    cls = node_class(num_gpus, gpus_per_node)
    outside = _range_note(cls, num_gpus, layer_params, table.calibration_range(cls))
    groups = table.groups()
    departures = feature_departures(table, features, predicted_s)
    used: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    like = 0
    normal: tuple[float, float] | None = None  # the like runs' normal-theory bounds
    if features is not None and table.has_features and cls in groups:
        sample, used, dropped, like = _like_residuals(table, cls, features, coverage)
        if isinstance(sample, tuple):
            normal = sample
        else:
            groups[cls] = sample
    note = f"outside the calibration range: {outside}" if outside else ""
    if departures:
        note += ("; " if note else "") + ("outside the calibration runs' features: "
                                          + "; ".join(d.text for d in departures))
    unchecked = unchecked_note(table, store_name) if features is not None else ""
    if unchecked:  # a table written before the feature columns: say what was not compared
        note += ("; " if note else "") + unchecked
    transfer = bool(departures) and "feature_transfer" in groups
    transfer_normal: tuple[float, float] | None = None
    transfer_used: tuple[str, ...] = ()
    transfer_like = 0
    if transfer and features is not None and table.has_features:
        # the transfer runs like the plan (dense or MoE, family, ...), as within the class
        sample, transfer_used, _, transfer_like = _like_sample(
            table, table.set == "feature_transfer", "_condition_order_feature_transfer",
            features, coverage)
        if isinstance(sample, tuple):
            transfer_normal = sample
        else:
            groups["feature_transfer"] = sample
    names = [cls] + (["scale_transfer"] if outside else []) + (["feature_transfer"] if transfer
                                                               else [])
    if outside and "scale_transfer" not in groups:
        return _no_band(coverage, note + f"; no error band: {store_name} has no "
                                         "scale-transfer residuals", False, departures=departures)
    bounds, sizes = [], 0
    for group in names:
        r = groups.get(group, np.empty(0))
        b = (normal if group == cls and normal is not None
             else transfer_normal if group == "feature_transfer" and transfer_normal is not None
             else conformal_bounds(r, coverage))
        if b is None and group == cls and outside and cls not in groups:
            continue  # no runs of this node class at all: the transfer band alone
        if b is None:
            return _no_band(coverage, (note + "; " if note else "") +
                            f"no error band: a {coverage:.0%} band needs at least "
                            f"{min_residuals(coverage)} {group.replace('_', '-')} residuals, "
                            f"{store_name} has {r.size}", not outside, group, int(r.size),
                            departures)
        bounds.append(b)
        sizes += int(r.size)
    group = "+".join(g for g in names if g in groups)
    if outside or transfer:
        hull = ["the in-range band"]
        if outside:
            hull.append("the scale-transfer residuals' band (a single-node fit predicting "
                        "multi-node runs)")
        if transfer:
            like_text = (f"; {transfer_like} of them like the plan by "
                         + ", ".join(c.replace("_", " ") for c in transfer_used)
                         + (", a normal-theory band" if transfer_normal is not None else "")
                         if transfer_like < int((table.set == "feature_transfer").sum())
                         else "")
            hull.append("the feature-transfer residuals' band (" + _FEATURE_TRANSFER
                        + like_text + ")")
        note += ("; the band is the hull of " + ", ".join(hull[:-1]) + " and " + hull[-1]
                 + "; its coverage this far out is not established")
    elif departures:
        note += ("; the band is that of calibration runs without these features: its coverage "
                 "for a plan with them is not established")
    lo = math.exp(min(b[0] for b in bounds))
    hi = math.exp(max(b[1] for b in bounds))
    return PredictionInterval(coverage, predicted_s * lo, predicted_s * hi, lo, hi, group,
                              sizes, not outside, note, departures, used, dropped, like)


#: What the ``feature_transfer`` residuals are, for the notes.
_FEATURE_TRANSFER = ("other runs, with features this store's calibration runs lack, each "
                     "predicted by a fit without it")


def _like_residuals(table: ResidualTable, cls: str, features: dict, coverage: float
                    ) -> tuple[np.ndarray | tuple[float, float], tuple[str, ...],
                               tuple[str, ...], int]:
    """A plan's band within node class ``cls`` (module doc): the like runs' own sorted
    residuals when they are the whole class or at least :func:`min_residuals` (for
    :func:`conformal_bounds`), else the bounds of their :func:`normal_prediction_bounds`.
    Returns it with the conditions applied, those left out and the like runs."""
    base = (table.set == "cross_validated") & (table.node_class == cls)
    return _like_sample(table, base, f"_condition_order_{cls}", features, coverage)


def _like_sample(table: ResidualTable, base: np.ndarray, key: str, features: dict,
                 coverage: float) -> tuple[np.ndarray | tuple[float, float], tuple[str, ...],
                                           tuple[str, ...], int]:
    """:func:`_like_residuals` over the rows ``base`` (bool (n,)) of ``table``, the conditions'
    order cached on the table under ``key``."""
    r = table.log_residual
    if key not in table.__dict__:  # once per table and sample (a sweep asks per plan)
        table.__dict__[key] = condition_order(table, base)
    order = table.__dict__[key]
    rows, used, dropped = conditioned_rows(table, base, features, MIN_LIKE_RUNS, order)
    like = int(rows.sum())
    if like == int(base.sum()) or like >= min_residuals(coverage):
        return np.sort(r[rows]), used, dropped, like
    return normal_prediction_bounds(r[rows], coverage), used, dropped, like


def normal_prediction_bounds(residuals: np.ndarray, coverage: float) -> tuple[float, float]:
    """The two-sided normal-theory prediction interval of one more log residual from ``k``
    like runs' log residuals ``residuals`` (float (k,), k >= 2):
    ``mean -+ t_{(1+c)/2, k-1} * sd * sqrt(1 + 1/k)``, ``sd`` the sample standard deviation
    (ddof 1) and ``t`` Student's quantile with ``k - 1`` degrees of freedom (Hahn and Meeker
    1991, "Statistical Intervals", Sec. 4.7; exact when the residuals are normal and
    independent). The mean keeps the like runs' bias: a group the model under-predicts gets
    a band above the prediction.

    Raises
    ------
    ValueError
        Fewer than two residuals (no spread), or ``coverage`` outside (0, 1).
    """
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats.t.ppf's kernel,
    # without scipy.stats' import time: the CLI's start-up)

    x = np.asarray(residuals, dtype=np.float64)
    c = check_coverage(coverage)
    k = x.size
    if k < 2:
        raise ValueError(f"a prediction interval needs at least 2 residuals, got {k}")
    half = float(stdtrit(k - 1, 0.5 + c / 2)) * float(x.std(ddof=1)) * math.sqrt(1 + 1 / k)
    mean = float(x.mean())
    return mean - half, mean + half


def interval_factors(table: ResidualTable | None, num_gpus: np.ndarray, gpus_per_node: int,
                     layer_params: float, coverage: float = DEFAULT_COVERAGE,
                     features: Sequence[dict] | None = None,
                     feature_index: np.ndarray | None = None,
                     above_ceiling: np.ndarray | None = None,
                     predicted_s: np.ndarray | None = None,
                     model_flops_per_gpu: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorized :func:`interval_for` over plans of one model (a sweep's rows).

    ``features`` (one :func:`~core.store.calibration_range.plan_features` dict per plan,
    optional) conditions each plan's band as :func:`interval_for` does. With
    ``feature_index`` (int (n,)), ``features`` are distinct dicts and plan ``i`` has
    ``features[feature_index[i]]`` (a sweep's plans share a few hundred).

    ``above_ceiling`` (bool (n,), with ``features``): the plans predicted faster than their
    throughput ceiling (:func:`core.store.calibration_range.throughput_departure`), with their
    ``predicted_s`` and ``model_flops_per_gpu`` (float (n,) each): such a plan's factors are
    those of :func:`interval_for` given its time and FLOPs (a departure: with a
    ``feature_transfer`` set, the hull with that set's band).

    The factors of a plan depend only on its :func:`band_key` (node class, inside the
    calibration range or not, and the values the conditions compare,
    :func:`core.store.calibration_range.condition_key`): :func:`interval_for` runs once per
    distinct key, on the first plan that has it, and numpy spreads its factors to the
    others. The same numbers as :func:`interval_for` of each plan, bit for bit (tests).

    Returns
    -------
    low_factor, high_factor : float arrays, shape (n,)
        Multiply a predicted time by them; NaN where there is no band.
    in_range : bool array, shape (n,)
        Plans inside the calibration range (False everywhere without residuals).

    Raises
    ------
    ValueError
        ``coverage`` outside (0, 1) (when there is a plan).
    """
    g = np.asarray(num_gpus, dtype=np.int64)
    flat = g.reshape(-1)
    lo, hi, inside = np.full(g.shape, np.nan), np.full(g.shape, np.nan), np.zeros(g.shape, bool)
    if not flat.size:
        return lo, hi, inside
    conditioned = features is not None and table is not None and table.has_features
    distinct: Sequence[dict | None] = [None]
    index = np.zeros(flat.size, np.int64)
    if conditioned:
        if feature_index is None:
            distinct, index = distinct_features(features)
        else:
            distinct, index = features, np.asarray(feature_index, np.int64).reshape(-1)
    codes: dict = {}
    fkeys = [_feature_key(table, f) if f is not None else None for f in distinct]
    cond = np.array([codes.setdefault(k, len(codes)) for k in fkeys], np.int64)[index]
    above = (np.zeros(flat.size, bool) if above_ceiling is None or not conditioned
             else np.asarray(above_ceiling, bool).reshape(-1))
    if above.any():  # a throughput departure is a departure: the key of a departing plan
        departing = {}
        for k in fkeys:
            key = (k[0], True if k[1] is not None else None)
            departing[k] = codes.setdefault(key, len(codes))
        forced = np.array([departing[k] for k in fkeys], np.int64)[index]
        cond = np.where(above, forced, cond)
    counts, count_of = np.unique(flat, return_inverse=True)
    count_codes: dict = {}
    per_count = np.array([count_codes.setdefault(
        _count_key(table, int(c), gpus_per_node, layer_params), len(count_codes))
        for c in counts.tolist()], np.int64)
    key = per_count[count_of.reshape(-1)] * len(codes) + cond
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    k_lo, k_hi = np.full(first.size, np.nan), np.full(first.size, np.nan)
    k_in = np.zeros(first.size, bool)
    for k, i in enumerate(first.tolist()):
        f = distinct[int(index[i])] if conditioned else None
        t = 1.0
        if above[i]:
            f = {**f, THROUGHPUT_COLUMN: float(np.reshape(model_flops_per_gpu, -1)[i])}
            t = float(np.reshape(predicted_s, -1)[i])
        iv = interval_for(table, t, int(flat[i]), gpus_per_node, layer_params, coverage,
                          features=f)
        if iv.available:
            k_lo[k], k_hi[k] = iv.low_factor, iv.high_factor
        k_in[k] = bool(iv.in_calibration_range)
    inverse = inverse.reshape(-1)
    lo.reshape(-1)[:] = k_lo[inverse]
    hi.reshape(-1)[:] = k_hi[inverse]
    inside.reshape(-1)[:] = k_in[inverse]
    return lo, hi, inside


def band_key(table: ResidualTable | None, num_gpus: int, gpus_per_node: int,
             layer_params: float, features: dict | None = None) -> tuple:
    """What the factors of :func:`interval_for` (``low_factor``, ``high_factor``,
    ``in_calibration_range``) read of a plan: its node class and whether its GPU count and
    model size lie in the calibration range of that class (``()`` for a table without
    residuals: every plan the same), and with features and a table with feature columns the
    values the conditions compare (:func:`core.store.calibration_range.condition_key`). Two
    plans with the same key get the same factors; their notes can differ (the departures
    and the range named in words). With a ``feature_transfer`` set in the table, whether the
    plan has any feature outside the calibration runs is part of the key (such a plan's band
    is the hull with that set's band)."""
    cond = (_feature_key(table, features) if features is not None and table is not None
            and table.has_features else None)
    return _count_key(table, num_gpus, gpus_per_node, layer_params), cond


def _feature_key(table: ResidualTable, features: dict) -> tuple:
    """The part of :func:`band_key` a plan's features decide: the values the conditions compare
    (:func:`core.store.calibration_range.condition_key`), and with a ``feature_transfer`` set in
    ``table`` whether any feature departs (:func:`core.store.calibration_range.feature_departures`;
    None without the set, where departures do not change the factors)."""
    key = "_has_feature_transfer"  # once per table (a sweep asks per distinct features)
    if key not in table.__dict__:
        table.__dict__[key] = table.has_set("feature_transfer")
    departs = bool(feature_departures(table, features)) if table.__dict__[key] else None
    return condition_key(features), departs


def _count_key(table: ResidualTable | None, num_gpus: int, gpus_per_node: int,
               layer_params: float) -> tuple:
    """The part of :func:`band_key` a plan's GPU count decides: ``(node class, outside the
    calibration range)``, ``()`` without residuals."""
    if table is None or len(table) == 0:
        return ()
    cls = node_class(num_gpus, gpus_per_node)
    return cls, bool(_range_note(cls, num_gpus, layer_params, table.calibration_range(cls)))


def distinct_features(features: Sequence[dict]) -> tuple[list[dict], np.ndarray]:
    """The distinct dicts of ``features`` (first of each, compared by their items) and each
    one's index into them (int64 (n,)): a sweep's plans share a few hundred feature dicts."""
    seen: dict = {}
    distinct: list[dict] = []
    index = np.empty(len(features), np.int64)
    for i, f in enumerate(features):
        k = tuple(sorted(f.items()))
        j = seen.get(k)
        if j is None:
            j = seen[k] = len(distinct)
            distinct.append(f)
        index[i] = j
    return distinct, index


def plan_departures(table: ResidualTable | None, features: Sequence[dict]) -> list[str]:
    """Per plan (a sweep's rows), the features outside the calibration runs of ``table`` as
    one text (:attr:`PredictionInterval.departure_text`; "" when none, and for every plan of
    a table without feature columns)."""
    memo: dict = {}
    out = []
    for f in features:
        key = tuple(sorted(f.items()))
        if key not in memo:
            memo[key] = "; ".join(d.text for d in feature_departures(table, f))
        out.append(memo[key])
    return out


def cross_conformal(table: ResidualTable, coverage: float = DEFAULT_COVERAGE, folds: int = 5,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Held-out-fold bands of a table's own rows: each fold's bands come from the other folds.

    Rows are split into ``folds`` random folds (``numpy.random.default_rng(seed)``);
    a held-out row gets :func:`interval_for` with the table of the other folds'
    rows, so its residual never enters its own band. This is how the band's
    coverage is checked on data (tests, ``vtrain validate --cross-validate``).

    ``feature_transfer`` rows are left out of the check altogether: they are another store's
    runs, not this store's, so they are neither held out nor in any fold's table, and the
    folds (a permutation of the other rows) are those of the table without them. They get no
    band (NaN). So a table's figures are the same with and without that set.

    Returns
    -------
    low_s, high_s : float arrays, shape (n,)
        NaN where a row gets no band (:func:`cross_conformal_intervals` says why).
    """
    ivs = cross_conformal_intervals(table, coverage, folds, seed)
    low = np.array([iv.low_s if iv.available else np.nan for iv in ivs], dtype=float)
    high = np.array([iv.high_s if iv.available else np.nan for iv in ivs], dtype=float)
    return low, high


def cross_conformal_intervals(table: ResidualTable, coverage: float = DEFAULT_COVERAGE,
                              folds: int = 5, seed: int = 0) -> list[PredictionInterval]:
    """:func:`cross_conformal`'s interval of each row of ``table`` (length ``len(table)``), with
    its note where it has no band (too few residuals in the other folds, a ``feature_transfer``
    row ...)."""
    coverage = check_coverage(coverage)
    own = np.flatnonzero(table.set != "feature_transfer")
    out: list[PredictionInterval | None] = [
        _no_band(coverage, "no held-out band: a feature-transfer row (another store's run) is "
                           "not one of the table's own runs")] * len(table)
    mine = table.subset(own) if own.size < len(table) else table
    fold_of = np.random.default_rng(seed).permutation(len(mine)) % folds
    for k in range(folds):
        others = mine.subset(fold_of != k)
        for i in np.flatnonzero(fold_of == k):
            out[int(own[i])] = interval_for(
                others, float(mine.predicted_s[i]), int(mine.num_gpus[i]),
                int(mine.gpus_per_node[i]), float(mine.layer_parameters[i]), coverage,
                store_name="the other folds' table", features=mine.row_features(i))
    return out  # type: ignore[return-value]  (every row is in one fold or a transfer row)


def residual_table_from_cv(sessions: Sequence["Session"], measured_s: np.ndarray,
                           predicted_s: np.ndarray, file: str | Sequence[str], rows: Sequence[int],
                           set_name: str = "cross_validated", procedure: str = "") -> ResidualTable:
    """A :class:`ResidualTable` of out-of-sample predictions of measured runs.

    Parameters
    ----------
    sessions : sequence of Session, length n
        The runs' plans (world size, GPUs per node and model size are taken from them).
    measured_s, predicted_s : float arrays, shape (n,)
    file : str or sequence of str
        Measurement file name (one for all runs, or one per run).
    rows : sequence of int, length n
        1-based data rows of the runs in ``file``.
    set_name : str
        One of :data:`RESIDUAL_SETS`.
    """
    feats = [plan_features(s) for s in sessions]
    return ResidualTable(
        [set_name] * len(sessions), [file] * len(sessions) if isinstance(file, str) else list(file),
        list(rows),
        [s.plan.num_gpus for s in sessions], [s.cluster.gpus_per_node for s in sessions],
        [layer_parameters(s.model) for s in sessions], measured_s, predicted_s,
        procedure=procedure, **{c: [f[c] for f in feats] for c in FEATURE_COLUMNS},
        model_flops_per_gpu=[model_flops_per_gpu(s.model, s.plan) for s in sessions])


def model_flops_per_gpu(model, plan) -> float:
    """Model FLOPs of one iteration per GPU: :func:`core.model.counts.model_flops_per_iteration`
    (Megatron's model-FLOP count, Narayanan et al. 2021 Eq. 3, the count MFU divides) over
    the world size ``plan.num_gpus``. Over an iteration time, the model FLOP/s per GPU."""
    from core.model import model_math
    return model_math.model_flops_per_iteration(model, plan) / plan.num_gpus


def session_interval(session: "Session", predicted_s: float, store: "ProfileStore",
                     coverage: float = DEFAULT_COVERAGE) -> PredictionInterval:
    """:func:`interval_for` of a session's plan with ``store``'s residuals: its features, its
    model FLOPs per GPU (:func:`model_flops_per_gpu`) and MFU peak
    (:func:`core.sim.costing.mfu_peak_flops`, left out where the store has none) for the
    throughput ceiling."""
    features = {**plan_features(session),
                THROUGHPUT_COLUMN: model_flops_per_gpu(session.model, session.plan)}
    from core.plan.parallel import gemm_peak_dtype  # mfu_peak_flops' dtype (core.sim.costing)
    peak = getattr(store, "peak_flops", {}).get(gemm_peak_dtype(session.plan))
    if peak:  # no peak for the dtype: the departure without MFUs
        features["mfu_peak_flops"] = float(peak)
    return interval_for(getattr(store, "residuals", None), predicted_s, session.plan.num_gpus,
                        session.cluster.gpus_per_node, layer_parameters(session.model),
                        coverage, store_name=f"the {store.device_name} profile store "
                        f"({store.provenance.get('method', 'unknown method')})",
                        features=features)


__all__ += ["distinct_features", "min_residuals", "normal_prediction_bounds", "session_interval",
            "layer_parameters",
            "plan_departures", "band_key", "model_flops_per_gpu"]


def interval_line(iv: PredictionInterval) -> str:
    """One line for reports: where the band comes from, or why there is none.

    E.g. ``"90 % of runs like this one within -3.1 % / +4.2 % (65 multi-node
    residuals)"``, followed by the note when the plan is outside the calibration range.
    """
    if not iv.available:
        return iv.note
    like = band_conditions(iv)
    line = (f"{iv.coverage:.0%} of runs like this one within {100 * (iv.low_factor - 1):+.1f} % / "
            f"{100 * (iv.high_factor - 1):+.1f} % of the prediction ({iv.num_residuals} "
            f"{iv.group.replace('_', '-')} residuals{', ' + like if like else ''})")
    return line + (f"; {iv.note}" if iv.note else "")


def band_conditions(iv: PredictionInterval) -> str:
    """Which runs the band's residuals are, e.g. ``"runs with the same GPU, family (too few
    with the same precision, recompute)"``, or ``"a normal-theory band of 12 runs with the same
    family, ..."`` when those runs are too few for a band of their own without assumptions
    (module doc); "" for a band grouped by node class only."""
    if not (iv.conditioned_on or iv.not_conditioned_on):
        return ""
    scaled = iv.conditioned_on and 0 < iv.like_runs < min(iv.num_residuals,
                                                          min_residuals(iv.coverage))
    out = (f"a normal-theory band of {iv.like_runs} " if scaled else "") + "runs with the same " + (
        ", ".join(_COND_NAMES[c] for c in iv.conditioned_on) or "node class only")
    if iv.not_conditioned_on:
        out += (" (too few with the same "
                + ", ".join(_COND_NAMES[c] for c in iv.not_conditioned_on) + ")")
    return out


_COND_NAMES = {"gpu": "GPU", "family": "family", "precision": "precision", "cp": "cp use",
               "ep": "ep use", "recompute": "recompute"}


__all__ += ["interval_line", "band_conditions"]
