"""The residual table a calibrated store keeps: out-of-sample predictions of its calibration runs.

The record only (columns, checks, groups); the error band built from it is
:mod:`core.store.interval`. Kept apart so that the store's file format
(:mod:`core.store.profile_store`) does not depend on the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RESIDUAL_SETS", "NODE_CLASSES", "ResidualTable", "node_class"]

#: How a residual row's prediction was obtained.
RESIDUAL_SETS = ("cross_validated", "scale_transfer")
#: Residual groups by node count.
NODE_CLASSES = ("single_node", "multi_node")



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
        fitted without the run) or ``scale_transfer`` (fitted on the
        single-node runs only, predicting a multi-node run).
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

    COLUMNS = ("set", "file", "row", "num_gpus", "gpus_per_node", "layer_parameters",
               "measured_s", "predicted_s")

    def __post_init__(self) -> None:
        self.set = np.asarray(self.set, dtype=str)
        self.file = np.asarray(self.file, dtype=str)
        for name in ("row", "num_gpus", "gpus_per_node"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        for name in ("layer_parameters", "measured_s", "predicted_s"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        n = self.set.shape
        for name in self.COLUMNS:
            a = getattr(self, name)
            if a.ndim != 1 or a.shape != n:
                raise ValueError(f"residual table column {name!r} has shape {a.shape}, "
                                 f"expected {n} like 'set'")
        bad = sorted(set(self.set.tolist()) - set(RESIDUAL_SETS))
        if bad:
            raise ValueError(f"residual table column 'set': unknown value(s) {bad}; "
                             f"expected {RESIDUAL_SETS}")
        for name in ("measured_s", "predicted_s", "layer_parameters"):
            a = getattr(self, name)
            if not np.all(np.isfinite(a) & (a > 0)):
                raise ValueError(f"residual table column {name!r} must be positive and finite")
        if np.any(self.num_gpus < 1) or np.any(self.gpus_per_node < 1):
            raise ValueError("residual table columns 'num_gpus' and 'gpus_per_node' must be >= 1")

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

    def subset(self, mask: np.ndarray) -> "ResidualTable":
        """The rows where ``mask`` (bool (n,) or indices) holds."""
        return ResidualTable(*(getattr(self, c)[mask] for c in self.COLUMNS), procedure=self.procedure)

    def concat(self, other: "ResidualTable") -> "ResidualTable":
        """This table's rows followed by ``other``'s."""
        return ResidualTable(*(np.concatenate([getattr(self, c), getattr(other, c)])
                               for c in self.COLUMNS), procedure=self.procedure or other.procedure)

    def groups(self) -> dict[str, np.ndarray]:
        """Group name -> sorted log residuals: the node classes of ``cross_validated`` rows and
        ``scale_transfer``; groups without rows are left out."""
        r, cv = self.log_residual, self.set == "cross_validated"
        out = {c: np.sort(r[cv & (self.node_class == c)]) for c in NODE_CLASSES}
        out["scale_transfer"] = np.sort(r[self.set == "scale_transfer"])
        return {k: v for k, v in out.items() if v.size}

    def calibration_range(self, cls: str) -> tuple[int, int, float, float] | None:
        """``(min GPUs, max GPUs, min parameters, max parameters)`` of the ``cross_validated``
        runs of node class ``cls``; None when it has none."""
        sel = (self.set == "cross_validated") & (self.node_class == cls)
        if not sel.any():
            return None
        g, n = self.num_gpus[sel], self.layer_parameters[sel]
        return int(g.min()), int(g.max()), float(n.min()), float(n.max())
