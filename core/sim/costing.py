"""One costing function: an iteration time becomes throughput, utilization, days and money.

Used by :mod:`core.sim.simulate` (one plan), :mod:`core.studies.sweep` (arrays of plans),
:mod:`core.studies.optimal` and :mod:`core.studies.scheduler` (through the sweep), so every view
shows the same figures for the same plan.

Definitions (Narayanan et al. 2021; Chowdhery et al. 2022, App. B for MFU/HFU):

* tokens/s = ``B * s / T`` with ``T`` the iteration time;
* MFU = model FLOPs per iteration / (``T`` * world size * peak FLOP/s per GPU);
  HFU the same with the hardware FLOPs (recomputation included). The peak is the dense
  peak of the training precision's tensors (:func:`mfu_peak_flops`): with FP8 training
  the BF16 peak, as Megatron-Bridge and NVIDIA's published FP8 results report MFU, so an
  FP8 and a BF16 plan of one model compare on one scale (the model FLOPs are the model's,
  whatever precision runs them); an fp32 plan with TF32 matmuls (``plan.tf32``) the TF32
  peak, the peak its GEMMs run at (:func:`core.plan.parallel.gemm_peak_dtype`);
* iterations = ``ceil(training tokens / (B * s))`` (a partial iteration is still run:
  :func:`iterations_for_tokens`, the one conversion of a token budget to iterations, which
  the Megatron-LM export's ``--train-samples`` and the goodput figures use too);
* days = iterations * ``T`` / 86400; GPU-hours = iterations * ``T`` * world size / 3600;
  dollars = GPU-hours * price per GPU-hour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Costing", "costing", "iterations_for_tokens", "mfu_peak_flops", "MFU_PEAK_NOTE"]

#: How MFU reads under FP8 training (the report's label and the docs say it).
MFU_PEAK_NOTE = "MFU and HFU of an FP8 plan are against the BF16 dense peak (as Megatron-Bridge)"


def mfu_peak_flops(store, plan) -> float:
    """Peak FLOP/s of one GPU that MFU and HFU divide by for ``plan`` (a
    :class:`core.plan.parallel.ParallelPlan`): the dense peak of
    :func:`core.plan.parallel.gemm_peak_dtype`, the precision's tensors (BF16 for FP8
    training) or TF32 for an fp32 plan with TF32 matmuls (see the module doc).

    Raises
    ------
    KeyError
        The store has no peak for that dtype (its message names the device and dtype).
    """
    from core.plan.parallel import gemm_peak_dtype
    return float(store.peak_flops[gemm_peak_dtype(plan)])


def iterations_for_tokens(training_tokens: float, tokens_per_iteration: float | np.ndarray
                          ) -> int | np.ndarray:
    """The whole iterations that cover a token budget: ``ceil(training_tokens /
    tokens_per_iteration)``, with ``tokens_per_iteration`` = ``B * s`` (global batch in
    sequences times sequence length, tokens).

    A run takes whole iterations (Megatron-LM's loop runs ``--train-iters`` of them; given
    ``--train-samples N`` it runs ``N // global_batch_size``, ``update_train_iters`` in
    megatron/training/training.py, megatron-core 0.19.2), so the budget is reached only by
    the ceiling: a partial last iteration is still run. Every conversion of a token budget
    to iterations or samples goes through this function (costing, the goodput figures, the
    Megatron-LM export), so that ``vtrain simulate``, ``vtrain sweep``, ``vtrain optimal
    --out`` and the exported launch count the same iterations.

    Returns an int for scalar input, an int64 array for an array of ``tokens_per_iteration``.
    """
    tokens = np.asarray(tokens_per_iteration, np.float64)
    iterations = np.ceil(training_tokens / tokens)
    if iterations.ndim == 0:
        return int(iterations)
    return iterations.astype(np.int64)


@dataclass
class Costing:
    """Figures of one plan (floats) or of many (float64 arrays of one shape).

    ``num_iterations`` is an integer (int64 array for many plans).
    """

    tokens_per_s: float | np.ndarray
    mfu: float | np.ndarray
    hfu: float | np.ndarray
    num_iterations: int | np.ndarray
    training_days: float | np.ndarray
    gpu_hours: float | np.ndarray
    cost_usd: float | np.ndarray


def costing(iteration_time_s: float | np.ndarray, *, tokens_per_iteration: float | np.ndarray,
            model_flops: float | np.ndarray, hardware_flops: float | np.ndarray,
            num_gpus: float | np.ndarray, peak_flops_per_gpu: float, training_tokens: float,
            price_per_gpu_hour_usd: float) -> Costing:
    """Turn iteration times into :class:`Costing` figures (see the module doc); vectorized.

    Parameters
    ----------
    iteration_time_s : float or array, shape (n,)
        Seconds per iteration (positive).
    tokens_per_iteration : float or array
        ``B * s``.
    model_flops, hardware_flops : float or array
        FLOPs of one iteration without and with recomputation.
    num_gpus : float or array
        World size ``t*p*d``.
    peak_flops_per_gpu : float
        Dense peak FLOP/s of one GPU in the plan's precision (:func:`mfu_peak_flops`: BF16 for FP8).
    training_tokens : float
        Token budget.
    price_per_gpu_hour_usd : float

    Returns
    -------
    Costing
        Floats for scalar input, arrays otherwise.
    """
    T = np.asarray(iteration_time_s, np.float64)
    gpus = np.asarray(num_gpus, np.float64)
    tokens = np.asarray(tokens_per_iteration, np.float64)
    iterations = np.asarray(iterations_for_tokens(training_tokens, tokens), np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        peak = peak_flops_per_gpu * gpus
        out = dict(tokens_per_s=tokens / T, mfu=np.asarray(model_flops, np.float64) / T / peak,
                   hfu=np.asarray(hardware_flops, np.float64) / T / peak)
    train_s = iterations * T
    gpu_hours = train_s * gpus / 3600
    with np.errstate(invalid="ignore"):  # a free GPU-hour (price 0) of a plan not simulated
        cost = np.where(np.isinf(gpu_hours), gpu_hours, gpu_hours * price_per_gpu_hour_usd)
    out.update(training_days=train_s / 86400, gpu_hours=gpu_hours, cost_usd=cost)
    if T.ndim == 0 and np.ndim(tokens) == 0 and np.ndim(gpus) == 0:
        return Costing(**{k: float(v) for k, v in out.items()}, num_iterations=int(iterations))
    return Costing(**out, num_iterations=iterations.astype(np.int64))
