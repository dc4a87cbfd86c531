"""Predict measured iteration times and report the error.

Reads three CSV layouts, detected from the header:

* the vTrain authors' single-node layout (``# GPUs, global batch, micro batch,
  hidden size, attention heads, # layers, sequence length, tensor
  parallelism, data parallelism, pipeline parallelism, iteration time (ms)``),
* their multi-node layout (the same with a leading ``Parameters (billion)``;
  8 GPUs per node and 800 Gb/s per node, as the authors state),
* a general layout with named columns (:data:`GENERAL_COLUMNS`).

The authors' runs are Megatron-DeepSpeed on A100-SXM4-80GB, fp16 mixed
precision, full activation recomputation, 1F1B, vocabulary 50257.

A row whose plan the simulator does not support is skipped with its reason,
never dropped silently and never guessed.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .config import ClusterConfig, CostConfig, ModelConfig, ParallelPlan, Session, gpu_kind, validate
from .inputs import read_text

__all__ = ["Measurement", "read_measurements", "ValidationResult", "predict_rows", "error_metrics",
           "GENERAL_COLUMNS", "MeasurementFileError"]

#: Required and optional (value = default) columns of the general layout.
GENERAL_COLUMNS: dict[str, Any] = {
    "gpu": None, "num_gpus": None, "gpus_per_node": None, "inter_node_bandwidth_gbps": 800.0,
    "num_layers": None, "hidden_size": None, "num_attention_heads": None, "ffn_hidden_size": "",
    "seq_length": None, "vocab_size": 50257, "global_batch_size": None, "micro_batch_size": None,
    "tensor_parallel": None, "pipeline_parallel": None, "data_parallel": None,
    "virtual_pipeline_stages": 1, "sequence_parallel": "n", "recompute": "full",
    "precision": "fp16", "measured_iteration_time_s": None,
}
_AUTHORS_SINGLE = ["# GPUs", "global batch", "micro batch", "hidden size", "attention heads",
                   "# layers", "sequence length", "tensor parallelism", "data parallelism",
                   "pipeline parallelism", "iteration time (ms)"]
_AUTHORS_MULTI = ["Parameters (billion)"] + _AUTHORS_SINGLE


#: Most data rows a measurement file may have (the authors' files have 864 and 288).
MAX_ROWS = 100_000


class MeasurementFileError(ValueError):
    """A measurement CSV cannot be read; the message names the file, row and column."""


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
        Measured iteration time, seconds.
    skip_reason : str
        Why the simulator cannot predict it ("" when it can).
    group : dict
        Labels for the error table: ``model`` (size), ``t``, ``p``, ``source``.
    """

    row: int
    session: Session | None
    measured_s: float
    skip_reason: str = ""
    group: dict[str, str] = field(default_factory=dict)


def _norm_header(h: str) -> str:
    return h.strip().lstrip("\ufeff").strip()


def read_measurements(path: str | Path) -> list[Measurement]:
    """Read a measurement CSV in any supported layout (see module doc).

    Raises
    ------
    MeasurementFileError
        Unreadable, non-regular or too large file (:mod:`core.inputs`), not CSV, more than
        :data:`MAX_ROWS` rows, unknown header, or a value that is not a finite number.
        A row whose values break a configuration rule or bound is kept, skipped with
        that reason.
    """
    path = Path(path)
    text = read_text(path, MeasurementFileError, "csv")
    try:
        rows = []
        for r in csv.reader(io.StringIO(text, newline="")):
            if r and any(c.strip() for c in r):
                rows.append(r)
                if len(rows) > MAX_ROWS + 1:
                    raise MeasurementFileError(f"{path}: more than {MAX_ROWS:,} data rows")
    except csv.Error as exc:
        raise MeasurementFileError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows:
        raise MeasurementFileError(f"{path}: empty file")
    if len(rows) == 1:
        raise MeasurementFileError(f"{path}: a header and no data rows")
    header = [_norm_header(h) for h in rows[0]]
    if header == _AUTHORS_SINGLE or header == _AUTHORS_MULTI:
        return [_authors_row(path, i + 1, header, r) for i, r in enumerate(rows[1:])]
    missing = [c for c, d in GENERAL_COLUMNS.items() if d is None and c not in header]
    if missing:
        raise MeasurementFileError(
            f"{path}: unknown layout; the general layout needs columns {', '.join(missing)} "
            f"(header was: {', '.join(header)})")
    return [_general_row(path, i + 1, header, r) for i, r in enumerate(rows[1:])]


