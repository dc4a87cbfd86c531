"""The state of one walk over a launch's arguments, and the value readers it uses.

What belongs here: :class:`Mapper`, which the mapping functions of :mod:`.model_arguments`,
:mod:`.plan_arguments` and :mod:`.to_session` share: the parsed arguments, the session fields
set so far (by section), the refusals collected (every refused argument is named at once),
the arguments taken, and what the import lists as ignored or notes; and the readers of one
argument's value (:func:`one_value`, :func:`int_argument`, :func:`float_argument`), which
raise :class:`~core.io.megatron.arguments.MegatronArgsError` naming the file and the flag.
"""

from __future__ import annotations

from typing import Any

from core.io.megatron.arguments import SECTIONS, MegatronArgsError, field_exists
from core.io.megatron.launch import unset_message
from core.util.text import short_repr, shown_name

__all__ = ["Mapper", "one_value", "int_argument", "megatron_int", "float_argument"]


def one_value(args: dict[str, list[str]], flag: str, source: str) -> str | None:
    """The one value of ``flag`` (None when absent).

    Raises
    ------
    MegatronArgsError
        ``flag`` is given with no value or with several.
    """
    if flag not in args:
        return None
    values = args[flag]
    if len(values) != 1:
        raise MegatronArgsError(f"{source}: {flag} takes one value, got "
                                f"{shown_name(' '.join(values)) if values else 'none'}")
    return values[0]


def int_argument(args: dict[str, list[str]], flag: str, source: str, minimum: int = 1
                 ) -> int | None:
    """The count ``flag`` gives (None when absent).

    Raises
    ------
    MegatronArgsError
        Not an integer (:func:`megatron_int`), or below ``minimum``.
    """
    v = one_value(args, flag, source)
    if v is None:
        return None
    n = megatron_int(v, flag, source)
    if n < minimum:
        raise MegatronArgsError(f"{source}: {flag} {n} must be at least {minimum}")
    return n


def megatron_int(text: str, flag: str, source: str) -> int:
    """The integer Megatron-LM's argparse reads from ``text`` for an argument of ``type=int``:
    Python's ``int()`` of the word (``int('1_000')``, ``int('+8')``, ``int(' 8')`` are 1000,
    8, 8, as Megatron-LM takes them; ``int('0x10')``, ``int('8.0')`` raise, and argparse
    refuses them: "invalid int value"), of at most 18 digits.

    Raises
    ------
    MegatronArgsError
        An unset variable (named, with ``--var``), a word ``int()`` refuses, or more than 18
        digits (no count of a launch has them).
    """
    if "$" in text:
        raise MegatronArgsError(unset_message(source, flag, text))
    digits = text.strip().replace("_", "").lstrip("+-")
    if digits.isdigit() and len(digits.lstrip("0")) > 18:  # int() of 4,300 digits raises
        raise MegatronArgsError(f"{source}: {flag} {short_repr(text)} ({len(digits):,} digits) "
                                "is beyond any count a launch can mean (at most 18 digits)")
    try:
        return int(text)
    except ValueError:
        raise MegatronArgsError(f"{source}: {flag} {short_repr(text)} must be a positive integer"
                                + (" (an elastic range is not a plan)" if ":" in text else "")
                                ) from None


def float_argument(args: dict[str, list[str]], flag: str, source: str) -> float | None:
    """The finite number ``flag`` gives (None when absent).

    Raises
    ------
    MegatronArgsError
        An unset variable (named), or not a finite number.
    """
    v = one_value(args, flag, source)
    if v is None:
        return None
    if "$" in v:
        raise MegatronArgsError(unset_message(source, flag, v))
    try:
        x = float(v)
    except ValueError:
        x = float("nan")
    if x != x or x in (float("inf"), float("-inf")):
        raise MegatronArgsError(f"{source}: {flag} {short_repr(v)} must be a finite number")
    return x


class Mapper:
    """Collects the session's fields and the refusals while walking the arguments.

    Attributes
    ----------
    args : dict of str to list of str
        The launch's arguments (:func:`~core.io.megatron.launch.parse_arguments`).
    source : str
        The file, for messages.
    values : dict of str to dict
        ``section -> {field: value}`` set so far (sections of
        :data:`~core.io.megatron.arguments.SECTIONS`).
    refused : list of str
        ``"--flag: why"`` of every refused argument (raised together at the end).
    used : set of str
        The arguments a mapping function has read (the others are listed as ignored or
        neutral).
    ignored : list of (str, str)
        Arguments read but not modelled, with why (listed first among the ignored).
    notes : list of (str, str)
        ``(about, note)``: how an argument whose meaning needs saying was read.
    at_default : list of str
        Refused arguments given at Megatron-LM's default (no effect: listed as not used).
    fields : dict of str to list of str
        Each argument of the launch that set a session field (:meth:`set`) or that the
        mapping read for what it decides (:meth:`record`) -> those fields, in the order set:
        the import's *used* list.
    """

    def __init__(self, source: str, args: dict[str, list[str]] | None = None):
        self.source = source
        self.args = args if args is not None else {}
        self.values: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        self.refused: list[str] = []
        self.used: set[str] = set()
        self.ignored: list[tuple[str, str]] = []
        self.notes: list[tuple[str, str]] = []
        self.at_default: list[str] = []
        self.fields: dict[str, list[str]] = {}
        #: the --tokenizer-model file's size for Llama2Tokenizer, given to the import
        self.tokenizer_vocab_size: int | None = None

    def set(self, flag: str, target: str, value: Any, check_value: bool = True) -> None:
        """Set ``target`` (``section.field``) to ``value``, or refuse ``flag`` when this
        version has no such field (or, with ``check_value``, no such choice)."""
        if not field_exists(target):
            self.refused.append(f"{flag}: not modelled yet ({target} is not a field of this "
                                "version of vtrain)")
        elif check_value and not field_exists(target, value):
            self.refused.append(f"{flag}: not modelled yet ({target} {short_repr(value)} is not one of "
                                "this version's choices)")
        else:
            section, name = target.split(".", 1)
            self.values[section][name] = value
            self.record(flag, target)

    def record(self, flag: str, what: str) -> None:
        """Mark ``flag`` read and list it as used for ``what`` (a session field, or what it
        decided), when the launch gives it (a default the walk sets is not the launch's)."""
        if flag not in self.args:
            return
        self.used.add(flag)
        seen = self.fields.setdefault(flag, [])
        if what not in seen:
            seen.append(what)

    def refuse(self, flag: str, why: str) -> None:
        """Refuse ``flag`` (named with ``why`` when the walk ends)."""
        self.refused.append(f"{flag}: {why}")

    def take(self, flag: str) -> bool:
        """Mark ``flag`` read; whether the launch gives it."""
        self.used.add(flag)
        return flag in self.args

    def switch(self, flag: str) -> bool:
        """Mark the switch ``flag`` read; whether the launch gives it.

        Raises
        ------
        MegatronArgsError
            The switch is given a value.
        """
        if self.take(flag) and self.args[flag]:
            raise MegatronArgsError(f"{self.source}: {flag} is a switch and takes no value, got "
                                    f"{shown_name(' '.join(self.args[flag]))}")
        return flag in self.args
