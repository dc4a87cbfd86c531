"""Megatron-LM's start-up checks that concern a plan, as data, and a checker that applies them.

A launch Megatron-LM refuses never trains, so ``vtrain export megatron-args`` checks the
arguments (and the environment) it writes against the assertions Megatron-LM runs before the
first step, and refuses a plan that breaks one, naming Megatron's rule; ``vtrain import
megatron-args`` refuses a launch whose arguments break one of :data:`RULES`
(:func:`core.io.megatron.to_session.refuse_broken_rules`). The rules come from
``validate_args`` in ``megatron/training/arguments.py`` (and, where noted, the
``__post_init__`` of ``megatron/core/transformer/transformer_config.py`` and the micro-batch
calculator), at the Megatron-LM commit of ``../shared/data/megatron-lm/arguments.json``
(:data:`MEGATRON_COMMIT`). Each :class:`Rule` holds the condition under which Megatron checks,
what it asserts, its assertion message, and where it is. docs/megatron_args.md lists them.

Rules read a *namespace*: Megatron's ``args`` (argument ``dest`` -> value, Megatron's defaults
for what the launch does not give), built from an argument list by :func:`namespace` with
:data:`OPTIONS` (the options the rules and the export use, as arguments.json gives them; a test
keeps the two equal). :func:`violations` applies :data:`RULES` and :data:`ENVIRONMENT_RULES`;
:func:`options_read` names the arguments that decide a rule; :func:`required_environment` is
what a launch script must export; :func:`parse_problems`
parses a whole argument list against arguments.json the way Megatron's argparse does (every
option defined, ``allow_abbrev=False``, values of the right count, type and choices).

No third-party imports: the command line's error path loads this module.
"""

from __future__ import annotations

import ast
from core.util.text import short_repr
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

__all__ = ["MEGATRON_COMMIT", "OPTIONS", "Rule", "EnvRule", "RULES", "ENVIRONMENT_RULES",
           "SESSION_FIELDS", "SET_BEFORE_CHECKS", "broken_rules", "options_read",
           "GPU_COMPUTE_CAPABILITY", "namespace", "violations", "required_environment",
           "parse_problems"]

#: The Megatron-LM commit whose parser arguments.json records (NVIDIA/Megatron-LM, 2026-08-22);
#: the rules below are this version's ``validate_args``.
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"

_SOURCE = "megatron/training/arguments.py validate_args"
_CONFIG_SOURCE = "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__"
_OPTIMIZER_SOURCE = "megatron/core/optimizer/optimizer_config.py OptimizerConfig.__post_init__"

