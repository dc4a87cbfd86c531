"""Mapping a launch's model arguments to ``model.*`` fields (Megatron-Core's rules).

What belongs here: one function per concern of the model (shape and vocabulary, MLP
activation, attention and norms, mixture of experts, sliding windows, multi-latent attention),
each reading its arguments through a :class:`~core.io.megatron.mapping.Mapper`, and
:func:`map_model`, which calls them in Megatron-LM's order. Fields of newer model families
(issue 11: ``model.activation`` ...) are written against their fixed names; an argument whose
target field (or value) this version's records do not have is refused by name.

The attention kernel follows Megatron-Core: ``--attention-backend`` (default ``auto``:
Transformer Engine picks its fused or flash attention) wins over the deprecated
``--use-flash-attn``; ``auto``, ``fused`` (TE's cuDNN fused attention) and ``flash`` are timed
as FlashAttention, ``unfused`` and ``local`` as the unfused kernel. ``NullTokenizer``'s
vocabulary is ``--vocab-size``, its end-of-document token the last id (megatron-core 0.18 on,
the tokenizer Megatron-LM's ``build_tokenizer`` builds at the table's commit, which has
``--null-tokenizer-eod-id``: ``megatron/core/tokenizers/text/libraries/null_tokenizer.py``;
megatron-core 0.17 and earlier added one end-of-document token).
"""

from __future__ import annotations

import ast

from core.io.megatron.arguments import (LLAMA2_TOKENIZER, MEGATRON_MODEL_DEFAULTS,
                                        TOKENIZER_VOCAB, MegatronArgsError, field_exists)
from core.io.megatron.mapping import Mapper, float_argument, int_argument, one_value
from core.io.shell_values import BINOPS
from core.plan.fields import BOUNDS
from core.util.text import short_repr

__all__ = ["ATTENTION_BACKENDS", "DEFAULT_ATTENTION_BACKEND", "EXPORTED_ATTENTION_BACKENDS",
           "MOE_ONLY", "attention_kernel", "layer_pattern", "map_model", "swiglu_ffn_hidden_size"]

#: Modelled values of model-family arguments when the family fields do not exist yet.
_DEFAULT_FAMILY = {"--normalization": ("LayerNorm",), "--position-embedding-type": ("learned_absolute",)}

#: Attention backends of Megatron-Core's --attention-backend (AttnBackend) -> attention_kernel:
#: Transformer Engine's flash and fused (cuDNN) attention and auto (TE picks one of them) are
#: timed as FlashAttention; unfused (TE's unfused) and local (Megatron-Core's own) as unfused.
ATTENTION_BACKENDS = {"auto": "flash", "flash": "flash", "fused": "flash", "unfused": "unfused",
                      "local": "unfused"}
#: Megatron-Core's default --attention-backend (arguments.json: ``AttnBackend.auto``).
DEFAULT_ATTENTION_BACKEND = "auto"
#: attention_kernel -> the backend the export writes (the inverse of ATTENTION_BACKENDS). The
#: field does not say which of auto, flash and fused a launch named, so the flash kernel exports
#: Megatron-Core's default auto (a launch without the argument, the common case): naming
#: ``flash`` would force the flash-attn package's backend, another kernel than the one TE picks.
#: The unfused kernel exports Transformer Engine's unfused backend (the export's layer spec is
#: TE's; ``local`` is Megatron-Core's own attention, for its local spec).
EXPORTED_ATTENTION_BACKENDS = {"flash": DEFAULT_ATTENTION_BACKEND, "unfused": "unfused"}


def attention_kernel(args: dict[str, list[str]], src: str) -> tuple[str, str, str]:
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
    backend = one_value(args, "--attention-backend", src)
    old = "--use-flash-attn" in args
    if backend is not None and backend not in ATTENTION_BACKENDS:
        raise MegatronArgsError(f"{src}: --attention-backend {short_repr(backend)}: expected one of "
                                f"Megatron-Core's {', '.join(ATTENTION_BACKENDS)}")
    legacy = "--use-legacy-models" in args
    if one_value(args, "--transformer-impl", src) == "local" and not legacy:
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
MOE_ONLY = ("--moe-grouped-gemm", "--moe-router-topk", "--moe-ffn-hidden-size",
            "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
            "--moe-token-dispatcher-type", "--moe-enable-deepep", "--moe-flex-dispatcher-backend",
            "--moe-router-num-groups", "--moe-router-group-topk")


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
    bad = MegatronArgsError(f"{source}: --moe-layer-freq {short_repr(text)}: expected an integer or a list "
                            "pattern of 0 and 1 such as ([0]*3+[1]*58)")

    def num(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult):
            return BINOPS[type(node.op)](num(node.left), num(node.right))
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
        raise MegatronArgsError(f"{source}: --moe-layer-freq {short_repr(text)} has {len(pattern)} entries "
                                f"for {num_layers} layers (--num-layers)")
    return pattern


