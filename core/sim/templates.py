"""Task templates of one stage: the tasks of one micro-batch's forward, backward and weight
gradient on one model chunk, built once per stage structure and timed from op times.

What belongs here: the template vocabulary (``_SOURCES``: what each task's duration is),
:class:`StageStructure` (what a chunk's templates depend on) and the helpers that time a
template. The tasks and their order within a template are built in
:mod:`core.sim.template_builder`.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from core.model import model_math
from core import schedules
from core.plan.session import Session
from core.model.keys import MOE_DERIVED_OPS, MOE_OPS, TP_OVERLAP_GEMMS
from core.model.moe import expert_tensor_parallel, gradients_reduced
from core.model.recompute import mtp_layers_recomputed
from core.plan.parallel import recompute_modules
from core.sim.pipeline_graph import OP
from core.sim.op_times import (LOOKUP_OPS, SAC_GATHERS, SAC_GATHER_SOURCES, TP_OVERLAP_BLOCKS,
                               TP_OVERLAP_SOURCES, W_OPS, tp_overlap_applies, chunk_virtual_stages,
                               num_chunks, tp_overlap_split, virtual_stage_layers,
                               weight_gradient_share)

# no public names: the graph modules above import what they use
__all__: list[str] = []


#: What a template task's duration is (:func:`source_values` gives the seconds): an op of
#: :func:`lookup_op_times`, a tensor-parallel collective of one activation, or a data-parallel
#: collective of one bucket (a layer's, an MoE layer's, or the first or last stage's other
#: parameters), or the input- (B) and weight-gradient (W) parts of a backward op that a split
#: backward divides, or an MoE layer's expert all-to-all and expert tensor-parallel collectives.
#: Context parallelism adds the attention ops' parts outside the ring core (``:pre``) and the
#: ring's K/V exchange per attention op, split into its part hidden under the core's steps
#: and its exposed part (:func:`core.sim.stage_comm._cp_ring_times`), and an MTP layer's
#: ``roll_tensor`` boundary exchanges (``cp_mtp_roll``,
#: :meth:`core.sim.stage_comm.StageComm.cp_mtp_roll`).
_SOURCES = (*LOOKUP_OPS, "tp_all_reduce", "tp_reduce_scatter", "tp_all_gather",
            "tp_mla_all_reduce", "tp_mla_reduce_scatter", "tp_mla_all_gather",
            "tp_mtp_fwd", "tp_mtp_bwd",
            *(f"{b}_{k}" for b in ("layer", "first", "last", "moe", "mtp")
              for k in ("ag", "rs", "ar")),
            *(f"{op}:{part}" for op in W_OPS for part in ("B", "W")),
            "attention_fwd:pre", "attention_bwd:pre", "attention_bwd:B:pre",
            *(f"cp_{ph}_{part}" for ph in ("fwd", "bwd") for part in ("hidden", "exposed")),
            "cp_mtp_roll",
            *MOE_OPS, "ep_all_to_all", "ep_all_to_all@fwd", "ep_all_to_all@bwd",
            "etp_all_gather", "etp_reduce_scatter", *MOE_DERIVED_OPS,
            *TP_OVERLAP_SOURCES, *SAC_GATHER_SOURCES, "pass_through")
SOURCE_INDEX = {name: i for i, name in enumerate(_SOURCES)}


class TemplateUnit:
    """Tasks of one piece of a template (a layer's forward, the embedding ...), built once and
    repeated for every layer it applies to. Indices are local to the unit; see :class:`Template`."""

    def __init__(self) -> None:
        self.tasks: list[tuple[int, int, int, int]] = []   # kind, stream, source, op
        self.side: list[tuple[int, int, int, int, int]] = []  # kind, source, op, after, before
        self.last: list[tuple[int, int, int, int]] = []       # kind, source, op, after
        self.start: list[tuple[int, int, int, int]] = []      # kind, source, op, before

    def add(self, kind: int, stream: int, source: str, op: str) -> int:
        self.tasks.append((kind, stream, SOURCE_INDEX[source], OP[op]))
        return len(self.tasks) - 1


@dataclass
class Template:
    """The tasks of one micro-batch's forward or backward on one stage, as arrays.

    ``src`` (and ``side_src`` ...) name each task's duration in :data:`_SOURCES`;
    :meth:`timed` fills ``dur`` (and ``side_dur`` ...) from a plan's values. The
    untimed templates depend only on a :class:`StageStructure` and are shared.

    ``kind, stream, dur, layer, op`` (shape (n,)): tasks in program order on the
    compute stream (blocking collectives included). Side tasks overlap them on the
    communication stream, ``side_*`` (shape (k,)): each starts after template task
    ``side_after`` (-1: when the op starts) and after the previous side task of the
    same collective (one chain per kind, ``side_op``); template task
    ``side_before`` waits for it (-1: the op ends when it ends). ``last_*``: side
    tasks that run only in the stage's final backward and that only the iteration's
    tail waits for (the data-parallel gradient buckets of ``--overlap-grad-reduce``).
    ``start_*``: side tasks that start with the iteration, before template task
    ``start_before`` of the stage's first forward (``--overlap-param-gather``).
    """

    kind: np.ndarray
    stream: np.ndarray
    src: np.ndarray
    layer: np.ndarray
    op: np.ndarray
    side_kind: np.ndarray
    side_src: np.ndarray
    side_layer: np.ndarray
    side_op: np.ndarray
    side_after: np.ndarray
    side_before: np.ndarray
    last_kind: np.ndarray
    last_src: np.ndarray
    last_layer: np.ndarray
    last_op: np.ndarray
    last_after: np.ndarray
    start_kind: np.ndarray
    start_src: np.ndarray
    start_layer: np.ndarray
    start_op: np.ndarray
    start_before: np.ndarray
    dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    side_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    last_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    start_dur: np.ndarray = field(default_factory=lambda: np.empty(0))

    def timed(self, values: np.ndarray) -> "Template":
        """A copy with the durations of ``values`` (seconds per :data:`_SOURCES` entry)."""
        self.side_layout  # made once on the untimed template, shared by its timed copies
        out = copy.copy(self)  # the untimed arrays shared (read only), as dataclasses.replace does
        out.dur, out.side_dur = values[self.src], values[self.side_src]
        out.last_dur, out.start_dur = values[self.last_src], values[self.start_src]
        return out

    @property
    def counts(self) -> np.ndarray:
        """How often each source occurs among the compute-stream tasks, shape (len(_SOURCES),)."""
        c = self.__dict__.get("_counts")
        if c is None:
            c = self.__dict__["_counts"] = np.bincount(self.src, minlength=len(_SOURCES)).astype(float)
        return c

    @property
    def side_layout(self) -> SimpleNamespace:
        """What :func:`template_times` reads of the side tasks' places (not their durations),
        made once per untimed template (:func:`_side_layout`)."""
        c = self.__dict__.get("_side_layout")
        if c is None:
            c = self.__dict__["_side_layout"] = _side_layout(self)
        return c

    @property
    def has_side(self) -> bool:
        """Whether any side task (of any of the three sorts) exists."""
        h = self.__dict__.get("_has_side")
        if h is None:
            h = self.__dict__["_has_side"] = bool(self.side_src.size or self.last_src.size
                                                  or self.start_src.size)
        return h

    @classmethod
    def assemble(cls, parts: list[tuple[TemplateUnit, list[int] | range]]) -> "Template":
        """Concatenate units, each repeated once per layer of its list (-1: not a layer's)."""
        cols: dict[str, list[np.ndarray]] = {}

        def put(name: str, values) -> None:
            cols.setdefault(name, []).append(np.asarray(values))

        base = 0
        for unit, layers in parts:
            layers = np.asarray(list(layers), np.int64)
            k, n = layers.size, len(unit.tasks)
            if k == 0:
                continue
            # the unit's rows repeated k times at once (np.tile of each column: the same values)
            t = np.tile(np.array(unit.tasks, np.int64).reshape(-1, 4), (k, 1))
            put("kind", t[:, 0])
            put("stream", t[:, 1])
            put("src", t[:, 2])
            put("op", t[:, 3])
            put("layer", np.repeat(layers, n))
            offset = base + np.arange(k) * n  # (k,): index of each repetition's first task
            for name, rows, width in (("side", unit.side, 5), ("last", unit.last, 4),
                                      ("start", unit.start, 4)):
                if not rows:
                    continue
                r = np.array(rows, np.int64).reshape(-1, width)
                m = r.shape[0]
                r = np.tile(r, (k, 1))  # each column as np.tile(column, k)
                put(f"{name}_kind", r[:, 0])
                put(f"{name}_src", r[:, 1])
                put(f"{name}_op", r[:, 2])
                put(f"{name}_layer", np.repeat(layers, m))
                reps = np.repeat(offset, m)
                for j, col in ((3, "after" if name != "start" else "before"), (4, "before")):
                    if j >= width:
                        continue
                    local = r[:, j]
                    put(f"{name}_{col}", np.where(local >= 0, reps + local, -1))
            base += k * n

        def arr(name: str, dtype) -> np.ndarray:
            parts_ = cols.get(name)
            return np.concatenate(parts_).astype(dtype) if parts_ else np.empty(0, dtype)

        return cls(arr("kind", np.int8), arr("stream", np.int8), arr("src", np.int64),
                   arr("layer", np.int32), arr("op", np.int16),
                   arr("side_kind", np.int8), arr("side_src", np.int64), arr("side_layer", np.int32),
                   arr("side_op", np.int16), arr("side_after", np.int64), arr("side_before", np.int64),
                   arr("last_kind", np.int8), arr("last_src", np.int64), arr("last_layer", np.int32),
                   arr("last_op", np.int16), arr("last_after", np.int64),
                   arr("start_kind", np.int8), arr("start_src", np.int64),
                   arr("start_layer", np.int32), arr("start_op", np.int16),
                   arr("start_before", np.int64))


@dataclass
class DataParallel:
    """Data-parallel communication of one stage (seconds per collective, see :func:`_stage_tasks`).

    ``layer_ag``, ``layer_rs``: one layer's parameter all-gather and gradient
    reduce-scatter (ZeRO 2/3 per micro-batch, or the buckets of
    ``--overlap-grad-reduce`` / ``--overlap-param-gather``); ``first_*``, ``last_*``: the
    same for the first (embedding) and last (output) stage's other parameters;
    ``layer_ar``, ``first_ar``, ``last_ar``: bucketed all-reduces (ZeRO 0 with
    overlap); ``moe_*``: an MoE layer's bucket (its routed experts' parameters over the
    expert-data-parallel group, the rest over ``d``); ``mtp_*``: the last stage's
    multi-token prediction parameters besides the MTP layers' transformer layers
    (:func:`core.model.counts.mtp_edge_parameters`, taken out of ``last_*``).
    """

    layer_ag: float = 0.0
    layer_rs: float = 0.0
    layer_ar: float = 0.0
    first_ag: float = 0.0
    first_rs: float = 0.0
    first_ar: float = 0.0
    last_ag: float = 0.0
    last_rs: float = 0.0
    last_ar: float = 0.0
    moe_ag: float = 0.0
    moe_rs: float = 0.0
    moe_ar: float = 0.0
    mtp_ag: float = 0.0
    mtp_rs: float = 0.0
    mtp_ar: float = 0.0


@dataclass(frozen=True)
class StageStructure:
    """Everything that shapes the templates of one virtual stage (not their durations): the
    cache key of :func:`core.sim.template_builder.stage_templates`, which reads nothing else.

    ``vstage``: the virtual stage ``k = c*p + i`` (chunk ``c`` of stage ``i``; the stage
    itself without interleaving) of ``num_vstages = p*v``; ``layers``: its global layer
    indices ``(first, stop)``; ``recomputed``: how many of its first layers full
    recomputation recomputes; ``split``: the backward is split into B and W (ZB-H1);
    ``tp``, ``dp``: whether ``t > 1`` (tensor-parallel collectives), ``d*cp > 1``; ``sp``:
    sequence parallelism with ``t > 1``; ``buckets``: whether data-parallel buckets enter
    the templates (ZeRO 2/3, or overlapped reduction or gather); ``cp``: context
    parallelism (``cp > 1``: ring attention). MoE models:
    ``moe_layers`` the chunk's MoE layers (global indices; empty for dense models), ``ep``
    whether ``ep > 1`` (expert all-to-alls), ``etp_mode`` how the experts' tensor
    parallelism communicates (``"none"`` with ``etp = 1``; ``"gather"``: the dispatched tokens
    all-gathered over the ``etp`` ranks before the experts and their output reduce-scattered
    after; ``"all_reduce"``: without sequence parallelism, every rank holds all tokens and the
    experts' output is all-reduced over ``t`` as a dense MLP's), ``shared`` shared experts.
    ``selective``: selective recomputation runs the attention core again (``core_attn``);
    ``modules``: the modules it recomputes (:func:`core.plan.parallel.recompute_modules`).
    ``window_layers``: the chunk's layers with sliding-window attention (global indices;
    :func:`core.model.attention.window_layer_mask`), whose attention ops are ``attention_swa_*``.
    ``mla``: multi-head latent attention, whose attention ops' input-side tensor-parallel
    collectives move the latents (``tp_mla_*``, :func:`core.model.mla.mla_tp_latent_width`).
    ``mtp``: the multi-token prediction layers the (last) virtual stage runs after its layers
    (0 elsewhere); ``mtp_moe``: theirs is an MoE layer (:func:`core.model.mtp.mtp_layer_is_moe`);
    ``mtp_recompute``: full recomputation of every layer, under which each MTP layer's
    transformer layer is recomputed (Megatron-Core's ``MultiTokenPredictionLayer`` checkpoints
    it by the uniform method, not by the block one: :func:`core.model.recompute.mtp_layers_recomputed`).
    ``norms``: whether the input norm and a dense layer's pre-MLP norm are modules of their
    own (:func:`core.model.attention.norms_separate`), which ``layernorm`` recomputation runs again.
    ``ep_overlap``: ``overlap_moe_expert_parallel_comm`` with ``ep > 1``: the forward's and the
    backward's expert all-to-alls take their own sources (``ep_all_to_all@fwd``, ``@bwd``),
    timed at their exposed parts (:func:`ep_overlap_exposed`).
    """

    vstage: int
    num_vstages: int
    layers: tuple[int, int]
    recomputed: int
    selective: bool
    split: bool
    tp: bool
    sp: bool
    dp: bool
    zero_stage: int
    overlap_grad_reduce: bool
    overlap_param_gather: bool
    cp: bool = False
    moe_layers: tuple[int, ...] = ()
    ep: bool = False
    etp_mode: str = "none"
    shared: bool = False
    modules: tuple[str, ...] = ()
    window_layers: tuple[int, ...] = ()
    tp_overlap: bool = False
    selective_op: bool = False
    mla: bool = False
    mtp: int = 0
    mtp_moe: bool = False
    mtp_recompute: bool = False
    ep_overlap: bool = False
    norms: tuple[bool, bool] = (True, True)

    @property
    def buckets(self) -> bool:
        return self.dp and (self.zero_stage >= 2 or self.overlap_grad_reduce or self.overlap_param_gather)


def stage_structure(session: Session, stage: int, chunk: int = 0,
               bounds: np.ndarray | None = None) -> StageStructure:
    """The :class:`StageStructure` of chunk ``chunk`` of ``stage`` of ``session``'s plan
    (``bounds``: :func:`virtual_stage_layers` of the session, when the caller has it)."""
    return stage_structures(session, [(stage, chunk)], bounds)[0]


def stage_structures(session: Session, cells: list[tuple[int, int]],
                     bounds: np.ndarray | None = None) -> list[StageStructure]:
    """:func:`stage_structure` of each ``(stage, chunk)`` of ``cells``, what they share (all
    but the virtual stage's place and layers) read once."""
    pl = session.plan
    p, v = pl.pipeline_parallel, num_chunks(pl)
    place = chunk_virtual_stages(pl)
    if bounds is None:
        bounds = virtual_stage_layers(session)
    t = pl.tensor_parallel > 1
    m = session.model
    mask = None
    shared: dict = {}
    if m.is_moe:
        mask = model_math.moe_layer_mask(m)
        sp = bool(pl.sequence_parallel and t)
        etp = expert_tensor_parallel(pl)
        shared = dict(ep=pl.expert_parallel > 1,
                      etp_mode="none" if etp == 1 else ("all_reduce" if t and not sp else "gather"),
                      shared=m.num_shared_experts > 0,
                      ep_overlap=model_math.ep_overlap_on(pl))
    modules = recompute_modules(pl)
    selective = "core_attn" in modules
    splits = schedules.get(pl.schedule).splits_backward
    sp_on, reduces = bool(pl.sequence_parallel and t), reduces_gradients(session)
    windowed = bool(getattr(m, "window_size", None))
    skip_freq = getattr(m, "window_attn_skip_freq", None)
    tp_overlap, selective_op = tp_overlap_applies(pl), pl.recompute == "selective_op"
    mla, mtp_moe = m.multi_latent_attention is True, model_math.mtp_layer_is_moe(m)
    mtp_recompute, norms = mtp_layers_recomputed(pl), model_math.norms_separate(m)
    out = []
    for stage, chunk in cells:
        k = int(place[stage, chunk])
        first, stop = int(bounds[k]), int(bounds[k + 1])
        moe = shared
        if mask is not None:
            moe = dict(moe_layers=tuple(int(x) for x in np.flatnonzero(mask[first:stop]) + first),
                       **shared)
        out.append(StageStructure(
            k, p * v, (first, stop), model_math.recomputed_in_chunk(pl, stop - first), selective,
            splits, t, sp_on, reduces, pl.zero_stage, bool(pl.overlap_grad_reduce),
            bool(pl.overlap_param_gather), pl.context_parallel > 1, modules=modules,
            window_layers=_window_layers(m.num_layers, windowed, skip_freq, first, stop),
            tp_overlap=tp_overlap, selective_op=selective_op, mla=mla,
            mtp=model_math.mtp_layers(m) if k == p * v - 1 else 0, mtp_moe=mtp_moe,
            mtp_recompute=mtp_recompute, norms=norms, **moe))
    return out


@lru_cache(maxsize=4096)
def _window_layers(num_layers: int, windowed: bool, skip_freq: int | None, first: int,
                   stop: int) -> tuple[int, ...]:
    """Global indices of the sliding-window layers among ``first..stop-1``
    (:func:`core.model.attention.window_layer_mask`, memoized by every model field it reads:
    ``num_layers``, whether ``window_size`` is set, ``window_attn_skip_freq``)."""
    model = SimpleNamespace(num_layers=num_layers, window_size=windowed,
                            window_attn_skip_freq=skip_freq)
    return tuple(int(x) for x in np.flatnonzero(
        model_math.window_layer_mask(model)[first:stop]) + first)


def reduces_gradients(session: Session) -> bool:
    """Whether gradients are reduced across GPUs: ``d*cp > 1``, or an MoE model whose routed
    experts have ``edp > 1`` replicas (with ``d*cp = 1`` and ``t > etp*ep``):
    :func:`core.model.moe.gradients_reduced` of the session's model and plan."""
    return gradients_reduced(session.model, session.plan)


def source_values(times: dict[str, float], tp: dict[str, float] | None,
                   dp: DataParallel | None, session: Session,
                   moe: dict[str, float] | None = None, fp8_speedup: float = 1.0) -> np.ndarray:
    """Seconds of every :data:`_SOURCES` entry for one stage of a plan (0 where it has none);
    ``moe``: the MoE layers' communication by source name (``ep_all_to_all``,
    ``etp_all_gather``, ``etp_reduce_scatter``); ``fp8_speedup`` see
    :func:`weight_gradient_share`."""
    v = np.zeros(len(_SOURCES))
    for name, sec in times.items():
        if name in SOURCE_INDEX:
            v[SOURCE_INDEX[name]] = sec
    for op in W_OPS:
        if op not in times:  # the MoE ops of a dense model
            continue
        share = weight_gradient_share(op, session, fp8_speedup)
        v[SOURCE_INDEX[op + ":W"]] = times[op] * share
        v[SOURCE_INDEX[op + ":B"]] = times[op] * (1 - share)
    if "attention_core_bwd" in times:  # context parallelism: the attention ops outside the ring
        v[SOURCE_INDEX["attention_fwd:pre"]] = times["attention_fwd"] - times["attention_core_fwd"]
        v[SOURCE_INDEX["attention_bwd:pre"]] = times["attention_bwd"] - times["attention_core_bwd"]
        v[SOURCE_INDEX["attention_bwd:B:pre"]] = max(v[SOURCE_INDEX["attention_bwd:B"]]
                                             - times["attention_core_bwd"], 0.0)
    for name, sec in (moe or {}).items():
        v[SOURCE_INDEX[name]] = sec
    if moe:  # the whole all-to-all until ep_overlap_exposed times the overlapped ones
        v[SOURCE_INDEX["ep_all_to_all@fwd"]] = v[SOURCE_INDEX["ep_all_to_all@bwd"]] = moe["ep_all_to_all"]
    for kind, sec in (tp or {}).items():
        v[SOURCE_INDEX["tp_" + kind]] = sec
    if tp and tp_overlap_applies(session.plan):
        torch_async = session.plan.tp_comm_overlap_backend == "symmetric_memory"
        for op, base in TP_OVERLAP_BLOCKS.items():
            for kind in ("all_gather", "reduce_scatter"):
                if torch_async and kind == "reduce_scatter" and base.endswith("_bwd"):
                    # PyTorch's micro-pipeline TP does not fuse the reduce-scatter of the
                    # summed input gradients (TP_COMM_OVERLAP_BACKENDS): exposed, as without
                    exposed, hidden = tp[kind], 0.0
                else:
                    exposed, hidden = tp_overlap_split(
                        tp[kind], times[TP_OVERLAP_GEMMS[base, kind]],
                        session.plan.tensor_parallel)
                v[SOURCE_INDEX[f"tp_{kind}@{op}"]], v[SOURCE_INDEX[f"tp_{kind}@{op}:hidden"]] = exposed, hidden
        for op, gemm in SAC_GATHERS.items():  # per-op checkpointing's recomputed all-gathers
            if gemm in times:
                exposed, hidden = tp_overlap_split(tp["all_gather"], times[gemm],
                                                   session.plan.tensor_parallel)
                v[SOURCE_INDEX[f"tp_all_gather@{op}"]], v[SOURCE_INDEX[f"tp_all_gather@{op}:hidden"]] = (
                    exposed, hidden)
    if dp is not None:
        for f in dataclasses.fields(dp):
            v[SOURCE_INDEX[f.name]] = getattr(dp, f.name)
    return v


def _code_groups(code: np.ndarray) -> list[np.ndarray] | None:
    """The tasks of each code of ``code`` (int (k,)), as :func:`_chain_groups` takes them: None
    when every task has one code (one chain), else the positions of each code's tasks, codes in
    increasing order."""
    if code.size and (code == code[0]).all():
        return None
    return [np.flatnonzero(code == c) for c in np.unique(code)]


def _chain_groups(dur: np.ndarray, ready: np.ndarray, groups: list[np.ndarray] | None
                  ) -> np.ndarray:
    """End times of tasks run one after another per code (in list order), each no earlier than
    its ``ready`` time: ``end[j] = max(end[prev], ready[j]) + dur[j]``, vectorized as a running
    maximum over prefix sums (from time 0); the codes grouped by :func:`_code_groups`."""
    if groups is None:  # one stream: the same sums, no gathering
        D = np.cumsum(dur)
        return np.asarray(D + np.maximum.accumulate(np.maximum(ready - (D - dur), 0.0)), float)
    out = np.empty(dur.size)
    for idx in groups:
        D = np.cumsum(dur[idx])
        out[idx] = D + np.maximum.accumulate(np.maximum(ready[idx] - (D - dur[idx]), 0.0))
    return out


def _side_layout(tmpl: Template) -> SimpleNamespace:
    """The places of ``tmpl``'s side tasks that :func:`template_times` and
    :func:`tail_overrun` read, computed once per template (a sweep times each thousands of
    times): ``free`` (bool (k,): side tasks that start with the op), ``dep`` (the others),
    ``n_free``, ``any_dep``, ``dep_after``, the chains' :func:`_code_groups` (``free_groups``
    and ``start_groups``, the latter with the ``start`` tasks first; ``dep_groups``,
    ``last_groups``), the tasks the free chains end before (``free_before``,
    ``start_before``) and ``mixed``: a side task neither prefetched nor ending the op."""
    free = tmpl.side_after < 0
    dep = ~free
    f_op, f_before = tmpl.side_op[free], tmpl.side_before[free]
    return SimpleNamespace(
        free=free, dep=dep, n_free=int(free.sum()), any_dep=bool(dep.any()),
        mixed=bool(np.any(free & (tmpl.side_before < 0)) or np.any(dep & (tmpl.side_before >= 0))),
        free_before=f_before, free_groups=_code_groups(f_op),
        start_before=np.concatenate([tmpl.start_before, f_before]),
        start_groups=_code_groups(np.concatenate([tmpl.start_op, f_op])),
        dep_after=tmpl.side_after[dep], dep_groups=_code_groups(tmpl.side_op[dep]),
        last_groups=_code_groups(tmpl.last_op))


def template_times(tmpl: Template, start_at: float | None = None
                    ) -> tuple[np.ndarray, np.ndarray, float]:
    """End times (from the op's start) of a template's tasks and side tasks, and its span.

    The span is when the op ends: its last task and its side tasks that end the
    op (``side_before`` -1) have ended. With ``start_at`` the op starts at time 0
    with the iteration and its ``start`` side tasks run one after another from
    ``start_at`` (the all-gathers of earlier chunks before). Side tasks that
    start with the op (``side_after`` -1) wait for nothing else; the others end the
    op (the two sorts the builder makes: prefetched all-gathers, and reductions
    after a layer's backward). The side tasks' places are the template's
    :attr:`Template.side_layout`, made once.
    """
    dur = tmpl.dur
    S = np.cumsum(dur)
    with_start = start_at is not None and tmpl.start_dur.size > 0
    if not tmpl.side_dur.size and not with_start:
        return S, np.empty(0), float(S[-1]) if S.size else 0.0
    lay = tmpl.side_layout
    if lay.mixed:
        raise AssertionError("side task neither prefetched nor ending the op")
    # prefetched side tasks (and the iteration-start ones) do not depend on the compute chain
    f_dur = tmpl.side_dur[lay.free]
    f_ready = np.zeros(f_dur.size)
    f_before, groups = lay.free_before, lay.free_groups
    if with_start:
        f_dur = np.concatenate([tmpl.start_dur, f_dur])
        f_ready = np.concatenate([np.full(tmpl.start_dur.size, float(start_at)), f_ready])
        f_before, groups = lay.start_before, lay.start_groups
    f_end = _chain_groups(f_dur, f_ready, groups)
    wait = np.zeros(dur.size)
    np.maximum.at(wait, f_before, f_end)
    end = S + np.maximum.accumulate(np.maximum(wait - (S - dur), 0.0))
    side_end = np.empty(tmpl.side_dur.size)
    side_end[lay.free] = f_end[f_end.size - lay.n_free:]
    dep = lay.dep
    side_end[dep] = _chain_groups(tmpl.side_dur[dep], end[lay.dep_after], lay.dep_groups)
    span = max(float(end[-1]) if end.size else 0.0,
               float(side_end[dep].max()) if lay.any_dep else 0.0)
    return end, side_end, span


def tail_overrun(tmpl: Template) -> float:
    """How long after the item's end its ``last`` side tasks end (negative when earlier): the
    iteration's tail waits for them."""
    end, _, span = template_times(tmpl)
    finish = _chain_groups(tmpl.last_dur, end[tmpl.last_after], tmpl.side_layout.last_groups)
    return float(finish.max()) - span
