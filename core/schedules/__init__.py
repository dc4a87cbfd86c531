"""Pipeline schedules: one module per schedule, registered by name.

What belongs here: :mod:`core.schedules.base` (the :class:`PipelineSchedule` protocol, the
registry, chunk-to-stage placement, the in-flight counts of the memory model) and one module
per schedule -- :mod:`~core.schedules.gpipe`, :mod:`~core.schedules.one_f_one_b`,
:mod:`~core.schedules.interleaved`, :mod:`~core.schedules.zero_bubble` (ZB-H1) and
:mod:`~core.schedules.zb_v` (ZB-V). A new schedule is one new module with one
:class:`PipelineSchedule` subclass, registered below; everything else (plan rules, graph,
fast path, memory model, Megatron export) asks the schedule object (:func:`get`) instead of
comparing names.
"""

from __future__ import annotations

from core.schedules.base import (PHASE_B, PHASE_F, PHASE_W, PHASES, NotInMegatron,
                                 PipelineSchedule, WorkOrder, combined_1f1b_paired_share,
                                 embedding_in_flight, get, in_flight_all, in_flight_microbatches, loss_in_flight, megatron_schedule,
                                 names,
                                 register, schedule_errors, work_order, work_orders)
from core.schedules.gpipe import GPipe
from core.schedules.interleaved import Interleaved
from core.schedules.one_f_one_b import OneFOneB
from core.schedules.zb_v import ZeroBubbleV
from core.schedules.zero_bubble import ZeroBubbleH1

__all__ = ["PHASE_F", "PHASE_B", "PHASE_W", "PHASES", "WorkOrder", "PipelineSchedule",
           "NotInMegatron", "register", "get", "names", "work_order", "work_orders",
           "in_flight_microbatches", "in_flight_all", "loss_in_flight", "embedding_in_flight",
           "schedule_errors",
           "combined_1f1b_paired_share", "megatron_schedule", "GPipe", "OneFOneB", "Interleaved", "ZeroBubbleH1",
           "ZeroBubbleV"]

# registration order: the order of names() (menus, sweeps)
for _cls in (GPipe, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleV):
    register(_cls)
del _cls
