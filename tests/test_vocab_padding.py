"""Megatron-LM's vocabulary padding, ``model.make_vocab_size_divisible_by``
(``--make-vocab-size-divisible-by``): the padded size is the smallest multiple of N*t at least
the vocabulary (megatron/training/tokenizer ``_vocab_size_with_padding``); DeepSeek-V3's
launches give N = 3232, so its 129,280 tokens (3232*40) are never padded for t dividing 40.
The field reaches the op keys, parameters and FLOPs (MFU), survives the Megatron export and
session files, and a file without it pads to 128*t as before."""

from __future__ import annotations

import dataclasses
import json

import pytest

from core.cli import main
from core.io.megatron.from_session import export_arguments
from core.io.megatron.export import export_script
from core.io.megatron.to_session import import_file
from core.io.session import (SessionFileError, load_any, save_session, session_from_document,
                             session_to_json)
from core.model.counts import model_flops_per_iteration, num_parameters
from core.plan.model_config import ModelConfig, padded_vocab_size
from core.plan.presets import MODEL_PRESETS
from core.plan.rules import validate
from core.sim.op_times import op_key
from tests.conftest import EXAMPLES
from tests.test_megatron_args import DSV3_LAUNCH

FIELD = "model.make_vocab_size_divisible_by"

# DeepSeek-V3 at t=4 (experts not split over t: ep*etp = 64 divides t*d = 64); the world,
# 128 nodes of 8, gives d = 1024 / (4*16) = 16. Its Hugging Face tokenizer has 129,280 tokens
# (Megatron-MoE-ModelZoo launches, which give NullTokenizer --vocab-size 129280: 129,280 tokens
# since megatron-core 0.18; 0.17 and earlier added an end-of-document token, 129,281, which pads
# to 142,208 = 12928*11 with 3232 at t=4)
DSV3_T4 = DSV3_LAUNCH.replace("--tensor-model-parallel-size 1",
                              "--tensor-model-parallel-size 4 --expert-tensor-parallel-size 1 "
                              "--sequence-parallel").replace(
    "--vocab-size 129280 --tokenizer-type NullTokenizer",
    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model deepseek-ai/DeepSeek-V3 "
    "--vocab-size 129280")


def _launch(tmp_path, text, name="dsv3.sh"):
    path = tmp_path / name
    path.write_text(text)
    return import_file(path, gpu="H100-SXM5-80GB")


# --------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("t, padded", [
    (1, 129280),  # 3232*1 * 40 = 129,280: already a multiple
    (2, 129280),  # 6464 * 20
    (4, 129280),  # 12928 * 10
    (8, 129280),  # 25856 * 5
    (3, 135744),  # 9696 * 13 = 126,048 < 129,280 <= 9696 * 14 = 135,744
])
def test_deepseek_v3_vocabulary_with_3232(t, padded):
    assert padded_vocab_size(129280, t, divisible_by=3232) == padded


@pytest.mark.parametrize("t, padded", [
    (1, 129280),  # 128 * 1010 = 129,280
    (2, 129280),  # 256 * 505
    (4, 129536),  # 512 * 252 = 129,024 < 129,280 <= 512 * 253 = 129,536
    (8, 130048),  # 1024 * 126 = 129,024 < 129,280 <= 1024 * 127 = 130,048
])
def test_deepseek_v3_vocabulary_with_megatrons_default_128(t, padded):
    assert padded_vocab_size(129280, t) == padded_vocab_size(129280, t, divisible_by=128) == padded


def test_divisor_one_pads_to_a_multiple_of_t_only():
    assert padded_vocab_size(50257, 1, divisible_by=1) == 50257
    assert padded_vocab_size(50257, 8, divisible_by=1) == 50264  # 8 * 6283 = 50,264


# --------------------------------------------------------------------------- Megatron import

