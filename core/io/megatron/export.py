"""Exporting a plan to Megatron-LM: its start-up rules, its environment, the cluster comment, and
the rewrite of the user's own launch script (``vtrain export megatron-args S.json --into
train.sh --out train_new.sh``).

:func:`export_script` writes a fresh script; it calls
:func:`refuse_megatron_rules` (a plan Megatron-LM refuses at start-up is refused here, naming
Megatron's rule: :mod:`core.io.megatron.rules`), :func:`environment_lines` (``export
CUDA_DEVICE_MAX_CONNECTIONS=1`` where Megatron requires it) and writes the cluster comment
(:mod:`core.io.cluster_comment`), which
:func:`core.io.megatron.to_session.with_cluster_comment` reads back on import.

:func:`rewrite_script` keeps the user's script and replaces only the plan's arguments: the
script is read with the importer (:func:`core.io.megatron.launch.read_launch`,
:func:`~core.io.megatron.to_session.session_from_launch`, called as they are); the plan's
arguments (those whose session field is a ``plan.*`` field in
:data:`core.io.megatron.arguments.ARGUMENTS`) are removed from the training command and from
the variables and arrays it expands, the exported plan's arguments are written right after the
training script's name, and every other line and argument stays as written, byte for byte.
The result is read back with the importer: it must give the plan an export gives, or nothing
is written.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from core.plan.session import Session
from core.io.cluster_comment import cluster_comment
from core.io.megatron.arguments import (ARGUMENTS, LLAMA2_TOKENIZER, TOKENIZER_VOCAB,
                                        MegatronArgsError)
from core.io.megatron.from_session import export_arguments, train_samples
from core.io.megatron.launch import parse_arguments, read_launch
from core.io.megatron.to_session import session_from_launch
from core.io.megatron.rules import SESSION_FIELDS, broken_rules, required_environment, violations
from core.util.text import shell_comment, shell_word

__all__ = ["refuse_megatron_rules", "megatron_refusal", "megatron_blockers",
           "MEGATRON_LM_SWEEP_OPTIONS", "megatron_lm_sweep_options", "environment_lines", "export_script", "PLAN_ARGUMENTS",
           "rewrite_script", "unified_diff"]

#: The ``vtrain sweep`` options that keep the default space to plans Megatron-LM's arguments
#: run: its native cross-entropy and its two schedules (ZeRO-2 and ZeRO-3 run as Megatron-FSDP
#: or FSDP2: :func:`core.io.megatron.from_session.export_arguments`).
MEGATRON_LM_SWEEP_OPTIONS = "--cross-entropy-fusion native --schedules 1f1b,interleaved"


def megatron_lm_sweep_options(session: Session) -> str:
    """:data:`MEGATRON_LM_SWEEP_OPTIONS` for ``session``'s plan: with ``plan.fp8_param_gather``
    also ``--zero-stages 1``, since ZeRO-2 and ZeRO-3 (with the parameter gather overlapped,
    the sweep's default) export as Megatron-FSDP, whose FP8 gathers
    :func:`core.io.megatron.from_session.export_arguments` refuses."""
    if getattr(session.plan, "fp8_param_gather", False):
        return MEGATRON_LM_SWEEP_OPTIONS + " --zero-stages 1"
    return MEGATRON_LM_SWEEP_OPTIONS


def _broken(session: Session, args: list[str]) -> tuple[list, list[str]]:
    """The start-up rules ``args`` break (:func:`core.io.megatron.rules.broken_rules`) and the
    other start-up checks they fail at the session's world size, each once."""
    pl = session.plan
    world = pl.tensor_parallel * pl.pipeline_parallel * (pl.context_parallel or 1) * \
        pl.data_parallel
    rules = broken_rules(args)
    others = [v for v in violations(args, world_size=world) if " rule " not in v or
              not any(f"rule {r.name})" in v for r in rules)]
    return rules, others


def refuse_megatron_rules(session: Session, args: list[str]) -> None:
    """Raise :class:`MegatronArgsError` when Megatron-LM's start-up refuses ``args``.

    The message is one line: the session's file, the session fields, Megatron's assertion
    message and where it is (every broken rule, ``;``-separated). The simulator still
    simulates such a plan (it may be a DeepSpeed or torchtitan plan); only the Megatron-LM
    export refuses it.
    """
    rules, others = _broken(session, args)
    if not rules and not others:
        return
    where = f"{session.source}: " if session.source else ""
    parts = [f"{SESSION_FIELDS.get(r.name, r.name)}: Megatron-LM refuses it: \"{r.message}\" "
             f"({r.source}; rule {r.name})" for r in rules]
    parts += [f"Megatron-LM refuses it: {v}" for v in others]
    raise MegatronArgsError(where + "; ".join(parts) + " (the simulator still simulates the "
                            "plan; Megatron-LM cannot run it. A sweep kept to the cross-entropy, "
                            "ZeRO stages and schedules Megatron-LM runs: "
                            f"vtrain sweep FILE {megatron_lm_sweep_options(session)} "
                            "--pick fastest --out NEW.json)")


def megatron_refusal(session: Session) -> str | None:
    """Why Megatron-LM cannot run ``session``'s model and plan (the message of
    :func:`core.io.megatron.from_session.export_arguments` or :func:`refuse_megatron_rules`),
    or None when it can."""
    try:
        refuse_megatron_rules(session, export_arguments(session))
    except MegatronArgsError as exc:
        return str(exc)
    return None


def megatron_blockers(session: Session) -> list[str]:
    """What keeps Megatron-LM from running ``session``'s plan, each in a few words: what its
    arguments cannot express (:func:`export_arguments`' refusal), or each start-up assertion
    its arguments break (Megatron-LM's own message, :func:`core.io.megatron.rules.broken_rules`);
    empty when it runs it (then :func:`megatron_refusal` is None, and only then)."""
    try:
        args = export_arguments(session)
    except MegatronArgsError as exc:
        return [str(exc)]
    rules, others = _broken(session, args)
    return [r.message for r in rules] + others


def environment_lines(args: list[str], gpu: str | None) -> list[str]:
    """Shell lines that give the environment Megatron-LM asserts on for ``args`` on ``gpu``."""
    out = []
    for var, value in required_environment(args, gpu).items():
        out.append(f"export {var}={shell_word(value)}  # Megatron-LM validate_args requires it"
                   if value is not None else
                   f"unset {var}  # Megatron-LM validate_args: not 1 with FSDP")
    return out


# --------------------------------------------------------------------------- rewrite

#: Megatron-LM arguments that set a plan field: the ones ``--into`` replaces.
PLAN_ARGUMENTS = frozenset(f for f, a in ARGUMENTS.items()
                           if any(t.startswith("plan.") for t in a.targets))
#: Plan arguments kept from the user's script when the plan agrees with them (the export has
#: no argument of its own for them): the flex dispatcher's backend.
_KEPT_WITH_FLEX = frozenset({"--moe-flex-dispatcher-backend", "--moe-enable-deepep"})
#: Arguments Megatron needs beside a plan's (added after the plan's, never removed): FSDP2's
#: switch, Megatron-FSDP's checkpoint format (a user's own later --ckpt-format wins, and the
#: read-back then names the rule it breaks).
_NEEDED_WITH = {"--use-torch-fsdp2": (("--no-gradient-accumulation-fusion",),),
                "--use-megatron-fsdp": (("--ckpt-format", "fsdp_dtensor"),)}

_ASSIGN = re.compile(r"^\s*(?:(?:export|declare|local|readonly)\s+(?:-\w+\s+)*)?"
                     r"(?P<name>[A-Za-z_]\w*)\+?=")
_REF = re.compile(r"\$\{?(?P<name>[A-Za-z_]\w*)")
_FLAG = re.compile(r"(?<![^\s\"'(])(?P<flag>--[A-Za-z0-9][A-Za-z0-9_-]*)(?P<eq>=[^\s\"'()]*)?")
_VALUE = re.compile(r"[ \t]+(?P<v>\"[^\"]*\"|'[^']*'|(?!--)(?!\\)[^\s\"'()#\\]+)")


def _body(line: str) -> tuple[str, str]:
    """A physical line and its line ending."""
    body = line.rstrip("\r\n")
    return body, line[len(body):]


def _statements(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indices of each shell statement: backslash continuations, bash arrays
    ``NAME=( ... )`` and quotes that span lines join lines."""
    spans, start, quote, depth = [], 0, None, 0
    for i, line in enumerate(lines):
        body, _ = _body(line)
        j, cont = 0, False
        while j < len(body):
            c = body[j]
            if quote:
                if c == quote:
                    quote = None
                elif c == "\\" and quote == '"':
                    j += 1
            elif c in "'\"":
                quote = c
            elif c == "\\":
                if j == len(body) - 1:
                    cont = True
                j += 1
            elif c == "#" and (j == 0 or body[j - 1] in " \t"):
                break
            elif c == "(" and j and body[j - 1] == "=":
                depth += 1
            elif c == ")" and depth:
                depth -= 1
            j += 1
        if not (cont or quote or depth):
            spans.append((start, i + 1))
            start = i + 1
    if start < len(lines):
        spans.append((start, len(lines)))
    return spans


def _remove_flags(body: str, remove: frozenset[str]) -> tuple[str, list[str]]:
    """``body`` without the ``remove`` arguments (and their values); the removed flags."""
    out, removed, pos = [], [], 0
    for m in _FLAG.finditer(body):
        if m.start() < pos:
            continue
        if body[:m.start()].count("#") and re.search(r"(^|\s)#", body[:m.start()]):
            break  # a comment
        flag = m.group("flag")
        if flag not in remove:
            continue
        end = m.end()
        if not m.group("eq") and ARGUMENTS[flag].value:
            while (v := _VALUE.match(body, end)) is not None:
                end = v.end()
        start = m.start()
        while start > pos and body[start - 1] in " \t":
            start -= 1
        out.append(body[pos:start])
        removed.append(flag)
        pos = end
    out.append(body[pos:])
    return "".join(out), removed


def _groups(args: list[str]) -> list[list[str]]:
    """Arguments grouped as ``--flag value ...``."""
    out: list[list[str]] = []
    for w in args:
        if w.startswith("--") or not out:
            out.append([w])
        else:
            out[-1].append(w)
    return out


def _last_assignment(lines: list[str], upto: int, var: str) -> str | None:
    """The value the script last gives ``var`` before line ``upto`` (None: not set, or unset)."""
    value = None
    pat = re.compile(rf"(?:^|[\s;])(?:export\s+)?{var}=(?P<v>\"[^\"]*\"|'[^']*'|[^\s;]*)"
                     rf"|(?:^|[\s;])unset\s+{var}\b")
    for line in lines[:upto]:
        body = _body(line)[0]
        if body.lstrip().startswith("#"):
            continue
        for m in pat.finditer(body):
            value = m.group("v").strip("\"'") if m.group("v") is not None else None
    return value


def _plan_view(text: str, source: str, num_gpus: int, variables: dict[str, str] | None,
               vocab_size: int) -> Session:
    """The session the importer reads from ``text`` (unknown arguments allowed; ``variables``
    as ``vtrain import megatron-args --var`` gives them).

    A tokenizer that keeps its vocabulary size in its files (``--tokenizer-type
    HuggingFaceTokenizer`` and the like, with no ``--vocab-size``; ``Llama2Tokenizer``'s
    ``--tokenizer-model`` file) is read with ``vocab_size``, the session's
    ``model.vocab_size``: the import's ``--vocab-size`` is what the session already holds,
    so the export does not ask for it again."""
    launch = read_launch(text, source, variables)
    given = parse_arguments(launch.arguments, source)
    tok = (given.get("--tokenizer-type") or [None])[-1]
    tokenizer_vocab_size = None
    if tok == LLAMA2_TOKENIZER:
        tokenizer_vocab_size = vocab_size
    elif tok is not None and tok not in TOKENIZER_VOCAB and tok != "NullTokenizer" \
            and "--vocab-size" not in given:
        launch.arguments = [*launch.arguments, "--vocab-size", str(vocab_size)]
    return session_from_launch(launch, num_gpus=num_gpus, allow_unknown=True,
                               tokenizer_vocab_size=tokenizer_vocab_size).session


def _differences(a: Any, b: Any, section: str) -> list[str]:
    return [f"{section}.{f.name} {getattr(a, f.name)!r} (script) vs {getattr(b, f.name)!r} "
            "(session)" for f in dataclasses.fields(a)
            if f.name != "name" and getattr(a, f.name) != getattr(b, f.name)]


def rewrite_script(session: Session, text: str, source: str = "train.sh",
                   script: str = "pretrain_gpt.py",
                   variables: dict[str, str] | None = None) -> str:
    """``text`` (the user's launch script) with ``session``'s plan in place of its own.

    Parameters
    ----------
    session : Session
        The plan to run (its model must be the script's).
    text : str
        The launch script, as read (line endings kept).
    source : str
        Its file name, for messages.
    script : str
        The training script the export would write (used only to compare with a fresh export).
    variables : dict of str to str, optional
        Values of the script's environment or positional parameters (``--var NAME=VALUE``),
        as :func:`core.io.megatron.launch.read_launch` takes them: the script is read with
        them (and written unchanged: they are not written into it). A tokenizer whose
        vocabulary size is in its files is read with the session's ``model.vocab_size``.

    Returns
    -------
    str
        The new script: the training command's plan arguments (and those of the variables and
        arrays it expands) replaced by the plan's, the environment Megatron-LM requires set
        before the command, the ``# vtrain: cluster`` comment written or replaced; every other
        line as it was.

    Raises
    ------
    MegatronArgsError
        One line naming the file and the rule: Megatron-LM refuses the plan (its rule named);
        the script has no training command; it launches another number of GPUs than the plan;
        its model is not the session's (the fields named); or the rewritten script does not
        read back as the plan (a plan argument set where the rewrite cannot reach it, e.g. a
        sourced file), naming the fields.
    """
    pl = session.plan
    world = pl.tensor_parallel * pl.pipeline_parallel * (pl.context_parallel or 1) * \
        pl.data_parallel
    exported = _session_arguments(session)
    refuse_megatron_rules(session, exported)
    launch = read_launch(text, source, variables)
    _check_script(session, text, source, world, launch, variables)
    flex = (getattr(pl, "moe_token_dispatcher_type", None) == "flex")
    remove = PLAN_ARGUMENTS - (_KEPT_WITH_FLEX if flex else frozenset())
    new_args = [g for g in _groups(exported) if g[0] in PLAN_ARGUMENTS]
    for g in list(new_args):
        for need in _NEEDED_WITH.get(g[0], ()):
            if list(need) not in new_args:
                new_args.append(list(need))

    lines = text.splitlines(keepends=True)
    spans = _statements(lines)
    word = re.compile(rf"(?<![^\s\"'/]){re.escape(launch.script)}(?![^\s\"';&|)])")
    train = _training_statement(lines, spans, word, launch.script, source)
    keep, new_lines = _remove_plan_flags(lines, spans, _statements_to_edit(lines, spans, train),
                                         remove)
    _place_plan_arguments(new_lines, keep, spans[train], word, new_args)
    _environment_and_comment(session, lines, new_lines, keep, spans[train], source, variables)
    out = "".join(x for x, k in zip(new_lines, keep) if k)
    _check_read_back(session, out, source, world, script, variables)
    return out


def _check_script(session: Session, text: str, source: str, world: int, launch: Any,
                  variables: dict[str, str] | None) -> None:
    """Refuse a script ``--into`` cannot rewrite for ``session``: an argument list, another
    number of GPUs than the plan's ``world``, or another model than the session's."""
    if not launch.script:
        raise MegatronArgsError(f"{source}: --into needs a launch script with the training "
                                "command (torchrun ... pretrain_gpt.py ...), not an argument list")
    if launch.nnodes and launch.nproc_per_node and launch.nnodes * launch.nproc_per_node != world:
        raise MegatronArgsError(
            f"{source}: the script launches {launch.nnodes} x {launch.nproc_per_node} = "
            f"{launch.nnodes * launch.nproc_per_node} GPUs (--nnodes x --nproc-per-node) and the "
            f"plan runs on {world} (t*p*cp*d): change the launcher's counts or the plan")
    mine = _plan_view(text, source, world, variables, session.model.vocab_size)
    model_diff = _differences(mine.model, session.model, "model")
    if model_diff:
        raise MegatronArgsError(f"{source}: the script's model is not the session's: "
                                + "; ".join(model_diff))


def _training_statement(lines: list[str], spans: list[tuple[int, int]], word: re.Pattern,
                        script: str, source: str) -> int:
    """Index in ``spans`` of the last statement that runs the training script (``word``)."""
    train = None
    for k, (a, b) in enumerate(spans):
        body = "".join(_body(x)[0] for x in lines[a:b])
        if not body.lstrip().startswith("#") and word.search(body):
            train = k
    if train is None:
        raise MegatronArgsError(f"{source}: the training command's script {script!r} is "
                                "not written literally in the script; --into cannot place the "
                                "plan's arguments")
    return train


def _statements_to_edit(lines: list[str], spans: list[tuple[int, int]], train: int) -> set[int]:
    """The training command and the assignments it expands (transitively), as indices in
    ``spans``."""
    names = set(_REF.findall("".join(lines[spans[train][0]:spans[train][1]])))
    edit = {train}
    grew = True
    while grew:
        grew = False
        for k, (a, b) in enumerate(spans[:train]):
            m = _ASSIGN.match(_body(lines[a])[0])
            if k not in edit and m and m.group("name") in names:
                edit.add(k)
                names |= set(_REF.findall("".join(lines[a:b])))
                grew = True
    return edit


def _remove_plan_flags(lines: list[str], spans: list[tuple[int, int]], edit: set[int],
                       remove: frozenset[str]) -> tuple[list[bool], list[str]]:
    """``(keep, new_lines)``: the lines of the ``edit`` statements without the ``remove``
    flags (a line left empty dropped, a statement's new last line ending it)."""
    keep = [True] * len(lines)
    new_lines = list(lines)
    for k in sorted(edit):
        a, b = spans[k]
        for i in range(a, b):
            body, end = _body(lines[i])
            stripped, removed = _remove_flags(body, remove)
            if not removed:
                continue
            if stripped.strip() in ("", "\\"):
                keep[i] = False
            else:
                new_lines[i] = stripped + end
        kept = [i for i in range(a, b) if keep[i]]
        if kept and not keep[b - 1] and not _body(lines[b - 1])[0].rstrip().endswith("\\"):
            last = kept[-1]  # the statement's last line went: its new last line ends it
            body, end = _body(new_lines[last])
            new_lines[last] = re.sub(r"[ \t]*\\$", "", body) + end
    return keep, new_lines


def _place_plan_arguments(new_lines: list[str], keep: list[bool], span: tuple[int, int],
                          word: re.Pattern, new_args: list[list[str]]) -> None:
    """Write the plan's arguments right after the training script's name (in place)."""
    a, b = span
    at = next(i for i in range(a, b) if keep[i] and word.search(_body(new_lines[i])[0]))
    body, end = _body(new_lines[at])
    m = word.search(body)
    head, rest = body[:m.end()], body[m.end():]
    nxt = next((i for i in range(at + 1, b) if keep[i]), None)
    indent = re.match(r"[ \t]*", _body(new_lines[nxt])[0]).group() if nxt is not None else ""
    indent = indent or "    "
    block = [head + " \\"] + [indent + " ".join(shell_word(w) for w in g) + " \\"
                              for g in new_args]
    if rest.strip() == "":
        block[-1] = block[-1][:-2]
    elif rest.strip() != "\\":
        block.append(indent + rest.lstrip())
    else:
        pass  # the statement goes on: every block line continues it
    new_lines[at] = "".join(x + end for x in block)


def _environment_and_comment(session: Session, lines: list[str], new_lines: list[str],
                             keep: list[bool], span: tuple[int, int], source: str,
                             variables: dict[str, str] | None) -> None:
    """Write the environment Megatron-LM requires and the cluster comment before the training
    command (``span``), or replace the script's cluster comment (in place)."""
    from core.io.cluster_comment import MARK

    a, b = span
    final = read_launch("".join(x for x, k in zip(new_lines, keep) if k), source,
                        variables).arguments
    env_lines = []
    for var, value in required_environment(final, session.cluster.gpu).items():
        have = _last_assignment([x for x, k in zip(new_lines, keep) if k], len(lines), var)
        if value is not None and have != value:
            env_lines.append(f"export {var}={shell_word(value)}  # Megatron-LM validate_args "
                             "requires it")
        elif value is None and have is not None:
            env_lines.append(f"unset {var}  # Megatron-LM validate_args: not 1 with FSDP")
    comment = cluster_comment(session.cluster)
    marked = [i for i, x in enumerate(lines) if keep[i] and
              re.match(rf"^[ \t]*#[ \t]*{re.escape(MARK)}\b", _body(x)[0])]
    eol = _body(lines[a])[1] or "\n"
    if marked:
        for i in marked:
            new_lines[i] = comment + _body(lines[i])[1]
    else:
        env_lines.insert(0, comment)
    first = next(i for i in range(a, b) if keep[i])
    new_lines[first] = "".join(x + eol for x in env_lines) + new_lines[first]


def _check_read_back(session: Session, out: str, source: str, world: int, script: str,
                     variables: dict[str, str] | None) -> None:
    """Read the rewritten script back: the importer must see the plan an export gives, and
    Megatron's rules must hold."""
    vocab = session.model.vocab_size
    back = _plan_view(out, source, world, variables, vocab)
    fresh = _plan_view(export_script(session, script), source, world, None, vocab)
    diff = _differences(back.plan, fresh.plan, "plan")
    if diff:
        raise MegatronArgsError(f"{source}: the rewritten script does not read back as the plan "
                                "(a plan argument set where --into cannot reach it?): "
                                + "; ".join(diff))
    final = read_launch(out, source, variables).arguments
    broken = broken_rules(final)
    if broken:
        raise MegatronArgsError(f"{source}: with the plan, the script's own arguments break "
                                "Megatron-LM's rules: " + "; ".join(
                                    f"\"{r.message}\" ({r.source}; rule {r.name})"
                                    for r in broken))


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """The unified diff (``difflib``) of two scripts."""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True), old_name, new_name))


def _where(session: Session) -> str:
    """The session's file as a message's prefix (``""`` for a session made in memory)."""
    return f"{session.source}: " if session.source else ""


def _session_arguments(session: Session) -> list[str]:
    """:func:`export_arguments`, its refusal naming the session's file (as every other refusal
    of the export does: one line naming the file, the field and the rule)."""
    try:
        return export_arguments(session)
    except MegatronArgsError as exc:
        where = _where(session)
        if not where or str(exc).startswith(where):
            raise
        raise MegatronArgsError(where + str(exc)) from None


#: What a Megatron-LM run needs besides the plan, written under the exported launch: the plan
#: sets no data, learning rate or checkpoints, and Megatron-LM's parser has no default for
#: ``--lr`` or the data (``../shared/data/megatron-lm/arguments.json``: ``--lr``,
#: ``--data-path``, ``--save`` and ``--load`` default to None, ``--mock-data`` to False); nor
#: the model's numerics that the session does not hold (``--rotary-base`` and the like:
#: they do not change the iteration time; each named one is ``neutral`` in
#: ``resources/megatron_arguments.json``, none a modelled field the launch may write, as
#: ``--attention-dropout`` is), which ``--into`` keeps from the user's script.
NOT_IN_THE_PLAN = (
    "not set by the plan; add them for a run: the data (--data-path PREFIX, or --mock-data for",
    "a benchmark), the learning rate and its schedule (--lr has no default), checkpoints",
    "(--save, --load) and logging; and the model's numerics that do not change the",
    "iteration time, which the session does not hold (--rotary-base, --norm-epsilon,",
    "--init-method-std, --use-rope-scaling, ...): vtrain export megatron-args --into",
    "YOUR_SCRIPT.sh --out NEW.sh keeps your launch's own lines and replaces the plan's",
)

#: Written under the launch of a session whose checkpoint interval is Daly's optimum (empty
#: ``reliability.checkpoint_interval_iterations``), which no Megatron-LM argument gives; with
#: ``--save`` Megatron-LM's validate_args asserts a ``--save-interval`` above 0 (rules
#: ``save-interval-given``, ``save-interval-positive``).
DALY_NOT_WRITTEN = (
    "checkpoint interval: the session's is Daly's optimum, which no argument gives; with --save",
    "Megatron-LM needs --save-interval N (validate_args asserts one above 0): take N from",
    "vtrain simulate's goodput report",
)

#: Written above the torchrun line of a launch on more than one host: torchrun starts the
#: processes of one host, and the hosts find each other only through a rendezvous, which the
#: session cannot know (PyTorch's torchrun documentation, "Multi-node multi-worker":
#: ``--nnodes``, ``--nproc-per-node``, ``--rdzv-id``, ``--rdzv-backend c10d``,
#: ``--rdzv-endpoint``; or the static ``--node-rank`` and ``--master-addr``/``--master-port``).
RENDEZVOUS = (
    "run this on each of the {n} hosts with the rendezvous added to torchrun: --rdzv-id JOB",
    "--rdzv-backend c10d --rdzv-endpoint HOST:PORT (one of the hosts), or --node-rank R",
    "(0 to {last}) --master-addr HOST --master-port PORT; without it each host starts alone",
)


def export_script(session: Session, script: str = "pretrain_gpt.py") -> str:
    """A bash script of one torchrun command that runs the plan, one argument per line.

    Text from the session is data, never code: the model and GPU names go into a comment
    through :func:`core.util.text.shell_comment` (one line, line breaks escaped), the training
    script and every argument are single words through :func:`core.util.text.shell_word`, so
    the script runs the launch and nothing else, and holds no raw control character.
    torchrun runs on every host: ``--nnodes`` is ``world / g`` hosts of
    ``--nproc-per-node`` g = ``min(world, gpus_per_host(cluster))`` processes
    (:func:`core.plan.cluster.gpus_per_host`: 8 on HGX boards, 4 in a GB200 NVL72 compute
    tray, whose rack of 72 is one ``cluster.gpus_per_node``; a world inside one such rack
    takes the largest g up to the host's that divides it: 6 GB200s run as 2 hosts of 3,
    :func:`core.plan.cluster.processes_per_host`); on more than one host a comment above the
    torchrun line (:data:`RENDEZVOUS`) says to add the rendezvous, which the session cannot
    know; a token budget that is not a whole number of sequences is rounded (noted in a
    comment).

    Raises
    ------
    MegatronArgsError
        The world size does not fill whole hosts, or the plan breaks a Megatron-LM rule.
    """
    from core.plan.cluster import gpus_per_host, processes_per_host
    pl, cl = session.plan, session.cluster
    cp = pl.context_parallel or 1
    world = pl.tensor_parallel * pl.pipeline_parallel * cp * pl.data_parallel  # Megatron's t*p*cp*d
    host = gpus_per_host(cl)
    per_node = processes_per_host(cl, world)
    if world % per_node:
        raise MegatronArgsError(_where(session) + f"world size {world} does not fill whole hosts "
                                f"of {host} GPUs "
                                + ("(cluster.gpus_per_node)" if host == cl.gpus_per_node else
                                   f"(a {cl.gpu} host; core.plan.cluster.GPU_HOST_GPUS)"))
    args = _session_arguments(session)
    refuse_megatron_rules(session, args)
    lines = ["#!/usr/bin/env bash",
             shell_comment(f"{session.model.name} on {world} x {cl.gpu}: t={pl.tensor_parallel} "
                           f"p={pl.pipeline_parallel}{f' cp={cp}' if cp > 1 else ''} "
                           f"d={pl.data_parallel} (written by vtrain export megatron-args)"),
             cluster_comment(cl), *environment_lines(args, cl.gpu)]
    hosts = world // per_node
    if hosts > 1:
        lines += [shell_comment(line.format(n=f"{hosts:,}", last=hosts - 1))
                  for line in RENDEZVOUS]
    lines.append(f"torchrun --nnodes {hosts} --nproc-per-node {per_node} "
                 f"{shell_word(script)} \\")
    i = 0
    while i < len(args):
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            j += 1
        lines.append("    " + " ".join(shell_word(a) for a in args[i:j]) + " \\")
        i = j
    lines[-1] = lines[-1][:-2]
    rel = getattr(session, "reliability", None)
    if rel is None or rel.checkpoint_interval_iterations is None:
        lines += [shell_comment(line) for line in DALY_NOT_WRITTEN]
    lines += [shell_comment(line) for line in NOT_IN_THE_PLAN]
    samples = train_samples(session)
    if samples * session.model.seq_length != session.cost.training_tokens:
        lines.insert(3, shell_comment(
            f"--train-samples {samples} rounds the token budget up to whole iterations "
            f"({samples // session.plan.global_batch_size:,} of "
            f"{session.plan.global_batch_size:,} sequences, as vtrain simulate counts them: "
            "Megatron-LM runs train_samples // global_batch_size iterations)"))
    return "\n".join(lines) + "\n"
