"""Measured PyTorch profiler traces against the prediction (issue 31, "A measured trace on the
timeline"): core/io/kineto.py, core/io/kineto_classes.py, core/accuracy/trace_compare.py and
``vtrain trace import``.

The traces under tests/data/traces/ were recorded with torch's profiler on a CPU
(scripts/make_test_traces.py); these tests need no torch. Sums are checked against sums the
tests compute from the JSON files themselves, with a first-match glob classifier and an
O(n^2) enclosure check of their own.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.accuracy.trace_compare import (NO_FIGURE, compare, measured_lanes, predicted_by_stage,
                                         rank_stage)
from core.cli import main
from core.cli.common import apply_sets
from core.io.kineto import TraceFileError, choose_step, read_traces, step_numbers
from core.io.kineto_classes import CLASSES_FILE, load_class_table, measure_step, union_length
from core.io.session import load_any
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.sim.graph_types import KINDS, OPS
from core.sim.simulate import simulate
from tests.conftest import EXAMPLES, ROOT

TRACES = ROOT / "tests" / "data" / "traces"
ONE = TRACES / "cpu_1rank.json"
P2 = [TRACES / "cpu_p2_rank0.json.gz", TRACES / "cpu_p2_rank1.json.gz"]
SESSION = EXAMPLES / "gpt3_1.3b_single_node.json"
P2_SETS = ["plan.tensor_parallel=1", "plan.data_parallel=1", "plan.global_batch_size=8"]


def _doc(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _rules():
    table = json.loads(CLASSES_FILE.read_text())
    return list(table["classes"]), table["rules"]


def _independent_sums(path: Path, step: int) -> dict[str, float]:
    """Per class, the summed durations (seconds) of the host events of ``step`` that have a
    class and lie in no other classified event of their thread."""
    classes, rules = _rules()
    events = [e for e in _doc(path)["traceEvents"] if e.get("ph") == "X"]
    win = next(e for e in events if e["name"] == f"ProfilerStep#{step}")
    t0, t1 = win["ts"], win["ts"] + win["dur"]
    mine = []
    for e in events:
        if e.get("cat") not in ("cpu_op", "user_annotation") or e is win:
            continue
        if not t0 <= e["ts"] < t1:
            continue
        cls = next((r["class"] for r in rules if e["cat"] in r["categories"] and any(
            fnmatch.fnmatchcase(e["name"].lower(), n.lower()) for n in r["names"])), None)
        if cls is not None:
            mine.append((e["pid"], e["tid"], e["ts"], e["ts"] + e["dur"], cls, e["dur"]))
    sums = dict.fromkeys(classes, 0.0)
    for i, (pid, tid, s, end, cls, dur) in enumerate(mine):
        enclosed = any(j != i and p == pid and t == tid and s2 <= s and end <= e2
                       and (s2, -e2, j) < (s, -end, i)
                       for j, (p, t, s2, e2, _, _) in enumerate(mine))
        if not enclosed:
            sums[cls] += dur * 1e-6
    return sums


@pytest.fixture(scope="module")
def one():
    return read_traces([ONE])


@pytest.fixture(scope="module")
def p2():
    return read_traces(P2)


@pytest.fixture(scope="module")
def p2_result():
    return simulate(apply_sets(load_any(SESSION), P2_SETS))


def test_per_class_sums_equal_the_classified_events_durations(one, p2):
    for trace, paths in ((one, [ONE]), (p2, P2)):
        step = choose_step(trace)
        m = measure_step(trace, step)
        for i, path in enumerate(paths):
            want = _independent_sums(path, step)
            for cls, value in want.items():
                if cls != "other":
                    assert m.column(cls)[i] == pytest.approx(value, rel=1e-9, abs=1e-12), cls
    m1 = measure_step(one, 2)
    for cls in ("gemm", "attention", "norm_elementwise", "optimizer", "all_reduce"):
        assert m1.column(cls)[0] > 0, cls
    assert m1.column("send_recv")[0] == 0
    m2 = measure_step(p2, 2)
    assert (m2.column("send_recv") > 0).all() and (m2.column("all_reduce") == 0).all()
    assert m2.source == ["host", "host"]


def test_other_idle_and_iteration_add_up(one):
    m = measure_step(one, 2)
    t0, t1 = one.steps[0][2]
    assert m.column("iteration")[0] == pytest.approx(t1 - t0, rel=1e-12)
    classes = [c for c in m.rows if c not in ("idle", "iteration")]
    busy = sum(m.column(c)[0] for c in classes)
    # busy time of all lanes together: at most the sum over lanes, at least the window less idle
    assert m.column("idle")[0] + busy >= m.column("iteration")[0] - 1e-9
    assert 0 < m.column("idle")[0] < m.column("iteration")[0]
    assert all(0 <= v <= t1 - t0 + 1e-9 for v in m.lane_idle_s.values())


def test_one_thread_per_rank_splits_its_iteration(p2):
    """Each p2 rank works on one thread: its classes, other and idle fill the iteration (to the
    few microseconds where a posted receive and its wait overlap and both count)."""
    m = measure_step(p2, 2)
    for i in range(2):
        parts = sum(m.column(c)[i] for c in m.rows if c != "iteration")
        assert parts == pytest.approx(m.column("iteration")[i], rel=0.01)


def test_enclosing_and_overlapping_events():
    from core.io.kineto_classes import attributed
    start = np.array([0.0, 2.0, 5.0, 20.0, 21.0, 20.0])
    end = np.array([10.0, 8.0, 15.0, 30.0, 22.0, 30.0])
    cls = np.array([0, 1, 2, -1, 3, 4], np.int16)
    # [2, 8) lies in [0, 10); [5, 15) only overlaps it; the first [20, 30) has no class (it is
    # transparent), the second counts and holds [21, 22)
    assert attributed(start, end, cls).tolist() == [True, False, True, False, False, True]
    assert attributed(start[:5], end[:5], cls[:5]).tolist() == [True, False, True, False, True]


def test_union_length_counts_overlaps_once():
    assert union_length(np.array([0.0, 1.0, 1.5, 5.0]), np.array([2.0, 1.2, 3.0, 6.0])) == 4.0
    assert union_length(np.zeros(0), np.zeros(0)) == 0.0


def test_step_selection(one, p2):
    assert step_numbers(one) == [1, 2, 3] and step_numbers(p2) == [1, 2, 3]
    assert choose_step(one) == 2  # ProfilerStep#3 is opened by the last prof.step(): no work
    assert choose_step(one, 1) == 1
    m = measure_step(one, 1)
    t0, t1 = one.steps[0][1]
    assert m.column("iteration")[0] == pytest.approx(t1 - t0, rel=1e-12)
    want = _independent_sums(ONE, 1)
    assert m.column("gemm")[0] == pytest.approx(want["gemm"], rel=1e-9)
    with pytest.raises(TraceFileError, match="--step 9"):
        choose_step(one, 9)
    # the empty step asked for by number is refused, not compared as a 0 ms iteration
    with pytest.raises(TraceFileError) as exc:
        choose_step(one, 3)
    assert str(exc.value) == ("--step 3: ProfilerStep#3 holds no operator or device work on "
                              "rank 0: nothing to compare (steps with work: 1, 2)")


def test_gzip_and_plain_read_alike(one, tmp_path):
    gz = tmp_path / "cpu_1rank.json.gz"
    gz.write_bytes(gzip.compress(ONE.read_bytes()))
    other = read_traces([gz])
    assert np.array_equal(other.start_s, one.start_s)
    assert np.array_equal(measure_step(other, 2).seconds, measure_step(one, 2).seconds)


def test_ranks_from_distributed_info_then_file_names(tmp_path):
    swapped = [tmp_path / "a_rank1.json.gz", tmp_path / "b_rank0.json.gz"]
    shutil.copy(P2[0], swapped[0])
    shutil.copy(P2[1], swapped[1])
    assert read_traces(swapped).ranks == [0, 1]  # distributedInfo.rank wins over the name
    doc = _doc(ONE)
    doc.pop("distributedInfo", None)
    named = tmp_path / "host_rank5.json"
    named.write_text(json.dumps(doc))
    plain = tmp_path / "host.json"
    plain.write_text(json.dumps(doc))
    assert read_traces([named]).ranks == [5]
    assert read_traces([plain]).ranks == [0]
    with pytest.raises(TraceFileError, match="rank 0"):
        read_traces([plain, ONE])  # the first by its position, the second by distributedInfo


def test_traces_of_another_jobs_size_are_refused_by_name(p2, p2_result, tmp_path, capsys):
    """The p2 traces record world_size 2: against the shipped example's 8-GPU plan their ranks
    would land on the wrong stages, so the comparison (and the trace fit) refuse, naming both
    counts; the CLI exits 2 naming the session file. The 2-GPU plan compares (0)."""
    assert p2.world_size == 2 and measure_step(p2, 2).world_size == 2
    wrong = simulate(load_any(SESSION))
    with pytest.raises(ConfigError, match=r"plan.num_gpus.*job of 2 ranks.*runs on 8 GPUs"):
        compare(measure_step(p2, 2), wrong)
    files = [str(f) for f in P2]
    assert main(["trace", "import", *files, "--session", str(SESSION)]) == 2
    err = capsys.readouterr().err
    assert str(SESSION) in err and "distributedInfo.world_size" in err and "Traceback" not in err
    sets = [a for kv in P2_SETS for a in ("--set", kv)]
    assert main(["trace", "import", *files, "--session", str(SESSION), *sets]) == 0
    # files of two jobs, and a rank beyond its job
    other = _doc(P2[1])
    other["distributedInfo"]["world_size"] = 4
    (tmp_path / "r1.json").write_text(json.dumps(other))
    with pytest.raises(TraceFileError, match="world_size: 4, where .* says 2"):
        read_traces([P2[0], tmp_path / "r1.json"])
    # a null world size is none given, a whole float is that number, a string is refused
    for value, ok in ((None, True), (2.0, True), ("2", False)):
        doc = _doc(P2[1])
        doc["distributedInfo"]["world_size"] = value
        (tmp_path / "ws.json").write_text(json.dumps(doc))
        if ok:
            assert read_traces([tmp_path / "ws.json"]).world_size == (None if value is None else 2)
        else:
            with pytest.raises(TraceFileError, match=r'world_size: "2" must be a whole number'):
                read_traces([tmp_path / "ws.json"])
    beyond = _doc(P2[1])
    beyond["distributedInfo"]["rank"] = 2
    (tmp_path / "r2.json").write_text(json.dumps(beyond))
    with pytest.raises(TraceFileError, match="rank: 2 is not below its world_size 2"):
        read_traces([tmp_path / "r2.json"])


def test_rank_to_stage_in_megatrons_order():
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2,
                        micro_batch_size=1, global_batch_size=8)
    assert [rank_stage(r, plan) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    plan4 = ParallelPlan(tensor_parallel=1, pipeline_parallel=4, data_parallel=2,
                         micro_batch_size=1, global_batch_size=8, context_parallel=2)
    assert [rank_stage(r, plan4) for r in range(16)] == [r // 4 for r in range(16)]
    with pytest.raises(ConfigError):
        rank_stage(8, plan)


def test_p2_plan_matches_ranks_to_stages(p2, p2_result):
    m = measure_step(p2, 2)
    cmp = compare(m, p2_result)
    assert cmp.rank_stages == {0: 0, 1: 1}
    g = p2_result.graph
    pred = predicted_by_stage(p2_result)
    for stage in (0, 1):
        on = g.stage == stage
        sends = np.isin(g.op, [OPS.index("p2p_fwd"), OPS.index("p2p_bwd")]) & on
        assert pred["send_recv"][stage] == pytest.approx(g.duration_s[sends].sum(), rel=1e-12)
        opt = (g.kind == KINDS.index("optimizer")) & on
        assert pred["optimizer"][stage] == pytest.approx(g.duration_s[opt].sum(), rel=1e-12)
        rows = {r.row: r for r in cmp.rows if r.stage == stage}
        assert rows["send_recv"].predicted_s == pytest.approx(pred["send_recv"][stage])
        assert rows["send_recv"].measured_s == m.column("send_recv")[stage]
        assert rows["iteration"].predicted_s == p2_result.schedule.iteration_time_s
        assert rows["iteration"].measured_s == m.column("iteration")[stage]
        parts = sum(m.column(c)[stage] for c in ("gemm", "attention", "norm_elementwise",
                                                  "optimizer", "other"))
        assert rows["compute"].measured_s == pytest.approx(parts, rel=1e-12)
        for cls in NO_FIGURE:
            assert rows[cls].predicted_s is None and rows[cls].note.startswith("no figure")
    deps = [abs(r.departure_s) for r in cmp.rows if r.predicted_s is not None]
    assert deps == sorted(deps, reverse=True)
    assert all(r.predicted_s is None for r in cmp.rows[len(deps):])


def _without_world_size(tmp_path: Path) -> list[Path]:
    """The p2 traces with their ranks but without ``distributedInfo.world_size``."""
    out = []
    for path in P2:
        doc = _doc(path)
        doc["distributedInfo"].pop("world_size")
        out.append(tmp_path / path.name.replace(".gz", ""))
        out[-1].write_text(json.dumps(doc))
    return out


def test_several_ranks_of_a_stage_are_averaged(tmp_path):
    # both ranks on stage 0 of a t=2 plan (4 GPUs; traces that do not give their job's size):
    # the stage's figure is their mean
    result = simulate(apply_sets(load_any(SESSION), ["plan.tensor_parallel=2",
                                                     "plan.data_parallel=1",
                                                     "plan.global_batch_size=8"]))
    p2 = read_traces(_without_world_size(tmp_path))
    assert p2.world_size is None
    m = measure_step(p2, 2)
    cmp = compare(m, result)
    assert cmp.rank_stages == {0: 0, 1: 0}
    gemm = next(r for r in cmp.rows if r.row == "gemm")
    assert gemm.ranks == [0, 1] and gemm.measured_s == pytest.approx(m.column("gemm").mean())


def test_measured_lanes_on_the_simulated_axis(p2, p2_result):
    m = measure_step(p2, 2)
    lanes = measured_lanes(p2, m, p2_result.session.plan)
    assert list(lanes.lane_stage) == sorted(lanes.lane_stage) and set(lanes.lane_stage) == {0, 1}
    assert (lanes.start_s >= -1e-12).all()
    for i, rank in enumerate(m.ranks):
        on = lanes.lane_rank[lanes.lane] == rank
        assert (lanes.start_s[on] + lanes.duration_s[on] <= m.column("iteration")[i] + 1e-9).all()
        for c, cls in enumerate(lanes.classes):
            if cls != "other":
                got = lanes.duration_s[on & (lanes.cls == c)].sum()
                assert got == pytest.approx(m.column(cls)[i], rel=1e-9, abs=1e-12), cls
    # the training loop's ranges name the phase and micro-batch of each event
    assert len(lanes.ranges) == lanes.lane.size
    sends = [r for n, r in zip(lanes.names, lanes.ranges) if n == "gloo:send"]
    assert sorted(sends) == ["backward mb0", "backward mb1", "forward mb0", "forward mb1"]
    opt = [r for c, r in zip(lanes.cls, lanes.ranges) if lanes.classes[c] == "optimizer"]
    assert opt and set(opt) == {"optimizer"}


def _bad(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


@pytest.mark.parametrize("content, field", [
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": -1, "pid": 1, "tid": 1}]},
     "traceEvents[0].dur"),
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": "0", "dur": 1, "pid": 1, "tid": 1}]},
     "traceEvents[0].ts"),
    ({"traceEvents": [{"ph": "M"}, {"ph": "X", "name": 3, "ts": 0, "dur": 1, "pid": 1, "tid": 1}]},
     "traceEvents[1].name"),
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": [1], "tid": 1}]},
     "traceEvents[0].pid"),
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1,
                       "args": {"correlation": "x"}}]}, "traceEvents[0].args.correlation"),
    ({"traceEvents": 3}, "traceEvents"),
    ({"events": []}, "traceEvents"),
    ({"traceEvents": [{"ph": "M", "name": "thread_name"}]}, "traceEvents"),
    ({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]},
     "ProfilerStep"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}', "NaN"),
    (b"\x1f\x8b not gzip", "gzip"),
    (gzip.compress(b'{"traceEvents": []}')[:-6], "cut short"),
    (b"[" * 100 + b"]" * 100, "traceEvents[0]"),
    (b'{"traceEvents": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1e400, "dur": 1, "pid": 1, "tid": 1}]}',
     "traceEvents[0].ts"),
    (b"{not json", "JSON"),
])
def test_malformed_traces_are_refused_naming_file_and_field(tmp_path, capsys, content, field):
    path = _bad(tmp_path, "bad_rank0.json", content)
    rc = main(["trace", "import", str(path), "--session", str(SESSION)])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(path) in err and field in err and "Traceback" not in err


def test_missing_file_folder_and_duplicate_rank_exit_2(tmp_path, capsys):
    for argv in ([str(tmp_path / "missing.json")], [str(tmp_path)], [str(ONE), str(ONE)]):
        assert main(["trace", "import", *argv, "--session", str(SESSION)]) == 2
        assert capsys.readouterr().err.startswith("vtrain: error:")


def test_ranks_beyond_the_plan_are_refused(capsys, tmp_path):
    # two ranks (of traces that do not give their job's size), a plan of one GPU
    argv = ["trace", "import", *map(str, _without_world_size(tmp_path)), "--session", str(SESSION), "--set",
            "plan.tensor_parallel=1", "--set", "plan.data_parallel=1", "--set",
            "plan.pipeline_parallel=1", "--set", "plan.global_batch_size=8"]
    assert main(argv) == 2
    assert "rank 1" in capsys.readouterr().err


def test_gzip_bomb_is_refused(tmp_path, monkeypatch):
    from core.util import inputs
    monkeypatch.setitem(inputs.MAX_BYTES, "trace", 1000)
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(b" " * 5000 + b"{}"))
    with pytest.raises(TraceFileError, match="uncompressed"):
        read_traces([path])


def test_class_table_is_checked(tmp_path):
    table = json.loads(CLASSES_FILE.read_text())
    table["rules"][2]["class"] = "matmul"
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(table))
    with pytest.raises(TraceFileError, match=r"rules\[2\]\.class"):
        load_class_table(path)
    t = load_class_table()
    assert t.classify("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                      "kernel") == t.classes.index("all_reduce")
    assert t.classify("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                      "kernel") == t.classes.index("gemm")
    assert t.classify("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>(Flash_fwd_params)",
                      "kernel") == t.classes.index("attention")
    assert t.classify("aten::mm", "kernel") == -1  # a CPU op name is no kernel's
    assert t.classify("nccl:all_gather_into_tensor", "user_annotation") == t.classes.index(
        "all_gather")


def test_device_events_are_measured_over_streams_and_linked_by_correlation(tmp_path):
    """A hand-made GPU trace: kernels on two streams, each launched in a step (by correlation),
    one launched in step 1 but running after its range ends."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": t0, "dur": 100,
           "pid": 1, "tid": 1} for n, t0 in ((1, 0), (2, 100))]
    for i, (ts, corr) in enumerate([(10, 1), (20, 2), (30, 3), (110, 4)]):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts,
                   "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": corr}})
    kernels = [("sm90_xmma_gemm_x", 7, 40, 30, 1), ("ncclDevKernel_AllReduce_Sum", 20, 50, 20, 2),
               ("void at::native::vectorized_elementwise_kernel", 7, 90, 25, 3),
               ("sm90_xmma_gemm_y", 7, 130, 10, 4)]
    for name, stream, ts, dur, corr in kernels:
        ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0,
                   "tid": stream, "args": {"correlation": corr}})
    ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 9, "dur": 5, "pid": 1,
               "tid": 1})
    ev.append({"ph": "X", "cat": "user_annotation", "name": "forward mb0", "ts": 5, "dur": 20,
               "pid": 1, "tid": 1})
    path = _bad(tmp_path, "gpu.json", {"traceEvents": ev})
    trace = read_traces([path])
    assert choose_step(trace) == 2
    m = measure_step(trace, 1)
    assert m.source == ["device"]
    assert m.column("gemm")[0] == pytest.approx(30e-6)
    assert m.column("all_reduce")[0] == pytest.approx(20e-6)
    assert m.column("norm_elementwise")[0] == pytest.approx(25e-6)
    # from the first kernel's start (40) to the last one's end (115), after the host's range
    assert m.column("iteration")[0] == pytest.approx(75e-6)
    assert tuple(m.window_s[0]) == pytest.approx((40e-6, 115e-6))
    # no stream busy from 70 to 90
    assert m.column("idle")[0] == pytest.approx(20e-6)
    assert m.column("other")[0] == pytest.approx(0.0, abs=1e-12)
    lanes = measured_lanes(trace, m, ParallelPlan(tensor_parallel=1, pipeline_parallel=1,
                                                  data_parallel=1, micro_batch_size=1,
                                                  global_batch_size=1))
    got = dict(zip(lanes.names, lanes.ranges))
    assert sorted(got) == sorted(k[0] for k in kernels[:3])
    # the range around each kernel's launch (the third is launched after it closed)
    assert [got[k[0]] for k in kernels[:3]] == ["forward mb0", "forward mb0", ""]


