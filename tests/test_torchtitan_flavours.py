"""torchtitan's model flavours (core/io/torchtitan_flavours.py) through ``vtrain import
torchtitan``: each imported model's shape against torchtitan 0.3.0's flavour functions
(``torchtitan/models/*/__init__.py``), its parameter count against the count of the modules
those functions build (written out here, module by module), and the flavours refused by
name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.io.torchtitan_flavours import FLAVOURS, REFUSED_FLAVOURS, REFUSED_MODELS
from core.io.torchtitan_import import load_toml, session_from_torchtitan
from core.model.counts import num_parameters
from core.plan.fields import ConfigError

ROOT = Path(__file__).resolve().parents[1]
LLAMA3_8B = ROOT / "tests" / "data" / "torchtitan" / "llama3_8b.toml"


def _import(name: str, flavor: str):
    """The model ``vtrain import torchtitan`` builds for the released llama3_8b.toml with
    ``[model] name, flavor`` replaced (8 GPUs of FSDP, 8,192 tokens) and full checkpointing
    (per-op checkpointing of an MoE model is not modelled), compiled (an uncompiled MoE
    flavour's eager experts are refused: test_torchtitan_import)."""
    raw = load_toml(LLAMA3_8B)
    raw["model"].update(name=name, flavor=flavor)
    raw["compile"]["enable"] = True
    raw["activation_checkpoint"]["mode"] = "full"
    return session_from_torchtitan(raw, num_gpus=8)


def _gqa(dim, heads, kv_heads, head_dim, qk_norm=False):
    """torchtitan's GQAttention (make_gqa_config): fused wqkv, wo, no biases; Qwen3's q_norm
    and k_norm (RMSNorm over head_dim)."""
    return (dim * (heads + 2 * kv_heads) * head_dim + heads * head_dim * dim
            + (2 * head_dim if qk_norm else 0))


def _swiglu(dim, hidden):
    return 3 * dim * hidden  # w1, w2, w3 (FeedForward)


def _decoder(layers, dim, vocab, tied, layer):
    """Decoder: tok_embeddings, the layers (each with attention_norm and ffn_norm), norm,
    lm_head (none with enable_weight_tying)."""
    return vocab * dim + layers * (layer + 2 * dim) + dim + (0 if tied else vocab * dim)


def _mla(dim, heads, q_lora):
    """DeepSeek's make_mla_attention_config: wq (q_lora 0) or wq_a, q_norm, wq_b; wkv_a,
    kv_norm, wkv_b, wo (kv_lora 512, heads of 128 + 64, values of 128)."""
    q = dim * heads * 192 if q_lora == 0 else dim * q_lora + q_lora + q_lora * heads * 192
    return q + dim * (512 + 64) + 512 + 512 * heads * (128 + 128) + heads * 128 * dim


def _mla_moe(layers, dim, heads, q_lora, dense_ffn, moe_ffn, experts, shared, dense_layers,
             vocab):
    """build_mla_moe_layers: dense FeedForward in the first layers, then router gate (no
    bias), GroupedExperts (w1, w2, w3 per expert) and the shared experts' FeedForward."""
    attention = _mla(dim, heads, q_lora)
    moe = dim * experts + experts * _swiglu(dim, moe_ffn) + _swiglu(dim, moe_ffn * shared)
    return (vocab * dim * 2 + dim + layers * (attention + 2 * dim)
            + dense_layers * _swiglu(dim, dense_ffn) + (layers - dense_layers) * moe)


def _gpt_oss(layers, dim, experts, vocab):
    """GPT-OSS (_make_gptoss_attn_config, _make_gptoss_experts_config): 64 heads of 64, 8 KV
    heads, wqkv and wo with biases, a sink per head; router gate with bias; each expert
    mlp1 (dim -> 2 * 2880) and mlp2 (2880 -> dim), both with biases."""
    attention = dim * 80 * 64 + 80 * 64 + 64 * 64 * dim + dim + 64
    moe = dim * experts + experts + experts * (dim * 5760 + 5760 + 2880 * dim + dim)
    return _decoder(layers, dim, vocab, False, attention + moe)


#: (name, flavor) -> (layers, hidden, heads, KV heads, FFN, vocabulary, parameters): the
#: arguments of torchtitan 0.3.0's flavour function and its modules' count.
CASES = {
    # llama3/__init__.py: _debugmodel hidden_dim compute_ffn_hidden_dim(256, multiple_of=256):
    # int(2*4*256/3) = 682, up to 768; _1b (2048, 1024, 1.5): int(1.5 * 5461) = 8191, up to
    # 8192; _3b (3072, 1024, 1.0): 8192
    ("llama3", "debugmodel"): (6, 256, 16, 16, 768, 2048,
                               _decoder(6, 256, 2048, False, _gqa(256, 16, 16, 16)
                                        + _swiglu(256, 768))),
    ("llama3", "1B"): (16, 2048, 32, 8, 8192, 128256,
                       _decoder(16, 2048, 128256, True, _gqa(2048, 32, 8, 64)
                                + _swiglu(2048, 8192))),
    ("llama3", "3B"): (28, 3072, 24, 8, 8192, 128256,
                       _decoder(28, 3072, 128256, True, _gqa(3072, 24, 8, 128)
                                + _swiglu(3072, 8192))),
    # qwen3/__init__.py: head_dim 128 in every flavour, qk_norm
    ("qwen3", "debugmodel"): (8, 256, 16, 8, 3072, 2048,
                              _decoder(8, 256, 2048, True, _gqa(256, 16, 8, 128, True)
                                       + _swiglu(256, 3072))),
    ("qwen3", "0.6B"): (28, 1024, 16, 8, 3072, 151936,
                        _decoder(28, 1024, 151936, True, _gqa(1024, 16, 8, 128, True)
                                 + _swiglu(1024, 3072))),
    ("qwen3", "14B"): (40, 5120, 40, 8, 17408, 151936,
                       _decoder(40, 5120, 151936, False, _gqa(5120, 40, 8, 128, True)
                                + _swiglu(5120, 17408))),
    ("qwen3", "debugmodel_moe"): (8, 256, 16, 8, None, 2048,
                                  _decoder(8, 256, 2048, False, _gqa(256, 16, 8, 128, True)
                                           + 256 * 64 + 64 * _swiglu(256, 768))),
    ("qwen3", "235B-A22B"): (94, 4096, 64, 4, None, 151936,
                             _decoder(94, 4096, 151936, False, _gqa(4096, 64, 4, 128, True)
                                      + 4096 * 128 + 128 * _swiglu(4096, 1536))),
    # deepseek_v3/__init__.py
    ("deepseek_v3", "debugmodel"): (6, 256, 16, 16, 1024, 2048,
                                    _mla_moe(6, 256, 16, 0, 1024, 256, 8, 2, 1, 2048)),
    ("deepseek_v3", "16B"): (27, 2048, 16, 16, 10944, 102400,
                             _mla_moe(27, 2048, 16, 0, 10944, 1408, 64, 2, 1, 102400)),
    ("deepseek_v3", "236B"): (60, 5120, 128, 128, 12288, 102400,
                              _mla_moe(60, 5120, 128, 1536, 12288, 1536, 160, 2, 1, 102400)),
    ("deepseek_v3", "671B"): (61, 7168, 128, 128, 18432, 129280,
                              _mla_moe(61, 7168, 128, 1536, 18432, 2048, 256, 1, 3, 129280)),
    # gpt_oss/__init__.py
    ("gpt_oss", "debugmodel"): (4, 256, 64, 8, None, 2048, _gpt_oss(4, 256, 8, 2048)),
    ("gpt_oss", "20b"): (24, 2880, 64, 8, None, 201088, _gpt_oss(24, 2880, 32, 201088)),
    # kimi_k2_7/__init__.py _moonlight_16b_a3b_config
    ("kimi_k2_5", "moonlight-16B-A3B"): (27, 2048, 16, 16, 11264, 163840,
                                         _mla_moe(27, 2048, 16, 0, 11264, 1408, 64, 2, 1,
                                                  163840)),
}


@pytest.mark.parametrize("name,flavor", list(CASES))
def test_flavour_shape_and_parameters(name, flavor):
    layers, hidden, heads, kv_heads, ffn, vocab, params = CASES[name, flavor]
    m = _import(name, flavor).session.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups,
            m.vocab_size, m.seq_length) == (layers, hidden, heads, kv_heads, vocab, 8192)
    if ffn is not None:  # MoE flavours without dense layers have no dense hidden size
        assert m.ffn_hidden_size == ffn
    assert num_parameters(m) == params


