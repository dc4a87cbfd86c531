"""The residual table a calibrated store keeps: out-of-sample predictions of its calibration runs.

The record only (columns, checks, groups); the error band built from it is
:mod:`core.store.interval`. Kept apart so that the store's file format
(:mod:`core.store.profile_store`) does not depend on the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.plan.model_config import ATTENTION_KERNELS

__all__ = ["RESIDUAL_SETS", "NODE_CLASSES", "FEATURE_COLUMNS", "FEATURE_GROUPS", "THROUGHPUT_COLUMN",
           "ZERO_STAGE_VALUES", "ResidualTable", "node_class", "repeated_row"]

#: How a residual row's prediction was obtained (:class:`ResidualTable`'s ``set``). Tables
#: written before ``feature_transfer`` (2026-12-05) hold the first two only and read as before.
RESIDUAL_SETS = ("cross_validated", "scale_transfer", "feature_transfer")
#: Residual groups by node count.
NODE_CLASSES = ("single_node", "multi_node")
#: The third group's one column: the run's model FLOPs per GPU per iteration (Megatron's
#: model-FLOP count, :func:`core.model.counts.model_flops_per_iteration` over the world size:
#: the count the reported MFU divides), so that ``model_flops_per_gpu / measured_s`` is the
#: run's measured model FLOP/s per GPU (the throughput ceiling,
#: :func:`core.store.calibration_range.throughput_ceiling`).
THROUGHPUT_COLUMN = "model_flops_per_gpu"
#: Optional columns: the features of each calibration run that drive the error
#: (:func:`core.store.calibration_range.plan_features`), in groups, each all or none: the
#: first nine (residual-table encoding version 2), then the attention kernel, the TP
#: communication overlap and FSDP (ZeRO-3) (version 3), then :data:`THROUGHPUT_COLUMN`
#: (version 4), then how the data-parallel gradients are communicated: the ZeRO stage as the
#: simulator times it and Megatron-Core's ``overlap_grad_reduce`` and ``overlap_param_gather``
#: (version 5); each needs the groups before it. Tables written before a group lack it, and
#: what it holds is not compared.
FEATURE_GROUPS = (("gpu", "family", "precision", "recompute", "schedule", "micro_batch_size",
                   "seq_length", "cp", "ep"),
                  ("attention_kernel", "tp_comm_overlap", "fsdp"),
                  (THROUGHPUT_COLUMN,),
                  ("zero_stage", "overlap_grad_reduce", "overlap_param_gather"))
#: The plan features a table written now has, in order (compared by
#: :func:`core.store.calibration_range.feature_departures`; the throughput column is not a
#: feature of the plan but of its predicted time, and is compared apart).
FEATURE_COLUMNS = FEATURE_GROUPS[0] + FEATURE_GROUPS[1] + FEATURE_GROUPS[3]
#: Every optional column, in order.
OPTIONAL_COLUMNS = tuple(c for group in FEATURE_GROUPS for c in group)
_STR_FEATURES = ("gpu", "family", "precision", "recompute", "schedule", "attention_kernel",
                 "tp_comm_overlap", "fsdp", "zero_stage", "overlap_grad_reduce",
                 "overlap_param_gather")
#: The values of the fourth group's ``zero_stage`` column: ``"0/1"`` where each GPU's
#: gradients are accumulated over the micro-batches and reduced once per iteration (ZeRO 0: an
#: all-reduce; ZeRO 1, Megatron's distributed optimizer: a reduce-scatter, and the updated
#: shards all-gathered), ``"2/3"`` where they are sharded and reduce-scattered after every
#: micro-batch (ZeRO 2 and 3; what ZeRO-3 adds, the weights' all-gathers, is the ``fsdp``
#: column), and ``"0/1"`` too where no gradient is reduced across GPUs.
ZERO_STAGE_VALUES = ("0/1", "2/3")


def node_class(num_gpus: int, gpus_per_node: int) -> str:
    """``"single_node"`` when ``num_gpus <= gpus_per_node``, else ``"multi_node"``."""
    return "single_node" if num_gpus <= gpus_per_node else "multi_node"


@dataclass
class ResidualTable:
    """Out-of-sample predictions of the runs a store was calibrated on; arrays of shape (n,).

    Attributes
    ----------
    set : str array
        One of :data:`RESIDUAL_SETS`: ``cross_validated`` (k-fold, the fold
        fitted without the run), ``scale_transfer`` (fitted on the
        single-node runs only, predicting a multi-node run) or ``feature_transfer``
        (another store's runs with features this store's runs lack, each predicted by a fit
        without it: the published modern runs' out-of-fold predictions in the A100 store,
        ``scripts/feature_transfer.py``). Only ``cross_validated`` rows are the store's
        calibration runs (its range, features and like runs); the other two sets are used
        only for plans outside them (:mod:`core.store.interval`).
    file : str array
        Measurement file name of the run.
    row : int array
        1-based data row of the run in that file.
    num_gpus, gpus_per_node : int arrays
        World size and GPUs per node of the run.
    layer_parameters : float array
        Model size as its transformer layers' parameters (:func:`layer_parameters`).
    measured_s, predicted_s : float arrays
        Measured and out-of-sample predicted iteration time, seconds, > 0.
    procedure : str
        How the predictions were obtained (folds, seed, weights).
    gpu, family, precision, recompute, schedule : str arrays or None
        Features of the run (:data:`FEATURE_GROUPS`' first group, optional: all or none): GPU
        kind, model family (``dense``, ``moe``, ``mla``, ``moe+mla``), precision
        (``fp8-<recipe>`` for FP8), recompute mode and pipeline schedule.
    micro_batch_size, seq_length, cp, ep : int arrays or None
        Micro-batch size b, sequence length s (tokens), context- and expert-parallel sizes.
    attention_kernel, tp_comm_overlap, fsdp : str arrays or None
        The second group (optional: all or none, and only with the first): the attention kernel
        (``unfused`` or ``flash``, ``model.attention_kernel``), the TP communication overlap
        (``on`` or ``off``, ``plan.tp_comm_overlap``) and whether the weights are sharded
        (``on`` for ``plan.zero_stage`` 3, FSDP; ``off`` for 0-2).
    model_flops_per_gpu : float array or None
        The third group (optional, needs the first two): the run's model FLOPs per GPU per
        iteration (:data:`THROUGHPUT_COLUMN`), > 0.
    zero_stage, overlap_grad_reduce, overlap_param_gather : str arrays or None
        The fourth group (optional, needs the first three): how the run's data-parallel
        gradients are communicated (:data:`ZERO_STAGE_VALUES`: ``0/1`` reduced once per
        iteration, ``2/3`` reduce-scattered after every micro-batch) and whether the gradient
        reduction and the parameter all-gather are overlapped with compute (``on`` or ``off``,
        ``plan.overlap_grad_reduce`` and ``plan.overlap_param_gather`` where they apply:
        :func:`core.store.calibration_range.features_of`).
    """

    set: np.ndarray
    file: np.ndarray
    row: np.ndarray
    num_gpus: np.ndarray
    gpus_per_node: np.ndarray
    layer_parameters: np.ndarray
    measured_s: np.ndarray
    predicted_s: np.ndarray
    procedure: str = ""
    gpu: np.ndarray | None = None
    family: np.ndarray | None = None
    precision: np.ndarray | None = None
    recompute: np.ndarray | None = None
    schedule: np.ndarray | None = None
    micro_batch_size: np.ndarray | None = None
    seq_length: np.ndarray | None = None
    cp: np.ndarray | None = None
    ep: np.ndarray | None = None
    attention_kernel: np.ndarray | None = None
    tp_comm_overlap: np.ndarray | None = None
    fsdp: np.ndarray | None = None
    model_flops_per_gpu: np.ndarray | None = None
    zero_stage: np.ndarray | None = None
    overlap_grad_reduce: np.ndarray | None = None
    overlap_param_gather: np.ndarray | None = None

    COLUMNS = ("set", "file", "row", "num_gpus", "gpus_per_node", "layer_parameters",
               "measured_s", "predicted_s")

    @property
    def has_features(self) -> bool:
        """True when the table has the feature columns (at least :data:`FEATURE_GROUPS`' first
        group)."""
        return self.gpu is not None

    @property
    def feature_columns(self) -> tuple[str, ...]:
        """The optional columns the table has: the groups of :data:`FEATURE_GROUPS` it holds,
        in order (``()`` without features)."""
        return tuple(c for group in FEATURE_GROUPS if getattr(self, group[0]) is not None
                     for c in group)

    @property
    def plan_feature_columns(self) -> tuple[str, ...]:
        """The plan features among :attr:`feature_columns` (those of :data:`FEATURE_COLUMNS`)."""
        return tuple(c for c in self.feature_columns if c in FEATURE_COLUMNS)

    @property
    def has_throughput(self) -> bool:
        """True when the table has :data:`THROUGHPUT_COLUMN`."""
        return self.model_flops_per_gpu is not None

    @property
    def columns(self) -> tuple[str, ...]:
        """The table's columns: :attr:`COLUMNS`, then its :attr:`feature_columns`."""
        return self.COLUMNS + self.feature_columns

    def __post_init__(self) -> None:
        given = [c for c in OPTIONAL_COLUMNS if getattr(self, c) is not None]
        for group in FEATURE_GROUPS:
            part = [c for c in group if c in given]
            if part and len(part) != len(group):
                missing = [c for c in group if c not in part]
                raise ValueError(f"residual table has feature column(s) {part} but not "
                                 f"{missing}: all or none")
        for k, group in enumerate(FEATURE_GROUPS[1:], start=1):
            before = [c for g in FEATURE_GROUPS[:k] for c in g if c not in given]
            if group[0] in given and before:
                raise ValueError(f"residual table has feature column(s) {list(group)} but not "
                                 f"{before}: the later ones need the first"
                                 + (" and those before them" if k > 1 else ""))
        for name in given:
            dtype = (str if name in _STR_FEATURES else np.float64 if name == THROUGHPUT_COLUMN
                     else np.int64)
            setattr(self, name, np.asarray(getattr(self, name), dtype=dtype))
        self.set = np.asarray(self.set, dtype=str)
        self.file = np.asarray(self.file, dtype=str)
        for name in ("row", "num_gpus", "gpus_per_node"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        for name in ("layer_parameters", "measured_s", "predicted_s"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        n = self.set.shape
        for name in self.columns:
            a = getattr(self, name)
            if a.ndim != 1 or a.shape != n:
                raise ValueError(f"residual table column {name!r} has shape {a.shape}, "
                                 f"expected {n} like 'set'")
        bad = sorted(set(self.set.tolist()) - set(RESIDUAL_SETS))
        if bad:
            raise ValueError(f"residual table column 'set': unknown value(s) {bad}; "
                             f"expected {RESIDUAL_SETS}")
        for name in ("measured_s", "predicted_s", "layer_parameters") + (
                (THROUGHPUT_COLUMN,) if THROUGHPUT_COLUMN in given else ()):
            a = getattr(self, name)
            if not np.all(np.isfinite(a) & (a > 0)):
                raise ValueError(f"residual table column {name!r} must be positive and finite")
        if np.any(self.num_gpus < 1) or np.any(self.gpus_per_node < 1):
            raise ValueError("residual table columns 'num_gpus' and 'gpus_per_node' must be >= 1")
        for name in given:
            if (name not in _STR_FEATURES and name != THROUGHPUT_COLUMN
                    and np.any(getattr(self, name) < 1)):
                raise ValueError(f"residual table column {name!r} must be >= 1")
        allowed_values = {"attention_kernel": ATTENTION_KERNELS, "tp_comm_overlap": ("on", "off"),
                          "fsdp": ("on", "off"), "zero_stage": ZERO_STAGE_VALUES,
                          "overlap_grad_reduce": ("on", "off"),
                          "overlap_param_gather": ("on", "off")}
        for name, allowed in allowed_values.items():
            col = getattr(self, name)
            bad = [] if col is None else sorted(set(col.tolist()) - set(allowed))
            if bad:
                raise ValueError(f"residual table column {name!r}: unknown value(s) {bad}; "
                                 f"expected {allowed}")

    def __len__(self) -> int:
        return int(self.set.shape[0])

    @property
    def log_residual(self) -> np.ndarray:
        """``log(measured / predicted)``, shape (n,)."""
        return np.log(self.measured_s / self.predicted_s)

    @property
    def node_class(self) -> np.ndarray:
        """:func:`node_class` of every row, str array (n,)."""
        return np.where(self.num_gpus <= self.gpus_per_node, "single_node", "multi_node")

    def row_features(self, i: int) -> dict | None:
        """The plan features of row ``i`` (each of :attr:`plan_feature_columns` -> str or int),
        None without them."""
        if not self.has_features:
            return None
        return {c: getattr(self, c)[i].item() for c in self.plan_feature_columns}

    def subset(self, mask: np.ndarray) -> "ResidualTable":
        """The rows where ``mask`` (bool (n,) or indices) holds."""
        return ResidualTable(**{c: getattr(self, c)[mask] for c in self.columns},
                             procedure=self.procedure)

    def concat(self, other: "ResidualTable") -> "ResidualTable":
        """This table's rows followed by ``other``'s (with the feature columns both have)."""
        theirs = set(other.feature_columns)
        cols = self.COLUMNS + tuple(c for c in self.feature_columns if c in theirs)
        return ResidualTable(**{c: np.concatenate([getattr(self, c), getattr(other, c)])
                                for c in cols}, procedure=self.procedure or other.procedure)

    def groups(self) -> dict[str, np.ndarray]:
        """Group name -> sorted log residuals: the node classes of ``cross_validated`` rows,
        ``scale_transfer`` and ``feature_transfer``; groups without rows are left out."""
        r, cv = self.log_residual, self.set == "cross_validated"
        out = {c: np.sort(r[cv & (self.node_class == c)]) for c in NODE_CLASSES}
        for name in ("scale_transfer", "feature_transfer"):
            out[name] = np.sort(r[self.set == name])
        return {k: v for k, v in out.items() if v.size}

    def has_set(self, name: str) -> bool:
        """True when some row belongs to residual set ``name`` (one of :data:`RESIDUAL_SETS`)."""
        return bool(np.any(self.set == name))

    def calibration_range(self, cls: str) -> tuple[int, int, float, float] | None:
        """``(min GPUs, max GPUs, min parameters, max parameters)`` of the ``cross_validated``
        runs of node class ``cls``; None when it has none."""
        sel = (self.set == "cross_validated") & (self.node_class == cls)
        if not sel.any():
            return None
        g, n = self.num_gpus[sel], self.layer_parameters[sel]
        return int(g.min()), int(g.max()), float(n.min()), float(n.max())


def repeated_row(table: ResidualTable) -> str | None:
    """The rule a table breaks when a row repeats an earlier one's ``(set, file, row)`` (one
    run of one file recorded twice: it would count twice in the error band; a store whose rows
    were all given twice gave 3.86-6.09 s for 3.75-6.96 s), naming the first such pair of rows
    (0-based, as the store's datasets index them); None when every run is recorded once."""
    first: dict[tuple[str, str, int], int] = {}
    for i, key in enumerate(zip(table.set.tolist(), table.file.tolist(), table.row.tolist())):
        if key in first:
            return (f"rows {first[key]} and {i} are both row {key[2]} of {key[1]!r} in set "
                    f"{key[0]!r}: a run is recorded once (a repeat counts twice in the error "
                    "band)")
        first[key] = i
    return None