#: option -> (dest, nargs, default): argparse's ``store_true`` is nargs 0 with default False,
#: ``store_false`` nargs 0 with default True (``--no-...`` switches); None is one value.
#: Exactly arguments.json's records of these options (tests/test_megatron_export.py).
OPTIONS: dict[str, tuple[str, Any, Any]] = {
    "--num-layers": ("num_layers", None, None),
    "--micro-batch-size": ("micro_batch_size", None, None),
    "--global-batch-size": ("global_batch_size", None, None),
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", None, 1),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", None, 1),
    "--context-parallel-size": ("context_parallel_size", None, 1),
    "--expert-model-parallel-size": ("expert_model_parallel_size", None, 1),
    "--num-experts": ("num_experts", None, None),
    "--sequence-parallel": ("sequence_parallel", 0, False),
    "--tp-comm-overlap": ("tp_comm_overlap", 0, False),
    "--use-distributed-optimizer": ("use_distributed_optimizer", 0, False),
    "--num-distributed-optimizer-instances": ("num_distributed_optimizer_instances", None, 1),
    "--use-torch-fsdp2": ("use_torch_fsdp2", 0, False),
    "--use-megatron-fsdp": ("use_megatron_fsdp", 0, False),
    "--data-parallel-sharding-strategy": ("data_parallel_sharding_strategy", None,
                                          "optim_grads_params"),
    "--no-gradient-accumulation-fusion": ("gradient_accumulation_fusion", 0, True),
    "--ckpt-format": ("ckpt_format", None, "torch_dist"),
    "--untie-embeddings-and-output-weights": ("untie_embeddings_and_output_weights", 0, False),
    "--fp16": ("fp16", 0, False),
    "--bf16": ("bf16", 0, False),
    "--fp8-format": ("fp8", None, None),
    "--fp8-param-gather": ("fp8_param_gather", 0, False),
    "--use-precision-aware-optimizer": ("use_precision_aware_optimizer", 0, False),
    "--main-grads-dtype": ("main_grads_dtype", None, "fp32"),
    "--main-params-dtype": ("main_params_dtype", None, "fp32"),
    "--exp-avg-dtype": ("exp_avg_dtype", None, "fp32"),
    "--exp-avg-sq-dtype": ("exp_avg_sq_dtype", None, "fp32"),
    "--overlap-grad-reduce": ("overlap_grad_reduce", 0, False),
    "--overlap-param-gather": ("overlap_param_gather", 0, False),
    "--cross-entropy-loss-fusion": ("cross_entropy_loss_fusion", 0, False),
    "--cross-entropy-fusion-impl": ("cross_entropy_fusion_impl", None, "native"),
    "--num-layers-per-virtual-pipeline-stage": ("num_layers_per_virtual_pipeline_stage", None, None),
    "--num-virtual-stages-per-pipeline-rank": ("num_virtual_stages_per_pipeline_rank", None, None),
    "--no-overlap-p2p-communication": ("overlap_p2p_comm", 0, True),
    "--decoder-first-pipeline-num-layers": ("decoder_first_pipeline_num_layers", None, None),
    "--decoder-last-pipeline-num-layers": ("decoder_last_pipeline_num_layers", None, None),
    "--pipeline-model-parallel-layout": ("pipeline_model_parallel_layout", None, None),
    "--account-for-embedding-in-pipeline-split": ("account_for_embedding_in_pipeline_split", 0, False),
    "--account-for-loss-in-pipeline-split": ("account_for_loss_in_pipeline_split", 0, False),
    "--recompute-activations": ("recompute_activations", 0, False),
    "--recompute-granularity": ("recompute_granularity", None, None),
    "--recompute-method": ("recompute_method", None, None),
    "--recompute-num-layers": ("recompute_num_layers", None, None),
    "--save": ("save", None, None),
    "--persistent-save-interval": ("save_interval", None, None),  # --save-interval's other name
    "--save-interval": ("save_interval", None, None),
    "--train-iters": ("train_iters", None, None),
    "--train-samples": ("train_samples", None, None),
    "--rampup-batch-size": ("rampup_batch_size", 3, None),
    "--lr-decay-samples": ("lr_decay_samples", None, None),
    "--lr-warmup-samples": ("lr_warmup_samples", None, 0),
    "--lr-decay-iters": ("lr_decay_iters", None, None),
    "--lr-warmup-iters": ("lr_warmup_iters", None, 0),
    "--lr-warmup-fraction": ("lr_warmup_fraction", None, None),
}

#: Compute capability (major) of each shipped GPU kind: Megatron-LM's
#: ``get_device_arch_version()``. Ampere 8, Hopper 9, Blackwell 10 (NVIDIA's CUDA GPU list).
#: A kind not listed (a custom profile) is taken as pre-Blackwell: the stricter case.
GPU_COMPUTE_CAPABILITY = {"A100-SXM4-80GB": 8, "H100-SXM5-80GB": 9, "H100-96GB-HBM2e-500W": 9,
                          "H200-SXM-141GB": 9, "B200-180GB": 10, "GB200-NVL72": 10}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Rule:
    """One assertion of Megatron-LM's start-up on the arguments.

    Attributes
    ----------
    name : str
        Short id (tests and docs refer to it).
    when : callable(ns) -> bool
        When Megatron checks (``ns``: the namespace of :func:`namespace`).
    holds : callable(ns) -> bool
        What it asserts.
    message : str
        Megatron's assertion message.
    source : str
        File and function of the check.
    wording : str
        ``"quoted"``: the message is Megatron's assertion text; ``"paraphrased"``: the check is
        Megatron's but its text is said in our words (no Megatron-LM source in this checkout
        to quote from: see docs/megatron_args.md).
    on_import : bool
        Whether an imported launch that breaks it is refused (the export always is): False
        for a feature that this commit disables but earlier Megatron-LM versions run, so a
        launch written for one of them started.
    """

    name: str
    when: Callable[[Mapping[str, Any]], bool]
    holds: Callable[[Mapping[str, Any]], bool]
    message: str
    source: str = _SOURCE
    wording: str = "quoted"
    on_import: bool = True


def _fsdp2(ns: Mapping[str, Any]) -> bool:
    return bool(ns["use_torch_fsdp2"])


