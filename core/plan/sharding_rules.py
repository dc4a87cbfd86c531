"""The plan rules of sharding and precision (part of :func:`core.plan.rules.validate`): hybrid
sharding's shard size, the FP8 parameter gather, torchtitan's per-op recomputation under
tensor parallelism, the FP8 recipe, the gradients' reduction dtype and the precision-aware
optimizer's state dtypes.
"""

from __future__ import annotations

from core.plan.fields import NOT_MODELLED, FieldError, is_int
from core.plan.parallel import (GRAD_REDUCE_DTYPES, OPTIMIZER_STATE_DTYPES, PRECISIONS,
                                ZERO_STAGES, ParallelPlan)

__all__ = ["sharding_precision_errors"]


def sharding_precision_errors(pl: ParallelPlan) -> list[FieldError]:
    """Rules of HSDP's shard size, the FP8 parameter gather, torchtitan's per-op recomputation
    under tensor parallelism, the FP8 recipe, the gradients' reduction dtype and the
    precision-aware optimizer (:func:`_precision_aware_optimizer_errors`), each a
    :class:`~core.plan.fields.FieldError` naming its field."""
    errs: list[FieldError] = []
    size = pl.data_parallel_shard_size
    if size is not None and is_int(size) and is_int(pl.data_parallel) and size >= 1:
        if pl.data_parallel % size:
            errs.append(FieldError("plan.data_parallel_shard_size", f"data_parallel_shard_size="
                                   f"{size} does not divide data_parallel={pl.data_parallel} (the "
                                   "shards are replicated over d/size whole groups; Megatron: d*cp "
                                   "divisible by --num-distributed-optimizer-instances)"))
        elif pl.zero_stage in ZERO_STAGES and pl.zero_stage < 1:
            errs.append(FieldError("plan.data_parallel_shard_size", f"data_parallel_shard_size="
                                   f"{size} needs a sharded optimizer (zero_stage >= 1; Megatron: "
                                   "--num-distributed-optimizer-instances needs "
                                   "--use-distributed-optimizer)"))
    if pl.fp8_param_gather is True:
        if pl.precision != "fp8":
            errs.append(FieldError("plan.fp8_param_gather", f"fp8_param_gather needs precision="
                                   f"'fp8' (precision is {pl.precision!r}): only FP8 linear "
                                   "layers' weights can be gathered in FP8"))
        elif pl.zero_stage in ZERO_STAGES and pl.zero_stage < 1:
            errs.append(FieldError("plan.fp8_param_gather", "fp8_param_gather needs a sharded "
                                   "optimizer (zero_stage >= 1: Megatron's --fp8-param-gather "
                                   "with --use-distributed-optimizer, torchtitan's with FSDP); "
                                   "zero_stage is 0, nothing is gathered"))
    elif not isinstance(pl.fp8_param_gather, bool):
        errs.append(FieldError("plan.fp8_param_gather", f"fp8_param_gather="
                               f"{pl.fp8_param_gather!r} must be true or false"))
    if pl.recompute == "selective_op" and pl.tensor_parallel != 1 and \
            is_int(pl.tensor_parallel) and pl.sequence_parallel is False:
        errs.append(FieldError("plan.recompute", f"recompute='selective_op' with "
                               f"tensor_parallel_size={pl.tensor_parallel} needs "
                               "sequence_parallel (torchtitan's tensor parallelism is sequence-"
                               "parallel; without it the row-parallel linears' all-reduces, "
                               "not in the save list, would run again: not modelled)", rule=NOT_MODELLED))
    if pl.precision == "fp8" and pl.fp8_impl == "torchao" and \
            pl.fp8_recipe not in (None, "tensorwise"):
        errs.append(FieldError("plan.fp8_impl", f"fp8_impl='torchao' with fp8_recipe="
                               f"{pl.fp8_recipe!r} is not modelled: torchao's float8 is modelled "
                               "with the tensorwise recipe only (torchtitan's float8 converter "
                               "with recipe_name tensorwise; torchao 0.18.0 has no delayed "
                               "scaling)", rule=NOT_MODELLED))
    if pl.fp8_recipe is not None and pl.precision != "fp8":
        errs.append(FieldError("plan.fp8_recipe", f"fp8_recipe={pl.fp8_recipe!r} needs precision="
                               f"'fp8' (precision is {pl.precision!r}; Megatron-LM: --fp8-recipe "
                               "only with --fp8-format)"))
    g = pl.grad_reduce_dtype
    if g is not None:
        if g not in GRAD_REDUCE_DTYPES:
            errs.append(FieldError("plan.grad_reduce_dtype", f"grad_reduce_dtype={g!r} is not one of "
                                   f"{', '.join(GRAD_REDUCE_DTYPES)} or empty"))
        elif pl.precision == "fp8" and g not in ("fp32", "bf16"):
            errs.append(FieldError("plan.grad_reduce_dtype", f"grad_reduce_dtype={g!r} with precision="
                                   "'fp8': gradients of FP8 training are bf16 and are reduced in "
                                   "fp32 (default) or bf16 (--grad-reduce-in-bf16), never in FP8"))
        elif pl.precision in PRECISIONS and pl.precision != "fp8" and g not in ("fp32", pl.precision):
            errs.append(FieldError("plan.grad_reduce_dtype", f"grad_reduce_dtype={g!r} with precision="
                                   f"{pl.precision!r}: gradients are reduced in fp32 or in the "
                                   "training precision"))
    return errs + _precision_aware_optimizer_errors(pl)


