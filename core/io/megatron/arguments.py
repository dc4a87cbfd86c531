"""Megatron-LM's command-line arguments as vtrain reads them: the argument table as data.

What belongs here: Megatron-LM's parser as data (:data:`ENTRIES`, read from
``resources/megatron_arguments.json``), the table of arguments vtrain maps to session fields
(:data:`ARGUMENTS`: argument -> ``section.field``, which import and export both follow),
Megatron-LM's model defaults, and the look-ups on the table (:func:`unknown_arguments`,
:func:`field_origin`, :func:`field_exists`). Reading a launch is :mod:`.launch`, mapping it
to a session :mod:`.to_session`, writing arguments :mod:`.from_session`.

Megatron-LM's ``megatron/training/arguments.py`` builds one ``argparse`` parser
(``allow_abbrev=False``); ``pretrain_gpt.py`` stops on an argument it does not
define. ``resources/megatron_arguments.json`` lists every option of that parser at
the Megatron-LM commit it names (options, ``dest``, argparse action, ``nargs``,
default) and what the option does to a simulated iteration, its ``effect``:

* ``modelled``: mapped to session fields (:data:`ARGUMENTS`).
* ``ignored``: may change the iteration time (kernels, fusions, communication
  schedules, offloading) and is not modelled: the importer lists it by name as
  *ignored* (:data:`TIMING_ARGUMENTS`).
* ``neutral``: cannot change it (logging, paths, checkpointing, data, tokenizer
  files, learning rate, optimizer hyper-parameters, inference and RL settings,
  numerics-only constants): listed apart (:data:`NEUTRAL_ARGUMENTS`).
* ``refused``: changes the work in a way vtrain does not model (Mamba and
  linear-attention layers, FP4 GEMMs, offloading, another optimizer ...): given at a value
  other than Megatron-LM's default (:func:`at_default`), the import stops naming it and what
  it would change (:data:`REFUSED_ARGUMENTS`); at the default it is listed as not used. An
  entry's ``only_with`` names the options it acts with (all of them): without them it has no
  effect and is listed as ignored with why. A few are read by the mapping itself, which
  refuses them under the condition their note states (``--optimizer`` other than adam ...).
* ``removed``: rejected by Megatron-LM's ``validate_args`` ("no longer valid"),
  refused with the argument to use (:data:`REMOVED_ARGUMENTS`).

``older`` lists names of earlier Megatron-LM releases (before Megatron-Core, and
core_r0.9 to core_r0.13) still met in launch scripts, with their effect: they
are read as aliases. ``tests/test_megatron_import_current.py`` checks the table
against ``../shared/data/megatron-lm/arguments.json`` (every option there is
here, with the same dest, action, nargs and default).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.plan.cluster import ClusterConfig, CostConfig, ReliabilityConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.sim.labels import KIND_NAMES
from core.util.text import short_repr

__all__ = ["TABLE_FILE", "MEGATRON_LM_COMMIT", "Entry", "ENTRIES", "BY_OPTION", "BY_DEST",
           "EFFECTS", "TIMING_ARGUMENTS", "NEUTRAL_ARGUMENTS", "REFUSED_ARGUMENTS",
           "REMOVED_ARGUMENTS", "MODELLED_ARGUMENTS", "OLDER_ARGUMENTS", "MegatronArgsError",
           "Arg", "ARGUMENTS", "KNOWN_ARGUMENTS", "TOKENIZER_VOCAB", "MEGATRON_MODEL_DEFAULTS",
           "SECTIONS", "MEGATRON_FSDP_STRATEGIES", "field_exists", "unknown_arguments",
           "field_origin", "at_default", "check_choices", "check_values"]

TABLE_FILE = Path(__file__).resolve().parents[3] / "resources" / "megatron_arguments.json"
#: What an argument does to a simulated iteration (see the module's docstring).
EFFECTS = ("modelled", "ignored", "neutral", "refused", "removed")


@dataclass(frozen=True)
class Entry:
    """One argument of Megatron-LM's parser.

    Attributes
    ----------
    options : tuple of str
        Its option strings (``--no-x`` and ``--disable-x`` aliases included).
    dest : str
        The attribute argparse stores it in (the name a printed argument dump shows).
    action : str
        ``store``, ``store_true``, ``store_false``, ``boolean_optional`` or ``help``.
    nargs : int, str or None
        argparse's nargs (None: one value; 0: a switch; ``"+"``, ``"*"``, or a count).
    default : Any
        Megatron-LM's default (JSON; an enum's default as argparse prints it).
    effect : str
        One of :data:`EFFECTS`.
    note : str
        For ``refused`` and ``removed``: what it would change, or the argument to use.
    choices : tuple or None
        argparse's choices (str or int), where the parser declares plain ones: a value outside
        them is Megatron-LM's error (:func:`check_choices`); None otherwise.
    only_with : tuple of str
        For ``refused``: the options it acts with (all of them given); without them it has no
        effect (empty: it acts alone).
    type : str or None
        argparse's ``type`` where it is ``int`` or ``float`` (each value must read as one:
        :func:`check_values`); None otherwise (``str``, a switch, or a parser function).
    """

    options: tuple[str, ...]
    dest: str
    action: str
    nargs: Any
    default: Any
    effect: str
    note: str = ""
    choices: tuple | None = None
    only_with: tuple[str, ...] = ()
    type: str | None = None

    @property
    def takes_value(self) -> bool:
        return self.action == "store" and self.nargs != 0


def _load() -> tuple[str, list[Entry], dict[str, Entry]]:
    data = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    entries = [Entry(tuple(e["options"]), e["dest"], e["action"], e["nargs"], e["default"],
                     e["effect"], e.get("note", ""),
                     tuple(e["choices"]) if e.get("choices") else None,
                     tuple(e.get("only_with", ())), e.get("type"))
               for e in data["arguments"]]
    older = {e["option"]: Entry((e["option"],), e["option"][2:].replace("-", "_"),
                                "store", None, None, e["effect"], e.get("note", ""))
             for e in data["older"]}
    return data["megatron_lm_commit"], entries, older


#: The Megatron-LM commit whose parser the table follows.
MEGATRON_LM_COMMIT, ENTRIES, OLDER_ARGUMENTS = _load()
#: option string -> entry (the current parser's, then the older names).
BY_OPTION: dict[str, Entry] = {**OLDER_ARGUMENTS, **{o: e for e in ENTRIES for o in e.options}}
#: dest -> entries storing it (one, except where two options share a dest).
BY_DEST: dict[str, list[Entry]] = {}
for _e in ENTRIES:
    BY_DEST.setdefault(_e.dest, []).append(_e)


def _with(effect: str) -> frozenset[str]:
    return frozenset(o for o, e in BY_OPTION.items() if e.effect == effect)


#: Arguments vtrain maps to session fields (checked against ARGUMENTS below).
MODELLED_ARGUMENTS = _with("modelled")
def check_choices(args: dict[str, list[str]], source: str) -> None:
    """Refuse a value outside an argument's argparse choices (:attr:`Entry.choices`), as
    Megatron-LM's parser does before training starts: ``{"--flag": [values]}`` as
    :func:`core.io.megatron.launch.parse_arguments` gives them (each value of an ``nargs``
    list is checked; argparse compares case by case, an integer choice by its value).

    Raises
    ------
    MegatronArgsError
        Naming the file, the argument, the value and the choices.
    """
    for flag, values in args.items():
        entry = BY_OPTION.get(flag)
        if entry is None or entry.choices is None:
            continue
        for v in values:
            if isinstance(entry.choices[0], int):
                try:  # argparse converts with type=int first: int(' 1'), int('0_1') are 1
                    ok = int(v) in entry.choices
                except ValueError:  # '²'.isdigit() is True, int('²') raises
                    ok = False
            else:
                ok = v in entry.choices
            if not ok:
                raise MegatronArgsError(
                    f"{source}: {flag} {short_repr(v)}: invalid choice (choose from "
                    f"{', '.join(map(str, entry.choices))}): Megatron-LM's parser refuses it")


#: The current parser's options (not :data:`OLDER_ARGUMENTS`' names, whose nargs and type
#: the table does not know).
_CURRENT_OPTIONS = frozenset(o for e in ENTRIES for o in e.options)
_NARGS_WORDS = {None: "one value", 0: "no value (a switch)", "+": "one value or more",
                "*": "any number of values"}


def check_values(args: dict[str, list[str]], source: str, skip: Any = ()) -> None:
    """Refuse what Megatron-LM's argparse refuses in the values of every argument of the
    current parser, whether the import reads it or not: a number of values its ``nargs``
    does not take (argparse: "expected one argument", or the words left over: "unrecognized
    arguments"), a value that is not its ``type`` (``int``: Python's ``int()`` of the word,
    ``float``: ``float()``; argparse: "invalid int value"), or one outside its choices
    (:func:`check_choices`). A value that holds a variable the script does not set
    (``$NAME``) is not checked here (the mapping names it where it reads it). The count and
    type of the arguments in ``skip`` are not checked (the mapping reads them, with its own
    messages: ``--num-layers 'x' must be a positive integer``); their choices are.

    Raises
    ------
    MegatronArgsError
        One line: the file, the argument as given, and the rule (its nargs or type, from
        ``resources/megatron_arguments.json``, Megatron-LM's parser at
        :data:`MEGATRON_LM_COMMIT`).
    """
    for flag, values in args.items():
        if flag not in _CURRENT_OPTIONS or flag in skip:
            continue
        entry = BY_OPTION[flag]
        given = short_repr(" ".join([flag, *values]))
        n = entry.nargs
        if entry.action == "help":
            continue
        if n == 0 or entry.action != "store":
            bad = bool(values)
        elif n is None:
            bad = len(values) != 1
        elif n == "+":
            bad = not values
        elif isinstance(n, int):
            bad = len(values) != n
        else:
            bad = False
        if bad and (n == 0 or entry.action != "store"):
            raise MegatronArgsError(f"{source}: {flag} is a switch and takes no value, got "
                                    f"{short_repr(' '.join(values))} (nargs 0 in Megatron-LM's "
                                    "parser): Megatron-LM's argparse refuses it")
        if bad:
            takes = _NARGS_WORDS.get(n, f"{n} values") if entry.action == "store" else \
                _NARGS_WORDS[0]
            raise MegatronArgsError(
                f"{source}: {given}: {flag} takes {takes} (nargs {n!r} in Megatron-LM's parser), "
                f"got {len(values)}: Megatron-LM's argparse refuses it")
        if entry.type not in ("int", "float"):
            continue
        for v in values:
            if "$" in v:
                continue
            try:
                (int if entry.type == "int" else float)(v)
            except ValueError:
                raise MegatronArgsError(
                    f"{source}: {given}: {short_repr(v)} is not "
                    f"{'an int' if entry.type == 'int' else 'a float'} ({flag} has "
                    f"type={entry.type} in Megatron-LM's parser): Megatron-LM's argparse refuses "
                    "it") from None
    check_choices(args, source)


def at_default(flag: str, values: list[str]) -> bool:
    """Whether ``flag`` given with ``values`` (as :func:`core.io.megatron.launch.
    parse_arguments` gives them) is Megatron-LM's default for it (:attr:`Entry.default`): a
    switch never is (giving it flips it); a value is when it reads as the default (a number
    by its value, ``None`` never; a list word by word). An unknown flag is not."""
    entry = BY_OPTION.get(flag)
    if entry is None or entry.action != "store" or entry.nargs == 0:
        return False
    default = entry.default
    if isinstance(default, list):
        return len(values) == len(default) and all(
            _same(v, d) for v, d in zip(values, default))
    return len(values) == 1 and _same(values[0], default)


def _same(word: str, default: Any) -> bool:
    """A launch's word is the default value ``default`` (JSON)."""
    if default is None or isinstance(default, bool):
        return False
    if isinstance(default, (int, float)):
        try:
            return float(word) == float(default)
        except ValueError:
            return False
    return word == str(default)


