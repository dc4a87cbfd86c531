"""Stage times: each stage's forward, backward and weight-gradient time per chunk, its
transfers, data-parallel tail and optimizer step (:class:`StageTimes`, the coarse graph's and
the sweep's fast path's inputs), with the communication they wait for (data-parallel buckets,
context-parallel ring, expert all-to-all).
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from core.model import model_math
from core.sim.comm import CommModel
from core.plan.parallel import (PLAN_FIELDS, fp8_recipe, grad_dtype, plan_key, tensor_dtype,
                                zero_shard_size)
from core.plan.model_config import ModelConfig
from core.plan.session import Session
from core.plan.layout import pipeline_layout_text
from core.model.ops import DTYPE_BYTES
from core.model.moe import expert_data_parallel, expert_tensor_parallel
from core.model.memory import optimizer_step_traffic
from core.plan.parallel import recompute_modules
from core.sim.pipeline_graph import (COMPUTE, K, StageProgram)
from core.model.cuda_graphs import captured_ops
from core.sim.op_times import (tp_overlap_applies, chunk_virtual_stages, fp8_weight_cast_time,
                               lookup_op_times, num_chunks, op_key, optimizer_time, params_per_gpu,
                               virtual_stage_layers)
from core.sim.read_memo import ReadMemo
from core.sim.stage_comm import StageComm, cached_comm_call, memoized, pinned, read_once
from core.sim.template_builder import stage_templates
from core.sim.templates import (DataParallel, SOURCE_INDEX, StageStructure, Template,
                                reduces_gradients, source_values, stage_structure,
                                stage_structures, tail_overrun,
                                template_times)

__all__ = ["StageTimes", "ep_overlap_exposed", "ep_overlap_pair", "moe_comm_bytes", "stage_busy_times",
           "stage_times"]


@dataclass
class StageTimes:
    """Per-stage durations of one plan at work-item granularity (the coarse graph's inputs).

    Each stage's compute stream is one chain and its tensor-parallel
    collectives block it, so the per-op tasks of one work item run back to
    back; with the communication that overlaps them (ZeRO-3 prefetch, ZeRO-2/3
    gradient reduce-scatter), the item ends when both have ended. That span is
    the duration of the merged task.

    Attributes
    ----------
    fwd_s, bwd_s, wgrad_s : float64 array, shape (p, v)
        Forward, backward (with recomputation; the input-gradient part B when
        the schedule splits the backward) and weight-gradient part W (0 when
        not split) of one micro-batch on each stage and virtual chunk, seconds:
        the spans of the per-op templates of :func:`build_graph`.
    send_fwd_s, send_bwd_s : float64 array, shape (p,)
        Pipeline transfer of one micro-batch from stage ``i`` to ``(i+1) mod p``
        (resp. ``(i-1) mod p``), seconds; the wrap-around hops (last to first
        and back) are 0 unless the plan has virtual chunks.
    dp_comm_s : float64 array, shape (p,)
        Data-parallel communication of each stage's tail, seconds (0 when ``d == 1``):
        the gradient all-reduce (ZeRO 0) or reduce-scatter (ZeRO 1) after the last
        work item (``dp_reduce_s``; 0 when overlapped or per micro-batch), plus the
        parameter all-gather after the optimizer step (``after_optimizer_s``; ZeRO 1/2
        without ``overlap_param_gather``).
    optimizer_s : float64 array, shape (p,)
        Optimizer step of each stage over its (sharded) parameters, seconds.
    has_dp_comm : bool
        Whether the graph has a data-parallel tail task (``d > 1``).
    ready_s : float64 array, shape (p, v)
        With ``overlap_param_gather`` (ZeRO 1/2): the first forward of each stage and
        chunk cannot start before this (its parameters are all-gathered from the
        iteration's start, one chunk after another); zeros otherwise.
    chunk_tail_s : float64 array, shape (p, v)
        With ``overlap_grad_reduce`` (ZeRO 0/1): the stage's tail also waits until
        this long after the compute of the chunk's last weight-gradient item ends
        (its gradient buckets, reduced under it); ``-inf`` otherwise.
    op_times_s : dict[str, float]
        Time of each op of one micro-batch (the per-op templates' durations).
    tp_comm_s : dict[str, float] or None
        One tensor-parallel collective of a ``(b, s, h)`` activation by kind; None when ``t == 1``.
    dp : list of DataParallel or None
        Per stage: one bucket's collective times (None when no bucket enters the templates).
    moe_comm_s : dict[str, float] or None
        MoE models: one expert all-to-all (``ep_all_to_all``) and expert tensor-parallel
        all-gather and reduce-scatter (``etp_all_gather``, ``etp_reduce_scatter``) of one
        MoE layer and micro-batch, seconds; None for dense models.
    warnings : list of str
        Lookups that extrapolated or fell back to the analytic model.
    fp8_speedup : float
        FP8 training: the GPU's FP8 GEMM peak over its BF16 peak (the weight-gradient share of
        a split backward, :func:`weight_gradient_share`); 1 otherwise.
    busy_fwd_s, busy_bwd_s, busy_wgrad_s : float64 array, shape (p, v), or None
        The compute stream's own time in each work item (its tasks' durations, blocking
        collectives included): the span when the overlapped communication beside it (ZeRO-3
        prefetch, bucketed reduce-scatters, hidden CP/TP parts) is never waited for. The
        report splits idle time with them (:func:`core.sim.simulate.schedule_times_without_transfers`).
    """

    fwd_s: np.ndarray
    bwd_s: np.ndarray
    wgrad_s: np.ndarray
    send_fwd_s: np.ndarray
    send_bwd_s: np.ndarray
    dp_comm_s: np.ndarray
    optimizer_s: np.ndarray
    has_dp_comm: bool
    ready_s: np.ndarray
    chunk_tail_s: np.ndarray
    dp_reduce_s: np.ndarray
    after_optimizer_s: np.ndarray
    op_times_s: dict[str, float] = field(default_factory=dict)
    tp_comm_s: dict[str, float] | None = None
    dp: list[DataParallel | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    moe_comm_s: dict[str, float] | None = None
    fp8_speedup: float = 1.0
    busy_fwd_s: np.ndarray | None = None
    busy_bwd_s: np.ndarray | None = None
    busy_wgrad_s: np.ndarray | None = None

    @property
    def tp_all_reduce_s(self) -> float | None:
        """One tensor-parallel all-reduce of a ``(b, s, h)`` activation; None when ``t == 1``."""
        return None if self.tp_comm_s is None else self.tp_comm_s["all_reduce"]

    def programs(self) -> list[StageProgram]:
        """One :class:`StageProgram` per stage with one task per work item (F, B and W per chunk)."""
        p, v = self.fwd_s.shape
        split = bool(np.any(self.wgrad_s > 0))
        return [StageProgram.from_chunks(
            [[(K["forward"], COMPUTE, float(self.fwd_s[i, c]), -1)] for c in range(v)],
            [[(K["backward"], COMPUTE, float(self.bwd_s[i, c]), -1)] for c in range(v)],
            [[(K["wgrad"], COMPUTE, float(self.wgrad_s[i, c]), -1)] for c in range(v)] if split else None,
            send_fwd_s=float(self.send_fwd_s[i]), send_bwd_s=float(self.send_bwd_s[i]),
            dp_comm_s=float(self.dp_comm_s[i]) if self.has_dp_comm else None,
            optimizer_s=float(self.optimizer_s[i]),
        ) for i in range(p)]


def _representatives(p: int) -> list[int]:
    """Stages whose per-op templates differ: first, one middle stage, last."""
    return sorted({0, min(1, p - 1), p - 1})


def _data_parallel(session: Session, stage: int, comm_call, edp_call=None) -> DataParallel:
    """Collective times of one stage's data-parallel buckets (one bucket per layer, one for the
    first or last stage's other parameters; Megatron's buckets hold about 40M parameters,
    ``--ddp-bucket-size``, i.e. about one layer of a large model per tensor-parallel rank).
    Gradients move in :func:`core.plan.parallel.grad_dtype`, parameters in the training precision
    (the FP8 linear weights in 1 byte with ``fp8_param_gather``,
    :func:`core.model.fp8.param_gather_bytes`).
    An MoE layer's bucket: its routed experts' parameters over the expert-data-parallel group
    (``edp_call``), the rest over ``d`` (``comm_call``)."""
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    g = DTYPE_BYTES[grad_dtype(pl)]
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]  # FP8 training gathers BF16 weights
    fam = model_math.family_of(m)
    sharded, replicated = fam.layer_parameters(m)
    layer = sharded / t + replicated
    p_edge, loss_stage = model_math.edge_stages(pl), model_math.loss_stage(pl)
    first_n, last_n = model_math.edge_params_per_gpu(m, t, p_edge)
    first = first_n if stage == 0 else 0.0
    mtp = model_math.mtp_edge_parameters(m, t, p_edge) if stage == loss_stage else 0.0
    last = last_n - mtp if stage == loss_stage else 0.0
    out = DataParallel()
    # FP8 parameter all-gather: the layer's linear weights in 1 byte (the edges stay BF16)
    fp8_lin = (model_math.fp8_linear_params_per_layer(m, t)
               if model_math.fp8_gathers_params(pl) else 0.0)
    for name, n in (("layer", layer), ("first", first), ("last", last), ("mtp", mtp)):
        if n <= 0:
            continue
        setattr(out, f"{name}_ag", comm_call("all_gather", model_math.param_gather_bytes(
            pl, n, fp8_lin if name == "layer" else 0.0)))
        setattr(out, f"{name}_rs", comm_call("reduce_scatter", n * g))
        setattr(out, f"{name}_ar", comm_call("all_reduce", n * g))
    if m.is_moe and edp_call is not None:
        moe = model_math.moe_layer_parameters(m)
        rest = moe.sharded / t + moe.replicated
        experts = moe.experts / (pl.expert_parallel * expert_tensor_parallel(pl))
        for kind, short, nb in (("all_gather", "ag", e), ("reduce_scatter", "rs", g),
                                ("all_reduce", "ar", g)):
            setattr(out, f"moe_{short}", comm_call(kind, rest * nb) + edp_call(kind, experts * nb))
    return out


_MODEL_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(ModelConfig)))
_D_FIELD = PLAN_FIELDS.index("data_parallel")


def _layout_key(session: Session, cache: dict | None = None) -> tuple:
    """Cache key of :func:`_stage_layout`: every model field, every plan field but the
    data-parallel size ``d``, and what ``d`` changes in the templates' structure (whether
    gradients are reduced across GPUs, :func:`reduces_gradients`). The model's fields are
    read once per model object and ``cache`` (which keeps the object: a cache's sessions
    must not change their model in place; so ``id(session.model)`` names the model in the
    cache's other keys once this has run)."""
    pl = session.plan
    fields = plan_key(pl)
    return (read_once(cache, "model", session.model, _MODEL_FIELD_VALUES),
            fields[:_D_FIELD] + fields[_D_FIELD + 1:], reduces_gradients(session))


def _stage_layout(session: Session, cache: dict | None) -> _Layout:
    """What :func:`stage_times` needs of the session that does not depend on ``d`` beyond
    :func:`_layout_key` (memoized in ``cache`` under that key: a sweep's plans that differ only in
    ``d`` share it), a :class:`_Layout`.

    Attributes: ``key`` (:func:`_layout_key`), ``op_key`` (:func:`op_key`) and ``op_key_items``
    (its sorted items), and those of :func:`_layout_shape` (``v``, ``alike``, ``reps``,
    ``structs``, ``params``, ``experts``), which do not depend on the micro-batch size either.
    """
    key = _layout_key(session, cache)
    hit = cache.get(("layout", key)) if cache is not None else None
    if hit is not None:
        return hit
    if cache is None:
        okey, items = _op_key_items(session.plan, session, None)
    else:  # by the plan fields op_key reads (not t, p, v, the recomputation, the schedule ...)
        memo = cache.get(("op key reads", key[0]))
        if memo is None:
            memo = cache[("op key reads", key[0])] = ReadMemo(_op_key_items)
        okey, items = memo(session.plan, session, cache)
    out = _Layout(key, okey, items, _layout_shape(session, key, cache))
    if cache is not None:
        cache[("layout", key)] = out
    return out


def _op_key_items(pl, session: Session, cache: dict | None) -> tuple[dict, tuple]:
    """:func:`op_key` of ``session`` with its plan ``pl`` (a recording plan of
    :class:`core.sim.read_memo.ReadMemo`) and its sorted items; with ``cache``, the pair of
    the first layout with those items (layouts of one op key share its dict and items: a
    sweep's, about 1 kB each)."""
    okey = op_key(Session(session.model, pl, session.cluster, session.cost))
    items = tuple(sorted(okey.items()))
    return (okey, items) if cache is None else cache.setdefault(("op key", items), (okey, items))


class _Layout:
    """:func:`_stage_layout`'s answer: ``key``, ``op_key``, ``op_key_items`` and the attributes
    of its :func:`_layout_shape` (the same objects), in slots: a sweep's lower bounds keep one
    per plan without ``d`` (115,000 up to 32 GPUs of Qwen3-30B-A3B), 120 bytes each rather
    than about 700 as a namespace with its own dict."""

    __slots__ = ("key", "op_key", "op_key_items", "v", "alike", "reps", "structs", "params",
                 "experts", "counts", "span_structs")

    def __init__(self, key: tuple, op_key: dict, op_key_items: tuple,
                 shape: SimpleNamespace) -> None:
        self.key, self.op_key, self.op_key_items = key, op_key, op_key_items
        self.v, self.alike, self.reps, self.structs = shape.v, shape.alike, shape.reps, shape.structs
        self.params, self.experts = shape.params, shape.experts
        self.counts, self.span_structs = shape.counts, shape.span_structs


def _layout_shape(session: Session, key: tuple, cache: dict | None) -> SimpleNamespace:
    """The part of :func:`_stage_layout` that reads neither ``d`` (beyond
    :func:`reduces_gradients`) nor the micro-batch size ``b``, memoized in ``cache`` by the
    model, ``reduces_gradients`` (``key``'s, the session's :func:`_layout_key`) and the plan
    fields it reads (:class:`core.sim.read_memo.ReadMemo`): a sweep's plans that differ only in
    ``d``, ``b`` and fields it does not read (the MoE dispatcher, the context-parallel exchange
    ...) share it (``tests/test_sweep_speed.py`` checks that ``b`` changes none of it).

    Attributes: ``v`` (:func:`num_chunks`), ``alike`` (:func:`_middle_stages_alike`), ``reps``
    (the stages whose templates are evaluated: :func:`_representatives` when the middle stages
    are alike, else all), ``structs`` (dict: each of those stages -> the
    :class:`StageStructure` of each chunk), ``params`` (:func:`params_per_gpu`, (p,)),
    ``experts`` (:func:`core.model.counts.expert_params_per_gpu`, (p,)); the arrays read-only;
    ``counts`` (dict, filled by :func:`_stage_busy`: (stage, chunk) -> the source counts of
    its three templates) and ``span_structs`` (dict, filled by :func:`_stage_spans`: stage ->
    each chunk's :func:`_span_structure`).
    """
    if cache is None:
        return _new_layout_shape(session.plan, session, None)
    memo = cache.get(("layout shape reads", key[0], key[2]))
    if memo is None:  # by the fields it reads (d and b: none but key[2], reduces_gradients)
        memo = cache[("layout shape reads", key[0], key[2])] = ReadMemo(
            _new_layout_shape, frozenset(("data_parallel", "micro_batch_size")))
    return memo(session.plan, session, cache)


def _new_layout_shape(pl, session: Session, cache: dict | None) -> SimpleNamespace:
    """:func:`_layout_shape` of ``session`` with its plan ``pl`` (a plan that records the fields
    read, :class:`core.sim.read_memo.ReadMemo`'s), computed."""
    session = Session(session.model, pl, session.cluster, session.cost)
    p, v = pl.pipeline_parallel, num_chunks(pl)
    alike = _middle_stages_alike(session)
    reps = _representatives(p) if alike else list(range(p))
    bounds = virtual_stage_layers(session)
    params = params_per_gpu(session)
    experts = model_math.expert_params_per_gpu(session.model, pl)
    for a in (params, experts):
        a.setflags(write=False)
    out = SimpleNamespace(v=v, alike=alike, reps=reps, params=params, experts=experts,
                          structs={}, counts={}, span_structs={})
    flat = stage_structures(session, [(i, c) for i in reps for c in range(v)], bounds)
    if cache is not None:  # equal structures are one object (frozen): a sweep's layouts share
        flat = [cache.setdefault(("structure", st), st) for st in flat]  # most of theirs
    for n, i in enumerate(reps):
        out.structs[i] = flat[n * v:(n + 1) * v]
    return out


def _span_structure(st: StageStructure) -> StageStructure:
    """``st`` with what changes no span of its templates normalized, so that virtual stages alike
    share one :func:`stage_templates` entry: its layers numbered from 0 (the MoE and windowed
    layers shifted with them) and its virtual stage reduced to whether it is the first and
    the last (the embedding and the output layer). The templates differ from ``st``'s only in
    their ``layer`` column, which no duration or span reads."""
    first, stop = st.layers
    is_first, is_last = st.vstage == 0, st.vstage == st.num_vstages - 1
    vstage, num = ((0, 1) if is_first and is_last else (0, 2) if is_first else (1, 2) if is_last
                   else (1, 3))
    if (vstage, num, first) == (st.vstage, st.num_vstages, 0):
        return st
    return dataclasses.replace(st, vstage=vstage, num_vstages=num, layers=(0, stop - first),
                               moe_layers=tuple(x - first for x in st.moe_layers),
                               window_layers=tuple(x - first for x in st.window_layers))


@lru_cache(maxsize=4096)
def _span_templates(st: StageStructure) -> tuple[Template, Template, Template]:
    """:func:`stage_templates` of :func:`_span_structure` of ``st`` (cached: a sweep's layouts
    hold about ten times fewer distinct structures than they have, and normalizing one costs
    a ``dataclasses.replace``)."""
    return stage_templates(_span_structure(st))


def _stage_spans(session: Session, store, inputs: SimpleNamespace, cache: dict | None
                 ) -> tuple[np.ndarray, ...]:
    """The work items' spans of every stage and chunk: ``fwd_s``, ``bwd_s``, ``wgrad_s``,
    ``ready_s``, ``chunk_tail_s`` of :class:`StageTimes` and the compute stream's busy time
    of each item, ``busy_fwd_s``, ``busy_bwd_s``, ``busy_wgrad_s`` (the span without waiting
    for overlapped communication), float64 (p, v) each (new arrays).

    The per-op templates of ``layout.structs`` timed with the stage's
    :func:`source_values` (:func:`_stage_values`) of ``times`` (the op times of
    ``layout.op_key`` in ``store``, with the context-parallel ring's times ``ring`` when
    ``cp > 1``), ``inputs`` being :func:`_span_inputs`' (``layout``, ``times``, ``ring``,
    ``tp``, ``dps``, ``moe_comm``, ``fp8_speedup`` ...); memoized in ``cache``
    under the layout (the object: ``cache`` holds it) and every value the durations are made
    of that ``d`` can change (the ring, tensor-parallel, data-parallel and MoE collectives), so
    plans that differ only in ``d`` where ``d`` changes none of them share the result.
    """
    layout, ring, tp, dps, moe_comm, fp8_speedup = (inputs.layout, inputs.ring, inputs.tp,
                                                    inputs.dps, inputs.moe_comm,
                                                    inputs.fp8_speedup)
    p, v = session.plan.pipeline_parallel, layout.v
    mkey = None
    if cache is not None:
        mkey = ("spans", pinned(cache, store), pinned(cache, layout),
                tuple(ring.items()) if ring else None,
                tuple(tp.items()) if tp else None, tuple(moe_comm.items()) if moe_comm else None,
                tuple(None if dps[i] is None else tuple(vars(dps[i]).values()) for i in layout.reps),
                fp8_speedup,
                # the paired share reads m, which d changes (the layout holds every other field)
                tuple(model_math.ep_overlap_paired_share(session.plan, i) for i in layout.reps)
                if model_math.ep_overlap_on(session.plan) else None)
        hit = cache.get(mkey)
        if hit is not None:
            return tuple(a.copy() for a in hit)
    fwd_s, bwd_s, w_s = np.empty((p, v)), np.empty((p, v)), np.zeros((p, v))
    fwd_b, bwd_b, w_b = np.empty((p, v)), np.empty((p, v)), np.zeros((p, v))
    ready, over = np.zeros((p, v)), np.full((p, v), -np.inf)
    for i, structs in layout.structs.items():
        shared = _stage_values(session, inputs, i, cache)
        values = ep_overlap_exposed(shared, structs, session, i, cache)
        # the chunks' figures are memoized by the values' identity: the cache's arrays only
        memo = cache if values is shared else None
        spans = layout.span_structs.get(i)
        if spans is None:
            spans = layout.span_structs[i] = [_span_structure(st) for st in structs]
        offset = 0.0  # the all-gathers of --overlap-param-gather run one chunk after another
        for c, span in enumerate(spans):
            (fwd_b[i, c], bwd_b[i, c], w_b[i, c], fwd_s[i, c], bwd_s[i, c], w_s[i, c], start,
             overrun, start_s) = _chunk_spans(span, values, offset, memo)
            if start is not None:
                ready[i, c] = start
                offset += start_s
            if overrun is not None:
                over[i, c] = overrun
    out = (fwd_s, bwd_s, w_s, ready, over, fwd_b, bwd_b, w_b)
    if p > 2 and layout.alike:
        for a in out:
            a[1:-1] = a[1]
    if mkey is not None:
        cache[mkey] = tuple(a.copy() for a in out)
    return out


def _span_counts(struct: StageStructure, cache: dict | None) -> tuple[np.ndarray, ...]:
    """The source counts (:attr:`Template.counts`) of the three :func:`_span_templates` of
    ``struct``, kept in ``cache``: small arrays, where the templates' own cache holds only the
    last few thousand structures. With ``cache``, the counts of each :func:`_span_structure`
    are kept there too, its templates built for them alone and not kept (a sweep's lower
    bounds read only the counts: the templates' cache would hold a few thousand of them,
    about 20 kB each, through the bound phase)."""
    key = ("span counts", struct)
    hit = cache.get(key) if cache is not None else None
    if hit is None:
        if cache is None:
            return tuple(t.counts for t in _span_templates(struct))
        span = _span_structure(struct)
        hit = cache.get(("span counts of", span))
        if hit is None:
            hit = cache["span counts of", span] = tuple(
                t.counts for t in stage_templates.__wrapped__(span))
        cache[key] = hit
    return hit


def _chunk_spans(span: StageStructure, values: np.ndarray, offset: float, cache: dict | None
                 ) -> tuple:
    """The figures of one chunk of :func:`_stage_spans`, whose templates are
    :func:`stage_templates` of ``span`` (a :func:`_span_structure`) timed with ``values``
    (:func:`source_values`), the chunk's parameter all-gathers starting ``offset`` seconds
    into the iteration: ``(busy_fwd_s, busy_bwd_s, busy_wgrad_s, fwd_s, bwd_s, wgrad_s,
    ready_s or None, chunk_tail_s or None, the all-gathers' seconds)`` (None: the chunk has
    no such side tasks). Memoized in ``cache`` under ``span``, the identity of ``values``
    (an array the cache holds, or no cache) and ``offset``: the chunks of one plan alike
    (the middle ones of an interleaved stage), and those of plans with the same op times
    and collectives, are timed once."""
    key = None
    if cache is not None:
        key = ("chunk spans", span, id(values), offset)
        hit = cache.get(key)
        if hit is not None:
            return hit
    fwd, bwd, wgd = stage_templates(span)
    busy, spans = [], []
    for tmpl in (fwd, bwd, wgd):
        # the compute stream's own time (blocking collectives included): the span when
        # nothing beside it is waited for
        busy.append(tmpl.counts @ values)
        if tmpl.has_side:
            spans.append(template_times(tmpl.timed(values))[2])
        else:  # one chain: the span is the sum of the durations
            spans.append(busy[-1])
    start = overrun = None
    start_s = 0.0
    if fwd.start_src.size:
        timed = fwd.timed(values)
        start = template_times(timed, start_at=offset)[2] - spans[0]
        start_s = float(timed.start_dur.sum())
    grads = wgd if span.split else bwd
    if grads.last_src.size:
        overrun = tail_overrun(grads.timed(values))
    out = (*busy, *spans, start, overrun, start_s)
    if key is not None:
        cache[key] = out
    return out


def _stage_busy(session: Session, inputs: SimpleNamespace, cache: dict | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compute stream's busy times of :func:`_stage_spans`, ``(busy_fwd_s, busy_bwd_s,
    busy_wgrad_s)``, float64 (p, v) each (new arrays): the same figures, without the
    templates' spans (no side tasks timed). Not memoized: a sweep asks for each plan's once;
    each chunk's templates' source counts are kept with the layout's shape."""
    layout = inputs.layout
    p, v = session.plan.pipeline_parallel, layout.v
    fwd_b, bwd_b, w_b = np.empty((p, v)), np.empty((p, v)), np.zeros((p, v))
    for i, structs in layout.structs.items():
        values = ep_overlap_exposed(_stage_values(session, inputs, i, cache), structs, session, i,
                                    cache)
        for c, struct in enumerate(structs):
            counts = layout.counts.get((i, c))
            if counts is None:
                counts = layout.counts[i, c] = _span_counts(struct, cache)
            fwd_b[i, c], bwd_b[i, c], w_b[i, c] = (counts[0] @ values, counts[1] @ values,
                                                   counts[2] @ values)
    if p > 2 and layout.alike:
        for a in (fwd_b, bwd_b, w_b):
            a[1:-1] = a[1]
    return fwd_b, bwd_b, w_b


def stage_times(session: Session, store, cache: dict | None = None) -> StageTimes:
    """Durations of each stage's work at work-item granularity (see :class:`StageTimes`).

    The values are those of the per-op graph of :func:`build_graph` (same
    lookups, same communication model, same templates). The steps, in the order
    they depend on each other, each memoized in ``cache`` under its own key: the op
    times (:func:`_stage_op_times`), the context-parallel exchange, tensor-parallel,
    expert and data-parallel collectives (:class:`core.sim.stage_comm.StageComm`), the
    FP8 speed-up, the stage spans (:func:`_stage_spans`), the pipeline transfers and
    the data-parallel and optimizer tail (:func:`_stage_tails`).

    Parameters
    ----------
    session : Session
        A valid session (see :func:`core.plan.rules.validate`).
    store : ProfileStore
    cache : dict, optional
        Memo of op lookups and communication times shared between calls; keys
        hold everything a value depends on (the store's identity, the op key,
        the cluster and the plan's t and d for communication), so one dict can
        serve any sessions. Plan sweeps pass one to reuse lookups across plans.

    Raises
    ------
    KeyError
        The profile lacks the dtype or collectives the plan needs.
    """
    pl = session.plan
    p = pl.pipeline_parallel
    warnings: list[str] = []  # communication lookups
    inputs = _span_inputs(session, store, cache, warnings)
    fwd_s, bwd_s, w_s, ready, over, fwd_b, bwd_b, w_b = _stage_spans(session, store, inputs,
                                                                     cache)
    layout, sc, reduces = inputs.layout, inputs.sc, inputs.reduces
    send_fwd, send_bwd = sc.sends(inputs.act_bytes / pl.tensor_parallel, p, layout.v)
    reduce_s, opt_s, after_opt = _stage_tails(session, store, layout, sc, reduces, cache)
    return StageTimes(fwd_s, bwd_s, w_s, send_fwd, send_bwd, reduce_s + after_opt, opt_s, reduces,
                      ready, over, reduce_s, after_opt, dict(inputs.times), inputs.tp, inputs.dps,
                      inputs.ops.warnings + sorted(set(warnings)), inputs.moe_comm,
                      inputs.fp8_speedup, fwd_b, bwd_b, w_b)


def stage_busy_times(session: Session, store, cache: dict | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compute stream's busy times of :func:`stage_times` alone, ``(busy_fwd_s,
    busy_bwd_s, busy_wgrad_s)``, float64 (p, v) each, seconds: the same figures, without the
    templates' spans, the pipeline transfers and the tails (what a sweep's lower bound reads,
    :func:`core.studies.sweep.bound.fill_lower_bounds`). Parameters and errors as
    :func:`stage_times`."""
    warnings: list[str] = []
    return _stage_busy(session, _span_inputs(session, store, cache, warnings), cache)


def _span_inputs(session: Session, store, cache: dict | None, warnings: list[str]
                 ) -> SimpleNamespace:
    """What :func:`_stage_spans` and the tails of :func:`stage_times` are computed from, as
    attributes: ``layout``, ``ops`` (the op times) and ``times`` (their dict with the ring's),
    ``sc`` (:class:`StageComm`), ``ring``, ``tp``, ``moe_comm`` (the collectives),
    ``fp8_speedup``, ``dps`` (each stage's data-parallel buckets, :func:`_stage_buckets`),
    ``reduces`` (whether gradients are reduced), ``act_bytes`` (one micro-batch's activation)
    and ``values_key`` (what :func:`_stage_values` keys the stages' source values by, None
    without a ``cache``). Communication lookups append to ``warnings``."""
    m, pl = session.model, session.plan
    t, p, cp = pl.tensor_parallel, pl.pipeline_parallel, pl.context_parallel
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]  # activations between layers: BF16 with FP8
    layout = _stage_layout(session, cache)
    ops = _stage_op_times(session, store, layout, cache)
    times = ops.times
    moe = m.is_moe
    # the expert groups' placement also reads ep and etp
    sc = StageComm(session, store, cache, warnings,
                    (pl.expert_parallel, expert_tensor_parallel(pl)) if moe else ())
    ring = None
    if cp > 1:
        ring = sc.cp_exchange(times)
        if model_math.mtp_layers(m):  # roll_tensor's boundary exchanges (StageComm.cp_mtp_roll)
            ring["cp_mtp_roll"] = sc.cp_mtp_roll()
        times = {**times, **ring}
    reduces = reduces_gradients(session)
    act_bytes = pl.micro_batch_size * (m.seq_length // cp) * m.hidden_size * e
    tp = sc.tp_collectives(act_bytes, bool(layout.op_key["sp"])) if t > 1 else None
    moe_comm = _moe_comm(session, sc.comm, cache, sc.ekey, warnings) if moe else None
    recipe = fp8_recipe(pl)
    fp8_speedup = 1.0
    if recipe is not None:  # the FP8 GEMMs' peak over BF16's (KeyError without them, named)
        fp8_speedup = (float(store.peak_flops[model_math.fp8_gemm_dtype(recipe)])
                       / float(store.peak_flops[tensor_dtype(pl.precision)]))
    dps: list[DataParallel | None] = [None] * p
    for i, structs in layout.structs.items():
        dps[i] = _stage_buckets(session, i, sc, cache) if structs[0].buckets else None
    if p > 2 and layout.alike:
        dps[1:-1] = [dps[1]] * (p - 2)
    # every input of source_values but the stage's buckets (id: objects the cache holds)
    values_key = None if cache is None else (
        "values", pinned(cache, m), pinned(cache, ops), tuple(ring.items()) if ring else None,
        tuple(tp.items()) if tp else None, tuple(moe_comm.items()) if moe_comm else None,
        fp8_speedup, tp_overlap_applies(pl), t)
    return SimpleNamespace(layout=layout, ops=ops, sc=sc, times=times, ring=ring, tp=tp,
                           moe_comm=moe_comm, fp8_speedup=fp8_speedup, dps=dps, reduces=reduces,
                           act_bytes=act_bytes, values_key=values_key)


def _stage_values(session: Session, inputs: SimpleNamespace, stage: int, cache: dict | None
                  ) -> np.ndarray:
    """:func:`source_values` of stage ``stage`` from :func:`_span_inputs`' ``inputs``,
    memoized in ``cache`` under ``inputs.values_key`` and the stage's buckets (read-only: many
    plans' stages share one array; a sweep's plans that differ in p, v, the recomputation or
    the schedule but not in their op times and collectives share them)."""
    dp = inputs.dps[stage]
    if cache is None or inputs.values_key is None:
        return source_values(inputs.times, inputs.tp, dp, session, inputs.moe_comm,
                             inputs.fp8_speedup)
    key = (*inputs.values_key, None if dp is None else tuple(vars(dp).values()))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = source_values(inputs.times, inputs.tp, dp, session, inputs.moe_comm,
                                         inputs.fp8_speedup)
        hit.setflags(write=False)
    return hit


def _stage_buckets(session: Session, stage: int, sc: StageComm, cache: dict | None
                   ) -> DataParallel:
    """:func:`_data_parallel` of ``stage`` (read-only: shared), memoized in ``cache`` under what
    it reads: the model, the placement of the plan's groups (``sc.ekey``: t, d*cp, cp, the
    shard group, ep and etp for an MoE model), whether the stage is the first and whether it
    holds the loss, the edge stages' ``p``, the gradients' and the parameters' dtypes and
    whether the FP8 weights are gathered in FP8; the warnings of its lookups are replayed."""
    pl = session.plan
    if cache is None:
        return _data_parallel(session, stage, sc.dp_call, sc.edp_call)
    key = ("buckets", pinned(cache, session.model), sc.ekey, stage == 0,
           stage == model_math.loss_stage(pl), model_math.edge_stages(pl), grad_dtype(pl),
           tensor_dtype(pl.precision), model_math.fp8_gathers_params(pl))
    hit = cache.get(key)
    if hit is None:
        n = len(sc.warnings)
        hit = cache[key] = (_data_parallel(session, stage, sc.dp_call, sc.edp_call),
                            tuple(sc.warnings[n:]))
    else:
        sc.warnings.extend(hit[1])
    return hit[0]


def _stage_op_times(session: Session, store, layout: SimpleNamespace, cache: dict | None):
    """:func:`lookup_op_times` of ``session``, memoized in ``cache`` under the layout's op key
    and what else the derived ops looked up follow: the recomputed modules, the TP overlap,
    per-op selective checkpointing, multi-token prediction (its ops only with MTP layers) and the
    ops CUDA graphs capture."""
    m, pl = session.model, session.plan
    okey = ("ops", pinned(cache, store), layout.op_key_items, recompute_modules(pl),
            tp_overlap_applies(pl),
            pl.recompute == "selective_op", model_math.mtp_layers(m) > 0, captured_ops(pl))
    if cache is None:
        return lookup_op_times(session, store)
    if okey not in cache:
        cache[okey] = lookup_op_times(session, store, cache)
    return cache[okey]


def _stage_tails(session: Session, store, layout: SimpleNamespace, sc: StageComm, reduces: bool,
                 cache: dict | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each stage's data-parallel tail and optimizer step, seconds, shape (p,) each:
    ``(reduce_s, optimizer_s, after_optimizer_s)``: the gradient reduction after the last
    backward (ZeRO 0/1 without ``overlap_grad_reduce``: an all-reduce, resp. reduce-scatter),
    the optimizer step over the stage's (sharded) parameters (with the FP8 weights'
    re-quantization), and the all-gather of the updated shards after it (ZeRO 1/2 without
    ``overlap_param_gather``). Computed for :func:`_representatives` stages (the layout's
    ``reps``); the middle stages copy stage 1 when alike."""
    m, pl = session.model, session.plan
    p, moe, recipe = pl.pipeline_parallel, m.is_moe, fp8_recipe(pl)
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]
    experts = layout.experts  # model_math.expert_params_per_gpu: reduced over edp, not d
    n_params = layout.params - experts  # params_per_gpu(session) but the routed experts
    # as optimizer_params: 1/(d*cp) of the rest, 1/edp of the experts from ZeRO 1 on
    shards = (n_params / zero_shard_size(pl) + (experts / expert_data_parallel(pl) if moe else 0.0)
              if pl.zero_stage >= 1 else n_params + experts)
    # the all-gathered parameters' bytes (FP8 linear weights in 1 byte with fp8_param_gather)
    gather_bytes = (model_math.param_gather_bytes(pl, n_params, model_math.fp8_weights_per_gpu(m, pl))
                    if model_math.fp8_gathers_params(pl) else n_params * e)
    z = pl.zero_stage
    g = DTYPE_BYTES[grad_dtype(pl)]
    reduce_s, opt_s, after_opt = np.zeros(p), np.empty(p), np.zeros(p)
    fp8_w = model_math.fp8_weights_per_gpu(m, pl) if recipe is not None else None
    warnings = sc.warnings

    def both(kind: str, i: int, nbytes: float) -> float:
        """``kind`` over d*cp of the stage's parameters but the routed experts', and over edp of
        the experts' (two collectives one after the other)."""
        dense = gather_bytes[i] if kind == "all_gather" else n_params[i] * nbytes
        x = sc.dp_call(kind, dense) if pl.dp_cp_size > 1 else 0.0
        return x + (sc.edp_call(kind, experts[i] * nbytes) if experts[i] else 0.0)

    for i in layout.reps:
        if reduces:
            if not pl.overlap_grad_reduce and z <= 1:  # one reduction after the last backward
                reduce_s[i] = both("reduce_scatter" if z == 1 else "all_reduce", i, g)
            if z in (1, 2) and not pl.overlap_param_gather:  # updated shards gathered after the step
                after_opt[i] = both("all_gather", i, e)
        opt_s[i] = memoized(cache, ("opt", pinned(cache, store), pl.precision,
                                    optimizer_step_traffic(pl), shards[i]), warnings,
                         lambda sink, n=shards[i]: optimizer_time(store, n, pl))
        if recipe is not None:  # TE re-quantizes the updated weights once per iteration
            opt_s[i] += memoized(cache, ("fp8_weights", pinned(cache, store), recipe, fp8_w[i]),
                                 warnings,
                                 lambda sink, n=fp8_w[i]: fp8_weight_cast_time(store, n, recipe))
    if p > 2 and layout.alike:
        for a in (reduce_s, opt_s, after_opt):
            a[1:-1] = a[1]
    return reduce_s, opt_s, after_opt