def _is_list(node: ast.AST) -> bool:
    """Whether ``node`` is a list expression (a list literal, or ``+``/``*`` of one)."""
    if isinstance(node, ast.List):
        return True
    return isinstance(node, ast.BinOp) and (_is_list(node.left) or _is_list(node.right))



def _moe_arguments(mp: Mapper, L: int, ffn: int) -> None:
    """Map ``--num-experts`` and the MoE arguments that go with it (Megatron-Core defaults:
    top-k 2, experts ``--ffn-hidden-size`` wide, no shared experts, every layer MoE)."""
    from core.io.hf_moe import moe_layer_fields
    args, src = mp.args, mp.source
    E = int_argument(args, "--num-experts", src)
    mp.set("--num-experts", "model.num_experts", E)
    _grouped_gemm(mp, E)
    k = int_argument(args, "--moe-router-topk", src) if "--moe-router-topk" in args else 2
    mp.set("--moe-router-topk", "model.moe_top_k", k)
    width = ffn
    if "--moe-ffn-hidden-size" in args:
        width = int_argument(args, "--moe-ffn-hidden-size", src)
        mp.set("--moe-ffn-hidden-size", "model.moe_ffn_hidden_size", width)
    if "--moe-shared-expert-intermediate-size" in args:
        shared = int_argument(args, "--moe-shared-expert-intermediate-size", src)
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
            mp.set(flag, target, int_argument(args, flag, src))
    _expert_capacity(mp)
    if "--moe-layer-freq" in args:
        text = one_value(args, "--moe-layer-freq", src) or ""
        if "[" not in text:
            freq = int_argument(args, "--moe-layer-freq", src)
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


def _expert_capacity(mp: Mapper) -> None:
    """Token dropping. ``--moe-expert-capacity-factor`` cf caps each expert at
    ``ceil(cf * T k / E)`` tokens (Megatron-Core ``moe_utils.get_capacity``; a negative cf is
    no cap, ``TransformerConfig``), and ``--moe-pad-expert-input-to-capacity`` pads every
    expert's input to that capacity (``token_dispatcher``: each local expert processes
    ``capacity * tp * ep`` tokens, the all-to-all carries ``capacity * E``). Under the balanced
    routing simulated, cf >= 1 drops nothing and cf = 1 pads nothing: listed, with why. cf < 1
    drops tokens, and padding with cf > 1 pads the experts' GEMMs and the all-to-all by cf:
    another amount of work, refused by name."""
    args, src = mp.args, mp.source
    pad = mp.switch("--moe-pad-expert-input-to-capacity")
    if not mp.take("--moe-expert-capacity-factor"):
        if pad:
            mp.refuse("--moe-pad-expert-input-to-capacity", "needs --moe-expert-capacity-factor "
                      "(Megatron-Core's TransformerConfig raises without it)")
        return
    cf = float_argument(args, "--moe-expert-capacity-factor", src)
    if cf < 0:
        mp.ignored.append(("--moe-expert-capacity-factor", f"{cf:g}: no capacity (Megatron-Core "
                           "reads a negative factor as none): nothing dropped or padded"))
        if pad:
            mp.refuse("--moe-pad-expert-input-to-capacity", "needs a capacity: "
                      f"--moe-expert-capacity-factor is {cf:g} (none)")
    elif cf < 1:
        mp.refuse("--moe-expert-capacity-factor", f"{cf:g} drops tokens even under balanced "
                  f"routing (each expert keeps ceil({cf:g} x its share)): the experts' work "
                  "shrinks, which is not modelled")
    elif pad and cf > 1:
        mp.refuse("--moe-pad-expert-input-to-capacity", f"pads every expert's input to "
                  f"--moe-expert-capacity-factor {cf:g} times its balanced share: the experts' "
                  f"GEMMs and the all-to-all carry {cf:g}x the tokens, which is not modelled")
    else:
        mp.ignored.append(("--moe-expert-capacity-factor", f"{cf:g}: under the balanced "
                           "routing simulated no expert exceeds its capacity"
                           + (" and none is padded (the capacity is its share)" if pad else "")
                           + "; with real, unbalanced routing it caps the busiest expert"))


