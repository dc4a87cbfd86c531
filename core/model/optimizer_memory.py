"""Bytes per parameter of a rank's weights, gradients and optimizer state: the optimizer's
state dtypes (Megatron-Core's distributed optimizer, Transformer Engine's precision-aware
``FusedAdam``), its step's scratch and traffic, and ZeRO's sharding of them (docs/simulator.md,
"Memory model"). :mod:`core.model.memory` builds each stage's memory from these."""

from __future__ import annotations

from core.model.base import ADAM_BYTES_PER_PARAM, DTYPE_BYTES
from core.plan.parallel import ParallelPlan, fp8_recipe, grad_dtype, tensor_dtype, zero_shard_size

__all__ = ["STATE_DTYPE_BYTES", "bytes_per_parameter", "fsdp_fp32_shards", "fsdp_fp32_dropped_bytes", "grad_copy_bytes_per_parameter",
           "optimizer_holds_master_weights", "optimizer_state_bytes",
           "optimizer_step_scratch_bytes", "optimizer_step_traffic"]


#: Bytes per element of the optimizer state's data types (:data:`OPTIMIZER_STATE_DTYPES`;
#: Transformer Engine's ``FusedAdam`` keeps fp8 moments as uint8 with one scale per tensor).
STATE_DTYPE_BYTES = {**DTYPE_BYTES, "fp8": 1}


def optimizer_holds_master_weights(plan: ParallelPlan) -> bool:
    """Whether Transformer Engine's ``FusedAdam`` holds the master weights and reads the
    16-bit gradients as they are, without Megatron-Core's fp32 copy: Megatron-Core's
    ``OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8`` (0.16.1
    ``optimizer/optimizer_config.py:355``, ``distrib_optimizer.py:378``, ``:2411``): the
    precision-aware optimizer with ``main_params_dtype`` not fp32, or with the config's
    ``fp8_recipe`` empty or delayed. That recipe is not always the training's:
    Megatron-LM's ``--fp8-recipe`` defaults to delayed and Megatron-Bridge's
    ``MixedPrecisionConfig`` to tensorwise, each passed to the optimizer even without FP8, so
    for BF16 training, and FP8 with delayed scaling, ``plan.te_master_weights`` says which;
    FP8 with another recipe keeps Megatron-Core's fp32 master weights."""
    if not getattr(plan, "use_precision_aware_optimizer", False):
        return False
    if plan.main_params_dtype != "fp32":
        return True
    if plan.precision == "fp8" and fp8_recipe(plan) != "delayed":
        return False
    return bool(plan.te_master_weights)


def optimizer_state_bytes(plan: ParallelPlan) -> tuple[float, float, float, float]:
    """``(master weights, exp_avg, exp_avg_sq, step-only bytes)`` per parameter of the
    optimizer state, unsharded (:func:`bytes_per_parameter` divides them under ZeRO). The
    step-only bytes live only from the optimizer step on, never beside the activations
    (:func:`grad_copy_bytes_per_parameter`, :func:`optimizer_at_peak`): the fp32 copy of
    16-bit gradients, and under the precision-aware optimizer Transformer Engine's fp32
    scratch (:func:`optimizer_step_scratch_bytes`).

    Without the precision-aware optimizer (Megatron-LM docs, distributed optimizer table):
    fp32 master weights with 16-bit weights (none with fp32 weights, which are their own),
    Adam's two fp32 moments, and the fp32 copy of 16-bit gradients (none of fp32 ones).

    With it (``plan.use_precision_aware_optimizer``, Megatron-Core
    ``--use-precision-aware-optimizer``): the moments in ``exp_avg_dtype`` and
    ``exp_avg_sq_dtype`` (:data:`STATE_DTYPE_BYTES`). Where :func:`optimizer_holds_master_weights`,
    Transformer Engine's ``FusedAdam`` holds the master weights: in ``main_params_dtype``, or,
    fp32 over BF16 weights, only the 16 trailing bits the BF16 weight lacks (2 bytes,
    ``store_param_remainders``, Megatron-Core's default from Transformer Engine 2.1:
    ``optimizer_config.py:192``, ``distrib_optimizer.py:801`` allocates it as int16; TE 2.20
    ``optimizers/fused_adam.py:217``), and it reads the 16-bit gradient as it is
    (``decoupled_grad``, no fp32 copy, ``distrib_optimizer.py:2411``). Over fp32 weights it
    still allocates a ``master_param`` in ``main_params_dtype`` for each (TE 2.20
    ``fused_adam.py:465-471``, ``initialize_state`` whenever ``master_weights``; its fp32 step
    never reads it; ``distrib_optimizer.py:801-806`` allocates the same for loading).
    Otherwise (FP8 with current, MX or blockwise scaling and fp32 master weights)
    Megatron-Core keeps fp32 master weights and the fp32 copy as without it. With BF16
    moments: a Megatron-LM BF16 launch (fp32 main gradients) 2 + 2 + 2 = 6 bytes instead of
    4 + 4 + 4 = 12; Megatron-Bridge's DeepSeek-V3 recipes (bf16 gradients, Megatron-Core's
    master weights) 4 + 2 + 2 + 4 = 12 instead of 16, in BF16 and in MXFP8 alike."""
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    g = DTYPE_BYTES[grad_dtype(plan)]
    half = e < 4
    if not getattr(plan, "use_precision_aware_optimizer", False):
        return (4.0 if half else 0.0), 4.0, 4.0, (4.0 if g < 4 else 0.0)
    m = float(STATE_DTYPE_BYTES[plan.exp_avg_dtype])
    v = float(STATE_DTYPE_BYTES[plan.exp_avg_sq_dtype])
    scratch = optimizer_step_scratch_bytes(plan)
    if not optimizer_holds_master_weights(plan):
        return (4.0 if half else 0.0), m, v, (4.0 if g < 4 else 0.0) + scratch
    if plan.main_params_dtype == "fp32" and tensor_dtype(plan.precision) == "bf16":
        master = 2.0  # store_param_remainders: the fp32 weight's low 16 bits
    else:
        master = float(STATE_DTYPE_BYTES[plan.main_params_dtype])
    return master, m, v, scratch


