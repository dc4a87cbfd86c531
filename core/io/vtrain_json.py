"""Reader of the vTrain authors' JSON configuration format (the paper's artifact): each key
mapped to the session field it fills, checked under the key's own name. What the format does
not hold is the authors' setting: fp16, and Megatron-DeepSpeed's weight-gradient accumulation
(no gradient accumulation fusion).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from core.plan.cluster import ClusterConfig, CostConfig, gpu_kind
from core.plan.fields import BOUNDS, ConfigError, FieldError, check_value, field_kind, rename_field
from core.plan.model_config import ModelConfig, model_from_fields
from core.plan.parallel import ParallelPlan
from core.plan.presets import GPT_FAMILY, MODEL_PRESETS
from core.plan.rules import validate
from core.plan.session import Session
from core.util.text import did_you_mean

__all__ = ["read_vtrain_config", "vtrain_config_from_dict", "looks_like_vtrain_config"]


#: How a message names a field's type.
_TYPE_NAMES = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}


#: The authors' keys: key -> (the session field it fills, or None; type when it fills none).
#: Types, bounds and choices of a key that fills a session field are that field's, checked
#: by the same code (:func:`check_value`) under the authors' key name.
_AUTHORS_FIELDS: dict[str, tuple[str | None, str]] = {
    "num_gpus": (None, "int"),
    "gpu_name": (None, "str"),  # mapped by gpu_kind, then checked as cluster.gpu
    "tensor_parallel_size": ("plan.tensor_parallel", ""),
    "data_parallel_size": ("plan.data_parallel", ""),
    "pipeline_parallel_size": ("plan.pipeline_parallel", ""),
    "global_batch_size": ("plan.global_batch_size", ""),
    "micro_batch_size": ("plan.micro_batch_size", ""),
    "num_layers": ("model.num_layers", ""),
    "hidden_size": ("model.hidden_size", ""),
    "num_attention_heads": ("model.num_attention_heads", ""),
    "max_length": ("model.seq_length", ""),
    "ffn_hidden_size": ("model.ffn_hidden_size", ""),
    "vocab_size": ("model.vocab_size", ""),
    "use_gradient_bucket": (None, "bool"),  # true: plan.overlap_grad_reduce
    "use_checkpoint": (None, "bool"),  # true: plan.recompute "full", false: "none"
    "pipeline_scheduling": (None, "str"),  # lower-cased, then checked as plan.schedule
    "inter_node_bandwidth": ("cluster.inter_node_bandwidth_gbits_per_s", ""),
    "intra_node_bandwidth": ("cluster.intra_node_bandwidth_gbytes_per_s", ""),
    "node_size": ("cluster.gpus_per_node", ""),
    "trace_path": (None, "str"),  # ignored
}


_AUTHORS_KEYS = set(_AUTHORS_FIELDS)


_AUTHORS_REQUIRED = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size",
                     "global_batch_size", "micro_batch_size", "num_layers", "hidden_size",
                     "num_attention_heads", "max_length")


_SECTION_CLASSES = {"model": ModelConfig, "plan": ParallelPlan, "cluster": ClusterConfig,
                    "cost": CostConfig}


def _session_field(path: str) -> dataclasses.Field:
    """The dataclass field of a dotted session path such as ``plan.tensor_parallel``."""
    section, name = path.split(".")
    cls = _SECTION_CLASSES[section]
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def _authors_key_errors(raw: dict) -> list[FieldError]:
    """Type, bound and choice errors of the authors' keys present in ``raw``, named by key.

    The format has no null: a key is given with a value of its type or left out (its
    default), even where the session field it fills may be empty."""
    errs = []
    for key, (target, kind) in _AUTHORS_FIELDS.items():
        if key not in raw:
            continue
        if target is not None:
            f = _session_field(target)
        else:
            f = dataclasses.field(metadata={"bounds": BOUNDS["parallel"]} if key == "num_gpus" else {})
            f.name, f.type = key, kind
        if raw[key] is None and field_kind(f)[1]:  # null, where the session field may be empty
            unit = f.metadata.get("unit")
            errs.append(FieldError(key, f"{key}=null must be {_TYPE_NAMES[field_kind(f)[0]]}"
                                        f"{f' ({unit})' if unit else ''}; leave the key out "
                                        "for its default"))
            continue
        msg = check_value(key, f, raw[key])
        if msg:
            errs.append(FieldError(key, msg))
    return errs


def read_vtrain_config(path: str | Path, *, check_rules: bool = True) -> Session:
    """Read the vTrain authors' JSON configuration format into a :class:`Session`.

    Units in that format: ``inter_node_bandwidth`` in Gb/s per node,
    ``intra_node_bandwidth`` in GB/s; ``max_length`` is the sequence length;
    ``use_checkpoint`` means full activation recomputation. The format describes GPT
    models only: the model's family fields take GPT's values (:data:`GPT_FAMILY`), a key
    the format does not define is refused, and its required keys (:data:`_AUTHORS_REQUIRED`)
    must be there. The paper's configs give no vocabulary: without ``vocab_size`` GPT-2's
    50257 is used. ``use_gradient_bucket`` true means
    the gradient all-reduce runs in buckets overlapped with the backward pass
    (``plan.overlap_grad_reduce``); ``trace_path`` is ignored.

    Raises
    ------
    ConfigError
        On a missing or unknown key, or ``num_gpus`` that disagrees with
        ``tensor_parallel_size * pipeline_parallel_size * data_parallel_size``.
    """
    from core.util.inputs import read_json_file

    path = Path(path)

    class _Unreadable(Exception):
        pass

    try:
        raw = read_json_file(path, _Unreadable)
    except _Unreadable as exc:
        raise ConfigError([FieldError(str(path), str(exc)[len(str(path)) + 2:])]) from None
    try:
        return vtrain_config_from_dict(raw, source=path.name, check_rules=check_rules)
    except ConfigError as exc:
        raise exc.in_file(path) from None


#: Session field -> authors'-format key that fills it (for error messages).
_AUTHORS_NAME = {**{target: key for key, (target, _) in _AUTHORS_FIELDS.items() if target},
                 "plan.schedule": "pipeline_scheduling", "plan.recompute": "use_checkpoint",
                 "cluster.gpu": "gpu_name"}


#: Keys only the authors' format has (a Hugging Face or Megatron config shares its model keys,
#: hidden_size, num_attention_heads, vocab_size ..., never these).
_AUTHORS_OWN_KEYS = frozenset({"num_gpus", "gpu_name", "data_parallel_size",
                               "pipeline_parallel_size", "use_gradient_bucket", "use_checkpoint",
                               "pipeline_scheduling", "node_size", "intra_node_bandwidth",
                               "inter_node_bandwidth", "trace_path"})


def looks_like_vtrain_config(doc: Any) -> bool:
    """Whether a parsed JSON object is meant as an authors'-format config: it has
    ``tensor_parallel_size``, or at least two of the keys only that format has
    (:data:`_AUTHORS_OWN_KEYS`), so that a misspelled ``tensor_parallel_size`` is reported as
    that format's unknown key, with the closest name, rather than as a file of no known format,
    while a Hugging Face ``config.json`` (which shares the model keys) is not taken for one."""
    return isinstance(doc, dict) and ("tensor_parallel_size" in doc
                                      or len(set(doc) & _AUTHORS_OWN_KEYS) >= 2)


def vtrain_config_from_dict(raw: Any, source: str = "config", *,
                            check_rules: bool = True, profile_path: str | None = None) -> Session:
    """Convert a parsed authors'-format dict (see :func:`read_vtrain_config`); with
    ``check_rules`` false, unknown, missing and refused keys are still errors but the
    configuration rules are not checked. ``profile_path``: a profile store the command line
    gives (``--profile``), part of the cluster before the rules are checked (the format has no
    field for one)."""
    if not isinstance(raw, dict):
        raise ConfigError([FieldError(source, "must be a JSON object")])
    errs = [FieldError(k, "unknown key in vTrain config" + did_you_mean(k, sorted(_AUTHORS_KEYS)))
            for k in sorted(set(raw) - _AUTHORS_KEYS, key=str)]
    errs += [FieldError(k, "missing required key") for k in _AUTHORS_REQUIRED if k not in raw]
    errs += _authors_key_errors(raw)
    if errs:
        raise ConfigError(errs)
    sched = raw.get("pipeline_scheduling", "1f1b").lower()
    model = model_from_fields({  # the format holds GPT models only: GPT's family fields
        **GPT_FAMILY, "name": f"{raw['num_layers']}-layer h={raw['hidden_size']}",
        "num_layers": raw["num_layers"], "hidden_size": raw["hidden_size"],
        "num_attention_heads": raw["num_attention_heads"],
        "ffn_hidden_size": raw.get("ffn_hidden_size"), "seq_length": raw["max_length"],
        "vocab_size": raw.get("vocab_size", 50257)})
    for preset in MODEL_PRESETS.values():  # the format holds GPT models only
        if dataclasses.replace(preset, name=model.name, ffn_hidden_size=model.ffn_hidden_size,
                               seq_length=model.seq_length, vocab_size=model.vocab_size) == model:
            model.name = preset.name
            break
    plan = ParallelPlan(
        tensor_parallel=raw["tensor_parallel_size"], pipeline_parallel=raw["pipeline_parallel_size"],
        data_parallel=raw["data_parallel_size"], micro_batch_size=raw["micro_batch_size"],
        global_batch_size=raw["global_batch_size"], schedule=sched,
        recompute="full" if raw.get("use_checkpoint", False) else "none", precision="fp16",
        overlap_grad_reduce=raw.get("use_gradient_bucket", False) is True,
        # the authors' runs are Megatron-DeepSpeed's: DeepSpeed's engine owns the gradients and
        # adds each weight gradient by a kernel of its own (core.plan.parallel.wgrad_accumulation)
        gradient_accumulation_fusion=False,
    )
    cluster = ClusterConfig(
        gpu=gpu_kind(raw.get("gpu_name", "A100")),
        gpus_per_node=raw.get("node_size", 8),
        intra_node_bandwidth_gbytes_per_s=(float(raw["intra_node_bandwidth"])
                                           if "intra_node_bandwidth" in raw else None),
        inter_node_bandwidth_gbits_per_s=float(raw.get("inter_node_bandwidth", 800.0)),
        profile_path=profile_path,
    )
    session = Session(model=model, plan=plan, cluster=cluster)
    session.key_names = _AUTHORS_NAME
    if not check_rules:
        return session
    # name the keys of the user's file, not the session fields they fill
    errs = [rename_field(e, _AUTHORS_NAME) for e in validate(session)]
    if "num_gpus" in raw and not errs and raw["num_gpus"] != plan.num_gpus:
        errs.append(FieldError("num_gpus", f"num_gpus={raw['num_gpus']} disagrees with "
                               f"tensor_parallel_size*pipeline_parallel_size*data_parallel_size="
                               f"{plan.tensor_parallel}*{plan.pipeline_parallel}*{plan.data_parallel}"
                               f"={plan.num_gpus}"))
    if errs:
        raise ConfigError(errs)
    return session