def _grouped_gemm(mp: Mapper, num_experts: int) -> None:
    """The experts are timed as grouped GEMMs (Transformer Engine's ``TEGroupedMLP``), which
    Megatron-Core runs with ``--moe-grouped-gemm``; without it each rank runs its experts one
    after another (``SequentialMLP``: one GEMM pair per local expert, each at its tokens'
    size), which is not modelled, so such a launch is refused, unless each rank holds one
    expert (``--expert-model-parallel-size`` = E: the two are then the same work)."""
    args, src = mp.args, mp.source
    if mp.switch("--moe-grouped-gemm"):  # read: what the experts are timed as
        return
    ep = (int_argument(args, "--expert-model-parallel-size", src)
          if "--expert-model-parallel-size" in args else 1)
    if ep and num_experts // max(ep, 1) > 1:
        mp.refuse("--num-experts", f"without --moe-grouped-gemm Megatron-Core runs each rank's "
                                   f"{num_experts // ep} experts one after another "
                                   "(SequentialMLP), which is not modelled: the experts are "
                                   "timed as grouped GEMMs (TEGroupedMLP); add "
                                   "--moe-grouped-gemm, as Megatron-Bridge's MoE recipes do")


#: Megatron-LM's other names of the layer count and sequence length: ``validate_args`` sets
#: ``num_layers`` from ``--encoder-num-layers`` and ``seq_length`` from
#: ``--encoder-seq-length`` when only they are given, and refuses to start when both names are
#: ("cannot have both num-layers and encoder-num-layers specified"; ``assert
#: args.encoder_seq_length is None``).
ENCODER_NAMES = (("--num-layers", "--encoder-num-layers"),
                 ("--seq-length", "--encoder-seq-length"))


def _encoder_names(mp: Mapper) -> None:
    """Read ``--encoder-num-layers`` / ``--encoder-seq-length`` as ``--num-layers`` /
    ``--seq-length`` (:data:`ENCODER_NAMES`), noted. Raises MegatronArgsError when a launch
    gives both names of one, which Megatron-LM refuses."""
    args, src = mp.args, mp.source
    for name, other in ENCODER_NAMES:
        if not mp.take(other):
            continue
        if name in args:
            raise MegatronArgsError(f"{src}: {name} and {other} are both given: Megatron-LM "
                                    "refuses to start (validate_args sets each from the other "
                                    "and asserts only one is given); keep one")
        args[name] = args[other]
        mp.notes.append((other, f"read as {name} (Megatron-LM's validate_args sets "
                         f"{name[2:].replace('-', '_')} from it)"))


def _arguments_elsewhere(mp: Mapper) -> str:
    """Where Megatron-LM takes arguments the launch does not write (``--yaml-cfg FILE``, the
    checkpoint of ``--use-checkpoint-args``), said for messages; "" when nowhere."""
    args = mp.args
    if args.get("--yaml-cfg"):  # not taken: refused as the table says when nothing is missing
        return f"Megatron-LM takes its arguments from --yaml-cfg {args['--yaml-cfg'][0]}"
    if "--use-checkpoint-args" in args:
        where = " ".join(args.get("--load") or []) or "--load"
        return f"Megatron-LM takes the model's arguments from the checkpoint in {where} " \
               "(--use-checkpoint-args)"
    return ""


