"""torchtitan job configs (``train_configs/*.toml``) into sessions.

torchtitan (``torchtitan/config/job_config.py``) trains a model named by ``[model] name`` and
``flavor`` with FSDP2 over ``data_parallel_shard_degree`` (``-1``: the ranks the other degrees
leave) times ``context_parallel_degree`` ranks when either exceeds one (``ParallelDims.
fsdp_enabled``), replicas over ``data_parallel_replicate_degree`` (HSDP with FSDP, torch DDP
without), mixed precision by FSDP or ``torch.autocast`` but none for tensor or pipeline
parallelism without FSDP (``maybe_enable_amp``: fp32), tensor parallelism that is always sequence-parallel, pipeline parallelism with
``torch.distributed.pipelining``'s schedules, context parallelism through PyTorch's
``context_parallel`` and expert parallelism over the data-parallel ranks.
:func:`session_from_torchtitan` reads such a file; every key is one of (:data:`KEYS`, the
policy table of :mod:`core.io.torchtitan_keys`):

* **used**: it fills a session field (the text says which);
* **no effect**: it does not change the simulated iteration (logging, checkpoints, paths,
  the learning rate ...), listed with the reason;
* **refused**: the simulator does not model what it asks for (named, with what it would
  change); the values that switch it off are accepted and listed.

A key in no list is refused too: we cannot tell whether it changes the run.

The world size is not in the file (``torchrun`` gives it): ``num_gpus`` must be given when
``data_parallel_shard_degree`` is ``-1``, else it is the product of the degrees.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from core.io.import_result import (ImportResult, cluster_of_gpu, global_batch_note, refusal,
                                   switched_off_or_refuse)
from core.io.torchtitan_keys import KEYS, Rule
from core.io.torchtitan_older import (OLDER_MICROBATCHES, older_layout, older_microbatches,
                                     older_pipeline_split)
from core.io.torchtitan_flavours import (FLAVOUR_NOTES, FLAVOURS, REFUSED_FLAVOURS,
                                         REFUSED_MODELS)
from core.plan.cluster import NO_CHECKPOINT_INTERVAL, CostConfig, ReliabilityConfig
from core.plan.fields import ConfigError, FieldError
from core.util.text import did_you_mean, short_repr, shown_name
from core.plan.parallel import ParallelPlan
from core.plan.session import Session

__all__ = ["KEYS", "FLAVOURS", "SCHEDULES", "RECOMPUTE_OPTIONS", "sweep_options",
           "session_from_torchtitan",
           "read_torchtitan_config", "load_toml"]

#: torchtitan's ``pipeline_parallel_schedule`` -> ``(plan.schedule, model chunks per rank)``
#: (torchtitan builds two stages per rank for a multi-stage schedule when
#: ``pipeline_parallel_layers_per_stage`` is not given).
SCHEDULES: dict[str, tuple[str, int]] = {"1F1B": ("1f1b", 1), "GPipe": ("gpipe", 1),
                                         "Interleaved1F1B": ("interleaved", 2)}
_PRECISIONS = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
_REDUCE_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


def _rule(section: str, key: str) -> Rule | None:
    return KEYS.get(f"{section}.{key}") or KEYS.get(f"{section}.*")


#: torchtitan v0.2's ``[quantize.linear.float8]`` (``config/job_config.py``: ``Quantize.linear
#: .float8``, a ``Float8Linear``) is v0.1's ``[float8]``, the same fields; it goes with the
#: converter ``quantize.linear.float8``. Its keys follow the ``float8.*`` rules.
_FLOAT8_V02 = "quantize.linear.float8."


#: v0.2's other ``[quantize]`` converters' settings (MXFP8 linears, FP8 / MXFP8 grouped GEMMs):
#: read only when ``model.converters`` names their converter, which is refused.
_QUANTIZE_OTHER = ("quantize.linear.mx.", "quantize.grouped_mm.")
_QUANTIZE_OTHER_RULE = Rule("no_effect", "settings of the MXFP8 linear and grouped-GEMM "
                            "converters, read only when model.converters names them "
                            "(refused: float8 is modelled)")


def _float8_key(used: dict[str, Any], key: str) -> str:
    """The name ``float8.KEY`` has in this file: ``quantize.linear.float8.KEY`` where the file
    uses torchtitan v0.2's section, else ``float8.KEY``."""
    return _FLOAT8_V02 + key if _FLOAT8_V02 + key in used else "float8." + key


def _described(name: str) -> Rule:
    """The rule of a used key, ``[quantize.linear.float8]``'s under its ``[float8]`` name."""
    if name.startswith(_FLOAT8_V02):
        name = "float8." + name[len(_FLOAT8_V02):]
    return KEYS.get(name, KEYS.get(name.split(".")[0] + ".*"))


def _float8_converter_on(cfg: dict[str, Any]) -> bool:
    """Whether the file turns torchtitan's float8 linears on: ``model.converters`` names
    ``float8`` or ``quantize.linear.float8``, or the older ``[float8] enable_float8_linear`` is
    true. Without it the ``[float8]`` (``[quantize.linear.float8]``) settings configure a
    converter that is not built (torchtitan's ``Float8LinearConverter`` reads them only when
    listed): its refused keys change nothing (malformed values are refused by
    :func:`_precision`)."""
    model, float8 = cfg.get("model"), cfg.get("float8")
    converters = model.get("converters", []) if isinstance(model, dict) else []
    if isinstance(converters, str):
        converters = [converters]
    on = isinstance(converters, list) and any(
        c in ("float8", "quantize.linear.float8") for c in converters if isinstance(c, str))
    return on or (isinstance(float8, dict) and float8.get("enable_float8_linear") is True)


_FLOAT8_OFF = "no effect without the float8 converter (model.converters does not list it)"


