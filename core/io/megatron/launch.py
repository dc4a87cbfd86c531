"""Reading a Megatron-LM launch into its arguments (nothing is run).

What belongs here: :func:`read_launch` and what it needs. It reads a Megatron-LM /
Megatron-Core launch: a shell script (``torchrun ... pretrain_gpt.py --num-layers ...``, with
line continuations, variables and bash arrays assigned in the script, ``$((...))`` integer
arithmetic, ``#SBATCH`` directives; read by :mod:`core.io.shell_reader`), a plain argument
list, or Megatron-LM's printed argument dump (:func:`read_argument_dump`). Shell words are
split by :mod:`shlex`. The world size comes from the launcher: torchrun's (or
``torch.distributed.launch``'s) ``--nnodes`` and ``--nproc-per-node``, srun's
``-N``/``--nodes`` and ``--ntasks-per-node``, or ``#SBATCH`` lines. :func:`parse_arguments`
turns the words into ``{"--flag": [values]}`` as Megatron-LM's argparse reads them.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.io.megatron.arguments import BY_DEST, BY_OPTION, MEGATRON_LM_COMMIT, MegatronArgsError
from core.io.shell_reader import missing_variable, read_shell
from core.io.shell_words import ShellError
from core.util.text import short_repr, shown_name

__all__ = ["Launch", "read_launch", "read_argument_dump", "parse_arguments", "unset_message",
           "int_value", "DATA_SCRIPTS", "replaced_occurrences", "refuse_option_words"]


@dataclass
class Launch:
    """A launch read from a file.

    Attributes
    ----------
    arguments : list of str
        The training script's arguments (shell words, variables substituted).
    nnodes, nproc_per_node : int or None
        Nodes and processes (GPUs) per node from the launcher, when it says.
    launcher : str
        ``torchrun``, ``srun``, ``python``, or ``argument list``.
    script : str
        The training script (``pretrain_gpt.py``), "" for a plain argument list.
    source : str
        The file the launch was read from (for messages).
    notes : list of str
        What the reader could not decide (a shell condition it did not evaluate ...).
    unset_counts : list of str
        Messages for launcher counts that hold a variable the script does not set (raised
        when the world size needs them and ``--nodes``/``--num-gpus`` do not give it).
    world_size : int or None
        The GPUs of the run when the launch gives them without nodes and GPUs per node (a
        printed argument dump's ``world_size``, ``mpirun -np N`` or ``srun -n N`` alone).
    host_nproc : str or None
        The message for a per-node count the launcher takes from the host (torchrun's
        ``--nproc-per-node gpu``): ``--gpus-per-node`` or ``--num-gpus`` gives it.
    """

    arguments: list[str]
    nnodes: int | None = None
    nproc_per_node: int | None = None
    launcher: str = "argument list"
    script: str = ""
    source: str = "arguments"
    notes: list[str] = field(default_factory=list)
    unset_counts: list[str] = field(default_factory=list)
    world_size: int | None = None
    host_nproc: str | None = None


def unset_message(source: str, what: str, text: str) -> str:
    """The message for a value that holds a variable the script does not set (``what``: the
    flag or launcher option, ``text``: its value as written)."""
    return f"{source}: {what} {shown_name(text)}: {_not_set(text)}"


#: A name inside a ``$((...))`` or ``$[...]`` that the reader left as written (not a digit
#: of a constant such as ``16#ff`` or ``0x1f``).
_ARITH_NAME = re.compile(r"(?<![0-9A-Za-z_#@])[A-Za-z_][A-Za-z0-9_]*")


def _not_set(text: str) -> str:
    name = missing_variable(text)
    if name is None:
        inner = re.search(r"\$\(\((.*?)\)\)|\$\[(.*?)\]", text)
        found = _ARITH_NAME.search(next(g for g in inner.groups() if g is not None)) if inner else None
        name = found.group() if found else None
    if name is None:
        return ("an arithmetic expansion or a command's output vtrain does not evaluate (it "
                "reads integer constants, variables the file sets, + - * / % ** and "
                "parentheses); write the value itself, or set it in a variable and give --var "
                "NAME=VALUE")
    name = shown_name(name)  # a name of any length, shortened
    return (f"the variable {name} is not set in the file (or comes from a command vtrain does "
            f"not run); give --var {name}=VALUE")


def int_value(text: str, what: str, source: str) -> int:
    """The count ``text`` writes (decimal digits, at most 18 of them).

    Raises
    ------
    MegatronArgsError
        Not a count: an unset variable is named (with ``--var``), an elastic range
        (``1:4``) is not a plan.
    """
    if re.fullmatch(r"\d+", text or ""):
        if len(text.lstrip("0")) > 18:  # int() of 4,300 digits raises; none is a count
            raise MegatronArgsError(f"{source}: {what} {text[:20]}... ({len(text):,} digits) "
                                    "is beyond any count a launch can mean (at most 18 digits)")
        return int(text)
    if "$" in text:
        raise MegatronArgsError(unset_message(source, what, text))
    raise MegatronArgsError(f"{source}: {what} {short_repr(text)} must be a positive integer"
                            + (" (an elastic range is not a plan)" if ":" in text else ""))


#: Launcher options -> what they count: "n" nodes, "g" processes (GPUs) per node, "w" all
#: processes (torchrun, torch.distributed.launch, srun, deepspeed, #SBATCH).
_COUNT_OPTIONS = {"--nnodes": "n", "--num-nodes": "n", "--num_nodes": "n", "-N": "n",
                  "--nodes": "n", "--nproc-per-node": "g", "--nproc_per_node": "g",
                  "--ntasks-per-node": "g", "--num_gpus": "g", "--num-gpus": "g",
                  "--gpus-per-node": "g", "--ntasks": "w", "-n": "w"}
#: The same for MPI launchers (Open MPI's mpirun / mpiexec, MPICH's and Intel MPI's -ppn):
#: ``-np`` / ``-n`` the processes in all, ``-N`` / ``-npernode`` / ``-ppn`` those per node (Open
#: MPI's ``-N`` is per node, not srun's node count).
_MPI_COUNT_OPTIONS = {"-np": "w", "--np": "w", "-n": "w", "-c": "w", "-N": "g",
                      "-npernode": "g", "--npernode": "g", "-ppn": "g", "--ppn": "g",
                      "-perhost": "g"}
_MPI_PROGRAMS = frozenset({"mpirun", "mpiexec", "orterun"})
#: torchrun's ``--nproc-per-node`` values that take the host's device count
#: (``torch.distributed.run.determine_local_world_size``: gpu, auto; cpu is no GPU run).
HOST_NPROC = frozenset({"gpu", "auto"})


def _launcher_counts(words: list[str], source: str, deferred: list[str] | None = None,
                     host: list[str] | None = None
                     ) -> tuple[int | None, int | None, int | None]:
    """``(nnodes, nproc_per_node, ntasks)`` from launcher options (torchrun, launch, srun,
    deepspeed, mpirun, #SBATCH). A per-node count torchrun takes from the host (``gpu``,
    ``auto``) is left None and its message appended to ``host``."""
    nnodes = nproc = ntasks = None
    names = _COUNT_OPTIONS
    i = 0
    while i < len(words):
        w = words[i]
        program = Path(w).name
        if program in _MPI_PROGRAMS:
            names = _MPI_COUNT_OPTIONS
        elif program in ("srun", "torchrun", "deepspeed", "python", "python3"):
            names = _COUNT_OPTIONS
        key, value = (w.split("=", 1) + [None])[:2] if w.startswith("--") else (w, None)
        if names is _COUNT_OPTIONS and key not in names and re.fullmatch(r"-N\d+", w):
            key, value = "-N", w[2:]
        if key in names:
            if value is None and i + 1 < len(words):
                value = words[i + 1]
                i += 1
            if deferred is not None and "$" in (value or ""):
                deferred.append(unset_message(source, key, value or ""))  # --nodes/--var may give it
                i += 1
                continue
            if names[key] == "g" and value in HOST_NPROC and host is not None:
                host.append(f"{source}: {key} {value}: one process per GPU of the host, which "
                            "the launch does not say; give --gpus-per-node G (or --num-gpus N)")
                nproc = None
                i += 1
                continue
            n = int_value(value or "", key, source)
            kind = names[key]
            if kind == "n":
                nnodes = n
            elif kind == "g":
                nproc = n
            else:
                ntasks = n
        i += 1
    return nnodes, nproc, ntasks


#: Launcher options that take no value (torchrun's), so that a word after one stands alone.
_LAUNCHER_SWITCHES = frozenset({"--standalone", "--no-python", "--no_python", "--run-path",
                                "--run_path"})


def _unknown_launcher_words(pre: list[str], source: str) -> list[str]:
    """Messages for the unknown values (``$EXTRA`` as written) among the launcher's options
    that stand where an option would, not as the value of the option before them: bash splits
    one into the words it holds, which may be ``--nnodes 4``. ``pre[0]`` (the program) is
    not an option."""
    out = []
    for k in range(1, len(pre)):
        w, before = pre[k], pre[k - 1]
        alone = k == 1 or not before.startswith("-") or "=" in before or \
            before in _LAUNCHER_SWITCHES
        if w.startswith("$") and alone:
            out.append(f"{source}: the launcher's {w} may hold --nnodes or --nproc-per-node: "
                       f"{_not_set(w)}")
    return out


#: Scripts of Megatron-LM (and Megatron-DeepSpeed) that prepare data or convert checkpoints:
#: never the training command, wherever they stand in a launch script.
DATA_SCRIPTS = frozenset({"preprocess_data.py", "preprocess_data_nmt.py", "merge_datasets.py",
                          "preprocess_mmdata.py", "checkpoint_util.py", "convert.py",
                          "build_sample_idx.py"})


def _training_command(commands: list[list[str]], source: str
                      ) -> tuple[list[str], list[str], str, str] | None:
    """``(launcher words, arguments, launcher, script)`` of the command that trains: the last
    one running a ``pretrain_*.py`` script or a script given ``--num-layers``, through torchrun,
    python, deepspeed or srun; never a data-preparation script (:data:`DATA_SCRIPTS`, or one
    under ``tools/``). None when the script runs no Python script at all."""
    found = []
    for words in commands:
        script = next((k for k, w in enumerate(words) if w.endswith(".py")), None)
        if script is None:
            continue
        name = Path(words[script]).name
        args = []
        for w in words[script + 1:]:  # a value substituted inside quotes may hold many words
            args += shlex.split(w) if w.startswith("-") and re.search(r"\s", w) else [w]
        launcher = next((Path(w).name for w in reversed(words[:script]) if Path(w).name in
                         ("torchrun", "srun", "deepspeed", "mpirun")), "python")  # the innermost
        if "torch.distributed.launch" in words[:script] or "torch.distributed.run" in words[:script]:
            launcher = "torchrun"
        data = name in DATA_SCRIPTS or "tools" in Path(words[script]).parts[:-1]
        trains = name.startswith("pretrain_") or any(
            a == "--num-layers" or a.startswith("--num-layers=") for a in args)
        found.append((0 if data else 2 if trains else 1, words[:script], args, launcher,
                      words[script]))
    if not found:
        return None
    best = max(k for k, *_ in found)
    if best == 0:
        raise MegatronArgsError(f"{source}: no training command: "
                                f"{', '.join(sorted({Path(c[4]).name for c in found}))} prepares "
                                "data or converts checkpoints (the training command runs "
                                "pretrain_*.py)")
    _, pre, args, launcher, script = [c for c in found if c[0] == best][-1]
    return pre, args, launcher, script


#: Programs that launch the training script (``python -m torch.distributed.run`` is python).
_LAUNCH_PROGRAMS = frozenset({"torchrun", "srun", "deepspeed", "mpirun", "python", "python3"})


def _launch_behind_variable(commands: list[list[str]]) -> tuple[str, str, str] | None:
    """``(command, word, variable)`` of the last launcher command (torchrun, python, srun ...)
    that runs no ``.py`` script but holds a word vtrain could not expand (``torchrun
    --nproc_per_node 8 $CMD`` with ``CMD=$(cat args.txt)``): the training command is behind
    that variable. None when there is none."""
    for words in reversed(commands):
        if not words or Path(words[0]).name not in _LAUNCH_PROGRAMS:
            continue
        for w in words[1:]:
            name = missing_variable(w)
            if name is not None:
                text = " ".join(words)
                return (text if len(text) <= 60 else text[:57] + "...", w, name)
    return None


def _sbatch(text: str) -> list[str]:
    """The words of the script's ``#SBATCH`` directives."""
    words: list[str] = []
    for line in text.splitlines():
        if line.strip().startswith("#SBATCH"):
            try:
                words += shlex.split(line.strip()[len("#SBATCH"):], comments=True)
            except ValueError:
                pass
    return words


def read_launch(text: str, source: str = "arguments", variables: dict[str, str] | None = None
                ) -> Launch:
    """Read a launch script, a plain argument list or a printed argument dump.

    Parameters
    ----------
    text : str
        Shell script text (read by :func:`core.io.shell_reader.read_shell`: nothing is run),
        arguments (``--num-layers 24 --hidden-size 1024 ...``), or Megatron-LM's printed
        ``arguments`` block (:func:`read_argument_dump`).
    source : str
        File name for messages.
    variables : dict, optional
        Values of the script's environment variables and positional parameters (``"1"``,
        ``"2"`` ...), as ``vtrain import megatron-args --var NAME=VALUE`` gives them.

    Raises
    ------
    MegatronArgsError
        No Megatron arguments found, only a data-preparation command, unbalanced quotes, or a
        launcher count that is not a number (an unset variable is named, with ``--var``); a
        script beyond the bounds of what a launch can mean: more than
        :data:`core.io.shell_reader.MAX_LAUNCH_BYTES` as written or once expanded, a statement
        of more than :data:`core.io.shell_words.MAX_STATEMENT_BYTES` as written or expanded, or
        arithmetic beyond |x| < 2^63 or :data:`core.io.shell_values.MAX_ARITH_TOKENS` terms (the
        message names the statement).
    """
    variables = dict(variables or {})
    dump = read_argument_dump(text, source)
    if dump is not None:
        return dump
    numbers = [int(k) for k in variables if k.isdigit() and k != "0"]
    # $1 $2 ...: one not given (a hole before a given one) is unset
    positional = [variables.pop(str(k), None) for k in range(1, max(numbers, default=0) + 1)]
    sbatch = _sbatch(text)
    s_nodes, s_gpus, _ = _launcher_counts([w for w in sbatch if not w.startswith(
        ("--ntasks", "-n"))], source)
    for name in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):  # what sbatch gives the script
        if s_nodes is not None:
            variables.setdefault(name, str(s_nodes))
    if s_gpus is not None:
        variables.setdefault("SLURM_GPUS_PER_NODE", str(s_gpus))
    try:
        shell = read_shell(text, source, variables, positional)
    except ShellError as exc:
        raise MegatronArgsError(str(exc)) from None
    loose: list[str] = []
    for words in shell.commands:
        if any(w.startswith("--") for w in words) and words[0].startswith("-"):
            loose += words
        elif len(words) == 1 and loose and loose[-1].startswith("--"):
            loose += words  # an argument file with one word per line: the value of the flag above
    picked = _training_command(shell.commands, source)
    deferred: list[str] = []  # counts that hold a variable the script does not set
    host: list[str] = []  # torchrun's --nproc-per-node gpu / auto
    if picked is not None:
        pre, args, launcher, script = picked
        # srun may launch torchrun: both parts count, torchrun's last
        nnodes, nproc, ntasks = _launcher_counts(sbatch + pre, source, deferred, host)
        deferred += _unknown_launcher_words(pre, source)
    elif loose:
        args, launcher, script = loose, "argument list", ""
        nnodes, nproc, ntasks = _launcher_counts(sbatch, source, deferred)
    else:
        if shell.exited:
            raise MegatronArgsError(f"{source}: no Megatron-LM arguments found: bash exits at "
                                    f"{shell.exited}, before any 'pretrain_*.py' command (as "
                                    "the script is run: give its arguments with --var "
                                    "1=VALUE ..., its environment with --var NAME=VALUE)")
        hidden = _launch_behind_variable(shell.commands)
        if hidden is not None:
            raise MegatronArgsError(
                f"{source}: no Megatron-LM arguments found: the launch {short_repr(hidden[0])} runs "
                f"{hidden[1]}, whose value vtrain does not know (the variable {hidden[2]} is not "
                "set in the file, or comes from a command's output, which vtrain does not run); "
                f"give --var {hidden[2]}=VALUE")
        raise MegatronArgsError(f"{source}: no Megatron-LM arguments found (neither a "
                                "'pretrain_*.py --num-layers ...' command nor an argument list)")
    world = None
    # srun's / mpirun's processes are the GPUs only when they run the training script itself,
    # not a torchrun or deepspeed launcher per node
    gpu_tasks = launcher not in ("torchrun", "deepspeed")
    if nproc is None and ntasks is not None and nnodes:
        nproc = ntasks // nnodes
    elif not gpu_tasks:
        pass
    elif nnodes is None and ntasks is not None and nproc:  # mpirun -np 16 -npernode 8
        if ntasks % nproc:
            raise MegatronArgsError(f"{source}: {ntasks} processes in all are not a whole "
                                    f"number of nodes of {nproc}")
        nnodes = ntasks // nproc
    elif nnodes is None and nproc is None and ntasks is not None and not host:
        world = ntasks  # mpirun -np 16, srun -n 16: the world without its nodes
    if nnodes is None and (nproc is not None or host) and not deferred:
        nnodes = 1  # torchrun's default --nnodes
    refuse_option_words(args, source)
    return Launch(args, nnodes, nproc, launcher, script, source, notes=list(shell.notes),
                  unset_counts=deferred, world_size=world,
                  host_nproc=host[0] if host and nproc is None else None)