def _middle_stages_alike(session: Session) -> bool:
    """Whether the middle pipeline stages (1 to p-2) have the same work: always for models
    whose layers are all alike; for MoE models, models with sliding-window layers and under a
    custom pipeline layout (``plan.pipeline_model_parallel_layout``: its stages' layer counts
    may differ), when each stage holds as many layers in each chunk, its MoE and windowed
    layers at the same places (a pattern of ``moe_layer_frequency``, ``moe_first_dense_layers``
    or ``window_attn_skip_freq`` can differ between stages)."""
    m, pl = session.model, session.plan
    p = pl.pipeline_parallel
    if p > 3 and model_math.ep_overlap_on(pl):  # each stage's paired share differs (warm-up)
        return False
    windowed = model_math.window_layer_mask(m)
    if p <= 3 or (not m.is_moe and windowed.all() == windowed.any()
                  and pipeline_layout_text(pl) is None):  # a custom layout: compare the counts
        return True
    bounds = virtual_stage_layers(session)
    # each layer's kind: 2 * windowed + MoE
    mask = 2 * windowed.astype(np.int64) + (model_math.moe_layer_mask(m) if m.is_moe else 0)
    place = chunk_virtual_stages(pl).tolist()

    def pattern(i: int) -> tuple:
        return tuple(tuple(mask[bounds[k]:bounds[k + 1]].tolist()) for k in place[i])

    first = pattern(1)
    return all(pattern(i) == first for i in range(2, p - 1))


