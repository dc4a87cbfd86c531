"""Multi-head latent attention (DeepSeek-V2/V3, Megatron-Core MLASelfAttention): parameters,
FLOPs, activation memory, the recompute module mla_up_proj, validation, imports."""

from __future__ import annotations

import dataclasses

import pytest

from core.model import model_math as mm
from core.plan.cluster import ClusterConfig
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.io.hf_import import session_from_hf_config
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import parse_arguments

# the main model (the preset has DeepSeek-V3's one MTP layer, as it was trained), with
# Megatron-LM's dropout of 0.1: the closed forms' 10 holds the two masks (the preset, as
# Megatron-Bridge, trains without dropout and keeps none: 8)
V3 = dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], mtp_num_layers=0, hidden_dropout=0.1,
                         attention_dropout=0.1)
# deepseek-ai/DeepSeek-V3 config.json (public), without the FP8 checkpoint's
# quantization_config and with num_nextn_predict_layers 0 (MTP is not modelled yet)
V3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 0,
    "pretraining_tp": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06, "rope_theta": 10000, "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False, "topk_group": 4,
    "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.33.1",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}


def test_deepseek_v3_parameters_match_the_published_671b_and_37b():
    # DeepSeek-V3 Technical Report: 671 B total, 37 B activated per token (the main model; the
    # 14 B multi-token prediction module comes on top, 685 B on Hugging Face)
    total = mm.num_parameters(V3)
    active = mm.num_active_parameters_with_embedding(V3)
    assert total == 671_026_404_352
    assert abs(total - 671e9) < 0.05e9
    assert 37e9 <= active < 38e9 and active == 37_552_282_624
    # DeepSeek's "37B" leaves out the input embedding (a lookup): 36.6 B, num_active_parameters
    assert mm.num_active_parameters(V3) == active - 129280 * 7168
    assert abs(mm.num_active_parameters(V3) - 37e9) < 0.5e9
    # per layer, by hand: q down 7168*1536, q norm 1536, q up 1536*128*192, kv down 7168*576,
    # kv norm 512, kv up 512*128*256, projection 128*128*7168, input RMSNorm 7168
    sharded, replicated = mm.attention_parameters(V3)
    assert sharded == 1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168
    assert replicated == 7168 * 1536 + 7168 * 576 + 1536 + 512 + 7168
    # the HF import of the public config gives the same model
    imp = session_from_hf_config(V3_CONFIG, seq_length=4096)
    assert mm.num_parameters(imp.session.model) == total
    assert "topk_method" in imp.ignored  # n_group, topk_group: the routing groups (below)


def test_mla_forward_flops_per_layer_closed_form():
    h, a, s = 7168, 128, 4096
    q = 2 * 1536 * h + 2 * 1536 * a * 192
    kv = 2 * h * 576 + 2 * 512 * a * 256
    proj = 2 * a * 128 * h
    core = 2 * s * a * 192 + 2 * s * a * 128
    linear, c = mm.mla_forward_flops_per_token(V3)
    assert (linear, c) == (q + kv + proj, core)
    layer, c2, out = mm.dense_forward_flops_per_token(V3, 1)
    assert layer == q + kv + proj + core + 6 * h * 18432 and c2 == core
    assert out == 2 * h * 129280
    # the attention op's kernels add up to the same GEMM FLOPs (t = 1, b = 1; the core is causal:
    # half of the s x s products, FlashAttention's count)
    key = dict(b=1, s=s, h=h, a=a, t=1, dtype="bf16", norm="rmsnorm", pos="rope", attn="flash",
               qkn=1, **mm.mla_key(V3))
    ks = mm.op_kernels("attention_fwd", key)
    assert sum(k.flops for k in ks if k.name != "flash_attn") == s * (q + kv + proj)
    assert sum(k.flops for k in ks if k.name == "flash_attn") == s * core / 2
    # tensor parallelism: up projections and heads split, down projections replicated
    ks2 = {k.name: k for k in mm.op_kernels("attention_fwd", {**key, "t": 8})}
    assert ks2["kv_down_proj"].n == 576 and ks2["q_down_proj"].m == s
    assert ks2["q_up_proj"].n == 128 * 192 // 8 and ks2["kv_up_proj"].n == 128 * 256 // 8
    ks3 = {k.name: k for k in mm.op_kernels("attention_fwd", {**key, "t": 8, "sp": True})}
    assert ks3["kv_down_proj"].m == s // 8 and ks3["kv_up_proj"].m == s  # SP: s/t tokens down


def _plan(**kw):
    base = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=1, micro_batch_size=1,
                global_batch_size=1, recompute="none")
    return ParallelPlan(**{**base, **kw})


