"""What a measurement file's header meant by a column vtrain does not know
(:mod:`core.accuracy.measured`'s session-column CSV): a column's name with a unit or remark in
brackets after it, a measurement column named in another unit, a misspelled or capitalised
name. Each hint says what to write, and for a measurement column in another unit how to
convert its values, since a renamed column would otherwise be read in the wrong unit."""

from __future__ import annotations

from typing import Collection

from core.util.text import did_you_mean

__all__ = ["unknown_column_hint", "unit_hint", "GENERAL_LAYOUT_COLUMNS", "GENERAL_LAYOUT_HINT",
           "GENERAL_LAYOUT_MAPPING"]


def unknown_column_hint(column: str, names: Collection[str]) -> str:
    """The hint (``"; ..."``, appended to the refusal) for header cell ``column`` that is none
    of ``names`` (the session-field columns and the run columns): its bracketed remark
    (:func:`_remark_hint`), else its unit (:func:`unit_hint`), else the closest name
    (:func:`_close_name`); "" when none applies."""
    return _remark_hint(column, names) or unit_hint(column) or _close_name(column, names)


#: The measurement columns, each with its unit, what other units convert by and the unit of
#: the closest name a column in another unit gets without this hint (GB for GiB is 7 % off,
#: which no check can see once the column is renamed).
_UNIT_COLUMNS = {"measured_iteration_time_s": ("seconds", "ms / 1000, us / 1e6, min x 60"),
                 "measured_memory_gib": ("GiB (2^30 bytes)", "GB x 0.9313, MiB / 1024, "
                                         "MB x 0.0009313")}


#: What a header may add after a column's name, in brackets: the unit of a measurement column
#: (what its name already says), each unit's spellings.
_NAMED_UNITS = {"measured_iteration_time_s": ("s", "sec", "secs", "second", "seconds"),
                "measured_memory_gib": ("gib",)}


def _remark_hint(column: str, names: Collection[str]) -> str:
    """For a header cell that is a column's name followed by a bracketed remark
    (``measured_iteration_time_s (s)``, ``tensor_parallel [t]``): that the name must stand
    alone and, for a measurement column, whether the bracketed unit is the column's (rename
    only) or another (convert the values too, :func:`unit_hint`); "" for another cell."""
    text = column.strip()
    if not text or text[-1] not in ")]":
        return ""
    opening = "(" if text[-1] == ")" else "["
    if opening not in text:
        return ""
    name, remark = text[:text.rindex(opening)].strip(), text[text.rindex(opening) + 1:-1].strip()
    if name not in names:
        return ""
    if name in _NAMED_UNITS and remark.lower() not in _NAMED_UNITS[name]:
        unit, how = _UNIT_COLUMNS[name]
        return (f"; a unit after the name: name the column {name}, read in {unit}, and convert "
                f"the values if they are {remark!r} ({how})")
    return (f"; the header names a column by its name alone: name it {name}"
            + (f" (the name says the unit: {_UNIT_COLUMNS[name][0]})" if name in _UNIT_COLUMNS
               else ""))


def _close_name(column: str, names: Collection[str]) -> str:
    """``"; did you mean X?"`` for a misspelled column (a header in capitals: its lower case),
    with X's unit where X is a measurement column (renamed alone, another unit's values would
    be read as X's)."""
    lower = column.strip().lower()
    hint = (f"; did you mean {lower}? (column names are lower case)" if lower in names
            else did_you_mean(column, names))
    close = hint.removeprefix("; did you mean ").split("?")[0]
    if close in _UNIT_COLUMNS:
        unit, how = _UNIT_COLUMNS[close]
        hint += f" (read in {unit}: convert the values of another unit, {how})"
    return hint


def unit_hint(column: str) -> str:
    """For an unknown column named as a measurement column in another unit
    (``measured_memory_gb``, ``measured_iteration_time_ms``): the column and unit vtrain reads
    and how to convert the values, not only the name; "" for another column."""
    for name, (unit, how) in _UNIT_COLUMNS.items():
        stem = name.rsplit("_", 1)[0] + "_"
        if column.lower().startswith(stem) and column.lower() != name:
            return (f"; the measurement is read in {unit} from a column {name}: convert the "
                    f"values ({how}), not only the column's name")
    return ""


#: Columns only the retired published-runs layout has (../shared/data/public-modern/README.md:
#: named cells plus free-text ``notes`` that decide the model and plan), which vtrain does not read.
GENERAL_LAYOUT_COLUMNS = ("source_id", "num_gpus", "framework", "inter_node_bandwidth_gbps",
                          "distributed_optimizer", "fsdp", "tokens_per_s_per_gpu",
                          "model_tflops_per_gpu", "mfu_percent", "expert_parallel",
                          "virtual_pipeline_stages")
GENERAL_LAYOUT_HINT = (
    ": this is the published-runs layout, whose free-text notes decide the model and plan, "
    "which vtrain does not read; convert it to JSON lines of sessions under named assumptions "
    "with `python scripts/curate_runs.py FILE > runs.jsonl` (a source checkout), review them, "
    "and validate that file (docs/accuracy.md, 'Measurement file layouts')")
#: Columns of the published-runs and measured-memory layouts that a session field (or a run
#: column) holds under another name or encoding: what to write instead (docs/accuracy.md,
#: "Measurement file layouts"). A file whose unknown columns are all of these is told the
#: mapping only; one with another column of those layouts (a framework, a published
#: throughput) is told the conversion too (:data:`GENERAL_LAYOUT_HINT`).
GENERAL_LAYOUT_MAPPING = {
    "distributed_optimizer": "Megatron's distributed optimizer is ZeRO stage 1: give a column "
                             "zero_stage, 1 where distributed_optimizer is y and 0 where n",
    "fsdp": "fully sharded data parallelism (Megatron-FSDP, PyTorch FSDP full shard) is ZeRO "
            "stage 3: give a column zero_stage, 3 where fsdp is y and 0 where n",
    "inter_node_bandwidth_gbps": "name it inter_node_bandwidth_gbits_per_s (Gb/s per node)",
    "num_gpus": "leave it out: the GPU count is tensor_parallel x pipeline_parallel x "
                "context_parallel x data_parallel",
    "source_id": "name it source",
    "measured_peak_memory_gib": "name it measured_memory_gib (GiB)",
}
