"""Sweeps on several processes (``workers``) and on Dask (``dask``): the serial result, bit for bit."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from core.studies.sweep import pace
from core.studies.sweep import parallel as sweep_parallel
from core.studies.sweep import run as sweep_run
from core.cli import main
from core.plan.fields import ConfigError
from core.io.session import load_any
from core.studies.sweep import SweepCancelled, SweepSpace, run_sweep
from tests.conftest import EXAMPLES

SMALL = EXAMPLES / "gpt3_1.3b_single_node.json"  # GPT-3 1.3B, B=256, 8 GPUs in one node
#: a few hundred plans of several pipeline structures (p, m, schedule, v)
SPACE = SweepSpace(hold_session_values=True, max_gpus=8, micro_batch_sizes=(1, 2, 4))


@pytest.fixture(autouse=True)
def two_cores_at_least(monkeypatch):
    """These tests run two workers, at most the machine's cores (``sweep --workers``' bound):
    a one-core machine runs them too, only slower."""
    cores = sweep_parallel.default_workers()
    monkeypatch.setattr(sweep_parallel, "default_workers", lambda: max(cores, 2))


@pytest.fixture
def parallel_always(monkeypatch):
    """Use the workers even for a small sweep (the default runs small sweeps in process)."""
    monkeypatch.setattr(sweep_run, "_PARALLEL_MIN_PLANS", 0)


@pytest.fixture(scope="module")
def serial():
    return run_sweep(load_any(SMALL), SPACE, prune=False, deadline_days=5.0)


def assert_same(a, b):
    assert a.num_plans == b.num_plans > 100
    assert a.plans == b.plans
    for name in ("iteration_time_s", "max_memory_per_gpu_bytes", "training_days", "cost_usd",
                 "mfu", "hfu", "tokens_per_s", "gpu_hours", "fits_in_memory", "pareto"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.tobytes() == y.tobytes(), name  # bit for bit, NaN and all
    assert a.reason == b.reason and a.warnings == b.warnings
    assert (a.fastest, a.cheapest, a.cheapest_within_deadline) == (
        b.fastest, b.cheapest, b.cheapest_within_deadline)
    da, db = a.to_dict(), b.to_dict()
    for doc in (da, db):
        doc.pop("wall_s")
    assert da == db


def test_several_structures_in_the_small_space(serial):
    structures = {(pl.pipeline_parallel, pl.num_microbatches, pl.schedule) for pl in serial.plans}
    assert len(structures) > 20 and serial.num_feasible > 0
    assert 0 < serial.pareto.sum() < serial.num_feasible


def test_process_pool_gives_the_serial_result(serial, parallel_always):
    seen = []
    result = run_sweep(load_any(SMALL), SPACE, prune=False, deadline_days=5.0, workers=2,
                       progress=lambda done, total: seen.append((done, total)))
    assert_same(serial, result)
    assert seen[0] == (0, serial.num_plans) and seen[-1] == (serial.num_plans, serial.num_plans)
    assert len(seen) > 3 and all(a[0] < b[0] for a, b in zip(seen, seen[1:]))


def test_dask_local_cluster_gives_the_serial_result(serial):
    pytest.importorskip("distributed")
    result = run_sweep(load_any(SMALL), SPACE, prune=False, deadline_days=5.0, workers=2, dask="local")
    assert_same(serial, result)


def test_cancel_with_workers(parallel_always):
    calls = []

    def cancel():  # set once the first chunk has come back
        return any(done > 0 for done, _ in calls)

    t0 = time.perf_counter()
    with pytest.raises(SweepCancelled):
        run_sweep(load_any(SMALL), SPACE, prune=False, workers=2, cancel=cancel,
                  progress=lambda done, total: calls.append((done, total)))
    assert time.perf_counter() - t0 < 30
    done = [d for d, _ in calls]
    assert 0 < max(done) < calls[0][1]  # stopped before the last chunk

    event = threading.Event()
    event.set()  # set before the start: nothing is solved
    with pytest.raises(SweepCancelled):
        run_sweep(load_any(SMALL), SPACE, prune=False, workers=2, cancel=event)


def test_chunks_keep_whole_batches_in_order():
    batches = [((p, m, "1f1b", 1), list(range(k, k + size)))
               for k, (p, m, size) in enumerate([(1, 8, 5), (2, 8, 3), (4, 64, 7), (8, 128, 2),
                                                 (8, 256, 9), (16, 512, 1)] * 5)]
    for workers in (1, 2, 3, 16):
        chunks = sweep_parallel.chunk_batches(batches, workers)
        assert [b for c in chunks for b in c] == batches
        assert all(chunks) and len(chunks) <= sweep_parallel.CHUNKS_PER_WORKER * workers + 1


def test_bad_workers_and_dask_arguments(monkeypatch):
    session = load_any(SMALL)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ConfigError) as exc:
            run_sweep(session, SPACE, workers=bad)
        assert exc.value.errors[0].field == "sweep.workers"
    with pytest.raises(ConfigError) as exc:
        run_sweep(session, SPACE, dask="  ")
    assert exc.value.errors[0].field == "sweep.dask"
    pytest.importorskip("distributed")
    monkeypatch.setattr(sweep_parallel, "DASK_CONNECT_TIMEOUT_S", 1.0)
    with pytest.raises(ConfigError) as exc:
        run_sweep(session, SPACE, dask="tcp://127.0.0.1:9")
    assert exc.value.errors[0].field == "sweep.dask" and "127.0.0.1:9" in exc.value.errors[0].message


def test_store_bytes_round_trip_leaves_the_store_alone(serial):
    from core.sim.simulate import open_profile, profile_path
    store = open_profile(profile_path(serial.session))
    path = store.path
    data = sweep_parallel.store_bytes(store)
    assert store.path == path and data.startswith(b"vtrain-store-image\n")
    again, memo = sweep_parallel._open_store(data)
    assert again.device_name == store.device_name and again.memory_bytes == store.memory_bytes
    assert again.peak_flops == store.peak_flops and again.op_names() == store.op_names()
    assert sweep_parallel._open_store(data)[0] is again  # once per process


def test_cli_workers_and_json(capsys, monkeypatch):
    monkeypatch.setattr(sweep_run, "_PARALLEL_MIN_PLANS", 0)
    docs = []
    for extra in (["--workers", "1"], ["--workers", "2"]):
        assert main(["sweep", str(SMALL), "--max-gpus", "8", "--micro-batch-sizes", "1,2,4",
                     "--json", *extra]) == 0
        doc = json.loads(capsys.readouterr().out)
        doc.pop("wall_s")
        docs.append(doc)
    assert docs[0] == docs[1] and docs[0]["num_plans"] > 100
    assert main(["sweep", str(SMALL), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [1, 10**23])
def test_more_workers_than_cores_are_refused_before_any_process_starts(capsys, monkeypatch, extra):
    """A forked pool starts every worker at once: ``--workers 100000`` forked 100,000
    processes. Refused by the machine's core count, naming it, with no process started."""
    import multiprocessing

    monkeypatch.setattr(sweep_run, "_PARALLEL_MIN_PLANS", 0)
    cores = sweep_parallel.default_workers()
    workers = cores + extra
    assert main(["sweep", str(SMALL), "--workers", str(workers)]) == 2
    err = capsys.readouterr().err
    # the user typed --workers: the refusal names the option, not a session's sweep.workers
    assert (f"vtrain: error: --workers: {workers:,} is more than this machine's {cores} cores"
            in err)
    assert "sweep.workers" not in err
    assert multiprocessing.active_children() == []
    # run_sweep's own argument (a session's sweep settings, the GUI's) keeps the field's name
    with pytest.raises(ConfigError, match="sweep.workers") as info:
        run_sweep(load_any(SMALL), SPACE, workers=workers, dask="local")
    assert info.value.errors[0].message.startswith(f"workers={workers:,} is more than")
    # a remote scheduler's workers are its own: the number is not this machine's to bound
    assert sweep_run.check_workers(workers, local=False) == workers
    assert main(["sweep", str(SMALL), "--workers", str(workers), "--dask", "tcp://h:1",
                 "--max-gpus", "0"]) == 2  # --workers passes; the next option's refusal
    assert "--max-gpus" in capsys.readouterr().err


