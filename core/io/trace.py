"""Export a solved iteration as Chrome trace-event JSON (opens in Perfetto and chrome://tracing).

Format: the Trace Event Format's JSON object form, complete events (``"ph":
"X"``) with microsecond ``ts``/``dur``; one process per pipeline stage and one
thread per stream the graph uses (:data:`core.sim.graph_types.STREAMS`: compute, comm, and the
CP exchange, EP all-to-all and PP send/recv where used), named with metadata events; times are
written to the nanosecond, a slice's start and end each rounded (its duration their
difference), so the slices of one thread nest as the simulator's do; the
pipeline transfers (counted at the sending stage) on a thread of their own: the interleaved
schedule's overlapped sends run beside the tensor-parallel collectives of the comm stream,
and a trace viewer nests the slices of one thread that overlap.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.sim.graph_types import KINDS, STREAMS, ExecutionGraph, Schedule
from core.sim.labels import KIND_NAMES
from core.util.inputs import strict_dumps
from core.io.session import atomic_write_text

__all__ = ["trace_events", "write_trace"]


def trace_events(graph: ExecutionGraph, schedule: Schedule) -> dict:
    """The trace document as a dict: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``."""
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
    streams = graph.stream.tolist()
    mbs = graph.microbatch.tolist()
    layers = graph.layer.tolist()
    for i in range(graph.num_tasks):
        args = {}
        if mbs[i] >= 0:
            args["microbatch"] = mbs[i]
        if layers[i] >= 0:
            args["layer"] = layers[i]
        name = _EVENT_NAMES.get(KINDS[kinds[i]], KINDS[kinds[i]])
        events.append({"name": name, "cat": name, "ph": "X", "ts": ts[i],
                       "dur": dur[i], "pid": stages[i], "tid": streams[i], "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


#: Thread id of the pipeline transfers (their stream's, as every stream's thread id).
PP_TID = STREAMS.index(KIND_NAMES["pp_p2p"])

#: Event names that differ from the task kind's: the context-parallel exchange is a ring, an
#: all-gather or an all-to-all (plan.cp_comm_type), not only the ring's p2p.
_EVENT_NAMES = {"cp_p2p": "cp_exchange"}


def write_trace(graph: ExecutionGraph, schedule: Schedule, path: str | Path) -> None:
    """Write the trace JSON to ``path`` atomically."""
    atomic_write_text(path, strict_dumps(trace_events(graph, schedule), "trace",
                                         separators=(",", ":")))