def _fused_unscale(plan: ParallelPlan) -> bool:
    """TE 2.20 ``FusedAdam.fuse_unscale`` (``fused_adam.py:224``): both moments BF16, which
    its kernel reads and writes as they are."""
    return plan.exp_avg_dtype == plan.exp_avg_sq_dtype == "bf16"


def _scaled_states(plan: ParallelPlan) -> list[str]:
    """The dtypes of the optimizer states Transformer Engine's ``FusedAdam`` unscales to fp32
    before its kernel and scales back after it (TE 2.20 ``fused_adam.py:660-677``,
    ``get_unscaled_state`` ``:310-356``, ``_apply_scale`` ``:268-308``): each moment not in
    fp32 (BF16 ones too unless both are, :func:`_fused_unscale`), and the master weights it
    holds in fp16 (fp32 ones, whole or as int16 remainders, are read as they are)."""
    if not getattr(plan, "use_precision_aware_optimizer", False):
        return []
    out = [d for d in (plan.exp_avg_dtype, plan.exp_avg_sq_dtype)
           if d != "fp32" and not (d == "bf16" and _fused_unscale(plan))]
    if optimizer_holds_master_weights(plan) and plan.main_params_dtype != "fp32":
        out.append(plan.main_params_dtype)
    return out


def optimizer_step_scratch_bytes(plan: ParallelPlan) -> float:
    """Bytes per parameter of the fp32 scratch Transformer Engine's ``FusedAdam`` holds in its
    step under the precision-aware optimizer: an fp32 copy of each state of
    :func:`_scaled_states`, made for every parameter of a group before the kernel runs and
    freed after the step (TE 2.20 ``fused_adam.py:616``, ``:675``, ``:899-912``
    ``del unscaled_lists``), 4 bytes each: 0 with BF16 moments both (the fused case) or fp32
    ones, 8 with fp8 or fp16 moments, 4 more for fp16 master weights."""
    return 4.0 * len(_scaled_states(plan))


#: Bytes one Adam step moves per element of a state, by its dtype, under Transformer Engine's
#: ``FusedAdam`` (reads and writes, memory-bound kernels): fp32 read and written by the kernel
#: (8); BF16 moments both BF16, read and written by the kernel (4); otherwise unscaled to fp32
#: (``.float()``, fp16 also ``mul_`` by its scale), the kernel on fp32, scaled back
#: (``aminmax``, fp16 ``mul_`` by the reciprocal, the cast back): bf16 2+4 + 8 + 4+2 + 2+2 = 24,
#: fp16 2+4 + 4+4 + 8 + 4 + 4+4 + 4+2 = 40, fp8 1+4 + 8 + 4 + 4+1 = 22 (TE 2.20
#: ``fused_adam.py:268-356``).
_STATE_STEP_BYTES = {"fp32": 8.0, "bf16": 24.0, "fp16": 40.0, "fp8": 22.0}


