"""One-off curation: measurement CSVs in the retired "general layout" (named columns plus a
free-text ``notes`` column) -> JSON lines of measured runs that ``vtrain validate`` reads.

Not part of the product, and nothing in core imports it (issue 28): the sessions of
../shared/data/public-modern/published_runs.sessions.jsonl were resolved once by this reader
from published_runs.csv and reviewed; from then on the sessions are the record. It is kept to
convert other files of that layout (../shared/data/measured-memory/measured_memory.csv) and to
show how each named assumption was made.

Run: ``python scripts/curate_runs.py IN.csv [--set COLUMN=VALUE ...] > OUT.jsonl`` (one ``{row,
source, session, measured_iteration_time_s, measured_memory_gib, memory_scale, assumptions,
skip_reason}`` per row; docs/accuracy.md, "Measurement file layouts"). ``--set`` states a column
the file does not have for every row (``--set tied_embeddings=n`` for
../shared/data/measured-memory/measured_memory.csv, whose README says every row is untied);
every field a row takes without a column is named in its assumptions, and a row of a family
other than Llama's without a tied_embeddings column is refused (skip_reason).

What follows is the reader as it was in core/accuracy/validate.py before the move (its
layouts, named assumptions and skip policies are documented there and in docs/accuracy.md of
that version).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable


from core.accuracy.measured import (FIELD_CAUSES, NOT_TIMED_FIELDS, default_origin,  # noqa: E402
                                    skip_cause, skip_counts)
from core.accuracy.validate import row_memory  # noqa: E402
from core.plan.cluster import (GPU_KINDS, GPU_NIC_GBITS_PER_GPU, ClusterConfig, CostConfig,
                               gpu_kind, node_network_gbits_per_s)
from core.plan.presets import MODEL_PRESETS, GPT_FAMILY
from core.plan.parallel import PRECISIONS, RECOMPUTE_CHOICES, ParallelPlan
from core.plan.model_config import ModelConfig, model_from_fields
from core.plan.session import Session
from core.plan.layout import capped_recompute_layers, expand_pipeline_layout
from core.plan.rules import inactive_fields, validate
from core.io.torchtitan_import import torchtitan_stage_layers
from core.accuracy.bridge_recipes import (BRIDGE_VERSION, FAMILY_SETTINGS, BridgeRecipe, bridge_recipe_family,
                             match_bridge_recipe)
from core.plan.fields import rename_field
from core.store.gpu_spec import kind_fits_peak_fraction
from core.util.inputs import read_bytes
from core.sim.report import MEMORY_SCALES
from core.model.counts import num_parameters

__all__ = ["Measurement", "read_measurements", "GENERAL_COLUMNS", "MODERN_COLUMNS", "INFO_COLUMNS",
           "MeasurementFileError", "skip_counts", "MEMORY_COLUMNS", "ASSUMPTIONS", "FIELD_CAUSES", "PUBLISHED_FIELDS"]

#: Required and optional (value = default) columns of the general layout.
GENERAL_COLUMNS: dict[str, Any] = {
    "gpu": None, "num_gpus": None, "gpus_per_node": None, "inter_node_bandwidth_gbps": "",
    "num_layers": None, "hidden_size": None, "num_attention_heads": None, "ffn_hidden_size": "",
    "seq_length": None, "vocab_size": 50257, "global_batch_size": None, "micro_batch_size": None,
    "tensor_parallel": None, "pipeline_parallel": None, "data_parallel": None,
    "virtual_pipeline_stages": 1, "sequence_parallel": "n", "recompute": "full",
    "precision": "fp16", "measured_iteration_time_s": "",
    "distributed_optimizer": "n", "fsdp": "n", "overlap_grad_reduce": "n",
    "first_stage_layers": "", "last_stage_layers": "",
}
#: Optional columns of the general layout that change what a row is (published runs of modern
#: models, ../shared/data/public-modern/README.md). An empty cell means the default: GPT's
#: choice (GeLU, LayerNorm, query groups = heads, tied embeddings, no experts) or no parallelism
#: of that kind; recompute and precision, when their column is present, must be stated.
MODERN_COLUMNS = ("num_query_groups", "activation", "normalization", "tied_embeddings",
                  "num_experts", "moe_top_k", "moe_ffn_hidden_size", "context_parallel",
                  "expert_parallel", "distributed_optimizer", "fsdp")
#: Columns that only describe a row (labels and published results other than the time).
INFO_COLUMNS = ("source_id", "framework", "model_name", "tokens_per_s_per_gpu",
                "model_tflops_per_gpu", "mfu_percent", "notes")
#: Columns of a measured peak memory per GPU (GiB) and what it counts: one of
#: :data:`core.sim.report.MEMORY_SCALES` (``max_allocated``, ``max_reserved``, ``nvidia-smi``).
#: A row needs a measured time, a measured memory, or both.
MEMORY_COLUMNS = ("measured_peak_memory_gib", "memory_scale")
_AUTHORS_SINGLE = ["# GPUs", "global batch", "micro batch", "hidden size", "attention heads",
                   "# layers", "sequence length", "tensor parallelism", "data parallelism",
                   "pipeline parallelism", "iteration time (ms)"]
_AUTHORS_MULTI = ["Parameters (billion)"] + _AUTHORS_SINGLE


#: Seconds one measured (or derived) training iteration may take: from 0.1 ms to a day.
MEASURED_TIME_RANGE_S = (1e-4, 86_400.0)
#: Most data rows a measurement file may have. The largest shipped file has 864 rows; each
#: row takes milliseconds to read and to predict (about a minute for 10,000), so a file far
#: beyond this is a mistake (a log, a concatenation) and is refused by name before any row is
#: read into a plan.
MAX_ROWS = 10_000


class MeasurementFileError(ValueError):
    """A measurement CSV cannot be read; the message names the file, row and column."""


class _CellError(MeasurementFileError):
    """A cell of one general-layout row that no prediction can do without is empty or not a
    number: that row is skipped with this message, the rest of the file is read."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


@dataclass
class Measurement:
    """One measured run.

    Attributes
    ----------
    row : int
        1-based data row number in the file.
    session : Session or None
        The plan, when it could be built.
    measured_s : float
        Measured iteration time, seconds (NaN when the row measured only memory).
    skip_reason : str
        Why the simulator cannot predict it ("" when it can).
    group : dict
        Labels for the error table: ``model`` (size or name), ``t``, ``p``, ``source``.
    skip_causes : list of str
        One short name per cause of the skip ("mixture of experts", "FP8 precision" ...),
        for counts per cause; empty when not skipped.
    assumptions : list of str
        The named policies (:data:`ASSUMPTIONS`, ``"name: what it assumes (detail)"``) that
        filled in what the row's source leaves unstated.
    measured_memory_gib : float
        Measured peak memory per GPU, GiB (NaN when the row measured none).
    memory_scale : str
        What that peak counts: one of :data:`core.sim.report.MEMORY_SCALES` ("" without one).
    """

    row: int
    session: Session | None
    measured_s: float
    skip_reason: str = ""
    group: dict[str, str] = field(default_factory=dict)
    skip_causes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    measured_memory_gib: float = math.nan
    memory_scale: str = ""

    @property
    def has_time(self) -> bool:
        """Whether the row has a measured iteration time (a memory-only row has none)."""
        return not math.isnan(self.measured_s)


def _csv_text(path: Path) -> str:
    """The text of a measurement CSV: UTF-8 (with or without a BOM), UTF-16 with its BOM
    (spreadsheets' "Unicode text"), else Windows-1252 (what Excel on Windows writes: a ``µ`` or
    ``—`` in a note must not cost every row). Raises MeasurementFileError (:mod:`core.util.inputs`)
    for an unreadable, non-regular or too large file, or bytes none of these decode."""
    data = read_bytes(path, MeasurementFileError, "csv")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        encodings = ("utf-16",)
    else:
        encodings = ("utf-8-sig", "cp1252")
    for enc in encodings:
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            continue
    raise MeasurementFileError(f"{path}: is not UTF-8, UTF-16 or Windows-1252 text")


def _norm_header(h: str) -> str:
    return h.strip().lstrip("\ufeff").strip()


def _snake(h: str) -> str:
    """A header as the general layout writes its names: lower case, words joined by ``_``."""
    return re.sub(r"[\s\-]+", "_", h.strip().lower())


def read_measurements(path: str | Path,
                      progress: Callable[[int, int], None] | None = None,
                      stated: dict[str, str] | None = None) -> list[Measurement]:
    """Read a measurement CSV in any supported layout (see module doc).

    ``progress(done, total)``, if given, is called as rows are read (every 50 and at the end).
    ``stated``: general-layout column -> cell for every row, columns the file does not have
    (the command line's ``--set COLUMN=VALUE``, assumption ``column-from-command-line``).

    Raises
    ------
    MeasurementFileError
        Unreadable, non-regular or too large file (:mod:`core.util.inputs`), not CSV, more than
        :data:`MAX_ROWS` rows, unknown header, or a value that is not a finite number; a
        ``stated`` column that is not one of the general layout or that the file has.
        A row whose values break a configuration rule or bound is kept, skipped with
        that reason.
    """
    path = Path(path)
    text = _csv_text(path)
    try:
        rows = []
        for r in csv.reader(io.StringIO(text, newline="")):
            if r and any(c.strip() for c in r):
                rows.append(r)
                if len(rows) > MAX_ROWS + 1:
                    raise MeasurementFileError(f"{path}: more than {MAX_ROWS:,} data rows "
                                               "(the most a measurement file may have)")
    except csv.Error as exc:
        raise MeasurementFileError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows:
        raise MeasurementFileError(f"{path}: empty file")
    if len(rows) == 1:
        raise MeasurementFileError(f"{path}: a header and no data rows")
    header = [_norm_header(h) for h in rows[0]]
    if header == _AUTHORS_SINGLE or header == _AUTHORS_MULTI:
        return _each_row(rows[1:], lambda i, r: _authors_row(path, i, header, r), progress)
    known = set(GENERAL_COLUMNS) | set(MODERN_COLUMNS) | set(INFO_COLUMNS) | set(MEMORY_COLUMNS)
    # "Num GPUs", "TENSOR_PARALLEL", "seq-length": the general layout's names in other cases
    header = [h if h in known else _snake(h) if _snake(h) in known else h for h in header]
    missing = [c for c, d in GENERAL_COLUMNS.items() if d is None and c not in header]
    if not {"measured_iteration_time_s", "measured_peak_memory_gib"} & set(header):
        missing.append("measured_iteration_time_s (or measured_peak_memory_gib and memory_scale)")
    if "measured_peak_memory_gib" in header and "memory_scale" not in header:
        raise MeasurementFileError(
            f"{path}: column 'measured_peak_memory_gib' needs a column 'memory_scale' (what the "
            f"peak counts: one of {', '.join(MEMORY_SCALES)})")
    if missing:
        raise MeasurementFileError(
            f"{path}: unknown layout; the general layout needs columns {', '.join(missing)} "
            f"(header was: {', '.join(header)})")
    stated = dict(stated or {})
    for col in stated:
        if col not in known:
            raise MeasurementFileError(f"--set {col}: not a column of the general layout "
                                       f"({', '.join(sorted(known))})")
        if col in header:
            raise MeasurementFileError(f"--set {col}: {path} has a column {col!r}; its cells "
                                       "state it (edit them, or leave out --set)")
    body = [r + [""] * (len(header) - len(r)) + list(stated.values()) for r in rows[1:]]
    header = header + list(stated)
    out = _each_row(body, lambda i, r: _general_row_or_skip(path, i, header, r), progress)
    for col, value in stated.items():
        # a stated value the column cannot read fails every row alike: the command line's error,
        # refused once (every row was skipped, or not written at all, naming the cell)
        bad = next((m for m in out if f"unreadable {col}" in m.skip_causes), None)
        if bad is not None:
            why = "; ".join(x for x in bad.skip_reason.split("; ") if col in x) or bad.skip_reason
            why = why.removeprefix(f"{col}={value!r}: ").removeprefix(f"column {col!r}: ")
            raise MeasurementFileError(f"--set {col}={value!r}: {why}")
    if stated:
        said = ", ".join(f"{c}={x}" for c, x in stated.items())
        for m in out:
            m.assumptions.insert(0, f"column-from-command-line: {ASSUMPTIONS['column-from-command-line']} ({said})")
    _check_recipe_siblings(out)
    return out


#: Rows between two calls of a progress callback.
_PROGRESS_EVERY = 50


def _each_row(rows: list[list[str]], read: Callable[[int, list[str]], Measurement],
              progress: Callable[[int, int], None] | None) -> list[Measurement]:
    """``read(row number, cells)`` of every data row (numbered from 1), telling ``progress``."""
    out = []
    for i, r in enumerate(rows):
        out.append(read(i + 1, r))
        if progress and ((i + 1) % _PROGRESS_EVERY == 0 or i + 1 == len(rows)):
            progress(i + 1, len(rows))
    return out


def _recipe(m: Measurement) -> tuple:
    """What fixes a recipe's memory but the batch: source, GPU, model shape, precision, the
    per-replica parallel layout (t, p, v, cp, ep, etp, b, schedule), sequence parallelism and
    the sharding (ZeRO stage, shard group); the data-parallel size and the global batch may
    differ between runs of one recipe."""
    s = m.session
    pl = s.plan
    return (m.group.get("source"), s.cluster.gpu, dataclasses.astuple(s.model), pl.precision,
            pl.fp8_recipe, pl.tensor_parallel, pl.pipeline_parallel, pl.virtual_pipeline_stages,
            pl.context_parallel, pl.expert_parallel, pl.expert_tensor_parallel,
            pl.micro_batch_size, pl.schedule, pl.sequence_parallel, pl.zero_stage,
            pl.data_parallel_shard_size)


def _check_recipe_siblings(ms: list[Measurement]) -> None:
    """A row predicted under an assumed recompute=none (Megatron-Core's default, the source
    silent) whose recipe (:func:`_recipe`) another row of the file runs with memory that
    contradicts that assumption (:func:`_check_assumed_recompute` skipped it) is skipped too:
    the recipe recomputed (or offloaded) something, which the source does not state, and the
    runs of one recipe share that setting."""
    def assumed(m: Measurement) -> bool:
        return any(a.startswith("megatron-recompute-default:") for a in m.assumptions)

    unfit = {}
    for m in ms:
        if m.session is not None and assumed(m) and \
                "recompute not stated (none does not fit)" in m.skip_causes:
            unfit.setdefault(_recipe(m), m.row)
    if not unfit:
        return
    for m in ms:
        if m.skip_reason or m.session is None or not assumed(m):
            continue
        other = unfit.get(_recipe(m))
        if other is not None:
            m.skip_reason = (f"recompute is empty, and row {other} of the same source, GPU, model, "
                             "precision and parallel layout does not fit without recomputation: "
                             "the recipe recomputes or offloads activations, which the source "
                             "does not state")
            m.skip_causes = ["recompute not stated (a run of the same recipe needs it)"]


#: Labels a table may write before a size in its own column ("EP8", "TP = 4", "top-2").
_CELL_LABELS = {"tensor_parallel": "tp", "pipeline_parallel": "pp", "data_parallel": "dp",
                "context_parallel": "cp", "expert_parallel": "ep", "virtual_pipeline_stages": "vpp?",
                "moe_top_k": "top", "micro_batch_size": "mbs", "global_batch_size": "gbs"}
#: Units a cell may carry, per column: a word (no conversion) or a factor to the column's unit.
_CELL_UNITS: dict[str, dict[str, float]] = {
    "num_gpus": {"gpus": 1, "gpu": 1}, "gpus_per_node": {"gpus": 1, "gpu": 1, "gpus/node": 1},
    "tokens_per_s_per_gpu": {"tok/s": 1, "tokens/s": 1, "tok/s/gpu": 1, "tokens/s/gpu": 1},
    "num_layers": {"layers": 1}, "seq_length": {"tokens": 1, "k": 1024},
    "global_batch_size": {"sequences": 1, "samples": 1, "seqs": 1},
    "micro_batch_size": {"sequences": 1, "samples": 1, "seqs": 1},
    "num_experts": {"experts": 1}, "virtual_pipeline_stages": {"stages": 1, "chunks": 1},
    "inter_node_bandwidth_gbps": {"gb/s": 1, "gbps": 1, "gbit/s": 1, "tb/s": 1000, "tbps": 1000,
                                  "gbytes/s": 8},
    "measured_iteration_time_s": {"s": 1, "sec": 1, "seconds": 1, "ms": 1e-3},
    "measured_peak_memory_gib": {"gib": 1, "gb": 1, "mib": 1 / 1024},
}


def _clean_cell(col: str, text: str) -> tuple[str, float]:
    """A numeric cell as tables write it, reduced to the number and the factor to the column's
    unit: footnote markers (``19.7*``, ``†``), thousands separators (``1,024``), a trailing
    parenthesis (``5 (interleaved)``), the column's own label (``EP8``, ``top-2``) and unit
    (``4096 tokens``, ``3.2 Tb/s``, ``1970 ms``). Anything else is left for :func:`_num` to
    refuse."""
    t = re.sub(r"[*\u2020\u2021]+$", "", text.strip()).strip()
    t = re.sub(r"\s*\([^()]*\)$", "", t).strip()
    t = re.sub(r"^([+-]?\d{1,3}(?:,\d{3})+)(?=\.\d|\s*[a-z/]*$)", lambda m: m.group(1).replace(",", ""),
               t, flags=re.I)  # "1,024", "9,100 ms"
    per_link = re.fullmatch(r"(\d+)\s*[x\u00d7]\s*(\d+(?:\.\d+)?)\s*(gb/s|gbps|gbit/s|g)", t, re.I)
    if per_link and col == "inter_node_bandwidth_gbps":  # "8x400 Gb/s": the node's NICs
        return str(int(per_link.group(1)) * float(per_link.group(2))), 1.0
    kilo = re.fullmatch(r"(\d+(?:\.\d+)?)\s*[kK]\s*(?:tokens)?", t)
    if kilo and col == "seq_length":  # "128K tokens": 131,072
        return kilo.group(1), 1024.0
    label = _CELL_LABELS.get(col)
    if label:
        t = re.sub(rf"(?i)^{label}\s*[-=:]?\s*(?=\d)", "", t)
    m = re.fullmatch(r"([+-]?[\d.]+(?:e[+-]?\d+)?)\s*([a-z/]+)", t, re.I)
    if m and m.group(2).lower() in _CELL_UNITS.get(col, {}):
        return m.group(1), _CELL_UNITS[col][m.group(2).lower()]
    return t, 1.0


def _num(path: Path, row: int, col: str, text: str, kind: Callable = float) -> Any:
    if kind is int and re.fullmatch(r"\s*[+-]?\d{1,30}\s*", text):
        return int(text)  # exactly (validation checks the bounds); longer ones below
    text, factor = _clean_cell(col, text)
    if kind is int and factor == 1.0 and re.fullmatch(r"[+-]?\d{1,30}", text):
        return int(text)
    try:
        v = float(text) * factor
    except ValueError:
        raise _CellError(f"{path}: row {row}, column {col!r}: {text[:40]!r} is not a number",
                         f"unreadable {col}") from None
    if not math.isfinite(v):
        raise _CellError(f"{path}: row {row}, column {col!r}: {text[:40]!r} is not a finite "
                         "number", f"unreadable {col}")
    if kind is int:
        if not v.is_integer():
            raise _CellError(f"{path}: row {row}, column {col!r}: {text!r} is not an integer",
                             f"unreadable {col}")
        return int(v)
    return v


#: Session field -> column of the authors' layouts, so skip reasons use the file's names.
_AUTHORS_COLUMNS = {
    "model.num_layers": "# layers", "model.hidden_size": "hidden size",
    "model.num_attention_heads": "attention heads", "model.seq_length": "sequence length",
    "plan.tensor_parallel": "tensor parallelism", "plan.data_parallel": "data parallelism",
    "plan.pipeline_parallel": "pipeline parallelism", "plan.micro_batch_size": "micro batch",
    "plan.global_batch_size": "global batch",
}


def _finish(row: int, session: Session, measured_s: float, group: dict[str, str],
            reason: str = "", causes: list[str] | None = None,
            names: dict[str, str] | None = None, assumptions: list[str] | None = None,
            always_validate: bool = False, memory_gib: float = math.nan,
            memory_scale: str = "") -> Measurement:
    """The row's :class:`Measurement`: ``reason`` / ``causes`` of the reader's own refusals plus
    (when there are none, or with ``always_validate``) every rule core.plan.config's validation finds
    broken, each named by its session field (``names``: the file's names for them)."""
    causes = list(causes or ([reason.split(":")[0]] if reason else []))
    reasons = [reason] if reason else []
    if not reason or always_validate:
        errs = validate(session)
        if names:  # the file's own column names
            errs = [rename_field(e, names) for e in errs]
        if errs:
            reasons.append("invalid plan: " + "; ".join(e.message for e in errs))
            causes += [skip_cause(e) for e in errs]
    reason = "; ".join(reasons)
    memory_only = math.isnan(measured_s) and not math.isnan(memory_gib)
    if not reason and not math.isnan(memory_gib) and not memory_gib > 0:
        reason = f"measured peak memory {memory_gib!r} GiB is not a positive number"
        causes = ["measured memory not positive"]
    elif memory_only:
        pass  # no time to check
    elif not reason and not (measured_s > 0 and math.isfinite(measured_s)):
        reason = f"measured time {measured_s!r} is not a positive number"
        causes = ["measured time not positive"]
    elif not reason and not MEASURED_TIME_RANGE_S[0] <= measured_s <= MEASURED_TIME_RANGE_S[1]:
        reason = (f"measured time {measured_s:.4g} s is outside {MEASURED_TIME_RANGE_S[0]:g} s to "
                  f"{MEASURED_TIME_RANGE_S[1]:g} s (a day): not the time of one training "
                  "iteration (or a throughput that is not one)")
        causes = ["measured time out of range"]
    return Measurement(row, session, measured_s, reason, group, list(dict.fromkeys(causes)),
                       list(assumptions or []), memory_gib, memory_scale)


# skip_cause and skip_counts: the product's (core.accuracy.measured), not copies