def test_mla_activation_bytes_closed_form_and_mla_up_proj():
    dense = dataclasses.replace(V3, num_experts=None, moe_ffn_hidden_size=None, moe_router_num_groups=None,
                            moe_router_group_topk=None,
                                num_shared_experts=0, moe_first_dense_layers=0)
    s, h, a = 4096, 7168, 128
    sbh = s * h
    attn = 2 * a * (2 * 192 + 2 * 128) / h  # Q, K (192 channels), V, output (128)
    latent = 4 * (1536 + 512) / h           # latents' norm inputs and outputs
    mlp = 6 * 18432 / h
    for t, sp in ((1, False), (8, False), (8, True)):
        got = mm.activation_bytes_per_layer(dense, _plan(tensor_parallel=t, sequence_parallel=sp))
        want = (sbh / t * (10 + latent + attn + mlp) if sp
                else sbh * (10 + latent + (attn + mlp) / t))
        assert got == pytest.approx(want, rel=1e-12)
    # mla_up_proj: Q, K, V freed, the checkpoint keeps the pre-norm latents and the rotary key
    sel = mm.activation_bytes_per_layer(dense, _plan(recompute="selective",
                                                     recompute_modules="mla_up_proj"))
    want = sbh * (10 + 2 * (1536 + 512 + 64) / h + 2 * a * 128 / h + mlp)
    assert sel == pytest.approx(want, rel=1e-12)
    # and its FLOPs come back in the hardware FLOPs: the up projections once more per layer
    pl = _plan(recompute="selective", recompute_modules="mla_up_proj")
    extra = mm.hardware_flops_per_iteration(dense, pl) - mm.model_flops_per_iteration(dense, pl)
    # less the masked half of the 3 executed cores per layer (Eq. 3 credits the full square)
    masked = s * 3 * 61 * mm.mla_forward_flops_per_token(dense)[1] / 2
    assert extra == pytest.approx(s * 61 * (2 * 1536 * a * 192 + 2 * 512 * a * 256) - masked,
                                  rel=1e-12)


def test_mla_validation_refuses_by_name():
    def errs(**kw):
        return {e.field: e.message for e in validate(Session(model=dataclasses.replace(V3, **kw),
                                                             plan=_plan()))}
    assert "model.kv_channels" in errs(kv_channels=128)
    assert not {"model.kv_channels"} & set(errs(kv_channels=192))
    assert "model.attention_kernel" in errs(attention_kernel="unfused")
    assert "model.num_query_groups" in errs(num_query_groups=8)
    assert "model.mtp_num_layers" not in errs(mtp_num_layers=1)  # modelled
    gpt = dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], q_lora_rank=1536)
    e = {x.field: x.message for x in validate(Session(model=gpt, plan=_plan()))}
    assert "needs multi_latent_attention" in e["model.q_lora_rank"]
    # context parallelism runs MLA through TE's context-parallel attention (modelled; see
    # tests/test_mla_context_parallel.py); PyTorch's allgather rotation is refused by name
    e = {x.field for x in validate(Session(model=V3, plan=_plan(context_parallel=2)))}
    assert "plan.context_parallel" not in e
    e = {x.field for x in validate(Session(model=V3, plan=_plan(context_parallel=2,
                                                                cp_comm_type="allgather")))}
    assert "plan.cp_comm_type" in e


def test_mla_simulates_with_latent_tp_collectives():
    from core.sim.op_times import lookup_op_times
    from core.sim.simulate import simulate
    m = dataclasses.replace(V3, num_layers=8, moe_first_dense_layers=1)
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=8, micro_batch_size=1,
                      global_batch_size=32, recompute="selective",
                      recompute_modules="mla_up_proj,core_attn", sequence_parallel=True,
                      expert_parallel=16, expert_tensor_parallel=1, zero_stage=1)
    s = Session(model=m, plan=pl, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    assert validate(s) == []
    r = simulate(s)
    assert r.report.iteration_time_s > 0
    # the MLA attention is timed by the analytic model (no table holds its key) and the up
    # projections' recompute is looked up
    from core.sim.simulate import session_profile
    times = lookup_op_times(s, session_profile(s)).times
    assert 0 < times["mla_up_proj_fwd"] < times["attention_fwd"]


def test_megatron_arguments_round_trip_mla(tmp_path):
    from core.io.megatron.to_session import import_file
    from core.io.megatron.export import export_script
    s = Session(model=V3, plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=1,
                                            data_parallel=8, micro_batch_size=1,
                                            global_batch_size=8, recompute="full",
                                            expert_parallel=8))
    args = export_arguments(s)
    path = tmp_path / "run.sh"
    path.write_text(export_script(s))
    back = import_file(path, name=V3.name).session.model
    for f in ("multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
              "qk_pos_emb_head_dim", "v_head_dim", "qk_layernorm"):
        assert getattr(back, f) == getattr(V3, f), f
    assert parse_arguments(args)["--q-lora-rank"] == ["1536"]


def test_mla_fp8_activation_bytes():
    # FP8 (TE): the two down projections each keep an FP8 copy of the input norm's output (2, as
    # BF16), fc1's input 2 -> 1, the up projections' inputs 2 -> 1 (their norms' inputs stay
    # BF16), fc2's input 2f/h -> f/h, the projection's input keeps its BF16 output + FP8 copy
    dense = dataclasses.replace(V3, num_experts=None, moe_ffn_hidden_size=None, moe_router_num_groups=None,
                            moe_router_group_topk=None,
                                num_shared_experts=0, moe_first_dense_layers=0)
    s, h, a = 4096, 7168, 128
    attn = 2 * a * (2 * 192 + 2 * 128) / h
    mlp = 6 * 18432 / h
    want = s * h * (9 + 3 * (1536 + 512) / h + attn + a * 128 / h + mlp - mlp / 6)
    got = mm.activation_bytes_per_layer(dense, _plan(precision="fp8", fp8_recipe="delayed"))
    assert got == pytest.approx(want, rel=1e-12)
    # the other recipes: the projection saves its original BF16 input, no FP8 copy beside it
    got = mm.activation_bytes_per_layer(dense, _plan(precision="fp8", fp8_recipe="tensorwise"))
    assert got == pytest.approx(want - s * h * a * 128 / h, rel=1e-12)


