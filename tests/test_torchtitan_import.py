"""``vtrain import torchtitan CONFIG.toml`` (core/io/torchtitan_import.py): torchtitan job configs
into sessions, the expected sessions spelled out; every key used, listed or refused by name."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.io.torchtitan_import import (KEYS, load_toml, read_torchtitan_config,
                                       session_from_torchtitan)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "torchtitan"
LLAMA3_8B = DATA / "llama3_8b.toml"
LLAMA3_405B = DATA / "llama3_405b.toml"


def _plan(**kw) -> ParallelPlan:
    """ParallelPlan with torchtitan's fixed choices (TP sequence-parallel, fp32 gradient
    reduction, PyTorch's all-gather CP rotation, autograd's weight-gradient accumulation: no
    fused wgrad GEMMs; FSDP2's fp32 shards, in effect under FSDP (ZeRO-3); the
    column-parallel linears save their all-gathered input, set at every TP degree) and the fields given; with
    float8 torchao's Float8Linear, no persistent FP8 weight copies)."""
    return ParallelPlan(**{"grad_reduce_dtype": "fp32", "cp_comm_type": "allgather",
                           "gradient_accumulation_fusion": False,
                           "fsdp_fp32_params": True,
                           "fp8_impl": "torchao" if kw.get("precision") == "fp8" else "transformer_engine",
                           "tp_saved_input": "gathered",
                           **kw})


def test_llama3_8b_on_one_node():
    """The released llama3_8b.toml on 8 GPUs: FSDP over all 8 (ZeRO-3, resharded after the
    forward, prefetched: overlapped), per-op selective checkpointing, one 8,192-token sequence
    per GPU, 1,000 steps."""
    imp = read_torchtitan_config(LLAMA3_8B, num_gpus=8)
    s = imp.session
    # compile.enable false: the eager FeedForward, the unfused SwiGLU
    assert s.model == dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=8192,
                                          name=s.model.name, make_vocab_size_divisible_by=1,
                                          bias_activation_fusion=False)
    assert s.plan == _plan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                           micro_batch_size=1, global_batch_size=8, schedule="1f1b",
                           recompute="selective_op", precision="bf16", zero_stage=3,
                           overlap_grad_reduce=True, overlap_param_gather=True)
    assert s.cost.training_tokens == 1000 * 8 * 8192
    # every key of the file is accounted for, once
    raw = load_toml(LLAMA3_8B)
    keys = {f"{sec}.{k}" for sec, table in raw.items() for k in table}
    assert set(imp.used) | set(imp.ignored) == keys
    assert not set(imp.used) & set(imp.ignored)
    assert "compile.enable" in imp.used and "optimizer.lr" in imp.ignored


def test_llama3_405b_hsdp_tp_pp_float8():
    """512 GPUs: 2 replicas x FSDP 4 (HSDP: shard size 4), TP 8 (sequence-parallel, async:
    tp_comm_overlap), PP 8 interleaved with two stages per rank, torchtitan's split of 126
    layers over 16 virtual stages (the embedding and the output layer counted as layers: first
    and last 7), micro-batches of 1 from the local 16, FP8 tensorwise with the FP8 all-gather;
    FSDP keeps its parameters gathered with pipelining (torchtitan's default) and
    PipelineStage its gradients unsharded to the last micro-batch: ZeRO-1."""
    imp = read_torchtitan_config(LLAMA3_405B, num_gpus=512, gpu="H100-SXM5-80GB")
    s = imp.session
    assert s.model.name.startswith("Llama 3.1 405B") and s.model.seq_length == 8192
    assert s.plan == _plan(
        tensor_parallel=8, pipeline_parallel=8, data_parallel=8, micro_batch_size=1,
        global_batch_size=16 * 8, schedule="interleaved", virtual_pipeline_stages=2,
        recompute="full", precision="fp8", fp8_recipe="tensorwise", fp8_param_gather=True,
        sequence_parallel=True, tp_comm_overlap=True, tp_comm_overlap_backend="symmetric_memory",
        zero_stage=1, overlap_grad_reduce=True, data_parallel_shard_size=4,
        pipeline_model_parallel_layout="Et*7|" + "t*8|" * 14 + "t*7L")
    assert s.plan.num_gpus == 512 and s.plan.num_microbatches == 16
    assert any("modelled as ZeRO-1" in n for n in imp.notes)
    # FSDP under pipelining syncs gradients at the last micro-batch: autograd adds the others
    from core.plan.parallel import wgrad_accumulation
    assert wgrad_accumulation(s.plan) == "separate"


def test_the_vocabulary_is_the_tokenizers_unpadded():
    """torchtitan's output layer has the tokenizer's 128,256 rows at any t (no Megatron-style
    padding to 128 t: 129,024 at t = 8); the parameters count them so."""
    from core.model.counts import num_parameters
    from core.plan.model_config import padded_vocab_size
    s = read_torchtitan_config(LLAMA3_8B, num_gpus=8).session
    assert s.model.make_vocab_size_divisible_by == 1
    assert padded_vocab_size(s.model.vocab_size, 8, s.model.make_vocab_size_divisible_by) == 128_256
    padded = dataclasses.replace(s.model, make_vocab_size_divisible_by=128)
    assert padded_vocab_size(128_256, 8, 128) == 129_024
    # two untied (V x h) matrices: 2 x 768 x 4096 parameters fewer than with the padding
    assert num_parameters(padded, 8) - num_parameters(s.model, 8) == 2 * (129_024 - 128_256) * 4096


def test_degrees_without_minus_one_give_the_world_size():
    raw = load_toml(LLAMA3_8B)
    raw["parallelism"]["data_parallel_shard_degree"] = 4
    raw["parallelism"]["tensor_parallel_degree"] = 2
    s = session_from_torchtitan(raw).session
    assert (s.plan.num_gpus, s.plan.data_parallel, s.plan.tensor_parallel) == (8, 4, 2)
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=16)
    assert err.value.errors[0].field == "config.toml: parallelism.data_parallel_shard_degree"