def _authors_row(path: Path, row: int, header: list[str], r: list[str]) -> Measurement:
    if len(r) != len(header):
        raise MeasurementFileError(f"{path}: row {row} has {len(r)} fields, the header {len(header)}")
    v = {h: r[i].strip() for i, h in enumerate(header)}
    ints = {h: _num(path, row, h, v[h], int) for h in _AUTHORS_SINGLE[:-1]}
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
                        precision="fp16")
    cluster = ClusterConfig(gpu="A100-SXM4-80GB", gpus_per_node=8,
                            inter_node_bandwidth_gbits_per_s=800.0)
    session = Session(model, plan, cluster, CostConfig())
    reason = ""
    if plan.num_gpus != ints["# GPUs"]:
        reason = (f"# GPUs={ints['# GPUs']} disagrees with t*p*d={plan.tensor_parallel}*"
                  f"{plan.pipeline_parallel}*{plan.data_parallel}")
    group = {"model": model.name, "t": str(plan.tensor_parallel), "p": str(plan.pipeline_parallel),
             "source": "multi-node" if multi else "single-node"}
    return _finish(row, session, _num(path, row, "iteration time (ms)", v["iteration time (ms)"]) / 1e3,
                   group, reason, names=_AUTHORS_COLUMNS)


def _flag(text: str) -> bool | None:
    """A yes/no cell: ``y``, ``yes``, ``true``, ``on``, ``enabled``, ``1`` or text starting
    ``y:``/``y (`` -> True; ``n``, ``no``, ``false``, ``off``, ``disabled``, ``0``, ``n/a ...``,
    ``n (...)`` -> False; empty -> None (and None for anything else: the caller refuses it)."""
    t = text.strip().lower()
    if not t:
        return None
    word = t.replace(":", " ").replace("(", " ").replace(",", " ").split()[0]
    if word in ("y", "yes", "true", "on", "enabled", "1", "\u2713", "\u2714", "\u2611"):
        return True  # ... and check marks
    if word in ("n", "no", "false", "off", "disabled", "0", "n/a", "none", "\u2717", "\u2718",
                "\u2715", "\u00d7", "\u2610"):
        return False
    return None


#: How tables say yes in the sharding columns by naming the scheme: fsdp (full sharding,
#: ZeRO-3: FSDP1/FSDP2 FULL_SHARD, Megatron-FSDP) and distributed_optimizer (Megatron's
#: distributed optimizer, ZeRO stage 1); other columns name no scheme.
_SHARDING_WORDS = {
    "fsdp": re.compile(r"(?i)\s*(?:(?:pytorch|torch|megatron)[- ])?fsdp\s*[12]?\b(?![- ]*n\b)"
                       r"|\s*full[_ ]shard|\s*zero[- ]?(?:stage[- ]?)?3\b|\s*hsdp\b|\s*hybrid[_ ]shard"),
    "distributed_optimizer": re.compile(r"(?i)\s*zero[- ]?(?:stage[- ]?)?1\b"
                                        r"|\s*distributed[_ ]optimizer"),
}


def _has(obj: Any, name: str) -> bool:
    return any(f.name == name for f in fields(obj))


# FIELD_CAUSES: the product's table (core.accuracy.measured), not a copy of it

#: Named assumptions a row may carry (name -> what it assumes); every policy for what a source
#: leaves unstated is one of these, printed with the row (``vtrain validate --json``) and
#: documented in docs/accuracy.md ("Published runs: mapping and policies").
ASSUMPTIONS = {
    "derived-time": "the iteration time is derived from the published throughput "
                    "(global batch x sequence / (tokens/s/GPU x GPUs)), as the notes say",
    "recipe-sequence-parallel": "an empty (or n/a) sequence_parallel cell at t > 1 in a "
                                "Megatron-Bridge or torchtitan row: on (Bridge's recipes turn "
                                "it on whenever t > 1; torchtitan's tensor parallelism shards "
                                "the norms' tokens, Megatron's sequence parallelism)",
    "recipe-distributed-optimizer": "an empty (or n/a) distributed_optimizer cell in a "
                                    "Megatron-Bridge row without FSDP: y (its recipes' "
                                    "use_distributed_optimizer)",
    "shape-from-model-name": "family cells the row leaves empty (activation, norm, query "
                             "groups, ffn, vocabulary, tied embeddings, experts) from the "
                             "shipped preset of the public model the row names, whose layers, "
                             "hidden size and heads it has (its Hugging Face config)",
    "untied-llama-family": "an empty tied_embeddings cell, or no tied_embeddings column, of a "
                           "Llama-style row (SwiGLU, RMSNorm): untied, as every model of the "
                           "family the README lists",
    "tied-megatron-default": "an empty tied_embeddings cell of a row of another family (not "
                             "SwiGLU + RMSNorm): tied, Megatron-LM's default (its "
                             "--untie-embeddings-and-output-weights is a store_true flag, "
                             "default false: ../shared/data/megatron-lm/arguments.json) and what "
                             "the published runs' README says an empty cell means",
    "general-layout-default": "a column of the general layout that has a documented default is "
                              "absent from the file: that default (GENERAL_COLUMNS, the vTrain "
                              "authors' runs: vocabulary 50257, no interleaving, no sequence "
                              "parallelism, full recomputation, fp16, no distributed optimizer, "
                              "FSDP or gradient-reduce overlap)",
    "defaults-without-column": "model and plan fields that no column of the layout holds and no "
                               "other policy set: Megatron-LM's defaults "
                               "(core.accuracy.measured.CSV_DEFAULTS, as vtrain validate takes "
                               "them for an absent column of the session-column CSV), else the "
                               "session's (docs/simulator.md)",
    "column-from-command-line": "a column the file does not have, stated for every row on the "
                                "command line (--set COLUMN=VALUE): each row read as if it had "
                                "that cell",
    "grad-reduce-from-label": "the precision label names an FP32 gradient reduction ('bf16, "
                              "fp32 grad reduce', grad_reduce_in_fp32): plan.grad_reduce_dtype "
                              "fp32",
    "no-bias-from-notes": "the notes say the linear layers have no biases ('no biases', "
                          "'--disable-bias-linear', 'bias-free'): model.add_bias_linear off",
    "silu-is-swiglu": "an activation written 'silu' or 'swish' is the gated SiLU MLP (SwiGLU) "
                      "of the Llama family (Hugging Face's hidden_act 'silu' names it)",
    "geglu-as-swiglu": "a gated GELU MLP (GeGLU) is timed as SwiGLU: the same three ffn "
                       "matrices and one fused element-wise kernel of the same bytes",
    "nemotron-family": "a squared-ReLU MLP is Nemotron-4's family (Megatron-Core "
                       "--squared-relu): RoPE and no linear biases; the activation's one fused "
                       "element-wise kernel per pass is timed as GeLU's (the same bytes)",
    "time-from-throughput": "the iteration time cell is empty: it is derived from the row's "
                            "tokens_per_s_per_gpu (global batch x sequence / (tokens/s/GPU x "
                            "GPUs))",
    "parallel-size-from-gpus": "one of num_gpus, tensor_parallel, pipeline_parallel and "
                               "data_parallel is empty (or 'n/a'): it is the one that makes "
                               "num_gpus = t*p*cp*d",
    "cp-comm-type-from-notes": "the notes state Megatron-Core's --cp-comm-type a2a or a2a+p2p "
                               "(with --hierarchical-context-parallel-sizes): Q, K, V and the "
                               "output all-to-all over the (inner) cp group, not overlapped",
    "cp-all-gather-exposed": "the notes name an all-gather of K/V for context parallelism in a "
                             "row that is not torchtitan's (Megatron-Core's --cp-comm-type "
                             "all_gather, or allgather as its help spells it; Llama 3's CP, Sec. "
                             "3.3.2, which Transformer Engine's implementation follows): "
                             "plan.cp_comm_type all_gather, K/V all-gathered before the core and "
                             "their gradients reduce-scattered after it, not overlapped",
    "cp-ulysses-a2a": "the notes name Ulysses (DeepSpeed-Ulysses) or an all-to-all (a2a) "
                      "context-parallel exchange, used and no ring named: the all-to-all over "
                      "the whole cp group (plan.cp_comm_type a2a, as Megatron-Core's "
                      "--cp-comm-type a2a)",
    "torchtitan-cp-allgather": "a torchtitan row with context parallelism whose notes name no "
                               "ring, or a row whose notes name PyTorch's allgather rotation: "
                               "PyTorch context_parallel's default all-gather rotation "
                               "(torchtitan's context_parallel_rotate_method 'allgather'): K/V "
                               "all-gathered once per pass under the first step's attention, "
                               "their gradients passed around the ring (plan.cp_comm_type "
                               "allgather)",
    "overlaps-from-notes": "the overlaps the notes state (tp_comm_overlap, overlap_grad_reduce, "
                           "overlap_param_gather) win over recipes, families and framework "
                           "defaults",
    "gpu-alias": "the GPU name is the shipped kind it aliases (same memory, bandwidth and power)",
    "gpu-peak-fraction-fitted": "a GPU without a data sheet of its own (the 96 GB HBM2e H100 at "
                                "500 W): its store's peaks are the H100 SXM5 data sheet's, of "
                                "which it sustains the share (peak_fraction) fitted on its "
                                "published runs; its HBM bandwidth is the SXM5's, assumed",
    "attention-kernel-from-notes": "the notes name the attention kernel: a fused one "
                                   "(FlashAttention, TE fused / cuDNN attention, SDPA, "
                                   "--attention-backend flash/fused/auto) is attention_kernel "
                                   "flash, 'unfused' or --attention-backend unfused/local the "
                                   "unfused kernel",
    "fused-attention-framework": "a row of another model family (not SwiGLU + RMSNorm) from a "
                                 "framework whose attention is a fused kernel (Megatron-Core / "
                                 "NeMo / Megatron-Bridge: Transformer Engine; torchtitan, "
                                 "fms-fsdp: SDPA; MLPerf; llm-foundry): attention_kernel flash",
    "attention-unfused-default": "a row of another model family (not SwiGLU + RMSNorm) whose "
                                 "framework and notes name no fused attention: the unfused "
                                 "attention of Megatron-LM's GPT path (the session default)",
    "qkv-bias-from-notes": "the notes name a bias on the QKV projection (Qwen2-style): "
                           "model.add_qkv_bias",
    "llama-family": "SwiGLU + RMSNorm rows are Llama-style: RoPE, no linear biases, fused "
                    "(flash) attention",
    "megatron-recompute-default": "recompute empty in a Megatron row: Megatron-Core's default, "
                                  "no activation recomputation",
    "megatron-recompute-modules": "recompute empty and the notes name recompute_modules: "
                                  "Megatron-Core's selective recomputation of those modules",
    "megatron-recompute-method": "a full recomputation label naming Megatron's "
                                 "--recompute-method: uniform recomputes every layer (its "
                                 "chunk size changes only the memory kept), block N the "
                                 "first N layers of each model chunk, a stage or a virtual "
                                 "stage (plan.recompute_num_layers; every layer when N reaches "
                                 "the largest chunk)",
    "megatron-overlap-default": "overlap not stated in a Megatron-Bridge row: the Bridge recipes' "
                                "DDP settings (overlap_grad_reduce, and overlap_param_gather with "
                                "a sharded optimizer)",
    "bridge-perf-bf16-grad-reduce": "a Megatron-Bridge perf-summary row: gradients reduced "
                                    "in bf16 (the performance recipes set "
                                    "grad_reduce_in_fp32=False; Megatron-Bridge 0.6 "
                                    "perf_recipes/_common.py)",
    "bridge-perf-te-cross-entropy": "a Megatron-Bridge perf-summary row: the loss in "
                                    "Transformer Engine's fused cross-entropy "
                                    "(cross_entropy_loss_fusion, on by default in Bridge's "
                                    "GPTModelProvider; _benchmark_common sets "
                                    "cross_entropy_fusion_impl te)",
    "bridge-fp8-param-gather": "a Megatron-Bridge FP8 row with the distributed optimizer: the "
                               "FP8 weights all-gathered in 1 byte (fp8_param_gather=True in "
                               "Bridge 0.6's FP8 current-scaling and MXFP8 mixed-precision "
                               "configs)",
    "bridge-tp-comm-overlap": "a Megatron-Bridge row with t > 1 and sequence parallelism: the "
                              "Bridge recipes' tensor-parallel communication overlap "
                              "(tp_comm_overlap, Transformer Engine userbuffers)",
    "bridge-mla-no-tp-comm-overlap": "a Megatron-Bridge DeepSeek (MLA) row with t > 1 and "
                                     "sequence parallelism: no tensor-parallel communication "
                                     "overlap (Bridge 0.6's deepseek recipes leave "
                                     "tp_comm_overlap at Bridge's default, off: "
                                     "training/comm_overlap.py)",
    "async-tp-overlap": "torchtitan's async TP (collective matmul: the TP all-gathers and "
                        "reduce-scatters split and pipelined with their GEMMs) is tp_comm_overlap",
    "network-from-gpu-reference": "the network cell is empty: the GPU's reference node, one "
                                  "NIC per GPU (core.plan.cluster.GPU_NIC_GBITS_PER_GPU: DGX A100 "
                                  "200 Gb/s, H100/H200/B200/GB200 400 Gb/s per GPU)",
    "bandwidth-per-node-as-printed": "the printed interconnect figure, which the source does "
                                     "not say is per node or per GPU, is the node's total "
                                     "scale-out bandwidth (the column's definition)",
    "fsdp1-bf16-reduce": "PyTorch FSDP1 in bf16 mixed precision reduces gradients in bf16 "
                         "(MixedPrecision with reduce_dtype bf16, as fms-fsdp's bfSixteen policy); "
                         "FSDP2 (torchtitan) and Megatron keep their fp32 default",
    "fsdp-overlap": "FSDP prefetches parameters and reduces gradients during the passes "
                    "(overlap_param_gather and overlap_grad_reduce)",
    "megatron-fsdp-zero3": "fsdp=y on Megatron (Megatron-FSDP) is ZeRO stage 3",
    "fsdp-zero3": "fsdp=y (full shard, FSDP1/FSDP2) is ZeRO stage 3",
    "distributed-optimizer-zero1": "Megatron's distributed optimizer is ZeRO stage 1",
    "fp8-label-tensorwise": "an FP8 label naming per-tensor current scaling (Bridge 'FP8', "
                            "'fp8-cs', torchao tensorwise) is fp8_recipe=tensorwise",
    "fp8-mxfp8": "an MXFP8 label (32-element block scaling, 'FP8-MX') is fp8_recipe=mxfp8",
    "fp8-megatron-delayed": "an FP8 Megatron-LM / Megatron-Core row naming no recipe: delayed "
                            "scaling, Megatron-LM's --fp8-recipe default (Megatron-Core 0.19 "
                            "TransformerConfig.fp8_recipe; the amax history, no amax pass)",
    "hsdp-shard-size": "hybrid sharding whose cell or notes state the shard group ('2 "
                       "replicas x 4 shards', 'shard size 4', torchtitan's dp_shard=4): "
                       "plan.data_parallel_shard_size",
    "bandwidth-per-gpu-cell": "an inter_node_bandwidth_gbps cell that says it is per GPU "
                              "('400 Gb/s (per GPU)'): times the GPUs per node (the column is "
                              "the node's)",
    "mtp-deepseek-v3": "a DeepSeek-V3 row whose notes say it trains with MTP without a count "
                       "('w/ MTP'): the model's one MTP module (config.json "
                       "num_nextn_predict_layers 1)",
    "size-from-notes": "an empty (or n/a) expert_parallel / context_parallel cell whose notes "
                       "state the size by its label ('EP8', 'CP=4')",
    "sp-from-notes": "an empty (or n/a) sequence_parallel cell whose notes say it is on or off "
                     "('no sequence parallelism', 'TP without SequenceParallel', 'SP on')",
    "recompute-from-notes": "an empty (or n/a) recompute cell whose notes state the "
                            "recomputation ('activation recompute: selective (core attention)', "
                            "'--recompute-granularity full --recompute-method uniform'): read as "
                            "the cell would be",
    "vp-from-notes": "an empty virtual_pipeline_stages cell whose notes state the interleaved "
                     "schedule's virtual stages per pipeline stage ('VPP 5', 'interleaved 1F1B "
                     "with 5 virtual stages')",
    "fp8-recipe-from-notes": "an FP8 label naming no recipe whose notes name one (delayed "
                             "scaling / amax history, current scaling / tensorwise, MXFP8, "
                             "blockwise): that recipe",
    "fp8-composer-delayed": "an FP8 (amp_fp8) llm-foundry / Composer row naming no recipe: "
                            "delayed scaling (Composer's amp_fp8 runs Transformer Engine's "
                            "DelayedScaling recipe by default)",
    "fp8-recipe-unstated": "an FP8 row naming no recipe: tensorwise (per-tensor current "
                           "scaling, the default of plan.fp8_recipe)",
    "pp-layout-from-notes": "the notes' pp_layout is Megatron-Core's --pipeline-model-parallel-"
                            "layout (plan.pipeline_model_parallel_layout); its m symbols are the "
                            "multi-token prediction layers (model.mtp_num_layers)",
    "bridge-dsv3-pipeline-layout": "a DeepSeek-V3 (61 layers) Megatron-Bridge row stating no "
                                   "layout: the Bridge deepseek_v3 recipe's default layout for "
                                   "its (p, v) (as recalled from the Bridge source, not stated "
                                   "by the row): (4,1) E+16t|16t|16t|13t+L; (8,1), (4,2) "
                                   "E+8t|6 x 8t|5t+L; (16,1), (8,2), (4,4) E+4t|14 x 4t|1t+L; "
                                   "MTP layers with the loss",
    "pipeline-split-embedding-loss": "layers not divisible by p*v but L+2 is: Megatron's "
                                     "account_for_embedding/loss_in_pipeline_split (the first and "
                                     "last stages hold one layer fewer)",
    "torchtitan-pipeline-split": "layers not divisible by the p*v (virtual) stages in a "
                                 "torchtitan (or Meta, when L+2 divides) row: torchtitan's split, "
                                 "the embedding and the output layer counted as one layer each "
                                 "and the remainder on the first stages "
                                 "(plan.pipeline_model_parallel_layout)",
    "kv-channels-from-notes": "kv_channels from the notes' head_dim",
    "qk-norm-from-notes": "QK-norm from the notes",
    "router-groups-from-notes": "router groups from the notes (n_group, topk_group): "
                                "node-limited routing, which changes only a flex dispatch "
                                "across nodes",
    "etp-from-notes": "expert tensor-parallel size from the notes",
    "deepseek-v3-router-groups": "a DeepSeek-V3 row whose notes say nothing of its router "
                                 "groups: the model's node-limited routing (its config.json: "
                                 "n_group 8, topk_group 4; a token's experts in 4 of 8 groups), "
                                 "which only the flex dispatcher's node copies feel",
    "mtp-from-notes": "the multi-token prediction layers the notes state (model.mtp_num_layers)",
    "mtp-not-stated": "an MLA (DeepSeek) row whose notes do not name multi-token prediction: "
                      "none (model.mtp_num_layers 0), as the rows that state it ('w/o MTP')",
    "mla-from-notes": "multi-head latent attention's ranks and head sizes from the notes "
                      "(q_lora, kv_lora, qk_nope + qk_rope, v_head), with the latent norms "
                      "(model.qk_layernorm: DeepSeek-V2/V3's q_a_layernorm and kv_a_layernorm)",
    "moe-from-notes": "shared experts, dense first layers and MoE layer frequency from the notes; "
                      "MoE in every layer when the notes name no dense layers",
    "moe-balanced-routing": "routing balanced (moe_imbalance_factor 1): the notes say routing "
                            "was forced balanced, or say nothing of it",
    "etp-megatron-default": "expert tensor-parallel size not stated: Megatron-Core's default, t",
    "bridge-moe-etp-1": "a Megatron-Bridge DeepSeek-V3 or Qwen3 MoE row with t > 1 that states no "
                        "expert tensor-parallel size: 1, as the model's Bridge base recipe sets "
                        "(expert_tensor_parallel_size=1; Megatron-Core's own default would be t)",
    "etp-forced-1": "expert tensor-parallel size not stated and t*ep exceeds the t*cp*d ranks of "
                    "a pipeline stage: 1, the only size that fits",
    "dispatcher-alltoall-from-notes": "the notes name the alltoall token dispatcher: "
                                      "Megatron-Core's alltoall (NCCL all-to-all)",
    "bridge-perf-recipe-layout": "the custom pipeline layout of the row's Megatron-Bridge perf "
                                 "recipe, or of every recipe of its family at its p and v "
                                 "(pipeline_model_parallel_layout; its MTP layers left out when "
                                 "the row has none)",
    "dispatcher-flex-from-notes": "the notes name DeepEP or HybridEP: "
                                  "plan.moe_token_dispatcher_type flex (one copy of a token per "
                                  "other node that holds one of its experts, forwarded over "
                                  "NVLink); MoE rows that name no dispatcher keep alltoall",
    "ep-a2a-overlap-from-notes": "the notes name the expert all-to-all overlap "
                                 "(overlap_moe_expert_parallel_comm, 'A2A overlap', 'EP "
                                 "overlap'): Megatron-Core's combined 1F1B, the all-to-alls of "
                                 "one micro-batch under another's computation; MoE rows that do "
                                 "not name it run without",
    "delay-wgrad-from-notes": "the notes name delay_wgrad_compute: plan.delay_wgrad_compute "
                              "(the experts' weight gradients beside the backward's dispatch "
                              "all-to-all; needs the overlap)",
    "torchtitan-selective-op": "'selective (per-op SAC)' is torchtitan's per-op selective "
                               "activation checkpointing, recompute=selective_op (every other "
                               "matmul, the attention output, reduce-scatters and amax saved; "
                               "the rest, the tensor-parallel all-gathers with it, recomputed)",
    "fp8-param-gather-from-label": "an FP8 label naming FSDP float8 all-gather is "
                                   "fp8_param_gather (the FP8 linear layers' weights gathered "
                                   "in 1 byte)",
    "hsdp-node-shard": "HSDP sharding within a node and replicating across nodes shards over "
                       "the gpus_per_node/(t*cp) data-parallel ranks of a node "
                       "(data_parallel_shard_size)",
    "window-from-notes": "the notes' 'N-token sliding window' alternating with full causal "
                         "attention: window_size N on every other layer from the first "
                         "(Megatron-Core --window-attn-skip-freq 2, GPT-OSS's layer_types)",
    "attention-sinks-learnable": "the notes' attention sinks are Megatron-Core's learnable "
                                 "softmax offset (softmax_type learnable, one logit per head), "
                                 "timed as FlashAttention without sinks (one more logit per row)",
    "clamped-swiglu": "a 'swiglu (clamped ...)' activation is GPT-OSS's gated MLP (quick-GELU "
                      "gate, --activation-func-clamp-value 7, --glu-linear-offset 1): the gate "
                      "and offset timed as SwiGLU's fused kernel, the clamp as Megatron-Core's "
                      "eager chunk, clamps and cat before it",
    "bridge-dsv3-flex-dispatcher": "a DeepSeek-V3 Megatron-Bridge row that names no "
                                   "dispatcher and matches no perf recipe: the flex dispatcher "
                                   "(HybridEP), as Megatron-Bridge 0.6.2's deepseek_v3 base "
                                   "recipe sets it (recipes/deepseek/h100/deepseek_v3.py, "
                                   "moe_flex_dispatcher_backend hybridep, applied on Hopper and "
                                   "Blackwell by training/flex_dispatcher_backend.py) and every "
                                   "DeepSeek-V3 perf recipe keeps it",
    "nemo-recipe-defaults": "a NeMo 2 (not Megatron-Bridge) row: what NeMo 2.4's recipes and "
                            "performance scripts set and the row leaves unstated "
                            "(nemo_toolkit 2.4.0: the recipes' DistributedDataParallelConfig "
                            "overlaps the gradient reduction and the parameter all-gather; "
                            "scripts/performance/helpers.py set_precision_configs reduces "
                            "gradients in bf16, takes --fp8_recipe ds, delayed scaling, for a "
                            "bare FP8, gathers FP8 parameters and, with MXFP8, does not "
                            "overlap the all-gather; the dense models' performance recipes "
                            "add MegatronCommOverlapCallback(tp_comm_overlap=True); GPTConfig's "
                            "cross_entropy_loss_fusion is on and set_perf_optimization_configs "
                            "picks Transformer Engine's kernels)",
    "bridge-perf-recipe": "a Megatron-Bridge performance-summary row that matches a "
                          f"{BRIDGE_VERSION} performance recipe on GPU, model, GPUs, "
                          "precision, t, p, v, cp, ep and micro-batch (the global batch "
                          "is an override of the recipe; core.accuracy.bridge_recipes): the recipe's "
                          "recomputation, MoE dispatcher, "
                          "expert all-to-all overlap, delayed weight gradients, TP "
                          "communication overlap, DDP overlaps, FP8 parameter all-gather, "
                          "custom pipeline layout and MTP layers where the row does not state "
                          "them; what the recipe runs that is not modelled refuses the row",
    "bridge-perf-recipe-family": "a Megatron-Bridge performance-summary row that matches no "
                                 f"{BRIDGE_VERSION} performance recipe (another layout or GPU "
                                 "count, often an older container's run): what every summary "
                                 "recipe of its GPU kind, model and precision sets alike "
                                 "(core.accuracy.bridge_recipes.bridge_recipe_family; recipes refused "
                                 "by name are not family), where the row does not state it and "
                                 "its layout can run it; settings the recipes differ on keep "
                                 "the general assumptions",
    "biased-from-activation": "'biased' in the activation label: biases in every linear layer "
                              "(add_bias_linear; GPT-OSS: attention, router and experts)",
}

