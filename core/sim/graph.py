"""Execution graph of one training iteration (one data-parallel replica) as arrays.

Two layers:

* :func:`core.sim.pipeline_graph.build_pipeline_graph` turns per-stage task templates (the
  tasks of one micro-batch's forward and backward on that stage) and a pipeline schedule
  into arrays. It is generic and is what the closed-form tests drive.
* :func:`build_graph` (this module) makes those templates for a session from the profile
  store (op times, :mod:`core.sim.op_times`), the stage structure
  (:mod:`core.sim.templates`, :mod:`core.sim.stages`) and the communication model, and
  attaches the side tasks (overlapped buckets, context-parallel exchange).

Dependencies: the compute stream of a stage runs its tasks in program order
(one chain, including the tensor-parallel all-reduces, which block it, and the
data-parallel all-reduce before the optimizer step). A pipeline transfer
depends on the producing stage's last task of that micro-batch and gates the
consuming stage's first task; the send is blocking, as in Megatron-LM
(``torch.cuda.synchronize`` after the batched send/recv) and DeepSpeed's
pipeline engine (synchronous NCCL send), so the sender's next task also waits
for the transfer to end; the interleaved schedule's overlapped sends
(:func:`core.plan.parallel.p2p_overlapped`) delay only the receiver and the
stage's tail. Replicas are
symmetric, so one replica is simulated and the data-parallel all-reduce enters
as a timed task.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core import schedules
from core.plan.parallel import p2p_overlapped
from core.plan.session import Session
from core.sim.graph_types import ExecutionGraph
from core.sim.pipeline_graph import (COMM, COMPUTE, CP_RING, K, OP, StageProgram, TaskTemplate,
                                     build_pipeline_graph)
from core.sim.op_times import DETAILS, num_chunks
from core.sim.templates import Template, TemplateUnit, reduces_gradients
from core.sim.stages import StageTimes, stage_tasks, stage_times

__all__ = ["build_graph"]


def _stage_items(graph: ExecutionGraph, stage: int) -> list[tuple[int, int, int, int, int]]:
    """``(phase, chunk, micro-batch, first task, last task)`` of each work item of ``stage`` in
    program order: the runs of equal (phase, chunk, micro-batch) along the stage's chain."""
    idx = np.flatnonzero((graph.stage == stage) & (graph.kind != K["pp_p2p"])
                         & (graph.microbatch >= 0))
    keys = np.stack([graph.phase[idx], graph.chunk[idx], graph.microbatch[idx]], axis=1)
    cut = np.flatnonzero(np.any(keys[1:] != keys[:-1], axis=1)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [idx.size]]) - 1
    return [(int(keys[a, 0]), int(keys[a, 1]), int(keys[a, 2]), int(idx[a]), int(idx[e]))
            for a, e in zip(starts, ends)]


def _attach_side_tasks(graph: ExecutionGraph, templates: list[dict[tuple[int, int], Template]],
                       after_optimizer_s: np.ndarray | None = None, num_microbatches: int = 1,
                       chain_start: bool = True) -> ExecutionGraph:
    """``graph`` with the communication that overlaps computation (see :class:`Template`) and the
    parameter all-gather after each stage's optimizer step (``after_optimizer_s``, 0: none).

    ``templates[i][(phase, chunk)]`` is the template of stage ``i``'s work items of that phase
    and chunk. Every added task runs on its stage's communication stream (one chain per
    collective kind within an item). A side task that starts with its item depends on what
    the item's first task depends on; one that ends its item gates every successor of the
    item's last task (the next item and the pipeline send), so the merged tasks of
    :meth:`StageTimes.programs` keep the same times. The ``start`` tasks of each chunk gate
    its first forward (micro-batch 0), chained across chunks when ``chain_start``; the
    ``last`` tasks follow the chunk's last weight-gradient item (micro-batch m-1) and gate
    the stage's tail. One pass over each stage's work items (:class:`_SideTasks`).
    """
    need = any(t.has_side for stage in templates for t in stage.values())
    if after_optimizer_s is not None and np.any(after_optimizer_s > 0):
        need = True
    if not need:
        return graph
    side = _SideTasks(graph)
    grad_phase = {t_phase for stage in templates for (t_phase, _), t in stage.items() if t.last_src.size}
    for i in range(graph.num_stages):
        tmpls = templates[i]
        tail = np.flatnonzero((graph.stage == i) & (graph.microbatch < 0) & (graph.kind != K["pp_p2p"]))
        items = _stage_items(graph, i) if any(t.has_side for t in tmpls.values()) else []
        start_prev: dict[int, int] = {}
        for phase, chunk, mb, first, last in items:
            tmpl = tmpls[(phase, chunk)]
            if tmpl.side_dur.size:
                side.item_side_tasks(tmpl, i, phase, chunk, mb, first, last)
            if phase == schedules.PHASE_F and mb == 0 and tmpl.start_dur.size:
                if not chain_start:
                    start_prev = {}
                side.start_tasks(tmpl, i, chunk, first, start_prev)
            if (phase in grad_phase and mb == num_microbatches - 1 and tmpl.last_dur.size
                    and tail.size):
                side.last_tasks(tmpl, i, phase, chunk, mb, first, int(tail[0]))
        if after_optimizer_s is not None and after_optimizer_s[i] > 0 and tail.size:
            x = side.task((float(after_optimizer_s[i]), i, -1, -1, OP["dp_all_gather"], -1, -1,
                           False, K["dp_comm"]))
            side.edges(tail[-1], x)
    return side.graph_with_tasks()


