"""Megatron-LM launch arguments in and out (core/io/megatron/, vtrain import/export)."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re

import pytest

from core.cli import main
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.io.megatron.arguments import ARGUMENTS, MegatronArgsError, field_exists
from core.io.megatron.from_session import export_arguments
from core.io.megatron.launch import parse_arguments, read_launch
from core.io.megatron.to_session import import_file, session_from_launch
from core.io.megatron.export import export_script
from core.io.megatron.rules import broken_rules
from core.io.session import load_session, save_session
from core.model.counts import num_parameters

# Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh, as users run it under Slurm
GPT3_175B = r"""#!/bin/bash
#SBATCH --job-name=gpt3-175b
#SBATCH --nodes=128
#SBATCH --ntasks-per-node=8

# Runs the "175B" parameter model
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
# Change for multinode config
NNODES=${SLURM_NNODES:-128}
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))

CHECKPOINT_PATH=$1 #<Specify path>
VOCAB_FILE=$3 #<Specify path to file>/gpt2-vocab.json
MERGE_FILE=$4 #<Specify path to file>/gpt2-merges.txt
DATA_PATH=$5 #<Specify path and file prefix>_text_document

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
    --master_addr $MASTER_ADDR
    --master_port 6000
)

GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --rampup-batch-size 16 16 5859375
    --train-iters 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.006
    --clip-grad 1.0
    --fp16
    --lr 6.0e-5
    --lr-decay-style cosine
    --min-lr 6.0e-6
    --lr-warmup-fraction .001
    --lr-decay-iters 430000
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
)

MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8
	--pipeline-model-parallel-size 16
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --vocab-file $VOCAB_FILE
    --merge-file $MERGE_FILE
    --split 949,50,1
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --save-interval 10000
    --eval-interval 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 10
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]} 2>&1 | tee log.txt
"""

# An older Megatron-LM style (string variables, torch.distributed.launch), GPT 1.3B on one node
GPT_1P3B = r"""#! /bin/bash
GPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES=1
NODE_RANK=0

DATA_PATH=my-gpt2_text_document
CHECKPOINT_PATH=checkpoints/gpt2_1.3b

DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT"

GPT_ARGS="
    --num-layers 24 \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --micro-batch-size 4 \
    --global-batch-size 512 \
    --lr 0.0002 \
    --train-samples 146484375 \
    --lr-decay-style cosine \
    --min-lr 1.0e-5 \
    --weight-decay 1e-2 \
    --clip-grad 1.0 \
    --lr-warmup-fraction .01 \
    --bf16
"

python -m torch.distributed.launch $DISTRIBUTED_ARGS \
       pretrain_gpt.py \
       --tensor-model-parallel-size 2 \
       --pipeline-model-parallel-size 2 \
       $GPT_ARGS \
       --vocab-file gpt2-vocab.json \
       --merge-file gpt2-merges.txt \
       --data-path $DATA_PATH \
       --save $CHECKPOINT_PATH \
       --load $CHECKPOINT_PATH \
       --log-interval 100 \
       --no-gradient-accumulation-fusion \
       --checkpoint-activations
"""

# Megatron-Core plan options on the 1.3B model (issue 10's fields)
MODERN_FLAGS = ["--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce",
                "--overlap-param-gather"]

# Llama 3 8B with Megatron-Core (srun, model-family flags of issue 11)
LLAMA3_8B = r"""#!/bin/bash
srun -N 4 --ntasks-per-node=8 python pretrain_gpt.py \
    --use-mcore-models \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 \
    --ffn-hidden-size 14336 --swiglu \
    --normalization RMSNorm --position-embedding-type rope \
    --untie-embeddings-and-output-weights \
    --seq-length 8192 --max-position-embeddings 8192 \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B \
    --vocab-size 128256 \
    --micro-batch-size 1 --global-batch-size 128 \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 1 \
    --context-parallel-size 2 \
    --bf16 --use-flash-attn
