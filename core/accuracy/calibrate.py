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
   new parameters (the critical path may move) for a few rounds;
4. then, as a profile would, give each measured shape its own op times: a
   factor on the model's time of the transformer-layer ops (attention, MLP)
   and the embedding and output ops, per shape (s, h, a, f, V, t, b, dtype)
   measured in at least three runs, fitted with a ridge penalty on the log
   factor so a shape seen in few runs stays close to the model. The calibrated store tabulates the
   corrected times; shapes never measured use the fitted model.

Every reported accuracy is out-of-sample: k-fold cross-validation where each
fold's held-out rows are predicted by the full simulator with the parameters
fitted on the other folds, or a fit on one file predicting another.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from core.plan.session import Session
from core.plan.parallel import fp8_recipe, tensor_dtype
from core.plan.model_config import padded_vocab_size
from core.store.gpu_spec import fits_peak_fraction
from core.sim.graph import build_graph
from core.sim.op_times import op_key, optimizer_params
from core.sim.graph_types import KIND_COMPUTE, OPS
from core.model.fp8 import FP8_WEIGHT_CAST_OP
from core.model.keys import MOE_OPS, SWA_OPS, mla_key
from core.model.memory import fp8_weights_per_gpu
from core.model.ops import (ALL_OPS, DEFAULT_OP_MODEL, DERIVED_OPS, OPTIMIZER_OP, combine_op_time, device_key,
                  effective_op_model,
                  kernel_arrays, kernel_class, kernel_fp8, kernel_peak_flops, kernel_times, op_kernels,
                  table_covers)
from core.store.profile_store import ProfileStore
from core.sim.simulate import simulate
from core.sim.solver import critical_path
from core.accuracy.measured import MeasuredRun
from core.accuracy.metrics import error_metrics

if TYPE_CHECKING:  # pragma: no cover
    from core.store.interval import ResidualTable

__all__ = ["FIT_PARAMS", "model_store", "LinearizedRow", "linearize", "predict_linearized",
           "fit", "FitResult", "cross_validate", "calibrated_store", "apply_fit",
           "measured_sessions", "shape_key"]

#: Fitted parameters and their bounds (SI units).
FIT_PARAMS: dict[str, tuple[float, float]] = {
    "gemm_efficiency_max": (0.2, 1.0),
    "gemm_half_size": (1.0, 4000.0),
    "memory_efficiency": (0.1, 1.0),
    "kernel_overhead_s": (0.0, 100e-6),
    "op_overhead_s": (0.0, 5e-3),
    "kernel_launch_s": (0.0, 100e-6),
    "iteration_overhead_s": (0.0, 2.0),
    "collective_overhead_s": (0.0, 5e-3),
    "p2p_overhead_s": (0.0, 5e-3),
    "inter_node_efficiency": (0.05, 1.0),
}
# p2p_efficiency is not fitted: on the authors' data it improved no fit (in-sample MAPE
# 5.68 % -> 5.69 % on the multi-node runs) and drifted to unphysical values (12 % of the
# network share), which made 1F1B look slower than GPipe for reasons nobody measured.
#: Where the search starts (host overheads must start above zero: below the
#: device time their gradient vanishes).
FIT_START = {"gemm_efficiency_max": 0.7, "gemm_half_size": 200.0, "memory_efficiency": 0.7,
             "kernel_overhead_s": 2e-6, "op_overhead_s": 2e-4, "kernel_launch_s": 5e-6,
             "iteration_overhead_s": 1e-3, "collective_overhead_s": 1e-5, "p2p_overhead_s": 1e-5,
             "inter_node_efficiency": 0.8}
#: Ridge weight on the log of a shape's correction factor, per unit of log residual.
DEFAULT_RIDGE = 0.05
#: A shape gets its own factor only when measured at least this often: one or two runs
#: cannot tell a property of the shape from an anomaly of a run.
MIN_ROWS_PER_SHAPE = 3
#: Robust loss on log residuals (scipy's soft_l1 with this scale): a run far off the rest
#: (a measurement anomaly) pulls the fit as a ~5% error would, not quadratically.
ROBUST_LOSS = "soft_l1"
ROBUST_SCALE = 0.05
#: Op ids of compute tasks (the rest, >= 0, are communication); MoE layers' ops included.
_COMPUTE_IDS = np.array([i for i, name in enumerate(OPS)
                         if name in ALL_OPS or name in DERIVED_OPS or name in MOE_OPS])