def _state_step_bytes(dtype: str, fused: bool) -> float:
    return 4.0 if dtype == "bf16" and fused else _STATE_STEP_BYTES[dtype]


def optimizer_step_traffic(plan: ParallelPlan) -> float:
    """Bytes the Adam step moves per parameter, against :data:`ADAM_BYTES_PER_PARAM` of the
    training dtype as a ratio (1 without the precision-aware optimizer): each moment as
    :data:`_STATE_STEP_BYTES` says instead of fp32's 8 (BF16 moments both: 4 each, fewer;
    fp8 or fp16 ones, or one BF16 beside another dtype, are unscaled to fp32 and scaled back,
    more); master weights Transformer Engine holds: fp32 remainders beside the BF16 weight
    read and written 2 + 2 each, 2 fewer than fp32 master weights and the BF16 weight's
    write; fp16 ones scaled as fp16 moments (40 against 8; over fp32 weights the kernel
    never reads them, yet they are unscaled and scaled back, 32 more). The step is
    memory-bound (:func:`core.model.layer` times it as one memory kernel of
    ``ADAM_BYTES_PER_PARAM * n`` bytes), so its time scales by this ratio."""
    dtype = tensor_dtype(plan.precision)
    full = float(ADAM_BYTES_PER_PARAM[dtype])
    if not getattr(plan, "use_precision_aware_optimizer", False):
        return 1.0
    fused = _fused_unscale(plan)
    saved = sum(8.0 - _state_step_bytes(d, fused)
                for d in (plan.exp_avg_dtype, plan.exp_avg_sq_dtype))
    if optimizer_holds_master_weights(plan):
        if plan.main_params_dtype == "fp32":
            saved += 2.0 if dtype == "bf16" else 0.0  # int16 remainders with BF16 weights
        elif dtype == "fp32":  # unscaled and scaled back, never read by the fp32 kernel
            saved -= _STATE_STEP_BYTES["fp16"] - 8.0
        else:
            saved += 8.0 - _STATE_STEP_BYTES["fp16"]
    return (full - saved) / full


def bytes_per_parameter(plan: ParallelPlan, data_parallel: int | None = None
                        ) -> tuple[float, float, float]:
    """``(weights, gradients, optimizer state)`` bytes per parameter on one GPU.

    Megatron-LM (docs, distributed optimizer table): 16-bit weights (4 with fp32),
    gradients in :func:`core.plan.parallel.grad_dtype` (fp32 main gradients with bf16), and
    an optimizer holding fp32 master weights (mixed precision only), Adam's two fp32
    moments and, when gradients are 16-bit, their fp32 copy: fp16/fp16 20, bf16/fp32 18,
    fp32/fp32 16 bytes (the optimizer state's parts, and the precision-aware optimizer's, in
    :func:`optimizer_state_bytes`). ZeRO (Rajbhandari et al. 2020, Sec. 5): stage 1 divides the
    optimizer state by ``d`` (Megatron's distributed optimizer: 4 + 16/d, 6 + 12/d,
    8 + 8/d), stage 2 the gradients too, stage 3 the weights too.

    FP8 training (Megatron-LM ``--bf16 --fp8-format``) keeps BF16 weights, fp32 main
    gradients and the same optimizer state as bf16 (18, or 6 + 12/d); the FP8 copies of the
    linear layers' weights come on top (:func:`fp8_weight_bytes_per_parameter`, added by
    :func:`stage_memory`): e.g. 20 bytes per linear weight with per-tensor scaling on Hopper
    (8 + 12/d with the distributed optimizer), 19 on Blackwell. With context parallelism
    ``d`` is ``d*cp`` (Megatron-Core shards over the data-parallel group with the cp ranks).
    With hybrid sharding (``plan.data_parallel_shard_size``, HSDP) ``d`` is the shard group's
    ``size*cp`` (:func:`core.plan.parallel.zero_shard_size`): the state is replicated over ``d/size``.
    ``data_parallel`` replaces ``d*cp`` (routed experts' parameters shard over the
    expert-data-parallel group, :func:`expert_data_parallel`: Megatron-Core's distributed
    optimizer shards them there).
    """
    e = DTYPE_BYTES[tensor_dtype(plan.precision)]
    g = DTYPE_BYTES[grad_dtype(plan)]
    opt = sum(optimizer_state_bytes(plan))
    # Megatron-Core shards over d*cp; with hybrid sharding over the size*cp of a shard group
    d, z = data_parallel or zero_shard_size(plan), plan.zero_stage
    if fsdp_fp32_shards(plan):
        return 4.0 / d, 4.0 / d, (opt - fsdp_fp32_dropped_bytes(plan)) / d
    return (e / d if z >= 3 else e, g / d if z >= 2 else g, opt / d if z >= 1 else opt)