class _SideTasks:
    """The side tasks added to ``graph`` so far, as columns and edges, and the lookups of its
    existing edges (predecessors, successors) that placing them needs.

    ``joins``: task -> the side tasks that end the item before it (added here), which count
    among its predecessors for the side tasks that start with it.
    """

    #: Columns of each added task, in the order :meth:`task` takes them.
    COLS = ("dur", "stage", "mb", "layer", "op", "chunk", "phase", "overlapped", "kind")

    def __init__(self, graph: ExecutionGraph) -> None:
        self.graph = graph
        src, dst = graph.src, graph.dst
        self.by_dst = np.argsort(dst, kind="stable")
        self.by_src = np.argsort(src, kind="stable")
        self.sorted_dst, self.sorted_src = dst[self.by_dst], src[self.by_src]
        self.joins: dict[int, list[int]] = {}
        self.n0 = graph.num_tasks
        self.new: dict[str, list] = {k: [] for k in self.COLS}
        self.e_src: list[np.ndarray] = []
        self.e_dst: list[np.ndarray] = []
        self.side_plan: dict[int, tuple] = {}  # template id -> its side tasks' masks and chain pairs

    def preds(self, x: int) -> np.ndarray:
        """Predecessors of task ``x``: its edges in the graph and the side tasks joined to it."""
        lo, hi = np.searchsorted(self.sorted_dst, [x, x + 1])
        return np.concatenate([self.graph.src[self.by_dst[lo:hi]],
                               np.array(self.joins.get(x, []), np.int64)])

    def succs(self, x: int) -> np.ndarray:
        """Successors of task ``x`` in the graph."""
        lo, hi = np.searchsorted(self.sorted_src, [x, x + 1])
        return self.graph.dst[self.by_src[lo:hi]]

    def task(self, values: tuple) -> int:
        """Add one task (``values`` per :attr:`COLS`); its index."""
        for k, v in zip(self.COLS, values):
            self.new[k].append(v)
        return self.n0 + len(self.new["dur"]) - 1

    def edges(self, a, b) -> None:
        """Add the edges ``a -> b`` (indices or arrays of them, broadcast)."""
        a, b = np.atleast_1d(np.asarray(a, np.int64)), np.atleast_1d(np.asarray(b, np.int64))
        a, b = np.broadcast_arrays(a, b)
        self.e_src.append(a.ravel())
        self.e_dst.append(b.ravel())

    def plan_of(self, tmpl: Template) -> tuple:
        """What every item of ``tmpl`` repeats: the side tasks that start after a template
        task (``after >= 0``), the chain pairs (each side task after the previous one of its
        collective) and the side tasks that end the item (``before < 0``)."""
        got = self.side_plan.get(id(tmpl))  # (tmpl, ...): the id names this template only
        if got is not None and got[0] is tmpl:
            return got[1:]
        ops = tmpl.side_op
        chain_prev, chain_next = [], []
        last_of: dict[int, int] = {}
        for j, op in enumerate(ops.tolist()):
            if op in last_of:
                chain_prev.append(last_of[op])
                chain_next.append(j)
            last_of[op] = j
        dep = tmpl.side_after >= 0
        ends = tmpl.side_before < 0
        # Edges that a chain of one collective implies are left out (the times are the same, bit
        # for bit: the implied path's arrival is never earlier): a side task after an earlier
        # one of its collective needs no edges from the item's predecessors, and one before a
        # later one (which gates a task of the item, or its successors) none to the successors.
        # Without this an item of k such tasks adds k x k edges (49.8 M edges for 2.7 M tasks
        # on Llama 3.1 405B with tp_comm_overlap; 4.2 M with it).
        has_prev = np.zeros(ops.size, bool)
        has_prev[chain_next] = True
        has_next = np.zeros(ops.size, bool)
        has_next[chain_prev] = True
        out = (dep, np.flatnonzero(~dep & ~has_prev), np.array(chain_prev, np.int64),
               np.array(chain_next, np.int64), ends, np.flatnonzero(ends & ~has_next))
        self.side_plan[id(tmpl)] = (tmpl, *out)
        return out

    def item_side_tasks(self, tmpl: Template, stage: int, phase: int, chunk: int, mb: int,
                        first: int, last: int) -> None:
        """The side tasks of one work item (its tasks ``first..last``), vectorized over the
        template's ``k`` side tasks."""
        new, k = self.new, tmpl.side_dur.size
        dep, free, c_prev, c_next, ends, end_idx = self.plan_of(tmpl)
        x = self.n0 + len(new["dur"]) + np.arange(k, dtype=np.int64)
        for name, values in (("dur", tmpl.side_dur), ("layer", tmpl.side_layer),
                             ("op", tmpl.side_op), ("kind", tmpl.side_kind)):
            new[name].extend(values.tolist())
        for name, value in (("stage", stage), ("mb", mb), ("chunk", chunk),
                            ("phase", phase), ("overlapped", True)):
            new[name].extend([value] * k)
        if dep.any():
            self.edges(first + tmpl.side_after[dep], x[dep])
        if free.size:
            pr = self.preds(first)
            self.edges(np.repeat(pr, free.size), np.tile(x[free], pr.size))
        if c_prev.size:
            self.edges(x[c_prev], x[c_next])
        if not ends.all():
            self.edges(x[~ends], first + tmpl.side_before[~ends])
        if end_idx.size:
            ys = self.succs(last)
            self.edges(np.repeat(x[end_idx], ys.size), np.tile(ys, end_idx.size))
            for y in ys.tolist():
                self.joins.setdefault(y, []).extend(x[end_idx].tolist())

    def start_tasks(self, tmpl: Template, stage: int, chunk: int, first: int,
                    start_prev: dict[int, int]) -> None:
        """The ``start`` side tasks of a chunk's first forward (task ``first`` on), each after
        the previous one of its collective (``start_prev``, updated)."""
        for dur, layer, op, before in zip(tmpl.start_dur.tolist(), tmpl.start_layer.tolist(),
                                          tmpl.start_op.tolist(), tmpl.start_before.tolist()):
            x = self.task((dur, stage, -1, layer, op, chunk, -1, True, K["dp_comm"]))
            if op in start_prev:
                self.edges(start_prev[op], x)
            start_prev[op] = x
            self.edges(x, first + before)

    def last_tasks(self, tmpl: Template, stage: int, phase: int, chunk: int, mb: int,
                   first: int, tail: int) -> None:
        """The ``last`` side tasks of a chunk's last gradient item (task ``first`` on), chained
        per collective, each gating the stage's tail (task ``tail``)."""
        prev: dict[int, int] = {}
        for dur, layer, op, after in zip(tmpl.last_dur.tolist(), tmpl.last_layer.tolist(),
                                         tmpl.last_op.tolist(), tmpl.last_after.tolist()):
            x = self.task((dur, stage, mb, layer, op, chunk, phase, True, K["dp_comm"]))
            self.edges(first + after, x)
            if op in prev:
                self.edges(prev[op], x)
            prev[op] = x
            self.edges(x, tail)

    def graph_with_tasks(self) -> ExecutionGraph:
        """The graph with the added tasks and edges (the graph itself when none)."""
        graph, new = self.graph, self.new
        if not new["dur"]:
            return graph

        def col(name: str, dtype) -> np.ndarray:
            return np.array(new[name], dtype)

        kinds = col("kind", np.int8)
        return ExecutionGraph(
            duration_s=np.concatenate([graph.duration_s, col("dur", np.float64)]),
            kind=np.concatenate([graph.kind, kinds]),
            stream=np.concatenate([graph.stream, np.where(kinds == K["cp_p2p"], CP_RING, COMM
                                                          ).astype(np.int8)]),
            stage=np.concatenate([graph.stage, col("stage", np.int32)]),
            microbatch=np.concatenate([graph.microbatch, col("mb", np.int32)]),
            layer=np.concatenate([graph.layer, col("layer", np.int32)]),
            src=np.concatenate([graph.src] + self.e_src).astype(np.int64),
            dst=np.concatenate([graph.dst] + self.e_dst).astype(np.int64),
            num_stages=graph.num_stages,
            op=np.concatenate([graph.op, col("op", np.int16)]),
            chunk=np.concatenate([graph.chunk, col("chunk", np.int16)]),
            phase=np.concatenate([graph.phase, col("phase", np.int8)]),
            overlapped=np.concatenate([np.zeros(self.n0, bool), col("overlapped", bool)]),
            chunk_stages=graph.chunk_stages,
        )


