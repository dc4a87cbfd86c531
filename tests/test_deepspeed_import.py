"""``vtrain import deepspeed DS_CONFIG.json`` (core/io/deepspeed_import.py): DeepSpeed config
JSON files with a model into sessions, the expected plans spelled out; every key used, listed
or refused by name; Hugging Face Trainer's "auto" refused unless an option supplies it."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from core.io.deepspeed_import import (POLICY_FILE, load_rules, model_from_name,
                                      read_deepspeed_config, session_from_deepspeed)
from core.model.memory import bytes_per_parameter
from core.plan.fields import ConfigError
from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS

DATA = ROOT / "tests" / "data" / "deepspeed"
ZERO2 = DATA / "zero2_bf16.json"
HF_ZERO3 = DATA / "hf_trainer_zero3.json"
H100 = "H100-SXM5-80GB"


def _llama(seq_length: int = 4096):
    return model_from_name("Llama 3 8B", seq_length=seq_length)[0]


def _zero2() -> dict:
    return json.loads(ZERO2.read_text())


def _refused(cfg: dict, **kw) -> ConfigError:
    kw = {"num_gpus": 16, "gpu": H100, "recompute": "full", **kw}
    with pytest.raises(ConfigError) as err:
        session_from_deepspeed(cfg, _llama(), "ds_config.json", **kw)
    assert len(err.value.errors) == 1
    return err.value.errors[0]


def _leaves(cfg: dict, prefix: str = "") -> set[str]:
    """The file's keys as the importer accounts for them: a section with a rule of its own
    (scheduler, offload_optimizer) as one key."""
    rules = load_rules()
    out = set()
    for k, v in cfg.items():
        name = prefix + k
        if isinstance(v, dict) and name not in rules:
            out |= _leaves(v, name + ".")
        else:
            out.add(name)
    return out


def test_zero2_bf16_micro4_ga8_on_16_gpus():
    """ZeRO-2, bf16, micro-batch 4, 8 accumulation steps on 16 GPUs: B = 4 * 8 * 16 = 512,
    data parallelism over all 16 (t = p = 1), gradients held and reduce-scattered in bf16
    (DeepSpeed's default under ZeRO: the model's dtype), overlap_comm -> overlap_grad_reduce,
    no parameter prefetch below stage 3, DeepSpeed's engine adding each weight gradient."""
    imp = read_deepspeed_config(ZERO2, _llama(), num_gpus=16, gpu=H100, recompute="full")
    s = imp.session
    assert s.plan == ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=16, micro_batch_size=4,
        global_batch_size=512, schedule="1f1b", recompute="full", precision="bf16",
        sequence_parallel=False, zero_stage=2, overlap_grad_reduce=True,
        overlap_param_gather=False, grad_reduce_dtype="bf16", gradient_accumulation_fusion=False)
    assert s.model == dataclasses.replace(MODEL_PRESETS["Llama 3 8B"], seq_length=4096,
                                          make_vocab_size_divisible_by=1)
    assert (s.cluster.gpu, s.cluster.gpus_per_node) == (H100, 8)
    # ZeRO's accounting (Rajbhandari et al. 2020, Sec. 5): 2 bytes of bf16 weights, 2 of bf16
    # gradients sharded over 16, 12 of fp32 master weights and Adam moments plus the 4-byte fp32
    # copy of the gradients in the step, sharded over 16
    assert bytes_per_parameter(s.plan) == (2.0, 2 / 16, 16 / 16)
    # every key of the file is accounted for, once
    keys = _leaves(_zero2())
    assert set(imp.used) | set(imp.ignored) | set(imp.approximated) == keys
    assert not (set(imp.used) & set(imp.ignored)) and not (set(imp.used) & set(imp.approximated))
    assert imp.used["zero_optimization.stage"].startswith("2: plan.zero_stage")
    assert "optimizer.params.lr" in imp.ignored and "scheduler" in imp.ignored
    assert imp.ignored["zero_optimization.offload_optimizer"].startswith('"none": the modelled')
    assert "one layer per bucket" in imp.approximated["zero_optimization.reduce_bucket_size"]


