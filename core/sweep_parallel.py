"""Sweeps on several processes or a Dask cluster: the batches of :func:`core.sweep.run_sweep` in chunks.

:func:`core.sweep.run_sweep` cuts the plans of a sweep into batches of one
pipeline structure (p, m, schedule, v). Here consecutive batches are grouped
into chunks of about equal estimated work (:func:`chunk_batches`), sent largest
first; each chunk
is solved by :func:`solve_chunk` in another process -- a local process pool
(:func:`run_on_pool`) or the workers of a Dask distributed scheduler
(:func:`run_on_dask`) -- and the results are handed back chunk by chunk; the
caller puts each batch's figures at its rows. Every batch is solved exactly as
the serial loop solves it, so the result is the serial one, bit for bit.

The profile store travels as its image (:meth:`core.profile_store.ProfileStore.to_image`,
about 0.5 MB, no HDF5): each worker process reads it back once (with the same checks
as a store file) and keeps it, with its lookup memo, for the chunks that follow. No
h5py object is ever pickled, and workers never import h5py. The worker processes are started with ``forkserver`` (POSIX)
or ``spawn``, never ``fork``: the GUI calls this from a thread.

Dask is imported only by :func:`run_on_dask` (the optional ``dask`` extra).
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, Callable

from .config import ConfigError, FieldError

__all__ = ["chunk_batches", "solve_chunk", "store_bytes", "run_on_pool", "run_on_dask",
           "CHUNKS_PER_WORKER"]

#: Chunks per worker: enough for the work to balance and for progress and Cancel to be
#: timely, few enough that sending them costs little.
CHUNKS_PER_WORKER = 12
#: Estimated cost of one plan outside the batch solver and of one batch, in (stage, item,
#: plan) elements of the batch solver (fitted on the MT-NLG example: 52 us per plan, 2 ms per
#: batch, 28.5 ns per element).
_PLAN_COST = 2_000
_BATCH_COST = 70_000
#: How often (seconds) the caller's ``cancel`` is checked while chunks run.
_POLL_S = 0.1
#: How long to try to reach a Dask scheduler.
DASK_CONNECT_TIMEOUT_S = 10.0

Batch = tuple[tuple[int, int, str, int], list[int]]  # ((p, m, schedule, v), plan rows)

# per worker process: store bytes digest -> (store, lookup memo)
_WORKER_STORES: dict[str, tuple[Any, dict]] = {}
_INIT_DATA: bytes | None = None


def _batch_cost(batch: Batch) -> int:
    (p, m, _, v), idx = batch
    return _BATCH_COST + len(idx) * (_PLAN_COST + p * 3 * m * v)


def chunk_batches(batches: list[Batch], workers: int) -> list[list[Batch]]:
    """Consecutive batches grouped into about ``CHUNKS_PER_WORKER * workers`` chunks of equal
    estimated work (a batch's set-up, each plan's lookups and its share of the batch
    solver's ``p * 3m * v`` elements); every batch whole, the order kept."""
    total = sum(_batch_cost(b) for b in batches)
    target = max(1, total // max(1, CHUNKS_PER_WORKER * workers))
    chunks: list[list[Batch]] = [[]]
    acc = 0
    for b in batches:
        if chunks[-1] and acc >= target:
            chunks.append([])
            acc = 0
        chunks[-1].append(b)
        acc += _batch_cost(b)
    return chunks


def store_bytes(store: Any) -> bytes:
    """The profile store as its image (:meth:`core.profile_store.ProfileStore.to_image`; the
    store object itself is not changed)."""
    return store.to_image()


def _open_store(data: bytes) -> tuple[Any, dict]:
    """The store of ``data`` (a store image) and its lookup memo, read once per process."""
    digest = hashlib.sha256(data).hexdigest()
    hit = _WORKER_STORES.get(digest)
    if hit is None:
        from .profile_store import ProfileStore
        store = ProfileStore.from_image(data)
        hit = _WORKER_STORES[digest] = (store, {})
    return hit


def _init_worker(data: bytes) -> None:
    global _INIT_DATA
    _INIT_DATA = data


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
        :func:`core.sweep.solve_batch`'s choice of the batch solver's compiled pass.

    Returns
    -------
    list of :func:`core.sweep.solve_batch` results, one per job, in order.
    """
    from .sweep import solve_batch
    store, memo = _open_store(_INIT_DATA if data is None else data)
    return [solve_batch(model, cluster, cost, key, plans, store, memo, compiled)
            for key, plans in jobs]


def _cancelled(cancel: Any) -> bool:
    from .sweep import _is_cancelled
    return _is_cancelled(cancel)


def _jobs(chunks: list[list[Batch]], plans: list) -> list[list[tuple[tuple, list]]]:
    return [[(key, [plans[i] for i in idx]) for key, idx in chunk] for chunk in chunks]


def _largest_first(chunks: list[list[Batch]]) -> list[int]:
    """Chunk numbers by decreasing estimated work: the longest start first, so that no long
    chunk is left alone at the end (the results go to their rows whatever the order)."""
    cost = [sum(_batch_cost(b) for b in c) for c in chunks]
    return sorted(range(len(chunks)), key=lambda c: (-cost[c], c))


def run_on_pool(batches: list[Batch], plans: list, store, model, cluster, cost, *, workers: int,
                cancel: Any, on_result: Callable[[list[Batch], list[tuple]], None],
                compiled: bool | None = None,
                local: Callable[[list[tuple[tuple, list]]], list[tuple]] | None = None) -> None:
    """Solve ``batches`` on ``workers`` processes; ``on_result(chunk, outs)`` is called in this
    thread for each finished chunk (in the order they finish).

    With ``local`` (a function solving one chunk's jobs here, as :func:`solve_chunk` does),
    this thread is one of the ``workers``: a pool of ``workers - 1`` processes takes the
    largest chunks first while this thread solves the smallest ones, so the work starts at
    once (a new process needs about a second to import and open the store) and one
    process fewer is started. Without it, a pool of ``workers`` processes solves all.

    Raises
    ------
    core.sweep.SweepCancelled
        ``cancel`` was set: the chunks not started are dropped (a running one finishes
        in the background, its result unused).
    Exception
        Whatever a chunk raised (as the serial sweep would).
    """
    from collections import deque

    from .sweep import SweepCancelled
    chunks = chunk_batches(batches, workers)
    jobs = _jobs(chunks, plans)
    queue = deque(_largest_first(chunks))  # the pool takes from the left, this thread from the right
    procs = min(workers - (1 if local is not None else 0), len(chunks))
    pool = None
    if procs > 0:
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        pool = ProcessPoolExecutor(max_workers=procs, mp_context=ctx,
                                   initializer=_init_worker, initargs=(store_bytes(store),))
    in_flight: dict[Any, int] = {}
    try:
        while queue or in_flight:
            if _cancelled(cancel):
                raise SweepCancelled("sweep cancelled")
            while pool is not None and queue and len(in_flight) < procs + 1:
                c = queue.popleft()
                in_flight[pool.submit(solve_chunk, None, model, cluster, cost, jobs[c], compiled)] = c
            if local is not None and queue:
                c = queue.pop()
                on_result(chunks[c], local(jobs[c]))
                done = [f for f in in_flight if f.done()]
            elif in_flight:
                done, _ = futures_wait(set(in_flight), timeout=_POLL_S, return_when=FIRST_COMPLETED)
            else:
                done = []
            for f in sorted(done, key=in_flight.get):
                on_result(chunks[in_flight.pop(f)], f.result())
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def run_on_dask(batches: list[Batch], plans: list, store, model, cluster, cost, *, workers: int,
                address: str, cancel: Any, on_result: Callable[[list[Batch], list[tuple]], None],
                compiled: bool | None = None) -> None:
    """Solve ``batches`` on a Dask distributed cluster: the scheduler at ``address``
    (``tcp://host:8786``), or with ``address == "local"`` a ``LocalCluster`` of ``workers``
    processes (one thread each) started and stopped here. The store's bytes are sent to
    the workers once (``Client.scatter``) and passed to every chunk.

    Raises
    ------
    ConfigError
        Dask is not installed, or no scheduler answers at ``address`` (field ``sweep.dask``).
    core.sweep.SweepCancelled
        ``cancel`` was set (the chunks are cancelled on the cluster).
    Exception
        Whatever a chunk raised.
    """
    from .sweep import SweepCancelled
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
        chunks = chunk_batches(batches, n_workers)
        data = client.scatter(store_bytes(store), broadcast=True)
        jobs = _jobs(chunks, plans)
        futures = {client.submit(solve_chunk, data, model, cluster, cost, jobs[c], compiled,
                                 pure=False): c
                   for c in _largest_first(chunks)}
        pending = set(futures)
        try:
            while pending:
                if _cancelled(cancel):
                    raise SweepCancelled("sweep cancelled")
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
