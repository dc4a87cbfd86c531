"""A bounded reader of bash launch scripts: it expands, it never executes.

:func:`read_shell` reads a launch script statement by statement as bash would expand it,
and returns the simple commands it would run, their words expanded, with nothing run:

* assignments ``NAME=value``, ``NAME+=value``, ``export``/``declare``/``local``/``readonly``,
  bash arrays ``NAME=( ... )`` and ``NAME+=( ... )``, ``unset``;
* ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``, ``${NAME:=default}``
  (assigns), ``${NAME:+alternative}``, ``${#NAME}``, ``${ARRAY[@]}``, ``${ARRAY[*]}``,
  ``${ARRAY[i]}``, positional parameters ``$1 ${2:-x} $@ $* $#`` and ``shift``, integer
  ``$((...))``; unquoted expansions are split into words, quoted ones are not, as bash does;
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
by :mod:`core.io.shell_values`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.io.shell_values import Element, Unbounded, arith, compare, pattern_elements, wildcard
from core.io.shell_words import (ASSIGNMENT, MAX_STATEMENT_BYTES, NAME, PARAMETER, REDIRECTIONS,
                                 SEPARATORS, Part, ShellError, Word, head, lex, statements)

__all__ = ["Shell", "read_shell", "missing_variable", "MAX_LAUNCH_BYTES", "MAX_NESTING",
           "MAX_LOOP_ITERATIONS"]


#: Bounds of reading a launch (a launch script is a few KB; its expansion a few times that).
#: Beyond them the script is refused, so that no input makes the reader run for long:
#: ``A=$A$A`` on twenty lines doubles a value a million times over.
MAX_LAUNCH_BYTES = 2**20  # the script file, and all its statements once expanded
# --------------------------------------------------------------------------- words

#: How deep ``eval``, ``bash -c`` and nested ``${A:-${B:-...}}`` defaults may go.
MAX_NESTING = 8
#: How many times one loop's body may be read (``while true`` without a ``break`` bash
#: certainly reaches never ends; no launch loops this often over what it is read from).
MAX_LOOP_ITERATIONS = 1024


# --------------------------------------------------------------------------- expansion

@dataclass
class _Unknown:
    """A variable whose value the reader cannot know (assigned from a command's output, or
    from another unknown value)."""

    why: str


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


_REFERENCE = re.compile(r"\$(\{)?([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?(1)\})")


def _words_around_references(value: str, missing: list[str]) -> bool:
    """Whether ``value`` is several words whose unknown parts (``missing``, as written) are
    each a plain variable reference (``$NAME``, ``${NAME}``), one word wherever it lands; a
    command's or an arithmetic's text, or a value of one word, is not."""
    return (all(_REFERENCE.fullmatch(ref) for ref in missing)
            and len(value.split()) > 1)


def missing_variable(word: str) -> str | None:
    """The variable an unexpanded word names (``$NNODES``, ``${1}`` -> ``NNODES``, ``1``), or
    None when the word holds no ``$`` reference."""
    m = re.search(r"\$\{?#?([A-Za-z_][A-Za-z0-9_]*|[0-9]+)", word)
    return m.group(1) if m else None


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


class _Refused(Exception):
    """A construct the reader does not read (``read_shell`` names the file and the statement)."""


class _Return(Exception):
    """``return`` in a function bash certainly reaches: the rest of its body is not read."""


class _Exit(Exception):
    """``exit`` bash certainly reaches outside a subshell: the rest of the script is not read."""


class _Break(Exception):
    """``break`` (``continue``: ``again`` True) in a loop bash certainly reaches, leaving
    ``levels`` loops (``break 2``)."""

    def __init__(self, again: bool = False, levels: int = 1):
        super().__init__()
        self.again, self.levels = again, levels


#: Commands whose running changes nothing a launch is read from: a command read without
#: knowing whether bash runs it is noted unless it is one of these (or changes no variable).
_NO_CONSEQUENCE = frozenset({"echo", "printf", "exit", "return", "true", "false", ":", "[",
                             "[[", "test"})


@dataclass
class _Frame:
    """An open ``if``, ``case``, ``{ ... }`` group or ``( ... )`` subshell."""

    kind: str  # "if", "case", "group", "subshell"
    state: bool | None  # True: bash reads it; False: bash skips it; None: read, not decided
    taken: bool = False  # a branch bash takes was found (if, case)
    unknown: bool = False  # a branch was read undecided (if)
    word: str | None = None  # case: the word's value (None: not known)
    pattern: bool = True  # case: a pattern comes next
    before: tuple | None = None  # group read undecided: what the reader knew before it
    note: str | None = None  # group read undecided: what to say if it changed that
    saved: tuple | None = None  # subshell: the variables, positional parameters and functions


@dataclass
class _Definition:
    """A function's body as it is defined, or a loop's header and body as they are written:
    tokens, read when a call runs them (a function) or when the loop's ``done`` is reached."""

    name: str  # the function's name; a loop's keyword (for, while, until)
    active: bool  # defined (a loop: reached) where bash runs it
    tokens: list = field(default_factory=list)
    depth: int = 0  # braces (a loop: do ... done) open (0: the opening one is still to come)
    start: bool = True  # the next token starts a command
    loop: bool = False  # a loop (for, while, until) rather than a function
    header: list = field(default_factory=list)  # a loop's words before its ``do``

    def size(self) -> int:
        """Characters of the body, as a call reads them."""
        return sum(len(t.raw) + 1 if isinstance(t, Word) else len(t) + 1 for t in self.tokens)


