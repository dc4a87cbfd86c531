"""1F1B (PipeDream-flush): the :class:`OneFOneB` schedule and its order helpers, which the
schedules built on 1F1B's order (interleaved, ZB-H1, GPipe without a pipeline) reuse.
"""

from __future__ import annotations

import numpy as np

from core.schedules.base import PHASE_B, PHASE_F, PipelineSchedule, WorkOrder, order_of

__all__ = ["OneFOneB", "one_f_one_b_all", "one_f_one_b_stage"]


def one_f_one_b_all(warm: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """1F1B's order of every stage at once over ``total`` forward items: ``is_backward`` and the
    forward-order index of each of the ``2*total`` items, int64 (p, 2*total), stage ``i``
    with ``warm[i]`` warm-up forwards (as :func:`one_f_one_b_stage` and :meth:`Interleaved.order`:
    the warm-up forwards, then forward ``warm + j`` and backward ``j`` in turn, then the
    remaining backwards)."""
    w = np.asarray(warm, np.int64)[:, None]                # (p, 1)
    k = np.arange(2 * total, dtype=np.int64)[None, :]      # (1, K)
    steady_end = 2 * total - w                             # first item of the cool-down
    j, odd = (k - w) // 2, (k - w) % 2
    in_steady = (k >= w) & (k < steady_end)
    is_bwd = (k >= steady_end) | (in_steady & (odd == 1))
    idx = np.where(k < w, k, np.where(k >= steady_end, k - total,
                                      np.where(odd == 1, j, w + j)))
    return is_bwd, idx


def one_f_one_b_stage(p: int, m: int, stage: int) -> tuple[int, np.ndarray, np.ndarray]:
    """1F1B order as ``(warm-up count, is_backward, micro-batch)``."""
    w = min(p - stage - 1, m)
    steady = m - w
    is_bwd = np.concatenate([np.zeros(w, bool), np.tile([False, True], steady), np.ones(w, bool)])
    mb = np.concatenate([np.arange(w), np.stack([np.arange(w, m), np.arange(steady)], 1).ravel(),
                         np.arange(steady, m)])
    return w, is_bwd, mb


class OneFOneB(PipelineSchedule):
    """1F1B, PipeDream-flush (Narayanan et al. 2021, Sec. 2.2).

    Stage ``i`` runs ``min(p-i-1, m)`` warm-up forwards, then one forward and
    one backward in turn, then the remaining backwards; at most ``p-i``
    micro-batches are in flight.
    """

    name, title = "1f1b", "1F1B"
    in_megatron = True

    def megatron_args(self, v: int | None) -> list[str]:
        return []  # Megatron-LM's default with p > 1 (forward_backward_pipelining_without_interleaving)

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        _, is_bwd, mb = one_f_one_b_stage(p, m, stage)
        return order_of(np.where(is_bwd, PHASE_B, PHASE_F), mb)

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        is_bwd, mb = one_f_one_b_all(np.minimum(p - np.arange(p) - 1, m), m)
        return np.where(is_bwd, PHASE_B, PHASE_F), mb, np.zeros_like(mb)
