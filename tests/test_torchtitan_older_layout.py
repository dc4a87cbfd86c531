"""torchtitan's older job-config layout (late 2024, the torchtitan paper's benchmarks: the
parallel degrees under [training] and [experimental], ``compile`` a [training] switch): read as
the current keys, named in messages as the file names them."""

from __future__ import annotations

import tomllib

import pytest

from core.io.torchtitan_import import session_from_torchtitan
from core.plan.fields import ConfigError

#: torchtitan's train_configs/llama3_8b.toml of late 2024 (torchtitan paper, Table 1's runs:
#: 8 H100, FSDP, local batch 2, seq 8192, per-op selective AC, compile)
OLDER = """
[model]
name = "llama3"
flavor = "8B"
norm_type = "rmsnorm"
tokenizer_path = "./torchtitan/datasets/tokenizer/original/tokenizer.model"

[training]
batch_size = 2
seq_len = 8192
warmup_steps = 200
max_norm = 1.0
steps = 1000
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
compile = true
dataset = "c4"

[experimental]
pipeline_parallel_degree = 1
enable_async_tensor_parallel = false

[checkpoint]
enable_checkpoint = false
model_weights_only = false

[activation_checkpoint]
mode = 'selective'
selective_ac_option = 'op'

[float8]
enable_float8_linear = false
"""


def _cfg(**changes):
    cfg = tomllib.loads(OLDER)
    for key, value in changes.items():
        sec, name = key.split("__")
        cfg.setdefault(sec, {})[name] = value
    return cfg


def test_the_older_layout_reads_as_the_current_one():
    res = session_from_torchtitan(_cfg(), "llama3_8b.toml", num_gpus=8)
    plan = res.session.plan
    assert (plan.tensor_parallel, plan.pipeline_parallel, plan.data_parallel) == (1, 1, 8)
    assert (plan.micro_batch_size, plan.global_batch_size) == (2, 16)
    assert plan.zero_stage == 3 and plan.recompute == "selective_op"
    assert res.session.model.seq_length == 8192
    assert "training.tensor_parallel_degree" in res.used
    assert "training.compile" in res.used  # read as compile.enable: compiled, fused
    assert res.session.model.bias_activation_fusion is True


def test_an_older_pipeline_degree_is_refused_by_its_name():
    """[experimental] pipeline_parallel_degree 4 was read as [parallelism]'s and given torchtitan
    0.1.0's split (num_layers + 2 over the stages: torchtitan 0.1.0 distributed/pipeline.py
    generate_split_points; Llama 3 8B's 32 layers over 4 stages 8, 9, 8, 7). torchtitan 0.1.0
    itself drops the key (config_manager.py _dict_to_dataclass keeps only its dataclasses'
    fields: no pipeline), and the split of the torchtitan that read it has no release to check:
    refused, naming the file's key. Degree 1 still reads."""
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(_cfg(training__batch_size=8,
                                     experimental__pipeline_parallel_degree=4),
                                "x.toml", num_gpus=8)
    assert err.value.errors[0].field == "x.toml: experimental.pipeline_parallel_degree"
    assert "older [experimental] layout" in err.value.errors[0].message
    assert "[parallelism] pipeline_parallel_degree" in err.value.errors[0].message
    res = session_from_torchtitan(_cfg(), "x.toml", num_gpus=8)  # pipeline_parallel_degree = 1
    assert res.session.plan.pipeline_parallel == 1
    assert "experimental.pipeline_parallel_degree" in res.used


def test_older_pipeline_microbatches_default_to_the_pipeline_degree():
    # torchtitan of late 2024: n_microbatches = pipeline_parallel_microbatches or the degree;
    # with the degree under [parallelism] (the split the importer models)
    cfg = _cfg(training__batch_size=8)
    del cfg["experimental"]["pipeline_parallel_degree"]
    cfg["parallelism"] = {"pipeline_parallel_degree": 4}
    cfg["experimental"]["pipeline_parallel_microbatches"] = 8
    res = session_from_torchtitan(cfg, "x.toml", num_gpus=8)
    plan = res.session.plan
    assert (plan.pipeline_parallel, plan.data_parallel, plan.micro_batch_size) == (4, 2, 1)
    assert plan.global_batch_size == 16
    # torchtitan 0.1.0's split of 32 layers over 4 stages: 34 = 9 + 9 + 8 + 8, less the
    # embedding on the first and the output layer on the last
    assert plan.pipeline_model_parallel_layout == "Et*8|t*9|t*8|t*7L"


def test_messages_name_the_files_older_key():
    with pytest.raises(ConfigError, match=r"x\.toml: training\.tensor_parallel_degree"):
        session_from_torchtitan(_cfg(training__tensor_parallel_degree=3), "x.toml", num_gpus=24)


def test_a_degree_given_under_both_names_is_refused():
    cfg = _cfg()
    cfg["parallelism"] = {"tensor_parallel_degree": 2}
    with pytest.raises(ConfigError, match="given twice"):
        session_from_torchtitan(cfg, "x.toml", num_gpus=8)


def test_the_batch_under_both_names_is_refused():
    """[training] batch_size (older) beside local_batch_size (its current name): the older 8
    was dropped silently (the plan took local_batch_size 2); refused by the older key, as the
    degrees given twice are, and named as the file names it alone."""
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(_cfg(training__local_batch_size=2, training__batch_size=8),
                                "x.toml", num_gpus=8)
    assert err.value.errors[0].field == "x.toml: training.batch_size"
    assert "given twice" in err.value.errors[0].message
    res = session_from_torchtitan(_cfg(training__batch_size=4), "x.toml", num_gpus=8)
    assert (res.session.plan.micro_batch_size, res.session.plan.global_batch_size) == (4, 32)
    assert "training.batch_size" in res.used and "training.local_batch_size" not in res.used
    with pytest.raises(ConfigError) as err:  # messages name it as the file does
        session_from_torchtitan(_cfg(training__batch_size=0), "x.toml", num_gpus=8)
    assert err.value.errors[0].field == "x.toml: training.batch_size"


def test_older_delayed_float8_scaling_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"float8\.scaling_type_weight.*delayed"):
        session_from_torchtitan(_cfg(float8__enable_float8_linear=True,
                                     float8__scaling_type_weight="delayed"), "x.toml", num_gpus=8,
                                gpu="H100-SXM5-80GB")
    res = session_from_torchtitan(_cfg(float8__enable_float8_linear=True,
                                       float8__scaling_type_weight="dynamic"), "x.toml",
                                  num_gpus=8, gpu="H100-SXM5-80GB")
    assert res.session.plan.precision == "fp8"


def test_fp8_on_a_gpu_without_it_names_the_older_switch():
    with pytest.raises(ConfigError, match=r"x\.toml: float8\.enable_float8_linear: "):
        session_from_torchtitan(_cfg(float8__enable_float8_linear=True), "x.toml", num_gpus=8)
