"""The import refuses a launch Megatron-LM's start-up refuses (core/io/megatron/rules.py
``RULES``): one line naming the file and the rule, exit status 2, no session written; a launch
that keeps the rules imports as the mapping reads it; the environment rules are left to the
export (the environment a launch runs in is not all in its file)."""

from __future__ import annotations

import pytest

from core.cli import main
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.launch import read_launch
from core.io.megatron.rules import RULES, options_read
from core.io.megatron.to_session import (import_checked, import_file, session_from_launch,
                                         with_cluster_comment)

#: A 1.3B-like model on 8 GPUs under torch FSDP2, as Megatron-LM starts it: untied embeddings
#: and no gradient-accumulation fusion (both required with --use-torch-fsdp2).
FSDP2_LAUNCH = r"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=8
torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 \
    --untie-embeddings-and-output-weights \
    --micro-batch-size 1 --global-batch-size 64 --train-iters 1000 --bf16 \
    --use-torch-fsdp2 --no-gradient-accumulation-fusion
"""

#: Launches Megatron-LM refuses at start-up -> the rule it breaks.
REFUSED = {
    "no_fusion_off.sh": (FSDP2_LAUNCH.replace(" --no-gradient-accumulation-fusion", ""),
                         "fsdp2-gradient-accumulation-fusion"),
    "fsdp2_pipeline.sh": (FSDP2_LAUNCH.replace("--bf16", "--bf16 --pipeline-model-parallel-size 2"),
                          "fsdp2-pipeline"),
    "tied.sh": (FSDP2_LAUNCH.replace("    --untie-embeddings-and-output-weights \\\n", ""),
                "fsdp2-untied-embeddings"),
    # Megatron-LM asserts that only one of the two virtual-stage options is given
    "both_virtual.sh": (FSDP2_LAUNCH.replace(
        " --use-torch-fsdp2 --no-gradient-accumulation-fusion",
        " --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 3 "
        "--num-layers-per-virtual-pipeline-stage 3"), "virtual-stage-options-exclusive"),
    # validate_args makes --recompute-activations selective before it checks the method
    "selective_method.sh": (FSDP2_LAUNCH.replace(
        "--bf16", "--bf16 --recompute-activations --recompute-method uniform"),
        "recompute-method-selective"),
    # the run's length both ways: Megatron asserts one; the import read --train-samples and
    # dropped --train-iters unsaid (a token budget of 5,000 x 2,048 from a launch that also
    # says 1,000 iterations of 64)
    "iters_and_samples.sh": (FSDP2_LAUNCH.replace("--train-iters 1000",
                                                  "--train-iters 1000 --train-samples 5000"),
                             "iteration-or-sample-based"),
    # Megatron ramps the batch size up in sample-based runs only (validate_args: "expected no
    # batch-size rampup for iteration-based training"); the import listed it as ignored
    "rampup_with_iters.sh": (FSDP2_LAUNCH.replace(
        "--train-iters 1000", "--train-iters 1000 --rampup-batch-size 16 16 5000"),
        "iteration-based-no-rampup"),
}


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_launch_megatron_refuses_is_refused_naming_its_rule(tmp_path, name):
    text, rule = REFUSED[name]
    path = _write(tmp_path, name, text)
    with pytest.raises(MegatronArgsError) as exc:
        import_checked(path)
    message = str(exc.value)
    assert message.startswith(f"{path}:") and "\n" not in message
    (r,) = [r for r in RULES if r.name == rule]
    assert f"rule {rule}" in message and r.message in message and r.source in message
    # what to change: the arguments the rule reads
    assert all(o in message for o in options_read(r, read_launch(text).arguments))


@pytest.mark.parametrize("name", ["no_fusion_off.sh", "fsdp2_pipeline.sh"])
def test_the_command_line_exits_2_and_writes_nothing(tmp_path, capsys, name):
    text, rule = REFUSED[name]
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(_write(tmp_path, name, text)),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"rule {rule}" in err and name in err and "Traceback" not in err
    assert not out.exists()


def test_the_arguments_to_change_are_those_the_rule_reads():
    fsdp_pp = "--use-torch-fsdp2 --pipeline-model-parallel-size 2".split()
    (pipeline,) = [r for r in RULES if r.name == "fsdp2-pipeline"]
    assert options_read(pipeline, fsdp_pp) == ["--use-torch-fsdp2",
                                               "--pipeline-model-parallel-size"]
    (fusion,) = [r for r in RULES if r.name == "fsdp2-gradient-accumulation-fusion"]
    assert options_read(fusion, fsdp_pp) == ["--use-torch-fsdp2",
                                             "--no-gradient-accumulation-fusion"]
    assert options_read(fusion, []) == ["--use-torch-fsdp2"]  # not checked without FSDP2


def test_a_launch_megatron_starts_imports_as_the_mapping_reads_it(tmp_path, capsys):
    """The rules only refuse: a launch that keeps them gives the session the mapping gives,
    and the command line writes it. Its CUDA_DEVICE_MAX_CONNECTIONS=8 (FSDP2 forbids 1) and a
    t > 1 launch that does not set it import both: the environment rules are the export's."""
    path = _write(tmp_path, "fsdp2.sh", FSDP2_LAUNCH)
    res = import_checked(path)
    mapped = with_cluster_comment(session_from_launch(read_launch(FSDP2_LAUNCH, str(path))),
                                  FSDP2_LAUNCH, {})
    assert res.session == mapped.session
    assert res.session.plan.zero_stage == 3
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 0 and out.exists()
    tp = FSDP2_LAUNCH.replace("export CUDA_DEVICE_MAX_CONNECTIONS=8\n", "").replace(
        " --use-torch-fsdp2 --no-gradient-accumulation-fusion",
        " --use-distributed-optimizer --tensor-model-parallel-size 2 --sequence-parallel")
    s = import_file(_write(tmp_path, "tp.sh", tp), gpu="H100-SXM5-80GB").session
    assert s.plan.tensor_parallel == 2


