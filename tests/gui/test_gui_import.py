"""File > Import: a Hugging Face config, a Megatron-LM launch script, a torchtitan job config,
a DeepSpeed config with its model, a Megatron-Bridge recipe (picked from its table) or
run_config.yaml, and the vTrain authors' JSON, each read by the command line's reader with the options the
command line takes as flags; the importer's notes shown before the session opens untitled; a
refusal is the reader's one message and leaves the open session as it was."""

from __future__ import annotations

import json
import re

import pytest
from PySide6 import QtWidgets

from core.cli import build_parser
from core.model import model_math
from tests.test_llama import LLAMA3_8B
from vtrain_gui.import_dialogs import (OPTIONS, SOURCES, ImportOptions, ImportOptionsDialog,
                                       ImportReviewDialog, RecipeDialog, read_import)

#: A launch in today's style: a bash array with +=, the node count from the environment.
LAUNCH = r"""#!/bin/bash
GPUS_PER_NODE=8
MODEL_ARGS=(
  --num-layers 32 --hidden-size 4096 --num-attention-heads 32
  --seq-length 4096 --max-position-embeddings 4096 --vocab-size 32000
)
MODEL_ARGS+=(--bf16)
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py "${MODEL_ARGS[@]}" \
  --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 \
  --micro-batch-size 1 --global-batch-size 64 --lr 1e-4 --manual-gc
"""

#: torchtitan's Llama 3 8B: FSDP over every rank (-1: the world size is not in the file).
TORCHTITAN = """[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 1
seq_len = 8192
steps = 1000

[parallelism]
data_parallel_shard_degree = -1

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[compile]
enable = true
"""

#: The authors' format: GPT-3 1.3B's shape on 16 GPUs.
AUTHORS = {"num_gpus": 16, "gpu_name": "A100", "tensor_parallel_size": 4,
           "data_parallel_size": 2, "pipeline_parallel_size": 2, "global_batch_size": 64,
           "micro_batch_size": 1, "num_layers": 24, "hidden_size": 2048,
           "num_attention_heads": 16, "max_length": 2048, "use_checkpoint": True}