HALF_PRECISIONS = ("fp16", "bf16")
_FAMILY = {"attention_fwd": "layer", "attention_bwd": "layer", "mlp_fwd": "layer", "mlp_bwd": "layer",
           "attention_core_fwd": "layer", "layernorm_fwd": "layer", "mlp_core_fwd": "layer",
           "attention_swa_fwd": "layer", "attention_swa_bwd": "layer",
           "attention_core_swa_fwd": "layer", "attention_sac_fwd": "layer", "mlp_sac_fwd": "layer",
           "embedding_fwd": "edge", "embedding_bwd": "edge", "output_fwd": "edge", "output_bwd": "edge"}


#: Parameters of the shared fit of the modern GPU kinds (:func:`shared_fit_params`): efficiencies
#: as fractions of each GPU's data-sheet peaks (GEMM FLOP/s, HBM bandwidth, network bandwidth)
#: and the FP8 GEMM and all-to-all efficiencies where the op model has them. With a few
#: dozen runs over four GPU kinds, shape parameters (``gemm_half_size``) are left at the spec's
#: values and host overheads at the spec's or the A100 fit's
#: (:data:`core.accuracy.shared_fit.SHARED_FIXED`): the runs are few, and cannot pin them
#: beside the efficiencies.
#: ``peak_fraction`` is not shared: it is the sustained share of the reference peaks of the
#: GPU kinds without a data sheet of their own (:func:`fits_peak_fraction`), fitted with the
#: others on those kinds' runs alone (every other kind keeps 1, :func:`store_op_model`).
SHARED_FIT_PARAMS = ("gemm_efficiency_max", "memory_efficiency", "inter_node_efficiency",
                     "fp8_gemm_efficiency", "all_to_all_efficiency", "flex_all_to_all_efficiency",
                     "peak_fraction", "grouped_gemm_efficiency", "flash_attention_efficiency")
#: Bounds of the optional shared parameters (added to FIT_PARAMS when the op model has them).
#: The kernel classes' relative efficiencies (shares of the dense GEMM curve's,
#: :func:`core.model.ops.kernel_class`) lie in 0.3-1.2: a grouped expert GEMM (Megatron-Core's
#: ``TEGroupedMLP``, cuBLASLt / CUTLASS grouped GEMM) runs its experts' GEMMs at the dense rate
#: of their own size at best (the half-size roll-off already takes the per-expert rows) and
#: loses to the busiest expert, the grouped launch and the tile waste of ragged row counts;
#: FlashAttention's forward sustains 50-73 % of the A100's peak (Dao 2023, Sec. 4.1) and up to
#: 75 % of the H100's BF16 peak (Shah et al. 2024, Sec. 4.1), against 70-80 % for cuBLAS GEMMs,
#: about 0.7-1.0 of the dense curve; the upper bound 1.2 leaves room where the dense curve
#: itself sits low (its fitted maximum under what cuBLAS reaches).
_OPTIONAL_BOUNDS = {"fp8_gemm_efficiency": (0.3, 1.2), "all_to_all_efficiency": (0.05, 1.0),
                    "flex_all_to_all_efficiency": (0.05, 1.0), "peak_fraction": (0.3, 1.0),
                    "grouped_gemm_efficiency": (0.3, 1.2), "flash_attention_efficiency": (0.3, 1.2)}


def store_op_model(store: ProfileStore, op_model: dict[str, float]) -> dict[str, float]:
    """``op_model`` as ``store``'s device runs it: ``peak_fraction`` 1 unless the device has
    no data sheet of its own (:func:`fits_peak_fraction`). One op model is fitted for every GPU
    kind; only the kinds without a data sheet sustain a fitted share of their reference peaks."""
    if op_model.get("peak_fraction", 1.0) != 1.0 and not fits_peak_fraction(store):
        return {**op_model, "peak_fraction": 1.0}
    return op_model


def shared_fit_params() -> list[str]:
    """The shared-fit parameters the op model knows (:data:`SHARED_FIT_PARAMS` that are keys of
    :data:`core.model.ops.DEFAULT_OP_MODEL`)."""
    return [n for n in SHARED_FIT_PARAMS if n in DEFAULT_OP_MODEL]


def param_bounds(name: str, overrides: dict[str, tuple[float, float]] | None = None
                 ) -> tuple[float, float]:
    """Bounds ``(low, high)`` of fit parameter ``name``: ``overrides``' (the shared fit's
    :data:`core.accuracy.shared_fit.SHARED_BOUNDS`), else :data:`FIT_PARAMS`' or those of the
    optional shared parameters.

    Raises
    ------
    KeyError
        A parameter without bounds.
    """
    if overrides and name in overrides:
        return tuple(overrides[name])
    return _bounds(name)


def _bounds(name: str) -> tuple[float, float]:
    if name in FIT_PARAMS:
        return FIT_PARAMS[name]
    if name in _OPTIONAL_BOUNDS:
        return _OPTIONAL_BOUNDS[name]
    raise KeyError(f"no bounds for fit parameter {name!r}")


