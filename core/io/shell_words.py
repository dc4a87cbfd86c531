"""Bash's quoting and lexing for the launch-script reader: statements and words, nothing
expanded and nothing run.

What belongs here: splitting a script into statements (:func:`statements`: line
continuations, quotes, arrays and here-documents spanning lines, bounded by
:data:`MAX_STATEMENT_BYTES` and :data:`MAX_STATEMENT_LINES`), the quoting state of a text
(:func:`quote_state`), and splitting one statement into words and operators (:func:`lex`),
each word a list of :class:`Part` (literal text, a parameter, an arithmetic expansion, a
command substitution; quoted or not). Expanding the words is :mod:`core.io.shell_reader`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ShellError", "MAX_STATEMENT_BYTES", "MAX_STATEMENT_LINES", "statements",
           "missing_variable", "quote_state", "head", "lex", "Part", "Word", "REDIRECTIONS", "SEPARATORS", "NAME",
           "ASSIGNMENT", "PARAMETER"]


class ShellError(ValueError):
    """A script cannot be read within the bounds; the message names the source and statement."""

#: Bounds of one statement (a launch script is a few KB): beyond them the script is refused.
MAX_STATEMENT_BYTES = 64 * 2**10  # one statement, as written or expanded
MAX_STATEMENT_LINES = 1_000  # physical lines of one statement (an unclosed quote or array)


def _open_array(buf: str) -> bool:
    """True while ``buf`` holds a bash array assignment ``NAME=( ...`` (or ``NAME+=( ...``)
    not closed yet."""
    m = re.search(r"(^|[\s;])[A-Za-z_][A-Za-z0-9_]*\+?=\(", buf)
    if not m:
        return False
    tail = re.sub(r"\$\(\(.*?\)\)", "", buf[m.end():])  # arithmetic
    tail = re.sub(r"'[^']*'|\"(?:\\.|[^\"\\])*\"", "", tail)  # quoted words
    tail = re.sub(r"(^|\s)#[^\n]*", "", tail)  # comments
    return tail.count(")") < 1 + tail.count("(")


#: Where the next character that changes the quoting state may be, in each state of
#: :func:`quote_state` (None: outside quotes).
_QUOTING = {None: re.compile(r"['\"\\#]"), "'": re.compile("'"), '"': re.compile(r'["\\]')}


def quote_state(text: str, state: str | None = None) -> str | None:
    """The quoting state at the end of ``text`` as :func:`shlex.split` (POSIX, comments) reads
    it, starting in ``state``: None when every quote is closed, ``"'"`` or ``'"'`` inside
    one, ``"\\"`` or ``'"\\'`` after a backslash that ends the text (outside or inside
    double quotes). ``shlex.split`` raises exactly when the state at the end is not None.

    Linear in ``len(text)`` and resumable where a line ends (the state of ``a + b``, ``b``
    starting with a newline, is that of ``b`` started in the state of ``a``), so a statement
    of many lines is scanned once, not once per line.
    """
    i, n = 0, len(text)
    if state in ("\\", '"\\'):  # the escaped character
        if n == 0:
            return state
        i, state = 1, (None if state == "\\" else '"')
    while True:
        m = _QUOTING[state].search(text, i)
        if m is None:
            return state
        c, i = m.group(), m.end()
        if state is None and c == "#":  # a comment, to the end of the line
            end = text.find("\n", i)
            if end < 0:
                return None
            i = end + 1
        elif c == "\\":
            if i >= n:
                return "\\" if state is None else '"\\'
            i += 1
        elif state is None:
            state = c
        else:  # the closing quote
            state = None


def head(stmt: str) -> str:
    """The start of a statement, as messages quote it."""
    text = " ".join(stmt.split())
    return repr(text if len(text) <= 40 else text[:37] + "...")


_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)(?P<word>[A-Za-z_][A-Za-z0-9_]*)\1")


def statements(text: str, source: str = "arguments") -> list[str]:
    """Logical statements: continuation lines joined, multi-line quotes and arrays kept whole.

    A line continues on the next where it ends in a backslash outside single quotes and
    outside a comment, as bash reads it: ``#   --fp16 \\`` (a flag commented out in a
    continued command) is a comment to the end of its line, so the command ends there and the
    next line is a statement of its own. The backslash and newline are read as one space.

    Raises ShellError (naming ``source`` and the statement) for a statement longer than
    :data:`MAX_STATEMENT_BYTES` or :data:`MAX_STATEMENT_LINES` (an unclosed quote or array).
    """
    out: list[str] = []
    buf, state, lines = "", None, 0
    joined = False  # the line before ended in a continuation backslash
    heredoc = None  # the word that ends a here-document being skipped
    for line in text.splitlines():
        if heredoc is not None:
            if line.strip() == heredoc:
                heredoc = None
            continue
        if state is None and (joined or not lines):
            m = _HEREDOC.search(line)
            if m:  # a here-document's body is data for a command, not statements
                heredoc = m.group("word")
        if joined:  # bash drops the backslash and newline; a space keeps the words apart
            state = quote_state(line, state)
            buf = f"{buf} {line}"
        else:
            state = quote_state(f"\n{line}" if lines else line, state)
            buf = f"{buf}\n{line}" if lines else line
        lines += 1
        if len(buf) > MAX_STATEMENT_BYTES or lines > MAX_STATEMENT_LINES:
            raise ShellError(
                f"{source}: statement {head(buf)} is longer than {MAX_STATEMENT_BYTES // 1024} "
                f"KiB or {MAX_STATEMENT_LINES:,} lines, more than a launch can mean (an unclosed "
                "quote or array?)")
        joined = state in ("\\", '"\\')
        if joined:  # a continuation: outside quotes or inside double quotes
            buf = buf[:-1]
            state = None if state == "\\" else '"'
            continue
        if state is not None:  # an open quotation: the statement goes on
            continue
        if _open_array(buf):
            continue
        out.append(buf)
        buf, lines = "", 0
    if lines:
        out.append(buf)
    return out


#: Operators of a statement, longest first.
_OPERATORS = ("<<<", "&&", "||", ";;", "|&", "<<", ">>", ">&", "<&", "&>", ";", "&", "|", "(",
              ")", "<", ">")
REDIRECTIONS = {"<<<", "<<", ">>", ">&", "<&", "&>", "<", ">"}
SEPARATORS = {";", "&", "&&", "||", "|", "|&", ";;"}
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>\+?=)")
PARAMETER = re.compile(r"(?P<length>#)?(?P<name>[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])"
                        r"(?:\[(?P<index>[^\]]*)\])?(?:(?P<op>:?[-=+?])(?P<word>.*))?", re.S)


@dataclass
class Part:
    """A piece of a word: ``lit`` (text), ``param`` (inside ``${}`` or after ``$``), ``arith``
    (inside ``$((...))``) or ``cmd`` (a command substitution, never run)."""

    kind: str
    text: str
    quoted: bool


@dataclass
class Word:
    parts: list[Part]
    raw: str = ""  # as written

    def literal(self) -> str | None:
        """The word's text when it is unquoted literal text only (a keyword, an assignment's
        name), else None."""
        if all(p.kind == "lit" and not p.quoted for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None


def _closing(text: str, i: int, open_: str, close: str) -> int:
    """Index just after the ``close`` that balances the ``open_`` at ``text[i]`` (quotes are
    skipped); raises ShellError when there is none."""
    depth, n, quote = 0, len(text), None
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ShellError(f"an unclosed {open_!r}")


def _backtick(text: str, i: int, quoted: bool) -> tuple[Part, int]:
    """The command substitution `` `...` `` starting at ``text[i]`` (to the end of the text
    when unclosed) and the index after it."""
    j = text.find("`", i + 1)
    j = len(text) - 1 if j < 0 else j
    return Part("cmd", text[i:j + 1], quoted), j + 1


def _dollar(text: str, i: int, quoted: bool) -> tuple[Part, int]:
    """The expansion that starts with the ``$`` at ``text[i]`` and the index after it."""
    nxt = text[i + 1:i + 2]
    if text.startswith("$((", i):
        end = _closing(text, i + 1, "(", ")")
        inner = text[i + 2:end - 1]
        if inner.startswith("(") and inner.endswith(")"):
            return Part("arith", inner[1:-1], quoted), end
        return Part("cmd", text[i:end], quoted), end
    if nxt == "(":
        end = _closing(text, i + 1, "(", ")")
        return Part("cmd", text[i:end], quoted), end
    if nxt == "{":
        end = _closing(text, i + 1, "{", "}")
        return Part("param", text[i + 2:end - 1], quoted), end
    m = NAME.match(text, i + 1)
    if m:
        return Part("name", m.group(), quoted), m.end()
    if nxt and nxt in "0123456789@*#?$!-":
        return Part("name", nxt, quoted), i + 2
    return Part("lit", "$", quoted), i + 1


def lex(text: str, spaces_literal: bool = False) -> list[Word | str]:
    """Words and operators of a statement (bash's quoting: ``'...'``, ``"..."`` with
    expansions inside, backslashes, ``#`` comments). With ``spaces_literal`` (the word of a
    ``${NAME:-word}``) blanks and operators are text."""
    out: list[Word | str] = []
    parts: list[Part] | None = None
    i, n = 0, len(text)
    start = 0

    def add(part: Part, at: int | None = None) -> None:
        nonlocal parts, start
        if parts is None:  # the word starts here (at ``at`` for an expansion read already)
            parts, start = [], i if at is None else at
        if part.kind == "lit" and parts and parts[-1].kind == "lit" and \
                parts[-1].quoted == part.quoted:
            parts[-1] = Part("lit", parts[-1].text + part.text, part.quoted)
        else:
            parts.append(part)

    def end() -> None:
        nonlocal parts
        if parts is not None:
            out.append(Word(parts, text[start:i]))
        parts = None

    while i < n:
        c = text[i]
        if c in " \t\r\n" and not spaces_literal:
            end()
            i += 1
        elif c == "#" and parts is None and not spaces_literal:
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == "\\":
            if text[i + 1:i + 2] == "\n":
                i += 2
                continue
            add(Part("lit", text[i + 1:i + 2], True))
            i += 2
        elif c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise ShellError("an unclosed quote")
            add(Part("lit", text[i + 1:j], True))
            i = j + 1
        elif c == '"':
            add(Part("lit", "", True))
            i += 1
            while True:
                if i >= n:
                    raise ShellError("an unclosed quote")
                c = text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and text[i + 1:i + 2] in ('$', '`', '"', "\\", "\n"):
                    if text[i + 1] != "\n":
                        add(Part("lit", text[i + 1], True))
                    i += 2
                elif c == "$":
                    part, i = _dollar(text, i, True)
                    add(part)
                elif c == "`":
                    part, i = _backtick(text, i, True)
                    add(part)
                else:
                    add(Part("lit", c, True))
                    i += 1
        elif c == "$":
            part, j = _dollar(text, i, False)
            add(part, i)
            i = j
        elif c == "`":
            part, j = _backtick(text, i, False)
            add(part, i)
            i = j
        elif c in ";&|()<>" and not spaces_literal:
            if c in "<>" and parts is not None and Word(parts).literal() is not None and \
                    (Word(parts).literal() or "x").isdigit():
                parts = None  # the file descriptor of a redirection (2>&1)
            end()
            op = next(o for o in _OPERATORS if text.startswith(o, i))
            out.append(op)
            i += len(op)
        else:
            add(Part("lit", c, False))
            i += 1
    end()
    return out


def missing_variable(word: str) -> str | None:
    """The variable an unexpanded word names (``$NNODES``, ``${1}`` -> ``NNODES``, ``1``), or
    None when the word holds no ``$`` reference."""
    m = re.search(r"\$\{?#?([A-Za-z_][A-Za-z0-9_]*|[0-9]+)", word)
    return m.group(1) if m else None
