"""Fit a profile store's op-model parameters to the per-class times of a measured trace.

A PyTorch profiler trace of one iteration (:func:`core.io.kineto_classes.measure_step`) gives,
per rank, the seconds spent in each operation class: GEMM, attention, norm and elementwise,
optimizer, each collective. The analytic op model (:mod:`core.model.ops`) predicts the same
sums from its kernel lists: every compute task of a stage's execution graph runs its op's
kernels (:func:`core.model.ops.op_kernels`), each timed by the roofline with efficiency
(:func:`core.model.ops.kernel_times`), and each kernel belongs to one class:

=================  ===============================================================
class              kernels (predicted)
=================  ===============================================================
attention          FlashAttention's kernels (``flash_attn``, ``flash_attn_bwd``)
gemm               every other GEMM (the unfused attention's batched GEMMs too, as the
                   class table files ``aten::bmm`` and cuBLAS kernels)
optimizer          the optimizer step's kernels
norm_elementwise   every other kernel (norms, softmax, dropout, activations, casts)
all_reduce, ...    the execution graph's collectives of the class
                   (:data:`core.accuracy.trace_compare.OPS_OF_CLASS`), as
                   :mod:`core.sim.comm` times them under the parameters
=================  ===============================================================

This is the device time (what a GPU trace's kernels sum to); the host side of the op model
(``op_overhead_s``, ``kernel_launch_s``) and the per-iteration overhead are not part of any
class. ``send_recv`` is not fitted: a pipeline's measured send and receive hold the wait for
the neighbour stage (docs/trace_import.md), not the transfer alone. A class is an observation
on a stage when both its measured and predicted seconds are above zero.

Method:

1. the candidate parameters (:data:`CANDIDATES`, in this order) are tried one by one: the
   Jacobian of each class's ``log(predicted)`` (summed over the stages: stages differing only
   in the mix of their ops pin no parameter) with respect to the parameter moved across its
   bounds' width (central differences) is one column; a parameter no class moves by
   :data:`MIN_SINGULAR_VALUE` is ``not determined``, and so is one whose column brings the
   kept columns' smallest singular value below it (the measured classes cannot tell it from
   those kept before it);
2. the kept parameters are fitted by bounded least squares on ``log(predicted / measured)``
   (:func:`scipy.optimize.least_squares`); the others keep the base store's values and are
   reported with the reason. No parameter is ever guessed.

The calibrated store (:func:`trace_calibrated_store`) is the base store's device with the
fitted op model, its op tables the model tabulated (:func:`core.accuracy.fit_params.apply_fit`),
and a provenance naming the traces, the fitted parameters and those left as they were.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from core.accuracy.fit_params import FIT_PARAMS, apply_fit, model_store, store_op_model
from core.accuracy.linearize import COMPUTE_IDS, CP_PRE
from core.accuracy.trace_compare import OPS_OF_CLASS, rank_stages
from core.io.kineto_classes import StepMeasurement
from core.model.fp8 import FP8_WEIGHT_CAST_OP
from core.model.keys import SWA_OPS
from core.model.memory import fp8_weights_per_gpu
from core.model.ops import (OPTIMIZER_OP, device_key, effective_op_model, kernel_arrays,
                            kernel_class, kernel_fp8, kernel_peak_flops, kernel_times, op_kernels)
from core.plan.parallel import fp8_recipe, tensor_dtype
from core.plan.session import Session
from core.sim.graph import build_graph
from core.sim.op_times import op_key, optimizer_params
from core.sim.graph_types import KIND_COMPUTE, OPS
from core.store.profile_store import ProfileStore

__all__ = ["FITTED_CLASSES", "CANDIDATES", "MIN_SINGULAR_VALUE", "ClassForm", "class_form",
           "predicted_classes", "Observation", "TraceFit", "fit_trace", "trace_calibrated_store"]

#: Classes a trace fit reads (send_recv is not one: see the module's docstring).
COMPUTE_CLASSES = ("gemm", "attention", "norm_elementwise", "optimizer")
COLLECTIVE_CLASSES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
FITTED_CLASSES = COMPUTE_CLASSES + COLLECTIVE_CLASSES
#: Parameters a trace fit may determine, tried in this order, with their bounds (SI units).
CANDIDATES: dict[str, tuple[float, float]] = {
    "gemm_efficiency_max": FIT_PARAMS["gemm_efficiency_max"],
    "memory_efficiency": FIT_PARAMS["memory_efficiency"],
    "gemm_half_size": FIT_PARAMS["gemm_half_size"],
    "kernel_overhead_s": FIT_PARAMS["kernel_overhead_s"],
    "fp8_gemm_efficiency": (0.3, 1.2),
    "collective_overhead_s": FIT_PARAMS["collective_overhead_s"],
    "inter_node_efficiency": FIT_PARAMS["inter_node_efficiency"],
    "all_to_all_efficiency": (0.05, 1.0),
}
#: Smallest singular value of the kept parameters' Jacobian (log class seconds per parameter
#: moved across its bounds): below it a parameter's effect on the classes is (nearly) nil or
#: that of the others kept, and the trace cannot pin it.
MIN_SINGULAR_VALUE = 0.05
#: Parameters of the op model no class of a trace measures, and why.
_NEVER = {
    "op_overhead_s": "host time per op: no class measures it (device time only)",
    "kernel_launch_s": "host time per kernel launch: no class measures it (device time only)",
    "iteration_overhead_s": "per-iteration framework work: no class measures it",
    "p2p_efficiency": "send/recv is not fitted: its measured time holds the pipeline's waits",
    "p2p_overhead_s": "send/recv is not fitted: its measured time holds the pipeline's waits",
    "peak_fraction": "the sustained share of a device's reference peaks: not fitted from a trace "
                     "(gemm_efficiency_max takes it)",
    "flex_all_to_all_efficiency": "the flex dispatcher's efficiency: not fitted from a trace",
    "grouped_gemm_efficiency": "the grouped expert GEMMs' efficiency: the trace's gemm class "
                               "holds them with the dense GEMMs (gemm_efficiency_max takes it)",
    "flash_attention_efficiency": "FlashAttention's efficiency: not fitted from a trace "
                                  "(gemm_efficiency_max and the attention class's time take it)",
}


def _kernel_class(op: str, kernel) -> str:
    """Class of one of ``op``'s kernels (see the module's table)."""
    if op in (OPTIMIZER_OP,):
        return "optimizer"
    if kernel.name.startswith("flash_attn"):
        return "attention"
    return "gemm" if kernel.is_gemm else "norm_elementwise"


@dataclass
class ClassForm:
    """The compute of a session's stages as kernels, each with its stage, count and class.

    Attributes
    ----------
    kernels : tuple of arrays
        ``(flops, nbytes, size, is_gemm)``, shape (k,) (:func:`core.model.ops.kernel_arrays`).
    peak_flops : float64 array, shape (k,)
    fp8 : bool array, shape (k,)
    count : float64 array, shape (k,)
        Times the kernel runs on its stage in one iteration.
    stage : int64 array, shape (k,)
    cls : int64 array, shape (k,)
        Index into :data:`COMPUTE_CLASSES`.
    num_stages : int
    memory_bandwidth_bytes_per_s : float
    kclass : int64 array, shape (k,), optional
        Each kernel's op-model class (:func:`core.model.ops.kernel_class`).
    """

    kernels: tuple
    peak_flops: np.ndarray
    fp8: np.ndarray
    count: np.ndarray
    stage: np.ndarray
    cls: np.ndarray
    num_stages: int
    memory_bandwidth_bytes_per_s: float
    kclass: np.ndarray | None = None

    def seconds(self, op_model: dict[str, float]) -> np.ndarray:
        """Predicted device seconds per compute class and stage, shape (4, p)."""
        kt = kernel_times(*self.kernels, self.peak_flops, self.memory_bandwidth_bytes_per_s,
                          op_model, self.fp8, self.kclass) * self.count
        n = len(COMPUTE_CLASSES)
        flat = np.bincount(self.cls * self.num_stages + self.stage, kt,
                           minlength=n * self.num_stages)
        return flat.reshape(n, self.num_stages)


def class_form(session: Session, base: ProfileStore) -> ClassForm:
    """The kernels of every compute task of ``session``'s execution graph, by stage and class.

    Raises
    ------
    ValueError
        The graph runs a compute op the kernel lists do not know.
    """
    store = model_store(base, effective_op_model(base.op_model))
    g = build_graph(session, store)[0]
    pl = session.plan
    key = device_key(op_key(session), base.peak_flops)
    n_params = optimizer_params(session)
    recipe = fp8_recipe(pl)
    fp8_w = fp8_weights_per_gpu(session.model, pl) if recipe is not None else None
    cp_split = (getattr(pl, "context_parallel", 1) or 1) > 1
    ks, count, stage, cls = [], [], [], []

    def add(op: str, kernels: list, n: float, st: int) -> None:
        for k in kernels:
            ks.append(k)
            count.append(n)
            stage.append(st)
            cls.append(COMPUTE_CLASSES.index(_kernel_class(op, k)))

    compute = (g.op >= 0) & np.isin(g.kind, sorted(KIND_COMPUTE))
    ops, stages = g.op[compute], g.stage[compute]
    for op_id, st in sorted(set(zip(ops.tolist(), stages.tolist()))):
        name = OPS[op_id]
        if name == "pass_through":
            continue
        if name == OPTIMIZER_OP:
            add(name, op_kernels(name, {"n": int(n_params[st]), "dtype": tensor_dtype(pl.precision)}),
                1.0, st)
            if fp8_w is not None:  # the per-iteration FP8 weight quantization: elementwise
                add(FP8_WEIGHT_CAST_OP, op_kernels(FP8_WEIGHT_CAST_OP, device_key(
                    {"n": int(fp8_w[st]), "dtype": "fp8", "fp8": recipe}, base.peak_flops)), 1.0, st)
            continue
        if op_id not in COMPUTE_IDS:
            raise ValueError(f"the trace fit has no kernel list for the graph's op {name!r}")
        k = {**key, "w": int(session.model.window_size or 0)} if name in SWA_OPS else key
        kernels = op_kernels(name, k)
        if cp_split and name in CP_PRE:  # the part outside the ring: the core is its own op
            for part in op_kernels(CP_PRE[name], k):
                if part in kernels:
                    kernels.remove(part)
        add(name, kernels, float(((ops == op_id) & (stages == st)).sum()), st)
    return ClassForm(kernel_arrays(ks), kernel_peak_flops(ks, pl.precision, base.peak_flops,
                                                          base.device_name),
                     kernel_fp8(ks), np.array(count, float), np.array(stage, np.int64),
                     np.array(cls, np.int64), g.num_stages, base.memory_bandwidth_bytes_per_s,
                     kernel_class(ks))


def _collectives(session: Session, base: ProfileStore, op_model: dict[str, float]) -> np.ndarray:
    """Predicted seconds per collective class and stage under ``op_model``, shape (4, p)."""
    g = build_graph(session, model_store(base, op_model))[0]
    out = np.zeros((len(COLLECTIVE_CLASSES), g.num_stages))
    if g.op is None:
        return out
    for i, cls in enumerate(COLLECTIVE_CLASSES):
        mask = np.isin(g.op, [OPS.index(o) for o in OPS_OF_CLASS[cls]])
        out[i] = np.bincount(g.stage[mask], g.duration_s[mask], minlength=g.num_stages)
    return out


def predicted_classes(session: Session, base: ProfileStore, op_model: dict[str, float] | None = None,
                      form: ClassForm | None = None) -> dict[str, np.ndarray]:
    """Predicted seconds of each class of :data:`FITTED_CLASSES` per stage, ``{class: (p,)}``.

    Parameters
    ----------
    session : Session
    base : ProfileStore
        The device (peaks, bandwidths, collective curves); its op tables are not used.
    op_model : dict, optional
        The op model's parameters (default: ``base``'s).
    form : ClassForm, optional
        :func:`class_form` of ``session`` and ``base``, when already built.
    """
    p = store_op_model(base, effective_op_model(base.op_model if op_model is None else op_model))
    form = form or class_form(session, base)
    compute = form.seconds(p if _fits_peak(base) else {**p, "peak_fraction": 1.0})
    coll = _collectives(session, base, p)
    return {**dict(zip(COMPUTE_CLASSES, compute)), **dict(zip(COLLECTIVE_CLASSES, coll))}


def _fits_peak(base: ProfileStore) -> bool:
    from core.store.gpu_spec import fits_peak_fraction
    return fits_peak_fraction(base)


@dataclass
class Observation:
    """One class on one stage: measured seconds (mean over the stage's ranks) and predicted
    seconds before and after the fit."""

    stage: int
    cls: str
    measured_s: float
    before_s: float
    after_s: float = float("nan")

    def to_dict(self) -> dict:
        """JSON-ready values."""
        return {"stage": self.stage, "class": self.cls, "measured_s": self.measured_s,
                "predicted_before_s": self.before_s, "predicted_after_s": self.after_s}


@dataclass
class TraceFit:
    """What a trace fit found.

    Attributes
    ----------
    op_model : dict
        The full op model after the fit (base values where not fitted).
    base_op_model : dict
        The base store's effective op model.
    fitted : list of str
        The parameters the trace determined, in :data:`CANDIDATES` order.
    not_determined : dict of str to str
        Every other parameter of the op model, with why it was left as it was.
    observations : list of Observation
    left_out : list of str
        Stage and class pairs not used, with why (one measured or predicted at 0).
    """

    op_model: dict[str, float]
    base_op_model: dict[str, float]
    fitted: list[str]
    not_determined: dict[str, str]
    observations: list[Observation]
    left_out: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready values."""
        return {"parameters": dict(self.op_model),
                "fitted": {k: {"base": self.base_op_model[k], "fitted": self.op_model[k]}
                           for k in self.fitted},
                "not_determined": dict(self.not_determined),
                "observations": [o.to_dict() for o in self.observations],
                "left_out": list(self.left_out)}


def _stage_means(measurement: StepMeasurement, session: Session) -> dict[int, np.ndarray]:
    """Measured seconds per row (``measurement.rows``), mean over each stage's ranks (ConfigError
    for traces of another GPU count than the plan's or a rank beyond it, :func:`rank_stages`)."""
    of = rank_stages(measurement, session.plan)
    stages = np.array([of[r] for r in measurement.ranks])
    return {int(s): measurement.seconds[stages == s].mean(axis=0) for s in np.unique(stages)}


def _determined(names: Sequence[str], obs: list[Observation], p0: dict[str, float],
                predict) -> tuple[list[str], dict[str, str]]:
    """The candidates ``names`` the observations determine, and every other parameter of
    ``p0`` with why not (the module's step 1): the Jacobian of each class's log seconds, summed
    over the stages (stages alone, differing only in the mix of their ops, pin no parameter),
    per parameter moved across its bounds' width. ``predict(p, moved)`` gives the observations'
    predicted seconds, shape (len(obs),)."""
    classes = sorted({o.cls for o in obs}, key=FITTED_CLASSES.index)
    rows = np.array([[o.cls == c for o in obs] for c in classes], float)  # (classes, obs)
    not_determined = {k: v for k, v in _NEVER.items() if k in p0}
    columns: list[np.ndarray] = []
    kept: list[str] = []
    for name in names:
        lo, hi = CANDIDATES[name]
        if name not in p0:
            not_determined[name] = "not a parameter of this store's op model"
            continue
        h = 1e-3 * (hi - lo)
        x = min(max(p0[name], lo + h), hi - h)
        up = rows @ predict({**p0, name: x + h}, [name])
        down = rows @ predict({**p0, name: x - h}, [name])
        col = (np.log(up) - np.log(down)) / 2e-3
        if not np.isfinite(col).all() or np.abs(col).max() < MIN_SINGULAR_VALUE:
            not_determined[name] = "no measured class depends on it"
            continue
        trial = np.column_stack([*columns, col])
        if np.linalg.svd(trial, compute_uv=False)[-1] < MIN_SINGULAR_VALUE:
            not_determined[name] = ("the measured classes cannot tell it from "
                                    + ", ".join(kept))
            continue
        columns.append(col)
        kept.append(name)
    return kept, not_determined


def fit_trace(measurement: StepMeasurement, session: Session, base: ProfileStore,
              candidates: Sequence[str] | None = None) -> TraceFit:
    """Fit ``base``'s op-model parameters to the per-class times of a measured step.

    Parameters
    ----------
    measurement : StepMeasurement
        One iteration of one or more ranks' traces of ``session``'s run.
    session : Session
        The run the traces were taken of (ranks map to stages as
        :func:`core.accuracy.trace_compare.rank_stage` says).
    base : ProfileStore
        The store to start from (device peaks, bandwidths, collective curves, op model).
    candidates : sequence of str, optional
        Parameters to try (default: every one of :data:`CANDIDATES`, in its order).

    Returns
    -------
    TraceFit

    Raises
    ------
    ConfigError
        A rank beyond the plan's GPUs.
    ValueError
        No class is both measured and predicted above zero; an unknown candidate.
    """
    from scipy.optimize import least_squares

    names = list(CANDIDATES if candidates is None else candidates)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        raise ValueError(f"no trace fit for {', '.join(unknown)} (known: {', '.join(CANDIDATES)})")
    p0 = store_op_model(base, effective_op_model(base.op_model))
    form = class_form(session, base)
    means = _stage_means(measurement, session)
    before = predicted_classes(session, base, p0, form)
    obs: list[Observation] = []
    left_out: list[str] = []
    for st, mean in sorted(means.items()):
        for cls in FITTED_CLASSES:
            meas = float(mean[measurement.rows.index(cls)]) if cls in measurement.rows else 0.0
            pred = float(before[cls][st])
            if meas > 0 and pred > 0:
                obs.append(Observation(st, cls, meas, pred))
            elif meas > 0 or pred > 0:
                left_out.append(f"stage {st} {cls}: " + ("not predicted" if meas > 0
                                                         else "not measured"))
    if not obs:
        raise ValueError("no class is both measured and predicted above zero: nothing to fit")
    y = np.log([o.measured_s for o in obs])
    needs_graph = {"collective_overhead_s", "inter_node_efficiency", "all_to_all_efficiency"}

    def predict(p: dict[str, float], fitted: Sequence[str]) -> np.ndarray:
        compute = form.seconds(p if _fits_peak(base) else {**p, "peak_fraction": 1.0})
        values = dict(zip(COMPUTE_CLASSES, compute))
        if needs_graph & set(fitted):
            values.update(zip(COLLECTIVE_CLASSES, _collectives(session, base, p)))
        else:
            values.update({c: before[c] for c in COLLECTIVE_CLASSES})
        return np.array([values[o.cls][o.stage] for o in obs])

    # 1. which parameters the observations determine
    kept, not_determined = _determined(names, obs, p0, predict)
    # 2. fit the kept ones; the rest keep the base's values
    p = dict(p0)
    if kept:
        lo = np.array([CANDIDATES[k][0] for k in kept])
        hi = np.array([CANDIDATES[k][1] for k in kept])
        x0 = np.clip([p0[k] for k in kept], lo, hi)

        def residual(x: np.ndarray) -> np.ndarray:
            return np.log(predict({**p0, **dict(zip(kept, x.tolist()))}, kept)) - y

        sol = least_squares(residual, x0, bounds=(lo, hi), x_scale=hi - lo, xtol=1e-12,
                            ftol=1e-12, gtol=1e-12, max_nfev=400)
        p.update(zip(kept, (float(v) for v in sol.x)))
    after = predict(p, kept)
    for o, a in zip(obs, after.tolist()):
        o.after_s = a
    return TraceFit(op_model=p, base_op_model=p0, fitted=kept, not_determined=not_determined,
                    observations=obs, left_out=left_out)


def trace_calibrated_store(base: ProfileStore, result: TraceFit, data: Sequence[str]
                           ) -> ProfileStore:
    """``base``'s device with the fitted op model (op tables the model tabulated,
    :func:`core.accuracy.fit_params.apply_fit`) and a provenance naming the traces ``data``, the
    fitted parameters and those left as they were, with why."""
    store = apply_fit(base, result.op_model)
    store.provenance = {
        "method": "calibrated", "source": "profiler trace",
        "date": _dt.date.today().isoformat(),
        "base_profile": base.summary(),
        "data": "; ".join(data),
        "parameters": {k: float(v) for k, v in result.op_model.items()},
        "fitted_parameters": {k: {"base": float(result.base_op_model[k]),
                                  "fitted": float(result.op_model[k])} for k in result.fitted},
        "not_determined": dict(result.not_determined),
        "fit": "bounded least squares on log(predicted/measured) of per-class device seconds "
               "per stage; parameters kept by the class Jacobian's smallest singular value "
               f"(>= {MIN_SINGULAR_VALUE}) (core.accuracy.trace_fit)",
    }
    return store