#: Column -> session field for the published-runs layout (the columns of
#: ../shared/data/public-modern/README.md; ISSUE 11 field names).
PUBLISHED_FIELDS = {
    "num_layers": "model.num_layers", "hidden_size": "model.hidden_size",
    "num_attention_heads": "model.num_attention_heads", "num_query_groups": "model.num_query_groups",
    "ffn_hidden_size": "model.ffn_hidden_size", "activation": "model.activation",
    "normalization": "model.normalization", "seq_length": "model.seq_length",
    "vocab_size": "model.vocab_size", "tied_embeddings": "model.tied_embeddings",
    "num_experts": "model.num_experts", "moe_top_k": "model.moe_top_k",
    "moe_ffn_hidden_size": "model.moe_ffn_hidden_size",
    "global_batch_size": "plan.global_batch_size", "micro_batch_size": "plan.micro_batch_size",
    "tensor_parallel": "plan.tensor_parallel", "pipeline_parallel": "plan.pipeline_parallel",
    "data_parallel": "plan.data_parallel", "context_parallel": "plan.context_parallel",
    "expert_parallel": "plan.expert_parallel",
    "virtual_pipeline_stages": "plan.virtual_pipeline_stages (and plan.schedule)",
    "sequence_parallel": "plan.sequence_parallel", "recompute": "plan.recompute",
    "distributed_optimizer": "plan.zero_stage", "fsdp": "plan.zero_stage",
    "precision": "plan.precision and plan.fp8_recipe", "gpu": "cluster.gpu",
    "gpus_per_node": "cluster.gpus_per_node",
    "inter_node_bandwidth_gbps": "cluster.inter_node_bandwidth_gbits_per_s",
    "num_gpus": "checked: t*p*cp*d", "measured_iteration_time_s": "the measured time",
}


class _Row:
    """Collects a row's refusals (reason, cause) and named assumptions while it is mapped."""

    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.causes: list[str] = []
        self.assumptions: list[str] = []
        self.fp8_param_gather = False  # the precision label names an FP8 parameter all-gather
        self.grad_reduce_fp32 = False  # ... or an FP32 gradient reduction
        self.pp_layout: str | None = None  # the notes' custom pipeline layout (pp_layout)
        self.dispatcher: str | None = None  # the notes' MoE token dispatcher (flex: DeepEP...)
        self.ep_overlap = False  # the notes name the expert all-to-all overlap
        self.delay_wgrad = False  # ... and Megatron-Core's delay_wgrad_compute
        self.ep_overlap_off = False  # the notes say the expert all-to-all overlap is off
        self.delay_wgrad_off = False  # ... and delay_wgrad_compute

    def refuse(self, cause: str, why: str) -> None:
        self.causes.append(cause)
        self.reasons.append(why)

    def assume(self, name: str, detail: str = "") -> None:
        text = f"{name}: {ASSUMPTIONS[name]}" + (f" ({detail})" if detail else "")
        if text not in self.assumptions:
            self.assumptions.append(text)

    def withdraw(self, name: str) -> bool:
        """Drop assumption ``name`` (a better-informed policy replaced it); whether it was made."""
        kept = [a for a in self.assumptions if not a.startswith(f"{name}:")]
        made, self.assumptions = len(kept) < len(self.assumptions), kept
        return made

    def put(self, obj: Any, section: str, name: str, value: Any) -> None:
        """Set ``obj.name`` when the session has that field (its validation then judges the
        value); without the field, a value other than the unset one is refused by name."""
        if _has(obj, name):
            setattr(obj, name, value)
        else:
            path = f"{section}.{name}"
            self.refuse(FIELD_CAUSES.get(path, f"{path} not modelled"),
                        f"{path}={value!r} is not modelled yet (the session has no {name} field)")


_MEGATRON = re.compile(r"megatron|nemo", re.I)
#: Frameworks whose attention is a fused kernel whatever the model (Transformer Engine's
#: fused / flash attention in Megatron-Core, NeMo and Megatron-Bridge; SDPA in torchtitan and
#: fms-fsdp; the MLPerf submissions run NeMo / Megatron-Core).
_MODERN_FRAMEWORK = re.compile(r"megatron[- ]core|mcore|core_r\d|nemo|bridge|torchtitan|fms|"
                               r"mlperf|llm[- ]foundry|composer", re.I)


#: Megatron-Core's --recompute-modules names.
_MEGATRON_RECOMPUTE_MODULES = ("core_attn", "mlp", "layernorm", "moe", "moe_act", "mla_up_proj",
                               "shared_experts")


def _recompute_policy(text: str, framework: str, notes: str, row: _Row,
                      plan: Any = None) -> str:
    """plan.recompute of a published row (see ASSUMPTIONS and docs/accuracy.md); with ``plan``
    a notes' module list goes to ``plan.recompute_modules`` where the plan has that field."""
    t = text.strip().lower()
    if not t.startswith("none") and _NOT_STATED.fullmatch(t):
        t = ""  # "n/a", "-", "not stated": as an empty cell ("none" is no recomputation)
    megatron = bool(_MEGATRON.search(framework))
    modules = re.search(r"recompute_modules\s*=\s*\[([^\]]*)\]", notes)
    if not t and megatron:
        if modules:
            names = [x.strip().strip("'\"") for x in modules.group(1).split(",") if x.strip()]
            if names == ["core_attn"]:
                row.assume("megatron-recompute-modules")
                return "selective"
            if plan is not None and _has(plan, "recompute_modules"):
                # Megatron-Core's selective recomputation by module: validation judges the names
                plan.recompute_modules = ",".join(names)
                row.assume("megatron-recompute-modules", f"recompute_modules={','.join(names)}")
                return "selective"
            row.refuse("selective recomputation (other than Megatron's)",
                       f"recompute_modules=[{', '.join(names)}] (from the notes): recomputing "
                       "these modules is not modelled (selective recomputation here is the "
                       "attention core, recompute_modules=[core_attn])")
            return "full"
        row.assume("megatron-recompute-default")
        return "none"
    if not t:
        row.refuse("recompute not stated", f"recompute is empty: {framework or 'the source'} does "
                   "not say, and the time depends on it")
        return "full"
    # "activation checkpointing: full", "recompute: none", "AC=full": the mode after its name
    t = re.sub(r"^(?:full[- ])?(?:activation[- ])?(?:checkpointing|recompute|recomputation|ac)\s*[:=]\s*",
               "", t) or t
    if (t in RECOMPUTE_CHOICES and (t != "selective" or megatron or not framework)
            and not (t == "selective_op" and megatron)):
        return t  # without a framework column the cell is in the session's terms
    named = re.fullmatch(r"(?:per-?)?op(?:[- _]level)?[- _]?sac|sac\s*\(op\)|selective[- _]op"
                         r"|(?:mode\s*=\s*)?selective,?\s*selective_ac_option\s*=\s*['\"]?op['\"]?", t)
    per_op = named or (t.startswith("selective") and ("per-op" in t or re.search(r"\bsac\b", t)))
    if per_op and megatron:
        row.refuse("selective recomputation (other than Megatron's)",
                   f"recompute={text!r}: per-op selective activation checkpointing is PyTorch's "
                   f"(torchtitan); {framework} recomputes by module (--recompute-modules), and the "
                   "row does not say which")
        return "full"
    if per_op:
        row.assume("torchtitan-selective-op", *([t] if named else []))
        return "selective_op"  # torchtitan's per-op selective activation checkpointing
    cell_modules = re.fullmatch(r"(?:selective\s*[(\[]?\s*)?recompute_modules\s*[=:]\s*\[([^\]]*)\]\s*[)\]]?",
                                t)
    if cell_modules and megatron:  # Megatron-Core's module list, in the cell itself
        return _recompute_policy("", framework, f"recompute_modules=[{cell_modules.group(1)}]",
                                 row, plan)
    if t in ("no", "off", "disabled", "false", "0", "no recompute", "no recomputation",
             "no checkpointing", "no activation checkpointing"):
        return "none"  # a yes/no cell's no: nothing recomputed
    first = re.split(r"[\s(:;,]", t, maxsplit=1)[0]
    if first == "full" and re.match(r"full\s*\((?:all|every) (?:blocks?|layers?)\b", t):
        return "full"  # "full (all blocks)", "full (every block; ...)": every layer
    if first == "none" and re.fullmatch(r"none\s*\((?:ac|activation checkpointing|checkpointing|"
                                        r"recompute|recomputation)?\s*(?:off|disabled|none)?\)"
                                        r"|none\s*\(no (?:activation )?(?:checkpointing|recompute|"
                                        r"recomputation)\)", t):
        return "none"
    if first == "full" and "block" in t and not (megatron or not framework):
        row.refuse("recompute", f"recompute={text!r}: block recomputation is Megatron's "
                   f"--recompute-method; {framework} does not say which layers it means")
        return "full"
    if first == "full" and not re.search(r"partial|offload|fraction|every (other|\d)|alternat", t):
        # Megatron's --recompute-method: uniform recomputes every layer (in chunks of
        # --recompute-num-layers: the time of full, the chunks change only the memory kept);
        # block recomputes the first N layers of each model chunk (plan.recompute_num_layers)
        n = re.search(r"(?<![\w.+-])(\d+)\s*layers?\b|num[_ -]layers\s*[=:]?\s*(\d+)(?![\w.])", t)
        if "block" in t:
            count = int(n.group(1) or n.group(2)) if n else 0
            if (count < 1 or "uniform" in t or plan is None
                    or not _has(plan, "recompute_num_layers")):
                row.refuse("recompute", f"recompute={text!r}: block recomputation needs its "
                           "number of layers per model chunk, a whole number of at least 1 (and not "
                           "uniform too)")
                return "full"
            plan.recompute_num_layers = count
            row.assume("megatron-recompute-method", f"block, {plan.recompute_num_layers} layers "
                       "per model chunk")
            return "full"
        if "uniform" in t or not re.search(r"\d+\s*layers?\b|num[_ -]layers|\blayers\b|\bblock", t):
            if "uniform" in t:
                row.assume("megatron-recompute-method", "uniform: every layer")
            return "full"  # "full", "full (uniform, 1 layer)"
    if first == "none" and not re.search(r"\d|block|partial|layers|offload", t):
        return first  # "none (no checkpointing)": the mode, qualified
    if t.startswith("selective") and megatron and re.fullmatch(
            r"selective\s*[(\[]\s*(?:recompute_modules\s*=\s*)?\[?\s*['\"]?(?:core_attn|core[- ]attention"
            r"|attention(?: core)?|attn|self[- ]attention)['\"]?\s*\]?\s*[)\]]", t):
        return "selective"  # "selective (core_attn)", "(attention)": Megatron's, the attention core
    listed = re.fullmatch(r"selective\s*[(\[]\s*([a-z_,\s]+)[)\]]", t)
    names = [x.strip() for x in listed.group(1).split(",") if x.strip()] if listed else []
    if megatron and names and all(x in _MEGATRON_RECOMPUTE_MODULES for x in names):
        # "selective (core_attn, mlp)": Megatron-Core's --recompute-modules, in the cell
        return _recompute_policy("", framework, f"recompute_modules=[{', '.join(names)}]", row, plan)
    if t.startswith("selective"):
        if re.search(r"\(op\)|\bop\b", t) and re.search(r"torchtitan", framework, re.I):
            row.assume("torchtitan-selective-op")
            return "selective_op"  # validation refuses what it does not model (MoE, ...)
        if "fraction" in t or "block" in t:
            why = "block-level checkpointing of a fraction of the layers that is not stated"
        else:
            why = (f"selective recomputation in {framework or 'a framework other than Megatron'} "
                   "is not Megatron's (the attention core)")
        row.refuse("selective recomputation (other than Megatron's)", f"recompute={text!r}: {why}; "
                   "only Megatron's selective recomputation (the attention core) is modelled")
        return "full"
    row.refuse("recompute", f"recompute={text!r} is not one of {', '.join(RECOMPUTE_CHOICES)}")
    return "full"


#: Dtype words of precision labels -> plan.precision.
_DTYPE_WORDS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
                "fp32": "fp32", "float32": "fp32"}


def _precision_policy(text: str, row: _Row) -> tuple[str, str | None]:
    """(plan.precision, plan.fp8_recipe) of a published row's precision label."""
    t = text.strip().lower()
    first = re.split(r"[\s(]", t, maxsplit=1)[0] if t else ""
    if not t:
        row.refuse("precision not stated", "precision is empty: the source does not say")
        return "bf16", None
    # what a label says it is not: "BF16 (no FP8)", "FP8 (delayed scaling rather than current
    # scaling)", "FP8 (per-tensor delayed, not MXFP8)"
    t = re.sub(r"\b(?:no|not|without|rather than|instead of)\s+(?:fp8|float8|mxfp8|fp8-mx|current[- ]scaling"
               r"|tensorwise|delayed(?: scaling)?|blockwise|rowwise)\b|\b(?:fp8|float8)\s+(?:not used|off|"
               r"disabled|unused)\b", "", t).strip(" ,;()")
    first = re.split(r"[\s(]", t, maxsplit=1)[0] if t else ""
    if re.search(r"(?:fp32|float32)[- ](?:grad(?:ient)?s?[- ]?(?:reduc\w*|all[- ]?reduce|comm\w*)"
                 r"|reduc\w*)|grad_reduce_in_fp32", t):
        row.grad_reduce_fp32 = True  # "bf16, fp32 grad reduce": plan.grad_reduce_dtype fp32
        t = re.sub(r"[,;+]?\s*(?:fp32|float32)[- ](?:grad(?:ient)?s?[- ]?(?:reduc\w*|all[- ]?reduce"
                   r"|comm\w*)|reduc\w*)|[,;+]?\s*grad_reduce_in_fp32", "", t).strip()
        first = re.split(r"[\s(]", t, maxsplit=1)[0] if t else ""
    if re.search(r"\b(?:bf16|fp16|bfloat16|float16)[- _]true\b|\bpure (?:bf16|bfloat16|fp16)\b", t):
        row.refuse("precision", f"precision={text!r}: pure half-precision training (weights and "
                   "optimizer without FP32 master copies, Lightning's '-true') is not modelled; "
                   "the modelled bf16 / fp16 are mixed precision")
        return "bf16", None
    if not re.search(r"fp8|float8|e4m3|e5m2", t):
        if first in PRECISIONS:
            return first, None  # "bf16 mixed precision" is bf16
        # "bf16-mixed" (Lightning / NeMo), "amp_bf16" (llm-foundry), "bfloat16": one dtype named
        named = {_DTYPE_WORDS[w] for w in re.findall(r"bfloat16|float16|float32|bf16|fp16|fp32", t)}
        if len(named) == 1:
            return named.pop(), None
        half = named - {"fp32"}
        if len(half) == 1 and re.search(r"master|optimi[sz]er|main[- ]?(?:params|weights)", t):
            return half.pop(), None  # "bf16 with fp32 master weights": mixed precision itself
        row.refuse("precision", f"precision={text!r} is not one of {', '.join(PRECISIONS)}")
        return "bf16", None
    if "inferred" in t:
        row.refuse("precision not stated", f"precision={text!r}: the source does not state it")
        return "fp8", None
    if re.search(r"fp8[- ](?:dot[- ]product[- ])?attention|fp8[_ ]dpa|fp8_dot_product_attention", t):
        row.refuse("FP8 attention (fp8_dot_product_attention)",
                   f"precision={text!r}: the attention core in FP8; FP8 attention is not "
                   "modelled (the core is timed in BF16)")
    gather = re.search(r"all-gather", t)
    if gather and not _negated_at(t, gather.start(), gather.end()):
        # FSDP float8 all-gather: plan.fp8_param_gather (_general_row); not "... all-gather off"
        row.assume("fp8-param-gather-from-label")
        row.fp8_param_gather = True
    # the label itself first ("fp8", "fp8-cs", "mxfp8", "fp8 tensorwise ..."), then, for a bare
    # "fp8", what its parenthesis says the label means
    main, _, paren = t.partition("(")
    if "mxfp8" in main or "fp8-mx" in main:
        row.assume("fp8-mxfp8")
        return "fp8", "mxfp8"
    for text_ in (main, paren):  # a bare "fp8" label: what its parenthesis says it means
        if re.search(r"current[- ]scaling|fp8-cs|tensorwise", text_):
            row.assume("fp8-label-tensorwise")
            return "fp8", "tensorwise"
        if re.search(r"mxfp8|fp8-mx|\bmx\b|microscal", text_):  # "fp8 (mxfp8)"
            row.assume("fp8-mxfp8")
            return "fp8", "mxfp8"
        if "rowwise" in text_:
            row.refuse("rowwise FP8 scaling", f"precision={text!r}: rowwise float8 scaling "
                       "(torchao: one scale per row of each operand) is not modelled; the modelled "
                       "recipes are delayed, tensorwise, mxfp8 and blockwise")
            return "fp8", None
        if re.search(r"blockwise|128x128|sub[- ]?channel|fp8[-_ ]?sc\b|deepseek", text_):
            return "fp8", "blockwise"
        if "delayed" in text_ or re.search(r"fp8[-_ ]ds\b|\(ds\)", text_):  # NeMo's --fp8_recipe ds
            return "fp8", "delayed"
    row.assume("fp8-recipe-unstated")
    return "fp8", "tensorwise"


def _notes_fp8_recipe(notes: str) -> str | None:
    """The FP8 recipe an FP8 row's notes name when its label names none ("fp8 delayed scaling
    (amax history 1024)", "per-tensor current scaling", "--fp8-recipe mxfp8", "blockwise"):
    ``delayed``, ``tensorwise``, ``mxfp8``, ``blockwise``, ``rowwise`` (refused by the caller),
    or None (none, or several)."""
    found = set()
    for recipe, pat in (("delayed", r"delayed[- ]scaling|fp8[_ -]recipe\s*[=:]?\s*['\"]?delayed|amax[- ]history"),
                        ("tensorwise", r"current[- ]scaling|tensorwise|fp8[-_ ]cs\b"),
                        ("mxfp8", r"mxfp8|fp8[-_ ]mx\b|microscal"),
                        ("blockwise", r"blockwise|128x128|fp8[-_ ]sc\b"),
                        ("rowwise", r"rowwise")):
        if any(_mention_used(notes, m) and not _about_other_run(notes, m.start(), m.end())
               for m in re.finditer(pat, notes, re.I)):
            found.add(recipe)
    return found.pop() if len(found) == 1 else None