class Reviews:
    """Records the notes dialogs shown (title, summary, notes text) and answers them."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, str, str]] = []
        self.answer = QtWidgets.QDialog.DialogCode.Accepted

    def exec_(self, dialog: ImportReviewDialog) -> QtWidgets.QDialog.DialogCode:
        self.shown.append((dialog.windowTitle(), dialog.summary.text(), dialog.text()))
        return self.answer


@pytest.fixture
def reviews(monkeypatch) -> Reviews:
    rec = Reviews()
    monkeypatch.setattr(ImportReviewDialog, "exec", lambda self: rec.exec_(self))
    return rec


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_import_menu_offers_every_source(window):
    menu_texts = [a.text() for a in window.importer.actions.values()]
    assert list(window.importer.actions) == ["hf", "megatron", "torchtitan", "deepspeed",
                                             "bridge_recipe", "bridge", "vtrain"]
    assert all(t.endswith("…") for t in menu_texts)


@pytest.mark.parametrize("key", [k for k, s in SOURCES.items() if s.options])
def test_every_option_asked_for_is_the_commands_flag(key, tmp_path):
    """The dialog asks for the flags of the command that reads the same file: each option's
    flag parses into the option's field with the command line's own parser."""
    parser = build_parser()
    command = SOURCES[key].command.split()[1:]
    values = {"gpu": "H100-SXM5-80GB", "variables": "NNODES=2", "allow_unknown": None,
              "model": "Llama 3 8B", "recompute": "full", "precision": "fp16"}
    # the command's required flags, before the one tried (given again, the last one counts)
    required = [arg for name in SOURCES[key].required
                for arg in (OPTIONS[name][1], values.get(name, "1"))]
    assert set(SOURCES[key].required) <= set(SOURCES[key].options)
    for name in SOURCES[key].options:
        flag = OPTIONS[name][1]
        value = values.get(name, "7")
        ns = parser.parse_args([*command, "f", "--out", str(tmp_path / "o.json"), *required,
                                flag] + ([] if value is None else [value]))
        got = getattr(ns, "var" if name == "variables" else name)
        assert got == ([value] if name == "variables" else True if value is None
                       else value if name in values else 7)


def test_hf_config_opens_untitled_after_its_notes(window, qtbot, tmp_path, reviews,
                                                   message_boxes, real_simulate):
    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    path = _write(folder, "config.json", json.dumps(LLAMA3_8B))
    with qtbot.waitSignal(window.result_shown, timeout=60_000):
        assert window.importer.import_path("hf", path, ImportOptions(gpu="H100-SXM5-80GB"))
    session = window.session()
    assert session.model.name == "Meta-Llama-3-8B"
    assert model_math.num_parameters(session.model) == 8_030_261_248
    assert (session.cluster.gpu, session.cluster.gpus_per_node) == ("H100-SXM5-80GB", 8)
    assert window.path is None and window.isWindowModified()
    (title, summary, notes), = reviews.shown
    assert "rope_theta" in notes  # a field listed as changing nothing
    assert "8.03 B" in summary and "H100-SXM5-80GB" in summary
    assert not message_boxes.of_kind("critical")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=30_000)


def test_refused_hf_config_leaves_the_session_untouched(window, tmp_path, reviews,
                                                        message_boxes):
    before = window.session().to_dict()
    path = _write(tmp_path, "config.json",
                  json.dumps({**LLAMA3_8B, "quantization_config": {"quant_method": "gptq"}}))
    assert not window.importer.import_path("hf", path)
    (kind, title, text), = message_boxes.of_kind("critical")
    assert text == f"{path}: quantization_config: quantized weights are not modelled"
    assert not reviews.shown
    assert window.session().to_dict() == before and window.path is None


def test_cancelling_the_notes_leaves_the_session_untouched(window, tmp_path, reviews):
    before = window.session().to_dict()
    reviews.answer = QtWidgets.QDialog.DialogCode.Rejected
    path = _write(tmp_path, "authors.json", json.dumps(AUTHORS))
    assert not window.importer.import_path("vtrain", path)
    assert len(reviews.shown) == 1
    assert window.session().to_dict() == before and not window.isWindowModified()


def test_megatron_launch_through_the_menu_asks_for_the_missing_variable(
        window, qtbot, tmp_path, reviews, message_boxes, monkeypatch):
    """File > Import > Megatron-LM launch script: the script takes NNODES from its environment;
    Import without it shows the reader's refusal and the dialog stays; with NNODES=2 the
    16-GPU launch opens, its ignored and unused arguments listed."""
    path = _write(tmp_path, "train_llama.sh", LAUNCH)
    monkeypatch.setattr(QtWidgets.QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: (str(path), "")))
    attempts = []

    def exec_(dialog: ImportOptionsDialog):
        assert list(dialog.fields) == list(SOURCES["megatron"].options)
        dialog.import_button.click()  # as the file says: NNODES is not set
        attempts.append(dialog.result())
        dialog.fields["variables"].setPlainText("NNODES=2\n")
        dialog.import_button.click()
        attempts.append(dialog.result())
        return dialog.result()

    monkeypatch.setattr(ImportOptionsDialog, "exec", exec_)
    before = window.session().to_dict()
    window.importer.actions["megatron"].trigger()
    rejected, accepted = QtWidgets.QDialog.DialogCode.Rejected, QtWidgets.QDialog.DialogCode.Accepted
    assert attempts == [rejected, accepted]
    (kind, title, text), = message_boxes.of_kind("critical")
    assert "NNODES" in text and "\n" not in text
    (title, summary, notes), = reviews.shown
    assert "--manual-gc" in notes and "--lr" in notes  # ignored; no effect
    s = window.session()
    assert s.to_dict() != before and window.path is None and window.isWindowModified()
    p = s.plan
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel, p.num_gpus) == (4, 2, 2, 16)
    assert (p.micro_batch_size, p.global_batch_size, p.precision) == (1, 64, "bf16")
    assert (s.model.num_layers, s.model.hidden_size, s.model.seq_length) == (32, 4096, 4096)
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60_000)


def test_megatron_launch_megatron_refuses_leaves_the_session_untouched(window, tmp_path, reviews,
                                                                       message_boxes):
    """A launch Megatron-LM's start-up refuses (FSDP2 with p > 1) is refused with the reader's
    one line, naming the file and the rule; no notes are shown and the open session stays."""
    from tests.test_megatron_import_rules import REFUSED
    launch, rule = REFUSED["fsdp2_pipeline.sh"]
    path = _write(tmp_path, "fsdp2_pipeline.sh", launch)
    before = window.session().to_dict()
    assert not window.importer.import_path("megatron", path)
    (kind, title, text), = message_boxes.of_kind("critical")
    assert "fsdp2_pipeline.sh" in text and f"rule {rule}" in text and "\n" not in text
    assert not reviews.shown
    assert window.session().to_dict() == before and window.path is None


def test_torchtitan_config_needs_the_world_size(window, qtbot, tmp_path, reviews,
                                                message_boxes):
    path = _write(tmp_path, "llama3_8b.toml", TORCHTITAN)
    before = window.session().to_dict()
    assert not window.importer.import_path("torchtitan", path)
    (kind, title, text), = message_boxes.of_kind("critical")
    assert text.startswith("llama3_8b.toml: parallelism.data_parallel_shard_degree")
    assert window.session().to_dict() == before

    dialog = ImportOptionsDialog(SOURCES["torchtitan"], path,
                                 lambda o: window.importer.read("torchtitan", path, o), window)
    dialog.fields["num_gpus"].setValue(8)
    gpu = dialog.fields["gpu"]
    gpu.setCurrentIndex(gpu.findData("H100-SXM5-80GB"))
    assert dialog.options() == ImportOptions(num_gpus=8, gpu="H100-SXM5-80GB")
    dialog.import_button.click()
    assert dialog.result() == QtWidgets.QDialog.DialogCode.Accepted
    assert window.importer.review_and_open("torchtitan", path, dialog.imported)
    dialog.deleteLater()
    (title, summary, notes), = reviews.shown
    assert "compile.enable" in notes and "training.seq_len" in notes  # no effect; used
    s = window.session()
    assert (s.plan.data_parallel, s.plan.zero_stage, s.plan.recompute) == (8, 3, "selective_op")
    assert (s.cluster.gpu, s.model.seq_length) == ("H100-SXM5-80GB", 8192)
    assert s.cost.training_tokens == 1000 * 8 * 8192
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60_000)


def test_vtrain_json_opens_untitled_and_a_wrong_key_is_refused(window, qtbot, tmp_path, reviews,
                                                                message_boxes):
    path = _write(tmp_path, "authors.json", json.dumps(AUTHORS))
    assert window.importer.import_path("vtrain", path)
    s = window.session()
    assert s.model.name == "GPT-3 1.3B"
    assert (s.plan.tensor_parallel, s.plan.pipeline_parallel, s.plan.data_parallel,
            s.plan.recompute) == (4, 2, 2, "full")
    assert window.path is None  # Save never writes a session over the authors' file
    bad = _write(tmp_path, "bad.json", json.dumps({**AUTHORS, "tensor_parallel": 4}))
    after = window.session().to_dict()
    assert not window.importer.import_path("vtrain", bad)
    (kind, title, text), = message_boxes.of_kind("critical")
    assert "tensor_parallel" in text and "bad.json" in text
    assert window.session().to_dict() == after
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60_000)


def test_megatron_launch_with_a_tokenizer_of_unknown_size_takes_the_dialogs_vocabulary(tmp_path):
    """A HuggingFaceTokenizer launch gives no --vocab-size (it is in the tokenizer's files): the
    read is refused, naming the option; with the dialog's vocabulary size it imports."""
    path = _write(tmp_path, "hf.sh", "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 "
                  "--hidden-size 64 --num-attention-heads 4 --seq-length 128 "
                  "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 "
                  "--tokenizer-type HuggingFaceTokenizer --tokenizer-model x/y --bf16\n")
    from core.io.megatron.arguments import MegatronArgsError
    with pytest.raises(MegatronArgsError, match="--vocab-size N"):
        read_import("megatron", path, ImportOptions())
    got = read_import("megatron", path, ImportOptions(vocab_size=151936))
    assert got.session.model.vocab_size == 151936


#: DeepSpeed's ZeRO-2 in bf16: micro-batch 4, 8 accumulation steps, train_batch_size 512 (on
#: 16 GPUs: 4 * 8 * 16), bucket sizes (approximated) and the optimizer's constants (no effect).
DEEPSPEED_ZERO2 = {
    "train_batch_size": 512, "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8, "steps_per_print": 100, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 200000000,
                          "offload_optimizer": {"device": "none"}},
}