def _megatron_fsdp(ns: Mapping[str, Any]) -> bool:
    return bool(ns["use_megatron_fsdp"])


def _interleaved(ns: Mapping[str, Any]) -> bool:
    return ns["num_virtual_stages_per_pipeline_rank"] is not None or \
        ns["num_layers_per_virtual_pipeline_stage"] is not None


def _even_split(ns: Mapping[str, Any]) -> bool:
    """Megatron splits the layers evenly: no uneven first/last stage and no custom layout."""
    return ns["decoder_first_pipeline_num_layers"] is None and \
        ns["decoder_last_pipeline_num_layers"] is None and \
        ns["pipeline_model_parallel_layout"] is None


def _layer_slots(ns: Mapping[str, Any]) -> int:
    """Layers plus the embedding and loss slots Megatron counts in the split."""
    return (ns["num_layers"] or 0) + bool(ns["account_for_embedding_in_pipeline_split"]) + \
        bool(ns["account_for_loss_in_pipeline_split"])


#: Megatron-LM's assertions on the plan's arguments (see the module docstring for the source).
RULES: tuple[Rule, ...] = (
    Rule("fsdp2-pipeline", _fsdp2, lambda ns: ns["pipeline_model_parallel_size"] == 1,
         "--use-torch-fsdp2 is not supported with pipeline parallelism"),
    Rule("fsdp2-expert", _fsdp2, lambda ns: ns["expert_model_parallel_size"] == 1,
         "--use-torch-fsdp2 is not supported with expert parallelism"),
    Rule("fsdp2-distributed-optimizer", _fsdp2, lambda ns: not ns["use_distributed_optimizer"],
         "--use-torch-fsdp2 is not supported with MCore's distributed optimizer"),
    Rule("fsdp2-gradient-accumulation-fusion", _fsdp2,
         lambda ns: not ns["gradient_accumulation_fusion"],
         "--use-torch-fsdp2 is not supported with gradient accumulation fusion"),
    Rule("fsdp2-checkpoint-format", _fsdp2, lambda ns: ns["ckpt_format"] == "torch_dist",
         "--use-torch-fsdp2 requires --ckpt-format torch_dist"),
    Rule("fsdp2-untied-embeddings", _fsdp2, lambda ns: ns["untie_embeddings_and_output_weights"],
         "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights"),
    Rule("fsdp2-fp16", _fsdp2, lambda ns: not ns["fp16"],
         "--use-torch-fsdp2 not supported with fp16 yet"),
    # Megatron-Core 0.16.1 saves Megatron-FSDP's optimizer state only as fsdp_dtensor
    # (megatron/core/optimizer/distrib_optimizer.py:1229, NotImplementedError otherwise);
    # earlier Megatron-LM versions started with torch_dist
    Rule("megatron-fsdp-checkpoint-format", _megatron_fsdp,
         lambda ns: ns["ckpt_format"] == "fsdp_dtensor",
         "Megatron FSDP only supports fsdp_dtensor checkpoint format", wording="paraphrased",
         on_import=False),
    Rule("cross-entropy-te", lambda ns: bool(ns["cross_entropy_loss_fusion"]),
         lambda ns: ns["cross_entropy_fusion_impl"] != "te",
         "--cross-entropy-fusion-impl te is disabled; use native", wording="paraphrased",
         on_import=False),  # Megatron-Bridge's recipes (25.11-26.04 containers) run te
    Rule("tp-comm-overlap-sequence-parallel", lambda ns: bool(ns["tp_comm_overlap"]),
         lambda ns: bool(ns["sequence_parallel"]),
         "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism "
         "is enabled"),
    Rule("overlap-param-gather-optimizer", lambda ns: bool(ns["overlap_param_gather"]),
         lambda ns: bool(ns["use_distributed_optimizer"] or ns["use_megatron_fsdp"]),
         "--overlap-param-gather only supported with distributed optimizer or megatron fsdp"),
    Rule("overlap-param-gather-grad-reduce", lambda ns: bool(ns["overlap_param_gather"]),
         lambda ns: bool(ns["overlap_grad_reduce"]),
         "Must use --overlap-param-gather with --overlap-grad-reduce"),
    Rule("fp8-param-gather-optimizer", lambda ns: bool(ns["fp8_param_gather"]),
         lambda ns: bool(ns["use_distributed_optimizer"] or ns["use_torch_fsdp2"]
                         or ns["use_megatron_fsdp"]),
         "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, "
         "megatron fsdp, or inference mode"),
    Rule("precision-aware-optimizer-distributed",
         lambda ns: bool(ns["use_precision_aware_optimizer"]),
         lambda ns: bool(ns["use_distributed_optimizer"]),
         "--use-precision-aware-optimizer only supported with distributed optimizer",
         source=_OPTIMIZER_SOURCE),
    Rule("state-dtypes-precision-aware",
         lambda ns: not ns["use_precision_aware_optimizer"],
         lambda ns: all(ns[f] == "fp32" for f in ("main_grads_dtype", "main_params_dtype",
                                                  "exp_avg_dtype", "exp_avg_sq_dtype")),
         "main_grads_dtype, main_params_dtype, exp_avg_dtype and exp_avg_sq_dtype can only be "
         "fp32 when not using precision-aware optimizer", source=_OPTIMIZER_SOURCE,
         wording="paraphrased"),
    Rule("distributed-optimizer-instances",
         lambda ns: (_int(ns["num_distributed_optimizer_instances"]) or 1) > 1,
         lambda ns: bool(ns["use_distributed_optimizer"]),
         "--num-distributed-optimizer-instances > 1 is only supported with the distributed "
         "optimizer", wording="paraphrased"),
    Rule("expert-parallel-experts", lambda ns: (_int(ns["expert_model_parallel_size"]) or 1) > 1,
         lambda ns: ns["num_experts"] is not None
         and ns["num_experts"] % ns["expert_model_parallel_size"] == 0,
         "Number of experts should be a multiple of expert model parallel_size."),
    Rule("expert-parallel-fp16", lambda ns: (_int(ns["expert_model_parallel_size"]) or 1) > 1,
         lambda ns: not ns["fp16"], "Expert parallelism is not supported with fp16 training."),
    Rule("expert-tensor-parallel-sequence-parallel",
         lambda ns: (_int(ns["expert_model_parallel_size"]) or 1) > 1
         and (_int(ns["tensor_model_parallel_size"]) or 1) > 1,
         lambda ns: bool(ns["sequence_parallel"]),
         "When using expert parallelism and tensor parallelism, sequence parallelism must be "
         "used."),
    Rule("virtual-stage-options-exclusive",
         lambda ns: ns["num_layers_per_virtual_pipeline_stage"] is not None,
         lambda ns: ns["num_virtual_stages_per_pipeline_rank"] is None,
         "--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank "
         "cannot be set at the same time", wording="paraphrased"),
    Rule("interleaved-pipeline-size", _interleaved,
         lambda ns: (_int(ns["pipeline_model_parallel_size"]) or 1) > (
             1 if ns["overlap_p2p_comm"] else 2),
         "When interleaved schedule is used, pipeline-model-parallel size should be greater "
         "than 1 (greater than 2 with --no-overlap-p2p-communication)", wording="paraphrased"),
    Rule("pipeline-layers-divisible",
         lambda ns: _even_split(ns) and ns["num_layers"] is not None,
         lambda ns: _layer_slots(ns) % (_int(ns["pipeline_model_parallel_size"]) or 1) == 0,
         "Number of layers should be divisible by the pipeline-model-parallel size"),
    Rule("interleaved-layers-divisible",
         lambda ns: _even_split(ns) and ns["num_layers"] is not None and _interleaved(ns)
         and ns["num_virtual_stages_per_pipeline_rank"] is not None,
         lambda ns: _layer_slots(ns) % ((_int(ns["pipeline_model_parallel_size"]) or 1)
                                        * ns["num_virtual_stages_per_pipeline_rank"]) == 0,
         "number of layers should be divisible by the pipeline parallel size times the number "
         "of virtual stages per pipeline rank", _CONFIG_SOURCE, wording="paraphrased"),
    Rule("recompute-method-selective", lambda ns: ns["recompute_granularity"] == "selective",
         lambda ns: ns["recompute_method"] is None,
         "recompute method is not yet supported for selective recomputing granularity"),
    Rule("recompute-full-method", lambda ns: ns["recompute_granularity"] == "full",
         lambda ns: ns["recompute_method"] is not None,
         'Using recompute_granularity: full so recompute_method must be "block" or "uniform"',
         _CONFIG_SOURCE, wording="paraphrased"),
    Rule("recompute-full-num-layers", lambda ns: ns["recompute_granularity"] == "full",
         lambda ns: ns["recompute_num_layers"] is not None,
         "When using recompute_granularity: full recompute_num_layers must be between 1 and "
         "num_layers_per_pipeline_rank", _CONFIG_SOURCE, wording="paraphrased"),
    # validate_args' "Iteration-based training" block: the run's length is given one way
    Rule("iteration-or-sample-based", lambda ns: bool(ns["train_iters"]),
         lambda ns: ns["train_samples"] is None, "expected iteration-based training"),
    Rule("iteration-based-lr-decay", lambda ns: bool(ns["train_iters"]),
         lambda ns: ns["lr_decay_samples"] is None,
         "expected iteration-based learning rate decay"),
    Rule("iteration-based-lr-warmup", lambda ns: bool(ns["train_iters"]),
         lambda ns: ns["lr_warmup_samples"] == 0,
         "expected iteration-based learning rate warmup"),
    Rule("iteration-based-no-rampup", lambda ns: bool(ns["train_iters"]),
         lambda ns: ns["rampup_batch_size"] is None,
         "expected no batch-size rampup for iteration-based training"),
    Rule("iteration-based-one-warmup",
         lambda ns: bool(ns["train_iters"]) and ns["lr_warmup_fraction"] is not None,
         lambda ns: ns["lr_warmup_iters"] == 0,
         "can only specify one of lr-warmup-fraction and lr-warmup-iters"),
    # checkpoints: "if args.save is not None: assert args.save_interval is not None; assert
    # args.save_interval > 0" (bare assertions: their text is the statement; the same lines in
    # the megatron/training/arguments.py of the Megatron-Core 0.17.1, 0.18.2 and 0.19.0 wheels).
    # training.py reads a falsy interval as no periodic save ("if args.save and
    # args.save_interval and ..."), one at the end: the import reads it so (2^40 - 1), noted;
    # the export writes an interval for every session that saves
    Rule("save-interval-given", lambda ns: ns["save"] is not None,
         lambda ns: ns["save_interval"] is not None, "assert args.save_interval is not None",
         on_import=False),
    Rule("save-interval-positive",
         lambda ns: ns["save"] is not None and isinstance(ns["save_interval"], int),
         lambda ns: ns["save_interval"] > 0, "assert args.save_interval > 0", on_import=False),
    # the "Sample-based training" block
    Rule("sample-based-lr-decay", lambda ns: bool(ns["train_samples"]),
         lambda ns: ns["lr_decay_iters"] is None, "expected sample-based learning rate decay"),
    Rule("sample-based-lr-warmup", lambda ns: bool(ns["train_samples"]),
         lambda ns: ns["lr_warmup_iters"] == 0, "expected sample-based learnig rate warmup"),
    Rule("sample-based-one-warmup",
         lambda ns: bool(ns["train_samples"]) and ns["lr_warmup_fraction"] is not None,
         lambda ns: ns["lr_warmup_samples"] == 0,
         "can only specify one of lr-warmup-fraction and lr-warmup-samples"),
)


