"""What each key of a torchtitan job config does to the session: the importer's policy table.

:data:`KEYS` maps every ``section.key`` of torchtitan's job config (``config/job_config.py``)
that :mod:`core.io.torchtitan_import` knows to a :class:`Rule`: **used** (the session field it
fills), **no effect** (why it does not change the simulated iteration) or **refused** (what it
would change that is not modelled; values that switch it off are accepted). Kept apart from the
reader so that the table, which grows with torchtitan, is read in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.io.torchtitan_older import OLDER_MICROBATCHES

__all__ = ["Rule", "KEYS"]


@dataclass(frozen=True)
class Rule:
    """How the importer treats one ``section.key``: ``kind`` "used" (``text`` the session field
    it fills), "no_effect" (``text`` why) or "refused" (``text`` what it would change; values
    in ``inert`` switch it off and are accepted)."""

    kind: str
    text: str
    inert: tuple[Any, ...] = ()


def _used(text: str) -> Rule:
    return Rule("used", text)


def _none(text: str) -> Rule:
    return Rule("no_effect", text)


def _refused(text: str, *inert: Any) -> Rule:
    return Rule("refused", text, inert)


_LOGGING = "logging, not the iteration"
_CKPT = ("where and what the checkpoints save (paths, loading, the last step's model-only "
         "export, kept copies): not their timing")
#: Every key of torchtitan's job config the importer knows; a whole section maps with "*".
KEYS: dict[str, Rule] = {
    "job.*": _none("the run's name, folder and printing"),
    "profiling.*": _none("the PyTorch profiler's schedule (a few profiled iterations)"),
    "metrics.*": _none(_LOGGING),
    "checkpoint.enable": _used("reliability.checkpoint_interval_iterations (false, torchtitan's "
                               "default: no checkpoint at all, 2^40; true: every interval "
                               "steps)"),
    "checkpoint.interval": _used("reliability.checkpoint_interval_iterations (steps between "
                                 "saves; default 500)"),
    "checkpoint.async_mode": _used("reliability.async_save (disabled: false; async, "
                                   "async_with_pinned_mem: true)"),
    # older torchtitan (2024): Checkpoint.interval_type "steps" (default) or "seconds"
    "checkpoint.interval_type": _refused("checkpoint.interval read as seconds between saves "
                                         "(older torchtitan), not steps", "steps"),
    "checkpoint.enable_first_step_checkpoint": _none(
        "one more save, after step 1 (a check of the storage): not charged"),
    "checkpoint.*": _none(_CKPT),
    "comm.*": _none("NCCL timeouts and the flight recorder's buffer: no effect on a healthy "
                    "iteration"),
    "optimizer.name": _used("checked: AdamW or Adam (the simulator's optimizer state is Adam's)"),
    # components/optimizer.py: OptimizersInBackwardContainer steps each parameter's optimizer
    # in a post-accumulate-grad hook and zeroes its gradient: no full gradient buffer held
    "optimizer.early_step_in_backward": _refused("the optimizer step run in the backward, "
                                                 "parameter by parameter, each gradient freed "
                                                 "after its step (gradient memory and the "
                                                 "step's timing)", False),
    "optimizer.*": _none("the optimizer's constants (learning rate, betas, eps, weight decay, "
                         "fused or foreach kernels: the same optimizer step)"),
    "lr_scheduler.*": _none("the learning-rate schedule (a number per step)"),
    "validation.*": _none("validation runs between training iterations (not timed)"),
    "model.name": _used("the model (with flavor): torchtitan's shape "
                        "(core.io.torchtitan_flavours)"),
    "model.flavor": _used("the model (with name): torchtitan's shape "
                          "(core.io.torchtitan_flavours)"),
    "model.converters": _used("float8 / quantize.linear.float8: plan.precision fp8; others "
                              "refused"),
    "model.tokenizer_path": _none("a path (the vocabulary is the flavour's)"),
    "model.hf_assets_path": _none("a path (the vocabulary is the flavour's)"),
    "model.norm_type": _used("checked: rmsnorm (the flavours' norm)"),
    "model.print_after_conversion": _none(_LOGGING),
    "training.local_batch_size": _used("plan.micro_batch_size without pipelining; the "
                                       "pipeline's micro-batches with it"),
    "training.global_batch_size": _used("plan.global_batch_size (-1: local_batch_size times "
                                        "the data-parallel degree)"),
    "training.seq_len": _used("model.seq_length"),
    "training.steps": _used("cost.training_tokens = steps * global batch * seq_len"),
    "training.mixed_precision_param": _used("plan.precision (bfloat16: bf16, float32: fp32; "
                                            "fp32 with tensor or pipeline parallelism and no "
                                            "FSDP, where torchtitan has no mixed precision)"),
    "training.mixed_precision_reduce": _used("plan.grad_reduce_dtype (FSDP's; DDP reduces the "
                                             "fp32 gradients)"),
    "training.max_norm": _none("gradient clipping: a norm over the gradients (a small "
                               "reduction), not timed"),
    "training.warmup_steps": _none("the learning-rate warm-up (older torchtitan)"),
    "training.dataset": _none("the data (token ids: the same work)"),
    "training.dataset_path": _none("a path"),
    "training.gc_freq": _none("Python's garbage collection every few steps"),
    "training.seed": _none("a seed"), "training.deterministic": _none(
        "deterministic algorithms (close in speed for GEMMs and FlashAttention; not modelled)"),
    "training.gc_debug": _refused("gc.collect() every step (a debugging mode: host time not "
                                  "modelled)", False),
    "training.dataloader": _none("the data loader's worker processes (host side: the same "
                                 "token ids)"),
    "training.enable_cpu_offload": _refused("FSDP's CPU offload of parameters, gradients and "
                                            "the optimizer step: host transfers and a CPU Adam",
                                            False),
    "training.dtype": _refused("bfloat16 training: parameters, gradients and optimizer state "
                               "stored in bf16 with no fp32 copy (the simulator's precisions "
                               "keep fp32 master weights)", "float32"),
    "parallelism.data_parallel_replicate_degree": _used("plan.data_parallel (times the shard "
                                                        "degree); HSDP replicas"),
    "parallelism.data_parallel_shard_degree": _used("plan.data_parallel (times the replicas); "
                                                    "FSDP over shard x cp ranks when either "
                                                    "exceeds one: plan.zero_stage, "
                                                    "plan.data_parallel_shard_size; "
                                                    "plan.fsdp_fp32_params at every degree, in "
                                                    "effect under FSDP (ZeRO-3)"),
    "parallelism.tensor_parallel_degree": _used("plan.tensor_parallel (sequence-parallel, as "
                                                "torchtitan's TP always is; "
                                                "plan.tp_saved_input gathered at every degree, "
                                                "in effect above one)"),
    "parallelism.pipeline_parallel_degree": _used("plan.pipeline_parallel (torchtitan's split: "
                                                  "plan.pipeline_model_parallel_layout)"),
    "parallelism.context_parallel_degree": _used("plan.context_parallel (above one FSDP "
                                                 "shards over the context-parallel ranks too)"),
    "parallelism.expert_parallel_degree": _used("plan.expert_parallel"),
    "parallelism.expert_tensor_parallel_degree": _used("plan.expert_tensor_parallel"),
    "parallelism.pipeline_parallel_schedule": _used("plan.schedule (1F1B, GPipe, "
                                                    "Interleaved1F1B with two stages per rank)"),
    "parallelism.pipeline_parallel_microbatch_size": _used("plan.micro_batch_size with "
                                                           "pipelining"),
    "parallelism.context_parallel_rotate_method": _used("plan.cp_comm_type (allgather; "
                                                        "alltoall: the p2p ring)"),
    "parallelism.enable_async_tensor_parallel": _used("plan.tp_comm_overlap (torchtitan's "
                                                      "async TP: collective matmuls; "
                                                      "tp_comm_overlap_backend "
                                                      "symmetric_memory)"),
    "parallelism.fsdp_reshard_after_forward": _used("plan.zero_stage: 3 when FSDP re-gathers "
                                                    "the parameters in the backward (always; "
                                                    "default without pipelining), 2 when it "
                                                    "keeps them (never; default with it)"),
    "parallelism.pipeline_parallel_schedule_csv": _refused("a pipeline schedule of your own "
                                                          "read from a CSV file", None, ""),
    "parallelism.pipeline_parallel_expert_parallel_overlap": _none(
        "DualPipeV's overlap of the expert-parallel all-to-alls (that schedule is refused; no "
        "effect on the others)"),
    # components/validate.py, train.py: the sequence split over the CP ranks; headtail is the
    # 2 * cp chunks, head and tail to each rank, the simulator's (Megatron-Core's) balance
    "parallelism.context_parallel_load_balancer": _refused(
        "another split of the sequence over the context-parallel ranks than headtail (the "
        "simulator's 2 * cp chunks): ptrr's or none, unbalanced causal attention", "headtail"),
    "parallelism.expert_parallel_comm_backend": _refused("DeepEP's dispatch and combine kernels "
                                                         "for the expert all-to-alls",
                                                         "standard"),
    "parallelism.disable_loss_parallel": _refused("the output layer's logits gathered to every "
                                                  "tensor-parallel rank instead of the "
                                                  "vocabulary-parallel loss: (s, V) all-gather "
                                                  "and memory", False),
    "parallelism.enable_compiled_autograd": _refused("compiled autograd (a traced backward): "
                                                     "not modelled", False),
    "parallelism.pipeline_parallel_layers_per_stage": _refused(
        "stages of a given number of layers (virtual stages from it): give the session's "
        "pipeline_model_parallel_layout instead", None),
    "parallelism.pipeline_parallel_split_points": _refused(
        "a pipeline split at given layers: give the session's pipeline_model_parallel_layout",
        None, []),
    "parallelism.module_fqns_per_model_part": _refused(
        "a pipeline split by module names: give the session's pipeline_model_parallel_layout",
        None, []),
    "parallelism.pipeline_parallel_first_stage_less_layers": _refused(
        "another first-stage count than torchtitan's default (one layer fewer)", 1),
    "parallelism.pipeline_parallel_last_stage_less_layers": _refused(
        "another last-stage count than torchtitan's default (one layer fewer)", 1),
    "activation_checkpoint.mode": _used("plan.recompute (none, selective, full)"),
    "activation_checkpoint.selective_ac_option": _used("op: plan.recompute selective_op "
                                                       "(torchtitan's per-op policy); 1: full; "
                                                       "another layer interval refused"),
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": _none(
        "the MoE router's matmul forced into recomputation (a (T, E) GEMM)"),
    "activation_checkpoint.early_stop": _none("stops the recomputation at the last saved "
                                              "tensor (the same recomputed ops)"),
    "activation_checkpoint.preserve_rng_state": _none("the RNG state (no dropout in these "
                                                      "models)"),
    "activation_checkpoint.determinism_check": _none("a check mode of checkpointing"),
    "activation_checkpoint.debug": _none(_LOGGING),
    "activation_checkpoint.memory_budget": _none("the budget of mode memory_budget (refused by "
                                                 "activation_checkpoint.mode)"),
    "activation_checkpoint.visualize_memory_budget_pareto": _none(_LOGGING),
    "compile.enable": _used("model.bias_activation_fusion: false (the default) runs "
                            "FeedForward eagerly, w2(F.silu(w1(x)) * w3(x)): silu saves its "
                            "input and the product both operands, 8f bytes per token kept, not "
                            "6f, and silu and the product are separate kernels; true with "
                            "\"model\" in compile.components is read as Megatron-Core's fused "
                            "kernel (6f: fc1's outputs and fc2's input; inductor's partitioner "
                            "may recompute the product instead of saving it, not modelled). "
                            "compile's other fusions (norms) are not modelled: on an H200 it "
                            "took 9 % off a Llama 3 8B step, which the shipped store times as "
                            "the eager one, benchmarks/data/h200_llama_step.json; async TP "
                            "needs it in torchtitan"),
    "compile.components": _used("model.bias_activation_fusion: see compile.enable (the model "
                                "is compiled with \"model\" among them, torchtitan's default "
                                "[\"model\", \"loss\"])"),
    "compile.backend": _none("see compile.enable"),
    "float8.enable_fsdp_float8_all_gather": _used("plan.fp8_param_gather"),
    "float8.precompute_float8_dynamic_scale_for_fsdp": _none(
        "one amax reduction for all parameters instead of one per parameter (a small "
        "all-reduce)"),
    "float8.force_recompute_fp8_weight_in_bwd": _none("the weights' FP8 cast again in the "
                                                      "backward (an elementwise kernel)"),
    "float8.recipe_name": _used("plan.fp8_recipe (tensorwise); rowwise recipes refused"),
    "float8.filter_fqns": _refused("FP8 on other modules than the transformer layers' "
                                   "linears (['output'] keeps the output layer in BF16, as the "
                                   "simulator does; torchtitan's default [] converts it too)",
                                   ["output"]),
    "float8.emulate": _refused("FP8 emulated in BF16 (a test mode: BF16 GEMMs plus casts)",
                               False),
    "float8.moe_fqns_prototype": _refused("FP8 grouped GEMMs of the experts (a prototype)",
                                          None, []),
    "float8.enable_float8_linear": _used("plan.precision fp8 (torchtitan's older switch)"),
    "float8.scaling_type_input": _refused("delayed scaling of the inputs' FP8 casts (older "
                                          "torchtitan; amax histories, not modelled)", "dynamic"),
    "float8.scaling_type_weight": _refused("delayed scaling of the weights' FP8 casts (older "
                                           "torchtitan; amax histories, not modelled)", "dynamic"),
    "float8.scaling_type_grad_output": _refused("delayed scaling of the output gradients' FP8 "
                                                "casts (older torchtitan; amax histories, not "
                                                "modelled)", "dynamic"),
    "fault_tolerance.enable": _refused("torchft's fault-tolerant replicas (a quorum each step)",
                                       False),
    "fault_tolerance.*": _none("torchft's settings (off)"),
    "memory_estimation.*": _none("torchtitan's memory estimator (a dry run)"),
    OLDER_MICROBATCHES: _used("plan.micro_batch_size with pipelining: the local batch "
                                   "over this many micro-batches (older torchtitan; default "
                                   "the pipeline degree)"),
    "experimental.custom_import": _refused("a model or component of your own: the importer "
                                           "cannot tell what it runs", None, ""),
    "experimental.custom_args_module": _refused("arguments of your own", None, ""),
    "debug.*": _none("debugging switches (seeds, determinism)"),
}