def test_moe_flavour_with_expert_parallelism():
    """DeepSeek-V3 671B (torchtitan trains it without multi-token prediction) with EP 64
    borrowed from the FSDP ranks; expert tensor parallelism 1 (torchtitan's default)."""
    raw = load_toml(LLAMA3_8B)
    raw["model"].update(name="deepseek_v3", flavor="671B")
    raw.setdefault("compile", {})["enable"] = True  # eager experts: refused
    raw["training"]["seq_len"] = 4096
    raw["parallelism"].update(expert_parallel_degree=64, pipeline_parallel_degree=8)
    raw["activation_checkpoint"]["mode"] = "full"
    imp = session_from_torchtitan(raw, num_gpus=512)
    s = imp.session
    assert s.model.num_experts == 256 and s.model.mtp_num_layers == 0
    assert (s.plan.expert_parallel, s.plan.expert_tensor_parallel, s.plan.data_parallel) == \
        (64, 1, 64)
    assert s.plan.zero_stage == 1  # FSDP under pipelining keeps parameters and gradients
    # per-op selective checkpointing of MLA and MoE is refused by the session rules, named by
    # the file's key
    raw["activation_checkpoint"]["mode"] = "selective"
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=512)
    assert err.value.errors[0].field == "config.toml: activation_checkpoint.mode"


@pytest.mark.parametrize("etp,ok", [(1, True), (2, True), (4, False)])
def test_expert_tensor_parallelism_is_tp_or_one(etp, ok):
    """torchtitan's ParallelDims._validate asserts "Currently we only support ETP=TP or ETP=1"
    when expert_parallel_degree > 1 (the sparse mesh unflattens the dense one's fsdp x tp
    ranks): ETP 4 beside TP 2 was imported as a plan torchtitan does not build."""
    raw = _llama3_8b(tensor_parallel_degree=2, data_parallel_shard_degree=8,
                     expert_parallel_degree=4, expert_tensor_parallel_degree=etp)
    raw["model"].update(name="qwen3", flavor="30B-A3B")
    raw.setdefault("compile", {})["enable"] = True  # eager experts: refused
    raw["training"]["seq_len"] = 4096
    if ok:
        p = session_from_torchtitan(raw, num_gpus=16).session.plan
        assert (p.tensor_parallel, p.expert_parallel, p.expert_tensor_parallel) == (2, 4, etp)
        return
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=16)
    assert err.value.errors[0].field == "config.toml: parallelism.expert_tensor_parallel_degree"
    assert "ETP=TP or ETP=1" in err.value.errors[0].message


@pytest.mark.parametrize("rotate", [None, "allgather", "alltoall"])
def test_mla_flavour_with_context_parallelism_is_refused_whichever_rotation(rotate):
    """DeepSeek-V3 with context_parallel_degree 2: torchtitan runs it through PyTorch's
    context_parallel and SDPA, whose flash backend needs one head size for Q, K and V (MLA's
    192 and 128), whichever rotate method; refused by the degree's key for both rotations (the
    alltoall rotation was read as the p2p ring and timed as Transformer Engine's ring with
    FlashAttention), the model and the rest of the plan importing without cp."""
    raw = load_toml(LLAMA3_8B)
    raw["model"].update(name="deepseek_v3", flavor="671B")
    raw.setdefault("compile", {})["enable"] = True  # eager experts: refused
    raw["parallelism"].update(expert_parallel_degree=64, context_parallel_degree=2)
    raw["activation_checkpoint"]["mode"] = "full"
    if rotate is not None:
        raw["parallelism"]["context_parallel_rotate_method"] = rotate
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=128)
    e = err.value.errors[0]
    assert e.field == "config.toml: parallelism.context_parallel_degree"
    assert e.message.startswith("2 with multi-head latent attention is not modelled")
    raw["parallelism"]["context_parallel_degree"] = 1
    s = session_from_torchtitan(raw, num_gpus=128).session
    assert (s.model.multi_latent_attention, s.plan.context_parallel, s.plan.expert_parallel) \
        == (True, 1, 64)


@pytest.mark.parametrize("section,key,value", [
    ("model", "flavor", "8B_flex"),
    ("model", "flavor", "7B"),
    ("model", "name", "llama4"),
    ("model", "converters", ["mx"]),
    ("parallelism", "pipeline_parallel_schedule", "ZBVZeroBubble"),
    ("parallelism", "disable_loss_parallel", True),
    ("parallelism", "pipeline_parallel_layers_per_stage", 4),
    ("activation_checkpoint", "selective_ac_option", "2"),
    ("activation_checkpoint", "mode", "memory_budget"),
    ("float8", "recipe_name", "rowwise"),
    ("float8", "filter_fqns", []),
    ("training", "enable_cpu_offload", True),
    ("training", "mixed_precision_param", "float8"),
    ("training", "dtype", "bfloat16"),
    ("optimizer", "name", "Muon"),
    # was listed as an optimizer constant: the step runs in the backward, gradients freed
    ("optimizer", "early_step_in_backward", True),
    ("training", "some_new_knob", 3),
])
def test_refused_by_key(section, key, value):
    raw = load_toml(LLAMA3_8B)
    raw["parallelism"]["pipeline_parallel_degree"] = 2
    raw[section][key] = value
    if key in ("recipe_name", "filter_fqns"):  # float8 settings act with the converter only
        raw["model"]["converters"] = ["float8"]
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == f"config.toml: {section}.{key}"


def test_session_rules_named_by_the_files_keys():
    raw = load_toml(LLAMA3_8B)
    raw["parallelism"]["tensor_parallel_degree"] = 3  # 32 heads do not split over 3
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=24)
    assert "config.toml: parallelism.tensor_parallel_degree" in [e.field for e in
                                                                  err.value.errors]


