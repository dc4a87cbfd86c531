"""The Explore tab's preview of the editor's plan keeps room for its title, legend and bars."""

from __future__ import annotations

import dataclasses

from PySide6 import QtCore, QtGui, QtWidgets

from core.plan.parallel import ParallelPlan
from core.plan.presets import MODEL_PRESETS
from core.plan.session import Session
from vtrain_gui.plan_preview import LEGEND_LINES, TITLE_LINES, PlanPreview


def _rich_text_height(label: QtWidgets.QLabel) -> int:
    """Height of ``label``'s rich text laid out at the label's width, as a QTextDocument."""
    doc = QtGui.QTextDocument()
    doc.setDefaultFont(label.font())
    doc.setDocumentMargin(0)
    doc.setHtml(label.text())
    doc.setTextWidth(label.contentsRect().width())
    return int(doc.size().height())


def test_squeezed_preview_shows_its_whole_title_legend_and_bars(qtbot, real_simulate):
    """At 1,280 x 800 the Explore tab gives the preview only its minimum height: a Qwen3 MoE
    plan's title wrapped to three lines and its legend to two, and the timeline under them
    had no room left (no bars; the legend's second line under "Hover a bar for details").
    The preview's minimum now counts the lines its title and legend show (at most
    TITLE_LINES and LEGEND_LINES; the rest scrolls)."""
    session = Session(model=MODEL_PRESETS["Qwen3-30B-A3B"], plan=ParallelPlan(
        tensor_parallel=1, pipeline_parallel=1, data_parallel=8, expert_parallel=8,
        micro_batch_size=1, global_batch_size=16, zero_stage=1, overlap_grad_reduce=True,
        overlap_param_gather=True, precision="fp8", fp8_recipe="mxfp8"))
    session.model = dataclasses.replace(session.model, seq_length=4096)
    session.cluster = dataclasses.replace(session.cluster, gpu="B200-180GB")
    result = real_simulate(session)

    preview = PlanPreview()
    above = QtWidgets.QWidget()
    split = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
    split.addWidget(above)
    split.addWidget(preview)
    split.setChildrenCollapsible(False)
    qtbot.addWidget(split)
    split.resize(786, 800)
    split.show()
    preview.show_simulation(result)
    split.setSizes([10_000, 1])  # the preview at its minimum, as the Explore tab leaves it
    legend = preview.timeline.legend_view
    title = preview.title
    assert _rich_text_height(title.label) > 2 * title.fontMetrics().height()  # wraps here

    def whole() -> bool:  # up to their lines (TITLE_LINES, LEGEND_LINES), the rest scrolls
        split.setSizes([10_000, 1])
        return all(box.height() >= box.label.text_height(box.label.width(), lines)
                   and box.label.height() >= _rich_text_height(box.label)
                   for box, lines in ((title, TITLE_LINES), (legend, LEGEND_LINES))
                   ) and preview.timeline.plot.height() >= 50

    qtbot.waitUntil(whole, timeout=3000)
