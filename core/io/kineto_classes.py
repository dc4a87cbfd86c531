"""Operation classes of a profiler trace's events and their measured sums per rank.

Which event is which class (GEMM, attention, norm and elementwise, optimizer, each
collective, other) is data, not code: ``resources/trace_classes.json`` (documented in
that file and in docs/trace_import.md) holds rules of event categories and name patterns,
the first match deciding. :func:`measure_step` sums one iteration per rank:

* where a rank's trace holds device work (kernels, copies, sets), the classes are summed over
  its device events (each stream's kernels run one at a time: the sum over streams is the
  device time of the class); host events are then not counted;
* otherwise (a CPU run) over its host events (``cpu_op``, ``user_annotation``), which nest:
  an event counts for its class unless an enclosing event on its thread already counts
  ("outermost classified": ``aten::linear`` counts as GEMM, the ``aten::addmm`` inside it not
  again); an event without a class is transparent;
* ``other`` is, per lane (thread or stream), the time it is busy (the union of its work
  events and counted ranges) less the time of the other classes on it, summed over lanes;
* ``idle`` is the time in the iteration's window during which none of the rank's lanes is
  busy (the bubble, when the rank waits for another stage); :attr:`StepMeasurement.lane_idle_s`
  gives each lane's own idle time;
* ``iteration`` is the window's length: on a GPU, from the start of the step's first device
  work to the end of its last (the host's ``ProfilerStep#N`` range runs ahead of the device
  by the launch queue, and the device finishes the previous step's work in its first part);
  without device work, the ``ProfilerStep#N`` range, widened to the end of any of the step's
  work that outlasts it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.io.kineto import (DEVICE_CATEGORIES, HOST_CATEGORIES, KinetoTrace, TraceFileError,
                            step_events, step_window)
from core.util.inputs import read_json_file

__all__ = ["CLASSES_FILE", "ClassTable", "load_class_table", "StepMeasurement", "measure_step",
           "union_length", "EXTRA_ROWS", "attributed", "ENCLOSE_SLACK_S"]

#: The shipped class table.
CLASSES_FILE = Path(__file__).resolve().parents[2] / "resources" / "trace_classes.json"
#: Rows of a measurement besides the table's classes: idle time, the iteration's length.
EXTRA_ROWS = ("idle", "iteration")


@dataclass(frozen=True)
class ClassTable:
    """Rules that give trace events an operation class.

    Attributes
    ----------
    classes : tuple of str
        Class ids in table order (``"gemm"``, ..., ``"other"``); ``titles[i]`` names ``classes[i]``.
    titles : tuple of str
    rules : tuple of (int, frozenset of str, re.Pattern)
        Per rule: class index, categories, and the rule's name patterns as one regular expression
        (lower-cased globs).
    source : str
        The file the table was read from.
    """

    classes: tuple[str, ...]
    titles: tuple[str, ...]
    rules: tuple[tuple[int, frozenset, re.Pattern], ...]
    source: str

    def classify(self, name: str, category: str) -> int:
        """Class index of an event of ``name`` and ``category``, or -1 when no rule matches."""
        low = name.lower()
        for cls, cats, pattern in self.rules:
            if category in cats and pattern.match(low):
                return cls
        return -1


def _table_error(path, where: str, rule: str) -> TraceFileError:
    return TraceFileError(f"{path}: {where}: {rule}")


def _text_list(value, path, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(x, str) and x for x in value):
        raise _table_error(path, where, "must be a list of one or more texts")
    return value


def load_class_table(path: str | Path | None = None) -> ClassTable:
    """Read a class table (default: the shipped ``resources/trace_classes.json``).

    Raises
    ------
    TraceFileError
        The file cannot be read, or a field breaks its rule (named ``FILE: rules[3].names``):
        ``classes`` an object of id -> title holding ``other``, each rule a ``class`` among
        them with non-empty ``categories`` and ``names`` lists of text.
    """
    path = str(CLASSES_FILE if path is None else Path(path))
    doc = read_json_file(path, TraceFileError)
    if not isinstance(doc, dict) or doc.get("format") != "vtrain-trace-classes":
        raise _table_error(path, "format", 'must be "vtrain-trace-classes"')
    if doc.get("version") != 1:
        raise _table_error(path, "version", "must be 1 (the version this build reads)")
    classes = doc.get("classes")
    if (not isinstance(classes, dict) or "other" not in classes
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in classes.items())
            or set(classes) & set(EXTRA_ROWS)):
        raise _table_error(path, "classes", "must be an object of class id -> title holding "
                                            "\"other\" (and not \"idle\" or \"iteration\")")
    ids = tuple(classes)
    rules = doc.get("rules")
    if not isinstance(rules, list):
        raise _table_error(path, "rules", "must be a list of rules")
    out = []
    for i, rule in enumerate(rules):
        where = f"rules[{i}]"
        if not isinstance(rule, dict):
            raise _table_error(path, where, "must be an object (class, categories, names)")
        if rule.get("class") not in classes:
            raise _table_error(path, f"{where}.class", f"{rule.get('class')!r} is not one of "
                                                       + ", ".join(ids))
        cats = _text_list(rule.get("categories"), path, f"{where}.categories")
        names = _text_list(rule.get("names"), path, f"{where}.names")
        pattern = re.compile("|".join(f"(?:{fnmatch.translate(n.lower())})" for n in names), re.S)
        out.append((ids.index(rule["class"]), frozenset(cats), pattern))
    return ClassTable(classes=ids, titles=tuple(classes[k] for k in ids), rules=tuple(out),
                      source=path)


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    """Length of the union of the intervals ``[start[i], end[i])``, in their unit.

    Overlapping and nested intervals count once; an empty input gives 0.
    """
    start, end = np.asarray(start, np.float64), np.asarray(end, np.float64)
    if not start.size:
        return 0.0
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = np.maximum.accumulate(end[order])
    new = np.empty(s.size, bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, s.size - 1]
    return float((e[last] - s[first]).sum())


#: Slack of "ends no later" when an event is tested for enclosing another, seconds: the
#: microsecond timestamps of a trace, turned into seconds on a clock of days, round at about 1 ns.
ENCLOSE_SLACK_S = 1e-8


def attributed(start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Which events of one lane count for their class: bool (k,).

    An event counts when it has a class (``cls >= 0``) and no enclosing event that counts: one
    that starts no later and ends no later (:data:`ENCLOSE_SLACK_S`) on the same lane; of two
    equal intervals the first in the trace encloses the second. Two events that only overlap
    (one starts inside the other and ends after it) enclose neither. Events are walked in start
    order, longest first at equal starts, with a stack of the open ones.
    """
    k = start.size
    out = np.zeros(k, bool)
    order = np.lexsort((-(end - start), start))
    stack: list[tuple[float, bool]] = []  # (end, counts) of the events open at this start
    for i in order.tolist():
        s, e = start[i], end[i]
        while stack and stack[-1][0] <= s:
            stack.pop()
        if cls[i] < 0:
            stack.append((e, False))
            continue
        mine = not any(c and e <= e2 + ENCLOSE_SLACK_S for e2, c in stack)
        out[i] = mine
        stack.append((e, mine))
    return out


