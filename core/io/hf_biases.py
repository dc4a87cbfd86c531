"""The linear biases of a Hugging Face config: which switch each architecture's modelling code
reads, the model fields a true value sets, and the one refusal of a bias no field gives
(:func:`check_biases`, :func:`bias_fields`; used by :mod:`core.io.hf_import`)."""

from __future__ import annotations

from typing import Any

from core.io.import_result import refusal
from core.plan.fields import ConfigError
from core.util.text import short_repr

__all__ = ["QKVO", "BIAS_SWITCHES", "UNMODELLED_BIAS_LAYERS", "READS_LM_HEAD_BIAS", "bias_switch",
           "unmodelled_bias", "bias_fields", "check_biases"]

QKVO = ("add_qkv_bias", "add_proj_bias")
#: The bias switches each architecture's modelling code reads (transformers 5.25.0's
#: ``modeling_*.py``): HF key -> the model fields a true value sets. ``attention_bias`` is
#: ``bias=`` of q_proj, k_proj, v_proj and o_proj (``model.add_qkv_bias`` and
#: ``model.add_proj_bias``) in Llama, Nemotron, Qwen3, Qwen3-MoE, OLMo 2, OLMo 3, Gemma 2,
#: Gemma 3 and Phi-3.5-MoE, of q/k/v_proj only in GLM-4.5 (o_proj ``bias=False``);
#: ``mlp_bias`` is ``bias=`` of gate_proj, up_proj and down_proj (Llama; Nemotron: up_proj and
#: down_proj), ``model.add_mlp_bias``. All of them on is ``model.add_bias_linear``
#: (:func:`bias_fields`). Every other architecture's q/k/v/o and MLP projections are built
#: with a fixed ``bias=`` (Qwen2's QKV: ``model.add_qkv_bias``), or with the switch on layers
#: no model field has a bias for (DeepSeek-V2/V3: ``attention_bias`` on q_a_proj,
#: kv_a_proj_with_mqa and o_proj, ``mlp_bias`` on the experts): a true value there is refused
#: (:func:`unmodelled_bias`). GPT-OSS's must be true (``model.add_bias_linear``).
BIAS_SWITCHES: dict[str, dict[str, tuple[str, ...]]] = {
    "LlamaForCausalLM": {"attention_bias": QKVO, "mlp_bias": ("add_mlp_bias",)},
    "NemotronForCausalLM": {"attention_bias": QKVO, "mlp_bias": ("add_mlp_bias",)},
    **{arch: {"attention_bias": QKVO} for arch in (
        "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM",
        "Gemma2ForCausalLM", "Gemma3ForCausalLM", "PhimoeForCausalLM")},
    "Glm4MoeForCausalLM": {"attention_bias": ("add_qkv_bias",)},
}
#: Where the modelling code reads a bias switch on layers no model field has a bias for.
UNMODELLED_BIAS_LAYERS: dict[tuple[str, str], str] = {
    ("DeepseekV2ForCausalLM", "attention_bias"): "q_a_proj, kv_a_proj_with_mqa and o_proj",
    ("DeepseekV3ForCausalLM", "attention_bias"): "q_a_proj, kv_a_proj_with_mqa and o_proj",
    ("DeepseekV2ForCausalLM", "mlp_bias"): "gate_proj, up_proj and down_proj of the dense "
    "layers and the experts",
}
#: Architectures whose modelling code reads ``lm_head_bias`` (``nn.Linear(h, V,
#: bias=lm_head_bias)``, Phi-3.5-MoE): there it is ``model.add_output_bias`` (:func:`bias_fields`),
#: elsewhere refused when on (:data:`REFUSED`: Phi-4-mini's key, which transformers' Phi3 does not read).
READS_LM_HEAD_BIAS = ("PhimoeForCausalLM",)
def bias_switch(cfg: dict[str, Any], key: str, where: str) -> bool:
    """A linear-bias switch of the config (``attention_bias``, ``mlp_bias``, ``lm_head_bias``), read
    one way for every architecture: true or false; absent or null is no bias (transformers passes
    the value to ``nn.Linear(..., bias=...)``, and torch's ``nn.Linear`` adds a bias only when
    ``bias`` is truthy: None adds none).

    Raises ConfigError for any other value (``"true"``, ``1``: torch would read ``"false"`` and
    ``1`` as a bias, a config that is not one we know), naming the key."""
    value = cfg.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise refusal(where, key, f"{short_repr(value)} must be true or false (null: no bias)")
    return value


def unmodelled_bias(where: str, key: str, value: Any, arch: str, why: str) -> ConfigError:
    """The one refusal of a bias the model fields cannot give exactly (the importer's wording for
    every such bias: ``attention_bias``, ``mlp_bias``, ``lm_head_bias``), naming the key."""
    return refusal(where, key, f"{short_repr(value)}: this bias is not modelled for {arch} "
                   f"({why})")


def bias_fields(cfg: dict[str, Any], arch: str, where: str) -> dict[str, bool]:
    """The bias model fields the config's switches set (:data:`BIAS_SWITCHES`; Phi-3.5-MoE's
    ``lm_head_bias``: ``model.add_output_bias``). Every bias is modelled exactly: ``h`` (or the
    projection's width) parameters per bias vector, counted with the weights (the parameters,
    gradients and optimizer states), and an add in a kernel that runs anyway (the GEMM's
    epilogue, the bias-dropout-add), as Megatron-Core's biases are. Q, K, V, O and the MLP's
    biases all on is ``model.add_bias_linear`` (Megatron-Core's linear biases: QKV, projection,
    fc1 and fc2), which Megatron-LM can express.

    Raises ConfigError for a switch that is not true, false or null (:func:`bias_switch`)."""
    out: dict[str, bool] = {}
    for key, targets in BIAS_SWITCHES.get(arch, {}).items():
        value = bias_switch(cfg, key, where)
        for target in targets:
            out[target] = out.get(target, False) or value
    if out and all(out.get(k) for k in (*QKVO, "add_mlp_bias")):
        out = {"add_bias_linear": True, "add_qkv_bias": False, "add_proj_bias": False,
               "add_mlp_bias": False}
    if arch in READS_LM_HEAD_BIAS:
        out["add_output_bias"] = bias_switch(cfg, "lm_head_bias", where)
    return out


def check_biases(cfg: dict[str, Any], arch: str, where: str) -> None:
    """Check the linear layers' bias switches: GPT-OSS must have them; ``attention_bias`` and
    ``mlp_bias`` are read where the architecture's modelling code reads them
    (:data:`BIAS_SWITCHES`, :func:`bias_fields`) and refused when true elsewhere
    (:func:`unmodelled_bias`).

    Raises ConfigError for one that is not modelled."""
    biased = arch == "GptOssForCausalLM"  # biases in attention, router and experts
    if biased and not bias_switch(cfg, "attention_bias", where):
        raise unmodelled_bias(where, "attention_bias", cfg.get("attention_bias"), arch,
                              "GPT-OSS without attention biases (its router and experts keep "
                              "theirs): model.add_bias_linear sets them all")
    for bias in ("attention_bias", "mlp_bias"):
        if bias in BIAS_SWITCHES.get(arch, {}) or (biased and bias == "attention_bias"):
            continue  # read by bias_fields
        if bias_switch(cfg, bias, where):
            layers = UNMODELLED_BIAS_LAYERS.get((arch, bias))
            raise unmodelled_bias(where, bias, cfg[bias], arch, (
                f"{arch}'s modelling code reads it on {layers}, whose biases no model field has"
                if layers else f"{arch}'s modelling code does not read it (its projections have "
                "a fixed bias=); a config that says otherwise is not one we know"))
