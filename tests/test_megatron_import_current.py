"""Megatron import against the current Megatron-LM: the argument table follows the parser's
arguments.json (../shared/data/megatron-lm), and launch scripts in today's styles (bash arrays
with +=, sbatch + srun, Megatron-DeepSpeed, printed argument dumps, positional parameters)."""

from __future__ import annotations

import json

import pytest

from core.plan.parallel import CROSS_ENTROPY_FUSION_IMPLS
from core.io.megatron.arguments import ARGUMENTS, KNOWN_ARGUMENTS, MegatronArgsError
from core.io.megatron.launch import read_launch
from core.io.megatron.model_arguments import ATTENTION_BACKENDS
from core.io.megatron.to_session import import_file
from core.io.megatron.arguments import (BY_OPTION, EFFECTS, ENTRIES, MEGATRON_LM_COMMIT,
                                        MODELLED_ARGUMENTS, OLDER_ARGUMENTS, REMOVED_ARGUMENTS)
from tests.conftest import ROOT
from core.cli import main

PARSER = ROOT.parent / "shared" / "data" / "megatron-lm" / "arguments.json"
ACTIONS = {"_StoreAction": "store", "_StoreTrueAction": "store_true",
           "_StoreFalseAction": "store_false", "BooleanOptionalAction": "boolean_optional",
           "_HelpAction": "help"}


@pytest.fixture(scope="module")
def parser() -> dict:
    if not PARSER.is_file():
        pytest.skip(f"shared data not present: {PARSER}")
    return json.loads(PARSER.read_text(encoding="utf-8"))


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the table

def test_every_current_option_is_classified_with_the_parsers_dest_action_and_default(parser):
    assert MEGATRON_LM_COMMIT == parser["commit"]
    ours = {e.options: e for e in ENTRIES}
    assert len(parser["arguments"]) == len(ENTRIES) == 839
    assert sum(len(a["options"]) for a in parser["arguments"]) == 877
    for a in parser["arguments"]:
        e = ours[tuple(a["options"])]
        assert (e.dest, e.action, e.nargs, e.default) == (
            a["dest"], ACTIONS[a["action"]], a["nargs"], a["default"]), a["options"]
        assert e.effect in EFFECTS
        if e.effect in ("refused", "removed"):
            assert e.note, a["options"]
        for option in a["options"]:
            assert option in KNOWN_ARGUMENTS or option in REMOVED_ARGUMENTS, option


def test_the_modelled_arguments_are_the_mapping_table_and_older_names_stay_aliases(parser):
    current = {o for a in parser["arguments"] for o in a["options"]}
    assert MODELLED_ARGUMENTS == set(ARGUMENTS)  # the data and the code's mapping agree
    assert set(REMOVED_ARGUMENTS) <= current and all(
        BY_OPTION[o].effect == "removed" for o in REMOVED_ARGUMENTS)
    assert not set(OLDER_ARGUMENTS) & current  # aliases only for names the parser dropped
    for old in ("--checkpoint-num-layers", "--DDP-impl", "--layernorm-epsilon", "--use-legacy-models"):
        assert old in OLDER_ARGUMENTS and old in KNOWN_ARGUMENTS


def test_choices_vtrain_validates_agree_with_the_parser(parser):
    by = {o: a for a in parser["arguments"] for o in a["options"]}
    # the table carries every plain (str or int) choice list of the parser, and only those
    plain = {a["options"][0]: tuple(a["choices"]) for a in parser["arguments"]
             if a.get("choices") and a.get("type") in ("str", "int", None)}
    assert {o: e.choices for o, e in BY_OPTION.items() if e.choices} == {
        o: plain[by[o]["options"][0]] for o in BY_OPTION
        if o in by and by[o]["options"][0] in plain}
    assert set(by["--cross-entropy-fusion-impl"]["choices"]) == set(CROSS_ENTROPY_FUSION_IMPLS)
    backends = {c.split(".")[1].split(":")[0] for c in by["--attention-backend"]["choices"]}
    assert backends == set(ATTENTION_BACKENDS)
    assert set(by["--recompute-granularity"]["choices"]) == {"full", "selective"}
    assert set(by["--recompute-method"]["choices"]) == {"block", "uniform"}
    assert set(by["--fp8-format"]["choices"]) == {"e4m3", "hybrid"}
    assert set(by["--normalization"]["choices"]) >= {"LayerNorm", "RMSNorm"}
    for flag in ("--num-layers", "--hidden-size", "--micro-batch-size", "--tensor-model-parallel-size",
                 "--pipeline-model-parallel-size", "--context-parallel-size", "--num-experts"):
        assert by[flag]["type"] == "int", flag
    for flag, arg in ARGUMENTS.items():  # a switch in the table is a switch in the parser
        if flag in by:
            assert (by[flag]["nargs"] != 0) == arg.value, flag