def test_torchtitan_v02_keys_at_their_defaults_are_listed():
    """torchtitan 0.2.2's job config (config/job_config.py) keys the importer did not know were
    refused as unknown at their defaults (a [training.dataloader] table, gc_debug, the
    pipeline CSV, CP's load balancer, the EP backend, the memory budget): listed at the
    values that change nothing, refused by name at those that do."""
    raw = load_toml(LLAMA3_8B)
    raw["training"].update(gc_debug=False, dataloader={"num_workers": 2, "pin_memory": True})
    raw["parallelism"].update(pipeline_parallel_schedule_csv="",
                              pipeline_parallel_expert_parallel_overlap=True,
                              context_parallel_load_balancer="headtail",
                              expert_parallel_comm_backend="standard")
    raw["activation_checkpoint"].update(memory_budget=0.5, visualize_memory_budget_pareto=False)
    imp = session_from_torchtitan(raw, num_gpus=8)
    assert {"training.gc_debug", "training.dataloader.num_workers",
            "training.dataloader.pin_memory", "parallelism.pipeline_parallel_schedule_csv",
            "parallelism.pipeline_parallel_expert_parallel_overlap",
            "parallelism.context_parallel_load_balancer",
            "parallelism.expert_parallel_comm_backend", "activation_checkpoint.memory_budget",
            "activation_checkpoint.visualize_memory_budget_pareto"} <= set(imp.ignored)
    assert imp.session.plan.zero_stage == 3 and imp.session.plan.recompute == "selective_op"
    for key, value in (("gc_debug", True), ("context_parallel_load_balancer", "ptrr"),
                       ("expert_parallel_comm_backend", "deepep"),
                       ("pipeline_parallel_schedule_csv", "sched.csv")):
        bad = load_toml(LLAMA3_8B)
        section = "training" if key == "gc_debug" else "parallelism"
        bad[section][key] = value
        with pytest.raises(ConfigError) as err:
            session_from_torchtitan(bad, num_gpus=8)
        assert err.value.errors[0].field == f"config.toml: {section}.{key}"


def test_every_rule_kind_is_known():
    assert {r.kind for r in KEYS.values()} == {"used", "no_effect", "refused"}