def _classify(cfg: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``({"section.key": value} of the used keys, {"section.key": why} of those that change
    nothing})``. Raises ConfigError for the first unknown or switched-on refused key; the
    refused ``[float8]`` keys change nothing while the float8 converter is off
    (:func:`_float8_converter_on`)."""
    used, ignored = {}, {}
    float8_on = _float8_converter_on(cfg)
    for section, table in cfg.items():
        if not isinstance(table, dict):
            raise refusal(where, shown_name(section), f"{short_repr(table)}: a top-level key; torchtitan's job config "
                          "has only [sections]")
        for key, value in _flatten(table):
            name = f"{section}.{key}"
            if name.startswith(_FLOAT8_V02):
                rule = _rule("float8", name[len(_FLOAT8_V02):])
            elif name.startswith(_QUANTIZE_OTHER):
                rule = _QUANTIZE_OTHER_RULE
            else:
                rule = _rule(section, key.split(".")[0])
                if rule is not None and rule.kind == "used" and "." in key:
                    raise refusal(where, f"{section}.{key.split('.')[0]}", "a table where "
                                  "torchtitan's job config has a value")
            if rule is None:
                raise refusal(where, shown_name(name), "is not a key of torchtitan's job config "
                              "the importer knows, so it cannot tell whether it changes the run"
                              + did_you_mean(name, _KNOWN_NAMES))
            if rule.kind == "refused" and not float8_on and (
                    name.startswith(("float8.", _FLOAT8_V02))):
                ignored[name] = f"{short_repr(value)}: {_FLOAT8_OFF}"
            elif rule.kind == "refused":
                ignored[name] = switched_off_or_refuse(where, name, value, rule.text, rule.inert)
            elif rule.kind == "no_effect":
                ignored[name] = rule.text
            else:
                used[name] = value
    return used, ignored


#: The keys :data:`KEYS` names one by one (and ``[quantize.linear.float8]``'s), for the "did
#: you mean" of an unknown key (:func:`core.util.text.did_you_mean`).
_KNOWN_NAMES = tuple(k for k in KEYS if not k.endswith(".*")) + tuple(
    _FLOAT8_V02 + k[len("float8."):] for k in KEYS if k.startswith("float8."))


def _flatten(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of a section's leaves (nested tables such as
    ``[quantize.linear.float8]`` give ``linear.float8.KEY``)."""
    out = []
    for key, value in table.items():
        if isinstance(value, dict) and value:
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _int(used: dict[str, Any], name: str, where: str, default: int, minimum: int = 1) -> int:
    v = used.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise refusal(where, name, f"{short_repr(v)} must be an integer of at least {minimum}")
    return v


def _switch(used: dict[str, Any], name: str, where: str) -> bool:
    """A used switch: a TOML boolean (torchtitan's field is a ``bool``; ``"true"`` or ``1``
    is refused, never read as off), False when not given."""
    v = used.get(name, False)
    if not isinstance(v, bool):
        raise refusal(where, name, f"{short_repr(v)} must be true or false (a TOML boolean)")
    return v


def _choice(used: dict[str, Any], name: str, where: str, default: Any,
            choices: dict[Any, Any]) -> Any:
    v = used.get(name, default)
    if not isinstance(v, str) or v not in choices:  # every choice is a string
        raise refusal(where, name, f"{short_repr(v)}: not modelled; the importer knows "
                   + ", ".join(map(str, choices)))
    return choices[v]


def session_from_torchtitan(cfg: Any, where: str = "config.toml", *, num_gpus: int | None = None,
                            gpu: str | None = None) -> ImportResult:
    """A session from a parsed torchtitan job config (see the module doc).

    Parameters
    ----------
    cfg : dict
        The parsed TOML file.
    where : str
        The file's name, for messages.
    num_gpus : int, optional
        World size (torchrun's ``--nproc_per_node`` times the nodes); required when
        ``data_parallel_shard_degree`` is -1 (the default), else checked against the product
        of the degrees.
    gpu : str, optional
        GPU kind of the cluster (:data:`core.plan.cluster.GPU_KINDS`; default the session's).

    Raises
    ------
    ConfigError
        A key that is unknown or refused, an unknown model or flavour, degrees that do not
        divide the world size, or a session that breaks the configuration rules (each named by
        the file's key where one set it).
    """
    if not isinstance(cfg, dict):
        raise ConfigError([FieldError(where, "must be a TOML table (a torchtitan job config)")])
    cfg, renamed = older_layout(cfg, where)
    try:
        return _session(cfg, where, num_gpus, gpu, renamed)
    except ConfigError as exc:  # the file's own (older) names in the messages
        raise ConfigError([_in_file_names(e, renamed) for e in exc.errors],
                          exc.source) from None


def _in_file_names(error: FieldError, renamed: dict[str, str]) -> FieldError:
    """``error`` naming the file's older key where the current one it was renamed to is named."""
    field = error.field
    for new, old in renamed.items():
        if field.endswith(": " + new):
            field = field[:-len(new)] + old
    return dataclasses.replace(error, field=field)


def _session(cfg: dict[str, Any], where: str, num_gpus: int | None, gpu: str | None,
             renamed: dict[str, str]) -> ImportResult:
    """:func:`session_from_torchtitan` of a file in the current layout (``renamed``: current
    key -> the file's older name)."""
    used, ignored = _classify(cfg, where)
    older_pipeline_split(used, where, renamed)
    older_microbatches(used, where, renamed)
    notes: list[str] = []
    if renamed:
        notes.append("torchtitan's older layout (late 2024): " + ", ".join(
            f"{old} read as {new}" for new, old in renamed.items()))
    model = _model(used, where, notes)
    compiled = _model_compiled(cfg)
    if not compiled and model.is_moe:  # the eager experts' saved tensors: not modelled
        raise refusal(where, "compile.enable", "the model is not compiled (compile.enable false "
                      "or \"model\" not in compile.components): a mixture-of-experts model's "
                      "experts then run their SwiGLU eagerly, whose saved tensors are not "
                      "modelled; plan the compiled model ([compile] enable = true, "
                      "components = [\"model\", \"loss\"]), whose fused activation is")
    if not compiled:  # eager FeedForward: F.silu(w1(x)) * w3(x), the unfused activation
        model = dataclasses.replace(model, bias_activation_fusion=False)
        notes.append("the model is not compiled (compile.enable false or \"model\" not in "
                     "compile.components): its SwiGLU runs eagerly, model.bias_activation_fusion "
                     "false (silu's output kept too: 8f bytes per token, not 6f)")
    plan, tokens = _plan(used, model, where, num_gpus, notes, compiled)
    filtered = _output_layer_filtered(used, ignored, where, plan)
    cluster = cluster_of_gpu(gpu)
    cost = CostConfig() if tokens is None else CostConfig(training_tokens=float(tokens))
    reliability = _checkpoints(used, ignored, where, notes)
    session = Session(model=model, plan=plan, cluster=cluster, cost=cost,
                      reliability=reliability)
    session.notes = f"Imported from the torchtitan job config {where}."
    from core.plan.rules import validate
    errs = validate(session)
    if errs:
        fp8_key = ("float8.enable_float8_linear" if used.get("float8.enable_float8_linear")
                   else "model.converters")
        names = {**_FIELD_KEYS, **({"plan.precision": fp8_key}
                                   if plan.precision == "fp8" else {})}
        raise ConfigError([FieldError(f"{where}: {names.get(e.field, e.field)}", e.message, rule=e.rule)
                           for e in errs])
    described = {renamed.get(k, k): _described(k).text for k in used
                 if k not in renamed or renamed[k] != OLDER_MICROBATCHES}
    if OLDER_MICROBATCHES in renamed.values():
        described[OLDER_MICROBATCHES] = KEYS[OLDER_MICROBATCHES].text
    if filtered is not None:  # required and checked: used, not "no effect"
        described[filtered] = _FILTER_OUTPUT
        del ignored[filtered]
    ignored = {renamed.get(k, k): v for k, v in ignored.items()}
    return ImportResult(session, described, ignored, notes)