"""
LLAMA_FLAGS = ["--swiglu", "--group-query-attention", "--normalization",
               "--position-embedding-type", "--untie-embeddings-and-output-weights",
               "--context-parallel-size"]
LLAMA_TARGETS = {"--swiglu": "model.activation", "--group-query-attention": "model.num_query_groups",
                 "--normalization": "model.normalization",
                 "--position-embedding-type": "model.position_embedding",
                 "--untie-embeddings-and-output-weights": "model.tied_embeddings",
                 "--context-parallel-size": "plan.context_parallel"}


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


#: The example without its batch-size ramp-up: Megatron-LM's validate_args refuses the ramp-up
#: in an iteration-based run ("expected no batch-size rampup for iteration-based training"), so
#: the example as published does not start (test_the_examples_ramp_up_is_refused_as_megatron_does)
GPT3_175B_NO_RAMPUP = GPT3_175B.replace("    --rampup-batch-size 16 16 5859375\n", "")


def test_the_examples_ramp_up_is_refused_as_megatron_does(tmp_path):
    assert GPT3_175B_NO_RAMPUP != GPT3_175B
    path = _write(tmp_path, "train_gpt3_175b.sh", GPT3_175B)
    with pytest.raises(MegatronArgsError) as exc:
        import_file(path)
    assert ("rule iteration-based-no-rampup: \"expected no batch-size rampup for iteration-based "
            "training\"" in str(exc.value))
    assert "--train-iters 500000, --rampup-batch-size 16 16 5859375" in str(exc.value)
    # and it is a ramp-up, refused by name with it (not modelled: the iterations and their
    # time are those of the full batch)
    assert ("--rampup-batch-size 16 16 5859375: not modelled (the global batch ramps up"
            in str(exc.value))
    # a sample-based run may ramp the batch up in Megatron-LM; the simulation assumes the full
    # batch from the first step, so the ramp-up is refused by name (it was listed as ignored,
    # and the run's iterations and days counted at the full batch)
    one = _write(tmp_path, "gpt_1p3b.sh", GPT_1P3B.replace(
        "--train-samples", "--rampup-batch-size 32 32 1000000 --train-samples"))
    with pytest.raises(MegatronArgsError) as exc:
        import_file(one)
    assert str(exc.value) == (
        f"{one}: --rampup-batch-size 32 32 1000000: not modelled (the global batch ramps up "
        "from its first value over the first samples (rampup_batch_size: start, increment, "
        "samples): the per-iteration simulation and the iterations-to-train count assume "
        "--global-batch-size from the first step; drop it to plan the full-batch phase)")


def test_gpt3_175b_script(tmp_path):
    res = import_file(_write(tmp_path, "train_gpt3_175b.sh", GPT3_175B_NO_RAMPUP))
    m, pl, cl = res.session.model, res.session.plan, res.session.cluster
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size, m.seq_length,
            m.vocab_size) == (96, 12288, 96, None, 2048, 50257)
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel, pl.micro_batch_size,
            pl.global_batch_size) == (8, 16, 8, 1, 1536)  # 128 nodes x 8 = 1024 = 8*16*8
    assert (pl.schedule, pl.recompute, pl.precision) == ("1f1b", "full", "fp16")
    assert cl.gpus_per_node == 8 and res.launch.launcher == "torchrun"
    assert res.session.cost.training_tokens == 500000 * 1536 * 2048
    assert not res.ignored
    assert {"--lr", "--data-path", "--split", "--weight-decay",
            "--init-method-std"} <= set(res.neutral)
    assert "--save" not in res.neutral  # it decides that checkpoints are saved: used
    assert res.used["--save"] == "reliability.checkpoint_interval_iterations"
    assert res.used["--save-interval"] == "reliability.checkpoint_interval_iterations"
    assert res.used["--train-iters"] == "cost.training_tokens"
    # --attention-backend auto: Transformer Engine's fused or flash attention, timed as flash
    assert res.session.model.attention_kernel == "flash"
    assert res.notes == [("--vocab-file", "vocabulary 50,257 assumed: GPT-2 BPE, the tokenizer "
                          "of Megatron-LM's GPT examples that give only --vocab-file / "
                          "--merge-file; for another, add --vocab-size N to the launch or the "
                          "import"),
                         ("attention", "--attention-backend auto: Transformer Engine picks its "
                          "fused (cuDNN) or flash attention, timed as FlashAttention")]


def test_train_samples_less_than_one_batch_is_refused(tmp_path):
    """--train-samples under one global batch: Megatron-LM would run 0 iterations."""
    path = _write(tmp_path, "few.sh", GPT_1P3B.replace("--train-samples 146484375",
                                                       "--train-samples 500"))
    with pytest.raises(MegatronArgsError, match=r"few\.sh: --train-samples 500 is less than one "
                       r"global batch \(512 samples\): Megatron-LM runs train_samples // "
                       r"global_batch_size = 0 iterations"):
        import_file(path)


def test_gpt_1p3b_script_old_style(tmp_path):
    res = import_file(_write(tmp_path, "gpt_1p3b.sh", GPT_1P3B))
    m, pl = res.session.model, res.session.plan
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length) == (24, 2048, 16, 2048)
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel) == (2, 2, 2)
    assert (pl.micro_batch_size, pl.global_batch_size, pl.precision) == (4, 512, "bf16")
    # Megatron-LM runs train_samples // B = 286,102 iterations (update_train_iters); the
    # remaining 146,484,375 - 286,102 * 512 = 151 samples are not run
    assert res.session.cost.training_tokens == 286_102 * 512 * 2048
    assert any(flag == "--train-samples" and "the last 151 samples are not run" in text
               for flag, text in res.notes)
    # --no-gradient-accumulation-fusion: a kernel of its own adds each weight gradient
    assert pl.gradient_accumulation_fusion is False and not res.ignored
    assert pl.recompute == "full"  # --checkpoint-activations: Megatron-LM's old name
    # --recompute-activations is selective recomputation: mapped, or refused by name
    path = _write(tmp_path, "sel.sh", GPT_1P3B.replace("--checkpoint-activations",
                                                       "--recompute-activations"))
    if field_exists("plan.recompute", "selective"):
        assert import_file(path).session.plan.recompute == "selective"
    else:
        with pytest.raises(MegatronArgsError, match="--recompute-activations: not modelled yet "
                                                    r"\(plan.recompute 'selective'"):
            import_file(path)


def test_gpt3_175b_script_runs_through_the_cli(tmp_path, capsys):
    script = _write(tmp_path, "train.sh", GPT3_175B_NO_RAMPUP)
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(script), "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ignored"] == []
    assert [n["about"] for n in doc["notes"]] == ["--vocab-file", "attention"]
    assert doc["unknown"] == []
    assert doc["session"]["model"]["attention_kernel"] == "flash"
    s = load_session(out)
    assert s.plan.num_gpus == 1024
    assert main(["simulate", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_gpus"] == 1024
    # the summary names the GPU kind, and that it is the default when --gpu is not given
    assert main(["import", "megatron-args", str(script), "--out", str(out)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "on A100-SXM4-80GB (Megatron's arguments do not name the GPU" in line
    assert main(["import", "megatron-args", str(script), "--out", str(out), "--gpu",
                 "H100-SXM5-80GB"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "on H100-SXM5-80GB, from" in line and load_session(out).cluster.gpu == "H100-SXM5-80GB"


def test_modern_plan_flags_map_or_are_refused_by_name(tmp_path):
    text = GPT_1P3B.replace("    --bf16\n", "    --bf16 \\\n    " + " \\\n    ".join(MODERN_FLAGS) + "\n")
    path = _write(tmp_path, "modern.sh", text)
    targets = {f: ARGUMENTS[f].targets[0] for f in MODERN_FLAGS}
    if all(field_exists(t) for t in targets.values()):
        pl = import_file(path).session.plan
        assert pl.sequence_parallel and pl.zero_stage == 1
        assert pl.overlap_grad_reduce and pl.overlap_param_gather
    else:
        with pytest.raises(MegatronArgsError) as err:
            import_file(path)
        for flag, target in targets.items():
            assert (f"{flag}: not modelled yet ({target}" in str(err.value)) == (not field_exists(target))


def test_llama_flags_are_refused_by_name_never_simulated_as_gpt(tmp_path, capsys):
    path = _write(tmp_path, "llama3_8b.sh", LLAMA3_8B)
    absent = [f for f in LLAMA_FLAGS if not field_exists(LLAMA_TARGETS[f])]
    if not absent:
        pytest.skip("every Llama field is modelled")
    out = tmp_path / "llama.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vtrain: error: {path}: ") and "Traceback" not in err
    for flag in absent:
        assert f"{flag}: not modelled yet ({LLAMA_TARGETS[flag]}" in err, flag
    assert not out.exists()
    # one Llama flag alone is enough to refuse
    alone = _write(tmp_path, "one.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                   "--seq-length 128 --micro-batch-size 1 --vocab-size 1000 --swiglu")
    if not field_exists("model.activation"):
        with pytest.raises(MegatronArgsError, match="--swiglu: not modelled yet"):
            import_file(alone, num_gpus=1)
    # the defaults Megatron's GPT has are modelled: named explicitly they are accepted
    same = _write(tmp_path, "gpt.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                  "--seq-length 128 --micro-batch-size 1 --vocab-size 1000 --normalization LayerNorm "
                  "--position-embedding-type learned_absolute --context-parallel-size 1")
    assert import_file(same, num_gpus=2).session.plan.data_parallel == 2


def test_llama_launch_maps_to_the_model_family_fields(tmp_path):
    """Once the family fields exist (issue 11), the Llama 3 8B launch without context
    parallelism is read as Llama: SwiGLU, 8 query groups, RMSNorm, RoPE, untied, no biases."""
    text = LLAMA3_8B.replace("    --context-parallel-size 2 \\\n", "").replace(
        "--bf16 --use-flash-attn", "--bf16 --use-flash-attn --disable-bias-linear")
    targets = ["model.activation", "model.num_query_groups", "model.normalization",
               "model.position_embedding", "model.tied_embeddings", "model.add_bias_linear",
               "model.attention_kernel"]
    if not all(field_exists(t) for t in targets):
        pytest.skip("the model family fields are not in this version")
    m = import_file(_write(tmp_path, "llama.sh", text)).session.model
    assert (m.activation, m.num_query_groups, m.normalization, m.position_embedding) == (
        "swiglu", 8, "rmsnorm", "rope")
    assert (m.tied_embeddings, m.add_bias_linear, m.attention_kernel) == (False, False, "flash")
    assert (m.ffn_hidden_size, m.vocab_size, m.seq_length) == (14336, 128256, 8192)
    # Llama 3 8B has 8.03 B parameters (Meta's model card)
    assert num_parameters(m) == pytest.approx(8.03e9, rel=0.005)
    # SwiGLU without --ffn-hidden-size: Megatron-LM's default, 2/3 of 4h rounded down to 64
    no_ffn = _write(tmp_path, "swiglu.txt", "--num-layers 2 --hidden-size 4096 "
                    "--num-attention-heads 32 --seq-length 128 --micro-batch-size 1 "
                    "--vocab-size 1000 --swiglu")
    assert import_file(no_ffn, num_gpus=1).session.model.ffn_hidden_size == 10880  # 170 * 64


def test_plain_argument_list_with_equals_and_srun_counts(tmp_path):
    path = _write(tmp_path, "args.txt",
                  "--num-layers=4 --hidden-size=256 --num-attention-heads=8\n"
                  "--seq-length=512 --micro-batch-size=2 --global-batch-size=64\n"
                  "--tensor-model-parallel-size=2 --tokenizer-type NullTokenizer --vocab-size 999\n")
    res = import_file(path, num_gpus=8, gpus_per_node=4)
    s = res.session
    # megatron-core 0.19.2 null_tokenizer.py: NullTokenizer.vocab_size is --vocab-size itself
    # (eod = vocab_size - 1); 0.17.1 and earlier added one (the import read 1000)
    assert s.model.vocab_size == 999
    assert (s.plan.tensor_parallel, s.plan.data_parallel, s.cluster.gpus_per_node) == (2, 4, 4)
    assert s.plan.precision == "fp32" and s.plan.recompute == "none"
    launch = read_launch("srun -N4 --ntasks-per-node=8 python pretrain_gpt.py --num-layers 2", "x")
    assert (launch.nnodes, launch.nproc_per_node, launch.launcher) == (4, 8, "srun")
    launch = read_launch("#SBATCH --nodes 2\n#SBATCH --ntasks-per-node 4\nsrun python pretrain_gpt.py "
                         "--num-layers 2", "x")
    assert (launch.nnodes, launch.nproc_per_node) == (2, 4)
    # the global batch defaults to b*d as in Megatron-LM
    res = import_file(_write(tmp_path, "nob.txt", "--num-layers 2 --hidden-size 64 "
                             "--num-attention-heads 4 --seq-length 128 --micro-batch-size 3 "
                             "--vocab-size 100"), num_gpus=4)
    assert res.session.plan.global_batch_size == 12


@pytest.mark.parametrize("text, kw, needle", [
    ("--hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 --vocab-size 9",
     {"num_gpus": 1}, "missing --num-layers"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--vocab-size 9", {}, "the world size is unknown"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--vocab-size 9 --tensor-model-parallel-size 4", {"num_gpus": 6},
     "world size 6 is not divisible by t*p*cp = 4*1*1"),
    ("torchrun --nnodes $NNODES --nproc-per-node 8 pretrain_gpt.py --num-layers 2", {},
     "--nnodes $NNODES: the variable NNODES is not set in the file (or comes from a command "
     "vtrain does not run); give --var NNODES=VALUE"),
    ("torchrun --nnodes 1:4 --nproc-per-node 8 pretrain_gpt.py --num-layers 2", {},
     "an elastic range is not a plan"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size x "
     "--vocab-size 9", {"num_gpus": 1}, "--micro-batch-size 'x' must be a positive integer"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--tokenizer-type HuggingFaceTokenizer", {"num_gpus": 1}, "add --vocab-size N"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--vocab-size 9 --bf16 --fp16", {"num_gpus": 1}, "--bf16 and --fp16 exclude each other"),
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--vocab-size 9 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2",
     {"num_gpus": 1}, "--recompute-method uniform: not modelled yet"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--vocab-size 9 --make-vocab-size-divisible-by 0", {"num_gpus": 1},
     "--make-vocab-size-divisible-by 0 must be at least 1"),
    ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --micro-batch-size 1 "
     "--vocab-size 9 --make-vocab-size-divisible-by x", {"num_gpus": 1},
     "--make-vocab-size-divisible-by 'x' must be a positive integer"),
    ("echo hello", {}, "no Megatron-LM arguments found"),
])
def test_bad_launches_are_named(tmp_path, text, kw, needle):
    with pytest.raises(MegatronArgsError) as err:
        import_file(_write(tmp_path, "bad.sh", text), **kw)
    assert needle in str(err.value) and "bad.sh" in str(err.value)


def test_an_argument_file_with_one_word_per_line_reads_as_one_list(tmp_path):
    words = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16",
             "--seq-length", "1024", "--micro-batch-size", "1", "--global-batch-size", "8",
             "--vocab-size", "32000", "--bf16"]
    launch = read_launch("\n".join(words) + "\n", "a.txt")
    assert launch.arguments == words
    s = session_from_launch(launch, num_gpus=8).session
    assert (s.model.num_layers, s.model.hidden_size, s.plan.global_batch_size) == (4, 1024, 8)


def test_cli_errors_exit_2_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(tmp_path / "missing.sh"), "--out", str(out)]) == 2
    assert "cannot read" in capsys.readouterr().err and not out.exists()
    args = _write(tmp_path, "a.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                  "--seq-length 128 --micro-batch-size 1 --vocab-size 9")
    assert main(["import", "megatron-args", str(args), "--out", str(out), "--num-gpus", "0"]) == 2
    assert "--num-gpus 0 must be a positive integer" in capsys.readouterr().err
    # arguments Megatron-LM's start-up refuses: its rule named with the file
    args = _write(tmp_path, "b.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                  "--seq-length 128 --micro-batch-size 1 --global-batch-size 8 --vocab-size 9 "
                  "--tensor-model-parallel-size 2 --tp-comm-overlap")
    assert main(["import", "megatron-args", str(args), "--out", str(out), "--num-gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "b.txt" in err and "rule tp-comm-overlap-sequence-parallel" in err
    assert not out.exists()
    # a configuration rule the arguments break: named with the file and the argument
    args = _write(tmp_path, "c.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                  "--seq-length 127 --micro-batch-size 1 --global-batch-size 8 --vocab-size 9 "
                  "--tensor-model-parallel-size 2 --sequence-parallel")
    assert main(["import", "megatron-args", str(args), "--out", str(out), "--num-gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "c.txt: plan.sequence_parallel" in err and "(set by --sequence-parallel)" in err
    assert not out.exists()


#: Issue 11's fields: a session may use them while this version refuses them as "not modelled
#: yet" (their helpers land them one by one); the round trip maps them all the same.
_ISSUE11 = {"model.kv_channels", "model.num_experts", "model.moe_top_k", "model.moe_ffn_hidden_size",
            "model.num_shared_experts", "model.moe_layer_frequency", "model.moe_first_dense_layers",
            "plan.context_parallel", "plan.expert_parallel", "plan.expert_tensor_parallel",
            "plan.precision", "plan.fp8_recipe"}


_RECIPES = (None, "delayed", "mxfp8", "blockwise")


def _issue11_fields(rng, model, plan, recipe, first_dense: bool) -> None:
    """Set some of issue 11's fields to values a real launch has (seeded by ``rng``; FP8 with
    ``recipe``; an MoE model with first dense layers when ``first_dense``)."""
    t, d, a = plan.tensor_parallel, plan.data_parallel, model.num_attention_heads
    if rng.random() < 0.3:
        model.kv_channels = rng.choice([64, 128])
    if rng.random() < 0.5:
        ep = rng.choice([x for x in (1, 2, 4) if d % x == 0])
        model.num_experts = ep * rng.choice([4, 8, 16])
        model.moe_top_k = rng.choice([1, 2, min(8, model.num_experts)])
        model.moe_ffn_hidden_size = rng.choice([None, a * 32])
        model.num_shared_experts = rng.choice([0, 0, 1, 2])
        model.moe_layer_frequency = rng.choice([1, 1, 2])
        if model.num_layers > 2 and first_dense:  # first dense layers: a multiple of k
            model.moe_first_dense_layers = model.moe_layer_frequency
        plan.expert_parallel = ep
        plan.expert_tensor_parallel = rng.choice([None, None, 1, t])
        if t > 1:  # Megatron: expert with tensor parallelism needs sequence parallelism
            plan.sequence_parallel = True
    if rng.random() < 0.3 and model.seq_length % 4 == 0:
        plan.context_parallel = 2
        model.attention_kernel = "flash"  # Megatron-Core's ring attention runs in TE's
    if rng.random() < 0.3:
        plan.precision = "fp8"
        plan.fp8_recipe = recipe
        if plan.grad_reduce_dtype not in (None, "fp32"):
            plan.grad_reduce_dtype = "fp32"


def _random_sessions(n: int = 40):
    """Sessions over every plan and model field Megatron has an argument for (seeded)."""
    from core.plan.rules import validate
    rng = random.Random(14)
    out = []
    while len(out) < n:  # valid sessions only (the configuration rules of this version)
        t, p, d = rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 4, 8]), rng.choice([1, 2, 3, 16])
        a = t * rng.choice([1, 2, 4])
        L = p * rng.choice([1, 2, 3, 4])
        b = rng.choice([1, 2, 4])
        model = ModelConfig(f"m{len(out)}", L, a * 64, a, rng.choice([None, a * 64 * 3]),
                            rng.choice([512, 2048, 4096]), rng.choice([50257, 32000, 51200]))
        plan = ParallelPlan(t, p, d, b, d * b * rng.choice([1, 4, 8]), "1f1b",
                            rng.choice(["none", "full"]), rng.choice(["bf16", "fp16", "fp32"]))
        extra = {"sequence_parallel": [False, True], "zero_stage": [0, 1, 3],
                 "overlap_grad_reduce": [False, True], "overlap_param_gather": [False, True],
                 "grad_reduce_dtype": [None, "fp32", "bf16"]}
        for name, values in extra.items():
            if field_exists(f"plan.{name}"):
                setattr(plan, name, rng.choice(values))
        if field_exists("plan.recompute", "selective") and rng.random() < 0.3:
            plan.recompute = "selective"
        family = {"activation": ["gelu", "swiglu"], "normalization": ["layernorm", "rmsnorm"],
                  "position_embedding": ["learned", "rope"], "tied_embeddings": [True, False],
                  "add_bias_linear": [True, False], "add_qkv_bias": [False, True],
                  "qk_layernorm": [False, True], "attention_kernel": ["unfused", "flash"]}
        for name, values in family.items():
            if field_exists(f"model.{name}") and rng.random() < 0.4:
                setattr(model, name, rng.choice(values[1:]))
        if field_exists("model.activation") and model.activation == "swiglu":
            model.ffn_hidden_size = model.ffn_hidden_size or a * 64 * 3  # explicit, as exported
        if field_exists("model.num_query_groups") and a % 2 == 0 and rng.random() < 0.4:
            model.num_query_groups = a // 2
        if field_exists("plan.first_stage_layers") and p > 2 and rng.random() < 0.3:
            plan.first_stage_layers = plan.last_stage_layers = max(1, L // p - 1)
        if field_exists("plan.recompute_num_layers") and plan.recompute == "full" and L // p > 1:
            plan.recompute_num_layers = rng.choice([None, 1])
        if field_exists("plan.virtual_pipeline_stages") and p > 1 and L % (2 * p) == 0 and \
                field_exists("plan.schedule", "interleaved") and rng.random() < 0.5:
            plan.schedule, plan.virtual_pipeline_stages = "interleaved", 2
            plan.global_batch_size = d * b * p * rng.choice([1, 2])  # m a multiple of p (Megatron)
        if plan.recompute_num_layers == 1 and L // (p * (plan.virtual_pipeline_stages or 1)) == 1:
            plan.recompute_num_layers = None  # one layer per chunk: every layer (as imported)
        taken = [s.plan.fp8_recipe for s in out if s.plan.precision == "fp8"]
        moe = [s.model.moe_first_dense_layers > 0 for s in out if s.model.num_experts]
        # each recipe in turn; a third of the MoE models with first dense layers
        _issue11_fields(rng, model, plan, min(_RECIPES, key=taken.count),
                        3 * sum(moe) <= len(moe))
        world = plan.tensor_parallel * plan.pipeline_parallel * plan.context_parallel * plan.data_parallel
        gpn = math.gcd(world, 8)  # torchrun runs whole nodes
        tokens = float(rng.choice([1000, 3000]) * model.seq_length * 1000)
        gpu = ("A100-SXM4-80GB" if plan.precision != "fp8" else  # FP8 tensor cores; MXFP8 on Blackwell
               "B200-180GB" if plan.fp8_recipe == "mxfp8" else "H100-SXM5-80GB")
        session = Session(model, plan, ClusterConfig(gpu, gpn), CostConfig(2.0, tokens))
        if all(e.field in _ISSUE11 and "not modelled yet" in e.message for e in validate(session)) \
                and not broken_rules(export_arguments(session)):  # plans Megatron-LM starts
            out.append(session)
    return out


def test_round_trip_sessions_use_issue_11_fields():
    """The round trip below covers the new fields (it would pass vacuously without them)."""
    sessions = _random_sessions()
    assert sum(s.model.num_experts is not None for s in sessions) >= 10
    assert sum(s.model.moe_first_dense_layers > 0 for s in sessions) >= 2
    assert sum(s.model.num_shared_experts > 0 for s in sessions) >= 3
    assert sum(s.model.kv_channels is not None for s in sessions) >= 5
    assert sum(s.plan.context_parallel > 1 for s in sessions) >= 5
    assert sum(s.plan.expert_tensor_parallel is not None for s in sessions) >= 3
    assert {s.plan.fp8_recipe for s in sessions if s.plan.precision == "fp8"} >= {
        None, "delayed", "mxfp8", "blockwise"}


@pytest.mark.parametrize("session", _random_sessions(), ids=lambda s: s.model.name)
def test_round_trip_session_arguments_session(tmp_path, session, capsys):
    """session -> torchrun script -> session is exact for every field Megatron has, but
    sequence parallelism at t=1, which Megatron-LM turns off (validate_args)."""
    script = _write(tmp_path, "run.sh", export_script(session))
    back = import_file(script, name=session.model.name).session
    assert back.model == session.model
    ran = session.plan
    if ran.tensor_parallel == 1 and ran.sequence_parallel:
        ran = dataclasses.replace(ran, sequence_parallel=False)
    assert back.plan == ran
    assert back.cluster.gpus_per_node == session.cluster.gpus_per_node
    # the budget of the whole iterations the launch runs (--train-samples a multiple of B:
    # the ceiling, as simulate counts them), the session's own when it is whole iterations
    per_iteration = session.plan.global_batch_size * session.model.seq_length
    n = math.ceil(session.cost.training_tokens / per_iteration)
    assert back.cost.training_tokens == n * per_iteration >= session.cost.training_tokens
    # and through the CLI, from a session file
    path = tmp_path / "s.json"
    save_session(session, path)
    from core.plan.rules import validate
    refused = validate(session)  # issue 11's fields this version does not model yet
    rc = main(["export", "megatron-args", str(path), "--out", str(tmp_path / "cli.sh")])
    if refused:  # the CLI checks the session first and names what it refuses
        assert rc == 2 and not (tmp_path / "cli.sh").exists()
        assert all(f"{e.field}: " in capsys.readouterr().err for e in refused[:1])
        return
    assert rc == 0
    assert (tmp_path / "cli.sh").read_text() == script.read_text()


def test_export_refuses_what_megatron_cannot_run():
    s = Session(ModelConfig("x", 4, 256, 4, None, 128, 1000),
                ParallelPlan(1, 2, 1, 1, 8, "gpipe", "none", "bf16"), ClusterConfig(), CostConfig())
    with pytest.raises(MegatronArgsError, match="plan.schedule 'gpipe': Megatron-LM's arguments have"):
        export_arguments(s)
    s.plan.schedule = "1f1b"
    args = export_arguments(s)
    # NullTokenizer --vocab-size N has N tokens (megatron-core 0.19.2 null_tokenizer.py)
    assert args[args.index("--vocab-size") + 1] == "1000" and "NullTokenizer" in args
    assert parse_arguments(args)["--pipeline-model-parallel-size"] == ["2"]


def test_every_table_target_names_a_section_field():
    """Targets are fixed names (issues 10 and 11): well formed, in a known section."""
    for flag, arg in ARGUMENTS.items():
        assert flag.startswith("--") and arg.help
        for target in arg.targets:
            section, name = target.split(".")
            assert section in ("model", "plan", "cluster", "cost", "reliability") and \
                name.isidentifier()
    launch = read_launch("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8 "
                         "--micro-batch-size 1 --vocab-size 5", "x")
    assert session_from_launch(launch, num_gpus=1).session.model.vocab_size == 5


def test_checkpoint_interval_and_async_save_are_read_and_written(tmp_path):
    """--save-interval (or --persistent-save-interval) and --async-save are the session's
    reliability.checkpoint_interval_iterations and async_save (docs/goodput.md): they were
    listed as not used and the run's goodput taken at Daly's interval with synchronous saves."""
    assert "    --save-interval 10000\n" in GPT3_175B_NO_RAMPUP
    text = GPT3_175B_NO_RAMPUP.replace("--save-interval 10000", "--save-interval 500\n    --async-save")
    res = import_file(_write(tmp_path, "ckpt.sh", text))
    rel = res.session.reliability
    assert (rel.checkpoint_interval_iterations, rel.async_save) == (500, True)
    assert "--save-interval" not in res.neutral and "--async-save" not in res.neutral
    args = export_arguments(res.session)
    assert args[args.index("--save-interval") + 1] == "500" and "--async-save" in args
    # the export leaves --save to the user (NOT_IN_THE_PLAN); with it the interval reads back
    script = export_script(res.session)
    assert "--save " not in script and "--save-interval 500" in script
    back = import_file(_write(tmp_path, "back.sh", script.replace(
        "--save-interval 500", "--save /ckpt --save-interval 500"))).session
    assert back.reliability == rel
    other = GPT3_175B_NO_RAMPUP.replace("--save-interval 10000", "--save-interval 200\n"
                                        "    --persistent-save-interval 300")  # the last wins
    rel = import_file(_write(tmp_path, "alias.sh", other)).session.reliability
    assert (rel.checkpoint_interval_iterations, rel.async_save) == (300, False)
    # --save without --save-interval: one checkpoint at the end (test_save_without_an_interval_
    # saves_only_at_the_end); a session without the section (Daly's optimum) writes neither
    args = export_arguments(Session(res.session.model, res.session.plan, res.session.cluster,
                                    res.session.cost))
    assert "--save-interval" not in args and "--async-save" not in args
    # 0: Megatron-LM saves no periodic checkpoint, only one at the end (it imported before):
    # an interval beyond any run, one less than 2^40 (no checkpoint at all, without --save)
    never = import_file(_write(tmp_path, "never.sh", GPT3_175B_NO_RAMPUP.replace(
        "--save-interval 10000", "--save-interval 0")))
    assert never.session.reliability.checkpoint_interval_iterations == 2 ** 40 - 1
    # an exported no-checkpoint session writes --save-interval 2^40; with --save added it saves
    # at the end, as 0 does (2^40 itself is no save at all)
    huge = import_file(_write(tmp_path, "huge.sh", GPT3_175B_NO_RAMPUP.replace(
        "--save-interval 10000", f"--save-interval {2 ** 40}")))
    assert huge.session.reliability.checkpoint_interval_iterations == 2 ** 40 - 1
    assert "--save-interval" in dict(never.notes)


#: The note of a launch with --save and no --save-interval (Megatron-LM saves at the end only).
SAVE_AT_THE_END = ("without --save-interval: no periodic checkpoint, one at the end of the run "
                   "(training.py saves periodically only if args.save and args.save_interval; "
                   "save_interval defaults to None) (reliability.checkpoint_interval_iterations "
                   "1,099,511,627,775, beyond any run)")

#: The note of Megatron-LM's start-up rule that such a launch breaks (left on import).
SAVE_INTERVAL_RULE = (
    "Megatron-LM (d98e8a6) refuses it (\"assert args.save_interval is not None\", "
    "megatron/training/arguments.py validate_args); imported as the earlier versions that run "
    "it do, and vtrain export megatron-args writes no launch that breaks it")


def test_save_without_an_interval_saves_only_at_the_end(tmp_path, capsys):
    """Megatron-LM's training.py saves periodically only ``if args.save and args.save_interval
    and iteration % args.save_interval == 0`` (save_interval defaults to None) and once at the
    end ``if args.save``: a launch with --save and no --save-interval saves at the end only,
    the value --save-interval 0 imports as (2^40 - 1, beyond any run), noted naming the rule.
    It imported as Daly's optimum interval, a guess no Megatron-LM run makes. This commit's
    validate_args asserts an interval above 0 with --save (rules save-interval-given and
    save-interval-positive; the Megatron-Core 0.17.1-0.19.0 wheels' megatron/training/
    arguments.py): noted, imported as training.py runs it. The export writes --save-interval
    2^40 - 1, which Megatron-LM accepts, so the launch with --save added reads back the same,
    and the goodput report says one save at the end, as for --save-interval 0."""
    plain = GPT3_175B_NO_RAMPUP.replace("    --save-interval 10000\n", "")
    res = import_file(_write(tmp_path, "plain.sh", plain))
    rel = res.session.reliability
    assert (rel.checkpoint_interval_iterations, rel.async_save) == (2 ** 40 - 1, False)
    assert dict(res.notes)["--save"] == SAVE_AT_THE_END
    assert dict(res.notes)["rule save-interval-given"] == SAVE_INTERVAL_RULE
    zero_res = import_file(_write(tmp_path, "zero.sh", GPT3_175B_NO_RAMPUP.replace(
        "--save-interval 10000", "--save-interval 0")))
    zero = zero_res.session
    assert zero.reliability == rel
    assert dict(zero_res.notes)["rule save-interval-positive"].startswith(
        "Megatron-LM (d98e8a6) refuses it (\"assert args.save_interval > 0\"")
    # export: an interval no run reaches (Megatron-LM asserts one above 0 with --save)
    args = export_arguments(res.session)
    assert args[args.index("--save-interval") + 1] == "1099511627775" and "--save" not in args
    assert not broken_rules(args + ["--save", "/ckpt"])
    script = export_script(res.session)
    assert "Daly" not in script  # the interval is the session's own, not the optimum
    back = import_file(_write(tmp_path, "back.sh", script.replace(
        "    --train-samples", "    --save /ckpt \\\n    --train-samples"))).session
    assert back.reliability == rel
    # with async saves the round trip keeps both fields
    both = import_file(_write(tmp_path, "async.sh", plain.replace(
        "--save $CHECKPOINT_PATH", "--save $CHECKPOINT_PATH\n    --async-save"))).session
    assert (both.reliability.checkpoint_interval_iterations, both.reliability.async_save) == (
        2 ** 40 - 1, True)
    again = import_file(_write(tmp_path, "async_back.sh", export_script(both).replace(
        "    --train-samples", "    --save /ckpt \\\n    --train-samples"))).session
    assert again.reliability == both.reliability
    # a Daly session (no interval in the session) says in the script that no argument gives it
    daly = Session(res.session.model, res.session.plan, res.session.cluster, res.session.cost)
    text = export_script(daly)
    assert "# checkpoint interval: the session's is Daly's optimum, which no argument gives" in text
    # the goodput report of a short run: one save at the end, as --save-interval 0 gives
    # (GPT-3 175B's 500,000 iterations without a periodic save would never finish, refused)
    tiny = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
            "--micro-batch-size 1 --vocab-size 128 --train-iters 100 --save /c")
    lines = {}
    for name, extra in (("plain", ""), ("zero", " --save-interval 0")):
        launch, path = _write(tmp_path, f"{name}.txt", tiny + extra), tmp_path / f"{name}.json"
        assert main(["import", "megatron-args", str(launch), "--num-gpus", "1", "--out",
                     str(path)]) == 0
        capsys.readouterr()
        assert load_session(path).reliability.checkpoint_interval_iterations == 2 ** 40 - 1
        assert main(["simulate", str(path)]) == 0
        out = capsys.readouterr().out
        (lines[name],) = [" ".join(ln.split()) for ln in out.splitlines()
                          if "Checkpoint interval" in ln]
    assert lines["plain"] == lines["zero"]
    assert lines["plain"].endswith("given); 1 save")
    # GPT-3 175B's 500,000 iterations with one save at the end never finish under failures:
    # refused, saying how to give an interval
    big = tmp_path / "gpt3.json"
    save_session(res.session, big)
    assert main(["simulate", str(big)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("the run would never finish (e^74 attempts per segment); reliability.checkpoint_"
            "interval_iterations 2^40 - 1 saves only at the end (Megatron-LM's --save without "
            "--save-interval, or with 0): give an interval (--save-interval N), or a smaller "
            "interval") in err


def test_without_save_megatron_saves_no_checkpoint(tmp_path):
    """Megatron-LM saves only with --save (training.py: ``if args.save and args.save_interval
    and iteration % args.save_interval == 0``, and at the end ``if args.save``): a launch
    without it runs with no checkpoint, whatever its --save-interval and --async-save say
    (they were read as a checkpoint every 10,000 iterations)."""
    assert "    --save $CHECKPOINT_PATH\n" in GPT3_175B_NO_RAMPUP
    text = GPT3_175B_NO_RAMPUP.replace("    --save $CHECKPOINT_PATH\n", "").replace(
        "--save-interval 10000", "--save-interval 10000\n    --async-save")
    res = import_file(_write(tmp_path, "nosave.sh", text))
    rel = res.session.reliability
    assert (rel.checkpoint_interval_iterations, rel.async_save) == (2 ** 40, False)
    assert dict(res.notes)["--save"] == (
        "not given: Megatron-LM saves no checkpoint (training.py saves only if args.save); a "
        "failure restarts the run from its start (reliability.checkpoint_interval_iterations "
        "1,099,511,627,776, beyond any run)")
    assert res.ignored["--save-interval"] == ("10000: no effect without --save (no checkpoint "
                                              "is saved)")
    assert res.ignored["--async-save"] == "no effect without --save (no checkpoint is saved)"
    # --save given empty is Megatron-LM's falsy args.save too; a bad interval is still refused
    # (--save= : the script's unquoted ${ARRAY[@]} drops an empty '' word, as bash does,
    # leaving --save without its value, which Megatron-LM's argparse refuses)
    empty = import_file(_write(tmp_path, "empty.sh", text.replace(
        "--save-interval 10000", "--save= --save-interval 10000")))
    assert empty.session.reliability.checkpoint_interval_iterations == 2 ** 40
    with pytest.raises(MegatronArgsError, match="--save-interval -1 must be at least 0"):
        import_file(_write(tmp_path, "bad.sh", text.replace("--save-interval 10000",
                                                            "--save-interval -1")))
    # with --save the interval is the launch's
    assert import_file(_write(tmp_path, "save.sh", text.replace(
        "--save-interval 10000", "--save /c --save-interval 10000"))
    ).session.reliability.checkpoint_interval_iterations == 10000


def test_docs_list_every_argument_of_the_table():
    from tests.conftest import ROOT
    doc = (ROOT / "docs" / "megatron_args.md").read_text()
    for flag in ARGUMENTS:
        assert f"| `{flag}` |" in doc, flag


# --------------------------------------------------------------------------- issue 11's arguments

# Mixtral 8x7B with Megatron-Core (examples/mixtral): 8 experts top-2, ep 8, etp 1, FP8
MIXTRAL_LAUNCH = r"""#!/bin/bash
torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \
    --group-query-attention --num-query-groups 8 --kv-channels 128 \
    --swiglu --normalization RMSNorm --position-embedding-type rope \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --seq-length 4096 --max-position-embeddings 32768 \
    --tokenizer-type NullTokenizer --vocab-size 32000 \
    --num-experts 8 --moe-router-topk 2 --moe-router-load-balancing-type aux_loss \
    --moe-aux-loss-coeff 1e-2 --moe-grouped-gemm --moe-token-dispatcher-type alltoall \
    --micro-batch-size 1 --global-batch-size 256 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 \
    --expert-model-parallel-size 8 --expert-tensor-parallel-size 1 \
    --context-parallel-size 2 \
    --use-distributed-optimizer --sequence-parallel \
    --bf16 --fp8-format hybrid --fp8-recipe tensorwise \
    --recompute-granularity selective
