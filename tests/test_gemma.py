"""Gemma 2 and Gemma 3 as model families (issue 28: a model family is a layer spec).

Published sizes: google/gemma-2-9b 9,241,705,984 and google/gemma-2-27b 27,227,128,320
parameters (the Hugging Face checkpoints' safetensors totals; the Gemma 2 report's Table 1
rounds them to 9.24 B and 27.2 B), google/gemma-3-1b-pt 999,885,952. The configs are the
checkpoints' ``config.json`` shape fields (the ones that change nothing left out).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.io.hf_import import session_from_hf_config
from core.io.session import load_session, save_session
from core.model import model_math as mm
from core.model.norms import NORM_FLOPS
from core.model.softcap import SOFTCAP_FLOPS
from core.model.kernels import op_key
from core.model.spec import FAMILIES
from core.plan.model_config import MODEL_FAMILIES
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.rules import validate

GEMMA2 = {"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0,
          "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
          "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
          "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_size": 4096,
          "vocab_size": 256000, "cache_implementation": "hybrid", "rms_norm_eps": 1e-06}
GEMMA2_9B = {**GEMMA2, "hidden_size": 3584, "intermediate_size": 14336,
             "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8}
GEMMA2_27B = {**GEMMA2, "hidden_size": 4608, "intermediate_size": 36864, "head_dim": 128,
              "num_attention_heads": 32, "num_hidden_layers": 46, "num_key_value_heads": 16,
              "query_pre_attn_scalar": 144}
GEMMA3_1B = {"architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": None,
             "final_logit_softcapping": None, "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
             "intermediate_size": 6912, "max_position_embeddings": 32768,
             "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
             "query_pre_attn_scalar": 256, "rope_local_base_freq": 10000, "rope_scaling": None,
             "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
             "vocab_size": 262144}


def _model(cfg, seq=8192):
    return session_from_hf_config(cfg, "config.json", seq_length=seq).session.model


@pytest.mark.parametrize("cfg,published", [(GEMMA2_9B, 9_241_705_984),
                                           (GEMMA2_27B, 27_227_128_320),
                                           (GEMMA3_1B, 999_885_952)])
def test_published_parameter_counts(cfg, published):
    """The Gemma family's count is the checkpoint's, to the parameter (four RMSNorms a layer,
    tied embedding, QK-norm per head in Gemma 3)."""
    assert mm.num_parameters(_model(cfg)) == published


def test_the_import_builds_the_family_and_its_layer_pattern():
    m2, m3 = _model(GEMMA2_9B), _model(GEMMA3_1B)
    assert (m2.family, m2.activation, m2.tied_embeddings) == ("gemma2", "geglu", True)
    assert (m2.window_size, m2.window_attn_skip_freq, m2.qk_layernorm) == (4096, 2, False)
    assert (m3.family, m3.window_size, m3.window_attn_skip_freq, m3.qk_layernorm) == (
        "gemma3", 512, 6, True)
    # Gemma 2: layers 0, 2, 4 ... (0-based) sliding; Gemma 3: every 6th global
    assert list(mm.window_layer_mask(m2)[:4]) == [True, False, True, False]
    assert [i for i, w in enumerate(mm.window_layer_mask(m3)) if not w] == [5, 11, 17, 23]
    spec2, spec3 = mm.layer_spec(m2), mm.layer_spec(m3)
    assert spec2.norm.per_layer == spec3.norm.per_layer == 4
    assert spec2.attention.logit_softcap and spec2.final_logit_softcap and spec2.embedding_scale
    assert not (spec3.attention.logit_softcap or spec3.final_logit_softcap)
    assert spec2.mlp.gated and spec2.attention.kind == "gqa"


@pytest.mark.parametrize("cfg,bad", [(GEMMA2_9B, {"attn_logit_softcapping": None}),
                                     (GEMMA3_1B, {"final_logit_softcapping": 30.0}),
                                     (GEMMA3_1B, {"hidden_activation": "silu"})])
def test_configs_that_disagree_with_the_family_are_refused(cfg, bad):
    from core.plan.fields import ConfigError
    with pytest.raises(ConfigError) as err:
        _model({**cfg, **bad})
    assert err.value.errors[0].field == f"config.json: {next(iter(bad))}"


def test_families_registered_are_the_field_choices():
    assert set(FAMILIES) == set(MODEL_FAMILIES)


def _pair(t=2, sp=True, b=1):
    """Gemma 2 9B and the same shape as a dense model, and the plan."""
    m = _model(GEMMA2_9B)
    pl = ParallelPlan(tensor_parallel=t, pipeline_parallel=1, data_parallel=1,
                      micro_batch_size=b, global_batch_size=b, sequence_parallel=sp)
    return m, dataclasses.replace(m, family="dense"), pl


def _by_name(kernels):
    return {k.name: k for k in kernels}


def test_forward_kernels_add_the_post_norm_and_the_capped_scores():
    """attention_fwd: the dense kernels, FlashAttention's FLOPs plus 3 per score (its FLOPs are
    4 dh per score), and a post-attention RMSNorm over the rank's s/t tokens."""
    m, dense, pl = _pair()
    key, dkey = op_key(m, pl), op_key(dense, pl)
    assert key["fam"] == "gemma2" and "fam" not in dkey
    got, want = mm.op_kernels("attention_fwd", key), mm.op_kernels("attention_fwd", dkey)
    assert [k.name for k in got] == [k.name for k in want] + ["post_attn_rmsnorm"]
    dh = 256
    flash, flash_d = _by_name(got)["flash_attn"], _by_name(want)["flash_attn"]
    assert flash.flops == flash_d.flops * (1 + SOFTCAP_FLOPS[0] / (4 * dh))
    assert flash.bytes == flash_d.bytes
    rows = 8192 * 3584 / 2  # b s h / t elements under sequence parallelism
    norm = _by_name(got)["post_attn_rmsnorm"]
    assert (norm.flops, norm.bytes) == (NORM_FLOPS[0] * rows, 2 * 2 * rows)
    mlp = mm.op_kernels("mlp_fwd", key)
    fc1 = _by_name(mlp)["fc1"]
    assert (fc1.m, fc1.n, fc1.k) == (8192, 2 * 14336 // 2, 3584)  # GeGLU: gate and up, 2f/t
    assert "bias_swiglu" in _by_name(mlp)  # the fused gated activation's bytes
    assert [k.name for k in mlp][-2:] == ["post_mlp_rmsnorm", "bias_dropout_add"]
    assert [k.name for k in mlp if k.name != "post_mlp_rmsnorm"] == [
        k.name for k in mm.op_kernels("mlp_fwd", dkey)]


def test_backward_and_edge_kernels():
    m, dense, pl = _pair()
    key, dkey = op_key(m, pl), op_key(dense, pl)
    bwd = _by_name(mm.op_kernels("attention_bwd", key))
    bwd_d = _by_name(mm.op_kernels("attention_bwd", dkey))
    assert bwd["flash_attn_bwd"].flops == bwd_d["flash_attn_bwd"].flops * (
        1 + SOFTCAP_FLOPS[1] / (10 * 256))
    assert bwd["post_attn_rmsnorm_bwd"].bytes == 4 * 2 * 8192 * 3584 / 2
    T, h, V = 8192, 3584, 256000  # V is a multiple of 128 t: unpadded
    emb = _by_name(mm.op_kernels("embedding_fwd", key))["embedding_scale"]
    assert (emb.flops, emb.bytes) == (T * h, 2 * 2 * T * h)
    out = _by_name(mm.op_kernels("output_fwd", key))["final_logit_softcap"]
    assert (out.flops, out.bytes) == (SOFTCAP_FLOPS[0] * T * V / 2, 2 * 2 * T * V / 2)
    assert "final_logit_softcap_bwd" in _by_name(mm.op_kernels("output_bwd", key))


def test_gemma3_has_no_soft_capping():
    m = _model(GEMMA3_1B)
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                      micro_batch_size=1, global_batch_size=1)
    key = op_key(m, pl)
    names = {k.name for op in ("attention_fwd", "attention_bwd", "output_fwd", "output_bwd")
             for k in mm.op_kernels(op, key)}
    assert not any("softcap" in n for n in names)
    assert {"post_attn_rmsnorm", "qk_rmsnorm"} <= names


