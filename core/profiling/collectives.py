"""Measure collective-communication curves with torch.distributed processes on this machine.

``world_size`` processes are spawned (:func:`torch.multiprocessing.spawn`),
join a process group over a loopback TCP address (``tcp://127.0.0.1:PORT``,
a free port), and time all-reduce, all-gather, reduce-scatter and send/recv
over a range of buffer sizes. Conventions follow nccl-tests
(``doc/PERFORMANCE.md``): the size of a point is the whole buffer (the
all-reduce buffer, the all-gather output, the reduce-scatter input, the
buffer each rank sends), send/recv is the ring exchange (every rank sends to
the next and receives from the previous at once). A repetition times a few
back-to-back calls (as nccl-tests' iterations; enough for about 2 ms) after a
barrier, CUDA-synchronized on NCCL; each point is the median over
repetitions after warm-up on every rank, then the maximum over ranks.

A kind the backend does not implement is skipped with the reason (Gloo
lacked reduce-scatter in older torch releases).
"""

from __future__ import annotations

import datetime as _dt
import queue as _queue
import socket
import statistics
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from core.store.profile_store import COLLECTIVE_KINDS, ProfileStore
from core.profiling.progress import CancelToken, CollectiveRunResult, ProfileProgress, ProgressCallback

__all__ = ["measure_collectives", "default_sizes", "free_port"]


