"""What a store was calibrated on, feature by feature, and the residuals of runs like a plan.

What belongs here: the features of a plan that drive the simulator's error
(:func:`plan_features`: GPU kind, model family, precision with its FP8 recipe, recompute
mode, pipeline schedule, micro-batch size, sequence length, cp, ep, attention kernel, TP
communication overlap, FSDP, the ZeRO stage of the gradients and the data-parallel overlaps of
their reduction and of the parameters' all-gather), the check of a plan's
features against the calibration runs of a residual table (:func:`feature_departures`, data:
a list of :class:`Departure`, never prose to parse), the throughput ceiling (a plan predicted
faster, in model FLOP/s per GPU, than every calibration run of its GPU kind and precision
class measured: :func:`throughput_ceiling`, :func:`throughput_departure`) and the choice of the residuals a plan's
band is built from (:func:`conditioned_rows`: runs like the plan, wider only where too few,
the conditions tried in the order of the residual spread they explain, :func:`condition_order`).
The band itself is :mod:`core.store.interval`; the table :mod:`core.store.residuals`.

The calibration runs are the ``cross_validated`` rows of a table with the feature columns
(:data:`core.store.residuals.FEATURE_GROUPS`); a table without them (stores written before
them) has no feature range and its bands are grouped as before (by node class only), and a
table written before a later group compares the features of the groups it has
(:func:`unchecked_note` names the others).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from core.model.moe import gradients_reduced
from core.plan.parallel import (FP8_DEFAULT_RECIPE, tf32_matmuls, tp_overlap_applies,
                                zero_shard_size)
from core.store.residuals import FEATURE_GROUPS, THROUGHPUT_COLUMN, ResidualTable

if TYPE_CHECKING:  # pragma: no cover
    from core.plan.session import Session

__all__ = ["CATEGORY_FEATURES", "RANGE_FEATURES", "CONDITIONS", "MIN_LIKE_RUNS", "Departure",
           "plan_features", "features_of", "model_family", "precision_label", "feature_departures",
           "conditioned_rows", "condition_order", "explained_spread", "condition_key",
           "THROUGHPUT", "Ceiling", "throughput_ceiling", "throughput_departure",
           "precision_class", "unchecked_note"]

#: Features compared by value: a plan's value must be one the calibration runs had. The
#: attention kernel, the TP communication overlap, FSDP (ZeRO-3), the ZeRO stage of the
#: gradients and the data-parallel overlaps change what is timed (FlashAttention's kernels or
#: the unfused path, collectives hidden under GEMMs, the weights' all-gathers in every
#: micro-batch, the gradients reduce-scattered after every micro-batch rather than once per
#: iteration, the gradient reduction and the parameter all-gather hidden under compute), so a
#: store calibrated without them has no measured error for them: the A100 store's runs are all
#: unfused, ZeRO 0 without any overlap (docs/accuracy.md "Error band"). ``zero_stage`` is
#: ``"0/1"`` or ``"2/3"`` as the simulator tells them apart
#: (:data:`core.store.residuals.ZERO_STAGE_VALUES`; ZeRO 0 and 1 reduce the same gradient
#: bytes once per iteration, ZeRO 2 and 3 after every micro-batch, and ZeRO-3's weights are
#: ``fsdp``).
CATEGORY_FEATURES = ("gpu", "family", "precision", "recompute", "schedule", "attention_kernel",
                     "tp_comm_overlap", "fsdp", "zero_stage", "overlap_grad_reduce",
                     "overlap_param_gather")
#: Features compared by range: a plan's value must lie within the calibration runs' min..max.
RANGE_FEATURES = ("micro_batch_size", "seq_length", "cp", "ep")
#: What a plan's band can be conditioned on (:func:`conditioned_rows`): the same GPU kind,
#: family and precision, and the same use of context parallelism, expert parallelism and
#: recomputation. ``cp`` and ``ep`` match on whether the run uses them (> 1). This order only
#: breaks ties: the conditions are tried in the order of the spread they explain
#: (:func:`condition_order`).
CONDITIONS = ("gpu", "family", "precision", "cp", "ep", "recompute")
#: Fewest calibration runs like a plan whose residuals make its band
#: (:func:`core.store.interval.interval_for`); a condition leaving fewer is left out. The
#: root mean square of k log residuals has a relative standard error of about ``1/sqrt(2k)``
#: (29 % at 6). Chosen among 4, 6, 8 and 10 on the held-out folds of the modern stores' 30
#: runs (with the normal-theory band of the like runs, coverage 88.5-92.3 % at median widths
#: of 48-59 % over fold seeds 0-4 at 6; docs/accuracy.md "Error band"), so the modern
#: figures carry that small selection.
MIN_LIKE_RUNS = 6

_NAMES = {"gpu": "GPU", "family": "family", "precision": "precision", "recompute": "recompute",
          "schedule": "schedule", "micro_batch_size": "micro-batch", "seq_length": "sequence length",
          "cp": "cp", "ep": "ep", "attention_kernel": "attention", "tp_comm_overlap": "TP overlap",
          "fsdp": "FSDP", "zero_stage": "ZeRO stage", "overlap_grad_reduce": "overlap_grad_reduce",
          "overlap_param_gather": "overlap_param_gather"}
_USES = {"cp": "context parallelism", "ep": "expert parallelism"}
#: A switch the same in every calibration run: what no run did (all "off"), or what every run
#: did (all "on": "the store was calibrated on on only" says nothing).
_SWITCHES = {"tp_comm_overlap": "overlapped TP communication with its GEMMs",
             "fsdp": "sharded its weights (ZeRO-3)",
             "overlap_grad_reduce": "overlapped its data-parallel gradient reduction with the "
                                    "backward",
             "overlap_param_gather": "overlapped its data-parallel parameter all-gather with "
                                     "compute"}
#: A ``zero_stage`` value no calibration run had, said as what differs
#: (:data:`core.store.residuals.ZERO_STAGE_VALUES`).
_ZERO_STAGES = {"0/1": "accumulated its gradients and reduced them once per iteration "
                       "(ZeRO 0/1)",
                "2/3": "reduce-scattered its gradients after every micro-batch (ZeRO 2/3)"}


def model_family(model: Any) -> str:
    """``"dense"``, ``"moe"``, ``"mla"`` or ``"moe+mla"``: the architecture of ``model`` as it
    drives the error (experts, multi-latent attention)."""
    parts = (["moe"] if getattr(model, "num_experts", None) else []) + \
        (["mla"] if getattr(model, "multi_latent_attention", False) else [])
    return "+".join(parts) or "dense"


def precision_label(plan: Any) -> str:
    """The plan's precision, FP8 with its scaling recipe and fp32 with TF32 matmuls
    (:func:`core.plan.parallel.tf32_matmuls`) apart: ``bf16``, ``fp8-tensorwise``,
    ``fp32-tf32``, ..."""
    if tf32_matmuls(plan):
        return "fp32-tf32"
    if plan.precision != "fp8":
        return str(plan.precision)
    return f"fp8-{plan.fp8_recipe or FP8_DEFAULT_RECIPE}"


def plan_features(session: "Session") -> dict[str, Any]:
    """The features of a session's plan (:data:`core.store.residuals.FEATURE_COLUMNS`): str for
    :data:`CATEGORY_FEATURES`, int for :data:`RANGE_FEATURES`."""
    return features_of(session.model, session.cluster, session.plan)


def features_of(model: Any, cluster: Any, plan: Any) -> dict[str, Any]:
    """:func:`plan_features` of a model, cluster and parallel plan (a sweep's rows).

    The data-parallel features say what the simulator times (core/sim/stages.py
    ``_stage_tails``, core/sim/template_builder.py ``reduce``, ``prefetch``): ``zero_stage``
    ``"2/3"`` for ZeRO 2 or 3 (the gradients reduce-scattered after every micro-batch),
    ``"0/1"`` otherwise; ``overlap_grad_reduce`` ``"on"`` with ``plan.overlap_grad_reduce``,
    ``overlap_param_gather`` ``"on"`` with ``plan.overlap_param_gather`` from ZeRO 1 on (there
    is no parameter all-gather at ZeRO 0). All three read as ZeRO 0/1 without overlap where no
    gradient is reduced across GPUs (:func:`core.model.moe.gradients_reduced`: ``d*cp = 1`` and
    no expert-data-parallel replicas), as ``tp_comm_overlap`` is ``"off"`` where it does not
    apply; ``fsdp`` is ``"on"`` for ZeRO 3 over a shard group of more than one rank.
    """
    reduced = gradients_reduced(model, plan)
    return {"gpu": str(cluster.gpu), "family": model_family(model),
            "precision": precision_label(plan), "recompute": str(plan.recompute),
            "schedule": str(plan.schedule), "micro_batch_size": int(plan.micro_batch_size),
            "seq_length": int(model.seq_length), "cp": int(plan.context_parallel),
            "ep": int(plan.expert_parallel), "attention_kernel": str(model.attention_kernel),
            "tp_comm_overlap": "on" if tp_overlap_applies(plan) else "off",
            "fsdp": "on" if plan.zero_stage >= 3 and zero_shard_size(plan) > 1 else "off",
            "zero_stage": "2/3" if reduced and plan.zero_stage >= 2 else "0/1",
            "overlap_grad_reduce": "on" if reduced and plan.overlap_grad_reduce else "off",
            "overlap_param_gather": ("on" if reduced and plan.zero_stage >= 1
                                     and plan.overlap_param_gather else "off")}


@dataclass(frozen=True)
class Departure:
    """A plan feature outside what the store was calibrated on.

    Attributes
    ----------
    feature : str
        One of :data:`core.store.residuals.FEATURE_COLUMNS`, or :data:`THROUGHPUT`.
    value : str or int or float
        The plan's value; for :data:`THROUGHPUT` its predicted model FLOP/s per GPU, in
        10^12 FLOP/s (TFLOP/s).
    calibrated : tuple
        The distinct values of the calibration runs, sorted; for :data:`THROUGHPUT` the one
        highest measured model TFLOP/s per GPU among the runs of the plan's GPU kind and
        precision class (:func:`throughput_ceiling`).
    mfu : tuple
        :data:`THROUGHPUT` only: ``(the plan's predicted MFU, the ceiling run's MFU)``, 0..1,
        both against the plan's MFU peak (:func:`core.sim.costing.mfu_peak_flops`; the same GPU
        kind and precision class); ``()`` when the peak was not given.
    run : tuple
        :data:`THROUGHPUT` only: ``(file, row)`` of the ceiling run (its measurement file and
        1-based data row).
    of : tuple
        :data:`THROUGHPUT` only: ``(GPU kind, precision class)`` of the runs compared.
    """

    feature: str
    value: Any
    calibrated: tuple
    mfu: tuple = ()
    run: tuple = ()
    of: tuple = ()

    @property
    def text(self) -> str:
        """One clause for reports, e.g. ``"cp 8: no calibration run used context parallelism"``."""
        if self.feature == THROUGHPUT:
            return self._throughput_text()
        name, cal = _NAMES[self.feature], self.calibrated
        if self.feature in _USES and max(cal) == 1:
            return f"{name} {self.value}: no calibration run used {_USES[self.feature]}"
        if self.feature == "zero_stage" and self.value in _ZERO_STAGES:
            return f"{name} {self.value}: no calibration run {_ZERO_STAGES[self.value]}"
        if self.feature in _SWITCHES and cal in (("off",), ("on",)):
            runs = "no calibration run" if cal == ("off",) else "every calibration run"
            return f"{name} {self.value}: {runs} {_SWITCHES[self.feature]}"
        if self.feature in RANGE_FEATURES:
            span = f"{cal[0]:,}" if len(cal) == 1 else f"{cal[0]:,}-{cal[-1]:,}"
            return f"{name} {self.value:,}: the store was calibrated on {span} only"
        return f"{name} {self.value}: the store was calibrated on {', '.join(map(str, cal))} only"

    def _throughput_text(self) -> str:
        """E.g. ``"predicted MFU 62 % (612 TFLOP/s per GPU by Eq. 3's count): above every
        calibration run of H100-SXM5-80GB bf16/fp16 (highest measured MFU 45 %, 443 TFLOP/s:
        published_runs.csv row 37)"``: MFU first, the report's MFU line's count (Narayanan et al.
        2021 Eq. 3, the full attention square), which is not the count of the report's "Model
        TFLOP/s" line (Megatron-Core 0.19's causal half); without a peak, TFLOP/s only."""
        plan_mfu, run_mfu = self.mfu if self.mfu else (None, None)
        gpu, cls = self.of
        of = f"above every calibration run of {gpu} {_CLASS_NAMES.get(cls, cls)}"
        where = f"{self.run[0]} row {self.run[1]}"
        if plan_mfu is None or run_mfu is None:
            return (f"predicted {self.value:,.0f} TFLOP/s per GPU by Eq. 3's count: {of} "
                    f"(highest measured {self.calibrated[0]:,.0f} TFLOP/s: {where})")
        return (f"predicted MFU {100 * plan_mfu:.0f} % ({self.value:,.0f} TFLOP/s per GPU by "
                f"Eq. 3's count): {of} (highest measured MFU {100 * run_mfu:.0f} %, "
                f"{self.calibrated[0]:,.0f} TFLOP/s: {where})")

    def to_dict(self) -> dict:
        """JSON-able ``{"feature", "value", "calibrated" (list)}``; a :data:`THROUGHPUT`
        departure adds ``"mfu"`` ([plan, ceiling run], when known), ``"run"`` ({"file", "row"})
        and ``"of"`` ({"gpu", "precision"}: the precision class)."""
        out = {"feature": self.feature, "value": self.value, "calibrated": list(self.calibrated)}
        if self.feature == THROUGHPUT:
            if self.mfu:
                out["mfu"] = list(self.mfu)
            out["run"] = {"file": self.run[0], "row": self.run[1]}
            out["of"] = {"gpu": self.of[0], "precision": self.of[1]}
        return out