@dataclass(frozen=True)
class EnvRule:
    """An environment variable Megatron-LM's start-up asserts on.

    ``value`` is what the variable must be (``"1"``), or None when it must *not* be
    ``forbidden`` (the script unsets it). ``when(ns, capability)`` gets the GPU's compute
    capability (major) as :data:`GPU_COMPUTE_CAPABILITY` gives it.
    """

    name: str
    variable: str
    value: str | None
    when: Callable[[Mapping[str, Any], int], bool]
    message: str
    forbidden: str | None = None
    source: str = _SOURCE


def _tp_or_cp(ns: Mapping[str, Any]) -> bool:
    return (_int(ns["tensor_model_parallel_size"]) or 1) > 1 or \
        (_int(ns["context_parallel_size"]) or 1) > 1


#: Megatron-LM's assertions on the environment.
ENVIRONMENT_RULES: tuple[EnvRule, ...] = (
    EnvRule("cuda-device-max-connections", "CUDA_DEVICE_MAX_CONNECTIONS", "1",
            lambda ns, cc: _tp_or_cp(ns) and cc < 10
            and not (ns["use_torch_fsdp2"] or ns["use_megatron_fsdp"]),
            "Using tensor model parallelism or context parallelism require setting the "
            "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"),
    EnvRule("fsdp-cuda-device-max-connections", "CUDA_DEVICE_MAX_CONNECTIONS", None,
            lambda ns, cc: bool(ns["use_torch_fsdp2"] or ns["use_megatron_fsdp"]),
            "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one",
            forbidden="1"),
)