def _model_shape(mp: Mapper) -> tuple[int, int, int]:
    """``(L, h, s)``: the layers, hidden size, heads and sequence length Megatron-LM needs,
    and the MLP and head sizes when given."""
    args, src = mp.args, mp.source
    _encoder_names(mp)
    missing = [f for f in ("--num-layers", "--hidden-size", "--num-attention-heads",
                           "--micro-batch-size", "--seq-length") if f not in args]
    elsewhere = _arguments_elsewhere(mp)
    if missing and elsewhere:
        raise MegatronArgsError(f"{src}: missing {', '.join(missing)}: {elsewhere}, which vtrain "
                                "does not read; give them in the launch")
    if missing:
        raise MegatronArgsError(f"{src}: missing {', '.join(missing)} (Megatron-LM needs "
                                f"{'it' if len(missing) == 1 else 'them'} to build the model)")
    if elsewhere and "--use-checkpoint-args" in args:
        mp.notes.append(("--use-checkpoint-args", f"{elsewhere}, which vtrain does not read: the "
                         "launch's model arguments are taken; Megatron-LM's "
                         "load_args_from_checkpoint keeps the sizes given but takes the "
                         "checkpoint's position embedding, linear biases, activation (swiglu, "
                         "squared ReLU), untied output layer, normalization, tokenizer and "
                         "padded vocabulary over the launch's: check they agree"))
    # ---- model
    L = int_argument(args, "--num-layers", src)
    h = int_argument(args, "--hidden-size", src)
    a = int_argument(args, "--num-attention-heads", src)
    s = int_argument(args, "--seq-length", src)
    for flag, target, v in (("--num-layers", "model.num_layers", L), ("--hidden-size",
                            "model.hidden_size", h), ("--num-attention-heads",
                            "model.num_attention_heads", a), ("--seq-length", "model.seq_length", s)):
        mp.take(flag)
        mp.set(flag, target, v)
    if mp.take("--ffn-hidden-size"):
        mp.set("--ffn-hidden-size", "model.ffn_hidden_size", int_argument(args, "--ffn-hidden-size", src))
    if mp.take("--kv-channels"):
        kv = int_argument(args, "--kv-channels", src)
        if "--multi-latent-attention" in args:
            # Megatron-Core's MultiLatentAttention sizes Q/K heads by qk_head_dim +
            # qk_pos_emb_head_dim and V heads by v_head_dim; kv_channels goes unread
            # (DeepSeek-V3 launches and Megatron-Bridge's provider give 128 beside them)
            mp.notes.append(("--kv-channels", f"{kv} has no effect with --multi-latent-attention "
                             "(its heads are --qk-head-dim + --qk-pos-emb-head-dim and "
                             "--v-head-dim wide)"))
        else:
            mp.set("--kv-channels", "model.kv_channels", kv)
    return L, h, s


