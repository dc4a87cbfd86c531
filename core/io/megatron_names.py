"""Megatron-LM's command-line arguments as vtrain reads them (the table is data).

Megatron-LM's ``megatron/training/arguments.py`` builds one ``argparse`` parser
(``allow_abbrev=False``); ``pretrain_gpt.py`` stops on an argument it does not
define. ``resources/megatron_arguments.json`` lists every option of that parser at
the Megatron-LM commit it names (options, ``dest``, argparse action, ``nargs``,
default) and what the option does to a simulated iteration, its ``effect``:

* ``modelled``: mapped to session fields (:data:`core.io.megatron_args.ARGUMENTS`).
* ``ignored``: may change the iteration time (kernels, fusions, communication
  schedules, offloading) and is not modelled: the importer lists it by name as
  *ignored* (:data:`TIMING_ARGUMENTS`).
* ``neutral``: cannot change it (logging, paths, checkpointing, data, tokenizer
  files, learning rate, optimizer hyper-parameters, inference and RL settings,
  numerics-only constants): listed apart (:data:`NEUTRAL_ARGUMENTS`).
* ``refused``: changes the work in a way vtrain does not model (Mamba and
  linear-attention layers, FP4 GEMMs ...): the import stops naming it and what it
  would change (:data:`REFUSED_ARGUMENTS`).
* ``removed``: rejected by Megatron-LM's ``validate_args`` ("no longer valid"),
  refused with the argument to use (:data:`REMOVED_ARGUMENTS`).

``older`` lists names of earlier Megatron-LM releases (before Megatron-Core, and
core_r0.9 to core_r0.13) still met in launch scripts, with their effect: they
are read as aliases. ``tests/test_megatron_import_current.py`` checks the table
against ``../shared/data/megatron-lm/arguments.json`` (every option there is
here, with the same dest, action, nargs and default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TABLE_FILE", "MEGATRON_LM_COMMIT", "Entry", "ENTRIES", "BY_OPTION", "BY_DEST",
           "EFFECTS", "TIMING_ARGUMENTS", "NEUTRAL_ARGUMENTS", "REFUSED_ARGUMENTS",
           "REMOVED_ARGUMENTS", "MODELLED_ARGUMENTS", "OLDER_ARGUMENTS"]

TABLE_FILE = Path(__file__).resolve().parents[2] / "resources" / "megatron_arguments.json"
#: What an argument does to a simulated iteration (see the module's docstring).
EFFECTS = ("modelled", "ignored", "neutral", "refused", "removed")


@dataclass(frozen=True)
class Entry:
    """One argument of Megatron-LM's parser.

    Attributes
    ----------
    options : tuple of str
        Its option strings (``--no-x`` and ``--disable-x`` aliases included).
    dest : str
        The attribute argparse stores it in (the name a printed argument dump shows).
    action : str
        ``store``, ``store_true``, ``store_false``, ``boolean_optional`` or ``help``.
    nargs : int, str or None
        argparse's nargs (None: one value; 0: a switch; ``"+"``, ``"*"``, or a count).
    default : Any
        Megatron-LM's default (JSON; an enum's default as argparse prints it).
    effect : str
        One of :data:`EFFECTS`.
    note : str
        For ``refused`` and ``removed``: what it would change, or the argument to use.
    """

    options: tuple[str, ...]
    dest: str
    action: str
    nargs: Any
    default: Any
    effect: str
    note: str = ""

    @property
    def takes_value(self) -> bool:
        return self.action == "store" and self.nargs != 0


def _load() -> tuple[str, list[Entry], dict[str, Entry]]:
    data = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    entries = [Entry(tuple(e["options"]), e["dest"], e["action"], e["nargs"], e["default"],
                     e["effect"], e.get("note", "")) for e in data["arguments"]]
    older = {e["option"]: Entry((e["option"],), e["option"][2:].replace("-", "_"),
                                "store", None, None, e["effect"], e.get("note", ""))
             for e in data["older"]}
    return data["megatron_lm_commit"], entries, older


#: The Megatron-LM commit whose parser the table follows.
MEGATRON_LM_COMMIT, ENTRIES, OLDER_ARGUMENTS = _load()
#: option string -> entry (the current parser's, then the older names).
BY_OPTION: dict[str, Entry] = {**OLDER_ARGUMENTS, **{o: e for e in ENTRIES for o in e.options}}
#: dest -> entries storing it (one, except where two options share a dest).
BY_DEST: dict[str, list[Entry]] = {}
for _e in ENTRIES:
    BY_DEST.setdefault(_e.dest, []).append(_e)


def _with(effect: str) -> frozenset[str]:
    return frozenset(o for o, e in BY_OPTION.items() if e.effect == effect)


#: Arguments vtrain maps to session fields (checked against core.io.megatron_args.ARGUMENTS).
MODELLED_ARGUMENTS = _with("modelled")
#: Megatron-LM arguments vtrain does not map that may change the iteration time (listed as ignored).
TIMING_ARGUMENTS = _with("ignored")
#: Megatron-LM arguments that cannot change the iteration time (listed apart, never mapped).
NEUTRAL_ARGUMENTS = _with("neutral")
#: Arguments that change the work in a way vtrain does not model -> what they would change.
REFUSED_ARGUMENTS = {o: e.note for o, e in BY_OPTION.items() if e.effect == "refused"}
#: Names Megatron-LM's validate_args rejects as "no longer valid", with the argument to use.
REMOVED_ARGUMENTS = {"--batch-size": "--micro-batch-size", "--warmup": "--lr-warmup-fraction",
                     "--model-parallel-size": "--tensor-model-parallel-size"}