def test_deepspeed_config_asks_for_the_model_and_the_gpus_and_sets_the_plan(
        window, qtbot, tmp_path, reviews, message_boxes, monkeypatch):
    """File > Import > DeepSpeed config: the file names neither the model nor the world size;
    Import without them is refused by the option's name and the dialog stays; with the
    preset Llama 3 8B on 16 H100s it opens as ZeRO-2 data parallelism over the 16 GPUs with
    the file's micro-batch 4 and train_batch_size 512 (4 x 8 steps x 16), bf16, the bucket
    size listed as approximated and the optimizer's constants as changing nothing."""
    path = _write(tmp_path, "ds_config.json", json.dumps(DEEPSPEED_ZERO2))
    monkeypatch.setattr(QtWidgets.QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: (str(path), "")))
    attempts = []

    def exec_(dialog: ImportOptionsDialog):
        assert list(dialog.fields) == list(SOURCES["deepspeed"].options)
        assert dialog.fields["num_gpus"].specialValueText() == "required"
        dialog.import_button.click()  # no model
        attempts.append(dialog.result())
        dialog.fields["model"].set_text("Llama 3 8B")
        dialog.import_button.click()  # no world size
        attempts.append(dialog.result())
        dialog.fields["num_gpus"].setValue(16)
        gpu = dialog.fields["gpu"]
        gpu.setCurrentIndex(gpu.findData("H100-SXM5-80GB"))
        recompute = dialog.fields["recompute"]
        recompute.setCurrentIndex(recompute.findData("full"))
        assert dialog.options() == ImportOptions(model="Llama 3 8B", num_gpus=16,
                                                 gpu="H100-SXM5-80GB", recompute="full")
        dialog.import_button.click()
        attempts.append(dialog.result())
        return dialog.result()

    monkeypatch.setattr(ImportOptionsDialog, "exec", exec_)
    window.importer.actions["deepspeed"].trigger()
    rejected, accepted = QtWidgets.QDialog.DialogCode.Rejected, QtWidgets.QDialog.DialogCode.Accepted
    assert attempts == [rejected, rejected, accepted]
    texts = [text for _, _, text in message_boxes.of_kind("critical")]
    assert len(texts) == 2 and texts[0].startswith("--model: required")
    assert texts[1].startswith("--num-gpus: required")
    (title, summary, notes), = reviews.shown
    assert "zero_optimization.reduce_bucket_size" in notes  # approximated
    assert "optimizer.params.lr" in notes  # no effect
    assert "Llama 3 8B" in summary and "16 × H100-SXM5-80GB" in summary
    s = window.session()
    assert window.path is None and window.isWindowModified()
    p = s.plan
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (1, 1, 16)
    assert (p.zero_stage, p.micro_batch_size, p.global_batch_size) == (2, 4, 512)
    assert p.global_batch_size == 4 * 8 * 16
    assert (p.precision, p.recompute, p.overlap_grad_reduce) == ("bf16", "full", True)
    assert (s.model.name, s.cluster.gpu) == ("Llama 3 8B", "H100-SXM5-80GB")
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60_000)


