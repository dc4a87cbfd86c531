"""Hugging Face ``config.json`` files of dense decoders into sessions.

:func:`session_from_hf_config` reads the ``config.json`` of a
``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM`` or
``Qwen3ForCausalLM`` checkpoint into a :class:`~core.config.Session` with a
default plan (:func:`default_plan`). Every field of the file is one of:

* **used**: it fills a model field (:data:`USED`);
* **ignored**: it does not change the cost of training (:data:`IGNORED`, with
  the reason; RoPE's base and scaling, for example, change the rotation's
  angles, not the work), and it is listed in the result;
* **refused**: the simulator does not model what it asks for (a sliding
  attention window that is active, a head size other than ``h/a``, biases
  other than Qwen2's QKV bias, gated activations other than SiLU,
  quantization, an architecture we do not know); the error names the field.

A field that is in none of these lists is refused too: we cannot tell
whether it changes the model. Mixture-of-experts architectures
(``MixtralForCausalLM``, ``Qwen2MoeForCausalLM``, ``Qwen3MoeForCausalLM``,
DeepSeek's) are refused by name: mixture of experts is not modelled yet.

Model-family facts (from the ``transformers`` modelling code of each
architecture): all four have a gated SiLU MLP (``gate_proj``, ``up_proj``,
``down_proj``: SwiGLU), RMSNorm, RoPE and no linear biases except Qwen2's
QKV bias; Qwen3 adds an RMSNorm over each query and key head (QK-norm).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import ClusterConfig, ConfigError, CostConfig, FieldError, ModelConfig, ParallelPlan, Session

__all__ = ["DENSE_ARCHITECTURES", "MOE_ARCHITECTURES", "USED", "IGNORED", "HFImport",
           "session_from_hf_config", "read_hf_config", "default_plan"]

#: Dense decoder architectures we import, with the model fields their modelling code fixes.
DENSE_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {},
    "MistralForCausalLM": {},
    "Qwen2ForCausalLM": {"add_qkv_bias": True},
    "Qwen3ForCausalLM": {"qk_layernorm": True},
}
#: Mixture-of-experts architectures, refused by name until MoE is modelled.
MOE_ARCHITECTURES = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                     "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DbrxForCausalLM",
                     "JambaForCausalLM", "OlmoeForCausalLM", "PhimoeForCausalLM",
                     "GraniteMoeForCausalLM", "Llama4ForCausalLM", "Llama4ForConditionalGeneration")
#: Fields that name experts: a config with one of them is a mixture of experts.
_MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
               "moe_intermediate_size")

#: Fields that fill the model (HF name -> what it sets).
USED: dict[str, str] = {
    "architectures": "the model family",
    "num_hidden_layers": "model.num_layers",
    "hidden_size": "model.hidden_size",
    "num_attention_heads": "model.num_attention_heads",
    "num_key_value_heads": "model.num_query_groups",
    "intermediate_size": "model.ffn_hidden_size",
    "vocab_size": "model.vocab_size",
    "max_position_embeddings": "model.seq_length (unless --seq-length)",
    "tie_word_embeddings": "model.tied_embeddings",
    "hidden_act": "model.activation (silu: SwiGLU)",
    "head_dim": "model.kv_channels (when it is not hidden_size / num_attention_heads)",
    "attention_bias": "checked: must be false",
    "mlp_bias": "checked: must be false",
    "sliding_window": "checked: inactive or at least the sequence length",
    "use_sliding_window": "checked: must be false",
    "quantization_config": "checked: must be absent",
}
#: Fields that do not change the cost of training, with the reason.
IGNORED: dict[str, str] = {
    "_name_or_path": "a name", "model_type": "a name (the architecture decides)",
    "transformers_version": "a version", "torch_dtype": "storage type (the plan sets the "
    "training precision)", "dtype": "storage type (the plan sets the training precision)",
    "bos_token_id": "a token id", "eos_token_id": "a token id", "pad_token_id": "a token id",
    "initializer_range": "initialization", "rms_norm_eps": "a constant of RMSNorm",
    "rope_theta": "RoPE's base changes the angles, not the work",
    "rope_scaling": "RoPE scaling changes the angles, not the work",
    "partial_rotary_factor": "RoPE's width on a head changes only a memory-bound kernel's size",
    "use_cache": "inference only", "pretraining_tp": "Meta's tensor-parallel layout at "
    "pre-training: same result, same GEMMs", "attention_dropout": "dropout rate (kernels "
    "run either way)", "max_window_layers": "used only with use_sliding_window",
    "layer_types": "all full attention (checked with the sliding window)",
    "output_attentions": "inference only", "output_hidden_states": "inference only",
    "return_dict": "inference only", "auto_map": "code location", "bias": "see attention_bias",
    "tokenizer_class": "a name", "model_name": "a name",
}

_HEADLINE = "mixture of experts is not modelled yet"


@dataclass
class HFImport:
    """Result of :func:`session_from_hf_config`: the session, the architecture and the fields
    that were ignored (name -> reason)."""

    session: Session
    architecture: str
    ignored: dict[str, str] = field(default_factory=dict)


def _refuse(where: str, field_name: str, message: str) -> ConfigError:
    return ConfigError([FieldError(f"{where}: {field_name}", message)])


def _int(cfg: dict[str, Any], name: str, where: str, required: bool = True) -> int | None:
    v = cfg.get(name)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        if name not in cfg:
            raise _refuse(where, name, "missing (a positive integer is needed)")
        raise _refuse(where, name, f"{v!r} must be a positive integer")
    return v


def default_plan(model: ModelConfig) -> ParallelPlan:
    """The plan an imported model starts with: one 8-GPU node, tensor parallel ``t`` = the
    largest of 8, 4, 2, 1 that divides the heads, the query groups and the MLP size, data
    parallel over the rest of the node (``d = 8/t``), no pipeline, ``b`` = 1, ``B`` = 8*d
    sequences, 1F1B, full recomputation, bf16. Change it in the editor or the sweep."""
    t = next(x for x in (8, 4, 2, 1) if model.num_attention_heads % x == 0
             and model.query_groups % x == 0 and model.ffn % x == 0)
    d = 8 // t
    return ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=d, micro_batch_size=1,
                        global_batch_size=8 * d, schedule="1f1b", recompute="full", precision="bf16")


def session_from_hf_config(cfg: Any, where: str = "config.json", *,
                           seq_length: int | None = None, name: str | None = None) -> HFImport:
    """A session from a parsed Hugging Face ``config.json`` (see the module doc).

    Parameters
    ----------
    cfg : dict
        The parsed file.
    where : str
        The file's name, for messages.
    seq_length : int, optional
        Sequence length to train at; default the config's ``max_position_embeddings``.
    name : str, optional
        Model name when the config has no ``_name_or_path``; default the architecture's.

    Raises
    ------
    ConfigError
        Not a JSON object; a mixture-of-experts or unknown architecture; a field that is
        refused (named in the message); a missing or bad size; or a model that breaks the
        session rules (:func:`core.config.validate`).
    """
    if not isinstance(cfg, dict):
        raise ConfigError([FieldError(where, "must be a JSON object (a Hugging Face config.json)")])
    archs = cfg.get("architectures")
    if not (isinstance(archs, list) and len(archs) == 1 and isinstance(archs[0], str)):
        raise _refuse(where, "architectures", f"{archs!r} must be a list of one architecture name; "
                      f"supported: {', '.join(DENSE_ARCHITECTURES)}")
    arch = archs[0]
    moe_fields = [f for f in _MOE_FIELDS if cfg.get(f)]
    if arch in MOE_ARCHITECTURES or "moe" in arch.lower() or moe_fields:
        what = f"{arch!r}" + (f" ({', '.join(moe_fields)})" if moe_fields else "")
        raise _refuse(where, "architectures", f"{what}: {_HEADLINE}")
    if arch not in DENSE_ARCHITECTURES:
        raise _refuse(where, "architectures", f"{arch!r} is not supported; supported: "
                      f"{', '.join(DENSE_ARCHITECTURES)}")
    unknown = sorted(k for k in cfg if k not in USED and k not in IGNORED)
    if unknown:
        raise _refuse(where, unknown[0], "is not known to the importer, so we cannot tell whether "
                      "it changes the model; remove it if it does not" +
                      (f" (also: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""))
    if cfg.get("quantization_config") is not None:
        raise _refuse(where, "quantization_config", "quantized weights are not modelled")
    layers = _int(cfg, "num_hidden_layers", where)
    h = _int(cfg, "hidden_size", where)
    a = _int(cfg, "num_attention_heads", where)
    g = _int(cfg, "num_key_value_heads", where, required=False)
    f = _int(cfg, "intermediate_size", where)
    vocab = _int(cfg, "vocab_size", where)
    max_pos = _int(cfg, "max_position_embeddings", where, required=seq_length is None)
    s = seq_length if seq_length is not None else max_pos
    head_dim = _int(cfg, "head_dim", where, required=False)
    if head_dim is None and h % a:
        raise _refuse(where, "hidden_size", f"{h} is not divisible by num_attention_heads={a} and "
                      "the config gives no head_dim")
    kv_channels = head_dim if head_dim is not None and head_dim * a != h else None
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise _refuse(where, "hidden_act", f"{act!r}: only SiLU-gated MLPs (SwiGLU) are modelled "
                      "for this architecture")
    for bias in ("attention_bias", "mlp_bias"):
        if cfg.get(bias) not in (None, False):
            raise _refuse(where, bias, f"{cfg[bias]!r}: biases in the attention and MLP linear "
                          "layers are not modelled for this architecture (only Qwen2's QKV bias)")
    if cfg.get("use_sliding_window") not in (None, False):
        raise _refuse(where, "use_sliding_window", "sliding-window attention is not modelled")
    window = cfg.get("sliding_window")
    if window is not None and arch == "MistralForCausalLM":
        if isinstance(window, bool) or not isinstance(window, int) or window < s:
            raise _refuse(where, "sliding_window", f"{window!r} is shorter than the sequence length "
                          f"{s}: sliding-window attention is not modelled")
    types = cfg.get("layer_types")
    if types is not None and any(x != "full_attention" for x in types):
        raise _refuse(where, "layer_types", "layers other than full_attention (sliding windows) "
                      "are not modelled")
    tied = cfg.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise _refuse(where, "tie_word_embeddings", f"{tied!r} must be true or false")
    fixed = dict(DENSE_ARCHITECTURES[arch])
    name = (str(cfg.get("_name_or_path") or "").rstrip("/").split("/")[-1] or name
            or arch.replace("ForCausalLM", ""))
    model = ModelConfig(name=name[:200], num_layers=layers, hidden_size=h, num_attention_heads=a,
                        ffn_hidden_size=f, seq_length=s, vocab_size=vocab,
                        num_query_groups=g if g is not None and g != a else None,
                        kv_channels=kv_channels,
                        activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                        tied_embeddings=tied, add_bias_linear=False, attention_kernel="flash",
                        **fixed)
    ignored = {k: IGNORED[k] for k in cfg if k in IGNORED}
    if window is not None:
        ignored["sliding_window"] = (f"{window}: not shorter than the sequence length"
                                     if arch == "MistralForCausalLM" else
                                     "inactive (use_sliding_window is false)")
    session = Session(model=model, plan=default_plan(model), cluster=ClusterConfig(),
                      cost=CostConfig())
    session.notes = f"Imported from the Hugging Face config {where} ({arch})."
    from .config import rename_field, validate
    errs = [rename_field(e, _HF_NAMES) for e in validate(session)]  # types and bounds too
    if errs:  # named by the config's own keys
        raise ConfigError([FieldError(f"{where}: {e.field}", e.message) for e in errs])
    return HFImport(session, arch, ignored)


#: Session field -> the Hugging Face key it comes from (for error messages).
_HF_NAMES = {"model.num_layers": "num_hidden_layers", "model.hidden_size": "hidden_size",
             "model.num_attention_heads": "num_attention_heads",
             "model.num_query_groups": "num_key_value_heads",
             "model.ffn_hidden_size": "intermediate_size", "model.vocab_size": "vocab_size",
             "model.seq_length": "max_position_embeddings", "model.kv_channels": "head_dim"}


def read_hf_config(path: str | Path, *, seq_length: int | None = None) -> HFImport:
    """Read a Hugging Face ``config.json`` file (see :func:`session_from_hf_config`).

    Raises
    ------
    core.session.SessionFileError
        The file cannot be read or is not JSON.
    ConfigError
        The config is refused (the message names the file and the field).
    """
    from .session import read_json
    path = Path(path)
    raw = read_json(path)
    folder = path.resolve().parent.name if path.name == "config.json" else path.stem
    return session_from_hf_config(raw, path.name, seq_length=seq_length, name=folder or None)