def test_the_table_carries_the_parsers_int_and_float_types(parser):
    """Every int or float argument of the parser has that type in the table (check_values
    refuses a value that is not one, as argparse does), and no other has a type."""
    want = {tuple(a["options"]): a["type"] for a in parser["arguments"]
            if a.get("type") in ("int", "float")}
    assert {e.options: e.type for e in ENTRIES if e.type} == want
    assert len(want) == 325 and want[("--lr",)] == "float" and want[("--num-layers",)] == "int"


_SMALL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
          "--micro-batch-size 1 --vocab-size 9 ")


@pytest.mark.parametrize("extra, needle", [
    ("--lr aaaa", "'--lr aaaa': 'aaaa' is not a float (--lr has type=float"),
    ("--lr 1 2 aaaa", "'--lr 1 2 aaaa': --lr takes one value (nargs None in Megatron-LM's "
                      "parser), got 3"),
    ("--lr", "'--lr': --lr takes one value (nargs None in Megatron-LM's parser), got 0"),
    ("--eval-iters 1.5", "'1.5' is not an int (--eval-iters has type=int"),
    ("--adam-beta2=x", "'x' is not a float (--adam-beta2 has type=float"),
    ("--log-throughput yes", "--log-throughput is a switch and takes no value, got 'yes'"),
    ("--rampup-batch-size 16 16", "--rampup-batch-size takes 3 values (nargs 3"),
    ("--rampup-batch-size 16 x 100", "'x' is not an int (--rampup-batch-size has type=int"),
    ("--offload-modules", "--offload-modules takes one value or more (nargs '+'"),
    # a mapped argument the mapping does not read (no --num-experts): checked after it
    ("--moe-router-topk x", "'x' is not an int (--moe-router-topk has type=int"),
])
def test_every_argument_is_checked_against_its_type_and_nargs_read_or_not(tmp_path, extra,
                                                                         needle):
    """Megatron-LM's argparse refuses a value that is not the argument's type, or a count of
    values its nargs does not take, before training: so does the import, for the arguments
    it does not read too (--lr, --eval-iters, --log-throughput are neutral)."""
    path = tmp_path / "bad.sh"
    path.write_text(_SMALL + extra, encoding="utf-8")
    with pytest.raises(MegatronArgsError) as err:
        import_file(path, num_gpus=1)
    assert needle in str(err.value) and "argparse refuses it" in str(err.value)
    assert str(err.value).startswith(str(path))


def test_values_of_the_right_type_pass(tmp_path):
    path = tmp_path / "ok.sh"
    path.write_text(_SMALL + "--lr 3e-4 --eval-iters 10 --adam-beta2=0.95 --log-throughput "
                    "--lr-warmup-iters $WARM", encoding="utf-8")
    res = import_file(path, num_gpus=1)  # an unset variable in an unread value: not checked
    assert {"--lr", "--eval-iters", "--adam-beta2", "--log-throughput"} <= set(res.neutral)


# --------------------------------------------------------------------------- launch scripts

# Megatron-LM's examples/llama style (Llama 3 8B FP8 on one H100 node): positional parameters
# with defaults, arrays, += appends inside an if on a known value, DDP arguments given twice
LLAMA3_8B_FP8 = r"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}
TENSORBOARD_LOGS_PATH=${2:-"tensorboard_logs/llama3_8b_fp8"}
TOKENIZER_ARG=${3:-"MOCK"} # Path to tokenizer model, or "MOCK"
DATA_ARG=${4:-"MOCK"}     # Data prefix, or "MOCK"
mkdir -p "$(dirname "$CHECKPOINT_PATH")"

GPUS_PER_NODE=8
NUM_NODES=1
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}
NODE_RANK=${NODE_RANK:-0}
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
PRETRAIN_SCRIPT_PATH="pretrain_gpt.py"
TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32
DTYPE="fp8"
SEQ_LENGTH=8192
DATA_CACHE_PATH="${PWD}/benchmark_cache_llama3_8b_fp8"

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)
MODEL_ARGS=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --rotary-base 1000000
    --rotary-percent 1.0
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --swiglu
    --normalization RMSNorm
    --init-method-std 0.0134
    --attention-backend fused
    --apply-layernorm-1p
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples 1953125000
    --lr 0.00015
    --min-lr 0.00001
    --lr-decay-style cosine
    --clip-grad 1.0
    --weight-decay 0.1
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --calculate-per-token-loss
    --manual-gc
    --empty-unused-memory-level 1
    --exit-duration-in-mins 235
)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
        "--fp8-amax-compute-algo max"
        "--fp8-param-gather"
    )