def test_published_counts():
    """Anchors outside torchtitan: the Hugging Face model cards' sizes of the same shapes
    (Llama 3.2 1B: 1,235,814,400 in meta-llama/Llama-3.2-1B's safetensors; Qwen3-0.6B:
    0.44 B without the embedding; DeepSeek-V2-Lite: 15.7 B)."""
    assert CASES["llama3", "1B"][-1] == 1_235_814_400
    assert round((CASES["qwen3", "0.6B"][-1] - 151936 * 1024) / 1e9, 2) == 0.44
    assert round(CASES["deepseek_v3", "16B"][-1] / 1e9, 1) == 15.7


def test_every_flavour_imports():
    """Every flavour builds a session that passes the session rules."""
    for name, flavor in FLAVOURS:
        s = _import(name, flavor).session
        assert s.model.name.endswith(f"(torchtitan {name} {flavor})")


def test_unknown_flavour_lists_the_known_ones():
    with pytest.raises(ConfigError) as err:
        _import("qwen3", "72B")
    [e] = err.value.errors
    assert e.field == "config.toml: model.flavor"
    assert all(f"{n} {f}" in e.message for n, f in FLAVOURS)
    with pytest.raises(ConfigError) as err:
        _import("mistral", "7B")
    assert err.value.errors[0].field == "config.toml: model.name"


