"""The plan rules of what torchtitan runs otherwise than Megatron-Core, where the simulator
models it only in part: torchao's float8 linears (``plan.fp8_impl``) and torch's tensor
parallelism saving the gathered inputs (``plan.tp_saved_input``), each refused by name with the
models it does not cover (used by :func:`core.plan.rules.validate`)."""

from __future__ import annotations

from core.plan.fields import NOT_MODELLED, FieldError
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan, tp_saves_gathered_input

__all__ = ["framework_plan_errors"]


def framework_plan_errors(m: ModelConfig, pl: ParallelPlan) -> list[FieldError]:
    """The errors of ``pl``'s torchao float8 (``fp8_impl='torchao'``: refused with a
    mixture-of-experts model or latent attention) and gathered TP inputs
    (``tp_saved_input='gathered'`` without full or per-op recomputation: refused with a
    mixture-of-experts model, latent attention or Megatron's ``selective``); empty otherwise."""
    errs: list[FieldError] = []
    if pl.precision == "fp8" and pl.fp8_impl == "torchao":
        if m.is_moe:
            errs.append(FieldError("plan.fp8_impl", "fp8_impl='torchao' with a mixture-of-experts "
                                   "model is not modelled: torchtitan's float8 converter swaps "
                                   "nn.Linear modules only (torchao Float8Linear), so the routed "
                                   "experts' grouped GEMMs stay BF16 beside FP8 attention",
                                   rule=NOT_MODELLED))
        if m.multi_latent_attention is True:
            errs.append(FieldError("plan.fp8_impl", "fp8_impl='torchao' with multi-head latent "
                                   "attention is not modelled (the saved inputs of its "
                                   "projections are counted for Transformer Engine's FP8 only)",
                                   rule=NOT_MODELLED))
    if tp_saves_gathered_input(pl) and pl.recompute in ("none", "selective"):
        # what the gathered inputs cost is counted for dense layers without latent attention
        # and with Megatron's own recomputation not changing what the norms' outputs keep
        what = ("a mixture-of-experts model (torchtitan's MoE layers prepare the router's and "
                "experts' inputs otherwise)" if m.is_moe else
                "multi-head latent attention (torchtitan runs its down projections on the "
                "replicated input, NoParallel)" if m.multi_latent_attention is True else
                "recompute='selective' (Megatron-Core's per-module recomputation; torchtitan's "
                "is selective_op)" if pl.recompute == "selective" else None)
        if what is not None:
            errs.append(FieldError("plan.tp_saved_input", "tp_saved_input='gathered' with "
                                   f"{what} is not modelled: the gathered inputs are counted "
                                   "for dense layers without recomputation, under full "
                                   "recomputation or per-op selective (selective_op)",
                                   rule=NOT_MODELLED))
    return errs