#: What ``filter_fqns = ["output"]`` does with the float8 converter on (used, not "no effect":
#: without it the import is refused, :func:`_output_layer_filtered`).
_FILTER_OUTPUT = ("checked: [\"output\"] keeps the output layer out of the float8 "
                  "conversion, in BF16, as the simulator's fp8 does (required: torchtitan's "
                  "default [] converts it too, which is not modelled)")


def _output_layer_filtered(used: dict[str, Any], ignored: dict[str, str], where: str,
                           plan: ParallelPlan) -> str | None:
    """Refuse float8 linears by ``model.converters`` without ``filter_fqns``: torchtitan's
    default (``Float8Linear.filter_fqns``, v0.1-v0.3: ``field(default_factory=list)``) filters
    nothing, so ``module_filter_fn`` converts every ``nn.Linear`` whose dimensions are multiples
    of 16, the output layer included (Llama 3's 4096 x 128,256); the simulator's fp8 keeps the
    output layer in BF16, as ``filter_fqns = ["output"]`` (torchtitan's own train_configs) does.
    The older ``enable_float8_linear`` converter skipped the output layer itself
    (``fqn != "output"``). Returns the file's ``filter_fqns`` key where the converter needs
    and has it (``["output"]``: any other value was refused by :func:`_classify`), else None.
    Raises ConfigError naming the file's ``filter_fqns`` key."""
    if plan.precision != "fp8" or not used.get("model.converters"):
        return None
    keys = ("float8.filter_fqns", _FLOAT8_V02 + "filter_fqns")
    for k in keys:
        if k in ignored:
            return k
    v02 = any(k.startswith(_FLOAT8_V02) for k in (*used, *ignored))
    raise refusal(where, keys[1] if v02 else keys[0], "not given: torchtitan's default [] "
                  "converts the output layer to FP8 too (every nn.Linear with dimensions that are "
                  "multiples of 16), which is not modelled (the simulator's output layer stays "
                  "BF16); give filter_fqns = [\"output\"], as torchtitan's train_configs do")


#: torchtitan's ``Checkpoint.interval`` default (``config/job_config.py``, v0.1-v0.2.2:
#: ``interval: int = 500``, "Checkpointing interval in steps"; v0.3.0
#: ``components/checkpointer/base.py`` keeps 500).
CHECKPOINT_INTERVAL_DEFAULT = 500

#: ``[checkpoint] async_mode`` -> ``reliability.async_save`` (torchtitan's
#: ``Checkpoint.async_mode``: "disabled", its default, saves synchronously; "async" is
#: ``torch.distributed.checkpoint.async_save``; "async_with_pinned_mem" stages into pinned
#: memory in a separate process).
_ASYNC_MODES = {"disabled": False, "async": True, "async_with_pinned_mem": True}


def _checkpoints(used: dict[str, Any], ignored: dict[str, str], where: str,
                 notes: list[str]) -> ReliabilityConfig:
    """The run's checkpoints (docs/goodput.md) as torchtitan's ``CheckpointManager``
    (``components/checkpoint.py``, v0.2.2) saves them, read as ``vtrain import megatron-args``
    reads ``--save``, ``--save-interval`` and ``--async-save``.

    ``_should_save``: nothing unless ``enable`` (default false: a file without ``[checkpoint]
    enable = true`` saves no checkpoint, the session's
    :data:`~core.plan.cluster.NO_CHECKPOINT_INTERVAL`, and ``interval`` and ``async_mode`` are
    listed as having no effect); with it every ``interval`` steps (``curr_step % interval ==
    0``; default :data:`CHECKPOINT_INTERVAL_DEFAULT`) and at the last step (``last_step``:
    the session's segments end in a save too; torchtitan's last save is the model alone,
    ``last_save_model_only`` true by default, noted), ``async_mode`` as
    ``reliability.async_save``. Moves the unused keys from ``used`` to ``ignored``.

    Raises ConfigError: ``enable`` not a boolean, ``interval`` not a positive integer,
    ``async_mode`` not one of torchtitan's three."""
    enable = _switch(used, "checkpoint.enable", where)
    never = NO_CHECKPOINT_INTERVAL
    if not enable:
        notes.append("checkpoint.enable " + ("false" if "checkpoint.enable" in used else
                     "not given (torchtitan's default: false)") + ": torchtitan saves no "
                     "checkpoint (CheckpointManager._should_save); a failure restarts the run "
                     f"from its start (reliability.checkpoint_interval_iterations {never:,}, "
                     "beyond any run)")
        for key in ("checkpoint.interval", "checkpoint.async_mode"):
            if key in used:
                ignored[key] = (f"{short_repr(used.pop(key))}: no effect without checkpoint."
                                "enable (no checkpoint is saved)")
        return ReliabilityConfig(checkpoint_interval_iterations=never)
    interval = _int(used, "checkpoint.interval", where, CHECKPOINT_INTERVAL_DEFAULT)
    # torchtitan saves at the last step whatever the interval: one less than no checkpoint at
    # all is an interval beyond any run, one save at the end (as Megatron-LM's)
    interval = min(interval, never - 1)
    if "checkpoint.interval" not in used:
        notes.append(f"checkpoint.interval not given: torchtitan's default, every "
                     f"{CHECKPOINT_INTERVAL_DEFAULT} steps")
    mode = used.get("checkpoint.async_mode", "disabled")
    async_save = _choice(used, "checkpoint.async_mode", where, "disabled", _ASYNC_MODES)
    notes.append(f"checkpoints every {interval:,} steps and at the last step (torchtitan's "
                 "_should_save), each charged as a save of the weights and optimizer state "
                 "(torchtitan's last one holds the model alone unless last_save_model_only = "
                 "false)")
    if mode == "async_with_pinned_mem":
        notes.append("checkpoint.async_mode async_with_pinned_mem: torchtitan stages the "
                     "state into pinned host memory with non-blocking copies in another "
                     "process; reliability.async_save charges the device-to-host copy as a "
                     "stall (host_copy_gbytes_per_s_per_gpu), an upper bound of its stall")
    return ReliabilityConfig(checkpoint_interval_iterations=interval, async_save=async_save)


