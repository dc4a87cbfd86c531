"""The iteration time of a measured plan along its critical path, as an explicit function of
the op model's parameters: what :func:`core.accuracy.calibrate.fit` fits through.

Simulate the plan, take its critical path, and write the path's time as the sum of its
compute kernels' roofline times (:func:`core.model.ops.kernel_times`, vectorized over the
kernels) plus its communication, ``A + B / inter_node_efficiency + P / p2p_efficiency +
C * collective_overhead_s + N * p2p_overhead_s`` (A, B, P, C, N read off graphs built at
moved parameter points: exact, those terms are linear). :func:`linearize` makes such a row
(:class:`LinearizedRow`), :func:`predict_linearized` evaluates rows under other parameters
and shape corrections. Where the kernel form does not reproduce the simulator's op times,
a row's compute goes through the simulator's own op lookups (:class:`GenericOps`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from core.plan.session import Session
from core.plan.parallel import fp8_recipe, tensor_dtype
from core.store.gpu_spec import fits_peak_fraction
from core.sim.graph import build_graph
from core.sim.op_times import op_key, optimizer_params
from core.sim.graph_types import KIND_COMPUTE, OPS
from core.model.fp8 import FP8_WEIGHT_CAST_OP
from core.model.keys import MOE_OPS, SWA_OPS
from core.model.memory import fp8_weights_per_gpu
from core.model.ops import (ALL_OPS, DERIVED_OPS, OPTIMIZER_OP, combine_op_time, device_key,
                            effective_op_model, kernel_arrays, kernel_class, kernel_fp8,
                            kernel_peak_flops, kernel_times, op_kernels)
from core.store.profile_store import ProfileStore
from core.sim.simulate import simulate
from core.sim.solver import critical_path
from core.accuracy.fit_params import SHAPE_FACTOR_FAMILY, model_store, shape_key, store_op_model

__all__ = ["LinearizedRow", "GenericOps", "linearize", "row_parts", "predict_linearized",
           "COMPUTE_IDS", "CP_PRE"]

#: Op ids of compute tasks (the rest, >= 0, are communication); MoE layers' ops included.
COMPUTE_IDS = np.array([i for i, name in enumerate(OPS)
                         if name in ALL_OPS or name in DERIVED_OPS or name in MOE_OPS])


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
        scaled = sum(c * times[op] for op, c in self.coef.items() if SHAPE_FACTOR_FAMILY.get(op))
        rest = sum(c * times[op] for op, c in self.coef.items() if not SHAPE_FACTOR_FAMILY.get(op))
        rest += sum(r * optimizer_time(self.probe, n, self.session.plan)
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
    compute = np.isin(ops, COMPUTE_IDS) | ((ops >= 0) & np.isin(kinds, list(KIND_COMPUTE)))
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
        self.family.append(SHAPE_FACTOR_FAMILY.get(name, ""))


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
        elif op_id in COMPUTE_IDS:
            # a windowed layer's op: the window in its key (as core.sim.op_times.lookup_op_times)
            k = {**key, "w": int(session.model.window_size or 0)} if name in SWA_OPS else key
            ks = op_kernels(name, k)
            if cp_split and name in CP_PRE:  # the part outside the ring: the core is its own op
                ks = _without(ks, op_kernels(CP_PRE[name], k))
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
CP_PRE = {"attention_fwd": "attention_core_fwd", "attention_bwd": "attention_core_bwd"}


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
        for op, core in CP_PRE.items():
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
            now = optimizer_time(probe, n, session.plan)
            optimizer.append((n, dur / now if now > 0 else 0.0))
        elif times.get(name, 0.0) > 0:
            coef[name] = coef.get(name, 0.0) + dur / times[name]
        else:  # a task with no op time of its own: constant
            coef.setdefault("_const", 0.0)
    g = GenericOps(session, probe, {k: v for k, v in coef.items() if k != "_const"}, optimizer)
    return g


def _with(op_model: dict[str, float], **kw: float) -> dict[str, float]:
    return {**op_model, **kw}


def row_parts(row: LinearizedRow, p: dict[str, float]) -> tuple[float, float]:
    """``(time of the ops a shape factor scales, everything else)`` of a linearized row under
    the effective op model ``p`` (:func:`core.model.ops.effective_op_model`), seconds."""
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
        scaled, rest = row_parts(r, p)
        out[i] = scaled * corrections.get(r.key, 1.0) + rest
    return out

