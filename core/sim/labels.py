"""What every view calls each quantity of one simulated iteration: one table of names.

The timeline's legend and hover text, the cost panel's time breakdown and memory chart, the
Compare tab, ``vtrain simulate``'s report, ``vtrain diff`` and the Chrome trace's lanes all
read their names from here, so the same quantity has the same name on every tab and in the
CLI (a review found pipeline transfers called "Pipeline sends", "PP send/recv" and "PP comm",
and tensor-parallel communication "TP collective" and "TP comm", in different places).

The names are Megatron-LM's and the vTrain paper's (Bang et al., MICRO 2024, Sec. 3:
tensor-parallel collectives, pipeline send/recv, data-parallel gradient reduction, optimizer
step; ``../shared/DESIGN.md``, "Terms"): the parallel dimensions abbreviated as Megatron-LM's
arguments do (TP, PP, DP, CP, EP). Names are lower case; a view that starts a row or a
sentence with one capitalizes its first letter (:func:`capitalized`).

A communication kind is named by itself on the timeline (its tasks, whole); the time
breakdown's terms are the part of it that the compute waits for, "exposed" + the kind's name
(:data:`TIME_TERMS`), and what runs under other work is "hidden" + the kind's name.
"""

from __future__ import annotations

__all__ = ["KIND_NAMES", "KIND_MEANINGS", "TIME_TERMS", "DIFF_TERMS", "TIME_TERM_MEANINGS", "MEMORY_TERMS",
           "MEMORY_TERM_MEANINGS", "MEMORY_FIGURES", "PROCESS_TERMS", "capitalized", "exposed",
           "hidden", "short_name"]

#: Task kinds (:data:`core.sim.graph_types.KINDS`) -> name.
KIND_NAMES = {
    "forward": "forward",
    "backward": "backward",
    "recompute": "recomputation",
    "embedding": "embedding",
    "output": "output + loss",
    "optimizer": "optimizer step",
    "tp_comm": "TP collectives",
    "pp_p2p": "PP send/recv",
    "dp_comm": "DP collectives",
    "wgrad": "weight gradient (W)",
    "cp_p2p": "CP exchange",
    "ep_all_to_all": "EP all-to-all",
}

#: Task kinds -> what the name means, one line (tooltips, help texts).
KIND_MEANINGS = {
    "forward": "transformer-layer forward",
    "backward": "transformer-layer backward (input and weight gradients)",
    "recompute": "forward run again before the backward (activation recomputation: full or "
                 "selective)",
    "embedding": "token and position embedding, forward or backward (first stage)",
    "output": "output layer and cross-entropy loss, forward or backward (last stage)",
    "optimizer": "optimizer step (Adam) on this stage's parameters",
    "tp_comm": "tensor-parallel all-reduce, or reduce-scatter and all-gather with sequence "
               "parallelism",
    "pp_p2p": "pipeline-parallel send/recv of activations and their gradients between stages",
    "dp_comm": "data-parallel gradient reduction and, with a sharded optimizer, the parameter "
               "all-gather",
    "wgrad": "weight-gradient part of a split backward (zero-bubble W items)",
    "cp_p2p": "context-parallel exchange of K/V (and dK/dV): ring, all-gather or all-to-all "
              "(plan.cp_comm_type)",
    "ep_all_to_all": "expert-parallel all-to-all: the MoE layers' token dispatch and combine",
}


def exposed(kind: str) -> str:
    """``"exposed TP collectives"``: the name of the part of kind ``kind``'s communication that
    the compute stream waits for (a time-breakdown term)."""
    return f"exposed {KIND_NAMES[kind]}"


def hidden(kind: str) -> str:
    """``"hidden CP exchange"``: the name of the part of kind ``kind``'s communication that runs
    under other work (not in the iteration time's sum)."""
    return f"hidden {KIND_NAMES[kind]}"


#: Terms the iteration time splits into (:class:`core.sim.report.Report`'s ``*_s`` fields
#: without the suffix, and :mod:`core.studies.diff`'s terms) -> name. The report's ``compute``
#: is all compute-stream work; the diff splits it into ``forward_backward``,
#: ``recomputation`` and ``optimizer``; the report's ``comm`` is ``tp_comm`` + ``dp_comm``.
TIME_TERMS = {
    "compute": "compute",
    "forward_backward": "forward + backward",
    "recomputation": KIND_NAMES["recompute"],
    "optimizer": KIND_NAMES["optimizer"],
    "comm": "exposed TP/DP collectives",
    "tp_comm": exposed("tp_comm"),
    "dp_comm": exposed("dp_comm"),
    "pp_comm": exposed("pp_p2p"),
    "cp_comm": exposed("cp_p2p"),
    "ep_comm": exposed("ep_all_to_all"),
    "bubble": "pipeline bubble",
    "overlap_wait": "overlap wait",
    "imbalance": "stage imbalance",
    "rest": "rounding",
}