def test_refused_deepspeed_key_leaves_the_session_untouched(window, tmp_path, reviews,
                                                            message_boxes):
    """The optimizer state offloaded to the CPU is not modelled: one message naming the
    file, the key and why, no notes, and the session on screen as it was."""
    cfg = json.loads(json.dumps(DEEPSPEED_ZERO2))
    cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    path = _write(tmp_path, "ds_offload.json", json.dumps(cfg))
    before = window.session().to_dict()
    assert not window.importer.import_path(
        "deepspeed", path, ImportOptions(model="Llama 3 8B", num_gpus=16))
    (kind, title, text), = message_boxes.of_kind("critical")
    assert title == "Cannot import ds_offload.json"
    assert text == (f"{path}: zero_optimization.offload_optimizer.device: \"cpu\": not modelled: "
                    "the optimizer state and step moved to the CPU or NVMe (host transfers and "
                    "a CPU Adam)")
    assert not reviews.shown
    assert window.session().to_dict() == before and window.path is None


def test_deepspeed_trainer_auto_takes_the_dialogs_values(tmp_path):
    """Hugging Face Trainer's "auto" batch and precision (tests/data/deepspeed's ZeRO-3 file):
    refused by the key without the options, filled in by the dialog's micro-batch, steps and
    precision as by the command's flags (train_batch_size: 2 x 4 x 8 GPUs = 64)."""
    from tests.conftest import ROOT
    path = ROOT / "tests" / "data" / "deepspeed" / "hf_trainer_zero3.json"
    with pytest.raises(Exception) as err:
        read_import("deepspeed", path, ImportOptions(model="Llama 3 8B", num_gpus=8))
    assert "train_micro_batch_size_per_gpu" in str(err.value) and "auto" in str(err.value)
    imported = read_import("deepspeed", path, ImportOptions(
        model="Llama 3 8B", num_gpus=8, micro_batch_size=2, gradient_accumulation_steps=4,
        precision="bf16", recompute="full", seq_length=2048))
    p = imported.session.plan
    assert (p.zero_stage, p.data_parallel, p.micro_batch_size, p.global_batch_size) == (3, 8, 2, 64)
    assert (p.precision, imported.session.model.seq_length) == ("bf16", 2048)