@pytest.mark.parametrize("name,flavor,key", [
    ("kimi_k2_5", "Kimi-K2.5", "model.flavor"),
    ("llama3", "debugmodel_varlen_attn", "model.flavor"),
    ("qwen3_5", "27B", "model.name"),
    ("muse_glimmer", "30B", "model.name"),
])
def test_flavours_with_unmodelled_features_are_refused_by_name(name, flavor, key):
    with pytest.raises(ConfigError) as err:
        _import(name, flavor)
    [e] = err.value.errors
    assert e.field == f"config.toml: {key}"
    reason = REFUSED_FLAVOURS.get((name, flavor)) or REFUSED_MODELS[name]
    assert e.message.endswith(reason)


def test_older_block_causal_flavours_are_noted():
    notes = _import("deepseek_v3", "16B").notes
    assert any("block-causal" in n for n in notes)
    assert not any("block-causal" in n for n in _import("qwen3", "8B").notes)


def test_cli_refuses_an_unknown_flavour(tmp_path):
    text = LLAMA3_8B.read_text().replace('flavor = "8B"', 'flavor = "7B"')
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "torchtitan", str(cfg),
                        "--num-gpus", "8", "--out", str(tmp_path / "s.json")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith("vtrain: error: c.toml: model.flavor: llama3 '7B'")
    assert not (tmp_path / "s.json").exists()


def test_docs_list_every_flavour():
    text = (ROOT / "docs" / "torchtitan.md").read_text()
    table = text[text.index("## Flavours"):]
    rows = set(re.findall(r"^\| `([\w.]+)` \| `([\w.-]+)` \|", table, re.M))
    assert rows == set(FLAVOURS) | set(REFUSED_FLAVOURS)
