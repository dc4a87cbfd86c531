"""Launch scripts as users post them with a measured throughput (BLOOM's tr11-176B-ml,
Megatron-DeepSpeed's ``CMD`` strings): what the launch reader takes from them, checked
against bash where bash is installed."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.io.shell_reader import read_shell

BASH = shutil.which("bash")

#: BigScience's tr11-176B-ml.slurm: a flag commented out, its line still ending in a backslash
COMMENTED_CONTINUATION = """\
OPTIMIZER_ARGS=" \\
    --lr 6e-5 \\
    "
# for 20h 1190, for 100h 5990
#    --exit-duration-in-mins 1190 \\
EXIT_OPTS=" \\
    --exit-duration-in-mins 5990 \\
    "
echo "$EXIT_OPTS"
"""

TINY = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
        "--micro-batch-size 1 --vocab-size 1000")


def test_a_backslash_ending_a_comment_does_not_continue_the_line():
    # bash ends a comment at its newline, backslash or not: EXIT_OPTS is assigned (it was
    # read into the comment, and the launch refused as holding an unset $EXIT_OPTS)
    env = read_shell(COMMENTED_CONTINUATION).variables
    assert env["EXIT_OPTS"].split() == ["--exit-duration-in-mins", "5990"]
    assert env["OPTIMIZER_ARGS"].split() == ["--lr", "6e-5"]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_a_backslash_ending_a_comment_as_bash_reads_it():
    out = subprocess.run([BASH, "-c", COMMENTED_CONTINUATION], capture_output=True, text=True,
                         timeout=10).stdout
    assert out.split() == read_shell(COMMENTED_CONTINUATION).variables["EXIT_OPTS"].split()


def test_a_continuation_inside_double_quotes_still_joins():
    env = read_shell('A="--x 1 \\\n  --y 2"\n').variables
    assert env["A"].split() == ["--x", "1", "--y", "2"]


def test_a_command_substitution_glued_to_the_script_path_keeps_the_other_words():
    # Megatron-DeepSpeed scripts: export CMD=" `pwd`/pretrain_gpt.py --tensor-model-parallel-size
    # ..." (the whole string was unknown: "no Megatron-LM arguments found")
    script = f'export CMD=" \\\n    `pwd`/pretrain_gpt.py \\\n    {TINY} \\\n    "\n' \
             "torchrun --nproc_per_node 8 $CMD\n"
    launch = read_launch(script, "bloom.slurm")
    assert launch.script.endswith("/pretrain_gpt.py")
    assert launch.arguments[launch.arguments.index("--num-layers") + 1] == "2"
    assert launch.nproc_per_node == 8


def test_a_command_substitution_standing_as_a_word_stays_unknown():
    # its output may be any number of words: the variable is named, never guessed
    script = f'CMD="$(cat /job/args.txt) {TINY}"\ntorchrun --nproc_per_node 8 pretrain_gpt.py $CMD\n'
    with pytest.raises(MegatronArgsError, match=r"the variable CMD .*--var CMD=VALUE"):
        session_from_launch(read_launch(script, "x.sh"))


def test_a_launch_behind_an_unknown_variable_names_it():
    script = "CMD=$(cat /job/args.txt)\ntorchrun --nproc_per_node 8 $CMD\n"
    with pytest.raises(MegatronArgsError) as err:
        read_launch(script, "x.sh")
    msg = str(err.value)
    assert "x.sh: no Megatron-LM arguments found: the launch 'torchrun --nproc_per_node 8 $CMD'" \
        in msg
    assert "--var CMD=VALUE" in msg


def _world(script: str, **kw) -> tuple[int, int]:
    """(GPUs, GPUs per node) of the session a launch imports to."""
    s = session_from_launch(read_launch(script, "x.sh"), **kw).session
    return (s.plan.tensor_parallel * s.plan.pipeline_parallel * s.plan.data_parallel,
            s.cluster.gpus_per_node)


def test_mpirun_process_counts_give_the_world_size():
    # Open MPI: -np the processes in all, -N / -npernode those per node (not srun's nodes)
    assert _world(f"mpirun -np 16 -npernode 8 python pretrain_gpt.py {TINY}\n") == (16, 8)
    assert _world(f"mpirun -np 32 -N 8 --bind-to none python pretrain_gpt.py {TINY}\n") == (32, 8)
    launch = read_launch(f"mpirun -np 32 -N 8 python pretrain_gpt.py {TINY}\n", "x.sh")
    assert (launch.nnodes, launch.nproc_per_node) == (4, 8)
    # -np alone: the world, its nodes those of the GPU kind's NVLink domain
    assert _world(f"mpirun -np 16 python pretrain_gpt.py {TINY}\n")[0] == 16
    with pytest.raises(MegatronArgsError, match="not a whole number of nodes of 8"):
        read_launch(f"mpirun -np 12 -npernode 8 python pretrain_gpt.py {TINY}\n", "x.sh")


def test_srun_node_count_is_still_nodes():
    launch = read_launch(f"srun -N 2 --ntasks-per-node 8 python pretrain_gpt.py {TINY}\n", "x.sh")
    assert (launch.nnodes, launch.nproc_per_node) == (2, 8)


def test_torchrun_nproc_per_node_gpu_asks_for_the_hosts_gpus():
    # torchrun's --nproc-per-node gpu (or auto) is the host's GPU count, not in the script
    script = f"torchrun --nproc-per-node=gpu --nnodes=2 pretrain_gpt.py {TINY}\n"
    with pytest.raises(MegatronArgsError, match=r"--nproc-per-node gpu: one process per GPU of "
                       r"the host.*give --gpus-per-node G"):
        session_from_launch(read_launch(script, "x.sh"))
    assert _world(script, gpus_per_node=8) == (16, 8)
    assert _world(script, num_gpus=16)[0] == 16
    assert _world(f"torchrun --nproc_per_node auto pretrain_gpt.py {TINY}\n",
                  gpus_per_node=4)[0] == 4


ARGS = "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 1 --vocab-size 1000"


def _session(extra: str, **kw):
    text = f"torchrun --nproc_per_node 8 pretrain_gpt.py {ARGS} {extra}\n"
    return session_from_launch(read_launch(text, "x.sh"), **kw).session


def test_encoder_seq_length_alone_is_the_sequence_length():
    # Megatron-LM's validate_args: args.seq_length = args.encoder_seq_length when only it is
    # given (the import refused: "missing --seq-length")
    assert _session("--encoder-seq-length 2048").model.seq_length == 2048
    assert _session("--seq-length 1024").model.seq_length == 1024


def test_encoder_num_layers_alone_is_the_layer_count():
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py --encoder-num-layers 6 --hidden-size 64 "
            "--num-attention-heads 4 --seq-length 128 --micro-batch-size 1 --vocab-size 1000\n")
    assert session_from_launch(read_launch(text, "x.sh")).session.model.num_layers == 6


def test_both_names_of_the_sequence_length_are_refused():
    # validate_args asserts encoder_seq_length is None when --seq-length is given (it was
    # listed as ignored and the run simulated at --seq-length)
    with pytest.raises(MegatronArgsError, match="--seq-length and --encoder-seq-length are both"):
        _session("--seq-length 4096 --encoder-seq-length 2048")


def test_a_printed_dump_with_encoder_seq_length_reads():
    # validate_args sets encoder_seq_length from seq_length: a dump prints both
    dump = ("------------------------ arguments ------------------------\n"
            "  encoder_seq_length .............................. 512\n"
            "  hidden_size ..................................... 64\n"
            "  micro_batch_size ................................ 1\n"
            "  num_attention_heads ............................. 4\n"
            "  num_layers ...................................... 2\n"
            "  seq_length ...................................... 512\n"
            "  vocab_size ...................................... 1000\n"
            "  world_size ...................................... 8\n"
            "-------------------- end of arguments ---------------------\n")
    assert session_from_launch(read_launch(dump, "log.txt")).session.model.seq_length == 512


def test_activations_checkpoint_method_is_full_recomputation():
    # Megatron-LM's examples/pretrain_gpt3_175B.sh (2021): --activations-checkpoint-method
    # uniform, --activations-checkpoint-num-layers 1 by default (was refused as unknown)
    s = _session("--seq-length 128 --activations-checkpoint-method uniform")
    assert (s.plan.recompute, s.plan.recompute_num_layers) == ("full", None)
    s = _session("--seq-length 128 --pipeline-model-parallel-size 2 "
                 "--activations-checkpoint-method block --activations-checkpoint-num-layers 2")
    assert (s.plan.recompute, s.plan.recompute_num_layers) == ("full", 2)
    with pytest.raises(MegatronArgsError, match="--distribute-checkpointed-activations"):
        _session("--seq-length 128 --tensor-model-parallel-size 2 --activations-checkpoint-"
                 "method uniform --distribute-checkpointed-activations")


#: Parameter operations launch scripts use (model names lower-cased for a case, file names cut
#: from paths, the script's own arguments passed on with "${@:2}"), each with bash's value.
OPERATIONS = r'''
P=/data/models/llama-2-13b.tar.gz
S=Llama2-13B
A=(a b c d e)
R1=${P##*/}
R2=${P#*/}
R3=${P%%.*}
R4=${P%.*}
R5=${S,,}
R6=${S^^}
R7=${S,}
R8=${P/llama/LL}
R9=${P//a/_}
R10=${P/#\/data/X}
R11=${P/%gz/bz}
R12=${S:2:3}
R13=${S: -3}
R14="${A[@]:1:2}"
R15="${@:2}"
R16="${@:2:2}"
R17=${S:1}
R18=${P//[ae]/}
R19="${A[@]}"
R20=${P/*\//}
'''
BASH_VALUES = {
    "R1": "llama-2-13b.tar.gz", "R2": "data/models/llama-2-13b.tar.gz",
    "R3": "/data/models/llama-2-13b", "R4": "/data/models/llama-2-13b.tar",
    "R5": "llama2-13b", "R6": "LLAMA2-13B", "R7": "llama2-13B",
    "R8": "/data/models/LL-2-13b.tar.gz", "R9": "/d_t_/models/ll_m_-2-13b.t_r.gz",
    "R10": "X/models/llama-2-13b.tar.gz", "R11": "/data/models/llama-2-13b.tar.bz",
    "R12": "ama", "R13": "13B", "R14": "b c", "R15": "y z w", "R16": "y z",
    "R17": "lama2-13B", "R18": "/dt/modls/llm-2-13b.tr.gz", "R19": "a b c d e",
    "R20": "llama-2-13b.tar.gz"}


def test_parameter_operations_as_bash_evaluates_them():
    # ${NAME%pattern}, ${NAME,,}, ${@:2} ... were left unknown ("the variable NAME is not
    # set"), and "${A[@]}" assigned to a variable lost its spaces
    env = read_shell(OPERATIONS, positional=["x", "y", "z", "w"]).variables
    assert {k: env[k] for k in BASH_VALUES} == BASH_VALUES


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_the_parameter_operations_table_is_bashs():
    echo = "".join(f'echo "{k}=${k}"\n' for k in BASH_VALUES)
    out = subprocess.run([BASH, "-c", OPERATIONS + echo, "bash", "x", "y", "z", "w"],
                         capture_output=True, text=True, timeout=10).stdout
    assert dict(line.split("=", 1) for line in out.splitlines()) == BASH_VALUES


def test_a_size_case_on_a_lower_cased_argument_and_the_rest_passed_on():
    script = ('SIZE=${1:-7B}\ncase ${SIZE,,} in\n  7b) L=32; H=4096; A=32 ;;\n'
              '  13b) L=40; H=5120; A=40 ;;\nesac\n'
              'torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $L --hidden-size $H '
              '--num-attention-heads $A --seq-length 4096 --micro-batch-size 1 '
              '--vocab-size 32000 --bf16 "${@:2}"\n')
    launch = read_launch(script, "x.sh", {"1": "13B", "2": "--tensor-model-parallel-size",
                                          "3": "2"})
    s = session_from_launch(launch).session
    assert (s.model.num_layers, s.model.hidden_size, s.plan.tensor_parallel) == (40, 5120, 2)


def test_a_substitution_on_a_long_value_stays_unknown_and_quick():
    import time
    long = "a" * 5000
    t0 = time.perf_counter()
    env = read_shell(f"V={long}\nW=${{V//a*b/x}}\nX=${{V%%a*b}}\n").variables
    assert time.perf_counter() - t0 < 1.0
    assert not isinstance(env.get("W"), str) and not isinstance(env.get("X"), str)


def test_model_arguments_in_a_yaml_file_or_a_checkpoint_are_named():
    # "Megatron-LM needs them to build the model" was wrong: it reads them from there
    text = "torchrun --nproc_per_node 8 pretrain_gpt.py --yaml-cfg /cfg/gpt.yaml\n"
    with pytest.raises(MegatronArgsError, match=r"missing --num-layers.*takes its arguments "
                       r"from --yaml-cfg /cfg/gpt\.yaml, which vtrain does not read"):
        session_from_launch(read_launch(text, "x.sh"))
    text = ("torchrun --nproc_per_node 8 pretrain_gpt.py --use-checkpoint-args --load /ckpt "
            "--micro-batch-size 1 --bf16\n")
    with pytest.raises(MegatronArgsError, match=r"from the checkpoint in /ckpt "
                       r"\(--use-checkpoint-args\), which vtrain does not read"):
        session_from_launch(read_launch(text, "x.sh"))


def test_checkpoint_arguments_beside_the_launchs_are_noted():
    res = session_from_launch(read_launch(
        f"torchrun --nproc_per_node 8 pretrain_gpt.py --use-checkpoint-args --load /ckpt "
        f"{ARGS} --seq-length 128\n", "x.sh"))
    assert res.session.model.num_layers == 8
    assert any(about == "--use-checkpoint-args" and "check they agree" in note
               for about, note in res.notes)


def test_an_outer_launcher_of_torchrun_keeps_torchruns_counts():
    # one srun / mpirun task per node running torchrun: torchrun's counts give the world
    launch = read_launch("mpirun -np 2 -npernode 1 torchrun --nnodes 2 --nproc_per_node 8 "
                         f"pretrain_gpt.py {TINY}\n", "x.sh")
    assert (launch.nnodes, launch.nproc_per_node) == (2, 8)
    launch = read_launch(f"srun -n 2 torchrun --nproc_per_node 8 pretrain_gpt.py {TINY}\n", "x.sh")
    assert launch.nproc_per_node == 8 and launch.world_size is None
