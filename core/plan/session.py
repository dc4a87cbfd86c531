"""The session record, :class:`Session`: everything one simulation needs (model, plan,
cluster, cost, reliability and the GUI's saved settings), what a session file holds, and its
checked construction from plain JSON (:meth:`Session.from_dict`).

A new section of a session goes here; reading and writing session files is
:mod:`core.io.session`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from core.plan.cluster import GPU_NVLINK_DOMAIN, ClusterConfig, CostConfig, ReliabilityConfig
from core.plan.fields import (TYPE_WORDS, ConfigError, FieldError, list_for_text, matches_type,
                              shown_value, check_value, field_kind, rename_field)
from core.plan.model_config import ModelConfig, missing_required
from core.plan.parallel import ParallelPlan

__all__ = ["Session"]


@dataclass
class Session:
    """Everything one simulation needs; what a session file holds.

    ``source`` (not a field, never saved): the file it was read from, when it was
    (:func:`core.io.session.load_any`), so that later errors can name it; ``key_names``:
    session field -> the key that file uses for it, when it is not a session file (the
    authors' format), so that later errors use the file's own names (:meth:`in_its_terms`).
    """

    source = None
    key_names = None  # (no annotation: not a dataclass field)

    def in_its_terms(self, exc: "ConfigError") -> "ConfigError":
        """``exc`` naming this session's file and, for another format, that format's keys."""
        if exc.source or not self.source:
            return exc
        errors = exc.errors
        if self.key_names:
            errors = [rename_field(e, self.key_names) for e in errors]
        return ConfigError(errors, self.source)

    model: ModelConfig = field(default_factory=ModelConfig)
    plan: ParallelPlan = field(default_factory=ParallelPlan)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    #: Failures, restarts and checkpoints (:mod:`core.sim.goodput`); optional in a session file
    #: (a file without it takes the defaults), always written
    reliability: ReliabilityConfig = field(default_factory=ReliabilityConfig)
    notes: str = ""
    #: Settings of the design-space sweep (the GUI's Explore tab), plain JSON:
    #: ``{"space": SweepSpace.to_dict(), "deadline_days": float | None}``, and the last sweep
    #: under ``"result"`` (:func:`core.studies.sweep.saved_sweep`). Optional:
    #: None (the default) is not written, so files without it stay byte-identical.
    #: Its content is checked by :meth:`core.studies.sweep.SweepSpace.from_dict` where it is used.
    sweep: dict[str, Any] | None = None
    #: Settings of the studies (the GUI's Studies tab), plain JSON:
    #: ``{"optimal": {...}, "schedule": {...}}``; optional like ``sweep``. Checked
    #: where used (:func:`core.studies.optimal.compute_optimal`, :mod:`core.studies.scheduler`).
    studies: dict[str, Any] | None = None
    #: The Compare tab's pinned plan A, ``{"pinned": {"model": ..., "plan": ..., "cluster":
    #: ..., "cost": ...}}`` (the sections of a session; model and plan required), so that
    #: a saved session keeps its comparison (``vtrain diff SESSION.json`` with one file
    #: compares it with the session's own plan). Optional like ``sweep``; checked in full
    #: when read (:meth:`from_dict`), built by :meth:`pinned`.
    compare: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of all sections (no format header); ``sweep``, ``studies`` and
        ``compare`` only when set, the model's ``family`` only when not ``dense`` and its
        ``make_vocab_size_divisible_by`` only when not Megatron-LM's 128 (so such a model's
        file is what it was before the fields existed)."""
        out = dataclasses.asdict(self)
        for name in ("sweep", "studies", "compare"):
            if out[name] is None:
                del out[name]
        if out["model"].get("family") == "dense":
            del out["model"]["family"]
        if out["model"].get("make_vocab_size_divisible_by") == 128:
            del out["model"]["make_vocab_size_divisible_by"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], require: bool = False) -> "Session":
        """Build a session from :meth:`to_dict` output.

        Every given field is checked for type, bounds and choices (:func:`check_value`);
        with ``require``, every field marked ``required`` in a given section must be there
        (what a session file must hold).

        Raises
        ------
        ConfigError
            On an unknown section or field, a missing required field, or a value of the
            wrong type, out of bounds or not among the choices.
        """
        if not isinstance(data, dict):
            raise ConfigError([FieldError("session", "must be a JSON object")])
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known), key=str)
        if unknown:
            raise ConfigError([FieldError(k, "unknown section" + _did_you_mean(k, known))
                               for k in unknown])
        kwargs: dict[str, Any] = {}
        errors: list[FieldError] = []
        for name, f in known.items():
            if name not in data:
                continue
            if name == "notes":
                if not isinstance(data[name], str):
                    raise ConfigError([FieldError("notes", "must be a string")])
                kwargs[name] = data[name]
                continue
            if name in ("sweep", "studies", "compare"):
                if data[name] is not None and not isinstance(data[name], dict):
                    raise ConfigError([FieldError(name, "must be a JSON object or null")])
                # a deep copy: the session never shares mutable state with its source
                kwargs[name] = None if data[name] is None else json.loads(json.dumps(data[name]))
                if name == "compare" and data[name] is not None:
                    _pinned_from_dict(kwargs[name])  # raises naming compare.pinned.<field>
                continue
            section_cls = {"model": ModelConfig, "plan": ParallelPlan,
                           "cluster": ClusterConfig, "cost": CostConfig,
                           "reliability": ReliabilityConfig}[name]
            try:
                kwargs[name] = _section_from_dict(section_cls, name, data[name], require)
                if name == "cluster":
                    _default_node(kwargs[name], data[name])
            except ConfigError as exc:  # every section's errors in one message
                errors += exc.errors
        if errors:
            raise ConfigError(errors)
        return cls(**kwargs)

    def pinned(self) -> "Session | None":
        """The Compare tab's pinned plan A as a session of its own (no ``sweep``, ``studies``
        or ``compare``), or None when nothing is pinned.

        Raises
        ------
        ConfigError
            ``compare`` is not ``{"pinned": {section: {...}}}`` with the sections of a
            session (fields named ``compare.pinned.<section>.<field>``).
        """
        return None if self.compare is None else _pinned_from_dict(self.compare)

    def with_pinned(self, pinned: "Session | None") -> "Session":
        """A copy of this session with ``pinned`` (its model, plan, cluster and cost) as the
        Compare tab's plan A (None: nothing pinned)."""
        out = self.copy()
        out.compare = None if pinned is None else {"pinned": {
            k: v for k, v in pinned.to_dict().items() if k in _PINNED_SECTIONS}}
        return out

    def copy(self) -> "Session":
        """A deep copy (values are copied as they are, unchecked: an editor may hold invalid ones)."""
        import copy
        return copy.deepcopy(self)


