"""The launch-script reader's compound commands: ``case``, functions and ``&&``/``||`` lists.

Where the words are known the reader takes what bash takes (checked against bash itself);
where they are not, what it reads is noted or the script is refused, never a branch picked in
silence.
"""

from __future__ import annotations

import fnmatch
import re
import json
import shutil
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import session_from_launch
from core.io.shell_reader import read_shell
from core.io.shell_words import ShellError
from tests.test_hardening import cli

BASH = shutil.which("bash")

CASE_SCRIPT = """#!/bin/bash
MODEL_SIZE=${MODEL_SIZE:-8B}
case "$MODEL_SIZE" in
    8B)
        NUM_LAYERS=32
        HIDDEN=4096
        ;;
    70B)
        NUM_LAYERS=80
        HIDDEN=8192
        ;;
    *)
        echo "unknown"; exit 1
        ;;
esac
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py --num-layers $NUM_LAYERS --hidden-size \
$HIDDEN --num-attention-heads 64 --seq-length 4096 --micro-batch-size 1 --vocab-size 32000 --bf16
"""

TORCHRUN = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
            "--num-attention-heads 4 --seq-length 128 --micro-batch-size 1 --vocab-size 1000 "
            "--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP")


def _arg(launch, flag: str) -> str:
    return launch.arguments[launch.arguments.index(flag) + 1]


# --------------------------------------------------------------------------- case

def test_the_testers_case_script_takes_the_branch_bash_takes(tmp_path):
    path = tmp_path / "case.sh"
    path.write_text(CASE_SCRIPT)
    out = tmp_path / "s.json"
    for extra, layers, hidden in (((), 32, 4096), (("--var", "MODEL_SIZE=70B"), 80, 8192)):
        proc = cli("import", "megatron-args", str(path), "--out", str(out), "--json",
                   "--gpu", "H100-SXM5-80GB", *extra)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        model = doc["session"]["model"]
        assert (model["num_layers"], model["hidden_size"]) == (layers, hidden)
        assert doc["reader"] == []


def test_a_case_no_branch_matches_sets_nothing():
    # the * branch exits, as bash does: no command is read, and the message says where
    with pytest.raises(MegatronArgsError, match="bash exits at 'echo \"unknown\"; exit 1'"):
        session_from_launch(read_launch(CASE_SCRIPT, "case.sh", {"MODEL_SIZE": "13B"}))
    # without the exit, the * branch sets neither value: the one the launch needs is named
    script = CASE_SCRIPT.replace('echo "unknown"; exit 1', 'echo "unknown"')
    with pytest.raises(MegatronArgsError, match="NUM_LAYERS"):
        session_from_launch(read_launch(script, "case.sh", {"MODEL_SIZE": "13B"}))


@pytest.mark.parametrize("size, want", [("8B", "1"), ("70B", "2"), ("70b", "2"), ("13B", "4"),
                                        ("1.5B", "3"), ("x", "3")])
def test_one_line_branches_alternatives_globs_and_the_default(size, want):
    text = ('case $S in (8B) X=1 ;; "70B"|70b) X=2;; 1[0-9]B|1?9B) X=4 ;;\n'
            '  *) X=3 ;; esac\n')
    assert read_shell(text, variables={"S": size}).variables["X"] == want


def test_a_case_inside_a_branch_bash_skips_is_skipped_and_nested_ifs_are_read():
    text = ("A=a\nif [ $A = b ]; then\ncase $A in\n a) X=1;;\nesac\nfi\n"
            "case $A in\n a) if [ $A = a ]; then Y=1; else Y=2; fi;;\n *) Y=3\nesac\n")
    env = read_shell(text).variables
    assert "X" not in env and env["Y"] == "1"


def test_a_case_on_an_unknown_word_is_read_in_order_and_noted():
    text = "S=$(cat size)\ncase $S in\n 8B) X=1 ;;\n 70B) X=2 ;;\nesac\n"
    shell = read_shell(text)
    assert shell.variables["X"] == "2"  # as an undecided if: every branch read, in order
    assert len(shell.notes) == 1 and "--var S=" in shell.notes[0]
    launch = read_launch(CASE_SCRIPT.replace("${MODEL_SIZE:-8B}", "$(cat size)"), "c.sh")
    assert len(launch.notes) == 1 and "MODEL_SIZE" in launch.notes[0]


