"""Array types shared by the graph builder, the solver and the views.

The execution graph of one iteration is data, not objects: one numpy array per
task attribute plus two edge arrays. A view draws from these arrays directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from core.sim.labels import KIND_NAMES

__all__ = ["KINDS", "STREAMS", "OPS", "KIND_COMPUTE", "KIND_COMM", "ExecutionGraph", "Schedule"]

#: Task kinds; ``ExecutionGraph.kind`` holds indices into this tuple.
KINDS = (
    "forward",      # 0 transformer-layer forward compute
    "backward",     # 1 transformer-layer backward compute
    "recompute",    # 2 forward recomputed before backward (full or selective recomputation)
    "embedding",    # 3 token + position embedding, forward or backward (first stage)
    "output",       # 4 output layer + cross-entropy loss, forward or backward (last stage)
    "optimizer",    # 5 optimizer step (Adam) on this stage's parameters
    "tp_comm",      # 6 tensor-parallel all-reduce, or reduce-scatter / all-gather (blocks compute)
    "pp_p2p",       # 7 pipeline send/recv of activations or their gradients
    "dp_comm",      # 8 data-parallel gradient reduction / parameter all-gather
    "wgrad",        # 9 weight-gradient part of a split backward (zero-bubble W items)
    "cp_p2p",       # 10 context-parallel ring exchange of K/V blocks (and dK/dV): the exposed
                    #    part blocks compute, the part hidden under attention is overlapped
    "ep_all_to_all",  # 11 expert-parallel token dispatch / combine all-to-all (MoE layers)
)
#: Kinds that run on a GPU's compute stream.
KIND_COMPUTE = frozenset({0, 1, 2, 3, 4, 5, 9})
#: Kinds that are communication.
KIND_COMM = frozenset({6, 7, 8, 10, 11})
#: What a task runs; ``ExecutionGraph.op`` holds indices into this tuple (-1: unknown).
#: The first nine are the profile store's op names (core.model.ops); recompute tasks
#: run the forward ops again (selective recomputation: ``attention_core_fwd``).
OPS = (
    "attention_fwd", "attention_bwd", "mlp_fwd", "mlp_bwd", "embedding_fwd", "embedding_bwd",
    "output_fwd", "output_bwd", "optimizer_step",
    "tp_all_reduce", "p2p_fwd", "p2p_bwd", "dp_all_reduce",
    # sequence parallelism, sharded optimizers (ZeRO / FSDP), selective recomputation
    "tp_reduce_scatter", "tp_all_gather", "dp_reduce_scatter", "dp_all_gather", "attention_core_fwd",
    # context parallelism: the attention core's backward (the ring's share of attention_bwd)
    # and the ring's K/V send/recv
    "attention_core_bwd", "cp_send_recv",
    # mixture of experts (core.model.keys.MOE_OPS), the expert all-to-alls and the expert
    # tensor-parallel collectives
    "router_fwd", "router_bwd", "moe_permute_fwd", "moe_permute_bwd", "experts_fwd",
    "experts_bwd", "moe_unpermute_fwd", "moe_unpermute_bwd", "shared_experts_fwd",
    "shared_experts_bwd", "ep_dispatch", "ep_combine", "etp_all_gather", "etp_reduce_scatter",
    # selective recomputation by module (--recompute-modules): the parts of ops run again
    "layernorm_fwd", "mlp_core_fwd", "router_gate_fwd", "moe_unpermute_core_fwd", "experts_act_fwd",
    # sliding-window attention (--window-size): a windowed layer's attention ops
    "attention_swa_fwd", "attention_swa_bwd", "attention_core_swa_fwd",
    # multi-head latent attention: the up-projections run again (--recompute-modules mla_up_proj)
    "mla_up_proj_fwd",
    # multi-token prediction (--mtp-num-layers): each MTP layer's norms and eh_proj
    "mtp_proj_fwd", "mtp_proj_bwd",
    # per-op selective activation checkpointing (torchtitan): the ops of a block run again
    "attention_sac_fwd", "mlp_sac_fwd",
    # a virtual stage a custom pipeline layout leaves empty (--pipeline-model-parallel-layout):
    # it only passes the activations (gradients) on; one task of zero seconds per item
    "pass_through",
)
#: Streams of a stage; ``ExecutionGraph.stream`` holds indices into this tuple. The timeline
#: draws a lane per stage for each stream a graph uses (compute and comm always;
#: :attr:`ExecutionGraph.lanes`); the expert all-to-alls of MoE layers (which block the
#: compute stream as the tensor-parallel collectives do) have a lane of their own, and so do the
#: pipeline transfers (``pp_p2p``: Megatron-Core's ``p2p_communication``, asynchronous in the
#: interleaved schedule's steady state, so they can run beside a stage's other collectives).
#: The lanes of one kind are named as the kind (:data:`core.sim.labels.KIND_NAMES`).
STREAMS = ("compute", "comm", KIND_NAMES["cp_p2p"], KIND_NAMES["ep_all_to_all"],
           KIND_NAMES["pp_p2p"])


@dataclass
class ExecutionGraph:
    """One training iteration of one data-parallel replica as arrays.

    Attributes
    ----------
    duration_s : float64 array, shape (n,)
        Task durations in seconds.
    kind : int8 array, shape (n,)
        Index into :data:`KINDS`.
    stream : int8 array, shape (n,)
        Index into :data:`STREAMS`; the timeline row of a task is
        ``stage * len(lanes) + lanes.index(stream)`` (:attr:`lanes`).
    stage : int32 array, shape (n,)
        Pipeline stage 0..p-1 (the sending stage for pipeline transfers).
    microbatch : int32 array, shape (n,)
        Micro-batch 0..m-1, or -1 for per-iteration tasks (optimizer, dp_comm).
    layer : int32 array, shape (n,)
        Global transformer layer 0..L-1, or -1 for tasks not tied to one layer.
    src, dst : int64 arrays, shape (e,)
        Dependency edges: task ``dst`` starts after task ``src`` ends.
    num_stages : int
        Pipeline-parallel size p.
    op : int16 array, shape (n,), optional
        Index into :data:`OPS` (-1 where unknown); None for graphs built
        without op information.
    chunk : int16 array, shape (n,), optional
        Virtual pipeline chunk 0..v-1 of the task (interleaved schedule; 0
        otherwise, -1 for per-iteration tasks); None for graphs built without it.
    phase : int8 array, shape (n,), optional
        Work-item phase of the task (:data:`core.schedules.PHASES` index: F, B,
        W; -1 for per-iteration tasks); None for graphs built without it.
    overlapped : bool array, shape (n,), optional
        True for communication that runs beside the compute stream instead of
        blocking it (overlapped data-parallel buckets, prefetched all-gathers);
        None when there is none.
    chunk_stages : int array, shape (p, v), optional
        Virtual stage that chunk ``c`` of stage ``i`` holds (the schedule's placement,
        :meth:`core.schedules.PipelineSchedule.virtual_stages`); None: ``c*p + i``.
    """

    duration_s: np.ndarray
    kind: np.ndarray
    stream: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray
    layer: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    num_stages: int
    op: np.ndarray | None = None
    chunk: np.ndarray | None = None
    phase: np.ndarray | None = None
    overlapped: np.ndarray | None = None
    chunk_stages: np.ndarray | None = None

    def virtual_stage(self, index: int) -> int:
        """Virtual stage (0..p*v-1) that task ``index`` runs, from its stage and chunk
        (``chunk_stages``; ``c*p + i`` without it); -1 for a per-iteration task or a graph
        without a ``chunk`` column."""
        if self.chunk is None or self.chunk[index] < 0:
            return -1
        c, i = int(self.chunk[index]), int(self.stage[index])
        if self.chunk_stages is not None:
            return int(self.chunk_stages[i, c])
        return c * self.num_stages + i

    @property
    def num_tasks(self) -> int:
        """Number of tasks n."""
        return int(self.duration_s.shape[0])

    @cached_property
    def num_chunks(self) -> int:
        """Virtual chunks per stage v (1 without interleaving or without a ``chunk`` column)."""
        return 1 if self.chunk is None or not self.chunk.size else int(self.chunk.max()) + 1

    @cached_property
    def lanes(self) -> tuple[int, ...]:
        """Streams the graph uses, sorted (compute and comm always): one timeline lane each per
        stage, so a graph without context parallelism (expert parallelism) draws no empty "CP exchange"
        ("EP all-to-all") lane."""
        used = set(np.unique(self.stream).tolist()) if self.stream.size else set()
        return tuple(sorted(used | {0, 1}))

    @property
    def row(self) -> np.ndarray:
        """Timeline row per task, ``stage * len(lanes) + lanes.index(stream)``; int32 (n,)."""
        pos = np.zeros(len(STREAMS), np.int32)
        pos[list(self.lanes)] = np.arange(len(self.lanes), dtype=np.int32)
        return self.stage.astype(np.int32) * len(self.lanes) + pos[self.stream.astype(np.int32)]


@dataclass
class Schedule:
    """Solved start and end times of every task (seconds from iteration start).

    Attributes
    ----------
    start_s, end_s : float64 arrays, shape (n,)
        Earliest start and end time of each task.
    iteration_time_s : float
        ``max(end_s)``: the length of the critical path.
    """

    start_s: np.ndarray
    end_s: np.ndarray
    iteration_time_s: float