#: Session field -> the torchtitan key that sets it (for error messages).
_FIELD_KEYS = {
    "plan.tensor_parallel": "parallelism.tensor_parallel_degree",
    # torchtitan's TP is always sequence-parallel: the file's key is the TP degree
    "plan.sequence_parallel": "parallelism.tensor_parallel_degree",
    "plan.pipeline_parallel": "parallelism.pipeline_parallel_degree",
    "plan.context_parallel": "parallelism.context_parallel_degree",
    "plan.expert_parallel": "parallelism.expert_parallel_degree",
    "plan.expert_tensor_parallel": "parallelism.expert_tensor_parallel_degree",
    "plan.data_parallel": "parallelism.data_parallel_shard_degree",
    "plan.micro_batch_size": "training.local_batch_size",
    "plan.global_batch_size": "training.global_batch_size",
    "plan.precision": "training.mixed_precision_param",
    "plan.fp8_param_gather": "float8.enable_fsdp_float8_all_gather",
    "plan.tp_comm_overlap": "parallelism.enable_async_tensor_parallel",
    "model.seq_length": "training.seq_len",
    "plan.recompute": "activation_checkpoint.mode",
    "plan.schedule": "parallelism.pipeline_parallel_schedule",
    "plan.virtual_pipeline_stages": "parallelism.pipeline_parallel_schedule",
    "plan.pipeline_model_parallel_layout": "parallelism.pipeline_parallel_degree",
    "plan.cp_comm_type": "parallelism.context_parallel_rotate_method",
    "plan.zero_stage": "parallelism.data_parallel_shard_degree",
    "plan.data_parallel_shard_size": "parallelism.data_parallel_shard_degree",
    "plan.fp8_recipe": "float8.recipe_name",
    "plan.fp8_impl": "model.converters",
    # PrepareModuleInput(desired_input_layouts=Replicate()) before the ColwiseParallel linears
    "plan.tp_saved_input": "parallelism.tensor_parallel_degree",
    "plan.grad_reduce_dtype": "training.mixed_precision_reduce",
}


def _model(used: dict[str, Any], where: str, notes: list[str]):
    name = used.get("model.name", "llama3")
    flavor = used.get("model.flavor", "debugmodel")
    for key, value in (("model.name", name), ("model.flavor", flavor)):
        if not isinstance(value, str):
            raise refusal(where, key, f"{short_repr(value)} must be a string")
    if name in REFUSED_MODELS:
        raise refusal(where, "model.name", f"{short_repr(name)}: not modelled yet: {REFUSED_MODELS[name]}")
    if (name, flavor) in REFUSED_FLAVOURS:
        raise refusal(where, "model.flavor", f"{shown_name(name)} {short_repr(flavor)}: not modelled yet: "
                      f"{REFUSED_FLAVOURS[name, flavor]}")
    flavour = FLAVOURS.get((name, flavor))
    if flavour is None:
        known = ", ".join(f"{n} {f}" for n, f in FLAVOURS)
        key = "model.flavor" if any(n == name for n, _ in FLAVOURS) else "model.name"
        raise refusal(where, key, f"{shown_name(name)} {short_repr(flavor)}: not a flavour the importer knows; "
                      f"known: {known}")
    # torchtitan's output layer is the tokenizer's vocabulary, unpadded (its TP plan shards it
    # as a DTensor): a divisor of 1 pads only to a multiple of t (Llama 3's 128,256 is one of 8)
    model = dataclasses.replace(flavour, name=f"{flavour.name} (torchtitan {name} {flavor})",
                                make_vocab_size_divisible_by=1)
    notes.extend(FLAVOUR_NOTES.get((name, flavor), ()))
    if used.get("model.norm_type", "rmsnorm") != "rmsnorm":
        raise refusal(where, "model.norm_type", f"{short_repr(used['model.norm_type'])}: the flavours use "
                      "RMSNorm; another norm is not one we know")
    model.seq_length = _int(used, "training.seq_len", where, 2048)
    return model


#: The prefix of torchtitan's ``[parallelism]`` keys.
_PAR = "parallelism."


def _degrees(used: dict[str, Any], where: str, num_gpus: int | None
             ) -> tuple[int, int, int, int, int, int]:
    """``(replicate, shard, t, p, cp, ep)``: the parallel degrees; a shard degree of -1 takes
    the ranks the others leave of ``num_gpus``."""
    rep = _int(used, _PAR + "data_parallel_replicate_degree", where, 1)
    shard = used.get(_PAR + "data_parallel_shard_degree", -1)
    t = _int(used, _PAR + "tensor_parallel_degree", where, 1)
    p = _int(used, _PAR + "pipeline_parallel_degree", where, 1)
    cp = _int(used, _PAR + "context_parallel_degree", where, 1)
    ep = _int(used, _PAR + "expert_parallel_degree", where, 1)
    others = rep * t * p * cp
    if shard == -1:
        if num_gpus is None:
            raise refusal(where, _PAR + "data_parallel_shard_degree", "-1 (the ranks the other "
                          "degrees leave) needs the world size: give --num-gpus")
        if num_gpus % others:
            raise refusal(where, _PAR + "data_parallel_shard_degree", f"-1: the world size "
                          f"{num_gpus} is not divisible by the other degrees' product {others}")
        shard = num_gpus // others
    elif isinstance(shard, bool) or not isinstance(shard, int) or shard < 1:
        raise refusal(where, _PAR + "data_parallel_shard_degree", f"{short_repr(shard)} must be -1 or a "
                      "positive integer")
    if num_gpus is not None and num_gpus != others * shard:
        raise refusal(where, _PAR + "data_parallel_shard_degree", f"the degrees give "
                      f"{others * shard} GPUs, not --num-gpus {num_gpus}")
    return rep, shard, t, p, cp, ep


