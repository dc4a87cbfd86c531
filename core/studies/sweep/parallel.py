"""Sweeps on several processes or a Dask cluster: the batches of a sweep in chunks.

:func:`core.studies.sweep.run.run_sweep` cuts the plans of a sweep into batches of one
pipeline structure (p, m, schedule, v). Here consecutive batches are grouped
into chunks (:func:`chunk_batches`: of about equal estimated work; or, when the
calling thread works beside a local pool, chunks that shrink as the work runs
out, :func:`run_on_pool`); each chunk is solved by :func:`solve_chunk` in
another process -- a local process pool (:func:`run_on_pool`, the calling
thread taking batches one by one from the other end) or the workers of a Dask
distributed scheduler (:func:`run_on_dask`) -- and the results are handed back
chunk by chunk; the caller puts each batch's figures at its rows. Every
batch is solved exactly as the serial loop solves it (the compiled and the numpy
batch solver give the same times bit for bit), so the result is the serial one,
bit for bit.

The profile store travels as its image (:meth:`core.store.profile_store.ProfileStore.to_image`,
about 0.5 MB, no HDF5): each worker process reads it back once (with the same checks
as a store file) and keeps it, with its lookup memo, for the chunks that follow. No
h5py object is ever pickled. The local pool's processes are forked from a
single-threaded process (the command line) and started with ``forkserver`` or
``spawn`` otherwise: the GUI calls this from a thread, and forking a threaded
process is unsafe.

Dask is imported only by :func:`run_on_dask` (the optional ``dask`` extra). Cancellation is
:mod:`core.studies.sweep.cancel`'s (the same check as the serial loop's); the batches are
solved by :func:`core.studies.sweep.batch.solve_batch`, as in the calling process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, Callable

from core.plan.fields import ConfigError, FieldError
from core.sim import fastpath_kernel
from core.studies.sweep.batch import solve_batch
from core.studies.sweep.cancel import check_cancelled
from core.studies.sweep.pace import gc_paused

__all__ = ["chunk_batches", "solve_chunk", "store_bytes", "start_pool", "stop_pool", "run_on_pool",
           "run_on_dask", "CHUNKS_PER_WORKER", "PARENT_POLL_S"]

#: Chunks per worker: enough for the work to balance and for progress and Cancel to be
#: timely, few enough that sending them costs little.
CHUNKS_PER_WORKER = 12
#: Estimated cost, in seconds on one core, of one batch (its pipeline structure and set-up), of
#: one plan (stage times and memory) and of one (stage, item, plan) element of the batch
#: solver, compiled or numpy (fitted on the MT-NLG example).
_BATCH_COST = 1.5e-3
_PLAN_COST = 6e-5
_ELEMENT_COST = {True: 5e-9, False: 4.5e-8}
#: CPU seconds a process spends loading the compiled batch solver (Numba's import and the
#: kernel's cached machine code, :func:`core.sim.fastpath_kernel.warm`: 0.46-0.53 s CPU measured
#: on a lightly loaded machine, see that module).
_KERNEL_LOAD_S = 0.5
#: How often (seconds) the caller's ``cancel`` is checked while chunks run.
_POLL_S = 0.1
#: How often (seconds) a pool process checks that the process that started its pool is alive
#: (:func:`_init_worker`'s watchdog, beside the kernel's parent-death signal).
PARENT_POLL_S = 0.5
#: Linux ``prctl`` option: the signal a process gets when its parent dies (``<linux/prctl.h>``).
_PR_SET_PDEATHSIG = 1
#: How long to try to reach a Dask scheduler.
DASK_CONNECT_TIMEOUT_S = 10.0

Batch = tuple[tuple[int, int, str, int], list[int]]  # ((p, m, schedule, v), plan rows)

# per worker process: store bytes digest -> (store, lookup memo)
_WORKER_STORES: dict[str, tuple[Any, dict]] = {}
#: The memo's key of the study (model and cluster fields) its entries belong to.
_STUDY = ("study",)
_INIT_DATA: bytes | None = None


def _batch_cost(batch: Batch, compiled: bool = False) -> float:
    (p, m, _, v), idx = batch
    return _BATCH_COST + len(idx) * (_PLAN_COST + p * 3 * m * v * _ELEMENT_COST[bool(compiled)])


def chunk_batches(batches: list[Batch], workers: int, compiled: bool = False) -> list[list[Batch]]:
    """Consecutive batches grouped into about ``CHUNKS_PER_WORKER * workers`` chunks of equal
    estimated work (a batch's set-up, each plan's lookups and its share of the batch
    solver's ``p * 3m * v`` elements, compiled or not); every batch whole, the order kept."""
    total = sum(_batch_cost(b, compiled) for b in batches)
    target = total / max(1, CHUNKS_PER_WORKER * workers)
    chunks: list[list[Batch]] = [[]]
    acc = 0.0
    for b in batches:
        if chunks[-1] and acc >= target:
            chunks.append([])
            acc = 0.0
        chunks[-1].append(b)
        acc += _batch_cost(b, compiled)
    return chunks


def store_bytes(store: Any) -> bytes:
    """The profile store as its image (:meth:`core.store.profile_store.ProfileStore.to_image`; the
    store object itself is not changed)."""
    return store.to_image()


def _open_store(data: bytes) -> tuple[Any, dict]:
    """The store of ``data`` (a store image) and its lookup memo, read once per process."""
    digest = hashlib.sha256(data).hexdigest()
    hit = _WORKER_STORES.get(digest)
    if hit is None:
        from core.store.profile_store import ProfileStore
        store = ProfileStore.from_image(data)
        hit = _WORKER_STORES[digest] = (store, {})
    return hit


def _init_worker(data: bytes, owner: int | None = None) -> None:
    """A pool process's start: the store's bytes kept, Ctrl+C left to the parent (which
    cancels the sweep and shuts the pool down; a worker interrupted mid-chunk would only
    print a traceback), SIGTERM ending it (the default action), and the process made to end with the sweep's process ``owner`` (its
    pid) however that ends (:func:`_end_with_owner`)."""
    global _INIT_DATA
    _INIT_DATA = data
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # SIGTERM ends a worker (stop_pool's terminate): not the handler a forked worker
        # inherits from the command (core.cli.common.cancel_on_signals), which would only
        # set an event of its own copy of the sweep
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not the process's main thread (never in a pool process)
        pass
    if owner is not None:
        _end_with_owner(owner)


def _end_with_owner(owner: int) -> None:
    """End this pool process when the process ``owner`` (the sweep's, which started the pool)
    is gone, so that a sweep killed (SIGTERM, SIGKILL, a crash) leaves no worker running on
    (one was left with parent pid 1 and 20 GB): on Linux, when ``owner`` is this process's
    parent (a forked or spawned pool), the kernel's parent-death signal (``prctl(2)``
    ``PR_SET_PDEATHSIG``, SIGKILL); everywhere, a daemon thread that ends the process
    (``os._exit``) once its parent is no longer the one it started with (a ``forkserver``
    pool's server ends with ``owner``), checked every :data:`PARENT_POLL_S` seconds."""
    parent = os.getppid()
    if parent == owner and sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl here: the watchdog alone
            pass
    if os.getppid() != parent:  # the parent ended before the signal was asked for
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="vtrain-parent-watch", daemon=True).start()