@dataclass
class StepMeasurement:
    """One iteration's measured time per operation class and rank.

    Attributes
    ----------
    step : int
        The ``ProfilerStep#N`` measured.
    ranks : list of int
        The ranks, in the order of :attr:`seconds`' rows.
    rows : tuple of str
        Columns of :attr:`seconds`: the table's classes, then ``"idle"`` and ``"iteration"``.
    titles : tuple of str
        What each row is called in a table.
    seconds : float64 array, shape (ranks, rows)
        Measured seconds per rank and row.
    source : list of str
        Per rank ``"device"`` (summed over its GPU streams) or ``"host"`` (a trace without
        device work, summed over its threads).
    window_s : float64 array, shape (ranks, 2)
        Start and end of each rank's iteration window, on the rank's clock, seconds.
    events : list of int64 arrays
        Per rank, the indices of the trace's events measured (on the source lanes).
    event_class : int16 array, shape (n,)
        Class index of each of the trace's events that counts for its class, else -1.
    lane_idle_s : dict of int to float
        Per source lane (index into ``KinetoTrace.lane_names``), the window's time it is idle.
    world_size : int or None
        The job's GPU count as the traces record it (:attr:`KinetoTrace.world_size`), None when
        they do not.
    """

    step: int
    ranks: list[int]
    rows: tuple[str, ...]
    titles: tuple[str, ...]
    seconds: np.ndarray
    source: list[str]
    window_s: np.ndarray
    events: list[np.ndarray]
    event_class: np.ndarray
    lane_idle_s: dict[int, float]
    world_size: int | None = None

    def column(self, row: str) -> np.ndarray:
        """Seconds of ``row`` per rank; float64 (ranks,)."""
        return self.seconds[:, self.rows.index(row)]


