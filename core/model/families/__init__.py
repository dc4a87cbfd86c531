"""The model families, one module each, and the lookup of a model's family.

Importing this package imports every module in its folder; each registers its families
(:func:`core.model.spec.register_family`): ``dense`` (:mod:`.dense`: GPT, Llama-style, MoE,
MLA, MTP and GPT-OSS models as Megatron-Core builds them) and ``gemma2`` / ``gemma3``
(:mod:`.gemma`). A new family is a module here that registers a
:class:`~core.model.spec.ModelFamily` naming its components (and its name in
:data:`core.plan.model_config.MODEL_FAMILIES`, the session field's choices); nothing else
lists the families.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Mapping

from core.model.keys import FAMILY_KEY
from core.model.spec import FAMILIES, LayerSpec, ModelFamily
from core.plan.model_config import ModelConfig

__all__ = ["family_of", "family_of_key", "layer_spec"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")  # each module registers its families


def family_of(model: ModelConfig | None = None) -> ModelFamily:
    """The family of ``model`` (its ``family`` field; ``dense`` for ``None``).

    Raises
    ------
    ValueError
        A family that is not registered (never simulated as another family).
    """
    name = getattr(model, "family", None) or "dense"
    if name not in FAMILIES:
        raise ValueError(f"model family {name!r} is not modelled; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def family_of_key(key: Mapping[str, Any]) -> ModelFamily:
    """The family an op key's ops belong to (its :data:`~core.model.keys.FAMILY_KEY` entry;
    ``dense`` without one).

    Raises
    ------
    ValueError
        A family that is not registered.
    """
    name = key.get(FAMILY_KEY) or "dense"
    if name not in FAMILIES:
        raise ValueError(f"model family {name!r} is not modelled; known: {', '.join(FAMILIES)}")
    return FAMILIES[name]


def layer_spec(model: ModelConfig) -> LayerSpec:
    """The layer spec of ``model``, built by its family."""
    return family_of(model).layer_spec(model)