def build_graph(session: Session, store, detail: str = "op", cache: dict | None = None,
                times: StageTimes | None = None) -> tuple[ExecutionGraph, list[str]]:
    """Execution graph of one iteration of Megatron-style GPT training.

    Per stage and micro-batch: embedding (first stage), per layer attention
    and MLP, the output layer with cross-entropy (last stage). Tensor
    parallelism adds an all-reduce after each op in the forward and before it
    in the backward (the input gradient of the column-parallel GEMM); with
    sequence parallelism an all-gather before and a reduce-scatter after each
    instead (Korthikanti et al. 2022). Full recomputation runs a layer's
    forward again right before its backward (the stage's first
    ``recompute_num_layers`` layers when set, Megatron's block method);
    selective recomputation runs the attention core again before the attention
    backward. Pipeline transfers carry ``b*s*h/t`` elements per GPU
    (Megatron's scatter-gather optimisation; the all-gather after it is not
    modelled).

    Data parallelism (one bucket per layer; :func:`stage_tasks`): ZeRO 0
    all-reduces the gradients and ZeRO 1 (Megatron's distributed optimizer)
    reduce-scatters them after the last backward, or bucket by bucket under
    the final backward with ``overlap_grad_reduce`` (tasks on the
    communication stream, each after its layer's backward; the optimizer
    waits for the last). ZeRO 2 and 3 reduce-scatter every micro-batch's
    gradients (blocking, or overlapped within that backward), and ZeRO 3
    all-gathers each layer's parameters before its forward and its backward
    (blocking, or prefetched on the communication stream with
    ``overlap_param_gather``). The optimizer steps over the stage's
    parameters, ``1/d`` of them from ZeRO 1 on; ZeRO 1 and 2 then all-gather
    the updated parameters, after the step or, with ``overlap_param_gather``,
    from the start of the (next) iteration under the first forward.

    Parameters
    ----------
    session : Session
    store : ProfileStore
    detail : {"op", "microbatch"}
        ``"op"``: one task per op and collective (what the timeline draws).
        ``"microbatch"``: each stage's forward (resp. backward with
        recomputation) of one micro-batch merged into one ``forward`` (resp.
        ``backward``) task of the span of its tasks, ``layer = -1``; the
        data-parallel tail of each stage merged into one task. The merged
        tasks have one entry and one exit, so every remaining task (pipeline
        transfers, optimizer step) and the iteration time keep their start and
        end times (up to float rounding); the graph is about ``L/p * 4`` times
        smaller. The compute/communication split per stage is lost.
    cache : dict, optional
        Memo of lookups shared between calls (see :func:`stage_times`).
    times : StageTimes, optional
        ``stage_times(session, store, cache)`` when the caller already has it.

    Returns
    -------
    graph : ExecutionGraph
    warnings : list of str
        Lookups that extrapolated or fell back to the analytic model.

    Raises
    ------
    KeyError
        The profile lacks the dtype or collectives the plan needs.
    ValueError
        Unknown ``detail``.
    """
    if detail not in DETAILS:
        raise ValueError(f"detail={detail!r} is not one of {', '.join(DETAILS)}")
    pl = session.plan
    st = times if times is not None else stage_times(session, store, cache)
    m = pl.num_microbatches
    if detail == "microbatch":
        graph = build_pipeline_graph(st.programs(), m, pl.schedule, p2p_overlapped(pl))
        return (_attach_side_tasks(graph, _item_side_templates(session, st), num_microbatches=m,
                                   chain_start=False),
                st.warnings)
    programs, templates = _op_programs(session, st)
    graph = build_pipeline_graph(programs, m, pl.schedule, p2p_overlapped(pl))
    return (_attach_side_tasks(graph, templates, st.after_optimizer_s, num_microbatches=m),
            st.warnings)