"""


def test_mixtral_megatron_core_launch(tmp_path):
    res = import_file(_write(tmp_path, "mixtral.sh", MIXTRAL_LAUNCH))
    m, pl = res.session.model, res.session.plan
    assert (m.num_experts, m.moe_top_k, m.moe_ffn_hidden_size, m.num_shared_experts) == (
        8, 2, None, 0)  # experts --ffn-hidden-size wide
    assert (m.moe_layer_frequency, m.moe_first_dense_layers, m.kv_channels) == (1, 0, 128)
    assert (pl.expert_parallel, pl.expert_tensor_parallel, pl.context_parallel) == (8, 1, 2)
    assert (pl.tensor_parallel, pl.pipeline_parallel, pl.data_parallel) == (1, 4, 8)  # 64/(1*4*2)
    assert (pl.precision, pl.fp8_recipe) == ("fp8", None)  # tensorwise: the empty recipe
    # the dispatcher is plan.moe_token_dispatcher_type; the load-balancing loss's kind and
    # weight act on the router's small scores
    assert res.session.plan.moe_token_dispatcher_type == "alltoall"
    # --moe-grouped-gemm is read, not ignored: the experts are timed as the grouped GEMMs it
    # runs; without it each rank runs its experts one after another (SequentialMLP, not
    # modelled): refused, unless each rank holds one expert (ep = E: the same work)
    assert "--moe-grouped-gemm" not in dict(res.ignored)
    sequential = MIXTRAL_LAUNCH.replace("--moe-grouped-gemm ", "")
    one = import_file(_write(tmp_path, "mixtral_one.sh", sequential)).session.model
    assert (one.num_experts, one.hidden_size, one.num_layers) == (8, 4096, 32)
    with pytest.raises(MegatronArgsError, match="without --moe-grouped-gemm Megatron-Core runs "
                                                "each rank's 4 experts one after another"):
        import_file(_write(tmp_path, "four.sh", sequential.replace(
            "--expert-model-parallel-size 8", "--expert-model-parallel-size 2")))
    assert "--moe-token-dispatcher-type" not in dict(res.ignored)
    assert {"--moe-router-load-balancing-type", "--moe-aux-loss-coeff"} <= set(res.neutral)
    # Megatron's default recipe is delayed scaling; its default top-k 2
    text = MIXTRAL_LAUNCH.replace(" --fp8-recipe tensorwise", "").replace(" --moe-router-topk 2", "")
    res = import_file(_write(tmp_path, "defaults.sh", text))
    assert (res.session.plan.fp8_recipe, res.session.model.moe_top_k) == ("delayed", 2)


@pytest.mark.parametrize("freq,fields", [
    ("2", (0, 2)),                                  # layers 0, 2, 4 ...
    ('"([0]*3+[1]*29)"', (3, 1)),                   # DeepSeek's first three layers dense
    ("[1,0]*16", (0, 2)),
    ("[0]*2+[1,0]*15", (2, 2)),
    ("'([0]*1+[1]*31)'", (1, 1)),                   # quoted in the script
])
def test_moe_layer_freq_forms(tmp_path, freq, fields):
    text = MIXTRAL_LAUNCH.replace("--num-experts 8", f"--num-experts 8 --moe-layer-freq {freq}")
    m = import_file(_write(tmp_path, "freq.sh", text)).session.model
    assert (m.moe_first_dense_layers, m.moe_layer_frequency) == fields


@pytest.mark.parametrize("freq,needle", [
    ("[0,1]*16", "the pattern [0,1]*16 is not modelled"),        # MoE on odd layers
    ("([0]*3+[1]*28+[0])", "is not modelled"),                   # a dense last layer
    ("[1]*31", "has 31 entries for 32 layers"),
    ("[2]*32", "expected an integer or a list pattern of 0 and 1"),
    ("[0]*10**9", "expected an integer or a list pattern"),      # ** is not list arithmetic
    ("[1]*100000000", "expected an integer or a list pattern"),  # longer than any model
    ("__import__('os').getcwd()+[1]", "expected an integer or a list pattern"),
    ("x", "--moe-layer-freq 'x' must be a positive integer"),
])
def test_moe_layer_freq_refusals(tmp_path, freq, needle):
    text = MIXTRAL_LAUNCH.replace("--num-experts 8", f"--num-experts 8 --moe-layer-freq '{freq}'")
    with pytest.raises(MegatronArgsError) as err:
        import_file(_write(tmp_path, "bad.sh", text))
    assert needle in str(err.value) and "bad.sh" in str(err.value)


@pytest.mark.parametrize("change,needle", [
    (("--num-experts 8", "--num-experts 8 --moe-ffn-hidden-size 1408 "
      "--moe-shared-expert-intermediate-size 5000"),
     "--moe-shared-expert-intermediate-size: not modelled (5000 is not a multiple"),
    (("--kv-channels 128", "--kv-channels 128 --multi-latent-attention"),
     "--multi-latent-attention needs --kv-lora-rank"),
    (("--bf16 --fp8-format", "--fp16 --fp8-format"), "--fp8-format: with --fp16 is not modelled"),
    (("--bf16 --fp8-format", "--fp8-format"), "--fp8-format: without --bf16 (fp32 weights) is not "
                                              "modelled yet"),
    (("--fp8-format hybrid", "--fp8-format e5m2"),
     "--fp8-format 'e5m2': invalid choice (choose from e4m3, hybrid): Megatron-LM's parser "
     "refuses it"),
    (("--fp8-recipe tensorwise", "--fp8-recipe per-row"), "--fp8-recipe 'per-row': invalid "
     "choice (choose from tensorwise, delayed, mxfp8, blockwise, custom)"),
    (("--fp8-recipe tensorwise", "--fp8-recipe custom"), "--fp8-recipe: not modelled yet"),
])
def test_issue11_arguments_refused_by_name(tmp_path, change, needle):
    with pytest.raises(MegatronArgsError) as err:
        import_file(_write(tmp_path, "bad.sh", MIXTRAL_LAUNCH.replace(*change)))
    assert needle in str(err.value)


def test_shared_experts_and_moe_arguments_without_experts(tmp_path):
    text = MIXTRAL_LAUNCH.replace("--num-experts 8", "--num-experts 8 --moe-ffn-hidden-size 1408 "
                                  "--moe-shared-expert-intermediate-size 5632")
    m = import_file(_write(tmp_path, "shared.sh", text)).session.model
    assert (m.moe_ffn_hidden_size, m.num_shared_experts) == (1408, 4)  # Qwen1.5-MoE's 4 x 1408
    # without experts, no expert parallelism either (Megatron-LM refuses ep > 1 without them)
    dense = text.replace("--num-experts 8 ", "").replace(" --fp8-recipe tensorwise", "").replace(
        "--fp8-format hybrid", "--fp8-recipe mxfp8").replace("--expert-model-parallel-size 8 ", "")
    res = import_file(_write(tmp_path, "dense.sh", dense))
    assert res.session.model.num_experts is None and res.session.plan.precision == "bf16"
    ignored = dict(res.ignored)
    for flag in ("--moe-router-topk", "--moe-ffn-hidden-size",
                 "--moe-shared-expert-intermediate-size"):
        assert ignored[flag] == "without --num-experts it has no effect"
    assert ignored["--fp8-recipe"] == "without --fp8-format it has no effect"


def test_export_of_issue11_fields():
    from dataclasses import replace
    s = Session(ModelConfig("moe", 8, 512, 8, 1024, 256, 1000, num_experts=16, moe_top_k=4,
                            moe_ffn_hidden_size=256, num_shared_experts=2, moe_layer_frequency=2,
                            moe_first_dense_layers=2, kv_channels=128),
                ParallelPlan(2, 2, 4, 1, 16, "1f1b", "none", "fp8", expert_parallel=4,
                             expert_tensor_parallel=1, context_parallel=2, fp8_recipe="mxfp8",
                             sequence_parallel=True),  # Megatron: ep and t need it
                ClusterConfig(), CostConfig())
    args = parse_arguments(export_arguments(s))
    assert args["--moe-shared-expert-intermediate-size"] == ["512"]  # 2 x 256
    assert args["--moe-layer-freq"] == ["[0,0,1,0,1,0,1,0]"]
    assert args["--kv-channels"] == ["128"] and args["--moe-router-topk"] == ["4"]
    assert args["--fp8-format"] == ["hybrid"] and args["--fp8-recipe"] == ["mxfp8"]
    assert args["--expert-model-parallel-size"] == ["4"]
    assert args["--expert-tensor-parallel-size"] == ["1"]
    assert args["--context-parallel-size"] == ["2"]
    script = export_script(s)
    assert "torchrun --nnodes 4 --nproc-per-node 8" in script  # 2*2*2*4 = 32 GPUs
    s.model.moe_layer_frequency = 1
    assert parse_arguments(export_arguments(s))["--moe-layer-freq"] == ["([0]*2+[1]*6)"]
    s.plan.fp8_recipe = None
    assert parse_arguments(export_arguments(s))["--fp8-recipe"] == ["tensorwise"]
    mla = parse_arguments(export_arguments(replace(s, model=replace(
        s.model, multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512))))
    assert "--multi-latent-attention" in mla and mla["--q-lora-rank"] == ["1536"]
    assert (mla["--kv-lora-rank"], mla["--qk-head-dim"], mla["--qk-pos-emb-head-dim"],
            mla["--v-head-dim"]) == (["512"], ["128"], ["64"], ["128"])


# --------------------------------------------------------------------------- unknown arguments

from core.io.megatron.arguments import (KNOWN_ARGUMENTS, NEUTRAL_ARGUMENTS, TIMING_ARGUMENTS,
                                        field_origin, unknown_arguments)  # noqa: E402

# DeepSeek-V3 with Megatron-Core (Megatron-MoE-ModelZoo style), no attention flag
DSV3_LAUNCH = r"""torchrun --nproc_per_node 8 --nnodes 128 pretrain_gpt.py \
 --num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 \
 --seq-length 4096 --max-position-embeddings 4096 --vocab-size 129280 --tokenizer-type NullTokenizer \
 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu --untie-embeddings-and-output-weights --disable-bias-linear \
 --position-embedding-type rope --rotary-base 10000 --rotary-scaling-factor 40 --mscale 1.0 --mscale-all-dim 1.0 \
 --multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --qk-layernorm \
 --num-experts 256 --moe-layer-freq "([0]*3+[1]*58)" --moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 \
 --moe-router-topk 8 --moe-router-topk-scaling-factor 2.5 --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-3 \
 --moe-router-num-groups 8 --moe-router-group-topk 4 --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4 \
 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-router-dtype fp32 --moe-permute-fusion \
 --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1 \
 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 16 --expert-model-parallel-size 64 \
 --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 2 \
 --micro-batch-size 1 --global-batch-size 15360 --train-iters 1000 \
 --bf16 --fp8-format e4m3 --fp8-recipe blockwise \
 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
 --lr 2.2e-4 --data-path /d --save /c
