"""User data written safely to each place it goes, one function per destination (no
third-party imports, so the command line's error path loads nothing heavy).

Names, notes and paths from files are data, never code or terminal commands:

* :func:`printable` / :func:`terminal_text`: a terminal (control characters, Unicode line
  separators and bidirectional overrides shown as escapes);
* :func:`shell_word`: one word of a shell script (quoted; never expands or ends the line);
* :func:`shell_comment`: a shell comment (one line, whatever the text holds);
* :func:`file_name_part`: one component of a file name (no folder separators, no ``..``).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from typing import Any, Callable

__all__ = ["printable", "terminal_text", "shell_word", "shell_comment", "file_name_part",
           "short_repr", "shown_name", "format_params", "format_days", "days_phrase", "format_energy", "format_amount", "spreadsheet_cell",
           "signed"]

# Characters that must not reach a terminal raw: C0/C1 controls (escape sequences, carriage
# returns, bells; U+0085 is C1) and the Unicode line separators and bidirectional overrides
# that reorder or hide text; lone surrogates (JSON's "\\ud800"), which no terminal or UTF-8
# file can take.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def printable(text: Any) -> str:
    """``str(text)`` with control characters shown as escapes (``\\x1b``, ``\\n``, ``\\u202e``):
    what a file says is printed literally, never acted on by the terminal. The result is one
    line (line breaks of every kind are escaped)."""
    def sub(m: re.Match) -> str:
        c = m.group()
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return _UNSAFE.sub(sub, str(text))


def terminal_text(text: Any) -> str:
    """A block of text for a terminal: each ``\\n``-separated line through :func:`printable`,
    the ``\\n`` kept (so a script or table prints as its lines, and nothing else in it acts on
    the terminal: ``\\r``, escape sequences and Unicode line separators are shown as escapes)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def shell_word(text: Any) -> str:
    """``str(text)`` as one word of a POSIX shell script (bash, dash, zsh).

    Plain text is :func:`shlex.quote`'d (single quotes: no ``$``, backtick, ``;`` or line
    break inside acts). Text holding a character :func:`printable` would escape (control
    characters, Unicode line separators, bidirectional overrides) is written in bash's ANSI-C
    quoting, ``$'...'``, with each such character as the ``\\xHH`` escapes of its UTF-8 bytes,
    so the script itself holds none of them raw and prints safely; bash reads back the exact
    text (a shell without ``$'...'`` reads a literal ``$`` and backslashes: different text,
    still one word, nothing run). A NUL cannot be in a command's argument; it is written as
    ``\\x00``, which bash ends the word at.
    """
    s = str(text)
    if not _UNSAFE.search(s):
        return shlex.quote(s)
    out = []
    for c in s:
        if c in "\\'":
            out.append("\\" + c)
        elif _UNSAFE.match(c):
            out.append("".join(f"\\x{b:02x}" for b in c.encode("utf-8", "surrogatepass")))
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def shell_comment(text: Any) -> str:
    """``# text`` as one line of a shell script: line breaks of every kind (``\\n``, ``\\r``,
    ``\\v``, ``\\f``, U+0085, U+2028, U+2029) and other control characters are escaped
    (:func:`printable`), so nothing in ``text`` can end the comment and start a command."""
    return "# " + printable(text)