def _vocabulary(mp: Mapper) -> None:
    """The vocabulary: a tokenizer of known size (whatever ``--vocab-size`` says: Megatron-LM
    reads it for the NullTokenizer and TikTokenizer only), ``--vocab-size``, or GPT-2
    BPE for a ``--vocab-file``; and its padding, ``--make-vocab-size-divisible-by``
    (Megatron-LM pads to a multiple of it times t; DeepSeek-V3 launches give 3232).

    The NullTokenizer's size is ``--vocab-size`` itself: megatron-core 0.19.2's
    ``NullTokenizer.__init__`` sets ``_vocab_size = int(vocab_size)`` and ``_eod_id =
    vocab_size - 1`` (``--null-tokenizer-eod-id`` moves it), and its ``vocab_size`` property
    returns ``_vocab_size`` (``megatron/core/tokenizers/text/libraries/null_tokenizer.py``; the
    same in 0.18.2 and 0.19.0; 0.17.1's returned ``vocab_size + 1``). The table's Megatron-LM
    commit has ``--null-tokenizer-eod-id``, which came with that tokenizer.

    ``--no-pad-vocab-size`` (``pad_vocab_size`` False): ``build_tokenizer`` then does not set
    ``padded_vocab_size`` (megatron-core 0.19.2, ``megatron/core/tokenizers/utils/
    build_tokenizer.py``). With ``--padded-vocab-size`` that changes nothing; without it the
    rows are the model builder's (``megatron/training/argument_utils.py`` pads ``--vocab-size``
    all the same), which the import cannot read: refused by name."""
    args, src = mp.args, mp.source
    if mp.take("--make-vocab-size-divisible-by"):
        mp.set("--make-vocab-size-divisible-by", "model.make_vocab_size_divisible_by",
               int_argument(args, "--make-vocab-size-divisible-by", src))
    tok = one_value(args, "--tokenizer-type", src) if mp.take("--tokenizer-type") else None
    vocab = int_argument(args, "--vocab-size", src) if mp.take("--vocab-size") else None
    if tok == "NullTokenizer":
        if vocab is None:
            raise MegatronArgsError(f"{src}: --tokenizer-type NullTokenizer needs --vocab-size")
        mp.set("--vocab-size", "model.vocab_size", vocab)  # its end-of-document id is vocab - 1
    elif tok in TOKENIZER_VOCAB:
        # Megatron-LM's build_tokenizer builds these from their files; --vocab-size is read by
        # the NullTokenizer and TikTokenizer only
        n = TOKENIZER_VOCAB[tok]
        if tok == LLAMA2_TOKENIZER:  # the --tokenizer-model file's pieces: any SentencePiece
            if mp.tokenizer_vocab_size is not None:
                n = mp.tokenizer_vocab_size
            else:
                mp.notes.append(("--tokenizer-type", f"vocabulary {n:,} assumed: Meta's Llama 2 "
                                 "tokenizer.model; Megatron-LM's Llama2Tokenizer counts the "
                                 "pieces of --tokenizer-model's file, so for another give the "
                                 "import --vocab-size N"))
        mp.set("--tokenizer-type", "model.vocab_size", n)
        if vocab is not None and vocab != n:
            mp.notes.append(("--vocab-size", f"{vocab:,} not used: --tokenizer-type {tok} has "
                             f"{n:,} tokens from its files, and Megatron-LM "
                             "reads --vocab-size only for the NullTokenizer and TikTokenizer"))
    elif vocab is not None:
        mp.set("--vocab-size", "model.vocab_size", vocab)
        mp.record("--tokenizer-type", "nothing: its vocabulary size is in its files; "
                  "model.vocab_size from --vocab-size")
    elif tok is not None:
        raise MegatronArgsError(f"{src}: --tokenizer-type {tok}: its vocabulary size is in its "
                                "files, not in the launch; add --vocab-size N to the arguments "
                                "(or give it to the import: --vocab-size N)")
    elif "--vocab-file" in args:  # Megatron's default tokenizer for a vocab file is GPT-2 BPE
        n = TOKENIZER_VOCAB["GPT2BPETokenizer"]
        mp.set("--vocab-file", "model.vocab_size", n)
        mp.notes.append(("--vocab-file", f"vocabulary {n:,} assumed: GPT-2 BPE, the tokenizer of "
                         "Megatron-LM's GPT examples that give only --vocab-file / --merge-file; "
                         "for another, add --vocab-size N to the launch or the import"))
    elif not mp.take("--padded-vocab-size"):
        raise MegatronArgsError(f"{src}: the vocabulary size is unknown: give --vocab-size or "
                                "--tokenizer-type")
    no_pad = [f for f in ("--no-pad-vocab-size", "--disable-pad-vocab-size") if mp.take(f)]
    if no_pad and "--padded-vocab-size" in args:
        mp.notes.append((no_pad[0], "no effect: --padded-vocab-size gives the rows (Megatron-LM's "
                         "build_tokenizer pads only without either)"))
    elif no_pad:
        mp.refuse(no_pad[0], "without --padded-vocab-size: Megatron-LM's build_tokenizer then "
                  "leaves padded_vocab_size unset (megatron-core 0.19.2, megatron/core/tokenizers/"
                  "utils/build_tokenizer.py) and the embedding's rows are whatever the model "
                  "builder makes of that (megatron/training/argument_utils.py pads --vocab-size "
                  "by --make-vocab-size-divisible-by all the same), which the import cannot read; "
                  "give --padded-vocab-size V with the rows you train with")
    if mp.take("--padded-vocab-size"):
        # build_tokenizer pads the tokenizer's size only when --padded-vocab-size is not given
        padded = int_argument(args, "--padded-vocab-size", src)
        mp.set("--padded-vocab-size", "model.vocab_size", padded)
        mp.set("--padded-vocab-size", "model.make_vocab_size_divisible_by", 1)
        mp.notes.append(("--padded-vocab-size", f"the embedding and output layer have {padded:,} "
                         "rows as given (Megatron-LM pads the tokenizer's size only without it)"))


