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


def test_moe_import_adds_the_least_expert_parallelism_that_fits(tmp_path, capsys):
    """Qwen3-30B-A3B at sequence 4,096 on one H100 node, t = 4 d = 2: ep = 1 fits with no
    recomputation (full needs 90.6 GiB), nor with etp = 1; ep = 2 with etp unset (= t = 4, so
    etp * ep = 8 = t * d) fits with full recomputation, the experts' 128 x 3 x 2048 x 768
    weights and their optimizer state split over two ranks (69.8 GiB, the trial's figure for
    --set plan.expert_parallel=2 --set plan.expert_tensor_parallel=4)."""
    from core.io.start_plan import start_expert_layouts
    s = _session("Qwen3-30B-A3B", "H100", seq_length=4096)
    assert (s.plan.tensor_parallel, s.plan.data_parallel) == (4, 2)
    # ep divides the 128 experts and etp * ep divides t * d = 8: etp = 4 only with ep <= 2
    assert start_expert_layouts(s) == [(1, None), (1, 1), (2, None), (2, 1), (4, 1), (8, 1)]
    one = {m: _verdict(s, m) for m in START_RECOMPUTE}
    assert one == dict.fromkeys(START_RECOMPUTE, "does not fit")
    s, note = start_recompute(s, expert_parallel=True)
    assert (s.plan.expert_parallel, s.plan.expert_tensor_parallel, s.plan.recompute) == \
        (2, None, "full")
    assert _verdict(s, "full") == "fits"
    store = session_profile(s)
    need = memory_verdict(stage_memory(s, store), float(store.memory_bytes))[0]
    assert round(need / 2**30, 1) == 69.8
    assert note == ("recompute=full expert_parallel=2 expert_tensor_parallel=4 (unset): the least "
                    "expert parallelism, with the lightest activation recomputation, with which "
                    "the plan fits on the H100-SXM5-80GB (ep=1 etp=4 (unset): does not fit with "
                    "none, selective, full; ep=1 etp=1: does not fit with none, selective, full)")
    # without expert_parallel (vtrain import deepspeed) the plan keeps ep = 1, as before
    s2, _ = start_recompute(_session("Qwen3-30B-A3B", "H100", seq_length=4096))
    assert (s2.plan.expert_parallel, s2.plan.recompute) == (1, "full")
    # the CLI's import writes it
    out = tmp_path / "q.json"
    assert main(["import", "preset", "Qwen3-30B-A3B", "--seq-length", "4096", "--gpu", "H100",
                 "--out", str(out)]) == 0
    plan = json.loads(out.read_text())["plan"]
    assert (plan["expert_parallel"], plan["recompute"]) == (2, "full")


def test_moe_that_fits_without_expert_parallelism_keeps_ep_1():
    """GPT-OSS 20B on an H100 node fits at t = 8, ep = 1 with no recomputation: the start
    adds no expert parallelism and says what it said before."""
    s, note = start_recompute(_session("GPT-OSS 20B", "H100"), expert_parallel=True)
    assert (s.plan.expert_parallel, s.plan.recompute) == (1, "none")
    assert note == ("recompute=none: the lightest activation recomputation with which the plan "
                    "fits on the H100-SXM5-80GB")


def test_moe_that_fits_nowhere_names_every_expert_layout_tried():
    """Qwen3-235B-A22B (94 layers of 128 experts) fits one H100 node with no layout: the
    start is the pair and mode needing the least memory, and the note lists every ep / etp."""
    s = _session("Qwen3-235B-A22B", "H100", seq_length=4096)
    s, note = start_recompute(s, expert_parallel=True)
    assert note.startswith(f"recompute=full expert_parallel={s.plan.expert_parallel} ")
    assert ("the plan does not fit on the H100-SXM5-80GB with any recomputation and expert "
            "parallelism tried (ep=1 etp=4 (unset), ep=1 etp=1, ep=2 etp=4 (unset), ep=2 etp=1, "
            "ep=4 etp=1, ep=8 etp=1, each with recompute none, selective, full); this one needs "
            "the least memory") in note
