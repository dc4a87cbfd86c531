"""Megatron-LM launch arguments in and out of sessions.

``read_launch`` reads a Megatron-LM / Megatron-Core launch: a shell script
(``torchrun ... pretrain_gpt.py --num-layers ...``, with line continuations,
variables and bash arrays assigned in the script, ``$((...))`` integer
arithmetic, ``#SBATCH`` directives) or a plain argument list. Shell words are
split by :mod:`shlex`. The world size comes from the launcher: torchrun's (or
``torch.distributed.launch``'s) ``--nnodes`` and ``--nproc-per-node``,
srun's ``-N``/``--nodes`` and ``--ntasks-per-node``, or ``#SBATCH`` lines.

``session_from_launch`` maps the arguments to a :class:`core.plan.config.Session`
through :data:`ARGUMENTS`, one table of argument -> session field. Fields of
newer plans and model families (issues 10 and 11: ``plan.zero_stage``,
``model.activation`` ...) are written against their fixed names; an argument
whose target field (or value) this version's dataclasses do not have is
**refused by name** ("not modelled yet", exit status 2), never dropped: a
Llama launch simulated as a GPT model would be the worst defect a planner can
have. Once the fields exist, the same code maps them.

Megatron-LM's other arguments (:mod:`core.io.megatron_names`) are sorted into
those that may change the iteration time (:data:`TIMING_ARGUMENTS`, listed
as *ignored*) and those that cannot (logging, paths, learning rate,
numerics-only constants: :data:`NEUTRAL_ARGUMENTS`, listed apart). An
argument Megatron-LM does not define is refused by name with a close match
(Megatron-LM's argparse stops on it), or listed with ``allow_unknown``.

The attention kernel follows Megatron-Core: ``--attention-backend``
(default ``auto``: Transformer Engine picks its fused or flash attention)
wins over the deprecated ``--use-flash-attn``; ``auto``, ``fused`` (TE's
cuDNN fused attention) and ``flash`` are timed as FlashAttention,
``unfused`` and ``local`` as the unfused kernel.

``export_arguments`` / ``export_script`` write the arguments (and the
torchrun line) that run a session's plan; a session -> arguments -> session
round trip is exact for every field Megatron-LM has an argument for.

Argument semantics follow Megatron-LM's ``megatron/training/arguments.py`` (the
argument table ``resources/megatron_arguments.json`` follows the parser at the commit
:data:`core.io.megatron_names.MEGATRON_LM_COMMIT`; shell scripts are read by
:mod:`core.io.shell_reader`, printed argument dumps by :func:`read_argument_dump`): defaults t = p = cp = 1, ``--global-batch-size`` defaults to
``--micro-batch-size`` times the data-parallel size, d = world / (t * p * cp),
``--recompute-activations`` is selective recomputation, and
``NullTokenizer``'s vocabulary is ``--vocab-size`` plus one end-of-document
token (``megatron/training/tokenizer/tokenizer.py``, ``_NullTokenizer``).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.plan.config import (BOUNDS, CROSS_ENTROPY_FUSION_IMPLS, LAYOUT_RULE, ClusterConfig, CostConfig,
                     ModelConfig, ParallelPlan, Session, expand_pipeline_layout,
                     capped_recompute_layers, model_from_fields)
from core.io.megatron_names import (BY_DEST, MEGATRON_LM_COMMIT, NEUTRAL_ARGUMENTS,
                              REFUSED_ARGUMENTS, REMOVED_ARGUMENTS, TIMING_ARGUMENTS)
from core.io.cluster_comment import apply_cluster_comment
from core.schedules import get as get_schedule, megatron_schedule

__all__ = ["MegatronArgsError", "ARGUMENTS", "NEUTRAL_ARGUMENTS", "TIMING_ARGUMENTS",
           "KNOWN_ARGUMENTS", "Launch", "ImportResult", "read_launch", "parse_arguments",
           "unknown_arguments", "session_from_launch", "import_file", "field_origin",
           "export_arguments", "field_exists", "with_cluster_comment"]


class MegatronArgsError(ValueError):
    """A launch cannot be read or mapped; the message names the file, the argument and the rule."""


@dataclass(frozen=True)
class Arg:
    """One Megatron-LM argument and the session field(s) it sets.

    Attributes
    ----------
    targets : tuple of str
        ``section.field`` names it sets (fixed by issues 10 and 11 where they are new).
    value : bool
        Takes a value (``--flag VALUE``); False for a switch.
    help : str
        What it means and how it maps.
    """

    targets: tuple[str, ...]
    value: bool
    help: str


#: Megatron-LM argument -> session field(s). Import and export both follow this table.
ARGUMENTS: dict[str, Arg] = {
    "--num-layers": Arg(("model.num_layers",), True, "layers L"),
    "--hidden-size": Arg(("model.hidden_size",), True, "hidden size h"),
    "--num-attention-heads": Arg(("model.num_attention_heads",), True, "attention heads a"),
    "--ffn-hidden-size": Arg(("model.ffn_hidden_size",), True, "MLP hidden size (default 4h)"),
    "--seq-length": Arg(("model.seq_length",), True, "sequence length s"),
    "--vocab-size": Arg(("model.vocab_size",), True,
                        "vocabulary size (NullTokenizer: this plus one end-of-document token)"),
    "--tokenizer-type": Arg(("model.vocab_size",), True,
                            "a tokenizer of known size (GPT2BPETokenizer: 50257, Llama2Tokenizer: "
                            "32000, BERT word pieces) or NullTokenizer with --vocab-size"),
    "--make-vocab-size-divisible-by": Arg(("model.vocab_size",), True,
                                          "vocabulary padding: only Megatron's 128 is modelled"),
    "--kv-channels": Arg(("model.kv_channels",), True, "attention head size (default h/a)"),
    "--group-query-attention": Arg(("model.num_query_groups",), False, "grouped-query attention"),
    "--num-query-groups": Arg(("model.num_query_groups",), True, "query groups g"),
    "--swiglu": Arg(("model.activation",), False, "SwiGLU MLP (model.activation swiglu)"),
    "--squared-relu": Arg(("model.activation",), False,
                          "squared-ReLU MLP (Nemotron-4; model.activation squared_relu)"),
    "--normalization": Arg(("model.normalization",), True, "LayerNorm (modelled) or RMSNorm"),
    "--position-embedding-type": Arg(("model.position_embedding",), True,
                                     "learned_absolute (modelled) or rope (yarn: rope, YaRN's "
                                     "scaling changes the angles, not the work)"),
    "--untie-embeddings-and-output-weights": Arg(("model.tied_embeddings",), False,
                                                 "separate output layer weights"),
    "--disable-bias-linear": Arg(("model.add_bias_linear",), False, "no biases in linear layers"),
    "--add-qkv-bias": Arg(("model.add_qkv_bias",), False, "QKV bias without the other biases"),
    "--qk-layernorm": Arg(("model.qk_layernorm",), False, "a norm on queries and keys"),
    "--use-flash-attn": Arg(("model.attention_kernel",), False,
                            "FlashAttention (deprecated switch; --attention-backend wins)"),
    "--attention-backend": Arg(("model.attention_kernel",), True,
                               "auto (Megatron-Core's default, also without the argument), "
                               "fused (TE's cuDNN attention) and flash are timed as "
                               "FlashAttention (flash); unfused and local as unfused"),
    "--num-experts": Arg(("model.num_experts",), True, "mixture of experts E"),
    "--moe-router-topk": Arg(("model.moe_top_k",), True, "experts per token (top-k; default 2)"),
    "--moe-ffn-hidden-size": Arg(("model.moe_ffn_hidden_size",), True,
                                 "hidden size of each expert's MLP (default --ffn-hidden-size)"),
    "--moe-shared-expert-intermediate-size": Arg(
        ("model.num_shared_experts",), True,
        "shared experts' total MLP size: num_shared_experts = this / moe_ffn_hidden_size (a "
        "size that is not a multiple is refused)"),
    "--moe-router-num-groups": Arg(("model.moe_router_num_groups",), True,
                                   "node-limited routing: the experts' groups"),
    "--moe-router-group-topk": Arg(("model.moe_router_group_topk",), True,
                                   "node-limited routing: the groups a token may reach (with the "
                                   "flex dispatcher, the nodes its copies go to)"),
    "--moe-layer-freq": Arg(("model.moe_layer_frequency", "model.moe_first_dense_layers"), True,
                            "every k-th layer MoE (an integer k: layers 0, k, 2k ...), or a list "
                            "pattern such as ([0]*3+[1]*58) that first dense layers and a "
                            "frequency give; other patterns are refused"),
    "--multi-latent-attention": Arg(("model.multi_latent_attention",), False,
                                    "multi-head latent attention (DeepSeek-V2/V3)"),
    "--q-lora-rank": Arg(("model.q_lora_rank",), True, "MLA query latent rank (default none: "
                         "no query compression)"),
    "--kv-lora-rank": Arg(("model.kv_lora_rank",), True, "MLA key/value latent rank (must be "
                          "given with --multi-latent-attention)"),
    "--qk-head-dim": Arg(("model.qk_head_dim",), True, "MLA query/key head size without RoPE "
                         "(default 128)"),
    "--qk-pos-emb-head-dim": Arg(("model.qk_pos_emb_head_dim",), True,
                                 "MLA rotary channels per query/key head (default 64)"),
    "--v-head-dim": Arg(("model.v_head_dim",), True, "MLA value head size (default 128)"),
    "--mtp-num-layers": Arg(("model.mtp_num_layers",), True,
                            "multi-token prediction layers (on the last pipeline stage)"),
    "--window-size": Arg(("model.window_size",), True,
                         "sliding-window attention (w, 0): each query attends to the w tokens "
                         "before it (a window with right > 0 is refused; -1 is no window)"),
    "--window-attn-skip-freq": Arg(("model.window_attn_skip_freq",), True,
                                   "every N-th layer keeps full attention (an integer N; a list "
                                   "pattern is refused)"),
    "--softmax-type": Arg(("model.softmax_type",), True,
                          "vanilla, off-by-one or learnable (attention sinks: one learned logit "
                          "per head)"),
    "--quick-geglu": Arg(("model.activation",), False,
                         "gated MLP with a quick-GELU gate x*sigmoid(1.702x) (GPT-OSS): "
                         "model.activation swiglu, timed as SwiGLU's (same GEMMs, same fused "
                         "kernel bytes; listed among the ignored arguments); exported for a "
                         "swiglu model with a clamp or a linear offset"),
    "--activation-func-clamp-value": Arg(("model.activation_func_clamp_value",), True,
                                         "clamp of the gated MLP's inputs (GPT-OSS: 7)"),
    "--glu-linear-offset": Arg(("model.glu_linear_offset",), True,
                               "offset added to the gated MLP's linear half (GPT-OSS: 1)"),
    "--micro-batch-size": Arg(("plan.micro_batch_size",), True, "micro-batch size b"),
    "--global-batch-size": Arg(("plan.global_batch_size",), True,
                               "global batch size B (default b times d)"),
    "--tensor-model-parallel-size": Arg(("plan.tensor_parallel",), True, "tensor-parallel size t"),
    "--pipeline-model-parallel-size": Arg(("plan.pipeline_parallel",), True,
                                          "pipeline-parallel size p"),
    "--context-parallel-size": Arg(("plan.context_parallel",), True, "context-parallel size cp"),
    "--cp-comm-type": Arg(("plan.cp_comm_type",), True,
                          "context-parallel exchange: p2p (the ring, Megatron-Core's default), "
                          "a2a (all-to-all, Ulysses), a2a+p2p (with "
                          "--hierarchical-context-parallel-sizes) and all_gather (Transformer "
                          "Engine's, not overlapped; also spelled allgather, as Megatron-LM's "
                          "help does) are plan.cp_comm_type; one type per layer that differ is "
                          "refused with cp > 1"),
    "--hierarchical-context-parallel-sizes": Arg(
        ("plan.cp_a2a_size",), True, "the a2a+p2p exchange's group sizes A P (A * P = cp): "
        "plan.cp_a2a_size A, the all-to-all group inside the ring"),
    "--expert-model-parallel-size": Arg(("plan.expert_parallel",), True, "expert-parallel size ep"),
    "--moe-token-dispatcher-type": Arg(("plan.moe_token_dispatcher_type",), True,
                                       "MoE token dispatcher: alltoall or flex (Megatron's default "
                                       "allgather is refused with ep > 1)"),
    "--moe-enable-deepep": Arg(("plan.moe_token_dispatcher_type",), False,
                               "DeepEP with the flex dispatcher (deprecated spelling of "
                               "--moe-flex-dispatcher-backend deepep; needs flex)"),
    "--moe-flex-dispatcher-backend": Arg(("plan.moe_token_dispatcher_type",), True,
                                         "deepep or hybridep: both timed as flex"),
    "--expert-tensor-parallel-size": Arg(("plan.expert_tensor_parallel",), True,
                                         "tensor-parallel size of the experts (default t)"),
    "--num-layers-per-virtual-pipeline-stage": Arg(
        ("plan.schedule", "plan.virtual_pipeline_stages"), True,
        "interleaved 1F1B with v = L / (p * this) chunks per rank"),
    "--num-virtual-stages-per-pipeline-rank": Arg(
        ("plan.schedule", "plan.virtual_pipeline_stages"), True, "interleaved 1F1B with v chunks"),
    "--sequence-parallel": Arg(("plan.sequence_parallel",), False, "sequence parallelism"),
    "--use-distributed-optimizer": Arg(("plan.zero_stage",), False,
                                       "distributed optimizer (ZeRO-1): zero_stage 1"),
    "--use-torch-fsdp2": Arg(("plan.zero_stage",), False, "FSDP (ZeRO-3): zero_stage 3"),
    "--num-distributed-optimizer-instances": Arg(
        ("plan.data_parallel_shard_size",), True,
        "hybrid sharding: n instances of the sharded optimizer, each over d/n data-parallel "
        "ranks (data_parallel_shard_size = d/n)"),
    "--fp8-param-gather": Arg(("plan.fp8_param_gather",), False,
                              "FP8 linear weights kept and all-gathered in FP8"),
    "--overlap-grad-reduce": Arg(("plan.overlap_grad_reduce",), False,
                                 "gradient reduction under the backward"),
    "--overlap-param-gather": Arg(("plan.overlap_param_gather",), False,
                                  "parameter all-gather under the forward"),
    "--tp-comm-overlap": Arg(("plan.tp_comm_overlap",), False,
                             "tensor-parallel all-gathers and reduce-scatters under the GEMMs "
                             "(Transformer Engine userbuffers)"),
    "--overlap-moe-expert-parallel-comm": Arg(
        ("plan.overlap_moe_expert_parallel_comm",), False,
        "expert all-to-alls under another micro-batch's computation (combined 1F1B)"),
    "--delay-wgrad-compute": Arg(
        ("plan.delay_wgrad_compute",), False,
        "with --overlap-moe-expert-parallel-comm: the experts' weight gradients beside the "
        "backward's dispatch all-to-all"),
    "--cross-entropy-loss-fusion": Arg(("plan.cross_entropy_loss_fusion",), False,
                                       "the loss's fused cross-entropy kernels"),
    "--cross-entropy-fusion-impl": Arg(("plan.cross_entropy_fusion_impl",), True,
                                       "native or te: the fused cross-entropy's kernels"),
    "--grad-reduce-in-bf16": Arg(("plan.grad_reduce_dtype",), False, "gradients reduced in bf16"),
    "--accumulate-allreduce-grads-in-fp32": Arg(("plan.grad_reduce_dtype",), False,
                                                "gradients accumulated and reduced in fp32"),
    "--recompute-granularity": Arg(("plan.recompute",), True, "full or selective recomputation"),
    "--recompute-activations": Arg(("plan.recompute",), False, "selective recomputation (old name)"),
    "--checkpoint-activations": Arg(("plan.recompute",), False,
                                    "full recomputation (Megatron-LM before 2022, Megatron-DeepSpeed)"),
    "--recompute-modules": Arg(("plan.recompute_modules",), True,
                               "modules selective recomputation runs again (core_attn, "
                               "layernorm, mlp, moe_act, moe, shared_experts, mla_up_proj)"),
    "--checkpoint-num-layers": Arg(("plan.recompute_num_layers",), True,
                                   "with --checkpoint-activations: layers per checkpoint (uniform)"),
    "--recompute-method": Arg(("plan.recompute_num_layers",), True,
                              "block (some layers per model chunk) or uniform"),
    "--recompute-num-layers": Arg(("plan.recompute_num_layers",), True,
                                  "with block: layers recomputed in each model chunk (every "
                                  "layer when it reaches the largest)"),
    "--decoder-first-pipeline-num-layers": Arg(("plan.first_stage_layers",), True,
                                               "layers of the first stage"),
    "--decoder-last-pipeline-num-layers": Arg(("plan.last_stage_layers",), True,
                                              "layers of the last stage"),
    "--pipeline-model-parallel-layout": Arg(
        ("plan.pipeline_model_parallel_layout", "plan.virtual_pipeline_stages"), True,
        "custom pipeline layout (E, t, m, L per virtual stage, '|' between them); its virtual "
        "stages over p give v"),
    "--account-for-embedding-in-pipeline-split": Arg(
        ("plan.account_for_embedding_in_pipeline_split",), False,
        "the embedding takes one layer slot of the first virtual stage"),
    "--account-for-loss-in-pipeline-split": Arg(
        ("plan.account_for_loss_in_pipeline_split",), False,
        "the loss takes one layer slot of the last virtual stage"),
    "--bf16": Arg(("plan.precision",), False, "bf16 mixed precision"),
    "--fp16": Arg(("plan.precision",), False, "fp16 mixed precision"),
    "--fp8-format": Arg(("plan.precision",), True, "FP8 GEMMs (Transformer Engine): hybrid or e4m3"),
    "--fp8-recipe": Arg(("plan.fp8_recipe",), True, "FP8 scaling recipe (Megatron's default delayed)"),
    "--train-samples": Arg(("cost.training_tokens",), True, "token budget = samples * s"),
    "--train-iters": Arg(("cost.training_tokens",), True, "token budget = iterations * B * s"),
}

#: Megatron-LM's arguments that are not mapped (resources/megatron_arguments.json, read by
#: core/io/megatron_names.py): those that may change the iteration time are listed as ignored,
#: those that cannot (NEUTRAL_ARGUMENTS) apart, those that change the work in a way vtrain does
#: not model (REFUSED_ARGUMENTS) are refused by name; any other argument is not Megatron-LM's
#: and is refused (or listed, with allow_unknown).
KNOWN_ARGUMENTS = frozenset(ARGUMENTS) | TIMING_ARGUMENTS | NEUTRAL_ARGUMENTS | frozenset(
    REFUSED_ARGUMENTS)

#: Vocabulary sizes of Megatron-LM's tokenizers that need no file to know them.
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000,
                   "BertWordPieceLowerCase": 30522, "BertWordPieceCase": 28996}
#: Modelled values of model-family arguments when the family fields do not exist yet.
_DEFAULT_FAMILY = {"--normalization": ("LayerNorm",), "--position-embedding-type": ("learned_absolute",)}
#: Megatron-LM's value of each model field a launch leaves to it (arguments.py and Megatron-
#: Core's TransformerConfig defaults: a GPT model), stated field by field and checked against
#: the model's fields by :func:`core.plan.config.model_from_fields`. The shape and vocabulary are
#: always given; the attention kernel always set (Megatron-Core's ``auto``: flash);
#: ``kv_lora_rank`` is required with ``--multi-latent-attention``.
MEGATRON_MODEL_DEFAULTS: dict[str, Any] = {
    "ffn_hidden_size": None, "num_query_groups": None, "activation": "gelu",
    "normalization": "layernorm", "position_embedding": "learned", "tied_embeddings": True,
    "add_bias_linear": True, "add_qkv_bias": False, "qk_layernorm": False, "kv_channels": None,
    "num_experts": None, "moe_top_k": 2, "moe_ffn_hidden_size": None, "num_shared_experts": 0,
    "moe_layer_frequency": 1, "moe_first_dense_layers": 0, "moe_router_num_groups": None,
    "moe_router_group_topk": None, "multi_latent_attention": False, "q_lora_rank": None,
    "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
    "mtp_num_layers": 0, "window_size": None, "window_attn_skip_freq": None,
    "softmax_type": "vanilla", "activation_func_clamp_value": None, "glu_linear_offset": 0.0}
_SECTIONS = {"model": ModelConfig, "plan": ParallelPlan, "cluster": ClusterConfig, "cost": CostConfig}


def field_exists(target: str, value: Any = None) -> bool:
    """Whether ``section.field`` is a field of this version's dataclasses (and, with ``value``,
    whether the value is among the field's ``choices`` when it declares them)."""
    section, name = target.split(".", 1)
    for f in dataclasses.fields(_SECTIONS[section]):
        if f.name == name:
            choices = f.metadata.get("choices")
            return value is None or choices is None or value in choices
    return False