def test_gpus_from_workers_refused_by_the_option_before_any_row(tmp_path, capsys, monkeypatch):
    """``sweep --gpus-from PRICES.csv --workers 99`` said "A100-SXM4-80GB: sweep.workers: ...":
    labelled by a price-sheet row and naming a session field, after that row's sweep had
    started. The option's value is refused by its name, before any row is swept."""
    from core.studies import gpu_choice

    swept = []
    monkeypatch.setattr(gpu_choice, "run_sweep", lambda *a, **k: swept.append(a))
    sheet = tmp_path / "p.csv"
    sheet.write_text("gpu,price_per_gpu_hour_usd,max_gpus,gpus_per_node,source,date\n"
                     "A100-SXM4-80GB,0.3,8,,test,2026-01-01\n")
    cores = sweep_parallel.default_workers()
    for bad, message in ((str(cores + 1), f"{cores + 1:,} is more than this machine's "
                                          f"{cores} cores (one process per core; more cannot "
                                          "make the sweep faster)"),
                         ("0", "0 must be a positive integer"),
                         ("two", "'two': give one positive integer")):
        assert main(["sweep", str(SMALL), "--gpus-from", str(sheet), "--workers", bad]) == 2
        assert capsys.readouterr().err == f"vtrain: error: --workers: {message}\n"
    assert swept == []