def test_cli(tmp_path):
    out = tmp_path / "s.json"
    cmd = [sys.executable, "-m", "core.cli", "import", "torchtitan", str(LLAMA3_405B), "--out",
           str(out)]
    r = subprocess.run(cmd + ["--num-gpus", "512", "--gpu", "H100"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    s = json.loads(out.read_text())
    assert s["plan"]["tensor_parallel"] == 8 and s["cluster"]["gpu"] == "H100-SXM5-80GB"
    never = tmp_path / "never.json"
    r = subprocess.run(cmd[:-1] + [str(never)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "data_parallel_shard_degree" in r.stderr
    assert "Traceback" not in r.stderr and not never.exists()


@pytest.mark.parametrize("steps", [-5, 0, 1000.0, "1000"])
def test_steps_that_are_no_step_count_are_refused_by_key(steps):
    # steps = -5 was listed as used ("cost.training_tokens = steps * global batch * seq_len")
    # while the session silently kept the default 300B tokens
    raw = load_toml(LLAMA3_8B)
    raw["training"]["steps"] = steps
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == "config.toml: training.steps"


def _llama3_8b(**parallelism) -> dict:
    """Llama 3 8B, one 8,192-token sequence per rank, full checkpointing, the degrees 1 but
    those given."""
    return {"model": {"name": "llama3", "flavor": "8B"},
            "training": {"local_batch_size": 1, "seq_len": 8192, "steps": 1000},
            "parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 1,
                            "tensor_parallel_degree": 1, "pipeline_parallel_degree": 1,
                            "context_parallel_degree": 1, **parallelism},
            "activation_checkpoint": {"mode": "full"}}


@pytest.mark.parametrize("schedule", ["Interleaved1F1B", "ZBVZeroBubble"])
def test_a_schedule_without_pipelining_changes_nothing(schedule):
    """torchtitan reads pipeline_parallel_schedule only to build a pipeline (pipeline_llm, when
    pp_enabled); its deepseek_v3 configs give Interleaved1F1B at pipeline_parallel_degree 1.
    That was refused as an interleaved schedule on one stage (27 layers over 2 virtual
    stages); it is FSDP over 8 ranks with no pipeline. A refused schedule is refused where
    it runs (degree 2) only."""
    raw = _llama3_8b(data_parallel_shard_degree=8, pipeline_parallel_schedule=schedule)
    imp = session_from_torchtitan(raw, num_gpus=8)
    p = imp.session.plan
    assert (p.pipeline_parallel, p.schedule, p.virtual_pipeline_stages, p.zero_stage,
            p.pipeline_model_parallel_layout) == (1, "1f1b", None, 3, None)
    assert any(f"{schedule!r} has no effect" in n for n in imp.notes)
    raw["parallelism"].update(pipeline_parallel_degree=2, data_parallel_shard_degree=4)
    if schedule == "ZBVZeroBubble":
        with pytest.raises(ConfigError) as err:
            session_from_torchtitan(raw, num_gpus=8)
        assert err.value.errors[0].field == "config.toml: parallelism.pipeline_parallel_schedule"
    else:
        raw["training"]["local_batch_size"] = 2
        p = session_from_torchtitan(raw, num_gpus=8).session.plan
        assert (p.schedule, p.virtual_pipeline_stages) == ("interleaved", 2)


def test_async_tp_is_what_torchtitan_runs():
    """torchtitan's maybe_enable_async_tp (distributed/tensor_parallel.py) runs on a
    tensor-parallel mesh only and raises "Async TP requires 'model' in --compile.components and
    --compile.enable" without the compiled model. Async TP without compile was imported as
    tp_comm_overlap (a job torchtitan does not run); at TP 1 it was refused as tp_comm_overlap
    without sequence parallelism (torchtitan ignores it there)."""
    raw = _llama3_8b(tensor_parallel_degree=2, data_parallel_shard_degree=4,
                     enable_async_tensor_parallel=True)
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == "config.toml: parallelism.enable_async_tensor_parallel"
    assert "Async TP requires" in err.value.errors[0].message
    raw["compile"] = {"enable": True, "components": ["loss"]}  # the model not compiled
    with pytest.raises(ConfigError, match="Async TP requires"):
        session_from_torchtitan(raw, num_gpus=8)
    raw["compile"]["components"] = ["model", "loss"]
    p = session_from_torchtitan(raw, num_gpus=8).session.plan
    assert (p.tensor_parallel, p.tp_comm_overlap, p.sequence_parallel) == (2, True, True)
    del raw["compile"]["components"]  # torchtitan's default ["model", "loss"]
    assert session_from_torchtitan(raw, num_gpus=8).session.plan.tp_comm_overlap is True
    raw = _llama3_8b(data_parallel_shard_degree=8, enable_async_tensor_parallel=True)
    imp = session_from_torchtitan(raw, num_gpus=8)  # TP 1: no effect, compiled or not
    assert (imp.session.plan.tp_comm_overlap, imp.session.plan.zero_stage) == (False, 3)
    assert any("enable_async_tensor_parallel has no effect" in n for n in imp.notes)


def test_tensor_parallelism_without_fsdp_trains_in_fp32():
    """TP 8 with no FSDP: torchtitan's maybe_enable_amp has no mixed precision for TP or PP
    without FSDP/HSDP/CP, so the model trains in fp32 (TF32 off, PyTorch's default); it was
    imported as bf16."""
    s = session_from_torchtitan(_llama3_8b(tensor_parallel_degree=8), num_gpus=8,
                                gpu="H100-SXM5-80GB").session
    assert s.plan == _plan(tensor_parallel=8, pipeline_parallel=1, data_parallel=1,
                           micro_batch_size=1, global_batch_size=1, schedule="1f1b",
                           recompute="full", precision="fp32", tf32=False, zero_stage=0,
                           sequence_parallel=True, overlap_grad_reduce=False,
                           overlap_param_gather=False)


def test_pipeline_parallelism_without_fsdp_trains_in_fp32():
    s = session_from_torchtitan(_llama3_8b(pipeline_parallel_degree=2), num_gpus=2).session
    assert (s.plan.precision, s.plan.tf32, s.plan.zero_stage) == ("fp32", False, 0)


def test_float8_without_fsdp_under_tensor_parallelism_is_refused():
    """FP8 linears in torchtitan's fp32 model (TP, no FSDP) are not what plan.precision fp8
    models (bf16 weights)."""
    raw = _llama3_8b(tensor_parallel_degree=8)
    raw["model"]["converters"] = ["float8"]
    raw["float8"] = {"filter_fqns": ["output"]}
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB")
    assert err.value.errors[0].field == "config.toml: model.converters"
    raw["parallelism"].update(tensor_parallel_degree=1, data_parallel_shard_degree=8)
    assert session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB"
                                   ).session.plan.precision == "fp8"


def test_context_parallelism_alone_is_fsdp_over_its_ranks():
    """cp 8 with dp_shard 1: torchtitan's fsdp_enabled is dp_shard > 1 or cp > 1 and FSDP
    shards over the dp_shard * cp mesh: ZeRO-3 over d*cp = 8 ranks, in bf16 (it was ZeRO 0,
    142 GiB a GPU)."""
    from core.plan.parallel import zero_replicas, zero_shard_size
    s = session_from_torchtitan(_llama3_8b(context_parallel_degree=8), num_gpus=8,
                                gpu="H100-SXM5-80GB").session
    assert s.plan == _plan(tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                           micro_batch_size=1, global_batch_size=1, schedule="1f1b",
                           recompute="full", precision="bf16", zero_stage=3,
                           context_parallel=8, overlap_grad_reduce=True,
                           overlap_param_gather=True)
    assert (zero_shard_size(s.plan), zero_replicas(s.plan)) == (8, 1)
    # HSDP: 2 replicas of FSDP over dp_shard 1 x cp 4
    s = session_from_torchtitan(_llama3_8b(context_parallel_degree=4,
                                           data_parallel_replicate_degree=2),
                                num_gpus=8).session
    assert (s.plan.zero_stage, s.plan.data_parallel_shard_size, s.plan.precision) == (3, 1, "bf16")
    assert (zero_shard_size(s.plan), zero_replicas(s.plan)) == (4, 2)


def test_ddp_replicas_overlap_their_all_reduce():
    """replicate 8 alone is torch DDP (bucketed all-reduce in the backward hooks: overlapped)
    under torch.autocast to mixed_precision_param (bf16); it was not overlapped."""
    s = session_from_torchtitan(_llama3_8b(data_parallel_replicate_degree=8), num_gpus=8,
                                gpu="H100-SXM5-80GB").session
    assert s.plan == _plan(tensor_parallel=1, pipeline_parallel=1, data_parallel=8,
                           micro_batch_size=1, global_batch_size=8, schedule="1f1b",
                           recompute="full", precision="bf16", zero_stage=0,
                           overlap_grad_reduce=True, overlap_param_gather=False)


def test_ddp_with_tensor_parallelism_is_refused_as_torchtitan_does():
    """torchtitan raises "DDP has not supported > 1D parallelism" for replicas without FSDP
    beside other parallelism."""
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(_llama3_8b(data_parallel_replicate_degree=2,
                                           tensor_parallel_degree=4), num_gpus=8)
    assert err.value.errors[0].field == "config.toml: parallelism.data_parallel_replicate_degree"


def test_fsdp_under_pipelining_keeps_the_gradients_unsharded(tmp_path):
    """torch.distributed.pipelining's PipelineStage turns FSDP's gradient sync and its
    resharding after the backward off for every micro-batch but the last: Llama 3 70B with FSDP
    4 x PP 8 holds its stage's parameters gathered and its fp32 gradients unsharded, ZeRO-1
    (the optimizer state over the 4): stage 0's 9.6 B parameters need 4 bytes of gradient
    each, 35.8 GiB, and the plan does not fit on 80 GiB (as ZeRO-2 it came out at 70.2 GiB,
    fits). ``always`` (gathered again per micro-batch) is refused by its key."""
    from core.model.counts import params_per_gpu
    from core.sim.simulate import simulate, stage_memory
    raw = {"model": {"name": "llama3", "flavor": "70B"},
           "training": {"seq_len": 8192, "local_batch_size": 8, "global_batch_size": 64,
                        "steps": 1000, "mixed_precision_param": "bfloat16",
                        "mixed_precision_reduce": "float32"},
           "parallelism": {"data_parallel_shard_degree": 4, "data_parallel_replicate_degree": 1,
                           "tensor_parallel_degree": 1, "pipeline_parallel_degree": 8,
                           "pipeline_parallel_schedule": "1F1B",
                           "pipeline_parallel_microbatch_size": 1},
           "activation_checkpoint": {"mode": "full"}}
    imp = session_from_torchtitan(raw, num_gpus=32, gpu="H100-SXM5-80GB")
    s = imp.session
    assert (s.plan.zero_stage, s.plan.data_parallel, s.plan.pipeline_parallel) == (1, 4, 8)
    stage0 = stage_memory(s)[0]
    n0 = float(params_per_gpu(s.model, s.plan)[0])
    assert n0 / 1e9 == pytest.approx(9.61, abs=0.01)
    assert stage0.weights_bytes == pytest.approx(n0 * 2, rel=1e-9)
    assert stage0.gradients_bytes >= n0 * 4
    assert stage0.optimizer_bytes == pytest.approx(n0 * 12 / 4, rel=1e-9)
    assert simulate(s).report.memory_verdict == "does not fit"
    raw["parallelism"]["fsdp_reshard_after_forward"] = "always"
    with pytest.raises(ConfigError, match="fsdp_reshard_after_forward: always with pipeline"):
        session_from_torchtitan(raw, num_gpus=32, gpu="H100-SXM5-80GB")


def test_v02_quantize_section_is_the_float8_section():
    """torchtitan v0.2 (config/job_config.py: Quantize.linear.float8, a Float8Linear) moved
    [float8] to [quantize.linear.float8], with the converter quantize.linear.float8; its keys
    were refused as unknown. Read as [float8]'s, listed under the file's names; the MXFP8 and
    grouped-GEMM converters' settings change nothing without their converter."""
    raw = load_toml(LLAMA3_8B)
    old = raw.pop("float8")
    raw["model"]["converters"] = ["quantize.linear.float8"]
    raw["quantize"] = {"linear": {"float8": {**old, "enable_fsdp_float8_all_gather": True,
                                             "recipe_name": "tensorwise",
                                             "filter_fqns": ["output"]},
                                  "mx": {"recipe_name": "mxfp8_cublas"}},
                       "grouped_mm": {"float8": {"fqns": []}}}
    imp = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB")
    p = imp.session.plan
    assert (p.precision, p.fp8_recipe, p.fp8_param_gather) == ("fp8", "tensorwise", True)
    assert {"quantize.linear.float8.recipe_name", "quantize.linear.float8.filter_fqns",
            "quantize.linear.float8.enable_fsdp_float8_all_gather"} <= set(imp.used)
    assert {"quantize.linear.mx.recipe_name",
            "quantize.grouped_mm.float8.fqns"} <= set(imp.ignored)
    raw["quantize"]["linear"]["float8"]["recipe_name"] = "rowwise"
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB")
    assert err.value.errors[0].field == "config.toml: quantize.linear.float8.recipe_name"


def test_float8_settings_without_the_converter_change_nothing():
    """torchtitan's deepseek_v3_16b.toml (v0.2) keeps a [quantize.linear.float8] section with
    filter_fqns = ["output", "router.gate"] and no float8 in model.converters: the converter is
    not built, so its settings change nothing (Float8LinearConverter reads them only when
    listed). They were refused as FP8 on other modules; with the converter on they still are."""
    raw = load_toml(LLAMA3_8B)
    raw.pop("float8")
    raw["quantize"] = {"linear": {"float8": {"enable_fsdp_float8_all_gather": False,
                                             "precompute_float8_dynamic_scale_for_fsdp": False,
                                             "filter_fqns": ["output", "router.gate"]}},
                       "grouped_mm": {"float8": {"fqns": ["experts"]}}}
    imp = session_from_torchtitan(raw, num_gpus=8)
    assert imp.session.plan.precision == "bf16" and imp.session.plan.fp8_recipe is None
    assert "without the float8 converter" in imp.ignored["quantize.linear.float8.filter_fqns"]
    raw["model"]["converters"] = ["quantize.linear.float8"]
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == "config.toml: quantize.linear.float8.filter_fqns"
    # the older [float8] section: the same, with the older switch off
    raw = load_toml(LLAMA3_8B)
    raw["float8"].update(filter_fqns=[], emulate=True, enable_float8_linear=False)
    imp = session_from_torchtitan(raw, num_gpus=8)
    assert imp.session.plan.precision == "bf16"
    assert {"float8.filter_fqns", "float8.emulate"} <= set(imp.ignored)
    raw["float8"]["enable_float8_linear"] = True
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == "config.toml: float8.filter_fqns"


@pytest.mark.parametrize("section", ["float8", "quantize.linear.float8"])
def test_float8_without_filter_fqns_converts_the_output_layer_and_is_refused(section):
    """torchtitan's Float8Linear.filter_fqns defaults to [] (config/job_config.py, v0.2.2:
    field(default_factory=list)): module_filter_fn converts every nn.Linear with dimensions
    that are multiples of 16, Llama 3's output layer (4096 x 128,256) included. It was imported
    as the simulator's fp8, whose output layer stays BF16; refused by the file's key, and
    accepted at ["output"] (torchtitan's train_configs), which the message says; the older
    enable_float8_linear converter skipped the output layer itself and still imports."""
    raw = load_toml(LLAMA3_8B)
    raw.pop("float8")
    settings = {"enable_fsdp_float8_all_gather": True}
    if section == "float8":
        raw["float8"] = settings
    else:
        raw["quantize"] = {"linear": {"float8": settings}}
    raw["model"]["converters"] = [section]
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB")
    assert err.value.errors[0].field == f"config.toml: {section}.filter_fqns"
    assert 'filter_fqns = ["output"]' in err.value.errors[0].message
    settings["filter_fqns"] = ["output"]
    imp = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB")
    plan = imp.session.plan
    assert (plan.precision, plan.fp8_recipe, plan.fp8_param_gather) == ("fp8", "tensorwise", True)
    # required and checked: listed as used, never as "no effect ... off (when on: ...)"
    assert f"{section}.filter_fqns" not in imp.ignored
    assert imp.used[f"{section}.filter_fqns"].startswith('checked: ["output"] keeps the output '
                                                         "layer out of the float8 conversion")
    del settings["filter_fqns"]
    raw["model"]["converters"] = []
    raw.setdefault("float8", {})["enable_float8_linear"] = True
    assert session_from_torchtitan(raw, num_gpus=8,
                                   gpu="H100-SXM5-80GB").session.plan.precision == "fp8"


@pytest.mark.parametrize("name,flavor", [("qwen3", "30B-A3B"), ("deepseek_v3", "671B")])
def test_float8_on_a_moe_flavour_is_refused(name, flavor):
    """torchtitan's float8 converter swaps nn.Linear only (components/quantization/float8.py);
    GroupedExperts' w1/w2/w3 are nn.Parameter run by grouped_mm (models/moe/moe.py): the routed
    experts stay BF16 while the simulator's fp8 would run them in FP8. Refused by the
    converter's key (it was simulated with FP8 experts); the same flavour in bf16 imports."""
    raw = load_toml(LLAMA3_8B)
    raw["model"].update(name=name, flavor=flavor, converters=["float8"])
    raw.setdefault("compile", {})["enable"] = True  # eager experts: refused
    raw["training"]["seq_len"] = 4096
    raw["parallelism"]["expert_parallel_degree"] = 8
    raw["activation_checkpoint"]["mode"] = "full"
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=64, gpu="H100-SXM5-80GB")
    assert err.value.errors[0].field == "config.toml: model.converters"
    assert "routed experts" in str(err.value)
    raw["model"]["converters"] = []
    assert session_from_torchtitan(raw, num_gpus=64).session.plan.precision == "bf16"


_BASE_TOML = LLAMA3_8B.read_text() if LLAMA3_8B.exists() else ""


@pytest.mark.parametrize("text,rule", [
    # each exited 1: RecursionError, ValueError (int() of 5,000 digits), OverflowError
    (_BASE_TOML + "\n[extra]\nx = " + "[" * 5000 + "]" * 5000 + "\n",
     "is not TOML this program reads: nested more than 64 levels deep"),
    (_BASE_TOML + "\n[extra]\n" + "a." * 3000 + "b = 1\n",
     "TOML nested 3002 levels deep, more than 64"),
    (_BASE_TOML.replace("local_batch_size = 1", "local_batch_size = " + "9" * 5000),
     "an integer of 4,300 digits or more is beyond the range of any number"),
    (_BASE_TOML.replace("local_batch_size = 1", "local_batch_size = " + "9" * 400),
     "training.local_batch_size: an integer of about 400 digits is beyond the range of any number"),
    # TOML's nan and inf: refused by key, as a session file's NaN is
    (_BASE_TOML.replace("lr = 3e-4", "lr = nan"), "optimizer.lr: NaN must be a finite number"),
])
def test_toml_beyond_a_config_is_refused_naming_the_file(tmp_path, text, rule):
    path = tmp_path / "job.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_toml(path)
    assert str(err.value).startswith(f"{path}: {rule}"), str(err.value)


def test_a_toml_fifo_is_refused_without_blocking(tmp_path):
    """open() of a FIFO waited for a writer forever."""
    import os
    path = tmp_path / "job.toml"
    os.mkfifo(path)
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "torchtitan", str(path),
                        "--num-gpus", "8", "--out", str(tmp_path / "s.json")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr == (f"vtrain: error: {path}: is not a regular file (a "
                                              "FIFO, device or socket is not read)\n"), r.stderr


@pytest.mark.parametrize("section,key,value", [
    ("parallelism", "enable_async_tensor_parallel", "true"),
    ("float8", "enable_float8_linear", "true"),
    ("float8", "enable_float8_linear", 1),
    ("float8", "enable_fsdp_float8_all_gather", "true"),
])
def test_a_switch_that_is_no_boolean_is_refused_not_read_as_off(section, key, value):
    # "true" (a string) was read as off: tensor_parallel_degree 2 with async TP "true" gave
    # tp_comm_overlap false, enable_float8_linear "true" a bf16 plan, exit 0
    raw = load_toml(LLAMA3_8B)
    raw["parallelism"]["tensor_parallel_degree"] = 2
    raw.setdefault(section, {})[key] = value
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB")
    assert err.value.errors[0].field == f"config.toml: {section}.{key}"
    assert "must be true or false" in err.value.errors[0].message
    raw[section][key] = True  # the boolean is used
    raw["compile"]["enable"] = True  # async TP needs the compiled model
    s = session_from_torchtitan(raw, num_gpus=8, gpu="H100-SXM5-80GB").session
    assert (s.plan.tp_comm_overlap, s.plan.precision, s.plan.fp8_param_gather) == {
        "enable_async_tensor_parallel": (True, "bf16", False),
        "enable_float8_linear": (False, "fp8", False),
        "enable_fsdp_float8_all_gather": (False, "bf16", False)}[key]  # FP8 gathers need fp8


@pytest.mark.parametrize("section,key,value", [
    ("model", "flavor", ["8B"]), ("model", "name", {"a": 1}),
    ("activation_checkpoint", "mode", ["full"]), ("optimizer", "name", ["AdamW"]),
    ("parallelism", "pipeline_parallel_schedule", ["1F1B"]),
    ("training", "mixed_precision_param", {"x": "bfloat16"}),
])
def test_an_array_or_table_where_a_name_belongs_is_refused_by_key(tmp_path, section, key, value):
    # each was "internal error: TypeError: unhashable type: 'list'" (or AttributeError), exit 1
    raw = load_toml(LLAMA3_8B)
    raw[section][key] = value
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == f"config.toml: {section}.{key}"
    text = LLAMA3_8B.read_text().replace('flavor = "8B"', 'flavor = ["8B"]')
    (tmp_path / "c.toml").write_text(text)
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "torchtitan",
                        str(tmp_path / "c.toml"), "--num-gpus", "8", "--out",
                        str(tmp_path / "s.json")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not (tmp_path / "s.json").exists()
    assert r.stderr.strip() == "vtrain: error: c.toml: model.flavor: ['8B'] must be a string"


def _interleaved_job(local: int, glob: int = -1) -> dict:
    """A Llama 3 debugmodel job on 8 GPUs: Interleaved1F1B over 2 ranks (4 stages), FSDP 4,
    micro-batches of 1, so ``local`` micro-batches per step."""
    return {"model": {"name": "llama3", "flavor": "debugmodel"},
            "training": {"seq_len": 2048, "local_batch_size": local, "global_batch_size": glob},
            "parallelism": {"pipeline_parallel_degree": 2,
                            "pipeline_parallel_schedule": "Interleaved1F1B",
                            "pipeline_parallel_microbatch_size": 1},
            "activation_checkpoint": {"mode": "none"}}


@pytest.mark.parametrize("local,glob", [(3, -1), (1, -1), (3, 24)])
def test_an_interleaved_count_torch_runs_in_rounds_is_refused_by_the_files_key(local, glob):
    """torch.distributed.pipelining's ScheduleInterleaved1F1B runs n micro-batches a step in
    max(1, n // p) rounds (3 on 2 ranks: one round); the simulator's order is Megatron-Core's,
    groups of p, so n must be a multiple of p. The refusal names the file's key (not a
    global batch the file may not give), and gradient accumulation (24 = 2 steps of 3 on 4
    replicas) does not hide a step's count: as m = 6 it was imported as one pipeline of 6."""
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(_interleaved_job(local, glob), num_gpus=8)
    (e,) = err.value.errors
    assert e.field == "config.toml: parallelism.pipeline_parallel_microbatch_size"
    assert f"{local} micro-batches per step" in e.message and "\n" not in e.message
    plan = session_from_torchtitan(_interleaved_job(4, 32), num_gpus=8).session.plan
    assert (plan.schedule, plan.virtual_pipeline_stages, plan.num_microbatches) == (
        "interleaved", 2, 8)


def test_the_default_every_second_layer_checkpointing_is_refused_as_the_default():
    """torchtitan's defaults (mode selective, selective_ac_option "2") are what a job without
    [activation_checkpoint] runs: refused by the key, saying the value is the default (the
    file holds no "2" to find)."""
    raw = {"model": {"name": "llama3", "flavor": "8B"}}
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    (e,) = err.value.errors
    assert e.field == "config.toml: activation_checkpoint.selective_ac_option"
    assert "torchtitan's default" in e.message
    raw["activation_checkpoint"] = {"selective_ac_option": "2"}
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert "default" not in err.value.errors[0].message


def test_gradient_accumulation_under_pipelining_is_noted_as_one_pipeline():
    """2 accumulation steps of 4 micro-batches on 2 stages: torchtitan runs two schedules (two
    bubbles), the plan one of 8; the import says so, and says nothing without accumulation."""
    raw = _interleaved_job(4, 32)
    raw["parallelism"]["pipeline_parallel_schedule"] = "1F1B"
    imp = session_from_torchtitan(raw, num_gpus=8)
    assert imp.session.plan.num_microbatches == 8
    (note,) = [n for n in imp.notes if n.startswith("gradient accumulation")]
    assert "2 pipeline schedules of 4" in note and "one of 8" in note
    raw["training"]["global_batch_size"] = 16
    assert not [n for n in session_from_torchtitan(raw, num_gpus=8).notes
                if n.startswith("gradient accumulation")]


def test_a_sequence_tp_does_not_split_is_refused_by_the_tp_degree():
    """torchtitan's TP is always sequence-parallel (plan.sequence_parallel is no key of the
    file): 4097 tokens over 2 ranks is refused naming parallelism.tensor_parallel_degree."""
    raw = {"model": {"name": "llama3", "flavor": "8B"},
           "training": {"seq_len": 4097, "local_batch_size": 1},
           "parallelism": {"tensor_parallel_degree": 2},
           "activation_checkpoint": {"mode": "none"}}
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert [e.field for e in err.value.errors] == [
        "config.toml: parallelism.tensor_parallel_degree"]
    assert "seq_length=4097" in err.value.errors[0].message


def _with_checkpoint(**table) -> dict:
    raw = load_toml(LLAMA3_8B)
    raw["checkpoint"] = {"folder": "checkpoint", **table}
    return raw


def test_checkpoints_as_torchtitan_saves_them():
    """[checkpoint] (torchtitan's CheckpointManager._should_save, v0.2.2): enable false (its
    default) saves nothing: NO_CHECKPOINT_INTERVAL, interval and async_mode listed as having
    no effect; enable true saves every interval steps (default 500) and at the last step,
    async_mode async / async_with_pinned_mem as reliability.async_save. The user's file
    (enable false, interval 500, async_mode disabled) was charged Daly's interval."""
    from core.io.torchtitan_import import CHECKPOINT_INTERVAL_DEFAULT
    from core.plan.cluster import NO_CHECKPOINT_INTERVAL
    assert CHECKPOINT_INTERVAL_DEFAULT == 500
    off = session_from_torchtitan(_with_checkpoint(enable=False, interval=500,
                                                   async_mode="disabled"), num_gpus=8)
    assert off.session.reliability.checkpoint_interval_iterations == NO_CHECKPOINT_INTERVAL
    assert off.session.reliability.async_save is False
    assert "checkpoint.enable" in off.used
    assert off.ignored["checkpoint.interval"].startswith("500: no effect without checkpoint.enable")
    assert "no effect without" in off.ignored["checkpoint.async_mode"]
    raw = load_toml(LLAMA3_8B)
    raw.pop("checkpoint", None)  # torchtitan's default: no checkpoint
    assert session_from_torchtitan(raw, num_gpus=8).session.reliability \
        .checkpoint_interval_iterations == NO_CHECKPOINT_INTERVAL
    for table, interval, asynchronous in (
            ({"enable": True}, 500, False),
            ({"enable": True, "interval": 100, "async_mode": "async"}, 100, True),
            ({"enable": True, "interval": 7, "async_mode": "async_with_pinned_mem"}, 7, True),
            ({"enable": True, "async_mode": "disabled"}, 500, False)):
        imp = session_from_torchtitan(_with_checkpoint(**table), num_gpus=8)
        rel = imp.session.reliability
        assert (rel.checkpoint_interval_iterations, rel.async_save) == (interval, asynchronous)
        assert {f"checkpoint.{k}" for k in table} <= set(imp.used)
    # the run saves every interval and at the end: 1,000 steps at 500 is 2 saves, at 300
    # 4 (300, 600, 900, 1,000); without enable none
    from core.sim.goodput import checkpoint_size, goodput
    for table, saves in (({"enable": True}, 2), ({"enable": True, "interval": 300}, 4),
                         ({"enable": False}, 0)):
        s = session_from_torchtitan(_with_checkpoint(**table), num_gpus=8).session
        g = goodput(iteration_time_s=1.0, num_iterations=1000, num_gpus=8,
                    reliability=s.reliability, size=checkpoint_size(s.model, s.plan, 8),
                    price_per_gpu_hour_usd=2.0, num_samples=10)
        assert g.num_checkpoints == saves
    with pytest.raises(ConfigError, match="checkpoint.async_mode"):
        session_from_torchtitan(_with_checkpoint(enable=True, async_mode="background"),
                                num_gpus=8)
    with pytest.raises(ConfigError, match="checkpoint.interval"):
        session_from_torchtitan(_with_checkpoint(enable=True, interval=0), num_gpus=8)
    with pytest.raises(ConfigError, match="checkpoint.enable"):
        session_from_torchtitan(_with_checkpoint(enable="yes"), num_gpus=8)
    # older torchtitan's interval_type: steps read as such, seconds refused by name
    imp = session_from_torchtitan(_with_checkpoint(enable=True, interval=50,
                                                   interval_type="steps"), num_gpus=8)
    assert imp.session.reliability.checkpoint_interval_iterations == 50
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(_with_checkpoint(enable=True, interval=600,
                                                 interval_type="seconds"), num_gpus=8)
    assert err.value.errors[0].field == "config.toml: checkpoint.interval_type"


def test_a_misspelt_key_is_refused_with_the_closest_name():
    """tensor_paralel_degree was refused by name without the "did you mean" that --set gives
    (core.util.text.did_you_mean over the importer's known keys); a misspelt section too."""
    raw = load_toml(LLAMA3_8B)
    raw["parallelism"]["tensor_paralel_degree"] = 2
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == "config.toml: parallelism.tensor_paralel_degree"
    assert err.value.errors[0].message.endswith(
        "; did you mean parallelism.tensor_parallel_degree?")
    raw = load_toml(LLAMA3_8B)
    raw["quantize"] = {"linear": {"float8": {"filter_fqn": ["output"]}}}
    with pytest.raises(ConfigError, match="did you mean quantize.linear.float8.filter_fqns"):
        session_from_torchtitan(raw, num_gpus=8)
    raw = load_toml(LLAMA3_8B)
    raw["paralelism"] = raw.pop("parallelism")
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert "; did you mean parallelism." in err.value.errors[0].message
    raw = load_toml(LLAMA3_8B)
    raw["parallelism"]["zzzz"] = 1  # nothing close: no guess
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert "did you mean" not in err.value.errors[0].message


def test_compile_decides_the_activation_fusion():
    """torchtitan's FeedForward, w2(F.silu(w1(x)) * w3(x)): eager (compile.enable false, or
    "model" not in compile.components) it keeps silu's output too, the unfused activation
    (model.bias_activation_fusion false: 8f bytes per token instead of 6f, BF16); compiled with
    "model" among the components it is read as the fused kernel. A MoE flavour uncompiled is
    refused naming the field (the experts' eager path is not modelled)."""
    from core.model.layer import dense_activation_bytes_per_layer
    raw = load_toml(LLAMA3_8B)
    eager = session_from_torchtitan(raw, num_gpus=8)
    raw["compile"]["enable"] = True
    compiled = session_from_torchtitan(raw, num_gpus=8)
    raw["compile"]["components"] = ["loss"]
    loss_only = session_from_torchtitan(raw, num_gpus=8)
    assert (eager.session.model.bias_activation_fusion,
            compiled.session.model.bias_activation_fusion,
            loss_only.session.model.bias_activation_fusion) == (False, True, False)
    assert any("not compiled" in n for n in eager.notes)
    m_e, m_c, plan = eager.session.model, compiled.session.model, eager.session.plan
    # per-op selective checkpointing saves matmul outputs only: the same either way
    assert dense_activation_bytes_per_layer(m_e, plan, "selective_op") == \
        dense_activation_bytes_per_layer(m_c, plan, "selective_op")
    none = dataclasses.replace(plan, recompute="none")
    s, f = m_e.seq_length, m_e.ffn_hidden_size  # b = 1, t = 1: silu's output, 2 bytes each
    assert dense_activation_bytes_per_layer(m_e, none, "none") - \
        dense_activation_bytes_per_layer(m_c, none, "none") == 2 * s * f
    raw = load_toml(LLAMA3_8B)
    raw["model"].update(name="qwen3", flavor="30B-A3B")
    raw["training"]["seq_len"] = 4096
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    assert err.value.errors[0].field == "config.toml: compile.enable"  # the file's key


def test_an_uncompiled_moe_flavour_is_refused_naming_compile():
    """torchtitan runs uncompiled experts eagerly (unfused SwiGLU), which is not modelled: the
    refusal names the file's own key, compile.enable, and the way to plan it (not the
    session field model.bias_activation_fusion the user never wrote); compiled, it imports."""
    raw = load_toml(LLAMA3_8B)
    raw["model"].update(name="qwen3", flavor="30B-A3B")
    raw["parallelism"].update(expert_parallel_degree=8)
    raw["activation_checkpoint"]["mode"] = "full"
    raw.get("compile", {}).pop("enable", None)
    with pytest.raises(ConfigError) as err:
        session_from_torchtitan(raw, num_gpus=8)
    (e,) = err.value.errors
    assert e.field == "config.toml: compile.enable"
    assert "plan the compiled model ([compile] enable = true" in e.message
    raw.setdefault("compile", {})["enable"] = True
    assert session_from_torchtitan(raw, num_gpus=8).session.model.bias_activation_fusion
