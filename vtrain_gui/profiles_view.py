"""The Profiles tab: which profile stores exist, where their numbers came from, and profiling
this machine in the background.

The list comes from :func:`core.store.profiles.list_stores` (shipped ``profiles/`` and
:func:`core.store.profiles.user_profiles_dir`); a file that cannot be read is listed
with its error. Selecting a store shows its full provenance. "Use for this
session" asks the window to set ``cluster.profile_path`` (an edit, so the Plan
tab re-simulates). "Profile this machine…" runs :func:`core.profiling.run_profile`
on the CPU through a :class:`~vtrain_gui.workers.ProfileRunner` (worker thread,
progress, Cancel) into a timestamped store in the user's folder; when it ends
the list is refreshed and the new store selected. Nothing here imports torch:
whether torch is installed is asked on the worker thread when the tab is first
shown, because :func:`core.profiling.torch_status` imports it (seconds).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from PySide6 import QtGui, QtWidgets
from PySide6.QtCore import Qt, Signal, Slot

from core.plan.session import Session
from core.store.profiles import StoreInfo, list_stores, method_text, user_profiles_dir

from .workers import ProfileRunner

__all__ = ["ProfilesTab", "COLUMNS", "format_provenance", "new_profile_path"]

#: Table columns, left to right.
COLUMNS = ("Device", "Method", "Date", "Source", "Torch", "Threads", "Op rows", "Collectives",
           "Path")
_NOT_MEASURED = "not measured with torch on a machine: no torch or CUDA version to name"
_NO_THREADS = "no CPU thread count: only a store profiled on a CPU records one"
_COL = {name: i for i, name in enumerate(COLUMNS)}

#: Text colour of the Method cell per provenance method ("error": unreadable store).
_METHOD_COLOURS = {"measured": "#2E7D32", "calibrated": "#1565C0", "analytic": "#616161",
                   "error": "#C62828"}

_SHAPES_DEFAULT = "default"
_SHAPES_SESSION = "session"


def new_profile_path(device: str = "cpu", when: float | None = None) -> Path:
    """``<user_profiles_dir>/local-<device>-<YYYYmmdd-HHMMSS>.h5`` (local time; folder not created)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    return user_profiles_dir() / f"local-{device.replace(':', '-')}-{stamp}.h5"


