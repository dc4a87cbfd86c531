"""PySide6 + pyqtgraph desktop application: views over :mod:`core` objects.

Modules: :mod:`.app` (entry point), :mod:`.main_window`, :mod:`.editor`
(session form), :mod:`.timeline` (Gantt view), :mod:`.cost_panel`,
:mod:`.workers` (simulation off the GUI thread).
"""

from ._compat import guard_none_refcount

guard_none_refcount()