def test_mla_tensor_parallel_collectives_move_the_latents():
    from core.sim.stages import stage_times
    from core.sim.simulate import session_profile
    m = dataclasses.replace(V3, num_layers=4, num_experts=None, moe_ffn_hidden_size=None, moe_router_num_groups=None,
                            moe_router_group_topk=None,
                            num_shared_experts=0, moe_first_dense_layers=0)
    s = Session(model=m, plan=_plan(tensor_parallel=8, data_parallel=1, sequence_parallel=True),
                cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    assert validate(s) == []
    assert mm.mla_tp_latent_width(m) == 1536 + 512 + 64
    tp = stage_times(s, session_profile(s)).tp_comm_s
    # the latents (2112 channels) against the hidden state (7168): a smaller collective
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        assert 0 < tp["mla_" + kind] < tp[kind]
    plain = Session(model=dataclasses.replace(m, num_layers=4), plan=s.plan, cluster=s.cluster)
    assert stage_times(plain, session_profile(plain)).tp_comm_s["all_gather"] == tp["all_gather"]


def test_hf_deepseek_refusals_and_v2_lite():
    from core.plan.fields import ConfigError
    for change, field in (({"num_nextn_predict_layers": -1}, "num_nextn_predict_layers"),
                          ({"topk_method": "sinkhorn"}, "topk_method"),
                          ({"kv_lora_rank": None}, "kv_lora_rank"),
                          ({"quantization_config": {"quant_method": "gptq", "bits": 4}},
                           "quantization_config")):
        with pytest.raises(ConfigError) as err:
            session_from_hf_config({**V3_CONFIG, **change}, "config.json", seq_length=4096)
        assert err.value.errors[0].field == f"config.json: {field}"
    # DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite config.json): no query compression
    lite = {**V3_CONFIG, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
            "num_hidden_layers": 27,
            "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
            "intermediate_size": 10944, "q_lora_rank": None, "n_routed_experts": 64,
            "n_shared_experts": 2, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
            "first_k_dense_replace": 1, "vocab_size": 102400, "topk_method": "greedy",
            "n_group": 1, "topk_group": 1, "scoring_func": "softmax"}
    del lite["num_nextn_predict_layers"]
    model = session_from_hf_config(lite, seq_length=4096).session.model
    assert model.q_lora_rank is None and model.num_shared_experts == 2
    # 15.7 B parameters (DeepSeek-V2 paper, Appendix B: "15.7B total parameters, 2.4B activated")
    assert round(mm.num_parameters(model) / 1e9, 1) == 15.7
    # "2.4B activated": DeepSeek counts a token's parameters without the input embedding (a
    # lookup, no GEMM): num_active_parameters; num_active_parameters_with_embedding counts it
    emb = 102400 * 2048
    assert mm.num_active_parameters_with_embedding(model) == 2_661_150_208
    assert mm.num_active_parameters(model) == 2_661_150_208 - emb
    assert abs(mm.num_active_parameters(model) - 2.4e9) < 0.06e9


# --------------------------------------------------------------------------- multi-token prediction

V3_MTP = dataclasses.replace(V3, mtp_num_layers=1)


def test_preset_is_deepseek_v3_as_trained():
    assert dataclasses.replace(MODEL_PRESETS["DeepSeek-V3"], hidden_dropout=0.1,
                               attention_dropout=0.1) == V3_MTP


def test_mtp_parameters_match_the_published_685b():
    # DeepSeek-V3: 671 B main model + 14 B MTP module = 685 B on Hugging Face, whose MTP module
    # stores its own copies of the embedding and the output head (Megatron shares them)
    h, V = 7168, 129280
    moe = mm.moe_layer_parameters(V3)
    mtp = moe.sharded + moe.replicated + moe.experts + 2 * h * h + 3 * h
    assert mm.num_parameters(V3_MTP) == mm.num_parameters(V3) + mtp == 682_636_472_320
    assert abs(mm.num_parameters(V3_MTP) + 2 * V * h - 685e9) < 0.6e9
    # active: the MTP layer's 8 routed + 1 shared experts
    assert mm.num_active_parameters(V3_MTP) - mm.num_active_parameters(V3) == \
        mtp - (256 - 8) * moe.expert
    # the real config.json: one MTP layer, the FP8 checkpoint's storage (ignored, with the reason)
    fp8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
           "weight_block_size": [128, 128]}
    imp = session_from_hf_config({**V3_CONFIG, "num_nextn_predict_layers": 1,
                                  "quantization_config": fp8}, seq_length=4096)
    assert "quantization_config" in imp.ignored
    assert imp.session.model.mtp_num_layers == 1
    assert mm.num_parameters(imp.session.model) == mm.num_parameters(V3_MTP)