def _position_table(mp: Mapper) -> None:
    """``--max-position-embeddings``: the learned position table's rows (GPTModel's
    ``max_sequence_length``), which the parameter count takes as ``seq_length``: listed as
    ignored where the two differ under learned positions, else it changes nothing."""
    args, src = mp.args, mp.source
    if "--max-position-embeddings" not in args:
        return
    rows = int_argument(args, "--max-position-embeddings", src)
    model = mp.values["model"]
    learned = model.get("position_embedding", MEGATRON_MODEL_DEFAULTS["position_embedding"]) \
        == "learned"
    if learned and rows != model.get("seq_length"):
        mp.take("--max-position-embeddings")
        mp.ignored.append(("--max-position-embeddings", f"{rows:,}: the learned position "
                           f"table's rows; the parameter count takes the sequence length's "
                           f"{model.get('seq_length'):,} ({abs(rows - model.get('seq_length')):,} "
                           "rows of h apart)"))


def _activation(mp: Mapper) -> None:
    """The MLP activation (one of SwiGLU, squared ReLU, quick-GEGLU timed as SwiGLU), its
    clamp and linear offset, and the softmax type."""
    args, src = mp.args, mp.source
    # model families (issue 11): refused by name while the fields are absent
    if mp.switch("--swiglu"):
        mp.set("--swiglu", "model.activation", "swiglu")
    if mp.switch("--squared-relu"):
        if "--swiglu" in args:
            raise MegatronArgsError(f"{src}: --squared-relu and --swiglu are both given (one "
                                    "MLP activation)")
        mp.set("--squared-relu", "model.activation", "squared_relu")
    if mp.switch("--quick-geglu"):
        other = "--swiglu" if "--swiglu" in args else "--squared-relu"
        if other in args:
            raise MegatronArgsError(f"{src}: --quick-geglu and {other} are both given (one "
                                    "MLP activation)")
        mp.set("--quick-geglu", "model.activation", "swiglu")
        mp.ignored.append(("--quick-geglu", "its gate x*sigmoid(1.702x) is timed as SwiGLU's "
                             "x*sigmoid(x): the same GEMMs and the same fused activation "
                             "kernel's bytes (model.activation swiglu)"))
    for flag, target in (("--activation-func-clamp-value", "model.activation_func_clamp_value"),
                         ("--glu-linear-offset", "model.glu_linear_offset"),
                         ("--hidden-dropout", "model.hidden_dropout"),
                         ("--attention-dropout", "model.attention_dropout")):
        if mp.take(flag):
            mp.set(flag, target, float_argument(args, flag, src))
    if mp.take("--softmax-type"):
        mp.set("--softmax-type", "model.softmax_type", one_value(args, "--softmax-type", src))
    _activation_fusion(mp)


def _activation_fusion(mp: Mapper) -> None:
    """``model.bias_activation_fusion`` from ``--no-bias-swiglu-fusion`` and
    ``--no-bias-gelu-fusion``, as Megatron-LM's ``core_transformer_config_from_args`` reads them
    (0.17.1 ``megatron/training/arguments.py``): with ``--swiglu`` the first, else (GeLU,
    squared ReLU, quick-GEGLU) the second; the other has no effect (listed as ignored).
    ``validate_args`` turns ``bias_gelu_fusion`` off under ``--disable-bias-linear``: a
    quick-GEGLU MLP (gated) then runs unfused too; a plain MLP without a bias runs its
    activation alone either way (the same bytes, timed alike), so it is left fused."""
    args = mp.args
    swiglu = "--swiglu" in args
    used, other = (("--no-bias-swiglu-fusion", "--no-bias-gelu-fusion") if swiglu
                   else ("--no-bias-gelu-fusion", "--no-bias-swiglu-fusion"))
    if mp.switch(used):
        mp.set(used, "model.bias_activation_fusion", False)
    elif ("--quick-geglu" in args and "--disable-bias-linear" in args):
        mp.set("--disable-bias-linear", "model.bias_activation_fusion", False)
        mp.notes.append(("--disable-bias-linear", "with --quick-geglu: Megatron-LM's "
                         "validate_args turns bias_gelu_fusion off without biases, so the gated "
                         "activation runs unfused (model.bias_activation_fusion false)"))
    if mp.switch(other):
        mp.ignored.append((other, "no effect: Megatron-LM reads --no-bias-swiglu-fusion with "
                           "--swiglu and --no-bias-gelu-fusion without it "
                           "(core_transformer_config_from_args)"))


