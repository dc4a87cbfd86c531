"""Field metadata and the checks of one field's value: the :class:`Bound` of each numeric
input (:data:`BOUNDS`), the metadata helper every record's fields are declared with, the
type/bound/choice check of a value (:func:`check_value`, :func:`section_errors`) and the error
types every rule reports with (:class:`FieldError`, :class:`ConfigError`).

A new bound, a new kind of field metadata or a new way a single value can be wrong goes here;
rules between fields go to :mod:`core.plan.rules`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["Bound", "BOUNDS", "MAX_STRING_LENGTH", "MAX_INTEGER", "path_problem", "field_kind",
           "check_value", "section_errors", "list_for_text", "FieldError", "ConfigError", "rename_field"]


@dataclass(frozen=True)
class Bound:
    """Inclusive range ``lo..hi`` a numeric field must lie in, and why a real model or
    cluster stays inside it (quoted in the error message)."""

    lo: float
    hi: float
    why: str


#: The bounds of every numeric input, in one place. Every reader (session files, the
#: authors' JSON, measurement CSVs, job traces, the GUI's editor through :func:`validate`)
#: checks them, so no simulation starts from a size no real run could have: sizes far
#: beyond them make the execution graph or the sweep unbuildable (2^63 layers never
#: returns) and rates near zero make times infinite (a 5e-324 GB/s link).
BOUNDS: dict[str, Bound] = {
    "layers": Bound(1, 10_000, "the deepest published LLMs have 100 to 200 layers"),
    "hidden": Bound(1, 1_000_000, "the widest published LLMs have hidden sizes near 25,600"),
    "heads": Bound(1, 1_000_000, "at most one head per hidden unit"),
    "ffn": Bound(1, 4_000_000, "four times the hidden-size bound"),
    "seq": Bound(1, 2**24, "the longest published training contexts are about 2^20 tokens"),
    "vocab": Bound(1, 2**31 - 1, "token ids are 32-bit integers in Megatron-LM's datasets"),
    "vocab_divisor": Bound(1, 2**31 - 1, "the vocabulary is padded to a multiple of it and token "
                           "ids are 32-bit integers; Megatron-LM's default is 128, DeepSeek-V3's "
                           "launches give 3232"),
    "parallel": Bound(1, 2**20, "the largest training clusters have about 10^5 GPUs"),
    "micro_batch": Bound(1, 2**20, "a micro-batch is at most the global batch"),
    "global_batch": Bound(1, 2**24, "the largest published global batches are about 2^24 tokens"),
    "gpus_per_node": Bound(1, 1024, "the largest NVLink domains have 72 to 576 GPUs"),
    "intra_bw": Bound(0.1, 100_000, "GB/s per GPU: PCIe 3 x16 gives 16, NVLink 5 gives 900"),
    "inter_bw": Bound(0.1, 1_000_000, "Gb/s per node: eight 400 Gb/s NICs give 3,200"),
    "price": Bound(0, 10_000, "USD per GPU-hour: cloud prices are 1 to 100"),
    "tokens": Bound(1, 1e16, "the largest published training runs use about 4e13 tokens"),
    "experts": Bound(1, 65_536, "the largest published MoE models have 256 to 512 experts"),
    "shared_experts": Bound(0, 65_536, "DeepSeek-V3 has one shared expert, Qwen2-MoE four"),
    "dense_layers": Bound(0, 10_000, "at most every layer"),
    "imbalance": Bound(1, 1_000, "tokens of the busiest expert over the mean; 1 is balanced"),
    "latent": Bound(1, 1_000_000, "DeepSeek-V3's latent ranks are 512 (K/V) and 1536 (Q), at "
                    "most the hidden-size bound"),
    "mla_head": Bound(1, 65_536, "DeepSeek-V2/V3 heads are 128 (+64 rotary) channels"),
    "mtp_layers": Bound(0, 10_000, "DeepSeek-V3 predicts one extra token (one MTP layer)"),
    "clamp": Bound(0, 1e6, "GPT-OSS clamps its gated MLP's inputs at 7"),
    "glu_offset": Bound(-1e6, 1e6, "GPT-OSS adds 1 to the linear half of its gated MLP"),
    "dropout": Bound(0, 1, "a probability; Megatron-LM's default is 0.1, Llama-family "
                     "recipes train with 0"),
}


def described_field(default: Any, unit: str, help: str, **kw: Any) -> Any:
    """A dataclass field with ``unit`` and ``help`` metadata.

    Further metadata, checked by every reader and by :func:`validate` (no code per field):
    ``bounds`` (a :data:`BOUNDS` entry, for numbers), ``min``/``max`` (a field's own
    limits, within its bounds; ``min_why``: what a value below ``min`` should be written as,
    added to the refusal), ``choices`` (allowed values, for strings and
    enumerations), ``required`` (a session file must give the field, ``null`` where the type
    allows it: its default is not what a file that leaves it out means; every model field,
    see :func:`missing_required`), ``path`` (a string naming a file: it must be resolvable,
    :func:`path_problem`), ``comma_list`` (a string that holds a comma-separated list of
    names, as Megatron-Core's option does: a list given for it is refused with the string it
    means, :func:`list_for_text`). The type is the annotation (``int``, ``float``, ``str``, ``bool``,
    optionally ``| None``).
    """
    return field(default=default, metadata={"unit": unit, "help": help, **kw})


#: Longest string a session field may hold (names, GPU kinds, paths).
MAX_STRING_LENGTH = 4096


#: Largest magnitude of an integer in any numeric field (int64, as numpy and Megatron-LM hold
#: counts); every field's own bounds are far less, this one names the rule for the absurd.
MAX_INTEGER = 2**63 - 1


def path_problem(text: str) -> str | None:
    """Why the path ``text`` cannot be resolved, or None.

    Lexical and local only (no file is opened, and whether it exists is not told): an empty
    path, a NUL byte, characters the file system cannot encode, or ``~user`` naming a user this machine does not have. A path that is a symlink
    loop is refused when it is opened, with the message of any unreadable store.
    """
    if not text:  # read as "none" it silently used the shipped store instead
        return "is an empty path (null when there is none)"
    if "\0" in text:
        return "cannot be resolved: it holds a NUL byte"
    try:
        os.fsencode(text)
    except UnicodeError:  # a lone surrogate (from a JSON escape) is no file name
        return "cannot be resolved: it holds characters no file name can have"
    if text.startswith("~"):
        try:
            expanded = os.path.expanduser(text)
        except (RuntimeError, KeyError, ValueError):  # pragma: no cover - expanduser leaves it
            expanded = text
        if expanded.startswith("~"):
            user = text[1:].split("/", 1)[0] or "the current user"
            return f"cannot be resolved: no home folder for {user} on this machine"
    return None


def field_kind(f: dataclasses.Field) -> tuple[str, bool]:
    """``(base type, optional)`` of a dataclass field from its annotation, e.g.
    ``("int", True)`` for ``int | None``."""
    return _annotation_kind(str(f.type))


@lru_cache(maxsize=256)
def _annotation_kind(annotation: str) -> tuple[str, bool]:
    parts = [p.strip() for p in annotation.split("|")]
    optional = "None" in parts
    base = next((p for p in parts if p != "None"), "object")
    return base, optional


class _Shown:
    """:func:`shown_value` of a value, computed only when a message formats it (a valid value,
    the common case, is never turned into text; sweeps check millions of them)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __format__(self, spec: str) -> str:
        return format(shown_value(self.value), spec)

    __str__ = __repr__ = lambda self: shown_value(self.value)