_PINNED_SECTIONS = ("model", "plan", "cluster", "cost")


def _pinned_from_dict(compare: Any) -> Session:
    """The pinned plan of a session's ``compare`` section (see :attr:`Session.compare`).

    Raises
    ------
    ConfigError
        Not ``{"pinned": {...}}``, a section other than model, plan, cluster and cost,
        model or plan missing, or a field of the wrong type, out of bounds or unknown
        (named ``compare.pinned.<section>.<field>``).
    """
    where = "compare.pinned"
    if not isinstance(compare, dict) or set(compare) != {"pinned"}:
        raise ConfigError([FieldError("compare", 'must be {"pinned": {...}} (the Compare tab\'s '
                                                 "plan A)")])
    pinned = compare["pinned"]
    if not isinstance(pinned, dict):
        raise ConfigError([FieldError(where, "must be a JSON object of session sections")])
    extra = sorted(set(pinned) - set(_PINNED_SECTIONS), key=str)
    missing = [k for k in ("model", "plan") if k not in pinned]
    if extra or missing:
        raise ConfigError([FieldError(f"{where}.{k}", "unknown section (the pinned plan holds "
                                                      "model, plan, cluster and cost)"
                                      + _did_you_mean(k, _PINNED_SECTIONS))
                           for k in extra]
                          + [FieldError(f"{where}.{k}", "missing section") for k in missing])
    try:
        return Session.from_dict(pinned, require=True)
    except ConfigError as exc:
        raise ConfigError([dataclasses.replace(e, field=f"{where}.{e.field}")
                           for e in exc.errors]) from None


#: Fields a session file may still hold that a later field replaced: the unknown-field error says
#: which field to write instead (a file is not read as the other field's value, never guessed).
RETIRED_FIELDS: dict[str, str] = {
    "plan.fp8_weight_copies": "replaced by plan.fp8_impl (fp8_weight_copies false was "
                              "torchtitan's float8: fp8_impl \"torchao\"; true was Transformer "
                              "Engine's: \"transformer_engine\"); write that field instead",
}


def _did_you_mean(key: Any, fields) -> str:
    """``"; did you mean tensor_parallel?"`` for a misspelled field name, or ``""``
    (:func:`core.util.text.did_you_mean`)."""
    from core.util.text import did_you_mean
    return did_you_mean(key, fields)


def _default_node(cluster: ClusterConfig, data: dict[str, Any]) -> None:
    """A cluster section that names a shipped GPU kind but not ``gpus_per_node`` gets that
    kind's NVLink domain (:data:`core.plan.cluster.GPU_NVLINK_DOMAIN`: 72 for a GB200 NVL72
    rack), not the field's default of 8, which is an HGX board's."""
    if "gpus_per_node" not in data:
        cluster.gpus_per_node = GPU_NVLINK_DOMAIN.get(cluster.gpu, cluster.gpus_per_node)


def _section_from_dict(cls: type, section: str, data: Any, require: bool = False) -> Any:
    if not isinstance(data, dict):
        raise ConfigError([FieldError(section, "must be a JSON object")])
    fields = {f.name: f for f in dataclasses.fields(cls)}
    errors = [FieldError(f"{section}.{k}", "unknown field" + (
        f": {RETIRED_FIELDS[f'{section}.{k}']}" if f"{section}.{k}" in RETIRED_FIELDS
        else _did_you_mean(k, fields))) for k in sorted(set(data) - set(fields), key=str)]
    missing = missing_required(cls, data) if require else []
    if len(missing) == 1:
        errors.append(FieldError(f"{section}.{missing[0]}", "missing; a session file must give "
                                 "it (no meaningful default)"))
    elif missing:  # one error naming them all: a file is fixed in one go
        errors.append(FieldError(section, f"missing {', '.join(missing)}; a session file must "
                                 "give " + ("every model field (null where a field may be empty)"
                                            if cls is ModelConfig else "them (no meaningful "
                                            "default)")))
    kwargs = {}
    for name, value in data.items():
        if name not in fields:
            continue
        base, optional = field_kind(fields[name])
        if base in TYPE_WORDS and not matches_type(base, value):
            errors.append(FieldError(f"{section}.{name}", f"must be of type {base}"
                                     f"{' or null' if optional else ''}, got {shown_value(value)}"
                                     + list_for_text(fields[name], value)))
            continue
        msg = check_value(name, fields[name], value)
        if msg:
            errors.append(FieldError(f"{section}.{name}", msg))
            continue
        kwargs[name] = float(value) if base == "float" and value is not None else value
    if errors:
        raise ConfigError(errors)
    return cls(**kwargs)