def test_mtp_flops_and_memory_closed_form():
    h, V, s = 7168, 129280, 4096
    pl = _plan(pipeline_parallel=2, data_parallel=1, global_batch_size=4, expert_parallel=1,
               first_stage_layers=31)
    per_token = (mm.moe_forward_flops_per_token(V3) + 4 * h * h + 2 * h * V)
    assert (mm.model_flops_per_iteration(V3_MTP, pl) - mm.model_flops_per_iteration(V3, pl)
            == pytest.approx(4 * s * 3 * per_token, rel=1e-12))
    # the last stage holds the MTP layer, eh_proj, its norms and a copy of the embedding (p > 1)
    moe = mm.moe_layer_parameters(V3)
    extra = moe.sharded + moe.replicated + moe.experts + 2 * h * h + 3 * h + V * h
    d = mm.params_per_gpu(V3_MTP, pl) - mm.params_per_gpu(V3, pl)
    assert d[0] == 0 and d[1] == extra
    # activations: one more MoE layer in flight (1F1B: the last stage holds 1 micro-batch), its
    # norms' and eh_proj's inputs (4h elements per token), one more logits tensor, and its
    # final norm's input and its share of the output layer's concatenated input (2h: Megatron-
    # Core's MTP _postprocess norm and MultiTokenPredictionBlock's torch.cat)
    acts = mm.stage_memory_arrays(V3_MTP, pl)[3] - mm.stage_memory_arrays(V3, pl)[3]
    keep = mm.moe_activation_bytes_per_layer(V3, pl, "none")
    layers = 31  # the last stage's 30 decoder layers and the MTP layer (all MoE)
    mean_before = keep  # every layer of the last stage is an MoE layer, with or without MTP
    want = keep * layers - mean_before * 30 + s * 4 * h * 2 + s * V * (2 + 4) + s * 2 * h * 2
    assert acts[0] == 0 and acts[1] == pytest.approx(want, rel=1e-12)


def test_mtp_graph_runs_its_ops_on_the_last_stage():
    from core.sim.graph_types import OPS
    from core.sim.simulate import simulate
    m = dataclasses.replace(V3, num_layers=8, moe_first_dense_layers=1, mtp_num_layers=2)
    pl = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=4, micro_batch_size=1,
                      global_batch_size=16, recompute="full", sequence_parallel=True,
                      expert_parallel=8, expert_tensor_parallel=1, zero_stage=1,
                      overlap_grad_reduce=True)
    s = Session(model=m, plan=pl, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    assert validate(s) == []
    r = simulate(s)
    g = r.graph
    mb = pl.num_microbatches  # 4

    def count(op, stage):
        return int(((g.op == OPS.index(op)) & (g.stage == stage)).sum())
    assert count("mtp_proj_fwd", 1) == count("mtp_proj_bwd", 1) == 2 * mb
    assert count("mtp_proj_fwd", 0) == 0
    assert count("output_fwd", 1) == count("output_bwd", 1) == 3 * mb
    assert count("embedding_fwd", 1) == 2 * mb  # the shifted tokens' embedding per MTP layer
    assert set(g.layer[(g.op == OPS.index("mtp_proj_fwd"))].tolist()) == {8, 9}
    from core.sim.simulate import graph_size_estimate
    assert len(g.duration_s) <= graph_size_estimate(s)
    sel = dataclasses.replace(s, plan=dataclasses.replace(
        pl, recompute="selective", recompute_modules="core_attn,mla_up_proj,moe,layernorm",
        schedule="zb-h1", zero_stage=3, overlap_param_gather=True))
    assert validate(sel) == []
    assert len(simulate(sel).graph.duration_s) <= graph_size_estimate(sel)
    base = simulate(dataclasses.replace(s, model=dataclasses.replace(m, mtp_num_layers=0)))
    assert r.report.iteration_time_s > base.report.iteration_time_s


def test_mtp_refusals_and_megatron_round_trip(tmp_path):
    from core.io.megatron.to_session import import_file
    from core.io.megatron.export import export_script
    e = {x.field for x in validate(Session(model=dataclasses.replace(
        MODEL_PRESETS["Llama 3 8B"], mtp_num_layers=1), plan=_plan(context_parallel=2)))}
    assert e == set()  # MTP with cp: modelled (tests/test_mtp_context_parallel.py)
    e = {x.field: x.message for x in validate(Session(model=dataclasses.replace(
        MODEL_PRESETS["Llama 3 8B"], mtp_num_layers=1, window_size=128), plan=_plan()))}
    assert "sliding-window" in e["model.mtp_num_layers"]
    s = Session(model=V3_MTP, plan=ParallelPlan(tensor_parallel=1, pipeline_parallel=1,
                                                data_parallel=8, micro_batch_size=1,
                                                global_batch_size=8, recompute="full",
                                                expert_parallel=8))
    assert "--mtp-num-layers 1" in export_script(s)
    path = tmp_path / "run.sh"
    path.write_text(export_script(s))
    assert import_file(path, name=V3.name).session.model.mtp_num_layers == 1


def test_a_shared_cache_keeps_models_with_and_without_mtp_apart():
    from core.sim.stages import stage_times
    from core.sim.simulate import session_profile
    m = dataclasses.replace(V3, num_layers=4, moe_first_dense_layers=1)
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, micro_batch_size=1,
                      global_batch_size=8, recompute="none", expert_parallel=8)
    cache: dict = {}
    plain = Session(model=m, plan=pl, cluster=ClusterConfig(gpu="H100-SXM5-80GB"))
    mtp = Session(model=dataclasses.replace(m, mtp_num_layers=1), plan=pl, cluster=plain.cluster)
    store = session_profile(plain)
    stage_times(plain, store, cache)
    st = stage_times(mtp, store, cache)
    assert st.op_times_s["mtp_proj_fwd"] > 0
    assert stage_times(mtp, store).op_times_s == st.op_times_s