#: The session fields behind each rule (for messages: the user changes these, not arguments).
SESSION_FIELDS = {
    "fsdp2-pipeline": "plan.zero_stage 3 with plan.pipeline_parallel > 1",
    "fsdp2-expert": "plan.zero_stage 3 with plan.expert_parallel > 1",
    "fsdp2-distributed-optimizer": "plan.zero_stage",
    "fsdp2-gradient-accumulation-fusion": "plan.zero_stage",
    "fsdp2-checkpoint-format": "plan.zero_stage",
    "fsdp2-untied-embeddings": "plan.zero_stage 3 with model.tied_embeddings",
    "fsdp2-fp16": "plan.zero_stage 3 with plan.precision fp16",
    "megatron-fsdp-checkpoint-format": "plan.zero_stage (Megatron-FSDP; the export writes "
                                       "--ckpt-format fsdp_dtensor)",
    "cross-entropy-te": "plan.cross_entropy_fusion_impl",
    "tp-comm-overlap-sequence-parallel": "plan.tp_comm_overlap",
    "overlap-param-gather-optimizer": "plan.overlap_param_gather",
    "overlap-param-gather-grad-reduce": "plan.overlap_param_gather without plan.overlap_grad_reduce",
    "fp8-param-gather-optimizer": "plan.fp8_param_gather",
    "precision-aware-optimizer-distributed": "plan.use_precision_aware_optimizer",
    "state-dtypes-precision-aware": "plan.main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype",
    "distributed-optimizer-instances": "plan.data_parallel_shard_size",
    "expert-parallel-experts": "plan.expert_parallel",
    "expert-parallel-fp16": "plan.expert_parallel with plan.precision fp16",
    "expert-tensor-parallel-sequence-parallel": "plan.sequence_parallel",
    "virtual-stage-options-exclusive": "plan.virtual_pipeline_stages (the export writes one "
                                       "option)",
    "interleaved-pipeline-size": "plan.schedule interleaved",
    "pipeline-layers-divisible": "plan.pipeline_parallel",
    "interleaved-layers-divisible": "plan.virtual_pipeline_stages",
    "recompute-method-selective": "plan.recompute",
    "recompute-full-method": "plan.recompute",
    "recompute-full-num-layers": "plan.recompute_num_layers",
    "iteration-or-sample-based": "cost.training_tokens (the export writes --train-samples only)",
    "iteration-based-lr-decay": "(a launch's own arguments: the export writes no schedule)",
    "iteration-based-lr-warmup": "(a launch's own arguments: the export writes no schedule)",
    "iteration-based-no-rampup": "(a launch's own arguments: the export writes no ramp-up)",
    "save-interval-given": "reliability.checkpoint_interval_iterations (the export writes "
                           "--save-interval for a session that saves, 2^40 - 1 for one save at "
                           "the end, and leaves --save to you)",
    "save-interval-positive": "reliability.checkpoint_interval_iterations (the export writes "
                              "--save-interval for a session that saves, 2^40 - 1 for one save "
                              "at the end, and leaves --save to you)",
    "iteration-based-one-warmup": "(a launch's own arguments: the export writes no schedule)",
    "sample-based-lr-decay": "(a launch's own arguments: the export writes no schedule)",
    "sample-based-lr-warmup": "(a launch's own arguments: the export writes no schedule)",
    "sample-based-one-warmup": "(a launch's own arguments: the export writes no schedule)",
}