def test_auto_is_refused_naming_the_key_and_its_option():
    """Hugging Face Trainer's template: "auto" batch and precision keys need the options."""
    cfg = json.loads(HF_ZERO3.read_text())
    err = _refused(cfg)
    assert err.field == "ds_config.json: train_micro_batch_size_per_gpu"
    assert "'auto'" in err.message and "--micro-batch-size" in err.message
    err = _refused(cfg, options={"--micro-batch-size": 2})
    assert err.field == "ds_config.json: gradient_accumulation_steps"
    assert "--gradient-accumulation-steps" in err.message
    err = _refused(cfg, options={"--micro-batch-size": 2, "--gradient-accumulation-steps": 4})
    assert err.field == "ds_config.json: bf16.enabled" and "--precision" in err.message


def test_hf_trainer_zero3_with_the_options():
    """The options fill in the "auto" keys; train_batch_size "auto" is micro * GA * GPUs as the
    Trainer fills it in (2 * 4 * 16 = 128); ZeRO-3 overlaps by default and prefetches
    ("auto": the Trainer's 0.9 h^2, positive): overlap_param_gather."""
    cfg = json.loads(HF_ZERO3.read_text())
    imp = session_from_deepspeed(cfg, _llama(), "ds_config.json", num_gpus=16, gpu=H100,
                                 recompute="full", options={
                                     "--micro-batch-size": 2, "--gradient-accumulation-steps": 4,
                                     "--precision": "bf16"})
    p = imp.session.plan
    assert (p.micro_batch_size, p.global_batch_size, p.zero_stage) == (2, 128, 3)
    assert (p.precision, p.grad_reduce_dtype) == ("bf16", "bf16")
    assert p.overlap_grad_reduce and p.overlap_param_gather
    assert imp.used["train_micro_batch_size_per_gpu"].startswith("'auto' (--micro-batch-size)")
    assert any("= 128, as Hugging Face Trainer" in n for n in imp.notes)
    # an option that disagrees with the file's own value is refused
    err = _refused(_zero2(), options={"--micro-batch-size": 8})
    assert err.field == "ds_config.json: train_micro_batch_size_per_gpu"
    assert "disagree" in err.message
    err = _refused(_zero2(), options={"--precision": "fp16"})
    assert err.field == "ds_config.json: bf16.enabled" and "disagree" in err.message


@pytest.mark.parametrize("section,device", [("offload_optimizer", "cpu"),
                                            ("offload_param", "nvme")])
def test_offload_is_refused_naming_the_key(section, device):
    cfg = _zero2()
    cfg["zero_optimization"]["stage"] = 3
    cfg["zero_optimization"][section] = {"device": device, "pin_memory": True}
    err = _refused(cfg)
    assert err.field == f"ds_config.json: zero_optimization.{section}.device"
    assert f'"{device}": not modelled' in err.message


def test_train_batch_size_mismatch_is_refused():
    """512 on 8 GPUs is not 4 * 8 * 8 = 256 (DeepSpeed's _batch_assertion)."""
    err = _refused(_zero2(), num_gpus=8)
    assert err.field == "ds_config.json: train_batch_size"
    assert "256" in err.message and "DeepSpeed's rule" in err.message


def test_batch_triple_derived_as_deepspeed_does():
    cfg = _zero2()
    del cfg["gradient_accumulation_steps"]  # 512 / (4 * 16) = 8
    s = session_from_deepspeed(cfg, _llama(), num_gpus=16, gpu=H100, recompute="full").session
    assert (s.plan.micro_batch_size, s.plan.global_batch_size) == (4, 512)
    cfg = _zero2()
    del cfg["train_batch_size"], cfg["gradient_accumulation_steps"]  # GA 1: 4 * 16
    s = session_from_deepspeed(cfg, _llama(), num_gpus=16, gpu=H100, recompute="full").session
    assert s.plan.global_batch_size == 64
    cfg = _zero2()
    del cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]  # 512 / 16
    s = session_from_deepspeed(cfg, _llama(), num_gpus=16, gpu=H100, recompute="full").session
    assert (s.plan.micro_batch_size, s.plan.global_batch_size) == (32, 512)