def test_mla_without_query_compression_under_fp8():
    """q_lora_rank empty (DeepSeek-V2-Lite): the query projection reads the input norm's output
    inside the up projections' checkpoint. Under FP8 ``layernorm`` frees only the key/value
    down projection's copy (1 of 2), ``mla_up_proj`` keeps the BF16 hidden states (2) instead
    of the query projection's FP8 copy (1); with both, nothing of that tensor is kept."""
    m = dataclasses.replace(V3, q_lora_rank=None, num_experts=None, moe_ffn_hidden_size=None, moe_router_num_groups=None,
                            moe_router_group_topk=None,
                            num_shared_experts=0, moe_first_dense_layers=0)
    s, h = 4096, 7168
    sbh = s * h

    def acts(modules, precision="fp8"):
        return mm.activation_bytes_per_layer(m, _plan(precision=precision, recompute="selective",
                                                      recompute_modules=modules))
    base = acts("core_attn")
    assert base - acts("core_attn,layernorm") == pytest.approx(1 * sbh, rel=1e-12)
    with_c = dataclasses.replace(V3, num_experts=None, moe_ffn_hidden_size=None, moe_router_num_groups=None,
                            moe_router_group_topk=None,
                                 num_shared_experts=0, moe_first_dense_layers=0)
    full = mm.activation_bytes_per_layer(with_c, _plan(precision="fp8", recompute="selective"))
    ln = mm.activation_bytes_per_layer(with_c, _plan(precision="fp8", recompute="selective",
                                                     recompute_modules="core_attn,layernorm"))
    assert full - ln == pytest.approx(2 * sbh, rel=1e-12)  # with q_lora: both copies freed
    up = acts("core_attn,mla_up_proj")
    both = acts("core_attn,layernorm,mla_up_proj")
    assert up - both == pytest.approx(3 * sbh, rel=1e-12)  # the kept 2 + the other copy 1
    # BF16: the rules do not apply (no FP8 copies)
    assert acts("core_attn", "bf16") - acts("core_attn,layernorm", "bf16") == pytest.approx(
        2 * sbh, rel=1e-12)


def test_deepseek_group_limited_routing_imports_its_groups():
    """DeepSeek's n_group / topk_group pick a token's experts within topk_group of n_group
    groups under topk_method noaux_tc (V3) or group_limited_greedy (V2): Megatron-Core's
    --moe-router-num-groups / --moe-router-group-topk, which the flex dispatcher's remote
    copies depend on. The import sets them, as the DeepSeek-V3 preset has them; greedy
    routing (V2-Lite) does not read them."""
    from core.plan.fields import ConfigError
    imp = session_from_hf_config(V3_CONFIG, seq_length=4096)
    m = imp.session.model
    preset = MODEL_PRESETS["DeepSeek-V3"]
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (
        preset.moe_router_num_groups, preset.moe_router_group_topk)
    assert not {"n_group", "topk_group"} & set(imp.ignored)
    v2 = {**V3_CONFIG, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
          "n_group": 8,
          "topk_group": 3, "topk_method": "group_limited_greedy", "n_routed_experts": 160,
          "num_experts_per_tok": 6, "n_shared_experts": 2, "num_hidden_layers": 60,
          "hidden_size": 5120, "vocab_size": 102400, "intermediate_size": 12288,
          "first_k_dense_replace": 1, "scoring_func": "softmax"}
    del v2["num_nextn_predict_layers"]
    m2 = session_from_hf_config(v2, seq_length=4096).session.model
    assert (m2.moe_router_num_groups, m2.moe_router_group_topk) == (8, 3)
    greedy = session_from_hf_config({**v2, "topk_method": "greedy"}, seq_length=4096)
    assert greedy.session.model.moe_router_num_groups is None
    assert {"n_group", "topk_group"} <= set(greedy.ignored)
    with pytest.raises(ConfigError) as err:  # named by the config's own key
        session_from_hf_config({**V3_CONFIG, "n_group": 7}, "config.json", seq_length=4096)
    assert err.value.errors[0].field == "config.json: n_group"


@pytest.mark.parametrize("drop,field", [
    (("topk_group",), "topk_group"),           # transformers' DeepseekV3Config would fill 4
    (("n_group",), "n_group"),                 # ... and 8
    (("n_group", "topk_group"), "n_group"),
])
def test_deepseek_group_limited_routing_without_its_counts_is_refused(drop, field):
    """Under noaux_tc (or group_limited_greedy) a config that leaves out n_group or topk_group
    does not say the groups a token's experts lie in; the import refuses it naming the key (as
    GLM-4.5's does) instead of simulating the routing without groups."""
    from core.plan.fields import ConfigError
    cfg = {k: v for k, v in V3_CONFIG.items() if k not in drop}
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "config.json", seq_length=4096)
    assert err.value.errors[0].field == f"config.json: {field}"


