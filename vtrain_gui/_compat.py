"""Work-arounds for defects of the Qt binding found in supported environments.

PySide6 6.12.0 on CPython 3.11 returns ``None`` from every C++ method that
returns ``void``, and ``True``/``False`` from ``Signal.emit``, without taking
a new reference (the binding treats them as immortal, which they are only
from CPython 3.12 on). Each such call lowers the object's reference count by
one, and soon the interpreter aborts with "Fatal Python error: none_dealloc"
(or "bool_dealloc"). A GUI makes that many calls within seconds of painting.
PySide6 6.11.2 does not have the defect; the proper fix is to avoid 6.12.0 on
Python < 3.12 (pin ``PySide6-Essentials!=6.12.0``).

:func:`guard_none_refcount` detects the defect by measurement (not by version
number) and, only when present, raises the reference counts of ``None``,
``True`` and ``False`` far out of reach, which is what CPython 3.12+ does by
design (PEP 683, immortal objects).
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["guard_none_refcount", "NONE_REFCOUNT_GUARDED"]

NONE_REFCOUNT_GUARDED = False


def guard_none_refcount() -> bool:
    """Apply the ``None`` reference-count guard if the binding leaks; return whether it did."""
    global NONE_REFCOUNT_GUARDED
    if NONE_REFCOUNT_GUARDED or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return NONE_REFCOUNT_GUARDED
    from PySide6 import QtCore

    point = QtCore.QPointF(0.0, 0.0)
    before = sys.getrefcount(None)
    for _ in range(64):
        point.setX(1.0)  # a void C++ method
    if sys.getrefcount(None) - before >= 0:
        return False
    for obj in (None, True, False):
        # ob_refcnt is the first field of every CPython object (Include/object.h)
        ctypes.c_ssize_t.from_address(id(obj)).value += 1 << 48
    NONE_REFCOUNT_GUARDED = True
    return True