def test_unfused_attention_caps_the_score_tensor():
    m, dense, pl = _pair(t=1, sp=False)
    m, dense = (dataclasses.replace(x, attention_kernel="unfused", window_size=None,
                                    window_attn_skip_freq=None) for x in (m, dense))
    k = _by_name(mm.op_kernels("attention_fwd", op_key(m, pl)))
    scores = 16 * 8192 * 8192  # b a/t s s
    assert (k["attn_softcap"].flops, k["attn_softcap"].bytes) == (3 * scores, 2 * 2 * scores)


def test_activation_memory_adds_the_post_norm_inputs():
    """Two more norms keep their inputs: 2 sbh bytes each in 16 bits, /t with sequence
    parallelism (Korthikanti et al. 2022's accounting of the pre-norms)."""
    m, dense, pl = _pair()
    for mode in ("none", "selective"):
        extra = (mm.activation_bytes_per_layer(m, pl, mode)
                 - mm.activation_bytes_per_layer(dense, pl, mode))
        assert extra == 2 * 2 * 8192 * 1 * 3584 / 2
    assert mm.activation_bytes_per_layer(m, pl, "full") == mm.activation_bytes_per_layer(
        dense, pl, "full")


def test_flops_are_the_dense_layers_gemms():
    """Model FLOPs count GEMMs (GeGLU's three ffn matrices as SwiGLU's); the family's elementwise
    work is in its kernels only."""
    m, dense, pl = _pair()
    assert mm.model_flops_per_iteration(m, pl) == mm.model_flops_per_iteration(dense, pl)
    swiglu = dataclasses.replace(dense, activation="swiglu")
    assert mm.num_parameters(swiglu) == mm.num_parameters(dense)
    assert mm.num_parameters(m) == mm.num_parameters(dense) + 2 * 3584 * 42