def test_deepseek_v3_without_topk_method_routes_within_its_groups():
    """transformers' DeepseekV3TopkRouter always picks a token's experts within topk_group of
    n_group groups (no topk_method is read): a V3 config without the key imports its groups,
    and without them is refused; DeepSeek-V2's config default is greedy (groups not read)."""
    from core.plan.fields import ConfigError
    cfg = {k: v for k, v in V3_CONFIG.items() if k != "topk_method"}
    imp = session_from_hf_config(cfg, seq_length=4096)
    assert (imp.session.model.moe_router_num_groups, imp.session.model.moe_router_group_topk) \
        == (8, 4)
    assert "topk_method" not in imp.ignored  # not in the file
    with pytest.raises(ConfigError) as err:
        session_from_hf_config({k: v for k, v in cfg.items() if k != "n_group"}, "config.json",
                               seq_length=4096)
    assert err.value.errors[0].field == "config.json: n_group"
    v2 = {**cfg, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2"}
    del v2["num_nextn_predict_layers"]
    greedy = session_from_hf_config(v2, seq_length=4096)
    assert greedy.session.model.moe_router_num_groups is None
    assert {"n_group", "topk_group"} <= set(greedy.ignored)


def test_one_group_is_no_groups_and_more_chosen_groups_than_groups_is_refused():
    """n_group 1 (Kimi K2's DeepSeek-V3 config) is the top-k over all experts: no router
    groups, as GLM-4.5's import reads it; topk_group above n_group is refused by name (both
    routers take the top topk_group of n_group group scores)."""
    from core.plan.fields import ConfigError
    one = session_from_hf_config({**V3_CONFIG, "n_group": 1, "topk_group": 1},
                                 seq_length=4096)
    assert one.session.model.moe_router_num_groups is None
    assert {"n_group", "topk_group"} <= set(one.ignored)
    for arch_cfg in (V3_CONFIG, {**V3_CONFIG, "n_group": 1}):
        with pytest.raises(ConfigError) as err:
            session_from_hf_config({**arch_cfg, "topk_group": 9 if arch_cfg is V3_CONFIG
                                    else 4}, "config.json", seq_length=4096)
        assert err.value.errors[0].field == "config.json: topk_group"


def test_mtp_layers_recomputed_only_by_the_uniform_method():
    # Megatron-Core 0.16.1 MultiTokenPredictionLayer._checkpointed_forward: under full
    # recomputation the uniform method (recompute_num_layers unset) checkpoints the MTP layer's
    # norms, eh_proj and transformer layer, keeping the checkpoint's two inputs (the hidden
    # states and the shifted tokens' embedding, 2h per token); the block method
    # (recompute_num_layers set) "is not supported for MTP yet. Skipping recompute.": the MTP
    # layer keeps its activations, its norms' and eh_proj's inputs (4h) and is not run again
    h, V, s = 7168, 129280, 4096
    kw = dict(pipeline_parallel=2, data_parallel=1, global_batch_size=4, expert_parallel=1,
              first_stage_layers=31, recompute="full")
    uniform, block = _plan(**kw), _plan(**kw, recompute_num_layers=1)

    def extra(pl):  # the last stage's activations with the MTP layer less without (1F1B: 1 in flight)
        return mm.stage_memory_arrays(V3_MTP, pl)[3][1] - mm.stage_memory_arrays(V3, pl)[3][1]
    logits = s * V * (2 + 4)  # the MTP layer's bf16 logits and their fp32 copy
    norm = 2 * s * h * 2  # a final norm's bf16 input and output (the MTP layer's adds one)

    def freed(pl):  # without MTP the loss stage holds the larger of its logits with the final
        # norm's input and output and the recomputed layer's working set; with MTP layers
        # (their backward order not modelled) both count
        working = max(mm.activation_bytes_per_layer(V3, pl, "none"),
                      mm.moe_activation_bytes_per_layer(V3, pl, "none"))
        return min(working, logits + norm)
    assert extra(uniform) == pytest.approx(2 * s * h * 2 + logits + norm + freed(uniform),
                                           rel=1e-12)
    keep = mm.moe_activation_bytes_per_layer(V3, block, "none")  # the MTP layer, not recomputed
    assert extra(block) == pytest.approx(keep + s * 4 * h * 2 + logits + norm + freed(block),
                                         rel=1e-12)
    assert keep > 50 * s * h  # far more than the checkpoint: the fit can turn on it
    # the hardware FLOPs: the MTP transformer layer's forward again only by the uniform method
    # (an MoE layer; FlashAttention skips the masked share of its attention core)
    from core.model.families import family_of
    tokens = 4 * s
    core = family_of(V3).forward_flops_per_token(V3, 1)[1]

    def hw(pl):
        return mm.hardware_flops_per_iteration(V3_MTP, pl) - mm.hardware_flops_per_iteration(V3, pl)
    mtp_layer = mm.moe_forward_flops_per_token(V3) - core * (1 - mm.causal_core_fraction(V3))
    assert hw(uniform) - hw(block) == pytest.approx(tokens * mtp_layer, rel=1e-12)


@pytest.mark.parametrize("first_dense, freq, n, kept", [
    # DeepSeek-V3's pattern (3 dense layers first): recomputing 3 of stage 0's layers 0-3 keeps
    # the MoE layer 3, and 3 of stage 1's 4-7 keeps the MoE layer 7
    (3, 1, 3, ((0, 1), (0, 1))),
    # every other layer MoE (0, 2, 4, 6): recomputing 1 of 0-3 (the MoE layer 0) keeps dense 1
    # and 3 and MoE 2; of 4-7 (MoE 4) keeps dense 5, 7 and MoE 6
    (0, 2, 1, ((2, 1), (2, 1))),
])
def test_block_recomputation_keeps_the_layers_after_the_first_n_of_each_chunk(
        first_dense, freq, n, kept):
    # Megatron-Core 0.16.1 TransformerBlock._checkpointed_forward, recompute_method 'block':
    # the chunk's layers with layer_idx < recompute_num_layers are checkpointed (their input
    # kept), the others keep their activations, dense or MoE as the layer is
    from core.model.families import family_of
    m = dataclasses.replace(V3, num_layers=8, moe_first_dense_layers=first_dense,
                            moe_layer_frequency=freq)
    pl = _plan(pipeline_parallel=2, data_parallel=1, global_batch_size=4, expert_parallel=1,
               recompute="full", recompute_num_layers=n)
    s, h, V = m.seq_length, m.hidden_size, 129280
    ckpt = mm.activation_bytes_per_layer(m, pl, "full")  # 2 s h
    assert ckpt == 2 * s * h
    dense = mm.activation_bytes_per_layer(m, pl, "none")
    moe = mm.moe_activation_bytes_per_layer(m, pl, "none")
    assert moe != dense
    working = max(dense, moe)  # the layer being recomputed
    acts = mm.stage_memory_arrays(m, pl)[3]
    for stage, in_flight in ((0, 2), (1, 1)):  # 1F1B on p = 2: min(p - stage, m)
        kd, km = kept[stage]
        want = (n * ckpt + kd * dense + km * moe) * in_flight + working
        if stage == 0:  # the embedding's int64 ids and 1-byte dropout mask per micro-batch
            want += (8 * s + s * h) * in_flight
        if stage == 1:  # the logits and their fp32 copy with the final norm's bf16 input and
            # output, freed before the recomputation
            edge = s * V * (2 + 4) + 2 * s * h * 2
            want += edge - min(working, edge)
        assert acts[stage] == pytest.approx(want, rel=1e-12)
    # the hardware FLOPs recompute the recomputed layers' forwards, dense or MoE
    tokens = 4 * s
    layer, core, _ = family_of(m).forward_flops_per_token(m, 1)
    masked = core * (1 - mm.causal_core_fraction(m))  # FlashAttention skips the masked share
    rec_moe = sum(int(mm.moe_layer_mask(m)[start:start + n].sum()) for start in (0, 4))
    extra = (2 * n - rec_moe) * layer + rec_moe * mm.moe_forward_flops_per_token(m) - 2 * n * masked
    none = dataclasses.replace(pl, recompute="none", recompute_num_layers=None)
    assert (mm.hardware_flops_per_iteration(m, pl) - mm.hardware_flops_per_iteration(m, none)
            == pytest.approx(tokens * extra, rel=1e-12))


def test_a_block_count_above_every_chunk_stays_block_with_mtp_layers(tmp_path):
    # Megatron caps --recompute-num-layers per model chunk, so a count at or above the largest
    # chunk recomputes every decoder layer (None: every layer); with MTP layers it stays the
    # block method, which Megatron-Core 0.16.1 runs without recomputing them ("Skipping
    # recompute"), capped at the largest chunk, not None (the uniform method, which does)
    from core.io.megatron.export import export_script
    from core.io.megatron.to_session import import_file
    from core.plan.layout import capped_recompute_layers
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=2, data_parallel=4, micro_batch_size=1,
                      global_batch_size=8, recompute="full", recompute_num_layers=31,
                      expert_parallel=4, first_stage_layers=31)  # chunks of 31 and 30 layers
    over = dataclasses.replace(pl, recompute_num_layers=40)
    assert capped_recompute_layers(over, 61).recompute_num_layers is None
    assert capped_recompute_layers(over, 61, 1).recompute_num_layers == 31
    assert capped_recompute_layers(pl, 61, 1) is pl
    for model, want in ((V3_MTP, 31), (V3, None)):
        text = export_script(Session(model=model, plan=pl))
        assert "--recompute-method block" in text and "--recompute-num-layers 31 " in text
        path = tmp_path / "run.sh"
        path.write_text(text.replace("--recompute-num-layers 31", "--recompute-num-layers 40"))
        assert import_file(path, name=V3.name).session.plan.recompute_num_layers == want