@dataclass
class _Call:
    """A function being run: where its frames start and the values its ``local`` hides."""

    base: int
    saved: dict = field(default_factory=dict)  # name -> value before the call (None: unset)


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


_SEQUENCE = re.compile(r"\{(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?\}")
_CHOICES = re.compile(r"\{([^{},]*(?:,[^{},]*)+)\}")


def _braces(words: list[Word]) -> list[Word]:
    """A for loop's words with bash's brace expansion: a word that is one unquoted literal
    ``{1..8}``, ``{0..6..2}`` or ``{a,b,c}`` (between a prefix and a suffix) becomes its words,
    as bash expands them before the loop runs. Any other unquoted brace with ``..`` or ``,``
    (nested, or beside an expansion) is refused by name, never read as one word."""
    out: list[Word] = []
    for w in words:
        lit = w.literal()
        seq = _SEQUENCE.search(lit) if lit is not None else None
        alt = _CHOICES.search(lit) if lit is not None and seq is None else None
        m = seq or alt
        if m is not None and "{" not in lit[:m.start()] + lit[m.end():]:
            if seq:
                a, b = int(seq.group(1)), int(seq.group(2))
                step = abs(int(seq.group(3) or 1)) or 1
                if abs(b - a) // step >= MAX_LOOP_ITERATIONS:
                    raise Unbounded(f"{lit} expands to more than {MAX_LOOP_ITERATIONS:,} words")
                items = [str(k) for k in range(a, b + (1 if b >= a else -1),
                                               step if b >= a else -step)]
            else:
                items = alt.group(1).split(",")
            out += [Word([Part("lit", lit[:m.start()] + x + lit[m.end():], False)],
                         lit[:m.start()] + x + lit[m.end():]) for x in items]
            continue
        if any(p.kind == "lit" and not p.quoted and "{" in p.text and (
                ".." in p.text or "," in p.text) for p in w.parts):
            raise _Refused(f"the brace expansion in {w.raw!r} is not read (vtrain reads "
                           "{N..M} and {a,b} as a whole word)")
        out.append(w)
    return out


def _raw(items: list) -> str:
    """A command as written (its words; an array assignment by its name)."""
    return " ".join(w.raw if isinstance(w, Word) else w if isinstance(w, str) else f"{w[1]}(...)"
                    for w in items)