def test_deepspeed_dialog_refusals_then_cancel_leave_the_session_untouched(
        window, tmp_path, reviews, message_boxes, monkeypatch):
    """A DeepSpeed config with a comment (DeepSpeed's hjson takes it; the importer reads JSON
    as Hugging Face Trainer does), then a pasted model name too long for a path, then
    Cancel: each refusal is the reader's one line naming the file (line and column) or
    --model, the dialog stays open, and Cancel opens nothing (no notes, the session on screen
    and its path as they were). The long name raised "File name too long" unnamed."""
    path = _write(tmp_path, "ds_comment.json",
                  '{\n  // ZeRO-2\n  "train_micro_batch_size_per_gpu": 2\n}')
    monkeypatch.setattr(QtWidgets.QFileDialog, "getOpenFileName",
                        staticmethod(lambda *a, **k: (str(path), "")))
    before = window.session().to_dict()
    modified = window.isWindowModified()
    attempts = []

    def exec_(dialog: ImportOptionsDialog):
        dialog.fields["model"].set_text("Llama 3 8B")
        dialog.fields["num_gpus"].setValue(16)
        dialog.import_button.click()  # the comment
        attempts.append(dialog.result())
        dialog.fields["model"].set_text("x" * 5000)
        dialog.import_button.click()  # the model
        attempts.append(dialog.result())
        return QtWidgets.QDialog.DialogCode.Rejected  # Cancel

    monkeypatch.setattr(ImportOptionsDialog, "exec", exec_)
    window.importer.actions["deepspeed"].trigger()
    assert attempts == [QtWidgets.QDialog.DialogCode.Rejected] * 2
    (_, title, comment), (_, _, model) = message_boxes.of_kind("critical")
    assert title == "Cannot import ds_comment.json"
    assert comment.startswith(f"{path}: line 2 column 3: a comment; DeepSpeed's own reader "
                              "(hjson) takes comments")
    assert model.startswith("--model: '" + "x" * 80 + "...' is neither a file")
    assert not reviews.shown
    assert window.session().to_dict() == before and window.path is None
    assert window.isWindowModified() == modified


def test_bridge_recipe_is_picked_from_the_table_and_a_refused_one_says_why(
        window, qtbot, reviews, message_boxes, monkeypatch):
    """File > Import > Megatron-Bridge recipe: the table filtered to H100 and Llama3-8B shows
    the four recipes of perf_recipes/llama/h100/llama3.py; a refused recipe (NVFP4 on B200)
    shows its reason and the dialog stays; the 8-GPU BF16 one opens with the recipe's plan
    (t1 p1 cp2 d4, B128) and its source in the session's notes."""
    attempts = []

    def exec_(dialog: RecipeDialog):
        dialog.gpu_filter.setCurrentIndex(dialog.gpu_filter.findData("H100-SXM5-80GB"))
        dialog.model_filter.setCurrentIndex(dialog.model_filter.findData("Llama3-8B"))
        assert dialog.visible_recipes() == [
            "llama3_8b_pretrain_8gpu_h100_bf16_config", "llama3_8b_pretrain_8gpu_h100_fp8cs_config",
            "llama3_8b_pretrain_64gpu_h100_bf16_config",
            "llama3_8b_pretrain_64gpu_h100_fp8cs_config"]
        dialog.gpu_filter.setCurrentIndex(dialog.gpu_filter.findData("B200-180GB"))
        dialog.select("llama3_8b_pretrain_8gpu_b200_nvfp4_config")  # shown: a row of B200's
        dialog.import_button.click()
        attempts.append(dialog.result())
        dialog.gpu_filter.setCurrentIndex(dialog.gpu_filter.findData("H100-SXM5-80GB"))
        dialog.select("llama3_8b_pretrain_8gpu_h100_bf16_config")
        dialog.import_button.click()
        attempts.append(dialog.result())
        return dialog.result()

    monkeypatch.setattr(RecipeDialog, "exec", exec_)
    window.importer.actions["bridge_recipe"].trigger()
    rejected, accepted = QtWidgets.QDialog.DialogCode.Rejected, QtWidgets.QDialog.DialogCode.Accepted
    assert attempts == [rejected, accepted]
    (text,) = [t for _, _, t in message_boxes.of_kind("critical")]
    assert text.startswith("--recipe: llama3_8b_pretrain_8gpu_b200_nvfp4_config (megatron/bridge/"
                           "perf_recipes/llama/b200/llama3.py:155, Megatron-Bridge 0.6.2) is not "
                           "simulated: NVFP4")
    (title, summary, notes), = reviews.shown
    assert "source: megatron/bridge/perf_recipes/llama/h100/llama3.py:33" in notes
    assert "8.03 B parameters" in summary and "8 × H100-SXM5-80GB" in summary
    s = window.session()
    p = s.plan
    assert (p.tensor_parallel, p.pipeline_parallel, p.context_parallel, p.data_parallel,
            p.global_batch_size) == (1, 1, 2, 4, 128)
    assert s.notes.startswith("Megatron-Bridge performance recipe "
                              "llama3_8b_pretrain_8gpu_h100_bf16_config")
    assert window.path is None and window.isWindowModified()
    qtbot.waitUntil(lambda: not window.runner.busy, timeout=60_000)


