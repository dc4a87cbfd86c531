"""Pacing a sweep's thread: the garbage collector paused, the interpreter handed to others.

A sweep's loops (:mod:`core.studies.sweep.space`, :mod:`core.studies.sweep.batch`,
:mod:`core.studies.sweep.bound`) call :func:`yield_interpreter` so that the desktop window's
thread keeps answering while a worker thread sweeps, and the drivers (:mod:`core.studies.sweep.run`
and the pool's processes, :mod:`core.studies.sweep.parallel`) run under :func:`gc_paused`.
Process-wide state only; nothing about plans belongs here.
"""

from __future__ import annotations

import gc
import threading
import time
from contextlib import contextmanager

__all__ = ["gc_paused", "yield_interpreter", "YIELD_EVERY_S"]

_GC_LOCK = threading.Lock()
_GC_PAUSES = 0         # sweeps (threads) running in gc_paused
_GC_WAS_ENABLED = True


#: A sweep on a thread other than the main one hands the interpreter to the other threads
#: this often, seconds (:func:`yield_interpreter`).
YIELD_EVERY_S = 0.02
_YIELD = threading.local()


def yield_interpreter() -> None:
    """On a thread other than the main one (the window's sweep worker), sleep 0.5 ms once every
    :data:`YIELD_EVERY_S` of work, so that the other threads (the GUI thread) take the
    interpreter lock. Without it they can wait for it for up to 0.7 s: the sweep's loops make
    many short numpy calls, each of which releases the lock and takes it back at once, and
    CPython's ``take_gil`` asks a holder to drop the lock only after a waiter's timed wait
    sees no switch in between, which these releases always are. The cost: 0.5 ms per 20 ms
    (2.5 %), none on the main thread (the command line)."""
    if threading.current_thread() is threading.main_thread():
        return
    now = time.perf_counter()
    last = getattr(_YIELD, "last", None)
    if last is None:
        _YIELD.last = now
    elif now - last >= YIELD_EVERY_S:
        time.sleep(0.0005)
        _YIELD.last = time.perf_counter()


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector off while the block runs, then as it was.

    A sweep allocates hundreds of thousands of objects that hold no reference cycles (plans,
    keys, small arrays: the MT-NLG example leaves about 800 objects in cycles in all), and the
    collector's passes over the growing heap find nothing: about 0.25 s of its 3.5 s on one
    core. Reference counting frees everything else as usual; what is in cycles is collected
    when the collector runs again. Nested and concurrent uses (threads) count: the collector
    is restored when the last one ends.

    On a thread other than the main one (the window's sweep worker) the objects alive then
    are first frozen (``gc.freeze()``: kept out of every later collection), since the
    collection that follows the pause would otherwise go over all of them (the MT-NLG
    example's sweep leaves about 390,000 objects: 120 ms with the interpreter held, a stall
    of the window). They are still freed by reference counting when the result is dropped;
    only reference cycles among them (a few hundred) are never collected.
    """
    global _GC_PAUSES, _GC_WAS_ENABLED
    with _GC_LOCK:
        if _GC_PAUSES == 0:
            _GC_WAS_ENABLED = gc.isenabled()
            gc.disable()
        _GC_PAUSES += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSES -= 1
            if _GC_PAUSES == 0 and _GC_WAS_ENABLED:
                if threading.current_thread() is not threading.main_thread():
                    gc.freeze()
                gc.enable()