def test_simulation_and_session_round_trip(tmp_path):
    """A Gemma session simulates (its ops slower than the dense shape's: more kernels) and
    saves and loads with its family; a session file without the family field opens as dense."""
    from core.sim.simulate import simulate
    m, dense, pl = _pair()
    s = Session(model=m, plan=pl)
    assert validate(s) == []
    t_gemma = simulate(s).report.iteration_time_s
    t_dense = simulate(Session(model=dense, plan=pl)).report.iteration_time_s
    assert t_gemma > t_dense
    path = tmp_path / "gemma.json"
    save_session(s, path)
    assert load_session(path).model == m
    doc = json.loads(path.read_text())
    del doc["model"]["family"]
    path.write_text(json.dumps(doc))
    assert load_session(path).model == dense


@pytest.mark.parametrize("fusion,schedule,m", [(False, "1f1b", 4), (True, "1f1b", 4),
                                               (False, "gpipe", 4)])
def test_final_logit_softcap_keeps_the_tanh_output(fusion, schedule, m):
    """Gemma 2's capped logits keep the cap's tanh output, s b V'/t e bytes per loss awaiting
    its backward (core.model.softcap.final_logit_softcap_bytes): the only memory Gemma 2 adds
    to the same model as Gemma 3 with FlashAttention (no score tensor), on the last stage."""
    g2 = _model(GEMMA2_9B, seq=4096)
    g3 = dataclasses.replace(g2, family="gemma3")
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=1,
                      micro_batch_size=1, global_batch_size=m, sequence_parallel=True,
                      schedule=schedule, cross_entropy_loss_fusion=fusion,
                      cross_entropy_fusion_impl="te")
    assert validate(Session(model=g2, plan=pl)) == []
    a2, a3 = mm.stage_memory(g2, pl), mm.stage_memory(g3, pl)
    losses = m if schedule == "gpipe" else 1  # the losses awaiting their backward
    assert a2[0] == a3[0]
    assert a2[1].activations_bytes - a3[1].activations_bytes == 4096 * 256000 / 2 * 2 * losses


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_megatron_export_refuses_a_family_megatron_has_no_layer_for(family):
    """Megatron-LM's pretrain_gpt.py builds only Megatron-Core's GPT layer specs: a Gemma
    session is refused naming model.family (never exported as the dense model it is not);
    the same shape as a dense model with a GeLU MLP exports."""
    from core.io.megatron.arguments import MegatronArgsError
    from core.io.megatron.from_session import export_arguments
    m, dense, pl = _pair()
    m = dataclasses.replace(m, family=family)
    with pytest.raises(MegatronArgsError) as err:
        export_arguments(Session(model=m, plan=pl))
    assert str(err.value).startswith("model.family")
    with pytest.raises(MegatronArgsError) as err:
        export_arguments(Session(model=dense, plan=pl))
    assert str(err.value).startswith("model.activation")
    words = export_arguments(Session(model=dataclasses.replace(dense, activation="gelu"), plan=pl))
    assert words[words.index("--num-layers") + 1] == "42"