def test_bridge_run_config_needs_the_gpu_and_the_world_size(tmp_path):
    """File > Import > Megatron-Bridge run_config.yaml: the same reader as the command line;
    without --gpu or --num-gpus refused by the option's name."""
    from tests.test_bridge_import import RUN_CONFIG
    with pytest.raises(Exception) as err:
        read_import("bridge", RUN_CONFIG, ImportOptions(num_gpus=8))
    assert str(err.value).startswith("--gpu: required")
    with pytest.raises(Exception) as err:
        read_import("bridge", RUN_CONFIG, ImportOptions(gpu="H100"))
    assert str(err.value).startswith("--num-gpus: required")
    imp = read_import("bridge", RUN_CONFIG, ImportOptions(gpu="H100", num_gpus=8))
    assert imp.session.plan.label() == (
        "t=1 p=1 d=4 b=1 1f1b recompute=none zero=1 overlap_grad overlap_param grad_dtype=bf16 "
        "cp=2 ce_fusion ce_impl=te")
    headings = [h for h, _ in imp.sections]
    assert headings == ["Notes", "Ignored (may change the iteration time)",
                        "Not used (no effect on the iteration time)", "Used"]


def _laughs(levels: int) -> str:
    """YAML anchors a0 .. a{levels-1}, each a list of nine aliases of the one before (a0: nine
    scalars): a{levels-1} expands to 9**levels values."""
    return "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9 if i else ["x"] * 9) + "]\n"
                   for i in range(levels))


@pytest.mark.parametrize("case", ["laughs", "deep", "recursive", "long_list", "many_nodes",
                                  "large"])
def test_a_run_config_yaml_that_hung_or_crashed_the_reader_is_refused_by_name(
        case, window, opened, tmp_path, reviews, message_boxes):
    """File > Import > Megatron-Bridge run_config.yaml of a file built to break a YAML reader,
    with an edited session open: one message naming the file and the rule, the session and
    its edits untouched. Before: nine-fold aliases under model.num_layers (9**7 values) made a
    message of 4.8 million numbers (at 9**9, minutes and gigabytes: the window froze);
    nesting 5,000 deep, or num_layers a list inside itself, said "maximum recursion depth
    exceeded" without the file (the command line: an internal error); a list of 5,000 layer
    counts made a message box taller than any screen, its OK button out of reach; a list of
    60,000 numbers under a key of no effect took seconds (a 14 MB one a minute and 1.3 GB)
    before anything was refused."""
    from tests.test_bridge_import import RUN_CONFIG
    rc = RUN_CONFIG.read_text(encoding="utf-8")
    assert "\n  num_layers: 32\n" in rc
    path = tmp_path / "run_config.yaml"
    text = {"laughs": _laughs(7) + rc.replace("\n  num_layers: 32\n", "\n  num_layers: *a6\n"),
            "deep": rc + "extra: " + "[" * 5000 + "]" * 5000 + "\n",
            "recursive": rc.replace("\n  num_layers: 32\n", "\n  num_layers: &loop [*loop]\n"),
            "long_list": rc.replace("\n  num_layers: 32\n", "\n  num_layers: ["
                                    + ", ".join(map(str, range(5_000))) + "]\n"),
            "many_nodes": rc + "extra:\n" + "".join(f"- {i}\n" for i in range(110_000)),
            "large": rc + "# " + "x" * 4 * 2**20 + "\n"}[case]
    path.write_text(text, encoding="utf-8")
    before, modified = window.session().to_dict(), window.isWindowModified()
    assert not window.importer.import_path(
        "bridge", path, ImportOptions(gpu="H100-SXM5-80GB", num_gpus=8))
    (_, title, message), = message_boxes.of_kind("critical")
    assert title == "Cannot import run_config.yaml"
    # the reader (core.util.inputs.parse_yaml) stops at the first key whose value holds more
    # than 100,000 values with its aliases expanded: a5, nine of a4's (9**6 = 531,441 and
    # their lists)
    line = rc[:rc.index("\n  num_layers: 32\n")].count("\n") + 2  # num_layers' line
    expected = {
        "laughs": f"{path}: a5 (line 6): more than 100,000 values with its aliases expanded (a "
                  "run_config.yaml holds a few hundred): anchors and aliases nested to multiply "
                  "(a 'billion laughs') are not read",
        "recursive": f"{path}: line {line}: an alias refers to a mapping or list that contains "
                     "it (a recursive structure is no configuration)",
        "long_list": f"{path}: model.num_layers: a list ([0, 1, 2, 3, 4, 5, ...]) where one value "
                     "is expected",
        "large": f"{path}: is {len(text.encode()):,} bytes, more than the 4,194,304 bytes a "
                 "file of this kind may have"}
    if case == "deep":  # libyaml's parser stops at its own depth, PyYAML's at the reader's 64
        assert message.startswith(f"{path}: ") and "nest" in message and len(message) < 200, message
    elif case == "many_nodes":  # the 100,001st value, in extra's list (after the file's lines)
        m = re.fullmatch(re.escape(f"{path}: line ") + r"(\d+): more than 100,000 values \(a "
                         r"run_config\.yaml holds a few hundred\)", message)
        assert m and rc.count("\n") + 2 < int(m[1]) <= rc.count("\n") + 2 + 100_001, message
    else:
        assert message == expected[case]
    assert not reviews.shown
    assert window.session().to_dict() == before and window.path == opened
    assert window.isWindowModified() == modified