def namespace(args: Iterable[str]) -> dict[str, Any]:
    """Megatron's ``args`` for the dests of :data:`OPTIONS` from an argument list (shell words,
    ``--flag value`` or ``--flag=value``): the last value wins (argparse), Megatron's default
    where the list does not give the option; ints read as ints (a value that is not one stays
    text: :func:`parse_problems` names it). Options outside :data:`OPTIONS` are skipped.
    The values ``validate_args`` sets before its checks are set (:data:`SET_BEFORE_CHECKS`:
    ``--recompute-activations`` makes ``recompute_granularity`` selective)."""
    ns = {dest: default for dest, _, default in OPTIONS.values()}
    words = list(args)
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        i += 1
        if name not in OPTIONS:
            continue
        dest, nargs, default = OPTIONS[name]
        if nargs == 0:
            ns[dest] = not default if isinstance(default, bool) else True
            continue
        if not eq:
            if i >= len(words) or words[i].startswith("--"):
                continue
            value, i = words[i], i + 1
        try:
            ns[dest] = int(value) if isinstance(default, int) or dest in _INT_DESTS else value
        except ValueError:
            ns[dest] = value
    for dest, (source, value) in SET_BEFORE_CHECKS.items():
        if ns[source]:
            ns[dest] = value
    return ns