def _notes_policy(notes: str, model: ModelConfig, v: dict, opt: dict, row: _Row) -> None:
    """What the notes say of the model that the columns cannot hold (README: MoE particulars,
    latent attention, sliding windows; head size; QK-norm)."""
    n = notes
    layout = re.search(r"(?:\bpp_layout|pipeline[_ -](?:model[_ -]parallel[_ -])?layout)\s*[:=]?\s*"
                       r"['\"]?([EtmL|()*\d,]*[EtL][EtmL|()*\d,]*)", n)
    if layout:  # Megatron-Core's layout string (commas are Megatron's optional separators)
        row.pp_layout = layout.group(1).strip(",")
        row.assume("pp-layout-from-notes", row.pp_layout)
        mtp = _layout_mtp(row.pp_layout)
        if mtp:
            row.put(model, "model", "mtp_num_layers", mtp)
    heads = {int(m.group(1) or m.group(2)) for m in re.finditer(
        r"(?<![a-z_])(?:head[_ ](?:dim(?:ension)?|size)|kv[_ ]channels)\s*(?:of\s*)?[=:]?\s*(\d+)"
        r"|\b(\d+)[- ]dim(?:ensional)? heads\b", n, re.I)}
    if len(heads) == 1:
        hd = heads.pop()
        if hd * model.num_attention_heads != model.hidden_size:
            row.assume("kv-channels-from-notes", f"kv_channels={hd}")
            row.put(model, "model", "kv_channels", hd)
    elif len(heads) > 1:
        row.refuse("head size", f"the notes state head sizes {sorted(heads)}")
    qkn = [m for m in re.finditer(r"qk[- _]?(?:layer[- _]?|rms[- _]?)?norm|query[/ -]key (?:layer|rms)?[- ]?norm"
                                  r"|qk_layernorm", n, re.I)]
    if any(_mention_used(n, m) and not re.match(r"\s*=\s*(?:false|0)", n[m.end():], re.I)
           for m in qkn):
        row.assume("qk-norm-from-notes")
        model.qk_layernorm = True
    if re.search(r"\bMLA\b|latent attention|kv_lora", n, re.I):
        _mla_policy(n, model, row)
    windows = [m for m in re.finditer(r"sliding[- ]window|\bSWA\b", n, re.I) if _mention_used(n, m)]
    if windows:
        _window_policy(n, model, row)
    if any(not _negated_at(n, m.start(), m.end()) for m in re.finditer(r"attention sinks?", n, re.I)):
        row.put(model, "model", "softmax_type", "learnable")
        row.assume("attention-sinks-learnable")
    for cause, what, pattern in (  # what no plan field holds: refused, as from a recipe
            ("CPU activation offloading", "activation offloading",
             r"cpu[_ ](?:activation[_ ])?offload\w*|activation offload\w*|offload\w* (?:the )?"
             r"activations?|offloaded to (?:the )?(?:cpu|host)"),
            ("FP8 attention (fp8_dot_product_attention)", "FP8 attention (the attention core in FP8)",
             r"fp8[_ ]dot[_ ]product[_ ]attention|fp8[- _]dpa\b|fp8 attention")):
        named = [m for m in re.finditer(pattern, n, re.I)
                 if _mention_used(n, m) and not _about_other_run(n, m.start(), m.end())
                 and not re.match(r"\w*\s*[=:]\s*(?:0|false|none|off)\b", n[m.end():], re.I)]
        if named:
            row.refuse(cause, f"the notes name {what} ({named[0].group(0)!r}), which is not "
                       "modelled")
    hybrid = _HYBRID_LAYERS.search(f"{model.name} {n}")
    if hybrid and not _negated_at(f"{model.name} {n}", hybrid.start(), hybrid.end()):
        row.refuse("hybrid model (Mamba / state-space or linear-attention layers)",
                   f"the row names {hybrid.group(0)!r}: layers other than attention and MLP "
                   "(Mamba / state-space, linear attention) are not modelled, and timing them as "
                   "transformer layers would be another model")
    mtp_n = _notes_mtp_layers(n)
    if mtp_n == -1:
        row.refuse("multi-token prediction", "the notes state contradictory numbers of "
                   "multi-token prediction (MTP) layers")
    elif mtp_n is not None and not row.pp_layout:
        if mtp_n:  # a count stated ("mtp_num_layers=1", "1 MTP layer"); "w/o MTP" is the 0 rows
            row.put(model, "model", "mtp_num_layers", mtp_n)  # have always read as none
            row.assume("mtp-from-notes", f"mtp_num_layers={mtp_n}")
    elif (mtp_n is None and not row.pp_layout and _DEEPSEEK_V3.search(model.name)
          and re.search(r"\b(?:w/|with)\s+MTP\b|\bMTP\s+(?:on|enabled|used)\b", n, re.I)):
        row.put(model, "model", "mtp_num_layers", 1)  # the model's one MTP module
        row.assume("mtp-deepseek-v3", "w/ MTP: num_nextn_predict_layers 1")
    elif (re.search(r"(?<!w/o )(?<!without )\bMTP\b|multi-token prediction", n, re.I)
          and mtp_n is None and not row.pp_layout):
        row.refuse("multi-token prediction", "the notes name multi-token prediction (MTP) "
                   "without its number of layers (model.mtp_num_layers)")
    if re.search(r"pp_layout|pipeline[_ ]layout", n, re.I) and row.pp_layout is None:
        row.refuse("custom pipeline layout", "the notes name a custom pipeline layout without "
                   "its layout string ('pp_layout X'; plan.pipeline_model_parallel_layout)")
    e = opt["num_experts"]
    if not (e and e > 1):
        return
    moe_ffn = opt["moe_ffn_hidden_size"] or model.ffn
    shared = _notes_shared_width(n, moe_ffn)
    if shared == -1:
        row.refuse("mixture of experts (shared experts)", "the notes name shared experts in a "
                   "form not read here, or with contradictory sizes ('N shared experts (W)', "
                   "'shared expert: N x W', 'N shared + M routed', 'n_shared_experts=N', "
                   "'moe_shared_expert_intermediate_size=W')")
    elif shared:
        if shared % moe_ffn:
            row.refuse("mixture of experts (shared experts)", f"shared experts {shared} wide in all "
                       f"are not a whole number of experts {moe_ffn} wide")
        else:
            row.put(model, "model", "num_shared_experts", shared // moe_ffn)
    dense, dense_ffn = _notes_dense_layers(n, model.num_layers)
    if dense == -1:
        row.refuse("mixture of experts (first dense layers)", "the notes name dense layers in a "
                   "form not read here, or with contradictory counts ('first N layers dense', "
                   "'N dense layers then M MoE layers', 'first_k_dense_replace=N', "
                   "'moe_layer_freq [0]*N+[1]*M')")
    elif dense:
        if dense_ffn and dense_ffn != model.ffn:
            row.refuse("mixture of experts (first dense layers)", f"the dense layers' FFN "
                       f"{dense_ffn} differs from ffn_hidden_size={model.ffn}")
        row.put(model, "model", "moe_first_dense_layers", dense)
    row.assume("moe-from-notes")
    capacity = re.search(r"capacity[- _]factor\s*[=:]?\s*(?:of\s*)?([\d.]+)", n, re.I)
    dropless = [m for m in re.finditer(r"drop[- ]?less|no token[- ]dropp\w*", n, re.I)
                if _mention_used(n, m)]
    if capacity and not dropless:
        row.refuse("MoE capacity factor (token dropping)", f"the notes name an expert capacity "
                   f"factor ({capacity.group(0)!r}): tokens beyond each expert's capacity are "
                   "dropped (and with padding every expert computes its whole capacity); "
                   "neither is modelled (routing is dropless, balanced or with "
                   "plan.moe_imbalance_factor)")
    row.assume("moe-balanced-routing")
    if any(not _negated_at(n, m.start(), m.end()) for m in re.finditer(
            r"HybridEP|DeepEP|flex dispatcher|dispatcher[_ a-z]*\s*[=:]\s*['\"]?flex\b", n, re.I)):
        row.assume("dispatcher-flex-from-notes")
        row.dispatcher = "flex"
    elif re.search(r"all-?to-?all\s+(?:token\s+)?dispatcher|dispatcher[\s:=_a-z-]*\ball-?to-?all\b"
                   r"|\b(?:plain|standard|nccl)\s+all-?to-?all\b", n, re.I):
        row.assume("dispatcher-alltoall-from-notes")
        row.dispatcher = "alltoall"
    elif re.search(r"dispatcher", n, re.I):
        said = re.search(r"[^;,.]{0,30}dispatcher[^;,.]{0,30}", n, re.I)
        row.refuse("token dispatcher", "the notes name a token dispatcher other than alltoall "
                   f"and flex (DeepEP, HybridEP): {said.group(0).strip()!r}")
    # each mention on unless negated where it stands ("EP overlap kept on, no token dropping"
    # is on; "expert-parallel communication overlap disabled" is off)
    for attr, what, pattern in (
            ("ep_overlap", "the expert all-to-all overlap",
             r"overlap[_-]moe[_-]expert[_-]parallel[_-]comm|moe[_-]a2a[_-]overlap|\b(?:A2A|EP|all-to-all|"
             r"expert[- ]parallel(?: all-to-all)?) (?:comm(?:unication)? )?overlap"),
            ("delay_wgrad", "delay_wgrad_compute", r"delay[_-]wgrad(?:[_-]compute)?|delay(?:ed)? wgrad")):
        said = {not _negated_at(n, m.start(), m.end()) for m in re.finditer(pattern, n, re.I)
                if not _about_other_run(n, m.start(), m.end())}
        if len(said) > 1:
            row.refuse("overlaps stated both on and off", f"the notes state {what} both on and off")
        elif said == {False}:
            setattr(row, attr + "_off", True)  # a recipe's or family's setting does not apply
        elif said == {True}:
            row.assume("ep-a2a-overlap-from-notes" if attr == "ep_overlap" else "delay-wgrad-from-notes")
            setattr(row, attr, True)


#: Number words of notes ("one shared expert", "the first three layers").
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "a": 1, "an": 1, "single": 1}
_N = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten|a|an|single)"


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


def _notes_dense_layers(notes: str, num_layers: int) -> tuple[int, int | None]:
    """``(first dense layers, their FFN width or None)`` an MoE row's notes state, in the ways
    tables write it ("first 3 layers dense FFN 18432", "3 dense layers first then 58 MoE
    layers", "dense FFN in the first three layers", "first layer dense", "layers 0-2 dense",
    "first_k_dense_replace=3", "moe_layer_freq [0]*3+[1]*58"); ``(0, None)`` when they name no
    dense layer, ``(-1, None)`` when they name dense layers in another form or contradict
    themselves (the caller refuses the row)."""
    counts: set[int] = set()
    width = None
    pats = (rf"first {_N} (?:transformer )?layers? (?:are |is )?dense",
            rf"{_N} dense (?:FFN |MLP )?layers?(?: first| at the start| then| followed)",
            rf"dense (?:FFN|MLP) (?:in|for) the first {_N} layers?",
            rf"(?:the )?first {_N} layers? (?:use|have|with) (?:a )?dense (?:FFN|MLP)",
            r"first[_ ]k[_ ]dense[_ ]replace\s*[=:]?\s*(\d+)",
            r"layers? 0\s*[-\u2013]\s*(\d+) (?:are )?dense",
            r"dense (?:FFN |MLP )?(?:in )?layers? 1\s*[-\u2013]\s*(\d+)\b")
    for i, pat in enumerate(pats):
        for m in re.finditer(pat, notes, re.I):
            counts.add(int(m.group(1)) + 1 if i == 5 else _count(m.group(1)))
    if re.search(r"first (?:transformer )?layer (?:is )?dense", notes, re.I):
        counts.add(1)
    freq = re.search(r"moe[_ -]layer[_ -]freq\w*\s*[=:]?\s*[(\[]*\s*\[0\]\s*\*\s*(\d+)\s*\+\s*"
                     r"\[1\]\s*\*\s*(\d+)", notes, re.I)
    if freq:
        counts.add(int(freq.group(1)) if int(freq.group(1)) + int(freq.group(2)) == num_layers
                   else -1)
    moe_after = re.search(r"(?:then|other|followed by|and|\+)\s+(\d+)\s+MoE(?: layers)?", notes, re.I)
    if moe_after and counts:
        counts.add(num_layers - int(moe_after.group(1)))
    ffn = re.search(r"dense\D{0,30}?(?:FFN|MLP)\s*(?:of\s*|=\s*|width\s*)?\(?(\d{3,})|"
                    r"(?:FFN|MLP)\s*\(?(\d{3,})\)?\s*(?:dense|for the dense)", notes, re.I)
    if ffn:
        width = int(ffn.group(1) or ffn.group(2))
    if len(counts) > 1 or -1 in counts:
        return -1, None
    if counts:
        return counts.pop(), width
    dense_words = [m for m in re.finditer(r"\bdense\b[^.;]{0,40}\blayers?\b|\blayers?\b[^.;]{0,25}"
                                          r"\bdense\b", notes, re.I) if _mention_used(notes, m)]
    if dense_words and not re.search(r"every layer (?:is )?MoE|all layers (?:are )?MoE|no dense",
                                     notes, re.I):
        return -1, None
    return 0, None


def _notes_shared_width(notes: str, moe_ffn: int) -> int:
    """The shared experts' total width an MoE row's notes state (Megatron's
    --moe-shared-expert-intermediate-size), in the ways tables write it ("1 shared expert
    (2048)", "2 shared experts (1408 each)", "shared expert: 1 x 2048", "one shared expert of
    width 2048", "1 shared + 256 routed", "n_shared_experts=1", "num_shared_experts: 1",
    "moe_shared_expert_intermediate_size=2048"); a count without a width is experts of
    ``moe_ffn`` (DeepSeek's and Megatron's convention). 0 when they name none or say "no shared
    expert"; -1 when they name shared experts in another form or contradict themselves."""
    widths: set[int] = set()
    for m in re.finditer(rf"{_N} shared experts?\s*\(\s*(\d+)(?:\s*each)?\s*\)", notes, re.I):
        widths.add(_count(m.group(1)) * int(m.group(2)))
    for m in re.finditer(r"shared experts?\s*[:=]?\s*(\d+)\s*[x\u00d7*]\s*(\d+)", notes, re.I):
        widths.add(int(m.group(1)) * int(m.group(2)))
    for m in re.finditer(rf"{_N} shared experts? (?:of|with) (?:width|size|ffn|hidden size)?\s*(\d+)",
                         notes, re.I):
        widths.add(_count(m.group(1)) * int(m.group(2)))
    for m in re.finditer(rf"{_N} shared(?: experts?)?\s*(?:\+|and|plus)\s*\d+ routed|"
                         r"n(?:um)?_shared_experts\s*[=:]\s*(\d+)", notes, re.I):
        widths.add(_count(m.group(1) or m.group(2)) * moe_ffn)
    for m in re.finditer(r"shared[_ ]expert[_ ]intermediate[_ ]size\s*[=:]?\s*(\d+)", notes, re.I):
        widths.add(int(m.group(1)))
    # "no shared expert overlap", "no shared experts in the dense layers": not about the MoE
    # layers' shared experts
    notes = re.sub(r"(?:no |without )?(?:moe_)?shared[_ ]experts?[_ ]overlap\w*(?:\s*=\s*\w+)?"
                   r"|\bno shared experts? (?:in|outside) the (?:\d+ )?(?:dense|first|non-MoE|MoE)[^.;,]*", "",
                   notes, flags=re.I)
    if re.search(r"\bno shared experts?\b|without (?:a |any )?shared experts?|shared experts?\s*[:=]\s*"
                 r"(?:0|none)\b|\b(?:not|never) (?:use|have|has|uses) (?:a |any )?shared experts?", notes, re.I):
        widths.add(0)
    if len(widths) > 1:
        return -1
    if widths:
        return widths.pop()
    plain = [m for m in re.finditer(rf"{_N} shared experts?\b", notes, re.I)
             if not _negated_at(notes, m.start(), m.end())]
    if plain:
        return _count(plain[0].group(1)) * moe_ffn if len(plain) == 1 else -1
    named = [m for m in re.finditer(r"shared experts?(?![ _-]*overlap)", notes, re.I)
             if _mention_used(notes, m)]
    return -1 if named else 0


#: Parallel sizes as notes state them ("TP=8", "PP 2", "EP8", "CP: 4", "VPP 5"): column -> label.
_NOTES_SIZE_LABELS = {"tensor_parallel": "TP", "pipeline_parallel": "PP", "expert_parallel": "EP",
                      "context_parallel": "CP", "data_parallel": "DP",
                      "virtual_pipeline_stages": "V?VPP?"}


def _notes_sizes(notes: str) -> dict[str, int]:
    """The parallel sizes the notes state by their labels (one value each; a label stated with
    two values is left out), column -> size; checked against the row's cells."""
    out = {}
    for col, label in _NOTES_SIZE_LABELS.items():
        found = {int(m.group(1)) for m in re.finditer(rf"(?<![\w/-]){label}\s*[=:]?\s*(\d+)(?![\w.])",
                                                     notes)
                 if not _negated_at(notes, m.start(), m.end())
                 and not re.search(r"expert[\s_-]*$", notes[max(0, m.start() - 10):m.start()], re.I)
                 and not _about_other_run(notes, m.start(), m.end(), size=True)}
        if len(found) == 1:
            out[col] = found.pop()
    return out


def _notes_virtual_stages(notes: str) -> int:
    """Virtual pipeline stages per pipeline stage the notes state when the row's cell is empty
    ("VPP 5", "VP=4", "interleaved 1F1B with 5 virtual stages",
    "virtual_pipeline_model_parallel_size 4"); 0 when they name no interleaving (or say "no
    interleaving"), -1 when they name it without a number (or with two)."""
    found = {int(next(g for g in m.groups() if g)) for m in re.finditer(
        r"\bV?VPP?\s*[=:]?\s*(\d+)\b|virtual[_ ]pipeline(?:[_ ]model[_ ]parallel)?[_ ]size\s*[=:]?\s*(\d+)"
        r"|(\d+) (?:virtual (?:pipeline )?)?stages? per (?:pipeline )?(?:stage|rank)"
        r"|interleaved (?:1F1B )?(?:schedule )?with (\d+) (?:virtual (?:pipeline )?stages|model chunks|chunks)",
        notes, re.I)}
    found.discard(1)
    if len(found) == 1:
        return found.pop()
    mentions = list(re.finditer(r"interleav\w*|\bVPP?\b|virtual pipeline", notes, re.I))
    if not found and any(not _mention_used(notes, m) for m in mentions):
        return 0  # "no interleaving", "not interleaved"
    named = [m for m in mentions if _mention_used(notes, m)
             and not re.match(r"\s*['\"]?(?:n/?a|none|-)", notes[m.end():], re.I)]
    return -1 if found or named else 0


def _notes_recompute(notes: str, explicit: bool = False) -> str | None:
    """The activation recomputation the notes state, as a recompute cell would say it
    ("activation recompute: selective (core attention)", "activation checkpointing: full
    (uniform, 1 layer)", "--recompute-granularity full --recompute-method block
    --recompute-num-layers 4", "selective activation recomputation (core attention)", "no
    activation checkpointing"), for :func:`_recompute_policy`; None when they state none.
    With ``explicit``, only the forms that state the setting itself (``recompute: X``,
    ``--recompute-granularity``), which a stated cell is checked against; prose ("full
    activation checkpointing was too slow, so per-op SAC") only fills an empty cell."""
    gran = re.search(r"(?:--)?recompute[-_]granularity\s*[ =:]\s*['\"]?(full|selective)", notes, re.I)
    if gran:
        method = re.search(r"(?:--)?recompute[-_]method\s*[ =:]\s*['\"]?(uniform|block)", notes, re.I)
        layers = re.search(r"(?:--)?recompute[-_]num[-_]layers\s*[ =:]\s*(\d+)", notes, re.I)
        return gran.group(1).lower() + (
            f" ({method.group(1).lower()}" + (f", {layers.group(1)} layers" if layers else "") + ")"
            if method else "")
    per_op = re.compile(r"\b(?:per-?op|op[- _]level)[- _]?(?:sac\b|selective\b)|\bselective[_ ]op\b"
                        r"|\bsac\s*\(op\)", re.I)  # PyTorch's per-op selective checkpointing
    said = re.search(r"(?:activation )?(?:recompute|recomputation|checkpointing|\bAC)\s*[:=]\s*"
                     r"((?:full|selective|none|no|off)\b(?:\s*\([^)]*\))?|(?:per-?op|op[- _]level)"
                     r"[- _]?sac\b|selective_op\b)", notes, re.I)
    if said:
        mode = said.group(1)
        if per_op.search(mode) or (mode.lower().startswith("selective") and per_op.search(
                _clause(notes, said.start(), said.end() + 40))):
            return "selective (per-op SAC)"  # "recompute: selective, per-op SAC"
        return "none" if mode.lower().startswith("off") else mode
    if explicit:
        return None
    op_sac = per_op.search(notes)
    if op_sac and _mention_used(notes, op_sac):
        return "selective (per-op SAC)"
    off = re.search(r"\b(?:activation (?:recompute|recomputation|checkpointing)|recompute|recomputation"
                    r"|\bAC\b)\s+(?:is\s+|was\s+)?(?:off|disabled|not used|turned off)\b", notes, re.I)
    if off:
        return "none"
    words = re.search(r"\b(full|selective)(?: activation)? (?:recompute|recomputation|checkpointing)"
                      r"(\s*\([^)]*\))?", notes, re.I)
    if words and _mention_used(notes, words):
        return words.group(1).lower() + (words.group(2) or "")
    if re.search(r"\bno (?:activation )?(?:recompute|recomputation|checkpointing)\b(?![ \t]+[a-z])",
                 notes, re.I):  # not "no recompute credit" (a FLOP convention)
        return "none"
    return None


def _window_policy(notes: str, model: ModelConfig, row: _Row) -> None:
    """Sliding-window attention named in the notes: its window (``128-token sliding window``,
    ``sliding window of 128 tokens``, ``window 128``) and its layers (``alternates ... and
    full causal``, ``every other layer``: Megatron-Core's --window-attn-skip-freq 2; ``every
    layer`` / ``all layers``: no full layer). Refused by name when either is not stated."""
    size = re.search(r"(\d+)[- ]token (?:sliding[- ])?window|sliding[- ]window\s*(?:of|size|=|:)?\s*"
                     r"(\d+)|window(?:[_ ]size)?\s*[=:]?\s*(\d+)", notes, re.I)
    every_other = re.search(r"alternat\w*|every other layer|every second layer|half (?:of )?the layers",
                            notes, re.I)
    every = re.search(r"(?:every|all|each) (?:transformer )?layers?\b(?! other)", notes, re.I)
    if size and (every_other or every):
        w = int(next(g for g in size.groups() if g))
        row.put(model, "model", "window_size", w)
        if every_other:
            row.put(model, "model", "window_attn_skip_freq", 2)
        row.assume("window-from-notes", f"window_size={w}" + (
            ", window_attn_skip_freq=2" if every_other else ", every layer"))
    else:
        row.refuse("sliding-window attention", "the notes name sliding-window attention "
                   "without its window or its layers ('alternates N-token sliding window and "
                   "full causal', 'sliding window of N tokens on every other layer'; "
                   "model.window_size)")