# --------------------------------------------------------------------------- shell reading

@dataclass
class Launch:
    """A launch read from a file.

    Attributes
    ----------
    arguments : list of str
        The training script's arguments (shell words, variables substituted).
    nnodes, nproc_per_node : int or None
        Nodes and processes (GPUs) per node from the launcher, when it says.
    launcher : str
        ``torchrun``, ``srun``, ``python``, or ``argument list``.
    script : str
        The training script (``pretrain_gpt.py``), "" for a plain argument list.
    source : str
        The file the launch was read from (for messages).
    notes : list of str
        What the reader could not decide (a shell condition it did not evaluate ...).
    unset_counts : list of str
        Messages for launcher counts that hold a variable the script does not set (raised
        when the world size needs them and ``--nodes``/``--num-gpus`` do not give it).
    """

    arguments: list[str]
    nnodes: int | None = None
    nproc_per_node: int | None = None
    launcher: str = "argument list"
    script: str = ""
    source: str = "arguments"
    notes: list[str] = field(default_factory=list)
    unset_counts: list[str] = field(default_factory=list)


from core.io.shell_reader import (ARITH_LIMIT, MAX_ARITH_TOKENS, MAX_LAUNCH_BYTES,  # noqa: F401
                           MAX_STATEMENT_BYTES, MAX_STATEMENT_LINES, ShellError,
                           _BINOPS, _quote_state, _statements, missing_variable, read_shell)


def _unset(source: str, what: str, text: str) -> str:
    """The message for a value that holds a variable the script does not set."""
    name = missing_variable(text) or "NAME"
    return (f"{source}: {what} {text}: the variable {name} is not set in the file (or comes from "
            f"a command vtrain does not run); give --var {name}=VALUE")


def _int_value(text: str, what: str, source: str) -> int:
    if re.fullmatch(r"\d+", text or ""):
        if len(text.lstrip("0")) > 18:  # int() of 4,300 digits raises; none is a count
            raise MegatronArgsError(f"{source}: {what} {text[:20]}... ({len(text):,} digits) "
                                    "is beyond any count a launch can mean (at most 18 digits)")
        return int(text)
    if "$" in text:
        raise MegatronArgsError(_unset(source, what, text))
    raise MegatronArgsError(f"{source}: {what} {text!r} must be a positive integer"
                            + (" (an elastic range is not a plan)" if ":" in text else ""))


