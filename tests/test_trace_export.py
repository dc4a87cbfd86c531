"""``vtrain simulate --trace-out``: the Chrome trace-event JSON is what Perfetto imports whole.

Perfetto's JSON importer keeps the complete (``"ph": "X"``) slices of one thread only when
they nest: a slice that starts inside another and ends after it is dropped (its stat
``slice_drop_overlapping_complete_event``), and chrome://tracing draws it one row down as
a child. The check here reads the written text with :class:`decimal.Decimal` numbers, so a
slice's end is the sum ``ts + dur`` of the numbers as written, as a viewer reads them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal

import pytest

from core.cli import main
from core.cli.common import apply_sets
from core.io.session import load_any
from core.io.trace import trace_events
from core.sim.simulate import simulate
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"


def trace_problems(doc) -> list[str]:
    """What keeps a trace document from importing whole in Perfetto (empty when nothing)."""
    problems = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["no traceEvents list"]
    events = doc["traceEvents"]
    tracks: dict[tuple[int, int], list[tuple[Decimal, Decimal, str]]] = defaultdict(list)
    thread_names, process_names = set(), set()
    for i, e in enumerate(events):
        if not isinstance(e.get("name"), str) or not e["name"]:
            problems.append(f"event {i}: no name")
        if type(e.get("pid")) is not int or type(e.get("tid")) is not int:
            problems.append(f"event {i}: pid and tid must be integers")
            continue
        if e.get("ph") == "M":
            if e["name"] == "thread_name":
                thread_names.add((e["pid"], e["tid"]))
            elif e["name"] == "process_name":
                process_names.add(e["pid"])
            if not isinstance(e.get("args", {}).get("name", e["args"].get("sort_index")),
                              (str, int)):
                problems.append(f"event {i}: metadata without its value")
        elif e.get("ph") == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, Decimal) or not isinstance(dur, Decimal):
                problems.append(f"event {i}: ts and dur must be numbers")
                continue
            if ts < 0 or dur < 0:
                problems.append(f"event {i}: ts={ts} dur={dur}, negative")
            tracks[(e["pid"], e["tid"])].append((ts, ts + dur, e["name"]))
        else:
            problems.append(f"event {i}: phase {e.get('ph')!r}, neither X nor M")
    for track, slices in tracks.items():
        if track not in thread_names:
            problems.append(f"thread {track} has no thread_name")
        if track[0] not in process_names:
            problems.append(f"process {track[0]} has no process_name")
        slices.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[tuple[Decimal, str]] = []
        for start, end, name in slices:
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0]:
                problems.append(f"thread {track}: {name} [{start}, {end}] starts inside "
                                f"{open_ends[-1][1]} and ends after it ({open_ends[-1][0]})")
            open_ends.append((end, name))
    return problems


def test_the_trace_of_a_small_session_imports_whole(tmp_path):
    """GPT-3 1.3B on 8 GPUs (t=2 p=2 d=2): every slice kept. Rounding ``ts`` and ``dur`` to
    the nanosecond each on its own let 10 slices end 1 ns after the next one on their thread
    started (the simulator's end and next start agree to 1e-16 s), and Perfetto dropped them."""
    path = tmp_path / "t.json"
    assert main(["simulate", str(SMALL), "--trace-out", str(path)]) == 0
    doc = json.loads(path.read_text(), parse_float=Decimal)  # times as written
    assert trace_problems(doc) == []
    result = simulate(load_any(SMALL))
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == result.graph.num_tasks
    # each slice ends where the simulator ends it, to the nanosecond it is written in
    ends = result.schedule.start_s + result.graph.duration_s
    assert max(abs(float(e["ts"] + e["dur"]) - end * 1e6)
               for e, end in zip(slices, ends.tolist())) <= 0.0005 + 1e-9
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"} \
        == {"compute", "comm", "PP send/recv"}


@pytest.mark.parametrize("sets", [
    ["plan.schedule=interleaved", "plan.virtual_pipeline_stages=2"],
    ["plan.schedule=zb-h1"],
    ["plan.overlap_grad_reduce=true", "plan.zero_stage=1", "plan.overlap_param_gather=true"],
])
def test_traces_of_other_schedules_import_whole(sets):
    result = simulate(apply_sets(load_any(SMALL), sets))
    text = json.dumps(trace_events(result.graph, result.schedule))
    doc = json.loads(text, parse_float=Decimal)
    assert trace_problems(doc) == []


def test_the_check_finds_a_slice_that_ends_after_the_one_it_starts_in():
    """The check itself: the two slices of the 1.3B trace that Perfetto dropped, as written."""
    def x(ts, dur):
        return {"name": "embedding", "ph": "X", "ts": Decimal(ts), "dur": Decimal(dur),
                "pid": 0, "tid": 0}
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "stage 0"}},
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "compute"}}]
    bad = {"traceEvents": meta + [x("283000.000", "818.466"), x("283818.465", "500.886")]}
    assert len(trace_problems(bad)) == 1
    good = {"traceEvents": meta + [x("283000.000", "818.466"), x("283818.466", "500.885")]}
    assert trace_problems(good) == []
    assert trace_problems({"traceEvents": meta + [x("1", "-1")]}) == ["event 2: ts=1 dur=-1, negative"]


def test_collectives_that_overlap_on_one_stream_go_on_a_further_row_of_it():
    """With the distributed optimizer's overlapped parameter all-gather (zero_stage 1,
    overlap_param_gather), the simulator runs a dp_comm beside a tp_comm on the comm stream of
    stage 0, one starting inside the other and ending after it; written on one thread,
    Perfetto dropped one of them. That one goes on a row "comm (2)" (thread id
    len(STREAMS) + 1), every slice kept with its times."""
    from core.sim.graph_types import STREAMS
    result = simulate(apply_sets(load_any(SMALL), [
        "plan.overlap_grad_reduce=true", "plan.zero_stage=1", "plan.overlap_param_gather=true"]))
    doc = json.loads(json.dumps(trace_events(result.graph, result.schedule)), parse_float=Decimal)
    assert trace_problems(doc) == []
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == result.graph.num_tasks
    second = [e for e in slices if e["tid"] == len(STREAMS) + 1]
    assert second and {e["args"]["kind"] for e in second} <= {"dp_comm", "tp_comm"}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
             if e["name"] == "thread_name"}
    assert {names[(e["pid"], e["tid"])] for e in second} == {"comm (2)"}
    sort = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in doc["traceEvents"]
            if e["name"] == "thread_sort_index"}
    comm, pp = STREAMS.index("comm"), STREAMS.index("PP send/recv")
    assert sort[(0, comm)] < sort[(0, len(STREAMS) + comm)] < sort[(0, pp)]