# --------------------------------------------------------------------------- speed-ups keep results

def test_zb_h1_order_equals_its_rule_item_by_item():
    from core import schedules
    zb = schedules.get("zb-h1")
    for p in (1, 2, 3, 5, 8, 13):
        for m in (1, 2, 3, 4, 7, 8, 16, 33):
            for stage in range(p):
                fast, ref = zb.order(p, m, stage, 1), zb._order_loop(p, m, stage, 1)
                for a, b in ((fast.phase, ref.phase), (fast.microbatch, ref.microbatch),
                             (fast.chunk, ref.chunk)):
                    assert a.dtype == b.dtype and a.tolist() == b.tolist(), (p, m, stage)
    # stage 1 of p=2, m=3: F0 F1 B0 F2 B1 W0 B2 W1 W2
    o = zb.order(2, 3, 1, 1)
    assert ["FBW"[k] + str(j) for k, j in zip(o.phase.tolist(), o.microbatch.tolist())] == [
        "F0", "B0", "F1", "B1", "W0", "F2", "B2", "W1", "W2"]


def test_in_flight_per_stage_cache_equals_the_schedule_count():
    from core.model import model_math
    from core import schedules
    from core.plan.parallel import ParallelPlan
    for sched, v in (("1f1b", None), ("gpipe", None), ("zb-h1", None), ("interleaved", 2)):
        plan = ParallelPlan(2, 4, 2, 1, 64, sched, "none", "bf16", virtual_pipeline_stages=v)
        got = model_math.schedule_in_flight(sched, 4, plan.num_microbatches, v or 1)
        assert got == tuple(schedules.in_flight_microbatches(sched, 4, plan.num_microbatches, i,
                                                             v or 1) for i in range(4))
    # 1F1B: min(p - i, m) (Korthikanti et al. 2022, Sec. 4.2.3)
    assert model_math.schedule_in_flight("1f1b", 4, 16, 1) == (4.0, 3.0, 2.0, 1.0)