def _batch(used: dict[str, Any], where: str, d: int, p: int) -> tuple[int, int, int]:
    """``(b, B, local)``: the micro-batch (the pipeline's, else the local batch), the global
    batch (-1: the local batch times d) and the local batch."""
    local = _int(used, "training.local_batch_size", where, 8)
    glob = used.get("training.global_batch_size", -1)
    if glob == -1:
        glob = local * d
    elif isinstance(glob, bool) or not isinstance(glob, int) or glob < 1 or glob % (local * d):
        raise refusal(where, "training.global_batch_size", f"{short_repr(glob)} must be -1 or a multiple of "
                      f"local_batch_size * data-parallel degree = {local * d} (gradient "
                      "accumulation steps)")
    b = local
    if p > 1:
        b = _int(used, _PAR + "pipeline_parallel_microbatch_size", where, 1)
        if local % b:
            raise refusal(where, _PAR + "pipeline_parallel_microbatch_size", f"{b} does not divide "
                          f"local_batch_size {local}")
    return b, glob, local


def _interleaved_microbatches(used: dict[str, Any], where: str, p: int, n: int) -> None:
    """Refuse an Interleaved1F1B job whose micro-batch count the simulator's interleaved order
    cannot run. torchtitan runs it with ``torch.distributed.pipelining``'s
    ``ScheduleInterleaved1F1B`` (PyTorch 2.6-2.13), which splits ``n_microbatches`` (the local
    batch over the micro-batch size) into ``max(1, n // p)`` rounds and raises only where
    ``n % rounds != 0``; vtrain's interleaved order is Megatron-Core's, groups of ``p``
    micro-batches (:func:`core.schedules.interleaved.megatron_core_refusal` with N = p), which
    needs ``n`` a multiple of ``p``. Gradient accumulation repeats the schedule, so the count
    checked is one step's. Raises ConfigError naming the field that sets the count."""
    from core.schedules.interleaved import megatron_core_refusal

    if megatron_core_refusal(p, n) is None:
        return
    key = _PAR + "pipeline_parallel_microbatch_size"
    key = key if key in used else "training.local_batch_size"
    raise refusal(where, key, f"{n} micro-batches per step (the local batch over the "
                  f"micro-batch size) on {p} stages: torchtitan's Interleaved1F1B "
                  f"(torch.distributed.pipelining ScheduleInterleaved1F1B) runs them in "
                  f"{max(1, n // p)} round(s), an order not modelled: the simulator's "
                  f"interleaved schedule is Megatron-Core's, which needs the count to be a "
                  f"multiple of the {p} stages")


def _fsdp_enabled(rep: int, shard: int, t: int, p: int, cp: int, where: str) -> bool:
    """Whether torchtitan applies FSDP: ``ParallelDims.fsdp_enabled``, ``dp_shard > 1 or
    cp > 1`` (torchtitan v0.1-v0.2 ``distributed/parallel_dims.py``; FSDP then shards over the
    ``dp_shard * cp`` ranks, the ``dp_shard_cp`` mesh). Without it, replicas are torch DDP,
    which torchtitan applies only when they are the whole mesh (``models/llama3/infra/
    parallelize.py``: "DDP has not supported > 1D parallelism"): replicas with tensor or
    pipeline parallelism and no FSDP are refused, as torchtitan refuses them."""
    fsdp = shard > 1 or cp > 1
    if rep > 1 and not fsdp and t * p > 1:
        raise refusal(where, _PAR + "data_parallel_replicate_degree", f"{rep} replicas with "
                      "tensor or pipeline parallelism and data_parallel_shard_degree 1: torchtitan "
                      "replicates with DDP only when it is the only parallelism (\"DDP has not "
                      "supported > 1D parallelism\"); shard over FSDP or HSDP instead")
    return fsdp


def _fsdp_zero(used: dict[str, Any], where: str, fsdp: bool, p: int, notes: list[str]) -> int:
    """The ZeRO stage of torchtitan's FSDP (``fsdp`` from :func:`_fsdp_enabled`): 3, or 2
    when the gathered parameters are kept from the forward to the backward
    (``fsdp_reshard_after_forward``), 0 without FSDP.

    With pipeline parallelism it is 1: ``torch.distributed.pipelining``'s ``PipelineStage``
    turns FSDP's gradient sync and its resharding after the backward off for every
    micro-batch but the last (``set_requires_gradient_sync(False)``,
    ``set_reshard_after_backward(False)``; the reduce-scatter runs once, in
    ``perform_reduce_grad``), so each stage holds its parameters gathered and its gradients
    unsharded in the reduce dtype (fp32) through the step, the optimizer state sharded:
    ZeRO-1's memory and its one all-gather and one reduce-scatter per iteration. torchtitan's
    default keeps the parameters gathered after the forward with pipelining; ``always``
    gathers them again in every micro-batch's forward while the gradients stay unsharded,
    which no ZeRO stage is: refused."""
    reshard = used.get(_PAR + "fsdp_reshard_after_forward", "default")
    if reshard not in ("default", "always", "never"):
        raise refusal(where, _PAR + "fsdp_reshard_after_forward", f"{short_repr(reshard)}: one of default, "
                      "always, never")
    if fsdp and p > 1:
        if reshard == "always":
            raise refusal(where, _PAR + "fsdp_reshard_after_forward", "always with pipeline "
                          "parallelism: the parameters gathered again in every micro-batch's "
                          "forward while PipelineStage keeps the gradients unsharded to the "
                          "last micro-batch is not modelled (default or never: ZeRO-1)")
        notes.append("FSDP with pipeline parallelism: PipelineStage keeps each stage's "
                     "parameters gathered and its gradients unsharded (fp32) until the last "
                     "micro-batch's reduce-scatter (set_requires_gradient_sync(False)): "
                     "modelled as ZeRO-1, the optimizer state sharded")
        return 1
    keep = reshard == "never"
    zero = (2 if keep else 3) if fsdp else 0
    if fsdp and keep:
        notes.append("FSDP keeps the gathered parameters from the forward to the backward "
                     "(fsdp_reshard_after_forward " + reshard + "): modelled as ZeRO-2, one "
                     "all-gather and one reduce-scatter of the parameters per iteration")
    return zero


