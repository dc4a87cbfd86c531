"""Measured runs: a session plus what was measured, and the readers of measurement files.

A :class:`MeasuredRun` is a complete session (:class:`core.plan.session.Session`) with its
measured iteration time (and, optionally, its measured peak memory per GPU), where the
measurement comes from (``source``) and the named assumptions that filled in what the source
leaves unstated. Three file formats are read (:func:`read_measurements` tells them apart; the
layouts are in docs/accuracy.md, "Measurement file layouts"):

* the vTrain authors' CSV (single-node and multi-node layouts: Megatron-DeepSpeed on
  A100-SXM4-80GB, fp16, full recomputation, 1F1B, GPT with vocabulary 50257, 8 GPUs and
  800 Gb/s per node for the multi-node runs, as the authors state; without gradient
  accumulation fusion: DeepSpeed's engine owns the gradients, and the fused GEMMs write into
  the ``main_grad`` buffer that only Megatron's own data-parallel wrapper creates);
* a CSV whose columns are session field names (``tensor_parallel``, ``num_layers``,
  ``gpu`` ...; the columns of :data:`REQUIRED_COLUMNS` must be there, an absent column or an
  empty cell of a field a session file requires takes Megatron-LM's default
  (:data:`CSV_DEFAULTS`, recorded in :attr:`MeasuredRun.defaults`), any other the session
  default), plus
  ``measured_iteration_time_s``, ``measured_memory_gib`` / ``memory_scale``, ``source``,
  ``assumptions``, ``notes`` and ``recipe`` (a Megatron-Bridge performance recipe of
  :mod:`core.accuracy.bridge_recipes`, the only column that sets more than its own field);
* JSON lines of ``{session, measured_iteration_time_s, measured_memory_gib?, source,
  assumptions}`` (``../shared/data/public-modern/published_runs.sessions.jsonl``).

Nothing is inferred from free text, and a reader never runs the simulator or the memory model:
a row the memory model says cannot fit is predicted and reported by :mod:`core.accuracy.validate`.
A value of the wrong type, out of bounds or not among a field's choices is bad input
(:class:`MeasurementFileError`, naming the file, row or line, field and rule); a plan that
breaks a configuration rule between fields (t*p*d against the GPUs ...) or that the file
marks as not predictable (``skip_reason``) is kept, skipped with its reason.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from core.accuracy.bridge_recipes import BridgeRecipe, apply_recipe, load_bridge_recipes
from core.accuracy.column_hints import (GENERAL_LAYOUT_COLUMNS, GENERAL_LAYOUT_HINT,
                                        GENERAL_LAYOUT_MAPPING, unit_hint, unknown_column_hint)
from core.io.megatron.arguments import MEGATRON_MODEL_DEFAULTS, MEGATRON_PLAN_DEFAULTS
from core.io.megatron.model_arguments import (ATTENTION_BACKENDS, DEFAULT_ATTENTION_BACKEND,
                                              swiglu_ffn_hidden_size)
from core.io.session import SessionFileError, session_from_document
from core.model.counts import num_parameters
from core.plan.presets import GPT_FAMILY
from core.plan.cluster import (GPU_KINDS, GPU_NVLINK_DOMAIN, ClusterConfig, CostConfig, gpu_kind,
                               node_network_gbits_per_s)
from core.plan.fields import (NOT_MODELLED, UNEVEN_PIPELINE_SPLIT, ConfigError, field_kind,
                              rename_field)
from core.plan.model_config import ModelConfig, model_from_fields
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.rules import inactive_fields, validate
from core.sim.report import MEMORY_SCALES
from core.util.inputs import DecimalUnderflowError, decimal_number, parse_json, read_bytes
from core.util.text import short_repr

__all__ = ["MeasuredRun", "MeasurementFileError", "read_measurements", "skip_cause", "skip_counts",
           "session_columns", "SESSION_SECTIONS", "RUN_COLUMNS", "FIELD_CAUSES", "MEASURED_TIME_RANGE_S",
           "MEASURED_MEMORY_RANGE_GIB",
           "MAX_ROWS", "REQUIRED_COLUMNS", "CSV_DEFAULTS", "NOT_TIMED_FIELDS", "cell_text",
           "default_origin", "row_number_where", "row_where"]

#: Seconds one measured (or derived) training iteration may take: from 0.1 ms to a day.
MEASURED_TIME_RANGE_S = (1e-4, 86_400.0)
#: GiB one GPU's measured peak memory may be: from 1 MiB to 1 PiB, the bounds of a GPU's memory
#: in a profile store (``core.store.profile_store.STORE_BOUNDS["memory_bytes"]``, 2^20 to 2^50
#: bytes). Below, a value of another unit (TiB, or bytes read as a fraction) or a typo gives a
#: percentage error of billions, or an infinite one that no report can write; above, no GPU.
MEASURED_MEMORY_RANGE_GIB = (2.0**-10, 2.0**20)
#: Most data rows (lines) a measurement file may have. The largest shipped file has 864 rows;
#: each takes milliseconds to read and to predict (about a minute for 10,000), so a file far
#: beyond this is a mistake (a log, a concatenation) and is refused before any row is read.
MAX_ROWS = 10_000
#: Session sections whose fields are columns of the session-column CSV.
SESSION_SECTIONS = {"model": ModelConfig, "plan": ParallelPlan, "cluster": ClusterConfig,
                    "cost": CostConfig}
#: Columns a session-column CSV must have, with a value in every row: what a measured run has no
#: default for. The model's shape and vocabulary and the micro-batch size, which Megatron-LM
#: needs too (every required model field but those of MEGATRON_MODEL_DEFAULTS, the name and
#: the attention kernel); d, which Megatron-LM takes from the world size that the file has no
#: column for; the precision (Megatron-LM's default, fp32 without --bf16 or --fp16, is not what
#: a run that leaves the column out is likely to have used, and it changes the time several
#: times over); and the GPU the run ran on.
REQUIRED_COLUMNS = (*(f.name for f in dataclasses.fields(ModelConfig) if f.metadata.get("required")
                      and f.name not in (*MEGATRON_MODEL_DEFAULTS, "name", "attention_kernel")),
                    "micro_batch_size", "data_parallel", "precision", "gpu")
#: What an absent column or an empty cell of the session-column CSV means for the other fields
#: a session file requires (a session file refuses their omission): Megatron-LM's default, as
#: ``vtrain import megatron-args`` takes it (MEGATRON_MODEL_DEFAULTS; the attention kernel of
#: Megatron-Core's default backend, auto: flash; MEGATRON_PLAN_DEFAULTS; the global batch is
#: Megatron-LM's micro-batch size times d, set per row). Each default a row takes is recorded in
#: MeasuredRun.defaults and stated by ``vtrain validate``. The model's name is a label (the
#: size in billions of parameters without one); other fields take the session defaults.
CSV_DEFAULTS: dict[str, dict[str, Any]] = {
    "model": {**{k: v for k, v in MEGATRON_MODEL_DEFAULTS.items()
                 if k not in ("make_vocab_size_divisible_by",)},
              "attention_kernel": ATTENTION_BACKENDS[DEFAULT_ATTENTION_BACKEND]},
    "plan": {**{k: v for k, v in MEGATRON_PLAN_DEFAULTS.items() if k not in REQUIRED_COLUMNS},
             "global_batch_size": None, "schedule": "1f1b"}}
#: Columns of the session-column CSV that are not session fields: the measurement and its record.
RUN_COLUMNS = ("measured_iteration_time_s", "measured_memory_gib", "memory_scale", "source",
               "assumptions", "notes", "recipe")
#: Keys of a JSON-lines record besides ``session``: the measurement, its record and labels
#: (``row``: the record's own row number; ``source_id``: another name of ``source``;
#: ``model_name``: a label; ``skip_reason``: why the run cannot be predicted, reviewed).
_JSONL_KEYS = ("session", "measured_iteration_time_s", "measured_memory_gib", "memory_scale",
               "source", "source_id", "assumptions", "row", "model_name", "skip_reason")
_AUTHORS_SINGLE = ["# GPUs", "global batch", "micro batch", "hidden size", "attention heads",
                   "# layers", "sequence length", "tensor parallelism", "data parallelism",
                   "pipeline parallelism", "iteration time (ms)"]
_AUTHORS_MULTI = ["Parameters (billion)"] + _AUTHORS_SINGLE
#: Session field -> column of the authors' layouts, so skip reasons use the file's names.
_AUTHORS_COLUMNS = {
    "model.num_layers": "# layers", "model.hidden_size": "hidden size",
    "model.num_attention_heads": "attention heads", "model.seq_length": "sequence length",
    "plan.tensor_parallel": "tensor parallelism", "plan.data_parallel": "data parallelism",
    "plan.pipeline_parallel": "pipeline parallelism", "plan.micro_batch_size": "micro batch",
    "plan.global_batch_size": "global batch",
}
#: Session field -> short cause name of a skipped run (counts per cause), for the refusals
#: of core.plan.rules' validation ("... is not modelled yet").
FIELD_CAUSES = {
    "model.num_experts": "mixture of experts", "model.moe_top_k": "mixture of experts",
    "model.moe_ffn_hidden_size": "mixture of experts",
    "model.num_shared_experts": "mixture of experts (shared experts)",
    "model.moe_layer_frequency": "mixture of experts (layer frequency)",
    "model.moe_first_dense_layers": "mixture of experts (first dense layers)",
    "model.multi_latent_attention": "multi-head latent attention",
    "model.q_lora_rank": "multi-head latent attention", "model.kv_lora_rank":
    "multi-head latent attention", "model.mtp_num_layers": "multi-token prediction",
    "model.kv_channels": "kv_channels (head size other than h/a)",
    "model.qk_layernorm": "QK-norm", "model.activation": "model family (activation)",
    "model.normalization": "model family (normalization)",
    "plan.context_parallel": "context parallelism", "plan.expert_parallel": "expert parallelism",
    "plan.expert_tensor_parallel": "expert parallelism",
    "plan.moe_imbalance_factor": "mixture of experts (routing imbalance)",
    "plan.precision": "FP8 precision", "plan.fp8_recipe": "FP8 recipe",
    "plan.first_stage_layers": "uneven pipeline split", "plan.last_stage_layers": "uneven pipeline split",
    "plan.pipeline_model_parallel_layout": "custom pipeline layout",
    "plan.data_parallel_shard_size": "hybrid sharded data parallelism (HSDP)",
    "plan.fp8_param_gather": "FP8 parameter all-gather",
    "plan.recompute": "per-op selective checkpointing (not modelled in this plan)",
    "cluster.gpu": "GPU kind without a shipped profile",
}
#: Rows between two calls of a progress callback.
PROGRESS_EVERY = 50


class MeasurementFileError(ValueError):
    """A measurement file cannot be read; the message names the file, row (or line), field and
    the rule broken."""


@dataclass
class MeasuredRun:
    """One measured run: a session and what was measured of it.

    Attributes
    ----------
    session : Session
        The plan as it ran (None only for a record whose session could not be built).
    measured_iteration_time_s : float
        Measured iteration time, seconds (NaN when the run measured only memory).
    measured_memory_gib : float
        Measured peak memory per GPU, GiB (NaN when none).
    memory_scale : str
        What that peak counts: one of :data:`core.sim.report.MEMORY_SCALES` ("" without one).
    source : str
        Where the measurement comes from (a source id or the file's name).
    assumptions : list of str
        The named policies (``"name: what it assumes"``) that filled in what the source leaves
        unstated, as the file records them.
    row : int
        1-based data row (CSV) or line (JSON lines) in the file, or the record's own ``row``.
    line : int
        The file's line the record starts on, as an editor numbers it (CSV: the header and
        blank lines counted; JSON lines: the line); 0 when not read from a file. Messages name
        both (:func:`row_where`, :attr:`where`).
    skip_reason : str
        Why the run is not predicted ("" when it is).
    skip_causes : list of str
        Short causes of the skip, for counts per cause; empty when not skipped.
    defaults : dict of str to object
        Session-column CSV: field -> the default it took because its column is absent or its
        cell empty (:data:`CSV_DEFAULTS`, else the session default; only fields that bear on
        the row's simulated time: :data:`NOT_TIMED_FIELDS` and the row's inactive fields left
        out; ``inter_node_bandwidth_gbits_per_s`` as the GPU's reference node gives it); empty
        for the other layouts, which state every field.
    gpu_name : str
        The ``gpu`` a session-column CSV gave when it is another tool's name of a shipped kind
        (``"H100"``, read as ``"H100-SXM5-80GB"`` by :func:`core.plan.cluster.gpu_kind`, as
        ``--set cluster.gpu=`` reads it); "" when the file gave the kind itself.
    time_column : str
        The file's column (or key) of the measured time, for messages about it.
    group : dict
        Labels for the error tables: ``model``, ``t``, ``p``, ``source`` and (but for the
        authors' layouts) ``gpu``, ``kind`` (dense / MoE) and ``precision``.
    """

    session: Session | None
    measured_iteration_time_s: float
    measured_memory_gib: float = math.nan
    memory_scale: str = ""
    source: str = ""
    assumptions: list[str] = field(default_factory=list)
    row: int = 0
    skip_reason: str = ""
    skip_causes: list[str] = field(default_factory=list)
    group: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    gpu_name: str = ""
    time_column: str = "measured_iteration_time_s"
    line: int = 0

    @property
    def where(self) -> str:
        """The record as messages name it: ``"row 3 (line 5)"`` (:func:`row_where`)."""
        return row_where(self.row, self.line)

    @property
    def has_time(self) -> bool:
        """Whether the run has a measured iteration time (a memory-only run has none)."""
        return not math.isnan(self.measured_iteration_time_s)


def read_measurements(path: str | Path,
                      progress: Callable[[int, int], None] | None = None,
                      profile_path: str | None = None) -> list[MeasuredRun]:
    """Read a measurement file: JSON lines (a ``.jsonl`` name, or a first character ``{``), the
    vTrain authors' CSV (its exact header) or the session-column CSV (any other header).

    ``progress(done, total)``, if given, is called as rows are read (every 50 and at the end).
    ``profile_path`` (an absolute path: the command line's ``--profile``) becomes every row's
    ``cluster.profile_path`` before the configuration rules are checked, as
    :func:`core.io.session.load_any` does for ``vtrain simulate --profile``: the rows are
    predicted with that store, and a row of a GPU kind without a shipped store is not skipped
    for it. Whether the store's GPU kind is the rows' is the caller's to tell (``vtrain
    validate`` warns per kind).

    Raises
    ------
    MeasurementFileError
        Unreadable, non-regular or too large file (:mod:`core.util.inputs`), not CSV or JSON
        lines (a CSV of another separator named), more than :data:`MAX_ROWS` rows, an unknown
        column or key, or a value of the wrong type, out of bounds or not among its field's
        choices (the message names the file, row or line, field and rule). A plan that breaks
        a rule between fields is kept, skipped with that reason.
    """
    path = Path(path)
    text = _text(path)
    if text.lstrip().startswith("[") and path.suffix.lower() != ".jsonl":  # (a .jsonl: by line)
        raise MeasurementFileError(
            f"{path}: a JSON array, not measured runs: vtrain validate and calibrate read JSON "
            "lines, one {\"session\": ..., \"measured_iteration_time_s\": ...} object per line "
            "(no enclosing [ ]), or a CSV (docs/accuracy.md, 'Measurement file layouts')")
    if path.suffix.lower() == ".jsonl" or text.lstrip().startswith("{"):
        runs = _read_jsonl(path, text, progress)
    else:
        lines, rows = _csv_rows(path, text)
        _check_header_first(path, rows, lines)
        rows = _unnamed_columns_dropped(path, rows, lines)
        header = [h.strip().lstrip("\ufeff").strip() for h in rows[0]]
        data = list(zip(lines[1:], rows[1:]))
        if header in (_AUTHORS_SINGLE, _AUTHORS_MULTI):
            runs = _each(data, lambda i, lr: _authors_row(path, i, header, lr[1], lr[0]),
                         progress)
        else:
            _check_separator(path, header)
            columns = _session_columns(path, header)
            runs = _each(data, lambda i, lr: _session_row(path, i, columns, lr[1], lr[0]),
                         progress)
    return [_finish(run, names, profile_path) for run, names in runs]


#: Separators a spreadsheet may write a "CSV" with (a locale whose decimal mark is the comma
#: writes ``;``), named when a header is one cell holding one of them.
_OTHER_SEPARATORS = (";", "\t", "|")


def _check_separator(path: Path, header: list[str]) -> None:
    """Refuse a header that is one cell holding another separator (:data:`_OTHER_SEPARATORS`):
    the file is not comma-separated, which would otherwise read as one unknown column."""
    if len(header) == 1:
        found = [sep for sep in _OTHER_SEPARATORS if sep in header[0]]
        if found:
            raise MeasurementFileError(f"{path}: the file is not comma-separated ({found[0]!r} "
                                       "found in the header): a measurement CSV separates its "
                                       "columns with ','")


def _text(path: Path) -> str:
    """The text of a measurement file: UTF-8 (with or without a BOM), UTF-16 with its BOM
    (spreadsheets' "Unicode text"), else Windows-1252 (what Excel on Windows writes)."""
    data = read_bytes(path, MeasurementFileError, "csv")
    encodings = ("utf-16",) if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ("utf-8-sig", "cp1252")
    for enc in encodings:
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            continue
    raise MeasurementFileError(f"{path}: is not UTF-8, UTF-16 or Windows-1252 text")


def row_where(row: int, line: int = 0) -> str:
    """How a message names a record: ``"row 3 (line 5)"``, its data row (the number
    :attr:`MeasuredRun.row` has: the reports' and ``--out``'s) and the file's line where it
    starts as an editor numbers it (the header and blank lines counted); ``"row 3"`` where the
    line is the row (JSON lines) or unknown (0)."""
    return f"row {row_number_where(row, line)}"


def row_number_where(row: int, line: int = 0) -> str:
    """:func:`row_where` without the word "row": ``"3 (line 5)"``, for lists that name it
    once (``"rows 3 (line 5), 4 (line 6)"``)."""
    return f"{row}" + (f" (line {line})" if line and line != row else "")


def _check_header_first(path: Path, rows: list[list[str]], lines: list[int]) -> None:
    """Refuse a data row that holds column names (two or more cells that are session fields,
    run columns or the authors' headers): row 1, when the header is not the first line (below
    a title or a spreadsheet's ``sep=,`` line, which would be read as the header); a later
    row, when files were concatenated with their headers. ``lines``: each row's line."""
    known = {*_field_columns(), *RUN_COLUMNS, *_AUTHORS_MULTI}
    for i, r in enumerate(rows[1:], 1):
        names = [c.strip() for c in r if c.strip() in known]
        if len(names) < 2:
            continue
        listed = f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
        if i == 1:
            raise MeasurementFileError(
                f"{path}: {row_where(1, lines[1])} holds column names ({listed}): the header "
                "must be the file's first line; delete the line(s) above it (a title, a "
                "spreadsheet's 'sep=,' line)")
        raise MeasurementFileError(f"{path}: {row_where(i, lines[i])} holds column names "
                                   f"({listed}): a header among the data rows (files "
                                   "concatenated?); delete it")


def _unnamed_columns_dropped(path: Path, rows: list[list[str]], lines: list[int]
                             ) -> list[list[str]]:
    """``rows`` (header first) without the columns that have neither a name in the header nor a
    value in any row: the trailing commas a spreadsheet writes after a column once used. An
    unnamed column that holds a value is refused, by its position and the first row holding
    one (what the value is cannot be told; ``lines``: each row's line)."""
    unnamed = [j for j, h in enumerate(rows[0]) if not h.strip().lstrip("\ufeff").strip()]
    for j in unnamed:
        row = next((i for i, r in enumerate(rows[1:], 1) if j < len(r) and r[j].strip()), None)
        if row is not None:
            raise MeasurementFileError(f"{path}: {row_where(row, lines[row])}, column {j + 1}: "
                                       f"{rows[row][j].strip()[:40]!r} in a column without a name "
                                       "in the header; name it (a session field or one of "
                                       f"{', '.join(RUN_COLUMNS)}) or delete it")
    if not unnamed:
        return rows
    drop = set(unnamed)
    return [[c for j, c in enumerate(r) if j not in drop] for r in rows]


def _csv_rows(path: Path, text: str) -> tuple[list[int], list[list[str]]]:
    """The non-blank rows of a CSV text, header first (at least one data row), and the line
    each starts on, as an editor numbers them (blank lines counted; a quoted cell over
    several lines: the row's first)."""
    rows, lines = [], []
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    try:
        for r in reader:
            if r and any(c.strip() for c in r):
                rows.append(r)
                lines.append(start)
                if len(rows) > MAX_ROWS + 1:
                    raise MeasurementFileError(f"{path}: more than {MAX_ROWS:,} data rows "
                                               "(the most a measurement file may have)")
            start = reader.line_num + 1
    except csv.Error as exc:
        raise MeasurementFileError(f"{path}: line {start}: not a readable CSV file ({exc})"
                                   ) from None
    if not rows:
        raise MeasurementFileError(f"{path}: empty file")
    if len(rows) == 1:
        raise MeasurementFileError(f"{path}: a header and no data rows")
    return lines, rows


def _each(rows: list, read: Callable[[int, Any], Any],
          progress: Callable[[int, int], None] | None) -> list:
    """``read(row number, row)`` of every data row (numbered from 1), telling ``progress``."""
    out = []
    for i, r in enumerate(rows):
        out.append(read(i + 1, r))
        if progress and ((i + 1) % PROGRESS_EVERY == 0 or i + 1 == len(rows)):
            progress(i + 1, len(rows))
    return out


def _finish(run: MeasuredRun, names: dict[str, str] | None = None,
            profile_path: str | None = None) -> MeasuredRun:
    """``run`` with the reasons it cannot be predicted: every configuration rule its session
    breaks (named by session field, or by ``names``: the file's names for them) and a measured
    time or memory that is not a positive number, a time outside
    :data:`MEASURED_TIME_RANGE_S` or a memory outside :data:`MEASURED_MEMORY_RANGE_GIB`. A run already skipped keeps its reason. ``profile_path``
    (``--profile``) replaces the session's ``cluster.profile_path`` first."""
    if profile_path and run.session is not None:
        run.session.cluster.profile_path = profile_path
    if run.skip_reason:
        return run
    errs = validate(run.session)
    t, mem = run.measured_iteration_time_s, run.measured_memory_gib
    if errs:
        shown = [rename_field(e, names) for e in errs] if names else errs  # the file's names
        run.skip_reason = "invalid plan: " + "; ".join(e.message for e in shown)
        run.skip_causes = list(dict.fromkeys(skip_cause(e) for e in errs))
    elif not math.isnan(mem) and not mem > 0:
        run.skip_reason = f"measured peak memory {mem!r} GiB is not a positive number"
        run.skip_causes = ["measured memory not positive"]
    elif not math.isnan(mem) and not (
            MEASURED_MEMORY_RANGE_GIB[0] <= mem <= MEASURED_MEMORY_RANGE_GIB[1]):
        run.skip_reason = (f"measured peak memory {mem:.4g} GiB is outside 2^-10 GiB (1 MiB) to "
                           "2^20 GiB (1 PiB): not one GPU's peak memory in GiB")
        run.skip_causes = ["measured memory out of range"]
    elif math.isnan(t) and not math.isnan(mem):
        pass  # a memory-only run: no time to check
    elif not (t > 0 and math.isfinite(t)):
        run.skip_reason = f"measured time {t!r} is not a positive number"
        run.skip_causes = ["measured time not positive"]
    elif not MEASURED_TIME_RANGE_S[0] <= t <= MEASURED_TIME_RANGE_S[1]:
        run.skip_reason = (f"measured time {t:.4g} s is outside {MEASURED_TIME_RANGE_S[0]:g} s to "
                           f"{MEASURED_TIME_RANGE_S[1]:g} s (a day): not the time of one training "
                           "iteration (or a throughput that is not one)")
        run.skip_causes = ["measured time out of range"]
    return run


def skip_cause(err: Any) -> str:
    """Short cause name of a validation error (counts per cause): by its kind of rule
    (:attr:`core.plan.fields.FieldError.rule`) and field, never by its message's text."""
    if err.rule == NOT_MODELLED or err.field == "cluster.gpu":
        return FIELD_CAUSES.get(err.field, f"{err.field} not modelled")
    if err.rule == UNEVEN_PIPELINE_SPLIT:
        return UNEVEN_PIPELINE_SPLIT
    return f"invalid plan ({err.field})"


def skip_counts(runs: list[MeasuredRun]) -> dict[str, int]:
    """Runs skipped per cause (a run with several causes counts under each), most first."""
    counts: dict[str, int] = defaultdict(int)
    for m in runs:
        if m.skip_reason:
            for c in m.skip_causes or ["other"]:
                counts[c] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _group(session: Session, source: str, named: bool = True) -> dict[str, str]:
    """Error-table labels of a session-column or JSON-lines run (see :class:`MeasuredRun`): the
    model's name, or (not ``named``, or no name) its size in billions of parameters."""
    m, pl = session.model, session.plan
    name = m.name if named else ""
    if not name:
        try:
            name = f"{num_parameters(m) / 1e9:.1f}B"
        except Exception:  # noqa: BLE001 - a label only; validation names what is wrong
            name = "nanB"
    return {"model": name, "t": str(pl.tensor_parallel), "p": str(pl.pipeline_parallel),
            "source": source, "gpu": session.cluster.gpu,
            "kind": "MoE" if (m.num_experts or 0) > 1 else "dense", "precision": pl.precision}


def _number(where: str, text: str, kind: type = float) -> Any:
    """``text`` as a finite float or an integer; MeasurementFileError naming ``where``."""
    t = text.strip()
    if kind is int:
        if re.fullmatch(r"[+-]?[0-9]{31,}", t):  # an integer: said so, with its size
            raise MeasurementFileError(f"{where}: {short_repr(t)} is an integer of "
                                       f"{len(t.lstrip('+-')):,} digits, beyond any field's bounds")
        if not re.fullmatch(r"[+-]?[0-9]{1,30}", t):
            raise MeasurementFileError(f"{where}: {short_repr(t)} is not an integer")
        return int(t)
    try:  # decimal digits only: float() reads "1_5" as 15
        v = decimal_number(t)
    except DecimalUnderflowError as exc:  # 1e-400: never read as 0.0
        raise MeasurementFileError(f"{where}: {exc}") from None
    except ValueError:
        raise MeasurementFileError(f"{where}: {short_repr(t)} is not a number") from None
    if not math.isfinite(v):
        raise MeasurementFileError(f"{where}: {short_repr(t)} is not a finite number")
    return v


def _authors_row(path: Path, row: int, header: list[str], r: list[str], line: int = 0
                 ) -> tuple[MeasuredRun, dict[str, str]]:
    """A row of the vTrain authors' layouts (module doc), with the file's names of its session
    fields (for :func:`_finish`); ``line``: the file's line it starts on."""
    where = f"{path}: {row_where(row, line)}"
    if len(r) != len(header):
        raise MeasurementFileError(f"{where} has {len(r)} fields, the header {len(header)}")
    v = {h: r[i].strip() for i, h in enumerate(header)}
    ints = {h: _number(f"{where}, column {h!r}", v[h], int) for h in _AUTHORS_SINGLE[:-1]}
    multi = "Parameters (billion)" in v
    # the authors' measurements are of GPT models (their columns hold the shape only)
    model = model_from_fields({**GPT_FAMILY, "name": (f"{v['Parameters (billion)']}B" if multi
                                                      else f"h={ints['hidden size']} "
                                                      f"L={ints['# layers']}"),
                               "num_layers": ints["# layers"], "hidden_size": ints["hidden size"],
                               "num_attention_heads": ints["attention heads"],
                               "ffn_hidden_size": None, "seq_length": ints["sequence length"],
                               "vocab_size": 50257})
    plan = ParallelPlan(tensor_parallel=ints["tensor parallelism"],
                        pipeline_parallel=ints["pipeline parallelism"],
                        data_parallel=ints["data parallelism"], micro_batch_size=ints["micro batch"],
                        global_batch_size=ints["global batch"], schedule="1f1b", recompute="full",
                        precision="fp16", gradient_accumulation_fusion=False)
    cluster = ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8,
                            inter_node_bandwidth_gbits_per_s=800.0)
    source = "multi-node" if multi else "single-node"
    time_s = _number(f"{where}, column 'iteration time (ms)'", v["iteration time (ms)"]) / 1e3
    run = MeasuredRun(Session(model, plan, cluster, CostConfig()), time_s, source=source, row=row,
                      time_column="iteration time (ms)", line=line,
                      group={"model": model.name, "t": str(plan.tensor_parallel),
                             "p": str(plan.pipeline_parallel), "source": source})
    if plan.num_gpus != ints["# GPUs"]:
        run.skip_reason = (f"# GPUs={ints['# GPUs']} disagrees with t*p*d={plan.tensor_parallel}*"
                           f"{plan.pipeline_parallel}*{plan.data_parallel}")
        run.skip_causes = ["# GPUs"]
    return run, _AUTHORS_COLUMNS


# --- the session-column CSV ------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _field_columns() -> dict[str, tuple[str, dataclasses.Field]]:
    """Column name -> (section, field) of every session field: ``field`` and ``section.field``
    (field names are unique across the sections)."""
    out: dict[str, tuple[str, dataclasses.Field]] = {}
    for section, cls in SESSION_SECTIONS.items():
        for f in dataclasses.fields(cls):
            out[f.name] = out[f"{section}.{f.name}"] = (section, f)
    return out


def _unknown_columns(path: Path, unknown: list[str], known: dict[str, Any]) -> str:
    """The one message for every header cell of ``unknown`` (none a session field or a run
    column): each with what to write instead (:data:`GENERAL_LAYOUT_MAPPING`, else
    :func:`core.accuracy.column_hints.unknown_column_hint`), and the conversion of the
    published-runs layout where a column of it has no such mapping."""
    names = [*known, *RUN_COLUMNS]
    hints = {h: (f"; {GENERAL_LAYOUT_MAPPING[h]}" if h in GENERAL_LAYOUT_MAPPING
                 else "" if h in GENERAL_LAYOUT_COLUMNS else unknown_column_hint(h, names))
             for h in unknown}
    rule = (f"neither a session field (model, plan, cluster or cost; docs/accuracy.md) nor one "
            f"of {', '.join(RUN_COLUMNS)}")
    if len(unknown) == 1:
        (h,) = unknown
        text = f"{path}: column {h!r} is {rule}{hints[h]}"
    else:
        text = (f"{path}: columns {', '.join(map(repr, unknown))} are {rule}"
                + "".join(f"; {h!r}:{hint[1:]}" for h, hint in hints.items() if hint))
    if any(h in GENERAL_LAYOUT_COLUMNS and h not in GENERAL_LAYOUT_MAPPING for h in unknown):
        text += GENERAL_LAYOUT_HINT if len(unknown) == 1 and not hints[unknown[0]] else (
            "; a file of the published-runs layout, whose free-text notes decide the model and "
            "plan, which vtrain does not read, converts to JSON lines of sessions under named "
            "assumptions with `python scripts/curate_runs.py FILE > runs.jsonl` (a source "
            "checkout; docs/accuracy.md, 'Measurement file layouts')")
    return text


def _session_columns(path: Path, header: list[str]) -> list[tuple[str, Any]]:
    """``(column, (section, field) or None for a run column)`` per header cell; refuses an
    unknown or repeated column and a file without a measurement column, naming every unknown
    column at once."""
    known = _field_columns()
    unknown = [h for h in header if h not in known and h not in RUN_COLUMNS]
    if unknown:
        raise MeasurementFileError(_unknown_columns(path, list(dict.fromkeys(unknown)), known))
    out, seen, position = [], {}, {}
    for i, h in enumerate(header):
        key = known[h][1].name if h in known else h
        if key in seen:
            if seen[key] == h:  # the same name twice: which cell holds the value is unknown
                raise MeasurementFileError(f"{path}: column {h!r} is given twice (columns "
                                           f"{position[key]} and {i + 1}); keep one")
            raise MeasurementFileError(f"{path}: columns {seen[key]!r} and {h!r} name the same field")
        seen[key], position[key] = h, i + 1
        out.append((h, known.get(h)))
    if "measured_iteration_time_s" not in seen and "measured_memory_gib" not in seen:
        raise MeasurementFileError(f"{path}: needs a column measured_iteration_time_s (or "
                                   "measured_memory_gib and memory_scale)")
    if "measured_memory_gib" in seen and "memory_scale" not in seen:
        raise MeasurementFileError(f"{path}: column 'measured_memory_gib' needs a column "
                                   f"'memory_scale' (one of {', '.join(MEMORY_SCALES)})")
    missing = [c for c in REQUIRED_COLUMNS if c not in seen]
    if missing:
        raise MeasurementFileError(
            f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}: a "
            "measured run's model shape, vocabulary, micro-batch size, data-parallel size, "
            "precision and GPU have no default (docs/accuracy.md, 'Session defaults')")
    return out


_TRUE, _FALSE = ("true", "yes", "y", "1"), ("false", "no", "n", "0")


def _cell_value(where: str, f: dataclasses.Field, text: str) -> Any:
    """A cell as its field's type: integers, finite numbers, ``true``/``false`` (``yes``/``no``,
    ``y``/``n``, ``1``/``0``), strings as written; ``null`` for None where the field may be
    empty."""
    base, optional = field_kind(f)
    if optional and text == "null":
        return None
    if base == "bool":
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise MeasurementFileError(f"{where}: {text[:40]!r} is not true or false")
    if base in ("int", "float"):
        return _number(where, text, int if base == "int" else float)
    return text


def _session_row(path: Path, row: int, columns: list[tuple[str, Any]], r: list[str],
                 line: int = 0) -> tuple[MeasuredRun, dict[str, str]]:
    """A row of the session-column CSV (module doc), with the file's names of its session
    fields (for :func:`_finish`); ``line``: the file's line it starts on."""
    where = f"{path}: {row_where(row, line)}"
    if len(r) != len(columns):
        raise MeasurementFileError(f"{where} has {len(r)} fields, the header {len(columns)}")
    body: dict[str, dict[str, Any]] = {s: {} for s in SESSION_SECTIONS}
    run: dict[str, str] = {}
    bad: dict[str, str] = {}  # column -> why its cell is refused (all of the row's, at once)
    for (col, target), cell in zip(columns, r):
        cell = cell.strip()
        if not cell and target is not None and target[1].name in REQUIRED_COLUMNS:
            bad[col] = ("empty, and a measured run has no default for it (docs/accuracy.md, "
                        "'Session defaults')")
            continue
        if not cell:
            continue  # Megatron-LM's default (CSV_DEFAULTS) or the session default
        if target is None:
            run[col] = cell
            continue
        section, f = target
        try:
            value = _cell_value(f"{where}, column {col!r}", f, cell)
        except MeasurementFileError as exc:
            bad[col] = str(exc).removeprefix(f"{where}, column {col!r}: ")
            continue
        if f.name == "virtual_pipeline_stages" and value == 1:
            # Megatron-LM's validate_args runs a virtual pipeline size of 1 as no interleaving
            # (virtual_pipeline_model_parallel_size None), as `vtrain import megatron-args`
            # reads it; the measured-memory data writes 1 for "not interleaved"
            continue
        body[section][f.name] = value
    _refuse_cells(where, bad, columns, body)
    gpu_name = _read_gpu_alias(body["cluster"])
    recipe = _recipe_named(where, run["recipe"]) if "recipe" in run else None
    if recipe is not None:
        _check_recipe_gpu(where, recipe, body["cluster"].get("gpu"))
        apply_recipe(recipe, body)
    given_plan = set(body["plan"])  # the row's plan fields and its recipe's, before defaults
    defaults = _apply_defaults(body)
    names = {f"{s}.{f.name}": col for col, t in columns if t for s, f in [t]}
    try:
        session = Session.from_dict({**body, **({"notes": run["notes"]} if "notes" in run else {})})
    except ConfigError as exc:
        _refuse_cells(where, {names.get(e.field, e.field): e.message for e in exc.errors},
                      columns, body)
        raise  # (not reached: the errors are refused above)
    defaults = _bearing({**defaults, **_session_defaults(body, session)}, session)
    time_s = (_number(f"{where}, column 'measured_iteration_time_s'", run["measured_iteration_time_s"])
              if "measured_iteration_time_s" in run else math.nan)
    memory = (_number(f"{where}, column 'measured_memory_gib'", run["measured_memory_gib"])
              if "measured_memory_gib" in run else math.nan)
    scale = _memory_scale(f"{where}, column 'memory_scale'", run.get("memory_scale", ""), memory)
    if math.isnan(time_s) and math.isnan(memory):
        raise MeasurementFileError(f"{where}: neither measured_iteration_time_s nor "
                                   "measured_memory_gib is given")
    source = run.get("source", path.name)
    assumptions = [a.strip() for a in run.get("assumptions", "").split(";") if a.strip()]
    if recipe is not None:
        assumptions.append(f"bridge-perf-recipe: {recipe.function} ({recipe.source})")
    out = MeasuredRun(session, time_s, memory, scale, source, assumptions, row,
                      group=_group(session, source, bool(session.model.name)), defaults=defaults,
                      gpu_name=gpu_name, line=line)
    if recipe is not None and recipe.refuse is not None:
        out.skip_causes, out.skip_reason = [recipe.refuse[0]], recipe.refuse[1]
    elif session.model.is_moe and "moe_token_dispatcher_type" not in given_plan:
        # Megatron-Core's default dispatcher, allgather, is not modelled (as the import says)
        out.skip_causes = ["token dispatcher not given"]
        out.skip_reason = ("column moe_token_dispatcher_type is empty or absent: Megatron-Core's "
                           "default, the allgather dispatcher, is not modelled; give alltoall "
                           "or flex (DeepEP / HybridEP)")
    return out, names


def _refuse_cells(where: str, bad: dict[str, str], columns: list[tuple[str, Any]],
                  body: dict[str, dict[str, Any]]) -> None:
    """Refuse a row's bad cells (``bad``: column -> why), every one in one message, and with
    them what its other cells break: each field rule of :meth:`Session.from_dict` on the
    cells read (those of a bad column left out), so a row is corrected in one round. Nothing
    when ``bad`` is empty.

    Raises
    ------
    MeasurementFileError
        ``"<where>, column 'x': why"`` for one, ``"<where>: column 'x': why; column 'y':
        why"`` for several, in the file's column order."""
    if not bad:
        return
    bad = dict(bad)
    known = {f"{t[0]}.{t[1].name}": col for col, t in columns if t}
    given = {f"{s}.{name}" for s, v in body.items() for name in v}
    try:
        Session.from_dict({s: dict(v) for s, v in body.items()})
    except ConfigError as exc:
        for e in exc.errors:  # a rule a value the row gives breaks (not a field left empty)
            col = known.get(e.field, e.field)
            if e.field in given and col not in bad:
                bad[col] = e.message
    order = [col for col, _ in columns if col in bad] + [c for c in bad if c not in dict(columns)]
    if len(order) == 1:
        raise MeasurementFileError(f"{where}, column {order[0]!r}: {bad[order[0]]}")
    raise MeasurementFileError(f"{where}: " + "; ".join(f"column {c!r}: {bad[c]}" for c in order))


def _apply_defaults(body: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Fill ``body``'s absent fields of :data:`CSV_DEFAULTS` (the global batch: the micro-batch
    size times d) and an empty model name; return the defaults taken, field -> value, in
    field order."""
    taken: dict[str, Any] = {}
    for section, values in CSV_DEFAULTS.items():
        for name, value in values.items():
            if name in body[section]:
                continue
            value = _absent_means(name, value, body)
            body[section][name] = taken[name] = value
    body["model"].setdefault("name", "")
    return taken


def _absent_means(name: str, value: Any, body: dict[str, dict[str, Any]]) -> Any:
    """What an absent ``name`` column means for a row of ``body`` (``value``: its entry in
    :data:`CSV_DEFAULTS`): the global batch Megatron-LM's b times d; the interleaved 1F1B
    schedule where virtual stages are given (Megatron-LM has no schedule argument: virtual
    stages interleave), else 1F1B; a SwiGLU model's MLP size
    Megatron-LM's 2/3 of 4h (:func:`core.io.megatron.model_arguments.swiglu_ffn_hidden_size`),
    not the session's 4h."""
    if name == "global_batch_size":
        return body["plan"]["micro_batch_size"] * body["plan"]["data_parallel"]
    if name == "schedule":  # Megatron-LM interleaves where virtual stages are given
        v = body["plan"].get("virtual_pipeline_stages")
        return "interleaved" if isinstance(v, int) and v > 1 else value
    if name == "ffn_hidden_size" and body["model"].get("activation") == "swiglu" \
            and isinstance(body["model"].get("hidden_size"), int):
        return swiglu_ffn_hidden_size(body["model"]["hidden_size"])
    return value


def _read_gpu_alias(cluster: dict[str, Any]) -> str:
    """Read a row's ``gpu`` that is another tool's name of a shipped kind (``"H100"``, ``"A100
    80GB"``) as that kind (:func:`core.plan.cluster.gpu_kind`, as ``--gpu`` and ``--set
    cluster.gpu=`` read it), in ``cluster`` (the row's cluster fields); return the name the
    file gave, or "" when it gave a kind (or a name of no shipped kind, which the rules
    refuse)."""
    name = cluster.get("gpu")
    if not isinstance(name, str) or name in GPU_KINDS:
        return ""
    kind = gpu_kind(name)
    if kind not in GPU_KINDS:
        return ""
    cluster["gpu"] = kind
    return name


#: Session fields whose value does not enter the simulated iteration time, so a default taken
#: for them is not stated: a label, the store (the report names the profile used) and the
#: planner's memory margin (the fit verdict only). The cost section is never read by the time.
NOT_TIMED_FIELDS = ("model.name", "cluster.profile_path", "cluster.memory_reserve_fraction")
#: Sections whose absent fields take the session default and are stated when they bear on the
#: simulated time (:func:`_session_defaults`); the cost section prices, it does not time.
_TIMED_SECTIONS = ("model", "plan", "cluster")


def _session_defaults(body: dict[str, dict[str, Any]], session: Session) -> dict[str, Any]:
    """The session defaults a row took: field -> value of every model, plan and cluster field
    the row (with :data:`CSV_DEFAULTS` and its recipe) leaves out, but :data:`NOT_TIMED_FIELDS`;
    ``gpus_per_node`` as the session gives it (the GPU's NVLink domain) and an empty
    ``inter_node_bandwidth_gbits_per_s`` as the GPU's reference node gives it
    (:func:`core.plan.cluster.node_network_gbits_per_s`; null for a kind without one)."""
    taken: dict[str, Any] = {}
    for section in _TIMED_SECTIONS:
        own = getattr(session, section)
        for f in dataclasses.fields(own):
            if f.name in body[section] or f"{section}.{f.name}" in NOT_TIMED_FIELDS:
                continue
            value = getattr(own, f.name)
            if f.name == "inter_node_bandwidth_gbits_per_s" and value is None:
                try:
                    value = node_network_gbits_per_s(session.cluster)
                except ValueError:
                    pass  # no reference node: the rules name it where the plan spans nodes
            taken[f.name] = value
    return taken


def default_origin(name: str) -> str:
    """Where the default of field ``name`` (:attr:`MeasuredRun.defaults`) comes from:
    ``"Megatron-LM"`` (:data:`CSV_DEFAULTS`), ``"reference node"`` (a cluster field: the GPU
    kind's reference node) or ``"session"`` (the session default, as a session file has it)."""
    if any(name in values for values in CSV_DEFAULTS.values()):
        return "Megatron-LM"
    return "reference node" if _field_columns()[name][0] == "cluster" else "session"


def _bearing(taken: dict[str, Any], session: Session) -> dict[str, Any]:
    """The defaults of ``taken`` that bear on ``session``: those of fields without effect on it
    (:func:`core.plan.rules.inactive_fields`: the MoE fields of a dense model, the MLA sizes
    without latent attention, ...) left out, so the report states what the prediction used."""
    idle = inactive_fields(session)
    known = _field_columns()
    return {k: v for k, v in taken.items() if f"{known[k][0]}.{k}" not in idle}


def _memory_scale(where: str, scale: str, memory: float) -> str:
    """The memory scale of a run with a measured memory (one of MEMORY_SCALES); "" without."""
    if math.isnan(memory):
        return ""
    if scale not in MEMORY_SCALES:
        raise MeasurementFileError(f"{where}: {scale!r} is not one of {', '.join(MEMORY_SCALES)} "
                                   "(what the measured peak memory counts)")
    return scale


def _recipe_named(where: str, name: str) -> BridgeRecipe:
    """The Megatron-Bridge performance recipe whose function is ``name`` (``where``: the file
    and row, for the message)."""
    for r in load_bridge_recipes():
        if r.function == name:
            return r
    raise MeasurementFileError(f"{where}, column 'recipe': {name[:80]!r} is no "
                               "Megatron-Bridge performance recipe of core.accuracy.bridge_recipes "
                               "(resources/bridge_perf_recipes.json)")


def _check_recipe_gpu(where: str, recipe: BridgeRecipe, gpu: Any) -> None:
    """Refuse a recipe of another GPU kind than the row's ``gpu`` (as read,
    :func:`_read_gpu_alias`): each performance recipe is written for one kind
    (:attr:`BridgeRecipe.key`'s first entry, the ``perf_recipes/<family>/<gpu>/`` folder its
    function is in), and its overlaps, recomputation and CUDA graphs are that kind's choices;
    taken onto another kind's row they would be a guess. ``where``: the file and row."""
    kind = recipe.key[0]
    if gpu != kind:
        raise MeasurementFileError(
            f"{where}, column 'recipe': {recipe.function} is Megatron-Bridge's recipe for "
            f"{kind} ({recipe.source}), and the row's gpu is {gpu}: a recipe's settings are "
            "those of its GPU kind; name a recipe of the row's kind, or leave the cell empty "
            "and give the settings as columns")


def cell_text(value: Any) -> Any:
    """A value as a session-column CSV cell holds it: ``null`` for None, ``true`` / ``false``
    for booleans, else the value itself."""
    return "null" if value is None else ("true" if value else "false") if isinstance(
        value, bool) else value


def session_columns(session: Session) -> dict[str, Any]:
    """The session-column CSV row of ``session``: the :data:`REQUIRED_COLUMNS` and every other
    model, plan, cluster and cost field whose value differs from what its absence means
    (:data:`CSV_DEFAULTS`, else the session default; ``null`` for a None that is not the
    default; booleans ``true``/``false``). Reading the row back gives the session."""
    default = Session()
    fields_of = {"model": dataclasses.asdict(session.model),
                 "plan": dataclasses.asdict(session.plan)}  # what _absent_means reads
    out: dict[str, Any] = {}
    for section in SESSION_SECTIONS:
        own, base = getattr(session, section), getattr(default, section)
        absent = CSV_DEFAULTS.get(section, {})
        for f in dataclasses.fields(own):
            value = getattr(own, f.name)
            if f.name in ("global_batch_size", "ffn_hidden_size", "schedule"):
                meant = _absent_means(f.name, absent.get(f.name), fields_of)
            elif f.name == "name":
                meant = ""
            elif f.name == "gpus_per_node":  # the reader's: the GPU's NVLink domain
                meant = GPU_NVLINK_DOMAIN.get(session.cluster.gpu, base.gpus_per_node)
            else:
                meant = absent.get(f.name, getattr(base, f.name))
            if value == meant and f.name not in REQUIRED_COLUMNS and not (
                    f.name == "moe_token_dispatcher_type" and session.model.is_moe):
                continue  # (a mixture of experts states its dispatcher: absent is refused)
            out[f.name] = cell_text(value)
    if session.notes:
        out["notes"] = session.notes
    return out


# --- JSON lines ----------------------------------------------------------------------------


def _read_jsonl(path: Path, text: str, progress: Callable[[int, int], None] | None
                ) -> list[tuple[MeasuredRun, None]]:
    """Every non-blank line of a JSON-lines file as a run (module doc), for :func:`_finish`."""
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise MeasurementFileError(f"{path}: empty file")
    if len(lines) > MAX_ROWS:
        raise MeasurementFileError(f"{path}: more than {MAX_ROWS:,} lines (the most a "
                                   "measurement file may have)")
    if len(lines) > 1 and lines[0][1].strip() == "{":  # one JSON document over many lines
        _refuse_one_document(path, text)
    runs = _each(lines, lambda _, nl: _jsonl_run(path, *nl), progress)
    first: dict[int, int] = {}
    for (line, _), (run, _) in zip(lines, runs):  # messages name records by their row
        if run.row in first:
            raise MeasurementFileError(
                f"{path}: line {line}, key 'row': {run.row} is line {first[run.row]}'s row too; "
                "each record's row must be its own (files concatenated? renumber the rows or "
                "leave the key out: the line is the row)")
        first[run.row] = line
    return runs


def _refuse_one_document(path: Path, text: str) -> None:
    """A JSON file of one document written over many lines (a session, a vTrain config) is not
    measured runs: said so, and what is, instead of line 1's parse error. Returns when the
    text is not one JSON document (the line-by-line reading names the fault)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return
    kind = ("a session file" if isinstance(doc, dict) and doc.get("format") == "vtrain-session"
            else "one JSON document")
    raise MeasurementFileError(
        f"{path}: {kind}, not measured runs: vtrain validate and calibrate read JSON lines, one "
        "{\"session\": ..., \"measured_iteration_time_s\": ...} object per line, or a CSV "
        "(docs/accuracy.md, 'Measurement file layouts'); vtrain simulate predicts a session")


def _jsonl_run(path: Path, line: int, text: str) -> tuple[MeasuredRun, None]:
    """One record of a JSON-lines file (and no names of its own for its fields)."""
    where = f"{path}: line {line}"
    doc = parse_json(text, where, MeasurementFileError)  # NaN, huge numbers, deep nesting named
    if not isinstance(doc, dict):
        raise MeasurementFileError(f"{where}: not a JSON object")
    unknown = [k for k in doc if k not in _JSONL_KEYS]
    if unknown:
        raise MeasurementFileError(f"{where}: unknown key {unknown[0]!r} (keys: "
                                   f"{', '.join(_JSONL_KEYS)}){unit_hint(unknown[0])}")
    if "session" not in doc:
        raise MeasurementFileError(f"{where}: missing key 'session'")
    try:
        session = session_from_document(doc["session"], f"{where}, key 'session'")
    except SessionFileError as exc:
        raise MeasurementFileError(str(exc)) from None
    time_s, memory = (_json_number(where, doc, k) for k in ("measured_iteration_time_s",
                                                             "measured_memory_gib"))
    if math.isnan(time_s) and math.isnan(memory):
        raise MeasurementFileError(f"{where}: needs measured_iteration_time_s (or "
                                   "measured_memory_gib and memory_scale)")
    scale = _memory_scale(f"{where}, key 'memory_scale'", doc.get("memory_scale") or "", memory)
    source = doc.get("source", doc.get("source_id")) or path.name
    assumptions, row = doc.get("assumptions", []), doc.get("row", line)
    reason = doc.get("skip_reason") or ""
    for key, ok, rule in (("source", isinstance(source, str), "a string"),
                          ("assumptions", isinstance(assumptions, list)
                           and all(isinstance(a, str) for a in assumptions), "a list of strings"),
                          ("row", isinstance(row, int) and not isinstance(row, bool) and row >= 1,
                           "a positive integer"),
                          ("skip_reason", isinstance(reason, str), "a string or null")):
        if not ok:
            raise MeasurementFileError(f"{where}, key {key!r}: must be {rule}")
    run = MeasuredRun(session, time_s, memory, scale, source, list(assumptions), row,
                      group=_group(session, source), line=line)
    if reason:  # the file's own, reviewed reason (its text is the cause: runs share it)
        run.skip_reason, run.skip_causes = reason, [reason]
    return run, None


def _json_number(where: str, doc: dict, key: str) -> float:
    """A measurement key's value: a number (NaN when absent or null)."""
    value = doc.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MeasurementFileError(f"{where}, key {key!r}: must be a number or null, got {value!r}")
    return float(value)