def _notes_mtp_layers(notes: str) -> int | None:
    """Multi-token prediction layers the notes state: ``mtp_num_layers=N``, ``N MTP layer(s)``,
    ``MTP N layer(s)``, ``MTP layers: N``, ``MTP (N layer)``; 0 for ``w/o MTP``, ``without
    MTP``, ``no MTP`` (not followed by another word: "no MTP loss logging" is not) and ``MTP:
    off``; None when they state no count; -1 when they state contradictory ones."""
    counts = set()
    for pat in (r"mtp[_ -]num[_ -]layers\s*[=:]?\s*(\d+)(?![\d.])",
                r"\bMTP[_ -]depth\s*[=:]?\s*(\d+)(?![\d.])|num_nextn_predict_layers\s*[=:]?\s*(\d+)",
                r"\b(\d+)\s+MTP\s+(?:layers?|modules?|depth)\b",
                r"\bMTP\b[^.;()]{0,12}\((\d+) layers?\)",
                r"\bMTP\s*(?:layers?)?\s*[:=]?\s*\(?\s*(\d+)(?![\d.])\s*(?:layers?)?\b"):
        counts |= {int(next(g for g in m.groups() if g)) for m in re.finditer(pat, notes, re.I)
                   if not _about_other_run(notes, m.start(), m.end())}
    if re.search(r"\b(?:w/o|without|no)\s+MTP\b(?![ \t]+(?!layers?\b)[a-z])|\bMTP\s*[:=]?\s*(?:off|none|disabled|"
                 r"false)\b|\bMTP (?:is |was )?(?:not used|unused|disabled)\b(?! (?:at|for|in|during) inference)"
                 r"|\b(?:w/o|without|no) multi-token prediction\b", notes, re.I):
        counts.add(0)
    for m in re.finditer(rf"{_N} MTP (?:layers?|modules?|heads?)\b", notes, re.I):
        if not m.group(1).isdigit():
            counts.add(_count(m.group(1)))
    if len(counts) > 1:
        return -1
    return counts.pop() if counts else None


def _layout_mtp(layout: str | None) -> int:
    """MTP layers (``m``) of a pipeline layout string, 0 without one or when it does not parse
    (validation names that)."""
    if not layout:
        return 0
    try:
        return "".join(expand_pipeline_layout(layout)).count("m")
    except ValueError:
        return 0


#: Megatron-Bridge's deepseek_v3 recipe's default pipeline layouts by (p, v), as recalled from
#: the Bridge source (assumption ``bridge-dsv3-pipeline-layout``; not stated by the table rows):
#: the embedding with the first layers, the loss (and the MTP layers) with the last.
BRIDGE_DSV3_LAYOUTS = {
    (4, 1): "Et*16|t*16|t*16|t*13{m}L",
    (8, 1): "Et*8|(t*8|)*6t*5{m}L", (4, 2): "Et*8|(t*8|)*6t*5{m}L",
    (16, 1): "Et*4|(t*4|)*14t{m}L", (8, 2): "Et*4|(t*4|)*14t{m}L",
    (4, 4): "Et*4|(t*4|)*14t{m}L",
}


#: Context-parallel exchanges other than the ring, named in a row's notes in words (Megatron's
#: ``--cp-comm-type`` is :data:`_CP_COMM_STATED`): DeepSpeed-Ulysses' all-to-all, or an
#: all-gather or all-to-all of K/V said of context parallelism (Llama 3's CP, PyTorch's).
_CP_COMM_OTHER = re.compile(
    r"ulysses"
    r"|(all[-_ ]?gather|all[- ]?to[- ]?all|\ba2a\b)[^.;]{0,40}\b(cp|context[-_ ]parallel\w*|k/?v)\b"
    r"|\b(cp|context[-_ ]parallel\w*|k/?v)\b[^.;]{0,40}(all[-_ ]?gather|all[- ]?to[- ]?all|\ba2a\b)",
    re.I)
#: Words of a clause that say an all-gather is of the weights or of another parallelism, not of
#: context parallelism's K/V (FSDP / ZeRO / FP8 parameter gathers, MoE token gathers).
_NOT_CP_GATHER = re.compile(r"param\w*|weights?\b|\bfsdp|\bzero\b|zero-?\d|optimi[sz]er|grad\w*"
                            r"|\bexperts?\b|\btokens?\b|dispatch\w*|\bmoe\b|\bdp\b|data[- ]parallel", re.I)
#: Notes that name the ring in words: ring attention, a p2p ring, or CP said to be a ring.
_CP_COMM_P2P = re.compile(
    r"ring[- ]attention|\b(?:cp|context[- ]parallel\w*)\s*\d*\s*\(\s*p2p\b"
    r"|\bp2p\b[^.;]{0,20}\bring\b|\bring\b[^.;]{0,20}\bp2p\b"
    r"|\b(?:cp|context[- ]parallel\w*)\b[^.;]{0,30}\bring\b", re.I)
#: Megatron's ``--cp-comm-type`` stated in notes: its value, one type or a per-layer list.
_CP_COMM_STATED = re.compile(r"cp[_ -]comm[_ -]type\s*(?:[=:]|\bis\b)?\s*(\[[^\]]*\]|\(?['\"]?[\w+]+)",
                             re.I)
#: Models whose layers are not all attention + MLP (Nemotron-H, Jamba, Zamba, Qwen3-Next's
#: gated DeltaNet, MiniMax's lightning attention): refused, never timed as a transformer.
_HYBRID_LAYERS = re.compile(r"\bmamba\w*|\bssm\b|state[- ]space|nemotron[- ]h\b|\bjamba\b|\bzamba\w*"
                            r"|hybrid[- ](?:mamba|ssm|model|architecture)|linear[- ]attention"
                            r"|gated[- ]?delta[- ]?net|lightning[- ]attention|qwen3[- ]next", re.I)
def _ring_named(notes: str) -> re.Match | None:
    """The notes' first mention of the ring (:data:`_CP_COMM_P2P`) that says it is used: not
    "CP is not a ring", "no ring attention", "rather than ring attention"."""
    for m in _CP_COMM_P2P.finditer(notes):
        if not re.search(r"\bnot\b|\bno\b|\bnon-", m.group(0), re.I) and \
                not _negated_at(notes, m.start(), m.end()):
            return m
    return None


def _said_a2a(notes: str) -> str | None:
    """The notes' words naming an all-to-all context-parallel exchange that is used: Ulysses,
    or an all-to-all / a2a beside CP (not PyTorch's alltoall rotation, which is a ring, nor
    Megatron's cp_comm_type, read on its own); None when each such mention is negated where it
    stands or in its clause ("Ulysses (not used)", "unlike Ulysses", "no a2a")."""
    cp_word = re.compile(r"\b(?:cp|context[- ]parallel\w*)\b", re.I)
    for m in re.finditer(r"\b(?:deepspeed[- ])?ulysses\b|all[- ]?to[- ]?all|\ba2a\b(?!\+)", notes, re.I):
        around = notes[max(0, m.start() - 30):m.end() + 30]
        clause = re.split(r"[.;]", notes[max(0, m.start() - 30):m.start()])[-1] + \
            re.split(r"[.;]", notes[m.start():m.end() + 30])[0]
        if not re.search(r"ulysses", m.group(0), re.I) and not cp_word.search(clause):
            continue  # an all-to-all of something else (the MoE dispatch)
        if not re.search(r"ulysses", m.group(0), re.I) and re.search(
                r"rotat|cp[_ -]comm[_ -]type|dispatch|\bEP\b|expert|\+p2p|p2p\+", around, re.I):
            continue  # the MoE dispatch's all-to-all, PyTorch's rotation, Megatron's type
        if _mention_used(notes, m):
            return m.group(0)
    return None


def _clause(notes: str, start: int, end: int, stops: str = r"[;,()]") -> str:
    """The clause of ``notes`` around ``start:end``, between the characters of ``stops``
    (``;``, ``,``, parentheses) or a sentence's end."""
    at = [m.start() for m in re.finditer(stops + r"|\.(?=\s|$)", notes)]
    left = max([i for i in at if i < start], default=-1)
    right = min([i for i in at if i >= end], default=len(notes))
    return notes[left + 1:right]


def _cp_all_gather_named(notes: str) -> tuple[re.Match | None, bool]:
    """``(mention, used)`` of an all-gather of context parallelism's K/V in the notes (CP or
    K/V and an all-gather in one clause, :data:`_CP_COMM_OTHER`; Megatron-Core's ``all_gather``
    spelling too), skipping the all-gathers of weights, FSDP / ZeRO, gradients or MoE tokens
    (:data:`_NOT_CP_GATHER`) and those about another run: ``used`` is False when the mention is
    negated or contrasted in its clause ("was not used", "unlike Llama 3's all-gather CP",
    "turned off", "without"). (None, False) without one."""
    gather = re.compile(r"all[-_ ]?gather\w*", re.I)
    for o in _CP_COMM_OTHER.finditer(notes):
        m = gather.search(notes, o.start(), o.end())  # positions in ``notes``
        if m is None:
            continue
        clause = _clause(notes, o.start(), o.end())
        if _NOT_CP_GATHER.search(clause) or _about_other_run(notes, o.start(), o.end()):
            continue
        used = _mention_used(notes, m) and not re.search(
            r"\b(?:not|no|without|unlike|instead of|rather than|disabled|turned off|off)\b",
            clause, re.I)
        return m, used
    return None, False


def _about_other_run(notes: str, start: int, end: int, size: bool = False) -> bool:
    """Whether the notes' words at ``start:end`` stand in a clause (between ``.``, ``;`` or
    parentheses) about another run or recipe than the row's ("the 25.11 run had no EP overlap",
    "the B200 recipe of this model uses EP8"); with ``size``, also a parallel size of another
    group ("experts use TP=1", "DP=16 nodes x 8 GPUs")."""
    clause = _clause(notes, start, end, r"[;()]")
    return bool(re.search(r"\b(?:the|a|an|another|older|earlier|its) [\w.-]+ recipes?\b|\brecipes\b"
                          r"|\brecipe (?:of|for) (?:the|a|another)\b|\bthe \d{2}\.\d{2}\b|\bprevious\b"
                          r"|\bearlier\b|\bother\b|\bran\b"
                          r"|\bhad\b|\b(?:the|this model'?s?|a) \w+ run\b|\bat inference\b|\bvs\.?\b",
                          clause, re.I)
                or (size and re.search(r"\bexperts?\b|\bnodes?\b", clause, re.I)))


def _mention_used(notes: str, m: re.Match) -> bool:
    """Whether the notes' mention ``m`` of a scheme says it is used: not negated where it
    stands (:func:`_negated_at`: "Ulysses (not used)", "Ulysses was not used", "no a2a") nor
    contrasted just before it ("unlike Ulysses", "instead of all-to-all")."""
    before = notes[max(0, m.start() - 24):m.start()]
    return not (_negated_at(notes, m.start(), m.end())
                or re.search(r"\b(?:unlike|instead of|rather than|without|not|no)\s+(?:\w+\s+)?$",
                             before, re.I))


#: Megatron-Core's ``--hierarchical-context-parallel-sizes A P`` in notes: A, the all-to-all group.
_CP_HIERARCHY = re.compile(r"hierarchical(?:[_ -]context[_ -]parallel|[_ -]cp)?[_ -]sizes?\s*[=:]?\s*"
                           r"(?:of\s*)?[\[(]?\s*(\d+)\s*(?:,\s*|\s+and\s+|\s*x\s*|\s+)(\d+)", re.I)
#: PyTorch's context_parallel K/V rotation (torchtitan's ``context_parallel_rotate_method``):
#: ``alltoall`` passes K/V blocks around the ranks as a ring does; ``allgather`` gathers them.
_CP_ROTATE = re.compile(r"rotate[_ -]method\s*[=:]?\s*['\"]?(all[_-]?to[_-]?all|all[_-]?gather|p2p)",
                        re.I)


#: How notes name the overlaps a launch sets: Megatron's flags (``--tp-comm-overlap``,
#: ``--overlap-grad-reduce``, ``--overlap-param-gather``), their config names
#: (``tp_comm_overlap=False``) and words ("no TP comm overlap").
_OVERLAP_NAMES = {
    "tp_comm_overlap": re.compile(r"tp[_-]comm[_-]overlap|\bTP\s+(?:comm(?:unication)?\s+)?overlap",
                                  re.I),
    "overlap_grad_reduce": re.compile(r"overlap[_-]grad[_-]reduce", re.I),
    "overlap_param_gather": re.compile(r"overlap[_-]param[_-]gather", re.I),
    "fp8_param_gather": re.compile(r"fp8[_ -]param(?:eter)?s?[_ -](?:all[- ]?)?gather"
                                   r"|(?:fp8|float8) all[- ]gather", re.I),
    "sequence_parallel": re.compile(r"sequence[_ -]parallel(?:ism)?|\bSP\b(?![-_])", re.I),
}


def _negated_at(text: str, start: int, end: int) -> bool:
    """Whether the mention ``text[start:end]`` is negated where it stands: ``--no-``, ``no``,
    ``not``, ``without``, ``neither`` / ``nor``, ``unlike``, ``non-``, ``disable(d)``,
    ``rather than``, ``instead of`` just before it (also across a short list: "not DeepEP /
    HybridEP"), ``off``, ``=False``, ``: no`` (ending its phrase) just after it, ``kept off``,
    or ``off``, ``disabled``, ``not used``, ``turned off`` after only other names joined to it
    and a verb ("X and Y disabled", "X was turned off", "X is not used"); "X with Y disabled"
    and a negation in another clause are another setting's."""
    before, after = text[max(0, start - 40):start], text[end:end + 60]
    if re.search(r"(?:--no-|\b(?:no|not|without|neither|nor|unlike|disabled?|disabling|non)[\s-]+"
                 r"(?:the\s+|a\s+|an\s+|any\s+)?(?:[\w-]+\s*(?:/|\bor\b|\bnor\b)\s*)?"
                 r"|\b(?:rather than|instead of)\s+(?:the\s+|a\s+)?)$", before, re.I):
        return True  # "no X", "without the X", "not DeepEP / X", "neither Y nor X", "rather than X"
    if re.match(r"\s*(?:[=:]\s*|\s+is\s+|\s+)?(?:(?:off|false|disabled)\b|(?:0|no|n)\b(?!\s*[a-z0-9]))",
                after, re.I):
        return True  # "X off", "X=False", "X: no" (not "X: no token dropping")
    # "X was turned off", "X and Y disabled", "X not used", "X kept off": only other names
    # joined to it ("and Y", "/ Y") and a verb between it and the negative word
    return bool(re.match(r"(?:\s+(?:dispatcher|backend|overlap|kernels?|modules?|layers?)"
                         r"|(?:\s*(?:and|&|/|,)\s*(?:the\s+)?[\w-]+(?:\s+[\w-]+)?)*)\s*\(?\s*(?:(?:is|was|were|are|"
                         r"has been|have been|kept|left|stays?|remains?)\s+)?(?:turned\s+|switched\s+)?"
                         r"(?:off|disabled|not used|unused|not enabled|not applied|removed)\b", after, re.I))


def _notes_overlaps(notes: str) -> tuple[dict[str, bool], list[str]]:
    """The overlaps the notes state, name -> on (:data:`_OVERLAP_NAMES`), and the names they
    state both on and off. Each mention is on unless negated where it stands
    (:func:`_negated_at`: ``--no-overlap-grad-reduce``, ``tp_comm_overlap off``,
    ``overlap_param_gather=False``, ``no TP comm overlap``). Megatron-Core's
    ``--overlap-param-gather-with-optimizer-step`` is not the parameter all-gather overlap and
    is skipped."""
    text = re.sub(r"overlap[_-]param[_-]gather[_-]with[_-]optimizer[_-]step", "", notes, flags=re.I)
    seen: dict[str, set[bool]] = {}
    for name, pat in _OVERLAP_NAMES.items():
        for m in pat.finditer(text):
            if not _about_other_run(text, m.start(), m.end()):
                seen.setdefault(name, set()).add(not _negated_at(text, m.start(), m.end()))
    out = {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}
    return out, sorted(k for k, v in seen.items() if len(v) > 1)


def _check_cp_comm(framework: str, notes: str, row: _Row, node_cp: int | None = None,
                   cp: int | None = None) -> tuple[str, int | None]:
    """``(plan.cp_comm_type, plan.cp_a2a_size)`` of a context-parallel row, or a refusal by
    name (then ``("p2p", None)``). ``node_cp``: the cp ranks of a node (``gpus_per_node / t``,
    when that divides cp), the all-to-all group of an a2a+p2p row whose notes say its
    all-to-all stays inside the node.

    Modelled (:data:`core.plan.parallel.CP_COMM_TYPES`): the ring, as Megatron-Core runs it
    (``--cp-comm-type p2p``, the default: K/V blocks passed around the cp ranks in cp - 1
    steps, each overlapped with a step of attention, REFERENCE.md "Context parallelism") and
    as PyTorch's ``context_parallel`` runs it with its ``alltoall`` rotation; PyTorch's
    default all-gather rotation (``allgather``), the CP of torchtitan rows whose notes name
    no ring (assumption ``torchtitan-cp-allgather``); Megatron-Core's all-to-all exchanges
    stated in the notes (``cp_comm_type a2a``; ``a2a+p2p`` with its
    ``hierarchical_context_parallel_sizes``), and Ulysses (``cp-ulysses-a2a``); an all-gather
    of K/V named in the notes of a row that is not torchtitan's, Megatron-Core's
    ``cp_comm_type all_gather`` (or ``allgather``, its help's spelling) or Llama 3's
    (``all_gather``, assumption ``cp-all-gather-exposed``). Refused by name: notes naming
    another exchange (:data:`_CP_COMM_OTHER`: a2a+p2p without its group sizes, one type per
    layer that differ), and CP of another framework than
    Megatron-Core / NeMo / torchtitan whose notes do not name the ring or an all-gather
    (:data:`_CP_COMM_P2P`).
    """
    torchtitan = bool(re.search(r"torchtitan", framework, re.I))
    other_why = ("only the ring (Megatron-Core's cp_comm_type p2p), Megatron-Core's all-to-all "
                 "exchanges (a2a, a2a+p2p with its hierarchical sizes) and its all-gather "
                 "(all_gather, not overlapped), and PyTorch context_parallel's overlapped "
                 "all-gather (torchtitan) are modelled")
    stated = _CP_COMM_STATED.search(notes)  # Megatron's --cp-comm-type: one type or a list
    if not stated:  # "CP 16 hierarchical (a2a+p2p)": the type named without its argument
        stated = next((m for m in re.finditer(r"(a2a\+p2p|p2p\+a2a)", notes, re.I)
                       if _mention_used(notes, m)), None)
    if stated:
        kinds = {k.replace("p2p+a2a", "a2a+p2p").replace("_", "").replace("-", "") for k in
                 re.findall(r"a2a\+p2p|p2p\+a2a|a2a|all[_-]?gather|p2p", stated.group(1).lower())}
        if kinds and kinds <= {"p2p"}:
            return "p2p", None
        if kinds == {"a2a"}:
            row.assume("cp-comm-type-from-notes", stated.group(0).strip())
            return "a2a", None
        if kinds == {"allgather"} and (_MEGATRON.search(framework) or (
                not framework.strip() and "all_gather" in stated.group(1).lower())):
            # Transformer Engine's (Megatron-LM's help spells it allgather); without a framework
            # the session's terms, where allgather is PyTorch's and stays refused here
            row.assume("cp-all-gather-exposed", stated.group(0).strip())
            return "all_gather", None
        if kinds == {"a2a+p2p"}:
            sizes = _CP_HIERARCHY.search(notes)
            if sizes and cp is not None and int(sizes.group(1)) * int(sizes.group(2)) != cp:
                row.refuse("context parallelism a2a+p2p without its group sizes",
                           f"the notes' {sizes.group(0).strip()!r} do not multiply to "
                           f"context_parallel={cp} (Megatron-Core: A * P = cp)")
                return "p2p", None
            if sizes:
                row.assume("cp-comm-type-from-notes", f"{stated.group(0).strip()}, "
                           f"{sizes.group(0).strip()}")
                return "a2a+p2p", int(sizes.group(1))
            inside = re.search(r"(?:a2a|all[- ]?to[- ]?all)\s+(?:inside|within|in)\s+(?:the|a|each)\s+node",
                               notes, re.I)
            if inside and node_cp and node_cp > 1:
                row.assume("cp-comm-type-from-notes", f"{stated.group(0).strip()}, "
                           f"{inside.group(0)}: all-to-all groups of {node_cp}")
                return "a2a+p2p", node_cp
            row.refuse("context parallelism a2a+p2p without its group sizes",
                       f"the notes name {stated.group(0).strip()!r} but not its "
                       "hierarchical_context_parallel_sizes (the all-to-all group's size)")
            return "p2p", None
        row.refuse("context parallelism other than Megatron-Core's ring",
                   f"the notes name a context-parallel exchange that is not modelled "
                   f"({stated.group(0).strip()!r}); {other_why}")
        return "p2p", None
    rotate = _CP_ROTATE.search(notes)
    if rotate and "gather" not in rotate.group(1).lower():
        return "p2p", None  # PyTorch's alltoall rotation: K/V blocks passed around the ranks, a ring
    ring_named = _ring_named(notes)
    a2a = _said_a2a(notes)
    if a2a and not torchtitan and not ring_named:
        row.assume("cp-ulysses-a2a", a2a)
        return "a2a", None
    kw = re.compile(r"ulysses|all[-_ ]?gather\w*|all[- ]?to[- ]?all|\ba2a\b", re.I)
    gather, gather_used = _cp_all_gather_named(notes)
    other = rotate or next((o for o in _CP_COMM_OTHER.finditer(notes)
                            if _mention_used(notes, kw.search(notes, o.start(), o.end()) or o)
                            and not re.search(r"all[-_ ]?gather", o.group(0), re.I)), None)
    ring = ring_named
    if not torchtitan and not rotate and gather is not None and gather_used:
        clause = _clause(notes, gather.start(), gather.end())
        if ring or re.search(r"overlap", clause, re.I):
            row.refuse("context parallelism other than Megatron-Core's ring",
                       f"the notes name an all-gather of K/V ({gather.group(0)!r}) "
                       + ("and the ring" if ring else "said to be overlapped (Megatron-Core's "
                          "all_gather is not)") + f"; {other_why}")
            return "p2p", None
        row.assume("cp-all-gather-exposed", clause.strip())
        return "all_gather", None  # Megatron-Core's / TE's, as Llama 3 describes it
    if torchtitan and not rotate and gather is not None and not gather_used and ring is None:
        return "p2p", None  # "CP without all-gather": PyTorch's other rotation, the ring
    if (torchtitan and (rotate or (other is None and ring is None)
                        or (other is not None and "gather" in other.group(0).lower()))
            or (rotate and not framework.strip())):  # no framework: the session's own terms
        said = other or (gather if gather_used else None)
        row.assume("torchtitan-cp-allgather", said.group(0).strip() if said else "")
        return "allgather", None  # PyTorch context_parallel's default, or said so
    if other:
        row.refuse("context parallelism other than Megatron-Core's ring",
                   f"the notes name a context-parallel exchange other than the ring "
                   f"({other.group(0).strip()!r}); {other_why}")
    elif framework.strip() and not _MEGATRON.search(framework) and not torchtitan and not ring:
        row.refuse("context parallelism other than Megatron-Core's ring",
                   f"context parallelism in {framework}: its K/V exchange is its own and the row "
                   f"does not say it is a ring; {other_why}")
    return "p2p", None