#: Megatron-LM arguments vtrain does not map that may change the iteration time (listed as ignored).
TIMING_ARGUMENTS = _with("ignored")
#: Megatron-LM arguments that cannot change the iteration time (listed apart, never mapped).
NEUTRAL_ARGUMENTS = _with("neutral")
#: Arguments that change the work in a way vtrain does not model -> what they would change.
REFUSED_ARGUMENTS = {o: e.note for o, e in BY_OPTION.items() if e.effect == "refused"}
#: Names Megatron-LM's validate_args rejects as "no longer valid", with the argument to use.
REMOVED_ARGUMENTS = {"--batch-size": "--micro-batch-size", "--warmup": "--lr-warmup-fraction",
                     "--model-parallel-size": "--tensor-model-parallel-size"}
#: Config keys of tools built on Megatron-Core (NeMo 2, Megatron-Bridge: ``TransformerConfig``
#: and ``ModelParallelConfig`` field names) that users write as Megatron-LM options, which
#: Megatron-LM's parser does not define, with Megatron-LM's option for the same setting
#: (``validate_args`` sets ``virtual_pipeline_model_parallel_size`` from it).
OTHER_TOOLS_NAMES = {"--virtual-pipeline-model-parallel-size":
                     "--num-virtual-stages-per-pipeline-rank"}


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
                        "vocabulary size (NullTokenizer: this, its end-of-document token the "
                        "last id)"),
    "--tokenizer-type": Arg(("model.vocab_size",), True,
                            "a tokenizer of known size (GPT2BPETokenizer: 50257, Llama2Tokenizer: "
                            "32000, BERT word pieces) or NullTokenizer with --vocab-size"),
    "--make-vocab-size-divisible-by": Arg(("model.make_vocab_size_divisible_by",), True,
                                          "vocabulary padding: a multiple of this times t "
                                          "(default 128)"),
    "--padded-vocab-size": Arg(("model.vocab_size", "model.make_vocab_size_divisible_by"), True,
                               "the padded vocabulary as given (Megatron-LM pads only when it "
                               "is not): model.vocab_size with make_vocab_size_divisible_by 1"),
    # megatron-core 0.19.2 megatron/core/tokenizers/utils/build_tokenizer.py: with
    # pad_vocab_size False build_tokenizer does not set padded_vocab_size
    "--no-pad-vocab-size": Arg(("model.vocab_size",), False,
                               "no padding by build_tokenizer: with --padded-vocab-size no "
                               "effect; without it refused (the vocabulary is the model "
                               "builder's)"),
    "--disable-pad-vocab-size": Arg(("model.vocab_size",), False,
                                    "--no-pad-vocab-size's other name"),
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
    "--use-rotary-position-embeddings": Arg(
        ("model.position_embedding",), False,
        "RoPE (legacy switch): Megatron-LM's validate_args makes it --position-embedding-type "
        "rope; beside an explicit --position-embedding-type learned_absolute it is refused"),
    "--no-position-embedding": Arg(
        ("model.position_embedding",), False,
        "no learned position table: nothing to change with RoPE, which has none; without RoPE "
        "it is NoPE, which Megatron-LM refuses and vtrain does not model: refused"),
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
    "--moe-grouped-gemm": Arg(("model.num_experts",), False,
                              "the experts as grouped GEMMs (TEGroupedMLP), as they are timed; "
                              "required with more than one expert per rank (without it "
                              "Megatron-Core runs them one after another, SequentialMLP, which "
                              "is not modelled)"),
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
    "--no-bias-swiglu-fusion": Arg(("model.bias_activation_fusion",), False,
                                   "with --swiglu: the unfused activation (model."
                                   "bias_activation_fusion false: chunk, silu and mul in "
                                   "PyTorch, 8f saved bytes per token, not 6); no effect "
                                   "without --swiglu"),
    "--no-bias-gelu-fusion": Arg(("model.bias_activation_fusion",), False,
                                 "without --swiglu: the unfused activation (model."
                                 "bias_activation_fusion false; a separate bias add before "
                                 "the activation); no effect with --swiglu"),
    "--hidden-dropout": Arg(("model.hidden_dropout",), True,
                            "dropout after the attention and MLP blocks (0: no masks kept)"),
    "--attention-dropout": Arg(("model.attention_dropout",), True,
                               "dropout on the attention probabilities (the unfused core's "
                               "mask)"),
    "--micro-batch-size": Arg(("plan.micro_batch_size",), True, "micro-batch size b"),
    "--global-batch-size": Arg(("plan.global_batch_size",), True,
                               "global batch size B (default b times d)"),
    "--tensor-model-parallel-size": Arg(("plan.tensor_parallel",), True, "tensor-parallel size t"),
    "--pipeline-model-parallel-size": Arg(("plan.pipeline_parallel",), True,
                                          "pipeline-parallel size p"),
    "--context-parallel-size": Arg(("plan.context_parallel",), True, "context-parallel size cp"),
    "--cp-comm-type": Arg(("plan.cp_comm_type",), True,
                          f"{KIND_NAMES['cp_p2p']}: p2p (the ring, Megatron-Core's default), "
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
    "--use-megatron-fsdp": Arg(
        ("plan.zero_stage",), False,
        "Megatron-FSDP: zero_stage from --data-parallel-sharding-strategy (with "
        "--use-distributed-optimizer; docs/megatron_args.md)"),
    "--data-parallel-sharding-strategy": Arg(
        ("plan.zero_stage",), True,
        "Megatron-FSDP's sharding: no_shard 0, optim 1, optim_grads 2, optim_grads_params 3 "
        "(Megatron-LM's default)"),
    "--num-distributed-optimizer-instances": Arg(
        ("plan.data_parallel_shard_size",), True,
        "hybrid sharding: n instances of the sharded optimizer, each over d/n data-parallel "
        "ranks (data_parallel_shard_size = d/n)"),
    "--fp8-param-gather": Arg(("plan.fp8_param_gather",), False,
                              "FP8 linear weights kept and all-gathered in FP8"),
    "--use-precision-aware-optimizer": Arg(
        ("plan.use_precision_aware_optimizer",), False,
        "Transformer Engine's FusedAdam holds the optimizer state in the dtypes below (with the "
        "distributed optimizer; over BF16 weights the fp32 master weights as 16-bit remainders, "
        "plan.te_master_weights)"),
    "--main-params-dtype": Arg(("plan.main_params_dtype",), True,
                               "master weights' dtype under the precision-aware optimizer"),
    "--exp-avg-dtype": Arg(("plan.exp_avg_dtype",), True,
                           "Adam's first moment's dtype under the precision-aware optimizer"),
    "--exp-avg-sq-dtype": Arg(("plan.exp_avg_sq_dtype",), True,
                              "Adam's second moment's dtype under the precision-aware optimizer"),
    "--main-grads-dtype": Arg(("plan.grad_reduce_dtype",), True,
                              "bf16 taken with --grad-reduce-in-bf16 (the gradient buffer the "
                              "optimizer reads); bf16 without it refused (Megatron-Core 0.16.1 "
                              "reads it only in an assertion)"),
    "--no-gradient-accumulation-fusion": Arg(
        ("plan.gradient_accumulation_fusion",), False,
        "weight gradients added to the main gradients by a kernel of their own (off: "
        "plan.gradient_accumulation_fusion false; the fused wgrad GEMMs are Megatron's default)"),
    "--no-overlap-p2p-communication": Arg(
        ("plan.overlap_p2p_comm",), False,
        f"the interleaved schedule's {KIND_NAMES['pp_p2p']} blocks the sender (off: "
        "plan.overlap_p2p_comm false; Megatron overlaps it by default with virtual stages)"),
    "--overlap-grad-reduce": Arg(("plan.overlap_grad_reduce",), False,
                                 f"the {KIND_NAMES['dp_comm']}' gradient reduction under the "
                                 "backward"),
    "--overlap-param-gather": Arg(("plan.overlap_param_gather",), False,
                                  f"the {KIND_NAMES['dp_comm']}' parameter all-gather under "
                                  "the forward"),
    "--tp-comm-overlap": Arg(("plan.tp_comm_overlap",), False,
                             f"{KIND_NAMES['tp_comm']} (all-gathers and reduce-scatters) "
                             "under the GEMMs (Transformer Engine userbuffers)"),
    "--overlap-moe-expert-parallel-comm": Arg(
        ("plan.overlap_moe_expert_parallel_comm",), False,
        f"{KIND_NAMES['ep_all_to_all']} under another micro-batch's computation (combined "
        "1F1B)"),
    "--delay-wgrad-compute": Arg(
        ("plan.delay_wgrad_compute",), False,
        "with --overlap-moe-expert-parallel-comm: the experts' weight gradients beside the "
        f"backward's {KIND_NAMES['ep_all_to_all']} (dispatch)"),
    "--cross-entropy-loss-fusion": Arg(("plan.cross_entropy_loss_fusion",), False,
                                       "the loss's fused cross-entropy kernels"),
    "--cross-entropy-fusion-impl": Arg(("plan.cross_entropy_fusion_impl",), True,
                                       "native or te: the fused cross-entropy's kernels"),
    "--grad-reduce-in-bf16": Arg(("plan.grad_reduce_dtype",), False, "gradients reduced in bf16"),
    "--accumulate-allreduce-grads-in-fp32": Arg(("plan.grad_reduce_dtype",), False,
                                                "gradients accumulated and reduced in fp32"),
    "--cuda-graph-impl": Arg(("plan.cuda_graph_impl",), True,
                             "CUDA graphs: none, local, transformer_engine or full_iteration"),
    "--enable-cuda-graph": Arg(("plan.cuda_graph_impl",), False,
                               "CUDA graphs of whole layers (deprecated: --cuda-graph-impl local)"),
    "--external-cuda-graph": Arg(("plan.cuda_graph_impl",), False,
                                 "Transformer Engine's CUDA graphs (deprecated: "
                                 "--cuda-graph-impl transformer_engine)"),
    "--cuda-graph-modules": Arg(("plan.cuda_graph_modules",), True,
                                "modules the per-layer CUDA graphs (local, transformer_engine) "
                                "capture (attn, mlp, moe_router, moe_preprocess)"),
    "--cuda-graph-scope": Arg(("plan.cuda_graph_modules", "plan.cuda_graph_impl"), True,
                              "the CUDA graphs' modules (deprecated: --cuda-graph-modules; "
                              "full_iteration there is --cuda-graph-impl full_iteration)"),
    "--recompute-granularity": Arg(("plan.recompute",), True, "full or selective recomputation"),
    "--recompute-activations": Arg(("plan.recompute",), False, "selective recomputation (old name)"),
    "--checkpoint-activations": Arg(("plan.recompute",), False,
                                    "full recomputation (Megatron-LM before 2022, Megatron-DeepSpeed)"),
    "--activations-checkpoint-method": Arg(("plan.recompute", "plan.recompute_num_layers"), True,
                                           "full recomputation, uniform or block (Megatron-LM "
                                           "late 2021 to mid 2022)"),
    "--activations-checkpoint-num-layers": Arg(("plan.recompute_num_layers",), True,
                                               "with --activations-checkpoint-method: layers "
                                               "per checkpoint (uniform) or per stage (block)"),
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
    "--train-samples": Arg(("cost.training_tokens",), True, "token budget = (samples // B) * B * s"),
    "--train-iters": Arg(("cost.training_tokens",), True, "token budget = iterations * B * s"),
    "--save-interval": Arg(("reliability.checkpoint_interval_iterations",), True,
                           "iterations between checkpoints (the run's goodput, docs/goodput.md)"),
    "--persistent-save-interval": Arg(("reliability.checkpoint_interval_iterations",), True,
                                      "--save-interval's other name"),
    "--async-save": Arg(("reliability.async_save",), False,
                        "asynchronous checkpointing: training stalls only for the copy to host "
                        "memory (the run's goodput)"),
}

