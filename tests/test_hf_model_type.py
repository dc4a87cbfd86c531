"""A Hugging Face config whose ``model_type`` and ``architectures`` name two models.

transformers' ``AutoModelForCausalLM`` builds the class of the configuration ``model_type``
names (``AutoConfig``, then ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` in
``transformers/models/auto/modeling_auto.py``); ``architectures`` is only what was saved. The
importer used to follow ``architectures`` silently: ``model_type`` ``llama`` beside
``Qwen2ForCausalLM`` was read as Qwen2 (QKV biases), ``qwen3_moe`` beside ``Qwen3ForCausalLM``
as the dense Qwen3. The expected classes below are transformers 5.25.0's (the PyPI wheel,
``modeling_auto.py``: ``("llama", "LlamaForCausalLM")``, ``("qwen3_moe",
"Qwen3MoeForCausalLM")``, ``("internlm3", "LlamaForCausalLM")``, ``("exaone",
"LlamaForCausalLM")``, ``("sarvam_mla", "DeepseekV3ForCausalLM")``; no ``kimi_k2``).
"""

from __future__ import annotations

import pytest

from core.io.hf_import import causal_lm_classes, session_from_hf_config
from core.plan.fields import ConfigError
from tests.test_hf_families import QWEN25_7B
from tests.test_llama import LLAMA3_8B, QWEN3_8B


def _refusal(cfg):
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "x/config.json", seq_length=4096)
    return err.value.errors[0]


def test_the_table_is_transformers_5_25s():
    version, classes = causal_lm_classes()
    assert version == "5.25.0"
    assert classes["llama"] == "LlamaForCausalLM" and classes["qwen2"] == "Qwen2ForCausalLM"
    assert classes["qwen3_moe"] == "Qwen3MoeForCausalLM" and classes["qwen3"] == "Qwen3ForCausalLM"
    assert classes["gemma3_text"] == "Gemma3ForCausalLM"
    assert classes["gemma3"] == "Gemma3ForConditionalGeneration"
    assert sorted(t for t, c in classes.items() if c == "LlamaForCausalLM") == [
        "exaone", "internlm3", "iquestcoder", "llama"]
    assert "kimi_k2" not in classes


def test_llama_model_type_with_qwen2_architecture_is_refused_by_name():
    # Qwen2.5-7B's file with model_type llama: transformers builds LlamaForCausalLM (no QKV
    # bias); the importer read Qwen2ForCausalLM (QKV biases) without a word
    err = _refusal({**QWEN25_7B, "model_type": "llama"})
    assert err.field == "x/config.json: model_type"
    assert "'llama' disagrees with architectures ['Qwen2ForCausalLM']" in err.message
    assert "builds LlamaForCausalLM" in err.message and "transformers 5.25.0" in err.message


def test_qwen3_moe_model_type_with_the_dense_qwen3_architecture_is_refused():
    err = _refusal({**QWEN3_8B, "model_type": "qwen3_moe"})
    assert err.field == "x/config.json: model_type"
    assert "builds Qwen3MoeForCausalLM" in err.message and "not Qwen3ForCausalLM" in err.message


def test_agreeing_configs_read_as_before_without_a_note():
    res = session_from_hf_config(QWEN25_7B, seq_length=4096)
    assert res.session.model.add_qkv_bias is True
    assert not [n for n in res.notes if "model_type" in n]
    res = session_from_hf_config(LLAMA3_8B, seq_length=4096)
    assert not [n for n in res.notes if "model_type" in n]


def test_an_alias_of_the_architecture_passes_with_a_note():
    # internlm3 is one of the model types transformers 5.25 builds LlamaForCausalLM for; its
    # InternLM3Config's defaults are not in the importer's table, so a needed key the file
    # leaves out is still refused by name, and a file that gives them is read
    cfg = {**LLAMA3_8B, "model_type": "internlm3"}
    assert _refusal(cfg).field == "x/config.json: head_dim"
    cfg.update(head_dim=128, sliding_window=None)
    res = session_from_hf_config(cfg, seq_length=4096)
    assert res.session.model == session_from_hf_config(LLAMA3_8B, seq_length=4096).session.model
    assert ("model_type 'internlm3': one of the names transformers 5.25.0 builds "
            "LlamaForCausalLM for (exaone, internlm3, iquestcoder, llama); read as "
            "LlamaForCausalLM") in res.notes


def test_a_model_type_transformers_does_not_map_leaves_the_architecture_with_a_note():
    res = session_from_hf_config({**LLAMA3_8B, "model_type": "my_llama", "head_dim": 128,
                                  "sliding_window": None}, seq_length=4096)
    assert res.session.model.num_layers == 32
    assert any(n.startswith("model_type 'my_llama': transformers 5.25.0's AutoModelForCausalLM "
                            "has no class for it") for n in res.notes)
