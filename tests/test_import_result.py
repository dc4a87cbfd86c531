"""The importers' shared result and refusal rule (core/io/import_result.py): Hugging Face,
Megatron-LM and torchtitan imports return an ImportResult and refuse a switched-on key the same
way."""

from __future__ import annotations

import pytest

from core.io.hf_import import HFImport, session_from_hf_config
from core.io.import_result import ImportResult, refusal, switched_off, switched_off_or_refuse
from core.io.megatron.arguments import ARGUMENTS
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import MegatronImport, session_from_launch
from core.io.torchtitan_import import read_torchtitan_config
from core.plan.fields import ConfigError
from tests.conftest import ROOT

LAUNCH = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
          "--micro-batch-size 1 --vocab-size 5 --bf16")


def test_switched_off_needs_the_same_type():
    assert switched_off(False, (None, False)) and switched_off(None, (None, False))
    assert not switched_off(0, (False,))  # 0 == False, but not an off switch of a flag
    assert not switched_off(1.0, (1,)) and switched_off([], ([],))


def test_switched_off_or_refuse_lists_an_off_key_and_refuses_an_on_one():
    assert switched_off_or_refuse("c.json", "k", False, "a thing", (False,)) == \
        "False: off (when on: a thing)"
    with pytest.raises(ConfigError) as info:
        switched_off_or_refuse("c.json", "k", True, "a thing", (False,))
    [err] = info.value.errors
    assert err.field == "c.json: k" and err == refusal("c.json", "k", err.message).errors[0]


def test_every_importer_returns_the_shared_result():
    tt = read_torchtitan_config(ROOT / "tests" / "data" / "torchtitan" / "llama3_8b.toml",
                                num_gpus=8)
    assert type(tt) is ImportResult and tt.used and tt.ignored
    hf = session_from_hf_config({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
                                 "hidden_size": 64, "num_attention_heads": 4,
                                 "intermediate_size": 128, "vocab_size": 128,
                                 "max_position_embeddings": 32})
    assert isinstance(hf, HFImport) and isinstance(hf, ImportResult)
    assert hf.architecture == "LlamaForCausalLM"
    mg = session_from_launch(read_launch(LAUNCH + " --lr 1e-4 --moe-grouped-gemm", "x"),
                             num_gpus=1)
    assert isinstance(mg, MegatronImport) and isinstance(mg, ImportResult)
    assert mg.ignored == {"--moe-grouped-gemm": "without --num-experts it has no effect"}
    assert mg.neutral == ["--lr"]
    # used: each table argument the launch gives -> the fields it sets
    assert mg.used["--bf16"] == "plan.precision"
    assert set(mg.used) == {f for f in read_launch(LAUNCH, "x").arguments if f in ARGUMENTS}
    assert "--moe-grouped-gemm" in ARGUMENTS and "--moe-grouped-gemm" not in mg.used


def test_unknown_arguments_stay_listed_with_a_cp_comm_type():
    """--cp-comm-type's own check once reused the name of the unknown-argument list, so an
    import with --allow-unknown and --cp-comm-type listed no unknown argument."""
    launch = read_launch(LAUNCH + " --cp-comm-type p2p --zero-stage 1", "x")
    res = session_from_launch(launch, num_gpus=1, allow_unknown=True)
    assert res.unknown == ["--zero-stage"]
    assert res.ignored["--zero-stage"].startswith("not a Megatron-LM argument vtrain knows")


HF_TINY = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
           "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 128,
           "max_position_embeddings": 32, "tie_word_embeddings": False}  # no class default used


def test_an_import_whose_input_has_no_batch_notes_the_global_batch_it_wrote():
    """A Hugging Face config has no batch: the import notes the global batch it wrote (the
    default plan's: t = 4 over the 4 heads, d = 2, B = 2,048, the most an import starts with,
    a million tokens of 32 being 32,768 sequences) with the field to set the run's.
    torchtitan without [training] batch keys gets the same note (its default local batch 8
    times d = 8: B = 64); a file that gives its batch gets none."""
    from core.io.import_result import global_batch_note, seq_length_note
    hf = session_from_hf_config(HF_TINY)
    assert hf.session.plan.global_batch_size == 2048
    length = seq_length_note(HF_TINY["max_position_embeddings"],
                             "the config's max_position_embeddings")  # no --seq-length given
    assert hf.notes == [length, global_batch_note(2048)]
    assert "2,048 sequences" in hf.notes[1] and "plan.global_batch_size" in hf.notes[1]
    from core.io.torchtitan_import import load_toml, session_from_torchtitan
    given = load_toml(ROOT / "tests" / "data" / "torchtitan" / "llama3_8b.toml")
    given["compile"]["enable"] = True  # compiled: no note of the eager (unfused) SwiGLU
    # the file's [checkpoint] enable = false is noted too (no checkpoint saved)
    ckpt = [n for n in session_from_torchtitan(given, num_gpus=8).notes
            if n.startswith("checkpoint.enable false")]
    assert session_from_torchtitan(given, num_gpus=8).notes == ckpt and len(ckpt) == 1
    del given["training"]["local_batch_size"]
    tt = session_from_torchtitan(given, num_gpus=8)
    assert tt.session.plan.global_batch_size == 64 and tt.notes == [global_batch_note(64), *ckpt]
    given["training"]["global_batch_size"] = 128  # the global batch given: no note
    tt = session_from_torchtitan(given, num_gpus=8)
    assert tt.session.plan.global_batch_size == 128 and tt.notes == ckpt


def test_import_hf_and_preset_print_the_global_batch_note(tmp_path, capsys):
    """``vtrain import hf`` and ``vtrain import preset`` print the shared note with the
    global batch of the session they wrote."""
    import json

    from core.cli import main
    from core.io.import_result import global_batch_note
    from core.io.session import load_session
    from core.io.start_plan import START_BATCH_MAX, start_global_batch
    cfg, out = tmp_path / "config.json", tmp_path / "s.json"
    cfg.write_text(json.dumps(HF_TINY))
    assert main(["import", "hf", str(cfg), "--out", str(out)]) == 0
    tiny = start_global_batch(HF_TINY["max_position_embeddings"], 2)  # t=4 d=2
    assert tiny == START_BATCH_MAX  # a million tokens of 32 would be 32,768 sequences
    assert global_batch_note(tiny) in capsys.readouterr().out
    assert load_session(out).plan.global_batch_size == tiny
    assert main(["import", "preset", "Llama 3 8B", "--out", str(out)]) == 0
    batch = load_session(out).plan.global_batch_size
    assert batch == 2**20 // 8192 and global_batch_note(batch) in capsys.readouterr().out
