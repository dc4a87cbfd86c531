"""Progress, cancel and result types of long profiling work (no torch, no Qt).

A caller (CLI, GUI worker, test) passes a ``progress`` callable and a
``cancel`` object with an ``is_set()`` method (a :class:`threading.Event`).
The work calls ``progress`` from the thread it runs on, checks ``cancel``
between measurements, and saves its store after every finished shape group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

__all__ = ["ProfileProgress", "ProgressCallback", "CancelToken", "ProfileRunResult",
           "CollectiveRunResult"]


@dataclass(frozen=True)
class ProfileProgress:
    """One progress report.

    Attributes
    ----------
    done, total : int
        Finished and total steps (a step is one micro-batch size of one shape
        group, one optimizer size, the device probe or one collective kind).
    message : str
        What just finished or starts, for a status line.
    groups_saved : int
        Shape groups (or collective kinds) already saved to the store file.
    """

    done: int
    total: int
    message: str
    groups_saved: int = 0

    @property
    def fraction(self) -> float:
        """``done / total`` in [0, 1]."""
        return self.done / self.total if self.total else 1.0


ProgressCallback = Callable[[ProfileProgress], None]


class CancelToken(Protocol):
    """Anything with ``is_set() -> bool``, e.g. :class:`threading.Event`."""

    def is_set(self) -> bool: ...


@dataclass
class ProfileRunResult:
    """Outcome of :func:`core.profiling.run_profile`.

    Attributes
    ----------
    path : Path
        The store file (valid whatever happened: it is rewritten atomically
        after every finished shape group).
    store : ProfileStore
        The store as last saved.
    groups_done, groups_total : int
        Shape groups measured and asked for.
    cancelled : bool
        The cancel token was set; the store holds the groups finished before.
    wall_s : float
        Seconds the run took.
    """

    path: Path
    store: Any
    groups_done: int
    groups_total: int
    cancelled: bool
    wall_s: float


@dataclass
class CollectiveRunResult:
    """Outcome of :func:`core.profiling.run_collectives`.

    Attributes
    ----------
    curves : dict[str, tuple[list[float], list[float]]]
        kind -> (bytes, seconds) measured over ``world_size`` ranks.
    skipped : dict[str, str]
        kind -> why it was not measured (e.g. gloo has no reduce_scatter).
    path : Path or None
        The store the curves were added to, if any.
    world_size : int
    backend : str
    wall_s : float
    rejected : dict[str, str]
        kind -> why its measured curve was not stored (the store's checks: a time that falls
        as the size grows, usually another process competing for the CPU); not in ``curves``.
    """

    curves: dict[str, tuple[list[float], list[float]]]
    skipped: dict[str, str]
    path: Path | None
    world_size: int
    backend: str
    wall_s: float
    notes: dict[str, Any] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