def fsdp_fp32_shards(plan: ParallelPlan) -> bool:
    """Whether ``plan``'s ZeRO-3 shards are PyTorch FSDP2's fp32 ones (``plan.fsdp_fp32_params``,
    torchtitan) under mixed precision: ZeRO-3 with 16-bit compute weights. Then
    :func:`bytes_per_parameter` is ``(4/d, 4/d, Adam's 8/d)``: FSDP2's ``MixedPrecisionPolicy``
    keeps the sharded parameter in its original dtype (fp32, torchtitan's ``training.dtype``
    default), casts it to ``param_dtype`` only for the all-gather (the unsharded parameter,
    freed after each unit's forward and backward) and casts the reduce-scattered gradient
    back to that dtype (torch 2.13 ``fsdp/_fully_shard/_fsdp_api.py`` ``MixedPrecisionPolicy``:
    "FSDP ... keeps the high-precision sharded parameters in memory anyway ... does not require
    any extra memory to keep a high-precision copy of the parameters for the optimizer step";
    ``_fsdp_param.py`` ``orig_dtype``; ``_fsdp_collectives.py`` ``_to_dtype_if_needed(
    reduce_output, orig_dtype)``), and the optimizer steps the sharded fp32 parameter itself.
    ZeRO 0-2 hold the same bytes either way (the gathered 16-bit weights kept beside fp32
    shards that are the master weights: Megatron's 2 + 4 + 12 split), fp32 training too, and
    Megatron-Core's precision-aware optimizer is not FSDP2's (the field has no effect there)."""
    return bool(getattr(plan, "fsdp_fp32_params", False)) and plan.zero_stage >= 3 and \
        DTYPE_BYTES[tensor_dtype(plan.precision)] < 4 and \
        not getattr(plan, "use_precision_aware_optimizer", False)


def fsdp_fp32_dropped_bytes(plan: ParallelPlan) -> float:
    """Bytes per parameter of :func:`optimizer_state_bytes` (unsharded) FSDP2's fp32 shards
    make unneeded (:func:`fsdp_fp32_shards`): the master weights (the shards are) and the fp32
    copy of 16-bit gradients (the reduce-scattered gradient is cast to fp32 by FSDP2); 0 when
    the plan is not such."""
    if not fsdp_fp32_shards(plan):
        return 0.0
    master, _, _, step_only = optimizer_state_bytes(plan)
    return master + step_only


def grad_copy_bytes_per_parameter(plan: ParallelPlan, data_parallel: int | None = None) -> float:
    """The share of :func:`bytes_per_parameter`'s optimizer state that is the fp32 copy of
    16-bit gradients, bytes per parameter on one GPU: 4 (``4/d`` under ZeRO, sharded as the
    optimizer state is); 0 with fp32 gradients, which are their own copy, and where the
    precision-aware optimizer reads the 16-bit gradients as they are
    (:func:`optimizer_state_bytes`). Under the precision-aware optimizer it also holds
    Transformer Engine's fp32 scratch of the step (:func:`optimizer_step_scratch_bytes`),
    which lives only in the step either.

    The copy lives only from the optimizer step to the next iteration's ``zero_grad``, never
    beside the activations (:func:`stage_memory_arrays` counts the larger of the two):
    Megatron-Core 0.16.1 makes it in the step (``optimizer/optimizer.py:524-534``,
    ``prepare_grads`` -> ``_copy_model_grads_to_main_grads``; ``distrib_optimizer.py:2419``
    ``shard_main_param.grad = shard_model_grad.float()``, ``optimizer.py:759`` without the
    distributed optimizer; ``.float()`` of an fp32 gradient is the tensor itself) and frees it
    in ``zero_grad`` (``distrib_optimizer.py:2286-2298``, ``optimizer.py:710-723``:
    ``set_to_none``), which the training step calls before its forward and backward passes."""
    copy = optimizer_state_bytes(plan)[3]
    if copy == 0 or fsdp_fp32_shards(plan):  # FSDP2 casts the reduced shard to fp32 itself
        return 0.0
    d = data_parallel or zero_shard_size(plan)
    return copy / d if plan.zero_stage >= 1 else copy
