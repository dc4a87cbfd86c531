"""The shared fit of several GPU kinds: one set of efficiencies (fractions of each kind's
data-sheet peaks) fitted on runs of every kind, starting from the analytic stores built from
resources/gpu_specs (``vtrain calibrate --out-dir``, docs/accuracy.md "Calibrating the H100,
H200, B200 and GB200 stores"). The fit itself is :func:`core.accuracy.calibrate.fit`; this
module chooses its parameters, prior and bounds, and writes one store per kind."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from core.accuracy.calibrate import FitResult
from core.accuracy.fit_params import (HALF_PRECISIONS, apply_fit, base_of, param_bounds,
                                      shared_fit_params, store_op_model)
from core.model.ops import effective_op_model
from core.plan.session import Session
from core.store.gpu_spec import fits_peak_fraction, kind_fits_peak_fraction
from core.store.profile_store import ProfileStore

if TYPE_CHECKING:  # pragma: no cover
    from core.store.interval import ResidualTable


def analytic_bases() -> Callable[[Session], ProfileStore]:
    """Each session's base store: the analytic store of its GPU kind, generated from the
    shipped spec file (:func:`core.store.profiles_gen.generate_store`; one per kind, cached).

    Raises
    ------
    KeyError
        A session's GPU kind has no shipped spec.
    """
    from core.store.profiles_gen import generate_store

    made: dict[str, ProfileStore] = {}

    def base(session: Session) -> ProfileStore:
        kind = session.cluster.gpu
        if kind not in made:
            made[kind] = generate_store(kind)
        return made[kind]
    return base


#: Prior weight of the shared fit (:func:`fit`'s ``prior``): a tenth of a run per parameter at the
#: spec's value. With a handful of runs and several parameters, the runs alone cannot tell
#: parameters apart that move times alike (3 FP8 runs traded the HBM efficiency down to 0.31
#: against an FP8 GEMM efficiency at its bound); the prior keeps what the runs do not decide
#: at the data-sheet assumption and lets many runs outweigh it.
SHARED_PRIOR = 0.1
#: Bounds of the shared fit that are narrower than :data:`FIT_PARAMS`', from what the hardware
#: does: a large BF16/FP16 GEMM reaches at least 0.65 of the dense peak (measured on an H200 at
#: its 700 W limit, ``benchmarks/data/h200_kernel_classes.json``: Llama layer GEMMs sustain
#: 0.66-0.69, fitted 0.676; cuBLAS bursts on cool clocks reach 0.8), an element-wise kernel
#: streams at least 0.4 of the data-sheet HBM bandwidth (the same H200: 0.85-0.91 for copies,
#: adds and SiLU, 0.45-0.69 for torch's norms; docs/accuracy.md, twelfth round). The fitted
#: memory efficiency ends at its floor: it stands for memory traffic the op model does not list
#: (an eager Llama 3 8B layer on that H200 is the shipped store's layer to 0.4 %, the compiled
#: one the measured kernels' to 0.1 %) and for time beyond one GPU's compute. The published rows alone push both lower: the MoE rows are
#: slower than the model makes them, and these two parameters are the only ones that can slow
#: them, at the cost of every dense plan (at the 22 rows' own optimum, HBM 0.23, GPT-3 1.3B on
#: an H100 comes out barely faster than on an A100, 4.46 s against 4.98 s, which no
#: measurement supports). Bounded, the MoE rows keep their error in sight (docs/accuracy.md).
SHARED_BOUNDS: dict[str, tuple[float, float]] = {"memory_efficiency": (0.4, 1.0),
                                                 "gemm_efficiency_max": (0.65, 1.0)}


#: Parameters the shared fit does not fit but takes from elsewhere (the fitted ones start there
#: too): ``op_overhead_s``, the host (CPU) time of one op call, from the A100 store's full fit on
#: the vTrain authors' measured Megatron runs (``profiles/A100-SXM4-80GB.h5``: 0.50 ms, fitted
#: with the per-kernel launch time, which came out 0). An op takes the larger of its device and
#: host times (:func:`core.model.ops.combine_op_time`): Megatron runs its modules eagerly from
#: Python, the host's time per module call does not shrink with a faster GPU, and an MoE layer
#: runs five or six ops per pass (attention, router, permutation, experts, un-permutation, shared
#: experts) where a dense layer runs two, most of them short (the router, the
#: token permutation and un-permutation), with a device-to-host copy of the token counts in
#: every layer's dispatch (Megatron-Core's all-to-all dispatcher takes the all-to-all's split
#: sizes on the host, at its ``cuda_sync_point``) that keeps the host from running ahead. The published runs are too few to fit it
#: beside the efficiencies: fitted on them (start and prior at 0.2 ms) it came out 0.60 ms and
#: the held-out error 14.34 %, against 14.06 % at the A100's value (docs/accuracy.md, seventh
#: round). CUDA graphs remove the host time of the modules they capture (``plan.cuda_graph_impl``,
#: :mod:`core.model.cuda_graphs`), but the published sessions predate the field and run eagerly:
#: the recipes that capture some (the DeepSeek-V3 recipes on B200 and GB200: attention, router
#: and dispatch preprocessing; a full-iteration graph for MXFP8 on GB200) are fitted with it.
SHARED_FIXED: dict[str, float] = {"op_overhead_s": 5.0e-4}


#: The kernel classes' own efficiencies (:mod:`core.model.ops`): fitted only when asked
#: (``kernel_classes=True``, ``vtrain calibrate/validate --kernel-classes``). On the published
#: runs, fitting them moved the held-out error from 15.3 % to 16.9 % (docs/accuracy.md, sixth
#: round): the grouped-GEMM efficiency takes up an MoE error that the op model does not
#: explain yet (GPT-OSS too fast, DeepSeek-V3 too slow at like expert GEMM sizes), so the
#: shipped stores keep them at 1 (the dense curve) until that term is found.
KERNEL_CLASS_PARAMS = ("grouped_gemm_efficiency", "flash_attention_efficiency")


def supported_params(sessions: Sequence[Session], kernel_classes: bool = False) -> list[str]:
    """The shared-fit parameters (:func:`shared_fit_params`) the runs can pin down: the
    half-precision GEMM efficiency only with a bf16/fp16 run, the FP8 one only with an FP8 run
    (FP8 runs alone would otherwise drag the BF16 efficiency to the FP8 rate), the all-to-all
    efficiency only with an expert-parallel run that dispatches with Megatron's alltoall
    dispatcher, the flex one (DeepEP / HybridEP) only with one that dispatches with flex,
    the network efficiency only with a run that spans nodes, the peak fraction only with a run
    on a GPU kind without a data sheet of its own (:func:`kind_fits_peak_fraction`) beside
    runs on data-sheet kinds, the grouped expert GEMM efficiency only with MoE runs beside dense
    ones, the FlashAttention efficiency only with flash runs at two or more sequence lengths;
    the memory efficiency always. The others keep the spec's values (1 for the relative ones:
    the dense curve). The kernel classes' efficiencies (:data:`KERNEL_CLASS_PARAMS`) only with
    ``kernel_classes``."""
    half = any(s.plan.precision in HALF_PRECISIONS for s in sessions)
    fp8 = any(s.plan.precision == "fp8" for s in sessions)
    # a kind without a data sheet: its share of the reference peaks is told apart from the GEMM
    # efficiency only beside runs on data-sheet kinds (alone, the two move its times alike)
    capped = any(kind_fits_peak_fraction(s.cluster.gpu) for s in sessions) and not all(
        kind_fits_peak_fraction(s.cluster.gpu) for s in sessions)
    ep = [s for s in sessions if (getattr(s.plan, "expert_parallel", 1) or 1) > 1]
    flex = [s for s in ep if getattr(s.plan, "moe_token_dispatcher_type", "alltoall") == "flex"]
    multi = any(s.plan.num_gpus > s.cluster.gpus_per_node for s in sessions)
    # a kernel class's own efficiency only beside runs that time the dense curve apart from it:
    # grouped expert GEMMs with an MoE run and a dense one; FlashAttention with flash runs at
    # two or more sequence lengths (attention's share of a layer's FLOPs grows with s: at one
    # length its efficiency moves the runs' times as the dense curve does)
    moe = any(s.model.is_moe for s in sessions)
    dense = any(not s.model.is_moe for s in sessions)
    flash_s = {s.model.seq_length for s in sessions if s.model.attention_kernel == "flash"}
    keep = {"gemm_efficiency_max": half, "fp8_gemm_efficiency": fp8,
            "all_to_all_efficiency": len(ep) > len(flex), "flex_all_to_all_efficiency": bool(flex),
            "inter_node_efficiency": multi, "memory_efficiency": True, "peak_fraction": capped,
            "grouped_gemm_efficiency": kernel_classes and moe and dense,
            "flash_attention_efficiency": kernel_classes and len(flash_s) > 1}
    return [n for n in shared_fit_params() if keep.get(n, True)]


def shared_fit_kwargs(base, sessions: Sequence[Session], kernel_classes: bool = False) -> dict:
    """:func:`fit` keywords of the shared fit: the parameters the runs support
    (:func:`supported_params`, with the kernel classes' efficiencies when ``kernel_classes``),
    no per-shape factors (never tuned to single runs), the other parameters at the base store's
    (spec) values and the fitted ones starting there."""
    params = supported_params(sessions, kernel_classes)
    spec = dict(base_of(base, sessions[0]).op_model or {}) if sessions else {}
    # a parameter the runs barely move stays at the spec's; the host time per op call is the
    # A100 fit's (SHARED_FIXED)
    start = {**effective_op_model(spec), **SHARED_FIXED}
    return {"params": params, "corrections": False, "start": start, "prior": SHARED_PRIOR,
            "bounds": SHARED_BOUNDS}


def use_shared_fit(sessions: Sequence[Session]) -> bool:
    """Whether measured runs are calibrated with the shared fit: any run on a GPU kind other
    than the A100 (whose store is fitted with the full procedure on the vTrain authors' data)."""
    return any(s.cluster.gpu != "A100-SXM4-80GB" for s in sessions)


def finite_metrics(met: dict) -> dict:
    """``met`` with every non-finite figure as None (R^2 of one run is NaN): stores and JSON
    hold only finite numbers."""
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in met.items()}


def shared_stores(result: FitResult, kinds: Sequence[str], base, data: Sequence[str],
                  cv: dict[str, dict[str, float]], rows_by_kind: dict[str, int],
                  cv_by_kind: dict[str, dict[str, float]],
                  residuals: "ResidualTable | None" = None,
                  fitted: Sequence[str] = ()) -> dict[str, ProfileStore]:
    """One calibrated store per GPU kind in ``kinds`` from a shared fit (``result``).

    Each store is its kind's analytic base (``base``: a function of a session, or of nothing
    but the kind via a probe session) with the shared parameters; provenance says so, names
    the data, the rows of that kind, the cross-validated error overall (``cv``) and on that
    kind's rows (``cv_by_kind``), and carries the shared out-of-sample ``residuals``;
    ``fitted`` names the parameters fitted (the others are the spec's), ``parameter_bounds``
    their bounds (:func:`core.accuracy.fit_params.param_bounds` with :data:`SHARED_BOUNDS`:
    ``vtrain profile show`` names those that ended at one, :func:`parameters_at_bound`).
    """
    from core.plan.cluster import ClusterConfig, CostConfig
    from core.plan.model_config import ModelConfig
    from core.plan.parallel import ParallelPlan

    bounds = {f: param_bounds(f, SHARED_BOUNDS) for f in fitted}
    cv = {name: finite_metrics(met) for name, met in cv.items()}
    cv_by_kind = {name: finite_metrics(met) for name, met in cv_by_kind.items()}
    out = {}
    for kind in kinds:
        probe = Session(ModelConfig(), ParallelPlan(), ClusterConfig(gpu=kind), CostConfig())
        b = base_of(base, probe)
        store = apply_fit(b, result.op_model, None)
        store.residuals = residuals
        n = rows_by_kind.get(kind, 0)
        store.provenance = {
            "method": "calibrated", "date": _dt.date.today().isoformat(),
            "base_profile": b.summary(), "base_provenance": dict(b.provenance),
            "data": "; ".join(data),
            "parameters": {k: float(v) for k, v in store.op_model.items()},
            "fitted_parameters": [f for f in fitted
                                  if f != "peak_fraction" or fits_peak_fraction(b)],
            "parameter_bounds": {f: {"low": float(lo), "high": float(hi)} for f, (lo, hi) in bounds.items()
                                 if f != "peak_fraction" or fits_peak_fraction(b)},
            "shared_fit": (
                "one set of parameters for every GPU kind, as fractions of each kind's data-sheet "
                "peaks (GEMM FLOP/s per dtype, HBM bandwidth, network bandwidth), fitted on all "
                f"usable runs of the data ({sum(rows_by_kind.values())} runs: "
                + ", ".join(f"{k} {v}" for k, v in sorted(rows_by_kind.items())) + "); no "
                "per-shape factors"),
            "rows_of_this_kind": n,
            "num_shape_factors": 0,
            "cross_validation": cv,
            "cross_validation_this_kind": cv_by_kind.get(kind, {}),
            "cross_validation_procedure": (
                "k-fold over all usable runs (folds from numpy default_rng(0)), each fold fitted "
                "with shared parameters on the other folds (core.accuracy.calibrate.cross_validate_files)"),
            "fit": "bounded robust least squares on log(predicted/measured), critical-path "
                   "linearization, parameters shared across GPU kinds (core.accuracy.calibrate)",
        }
        if fits_peak_fraction(b):
            store.provenance["peak_fraction"] = (
                f"{store.op_model.get('peak_fraction', 1.0):.4g} of the reference peaks "
                f"(peak_flops, the spec's): {kind} has no data sheet of its own; the share it "
                f"sustains is fitted with the shared parameters on its {n} runs, the other kinds "
                "keep 1")
        if not n:
            store.provenance["note"] = (f"no run of {kind} in the data: its parameters are the "
                                        "shared fit of the other kinds, applied to its own peaks")
        if residuals is not None:
            store.provenance["error_band"] = (
                f"split conformal intervals from the {len(residuals)} out-of-sample residuals in "
                "/residuals (core.store.interval), shared by the kinds: " + residuals.procedure)
        out[kind] = store
    return out


#: A fitted parameter within this share of its bounds' width from a bound is at that bound.
AT_BOUND_TOLERANCE = 1e-3


def bound_hits(provenance: dict) -> dict[str, dict]:
    """The fitted parameters of a store's ``provenance`` that ended at a bound of their fit
    (within :data:`AT_BOUND_TOLERANCE` of the bounds' width): a sign of a term the op model
    lacks (the runs pull the parameter past what the hardware does, docs/accuracy.md). Reads
    ``parameters``, ``fitted_parameters`` and ``parameter_bounds`` (stores written before the
    bounds were kept have none: no entry).

    Returns
    -------
    dict
        name -> ``{"value": float, "bound": "lower" | "upper", "limit": float}``, in the
        order of ``fitted_parameters``.
    """
    params, bounds = provenance.get("parameters") or {}, provenance.get("parameter_bounds") or {}
    out = {}
    for name in provenance.get("fitted_parameters") or []:
        if name not in params or not isinstance(bounds.get(name), dict):
            continue
        v, lo, hi = float(params[name]), float(bounds[name]["low"]), float(bounds[name]["high"])
        tol = AT_BOUND_TOLERANCE * (hi - lo)
        if v <= lo + tol:
            out[name] = {"value": v, "bound": "lower", "limit": lo}
        elif v >= hi - tol:
            out[name] = {"value": v, "bound": "upper", "limit": hi}
    return out


def parameters_at_bound(provenance: dict) -> list[str]:
    """:func:`bound_hits` as ``"name = value (lower bound low)"`` lines (``vtrain profile show``)."""
    return [f"{name} = {h['value']:.4g} ({h['bound']} bound {h['limit']:g})"
            for name, h in bound_hits(provenance).items()]


__all__ = ["analytic_bases", "shared_fit_kwargs", "parameters_at_bound", "bound_hits", "AT_BOUND_TOLERANCE",
           "KERNEL_CLASS_PARAMS", "use_shared_fit", "shared_stores", "finite_metrics",
           "supported_params", "fits_peak_fraction", "store_op_model", "SHARED_FIXED"]


# --------------------------------------------------------------------------- kinds without runs

def transferred_store(base: ProfileStore, reference: ProfileStore) -> ProfileStore:
    """``base``'s device (an analytic store of a GPU kind no run measures) with the parameters
    fitted for ``reference`` (a calibrated store of the same architecture), as
    :func:`shared_stores` gives a kind without runs the shared fit: the A800 takes the A100's.

    The parameters are fractions of each device's own data-sheet figures (GEMM FLOP/s per dtype,
    HBM, NVLink and network bandwidth), so they carry over to a part of the same architecture;
    ``reference``'s per-shape factors and error band (residuals of *its* runs) do not: the store
    has neither, and its provenance says so.

    Raises
    ------
    ValueError
        ``reference`` is not a calibrated store (nothing was fitted to transfer).
    """
    p = reference.provenance
    if p.get("method") != "calibrated":
        raise ValueError(f"{reference.summary()}: not a calibrated store (method "
                         f"{p.get('method')!r}); its parameters were never fitted")
    store = apply_fit(base, reference.op_model, None)
    store.provenance = {
        "method": "calibrated", "date": _dt.date.today().isoformat(),
        "base_profile": base.summary(), "base_provenance": dict(base.provenance),
        "data": p.get("data", ""),
        "parameters": {k: float(v) for k, v in store.op_model.items()},
        "parameters_from": reference.summary(),
        "rows_of_this_kind": 0,
        "num_shape_factors": 0,
        "note": (f"no run of {base.device_name} in the data: its parameters are those fitted for "
                 f"{reference.device_name} on that data (the same architecture), applied to its "
                 f"own data-sheet figures; {reference.device_name}'s per-shape factors "
                 f"({p.get('num_shape_factors', 0)}) and error band are not carried over"),
    }
    return store


__all__ += ["transferred_store"]