#: Megatron-FSDP's ``--data-parallel-sharding-strategy`` -> ``plan.zero_stage``: what each
#: shards over the data-parallel group (Megatron-Core 0.16.1,
#: ``megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py``
#: ``_init_each_parameter_group_buffers``): ``optim`` the fp32 main weights (the distributed
#: optimizer's state with them), ``optim_grads`` the gradients too, ``optim_grads_params`` the
#: model weights too; ``no_shard`` nothing (all-reduced gradients, plain data parallelism).
MEGATRON_FSDP_STRATEGIES = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}

#: Megatron-LM's arguments that are not mapped (resources/megatron_arguments.json, read
#: above): those that may change the iteration time are listed as ignored,
#: those that cannot (NEUTRAL_ARGUMENTS) apart, those that change the work in a way vtrain does
#: not model (REFUSED_ARGUMENTS) are refused by name; any other argument is not Megatron-LM's
#: and is refused (or listed, with allow_unknown).
KNOWN_ARGUMENTS = frozenset(ARGUMENTS) | TIMING_ARGUMENTS | NEUTRAL_ARGUMENTS | frozenset(
    REFUSED_ARGUMENTS)


#: Vocabulary sizes of Megatron-LM's tokenizers that need no file to know them.
TOKENIZER_VOCAB = {"GPT2BPETokenizer": 50257, "Llama2Tokenizer": 32000,
                   "BertWordPieceLowerCase": 30522, "BertWordPieceCase": 28996}