def _precision_aware_optimizer_errors(pl: ParallelPlan) -> list[FieldError]:
    """Rules of the precision-aware optimizer (Megatron-Core 0.16.1
    ``OptimizerConfig.__post_init__``): the state dtypes other than fp32 need
    ``use_precision_aware_optimizer``, which needs the distributed optimizer (zero_stage 1);
    under Megatron-FSDP or FSDP (zero_stage 2 or 3) it is not modelled."""
    errs: list[FieldError] = []
    low = [f for f in ("main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
           if getattr(pl, f) in OPTIMIZER_STATE_DTYPES and getattr(pl, f) != "fp32"]
    if pl.use_precision_aware_optimizer is True:
        if pl.zero_stage == 0:
            errs.append(FieldError("plan.use_precision_aware_optimizer", "use_precision_aware_"
                                   "optimizer needs the distributed optimizer (zero_stage 1; "
                                   "Megatron-Core: '--use-precision-aware-optimizer only "
                                   "supported with distributed optimizer')"))
        elif pl.zero_stage in (2, 3):
            errs.append(FieldError("plan.use_precision_aware_optimizer", "use_precision_aware_"
                                   f"optimizer with zero_stage {pl.zero_stage} (Megatron-FSDP or "
                                   "FSDP): their state dtypes are not modelled; the precision-"
                                   "aware optimizer is modelled with Megatron's distributed "
                                   "optimizer, zero_stage 1", rule=NOT_MODELLED))
        if pl.te_master_weights is False and pl.main_params_dtype == "fp16":
            errs.append(FieldError("plan.te_master_weights", "te_master_weights off with "
                                   "main_params_dtype='fp16': Megatron-Core leaves master weights "
                                   "below fp32 to Transformer Engine's FusedAdam "
                                   "(use_precision_aware_optimizer_no_fp8_or_ds_fp8)"))
    elif pl.use_precision_aware_optimizer is False:
        for f in low:
            errs.append(FieldError(f"plan.{f}", f"{f}={getattr(pl, f)!r} needs "
                                   "use_precision_aware_optimizer (Megatron-Core: "
                                   f"'{f} can only be fp32 when not using precision-aware "
                                   "optimizer')"))
    return errs