def _checkpointing(used: dict[str, Any], where: str) -> str:
    """``plan.recompute`` of ``[activation_checkpoint]``: none, full, or per-op selective."""
    mode = _choice(used, "activation_checkpoint.mode", where, "selective",
                   {"none": "none", "selective": "selective", "full": "full"})
    if mode == "selective":
        given = "activation_checkpoint.selective_ac_option" in used
        option = str(used.get("activation_checkpoint.selective_ac_option", "2"))
        if option not in ("op", "1"):
            # torchtitan's ActivationCheckpoint defaults: mode "selective", option "2"; a file
            # that gives neither is refused for a value it does not hold, so say where it is from
            default = "" if given else (" (torchtitan's default with activation_checkpoint.mode"
                                        " selective, its default: give mode none or full, or "
                                        "selective_ac_option op)")
            raise refusal(where, "activation_checkpoint.selective_ac_option", f"{short_repr(option)}: full "
                          "checkpointing of every N-th layer is not modelled (the simulator's "
                          "recompute_num_layers takes the first layers of each stage); op or 1"
                          + default)
        mode = "selective_op" if option == "op" else "full"
    return mode


def _precision(used: dict[str, Any], where: str, fsdp: bool, t: int, p: int,
               notes: list[str]) -> tuple[str, bool, str | None, bool]:
    """``(precision, fp8, fp8 recipe, fp8 all-gather)`` of the mixed precision and the float8
    converters.

    torchtitan's ``maybe_enable_amp`` (``distributed/utils.py``, v0.1-v0.2): under FSDP
    (``fsdp``) fully_shard's MixedPrecisionPolicy casts to ``mixed_precision_param``; without
    it, DDP and a single GPU run under ``torch.autocast`` to ``mixed_precision_param``, and
    tensor or pipeline parallelism runs with no mixed precision at all ("Mixed precision
    training with TP or PP is only supported when FSDP/HSDP/CP is enabled"): fp32, with
    PyTorch's default fp32 matmuls (torchtitan does not turn TF32 on: ``plan.tf32`` off). FP8
    linears in such an fp32 model are refused (the simulator's fp8 trains bf16 weights)."""
    precision = _choice(used, "training.mixed_precision_param", where, "bfloat16", _PRECISIONS)
    no_amp = not fsdp and t * p > 1
    if no_amp and precision != "fp32":
        notes.append("training.mixed_precision_param " + used.get(
            "training.mixed_precision_param", "bfloat16") + " has no effect: torchtitan trains "
            "tensor or pipeline parallelism without FSDP in fp32 (maybe_enable_amp: no mixed "
            "precision), so plan.precision is fp32 (TF32 off, PyTorch's default)")
        precision = "fp32"
    converters = used.get("model.converters", [])
    if isinstance(converters, str):
        converters = [converters]
    for c in converters:
        if c not in ("float8", "quantize.linear.float8"):
            raise refusal(where, "model.converters", f"{short_repr(c)}: not modelled (float8 is)")
    fp8 = bool(converters) or _switch(used, _float8_key(used, "enable_float8_linear"), where)
    recipe = None
    if fp8:
        if no_amp:
            raise refusal(where, "model.converters" if converters else
                          "float8.enable_float8_linear", "float8 with tensor or pipeline "
                          "parallelism and no FSDP: torchtitan trains that model in fp32 (no "
                          "mixed precision), and FP8 linears in an fp32 model are not modelled "
                          "(the simulator's fp8 trains bf16 weights)")
        precision = "fp8"
        recipe = _choice(used, _float8_key(used, "recipe_name"), where, "tensorwise",
                         {"tensorwise": "tensorwise"})
    gather = _switch(used, _float8_key(used, "enable_fsdp_float8_all_gather"), where)
    return precision, fp8, recipe, gather


def _model_compiled(cfg: dict[str, Any]) -> bool:
    """Whether torchtitan compiles the model: ``compile.enable`` true (the older
    ``training.compile``, moved there) and ``"model"`` in ``compile.components`` (default
    ``["model", "loss"]``), ``model_compile_enabled`` in ``models/*/infra/parallelize.py``."""
    table = cfg.get("compile")
    if not isinstance(table, dict) or table.get("enable") is not True:
        return False
    components = table.get("components", ["model", "loss"])
    return isinstance(components, list) and "model" in components


def _async_tp(used: dict[str, Any], where: str, t: int, compiled: bool,
              notes: list[str]) -> bool:
    """``plan.tp_comm_overlap`` of ``enable_async_tensor_parallel``. torchtitan's
    ``maybe_enable_async_tp`` (``distributed/tensor_parallel.py``, v0.2) runs only when tensor
    parallelism is on (``tp_enabled``: degree > 1), and raises "Async TP requires 'model' in
    --compile.components and --compile.enable" without the compiled model (``compiled``:
    :func:`_model_compiled`; the older layout's "Async TP requires --training.compile"): a
    job torchtitan does not run, refused by the key. Raises ConfigError."""
    key = _PAR + "enable_async_tensor_parallel"
    if not _switch(used, key, where):
        return False
    if t == 1:
        notes.append("enable_async_tensor_parallel has no effect: tensor_parallel_degree is 1 "
                     "(torchtitan enables async TP on a tensor-parallel mesh only)")
        return False
    if not compiled:
        raise refusal(where, key, "true without torch.compile of the model: torchtitan raises "
                      "\"Async TP requires 'model' in --compile.components and "
                      "--compile.enable\" (its micro-pipelined TP is an inductor pass); give "
                      "[compile] enable = true with \"model\" in components, or async TP off")
    return True


