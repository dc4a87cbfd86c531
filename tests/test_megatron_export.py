"""The Megatron-LM export starts Megatron: its scripts parse with Megatron-LM's parser
(../shared/data/megatron-lm/arguments.json) and keep validate_args' rules (core/io/megatron/rules.py),
the environment included; plans Megatron refuses are refused naming the rule; ``--into``
rewrites the user's script keeping everything else; the cluster survives a round trip."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT
from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ATTENTION_KERNELS, ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.rules import validate
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import read_launch
from core.io.megatron.model_arguments import (ATTENTION_BACKENDS, DEFAULT_ATTENTION_BACKEND,
                                              EXPORTED_ATTENTION_BACKENDS)
from core.io.megatron.to_session import import_file
from core.io.megatron.export import export_script
from core.io.megatron.export import PLAN_ARGUMENTS, rewrite_script
from core.io.megatron.rules import (ENVIRONMENT_RULES, OPTIONS, RULES, broken_rules, namespace,
                                    parse_problems, violations)
from core.io.session import load_any, save_session

ARGUMENTS_JSON = ROOT.parent / "shared" / "data" / "megatron-lm" / "arguments.json"
BASH = shutil.which("bash")


@pytest.fixture(scope="module")
def parser_spec():
    """Megatron-LM's parser at the commit of arguments.json (skips when the checkout lacks it)."""
    if not ARGUMENTS_JSON.exists():
        pytest.skip(f"shared data not present: {ARGUMENTS_JSON}")
    return json.loads(ARGUMENTS_JSON.read_text())


# --------------------------------------------------------------------------- plans

def _session(gpu="H100-SXM5-80GB", model=None, **plan) -> Session:
    m = model or ModelConfig("m", 8, 1024, 16, None, 2048, 32000, tied_embeddings=False,
                             attention_kernel="flash")
    fields = dict(tensor_parallel=1, pipeline_parallel=1, data_parallel=8, micro_batch_size=1,
                  global_batch_size=64, schedule="1f1b", recompute="none", precision="bf16")
    fields.update(plan)
    return Session(m, ParallelPlan(**fields), ClusterConfig(gpu, 8),
                   CostConfig(2.0, 2048 * 64 * 1000))


_MOE = ModelConfig("moe", 8, 1024, 16, None, 2048, 32000, tied_embeddings=False,
                   attention_kernel="flash", num_experts=8, moe_top_k=2)
_TIED = ModelConfig("tied", 8, 1024, 16, None, 2048, 32000, attention_kernel="flash")

#: Plans the simulator accepts and Megatron-LM starts.
STARTS = {
    "t2": _session(tensor_parallel=2, data_parallel=4, sequence_parallel=True),
    "t2-a100": _session("A100-SXM4-80GB", tensor_parallel=2, data_parallel=4),
    "t2-h200": _session("H200-SXM-141GB", tensor_parallel=2, data_parallel=4),
    "t2-b200": _session("B200-180GB", tensor_parallel=2, data_parallel=4),
    "cp2": _session(context_parallel=2, data_parallel=4),
    "zero1-overlap": _session(zero_stage=1, overlap_grad_reduce=True, overlap_param_gather=True),
    "fsdp2": _session(zero_stage=3),
    "fsdp2-t2": _session(zero_stage=3, tensor_parallel=2, data_parallel=4),
    # ZeRO-2, and ZeRO-3 with the parameter gather overlapped (FSDP2 refuses it): Megatron-FSDP
    "megatron-fsdp-zero2": _session(zero_stage=2, overlap_grad_reduce=True),
    "megatron-fsdp-zero3-t2": _session(zero_stage=3, tensor_parallel=2, data_parallel=4,
                                       overlap_grad_reduce=True, overlap_param_gather=True),
    "megatron-fsdp-zero3-p2": _session(zero_stage=3, pipeline_parallel=2, data_parallel=4,
                                       overlap_grad_reduce=True, overlap_param_gather=True),
    "fp8": _session(precision="fp8", zero_stage=1, fp8_param_gather=True, fp8_recipe="delayed"),
    "interleaved": _session(pipeline_parallel=2, data_parallel=4, schedule="interleaved",
                            virtual_pipeline_stages=2),
    "ep2": _session(model=_MOE, expert_parallel=2),
    "ep2-t2": _session(model=_MOE, expert_parallel=2, tensor_parallel=2, data_parallel=4,
                       sequence_parallel=True),
    "selective-tp-overlap": _session(recompute="selective", tensor_parallel=2, data_parallel=4,
                                     sequence_parallel=True, tp_comm_overlap=True),
}

#: Plans the simulator accepts and Megatron-LM refuses, with the rule that refuses them.
REFUSED = {
    "fsdp2-p2": (_session(zero_stage=3, pipeline_parallel=2, data_parallel=4), "fsdp2-pipeline"),
    "fsdp2-ep2": (_session(model=_MOE, zero_stage=3, expert_parallel=2), "fsdp2-expert"),
    "fsdp2-tied": (_session(model=_TIED, zero_stage=3), "fsdp2-untied-embeddings"),
    "fsdp2-fp16": (_session(zero_stage=3, precision="fp16"), "fsdp2-fp16"),
    "cross-entropy-te": (_session(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="te"),
                         "cross-entropy-te"),
    "param-gather-without-grad-reduce": (_session(zero_stage=1, overlap_param_gather=True),
                                         "overlap-param-gather-grad-reduce"),
    "fsdp2-hybrid-shards": (_session(zero_stage=3, data_parallel_shard_size=4),
                            "distributed-optimizer-instances"),
}


def _examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.json"))