def _item_side_templates(session: Session, st: StageTimes) -> list[dict[tuple[int, int], Template]]:
    """The side templates of the ``"microbatch"`` graph: per stage and (phase, chunk), one task
    and the parameter all-gathers and gradient buckets that overlap its work items, as the
    time they add beyond them (``st.ready_s``: a start task before the first forward;
    ``st.chunk_tail_s``: a last task after the chunk's last gradient item)."""
    pl = session.plan
    p, v = pl.pipeline_parallel, num_chunks(pl)
    split = schedules.get(pl.schedule).splits_backward
    F, B, W = schedules.PHASE_F, schedules.PHASE_B, schedules.PHASE_W
    templates = []
    for i in range(p):
        tmpls: dict[tuple[int, int], Template] = {}
        for c in range(v):
            for phase in (F, B, W):
                u = TemplateUnit()
                u.tasks.append((0, COMPUTE, 0, -1))
                if phase == F and st.ready_s[i, c] > 0:
                    u.start.append((K["dp_comm"], 0, OP["dp_all_gather"], 0))
                grads = W if split else B
                if phase == grads and st.chunk_tail_s[i, c] > 0:
                    u.last.append((K["dp_comm"], 0, OP["dp_all_reduce"], 0))
                t = Template.assemble([(u, [-1])])
                tmpls[(phase, c)] = dataclasses.replace(
                    t, start_dur=np.array([st.ready_s[i, c]])[:t.start_src.size],
                    last_dur=np.array([st.chunk_tail_s[i, c]])[:t.last_src.size])
        templates.append(tmpls)
    return templates