def ep_overlap_pair(f: tuple[float, float, float, float], b: tuple[float, float, float, float],
                    wgrad: float = 0.0) -> tuple[float, float, float]:
    """One MoE layer's forward and another's backward run together under Megatron-Core's
    combined 1F1B (``--overlap-moe-expert-parallel-comm``): their span and the exposed seconds
    of the forward's and of the backward's all-to-alls, ``(span, exposed_fwd, exposed_bwd)``.

    ``f = (a, d, m, c)``: the forward's computation before its dispatch (attention, router,
    permutation), its dispatch all-to-all, its experts (with what runs between the two
    all-to-alls), its combine all-to-all. ``b = (c, m, d, a)``: the backward's combine
    all-to-all, its experts' backward, its dispatch all-to-all, its computation after the
    dispatch (permutation, router and attention backward). Seconds each.

    Megatron-Core 0.19 ``TransformerLayerSchedulePlan.run`` issues, on two streams::

        comm: combine_bwd  | dispatch_fwd -> dispatch_bwd | combine_fwd
        comp: pre_fwd      | mlp_bwd      -> mlp_fwd      | pre_bwd

    each node waiting for its own pass's previous node, so the pair takes four steps of the
    longer of a computation and an all-to-all:
    ``max(a_f, c_b) + max(m_b, d_f) + max(m_f, d_b) + max(a_b, c_f)``. The forward's
    all-to-alls are exposed by ``max(d_f - m_b, 0) + max(c_f - a_b, 0)``, the backward's by
    ``max(c_b - a_f, 0) + max(d_b - m_f, 0)``; the span is both computations plus both
    exposures. The streams' contention for SMs and memory bandwidth is not modelled.

    ``wgrad``: with ``--delay-wgrad-compute`` the part of ``m_b`` that is the experts' weight
    gradient, which runs after ``mlp_bwd`` (``mlp.backward_dw``) while the dispatch all-to-all
    that needs only the input gradient runs beside it: with ``x = max(a_f, c_b)``,
    ``e1 = x + m_b - wgrad``, ``e2 = x + d_f``, the forward's dispatch exposes
    ``max(e2 - e1 - wgrad, 0)``, the backward's ``max(max(e1, e2) + d_b - max(e1 + wgrad, e2)
    - m_f, 0)`` (0 and the formula above when ``wgrad`` is 0).
    """
    af, df, mf, cf = f
    cb, mb, db, ab = b
    x = max(af, cb)
    e1, e2 = x + mb - wgrad, x + df
    ef = max(e2 - e1 - wgrad, 0.0) + max(cf - ab, 0.0)
    eb = max(cb - af, 0.0) + max(max(e1, e2) + db - max(e1 + wgrad, e2) - mf, 0.0)
    return af + mf + mb + ab + ef + eb, ef, eb