@pytest.mark.parametrize("text", [
    "case a in\n a) X=1;&\n *) X=2;;\nesac\n",  # fall-through
    "case a in\n a) X=1;;&\n *) X=2;;\nesac\n",
    "case a in\n a) X=1;;\n",  # no esac
    "case a\nin a) X=1;;\nesac\n",  # 'in' on another line
    "case a in\n a\n) X=1;;\nesac\n",  # a pattern over two lines
    "true && case a in a) X=1;; esac\n",
])
def test_case_forms_the_reader_does_not_read_are_refused(text):
    with pytest.raises(ShellError, match="script: .*case"):
        read_shell(text)


# --------------------------------------------------------------------------- functions

def test_a_function_never_called_changes_nothing():
    text = ("TP=2\nset_tp() { TP=8; }\nfunction launch {\n  torchrun pretrain_gpt.py "
            "--num-layers 99\n}\n" + TORCHRUN + "\n")
    launch = read_launch(text, "f.sh", {"PP": "1"})
    assert _arg(launch, "--tensor-model-parallel-size") == "2"
    assert _arg(launch, "--num-layers") == "2" and launch.notes == []
    with pytest.raises(MegatronArgsError, match="no Megatron-LM arguments"):
        read_launch("run() {\n  " + TORCHRUN + "\n}\n", "f.sh")


def test_a_called_function_runs_its_body_with_its_arguments():
    text = ("Y=1\nset_parallel() {\n  local Y=$2\n  TP=$1\n  PP=$Y\n  if [ -z \"$3\" ]; then\n"
            "    return\n  fi\n  TP=99\n}\nset_parallel 4 2\nrun() { " + TORCHRUN + "; }\nrun\n")
    shell = read_shell(text)
    assert (shell.variables["TP"], shell.variables["PP"], shell.variables["Y"]) == ("4", "2", "1")
    assert shell.commands[-1][-4:] == ["--tensor-model-parallel-size", "4",
                                       "--pipeline-model-parallel-size", "2"]
    assert shell.notes == []


def test_a_function_defined_in_a_branch_bash_skips_is_not_defined():
    shell = read_shell("if false; then\n  f() { X=1; }\nfi\nf\n")
    assert "X" not in shell.variables


@pytest.mark.parametrize("text", ["f() {\n  X=1\n", "f() ( X=1 )\n", "f() { f; }\nf\n"])
def test_function_forms_the_reader_does_not_read_are_refused(text):
    with pytest.raises(ShellError, match="script: .*function"):
        read_shell(text)


# --------------------------------------------------------------------------- && and ||

@pytest.mark.parametrize("values, tp, pp", [({"TP": "4", "PP": "3"}, "4", "3"),
                                           ({"TP": "", "PP": ""}, "2", "1")])
def test_and_or_lists_assign_only_where_bash_does(values, tp, pp):
    text = '[ -z "$TP" ] && TP=2\n[ -n "$PP" ] || PP=1\n' + TORCHRUN + "\n"
    launch = read_launch(text, "x.sh", values)
    assert _arg(launch, "--tensor-model-parallel-size") == tp
    assert _arg(launch, "--pipeline-model-parallel-size") == pp
    assert launch.notes == []


def test_an_unknown_status_is_read_and_noted():
    shell = read_shell('[ -z "$TP" ] && TP=2\nN=$(nproc) || N=8\n')
    assert (shell.variables["TP"], shell.variables["N"]) == ("2", "8")
    assert len(shell.notes) == 2 and "TP" in shell.notes[0] and "nproc" in shell.notes[1]
    # a guard that only stops the script changes nothing the launch is read from: no note
    assert read_shell('mkdir -p "$DIR" || { echo no; exit 1; }\n').notes == []
    # a group is noted once, where it changed something
    shell = read_shell('[ -z "$X" ] && {\n  TP=2\n  PP=2\n}\n')
    assert (shell.variables["TP"], shell.variables["PP"]) == ("2", "2") and len(shell.notes) == 1