def _num(path: Path, row: int, col: str, text: str, kind: Callable = float) -> Any:
    try:
        v = float(text)
    except ValueError:
        raise MeasurementFileError(f"{path}: row {row}, column {col!r}: {text[:40]!r} is not a "
                                   "number") from None
    if not math.isfinite(v):
        raise MeasurementFileError(f"{path}: row {row}, column {col!r}: {text[:40]!r} is not a "
                                   "finite number")
    if kind is int:
        if not v.is_integer():
            raise MeasurementFileError(f"{path}: row {row}, column {col!r}: {text!r} is not an integer")
        return int(v)
    return v


def _finish(row: int, session: Session, measured_s: float, group: dict[str, str],
            reason: str = "") -> Measurement:
    if not reason:
        errs = validate(session)
        if errs:
            reason = "invalid plan: " + "; ".join(e.message for e in errs)
    if not reason and not (measured_s > 0 and math.isfinite(measured_s)):
        reason = f"measured time {measured_s!r} is not a positive number"
    return Measurement(row, session, measured_s, reason, group)


def _authors_row(path: Path, row: int, header: list[str], r: list[str]) -> Measurement:
    if len(r) != len(header):
        raise MeasurementFileError(f"{path}: row {row} has {len(r)} fields, the header {len(header)}")
    v = {h: r[i].strip() for i, h in enumerate(header)}
    ints = {h: _num(path, row, h, v[h], int) for h in _AUTHORS_SINGLE[:-1]}
    multi = "Parameters (billion)" in v
    model = ModelConfig(name=(f"{v['Parameters (billion)']}B" if multi else
                              f"h={ints['hidden size']} L={ints['# layers']}"),
                        num_layers=ints["# layers"], hidden_size=ints["hidden size"],
                        num_attention_heads=ints["attention heads"], ffn_hidden_size=None,
                        seq_length=ints["sequence length"], vocab_size=50257)
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
                   group, reason)


def _general_row(path: Path, row: int, header: list[str], r: list[str]) -> Measurement:
    v = {h: (r[i].strip() if i < len(r) else "") for i, h in enumerate(header)}
    get = {c: (v.get(c, "") if v.get(c, "") != "" else d) for c, d in GENERAL_COLUMNS.items()}
    ints = {c: _num(path, row, c, str(get[c]), int) for c in (
        "num_gpus", "gpus_per_node", "num_layers", "hidden_size", "num_attention_heads", "seq_length",
        "vocab_size", "global_batch_size", "micro_batch_size", "tensor_parallel", "pipeline_parallel",
        "data_parallel", "virtual_pipeline_stages")}
    ffn = _num(path, row, "ffn_hidden_size", get["ffn_hidden_size"], int) if get["ffn_hidden_size"] else None
    model = ModelConfig(name=f"h={ints['hidden_size']} L={ints['num_layers']}",
                        num_layers=ints["num_layers"], hidden_size=ints["hidden_size"],
                        num_attention_heads=ints["num_attention_heads"], ffn_hidden_size=ffn,
                        seq_length=ints["seq_length"], vocab_size=ints["vocab_size"])
    recompute = str(get["recompute"]).lower()
    precision = str(get["precision"]).lower()
    plan = ParallelPlan(tensor_parallel=ints["tensor_parallel"], pipeline_parallel=ints["pipeline_parallel"],
                        data_parallel=ints["data_parallel"], micro_batch_size=ints["micro_batch_size"],
                        global_batch_size=ints["global_batch_size"], schedule="1f1b",
                        recompute=recompute, precision=precision)
    cluster = ClusterConfig(gpu=gpu_kind(str(get["gpu"])), gpus_per_node=ints["gpus_per_node"],
                            inter_node_bandwidth_gbits_per_s=_num(path, row, "inter_node_bandwidth_gbps",
                                                                  str(get["inter_node_bandwidth_gbps"])))
    session = Session(model, plan, cluster, CostConfig())
    reasons = []
    if ints["virtual_pipeline_stages"] > 1:
        reasons.append("interleaved schedule (virtual_pipeline_stages > 1) is not supported yet")
    if str(get["sequence_parallel"]).lower() in ("y", "yes", "true", "1"):
        reasons.append("sequence parallelism is not supported yet")
    if recompute == "selective":
        reasons.append("selective recomputation is not supported yet")
    if plan.num_gpus != ints["num_gpus"]:
        reasons.append(f"num_gpus={ints['num_gpus']} disagrees with t*p*d={plan.num_gpus}")
    n_params = model.num_parameters() / 1e9
    group = {"model": f"{n_params:.1f}B", "t": str(plan.tensor_parallel),
             "p": str(plan.pipeline_parallel), "source": path.name}
    return _finish(row, session,
                   _num(path, row, "measured_iteration_time_s", str(get["measured_iteration_time_s"])),
                   group, "; ".join(reasons))