def _segments(dur: np.ndarray, i: int, j: int) -> tuple[float, float, float, float, float]:
    """The seconds of one layer's compute-stream tasks (``dur``, in program order) before its
    first task of a source (at ``i``), of that task, between it and its second (at ``j``), of
    the second, and after."""
    return (float(dur[:i].sum()), float(dur[i]), float(dur[i + 1:j].sum()), float(dur[j]),
            float(dur[j + 1:].sum()))


def _layer_segment_kinds(tmpl: Template, layers: tuple[int, ...], src: int
                         ) -> tuple[list[tuple[np.ndarray, int, int]], list[int]]:
    """The layers of ``layers`` with two compute-stream tasks of source ``src`` in the
    (untimed) template, told apart by their tasks' sources: ``kinds``, the sources of a layer
    of each kind (its own tasks, in program order) and the places ``i < j`` of its two tasks of
    ``src`` (:func:`_segments`' arguments), and ``groups``, each such layer's kind, in layer
    order. Layers of one kind have the same durations in the same order, so their segments are
    the same figures. Kept on the template (as its :attr:`Template.counts`) under ``layers``
    and ``src``: the places only, no duration."""
    memo = tmpl.__dict__.setdefault("_segment_kinds", {})
    key = (layers, src)
    hit = memo.get(key)
    if hit is not None:
        return hit
    kinds: list[tuple[np.ndarray, int, int]] = []
    index: dict[tuple, int] = {}
    groups: list[int] = []
    for x in layers:
        idx = np.flatnonzero(tmpl.layer == x)
        srcs = tmpl.src[idx]
        hit_ = np.flatnonzero(srcs == src)
        if hit_.size != 2:
            continue
        sig = tuple(srcs.tolist())
        g = index.get(sig)
        if g is None:
            g = index[sig] = len(kinds)
            kinds.append((srcs, int(hit_[0]), int(hit_[1])))
        groups.append(g)
    memo[key] = hit = (kinds, groups)
    return hit