def test_a_dense_and_an_moe_mla_layer_stage_memory_is_the_closed_form():
    """DeepSeek-V3 cut to two layers, the first dense (``moe_first_dense_layers``), the second
    MoE (256 experts of 2048, one shared), at t1 p1 d8 ep8, bf16, distributed optimizer, fp32
    main gradients, b1, s 4096, no recomputation, TE's fused cross-entropy: one GPU's memory
    term by term, as Megatron-Core 0.16.1 allocates it (the audit of the MoE and MLA memory):

    * MLA per layer 171,966,464 sharded + 15,148,032 replicated weights (the down projections
      ``TELinear`` whole on every rank, ``gpt_layer_specs.py``), the dense MLP 3 x 7168 x 18432
      and its norm; the MoE layer's router gate 7168 x 256, its shared expert 3 x 7168 x 2048
      (a dense, tensor-parallel parameter: its gradient reduces over d) and 256/ep routed
      experts, whose optimizer state shards over the expert-data-parallel group, t d/(etp ep)
      = 1 rank (``parallel_state.py`` ``expert_data_parallel_size``);
    * TE's placeholder weight gradients, one per distinct linear weight shape (the shared
      expert's are a routed expert's, ``tensor_parallel/layers.py`` ``get_dummy_wgrad`` for the
      output layer);
    * activations: MLA keeps Q and K (128 heads x 192), V and the core's output (128 x 128) and
      the latents' norm inputs and outputs, ``TELayerNormColumnParallelLinear`` (4 (1536 +
      512)); the routed copies 2h + 6 f_e each (k = 8), the router's fp32 scores 4E per token,
      the logits' gradient in BF16."""
    h, a, V, E, fe, f = 7168, 128, 129280, 256, 2048, 18432
    m = dataclasses.replace(V3, num_layers=2, moe_first_dense_layers=1)
    pl = ParallelPlan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                      micro_batch_size=1, global_batch_size=64, recompute="none",
                      zero_stage=1, expert_parallel=8, cross_entropy_loss_fusion=True,
                      cross_entropy_fusion_impl="te")
    assert not validate(Session(model=m, plan=pl))
    attention = 1536 * a * 192 + 512 * a * 256 + a * 128 * h + h * 1536 + h * 576 + 2048 + h
    assert attention == 187_114_496
    dense = (2 * attention + 3 * h * f + h + h * E + 3 * h * fe + h + 2 * V * h + h)
    experts = E * 3 * h * fe / 8
    mem = mm.stage_memory(m, pl)[0]
    assert mem.weights_bytes == 2 * (dense + experts) == 8_158_263_296
    shapes = (576 * h + a * 256 * 512 + h * a * 128 + 1536 * h + a * 192 * 1536
              + 2 * f * h + h * f + 2 * fe * h + h * fe + V * h)
    assert mem.gradients_bytes == 4 * (dense + experts) + 2 * shapes
    assert mem.optimizer_bytes == 12 * dense / 8 + 12 * experts / 1
    s = 4096
    attn = 2 * a * (2 * 192 + 2 * 128) + 4 * (1536 + 512)  # Q, K, V, output; the latents
    dense_layer = s * (10 * h + attn + 6 * f)
    moe_layer = s * (10 * h + attn + 6 * fe) + s * 8 * (2 * h + 6 * fe) + s * 4 * E
    # outside the layers: the embedding's int64 ids and 1-byte dropout mask, the final norm's
    # bf16 input and output
    edges = 8 * s + s * h + 2 * s * h * 2
    assert mem.activations_bytes == pytest.approx(dense_layer + moe_layer + s * V * 2 + edges,
                                                  rel=1e-15)
    assert mem.activations_bytes == 4_582_309_888