@dataclass
class ValidationResult:
    """Predictions for measured rows and their error figures.

    Attributes
    ----------
    measurements : list of Measurement
    predicted_s : float array, shape (len(measurements),)
        NaN for skipped rows.
    """

    measurements: list[Measurement]
    predicted_s: np.ndarray

    @property
    def used(self) -> np.ndarray:
        """Boolean mask of rows that were predicted."""
        return ~np.isnan(self.predicted_s)

    @property
    def measured_s(self) -> np.ndarray:
        """Measured seconds per row, shape (n,)."""
        return np.array([m.measured_s for m in self.measurements])

    def metrics(self) -> dict[str, float]:
        """Error figures over predicted rows (see :func:`error_metrics`)."""
        used = self.used
        out = error_metrics(self.predicted_s[used], self.measured_s[used])
        out["skipped"] = int((~used).sum())
        return out

    def by_group(self, key: str) -> list[tuple[str, int, float, float]]:
        """``(label, n, MAPE %, max APE %)`` per value of group label ``key``."""
        ape = np.abs(self.predicted_s - self.measured_s) / self.measured_s * 100
        groups: dict[str, list[float]] = defaultdict(list)
        for m, e in zip(self.measurements, ape):
            if not np.isnan(e):
                groups[m.group.get(key, "?")].append(float(e))

        def order(label: str) -> tuple:
            try:
                return (0, float(label.rstrip("B")), label)
            except ValueError:
                return (1, 0.0, label)

        return [(g, len(v), float(np.mean(v)), float(np.max(v)))
                for g, v in sorted(groups.items(), key=lambda kv: order(kv[0]))]


def error_metrics(predicted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE, median and max absolute percentage error (percent) and R² of ``predicted`` vs ``measured``.

    R² = 1 - SS_res / SS_tot on the raw times. Shapes (n,), n >= 1; with n = 0
    every figure is NaN.
    """
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    if predicted.size == 0:
        return {"n": 0, "mape_percent": math.nan, "median_ape_percent": math.nan,
                "max_ape_percent": math.nan, "r2": math.nan}
    ape = np.abs(predicted - measured) / measured * 100
    ss_tot = float(((measured - measured.mean()) ** 2).sum())
    r2 = 1 - float(((measured - predicted) ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    return {"n": int(predicted.size), "mape_percent": float(ape.mean()),
            "median_ape_percent": float(np.median(ape)), "max_ape_percent": float(ape.max()), "r2": r2}


def predict_rows(measurements: list[Measurement], predict: Callable[[Session], float]) -> ValidationResult:
    """Predict every non-skipped row with ``predict(session) -> seconds``.

    A row the predictor rejects (``ValueError`` or ``KeyError``) becomes
    skipped with that message as its reason.
    """
    out = np.full(len(measurements), np.nan)
    for i, m in enumerate(measurements):
        if m.skip_reason:
            continue
        try:
            out[i] = predict(m.session)
        except (ValueError, KeyError) as exc:
            m.skip_reason = f"simulator: {exc}"
    return ValidationResult(measurements, out)