def _class_of_events(trace: KinetoTrace, table: ClassTable, idx: np.ndarray) -> np.ndarray:
    """Class index (or -1) of the events ``idx``, one lookup per distinct (name, category)."""
    pairs = trace.name[idx].astype(np.int64) * len(trace.categories) + trace.category[idx]
    uniq, inv = np.unique(pairs, return_inverse=True)
    ncat = len(trace.categories)
    cls = np.array([table.classify(trace.names[int(u) // ncat], trace.categories[int(u) % ncat])
                    for u in uniq.tolist()], np.int16)
    return cls[inv.reshape(-1)] if uniq.size else np.zeros(0, np.int16)


def measure_step(trace: KinetoTrace, step: int, table: ClassTable | None = None
                 ) -> StepMeasurement:
    """Measure ``step`` of every rank of ``trace`` per operation class (see the module's rules).

    Parameters
    ----------
    trace : KinetoTrace
    step : int
        A step every rank holds (:func:`core.io.kineto.choose_step`).
    table : ClassTable, optional
        Default: the shipped table.

    Returns
    -------
    StepMeasurement
    """
    table = table or load_class_table()
    rows = table.classes + EXTRA_ROWS
    titles = table.titles + ("idle (no lane busy)", "iteration")
    other = table.classes.index("other")
    n_cls = len(table.classes)
    seconds = np.zeros((len(trace.ranks), len(rows)))
    window = np.zeros((len(trace.ranks), 2))
    event_class = np.full(trace.num_events, -1, np.int16)
    sources, chosen = [], []
    lane_idle: dict[int, float] = {}
    device_cat = trace.category_mask(DEVICE_CATEGORIES)
    host_cat = trace.category_mask(HOST_CATEGORIES)
    work_cat = trace.category_mask(DEVICE_CATEGORIES | {"cpu_op"})
    end = trace.end_s
    for r, rank in enumerate(trace.ranks):
        idx = step_events(trace, rank, step)
        on_device = device_cat[idx]
        source = "device" if on_device.any() else "host"
        idx = idx[on_device] if source == "device" else idx[host_cat[idx]]
        cls = _class_of_events(trace, table, idx)
        t0, t1 = step_window(trace, rank, step)
        if idx.size and source == "device":  # the span of the step's device work
            t0, t1 = float(trace.start_s[idx].min()), float(end[idx].max())
        elif idx.size:
            t0, t1 = min(t0, float(trace.start_s[idx].min())), max(t1, float(end[idx].max()))
        counts = np.zeros(idx.size, bool)
        busy_total, classed = 0.0, np.zeros(n_cls)
        lanes = trace.lane[idx]
        busy_parts = []
        for lane in np.unique(lanes).tolist():
            on = lanes == lane
            li = idx[on]
            mine = attributed(trace.start_s[li], end[li], cls[on])
            counts[on] = mine
            busy_mask = work_cat[li] | mine
            busy = union_length(trace.start_s[li][busy_mask], end[li][busy_mask])
            busy_parts.append(li[busy_mask])
            sums = np.bincount(cls[on][mine], trace.duration_s[li][mine], minlength=n_cls)
            classed += sums
            busy_total += max(0.0, busy - (sums.sum() - sums[other]))
            lane_idle[lane] = max(0.0, (t1 - t0) - busy)
        seconds[r, :n_cls] = classed
        seconds[r, other] = busy_total
        all_busy = np.concatenate(busy_parts) if busy_parts else np.zeros(0, np.int64)
        seconds[r, n_cls] = max(0.0, (t1 - t0) - union_length(trace.start_s[all_busy], end[all_busy]))
        seconds[r, n_cls + 1] = t1 - t0
        window[r] = (t0, t1)
        event_class[idx[counts]] = cls[counts]
        sources.append(source)
        chosen.append(idx)
    return StepMeasurement(step=step, ranks=list(trace.ranks), rows=rows, titles=titles,
                           seconds=seconds, source=sources, window_s=window, events=chosen,
                           event_class=event_class, lane_idle_s=lane_idle,
                           world_size=trace.world_size)