def _delayed_wgrad_s(session: Session, values: np.ndarray) -> float:
    """The routed experts' weight gradient of one MoE layer's backward (the ``experts_bwd:W``
    source, :func:`weight_gradient_share`) under ``delay_wgrad_compute``; 0 without it."""
    if getattr(session.plan, "delay_wgrad_compute", False) is not True:
        return 0.0
    return float(values[SOURCE_INDEX["experts_bwd:W"]])


def _ep_segment_kinds(st: StageStructure, src_f: int, src_b: int, cache: dict | None) -> tuple:
    """:func:`_layer_segment_kinds` of the forward and the backward template of the chunk
    ``st`` (its :func:`_span_templates`, the MoE layers of its :func:`_span_structure`, the
    forward's and the backward's all-to-all sources ``src_f``, ``src_b``), kept in ``cache``
    (small lists, where the templates' own cache holds only the last few thousand
    structures): ``(kinds_f, groups_f, kinds_b, groups_b)``."""
    key = ("ep segment kinds", st, src_f, src_b)
    hit = cache.get(key) if cache is not None else None
    if hit is None:
        fwd, bwd, _ = _span_templates(st)
        layers = _span_structure(st).moe_layers
        hit = (*_layer_segment_kinds(fwd, layers, src_f), *_layer_segment_kinds(bwd, layers, src_b))
        if cache is not None:
            cache[key] = hit
    return hit


