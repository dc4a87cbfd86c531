"""A spin box for whole numbers of any size the core accepts (``QSpinBox`` stops at 2^31 - 1).

:class:`IntSpinBox` keeps its value as a Python ``int`` and offers the part of
``QSpinBox``'s interface the forms use (range, suffix, special value text,
group separators, ``valueChanged``), so a 2^31 vocabulary or a 2^40 token
count is shown as it is, not refused with ``OverflowError`` half-way through
showing a file. Nothing it does grows with the value: parsing and formatting
are linear in the number of digits, which the validator bounds.
"""

from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets
from PySide6.QtCore import Signal, Slot

__all__ = ["IntSpinBox", "INT64_MAX"]

#: Largest value an :class:`IntSpinBox` holds by default (the largest signed 64-bit integer,
#: what numpy's int64 arrays of the core can hold).
INT64_MAX = 2**63 - 1

#: Characters accepted (and ignored) between digits: group separators as people type them.
_SEPARATORS = (",", "_", " ", "\u202f", "\u00a0", "'")


class IntSpinBox(QtWidgets.QAbstractSpinBox):
    """Whole-number field from ``minimum()`` to ``maximum()`` (Python ints, 64-bit by default).

    Like ``QSpinBox`` with keyboard tracking: every keystroke that leaves a
    number in range sets the value and emits :attr:`valueChanged`. Text that
    is not a whole number is refused as typed; an empty field is allowed while
    editing and shows the value again when editing ends. At the minimum the
    special value text (if any) is shown instead of the number.

    Signals
    -------
    valueChanged(object)
        The new value (a Python ``int``; ``object`` because it may exceed 32 bits).
    """

    valueChanged = Signal(object)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._min = 0
        self._max = INT64_MAX
        self._value = 0
        self._suffix = ""
        self._special = ""
        self._group = False
        self._units: tuple[str, str] | None = None
        self.lineEdit().textEdited.connect(self._on_text_edit)
        self.editingFinished.connect(self._on_editing_finish)
        self._show_value()

    # ------------------------------------------------------------------ QSpinBox-like API
    def value(self) -> int:
        """The value (a Python ``int``)."""
        return self._value

    def setValue(self, value: int) -> None:  # noqa: N802 - Qt naming
        """Set the value, clamped to the range as ``QSpinBox`` does; emits on a change.

        Raises
        ------
        TypeError
            ``value`` is not an integer (a bool counts as not one).
        """
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                import numpy as np
                if isinstance(value, np.integer):
                    value = int(value)
                else:
                    raise TypeError
            except TypeError:
                raise TypeError(f"IntSpinBox.setValue needs an int, got {value!r}") from None
        value = min(max(int(value), self._min), self._max)
        changed = value != self._value
        self._value = value
        if self._units is not None:
            self._suffix = self._units[0] if value == 1 else self._units[1]
        self._show_value()
        if changed:
            self.valueChanged.emit(value)

    def minimum(self) -> int:
        return self._min

    def maximum(self) -> int:
        return self._max

    def setRange(self, minimum: int, maximum: int) -> None:  # noqa: N802
        """Values from ``minimum`` to ``maximum`` inclusive; the value is clamped into them."""
        self._min, self._max = int(minimum), max(int(minimum), int(maximum))
        self.updateGeometry()
        self.setValue(self._value)

    def setMinimum(self, minimum: int) -> None:  # noqa: N802
        self.setRange(minimum, max(minimum, self._max))

    def setMaximum(self, maximum: int) -> None:  # noqa: N802
        self.setRange(min(self._min, maximum), maximum)

    def suffix(self) -> str:
        return self._suffix

    def setUnits(self, singular: str, plural: str) -> None:  # noqa: N802
        """A unit after the number, singular for 1 (``" GPU"``) and plural otherwise."""
        self._units = (singular, plural)
        self.setSuffix(singular if self._value == 1 else plural)

    def setSuffix(self, suffix: str) -> None:  # noqa: N802
        """Show ``suffix`` after the number; the number as typed so far is left as it is."""
        if suffix == self._suffix:
            return
        edit = self.lineEdit()
        text, cursor = edit.text(), edit.cursorPosition()
        if self._special and text == self._special:
            self._suffix = suffix
        else:
            number = text[: -len(self._suffix)] if self._suffix and text.endswith(self._suffix) \
                else text
            self._suffix = suffix
            edit.setText(number + suffix)
            edit.setCursorPosition(min(cursor, len(number)))
        self.updateGeometry()

    def setSpecialValueText(self, text: str) -> None:  # noqa: N802
        self._special = text
        self._show_value()
        self.updateGeometry()

    def specialValueText(self) -> str:  # noqa: N802
        return self._special

    def setGroupSeparatorShown(self, shown: bool) -> None:  # noqa: N802
        self._group = bool(shown)
        self._show_value()

    def isGroupSeparatorShown(self) -> bool:  # noqa: N802
        return self._group

    def textFromValue(self, value: int) -> str:  # noqa: N802
        """The number as shown, without the suffix (group separators when shown)."""
        return f"{value:,}" if self._group else str(value)

    def valueFromText(self, text: str) -> int | None:  # noqa: N802
        """The number in ``text`` (suffix, group separators and spaces ignored), or None."""
        core = self._strip(text)
        if self._special and text.strip() == self._special:
            return self._min
        if not core or not (core.isdigit() or (core[0] == "-" and core[1:].isdigit())):
            return None
        if len(core) > 40:  # far beyond 64 bits: never convert an arbitrarily long string
            return None
        return int(core)

    # ------------------------------------------------------------------ QAbstractSpinBox
    def validate(self, text: str, pos: int) -> object:
        """Acceptable: a number in range or the special text; Intermediate: empty or below the
        minimum while typing; Invalid: anything else (the keystroke is refused)."""
        state = QtGui.QValidator.State
        if self._special and text.strip() == self._special:
            return state.Acceptable, text, pos
        core = self._strip(text)
        if core in ("", "-") and (core == "" or self._min < 0):
            return state.Intermediate, text, pos
        value = self.valueFromText(text)
        if value is None or value > self._max:
            return state.Invalid, text, pos
        if value < self._min:
            return state.Intermediate, text, pos
        return state.Acceptable, text, pos

    def fixup(self, text: str) -> str:
        return self._full_text(self._value)

    def stepBy(self, steps: int) -> None:  # noqa: N802
        self.setValue(self._value + int(steps))
        self.selectAll()

    def stepEnabled(self) -> QtWidgets.QAbstractSpinBox.StepEnabledFlag:  # noqa: N802
        flag = QtWidgets.QAbstractSpinBox.StepEnabledFlag
        if self.isReadOnly():
            return flag.StepNone
        out = flag.StepNone
        if self._value < self._max:
            out |= flag.StepUpEnabled
        if self._value > self._min:
            out |= flag.StepDownEnabled
        return out

    def sizeHint(self) -> QtCore.QSize:  # noqa: N802
        """As wide as a ten-digit number with its suffix (or the special text), like QSpinBox's
        hint for a 32-bit range; as high as a QSpinBox (QAbstractSpinBox::sizeHint's rule)."""
        fm = self.fontMetrics()
        sample = self.textFromValue(min(self._max, 9_999_999_999)) + self._suffix
        width = max(fm.horizontalAdvance(sample), fm.horizontalAdvance(self._special)) + 2 + 1
        opt = QtWidgets.QStyleOptionSpinBox()
        self.initStyleOption(opt)
        size = QtCore.QSize(width, self.lineEdit().sizeHint().height())
        return self.style().sizeFromContents(QtWidgets.QStyle.ContentsType.CT_SpinBox, opt, size,
                                             self)

    def minimumSizeHint(self) -> QtCore.QSize:  # noqa: N802
        return self.sizeHint()

    # ------------------------------------------------------------------ internals
    def _strip(self, text: str) -> str:
        if self._suffix and text.endswith(self._suffix):
            text = text[: -len(self._suffix)]
        elif self._suffix and text.endswith(self._suffix.strip()):
            text = text[: -len(self._suffix.strip())]
        for sep in _SEPARATORS:
            text = text.replace(sep, "")
        return text.strip()

    def _full_text(self, value: int) -> str:
        if self._special and value == self._min:
            return self._special
        return self.textFromValue(value) + self._suffix

    def _show_value(self) -> None:
        self.lineEdit().setText(self._full_text(self._value))

    @Slot(str)
    def _on_text_edit(self, text: str) -> None:
        if not self.keyboardTracking():
            return  # the value is taken when editing ends
        value = self.valueFromText(text)
        if value is None:
            return
        if self._suffix and not text.endswith(self._suffix) and text.strip() != self._special:
            edit = self.lineEdit()  # typed over the whole text: put the unit back after the number
            cursor = edit.cursorPosition()
            edit.setText(text + self._suffix)
            edit.setCursorPosition(min(cursor, len(text)))
        if not self._min <= value <= self._max or value == self._value:
            return
        self._value = value
        self._apply_units()
        self.valueChanged.emit(value)

    def _apply_units(self) -> None:
        """The suffix for the value, when singular and plural units are set (signals or not)."""
        if self._units is not None:
            self.setSuffix(self._units[0] if self._value == 1 else self._units[1])

    @Slot()
    def _on_editing_finish(self) -> None:
        value = self.valueFromText(self.lineEdit().text())
        if value is not None and self._min <= value <= self._max and value != self._value:
            self._value = value
            self._apply_units()
            self.valueChanged.emit(value)
        self._show_value()
