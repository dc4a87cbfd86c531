"""Importers' refusals show a value from the file cut to a readable length (a megabyte string, a
10,000-digit integer or a megabyte key printed whole buried the field and the rule): each message
still names the file, the field and the rule (core/util/text.py ``short_repr`` and
``shown_name``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.io.hf_import import session_from_hf_config
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.io.torchtitan_import import read_torchtitan_config
from core.plan.fields import ConfigError
from core.util.text import short_repr, shown_name

ROOT = Path(__file__).resolve().parents[1]
BIG = "a" * 1_000_000  # a megabyte of text
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
         "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}


def test_short_repr_cuts_text_lists_and_huge_integers():
    assert short_repr("silu") == "'silu'" and short_repr(False) == "False"
    assert short_repr(1e300) == "1e+300" and short_repr(4096) == "4096"
    text = short_repr(BIG)
    assert len(text) <= 64 and text.startswith("'aaa") and "..." in text
    assert short_repr(9 ** 5000) == "an integer of about 4,772 digits"  # repr() would raise
    assert short_repr([9 ** 5000]) == "a list holding an integer too long to print"
    assert short_repr(list(range(100))) == "[0, 1, 2, 3, 4, 5, ...]"
    assert short_repr("\x1b[2J") == "'\\x1b[2J'"  # repr escapes, nothing acts on the terminal
    assert shown_name("k" * 10**5) == "k" * 57 + "..." and shown_name("seq_len") == "seq_len"
    assert shown_name("a\x1bb") == "a\\x1bb"


def _hf_message(**change) -> str:
    with pytest.raises(ConfigError) as e:
        session_from_hf_config({**LLAMA, **change}, where="config.json")
    return str(e.value)


@pytest.mark.parametrize("change, start, rule", [
    ({"hidden_size": BIG}, "config.json: hidden_size: 'aaa", "must be a positive integer"),
    ({"architectures": ["Z" * 10**6]}, "config.json: architectures: 'ZZZ",
     "is not supported; supported: LlamaForCausalLM"),
    ({"Y" * 10**6: 1}, "config.json: " + "Y" * 57 + "...: ", "is not known to the importer"),
    ({"vocab_size": 10**299}, "config.json: vocab_size: vocab_size=an integer of about 300 digits",
     "must be at most 2,147,483,647"),
    ({"hidden_act": BIG}, "config.json: hidden_act: 'aaa", ": only "),
])
def test_hf_refusals_show_the_value_cut(change, start, rule):
    msg = _hf_message(**change)
    assert msg.startswith(start) and rule in msg
    assert len(msg) < 700, len(msg)


def test_hf_lists_at_most_six_unknown_keys():
    msg = _hf_message(**{f"unknown_{i:03d}": 1 for i in range(100)})
    assert "config.json: unknown_000: is not known to the importer" in msg
    assert msg.endswith("(also: unknown_001, unknown_002, unknown_003, unknown_004, "
                        "unknown_005, 94 more)")


@pytest.mark.parametrize("toml, field, rule", [
    (f'[model]\nname = "llama3"\nflavor = "{BIG}"\n', "model.flavor: llama3 'aaa",
     "not a flavour the importer knows"),
    (f'[model]\nname = "{BIG}"\nflavor = "8B"\n', "model.name: aaa",
     "not a flavour the importer knows"),
    (f'[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = "{BIG}"\n',
     "training.seq_len: 'aaa", "must be an integer of at least 1"),
    (f'[model]\nname = "llama3"\nflavor = "8B"\n[training]\n{"k" * 10**5} = 1\n',
     "training." + "k" * 48 + "...: ", "is not a key of torchtitan's job config"),
])
def test_torchtitan_refusals_show_the_value_cut(tmp_path, toml, field, rule):
    path = tmp_path / "job.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as e:
        read_torchtitan_config(path, num_gpus=8)
    msg = str(e.value)
    assert f"job.toml: {field}" in msg and rule in msg
    assert len(msg) < 700, len(msg)


LAUNCH = ("torchrun pretrain_gpt.py --num-layers 32 --hidden-size {h} --num-attention-heads 32 "
          "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
          "--global-batch-size 8 --vocab-size 32000{extra}\n")


@pytest.mark.parametrize("h, extra, shown, rule", [
    ("a" * 50_000, "", "--hidden-size 'aaa", "must be a positive integer"),
    ("4096", " --position-embedding-type " + "b" * 50_000, "--position-embedding-type 'bbb",
     "invalid choice (choose from learned_absolute"),
    ("4096", " --" + "x" * 50_000 + " 1", "--" + "x" * 55 + "... is not a Megatron-LM argument",
     "give --allow-unknown"),
    ("4096", " --bf16 " + "c" * 50_000, "--bf16 is a switch and takes no value, got "
     + "c" * 57 + "...", "takes no value"),
    ("4096", " --tensor-model-parallel-size 1 " + "d" * 50_000,
     "--tensor-model-parallel-size takes one value, got 1 " + "d" * 55 + "...", "one value"),
    ("$" + "V" * 30_000, "", "--hidden-size $" + "V" * 56 + "...: the variable " + "V" * 57
     + "... is not set in the file", "give --var " + "V" * 57 + "...=VALUE"),
    ("4096", " --bf16 $" + "W" * 30_000, "$" + "W" * 56 + "... (after --bf16) may hold "
     "arguments", "is not set in the file"),
])
def test_megatron_refusals_show_the_value_cut(h, extra, shown, rule):
    with pytest.raises(MegatronArgsError) as e:
        session_from_launch(read_launch(LAUNCH.format(h=h, extra=extra), "run.sh"), num_gpus=8)
    msg = str(e.value)
    assert shown in msg and rule in msg
    assert len(msg) < 700, len(msg)


def test_cli_import_hf_prints_one_short_message(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "hidden_size": BIG}))
    run = subprocess.run([sys.executable, "-m", "core.cli", "import", "hf", str(path), "--out",
                          str(tmp_path / "s.json")], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(f"vtrain: error: {path}: hidden_size: 'aaa")
    assert run.stderr.rstrip().endswith("must be a positive integer")
    assert len(run.stderr) < 300
