"""GPipe: the :class:`GPipe` schedule (all forwards, then all backwards).
"""

from __future__ import annotations

import numpy as np

from core.schedules.base import PHASE_B, PHASE_F, PipelineSchedule, WorkOrder, order_of
from core.schedules.one_f_one_b import OneFOneB

__all__ = ["GPipe"]


class GPipe(PipelineSchedule):
    """GPipe (Huang et al. 2019): all forwards, then all backwards.

    With one stage there is no pipeline: Megatron runs each micro-batch's
    forward and backward in turn (``forward_backward_no_pipelining``), so one
    micro-batch is in flight, as with 1F1B.
    """

    name, title = "gpipe", "GPipe"

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        if p == 1:  # no pipeline: Megatron's forward_backward_no_pipelining, one micro-batch at a time
            return OneFOneB().order(p, m, stage, v)
        return order_of(np.repeat([PHASE_F, PHASE_B], m), np.concatenate([np.arange(m)] * 2))

    def in_flight_steady_from(self, p: int, v: int) -> int | None:
        """With a pipeline every forward runs before the first backward: the counts grow
        with ``m`` (:meth:`in_flight_closed_form`); without one, 1F1B's."""
        return None if p > 1 else 2

    def in_flight_closed_form(self, p: int, m: int, v: int) -> tuple[tuple[float, ...], int] | None:
        """``m`` micro-batches in flight on every stage, and ``m`` losses on the last, when
        ``p > 1`` (all forwards, then all backwards: Huang et al. 2019); None without a
        pipeline (1F1B's order)."""
        return ((float(m),) * p, m) if p > 1 else None

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if p == 1:
            return OneFOneB().orders(p, m, v)
        phase = np.broadcast_to(np.repeat(np.array([PHASE_F, PHASE_B], np.int64), m), (p, 2 * m))
        mb = np.broadcast_to(np.tile(np.arange(m, dtype=np.int64), 2), (p, 2 * m))
        return phase.copy(), mb.copy(), np.zeros((p, 2 * m), np.int64)