#: argparse's ``_negative_number_matcher`` (as in CPython 3.11.7, 3.12.1 and 3.13.0): a word
#: starting with '-' that matches is a value, as Megatron-LM's parser has no option that looks
#: like a number.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def refuse_option_words(words: list[str], source: str) -> None:
    """Refuse a value word that Megatron-LM's argparse reads as an option: one after a
    Megatron-LM argument that starts with '-', is longer than '-', holds no space and is not
    a negative number by argparse's rule (:data:`_NEGATIVE_NUMBER`; ``ArgumentParser.
    _parse_optional``). argparse then ends the argument's values there, and refuses the
    launch ("expected one argument", or "unrecognized arguments: -foo"): ``--lr -1e-4`` and
    ``--data-path -corpus`` do not run (write ``--lr=-1e-4``, or ``-0.0001``). A word holding
    a variable the script does not set is not judged. A word given as ``--flag=-value`` is
    the flag's value whatever it is.

    Raises
    ------
    MegatronArgsError
        The file, the argument with the word, and argparse's rule.
    """
    flag = None
    for w in words:
        if w.startswith("--"):
            flag = w.partition("=")[0]
            continue
        if (flag in BY_OPTION and w.startswith("-") and len(w) > 1 and " " not in w
                and "$" not in w and not _NEGATIVE_NUMBER.match(w)):
            raise MegatronArgsError(
                f"{source}: {shown_name(flag)} {short_repr(w)}: Megatron-LM's argparse reads "
                f"{short_repr(w)} as an option, not as {shown_name(flag)}'s value (a word that "
                "starts with '-' is a value only as a negative number like -1 or -0.5, "
                r"argparse's rule ^-\d+$|^-\d*\.\d+$), and refuses the launch; give "
                f"{shown_name(flag)}={w if len(w) <= 40 else 'VALUE'} (one word)")