def _attention_and_norms(mp: Mapper, h: int) -> None:
    """Query groups, norm, position embedding, biases, the attention kernel (noted), and
    SwiGLU's default MLP size."""
    args, src = mp.args, mp.source
    if mp.switch("--group-query-attention") or mp.take("--num-query-groups"):
        g = int_argument(args, "--num-query-groups", src) if "--num-query-groups" in args else None
        if "--group-query-attention" in args:
            if g is None:  # Megatron-LM's default --num-query-groups is 1
                g = 1
                mp.notes.append(("--group-query-attention", "without --num-query-groups: "
                                 "Megatron-LM's default of 1 query group, multi-query attention"))
            mp.set("--group-query-attention", "model.num_query_groups", g)
        else:  # core_transformer_config_from_args: num_query_groups None without the switch
            mp.notes.append(("--num-query-groups", f"{g} not used: without "
                             "--group-query-attention Megatron-LM builds multi-head attention "
                             "(one key/value head per attention head, as simulated); add "
                             f"--group-query-attention for {g} query groups"))
    for flag, target, mapping in (
            ("--normalization", "model.normalization", {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}),
            ("--position-embedding-type", "model.position_embedding",
             {"learned_absolute": "learned", "rope": "rope", "yarn": "rope"})):
        if mp.take(flag):
            v = one_value(args, flag, src)
            if v not in mapping:
                raise MegatronArgsError(f"{src}: {flag} {short_repr(v)} is not modelled (the simulator "
                                        f"models {', '.join(mapping)})")
            if v == "yarn":  # GPT-OSS: RoPE with YaRN's frequency scaling
                mp.ignored.append((flag, "yarn: RoPE whose frequencies YaRN rescales; the "
                                     "scaling changes the rotation's angles, not the work "
                                     "(model.position_embedding rope)"))
            if field_exists(target):
                mp.set(flag, target, mapping[v])
            elif v not in _DEFAULT_FAMILY[flag]:
                mp.set(flag, target, mapping[v])  # refused: the field is absent
    _legacy_positions(mp)
    _position_table(mp)
    if mp.switch("--untie-embeddings-and-output-weights"):
        mp.set("--untie-embeddings-and-output-weights", "model.tied_embeddings", False)
    if mp.switch("--disable-bias-linear"):
        mp.set("--disable-bias-linear", "model.add_bias_linear", False)
    if mp.switch("--add-qkv-bias"):
        mp.set("--add-qkv-bias", "model.add_qkv_bias", True)
    if mp.switch("--qk-layernorm"):
        mp.set("--qk-layernorm", "model.qk_layernorm", True)
    mp.take("--attention-backend")
    mp.switch("--use-flash-attn")
    kernel, flag, why = attention_kernel(args, src)
    mp.set(flag, "model.attention_kernel", kernel)
    impl = one_value(args, "--transformer-impl", src) if "--transformer-impl" in args else None
    if impl == "transformer_engine" or impl == "local" and flag == "--transformer-impl":
        # local: the unfused attention (set above); transformer_engine, the default: the layers
        # the attention backend and FP8 (plan.precision, --fp8-format) run in
        mp.record("--transformer-impl", "model.attention_kernel" if impl == "local" else
                  "Transformer Engine's layers: model.attention_kernel from the attention "
                  "arguments, plan.precision's FP8")
    if flag == "--transformer-impl":  # what picks Transformer Engine's attention is overruled
        for other in ("--attention-backend", "--use-flash-attn"):
            mp.record(other, "nothing: --transformer-impl local wins (model.attention_kernel "
                      "unfused)")
    mp.notes.append(("attention", why))
    if "--swiglu" in args and "--ffn-hidden-size" not in args and field_exists("model.activation"):
        mp.set("--swiglu", "model.ffn_hidden_size", swiglu_ffn_hidden_size(h))


def swiglu_ffn_hidden_size(hidden_size: int) -> int:
    """Megatron-LM's MLP size for ``--swiglu`` without ``--ffn-hidden-size`` (arguments.py,
    ``validate_args``): 2/3 of 4h, rounded down to a multiple of 64 (h = 2048: 5,440)."""
    return int((4 * hidden_size * 2 / 3) / 64) * 64