def default_sizes(backend: str) -> list[int]:
    """Buffer sizes in bytes: 4 KiB .. 16 MiB (gloo) or .. 1 GiB (nccl), factor 4 apart."""
    top = 24 if backend == "gloo" else 30
    return [1 << k for k in range(12, top + 1, 2)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ops(kind: str, nbytes: int, ws: int, rank: int, device: torch.device
         ) -> Callable[[], None]:
    """The call timed for one point (buffers allocated once)."""
    elems = max(ws, nbytes // 4 // ws * ws)  # float32 elements, divisible by the world size
    if kind == "all_reduce":
        buf = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(buf)
    if kind == "all_gather":
        out, inp = torch.empty(elems, device=device), torch.ones(elems // ws, device=device)
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: fn(out, inp)
    if kind == "reduce_scatter":
        out, inp = torch.empty(elems // ws, device=device), torch.ones(elems, device=device)
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: fn(out, inp)
    send, recv = torch.ones(elems, device=device), torch.empty(elems, device=device)

    def sendrecv() -> None:
        reqs = [dist.isend(send, (rank + 1) % ws), dist.irecv(recv, (rank - 1) % ws)]
        for r in reqs:
            r.wait()
    return sendrecv


def _worker(rank: int, ws: int, backend: str, port: int, sizes: list[int], kinds: list[str],
            timing: dict, q: Any) -> None:
    """One rank: time every kind and size; rank 0 puts results on ``q``."""
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            device = torch.device("cpu")
            torch.set_num_threads(1)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=ws, timeout=_dt.timedelta(seconds=300))

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def agree_max(x: float) -> float:
            t = torch.tensor([x], dtype=torch.float64 if device.type == "cpu" else torch.float32,
                             device=device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())

        for kind in kinds:
            ok, reason = 1.0, ""
            try:
                _ops(kind, sizes[0], ws, rank, device)()
                sync()
            except (RuntimeError, NotImplementedError, ValueError) as exc:
                ok, reason = 0.0, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            if agree_max(1.0 - ok) > 0:  # any rank failed: every rank skips the kind
                if rank == 0:
                    q.put(("skip", kind, reason or "not supported on another rank"))
                continue
            times = []
            for nbytes in sizes:
                fn = _ops(kind, nbytes, ws, rank, device)
                for _ in range(timing.get("warmup", 3)):
                    fn()
                sync()

                def once(calls: int) -> float:
                    dist.barrier()
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    sync()
                    return (time.perf_counter() - t0) / calls

                first = agree_max(once(1))
                # back-to-back calls per repetition (nccl-tests' iterations), enough for
                # ~2 ms, so that wake-up and barrier skew do not dominate small sizes
                calls = int(min(100, max(1, round(2e-3 / max(first, 1e-9)))))
                reps = int(min(timing.get("max_repeats", 30),
                               max(timing.get("min_repeats", 5),
                                   round(timing.get("target_s", 0.2) / max(first * calls, 1e-9)))))
                stat = min if timing.get("statistic") == "min" else statistics.median
                times.append(agree_max(stat([once(calls) for _ in range(reps)])))
                if rank == 0:
                    q.put(("point", kind, nbytes, times[-1]))
            if rank == 0:
                q.put(("curve", kind, list(sizes), times))
        dist.barrier()
        dist.destroy_process_group()
        if rank == 0:
            q.put(("done",))
    except BaseException:
        q.put(("error", rank, traceback.format_exc()))
        raise


def _checked_sizes(world_size: int, backend: str, kinds: Sequence[str],
                   sizes: Sequence[int] | None) -> list[int]:
    """The sorted distinct buffer sizes of a collective run (default :func:`default_sizes`),
    after checking its arguments (see :func:`measure_collectives`).

    Raises
    ------
    ValueError
        Bad world size, backend, kind or sizes; NCCL without enough GPUs."""
    if int(world_size) != world_size or world_size < 2:
        raise ValueError(f"world size must be an integer >= 2, got {world_size!r}")
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend {backend!r}: expected gloo or nccl")
    if not dist.is_available():
        raise ValueError(f"torch {torch.__version__} was built without torch.distributed")
    if backend == "nccl" and (not torch.cuda.is_available()
                              or torch.cuda.device_count() < world_size):
        raise ValueError(f"nccl with world size {world_size} needs {world_size} GPUs; "
                         f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} visible")
    unknown = [k for k in kinds if k not in COLLECTIVE_KINDS]
    if unknown:
        raise ValueError(f"unknown collective kinds {unknown}; expected {COLLECTIVE_KINDS}")
    sizes = sorted(set(int(s) for s in (sizes or default_sizes(backend))))
    if not sizes or sizes[0] < 4 * world_size:
        raise ValueError(f"sizes must be at least {4 * world_size} bytes (one float per rank)")
    return sizes


def _collective_store(out: Path, backend: str) -> ProfileStore:
    """The measured store the curves go to: ``out``'s, or a new one with a probe of this
    machine's device (``cuda:0`` for NCCL), saved to ``out``.

    Raises
    ------
    ValueError
        ``out`` holds a store that is not measured."""
    from core.profiling.device import parse_device, probe_device

    if out.exists():
        store = ProfileStore.open(out)
        if store.provenance.get("method") != "measured":
            raise ValueError(f"{out} is a {store.provenance.get('method')} store of "
                             f"{store.device_name}; add measured curves to a measured store "
                             f"(or a new file)")
        return store
    dev = parse_device("cuda:0" if backend == "nccl" else "cpu")
    info = probe_device(dev)
    store = ProfileStore(info.name, info.peak_flops, info.memory_bytes,
                         info.memory_bandwidth_bytes_per_s,
                         {"method": "measured",
                          "date": _dt.datetime.now(_dt.timezone.utc).isoformat(
                              timespec="seconds"),
                          "source": f"vtrain profile collectives ({backend}) with torch "
                                    f"{torch.__version__}",
                          "torch_version": str(torch.__version__),
                          "cuda_version": str(torch.version.cuda or "none"),
                          "threads": int(info.threads), **info.details},
                         {"kernel_overhead_s": info.kernel_overhead_s})
    store.save(out)
    return store


class _CollectiveRun:
    """The state of a collective run as the workers report: ``done`` of ``total`` points,
    ``saved`` curves, the ``curves`` (kind -> (sizes, times)) and ``skipped`` kinds (kind ->
    why); each curve is added to ``store`` (if any) and saved to ``out``."""

    def __init__(self, world_size: int, backend: str, total: int, num_sizes: int,
                 store: ProfileStore | None, out: Path | None, timing: dict | None,
                 progress: ProgressCallback | None):
        self.world_size, self.backend, self.total, self.num_sizes = (world_size, backend, total,
                                                                     num_sizes)
        self.store, self.out, self.timing, self.progress = store, out, timing, progress
        self.done, self.saved = 0, 0
        self.curves: dict[str, tuple[list[float], list[float]]] = {}
        self.skipped: dict[str, str] = {}
        self.rejected: dict[str, str] = {}

    def report(self, msg: str) -> None:
        """Report the run's state with ``msg`` to the progress callback, if any."""
        if self.progress is not None:
            self.progress(ProfileProgress(self.done, self.total, msg, self.saved))

    def on_result(self, msg: tuple) -> None:
        """Take a worker's ``("point", kind, bytes, seconds)``, ``("skip", kind, why)`` or
        ``("curve", kind, sizes, times)`` message (others are ignored)."""
        if msg[0] == "point":
            self.done += 1
            self.report(f"{msg[1]} {msg[2]:,} bytes on {self.world_size} ranks: "
                        f"{msg[3] * 1e6:,.1f} us")
        elif msg[0] == "skip":
            self.skipped[msg[1]] = msg[2]
            self.done += self.num_sizes
            self.report(f"{msg[1]} skipped: {msg[2]}")
        elif msg[0] == "curve":
            kind, xs, ts = msg[1], msg[2], msg[3]
            store = self.store
            if store is not None:
                try:  # a curve the store refuses is reported; the other kinds go on
                    store.add_collective(kind, self.world_size, np.array(xs, float),
                                         np.array(ts, float))
                except ValueError as exc:
                    self.rejected[kind] = str(exc)
                    self.report(f"{kind}: not stored ({exc})")
                    return
            self.curves[kind] = (xs, ts)
            if store is not None:
                col = dict(store.provenance.get("collectives", {}))
                col[f"{kind}/{self.world_size}"] = {
                    "backend": self.backend, "torch_version": str(torch.__version__),
                    "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "timing": f"{(self.timing or {}).get('statistic', 'median')} over "
                              "repetitions after warm-up, max over ranks; nccl-tests size "
                              "convention"}
                store.provenance["collectives"] = col
                store.save(self.out)
                self.saved += 1
            self.report(f"{kind}: {len(xs)} sizes measured" +
                        (f", saved to {self.out}" if store else ""))


def _stop(procs: Any) -> None:
    """Terminate the worker processes still alive and wait up to 5 s for each."""
    for p in procs.processes:
        if p.is_alive():
            p.terminate()
    for p in procs.processes:
        p.join(5)


def _collect(procs: Any, q: Any, run: _CollectiveRun, cancel: CancelToken | None,
             timeout_s: float) -> str | None:
    """Take the workers' messages from ``q`` into ``run`` until they are done, fail, are
    cancelled or time out (then they are stopped). Returns the error (None when they finished
    or were cancelled)."""
    finished, error = False, None
    deadline = time.monotonic() + timeout_s
    while True:
        if cancel is not None and cancel.is_set():
            _stop(procs)
            break
        if time.monotonic() > deadline:
            _stop(procs)
            error = f"collective benchmark timed out after {timeout_s:.0f} s"
            break
        try:
            msg = q.get(timeout=0.1)
        except _queue.Empty:
            if all(not p.is_alive() for p in procs.processes):
                if not finished and error is None:
                    codes = [p.exitcode for p in procs.processes]
                    error = f"collective workers exited without a result (exit codes {codes})"
                break
            continue
        if msg[0] == "error":
            error = f"rank {msg[1]} failed:\n{msg[2]}"
            _stop(procs)
            break
        if msg[0] == "done":
            finished = True
        else:
            run.on_result(msg)
    if finished:
        procs.join(timeout=30)
    return error


def measure_collectives(world_size: int, backend: str, *, sizes: Sequence[int] | None = None,
                        kinds: Sequence[str] = COLLECTIVE_KINDS, out: str | Path | None = None,
                        progress: ProgressCallback | None = None,
                        cancel: CancelToken | None = None, timing: dict | None = None,
                        timeout_s: float = 1800.0) -> CollectiveRunResult:
    """Time collectives over ``world_size`` local processes and optionally store the curves.

    Parameters
    ----------
    world_size : int
        Processes (ranks), >= 2. With ``nccl`` one GPU each (``cuda:rank``).
    backend : {"gloo", "nccl"}
    sizes : sequence of int, optional
        Buffer sizes in bytes (nccl-tests convention); default :func:`default_sizes`.
    kinds : sequence of str
        Subset of :data:`core.store.profile_store.COLLECTIVE_KINDS`.
    out : str or Path, optional
        Store file: curves are added to it (created with a probe of this
        machine's device if missing) and it is saved atomically after each kind.
    progress : callable, optional
        Called with :class:`ProfileProgress` per measured point, on this thread.
    cancel : object with ``is_set()``, optional
        When set, the worker processes are terminated; curves saved so far stay.
    timing : dict, optional
        ``warmup``, ``min_repeats``, ``max_repeats``, ``target_s`` per point, and
        ``statistic``: ``"median"`` (default) or ``"min"`` over the repetitions
        (the minimum resists other processes competing for the CPU).
    timeout_s : float
        Give up (terminate the workers) after this many seconds.

    Returns
    -------
    CollectiveRunResult

    Raises
    ------
    ValueError
        Bad world size, backend, kind or sizes; NCCL without enough GPUs; ``out``
        is not a measured store.
    RuntimeError
        A worker failed (its traceback in the message) or the run timed out.
    """
    sizes = _checked_sizes(world_size, backend, kinds, sizes)
    t_start = time.perf_counter()
    if out is not None:
        out = Path(out)
    store = _collective_store(out, backend) if out is not None else None
    run = _CollectiveRun(world_size, backend, len(kinds) * len(sizes), len(sizes), store, out,
                         timing, progress)
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    procs = tmp.start_processes(_worker, args=(world_size, backend, free_port(), sizes,
                                               list(kinds), dict(timing or {}), q),
                                nprocs=world_size, join=False, start_method="spawn")
    try:
        error = _collect(procs, q, run, cancel, timeout_s)
    except BaseException:
        _stop(procs)
        raise
    if error is not None:
        raise RuntimeError(error)
    curves, skipped = run.curves, run.skipped
    return CollectiveRunResult(curves, skipped, out if store is not None else None, world_size,
                               backend, time.perf_counter() - t_start, rejected=run.rejected)

