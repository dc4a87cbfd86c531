"""Multimodal (and other conditional-generation) Hugging Face configs are refused by structure
(core/io/hf_import.py _multimodal_refusal): a ``vision_config`` / ``audio_config`` key, a nested
language model (``text_config``; InternVL's own code: ``llm_config``) or an architecture ending
in ``ForConditionalGeneration``. The message names the file and the key and says how to plan the
nested language model alone -- read from the nested config itself, never guessed.

The configs below are shortened from the published config.json files (their shapes kept):
Qwen/Qwen2-VL-7B-Instruct, Qwen/Qwen2.5-VL-7B-Instruct, meta-llama/Llama-4-Scout-17B-16E,
google/gemma-3-4b-it, llava-hf/llava-1.5-7b-hf, HuggingFaceM4/Idefics3-8B-Llama3,
OpenGVLab/InternVL3-1B-hf, OpenGVLab/InternVL2_5-1B, Qwen/Qwen2-Audio-7B, google-t5/t5-small;
Mistral Small 3.1 is tests/test_hf_olmo3_phimoe_mistral3.py's.
"""

from __future__ import annotations

import pytest

from core.io.hf_import import REFUSED_ARCHITECTURES, session_from_hf_config
from core.model import model_math as mm
from core.plan.fields import ConfigError
from tests.test_hf_olmo3_phimoe_mistral3 import MISTRAL_SMALL_31

QWEN2_VL_7B = {
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
    "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
    "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vision_start_token_id": 151652, "image_token_id": 151655, "video_token_id": 151656,
    "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16,
                      "in_chans": 3, "hidden_size": 3584, "patch_size": 14,
                      "spatial_merge_size": 2, "temporal_patch_size": 2}}
QWEN25_VL_7B = {
    **{k: v for k, v in QWEN2_VL_7B.items() if k != "vision_config"},
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "max_position_embeddings": 128000,
    "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "out_hidden_size": 3584, "patch_size": 14,
                      "window_size": 112, "fullatt_block_indexes": [7, 15, 23, 31]}}
LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
                    "intermediate_size_mlp": 16384, "num_attention_heads": 40,
                    "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 48,
                    "num_local_experts": 16, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 1, "attention_chunk_size": 8192,
                    "vocab_size": 202048, "max_position_embeddings": 10485760,
                    "rope_theta": 500000.0, "use_qk_norm": True},
    "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                      "num_hidden_layers": 34, "num_attention_heads": 16, "image_size": 336,
                      "patch_size": 14, "intermediate_size": 5632, "vision_output_dim": 4096}}
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
    "mm_tokens_per_image": 256,
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}}
LLAVA_15_7B = {
    "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
    "ignore_index": -100, "image_token_index": 32000, "projector_hidden_act": "gelu",
    "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                    "max_position_embeddings": 4096, "model_type": "llama",
                    "rms_norm_eps": 1e-05, "torch_dtype": "float16", "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064}
IDEFICS3_8B = {
    "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
    "image_token_id": 128257, "scale_factor": 2,
    "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "vocab_size": 128259,
                    "max_position_embeddings": 131072, "tie_word_embeddings": False},
    "vision_config": {"hidden_size": 1152, "image_size": 364, "intermediate_size": 4304,
                      "model_type": "idefics3", "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14}}
INTERNVL3_1B_HF = {
    "architectures": ["InternVLForConditionalGeneration"], "model_type": "internvl",
    "downsample_ratio": 0.5, "image_token_id": 151667, "projector_hidden_act": "gelu",
    "text_config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                    "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
                    "num_hidden_layers": 24, "num_key_value_heads": 2, "vocab_size": 151674,
                    "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                    "tie_word_embeddings": True, "hidden_act": "silu"},
    "vision_config": {"model_type": "internvl_vision", "hidden_size": 1024,
                      "num_hidden_layers": 24, "num_attention_heads": 16,
                      "intermediate_size": 4096, "image_size": [448, 448],
                      "patch_size": [14, 14]}}
INTERNVL25_1B = {  # InternVL's own code (auto_map): llm_config, vision_config
    "architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
    "downsample_ratio": 0.5, "template": "internvl2_5",
    "llm_config": {**INTERNVL3_1B_HF["text_config"], "vocab_size": 151674},
    "vision_config": {"architectures": ["InternVisionModel"], "model_type": "intern_vit_6b",
                      "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16}}
QWEN2_AUDIO_7B = {
    "architectures": ["Qwen2AudioForConditionalGeneration"], "model_type": "qwen2_audio",
    "audio_token_index": 151646,
    "audio_config": {"model_type": "qwen2_audio_encoder", "d_model": 1280, "encoder_layers": 32,
                     "encoder_attention_heads": 20, "encoder_ffn_dim": 5120,
                     "num_mel_bins": 128},
    "text_config": {"model_type": "qwen2", "vocab_size": 156032, "rope_theta": 10000}}
T5_SMALL = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_ff": 2048,
            "d_kv": 64, "d_model": 512, "num_heads": 8, "num_layers": 6, "vocab_size": 32128}


def _refused(cfg):
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "config.json")
    return err.value.errors[0]


ENCODER = ("describes an encoder (and its projector) whose output tokens join the language "
           "model's sequence; that compute is not modelled")


@pytest.mark.parametrize("cfg", [QWEN2_VL_7B, QWEN25_VL_7B])
def test_flat_qwen_vl_configs_are_refused_by_vision_config_without_a_guess(cfg):
    """Qwen2-VL's language-model keys sit beside vision_config: the file does not say which
    decoder they describe, so no way to plan it alone is offered."""
    e = _refused(cfg)
    assert e.field == "config.json: vision_config"
    assert e.message == (f"{cfg['architectures'][0]} is not a decoder alone: its vision_config "
                         f"{ENCODER}, and the language model alone would be another model than "
                         "the one trained. The file has no text_config: its language model's keys "
                         "are not separated from the rest and it does not name their decoder "
                         "architecture, so the language model is not planned alone")


def test_llama4_names_vision_config_and_why_its_language_model_is_not_modelled():
    e = _refused(LLAMA4_SCOUT)
    assert e.field == "config.json: vision_config"
    why = REFUSED_ARCHITECTURES["Llama4ForCausalLM"][1]
    assert e.message.endswith(f"Its language model (text_config: Llama4ForCausalLM) is not "
                              f"modelled either: {why} (text_config.attention_chunk_size)")


def test_gemma3_says_what_stops_its_text_config():
    """gemma-3-4b's text_config leaves num_attention_heads to Gemma3TextConfig's default, which
    the importer does not know: the message names it (in the nested config) instead of a
    guess."""
    e = _refused(GEMMA3_4B)
    assert e.field == "config.json: vision_config"
    assert "Its language model (text_config: Gemma3ForCausalLM) does not import as it is: " \
        "config.json: text_config: num_attention_heads: " in e.message
    assert e.message.endswith('To plan it alone, fix that, save text_config as its own '
                              'config.json with "architectures": ["Gemma3ForCausalLM"] and '
                              'import that')


def test_mistral3_says_how_and_the_saved_text_config_imports():
    e = _refused(MISTRAL_SMALL_31)
    assert e.field == "config.json: vision_config"
    assert e.message.endswith('To plan its language model alone (MistralForCausalLM), save '
                              'text_config as its own config.json with "architectures": '
                              '["MistralForCausalLM"] and import that')


def test_llava_names_the_missing_size_of_its_text_config():
    """llava-1.5's text_config keeps only what differs from LlamaConfig's defaults: no
    hidden_size, which the importer requires."""
    e = _refused(LLAVA_15_7B)
    assert e.field == "config.json: vision_config"
    assert "Its language model (text_config: LlamaForCausalLM) does not import as it is: " \
        "config.json: text_config: num_hidden_layers" in e.message
    # the nested architectures is already the class: nothing to add
    assert e.message.endswith("save text_config as its own config.json and import that")


def test_idefics3_text_config_saved_as_the_message_says_is_llama3_8b_with_its_vocabulary():
    e = _refused(IDEFICS3_8B)
    assert e.message.endswith('To plan its language model alone (LlamaForCausalLM), save '
                              'text_config as its own config.json with "architectures": '
                              '["LlamaForCausalLM"] and import that')
    m = session_from_hf_config({**IDEFICS3_8B["text_config"],
                                "architectures": ["LlamaForCausalLM"]}).session.model
    assert (m.num_layers, m.hidden_size, m.num_query_groups, m.ffn_hidden_size,
            m.vocab_size) == (32, 4096, 8, 14336, 128259)


@pytest.mark.parametrize("cfg,nested", [(INTERNVL3_1B_HF, "text_config"),
                                        (INTERNVL25_1B, "llm_config")])
def test_internvl_text_and_llm_config(cfg, nested):
    e = _refused(cfg)
    assert e.field == "config.json: vision_config"
    assert e.message.endswith(f"To plan its language model alone (Qwen2ForCausalLM), save "
                              f"{nested} as its own config.json and import that")
    m = session_from_hf_config(cfg[nested]).session.model
    # Qwen2.5-0.5B's decoder (tied), its 151,674 tokens padded to 151,680 (Megatron's 128)
    h, L, V, f, g, d = 896, 24, 151680, 4864, 2, 64
    assert mm.num_parameters(m, 1) == L * (h * (14 + 2 * g) * d + (14 + 2 * g) * d
                                           + 14 * d * h + 3 * h * f + 2 * h) + V * h + h


def test_an_audio_encoder_is_named_by_audio_config():
    e = _refused(QWEN2_AUDIO_7B)
    assert e.field == "config.json: audio_config"
    assert e.message.startswith("Qwen2AudioForConditionalGeneration is not a decoder alone: its "
                                "audio_config describes an encoder")


def test_a_sequence_to_sequence_model_is_named_by_architectures():
    e = _refused(T5_SMALL)
    assert e.field == "config.json: architectures"
    assert "T5ForConditionalGeneration is not a decoder alone: transformers' " \
        "ForConditionalGeneration models put an encoder" in e.message


def test_a_causal_lm_with_a_vision_config_is_refused_too():
    """The structure decides, not the name: a Llama file with a vision tower is not Llama."""
    from tests.test_llama import LLAMA3_8B
    e = _refused({**LLAMA3_8B, "vision_config": LLAVA_15_7B["vision_config"]})
    assert e.field == "config.json: vision_config"
    assert e.message.startswith("LlamaForCausalLM is not a decoder alone")


@pytest.mark.parametrize("key", ["vision_config", "audio_config", "text_config", "llm_config"])
def test_a_null_part_is_multimodal_only_for_a_conditional_generation_class(key):
    """transformers' LlamaForCausalLM never reads vision_config (or text_config ...): a null one
    describes no encoder and no nested model, so it is not refused as multimodal ("its
    vision_config describes an encoder", which it said) but as a key the importer does not know;
    LLaVA's config class fills a default CLIP vision encoder for vision_config=None
    (LlavaConfig.__init__), so there the null part is still refused by its key."""
    from tests.test_llama import LLAMA3_8B
    with pytest.raises(ConfigError) as err:
        session_from_hf_config({**LLAMA3_8B, key: None}, "config.json")
    e = err.value.errors[0]
    assert (e.field, e.message) == (f"config.json: {key}", "is not known to the importer, so we "
                                    "cannot tell whether it changes the model; remove it if it "
                                    "does not")
    with pytest.raises(ConfigError) as err:
        session_from_hf_config({**LLAMA3_8B, key: {"model_type": "x"}}, "config.json")
    assert err.value.errors[0].message.startswith("LlamaForCausalLM is not a decoder alone")
    llava = {**LLAMA3_8B, "architectures": ["LlavaForConditionalGeneration"], key: None}
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(llava, "config.json")
    e = err.value.errors[0]
    assert e.field == f"config.json: {key}"
    assert e.message.startswith("LlavaForConditionalGeneration is not a decoder alone: its "
                                + (f"{key} describes an encoder" if key in ("vision_config",
                                                                           "audio_config") else
                                   f"language model is nested under {key}"))