def test_groups_follow_their_list():
    text = ('TP=4\n[ -z "$TP" ] && { TP=2; PP=2; }\n[ "$TP" -eq 4 ] && {\n  PP=1\n}\n'
            '[ $TP = 4 ] || PP=9\n')
    env = read_shell(text).variables
    assert (env["TP"], env["PP"]) == ("4", "1")


# --------------------------------------------------------------------------- against bash

BASH_CASES = [
    'S=70B\ncase "$S" in\n 8B)\n  T=1\n  ;;\n 70B|405B)\n  T=8\n  ;;\n *)\n  T=0\n  ;;\nesac',
    "S=a.b\ncase $S in a\\*) T=1;; a?b) T=2;; *) T=3;; esac",
    "S=q\ncase $S in [!a-p]) T=1;; *) T=2;; esac",
    "P=7\ncase $P in $P) T=same;; esac",
    "T=1\nf() { T=$((T * $1)); }\nf 3\nf 5",
    "T=1\ng() {\n  local T=5\n  U=$T\n}\ng",
    'T=\n[ -z "$T" ] && T=2 || T=3\n[ "$T" = 2 ] || T=4\nU=1; false && U=2 || U=3',
    "T=1\n[ $T -gt 0 ] && { T=2; U=1; }\n[ $T -lt 0 ] || {\n  U=$((U + 1))\n}",
    "T=1\nh() {\n  if [ $T -eq 1 ]; then\n    return\n  fi\n  T=9\n}\nh\nU=x",
    # loops: over words, with break / continue, nested, while and until on known tests
    'T=""\nfor k in 1 2 3; do T="$T$k"; done',
    "T=0\nfor k in a b c d\ndo\n  [ $k = b ] && continue\n  [ $k = d ] && break\n  T=$((T + 1))\ndone",
    'T=""\nfor a in 1 2; do\n  for b in x y; do\n    [ $b = y ] && break 2\n    T="$T$a$b"\n  done\ndone',
    "T=1\nwhile [ $T -lt 100 ]; do T=$((T * 3)); done\nU=0\nuntil [ $U -ge 4 ]; do U=$((U + 1)); done",
    "T=0\nwhile true; do\n  T=$((T + 1))\n  if [ $T -eq 5 ]; then\n    break\n  fi\ndone",
    'T=0\nfor k in; do T=9; done\nL="p q"\nfor k in $L "$L"; do T=$((T + 1)); done',
    # subshells and another bash keep their variables; a group does not
    "T=1\n( T=2; U=3 )\n{ U=4; }",
    "T=1\n(\n  T=2\n  exit 0\n)\nbash -c 'T=5; exit 1'\nU=$T",
    "T=1\n( for k in 1 2; do T=$k; done ) && U=ok",
    "T=1\nfor k in 1; do\n  false\ndone && T=2 || U=no\nwhile false; do :; done && U=ran",
    'T=""\nfor k in {1..3} x{a,b}y {6..0..2} "{1..2}"; do T="$T.$k"; done',
    'T=""\nfor k in 1 2; do { T="$T$k"; }; done\nf() {\n  U=\n  for k in a b; do U="$U$k"; done\n}\nf',
]


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
@pytest.mark.parametrize("text", BASH_CASES)
def test_known_values_give_what_bash_gives(text):
    script = text + '\necho "T=${T-unset} U=${U-unset}"\n'
    proc = subprocess.run([BASH, "-c", script], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    shell = read_shell(text + "\n")
    got = " ".join(f"{v}={shell.variables.get(v, 'unset')}" for v in ("T", "U"))
    assert got == proc.stdout.strip() and shell.notes == []


def _case_matches(value: str, pattern: str) -> bool:
    return "X" in read_shell(f"case '{value}' in {pattern}) X=1;; esac\n").variables


@settings(max_examples=300, deadline=None)
@given(pattern=st.text("ab-*?[]!", min_size=1, max_size=10), value=st.text("ab-]!", max_size=8))
def test_patterns_match_as_fnmatch_does(pattern, value):
    # fnmatch reads * ? [...] [!...] as bash does (bash's ^ negation aside, not drawn here)
    assert _case_matches(value, pattern) is fnmatch.fnmatchcase(value, pattern)


def test_a_pattern_of_many_stars_is_matched_in_linear_steps():
    start = time.perf_counter()
    assert not _case_matches("a" * 20_000, "*a" * 40 + "b")
    assert time.perf_counter() - start < 2


# --------------------------------------------------------------------------- loops, exit

def test_exit_ends_the_script_where_bash_certainly_reaches_it():
    shell = read_shell("T=1\nexit 0\nT=2\ntorchrun x.py\n")
    assert shell.variables["T"] == "1" and shell.commands == [] and shell.exited == "'exit 0'"
    # an exit in a branch the reader cannot decide does not end the reading
    shell = read_shell('T=1\nif [ -f /data ]; then\n  exit 1\nfi\nT=2\n')
    assert shell.variables["T"] == "2" and shell.exited is None and len(shell.notes) == 1
    # nor one after a status it cannot know (the guard of a launch)
    shell = read_shell('mkdir -p "$DIR" || exit 1\nT=2\n')
    assert shell.variables["T"] == "2" and shell.exited is None
    # an exit in a subshell or another bash ends only that
    assert read_shell("( exit 1 )\nbash -c 'exit 2'\nT=3\n").variables["T"] == "3"


def test_a_loop_over_words_the_reader_cannot_know_is_read_once_and_noted():
    shell = read_shell('A=""\nfor n in $(seq 1 $N); do A="$A --x"; done\n')
    assert shell.variables["A"] == " --x" and len(shell.notes) == 1
    assert "for n in $(seq 1 $N)" in shell.notes[0] and "read once" in shell.notes[0]
    shell = read_shell("while read line; do T=1; done\n")
    assert shell.variables["T"] == "1" and "'while read line'" in shell.notes[0]


def test_the_argument_loop_of_a_launch_reads_its_positional_parameters(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        'TP=1\nPP=1\nwhile [[ $# -gt 0 ]]; do\n  case "$1" in\n    --tp) TP="$2"; shift 2;;\n'
        '    --pp) PP="$2"; shift 2;;\n    *) shift;;\n  esac\ndone\nEXTRA=()\n'
        'for flag in --bf16 --use-flash-attn; do EXTRA+=("$flag"); done\n'
        + TORCHRUN + ' "${EXTRA[@]}"\n')
    launch = read_launch(script.read_text(), "run.sh", {"1": "--pp", "2": "2", "3": "--tp",
                                                        "4": "4"})
    assert (_arg(launch, "--tensor-model-parallel-size"),
            _arg(launch, "--pipeline-model-parallel-size")) == ("4", "2")
    assert launch.arguments[-2:] == ["--bf16", "--use-flash-attn"] and launch.notes == []
    out = tmp_path / "s.json"
    proc = cli("import", "megatron-args", str(script), "--out", str(out), "--json",
               "--gpu", "H100-SXM5-80GB", "--var", "1=--tp", "--var", "2=2")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["session"]["plan"]
    assert (plan["tensor_parallel"], plan["pipeline_parallel"]) == (2, 1)


@pytest.mark.parametrize("text, message", [
    ("if true; then\n  T=1\n", "an if has no closing 'fi'"),
    ("{ T=1\n", "a { group has no closing '}'"),
    ("( T=1\n", "a subshell has no closing ')'"),
    ("for k in 1 2; do\n  T=$k\n", "a for loop has no closing 'done'"),
    ("while true; do T=1; done\n", "'while true' loops more than 1,024 times"),
    ("for ((i = 0; i < 4; i++)); do T=1; done\n", "a C-style for (( ... )) is not read"),
    ("select x in a b; do T=1; done\n", "a select loop"),
    ("N=1\n(( N = N * 8 ))\n", "the arithmetic command (( N = N * 8 )) is not read"),
    ("[ -z $X ] && for k in 1; do T=1; done\n", "a for loop after && is not read"),
    ("for k in {a,{b,c}}; do T=1; done\n", "the brace expansion in '{a,{b,c}}' is not read"),
    ("for k in {1..5000}; do T=1; done\n", "{1..5000} expands to more than 1,024 words"),
    ("for a in {1..1000}; do for b in {1..1000}; do :; done; done\n", "16,384 passes"),
])
def test_constructs_bash_refuses_or_the_reader_cannot_follow_are_named(text, message):
    with pytest.raises(ShellError, match=re.escape(message)) as err:
        read_shell(text, "run.sh")
    assert str(err.value).startswith("run.sh")


# --------------------------------------------------------------------------- $((...)) as bash

#: ``$((...))`` and bash 5's value of it (``A=1+2; B=A*2; E=``): the constants of every base,
#: C's division and remainder, ``**`` to the right and below the unary signs, and variables
#: whose values are themselves arithmetic. Python's own reading gave 2 for ``2#11000`` (``#``
#: began a comment), 7 for ``A*3`` (the text pasted in), -4 for ``-7/2``.
BASH_ARITHMETIC = [
    ("2#11000", 24), ("64#zz", 2275), ("64#@_", 4031), ("36#Z", 35), ("64#Z", 61),
    ("16#ff", 255), ("0X1f", 31), ("010", 8), ("-7/2", -3), ("-7%2", -1), ("7%-2", 1),
    ("-2**2", 4), ("2**3**2", 512), ("A*3", 9), ("B+1", 7), ("E+1", 1), ("- -3", 3),
    ("(1+2)*3", 9), ("9223372036854775807 - 9223372036854775805", 2),
]


@pytest.mark.parametrize("expr, value", BASH_ARITHMETIC)
def test_arithmetic_gives_what_bash_gives(expr, value):
    shell = read_shell(f"A=1+2\nB=A*2\nE=\nT=$(({expr}))\n")
    assert shell.variables["T"] == str(value)


@pytest.mark.skipif(BASH is None, reason="bash is not installed")
def test_the_arithmetic_table_is_bash_s():
    for expr, value in BASH_ARITHMETIC:
        proc = subprocess.run([BASH, "-c", f"A=1+2; B=A*2; E=; echo $(({expr}))"],
                              capture_output=True, text=True, timeout=10)
        assert proc.stdout.strip() == str(value), (expr, proc.stderr)


@pytest.mark.parametrize("expr, message", [
    ("1/0", "$((1/0)): division by 0"), ("3 % 0", "$((3 % 0)): division by 0"),
    ("08", "08: value too great for base (8)"), ("0b11", "0b11: value too great for base (8)"),
    ("1_000", "1_000: value too great for base (10)"), ("1#0", "1#0: invalid arithmetic base"),
    ("2**-1", "exponent less than 0"),
])
def test_arithmetic_bash_stops_on_is_refused_naming_it(expr, message):
    with pytest.raises(ShellError, match=re.escape(message)) as err:
        read_shell(f"L=$(({expr}))\n", "run.sh")
    assert str(err.value).startswith(f"run.sh: statement 'L=$(({expr}))': ")
    assert str(err.value).endswith("(bash stops the script here)")


def test_a_launch_s_layers_in_base_2_are_bash_s_24(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("L=$((2#11000))\n" + TORCHRUN_24.replace("--num-layers 24", "--num-layers $L"))
    out = tmp_path / "s.json"
    proc = cli("import", "megatron-args", str(script), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["model"]["num_layers"] == 24


@pytest.mark.parametrize("expr, names", [("1 << 3", "an arithmetic expansion"),
                                         ("L * 2", "the variable L is not set")])
def test_arithmetic_the_reader_does_not_evaluate_is_named_not_called_name(tmp_path, expr, names):
    script = tmp_path / "run.sh"
    script.write_text(TORCHRUN_24.replace("--num-layers 24", f"--num-layers $(({expr}))"))
    proc = cli("import", "megatron-args", str(script), "--out", str(tmp_path / "s.json"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert names in proc.stderr and "variable NAME" not in proc.stderr
    assert not (tmp_path / "s.json").exists()


TORCHRUN_24 = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
               "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
               "--micro-batch-size 4 --global-batch-size 256 --tensor-model-parallel-size 2 "
               "--pipeline-model-parallel-size 2 --bf16 --vocab-size 50257\n")
