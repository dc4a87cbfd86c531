"""Megatron import against the current Megatron-LM: the argument table follows the parser's
arguments.json (../shared/data/megatron-lm), and launch scripts in today's styles (bash arrays
with +=, sbatch + srun, Megatron-DeepSpeed, printed argument dumps, positional parameters)."""

from __future__ import annotations

import json

import pytest

from core.config import CROSS_ENTROPY_FUSION_IMPLS
from core.megatron_args import (ARGUMENTS, ATTENTION_BACKENDS, KNOWN_ARGUMENTS, MegatronArgsError,
                                import_file, read_launch, session_from_launch)
from core.megatron_names import (BY_OPTION, EFFECTS, ENTRIES, MEGATRON_LM_COMMIT,
                                 MODELLED_ARGUMENTS, OLDER_ARGUMENTS, REMOVED_ARGUMENTS)
from tests.conftest import ROOT

PARSER = ROOT.parent / "shared" / "data" / "megatron-lm" / "arguments.json"
ACTIONS = {"_StoreAction": "store", "_StoreTrueAction": "store_true",
           "_StoreFalseAction": "store_false", "BooleanOptionalAction": "boolean_optional",
           "_HelpAction": "help"}


@pytest.fixture(scope="module")
def parser() -> dict:
    if not PARSER.is_file():
        pytest.skip(f"shared data not present: {PARSER}")
    return json.loads(PARSER.read_text(encoding="utf-8"))


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the table

def test_every_current_option_is_classified_with_the_parsers_dest_action_and_default(parser):
    assert MEGATRON_LM_COMMIT == parser["commit"]
    ours = {e.options: e for e in ENTRIES}
    assert len(parser["arguments"]) == len(ENTRIES) == 839
    assert sum(len(a["options"]) for a in parser["arguments"]) == 877
    for a in parser["arguments"]:
        e = ours[tuple(a["options"])]
        assert (e.dest, e.action, e.nargs, e.default) == (
            a["dest"], ACTIONS[a["action"]], a["nargs"], a["default"]), a["options"]
        assert e.effect in EFFECTS
        if e.effect in ("refused", "removed"):
            assert e.note, a["options"]
        for option in a["options"]:
            assert option in KNOWN_ARGUMENTS or option in REMOVED_ARGUMENTS, option


def test_the_modelled_arguments_are_the_mapping_table_and_older_names_stay_aliases(parser):
    current = {o for a in parser["arguments"] for o in a["options"]}
    assert MODELLED_ARGUMENTS == set(ARGUMENTS)  # the data and the code's mapping agree
    assert set(REMOVED_ARGUMENTS) <= current and all(
        BY_OPTION[o].effect == "removed" for o in REMOVED_ARGUMENTS)
    assert not set(OLDER_ARGUMENTS) & current  # aliases only for names the parser dropped
    for old in ("--checkpoint-num-layers", "--DDP-impl", "--layernorm-epsilon", "--use-legacy-models"):
        assert old in OLDER_ARGUMENTS and old in KNOWN_ARGUMENTS


def test_choices_vtrain_validates_agree_with_the_parser(parser):
    by = {o: a for a in parser["arguments"] for o in a["options"]}
    assert set(by["--cross-entropy-fusion-impl"]["choices"]) == set(CROSS_ENTROPY_FUSION_IMPLS)
    backends = {c.split(".")[1].split(":")[0] for c in by["--attention-backend"]["choices"]}
    assert backends == set(ATTENTION_BACKENDS)
    assert set(by["--recompute-granularity"]["choices"]) == {"full", "selective"}
    assert set(by["--recompute-method"]["choices"]) == {"block", "uniform"}
    assert set(by["--fp8-format"]["choices"]) == {"e4m3", "hybrid"}
    assert set(by["--normalization"]["choices"]) >= {"LayerNorm", "RMSNorm"}
    for flag in ("--num-layers", "--hidden-size", "--micro-batch-size", "--tensor-model-parallel-size",
                 "--pipeline-model-parallel-size", "--context-parallel-size", "--num-experts"):
        assert by[flag]["type"] == "int", flag
    for flag, arg in ARGUMENTS.items():  # a switch in the table is a switch in the parser
        if flag in by:
            assert (by[flag]["nargs"] != 0) == arg.value, flag