def test_a_refusal_quoting_a_megabyte_value_fits_a_message_box(window, tmp_path, reviews,
                                                              message_boxes, capsys):
    """A Hugging Face config whose hidden_act is a million characters: the reader quoted it
    whole (vtrain import hf printed the million), and the window's message box of it took half
    a minute to lay out, taller than the screen. The reader now quotes the value cut short
    (core.util.text.short_repr), so the box shows the command line's message as it is: the
    file, the key, the value's start and end, the rule."""
    from core.cli import main
    from vtrain_gui.formatting import MAX_MESSAGE_CHARS
    path = _write(tmp_path, "config.json", json.dumps({**LLAMA3_8B, "hidden_act": "x" * 10**6}))
    assert main(["import", "hf", str(path), "--out", str(tmp_path / "s.json")]) == 2
    cli = capsys.readouterr().err.strip().removeprefix("vtrain: error: ")
    assert cli == (f"{path}: hidden_act: '{'x' * 27}...{'x' * 28}': only SiLU-gated MLPs "
                   "(SwiGLU) are modelled for this architecture")
    before = window.session().to_dict()
    assert not window.importer.import_path("hf", path)
    (_, title, text), = message_boxes.of_kind("critical")
    assert title == "Cannot import config.json"
    assert text == cli and len(text) < MAX_MESSAGE_CHARS
    # a message still longer than a box takes: its start and end, the middle counted
    from vtrain_gui.formatting import message_text
    long = "f.json: k: " + "y" * 5_000 + " must be a rule"
    head, tail = 2 * MAX_MESSAGE_CHARS // 3, MAX_MESSAGE_CHARS // 4
    assert message_text(long) == (f"{long[:head]} … ({len(long) - head - tail:,} characters "
                                  f"left out) … {'y' * (tail - 15)} must be a rule")
    assert window.session().to_dict() == before and not reviews.shown


def test_a_recipe_the_filters_hide_is_not_imported(qtbot, message_boxes):
    """The H100 recipe selected, then the GPU filter set to B200: Import read the H100 recipe,
    which the table no longer showed. Its selection goes with its row; Import asks for one."""
    read = []
    dialog = RecipeDialog(lambda name: read.append(name) or None)
    qtbot.addWidget(dialog)
    dialog.select("llama3_8b_pretrain_8gpu_h100_bf16_config")
    assert dialog.selected() == "llama3_8b_pretrain_8gpu_h100_bf16_config"
    dialog.gpu_filter.setCurrentIndex(dialog.gpu_filter.findData("B200-180GB"))
    assert "llama3_8b_pretrain_8gpu_h100_bf16_config" not in dialog.visible_recipes()
    assert dialog.visible_recipes()[0] == "llama3_8b_pretrain_8gpu_b200_bf16_config"
    assert dialog.selected() is None
    dialog.import_button.click()
    assert read == [] and dialog.result() != QtWidgets.QDialog.DialogCode.Accepted
    assert message_boxes.calls == [("information", "No recipe", "Select a recipe to import.")]
    # a row still shown keeps its selection through a filter
    dialog.select("llama3_8b_pretrain_8gpu_b200_bf16_config")
    dialog.model_filter.setCurrentIndex(dialog.model_filter.findData("Llama3-8B"))
    assert dialog.selected() == "llama3_8b_pretrain_8gpu_b200_bf16_config"
    dialog.import_button.click()
    assert read == ["llama3_8b_pretrain_8gpu_b200_bf16_config"]


