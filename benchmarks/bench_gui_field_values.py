"""GUI-thread time of one edit, by the size of the value typed (nothing may grow with it).

Usage::

    QT_QPA_PLATFORM=offscreen python benchmarks/bench_gui_field_values.py

Shows the main window, then for each field and value sets the field as a user
edit would (:meth:`ConfigEditor.set_field`: validation, the derived figures,
the Explore tab's default hints) and times that call on the GUI thread; the
simulation itself runs on its worker and is not timed (the debounce timer is
stopped). Prints one line per edit: ``field value ms``. Before the fix,
``model.num_layers = 2^31`` took about 40 s (the divisors of L listed by trial
division up to L).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6 import QtCore, QtWidgets  # noqa: E402

import vtrain_gui  # noqa: E402,F401
from vtrain_gui.main_window import MainWindow  # noqa: E402

VALUES = (96, 2**20, 2**31, 2**31 + 1, 2**32, 2**40, 2**62, 2**63 - 1)
FIELDS = ("model.num_layers", "model.vocab_size", "cluster.gpus_per_node",
          "plan.global_batch_size", "plan.data_parallel")


def main() -> int:
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    scratch = QtCore.QSettings(str(Path(QtCore.QDir.tempPath()) / "vtrain-bench.ini"),
                               QtCore.QSettings.Format.IniFormat)
    window = MainWindow(settings=scratch)
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    worst = 0.0
    for field in FIELDS:
        for value in VALUES:
            t = time.perf_counter()
            window.editor.set_field(field, value)
            app.processEvents()
            ms = (time.perf_counter() - t) * 1e3
            window._debounce.stop()
            worst = max(worst, ms)
            print(f"{field:24s} {value:>22,} {ms:8.1f} ms")
        window.new_session()
        window._debounce.stop()
    print(f"worst edit: {worst:.1f} ms")
    window.runner.shutdown()
    window.setWindowModified(False)
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