@pytest.mark.parametrize("early", [False, True], ids=["pool-after-enumeration", "early-warmed-pool"])
def test_compiled_sweep_on_processes_gives_the_serial_result(serial, parallel_always, monkeypatch,
                                                             early):
    """With the compiled batch solver on the heavy chunks (this thread, or a pool started and
    warmed up before the enumeration) and numpy on the light ones: still the serial result."""
    from core.sim import fastpath_kernel
    if not fastpath_kernel.available():
        pytest.skip("Numba is not installed")
    monkeypatch.setattr(sweep_run, "COMPILED_MIN_SWEEP_ELEMENTS", 0)
    monkeypatch.setattr(sweep_run, "_EARLY_POOL_CANDIDATES", 0 if early else 10**12)
    monkeypatch.setattr(fastpath_kernel, "loaded", lambda: False)  # as in a fresh process
    started = []
    real_start = sweep_parallel.start_pool
    monkeypatch.setattr(sweep_parallel, "start_pool",
                        lambda *a, **k: started.append(a) or real_start(*a, **k))
    result = run_sweep(load_any(SMALL), SPACE, prune=False, deadline_days=5.0, workers=2)
    assert bool(started) == early
    assert_same(result, serial)


@pytest.mark.parametrize("load_s", [0.0, 1e9], ids=["this-thread-compiled-too", "this-thread-numpy"])
def test_warmed_pool_beside_this_thread_compiled_or_not_gives_the_serial_result(
        serial, parallel_always, monkeypatch, load_s):
    """Beside a warmed pool this thread loads the compiled solver when its share of the light
    batches would cost more in numpy (_KERNEL_LOAD_S decides): the serial result either way, and
    the plans' own figures (columns, FLOPs, bands) computed once, after the first chunks left."""
    from core.sim import fastpath_kernel
    if not fastpath_kernel.available():
        pytest.skip("Numba is not installed")
    monkeypatch.setattr(sweep_run, "COMPILED_MIN_SWEEP_ELEMENTS", 0)
    monkeypatch.setattr(sweep_run, "_EARLY_POOL_CANDIDATES", 0)
    monkeypatch.setattr(fastpath_kernel, "loaded", lambda: False)  # as in a fresh process
    monkeypatch.setattr(sweep_parallel, "_KERNEL_LOAD_S", load_s)
    chosen, prepared = [], []
    real_share, real_figures = sweep_parallel._light_share_elements, sweep_run.plan_figures
    monkeypatch.setattr(sweep_parallel, "_light_share_elements",
                        lambda *a: chosen.append(real_share(*a)) or chosen[-1])
    monkeypatch.setattr(sweep_run, "plan_figures",
                        lambda *a: prepared.append(1) or real_figures(*a))
    result = run_sweep(load_any(SMALL), SPACE, prune=False, deadline_days=5.0, workers=2)
    assert len(chosen) == 1 and chosen[0] > 0 and len(prepared) == 1
    assert_same(result, serial)


def test_gc_paused_restores_the_collector_and_counts_nesting():
    import gc
    was = gc.isenabled()
    try:
        gc.enable()
        with pace.gc_paused():
            assert not gc.isenabled()
            with pace.gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer pause still holds
        assert gc.isenabled()
        gc.disable()  # a caller that keeps it off: left off
        with pace.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_gc_paused_on_a_worker_thread_freezes_what_is_alive(monkeypatch):
    """On a worker thread (the window's sweep) the pause ends by freezing the objects alive,
    so that the collection that follows does not go over the sweep's hundreds of thousands of
    objects with the interpreter held (a stall of the window); on the main thread (the
    command line) nothing is frozen."""
    import gc
    import threading

    frozen: list[str] = []
    monkeypatch.setattr(pace.gc, "freeze", lambda: frozen.append(threading.current_thread().name))
    was = gc.isenabled()
    try:
        gc.enable()
        with pace.gc_paused():
            pass
        assert frozen == [] and gc.isenabled()

        def sweep():
            with pace.gc_paused():
                pass

        worker = threading.Thread(target=sweep, name="sweep-worker")
        worker.start()
        worker.join()
        assert frozen == ["sweep-worker"] and gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_pruned_sweep_on_a_pool_gives_the_serial_pruned_result(parallel_always):
    """Branch and bound's rounds on a pool: the serial pruned result, bit for bit."""
    a = run_sweep(load_any(SMALL), SPACE, deadline_days=5.0)
    b = run_sweep(load_any(SMALL), SPACE, deadline_days=5.0, workers=2)
    assert_same(a, b)
    assert np.array_equal(a.pruned, b.pruned)


