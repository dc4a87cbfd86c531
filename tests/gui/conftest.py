"""Fixtures of the GUI tests (pytest-qt on Qt's offscreen platform).

Every test fails when it leaves a visible window or a running simulation
thread behind, and no test can block on a modal message box: the
``QMessageBox`` statics are replaced by recorders (:class:`MessageBoxes`).
"""

from __future__ import annotations

import gc
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

import vtrain_gui  # noqa: E402,F401  (applies the binding work-around before any widget)
from synthetic import synthetic_iteration, synthetic_report, synthetic_result  # noqa: E402,F401
from vtrain_gui.background import live_runners  # noqa: E402

#: Qt-internal top-level widgets that live on by design.
_IGNORED_WINDOWS = {"QTipLabel"}


class MessageBoxes:
    """Records ``QMessageBox.warning/critical/question/information/about`` calls.

    ``answer`` is what ``warning``/``question`` return (Discard unless a test sets it).
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (kind, title, text)
        self.answer = QtWidgets.QMessageBox.StandardButton.Discard

    def _record(self, kind: str):
        def show(parent, title, text, *args, **kwargs):
            self.calls.append((kind, title, text))
            if kind in ("warning", "question"):
                return self.answer
            return QtWidgets.QMessageBox.StandardButton.Ok

        return show

    def of_kind(self, kind: str) -> list[tuple[str, str, str]]:
        """Calls of one kind, e.g. ``'critical'``."""
        return [c for c in self.calls if c[0] == kind]


@pytest.fixture(autouse=True)
def message_boxes(monkeypatch) -> MessageBoxes:
    """Replace modal message boxes by a recorder for the whole test."""
    boxes = MessageBoxes()
    for kind in ("warning", "critical", "question", "information", "about"):
        monkeypatch.setattr(QtWidgets.QMessageBox, kind, staticmethod(boxes._record(kind)))
    return boxes


@pytest.fixture(autouse=True)
def no_leftovers(qapp):
    """Fail a test that leaves a visible window or a running simulation thread behind.

    Set up before pytest-qt's ``qtbot`` and so torn down after it has closed
    the widgets registered with ``qtbot.addWidget``.
    """
    before = {id(w) for w in QtWidgets.QApplication.topLevelWidgets()}
    yield
    gc.collect()
    for _ in range(3):
        QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
        QtWidgets.QApplication.processEvents()
    left = [w for w in QtWidgets.QApplication.topLevelWidgets()
            if id(w) not in before and w.isVisible() and w.metaObject().className()
            not in _IGNORED_WINDOWS]
    runners = live_runners()
    for r in runners:  # do not let one leak break the tests after it
        r.shutdown()
    for w in left:
        w.close()
    assert not runners, f"simulation threads left running: {runners}"
    assert not left, f"windows left open: {[type(w).__name__ for w in left]}"


@pytest.fixture
def settings(tmp_path) -> QtCore.QSettings:
    """A private settings file (recent files) for one test."""
    return QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.Format.IniFormat)


@pytest.fixture
def window(qtbot, settings):
    """A shown main window with private settings; closing it never asks to save."""
    from vtrain_gui.main_window import MainWindow
    w = MainWindow(settings=settings)
    qtbot.addWidget(w)
    w.show()
    yield w
    w.setWindowModified(False)  # closing must not ask


@pytest.fixture
def opened(window, tmp_path):
    """The window with a copy of the 1.3B example open and then edited (modified): what a
    failed open must leave as it was."""
    import shutil
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "resources" / "examples" / "gpt3_1.3b_single_node.json"
    path = tmp_path / "previous.json"
    shutil.copy(example, path)
    assert window.open_path(path)
    window.editor.field_widget("cost.price_per_gpu_hour_usd").setValue(3.25)
    assert window.isWindowModified()
    return path


@pytest.fixture(scope="session")
def real_simulate():
    """``core.sim.simulate.simulate``; skips only while the core still raises NotImplementedError."""
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.sim.simulate import simulate

    tiny = Session(model=MODEL_PRESETS["GPT-3 1.3B"],
                   plan=ParallelPlan(tensor_parallel=2, pipeline_parallel=2, data_parallel=2,
                                     micro_batch_size=1, global_batch_size=8))
    try:
        simulate(tiny)
    except NotImplementedError:
        pytest.skip("core.sim.simulate.simulate is not implemented yet")
    return simulate


@pytest.fixture
def oom_session_file(tmp_path):
    """A session file of Llama 3 70B on 64 H100s without the distributed optimizer or
    recomputation (t=8 p=2 d=4, b=1, B=128; 109 GiB per GPU: it does not fit)."""
    from core.io.session import save_session
    from core.plan.cluster import ClusterConfig
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    path = tmp_path / "oom.json"
    save_session(Session(MODEL_PRESETS["Llama 3 70B"],
                         ParallelPlan(tensor_parallel=8, pipeline_parallel=2, data_parallel=4,
                                      micro_batch_size=1, global_batch_size=128,
                                      recompute="none", sequence_parallel=True, zero_stage=0),
                         ClusterConfig(gpu="H100-SXM5-80GB", gpus_per_node=8)), path)
    return path
