"""The fast path's stage recurrence compiled with Numba: one topological pass instead of sweeps.

:func:`core.sim.fastpath.pipeline_iteration_times` computes, for every stage ``i``
and item ``k`` of its program, ``E[i, k] = S[i, k] + M[i, k]`` with the running
maximum ``M[i, k] = max(M[i, k-1], A[src[i, k]] + Q[i, k])`` (``A`` the arrival of the
item's send, ``E`` itself unless sends are overlapped) (a floor joins the
maximum for the first forward of each chunk), ``S`` the prefix sums of the item
durations and ``Q = D - S``. Its numpy loop repeats whole-stage
updates until nothing changes (about three per stage); :func:`solve_items` here
visits each item once, in an order where the item it waits for is already
done (each stage advances while it can, round-robin over the stages), and does
the same floating-point operations in the same order per element: the end
times are the numpy loop's, bit for bit (tests compare both).

Numba is imported on first use only, through its public API alone (``numba.njit(cache=True,
nogil=True)``): the compiled code is cached on disk, so later processes load it instead of
compiling (about 1-2 s, once per change of this file). :func:`available` says whether it can be
used; without Numba, or with ``VTRAIN_NO_NUMBA=1`` in the environment, the numpy loop runs.

Cost of loading it (Numba 0.68.1, NumPy 2.4.6, a warm disk cache; a fresh process each time,
``import`` + :func:`warm`, which includes the first call; 2 shared cores): 0.46-0.82 s wall,
0.46-0.53 s CPU with the machine lightly loaded (load 2), 0.56-0.75 s CPU under load 11; the
first call after it 7-20 ms. This module used to swap ``numba.np.linalg.ensure_blas`` while
the kernel loaded, so that Numba's NumPy support would not import ``scipy.linalg`` (a check for
``np.dot`` in compiled code, which the kernel does not use): that saved about 0.13 s CPU per
process that loads the kernel (0.33-0.43 s CPU, 0.46-0.64 s wall, measured alternately with the
above at load 2; 0.53-0.60 s CPU at load 11), against a serial MT-NLG sweep of about 3.5 s, but
it reached into Numba's private modules, which change between releases; it is gone.

Loading Numba holds the interpreter lock for seconds at a time (LLVM's start and the
machine code's loading are C calls), so a thread that loads it stops every other thread
of its process: in the desktop window, the GUI thread (2.8 to 10.5 s of frozen window
on the first sweep). The window's worker threads therefore run the core under
:func:`kept_out`: on such a thread :func:`available` answers False unless the kernel is
loaded already, and the sweep sends its compiled batches to its worker processes
(:mod:`core.studies.sweep.parallel`), which load Numba in their own interpreters.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import numpy as np

__all__ = ["available", "warm", "loaded", "solve_items", "kept_out", "may_load"]

_KERNEL = None
_TRIED = False
_THREAD = threading.local()  # .kept_out: depth of kept_out() blocks on this thread


@contextmanager
def kept_out():
    """While the block runs, this thread never loads Numba: :func:`available` is False here
    unless the kernel is loaded already (then it costs nothing to use). For threads that
    share their process with one that must keep answering (the GUI's workers); other
    threads and processes are not affected. Nested blocks count."""
    _THREAD.kept_out = getattr(_THREAD, "kept_out", 0) + 1
    try:
        yield
    finally:
        _THREAD.kept_out -= 1


def may_load() -> bool:
    """Whether this thread may use the compiled kernel: loaded already, or not in a
    :func:`kept_out` block (then :func:`available` says whether it can be loaded)."""
    return _KERNEL is not None or not getattr(_THREAD, "kept_out", 0)


def available() -> bool:
    """Whether the compiled kernel can be used (Numba importable, not disabled by
    ``VTRAIN_NO_NUMBA``, not kept out of this thread by :func:`kept_out`); imports Numba and
    compiles the kernel (or loads it from the cache) on the first call."""
    global _KERNEL, _TRIED
    if not may_load():
        return False  # not on this thread (kept_out): the numpy loop, or a worker process
    if not _TRIED:
        _TRIED = True
        if os.environ.get("VTRAIN_NO_NUMBA", "").strip() not in ("", "0"):
            return False
        try:
            kernel = _build()
            _first_call(kernel)  # the machine code loaded (or compiled) now
            _KERNEL = kernel
        except Exception:  # noqa: BLE001 -- any failure to import or compile: the numpy loop
            _KERNEL = None
    return _KERNEL is not None


def warm() -> bool:
    """Load the kernel now (Numba's import and the kernel's machine code, from its cache or
    compiled), so that the first batch does not wait for it; whether it is available."""
    return available()


def _first_call(kernel) -> None:
    """Run ``kernel`` once on a one-item structure (the argument types of :func:`solve_items`),
    which makes Numba load its machine code from the cache or compile it."""
    E = np.zeros((2, 1))
    kernel(np.zeros((1, 3, 1, 1)), np.zeros((1, 3, 1)), np.zeros((1, 1), np.int64),
           np.zeros((1, 1), np.int64), np.zeros((1, 1), np.bool_), np.ones((1, 1), np.int64),
           np.full((1, 1), -1, np.int64), np.zeros((1, 1, 1)), E, E, np.zeros((1, 1), np.bool_),
           np.zeros(1, np.bool_), False)


def loaded() -> bool:
    """Whether the kernel is loaded in this process already (no import is triggered)."""
    return _KERNEL is not None


def _build():
    import numba

    @numba.njit(cache=True, nogil=True)
    def kernel(table, hops, phase, chunk, sends, src, floor_of, ready, E, A, asyn, ov,
               lagging):  # pragma: no cover
        p, K = src.shape
        n = E.shape[1]
        done = np.zeros(p * K + 1, np.bool_)
        done[p * K] = True
        ptr = np.zeros(p, np.int64)
        S = np.zeros((p, n))           # running prefix sum of each stage's durations
        M = np.full((p, n), -np.inf)   # running maximum of E[src] + Q
        remaining = p * K
        while remaining > 0:
            progressed = False
            for i in range(p):
                k = ptr[i]
                while k < K and done[src[i, k]]:
                    r = src[i, k]
                    row = i * K + k
                    ph = phase[i, k]
                    ch = chunk[i, k]
                    c = floor_of[i, k]
                    send = sends[i, k]
                    a = lagging and asyn[i, k]
                    for j in range(n):
                        # the numpy path's D (table + 0.0, or + the hop of a blocking send),
                        # S = cumsum(D), Q = D - S
                        late = a and ov[j]  # an asynchronous send: in A, not in D
                        d = table[i, ph, ch, j] + (hops[i, ph, j] if send and not late else 0.0)
                        s = S[i, j] + d
                        S[i, j] = s
                        q = d - s
                        v = A[r, j] + q
                        if c >= 0:
                            lo = ready[i, c, j] + q
                            if lo > v:
                                v = lo
                        if v > M[i, j]:
                            M[i, j] = v
                        E[row, j] = s + M[i, j]
                        if lagging:  # an asynchronous send arrives its hop after the item's end
                            A[row, j] = E[row, j] + (hops[i, ph, j] if late else 0.0)
                    done[row] = True
                    k += 1
                    remaining -= 1
                    progressed = True
                ptr[i] = k
            if not progressed:
                return False  # a cycle: no item can start
        return True

    return kernel


def solve_items(table: np.ndarray, hops: np.ndarray, phase: np.ndarray, chunk: np.ndarray,
                sends: np.ndarray, src: np.ndarray, floor_of: np.ndarray, ready: np.ndarray,
                E: np.ndarray, A: np.ndarray | None = None, asyn: np.ndarray | None = None,
                ov: np.ndarray | None = None) -> None:
    """Fill ``E`` (float64, shape (p*K + 1, n); rows of stage ``i`` at ``i*K..i*K+K-1``, the
    last row 0, the others -inf) with the end time of every item of every plan, and with
    ``ov`` ``A`` (shape of ``E``, last row 0) with the arrival of each item's send.

    Parameters
    ----------
    table : float64 (p, 3, v, n)
        Duration of one item per stage, phase (F, B, W), chunk and plan, seconds.
    hops : float64 (p, 3, n)
        The transfer a sending item of each phase adds (0 for W).
    phase, chunk : int64 (p, K)
        Each item's phase and chunk.
    sends : bool (p, K)
        Whether the item's output is sent (its duration includes the hop).
    src : int64 (p, K)
        Row of ``E`` each item waits for (``p*K``: none).
    floor_of : int64 (p, K)
        Chunk whose ready time floors the item's start (its first forward), or -1.
    ready : float64 (p, v, n)
        Those ready times.
    A : float64, shape of ``E``, optional
        Arrival of each item's output at the item that waits for it (``E`` plus the hop of an
        asynchronous send); ``E`` itself (the default) without ``ov``.
    asyn : bool (p, K), optional
        The sending items whose sends are asynchronous in the plans ``ov``.
    ov : bool (n,), optional
        The plans that send ``asyn``'s outputs beside their compute (the hop is in ``A``, not
        in the item's duration); None: every send blocks.

    Raises
    ------
    AssertionError
        The structure has a cycle (a schedule bug), or the kernel is unavailable.
    """
    if not available():
        raise AssertionError("the compiled fast path is unavailable")
    c = np.ascontiguousarray
    lagging = ov is not None and A is not None and asyn is not None
    if not lagging:
        A, asyn, ov = E, np.zeros((1, 1), np.bool_), np.zeros(1, np.bool_)
    if not _KERNEL(c(table, np.float64), c(hops, np.float64), c(phase, np.int64),
                   c(chunk, np.int64), c(sends, np.bool_), c(src, np.int64),
                   c(floor_of, np.int64), c(ready, np.float64), E, A, c(asyn, np.bool_),
                   c(ov, np.bool_), lagging):
        raise AssertionError("pipeline structure has a cycle")
