"""DeepSpeed config JSON files (``ds_config.json``) into sessions.

DeepSpeed without Megatron (alone, or under Hugging Face Trainer / accelerate) trains the
model on every GPU with ZeRO data parallelism: tensor and pipeline parallelism are 1 and the
data-parallel size is the world size. The config (https://www.deepspeed.ai/docs/config-json/)
gives the batch, the precision, the ZeRO stage and its overlaps; the model comes from a Hugging
Face ``config.json`` (:func:`core.io.hf_import.read_hf_config`) or an editor preset
(:data:`core.plan.presets.MODEL_PRESETS`), the world size, the node and the GPU kind from the
command line. :func:`session_from_deepspeed` reads a parsed config; every key is one of
(:data:`POLICY_FILE`, ``resources/deepspeed_config.json``, read by :func:`load_rules`):

* **used**: it sets a session field (the rule says which);
* **no effect**: it does not change the simulated iteration (logging, checkpoints, the
  learning rate), listed with the reason;
* **approximated**: it may change the iteration time a little and the simulator does its own
  thing (bucket sizes: one layer per bucket), listed with what it does;
* **refused**: the simulator does not model it (CPU or NVMe offload, ZeRO++, pipeline,
  sparse attention, compression ...), refused by name, unless its value switches it off.

A key in no rule is refused: we cannot tell whether it changes the run. Hugging Face Trainer
writes ``"auto"`` where it fills in a value from its own arguments: a used key at ``"auto"`` is
refused by name unless the command-line option the rule names supplies it
(``--micro-batch-size``, ``--gradient-accumulation-steps``, ``--train-batch-size``,
``--precision``); a no-effect or approximated key at ``"auto"`` is listed; a refused key at
``"auto"`` is refused (whether it is on is not known).

The meanings and defaults are DeepSpeed's, checked against the sources of DeepSpeed 0.19.8
and 0.16.9 (``runtime/config.py``, ``runtime/zero/config.py``, ``runtime/precision_config.py``,
``runtime/engine.py``): the batch triple's derivation and check
(``_set_batch_related_parameters``, ``_batch_assertion``); ``overlap_comm`` true by default at
stage 3 only; ``bfloat16``, the older name of the ``bf16`` section, read when ``bf16`` is not
given; ``"zero_optimization": true`` (the deprecated form) stage 1; an ``optimizer`` section
without ``type`` no DeepSpeed optimizer (the script's own); ``"auto"`` in a pydantic-model
section key that Hugging Face Trainer does not fill in (``zero_optimization.stage``,
``overlap_comm``) DeepSpeed's default (``DeepSpeedConfigModel`` drops it); gradients held and
reduced in the model's dtype under ZeRO (``get_data_types``, ``communication_data_type``).
bf16 without ZeRO is refused: 0.16.9 runs ``BF16_Optimizer`` (fp32 gradient accumulation),
0.19.8 its fp16 optimizer wrapper with bf16 gradients, and the file does not say which
DeepSpeed runs it. ZeRO's bucket sizes and thresholds and the fp16 loss scale's values, listed
rather than used, are still checked as DeepSpeed's config models check them (:func:`_zero_sizes`,
:func:`_fp16_scaling`). The first note says where t, p and d come from (:func:`parallel_note`):
no DeepSpeed config can set t or p.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.io.import_result import ImportResult, cluster_of_gpu, refusal, switched_off
from core.plan.fields import ConfigError, FieldError
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session

__all__ = ["POLICY_FILE", "Rule", "DeepSpeedImport", "load_rules", "model_from_name",
           "session_from_deepspeed", "read_deepspeed_config", "RECOMPUTE_OPTIONS",
           "sweep_options", "parallel_note"]

#: The policy: every DeepSpeed config key the importer knows and what it does with it.
POLICY_FILE = Path(__file__).resolve().parents[2] / "resources" / "deepspeed_config.json"

#: ``--recompute`` values: none, or full (Hugging Face's ``gradient_checkpointing``, and
#: DeepSpeed's ``deepspeed.checkpointing.checkpoint`` around each layer: the layer's input
#: kept, the layer run again in the backward, Megatron's full recomputation).
RECOMPUTE_OPTIONS = ("none", "full")


def sweep_options(precision: str) -> str:
    """The ``vtrain sweep`` options that keep its default plan space (Megatron-Core's: tensor,
    pipeline and context parallelism, Transformer Engine's and Megatron's fused cross-entropy,
    selective recomputation) to what DeepSpeed without Megatron runs: ZeRO data parallelism
    over every GPU (t = p = cp = 1), the model's own unfused cross-entropy (``off``), no or full
    recomputation (:data:`RECOMPUTE_OPTIONS`), full of every layer (``--recompute-num-layers
    all``: Hugging Face's ``gradient_checkpointing`` and DeepSpeed's checkpointing wrap every
    layer; Megatron-LM's partial block recomputation is not theirs); with bf16 also ZeRO
    stages 1-3, since stage 0
    with bf16 is refused on import (:func:`session_from_deepspeed`: the file does not say which
    optimizer DeepSpeed runs there). docs/deepspeed.md, "Sweeping"."""
    out = ("--tensor-parallel 1 --pipeline-parallel 1 --context-parallel 1 "
           f"--cross-entropy-fusion off --recompute {','.join(RECOMPUTE_OPTIONS)} "
           "--recompute-num-layers all")
    return out + (" --zero-stages 1,2,3" if precision == "bf16" else "")

#: ``data_types.grad_accum_dtype``'s names -> the session's: DeepSpeed's ``DtypeEnum``
#: (``runtime/config.py`` line 144 in 0.19.8), case as written there (``DtypeEnum("BF16")``
#: fails); int8 is not a gradient dtype DeepSpeed's engine runs.
_DTYPES = {"fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
           "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
           "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16"}

#: ``communication_data_type``'s names: DeepSpeed lowers the case and takes these three only
#: (``runtime/config.py`` ``get_communication_data_type``, lines 216-230 in 0.19.8).
_COMM_DTYPES = ("fp32", "fp16", "bf16")

#: DeepSpeed's default ``zero_optimization.stage3_prefetch_bucket_size`` (5e7 elements).
_PREFETCH_DEFAULT = 50_000_000

_MISSING = object()


@dataclass(frozen=True)
class Rule:
    """How the importer treats one key (see ``resources/deepspeed_config.json``'s ``about``).

    ``kind`` is "used", "no_effect", "approximated" or "refused"; ``text`` what it sets, why it
    changes nothing, what the simulator does instead, or what it would change; ``auto`` the
    option that supplies a used key's ``"auto"``; ``inert`` the values that switch a refused
    key off; ``switch`` the key of a refused section whose value (``switch_default`` when
    absent) is checked against ``inert``."""

    kind: str
    text: str
    auto: str | None = None
    inert: tuple[Any, ...] = ()
    switch: str | None = None
    switch_default: Any = None


@lru_cache(maxsize=1)
def load_rules() -> dict[str, Rule]:
    """The rules of :data:`POLICY_FILE`, by dotted key (``SECTION.*`` for a whole section's keys).

    Raises
    ------
    OSError, ValueError
        The shipped file is missing or malformed (an installation fault, not bad input)."""
    raw = json.loads(POLICY_FILE.read_text(encoding="utf-8"))
    rules = {}
    for key, r in raw["keys"].items():
        if r["kind"] not in ("used", "no_effect", "approximated", "refused"):
            raise ValueError(f"{POLICY_FILE}: {key}: kind {r['kind']!r}")
        rules[key] = Rule(r["kind"], r["text"], r.get("auto"), tuple(r.get("inert", ())),
                          r.get("switch"), r.get("switch_default"))
    return rules


@dataclass
class DeepSpeedImport(ImportResult):
    """Result of :func:`session_from_deepspeed` (:class:`core.io.import_result.ImportResult`:
    the session, the used keys, the no-effect and switched-off keys in ``ignored``, the notes)
    and the keys the simulator models its own way (``approximated``: key -> what it does)."""

    approximated: dict[str, str] = field(default_factory=dict)


def _count(n: int) -> str:
    """An integer of the file with thousands separators, a long one (``1e300`` read as a whole
    number has 301 digits) by its sign and digit count."""
    if abs(n) < 10 ** 15:
        return f"{n:,}"
    return f"{'-' if n < 0 else ''}an integer of {len(str(abs(n))):,} digits"


def _show(value: Any) -> str:
    """A value of the file as a message shows it: as JSON writes it (``true``, ``null``,
    ``"none"``, ``200000000.0``; not Python's ``True``, ``None``, ``'none'``), a long one cut
    at 40 characters (:func:`core.io.kineto.describe_value`)."""
    from core.io.kineto import describe_value
    return describe_value(value)


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"


def _classify(cfg: dict[str, Any], where: str, prefix: str = "",
              out: tuple[dict, dict, dict] | None = None) -> tuple[dict, dict, dict]:
    """``(used {key: value}, ignored {key: why}, approximated {key: what the simulator does})``
    of the config's keys, in the file's order. Raises ConfigError for the first key in no
    rule, or refused and not switched off."""
    rules = load_rules()
    used, ignored, approx = out if out is not None else ({}, {}, {})
    for key, value in cfg.items():
        name = prefix + key
        rule = rules.get(name) or rules.get(prefix + "*")
        if rule is None:
            section = any(k.startswith(name + ".") for k in rules)
            if section and isinstance(value, dict):
                _classify(value, where, name + ".", (used, ignored, approx))
                continue
            if section:
                raise refusal(where, name, f"{_show(value)} must be an object (a section of "
                              "DeepSpeed's config)")
            shown = name if len(name) <= 80 else name[:80] + "..."  # a hostile key's length
            raise refusal(where, shown, "is not a DeepSpeed config key the importer knows, so it "
                          "cannot tell whether it changes the run")
        if rule.kind == "used":
            used[name] = value
        elif rule.kind == "no_effect":
            ignored[name] = rule.text
        elif rule.kind == "approximated":
            approx[name] = (f"{_show(value)}: " if not isinstance(value, (dict, list)) else "") + rule.text
        else:
            ignored[name] = _switched_off(where, name, value, rule)
    return used, ignored, approx


def _switched_off(where: str, name: str, value: Any, rule: Rule) -> str:
    """Why a refused key (or section, :attr:`Rule.switch`) is listed: its value switches it
    off. Raises ConfigError naming it (or its switch key) when it is on, or "auto"."""
    key, v = name, value
    if rule.switch is not None:
        if value is None:
            return f"null: off (on: {rule.text})"
        if not isinstance(value, dict):
            raise refusal(where, name, f"{_show(value)} must be an object (a section of DeepSpeed's "
                          "config)")
        key, v = f"{name}.{rule.switch}", value.get(rule.switch, rule.switch_default)
    elif not rule.inert:
        raise refusal(where, name, f"not modelled: {rule.text}")
    if _is_auto(v):
        raise refusal(where, key, "'auto' (Hugging Face Trainer's placeholder): whether it is "
                      f"on cannot be told, and when on it is not modelled ({rule.text}); give "
                      "its value in the file")
    if not switched_off(v, rule.inert):
        raise refusal(where, key, f"{_show(v)}: not modelled: {rule.text}")
    return f"{_show(v)}: the modelled setting (another value: {rule.text})"


def _supplied(used: dict[str, Any], name: str, where: str, options: dict[str, Any]) -> Any:
    """A used key's value: the file's, or the option's where the file has "auto" (None when
    neither gives it). Raises ConfigError naming the key when it is "auto" and the option is
    not given, or when the file and the option disagree."""
    option = load_rules()[name].auto
    given = options.get(option) if option else None
    v = used.get(name, _MISSING)
    if _is_auto(v):
        if given is None:
            raise refusal(where, name, "'auto' (Hugging Face Trainer's placeholder, filled in "
                          f"from its own arguments): give {option} with the value the Trainer "
                          "fills in, or the value in the file")
        return given
    if v is _MISSING:
        return given
    if given is not None and given != v:
        raise refusal(where, name, f"{_show(v)} in the file, {option} {given}: they disagree (the "
                      "option supplies an \"auto\" value only)")
    return v


def _refuse_unsupplied_autos(used: dict[str, Any], where: str, bf16_section: str,
                             options: dict[str, Any]) -> None:
    """Refuse, in one message, every used key at Hugging Face Trainer's "auto" whose option is
    not given, when there are two or more (the batch keys and the precision switches): each was
    refused alone before, so a Trainer config took one run per missing option. One such key is
    refused where it is read (:func:`_supplied`, :func:`_enabled`). ``train_batch_size`` is
    not among them: without ``--train-batch-size`` it is the Trainer's product of the others.

    Raises
    ------
    ConfigError
        Naming the first such key, the others and the options to give.
    """
    rules = load_rules()
    keys = ["train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
            f"{bf16_section}.enabled", "fp16.enabled"]
    missing = [k for k in keys if _is_auto(used.get(k)) and rules[k].auto not in options]
    if len(missing) < 2:
        return
    opts = list(dict.fromkeys(rules[k].auto for k in missing))

    def _and(words: list[str]) -> str:
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    raise refusal(where, missing[0], f"'auto', and so {'is' if len(missing) == 2 else 'are'} "
                  f"{_and(missing[1:])} (Hugging Face Trainer's placeholders, filled in from its "
                  f"own arguments): give {_and(opts)} with the values the Trainer fills in, or "
                  "the values in the file")


def _positive(value: Any, name: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise refusal(where, name, f"{_show(value)} must be a positive integer")
    return value


def _switch(used: dict[str, Any], name: str, where: str, default: bool) -> bool:
    v = used.get(name, default)
    if not isinstance(v, bool):
        raise refusal(where, name, f"{_show(v)} must be true or false (a JSON boolean)")
    return v


def _batch(used: dict[str, Any], where: str, d: int, options: dict[str, Any]
           ) -> tuple[int, int, list[str]]:
    """``(micro-batch size, global batch size, notes)`` of DeepSpeed's batch triple over ``d``
    data-parallel GPUs, as DeepSpeed derives and checks it (``runtime/config.py``
    ``_set_batch_related_parameters``, ``_batch_assertion``): any two give the third, one of
    train_batch_size or train_micro_batch_size_per_gpu alone means no gradient accumulation,
    and train_batch_size must equal micro * accumulation steps * d. Hugging Face Trainer's
    ``"auto"`` train_batch_size is that product when the other two are known."""
    tb, mb, ga = "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"
    micro = _positive(_supplied(used, mb, where, options), mb, where)
    acc = _positive(_supplied(used, ga, where, options), ga, where)
    notes = []
    if _is_auto(used.get(tb)) and "--train-batch-size" not in options \
            and micro is not None and acc is not None:
        # Hugging Face Trainer fills it in as per-device batch * accumulation * world size
        train = None
        notes.append(f"{tb} 'auto': {micro} * {acc} * {d:,} GPUs = {micro * acc * d:,}, as "
                     "Hugging Face Trainer fills it in")
    else:
        train = _positive(_supplied(used, tb, where, options), tb, where)
    if train is None and micro is None:
        raise refusal(where, mb, f"missing, and so is {tb}: DeepSpeed needs one of them (give "
                      "train_micro_batch_size_per_gpu, or --micro-batch-size)")
    if train is not None and micro is not None and acc is None:
        acc = train // (micro * d)
        notes.append(f"{ga} not given: {acc:,} ({tb} / ({mb} * {d:,} GPUs), DeepSpeed's rule)")
    elif train is not None and micro is None:
        acc = acc or 1
        micro = train // (d * acc)
        notes.append(f"{mb} not given: {micro:,} ({tb} / ({ga} {acc} * {d:,} GPUs), "
                     "DeepSpeed's rule)")
    elif train is None:
        acc = acc or 1
        train = micro * acc * d
    if micro < 1 or acc < 1 or train != micro * acc * d:
        raise refusal(where, tb, f"{train:,} is not {mb} ({micro}) * {ga} ({acc}) * the "
                      f"{d:,} data-parallel GPUs = {micro * acc * d:,} (DeepSpeed's rule: "
                      "train_batch_size = micro-batch * accumulation steps * data-parallel size)")
    return micro, train, notes


def _enabled(used: dict[str, Any], name: str, where: str, precision: str | None,
             section_given: bool = True, notes: list[str] | None = None) -> bool:
    """``bf16.enabled`` (``bfloat16.enabled``) / ``fp16.enabled``: the file's boolean (absent:
    false, DeepSpeed's default), or, at "auto", ``--precision``'s choice; raises ConfigError
    naming the key when "auto" has no ``--precision`` or the file and the option disagree.
    Without the section (``section_given`` false), ``--precision`` of this dtype enables it,
    noted: accelerate, under which Hugging Face Trainer runs DeepSpeed, adds the section
    (``DeepSpeedPlugin.set_mixed_precision``, accelerate 1.16.0 ``utils/dataclasses.py``
    lines 1308-1313)."""
    dtype = {"bfloat16": "bf16"}.get(name.split(".")[0], name.split(".")[0])
    if not section_given and precision == dtype:
        if notes is not None:
            notes.append(f"no {dtype} section, --precision {dtype}: {dtype} (Hugging Face "
                         f"Trainer's accelerate adds {{\"{dtype}\": {{\"enabled\": true}}}} "
                         "when the file has no such section; DeepSpeed alone would run fp32)")
        return True
    v = used.get(name, False)
    if _is_auto(v):
        if precision is None:
            raise refusal(where, name, "'auto' (Hugging Face Trainer's placeholder, filled in "
                          "from its --bf16 / --fp16): give --precision bf16, fp16 or fp32")
        return precision == dtype
    if not isinstance(v, bool):
        raise refusal(where, name, f"{_show(v)} must be true or false (a JSON boolean)")
    if precision is not None and v != (precision == dtype):
        raise refusal(where, name, f"{str(v).lower()} in the file"
                      + ("" if name in used else " (absent: false)")
                      + f", --precision {precision}: they disagree (the option supplies an "
                      "\"auto\" value only)")
    return v


def _dtype(used: dict[str, Any], name: str, where: str) -> str | None:
    """The session's dtype of ``communication_data_type`` (fp32, fp16 or bf16, any case) or
    ``data_types.grad_accum_dtype`` (a ``DtypeEnum`` name as written: bf16, bfloat16,
    torch.bfloat16 ...); None when absent or null (DeepSpeed's default: the model's). Raises
    ConfigError naming the key for another value, which DeepSpeed refuses."""
    v = used.get(name)
    if v is None:
        return None
    if name == "communication_data_type":
        if not isinstance(v, str) or v.lower() not in _COMM_DTYPES:
            raise refusal(where, name, f"{_show(v)}: one of fp32, fp16, bf16 (DeepSpeed's "
                          "get_communication_data_type takes these three, any case)")
        return v.lower()
    if not isinstance(v, str) or v not in _DTYPES:
        raise refusal(where, name, f"{_show(v)}: one of " + ", ".join(_DTYPES)
                      + " (DeepSpeed's DtypeEnum names, case as written)")
    return _DTYPES[v]


def _precision(used: dict[str, Any], where: str, zero: int, precision: str | None,
               bf16_section: str = "bf16", sections: frozenset[str] = frozenset({"bf16", "fp16"}),
               notes: list[str] | None = None) -> tuple[str, str]:
    """``(plan.precision, plan.grad_reduce_dtype)``. DeepSpeed holds and reduces the gradients
    in the model's dtype under ZeRO and with fp16 or fp32 (``engine.get_data_types``,
    ``communication_data_type``); bf16 without ZeRO runs ``BF16_Optimizer``, which accumulates
    fp32 gradients and partitions its fp32 state: refused, and so are a
    ``data_types.grad_accum_dtype`` or ``communication_data_type`` other than the gradients'. ``bf16_section`` is the section DeepSpeed reads: ``bf16``, or
    ``bfloat16`` (its older name) when there is no ``bf16``; ``sections`` the precision
    sections the file gives (``--precision`` enables one it lacks, :func:`_enabled`)."""
    bf16 = _enabled(used, f"{bf16_section}.enabled", where, precision,
                    bool(sections & {"bf16", "bfloat16"}), notes)
    fp16 = _enabled(used, "fp16.enabled", where, precision, "fp16" in sections, notes)
    if bf16 and fp16:
        raise refusal(where, "fp16.enabled", f"true with {bf16_section}.enabled true: one mixed "
                      "precision (DeepSpeed refuses both)")
    if precision is not None and not bf16 and not fp16 and precision != "fp32":
        raise refusal(where, f"{precision}.enabled", f"absent (false), --precision {precision}: "
                      "they disagree (the option supplies an \"auto\" value only)")
    dtype = "bf16" if bf16 else "fp16" if fp16 else "fp32"
    if dtype == "bf16" and zero == 0:
        raise refusal(where, "zero_optimization.stage", f"0 with {bf16_section}.enabled: "
                      "DeepSpeed 0.16 runs its BF16_Optimizer (fp32 gradient accumulation, the "
                      "fp32 master weights partitioned over the data-parallel GPUs), 0.19 its "
                      "fp16 optimizer wrapper on bf16 gradients (runtime/engine.py "
                      "get_data_types, _do_optimizer_sanity_check); the file does not say which "
                      "DeepSpeed runs it, and BF16_Optimizer's memory and communication are not "
                      "modelled; give stage 1, 2 or 3")
    for key, what in (("data_types.grad_accum_dtype", "accumulated"),
                      ("communication_data_type", "reduced")):
        v = _dtype(used, key, where)
        if v is not None and v != dtype:
            raise refusal(where, key, f"{_show(used[key])}: gradients of a {dtype} model {what} in "
                          f"{v} are not modelled (the simulator holds and reduces them in one "
                          f"dtype, plan.grad_reduce_dtype; DeepSpeed's default is the model's, "
                          f"{dtype})")
    return dtype, dtype


def _zero(used: dict[str, Any], where: str, notes: list[str]) -> tuple[int, bool, bool]:
    """``(plan.zero_stage, overlap_grad_reduce, overlap_param_gather)``. ``overlap_comm``
    defaults to true at stage 3 only (DeepSpeed's ``DeepSpeedZeroConfig.overlap_comm_valid``);
    stage 3 prefetches the next parameters on the all-gather stream, a stream of its own only
    with ``overlap_comm`` (``PartitionedParameterCoordinator``), and not at all with
    ``stage3_prefetch_bucket_size`` 0. Stage 0 has no ZeRO optimizer: DeepSpeed's engine
    all-reduces the gradients after the backward, so ``overlap_comm`` changes nothing."""
    key = "zero_optimization.stage"
    stage = used.get(key, 0)
    if _is_auto(stage):  # DeepSpeedConfigModel drops "auto"; Hugging Face does not fill it
        stage = 0
        notes.append(f"{key} 'auto': 0, DeepSpeed's default (its config model drops \"auto\" "
                     "and Hugging Face Trainer does not fill the stage in)")
    if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (0, 1, 2, 3):
        raise refusal(where, key, f"{_show(stage)}: one of 0, 1, 2, 3 (a JSON integer)")
    okey = "zero_optimization.overlap_comm"
    if _is_auto(used.get(okey)):
        used = {k: v for k, v in used.items() if k != okey}
        notes.append(f"{okey} 'auto': {str(stage == 3).lower()}, DeepSpeed's default at stage "
                     f"{stage} (its config model drops \"auto\")")
    overlap = _switch(used, okey, where, stage == 3)
    if stage == 0:
        if overlap:
            notes.append("zero_optimization.overlap_comm has no effect at stage 0: DeepSpeed's "
                         "engine all-reduces the gradients after the backward")
        return 0, False, False
    pkey = "zero_optimization.stage3_prefetch_bucket_size"
    if "zero_optimization.prefetch_bucket_size" in used:
        if pkey in used:
            raise refusal(where, "zero_optimization.prefetch_bucket_size", "given with "
                          "stage3_prefetch_bucket_size, its alias: one of them (DeepSpeed's "
                          "config model refuses both)")
        pkey = "zero_optimization.prefetch_bucket_size"
    prefetch = used.get(pkey, _PREFETCH_DEFAULT)
    if _is_auto(prefetch):
        prefetch = 1  # Hugging Face Trainer fills in 0.9 * hidden_size**2: positive
    prefetch = _whole(prefetch, pkey, where, 0, "DeepSpeedZeroConfig.prefetch_bucket_size: "
                      "an int, ge=0")
    return stage, overlap, stage == 3 and overlap and prefetch > 0


def _whole(value: Any, key: str, where: str, least: int | None, rule: str) -> int:
    """``value`` as an int: a JSON integer, or a number with no fraction (``5e8``), at least
    ``least`` (None: any); ``rule`` is DeepSpeed's, quoted in the refusal. Booleans and strings,
    which DeepSpeed's pydantic models would coerce (``true`` to 1, ``"500000000"``), are
    refused: the file should say the number.

    Raises
    ------
    ConfigError
        Naming ``where: key``: not a number, a fraction, not finite, or below ``least``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, float) and not value.is_integer()):
        raise refusal(where, key, f"{_show(value)} must be a whole number, a JSON number with "
                      f"no fraction ({rule})")
    if least is not None and value < least:
        raise refusal(where, key, f"{_show(value)} must be at least {least} ({rule})")
    return int(value)


#: ZeRO's integer sizes and thresholds (elements) besides the prefetch bucket (:func:`_zero`),
#: by field name and alias: ``DeepSpeedZeroConfig``'s ``int`` fields with ``ge=0``
#: (``runtime/zero/config.py``, DeepSpeed 0.16.9 and 0.19.8), but ``reduce_bucket_size``,
#: ``gt=0`` in 0.19.8 (line 113; see :func:`_zero_sizes`).
_ZERO_SIZES = frozenset({"reduce_bucket_size", "allgather_bucket_size", "sub_group_size",
                         *(f"{p}{k}" for p in ("", "stage3_")
                           for k in ("param_persistence_threshold", "model_persistence_threshold",
                                     "max_live_parameters", "max_reuse_distance"))})


def _zero_sizes(cfg: dict[str, Any], where: str, stage: int, deprecated: bool) -> None:
    """Check ZeRO's bucket sizes and thresholds (:data:`_ZERO_SIZES`; the simulator reduces
    and gathers one layer per bucket, so their values are listed, not used) against the rules
    DeepSpeed applies to them: whole numbers of at least 0 (``DeepSpeedZeroConfig``,
    ``runtime/zero/config.py``); ``reduce_bucket_size`` at least 1 (0.19.8: ``gt=0``; 0.16.9
    takes 0 and its ZeRO-1/2 divides by it at the first gradient, ``stage_1_and_2.py``
    ``report_ipg_memory_usage``); ``allgather_bucket_size`` even at stages 1 and 2 (the ZeRO-1/2
    optimizer asserts a multiple of its ``nccl_start_alignment_factor``, 2, in 0.16.9 and
    0.19.8). 0 is taken for ``allgather_bucket_size``: DeepSpeed's ZeRO-1/2 all-gathers each
    group with one ``all_gather_into_tensor`` and does not read it (``runtime/utils.py``
    ``all_gather_dp_groups``). ``deprecated``: the file's ``"zero_optimization": true`` form,
    whose all-gather bucket is the top-level ``allgather_size`` (``read_zero_config_deprecated``).
    Hugging Face Trainer's ``"auto"`` is taken (it fills in a positive size).

    Raises
    ------
    ConfigError
        Naming the key and the rule."""
    section = cfg.get("zero_optimization")
    values = {f"zero_optimization.{k}": (v, k) for k, v in section.items()} \
        if isinstance(section, dict) else {}
    if deprecated and stage and "allgather_size" in cfg:
        values["allgather_size"] = (cfg["allgather_size"], "allgather_bucket_size")
    for key, (value, name) in values.items():
        if name not in _ZERO_SIZES or _is_auto(value):
            continue
        if name == "reduce_bucket_size":
            _whole(value, key, where, 1, "DeepSpeedZeroConfig.reduce_bucket_size: an int, gt=0 "
                   "in 0.19.8; 0.16.9 takes 0 (ge=0), and its ZeRO-1/2 then divides by it at the "
                   "first gradient, stage_1_and_2.py report_ipg_memory_usage")
            continue
        v = _whole(value, key, where, 0,
                   f"DeepSpeedZeroConfig.{name.removeprefix('stage3_')}: an int, ge=0")
        if name == "allgather_bucket_size" and stage in (1, 2) and v % 2:
            raise refusal(where, key, f"{_count(v)} must be even at ZeRO stage {stage}: DeepSpeed's "
                          "ZeRO-1/2 optimizer asserts it is a multiple of its "
                          "nccl_start_alignment_factor, 2 (stage_1_and_2.py)")


#: The highest ``fp16.initial_scale_power`` taken (our rule: 2**127 is fp32's largest power of 2).
_SCALE_POWER_MAX = 127


def _fp16_scaling(cfg: dict[str, Any], where: str, fp16: bool) -> None:
    """Check the fp16 section's loss-scale values (listed, not used: the scaling's work per
    iteration is the same) against DeepSpeed 0.19.8's ``DeepSpeedFP16Config``
    (``runtime/precision_config.py``), which checks them whether fp16 is on or not:
    ``loss_scale`` a finite number of at least 0 (0: dynamic); ``initial_scale_power``,
    ``loss_scale_window``, ``min_loss_scale`` and ``hysteresis`` ints; with fp16 on and dynamic
    scaling (``loss_scale`` 0), ``loss_scale_window`` and ``min_loss_scale`` above 0
    (``_validate_dynamic_loss_scale_params``). DeepSpeed does not bound
    ``initial_scale_power`` (the scale starts at 2**power, ``DynamicLossScaler``); our rule,
    with fp16 on and dynamic scaling: 0 to :data:`_SCALE_POWER_MAX`, a scale of at least 1 that
    the fp32 loss holds (above, every step overflows and is skipped until the scale has halved
    back into range, which is not modelled; below, the loss is scaled down, not up). DeepSpeed
    0.16.9 checks none of them (``runtime/config.py`` ``get_scalar_param``). ``"auto"`` is
    taken: DeepSpeed's config model drops it (the default).

    Raises
    ------
    ConfigError
        Naming ``fp16.KEY`` and the rule."""
    section = cfg.get("fp16")
    if not isinstance(section, dict):
        return
    given = {k: v for k, v in section.items() if not _is_auto(v)}
    scale = given.get("loss_scale", 0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) \
            or (isinstance(scale, float) and not math.isfinite(scale)) or scale < 0:
        raise refusal(where, "fp16.loss_scale", f"{_show(scale)} must be a finite number of at "
                      "least 0, 0 for dynamic loss scaling (DeepSpeed 0.19.8's "
                      "DeepSpeedFP16Config refuses any other)")
    ints = {k: _whole(given[k], f"fp16.{k}", where, None, "DeepSpeedFP16Config: an int")
            for k in ("initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis")
            if k in given}
    if fp16 and scale > 2 ** _SCALE_POWER_MAX:
        raise refusal(where, "fp16.loss_scale", f"{_show(scale)} must be at most "
                      f"2**{_SCALE_POWER_MAX} (vtrain's rule, as for initial_scale_power; "
                      "DeepSpeed does not bound it): a static scale above the largest power "
                      "of 2 the fp32 loss holds overflows at every step, and a static scaler "
                      "never lowers it, so every step is skipped")
    if not fp16 or scale != 0:
        return
    for k in ("loss_scale_window", "min_loss_scale"):
        if k in ints and ints[k] <= 0:
            raise refusal(where, f"fp16.{k}", f"{ints[k]} must be above 0 with dynamic loss "
                          "scaling (DeepSpeed 0.19.8's DeepSpeedFP16Config refuses it: "
                          + ("the window divides the step count" if k == "loss_scale_window"
                             else "the scale's floor") + ")")
    power = ints.get("initial_scale_power")
    if power is not None and not 0 <= power <= _SCALE_POWER_MAX:
        raise refusal(where, "fp16.initial_scale_power", f"{_count(power)} must be from 0 to "
                      f"{_SCALE_POWER_MAX} (vtrain's rule; DeepSpeed does not bound it): the "
                      "dynamic loss scale starts at 2**initial_scale_power, which must be at "
                      f"least 1 and at most 2**{_SCALE_POWER_MAX}, the largest power of 2 the "
                      "fp32 loss holds; above it every step overflows and is skipped until the "
                      "scale has halved back into range (skipped steps are not modelled), below "
                      "0 the loss is scaled down")


def _optimizer(used: dict[str, Any], where: str, cfg: dict[str, Any], notes: list[str]) -> None:
    """Check ``optimizer.type``: Adam or AdamW (DeepSpeed compares names in lower case); no
    ``optimizer`` section, or one without ``type`` (``runtime/config.py``
    ``get_optimizer_name``: None), is the training script's own optimizer, noted."""
    if "optimizer" not in cfg:
        notes.append("no optimizer section: the training script's own optimizer (Hugging Face "
                     "Trainer's default is AdamW); modelled as Adam's state and step")
        return
    v = used.get("optimizer.type")
    if v is None:  # runtime/config.py get_optimizer_name: no type, no DeepSpeed optimizer
        notes.append("optimizer section without a type: DeepSpeed builds no optimizer of its "
                     "own (its optimizer.params are not read) and runs the training script's; "
                     "modelled as Adam's state and step")
        return
    if not isinstance(v, str) or v.lower() not in ("adam", "adamw"):
        raise refusal(where, "optimizer.type", f"{_show(v)}: not modelled (the simulator's optimizer "
                      "state and step are Adam's: Adam or AdamW)")


def model_from_name(text: str, *, seq_length: int | None = None
                    ) -> tuple[ModelConfig, dict[str, str], list[str]]:
    """``(model, ignored fields, notes)`` of ``--model TEXT``: a Hugging Face ``config.json``
    (or its folder) where the path exists, read by :func:`core.io.hf_import.read_hf_config`,
    else an editor preset's name (case and spacing ignored). ``seq_length`` replaces the
    model's sequence length (default the config's ``max_position_embeddings`` or the
    preset's, noted).

    Raises
    ------
    ConfigError
        ``--model``: neither a file nor a preset (the presets listed), or the Hugging Face
        importer's refusal of the config.
    core.io.session.SessionFileError
        The file cannot be read or is not JSON.
    """
    from core.io.hf_import import hf_config_path, read_hf_config
    from core.io.import_result import global_batch_note, seq_length_note
    from core.plan.presets import MODEL_PRESETS, preset_name
    try:  # Path("") is the current folder; a name too long for a path raises ENAMETOOLONG
        is_file = bool(text.strip()) and Path(text).exists()
    except (OSError, ValueError):
        is_file = False
    if is_file:
        imp = read_hf_config(hf_config_path(text), seq_length=seq_length)
        batch = global_batch_note(imp.session.plan.global_batch_size)
        return imp.session.model, imp.ignored, [n for n in imp.notes if n != batch]
    name = preset_name(text)
    if name is None:
        shown = repr(text if len(text) <= 80 else text[:80] + "...")
        raise ConfigError([FieldError("--model", f"{shown} is neither a file (a Hugging Face "
                                      "config.json or its folder) nor a preset; the presets are "
                                      + ", ".join(MODEL_PRESETS))])
    model = replace(MODEL_PRESETS[name])
    notes = []
    if seq_length is not None:
        model.seq_length = seq_length
    else:
        notes.append(seq_length_note(model.seq_length, "the preset's"))
    return model, {}, notes


def parallel_note(num_gpus: int) -> str:
    """The import's note on where its parallel sizes come from: t = 1 and p = 1 because no
    DeepSpeed config can say otherwise, d the world size of ``--num-gpus``. DeepSpeed's
    pipeline parallelism is a ``PipelineModule`` built in the training script (its config's
    ``pipeline`` section only tunes it, and is refused); Megatron-DeepSpeed takes t and p from
    its launch arguments (``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``),
    never from the JSON, and vtrain does not import its runs; so the file is read with
    DeepSpeed's own meaning, data parallelism over every GPU, and ``vtrain import deepspeed``
    has no option for t or p. docs/deepspeed.md."""
    return (f"t = 1, p = 1, d = {num_gpus:,} (--num-gpus): a DeepSpeed config cannot set "
            "tensor or pipeline parallelism (DeepSpeed's pipeline is a PipelineModule in the "
            "training script; Megatron-DeepSpeed takes both from its launch arguments, "
            "--tensor-model-parallel-size and --pipeline-model-parallel-size), so the file is "
            "read as DeepSpeed without Megatron: ZeRO data parallelism over every GPU. There is "
            "no option for t or p: vtrain does not import Megatron-DeepSpeed runs")


#: Session field -> the key or option that sets it (for error messages).
_FIELD_KEYS = {"plan.micro_batch_size": "train_micro_batch_size_per_gpu",
               "plan.global_batch_size": "train_batch_size", "plan.data_parallel": "--num-gpus",
               "plan.zero_stage": "zero_optimization.stage", "model.seq_length": "--seq-length",
               "plan.recompute": "--recompute", "cluster.gpus_per_node": "--gpus-per-node",
               "cluster.gpu": "--gpu"}


def _named(session_field: str, where: str, precision: str, bf16_section: str = "bf16") -> str:
    """The key of the file (``FILE: key``) or the option that set ``session_field``."""
    section = bf16_section if precision == "bf16" else precision
    key = {**_FIELD_KEYS, "plan.precision": f"{section}.enabled"}.get(session_field)
    if key is None:
        return session_field
    return key if key.startswith("--") else f"{where}: {key}"


def session_from_deepspeed(cfg: Any, model: ModelConfig, where: str = "ds_config.json", *,
                           num_gpus: int, gpus_per_node: int | None = None,
                           gpu: str | None = None, recompute: str | None = None,
                           options: dict[str, Any] | None = None) -> DeepSpeedImport:
    """A session from a parsed DeepSpeed config and a model (see the module doc).

    Parameters
    ----------
    cfg : dict
        The parsed JSON file.
    model : ModelConfig
        The model trained (:func:`model_from_name`); a mixture-of-experts model is refused.
    where : str
        The file's name, for messages.
    num_gpus : int
        World size (the launcher's): the data-parallel size (t = p = 1).
    gpus_per_node : int, optional
        GPUs per node (default: the GPU kind's NVLink domain).
    gpu : str, optional
        GPU kind of the cluster (:data:`core.plan.cluster.GPU_KINDS`; default the session's).
    recompute : str, optional
        ``none`` or ``full`` (:data:`RECOMPUTE_OPTIONS`); default the lightest of none,
        selective, full with which the plan fits (:func:`core.io.start_plan.start_recompute`,
        noted): the config does not say.
    options : dict, optional
        Values of Hugging Face Trainer's ``"auto"`` keys, by option: ``--micro-batch-size``,
        ``--gradient-accumulation-steps``, ``--train-batch-size``, ``--precision``.

    Raises
    ------
    ConfigError
        A key that is unknown, refused, "auto" without its option, or of a bad value; a batch
        triple that breaks DeepSpeed's rule; a mixture-of-experts model; a session that breaks
        the configuration rules (named by the key or option that set it).
    """
    if not isinstance(cfg, dict):
        raise ConfigError([FieldError(where, "must be a JSON object (a DeepSpeed config)")])
    options = options or {}
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise ConfigError([FieldError("--num-gpus", f"{num_gpus!r} must be a positive integer")])
    if recompute is not None and recompute not in RECOMPUTE_OPTIONS:
        raise ConfigError([FieldError("--recompute", f"{recompute!r}: one of "
                                      + ", ".join(RECOMPUTE_OPTIONS))])
    if model.is_moe:
        raise ConfigError([FieldError("--model", f"{model.name}: a mixture-of-experts model; "
                                      "DeepSpeed without Megatron runs the model's own expert "
                                      "layers (Hugging Face's loop over the experts), not the "
                                      "Megatron-Core MoE layer the simulator times")])
    notes: list[str] = []
    zero_cfg = cfg.get("zero_optimization")
    if isinstance(zero_cfg, bool):  # runtime/zero/config.py read_zero_config_deprecated
        cfg = {**cfg, "zero_optimization": {"stage": int(zero_cfg)}}
        notes.append(f"zero_optimization {str(zero_cfg).lower()}: DeepSpeed's deprecated form, "
                     f"stage {int(zero_cfg)}")
    bf16_section = "bfloat16" if "bfloat16" in cfg and "bf16" not in cfg else "bf16"
    used, ignored, approx = _classify(cfg, where)
    if "bfloat16" in cfg and bf16_section == "bf16":
        for k in [k for k in used if k.startswith("bfloat16.")]:
            del used[k]
        ignored["bfloat16"] = ("not read: DeepSpeed reads the bf16 section when both are given "
                               "(runtime/precision_config.py get_bfloat16_config)")
    _refuse_unsupplied_autos(used, where, bf16_section, options)
    micro, global_batch, batch_notes = _batch(used, where, num_gpus, options)
    notes += batch_notes
    zero, overlap_grad, overlap_param = _zero(used, where, notes)
    _zero_sizes(cfg, where, zero, isinstance(zero_cfg, bool))
    precision, grad_dtype = _precision(used, where, zero, options.get("--precision"),
                                       bf16_section, frozenset(cfg) & {"bf16", "bfloat16", "fp16"},
                                       notes)
    _fp16_scaling(cfg, where, precision == "fp16")
    _optimizer(used, where, cfg, notes)
    model = replace(model, make_vocab_size_divisible_by=1)
    plan = ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=num_gpus, micro_batch_size=micro,
        global_batch_size=global_batch, schedule="1f1b", recompute=recompute or "full",
        precision=precision, sequence_parallel=False, zero_stage=zero,
        overlap_grad_reduce=overlap_grad, overlap_param_gather=overlap_param,
        grad_reduce_dtype=grad_dtype,
        # DeepSpeed's engine owns the gradients: each weight gradient is added by a kernel of
        # its own (no fused accumulation into Megatron's main_grad)
        gradient_accumulation_fusion=False)
    cluster = cluster_of_gpu(gpu)
    if gpus_per_node is not None:
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) \
                or gpus_per_node < 1:
            raise ConfigError([FieldError("--gpus-per-node", f"{gpus_per_node!r} must be a "
                                          "positive integer")])
        cluster = replace(cluster, gpus_per_node=gpus_per_node)
    session = Session(model=model, plan=plan, cluster=cluster)
    session.notes = f"Imported from the DeepSpeed config {where} ({model.name})."
    from core.plan.rules import validate
    errs = validate(session)
    if errs:
        raise ConfigError([FieldError(_named(e.field, where, precision, bf16_section), e.message,
                                      rule=e.rule) for e in errs])
    if recompute is None:
        from core.io.start_plan import start_recompute
        session, note = start_recompute(session, RECOMPUTE_OPTIONS)
        notes.append(note + " (the DeepSpeed config does not say whether the model "
                     "recomputes: give --recompute none or full, full being Hugging Face's "
                     "gradient_checkpointing)")
    notes.insert(0, parallel_note(num_gpus))
    rules = load_rules()

    def source(key: str) -> str:  # what filled in a used key's "auto"
        if key == "train_batch_size" and "--train-batch-size" not in options:
            return "the micro-batch * accumulation steps * GPUs, as the Trainer fills it in"
        return str(rules[key].auto)
    described = {k: (f"'auto' ({source(k)}): " if _is_auto(v) and rules[k].auto
                     else "" if isinstance(v, (dict, list)) else f"{_show(v)}: ") + rules[k].text
                 for k, v in used.items()}
    return DeepSpeedImport(session, described, ignored, notes, approximated=approx)