#: The :attr:`Departure.feature` of a plan predicted faster than every calibration run of its
#: GPU kind and precision class (:func:`throughput_departure`).
THROUGHPUT = "throughput"
#: How the reports name a precision class.
_CLASS_NAMES = {"bf16": "bf16/fp16"}


#: Precisions that count as one for the range and the conditions: bf16 and fp16 run the same
#: 16-bit tensor-core path at the same peak (their store keys differ, their times do not).
_SAME_PRECISION = {"fp16": "bf16"}


def _precision_class(v: Any) -> str:
    return _SAME_PRECISION.get(str(v), str(v))


def precision_class(label: Any) -> str:
    """The class of a precision label (:func:`precision_label`) the range, the conditions and
    the throughput ceiling compare: ``bf16`` for bf16 and fp16 (the same 16-bit tensor-core
    path and peak), the label otherwise (each FP8 recipe its own, ``fp32-tf32``, ...)."""
    return _precision_class(label)


def unchecked_note(table: ResidualTable | None, store_name: str = "the profile store") -> str:
    """What :func:`feature_departures` cannot check because ``table`` was written before its
    columns (:data:`core.store.residuals.FEATURE_GROUPS`: the plan features from residual
    encoding version 2, attention kernel, TP overlap and FSDP from version 3, the throughput
    ceiling from version 4, the ZeRO stage, ``overlap_grad_reduce`` and
    ``overlap_param_gather`` from version 5), as one sentence naming them, so that a report
    never reads "no
    departure" where nothing was compared. ``""`` when the table has every group, or has no
    residuals at all (there is no band, and its note says so)."""
    if table is None or len(table) == 0:
        return ""
    missing = [g for g in FEATURE_GROUPS if getattr(table, g[0]) is None]
    if not missing:
        return ""
    names = [_NAMES.get(c, c) for g in missing for c in g if c != THROUGHPUT_COLUMN]
    parts = ([", ".join(names)] if names else []) + (
        ["the throughput ceiling (model FLOP/s per GPU)"] if (THROUGHPUT_COLUMN,) in missing
        else [])
    return (f"{store_name}'s residuals were written before these columns, so a plan is not "
            f"checked against its calibration runs for: {'; '.join(parts)} (re-run vtrain "
            "calibrate to write them)")