def shown_value(value: Any) -> str:
    """``value`` as JSON writes it (``null``, ``true``, ``"text"``; ``repr`` for what JSON
    cannot hold), shortened to 60 characters: a value from a file can be anything. A huge
    integer is described by its digit count (``str`` of 4,300 digits or more raises)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -10**50 < value < 10**50:
        from core.util.inputs import describe_number
        return describe_number(value)
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _num_text(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def check_value(name: str, f: dataclasses.Field, value: Any) -> str | None:
    """The rule ``value`` breaks as the value of field ``f`` (None when it is fine).

    Driven by the field's annotation and metadata (``bounds``, ``choices``): booleans
    must be ``bool`` (never a string or a number), integers ``int`` (not ``bool``, not
    a float), numbers finite ``int`` or ``float`` inside the field's :class:`Bound`,
    strings at most :data:`MAX_STRING_LENGTH` long and one of ``choices`` when given. An
    integer is compared as an integer, never converted to a float (``OverflowError``): one
    beyond the field's bounds, or beyond :data:`MAX_INTEGER` where it has none, is refused by
    its magnitude; a field marked ``path`` must name a
    path that can be resolved (:func:`path_problem`).
    The message starts with ``name=value`` (the readers rename it for other formats).
    """
    base, optional = field_kind(f)
    meta = f.metadata
    if value is None and optional:
        return None
    bound: Bound | None = meta.get("bounds")
    shown = _Shown(value)
    if base == "bool":
        return None if isinstance(value, bool) else f"{name}={shown} must be true or false"
    if base == "str":
        if not isinstance(value, str):
            return f"{name}={shown} must be a string"
        if len(value) > MAX_STRING_LENGTH:
            return f"{name} must be at most {MAX_STRING_LENGTH:,} characters long"
        if meta.get("path"):
            problem = path_problem(value)
            if problem:
                return f"{name}={shown} {problem}"
        choices = meta.get("choices")
        if choices and meta.get("check_choices", True) and value not in choices:
            notes = meta.get("choice_notes", {})  # what each value is, where names are alike
            return f"{name}={shown} is not one of " + ", ".join(
                f"{c} ({notes[c]})" if c in notes else str(c) for c in choices)
        return None
    if base in ("int", "float"):
        integer = base == "int"
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        lo = bound.lo if bound else None
        if isinstance(value, bool) or not ok_type:
            if integer and lo is not None and lo >= 1:
                return f"{name}={shown} must be a positive integer"
            return f"{name}={shown} must be {'an integer' if integer else 'a number'}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name}={shown} must be a finite number"
        choices = meta.get("choices")
        if choices and value not in choices:
            return f"{name}={shown} is not one of {', '.join(map(str, choices))}"
        if "min" in meta and value < meta["min"]:
            return (f"{name}={shown} must be at least {_num_text(meta['min'])}"
                    + (f" ({meta['min_why']})" if "min_why" in meta else ""))
        if "max" in meta and value > meta["max"]:
            return f"{name}={shown} must be at most {_num_text(meta['max'])}"
        # integers are compared as integers (exactly), never converted to a float
        if bound is None:
            if isinstance(value, int) and not -MAX_INTEGER <= value <= MAX_INTEGER:
                return (f"{name}={shown} is beyond any bound of a field (integers are at most "
                        f"2^63 - 1 in magnitude)")
            return _subnormal(name, shown, value)
        if value < bound.lo:
            if integer and bound.lo == 1:
                return f"{name}={shown} must be a positive integer"
            if bound.lo == 0:
                return f"{name}={shown} must be zero or more"
            return f"{name}={shown} must be at least {_num_text(bound.lo)} ({bound.why})"
        if value > bound.hi:
            return f"{name}={shown} must be at most {_num_text(bound.hi)} ({bound.why})"
        return _subnormal(name, shown, value)
    return None


def list_for_text(f: dataclasses.Field, value: Any) -> str:
    """What to say of ``value`` given for field ``f`` in place of its string: for a
    ``comma_list`` field given a list of names, ``": the names as one comma-separated string,
    e.g. "a,b""`` (the string it means); ``""`` otherwise."""
    if not f.metadata.get("comma_list") or not isinstance(value, (list, tuple)):
        return ""
    if value and all(isinstance(v, str) and v and "," not in v for v in value):
        return f': the names as one comma-separated string, e.g. {json.dumps(",".join(value))}'
    return ": the names as one comma-separated string"