def _legacy_positions(mp: Mapper) -> None:
    """The legacy position switches. ``--use-rotary-position-embeddings`` is RoPE: Megatron-LM's
    ``validate_args`` ("Legacy RoPE arguments") sets ``position_embedding_type = 'rope'``; beside
    an explicit ``--position-embedding-type learned_absolute`` the launch contradicts itself and
    is refused. ``--no-position-embedding`` (``add_position_embedding`` False) drops the learned
    position table: with RoPE there is none to drop; without it the model has no positions at
    all (NoPE), which Megatron-LM refuses ("NoPE not supported") and vtrain does not model."""
    args, src = mp.args, mp.source
    if mp.switch("--use-rotary-position-embeddings"):
        if one_value(args, "--position-embedding-type", src) == "learned_absolute":
            mp.refuse("--use-rotary-position-embeddings", "contradicts --position-embedding-type "
                      "learned_absolute (Megatron-LM's validate_args makes the legacy switch "
                      "rope): give one of them")
        else:
            mp.set("--use-rotary-position-embeddings", "model.position_embedding", "rope")
    positions = mp.values["model"].get("position_embedding",
                                       MEGATRON_MODEL_DEFAULTS["position_embedding"])
    if mp.switch("--no-position-embedding") and positions != "rope":
        mp.refuse("--no-position-embedding", "without RoPE the model has no positions at all "
                  "(NoPE), which Megatron-LM refuses and vtrain does not model; a RoPE model "
                  "gives --position-embedding-type rope (or --use-rotary-position-embeddings)")


def _window(mp: Mapper) -> None:
    """Sliding-window attention: ``--window-size (left, right)`` and every N-th layer full."""
    args, src = mp.args, mp.source
    if mp.take("--window-size"):  # Megatron-Core: a (left, right) tuple, "(128, 0)" or "128,0"
        parts = " ".join(args["--window-size"]).strip("()[] ").replace(",", " ").split()
        try:
            left, right = (int(x) for x in parts)
        except ValueError:
            raise MegatronArgsError(f"{src}: --window-size {short_repr(' '.join(args['--window-size']))}: "
                                    "expected two integers (left, right)") from None
        if right != 0 and right != -1:
            mp.refuse("--window-size", f"a window of {right} tokens to the right (non-causal) "
                      "is not modelled")
        elif left >= 1:
            mp.set("--window-size", "model.window_size", left)
        elif left != -1:
            raise MegatronArgsError(f"{src}: --window-size left {left}: expected at least 1 "
                                    "(or -1, no window)")
    if mp.take("--window-attn-skip-freq"):
        raw = " ".join(args["--window-attn-skip-freq"])
        try:
            mp.set("--window-attn-skip-freq", "model.window_attn_skip_freq", int(raw))
        except ValueError:
            mp.refuse("--window-attn-skip-freq", f"the pattern {short_repr(raw)} is not modelled (an integer "
                      "N only: every N-th layer full)")


def _latent_attention(mp: Mapper) -> None:
    """Multi-latent attention (its ranks and head sizes) and multi-token prediction layers."""
    args, src = mp.args, mp.source
    mla_flags = ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
                 "--v-head-dim")
    if mp.switch("--multi-latent-attention"):
        mp.set("--multi-latent-attention", "model.multi_latent_attention", True)
        if "--kv-lora-rank" not in args:
            raise MegatronArgsError(f"{src}: --multi-latent-attention needs --kv-lora-rank (its "
                                    "default differs between Megatron-LM's arguments and "
                                    "Megatron-Core's MLATransformerConfig: give it)")
        for flag in mla_flags:
            if mp.take(flag):
                target = "model." + flag[2:].replace("-", "_")
                mp.set(flag, target, int_argument(args, flag, src))
    else:
        for flag in mla_flags:
            if mp.take(flag):
                mp.ignored.append((flag, "without --multi-latent-attention Megatron-LM does "
                                     "not read it"))
    if mp.take("--mtp-num-layers"):
        mp.set("--mtp-num-layers", "model.mtp_num_layers", int_argument(args, "--mtp-num-layers", src))


def map_model(mp: Mapper) -> tuple[int, int, int]:
    """Map the model's arguments into ``mp`` (Megatron-LM's order: an error names the first
    argument it meets); returns ``(L, h, s)``: layers, hidden size and sequence length.

    Raises
    ------
    MegatronArgsError
        A required argument missing or a value that is not valid; refusals are collected in
        ``mp.refused``.
    """
    L, h, s = _model_shape(mp)
    _vocabulary(mp)
    _activation(mp)
    _attention_and_norms(mp, h)
    if mp.take("--num-experts"):
        _moe_arguments(mp, L, mp.values["model"].get("ffn_hidden_size") or 4 * h)
    _window(mp)
    _latent_attention(mp)
    return L, h, s
