"""A Megatron-Bridge checkpoint's ``run_config.yaml`` into a session (``vtrain import bridge
RUN_CONFIG.yaml``).

Megatron-Bridge writes its whole ConfigContainer (``megatron/bridge/training/config.py:962``)
into every checkpoint as ``run_config.yaml`` (``ConfigContainer.to_yaml``, called at
``training/checkpointing.py:1468``; read back by ``training/utils/checkpoint_utils.py:385``
``read_run_config`` with ``yaml.safe_load``). Megatron-Core's ``to_dict`` writes each section
as a mapping with the ``_target_`` of its dataclass and every field
(``megatron/training/config/container.py`` in Megatron-Core 0.19); torch dtypes, enums and
functions as ``{_target_: ..., _call_: ...}`` mappings (``yaml_utils.py``: an enum also has
``_name_``). The file is written after ``runtime_config_update`` (``training/config.py:1873-
1885``) has copied ``mixed_precision`` and ``comm_overlap`` into the model, optimizer and ddp
sections, so those sections are what ran.

The model section is a ``GPTModelProvider`` (or ``MLAModelProvider``): a Megatron-Core
TransformerConfig, whose field names are Megatron-LM's argument names. So the file is read
through ``vtrain import megatron-args``' mapping (:func:`core.io.megatron.to_session.
session_from_launch`), not a second one: each key of the model, train, ddp and optimizer
sections whose name is a Megatron-LM argument's ``dest`` (``resources/megatron_arguments.json``)
is that argument, with its policy there (modelled, ignored, neutral, refused); the keys whose
names differ, the Bridge-only keys and the other sections have a rule in
``resources/bridge_run_config.json`` (:data:`POLICY_FILE`), with the dataclasses' fields and
defaults (a key at its default is not given). What changes the cost and is not modelled is
refused by name (file, YAML path, why): exit status 2 in the CLI; so is a field of those
sections off its default that neither is a Megatron-LM argument nor has a rule (its effect is
not known). ``comm_overlap`` is checked against what ``CommOverlapConfig.setup`` writes
(:func:`_comm_overlap`), ``checkpoint`` read as the run's checkpoints (:func:`_checkpoint`).

The GPU kind and the world size are not in the file (``ConfigContainer`` has no such field:
the data-parallel size is computed from the world size at run time, ``get_data_parallel_size``
at ``training/config.py:1013``): the import needs them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.io.bridge_values import TORCH_DTYPES, at_default, field_default, yaml_scalar
from core.io.import_result import ImportResult
from core.plan.cluster import NO_CHECKPOINT_INTERVAL
from core.io.megatron.arguments import MegatronArgsError
from core.plan.fields import ConfigError, FieldError
from core.util.text import short_repr, shown_name

__all__ = ["POLICY_FILE", "RunConfigError", "BridgeImport", "load_policy", "read_run_config",
           "session_from_run_config"]

POLICY_FILE = Path(__file__).resolve().parents[2] / "resources" / "bridge_run_config.json"


class RunConfigError(MegatronArgsError):
    """A run_config.yaml that cannot be read or is refused: one line, naming the file and the
    YAML path (exit status 2 in the CLI, as a Megatron-LM launch's)."""


@dataclass
class BridgeImport(ImportResult):
    """A session read from a run_config.yaml.

    Attributes (besides :class:`~core.io.import_result.ImportResult`'s ``session``, ``used``,
    ``ignored``, ``notes``)
    ----------
    arguments : list of str
        The Megatron-LM arguments the file's keys were read as.
    neutral : list of str
        YAML paths given (not at their default) that cannot change the iteration time.
    provider : str
        The model section's ``_target_``.
    """

    arguments: list[str] = field(default_factory=list)
    neutral: list[str] = field(default_factory=list)
    provider: str = ""


@lru_cache(maxsize=1)
def load_policy() -> dict[str, Any]:
    """The rules of :data:`POLICY_FILE` (a packaging fault, not user input, if unreadable)."""
    doc = json.loads(POLICY_FILE.read_text())
    if doc.get("format") != "vtrain-bridge-run-config":
        raise ValueError(f"{POLICY_FILE}: not the run_config.yaml policy file")
    return doc


@lru_cache(maxsize=1)
def _megatron_dests() -> dict[str, dict[str, Any]]:
    """Megatron-LM's arguments by ``dest`` (resources/megatron_arguments.json)."""
    from core.io.megatron.arguments import TABLE_FILE
    doc = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
    out: dict[str, dict[str, Any]] = {}
    for a in doc["arguments"]:
        out.setdefault(a["dest"], a)  # the first option of a dest is its main name
    return out


#: Longest value of a Megatron-LM argument read from the file: Linux's PATH_MAX
#: (``--save DIR``); a choice or a number is far shorter
_MAX_WORD = 4096

def _shown(value: Any) -> str:
    """``repr(value)`` as a message shows it: at most about 60 characters of a string, six
    items of a list, four of a mapping (:func:`core.util.text.short_repr`: the whole repr is
    never built)."""
    return short_repr(value)


class _Reader:
    """One walk over the file: the arguments made, the paths they come from, what is listed."""

    def __init__(self, src: str, doc: dict[str, Any]):
        self.src, self.doc = src, doc
        self.policy = load_policy()
        self.dests = _megatron_dests()
        self.args: dict[str, list[str]] = {}   # flag -> values (a switch: [])
        self.paths: dict[str, str] = {}        # flag -> the YAML path it came from
        self.refused: list[str] = []
        self.ignored: dict[str, str] = {}
        self.neutral: list[str] = []
        self.notes: list[tuple[str, str]] = []

    def fail(self, path: str, why: str) -> RunConfigError:
        return RunConfigError(f"{self.src}: {path}: {why}")

    def emit(self, path: str, flag: str, values: list[str]) -> None:
        """Give ``flag`` ``values``; two paths that give one flag must agree, and no value is
        longer than :data:`_MAX_WORD` characters (the messages of the Megatron-LM mapping show
        the value whole)."""
        for v in values:
            if len(v) > _MAX_WORD:
                raise self.fail(path, f"{_shown(v)}: {len(v):,} characters, more than the "
                                f"{_MAX_WORD:,} of any value of a Megatron-LM argument (a path "
                                "is at most PATH_MAX, 4,096 bytes on Linux)")
        if flag in self.args and self.args[flag] != values:
            other = self.paths[flag]
            raise self.fail(path, f"{' '.join(values) or 'set'} disagrees with {other} "
                            f"({' '.join(self.args[flag]) or 'set'}): both are {flag}")
        self.args[flag] = values
        self.paths.setdefault(flag, path)

    # -- values -------------------------------------------------------------------------
    def words(self, path: str, value: Any, arg: dict[str, Any], default: Any) -> list[str] | None:
        """The words of a ``store`` argument's value (None: not given).

        Raises RunConfigError for a value of the wrong type (the field's default's type, or
        a mapping that is no dtype or enum)."""
        if value is None:
            return None
        nargs = arg.get("nargs")
        if isinstance(value, list):
            if nargs not in ("+", "*"):
                raise self.fail(path, f"a list ({_shown(value)}) where one value is expected")
            return [self.word(f"{path}[{i}]", v, None, arg.get("type"))
                    for i, v in enumerate(value)] or None
        return [self.word(path, value, default, arg.get("type"))]

    def word(self, path: str, value: Any, default: Any, kind: str | None = None) -> str:
        """One value as a Megatron-LM argument's word, its type checked against the default's,
        or, where the default is None, against the argument's ``type`` in Megatron-LM's parser
        (``kind``: ``"int"`` or ``"float"``): the YAML number, never a string
        (``ffn_hidden_size: '14_336'``, which Megatron-Core would hold as text; the launch's
        argparse reads words, the run config's dataclasses do not)."""
        if default is None and kind in ("int", "float") and not isinstance(value, dict) and (
                isinstance(value, bool) or not isinstance(value, (int, float) if kind == "float"
                                                          else int)):
            raise self.fail(path, f"{_shown(value)} must be "
                            + ("an integer" if kind == "int" else "a number"))
        if isinstance(value, dict):
            target = value.get("_target_")
            if not isinstance(target, str):
                raise self.fail(path, "a mapping where a value is expected")
            if "_name_" in value:
                return str(value["_name_"])
            if target in TORCH_DTYPES:
                return TORCH_DTYPES[target]
            raise self.fail(path, f"{target} is not a value vtrain reads here")
        if isinstance(value, bool) or isinstance(default, bool):
            if not (isinstance(value, bool) and isinstance(default, bool)):
                kind = {bool: "true or false", int: "an integer", float: "a number",
                        str: "a string"}.get(type(default), "a number or a string")
                raise self.fail(path, f"{_shown(value)} must be {kind}")
            return str(value)
        if isinstance(default, int) and not isinstance(value, int):
            raise self.fail(path, f"{_shown(value)} must be an integer")
        if isinstance(default, float) and not isinstance(value, (int, float)):
            raise self.fail(path, f"{_shown(value)} must be a number")
        if isinstance(default, str) and not isinstance(value, str):
            raise self.fail(path, f"{_shown(value)} must be a string")
        if not isinstance(value, (int, float, str)):
            raise self.fail(path, f"{_shown(value)} is not a value vtrain reads here")
        return str(value)

    def argument(self, path: str, value: Any, arg: dict[str, Any], default: Any,
                 invert: bool = False, always: bool = False) -> None:
        """Read ``value`` as Megatron-LM's ``arg`` (its action); only when not at the field's
        default unless ``always`` (a modelled argument whose default may differ)."""
        flag, action = arg["options"][0], arg["action"]
        if action in ("store_true", "store_false"):
            if not isinstance(value, bool):
                if value is None:
                    return
                raise self.fail(path, f"{_shown(value)} must be true or false")
            on = (not value if invert else value) if action == "store_true" else (
                value if invert else not value)
            if on:
                self.emit(path, flag, [])
            return
        words = self.words(path, value, arg, default)
        if words is not None:
            self.emit(path, flag, words)

    # -- sections -----------------------------------------------------------------------
    def section(self, name: str, body: Any, fields: dict[str, Any]) -> None:
        """Read the ``arguments`` section ``name``."""
        keys = self.policy["keys"]
        for key, value in body.items():
            path = f"{name}.{key}"
            if key == "_target_" and path not in keys:
                continue
            rule = keys.get(path)
            if rule is not None:
                self.rule(path, key, value, rule, fields)
                continue
            if key not in fields:
                path = f"{name}.{shown_name(key)}"  # a key of any length, shortened
                if value is not None and value is not False:  # null / false: nothing turned on
                    self.refused.append(
                        f"{path}: {_shown(value)}: not a field of Megatron-Bridge 0.6.2's {name} "
                        "section (another version's?): what it changes in the cost is not known")
                else:  # listed, as docs/bridge.md says, so a misspelt key does not pass unseen
                    shown = "null" if value is None else "false"
                    self.ignored[path] = (f"{shown}: not a field of Megatron-Bridge 0.6.2's "
                                          f"{name} section (another version's?); not read (null "
                                          "or false turns nothing on)")
                continue
            known, default = field_default(fields, key)
            arg = self.dests.get(key)
            if arg is None:
                if not at_default(fields, key, value):
                    self.refused.append(
                        f"{path}: {_shown(value)}: not modelled (neither a Megatron-LM argument nor "
                        f"classified in {POLICY_FILE.name}: what it changes in one iteration's "
                        "time and memory is not known)")
                continue
            self.not_null(path, value, fields, key, arg)
            if at_default(fields, key, value) and (arg["effect"] != "modelled"
                                                    or yaml_scalar(value) == arg.get("default")):
                continue  # not given: Bridge's default, and Megatron-LM's where it is modelled
            self.argument(path, value, arg, default if known else None)
        self.left_out(name, body, fields)

    def left_out(self, name: str, body: dict[str, Any], fields: dict[str, Any]) -> None:
        """Read each switch or choice of section ``name`` that the file leaves out, and that
        is a modelled Megatron-LM argument whose Megatron-Bridge default differs from
        Megatron-LM's, at Bridge's default, with a note: Bridge builds the dataclass with its
        default (``cross_entropy_loss_fusion`` true, ``data_parallel_sharding_strategy``
        no_shard), which "not given" to the Megatron-LM mapping is not (false,
        optim_grads_params: the session ran another plan). Sizes are not filled in (a
        missing ``num_layers`` is refused as missing, its default 0 would build no model), nor
        defaults that are null or computed, nor a field whose option another field's rule also
        gives (``cuda_graph_modules``, which ``cuda_graph_scope`` is read as)."""
        ruled = {r["argument"] for r in self.policy["keys"].values() if "argument" in r}
        for key, d in fields.items():
            arg = self.dests.get(key)
            if (key in body or arg is None or arg["effect"] != "modelled"
                    or f"{name}.{key}" in self.policy["keys"] or not isinstance(d, (bool, str))
                    or arg["options"][0] in ruled):
                continue
            if arg["action"] in ("store_true", "store_false"):
                megatron = arg["action"] == "store_false"
            else:
                megatron = arg.get("default")
            if d == megatron:
                continue
            path = f"{name}.{key}"
            self.argument(path, d, arg, d)
            self.notes.append((path, f"not given: Megatron-Bridge 0.6.2's default, "
                               f"{str(d).lower() if isinstance(d, bool) else d}, as Bridge "
                               "builds the section (Megatron-LM's is "
                               f"{str(megatron).lower() if isinstance(megatron, bool) else megatron})"))

    def not_null(self, path: str, value: Any, fields: dict[str, Any], key: str,
                 arg: dict[str, Any]) -> None:
        """Refuse ``null`` for a field read as a modelled Megatron-LM argument whose
        dataclass default is a value (``share_embeddings_and_output_weights: true``,
        ``normalization: LayerNorm``, ``tensor_model_parallel_size: 1``): ``to_yaml`` writes the
        value the run used, so null is an edit, and what Megatron-Core makes of it is not known
        (a switch tested for truth runs off, a size fails). Read as "not given", it became
        Megatron-LM's default (tied embeddings, LayerNorm, learned positions, biases), another
        model than the file's. A field whose default is null (``ffn_hidden_size``, a computed
        one) may be null.

        Raises RunConfigError naming ``path`` and the default."""
        if value is not None or arg["effect"] != "modelled":
            return
        known, default = field_default(fields, key)
        if known and default is not None:
            shown = str(default).lower() if isinstance(default, bool) else _shown(default)
            raise self.fail(path, f"null, where Megatron-Bridge 0.6.2's default is {shown} and "
                            "ConfigContainer.to_yaml writes the value the run used: what "
                            "Megatron-Core runs with null is not known (a switch tested for "
                            "truth is off, a size fails); write the value")

    def rule(self, path: str, key: str, value: Any, rule: dict[str, Any],
             fields: dict[str, Any]) -> None:
        """Apply ``rule`` (resources/bridge_run_config.json ``keys``) to ``path``."""
        if "special" in rule:
            return  # read by the importer itself (_specials, _comm_overlap)
        is_default = at_default(fields, key, value)
        for other, wanted in (rule.get("only_if") or {}).items():  # a rule of one setting
            osec, okey = other.split(".", 1)
            theirs = (self.doc.get(osec) or {}).get(okey, field_default(
                self.policy["fields"][osec], okey)[1])
            if yaml_scalar(theirs) != wanted:
                if not is_default:
                    self.neutral.append(path)  # e.g. an FSDP setting without FSDP
                return
        if "argument" in rule:
            flag = rule["argument"]
            arg = next(a for a in self.dests.values() if flag in a["options"])
            self.not_null(path, value, fields, key, arg)
            known, default = field_default(fields, key)
            if arg["effect"] != "modelled" and is_default:
                return
            self.argument(path, value, arg, default if known else None,
                          invert=rule.get("invert", False))
        elif "same_as" in rule:
            other = rule["same_as"]
            section, okey = other.split(".", 1)
            theirs = (self.doc.get(section) or {}).get(okey)
            if (value is not None and theirs is not None
                    and yaml_scalar(value) != yaml_scalar(theirs)):
                raise self.fail(path, f"{_shown(value)} disagrees with {other} ({_shown(theirs)}); "
                                f"Megatron-Bridge runs them equal (the file was edited?)")
        elif "refuse" in rule:
            when = rule["refuse"]
            # 'set': any value but the default and null; false / 0 / [] only where the
            # default is on (deallocate_pipeline_outputs true: false is what is refused)
            dflt = field_default(fields, key)[1]
            hit = (not is_default and value is not None and (
                value not in (False, 0, []) or bool(dflt))) if when == "set" \
                else yaml_scalar(value) in when
            if hit:
                self.refused.append(f"{path}: {_shown(value)}: not modelled ({rule['why']})")
        elif "megatron_default" in rule:  # listed where it is not what Megatron-LM runs
            if value is not None and yaml_scalar(value) != rule["megatron_default"]:
                self.ignored[path] = rule["why"]
        elif not is_default:
            if rule.get("effect") == "ignored":
                self.ignored[path] = rule["why"]
            else:
                self.neutral.append(path)


def _mapping(src: str, path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RunConfigError(f"{src}: {path}: a mapping (a ConfigContainer section) is expected, "
                             "got " + ("null" if value is None else "a list"
                                       if isinstance(value, list) else repr(value)[:40]))
    return value


def _activation_fusion(rd: _Reader, model: dict[str, Any], fields: dict[str, Any],
                       swiglu: bool) -> None:
    """``model.bias_activation_fusion`` (Megatron-Core ``TransformerConfig``): false is read as
    Megatron-LM's ``--no-bias-swiglu-fusion`` with a SwiGLU MLP and ``--no-bias-gelu-fusion``
    otherwise (the argument ``core_transformer_config_from_args`` reads for that MLP;
    Megatron-Core runs its unfused activation whatever the MLP). Left out, it is
    ``GPTModelProvider``'s default, false (noted: the Llama bridge sets true,
    ``models/llama/llama_bridge.py``, and ``to_yaml`` writes it).

    Raises RunConfigError for a value that is not true or false."""
    path = "model.bias_activation_fusion"
    given = "bias_activation_fusion" in model
    value = model["bias_activation_fusion"] if given else field_default(
        fields, "bias_activation_fusion")[1]
    if not isinstance(value, bool):
        raise rd.fail(path, f"{_shown(value)} must be true or false")
    if value:
        return
    rd.emit(path, "--no-bias-swiglu-fusion" if swiglu else "--no-bias-gelu-fusion", [])
    if not given:
        rd.notes.append((path, "not given: Megatron-Bridge 0.6.2's default, false, as Bridge "
                         "builds the section (Megatron-LM's is true): the unfused activation"))


def _specials(rd: _Reader, model: dict[str, Any], ddp: dict[str, Any],
              fields: dict[str, Any]) -> None:
    """The keys read together: the MLP's activation, query groups, vocabulary, gradient
    reduce dtype."""
    gated, act = model.get("gated_linear_unit", False), model.get("activation_func")
    if not isinstance(gated, bool):
        raise rd.fail("model.gated_linear_unit", f"{_shown(gated)} must be true or false")
    if "activation_func" in model and act is None:  # absent: the default, F.gelu
        raise rd.fail("model.activation_func", "null, where Megatron-Bridge 0.6.2's default is "
                      "gelu and ConfigContainer.to_yaml writes the function the run used: "
                      "Megatron-Core builds no MLP without one; write the function")
    name = yaml_scalar(act) if act is not None else "gelu"
    if gated and name == "silu":
        rd.emit("model.activation_func", "--swiglu", [])
    elif not gated and name == "squared_relu":
        rd.emit("model.activation_func", "--squared-relu", [])
    elif gated or name != "gelu":
        rd.refused.append(f"model.activation_func: {name} with gated_linear_unit "
                          f"{str(gated).lower()}: not modelled (vtrain models GeLU, SwiGLU "
                          "(silu, gated) and squared-ReLU MLPs)")
    _activation_fusion(rd, model, fields, gated and name == "silu")
    hidden, ffn = model.get("hidden_size"), model.get("ffn_hidden_size")
    if ffn is None and isinstance(hidden, int) and not isinstance(hidden, bool) and hidden > 0:
        # Megatron-Core's TransformerConfig.__post_init__ sets ffn_hidden_size = 4 *
        # hidden_size when it is None, gated or not; Megatron-LM's validate_args (which
        # Megatron-Bridge does not run) would make a SwiGLU MLP's 2/3 of that, rounded to 64
        rd.emit("model.ffn_hidden_size", "--ffn-hidden-size", [str(4 * hidden)])
        rd.notes.append(("model.ffn_hidden_size", (
            f"{'null' if 'ffn_hidden_size' in model else 'not given'}: 4 x hidden_size = "
            f"{4 * hidden:,}, as Megatron-Core's TransformerConfig.__post_init__ sets it (not "
            "Megatron-LM's 2/3 of that for SwiGLU: validate_args does not run under "
            "Megatron-Bridge)")))
    heads, groups = model.get("num_attention_heads"), model.get("num_query_groups")
    if groups is not None:
        if isinstance(groups, bool) or not isinstance(groups, int):
            raise rd.fail("model.num_query_groups", f"{_shown(groups)} must be an integer")
        if groups != heads:
            rd.emit("model.num_query_groups", "--group-query-attention", [])
            rd.emit("model.num_query_groups", "--num-query-groups", [str(groups)])
    vocab = model.get("vocab_size")
    if vocab is None:
        raise rd.fail("model.vocab_size", "missing: the embedding's rows (GPTModelProvider."
                      "vocab_size, models/gpt_provider.py:183) are needed")
    if isinstance(vocab, bool) or not isinstance(vocab, int):
        raise rd.fail("model.vocab_size", f"{_shown(vocab)} must be an integer")
    pad = model.get("should_pad_vocab", False)
    if not isinstance(pad, bool):
        raise rd.fail("model.should_pad_vocab", f"{_shown(pad)} must be true or false")
    if pad:  # calculate_padded_vocab_size: a multiple of make_vocab_size_divisible_by * t
        rd.emit("model.vocab_size", "--vocab-size", [str(vocab)])
        div = model.get("make_vocab_size_divisible_by", 128)
        rd.emit("model.make_vocab_size_divisible_by", "--make-vocab-size-divisible-by",
                [rd.word("model.make_vocab_size_divisible_by", div, 128)])
    else:  # GPTModelProvider.provide builds vocab_size rows (models/gpt_provider.py:265-270)
        rd.emit("model.vocab_size", "--padded-vocab-size", [str(vocab)])
    if "grad_reduce_in_fp32" in ddp:
        v = ddp["grad_reduce_in_fp32"]
        if not isinstance(v, bool):
            raise rd.fail("ddp.grad_reduce_in_fp32", f"{_shown(v)} must be true or false")
        rd.emit("ddp.grad_reduce_in_fp32", "--accumulate-allreduce-grads-in-fp32" if v
                else "--grad-reduce-in-bf16", [])


def _applied(rd: _Reader, name: str, body: Any) -> None:
    """A section setup() copied into model / optimizer / ddp: its keys must agree there."""
    if body is None or isinstance(body, str):  # a recipe name: applied, nothing to compare
        return
    body = _mapping(rd.src, name, body)
    for key, value in body.items():
        if key.startswith("_"):
            continue
        for section in ("model", "optimizer", "ddp"):
            there = rd.doc.get(section) or {}
            if key in there and yaml_scalar(there[key]) != yaml_scalar(value) and value is not None:
                raise rd.fail(f"{name}.{key}", f"{_shown(value)} disagrees with {section}.{key} "
                              f"({_shown(there[key])}): {load_policy()['section_why'][name]}, so "
                              "the file was edited; make them agree")


def _copied_in(rd: _Reader, model_fields: dict[str, Any]) -> dict[str, Any]:
    """``rd.doc`` with each field of an ``applied`` section (``mixed_precision``) that the
    model, optimizer or ddp section has but the file leaves out there set to the applied
    section's value, noted: ``MixedPrecisionConfig.setup`` copies its fields into those
    sections (training/mixed_precision.py:113-159), so the run had that value whatever they
    say. Before, the key was read at Megatron-LM's default: ``ddp.grad_reduce_in_fp32`` left
    out with ``mixed_precision.grad_reduce_in_fp32: false`` reduced the gradients in fp32
    (Megatron-LM forces it for bf16), which the run did in bf16. A null is not copied (the
    sections' default). The caller's document is not changed."""
    doc = dict(rd.doc)
    for name, how in rd.policy["sections"].items():
        body = doc.get(name)
        if how != "applied" or not isinstance(body, dict):
            continue
        for key, value in body.items():
            if not isinstance(key, str) or key.startswith("_") or value is None:
                continue
            for section in ("model", "optimizer", "ddp"):
                there = doc.get(section)
                fields = model_fields if section == "model" else rd.policy["fields"][section]
                if isinstance(there, dict) and key not in there and key in fields:
                    doc[section] = there = {**there, key: value}
                    if not at_default(fields, key, value):  # else as good as left out
                        rd.notes.append((f"{section}.{key}", (
                            f"not given: {name}.{key}, {_shown(yaml_scalar(value))} ("
                            f"{rd.policy['section_why'][name].split(' (')[0]})")))
    return doc


#: Megatron-Bridge 0.6.2's training/comm_overlap.py, where CommOverlapConfig decides
_CO = "training/comm_overlap.py"


def _value(rd: _Reader, section: str, key: str) -> Any:
    """``section.key`` of the file, or its dataclass default where the file leaves it out."""
    body = rd.doc.get(section) or {}
    if key in body:
        return body[key]
    return field_default(rd.policy["fields"][section], key)[1]


def _flag(rd: _Reader, path: str, value: Any) -> bool | None:
    """A switch's value (None: not given). Raises RunConfigError: not true, false or null."""
    if value is not None and not isinstance(value, bool):
        raise rd.fail(path, f"{_shown(value)} must be true or false")
    return value


def _count(rd: _Reader, path: str, value: Any, default: int = 1,
           minimum: int | None = None) -> int:
    """A size (null: ``default``). Raises RunConfigError: not an integer, or below ``minimum``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise rd.fail(path, f"{_shown(value)} must be an integer")
    if minimum is not None and value < minimum:
        raise rd.fail(path, f"{value} must be at least {minimum}")
    return value


def _comm_overlap(rd: _Reader, body: Any, num_gpus: int) -> None:
    """The pipeline send / receive switches, and the ``comm_overlap`` section checked against
    what ``CommOverlapConfig.setup`` (training/comm_overlap.py:604-643) derives from the model,
    ddp and data-parallel size and writes into those sections before the file is written.

    What Bridge turns off with a warning (``tp_comm_overlap`` with t < 2 or without sequence
    parallelism, lines 441-450) is off in the session too, with a note; what it asserts
    (the MoE all-to-all overlap's and ``delay_wgrad_compute``'s conditions, lines 478-535) is
    refused with its reason, the run could not have started; a model, ddp or optimizer value
    that is not what setup writes means the file was edited, and is refused.

    Raises RunConfigError: a value of the wrong type, or ``comm_overlap.data_parallel_size``
    that is not ``num_gpus / (t p cp)`` (the file was written by a run on other GPUs)."""
    m = lambda key: _value(rd, "model", key)  # noqa: E731
    t = _count(rd, "model.tensor_model_parallel_size", m("tensor_model_parallel_size"), minimum=1)
    pp = _count(rd, "model.pipeline_model_parallel_size", m("pipeline_model_parallel_size"),
                minimum=1)
    cp = _count(rd, "model.context_parallel_size", m("context_parallel_size"), minimum=1)
    vp = _count(rd, "model.virtual_pipeline_model_parallel_size",
                m("virtual_pipeline_model_parallel_size"))
    sp = _flag(rd, "model.sequence_parallel", m("sequence_parallel"))
    overlap_p2p = _flag(rd, "model.overlap_p2p_comm", m("overlap_p2p_comm"))
    batch_p2p = _flag(rd, "model.batch_p2p_comm", m("batch_p2p_comm"))
    if pp > 1 and vp > 1 and overlap_p2p and batch_p2p:
        rd.refused.append("model.overlap_p2p_comm: True with model.batch_p2p_comm True: not "
                          "run (Megatron-Core's interleaved schedule raises 'Can not use both "
                          "overlap_p2p_comm and batch_p2p_comm', pipeline_parallel/schedules.py"
                          ":1059 in 0.19.2)")
    if not overlap_p2p:  # Megatron-LM's default is on; Megatron-Core's (and Bridge's) off
        rd.emit("model.overlap_p2p_comm", "--no-overlap-p2p-communication", [])
    if body is None:
        return
    body = _mapping(rd.src, "comm_overlap", body)
    fields = rd.policy["fields"]["comm_overlap"]
    user: dict[str, Any] = {}
    for key, value in body.items():
        path = f"comm_overlap.{key}"
        if key == "_target_":
            continue
        if key not in fields:
            path = f"comm_overlap.{shown_name(key)}"  # a key of any length, shortened
            if value is not None and value is not False:
                rd.refused.append(f"{path}: {_shown(value)}: not a field of Megatron-Bridge 0.6.2's "
                                  "CommOverlapConfig (another version's?): what it changes in "
                                  "the cost is not known")
            else:
                rd.ignored[path] = (f"{'null' if value is None else 'false'}: not a field of "
                                    "Megatron-Bridge 0.6.2's CommOverlapConfig (another "
                                    "version's?); not read (null or false turns nothing on)")
            continue
        user[key] = value
    for key in ("tp_comm_overlap", "overlap_p2p_comm", "batch_p2p_comm", "overlap_grad_reduce",
                "overlap_param_gather", "overlap_param_gather_with_optimizer_step",
                "align_param_gather", "defer_embedding_wgrad_compute",
                "overlap_moe_expert_parallel_comm", "delay_wgrad_compute"):
        _flag(rd, f"comm_overlap.{key}", user.get(key))
    for key in ("bucket_size", "wgrad_deferral_limit"):
        if user.get(key) is not None:
            _count(rd, f"comm_overlap.{key}", user[key])
    dp = num_gpus // (t * pp * cp) if num_gpus % (t * pp * cp) == 0 else None
    if user.get("data_parallel_size") is not None:
        written = _count(rd, "comm_overlap.data_parallel_size", user["data_parallel_size"])
        if written != dp:
            raise rd.fail("comm_overlap.data_parallel_size", (
                f"{written}, but --num-gpus {num_gpus} over t*p*cp = {t}*{pp}*{cp} is "
                + (f"{dp}" if dp is not None else "not a whole number")
                + f": the file was written by a run on {written * t * pp * cp} GPUs "
                "(ConfigContainer.set_data_parallel_size, training/config.py:1029-1041)"))
    expect: dict[str, dict[str, Any]] = {"model": {}, "ddp": {}, "optimizer": {}}
    given = lambda key, otherwise: (  # noqa: E731  _override_user_cfgs: a value given wins
        user[key] if user.get(key) is not None else otherwise)
    # _get_model_comm_overlap_cfgs (lines 422-560)
    tco = user.get("tp_comm_overlap")
    if tco and (t < 2 or not sp):
        why = f"t = {t} < 2" if t < 2 else "sequence_parallel false"
        rd.notes.append(("comm_overlap.tp_comm_overlap", (
            f"true, turned off as Megatron-Bridge does with {why} (CommOverlapConfig."
            f"_get_model_comm_overlap_cfgs, {_CO}:441-450, a warning): no tensor-parallel "
            "communication overlap")))
        rd.args.pop("--tp-comm-overlap", None)
        tco = False
    expect["model"]["tp_comm_overlap"] = bool(tco)
    expect["model"]["overlap_p2p_comm"] = given("overlap_p2p_comm", pp > 1 and vp > 1)
    expect["model"]["batch_p2p_comm"] = given("batch_p2p_comm", pp > 1 and vp == 1)
    expect["model"]["defer_embedding_wgrad_compute"] = given("defer_embedding_wgrad_compute",
                                                             False)
    expect["model"]["wgrad_deferral_limit"] = given("wgrad_deferral_limit", -1)
    a2a = given("overlap_moe_expert_parallel_comm", False)
    expect["model"]["overlap_moe_expert_parallel_comm"] = a2a
    expect["model"]["delay_wgrad_compute"] = given("delay_wgrad_compute", False)
    if user.get("overlap_moe_expert_parallel_comm") is True:
        modules = m("recompute_modules") or []
        checks = [
            (_count(rd, "model.expert_model_parallel_size", m("expert_model_parallel_size")) > 1,
             "expert_model_parallel_size > 1"),
            (_count(rd, "model.num_moe_experts", m("num_moe_experts"), 0) > 1,
             "num_moe_experts > 1"),
            (m("moe_token_dispatcher_type") in ("alltoall", "flex"),
             "moe_token_dispatcher_type alltoall or flex"),
            (bool(m("bf16") or m("fp16")), "bf16 or fp16"),
            (pp == 1 or m("virtual_pipeline_model_parallel_size") is not None,
             "virtual_pipeline_model_parallel_size with pipeline_model_parallel_size > 1"),
            (m("recompute_granularity") != "full", "recompute_granularity not full"),
            (m("recompute_method") is None, "recompute_method null"),
            (m("recompute_num_layers") is None, "recompute_num_layers null"),
            (not (isinstance(modules, list) and "moe" in modules), "no moe in recompute_modules"),
            (not m("moe_shared_expert_overlap"), "moe_shared_expert_overlap false"),
            (m("mtp_num_layers") in (None, 0, 1), "mtp_num_layers at most 1")]
        failed = [need for ok, need in checks if not ok]
        if failed:
            rd.refused.append(
                "comm_overlap.overlap_moe_expert_parallel_comm: True: not run (Megatron-Bridge "
                f"asserts {', '.join(failed)}: CommOverlapConfig._get_model_comm_overlap_cfgs, "
                f"{_CO}:478-517)")
    if user.get("delay_wgrad_compute") is True and not (a2a or m("overlap_moe_expert_parallel_comm")):
        rd.refused.append("comm_overlap.delay_wgrad_compute: True: not run (Megatron-Bridge "
                          "asserts 'overlap_moe_expert_parallel_comm is required for "
                          f"delay_wgrad_compute', {_CO}:533-535)")
    # _get_optimizer_overlap_cfgs (lines 562-587): only with the distributed optimizer
    use_do = _flag(rd, "ddp.use_distributed_optimizer", _value(rd, "ddp",
                                                              "use_distributed_optimizer"))
    if use_do and dp is not None:  # (an indivisible GPU count: the plan's rules refuse it)
        ddp, opt = expect["ddp"], expect["optimizer"]
        ddp["bucket_size"] = given("bucket_size", 128 * 1024 * 1024 if dp > 1 else None)
        ddp["overlap_grad_reduce"] = given("overlap_grad_reduce", dp > 1)
        ddp["overlap_param_gather"] = opt["overlap_param_gather"] = given(
            "overlap_param_gather", dp > 1)
        ddp["align_param_gather"] = given("align_param_gather", dp > 1 and pp > 1 and vp > 1)
        opt["overlap_param_gather_with_optimizer_step"] = given(
            "overlap_param_gather_with_optimizer_step", False)
    if rd.refused:  # what Bridge refuses is named first: the run could not have started
        return
    for section, values in expect.items():
        there = rd.doc.get(section) or {}
        for key, want in values.items():
            if key not in there:
                _left_to_setup(rd, section, key, want)
            elif yaml_scalar(there[key]) != want and not (
                    key == "tp_comm_overlap" and there[key] and not want):
                raise rd.fail(f"{section}.{key}", (
                    f"{_shown(there[key])}, but CommOverlapConfig.setup ({_CO}:604-643) writes "
                    f"{_shown(want)} there from the comm_overlap section"
                    f"{' (data-parallel size ' + str(dp) + ')' if section != 'model' else ''}: "
                    "the file was edited; make them agree"))


def _left_to_setup(rd: _Reader, section: str, key: str, want: Any) -> None:
    """A key of the model, ddp or optimizer section that the file leaves out and
    ``CommOverlapConfig.setup`` writes (``want``: the data-parallel overlaps and bucket with the
    distributed optimizer, the pipeline send / receive overlap): read at what setup writes, as
    the run had it (setup overrides those sections whatever they say, training/comm_overlap.py
    :604-643), with a note where that gives an argument. Before, the key was read at
    Megatron-LM's default: ``ddp.overlap_grad_reduce`` left out was no overlap."""
    path = f"{section}.{key}"
    if path == "model.overlap_p2p_comm":  # _comm_overlap read it at the dataclass default, off
        if want and rd.args.pop("--no-overlap-p2p-communication", None) is not None:
            rd.paths.pop("--no-overlap-p2p-communication", None)
            rd.notes.append((path, f"not given: true, as CommOverlapConfig.setup writes it "
                             f"with virtual stages ({_CO}:604-643)"))
        return
    rule = rd.policy["keys"].get(path, {})
    flag = rule.get("argument")
    arg = (next((a for a in rd.dests.values() if flag in a["options"]), None) if flag
           else None if rule else rd.dests.get(key))
    if want is None or arg is None or arg["effect"] != "modelled":
        return
    before = dict(rd.args)
    rd.argument(path, want, arg, want)
    if rd.args != before:
        rd.notes.append((path, f"not given: {_shown(want)}, as CommOverlapConfig.setup writes it "
                         f"from the comm_overlap section ({_CO}:604-643)"))


def _checkpoint(rd: _Reader, body: Any) -> int | None:
    """The run's checkpoints as Megatron-Bridge 0.6.2 saves them (training/train.py:1418-1423
    every ``save_interval`` iterations when ``save`` and ``save_interval`` are set, 746-755 once
    at the end when ``save`` is set and ``save_interval`` is not 0), read as ``vtrain import
    megatron-args`` reads ``--save-interval`` and ``--async-save`` (docs/goodput.md).

    Returns the session's ``reliability.checkpoint_interval_iterations`` where the file sets
    it beyond the launch mapping: :data:`~core.plan.cluster.NO_CHECKPOINT_INTERVAL` (no
    checkpoint at all: ``save`` null, or ``save_interval`` 0), one less (one save, at the end:
    ``save`` given, ``save_interval`` null), None otherwise (``--save-interval`` emitted).
    Raises RunConfigError: a value of the wrong type."""
    if body is None:
        body = {}
    body = _mapping(rd.src, "checkpoint", body)
    save, interval = body.get("save"), body.get("save_interval")
    if save is not None and not isinstance(save, str):
        raise rd.fail("checkpoint.save", f"{_shown(save)} must be a directory (a string) or null")
    if save == "":  # read as --save '' it was no checkpoint with an interval, one at the end without
        raise rd.fail("checkpoint.save", "'' names no directory: give the directory, or null for "
                      "no checkpoint (whether Megatron-Bridge saves to '' is not known)")
    interval = _count(rd, "checkpoint.save_interval", interval, None)
    if interval is not None and interval < 0:
        raise rd.fail("checkpoint.save_interval", f"{interval} must be at least 0")
    if _flag(rd, "checkpoint.async_save", body.get("async_save")) and save is not None:
        rd.emit("checkpoint.async_save", "--async-save", [])
    if save is not None:  # Megatron-LM saves only with --save: megatron-args reads none without
        rd.emit("checkpoint.save", "--save", [save])
    if save is None:
        rd.notes.append(("checkpoint.save", "null: Megatron-Bridge saves no checkpoint (train.py"
                         ":1418-1423, 746-755); a failure restarts the run from its start"))
        return NO_CHECKPOINT_INTERVAL
    if interval == 0:
        rd.notes.append(("checkpoint.save_interval", "0: no checkpoint, periodic or at the end "
                         "(train.py:1418-1423, 746-755: the final save needs save_interval != 0)"))
        return NO_CHECKPOINT_INTERVAL
    if interval is None:
        rd.notes.append(("checkpoint.save_interval", "null: no periodic checkpoint, one at the "
                         "end of the run (train.py:1418-1423, 746-755)"))
        return NO_CHECKPOINT_INTERVAL - 1
    rd.emit("checkpoint.save_interval", "--save-interval", [str(interval)])
    return None


def _provider(rd: _Reader, model: dict[str, Any]) -> str:
    """The model's provider class (``_target_``, read as a dotted name): gpt or mla.

    Raises RunConfigError: no ``_target_``, or a provider that is not read."""
    target = model.get("_target_")
    if not isinstance(target, str) or not target:
        raise rd.fail("model._target_", "missing: the provider class (GPTModelProvider ...) "
                      "that ConfigContainer.to_yaml writes")
    cls = target.rsplit(".", 1)[-1]
    prov = rd.policy["providers"]
    if cls in prov["read"]:
        return prov["read"][cls]
    why = prov["refused"].get(cls, prov["other"])
    raise rd.fail("model._target_", f"{target}: not modelled ({why})")


@lru_cache(maxsize=1)
def _infinite_defaults() -> frozenset[str]:
    """The YAML paths of the fields whose default is ``float('inf')``
    (``optimizer.grad_norm_skip_threshold``): ``to_yaml`` writes them ``.inf``, which is read
    there; anywhere else ``.inf`` and ``.nan`` are refused (core.util.inputs.parse_yaml)."""
    return frozenset(f"{section.split('/')[0]}.{key}"
                     for section, fields in load_policy()["fields"].items()
                     for key, d in fields.items()
                     if isinstance(d, dict) and d.get("expr") == "float('inf')")


def read_run_config(path: str | Path, *, gpu: str, num_gpus: int,
                    gpus_per_node: int | None = None) -> BridgeImport:
    """Read ``path`` (a run_config.yaml) into a session (:func:`session_from_run_config`).

    Raises
    ------
    RunConfigError
        The file is unreadable, not YAML (its line and column), not one mapping, breaks a
        rule of :func:`core.util.inputs.parse_yaml` (a key given twice, ``yes``/``010``/``1e3``
        that YAML 1.1 and 1.2 read differently, a billion-laughs alias, ``.nan`` ...: the YAML
        path and line named), or is refused (:func:`session_from_run_config`).
    ConfigError
        As :func:`session_from_run_config`.
    """
    from core.util.inputs import read_yaml_file
    src = str(path)
    doc = read_yaml_file(path, RunConfigError, nonfinite_ok=_infinite_defaults())
    if not isinstance(doc, dict):
        raise RunConfigError(f"{src}: a run_config.yaml is a mapping (ConfigContainer.to_yaml "
                             "writes one), got " + ("nothing (an empty document)" if doc is None
                                                    else "a list" if isinstance(doc, list)
                                                    else "a single value"))
    return session_from_run_config(doc, src, gpu=gpu, num_gpus=num_gpus,
                                   gpus_per_node=gpus_per_node)


def session_from_run_config(doc: dict[str, Any], src: str, *, gpu: str, num_gpus: int,
                            gpus_per_node: int | None = None) -> BridgeImport:
    """The session of a ConfigContainer's YAML ``doc`` (from the file ``src``) on ``num_gpus``
    GPUs of kind ``gpu`` (module doc; ``gpus_per_node`` default: the kind's NVLink domain).

    Raises
    ------
    RunConfigError
        A section is not a mapping, a value has the wrong type, a field whose default is a
        value is null (:meth:`_Reader.not_null`), a key that changes the cost is not modelled
        (every such key named), two keys that must agree do not, the Megatron-LM mapping
        refuses what they are read as, or Megatron-Core's own config checks would
        (:func:`_megatron_core_rules`; the YAML paths named).
    ConfigError
        The session breaks a configuration rule (the YAML paths that set the field named).
    """
    from core.io.megatron.launch import Launch
    from core.io.megatron.to_session import session_from_launch
    from core.plan.rules import check

    pol = load_policy()
    rd = _Reader(src, doc)
    top = doc.get("_target_")
    if top is not None and (not isinstance(top, str) or
                            top.rsplit(".", 1)[-1] != "ConfigContainer"):
        raise rd.fail("_target_", f"{_shown(top)}: not a Megatron-Bridge ConfigContainer")
    for name in ("model", "train"):
        if name not in doc:
            raise rd.fail(name, "missing: a ConfigContainer has a model and a train section")
    model = _mapping(src, "model", doc["model"])
    kind = _provider(rd, model)
    fields = dict(pol["fields"]["model"])
    if kind == "mla":
        fields.update(pol["fields"]["model/mla"])
        rd.emit("model._target_", "--multi-latent-attention", [])
    doc = rd.doc = _copied_in(rd, fields)
    model = doc["model"]
    sections = pol["sections"]
    co = None
    for name, body in doc.items():
        if name == "_target_":
            continue
        how = sections.get(name)
        if how is None:
            rd.ignored[name] = "not a ConfigContainer section of Megatron-Bridge 0.6.2; not read"
        elif how == "arguments":
            rd.section(name, _mapping(src, name, body), fields if name == "model"
                       else pol["fields"][name])
        elif how == "applied":
            _applied(rd, name, body)
        elif how == "comm_overlap":
            co = body
        elif how == "refuse_unless_null":
            if body is not None:
                rd.refused.append(f"{name}: not modelled ({pol['section_why'][name]})")
        elif name == "dataset" and body is not None:
            for key, value in _mapping(src, name, body).items():
                rule = pol["keys"].get(f"dataset.{key}")
                if rule is not None:
                    rd.rule(f"dataset.{key}", key, value, rule, pol["fields"]["dataset"])
    _specials(rd, model, doc.get("ddp") or {}, fields)
    _comm_overlap(rd, co, num_gpus)
    interval = _checkpoint(rd, doc.get("checkpoint"))
    if rd.refused:
        raise RunConfigError(f"{src}: " + "; ".join(rd.refused))
    words = [w for flag, values in rd.args.items() for w in (flag, *values)]
    launch = Launch(words, launcher="run_config.yaml", script="", source=src)
    try:
        res = session_from_launch(launch, num_gpus=num_gpus, gpus_per_node=gpus_per_node,
                                  gpu=gpu, name=_model_name(model))
    except MegatronArgsError as exc:
        raise RunConfigError(_with_paths(str(exc), rd.paths)) from None
    _megatron_core_rules(rd, words)  # on values the mapping has checked (types, bounds)
    try:
        check(res.session)
    except ConfigError as exc:
        from core.io.megatron.arguments import field_origin
        from core.io.megatron.launch import parse_arguments
        given = parse_arguments(words, src)
        errs = []
        for e in exc.errors:
            origin = field_origin(e.field, given)
            errs.append(FieldError(e.field, e.message + (
                f" ({_with_paths(origin, rd.paths)})" if origin else ""), rule=e.rule))
        raise ConfigError(errs, source=src) from None
    ignored = {rd.paths.get(f, f): why for f, why in res.ignored.items()}
    ignored.update(rd.ignored)
    used = {rd.paths.get(f, f): f"{f}: {targets}" for f, targets in res.used.items()}
    notes = [(rd.paths.get(a, a), n) for a, n in res.notes
             if a != "--save"] + rd.notes  # save null: said above in Bridge's terms
    neutral = sorted({rd.paths.get(f, f) for f in res.neutral} | set(rd.neutral))
    provider = str(model.get("_target_"))
    session = res.session
    if interval is not None:  # beyond what the launch mapping reads (_checkpoint)
        session = dataclasses.replace(session, reliability=dataclasses.replace(
            session.reliability, checkpoint_interval_iterations=interval))
        used["checkpoint.save"] = (
            f"reliability.checkpoint_interval_iterations {interval:,}, beyond any run: "
            + ("no checkpoint" if interval == NO_CHECKPOINT_INTERVAL else
               "one save, at the end"))
    session = dataclasses.replace(session, notes=f"Megatron-Bridge run_config.yaml {src} "
                                  f"(model {provider.rsplit('.', 1)[-1]})")
    return BridgeImport(session, used, ignored, notes, arguments=words, neutral=neutral,
                        provider=provider)


def _yaml_path(rd: _Reader, option: str) -> str:
    """The YAML path a Megatron-LM ``option`` is read from, and the file's value there
    (``model.recompute_method: null``, ``model.recompute_num_layers: not given``)."""
    path = rd.paths.get(option)
    if path is None:
        pol = rd.policy
        path = next((p for p, r in pol["keys"].items() if r.get("argument") == option), None)
        if path is None:
            from core.io.megatron.rules import OPTIONS
            dest = OPTIONS[option][0] if option in OPTIONS else None
            path = next((f"{s}.{dest}" for s in ("model", "train", "ddp", "optimizer", "dist")
                         if dest in pol["fields"][s]), option)
    section, _, key = path.partition(".")
    body = rd.doc.get(section)
    if not key or not isinstance(body, dict):
        return path
    value = body.get(key, rd.doc)  # rd.doc: a marker for a key the file leaves out
    shown = ("not given" if value is rd.doc else "null" if value is None
             else str(value).lower() if isinstance(value, bool) else _shown(yaml_scalar(value)))
    return f"{path}: {shown}"


def _megatron_core_rules(rd: _Reader, words: list[str]) -> None:
    """Refuse a file whose settings break a check of Megatron-Core's own configs
    (``TransformerConfig.__post_init__``, ``OptimizerConfig.__post_init__``), which Megatron-
    Bridge builds (the model section is a TransformerConfig) and so runs: the rules of
    :data:`core.io.megatron.rules.RULES` from ``megatron/core`` (Megatron-LM's
    ``validate_args`` is not run by Bridge). ``recompute_granularity: full`` with
    ``recompute_method`` or ``recompute_num_layers`` null raised there, and was read as full
    recomputation of every layer, a run that never starts.

    Raises RunConfigError: each broken rule, Megatron-Core's message, where it is checked and
    the YAML paths (with the file's values) that decide it."""
    from core.io.megatron.rules import broken_rules, options_read
    broken = [r for r in broken_rules(words)
              if r.on_import and r.source.startswith("megatron/core/")]
    if broken:
        raise RunConfigError(f"{rd.src}: " + "; ".join(
            f"{', '.join(_yaml_path(rd, o) for o in options_read(r, words))}: not run "
            f"(Megatron-Core raises \"{r.message}\", {r.source}; rule {r.name})"
            for r in broken))


def _model_name(model: dict[str, Any]) -> str:
    """The session's model name: the provider's Hugging Face id where it keeps one."""
    hf = model.get("hf_model_id")
    return hf.rsplit("/", 1)[-1] if isinstance(hf, str) and hf else "run_config"


def _with_paths(message: str, paths: dict[str, str]) -> str:
    """``message`` with each Megatron-LM option it names followed by the YAML path it was read
    from (``--num-layers (model.num_layers)``); the options are matched as whole words of a
    message the mapping wrote."""
    out = []
    for word in message.split(" "):
        bare = word.strip(":,;()'\"").split("=", 1)[0]
        out.append(word.replace(bare, f"{bare} [{paths[bare]}]", 1) if bare in paths else word)
    return " ".join(out)