fi
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
)
DDP_ARGS=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS+=("${DDP_ARGS[@]}")
DATA_ARGS_LIST=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]] || [[ "$DATA_ARG" == "MOCK" ]] || [[ -z "$TOKENIZER_ARG" ]]; then
    DATA_ARGS_LIST+=(
        "--mock-data"
        "--tokenizer-type NullTokenizer"
        "--vocab-size 128256"
        "--data-cache-path ${DATA_CACHE_PATH}"
        "--tiktoken-pattern v2"
        "--split '99,1,0'"
        "--no-create-attention-mask-in-dataloader"
        "--num-workers 1"
    )
else
    DATA_ARGS_LIST+=(
        "--data-path $DATA_ARG"
        "--tokenizer-type HuggingFaceTokenizer"
        "--tokenizer-model $TOKENIZER_ARG"
    )
fi
EVAL_AND_LOGGING_ARGS=(
    --log-interval 1
    --eval-iters 32
    --eval-interval 100
    --save-interval 1000
    --log-throughput
    --distributed-timeout-minutes 60
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$TENSORBOARD_LOGS_PATH"
)
if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]; then
    echo "Error: pretrain_gpt.py not found at $PRETRAIN_SCRIPT_PATH"
    exit 1
fi
torchrun ${DISTRIBUTED_ARGS[@]} \
    "$PRETRAIN_SCRIPT_PATH" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DDP_ARGS[@]} \
    ${DATA_ARGS_LIST[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
set +x
"""


def test_llama3_8b_fp8_example_keeps_fp8_and_the_distributed_optimizer(tmp_path):
    res = import_file(_write(tmp_path, "train_llama3_8b_h100_fp8.sh", LLAMA3_8B_FP8))
    m, p = res.session.model, res.session.plan
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads,
            m.num_query_groups, m.kv_channels, m.seq_length) == (32, 4096, 14336, 32, 8, 128, 8192)
    # NullTokenizer: --vocab-size itself, Llama 3's 128,256 (megatron-core 0.19.2
    # null_tokenizer.py: vocab_size returns int(vocab_size); 0.17.1 added one: 128,257)
    assert m.vocab_size == 128256
    assert (m.activation, m.normalization, m.position_embedding, m.tied_embeddings,
            m.add_bias_linear, m.attention_kernel) == ("swiglu", "rmsnorm", "rope", False, False,
                                                       "flash")
    assert (p.tensor_parallel, p.pipeline_parallel, p.context_parallel, p.data_parallel) == (1, 1, 1, 8)
    assert (p.micro_batch_size, p.global_batch_size) == (1, 128)
    assert (p.precision, p.fp8_recipe, p.fp8_param_gather) == ("fp8", "delayed", True)
    assert p.zero_stage == 1  # --use-distributed-optimizer, appended with TRAINING_ARGS+=(...)
    assert (p.overlap_grad_reduce, p.overlap_param_gather, p.grad_reduce_dtype) == (True, True, "bf16")
    assert (p.recompute, p.sequence_parallel, p.schedule) == ("none", False, "1f1b")
    assert p.cross_entropy_loss_fusion is True
    assert res.session.cluster.gpus_per_node == 8 and res.launch.launcher == "torchrun"
    # --train-samples 1,953,125,000 at B 128: Megatron-LM runs 1,953,125,000 // 128 =
    # 15,258,789 iterations (update_train_iters); the last 8 samples are not run
    assert res.session.cost.training_tokens == 15_258_789 * 128 * 8192
    # the file test needs the machine: said, not guessed
    assert any("-f" in n and "not evaluated" in n for n in res.launch.notes)
    ignored = dict(res.ignored)
    assert {"--manual-gc", "--empty-unused-memory-level"} <= set(ignored)
    assert {"--fp8-amax-history-len", "--lr", "--mock-data"} <= set(res.neutral)
    # --save decides that checkpoints are saved: used, never "not used"
    assert res.used["--save"] == "reliability.checkpoint_interval_iterations"


def test_the_else_branch_is_read_when_the_positional_parameters_choose_it(tmp_path):
    path = _write(tmp_path, "llama.sh", LLAMA3_8B_FP8)
    # HuggingFaceTokenizer needs --vocab-size: the else branch was taken, not the mock one
    with pytest.raises(MegatronArgsError, match="--tokenizer-type HuggingFaceTokenizer"):
        import_file(path, variables={"3": "meta-llama/Meta-Llama-3-8B", "4": "/d/prefix"})
    shell = read_launch(LLAMA3_8B_FP8, "llama.sh", {"1": "/ck", "3": "/t", "4": "/d"})
    assert shell.arguments[shell.arguments.index("--save") + 1] == "/ck"
    assert "--tokenizer-model" in shell.arguments and "--mock-data" not in shell.arguments


def test_llama3_8b_fp8_through_the_cli(tmp_path):
    from tests.test_hardening import cli
    path = _write(tmp_path, "llama.sh", LLAMA3_8B_FP8.replace("GPUS_PER_NODE=8\nNUM_NODES=1\n",
                                                              "GPUS_PER_NODE=8\n"))
    out = tmp_path / "s.json"
    h100 = ("--gpu", "H100-SXM5-80GB")
    proc = cli("import", "megatron-args", str(path), "--out", str(out), "--json", *h100)
    assert proc.returncode == 2
    assert "the variable NUM_NODES is not set in the file" in proc.stderr
    assert "give --var NUM_NODES=VALUE" in proc.stderr
    proc = cli("import", "megatron-args", str(path), "--out", str(out), "--json", *h100,
               "--var", "NUM_NODES=4")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["session"]["plan"]
    assert (plan["data_parallel"], plan["precision"], plan["zero_stage"]) == (32, "fp8", 1)
    proc = cli("import", "megatron-args", str(path), "--out", str(out), "--json", *h100,
               "--nodes", "2")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["session"]["plan"]["data_parallel"] == 16


SBATCH_SRUN = r"""#!/bin/bash
#SBATCH --job-name=gpt-13b
#SBATCH --nodes=4
#SBATCH --gpus-per-node=8
#SBATCH --ntasks-per-node=1
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
cat <<EOF > run_info.txt
it's a here-document: "not a statement
EOF
OPTIONS="--num-layers 40 --hidden-size 5120 --num-attention-heads 40 --seq-length 4096 \
  --max-position-embeddings 4096 --micro-batch-size 2 --global-batch-size 512 \
  --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 --sequence-parallel \
  --recompute-activations --bf16 --vocab-size 32000 --micro-batch-size 4"
srun --container-image nvcr.io/nvidia/pytorch:25.01-py3 bash -c "torchrun --nnodes $SLURM_NNODES \
  --nproc-per-node 8 pretrain_gpt.py ${OPTIONS} --lr 1e-4"
"""


def test_sbatch_with_srun_wrapping_torchrun_and_a_duplicated_argument(tmp_path):
    res = import_file(_write(tmp_path, "job.sbatch", SBATCH_SRUN))
    m, p = res.session.model, res.session.plan
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size) == (
        40, 5120, 40, 4096, 32000)
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel, p.num_gpus) == (4, 2, 4, 32)
    assert p.micro_batch_size == 4  # given twice: the last one wins, as argparse takes it
    assert (p.global_batch_size, p.precision, p.zero_stage) == (512, "bf16", 0)
    assert (p.sequence_parallel, p.recompute) == (True, "selective")
    assert res.launch.launcher == "torchrun" and res.session.cluster.gpus_per_node == 8


DEEPSPEED = r"""#!/bin/bash
python tools/preprocess_data.py --input oscar.jsonl --output-prefix my-gpt2 \
    --vocab-file gpt2-vocab.json --tokenizer-type GPT2BPETokenizer --merge-file gpt2-merges.txt \
    --append-eod --workers 8
NNODES=2
GPUS=8
ZERO_STAGE=1
config_json="./ds_config.json"
options=" \
  --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 \
  --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
  --seq-length 2048 --max-position-embeddings 2048 \
  --micro-batch-size 4 --global-batch-size 256 \
  --train-iters 1000 --lr 2e-4 --fp16 --checkpoint-activations \
  --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --data-path my-gpt2_text_document"
ds_args=" --deepspeed --deepspeed_config=${config_json} --zero-stage=${ZERO_STAGE}"
run_cmd="deepspeed --num_nodes ${NNODES} --num_gpus ${GPUS} pretrain_gpt.py $@ ${options} ${ds_args}"
echo ${run_cmd}
eval ${run_cmd}
set +x
"""


def test_megatron_deepspeed_reads_the_training_line_not_the_data_preparation(tmp_path):
    path = _write(tmp_path, "ds_pretrain_gpt.sh", DEEPSPEED)
    with pytest.raises(MegatronArgsError, match="--deepspeed is not a Megatron-LM argument"):
        import_file(path)
    res = import_file(path, allow_unknown=True)
    m, p = res.session.model, res.session.plan
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size) == (
        24, 2048, 16, 2048, 50257)
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (2, 2, 4)
    assert (p.micro_batch_size, p.global_batch_size, p.precision) == (4, 256, "fp16")
    assert (p.recompute, p.zero_stage) == ("full", 0)
    assert res.launch.launcher == "deepspeed"
    assert {"--deepspeed", "--deepspeed_config", "--zero-stage"} <= set(res.unknown)
    only_data = _write(tmp_path, "prep.sh", DEEPSPEED.split("NNODES=2")[0])
    with pytest.raises(MegatronArgsError, match="no training command: preprocess_data.py"):
        import_file(only_data)


# Megatron-LM's printed arguments (_print_args), as pasted from a log into an issue
DUMP = """\
[rank0]: using world size: 64, data-parallel size: 4, context-parallel size: 1, tensor-model-parallel size: 8, pipeline-model-parallel size: 2
[rank0]: ------------------------ arguments ------------------------
[rank0]:   accumulate_allreduce_grads_in_fp32 .............. False
[rank0]:   add_bias_linear ................................. False
[rank0]:   attention_backend ............................... AttnBackend.auto
[rank0]:   bf16 ............................................ True
[rank0]:   cp_comm_type .................................... ['p2p']
[rank0]:   data_parallel_size .............................. 4
[rank0]:   data_path ....................................... ['/data/llama_text_document']
[rank0]:   ffn_hidden_size ................................. 28672
[rank0]:   fp16 ............................................ False
[rank0]:   fp8 ............................................. hybrid
[rank0]:   global_batch_size ............................... 512
[rank0]:   group_query_attention ........................... True
[rank0]:   hidden_dropout .................................. 0.0
[rank0]:   hidden_size ..................................... 8192
[rank0]:   kv_channels ..................................... 128
[rank0]:   lr .............................................. 0.00015
[rank0]:   micro_batch_size ................................ 1
[rank0]:   normalization ................................... RMSNorm
[rank0]:   num_attention_heads ............................. 64
[rank0]:   num_layers ...................................... 80
[rank0]:   num_layers_per_virtual_pipeline_stage ........... None
[rank0]:   num_query_groups ................................ 8
[rank0]:   overlap_grad_reduce ............................. True
[rank0]:   padded_vocab_size ............................... 128256
[rank0]:   params_dtype .................................... torch.bfloat16
[rank0]:   pipeline_model_parallel_size .................... 2
[rank0]:   position_embedding_type ......................... rope
[rank0]:   rank ............................................ 0
[rank0]:   recompute_granularity ........................... full
[rank0]:   recompute_method ................................ uniform
[rank0]:   recompute_num_layers ............................ 1
[rank0]:   seq_length ...................................... 8192
[rank0]:   sequence_parallel ............................... True
[rank0]:   swiglu .......................................... True
[rank0]:   tensor_model_parallel_size ...................... 8
[rank0]:   tokenizer_type .................................. HuggingFaceTokenizer
[rank0]:   transformer_impl ................................ transformer_engine
[rank0]:   untie_embeddings_and_output_weights ............. True
[rank0]:   use_distributed_optimizer ....................... True
[rank0]:   vocab_size ...................................... None
[rank0]:   world_size ...................................... 64
[rank0]: -------------------- end of arguments ---------------------
"""


def test_a_printed_argument_dump_is_read_through_the_dests(tmp_path):
    res = import_file(_write(tmp_path, "issue.log", DUMP), gpu="H100-SXM5-80GB")
    m, p = res.session.model, res.session.plan
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads,
            m.num_query_groups, m.seq_length, m.vocab_size) == (80, 8192, 28672, 64, 8, 8192, 128256)
    assert (m.activation, m.normalization, m.position_embedding, m.tied_embeddings,
            m.add_bias_linear, m.attention_kernel) == ("swiglu", "rmsnorm", "rope", False, False,
                                                       "flash")
    assert (p.tensor_parallel, p.pipeline_parallel, p.data_parallel) == (8, 2, 4)
    assert (p.micro_batch_size, p.global_batch_size) == (1, 512)
    assert (p.precision, p.zero_stage, p.sequence_parallel, p.recompute) == ("fp8", 1, True, "full")
    assert p.overlap_grad_reduce is True
    assert res.launch.launcher == "argument dump"
    assert {"--lr", "--data-path"} <= set(res.neutral)
    assert m.hidden_dropout == 0.0  # the dump's hidden_dropout: no masks kept


def test_a_dump_reads_the_optimizer_dtypes_validate_args_prints_as_torch_dtypes(tmp_path):
    """validate_args turns --main-grads-dtype, --main-params-dtype, --exp-avg-dtype and
    --exp-avg-sq-dtype into torch dtypes before it prints them (its dtype_map, fp8 as
    torch.uint8), so every dump of a current Megatron-LM has them: read back as the choices
    (they were refused as "invalid choice")."""
    fp32 = "".join(f"[rank0]:   {d} ........ torch.float32\n" for d in
                   ("exp_avg_dtype", "exp_avg_sq_dtype", "main_grads_dtype", "main_params_dtype"))
    text = DUMP.replace("[rank0]:   fp16 ", fp32 + "[rank0]:   fp16 ")
    p = import_file(_write(tmp_path, "dump.log", text), gpu="H100-SXM5-80GB").session.plan
    assert (p.use_precision_aware_optimizer, p.main_params_dtype, p.exp_avg_dtype,
            p.exp_avg_sq_dtype) == (False, "fp32", "fp32", "fp32")
    aware = (text.replace("exp_avg_dtype ........ torch.float32", "exp_avg_dtype ........ torch.bfloat16")
             .replace("exp_avg_sq_dtype ........ torch.float32", "exp_avg_sq_dtype ........ torch.uint8")
             .replace("[rank0]:   fp16 ", "[rank0]:   use_precision_aware_optimizer .... True\n"
                      "[rank0]:   fp16 "))
    p = import_file(_write(tmp_path, "aware.log", aware), gpu="H100-SXM5-80GB").session.plan
    assert (p.use_precision_aware_optimizer, p.main_params_dtype, p.exp_avg_dtype,
            p.exp_avg_sq_dtype) == (True, "fp32", "bf16", "fp8")


# Slurm launch as posted in issues: the master address from scontrol (a command's output),
# inside a DISTRIBUTED_ARGS string that also holds the world size
SLURM_STRING_ARGS = r"""#!/bin/bash
NNODES=${SLURM_NNODES:-4}
MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
DISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes $NNODES --node_rank $SLURM_NODEID --master_addr $MASTER_ADDR --master_port 6000"
torchrun $DISTRIBUTED_ARGS pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 4096 \
    --micro-batch-size 1 --global-batch-size 256 --vocab-size 32000 --bf16 \
    --tensor-model-parallel-size 2
"""


def test_a_string_of_arguments_keeps_its_known_words_beside_an_unknown_master_address(tmp_path):
    """bash expands DISTRIBUTED_ARGS with MASTER_ADDR's value in place: the reader keeps the
    other words (the world size) and leaves $MASTER_ADDR as written, where nothing needs it;
    a word that needs an unknown value names that variable."""
    text = SLURM_STRING_ARGS
    res = import_file(_write(tmp_path, "slurm.sh", text))
    p = res.session.plan
    assert (p.tensor_parallel, p.data_parallel, p.num_gpus) == (2, 16, 32)
    unset = text.replace("NNODES=${SLURM_NNODES:-4}", "NNODES=$SLURM_NNODES")
    with pytest.raises(MegatronArgsError) as err:
        import_file(_write(tmp_path, "unset.sh", unset))
    assert "NNODES" in str(err.value)
    res = import_file(tmp_path / "unset.sh", variables={"SLURM_NNODES": "2"})
    assert res.session.plan.num_gpus == 16


# An unknown variable standing alone among the words may hold several words (bash splits it):
# the launcher's counts, or Megatron arguments. Beside known words it must not drop out.
_TRAIN = (" pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 "
          "--seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --vocab-size 32000 "
          "--bf16")


def _named_then_read(tmp_path, text: str, extra: str):
    """``text`` (a launch with ``EXTRA`` from a command) written, its import refused naming
    EXTRA, then imported with ``EXTRA=extra``: ``(path, import)``."""
    path = _write(tmp_path, "extra.sh", text)
    with pytest.raises(MegatronArgsError) as err:
        import_file(path)
    assert "EXTRA" in str(err.value)
    return path, import_file(path, variables={"EXTRA": extra})


@pytest.mark.parametrize("launcher", [
    'DA="--nproc_per_node 8 $EXTRA"\ntorchrun $DA',       # inside a string of known words
    'torchrun --nproc_per_node 8 $EXTRA',                  # beside them on the command line
])
def test_an_unknown_variable_among_the_launchers_options_is_named(tmp_path, launcher):
    """$EXTRA (from a command) may hold --nnodes 4: the world size is refused naming EXTRA,
    not taken as 8 GPUs on one node; given EXTRA, it is read."""
    text = "EXTRA=$(cat launch_extra.txt)\n" + launcher + _TRAIN + "\n"
    path, res = _named_then_read(tmp_path, text, "--nnodes 4")
    assert res.session.plan.num_gpus == 32
    assert import_file(path, num_gpus=16).session.plan.num_gpus == 16


@pytest.mark.parametrize("args", [
    'PA="--lr 1e-4 $EXTRA"',                               # after a flag's one value
    'PA="--use-distributed-optimizer $EXTRA"',             # after a switch
    'PA="$EXTRA --lr 1e-4"',                               # before any flag
])
def test_an_unknown_variable_among_megatron_arguments_is_named(tmp_path, args):
    """$EXTRA may hold --tensor-model-parallel-size 8: refused naming EXTRA, never dropped."""
    text = (f"EXTRA=$(cat extra_args.txt)\n{args}\n"
            "torchrun --nproc_per_node 8 --nnodes 1" + _TRAIN + " $PA\n")
    _, res = _named_then_read(tmp_path, text, "--tensor-model-parallel-size 8")
    assert res.session.plan.tensor_parallel == 8


def test_a_dump_gives_the_world_size_not_the_gpus_per_node(tmp_path, capsys):
    """A printed dump has world_size (64) but not how the GPUs split into nodes: the import
    takes nodes of the GPU's NVLink domain (8 H100s; one node, partly used, when the world is
    smaller) and says so, where it read 64 GPUs on one node, which the command line refused as larger than
    the NVLink domain. ``padded_vocab_size`` is the vocabulary when the dump's vocab_size is
    None (noted), not an ignored argument."""
    path = _write(tmp_path, "issue.log", DUMP)
    res = import_file(path, gpu="H100-SXM5-80GB")
    assert (res.session.cluster.gpus_per_node, res.session.plan.num_gpus) == (8, 64)
    assert [n for f, n in res.notes if f == "GPUs per node"] == [
        "8: the H100-SXM5-80GB's NVLink domain (the launch gives only the world size, 64); give "
        "--gpus-per-node G for your nodes"]
    assert "--padded-vocab-size" not in res.ignored
    assert any("padded_vocab_size 128,256" in n for n in res.launch.notes)
    # 64 GB200s: one NVL72 rack, partly used (no note: one node is no assumption)
    one_rack = import_file(path, gpu="GB200-NVL72")
    assert one_rack.session.cluster.gpus_per_node == 72
    assert not [n for f, n in one_rack.notes if f == "GPUs per node"]
    assert import_file(path, gpu="H100-SXM5-80GB",
                       gpus_per_node=4).session.cluster.gpus_per_node == 4
    out = tmp_path / "s.json"
    assert main(["import", "megatron-args", str(path), "--gpu", "H100-SXM5-80GB",
                 "--out", str(out)]) == 0
    assert "GPUs per node: 8" in " ".join(capsys.readouterr().out.split())
    # 12 GPUs (t=4 p=1 d=3) are not whole nodes of 8: refused, never 1.5 nodes (torchrun and
    # srun start as many processes on every node); --gpus-per-node gives them
    edits = {"world_size": ("64", "12"), "pipeline_model_parallel_size": ("2", "1"),
             "data_parallel_size": ("4", "3"), "tensor_model_parallel_size": ("8", "4")}
    lines = []
    for line in DUMP.splitlines():
        dest = line.split()[1] if line.startswith("[rank0]:   ") else ""
        if dest in edits:
            line = line[:-len(edits[dest][0])] + edits[dest][1]
        lines.append(line)
    twelve = _write(tmp_path, "w12.log", "\n".join(lines) + "\n")
    with pytest.raises(MegatronArgsError, match="not a multiple of the H100-SXM5-80GB's 8 GPUs "
                                                "per host"):
        import_file(twelve, gpu="H100-SXM5-80GB")
    assert import_file(twelve, gpu="H100-SXM5-80GB", gpus_per_node=4).session.plan.num_gpus == 12


def test_num_gpus_alone_takes_nodes_of_the_gpus_nvlink_domain(tmp_path):
    """``--num-gpus 144`` with ``--gpu GB200`` and a launch without a launcher's per-node count
    is two NVL72 racks (core.plan.cluster.GPU_NVLINK_DOMAIN: 72), noted; it was 18 nodes of
    8, the field's HGX default, which put most of the data-parallel ring on the NICs. A
    world that is not whole nodes of the domain is refused asking for --gpus-per-node."""
    path = _write(tmp_path, "plain.sh", "python" + _TRAIN.replace("256", "288") + "\n")
    res = import_file(path, gpu="GB200-NVL72", num_gpus=144)
    assert (res.session.cluster.gpus_per_node, res.session.plan.num_gpus) == (72, 144)
    assert [n for f, n in res.notes if f == "GPUs per node"] == [
        "72: the GB200-NVL72's NVLink domain (--num-gpus gives only the world size, 144); give "
        "--gpus-per-node G for your nodes"]
    assert import_file(path, gpu="H100-SXM5-80GB",
                       num_gpus=16).session.cluster.gpus_per_node == 8
    assert import_file(path, gpu="H100-SXM5-80GB",
                       num_gpus=4).session.cluster.gpus_per_node == 8  # one HGX board, half used
    with pytest.raises(MegatronArgsError, match=r"--num-gpus gives only the world size, 12, "
                                                "which is not a multiple of the H100-SXM5-80GB's"):
        import_file(path, gpu="H100-SXM5-80GB", num_gpus=12)
    assert import_file(path, gpu="H100-SXM5-80GB", num_gpus=12,
                       gpus_per_node=4).session.cluster.gpus_per_node == 4


def _argparse_of(parser: dict, flags: set[str]):
    """Megatron-LM's parser for ``flags``, rebuilt with argparse from arguments.json (its
    action, int/float type, nargs, choices; ``allow_abbrev=False`` as Megatron-LM's)."""
    import argparse
    out = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for a in parser["arguments"]:
        if not flags & set(a["options"]):
            continue
        if a["action"] == "_StoreAction":
            kw = {"type": {"int": int, "float": float}.get(a["type"], str)}
            kw.update({"nargs": a["nargs"]} if a["nargs"] is not None else {})
            kw.update({"choices": a["choices"]} if a["choices"] else {})
            out.add_argument(*a["options"], dest=a["dest"], **kw)
        else:
            out.add_argument(*a["options"], dest=a["dest"], action={
                "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false"}[a["action"]])
    return out


def _argparse_takes(p, words: list[str]) -> bool:
    import argparse
    import contextlib
    import io
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            _, rest = p.parse_known_args(words)
    except (argparse.ArgumentError, SystemExit):
        return False
    return not rest  # Megatron-LM's parse_args stops on the words left over


@pytest.mark.parametrize("extra", [
    # type=float: Python's float()
    "--lr 1e-4", "--lr .5", "--lr 1E-4", "--lr -1", "--lr -.5", "--lr inf", "--lr nan",
    "--lr 1_000", "--lr=-1e-4", "--lr infinity", "--lr 1e999", "--lr 0x10", "--lr ''",
    "--lr -1e-4", "--lr -", "--lr 1 --lr 2",
    # type=int: Python's int(), read by the import (--num-layers, --micro-batch-size) or not
    "--eval-iters 0x10", "--eval-iters 1_000", "--eval-iters +8", "--eval-iters ' 8'",
    "--eval-iters -3", "--eval-iters=-3", "--eval-iters 8.0", "--eval-iters 1__0",
    "--num-layers 1_0", "--num-layers +2", "--num-layers ' 2'", "--num-layers 0x2",
    "--num-layers 2.0", "--micro-batch-size +1", "--hidden-size 6_4",
    # int choices: argparse converts first, then compares
    "--timing-log-level 0_1", "--timing-log-level ' 1'", "--timing-log-level +1",
    "--timing-log-level ²", "--timing-log-level 3",
    # a value word that starts with '-' is an option to argparse unless a plain negative number
    "--data-path -corpus", "--data-path a -corpus", "--tokenizer-type -x",
    "--num-layers-per-virtual-pipeline-stage -1e0",
    # abbreviations: allow_abbrev=False
    "--num-lay 2", "--hidden 64",
    # a flag given twice: the last wins, but argparse checks each occurrence as it comes (the
    # earlier one was dropped unchecked)
    "--lr x --lr 1", "--lr 1 2 --lr 3", "--lr --lr 1", "--num-layers x --num-layers 2",
    "--normalization bad --normalization RMSNorm", "--use-flash-attn=1 --use-flash-attn",
    "--lr -1e-4 --lr 1", "--lr 1 --lr 2", "--num-layers 4 --num-layers 2",
])
def test_launch_values_are_taken_exactly_as_megatrons_argparse_takes_them(tmp_path, parser,
                                                                          extra):
    """The import takes a launch's values as Megatron-LM's argparse does (Python's int() and
    float() of each word, a value word starting with '-' only as argparse's negative number,
    no abbreviations), checked against argparse itself on the parser arguments.json records:
    it refused --num-layers 1_0, +2 and ' 2' (int() takes them), --timing-log-level 0_1, and
    took --lr -1e-4 and --data-path -corpus, which argparse reads as options and refuses, and
    an earlier occurrence of a flag given twice unchecked (--lr x --lr 1). A
    value argparse takes but no model can have (0 layers) is still refused, by the import's
    own rule, so only launches argparse takes are compared both ways."""
    import shlex
    base = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
            "--micro-batch-size 1 --vocab-size 9 ")
    words = shlex.split(base + extra)
    # the later value of a flag given twice wins, in both
    p = _argparse_of(parser, {w.partition("=")[0] for w in words if w.startswith("--")}
                     | {"--num-layers", "--hidden-size", "--data-path", "--lr"})
    takes = _argparse_takes(p, words)
    path = _write(tmp_path, "a.sh", base + extra)
    try:
        import_file(path, num_gpus=1)
        imported = True
    except MegatronArgsError as exc:
        imported = False
        assert str(path) in str(exc)
    assert imported == takes, (extra, takes)
