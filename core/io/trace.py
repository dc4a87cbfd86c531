"""Export a solved iteration as Chrome trace-event JSON (opens in Perfetto and chrome://tracing).

Format: the Trace Event Format's JSON object form, complete events (``"ph":
"X"``) with microsecond ``ts``/``dur``; one process per pipeline stage and one
thread per stream the graph uses (:data:`core.sim.graph_types.STREAMS`: compute, comm, and the
CP exchange, EP all-to-all and PP send/recv where used), named with metadata events; times are
written to the nanosecond, a slice's start and end each rounded (its duration their
difference), so the slices of one thread nest as the simulator's do; the
pipeline transfers (counted at the sending stage) on a thread of their own: the interleaved
schedule's overlapped sends run beside the tensor-parallel collectives of the comm stream,
and a trace viewer nests the slices of one thread that overlap. Slices of one stream that
overlap without nesting (the overlapped parameter all-gather beside a tensor-parallel
collective) go on further rows of that stream's thread, "comm (2)" and so on
(:func:`_nesting_threads`).

Each slice is named by what it runs, as the simulator's graph knows it: the profile store's op
(:data:`core.sim.graph_types.OPS`: ``attention_fwd``, ``mlp_bwd``, ``experts_fwd``,
``ep_dispatch``, ``tp_reduce_scatter``, ``dp_all_gather``, ``p2p_fwd`` ...), a recomputed
forward op with `` (recompute)`` and the weight-gradient part of a split backward with
`` (wgrad)``; the task kind where the graph has no op, and ``cp_exchange`` for the
context-parallel exchange (a ring, an all-gather or an all-to-all). Its ``cat`` is ``compute``
or ``communication`` (Perfetto's category filter); its ``args`` give ``kind`` (the task kind,
:data:`core.sim.graph_types.KINDS`), ``stage``, ``virtual_stage``, ``microbatch``, ``layer`` and
``phase`` (F, B, W) where the task has one, and ``overlapped`` for communication beside the
compute stream. A trial user's MoE trace named every compute slice ``forward`` or
``backward`` with only the micro-batch and layer: layer 0's attention and MLP forwards were two
``forward`` slices (3.54 ms, 7.07 ms) told apart by nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.sim.graph_types import KIND_COMPUTE, KINDS, OPS, STREAMS, ExecutionGraph, Schedule
from core.schedules import PHASES
from core.sim.labels import KIND_NAMES
from core.util.inputs import strict_dumps
from core.io.session import atomic_write_text
from core.io.kineto import VTRAIN_TRACE_MARK

__all__ = ["event_name", "trace_events", "write_trace"]


def trace_events(graph: ExecutionGraph, schedule: Schedule) -> dict:
    """The trace document as a dict: ``{"traceEvents": [...], "displayTimeUnit": "ms",
    "otherData": {"generator": "vtrain", "content": "simulated iteration"}}``: the Trace Event
    Format's ``otherData`` (metadata beside the events, which trace viewers open) marks it as
    vtrain's (:data:`core.io.kineto.VTRAIN_TRACE_MARK`), so that ``vtrain trace`` and the
    window's trace import refuse it by name rather than as a profiler trace without
    ``ProfilerStep`` ranges."""
    events: list[dict] = []
    for stage in range(graph.num_stages):
        events.append({"name": "process_name", "ph": "M", "pid": stage, "tid": 0,
                       "args": {"name": f"stage {stage}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": stage, "tid": 0,
                       "args": {"sort_index": stage}})
        for sid in graph.lanes:  # the streams the graph uses
            sname = STREAMS[sid]
            events.append({"name": "thread_name", "ph": "M", "pid": stage, "tid": sid,
                           "args": {"name": sname}})
    # Both ends rounded to the nanosecond, the duration their difference: rounded each on its
    # own, a slice could end 1 ns after the next one of its thread starts (the solver's end and
    # next start agree to about 1e-16 s), and Perfetto drops a slice that ends after the one it
    # starts in (chrome://tracing draws it as a child of that one).
    start = np.round(schedule.start_s * 1e6, 3)
    end = np.maximum(np.round((schedule.start_s + graph.duration_s) * 1e6, 3), start)
    ts = start.tolist()
    dur = np.round(end - start, 3).tolist()
    kinds = graph.kind.tolist()
    stages = graph.stage.tolist()
    streams = _nesting_threads(start, end, stages, graph.stream.tolist())
    mbs = graph.microbatch.tolist()
    layers = graph.layer.tolist()
    n = graph.num_tasks
    ops = graph.op.tolist() if graph.op is not None else [-1] * n
    phases = graph.phase.tolist() if graph.phase is not None else [-1] * n
    virtual = _virtual_stages(graph).tolist()
    overlapped = graph.overlapped.tolist() if graph.overlapped is not None else [False] * n
    for i in range(n):
        kind = KINDS[kinds[i]]
        args: dict = {"kind": kind, "stage": stages[i]}
        if virtual[i] >= 0:
            args["virtual_stage"] = virtual[i]
        if mbs[i] >= 0:
            args["microbatch"] = mbs[i]
        if layers[i] >= 0:
            args["layer"] = layers[i]
        if phases[i] >= 0:
            args["phase"] = PHASES[phases[i]]
        if overlapped[i]:
            args["overlapped"] = True
        events.append({"name": event_name(kind, ops[i]),
                       "cat": "compute" if kinds[i] in KIND_COMPUTE else "communication",
                       "ph": "X", "ts": ts[i], "dur": dur[i], "pid": stages[i], "tid": streams[i],
                       "args": args})
    threads = {(stage, sid) for stage in range(graph.num_stages) for sid in graph.lanes}
    threads |= set(zip(stages, streams))
    for stage, tid in sorted(threads):  # a stream's further rows beside it, in stream order
        sid, row = tid % len(STREAMS), tid // len(STREAMS)
        if row:
            events.append({"name": "thread_name", "ph": "M", "pid": stage, "tid": tid,
                           "args": {"name": f"{STREAMS[sid]} ({row + 1})"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": stage, "tid": tid,
                       "args": {"sort_index": sid * 100 + row}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(VTRAIN_TRACE_MARK)}


def _nesting_threads(start: np.ndarray, end: np.ndarray, stages: list[int],
                     streams: list[int]) -> list[int]:
    """The thread id of each task: its stream's id, or, for a task that starts inside another
    of its stream and ends after it (two collectives of the comm stream that the simulator
    runs at once: the distributed optimizer's overlapped parameter all-gather beside a
    tensor-parallel collective), the id of a further row of that stream, ``len(STREAMS) * row
    + stream``, named "comm (2)" and so on. A trace viewer nests the slices of one thread by
    their times: Perfetto drops a slice that ends after the one it starts in, and
    chrome://tracing draws it as that one's child. ``start`` and ``end`` are the times as
    written (microseconds, rounded), so the rows nest in the numbers a viewer reads."""
    out = list(streams)
    order = np.lexsort((-end, start))  # by start, the longer first where two start together
    rows: dict[tuple[int, int], list[list[float]]] = {}  # (stage, stream) -> each row's open ends
    starts, ends = start.tolist(), end.tolist()
    for i in order.tolist():
        t0, t1 = starts[i], ends[i]
        stacks = rows.setdefault((stages[i], streams[i]), [[]])
        for row, stack in enumerate(stacks):
            while stack and stack[-1] <= t0:
                stack.pop()
            if not stack or t1 <= stack[-1]:
                break
        else:
            row = len(stacks)
            stacks.append([])
        stacks[row].append(t1)
        out[i] = streams[i] + len(STREAMS) * row
    return out


#: Thread id of the pipeline transfers (their stream's, as every stream's thread id).
PP_TID = STREAMS.index(KIND_NAMES["pp_p2p"])

#: Event names that differ from the op's (or, without one, the task kind's): the
#: context-parallel exchange is a ring, an all-gather or an all-to-all (plan.cp_comm_type), not
#: only the ring's send/recv (its op, ``cp_send_recv``).
_EVENT_NAMES = {"cp_p2p": "cp_exchange"}

#: What an op's name gets in the kinds that run an op other than as its own: a forward op run
#: again before the backward, the weight-gradient part of a backward op split by a zero-bubble
#: schedule (the B part keeps the op's name).
_KIND_SUFFIX = {"recompute": " (recompute)", "wgrad": " (wgrad)"}


def event_name(kind: str, op: int) -> str:
    """The trace slice name of a task of kind ``kind`` (:data:`KINDS`) running op index ``op``
    (:data:`OPS`, -1: none known): the op's name, suffixed for recomputation and weight
    gradients (``"attention_fwd (recompute)"``, ``"mlp_bwd (wgrad)"``); the kind's name without
    an op; ``"cp_exchange"`` for the context-parallel exchange."""
    if kind in _EVENT_NAMES:
        return _EVENT_NAMES[kind]
    if op < 0:
        return kind
    return OPS[op] + _KIND_SUFFIX.get(kind, "")


def _virtual_stages(graph: ExecutionGraph) -> np.ndarray:
    """Virtual stage of each task (:meth:`ExecutionGraph.virtual_stage`, vectorized): int64
    (n,), -1 for per-iteration tasks and for a graph without a ``chunk`` column."""
    if graph.chunk is None:
        return np.full(graph.num_tasks, -1, np.int64)
    chunk = graph.chunk.astype(np.int64)
    stage = graph.stage.astype(np.int64)
    has = chunk >= 0
    out = np.full(graph.num_tasks, -1, np.int64)
    if graph.chunk_stages is not None:
        out[has] = np.asarray(graph.chunk_stages, np.int64)[stage[has], chunk[has]]
    else:
        out[has] = chunk[has] * graph.num_stages + stage[has]
    return out


def write_trace(graph: ExecutionGraph, schedule: Schedule, path: str | Path) -> None:
    """Write the trace JSON to ``path`` atomically; gzip-compressed when the name ends in
    ``.gz`` (``iteration.json.gz``, as PyTorch's profiler names its traces and as Perfetto and
    ``vtrain trace import`` read them), plain JSON text otherwise.

    Raises ``OSError`` when the folder is not writable."""
    text = strict_dumps(trace_events(graph, schedule), "trace", separators=(",", ":"))
    if not str(path).lower().endswith(".gz"):
        atomic_write_text(path, text)
        return
    import gzip
    import os
    from core.util.atomic import atomic_target
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as fh:
            # mtime 0: the same iteration gives the same bytes
            fh.write(gzip.compress(text.encode("utf-8"), mtime=0))
            fh.flush()
            os.fsync(fh.fileno())
