"""The values of a Megatron-Bridge run_config.yaml as the importer compares them: a YAML
value as a comparable scalar (:func:`yaml_scalar`), a config field's default as the policy
table records it (:func:`field_default`) and whether a value is it (:func:`at_default`); used
by :mod:`core.io.bridge_import`."""

from __future__ import annotations

from typing import Any

__all__ = ["TORCH_DTYPES", "yaml_scalar", "field_default", "at_default"]

#: torch dtypes as Megatron-LM's dtype arguments spell them (``--main-grads-dtype`` ...)
TORCH_DTYPES = {"torch.float32": "fp32", "torch.float": "fp32", "torch.bfloat16": "bf16",
                "torch.float16": "fp16", "torch.half": "fp16", "torch.uint8": "fp8"}


def yaml_scalar(value: Any) -> Any:
    """A YAML value as a comparable scalar: a dtype, enum or function mapping as its name
    (``torch.bfloat16``, ``AttnBackend.auto``, ``silu``), a list of them as a tuple."""
    if isinstance(value, dict) and isinstance(value.get("_target_"), str):
        target = value["_target_"]
        if "_name_" in value:  # an enum: its class and member
            return f"{target.rsplit('.', 1)[-1]}.{value['_name_']}"
        if target in TORCH_DTYPES:
            return target
        return target.rsplit(".", 1)[-1]
    if isinstance(value, list):
        return tuple(yaml_scalar(v) for v in value)
    return value


def field_default(defaults: dict[str, Any], key: str) -> tuple[bool, Any]:
    """``(known, default)`` of a field: unknown for a field without one or with a default the
    source computes (``default_factory``)."""
    if key not in defaults:
        return False, None
    d = defaults[key]
    if isinstance(d, dict) and "expr" in d:
        expr = d["expr"] or ""
        parts = expr.split(".")
        if not (len(parts) == 2 and all(p.isidentifier() for p in parts)):
            return False, None  # a computed default (2 ** 32, a default_factory)
        if parts[0] == "torch":  # a dtype
            return True, expr
        if parts[0] == "F":  # torch.nn.functional's function, as yaml_scalar names it
            return True, parts[1]
        if parts[0][:1].isupper():  # an enum member: AttnBackend.auto
            return True, expr
        return False, None
    if isinstance(d, list):
        return True, tuple(d)
    return True, d


def at_default(defaults: dict[str, Any], key: str, value: Any) -> bool:
    """Whether ``value`` is the field's default (False where the default is not known)."""
    known, d = field_default(defaults, key)
    return known and yaml_scalar(value) == d and type(yaml_scalar(value)) is type(d) or (
        known and d is None and value is None)
