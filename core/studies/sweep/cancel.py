"""Cancelling a sweep: the exception a cancelled sweep raises and the test of its ``cancel``.

Both the serial loop (:mod:`core.studies.sweep.run`) and the process pool and Dask drivers
(:mod:`core.studies.sweep.parallel`) check the caller's ``cancel`` here, between batches or
while chunks run, and raise :class:`SweepCancelled` when it is set. Nothing else belongs here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SweepCancelled", "is_cancelled", "check_cancelled"]


class SweepCancelled(Exception):
    """The sweep was cancelled through its ``cancel`` argument; no result is returned."""


def is_cancelled(cancel: Any) -> bool:
    """Whether ``cancel`` is set.

    Parameters
    ----------
    cancel : threading.Event, callable returning bool, or None
        An object with ``is_set()`` (an event) is asked that; any other is called; None is
        never set.
    """
    if cancel is None:
        return False
    if hasattr(cancel, "is_set"):
        return bool(cancel.is_set())
    return bool(cancel())


def check_cancelled(cancel: Any) -> None:
    """Raise :class:`SweepCancelled` when ``cancel`` is set (:func:`is_cancelled`).

    Raises
    ------
    SweepCancelled
        ``cancel`` is set.
    """
    if is_cancelled(cancel):
        raise SweepCancelled("sweep cancelled")
