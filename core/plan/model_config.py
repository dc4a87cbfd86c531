"""The model record, :class:`ModelConfig` (a decoder-only transformer as Megatron-LM builds
it), its enumerations, and the helpers that build one from named fields.

A new model field (and its unit, help and bounds) goes here; its formulas go to
:mod:`core.model.model_math`, its rules to :mod:`core.plan.model_rules`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from core.plan.fields import BOUNDS, described_field

__all__ = ["ACTIVATIONS", "MODEL_FAMILIES", "DENSE_ONLY_FAMILIES", "SOFTMAX_TYPES", "NORMALIZATIONS", "POSITION_EMBEDDINGS",
           "ATTENTION_KERNELS", "ModelConfig", "GPT_SHAPE_FIELDS", "model_from_fields",
           "missing_required", "padded_vocab_size"]


#: MLP activations: GeLU (two ffn matrices) or SwiGLU (gated: three ffn matrices, Shazeer 2020);
#: GeGLU is gated with a tanh-approximated GeLU (Gemma).
ACTIVATIONS = ("gelu", "swiglu", "squared_relu", "geglu")
#: Model families, the names ``model.family`` takes, with what each is (shown in the choice
#: list). The plan holds the names so that it validates a session without the model layer; each
#: is registered with its formulas by one module of ``core/model/families/``
#: (:func:`core.model.spec.register_family` refuses a name not listed here, and a test keeps the
#: two equal). A new family is one entry here.
MODEL_FAMILIES: dict[str, str] = {
    "dense": "Megatron-Core's GPT layer: GPT, Llama, MoE, MLA, MTP, GPT-OSS",
    "gemma2": "norms after attention and MLP too, embedding scaled by sqrt(h), attention "
              "scores and output logits soft-capped",
    "gemma3": "gemma2 without soft-capping",
}

#: Families whose models are dense transformers only: experts, multi-head latent attention and
#: multi-token prediction are refused with them (the Gemma reports have none;
#: :class:`core.model.spec.ModelFamily` ``dense_only``, kept equal by a test).
DENSE_ONLY_FAMILIES = frozenset({"gemma2", "gemma3"})


#: Attention softmax types (Megatron-Core ``--softmax-type``, ``TransformerConfig.softmax_type``):
#: the plain softmax; "off-by-one" adds a fixed zero logit to every row's denominator (Miller 2023,
#: "Attention is off by one"; a buffer, no parameters); "learnable" adds one learned logit per
#: head (attention sinks, GPT-OSS: ``a`` parameters per layer, ``softmax_offset``).
SOFTMAX_TYPES = ("vanilla", "off-by-one", "learnable")


#: Layer normalizations: LayerNorm (weight and bias) or RMSNorm (weight only, Zhang & Sennrich 2019).
NORMALIZATIONS = ("layernorm", "rmsnorm")


#: Position embeddings: a learned (s, h) table or rotary embeddings (RoPE, Su et al. 2021; no
#: parameters).
POSITION_EMBEDDINGS = ("learned", "rope")


#: Attention kernels: Megatron's unfused path (baddbmm, softmax, dropout, bmm; keeps the s*s
#: scores) or FlashAttention (Dao 2023; no s*s tensor kept).
ATTENTION_KERNELS = ("unfused", "flash")


@dataclass
class ModelConfig:
    """A dense decoder-only transformer as Megatron-LM / Megatron-Core builds it.

    The defaults are Megatron-LM's GPT (full multi-head attention, GeLU MLP,
    LayerNorm, learned positions, biases, word embedding tied with the output
    layer, unfused attention); the family fields describe Llama-style models
    (grouped-query attention, SwiGLU, RMSNorm, RoPE, no biases, untied output
    layer, FlashAttention). Their formulas live in :mod:`core.model.model_math`.

    Every field is ``required`` in a session file (the defaults serve code that builds a
    GPT model; a file that leaves a field out is refused, never filled with GPT's value),
    but for the first release's GPT-shape files (:data:`GPT_SHAPE_FIELDS`), and but ``family``
    and ``make_vocab_size_divisible_by`` (added later: a file without them describes a
    ``dense`` model padding its vocabulary as Megatron-LM does by default, to ``128*t``).
    """

    name: str = described_field("GPT-3 175B", "", "Display name of the model", required=True)
    num_layers: int = described_field(96, "", "Number of transformer layers L (--num-layers)",
                         bounds=BOUNDS["layers"], required=True)
    hidden_size: int = described_field(12288, "", "Hidden size h (--hidden-size)", bounds=BOUNDS["hidden"],
                          required=True)
    num_attention_heads: int = described_field(96, "", "Attention heads a (--num-attention-heads)",
                                  bounds=BOUNDS["heads"], required=True)
    ffn_hidden_size: int | None = described_field(
        None, "", "MLP hidden size (--ffn-hidden-size); empty (null) means 4*h",
        bounds=BOUNDS["ffn"], required=True)
    seq_length: int = described_field(2048, "tokens", "Sequence length s (--seq-length)", bounds=BOUNDS["seq"],
                         required=True)
    vocab_size: int = described_field(50257, "tokens", "Vocabulary size V before Megatron's padding",
                         bounds=BOUNDS["vocab"], required=True)
    make_vocab_size_divisible_by: int = described_field(
        128, "", "Megatron pads the vocabulary to a multiple of this times the tensor-parallel "
        "size t (--make-vocab-size-divisible-by; default 128; DeepSeek-V3's launches give 3232, "
        "129280 = 3232*40: no padding at t = 1, 2, 4, 8, where 128 pads to 129536 at t=4 and "
        "130048 at t=8). Not required: files written before it pad to 128*t",
        bounds=BOUNDS["vocab_divisor"])
    num_query_groups: int | None = described_field(
        None, "", "Query groups g of grouped-query attention (--num-query-groups; 1 is multi-query "
        "attention); empty means one per head (multi-head attention)", min=1,
        bounds=BOUNDS["heads"], required=True)
    activation: str = described_field("gelu", "", "MLP activation: gelu (two ffn matrices), swiglu (gated, "
                         "three ffn matrices; --swiglu) or squared_relu (relu(x)^2, two ffn "
                         "matrices, Nemotron-4; --squared-relu) or geglu (gated, tanh-GeLU gate; Gemma)",
                         choices=ACTIVATIONS,
                         required=True)
    normalization: str = described_field("layernorm", "", "Normalization: layernorm or rmsnorm (no bias; "
                            "--normalization RMSNorm)", choices=NORMALIZATIONS, required=True)
    position_embedding: str = described_field("learned", "", "Position embedding: learned (an s*h table) or "
                                 "rope (rotary, no parameters; --position-embedding-type rope)",
                                 choices=POSITION_EMBEDDINGS, required=True)
    tied_embeddings: bool = described_field(True, "", "Output layer shares the word embedding's weights "
                               "(false: --untie-embeddings-and-output-weights)", required=True)
    add_bias_linear: bool = described_field(True, "", "Biases in the linear layers (false: "
                               "--disable-bias-linear)", required=True)
    add_qkv_bias: bool = described_field(False, "", "Bias in the QKV projection even without the other "
                            "linear biases (--add-qkv-bias, Qwen2)", required=True)
    add_proj_bias: bool = described_field(False, "", "Bias on the attention's output projection "
                             "(linear_proj, h parameters per layer, replicated over t) without "
                             "the other linear biases: Hugging Face's attention_bias on o_proj "
                             "(Llama, Phi-3.5-MoE); no Megatron-LM argument sets it alone. Not "
                             "required: files written before it have none", required=False)
    add_mlp_bias: bool = described_field(False, "", "Biases on the dense MLP's fc1 and fc2 without "
                            "the other linear biases: Hugging Face's mlp_bias (Llama); no "
                            "Megatron-LM argument sets it alone; not with experts. Not required: files "
                            "written before it have none", required=False)
    add_output_bias: bool = described_field(False, "", "Bias on the output layer (V parameters, "
                               "split over t with the vocabulary): Hugging Face's lm_head_bias "
                               "(Phi-3.5-MoE); Megatron-LM's output layer has none. Not required: files "
                               "written before it have none", required=False)
    qk_layernorm: bool = described_field(False, "", "Normalize each query and key head before the scores "
                            "(QK-norm, --qk-layernorm; Qwen3), with the model's normalization",
                            required=True)
    attention_kernel: str = described_field("unfused", "", "Attention kernel: unfused (Megatron's baddbmm, "
                               "softmax, bmm; keeps the s*s scores) or flash (FlashAttention, "
                               "no s*s activation memory; --use-flash-attn)",
                               choices=ATTENTION_KERNELS, required=True)
    kv_channels: int | None = described_field(
        None, "", "Attention head size (--kv-channels); empty means h/a. Q is a*kv_channels wide, "
        "K and V g*kv_channels each", bounds=BOUNDS["hidden"], required=True)
    num_experts: int | None = described_field(
        None, "", "Experts per MoE layer (--num-experts); empty means a dense model",
        bounds=BOUNDS["experts"], required=True)
    moe_top_k: int = described_field(2, "", "Experts each token is routed to (--moe-router-topk)",
                        bounds=BOUNDS["experts"], required=True)
    moe_ffn_hidden_size: int | None = described_field(
        None, "", "Hidden size of each expert's MLP (--moe-ffn-hidden-size); empty means "
        "ffn_hidden_size", bounds=BOUNDS["ffn"], required=True)
    num_shared_experts: int = described_field(
        0, "", "Shared experts every token passes through, each moe_ffn_hidden_size wide "
        "(Megatron: --moe-shared-expert-intermediate-size = n * moe_ffn_hidden_size)",
        bounds=BOUNDS["shared_experts"], required=True)
    moe_layer_frequency: int = described_field(1, "layers", "Every k-th layer is an MoE layer (--moe-layer-freq "
                                  "k); the others are dense", bounds=BOUNDS["layers"],
                                  required=True)
    moe_first_dense_layers: int = described_field(
        0, "layers", "The first layers are dense whatever the frequency (DeepSeek's "
        "first_k_dense_replace; Megatron: a --moe-layer-freq pattern)",
        bounds=BOUNDS["dense_layers"], required=True)
    moe_router_num_groups: int | None = described_field(
        None, "", "Node-limited routing: the experts split into this many groups (Megatron-Core "
        "--moe-router-num-groups; DeepSeek-V3's n_group 8); empty means none", short="groups",
        min=1, bounds=BOUNDS["experts"], required=True)
    moe_router_group_topk: int | None = described_field(
        None, "", "Node-limited routing: the groups each token may reach (Megatron-Core "
        "--moe-router-group-topk; DeepSeek-V3's topk_group 4)", short="group_topk", min=1,
        bounds=BOUNDS["experts"], required=True)
    multi_latent_attention: bool = described_field(
        False, "", "Multi-head latent attention (DeepSeek-V2/V3, --multi-latent-attention; "
        "Megatron-Core MLASelfAttention): queries and keys/values pass through low-rank latents "
        "(q_lora_rank, kv_lora_rank); heads of qk_head_dim + qk_pos_emb_head_dim channels for the "
        "scores and v_head_dim for the values. With qk_layernorm the latents are normalized "
        "(Megatron's q_layernorm / kv_layernorm). Needs attention_kernel flash", required=True)
    q_lora_rank: int | None = described_field(
        None, "", "With MLA: rank of the query latent (--q-lora-rank; DeepSeek-V3 1536); empty "
        "means no query compression (one h -> a*(qk_head_dim + qk_pos_emb_head_dim) projection)",
        short="q_lora", bounds=BOUNDS["latent"], required=True)
    kv_lora_rank: int = described_field(512, "", "With MLA: rank of the key/value latent (--kv-lora-rank)",
                           short="kv_lora", bounds=BOUNDS["latent"], required=True)
    qk_head_dim: int = described_field(128, "", "With MLA: channels of each query/key head without the "
                          "rotary part (--qk-head-dim; DeepSeek's qk_nope_head_dim)",
                          bounds=BOUNDS["mla_head"], required=True)
    qk_pos_emb_head_dim: int = described_field(64, "", "With MLA: rotary channels of each query/key head, "
                                  "the key's shared by all heads (--qk-pos-emb-head-dim; "
                                  "DeepSeek's qk_rope_head_dim)", bounds=BOUNDS["mla_head"],
                                  required=True)
    v_head_dim: int = described_field(128, "", "With MLA: channels of each value head (--v-head-dim); the "
                         "output projection's input is a*v_head_dim wide",
                         bounds=BOUNDS["mla_head"], required=True)
    mtp_num_layers: int = described_field(0, "layers", "Multi-token prediction layers on the last pipeline "
                             "stage (--mtp-num-layers; DeepSeek-V3: 1): each embeds the tokens "
                             "shifted once more, projects them with the previous hidden state "
                             "(eh_proj, 2h -> h), runs one transformer layer like the last one "
                             "and the shared output layer with its own loss",
                             bounds=BOUNDS["mtp_layers"], required=True)
    window_size: int | None = described_field(
        None, "tokens", "Sliding-window attention: each query attends to itself and the window_size "
        "tokens before it (Megatron-Core --window-size (w, 0), causal); empty means full causal "
        "attention", short="window", min=1, bounds=BOUNDS["seq"], required=True)
    window_attn_skip_freq: int | None = described_field(
        None, "layers", "With a window: every N-th layer (1-based, layer % N == 0) keeps full "
        "attention, the others are windowed (Megatron-Core --window-attn-skip-freq N; GPT-OSS: "
        "2); empty means every layer is windowed", short="window_skip", min=1,
        bounds=BOUNDS["layers"], required=True)
    softmax_type: str = described_field(
        "vanilla", "", "Attention softmax (Megatron-Core --softmax-type): vanilla; off-by-one "
        "(a fixed zero logit in every row's denominator, no parameters); learnable (attention "
        "sinks: one learned logit per head in the denominator, a parameters per layer; GPT-OSS). "
        "The extra logit per row is negligible work inside the attention kernel",
        choices=SOFTMAX_TYPES, short="softmax", required=True)
    activation_func_clamp_value: float | None = described_field(
        None, "", "Gated MLP (swiglu): clamp the gate to at most this and the linear half to "
        "-this..this before the activation (Megatron-Core --activation-func-clamp-value; "
        "GPT-OSS: 7); element-wise inside the fused activation kernel, no time of its own; "
        "empty means no clamp", short="clamp", bounds=BOUNDS["clamp"], required=True)
    glu_linear_offset: float = described_field(
        0.0, "", "Gated MLP (swiglu): activation(gate) * (linear + this) (Megatron-Core "
        "--glu-linear-offset; GPT-OSS: 1); element-wise inside the fused activation kernel, "
        "no time of its own", short="glu_offset", min=-1e6, bounds=BOUNDS["glu_offset"],
        required=True)
    bias_activation_fusion: bool = described_field(
        True, "", "The MLP's bias add and activation in one fused kernel (Megatron-Core "
        "TransformerConfig.bias_activation_fusion; false: --no-bias-swiglu-fusion with swiglu, "
        "--no-bias-gelu-fusion otherwise; torchtitan without compile). Unfused, a gated MLP "
        "runs chunk, silu and mul in PyTorch and keeps silu's output and the up half too: 8 f "
        "bytes per token, not 6 (BF16); a plain MLP keeps the same bytes either way. Not with "
        "experts, a clamp or a linear offset. Not required: files written before it fuse",
        short="act_fusion")
    hidden_dropout: float = described_field(
        0.1, "", "Dropout probability after the attention and MLP blocks (Megatron-LM "
        "--hidden-dropout, default 0.1; Llama-family recipes 0). With 0 no dropout mask is "
        "kept (PyTorch's dropout returns its input at p = 0). Not required: files written "
        "before it count the masks, Megatron's default", short="hidden_dropout", max=0.999,
        bounds=BOUNDS["dropout"])
    attention_dropout: float = described_field(
        0.1, "", "Dropout probability on the attention probabilities (Megatron-LM "
        "--attention-dropout, default 0.1; Llama-family recipes 0). Only the unfused path "
        "keeps its s x s mask. Not required: files written before it count the mask",
        short="attention_dropout", max=0.999, bounds=BOUNDS["dropout"])
    family: str = described_field("dense", "", "Model family: the layer's components besides the fields "
                     "above (" + "; ".join(f"{k}: {v}" for k, v in MODEL_FAMILIES.items())
                     + "). Not required: files written before it describe dense models",
                     choices=MODEL_FAMILIES, choice_notes=MODEL_FAMILIES)

    @property
    def ffn(self) -> int:
        """MLP hidden size, ``4*h`` when :attr:`ffn_hidden_size` is unset."""
        return self.ffn_hidden_size if self.ffn_hidden_size else 4 * self.hidden_size

    @property
    def query_groups(self) -> int:
        """Query groups ``g``: :attr:`num_query_groups`, or ``a`` when unset."""
        return self.num_query_groups if self.num_query_groups else self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """Attention head size: :attr:`kv_channels`, or ``h/a`` when unset (Megatron's
        ``--kv-channels`` default); with multi-head latent attention the query/key head size
        ``qk_head_dim + qk_pos_emb_head_dim`` (validation keeps ``kv_channels`` equal to it)."""
        if self.kv_channels:
            return self.kv_channels
        if self.multi_latent_attention is True:
            return self.qk_head_dim + self.qk_pos_emb_head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        """Whether the model has mixture-of-experts layers (``num_experts`` set)."""
        return bool(self.num_experts)


#: The model fields of the first release's session files, written before the model families
#: existed: a model section that gives only these (all but ``ffn_hidden_size``, which may be
#: left out: 4h) describes a GPT model and takes the GPT values of the other fields (the
#: defaults of :class:`ModelConfig`). Any other model section gives every model field.
GPT_SHAPE_FIELDS = ("name", "num_layers", "hidden_size", "num_attention_heads",
                    "ffn_hidden_size", "seq_length", "vocab_size")


def model_from_fields(values: dict[str, Any]) -> ModelConfig:
    """A :class:`ModelConfig` from ``values``, which name every required model field: a reader
    states each one from its input (or, for a GPT-only format, from :data:`GPT_FAMILY`), so no
    field takes GPT's default by omission (``family``, not required, defaults to ``dense``).

    Raises
    ------
    TypeError
        ``values`` lacks a model field or names one that does not exist (a reader's bug,
        not a user's input error).
    """
    names = [f.name for f in dataclasses.fields(ModelConfig)]
    missing = [f.name for f in dataclasses.fields(ModelConfig)  # a field not required (family)
               if f.name not in values and f.metadata.get("required")]  # takes its default
    unknown = sorted(set(values) - set(names))
    if missing or unknown:
        raise TypeError(f"model_from_fields: missing {missing}, unknown {unknown}")
    return ModelConfig(**values)


def missing_required(cls: type, data: dict[str, Any]) -> list[str]:
    """The fields of dataclass ``cls`` that a session file's section ``data`` must give and
    lacks, in field order: those whose metadata says ``required``; for :class:`ModelConfig`
    a section of only :data:`GPT_SHAPE_FIELDS` (a first-release file: a GPT model) needs
    those but ``ffn_hidden_size``."""
    names = [f.name for f in dataclasses.fields(cls) if f.metadata.get("required")]
    if cls is ModelConfig and set(data) <= set(GPT_SHAPE_FIELDS):
        names = [n for n in GPT_SHAPE_FIELDS if n != "ffn_hidden_size"]
    return [n for n in names if n not in data]


def padded_vocab_size(vocab_size: int, tensor_parallel: int, divisible_by: int = 128) -> int:
    """Vocabulary padded as Megatron-LM does (``--make-vocab-size-divisible-by``).

    The padded size is the smallest multiple of ``divisible_by * t`` that is
    at least ``vocab_size`` (Megatron-LM ``_vocab_size_with_padding``, megatron/training/
    tokenizer). Callers that have the model pass its
    :attr:`ModelConfig.make_vocab_size_divisible_by`; the default 128 is Megatron-LM's.
    """
    multiple = divisible_by * tensor_parallel
    return -(-vocab_size // multiple) * multiple