#: The tokenizer whose size in TOKENIZER_VOCAB is only its usual file's: Megatron-LM's
#: _Llama2Tokenizer (a _SentencePieceTokenizer) counts the pieces of --tokenizer-model, any
#: SentencePiece model; 32,000 is Meta's Llama 2 file (assumed, noted; the import's
#: --vocab-size gives another).
LLAMA2_TOKENIZER = "Llama2Tokenizer"
#: Megatron-LM's value of each model field a launch leaves to it (arguments.py and Megatron-
#: Core's TransformerConfig defaults: a GPT model), stated field by field and checked against
#: the model's fields by :func:`core.plan.model_config.model_from_fields`. The shape and vocabulary are
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
    "softmax_type": "vanilla", "activation_func_clamp_value": None, "glu_linear_offset": 0.0,
    "hidden_dropout": 0.1, "attention_dropout": 0.1, "make_vocab_size_divisible_by": 128,
    "bias_activation_fusion": True}
#: Megatron-LM's value of each plan field a session file requires and a launch may leave out
#: (arguments.py: ``--tensor-model-parallel-size`` and ``--pipeline-model-parallel-size`` 1,
#: no ``--recompute-granularity``: nothing recomputed, neither ``--bf16`` nor ``--fp16``: fp32).
#: The others have none: d is the world size over t*p*cp, ``--micro-batch-size`` must be given,
#: and ``--global-batch-size`` defaults to the micro-batch size times d.
MEGATRON_PLAN_DEFAULTS: dict[str, Any] = {"tensor_parallel": 1, "pipeline_parallel": 1,
                                          "recompute": "none", "precision": "fp32"}
