"""Interleaved 1F1B: the :class:`Interleaved` schedule (``v`` chunks per stage, Megatron-Core's
order and rules).
"""

from __future__ import annotations

import numpy as np

from core.schedules.base import PHASE_B, PHASE_F, PipelineSchedule, WorkOrder, order_of
from core.schedules.one_f_one_b import one_f_one_b_all

__all__ = ["Interleaved", "MEGATRON_CORE_MICROBATCH_RULE", "megatron_core_refusal"]

#: Where Megatron-Core checks the interleaved schedule's micro-batch count m against the
#: pipeline size p and N = ``microbatch_group_size_per_vp_stage`` (default p,
#: ``ModelParallelConfig.__post_init__``): megatron-core 0.16.1,
#: ``megatron/core/pipeline_parallel/schedules.py`` lines 995-1015,
#: ``if (N > num_microbatches or N < pipeline_parallel_size): raise ValueError('The number of
#: contiguous micro-batches in a virtual pipeline stage should range in [PP=.., M=..]')`` and
#: ``final_microbatch_group_size = num_microbatches % N; if 0 < final_microbatch_group_size <
#: pipeline_parallel_size: raise RuntimeError('The remainder of M (the total micro-batches)
#: divided by N ... should be 0, or larger than or equal to the pipeline-parallel size ...')``.
MEGATRON_CORE_MICROBATCH_RULE = ("Megatron-Core (0.16.1, pipeline_parallel/schedules.py "
                                 "forward_backward_pipelining_with_interleaving)")


def megatron_core_refusal(p: int, m: int, n: int | None = None) -> str | None:
    """Megatron-Core's own message where ``forward_backward_pipelining_with_interleaving``
    refuses ``m`` micro-batches on ``p`` stages with ``n`` contiguous micro-batches per virtual
    stage (``--microbatch-group-size-per-virtual-pipeline-stage``; None: its default ``p``);
    None where it runs them (:data:`MEGATRON_CORE_MICROBATCH_RULE`). The texts are Megatron's,
    its missing space in "stageshould" included."""
    n = p if n is None else n
    if n > m or n < p:  # ValueError
        return ("The number of contiguous micro-batches in a virtual pipeline stage"
                f"should range in [PP={p} , M={m}]")
    final = m % n
    if 0 < final < p:  # RuntimeError
        return ("The remainder of M (the total micro-batches) divided by N (number of "
                "contiguous micro-batches in a virtual pipeline stage) should be 0, or larger "
                f"than or equal to the pipeline-parallel size, but it is {final}. Otherwise, it "
                "introduces dependency bubbles in the pipeline and reduces throughput.")
    return None