def test_cli_json_and_table(capsys):
    argv = ["trace", "import", *map(str, P2), "--session", str(SESSION),
            *[x for s in P2_SETS for x in ("--set", s)]]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step"] == 2 and [r["stage"] for r in doc["ranks"]] == [0, 1]
    m = measure_step(read_traces(P2), 2)
    assert doc["ranks"][1]["measured_s"]["gemm"] == m.column("gemm")[1]
    gemm = [r for r in doc["rows"] if r["class"] == "gemm"]
    assert len(gemm) == 2 and all(r["predicted_s"] is None for r in gemm)
    assert main([*argv, "--step", "1"]) == 0
    out = capsys.readouterr().out
    assert "ProfilerStep#1" in out and "stage 1" in out


def test_a_table_of_ones_own_classes(tmp_path, capsys):
    """--classes: a class the simulator has no figure for is shown with the measurement and
    says so; the layers' GEMMs moved to it leave the GEMM row."""
    table = json.loads(CLASSES_FILE.read_text())
    table["classes"] = {"projection": "linear layers", **table["classes"]}
    table["rules"].insert(0, {"class": "projection", "categories": ["cpu_op"],
                              "names": ["aten::linear"]})
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(table))
    trace = read_traces([ONE])
    m = measure_step(trace, 2, load_class_table(path))
    base = measure_step(trace, 2)
    assert m.rows[0] == "projection" and m.column("projection")[0] > 0
    # aten::linear (and the aten::addmm inside) counted as GEMM before: now as projection
    assert m.column("gemm")[0] == pytest.approx(base.column("gemm")[0] - m.column("projection")[0],
                                                abs=1e-12)
    assert m.column("other")[0] == pytest.approx(base.column("other")[0], abs=1e-12)
    argv = ["trace", "import", str(ONE), "--session", str(SESSION), "--classes", str(path),
            "--set", "plan.tensor_parallel=1", "--set", "plan.data_parallel=1", "--set",
            "plan.pipeline_parallel=1", "--set", "plan.global_batch_size=8", "--json"]
    assert main(argv) == 0
    rows = {r["class"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["projection"]["predicted_s"] is None
    assert "no projection class" in rows["projection"]["note"]
    # compute holds every class but the collectives: the table's own too
    parts = sum(m.column(c)[0] for c in m.rows if c not in ("all_reduce", "all_gather",
                                                            "reduce_scatter", "send_recv",
                                                            "all_to_all", "idle", "iteration"))
    assert rows["compute"]["measured_s"] == pytest.approx(parts, rel=1e-12)



def _one_rank_with(change) -> dict:
    doc = json.loads(ONE.read_text())
    change(doc, doc["traceEvents"])
    return doc


def _first(events, pred) -> dict:
    return next(e for e in events if e.get("ph") == "X" and pred(e))


def _op(events) -> dict:
    return _first(events, lambda e: e.get("cat") == "cpu_op")


def _rename_steps(events, prefix: str) -> None:
    for e in events:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = e["name"].replace("ProfilerStep#", prefix)


@pytest.mark.parametrize("change, rule", [
    # integers beyond a float were converted (OverflowError, exit 1)
    (lambda d, ev: _op(ev).__setitem__("dur", 10**400),
     ".dur: an integer of about 401 digits must be a number from 0 to 86,400,000,000 "
     "(the duration, microseconds: a day)"),
    (lambda d, ev: _op(ev).__setitem__("ts", -10**400),
     ".ts: a negative integer of about 401 digits must be a number from -2^53 to 2^53"),
    # finite but beyond any trace: measured 1e294 s, exit 0
    (lambda d, ev: _op(ev).__setitem__("dur", 1e300),
     ".dur: 1e+300 must be a number from 0 to 86,400,000,000"),
    (lambda d, ev: _op(ev).setdefault("args", {}).__setitem__("correlation", 2**70),
     ".args.correlation: an integer of about 22 digits must be a whole number of at most 64 bits"),
    # ranks went into int32 columns (OverflowError, exit 1)
    (lambda d, ev: (d["distributedInfo"].pop("world_size"),
                    d["distributedInfo"].__setitem__("rank", 2**40)),
     "distributedInfo.rank: 1099511627776 must be a whole number from 0 to 16,777,215"),
    (lambda d, ev: d["distributedInfo"].__setitem__("world_size", 10**30),
     "distributedInfo.world_size: an integer of about 31 digits must be a whole number from 1 "
     "to 16,777,216"),
    (lambda d, ev: d.__setitem__("distributedInfo", [0]),
     "distributedInfo: must be a JSON object"),  # was ignored: exit 0
    # step numbers: "ProfilerStep#01" and 5,000 digits raised ValueError (exit 1)
    (lambda d, ev: _rename_steps(ev, "ProfilerStep#0"),
     ".name: ProfilerStep#01: a step's number is written as prof.step() writes it"),
    (lambda d, ev: _rename_steps(ev, "ProfilerStep#" + "9" * 5000),
     ": a step's number is written as prof.step() writes it (no leading zero, at most 18 digits)"),
])
def test_numbers_beyond_a_trace_are_refused_by_name(tmp_path, change, rule):
    path = _bad(tmp_path, "t.json", _one_rank_with(change))
    with pytest.raises(TraceFileError) as err:
        read_traces([path])
    msg = str(err.value)
    assert msg.startswith(f"{path}: ") and rule in msg, msg


def test_a_step_number_in_other_digits_is_not_a_step(tmp_path):
    """"ProfilerStep#١" (Arabic-Indic one) was read as step 1, then not found (ValueError)."""
    path = _bad(tmp_path, "t.json", _one_rank_with(lambda d, ev: _rename_steps(ev, "ProfilerStep#١")))
    trace = read_traces([path])
    assert step_numbers(trace) == []
    with pytest.raises(TraceFileError) as err:
        choose_step(trace)
    assert str(err.value).startswith(f"{path}: traceEvents: no ProfilerStep#N range common")


def test_a_key_given_twice_in_a_trace_is_refused_by_its_path(tmp_path, capsys):
    """A trace with two ``traceEvents`` lists was read with the last one only (``json`` keeps
    the last value of a repeated key), as sessions are not: the key's path is named, at the
    top level and inside an event, plain or gzipped, and exit 2."""
    ok = {"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 5, "pid": 1, "tid": 1}
    first = json.dumps([ok])
    top = _bad(tmp_path, "top_rank0.json",
               f'{{"traceEvents": {first}, "traceEvents": []}}'.encode())
    rule = "given twice in one object; a key is given once (which value was meant is unknown)"
    with pytest.raises(TraceFileError) as exc:
        read_traces([top])
    assert str(exc.value) == f"{top}: traceEvents: {rule}"
    inner = _bad(tmp_path, "inner_rank0.json.gz", gzip.compress(
        b'{"traceEvents": [{"ph": "M", "name": "thread_name"}, {"ph": "X", "name": "k", '
        b'"ts": 0, "dur": 1, "pid": 1, "tid": 1, "args": {"stream": 7, "stream": 8}}]}'))
    with pytest.raises(TraceFileError) as exc:
        read_traces([inner])
    assert str(exc.value) == f"{inner}: traceEvents[1].args.stream: {rule}"
    assert main(["trace", "import", str(top), "--session", str(SESSION)]) == 2
    assert capsys.readouterr().err == f"vtrain: error: {top}: traceEvents: {rule}\n"
    # the same events, each key once, are read
    once = _bad(tmp_path, "once_rank0.json", f'{{"traceEvents": {first}}}'.encode())
    assert read_traces([once]).num_events == 1


@pytest.mark.parametrize("name", ["sim.json", "sim.json.gz"])
def test_vtrains_own_trace_is_refused_as_such(tmp_path, capsys, name):
    """``vtrain simulate S.json --trace-out t.json`` then ``vtrain trace import t.json`` said
    "no ProfilerStep#N range", true but no help: the export marks itself in the Trace Event
    Format's ``otherData`` and the importer (the command's and the window's) names it by that
    structure (the window's: tests/gui/test_gui_trace_overlay.py)."""
    from core.io.kineto import VTRAIN_TRACE_MARK
    path = tmp_path / name
    assert main(["simulate", str(SESSION), "--trace-out", str(path)]) == 0
    capsys.readouterr()
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
    assert doc["otherData"] == VTRAIN_TRACE_MARK == {"generator": "vtrain",
                                                     "content": "simulated iteration"}
    said = (f"{path}: this is vtrain's simulated trace (written by --trace-out), not a PyTorch "
            "profiler trace of a run: it holds the prediction itself; give the trace "
            "torch.profiler wrote of the run (export_chrome_trace, or tensorboard_trace_handler)")
    assert main(["trace", "import", str(path), "--session", str(SESSION)]) == 2
    assert capsys.readouterr().err == f"vtrain: error: {said}\n"
    # the marker is what is read, never the text: without it the events are read as any
    # trace's (and have no ProfilerStep range)
    del doc["otherData"]
    bare = _bad(tmp_path, "bare.json", doc)
    with pytest.raises(TraceFileError, match="no ProfilerStep#N range"):
        choose_step(read_traces([bare]))