def stop_pool(pool: ProcessPoolExecutor, stopped: bool) -> None:
    """Shut ``pool`` down without waiting: the chunks not started are dropped; with
    ``stopped`` (the sweep was cancelled or failed), its processes are also terminated, so
    that a chunk still running does not keep a process (and this process, which waits for
    its pool's processes before it exits) alive until it ends."""
    if stopped:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            try:
                proc.terminate()
            except (OSError, ValueError, AttributeError):  # already gone
                pass
    pool.shutdown(wait=False, cancel_futures=True)


def solve_chunk(data: bytes | None, model, cluster, cost, jobs: list[tuple[tuple, list]],
                compiled: bool | None = None) -> list[tuple]:
    """Solve the batches of one chunk in this process (a pool or Dask worker).

    Parameters
    ----------
    data : bytes or None
        The profile store file's bytes (None: those given to the pool's initializer).
    model, cluster, cost : the session's parts
    jobs : list of ((p, m, schedule, v), list of ParallelPlan)
    compiled : bool, optional
        :func:`core.studies.sweep.batch.solve_batch`'s choice of the batch solver's compiled pass.

    Returns
    -------
    list of :func:`core.studies.sweep.batch.solve_batch` results, one per job, in order.
    """
    store, memo = _open_store(_INIT_DATA if data is None else data)
    # the memo serves one study: a long-lived worker (Dask's) handed another model or cluster
    # starts it afresh, so it does not grow with every study it ever ran
    study = (dataclasses.astuple(model), dataclasses.astuple(cluster))
    if memo.get(_STUDY) != study:
        memo.clear()
        memo[_STUDY] = study
    with gc_paused():  # as in the calling process
        return [solve_batch(model, cluster, cost, key, plans, store, memo, compiled)
                for key, plans in jobs]