def _python(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def feature_departures(table: ResidualTable | None, features: dict[str, Any] | None,
                       predicted_s: float | None = None) -> tuple[Departure, ...]:
    """The features of a plan (:func:`plan_features`) outside the calibration runs of ``table``,
    then its predicted throughput above theirs.

    A category feature departs when its value is none of the calibration runs' (bf16 and
    fp16 count as one precision: the same tensor-core path and peak); a range feature when it
    lies outside their min..max. With ``predicted_s`` (the plan's predicted iteration time,
    seconds) and ``features["model_flops_per_gpu"]`` (its model FLOPs per GPU per iteration),
    :func:`throughput_departure` is added last when it departs. Empty when the table or the
    features are missing or the table has no feature columns (nothing to compare with).
    """
    if table is None or features is None or not table.has_features:
        return ()
    calibrated = _calibrated_values(table)
    if calibrated is None:
        return ()
    out = []
    for name in table.plan_feature_columns:
        cal, classes = calibrated[name]
        v = features[name]
        if name in RANGE_FEATURES:
            outside = not (min(cal) <= int(v) <= max(cal))
        elif name == "precision":
            outside = _precision_class(v) not in classes
        else:
            outside = str(v) not in cal
        if outside:
            out.append(Departure(name, v, cal))
    flops = features.get(THROUGHPUT_COLUMN)
    if predicted_s is not None and flops is not None:
        d = throughput_departure(table, features["gpu"], features["precision"],
                                 float(flops) / float(predicted_s),
                                 features.get("mfu_peak_flops"))
        if d is not None:
            out.append(d)
    return tuple(out)


@dataclass(frozen=True)
class Ceiling:
    """The highest measured model FLOP/s per GPU among a table's calibration runs of one GPU
    kind and precision class (:func:`throughput_ceiling`).

    Attributes
    ----------
    flops_per_s : float
        ``model_flops_per_gpu / measured_s`` of the run, FLOP/s per GPU.
    file : str
        Its measurement file.
    row : int
        Its 1-based data row there.
    """

    flops_per_s: float
    file: str
    row: int


def throughput_ceiling(table: ResidualTable | None, gpu: str, precision: str) -> Ceiling | None:
    """The highest measured model FLOP/s per GPU (``model_flops_per_gpu / measured_s``) among
    the ``cross_validated`` rows of ``table`` with GPU kind ``gpu`` and the precision class
    (:func:`precision_class`) of ``precision``; the first such row on ties. None when the table
    lacks the column (:data:`core.store.residuals.THROUGHPUT_COLUMN`, stores written before
    it) or has no such run. Computed once per table and kept on it."""
    if table is None or not table.has_throughput:
        return None
    key = "_throughput_ceilings"
    if key not in table.__dict__:
        rate = table.model_flops_per_gpu / table.measured_s
        best: dict[tuple[str, str], Ceiling] = {}
        classes = _precision_classes(table)
        for i in np.flatnonzero(table.set == "cross_validated").tolist():
            k = (str(table.gpu[i]), str(classes[i]))
            if k not in best or rate[i] > best[k].flops_per_s:
                best[k] = Ceiling(float(rate[i]), str(table.file[i]), int(table.row[i]))
        table.__dict__[key] = best
    return table.__dict__[key].get((str(gpu), _precision_class(precision)))


def throughput_departure(table: ResidualTable | None, gpu: str, precision: str,
                         flops_per_s: float, peak_flops: float | None = None
                         ) -> Departure | None:
    """A :data:`THROUGHPUT` :class:`Departure` when ``flops_per_s`` (a plan's predicted model
    FLOP/s per GPU: its model FLOPs per GPU per iteration over its predicted iteration time)
    is above the :func:`throughput_ceiling` of its GPU kind ``gpu`` and precision label
    ``precision``, else None (also when there is no ceiling: no run of that kind and class, or
    a table without the column). No tolerance: strictly above. ``peak_flops`` (the plan's MFU
    peak, FLOP/s per GPU) adds both MFUs."""
    ceiling = throughput_ceiling(table, gpu, precision)
    if ceiling is None or not flops_per_s > ceiling.flops_per_s:
        return None
    mfu = ((flops_per_s / peak_flops, ceiling.flops_per_s / peak_flops)
           if peak_flops else ())
    return Departure(THROUGHPUT, flops_per_s / 1e12, (ceiling.flops_per_s / 1e12,), mfu,
                     (ceiling.file, ceiling.row), (str(gpu), _precision_class(precision)))


def _calibrated_values(table: ResidualTable) -> dict[str, tuple[tuple, frozenset]] | None:
    """Per feature column, the distinct values of the ``cross_validated`` rows and (for the
    precision) their classes; None without such rows. Computed once per table and kept on it
    (a sweep asks for every plan: thousands of times per table)."""
    key = "_calibrated_values"
    if key not in table.__dict__:
        cv = table.set == "cross_validated"
        out = None
        if cv.any():
            out = {}
            for name in table.plan_feature_columns:
                cal = tuple(_python(v) for v in np.unique(getattr(table, name)[cv]))
                out[name] = (cal, frozenset(_precision_class(c) for c in cal))
        table.__dict__[key] = out
    return table.__dict__[key]


def _matches(table: ResidualTable, name: str, value: Any) -> np.ndarray:
    col = getattr(table, name)
    if name in ("cp", "ep"):
        return (col > 1) == (int(value) > 1)
    if name == "precision":
        return _precision_classes(table) == _precision_class(value)
    return col == value


def condition_key(features: dict[str, Any]) -> tuple:
    """What :func:`conditioned_rows` compares of a plan's features, per :data:`CONDITIONS` in
    that order: the value (GPU, family, recompute), the precision class (bf16 = fp16) and
    whether cp and ep are used (> 1), as :func:`_matches` does. Plans with the same key get
    the same rows of any table, so the same band (:func:`core.store.interval.band_key`).

    Raises
    ------
    KeyError
        A condition missing from ``features``.
    """
    return tuple(int(features[c]) > 1 if c in ("cp", "ep") else
                 _precision_class(features[c]) if c == "precision" else features[c]
                 for c in CONDITIONS)


def _precision_classes(table: ResidualTable) -> np.ndarray:
    """The precision class of every row, str array (n,); once per table, as _calibrated_values."""
    key = "_precision_classes"
    if key not in table.__dict__:
        table.__dict__[key] = np.array([_precision_class(c) for c in table.precision.tolist()],
                                       dtype=str)
    return table.__dict__[key]


def _condition_values(table: ResidualTable, name: str) -> np.ndarray:
    """The values a condition compares, per row: cp and ep as used (> 1) or not, precisions by
    class (bf16 = fp16), the column otherwise."""
    col = getattr(table, name)
    if name in ("cp", "ep"):
        return col > 1
    if name == "precision":
        return _precision_classes(table)
    return col


def _mean_square(r: np.ndarray) -> float:
    """Mean square of log residuals about 0 (bias and spread together), floored at 1e-12 so
    that identical residuals still give a finite log and a positive scale."""
    return max(float(np.mean(np.square(r))), 1e-12)


def explained_spread(table: ResidualTable, base: np.ndarray, need: int = MIN_LIKE_RUNS
                     ) -> dict[str, float]:
    """Per condition, the spread of the log residuals of ``base`` (bool (n,)) it explains.

    The rows are split by the condition's value; each part of at least ``need`` rows gets its
    own mean square ``s_g^2`` of the log residuals (about 0: bias and spread), the others keep
    the pooled ``s^2``. The figure is the log-likelihood ratio of zero-mean normal residuals
    with a scale per part against one pooled scale, ``sum_g n_g log(s^2 / s_g^2)``: 0 when the
    condition splits nothing off or its parts are as spread as the whole, negative when only
    its more spread parts are large enough to count. Computed on the calibration residuals
    themselves, so it is exact and reproducible.

    Returns
    -------
    dict
        Condition name (:data:`CONDITIONS`) -> log-likelihood ratio (nats).
    """
    base = np.asarray(base, bool)
    r = table.log_residual
    pooled = _mean_square(r[base])
    out = {}
    for name in CONDITIONS:
        vals = _condition_values(table, name)
        gain = 0.0
        for v in np.unique(vals[base]):
            part = base & (vals == v)
            n = int(part.sum())
            if n >= need:
                gain += n * (np.log(pooled) - np.log(_mean_square(r[part])))
        out[name] = float(gain)
    return out


def condition_order(table: ResidualTable, base: np.ndarray, need: int = MIN_LIKE_RUNS
                    ) -> tuple[str, ...]:
    """:data:`CONDITIONS` by the spread they explain among the rows of ``base``
    (:func:`explained_spread`), largest first; ties keep the order of :data:`CONDITIONS`."""
    gain = explained_spread(table, base, need)
    return tuple(sorted(CONDITIONS, key=lambda c: (-gain[c], CONDITIONS.index(c))))


def conditioned_rows(table: ResidualTable, base: np.ndarray, features: dict[str, Any] | None,
                     need: int, order: tuple[str, ...] = CONDITIONS
                     ) -> tuple[np.ndarray, tuple[str, ...], tuple[str, ...]]:
    """The rows of ``base`` (bool (n,)) like a plan: conditioned on each of ``order`` (default
    :data:`CONDITIONS`; the band passes :func:`condition_order`) in turn, where at least
    ``need`` rows remain.

    Greedy: a condition that would leave fewer than ``need`` rows (for the band:
    :data:`MIN_LIKE_RUNS`) is left out and the next one is tried, so the group is as
    narrow as the data allows.

    Returns
    -------
    rows : bool array (n,)
    used, dropped : tuple of str
        The conditions applied, and those left out for too few runs like the plan (both
        empty when the table has no feature columns or no features are given).
    """
    rows = np.asarray(base, bool)
    if features is None or not table.has_features:
        return rows, (), ()
    used, dropped = [], []
    for name in order:
        narrower = rows & _matches(table, name, features[name])
        if int(narrower.sum()) >= need:
            rows = narrower
            used.append(name)
        else:
            dropped.append(name)
    return rows, tuple(used), tuple(dropped)