#: A profile store, or a function giving each session its store (several GPU kinds fitted
#: together: each run's times come from its own GPU's peaks, the parameters are shared).
BaseStores = "ProfileStore | Callable[[Session], ProfileStore]"


def base_of(base, session: Session) -> ProfileStore:
    """The base store of ``session``: ``base`` itself, or ``base(session)`` when it is a function."""
    return base(session) if callable(base) else base


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


def shape_key(session: Session) -> tuple:
    """Correction key of a plan: ``("shape", s, h, a, f, V, t, b, dtype)`` (V padded) for a GPT;
    a model of another family (:data:`core.model.keys.FAMILY_KEY_DEFAULTS` not at GPT's values)
    adds its family columns, and :func:`apply_fit` tabulates no correction for it (its ops keep
    the fitted model: a GPT shape's factor never reaches it, nor its factor a GPT)."""
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    key = ("shape", m.seq_length, m.hidden_size, m.num_attention_heads, m.ffn,
           padded_vocab_size(m.vocab_size, t), t, pl.micro_batch_size, pl.precision)
    family = (m.query_groups, m.activation, m.normalization, m.position_embedding,
              m.attention_kernel, int(m.qk_layernorm), m.head_dim)
    gpt = (m.num_attention_heads, "gelu", "layernorm", "learned", "unfused", 0,
           m.hidden_size // m.num_attention_heads)
    if m.is_moe:  # an MoE model never shares a factor with its dense counterpart
        family += ("moe", m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts,
                   m.moe_layer_frequency, m.moe_first_dense_layers, pl.expert_parallel,
                   pl.expert_tensor_parallel)
    if m.multi_latent_attention is True:  # MLA's attention never shares a GPT factor
        family += ("mla", *mla_key(m).values())
    if pl.context_parallel > 1:  # ops of s/cp tokens (context parallelism needs flash: not GPT)
        family += (pl.context_parallel,)
    return key if family == gpt else key + family


def model_store(base: ProfileStore, op_model: dict[str, float]) -> ProfileStore:
    """A copy of ``base`` without op tables (every op from the analytic model) and with ``op_model``
    (as ``base``'s device runs it, :func:`store_op_model`)."""
    store = ProfileStore(base.device_name, dict(base.peak_flops), base.memory_bytes,
                         base.memory_bandwidth_bytes_per_s, dict(base.provenance),
                         dict(store_op_model(base, op_model)))
    for kind, sizes in base.collective_kinds().items():
        for n in sizes:
            store.add_collective(kind, n, *base.collective_curve(kind, n))
    return store


def apply_fit(base: ProfileStore, op_model: dict[str, float],
              corrections: dict[tuple, float] | None = None) -> ProfileStore:
    """``base``'s device with the fitted model, and op tables holding the corrected times.

    Corrected shapes are tabulated at the generator's micro-batch sizes too,
    with the factor log-interpolated between measured micro-batch sizes and
    the nearest measured one beyond them, so a table row along b never mixes
    corrected and uncorrected times. bf16 and fp16 run at the same
    tensor-core rate, so a half-precision shape's factor holds for both.
    """
    from core.store.profiles_gen import fill_op_tables

    store = model_store(base, op_model)
    by_shape: dict[tuple, dict[int, float]] = {}  # (s, h, a, f, V, t, dtype) -> {b: factor}
    for key, c in (corrections or {}).items():
        if len(key) != 9:  # a model of another family (see shape_key): the model times it
            continue
        _, seq, h, a, f, V, t, b, dtype = key
        twins = HALF_PRECISIONS if dtype in HALF_PRECISIONS else (dtype,)
        for dt in twins:
            by_shape.setdefault((seq, h, a, f, V, t, dt), {})[b] = c
    extra = [dict(s=k[0], h=k[1], a=k[2], f=k[3], V=k[4], t=k[5], dtype=k[6], b=min(v))
             for k, v in by_shape.items()]

    def factor(op: str, key: dict) -> float:
        if op not in _FAMILY or not table_covers(DERIVED_OPS.get(op, op), key, ()):
            return 1.0  # corrections are of GPT shapes (table_covers: key at GPT's values)
        for (seq, h, a, f, V, t, dtype), by_b in by_shape.items():
            if ((seq, h, t, dtype) == (key["s"], key["h"], key["t"], key["dtype"])
                    and key.get("a", a) == a and key.get("f", f) == f and key.get("V", V) == V):
                if key["b"] in by_b:
                    return by_b[key["b"]]
                bs = np.array(sorted(by_b), float)
                logs = np.log([by_b[int(x)] for x in bs])
                return float(np.exp(np.interp(np.log(key["b"]), np.log(bs), logs)))
        return 1.0

    fill_op_tables(store, extra, factor)
    return store


@dataclass
class LinearizedRow:
    """Iteration time of one plan along a fixed critical path, as a function of the parameters.

    Attributes
    ----------
    kernels : tuple of arrays
        ``(flops, nbytes, size, is_gemm)`` of the kernels of every distinct op
        on the path, shape (k,).
    kernel_op : int array, shape (k,)
        Which op (0..o-1) each kernel belongs to.
    op_count, op_num_kernels : float arrays, shape (o,)
        Times each op runs on the path, and its kernel count.
    op_is_optimizer : bool array, shape (o,)
    op_family : list of str, length o
        "layer", "edge" or "" (layer and edge ops take the shape's factor).
    key : tuple
        The row's :func:`shape_key`.
    comm_fixed_s, comm_inter_s, p2p_inter_s, num_collectives, num_p2p : float
        Communication on the path: ``comm_fixed_s + comm_inter_s /
        inter_node_efficiency + p2p_inter_s / p2p_efficiency + num_collectives *
        collective_overhead_s + num_p2p * p2p_overhead_s``.
    peak_flops : float array, shape (k,)
        Peak FLOP/s of each kernel (:func:`core.model.ops.kernel_peak_flops`: FP8 GEMMs at the FP8 peak).
    memory_bandwidth_bytes_per_s : float
    comm_eff_s : dict
        Further communication efficiencies of the op model (``all_to_all_efficiency`` ...):
        name -> seconds at efficiency 1, adding ``seconds / efficiency``.
    generic : GenericOps or None
        Set when the kernel-level form does not reproduce the simulator's op times (a model
        family or precision whose op times :func:`core.model.ops.analytic_op_time` composes
        otherwise): compute is then evaluated through :func:`core.sim.op_times.lookup_op_times`.
    """

    kernels: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    kernel_op: np.ndarray
    op_count: np.ndarray
    op_num_kernels: np.ndarray
    op_is_optimizer: np.ndarray
    op_family: list[str]
    key: tuple
    comm_fixed_s: float
    comm_inter_s: float
    p2p_inter_s: float
    num_collectives: float
    num_p2p: float
    peak_flops: np.ndarray  # per kernel (FP8 GEMMs at the FP8 peak), FLOP/s
    memory_bandwidth_bytes_per_s: float
    comm_eff_s: dict[str, float] = field(default_factory=dict)
    generic: "GenericOps | None" = None
    op_names: list[str] = field(default_factory=list)
    fp8: np.ndarray | None = None  # per kernel: an FP8 GEMM (core.model.ops.kernel_fp8)
    peak_fraction_fitted: bool = False  # the device's peak_fraction is fitted (fits_peak_fraction)
    kclass: np.ndarray | None = None  # per kernel: its class (core.model.ops.kernel_class)


@dataclass
class GenericOps:
    """Compute along a fixed critical path through the simulator's own op lookups: each path
    task is a fixed multiple of its op's time (``coef[op]``), the optimizer steps of the path
    are ``ratio * optimizer_time(n)`` each. Slower than the kernel form, exact for any op model."""

    session: Session
    probe: ProfileStore
    coef: dict[str, float]
    optimizer: list[tuple[float, float]]  # (parameters, ratio)

    def parts(self, p: dict[str, float]) -> tuple[float, float]:
        """(time of the layer and edge ops, time of the other compute ops) under ``p``, seconds."""
        from core.sim.op_times import lookup_op_times, optimizer_time

        self.probe.op_model = dict(store_op_model(self.probe, p))
        times = lookup_op_times(self.session, self.probe).times
        scaled = sum(c * times[op] for op, c in self.coef.items() if _FAMILY.get(op))
        rest = sum(c * times[op] for op, c in self.coef.items() if not _FAMILY.get(op))
        rest += sum(r * optimizer_time(self.probe, n, self.session.plan.precision)
                    for n, r in self.optimizer)
        return scaled, rest


#: Communication efficiencies of the op model besides the inter-node and pipeline ones, each
#: linearized as seconds / efficiency when the op model has it.
_EXTRA_COMM_EFF = ("all_to_all_efficiency", "flex_all_to_all_efficiency")


def linearize(session: Session, base: ProfileStore, op_model: dict[str, float],
              store: ProfileStore | None = None) -> LinearizedRow:
    """Simulate ``session`` (with ``store``, default the model of ``op_model``) and linearize
    its iteration time around the critical path.

    The steps: the simulation and its critical path, the compute ops on the path in kernel
    form (:func:`_path_kernels`), the communication on the path as a linear function of the
    communication parameters (:func:`_path_comm`), and the check that the kernel form gives
    the simulator's op times (else :func:`_generic_ops`).
    """
    # every parameter explicit: moving the NCCL all-to-all efficiency must not move a flex
    # efficiency that falls back to it (core.model.ops.effective_op_model); peak_fraction as the
    # device runs it (store_op_model)
    op_model = store_op_model(base, effective_op_model(op_model))
    store = store or model_store(base, op_model)
    res = simulate(session, store)
    path = critical_path(res.graph, res.schedule)
    ops = res.graph.op[path]
    stages = res.graph.stage[path]
    pl = session.plan
    n_params = optimizer_params(session)
    kinds = res.graph.kind[path]
    compute = np.isin(ops, _COMPUTE_IDS) | ((ops >= 0) & np.isin(kinds, list(KIND_COMPUTE)))
    pk = _path_kernels(session, base, ops, stages, compute, n_params)
    comm = (ops >= 0) & ~compute
    p = effective_op_model(op_model)
    fixed, inter, p2p_inter, num_calls, num_p2p, extra = _path_comm(
        session, store, op_model, p, float(res.graph.duration_s[path[comm]].sum()), path[comm])
    kernels = pk.kernels
    row = LinearizedRow(kernel_arrays(kernels), np.array(pk.kernel_op, np.int64),
                        np.array(pk.counts, float), np.array(pk.num_k, float),
                        np.array(pk.is_opt, bool), pk.family, shape_key(session),
                        fixed, inter, p2p_inter, num_calls, num_p2p,
                        kernel_peak_flops(kernels, pl.precision, base.peak_flops, base.device_name),
                        base.memory_bandwidth_bytes_per_s, extra, None, pk.names, kernel_fp8(kernels),
                        fits_peak_fraction(base), kernel_class(kernels))
    # the kernel form must give each op the time the simulator's lookups give it (from the
    # model, no tables); where it does not (an op model that composes op times otherwise),
    # evaluate through those lookups
    if not pk.kernel_form or not _kernel_form_agrees(row, session, base, p):
        row.generic = _generic_ops(session, base, op_model, res.graph, path, compute, stages, n_params)
    return row


@dataclass
class _PathKernels:
    """The compute ops on a critical path in kernel form (:func:`_path_kernels`): per kernel
    (length k) its description and its op; per op (length o) its name, count on the path,
    kernel count, whether it is the optimizer step, its family; ``kernel_form`` False when
    some op on the path has no kernel form."""

    kernels: list = field(default_factory=list)
    kernel_op: list[int] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)
    num_k: list[int] = field(default_factory=list)
    is_opt: list[bool] = field(default_factory=list)
    family: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    kernel_form: bool = True

    def add(self, ks: list, count: float, name: str) -> None:
        """Append op ``name`` with kernels ``ks``, run ``count`` times on the path."""
        self.names.append(name)
        self.kernel_op.extend([len(self.counts)] * len(ks))
        self.kernels.extend(ks)
        self.counts.append(count)
        self.num_k.append(len(ks))
        self.is_opt.append(name == OPTIMIZER_OP)
        self.family.append(_FAMILY.get(name, ""))