def _expand(value: Any) -> Any:
    """Nested provenance values are stored as JSON text: show them as the structures they are."""
    if isinstance(value, str) and value[:1] in "[{":
        from core.util.inputs import parse_json
        try:  # bounded nesting, finite numbers: a note of 100,000 "[" raised RecursionError
            return _expand(parse_json(value, "provenance", ValueError))
        except ValueError:
            return value
    if isinstance(value, dict):
        return {str(k): _expand(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_expand(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays read from HDF5 attributes
        return _expand(value.tolist())
    return value


def format_provenance(provenance: dict[str, Any], indent: int = 0) -> str:
    """Readable multi-line text of a provenance mapping: one ``key: value`` a line, nested
    mappings indented, short lists of scalars on one line, JSON-text values expanded."""
    return "\n".join(_format_lines(_expand(dict(provenance)), indent))


def _scalar(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) and (not v or v != v.strip()) else str(v)


def _format_lines(value: Any, indent: int) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v and not _short_list(v):
                lines.append(f"{pad}{k}:")
                lines += _format_lines(v, indent + 1)
            else:
                lines.append(f"{pad}{k}: {_inline(v)}")
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, (dict, list)) and v and not _short_list(v):
                lines.append(f"{pad}-")
                lines += _format_lines(v, indent + 1)
            else:
                lines.append(f"{pad}- {_inline(v)}")
    else:
        lines.append(f"{pad}{_inline(value)}")
    return lines


def _short_list(v: Any) -> bool:
    return (isinstance(v, list) and len(v) <= 12
            and all(not isinstance(x, (dict, list)) for x in v))


def _inline(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{}"
    return _scalar(v)


def _details_text(info: StoreInfo) -> str:
    where = "shipped with vTrain" if info.shipped else "user store"
    head = [f"{info.path}", f"({where})", ""]
    if info.error:
        return "\n".join(head + ["Cannot read this store:", info.error])
    head += [info.summary, "", "Device:", f"  {info.device_line()}", ""]
    ops = [f"  {op}: {n} rows" for op, n in info.num_op_rows.items()] or ["  (none)"]
    colls = [f"  {kind}: group sizes {sizes}" for kind, sizes in info.collectives.items()] \
        or ["  (none: the simulator uses its analytic network model)"]
    body = ["Op tables:", *ops, "", "Collective curves:", *colls, "", "Provenance:",
            format_provenance(info.provenance, indent=1)]
    return "\n".join(head + body)


class ProfilesTab(QtWidgets.QWidget):
    """Table of profile stores, provenance of the selected one, and a background profiler.

    Parameters
    ----------
    session_fn
        Returns the session being edited (for "this session's shapes"); None
        offers only the default shapes.
    runner
        The :class:`ProfileRunner` to use (tests pass one with a fake profiler);
        by default one is made, owned by this widget.

    Signals
    -------
    use_requested(str)
        "Use for this session" was pressed for the store at this path.
    torch_checked(bool, str)
        Whether torch is installed here, and its version or the install hint.
    stores_refreshed()
        The table was filled again.
    profile_finished(object)
        A profile run ended normally (:class:`core.profiling.ProfileRunResult`).
    profile_cancelled(object)
        A profile run stopped on Cancel (its result, or None before it began).
    profile_failed(str)
        A profile run raised; the message is in the status line too.
    """

    use_requested = Signal(str)
    torch_checked = Signal(bool, str)
    stores_refreshed = Signal()
    profile_finished = Signal(object)
    profile_cancelled = Signal(object)
    profile_failed = Signal(str)

    def __init__(self, session_fn: Callable[[], Session] | None = None,
                 runner: ProfileRunner | None = None,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._session_fn = session_fn
        self._infos: list[StoreInfo] = []
        self._torch_ok: bool | None = None  # None until the worker has answered
        self._torch_text = ""
        self._probe_asked = False
        self._out: Path | None = None

        self._connect_runner(runner or ProfileRunner())
        top = self._build_toolbar()
        split = self._build_stores()
        box = self._build_profiling_box(session_fn)

        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addWidget(box)

        self.refresh()
        self._update_buttons()

    # ------------------------------------------------------------------ building the tab
    def _connect_runner(self, runner: ProfileRunner) -> None:
        self.runner = runner
        self.runner.setParent(self)
        self.runner.probed.connect(self._on_runner_probe)
        self.runner.started.connect(self._on_runner_start)
        self.runner.progress.connect(self._on_runner_progress)
        self.runner.finished.connect(self._on_runner_finish)
        self.runner.cancelled.connect(self._on_runner_cancel)
        self.runner.failed.connect(self._on_runner_fail)

    def _build_toolbar(self) -> QtWidgets.QHBoxLayout:
        """Refresh, Use for this session, and the user's profile folder."""
        self.refresh_button = QtWidgets.QPushButton("Refresh")
        self.refresh_button.setToolTip("List the stores again (shipped profiles/ and your folder)")
        self.refresh_button.clicked.connect(self._on_refresh_click)
        self.use_button = QtWidgets.QPushButton("Use for this session")
        self.use_button.setToolTip("Set the session's cluster.profile_path to the selected store; "
                                   "the Plan tab re-simulates with it")
        self.use_button.clicked.connect(self._on_use_click)
        self.folder_label = QtWidgets.QLabel()
        self.folder_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.folder_label.setStyleSheet("color: #404040;")
        top = QtWidgets.QHBoxLayout()
        top.addWidget(self.refresh_button)
        top.addWidget(self.use_button)
        top.addSpacing(12)
        top.addWidget(self.folder_label, 1)
        return top

    def _build_stores(self) -> QtWidgets.QSplitter:
        """The table of stores over the provenance of the selected one."""
        self.table = QtWidgets.QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("stores")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setAlternatingRowColors(True)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self._on_table_selection_change)

        self.details = QtWidgets.QPlainTextEdit()
        self.details.setObjectName("provenance")
        self.details.setReadOnly(True)
        self.details.setLineWrapMode(QtWidgets.QPlainTextEdit.LineWrapMode.NoWrap)
        self.details.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        self.details.setPlaceholderText("Select a store to see where its numbers came from")

        split = QtWidgets.QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.details)
        # the stores over their provenance: at 1,280 x 800 a third for the table showed five
        # of the eleven shipped stores, two thirds for a text that mostly scrolls; two thirds
        # left it a dozen pixels short of the eleventh when a horizontal scroll bar showed
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        return split

    def _build_profiling_box(self, session_fn: Callable[[], Session] | None) -> QtWidgets.QGroupBox:
        """Profiling this machine: shapes, threads, Profile/Cancel, progress, status, torch."""
        box = QtWidgets.QGroupBox("Profile this machine (CPU, with torch)")
        self.shapes_combo = QtWidgets.QComboBox()
        self.shapes_combo.addItem("Default small set (about a minute)", _SHAPES_DEFAULT)
        if session_fn is not None:
            self.shapes_combo.addItem("This session's shapes (its t, b and precision)",
                                      _SHAPES_SESSION)
        self.shapes_combo.setToolTip(
            "What to measure. The session's own model at its tensor parallelism and micro-batch "
            "size is what a simulation of it looks up; a large model takes long on a CPU, and "
            "shapes that do not fit in memory are skipped.")
        self.threads_spin = QtWidgets.QSpinBox()
        self.threads_spin.setRange(0, max(1, os.cpu_count() or 1))
        self.threads_spin.setSpecialValueText("torch default")
        self.threads_spin.setSuffix(" threads")
        self.threads_spin.setToolTip("CPU intra-op threads while profiling; train with the same number")
        self.profile_button = QtWidgets.QPushButton("Profile this machine…")
        self.profile_button.setToolTip("Measure op times on this CPU into a new store in your folder "
                                       "(runs in the background)")
        self.profile_button.clicked.connect(self._on_profile_click)
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop at the next measurement; the store keeps the finished "
                                      "shape groups")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self._on_cancel_click)
        self.progress_bar = QtWidgets.QProgressBar()
        self.progress_bar.setTextVisible(True)
        self._set_progress_idle()
        self._status = QtWidgets.QLabel("Not running.")
        self._status.setWordWrap(True)
        self._status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.torch_label = QtWidgets.QLabel("torch: not checked yet")
        self.torch_label.setWordWrap(True)
        self.torch_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        row = QtWidgets.QHBoxLayout()
        row.addWidget(QtWidgets.QLabel("Shapes"))
        row.addWidget(self.shapes_combo, 1)
        row.addWidget(self.threads_spin)
        row.addWidget(self.profile_button)
        row.addWidget(self.cancel_button)
        box_layout = QtWidgets.QVBoxLayout(box)
        box_layout.addLayout(row)
        box_layout.addWidget(self.progress_bar)
        box_layout.addWidget(self._status)
        box_layout.addWidget(self.torch_label)
        return box

    # ------------------------------------------------------------------ API
    def stores(self) -> list[StoreInfo]:
        """The stores in the table, top to bottom."""
        return list(self._infos)

    def refresh(self, select: str | Path | None = None) -> None:
        """List the stores again; select the one at ``select`` (else keep the selection)."""
        keep = select if select is not None else (self.selected_info().path
                                                   if self.selected_info() else None)
        self._infos = list_stores()
        self.folder_label.setText(f"Your stores: {user_profiles_dir()}")
        self.table.setSortingEnabled(False)
        self.table.setRowCount(len(self._infos))
        for row, info in enumerate(self._infos):
            for col, (text, tip) in enumerate(self._row_cells(info)):
                item = QtWidgets.QTableWidgetItem(text)
                item.setToolTip(tip or text)
                item.setData(Qt.ItemDataRole.UserRole, row)
                if col == _COL["Method"]:
                    colour = _METHOD_COLOURS.get(info.method)
                    if colour:
                        item.setForeground(QtGui.QBrush(QtGui.QColor(colour)))
                if info.error:
                    item.setForeground(QtGui.QBrush(QtGui.QColor(_METHOD_COLOURS["error"])))
                self.table.setItem(row, col, item)
        self.table.resizeColumnsToContents()
        for col in ("Source", "Path"):
            if self.table.columnWidth(_COL[col]) > 360:
                self.table.setColumnWidth(_COL[col], 360)
        if not (keep is not None and self.select_path(keep)) and self._infos:
            self.table.selectRow(0)
        self._on_table_selection_change()
        self.stores_refreshed.emit()

    def select_path(self, path: str | Path) -> bool:
        """Select the store at ``path``; whether it is listed."""
        target = Path(path).resolve()
        for row, info in enumerate(self._infos):
            if info.path.resolve() == target:
                self.table.selectRow(row)
                return True
        return False

    def selected_info(self) -> StoreInfo | None:
        """The selected store, or None."""
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        if not rows:
            return None
        index = rows[0].row()
        return self._infos[index] if 0 <= index < len(self._infos) else None

    def details_text(self) -> str:
        """Text of the details pane."""
        return self.details.toPlainText()

    @property
    def status_text(self) -> str:
        """The profiling status line."""
        return self._status.text()

    @property
    def torch_available(self) -> bool | None:
        """Whether torch is installed here (None until checked)."""
        return self._torch_ok

    def check_torch(self) -> None:
        """Ask (on the worker thread) whether torch is installed; done once, on first show."""
        if self._probe_asked:
            return
        self._probe_asked = True
        self.torch_label.setText("torch: checking…")
        self.runner.probe()

    def start_profile(self) -> bool:
        """Start profiling the CPU into a new timestamped store; whether it started."""
        if self.runner.busy or self._torch_ok is False:
            return False
        shapes = None
        if self.shapes_combo.currentData() == _SHAPES_SESSION and self._session_fn is not None:
            try:
                from core.profiling import shapes_from_session

                shapes = [shapes_from_session(self._session_fn())]
            except (ValueError, TypeError, ZeroDivisionError) as exc:
                self._set_status(f"Cannot take the session's shapes: {exc}", error=True)
                return False
        out = new_profile_path("cpu")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._set_status(f"Cannot create {out.parent}: {exc.strerror or exc}", error=True)
            return False
        threads = self.threads_spin.value() or None
        self._out = out
        self.runner.start(out, "cpu", shapes, threads)
        return True

    def cancel_profile(self) -> None:
        """Ask the running profile to stop (the store keeps what was finished)."""
        if self.runner.busy:
            self.runner.cancel()
            self._set_status("Cancelling at the next measurement…")
            self.cancel_button.setEnabled(False)

    def shutdown(self) -> bool:
        """Cancel a running profile and stop the worker thread (window closing)."""
        return self.runner.shutdown()

    # ------------------------------------------------------------------ handlers: widgets
    def showEvent(self, event: QtGui.QShowEvent) -> None:  # noqa: N802 - Qt API
        super().showEvent(event)
        self.check_torch()

    @Slot()
    def _on_refresh_click(self) -> None:
        self.refresh()

    @Slot()
    def _on_use_click(self) -> None:
        info = self.selected_info()
        if info is not None and not info.error:
            self.use_requested.emit(str(info.path))

    @Slot()
    def _on_profile_click(self) -> None:
        self.start_profile()

    @Slot()
    def _on_cancel_click(self) -> None:
        self.cancel_profile()

    @Slot()
    def _on_table_selection_change(self) -> None:
        info = self.selected_info()
        self.details.setPlainText(_details_text(info) if info is not None else "")
        self._update_buttons()

    # ------------------------------------------------------------------ handlers: runner
    @Slot(bool, str)
    def _on_runner_probe(self, ok: bool, text: str) -> None:
        self._torch_ok = ok
        self._torch_text = text
        if ok:
            self.torch_label.setText(f"Ready to profile with {text}")
            self.torch_label.setStyleSheet("color: #404040;")
        else:
            self.torch_label.setText(f"Profiling needs torch: {text}")
            self.torch_label.setStyleSheet("color: #C62828;")
        self._update_buttons()
        self.torch_checked.emit(ok, text)

    @Slot(int)
    def _on_runner_start(self, run_id: int) -> None:
        self.progress_bar.setFormat("%v / %m steps")
        self.progress_bar.setRange(0, 0)  # busy until the first report says how many steps
        self._set_status(f"Profiling the CPU into {self._out} …")
        self._update_buttons()

    @Slot(int, object)
    def _on_runner_progress(self, run_id: int, report: Any) -> None:
        total = max(1, int(report.total))
        self.progress_bar.setRange(0, total)
        self.progress_bar.setValue(min(int(report.done), total))
        saved = f" ({report.groups_saved} group{'s' if report.groups_saved != 1 else ''} saved)" \
            if report.groups_saved else ""
        self._set_status(f"{report.done}/{report.total}: {report.message}{saved}")

    @Slot(int, object, float)
    def _on_runner_finish(self, run_id: int, result: Any, seconds: float) -> None:
        self._set_progress_idle(done=True)
        self._set_status(f"Profiled {result.groups_done} of {result.groups_total} shape groups in "
                         f"{seconds:,.0f} s into {result.path}")
        self.refresh(select=result.path)
        self._update_buttons()
        self.profile_finished.emit(result)

    @Slot(int, object)
    def _on_runner_cancel(self, run_id: int, result: Any) -> None:
        self._set_progress_idle()
        path = getattr(result, "path", None)
        if path is not None and Path(path).exists():
            self._set_status(f"Cancelled: {result.groups_done} of {result.groups_total} shape "
                             f"groups kept in {path}")
            self.refresh(select=path)
        else:
            self._set_status("Cancelled before anything was measured.")
        self._update_buttons()
        self.profile_cancelled.emit(result)

    @Slot(int, str)
    def _on_runner_fail(self, run_id: int, message: str) -> None:
        self._set_progress_idle()
        self._set_status(f"Profiling failed: {message}", error=True)
        if self._out is not None and self._out.exists():
            self.refresh(select=self._out)  # the probe or earlier groups may have been saved
        self._update_buttons()
        self.profile_failed.emit(message)

    # ------------------------------------------------------------------ internals
    def _set_progress_idle(self, done: bool = False) -> None:
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(1 if done else 0)
        self.progress_bar.setFormat("done" if done else "idle")

    def _set_status(self, text: str, error: bool = False) -> None:
        self._status.setText(text)
        self._status.setStyleSheet("color: #C62828;" if error else "")

    def _update_buttons(self) -> None:
        busy = self.runner.busy
        info = self.selected_info()
        self.use_button.setEnabled(info is not None and not info.error)
        self.profile_button.setEnabled(not busy and self._torch_ok is not False)
        self.profile_button.setToolTip(
            self._torch_text if self._torch_ok is False else
            "Measure op times on this CPU into a new store in your folder (runs in the background)")
        self.cancel_button.setEnabled(busy and not self.runner.cancel_requested)
        self.shapes_combo.setEnabled(not busy)
        self.threads_spin.setEnabled(not busy)

    @staticmethod
    def _row_cells(info: StoreInfo) -> list[tuple[str, str]]:
        """(text, tooltip) of each column for one store."""
        path = str(info.path)
        where = "shipped" if info.shipped else "yours"
        if info.error:
            return [(info.path.stem, info.error), ("error", info.error), ("", ""),
                    (info.error, info.error), ("", ""), ("", ""), ("", ""), ("", ""),
                    (path, f"{path} ({where})")]
        # a calibrated store names the measurements it was fitted to instead of a source
        source = info.source or str(info.provenance.get("data", ""))
        torch_text = info.torch_version + (f", CUDA {info.cuda_version}" if info.cuda_version else "")
        num_rows = sum(info.num_op_rows.values())
        rows_tip = "\n".join(f"{op}: {n}" for op, n in info.num_op_rows.items())
        colls = info.collectives
        coll_text = (f"{len(colls)} kind{'s' if len(colls) != 1 else ''}, groups "
                     f"{min(min(v) for v in colls.values() if v)}–"
                     f"{max(max(v) for v in colls.values() if v)}"
                     if any(colls.values()) else "—")
        coll_tip = "\n".join(f"{k}: {v}" for k, v in colls.items()) or "no collective curves"
        method = method_text(info.provenance)
        return [(info.device_name, info.summary),
                (method, str(info.provenance.get("note", "")) if method != info.method else ""),
                (info.date, ""),
                (source, source),
                # a store not measured with torch (calibrated, or from a GPU's data sheet) has
                # neither: a dash that says so on hover, not a blank cell
                (torch_text, "") if torch_text else ("—", _NOT_MEASURED),
                (str(info.threads), "") if info.threads is not None else ("—", _NO_THREADS),
                (f"{num_rows:,} in {len(info.num_op_rows)} ops", rows_tip),
                (coll_text, coll_tip), (path, f"{path} ({where})")]