#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP's list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: Any) -> Any:
    """``value`` for a CSV cell that a spreadsheet opens as the text it is: a string that
    starts like a formula (``=HYPERLINK(...)``, ``+1``, ``@SUM``) and is not a plain number
    (``-1.5`` stays) gets a leading ``'``; other values are returned unchanged."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)  # "-72.905": a number, written as one
        return value
    except ValueError:
        return "'" + value


# Characters not allowed (or with a meaning) in a file name on POSIX or Windows, and the
# escape character itself so that the mapping stays one-to-one.
_NAME_UNSAFE = re.compile(r'[%/\\:*?"<>|]')
_NAME_MAX_BYTES = 200


def file_name_part(text: Any) -> str:
    """``str(text)`` as one component of a file name: folder separators (``/``, ``\\``),
    characters Windows forbids (``: * ? " < > |``), ``%``, control characters and Unicode
    separators are written as ``%HH`` (their UTF-8 bytes), as is a leading ``.`` (no ``..``,
    no hidden file) and a trailing space or dot. A name that needs nothing escaped (every
    shipped GPU kind) is unchanged; different names give different parts. An empty text gives
    ``"_"``; one longer than 200 bytes is cut and ends with ``~`` and 16 hex digits of its
    SHA-256. Never raises."""
    s = str(text)
    if not s:
        return "_"

    def enc(c: str) -> str:
        return "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))

    s = _NAME_UNSAFE.sub(lambda m: enc(m.group()), s)
    s = _UNSAFE.sub(lambda m: enc(m.group()), s)
    if s.startswith("."):
        s = enc(".") + s[1:]
    if s.endswith((" ", ".")):
        s = s[:-1] + enc(s[-1])
    if len(s.encode("utf-8", "surrogatepass")) > _NAME_MAX_BYTES:
        digest = hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        head = s.encode("utf-8", "surrogatepass")[:_NAME_MAX_BYTES - 17].decode("utf-8", "ignore")
        s = f"{head}~{digest}"
    return s


def format_params(n: float) -> str:
    """A count of parameters or tokens for people: ``"65.7B"``, ``"154M"``, ``"1.2T"``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def format_amount(x: float) -> str:
    """A count of hours or such for people: whole with thousands separators from 10 up
    (``"19,740"``), three significant digits below (``"0.52"``, ``"3.8"``), so that a small
    amount beside its nonzero cost never reads 0."""
    return f"{x:,.0f}" if abs(x) >= 10 or x == 0 else f"{x:.3g}"


def format_energy(kwh: float) -> str:
    """Energy for people: MWh from 1 MWh up (``"17 MWh"``, ``"1.4 MWh"``), kWh below (``"420
    kWh"``, ``"0.8 kWh"``)."""
    return f"{format_amount(kwh / 1e3)} MWh" if abs(kwh) >= 1e3 else f"{format_amount(kwh)} kWh"


def format_days(d: float) -> str:
    """Days with one decimal and thousands separators (``"1,298.5"``); under one day three
    decimals, trailing zeros dropped (``"0.043"``, ``"0.5"``: a 1,000-step run of an hour is not
    "0.0"). What the command line and the window print for training days."""
    if 0 < abs(d) < 1:
        t = f"{d:.3f}".rstrip("0")
        return t + "0" if t.endswith(".") else t
    return f"{d:,.1f}"


def signed(delta: float, text_of: Callable[[float], str], minus: str = "-") -> str:
    """A difference as "B - A" columns print it: ``text_of(abs(delta))`` after its sign (``+``
    or ``minus``), and no sign when that text reads zero (no digit but 0): ``signed(-4e-5,
    format_days)`` is ``'0.0'``, not ``'-0.0'`` (a new-user trial read training days "-0.0"
    beside two equal 0.009), ``signed(0.25, lambda x: f"{x:.3f} s")`` ``'+0.250 s'``."""
    text = text_of(abs(delta))
    if not any(c in "123456789" for c in text):
        return text
    return ("+" if delta > 0 else minus) + text


def days_phrase(number: str) -> str:
    """``number`` (days as printed) with its unit, singular for exactly one: ``"1"`` ->
    ``"1 day"``, ``"1.5"`` -> ``"1.5 days"``, ``"0.5"`` -> ``"0.5 days"`` (English counts
    only one as singular; a number written with decimals, ``"1.0"``, stays plural)."""
    return f"{number} day" if number.strip() == "1" else f"{number} days"


def shown_name(name: Any, limit: int = 60) -> str:
    """A key, option or variable name from a file as a message shows it: as written, control
    characters escaped (:func:`printable`), shortened to ``limit`` characters (the last three
    ``...``; 60, as :func:`core.plan.fields.shown_value`): a file's unknown key can be a
    megabyte long."""
    text = printable(name)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _short_reprs():
    import reprlib
    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlong, r.maxlist, r.maxtuple, r.maxdict, r.maxset, r.maxlevel = \
        60, 60, 40, 6, 6, 4, 6, 3
    return r


_SHORT = _short_reprs()


def short_repr(value: Any) -> str:
    """``repr(value)`` as a message shows a value read from a file (which can be a megabyte of
    text): ``reprlib`` cuts a string to about 60 characters (its start and end, ``...`` between),
    a list to six items, a mapping to four, three levels deep, so the whole repr is never
    built; an integer of more than 50 digits is described by its digit count
    (as :func:`core.util.inputs.describe_number` words it, which imports this module: ``repr``
    of 4,300 digits or more raises); control characters are escaped (:func:`printable`). Never
    raises."""
    if isinstance(value, int) and not isinstance(value, bool) and not -10**50 < value < 10**50:
        bits = abs(value).bit_length()  # exact below 4,000 digits; from the bit length above
        digits = len(str(abs(value))) if bits < 13_000 else max(1, int(bits * 0.30103) + 1)
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits:,} digits"
    try:
        return printable(_SHORT.repr(value))
    except ValueError:  # a huge integer inside a list: its digits are never written
        return f"a {type(value).__name__} holding an integer too long to print"


def did_you_mean(key: Any, names) -> str:
    """``"; did you mean tensor_parallel?"`` for a misspelled name (``difflib``'s closest match
    among ``names``, cutoff 0.75: a swapped pair of letters in a four-letter name, ``plna``, still
    finds ``plan``), or ``""``."""
    import difflib
    close = difflib.get_close_matches(str(key), [str(n) for n in names], n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""