#: The lines that open and close Megatron-LM's printed arguments (``_print_args``).
_DUMP_OPEN = re.compile(r"-{3,} arguments -{3,}")
_DUMP_CLOSE = re.compile(r"-{3,} end of arguments -{3,}")
#: One line of the block: ``  tensor_model_parallel_size ...... 8`` (a log prefix may precede).
_DUMP_LINE = re.compile(r"(?:^|\s)(?P<dest>[A-Za-z_][A-Za-z0-9_]*) \.{2,}(?: (?P<value>.*))?$")


def _dump_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
        return text


def read_argument_dump(text: str, source: str = "arguments") -> Launch | None:
    """A launch from Megatron-LM's printed argument dump (the ``---- arguments ----`` block a
    training log starts with, as users paste it in issues), or None when ``text`` has none.

    Each line is ``dest .... value``; the dest is mapped back to its option through the
    argument table (:data:`core.io.megatron.arguments.BY_DEST`): a switch that is on (off for a
    ``store_false`` one) gives its option, a value that differs from Megatron-LM's default
    gives ``--option value`` (a list one word per element; an enum ``AttnBackend.flash`` its
    name). Values Megatron-LM derives (``world_size``, ``data_parallel_size``, ``params_dtype``
    ...) are not arguments; ``world_size`` gives the world size (not the GPUs per node:
    :attr:`Launch.world_size`), and ``padded_vocab_size`` the
    vocabulary when the dump has no ``vocab_size``. Dests the table does not know are noted.
    """
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if _DUMP_OPEN.search(line)), None)
    if start is None:
        return None
    values: dict[str, str] = {}
    for line in lines[start + 1:]:
        if _DUMP_CLOSE.search(line):
            break
        m = _DUMP_LINE.search(line.rstrip())
        if m:
            values[m.group("dest")] = (m.group("value") or "").strip()
    args: list[str] = []
    unknown = []
    for dest, raw in values.items():
        if dest in _DERIVED_DESTS:  # set by validate_args (padded_vocab_size: read below)
            continue
        entries = BY_DEST.get(dest)
        if not entries:
            unknown.append(dest)
            continue
        value = _dump_value(raw)
        if raw in _DUMP_DTYPES:  # validate_args maps the optimizer's dtypes to torch dtypes
            value = raw = _DUMP_DTYPES[raw]
        for e in entries:
            option = e.options[0]
            if e.action == "store_true" and value is True and e.default is not True:
                args.append(option)
            elif e.action == "store_false" and value is False and e.default is not False:
                args.append(option)
            elif e.action == "boolean_optional" and isinstance(value, bool) and value != e.default:
                args.append(option if value else e.options[1])
            elif e.action == "store" and value is not None and value != e.default and \
                    raw != str(e.default):
                if isinstance(value, str) and re.fullmatch(r"[A-Za-z]+\.[A-Za-z0-9_]+", value) \
                        and str(e.default).startswith("<"):
                    value = value.split(".", 1)[1]  # an enum: AttnBackend.flash
                    if f".{value}:" in str(e.default):
                        continue
                words = [str(v) for v in value] if isinstance(value, (list, tuple)) and \
                    e.nargs not in (None, 0) else [raw if isinstance(value, str) else str(value)]
                if e.nargs is None and isinstance(value, (list, tuple)):
                    words = [raw]
                args += [option] + words
            break
    notes = []
    if "vocab_size" not in values or values.get("vocab_size") == "None":
        padded = values.get("padded_vocab_size", "")
        if padded.isdigit():
            args += ["--vocab-size", padded]
            notes.append(f"vocabulary: the dump's padded_vocab_size {int(padded):,} (its "
                         "vocab_size is None: the tokenizer's size is not printed); exact at "
                         "the dump's tensor-parallel size, padded again at another")
    world = values.get("world_size", "")
    if unknown:
        notes.append(f"argument dump entries that are not arguments of Megatron-LM "
                     f"{MEGATRON_LM_COMMIT[:7]} (not read): {' '.join(unknown)}")
    # the dump gives the world size, not how the GPUs split into nodes
    return Launch(args, None, None, "argument dump", "", source, notes=notes,
                  world_size=int(world) if world.isdigit() else None)