class _Reader:
    def __init__(self, source: str, variables: dict[str, str], positional: list[str | None]):
        self.source = source
        self.env: dict[str, str | list[str] | _Unknown] = dict(variables)
        self.given = set(variables)
        self.positional = list(positional)
        self.shell = Shell(variables=self.env)
        self.frames: list[_Frame] = []  # the open if, case and { } groups
        self.functions: dict[str, _Definition] = {}
        self.body: _Definition | None = None  # a function being defined
        self.calls: list[_Call] = []  # the functions being run
        self.loops: list[int] = []  # the loops being run: where each one's frames start
        self.sure = True  # whether bash certainly runs the command being read (its list's gate)
        self.status: bool | None = True  # the exit status of the last list read ($?)
        self.total = [MAX_LAUNCH_BYTES]
        self.budget = _Budget(self.total)

    # ---- values
    def _lookup(self, name: str, index: str | None) -> str | list[str] | _Unknown | None:
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
            return _Unknown("a shell status")
        v = self.env.get(name)
        if v is None or isinstance(v, _Unknown):
            return v
        if index is None:
            return v[0] if isinstance(v, list) and v else ("" if isinstance(v, list) else v)
        if index in ("@", "*"):
            return list(v) if isinstance(v, list) else [v]
        try:
            k = int(self._string(index, depth=1))
        except ValueError:
            return _Unknown("an index")
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
            return None  # ${NAME%pattern} and the like: not read
        name, index, op, word = m.group("name"), m.group("index"), m.group("op"), m.group("word")
        value = self._lookup(name, index)
        if isinstance(value, _Unknown):
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

    def _arith(self, part: Part, depth: int) -> str | None:
        try:
            expr = self._string(part.text, depth + 1)
        except ValueError:
            return None
        expr = NAME.sub(lambda v: self.env[v.group()] if isinstance(self.env.get(v.group()), str)
                         else v.group(), expr)
        value = arith(expr)
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
            raise _Refused(f"the case fall-through {tok}& is not read (vtrain reads a case "
                           "whose branches end with ;;)")
        if tok in ("&&", "||", "|", "|&"):
            chain.op = tok
            return
        chain.reset()
        if tok == ";;" and case is not None:
            case.state, case.pattern = False, True

    def _compound(self, tokens: list, i: int, keywords: list, chain: _List,
                  prefix: list[str] | None, depth: int) -> int | None:
        """At the start of a command: a case pattern, ``esac``, ``case WORD in`` or a function
        definition, read up to the index returned; None when ``tokens[i]`` starts none."""
        tok = tokens[i]
        lit = tok.literal() if isinstance(tok, Word) else None
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        case = self.frames[-1] if self.frames and self.frames[-1].kind == "case" else None
        if lit == "esac" and case is not None:
            self._list_item(keywords, chain, prefix, depth)
            self.frames.pop()
            return i + 1
        if case is not None and case.pattern and not keywords and \
                (isinstance(tok, Word) or tok == "("):
            return self._pattern(tokens, i, case)
        if lit in ("for", "while", "until", "select"):
            if chain.op is not None:
                raise _Refused(f"a {lit} loop after {chain.op} is not read")
            if lit == "select":
                raise _Refused("a select loop (a menu read from the terminal) is not read")
            self._list_item(keywords, chain, prefix, depth)  # then, else, {
            self.body = _Definition(lit, self._active(), loop=True)
            return i + 1
        if lit == "case" or lit == "function" or (
                lit is not None and NAME.fullmatch(lit) and nxt == "("
                and tokens[i + 2:i + 3] == [")"]):
            if chain.op is not None:
                raise _Refused(f"a {'case' if lit == 'case' else 'function definition'} after "
                               f"{chain.op} is not read")
            self._list_item(keywords, chain, prefix, depth)  # then, else, {
            return self._case(tokens, i) if lit == "case" else self._define(tokens, i)
        return None

    # ---- case
    def _case(self, tokens: list, i: int) -> int:
        """``case WORD in``: a frame whose branches :meth:`_pattern` chooses."""
        word = tokens[i + 1] if i + 1 < len(tokens) else None
        if not isinstance(word, Word) or i + 2 >= len(tokens) or \
                not isinstance(tokens[i + 2], Word) or tokens[i + 2].literal() != "in":
            raise _Refused("a case is read only as 'case WORD in' on one line")
        value: str | None = None
        if self._active():
            fields, missing = self._expand_parts(word.parts, split=False)
            value = None if missing else "".join(fields)
            if value is None:
                name = missing_variable(word.raw)
                give = f" (--var {name}=VALUE chooses one)" if name else ""
                self.shell.notes.append(
                    f"the case word {word.raw!r} is not known (vtrain runs no shell code): its "
                    f"branches are read in order{give}")
        self.frames.append(_Frame("case", False, word=value))
        return i + 3

    def _pattern(self, tokens: list, i: int, case: _Frame) -> int:
        """A case branch's patterns ``a|b*)`` (an opening ``(`` allowed): the branch is read
        when bash takes it (the word known, the first pattern it matches), skipped when bash
        does not, read and noted when the reader cannot tell."""
        j = i + 1 if tokens[i] == "(" else i
        patterns: list[Word] = []
        while j < len(tokens) and isinstance(tokens[j], Word):
            patterns.append(tokens[j])
            j += 1
            if j < len(tokens) and tokens[j] == "|":
                j += 1
            else:
                break
        if not patterns or j >= len(tokens) or tokens[j] != ")":
            raise _Refused("a case pattern is read only as words joined by | and closed by ) "
                           "on one line")
        parent = all(f.state is not False for f in self.frames[:-1])
        if not parent or case.taken:
            state: bool | None = False
        elif case.word is None:
            state = None
        else:
            matches = [self._matches(case.word, p) for p in patterns]
            state = True if True in matches else (None if None in matches else False)
            if state is None:
                self.shell.notes.append(
                    f"the case pattern {' | '.join(p.raw for p in patterns)!r} is not known "
                    "(vtrain runs no shell code): its branch is read")
        case.state, case.pattern = state, False
        case.taken |= state is True
        return j + 1

    def _matches(self, value: str, pattern: Word) -> bool | None:
        """Whether ``value`` matches the bash pattern ``pattern`` (``*``, ``?``, ``[...]``
        where unquoted), None when the pattern holds an unknown value or a POSIX class."""
        elements: list[Element] = []
        for part in pattern.parts:
            if part.kind == "lit":
                text = part.text
            else:
                fields, missing = self._expand_parts([part], split=False)
                if missing:
                    return None
                text = "".join(fields)
            more = pattern_elements(text, part.quoted)
            if more is None:
                return None
            elements += more
        return wildcard(elements, value)

    # ---- functions
    def _define(self, tokens: list, i: int) -> int:
        """``NAME() {``, ``function NAME {``, ``function NAME() {``: the body is kept (not read)
        until a call runs it."""
        if tokens[i].literal() == "function":
            name = tokens[i + 1].literal() if i + 1 < len(tokens) and \
                isinstance(tokens[i + 1], Word) else None
            if name is None or not NAME.fullmatch(name):
                raise _Refused("a function is read only as 'function NAME {' or 'NAME() {'")
            i += 2
            if tokens[i:i + 2] == ["(", ")"]:
                i += 2
        else:
            name = tokens[i].literal()
            i += 3
        self.body = _Definition(name, self._active())
        return i

    def _collect(self, tokens: list, i: int) -> int:
        """One more token of a function's body, kept until the ``}`` that closes it, or of a
        loop's words and body, kept until the ``done`` that closes it."""
        body, tok = self.body, tokens[i]
        lit = tok.literal() if isinstance(tok, Word) else None
        if body.loop:
            if not body.depth:  # the loop's words, up to its do
                if body.start and lit == "do":
                    body.depth, body.start = 1, True
                else:
                    body.header.append(tok)
                    body.start = isinstance(tok, str) and tok not in REDIRECTIONS
                return i + 1
            if body.start and lit in ("do", "done"):
                body.depth += 1 if lit == "do" else -1
                if not body.depth:
                    self.body = None
                    return i + 1
        elif not body.depth:
            if lit != "{":
                raise _Refused(f"function {body.name}: only a body in {{ ... }} is read")
            body.depth = 1
            return i + 1
        if not body.loop and body.start and lit in ("{", "}"):
            body.depth += 1 if lit == "{" else -1
            if not body.depth:
                if body.active:
                    self.functions[body.name] = body
                self.body = None
                return i + 1
        body.tokens.append(tok)
        body.start = lit in ("then", "do", "else", "{", "!", "time") or (
            isinstance(tok, str) and tok not in REDIRECTIONS)
        return i + 1

    # ---- loops
    def _loop(self, loop: _Definition, prefix: list[str] | None, depth: int) -> bool | None:
        """Run a loop bash reaches: ``for NAME in WORDS`` (``for NAME``: over ``$@``) once per
        word with NAME set; ``while``/``until`` as long as its condition, a test of known
        values, holds (fails). A condition or words the reader cannot know read the body once,
        noted. ``break``/``continue`` bash certainly reaches are followed; more than
        :data:`MAX_LOOP_ITERATIONS` readings are refused. Returns the loop's exit status when
        known: its body's last list's, or success when the body was not read (bash's)."""
        header = list(loop.header)
        while header and header[-1] in (";", "&"):
            header.pop()
        shown = " ".join(w.raw if isinstance(w, Word) else w for w in header)[:60]
        if loop.name == "for":
            words = [w for w in header if isinstance(w, Word)]
            name = words[0].literal() if words else None
            if name is None or not NAME.fullmatch(name) or len(words) != len(header) or (
                    len(words) > 1 and words[1].literal() != "in"):
                raise _Refused("a for loop is read only as 'for NAME in WORDS; do ... done' "
                               "(a C-style for (( ... )) is not read)")
            if len(words) > 1:
                values, missing = self.words(_braces(words[2:]))
            else:  # for NAME: the positional parameters
                values = [v for v in self.positional if v is not None]
                missing = ["1"] if None in self.positional else []
            if missing:
                self.shell.notes.append(
                    f"the words of 'for {shown}' are not known (vtrain runs no shell code): "
                    f"its body is read once, ${name} not known")
                self.env[name] = _Unknown(missing[0])
                self._iterate(loop, prefix, depth)
                return None
            if len(values) > MAX_LOOP_ITERATIONS:
                raise Unbounded(f"a for loop over {len(values):,} words, more than the "
                                f"{MAX_LOOP_ITERATIONS:,} a launch can mean")
            status: bool | None = True
            for value in values:
                self.env[name] = value
                go, status = self._iterate(loop, prefix, depth)
                if not go:
                    break
            return status
        status = True
        for _ in range(MAX_LOOP_ITERATIONS):
            holds = self._condition(header, note=False)
            if holds is not None and loop.name == "until":
                holds = not holds
            if holds is False:
                return status
            if holds is None:
                self.shell.notes.append(
                    f"the condition of '{loop.name} {shown}' is not evaluated (vtrain runs no "
                    "shell code): its body is read once")
                self._iterate(loop, prefix, depth)
                return None
            go, status = self._iterate(loop, prefix, depth)
            if not go:
                return status
        raise Unbounded(f"'{loop.name} {shown}' loops more than {MAX_LOOP_ITERATIONS:,} times "
                        "(no break bash certainly reaches ends it)")

    def _iterate(self, loop: _Definition, prefix: list[str] | None, depth: int
                 ) -> tuple[bool, bool | None]:
        """Read a loop's body once: whether the loop goes on (False after a ``break``), and the
        body's exit status when known (``break`` and ``continue`` succeed)."""
        if depth >= MAX_NESTING:
            raise Unbounded(f"loops nested more than {MAX_NESTING} deep")
        # a pass costs at least 64 bytes: at most 16,384 passes in a script, however short
        self.total[0] -= max(loop.size(), 64)
        if self.total[0] < 0:
            raise Unbounded(f"loops read more than {MAX_LAUNCH_BYTES // 2**20} MiB of script "
                             f"(or {MAX_LAUNCH_BYTES // 64:,} passes), more than a launch can "
                             "mean")
        base = len(self.frames)
        self.loops.append(base)
        try:
            status = self._tokens(list(loop.tokens), prefix, depth + 1)
        except _Break as stop:
            if stop.levels > 1:
                stop.levels -= 1
                raise
            return stop.again, True
        finally:
            del self.frames[base:]
            self.loops.pop()
        return True, status

    def _arithmetic_command(self, tokens: list, i: int) -> int:
        """``(( ... ))`` at the start of a command: refused where bash runs it (it may change a
        variable the launch is read from); the index after its ``))``."""
        j = i + 2
        while j + 1 < len(tokens) and tokens[j:j + 2] != [")", ")"]:
            j += 1
        if self._active():
            text = " ".join(t.raw if isinstance(t, Word) else t for t in tokens[i + 2:j])
            raise _Refused(f"the arithmetic command (( {text[:40]} )) is not read (vtrain reads "
                           "NAME=$(( ... )))")
        return j + 2

    # ---- subshells
    def _close_subshell(self) -> None:
        """``)``: the subshell ends; its variables, positional parameters and functions are
        put back (a subshell is another process). One read without knowing whether bash runs
        it is noted when it ran a command of consequence."""
        at = next((k for k in range(len(self.frames) - 1, -1, -1)
                   if self.frames[k].kind == "subshell"), None)
        if at is None:
            return
        frame = self.frames[at]
        del self.frames[at:]
        env, self.positional, self.functions = frame.saved
        self.env.clear()
        self.env.update(env)
        if frame.before is not None and self._changed(frame.before):
            self.shell.notes.append(frame.note)

    def _call(self, name: str, args: list[str], depth: int) -> None:
        """Run a defined function's body with ``args`` as ``$1 $2 ...``; its ``local``
        variables are put back after it."""
        if depth >= MAX_NESTING:
            raise Unbounded(f"function calls nested more than {MAX_NESTING} deep")
        body = self.functions[name]
        self.total[0] -= body.size()
        if self.total[0] < 0:
            raise Unbounded(f"function calls read more than {MAX_LAUNCH_BYTES // 2**20} MiB of "
                             "script, more than a launch can mean")
        positional, base = self.positional, len(self.frames)
        self.positional = list(args)
        self.calls.append(_Call(base))
        try:
            self._tokens(body.tokens, None, depth + 1)
        except _Return:
            pass
        finally:
            del self.frames[base:]
            self.positional = positional
            for var, old in self.calls.pop().saved.items():
                if old is None:
                    self.env.pop(var, None)
                else:
                    self.env[var] = old

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
                self.frames.append(_Frame(
                    "subshell", gate if active else False, note=note,
                    before=self._effects() if note and active else None,
                    saved=(dict(self.env), list(self.positional), dict(self.functions))))
                gate, note = True, None
                items = items[1:]
            elif kw == "{":
                active = self._active()
                self.frames.append(_Frame("group", gate if active else False, note=note,
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
                    raise _Refused("an if after && or || is not read")
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
                if m.group("op") == "+=" and not isinstance(old, _Unknown) and old is not None:
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
        value = "".join(fields)
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
                self.env[name] = _Unknown(missing[0])
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
            raise _Return
        if head in ("break", "continue") and self.loops:
            levels = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
            if self.sure and levels >= 1 and \
                    all(f.state is True for f in self.frames[self.loops[-1]:]):
                raise _Break(head == "continue", min(levels, len(self.loops)))
            return
        if head == "exit":
            sub = next((k for k in range(len(self.frames) - 1, -1, -1)
                        if self.frames[k].kind == "subshell"), -1)
            if self.sure and all(f.state is True for f in self.frames[sub + 1:]):
                if sub >= 0:
                    self.frames[sub].state = False  # the subshell ends, not the script
                else:
                    raise _Exit
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
                except _Exit:
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
            self.frames.append(_Frame("if", state, taken=state is True, unknown=state is None))
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
        except _Exit:  # bash stops here: what follows is never read
            reader.shell.exited = head(stmt)
            return reader.shell
        except (Unbounded, _Refused) as exc:
            raise ShellError(f"{source}: statement {head(stmt)}: {exc}") from None
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