def test_a_rule_on_a_value_validate_args_sets_names_the_switch_that_set_it():
    """--recompute-activations makes the granularity selective before the checks: the switch,
    not the granularity the launch may also give, is what to change."""
    (rule,) = [r for r in RULES if r.name == "recompute-method-selective"]
    for args in ("--recompute-activations --recompute-method uniform",
                 "--recompute-activations --recompute-granularity full --recompute-method block"):
        assert options_read(rule, args.split()) == ["--recompute-activations",
                                                    "--recompute-method"]
    assert options_read(rule, "--recompute-granularity selective --recompute-method block".split()
                        ) == ["--recompute-granularity", "--recompute-method"]


def test_recompute_activations_is_selective_over_a_granularity(tmp_path):
    """validate_args: ``if args.recompute_activations: args.recompute_granularity =
    'selective'``, whatever --recompute-granularity says."""
    text = FSDP2_LAUNCH.replace("--bf16", "--bf16 --recompute-activations "
                                "--recompute-granularity full")
    assert import_file(_write(tmp_path, "ra.sh", text)).session.plan.recompute == "selective"


def test_no_overlap_switch_of_a_plain_launch_keeps_the_default(tmp_path):
    """Megatron-LM overlaps only the interleaved schedule's transfers (a plain run's argument
    dump says overlap_p2p_comm False): read from an interleaved launch only, so the sweep's
    interleaved plans of a 1F1B launch are overlapped as Megatron would run them."""
    plain = FSDP2_LAUNCH.replace(" --use-torch-fsdp2 --no-gradient-accumulation-fusion",
                                 " --pipeline-model-parallel-size 4 "
                                 "--no-overlap-p2p-communication")
    res = import_file(_write(tmp_path, "plain.sh", plain))
    assert res.session.plan.schedule == "1f1b" and res.session.plan.overlap_p2p_comm is True
    assert any(about == "--no-overlap-p2p-communication" for about, _ in res.notes)
    inter = plain.replace("--no-overlap-p2p-communication",
                          "--no-overlap-p2p-communication --num-virtual-stages-per-pipeline-rank 2")
    res = import_file(_write(tmp_path, "inter.sh", inter))
    assert res.session.plan.schedule == "interleaved" and res.session.plan.overlap_p2p_comm is False