"""

# Llama 3 70B (Megatron-LM examples/llama style) with a few typing errors
LLAMA70_TYPOS = r"""#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \
    --use-mcore-models --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 \
    --num-attention-heads 64 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 --position-embedding-type rope \
    --rotary-base 500000 --use-rope-scaling --normalization RMSNorm --swiglu \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-70B \
    --vocab-size 128256 --micro-batch-size 1 --global-batch-size 256 --train-iters 100000 \
    --bf16 --tensor-model-paralel-size 4 --recompute-granularty selective \
    --pipeline-model-parallel-size 8 --num-layers-per-virtual-pipline-stage 2 \
    --sequence-parallel --use-distributed-optimizer --lr 1.5e-4 --data-path /d
"""


def test_misspelled_arguments_are_refused_naming_the_file_and_a_close_match(tmp_path, capsys):
    """Megatron-LM's argparse stops on an argument it does not define: so does the import,
    naming each one with difflib's closest known name (never t=1 for a misspelled t=4)."""
    path = _write(tmp_path, "typo3.sh", LLAMA70_TYPOS)
    with pytest.raises(MegatronArgsError) as err:
        import_file(path)
    assert str(err.value) == (
        f"{path}: --tensor-model-paralel-size is not a Megatron-LM argument (did you mean "
        "--tensor-model-parallel-size?); --recompute-granularty is not a Megatron-LM argument "
        "(did you mean --recompute-granularity?); --num-layers-per-virtual-pipline-stage is not "
        "a Megatron-LM argument (did you mean --num-layers-per-virtual-pipeline-stage?) "
        "(Megatron-LM's argparse stops on an argument it does not define; give --allow-unknown "
        "to list such arguments as ignored)")
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vtrain: error: {path}: --tensor-model-paralel-size is not")
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists()
    # the same launch spelled right: t=4, selective recomputation, interleaved (v = 80/(8*2))
    fixed = LLAMA70_TYPOS.replace("paralel", "parallel").replace("granularty", "granularity") \
        .replace("pipline", "pipeline")
    pl = import_file(_write(tmp_path, "fixed.sh", fixed)).session.plan
    assert (pl.tensor_parallel, pl.recompute, pl.schedule, pl.virtual_pipeline_stages) == (
        4, "selective", "interleaved", 5)


