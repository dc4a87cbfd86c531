"""What an import writes that the input does not give is said, with how to change it: the
sequence length of ``vtrain import hf`` (max_position_embeddings, 40,960 tokens for
Qwen3-30B-A3B, was written silently), and a default plan that does not fit in memory (the
large presets need up to 1,500 GiB of 80: the import said nothing). The fit is simulate's
verdict (:func:`core.sim.simulate.memory_verdict`)."""

from __future__ import annotations

import json

import pytest

from core.io.session import load_session
from core.sim.report import gib_texts
from core.sim.simulate import memory_verdict, session_profile, stage_memory
from tests.test_hf_moe_import import QWEN3_30B_A3B


def _need_and_capacity(path) -> tuple[float, float, bool]:
    s = load_session(path)
    store = session_profile(s)
    need, fits, _ = memory_verdict(stage_memory(s, store), float(store.memory_bytes))
    return need, float(store.memory_bytes), fits


def _notes(out: str) -> list[str]:
    return [line.strip()[len("note: "):] for line in out.splitlines()
            if line.strip().startswith("note: ")]


def test_hf_import_names_the_sequence_length_it_wrote(tmp_path, capsys):
    from core.cli import main
    cfg, out = tmp_path / "config.json", tmp_path / "s.json"
    cfg.write_text(json.dumps(QWEN3_30B_A3B))
    assert main(["import", "hf", str(cfg), "--out", str(out)]) == 0
    notes = _notes(capsys.readouterr().out)
    assert load_session(out).model.seq_length == 40960
    length = [n for n in notes if "40,960" in n]
    assert len(length) == 1 and "--seq-length" in length[0]
    # given, it is the user's: no note
    assert main(["import", "hf", str(cfg), "--out", str(out), "--seq-length", "4096"]) == 0
    assert not [n for n in _notes(capsys.readouterr().out) if "--seq-length" in n]


# (Qwen3-30B-A3B fits one node with expert parallelism 2: test_start_recompute.py)
@pytest.mark.parametrize("name", ["Llama 3.1 405B", "DeepSeek-V3", "Qwen3-235B-A22B"])
def test_a_default_plan_that_does_not_fit_is_said_with_the_sweep_to_run(tmp_path, capsys, name):
    from core.cli import main
    out = tmp_path / "s.json"
    assert main(["import", "preset", name, "--out", str(out)]) == 0
    notes = _notes(capsys.readouterr().out)
    need, cap, fits = _need_and_capacity(out)
    assert not fits
    need_text, cap_text = gib_texts(need, cap)
    fit = [n for n in notes if f"vtrain sweep {out}" in n]
    assert len(fit) == 1 and need_text in fit[0] and cap_text in fit[0]


def test_a_default_plan_that_fits_gets_no_fit_note(tmp_path, capsys):
    from core.cli import main
    out = tmp_path / "s.json"
    assert main(["import", "preset", "Llama 3 8B", "--out", str(out)]) == 0
    assert _need_and_capacity(out)[2]
    assert not [n for n in _notes(capsys.readouterr().out) if "vtrain sweep" in n]


def test_hf_import_says_the_plan_does_not_fit(tmp_path, capsys):
    """Qwen3-30B-A3B's shapes with 480 layers: no expert parallelism within the node fits."""
    from core.cli import main
    cfg, out = tmp_path / "config.json", tmp_path / "s.json"
    cfg.write_text(json.dumps(dict(QWEN3_30B_A3B, num_hidden_layers=480)))
    assert main(["import", "hf", str(cfg), "--out", str(out)]) == 0
    need, cap, fits = _need_and_capacity(out)
    assert not fits
    fit = [n for n in _notes(capsys.readouterr().out) if f"vtrain sweep {out}" in n]
    assert len(fit) == 1 and gib_texts(need, cap)[0] in fit[0]


@pytest.mark.parametrize("length, rule", [("100000000", "must be at most 16,777,216"),
                                          ("0", "must be a positive integer")])
def test_a_bad_seq_length_is_named_as_the_option(tmp_path, capsys, length, rule):
    """--seq-length out of model.seq_length's bound is refused as the option the user gave (it
    was named model.seq_length by the preset, max_position_embeddings by the HF import), exit 2,
    nothing written."""
    from core.cli import main
    cfg, out = tmp_path / "config.json", tmp_path / "s.json"
    cfg.write_text(json.dumps(QWEN3_30B_A3B))
    for argv in (["import", "hf", str(cfg)], ["import", "preset", "Llama 3 8B"]):
        assert main([*argv, "--out", str(out), "--seq-length", length]) == 2
        err = capsys.readouterr().err
        assert "--seq-length: " in err and rule in err, err
        assert "max_position_embeddings" not in err and "model.seq_length" not in err
        assert not out.exists()
