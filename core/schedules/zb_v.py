"""ZB-V: the V-shaped zero-bubble schedule (:class:`ZeroBubbleV`).

Qi et al. 2024, "Pipeline Parallelism with Controllable Memory" (NeurIPS 2024; the ZB-V of the
zero-bubble pipeline-parallelism work): every stage holds two model chunks placed V-shape --
stage ``i`` holds virtual stages ``i`` (chunk 0) and ``2p-1-i`` (chunk 1), so the forward runs
down the stages on chunk 0 and back up on chunk 1, the loss is on stage 0 and the transfer from
virtual stage ``p-1`` to ``p`` stays on stage ``p-1``. The backward is split into B (input
gradient) and W (weight gradient), as in ZB-H1.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from core.schedules.base import (PHASE_B, PHASE_F, PHASE_W, NotInMegatron, PipelineSchedule,
                                 WorkOrder, order_of)

__all__ = ["ZeroBubbleV", "zbv_unit_schedule"]


@lru_cache(maxsize=64)
def zbv_unit_schedule(p: int, m: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """ZB-V's program of every stage: per stage the ``(phase, chunk, micro-batch)`` items in
    order, ``6*m`` each.

    The order is the list schedule of the items with unit times (F = B = W = 1 per chunk, free
    transfers), as Qi et al. build ZB-V's order by a greedy pass over unit costs. At each time
    step each idle stage starts, in this priority:

    1. a B whose input gradient is there (chunk 0 first, then chunk 1), the oldest micro-batch;
    2. an F whose activation is there (chunk 0 first, then chunk 1), when the stage holds fewer
       than ``2p`` chunk activations (F run, W not yet run: the memory cap, ``p`` micro-batches
       through all the stage's layers, 1F1B's peak on stage 0) and, for chunk 0, when the stage
       has run fewer than ``p - i`` more chunk-0 forwards than chunk-1 forwards (room for the
       returning chunk-1 forwards);
    3. the oldest W whose B has run (chunk 1 on a tie).

    Properties (tests check them for p <= 12): no stage ever holds more than ``2p`` chunk
    activations; with unit times the iteration takes ``6m + p - 1`` (the lower bound: stage
    ``p-1`` waits ``p-1`` before its first forward) to ``6m + p`` units when ``m >= 2p``, and
    never more than 1F1B's ``6(m + p - 1)``.

    Raises
    ------
    RuntimeError
        The pass stopped (a bug: it never does for p, m >= 1).
    """
    def vstage(i: int, c: int) -> int:
        return i if c == 0 else 2 * p - 1 - i

    done_at: dict[tuple[int, int, int], int] = {}    # (phase, virtual stage, micro-batch) -> end
    never = 1 << 62
    nf = [[0, 0] for _ in range(p)]
    nb = [[0, 0] for _ in range(p)]
    nw = [[0, 0] for _ in range(p)]
    order: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]
    left, t, cap = 6 * m * p, 0, 2 * p
    while left:
        for i in range(p):
            pick = None
            for c in (0, 1):  # 1. B
                j = nb[i][c]
                k = vstage(i, c)
                dep = (PHASE_F, k, j) if k == 2 * p - 1 else (PHASE_B, k + 1, j)
                if j < nf[i][c] and done_at.get(dep, never) <= t:
                    pick = (PHASE_B, c)
                    break
            if pick is None and nf[i][0] + nf[i][1] - nw[i][0] - nw[i][1] < cap:
                for c in (0, 1):  # 2. F
                    j = nf[i][c]
                    if j >= m or (c == 0 and nf[i][0] - nf[i][1] >= p - i):
                        continue
                    k = vstage(i, c)
                    if k == 0 or done_at.get((PHASE_F, k - 1, j), never) <= t:
                        pick = (PHASE_F, c)
                        break
            if pick is None:  # 3. W
                ready = [c for c in (0, 1) if nw[i][c] < nb[i][c]]
                if ready:
                    pick = (PHASE_W, min(ready, key=lambda c: (nw[i][c], -c)))
            if pick is None:
                continue
            ph, c = pick
            count = (nf, nb, nw)[ph][i]
            j = count[c]
            count[c] += 1
            done_at[(ph, vstage(i, c), j)] = t + 1
            order[i].append((ph, c, j))
            left -= 1
        t += 1
        if t > 12 * (m + p) + 12:
            raise RuntimeError(f"ZB-V order: no progress (p={p}, m={m})")
    return tuple(tuple(o) for o in order)


class ZeroBubbleV(PipelineSchedule):
    """ZB-V (Qi et al. 2024): two chunks per stage placed V-shape, backward split into B and W.

    Work order: :func:`zbv_unit_schedule`. Placement: chunk 0 of stage ``i`` is virtual stage
    ``i``, chunk 1 is ``2p-1-i``. Peak activations: ``2p`` chunk activations, i.e. ``p``
    micro-batches through all the stage's layers on every stage -- 1F1B's peak (stage 0), for
    ``m >= p``. Megatron-LM has no ZB-V (:meth:`megatron_args` refuses it); torchtitan runs it
    as ``ZBVZeroBubble`` (its importer does not map it yet).
    """

    name, title = "zb-v", "ZB-V"
    splits_backward = True
    fixed_chunks = 2
    placement_kind = "v"

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        return None  # depends on T_W and on the order's small slack (zbv_unit_schedule)

    def place(self, p: int, v: int) -> np.ndarray:
        i = np.arange(p, dtype=np.int64)
        return np.stack([i, 2 * p - 1 - i], axis=1)

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        items = np.asarray(zbv_unit_schedule(p, m)[stage], np.int64).reshape(-1, 3)
        return order_of(items[:, 0], items[:, 2], items[:, 1])

    def errors(self, p: int, m: int, v: int | None, num_layers: int, extra_slots: int = 0
               ) -> list[tuple[str, str]]:
        if v not in (None, 1, 2):
            return [("plan.virtual_pipeline_stages",
                     f"virtual_pipeline_stages={v}: ZB-V places 2 chunks per stage (leave it "
                     "empty)")]
        if num_layers is None:
            return [("plan.schedule", "ZB-V places its chunks V-shape; a custom pipeline layout "
                     "(pipeline_model_parallel_layout) is not supported with it")]
        slots = num_layers + extra_slots
        if slots % (2 * p):
            return [("plan.pipeline_parallel",
                     f"ZB-V needs the {slots} layer slots (num_layers"
                     f"{' + embedding/loss' if extra_slots else ''}) divisible by "
                     f"2*pipeline_parallel_size={2 * p}: each stage holds two equal chunks")]
        return []

    def megatron_args(self, v: int | None) -> list[str]:
        raise NotInMegatron("Megatron-LM's arguments have 1F1B and interleaved 1F1B only: "
                            "Megatron-LM has no ZB-V schedule")