def _bridge_dsv3_layout(name: str, framework: str, num_layers: int, p: int, v: int,
                        mtp: int) -> str | None:
    """The layout of :data:`BRIDGE_DSV3_LAYOUTS` for a DeepSeek-V3 (61 layers) Megatron-Bridge
    row at ``(p, v)`` with ``mtp`` MTP layers, or None when the rule does not apply."""
    if (num_layers != 61 or not _DEEPSEEK_V3.search(name)
            or "bridge" not in framework.lower()):
        return None
    layout = BRIDGE_DSV3_LAYOUTS.get((p, max(v, 1)))
    return layout.format(m="m" * mtp) if layout else None


#: The notes' MLA sizes (README: "MLA attention (q_lora 1536, kv_lora 512, qk_nope 128 +
#: qk_rope 64, v_head 128 ...)") -> model fields.
_MLA_NOTES = {"q_lora": "q_lora_rank", "kv_lora": "kv_lora_rank", "qk_nope": "qk_head_dim",
              "qk_rope": "qk_pos_emb_head_dim", "v_head": "v_head_dim"}


#: Other names of the latent attention's sizes: Hugging Face's (``q_lora_rank``,
#: ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``) and Megatron's (``qk_head_dim``,
#: ``qk_pos_emb_head_dim``).
_MLA_SIZE_NAMES = {"q_lora": r"q_lora(?:_rank)?", "kv_lora": r"kv_lora(?:_rank)?",
                   "qk_nope": r"qk_nope(?:_head_dim)?|qk_head_dim",
                   "qk_rope": r"qk_rope(?:_head_dim)?|qk_pos_emb_head_dim",
                   "v_head": r"v_head(?:_dim)?"}


def _mla_size(notes: str, key: str) -> int | None:
    """One latent-attention size the notes state (``q_lora 1536``, ``q_lora_rank=1536``,
    ``qk_rope_head_dim: 64``); None when they do not (or state two different ones)."""
    found = {int(m.group(1)) for m in re.finditer(
        rf"(?<![a-z_])(?:{_MLA_SIZE_NAMES[key]})\s*[=:]?\s*(\d+)", notes, re.I)}
    return found.pop() if len(found) == 1 else None


def _mla_policy(notes: str, model: ModelConfig, row: _Row) -> None:
    """Multi-head latent attention from the notes: each of :data:`_MLA_NOTES`'s sizes (``name
    N``); a size the notes do not give is refused by name (its default would be a guess), except
    ``q_lora``, whose absence is refused too (no query compression is a different model)."""
    row.put(model, "model", "multi_latent_attention", True)
    if not _has(model, "multi_latent_attention"):
        return
    sizes = {k: _mla_size(notes, k) for k in _MLA_NOTES}
    no_q = re.search(r"without query compression|no query compression|q_lora(?:_rank)?\s*[=:]?\s*"
                     r"(?:0|none|null)\b", notes, re.I)
    if no_q and sizes["q_lora"] in (None, 0):
        sizes["q_lora"] = 0  # no query compression: the query projection from h
    missing = [k for k, v in sizes.items() if v is None]
    if missing:
        row.refuse("multi-head latent attention (sizes not in the notes)", f"the notes name "
                   f"multi-head latent attention without its {', '.join(missing)} size(s)")
        return
    for k, target in _MLA_NOTES.items():
        row.put(model, "model", target, sizes[k] or None if k == "q_lora" else sizes[k])
    # DeepSeek-V2/V3 normalize both latents (q_a_layernorm, kv_a_layernorm): Megatron's
    # q_layernorm / kv_layernorm, which Megatron-Bridge's DeepSeek recipes switch on
    model.qk_layernorm = True
    row.assume("mla-from-notes", ", ".join(f"{t}={getattr(model, t)}" for t in _MLA_NOTES.values()))
    if (not re.search(r"\bMTP\b|multi-token", notes, re.I) and _notes_mtp_layers(notes) is None
            and not _layout_mtp(row.pp_layout)):
        row.assume("mtp-not-stated")  # DeepSeek-V3 trained with one MTP layer; the run may not
#: Words an activation label may qualify its gated MLP with: ``"swiglu (clamped, biased)"``.
_ACTIVATION_QUALIFIERS = ("clamped", "biased")
#: How tables write the modelled activations and norms (lower case; the activation's
#: qualifiers already split off).
_ACTIVATION_WORDS = {
    "swiglu": re.compile(r"swi[- _]?glu|silu[- _]?glu|swish[- _]?glu|gated[- _](?:silu|swish)"
                         r"|(?:silu|swish)\s*\(gated\)"),
    "gelu": re.compile(r"gelu(?:\s*\((?:tanh|erf|approx\w*)\))?|gelu[- _](?:tanh|new|fast)"),
}
_NORM_WORDS = {"rmsnorm": re.compile(r"rms[- _]?norm|rms"),
               "layernorm": re.compile(r"layer[- _]?norm(?:[- _]?1p)?|ln|layernorm1p")}


def _family_spellings(model: ModelConfig, row: _Row) -> None:
    """Map the activation and norm as other tables write them to the session's names
    (``silu (gated)``, ``swish-glu``, ``rms_norm``, ``LayerNorm1p`` ...). A plain ``silu`` /
    ``swish`` is SwiGLU (``silu-is-swiglu``: the SiLU MLPs of the Llama family are gated) and
    ``geglu`` is timed as SwiGLU (``geglu-as-swiglu``: the same three GEMMs and one fused
    element-wise kernel of the same bytes); anything else stays for validation to name."""
    act, norm = model.activation.strip(), model.normalization.strip()
    for name, pat in _ACTIVATION_WORDS.items():
        if pat.fullmatch(act):
            model.activation = name
    if act in ("silu", "swish"):
        model.activation = "swiglu"
        row.assume("silu-is-swiglu", act)
    elif re.fullmatch(r"ge[- _]?glu", act):
        model.activation = "swiglu"
        row.assume("geglu-as-swiglu", act)
    for name, pat in _NORM_WORDS.items():
        if pat.fullmatch(norm):
            model.normalization = name


#: How tables write Nemotron-4's squared ReLU (Megatron-Core --squared-relu, HF ``relu2``).
_SQUARED_RELU = re.compile(r"(?i)\s*(?:squared[-_ ]?relu|relu[-_ ]?squared|relu\s*(?:\^|\*\*)?\s*2"
                           r"|sq[-_ ]?relu)\s*")


def _activation_qualifiers(model: ModelConfig, row: _Row) -> set[str]:
    """Split a qualified activation label (``"swiglu (clamped, biased)"``) into the activation
    (``model.activation``) and its qualifiers: ``clamped`` sets GPT-OSS's clamp and linear
    offset (assumption ``clamped-swiglu``); ``biased`` is returned for the caller (the family's
    biases). A label with other qualifiers stays as it is (validation names it)."""
    m = re.fullmatch(r"\s*(\w+)\s*\(([^)]*)\)\s*", model.activation)
    if not m:
        return set()
    words = {w.strip() for w in m.group(2).split(",") if w.strip()}
    if not words <= set(_ACTIVATION_QUALIFIERS):
        return set()
    model.activation = m.group(1)
    if "clamped" in words:
        row.put(model, "model", "activation_func_clamp_value", 7.0)
        row.put(model, "model", "glu_linear_offset", 1.0)
        row.assume("clamped-swiglu")
    return words


def _bridge_precision(precision: str, recipe: str | None) -> str | None:
    """The recipe table's precision name (core.accuracy.bridge_recipes) of a row's precision and FP8
    recipe, or None for an FP8 recipe no Bridge precision names."""
    if precision != "fp8":
        return precision
    return {None: "fp8", "tensorwise": "fp8", "mxfp8": "mxfp8", "blockwise": "fp8sc"}.get(recipe)


def _bridge_recipe(get: dict, ints: dict, opt: dict, name: str, prec: str) -> BridgeRecipe | None:
    """The Megatron-Bridge performance recipe that ran a Megatron-Bridge row of recipe-table
    precision ``prec`` (:func:`_bridge_precision`; :func:`core.accuracy.bridge_recipes.match_bridge_recipe`:
    every key field but the global batch equal), or None."""
    return match_bridge_recipe(
        gpu_kind(str(get["gpu"])), name, ints["num_gpus"], prec, ints["tensor_parallel"],
        ints["pipeline_parallel"], max(1, ints["virtual_pipeline_stages"]),
        opt["context_parallel"] or 1, opt["expert_parallel"] or 1, ints["micro_batch_size"],
        ints["global_batch_size"], ints["seq_length"])


#: Models whose Megatron-Bridge base recipes set expert_tensor_parallel_size=1 (Bridge 0.6.2
#: recipes/deepseek/h100/deepseek_v3.py:118, recipes/qwen/h100/qwen3_moe.py:60, :174, :255).
_BRIDGE_ETP1_MODELS = re.compile(r"deepseek[-_ ]?v3|qwen3[-_ ]\d+b[-_ ]a\d+b", re.I)

#: The notes' expert tensor-parallel size (Megatron's --expert-tensor-parallel-size, "ETP 2").
_ETP_NOTE = re.compile(r"(?:\bexpert[_ -]tensor[_ -](?:model[_ -])?parallel(?:[_ -]size)?|\bETP"
                       r"|\bexpert[_ -]TP)\s*[=:]?\s*(\d+)\b", re.I)

#: Words with which a row's notes would speak of its router groups (node-limited routing):
#: Hugging Face's n_group / topk_group, Megatron's --moe-router-num-groups /
#: --moe-router-group-topk, router or routing groups, the papers' group-, node- or
#: device-limited routing. Not "query_groups" nor "GQA", which DeepSeek-V3 rows name to say MLA
#: has none, nor a process group "limited to" a node.
_ROUTER_GROUP_WORDS = re.compile(
    r"\bn_group\b|\btopk[_-]group\b|\bgroup[_-]topk\b|\brout(?:er|ing)[ _-]+(?:num[ _-]+)?groups?\b"
    r"|\b(?:group|node|device)[ -]limited[ -]routing\b", re.I)
#: The notes' router-group numbers: groups (n_group, --moe-router-num-groups, "router groups N")
#: and groups per token (topk_group, --moe-router-group-topk).
_ROUTER_GROUPS_N = re.compile(r"(?:\bn_group|\brout(?:er|ing)[ _-]+(?:num[ _-]+)?groups?)"
                              r"\s*[=:]?\s*(\d+)\b", re.I)
_ROUTER_GROUPS_K = re.compile(r"(?:\btopk[_-]group|\bgroup[_-]topk)\s*[=:]?\s*(\d+)\b", re.I)
#: DeepSeek-V3 however a row writes it ("DeepSeek-V3", "DeepSeek V3", "deepseek_v3").
_DEEPSEEK_V3 = re.compile(r"deepseek[-_ ]?v3", re.I)


def _router_group_policy(notes: str, name: str, model: ModelConfig, rw: "_Row") -> None:
    """Router groups of an MoE row (node-limited routing, which only the flex dispatcher's
    copies to other nodes feel): the notes' n_group and topk_group when they give both;
    DeepSeek-V3's own (config.json n_group 8, topk_group 4) when they say nothing of router
    groups; a row whose notes speak of them without both numbers is refused by name."""
    words = _ROUTER_GROUP_WORDS.search(notes)
    if not words:
        if _DEEPSEEK_V3.search(name) and model.num_experts == 256 and model.moe_top_k == 8:
            model.moe_router_num_groups, model.moe_router_group_topk = 8, 4
            rw.assume("deepseek-v3-router-groups")
        return
    n, k = _ROUTER_GROUPS_N.search(notes), _ROUTER_GROUPS_K.search(notes)
    if n and k:
        rw.put(model, "model", "moe_router_num_groups", int(n.group(1)))
        rw.put(model, "model", "moe_router_group_topk", int(k.group(1)))
        rw.assume("router-groups-from-notes", f"{n.group(0)}, {k.group(0)}")
    else:
        rw.refuse("router groups", "the notes speak of the router's groups (node-limited "
                  f"routing: {words.group(0)!r}) without both their "
                  "number (n_group) and the groups per token (topk_group)")


#: Numeric columns of the general layout (a cell that only says "not stated" is empty there).
_NUMERIC_COLUMNS = frozenset({
    "num_gpus", "gpus_per_node", "inter_node_bandwidth_gbps", "num_layers", "hidden_size",
    "num_attention_heads", "ffn_hidden_size", "seq_length", "vocab_size", "global_batch_size",
    "micro_batch_size", "tensor_parallel", "pipeline_parallel", "data_parallel",
    "virtual_pipeline_stages", "measured_iteration_time_s", "measured_peak_memory_gib",
    "first_stage_layers",
    "last_stage_layers", "num_query_groups", "num_experts", "moe_top_k", "moe_ffn_hidden_size",
    "context_parallel", "expert_parallel"})
#: How tables write "not stated / not applicable" in a numeric cell: read as an empty cell
#: (the column's default, or "is empty; it is required"), never as a broken file.
_NOT_STATED = re.compile(r"(?i)(?:n/?a|none|null|nan|-+|\u2013|\u2014|\?|not (?:stated|given|applicable)"
                         r"|unknown|unstated)(?:\s*\([^()]*\))?")


def _general_row_or_skip(path: Path, row: int, header: list[str], r: list[str]) -> Measurement:
    """:func:`_general_row`, or the row skipped with the message of the cell that no
    prediction can do without (:class:`_CellError`): one such cell never fails the file."""
    try:
        return _general_row(path, row, header, r)
    except _CellError as exc:
        cells = {h: (r[i].strip() if i < len(r) else "") for i, h in enumerate(header)}
        group = {"model": cells.get("model_name", "") or "?", "source": cells.get("source_id", "")
                 or path.name, "gpu": cells.get("gpu", ""), "kind": "", "precision": "",
                 "t": cells.get("tensor_parallel", ""), "p": cells.get("pipeline_parallel", "")}
        reason = str(exc).removeprefix(f"{path}: row {row}, ")
        return Measurement(row, None, math.nan, reason, group, [exc.cause])


#: The parallel sizes whose product is the GPU count (context_parallel is optional, default 1).
_WORLD_COLUMNS = ("num_gpus", "tensor_parallel", "pipeline_parallel", "data_parallel")


def _derive_cells(path: Path, row: int, v: dict[str, str], assume: Callable[..., None]) -> None:
    """Fill, in place, the empty required cells that the row's other cells fix: one empty of
    num_gpus / tensor_parallel / pipeline_parallel / data_parallel from
    ``num_gpus = t*p*cp*d`` (``parallel-size-from-gpus``), and an empty iteration time from the
    published ``tokens_per_s_per_gpu`` (``time-from-throughput``: global batch x sequence /
    (tokens/s/GPU x GPUs)). Cells that do not divide evenly stay empty (the row is then
    skipped naming the column)."""
    empty = [c for c in _WORLD_COLUMNS if not v.get(c, "")]
    if len(empty) == 1:
        known = {c: _num(path, row, c, v[c], int) for c in _WORLD_COLUMNS if c != empty[0]}
        cp = _num(path, row, "context_parallel", v["context_parallel"], int) \
            if v.get("context_parallel", "") else 1
        if empty[0] == "num_gpus":
            value = known["tensor_parallel"] * known["pipeline_parallel"] * known["data_parallel"] * cp
        else:
            rest = math.prod(x for c, x in known.items() if c != "num_gpus") * cp
            value = known["num_gpus"] // rest if rest > 0 and known["num_gpus"] % rest == 0 else 0
        if value > 0:
            v[empty[0]] = str(value)
            assume("parallel-size-from-gpus", f"{empty[0]}={value}")
    if not v.get("measured_iteration_time_s", "") and v.get("tokens_per_s_per_gpu", ""):
        try:
            tok = _num(path, row, "tokens_per_s_per_gpu", v["tokens_per_s_per_gpu"])
            n = _num(path, row, "num_gpus", v.get("num_gpus", ""), int)
            gbs = _num(path, row, "global_batch_size", v.get("global_batch_size", ""), int)
            seq = _num(path, row, "seq_length", v.get("seq_length", ""), int)
        except (ValueError, MeasurementFileError):
            return  # the time stays empty; the row is skipped naming it
        if tok > 0 and math.isfinite(tok) and n > 0:
            v["measured_iteration_time_s"] = repr(gbs * seq / (tok * n))
            assume("time-from-throughput", f"{gbs * seq / (tok * n):.6g} s")


def _memory_cells(path: Path, row: int, v: dict[str, str]) -> tuple[float, str]:
    """The row's measured peak memory (GiB, NaN when empty) and its ``memory_scale``.

    Raises MeasurementFileError (the whole file: a figure of unknown meaning is no data) for a
    memory value without a scale or a scale not in :data:`core.sim.report.MEMORY_SCALES`."""
    text, scale = v.get("measured_peak_memory_gib", ""), v.get("memory_scale", "").strip()
    if scale and scale not in MEMORY_SCALES:
        raise MeasurementFileError(
            f"{path}: row {row}, column 'memory_scale': {scale[:40]!r} is not one of "
            f"{', '.join(MEMORY_SCALES)}")
    if not text:
        return math.nan, scale
    if not scale:
        raise MeasurementFileError(
            f"{path}: row {row}, column 'memory_scale' is empty; a measured_peak_memory_gib needs "
            f"it (what the peak counts: one of {', '.join(MEMORY_SCALES)})")
    return _num(path, row, "measured_peak_memory_gib", text), scale


#: The family columns a public model's name fixes when its row leaves them empty.
_NAMED_SHAPE_COLUMNS = ("activation", "normalization", "num_query_groups", "ffn_hidden_size",
                        "vocab_size", "tied_embeddings", "num_experts", "moe_top_k",
                        "moe_ffn_hidden_size")


def _family_stem(name: str) -> str:
    """A model name's family and version, letters and digits only: ``llama3`` for "Llama 3
    8B" and "Meta-Llama-3.1-70B", ``llama2``, ``mixtral``, ``qwen3``, ``deepseekv3``,
    ``gptoss``, ``gpt3``."""
    n = re.sub(r"[^a-z0-9]", "", name.lower())
    m = re.search(r"llama(\d)|mixtral|qwen(\d)|deepseekv(\d)|gptoss|gpt(\d)|mtnlg", n)
    return m.group(0) if m else ""


def _shape_from_name(path: Path, row: int, v: dict[str, str], assume: Callable[..., None]
                     ) -> None:
    """Fill, in place, the empty family cells (:data:`_NAMED_SHAPE_COLUMNS`) of a row that
    names a public model whose shipped preset (:data:`core.plan.presets.MODEL_PRESETS`, the Hugging
    Face configs) has the row's layers, hidden size and heads, from that preset
    (``shape-from-model-name``): a "Llama3-70B" row with an empty activation is Llama's SwiGLU,
    not GPT's GeLU. Rows of other models keep the documented defaults."""
    empty = [c for c in _NAMED_SHAPE_COLUMNS if c in v and not v[c]]
    stem = _family_stem(v.get("model_name", ""))
    if not empty or not stem:
        return
    try:
        shape = tuple(_num(path, row, c, v.get(c, ""), int)
                      for c in ("num_layers", "hidden_size", "num_attention_heads"))
    except MeasurementFileError:
        return  # the row is skipped for that cell later
    found = [m for k, m in MODEL_PRESETS.items() if _family_stem(k) == stem
             and (m.num_layers, m.hidden_size, m.num_attention_heads) == shape]
    if len(found) != 1:
        return
    m = found[0]
    values = {"activation": m.activation, "normalization": m.normalization,
              "num_query_groups": str(m.query_groups), "ffn_hidden_size": str(m.ffn),
              "vocab_size": str(m.vocab_size), "tied_embeddings": "y" if m.tied_embeddings else "n",
              "num_experts": str(m.num_experts or ""), "moe_top_k": str(m.moe_top_k)
              if m.num_experts else "", "moe_ffn_hidden_size": str(m.moe_ffn_hidden_size or m.ffn)
              if m.num_experts else ""}
    filled = [c for c in empty if values[c]]
    for c in filled:
        v[c] = values[c]
    if filled:
        assume("shape-from-model-name", f"{m.name}: " + ", ".join(f"{c}={v[c]}" for c in filled))