def test_yield_interpreter_sleeps_on_worker_threads_only(monkeypatch):
    """``core.studies.sweep.pace.yield_interpreter``: on a thread other than the main one it sleeps once per
    ``YIELD_EVERY_S`` of work (so the GUI thread takes the interpreter lock); on the main
    thread (the command line) never."""
    import threading
    import time

    slept: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(pace.time, "sleep", lambda s: slept.append(s))

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pace.yield_interpreter()

    busy(0.1)
    assert slept == []  # the main thread
    t = threading.Thread(target=busy, args=(0.1,))
    t.start()
    t.join()
    monkeypatch.setattr(pace.time, "sleep", real_sleep)
    # 0.1 s of work at one yield per 20 ms: 4 or 5 sleeps of 0.5 ms
    assert 3 <= len(slept) <= 5 and set(slept) == {0.0005}


def test_cancel_is_one_public_check_for_every_driver():
    """``core.studies.sweep.cancel``: an event, a callable or None; the serial loop, the pool and
    Dask raise the same :class:`SweepCancelled` through :func:`check_cancelled`."""
    from core.studies.sweep import cancel
    ev = threading.Event()
    assert not cancel.is_cancelled(None) and not cancel.is_cancelled(ev)
    assert cancel.is_cancelled(lambda: True) and not cancel.is_cancelled(lambda: 0)
    cancel.check_cancelled(ev)  # not set: nothing
    ev.set()
    with pytest.raises(SweepCancelled):
        cancel.check_cancelled(ev)
    assert cancel.SweepCancelled is SweepCancelled


def test_the_sweep_package_imports_in_no_circle():
    """No module of ``core.studies.sweep`` reaches itself again through imports (lazy ones
    inside functions included), and none imports the package's ``__init__``."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("core")
    modules = {m for m in graph.modules if m.startswith("core.studies.sweep.")}
    assert {"core.studies.sweep.run", "core.studies.sweep.parallel",
            "core.studies.sweep.cancel"} <= modules
    for m in modules:
        assert "core.studies.sweep" not in graph.find_modules_directly_imported_by(m), m
        for other in graph.find_modules_directly_imported_by(m):
            assert not graph.chain_exists(importer=other, imported=m), (m, other)


def test_a_workers_memo_serves_one_study_at_a_time(serial):
    """A long-lived worker (Dask's) keeps one lookup memo per store: a chunk of another model
    starts it afresh, so it does not grow with every study the worker ever ran, and the
    figures are the same as from a fresh memo."""
    import dataclasses
    from core.sim.simulate import open_profile, profile_path
    from core.studies.sweep.batch import solve_batch
    s = serial.session
    store = open_profile(profile_path(s))
    data = sweep_parallel.store_bytes(store)
    memo = sweep_parallel._open_store(data)[1]
    plan = s.plan
    job = [((plan.pipeline_parallel, plan.num_microbatches, plan.schedule, 1), [plan])]
    first = sweep_parallel.solve_chunk(data, s.model, s.cluster, s.cost, job)
    size = len(memo)
    assert size > 1 and sweep_parallel.solve_chunk(data, s.model, s.cluster, s.cost, job) == first
    other = dataclasses.replace(s.model, num_layers=s.model.num_layers * 2)
    got = sweep_parallel.solve_chunk(data, other, s.cluster, s.cost, job)
    assert memo[sweep_parallel._STUDY][0] == dataclasses.astuple(other)
    # nothing of the first study is kept: its model object is gone from the memo
    assert not any(v is s.model or (isinstance(v, tuple) and v and v[0] is s.model)
                   for v in memo.values())
    fresh = solve_batch(other, s.cluster, s.cost, job[0][0], [plan], sweep_parallel._open_store(
        data)[0], {}, None)
    assert np.array_equal(got[0][0], fresh[0])
