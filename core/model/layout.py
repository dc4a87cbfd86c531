"""Which transformer layers each pipeline stage and virtual chunk holds (Megatron-Core's
default split, uneven first/last stages, explicit ``pipeline_model_parallel_layout``).
"""

from __future__ import annotations


import numpy as np

from core import schedules
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.layout import pipeline_layout_text, stage_layer_counts, virtual_stage_layer_counts

__all__ = ["chunk_layout", "chunks_per_stage", "edge_stages", "loss_stage", "stage_chunk_layers",
           "stage_counts", "stage_layers"]


def stage_layers(model: ModelConfig, plan: ParallelPlan) -> list[range]:
    """Global layer indices of each pipeline stage, length p (see
    :func:`core.plan.layout.stage_layer_counts`; raises ValueError when the layers do not split)."""
    out, start = [], 0
    for c in stage_counts(model, plan):
        out.append(range(start, start + c))
        start += c
    return out


def stage_chunk_layers(model: ModelConfig, plan: ParallelPlan) -> list[list[range]]:
    """Global layer indices of each model chunk of each pipeline stage: ``p`` lists of ``v``
    ranges (``v`` = :func:`chunks_per_stage`; chunk ``c`` of stage ``i`` is virtual stage
    ``c*p + i`` of :func:`core.plan.layout.virtual_stage_layer_counts`, or as the schedule
    places it, :meth:`core.schedules.PipelineSchedule.virtual_stages`). Raises ValueError when
    the layers do not split."""
    return [list(chunks) for chunks in chunk_layout(model, plan)[0]]


_LAYOUTS: dict[tuple, tuple] = {}
_COUNTS: dict[tuple, tuple[int, ...]] = {}


def _layout_key(plan: ParallelPlan) -> tuple | None:
    """The custom pipeline layout and the ``v`` it is read with (part of the layer-count
    cache keys), or None without a layout."""
    layout = pipeline_layout_text(plan)
    if layout is None:
        return None
    return layout, schedules.get(plan.schedule).uses_virtual_stages and plan.virtual_pipeline_stages


def stage_counts(model: ModelConfig, plan: ParallelPlan) -> tuple[int, ...]:
    """:func:`core.plan.layout.stage_layer_counts` memoized, keyed by every field it reads (the
    model's layers, ``p``, ``first_stage_layers``, ``last_stage_layers``, the two
    pipeline-split flags as booleans); a tuple. Raises ValueError as it does."""
    key = (model.num_layers, plan.pipeline_parallel, plan.first_stage_layers,
           plan.last_stage_layers, bool(plan.account_for_embedding_in_pipeline_split),
           bool(plan.account_for_loss_in_pipeline_split), _layout_key(plan))
    hit = _COUNTS.get(key)
    if hit is None:
        if len(_COUNTS) > 4096:
            _COUNTS.clear()
        hit = _COUNTS[key] = tuple(stage_layer_counts(model.num_layers, plan))
    return hit


def chunk_layout(model: ModelConfig, plan: ParallelPlan
                  ) -> tuple[tuple[tuple[range, ...], ...], np.ndarray, tuple[tuple[int, ...], ...]]:
    """The chunks of :func:`stage_chunk_layers` (tuples), their layers as a read-only int64
    array shape (p, v) and as tuples, memoized (sweeps ask for the same few layouts often).

    The key is every field :func:`core.plan.layout.virtual_stage_layer_counts` reads with ``v``
    given (and :func:`core.plan.layout.stage_layer_counts` for ``v = 1``): the model's layers,
    ``p``, ``v`` (:func:`chunks_per_stage`), ``first_stage_layers``, ``last_stage_layers``
    and the two pipeline-split flags (read as booleans). Raises ValueError as they do (errors
    are not memoized)."""
    p, v = plan.pipeline_parallel, chunks_per_stage(plan)
    sched = schedules.get(plan.schedule)
    key = (model.num_layers, p, v, plan.first_stage_layers, plan.last_stage_layers,
           bool(plan.account_for_embedding_in_pipeline_split),
           bool(plan.account_for_loss_in_pipeline_split), pipeline_layout_text(plan),
           sched.placement_kind)
    hit = _LAYOUTS.get(key)
    if hit is None:
        counts = virtual_stage_layer_counts(model.num_layers, plan, v)
        starts = [0]
        for c in counts:
            starts.append(starts[-1] + c)
        chunks = tuple(tuple(range(starts[k], starts[k + 1]) for k in row)
                       for row in sched.virtual_stages(p, v).tolist())
        lengths = tuple(tuple(len(r) for r in ch) for ch in chunks)
        arr = np.array(lengths, np.int64).reshape(p, v)
        arr.setflags(write=False)
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        hit = _LAYOUTS[key] = (chunks, arr, lengths)
    return hit


def chunks_per_stage(plan: ParallelPlan) -> int:
    """Model chunks per pipeline stage (:meth:`core.schedules.PipelineSchedule.chunks`):
    ``virtual_pipeline_stages`` under a schedule that uses virtual stages (interleaved 1F1B),
    2 under ZB-V, 1 otherwise."""
    return schedules.get(plan.schedule).chunks(getattr(plan, "virtual_pipeline_stages", None))


def loss_stage(plan: ParallelPlan) -> int:
    """The pipeline stage that holds the output layer, the loss and the MTP block: ``p - 1``,
    stage 0 under ZB-V (:meth:`core.schedules.PipelineSchedule.loss_stage`)."""
    return schedules.get(plan.schedule).loss_stage(plan.pipeline_parallel, chunks_per_stage(plan))


def edge_stages(plan: ParallelPlan) -> int:
    """The ``p`` to give :func:`core.model.counts.edge_params_per_gpu`: 1 when the first and the
    last layers are on one stage (one stage, or ZB-V: no second copy of a tied embedding), else
    ``p``."""
    return 1 if loss_stage(plan) == 0 else plan.pipeline_parallel