def _path_kernels(session: Session, base: ProfileStore, ops: np.ndarray, stages: np.ndarray,
                  compute: np.ndarray, n_params) -> _PathKernels:
    """The distinct compute ops of a critical path (``ops``, ``stages``: the path's op ids and
    stages, shape (n,); ``compute``: which are compute) with their kernels
    (:func:`core.model.kernels.op_kernels`) on ``base``'s device: the optimizer step once per
    stage on the path (``n_params``: parameters per stage) with its FP8 weight cast, the other
    ops once with their count."""
    pl = session.plan
    out = _PathKernels()
    # context parallelism: the graph runs an attention op as its part outside the ring (op
    # attention_fwd/bwd, core.sim.graph "attention_fwd:pre") and the ring's core steps (op
    # attention_core_fwd/bwd): the kernel form must not count the core twice
    cp_split = (getattr(pl, "context_parallel", 1) or 1) > 1
    key = device_key(op_key(session), base.peak_flops)  # FP8: whether the GPU needs transposed copies
    recipe = fp8_recipe(pl)
    fp8_w = fp8_weights_per_gpu(session.model, pl) if recipe is not None else None
    for op_id in np.unique(ops[compute]):
        name = OPS[op_id]
        if name == OPTIMIZER_OP:
            for st in stages[ops == op_id]:
                out.add(op_kernels(name, {"n": int(n_params[st]), "dtype": tensor_dtype(pl.precision)}),
                        1.0, name)
                if fp8_w is not None:  # the per-iteration FP8 weight quantization runs with it
                    out.add(op_kernels(FP8_WEIGHT_CAST_OP, device_key(
                        {"n": int(fp8_w[st]), "dtype": "fp8", "fp8": recipe}, base.peak_flops)),
                        1.0, FP8_WEIGHT_CAST_OP)
        elif name == "pass_through":  # an empty virtual stage's items: no kernel, no time
            continue
        elif op_id in _COMPUTE_IDS:
            # a windowed layer's op: the window in its key (as core.sim.op_times.lookup_op_times)
            k = {**key, "w": int(session.model.window_size or 0)} if name in SWA_OPS else key
            ks = op_kernels(name, k)
            if cp_split and name in _CP_PRE:  # the part outside the ring: the core is its own op
                ks = _without(ks, op_kernels(_CP_PRE[name], k))
            out.add(ks, float((ops == op_id).sum()), name)
        else:  # an op the kernel form does not know: the simulator's own lookups time it
            out.kernel_form = False
    return out