#: The session's sections and their records (``section.field`` targets name them).
SECTIONS = {"model": ModelConfig, "plan": ParallelPlan, "cluster": ClusterConfig, "cost": CostConfig,
            "reliability": ReliabilityConfig}


def field_exists(target: str, value: Any = None) -> bool:
    """Whether ``section.field`` is a field of this version's dataclasses (and, with ``value``,
    whether the value is among the field's ``choices`` when it declares them)."""
    section, name = target.split(".", 1)
    for f in dataclasses.fields(SECTIONS[section]):
        if f.name == name:
            choices = f.metadata.get("choices")
            return value is None or choices is None or value in choices
    return False


def unknown_arguments(flags: Any) -> list[tuple[str, str]]:
    """The arguments among ``flags`` (``--name`` strings) that Megatron-LM does not define,
    each with a hint: ``"did you mean --x?"`` (the closest known name by :mod:`difflib`,
    ratio at least 0.75, or the name with ``-`` for ``_``), ``"no longer valid: use --x"``
    for a name Megatron-LM's ``validate_args`` rejects, Megatron-LM's option for a NeMo /
    Megatron-Bridge config name (:data:`OTHER_TOOLS_NAMES`), or ``""``."""
    out = []
    for flag in flags:
        if flag in KNOWN_ARGUMENTS:
            continue
        if flag in REMOVED_ARGUMENTS:
            out.append((flag, f"no longer valid in Megatron-LM: use {REMOVED_ARGUMENTS[flag]}"))
            continue
        if flag in OTHER_TOOLS_NAMES:
            out.append((flag, f"a NeMo / Megatron-Bridge config name: Megatron-LM's option is "
                              f"{OTHER_TOOLS_NAMES[flag]}"))
            continue
        dashed = flag[:2] + flag[2:].replace("_", "-")
        close = [dashed] if dashed in KNOWN_ARGUMENTS else difflib.get_close_matches(
            flag, sorted(KNOWN_ARGUMENTS), n=1, cutoff=0.75)
        out.append((flag, f"did you mean {close[0]}?" if close else ""))
    return out


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
