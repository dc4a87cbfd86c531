"""The Explore tab's preview: the timeline of the plan in the editor, with Pin and Open buttons."""

from __future__ import annotations

import html

from PySide6 import QtWidgets

from core.sim.simulate import SimulationResult

from .formatting import (VERDICT_COLORS, format_day_count, format_duration, format_fraction,
                         format_usd)
from .timeline.widget import TimelineWidget
from .wrapped_label import CappedTextBox

__all__ = ["PlanPreview", "TITLE_LINES", "LEGEND_LINES"]

_NONE_YET = "Timeline of the plan in the editor: none yet"
#: Lines of the title (plan, iteration time, days, cost, MFU) and of the timeline's legend in
#: view; the rest of each scrolls (the legend's tooltip says what each colour is, the Plan
#: tab's timeline shows all of it). Every line shown, with the line that reads out the bar
#: under the mouse (its tooltip says the same), the preview took 236 px at 1,024 pixels wide
#: (a title of three lines, a legend of four) and the window could not be less than 807
#: pixels tall, taller than a 1,366 x 768 laptop's screen.
TITLE_LINES = 2
LEGEND_LINES = 1


class PlanPreview(QtWidgets.QWidget):
    """A title line (plan, iteration time, days, cost, MFU), Pin and Open buttons, a timeline.

    Attributes
    ----------
    timeline : TimelineWidget
    pin_button, open_button : QPushButton
        Connected by the owner (pin for comparison; open in the Plan tab).
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.timeline = TimelineWidget(legend_lines=LEGEND_LINES, hover_line=False)
        # as tall as its lines up to TITLE_LINES, the rest scrolls: the timeline keeps room
        self.title = CappedTextBox(TITLE_LINES)
        self.title.setText(_NONE_YET)
        self.title.setObjectName("sweep.preview_title")
        self.open_button = QtWidgets.QPushButton("Open in Plan tab")
        self.open_button.setToolTip("Show the plan with the editor, full timeline and cost panel "
                                    "(or double-click a point or row)")
        self.pin_button = QtWidgets.QPushButton("Pin for comparison")
        self.pin_button.setToolTip("Keep this plan as plan A of the Compare tab; pick another plan "
                                   "to compare it with")
        self.pin_button.setEnabled(False)  # until a plan is shown (Plan > Pin plan likewise)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(0)
        head = QtWidgets.QHBoxLayout()
        head.setContentsMargins(6, 0, 6, 0)
        head.addWidget(self.title, 1)
        head.addWidget(self.pin_button)
        head.addWidget(self.open_button)
        layout.addLayout(head)
        layout.addWidget(self.timeline, 1)

    def show_simulation(self, result: SimulationResult) -> None:
        """Show the timeline and the figures of one simulation; a plan that is tight or does
        not fit in memory says so beside its figures (the verdict with its need and the GPU's
        memory, :attr:`core.sim.report.Report.memory_verdict_text`)."""
        self.timeline.set_data(result.graph, result.schedule)
        self.pin_button.setEnabled(True)
        pl, rep = result.session.plan, result.report
        verdict = rep.memory_verdict
        mark = ("" if verdict == "fits" else
                f' — <span style="color:{VERDICT_COLORS[verdict]}; font-weight:bold;">'
                f"{html.escape(rep.memory_verdict_text)}</span>")
        self.title.setText(
            f"<b>Timeline of the plan in the editor</b>: {html.escape(pl.label())}"
            f" — iteration {format_duration(rep.iteration_time_s)}, "
            f"{format_day_count(rep.training_days)} days, {format_usd(rep.cost_usd)}, "
            f"MFU {format_fraction(rep.mfu)}{mark}")

    def clear(self) -> None:
        """No simulation shown."""
        self.timeline.clear()
        self.title.setText(_NONE_YET)
        self.pin_button.setEnabled(False)  # nothing to pin: it did nothing
