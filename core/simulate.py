"""One entry point, the same for the command line and the GUI: session in, result out."""

from __future__ import annotations

from dataclasses import dataclass

from .config import Session
from .graph_types import ExecutionGraph, Schedule
from .report import Report

__all__ = ["SimulationResult", "simulate"]


@dataclass
class SimulationResult:
    """A simulated iteration: the inputs, the graph, its solved schedule and the report."""

    session: Session
    graph: ExecutionGraph
    schedule: Schedule
    report: Report


def simulate(session: Session, store=None) -> SimulationResult:  # pragma: no cover - filled in below
    """Simulate one training iteration of ``session`` (placeholder until the builder lands)."""
    raise NotImplementedError