def _path_comm(session: Session, store: ProfileStore, op_model: dict[str, float],
               p: dict[str, float], now_s: float, comm_tasks: np.ndarray
               ) -> tuple[float, float, float, float, float, dict[str, float]]:
    """The communication on a critical path as a linear function of the parameters.

    Communication along the path is A + B / inter_node_efficiency + P / p2p_efficiency
    + C * collective_overhead_s + N * p2p_overhead_s (C: collective calls, weighted as
    core.sim.comm weighs them; N: pipeline transfers), plus seconds / efficiency for each
    further efficiency of :data:`_EXTRA_COMM_EFF` in ``p``. One more graph build with each
    parameter moved (``store.op_model`` set for it, restored after) gives B, P, C, N and
    those seconds; A is what is left of ``now_s``.

    Parameters
    ----------
    op_model, p : dict
        The op model, and its :func:`core.model.ops.effective_op_model`.
    now_s : float
        Seconds of the path's communication tasks at ``op_model``.
    comm_tasks : int array
        Indices of the path's communication tasks in the graph.

    Returns
    -------
    (A, B, P, C, N, extra) : seconds, seconds, seconds, calls, transfers, name -> seconds
    """
    eff, p2p_eff, ov = p["inter_node_efficiency"], p["p2p_efficiency"], p["collective_overhead_s"]
    p2p_ov = p["p2p_overhead_s"]
    saved = store.op_model
    try:
        store.op_model = _with(op_model, inter_node_efficiency=eff / 2)
        half_s = float(build_graph(session, store)[0].duration_s[comm_tasks].sum())
        store.op_model = _with(op_model, p2p_efficiency=p2p_eff / 2)
        half_p2p_s = float(build_graph(session, store)[0].duration_s[comm_tasks].sum())
        store.op_model = _with(op_model, collective_overhead_s=ov + 1e-3)
        num_calls = (float(build_graph(session, store)[0].duration_s[comm_tasks].sum()) - now_s) / 1e-3
        store.op_model = _with(op_model, p2p_overhead_s=p2p_ov + 1e-3)
        num_p2p = (float(build_graph(session, store)[0].duration_s[comm_tasks].sum()) - now_s) / 1e-3
    finally:
        store.op_model = saved
    extra: dict[str, float] = {}
    try:
        for name in _EXTRA_COMM_EFF:
            if name in p:
                store.op_model = _with(op_model, **{name: p[name] / 2})
                half = float(build_graph(session, store)[0].duration_s[comm_tasks].sum())
                extra[name] = (half - now_s) * p[name]
    finally:
        store.op_model = saved
    inter = (half_s - now_s) * eff  # B
    p2p_inter = (half_p2p_s - now_s) * p2p_eff  # P
    fixed = (now_s - inter / eff - p2p_inter / p2p_eff - num_calls * ov - num_p2p * p2p_ov
             - sum(v / p[k] for k, v in extra.items()))  # A
    return fixed, inter, p2p_inter, num_calls, num_p2p, extra


