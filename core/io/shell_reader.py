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
* ``eval WORDS`` and ``bash -c STRING`` / ``sh -c STRING`` are read as the statement they hold
  (nested at most :data:`MAX_NESTING` deep); here-documents are skipped.

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
:data:`MAX_ARITH_TOKENS` terms, every value inside bash's 64-bit range. Beyond a bound
:class:`core.io.shell_words.ShellError` names the source and the statement. Statements and
words are split by :mod:`core.io.shell_words`.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

from core.io.shell_words import (ASSIGNMENT, MAX_STATEMENT_BYTES, NAME, PARAMETER, REDIRECTIONS,
                                 SEPARATORS, Part, ShellError, Word, head, lex, statements)

__all__ = ["Shell", "read_shell", "missing_variable", "MAX_LAUNCH_BYTES", "MAX_ARITH_TOKENS",
           "ARITH_LIMIT", "MAX_NESTING", "BINOPS"]


#: Bounds of reading a launch (a launch script is a few KB; its expansion a few times that).
#: Beyond them the script is refused, so that no input makes the reader run for long:
#: ``A=$A$A`` on twenty lines doubles a value a million times over.
MAX_LAUNCH_BYTES = 2**20  # the script file, and all its statements once expanded
MAX_ARITH_TOKENS = 512  # numbers, names and operators of one $((...))
#: Integers of ``$((...))`` and of counts: |x| < 2^63, the range of bash's 64-bit arithmetic.
ARITH_LIMIT = 2**63


class _Unbounded(Exception):
    """A statement's expansion or arithmetic beyond the bounds above (``read_launch`` names
    the file and the statement)."""


