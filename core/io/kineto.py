"""Reading PyTorch profiler (Kineto) Chrome traces of one or more ranks into arrays.

``torch.profiler.profile(...).export_chrome_trace(path)`` (or a
``tensorboard_trace_handler``) writes one JSON file per rank: an object whose
``traceEvents`` list holds complete events (``"ph": "X"``, ``ts`` and ``dur`` in
microseconds on one clock per process) of the categories

* ``cpu_op`` (an ATen operator or an autograd node on a CPU thread; they nest),
* ``user_annotation`` (a ``record_function`` range: ``ProfilerStep#N``, the optimizer's
  ``Optimizer.step#AdamW.step``, a collective's ``nccl:all_reduce`` or ``gloo:all_reduce``),
* ``kernel``, ``gpu_memcpy``, ``gpu_memset`` (device work, one lane per CUDA stream; they
  carry the ``correlation`` id of the ``cuda_runtime`` launch that queued them),
* ``gpu_user_annotation`` (a ``record_function`` range seen on a stream), and others
  (``python_function``, ``cuda_runtime``, ``cuda_driver``, ...), kept as they are.

Metadata events (``"ph": "M"``: ``thread_name``, ``process_name``) name the lanes; flow and
instant events are skipped. A file may be gzipped (``.json.gz``, or any file starting with
gzip's magic bytes).

Files are read defensively: regular files only, at most ``MAX_BYTES["trace"]`` bytes before
and after gunzip (:mod:`core.util.inputs`), deep JSON nesting, ``NaN``/``Infinity``, a key
given twice in one object and non-finite times refused, and so is vtrain's own simulated trace
(:data:`VTRAIN_TRACE_MARK`); an event that breaks a rule is refused with one :class:`TraceFileError` naming the
file, the event (``traceEvents[12].dur``) and the rule, never a traceback.

Ranks: a file's rank is its ``distributedInfo.rank`` (written by torch.distributed jobs; its
``world_size`` is kept as :attr:`KinetoTrace.world_size`, the job's GPU count, which a
comparison checks against the plan's), else the number in ``rank<N>`` in its name
(``trace_rank3.json``), else its position among
the files given. Iterations are the ``ProfilerStep#N`` ranges that ``prof.step()`` records
(:func:`step_numbers`, :func:`choose_step`).

The classes of operations (GEMM, attention, ...) and their sums per rank are in
:mod:`core.io.kineto_classes`; the comparison with a prediction in
:mod:`core.accuracy.trace_compare`. (:mod:`core.io.trace` is the other direction: it *writes*
a simulated iteration as a Perfetto trace.)
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.util.inputs import (MAX_BYTES, describe_number, duplicate_key_path, json_object_pairs,
                               read_bytes)
from core.util.text import printable

__all__ = ["TraceFileError", "KinetoTrace", "read_traces", "read_trace_document", "step_numbers",
           "choose_step", "step_window", "step_events", "DEVICE_CATEGORIES", "HOST_CATEGORIES",
           "STEP_NAME", "VTRAIN_TRACE_MARK"]

#: The top-level ``otherData`` of the trace :mod:`core.io.trace` writes (``vtrain simulate
#: --trace-out``): the Trace Event Format's place for a document's metadata beside
#: ``traceEvents`` (Perfetto and chrome://tracing open a trace that has it, as they open the
#: profiler's with its own top-level ``distributedInfo`` and ``deviceProperties``). The reader
#: refuses a file that carries it by this structure, never by its text: a simulated iteration
#: is no measurement of a run.
VTRAIN_TRACE_MARK = {"generator": "vtrain", "content": "simulated iteration"}

#: Categories of device work (a GPU stream's lane).
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: Categories of host work that operation classes are read from in a trace without device work.
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
#: A profiler step's range: ``ProfilerStep#N`` (ASCII digits: ``\\d`` would take "١" or "１"
#: for 1). Its number is read only as ``prof.step()`` writes it (:func:`_step_number`).
STEP_NAME = re.compile(r"^ProfilerStep#([0-9]+)$")
#: A rank number in a file name: ``trace_rank3.json``, ``rank-12.pt.trace.json``.
_RANK_IN_NAME = re.compile(r"rank[_-]?([0-9]+)", re.IGNORECASE)
#: Most ranks a job may have (``distributedInfo.rank`` and ``world_size``, a rank in a file
#: name): the largest training clusters have about 10^5 GPUs.
MAX_RANKS = 2**24
#: Largest magnitude of an event's start, microseconds (``ts``): 2^53 us (285 years) is where
#: float64 microseconds stop being exact; profilers count from the boot or the Unix epoch.
MAX_TS_US = 2.0**53
#: Longest event, microseconds (``dur``): one day; a profiled step lasts seconds.
MAX_DUR_US = 86_400e6


class TraceFileError(ValueError):
    """A trace file cannot be read; the message names the file, the field and the rule."""


@dataclass
class KinetoTrace:
    """The complete events of one or more ranks' traces as arrays (one entry per event).

    Attributes
    ----------
    files : list of str
        The files read, in the order given; ``ranks[i]`` is the rank of ``files[i]``.
    ranks : list of int
        Rank of each file.
    rank : int32 array, shape (n,)
        Rank of each event.
    lane : int32 array, shape (n,)
        Index into :attr:`lane_names` (one lane per rank and ``(pid, tid)``: a CPU thread or a
        GPU stream).
    lane_names : list of str
        ``"rank 0 thread 14600 (python)"``, ``"rank 1 stream 7"``, ...
    lane_rank : int32 array, shape (lanes,)
        Rank of each lane.
    lane_device : bool array, shape (lanes,)
        Whether the lane holds device work (a GPU stream).
    category : int16 array, shape (n,)
        Index into :attr:`categories` (``"kernel"``, ``"cpu_op"``, ...; ``""`` for none).
    name : int32 array, shape (n,)
        Index into :attr:`names`.
    start_s, duration_s : float64 arrays, shape (n,)
        Start (on the rank's own clock) and duration of each event, seconds.
    correlation : int64 array, shape (n,)
        The launch correlation id (``args.correlation``) of device work and runtime calls;
        -1 where there is none.
    steps : dict of int to dict
        Per rank, ``{N: (start_s, end_s)}`` of its ``ProfilerStep#N`` ranges.
    world_size : int or None
        The job's number of ranks as the files' ``distributedInfo.world_size`` gives it (every
        file that gives one agrees); None when no file does.
    """

    files: list[str]
    ranks: list[int]
    rank: np.ndarray
    lane: np.ndarray
    lane_names: list[str]
    lane_rank: np.ndarray
    lane_device: np.ndarray
    category: np.ndarray
    categories: list[str]
    name: np.ndarray
    names: list[str]
    start_s: np.ndarray
    duration_s: np.ndarray
    correlation: np.ndarray
    steps: dict[int, dict[int, tuple[float, float]]] = field(default_factory=dict)
    world_size: int | None = None

    @property
    def num_events(self) -> int:
        """Number of events n."""
        return int(self.start_s.shape[0])

    @property
    def end_s(self) -> np.ndarray:
        """End of each event, seconds; float64 (n,)."""
        return self.start_s + self.duration_s

    def category_mask(self, categories) -> np.ndarray:
        """Bool (n,): the events whose category is one of ``categories``."""
        wanted = [i for i, c in enumerate(self.categories) if c in categories]
        return np.isin(self.category, wanted)

    def file_of(self, rank: int) -> str:
        """The file that holds ``rank``."""
        return self.files[self.ranks.index(rank)]


# ---------------------------------------------------------------------------- reading

def _decompress(raw: bytes, path: Path) -> bytes:
    """gunzip ``raw``, refusing output beyond ``MAX_BYTES["trace"]`` (a gzip bomb) or a broken
    stream."""
    limit = MAX_BYTES["trace"]
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise TraceFileError(f"{path}: not a valid gzip file ({exc})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise TraceFileError(f"{path}: holds more than the {limit:,} bytes a trace may have "
                             "once uncompressed")
    if not d.eof:
        raise TraceFileError(f"{path}: the gzip stream is cut short")
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_trace_document(path: str | Path) -> dict:
    """The parsed JSON document of one trace file (gunzipped if need be).

    A file that is a bare event list (the Chrome trace format's array form) is returned as
    ``{"traceEvents": [...]}``.

    Raises
    ------
    TraceFileError
        Missing, unreadable or not a regular file; larger than ``MAX_BYTES["trace"]`` (before or
        after gunzip); not gzip or JSON; nested too deeply; ``NaN`` or ``Infinity``; no
        ``traceEvents`` list; a key an object gives twice (``json`` would keep the last one
        silently: a second ``traceEvents`` list would hide the first), named by its path
        (``traceEvents``, ``traceEvents[3].args.stream``); vtrain's own simulated trace (its
        ``otherData`` is :data:`VTRAIN_TRACE_MARK`). (Times beyond a float's range, ``1e400``,
        are refused per event by :func:`read_traces`.)
    """
    path = Path(path)
    raw = read_bytes(path, TraceFileError, "trace")
    if raw[:2] == b"\x1f\x8b":
        raw = _decompress(raw, path)
    try:
        # the nesting is not measured first (core.util.inputs.json_depth): on traces of
        # hundreds of MB that costs more than the parse; json's C scanner raises
        # RecursionError on deep nesting, caught here
        # duplicate keys: the objects that repeat one are noted as they are built; the
        # document is walked for the key's path only when there is one (a walk of every event
        # of a large trace costs about what the parse does)
        twice = False

        def pairs_hook(pairs: list) -> dict:
            nonlocal twice
            obj = dict(pairs)
            if len(obj) == len(pairs):
                return obj
            twice = True
            return json_object_pairs(pairs)

        doc = json.loads(raw.decode("utf-8-sig"), parse_constant=_refuse_constant,
                         object_pairs_hook=pairs_hook)
    except UnicodeDecodeError as exc:
        raise TraceFileError(f"{path}: not a JSON trace (not UTF-8 text at byte {exc.start})") from None
    except RecursionError:
        raise TraceFileError(f"{path}: JSON nested too deeply to be a trace") from None
    except ValueError as exc:  # JSONDecodeError, NaN or Infinity, integers of 4,300+ digits
        raise TraceFileError(f"{path}: not a valid JSON trace ({exc})") from None
    if twice:
        raise TraceFileError(f"{path}: {printable(duplicate_key_path(doc) or '(top level)')}: "
                             "given twice in one object; a key is given once (which value was "
                             "meant is unknown)")
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if isinstance(doc, dict) and doc.get("otherData") == VTRAIN_TRACE_MARK:
        raise TraceFileError(f"{path}: this is vtrain's simulated trace (written by --trace-out), "
                             "not a PyTorch profiler trace of a run: it holds the prediction "
                             "itself; give the trace torch.profiler wrote of the run "
                             "(export_chrome_trace, or tensorboard_trace_handler)")
    if not isinstance(doc, dict):
        raise TraceFileError(f"{path}: (top level): must be a JSON object with a traceEvents "
                             "list (a PyTorch profiler trace)")
    if not isinstance(doc.get("traceEvents"), list):
        raise TraceFileError(f"{path}: traceEvents: must be a list of events (a PyTorch "
                             "profiler trace, torch.profiler's export_chrome_trace)")
    return doc


def _number(value: Any, low: float, high: float) -> bool:
    """A JSON number from ``low`` to ``high`` (no bool; ``1e400`` parses to infinity and is
    refused, and an integer is compared as an integer: a 400-digit one is never converted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return int(low) <= value <= int(high)
    return math.isfinite(value) and low <= value <= high


def _step_number(name: str) -> int | None:
    """``N`` of a ``ProfilerStep#N`` name as ``prof.step()`` writes it (no leading zero, at most
    18 digits), or None for another name or ``N`` written otherwise."""
    m = STEP_NAME.match(name)
    if m is None:
        return None
    digits = m.group(1)
    return int(digits) if len(digits) <= 18 and str(int(digits)) == digits else None


def _lane_id(value: Any) -> str | None:
    """A pid or tid as text (Kineto writes ints, and strings for its own lanes)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, str)):
        return str(value)
    return None


def describe_value(value: Any) -> str:
    """A value as a message shows it: JSON for short ones, a size for numbers too large."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and (
            isinstance(value, int) and abs(value) >= 10**18 or not math.isfinite(value)):
        return describe_number(value)
    text = json.dumps(value)
    return printable(text if len(text) <= 40 else text[:40] + "...")


def _distributed_info(doc: dict, path: Path) -> dict:
    info = doc.get("distributedInfo", {})
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise TraceFileError(f"{path}: distributedInfo: must be a JSON object (torch.distributed's "
                             "rank and world_size)")
    return info


def _file_rank(doc: dict, path: Path, position: int) -> int:
    info = _distributed_info(doc, path)
    if "rank" in info:
        rank = info["rank"]
        if not _number(rank, 0, MAX_RANKS - 1) or not isinstance(rank, int):
            raise TraceFileError(f"{path}: distributedInfo.rank: {describe_value(rank)} must be a "
                                 f"whole number from 0 to {MAX_RANKS - 1:,}")
        return rank
    found = _RANK_IN_NAME.findall(path.name)
    if found and not len(found[-1]) <= 8 or found and int(found[-1]) >= MAX_RANKS:
        raise TraceFileError(f"{path}: the rank in the file's name, {found[-1]}, is beyond "
                             f"{MAX_RANKS - 1:,}: give distributedInfo.rank or rename the file")
    return int(found[-1]) if found else position


def _file_world_size(doc: dict, path: Path) -> int | None:
    """The file's ``distributedInfo.world_size`` (a whole number >= 1), None when absent."""
    info = _distributed_info(doc, path)
    if info.get("world_size") is None:  # absent or null: not given
        return None
    size = info["world_size"]
    if isinstance(size, float) and size.is_integer() and abs(size) <= MAX_RANKS:
        size = int(size)
    if not isinstance(size, int) or not _number(size, 1, MAX_RANKS):
        raise TraceFileError(f"{path}: distributedInfo.world_size: {describe_value(size)} must "
                             f"be a whole number from 1 to {MAX_RANKS:,}")
    return size


class _Builder:
    """Columns of events as lists, while files are read."""

    def __init__(self):
        self.cols: dict[str, list] = {k: [] for k in ("rank", "lane", "category", "name", "start",
                                                      "dur", "corr")}
        self.lanes: dict[tuple[int, str, str], int] = {}
        self.lane_names: list[str] = []
        self.lane_rank: list[int] = []
        self.lane_device: list[bool] = []
        self.categories: dict[str, int] = {}
        self.names: dict[str, int] = {}

    def lane(self, rank: int, pid: str, tid: str, device: bool, labels: dict) -> int:
        key = (rank, pid, tid)
        i = self.lanes.get(key)
        if i is None:
            i = self.lanes[key] = len(self.lane_names)
            label = labels.get((pid, tid))
            what = (f"stream {tid}" if tid.isdigit() else tid) if device else f"thread {tid}"
            self.lane_names.append(f"rank {rank} {what}" + (f" ({label})" if label else "")
                                   + (f" pid {pid}" if device else ""))
            self.lane_rank.append(rank)
            self.lane_device.append(device)
        elif device:
            self.lane_device[i] = True
        return i

    def add_file(self, doc: dict, path: Path, rank: int) -> dict[int, tuple[float, float]]:
        events = doc["traceEvents"]
        labels: dict[tuple[str, str], str] = {}
        for ev in events:
            if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "thread_name":
                args = ev.get("args")
                pid, tid = _lane_id(ev.get("pid")), _lane_id(ev.get("tid"))
                if isinstance(args, dict) and isinstance(args.get("name"), str) and pid and tid:
                    labels[(pid, tid)] = re.sub(r"^thread \d+ \((.*)\)$", r"\1", args["name"])
        steps: dict[int, tuple[float, float]] = {}
        c = self.cols
        def fail(i: int, field: str, rule: str) -> TraceFileError:
            return TraceFileError(f"{path}: traceEvents[{i}]{field}: {rule}")

        for i, ev in enumerate(events):
            if not isinstance(ev, dict):
                raise fail(i, "", "must be a JSON object (an event)")
            if ev.get("ph") != "X":
                continue  # metadata, flow, instant and counter events
            name, cat = ev.get("name"), ev.get("cat", "")
            if not isinstance(name, str):
                raise fail(i, ".name", "must be text (the operation's name)")
            if not isinstance(cat, str):
                raise fail(i, ".cat", "must be text (the event's category)")
            ts, dur = ev.get("ts"), ev.get("dur", 0)
            if not _number(ts, -MAX_TS_US, MAX_TS_US):
                raise fail(i, ".ts", f"{describe_value(ts)} must be a number from -2^53 to 2^53 "
                                     "(the start, microseconds)")
            if not _number(dur, 0, MAX_DUR_US):
                raise fail(i, ".dur", f"{describe_value(dur)} must be a number from 0 to "
                                      f"{MAX_DUR_US:,.0f} (the duration, microseconds: a day)")
            pid, tid = _lane_id(ev.get("pid")), _lane_id(ev.get("tid"))
            if pid is None or tid is None:
                raise fail(i, ".pid" if pid is None else ".tid",
                           "must be a whole number or text (the process or thread)")
            args = ev.get("args")
            corr = args.get("correlation", -1) if isinstance(args, dict) else -1
            if not isinstance(corr, int) or not _number(corr, -2**63, 2**63 - 1):
                raise fail(i, ".args.correlation", f"{describe_value(corr)} must be a whole "
                           "number of at most 64 bits (the launch it belongs to)")
            start, length = ts * 1e-6, dur * 1e-6
            if STEP_NAME.match(name) and cat in HOST_CATEGORIES:
                n = _step_number(name)
                if n is None:
                    raise fail(i, ".name", f"{printable(name[:40])}: a step's number is written "
                                           "as prof.step() writes it (no leading zero, at most "
                                           "18 digits)")
                if n in steps:
                    raise fail(i, ".name", f"{name} appears twice in one trace")
                steps[n] = (start, start + length)
            device = cat in DEVICE_CATEGORIES or cat == "gpu_user_annotation"
            c["rank"].append(rank)
            c["lane"].append(self.lane(rank, pid, tid, device, labels))
            c["category"].append(self.categories.setdefault(cat, len(self.categories)))
            c["name"].append(self.names.setdefault(name, len(self.names)))
            c["start"].append(start)
            c["dur"].append(length)
            c["corr"].append(corr)
        return steps

    def build(self, files: list[str], ranks: list[int], steps: dict,
              world_size: int | None = None) -> KinetoTrace:
        c = self.cols
        return KinetoTrace(
            files=files, ranks=ranks, rank=np.array(c["rank"], np.int32),
            lane=np.array(c["lane"], np.int32), lane_names=self.lane_names,
            lane_rank=np.array(self.lane_rank, np.int32),
            lane_device=np.array(self.lane_device, bool),
            category=np.array(c["category"], np.int16), categories=list(self.categories),
            name=np.array(c["name"], np.int32), names=list(self.names),
            start_s=np.array(c["start"], np.float64), duration_s=np.array(c["dur"], np.float64),
            correlation=np.array(c["corr"], np.int64), steps=steps, world_size=world_size)


def read_traces(paths) -> KinetoTrace:
    """Read the traces of one or more ranks (one file per rank) into one :class:`KinetoTrace`.

    Parameters
    ----------
    paths : sequence of str or Path
        Chrome trace JSON files of the PyTorch profiler, optionally gzipped.

    Raises
    ------
    TraceFileError
        A file that cannot be read (:func:`read_trace_document`), an event that breaks a rule
        (named ``FILE: traceEvents[i].FIELD``), two files of one rank, a file without
        complete events, files whose ``distributedInfo.world_size`` differ, or a rank at or
        beyond its file's world size.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise TraceFileError("no trace file given")
    b = _Builder()
    files: list[str] = []
    ranks: list[int] = []
    steps: dict[int, dict[int, tuple[float, float]]] = {}
    world: tuple[int, Path] | None = None  # the first world size given, and its file
    for position, path in enumerate(paths):
        doc = read_trace_document(path)
        rank = _file_rank(doc, path, position)
        size = _file_world_size(doc, path)
        if size is not None:
            if world is not None and size != world[0]:
                raise TraceFileError(f"{path}: distributedInfo.world_size: {size}, where "
                                     f"{world[1]} says {world[0]}: give the traces of one job")
            if rank >= size:
                raise TraceFileError(f"{path}: distributedInfo.rank: {rank} is not below its "
                                     f"world_size {size}")
            world = world or (size, path)
        if rank in ranks:
            raise TraceFileError(f"{path}: is rank {rank}, as {files[ranks.index(rank)]} is: give "
                                 "one file per rank")
        before = len(b.cols["start"])
        steps[rank] = b.add_file(doc, path, rank)
        if len(b.cols["start"]) == before:
            raise TraceFileError(f"{path}: traceEvents: holds no complete event (\"ph\": \"X\"): "
                                 "not a profiler trace of any work")
        files.append(str(path))
        ranks.append(rank)
    return b.build(files, ranks, steps, None if world is None else world[0])


# ---------------------------------------------------------------------------- iterations

def step_numbers(trace: KinetoTrace) -> list[int]:
    """The step numbers ``N`` of ``ProfilerStep#N`` that every rank's trace holds, ascending."""
    common: set[int] | None = None
    for rank in trace.ranks:
        have = set(trace.steps.get(rank, {}))
        common = have if common is None else common & have
    return sorted(common or ())


def step_window(trace: KinetoTrace, rank: int, step: int) -> tuple[float, float]:
    """``(start_s, end_s)`` of ``ProfilerStep#step`` on ``rank`` (its host range)."""
    return trace.steps[rank][step]


def step_events(trace: KinetoTrace, rank: int, step: int) -> np.ndarray:
    """Indices of the events of ``rank`` that belong to ``step``, the step's range excluded.

    Host events belong to the step they start in. Device work belongs to the step of the
    launch that queued it (the host event with the same ``correlation``, a ``cuda_runtime``
    call); device work without a correlation belongs to the step it starts in. Returns
    int64 (k,), in the order of the trace.
    """
    t0, t1 = trace.steps[rank][step]
    on_rank = trace.rank == rank
    device = trace.lane_device[trace.lane]
    inside = (trace.start_s >= t0) & (trace.start_s < t1)
    host = on_rank & ~device & inside
    step_name = trace.names.index(f"ProfilerStep#{step}")
    host &= trace.name != step_name
    dev = on_rank & device
    linked = dev & (trace.correlation >= 0)
    if linked.any():
        launched = trace.correlation[host & (trace.correlation >= 0)]
        dev_in = linked & np.isin(trace.correlation, launched)
        dev_in |= dev & (trace.correlation < 0) & inside
    else:
        dev_in = dev & inside
    return np.flatnonzero(host | dev_in)


def _holds_work(trace: KinetoTrace, rank: int, step: int) -> bool:
    idx = step_events(trace, rank, step)
    work = trace.category_mask(DEVICE_CATEGORIES | {"cpu_op"})
    return bool(work[idx].any())


def choose_step(trace: KinetoTrace, step: int | None = None) -> int:
    """The iteration to measure: ``step`` if given, else the last complete one.

    A step is complete when every rank's trace holds its ``ProfilerStep#N`` range and work
    (an operator or device work) in it: the range a profiler opens at its last ``prof.step()``
    and closes when it stops holds none.

    Raises
    ------
    TraceFileError
        No ``ProfilerStep#N`` range common to all ranks, or ``step`` not among them, or
        ``step`` holding no work on some rank (the message lists the steps that do).
    """
    numbers = step_numbers(trace)
    if not numbers:
        where = trace.files[0] if len(trace.files) == 1 else ", ".join(trace.files)
        raise TraceFileError(f"{where}: traceEvents: no ProfilerStep#N range common to every "
                             "rank: record the trace with a profiler schedule or prof.step() "
                             "after each iteration")
    if step is not None:
        if step not in numbers:
            raise TraceFileError(f"--step {step}: not a step of every trace (there are "
                                 f"{', '.join(map(str, numbers))})")
    complete = [n for n in numbers if all(_holds_work(trace, r, n) for r in trace.ranks)]
    if step is not None:
        if step not in complete:  # the range of the profiler's last prof.step(), say
            empty = [r for r in trace.ranks if not _holds_work(trace, r, step)]
            raise TraceFileError(
                f"--step {step}: ProfilerStep#{step} holds no operator or device work on rank"
                f"{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))}: nothing to "
                "compare (steps with work: "
                f"{', '.join(map(str, complete)) if complete else 'none'})")
        return step
    if not complete:
        raise TraceFileError(f"{trace.files[0]}: traceEvents: no ProfilerStep#N range holds "
                             "work on every rank")
    return complete[-1]