#: With context parallelism the attention ops on a path are their parts outside the ring:
#: the op, and the core it excludes (core.sim.graph: ``attention_fwd:pre``).
_CP_PRE = {"attention_fwd": "attention_core_fwd", "attention_bwd": "attention_core_bwd"}


def _without(kernels: list, part: list) -> list:
    """``kernels`` less one occurrence of each kernel of ``part`` (equal kernels)."""
    out = list(kernels)
    for k in part:
        if k in out:
            out.remove(k)
    return out


def _kernel_form_agrees(row: LinearizedRow, session: Session, base: ProfileStore,
                        p: dict[str, float]) -> bool:
    """Whether the kernel form's op times equal :func:`core.sim.op_times.lookup_op_times` on a
    table-free store with ``p`` (relative 1e-9), op by op (with context parallelism the
    attention ops as their parts outside the ring)."""
    from core.sim.op_times import lookup_op_times

    times = dict(lookup_op_times(session, model_store(base, p)).times)
    if (getattr(session.plan, "context_parallel", 1) or 1) > 1:
        for op, core in _CP_PRE.items():
            if op in times and core in times:
                times[op] = times[op] - times[core]
    kt = kernel_times(*row.kernels, row.peak_flops, row.memory_bandwidth_bytes_per_s, p, row.fp8,
                      row.kclass)
    device_s = np.bincount(row.kernel_op, kt, minlength=row.op_count.size)
    op_s = combine_op_time(device_s, row.op_num_kernels, row.op_is_optimizer, p)
    names = [n for n in row.op_names]
    for name, got in zip(names, np.atleast_1d(op_s)):
        if name != OPTIMIZER_OP and name in times and not np.isclose(got, times[name], rtol=1e-9,
                                                                     atol=0.0):
            return False
    return True