#: What ``validate_args`` sets before its checks: dest -> (the switch that sets it, the value).
#: --recompute-activations is selective recomputation ("if args.recompute_activations:
#: args.recompute_granularity = 'selective'"), over any --recompute-granularity.
SET_BEFORE_CHECKS: dict[str, tuple[str, Any]] = {
    "recompute_granularity": ("recompute_activations", "selective"),
}


_INT_DESTS = frozenset({"num_layers", "micro_batch_size", "global_batch_size", "num_experts",
                        "num_layers_per_virtual_pipeline_stage",
                        "num_virtual_stages_per_pipeline_rank",
                        "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                        "train_iters", "train_samples", "lr_decay_samples",
                        "lr_warmup_samples", "lr_decay_iters", "lr_warmup_iters",
                        "save_interval"})


def broken_rules(args: Iterable[str]) -> list[Rule]:
    """The rules of :data:`RULES` that ``args`` break (the environment aside)."""
    ns = namespace(args)
    return [r for r in RULES if r.when(ns) and not r.holds(ns)]


class _Recording(dict):
    """A namespace that records the dests read from it, in the order read."""

    def __init__(self, ns: Mapping[str, Any]) -> None:
        super().__init__(ns)
        self.read: list[str] = []

    def __getitem__(self, dest: str) -> Any:
        if dest not in self.read:
            self.read.append(dest)
        return super().__getitem__(dest)


_OPTION_OF_DEST = {dest: option for option, (dest, _, _) in OPTIONS.items()}


def options_read(rule: Rule, args: Iterable[str]) -> list[str]:
    """The options of :data:`OPTIONS` whose values decide ``rule`` on ``args``: those its
    ``when`` and ``holds`` read (in that order, the conditions short-circuited as they are).
    For a broken rule these are the arguments to change (given or left at Megatron's default)."""
    ns = _Recording(namespace(args))
    if rule.when(ns):
        rule.holds(ns)
    out, values = [], dict(ns)  # (reading the switches below is not the rule's reading)
    for dest in ns.read:  # a value validate_args set is decided by the switch that set it
        source = SET_BEFORE_CHECKS.get(dest, (None,))[0]
        option = _OPTION_OF_DEST[source if source and values[source] else dest]
        if option not in out:
            out.append(option)
    return out


def violations(args: Iterable[str], env: Mapping[str, str] | None = None,
               gpu: str | None = None, *, world_size: int | None = None) -> list[str]:
    """Megatron-LM's start-up assertions that ``args`` (with ``env``, on ``gpu``) break.

    Parameters
    ----------
    args : list of str
        The training script's arguments.
    env : mapping, optional
        The environment the launch runs in; None skips the environment rules.
    gpu : str, optional
        GPU kind (:data:`GPU_COMPUTE_CAPABILITY`; unknown or None: pre-Blackwell).
    world_size : int, optional
        GPUs of the launch; with it the data-parallel size and the batch split are checked.

    Returns
    -------
    list of str
        ``"<Megatron's message> (<source>; rule <name>)"``, one per broken rule, in the
        table's order; empty when Megatron starts.
    """
    ns = namespace(args)
    out = [f"{r.message} ({r.source}; rule {r.name})" for r in RULES
           if r.when(ns) and not r.holds(ns)]
    if env is not None:
        cc = GPU_COMPUTE_CAPABILITY.get(gpu or "", 9)
        for r in ENVIRONMENT_RULES:
            if not r.when(ns, cc):
                continue
            have = env.get(r.variable)
            broken = have != r.value if r.value is not None else have == r.forbidden
            if broken:
                out.append(f"{r.message} ({r.source}; rule {r.name})")
    if world_size is not None:
        out += _batch_problems(ns, world_size)
    return out