def test_the_recipe_table_shows_each_plan_beside_its_name_at_1000_px(qtbot):
    """The recipe dialog at 1,000 px: the plan's sizes (t p v cp ep b B) and the verdict come
    right after the name, all in view (they were the last columns, behind a verdict as wide as
    its longest cause: at 1,200 px t, p and v were cut off); a long cause is cut to the column
    and given whole in the row's tooltip."""
    dialog = RecipeDialog(lambda name: None)
    qtbot.addWidget(dialog)
    dialog.resize(1000, 560)
    dialog.show()
    qtbot.waitExposed(dialog)
    table, cols = dialog.table, RecipeDialog.COLUMNS
    assert cols[:9] == ("recipe", "t", "p", "v", "cp", "ep", "b", "B", "vtrain")
    view = table.viewport().width()
    last = cols.index("vtrain")
    assert table.columnViewportPosition(last) + table.columnWidth(last) <= view
    assert table.columnWidth(last) <= RecipeDialog.VERDICT_WIDTH
    i = next(i for i, r in enumerate(dialog.rows) if r["function"]
             == "llama3_70b_pretrain_64gpu_b200_fp8cs_config")
    item = table.item(i, last)
    assert item.text() == "refused: CPU activation offloading"
    assert item.toolTip().endswith(": refused: CPU activation offloading")
    row = dialog.rows[i]
    assert [table.item(i, cols.index(c)).text() for c in ("t", "p", "v", "cp", "ep", "b", "B")] \
        == [str(row[c]) for c in ("t", "p", "v", "cp", "ep", "b", "B")]


@pytest.mark.parametrize("case", ["null_tied", "full_recompute_no_method", "indivisible",
                                  "empty", "folder", "latin1"])
def test_a_bad_run_config_yaml_leaves_the_open_session_untouched(
        case, window, opened, tmp_path, reviews, message_boxes):
    """File > Import > Megatron-Bridge run_config.yaml of a careless edit or a wrong file, with
    an edited session open: one message naming the file and the YAML path or rule; no review,
    the session and its edits untouched. Before, share_embeddings_and_output_weights null
    (read as tied embeddings) and recompute_granularity full with recompute_method null (read
    as full recomputation, which Megatron-Core refuses) were imported as other runs."""
    from tests.test_bridge_import import RUN_CONFIG
    rc = RUN_CONFIG.read_text(encoding="utf-8")
    path = tmp_path / "run_config.yaml"
    edits = {"null_tied": ("  share_embeddings_and_output_weights: false\n",
                           "  share_embeddings_and_output_weights: null\n"),
             "full_recompute_no_method": ("  recompute_granularity: null\n",
                                          "  recompute_granularity: full\n"),
             "indivisible": ("  tensor_model_parallel_size: 1\n",
                             "  tensor_model_parallel_size: 3\n")}
    if case in edits:
        old, new = edits[case]
        assert old in rc
        path.write_text(rc.replace(old, new), encoding="utf-8")
    elif case == "empty":
        path.write_text("", encoding="utf-8")
    elif case == "folder":
        path.mkdir()
    else:
        path.write_bytes(rc.encode() + "# caf\xe9\n".encode("latin-1"))
    before, modified = window.session().to_dict(), window.isWindowModified()
    assert not window.importer.import_path(
        "bridge", path, ImportOptions(gpu="H100-SXM5-80GB", num_gpus=8))
    (_, title, message), = message_boxes.of_kind("critical")
    assert title == "Cannot import run_config.yaml"
    expected = {
        "null_tied": "model.share_embeddings_and_output_weights: null, where Megatron-Bridge "
                     "0.6.2's default is true",
        "full_recompute_no_method": "model.recompute_granularity: 'full', "
                                    "model.recompute_method: null: not run (Megatron-Core raises",
        "indivisible": "comm_overlap.data_parallel_size: 4, but --num-gpus 8 over t*p*cp = "
                       "3*1*2 is not a whole number",
        "empty": "a run_config.yaml is a mapping (ConfigContainer.to_yaml writes one), got "
                 "nothing (an empty document)",
        "folder": "is a folder, not a file",
        "latin1": "is not utf-8 text (byte "}[case]
    assert message.startswith(f"{path}: {expected}"), message
    assert not reviews.shown
    assert window.session().to_dict() == before and window.path == opened
    assert window.isWindowModified() == modified