def _comm_s(row: LinearizedRow, p: dict[str, float]) -> float:
    """Communication seconds of a linearized row under ``p``."""
    return (row.comm_fixed_s + row.comm_inter_s / p["inter_node_efficiency"]
            + row.p2p_inter_s / p["p2p_efficiency"] + row.num_collectives * p["collective_overhead_s"]
            + row.num_p2p * p["p2p_overhead_s"]
            + sum(v / p[k] for k, v in row.comm_eff_s.items()))


def _generic_ops(session: Session, base: ProfileStore, op_model: dict[str, float], graph, path,
                 compute: np.ndarray, stages: np.ndarray, n_params: np.ndarray) -> GenericOps:
    """:class:`GenericOps` of the compute tasks on ``path`` (times from a table-free copy of
    ``base`` with ``op_model``, as :func:`model_store` makes)."""
    from core.sim.op_times import lookup_op_times, optimizer_time

    probe = model_store(base, effective_op_model(op_model))
    times = lookup_op_times(session, probe).times
    coef: dict[str, float] = {}
    optimizer: list[tuple[float, float]] = []
    for task in path[compute]:
        name, dur = OPS[graph.op[task]], float(graph.duration_s[task])
        if name == OPTIMIZER_OP:
            n = float(n_params[graph.stage[task]])
            now = optimizer_time(probe, n, session.plan.precision)
            optimizer.append((n, dur / now if now > 0 else 0.0))
        elif times.get(name, 0.0) > 0:
            coef[name] = coef.get(name, 0.0) + dur / times[name]
        else:  # a task with no op time of its own: constant
            coef.setdefault("_const", 0.0)
    g = GenericOps(session, probe, {k: v for k, v in coef.items() if k != "_const"}, optimizer)
    return g


def _with(op_model: dict[str, float], **kw: float) -> dict[str, float]:
    return {**op_model, **kw}


def _parts(row: LinearizedRow, p: dict[str, float]) -> tuple[float, float]:
    """(time of the ops a shape factor scales, everything else) of a linearized row, seconds."""
    if row.generic is not None:
        scaled, rest = row.generic.parts(p)
        return scaled, rest + _comm_s(row, p)
    if not row.peak_fraction_fitted:  # the device's own data-sheet peaks (store_op_model)
        p = {**p, "peak_fraction": 1.0}
    kt = kernel_times(*row.kernels, row.peak_flops, row.memory_bandwidth_bytes_per_s, p, row.fp8,
                      row.kclass)
    device_s = np.bincount(row.kernel_op, kt, minlength=row.op_count.size)
    op_s = combine_op_time(device_s, row.op_num_kernels, row.op_is_optimizer, p) * row.op_count
    fam = np.array(row.op_family)
    scaled = float(op_s[fam != ""].sum())
    rest = float(op_s[fam == ""].sum()) + _comm_s(row, p)
    return scaled, rest


def predict_linearized(rows: Sequence[LinearizedRow], op_model: dict[str, float],
                       corrections: dict[tuple, float] | None = None) -> np.ndarray:
    """Iteration times (s) of linearized rows under ``op_model`` and shape corrections; shape (n,)."""
    p = effective_op_model(op_model)
    corrections = corrections or {}
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        scaled, rest = _parts(r, p)
        out[i] = scaled * corrections.get(r.key, 1.0) + rest
    return out


@dataclass
class FitResult:
    """Fitted parameters, shape corrections and in-sample figures.

    In-sample figures flatter the model: use :func:`cross_validate` for accuracy.
    """

    op_model: dict[str, float]
    corrections: dict[tuple, float]
    rounds: int
    train_metrics: dict[str, float] = field(default_factory=dict)