def _jobs(chunks: list[list[Batch]], plans: list) -> list[list[tuple[tuple, list]]]:
    return [[(key, [plans[i] for i in idx]) for key, idx in chunk] for chunk in chunks]


def _largest_first(chunks: list[list[Batch]], compiled: bool = False) -> list[int]:
    """Chunk numbers by decreasing estimated work: the longest start first, so that no long
    chunk is left alone at the end (the results go to their rows whatever the order)."""
    cost = [sum(_batch_cost(b, compiled) for b in c) for c in chunks]
    return sorted(range(len(chunks)), key=lambda c: (-cost[c], c))


def _pool_context() -> Any:
    """``fork`` when this is a single-threaded POSIX process (the command line: the worker
    starts at once with everything this process has imported and read), else
    ``forkserver`` (POSIX) or ``spawn``: forking a process with other threads (the GUI's)
    is unsafe."""
    methods = multiprocessing.get_all_start_methods()
    if ("fork" in methods and threading.current_thread() is threading.main_thread()
            and threading.active_count() == 1):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _warm(compiled: bool) -> bool:
    """A worker's first task (the sweep is imported when this function is unpickled): with
    ``compiled``, load the compiled batch solver (Numba's import and its cached machine code,
    about 0.5 s) before any chunk comes."""
    if compiled:
        return fastpath_kernel.warm()
    return False


def start_pool(processes: int, compiled: bool) -> ProcessPoolExecutor:
    """A pool of ``processes`` worker processes started now, each warming up (:func:`_warm`)
    while the caller goes on (enumerating the plans); give it to :func:`run_on_pool` as
    ``pool`` and shut it down afterwards. The store is sent with the chunks."""
    pool = ProcessPoolExecutor(max_workers=processes, mp_context=_pool_context(),
                               initializer=_init_worker, initargs=(None, os.getpid()))
    for _ in range(processes):
        pool.submit(_warm, compiled)
    return pool


def run_on_pool(batches: list[Batch], plans: list, store, model, cluster, cost, *, workers: int,
                cancel: Any, on_result: Callable[[list[Batch], list[tuple]], None],
                compiled: bool | None = None,
                local: Callable[[list[tuple[tuple, list]], bool | None], list[tuple]] | None = None,
                pool: ProcessPoolExecutor | None = None,
                after_submit: Callable[[], None] | None = None) -> None:
    """Solve ``batches`` on ``workers`` processes; ``on_result(chunk, outs)`` is called in this
    thread for each finished chunk (in the order they finish). ``after_submit()``, when given,
    is called once in this thread right after the first chunks are sent: work of its own it
    does while the processes start on them.

    With ``local`` (a function ``(jobs, compiled)`` solving jobs here, as :func:`solve_chunk`
    does), this thread is one of the ``workers`` and a pool of ``workers - 1`` processes the
    others (:func:`_share_with_pool`): the batches are ordered by the batch solver's elements
    per plan; the side that has the compiled batch solver loaded takes them from the heavy end,
    the other from the light end, where the numpy solver costs least. That is this thread
    (``compiled``), or the pool: one from :func:`start_pool` warmed up with it while the
    plans were enumerated, or any pool when this thread may not load it (a thread of the
    desktop window's process: :func:`core.sim.fastpath_kernel.kept_out`); this thread then loads
    the compiled solver too (when it may) when the numpy solver would cost more on its
    estimated share of the light end than the loading (:data:`_KERNEL_LOAD_S`), and solves
    with numpy otherwise. The work starts at once and one
    process fewer is started. Without ``local``, a pool of ``workers`` processes solves chunks
    of :func:`chunk_batches`, largest first.

    Raises
    ------
    core.studies.sweep.cancel.SweepCancelled
        ``cancel`` was set: the chunks not started are dropped (a running one finishes
        in the background, its result unused).
    Exception
        Whatever a chunk raised (as the serial sweep would).
    """
    given = pool is not None
    if local is not None:
        procs = workers - 1
        if pool is None and procs > 0:
            pool = ProcessPoolExecutor(max_workers=procs, mp_context=_pool_context(),
                                       initializer=_init_worker,
                                       initargs=(store_bytes(store), os.getpid()))
        ok = False
        try:
            _share_with_pool(batches, plans, store, model, cluster, cost, procs=procs, pool=pool,
                             given=given, cancel=cancel, on_result=on_result, compiled=compiled,
                             local=local, after_submit=after_submit)
            ok = True
        finally:
            if pool is not None and not given:
                stop_pool(pool, stopped=not ok)
        return
    chunks = chunk_batches(batches, workers, bool(compiled))
    queue = deque(_largest_first(chunks, bool(compiled)))
    jobs = _jobs(chunks, plans)
    procs = workers if given else min(workers, len(chunks))
    data = store_bytes(store)
    if pool is None and procs > 0:
        pool = ProcessPoolExecutor(max_workers=procs, mp_context=_pool_context(),
                                   initializer=_init_worker, initargs=(data, os.getpid()))
    in_flight: dict[Any, int] = {}
    ok = False
    try:
        while queue or in_flight:
            check_cancelled(cancel)
            # each process has one chunk running and one waiting
            while queue and len(in_flight) < 2 * procs:
                c = queue.popleft()
                in_flight[pool.submit(solve_chunk, data if given else None, model, cluster, cost,
                                      jobs[c], compiled)] = c
            if after_submit is not None:
                after_submit()
                after_submit = None
            done, _ = futures_wait(set(in_flight), timeout=_POLL_S, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=in_flight.get):
                on_result(chunks[in_flight.pop(f)], f.result())
        ok = True
    finally:
        if pool is not None and not given:
            stop_pool(pool, stopped=not ok)