def test_a_rule_left_on_import_is_noted_and_the_export_refuses_it(tmp_path, capsys):
    """``--cross-entropy-fusion-impl te`` (Megatron-Bridge's 25.11-26.04 recipes run it; this
    Megatron-LM commit refuses it) imports as those versions run it, and the summary says the
    current commit refuses it, so the export's refusal is no surprise."""
    te = FSDP2_LAUNCH.replace("--bf16", "--bf16 --cross-entropy-loss-fusion "
                              "--cross-entropy-fusion-impl te")
    path = _write(tmp_path, "te.sh", te)
    res = import_file(path)
    assert res.session.plan.cross_entropy_fusion_impl == "te"
    assert [flag for flag, _ in res.notes if flag.startswith("rule ")] == ["rule cross-entropy-te"]
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "rule cross-entropy-te" in text and "--cross-entropy-fusion-impl te is disabled" in text
    assert main(["export", "megatron-args", str(out)]) == 2
    assert "cross-entropy-te" in capsys.readouterr().err
    # a launch that keeps every rule gets no such note
    assert not [f for f, _ in import_file(_write(tmp_path, "ok.sh", FSDP2_LAUNCH)).notes
                if f.startswith("rule ")]


#: FSDP2_LAUNCH as a plain data-parallel run (1.3B-like, 8 GPUs, learned positions).
PLAIN_LAUNCH = FSDP2_LAUNCH.replace(" --use-torch-fsdp2 --no-gradient-accumulation-fusion", "")


@pytest.mark.parametrize("extra", ["--use-rotary-position-embeddings",
                                   "--use-rotary-position-embeddings --no-position-embedding",
                                   "--use-rotary-position-embeddings --position-embedding-type rope",
                                   "--position-embedding-type rope --no-position-embedding"])
def test_legacy_rope_switch_is_rope(tmp_path, extra):
    """validate_args ("Legacy RoPE arguments"): --use-rotary-position-embeddings sets
    position_embedding_type = 'rope'; --no-position-embedding beside RoPE drops a table RoPE
    does not have. Both are read (neither listed as ignored); the model loses the s*h learned
    position table of the launch without them."""
    from core.model.counts import num_parameters
    res = import_file(_write(tmp_path, "rope.sh", PLAIN_LAUNCH.replace("--bf16", f"--bf16 {extra}")))
    learned = import_file(_write(tmp_path, "learned.sh", PLAIN_LAUNCH)).session.model
    assert learned.position_embedding == "learned"
    assert res.session.model.position_embedding == "rope"
    assert not {"--use-rotary-position-embeddings", "--no-position-embedding"} & set(dict(res.ignored))
    assert num_parameters(learned) - num_parameters(res.session.model) == 2048 * 2048


@pytest.mark.parametrize("extra,why", [
    ("--use-rotary-position-embeddings --position-embedding-type learned_absolute",
     "--use-rotary-position-embeddings: contradicts --position-embedding-type learned_absolute "
     "(Megatron-LM's validate_args makes the legacy switch rope): give one of them"),
    ("--no-position-embedding",
     "--no-position-embedding: without RoPE the model has no positions at all (NoPE), which "
     "Megatron-LM refuses and vtrain does not model; a RoPE model gives --position-embedding-type "
     "rope (or --use-rotary-position-embeddings)"),
    ("--position-embedding-type learned_absolute --no-position-embedding",
     "--no-position-embedding: without RoPE the model has no positions at all (NoPE), which "
     "Megatron-LM refuses and vtrain does not model; a RoPE model gives --position-embedding-type "
     "rope (or --use-rotary-position-embeddings)"),
])
def test_no_positions_or_contradicting_positions_are_refused(tmp_path, capsys, extra, why):
    path = _write(tmp_path, "nope.sh", PLAIN_LAUNCH.replace("--bf16", f"--bf16 {extra}"))
    with pytest.raises(MegatronArgsError) as exc:
        import_file(path)
    assert str(exc.value) == f"{path}: {why}"
    out = tmp_path / "out.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 2
    assert not out.exists() and why in capsys.readouterr().err
