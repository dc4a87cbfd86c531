"""Hugging Face ``config.json`` files of decoders into sessions.

:func:`session_from_hf_config` reads the ``config.json`` of a dense ``LlamaForCausalLM``,
``MistralForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``, ``NemotronForCausalLM``
(Nemotron-4), ``Phi3ForCausalLM``, ``Olmo2ForCausalLM``, ``Olmo3ForCausalLM``,
``Gemma2ForCausalLM`` or ``Gemma3ForCausalLM`` checkpoint, or of a mixture-of-experts
``MixtralForCausalLM``, ``Qwen2MoeForCausalLM``, ``Qwen3MoeForCausalLM``,
``DeepseekV2ForCausalLM``, ``DeepseekV3ForCausalLM``, ``GptOssForCausalLM``,
``Glm4MoeForCausalLM`` or ``PhimoeForCausalLM`` one, into a
:class:`~core.plan.session.Session` with a default plan
(:func:`default_plan`). Every field of the file is one of:

* **used**: it fills a model field (:data:`USED`);
* **ignored**: it does not change the cost of training (:data:`IGNORED`, with
  the reason; RoPE's base and scaling, for example, change the rotation's
  angles, not the work), and it is listed in the result;
* **refused**: the simulator does not model what it asks for (:data:`REFUSED`, each with
  what it would change and the values that switch it off, which are accepted and listed:
  Qwen2's ``use_sliding_window``, soft-capping, chunked attention, Mamba layers;
  also gated activations other than SiLU, quantization, an MoE layer pattern the session
  fields cannot express, an architecture we do not know); the error names the field.

A field that is in none of these lists is refused too: we cannot tell
whether it changes the model. A key the file leaves out takes its transformers configuration
class's default, as transformers does (:func:`core.io.hf_defaults.fill_class_defaults`,
``resources/hf_config_defaults.json``: MistralConfig's ``sliding_window`` 4096, Gemma2Config's
``head_dim`` 256 ...), noted in the result; a needed key whose class default the importer does
not know is refused by name. ``model_type`` must name the model ``architectures`` names
(transformers builds the class ``model_type``'s configuration maps to, not the saved
``architectures``): another model is refused, an alias noted (:func:`_model_type_agrees`).
Architectures with something the simulator
does not model are refused naming the field that has it and what it would change
(:data:`REFUSED_ARCHITECTURES`: Gemma 1, Llama 4, Nemotron-H;
Qwen3-Next's Gated DeltaNet layers, ``full_attention_interval``; DeepSeek-V3.2's sparse
attention, ``index_topk``; SmolLM3's RoPE-less layers, ``no_rope_layers``; the state-space
models and hybrids Falcon-H1, Jamba, Bamba, Granite 4, Mamba, Mamba-2, Falcon-Mamba, Kimi
Linear). Multimodal and other conditional-generation configs are refused by their structure
(:func:`_multimodal_refusal`: a ``vision_config`` or ``audio_config`` key, a nested language
model under ``text_config`` or ``llm_config``, an architecture ending in
``ForConditionalGeneration``: Gemma 3, Mistral 3, Llama 4, Qwen2-VL, Qwen2.5-VL, LLaVA,
Idefics3, InternVL), the message naming the key and saying how to plan the nested language model
alone, or what stops it.

Gemma 2 and Gemma 3 (``Gemma2ForCausalLM``, ``Gemma3ForCausalLM``; the text models) are the
``gemma2`` / ``gemma3`` model families (:mod:`core.model.families.gemma`): ``hidden_activation``
``gelu_pytorch_tanh`` is GeGLU (``model.activation`` geglu), the output layer is tied unless
``tie_word_embeddings`` says otherwise, sliding windows on every other layer (Gemma 2) or all
but every ``sliding_window_pattern``-th (Gemma 3), Gemma 2's ``attn_logit_softcapping`` and
``final_logit_softcapping`` must be set (modelled; their values do not change the work) and
Gemma 3's null, Gemma 3 has QK-norm; Gemma 3's ``_sliding_window_pattern`` (transformers
4.53+) must agree with the layers' pattern, ``use_bidirectional_attention`` must be off.

Also read: Phi-3, Phi-3.5 and Phi-4 (``Phi3ForCausalLM``: Llama's layer with fused ``qkv_proj``
and ``gate_up_proj``, a layout with the same GEMMs), OLMo 2 (``Olmo2ForCausalLM``: QK-norm over
the whole projections, modelled per head, :data:`_APPROXIMATED`), OLMo 3 (``Olmo3ForCausalLM``:
OLMo 2's layer with a sliding window on the layers ``layer_types`` names, by default all but every
4th: ``model.window_size``, ``window_attn_skip_freq`` 4), Qwen3-Coder's ``qkv_bias``
and ``use_qk_norm`` (must agree with the architecture), Nemotron's ``kv_channels`` (the head
size) and transformers 5's ``rope_parameters``.

DeepSeek-V2 and -V3 (``DeepseekV2ForCausalLM``, ``DeepseekV3ForCausalLM``; the
``transformers`` modelling code): multi-head latent attention (``q_lora_rank``,
null for no query compression, ``kv_lora_rank``, ``qk_nope_head_dim``,
``qk_rope_head_dim``, ``v_head_dim``; the latent RMSNorms ``q_a_layernorm`` and
``kv_a_layernorm`` are ``model.qk_layernorm``), ``n_routed_experts`` experts of
``moe_intermediate_size``, ``n_shared_experts`` shared experts of the same width,
dense first ``first_k_dense_replace`` layers and every ``moe_layer_freq``-th layer
MoE after them. Group-limited routing (``n_group``, ``topk_group`` under
``topk_method`` group_limited_greedy or noaux_tc) is ``model.moe_router_num_groups``
and ``moe_router_group_topk`` (the flex dispatcher's remote copies depend on them);
``topk_method`` and the sigmoid scores cost nothing extra here (ignored, with the
reason); DeepSeek-V3's multi-token prediction layers (``num_nextn_predict_layers``)
are ``model.mtp_num_layers`` (trained with the model); its published checkpoint's
``quantization_config`` (``quant_method: fp8``, block-scaled FP8 storage of the
weights) is ignored with that reason, any other quantization refused.
A config saved by transformers' own ``DeepseekV2Config`` / ``DeepseekV3Config`` also has
``head_dim`` (``qk_rope_head_dim``, not the head size), ``qk_head_dim`` (``qk_nope_head_dim +
qk_rope_head_dim``) and ``rope_interleave``: checked and ignored (:func:`core.io.hf_mla.mla_derived_keys`).

Sliding windows: ``layer_types`` (``sliding_attention`` / ``full_attention``
per layer) with ``sliding_window`` ``w`` gives ``model.window_size`` ``w`` and
the layers' pattern as Megatron-Core's ``--window-attn-skip-freq N`` (every
layer windowed but those with ``(i + 1) % N == 0``; a pattern that is not of
that form is refused); Mistral and Mixtral, without ``layer_types``, window
every layer when ``sliding_window`` is shorter than the sequence. Qwen2's
``use_sliding_window`` (windows from layer ``max_window_layers`` on) is refused.
``layer_types`` is read where the modelling code reads it (Gemma 2 and 3, GPT-OSS); on the
other architectures it must agree with what their code does (Mistral, Mixtral, Phi-3: every
layer windowed; Qwen2/Qwen3 without ``use_sliding_window`` and the architectures without a
window: none), else it is refused naming it (:mod:`core.io.hf_windows`). An entry other than
``sliding_attention`` / ``full_attention`` (Qwen3-Next's ``linear_attention``, a hybrid's
Mamba layers) is refused naming it.

Model-family facts (from the ``transformers`` modelling code of each
architecture): Nemotron-4 has an MLP of ``up_proj`` and ``down_proj`` with ``relu2``
(squared ReLU, not gated: ``model.activation`` squared_relu), LayerNorm (``LayerNorm1P``:
weight and bias) and RoPE on ``partial_rotary_factor`` of each head; the others have a gated SiLU MLP (``gate_proj``, ``up_proj``,
``down_proj``: SwiGLU; each expert of an MoE layer too), RMSNorm, RoPE and no
linear biases except Qwen2's (and Qwen2-MoE's) QKV bias and those ``attention_bias`` and
``mlp_bias`` switch on (:data:`core.io.hf_biases.BIAS_SWITCHES`: Q, K, V and O biases are ``model.add_qkv_bias``
and ``model.add_proj_bias``, the MLP's ``model.add_mlp_bias``, all of them
``model.add_bias_linear``; each bias vector counted, its add in a kernel that runs anyway; a
switch read on layers without a bias field, DeepSeek's, is refused); Qwen3 (and Qwen3-MoE)
adds an RMSNorm over each query and key head (QK-norm). ``head_dim``, when it
is not ``h/a``, is the head size (``model.kv_channels``). Mixture of experts:
Mixtral's experts are ``intermediate_size`` wide (``num_local_experts``,
``num_experts_per_tok``); Qwen2-MoE and Qwen3-MoE's are
``moe_intermediate_size`` wide (``num_experts``, ``num_experts_per_tok``), their
dense layers (``mlp_only_layers``) ``intermediate_size``, layer ``i`` has
experts when ``(i + 1) % decoder_sparse_step == 0`` and ``i`` is not in
``mlp_only_layers``; Qwen2-MoE adds one shared expert of
``shared_expert_intermediate_size`` (``num_shared_experts`` experts of
``moe_intermediate_size``, Megatron's ``--moe-shared-expert-intermediate-size``).

GLM-4.5, GLM-4.5-Air and GLM-4.6 (``Glm4MoeForCausalLM``, the ``transformers`` modelling code
``modeling_glm4_moe.py``; Megatron-Bridge has a GLM-4.5 bridge): a GQA decoder with heads of
``head_dim`` whose Q, K and V projections have biases when ``attention_bias`` (the output
projection never: ``model.add_qkv_bias``) and per-head QK-norm when ``use_qk_norm``
(``model.qk_layernorm``; GLM-4.5 yes, the Air no), both the config's switches
(:data:`core.io.hf_biases.BIAS_SWITCHES`, :data:`_CONFIG_SWITCHES`); RoPE on ``partial_rotary_factor`` of each head (ignored: the same
kernel bytes); ``n_routed_experts`` experts and ``n_shared_experts`` shared experts of
``moe_intermediate_size``, the first ``first_k_dense_replace`` layers dense
(``intermediate_size``), every later one MoE; a sigmoid router whose top-k choice adds
``e_score_correction_bias`` (DeepSeek-V3's ``noaux_tc``; no extra cost modelled);
``num_nextn_predict_layers`` multi-token prediction layers (``model.mtp_num_layers``).

GPT-OSS (``GptOssForCausalLM``, the ``transformers`` modelling code and Megatron-Bridge's
``GPTOSSProvider``): every layer has ``num_local_experts`` experts of ``intermediate_size``
(``num_experts_per_tok``; ``experts_per_token`` must agree); biases in Q, K, V and the output
projection (``attention_bias``, which must be true), in the router and in both expert
projections (``add_bias_linear``); one learned sink logit per head (``softmax_type``
learnable); the experts' gate is ``x sigmoid(1.702 x)`` on the gate clamped at
``swiglu_limit`` and multiplied by the linear half clamped to ``+-swiglu_limit`` plus one
(``activation_func_clamp_value``, ``glu_linear_offset`` 1; timed as SwiGLU, the same GEMMs and
fused kernel bytes); RoPE with YaRN scaling (the angles, not the work). Its released
checkpoints store the experts in MXFP4 (``quantization_config``, post-training quantization):
storage, not the training precision, which the plan sets.

Phi-3.5-MoE (``PhimoeForCausalLM``, ``modeling_phimoe.py``; the Hub file's own-code name
``PhiMoEForCausalLM`` is read as it, with a note): Mixtral's experts (``num_local_experts`` SwiGLU
experts of ``intermediate_size`` on every layer, a bias-free gate) with ``nn.LayerNorm`` (weight
and bias: ``model.normalization`` layernorm); ``attention_bias`` puts biases on q/k/v_proj
(``model.add_qkv_bias``) and o_proj (``model.add_proj_bias``), ``lm_head_bias`` on the output
layer (``model.add_output_bias``): counted, their adds in kernels that run anyway. Its
SparseMixer router picks exactly two experts (``num_experts_per_tok`` other than 2 is refused);
its masks, Gumbel sampling and ``input_jitter_noise`` are elementwise, listed, not timed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.io.hf_biases import READS_LM_HEAD_BIAS, bias_fields, check_biases
from core.io.hf_defaults import fill_class_defaults, load_class_defaults
from core.io.hf_mla import MLA_HF_FIELDS, mla_derived_keys
from core.io.hf_moe import moe_fields
from core.io.hf_windows import window_fields_of
from core.io.start_plan import default_plan
from core.io.import_result import (ImportResult, global_batch_note, positive_int, refusal,
                                   seq_length_note, switched_off_or_refuse)
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import BOUNDS, ConfigError, FieldError
from core.util.text import short_repr, shown_name
from core.plan.model_config import model_from_fields
from core.plan.presets import LLAMA_FAMILY
from core.plan.session import Session

__all__ = ["DENSE_ARCHITECTURES", "MOE_ARCHITECTURES", "REFUSED_ARCHITECTURES", "USED", "IGNORED",
           "HFImport", "session_from_hf_config", "read_hf_config", "hf_config_path",
           "default_plan"]

#: Dense decoder architectures we import, with the model fields their modelling code fixes.
DENSE_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {},
    "MistralForCausalLM": {},
    "Qwen2ForCausalLM": {"add_qkv_bias": True},
    "Qwen3ForCausalLM": {"qk_layernorm": True},
    # Nemotron-4 (transformers' NemotronForCausalLM): up_proj / down_proj with relu2 (squared
    # ReLU, not gated), LayerNorm1P (a LayerNorm with weight and bias), partial RoPE
    "NemotronForCausalLM": {"activation": "squared_relu", "normalization": "layernorm"},
    # Phi-3, Phi-3.5, Phi-4 (transformers' Phi3ForCausalLM): Llama's layer with Q, K and V in one
    # qkv_proj and gate and up in one gate_up_proj -- a layout: the same GEMM FLOPs and bytes as
    # the separate projections (Megatron fuses QKV and fc1 the same way)
    "Phi3ForCausalLM": {},
    # OLMo 2 (Olmo2ForCausalLM): RMSNorm after attention and MLP instead of before (the same
    # kernels) and an RMSNorm over the whole Q and K projections (see _APPROXIMATED)
    "Olmo2ForCausalLM": {"qk_layernorm": True},
    # OLMo 3 (Olmo3ForCausalLM, modeling_olmo3.py): OLMo 2's layer (post-norms, whole-projection
    # QK-norm) with a sliding window on the layers layer_types names (default: all but every
    # 4th, Olmo3Config)
    "Olmo3ForCausalLM": {"qk_layernorm": True},
    # Gemma 2 and 3 (core.model.families.gemma): GeGLU (tanh-GeLU gate), RMSNorm before and
    # after attention and MLP, embedding scaled by sqrt(h), tied output layer; Gemma 2
    # soft-caps attention scores and logits, Gemma 3 has QK-norm instead
    "Gemma2ForCausalLM": {"family": "gemma2", "activation": "geglu"},
    "Gemma3ForCausalLM": {"family": "gemma3", "activation": "geglu", "qk_layernorm": True},
}
#: The ``hidden_act`` each architecture's MLP is modelled with (SiLU-gated otherwise).
_ARCH_ACTIVATIONS: dict[str, tuple[str, ...]] = {"NemotronForCausalLM": ("relu2",),
                                                 "Gemma2ForCausalLM": ("gelu_pytorch_tanh",),
                                                 "Gemma3ForCausalLM": ("gelu_pytorch_tanh",)}
#: Gemma's soft-capping fields: set (numbers) for Gemma 2, null or absent for Gemma 3.
_GEMMA_SOFTCAP = {"Gemma2ForCausalLM": True, "Gemma3ForCausalLM": False}
#: Mixture-of-experts architectures we import: the model fields their modelling code fixes and
#: the field that gives the number of experts.
MOE_ARCHITECTURES: dict[str, tuple[dict[str, Any], str]] = {
    "MixtralForCausalLM": ({}, "num_local_experts"),
    "Qwen2MoeForCausalLM": ({"add_qkv_bias": True}, "num_experts"),
    "Qwen3MoeForCausalLM": ({"qk_layernorm": True}, "num_experts"),
    # multi-head latent attention with its latent norms (q_a_layernorm, kv_a_layernorm:
    # Megatron's q_layernorm / kv_layernorm, model.qk_layernorm under MLA)
    "DeepseekV2ForCausalLM": ({"multi_latent_attention": True, "qk_layernorm": True},
                              "n_routed_experts"),
    "DeepseekV3ForCausalLM": ({"multi_latent_attention": True, "qk_layernorm": True},
                              "n_routed_experts"),
    "GptOssForCausalLM": ({"add_bias_linear": True, "softmax_type": "learnable",
                           "glu_linear_offset": 1.0}, "num_local_experts"),
    # GLM-4.5, GLM-4.5-Air, GLM-4.6: its QKV bias and QK-norm are the config's switches
    # (_CONFIG_SWITCHES), its multi-token prediction layers num_nextn_predict_layers
    "Glm4MoeForCausalLM": ({}, "n_routed_experts"),
    # Phi-3.5-MoE (PhimoeForCausalLM, modeling_phimoe.py): Mixtral's layout (num_local_experts
    # SwiGLU experts of intermediate_size, no shared expert, every layer) with nn.LayerNorm
    # (weight and bias) for every norm; its QKV bias is the config's switch (_CONFIG_SWITCHES),
    # its router in core.io.hf_moe, its biases in core.io.hf_biases.bias_fields
    "PhimoeForCausalLM": ({"normalization": "layernorm"}, "num_local_experts"),
}
#: Class names of a checkpoint's own code (``auto_map``) for a model transformers has ported
#: under another name: read as the ported class, with a note. microsoft/Phi-3.5-MoE-instruct's
#: file names its remote ``PhiMoEForCausalLM`` (vLLM registers that name); transformers builds
#: ``PhimoeForCausalLM`` for its ``model_type`` phimoe.
_REMOTE_CODE_NAMES = {"PhiMoEForCausalLM": "PhimoeForCausalLM"}
#: Model fields an architecture's modelling code takes from a config switch rather than fixing
#: them: HF key -> (model field, the modelling code's default when the key is absent).
#: Glm4Moe: ``q_proj``, ``k_proj``, ``v_proj`` have ``bias=attention_bias`` (``o_proj`` none:
#: Megatron's --add-qkv-bias); ``use_qk_norm`` adds ``q_norm`` / ``k_norm`` (RMSNorm over each
#: head of head_dim: --qk-layernorm); both default to false in ``Glm4MoeConfig``.
_CONFIG_SWITCHES: dict[str, dict[str, tuple[str, bool]]] = {
    "Glm4MoeForCausalLM": {"use_qk_norm": ("qk_layernorm", False)},
}
#: Architectures with multi-token prediction layers (``num_nextn_predict_layers``) besides the
#: MLA ones: GLM-4.5's checkpoints carry one MTP layer (a decoder layer like the last, with
#: ``eh_proj``, ``enorm``, ``hnorm``), trained with the model; transformers' inference code
#: does not load it.
_MTP_WITHOUT_MLA = ("Glm4MoeForCausalLM",)
#: Architectures whose released checkpoints store quantized weights, with the methods (GPT-OSS:
#: MXFP4 after training; DeepSeek-V3: the 128x128 block-scaled FP8 weights of its FP8 training):
#: their ``quantization_config`` describes the stored weights, not how the model trains (the
#: plan's precision and fp8_recipe do).
_STORAGE_QUANTIZATION: dict[str, tuple[str, ...]] = {"GptOssForCausalLM": ("mxfp4",),
                                                    "DeepseekV3ForCausalLM": ("fp8",)}
#: DeepSeek's multi-head latent attention fields -> model fields.
#: DeepSeek's expert-selection methods: all cost what the router's top-k costs (see IGNORED).
#: Architectures refused by name (they wait for the layer-spec refactor: a layer built from named
#: components), each with the field that has what the simulator does not model and what that
#: would change in the simulated compute.
#: The table is resources/hf_refused_architectures.json (name -> field, why).
REFUSED_ARCHITECTURES_FILE = (Path(__file__).resolve().parents[2] / "resources"
                              / "hf_refused_architectures.json")
REFUSED_ARCHITECTURES: dict[str, tuple[str, str]] = {
    name: (entry["field"], entry["why"]) for name, entry in json.loads(
        REFUSED_ARCHITECTURES_FILE.read_text(encoding="utf-8"))["architectures"].items()}
#: Fields the simulator does not model, refused by name with what they would change, and the
#: values that switch them off (a config with one of those is accepted, the field listed).
REFUSED: dict[str, tuple[str, tuple[Any, ...]]] = {
    "use_sliding_window": ("windows from layer max_window_layers on (Qwen2): the attention core "
                           "of those layers would cover a band, not the causal triangle; "
                           "Megatron-Core's --window-attn-skip-freq keeps every N-th layer full "
                           "and cannot give that pattern", (None, False)),
    # Phi-4-mini's config.json keys (microsoft/Phi-4-mini-instruct), which transformers'
    # Phi3Config and modelling code do not read: only the published values are known
    # (Phi-3.5-MoE's modelling code reads it: model.add_output_bias, see core.io.hf_biases.bias_fields)
    "lm_head_bias": ("a bias on the output layer that this architecture's modelling code does "
                     "not read (Phi-3.5-MoE's does: model.add_output_bias)", (None, False)),
    "full_attn_mod": ("a key of Phi-4-mini's config that transformers' Phi3 code does not read "
                      "(its layers are all alike); what a value other than the published 1 would "
                      "change is not known", (None, 1)),
    "interpolate_factor": ("a key of Phi-4-mini's config that transformers' Phi3 code does not "
                           "read; what a value other than the published 1 would change is not "
                           "known", (None, 1)),
    "attn_logit_softcapping": ("tanh soft-capping of every attention score: FlashAttention's "
                               "softcap variant, a kernel the profile stores have no times for",
                               (None,)),
    "final_logit_softcapping": ("tanh soft-capping of the (s, V) logits: an elementwise kernel "
                                "over the largest activation, and its backward", (None,)),
    "attention_chunk_size": ("chunked attention: tokens attend within their chunk, a "
                             "block-diagonal mask whose attention-core FLOPs and kernel have no op "
                             "here", (None,)),
    "use_bidirectional_attention": ("attention without the causal mask (EmbeddingGemma's "
                                    "Gemma 3): the attention core over all s*s query-key pairs, "
                                    "windows on both sides, not the causal kernels", (None, False)),
    "hybrid_override_pattern": ("Mamba-2 layers among the attention and MLP layers: "
                                "selective-scan kernels, parameters and state not modelled", ()),
}
#: Fields that restate what the architecture's modelling code fixes: the config's value must be
#: the model field's (a config that says otherwise is not the architecture we know: refused).
_AGREE: dict[str, str] = {"qkv_bias": "add_qkv_bias", "use_qk_norm": "qk_layernorm"}
#: What an imported model approximates, per architecture (listed with the ignored fields).
_APPROXIMATED: dict[str, tuple[str, str]] = {
    "Olmo2ForCausalLM": ("q_norm, k_norm", "OLMo 2 normalizes the whole Q and K projections "
                         "(RMSNorm over a*d and g*d channels), modelled as Megatron's per-head "
                         "QK-norm (model.qk_layernorm): the same elementwise kernels over the same "
                         "bytes; the norms' weights are counted per head (d each, not a*d and "
                         "g*d: 0.25 M fewer of OLMo 2 7B's 7.30 B) and the sum of squares across "
                         "tensor-parallel ranks it needs with t > 1 is not timed"),
}
_APPROXIMATED["Olmo3ForCausalLM"] = (  # the same norms (modeling_olmo3.py: Olmo3Attention)
    "q_norm, k_norm", "OLMo 3 normalizes the whole Q and K projections as OLMo 2 does (RMSNorm "
    "over a*d and g*d channels), modelled as Megatron's per-head QK-norm (model.qk_layernorm): "
    "the same elementwise kernels over the same bytes; the norms' weights are counted per head "
    "(d each, not a*d and g*d: 0.25 M fewer of OLMo 3 7B's 7.30 B) and the sum of squares "
    "across tensor-parallel ranks it needs with t > 1 is not timed")
#: Fields that name experts: a dense architecture's config with one of them is refused.
_MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
               "moe_intermediate_size")

#: Fields that fill the model (HF name -> what it sets).
USED: dict[str, str] = {
    "architectures": "the model family",
    "hidden_activation": "checked: gelu_pytorch_tanh (Gemma's GeGLU, model.activation geglu)",
    "sliding_window_pattern": "model.window_attn_skip_freq (Gemma 3: one global layer in N)",
    "_sliding_window_pattern": "checked: Gemma 3's pattern as transformers 4.53+ writes it "
    "beside layer_types (must agree with the layers' pattern)",
    "num_hidden_layers": "model.num_layers",
    "hidden_size": "model.hidden_size",
    "num_attention_heads": "model.num_attention_heads",
    "num_key_value_heads": "model.num_query_groups",
    "intermediate_size": "model.ffn_hidden_size",
    "vocab_size": "model.vocab_size",
    "max_position_embeddings": "model.seq_length (unless --seq-length)",
    "tie_word_embeddings": "model.tied_embeddings",
    "hidden_act": "model.activation (silu: SwiGLU; Nemotron's relu2: squared_relu)",
    "head_dim": "model.kv_channels (when it is not hidden_size / num_attention_heads)",
    "num_local_experts": "model.num_experts (Mixtral, Phi-3.5-MoE, GPT-OSS)",
    "num_experts": "model.num_experts (Qwen2-MoE, Qwen3-MoE)",
    "num_experts_per_tok": "model.moe_top_k",
    "moe_intermediate_size": "model.moe_ffn_hidden_size (Qwen2-MoE, Qwen3-MoE)",
    "shared_expert_intermediate_size": "model.num_shared_experts (a multiple of "
    "moe_intermediate_size)",
    "decoder_sparse_step": "model.moe_layer_frequency and moe_first_dense_layers (with "
    "mlp_only_layers)",
    "mlp_only_layers": "model.moe_first_dense_layers (first layers dense)",
    "attention_bias": "biases in q/k/v_proj (model.add_qkv_bias) and o_proj "
    "(model.add_proj_bias) where the modelling code reads it (Llama, Nemotron, Qwen3, "
    "Qwen3-MoE, OLMo 2 and 3, Gemma 2 and 3, Phi-3.5-MoE; GLM-4.5: q/k/v_proj only); GPT-OSS: "
    "must be true (model.add_bias_linear); elsewhere refused when true",
    "mlp_bias": "biases in the MLP's projections (model.add_mlp_bias; Llama, Nemotron; with "
    "attention_bias too: model.add_bias_linear); elsewhere refused when true",
    "qkv_bias": "checked: must be the architecture's QKV bias (Qwen3-Coder: false)",
    "use_qk_norm": "checked: must be the architecture's QK-norm (Qwen3-Coder: true); GLM-4.5: "
    "model.qk_layernorm",
    "kv_channels": "model.kv_channels (Nemotron's name for head_dim; must agree with it)",
    "sliding_window": "model.window_size (with layer_types; Mistral, Mixtral, Phi-3, "
    "Phi-3.5-MoE: every layer when shorter than the sequence)",
    "layer_types": "model.window_attn_skip_freq (sliding_attention / full_attention per layer; "
    "Gemma 2 and 3, GPT-OSS, OLMo 3: the others' code does not read it, it must agree with their "
    "rule)",
    "quantization_config": "checked: must be absent (the MXFP4 checkpoint storage of GPT-OSS "
    "and the FP8 one of DeepSeek-V3: listed as ignored)",
    "swiglu_limit": "model.activation_func_clamp_value (GPT-OSS)",
    "experts_per_token": "checked: equals num_experts_per_tok (GPT-OSS)",
    "n_routed_experts": "model.num_experts (DeepSeek, GLM-4.5)",
    "n_shared_experts": "model.num_shared_experts (DeepSeek, GLM-4.5: experts of "
    "moe_intermediate_size)",
    "first_k_dense_replace": "model.moe_first_dense_layers (DeepSeek, GLM-4.5)",
    "moe_layer_freq": "model.moe_layer_frequency (DeepSeek; GLM-4.5: must be 1)",
    "q_lora_rank": "model.q_lora_rank (DeepSeek MLA; null: no query compression)",
    "kv_lora_rank": "model.kv_lora_rank (DeepSeek MLA)",
    "qk_nope_head_dim": "model.qk_head_dim (DeepSeek MLA)",
    "qk_rope_head_dim": "model.qk_pos_emb_head_dim (DeepSeek MLA)",
    "v_head_dim": "model.v_head_dim (DeepSeek MLA)",
    "qk_head_dim": "checked: qk_nope_head_dim + qk_rope_head_dim (DeepSeek MLA; transformers' "
    "DeepseekV2Config / DeepseekV3Config write the sum)",
    "num_nextn_predict_layers": "model.mtp_num_layers (DeepSeek-V3's and GLM-4.5's multi-token "
    "prediction layers, trained with the model; transformers' inference code does not run them)",
    "topk_method": "checked: one of greedy, group_limited_greedy, noaux_tc (DeepSeek)",
    "n_group": "model.moe_router_num_groups (DeepSeek's group-limited routing under topk_method "
    "group_limited_greedy or noaux_tc: the token's experts lie in topk_group of n_group "
    "groups; greedy does not read it)",
    "topk_group": "model.moe_router_group_topk (see n_group)",
}
#: Fields that do not change the cost of training, with the reason.
IGNORED: dict[str, str] = {
    "_name_or_path": "a name", "model_type": "a name, checked: transformers builds the class it "
    "names, which must be architectures' (an alias of it is noted)",
    "transformers_version": "a version", "torch_dtype": "storage type (the plan sets the "
    "training precision)", "dtype": "storage type (the plan sets the training precision)",
    "bos_token_id": "a token id", "eos_token_id": "a token id", "pad_token_id": "a token id",
    "initializer_range": "initialization", "rms_norm_eps": "a constant of RMSNorm",
    "norm_eps": "a constant of the normalization (Nemotron)",
    "rope_theta": "RoPE's base changes the angles, not the work",
    "rope_local_base_freq": "RoPE's base of Gemma 3's sliding layers: the angles, not the work",
    "query_pre_attn_scalar": "the attention scores' scale (Gemma): a constant, not the work",
    "cache_implementation": "inference only (Gemma's hybrid KV cache)",
    "sliding_window_size": "Gemma 2's older name of sliding_window (the same window)",
    "rope_scaling": "RoPE scaling changes the angles, not the work",
    "rope_parameters": "RoPE's base and scaling (transformers 5's rope_theta and rope_scaling): "
    "the angles, not the work",
    "rope_interleave": "the order of RoPE's rotated channels (transformers' DeepSeek-V3; "
    "Megatron's --rotary-interleaved): the same rotary kernel bytes",
    "use_mrope": "multimodal RoPE's position ids (Qwen2.5): the angles, not the work",
    "original_max_position_embeddings": "the context before RoPE scaling extended it to "
    "max_position_embeddings (Phi-3; give --seq-length to simulate it)",
    "embd_pdrop": "dropout rate (kernels run either way)",
    "resid_pdrop": "dropout rate (kernels run either way)",
    "partial_rotary_factor": "RoPE on part of each head (Megatron's --rotary-percent): the "
    "rotary kernel still reads and writes all of Q and K (Megatron-Core concatenates the "
    "unrotated channels back, Transformer Engine's fused RoPE copies them), the same bytes",
    "use_cache": "inference only", "pretraining_tp": "Meta's tensor-parallel layout at "
    "pre-training: same result, same GEMMs", "attention_dropout": "dropout rate (kernels "
    "run either way)", "max_window_layers": "used only with use_sliding_window",
    "initial_context_length": "the context of pre-training before YaRN extends it to "
    "max_position_embeddings (give --seq-length to simulate it)",
    "output_attentions": "inference only", "output_hidden_states": "inference only",
    "return_dict": "inference only", "auto_map": "code location", "bias": "see attention_bias",
    "tokenizer_class": "a name", "model_name": "a name",
    "norm_topk_prob": "renormalizes the top-k routing weights: a few elementwise operations",
    "router_aux_loss_coef": "the load-balancing loss's weight (a number)",
    "output_router_logits": "returns the router logits for the load-balancing loss (a small "
    "reduction over the router's output)",
    "router_jitter_noise": "multiplicative noise on the router's input (elementwise)",
    "input_jitter_noise": "multiplicative noise on the MoE layer's input in training "
    "(Phi-3.5-MoE; elementwise)",
    "hidden_dropout": "dropout rate (kernels run either way; Phi-3.5-MoE's file keeps it, "
    "transformers' PhimoeConfig does not read it)",
    "scoring_func": "DeepSeek's router score function (softmax or sigmoid): elementwise on "
    "the router's (T, E) logits",
    "routed_scaling_factor": "a constant scale of the routed experts' output",
    "aux_loss_alpha": "the load-balancing loss's weight (a number)",
    "seq_aux": "DeepSeek's sequence-wise balance loss: a small reduction over the router's "
    "scores",
    "ep_size": "DeepSeek's reference code's expert-parallel size at inference (the plan sets "
    "expert_parallel)",
}



@dataclass
class HFImport(ImportResult):
    """Result of :func:`session_from_hf_config` (:class:`core.io.import_result.ImportResult`):
    the session, the fields that were ignored (name -> reason), the notes (e.g. the
    pre-training length when the sequence length came from an extended
    ``max_position_embeddings``), and the architecture."""

    architecture: str = ""


def _refuse(where: str, field_name: str, message: str) -> ConfigError:
    return refusal(where, field_name, message)


def _gemma_softcap(cfg: dict[str, Any], arch: str, where: str) -> dict[str, str]:
    """The soft-capping fields of a Gemma config (name -> note for the ignored list): Gemma 2's
    must be numbers (its family soft-caps; the cap's value does not change the work), Gemma 3's
    null or absent.

    Raises ConfigError for one that disagrees with the architecture."""
    out = {}
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = cfg.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        if value is not None and not number:  # the modelling code caps whenever it is not null
            raise _refuse(where, key, f"{short_repr(value)}: a cap must be a positive number, or null "
                          "for none")
        if _GEMMA_SOFTCAP[arch] != number:
            raise _refuse(where, key, f"{short_repr(value)}: {arch}'s modelling code has "
                          f"{'a positive cap' if _GEMMA_SOFTCAP[arch] else 'none'}; a config "
                          "that says otherwise is not one we know")
        if key in cfg:
            out[key] = (f"{short_repr(value)}: modelled (model.family {arch[:6].lower()}: the cap's "
                        "elementwise kernels; its value does not change the work)"
                        if number else f"{short_repr(value)}: off")
    return out


def _refused_fields(cfg: dict[str, Any], where: str) -> dict[str, str]:
    """The :data:`REFUSED` fields of ``cfg`` that are switched off (name -> why they are listed).

    Raises ConfigError for the first one that is switched on, naming it and what it would
    change."""
    out = {}
    for key, (change, inert) in REFUSED.items():
        if key not in cfg:
            continue
        value = cfg[key]
        out[key] = switched_off_or_refuse(where, key, value, change, inert)
    return out


def session_from_hf_config(cfg: Any, where: str = "config.json", *,
                           seq_length: int | None = None, name: str | None = None,
                           check_rules: bool = True) -> HFImport:
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
    check_rules : bool
        Check the session's rules (:func:`core.plan.rules.validate`) before returning it
        (default). Without, the model is returned as the file gives it, also when the
        session breaks a rule (a default plan that does not fit the model, say).

    Raises
    ------
    ConfigError
        Not a JSON object; a refused or unknown architecture; a field that is refused
        (named in the message); a missing or bad size; a missing key whose class default the
        importer does not know; or (``check_rules``) a model that
        breaks the session rules.
    """
    if not isinstance(cfg, dict):
        raise ConfigError([FieldError(where, "must be a JSON object (a Hugging Face config.json)")])
    arch = _architecture(cfg, where)
    type_notes = _model_type_agrees(cfg, arch, where)
    if cfg["architectures"][0] != arch:
        type_notes.insert(0, f"architectures [{cfg['architectures'][0]!r}]: the checkpoint's own "
                          f"code's name (auto_map) of transformers' {arch}; read as {arch}")
    cfg, default_notes = fill_class_defaults(cfg, arch, where)
    moe = arch in MOE_ARCHITECTURES
    ignored, storage = _ignored_fields(cfg, arch, where)
    cfg = mla_derived_keys(cfg, arch, bool(MOE_ARCHITECTURES.get(arch, ({}, ""))[0].get(
        "multi_latent_attention")), where, ignored)
    sizes = _sizes(cfg, where, seq_length)
    layers, s = sizes["num_layers"], sizes["seq_length"]
    _check_activation_and_biases(cfg, arch, where)
    window_fields, window_note = window_fields_of(cfg, arch, layers, s, where)
    tied = cfg["tie_word_embeddings"]  # the file's or its class's (a needed default)
    if not isinstance(tied, bool):
        raise _refuse(where, "tie_word_embeddings", f"{short_repr(tied)} must be true or false")
    ignored.update({k: IGNORED[k] for k in cfg if k in IGNORED})
    fixed = _architecture_fields(cfg, arch, layers, where, ignored)
    name = (str(cfg.get("_name_or_path") or "").rstrip("/").split("/")[-1] or name
            or arch.replace("ForCausalLM", ""))
    model = model_from_fields({
        "name": name[:200], **sizes, **LLAMA_FAMILY, "tied_embeddings": tied, **fixed,
        **window_fields})
    if window_note:
        ignored["sliding_window"] = window_note
    if storage:
        quant = cfg["quantization_config"]
        ignored["quantization_config"] = (f"{quant['quant_method']}: how the released checkpoint "
                                          "stores its weights (quantized after training); the "
                                          "plan sets the training precision")
    session = Session(model=model, plan=default_plan(model), cluster=ClusterConfig(),
                      cost=CostConfig())
    session.notes = f"Imported from the Hugging Face config {where} ({arch})."
    if check_rules:
        _check_session_rules(session, arch, moe, where)
    # the length when the user did not give it: the pre-training one named, or else this one
    length = [] if seq_length is not None else (
        _length_notes(cfg, seq_length, s)
        or [seq_length_note(s, "the config's max_position_embeddings")])
    # the class defaults used for absent keys, and the batch (a config.json has none)
    notes = (length + type_notes + default_notes
             + [global_batch_note(session.plan.global_batch_size)])
    return HFImport(session, ignored=ignored, notes=notes, architecture=arch)


def _architecture(cfg: dict[str, Any], where: str) -> str:
    """The config's one architecture, supported (:data:`DENSE_ARCHITECTURES`,
    :data:`MOE_ARCHITECTURES`) and with only fields the importer knows.

    Raises ConfigError for a missing, refused or unsupported architecture, experts in a dense
    one, or an unknown field."""
    supported = [*DENSE_ARCHITECTURES, *MOE_ARCHITECTURES]
    archs = cfg.get("architectures")
    if not (isinstance(archs, list) and len(archs) == 1 and isinstance(archs[0], str)):
        raise _refuse(where, "architectures", f"{short_repr(archs)} must be a list of one architecture name; "
                      f"supported: {', '.join(supported)}")
    arch = _REMOTE_CODE_NAMES.get(archs[0], archs[0])
    multimodal = _multimodal_refusal(cfg, arch, where)
    if multimodal is not None:
        raise multimodal
    if arch in REFUSED_ARCHITECTURES:
        key, change = REFUSED_ARCHITECTURES[arch]
        raise _refuse(where, key, f"{arch} is not modelled yet: {change}")
    if arch not in supported:
        raise _refuse(where, "architectures", f"{short_repr(arch)} is not supported; supported: "
                      f"{', '.join(supported)}")
    moe = arch in MOE_ARCHITECTURES
    moe_fields = [f for f in _MOE_FIELDS if cfg.get(f)]
    if not moe and moe_fields:
        raise _refuse(where, moe_fields[0], f"{short_repr(arch)} is a dense architecture; a config with "
                      f"experts ({', '.join(moe_fields)}) is not one we know")
    unknown = sorted(k for k in cfg if k not in USED and k not in IGNORED and k not in REFUSED)
    if unknown:
        from core.util.text import did_you_mean
        hint = did_you_mean(unknown[0], [*USED, *IGNORED, *REFUSED])
        also = [shown_name(k) for k in unknown[1:6]] + ([f"{len(unknown) - 6:,} more"]
                                                          if len(unknown) > 6 else [])
        raise _refuse(where, shown_name(unknown[0]), "is not known to the importer, so we cannot "
                      "tell whether it changes the model; remove it if it does not" + hint +
                      (f" (also: {', '.join(also)})" if also else ""))
    return arch


#: Keys of the encoders a multimodal config describes beside its language model.
_ENCODER_KEYS = ("vision_config", "audio_config")
#: Keys under which a multimodal config nests its language model's own config: transformers'
#: ``text_config`` (Gemma 3, Mistral 3, Llama 4, LLaVA, Idefics3, InternVL's ``-hf`` ports);
#: ``llm_config`` (InternVL's own code, ``InternVLChatModel``).
_NESTED_LM_KEYS = ("text_config", "llm_config")


def _multimodal_refusal(cfg: dict[str, Any], arch: str, where: str) -> ConfigError | None:
    """The refusal of a multimodal or other conditional-generation config, by its structure (None
    for a decoder's): a ``vision_config`` or ``audio_config`` key (an encoder and its projector,
    whose output tokens join the language model's sequence: not modelled, and planning the
    language model alone would plan another model than the one trained), a nested language
    model (``text_config``, ``llm_config``; null only with a conditional-generation
    architecture, whose config class fills a default part) or an architecture ending in
    ``ForConditionalGeneration`` (transformers' name for a decoder behind an encoder:
    multimodal and sequence-to-sequence models). The error names the file and the key (the
    first encoder key, else the nested one, else ``architectures``) and says how to plan the
    language model alone (:func:`_nested_language_model`)."""
    # a null part is one only where transformers' config class fills a default for it (LLaVA's
    # vision_config=None: a CLIP vision encoder): a conditional-generation class; a causal LM
    # class never reads it (left to the unknown-key refusal, which does not call it an encoder)
    conditional = arch.endswith("ForConditionalGeneration")
    encoders = [k for k in _ENCODER_KEYS if k in cfg and (cfg[k] is not None or conditional)]
    nested = next((k for k in _NESTED_LM_KEYS
                   if k in cfg and (cfg[k] is not None or conditional)), None)
    if not (encoders or nested or arch.endswith("ForConditionalGeneration")):
        return None
    key = encoders[0] if encoders else nested or "architectures"
    if encoders:
        what = (f"its {' and '.join(encoders)} describe{'' if len(encoders) > 1 else 's'} an "
                "encoder (and its projector) whose output tokens join the language model's "
                "sequence; that compute is not modelled, and the language model alone would be "
                "another model than the one trained")
    elif nested:
        what = (f"its language model is nested under {nested} beside parts the importer does "
                "not read")
    else:
        what = ("transformers' ForConditionalGeneration models put an encoder (vision, audio or "
                "text: multimodal and sequence-to-sequence models) before or beside the decoder, "
                "whose compute is not modelled")
    return _refuse(where, key, f"{arch} is not a decoder alone: {what}. "
                   + _nested_language_model(cfg, nested, where))


def _nested_language_model(cfg: dict[str, Any], nested: str | None, where: str) -> str:
    """How to plan the language model of a multimodal config alone, read from its nested config
    ``nested`` (``text_config``, ``llm_config``): the class is the nested ``architectures``, else
    the one transformers' ``AutoModelForCausalLM`` builds for its ``model_type``
    (:func:`causal_lm_classes`); a supported class's nested config is imported as it is
    (:func:`session_from_hf_config`, rules unchecked) to say either how to save it or the first
    thing that stops it (a missing size, a key to take out). Nothing is guessed: a file without
    a nested config does not record which decoder its top-level keys describe."""
    if nested is None:
        return ("The file has no text_config: its language model's keys are not separated from "
                "the rest and it does not name their decoder architecture, so the language "
                "model is not planned alone")
    tc = cfg[nested]
    if not isinstance(tc, dict):
        return f"Its {nested} is not a JSON object"
    archs, mt = tc.get("architectures"), tc.get("model_type")
    if isinstance(archs, list) and len(archs) == 1 and isinstance(archs[0], str):
        cls: str | None = _REMOTE_CODE_NAMES.get(archs[0], archs[0])
    else:
        cls = causal_lm_classes()[1].get(mt) if isinstance(mt, str) else None
    if cls is None:
        return (f"Its {nested} names neither architectures nor a model_type transformers builds a "
                f"causal language model for (model_type {short_repr(mt)}): its language model "
                "cannot be planned alone")
    if cls in REFUSED_ARCHITECTURES:
        field, why = REFUSED_ARCHITECTURES[cls]
        return (f"Its language model ({nested}: {cls}) is not modelled either: {why} "
                f"({nested}.{field})")
    if cls not in DENSE_ARCHITECTURES and cls not in MOE_ARCHITECTURES:
        return f"Its language model ({nested}: {cls}) is not a supported architecture"
    add = "" if archs == [cls] else f' with "architectures": ["{cls}"]'
    how = f"save {nested} as its own config.json{add} and import that"
    try:
        session_from_hf_config({**tc, "architectures": [cls]}, f"{where}: {nested}",
                               check_rules=False)
    except ConfigError as err:
        first = err.errors[0]
        return (f"Its language model ({nested}: {cls}) does not import as it is: {first.field}: "
                f"{first.message}. To plan it alone, fix that, {how}")
    return f"To plan its language model alone ({cls}), {how}"


#: The shipped table of the class transformers' ``AutoModelForCausalLM`` builds for each
#: ``model_type`` (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, transformers 5.25.0).
CAUSAL_LM_CLASSES_FILE = (Path(__file__).resolve().parents[2] / "resources"
                          / "hf_causal_lm_classes.json")


@lru_cache(maxsize=1)
def causal_lm_classes() -> tuple[str, dict[str, str | None]]:
    """``(transformers version, {model_type: causal-LM class name})`` of
    :data:`CAUSAL_LM_CLASSES_FILE` (transformers' ``models/auto/modeling_auto.py``
    ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``; a None class: the type has no causal-LM class there).

    Raises ValueError for a file of another format or version (a shipped file: a bug)."""
    doc = json.loads(CAUSAL_LM_CLASSES_FILE.read_text(encoding="utf-8"))
    if doc.get("format") != "vtrain-hf-causal-lm-classes" or doc.get("version") != 1:
        raise ValueError(f"{CAUSAL_LM_CLASSES_FILE}: not a vtrain-hf-causal-lm-classes version 1 "
                         "file")
    return doc["transformers_version"], dict(doc["classes"])


def _model_type_agrees(cfg: dict[str, Any], arch: str, where: str) -> list[str]:
    """Check the config's ``model_type`` against its ``architectures``; return the notes.

    transformers' ``AutoModelForCausalLM`` builds the class of the configuration the file's
    ``model_type`` names (``AutoConfig``; ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``,
    :func:`causal_lm_classes`); ``architectures`` is what the saving code wrote and does not
    choose the class. The importer reads the model by ``architectures``, so the two must name
    one model: a ``model_type`` whose class is another one (``llama`` beside
    ``Qwen2ForCausalLM``, ``qwen3_moe`` beside ``Qwen3ForCausalLM``) is refused. A
    ``model_type`` that is one of several names of the same class (transformers 5.25 builds
    ``LlamaForCausalLM`` for ``llama``, ``internlm3``, ``exaone``, ``iquestcoder``) is read with
    a note when it is not the architecture's own (its configuration class's defaults are
    :func:`core.io.hf_defaults.fill_class_defaults`'s concern); one transformers has no class
    for (a model with its own code, ``auto_map``; Kimi-K2's ``kimi_k2``) leaves the architecture
    to decide, with a note. No ``model_type``: the architecture decides (no note). A
    ``model_type`` that is not text is left to ``fill_class_defaults``, which refuses it.

    Raises ConfigError naming ``model_type`` when its class is not ``arch``."""
    mt = cfg.get("model_type")
    if not isinstance(mt, str):
        return []
    version, classes = causal_lm_classes()
    built = classes.get(mt)
    if built is None:
        return [f"model_type {short_repr(mt)}: transformers {version}'s AutoModelForCausalLM has no class "
                f"for it (a model with its own code, auto_map); read as architectures' {arch}"]
    if built != arch:
        raise _refuse(where, "model_type", f"{short_repr(mt)} disagrees with architectures [{short_repr(arch)}]: "
                      f"transformers' AutoModelForCausalLM builds {built} for model_type {short_repr(mt)} "
                      f"(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, transformers {version}), not {arch}; "
                      "architectures is only what was saved. The two must name one model: fix "
                      "the one that is wrong")
    _, table = load_class_defaults()
    if mt in table and arch in table[mt].architectures:  # the architecture's own type
        return []
    names = sorted(t for t, c in classes.items() if c == arch)
    return [f"model_type {short_repr(mt)}: one of the names transformers {version} builds {arch} for "
            f"({', '.join(names)}); read as {arch}"]


def _ignored_fields(cfg: dict[str, Any], arch: str, where: str) -> tuple[dict[str, str], bool]:
    """``(ignored, storage)``: the switched-off :data:`REFUSED` fields (name -> why they are
    listed; Gemma's soft-capping fields by :func:`_gemma_softcap`) and whether the config's
    ``quantization_config`` is only how the released checkpoint stores its weights.

    Raises ConfigError for a refused field switched on, a Gemma activation other than GeGLU or
    quantized weights."""
    if arch in _GEMMA_SOFTCAP:  # the family models Gemma 2's soft-capping
        ignored = {**_refused_fields({k: v for k, v in cfg.items() if not k.endswith(
            "_logit_softcapping")}, where), **_gemma_softcap(cfg, arch, where)}
        if cfg.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            raise _refuse(where, "hidden_activation", f"{short_repr(cfg['hidden_activation'])}: only "
                          "gelu_pytorch_tanh (GeGLU) is modelled for Gemma")
    else:
        ignored = _refused_fields({k: v for k, v in cfg.items() if not (
            k == "lm_head_bias" and arch in READS_LM_HEAD_BIAS)}, where)
    quant = cfg.get("quantization_config")
    storage = (isinstance(quant, dict) and quant.get("quant_method") in
               _STORAGE_QUANTIZATION.get(arch, ()))
    if quant is not None and not storage:
        raise _refuse(where, "quantization_config", "quantized weights are not modelled")
    return ignored, storage


def _sizes(cfg: dict[str, Any], where: str, seq_length: int | None) -> dict[str, Any]:
    """The model's size fields from the config (``num_layers``, ``hidden_size``,
    ``num_attention_heads``, ``ffn_hidden_size``, ``seq_length``, ``vocab_size``,
    ``num_query_groups``, ``kv_channels``); ``seq_length`` when given, else
    ``max_position_embeddings``; the head size from ``head_dim`` or ``kv_channels`` (None when it
    is ``h/a``).

    Raises ConfigError for a missing or bad size, ``kv_channels`` and ``head_dim`` that disagree,
    or ``h`` not divisible by the heads without a head size."""
    layers = positive_int(cfg, "num_hidden_layers", where)
    h = positive_int(cfg, "hidden_size", where)
    a = positive_int(cfg, "num_attention_heads", where)
    g = positive_int(cfg, "num_key_value_heads", where, required=False)
    f = positive_int(cfg, "intermediate_size", where)
    vocab = positive_int(cfg, "vocab_size", where)
    max_pos = positive_int(cfg, "max_position_embeddings", where, required=seq_length is None)
    s = seq_length if seq_length is not None else max_pos
    # the session's bounds, before anything is built per layer (10^12 layers ran out of memory)
    for key, value, bound in (("num_hidden_layers", layers, "layers"), ("hidden_size", h, "hidden"),
                              ("num_attention_heads", a, "heads"), ("intermediate_size", f, "ffn"),
                              ("vocab_size", vocab, "vocab"),
                              ("max_position_embeddings", max_pos if seq_length is None else None,
                               "seq")):
        top = BOUNDS[bound].hi
        if value is not None and value > top:
            raise _refuse(where, key, f"{key}={short_repr(value)} must be at most {int(top):,} "
                                      f"({BOUNDS[bound].why})")
    head_dim = positive_int(cfg, "head_dim", where, required=False)
    kv = positive_int(cfg, "kv_channels", where, required=False)
    if kv is not None and head_dim is not None and kv != head_dim:
        raise _refuse(where, "kv_channels", f"{kv} disagrees with head_dim={head_dim}")
    head_dim = head_dim if head_dim is not None else kv
    if head_dim is None and h % a:
        raise _refuse(where, "hidden_size", f"{h} is not divisible by num_attention_heads={a} and "
                      "the config gives no head_dim (or kv_channels)")
    kv_channels = head_dim if head_dim is not None and head_dim * a != h else None
    return {"num_layers": layers, "hidden_size": h, "num_attention_heads": a,
            "ffn_hidden_size": f, "seq_length": s, "vocab_size": vocab,
            "num_query_groups": g if g is not None and g != a else None,
            "kv_channels": kv_channels}


def _check_activation_and_biases(cfg: dict[str, Any], arch: str, where: str) -> None:
    """Check the MLP's activation (``hidden_act``, by architecture) and the linear layers'
    biases (:func:`core.io.hf_biases.check_biases`).

    Raises ConfigError for one that is not modelled."""
    act = cfg.get("hidden_act", _ARCH_ACTIVATIONS.get(arch, ("silu",))[0])
    if act not in _ARCH_ACTIVATIONS.get(arch, ("silu", "swish")):
        raise _refuse(where, "hidden_act", f"{short_repr(act)}: only " + (
            f"{' or '.join(_ARCH_ACTIVATIONS[arch])} MLPs are" if arch in _ARCH_ACTIVATIONS
            else "SiLU-gated MLPs (SwiGLU) are") + " modelled for this architecture")
    check_biases(cfg, arch, where)


def _architecture_fields(cfg: dict[str, Any], arch: str, layers: int, where: str,
                         ignored: dict[str, str]) -> dict[str, Any]:
    """The model fields the architecture fixes (:data:`DENSE_ARCHITECTURES`,
    :data:`MOE_ARCHITECTURES`) or takes from a switch (:data:`_CONFIG_SWITCHES`) with its
    multi-head latent attention and multi-token prediction fields and its experts' (:func:`core.io.hf_moe.moe_fields`); the architecture's approximation, if any, is
    added to ``ignored``.

    Raises ConfigError for a field that disagrees with the architecture's modelling code or
    MLA fields in an architecture without MLA."""
    moe = arch in MOE_ARCHITECTURES
    fixed = dict(MOE_ARCHITECTURES[arch][0] if moe else DENSE_ARCHITECTURES[arch])
    switches = _CONFIG_SWITCHES.get(arch, {})
    for key, (target, default) in switches.items():
        value = cfg.get(key, default)
        if not isinstance(value, bool):
            raise _refuse(where, key, f"{short_repr(value)} must be true or false")
        fixed[target] = value
    fixed.update(bias_fields(cfg, arch, where))
    for key, target in _AGREE.items():
        if key in switches:
            continue
        want = fixed.get(target, LLAMA_FAMILY[target])
        if key in cfg and cfg[key] is not want:
            raise _refuse(where, key, f"{short_repr(cfg[key])}: {arch}'s modelling code has "
                          f"model.{target} {short_repr(want)}; a config that says otherwise is not one we "
                          "know")
    if arch in _APPROXIMATED:
        what, why = _APPROXIMATED[arch]
        ignored[what] = why
    mla = bool(fixed.get("multi_latent_attention"))
    with_mtp = mla or arch in _MTP_WITHOUT_MLA
    mla_fields = [k for k in (*MLA_HF_FIELDS, "qk_head_dim", "num_nextn_predict_layers")
                  if k in cfg
                  and not (with_mtp and k == "num_nextn_predict_layers")]
    if mla:
        for key, target in MLA_HF_FIELDS.items():
            fixed[target] = positive_int(cfg, key, where, required=key != "q_lora_rank")
    elif mla_fields:
        raise _refuse(where, mla_fields[0], f"{short_repr(arch)} has no multi-head latent attention"
                      f"{'' if with_mtp else ' or multi-token prediction'}; a config with "
                      f"{'it' if with_mtp else 'them'} is not one we know")
    if with_mtp:
        mtp = cfg.get("num_nextn_predict_layers") or 0
        if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
            raise _refuse(where, "num_nextn_predict_layers", f"{short_repr(mtp)} must be a non-negative "
                          "integer")
        fixed["mtp_num_layers"] = mtp
    if moe:
        fixed.update(moe_fields(cfg, arch, MOE_ARCHITECTURES[arch][1], layers, where,
                                ignored))
    return fixed


def _check_session_rules(session: Session, arch: str, moe: bool, where: str) -> None:
    """Check the imported session's rules (:func:`core.plan.rules.validate`), the errors named
    by the config's own keys.

    Raises ConfigError listing them."""
    from core.plan.fields import rename_field
    from core.plan.rules import validate
    names = {**_HF_NAMES, "model.num_experts": MOE_ARCHITECTURES[arch][1] if moe else
             "num_experts"}
    errs = [rename_field(e, names) for e in validate(session)]  # types and bounds too
    if errs:  # named by the config's own keys
        raise ConfigError([FieldError(f"{where}: {e.field}", e.message, rule=e.rule) for e in errs])


def _length_notes(cfg: dict[str, Any], seq_length: int | None, s: int) -> list[str]:
    """A note when ``seq_length`` defaulted to ``max_position_embeddings`` and the config
    names a shorter pre-training context (``rope_scaling.original_max_position_embeddings``:
    Llama 3.1 8192, DeepSeek-V3 4096; the same key of transformers 5's ``rope_parameters``;
    ``original_max_position_embeddings``: Phi-3 128k 4096; ``initial_context_length``: GPT-OSS
    4096; transformers 5's per-layer-type ``rope_parameters``, OLMo 3's
    ``rope_parameters.full_attention``: 8192), the length
    the model was trained at before its context was extended."""
    if seq_length is not None:
        return []
    candidates = [(f"{name}.original_max_position_embeddings",
                   cfg[name].get("original_max_position_embeddings"))
                  for name in ("rope_scaling", "rope_parameters") if isinstance(cfg.get(name), dict)]
    # transformers 5's per-layer-type rope_parameters (OLMo 3: full_attention, sliding_attention)
    params = cfg.get("rope_parameters")
    candidates += [(f"rope_parameters.{kind}.original_max_position_embeddings",
                    sub.get("original_max_position_embeddings"))
                   for kind, sub in (params.items() if isinstance(params, dict) else ())
                   if isinstance(sub, dict)]
    candidates += [(key, cfg.get(key)) for key in ("original_max_position_embeddings",
                                                   "initial_context_length")]
    for key, value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < s:
            return [f"seq_length {s:,} is max_position_embeddings, the extended context; the "
                    f"model was pre-trained at {value:,} ({key}): give --seq-length {value} to "
                    "plan pre-training"]
    return []


#: Session field -> the Hugging Face key it comes from (for error messages).
_HF_NAMES = {"model.num_layers": "num_hidden_layers", "model.hidden_size": "hidden_size",
             "model.num_attention_heads": "num_attention_heads",
             "model.num_query_groups": "num_key_value_heads",
             "model.ffn_hidden_size": "intermediate_size", "model.vocab_size": "vocab_size",
             "model.seq_length": "max_position_embeddings", "model.kv_channels": "head_dim",
             "model.moe_router_num_groups": "n_group", "model.moe_router_group_topk": "topk_group",
             "model.moe_top_k": "num_experts_per_tok",
             "model.moe_ffn_hidden_size": "moe_intermediate_size",
             "model.q_lora_rank": "q_lora_rank", "model.kv_lora_rank": "kv_lora_rank",
             "model.qk_head_dim": "qk_nope_head_dim",
             "model.qk_pos_emb_head_dim": "qk_rope_head_dim", "model.v_head_dim": "v_head_dim",
             "model.num_shared_experts": "n_shared_experts",
             "model.moe_first_dense_layers": "first_k_dense_replace",
             "model.moe_layer_frequency": "moe_layer_freq",
             "model.mtp_num_layers": "num_nextn_predict_layers"}


def hf_config_path(path: str | Path) -> Path:
    """``path``, or its ``config.json`` when it is a model's folder (as ``from_pretrained`` takes
    it, or a snapshot of the Hugging Face cache)."""
    path = Path(path)
    return path / "config.json" if path.is_dir() and (path / "config.json").is_file() else path


def read_hf_config(path: str | Path, *, seq_length: int | None = None) -> HFImport:
    """Read a Hugging Face ``config.json`` file (see :func:`session_from_hf_config`); a folder
    (a model as ``from_pretrained`` takes it, or a snapshot) is read through its
    ``config.json``.

    Raises
    ------
    core.io.session.SessionFileError
        The file cannot be read or is not JSON.
    ConfigError
        The config is refused (the message names the file and the field).
    """
    from core.io.session import read_json
    path = hf_config_path(path)
    raw = read_json(path)
    folder = path.resolve().parent.name if path.name == "config.json" else path.stem
    snapshot = path.resolve().parent
    if (path.name == "config.json" and snapshot.parent.name == "snapshots"
            and snapshot.parent.parent.name.startswith("models--")):
        # the Hugging Face cache's layout, models--ORG--NAME/snapshots/HASH/config.json: the
        # model's name, not the commit hash
        folder = snapshot.parent.parent.name.split("--")[-1]
    return session_from_hf_config(raw, str(path), seq_length=seq_length, name=folder or None)