def _fit_globals(sessions, measured_s, base, names, current, rounds, say, sqrt_w, prior=0.0,
                 bounds=None):
    from scipy.optimize import least_squares

    lim = {n: (bounds or {}).get(n) or _bounds(n) for n in names}
    lo = np.array([lim[n][0] for n in names])
    hi = np.array([lim[n][1] for n in names])
    centre = np.array([current[n] for n in names], float)  # the prior's centre: the start
    rows = []
    for rnd in range(rounds):
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
    return current


def _fit_corrections(rows, measured_s, op_model, ridge, sqrt_w):
    """Log factor per shape measured in at least MIN_ROWS_PER_SHAPE runs (ridge-penalized)."""
    from scipy.optimize import least_squares

    p = effective_op_model(op_model)
    parts = np.array([_parts(r, p) for r in rows])  # (n, 2)
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
        _bounds(n)  # KeyError for a parameter without bounds
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
    if names:
        current = _fit_globals(sessions, measured_s, base, names, current, rounds, say, sqrt_w,
                               prior, bounds)
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
    return FitResult(current, corr, rounds, error_metrics(pred, measured_s))


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


def calibrated_store(base: ProfileStore, result: FitResult, data: Sequence[str],
                     cv: dict[str, dict[str, float]],
                     file_weights: Sequence[float] | None = None,
                     residuals: "ResidualTable | None" = None) -> ProfileStore:
    """The calibrated store for ``base``'s device, with provenance (data, file weights,
    parameters, CV error) and the out-of-sample ``residuals`` that give predictions their
    error band (:mod:`core.store.interval`)."""
    store = apply_fit(base, result.op_model, result.corrections)
    store.residuals = residuals
    weights = [1.0] * len(data) if file_weights is None else [float(w) for w in file_weights]
    store.provenance = {
        "method": "calibrated", "date": _dt.date.today().isoformat(),
        "base_profile": base.summary(), "data": "; ".join(data),
        "file_weights": {name: w for name, w in zip(data, weights)},
        "parameters": {k: float(v) for k, v in result.op_model.items()},
        "num_shape_factors": len(result.corrections),
        "cross_validation": cv,
        "cross_validation_procedure": (
            "k-fold per file; each fold fitted on the other files plus the other folds of this "
            "one, with the file weights above (core.accuracy.calibrate.cross_validate_files)"),
        "fit": "bounded least squares on log(predicted/measured), critical-path linearization, "
               "ridge-penalized per-shape factors (core.accuracy.calibrate)",
    }
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
                          cv_predicted: Sequence[np.ndarray], base: ProfileStore, *,
                          folds: int, file_weights: Sequence[float] | None = None,
                          transfer: bool = True,
                          progress: Callable[[str], None] | None = None) -> "ResidualTable":
    """The residual table of a calibration: every run's k-fold prediction plus the scale transfer.

    Parameters
    ----------
    files : sequence of (name, sessions, measured_s, rows)
        Per measurement file: its name, usable runs, measured seconds (n,) and
        1-based data rows (n,).
    cv_predicted : sequence of float arrays
        Per file, the out-of-fold predictions of :func:`cross_validate_files` (n,).
    folds : int
        Folds used (for the procedure text).
    transfer : bool
        Add the ``scale_transfer`` rows (:func:`scale_transfer`, one more fit).
    """
    from core.store.interval import residual_table_from_cv

    weights = ("equal file weights" if file_weights is None else "file weights "
               + ", ".join(f"{n} {w:g}" for (n, *_), w in zip(files, file_weights)))
    procedure = (f"cross_validated: {folds}-fold cross-validation per file, folds from "
                 f"numpy default_rng(0), each fold fitted on the other files plus the other folds "
                 f"({weights}; core.accuracy.calibrate.cross_validate_files)")
    table = None
    for (name, sessions, measured, rows), pred in zip(files, cv_predicted):
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
            table = table.concat(part)
            table.procedure = procedure + ("; scale_transfer: fitted on all single-node runs "
                                           "(weighted equally), predicting every multi-node run")
    return table


__all__ += ["scale_transfer", "calibration_residuals"]


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
        ``shares`` of another length than ``sizes``, or a share that is not positive.
    """
    shares = [1.0] * len(sizes) if shares is None else [float(x) for x in shares]
    if len(shares) != len(sizes) or not all(x > 0 for x in shares):
        raise ValueError(f"need one positive share per file, got {shares} for {len(sizes)} files")
    total, norm = float(sum(sizes)), sum(shares)
    return np.concatenate([np.full(n, total * w / (norm * n)) for n, w in zip(sizes, shares)])


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


# --------------------------------------------------------------------------- shared fit of GPU kinds