def _float(args: dict[str, list[str]], flag: str, source: str) -> float | None:
    """The finite number ``flag`` gives (None when absent)."""
    v = _one(args, flag, source)
    if v is None:
        return None
    if "$" in v:
        raise MegatronArgsError(_unset(source, flag, v))
    try:
        x = float(v)
    except ValueError:
        x = float("nan")
    if x != x or x in (float("inf"), float("-inf")):
        raise MegatronArgsError(f"{source}: {flag} {v!r} must be a finite number")
    return x


def _launcher_counts(words: list[str], source: str, deferred: list[str] | None = None
                     ) -> tuple[int | None, int | None, int | None]:
    """``(nnodes, nproc_per_node, ntasks)`` from launcher options (torchrun, launch, srun,
    deepspeed, #SBATCH)."""
    nnodes = nproc = ntasks = None
    names = {"--nnodes": "n", "--num-nodes": "n", "--num_nodes": "n", "-N": "n", "--nodes": "n",
             "--nproc-per-node": "g", "--nproc_per_node": "g", "--ntasks-per-node": "g",
             "--num_gpus": "g", "--num-gpus": "g", "--gpus-per-node": "g", "--ntasks": "w",
             "-n": "w"}
    i = 0
    while i < len(words):
        w = words[i]
        key, value = (w.split("=", 1) + [None])[:2] if w.startswith("--") else (w, None)
        if key not in names and re.fullmatch(r"-N\d+", w):
            key, value = "-N", w[2:]
        if key in names:
            if value is None and i + 1 < len(words):
                value = words[i + 1]
                i += 1
            if deferred is not None and "$" in (value or ""):
                deferred.append(_unset(source, key, value or ""))  # --nodes/--var may give it
                i += 1
                continue
            n = _int_value(value or "", key, source)
            kind = names[key]
            if kind == "n":
                nnodes = n
            elif kind == "g":
                nproc = n
            else:
                ntasks = n
        i += 1
    return nnodes, nproc, ntasks


#: Scripts of Megatron-LM (and Megatron-DeepSpeed) that prepare data or convert checkpoints:
#: never the training command, wherever they stand in a launch script.
DATA_SCRIPTS = frozenset({"preprocess_data.py", "preprocess_data_nmt.py", "merge_datasets.py",
                          "preprocess_mmdata.py", "checkpoint_util.py", "convert.py",
                          "build_sample_idx.py"})


def _training_command(commands: list[list[str]], source: str
                      ) -> tuple[list[str], list[str], str, str] | None:
    """``(launcher words, arguments, launcher, script)`` of the command that trains: the last
    one running a ``pretrain_*.py`` script or a script given ``--num-layers``, through torchrun,
    python, deepspeed or srun; never a data-preparation script (:data:`DATA_SCRIPTS`, or one
    under ``tools/``). None when the script runs no Python script at all."""
    found = []
    for words in commands:
        script = next((k for k, w in enumerate(words) if w.endswith(".py")), None)
        if script is None:
            continue
        name = Path(words[script]).name
        args = []
        for w in words[script + 1:]:  # a value substituted inside quotes may hold many words
            args += shlex.split(w) if w.startswith("-") and re.search(r"\s", w) else [w]
        launcher = next((Path(w).name for w in reversed(words[:script]) if Path(w).name in
                         ("torchrun", "srun", "deepspeed", "mpirun")), "python")  # the innermost
        if "torch.distributed.launch" in words[:script] or "torch.distributed.run" in words[:script]:
            launcher = "torchrun"
        data = name in DATA_SCRIPTS or "tools" in Path(words[script]).parts[:-1]
        trains = name.startswith("pretrain_") or any(
            a == "--num-layers" or a.startswith("--num-layers=") for a in args)
        found.append((0 if data else 2 if trains else 1, words[:script], args, launcher,
                      words[script]))
    if not found:
        return None
    best = max(k for k, *_ in found)
    if best == 0:
        raise MegatronArgsError(f"{source}: no training command: "
                                f"{', '.join(sorted({Path(c[4]).name for c in found}))} prepares "
                                "data or converts checkpoints (the training command runs "
                                "pretrain_*.py)")
    _, pre, args, launcher, script = [c for c in found if c[0] == best][-1]
    return pre, args, launcher, script


def _sbatch(text: str) -> list[str]:
    """The words of the script's ``#SBATCH`` directives."""
    words: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("#SBATCH"):
            try:
                words += shlex.split(line.strip()[len("#SBATCH"):], comments=True)
            except ValueError:
                pass
    return words


def read_launch(text: str, source: str = "arguments", variables: dict[str, str] | None = None
                ) -> Launch:
    """Read a launch script, a plain argument list or a printed argument dump.

    Parameters
    ----------
    text : str
        Shell script text (read by :func:`core.io.shell_reader.read_shell`: nothing is run),
        arguments (``--num-layers 24 --hidden-size 1024 ...``), or Megatron-LM's printed
        ``arguments`` block (:func:`read_argument_dump`).
    source : str
        File name for messages.
    variables : dict, optional
        Values of the script's environment variables and positional parameters (``"1"``,
        ``"2"`` ...), as ``vtrain import megatron-args --var NAME=VALUE`` gives them.

    Raises
    ------
    MegatronArgsError
        No Megatron arguments found, only a data-preparation command, unbalanced quotes, or a
        launcher count that is not a number (an unset variable is named, with ``--var``); a
        script beyond the bounds of what a launch can mean: more than :data:`MAX_LAUNCH_BYTES`
        as written or once expanded, a statement of more than :data:`MAX_STATEMENT_BYTES` as
        written or expanded, or arithmetic beyond |x| < 2^63 or :data:`MAX_ARITH_TOKENS` terms
        (the message names the statement).
    """
    variables = dict(variables or {})
    dump = read_argument_dump(text, source)
    if dump is not None:
        return dump
    numbers = [int(k) for k in variables if k.isdigit() and k != "0"]
    # $1 $2 ...: one not given (a hole before a given one) is unset
    positional = [variables.pop(str(k), None) for k in range(1, max(numbers, default=0) + 1)]
    sbatch = _sbatch(text)
    s_nodes, s_gpus, _ = _launcher_counts([w for w in sbatch if not w.startswith(
        ("--ntasks", "-n"))], source)
    for name in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):  # what sbatch gives the script
        if s_nodes is not None:
            variables.setdefault(name, str(s_nodes))
    if s_gpus is not None:
        variables.setdefault("SLURM_GPUS_PER_NODE", str(s_gpus))
    try:
        shell = read_shell(text, source, variables, positional)
    except ShellError as exc:
        raise MegatronArgsError(str(exc)) from None
    loose: list[str] = []
    for words in shell.commands:
        if any(w.startswith("--") for w in words) and words[0].startswith("-"):
            loose += words
        elif len(words) == 1 and loose and loose[-1].startswith("--"):
            loose += words  # an argument file with one word per line: the value of the flag above
    picked = _training_command(shell.commands, source)
    deferred: list[str] = []  # counts that hold a variable the script does not set
    if picked is not None:
        pre, args, launcher, script = picked
        # srun may launch torchrun: both parts count, torchrun's last
        nnodes, nproc, ntasks = _launcher_counts(sbatch + pre, source, deferred)
    elif loose:
        args, launcher, script = loose, "argument list", ""
        nnodes, nproc, ntasks = _launcher_counts(sbatch, source, deferred)
    else:
        raise MegatronArgsError(f"{source}: no Megatron-LM arguments found (neither a "
                                "'pretrain_*.py --num-layers ...' command nor an argument list)")
    if nproc is None and ntasks is not None and nnodes:
        nproc = ntasks // nnodes
    if nnodes is None and nproc is not None and not deferred:
        nnodes = 1
    return Launch(args, nnodes, nproc, launcher, script, source, notes=list(shell.notes),
                  unset_counts=deferred)


#: The lines that open and close Megatron-LM's printed arguments (``_print_args``).
_DUMP_OPEN = re.compile(r"-{3,} arguments -{3,}")
_DUMP_CLOSE = re.compile(r"-{3,} end of arguments -{3,}")
#: One line of the block: ``  tensor_model_parallel_size ...... 8`` (a log prefix may precede).
_DUMP_LINE = re.compile(r"(?:^|\s)(?P<dest>[A-Za-z_][A-Za-z0-9_]*) \.{2,}(?: (?P<value>.*))?$")


def _dump_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return text


def read_argument_dump(text: str, source: str = "arguments") -> Launch | None:
    """A launch from Megatron-LM's printed argument dump (the ``---- arguments ----`` block a
    training log starts with, as users paste it in issues), or None when ``text`` has none.

    Each line is ``dest .... value``; the dest is mapped back to its option through the
    argument table (:data:`core.io.megatron_names.BY_DEST`): a switch that is on (off for a
    ``store_false`` one) gives its option, a value that differs from Megatron-LM's default
    gives ``--option value`` (a list one word per element; an enum ``AttnBackend.flash`` its
    name). Values Megatron-LM derives (``world_size``, ``data_parallel_size``, ``params_dtype``
    ...) are not arguments; ``world_size`` gives the world size, and ``padded_vocab_size`` the
    vocabulary when the dump has no ``vocab_size``. Dests the table does not know are noted.
    """
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if _DUMP_OPEN.search(line)), None)
    if start is None:
        return None
    values: dict[str, str] = {}
    for line in lines[start + 1:]:
        if _DUMP_CLOSE.search(line):
            break
        m = _DUMP_LINE.search(line.rstrip())
        if m:
            values[m.group("dest")] = (m.group("value") or "").strip()
    args: list[str] = []
    unknown = []
    for dest, raw in values.items():
        entries = BY_DEST.get(dest)
        if not entries:
            if dest not in _DERIVED_DESTS:
                unknown.append(dest)
            continue
        value = _dump_value(raw)
        for e in entries:
            option = e.options[0]
            if e.action == "store_true" and value is True and e.default is not True:
                args.append(option)
            elif e.action == "store_false" and value is False and e.default is not False:
                args.append(option)
            elif e.action == "boolean_optional" and isinstance(value, bool) and value != e.default:
                args.append(option if value else e.options[1])
            elif e.action == "store" and value is not None and value != e.default and \
                    raw != str(e.default):
                if isinstance(value, str) and re.fullmatch(r"[A-Za-z]+\.[A-Za-z0-9_]+", value) \
                        and str(e.default).startswith("<"):
                    value = value.split(".", 1)[1]  # an enum: AttnBackend.flash
                    if f".{value}:" in str(e.default):
                        continue
                words = [str(v) for v in value] if isinstance(value, (list, tuple)) and \
                    e.nargs not in (None, 0) else [raw if isinstance(value, str) else str(value)]
                if e.nargs is None and isinstance(value, (list, tuple)):
                    words = [raw]
                args += [option] + words
            break
    if "vocab_size" not in values or values.get("vocab_size") == "None":
        padded = values.get("padded_vocab_size", "")
        if padded.isdigit():
            args += ["--vocab-size", padded]
    world = values.get("world_size", "")
    notes = [f"argument dump entries that are not arguments of Megatron-LM {MEGATRON_LM_COMMIT[:7]} "
             f"(not read): {' '.join(unknown)}"] if unknown else []
    return Launch(args, 1 if world.isdigit() else None, int(world) if world.isdigit() else None,
                  "argument dump", "", source, notes=notes)


#: Values Megatron-LM's validate_args and initialization add to the printed arguments.
_DERIVED_DESTS = frozenset(
    "world_size rank local_rank data_parallel_size params_dtype padded_vocab_size "
    "consumed_train_samples consumed_valid_samples virtual_pipeline_model_parallel_size "
    "transformer_pipeline_model_parallel_size variable_seq_lengths model_parallel_size "
    "iteration curr_iteration do_train do_valid do_test train_iters_derived "
    "global_batch_size_derived expert_data_parallel_size async_tensor_model_parallel_allreduce "
    "num_floating_point_operations_so_far pipeline_model_parallel_split_rank encoder_num_layers "
    "decoder_num_layers encoder_tensor_model_parallel_size encoder_pipeline_model_parallel_size "
    "save_retain_interval timing_log_option".split())