#: The pool's chunks while sharing with this thread: about this share of the work left over
#: the processes (guided self-scheduling: chunks shrink as the work runs out, so that neither
#: side waits long for the other's last chunk), and at least this many seconds of work.
_GUIDED_SHARE = 0.25
_MIN_CHUNK_S = 0.02


def _share_with_pool(batches: list[Batch], plans: list, store, model, cluster, cost, *, procs: int,
                     pool, given: bool, cancel: Any,
                     on_result: Callable[[list[Batch], list[tuple]], None], compiled: bool | None,
                     local: Callable[[list[tuple[tuple, list]], bool | None], list[tuple]],
                     after_submit: Callable[[], None] | None = None) -> None:
    """:func:`run_on_pool` with ``local``: this thread and a pool of ``procs`` processes take the
    batches from the two ends of one queue ordered by elements per plan.

    This thread takes one batch at a time (a few ms each) and between them keeps two chunks
    on each process, one running and one waiting (sent ahead, so that a process that finishes
    a chunk starts the next at once rather than waiting for this thread's batch to end); a
    chunk is consecutive batches of about :data:`_GUIDED_SHARE` of the estimated work left per
    process (at least :data:`_MIN_CHUNK_S`), so the chunks shrink as the queue empties and the
    two sides end close together.
    """
    # this thread may load the compiled solver (not a GUI worker: fastpath_kernel.kept_out)
    here = fastpath_kernel.may_load()
    # a warmed pool has the compiled solver loaded; one not warmed loads it on its first
    # chunk when this thread may not, in its own processes
    pool_heavy = bool(compiled) and (given or not here)
    # light to heavy (1F1B and GPipe batches of one (p, m) stay together)
    queue = deque(sorted(batches, key=lambda b: (b[0][0] * b[0][1] * b[0][3], b[0])))
    cost_of = {id(b): _batch_cost(b, bool(compiled)) for b in queue}
    left = sum(cost_of.values())
    pool_compiled, local_compiled = (None, compiled)
    if pool_heavy:  # this thread loads the compiled solver too when its share makes up for it
        pool_compiled = compiled
        saved_s = _light_share_elements(queue, cost_of, left / (procs + 1)) * (
            _ELEMENT_COST[False] - _ELEMENT_COST[True])
        local_compiled = compiled if here and saved_s > _KERNEL_LOAD_S else False
    data = store_bytes(store) if given else None
    in_flight: dict[Any, list[Batch]] = {}

    def take(from_heavy: bool) -> Batch:
        nonlocal left
        b = queue.pop() if from_heavy else queue.popleft()
        left -= cost_of[id(b)]
        return b

    def pool_chunk() -> list[Batch]:
        target = max(_MIN_CHUNK_S, _GUIDED_SHARE * left / (procs + 1))
        chunk, acc = [], 0.0
        while queue and (not chunk or acc < target):
            b = take(pool_heavy)
            chunk.append(b)
            acc += cost_of[id(b)]
        return chunk

    while queue or in_flight:
        check_cancelled(cancel)
        while pool is not None and procs > 0 and queue and len(in_flight) < 2 * procs:
            chunk = pool_chunk()
            in_flight[pool.submit(solve_chunk, data, model, cluster, cost, _jobs([chunk], plans)[0],
                                  pool_compiled)] = chunk
        if after_submit is not None:
            after_submit()
            after_submit = None
        if queue:
            b = take(not pool_heavy)
            on_result([b], local(_jobs([[b]], plans)[0], local_compiled))
            done = [f for f in in_flight if f.done()]
        elif in_flight:
            done, _ = futures_wait(set(in_flight), timeout=_POLL_S, return_when=FIRST_COMPLETED)
        else:
            done = []
        for f in done:
            on_result(in_flight.pop(f), f.result())