@pytest.mark.parametrize("flag, hint", [
    ("--frobnicate", ""),                                          # nothing close
    ("--sequence-paralel", "did you mean --sequence-parallel?"),
    ("--tensor_model_parallel_size", "did you mean --tensor-model-parallel-size?"),
    ("--no-sequence-parallel", "did you mean --sequence-parallel?"),  # Megatron has no --no- form
    ("--use-flash-attention", "did you mean --use-flash-attn?"),
    ("--batch-size", "no longer valid in Megatron-LM: use --micro-batch-size"),
    ("--model-parallel-size", "no longer valid in Megatron-LM: use --tensor-model-parallel-size"),
    # NeMo's and Megatron-Bridge's name (difflib offered --pipeline-model-parallel-size)
    ("--virtual-pipeline-model-parallel-size", "a NeMo / Megatron-Bridge config name: "
                                               "Megatron-LM's option is "
                                               "--num-virtual-stages-per-pipeline-rank"),
])
def test_unknown_argument_hints(flag, hint):
    assert unknown_arguments([flag, "--num-layers", "--lr"]) == [(flag, hint)]


def test_allow_unknown_lists_them_as_ignored(tmp_path, capsys):
    path = _write(tmp_path, "u.sh", LLAMA70_TYPOS.replace(
        "--tensor-model-paralel-size 4 --recompute-granularty selective",
        "--tensor-model-parallel-size 4 --frobnicate 3 --sequence-paralel").replace(
        "pipline", "pipeline"))
    with pytest.raises(MegatronArgsError, match=r"u.sh: --frobnicate is not a Megatron-LM "
                                                r"argument; --sequence-paralel is not"):
        import_file(path)
    res = import_file(path, allow_unknown=True)
    assert res.unknown == ["--frobnicate", "--sequence-paralel"]
    ignored = dict(res.ignored)
    assert ignored["--frobnicate"] == ("not a Megatron-LM argument vtrain knows; may change the "
                                       "iteration time")
    assert ignored["--sequence-paralel"] == ("not a Megatron-LM argument vtrain knows (did you "
                                             "mean --sequence-parallel?); may change the "
                                             "iteration time")
    assert res.session.plan.tensor_parallel == 4
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out), "--allow-unknown"]) == 0
    text = capsys.readouterr().out
    assert "ignored: --frobnicate (not a Megatron-LM argument vtrain knows; may change" in text
    assert load_session(out).plan.tensor_parallel == 4
    # a name Megatron-LM rejects as no longer valid is refused even so
    old = _write(tmp_path, "old.sh", LLAMA70_TYPOS.replace("--micro-batch-size 1",
                                                            "--batch-size 1").replace("paralel",
                                                                                      "parallel"))
    with pytest.raises(MegatronArgsError, match="--batch-size: no longer valid in Megatron-LM: "
                                                "use --micro-batch-size$"):
        import_file(old, allow_unknown=True)


def test_known_argument_lists():
    """The names are Megatron-LM-style flags, each in one list only, none mapped twice."""
    assert not TIMING_ARGUMENTS & NEUTRAL_ARGUMENTS
    assert not (TIMING_ARGUMENTS | NEUTRAL_ARGUMENTS) & set(ARGUMENTS)
    from core.io.megatron.arguments import REFUSED_ARGUMENTS
    assert not set(REFUSED_ARGUMENTS) & (TIMING_ARGUMENTS | NEUTRAL_ARGUMENTS | set(ARGUMENTS))
    assert KNOWN_ARGUMENTS == set(ARGUMENTS) | TIMING_ARGUMENTS | NEUTRAL_ARGUMENTS | set(
        REFUSED_ARGUMENTS)
    for flag in KNOWN_ARGUMENTS:
        assert flag.startswith("--") and " " not in flag and flag.strip("-") == flag[2:], flag
    assert len(KNOWN_ARGUMENTS) > 350


# Megatron-LM's --no-... switches: those that change kernels may change the time (ignored),
# the checkpoint and logging ones cannot (not used). --no-bias-gelu-fusion has no effect with
# --swiglu (ignored); --no-bias-swiglu-fusion sets model.bias_activation_fusion, refused with
# this launch's experts (test_no_bias_swiglu_fusion_*)
NO_FORMS = {"--no-masked-softmax-fusion": "ignored", "--no-bias-gelu-fusion": "ignored",
            "--no-bias-dropout-fusion": "ignored",
            "--no-rope-fusion": "ignored", "--no-persist-layer-norm": "ignored",
            "--no-position-embedding": "modelled",
            "--no-overlap-p2p-communication": "modelled", "--no-align-grad-reduce": "ignored",
            "--no-async-tensor-model-parallel-allreduce": "ignored",
            "--no-load-optim": "neutral", "--no-load-rng": "neutral", "--no-save-optim": "neutral",
            "--no-save-rng": "neutral", "--no-mmap-bin-files": "neutral",
            "--no-create-attention-mask-in-dataloader": "neutral",
            "--no-check-for-nan-in-loss-and-grad": "neutral", "--no-initialization": "neutral",
            "--no-ckpt-fully-parallel-save": "neutral", "--no-one-logger": "neutral"}


def test_megatrons_no_forms_are_read(tmp_path):
    text = DSV3_LAUNCH.replace("--lr 2.2e-4", "--lr 2.2e-4 " + " ".join(NO_FORMS))
    res = import_file(_write(tmp_path, "no.sh", text))
    assert res.unknown == []
    ignored = dict(res.ignored)
    for flag, kind in NO_FORMS.items():
        listed = (flag in ignored, flag in res.neutral)
        assert listed == (kind == "ignored", kind == "neutral"), flag


def test_real_launches_have_no_unknown_arguments(tmp_path):
    for name, text in (("gpt3.sh", GPT3_175B), ("gpt13.sh", GPT_1P3B), ("llama.sh", LLAMA3_8B),
                       ("mixtral.sh", MIXTRAL_LAUNCH), ("dsv3.sh", DSV3_LAUNCH)):
        args = parse_arguments(read_launch(text, name).arguments)
        assert unknown_arguments(args) == [], name


def test_deepseek_v3_without_an_attention_flag_imports_as_flash(tmp_path):
    """Megatron-Core's default --attention-backend auto runs Transformer Engine's attention:
    timed as FlashAttention, which multi-head latent attention needs; RoPE's base, YaRN's
    factors, the norm's epsilon and the router's constants do not change the work."""
    res = import_file(_write(tmp_path, "dsv3.sh", DSV3_LAUNCH), gpu="H100-SXM5-80GB")
    from core.plan.rules import validate
    assert validate(res.session) == []
    m = res.session.model
    assert (m.attention_kernel, m.multi_latent_attention, m.num_experts) == ("flash", True, 256)
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (8, 4)  # node-limited routing
    assert res.notes == [("attention", "Megatron-Core's default --attention-backend auto: "
                          "Transformer Engine picks its fused (cuDNN) or flash attention, timed "
                          "as FlashAttention"), ("--save", SAVE_AT_THE_END),
                         ("rule save-interval-given", SAVE_INTERVAL_RULE)]
    assert res.neutral == ["--max-position-embeddings", "--norm-epsilon", "--rotary-base",
                           "--rotary-scaling-factor", "--mscale", "--mscale-all-dim",
                           "--moe-router-topk-scaling-factor", "--moe-router-score-function",
                           "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate",
                           "--moe-router-load-balancing-type", "--moe-aux-loss-coeff",
                           "--mtp-loss-scaling-factor", "--lr", "--data-path"]
    assert res.used["--save"] == "reliability.checkpoint_interval_iterations"
    assert list(res.ignored) == ["--moe-router-dtype", "--moe-permute-fusion"]


_FLAGS = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 " \
         "--micro-batch-size 1 --vocab-size 9 "


@pytest.mark.parametrize("extra, kernel, note", [
    ("", "flash", "Megatron-Core's default --attention-backend auto: Transformer Engine picks "
                  "its fused (cuDNN) or flash attention, timed as FlashAttention"),
    ("--attention-backend auto", "flash", "--attention-backend auto: Transformer Engine picks "
                                          "its fused (cuDNN) or flash attention, timed as "
                                          "FlashAttention"),
    ("--attention-backend fused", "flash", "--attention-backend fused: Transformer Engine's "
                                           "fused (cuDNN) attention, timed as FlashAttention"),
    ("--attention-backend flash", "flash", "--attention-backend flash: Transformer Engine's "
                                           "flash backend, timed as FlashAttention"),
    ("--attention-backend unfused", "unfused", "--attention-backend unfused: Transformer "
                                               "Engine's unfused attention, timed as the "
                                               "unfused kernel"),
    ("--attention-backend local", "unfused", "--attention-backend local: Megatron-Core's own "
                                             "unfused attention, timed as the unfused kernel"),
    ("--use-flash-attn", "flash", "--use-flash-attn: FlashAttention"),
    ("--use-flash-attn --attention-backend flash", "flash",
     "--attention-backend flash: Transformer Engine's flash backend, timed as FlashAttention"),
    ("--use-flash-attn --attention-backend unfused", "unfused",
     "--attention-backend unfused: Transformer Engine's unfused attention, timed as the unfused "
     "kernel; it wins over --use-flash-attn (Megatron-Core reads --attention-backend; "
     "--use-flash-attn is deprecated)"),
    ("--use-flash-attn --attention-backend fused", "flash",
     "--attention-backend fused: Transformer Engine's fused (cuDNN) attention, timed as "
     "FlashAttention; it wins over --use-flash-attn (Megatron-Core reads --attention-backend; "
     "--use-flash-attn is deprecated)"),
    ("--transformer-impl local", "unfused", "--transformer-impl local: Megatron-Core's local "
     "layer spec runs its own unfused attention (DotProductAttention), timed as the unfused "
     "kernel"),
    ("--transformer-impl local --attention-backend local", "unfused", "--transformer-impl local: "
     "Megatron-Core's local layer spec runs its own unfused attention (DotProductAttention), "
     "timed as the unfused kernel"),
    ("--transformer-impl local --attention-backend fused --use-flash-attn", "unfused",
     "--transformer-impl local: Megatron-Core's local layer spec runs its own unfused attention "
     "(DotProductAttention), timed as the unfused kernel; it wins over --attention-backend fused "
     "and --use-flash-attn, which pick Transformer Engine's attention"),
    ("--transformer-impl transformer_engine", "flash", "Megatron-Core's default "
     "--attention-backend auto: Transformer Engine picks its fused (cuDNN) or flash attention, "
     "timed as FlashAttention"),
    ("--use-legacy-models", "unfused", "--use-legacy-models without --attention-backend or "
     "--use-flash-attn: the legacy model's own unfused attention, timed as the unfused kernel"),
    ("--use-legacy-models --transformer-impl local", "unfused", "--use-legacy-models without "
     "--attention-backend or --use-flash-attn: the legacy model's own unfused attention, timed "
     "as the unfused kernel"),
    ("--use-legacy-models --use-flash-attn", "flash", "--use-flash-attn: FlashAttention"),
])
def test_attention_kernel_follows_megatron_core(extra, kernel, note):
    res = session_from_launch(read_launch(_FLAGS + extra, "a.txt"), num_gpus=1)
    assert res.session.model.attention_kernel == kernel
    assert [n for n in res.notes if n[0] != "--save"] == [("attention", note)]  # no --save: noted


def test_attention_backend_value_is_checked():
    with pytest.raises(MegatronArgsError, match="a.txt: --attention-backend 'cudnn': expected one "
                                                "of Megatron-Core's auto, flash, fused, unfused, "
                                                "local"):
        session_from_launch(read_launch(_FLAGS + "--attention-backend cudnn", "a.txt"), num_gpus=1)