def _general_row(path: Path, row: int, header: list[str], r: list[str]) -> Measurement:
    v = {h: (r[i].strip() if i < len(r) else "") for i, h in enumerate(header)}
    v = {h: ("" if h in _NUMERIC_COLUMNS | {"tokens_per_s_per_gpu"} and _NOT_STATED.fullmatch(x)
             else x) for h, x in v.items()}
    rw = _Row()
    _derive_cells(path, row, v, rw.assume)
    _shape_from_name(path, row, v, rw.assume)
    get = {c: (v.get(c, "") if v.get(c, "") != "" else d) for c, d in GENERAL_COLUMNS.items()}
    missing = [c for c, value in get.items() if value is None]
    if missing:
        raise _CellError(f"{path}: row {row}, column {missing[0]!r} is empty; it is required ("
                         + ", ".join(c for c, d in GENERAL_COLUMNS.items() if d is None) + ")",
                         f"{missing[0]} empty")
    memory_gib, memory_scale = _memory_cells(path, row, v)
    if not get["measured_iteration_time_s"] and math.isnan(memory_gib):
        raise _CellError(f"{path}: row {row}, column 'measured_iteration_time_s' is empty; it is "
                         "required (or a measured_peak_memory_gib with its memory_scale)",
                         "measured_iteration_time_s empty")
    ints = {c: _num(path, row, c, str(get[c]), int) for c in (
        "num_gpus", "gpus_per_node", "num_layers", "hidden_size", "num_attention_heads", "seq_length",
        "vocab_size", "global_batch_size", "micro_batch_size", "tensor_parallel", "pipeline_parallel",
        "data_parallel", "virtual_pipeline_stages")}
    opt = {c: (_num(path, row, c, v[c], int) if v.get(c, "") else None)
           for c in ("num_query_groups", "num_experts", "moe_top_k", "moe_ffn_hidden_size",
                     "context_parallel", "expert_parallel")}
    ffn = _num(path, row, "ffn_hidden_size", get["ffn_hidden_size"], int) if get["ffn_hidden_size"] else None
    name = v.get("model_name", "") or f"h={ints['hidden_size']} L={ints['num_layers']}"
    notes, framework = v.get("notes", ""), v.get("framework", "")
    # GPT's family until the row's columns (and the named assumptions below) say otherwise:
    # every family column goes to its field, a Llama-style row takes that family's fields
    model = model_from_fields({**GPT_FAMILY, "name": name, "num_layers": ints["num_layers"],
                               "hidden_size": ints["hidden_size"],
                               "num_attention_heads": ints["num_attention_heads"],
                               "ffn_hidden_size": ffn, "seq_length": ints["seq_length"],
                               "vocab_size": ints["vocab_size"]})
    if re.search(r"\bDERIVED\b", notes):
        rw.assume("derived-time")

    # the model family: every column goes to its session field; core.plan.config's validation
    # refuses what is not modelled, naming it
    for col in ("activation", "normalization"):
        if v.get(col, ""):
            setattr(model, col, v[col].lower())
    qualifiers = _activation_qualifiers(model, rw)
    if _SQUARED_RELU.fullmatch(model.activation):
        model.activation = "squared_relu"
    _family_spellings(model, rw)
    if model.activation == "squared_relu":
        # Nemotron-4's family (Megatron-Core --squared-relu): RoPE, no linear biases; the
        # attention kernel follows from the framework or the notes below
        model.position_embedding, model.add_bias_linear = "rope", False
        rw.assume("nemotron-family")
    if model.activation == "swiglu" and model.normalization == "rmsnorm":
        # the README's Llama-style rows: the columns do not hold the rest of the family, which
        # every such model shares (RoPE, no linear biases) and every framework of the sources
        # runs with fused attention (Megatron-Core/TE, torchtitan and fms-fsdp's SDPA)
        model.position_embedding, model.add_bias_linear = "rope", False
        model.attention_kernel = "flash"
        rw.assume("llama-family", "linear biases from the activation label"
                  if "biased" in qualifiers else "")
    if "biased" in qualifiers:
        model.add_bias_linear = True
        rw.assume("biased-from-activation")
    if model.attention_kernel != "flash":
        # another family (GPT-style GeLU + LayerNorm ...): the kernel its notes or its
        # framework name; Megatron-LM without a version keeps the session's (unfused) default
        fused = [m for m in re.finditer(
            r"flash[- ]?attn|flash[- ]?attention|fused attention|cudnn attention|\bsdpa\b"
            r"|attention[_ -]backend\s*[=:]?\s*(?:flash|fused|auto)", notes, re.I)
            if not _negated_at(notes, m.start(), m.end())]
        if re.search(r"attention[_ -]backend\s*[=:]?\s*(?:unfused|local)|\bunfused\b", notes, re.I):
            rw.assume("attention-kernel-from-notes", "unfused")  # stays the unfused kernel
        elif fused:
            model.attention_kernel = "flash"
            rw.assume("attention-kernel-from-notes", "flash")
        elif _MODERN_FRAMEWORK.search(framework):
            model.attention_kernel = "flash"
            rw.assume("fused-attention-framework", framework)
        else:
            rw.assume("attention-unfused-default")
    qkv_bias = [m for m in re.finditer(r"\bqkv[_ -]bias\b|bias(?:es)? (?:in|on) (?:the )?qkv",
                                       notes, re.I) if not _negated_at(notes, m.start(), m.end())]
    if model.activation == "swiglu" and qkv_bias:
        rw.put(model, "model", "add_qkv_bias", True)
        rw.assume("qkv-bias-from-notes")
    no_bias = re.search(r"\bno (?:linear )?bias(?:es)?\b|\bbias[- ]free\b|\bwithout (?:linear )?bias(?:es)?\b"
                        r"|disable[-_ ]bias[-_ ]linear|add_bias_linear\s*[=:]\s*false", notes, re.I)
    if no_bias and model.add_bias_linear and "biased" not in qualifiers:
        model.add_bias_linear = False
        rw.assume("no-bias-from-notes", no_bias.group(0))
    if opt["num_query_groups"] is not None:
        model.num_query_groups = opt["num_query_groups"]
    tied_text = v.get("tied_embeddings", "").strip().lower()
    tied = _flag(tied_text)
    if re.fullmatch(r"untied|not[- ]tied|separate(?: \w+)*|independent|unshared|not shared", tied_text):
        tied = False
    elif re.fullmatch(r"tied|shared", tied_text):
        tied = True
    if tied is not None:
        model.tied_embeddings = tied
    elif tied_text:
        rw.refuse("unreadable tied_embeddings", f"tied_embeddings={v['tied_embeddings']!r}: "
                  "expected y or n (tied / untied)")
    elif model.activation == "swiglu" and model.normalization == "rmsnorm":
        model.tied_embeddings = False
        rw.assume("untied-llama-family")
    elif "tied_embeddings" in v:
        rw.assume("tied-megatron-default")  # the cell is empty: GPT_FAMILY's tied
    else:
        rw.refuse("tied embeddings not stated", "the file has no tied_embeddings column and the "
                  "row is not Llama-style (SwiGLU + RMSNorm): whether the output layer shares "
                  "the embedding's weights changes the parameters and memory by vocab_size x "
                  "hidden_size; Megatron-LM ties them unless --untie-embeddings-and-output-weights "
                  "is given. Add a tied_embeddings column (y or n), or state it for every row: "
                  "--set tied_embeddings=n")
    e = opt["num_experts"]
    if e is not None and e > 1:
        rw.put(model, "model", "num_experts", e)
        for c in ("moe_top_k", "moe_ffn_hidden_size"):
            if opt[c] is not None:
                rw.put(model, "model", c, opt[c])
    _notes_policy(notes, model, v, opt, rw)
    if model.num_experts and model.num_experts > 1 and _has(model, "moe_router_num_groups"):
        _router_group_policy(notes, name, model, rw)

    precision, recipe = (_precision_policy(v["precision"], rw) if "precision" in v
                         else (str(get["precision"]).lower(), None))
    for col, said_n in _notes_sizes(notes).items():  # "TP=8, PP=2" against the cells
        if col in opt and not v.get(col, ""):  # "EP8" in the notes, the cell empty: the notes'
            opt[col] = said_n
            rw.assume("size-from-notes", f"{col}={said_n}")
            continue
        cell = (ints.get(col) if col in ints else opt.get(col)) or 1
        if said_n != cell and (col != "virtual_pipeline_stages" or v.get(col, "")):
            rw.refuse("notes contradict the row", f"the notes state {col}={said_n} but the row "
                      f"has {cell}")
    vp = ints["virtual_pipeline_stages"]
    if not v.get("virtual_pipeline_stages", "") and ints["pipeline_parallel"] > 1:
        said_vp = _notes_virtual_stages(notes)
        if said_vp == -1:
            rw.refuse("virtual pipeline stages not stated", "the notes name an interleaved "
                      "schedule (virtual pipeline stages) without their number, and the "
                      "virtual_pipeline_stages cell is empty")
        elif said_vp:
            vp = ints["virtual_pipeline_stages"] = said_vp
            rw.assume("vp-from-notes", f"virtual_pipeline_stages={vp}")
    is_bridge = "bridge" in framework.lower()  # a Megatron-Bridge row
    nemo = bool(re.search(r"nemo", framework, re.I)) and not is_bridge
    nemo_defaults: list[str] = []  # what the NeMo 2 recipes set that the row leaves unstated
    said_recipe = _notes_fp8_recipe(notes) if precision == "fp8" else None
    if said_recipe == "rowwise" and "fp8-recipe-unstated" in " ".join(rw.assumptions):
        rw.withdraw("fp8-recipe-unstated")
        rw.refuse("rowwise FP8 scaling", "the notes name rowwise float8 scaling, which is not "
                  "modelled; the modelled recipes are delayed, tensorwise, mxfp8 and blockwise")
    elif said_recipe and rw.withdraw("fp8-recipe-unstated"):
        recipe = said_recipe  # the notes name the recipe the label does not
        rw.assume("fp8-recipe-from-notes", recipe)
    if nemo and precision == "fp8" and rw.withdraw("fp8-recipe-unstated"):
        recipe = "delayed"  # the performance scripts' default --fp8_recipe ds
        nemo_defaults.append("FP8 delayed scaling")
    elif (not is_bridge and _MEGATRON.search(framework) and precision == "fp8"
          and rw.withdraw("fp8-recipe-unstated")):
        recipe = "delayed"  # Megatron-LM's own --fp8-recipe default (Megatron-Core 0.19)
        rw.assume("fp8-megatron-delayed")
    elif (re.search(r"llm[- ]?foundry|composer|mosaic", framework, re.I) and precision == "fp8"
          and rw.withdraw("fp8-recipe-unstated")):
        recipe = "delayed"  # Composer's amp_fp8: Transformer Engine's DelayedScaling
        rw.assume("fp8-composer-delayed")
    # no recipe for a row whose precision label was refused (NVFP4, rowwise FP8, ...): the
    # precision it was read as is a placeholder
    label_ok = not {"precision", "rowwise FP8 scaling", "precision not stated"} & set(rw.causes)
    prec = _bridge_precision(precision, recipe) if is_bridge and label_ok else None
    bridge = _bridge_recipe(get, ints, opt, name, prec) if prec else None
    family = (bridge_recipe_family(gpu_kind(str(get["gpu"])), name, prec)
              if prec and bridge is None else None)
    # what the row takes where it does not state it: its recipe's settings, or what all of its
    # family's agree on (FAMILY_SETTINGS names to values)
    src = ({s: bridge.setting(s) for s in FAMILY_SETTINGS} if bridge is not None
           else family.settings if family is not None else {})
    took: list[str] = []  # the settings this row takes from its recipe family

    def take(what: str) -> None:  # named in the family's assumption (a recipe's is the recipe)
        if bridge is None:
            took.append(what)
    # Megatron-Core runs the expert all-to-all overlap only with expert parallelism, with
    # pipeline parallelism only interleaved, and not with full recomputation: a row whose
    # layout cannot run it does not take it from a recipe or family
    ep_ok = ((opt["expert_parallel"] or 1) > 1 and (ints["pipeline_parallel"] == 1 or vp > 1)
             and "full" not in str(v.get("recompute", "")).lower())
    if bridge is not None:
        batch = ints["global_batch_size"]
        rw.assume("bridge-perf-recipe", f"{bridge.function}, perf_recipes/{bridge.source}"
                  + (f"; global batch {batch} in the row, {bridge.key[-1]} in the recipe: an "
                     "override of the recipe" if batch != bridge.key[-1] else ""))
        if bridge.refuse is not None:
            rw.refuse(*bridge.refuse)
    n = src.get("mtp_num_layers")  # a notes' layout without MTP layers says there are none
    if n and (rw.pp_layout is None or "m" in rw.pp_layout) and rw.withdraw("mtp-not-stated"):
        rw.put(model, "model", "mtp_num_layers", n)
        take(f"{n} MTP layer" + ("s" if n > 1 else ""))
    if model.num_experts and model.num_experts > 1:
        if rw.dispatcher is None and src.get("dispatcher"):
            rw.dispatcher = src["dispatcher"]
            take(f"dispatcher {rw.dispatcher}")
        if src.get("ep_overlap") and not rw.ep_overlap and not rw.ep_overlap_off and ep_ok:
            rw.ep_overlap = True
            take("expert all-to-all overlap")
        if (src.get("delay_wgrad") and rw.ep_overlap and not rw.delay_wgrad
                and not rw.delay_wgrad_off):
            rw.delay_wgrad = True
            take("delayed weight gradients")
    if (bridge is None and is_bridge and rw.dispatcher is None and model.num_experts
            and _DEEPSEEK_V3.search(name)):
        # Megatron-Bridge's deepseek_v3 base recipe, which its perf recipes start from
        rw.dispatcher = "flex"
        rw.assume("bridge-dsv3-flex-dispatcher")
    modules_box = ParallelPlan()  # receives recompute_modules from the notes, if any
    cell = str(v.get("recompute", "")).strip()
    if "recompute" in v and (not cell or (_NOT_STATED.fullmatch(cell) and not
                                          cell.lower().startswith("none"))):
        said = _notes_recompute(notes)
        if said:  # the notes state what the cell leaves empty
            v["recompute"] = said
            rw.assume("recompute-from-notes", said)
    elif cell and (cell.lower().startswith("none") or not _NOT_STATED.fullmatch(cell)):
        said = _notes_recompute(notes, explicit=True)
        mode = {"no": "none", "off": "none"}.get(said.split()[0].lower(), said.split()[0].lower()) \
            if said else None
        stated_mode = re.split(r"[\s(:;,]", cell.lower(), maxsplit=1)[0]
        if mode and stated_mode in ("none", "full", "selective") and mode != stated_mode:
            rw.refuse("notes contradict the row", f"recompute={cell!r} but the notes state "
                      f"{said!r}")
    stated = bool(str(v.get("recompute", "")).strip()
                  or re.search(r"recompute_modules\s*=\s*\[", notes))  # the notes' modules
    if not stated and "recompute" in src:
        # the recipe's (or all of its family's), which the summary does not print
        recompute, mods, layers = src["recompute"]
        if mods:
            modules_box.recompute_modules = mods
        if layers:
            modules_box.recompute_num_layers = layers
        take(f"recompute {recompute}" + (f" ({mods})" if mods else "")
             + (f" ({layers} layers per chunk)" if layers else ""))
    else:
        recompute = (_recompute_policy(v["recompute"], framework, notes, rw, modules_box)
                     if "recompute" in v else str(get["recompute"]).lower())
    plan = ParallelPlan(tensor_parallel=ints["tensor_parallel"], pipeline_parallel=ints["pipeline_parallel"],
                        data_parallel=ints["data_parallel"], micro_batch_size=ints["micro_batch_size"],
                        global_batch_size=ints["global_batch_size"],
                        schedule="interleaved" if vp > 1 else "1f1b",
                        recompute=recompute, precision="bf16",
                        virtual_pipeline_stages=vp if vp > 1 else None,
                        **{c: (_num(path, row, c, str(get[c]), int) if str(get[c]).strip() else None)
                           for c in ("first_stage_layers", "last_stage_layers")})
    if getattr(modules_box, "recompute_modules", None):
        plan.recompute_modules = modules_box.recompute_modules
    if getattr(modules_box, "recompute_num_layers", None):
        plan.recompute_num_layers = modules_box.recompute_num_layers
    if precision == "fp8":
        if "fp8" in PRECISIONS:
            plan.precision = "fp8"  # validation refuses it while FP8 is not modelled
        else:
            rw.refuse("FP8 precision", f"precision={v.get('precision', precision)!r}: FP8 training "
                      "is not modelled yet")
        if recipe is not None:
            rw.put(plan, "plan", "fp8_recipe", recipe)
        if rw.fp8_param_gather:
            rw.put(plan, "plan", "fp8_param_gather", True)
    else:
        plan.precision = precision
        fp8_said = [m for m in re.finditer(r"\b(?:all |the )?(?:gemms?|linears?|matmuls?)\b[^.;,]{0,12}"
                                           r"\b(?:in|with)\s+(?:fp8|float8|mxfp8)\b", notes, re.I)
                    if not _negated_at(notes, m.start(), m.end())
                    and not _about_other_run(notes, m.start(), m.end())]
        if fp8_said:
            rw.refuse("notes contradict the row", f"precision={v.get('precision', precision)!r} but "
                      "the notes say the GEMMs run in FP8")
    if rw.grad_reduce_fp32 and plan.precision in ("bf16", "fp16", "fp8"):
        rw.put(plan, "plan", "grad_reduce_dtype", "fp32")
        rw.assume("grad-reduce-from-label")
    # the custom pipeline layout: the notes' pp_layout, or Megatron-Bridge's DeepSeek-V3 default
    L, p = ints["num_layers"], ints["pipeline_parallel"]
    layout = rw.pp_layout
    recipe_layout = (bridge.pipeline_layout if bridge is not None else
                     family.layouts.get((p, max(vp, 1))) if family is not None else None)
    if layout is None and recipe_layout:
        layout = recipe_layout if model.mtp_num_layers else recipe_layout.replace("m", "")
        rw.assume("bridge-perf-recipe-layout", layout if bridge is not None else
                  f"{layout}, the layout of every recipe of the family at p={p}, v={max(vp, 1)}")
    if layout is None:
        layout = _bridge_dsv3_layout(name, framework, L, p, vp, model.mtp_num_layers)
        if layout is not None:
            rw.assume("bridge-dsv3-pipeline-layout", f"p={p} v={max(vp, 1)}: {layout}")
    if layout is not None:
        rw.put(plan, "plan", "pipeline_model_parallel_layout", layout)
    if bridge is not None and bridge.cuda_graph_impl != "none":
        # the recipe's CUDA graphs (validation refuses, by name, those it does not model)
        rw.put(plan, "plan", "cuda_graph_impl", bridge.cuda_graph_impl)
        if bridge.cuda_graph_modules:
            rw.put(plan, "plan", "cuda_graph_modules", bridge.cuda_graph_modules)
    if rw.dispatcher is not None:
        rw.put(plan, "plan", "moe_token_dispatcher_type", rw.dispatcher)
    if rw.ep_overlap:
        rw.put(plan, "plan", "overlap_moe_expert_parallel_comm", True)
    if rw.delay_wgrad:  # validation refuses it by name without the overlap
        rw.put(plan, "plan", "delay_wgrad_compute", True)
    # Megatron's uneven split when the layers do not fill p*v stages but L+2 does
    stages = p * max(vp, 1)
    flags = _has(plan, "account_for_embedding_in_pipeline_split")
    if (layout is None and p > 1 and (vp <= 1 or flags) and L % stages and not (L + 2) % stages
            and _MEGATRON.search(framework)
            and plan.first_stage_layers is None and plan.last_stage_layers is None):
        each = (L + 2) // stages
        rw.assume("pipeline-split-embedding-loss", f"first and last (virtual) stage {each - 1} "
                  f"layers, the others {each}")
        if flags:  # Megatron-Core's own flags (the plan holds them)
            plan.account_for_embedding_in_pipeline_split = True
            plan.account_for_loss_in_pipeline_split = True
        else:
            plan.first_stage_layers = plan.last_stage_layers = each - 1
    elif (layout is None and p > 1 and L % stages and plan.first_stage_layers is None
          and plan.last_stage_layers is None and _has(plan, "pipeline_model_parallel_layout")
          and (re.search(r"torchtitan", framework, re.I)
               or (re.search(r"\bmeta\b", framework, re.I) and not (L + 2) % stages))):
        counts = torchtitan_stage_layers(L, stages)
        if min(counts) >= 1:
            layout = "|".join(("E" if i == 0 else "") + f"t*{n}" + ("L" if i == stages - 1 else "")
                              for i, n in enumerate(counts))
            rw.put(plan, "plan", "pipeline_model_parallel_layout", layout)
            rw.assume("torchtitan-pipeline-split", f"{layout} over p={p}" + (
                f" x v={vp}" if vp > 1 else ""))
    cp = opt["context_parallel"] or 1
    if cp > 1:
        rw.put(plan, "plan", "context_parallel", cp)
        per_node = ints["gpus_per_node"] // max(ints["tensor_parallel"], 1)
        kind, a2a_size = _check_cp_comm(framework, notes, rw, per_node if per_node < cp and
                                        per_node > 0 and cp % per_node == 0 else None, cp)
        if kind != "p2p":
            rw.put(plan, "plan", "cp_comm_type", kind)
        if a2a_size is not None:
            rw.put(plan, "plan", "cp_a2a_size", a2a_size)
    ep = opt["expert_parallel"] or 1
    if ep > 1:
        rw.put(plan, "plan", "expert_parallel", ep)
    if e and e > 1:
        t, ranks = ints["tensor_parallel"], ints["tensor_parallel"] * cp * ints["data_parallel"]
        etp_note = _ETP_NOTE.search(notes)
        if etp_note:
            rw.put(plan, "plan", "expert_tensor_parallel", int(etp_note.group(1)))
            rw.assume("etp-from-notes", etp_note.group(0))
        elif t > 1 and _has(plan, "expert_tensor_parallel"):
            if is_bridge and _BRIDGE_ETP1_MODELS.search(name):
                plan.expert_tensor_parallel = 1
                rw.assume("bridge-moe-etp-1")
            elif ranks % (t * ep) == 0:
                rw.assume("etp-megatron-default")
            elif ranks % ep == 0:  # ep*t experts' ranks do not fit in a stage's t*cp*d ranks
                plan.expert_tensor_parallel = 1
                rw.assume("etp-forced-1", f"t*ep={t * ep} > t*cp*d={ranks}")
    if e and e > 1 and _has(plan, "moe_imbalance_factor"):
        plan.moe_imbalance_factor = 1.0
    # sequence parallelism and overlap are plan fields; the distributed optimizer is ZeRO stage 1
    # (Megatron's --use-distributed-optimizer), FSDP (full sharding) ZeRO stage 3
    sharded = []
    recipes = is_bridge or nemo  # NeMo 2 / Megatron-Bridge: what their recipes always set
    unstated = {col for col in ("sequence_parallel", "distributed_optimizer")
                if col in v and (not v[col] or _NOT_STATED.fullmatch(v[col]))}
    said, torn = _notes_overlaps(notes)  # the settings the notes state (the overlaps below)
    sp_said = said.get("sequence_parallel")
    if sp_said is not None and "sequence_parallel" in unstated:
        v["sequence_parallel"] = "y" if sp_said else "n"  # the notes say it, the cell does not
        unstated.discard("sequence_parallel")
        rw.assume("sp-from-notes", "on" if sp_said else "off")
    # a stated cell wins: notes speak of sequence parallelism in general terms ("on whenever
    # TP>1", "not applicable at TP=1") as often as of the run
    if recipes and "sequence_parallel" in unstated and ints["tensor_parallel"] > 1:
        v["sequence_parallel"] = "y"  # sequence parallelism whenever t > 1
        (nemo_defaults.append("sequence parallelism with t > 1") if nemo else
         rw.assume("recipe-sequence-parallel", "Megatron-Bridge"))
    elif ("sequence_parallel" in unstated and ints["tensor_parallel"] > 1
          and re.search(r"torchtitan", framework, re.I)):
        v["sequence_parallel"] = "y"  # torchtitan's TP plan shards the norms' tokens too
        rw.assume("recipe-sequence-parallel", "torchtitan")
    if recipes and "distributed_optimizer" in unstated and not _flag(v.get("fsdp", "") or "n"):
        v["distributed_optimizer"] = "y"
        (nemo_defaults.append("the distributed optimizer") if nemo else
         rw.assume("recipe-distributed-optimizer"))
    for col in ("sequence_parallel", "overlap_grad_reduce", "distributed_optimizer", "fsdp"):
        text = str(v.get(col, "") or GENERAL_COLUMNS.get(col, "") or "")
        flag = _flag(text)
        if flag is None and col in _SHARDING_WORDS and _SHARDING_WORDS[col].match(text):
            # the column's own words: "FSDP2", "FULL_SHARD", "ZeRO-1" ...; "FSDP: no" says no
            flag = not (re.match(r"[^(,;]*\b(?:no|not|off|disabled?|false|none|n)\b", text, re.I)
                        or re.search(r"\bnot used\b|\bunused\b", text, re.I))
        if flag is None and text:
            rw.refuse(f"unreadable {col}", f"{col}={text!r}: expected y or n (yes/no, "
                      "true/false, on/off, enabled/disabled, 1/0)")
        elif flag and col == "fsdp" and re.search(r"reshard[_ ]after[_ ]forward\s*[=:]?\s*false|zero[- ]?2"
                                                  r"|shard[_ ]grad[_ ]op", text, re.I):
            rw.refuse("unreadable fsdp", f"{col}={text!r}: FSDP that keeps the parameters "
                      "gathered after the forward (ZeRO-2-like, SHARD_GRAD_OP) is not modelled")
            sharded.append(col)
        elif flag and re.search(r"hsdp|hybrid", text, re.I):
            shards = re.search(r"(\d+)\s*(?:shards|-way shard\w*|gpus? per shard group)|shard(?:ing)?"
                               r"[_ ](?:group[_ ])?size\s*[=:]?\s*(\d+)|dp_shard\s*[=:]?\s*(\d+)",
                               f"{text} {notes}", re.I)
            if shards:  # "HSDP (2 replicas x 4 shards)", "shard size 4", torchtitan dp_shard=4
                size = int(next(g for g in shards.groups() if g))
                rw.assume("hsdp-shard-size", f"data_parallel_shard_size={size}")
                rw.put(plan, "plan", "data_parallel_shard_size", size)
            elif not re.search(r"within (an? )?(\d+-gpu )?node", text.lower()):
                rw.refuse("hybrid sharded data parallelism (HSDP)", f"{col}={text!r}: hybrid "
                          "sharding over groups other than a node's GPUs is not modelled (the "
                          "shard group's size is not stated)")
            else:  # the shard group: the data-parallel ranks of one node
                t_cp = ints["tensor_parallel"] * (opt["context_parallel"] or 1)
                size = max(1, ints["gpus_per_node"] // t_cp)
                rw.assume("hsdp-node-shard", f"data_parallel_shard_size={size}")
                rw.put(plan, "plan", "data_parallel_shard_size", size)
            sharded.append(col)
        elif flag and col in ("distributed_optimizer", "fsdp"):
            sharded.append(col)
        elif flag:
            setattr(plan, col, True)
    megatron = bool(_MEGATRON.search(framework))
    if len(sharded) == 2:
        rw.refuse("distributed optimizer and FSDP", "fsdp and distributed_optimizer are both y")
    elif sharded:
        plan.zero_stage = 3 if sharded[0] == "fsdp" else 1
        rw.assume("distributed-optimizer-zero1" if plan.zero_stage == 1 else
                  "megatron-fsdp-zero3" if megatron else "fsdp-zero3")
    ogr_stated = bool(str(v.get("overlap_grad_reduce", "")).strip())  # an empty cell: not stated
    if is_bridge:  # the recipe's (family's) DDP overlaps; a stated grad-reduce overlap wins
        if not ogr_stated:
            plan.overlap_grad_reduce = src.get("overlap_grad_reduce", True)
        plan.overlap_param_gather = plan.zero_stage >= 1 and src.get("overlap_param_gather", True)
        if "overlap_grad_reduce" in src and "overlap_param_gather" in src:
            take(("" if ogr_stated else f"overlap_grad_reduce {src['overlap_grad_reduce']}, ")
                 + f"overlap_param_gather {src['overlap_param_gather']}")
        else:
            rw.assume("megatron-overlap-default")
    elif not ogr_stated and nemo:
        plan.overlap_grad_reduce = True
        # MXFP8 reuses the gradient buffer for the parameter all-gather, not overlapped
        plan.overlap_param_gather = plan.zero_stage >= 1 and recipe != "mxfp8"
        nemo_defaults.append("overlap_grad_reduce" + (", overlap_param_gather"
                                                      if plan.overlap_param_gather else ""))
    elif not ogr_stated and plan.zero_stage == 3:
        rw.assume("fsdp-overlap")
        plan.overlap_grad_reduce = plan.overlap_param_gather = True
    if (plan.zero_stage == 3 and re.search(r"FSDP1", framework) and plan.precision == "bf16"
            and plan.grad_reduce_dtype is None):
        rw.assume("fsdp1-bf16-reduce")
        plan.grad_reduce_dtype = "bf16"
    if is_bridge:
        # the performance recipes' precision settings (Megatron-Bridge 0.6 perf_recipes:
        # _benchmark_common and _perf_precision set grad_reduce_in_fp32=False; its FP8
        # current-scaling and MXFP8 mixed-precision configs set fp8_param_gather=True)
        if plan.grad_reduce_dtype is None and plan.precision in ("bf16", "fp8"):
            rw.assume("bridge-perf-bf16-grad-reduce")
            plan.grad_reduce_dtype = "bf16"
        if (plan.precision == "fp8" and plan.zero_stage >= 1 and not plan.fp8_param_gather
                and bridge is not None and bridge.fp8_param_gather is not None):
            plan.fp8_param_gather = bool(bridge.fp8_param_gather)  # the recipe's
        elif (plan.precision == "fp8" and plan.zero_stage >= 1 and not plan.fp8_param_gather
              and recipe != "blockwise"):
            rw.assume("bridge-fp8-param-gather")
            plan.fp8_param_gather = True
        if _has(plan, "cross_entropy_loss_fusion") and not plan.cross_entropy_loss_fusion:
            rw.assume("bridge-perf-te-cross-entropy")
            plan.cross_entropy_loss_fusion, plan.cross_entropy_fusion_impl = True, "te"
    elif nemo:
        if _has(plan, "cross_entropy_loss_fusion") and not plan.cross_entropy_loss_fusion:
            plan.cross_entropy_loss_fusion, plan.cross_entropy_fusion_impl = True, "te"
            nemo_defaults.append("Transformer Engine's fused cross-entropy")
        if plan.grad_reduce_dtype is None and plan.precision in ("bf16", "fp8"):
            plan.grad_reduce_dtype = "bf16"
            nemo_defaults.append("gradients reduced in bf16")
        if plan.precision == "fp8" and plan.zero_stage >= 1 and not plan.fp8_param_gather:
            plan.fp8_param_gather = True
            nemo_defaults.append("fp8_param_gather")
    if plan.sequence_parallel and plan.tensor_parallel > 1 and _has(plan, "tp_comm_overlap"):
        if src.get("tp_comm_overlap") is not None:  # the recipe's (family's) CommOverlapConfig
            plan.tp_comm_overlap = src["tp_comm_overlap"]
            take("TP communication overlap " + ("on" if plan.tp_comm_overlap else "off"))
        elif is_bridge and model.multi_latent_attention is True:
            rw.assume("bridge-mla-no-tp-comm-overlap")
        elif is_bridge:
            rw.assume("bridge-tp-comm-overlap")
            plan.tp_comm_overlap = True
        elif nemo and not model.num_experts and model.multi_latent_attention is not True:
            plan.tp_comm_overlap = True  # the dense models' performance recipes
            nemo_defaults.append("tp_comm_overlap")
        elif any(not _negated_at(text_, m.start(), m.end()) for text_ in (framework, notes)
                 for m in re.finditer(r"async(?:hronous)?[- ]TP", text_, re.I)):
            rw.assume("async-tp-overlap")  # not "async TP disabled (plain TP)"
            plan.tp_comm_overlap = True
    if torn:
        rw.refuse("overlaps stated both on and off", f"the notes state {', '.join(torn)} both on "
                  "and off")
    if "overlap_grad_reduce" in said and ogr_stated:
        del said["overlap_grad_reduce"]  # the column states it
    if "tp_comm_overlap" in said and not (plan.sequence_parallel and plan.tensor_parallel > 1
                                          and _has(plan, "tp_comm_overlap")):
        del said["tp_comm_overlap"]  # nothing to overlap (Megatron needs t > 1 and SP)
    if "overlap_param_gather" in said and plan.zero_stage < 1:
        del said["overlap_param_gather"]  # no parameter all-gather to overlap
    said.pop("sequence_parallel", None)  # read with its column above
    if "fp8_param_gather" in said and not (plan.precision == "fp8" and plan.zero_stage >= 1
                                           and _has(plan, "fp8_param_gather")):
        del said["fp8_param_gather"]  # no FP8 weights to gather
    if said:  # what the notes state wins over recipes, families and framework defaults
        for k, on in said.items():
            setattr(plan, k, on)
        words = {"tp_comm_overlap": ("TP communication overlap", "tp_comm_overlap"),
                 "overlap_grad_reduce": ("overlap_grad_reduce",),
                 "overlap_param_gather": ("overlap_param_gather",),
                 "fp8_param_gather": ("fp8_param_gather",)}
        gone = [w for k in said for w in words[k]]
        took = [x for x in took if not any(w in x for w in gone)]
        nemo_defaults = [x for x in nemo_defaults if not any(w in x for w in gone)]
        if "tp_comm_overlap" in said:
            rw.withdraw("bridge-tp-comm-overlap")
            rw.withdraw("async-tp-overlap")
        if {"overlap_grad_reduce", "overlap_param_gather"} & set(said):
            rw.withdraw("fsdp-overlap")
            rw.withdraw("megatron-overlap-default")
        if "fp8_param_gather" in said:
            rw.withdraw("bridge-fp8-param-gather")
            rw.withdraw("fp8-param-gather-from-label")
        rw.assume("overlaps-from-notes", ", ".join(f"{k} {on}" for k, on in said.items()))
    if took:
        rw.assume("bridge-perf-recipe-family", ", ".join(took) + (
            f": the one recipe {family.recipes[0]}" if len(family.recipes) == 1
            else f": all {len(family.recipes)} of {', '.join(family.recipes)}"))
    if nemo_defaults:
        rw.assume("nemo-recipe-defaults", ", ".join(nemo_defaults))
    if re.search(r"per-node vs per-GPU not sa|per node vs per GPU not sa", notes, re.I):
        rw.assume("bandwidth-per-node-as-printed")
    gpu_text = str(get["gpu"])
    bw_text = str(get["inter_node_bandwidth_gbps"]).strip()
    bw = _num(path, row, "inter_node_bandwidth_gbps", bw_text) if bw_text else None
    if bw is not None and re.search(r"per[- ]GPU|/\s*GPU\b", bw_text, re.I):
        bw *= ints["gpus_per_node"]  # the column is the node's: "400 Gb/s (per GPU)"
        rw.assume("bandwidth-per-gpu-cell", f"{bw:,.0f} Gb/s per node of {ints['gpus_per_node']}")
    cluster = ClusterConfig(gpu=gpu_kind(gpu_text), gpus_per_node=ints["gpus_per_node"],
                            inter_node_bandwidth_gbits_per_s=bw)
    if not bw_text and cluster.gpu in GPU_NIC_GBITS_PER_GPU:
        rw.assume("network-from-gpu-reference", f"{node_network_gbits_per_s(cluster):,.0f} Gb/s "
                                                f"per node of {cluster.gpus_per_node}")
    if cluster.gpu != gpu_text and cluster.gpu in GPU_KINDS:
        rw.assume("gpu-alias", f"{gpu_text} -> {cluster.gpu}")
    if cluster.gpu in GPU_KINDS and kind_fits_peak_fraction(cluster.gpu):
        rw.assume("gpu-peak-fraction-fitted", cluster.gpu)
    if plan.recompute_num_layers is not None:
        capped = capped_recompute_layers(plan, model.num_layers, model.mtp_num_layers or 0)
        if capped is not plan:  # Megatron caps the count per model chunk: every layer
            rw.withdraw("megatron-recompute-method")
            rw.assume("megatron-recompute-method", f"block, {plan.recompute_num_layers} layers: at "
                      "least the largest model chunk, every layer")
            plan = capped
    session = Session(model, plan, cluster, CostConfig())
    _name_defaults(session, v, rw)
    world = ints["tensor_parallel"] * ints["pipeline_parallel"] * ints["data_parallel"] * cp
    if world != ints["num_gpus"]:
        rw.refuse("GPU count", f"num_gpus={ints['num_gpus']} disagrees with t*p*d"
                               + ("*cp" if cp > 1 else "") + f"={world}")
    try:
        n_params = num_parameters(model) / 1e9
    except Exception:  # noqa: BLE001 - a label only; validation names what is wrong
        n_params = math.nan
    moe = bool(e and e > 1)
    group = {"model": v.get("model_name", "") or f"{n_params:.1f}B", "t": str(plan.tensor_parallel),
             "p": str(plan.pipeline_parallel), "source": v.get("source_id", "") or path.name,
             "gpu": cluster.gpu, "kind": "MoE" if moe else "dense",
             "precision": "fp8" if precision == "fp8" else precision}
    time_text = str(get["measured_iteration_time_s"])
    m = _finish(row, session,
                _num(path, row, "measured_iteration_time_s", time_text) if time_text else math.nan,
                group, "; ".join(rw.reasons), rw.causes, assumptions=rw.assumptions,
                always_validate=True, memory_gib=memory_gib, memory_scale=memory_scale)
    if not m.skip_reason and plan.recompute == "none" and any(
            a.startswith("megatron-recompute-default:") for a in m.assumptions):
        _check_assumed_recompute(m)
    return m


#: Session fields each column of the general layout sets (:data:`PUBLISHED_FIELDS` and the
#: layout's other plan columns).
_COLUMN_TARGETS: dict[str, tuple[str, ...]] = {
    **{c: tuple(re.findall(r"\b(?:model|plan|cluster)\.\w+", t)) for c, t in PUBLISHED_FIELDS.items()},
    "overlap_grad_reduce": ("plan.overlap_grad_reduce",),
    "first_stage_layers": ("plan.first_stage_layers",), "last_stage_layers": ("plan.last_stage_layers",)}


def _field_default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def _name_defaults(session: Session, v: dict[str, str], rw: _Row) -> None:
    """Name what the row took without a column: each column of :data:`GENERAL_COLUMNS` with a
    default that the file lacks (``general-layout-default``), and each model and plan field no
    column of the file sets whose value is still its default, as ``field=value`` grouped by
    origin (``defaults-without-column``; fields without effect on the row,
    :func:`core.plan.rules.inactive_fields`, and the model's name left out). A field another
    policy set keeps that policy's name."""
    absent = [c for c, d in GENERAL_COLUMNS.items() if d not in (None, "") and c not in v]
    if absent:
        rw.assume("general-layout-default", ", ".join(f"{c}={GENERAL_COLUMNS[c]}" for c in absent))
    covered = {t for c in (*v, *absent) for t in _COLUMN_TARGETS.get(c, ())}
    idle = inactive_fields(session)
    taken: dict[str, list[str]] = {}
    for section in ("model", "plan"):
        own = getattr(session, section)
        for f in dataclasses.fields(own):
            path = f"{section}.{f.name}"
            if path in covered or path in idle or path in NOT_TIMED_FIELDS or (
                    path == "model.tied_embeddings" and "tied embeddings not stated" in rw.causes):
                continue  # (a refused tying is no default taken)
            value = getattr(own, f.name)
            if value == _field_default(f):
                origin = "Megatron-LM's" if default_origin(f.name) == "Megatron-LM" else "the session's"
                taken.setdefault(origin, []).append(f"{f.name}={json.dumps(value)}")
    if taken:
        rw.assume("defaults-without-column", "; ".join(f"{o}: {', '.join(x)}" for o, x in taken.items()))


# row_memory: the product's (core.accuracy.validate.row_memory), not a copy of it


#: How far beyond a GPU's whole memory a plan under an assumed (not stated) recompute=none may
#: be estimated before the assumption counts as contradicted (:func:`_check_assumed_recompute`).
RECOMPUTE_MEMORY_TOLERANCE = 0.10


def _check_assumed_recompute(m: Measurement) -> None:
    """An assumed recomputation (none: Megatron-Core's default, the source silent) that the
    plan's memory contradicts (more than :data:`RECOMPUTE_MEMORY_TOLERANCE` beyond the GPU's
    whole capacity) is no assumption to predict
    on: the run must have recomputed (or offloaded) something, which is not stated. Skip the
    row, naming the memory it would need."""
    mem = row_memory(m)
    if mem is None:  # the simulator names what it cannot model when predicting
        return
    need, capacity = mem
    # against the whole capacity and a tolerance: the reserve is a planner's margin, and the
    # memory model is an estimate, so only a plan clearly beyond the GPU contradicts it
    fits = need <= capacity * (1 + RECOMPUTE_MEMORY_TOLERANCE)
    why = (f"needs {need / 2**30:.1f} GiB per GPU, more than {RECOMPUTE_MEMORY_TOLERANCE:.0%} "
           f"beyond the GPU's {capacity / 2**30:.1f} GiB")
    if not fits:
        m.skip_reason = (f"recompute is empty and Megatron-Core's default (none) {why}: the run "
                         "must have recomputed or offloaded activations, which the source does not "
                         "state")
        m.skip_causes = ["recompute not stated (none does not fit)"]


def to_jsonl(measurements: list[Measurement], source: str) -> str:
    """The runs as JSON lines (one record per row, in order; ``source``: the row's source id,
    else ``source``)."""
    from core.io.session import SESSION_FORMAT, SESSION_VERSION
    out = []
    for m in measurements:
        rec = {"row": m.row, "source": m.group.get("source") or source,
               "measured_iteration_time_s": None if math.isnan(m.measured_s) else m.measured_s,
               "skip_reason": m.skip_reason or None, "assumptions": m.assumptions}
        if not math.isnan(m.measured_memory_gib):
            rec.update(measured_memory_gib=m.measured_memory_gib, memory_scale=m.memory_scale)
        if m.session is None:
            continue  # a row the reader could not build a plan of: nothing to record
        rec["session"] = {"format": SESSION_FORMAT, "version": SESSION_VERSION,
                          **{k: v for k, v in m.session.to_dict().items()
                             if k in ("model", "plan", "cluster", "cost")}}
        out.append(json.dumps(rec))
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python scripts/curate_runs.py IN.csv [--set COLUMN=VALUE ...]``: the JSON lines on
    stdout; exit 2 with one line naming the file and column when the file cannot be read."""
    import sys
    args = list(sys.argv[1:] if argv is None else argv)
    stated: dict[str, str] = {}
    while "--set" in args:
        i = args.index("--set")
        pair = args[i + 1] if i + 1 < len(args) else ""
        col, eq, value = pair.partition("=")
        if not eq or not col.strip() or col.strip() in stated or not value.strip():
            why = ("each column once" if col.strip() in stated else "a value (an empty cell "
                   "states nothing: leave out --set)" if eq and col.strip() else "COLUMN=VALUE")
            print(f"curate_runs: --set {pair!r}: give {why}", file=sys.stderr)
            return 2
        stated[col.strip()] = value.strip()
        del args[i:i + 2]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        runs = read_measurements(args[0], stated=stated)
    except MeasurementFileError as exc:
        print(f"curate_runs: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(to_jsonl(runs, Path(args[0]).name))
    unwritten = [m for m in runs if m.session is None]
    if unwritten:  # to_jsonl writes a record only with a session: say which rows it left out
        shown = "; ".join(f"row {m.row}: {m.skip_reason}" for m in unwritten[:3])
        more = f"; and {len(unwritten) - 3} more" if len(unwritten) > 3 else ""
        print(f"curate_runs: {len(unwritten)} of {len(runs)} rows of {args[0]} not written (no "
              f"plan could be built of them): {shown}{more}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
