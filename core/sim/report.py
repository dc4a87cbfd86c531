"""The numbers a planner reads: time, throughput, MFU, cost and memory per GPU."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.model.stage_memory import MEMORY_SCALES, StageMemory

__all__ = ["StageMemory", "Report", "MEMORY_SCALES", "MEMORY_VERDICTS", "memory_verdict",
           "memory_verdict_column", "memory_verdict_text", "gib_texts"]

#: The three verdicts on memory, in order of safety.
MEMORY_VERDICTS = ("fits", "tight", "does not fit")


def memory_verdict(need_bytes: float, capacity_bytes: float, margin: float,
                   fits: bool | None = None) -> str:
    """Whether a plan's peak memory per GPU fits the GPU, with the planner's margin named.

    The modelled need is the whole process (tensors, GEMM workspaces, the caching
    allocator's reserve, the CUDA context, NCCL buffers: :mod:`core.model.stage_memory`), so
    it is held against the whole capacity; the margin takes nothing away, it only marks a
    plan within it of the capacity as tight (a small change of the launch can tip it over).

    Parameters
    ----------
    need_bytes : float
        Modelled peak memory per GPU (the largest stage's ``total_bytes``), bytes.
    capacity_bytes : float
        The GPU's memory, bytes.
    margin : float
        The planner's margin (``cluster.memory_reserve_fraction``), a share of
        ``capacity_bytes`` in [0, 1).
    fits : bool, optional
        Whether the plan fits, as :func:`core.sim.simulate.memory_verdict` decides it: by the
        need without the caching allocator's reserve
        (:attr:`core.model.stage_memory.StageMemory.required_bytes`; PyTorch frees its cache
        before it fails). None: ``need_bytes <= capacity_bytes`` (the whole process).

    Returns
    -------
    str
        ``"does not fit"`` when it does not fit (or either figure is NaN: a need without a
        figure never fits, as in :func:`memory_verdict_column`); ``"tight"`` when
        ``need_bytes > (1 - margin) * capacity_bytes`` (a plan that fits only once the
        allocator frees its cache is tight: its need with the cache exceeds the capacity);
        else ``"fits"``.
    """
    if fits is None:
        fits = need_bytes <= capacity_bytes
    if not fits or not (need_bytes == need_bytes and capacity_bytes == capacity_bytes):
        return "does not fit"
    if need_bytes > (1.0 - margin) * capacity_bytes:
        return "tight"
    return "fits"


def memory_verdict_column(need_bytes: np.ndarray, capacity_bytes: float, margin: float,
                          fits: np.ndarray | None = None) -> np.ndarray:
    """:func:`memory_verdict` of many plans at once: ``need_bytes`` float (n,) bytes (NaN, a
    plan without a figure, counts as not fitting) and ``fits`` bool (n,) or None (as
    :func:`memory_verdict`'s); returns an object array (n,) of :data:`MEMORY_VERDICTS`' three
    str objects, the same rule elementwise (8 bytes a plan, not 48 as numpy text: a sweep
    holds one per plan; ``column == "tight"`` compares elementwise all the same)."""
    need = np.asarray(need_bytes, float)
    ok = need <= capacity_bytes if fits is None else np.asarray(fits, bool) & ~np.isnan(need)
    code = np.zeros(need.shape, np.int8)
    code[need > (1.0 - margin) * capacity_bytes] = 1
    code[~ok | (capacity_bytes != capacity_bytes)] = 2
    return np.array(MEMORY_VERDICTS, dtype=object)[code]


def gib_texts(need_bytes: float, capacity_bytes: float) -> tuple[str, str]:
    """A need and a capacity (bytes) as GiB texts (GiB = 2**30 bytes) for one line: one decimal
    (``("87.9", "80.0")``), more (up to three) while a need above the capacity would read as
    equal to it (80 GiB + 1 MiB of 80 GiB: ``("80.001", "80.000")``), and a need above it by
    less than that marked ``>`` (``(">80.0", "80.0")``): never "80.0 of 80.0" for a plan that
    does not fit. A need at most the capacity keeps one decimal: rounding never shows it
    above."""
    need, cap = need_bytes / 2**30, capacity_bytes / 2**30
    for places in range(1, 4):
        texts = f"{need:,.{places}f}", f"{cap:,.{places}f}"
        if not need > cap or texts[0] != texts[1]:
            return texts
    return f">{cap:,.1f}", f"{cap:,.1f}"


def tight_reason(need_bytes: float, capacity_bytes: float, margin: float) -> str:
    """Why a tight plan (:func:`memory_verdict`) is tight: ``"inside the 10 % margin"``, or,
    for a need above the capacity that fits without the allocator's reserve, ``"fits only
    without the allocator's cache"`` (bytes; ``margin`` a share of the capacity)."""
    if need_bytes > capacity_bytes:
        return "fits only without the allocator's cache"
    return f"inside the {margin * 100:g} % margin"


def memory_verdict_text(need_bytes: float, capacity_bytes: float, margin: float,
                        fits: bool | None = None, required_bytes: float | None = None) -> str:
    """The verdict with its figures and, when tight, the margin named: ``"fits: 60.0 of 80.0
    GiB"``, ``"tight: 78.2 of 80.0 GiB, inside the 10 % margin"``, ``"does not fit: 87.9 of
    80.0 GiB"``; a tight plan whose need exceeds the capacity says it fits only once the
    allocator frees its cache (``"tight: 81.0 of 80.0 GiB, fits only without the allocator's
    cache"``) (the figures of :func:`gib_texts`; arguments as :func:`memory_verdict`). With
    ``required_bytes`` (the need less the allocator's reserve,
    :attr:`core.model.stage_memory.StageMemory.required_bytes`: what decides the fit), a plan
    that does not fit, or fits only without the cache, gives it too (``"does not fit: 83.3 of
    80.0 GiB, 80.7 without the allocator's cache"``; ``"tight: 187.5 of 186.0 GiB, fits only
    without the allocator's cache (181.5 GiB without it)"``): how far it is from fitting."""
    verdict = memory_verdict(need_bytes, capacity_bytes, margin, fits)
    need, cap = gib_texts(need_bytes, capacity_bytes)
    text = f"{verdict}: {need} of {cap} GiB"
    if verdict == "tight":
        text += ", " + tight_reason(need_bytes, capacity_bytes, margin)
    if (required_bytes is not None and required_bytes == required_bytes
            and need_bytes > capacity_bytes):
        req = f"{required_bytes / 2**30:,.1f}"
        text += (f" ({req} GiB without it)" if verdict == "tight"
                 else f", {req} without the allocator's cache")
    return text


@dataclass
class Report:
    """Result figures of one simulated iteration and the whole training run.

    ``interval`` is the error band of the iteration time (:mod:`core.store.interval`);
    days, GPU-hours and dollars scale with the iteration time, so their bands
    are the same factors (:meth:`band`).

    Times in seconds, memory in bytes, money in USD. MFU uses the model FLOPs
    of Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training
    on GPU Clusters Using Megatron-LM", Eq. 3 without the recomputation term):
    ``72*B*s*L*h^2 * (1 + s/(6h) + V/(12*L*h))`` per iteration; HFU adds the
    recomputed forward (Eq. 3 as written, factor 96 instead of 72). The peak is
    that of ``mfu_peak_dtype``: BF16 for an FP8 plan (its model FLOPs are the
    model's, and the GEMMs that run in FP8 do not change them). For MoE models the
    FLOPs count the GEMMs of the active parameters only.
    """

    num_gpus: int
    num_microbatches: int
    iteration_time_s: float
    tokens_per_s: float
    #: parameters of the model (a tied word embedding counted once; vocabulary padded for t),
    #: :func:`core.model.counts.num_parameters`
    num_parameters: int
    model_flops_per_iteration: float
    mfu: float
    hfu: float
    #: active parameters as OpenAI and DeepSeek publish them: those a token's GEMMs use (MoE:
    #: ``moe_top_k`` routed experts of each MoE layer), without the input embedding (a lookup),
    #: :func:`core.model.counts.num_active_parameters`; the count with it is
    #: :attr:`num_active_parameters_with_embedding`
    num_active_parameters: int
    #: the schedule's idle share: bubble_s over the iteration time of the plan with balanced
    #: stages, free pipeline transfers and no waits for overlapped communication (1F1B with
    #: uniform stages: (p-1)/(m+p-1))
    bubble_fraction: float
    #: mean over stages of compute / blocking tensor- and data-parallel communication /
    #: pipeline bubble time per iteration (seconds); with ep_comm_s, pp_comm_s and imbalance_s
    #: they sum to the iteration time
    compute_s: float
    comm_s: float
    bubble_s: float
    #: per stage: compute, blocking TP/DP communication, and idle time with free pipeline
    #: transfers (bubble and imbalance)
    stage_compute_s: list[float]
    stage_comm_s: list[float]
    stage_idle_s: list[float]
    #: iterations to train on the token budget, rounded up
    num_iterations: int
    training_days: float
    gpu_hours: float
    cost_usd: float
    memory: list[StageMemory]
    memory_capacity_bytes: float
    max_memory_per_gpu_bytes: float
    fits_in_memory: bool
    #: the planner's margin (cluster.memory_reserve_fraction), a share of the capacity: fits
    #: means the largest stage's need less the caching allocator's reserve is at most
    #: memory_capacity_bytes (StageMemory.required_bytes); a fit within the margin of the
    #: capacity, or over it only with the reserve, is "tight" (:func:`memory_verdict`)
    memory_reserve_fraction: float = 0.0
    #: exposed pipeline communication: what the transfers add to the iteration time (the
    #: iteration with free transfers is that much shorter); never counted as bubble
    pp_comm_s: float = 0.0
    stage_pp_comm_s: list[float] = field(default_factory=list)
    #: idle time that unequal stages add to the schedule's bubble (mean over stages)
    imbalance_s: float = 0.0
    #: idle time waiting for overlapped communication (mean over stages): what the balanced
    #: schedule's iteration gains when the collectives beside the compute stream (ZeRO-3 /
    #: FSDP parameter prefetch, bucketed gradient reduce-scatters, the parameter all-gathers
    #: of overlap_param_gather) are never waited for; in the sum with bubble_s and imbalance_s
    #: (a plan with one stage has no bubble: its idle time is this)
    overlap_wait_s: float = 0.0
    #: the MoE layers' expert all-to-alls (token dispatch and combine, forward and backward;
    #: they block the compute stream), mean over stages and per stage; 0 for dense models
    ep_comm_s: float = 0.0
    stage_ep_comm_s: list[float] = field(default_factory=list)
    #: exposed context-parallel exchange (mean over stages): the time the ring attention's
    #: steps wait for their K/V (and dK/dV) transfers beyond the compute they overlap; with
    #: compute_s, comm_s, bubble_s, pp_comm_s and imbalance_s it sums to the iteration time
    cp_comm_s: float = 0.0
    stage_cp_comm_s: list[float] = field(default_factory=list)
    #: the ring's transfers hidden under the attention core (mean over stages; not in the sum)
    cp_hidden_s: float = 0.0
    #: tensor-parallel collectives hidden under their GEMMs by ``plan.tp_comm_overlap`` (mean
    #: over stages; not in the sum: comm_s holds the exposed part)
    tp_hidden_s: float = 0.0
    #: data-parallel collectives (the gradient reduce-scatters / all-reduces of
    #: ``overlap_grad_reduce``, the parameter all-gathers of ``overlap_param_gather`` and
    #: FSDP's) run beside the compute stream (mean over stages; not in the sum: comm_s holds
    #: the blocking ones, overlap_wait_s what the overlapped ones make the stream wait);
    #: :mod:`core.studies.diff`'s ``overlapped`` ``dp_comm``
    dp_hidden_s: float = 0.0
    #: expert all-to-alls hidden under another micro-batch's computation by
    #: ``plan.overlap_moe_expert_parallel_comm`` (mean over stages; not in the sum: ep_comm_s
    #: holds the exposed part)
    ep_hidden_s: float = 0.0
    profile: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: error band of ``iteration_time_s`` (:class:`core.store.interval.PredictionInterval`); None
    #: only where no band was asked for
    interval: Any = None
    #: training precision (plan.precision) and, with fp8, the scaling recipe in effect
    #: (plan.fp8_recipe or its default, tensorwise); None without FP8
    precision: str = "bf16"
    fp8_recipe: str | None = None
    #: dtype of the dense peak MFU and HFU divide by (BF16 for FP8 plans, as Megatron-Bridge
    #: reports them; TF32 for fp32 plans with TF32 matmuls; :func:`core.sim.costing.mfu_peak_flops`)
    mfu_peak_dtype: str = "bf16"
    #: MFU with the model FLOPs counting only the attention core under the causal mask
    #: (:func:`core.model.counts.causal_model_flops_per_iteration`, Megatron-Core 0.19's count):
    #: below :attr:`mfu` by the masked half of the core's ``s x s`` square, which Eq. 3 credits;
    #: None in reports written before it existed
    mfu_causal: float | None = None
    #: model TFLOP/s per GPU as Megatron-LM's ``--log-throughput`` logs it ("throughput per GPU
    #: (TFLOP/s/GPU)": ``num_floating_point_operations`` over the iteration time and the world
    #: size), the count of :attr:`mfu_causal`, 10^12 FLOP/s; 0 in reports written before it existed
    model_tflops_per_gpu: float = 0.0
    #: :attr:`num_active_parameters` with the input embedding (Mistral's and Qwen's convention;
    #: equal to num_parameters for dense models),
    #: :func:`core.model.counts.num_active_parameters_with_embedding`; 0 in reports written before
    #: it existed
    num_active_parameters_with_embedding: int = 0
    #: the whole run with failures, restarts and checkpoints (:class:`core.sim.goodput.Goodput`:
    #: expected time, its 10th-90th percentile spread, goodput, GPU-hours and dollars lost by
    #: cause, checkpoint size and interval, mean time between interruptions); None in reports
    #: written before it existed
    run: Any = None
    #: energy of that run (:class:`core.sim.energy.Energy`: kWh and USD); None likewise
    energy: Any = None

    @property
    def memory_verdict(self) -> str:
        """``"fits"``, ``"tight"`` or ``"does not fit"`` (:func:`memory_verdict` of the peak
        memory per GPU against the capacity, with :attr:`memory_reserve_fraction` the margin)."""
        return memory_verdict(self.max_memory_per_gpu_bytes, self.memory_capacity_bytes,
                              self.memory_reserve_fraction, self.fits_in_memory)

    @property
    def memory_verdict_text(self) -> str:
        """:attr:`memory_verdict` with its figures and the margin named
        (:func:`memory_verdict_text`)."""
        required = max((m.required_bytes for m in self.memory), default=None)
        return memory_verdict_text(self.max_memory_per_gpu_bytes, self.memory_capacity_bytes,
                                   self.memory_reserve_fraction, self.fits_in_memory, required)

    def band(self, value: float) -> tuple[float, float] | None:
        """``(low, high)`` of a figure proportional to the iteration time (days, GPU-hours,
        dollars) from :attr:`interval`; None when there is no band."""
        return self.interval.band(value) if self.interval is not None else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; memory stages gain ``total_bytes`` and ``required_bytes`` (the
        whole process less the allocator's reserve, which decides the fit) keys."""
        d = dataclasses.asdict(self)
        for m, obj in zip(d["memory"], self.memory):
            m["total_bytes"] = obj.total_bytes
            m["required_bytes"] = obj.required_bytes
        iv = self.interval
        d["memory_verdict"] = self.memory_verdict
        d["memory_verdict_text"] = self.memory_verdict_text
        d["interval"] = iv.to_dict() if iv is not None else None
        d["iteration_time_interval_s"] = ([iv.low_s, iv.high_s] if iv is not None and iv.available
                                          else None)
        d["run"] = self.run.to_dict() if self.run is not None else None
        for name in ("training_days", "gpu_hours", "cost_usd"):
            b = self.band(getattr(self, name))
            d[f"{name}_interval"] = list(b) if b else None
        return d