def _op_programs(session: Session, st: StageTimes
                 ) -> tuple[list[StageProgram], list[dict[tuple[int, int], Template]]]:
    """The ``"op"`` graph's inputs: each stage's program (its timed templates per chunk, sends,
    data-parallel tail and optimizer step) and its templates by (phase, chunk), whose side
    tasks :func:`_attach_side_tasks` adds."""
    pl = session.plan
    split = schedules.get(pl.schedule).splits_backward
    F, B, W = schedules.PHASE_F, schedules.PHASE_B, schedules.PHASE_W
    reduce_after = reduces_gradients(session) and pl.zero_stage <= 1 and not pl.overlap_grad_reduce

    def task_template(t: Template) -> TaskTemplate:
        return TaskTemplate(t.kind, t.stream, t.dur, t.layer, t.op)

    programs, templates = [], []
    for i in range(pl.pipeline_parallel):
        fwds, bwds, wgds = stage_tasks(session, i, st.op_times_s, st.tp_comm_s, st.dp[i],
                                        st.moe_comm_s, st.fp8_speedup)
        templates.append({**{(F, c): t for c, t in enumerate(fwds)},
                          **{(B, c): t for c, t in enumerate(bwds)},
                          **{(W, c): t for c, t in enumerate(wgds)}})
        programs.append(StageProgram(
            [task_template(t) for t in fwds], [task_template(t) for t in bwds],
            [task_template(t) for t in wgds] if split else None,
            send_fwd_s=float(st.send_fwd_s[i]), send_bwd_s=float(st.send_bwd_s[i]),
            dp_comm_s=float(st.dp_reduce_s[i]) if reduce_after else None,
            optimizer_s=float(st.optimizer_s[i])))
    return programs, templates
