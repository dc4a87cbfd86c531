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
never dropped silently and never guessed. The general layout also reads the
columns of published runs of modern models (``../shared/data/public-modern/
published_runs.csv``: model family, mixture of experts, context and expert
parallelism, sequence parallelism, distributed optimizer, FSDP, precision
recipes): each column's value is passed to the session field of the same name
when the session has one, and otherwise a row that needs something other than
what is modelled (a GPT model with GeLU, LayerNorm, full multi-head attention
and tied embeddings; no MoE, context parallelism, FSDP, FP8 ...) is skipped
with the reason (:attr:`Measurement.skip_causes` names each cause briefly,
for counts per cause).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .config import (GPU_KINDS, PRECISIONS, RECOMPUTE_MODES, ClusterConfig, CostConfig, ModelConfig,
                     ParallelPlan, Session, gpu_kind, validate)
from .config import rename_field
from .inputs import read_text

__all__ = ["Measurement", "read_measurements", "ValidationResult", "predict_rows", "error_metrics",
           "interval_metrics", "GENERAL_COLUMNS", "MODERN_COLUMNS", "INFO_COLUMNS",
           "MeasurementFileError", "skip_counts"]

#: Required and optional (value = default) columns of the general layout.
GENERAL_COLUMNS: dict[str, Any] = {
    "gpu": None, "num_gpus": None, "gpus_per_node": None, "inter_node_bandwidth_gbps": 800.0,
    "num_layers": None, "hidden_size": None, "num_attention_heads": None, "ffn_hidden_size": "",
    "seq_length": None, "vocab_size": 50257, "global_batch_size": None, "micro_batch_size": None,
    "tensor_parallel": None, "pipeline_parallel": None, "data_parallel": None,
    "virtual_pipeline_stages": 1, "sequence_parallel": "n", "recompute": "full",
    "precision": "fp16", "measured_iteration_time_s": None,
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
        Labels for the error table: ``model`` (size or name), ``t``, ``p``, ``source``.
    skip_causes : list of str
        One short name per cause of the skip ("mixture of experts", "FP8 precision" ...),
        for counts per cause; empty when not skipped.
    """

    row: int
    session: Session | None
    measured_s: float
    skip_reason: str = ""
    group: dict[str, str] = field(default_factory=dict)
    skip_causes: list[str] = field(default_factory=list)


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
            names: dict[str, str] | None = None) -> Measurement:
    causes = list(causes or ([reason.split(":")[0]] if reason else []))
    if not reason:
        errs = validate(session)
        if names:  # the file's own column names
            errs = [rename_field(e, names) for e in errs]
        if errs:
            reason = "invalid plan: " + "; ".join(e.message for e in errs)
            causes = ["GPU kind without a shipped profile" if e.field == "cluster.gpu"
                      else f"invalid plan ({e.field})" for e in errs]
    if not reason and not (measured_s > 0 and math.isfinite(measured_s)):
        reason = f"measured time {measured_s!r} is not a positive number"
        causes = ["measured time not positive"]
    return Measurement(row, session, measured_s, reason, group, list(dict.fromkeys(causes)))


def skip_counts(measurements: list[Measurement]) -> dict[str, int]:
    """Rows skipped per cause (a row with several causes counts under each), most first."""
    counts: dict[str, int] = defaultdict(int)
    for m in measurements:
        if m.skip_reason:
            for c in m.skip_causes or ["other"]:
                counts[c] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


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
                   group, reason, names=_AUTHORS_COLUMNS)


def _flag(text: str) -> bool | None:
    """A yes/no cell: ``y``, ``yes``, ``true``, ``1`` or text starting ``y:``/``y (`` -> True;
    ``n``, ``no``, ``false``, ``0``, ``n/a ...``, ``n (...)`` -> False; empty -> None."""
    t = text.strip().lower()
    if not t:
        return None
    word = t.replace(":", " ").replace("(", " ").split()[0]
    if word in ("y", "yes", "true", "1"):
        return True
    if word in ("n", "no", "false", "0", "n/a", "none"):
        return False
    return None


def _has(obj: Any, name: str) -> bool:
    return any(f.name == name for f in fields(obj))


def _general_row(path: Path, row: int, header: list[str], r: list[str]) -> Measurement:
    v = {h: (r[i].strip() if i < len(r) else "") for i, h in enumerate(header)}
    get = {c: (v.get(c, "") if v.get(c, "") != "" else d) for c, d in GENERAL_COLUMNS.items()}
    ints = {c: _num(path, row, c, str(get[c]), int) for c in (
        "num_gpus", "gpus_per_node", "num_layers", "hidden_size", "num_attention_heads", "seq_length",
        "vocab_size", "global_batch_size", "micro_batch_size", "tensor_parallel", "pipeline_parallel",
        "data_parallel", "virtual_pipeline_stages")}
    opt = {c: (_num(path, row, c, v[c], int) if v.get(c, "") else None)
           for c in ("num_query_groups", "num_experts", "moe_top_k", "moe_ffn_hidden_size",
                     "context_parallel", "expert_parallel")}
    ffn = _num(path, row, "ffn_hidden_size", get["ffn_hidden_size"], int) if get["ffn_hidden_size"] else None
    name = v.get("model_name", "") or f"h={ints['hidden_size']} L={ints['num_layers']}"
    model = ModelConfig(name=name,
                        num_layers=ints["num_layers"], hidden_size=ints["hidden_size"],
                        num_attention_heads=ints["num_attention_heads"], ffn_hidden_size=ffn,
                        seq_length=ints["seq_length"], vocab_size=ints["vocab_size"])
    reasons: list[str] = []
    causes: list[str] = []

    def refuse(cause: str, why: str) -> None:
        causes.append(cause)
        reasons.append(why)

    # the model family: a column the session has a field for is passed on (validate checks
    # it); otherwise anything but GPT's choice is refused
    for col, gpt, cause in (("activation", "gelu", "model family (activation)"),
                            ("normalization", "layernorm", "model family (normalization)")):
        text = v.get(col, "")
        if _has(model, col) and text:
            setattr(model, col, text.lower())
        elif text and text.lower() != gpt:
            refuse(cause, f"{col}={text!r}: only GPT's {gpt} is modelled")
    if model.activation == "swiglu" and model.normalization == "rmsnorm":
        # the README's Llama-style rows: the columns do not hold the rest of the family, which
        # every such model shares (RoPE, no linear biases) and every framework of the sources
        # runs with fused attention (Megatron-Core/TE, torchtitan and fms-fsdp's SDPA)
        model.position_embedding, model.add_bias_linear = "rope", False
        model.attention_kernel = "flash"
    g = opt["num_query_groups"]
    if _has(model, "num_query_groups") and g is not None:
        model.num_query_groups = g
    elif g is not None and g != model.num_attention_heads:
        refuse("model family (grouped-query attention)",
               f"num_query_groups={g} (grouped-query attention) is not modelled: only "
               f"full multi-head attention ({model.num_attention_heads} groups)")
    tied = _flag(v.get("tied_embeddings", ""))
    if _has(model, "tied_embeddings") and tied is not None:
        model.tied_embeddings = tied
    elif tied is False:
        refuse("model family (untied embeddings)",
               "tied_embeddings=n: an untied output layer is not modelled (GPT ties it to the "
               "word embedding)")
    e = opt["num_experts"]
    if e is not None and e > 1:
        if _has(model, "num_experts"):
            model.num_experts = e
            for c in ("moe_top_k", "moe_ffn_hidden_size"):
                if opt[c] is not None and _has(model, c):
                    setattr(model, c, opt[c])
        else:
            refuse("mixture of experts", f"num_experts={e}: mixture-of-experts models are not modelled")

    recompute = str(get["recompute"]).lower()
    if "recompute" in v and not v["recompute"]:
        refuse("recompute not stated", "recompute is empty: the source does not say, and the "
                                       "time depends on it")
        recompute = "full"
    elif recompute not in RECOMPUTE_MODES:
        # "selective (per-op SAC)" and the like: another selection than Megatron's attention core
        refuse("selective recomputation (other than Megatron's)" if recompute.startswith("selective")
               else "recompute",
               f"recompute={v.get('recompute', recompute)!r}: only Megatron's selective "
               "recomputation (the attention core) is modelled, as recompute=selective"
               if recompute.startswith("selective") else
               f"recompute={recompute!r} is not one of {', '.join(RECOMPUTE_MODES)}")
        recompute = "full"
    ptext = str(get["precision"]).strip().lower()
    first = ptext.replace("(", " ").split()[0] if ptext else ""
    if "precision" in v and not v["precision"]:
        refuse("precision not stated", "precision is empty: the source does not say")
        precision = "bf16"
    elif first in PRECISIONS:
        precision = first  # "bf16 mixed precision" is bf16
    elif "fp8" in ptext:
        precision = "bf16"
        if "fp8" in PRECISIONS and first == "fp8":
            precision = "fp8"
        else:
            refuse("FP8 precision", f"precision={v.get('precision', ptext)!r}: FP8 training is "
                                    "not modelled")
    else:
        precision = "bf16"
        refuse("precision", f"precision={ptext!r} is not one of {', '.join(PRECISIONS)}")
    vp = ints["virtual_pipeline_stages"]
    plan = ParallelPlan(tensor_parallel=ints["tensor_parallel"], pipeline_parallel=ints["pipeline_parallel"],
                        data_parallel=ints["data_parallel"], micro_batch_size=ints["micro_batch_size"],
                        global_batch_size=ints["global_batch_size"],
                        schedule="interleaved" if vp > 1 else "1f1b",
                        recompute=recompute, precision=precision,
                        virtual_pipeline_stages=vp if vp > 1 else None,
                        **{c: (_num(path, row, c, str(get[c]), int) if str(get[c]).strip() else None)
                           for c in ("first_stage_layers", "last_stage_layers")})
    cp = opt["context_parallel"] or 1
    for col, value, cause, what in (
            ("context_parallel", cp, "context parallelism", "context parallelism"),
            ("expert_parallel", opt["expert_parallel"] or 1, "expert parallelism",
             "expert parallelism")):
        if value > 1:
            if _has(plan, col):
                setattr(plan, col, value)
            else:
                refuse(cause, f"{col}={value}: {what} is not modelled")
    # sequence parallelism and overlap are plan fields; the distributed optimizer is ZeRO stage 1
    # (Megatron's --use-distributed-optimizer), FSDP (full sharding) ZeRO stage 3
    sharded = []
    for col in ("sequence_parallel", "overlap_grad_reduce", "distributed_optimizer", "fsdp"):
        text = str(v.get(col, "") or GENERAL_COLUMNS.get(col, "") or "")
        flag = _flag(text)
        if flag is None and text:
            refuse(f"unreadable {col}", f"{col}={text!r}: expected y or n")
        elif flag and "hsdp" in text.lower():
            refuse("hybrid sharded data parallelism (HSDP)", f"{col}={text!r}: hybrid sharding "
                   "(shard within a group, replicate across groups) is not modelled")
        elif flag and col in ("distributed_optimizer", "fsdp"):
            sharded.append(col)
        elif flag:
            setattr(plan, col, True)
    if len(sharded) == 2:
        refuse("distributed optimizer and FSDP", "fsdp and distributed_optimizer are both y")
    elif sharded:
        plan.zero_stage = 3 if sharded[0] == "fsdp" else 1
    cluster = ClusterConfig(gpu=gpu_kind(str(get["gpu"])), gpus_per_node=ints["gpus_per_node"],
                            inter_node_bandwidth_gbits_per_s=_num(path, row, "inter_node_bandwidth_gbps",
                                                                  str(get["inter_node_bandwidth_gbps"])))
    session = Session(model, plan, cluster, CostConfig())
    if cluster.gpu not in GPU_KINDS:
        refuse("GPU kind without a shipped profile",
               f"gpu={get['gpu']!r} has no shipped profile (shipped: {', '.join(GPU_KINDS)})")
    world = plan.num_gpus  # t*p*cp*d (the plan holds cp)
    if world != ints["num_gpus"]:
        refuse("GPU count", f"num_gpus={ints['num_gpus']} disagrees with t*p*d"
                            + ("*cp" if cp > 1 else "") + f"={world}")
    n_params = model.num_parameters() / 1e9
    group = {"model": v.get("model_name", "") or f"{n_params:.1f}B", "t": str(plan.tensor_parallel),
             "p": str(plan.pipeline_parallel), "source": path.name}
    return _finish(row, session,
                   _num(path, row, "measured_iteration_time_s", str(get["measured_iteration_time_s"])),
                   group, "; ".join(reasons), causes)


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
    #: error band per row (seconds, NaN where none), shape (len(measurements),), or None
    #: when no band was computed; its nominal coverage
    interval_low_s: np.ndarray | None = None
    interval_high_s: np.ndarray | None = None
    coverage: float | None = None

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
        if self.interval_low_s is not None and self.interval_high_s is not None:
            out.update(interval_metrics(self.measured_s[used], self.predicted_s[used],
                                        self.interval_low_s[used], self.interval_high_s[used]))
            out["interval_nominal_coverage"] = self.coverage
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


def interval_metrics(measured: np.ndarray, predicted: np.ndarray, low: np.ndarray,
                     high: np.ndarray) -> dict[str, Any]:
    """Coverage and width of error bands; arrays of shape (n,), NaN bounds where a row has none.

    Returns ``interval_coverage`` (share of the rows with a band whose measured
    time lies in it, 0..1; None when no row has one), ``interval_rows`` (rows
    with a band) and ``interval_median_width_percent`` (median of
    ``(high - low) / predicted``, percent; None without bands).
    """
    has = ~(np.isnan(low) | np.isnan(high))
    n = int(has.sum())
    if not n:
        return {"interval_coverage": None, "interval_rows": 0, "interval_median_width_percent": None}
    inside = (measured[has] >= low[has]) & (measured[has] <= high[has])
    width = (high[has] - low[has]) / predicted[has] * 100
    return {"interval_coverage": float(inside.mean()), "interval_rows": n,
            "interval_median_width_percent": float(np.median(width))}


def predict_rows(measurements: list[Measurement], predict: Callable[[Session], Any]) -> ValidationResult:
    """Predict every non-skipped row with ``predict(session)``.

    ``predict`` returns seconds, or ``(seconds, interval)`` with a
    :class:`core.interval.PredictionInterval` (then the result carries the
    bands). A row the predictor rejects (``ValueError`` or ``KeyError``)
    becomes skipped with that message as its reason.
    """
    out = np.full(len(measurements), np.nan)
    low, high = np.full(len(measurements), np.nan), np.full(len(measurements), np.nan)
    coverage = None
    for i, m in enumerate(measurements):
        if m.skip_reason:
            continue
        try:
            value = predict(m.session)
        except (ValueError, KeyError) as exc:
            m.skip_reason = f"simulator: {exc.args[0] if exc.args else exc}"
            m.skip_causes = ["simulator refused the plan"]
            continue
        if isinstance(value, tuple):
            value, iv = value
            coverage = iv.coverage
            if iv.available:
                low[i], high[i] = iv.low_s, iv.high_s
        out[i] = value
    if coverage is None:
        return ValidationResult(measurements, out)
    return ValidationResult(measurements, out, low, high, coverage)