def test_gemma_with_experts_is_refused_by_validation_naming_the_family():
    """A Gemma family with experts (or MTP) is refused when the session is validated, naming
    model.family and the rule, not first when it is simulated; the plan layer's list of
    dense-only families is the model layer's."""
    from core.plan.fields import NOT_MODELLED
    from core.plan.model_config import DENSE_ONLY_FAMILIES

    assert DENSE_ONLY_FAMILIES == {name for name, f in FAMILIES.items() if f.dense_only}
    m, _, pl = _pair()
    moe = dataclasses.replace(m, num_experts=8, moe_top_k=2, moe_ffn_hidden_size=4096)
    errs = [e for e in validate(Session(model=moe, plan=pl)) if e.field == "model.family"]
    assert len(errs) == 1 and errs[0].rule == NOT_MODELLED
    assert "family='gemma2' with experts (num_experts) is not modelled" in errs[0].message
    mtp = dataclasses.replace(m, mtp_num_layers=1)
    assert "model.family" in [e.field for e in validate(Session(model=mtp, plan=pl))
                              if e.rule == NOT_MODELLED]


def test_gemma3_with_its_vision_tower_is_refused_for_the_tower():
    """Gemma3ForConditionalGeneration (the 4B-27B releases: text_config + vision_config) is
    refused for what the simulator lacks, the vision tower and its projector, named by
    vision_config (tests/test_hf_multimodal.py: every multimodal config by its structure). It
    named hidden_activation (not in such a file) and gave Gemma 3's GeGLU MLP and four norms as
    unmodelled, which Gemma3ForCausalLM models: a complete text_config is said to import as
    that."""
    from core.plan.fields import ConfigError
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {**{k: v for k, v in GEMMA3_1B.items() if k != "architectures"},
                           "model_type": "gemma3_text"},
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152}}
    with pytest.raises(ConfigError) as err:
        _model(cfg)
    e = err.value.errors[0]
    assert e.field == "config.json: vision_config"
    assert "its vision_config describes an encoder (and its projector)" in e.message
    assert e.message.endswith('To plan its language model alone (Gemma3ForCausalLM), save '
                              'text_config as its own config.json with "architectures": '
                              '["Gemma3ForCausalLM"] and import that')


# google/gemma-3-270m config.json (transformers 4.55): written with layer_types, the pattern's
# copy _sliding_window_pattern and use_bidirectional_attention (EmbeddingGemma's switch), both
# once refused as unknown keys
GEMMA3_270M = {"_sliding_window_pattern": 6, "architectures": ["Gemma3ForCausalLM"],
               "attention_bias": False, "attn_logit_softcapping": None,
               "final_logit_softcapping": None, "head_dim": 256,
               "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 640,
               "intermediate_size": 2048,
               "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                               for i in range(18)],
               "max_position_embeddings": 32768, "model_type": "gemma3_text",
               "num_attention_heads": 4, "num_hidden_layers": 18, "num_key_value_heads": 1,
               "query_pre_attn_scalar": 256, "rope_local_base_freq": 10000.0,
               "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 512,
               "use_bidirectional_attention": False, "vocab_size": 262144}


def test_gemma3_270m_as_transformers_455_writes_it():
    """Gemma 3 270M imports: the count by hand (tied 262144 x 640 embedding; per layer Q and O
    640 x 1024, K and V 640 x 256, GeGLU 3 x 640 x 2048, four RMSNorms of 640 and QK-norm 2 x
    256; the final norm) is the model card's 270M; the layers' pattern is layer_types'."""
    m = _model(GEMMA3_270M)
    layer = 2 * 640 * 1024 + 2 * 640 * 256 + 3 * 640 * 2048 + 4 * 640 + 2 * 256
    assert mm.num_parameters(m) == 262144 * 640 + 18 * layer + 640 == 268_098_176
    assert (m.family, m.window_size, m.window_attn_skip_freq, m.tied_embeddings) == (
        "gemma3", 512, 6, True)
    from core.plan.fields import ConfigError
    for bad in ({"_sliding_window_pattern": 4}, {"_sliding_window_pattern": 0},
                {"use_bidirectional_attention": True}):
        with pytest.raises(ConfigError) as err:
            _model({**GEMMA3_270M, **bad})
        assert err.value.errors[0].field == f"config.json: {next(iter(bad))}"
