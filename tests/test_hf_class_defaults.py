"""A key a Hugging Face config.json leaves out takes its transformers configuration class's
default (resources/hf_config_defaults.json, core/io/hf_defaults.py), as transformers does, and
the import notes it; a needed key whose class default the importer does not know is refused by
name. Before, an absent sliding_window was no window, an absent num_key_value_heads MHA and an
absent Gemma head_dim h/a, whatever the class says."""

from __future__ import annotations

import pytest

from core.io.hf_defaults import load_class_defaults
from core.io.hf_import import DENSE_ARCHITECTURES, MOE_ARCHITECTURES, session_from_hf_config
from core.plan.fields import ConfigError
from tests.test_gemma import GEMMA2_9B, GEMMA3_1B
from tests.test_gpt_oss import GPT_OSS_120B
from tests.test_hf_families import MINITRON_8B
from tests.test_llama import LLAMA3_8B, MISTRAL_7B_V01, MIXTRAL_8X7B


def _without(cfg: dict, *keys: str) -> dict:
    return {k: v for k, v in cfg.items() if k not in keys}


def _import(cfg: dict):
    return session_from_hf_config(cfg, seq_length=8192)


@pytest.mark.parametrize("cfg,window,cls", [
    (MISTRAL_7B_V01, 4096, "MistralConfig"),
    (GEMMA2_9B, 4096, "Gemma2Config"),
    (GEMMA3_1B, 4096, "Gemma3TextConfig"),
    (GPT_OSS_120B, 128, "GptOssConfig"),
], ids=["mistral-7b-v0.1", "gemma2-9b", "gemma3-1b", "gpt-oss-120b"])
def test_absent_sliding_window_is_the_class_default(cfg, window, cls):
    """Mistral-7B-v0.1, Gemma 2, Gemma 3 and gpt-oss without sliding_window: MistralConfig,
    Gemma2Config and Gemma3TextConfig default it to 4096, GptOssConfig to 128 (it was no
    window); the same model as the file that gives the default, and a note naming the key and
    the class."""
    imp = _import(_without(cfg, "sliding_window", "sliding_window_size"))
    assert imp.session.model.window_size == window
    given = _import({**_without(cfg, "sliding_window_size"), "sliding_window": window})
    assert imp.session.model == given.session.model
    assert any("sliding_window" in n and cls in n for n in imp.notes)


@pytest.mark.parametrize("cfg,groups", [
    (MISTRAL_7B_V01, 8),  # MistralConfig: 8
    (MIXTRAL_8X7B, 8),    # MixtralConfig: 8
    (GPT_OSS_120B, 8),    # GptOssConfig: 8
    (GEMMA2_9B, 4),       # Gemma2Config: 4
    (LLAMA3_8B, None),    # LlamaConfig: None, i.e. num_attention_heads (MHA)
], ids=["mistral", "mixtral", "gpt-oss", "gemma2", "llama"])
def test_absent_num_key_value_heads_is_the_class_default(cfg, groups):
    m = _import(_without(cfg, "num_key_value_heads")).session.model
    assert m.num_query_groups == groups


def test_absent_gemma_head_dim_is_256():
    """Gemma2Config's head_dim is 256 (Gemma 2 9B's h/a is 224)."""
    m = _import(_without(GEMMA2_9B, "head_dim")).session.model
    assert m.kv_channels == 256 and GEMMA2_9B["hidden_size"] // 16 == 224
    assert _import(_without(GEMMA3_1B, "head_dim")).session.model.kv_channels == 256


def test_other_class_defaults_give_the_released_models():
    """Gemma 2's soft-caps (50, 30) and tied output layer, GPT-OSS's attention biases and
    swiglu_limit 7: a file without them is the released model (the caps were refused, GPT-OSS
    without attention_bias too)."""
    assert (_import(_without(GEMMA2_9B, "attn_logit_softcapping", "final_logit_softcapping"))
            .session.model == _import(GEMMA2_9B).session.model)
    assert _import(GEMMA3_1B).session.model.tied_embeddings is True
    assert (_import(_without(GPT_OSS_120B, "attention_bias", "swiglu_limit")).session.model
            == _import(GPT_OSS_120B).session.model)


def test_a_default_the_importer_does_not_know_is_refused_by_name():
    # a model_type without an entry: its class's defaults are unknown
    mine = {**MISTRAL_7B_V01, "model_type": "my_mistral", "head_dim": 128}
    with pytest.raises(ConfigError) as err:
        _import(_without(mine, "sliding_window"))
    assert err.value.errors[0].field == "config.json: sliding_window"
    # ... but a file that gives every needed key is read
    assert _import(mine).session.model.window_size == 4096
    # NemotronConfig's num_key_value_heads is None with no fallback to the heads
    with pytest.raises(ConfigError) as err:
        _import(_without(MINITRON_8B, "num_key_value_heads"))
    assert err.value.errors[0].field == "config.json: num_key_value_heads"


def test_every_architecture_has_one_class_in_the_table():
    _, table = load_class_defaults()
    for arch in (*DENSE_ARCHITECTURES, *MOE_ARCHITECTURES):
        assert sum(arch in e.architectures for e in table.values()) == 1, arch