#: The terms :mod:`core.studies.diff` splits an iteration into, in display order (a kind a later
#: model adds, and ``cp_comm`` / ``ep_comm`` where a plan has them, come after ``optimizer``).
DIFF_TERMS = ("forward_backward", "recomputation", "tp_comm", "pp_comm", "dp_comm", "bubble",
              "overlap_wait", "imbalance", "optimizer", "rest")

#: Time terms -> what the name means, one line.
TIME_TERM_MEANINGS = {
    "compute": "compute-stream work: forward, backward, recomputation, embedding, output + loss "
               "and optimizer step",
    "forward_backward": "forward, backward (input and weight gradients), embedding and output + "
                        "loss, without recomputation and optimizer step",
    "recomputation": KIND_MEANINGS["recompute"],
    "optimizer": KIND_MEANINGS["optimizer"],
    "comm": "TP and DP collectives that block the compute stream",
    "tp_comm": "TP collectives that block the compute stream",
    "dp_comm": "DP collectives that block the compute stream",
    "pp_comm": "what PP send/recv adds to the iteration (the iteration with free transfers is "
               "that much shorter)",
    "cp_comm": "the time attention waits for its CP exchange beyond the compute it overlaps",
    "ep_comm": "EP all-to-all that blocks the compute stream",
    "bubble": "idle time of the pipeline schedule with balanced stages",
    "overlap_wait": "idle time waiting for overlapped communication (ZeRO/FSDP parameter "
                    "gathers, bucketed gradient reduce-scatters)",
    "imbalance": "idle time that unequal pipeline stages add to the bubble",
    "rest": "not attributed (rounding)",
}

#: Memory terms of one GPU (:class:`core.model.stage_memory.StageMemory` attributes) -> name.
MEMORY_TERMS = {
    "weights_bytes": "weights",
    "gradients_bytes": "gradients",
    "optimizer_bytes": "optimizer state",
    "activations_bytes": "activations",
    "workspace_bytes": "workspaces",
    "allocator_reserve_bytes": "allocator reserve",
    "cuda_context_bytes": "CUDA context",
    "nccl_buffer_bytes": "NCCL buffers",
}

#: Memory terms -> what the name means, one line.
MEMORY_TERM_MEANINGS = {
    "weights_bytes": "the model's parameters held by this GPU",
    "gradients_bytes": "the main gradients and the weight gradients beyond them, Transformer "
                       "Engine's placeholders",
    "optimizer_bytes": "the optimizer's state: FP32 master weights and Adam's two moments "
                       "(sharded with the distributed optimizer)",
    "activations_bytes": "activations kept for the backward under the plan's recomputation "
                         "(Korthikanti et al. 2022)",
    "workspace_bytes": "GEMM workspaces",
    "allocator_reserve_bytes": "what PyTorch's caching allocator keeps cached beyond the live "
                               "tensors",
    "cuda_context_bytes": "the CUDA context, outside PyTorch's allocator",
    "nccl_buffer_bytes": "NCCL's communication buffers, outside PyTorch's allocator",
}

#: The memory terms a table sums as "process" (what the process holds besides the model's
#: tensors and activations).
PROCESS_TERMS = ("workspace_bytes", "allocator_reserve_bytes", "cuda_context_bytes",
                 "nccl_buffer_bytes")

#: Memory figures of a plan (:class:`core.sim.report.Report`) -> name.
MEMORY_FIGURES = {
    "max_memory_per_gpu_bytes": "memory per GPU (max)",
    "memory_capacity_bytes": "GPU memory",
    "memory_verdict": "fits in memory",
}


def short_name(term: str) -> str:
    """The name of a time term under a narrow chart bar: an exposed communication term by its
    kind's name (``"TP collectives"``; the chart's title or tooltip says "exposed"), every other
    term by its name (:data:`TIME_TERMS`); an unknown term by itself with spaces for
    underscores."""
    name = TIME_TERMS.get(term, term.replace("_", " "))
    return name.removeprefix("exposed ")


def capitalized(name: str) -> str:
    """``name`` with its first letter upper case (``"pipeline bubble"`` -> ``"Pipeline bubble"``;
    ``"exposed TP collectives"`` -> ``"Exposed TP collectives"``), for the start of a row."""
    return name[:1].upper() + name[1:]