def parse_arguments(args: list[str], source: str = "arguments") -> dict[str, list[str]]:
    """Megatron arguments as ``{"--flag": [values...]}`` (a switch has no values).

    ``--flag=value`` and ``--flag value ...`` both work; a flag's values are the
    words up to the next ``--`` word. A flag given twice is taken as argparse takes it: the
    last one wins (every Megatron-LM argument is a store action). Raises MegatronArgsError for
    a word before the first flag.
    """
    out: dict[str, list[str]] = {}
    flag = None
    for w in args:
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            out.pop(name, None)  # the last one wins, in the order given
            out[name] = [value] if eq else []
            flag = name
        elif flag is None:
            raise MegatronArgsError(f"{source}: {w!r} comes before any --argument")
        else:
            out[flag].append(w)
    return out


# --------------------------------------------------------------------------- mapping in

@dataclass
class ImportResult:
    """A session read from a launch, and what of the launch it does not use.

    Attributes
    ----------
    session : Session
    ignored : list of (str, str)
        Arguments that may change the iteration time but are not modelled, with why.
    neutral : list of str
        Arguments that do not change it (logging, paths, learning rate, numerics ...).
    launch : Launch
    notes : list of (str, str)
        How the import read arguments whose meaning needs saying: ``("attention", why)``
        names the kernel, the argument (or Megatron-LM's default) that chose it, and which
        argument wins when two disagree.
    unknown : list of str
        Arguments Megatron-LM does not define, read with ``allow_unknown`` (also in ``ignored``).
    """

    session: Session
    ignored: list[tuple[str, str]] = field(default_factory=list)
    neutral: list[str] = field(default_factory=list)
    launch: Launch | None = None
    notes: list[tuple[str, str]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


def _one(args: dict[str, list[str]], flag: str, source: str) -> str | None:
    if flag not in args:
        return None
    values = args[flag]
    if len(values) != 1:
        raise MegatronArgsError(f"{source}: {flag} takes one value, got "
                                f"{' '.join(values) if values else 'none'}")
    return values[0]


def _int(args: dict[str, list[str]], flag: str, source: str, minimum: int = 1) -> int | None:
    v = _one(args, flag, source)
    if v is None:
        return None
    n = _int_value(v, flag, source)
    if n < minimum:
        raise MegatronArgsError(f"{source}: {flag} {n} must be at least {minimum}")
    return n


class _Mapper:
    """Collects the session's fields and the refusals while walking the arguments."""

    def __init__(self, source: str):
        self.source = source
        self.values: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        self.refused: list[str] = []

    def set(self, flag: str, target: str, value: Any, check_value: bool = True) -> None:
        if not field_exists(target):
            self.refused.append(f"{flag}: not modelled yet ({target} is not a field of this "
                                "version of vtrain)")
        elif check_value and not field_exists(target, value):
            self.refused.append(f"{flag}: not modelled yet ({target} {value!r} is not one of "
                                "this version's choices)")
        else:
            section, name = target.split(".", 1)
            self.values[section][name] = value

    def refuse(self, flag: str, why: str) -> None:
        self.refused.append(f"{flag}: {why}")


def unknown_arguments(flags: Any) -> list[tuple[str, str]]:
    """The arguments among ``flags`` (``--name`` strings) that Megatron-LM does not define,
    each with a hint: ``"did you mean --x?"`` (the closest known name by :mod:`difflib`,
    ratio at least 0.75, or the name with ``-`` for ``_``), ``"no longer valid: use --x"``
    for a name Megatron-LM's ``validate_args`` rejects, or ``""``."""
    out = []
    for flag in flags:
        if flag in KNOWN_ARGUMENTS:
            continue
        if flag in REMOVED_ARGUMENTS:
            out.append((flag, f"no longer valid in Megatron-LM: use {REMOVED_ARGUMENTS[flag]}"))
            continue
        dashed = flag[:2] + flag[2:].replace("_", "-")
        close = [dashed] if dashed in KNOWN_ARGUMENTS else difflib.get_close_matches(
            flag, sorted(KNOWN_ARGUMENTS), n=1, cutoff=0.75)
        out.append((flag, f"did you mean {close[0]}?" if close else ""))
    return out


#: Attention backends of Megatron-Core's --attention-backend (AttnBackend) -> attention_kernel:
#: Transformer Engine's flash and fused (cuDNN) attention and auto (TE picks one of them) are
#: timed as FlashAttention; unfused (TE's unfused) and local (Megatron-Core's own) as unfused.
ATTENTION_BACKENDS = {"auto": "flash", "flash": "flash", "fused": "flash", "unfused": "unfused",
                      "local": "unfused"}


def _attention(args: dict[str, list[str]], src: str) -> tuple[str, str, str]:
    """``(attention_kernel, flag that chose it, why)`` for the summary (Megatron-Core rules).

    ``--attention-backend`` (:data:`ATTENTION_BACKENDS`) wins over the deprecated
    ``--use-flash-attn``; with neither, Megatron-Core's default ``auto`` (flash). Megatron-Core's
    local layer spec (``--transformer-impl local``: ``get_gpt_layer_local_spec``, core attention
    ``DotProductAttention``) runs its own unfused attention whatever picks Transformer Engine's;
    the legacy model (``--use-legacy-models``) without an attention argument runs its unfused
    ``CoreAttention``.

    Raises
    ------
    MegatronArgsError
        ``--attention-backend`` is not one of Megatron-Core's backends.
    """
    backend = _one(args, "--attention-backend", src)
    old = "--use-flash-attn" in args
    if backend is not None and backend not in ATTENTION_BACKENDS:
        raise MegatronArgsError(f"{src}: --attention-backend {backend!r}: expected one of "
                                f"Megatron-Core's {', '.join(ATTENTION_BACKENDS)}")
    legacy = "--use-legacy-models" in args
    if _one(args, "--transformer-impl", src) == "local" and not legacy:
        over = [f"--attention-backend {backend}"] if backend in ("auto", "flash", "fused") else []
        over += ["--use-flash-attn"] if old else []
        return "unfused", "--transformer-impl", (
            "--transformer-impl local: Megatron-Core's local layer spec runs its own unfused "
            "attention (DotProductAttention), timed as the unfused kernel" + (
                f"; it wins over {' and '.join(over)}, which pick Transformer Engine's attention"
                if over else ""))
    timed = {"flash": "timed as FlashAttention", "unfused": "timed as the unfused kernel"}
    if backend is not None:
        kernel = ATTENTION_BACKENDS[backend]
        what = {"auto": "Transformer Engine picks its fused (cuDNN) or flash attention",
                "flash": "Transformer Engine's flash backend",
                "fused": "Transformer Engine's fused (cuDNN) attention",
                "unfused": "Transformer Engine's unfused attention",
                "local": "Megatron-Core's own unfused attention"}[backend]
        why = f"--attention-backend {backend}: {what}, {timed[kernel]}"
        if old and backend != "flash":
            why += ("; it wins over --use-flash-attn (Megatron-Core reads --attention-backend; "
                    "--use-flash-attn is deprecated)")
        return kernel, "--attention-backend", why
    if old:
        return "flash", "--use-flash-attn", "--use-flash-attn: FlashAttention"
    if legacy:
        return "unfused", "--use-legacy-models", (
            "--use-legacy-models without --attention-backend or --use-flash-attn: the legacy "
            "model's own unfused attention, timed as the unfused kernel")
    return "flash", "attention", ("Megatron-Core's default --attention-backend auto: Transformer "
                                  "Engine picks its fused (cuDNN) or flash attention, timed as "
                                  "FlashAttention")


#: Mixture-of-experts arguments that mean something only with --num-experts.
_MOE_ONLY = ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
             "--moe-layer-freq", "--moe-token-dispatcher-type", "--moe-enable-deepep",
             "--moe-flex-dispatcher-backend", "--moe-router-num-groups", "--moe-router-group-topk")