def test_attention_in_the_cli_summary(tmp_path, capsys):
    path = _write(tmp_path, "a.txt", _FLAGS + "--use-flash-attn --attention-backend fused")
    assert main(["import", "megatron-args", str(path), "--out", str(tmp_path / "s.json"),
                 "--num-gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert ("attention: flash (--attention-backend fused: Transformer Engine's fused (cuDNN) "
            "attention, timed as FlashAttention; it wins over --use-flash-attn") in " ".join(
        out.split())


def test_errors_name_only_the_arguments_the_launch_gives(tmp_path, capsys):
    """A configuration rule's message names the launch's own arguments that set the field, or
    Megatron-LM's default when it gives none."""
    assert field_origin("plan.precision", {"--bf16", "--fp8-format", "--lr"}) == \
        "set by --bf16, --fp8-format"
    assert field_origin("plan.precision", {"--lr"}).endswith("in the launch: Megatron-LM's default")
    assert field_origin("plan.cp_a2a_size", {"--lr"}) == (
        "no --hierarchical-context-parallel-sizes in the launch: Megatron-LM's default")
    assert field_origin("model.attention_kernel", {"--transformer-impl"}) == \
        "set by --transformer-impl"
    assert field_origin("plan.data_parallel", {"--lr"}) is None  # the world size sets it
    path = _write(tmp_path, "fp8.txt", _FLAGS + "--bf16 --fp8-format hybrid")
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--out", str(out), "--num-gpus", "1",
                 "--gpu", "A100-SXM4-80GB"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "fp8.txt: plan.precision: " in err and err.endswith("(set by --bf16, --fp8-format)")
    assert "--fp16" not in err and not out.exists()
    # MLA on Megatron's own attention: named by the argument that chose it
    mla = _write(tmp_path, "mla.txt", _FLAGS + "--multi-latent-attention --kv-lora-rank 32 "
                 "--transformer-impl local")
    assert main(["import", "megatron-args", str(mla), "--out", str(out), "--num-gpus", "1"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "model.attention_kernel: " in err and "(set by --transformer-impl)" in err


def test_docs_name_the_unknown_argument_rule():
    from tests.conftest import ROOT
    doc = " ".join((ROOT / "docs" / "megatron_args.md").read_text().split())
    for needle in ("--allow-unknown", "did you mean", "timed as FlashAttention",
                   "`--attention-backend` wins"):
        assert needle in doc, needle


def test_token_dispatcher_flags(tmp_path):
    """--moe-token-dispatcher-type alltoall / flex (and the older --moe-enable-deepep) set
    plan.moe_token_dispatcher_type; without it an expert-parallel launch would run Megatron's
    default allgather dispatcher, which is not modelled: refused by name, never assumed."""
    flex = MIXTRAL_LAUNCH.replace("--moe-token-dispatcher-type alltoall",
                                  "--moe-token-dispatcher-type flex")
    assert import_file(_write(tmp_path, "flex.sh", flex)).session.plan.moe_token_dispatcher_type \
        == "flex"
    # Megatron-Core 0.19: --moe-enable-deepep (deprecated for --moe-flex-dispatcher-backend
    # deepep) needs the flex dispatcher; deepep and hybridep are both the flex model
    deepep = MIXTRAL_LAUNCH.replace("--moe-token-dispatcher-type alltoall",
                                    "--moe-token-dispatcher-type alltoall --moe-enable-deepep")
    with pytest.raises(MegatronArgsError, match="--moe-enable-deepep needs"):
        import_file(_write(tmp_path, "deepep.sh", deepep))
    for extra in ("--moe-enable-deepep", "--moe-flex-dispatcher-backend hybridep"):
        text = flex.replace("--moe-token-dispatcher-type flex",
                            f"--moe-token-dispatcher-type flex {extra}")
        assert import_file(_write(tmp_path, "ok.sh", text)).session.plan \
            .moe_token_dispatcher_type == "flex"
    with pytest.raises(MegatronArgsError, match="ncclep: not modelled"):
        import_file(_write(tmp_path, "nccl.sh", flex.replace(
            "--moe-token-dispatcher-type flex",
            "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ncclep")))
    none = MIXTRAL_LAUNCH.replace(" --moe-token-dispatcher-type alltoall", "")
    with pytest.raises(MegatronArgsError, match="allgather dispatcher, is not modelled"):
        import_file(_write(tmp_path, "none.sh", none))
    res = import_file(_write(tmp_path, "flex2.sh", flex))
    assert "--moe-token-dispatcher-type flex" in " ".join(export_arguments(res.session))


def test_node_limited_routing_round_trips(tmp_path):
    """--moe-router-num-groups / --moe-router-group-topk are model fields (node-limited routing,
    which bounds the nodes a flex dispatch reaches); one without the other is refused by name."""
    groups = " --moe-router-num-groups 4 --moe-router-group-topk 2"
    res = import_file(_write(tmp_path, "flex.sh", MIXTRAL_LAUNCH.replace(
        "--moe-token-dispatcher-type alltoall", "--moe-token-dispatcher-type flex" + groups)))
    m = res.session.model
    assert (m.moe_router_num_groups, m.moe_router_group_topk) == (4, 2)
    words = export_arguments(res.session)
    assert words[words.index("--moe-router-num-groups") + 1] == "4"
    assert words[words.index("--moe-router-group-topk") + 1] == "2"
    half = import_file(_write(tmp_path, "half.sh", MIXTRAL_LAUNCH.replace(
        "--moe-token-dispatcher-type alltoall",
        "--moe-token-dispatcher-type alltoall --moe-router-group-topk 2"))).session
    from core.plan.rules import validate
    assert any(e.field == "model.moe_router_num_groups" and "needs moe_router_num_groups"
               in e.message for e in validate(half))
    # the groups alone limit nothing (Megatron-Core: group-limited routing needs the top-k)
    alone = import_file(_write(tmp_path, "alone.sh", MIXTRAL_LAUNCH.replace(
        "--moe-token-dispatcher-type alltoall",
        "--moe-token-dispatcher-type alltoall --moe-router-num-groups 4"))).session
    assert not [e for e in validate(alone) if e.field.startswith("model.")]
    assert alone.model.moe_router_group_topk is None


@pytest.mark.parametrize("extra, n, expected", [
    # 96 layers, p=16: 6 per stage; interleaved with 3 per virtual stage: chunks of 3
    ("--num-layers-per-virtual-pipeline-stage 3", 4, None),  # above a chunk: every layer
    ("--num-layers-per-virtual-pipeline-stage 3", 3, None),
    ("--num-layers-per-virtual-pipeline-stage 3", 2, 2),
    ("", 4, 4), ("", 6, None), ("", 9, None),
    ("--pipeline-model-parallel-layout 'Et*3|(t*3|)*30t*3L'", 4, None),
    ("--pipeline-model-parallel-layout 'Et*3|(t*3|)*30t*3L'", 2, 2),
    # uneven stages: the largest holds 10, so 8 is a count, not every layer
    ("--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 10", 8, 8),
    ("--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 10", 10, None),
])
def test_block_recompute_num_layers_counts_per_model_chunk(extra, n, expected):
    """Megatron applies --recompute-num-layers (block) to each model chunk: a count at or above
    the largest chunk imports as every layer (None), a smaller one as itself; an interleaved
    launch with a count between the chunk and the stage size imports (Megatron runs it)."""
    args = ("--num-layers 96 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
            "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 64 "
            "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 16 --vocab-size 50257 "
            f"--recompute-granularity full --recompute-method block --recompute-num-layers {n} "
            + extra)
    res = session_from_launch(read_launch(f"python pretrain_gpt.py {args}\n", "x.sh"),
                              num_gpus=64)
    assert res.session.plan.recompute == "full"
    assert res.session.plan.recompute_num_layers == expected
    from core.plan.rules import validate
    assert validate(res.session) == []


@pytest.mark.parametrize("value", ["bogus", "P2P", "\"[]\""])
def test_cp_comm_type_must_be_one_of_megatrons(tmp_path, value):
    text = MIXTRAL_LAUNCH.replace("--context-parallel-size 2",
                                  f"--context-parallel-size 2 --cp-comm-type {value}")
    with pytest.raises(MegatronArgsError, match="expected p2p, a2a, all_gather or a2a\\+p2p"):
        import_file(_write(tmp_path, "cp.sh", text))


@pytest.mark.parametrize("value, kind, refused", [
    ("p2p", "p2p", None), ("a2a", "a2a", None),
    # Transformer Engine's all-gather exchange: TE's name, and Megatron-LM's help's spelling
    ("all_gather", "all_gather", None), ("allgather", "all_gather", None),
    ("a2a+p2p", None, "cp_comm_type 'a2a+p2p' needs cp_a2a_size"),  # no hierarchical sizes
    ("\"['p2p','p2p']\"", "p2p", None),
    ("\"['p2p','a2a']\"", None, "one exchange per layer that differ is not modelled"),
])
def test_cp_comm_type_other_than_the_modelled_ones_is_refused(tmp_path, value, kind, refused):
    """--cp-comm-type: the ring (p2p, Megatron-Core's default), the all-to-all (a2a) and
    Transformer Engine's all-gather (all_gather, or allgather as Megatron-LM's help spells it;
    never PyTorch's overlapped allgather) are plan.cp_comm_type; a2a+p2p without its
    hierarchical sizes and a per-layer list of different types refuse the launch by name at
    cp > 1; nothing changes at cp = 1."""
    from core.plan.rules import check
    text = MIXTRAL_LAUNCH.replace("--context-parallel-size 2",
                                  f"--context-parallel-size 2 --cp-comm-type {value}")
    if refused:
        with pytest.raises(Exception) as err:  # the mapping, or the rules (vtrain import's check)
            check(import_file(_write(tmp_path, "cp.sh", text)).session)
        assert refused in str(err.value)
    else:
        plan = import_file(_write(tmp_path, "cp.sh", text)).session.plan
        assert (plan.context_parallel, plan.cp_comm_type) == (2, kind)
    one = import_file(_write(tmp_path, "cp1.sh", text.replace("--context-parallel-size 2",
                                                              "--context-parallel-size 1")))
    assert one.session.plan.context_parallel == 1
    if "p2p'" not in value and value != "p2p":  # listed as having no effect, never dropped unsaid
        assert "--cp-comm-type" in dict(one.ignored)


@pytest.mark.parametrize("comm", ["--cp-comm-type p2p ", ""])
def test_hierarchical_sizes_without_a2a_p2p_are_listed_as_having_no_effect(tmp_path, comm):
    """--hierarchical-context-parallel-sizes only matters to a2a+p2p: with the ring (given or
    Megatron's default) it is listed among the ignored arguments, never dropped unsaid
    (tester)."""
    text = MIXTRAL_LAUNCH.replace("--context-parallel-size 2", "--context-parallel-size 2 " + comm
                                  + "--hierarchical-context-parallel-sizes 2 1")
    res = import_file(_write(tmp_path, "cp.sh", text))
    assert res.session.plan.cp_a2a_size is None and res.session.plan.cp_comm_type == "p2p"
    why = dict(res.ignored)["--hierarchical-context-parallel-sizes"]
    assert "without --cp-comm-type a2a+p2p" in why and "no effect" in why


@pytest.mark.parametrize("sizes,kind", [("2 1", "a2a"), ("1 2", "p2p")])
def test_a2a_p2p_with_a_group_of_one_rank_reads_as_the_other_exchange(tmp_path, sizes, kind):
    """--cp-comm-type a2a+p2p with --hierarchical-context-parallel-sizes A P where one group has
    one rank: Megatron-LM accepts it (A * P = cp) and Transformer Engine 2.20's
    attn_forward_func_with_cp runs a2a when the p2p group has one rank (P = 1), p2p when the
    all-to-all group has (A = 1); read as that exchange, with a note, where the session's rule
    (cp_a2a_size between 2 and cp, exclusive) refused the launch before."""
    from core.plan.rules import check
    text = MIXTRAL_LAUNCH.replace("--context-parallel-size 2", "--context-parallel-size 2 "
                                  f"--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes "
                                  f"{sizes}")
    res = import_file(_write(tmp_path, "cp.sh", text))
    plan = res.session.plan
    assert (plan.context_parallel, plan.cp_comm_type, plan.cp_a2a_size) == (2, kind, None)
    res.session.cluster.gpu = "H100-SXM5-80GB"  # the launch's FP8 needs one
    check(res.session)  # valid
    note = dict(res.notes)["--hierarchical-context-parallel-sizes"]
    assert note.startswith(f"{sizes} with --cp-comm-type a2a+p2p read as cp_comm_type {kind}")
    # two groups of two ranks at cp = 4 stay a2a+p2p with the all-to-all group's size
    four = import_file(_write(tmp_path, "cp4.sh", text.replace(
        "--context-parallel-size 2", "--context-parallel-size 4").replace(
        f"--hierarchical-context-parallel-sizes {sizes}",
        "--hierarchical-context-parallel-sizes 2 2").replace("--nnodes 8", "--nnodes 16")))
    assert (four.session.plan.cp_comm_type, four.session.plan.cp_a2a_size) == ("a2a+p2p", 2)


def test_export_refuses_pytorchs_allgather_context_parallelism():
    """plan.cp_comm_type allgather is PyTorch's context_parallel (torchtitan): Megatron's
    --cp-comm-type allgather is Transformer Engine's other exchange, so the export refuses it
    by name; the ring exports as Megatron's default (no flag)."""
    s = Session(ModelConfig("x", 4, 256, 4, None, 128, 1000, attention_kernel="flash"),
                ParallelPlan(1, 1, 1, 1, 2, "1f1b", "none", "bf16", context_parallel=2,
                             cp_comm_type="allgather"), ClusterConfig(gpus_per_node=2), CostConfig())
    with pytest.raises(MegatronArgsError, match="plan.cp_comm_type 'allgather'"):
        export_arguments(s)
    s.plan.cp_comm_type = "p2p"
    args = export_arguments(s)
    assert args[args.index("--context-parallel-size") + 1] == "2" and "--cp-comm-type" not in args
    s.plan.cp_comm_type = "all_gather"  # Transformer Engine's: TE's own name, which TE checks
    args = export_arguments(s)
    assert args[args.index("--cp-comm-type") + 1] == "all_gather"


@pytest.mark.parametrize("extra, flag", [
    ("--is-hybrid-model --hybrid-override-pattern M-M-M*-", "--is-hybrid-model"),
    ("--hybrid-attention-ratio 0.1", "--hybrid-attention-ratio"),
    ("--mamba-state-dim 128", "--mamba-state-dim"),
    ("--spec megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec", "--spec"),
])
def test_hybrid_mamba_launches_are_refused_never_timed_as_transformers(extra, flag):
    launch = ("--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
              "--max-position-embeddings 4096 --vocab-size 128256 --micro-batch-size 1 "
              "--global-batch-size 8 --bf16 " + extra)
    with pytest.raises(MegatronArgsError, match=f"{flag}.*hybrid model .* is not modelled"):
        session_from_launch(read_launch(launch, "nemotron_h.sh"), num_gpus=8)


@pytest.mark.parametrize("script", ["pretrain_mamba.py", "pretrain_bert.py", "pretrain_t5.py",
                                    "pretrain_vlm.py"])
def test_other_model_scripts_are_refused(script):
    """Megatron-LM's other training scripts build other models (pretrain_mamba.py: Mamba layers
    even without hybrid flags): refused by the script's name, never timed as pretrain_gpt.py's
    decoder."""
    launch = ("torchrun --nproc_per_node 8 " + script + " --num-layers 8 --hidden-size 4096 "
              "--num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
              "--vocab-size 128256 --micro-batch-size 1 --global-batch-size 8 --bf16")
    with pytest.raises(MegatronArgsError, match=f"{script}: the .* model script builds"):
        session_from_launch(read_launch(launch, "x.sh"))
    ok = read_launch(launch.replace(script, "pretrain_gpt.py"), "x.sh")
    assert session_from_launch(ok).session.model.num_layers == 8


def test_import_summary_names_cp_ep_and_the_network_it_did_not_get(tmp_path, capsys):
    launch = ("torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py --num-layers 8 "
              "--hidden-size 4096 --num-attention-heads 32 --seq-length 32768 "
              "--max-position-embeddings 32768 --vocab-size 128256 --micro-batch-size 1 "
              "--global-batch-size 8 --bf16 --context-parallel-size 4 --use-flash-attn "
              "--cp-comm-type a2a")
    src = _write(tmp_path, "cp.sh", launch)
    assert main(["import", "megatron-args", str(src), "--out", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "16 GPUs (t=1, p=1, cp=4, d=4;" in out
    assert "network: Megatron's arguments do not give it" in out


def test_a_tokenizer_that_keeps_its_size_in_its_files_takes_the_imports_vocab_size(tmp_path,
                                                                                  capsys):
    script = _write(tmp_path, "hf.sh", "torchrun --nproc-per-node 8 pretrain_gpt.py "
                    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
                    "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 "
                    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model x/y --bf16\n")
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(script), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--tokenizer-type HuggingFaceTokenizer: its vocabulary size is in its files" in err
    assert "give it to the import: --vocab-size N" in err and not out.exists()
    assert main(["import", "megatron-args", str(script), "--out", str(out),
                 "--vocab-size", "128256"]) == 0
    assert load_session(out).model.vocab_size == 128256
    with pytest.raises(MegatronArgsError, match="the launch gives --vocab-size"):
        import_file(_write(tmp_path, "v.sh", script.read_text().replace(
            "--bf16", "--bf16 --vocab-size 32000")), vocab_size=5)
    assert main(["import", "megatron-args", str(script), "--out", str(out),
                 "--vocab-size", "0"]) == 2


def test_the_imports_vocab_size_never_overrides_the_launchs_nor_stands_for_nulltokenizers(
        tmp_path):
    """--vocab-size=N (one word) is the launch's --vocab-size too: the import's was taken over
    it (a 151,936 vocabulary read as 5); NullTokenizer has no files, Megatron-LM needs the
    launch's --vocab-size (the import read N as the launch's and added one)."""
    head = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
            "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
            "--micro-batch-size 1 --global-batch-size 8 --bf16 ")
    eq = _write(tmp_path, "eq.sh", head + "--tokenizer-type HuggingFaceTokenizer "
                "--tokenizer-model x/y --vocab-size=151936\n")
    assert import_file(eq).session.model.vocab_size == 151936
    with pytest.raises(MegatronArgsError, match="the launch gives --vocab-size"):
        import_file(eq, vocab_size=5)
    null = _write(tmp_path, "null.sh", head + "--tokenizer-type NullTokenizer\n")
    with pytest.raises(MegatronArgsError, match="NullTokenizer takes its size from the launch"):
        import_file(null, vocab_size=1000)
    # a tokenizer of known size keeps it: the import's would silently replace it
    gpt2 = _write(tmp_path, "gpt2.sh", head + "--tokenizer-type GPT2BPETokenizer "
                  "--vocab-file v.json --merge-file m.txt\n")
    assert import_file(gpt2).session.model.vocab_size == 50257
    with pytest.raises(MegatronArgsError, match="GPT2BPETokenizer has 50,257 tokens"):
        import_file(gpt2, vocab_size=32000)
    # a vocab file alone (Megatron-LM's GPT examples): GPT-2 BPE assumed, and said; the
    # import's size replaces the assumption
    files = _write(tmp_path, "files.sh", head + "--vocab-file v.json --merge-file m.txt\n")
    res = import_file(files)
    assert res.session.model.vocab_size == 50257
    assert [n for f, n in res.notes if f == "--vocab-file"] == [
        "vocabulary 50,257 assumed: GPT-2 BPE, the tokenizer of Megatron-LM's GPT examples "
        "that give only --vocab-file / --merge-file; for another, add --vocab-size N to the "
        "launch or the import"]
    assert import_file(files, vocab_size=32000).session.model.vocab_size == 32000


def test_deepseek_v3_with_kv_channels_imports_with_the_latent_head_sizes(tmp_path):
    """Megatron-Core's MLA sizes its heads by --qk-head-dim + --qk-pos-emb-head-dim (query,
    key) and --v-head-dim (value), never by --kv-channels; DeepSeek-V3 launches (Megatron-
    MoE-ModelZoo, Megatron-Bridge's provider) give --kv-channels 128 beside them. The launch
    imports as the same model as without it, and the import says it had no effect."""
    plain = import_file(_write(tmp_path, "dsv3.sh", DSV3_LAUNCH), gpu="H100-SXM5-80GB")
    text = DSV3_LAUNCH.replace("--num-attention-heads 128", "--num-attention-heads 128 "
                               "--kv-channels 128")
    (tmp_path / "kv").mkdir()
    res = import_file(_write(tmp_path / "kv", "dsv3.sh", text), gpu="H100-SXM5-80GB")
    from core.plan.rules import validate
    assert validate(res.session) == []
    assert res.session.model == plain.session.model
    assert num_parameters(res.session.model) == num_parameters(plain.session.model)
    assert "--kv-channels" in dict(res.notes)


def test_sequence_parallel_at_tensor_parallel_1_is_off_as_megatron_turns_it_off(tmp_path):
    """validate_args sets ``args.sequence_parallel = False`` when
    ``tensor_model_parallel_size == 1``: the import does the same and says so; at t=2 it
    stays on."""
    from core.io.megatron.to_session import import_file
    base = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 512 "
            "--num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
            "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000 "
            "--tokenizer-type NullTokenizer --sequence-parallel --tensor-model-parallel-size ")
    for t, expected in ((1, False), (2, True)):
        path = tmp_path / f"t{t}.sh"
        path.write_text(base + str(t) + "\n")
        res = import_file(path)
        assert res.session.plan.sequence_parallel is expected
        assert any(flag == "--sequence-parallel" for flag, _ in res.notes) is (t == 1)


@pytest.mark.parametrize("kind", ["none", "mrope", "relative"])
def test_a_position_embedding_megatron_has_but_the_simulator_not_is_not_modelled(kind):
    """Megatron-LM's --position-embedding-type none, mrope and relative are its choices: refused
    as not modelled, naming what is (it read "expected one of", as if the launch were wrong)."""
    with pytest.raises(MegatronArgsError, match=(
            f"a.txt: --position-embedding-type '{kind}' is not modelled \\(the simulator models "
            "learned_absolute, rope, yarn\\)")):
        session_from_launch(read_launch(_FLAGS + f"--position-embedding-type {kind}", "a.txt"),
                            num_gpus=1)


@pytest.mark.parametrize("flag,value,choices", [
    ("--normalization", "rmsnorm", "LayerNorm, RMSNorm"),
    ("--position-embedding-type", "alibi", "learned_absolute, rope, yarn, mrope, relative, none")])
def test_a_value_outside_megatrons_choices_is_named_as_megatrons_error(flag, value, choices):
    """--normalization rmsnorm (Megatron-DeepSpeed's spelling) is not one of Megatron-LM's
    argparse choices (arguments.json: LayerNorm, RMSNorm): argparse refuses it. It read "is not
    modelled (the simulator models LayerNorm, RMSNorm)", as if RMSNorm were not modelled."""
    with pytest.raises(MegatronArgsError) as err:
        session_from_launch(read_launch(_FLAGS + f"{flag} {value}", "a.txt"), num_gpus=1)
    assert str(err.value) == (f"a.txt: {flag} {value!r}: invalid choice (choose from "
                              f"{choices}): Megatron-LM's parser refuses it")


_MOE_ARGS = ("--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 "
             "--micro-batch-size 1 --vocab-size 32000 --bf16 --swiglu --num-experts 64 "
             "--moe-ffn-hidden-size 1024 --moe-router-topk 4 --moe-grouped-gemm "
             "--moe-token-dispatcher-type alltoall --expert-model-parallel-size 8 ")


@pytest.mark.parametrize("extra,refused", [
    ("--moe-expert-capacity-factor 2 --moe-pad-expert-input-to-capacity",
     "--moe-pad-expert-input-to-capacity: pads every expert's input"),
    ("--moe-expert-capacity-factor 0.5", "--moe-expert-capacity-factor: 0.5 drops tokens"),
    ("--moe-pad-expert-input-to-capacity",
     "--moe-pad-expert-input-to-capacity: needs --moe-expert-capacity-factor"),
    ("--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity", None),
    ("--moe-expert-capacity-factor 1.25", None)])
def test_expert_capacity_that_changes_the_work_is_refused(tmp_path, extra, refused):
    """Megatron-Core pads each expert's input to ceil(cf x T k / E) tokens with
    --moe-pad-expert-input-to-capacity (token_dispatcher.py: capacity x tp x ep tokens per
    local expert; moe_utils.get_capacity) and drops what exceeds it: cf 2 with padding doubles
    the experts' GEMMs and the all-to-all, cf 0.5 halves them even under balanced routing. Both
    were listed as ignored and simulated at the balanced load; now refused by name. cf >= 1
    without padding, and cf 1 with it, change nothing under balanced routing: listed, with
    why, and the session is the same as without them."""
    path = _write(tmp_path, "m.txt", _MOE_ARGS + extra)
    if refused:
        with pytest.raises(MegatronArgsError, match=re.escape(refused)):
            import_file(path, num_gpus=8)
        return
    res = import_file(path, num_gpus=8)
    why = dict(res.ignored)["--moe-expert-capacity-factor"]
    assert "under the balanced routing simulated no expert exceeds its capacity" in why
    plain = import_file(_write(tmp_path, "p.txt", _MOE_ARGS), num_gpus=8)
    assert res.session.model == dataclasses.replace(plain.session.model, name="m")
    assert res.session.plan == plain.session.plan


def test_moe_layer_recompute_is_selective_recomputation_of_the_moe_layer(tmp_path):
    """Megatron-Core's TransformerConfig.__post_init__ (0.16): the deprecated
    --moe-layer-recompute sets recompute_granularity selective and adds "moe" to
    recompute_modules (default ["core_attn"]), and raises beside full granularity. It was listed
    as ignored and simulated without recomputation."""
    res = import_file(_write(tmp_path, "r.txt", _MOE_ARGS + "--moe-layer-recompute"), num_gpus=8)
    p = res.session.plan
    assert (p.recompute, p.recompute_modules) == ("selective", "core_attn,moe")
    assert "--moe-layer-recompute" not in dict(res.ignored)
    mods = import_file(_write(tmp_path, "s.txt", _MOE_ARGS + "--moe-layer-recompute "
                              "--recompute-granularity selective --recompute-modules moe_act"),
                       num_gpus=8).session.plan
    assert (mods.recompute, mods.recompute_modules) == ("selective", "moe_act,moe")
    with pytest.raises(MegatronArgsError, match="--moe-layer-recompute with "
                       "--recompute-granularity full"):
        import_file(_write(tmp_path, "f.txt", _MOE_ARGS + "--moe-layer-recompute "
                           "--recompute-granularity full"), num_gpus=8)


@pytest.mark.parametrize("extra,refused", [
    ("--optimizer sgd", "--optimizer: sgd: not modelled"),
    ("--optimizer-cpu-offload --optimizer-offload-fraction 0.5",
     "--optimizer-cpu-offload: the optimizer state and its step on the CPU"),
    ("--use-distributed-optimizer --use-precision-aware-optimizer --main-grads-dtype bf16",
     "--main-grads-dtype: bf16 without --grad-reduce-in-bf16"),
    ("--cpu-offloading-num-layers 4", "--cpu-offloading-num-layers: activations"),
    ("--fine-grained-activation-offloading --offload-modules attn_norm",
     "--fine-grained-activation-offloading: activations offloaded"),
    ("--fp32-residual-connection", "--fp32-residual-connection: the residual stream"),
    ("--tensor-model-parallel-size 2 --recompute-granularity full --recompute-method uniform "
     "--recompute-num-layers 1 --distribute-saved-activations",
     "--distribute-saved-activations: the recomputed layers' saved inputs"),
    ("--distribute-saved-activations", None),
    ("--optimizer adam --cpu-offloading-num-layers 0", None),
    ("--optimizer-offload-fraction 0.5", None)])
def test_what_moves_or_shrinks_the_counted_memory_is_refused(tmp_path, extra, refused):
    """Another optimizer (arguments.json: --optimizer adam, sgd, muon ...), the optimizer state
    on the CPU and activations offloaded to the host change the memory the verdict counts
    (fp32 Adam state and every activation on the GPU). They were listed as "ignored; may
    change the iteration time" and the verdict printed as if absent; now refused by name (the
    precision-aware optimizer's state dtypes are read since 2026-12-04, only a bf16
    --main-grads-dtype the gradient buffer does not confirm is refused). Their off values
    (adam, 0 layers) and the fraction without its switch change nothing: the session is the
    plain launch's, the latter listed with why."""
    path = _write(tmp_path, "o.txt", _LLAMA_ARGS + "--vocab-size 32000 " + extra)
    if refused:
        with pytest.raises(MegatronArgsError, match=re.escape(refused)):
            import_file(path, num_gpus=8)
        return
    res = import_file(path, num_gpus=8)
    plain = import_file(_write(tmp_path, "o.txt", _LLAMA_ARGS + "--vocab-size 32000"),
                        num_gpus=8)
    assert res.session.plan == plain.session.plan
    ignored = dict(res.ignored)
    if "--distribute-saved-activations" in extra:
        assert ignored["--distribute-saved-activations"].startswith("no effect without full")
    if extra == "--optimizer-offload-fraction 0.5":
        assert ignored["--optimizer-offload-fraction"] == ("no effect without "
                                                          "--optimizer-cpu-offload")


_LLAMA_ARGS = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
               "--micro-batch-size 1 --bf16 --swiglu --normalization RMSNorm "
               "--position-embedding-type rope --disable-bias-linear ")


def test_a_known_tokenizer_keeps_its_size_over_the_launchs_vocab_size(tmp_path):
    """Megatron-LM's build_tokenizer builds GPT2BPETokenizer from its files (50,257 tokens) and
    reads --vocab-size only for the NullTokenizer and TikTokenizer: the launch's 32,000 is
    noted as not used, not taken."""
    res = import_file(_write(tmp_path, "tok.txt", _LLAMA_ARGS + "--tokenizer-type "
                             "GPT2BPETokenizer --vocab-file v.json --merge-file m.txt "
                             "--vocab-size 32000"), num_gpus=8)
    assert res.session.model.vocab_size == 50257
    assert [n for f, n in res.notes if f == "--vocab-size"] == [
        "32,000 not used: --tokenizer-type GPT2BPETokenizer has 50,257 tokens from its files, "
        "and Megatron-LM reads --vocab-size only for the NullTokenizer and TikTokenizer"]


def test_full_recomputation_without_a_method_or_a_layer_count_is_refused(tmp_path):
    """Megatron-Core's TransformerConfig refuses full granularity without --recompute-method
    and without --recompute-num-layers; the launch never starts, so it is not simulated (it
    was read as every layer recomputed)."""
    for extra, rules in (("--recompute-granularity full", ("recompute-full-method",
                                                           "recompute-full-num-layers")),
                         ("--recompute-granularity full --recompute-method block",
                          ("recompute-full-num-layers",)),
                         ("--recompute-granularity full --recompute-num-layers 2",
                          ("recompute-full-method",))):
        with pytest.raises(MegatronArgsError) as exc:
            import_file(_write(tmp_path, "r.txt", _LLAMA_ARGS + "--vocab-size 32000 " + extra),
                        num_gpus=8)
        assert [r for r in ("recompute-full-method", "recompute-full-num-layers")
                if f"rule {r}:" in str(exc.value)] == list(rules)
    ok = import_file(_write(tmp_path, "ok.txt", _LLAMA_ARGS + "--vocab-size 32000 "
                            "--recompute-granularity full --recompute-method uniform "
                            "--recompute-num-layers 1"), num_gpus=8).session.plan
    assert (ok.recompute, ok.recompute_num_layers) == ("full", None)


def test_group_query_attention_alone_is_megatrons_one_group(tmp_path):
    """--num-query-groups defaults to 1 (arguments.json): --group-query-attention alone is
    multi-query attention, said in the notes (it was refused)."""
    res = import_file(_write(tmp_path, "g.txt", _LLAMA_ARGS + "--vocab-size 32000 "
                             "--group-query-attention"), num_gpus=8)
    assert res.session.model.num_query_groups == 1
    assert [f for f, _ in res.notes].count("--group-query-attention") == 1


def test_llama2_tokenizer_size_is_its_model_files(tmp_path):
    """Megatron-LM's _Llama2Tokenizer is a _SentencePieceTokenizer: its size is the piece count
    of --tokenizer-model's file (Megatron-Bridge's copy, training/tokenizers/tokenizer.py), any
    SentencePiece model. 32,000 (Meta's Llama 2 file) is assumed and now noted; the import's
    --vocab-size gives another file's size (it was refused: "Llama2Tokenizer has 32,000
    tokens"), e.g. a 55,296-piece Chinese-extended Llama 2 tokenizer."""
    text = _LLAMA_ARGS + "--tokenizer-type Llama2Tokenizer --tokenizer-model /t/tokenizer.model"
    res = import_file(_write(tmp_path, "l.txt", text), num_gpus=8)
    assert res.session.model.vocab_size == 32000
    assert dict(res.notes)["--tokenizer-type"].startswith("vocabulary 32,000 assumed: Meta's")
    other = import_file(_write(tmp_path, "l.txt", text), num_gpus=8, vocab_size=55296)
    assert other.session.model.vocab_size == 55296
    assert "--tokenizer-type" not in dict(other.notes)


def test_query_groups_without_the_switch_are_said_unused(tmp_path):
    """Megatron-LM reads --num-query-groups only with --group-query-attention
    (core_transformer_config_from_args: num_query_groups None otherwise; Megatron-Bridge's
    mlm_compat/arguments.py keeps the same code): --num-query-groups 8 alone trains multi-head
    attention. The model is simulated so, and the notes say the 8 went unused (it was silent)."""
    res = import_file(_write(tmp_path, "q.txt", _LLAMA_ARGS + "--vocab-size 32000 "
                             "--num-query-groups 8"), num_gpus=8)
    assert res.session.model.num_query_groups is None
    notes = dict(res.notes)
    assert notes["--num-query-groups"].startswith("8 not used: without --group-query-attention")
    gqa = import_file(_write(tmp_path, "g.txt", _LLAMA_ARGS + "--vocab-size 32000 "
                             "--group-query-attention --num-query-groups 8"), num_gpus=8)
    assert gqa.session.model.num_query_groups == 8
    assert "--num-query-groups" not in dict(gqa.notes)


def test_padded_vocab_size_is_the_embeddings_rows(tmp_path):
    """With --padded-vocab-size Megatron-LM does not pad the tokenizer's size: 64,000 rows,
    where the 32,000 vocabulary pads to 32,000 (a multiple of 128) alone."""
    from core.plan.model_config import padded_vocab_size
    m = import_file(_write(tmp_path, "p.txt", _LLAMA_ARGS + "--vocab-size 32000 "
                           "--padded-vocab-size 64000"), num_gpus=8).session.model
    assert padded_vocab_size(m.vocab_size, 1, divisible_by=m.make_vocab_size_divisible_by) == 64000


def test_heterogeneous_layers_and_a_longer_position_table_are_said(tmp_path):
    """Layers of different shapes are another model (refused by name); a learned position table
    longer than the sequence is listed as ignored with its rows, and one as long is not."""
    for flag in ("--heterogeneous-layers-config-path c.json",
                 "--heterogeneous-layers-config-encoded-json {}"):
        with pytest.raises(MegatronArgsError, match=re.escape(flag) + ": not modelled"):
            import_file(_write(tmp_path, "h.txt", _LLAMA_ARGS + "--vocab-size 32000 " + flag),
                        num_gpus=8)
    gpt = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
           "--micro-batch-size 1 --bf16 --vocab-size 50257 --max-position-embeddings ")
    res = import_file(_write(tmp_path, "m.txt", gpt + "4096"), num_gpus=8)
    assert res.ignored["--max-position-embeddings"] == (
        "4,096: the learned position table's rows; the parameter count takes the sequence "
        "length's 2,048 (2,048 rows of h apart)")
    res = import_file(_write(tmp_path, "m2.txt", gpt + "2048"), num_gpus=8)
    assert "--max-position-embeddings" not in res.ignored
    assert "--max-position-embeddings" in res.neutral


_LLAMA_TE = (
    "torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu "
    "--untie-embeddings-and-output-weights --disable-bias-linear "
    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B "
    "--vocab-size 128256 --tensor-model-parallel-size 2 --sequence-parallel "
    "--use-distributed-optimizer --micro-batch-size 1 --global-batch-size 128 "
    "--train-iters 250000 --lr 3e-4 --bf16 --fp8-format hybrid --fp8-amax-history-len 1024 "
    "--use-flash-attn --transformer-impl transformer_engine --data-path /d --save /ck "
    "--load /ck --save-interval 1000 --async-save --log-interval 10\n")


def test_every_argument_that_set_a_field_is_listed_as_used_with_it(tmp_path, capsys):
    """Each argument the import read into a session field is in ``used`` with that field
    (--save-interval, --train-iters and --async-save were in no list; --save was "not used"
    though it decides whether checkpoints are saved), and every argument of the launch is in
    exactly one of used, ignored and not used."""
    path = _write(tmp_path, "llama.sh", _LLAMA_TE)
    res = import_file(path)
    assert res.used["--save-interval"] == "reliability.checkpoint_interval_iterations"
    assert res.used["--save"] == "reliability.checkpoint_interval_iterations"
    assert res.used["--train-iters"] == "cost.training_tokens"
    assert res.used["--async-save"] == "reliability.async_save"
    assert res.used["--fp8-format"] == "plan.precision"
    assert res.used["--transformer-impl"].startswith("Transformer Engine's layers")
    rel = res.session.reliability
    assert (rel.checkpoint_interval_iterations, rel.async_save) == (1000, True)
    assert res.session.cost.training_tokens == 250000 * 128 * 8192
    given = list(parse_arguments(read_launch(_LLAMA_TE, "x").arguments))
    lists = [set(res.used), set(res.ignored), set(res.neutral)]
    assert sorted(given) == sorted(f for s in lists for f in s)  # each in exactly one
    assert "--save" not in res.neutral and "--transformer-impl" not in res.ignored
    # the summary prints them
    assert main(["import", "megatron-args", str(path), "--out", str(tmp_path / "s.json"),
                 "--gpu", "H100-SXM5-80GB"]) == 0
    out = capsys.readouterr().out
    assert "used: --save-interval (reliability.checkpoint_interval_iterations)" in out
    assert "used: --train-iters (cost.training_tokens)" in out
    assert "used: --async-save (reliability.async_save)" in out
    assert "ignored: --transformer-impl" not in out


def test_transformer_impl_local_is_used_and_refuses_fp8(tmp_path):
    """--transformer-impl local sets the unfused attention (used, not ignored); with
    --fp8-format it is refused by name: Megatron-Core's local layers run no FP8 GEMM (FP8 is
    Transformer Engine's fp8_autocast; megatron-core 0.16.1 models/backends.py
    LocalSpecProvider's tensor_parallel linear layers have no FP8 path)."""
    local = _LLAMA_TE.replace("transformer_engine", "local")
    with pytest.raises(MegatronArgsError) as err:
        import_file(_write(tmp_path, "fp8.sh", local))
    msg = str(err.value)
    assert "--fp8-format hybrid: with --transformer-impl local: Megatron-Core runs FP8 GEMMs " \
           "only in Transformer Engine's layers" in msg
    assert "LocalSpecProvider" in msg and "megatron-core 0.16.1" in msg
    assert "--fp8-amax-history-len" in msg
    res = import_file(_write(tmp_path, "bf16.sh", local.replace("--fp8-format hybrid ", "")))
    assert res.session.plan.precision == "bf16"
    assert res.session.model.attention_kernel == "unfused"
    assert res.used["--transformer-impl"] == "model.attention_kernel"
    assert res.used["--use-flash-attn"].startswith("nothing: --transformer-impl local wins")
    assert "--transformer-impl" not in res.ignored


_SWIGLU_SMALL = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size "
                 "2816 --seq-length 2048 --micro-batch-size 1 --vocab-size 32000 --swiglu "
                 "--disable-bias-linear --normalization RMSNorm --bf16")


def test_no_bias_swiglu_fusion_is_the_unfused_gated_activation(tmp_path):
    """--no-bias-swiglu-fusion with --swiglu sets model.bias_activation_fusion false
    (Megatron-LM core_transformer_config_from_args: bias_activation_fusion =
    args.bias_swiglu_fusion), --no-bias-gelu-fusion beside --swiglu has no effect (listed
    ignored), and the export writes the flag back: the session round-trips."""
    plain = import_file(_write(tmp_path, "a.txt", _SWIGLU_SMALL), num_gpus=1)
    assert plain.session.model.bias_activation_fusion is True
    res = import_file(_write(tmp_path, "b.txt", _SWIGLU_SMALL + " --no-bias-swiglu-fusion "
                             "--no-bias-gelu-fusion"), num_gpus=1)
    m = res.session.model
    assert m.bias_activation_fusion is False
    assert "--no-bias-gelu-fusion" in dict(res.ignored)
    assert "--no-bias-swiglu-fusion" not in dict(res.ignored)
    args = export_arguments(res.session)
    assert "--no-bias-swiglu-fusion" in args and "--no-bias-gelu-fusion" not in args
    back = import_file(_write(tmp_path, "run.sh", export_script(res.session)),
                       name=m.name).session
    assert back.model == m
    # a fused session exports neither flag
    fused = export_arguments(plain.session)
    assert "--no-bias-swiglu-fusion" not in fused and "--no-bias-gelu-fusion" not in fused


def test_no_bias_gelu_fusion_is_read_without_swiglu(tmp_path):
    """Without --swiglu Megatron-LM reads --no-bias-gelu-fusion (a GeLU MLP with biases), and
    --no-bias-swiglu-fusion has no effect; --quick-geglu with --disable-bias-linear runs
    unfused (validate_args sets bias_gelu_fusion False without biases)."""
    gelu = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
            "--micro-batch-size 1 --vocab-size 32000 --bf16")
    res = import_file(_write(tmp_path, "g.txt", gelu + " --no-bias-gelu-fusion "
                             "--no-bias-swiglu-fusion"), num_gpus=1)
    assert res.session.model.bias_activation_fusion is False
    assert "--no-bias-swiglu-fusion" in dict(res.ignored)
    assert "--no-bias-gelu-fusion" in export_arguments(res.session)
    q = import_file(_write(tmp_path, "q.txt", gelu + " --ffn-hidden-size 2816 --quick-geglu "
                           "--disable-bias-linear"), num_gpus=1).session.model
    assert (q.activation, q.bias_activation_fusion) == ("swiglu", False)


def test_no_bias_swiglu_fusion_with_experts_is_refused_by_name(tmp_path):
    """The experts' unfused activation is not modelled: refused naming the field."""
    from core.plan.rules import validate
    text = DSV3_LAUNCH.replace("--lr 2.2e-4", "--lr 2.2e-4 --no-bias-swiglu-fusion")
    session = import_file(_write(tmp_path, "dsv3.sh", text)).session
    assert session.model.bias_activation_fusion is False
    errs = [e for e in validate(session) if e.field == "model.bias_activation_fusion"]
    assert len(errs) == 1 and "with experts is not modelled" in errs[0].message
    fused = dataclasses.replace(session, model=dataclasses.replace(
        session.model, bias_activation_fusion=True))
    assert not [e for e in validate(fused) if e.field == "model.bias_activation_fusion"]