#: The torch dtypes Megatron-LM's ``validate_args`` turns ``--main-grads-dtype``,
#: ``--main-params-dtype``, ``--exp-avg-dtype`` and ``--exp-avg-sq-dtype`` into before it
#: prints them (its ``dtype_map``: fp8 is ``torch.uint8``) -> the parser's choice.
_DUMP_DTYPES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16",
                "torch.uint8": "fp8"}

#: Values Megatron-LM's validate_args and initialization add to the printed arguments.
_DERIVED_DESTS = frozenset(
    "world_size rank local_rank data_parallel_size params_dtype padded_vocab_size "
    "consumed_train_samples consumed_valid_samples virtual_pipeline_model_parallel_size "
    "transformer_pipeline_model_parallel_size variable_seq_lengths model_parallel_size "
    "iteration curr_iteration do_train do_valid do_test train_iters_derived "
    "global_batch_size_derived expert_data_parallel_size async_tensor_model_parallel_allreduce "
    "num_floating_point_operations_so_far pipeline_model_parallel_split_rank encoder_num_layers "
    "encoder_seq_length decoder_num_layers encoder_tensor_model_parallel_size "
    "encoder_pipeline_model_parallel_size "
    "save_retain_interval timing_log_option".split())


def parse_arguments(args: list[str], source: str = "arguments") -> dict[str, list[str]]:
    """Megatron arguments as ``{"--flag": [values...]}`` (a switch has no values).

    ``--flag=value`` and ``--flag value ...`` both work; a flag's values are the
    words up to the next ``--`` word. A flag given twice is taken as argparse takes it: the
    last one wins (every Megatron-LM argument is a store action). Raises MegatronArgsError for
    a word before the first flag.
    """
    out: dict[str, list[str]] = {}
    flag = None
    for w in args:
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            out.pop(name, None)  # the last one wins, in the order given
            out[name] = [value] if eq else []
            flag = name
        elif w.startswith("$") and not _takes_another(flag, out.get(flag, [])):
            # an unknown value standing alone: bash splits it into the words it holds
            where = (f"after {flag} {shown_name(' '.join(out[flag]))}".rstrip() if flag
                     else "first")
            raise MegatronArgsError(f"{source}: {shown_name(w)} ({where}) may hold arguments: "
                                    f"{_not_set(w)}")
        elif flag is None:
            raise MegatronArgsError(f"{source}: {short_repr(w)} comes before any --argument")
        else:
            out[flag].append(w)
    return out


def replaced_occurrences(args: list[str]) -> list[tuple[str, list[str]]]:
    """Each ``(flag, values)`` of ``args`` (as :func:`parse_arguments` reads them) that a later
    occurrence of the same flag replaces, in order. :func:`parse_arguments` keeps the last
    one, as argparse's store action does; argparse still converts and checks every occurrence
    as it comes (``--lr x --lr 1`` stops at ``'x'``: "invalid float value"), so these need the
    same checks (:func:`core.io.megatron.arguments.check_values`)."""
    seen: list[tuple[str, list[str]]] = []
    flag = None
    for w in args:
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            seen.append((name, [value] if eq else []))
            flag = name
        elif flag is not None:
            seen[-1][1].append(w)
    last = {name: k for k, (name, _) in enumerate(seen)}
    return [(name, values) for k, (name, values) in enumerate(seen) if last[name] != k]


def _takes_another(flag: str | None, values: list[str]) -> bool:
    """Whether Megatron-LM's ``flag``, given ``values`` so far, takes one more value (a flag
    the table does not know may)."""
    if flag is None:
        return False
    entry = BY_OPTION.get(flag)
    if entry is None or entry.nargs in ("+", "*"):
        return True
    return len(values) < (1 if entry.nargs is None else entry.nargs)

