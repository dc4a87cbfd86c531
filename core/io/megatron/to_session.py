"""A Megatron-LM launch's arguments into a session (``vtrain import megatron-args``).

What belongs here: :func:`session_from_launch` (the walk over the arguments: the unknown ones
refused, the model's and the plan's mapped by :mod:`.model_arguments` and
:mod:`.plan_arguments`, the token budget, other model scripts refused, the rest listed),
:class:`MegatronImport` (its result), and :func:`import_file` (a file read with
:func:`~core.io.megatron.launch.read_launch`, refused when Megatron-LM's start-up rules refuse
its arguments (:func:`refuse_broken_rules`), its cluster comment applied), with
:func:`import_checked` (that import with the configuration rules checked, each broken rule
named with the launch's arguments that set the field: what ``vtrain import megatron-args``
and the window's File > Import both call) and :func:`parse_variable` (one ``--var``).

The arguments map to a :class:`core.plan.session.Session` through
:data:`~core.io.megatron.arguments.ARGUMENTS`, one table of argument -> session field. An
argument whose target field (or value) this version's dataclasses do not have is **refused by
name** ("not modelled yet", exit status 2), never dropped: a Llama launch simulated as a GPT
model would be the worst defect a planner can have. Megatron-LM's other arguments are sorted
into those that may change the iteration time
(:data:`~core.io.megatron.arguments.TIMING_ARGUMENTS`, listed as *ignored*) and those that
cannot (:data:`~core.io.megatron.arguments.NEUTRAL_ARGUMENTS`, listed apart). An argument
Megatron-LM does not define is refused by name with a close match (Megatron-LM's argparse
stops on it), or listed with ``allow_unknown``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.io.cluster_comment import apply_cluster_comment
from core.io.import_result import ImportResult
from core.io.megatron.arguments import (ARGUMENTS, BY_OPTION, MEGATRON_MODEL_DEFAULTS,
                                        NEUTRAL_ARGUMENTS, at_default,
                                        REFUSED_ARGUMENTS, REMOVED_ARGUMENTS, MegatronArgsError,
                                        TOKENIZER_VOCAB, check_values, field_origin,
                                        unknown_arguments, LLAMA2_TOKENIZER)
from core.io.megatron.launch import Launch, parse_arguments, read_launch, replaced_occurrences
from core.io.megatron.mapping import Mapper, int_argument
from core.io.megatron.model_arguments import MOE_ONLY, map_model
from core.io.megatron.plan_arguments import map_plan
from core.io.megatron.rules import MEGATRON_COMMIT, OPTIONS, Rule, broken_rules, options_read
from core.plan.cluster import (GPU_HOST_GPUS, GPU_NVLINK_DOMAIN, NVLINK_DOMAIN_SPANS_HOSTS,
                               ClusterConfig, CostConfig, ReliabilityConfig)
from core.plan.fields import ConfigError, FieldError
from core.plan.rules import check
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.layout import capped_recompute_layers
from core.plan.model_config import model_from_fields
from core.util.text import short_repr, shown_name

__all__ = ["MegatronImport", "session_from_launch", "import_file", "with_cluster_comment",
           "parse_variable", "parse_variables", "import_checked", "refuse_broken_rules",
           "refuse_microbatch_groups"]


@dataclass
class MegatronImport(ImportResult):
    """A session read from a launch, and what of the launch it does not use.

    Attributes
    ----------
    session : Session
    used : dict of str to str
        Arguments of :data:`~core.io.megatron.arguments.ARGUMENTS` the launch gives -> the
        session fields they map to.
    ignored : dict of str to str
        Arguments that may change the iteration time but are not modelled -> why.
    notes : list of (str, str)
        How the import read arguments whose meaning needs saying: ``("attention", why)``
        names the kernel, the argument (or Megatron-LM's default) that chose it, and which
        argument wins when two disagree; ``("cluster", note)`` the launch's cluster comment.
    neutral : list of str
        Arguments that do not change it (logging, paths, learning rate, numerics ...).
    launch : Launch
    unknown : list of str
        Arguments Megatron-LM does not define, read with ``allow_unknown`` (also in ``ignored``).
    """

    neutral: list[str] = field(default_factory=list)
    launch: Launch | None = None
    unknown: list[str] = field(default_factory=list)


def _refuse_unknown(args: dict[str, list[str]], allow_unknown: bool, src: str
                    ) -> list[tuple[str, str]]:
    """The arguments Megatron-LM does not define, with hints (listed with ``allow_unknown``).

    Raises
    ------
    MegatronArgsError
        Any of them without ``allow_unknown``, or one Megatron-LM no longer accepts.
    """
    unknown = unknown_arguments(args)
    refused = [(f, hint) for f, hint in unknown if not allow_unknown or f in REMOVED_ARGUMENTS]
    if refused:  # Megatron-LM's argparse stops on an argument it does not define
        raise MegatronArgsError(f"{src}: " + "; ".join(
            f"{shown_name(f)} is not a Megatron-LM argument" + (f" ({hint})" if hint else "")
            if f not in REMOVED_ARGUMENTS else f"{f}: {hint}" for f, hint in refused) + (
            "" if all(f in REMOVED_ARGUMENTS for f, _ in refused) else
            " (Megatron-LM's argparse stops on an argument it does not define; give "
            "--allow-unknown to list such arguments as ignored)"))
    return unknown


def _token_budget(mp: Mapper, s: int, B: int) -> None:
    """``cost.training_tokens``: the whole iterations Megatron-LM runs times B*s: for
    ``--train-samples``, ``samples // B`` of them (``update_train_iters`` in
    ``megatron/training/training.py``: ``args.train_iters = args.train_samples //
    args.global_batch_size`` without a batch-size ramp-up; a remainder of samples is not run,
    noted), for ``--train-iters`` that many. Raises MegatronArgsError naming ``--train-samples`` when
    it is less than one global batch (Megatron-LM would run no iteration)."""
    args, src = mp.args, mp.source
    samples = int_argument(args, "--train-samples", src) if mp.take("--train-samples") else None
    iters = int_argument(args, "--train-iters", src) if mp.take("--train-iters") else None
    if samples is not None:
        if samples < B:
            raise MegatronArgsError(
                f"{src}: --train-samples {samples} is less than one global batch ({B:,} "
                "samples): Megatron-LM runs train_samples // global_batch_size = 0 iterations")
        if samples % B:
            mp.notes.append(("--train-samples", (
                f"{samples:,} samples are {samples // B:,} whole iterations of {B:,} "
                f"(Megatron-LM runs train_samples // global_batch_size); the last "
                f"{samples % B:,} samples are not run, and the token budget is the "
                f"{samples // B:,} iterations' {samples // B * B * s:,} tokens")))
        mp.set("--train-samples", "cost.training_tokens", float(samples // B * B * s))
    elif iters is not None:
        mp.set("--train-iters", "cost.training_tokens", float(iters * B * s))


def _checkpoints(mp: Mapper) -> None:
    """The run's checkpoints (docs/goodput.md): ``--save-interval`` (or its other name
    ``--persistent-save-interval``; the last given wins, as argparse takes one dest) is
    ``reliability.checkpoint_interval_iterations``, ``--async-save`` ``reliability.async_save``
    (without it synchronous saves, Megatron-LM's default).

    Megatron-LM saves only with ``--save`` (a directory): ``training.py`` saves periodically
    ``if args.save and args.save_interval and iteration % args.save_interval == 0`` and at the
    end ``if args.save and ...``. A launch without it saves nothing: the interval is one no run
    reaches (``checkpoint_interval_iterations``' maximum, 2**40; a failure restarts the run from
    its start), noted, and ``--save-interval`` and ``--async-save`` are listed as having no
    effect, as the Bridge importer reads ``checkpoint.save: null``. With ``--save`` and an
    interval of 0, or none (``save_interval`` defaults to None, falsy like 0), Megatron-LM saves
    no periodic checkpoint, one at the end: 2**40 - 1, an interval beyond any run, noted with
    that rule (never Daly's optimum, which Megatron-LM does not run). This commit's
    ``validate_args`` refuses both (rules ``save-interval-given`` and ``save-interval-positive``
    of :mod:`core.io.megatron.rules`, left on import: :func:`import_file` notes them)."""
    args, src = mp.args, mp.source
    given = [f for f in args if f in ("--save-interval", "--persistent-save-interval")]
    for flag in given:
        mp.take(flag)
    never = next(f.metadata["max"] for f in dataclasses.fields(ReliabilityConfig)
                 if f.name == "checkpoint_interval_iterations")
    if not (args.get("--save") or [""])[-1]:  # argparse keeps the last; "" is falsy too
        n = int_argument(args, given[-1], src, minimum=0) if given else None  # still checked
        mp.notes.append(("--save", "not given: Megatron-LM saves no checkpoint (training.py "
                         "saves only if args.save); a failure restarts the run from its start "
                         f"(reliability.checkpoint_interval_iterations {never:,}, beyond any "
                         "run)"))
        mp.set("--save", "reliability.checkpoint_interval_iterations", never)
        for flag in given:
            mp.ignored.append((flag, f"{n}: no effect without --save (no checkpoint is saved)"))
        if mp.switch("--async-save"):
            mp.ignored.append(("--async-save", "no effect without --save (no checkpoint is "
                               "saved)"))
        return
    # --save decides whether checkpoints are saved at all: used, with the field it decides
    mp.record("--save", "reliability.checkpoint_interval_iterations")
    if given:  # parse_arguments keeps the order given: the last one is argparse's value
        n = int_argument(args, given[-1], src, minimum=0)
        if n == 0:  # Megatron-LM saves when iteration % interval == 0 only if the interval is
            # not 0; it still saves once at the end: an interval no run reaches (one less than
            # the maximum, which is no checkpoint at all: core.plan.cluster.NO_CHECKPOINT_INTERVAL)
            n = never - 1
            mp.notes.append((given[-1], "0: no periodic checkpoint, one at the end of the run "
                             f"(reliability.checkpoint_interval_iterations {n:,}, beyond any run)"))
        elif n >= never:  # with --save Megatron-LM saves at the end (2^40 is no save at all)
            n = never - 1
        mp.set(given[-1], "reliability.checkpoint_interval_iterations", n)
    else:  # save_interval None: falsy, as 0 is, so training.py saves only at the end
        mp.notes.append(("--save", "without --save-interval: no periodic checkpoint, one at the "
                         "end of the run (training.py saves periodically only if args.save and "
                         "args.save_interval; save_interval defaults to None) "
                         f"(reliability.checkpoint_interval_iterations {never - 1:,}, beyond any "
                         "run)"))
        mp.set("--save", "reliability.checkpoint_interval_iterations", never - 1)
    if mp.switch("--async-save"):
        mp.set("--async-save", "reliability.async_save", True)


#: Megatron-LM's arguments of hybrid (Mamba) models: refused, never ignored.
_HYBRID_FLAGS = ("--is-hybrid-model", "--hybrid-override-pattern", "--hybrid-attention-ratio",
                 "--hybrid-mlp-ratio", "--mamba-state-dim", "--mamba-head-dim",
                 "--mamba-num-groups")


def _refuse_other_models(mp: Mapper, launch: Launch) -> None:
    """Refuse Megatron-LM's other model scripts, hybrid (Mamba) models and the table's other
    arguments that change the work in a way vtrain does not model."""
    args = mp.args
    # hybrid models (pretrain_mamba.py: Mamba / state-space layers beside attention and MLP)
    hybrid = [f for f in _HYBRID_FLAGS if f in args]
    spec = " ".join(args.get("--spec") or [])
    if "mamba" in spec.lower():
        hybrid.append(f"--spec {spec}")
    script = Path(launch.script).name if launch.script else ""
    other_model = re.match(r"pretrain_(mamba|bert|t5|vlm|retro|ict|vision\w*|multimodal\w*|mm\w*)"
                           r"\.py$", script)
    if other_model:  # Megatron-LM's other model scripts build other layers than GPT's
        mp.refuse(script, f"the {other_model.group(1)} model script builds "
                  + ("Mamba layers (a hybrid or all-Mamba model)" if other_model.group(1) == "mamba"
                     else "another model than a GPT decoder") + "; only pretrain_gpt.py's decoder "
                  "is modelled")
    elif hybrid:
        mp.refuse(hybrid[0], "a hybrid model (Mamba / state-space layers beside attention and "
                  "MLP) is not modelled: timing its layers as transformer layers would be "
                  "another model" + (f" (also: {', '.join(hybrid[1:])})" if hybrid[1:] else ""))
    # Megatron-LM's start-up rules each refused argument breaks, said with its refusal (a
    # launch Megatron-LM does not start: --rampup-batch-size with --train-iters)
    broken: list[Rule] | None = None
    for flag in args:  # the table's other arguments that change the work in an unmodelled way
        if flag not in REFUSED_ARGUMENTS or flag in _HYBRID_FLAGS or flag in mp.used \
                or flag == "--spec" and hybrid:  # a mapping read it; a Mamba spec is named above
            continue
        if at_default(flag, args[flag]):  # Megatron-LM's default: nothing changes
            mp.at_default.append(flag)
            continue
        needs = [f for f in BY_OPTION[flag].only_with if f not in args]
        if needs:  # Megatron-LM reads it only with them
            mp.ignored.append((flag, f"no effect without {', '.join(needs)} ("
                               f"{REFUSED_ARGUMENTS[flag]})"))
            mp.used.add(flag)
            continue
        given = " ".join([flag, *args[flag]])
        if broken is None:
            broken = [r for r in broken_rules(launch.arguments) if r.on_import]
        rules = [_rule_words(r, launch.arguments, args) for r in broken
                 if flag in options_read(r, launch.arguments)]
        mp.refuse(given, f"not modelled ({REFUSED_ARGUMENTS[flag]})" + "".join(
            f"; and Megatron-LM ({MEGATRON_COMMIT[:7]}) refuses to start it: {w}" for w in rules))


def _rule_words(rule: Rule, arguments: list[str], given: dict[str, list[str]]) -> str:
    """``rule NAME: "Megatron's message" (where); change one of: --a 1, --b`` for a broken
    start-up rule of a launch (``arguments`` as read, ``given`` as parsed)."""
    return (f"rule {rule.name}: \"{rule.message}\" ({rule.source}); change one of: "
            + ", ".join(_as_given(o, given) for o in options_read(rule, arguments)))


def _unused(mp: Mapper, unknown: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """``(ignored, neutral)``: the arguments no mapping read, those that may change the
    iteration time with why, those that cannot apart."""
    args = mp.args
    for flag in ("--vocab-file", "--num-query-groups", *MOE_ONLY):
        mp.used.add(flag)
    ignored, neutral = dict(mp.ignored), []
    hints = dict(unknown)
    for flag in args:
        if flag in mp.used or flag in mp.fields or flag in ARGUMENTS:
            continue
        if flag in NEUTRAL_ARGUMENTS or flag in mp.at_default:
            neutral.append(flag)
        elif flag in hints:  # allow_unknown
            ignored[flag] = "not a Megatron-LM argument vtrain knows" + (
                f" ({hints[flag]})" if hints[flag] else "") + "; may change the iteration time"
        else:
            ignored[flag] = "not modelled; may change the iteration time"
    if "--num-experts" not in args:
        ignored.update((flag, "without --num-experts it has no effect") for flag in MOE_ONLY
                       if flag in args)
    if "--fp8-recipe" in args and "--fp8-format" not in args:
        if "--use-precision-aware-optimizer" in args:  # Megatron-LM gives it the optimizer too
            te = mp.values["plan"].get("te_master_weights")
            mp.notes.append(("--fp8-recipe", "without --fp8-format no GEMM runs in FP8, but "
                             "Megatron-LM gives the recipe to the precision-aware optimizer: "
                             "the master weights are " + ("Transformer Engine's" if te else
                             "Megatron-Core's fp32 ones") + f" (plan.te_master_weights {str(te).lower()})"))
        else:
            ignored["--fp8-recipe"] = "without --fp8-format it has no effect"
    return ignored, neutral


def session_from_launch(launch: Launch, *, num_gpus: int | None = None,
                        gpus_per_node: int | None = None, gpu: str | None = None,
                        name: str | None = None, allow_unknown: bool = False,
                        nodes: int | None = None,
                        tokenizer_vocab_size: int | None = None) -> MegatronImport:
    """Map a launch's arguments to a session (see :data:`~core.io.megatron.arguments.ARGUMENTS`).

    Parameters
    ----------
    launch : Launch
    num_gpus, gpus_per_node : int, optional
        World size and GPUs per node when the launch does not give them (they
        override the launcher's counts when given).
    nodes : int, optional
        Nodes (overrides the launcher's): the world size is nodes times the GPUs per node
        (``gpus_per_node``, else the launcher's processes per node).
    gpu : str, optional
        GPU kind of the cluster (default: :class:`ClusterConfig`'s).
    name : str, optional
        Model name (default: the file's stem).
    allow_unknown : bool
        List arguments Megatron-LM does not define as ignored instead of refusing them.
    tokenizer_vocab_size : int, optional
        The size of a ``--tokenizer-type Llama2Tokenizer`` model file (Megatron-LM reads it
        from ``--tokenizer-model``; without it Meta's Llama 2 file, 32,000, is assumed, noted).

    Raises
    ------
    MegatronArgsError
        An argument Megatron-LM does not define (each named, with a close match;
        unless ``allow_unknown``) or no longer accepts, a required argument is
        missing, a value is not valid, the world size is unknown or does not
        divide by t*p*cp, or arguments target fields this version does not model
        (every such argument is named).
    """
    src = launch.source
    if launch.unset_counts and num_gpus is None and nodes is None:
        raise MegatronArgsError(launch.unset_counts[0])  # the launcher's count names its variable
    args = parse_arguments(launch.arguments, src)
    unknown = _refuse_unknown(args, allow_unknown, src)
    # what Megatron-LM's parser refuses, before any mapping: the values of the arguments no
    # mapping reads (the table's are read and checked by the mapping, with its messages)
    check_values(args, src, skip=ARGUMENTS)
    for flag, values in replaced_occurrences(launch.arguments):  # argparse checks each one
        try:
            check_values({flag: values}, src)
        except MegatronArgsError as exc:
            raise MegatronArgsError(f"{exc} (an earlier {flag} that a later one replaces: "
                                    "argparse checks every occurrence as it comes)") from None
    mp = Mapper(src, args)
    mp.tokenizer_vocab_size = tokenizer_vocab_size
    L, h, s = map_model(mp)
    B, nproc = map_plan(mp, launch, L, num_gpus=num_gpus, gpus_per_node=gpus_per_node,
                        nodes=nodes)
    _token_budget(mp, s, B)
    _checkpoints(mp)
    _refuse_other_models(mp, launch)
    # the table's arguments the mapping did not read (--moe-router-topk without experts):
    # their count and type, as Megatron-LM's parser checks them
    check_values({f: v for f, v in args.items() if f in ARGUMENTS and f not in mp.used
                  and f not in mp.fields}, src)
    if mp.refused:
        raise MegatronArgsError(f"{src}: " + "; ".join(mp.refused))
    ignored, neutral = _unused(mp, unknown)
    cluster = dict(mp.values["cluster"])
    if gpu:
        cluster["gpu"] = gpu
    kind = cluster.get("gpu", ClusterConfig().gpu)
    if nproc and gpus_per_node is None and kind in NVLINK_DOMAIN_SPANS_HOSTS \
            and nproc <= GPU_HOST_GPUS[kind] < GPU_NVLINK_DOMAIN[kind]:
        # the launcher's processes per host of a GB200 NVL72 compute tray (at most its 4): the
        # rack is the NVLink domain, the node
        cluster["gpus_per_node"] = GPU_NVLINK_DOMAIN[kind]
        mp.notes.append(("GPUs per node", f"{GPU_NVLINK_DOMAIN[kind]}: the {kind}'s NVLink "
                         f"domain, which spans its hosts of {GPU_HOST_GPUS[kind]} GPUs (the "
                         f"launch's {nproc} processes per host); give --gpus-per-node G for "
                         "another"))
    elif nproc:
        cluster["gpus_per_node"] = nproc
    elif nodes is None and (num_gpus is not None or launch.world_size is not None):
        # a world size alone (--num-gpus, or a dump's world_size): nodes of the GPU's NVLink
        # domain (one node, partly used, when fewer: a sweep from the session may use it all),
        # not ClusterConfig's default of 8 (a GB200 rack has 72)
        world = num_gpus if num_gpus is not None else launch.world_size
        given = ("--num-gpus gives only the world size" if num_gpus is not None
                 else "the launch gives only the world size")
        domain, host = GPU_NVLINK_DOMAIN.get(kind), GPU_HOST_GPUS.get(kind)
        # hosts inside one NVLink domain may run fewer processes (6 GB200s: 2 hosts of 3)
        if host is not None and world > host and world % host and not (
                kind in NVLINK_DOMAIN_SPANS_HOSTS and world <= (domain or 0)):
            raise MegatronArgsError(f"{src}: {given}, {world}, which is not a multiple of the "
                                    f"{kind}'s {host} GPUs per host (every host runs as many "
                                    "processes): give --gpus-per-node G")
        if domain is not None:
            cluster["gpus_per_node"] = domain
        if domain is not None and world > domain:  # how many nodes is the import's assumption
            mp.notes.append(("GPUs per node", f"{domain}: the {kind}'s NVLink domain ({given}, "
                             f"{world}); give --gpus-per-node G for your nodes"))
    # Megatron applies --recompute-num-layers to each model chunk: a count at or above the
    # largest recomputes every layer (but the MTP layers: capped, the block method stays)
    plan = capped_recompute_layers(ParallelPlan(**mp.values["plan"]), L,
                                   int(mp.values["model"].get("mtp_num_layers") or 0))
    model = model_from_fields({**MEGATRON_MODEL_DEFAULTS, "name": name or Path(src).stem,
                               **mp.values["model"]})
    session = Session(model, plan, ClusterConfig(**cluster), CostConfig(**mp.values["cost"]),
                      ReliabilityConfig(**mp.values["reliability"]))
    # what each argument set (Mapper.fields), else the table's fields; not one listed as
    # ignored (--moe-grouped-gemm without experts)
    used = {f: ", ".join(mp.fields[f]) if f in mp.fields else ", ".join(ARGUMENTS[f].targets)
            for f in args if (f in mp.fields or f in ARGUMENTS) and f not in ignored}
    return MegatronImport(session, used, ignored, mp.notes, neutral=neutral, launch=launch,
                          unknown=[f for f, _ in unknown])


def with_cluster_comment(res: MegatronImport, text: str, kw: dict[str, Any]) -> MegatronImport:
    """``res`` with the cluster of the launch's ``# vtrain: cluster`` comment (written by the
    export; :mod:`core.io.cluster_comment`), noted in ``res.notes``. ``kw``: the import's keywords
    (an explicit ``gpu`` / ``gpus_per_node`` wins over the comment)."""
    src = res.launch.source if res.launch else "launch"
    try:
        session, note = apply_cluster_comment(
            res.session, text, src, launcher_nproc=res.launch.nproc_per_node if res.launch
            else None, gpu=kw.get("gpu"), gpus_per_node=kw.get("gpus_per_node"))
    except ValueError as exc:
        raise MegatronArgsError(str(exc)) from None
    res.session = session
    if note:
        res.notes.append(("cluster", note))
    return res


def _as_given(option: str, given: dict[str, list[str]]) -> str:
    """``option`` as the launch gives it (``--pipeline-model-parallel-size 2``), or said not to
    be given, with Megatron-LM's default when it has a value."""
    if option in given:
        return " ".join([option, *given[option]])
    _, nargs, default = OPTIONS[option]
    return f"{option} (not given" + (f"; Megatron-LM's default {default}" if nargs is None and
                                      default is not None else "") + ")"


def refuse_broken_rules(launch: Launch) -> None:
    """Refuse a launch that Megatron-LM's start-up refuses: its arguments break one of
    :data:`core.io.megatron.rules.RULES` (read with Megatron's defaults for what it does not
    give) that applies on import (:attr:`~core.io.megatron.rules.Rule.on_import`: not a
    feature this commit disables but earlier versions run). The environment rules are not
    applied: the environment a launch runs in is not all in its file (see
    docs/megatron_args.md); the export writes what they need.

    Raises
    ------
    MegatronArgsError
        One line: the file, and for each broken rule its name, Megatron's message, where the
        check is, and the launch's arguments that decide it (those to change).
    """
    broken = [r for r in broken_rules(launch.arguments) if r.on_import]
    if not broken:
        return
    given = parse_arguments(launch.arguments, launch.source)
    parts = [_rule_words(r, launch.arguments, given) for r in broken]
    raise MegatronArgsError(f"{launch.source}: Megatron-LM ({MEGATRON_COMMIT[:7]}) refuses to "
                            "start this launch, so it is not simulated: " + "; ".join(parts))


GROUP_OPTION = "--microbatch-group-size-per-virtual-pipeline-stage"


def refuse_microbatch_groups(res: MegatronImport) -> None:
    """Refuse an interleaved launch whose micro-batch count Megatron-Core refuses
    (:func:`core.schedules.interleaved.megatron_core_refusal`, with the launch's
    ``--microbatch-group-size-per-virtual-pipeline-stage`` N where it gives one), or that it
    runs with an N other than p on a count that is not a multiple of p: an order vtrain does not
    model (it models N = p, Megatron-Core's default). Without N the session rules name the
    default's refusal; with N the import names it, as Megatron-Core would. A launch it keeps
    gets a note for N = p (the order modelled) and the reason N is ignored otherwise; a launch
    without the interleaved schedule lists N among the arguments of no effect.

    Raises
    ------
    MegatronArgsError
        One line: the file, m, p, N, and Megatron-Core's message or why it is not modelled.
    """
    from core.schedules.interleaved import MEGATRON_CORE_MICROBATCH_RULE, megatron_core_refusal

    plan, launch = res.session.plan, res.launch
    n = int_argument(parse_arguments(launch.arguments, launch.source), GROUP_OPTION,
                     launch.source)
    if n is None:
        return
    if plan.schedule != "interleaved":
        # only forward_backward_pipelining_with_interleaving reads N (megatron-core 0.16.1
        # schedules.py): without virtual stages it changes nothing
        res.ignored.pop(GROUP_OPTION, None)
        res.neutral.append(GROUP_OPTION)
        return
    p, m = plan.pipeline_parallel, plan.num_microbatches
    counts = (f"m = global_batch_size/(data_parallel*micro_batch_size) = {m} micro-batches on "
              f"p = {p} stages with {GROUP_OPTION} {n}")
    why = megatron_core_refusal(p, m, n)
    if why is not None:
        raise MegatronArgsError(f"{launch.source}: {MEGATRON_CORE_MICROBATCH_RULE} refuses "
                                f"{counts}: \"{why}\"; change one of --global-batch-size, "
                                f"--micro-batch-size, {GROUP_OPTION}")
    if m % p:
        raise MegatronArgsError(f"{launch.source}: {counts}: Megatron-Core runs it, but its "
                                f"interleaved order with N != p is not modelled (vtrain models "
                                f"N = p, Megatron-Core's default, which needs m to be a multiple "
                                f"of p)")
    res.ignored.pop(GROUP_OPTION, None)
    if n == p:
        res.notes.append((GROUP_OPTION, f"{n} = p, Megatron-Core's default: the interleaved "
                          "order vtrain models"))
    else:
        res.ignored[GROUP_OPTION] = (f"Megatron-Core runs N = {n} micro-batches of a virtual "
                                     f"stage at a time ((v-1)*N warm-up forwards besides "
                                     f"2(p-1-i)); vtrain models its default N = p = {p}: may "
                                     "change the iteration time and the activation memory")


def import_file(path: str | Path, **kw: Any) -> MegatronImport:
    """:func:`read_launch` + :func:`session_from_launch` of a file (``variables`` goes to the
    former, ``vocab_size`` is added to the launch as ``--vocab-size`` where it gives none,
    the other keywords go to the latter), refused where Megatron-LM would not start it
    (:func:`refuse_broken_rules`, once the arguments are read and mapped).

    Raises MegatronArgsError (also for an unreadable file, one that is not a regular file,
    or one of more than :data:`core.io.shell_reader.MAX_LAUNCH_BYTES`).
    """
    from core.util.inputs import read_text

    path = Path(path)
    text = read_text(path, MegatronArgsError, "launch", encoding="utf-8")
    variables = kw.pop("variables", None)
    vocab = kw.pop("vocab_size", None)
    launch = read_launch(text, str(path), variables)
    if vocab is not None:  # the tokenizer's size, where the launch leaves it to its files
        given = parse_arguments(launch.arguments, str(path))  # --vocab-size=N too
        tok = (given.get("--tokenizer-type") or [""])[-1]
        if tok == LLAMA2_TOKENIZER:  # its size is its --tokenizer-model file's (any SentencePiece)
            kw["tokenizer_vocab_size"] = vocab
            vocab = None
    if vocab is not None:
        if "--vocab-size" in given:
            raise MegatronArgsError(f"{path}: the launch gives --vocab-size; the import's "
                                    f"--vocab-size {vocab} is for a launch that does not")
        if tok == "NullTokenizer":
            # Megatron-LM's NullTokenizer has no files: it asserts the launch's --vocab-size
            raise MegatronArgsError(f"{path}: --tokenizer-type NullTokenizer takes its size "
                                    "from the launch's --vocab-size, which Megatron-LM needs "
                                    "(it does not start without it): add it to the launch; "
                                    f"the import's --vocab-size {vocab} is for a tokenizer that "
                                    "keeps its size in its files")
        if tok in TOKENIZER_VOCAB:  # its size is known: the import's would replace it
            raise MegatronArgsError(f"{path}: --tokenizer-type {tok} has {TOKENIZER_VOCAB[tok]:,} "
                                    f"tokens; the import's --vocab-size {vocab} is for a "
                                    "tokenizer that keeps its size in its files")
        launch.arguments += ["--vocab-size", str(vocab)]
    res = session_from_launch(launch, **kw)
    refuse_broken_rules(res.launch)
    refuse_microbatch_groups(res)
    for r in broken_rules(res.launch.arguments):  # those left on import: earlier versions run
        res.notes.append((f"rule {r.name}", f"Megatron-LM ({MEGATRON_COMMIT[:7]}) refuses it "
                          f"(\"{r.message}\", {r.source}); imported as the earlier versions "
                          "that run it do, and vtrain export megatron-args writes no launch "
                          "that breaks it"))
    return with_cluster_comment(res, text, kw)


def parse_variable(item: str) -> tuple[str, str]:
    """One ``--var NAME=VALUE``: a value of the script's environment (a shell variable name:
    ASCII letters, digits and ``_``, not starting with a digit, as bash's ``NAME=value``
    takes it) or a positional parameter (``1``, ``2`` ...: ASCII digits without a leading
    zero, bash's ``$1`` ``${10}``), as ``(name, value)``.

    Raises
    ------
    MegatronArgsError
        ``item`` is not ``NAME=VALUE`` with such a name (``²``, ``٨`` and ``01`` are
        digits to Python's ``str.isdigit`` but no parameter of bash's).
    """
    name, eq, value = item.partition("=")
    if not eq or not _VAR_NAME.fullmatch(name):
        raise MegatronArgsError(f"--var {short_repr(item)}: expected NAME=VALUE (a shell variable name "
                                "or a positional parameter 1, 2 ...)")
    return name, value


#: bash's variable names and positional parameters (``[1-9][0-9]*``), ASCII only
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[1-9][0-9]*", re.ASCII)


def parse_variables(items: list[str]) -> dict[str, str]:
    """Every ``--var NAME=VALUE`` (:func:`parse_variable`) as ``{name: value}``.

    Raises
    ------
    MegatronArgsError
        One is malformed, or a name is given twice with two values (which one the script
        runs with is not said; the same value twice is one).
    """
    out: dict[str, str] = {}
    for item in items:
        name, value = parse_variable(item)
        if name in out and out[name] != value:
            raise MegatronArgsError(
                f"--var {name} is given twice, {short_repr(name + '=' + out[name])} and "
                f"{short_repr(item)}: give it once")
        out[name] = value
    return out


def import_checked(path: str | Path, **kw: Any) -> MegatronImport:
    """:func:`import_file` with the session's configuration rules checked
    (:func:`core.plan.rules.check`).

    Raises
    ------
    MegatronArgsError
        As :func:`import_file`.
    ConfigError
        The session breaks a rule: each error names the launch's arguments that set the
        field (:func:`~core.io.megatron.arguments.field_origin`), in the file ``path``.
    """
    res = import_file(path, **kw)
    try:
        check(res.session)
    except ConfigError as exc:  # named with the file and the arguments of the launch that set it
        given = parse_arguments(res.launch.arguments, str(path))
        origins = [field_origin(e.field, given) for e in exc.errors]
        raise ConfigError([FieldError(e.field, e.message + (f" ({origin})" if origin else ""), rule=e.rule)
                           for e, origin in zip(exc.errors, origins)],
                          source=str(path)) from None
    return res