def test_fp16_zero1_defaults():
    """fp16 with ZeRO-1: gradients in fp16, overlap_comm false by default below stage 3."""
    cfg = _zero2()
    del cfg["bf16"]
    cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    cfg["zero_optimization"] = {"stage": 1}
    imp = session_from_deepspeed(cfg, _llama(), num_gpus=16, gpu=H100, recompute="full")
    p = imp.session.plan
    assert (p.precision, p.grad_reduce_dtype, p.zero_stage) == ("fp16", "fp16", 1)
    assert not p.overlap_grad_reduce and not p.overlap_param_gather
    assert "fp16.loss_scale" in imp.ignored


@pytest.mark.parametrize("change,field,words", [
    (lambda c: c.update(fp16={"enabled": True}), "fp16.enabled", "one mixed precision"),
    (lambda c: c["zero_optimization"].update(stage=0), "zero_optimization.stage",
     "BF16_Optimizer"),
    (lambda c: c["zero_optimization"].update(zero_quantized_weights=True),
     "zero_optimization.zero_quantized_weights", "ZeRO++"),
    (lambda c: c["zero_optimization"].update(zero_hpz_partition_size=8),
     "zero_optimization.zero_hpz_partition_size", "hpZ"),
    (lambda c: c.update(pipeline={"stages": "auto"}), "pipeline", "pipeline engine"),
    (lambda c: c.update(sparse_attention={"mode": "fixed"}), "sparse_attention", "block-sparse"),
    (lambda c: c.update(compression_training={}), "compression_training", "compression"),
    (lambda c: c["optimizer"].update(type="Lamb"), "optimizer.type", '"Lamb"'),
    (lambda c: c["optimizer"].update(type="OneBitAdam"), "optimizer.type", '"OneBitAdam"'),
    (lambda c: c.update(activation_checkpointing={"cpu_checkpointing": True}),
     "activation_checkpointing.cpu_checkpointing", "to the CPU"),
    (lambda c: c.update(communication_data_type="fp32"), "communication_data_type",
     "reduced in fp32"),
    (lambda c: c.update(data_types={"grad_accum_dtype": "fp32"}),
     "data_types.grad_accum_dtype", "accumulated in fp32"),
    (lambda c: c.update(amp={"enabled": "auto"}), "amp.enabled", "'auto'"),
    (lambda c: c.update(train_batch_sizes=512), "train_batch_sizes", "is not a DeepSpeed"),
    (lambda c: c["zero_optimization"].update(reduce_scatter=False),
     "zero_optimization.reduce_scatter", "all-reduced"),
])
def test_unmodelled_keys_are_refused_by_name(change, field, words):
    cfg = copy.deepcopy(_zero2())
    change(cfg)
    err = _refused(cfg)
    assert err.field == f"ds_config.json: {field}"
    assert words in err.message


def test_switched_off_sections_are_listed():
    cfg = _zero2()
    cfg.update(amp={"enabled": False}, activation_checkpointing={
        "partition_activations": True, "cpu_checkpointing": False}, tensorboard={"enabled": True})
    imp = session_from_deepspeed(cfg, _llama(), num_gpus=16, gpu=H100, recompute="full")
    assert imp.ignored["amp"].startswith("false: the modelled setting")
    assert "t = 1" in imp.ignored["activation_checkpointing.partition_activations"]
    assert imp.ignored["tensorboard"] == "logging"


def test_moe_models_are_refused():
    with pytest.raises(ConfigError) as err:
        session_from_deepspeed(_zero2(), model_from_name("Mixtral 8x7B")[0], num_gpus=16)
    assert err.value.errors[0].field == "--model" and "mixture-of-experts" in str(err.value)