def test_mla_keys_transformers_own_config_classes_write_are_read():
    """A DeepSeek config saved by transformers' DeepseekV3Config (``save_pretrained`` of a
    fine-tune) carries ``head_dim`` = ``qk_rope_head_dim`` (64, the class's ``self.head_dim``),
    ``qk_head_dim`` = ``qk_nope_head_dim + qk_rope_head_dim`` (192) and ``rope_interleave``;
    they were refused (head_dim 64 as the MLA head size, the others as unknown). The model is
    the published config's; a ``qk_head_dim`` that is not the sum is refused by name."""
    from core.plan.fields import ConfigError
    saved = {**V3_CONFIG, "head_dim": 64, "qk_head_dim": 192, "rope_interleave": True}
    imp = session_from_hf_config(saved, "config.json", seq_length=4096)
    plain = session_from_hf_config(V3_CONFIG, "config.json", seq_length=4096)
    assert imp.session.model == plain.session.model
    assert mm.num_parameters(imp.session.model) == 671_026_404_352
    assert {"head_dim", "qk_head_dim", "rope_interleave"} <= set(imp.ignored)
    for change, field in (({"qk_head_dim": 128}, "qk_head_dim"),
                          ({"head_dim": 96}, "head_dim")):  # neither the rotary part nor 192
        with pytest.raises(ConfigError) as err:
            session_from_hf_config({**saved, **change}, "config.json", seq_length=4096)
        assert err.value.errors[0].field == f"config.json: {field}"
    # qk_head_dim is MLA's: a dense architecture's config with it is refused by name
    llama = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "vocab_size": 128256, "max_position_embeddings": 8192, "qk_head_dim": 128}
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(llama)
    assert err.value.errors[0].field == "config.json: qk_head_dim"


# moonshotai/Kimi-K2-Instruct config.json: DeepSeek-V3's architecture with model_type kimi_k2
# (its own configuration class by auto_map), 64 heads, 384 experts, one dense layer, one group
KIMI_K2_CONFIG = {**V3_CONFIG, "model_type": "kimi_k2", "num_attention_heads": 64,
                  "num_key_value_heads": 64, "n_routed_experts": 384, "first_k_dense_replace": 1,
                  "n_group": 1, "topk_group": 1, "vocab_size": 163840, "rope_theta": 50000.0,
                  "routed_scaling_factor": 2.827, "max_position_embeddings": 131072,
                  "bos_token_id": 163584, "eos_token_id": 163585,
                  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
                  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                          "quant_method": "fp8", "weight_block_size": [128, 128]}}


def test_kimi_k2_imports_by_its_model_type():
    """Kimi-K2's model_type kimi_k2 had no class in the defaults table, so its absent head_dim
    and sliding_window (keys its DeepseekV3Config does not have) were refused. The count by hand
    (MLA with 64 heads; 60 MoE layers of 384 + 1 shared experts and a 384-wide router, one dense
    layer; untied 163,840 x 7168 embeddings) is the model card's "1 trillion total, 32 billion
    activated"; the same model as the file read with model_type deepseek_v3."""
    h, a = 7168, 64
    attn = (h * 1536 + 1536 + 1536 * a * 192 + h * 576 + 512 + 512 * a * 256 + a * 128 * h
            + 2 * h)
    def moe(k):
        return (k + 1) * 3 * h * 2048 + 384 * h
    total = 61 * attn + 3 * h * 18432 + 60 * moe(384) + 2 * 163840 * h + h
    active = 61 * attn + 3 * h * 18432 + 60 * moe(8) + 163840 * h + h
    m = session_from_hf_config(KIMI_K2_CONFIG, seq_length=4096).session.model
    assert mm.num_parameters(m) == total == 1_026_408_209_408
    assert mm.num_active_parameters(m) == active == 31_687_072_768
    assert m == session_from_hf_config({**KIMI_K2_CONFIG, "model_type": "deepseek_v3"},
                                       seq_length=4096).session.model
