"""Squared-ReLU MLPs (Nemotron-4; Megatron-Core --squared-relu): parameters, timing, Megatron
arguments and the measurement reader."""

from __future__ import annotations

import dataclasses

import pytest

from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.rules import validate
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.sim.simulate import simulate
from core.model.counts import num_parameters

# Nemotron-4 340B (Nemotron-4 340B technical report, Table 1 / its Megatron-Core config):
# 96 layers, h 18432, 96 heads, 8 KV groups, ffn 73728 (4h), vocabulary 256000, squared ReLU,
# LayerNorm, RoPE, no linear biases, untied embeddings
NEMOTRON4_340B = ModelConfig(name="Nemotron-4 340B", num_layers=96, hidden_size=18432,
                             num_attention_heads=96, num_query_groups=8, ffn_hidden_size=73728,
                             seq_length=4096, vocab_size=256000, activation="squared_relu",
                             normalization="layernorm", position_embedding="rope",
                             add_bias_linear=False, tied_embeddings=False, attention_kernel="flash")


def test_nemotron4_340b_parameters_closed_form():
    """Per layer: QKV h(h + 2 g d) with d = h/a = 192, projection h^2, two ffn matrices 2hf (not
    gated: no third matrix), two LayerNorms 2 x 2h; plus untied input and output embeddings
    2Vh and the final LayerNorm 2h: 341.03 B (the report's "340B")."""
    h, f, g, d, V, L = 18432, 73728, 8, 192, 256000, 96
    per_layer = h * (h + 2 * g * d) + h * h + 2 * h * f + 2 * 2 * h
    assert num_parameters(NEMOTRON4_340B) == L * per_layer + 2 * V * h + 2 * h
    assert num_parameters(NEMOTRON4_340B) == pytest.approx(341.03e9, rel=1e-5)
    gated = dataclasses.replace(NEMOTRON4_340B, activation="swiglu")
    assert num_parameters(gated) - num_parameters(NEMOTRON4_340B) == L * h * f


def test_squared_relu_is_timed_as_gelu_and_refuses_gated_fields():
    """One fused element-wise kernel per pass with GeLU's bytes, the same two GEMMs: the
    iteration time and the memory are GeLU's exactly (core.model.keys.activation_key)."""
    small = dataclasses.replace(NEMOTRON4_340B, num_layers=8, hidden_size=2048,
                                num_attention_heads=16, ffn_hidden_size=8192)
    plan = ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2,
                        micro_batch_size=1, global_batch_size=16, precision="bf16")
    runs = [simulate(Session(dataclasses.replace(small, activation=a), plan,
                             ClusterConfig(gpu="H100-SXM5-80GB"), CostConfig())).report
            for a in ("squared_relu", "gelu")]
    assert runs[0].iteration_time_s == runs[1].iteration_time_s > 0
    assert runs[0].num_parameters == runs[1].num_parameters
    assert runs[0].max_memory_per_gpu_bytes == runs[1].max_memory_per_gpu_bytes
    errs = validate(Session(dataclasses.replace(small, activation_func_clamp_value=7.0), plan,
                            ClusterConfig(), CostConfig()))
    assert any(e.field == "model.activation_func_clamp_value" for e in errs)


LAUNCH = ("--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --ffn-hidden-size 8192 "
          "--seq-length 4096 --vocab-size 256000 --micro-batch-size 1 --squared-relu "
          "--position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights "
          "--group-query-attention --num-query-groups 8 --bf16")


def test_megatron_squared_relu_round_trip():
    r = session_from_launch(read_launch(LAUNCH, "nemotron.sh"), num_gpus=8)
    assert r.session.model.activation == "squared_relu"
    args = export_arguments(r.session)
    assert "--squared-relu" in args and "--swiglu" not in args
    back = session_from_launch(read_launch(" ".join(args), "back.sh"), num_gpus=8)
    assert back.session.model == dataclasses.replace(r.session.model, name=back.session.model.name)
    with pytest.raises(MegatronArgsError, match="--squared-relu and --swiglu are both given"):
        session_from_launch(read_launch(LAUNCH + " --swiglu", "x"), num_gpus=8)
    with pytest.raises(MegatronArgsError, match="--quick-geglu and --squared-relu are both given"):
        session_from_launch(read_launch(LAUNCH + " --quick-geglu", "x"), num_gpus=8)


def test_a_session_column_row_of_squared_relu(tmp_path):
    """A measurement CSV row with activation squared_relu (Nemotron-4 15B on 64 H100) is read
    and predicted as that MLP."""
    from core.accuracy.measured import read_measurements
    path = tmp_path / "runs.csv"
    path.write_text("gpu,name,num_layers,hidden_size,num_attention_heads,num_query_groups,"
                    "ffn_hidden_size,activation,position_embedding,add_bias_linear,"
                    "attention_kernel,tied_embeddings,seq_length,vocab_size,global_batch_size,"
                    "micro_batch_size,tensor_parallel,pipeline_parallel,data_parallel,"
                    "sequence_parallel,recompute,zero_stage,precision,measured_iteration_time_s\n"
                    "H100-SXM5-80GB,Nemotron-4-15B,32,6144,48,8,24576,squared_relu,rope,false,"
                    "flash,false,4096,256000,256,4,4,1,16,true,none,1,bf16,2.5\n")
    (m,) = read_measurements(path)
    assert m.skip_reason == ""
    model = m.session.model
    assert (model.activation, model.position_embedding, model.add_bias_linear) == \
        ("squared_relu", "rope", False)
    assert simulate(m.session).report.iteration_time_s > 0


# Nemotron-4 340B as transformers' NemotronConfig writes it (nvidia's -hf conversions)
NEMOTRON_HF = {"architectures": ["NemotronForCausalLM"], "model_type": "nemotron",
               "hidden_act": "relu2", "hidden_size": 18432, "intermediate_size": 73728,
               "num_attention_heads": 96, "num_hidden_layers": 96, "num_key_value_heads": 8,
               "head_dim": 192, "max_position_embeddings": 4096, "norm_eps": 1e-05,
               "partial_rotary_factor": 0.5, "rope_theta": 10000, "tie_word_embeddings": False,
               "vocab_size": 256000, "torch_dtype": "bfloat16", "attention_bias": False,
               "mlp_bias": False, "bos_token_id": 2, "eos_token_id": 3}


def test_hf_nemotron_import():
    from core.plan.fields import ConfigError
    from core.io.hf_import import session_from_hf_config
    imp = session_from_hf_config(NEMOTRON_HF, where="config.json")
    m = imp.session.model
    # the HF import starts from Llama's family: no dropout (the ModelConfig above has Megatron's)
    assert dataclasses.replace(m, name=NEMOTRON4_340B.name, hidden_dropout=0.1,
                               attention_dropout=0.1) == NEMOTRON4_340B
    assert {"norm_eps", "partial_rotary_factor"} <= set(imp.ignored)
    with pytest.raises(ConfigError, match="hidden_act.*'silu': only relu2 MLPs are modelled"):
        session_from_hf_config({**NEMOTRON_HF, "hidden_act": "silu"}, where="config.json")
    with pytest.raises(ConfigError, match="hidden_act.*'relu2': only SiLU-gated"):
        session_from_hf_config({**NEMOTRON_HF, "architectures": ["LlamaForCausalLM"],
                                "model_type": "llama"},
                               where="config.json")
