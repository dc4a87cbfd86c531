"""Zero-bubble schedules with one chunk per stage: :class:`ZeroBubbleH1` (ZB-H1, Qi et al. 2024).
"""

from __future__ import annotations

import numpy as np

from core.schedules.base import PHASE_B, PHASE_F, PHASE_W, PipelineSchedule, WorkOrder, order_of
from core.schedules.one_f_one_b import one_f_one_b_stage, one_f_one_b_all

__all__ = ["ZeroBubbleH1"]


class ZeroBubbleH1(PipelineSchedule):
    """ZB-H1 zero-bubble schedule (Qi et al., ICLR 2024, Sec. 3.1).

    The backward is split into B (input gradient, on the critical path
    between stages) and W (weight gradient, free to move). F and B follow
    1F1B; stage ``i`` defers each W by ``i`` micro-batches (the W of
    micro-batch ``j`` runs after the B of micro-batch ``j+i``), which fills
    the cool-down bubble while keeping at most ``p`` micro-batches in flight
    on any stage -- the peak of 1F1B (stage 0). With uniform stages and free
    communication the bubble is ``(p-1)(T_F + T_B - T_W)`` against 1F1B's
    ``(p-1)(T_F + T_B + T_W)``.
    """

    name, title = "zb-h1", "ZB-H1"
    splits_backward = True

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        return None  # depends on T_W / (T_F + T_B)

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        # 1F1B's F and B; the B of micro-batch j >= stage is followed by the W of j - stage
        # (the running W count then equals j - stage, so "j - next_w >= stage" holds exactly
        # there); the W not placed so far close the program.
        _, is_bwd, mb = one_f_one_b_stage(p, m, stage)
        ins = is_bwd & (mb >= stage)
        copies = 1 + ins.astype(np.int64)
        idx = np.repeat(np.arange(is_bwd.shape[0]), copies)
        phase = np.where(is_bwd, PHASE_B, PHASE_F)[idx]
        mbs = mb[idx]
        is_w = np.zeros(idx.shape[0], bool)
        is_w[(np.cumsum(copies) - 1)[ins]] = True  # the second copy of each B followed by a W
        phase[is_w] = PHASE_W
        mbs[is_w] -= stage
        placed = int(ins.sum())
        return order_of(np.concatenate([phase, np.full(m - placed, PHASE_W)]),
                      np.concatenate([mbs, np.arange(placed, m)]))

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # :meth:`order` for every stage at once: each item of 1F1B at its place after the
        # W inserted before it, each inserted W right after its B, the W left over at the end
        stage = np.arange(p, dtype=np.int64)[:, None]
        is_bwd, mb = one_f_one_b_all(np.minimum(p - stage[:, 0] - 1, m), m)
        ins = is_bwd & (mb >= stage)
        pos = np.cumsum(1 + ins, axis=1) - (1 + ins)  # each 1F1B item's place in its row
        K = 3 * m
        phase = np.full((p, K), PHASE_W, np.int64)
        mbs = np.broadcast_to(np.arange(K, dtype=np.int64) - 2 * m, (p, K)).copy()  # the tail
        rows = np.broadcast_to(stage, pos.shape)
        phase[rows, pos] = np.where(is_bwd, PHASE_B, PHASE_F)
        mbs[rows, pos] = mb
        mbs[rows[ins], pos[ins] + 1] = (mb - stage)[ins]
        return phase, mbs, np.zeros((p, K), np.int64)

    def _order_loop(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        """The rule of :meth:`order` item by item (the reference the tests compare with)."""
        _, is_bwd, mb = one_f_one_b_stage(p, m, stage)
        phases, mbs = [], []
        next_w = 0
        for bwd, j in zip(is_bwd.tolist(), mb.tolist()):
            phases.append(PHASE_B if bwd else PHASE_F)
            mbs.append(j)
            if bwd and j - next_w >= stage:
                phases.append(PHASE_W)
                mbs.append(next_w)
                next_w += 1
        phases += [PHASE_W] * (m - next_w)
        mbs += list(range(next_w, m))
        return order_of(phases, mbs)
