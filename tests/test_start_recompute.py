"""An imported plan starts with the lightest activation recomputation it fits with
(core.io.start_plan.start_recompute): Megatron-LM recomputes nothing unless asked."""

import dataclasses
import json

import pytest

from core.cli import main
from core.cli.common import cluster_of_gpu
from core.io.start_plan import START_RECOMPUTE, default_plan, start_recompute
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from core.sim.report import memory_verdict as report_verdict
from core.sim.simulate import memory_verdict, session_profile, stage_memory


def _session(name, gpu, seq_length=None):
    model = dataclasses.replace(MODEL_PRESETS[name])
    if seq_length:
        model.seq_length = seq_length
    return Session(model=model, plan=default_plan(model), cluster=cluster_of_gpu(gpu))


def _verdict(session, mode):
    trial = dataclasses.replace(session, plan=dataclasses.replace(session.plan, recompute=mode))
    store = session_profile(trial)
    need, fits, _ = memory_verdict(stage_memory(trial, store), float(store.memory_bytes))
    return report_verdict(need, float(store.memory_bytes),
                          trial.cluster.memory_reserve_fraction, fits)


def test_order_is_megatrons_lightest_first():
    assert START_RECOMPUTE == ("none", "selective", "full")
    assert default_plan(MODEL_PRESETS["Llama 3 8B"]).recompute == "full"  # before the import's pick


def test_llama3_8b_on_a100_starts_without_recomputation():
    s, note = start_recompute(_session("Llama 3 8B", "A100"))
    assert s.plan.recompute == "none" and _verdict(s, "none") == "fits"
    assert note == ("recompute=none: the lightest activation recomputation with which the plan "
                    "fits on the A100-SXM4-80GB")


def test_tight_lighter_modes_give_way_to_a_plan_that_fits():
    s = _session("Llama 3 70B", "B200", seq_length=4096)
    verdicts = {m: _verdict(s, m) for m in START_RECOMPUTE}
    assert verdicts == {"none": "tight", "selective": "tight", "full": "fits"}
    s, note = start_recompute(s)
    assert s.plan.recompute == "full"
    assert note.endswith("(none: tight, selective: tight)")


def test_a_plan_that_fits_with_no_mode_keeps_full_and_says_so():
    s, note = start_recompute(_session("Llama 3 70B", "H100"))
    assert s.plan.recompute == "full" and _verdict(s, "full") == "does not fit"
    assert note == ("recompute=full: the plan does not fit on the H100-SXM5-80GB with any of "
                    "none, selective, full; full keeps the least activation memory")


def test_import_preset_writes_the_lightest_mode(tmp_path, capsys):
    out = tmp_path / "l8.json"
    assert main(["import", "preset", "Llama 3 8B", "--gpu", "A100", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["plan"]["recompute"] == "none"
    assert "note: recompute=none: the lightest" in capsys.readouterr().out


def test_import_hf_picks_on_the_given_gpu(tmp_path, capsys):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
           "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
           "num_hidden_layers": 80, "vocab_size": 128256, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    for gpu, mode in (("B200", "full"), ("H100", "full")):
        out = tmp_path / f"{gpu}.json"
        assert main(["import", "hf", str(path), "--gpu", gpu, "--out", str(out)]) == 0
        assert json.loads(out.read_text())["plan"]["recompute"] == mode
    assert "recompute=full: the plan does not fit on the H100" in capsys.readouterr().out


def test_import_preset_help_says_the_lightest_mode_not_full(capsys):
    """`vtrain import preset --help` said the start plan used "full recomputation" while the
    import writes the lightest mode that fits (recompute=none for Llama 3 8B on an A100, the
    test above): the help now says what the import does."""
    with pytest.raises(SystemExit):
        main(["import", "preset", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the lightest activation recomputation (none, selective, full) with which it fits" in text
    assert "full recomputation" not in text


def test_an_import_starts_with_about_a_million_tokens_per_iteration():
    """The start's global batch: 2**20 tokens (Megatron-Bridge's one-node Llama 3 8B recipes:
    128 sequences of 8,192), whole micro-batches per replica, at most 2,048 sequences."""
    from core.io.start_plan import default_plan, start_global_batch
    from core.plan.presets import MODEL_PRESETS
    assert start_global_batch(8192, 1) == 128 and start_global_batch(2048, 1) == 512
    assert start_global_batch(4096, 2) == 256 and start_global_batch(131072, 1) == 8
    assert start_global_batch(131072, 16) == 16  # one sequence per replica at least
    assert start_global_batch(3000, 4) == 348  # 349 sequences of 3,000, whole per replica
    assert start_global_batch(32, 2) == 2048  # not 32,768 sequences of a toy model
    llama = default_plan(MODEL_PRESETS["Llama 3 8B"])
    assert (llama.tensor_parallel, llama.data_parallel, llama.global_batch_size) == (8, 1, 128)
    assert llama.global_batch_size * MODEL_PRESETS["Llama 3 8B"].seq_length == 2**20