def _light_share_elements(queue, cost_of: dict[int, float], share: float) -> int:
    """Batch solver elements (``p * 3m * v`` per plan) of the batches at the light end of
    ``queue`` whose estimated work first reaches ``share`` seconds: about what the calling
    thread solves beside the pool."""
    acc, elements = 0.0, 0
    for b in queue:
        if acc >= share:
            break
        (p, m, _, v), idx = b
        acc += cost_of[id(b)]
        elements += p * 3 * m * v * len(idx)
    return elements


def run_on_dask(batches: list[Batch], plans: list, store, model, cluster, cost, *, workers: int,
                address: str, cancel: Any, on_result: Callable[[list[Batch], list[tuple]], None],
                compiled: bool | None = None, after_submit: Callable[[], None] | None = None) -> None:
    """Solve ``batches`` on a Dask distributed cluster: the scheduler at ``address``
    (``tcp://host:8786``), or with ``address == "local"`` a ``LocalCluster`` of ``workers``
    processes (one thread each) started and stopped here. The store's bytes are sent to
    the workers once (``Client.scatter``) and passed to every chunk. ``after_submit()``, when
    given, is called once in this thread after every chunk is sent.

    Raises
    ------
    ConfigError
        Dask is not installed, or no scheduler answers at ``address`` (field ``sweep.dask``).
    core.studies.sweep.cancel.SweepCancelled
        ``cancel`` was set (the chunks are cancelled on the cluster).
    Exception
        Whatever a chunk raised.
    """
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import wait as dask_wait
    except ImportError:
        raise ConfigError([FieldError("sweep.dask", "Dask is not installed: pip install "
                                      "'dask[distributed]' (or the 'dask' extra of vtrain)")]) from None
    local = None
    try:
        if address == "local":
            local = LocalCluster(n_workers=workers, processes=True, threads_per_worker=1,
                                 dashboard_address=None)
            client = Client(local)
        else:
            client = Client(address, timeout=f"{DASK_CONNECT_TIMEOUT_S}s")
    except (OSError, TimeoutError, ValueError) as exc:
        if local is not None:
            local.close()
        raise ConfigError([FieldError("sweep.dask", f"no Dask scheduler at {address!r}: "
                                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                                      )]) from None
    try:
        n_workers = max(1, len(client.scheduler_info().get("workers", {})) or workers)
        chunks = chunk_batches(batches, n_workers, bool(compiled))
        data = client.scatter(store_bytes(store), broadcast=True)
        jobs = _jobs(chunks, plans)
        futures = {client.submit(solve_chunk, data, model, cluster, cost, jobs[c], compiled,
                                 pure=False): c
                   for c in _largest_first(chunks, bool(compiled))}
        pending = set(futures)
        if after_submit is not None:
            after_submit()
        try:
            while pending:
                check_cancelled(cancel)
                try:
                    done, pending = dask_wait(list(pending), timeout=_POLL_S,
                                              return_when="FIRST_COMPLETED")
                    pending = set(pending)
                except TimeoutError:
                    continue
                for f in sorted(done, key=futures.get):
                    on_result(chunks[futures[f]], f.result())
        finally:
            if pending:
                client.cancel(list(pending))
    finally:
        client.close()
        if local is not None:
            local.close()


def default_workers() -> int:
    """All cores: ``os.cpu_count()`` (1 when unknown)."""
    return os.cpu_count() or 1
