"""The transformers configuration classes' defaults for the keys a Hugging Face ``config.json``
may leave out (``resources/hf_config_defaults.json``).

transformers builds the configuration class the file's ``model_type`` names (``AutoConfig``;
without one, the architecture's ``config_class``) and a key the file leaves out takes that
class's default: Mistral-7B-v0.1's file without ``sliding_window`` is ``MistralConfig``'s 4096,
not no window. :func:`fill_class_defaults` does the same for the keys the importer reads, from
the data file, and names each default it used; a key the importer needs whose class default it
does not know is refused by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.io.import_result import refusal
from core.util.text import short_repr

__all__ = ["DEFAULTS_FILE", "ClassDefaults", "load_class_defaults", "fill_class_defaults"]

#: The shipped table of defaults.
DEFAULTS_FILE = Path(__file__).resolve().parents[2] / "resources" / "hf_config_defaults.json"


@dataclass(frozen=True)
class ClassDefaults:
    """One transformers configuration class: its ``model_type``, its name (``class_name``,
    e.g. ``"MistralConfig"``), the architectures whose ``config_class`` it is and the defaults
    (key -> value; None: the class derives it, as the importer does for an absent key)."""

    model_type: str
    class_name: str
    architectures: tuple[str, ...]
    defaults: dict[str, Any]


@lru_cache(maxsize=4)
def load_class_defaults(path: Path = DEFAULTS_FILE
                        ) -> tuple[tuple[str, ...], dict[str, ClassDefaults]]:
    """``(needed keys, {model_type: ClassDefaults})`` of the defaults file (format
    ``vtrain-hf-config-defaults`` version 1; see its ``about``).

    Raises ValueError for a file of another format or version (a shipped file: a bug)."""
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != "vtrain-hf-config-defaults" or doc.get("version") != 1:
        raise ValueError(f"{path}: not a vtrain-hf-config-defaults version 1 file")
    table = {mt: ClassDefaults(mt, e["class"], tuple(e["architectures"]), dict(e["defaults"]))
             for mt, e in doc["model_types"].items()}
    return tuple(doc["needed"]), table


def fill_class_defaults(cfg: dict[str, Any], arch: str, where: str
                        ) -> tuple[dict[str, Any], list[str]]:
    """``(cfg with its class's defaults for the keys it leaves out, notes)``.

    The class is the one ``cfg["model_type"]`` names, or without a ``model_type`` the one whose
    architectures include ``arch``. Each default that is a value is put in the copy and noted
    (``"sliding_window: absent, MistralConfig's default 4096"``); a None default (the class
    derives the key: heads, head size, no window) leaves the key out, as the importer reads an
    absent key.

    Raises
    ------
    ConfigError
        A needed key (the file's ``needed``) the config leaves out whose class default is not
        in the table (an unlisted ``model_type``, or a class default we are not sure of),
        named by the key."""
    needed, table = load_class_defaults()
    mt = cfg.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise refusal(where, "model_type", f"{json.dumps(mt)[:60]} must be text (the name of "
                      "the config's class, such as \"llama\")")
    entry = (table.get(mt) if mt is not None else
             next((e for e in table.values() if arch in e.architectures), None))
    out, notes = dict(cfg), []
    extra = [k for k in (entry.defaults if entry else ()) if k not in needed]
    for key in (*needed, *extra):
        if key in cfg:
            continue
        if entry is None or key not in entry.defaults:
            whose = (f"{entry.class_name}'s" if entry else
                     f"the class of model_type {short_repr(mt)}'s" if mt is not None else f"{arch}'s class's")
            raise refusal(where, key, f"absent, and {whose} default for it is not one the "
                          "importer knows (resources/hf_config_defaults.json): give it in the "
                          "file")
        value = entry.defaults[key]
        if value is not None:
            out[key] = value
            notes.append(f"{key}: absent, {entry.class_name}'s default {json.dumps(value)}")
    return out, notes