def read_deepspeed_config(path: str | Path, model: ModelConfig, **kw: Any) -> DeepSpeedImport:
    """Read a DeepSpeed config JSON file (see :func:`session_from_deepspeed`, which takes the
    keyword arguments).

    Raises
    ------
    core.io.session.SessionFileError
        The file cannot be read or is not JSON.
    ConfigError
        The config is refused (the message names the file and the key).
    """
    from core.io.session import SessionFileError
    from core.util.inputs import parse_json, read_bytes
    data = read_bytes(path, SessionFileError, "json")
    try:
        cfg = parse_json(data, str(path), SessionFileError)
    except SessionFileError as exc:
        why = _not_json(data)
        if why:
            raise SessionFileError(f"{path}: {why}") from None
        raise exc from None
    return session_from_deepspeed(cfg, model, str(path), **kw)


def _not_json(data: bytes) -> str:
    """Why ``data`` (a file that is not JSON) is refused, where the JSON parser's own error
    position tells: a comment (``//``, ``/*`` or ``#``) where the error is, which DeepSpeed's
    own reader (hjson, ``runtime/config.py``) takes but Hugging Face Trainer and accelerate
    (``json.load``, ``HfDeepSpeedConfig``) do not, or text that does not open with ``{`` (a
    YAML file: accelerate's config, which names the DeepSpeed config in
    ``deepspeed_config_file``), or nothing at all. "" otherwise (the parser's message
    stands)."""
    try:
        text = data.decode("utf-8-sig")
        json.loads(text)
    except UnicodeDecodeError:
        return ""
    except json.JSONDecodeError as exc:
        rest = text[exc.pos:]
        if rest.startswith(("//", "/*", "#")):
            return (f"line {exc.lineno} column {exc.colno}: a comment; DeepSpeed's own reader "
                    "(hjson) takes comments, Hugging Face Trainer and accelerate (json) do not, "
                    "and this importer reads JSON as they do: remove the comments")
        if not text.strip():
            return "empty: a DeepSpeed config is a JSON object ({...})"
        if not text.lstrip().startswith(("{", "[")):
            return ("not JSON: a DeepSpeed config is a JSON object, opening with '{' (a YAML "
                    "file, such as accelerate's config, is not one: give the JSON file its "
                    "deepspeed_config_file names)")
        return ""
    except (ValueError, RecursionError):  # nested too deeply: parse_json's message stands
        return ""
    return ""
