"""Memory of one GPU of a pipeline stage, term by term (the record the memory model fills).

:func:`core.model.memory.stage_memory` computes it; :class:`core.sim.report.Report`
carries one per stage.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MEMORY_SCALES", "StageMemory"]


#: What each measured scale of per-GPU memory counts (:meth:`StageMemory.at_scale`):
#: ``max_allocated`` (``torch.cuda.max_memory_allocated``: live tensors), ``max_reserved``
#: (``torch.cuda.max_memory_reserved``: plus the caching allocator's cached blocks) and
#: ``nvidia-smi`` (the whole process: plus the CUDA context and NCCL's own buffers).
MEMORY_SCALES = ("max_allocated", "max_reserved", "nvidia-smi")


@dataclass
class StageMemory:
    """Memory of one GPU of a pipeline stage, in bytes, term by term.

    Formulas and sources in :func:`core.model.memory.stage_memory` and docs/simulator.md
    ("Memory model"): bytes per parameter as Megatron-LM keeps them (18 for bf16 with fp32
    main gradients, 20 for fp16 with fp16 gradients, 16 for fp32), divided by ``d`` per ZeRO
    stage (Rajbhandari et al. 2020); activations by Korthikanti et al. 2022, Table 2, for the
    plan's sequence parallelism and recomputation, times the micro-batches in flight of the
    schedule (Megatron-Core's warm-up counts). ``gradients_bytes`` also holds the weight
    gradients beyond the gradient buffer (:mod:`core.model.wgrad_buffers`): Transformer
    Engine's placeholders, one per distinct weight shape of the stage, with fused
    accumulation; the largest weight's gradient, a transient, without. The terms after
    ``activations_bytes`` are what a process holds besides the model's tensors (0 in reports
    written before they existed):

    * ``workspace_bytes``: GEMM workspaces allocated through PyTorch (counted by
      ``max_memory_allocated``);
    * ``allocator_reserve_bytes``: what the caching allocator keeps cached beyond the live
      tensors at the peak (``max_memory_reserved`` less ``max_memory_allocated``);
    * ``cuda_context_bytes`` and ``nccl_buffer_bytes``: outside PyTorch's allocator, seen only
      by ``nvidia-smi``.
    """

    stage: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float = 0.0
    allocator_reserve_bytes: float = 0.0
    cuda_context_bytes: float = 0.0
    nccl_buffer_bytes: float = 0.0

    @property
    def allocated_bytes(self) -> float:
        """What ``torch.cuda.max_memory_allocated`` counts: the model's tensors and the
        workspaces."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.workspace_bytes)

    @property
    def reserved_bytes(self) -> float:
        """What ``torch.cuda.max_memory_reserved`` counts: :attr:`allocated_bytes` plus the
        caching allocator's reserve."""
        return self.allocated_bytes + self.allocator_reserve_bytes

    @property
    def total_bytes(self) -> float:
        """The whole process as ``nvidia-smi`` shows it (what runs out of memory):
        :attr:`reserved_bytes` plus the CUDA context and NCCL's buffers."""
        return self.reserved_bytes + self.cuda_context_bytes + self.nccl_buffer_bytes

    @property
    def required_bytes(self) -> float:
        """What the process cannot run without: :attr:`total_bytes` less the caching allocator's
        reserve. When ``cudaMalloc`` fails, PyTorch's caching allocator frees its cached, unused
        blocks and tries again before it raises out-of-memory (PyTorch docs, "CUDA semantics:
        memory management"; ``CUDACachingAllocator``'s ``release_cached_blocks``), so a plan runs
        out of memory for certain only when this exceeds the GPU's memory; between this and
        :attr:`total_bytes` it depends on fragmentation (the memory verdict calls it tight)."""
        return self.total_bytes - self.allocator_reserve_bytes

    def at_scale(self, scale: str) -> float:
        """Bytes as memory scale ``scale`` (one of :data:`MEMORY_SCALES`) counts them.

        Raises ValueError for another name."""
        if scale == "max_allocated":
            return self.allocated_bytes
        if scale == "max_reserved":
            return self.reserved_bytes
        if scale == "nvidia-smi":
            return self.total_bytes
        raise ValueError(f"memory scale {scale!r} is not one of {', '.join(MEMORY_SCALES)}")