def _run(script: Path, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Run ``script`` under bash with a stub torchrun; returns (its argv, the environment
    variables Megatron's rules read, as torchrun sees them)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "torchrun"
    stub.write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$LOG/argv"\n'
                    'printf "%s" "${CUDA_DEVICE_MAX_CONNECTIONS-<unset>}" > "$LOG/cdmc"\n')
    stub.chmod(0o755)
    log = tmp / "log"
    log.mkdir(exist_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), "LC_ALL": "C.UTF-8",
           "CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # inherited from the shell: FSDP2 must unset it
    proc = subprocess.run([BASH, str(script)], cwd=tmp, env=env, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    argv = (log / "argv").read_text().split("\0")[:-1]
    cdmc = (log / "cdmc").read_text()
    return argv, ({} if cdmc == "<unset>" else {"CUDA_DEVICE_MAX_CONNECTIONS": cdmc})


def _megatron_starts(session: Session, tmp: Path, spec) -> None:
    """Export ``session``, run the script, and check what torchrun gets against Megatron."""
    script = tmp / "run.sh"
    script.write_text(export_script(session))
    argv, env = _run(script, tmp)
    args = argv[argv.index("pretrain_gpt.py") + 1:]
    assert parse_problems(args, spec) == []
    nnodes, nproc = int(argv[argv.index("--nnodes") + 1]), int(argv[argv.index("--nproc-per-node") + 1])
    assert violations(args, env, session.cluster.gpu, world_size=nnodes * nproc) == []


# --------------------------------------------------------------------------- the rule table

def test_options_are_megatrons(parser_spec):
    """The options the rules read are arguments.json's: dest, count of values, default."""
    by_option = {o: a for a in parser_spec["arguments"] for o in a["options"]}
    for option, (dest, nargs, default) in OPTIONS.items():
        a = by_option[option]
        assert (a["dest"], a["nargs"], a["default"]) == (dest, nargs, default), option
    assert parser_spec["commit"].startswith("d98e8a64")  # the commit the rules are read at


def test_every_rule_fires_and_is_kept():
    """Each rule refuses a minimal argument list that breaks it and passes once fixed."""
    cases = {
        "fsdp2-pipeline": ("--use-torch-fsdp2 --no-gradient-accumulation-fusion "
                           "--untie-embeddings-and-output-weights --pipeline-model-parallel-size 2",
                           "--pipeline-model-parallel-size 1"),
        "fsdp2-gradient-accumulation-fusion": ("--use-torch-fsdp2 "
                                               "--untie-embeddings-and-output-weights",
                                               "--no-gradient-accumulation-fusion"),
        "fsdp2-checkpoint-format": ("--use-torch-fsdp2 --no-gradient-accumulation-fusion "
                                    "--untie-embeddings-and-output-weights --ckpt-format torch",
                                    "--ckpt-format torch_dist"),
        "tp-comm-overlap-sequence-parallel": ("--tp-comm-overlap --tensor-model-parallel-size 2",
                                              "--sequence-parallel"),
        "expert-parallel-experts": ("--num-experts 6 --expert-model-parallel-size 4",
                                    "--num-experts 8"),
        "interleaved-pipeline-size": ("--num-layers 8 --num-virtual-stages-per-pipeline-rank 2 "
                                      "--pipeline-model-parallel-size 2 "
                                      "--no-overlap-p2p-communication",
                                      "--pipeline-model-parallel-size 4"),
        "pipeline-layers-divisible": ("--num-layers 9 --pipeline-model-parallel-size 2",
                                      "--account-for-loss-in-pipeline-split"),
        "recompute-method-selective": ("--recompute-granularity selective --recompute-method "
                                       "block", "--recompute-granularity full"),
        "iteration-or-sample-based": ("--train-samples 5000 --train-iters 100",
                                      "--train-iters 0"),
        "iteration-based-lr-decay": ("--train-iters 100 --lr-decay-samples 900",
                                     "--train-iters 0"),
        "iteration-based-lr-warmup": ("--train-iters 100 --lr-warmup-samples 90",
                                      "--lr-warmup-samples 0"),
        "iteration-based-no-rampup": ("--train-iters 100 --rampup-batch-size 16 16 5000",
                                      "--train-iters 0"),
        "iteration-based-one-warmup": ("--train-iters 100 --lr-warmup-fraction .01 "
                                       "--lr-warmup-iters 10", "--lr-warmup-iters 0"),
        "save-interval-given": ("--save /ckpt", "--save-interval 10"),
        "save-interval-positive": ("--save /ckpt --save-interval 0", "--save-interval 10"),
        "sample-based-lr-decay": ("--train-samples 100 --lr-decay-iters 90", "--train-samples 0"),
        "sample-based-lr-warmup": ("--train-samples 100 --lr-warmup-iters 9",
                                   "--lr-warmup-iters 0"),
        "sample-based-one-warmup": ("--train-samples 100 --lr-warmup-fraction .01 "
                                    "--lr-warmup-samples 10", "--lr-warmup-samples 0"),
    }
    assert set(cases) <= {r.name for r in RULES}
    for name, (bad, fix) in cases.items():
        assert name in [r.name for r in broken_rules(bad.split())], name
        assert name not in [r.name for r in broken_rules((bad + " " + fix).split())], name


def test_cuda_device_max_connections_by_gpu_and_plan():
    (tp_rule, fsdp_rule) = ENVIRONMENT_RULES
    t2, cp2 = ["--tensor-model-parallel-size", "2"], ["--context-parallel-size", "2"]
    for args in (t2, cp2):
        assert violations(args, {}, "H100-SXM5-80GB")  # Hopper: must be 1
        assert violations(args, {}, "A100-SXM4-80GB")
        assert not violations(args, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "H200-SXM-141GB")
        assert not violations(args, {}, "B200-180GB")  # Blackwell has no such requirement
    assert not violations([], {}, "A100-SXM4-80GB")
    fsdp = t2 + ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion",
                 "--untie-embeddings-and-output-weights"]
    assert not violations(fsdp, {}, "H100-SXM5-80GB")
    assert violations(fsdp, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "H100-SXM5-80GB")


def test_namespace_reads_megatrons_forms():
    ns = namespace(["--tensor-model-parallel-size=4", "--no-gradient-accumulation-fusion",
                    "--fp8-format", "hybrid", "--tensor-model-parallel-size", "8"])
    assert ns["tensor_model_parallel_size"] == 8  # the last one wins, as in argparse
    assert ns["gradient_accumulation_fusion"] is False and ns["fp8"] == "hybrid"
    assert ns["pipeline_model_parallel_size"] == 1 and ns["ckpt_format"] == "torch_dist"


def test_parse_check_finds_what_argparse_refuses(parser_spec):
    assert parse_problems(["--tensor-model-parallel-size", "2", "--bf16"], parser_spec) == []
    bad = parse_problems(["--tensor-model-paralel-size", "2", "--bf16", "x",
                          "--recompute-method", "blocky", "--micro-batch-size", "two",
                          "--hierarchical-context-parallel-sizes"], parser_spec)
    named = [p.split(":")[0] for p in bad]
    for option in ("--tensor-model-paralel-size", "--bf16", "--recompute-method",
                   "--micro-batch-size", "--hierarchical-context-parallel-sizes"):
        assert option in named
    assert "'2'" in named  # the misspelled option's value has no option


# --------------------------------------------------------------------------- exported scripts start

@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("example", _examples(), ids=lambda p: p.stem)
def test_every_example_exports_a_launch_megatron_starts(tmp_path, example, parser_spec):
    _megatron_starts(load_any(example), tmp_path, parser_spec)


@pytest.mark.skipif(BASH is None, reason="needs bash")
@pytest.mark.parametrize("name", sorted(STARTS))
def test_plan_matrix_exports_launches_megatron_starts(tmp_path, name, parser_spec):
    session = STARTS[name]
    assert validate(session) == []  # a plan the simulator accepts
    _megatron_starts(session, tmp_path, parser_spec)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_plans_megatron_refuses_are_refused_naming_the_rule(tmp_path, name, capsys):
    session, rule = REFUSED[name]
    assert validate(session) == []  # the simulator simulates it (DeepSpeed, torchtitan ...)
    with pytest.raises(MegatronArgsError, match=rule):
        export_script(session)
    path = tmp_path / "s.json"
    save_session(session, path)
    assert main(["export", "megatron-args", str(path), "--out", str(tmp_path / "o.sh")]) == 2
    err = capsys.readouterr().err
    assert rule in err and str(path) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.sh").exists()


def test_fsdp2_writes_what_megatron_needs():
    args = export_arguments(STARTS["fsdp2"])
    assert "--no-gradient-accumulation-fusion" in args and "--use-torch-fsdp2" in args
    assert "--use-distributed-optimizer" not in args


# --------------------------------------------------------------------------- the cluster

def test_the_network_survives_export_and_import(tmp_path):
    """GPT-3 175B: 62.0 s simulated, and 62.0 s after export and import (not 61.3 s)."""
    from core.sim.simulate import simulate
    session = load_any(EXAMPLES / "gpt3_175b.json")
    before = simulate(session).report.iteration_time_s
    script = tmp_path / "g.sh"
    script.write_text(export_script(session))
    back = import_file(script).session
    assert back.cluster == session.cluster
    assert simulate(back).report.iteration_time_s == pytest.approx(before, rel=1e-12)
    assert round(before, 1) == 62.0


def test_an_explicit_gpu_wins_over_the_comment(tmp_path):
    script = tmp_path / "g.sh"
    script.write_text(export_script(load_any(EXAMPLES / "gpt3_175b.json")))
    back = import_file(script, gpu="H100-SXM5-80GB").session
    assert back.cluster.gpu == "H100-SXM5-80GB"
    assert back.cluster.inter_node_bandwidth_gbits_per_s == 800.0


@pytest.mark.parametrize("comment", ['gpu=H100', 'colour="red"', 'gpus_per_node="8"',
                                     'inter_node_bandwidth_gbits_per_s=fast'])
def test_a_malformed_cluster_comment_is_refused(tmp_path, comment, capsys):
    text = export_script(load_any(EXAMPLES / "gpt3_1.3b_single_node.json"))
    lines = [f"# vtrain: cluster {comment}" if ln.startswith("# vtrain: cluster") else ln
             for ln in text.splitlines()]
    script = tmp_path / "bad.sh"
    script.write_text("\n".join(lines) + "\n")
    assert main(["import", "megatron-args", str(script), "--out", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and str(script) in err
    assert not (tmp_path / "s.json").exists()


def test_hostile_cluster_text_stays_in_its_comment(tmp_path):
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    session.cluster.profile_path = 'x" gpus_per_node=1 \n$(touch PWNED)\u2028'
    text = export_script(session)
    assert len([ln for ln in text.splitlines() if "vtrain: cluster" in ln]) == 1
    from core.io.cluster_comment import read_cluster_comment
    assert read_cluster_comment(text)["profile_path"] == session.cluster.profile_path
    assert read_cluster_comment(text)["gpus_per_node"] == 8


# --------------------------------------------------------------------------- --into

TRAIN_SH = r"""#!/bin/bash
# my GPT-3 175B run
#SBATCH --job-name=gpt3
set -euo pipefail

GPUS_PER_NODE=8
NNODES=64
CHECKPOINT_PATH=/ckpt/gpt3
TP=4

GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend unfused
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --train-iters 500000
    --lr 6.0e-5
    --lr-decay-style cosine
    --bf16
    --tensor-model-parallel-size $TP
    --use-distributed-optimizer
)

echo "--sequence-parallel in another command is not the plan"
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    --pipeline-model-parallel-size=32 \
    --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt \
    --save $CHECKPOINT_PATH --save-interval 1000 --sequence-parallel \
    --recompute-activations
echo done
"""


def _plan_lines(text: str) -> set[int]:
    """Lines of ``text`` that hold a plan argument (the ones --into may change)."""
    return {i for i, ln in enumerate(text.splitlines()) if any(
        w.split("=")[0] in PLAN_ARGUMENTS for w in ln.split()) and not ln.startswith("echo")}


def test_into_replaces_the_plan_and_keeps_every_other_line(tmp_path, capsys):
    src = tmp_path / "train.sh"
    src.write_text(TRAIN_SH)
    session_path = tmp_path / "s.json"
    session = load_any(EXAMPLES / "gpt3_175b.json")
    save_session(session, session_path)
    out = tmp_path / "train_new.sh"
    assert main(["export", "megatron-args", str(session_path), "--into", str(src),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    new = out.read_text()
    assert src.read_text() == TRAIN_SH  # the input untouched
    # unrelated lines byte for byte, in order
    old_lines, new_lines = TRAIN_SH.splitlines(keepends=True), new.splitlines(keepends=True)
    kept = [ln for i, ln in enumerate(old_lines) if i not in _plan_lines(TRAIN_SH)]
    it = iter(new_lines)
    assert all(any(ln == n for n in it) for ln in kept)
    # the diff printed is the change
    assert printed.startswith(f"--- {src}\n+++ {out}\n")
    assert "-    --tensor-model-parallel-size $TP\n" in printed
    # it reads back as the session's plan, with the user's schedule kept
    back = import_file(out)
    assert back.session.plan == import_file(_write(tmp_path, export_script(session))).session.plan
    assert back.session.cluster == session.cluster
    args = read_launch(new, "x").arguments
    assert args[args.index("--train-iters") + 1] == "500000"
    assert args.count("--tensor-model-parallel-size") == 1
    assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in new
    # and run again on its own output it changes nothing but what it must
    again = rewrite_script(session, new, "train_new.sh")
    assert again == new


def _write(tmp: Path, text: str) -> Path:
    path = tmp / "export.sh"
    path.write_text(text)
    return path


@pytest.mark.skipif(BASH is None, reason="needs bash")
def test_into_output_starts_megatron(tmp_path, parser_spec):
    session = load_any(EXAMPLES / "gpt3_175b.json")
    new = tmp_path / "new.sh"
    new.write_text(rewrite_script(session, TRAIN_SH, "train.sh"))
    argv, env = _run(new, tmp_path)
    args = argv[argv.index("pretrain_gpt.py") + 1:]
    assert parse_problems(args, parser_spec) == []
    assert violations(args, env, session.cluster.gpu, world_size=512) == []


def test_into_refusals(tmp_path, capsys):
    src = tmp_path / "train.sh"
    src.write_text(TRAIN_SH)
    session = load_any(EXAMPLES / "gpt3_175b.json")
    path = tmp_path / "s.json"
    save_session(session, path)
    # --out is the input, or missing
    assert main(["export", "megatron-args", str(path), "--into", str(src), "--out", str(src)]) == 2
    assert main(["export", "megatron-args", str(path), "--into", str(src)]) == 2
    assert src.read_text() == TRAIN_SH
    # another world size, another model, a plan Megatron refuses
    other = load_any(EXAMPLES / "gpt3_175b.json")
    other.plan.data_parallel = 8
    other.plan.global_batch_size = 1536
    with pytest.raises(MegatronArgsError, match="launches 64 x 8 = 512 GPUs"):
        rewrite_script(other, TRAIN_SH, "train.sh")
    with pytest.raises(MegatronArgsError, match="model.hidden_size"):
        rewrite_script(session, TRAIN_SH.replace("--hidden-size 12288", "--hidden-size 8192"),
                       "train.sh")
    fsdp = load_any(EXAMPLES / "gpt3_175b.json")
    fsdp.plan.zero_stage = 3
    with pytest.raises(MegatronArgsError, match="fsdp2-pipeline"):
        rewrite_script(fsdp, TRAIN_SH, "train.sh")
    capsys.readouterr()


def test_into_refuses_a_plan_argument_it_cannot_reach(tmp_path):
    """A plan argument from outside the script (here a variable from the environment) would
    override the plan: the read-back check refuses rather than write a wrong script."""
    text = TRAIN_SH.replace("    --recompute-activations\n",
                            "    --recompute-activations $EXTRA\n").replace(
        "TP=4\n", "TP=4\nEXTRA=--no-align-grad-reduce\n")
    session = load_any(EXAMPLES / "gpt3_175b.json")
    out = rewrite_script(session, text, "train.sh")  # not a plan field: kept, and fine
    assert "EXTRA=--no-align-grad-reduce" in out
    hidden = text.replace("EXTRA=--no-align-grad-reduce", "SP=sequence-parallel"
                          ).replace("$EXTRA", "--$SP")  # read as --sequence-parallel
    with pytest.raises(MegatronArgsError, match="plan.sequence_parallel"):
        rewrite_script(session, hidden, "train.sh")


def test_docs_list_every_rule():
    text = (ROOT / "docs" / "megatron_args.md").read_text()
    for name in [r.name for r in RULES] + [r.name for r in ENVIRONMENT_RULES]:
        assert f"`{name}`" in text, name


def test_into_keeps_crlf_line_endings():
    session = load_any(EXAMPLES / "gpt3_175b.json")
    crlf = TRAIN_SH.replace("\n", "\r\n")
    new = rewrite_script(session, crlf, "train.sh")
    assert new.count("\n") == new.count("\r\n")
    assert new.replace("\r\n", "\n") == rewrite_script(session, TRAIN_SH, "train.sh")


def test_the_import_summary_says_the_gpu_came_from_the_cluster_comment(tmp_path, capsys):
    """The GPU of an exported script comes from its ``# vtrain: cluster`` comment: the summary
    says so (it used to say the arguments do not name it and the default was taken)."""
    script = tmp_path / "b.sh"
    session = load_any(EXAMPLES / "gpt3_175b.json")
    session.cluster.gpu = "H100-SXM5-80GB"
    script.write_text(export_script(session))
    assert main(["import", "megatron-args", str(script), "--out", str(tmp_path / "s.json")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "on H100-SXM5-80GB (from the script's # vtrain: cluster comment)" in line
    assert "do not name the GPU" not in line


# --------------------------------------------------------------------------- the attention backend

_LAUNCH = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 8 "
           "--hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
           "--max-position-embeddings 2048 --tokenizer-type NullTokenizer --vocab-size 32000 "
           "--micro-batch-size 1 --global-batch-size 64 --bf16 "
           "--untie-embeddings-and-output-weights {backend}\n")


def _backend_words(args: list[str]) -> list[str]:
    """The values of every ``--attention-backend`` in ``args``."""
    return [args[i + 1] for i, w in enumerate(args) if w == "--attention-backend"]


#: A launch's attention arguments -> the session's kernel and the backend its export writes
#: (None: none, Megatron-Core's default auto). flash and fused are TE backends Megatron forces;
#: the field holds only the kernel class, so they export as the default TE chooses from.
_BACKEND_ROUND_TRIPS = {
    "": ("flash", None), "--attention-backend auto": ("flash", None),
    "--attention-backend flash": ("flash", None), "--attention-backend fused": ("flash", None),
    "--use-flash-attn": ("flash", None),
    "--attention-backend unfused": ("unfused", "unfused"),
    "--attention-backend local": ("unfused", "unfused"),
}


@pytest.mark.parametrize("backend", sorted(_BACKEND_ROUND_TRIPS))
def test_attention_backend_round_trips_import_export_import(tmp_path, backend, parser_spec):
    """import -> export -> import keeps the session; a launch that leaves the backend to
    Megatron-Core (absent or auto) exports no --attention-backend (it used to write ``flash``,
    which forces the flash-attn package's backend instead of TE's choice)."""
    kernel, written = _BACKEND_ROUND_TRIPS[backend]
    launch = tmp_path / "l.sh"
    launch.write_text(_LAUNCH.format(backend=backend))
    first = import_file(launch).session
    assert first.model.attention_kernel == kernel
    args = export_arguments(first)
    assert _backend_words(args) == ([written] if written else [])
    assert "--use-flash-attn" not in args
    assert parse_problems(args, parser_spec) == []
    assert violations(args, world_size=8) == []
    out = tmp_path / "o.sh"
    out.write_text(export_script(first))
    back = import_file(out).session
    assert back.model == dataclasses.replace(first.model, name=back.model.name)
    assert back.plan == first.plan and back.cluster.gpu == first.cluster.gpu


def test_the_cli_round_trip_of_a_default_backend_writes_none(tmp_path, capsys):
    launch = tmp_path / "l.sh"
    launch.write_text(_LAUNCH.format(backend="--attention-backend auto"))
    s1, s2, out = tmp_path / "s1.json", tmp_path / "s2.json", tmp_path / "o.sh"
    assert main(["import", "megatron-args", str(launch), "--out", str(s1)]) == 0
    assert main(["export", "megatron-args", str(s1), "--out", str(out)]) == 0
    assert "--attention-backend" not in out.read_text()
    assert main(["import", "megatron-args", str(out), "--out", str(s2)]) == 0
    a, b = load_any(s1), load_any(s2)
    assert a.model.attention_kernel == b.model.attention_kernel == "flash"
    assert dataclasses.replace(b.model, name=a.model.name) == a.model and b.plan == a.plan


def test_exported_backends_invert_the_import_and_name_megatrons_default(parser_spec):
    by = {o: a for a in parser_spec["arguments"] for o in a["options"]}
    assert by["--attention-backend"]["default"] == f"<AttnBackend.{DEFAULT_ATTENTION_BACKEND}: 5>"
    assert set(EXPORTED_ATTENTION_BACKENDS) == set(ATTENTION_KERNELS)
    for kernel, backend in EXPORTED_ATTENTION_BACKENDS.items():
        assert ATTENTION_BACKENDS[backend] == kernel
    unfused = _session(model=ModelConfig("u", 8, 1024, 16, None, 2048, 32000,
                                         tied_embeddings=False, attention_kernel="unfused"))
    assert _backend_words(export_arguments(unfused)) == ["unfused"]
    assert _backend_words(export_arguments(_session())) == []


@pytest.mark.parametrize("gpu,gpn,t,p,d,launcher", [
    # a GB200 NVL72 rack (node) of 72 is 18 hosts of 4: torchrun runs 4 processes per host
    ("GB200-NVL72", 72, 8, 4, 36, "--nnodes 288 --nproc-per-node 4"),
    ("GB200-NVL72", 72, 1, 1, 8, "--nnodes 2 --nproc-per-node 4"),
    # 6 GPUs of one rack: 2 hosts of 3 (hosts inside the NVLink domain may run fewer)
    ("GB200-NVL72", 72, 1, 1, 6, "--nnodes 2 --nproc-per-node 3"),
    # a DGX GH200's 256 superchips are 256 hosts of one GPU
    ("GH200-96GB", 256, 1, 1, 256, "--nnodes 256 --nproc-per-node 1"),
    ("H100-SXM5-80GB", 8, 2, 2, 4, "--nnodes 2 --nproc-per-node 8"),
    ("H100-SXM5-80GB", 4, 2, 1, 4, "--nnodes 2 --nproc-per-node 4"),
])
def test_torchrun_starts_processes_per_host_not_per_nvlink_domain(tmp_path, gpu, gpn, t, p, d,
                                                                   launcher):
    """torchrun starts ``--nproc-per-node`` processes on every host, each on ``cuda:LOCAL_RANK``:
    a GB200 host (compute tray) has 4 GPUs and a GH200 one, so a node of 72 or 256
    (cluster.gpus_per_node, the NVLink domain) launched as 72 or 256 processes per host cannot
    start (core.plan.cluster.GPU_HOST_GPUS). The import of the exported script gives the same
    cluster back."""
    s = _session(gpu=gpu, tensor_parallel=t, pipeline_parallel=p, data_parallel=d,
                 global_batch_size=4 * d)
    s = dataclasses.replace(s, cluster=ClusterConfig(gpu, gpn))
    text = export_script(s)
    assert f"torchrun {launcher} pretrain_gpt.py" in text
    path = tmp_path / "x.sh"
    path.write_text(text)
    back = import_file(path).session
    assert (back.cluster, back.plan) == (s.cluster, s.plan)


def test_a_gb200_launch_of_4_processes_per_host_is_a_node_of_72(tmp_path):
    """A GB200 NVL72 job as people launch it (Slurm, 4 tasks per host): its NVLink domain is
    the rack of 72, not the host of 4, so t=8 stays on NVLink (it was read as a node of 4 and
    the tensor-parallel group priced over the network, 31 % slow); noted. An explicit
    --gpus-per-node wins; an H100 launch of 8 per host stays a node of 8."""
    text = ("#!/bin/bash\n#SBATCH --nodes=288\n#SBATCH --ntasks-per-node=4\n"
            "srun python pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
            "--micro-batch-size 1 --global-batch-size 1152 --tensor-model-parallel-size 8 "
            "--bf16 --vocab-size 128256 --train-iters 10\n")
    path = tmp_path / "gb200.sh"
    path.write_text(text)
    res = import_file(path, gpu="GB200-NVL72")
    assert (res.session.cluster.gpus_per_node, res.session.plan.num_gpus) == (72, 1152)
    assert [n for f, n in res.notes if f == "GPUs per node"] == [
        "72: the GB200-NVL72's NVLink domain, which spans its hosts of 4 GPUs (the launch's 4 "
        "processes per host); give --gpus-per-node G for another"]
    assert import_file(path, gpu="GB200-NVL72", gpus_per_node=4).session.cluster.gpus_per_node == 4
    assert import_file(path, gpu="H100-SXM5-80GB").session.cluster.gpus_per_node == 4
    # 2 processes per GB200 host: still hosts of the rack (it was a node of 2, t=8 over the NICs)
    two = tmp_path / "gb200_2.sh"
    two.write_text(text.replace("--ntasks-per-node=4", "--ntasks-per-node=2")
                   .replace("--global-batch-size 1152", "--global-batch-size 576"))
    assert import_file(two, gpu="GB200-NVL72").session.cluster.gpus_per_node == 72
    # --nodes stands for the launch's host count: 18 hosts of the launch's 4 are 72 GPUs, also
    # when --gpus-per-node restates the rack (it counted 18 x 72 = 1,296)
    env = tmp_path / "gb200_env.sh"
    env.write_text("torchrun --nnodes $NNODES --nproc-per-node 4 pretrain_gpt.py "
                   "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
                   "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 72 "
                   "--tensor-model-parallel-size 8 --bf16 --vocab-size 128256 --train-iters 10\n")
    for gpn in (None, 72):
        res = import_file(env, gpu="GB200-NVL72", nodes=18, gpus_per_node=gpn)
        assert (res.session.plan.num_gpus, res.session.cluster.gpus_per_node) == (72, 72)
    # a world of 6 is one rack's 2 hosts of 3, not refused as "not a multiple of 4 per host"
    six = tmp_path / "gb200_6.sh"
    six.write_text(env.read_text().replace("--tensor-model-parallel-size 8",
                                           "--tensor-model-parallel-size 1")
                   .replace("--global-batch-size 72", "--global-batch-size 6"))
    res = import_file(six, gpu="GB200-NVL72", num_gpus=6)
    assert (res.session.plan.num_gpus, res.session.cluster.gpus_per_node) == (6, 72)


def test_a_gb200_world_beyond_a_rack_fills_its_hosts():
    """Hosts of fewer than 4 processes only inside one rack: 74 GB200s as 37 hosts of 2 would
    not be the racks of 72 the simulation has, so the export refuses it (whole hosts of 4); 6
    run as 2 hosts of 3, and their checkpoint is written by those 2 hosts
    (core.plan.cluster.processes_per_host)."""
    from core.plan.cluster import processes_per_host
    from core.sim.goodput import checkpoint_size, run_goodput
    from core.sim.simulate import simulate
    rack = ClusterConfig("GB200-NVL72", 72)
    assert [processes_per_host(rack, n) for n in (6, 8, 10, 72, 74, 144)] == [3, 4, 2, 4, 4, 4]
    s = dataclasses.replace(_session(gpu="GB200-NVL72", data_parallel=74, global_batch_size=74),
                            cluster=rack)
    with pytest.raises(MegatronArgsError, match="world size 74 does not fill whole hosts of 4"):
        export_script(s)
    six = dataclasses.replace(_session(gpu="GB200-NVL72", data_parallel=6, global_batch_size=6),
                              cluster=rack)
    g = run_goodput(six, simulate(six).report)
    assert g.checkpoint_bytes_per_node == checkpoint_size(six.model, six.plan, 3).per_node_bytes


@pytest.mark.parametrize("family, named, not_named", [
    ("gemma2", "(post-norms, embedding scale, soft-capping)", None),
    ("gemma3", "(post-norms, embedding scale)", "soft-capping")])  # Gemma 3 has no soft-capping
def test_a_refused_model_names_the_session_file(tmp_path, capsys, family, named, not_named):
    """Every refusal of the export names the session's file: the model family one (from the
    arguments' writer) did not ("vtrain: error: model.family 'gemma2': ..."), unlike the rules'
    and the launch's; and only Gemma 2 is soft-capped."""
    m = ModelConfig("g", 8, 1024, 16, None, 2048, 32000, tied_embeddings=True,
                    attention_kernel="flash", activation="swiglu", normalization="rmsnorm",
                    position_embedding="rope", family=family)
    path = tmp_path / f"{family}.json"
    save_session(_session(model=m), path)
    for argv in (["export", "megatron-args", str(path)],
                 ["export", "megatron-args", str(path), "--into", str(tmp_path / "t.sh"),
                  "--out", str(tmp_path / "new.sh")]):
        (tmp_path / "t.sh").write_text("torchrun --nproc-per-node 8 pretrain_gpt.py "
                                       "--num-layers 8\n")
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"vtrain: error: {path}: model.family '{family}': ")
        assert named in err and err.count("\n") == 1
        assert not_named is None or not_named not in err
        assert not (tmp_path / "new.sh").exists()


@pytest.mark.parametrize("script", ["", "  "])
def test_a_blank_training_script_is_refused(tmp_path, capsys, script):
    # --script '' wrote "torchrun ... '' \" (a launch that runs nothing), exit 0
    session = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    session["plan"]["cross_entropy_fusion_impl"] = "native"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(session))
    out = tmp_path / "run.sh"
    assert main(["export", "megatron-args", str(path), "--script", script, "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("vtrain: error: --script: ")
    assert not out.exists()
    assert main(["export", "megatron-args", str(path), "--out", str(out)]) == 0
    assert "--nproc-per-node 8 pretrain_gpt.py \\" in out.read_text()


def test_export_names_what_the_plan_does_not_set(parser_spec):
    """The exported launch ends with what a run needs besides the plan: Megatron-LM's parser has
    no default for the learning rate or the data (arguments.json), and the plan sets neither."""
    from core.io.megatron.export import NOT_IN_THE_PLAN, export_script
    from core.io.session import load_session
    defaults = {o: a["default"] for a in parser_spec["arguments"] for o in a["options"]}
    assert defaults["--lr"] is None and defaults["--data-path"] is None
    assert defaults["--mock-data"] is False
    text = export_script(load_session(EXAMPLES / "gpt3_1.3b_single_node.json"))
    tail = text.splitlines()[-len(NOT_IN_THE_PLAN):]
    assert tail == [f"# {line}" for line in NOT_IN_THE_PLAN]
    assert "--lr" in " ".join(tail) and "--mock-data" in " ".join(tail)
    assert "--lr " not in text.split("pretrain_gpt.py", 1)[1].split("#", 1)[0]  # no value guessed
    # the numerics the session does not hold are Megatron-LM's own options, none written
    command = text.split("pretrain_gpt.py", 1)[1].split("#", 1)[0]
    for option in ("--rotary-base", "--norm-epsilon", "--init-method-std", "--use-rope-scaling"):
        assert option in defaults and option in " ".join(tail) and option not in command
    assert "--into" in " ".join(tail)


def test_the_trailer_names_no_argument_the_launch_writes():
    """The trial's Llama 3 70B launch wrote --attention-dropout 0.0 while its trailer said the
    session does not hold --attention-dropout: the session holds it (model.attention_dropout,
    "modelled" in resources/megatron_arguments.json). Every Megatron-LM option the trailer
    names is one the plan never writes: neutral (numerics), or not used (data, checkpoints)."""
    from core.io.megatron.export import NOT_IN_THE_PLAN
    table = json.loads((ROOT / "resources" / "megatron_arguments.json").read_text())
    effect = {o: a["effect"] for a in table["arguments"] for o in a["options"]}
    named = [w.strip("(),.:") for w in " ".join(NOT_IN_THE_PLAN).split() if w.startswith("(--")
             or w.startswith("--")]
    named = [o for o in named if o not in ("--into", "--out")]  # vtrain's own options
    assert {"--lr", "--data-path", "--rotary-base", "--use-rope-scaling"} <= set(named)
    assert {o: effect[o] for o in named if effect[o] == "modelled"} == {}
    model = ModelConfig("m", 8, 1024, 16, None, 2048, 32000, tied_embeddings=False,
                        attention_kernel="flash", hidden_dropout=0.0, attention_dropout=0.0)
    text = export_script(_session(model=model, cross_entropy_fusion_impl="native"))
    command = text.split("pretrain_gpt.py", 1)[1].split("\n#", 1)[0]
    assert "--attention-dropout 0.0" in command
    assert [o for o in named if o in command.split()] == []


@pytest.mark.parametrize("data_parallel, hosts", [(8, 1), (16, 2), (64, 8)])
def test_a_launch_on_several_hosts_says_to_add_the_rendezvous(tmp_path, data_parallel, hosts):
    """The trial's 64-GPU launch was "torchrun --nnodes 8 --nproc-per-node 8" alone: run on 8
    hosts as written, each starts its own job (torchrun's default rendezvous is this host).
    Above the torchrun line of a launch on more than one host, a comment names what to add
    (torchrun's --rdzv-id/--rdzv-backend/--rdzv-endpoint, or --node-rank 0 to hosts-1 with
    --master-addr/--master-port); a one-host launch needs none and has none."""
    session = _session(data_parallel=data_parallel, global_batch_size=128,
                       cross_entropy_fusion_impl="native")
    text = export_script(session)
    lines = text.splitlines()
    run = next(i for i, line in enumerate(lines) if line.startswith("torchrun "))
    assert lines[run] == f"torchrun --nnodes {hosts} --nproc-per-node 8 pretrain_gpt.py \\"
    above = " ".join(line for line in lines[:run] if line.startswith("#"))
    if hosts == 1:
        assert "rendezvous" not in text and "--node-rank" not in text
        return
    assert f"each of the {hosts} hosts" in above
    for option in ("--rdzv-id", "--rdzv-backend c10d", "--rdzv-endpoint", "--node-rank R",
                   f"(0 to {hosts - 1})", "--master-addr", "--master-port"):
        assert option in above
    # the comment is no argument: the launch reads back as the same plan
    script = tmp_path / "run.sh"
    script.write_text(text)
    assert import_file(script).session.plan == session.plan


def test_train_samples_cover_the_token_budget_in_the_iterations_simulate_counts(tmp_path,
                                                                              capsys):
    """A token budget of 10.5 iterations (B = 256 sequences of s = 2,048): vtrain simulate
    counts ceil(10.5) = 11 iterations, but the export wrote --train-samples round(tokens / s)
    = 2,688, which Megatron-LM runs as 2,688 // 256 = 10 iterations (update_train_iters,
    megatron/training/training.py, megatron-core 0.19.2): one fewer. It writes 11 x 256 =
    2,816, and says it rounded the budget up."""
    from core.sim.costing import iterations_for_tokens
    from core.sim.simulate import simulate
    B, s = 256, 2048
    assert iterations_for_tokens(10.5 * B * s, B * s) == 11
    assert iterations_for_tokens(10 * B * s, B * s) == 10  # a whole number stays
    assert iterations_for_tokens(10 * B * s + 1, B * s) == 11  # one token more: one more
    assert iterations_for_tokens(5.0, [1.0, 2.0, 3.0]).tolist() == [5, 3, 2]
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert (session.plan.global_batch_size, session.model.seq_length) == (B, s)
    session.cost.training_tokens = 10.5 * B * s  # 5,505,024 tokens
    assert simulate(session).report.num_iterations == 11
    args = export_arguments(session)
    assert args[args.index("--train-samples") + 1] == "2816"  # was 2688: 10 iterations
    assert 2816 // B == 11
    from core.io.megatron.from_session import train_samples
    assert train_samples(session) == 2816
    script = export_script(session)
    assert ("# --train-samples 2816 rounds the token budget up to whole iterations (11 of 256 "
            "sequences") in script
    # read back: the budget of the 11 iterations the launch runs, simulated as 11
    back = import_file(_write_text(tmp_path / "run.sh", script)).session
    assert back.cost.training_tokens == 11 * B * s
    assert simulate(back).report.num_iterations == 11
    session.cost.training_tokens = 10.0 * B * s  # whole iterations: no comment
    assert "rounds the token budget" not in export_script(session)


def _write_text(path, text):
    path.write_text(text)
    return path


def test_a_session_without_checkpoints_exports_no_save_interval(tmp_path):
    """A session that saves no checkpoint (reliability.checkpoint_interval_iterations 2^40,
    what a launch without --save or Megatron-Bridge's checkpoint.save null imports as): the
    export wrote --save-interval 1099511627776; Megatron-LM without --save saves nothing, so
    the launch has no interval, and it reads back as the same session (no checkpoint)."""
    from core.plan.cluster import NO_CHECKPOINT_INTERVAL
    session = load_any(EXAMPLES / "gpt3_175b.json")
    session = dataclasses.replace(session, reliability=dataclasses.replace(
        session.reliability, checkpoint_interval_iterations=NO_CHECKPOINT_INTERVAL))
    args = export_arguments(session)
    assert "--save-interval" not in args and "--save" not in args
    back = import_file(_write(tmp_path, export_script(session))).session
    assert back.reliability.checkpoint_interval_iterations == NO_CHECKPOINT_INTERVAL
    # a session that checkpoints keeps its interval
    every = dataclasses.replace(session, reliability=dataclasses.replace(
        session.reliability, checkpoint_interval_iterations=500))
    assert export_arguments(every)[export_arguments(every).index("--save-interval") + 1] == "500"


def test_into_reads_the_script_as_the_import_does(tmp_path, capsys):
    """--into reads a script whose tokenizer keeps its vocabulary size in its files with the
    session's model.vocab_size (nothing to give again), and takes the import's --var for the
    values the script leaves to its environment; its messages name only export's options."""
    text = TRAIN_SH.replace("TP=4\n", "").replace("--hidden-size 12288", "--hidden-size $H").replace(
        "--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt",
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model gpt2")
    src = tmp_path / "train.sh"
    src.write_text(text)
    session = load_any(EXAMPLES / "gpt3_175b.json")
    assert session.model.vocab_size == 50257  # GPT-2 BPE: the script's tokenizer's files
    path = tmp_path / "s.json"
    save_session(session, path)
    out = tmp_path / "new.sh"
    cmd = ["export", "megatron-args", str(path), "--into", str(src), "--out", str(out)]
    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert "give --var H=VALUE" in err and "import" not in err and not out.exists()
    assert main(cmd + ["--var", "H=12288", "--var", "TP=4"]) == 0
    new = out.read_text()
    assert "--hidden-size $H" in new and "--tokenizer-type HuggingFaceTokenizer" in new
    assert "--vocab-size" not in new  # read with the session's size, not written
    args = read_launch(new, "x", {"H": "12288"}).arguments
    assert args[args.index("--tensor-model-parallel-size") + 1] == "8"  # the session's t
    # --var without --into reads nothing: refused by name
    capsys.readouterr()
    assert main(["export", "megatron-args", str(path), "--var", "H=1"]) == 2
    assert "--var" in capsys.readouterr().err


@pytest.mark.parametrize("given, needle", [
    (["²=x"], "--var '²=x': expected NAME=VALUE"),  # str.isdigit: int('²') raised, exit 1
    (["٨=x"], "--var '٨=x': expected NAME=VALUE"),  # no bash parameter: $٨ is not one
    (["01=x"], "--var '01=x': expected NAME=VALUE"),  # $01 is $0 then 1: it was dropped
    (["H=12288", "H=1024"], "--var H is given twice, 'H=12288' and 'H=1024': give it once"),
])
def test_var_names_are_bashs_and_given_once(tmp_path, capsys, given, needle):
    """--var takes bash's names only (ASCII [A-Za-z_][A-Za-z0-9_]* or a positional [1-9][0-9]*)
    and one value per name, for export --into and import alike: exit 2, one line, nothing
    written (a superscript digit was an internal error; 01 and a second value were dropped
    without a word)."""
    src = tmp_path / "train.sh"
    src.write_text(TRAIN_SH.replace("--hidden-size 12288", "--hidden-size $H"))
    path = tmp_path / "s.json"
    save_session(load_any(EXAMPLES / "gpt3_175b.json"), path)
    out = tmp_path / "new.sh"
    var = [w for g in given for w in ("--var", g)]
    for cmd in (["export", "megatron-args", str(path), "--into", str(src), "--out", str(out)],
                ["import", "megatron-args", str(src), "--out", str(out)]):
        assert main(cmd + var) == 2
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and not out.exists()
    # the same value twice is one value
    assert main(["export", "megatron-args", str(path), "--into", str(src), "--out", str(out),
                 "--var", "H=12288", "--var", "H=12288"]) == 0