def _chunk_ep_exposed(st: StageStructure, values: np.ndarray, wgrad_s: float, src_f: int,
                      src_b: int, cache: dict | None = None
                      ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The exposed seconds of the forward's and of the backward's all-to-alls of each MoE layer
    of the chunk ``st`` (:func:`ep_overlap_exposed`'s terms, in layer order): its forward's
    and its backward's segments (the seconds before the pass's first all-to-all, of it,
    between, of the second, after; the layer's own tasks only, from the templates timed with
    ``values``) paired by :func:`ep_overlap_pair`; the templates' places kept in ``cache``
    (:func:`_ep_segment_kinds`)."""
    kinds_f, groups_f, kinds_b, groups_b = _ep_segment_kinds(st, src_f, src_b, cache)
    # the layers of a kind alike (their tasks' sources): each kind's segments and each pair of
    # kinds' exposures computed once (the same operations on the same figures)
    seg_f = [_segments(values[srcs], i, j) for srcs, i, j in kinds_f]
    seg_b = [_segments(values[srcs], i, j) for srcs, i, j in kinds_b]
    pairs: dict[tuple[int, int], tuple[float, float]] = {}
    ef, eb = [], []
    for gf, gb in zip(groups_f, groups_b):
        xy = pairs.get((gf, gb))
        if xy is None:
            a, d, mid, c, post = seg_f[gf]
            pre, cb, midb, db, postb = seg_b[gb]
            _, x, y = ep_overlap_pair((a + post, d, mid, c), (cb, pre + midb, db, postb),
                                      wgrad_s)
            xy = pairs[gf, gb] = (x, y)
        ef.append(xy[0])
        eb.append(xy[1])
    return tuple(ef), tuple(eb)


def ep_overlap_exposed(values: np.ndarray, structs: list[StageStructure], session: Session,
                       stage: int, cache: dict | None = None) -> np.ndarray:
    """``values`` (:func:`source_values` of stage ``stage``, whose chunks' structures are
    ``structs``) with the overlapped expert all-to-alls
    (``ep_all_to_all@fwd``, ``@bwd``) set to their mean exposed seconds under
    ``overlap_moe_expert_parallel_comm`` (unchanged without it).

    Every MoE layer of the stage's chunks ``structs``: its forward is paired with its own
    backward (layers alike: Megatron pairs the forward's layer ``i`` with the backward's layer
    ``n-1-i`` of another micro-batch) by :func:`ep_overlap_pair`, read from the timed
    templates (tensor-parallel and expert tensor-parallel collectives count with the
    computation they sit in; shared experts and the un-permutation with the computation beside
    them). Each of a pass's two all-to-alls is timed at half the pass's mean exposure.

    Only the stage's paired forwards and backwards hide anything
    (:func:`core.model.memory.ep_overlap_paired_share`); the others expose their all-to-alls
    whole, so each all-to-all is timed at ``paired * exposed + (1 - paired) * whole`` (the mean
    over the stage's items: the items' durations, not their places in the schedule, are what the
    pipeline graph takes). With ``delay_wgrad_compute`` the experts' weight gradient of a
    layer's backward is deferred (:func:`ep_overlap_pair`'s ``wgrad``). ``cache``: a sweep's
    memo (:func:`stage_times`'), which keeps the templates' places read here.
    """
    if not structs or not structs[0].ep_overlap:
        return values
    paired = model_math.ep_overlap_paired_share(session.plan, stage)
    wgrad_s = _delayed_wgrad_s(session, values)
    src_f, src_b = SOURCE_INDEX["ep_all_to_all@fwd"], SOURCE_INDEX["ep_all_to_all@bwd"]
    ef: list[float] = []
    eb: list[float] = []
    for st in structs:
        if st.moe_layers:
            x, y = _chunk_ep_exposed(st, values, wgrad_s, src_f, src_b, cache)
            ef.extend(x)
            eb.extend(y)
    if not ef:
        return values
    out = values.copy()
    for src, exposed in ((src_f, ef), (src_b, eb)):
        out[src] = paired * float(np.mean(exposed)) / 2 + (1.0 - paired) * values[src]
    return out


def stage_tasks(session: Session, stage: int, times: dict[str, float], tp: dict[str, float] | None,
                 dp: DataParallel | None = None, moe: dict[str, float] | None = None,
                 fp8_speedup: float = 1.0
                 ) -> tuple[list[Template], list[Template], list[Template]]:
    """Timed forward, backward and weight-gradient templates of every chunk of ``stage``.

    ``tp``: one tensor-parallel collective of a ``(b, s, h)`` activation by kind
    (``all_reduce``, ``reduce_scatter``, ``all_gather``), None when ``t == 1``.
    ``dp``: the stage's data-parallel collectives, None when ``d == 1``. ``moe``: the MoE
    layers' communication (:attr:`StageTimes.moe_comm_s`).
    """
    values = source_values(times, tp, dp, session, moe, fp8_speedup)
    structs = [stage_structure(session, stage, c) for c in range(num_chunks(session.plan))]
    values = ep_overlap_exposed(values, structs, session, stage)
    out: tuple[list, list, list] = ([], [], [])
    for st in structs:
        for part, tmpl in zip(out, stage_templates(st)):
            part.append(tmpl.timed(values))
    return out


def moe_comm_bytes(session: Session) -> dict[str, float]:
    """Bytes per GPU of one MoE layer's communication per micro-batch, by source.

    ``ep_all_to_all``: the send buffer of one dispatch (or combine) all-to-all, the rank's
    ``T_in`` tokens (``b s/(cp t)`` with sequence parallelism, ``b s/cp`` without) times ``k`` copies
    times ``h`` elements, times ``moe_imbalance_factor`` (the busiest rank); ``(ep-1)/ep``
    of it leaves the rank (:meth:`core.sim.comm.CommModel.all_to_all`). ``etp_all_gather``,
    ``etp_reduce_scatter``: the whole buffer of the expert tensor-parallel group, ``etp``
    times the received tokens' (nccl-tests convention).
    """
    m, pl = session.model, session.plan
    t = pl.tensor_parallel
    e = DTYPE_BYTES[tensor_dtype(pl.precision)]  # tokens are dispatched in BF16 under FP8 too
    sp = bool(pl.sequence_parallel and t > 1)
    T_in = pl.micro_batch_size * (m.seq_length // pl.context_parallel) / (t if sp else 1)
    a2a = T_in * m.moe_top_k * m.hidden_size * e * float(pl.moe_imbalance_factor)
    etp = expert_tensor_parallel(pl)
    return {"ep_all_to_all": a2a, "etp_all_gather": etp * a2a, "etp_reduce_scatter": etp * a2a}


def _moe_comm(session: Session, comm: CommModel, cache: dict | None, ekey: tuple,
              warnings: list[str]) -> dict[str, float]:
    """Seconds of one MoE layer's expert all-to-all and expert tensor-parallel collectives per
    micro-batch (:func:`moe_comm_bytes`); 0 for a group of one."""
    nbytes = moe_comm_bytes(session)
    m = session.model
    # DeepEP / HybridEP (flex): one copy per other node holding one of the token's experts
    remote = comm.ep_remote_copies(m.num_experts, m.moe_top_k, m.moe_router_num_groups,
                                   m.moe_router_group_topk)
    dispatcher = getattr(session.plan, "moe_token_dispatcher_type", "alltoall")
    out = {"ep_all_to_all": memoized(cache, ("ep_a2a", ekey, dispatcher, nbytes["ep_all_to_all"],
                                          remote),
                                  warnings,
                                  cached_comm_call(comm, "ep_all_to_all", nbytes["ep_all_to_all"],
                                             remote, m.moe_top_k))}
    for kind in ("all_gather", "reduce_scatter"):
        name = "etp_" + kind
        out[name] = memoized(cache, ("etp", ekey, kind, nbytes[name]), warnings,
                          cached_comm_call(comm, "etp_collective", kind, nbytes[name]))
    return out