def test_default_recompute_is_none_or_full():
    """Without --recompute the lightest of none and full that fits (a Hugging Face model has no
    selective recomputation): Llama 3 8B at b = 4, s = 4,096 fits only with full."""
    imp = read_deepspeed_config(ZERO2, _llama(), num_gpus=16, gpu=H100)
    assert imp.session.plan.recompute == "full"
    assert any("recompute=full" in n and "(none: does not fit)" in n for n in imp.notes)
    assert not any("selective" in n for n in imp.notes)


def test_policy_file_options_are_the_cli_options():
    """Each option the policy names for "auto" is an option of vtrain import deepspeed."""
    raw = json.loads(POLICY_FILE.read_text())
    options = {r["auto"] for r in raw["keys"].values() if "auto" in r}
    assert options == {"--micro-batch-size", "--gradient-accumulation-steps",
                       "--train-batch-size", "--precision"}
    r = subprocess.run([sys.executable, "-m", "core.cli", "import", "deepspeed", "--help"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0
    for option in options | {"--model", "--num-gpus", "--gpus-per-node", "--gpu", "--recompute"}:
        assert option in r.stdout
    assert "Hugging Face Trainer's \"auto\"" in r.stdout


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_cli_round_trip_through_simulate(tmp_path):
    """Import a Hugging Face config.json with the ZeRO-2 config, then simulate the session."""
    from tests.test_llama import LLAMA3_8B
    model = tmp_path / "config.json"
    model.write_text(json.dumps(LLAMA3_8B))
    out = tmp_path / "ds.json"
    r = _cli("import", "deepspeed", str(ZERO2), "--model", str(model), "--num-gpus", "16",
             "--gpu", "H100", "--seq-length", "4096", "--recompute", "full", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "B=512" in r.stdout and "zero=2" in r.stdout
    doc = json.loads(out.read_text())
    assert (doc["plan"]["data_parallel"], doc["plan"]["global_batch_size"],
            doc["plan"]["zero_stage"], doc["plan"]["precision"]) == (16, 512, 2, "bf16")
    r = _cli("simulate", str(out), "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["num_gpus"] == 16 and result["num_microbatches"] == 8  # GA 8
    assert result["iteration_time_s"] > 0


def test_cli_refusal_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "never.json"
    r = _cli("import", "deepspeed", str(HF_ZERO3), "--model", "Llama 3 8B", "--num-gpus", "16",
             "--out", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr and not out.exists()
    assert f"{HF_ZERO3}: train_micro_batch_size_per_gpu: 'auto'" in r.stderr
    r = _cli("import", "deepspeed", str(ZERO2), "--model", "no such model", "--num-gpus", "16",
             "--out", str(out))
    assert r.returncode == 2 and "--model" in r.stderr and not out.exists()


@pytest.mark.parametrize("text, where, words", [
    ('{\n  // ZeRO-2\n  "train_micro_batch_size_per_gpu": 2\n}', "line 2 column 3",
     "a comment; DeepSpeed's own reader (hjson) takes comments"),
    ('{"train_micro_batch_size_per_gpu": 2, # two\n "gradient_accumulation_steps": 4}',
     "line 1 column 39", "a comment"),
    ('{"train_micro_batch_size_per_gpu": 2, /* two */ "gradient_accumulation_steps": 4}',
     "line 1 column 39", "a comment"),
    ("compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n  zero_stage: 2\n", "not JSON",
     "a DeepSpeed config is a JSON object, opening with '{' (a YAML file, such as "
     "accelerate's config, is not one: give the JSON file its deepspeed_config_file names)"),
    ("  \n", "empty", "a DeepSpeed config is a JSON object"),
])
def test_comments_yaml_and_empty_files_are_refused_saying_what_they_are(text, where, words,
                                                                         tmp_path):
    """DeepSpeed reads its config with hjson (runtime/config.py: comments allowed); Hugging
    Face Trainer and accelerate (HfDeepSpeedConfig) with json.load, as this importer does.
    A comment was refused as "not a valid JSON file (Expecting property name enclosed in
    double quotes: line 2 column 3 (char 4))", an accelerate YAML or an empty file as
    "Expecting value: line 1 column 1": each is now named, at the parser's own position."""
    from core.io.session import SessionFileError
    path = tmp_path / "ds_config.json"
    path.write_text(text)
    with pytest.raises(SessionFileError) as err:
        read_deepspeed_config(path, _llama(), num_gpus=16, recompute="full")
    message = str(err.value)
    assert message.startswith(f"{path}: {where}: ") and words in message


def test_empty_model_name_is_refused_by_the_option_not_read_as_the_current_folder():
    """--model "" read Path(""), the current folder ("vtrain: error: .: is a folder, not a
    file"); it is neither a file nor a preset, named by --model."""
    for text in ("", "  "):
        with pytest.raises(ConfigError) as err:
            model_from_name(text)
        e = err.value.errors[0]
        assert e.field == "--model" and e.message.startswith(
            f"{text!r} is neither a file (a Hugging Face config.json or its folder) nor a preset")


def test_values_are_shown_as_the_json_file_writes_them_and_long_ones_cut():
    """The file is JSON: its values were shown as Python writes them ("bf16: True must be an
    object", "None", "'none'"), and a 100,000-character value or key was printed whole in
    the one-line refusal."""
    cfg = _zero2()
    cfg["bf16"] = True
    err = _refused(cfg)
    assert (err.field, err.message) == ("ds_config.json: bf16", "true must be an object (a "
                                        "section of DeepSpeed's config)")
    cfg = _zero2()
    cfg["optimizer"] = None
    assert _refused(cfg).message.startswith("null must be an object")
    cfg = _zero2()
    cfg["zero_optimization"]["overlap_comm"] = "true"
    assert _refused(cfg).message == '"true" must be true or false (a JSON boolean)'
    cfg = _zero2()
    cfg["train_micro_batch_size_per_gpu"] = "x" * 100_000
    err = _refused(cfg)
    assert err.message == '"' + "x" * 39 + '... must be a positive integer'
    cfg = _zero2()
    cfg["y" * 5000] = 1
    err = _refused(cfg)
    assert err.field == "ds_config.json: " + "y" * 80 + "..."


def test_a_derived_auto_train_batch_size_is_not_credited_to_an_option_not_given():
    """train_batch_size "auto" without --train-batch-size is micro * GA * GPUs (2 * 4 * 16 =
    128); its used line said "'auto' (--train-batch-size)", an option the user never gave."""
    cfg = json.loads(HF_ZERO3.read_text())
    kw = dict(num_gpus=16, gpu=H100, recompute="full")
    opts = {"--micro-batch-size": 2, "--gradient-accumulation-steps": 4, "--precision": "bf16"}
    imp = session_from_deepspeed(cfg, _llama(), "ds_config.json", **kw, options=opts)
    assert imp.session.plan.global_batch_size == 128
    assert imp.used["train_batch_size"].startswith(
        "'auto' (the micro-batch * accumulation steps * GPUs, as the Trainer fills it in): ")
    imp = session_from_deepspeed(cfg, _llama(), "ds_config.json", **kw,
                                 options={**opts, "--train-batch-size": 128})
    assert imp.used["train_batch_size"].startswith("'auto' (--train-batch-size): ")


def test_a_model_name_too_long_for_a_path_is_refused_by_the_option():
    """--model with 5,000 characters (a pasted text, not a preset): Path.exists raised
    OSError "File name too long", printed as "vtrain: error: xxxx...: File name too long",
    the whole text and no option named; it is neither a file nor a preset, named by --model,
    the text cut at 80 characters."""
    with pytest.raises(ConfigError) as err:
        model_from_name("x" * 5000)
    e = err.value.errors[0]
    assert e.field == "--model"
    assert e.message.startswith("'" + "x" * 80 + "...' is neither a file")