def _batch_problems(ns: Mapping[str, Any], world: int) -> list[str]:
    t, p, cp = (_int(ns[k]) or 1 for k in ("tensor_model_parallel_size",
                                           "pipeline_model_parallel_size", "context_parallel_size"))
    if world % (t * p * cp):
        return [f"world size ({world}) is not divisible by tensor model parallel size ({t}) times "
                f"pipeline model parallel size ({p}) times context parallel size ({cp}) "
                f"({_SOURCE}; rule world-size)"]
    d = world // (t * p * cp)
    b, B = _int(ns["micro_batch_size"]), _int(ns["global_batch_size"])
    if b and B and B % (b * d):
        return [f"global batch size ({B}) is not divisible by micro batch size ({b}) times data "
                f"parallel size ({d}) (megatron/core/num_microbatches_calculator.py; rule "
                "global-batch-divisible)"]
    return []


def required_environment(args: Iterable[str], gpu: str | None) -> dict[str, str | None]:
    """What a launch of ``args`` on ``gpu`` must export (``{"CUDA_DEVICE_MAX_CONNECTIONS": "1"}``);
    a None value is a variable the launch must unset."""
    ns = namespace(args)
    cc = GPU_COMPUTE_CAPABILITY.get(gpu or "", 9)
    return {r.variable: r.value for r in ENVIRONMENT_RULES if r.when(ns, cc)}


# --------------------------------------------------------------------------- argparse check

def _enum_names(choices: list[str]) -> list[str]:
    """``<AttnBackend.flash: 1>`` -> ``flash`` (arguments.json records enum choices so)."""
    return [c.split(".", 1)[1].split(":", 1)[0] if c.startswith("<") else c for c in choices]


def _typed(value: str, kind: str | None) -> Any:
    """``value`` converted as Megatron's argparse type ``kind`` would; raises ValueError."""
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "tuple_type":  # "(4096,0)"
        t = ast.literal_eval(value)
        if not isinstance(t, tuple) or not all(isinstance(x, int) for x in t):
            raise ValueError(value)
        return t
    if kind == "moe_freq_type":  # an int, or a Python list expression ("([0]*3+[1]*58)")
        try:
            return int(value)
        except ValueError:
            ast.parse(value, mode="eval")
            if not value.lstrip("( ").startswith("["):
                raise ValueError(value) from None
            return value
    return value


def parse_problems(args: Iterable[str], spec: Mapping[str, Any]) -> list[str]:
    """What Megatron-LM's argparse refuses in ``args``, with ``spec`` the parsed arguments.json.

    Every ``--option`` must be one of the parser's option strings (argparse with
    ``allow_abbrev=False``), take as many values as its ``nargs`` (``=value`` counts as one),
    and each value must convert with its type and be one of its choices. Returns one line per
    problem; empty when the list parses.
    """
    options = {o: a for a in spec["arguments"] for o in a["options"]}
    words = list(args)
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            out.append(f"{short_repr(word)}: a value with no option before it")
            continue
        name, eq, inline = word.partition("=")
        a = options.get(name)
        if a is None:
            out.append(f"{name}: not an argument of Megatron-LM at {spec.get('commit', '?')[:12]}")
            continue
        values = [inline] if eq else []
        if not eq:
            while i < len(words) and not (words[i].startswith("--") or (
                    words[i].startswith("-") and not _is_number(words[i]))):
                values.append(words[i])
                i += 1
        nargs = a["nargs"]
        if a["action"] in ("_StoreTrueAction", "_StoreFalseAction", "BooleanOptionalAction") or \
                nargs == 0:
            if values:
                out.append(f"{name}: a switch, given {' '.join(values)}")
            continue
        want = {None: (1, 1), "?": (0, 1), "*": (0, None), "+": (1, None)}.get(
            nargs, (nargs, nargs) if isinstance(nargs, int) else (1, 1))
        if len(values) < want[0] or (want[1] is not None and len(values) > want[1]):
            out.append(f"{name}: takes {nargs if nargs is not None else 1} value(s), got "
                       f"{len(values)}")
            continue
        choices = _enum_names(a["choices"]) if a["choices"] else None
        for v in values:
            try:
                typed = _typed(v, a["type"] if a["type"] != "enum_type_handler" else None)
            except (ValueError, SyntaxError):
                out.append(f"{name}: {short_repr(v)} is not a valid {a['type']}")
                continue
            if choices is not None and typed not in choices and str(typed) not in choices:
                out.append(f"{name}: {short_repr(v)} is not one of {', '.join(map(str, choices))}")
    return out


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False