def layer_pattern(text: str, num_layers: int, source: str = "arguments") -> list[int]:
    """The MoE layer pattern of Megatron-Core's ``--moe-layer-freq`` list form: a Python list
    expression of 0 (dense) and 1 (MoE) such as ``([0]*3+[1]*58)`` or ``[1,0]*24``, one entry
    per layer. Evaluated from its syntax tree (lists of integer literals, ``+`` of lists,
    ``*`` of a list by an integer expression), never by ``eval``.

    Raises
    ------
    MegatronArgsError
        Not such an expression, entries other than 0 and 1, or not ``num_layers`` long.
    """
    limit = int(BOUNDS["layers"].hi)
    bad = MegatronArgsError(f"{source}: --moe-layer-freq {text!r}: expected an integer or a list "
                            "pattern of 0 and 1 such as ([0]*3+[1]*58)")

    def num(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult):
            return _BINOPS[type(node.op)](num(node.left), num(node.right))
        raise bad

    def lst(node: ast.AST) -> list[int]:
        if isinstance(node, ast.List):
            return [num(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return lst(node.left) + lst(node.right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if _is_list(node.left):
                items, n = lst(node.left), num(node.right)
            elif _is_list(node.right):
                items, n = lst(node.right), num(node.left)
            else:
                raise bad
            if n < 0 or len(items) * n > limit:
                raise bad
            return items * n
        raise bad

    try:
        pattern = lst(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, RecursionError, ValueError):
        raise bad from None
    if any(x not in (0, 1) for x in pattern):
        raise bad
    if len(pattern) != num_layers:
        raise MegatronArgsError(f"{source}: --moe-layer-freq {text!r} has {len(pattern)} entries "
                                f"for {num_layers} layers (--num-layers)")
    return pattern


def _is_list(node: ast.AST) -> bool:
    """Whether ``node`` is a list expression (a list literal, or ``+``/``*`` of one)."""
    if isinstance(node, ast.List):
        return True
    return isinstance(node, ast.BinOp) and (_is_list(node.left) or _is_list(node.right))


def _moe_arguments(args: dict[str, list[str]], mp: "_Mapper", src: str, L: int, ffn: int) -> None:
    """Map ``--num-experts`` and the MoE arguments that go with it (Megatron-Core defaults:
    top-k 2, experts ``--ffn-hidden-size`` wide, no shared experts, every layer MoE)."""
    from core.io.hf_import import moe_layer_fields
    mp.set("--num-experts", "model.num_experts", _int(args, "--num-experts", src))
    k = _int(args, "--moe-router-topk", src) if "--moe-router-topk" in args else 2
    mp.set("--moe-router-topk", "model.moe_top_k", k)
    width = ffn
    if "--moe-ffn-hidden-size" in args:
        width = _int(args, "--moe-ffn-hidden-size", src)
        mp.set("--moe-ffn-hidden-size", "model.moe_ffn_hidden_size", width)
    if "--moe-shared-expert-intermediate-size" in args:
        shared = _int(args, "--moe-shared-expert-intermediate-size", src)
        if shared % width:
            mp.refuse("--moe-shared-expert-intermediate-size",
                      f"not modelled ({shared} is not a multiple of the experts' MLP size {width}: "
                      "shared experts are each moe_ffn_hidden_size wide)")
        else:
            mp.set("--moe-shared-expert-intermediate-size", "model.num_shared_experts",
                   shared // width)
    for flag, target in (("--moe-router-num-groups", "model.moe_router_num_groups"),
                         ("--moe-router-group-topk", "model.moe_router_group_topk")):
        if flag in args:  # node-limited routing (validation checks the two go together)
            mp.set(flag, target, _int(args, flag, src))
    if "--moe-layer-freq" in args:
        text = _one(args, "--moe-layer-freq", src) or ""
        if "[" not in text:
            freq = _int(args, "--moe-layer-freq", src)
            mp.set("--moe-layer-freq", "model.moe_layer_frequency", freq)
            return
        pattern = layer_pattern(text, L, src)
        fit = moe_layer_fields(pattern)
        if fit is None:
            mp.refuse("--moe-layer-freq", f"the pattern {text} is not modelled (only first dense "
                                          "layers, then every k-th layer from the first MoE "
                                          "layer on)")
        else:
            mp.set("--moe-layer-freq", "model.moe_first_dense_layers", fit[0])
            mp.set("--moe-layer-freq", "model.moe_layer_frequency", fit[1])


def session_from_launch(launch: Launch, *, num_gpus: int | None = None,
                        gpus_per_node: int | None = None, gpu: str | None = None,
                        name: str | None = None, allow_unknown: bool = False,
                        nodes: int | None = None) -> ImportResult:
    """Map a launch's arguments to a session (see :data:`ARGUMENTS`).

    Parameters
    ----------
    launch : Launch
    num_gpus, gpus_per_node : int, optional
        World size and GPUs per node when the launch does not give them (they
        override the launcher's counts when given).
    nodes : int, optional
        Nodes (overrides the launcher's): the world size is nodes times the GPUs per node
        (``gpus_per_node``, else the launcher's processes per node).
    gpu : str, optional
        GPU kind of the cluster (default: :class:`ClusterConfig`'s).
    name : str, optional
        Model name (default: the file's stem).
    allow_unknown : bool
        List arguments Megatron-LM does not define as ignored instead of refusing them.

    Raises
    ------
    MegatronArgsError
        An argument Megatron-LM does not define (each named, with a close match;
        unless ``allow_unknown``) or no longer accepts, a required argument is
        missing, a value is not valid, the world size is unknown or does not
        divide by t*p*cp, or arguments target fields this version does not model
        (every such argument is named).
    """
    src = launch.source
    if launch.unset_counts and num_gpus is None and nodes is None:
        raise MegatronArgsError(launch.unset_counts[0])  # the launcher's count names its variable
    args = parse_arguments(launch.arguments, src)
    unknown = unknown_arguments(args)
    refused = [(f, hint) for f, hint in unknown if not allow_unknown or f in REMOVED_ARGUMENTS]
    if refused:  # Megatron-LM's argparse stops on an argument it does not define
        raise MegatronArgsError(f"{src}: " + "; ".join(
            f"{f} is not a Megatron-LM argument" + (f" ({hint})" if hint else "")
            if f not in REMOVED_ARGUMENTS else f"{f}: {hint}" for f, hint in refused) + (
            "" if all(f in REMOVED_ARGUMENTS for f, _ in refused) else
            " (Megatron-LM's argparse stops on an argument it does not define; give "
            "--allow-unknown to list such arguments as ignored)"))
    mp = _Mapper(src)
    used: set[str] = set()
    late_ignored: list[tuple[str, str]] = []

    def take(flag: str) -> bool:
        used.add(flag)
        return flag in args

    def switch(flag: str) -> bool:
        if take(flag) and args[flag]:
            raise MegatronArgsError(f"{src}: {flag} is a switch and takes no value, got "
                                    f"{' '.join(args[flag])}")
        return flag in args

    missing = [f for f in ("--num-layers", "--hidden-size", "--num-attention-heads",
                           "--micro-batch-size", "--seq-length") if f not in args]
    if missing:
        raise MegatronArgsError(f"{src}: missing {', '.join(missing)} (Megatron-LM needs "
                                f"{'it' if len(missing) == 1 else 'them'} to build the model)")
    # ---- model
    L = _int(args, "--num-layers", src)
    h = _int(args, "--hidden-size", src)
    a = _int(args, "--num-attention-heads", src)
    s = _int(args, "--seq-length", src)
    for flag, target, v in (("--num-layers", "model.num_layers", L), ("--hidden-size",
                            "model.hidden_size", h), ("--num-attention-heads",
                            "model.num_attention_heads", a), ("--seq-length", "model.seq_length", s)):
        take(flag)
        mp.set(flag, target, v)
    if take("--ffn-hidden-size"):
        mp.set("--ffn-hidden-size", "model.ffn_hidden_size", _int(args, "--ffn-hidden-size", src))
    if take("--kv-channels"):
        mp.set("--kv-channels", "model.kv_channels", _int(args, "--kv-channels", src))
    if take("--make-vocab-size-divisible-by"):
        if _int(args, "--make-vocab-size-divisible-by", src) != 128:
            mp.refuse("--make-vocab-size-divisible-by", "not modelled yet (vtrain pads the "
                                                        "vocabulary to a multiple of 128*t)")
    tok = _one(args, "--tokenizer-type", src) if take("--tokenizer-type") else None
    vocab = _int(args, "--vocab-size", src) if take("--vocab-size") else None
    if tok == "NullTokenizer":
        if vocab is None:
            raise MegatronArgsError(f"{src}: --tokenizer-type NullTokenizer needs --vocab-size")
        mp.set("--vocab-size", "model.vocab_size", vocab + 1)  # plus the end-of-document token
    elif vocab is not None:
        mp.set("--vocab-size", "model.vocab_size", vocab)
    elif tok in TOKENIZER_VOCAB:
        mp.set("--tokenizer-type", "model.vocab_size", TOKENIZER_VOCAB[tok])
    elif tok is not None:
        raise MegatronArgsError(f"{src}: --tokenizer-type {tok}: its vocabulary size is in its "
                                "files, not in the launch; add --vocab-size N to the arguments")
    elif "--vocab-file" in args:  # Megatron's default tokenizer for a vocab file is GPT-2 BPE
        mp.set("--vocab-file", "model.vocab_size", TOKENIZER_VOCAB["GPT2BPETokenizer"])
    else:
        raise MegatronArgsError(f"{src}: the vocabulary size is unknown: give --vocab-size or "
                                "--tokenizer-type")
    # model families (issue 11): refused by name while the fields are absent
    if switch("--swiglu"):
        mp.set("--swiglu", "model.activation", "swiglu")
    if switch("--squared-relu"):
        if "--swiglu" in args:
            raise MegatronArgsError(f"{src}: --squared-relu and --swiglu are both given (one "
                                    "MLP activation)")
        mp.set("--squared-relu", "model.activation", "squared_relu")
    if switch("--quick-geglu"):
        other = "--swiglu" if "--swiglu" in args else "--squared-relu"
        if other in args:
            raise MegatronArgsError(f"{src}: --quick-geglu and {other} are both given (one "
                                    "MLP activation)")
        mp.set("--quick-geglu", "model.activation", "swiglu")
        late_ignored.append(("--quick-geglu", "its gate x*sigmoid(1.702x) is timed as SwiGLU's "
                             "x*sigmoid(x): the same GEMMs and the same fused activation "
                             "kernel's bytes (model.activation swiglu)"))
    for flag, target in (("--activation-func-clamp-value", "model.activation_func_clamp_value"),
                         ("--glu-linear-offset", "model.glu_linear_offset")):
        if take(flag):
            mp.set(flag, target, _float(args, flag, src))
    if take("--softmax-type"):
        mp.set("--softmax-type", "model.softmax_type", _one(args, "--softmax-type", src))
    if switch("--group-query-attention") or take("--num-query-groups"):
        g = _int(args, "--num-query-groups", src) if "--num-query-groups" in args else None
        if "--group-query-attention" in args:
            if g is None:
                raise MegatronArgsError(f"{src}: --group-query-attention needs --num-query-groups")
            mp.set("--group-query-attention", "model.num_query_groups", g)
    for flag, target, mapping in (
            ("--normalization", "model.normalization", {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}),
            ("--position-embedding-type", "model.position_embedding",
             {"learned_absolute": "learned", "rope": "rope", "yarn": "rope"})):
        if take(flag):
            v = _one(args, flag, src)
            if v not in mapping:
                raise MegatronArgsError(f"{src}: {flag} {v!r}: expected one of {', '.join(mapping)}")
            if v == "yarn":  # GPT-OSS: RoPE with YaRN's frequency scaling
                late_ignored.append((flag, "yarn: RoPE whose frequencies YaRN rescales; the "
                                     "scaling changes the rotation's angles, not the work "
                                     "(model.position_embedding rope)"))
            if field_exists(target):
                mp.set(flag, target, mapping[v])
            elif v not in _DEFAULT_FAMILY[flag]:
                mp.set(flag, target, mapping[v])  # refused: the field is absent
    if switch("--untie-embeddings-and-output-weights"):
        mp.set("--untie-embeddings-and-output-weights", "model.tied_embeddings", False)
    if switch("--disable-bias-linear"):
        mp.set("--disable-bias-linear", "model.add_bias_linear", False)
    if switch("--add-qkv-bias"):
        mp.set("--add-qkv-bias", "model.add_qkv_bias", True)
    if switch("--qk-layernorm"):
        mp.set("--qk-layernorm", "model.qk_layernorm", True)
    take("--attention-backend")
    switch("--use-flash-attn")
    kernel, flag, why = _attention(args, src)
    mp.set(flag, "model.attention_kernel", kernel)
    notes = [("attention", why)]
    if "--swiglu" in args and "--ffn-hidden-size" not in args and field_exists("model.activation"):
        # Megatron-LM's default MLP size for SwiGLU (arguments.py): 2/3 of 4h, down to 64
        mp.set("--swiglu", "model.ffn_hidden_size", int((4 * h * 2 / 3) / 64) * 64)
    if take("--num-experts"):
        _moe_arguments(args, mp, src, L, mp.values["model"].get("ffn_hidden_size") or 4 * h)
    if take("--window-size"):  # Megatron-Core: a (left, right) tuple, "(128, 0)" or "128,0"
        parts = " ".join(args["--window-size"]).strip("()[] ").replace(",", " ").split()
        try:
            left, right = (int(x) for x in parts)
        except ValueError:
            raise MegatronArgsError(f"{src}: --window-size {' '.join(args['--window-size'])!r}: "
                                    "expected two integers (left, right)") from None
        if right != 0 and right != -1:
            mp.refuse("--window-size", f"a window of {right} tokens to the right (non-causal) "
                      "is not modelled")
        elif left >= 1:
            mp.set("--window-size", "model.window_size", left)
        elif left != -1:
            raise MegatronArgsError(f"{src}: --window-size left {left}: expected at least 1 "
                                    "(or -1, no window)")
    if take("--window-attn-skip-freq"):
        raw = " ".join(args["--window-attn-skip-freq"])
        try:
            mp.set("--window-attn-skip-freq", "model.window_attn_skip_freq", int(raw))
        except ValueError:
            mp.refuse("--window-attn-skip-freq", f"the pattern {raw!r} is not modelled (an integer "
                      "N only: every N-th layer full)")
    mla_flags = ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
                 "--v-head-dim")
    if switch("--multi-latent-attention"):
        mp.set("--multi-latent-attention", "model.multi_latent_attention", True)
        if "--kv-lora-rank" not in args:
            raise MegatronArgsError(f"{src}: --multi-latent-attention needs --kv-lora-rank (its "
                                    "default differs between Megatron-LM's arguments and "
                                    "Megatron-Core's MLATransformerConfig: give it)")
        for flag in mla_flags:
            if take(flag):
                target = "model." + flag[2:].replace("-", "_")
                mp.set(flag, target, _int(args, flag, src))
    else:
        for flag in mla_flags:
            if take(flag):
                late_ignored.append((flag, "without --multi-latent-attention Megatron-LM does "
                                     "not read it"))
    if take("--mtp-num-layers"):
        mp.set("--mtp-num-layers", "model.mtp_num_layers", _int(args, "--mtp-num-layers", src))
    # ---- plan
    t = _int(args, "--tensor-model-parallel-size", src) or 1
    p = _int(args, "--pipeline-model-parallel-size", src) or 1
    take("--tensor-model-parallel-size")
    take("--pipeline-model-parallel-size")
    mp.set("--tensor-model-parallel-size", "plan.tensor_parallel", t)
    mp.set("--pipeline-model-parallel-size", "plan.pipeline_parallel", p)
    if take("--expert-tensor-parallel-size"):
        mp.set("--expert-tensor-parallel-size", "plan.expert_tensor_parallel",
               _int(args, "--expert-tensor-parallel-size", src))
    cp = _int(args, "--context-parallel-size", src) or 1
    if take("--context-parallel-size") and (cp > 1 or field_exists("plan.context_parallel")):
        mp.set("--context-parallel-size", "plan.context_parallel", cp)
    if take("--cp-comm-type"):  # one type, or one per layer (Megatron-Core's list form)
        kinds = {k.strip("[](),'\"") for k in " ".join(args["--cp-comm-type"]).replace(",", " ").split()}
        kinds.discard("")
        # Megatron-LM's help spells Transformer Engine's all_gather "allgather": the same exchange
        # (TE's AttnFuncWithCPAndKVAllGather), not PyTorch's overlapped one (plan "allgather")
        kinds = {"all_gather" if k == "allgather" else k for k in kinds}
        unknown = sorted(kinds - {"p2p", "a2a", "all_gather", "a2a+p2p"})
        if not kinds or unknown:
            raise MegatronArgsError(f"{src}: --cp-comm-type {' '.join(args['--cp-comm-type'])!r}: "
                                    "expected p2p, a2a, all_gather or a2a+p2p (one, or one per "
                                    "layer)")
        if cp > 1 and len(kinds) > 1:
            mp.refuse("--cp-comm-type", f"{' '.join(sorted(kinds))}: one exchange per layer "
                      "that differ is not modelled (one plan.cp_comm_type for every layer)")
        elif cp > 1:
            mp.set("--cp-comm-type", "plan.cp_comm_type", next(iter(kinds)))
        elif kinds != {"p2p"}:  # Megatron-Core ignores it without context parallelism
            late_ignored.append(("--cp-comm-type", "without --context-parallel-size > 1 it has "
                                 "no effect"))
    if take("--hierarchical-context-parallel-sizes"):
        sizes = [x for x in " ".join(args["--hierarchical-context-parallel-sizes"]).replace(
            ",", " ").strip("[]() ").split() if x.strip("[]()")]
        try:
            sizes = [int(x.strip("[]()")) for x in sizes]
        except ValueError:
            sizes = []
        if len(sizes) != 2 or min(sizes) < 1 or sizes[0] * sizes[1] != cp:
            raise MegatronArgsError(f"{src}: --hierarchical-context-parallel-sizes "
                                    f"{' '.join(args['--hierarchical-context-parallel-sizes'])!r}: "
                                    f"expected two sizes A P with A * P = "
                                    f"--context-parallel-size {cp}")
        if cp > 1 and mp.values["plan"].get("cp_comm_type") == "a2a+p2p":
            mp.set("--hierarchical-context-parallel-sizes", "plan.cp_a2a_size", sizes[0])
        else:  # the sizes only matter to a2a+p2p; Megatron-Core builds no groups for the others
            late_ignored.append(("--hierarchical-context-parallel-sizes", "without "
                                 "--cp-comm-type a2a+p2p (and --context-parallel-size > 1) it has "
                                 "no effect"))
    ep = _int(args, "--expert-model-parallel-size", src) or 1
    if take("--expert-model-parallel-size") and (ep > 1 or field_exists("plan.expert_parallel")):
        mp.set("--expert-model-parallel-size", "plan.expert_parallel", ep)
    # the token dispatcher (Megatron-Core 0.19 TransformerConfig: --moe-enable-deepep, the
    # deprecated spelling of --moe-flex-dispatcher-backend deepep, needs the flex dispatcher)
    dispatcher = (_one(args, "--moe-token-dispatcher-type", src)
                  if take("--moe-token-dispatcher-type") else None)
    if switch("--moe-enable-deepep") and dispatcher != "flex":
        raise MegatronArgsError(f"{src}: --moe-enable-deepep needs --moe-token-dispatcher-type "
                                "flex (Megatron-Core: \"DeepEP backend is only supported with "
                                "flex token dispatcher\")")
    backend = (_one(args, "--moe-flex-dispatcher-backend", src)
               if take("--moe-flex-dispatcher-backend") else None)
    if backend is not None and dispatcher == "flex" and backend not in ("deepep", "hybridep"):
        raise MegatronArgsError(f"{src}: --moe-flex-dispatcher-backend {backend}: not modelled "
                                "(deepep and hybridep are: one copy of a token per other node, "
                                "forwarded over NVLink)")
    if "--num-experts" in args:
        if dispatcher is None and ep > 1:
            raise MegatronArgsError(
                f"{src}: --moe-token-dispatcher-type is not given: Megatron-Core's default, the "
                "allgather dispatcher, is not modelled; give --moe-token-dispatcher-type alltoall "
                "or flex (DeepEP / HybridEP)")
        if dispatcher is not None:
            mp.set("--moe-token-dispatcher-type", "plan.moe_token_dispatcher_type", dispatcher)
    b = _int(args, "--micro-batch-size", src)
    take("--micro-batch-size")
    mp.set("--micro-batch-size", "plan.micro_batch_size", b)
    world = num_gpus
    nproc = gpus_per_node or launch.nproc_per_node
    if world is None and nodes is not None:
        if nproc is None and launch.unset_counts:
            raise MegatronArgsError(launch.unset_counts[0])
        if nproc is None:
            raise MegatronArgsError(f"{src}: --nodes {nodes}: the GPUs per node are unknown (the "
                                    "launch has no --nproc-per-node); give --gpus-per-node G")
        world = nodes * nproc
    if world is None and launch.nnodes is not None and launch.nproc_per_node is not None:
        world = launch.nnodes * launch.nproc_per_node
    if world is None and launch.unset_counts:
        raise MegatronArgsError(launch.unset_counts[0])
    if world is None:
        raise MegatronArgsError(f"{src}: the world size is unknown: the launch has no torchrun "
                                "--nnodes/--nproc-per-node or srun -N/--ntasks-per-node; give "
                                "--nodes N --gpus-per-node G (or --num-gpus N)")
    if world % (t * p * cp):
        raise MegatronArgsError(f"{src}: world size {world} is not divisible by t*p*cp = "
                                f"{t}*{p}*{cp} (Megatron-LM requires it)")
    d = world // (t * p * cp)
    mp.set("world size", "plan.data_parallel", d)
    B = _int(args, "--global-batch-size", src) if take("--global-batch-size") else b * d
    mp.set("--global-batch-size", "plan.global_batch_size", B)
    # the embedding and the loss as layer slots of the split (Megatron-Core)
    slots = L
    for flag, target in (("--account-for-embedding-in-pipeline-split",
                          "plan.account_for_embedding_in_pipeline_split"),
                         ("--account-for-loss-in-pipeline-split",
                          "plan.account_for_loss_in_pipeline_split")):
        if switch(flag):
            mp.set(flag, target, True)
            slots += 1
        elif field_exists(target):
            mp.set(flag, target, False)
    # schedule
    v = None
    if take("--num-layers-per-virtual-pipeline-stage"):
        per = _int(args, "--num-layers-per-virtual-pipeline-stage", src)
        if slots % (p * per):  # Megatron-LM counts the slots of the embedding and the loss
            raise MegatronArgsError(f"{src}: --num-layers-per-virtual-pipeline-stage {per}: "
                                    f"{L} layers{f' + {slots - L} slots' if slots > L else ''} do "
                                    f"not split into {p} stages of chunks of {per}")
        v = slots // (p * per)
    if take("--num-virtual-stages-per-pipeline-rank"):
        v = _int(args, "--num-virtual-stages-per-pipeline-rank", src)
    flag = ("--num-layers-per-virtual-pipeline-stage"
            if "--num-layers-per-virtual-pipeline-stage" in args else
            "--num-virtual-stages-per-pipeline-rank")
    layout_flag = "--pipeline-model-parallel-layout"
    if take(layout_flag):  # Megatron-Core: the layout's virtual stages over p give v
        layout = (_one(args, layout_flag, src) or "").strip()
        try:
            n = len(expand_pipeline_layout(layout))
        except ValueError as exc:
            raise MegatronArgsError(f"{src}: {layout_flag} {layout!r} {exc} ({LAYOUT_RULE})"
                                    ) from None
        if n % p:
            raise MegatronArgsError(f"{src}: {layout_flag} {layout!r} has {n} virtual stages, "
                                    f"not a multiple of --pipeline-model-parallel-size {p}")
        if v is not None and v != n // p:
            raise MegatronArgsError(f"{src}: {layout_flag} {layout!r} gives {n // p} virtual "
                                    f"stages per rank ({n} over p={p}); {flag} gives {v}")
        for other in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                      "--account-for-embedding-in-pipeline-split",
                      "--account-for-loss-in-pipeline-split"):
            if other in args:
                raise MegatronArgsError(f"{src}: {layout_flag} cannot be combined with {other} "
                                        "(Megatron-Core refuses them together: the layout places "
                                        "every layer)")
        mp.set(layout_flag, "plan.pipeline_model_parallel_layout", layout, check_value=False)
        v, flag = n // p, layout_flag
    elif field_exists("plan.pipeline_model_parallel_layout"):
        mp.set(layout_flag, "plan.pipeline_model_parallel_layout", None, check_value=False)
    if v is not None and v > 1:
        mp.set(flag, "plan.schedule", megatron_schedule(v))  # interleaved 1F1B
        mp.set(flag, "plan.virtual_pipeline_stages", v)
    else:
        mp.set("schedule", "plan.schedule", megatron_schedule(None))  # Megatron's 1F1B
    if switch("--sequence-parallel"):
        mp.set("--sequence-parallel", "plan.sequence_parallel", True)
    elif field_exists("plan.sequence_parallel"):
        mp.set("--sequence-parallel", "plan.sequence_parallel", False)
    fsdp, dist = switch("--use-torch-fsdp2"), switch("--use-distributed-optimizer")
    if fsdp and dist:
        raise MegatronArgsError(f"{src}: --use-torch-fsdp2 and --use-distributed-optimizer "
                                "exclude each other")
    if fsdp or dist:
        mp.set("--use-torch-fsdp2" if fsdp else "--use-distributed-optimizer", "plan.zero_stage",
               3 if fsdp else 1)
    elif field_exists("plan.zero_stage"):
        mp.set("zero stage", "plan.zero_stage", 0)
    flag = "--num-distributed-optimizer-instances"
    if take(flag):  # Megatron-Core: each instance shards over d*cp/n ranks, i.e. d/n of d
        n = _int(args, flag, src)
        if n < 1 or d % n:
            raise MegatronArgsError(f"{src}: {flag} {n} does not divide the data-parallel size "
                                    f"{d} (world / (t*p*cp))")
        mp.set(flag, "plan.data_parallel_shard_size", d // n)
    elif field_exists("plan.data_parallel_shard_size"):
        mp.set(flag, "plan.data_parallel_shard_size", None, check_value=False)
    if switch("--fp8-param-gather"):
        mp.set("--fp8-param-gather", "plan.fp8_param_gather", True)
    elif field_exists("plan.fp8_param_gather"):
        mp.set("--fp8-param-gather", "plan.fp8_param_gather", False)
    for flag, target in (("--overlap-grad-reduce", "plan.overlap_grad_reduce"),
                         ("--overlap-param-gather", "plan.overlap_param_gather"),
                         ("--tp-comm-overlap", "plan.tp_comm_overlap"),
                         ("--overlap-moe-expert-parallel-comm",
                          "plan.overlap_moe_expert_parallel_comm"),
                         ("--delay-wgrad-compute", "plan.delay_wgrad_compute"),
                         ("--cross-entropy-loss-fusion", "plan.cross_entropy_loss_fusion")):
        if switch(flag):
            mp.set(flag, target, True)
        elif field_exists(target):
            mp.set(flag, target, False)
    if take("--cross-entropy-fusion-impl"):
        impl = _one(args, "--cross-entropy-fusion-impl", src)
        if impl not in CROSS_ENTROPY_FUSION_IMPLS:  # Megatron-LM's argparse choices
            raise MegatronArgsError(f"{src}: --cross-entropy-fusion-impl {impl!r}: invalid choice "
                                    f"(choose from {', '.join(CROSS_ENTROPY_FUSION_IMPLS)})")
        mp.set("--cross-entropy-fusion-impl", "plan.cross_entropy_fusion_impl", impl)
    if switch("--overlap-moe-expert-parallel-comm") and switch("--moe-shared-expert-overlap"):
        raise MegatronArgsError(f"{src}: --overlap-moe-expert-parallel-comm with "
                                "--moe-shared-expert-overlap: Megatron-Core refuses them together "
                                "(disable moe_shared_expert_overlap when enabling "
                                "overlap_moe_expert_parallel_comm)")
    bf16_grads, fp32_grads = switch("--grad-reduce-in-bf16"), switch("--accumulate-allreduce-grads-in-fp32")
    if bf16_grads and fp32_grads:
        raise MegatronArgsError(f"{src}: --grad-reduce-in-bf16 and "
                                "--accumulate-allreduce-grads-in-fp32 exclude each other")
    if bf16_grads or fp32_grads:
        mp.set("--grad-reduce-in-bf16" if bf16_grads else "--accumulate-allreduce-grads-in-fp32",
               "plan.grad_reduce_dtype", "bf16" if bf16_grads else "fp32")
    elif field_exists("plan.grad_reduce_dtype"):
        mp.set("grad reduce dtype", "plan.grad_reduce_dtype", None, check_value=False)
    # recomputation
    gran = _one(args, "--recompute-granularity", src) if take("--recompute-granularity") else None
    if switch("--recompute-activations"):
        gran = gran or "selective"
    method = _one(args, "--recompute-method", src) if take("--recompute-method") else None
    nrec = _int(args, "--recompute-num-layers", src) if take("--recompute-num-layers") else None
    if switch("--checkpoint-activations"):  # the old name: full, uniform
        gran, method = gran or "full", method or "uniform"
        if take("--checkpoint-num-layers"):
            nrec = _int(args, "--checkpoint-num-layers", src)
    if gran not in (None, "full", "selective"):
        raise MegatronArgsError(f"{src}: --recompute-granularity {gran!r}: expected full or selective")
    if method not in (None, "block", "uniform"):
        raise MegatronArgsError(f"{src}: --recompute-method {method!r}: expected block or uniform")
    rflag = ("--recompute-granularity" if "--recompute-granularity" in args else
             "--recompute-activations" if "--recompute-activations" in args else
             "--checkpoint-activations")
    mp.set(rflag, "plan.recompute", gran or "none")
    if gran == "full" and method == "block" and nrec is not None:
        # a count at or above the largest model chunk recomputes every layer: set to None
        # once the plan is whole (below), as Megatron caps it per chunk
        mp.set("--recompute-num-layers", "plan.recompute_num_layers", nrec)
    elif gran == "full" and method == "uniform" and nrec not in (None, 1):
        mp.refuse("--recompute-method uniform", f"not modelled yet (one checkpoint per {nrec} "
                                                "layers; vtrain keeps every layer's input)")
    if take("--recompute-modules"):  # nargs='*': a space-separated list (commas accepted too)
        mods = " ".join(args["--recompute-modules"]).replace(",", " ").split()
        if gran == "selective" and mods:
            mp.set("--recompute-modules", "plan.recompute_modules", ",".join(mods),
                   check_value=False)
        elif mods and mods != ["core_attn"]:
            mp.refuse("--recompute-modules", "needs --recompute-granularity selective (Megatron-Core "
                      "recomputes the modules only with selective granularity)")
    # full without a method, uniform by 1, or a block of the whole stage: every layer recomputed
    if field_exists("plan.recompute_num_layers") and "recompute_num_layers" not in mp.values["plan"]:
        mp.values["plan"]["recompute_num_layers"] = None
    # uneven pipelines (Megatron-Core's --decoder-first/last-pipeline-num-layers)
    for flag, target in (("--decoder-first-pipeline-num-layers", "plan.first_stage_layers"),
                         ("--decoder-last-pipeline-num-layers", "plan.last_stage_layers")):
        if take(flag):
            mp.set(flag, target, _int(args, flag, src))
    # precision
    fp8 = _one(args, "--fp8-format", src) if take("--fp8-format") else None
    bf16, fp16 = switch("--bf16"), switch("--fp16")
    if bf16 and fp16:
        raise MegatronArgsError(f"{src}: --bf16 and --fp16 exclude each other")
    recipe = _one(args, "--fp8-recipe", src) if take("--fp8-recipe") else None
    if fp8 is not None:
        # E4M3 everywhere or E5M2 gradients (hybrid): the same FP8 tensor-core rate, one model
        if fp8 not in ("hybrid", "e4m3"):
            mp.refuse("--fp8-format", f"{fp8!r} is not one of Megatron-LM's formats hybrid, e4m3")
        elif fp16:
            mp.refuse("--fp8-format", "with --fp16 is not modelled yet (vtrain models FP8 training "
                                      "on bf16 weights, --bf16)")
        elif not bf16:
            mp.refuse("--fp8-format", "without --bf16 (fp32 weights) is not modelled yet (vtrain "
                                      "models FP8 training on bf16 weights, --bf16)")
        else:
            mp.set("--fp8-format", "plan.precision", "fp8")
            # Megatron-Core's TransformerConfig.fp8_recipe defaults to delayed; vtrain's empty
            # fp8_recipe is tensorwise (per-tensor current scaling)
            recipe = recipe or "delayed"
            mp.set("--fp8-recipe", "plan.fp8_recipe", None if recipe == "tensorwise" else recipe)
    else:
        mp.set("--bf16" if bf16 else "--fp16" if fp16 else "precision", "plan.precision",
               "bf16" if bf16 else "fp16" if fp16 else "fp32")
    # ---- cost: the token budget
    samples = _int(args, "--train-samples", src) if take("--train-samples") else None
    iters = _int(args, "--train-iters", src) if take("--train-iters") else None
    if samples is not None:
        mp.set("--train-samples", "cost.training_tokens", float(samples * s))
    elif iters is not None:
        mp.set("--train-iters", "cost.training_tokens", float(iters * B * s))
    for flag in ("--vocab-file", "--num-query-groups", *_MOE_ONLY):
        used.add(flag)
    # hybrid models (pretrain_mamba.py: Mamba / state-space layers beside attention and MLP)
    hybrid = [f for f in _HYBRID_FLAGS if f in args]
    spec = " ".join(args.get("--spec") or [])
    if "mamba" in spec.lower():
        hybrid.append(f"--spec {spec}")
    script = Path(launch.script).name if launch.script else ""
    other_model = re.match(r"pretrain_(mamba|bert|t5|vlm|retro|ict|vision\w*|multimodal\w*|mm\w*)"
                           r"\.py$", script)
    if other_model:  # Megatron-LM's other model scripts build other layers than GPT's
        mp.refuse(script, f"the {other_model.group(1)} model script builds "
                  + ("Mamba layers (a hybrid or all-Mamba model)" if other_model.group(1) == "mamba"
                     else "another model than a GPT decoder") + "; only pretrain_gpt.py's decoder "
                  "is modelled")
    elif hybrid:
        mp.refuse(hybrid[0], "a hybrid model (Mamba / state-space layers beside attention and "
                  "MLP) is not modelled: timing its layers as transformer layers would be "
                  "another model" + (f" (also: {', '.join(hybrid[1:])})" if hybrid[1:] else ""))
    for flag in args:  # the table's other arguments that change the work in an unmodelled way
        if flag in REFUSED_ARGUMENTS and flag not in _HYBRID_FLAGS:
            mp.refuse(flag, f"not modelled ({REFUSED_ARGUMENTS[flag]})")
    if mp.refused:
        raise MegatronArgsError(f"{src}: " + "; ".join(mp.refused))
    # ---- the rest
    ignored, neutral = list(late_ignored), []
    hints = dict(unknown)
    for flag in args:
        if flag in used or flag in ARGUMENTS:
            continue
        if flag in NEUTRAL_ARGUMENTS:
            neutral.append(flag)
        elif flag in hints:  # allow_unknown
            ignored.append((flag, "not a Megatron-LM argument vtrain knows" + (
                f" ({hints[flag]})" if hints[flag] else "") + "; may change the iteration time"))
        else:
            ignored.append((flag, "not modelled; may change the iteration time"))
    if "--num-experts" not in args:
        ignored += [(flag, "without --num-experts it has no effect") for flag in _MOE_ONLY
                    if flag in args]
    if "--fp8-recipe" in args and "--fp8-format" not in args:
        ignored.append(("--fp8-recipe", "without --fp8-format it has no effect"))
    cluster = dict(mp.values["cluster"])
    if gpu:
        cluster["gpu"] = gpu
    if nproc:
        cluster["gpus_per_node"] = nproc
    # Megatron applies --recompute-num-layers to each model chunk: a count at or above the
    # largest recomputes every layer
    plan = capped_recompute_layers(ParallelPlan(**mp.values["plan"]), L)
    model = model_from_fields({**MEGATRON_MODEL_DEFAULTS, "name": name or Path(src).stem,
                               **mp.values["model"]})
    session = Session(model, plan, ClusterConfig(**cluster), CostConfig(**mp.values["cost"]))
    return ImportResult(session, ignored, neutral, launch, notes, [f for f, _ in unknown])


#: Megatron-LM's arguments of hybrid (Mamba) models: refused, never ignored.
_HYBRID_FLAGS = ("--is-hybrid-model", "--hybrid-override-pattern", "--hybrid-attention-ratio",
                 "--hybrid-mlp-ratio", "--mamba-state-dim", "--mamba-head-dim",
                 "--mamba-num-groups")


def with_cluster_comment(res: ImportResult, text: str, kw: dict[str, Any]) -> ImportResult:
    """``res`` with the cluster of the launch's ``# vtrain: cluster`` comment (written by the
    export; :mod:`core.io.cluster_comment`), noted in ``res.notes``. ``kw``: the import's keywords
    (an explicit ``gpu`` / ``gpus_per_node`` wins over the comment)."""
    src = res.launch.source if res.launch else "launch"
    try:
        session, note = apply_cluster_comment(
            res.session, text, src, launcher_nproc=res.launch.nproc_per_node if res.launch
            else None, gpu=kw.get("gpu"), gpus_per_node=kw.get("gpus_per_node"))
    except ValueError as exc:
        raise MegatronArgsError(str(exc)) from None
    res.session = session
    if note:
        res.notes.append(("cluster", note))
    return res


def import_file(path: str | Path, **kw: Any) -> ImportResult:
    """:func:`read_launch` + :func:`session_from_launch` of a file (``variables`` goes to the
    former, the other keywords to the latter).

    Raises MegatronArgsError (also for an unreadable file, one that is not a regular file,
    or one of more than :data:`MAX_LAUNCH_BYTES`).
    """
    from core.util.inputs import read_text

    path = Path(path)
    text = read_text(path, MegatronArgsError, "launch", encoding="utf-8")
    variables = kw.pop("variables", None)
    res = session_from_launch(read_launch(text, str(path), variables), **kw)
    return with_cluster_comment(res, text, kw)


#: Arguments outside the table that also decide a field (read in session_from_launch).
_ALSO_SETS = {"model.attention_kernel": ("--transformer-impl", "--use-legacy-models"),
              "model.vocab_size": ("--vocab-file",)}


def field_origin(target: str, given: Any) -> str | None:
    """What set ``section.field`` in an import, for messages: ``"set by --bf16, --fp8-format"``
    naming only the arguments among ``given`` (the launch's ``--names``) that map to it,
    ``"no --hierarchical-context-parallel-sizes in the launch: Megatron-LM's default"`` when
    the launch gives none of them (the arguments it could give named), None when no
    Megatron-LM argument maps to the field (the world size, the cluster)."""
    flags = [f for f, arg in ARGUMENTS.items() if target in arg.targets]
    flags += [f for f in _ALSO_SETS.get(target, ()) if f not in flags]
    if not flags:
        return None
    present = [f for f in flags if f in given]
    if present:
        return f"set by {', '.join(present)}"
    return f"no {' or '.join(flags)} in the launch: Megatron-LM's default"


# --------------------------------------------------------------------------- mapping out

def _get(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default)


def export_arguments(session: Session) -> list[str]:
    """Megatron-LM arguments that run ``session``'s model and plan (shell words).

    Raises
    ------
    MegatronArgsError
        The plan has something Megatron-LM's arguments cannot express (GPipe,
        ZB-H1, ZeRO-2), naming the field.
    """
    m, pl = session.model, session.plan
    out = ["--num-layers", str(m.num_layers), "--hidden-size", str(m.hidden_size),
           "--num-attention-heads", str(m.num_attention_heads)]
    if m.ffn_hidden_size or _get(m, "activation") == "swiglu":  # SwiGLU's default is not 4h
        out += ["--ffn-hidden-size", str(m.ffn)]
    out += ["--seq-length", str(m.seq_length), "--max-position-embeddings", str(m.seq_length)]
    if m.vocab_size == TOKENIZER_VOCAB["GPT2BPETokenizer"]:  # the files are the user's to place
        out += ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "gpt2-vocab.json",
                "--merge-file", "gpt2-merges.txt"]
    else:
        out += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab_size - 1)]
    if _get(m, "kv_channels") is not None:
        out += ["--kv-channels", str(m.kv_channels)]
    g = _get(m, "num_query_groups")
    if g is not None and g != m.num_attention_heads:
        out += ["--group-query-attention", "--num-query-groups", str(g)]
    clamp, offset = _get(m, "activation_func_clamp_value"), _get(m, "glu_linear_offset") or 0.0
    if _get(m, "activation") == "swiglu":
        # Megatron-Core fuses a clamp and a linear offset only with the quick-GELU gate
        # (TransformerConfig: glu_linear_offset needs quick_gelu under bias_activation_fusion)
        out.append("--quick-geglu" if clamp is not None or offset else "--swiglu")
    elif _get(m, "activation") == "squared_relu":
        out.append("--squared-relu")
    if clamp is not None:
        out += ["--activation-func-clamp-value", repr(float(clamp))]
    if offset:
        out += ["--glu-linear-offset", repr(float(offset))]
    if (_get(m, "softmax_type") or "vanilla") != "vanilla":
        out += ["--softmax-type", m.softmax_type]
    if _get(m, "normalization") == "rmsnorm":
        out += ["--normalization", "RMSNorm"]
    if _get(m, "position_embedding") == "rope":
        out += ["--position-embedding-type", "rope"]
    if _get(m, "tied_embeddings") is False:
        out.append("--untie-embeddings-and-output-weights")
    if _get(m, "add_bias_linear") is False:
        out.append("--disable-bias-linear")
    if _get(m, "add_qkv_bias"):
        out.append("--add-qkv-bias")
    if _get(m, "qk_layernorm"):
        out.append("--qk-layernorm")
    if _get(m, "attention_kernel") is not None:
        out += ["--attention-backend", m.attention_kernel]
    if _get(m, "window_size"):
        out += ["--window-size", f"({m.window_size},0)"]
        if _get(m, "window_attn_skip_freq"):
            out += ["--window-attn-skip-freq", str(m.window_attn_skip_freq)]
    if _get(m, "multi_latent_attention"):
        out.append("--multi-latent-attention")
        if m.q_lora_rank:
            out += ["--q-lora-rank", str(m.q_lora_rank)]
        out += ["--kv-lora-rank", str(m.kv_lora_rank), "--qk-head-dim", str(m.qk_head_dim),
                "--qk-pos-emb-head-dim", str(m.qk_pos_emb_head_dim),
                "--v-head-dim", str(m.v_head_dim)]
    if _get(m, "mtp_num_layers"):
        out += ["--mtp-num-layers", str(m.mtp_num_layers)]
    E = _get(m, "num_experts")
    if E:
        out += ["--num-experts", str(E), "--moe-router-topk", str(m.moe_top_k),
                "--moe-token-dispatcher-type", str(_get(pl, "moe_token_dispatcher_type")
                                                   or "alltoall")]
        if m.moe_ffn_hidden_size:
            out += ["--moe-ffn-hidden-size", str(m.moe_ffn_hidden_size)]
        if m.num_shared_experts:
            width = m.moe_ffn_hidden_size or m.ffn
            out += ["--moe-shared-expert-intermediate-size", str(m.num_shared_experts * width)]
        first, freq = m.moe_first_dense_layers, m.moe_layer_frequency
        if first:  # Megatron's list form; the first dense layers end where MoE starts
            L = m.num_layers
            out += ["--moe-layer-freq", f"([0]*{first}+[1]*{L - first})" if freq == 1 else
                    "[" + ",".join("1" if i >= first and i % freq == 0 else "0"
                                   for i in range(L)) + "]"]
        elif freq != 1:
            out += ["--moe-layer-freq", str(freq)]
        if getattr(m, "moe_router_num_groups", None):
            out += ["--moe-router-num-groups", str(m.moe_router_num_groups),
                    "--moe-router-group-topk", str(m.moe_router_group_topk)]
    out += ["--micro-batch-size", str(pl.micro_batch_size),
            "--global-batch-size", str(pl.global_batch_size),
            "--tensor-model-parallel-size", str(pl.tensor_parallel),
            "--pipeline-model-parallel-size", str(pl.pipeline_parallel)]
    cp, ep = _get(pl, "context_parallel", 1) or 1, _get(pl, "expert_parallel", 1) or 1
    if cp > 1:
        out += ["--context-parallel-size", str(cp)]
        kind = _get(pl, "cp_comm_type", "p2p")
        if kind == "allgather":
            raise MegatronArgsError(
                f"plan.cp_comm_type {pl.cp_comm_type!r}: PyTorch's context_parallel all-gather "
                "(torchtitan) has no Megatron-LM argument (--cp-comm-type all_gather is Transformer "
                "Engine's, which does not overlap the gather: plan.cp_comm_type all_gather); use "
                "p2p, the ring")
        if kind != "p2p":
            out += ["--cp-comm-type", kind]
        if kind == "a2a+p2p":
            if not _get(pl, "cp_a2a_size"):
                raise MegatronArgsError("plan.cp_a2a_size is empty: cp_comm_type 'a2a+p2p' needs "
                                        "the all-to-all group's size")
            out += ["--hierarchical-context-parallel-sizes", str(pl.cp_a2a_size),
                    str(cp // pl.cp_a2a_size)]
    if ep > 1:
        out += ["--expert-model-parallel-size", str(ep)]
    if _get(pl, "expert_tensor_parallel") is not None:
        out += ["--expert-tensor-parallel-size", str(pl.expert_tensor_parallel)]
    layout = _get(pl, "pipeline_model_parallel_layout")
    if layout and str(layout).strip():  # Megatron-Core derives v from the layout
        out += ["--pipeline-model-parallel-layout", str(layout).strip()]
    try:  # the schedule's own Megatron arguments, or its refusal by name
        schedule_args = get_schedule(pl.schedule).megatron_args(pl.virtual_pipeline_stages)
    except ValueError as exc:  # NotInMegatron, or an unknown name
        raise MegatronArgsError(f"plan.schedule {pl.schedule!r}: {exc}") from None
    if not (layout and str(layout).strip()):
        out += schedule_args
    if _get(pl, "sequence_parallel"):
        out.append("--sequence-parallel")
    zero = _get(pl, "zero_stage", 0) or 0
    if zero == 1:
        out.append("--use-distributed-optimizer")
    elif zero == 3:  # Megatron: FSDP2 runs without gradient accumulation fusion (megatron_rules)
        out += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion"]
    elif zero:
        raise MegatronArgsError(f"plan.zero_stage {zero}: Megatron-LM has the distributed "
                                "optimizer (1) and FSDP (3), not ZeRO-2")
    size = _get(pl, "data_parallel_shard_size")
    if size:  # hybrid sharding: d/size instances of the distributed optimizer
        out += ["--num-distributed-optimizer-instances", str(pl.data_parallel // size)]
    if _get(pl, "fp8_param_gather"):
        out.append("--fp8-param-gather")
    if _get(pl, "overlap_grad_reduce"):
        out.append("--overlap-grad-reduce")
    if _get(pl, "overlap_param_gather"):
        out.append("--overlap-param-gather")
    if _get(pl, "tp_comm_overlap"):
        out.append("--tp-comm-overlap")
    if _get(pl, "overlap_moe_expert_parallel_comm"):
        out.append("--overlap-moe-expert-parallel-comm")
    if _get(pl, "delay_wgrad_compute"):
        out.append("--delay-wgrad-compute")
    if _get(pl, "cross_entropy_loss_fusion"):
        out += ["--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
                str(_get(pl, "cross_entropy_fusion_impl") or "native")]
    gd = _get(pl, "grad_reduce_dtype")
    if gd == "bf16":
        out.append("--grad-reduce-in-bf16")
    elif gd == "fp32":
        out.append("--accumulate-allreduce-grads-in-fp32")
    elif gd is not None:
        raise MegatronArgsError(f"plan.grad_reduce_dtype {gd!r}: Megatron-LM reduces gradients "
                                "in fp32 or bf16")
    if pl.recompute == "full":
        n = _get(pl, "recompute_num_layers")
        out += ["--recompute-granularity", "full"]
        out += ["--recompute-method", "block", "--recompute-num-layers", str(n)] if n else [
            "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif pl.recompute == "selective_op":
        raise MegatronArgsError("plan.recompute 'selective_op': torchtitan's per-op selective "
                                "activation checkpointing has no Megatron-LM argument")
    elif pl.recompute == "selective":
        out += ["--recompute-granularity", "selective"]
        if _get(pl, "recompute_modules"):
            out += ["--recompute-modules", *_get(pl, "recompute_modules").replace(",", " ").split()]
    for name, flag in (("first_stage_layers", "--decoder-first-pipeline-num-layers"),
                       ("last_stage_layers", "--decoder-last-pipeline-num-layers")):
        if _get(pl, name):
            out += [flag, str(getattr(pl, name))]
    for name, flag in (("account_for_embedding_in_pipeline_split",
                        "--account-for-embedding-in-pipeline-split"),
                       ("account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split")):
        if _get(pl, name):
            out.append(flag)
    if pl.precision in ("bf16", "fp16"):
        out.append(f"--{pl.precision}")
    elif pl.precision == "fp8":  # the recipe always explicit: Megatron's default is delayed
        out += ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe",
                _get(pl, "fp8_recipe") or "tensorwise"]
    samples = session.cost.training_tokens / m.seq_length
    out += ["--train-samples", str(int(round(samples)))]
    return out
