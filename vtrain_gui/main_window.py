"""The main window: a Plan tab (editor, timeline, cost panel), an Explore tab, a Profiles tab,
a Studies tab, file handling."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.plan.presets import MODEL_PRESETS
from core.plan.fields import ConfigError
from core.plan.session import Session
from core.plan.rules import validate
from core.studies.diff import plan_label
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.export import export_script
from core.io.session import SessionFileError, atomic_write_text, load_any, save_session
from core.sim.simulate import SimulationResult

from .background import shutdown_all
from .compare import CompareTab
from .cost_panel import CostPanel
from .editor import ConfigEditor
from .empty_state import EmptyStack, StaleVeil, under_banner, warning_banner
from .explore import ExploreTab
from .formatting import format_count
from .import_dialogs import ImportMenu
from .profiles_view import ProfilesTab
from .session_files import RecentFiles, examples_dir, is_shipped_example
from .studies import StudiesTab
from .timeline.widget import TimelineWidget
from .trace_overlay import TraceOverlay
from .workers import FitChangesRunner, SimulationRunner

__all__ = ["MainWindow"]

_DEBOUNCE_MS = 300
_FILE_FILTER = "vTrain sessions and configs (*.json);;All files (*)"
#: Texts of the Plan tab's results area while it has no result to show.
_SIMULATING_TEXT = "<p style='font-size:13pt'><b>Simulating…</b></p>"
_INVALID_TEXT = ("<p style='font-size:13pt'><b>Nothing simulated yet</b></p>"
                 "<p>The configuration on the left breaks a rule: fix the fields marked in red. "
                 "The iteration's timeline, its time, cost and memory per GPU then appear "
                 "here.</p>")
_FAILED_TEXT = ("<p style='font-size:13pt'><b>The simulation failed</b></p><p>{message}</p>"
                "<p>Change the configuration on the left to try again.</p>")


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class MainWindow(QtWidgets.QMainWindow):
    """Three tabs. Plan: editor on the left, timeline top right, cost panel bottom right.
    Explore: a design-space sweep of the session (:class:`~vtrain_gui.explore.ExploreTab`).
    Profiles: the profile stores, their provenance, and profiling this machine
    (:class:`~vtrain_gui.profiles_view.ProfilesTab`); "Use for this session" sets
    ``cluster.profile_path`` as an edit.

    Every valid edit re-simulates in the background after a short pause; an
    invalid edit shows its messages next to the fields and keeps the last
    valid result on screen. A result that does not fit (or is tight) shows at once; what
    would make it fit (:func:`core.studies.fit_changes.fit_changes`) is looked for on a
    second thread and fills in the memory panel's "To fit" line after. Picking a plan in the Explore tab loads it into the
    editor (an edit) and simulates it; its timeline shows in both tabs. The
    sweep settings are saved with the session (``Session.sweep``).
    ``settings`` stores the recent files (a private ``QSettings`` in tests).

    Signals
    -------
    result_shown(object)
        A :class:`core.sim.simulate.SimulationResult` is now on screen.
    simulation_failed(str)
        The latest simulation raised; the message is in the status bar too.
    fit_changes_shown(object)
        What would make the result on screen fit is on screen: a
        :class:`core.studies.fit_changes.FitChanges`, or None when the search failed (the
        memory panel says why).
    """

    result_shown = Signal(object)
    simulation_failed = Signal(str)
    fit_changes_shown = Signal(object)

    def __init__(self, settings: QtCore.QSettings | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._recent = RecentFiles(settings or QtCore.QSettings("vtrain", "vtrain-gui"))
        self._path: Path | None = None
        self._copy_of: str | None = None  # the shipped example an untitled session came from
        self._result: SimulationResult | None = None
        self._fit_request_id = 0  # the fit search of the result on screen; 0: none waited for
        self._last_error: str | None = None

        self.setCentralWidget(self._build_tabs(self._build_plan_tab()))
        self._build_status_bar_and_runner()
        self._build_menus()
        self.resize(1600, 1000)
        self._splitters[0].setSizes([400, 1200])
        self._splitters[1].setSizes([560, 400])
        self._set_path(None)
        self.editor.set_session(Session())
        self.explore.reset(Session())

    # ------------------------------------------------------------------ building the window
    def _build_plan_tab(self) -> QtWidgets.QSplitter:
        """The Plan tab: the editor on the left; timeline over cost panel on the right (under
        the stale banner, or the text that says why nothing is drawn yet)."""
        self.editor = ConfigEditor()
        self.editor.session_changed.connect(self._on_editor_session_change)
        editor_scroll = QtWidgets.QScrollArea()
        editor_scroll.setWidget(self.editor)
        editor_scroll.setWidgetResizable(True)
        editor_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        editor_scroll.setMinimumWidth(self.editor.sizeHint().width() + 24)

        self.timeline = TimelineWidget()
        self.timeline.task_hovered.connect(self._on_timeline_task_hover)
        self.cost_panel = CostPanel()
        self.cost_panel.figures_width_changed.connect(self._on_figures_width_change)
        self._timeline_veil = StaleVeil(self.timeline)

        right = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.timeline)
        right.addWidget(self.cost_panel)
        right.setStretchFactor(0, 3)
        right.setStretchFactor(1, 2)
        right.setChildrenCollapsible(False)
        # the figures get the height they need until the user moves the divider
        self._plan_split_moved = False
        right.splitterMoved.connect(self._on_plan_splitter_move)
        right.installEventFilter(self)
        # over the results while they are not those of the configuration in the editor
        self._stale_banner = warning_banner("stale_banner")
        results = under_banner(self._stale_banner, right)
        main = QtWidgets.QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(editor_scroll)
        # before the first result: say why nothing is drawn, not empty axes
        self.results_view = EmptyStack(results, _SIMULATING_TEXT)
        main.addWidget(self.results_view)
        main.setStretchFactor(0, 0)
        main.setStretchFactor(1, 1)
        main.setChildrenCollapsible(False)
        self._splitters = (main, right)
        return main

    def _build_tabs(self, plan: QtWidgets.QWidget) -> QtWidgets.QTabWidget:
        """The tabs: Plan, Explore, Profiles, Studies, Compare."""
        self.explore = ExploreTab()
        self.explore.plan_selected.connect(self._on_explore_plan_select)
        self.cost_panel.fit_change_chosen.connect(self._on_fit_change_choose)
        self.explore.open_in_plan_requested.connect(self._on_explore_open_request)
        self.explore.pin_requested.connect(self.pin_plan)
        self.explore.settings_changed.connect(self._on_tab_settings_change)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.setDocumentMode(True)
        self.plan_tab_index = self.tabs.addTab(plan, "Plan")
        self.explore_tab_index = self.tabs.addTab(self.explore, "Explore")
        self.tabs.setTabToolTip(self.plan_tab_index, "Edit one plan; its timeline and cost (Ctrl+1)")
        self.tabs.setTabToolTip(self.explore_tab_index,
                                "Sweep every parallel plan: days against dollars, Pareto front (Ctrl+2)")
        self.profiles = ProfilesTab(session_fn=self.editor.session)
        self.profiles.use_requested.connect(self._on_profiles_use_request)
        self.profiles_tab_index = self.tabs.addTab(self.profiles, "Profiles")
        self.tabs.setTabToolTip(self.profiles_tab_index,
                                "Profile stores and their provenance; profile this machine (Ctrl+3)")
        self.studies = StudiesTab(session_fn=self.editor.session)
        self.studies_tab_index = self.tabs.addTab(self.studies, "Studies")
        self.studies.settings_changed.connect(self._on_tab_settings_change)
        self.tabs.setTabToolTip(self.studies_tab_index,
                                "Compute-optimal model size for a GPU budget; a job trace on a "
                                "shared cluster (Ctrl+4)")
        self.compare = CompareTab()
        self.compare_tab_index = self.tabs.addTab(self.compare, "Compare")
        self._profiles_shown_for: Path | None = None  # the session store the tab last selected
        self.tabs.currentChanged.connect(self._on_tab_change)
        self.tabs.setTabToolTip(self.compare_tab_index,
                                "A pinned plan against the plan in the editor: both timelines on "
                                "one time axis, the difference by term (Ctrl+5)")
        return self.tabs

    def _build_status_bar_and_runner(self) -> None:
        """The status line, the hover read-out, the edit debounce and the simulation runner."""
        self._status = QtWidgets.QLabel("Ready")
        self._hover = QtWidgets.QLabel()
        self.statusBar().addWidget(self._status, 1)
        self.statusBar().addPermanentWidget(self._hover)

        self._debounce = QtCore.QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(_DEBOUNCE_MS)
        self._debounce.timeout.connect(self._on_debounce_timeout)

        self.runner = SimulationRunner(parent=self)
        self._forgotten_request_id = 0  # simulations up to this one are of an earlier session
        self.runner.started.connect(self._on_simulation_start)
        self.runner.finished.connect(self._on_simulation_finish)
        self.runner.failed.connect(self._on_simulation_fail)
        # what would make a plan that does not fit fit: after the result is on screen
        self.fit_runner = FitChangesRunner(parent=self)
        self.fit_runner.finished.connect(self._on_fit_search_finish)
        self.fit_runner.failed.connect(self._on_fit_search_fail)

    # ------------------------------------------------------------------ menus
    def _build_menus(self) -> None:
        self._build_file_menu()
        self._build_model_menu()
        plan_menu = self.menuBar().addMenu("&Plan")
        self.action_pin = plan_menu.addAction("&Pin plan for comparison")
        self.action_pin.setShortcut(QtGui.QKeySequence("Ctrl+Shift+P"))
        self.action_pin.setToolTip("Keep the plan in the editor and its result as plan A of the "
                                   "Compare tab")
        self.action_pin.setEnabled(False)  # until a result is on screen
        self.action_pin.triggered.connect(self.pin_plan)
        self.action_unpin = plan_menu.addAction("&Unpin")
        self.action_unpin.setEnabled(False)
        self.action_unpin.triggered.connect(self.unpin_plan)
        self._build_view_menu()
        help_menu = self.menuBar().addMenu("&Help")
        about = help_menu.addAction("&About vTrain")
        about.triggered.connect(self._on_about_trigger)

    def _build_file_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.action_new = file_menu.addAction("&New", QtGui.QKeySequence.StandardKey.New)
        self.action_new.triggered.connect(self._on_new_trigger)
        self.action_open = file_menu.addAction("&Open…", QtGui.QKeySequence.StandardKey.Open)
        self.action_open.triggered.connect(self._on_open_trigger)
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._on_recent_menu_about_to_show)
        self.recent_menu.triggered.connect(self._on_recent_menu_trigger)
        # File > Import: other tools' files, read as the command line reads them
        self.importer = ImportMenu(self, file_menu.addMenu("&Import"))
        file_menu.addSeparator()
        self.action_save = file_menu.addAction("&Save", QtGui.QKeySequence.StandardKey.Save)
        self.action_save.triggered.connect(self._on_save_trigger)
        self.action_save_as = file_menu.addAction("Save &As…", QtGui.QKeySequence.StandardKey.SaveAs)
        self.action_save_as.triggered.connect(self._on_save_as_trigger)
        file_menu.addSeparator()
        export_menu = file_menu.addMenu("&Export")
        self.action_export_megatron = export_menu.addAction("&Megatron-LM arguments…")
        self.action_export_megatron.setToolTip("The torchrun command and Megatron-LM arguments "
                                               "that run this plan (vtrain export megatron-args)")
        self.action_export_megatron.triggered.connect(self._on_export_megatron_trigger)
        results_layout = self._splitters[1].parentWidget().layout()
        self.trace_overlay = TraceOverlay(self, file_menu, results_layout)
        file_menu.addSeparator()
        self.action_quit = file_menu.addAction("&Quit", QtGui.QKeySequence.StandardKey.Quit)
        self.action_quit.triggered.connect(self.close)

    def _build_model_menu(self) -> None:
        model_menu = self.menuBar().addMenu("&Model")
        presets = model_menu.addMenu("&Presets")
        self._preset_actions = QtGui.QActionGroup(self)
        for name in MODEL_PRESETS:
            action = presets.addAction(name)
            action.setData(name)
            self._preset_actions.addAction(action)
        self._preset_actions.triggered.connect(self._on_preset_action_trigger)
        examples = model_menu.addMenu("&Examples")
        for path in sorted(examples_dir().glob("*.json")):
            examples.addAction(path.stem).setData(str(path))
        examples.setEnabled(bool(examples.actions()))
        examples.triggered.connect(self._on_example_menu_trigger)

    def _build_view_menu(self) -> None:
        view_menu = self.menuBar().addMenu("&View")
        show_plan = view_menu.addAction("&Plan tab")
        show_plan.setShortcut(QtGui.QKeySequence("Ctrl+1"))
        show_plan.triggered.connect(self._on_show_plan_trigger)
        show_explore = view_menu.addAction("&Explore tab")
        show_explore.setShortcut(QtGui.QKeySequence("Ctrl+2"))
        show_explore.triggered.connect(self._on_show_explore_trigger)
        show_profiles = view_menu.addAction("Pro&files tab")
        show_profiles.setShortcut(QtGui.QKeySequence("Ctrl+3"))
        show_profiles.triggered.connect(self._on_show_profiles_trigger)
        show_studies = view_menu.addAction("&Studies tab")
        show_studies.setShortcut(QtGui.QKeySequence("Ctrl+4"))
        show_studies.triggered.connect(self._on_show_studies_trigger)
        show_compare = view_menu.addAction("&Compare tab")
        show_compare.setShortcut(QtGui.QKeySequence("Ctrl+5"))
        show_compare.triggered.connect(lambda: self.show_tab("compare"))
        view_menu.addSeparator()
        reset = view_menu.addAction("&Reset timeline zoom")
        reset.setShortcut(QtGui.QKeySequence("Ctrl+0"))
        reset.triggered.connect(self._on_reset_zoom_trigger)

    # ------------------------------------------------------------------ public API
    @property
    def path(self) -> Path | None:
        """File of the current session, or None when untitled."""
        return self._path

    @property
    def result(self) -> SimulationResult | None:
        """The simulation result on screen."""
        return self._result

    @property
    def last_error(self) -> str | None:
        """Message of the latest failed simulation (None after a success)."""
        return self._last_error

    @property
    def results_stale(self) -> bool:
        """Whether the timeline and figures shown are not those of the configuration in the
        editor (it is invalid, or its simulation failed); they are then dimmed under a banner."""
        return not self._stale_banner.isHidden()

    @property
    def stale_text(self) -> str:
        """Text of the banner over stale results ('' when they are current)."""
        return self._stale_banner.text() if self.results_stale else ""

    @property
    def status_text(self) -> str:
        """Text of the status bar."""
        return self._status.text()

    def session(self) -> Session:
        """The session as edited, with the Explore tab's sweep settings, the Studies tab's
        settings and the Compare tab's pinned plan."""
        session = self.editor.session()
        session.sweep = self.explore.settings()
        session.studies = self.studies.settings()
        pinned = self.compare.pinned
        return session.with_pinned(None if pinned is None else pinned.session)

    def new_session(self, session: Session | None = None) -> None:
        """Replace the session without asking (see :meth:`maybe_save` for the question)."""
        session = session or Session()
        self.editor.set_session(session)
        self.explore.reset(session)
        self.studies.reset(session)
        self._forget_result()
        self._set_path(None)
        self.setWindowModified(False)
        self._schedule_simulation(immediately=True)

    def open_path(self, path: str | Path, *, as_template: bool = False) -> bool:
        """Open a session file or an authors' config; on error show a message, change nothing.

        The file is read and checked in full into a new session before anything
        on screen changes: when it cannot be opened, the session shown, its
        path (where Save writes) and its modified flag stay as they were. With
        ``as_template`` the window stays untitled (Save asks for a name), as
        for the shipped example opened at start-up. A shipped example (a file of
        :func:`examples_dir`) always opens so: Save asks for a name instead of
        overwriting it (the README's figures are made from those files).
        """
        path = Path(path)
        shipped = is_shipped_example(path)
        try:
            # A saved session may be work in progress that breaks a rule: open it and show
            # the messages by the fields. Authors' configs are checked by their reader.
            session = load_any(path, validate=False)
            problems = self.editor.display_problems(session)
            if problems:
                raise ConfigError(problems)
        except (SessionFileError, ConfigError, OSError, ValueError, OverflowError,
                RecursionError, MemoryError) as exc:
            if isinstance(exc, OSError) and not path.exists():
                self._recent.remove(path)
            text = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
            QtWidgets.QMessageBox.critical(self, "Cannot open file", text)
            return False
        before = (self.session(), self._path, self.isWindowModified(), self._copy_of)
        old_pin = self.compare.pinned
        try:
            unusable = self._show_session(session)
        except Exception as exc:  # noqa: BLE001 - a view failed: put the previous session back
            previous, old_path, modified, old_copy_of = before
            self._show_session(previous)
            self.compare.set_pinned(old_pin)  # the very result that was pinned
            self.action_unpin.setEnabled(old_pin is not None)
            self._set_path(old_path, copy_of=old_copy_of)
            self.setWindowModified(modified)
            QtWidgets.QMessageBox.critical(self, "Cannot open file",
                                           f"{path}: cannot be shown ({type(exc).__name__}: "
                                           f"{exc}); the previous session is kept")
            return False
        self._forget_result()
        self._set_path(None if as_template or shipped else path,
                       copy_of=path.name if shipped else None)
        self.setWindowModified(bool(unusable))  # saving would drop the unusable study settings
        if not as_template:
            self._recent.add(path)
        self._schedule_simulation(immediately=True)
        return True

    def open_session(self, session: Session) -> None:
        """Show ``session`` as a new untitled, unsaved session (File > Import: see
        :class:`~vtrain_gui.import_dialogs.ImportMenu`); a pinned plan stays pinned."""
        self._show_session(session)
        self._forget_result()
        self._set_path(None)
        self.setWindowModified(True)  # nothing saved yet
        self._schedule_simulation(immediately=True)

    def save_to(self, path: str | Path) -> bool:
        """Save the session to ``path`` (atomic); on error show a message and return False."""
        path = Path(path)
        try:
            save_session(self.session(), path)
        except OSError as exc:
            QtWidgets.QMessageBox.critical(self, "Cannot save file",
                                           f"{path}: {exc.strerror or exc}")
            return False
        self._set_path(path)
        self.setWindowModified(False)
        self._recent.add(path)
        self.statusBar().showMessage(f"Saved {path}", 3000)
        return True

    def export_megatron_args(self, path: str | Path) -> bool:
        """Write the torchrun command and Megatron-LM arguments of the editor's plan to ``path``
        (:func:`core.io.megatron.export.export_script`, atomic); on error show why, return False."""
        path = Path(path)
        try:
            text = export_script(self.session())
            atomic_write_text(path, text)
        except MegatronArgsError as exc:
            QtWidgets.QMessageBox.warning(self, "Cannot export Megatron-LM arguments", str(exc))
            return False
        except OSError as exc:
            QtWidgets.QMessageBox.critical(self, "Cannot save file", f"{path}: {exc.strerror or exc}")
            return False
        self.statusBar().showMessage(f"Wrote the Megatron-LM launch to {path}", 5000)
        return True

    def recent_files(self) -> list[str]:
        """Recently opened or saved files, newest first (see :class:`RecentFiles`)."""
        return self._recent.files()

    def maybe_save(self) -> bool:
        """Ask to save unsaved changes; False when the user cancels (or saving fails)."""
        if not self.isWindowModified():
            return True
        name = self._path.name if self._path else "Untitled"
        answer = QtWidgets.QMessageBox.warning(
            self, "Unsaved changes", f"Save the changes to “{name}”?",
            QtWidgets.QMessageBox.StandardButton.Save | QtWidgets.QMessageBox.StandardButton.Discard
            | QtWidgets.QMessageBox.StandardButton.Cancel,
            QtWidgets.QMessageBox.StandardButton.Save)
        if answer == QtWidgets.QMessageBox.StandardButton.Save:
            return self._save_interactive(ask_path=self._path is None)
        return answer == QtWidgets.QMessageBox.StandardButton.Discard

    def simulate_now(self) -> None:
        """Simulate the edited session now if it is valid (skips the debounce pause)."""
        self._schedule_simulation(immediately=True)

    def pin_plan(self) -> bool:
        """Pin the plan on screen (its session and ``SimulationResult``) as plan A of the
        Compare tab; False when there is no result to pin yet."""
        if self._result is None:
            return False
        # a copy of the session: the pin keeps its plan whatever happens to the editor's
        self.compare.set_pinned(dataclasses.replace(self._result,
                                                    session=self._result.session.copy()))
        self.action_unpin.setEnabled(True)
        self.setWindowModified(True)  # the pin is saved with the session
        self._status.setText(f"Pinned {plan_label(self._result.session)} for comparison")
        return True

    def unpin_plan(self) -> None:
        """Forget the pinned plan (the Compare tab shows its empty state)."""
        if self.compare.pinned is not None:
            self.setWindowModified(True)
        self.compare.set_pinned(None)
        self.action_unpin.setEnabled(False)

    def _restore_pin(self, session: Session) -> list[str]:
        """Pin the plan saved in ``session.compare`` (simulated here, on this thread); keep the
        current pin when the session has none (a plan pinned from another file stays to be
        compared). Returns ``["compare.pinned"]`` when the saved pin cannot be simulated
        (the Compare tab then shows nothing pinned and the status bar says why)."""
        if session.compare is None:
            return []
        from core.sim.simulate import simulate
        try:
            pinned = session.pinned()
            result = simulate(pinned)
        except Exception as exc:  # noqa: BLE001 - any failure: the file still opens
            self.compare.set_pinned(None)
            self.action_unpin.setEnabled(False)
            self.statusBar().showMessage(f"The pinned plan saved with the session cannot be "
                                         f"simulated ({exc}); nothing is pinned", 15000)
            return ["compare.pinned"]
        self.compare.set_pinned(result)
        self.action_unpin.setEnabled(True)
        return []

    def show_tab(self, name: str) -> None:
        """Bring tab ``'plan'``, ``'explore'``, ``'profiles'`` or ``'studies'`` to the front.

        Raises
        ------
        ValueError
            Another name.
        """
        indices = {"plan": self.plan_tab_index, "explore": self.explore_tab_index,
                   "profiles": self.profiles_tab_index, "studies": self.studies_tab_index,
                   "compare": self.compare_tab_index}
        if name not in indices:
            raise ValueError(f"no tab {name!r}; choose one of {', '.join(indices)}")
        self.tabs.setCurrentIndex(indices[name])

    def current_tab(self) -> str:
        """``'plan'``, ``'explore'``, ``'profiles'`` or ``'studies'``."""
        names = {self.explore_tab_index: "explore", self.profiles_tab_index: "profiles",
                 self.studies_tab_index: "studies", self.compare_tab_index: "compare"}
        return names.get(self.tabs.currentIndex(), "plan")

    # ------------------------------------------------------------------ handlers: editor, runner
    @Slot(object)
    def _on_editor_session_change(self, session: Session) -> None:
        self.setWindowModified(True)
        self.explore.set_session(session)
        self.studies.set_session(session)
        self._schedule_simulation()

    @Slot()
    def _on_debounce_timeout(self) -> None:
        if not self.editor.is_valid():
            return
        self.runner.request(self.editor.session())

    @Slot(int)
    def _on_simulation_start(self, request_id: int) -> None:
        self._status.setText("Simulating…")
        if self._result is None:
            self.results_view.set_empty(True, _SIMULATING_TEXT)

    @Slot(int, object, float)
    def _on_simulation_finish(self, request_id: int, result: SimulationResult, seconds: float) -> None:
        if (request_id != self.runner.latest_request_id
                or request_id <= self._forgotten_request_id):
            return  # a newer request is on its way, or another session's; skip the stale picture
        self._result = result
        self._last_error = None
        self._mark_stale(None)
        self.results_view.set_empty(False)
        self.timeline.set_data(result.graph, result.schedule)
        self.cost_panel.set_report(result.report)
        self._request_fit_changes(result)
        if not self._plan_split_moved:
            self._fit_plan_split()  # a warning or the no-fit flag may need more height
        self.explore.show_simulation(result)
        self.compare.set_current(result)
        self.trace_overlay.set_result(result)
        self.action_pin.setEnabled(True)
        self._status.setText(f"Simulated in {seconds * 1e3:,.0f} ms, "
                             f"{format_count(result.graph.num_tasks)} tasks")
        self.result_shown.emit(result)

    @Slot(int, str)
    def _on_simulation_fail(self, request_id: int, message: str) -> None:
        if (request_id != self.runner.latest_request_id
                or request_id <= self._forgotten_request_id):
            return
        self._last_error = message
        self._mark_stale("The simulation of the configuration in the editor failed (the status "
                         "bar says why): the timeline and figures below are those of the last "
                         "configuration that simulated.")
        if self._result is None:
            self.results_view.set_empty(True, _FAILED_TEXT.format(message=_html(message)))
        kept = " (showing the last result)" if self._result is not None else ""
        self._status.setText(f"Simulation failed: {message}{kept}")
        self.simulation_failed.emit(message)

    @Slot(int, object, float)
    def _on_fit_search_finish(self, request_id: int, fit, seconds: float) -> None:
        if request_id != self._fit_request_id:
            return  # of a result no longer on screen
        self._fit_request_id = 0
        self._result.fit_changes = fit  # what saving or a pin of the result reads
        self.cost_panel.set_fit_changes(fit)
        self.explore.set_fewest_gpus(getattr(fit, "fewest_gpus", None), self._result.session)
        self.fit_changes_shown.emit(fit)

    @Slot(int, str)
    def _on_fit_search_fail(self, request_id: int, message: str) -> None:
        if request_id != self._fit_request_id:
            return
        self._fit_request_id = 0
        self.cost_panel.set_fit_changes_failed(message)
        self.fit_changes_shown.emit(None)

    @Slot(int)
    def _on_timeline_task_hover(self, index: int) -> None:
        self._hover.setText(self.timeline.task_text(index) if index >= 0 else "")

    # ------------------------------------------------------------------ handlers: Explore tab
    @Slot(int)
    def _on_explore_plan_select(self, index: int) -> None:
        sweep = self.explore.result
        if sweep is None:
            return
        current = self.editor.session()
        picked = sweep.session_for(index)  # the swept model, cluster and cost with that plan
        picked.notes = current.notes
        picked.sweep = current.sweep
        pl = picked.plan
        self._status.setText(f"Loaded plan {pl.label()} from the sweep")
        if picked.to_dict() == current.to_dict():
            return
        self.editor.set_session(picked)
        self.explore.set_session(picked)
        self.studies.set_session(picked)
        self.setWindowModified(True)
        self._schedule_simulation(immediately=True)

    @Slot(object)
    def _on_fit_change_choose(self, plan) -> None:
        """The memory panel's "Use it": the changed plan that fits, in the editor, simulated.

        The change was found for the simulated session: when the editor holds another model,
        plan or cluster (an edit not simulated yet, or one that breaks a rule) it is not
        applied (it would undo those edits or pair the plan with another model)."""
        current = self.editor.session()
        if plan == current.plan:
            return
        shown = self._result.session if self._result is not None else None
        if shown is None or (current.model, current.plan, current.cluster) != (
                shown.model, shown.plan, shown.cluster):
            self._status.setText("The configuration changed since that change was found; it "
                                 "is not applied (the next simulation finds what fits)")
            return
        self.editor.set_session(dataclasses.replace(current, plan=plan))
        self.explore.set_session(self.editor.session())
        self.studies.set_session(self.editor.session())
        self.setWindowModified(True)
        self._status.setText(f"Plan changed to {plan.label()} so that it fits")
        self._schedule_simulation(immediately=True)

    @Slot()
    def _on_explore_open_request(self) -> None:
        self.show_tab("plan")

    @Slot()
    @Slot(int)
    def _on_tab_change(self, index: int) -> None:
        """The Profiles tab, shown (or showing when a session opens), selects the store the
        session uses (:func:`core.sim.simulate.profile_path`) whenever that store changed since
        it last did (a new session, another GPU kind); a store the user picked meanwhile
        stays."""
        if index != self.profiles_tab_index:
            return
        from core.sim.simulate import profile_path
        try:
            path = profile_path(self.editor.session())
        except (ConfigError, OSError, ValueError):  # a session being edited: nothing to follow
            return
        if path != self._profiles_shown_for:
            self._profiles_shown_for = path
            self.profiles.select_path(path)

    def _on_tab_settings_change(self) -> None:
        self.setWindowModified(True)

    @Slot()
    def _on_show_plan_trigger(self) -> None:
        self.show_tab("plan")

    @Slot()
    def _on_show_explore_trigger(self) -> None:
        self.show_tab("explore")

    @Slot()
    def _on_show_profiles_trigger(self) -> None:
        self.show_tab("profiles")

    @Slot()
    def _on_show_studies_trigger(self) -> None:
        self.show_tab("studies")

    # ------------------------------------------------------------------ handlers: Profiles tab
    @Slot(str)
    def _on_profiles_use_request(self, path: str) -> None:
        # an edit like typing the path: validated, marks the window modified, re-simulates
        self.editor.set_field("cluster.profile_path", path)
        self.statusBar().showMessage(f"This session now uses the profile {path}", 5000)

    # ------------------------------------------------------------------ handlers: menus
    @Slot()
    def _on_new_trigger(self) -> None:
        if self.maybe_save():
            self.new_session()

    @Slot()
    def _on_open_trigger(self) -> None:
        if not self.maybe_save():
            return
        start = str(self._path.parent) if self._path else str(examples_dir())
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open session", start, _FILE_FILTER)
        if path:
            self.open_path(path)

    @Slot()
    def _on_recent_menu_about_to_show(self) -> None:
        self._recent.fill_menu(self.recent_menu)

    @Slot(QtGui.QAction)
    def _on_recent_menu_trigger(self, action: QtGui.QAction) -> None:
        target = action.data()
        if target == RecentFiles.CLEAR:
            self._recent.clear()
        elif target and self.maybe_save():
            self.open_path(target)

    @Slot(QtGui.QAction)
    def _on_example_menu_trigger(self, action: QtGui.QAction) -> None:
        if self.maybe_save():
            self.open_path(action.data(), as_template=True)

    @Slot()
    def _on_save_trigger(self) -> None:
        self._save_interactive(ask_path=self._path is None)

    @Slot()
    def _on_save_as_trigger(self) -> None:
        self._save_interactive(ask_path=True)

    @Slot()
    def _on_export_megatron_trigger(self) -> None:
        stem = self._path.stem if self._path else "plan"
        start = str((self._path.parent if self._path else Path.home()) / f"{stem}_megatron.sh")
        chosen, _ = QtWidgets.QFileDialog.getSaveFileName(
            self, "Export Megatron-LM arguments", start, "Shell scripts (*.sh);;All files (*)")
        if chosen:
            self.export_megatron_args(chosen)

    @Slot(QtGui.QAction)
    def _on_preset_action_trigger(self, action: QtGui.QAction) -> None:
        self.editor.set_model_preset(action.data())

    @Slot()
    def _on_reset_zoom_trigger(self) -> None:
        self.timeline.reset_view()

    @Slot()
    def _on_about_trigger(self) -> None:
        QtWidgets.QMessageBox.about(
            self, "About vTrain",
            "<h3>vTrain</h3><p>Simulates one training iteration of a large transformer language "
            "model on a GPU cluster for a parallelization plan, and turns it into training days, "
            "GPU-hours and dollars.</p><p>After Bang et al., “vTrain: A Simulation Framework for "
            "Evaluating Cost-effective and Compute-optimal Large Language Model Training”, "
            "MICRO 2024.</p>")

    # ------------------------------------------------------------------ window
    def closeEvent(self, event: QtGui.QCloseEvent) -> None:  # noqa: N802 - Qt API
        if not self.maybe_save():
            event.ignore()
            return
        self._debounce.stop()
        self.runner.shutdown()
        self.fit_runner.shutdown()  # a running search stops at its next plan
        self.trace_overlay.shutdown()
        self.explore.shutdown()
        self.profiles.shutdown()  # a running profile stops; its store keeps the finished groups
        self.studies.shutdown()
        for timeline in self.findChildren(TimelineWidget):  # layouts still being prepared
            timeline.shutdown()
        shutdown_all()  # cancelled jobs no view holds any more (an older timeline's layout)
        event.accept()

    # ------------------------------------------------------------------ internals
    def _show_session(self, session: Session) -> list[str]:
        """Show ``session`` in the editor and the tabs; returns the unusable study settings
        (and ``compare.pinned`` when the saved pin cannot be simulated)."""
        self.editor.set_session(session)
        self.explore.reset(session)
        self._on_tab_change(self.tabs.currentIndex())  # the Profiles tab, when shown: its store
        return self.studies.reset(session) + self._restore_pin(session)

    def _forget_result(self) -> None:
        """Drop the result on screen: it is another session's. An opened file that breaks a
        rule showed the previous file's figures as "the last valid configuration", and Pin
        pinned that plan, which the window no longer showed."""
        # a simulation of the previous session still running: its answer is dropped
        self._forgotten_request_id = self.runner.latest_request_id
        if self._fit_request_id:
            self.fit_runner.cancel()
            self._fit_request_id = 0
        self._result = None
        self._mark_stale(None)
        self.results_view.set_empty(True, _SIMULATING_TEXT)
        self.compare.set_current(None)
        self.action_pin.setEnabled(False)

    def _request_fit_changes(self, result: SimulationResult) -> None:
        """Show what would make ``result`` (just put on screen) fit: known already, nothing
        (it fits), or "looking for changes" while :attr:`fit_runner` searches; an earlier
        result's search is cancelled, and its answer dropped if it comes all the same."""
        if self._fit_request_id:
            self.fit_runner.cancel()  # of the result this one replaces
        self._fit_request_id = 0
        known = getattr(result, "fit_changes", None)
        if known is not None or result.report.memory_verdict == "fits":
            self.cost_panel.set_fit_changes(known)
            return
        self.cost_panel.set_fit_changes_searching()
        self._fit_request_id = self.fit_runner.request(result.session)

    @property
    def fit_search_pending(self) -> bool:
        """Whether what would make the result on screen fit is still being looked for."""
        return self._fit_request_id != 0

    def _mark_stale(self, message: str | None) -> None:
        """Dim the Plan tab's results under ``message`` (None: they are current again)."""
        stale = message is not None and self._result is not None
        self._stale_banner.setText(message or "")
        self._stale_banner.setVisible(stale)
        self.cost_panel.set_stale(stale)
        self._timeline_veil.set_stale(stale)

    def _fit_plan_split(self) -> None:
        """Give the figures under the timeline the height they need (at most 60 %)."""
        right = self._splitters[1]
        total = sum(right.sizes())
        if total <= 0:
            return
        figures = min(self.cost_panel.figures_height(), int(total * 0.6))
        right.setSizes([total - figures, figures])

    @Slot()
    def _on_figures_width_change(self) -> None:
        # narrower figures wrap onto more lines: give them that height too (until the user
        # moves the divider)
        if not self._plan_split_moved:
            self._fit_plan_split()

    @Slot(int, int)
    def _on_plan_splitter_move(self, pos: int, index: int) -> None:
        self._plan_split_moved = True

    def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:  # noqa: N802
        if (event.type() == QtCore.QEvent.Type.Resize and watched is self._splitters[1]
                and not self._plan_split_moved):
            self._fit_plan_split()
        return super().eventFilter(watched, event)

    def _schedule_simulation(self, immediately: bool = False) -> None:
        errors = validate(self.editor.session())
        if errors:
            self._debounce.stop()
            self._mark_stale("Not the configuration in the editor: it breaks a rule (fix the "
                             "fields marked in red). The timeline and figures below are those of "
                             "the last valid configuration.")
            if self._result is None:
                self.results_view.set_empty(True, _INVALID_TEXT)
            n = len(errors)
            kept = "; the last valid result stays on screen" if self._result is not None else ""
            self._status.setText(f"Invalid configuration ({n} problem{'s' if n > 1 else ''}): "
                                 f"{errors[0]}{kept}")
            return
        if immediately:
            self._debounce.stop()
            self._on_debounce_timeout()
        else:
            self._debounce.start()

    def _save_interactive(self, ask_path: bool) -> bool:
        path = self._path
        if ask_path or path is None:
            start = str(self._path if self._path else Path.home() / (self._copy_of or "session.json"))
            chosen, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Save session", start,
                                                              _FILE_FILTER)
            if not chosen:
                return False
            path = Path(chosen)
            if not path.suffix:
                path = path.with_suffix(".json")
        return self.save_to(path)

    def _set_path(self, path: Path | None, copy_of: str | None = None) -> None:
        """Where Save writes (None: Save asks); ``copy_of`` names the shipped example an
        untitled session was opened from, for the title."""
        self._path = path
        self._copy_of = copy_of
        self.setWindowFilePath(str(path) if path else "")
        name = path.name if path else f"copy of {copy_of}" if copy_of else "Untitled"
        self.setWindowTitle(f"vTrain — {name}[*]")