def _plan(used: dict[str, Any], model, where: str, num_gpus: int | None,
          notes: list[str], compiled: bool = False) -> tuple[ParallelPlan, int | None]:
    """The plan and the token budget (None without ``training.steps``); ``compiled``: whether
    torchtitan compiles the model (:func:`_model_compiled`)."""
    rep, shard, t, p, cp, ep = _degrees(used, where, num_gpus)
    d = rep * shard
    # torchtitan reads the schedule only to build a pipeline (pipeline_llm, when
    # ParallelDims.pp_enabled: degree > 1); its deepseek_v3 configs name Interleaved1F1B at 1
    schedule, chunks = ("1f1b", 1) if p == 1 else _choice(
        used, _PAR + "pipeline_parallel_schedule", where, "1F1B", SCHEDULES)
    if p == 1 and _PAR + "pipeline_parallel_schedule" in used:
        if not isinstance(used[_PAR + "pipeline_parallel_schedule"], str):
            raise refusal(where, _PAR + "pipeline_parallel_schedule",
                          f"{short_repr(used[_PAR + 'pipeline_parallel_schedule'])} must be a string")
        notes.append(f"pipeline_parallel_schedule "
                     f"{short_repr(used[_PAR + 'pipeline_parallel_schedule'])} has no effect: "
                     "pipeline_parallel_degree is 1 (torchtitan builds no pipeline)")
    b, glob, local = _batch(used, where, d, p)
    if schedule == "interleaved":
        _interleaved_microbatches(used, where, p, local // b)
    if p > 1 and glob > local * d:
        # torchtitan's train_step runs the pipeline schedule once per accumulation step
        # (forward_backward_step: pp_schedule.step on the local batch), each with its own fill
        # and drain; the plan runs all of the iteration's micro-batches as one pipeline
        notes.append(f"gradient accumulation under pipelining: torchtitan runs "
                     f"{glob // (local * d)} pipeline schedules of {local // b} micro-batches a "
                     f"step, each with its fill and drain; simulated as one of "
                     f"{glob // (d * b)} (one bubble: the iteration time is low by the others)")
    if used.get("training.global_batch_size", -1) == -1 and \
            "training.local_batch_size" not in used:
        notes.append(global_batch_note(glob))  # torchtitan's default local batch (8) times d
    fsdp = _fsdp_enabled(rep, shard, t, p, cp, where)
    zero = _fsdp_zero(used, where, fsdp, p, notes)
    mode = _checkpointing(used, where)
    _choice(used, "optimizer.name", where, "AdamW", {"AdamW": 0, "Adam": 0})
    precision, fp8, recipe, gather = _precision(used, where, fsdp, t, p, notes)
    if fp8 and model.is_moe:
        # components/quantization/float8.py: Float8LinearConverter swaps nn.Linear modules
        # (torchao convert_to_float8_training); models/moe/moe.py's GroupedExperts holds its
        # w1, w2, w3 as nn.Parameter run by grouped_mm: not converted
        raise refusal(where, "model.converters" if used.get("model.converters") else
                      _float8_key(used, "enable_float8_linear"), "float8 on a mixture-of-"
                      "experts flavour is not modelled: torchtitan's float8 converter swaps "
                      "nn.Linear modules only, so attention (and shared experts, the router) "
                      "run FP8 GEMMs while the routed experts (GroupedExperts' grouped_mm) "
                      "stay BF16; the simulator's fp8 runs the experts' GEMMs in FP8 too, and "
                      "that mix is not a plan it has; import without float8 (bf16)")
    if cp > 1 and getattr(model, "multi_latent_attention", False) is True:
        # PyTorch's context_parallel runs SDPA (or FlexAttention, whose CP all-gathers K and V)
        # whichever rotate method: SDPA's flash backend needs one head size for Q, K and V, so
        # MLA's (qk + rope, v) runs another backend, not modelled; the alltoall rotation read as
        # the p2p ring would time Transformer Engine's ring and FlashAttention instead (the
        # allgather rotation is refused by the plan's MLA rule for the same reason)
        raise refusal(where, _PAR + "context_parallel_degree", (
            f"{cp} with multi-head latent attention is not modelled: torchtitan runs it through "
            "PyTorch's context_parallel and SDPA, whose flash backend needs one head size for "
            "Q, K and V (MLA's are qk + rope and v); which backend runs it is not modelled "
            "(MLA with context parallelism is modelled through Transformer Engine's exchanges: "
            "a Megatron-LM launch)"))
    plan = ParallelPlan(
        tensor_parallel=t, pipeline_parallel=p, data_parallel=d, micro_batch_size=b,
        global_batch_size=glob, schedule=schedule, recompute=mode, precision=precision,
        virtual_pipeline_stages=chunks if chunks > 1 else None, sequence_parallel=t > 1,
        # FSDP reduce-scatters each layer's gradients as its backward ends; DDP (torch's
        # replicate, 100 MB buckets) all-reduces a bucket as soon as its gradients are ready
        zero_stage=zero, overlap_grad_reduce=fsdp or rep > 1, overlap_param_gather=zero == 3,
        # fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype, reduce_dtype)) over the fp32
        # model (training.dtype float32): fp32 shards, the optimizer's own master weights. Set
        # without FSDP too (it acts under ZeRO-3 only): a sweep of a DDP session over the
        # ZeRO stages keeps torchtitan's fp32 shards, not Megatron-Core's 16-bit ones
        fsdp_fp32_params=True,
        grad_reduce_dtype=_choice(used, "training.mixed_precision_reduce", where, "float32",
                                  _REDUCE_DTYPES),
        context_parallel=cp,
        cp_comm_type=_choice(used, _PAR + "context_parallel_rotate_method", where, "allgather",
                             {"allgather": "allgather", "alltoall": "p2p"}),
        expert_parallel=ep,
        tp_comm_overlap=(async_tp := _async_tp(used, where, t, compiled, notes)),
        # PyTorch's micro-pipeline TP, not Transformer Engine's userbuffers (its backward's
        # reduce-scatters of summed input gradients are not fused)
        tp_comm_overlap_backend="symmetric_memory" if async_tp else "userbuffers",
        # PyTorch's autograd adds each micro-batch's weight gradients into .grad (DDP); no
        # fused weight-gradient GEMM (under FSDP the field has no effect: nothing is added)
        gradient_accumulation_fusion=False)
    if model.is_moe:
        plan.expert_tensor_parallel = _int(used, _PAR + "expert_tensor_parallel_degree", where, 1)
        if ep > 1 and plan.expert_tensor_parallel not in (1, t):
            # ParallelDims._validate (distributed/parallel_dims.py, v0.2): the sparse mesh
            # [pp, dp_replicate, efsdp, ep, etp] unflattens the dense one's fsdp x tp ranks
            raise refusal(where, _PAR + "expert_tensor_parallel_degree",
                          f"{plan.expert_tensor_parallel} with tensor_parallel_degree {t}: "
                          "torchtitan asserts \"Currently we only support ETP=TP or ETP=1\" "
                          "(ParallelDims) when expert_parallel_degree > 1")
    if rep > 1 and fsdp:  # HSDP: FSDP over the dp_shard * cp ranks, replicated rep times
        plan.data_parallel_shard_size = shard
    # apply_tp (torchtitan 0.2.0 models/llama3/infra/parallelize.py): PrepareModuleInput
    # all-gathers the sequence-parallel norm's output (desired_input_layouts=Replicate())
    # and the ColwiseParallel wq/wk/wv, w1/w3 save that replicated input for their backward.
    # Set at every degree (at t = 1 it changes nothing): a sweep of the session over t keeps
    # torchtitan's saved inputs, not Megatron-Core's s/t shard
    plan.tp_saved_input = "gathered"
    if fp8:
        plan.fp8_recipe = recipe
        plan.fp8_param_gather = gather and zero >= 1
        # torchao's Float8Linear keeps the high-precision weight and casts it inside every GEMM
        # and saves each linear's input as it arrives (torchao 0.18.0 float8/float8_linear.py):
        # no persistent FP8 weight copy, BF16 saved inputs without tensor parallelism
        plan.fp8_impl = "torchao"
    if p > 1:
        counts = torchtitan_stage_layers(model.num_layers, p * chunks)
        if min(counts) < 1:
            raise refusal(where, _PAR + "pipeline_parallel_degree", f"{p * chunks} stages leave a "
                          f"stage without layers of the {model.num_layers}")
        plan.pipeline_model_parallel_layout = "|".join(
            ("E" if i == 0 else "") + f"t*{n}" + ("L" if i == len(counts) - 1 else "")
            for i, n in enumerate(counts))
    steps = _int(used, "training.steps", where, 1) if "training.steps" in used else None
    tokens = steps * glob * model.seq_length if steps is not None else None
    return plan, tokens


#: torchtitan's ``[activation_checkpoint]`` modes as the session's ``plan.recompute``
#: (``ActivationCheckpoint``, v0.1-v0.2.2: mode none, full, selective with
#: ``selective_ac_option`` op, or 1, every layer, which is full; every N-th layer is refused).
RECOMPUTE_OPTIONS = ("none", "selective_op", "full")


def sweep_options(session: Session) -> str:
    """The ``vtrain sweep`` options that keep its default plan space (Megatron-Core's:
    Transformer Engine's fused cross-entropy, Megatron's selective recomputation and partial
    block recomputation, the zero-bubble schedules, the all-to-all context-parallel exchange,
    Transformer Engine's TP overlap, DeepEP and the combined-1F1B expert overlap) to what
    torchtitan runs, as :func:`core.io.deepspeed_import.sweep_options` does for DeepSpeed:

    * ``--cross-entropy-fusion off``: the model's own cross-entropy (torch's, on the
      vocabulary-parallel logits; neither Transformer Engine's nor Megatron's fused kernel);
    * ``--recompute none,selective_op,full --recompute-num-layers all``
      (:data:`RECOMPUTE_OPTIONS`: torchtitan checkpoints every block or none, per op or
      whole);
    * ``--schedules 1f1b,gpipe,interleaved --virtual-pipeline-stages 2`` (:data:`SCHEDULES`:
      two stages per rank under Interleaved1F1B);
    * ``--cp-comm-types allgather,p2p`` (``context_parallel_rotate_method`` allgather and
      alltoall, the ring);
    * ``--tp-comm-overlap n`` unless the session overlaps with PyTorch's async TP
      (``plan.tp_comm_overlap_backend`` symmetric_memory, held by the sweep): Transformer
      Engine's userbuffers are not torchtitan's;
    * for a mixture-of-experts model ``--moe-token-dispatcher alltoall
      --overlap-moe-expert-parallel-comm n`` (torchtitan's standard all-to-all; DeepEP is
      refused on import, and it has no combined-1F1B overlap).

    What the options cannot say: torchtitan's ZeRO stage follows from the plan (FSDP: 3, 2
    with ``fsdp_reshard_after_forward`` never, 1 with pipelining; DDP, ZeRO-0, only when data
    parallelism is the only one) and its pipeline split puts one layer fewer on the first
    and last stages; docs/torchtitan.md, "Sweeping"."""
    out = ("--cross-entropy-fusion off --recompute " + ",".join(RECOMPUTE_OPTIONS)
           + " --recompute-num-layers all --schedules "
           + ",".join(sch for sch, _ in SCHEDULES.values()) + " --virtual-pipeline-stages 2"
           " --cp-comm-types allgather,p2p")
    pl = session.plan
    if not (pl.tp_comm_overlap and pl.tp_comm_overlap_backend == "symmetric_memory"):
        out += " --tp-comm-overlap n"
    if session.model.is_moe:
        out += " --moe-token-dispatcher alltoall --overlap-moe-expert-parallel-comm n"
    return out


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file (:func:`core.util.inputs.read_toml_file`: a regular file of bounded
    size, bounded nesting, finite numbers of a float's range).

    Raises ConfigError naming the file when it cannot be read or is not such TOML."""
    from core.util.inputs import read_toml_file

    class _Unreadable(Exception):
        pass

    try:
        return read_toml_file(path, _Unreadable)
    except _Unreadable as exc:
        raise ConfigError([FieldError(str(path), str(exc)[len(str(path)) + 2:])]) from None


def read_torchtitan_config(path: str | Path, **kw: Any) -> ImportResult:
    """Read a torchtitan job config file (see :func:`session_from_torchtitan`)."""
    return session_from_torchtitan(load_toml(path), Path(path).name, **kw)


def torchtitan_stage_layers(num_layers: int, stages: int) -> list[int]:
    """Transformer layers of each of ``stages`` (virtual) pipeline stages as torchtitan splits
    them (``generate_llm_fqn_per_model_part`` with ``pipeline_parallel_first_stage_less_layers``
    and ``..._last_stage_less_layers`` 1, their defaults): the embedding and the output layer
    count as one layer each, the ``L + 2`` effective layers are split evenly with the
    remainder going to the first stages, and the first and last stage then hold one
    transformer layer fewer. Llama 3's 126 layers over 16 stages: 7, 14 x 8, 7 (the Llama 3
    paper's "one Transformer layer fewer in the first and the last stages")."""
    per, extra = divmod(num_layers + 2, stages)
    counts = [per + (1 if i < extra else 0) for i in range(stages)]
    counts[0] -= 1
    counts[-1] -= 1
    return counts
