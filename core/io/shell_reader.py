"""A bounded reader of bash launch scripts: it expands, it never executes.

:func:`read_shell` reads a launch script statement by statement as bash would expand it,
and returns the simple commands it would run, their words expanded, with nothing run:

* assignments ``NAME=value``, ``NAME+=value``, ``export``/``declare``/``local``/``readonly``,
  bash arrays ``NAME=( ... )`` and ``NAME+=( ... )``, ``unset``;
* ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``, ``${NAME:=default}``
  (assigns), ``${NAME:+alternative}``, ``${#NAME}``, ``${ARRAY[@]}``, ``${ARRAY[*]}``,
  ``${ARRAY[i]}``, positional parameters ``$1 ${2:-x} $@ $* $#`` and ``shift``, integer
  ``$((...))`` as bash evaluates it (:func:`core.io.shell_values.arith`); unquoted expansions are split into words, quoted ones are not, as bash does;
* ``if``/``elif``/``else``/``fi`` whose conditions are string or integer tests of known values
  (``[[ "$DTYPE" == fp8 ]]``, ``[ -z "$X" ]``, ``-eq`` ...): only the branch bash would take is
  read. A condition that needs the machine (``[ -f path ]``, a command's status) is not
  evaluated: its branches are read in order, and the reader says so (:attr:`Shell.notes`);
* ``case WORD in ... esac`` (patterns ``a|b)``, ``(a)``, ``*``, ``?``, ``[...]``, quoted parts
  literal): on a known word only the branch bash takes is read; on a word that is not known
  every branch is read in order and noted, as an undecided ``if``. Fall-throughs ``;&``
  ``;;&``, a pattern or ``in`` on another line, and an unclosed case are refused by name;
* and-or lists ``[ -z "$TP" ] && TP=2``, ``[ -n "$PP" ] || PP=1``, ``A | B``, with ``{ ...; }``
  groups: a command after ``&&``/``||`` is read when bash runs it, its list's status known (a
  test of known values, ``true``/``false``, an assignment without ``$(...)``), and skipped
  when bash skips it; after a status that is not known (a command's) it is read, and noted
  when it changes a variable or runs a command other than ``echo``, ``exit`` and the like;
* functions ``NAME() { ... }``, ``function NAME { ... }``: the body is kept and read where the
  function is called, ``$1 $2 ...`` its arguments, ``local`` values put back after it,
  ``return`` followed; a function that is never called changes nothing. A body other than
  ``{ ... }``, calls nested more than :data:`MAX_NESTING` deep and an unclosed body are
  refused;
* loops ``for NAME in WORDS; do ... done`` (``for NAME``: over ``$@``; the brace expansions
  ``{1..8}``, ``{0..6..2}``, ``{a,b}``), ``while``/``until`` on tests of known values, with
  ``break [N]`` and ``continue``: read once per pass as bash runs them; words or a condition
  that are not known read the body once, noted; more than :data:`MAX_LOOP_ITERATIONS` passes
  are refused. ``select``, C-style ``for ((...))`` and the arithmetic command ``((...))`` are
  refused by name;
* ``exit`` bash certainly reaches ends the reading (:attr:`Shell.exited`); subshells
  ``( ... )`` and ``bash -c`` keep their variables and their ``exit`` to themselves;
* ``eval WORDS`` and ``bash -c STRING`` / ``sh -c STRING`` are read as the statement they hold
  (nested at most :data:`MAX_NESTING` deep); here-documents are skipped. An ``if``, ``case``,
  group, subshell, loop or function left open at the end is refused, as bash refuses it.

Command substitutions ``$(...)`` and backquotes are never run: a variable assigned from one is
unknown, like a variable neither the script nor the caller sets. An unknown value stays in the
words as written (``$NNODES``), so that whoever needs it names the variable
(:func:`missing_variable`); the caller may give values (``variables``, the environment and
positional parameters ``"1"``, ``"2"`` ...), which an assignment the reader cannot evaluate
leaves in place.

Bounds (a launch script is a few KB; no input may make the reader run for long): the text at
most :data:`MAX_LAUNCH_BYTES`; one statement at most
:data:`core.io.shell_words.MAX_STATEMENT_BYTES` and
:data:`~core.io.shell_words.MAX_STATEMENT_LINES` lines as written, and
:data:`~core.io.shell_words.MAX_STATEMENT_BYTES` once expanded
(counted while expanding, so ``A=$A$A`` twenty times is refused at the thirteenth); all
statements together at most :data:`MAX_LAUNCH_BYTES` expanded; ``$((...))`` at most
:data:`core.io.shell_values.MAX_ARITH_TOKENS` terms, every value inside bash's 64-bit range.
Beyond a bound :class:`core.io.shell_words.ShellError` names the source and the statement. Statements and
words are split by :mod:`core.io.shell_words`; arithmetic, tests and patterns are evaluated
by :mod:`core.io.shell_values`; case, functions, loops and subshells are read by
:mod:`core.io.shell_compound`.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from core.io.shell_compound import (MAX_LAUNCH_BYTES, MAX_LOOP_ITERATIONS, MAX_NESTING,
                                    CompoundCommands, Break, Call, Definition, Exit, Frame,
                                    Refused, ReturnFromFunction, Unknown)
from core.io.shell_values import BashArithmeticError, Unbounded, arith, compare
from core.io.shell_words import (ASSIGNMENT, MAX_STATEMENT_BYTES, NAME, PARAMETER, REDIRECTIONS,
                                 SEPARATORS, Part, ShellError, Word, head, lex,
                                 missing_variable, statements)

__all__ = ["Shell", "read_shell", "missing_variable", "MAX_LAUNCH_BYTES", "MAX_NESTING",
           "MAX_LOOP_ITERATIONS"]


# --------------------------------------------------------------------------- expansion

class _Budget:
    """Bytes an expansion may still produce (one statement's, and the script's)."""

    def __init__(self, total: list[int]):
        self.left = MAX_STATEMENT_BYTES
        self.total = total

    def spend(self, value: str) -> str:
        self.left -= len(value)
        self.total[0] -= len(value)
        if self.left < 0:
            raise Unbounded(f"expands to more than {MAX_STATEMENT_BYTES // 1024} KiB, more "
                             "than a launch's statement can mean")
        if self.total[0] < 0:
            raise Unbounded(f"the script expands to more than {MAX_LAUNCH_BYTES // 2**20} MiB, "
                             "more than a launch can mean")
        return value


#: ``${NAME OP WORD}`` forms :meth:`Shell._operation` evaluates: ``:`` substring / slice,
#: ``,,`` ``^^`` ``,`` ``^`` case changes, ``#`` ``##`` ``%`` ``%%`` prefix and suffix removal,
#: ``/`` ``//`` ``/#`` ``/%`` substitution.
_OPERATION = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])(?:\[(?P<index>[^\]]*)\])?"
                        r"(?P<op>,,|\^\^|,|\^|##|#|%%|%|//|/|:)(?P<word>.*)", re.S)
#: Longest value a pattern removal (``#``, ``%`` ...) and a substitution (``/``) are applied to,
#: and the pattern operations one script may run (their matching is quadratic and cubic in the
#: length): beyond them the value is left unknown (named where it is needed).
_REMOVAL_MAX, _SUBSTITUTION_MAX, MAX_PATTERN_OPERATIONS = 1024, 128, 256


class _TooLong(ValueError):
    """A value too long for a pattern operation (left unknown)."""


def _pattern_operation(op: str, word: str, repl: str = ""):
    """The function ``${NAME OP WORD}`` applies to one string (``word`` the pattern, already
    expanded; ``repl`` a substitution's replacement): bash's
    glob patterns by :func:`fnmatch.fnmatchcase`, the shortest (``#``, ``%``) or longest
    (``##``, ``%%``) matching prefix or suffix removed; ``/pattern/string`` the longest match at
    the leftmost place replaced (``//`` every one, ``/#`` a match at the start, ``/%`` at the
    end). Raises _TooLong past :data:`_REMOVAL_MAX` / :data:`_SUBSTITUTION_MAX` characters."""
    def check(v: str, most: int) -> int:
        if len(v) > most:
            raise _TooLong(v[:20])
        return len(v)

    if op in ("#", "##"):
        def remove_prefix(v: str) -> str:
            ends = range(check(v, _REMOVAL_MAX) + 1)
            for i in (reversed(ends) if op == "##" else ends):
                if fnmatch.fnmatchcase(v[:i], word):
                    return v[i:]
            return v
        return remove_prefix
    if op in ("%", "%%"):
        def remove_suffix(v: str) -> str:
            starts = range(check(v, _REMOVAL_MAX) + 1)
            for i in (starts if op == "%%" else reversed(starts)):
                if fnmatch.fnmatchcase(v[i:], word):
                    return v[:i]
            return v
        return remove_suffix
    pattern = word
    anchor = ""
    if op == "/" and pattern[:1] in ("#", "%"):
        anchor, pattern = pattern[0], pattern[1:]

    def substitute(v: str) -> str:
        n = check(v, _SUBSTITUTION_MAX)
        if anchor == "#":
            j = next((j for j in range(n, -1, -1) if fnmatch.fnmatchcase(v[:j], pattern)), None)
            return v if j is None else repl + v[j:]
        if anchor == "%":
            k = next((k for k in range(n + 1) if fnmatch.fnmatchcase(v[k:], pattern)), None)
            return v if k is None else v[:k] + repl
        if not pattern:
            return v
        out, i = [], 0
        while i < n:
            j = next((j for j in range(n, i, -1) if fnmatch.fnmatchcase(v[i:j], pattern)), None)
            if j is None:
                out.append(v[i])
                i += 1
                continue
            out.append(repl)
            i = j
            if op != "//":
                break
        return "".join(out) + v[i:]
    return substitute


_REFERENCE = re.compile(r"\$(\{)?([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?(1)\})")


def _inside_a_word(value: str, ref: str) -> bool:
    """Whether every occurrence of ``ref`` in ``value`` is glued to other text of its word
    (```pwd`/pretrain_gpt.py``, ``$(dirname $0)/../train.py``): a path's part, not a
    word of its own."""
    i = value.find(ref)
    while i >= 0:
        before, after = value[i - 1:i], value[i + len(ref):i + len(ref) + 1]
        if not ((before and not before.isspace()) or (after and not after.isspace())):
            return False
        i = value.find(ref, i + 1)
    return True


def _words_around_references(value: str, missing: list[str]) -> bool:
    """Whether ``value`` is several words whose unknown parts (``missing``, as written) are
    each a plain variable reference (``$NAME``, ``${NAME}``), one word wherever it lands, or a
    command substitution glued to the text of its word (the script path of Megatron-DeepSpeed's
    ``CMD=" `pwd`/pretrain_gpt.py --num-layers ..."``, kept as written); a command
    substitution or arithmetic standing as a word of its own, or a value of one word, is not."""
    def kept(ref: str) -> bool:
        if _REFERENCE.fullmatch(ref):
            return True
        command = ref.startswith("`") or (ref.startswith("$(") and not ref.startswith("$(("))
        return command and _inside_a_word(value, ref)
    return all(kept(ref) for ref in missing) and len(value.split()) > 1


@dataclass
class Shell:
    """What :func:`read_shell` read.

    Attributes
    ----------
    commands : list of list of str
        Each simple command bash would run, its words expanded (in order; a command inside a
        branch the reader took or could not decide included).
    variables : dict
        The variables at the end (str, list of str for an array).
    notes : list of str
        What the reader could not decide (a condition it did not evaluate, a file it did not
        source).
    exited : str or None
        The statement whose ``exit`` bash certainly reaches, as written (the script ends
        there: nothing after it is read); None when bash reads to the end.
    """

    commands: list[list[str]] = field(default_factory=list)
    variables: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    exited: str | None = None


#: Commands whose running changes nothing a launch is read from: a command read without
#: knowing whether bash runs it is noted unless it is one of these (or changes no variable).
_NO_CONSEQUENCE = frozenset({"echo", "printf", "exit", "return", "true", "false", ":", "[",
                             "[[", "test"})


@dataclass
class _List:
    """An and-or list being read (``a && b || c``, pipelines ``a | b`` within it)."""

    op: str | None = None  # the operator before the next command (None: it starts the list)
    status: bool | None = True  # the list's exit status so far (None: not known)
    last: bool | None = True  # whether its last command was run (None: not known)
    text: str = ""  # the list so far, as written (for notes)

    def gate(self) -> bool | None:
        """Whether bash runs the next command: True, False, or None when it depends on a status
        the reader does not know."""
        if self.op is None:
            return True
        if self.op in ("|", "|&"):
            return self.last
        if self.status is None:
            return None
        return self.status if self.op == "&&" else not self.status

    def add(self, gate: bool | None, status: bool | None, text: str) -> None:
        """The next command was read under ``gate`` and gave ``status``."""
        if gate is True:
            self.status = status
        elif gate is None:  # run or not: the status is known only where both ways agree
            self.status = False if self.op == "&&" and status is False else \
                True if self.op == "||" and status is True else None
        self.last = gate
        self.text = f"{self.text} {self.op} {text}" if self.op else text
        self.op = None

    def reset(self) -> None:
        self.op, self.status, self.last, self.text = None, True, True, ""


def _keywords_only(items: list) -> bool:
    """Whether ``items`` holds only the reserved words that may open a command (``then``,
    ``else`` ..., a subshell's ``(``): a compound command may start after them."""
    return all(w == "(" or isinstance(w, Word) and w.literal() in ("then", "do", "else", "{")
               for w in items)


def _raw(items: list) -> str:
    """A command as written (its words; an array assignment by its name)."""
    return " ".join(w.raw if isinstance(w, Word) else w if isinstance(w, str) else f"{w[1]}(...)"
                    for w in items)


class _Reader(CompoundCommands):
    def __init__(self, source: str, variables: dict[str, str], positional: list[str | None]):
        self.source = source
        self.env: dict[str, str | list[str] | Unknown] = dict(variables)
        self.given = set(variables)
        self.positional = list(positional)
        self.shell = Shell(variables=self.env)
        self.frames: list[Frame] = []  # the open if, case and { } groups
        self.functions: dict[str, Definition] = {}
        self.body: Definition | None = None  # a function being defined
        self.calls: list[Call] = []  # the functions being run
        self.loops: list[int] = []  # the loops being run: where each one's frames start
        self.sure = True  # whether bash certainly runs the command being read (its list's gate)
        self.pattern_operations = 0  # ${NAME%pattern} and the like evaluated so far
        self.status: bool | None = True  # the exit status of the last list read ($?)
        self.total = [MAX_LAUNCH_BYTES]
        self.budget = _Budget(self.total)

    # ---- values
    def _lookup(self, name: str, index: str | None) -> str | list[str] | Unknown | None:
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.source
            return self.positional[k - 1] if k <= len(self.positional) else None
        if name in ("@", "*"):
            return [v for v in self.positional if v is not None]
        if name == "#":
            return str(len(self.positional))
        if name in "?$!-":
            return Unknown("a shell status")
        v = self.env.get(name)
        if v is None or isinstance(v, Unknown):
            return v
        if index is None:
            return v[0] if isinstance(v, list) and v else ("" if isinstance(v, list) else v)
        if index in ("@", "*"):
            return list(v) if isinstance(v, list) else [v]
        try:
            k = int(self._string(index, depth=1))
        except ValueError:
            return Unknown("an index")
        items = v if isinstance(v, list) else [v]
        return items[k] if -len(items) <= k < len(items) else None

    def _string(self, text: str, depth: int) -> str:
        """``text`` (a default word, an index, arithmetic) expanded as one string; raises
        ValueError when it holds an unknown value."""
        if depth > MAX_NESTING:
            raise Unbounded(f"expansions nested more than {MAX_NESTING} deep")
        fields, missing = self._expand_parts(
            [p for w in lex(text, spaces_literal=True) if isinstance(w, Word) for p in w.parts],
            split=False, depth=depth)
        if missing:
            raise ValueError(missing[0])
        return "".join(fields)

    def _param(self, part: Part, depth: int) -> str | list[str] | None:
        """The value of ``$name`` / ``${...}``: a string, a list (``[@]``, ``$@``), or None
        when it is unknown (the caller keeps the text as written)."""
        m = PARAMETER.fullmatch(part.text)
        if not m:
            return self._operation(part, depth)  # ${NAME%pattern}, ${@:2}, ${NAME,,} ...
        name, index, op, word = m.group("name"), m.group("index"), m.group("op"), m.group("word")
        value = self._lookup(name, index)
        if isinstance(value, Unknown):
            return None
        if m.group("length"):
            if value is None:
                return "0"
            return str(len(value)) if isinstance(value, list) and index in ("@", "*") else \
                str(len(value if isinstance(value, str) else " ".join(value)))
        if op is None:
            if value is None and name in ("@", "*"):
                return []
            if value is None and name.isdigit() and self.calls:
                return ""  # a function's parameter beyond those its call gives: unset
            return value
        empty = value is None or (op.startswith(":") and value in ("", []))
        kind = op[-1]
        if kind in "-=":
            if not empty:
                return value
            try:
                default = self._string(word, depth + 1)
            except ValueError:
                return None
            if kind == "=" and NAME.fullmatch(name):
                self.env[name] = default
            return default
        if kind == "+":
            if empty:
                return ""
            try:
                return self._string(word, depth + 1)
            except ValueError:
                return None
        return None if empty else value  # ${NAME:?message}

    def _operation(self, part: Part, depth: int) -> str | list[str] | None:
        """``${NAME OP WORD}`` for the operations of :data:`_OPERATION` as bash evaluates them
        (substrings and positional slices, case changes, pattern removal and substitution,
        element by element for an array); None when the value or the word is unknown, or the
        form is another (kept as written)."""
        m = _OPERATION.fullmatch(part.text)
        if not m:
            return None
        name, index, op, word = m.group("name"), m.group("index"), m.group("op"), m.group("word")
        if name in ("@", "*"):
            if op != ":":
                value = self._lookup(name, None)
            else:  # ${@:offset:length}: $0 counts as parameter 0
                value = [self.source] + list(self.positional)
        else:
            value = self._lookup(name, index)
        if value is None or isinstance(value, Unknown):
            return None
        if op == ":":
            return self._slice(value, word, name in ("@", "*") or index in ("@", "*"), depth)
        if op in (",,", "^^", ",", "^"):
            if word:
                return None  # a case change limited to a pattern: not read
            change = str.lower if op[0] == "," else str.upper
            conv = (change if len(op) == 2 else (lambda v: change(v[:1]) + v[1:]))
        else:
            cut = re.search(r"(?<!\\)/", word) if op[0] == "/" else None
            raw, repl = (word, "") if cut is None else (word[:cut.start()], word[cut.end():])
            try:  # a substitution's pattern ends at its first slash not escaped
                pattern = self._string(raw, depth + 1)
                repl = self._string(repl, depth + 1)
            except ValueError:
                return None
            self.pattern_operations += 1
            if self.pattern_operations > MAX_PATTERN_OPERATIONS:
                return None
            conv = _pattern_operation(op, pattern, repl)
        try:
            return [conv(v) for v in value] if isinstance(value, list) else conv(value)
        except _TooLong:
            return None

    def _slice(self, value: str | list[str], word: str, items: bool, depth: int
               ) -> str | list[str] | None:
        """``${NAME:offset:length}`` (characters) or ``${ARRAY[@]:offset:length}`` /
        ``${@:offset:length}`` (elements); None when a bound or an element is unknown."""
        off_text, _, len_text = word.partition(":")
        off = self._arith(Part("arith", off_text, False), depth)
        length = self._arith(Part("arith", len_text, False), depth) if _ else None
        if off is None or (_ and length is None):
            return None
        off_n = int(off)
        seq = value if items and isinstance(value, list) else (
            value if isinstance(value, str) else " ".join(value))
        if off_n < 0:
            off_n = max(len(seq) + off_n, 0) if not items or off_n >= -len(seq) else len(seq)
        end = len(seq) if length is None else (
            off_n + int(length) if int(length) >= 0 else len(seq) + int(length))
        out = seq[off_n:max(end, off_n)]
        if isinstance(out, list) and any(v is None for v in out):
            return None  # a positional parameter nobody gives
        return out

    def _arith(self, part: Part, depth: int) -> str | None:
        try:
            expr = self._string(part.text, depth + 1)
        except ValueError:
            return None
        value = arith(expr, lambda name: self.env[name] if isinstance(self.env.get(name), str)
                      else None)
        return None if value is None else str(value)

    def _expand_parts(self, parts: list[Part], split: bool, depth: int = 0
                      ) -> tuple[list[str], list[str]]:
        """Fields of a word (bash: unquoted expansions split at blanks, ``"${A[@]}"`` one
        field per element, a quoted empty string one empty field) and the references it could
        not expand (kept as written)."""
        fields: list[str] = []
        cur: str | None = None
        missing: list[str] = []
        for part in parts:
            if part.kind == "lit":
                cur = (cur or "") + part.text
                continue
            if part.kind == "cmd":
                value = None
            elif part.kind == "arith":
                value = self._arith(part, depth)
            elif part.kind == "name":
                value = self._param(part, depth)
                if isinstance(value, list) and part.text == "*":
                    value = " ".join(value)
            else:
                value = self._param(part, depth)
            if value is None:
                written = {"arith": f"$(({part.text}))", "cmd": part.text,
                           "name": f"${part.text}"}.get(part.kind, f"${{{part.text}}}")
                missing.append(written)
                cur = (cur or "") + written
                continue
            if isinstance(value, list):
                value = [self.budget.spend(v) for v in value]
                if part.quoted and not part.text.endswith("[*]"):
                    if value:
                        fields += [(cur or "") + value[0]] + value[1:-1]
                        cur = value[-1] if len(value) > 1 else fields.pop()
                    continue
                value = " ".join(value)
            self.budget.spend(value)
            if part.quoted or not split:
                cur = (cur or "") + value
                continue
            pieces = value.split()
            if value[:1].isspace() and cur is not None:
                fields.append(cur)
                cur = None
            for k, piece in enumerate(pieces):
                if k:
                    fields.append(cur)
                    cur = piece
                else:
                    cur = (cur or "") + piece
            if value[-1:].isspace() and cur is not None:
                fields.append(cur)
                cur = None
        if cur is not None:
            fields.append(cur)
        return fields, missing

    def words(self, items: list[Word], split: bool = True) -> tuple[list[str], list[str]]:
        out: list[str] = []
        missing: list[str] = []
        for w in items:
            f, m = self._expand_parts(w.parts, split)
            out += f
            missing += m
        return out, missing

    # ---- statements
    def statement(self, text: str, prefix: list[str] | None = None, depth: int = 0) -> None:
        if depth > MAX_NESTING:
            raise Unbounded(f"eval or bash -c nested more than {MAX_NESTING} deep")
        self._tokens(lex(text), prefix, depth)

    def _tokens(self, tokens: list, prefix: list[str] | None, depth: int) -> bool | None:
        """Read one statement's words and operators: its and-or lists (``a && b || c``), case
        patterns, function definitions, loops, subshells and the simple commands between them.
        Returns the exit status of its last list when known."""
        command: list = []
        condition = False
        chain = _List()
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if self.body is not None:  # inside a function's definition or a loop: kept
                body = self.body
                i = self._collect(tokens, i)
                if self.body is None and body.loop:  # its done: the loop runs now
                    status = self._loop(body, prefix, depth) if body.active else True
                    chain.add(True, status, f"{body.name} ... done")
                    self.status = chain.status
                continue
            if not condition and _keywords_only(command):
                j = self._compound(tokens, i, command, chain, prefix, depth)
                if j is not None:
                    command, i = [], j
                    continue
            if isinstance(tok, Word):
                lit = tok.literal()
                if lit is not None and all(x == "(" for x in command) and lit in ("if", "elif"):
                    condition = True
                if lit is not None and i + 1 < len(tokens) and tokens[i + 1] == "(" and \
                        ASSIGNMENT.fullmatch(lit):
                    end = next((k for k in range(i + 2, len(tokens)) if tokens[k] == ")"),
                               len(tokens))
                    command.append(("array", lit, [w for w in tokens[i + 2:end]
                                                   if isinstance(w, Word)]))
                    i = end + 1
                    continue
                command.append(tok)
            elif tok in REDIRECTIONS:
                i += 1  # the redirection's target
            elif tok == "(" and not condition and _keywords_only(command):
                if tokens[i + 1:i + 2] == ["("]:
                    i = self._arithmetic_command(tokens, i)
                    continue
                command.append("(")  # a subshell: read, its variables put back at its ")"
            elif tok == ")" and not condition:
                self._list_item(command, chain, prefix, depth)
                command = []
                self._close_subshell()
            elif tok in SEPARATORS and not (condition and tok in ("&&", "||", "|")):
                self._list_item(command, chain, prefix, depth)
                command, condition = [], False
                self._separator(tok, tokens[i + 1] if i + 1 < len(tokens) else None, chain)
            elif condition and tok in ("&&", "||"):
                command.append(tok)
            i += 1
        self._list_item(command, chain, prefix, depth)
        if self.body is not None and self.body.depth:
            self.body.tokens.append(";")  # the end of a line ends the body's command
            self.body.start = True
        elif self.body is not None and self.body.loop:
            self.body.header.append(";")  # the loop's words end with the line; its do follows
            self.body.start = True
        return self.status

    def _separator(self, tok: str, following: Word | str | None, chain: _List) -> None:
        """After a command: the and-or list goes on (``&&``, ``||``, ``|``) or ends; ``;;``
        ends a case branch (``;&`` and ``;;&``, which fall through, are refused)."""
        case = self.frames[-1] if self.frames and self.frames[-1].kind == "case" else None
        if case is not None and tok in (";", ";;") and following == "&":
            raise Refused(f"the case fall-through {tok}& is not read (vtrain reads a case "
                           "whose branches end with ;;)")
        if tok in ("&&", "||", "|", "|&"):
            chain.op = tok
            return
        chain.reset()
        if tok == ";;" and case is not None:
            case.state, case.pattern = False, True

    # ---- and-or lists
    def _list_item(self, items: list, chain: _List, prefix: list[str] | None,
                   depth: int) -> None:
        """Read one command of an and-or list: run when bash runs it (the list's status so far
        known), skipped when bash skips it, read and noted when the status is not known and the
        command changes what the reader knows."""
        if not items:
            return
        gate = chain.gate()
        text = _raw(items)
        shown = "{ ... }" if isinstance(items[0], Word) and items[0].literal() == "{" else text
        note = None if gate is not None else (
            f"the status of {chain.text[:60]!r} is not known (vtrain runs no shell code): "
            f"{shown[:60]!r} after {chain.op} is read")
        chain.add(gate, self.command(items, prefix, depth, gate, note), text)
        self.status = chain.status

    def _effects(self) -> tuple:
        return dict(self.env), list(self.positional), len(self.shell.commands)

    def _changed(self, before: tuple) -> bool:
        """Whether a variable, a positional parameter or a command of consequence was read
        since ``before`` (:meth:`_effects`)."""
        env, positional, num_commands = before
        return env != self.env or positional != self.positional or any(
            words[0].rsplit("/", 1)[-1] not in _NO_CONSEQUENCE
            for words in self.shell.commands[num_commands:])

    def _active(self) -> bool:
        return all(f.state is not False for f in self.frames)

    def command(self, items: list, prefix: list[str] | None, depth: int,
                gate: bool | None = True, note: str | None = None) -> bool | None:
        """Read one simple command after its keywords (``then``, ``{`` ...); its exit status
        when known. ``gate``: whether its and-or list runs it (None: not known; then ``note``
        is made when the command, or the ``{ ... }`` group it opens, changes what the reader
        knows)."""
        negate = False
        while items and (isinstance(items[0], Word) or items[0] == "("):
            kw = items[0].literal() if isinstance(items[0], Word) else items[0]
            if kw == "(":
                active = self._active()
                self.frames.append(Frame(
                    "subshell", gate if active else False, note=note,
                    before=self._effects() if note and active else None,
                    saved=(dict(self.env), list(self.positional), dict(self.functions))))
                gate, note = True, None
                items = items[1:]
            elif kw == "{":
                active = self._active()
                self.frames.append(Frame("group", gate if active else False, note=note,
                                          before=self._effects() if note and active else None))
                gate, note = True, None
                items = items[1:]
            elif kw == "}":
                self._close_group()
                items = items[1:]
            elif kw in ("then", "do", "time", "nohup", "exec", "command", "builtin", "done",
                        "esac"):
                items = items[1:]
            elif kw == "!":
                negate, items = not negate, items[1:]
            elif kw in ("if", "elif"):
                if gate is not True:
                    raise Refused("an if after && or || is not read")
                self._branch(kw, items[1:])
                return None
            elif kw in ("else", "fi"):
                self._branch(kw, [])
                items = items[1:]
            else:
                break
        if not items or gate is False or not self._active():
            return None
        before = self._effects() if note else None
        self.sure = gate is True
        status = self._simple(items, prefix, depth)
        if before is not None and self._changed(before):
            self.shell.notes.append(note)
        return None if status is None else status != negate

    def _close_group(self) -> None:
        """``}``: the group ends; one read without knowing whether bash runs it is noted when
        it changed what the reader knows."""
        if not self.frames or self.frames[-1].kind != "group":
            return
        frame = self.frames.pop()
        if frame.before is not None and self._changed(frame.before):
            self.shell.notes.append(frame.note)

    def _simple(self, items: list, prefix: list[str] | None, depth: int) -> bool | None:
        """A simple command's assignments and words; its exit status when known (a test of
        known values, an assignment without a command substitution)."""
        lit = items[0].literal() if isinstance(items[0], Word) else None
        if lit in ("[", "[[", "test", "true", "false", ":"):
            status = self._test([w for w in items if isinstance(w, Word)])
        else:
            status = None
        # assignments, and the declarations that make them
        declare = None
        substituted = False
        while items:
            item = items[0]
            if isinstance(item, tuple):
                _, lit, elements = item
                m = ASSIGNMENT.fullmatch(lit)
                self._local(declare, m.group("name"))
                values, _ = self.words(elements)  # an unknown element stays as written
                old = self.env.get(m.group("name"))
                if m.group("op") == "+=" and not isinstance(old, Unknown) and old is not None:
                    values = (old if isinstance(old, list) else [old]) + values
                self.env[m.group("name")] = values
                items = items[1:]
                continue
            lit = item.literal() if isinstance(item, Word) else None
            first = item.parts[0] if isinstance(item, Word) and item.parts else None
            m = ASSIGNMENT.match(first.text) if first and first.kind == "lit" and \
                not first.quoted else None
            if m:
                self._local(declare, m.group("name"))
                substituted |= any(p.kind == "cmd" for p in item.parts)
                self._assign(m, first, item)
                items = items[1:]
                continue
            if lit in ("export", "declare", "typeset", "local", "readonly") or \
                    (declare and lit is not None and lit.startswith("-")):
                declare = declare or lit
                items = items[1:]
                continue
            if declare and lit is not None and NAME.fullmatch(lit):
                if self._local(declare, lit):
                    self.env.pop(lit, None)  # ``local X``: X unset inside the function
                items = items[1:]
                continue
            break
        if declare or not items:
            return None if substituted else True
        words, _ = self.words([w for w in items if isinstance(w, Word)])
        if words:
            self._run(words, prefix, depth)
        return status

    def _local(self, declare: str | None, name: str) -> bool:
        """Inside a function, ``local NAME`` (``declare``, ``typeset``): keep NAME's value to
        put back after the call. Whether NAME is local."""
        if not self.calls or declare not in ("local", "declare", "typeset"):
            return False
        self.calls[-1].saved.setdefault(name, self.env.get(name))
        return True

    def _assign(self, m: re.Match, first: Part, item: Word) -> None:
        """``NAME=value`` / ``NAME+=value`` (``m`` the match of ``NAME=`` in ``first``)."""
        value_parts = [Part("lit", first.text[m.end():], False)] + item.parts[1:]
        fields, missing = self._expand_parts(value_parts, split=False)
        name = m.group("name")
        value = " ".join(fields)  # "${A[@]}" in an assignment: its elements joined by spaces
        old = self.env.get(name)
        if m.group("op") == "+=" and isinstance(old, str):
            value = old + value
        if missing:
            if name in self.given:  # the caller's value stays
                pass
            elif _words_around_references(value, missing):
                # a string of several words (DISTRIBUTED_ARGS="... --master_addr
                # $MASTER_ADDR"): bash puts the value in place; the other words stay
                # known and the reference stays as written, named where needed
                self.env[name] = value
            else:
                self.env[name] = Unknown(missing[0])
        elif m.group("op") == "+=" and isinstance(old, list):
            self.env[name] = old + [value]
        else:
            self.env[name] = value

    def _run(self, words: list[str], prefix: list[str] | None, depth: int) -> None:
        """A command's expanded words: a builtin the reader follows, a function's body, or a
        command recorded in :attr:`Shell.commands`."""
        head = words[0].rsplit("/", 1)[-1]
        if head == "unset":
            for name in words[1:]:
                self.env.pop(name, None)
            return
        if head == "shift":
            k = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
            self.positional = self.positional[k:]
            return
        if head == "return" and self.calls and \
                all(f.state is True for f in self.frames[self.calls[-1].base:]):
            raise ReturnFromFunction
        if head in ("break", "continue") and self.loops:
            levels = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
            if self.sure and levels >= 1 and \
                    all(f.state is True for f in self.frames[self.loops[-1]:]):
                raise Break(head == "continue", min(levels, len(self.loops)))
            return
        if head == "exit":
            sub = next((k for k in range(len(self.frames) - 1, -1, -1)
                        if self.frames[k].kind == "subshell"), -1)
            if self.sure and all(f.state is True for f in self.frames[sub + 1:]):
                if sub >= 0:
                    self.frames[sub].state = False  # the subshell ends, not the script
                else:
                    raise Exit
            return
        if head in ("source", "."):
            self.shell.notes.append(f"{' '.join(words[:2])}: another file is not read (its "
                                    "variables can be given with --var NAME=VALUE)")
            return
        if head == "eval":
            self.statement(" ".join(words[1:]), prefix, depth + 1)
            return
        if words[0] in self.functions and not prefix:
            self._call(words[0], words[1:], depth)
            return
        if head == "env":
            k = 1
            while k < len(words) and ("=" in words[k] or words[k].startswith("-")):
                k += 1
            words = words[k:]
        for k, w in enumerate(words[:-1]):
            if w.rsplit("/", 1)[-1] in ("bash", "sh") and words[k + 1] == "-c" and k + 2 < len(words):
                # another bash: its commands are read, its variables and exit are its own
                base, saved = len(self.frames), (dict(self.env), list(self.positional))
                try:
                    self.statement(words[k + 2], (prefix or []) + words[:k], depth + 1)
                except Exit:
                    pass
                finally:
                    del self.frames[base:]
                    self.env.clear()
                    self.env.update(saved[0])
                    self.positional = saved[1]
                return
        if words:
            self.shell.commands.append((prefix or []) + words)

    # ---- conditions
    def _branch(self, kw: str, condition: list) -> None:
        if kw == "if":
            state = self._condition(condition) if self._active() else False
            self.frames.append(Frame("if", state, taken=state is True, unknown=state is None))
        elif not self.frames or self.frames[-1].kind != "if":
            return
        elif kw == "fi":
            self.frames.pop()
        else:
            frame = self.frames[-1]
            parent = all(f.state is not False for f in self.frames[:-1])
            if not parent or frame.taken:
                frame.state = False
            elif kw == "else":
                frame.state = None if frame.unknown else True
            else:
                frame.state = self._condition(condition)
                frame.taken |= frame.state is True
                frame.unknown |= frame.state is None

    def _condition(self, items: list, note: bool = True) -> bool | None:
        """True/False for tests of known strings and integers, None when it needs the machine
        (noted, unless ``note`` is False)."""
        groups: list[list] = [[]]
        ops: list[str] = []
        for item in items:
            if item in ("&&", "||"):
                groups.append([])
                ops.append(item)
            elif isinstance(item, Word):
                groups[-1].append(item)
        value = self._test(groups[0])
        for op, group in zip(ops, groups[1:]):
            right = self._test(group)
            if op == "&&":
                value = False if False in (value, right) else (None if None in (value, right)
                                                               else True)
            else:
                value = True if True in (value, right) else (None if None in (value, right)
                                                             else False)
        if value is None and note:
            text = " ".join(w.raw if isinstance(w, Word) else w for w in items)
            self.shell.notes.append(f"the condition {text[:60]!r} is not evaluated (vtrain runs "
                                    "no shell code): its branches are read in order")
        return value

    def _test(self, words: list[Word]) -> bool | None:
        negate = False
        if words and words[0].literal() == "!":
            negate, words = True, words[1:]
        if not words:
            return None
        lit = [w.literal() for w in words]
        if lit[0] in ("[[", "[", "test"):
            body = words[1:-1] if lit[0] != "test" else words[1:]
            if lit[0] != "test" and lit[-1] != ("]]" if lit[0] == "[[" else "]"):
                return None
            glob = len(body) == 3 and body[1].literal() in ("==", "=", "!=") and any(
                p.kind == "lit" and not p.quoted and set(p.text) & set("*?[") for p in body[2].parts)
            vals: list[str] = []
            for w in body:
                f, missing = self._expand_parts(w.parts, split=False)
                if missing:
                    return None
                vals.append("".join(f))
            value = None if glob else compare(vals)
        elif lit[0] in ("true", ":"):
            value = True
        elif lit[0] == "false":
            value = False
        else:
            return None
        return None if value is None else value != negate


def read_shell(text: str, source: str = "script", variables: dict[str, str] | None = None,
               positional: list[str | None] | None = None) -> Shell:
    """Read a bash script's commands without running anything (see the module's docstring).

    Parameters
    ----------
    text : str
        The script.
    source : str
        File name for messages (and ``$0``).
    variables : dict, optional
        Environment variables the script may read (``--var NAME=VALUE``).
    positional : list of str or None, optional
        ``$1``, ``$2`` ... (``--var 1=VALUE``; None: not given, unset).

    Raises
    ------
    ShellError
        Beyond a bound (the message names the source and the statement), or a quote that is
        never closed.
    """
    if len(text) > MAX_LAUNCH_BYTES:
        raise ShellError(f"{source}: {len(text):,} characters, more than the "
                         f"{MAX_LAUNCH_BYTES:,} a launch script may have")
    reader = _Reader(source, variables or {}, positional or [])
    for stmt in statements(text, source):
        reader.budget = _Budget(reader.total)
        try:
            reader.statement(stmt)
        except Exit:  # bash stops here: what follows is never read
            reader.shell.exited = head(stmt)
            return reader.shell
        except (Unbounded, Refused) as exc:
            raise ShellError(f"{source}: statement {head(stmt)}: {exc}") from None
        except BashArithmeticError as exc:
            raise ShellError(f"{source}: statement {head(stmt)}: {exc} (bash stops the "
                             "script here)") from None
        except ShellError as exc:
            raise ShellError(f"{source}: cannot split {head(stmt)} into shell words: {exc}"
                             ) from None
    if reader.body is not None and not reader.body.loop:
        raise ShellError(f"{source}: function {reader.body.name}: its body has no closing '}}' "
                         "(bash refuses the script)")
    if reader.body is not None:
        raise ShellError(f"{source}: a {reader.body.name} loop has no closing 'done' (bash "
                         "refuses the script)")
    closing = {"case": "esac", "if": "fi", "group": "}", "subshell": ")"}
    for frame in reader.frames:
        raise ShellError(f"{source}: {'an' if frame.kind == 'if' else 'a'} "
                         f"{'{ group' if frame.kind == 'group' else frame.kind} has no closing "
                         f"'{closing[frame.kind]}' (bash refuses the script)")
    return reader.shell
