"""Export a solved iteration as Chrome trace-event JSON (opens in Perfetto and chrome://tracing).

Format: the Trace Event Format's JSON object form, complete events (``"ph":
"X"``) with microsecond ``ts``/``dur``; one process per pipeline stage and one
thread per stream the graph uses (:data:`core.sim.graph_types.STREAMS`: compute, comm, and the
CP exchange, EP all-to-all and PP send/recv where used), named with metadata events; the
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
    ts = np.round(schedule.start_s * 1e6, 3).tolist()
    dur = np.round(graph.duration_s * 1e6, 3).tolist()
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