class Interleaved(PipelineSchedule):
    """Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2.2), in Megatron-Core's order.

    Each stage holds ``v`` chunks of ``L/(p*v)`` layers. Megatron-Core's
    ``forward_backward_pipelining_with_interleaving``: ``m*v`` forward and
    ``m*v`` backward items; warm-up ``(p-i-1)*2 + (v-1)*p`` forwards on stage
    ``i``, capped at ``m*v`` (Megatron-Core ``schedules.get_pp_rank_microbatches``, with
    ``microbatch_group_size_per_vp_stage`` at its default ``p``; the older rule that ran every
    forward first when ``m == p`` is gone from Megatron-Core), then one forward and one backward in
    turn, then the remaining backwards. Item ``k`` in forward order runs chunk
    ``(k mod p*v) // p`` on micro-batch ``(k // (p*v))*p + k mod p``; backward
    items run the chunks in reverse (``get_schedule_table`` with groups of ``p``). Megatron-Core
    refuses an ``m`` that is not a multiple of ``p`` with ``N`` at its default ``p``
    (:meth:`order_errors`); with ``N != p`` it runs orders not modelled here. Ideal bubble:
    ``(p-1)/(v*m)`` of the ideal time.
    """

    name, title = "interleaved", "Interleaved 1F1B"
    uses_virtual_stages = True
    in_megatron = True

    def megatron_args(self, v: int | None) -> list[str]:
        return ["--num-virtual-stages-per-pipeline-rank", str(v)]

    def ideal_bubble_fraction(self, p: int, m: int, v: int) -> float | None:
        # bubble (p-1)/(v*m) of the ideal time, i.e. this share of the iteration
        return (p - 1) / (v * m + p - 1)

    def order(self, p: int, m: int, stage: int, v: int) -> WorkOrder:
        total = m * v
        warm = min((p - stage - 1) * 2 + (v - 1) * p, total)
        k = np.arange(total)
        group, within = k // (p * v), k % (p * v)
        mb = group * p + k % p
        f_chunk = within // p
        b_chunk = v - 1 - f_chunk
        remaining = total - warm
        is_bwd = np.concatenate([np.zeros(warm, bool), np.tile([False, True], remaining),
                                 np.ones(warm, bool)])
        idx = np.concatenate([np.arange(warm),
                              np.stack([np.arange(warm, total), np.arange(remaining)], 1).ravel(),
                              np.arange(remaining, total)])
        return order_of(np.where(is_bwd, PHASE_B, PHASE_F), mb[idx],
                      np.where(is_bwd, b_chunk[idx], f_chunk[idx]))

    def orders(self, p: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        total = m * v
        stage = np.arange(p, dtype=np.int64)
        warm = np.minimum((p - stage - 1) * 2 + (v - 1) * p, total)
        k = np.arange(total, dtype=np.int64)
        group, within = k // (p * v), k % (p * v)
        mb = group * p + k % p
        f_chunk = within // p
        b_chunk = v - 1 - f_chunk
        is_bwd, idx = one_f_one_b_all(warm, total)
        return (np.where(is_bwd, PHASE_B, PHASE_F), mb[idx],
                np.where(is_bwd, b_chunk[idx], f_chunk[idx]))

    def async_sends(self, p: int, m: int, v: int) -> np.ndarray:
        """The steady state's items (one forward and one backward in turn, after stage ``i``'s
        warm-up forwards and before its cool-down backwards): with ``overlap_p2p_comm``
        Megatron-Core issues their sends with ``overlap_p2p_comm=True`` (``pp_post_forward``,
        ``pp_post_backward``: no wait but for the previous send of the kind), while the warm-up
        forwards' and the cool-down backwards' ``send_forward_recv_forward`` /
        ``send_backward_recv_backward`` wait for their transfers (with
        ``overlap_p2p_comm_warmup_flush`` at its default, false). Bool (p, 2*m*v)."""
        total = m * v
        warm = np.minimum((p - np.arange(p) - 1) * 2 + (v - 1) * p, total)[:, None]
        k = np.arange(2 * total)[None, :]
        return (k >= warm) & (k < 2 * total - warm)

    def errors(self, p: int, m: int, v: int | None, num_layers: int, extra_slots: int = 0
               ) -> list[tuple[str, str]]:
        errs = []
        if v is None or v < 2:
            return [("plan.virtual_pipeline_stages",
                     f"schedule 'interleaved' needs virtual_pipeline_stages >= 2, got {v!r}")]
        if p < 2:
            errs.append(("plan.pipeline_parallel",
                         "schedule 'interleaved' needs pipeline_parallel_size >= 2"))
        if num_layers is None:  # a custom pipeline layout places the layers
            pass
        elif extra_slots and (num_layers + extra_slots) % (p * v):
            errs.append(("plan.virtual_pipeline_stages",
                         f"num_layers={num_layers} + embedding + loss = {num_layers + extra_slots} "
                         f"layer slots are not divisible by pipeline_parallel_size*"
                         f"virtual_pipeline_stages={p}*{v}={p * v} (Megatron-Core: with "
                         "account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_"
                         "split, (num_layers + embedding + loss) % (p * v) == 0)"))
        elif not extra_slots and num_layers is not None and num_layers % (p * v):
            errs.append(("plan.virtual_pipeline_stages",
                         f"num_layers={num_layers} is not divisible by pipeline_parallel_size*"
                         f"virtual_pipeline_stages={p}*{v}={p * v} (Megatron: layers per "
                         "virtual stage must be whole)"))
        return errs + self.order_errors(p, m, v)

    def order_errors(self, p: int, m: int, v: int) -> list[tuple[str, str]]:
        # Megatron-Core's check with N at its default p: N > m (m < p) raises ValueError,
        # 0 < m % N < p (any other m not a multiple of p) RuntimeError; m % p == 0 passes both.
        # The order below needs it too: it runs the micro-batches in groups of p
        # (``(k // (p*v))*p + k mod p``)
        if p >= 1 and megatron_core_refusal(p, m) is not None:
            why = (f"N={p} > m={m}" if m < p else f"0 < m % N = {m % p} < pipeline size {p}")
            return [("plan.global_batch_size",
                     f"the interleaved schedule needs the number of micro-batches "
                     f"m=global_batch_size/(data_parallel*micro_batch_size)={m} to be a "
                     f"multiple of pipeline_parallel_size={p}: {MEGATRON_CORE_MICROBATCH_RULE} "
                     f"refuses N > m and 0 < m % N < p, with N = "
                     f"--microbatch-group-size-per-virtual-pipeline-stage at its default p "
                     f"(here {why})")]
        return []