#: bash's integer operators as Python functions (``/`` is integer division in bash).
BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arith(expr: str) -> int | None:
    """Integer value of a bash ``$((...))`` expression of numbers and + - * / % (), or None
    when it is not such an expression (it then stays as written).

    Raises :class:`_Unbounded` for more than :data:`MAX_ARITH_TOKENS` tokens, or a number
    or any intermediate result of :data:`ARITH_LIMIT` or more in magnitude (bash's 64-bit
    range; no launch means such a number), before Python computes anything larger.
    """
    if len(expr) > 32 * MAX_ARITH_TOKENS or \
            len(re.findall(r"\w+|[^\w\s]", expr)) > MAX_ARITH_TOKENS:
        raise _Unbounded(f"$(({expr[:20]}...)) has more than {MAX_ARITH_TOKENS} terms and "
                         "operators, more than a launch's arithmetic needs")
    if re.search(r"\d{20}", expr):  # a literal of 20 digits or more is 2^63 or more
        raise _Unbounded("arithmetic on a number of 20 digits or more, outside bash's 64-bit "
                         "range (|x| < 2^63) and any count a launch can mean")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None

    def bounded(x: int) -> int:
        if not -ARITH_LIMIT < x < ARITH_LIMIT:
            raise _Unbounded("arithmetic with a result outside bash's 64-bit range "
                             "(|x| < 2^63) and any count a launch can mean")
        return x

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return bounded(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
            return bounded(BINOPS[type(node.op)](ev(node.left), ev(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError("not integer arithmetic")

    try:
        return ev(tree)
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


# --------------------------------------------------------------------------- words

#: How deep ``eval``, ``bash -c`` and nested ``${A:-${B:-...}}`` defaults may go.
MAX_NESTING = 8


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
            raise _Unbounded(f"expands to more than {MAX_STATEMENT_BYTES // 1024} KiB, more "
                             "than a launch's statement can mean")
        if self.total[0] < 0:
            raise _Unbounded(f"the script expands to more than {MAX_LAUNCH_BYTES // 2**20} MiB, "
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
    """

    commands: list[list[str]] = field(default_factory=list)
    variables: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class _Reader:
    def __init__(self, source: str, variables: dict[str, str], positional: list[str | None]):
        self.source = source
        self.env: dict[str, str | list[str] | _Unknown] = dict(variables)
        self.given = set(variables)
        self.positional = list(positional)
        self.shell = Shell(variables=self.env)
        self.frames: list[list] = []  # [state True/False/None, a branch taken, any unknown]
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
            raise _Unbounded(f"expansions nested more than {MAX_NESTING} deep")
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
        value = _arith(expr)
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
            raise _Unbounded(f"eval or bash -c nested more than {MAX_NESTING} deep")
        tokens = lex(text)
        command: list = []
        condition = False
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if isinstance(tok, Word):
                lit = tok.literal()
                if lit is not None and command == [] and lit in ("if", "elif", "while", "until"):
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
            elif tok in SEPARATORS and not (condition and tok in ("&&", "||", "|")):
                self.command(command, prefix, depth)
                command, condition = [], False
            elif condition and tok in ("&&", "||"):
                command.append(tok)
            i += 1
        self.command(command, prefix, depth)

    def _active(self) -> bool:
        return all(f[0] is not False for f in self.frames)

    def command(self, items: list, prefix: list[str] | None, depth: int) -> None:
        while items and isinstance(items[0], Word):
            kw = items[0].literal()
            if kw in ("then", "do", "{", "}", "!", "time", "nohup", "exec", "command", "builtin",
                      "done", "esac"):
                items = items[1:]
            elif kw in ("if", "elif"):
                self._branch(kw, items[1:])
                return
            elif kw in ("else", "fi"):
                self._branch(kw, [])
                items = items[1:]
            else:
                break
        if not items or not self._active():
            return
        # assignments, and the declarations that make them
        declare = False
        while items:
            item = items[0]
            if isinstance(item, tuple):
                _, lit, elements = item
                m = ASSIGNMENT.fullmatch(lit)
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
                items = items[1:]
                continue
            if lit in ("export", "declare", "typeset", "local", "readonly") or \
                    (declare and lit is not None and lit.startswith("-")):
                declare = True
                items = items[1:]
                continue
            break
        if declare or not items:
            return
        words, _ = self.words([w for w in items if isinstance(w, Word)])
        if not words:
            return
        head = words[0].rsplit("/", 1)[-1]
        if head == "unset":
            for name in words[1:]:
                self.env.pop(name, None)
            return
        if head == "shift":
            k = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
            self.positional = self.positional[k:]
            return
        if head in ("source", "."):
            self.shell.notes.append(f"{' '.join(words[:2])}: another file is not read (its "
                                    "variables can be given with --var NAME=VALUE)")
            return
        if head == "eval":
            self.statement(" ".join(words[1:]), prefix, depth + 1)
            return
        if head == "env":
            k = 1
            while k < len(words) and ("=" in words[k] or words[k].startswith("-")):
                k += 1
            words = words[k:]
        for k, w in enumerate(words[:-1]):
            if w.rsplit("/", 1)[-1] in ("bash", "sh") and words[k + 1] == "-c" and k + 2 < len(words):
                self.statement(words[k + 2], (prefix or []) + words[:k], depth + 1)
                return
        if words:
            self.shell.commands.append((prefix or []) + words)

    # ---- conditions
    def _branch(self, kw: str, condition: list) -> None:
        if kw == "if":
            state = self._condition(condition) if self._active() else False
            self.frames.append([state, state is True, state is None])
        elif not self.frames:
            return
        elif kw == "fi":
            self.frames.pop()
        else:
            frame = self.frames[-1]
            parent = all(f[0] is not False for f in self.frames[:-1])
            if not parent or frame[1]:
                frame[0] = False
            elif kw == "else":
                frame[0] = None if frame[2] else True
            else:
                frame[0] = self._condition(condition)
                frame[1] |= frame[0] is True
                frame[2] |= frame[0] is None

    def _condition(self, items: list) -> bool | None:
        """True/False for tests of known strings and integers, None when it needs the machine
        (noted)."""
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
        if value is None:
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
            value = None if glob else _compare(vals)
        elif lit[0] in ("true", ":"):
            value = True
        elif lit[0] == "false":
            value = False
        else:
            return None
        return None if value is None else value != negate


def _compare(vals: list[str]) -> bool | None:
    """A test's value (``-z``, ``-n``, ``=``, ``==``, ``!=``, ``-eq`` ...), None for the others
    (files, patterns)."""
    negate = False
    if vals[:1] == ["!"]:
        negate, vals = True, vals[1:]
    value: bool | None = None
    if len(vals) == 1:
        value = vals[0] != ""
    elif len(vals) == 2 and vals[0] in ("-z", "-n"):
        value = (vals[1] == "") == (vals[0] == "-z")
    elif len(vals) == 3 and vals[1] in ("=", "==", "!="):
        value = (vals[0] == vals[2]) == (vals[1] != "!=")
    elif len(vals) == 3 and vals[1] in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
        try:
            a, b = int(vals[0]), int(vals[2])
        except ValueError:
            return None
        value = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-le": a <= b, "-gt": a > b,
                 "-ge": a >= b}[vals[1]]
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
        except _Unbounded as exc:
            raise ShellError(f"{source}: statement {head(stmt)}: {exc}") from None
        except ShellError as exc:
            raise ShellError(f"{source}: cannot split {head(stmt)} into shell words: {exc}"
                             ) from None
    return reader.shell