def test_deepseek_v3_launch_with_3232_is_simulated_with_its_unpadded_vocabulary(tmp_path):
    """The refusal is gone: the launch imports, and its output layer's op key, parameters and
    model FLOPs use V' = 129,280 where the default 128 would pad to 129,536 at t=4."""
    default = _launch(tmp_path, DSV3_T4).session
    (tmp_path / "div").mkdir()
    res = _launch(tmp_path / "div", DSV3_T4.replace(
        "--lr 2.2e-4", "--lr 2.2e-4 --make-vocab-size-divisible-by 3232"))
    s = res.session
    assert "--make-vocab-size-divisible-by" in res.used
    assert s.plan.tensor_parallel == 4
    assert s.model.make_vocab_size_divisible_by == 3232
    assert default.model.make_vocab_size_divisible_by == 128
    assert s.model.vocab_size == 129280
    assert validate(s) == []
    assert s.model == dataclasses.replace(default.model, make_vocab_size_divisible_by=3232)
    assert op_key(s)["V"] == 129280 and op_key(default)["V"] == 129536
    h = s.model.hidden_size
    # untied: the word embedding and the output layer each V'h
    assert num_parameters(default.model, 4) - num_parameters(s.model, 4) == 2 * 256 * h
    # MFU's model FLOPs: 3 * B*s * 2hV' for the output layer and once more for the MTP layer's
    tokens = s.plan.global_batch_size * s.model.seq_length
    diff = model_flops_per_iteration(default.model, default.plan) - model_flops_per_iteration(
        s.model, s.plan)
    assert diff == pytest.approx(3 * tokens * 2 * h * 256 * (1 + s.model.mtp_num_layers),
                                 rel=1e-12)


@pytest.mark.parametrize("value, code", [("0", 2), ("-1", 2), ("x", 2), ("99999999999", 2)])
def test_bad_launch_values_are_refused_naming_the_argument(tmp_path, capsys, value, code):
    path = tmp_path / "bad.sh"
    path.write_text(DSV3_T4.replace("--lr 2.2e-4",
                                    f"--lr 2.2e-4 --make-vocab-size-divisible-by {value}"))
    assert main(["import", "megatron-args", str(path), "--gpu", "H100-SXM5-80GB",
                 "--out", str(tmp_path / "s.json")]) == code
    err = capsys.readouterr().err
    assert str(path) in err and "--make-vocab-size-divisible-by" in err
    assert not (tmp_path / "s.json").exists()


def test_export_writes_the_divisor_only_when_not_128_and_the_import_reads_it_back(tmp_path):
    session = load_any(EXAMPLES / "gpt3_175b.json")
    assert "--make-vocab-size-divisible-by" not in export_arguments(session)
    session.model = dataclasses.replace(session.model, make_vocab_size_divisible_by=3232)
    args = export_arguments(session)
    assert args[args.index("--make-vocab-size-divisible-by") + 1] == "3232"
    script = tmp_path / "train.sh"
    script.write_text(export_script(session))
    back = import_file(script).session
    assert back.model.make_vocab_size_divisible_by == 3232
    assert dataclasses.replace(back.model, name=session.model.name) == session.model


# --------------------------------------------------------------------------- session files

def test_an_old_session_file_without_the_field_pads_to_128():
    path = EXAMPLES / "gpt3_175b.json"
    assert "make_vocab_size_divisible_by" not in json.loads(path.read_text())["model"]
    assert load_any(path).model.make_vocab_size_divisible_by == 128


def test_the_field_is_saved_when_not_128_and_a_128_file_is_unchanged(tmp_path):
    session = load_any(EXAMPLES / "gpt3_175b.json")
    before = session_to_json(session)
    assert "make_vocab_size_divisible_by" not in json.loads(before)["model"]
    session.model = dataclasses.replace(session.model, make_vocab_size_divisible_by=3232)
    path = tmp_path / "s.json"
    save_session(session, path)
    assert json.loads(path.read_text())["model"]["make_vocab_size_divisible_by"] == 3232
    assert load_any(path).model == session.model
    session.model = dataclasses.replace(session.model, make_vocab_size_divisible_by=128)
    assert session_to_json(session) == before


@pytest.mark.parametrize("bad", [0, -1, "x", True, 8.0, None, 2**31, 10**30])
def test_bad_session_values_are_refused_naming_file_field_and_rule(tmp_path, capsys, bad):
    doc = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    doc["model"]["make_vocab_size_divisible_by"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and str(path) in err and FIELD in err
    if isinstance(bad, int) and not isinstance(bad, bool) and bad > 0:
        assert "2,147,483,647" in err  # the bound's upper limit
    with pytest.raises(SessionFileError):
        session_from_document(doc)


def test_presets_and_the_hf_import_keep_megatrons_default():
    from core.io.hf_import import session_from_hf_config
    from tests.test_mla import V3_CONFIG
    assert all(m.make_vocab_size_divisible_by == 128 for m in MODEL_PRESETS.values())
    imp = session_from_hf_config(V3_CONFIG, seq_length=4096)
    assert imp.session.model.make_vocab_size_divisible_by == 128
    assert ModelConfig().make_vocab_size_divisible_by == 128