def _subnormal(name: str, shown: str, value: Any) -> str | None:
    """The error of a subnormal float (0 < |x| < 2.2e-308) that a field's bounds let through
    (those with 0 inside them): no field means one (a margin of 1e-320 was printed as
    "9.99989e-319 %")."""
    if isinstance(value, float) and 0.0 < abs(value) < sys.float_info.min:
        return (f"{name}={shown} is a subnormal number (under 2.2e-308 in magnitude): "
                "give 0 or a normal number")
    return None


def section_errors(section: str, obj: Any) -> list[FieldError]:
    """Type, bound and choice errors of every field of dataclass ``obj`` (see :func:`check_value`),
    named ``section.field``."""
    errs = []
    for f in dataclasses.fields(obj):
        msg = check_value(f.name, f, getattr(obj, f.name))
        if msg:
            errs.append(FieldError(f"{section}.{f.name}", msg))
    return errs


TYPE_WORDS = ("int", "float", "str", "bool")


def matches_type(base: str, value: Any) -> bool:
    if value is None:
        return True
    if base == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    return isinstance(value, {"int": int, "float": (int, float), "str": str}[base])


#: :attr:`FieldError.rule` of a refusal because the simulator does not model what is asked
#: (the input may be right; counted apart, e.g. by ``vtrain validate``'s skip causes).
NOT_MODELLED = "not modelled"
#: :attr:`FieldError.rule` of layers that do not divide evenly over the pipeline's stages.
UNEVEN_PIPELINE_SPLIT = "uneven pipeline split"


@dataclass(frozen=True)
class FieldError:
    """One broken rule: ``field`` is a dotted path such as ``plan.tensor_parallel``;
    ``message`` says the rule for a person; ``rule`` is the kind of rule for a program
    (:data:`NOT_MODELLED`, :data:`UNEVEN_PIPELINE_SPLIT`, or empty: the input is invalid), so
    that nothing reads the message's text to tell them apart."""

    field: str
    message: str
    rule: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ConfigError(ValueError):
    """A configuration breaks one or more rules; ``errors`` lists them all.

    ``source`` (optional) names the file they come from; the message then starts with it.
    """

    def __init__(self, errors: list[FieldError], source: str | None = None):
        self.errors = list(errors)
        self.source = source
        text = "; ".join(str(e) for e in self.errors)
        super().__init__(f"{source}: {text}" if source else text)

    def in_file(self, source: str | Path) -> "ConfigError":
        """The same errors, the message naming the file ``source``."""
        return ConfigError(self.errors, str(source))


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def rename_field(err: FieldError, names: dict[str, str]) -> FieldError:
    """``err`` with another format's name (``names``: session field -> the file's key, e.g.
    the authors' JSON keys of :mod:`core.io.vtrain_json`) in place of the session field it
    names, in the field and at the start of the message."""
    key = names.get(err.field)
    if key is None:
        return err
    short = err.field.split(".")[-1] + "="
    message = key + "=" + err.message[len(short):] if err.message.startswith(short) else err.message
    return FieldError(key, message, rule=err.rule)

