"""Compound commands of the launch-script reader (:mod:`core.io.shell_reader`): ``case``,
function definitions and calls, loops (``for``, ``while``, ``until``), subshells and the
arithmetic command, with the state they keep (open frames, kept bodies, running calls) and the
bounds that keep them short. :class:`CompoundCommands` is a part of the reader
(``core.io.shell_reader._Reader`` derives from it): its methods read the reader's variables,
frames and notes and call its statement, list and expansion methods. Nothing is run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.io.shell_values import Element, Unbounded, pattern_elements, wildcard
from core.io.shell_words import NAME, REDIRECTIONS, Part, Word, missing_variable

__all__ = ["MAX_LAUNCH_BYTES", "MAX_NESTING", "MAX_LOOP_ITERATIONS", "CompoundCommands", "Unknown",
           "Refused", "ReturnFromFunction", "Exit", "Break", "Frame", "Definition", "Call"]

#: Bounds of reading a launch (a launch script is a few KB; its expansion a few times that).
#: Beyond them the script is refused, so that no input makes the reader run for long:
#: ``A=$A$A`` on twenty lines doubles a value a million times over.
MAX_LAUNCH_BYTES = 2**20  # the script file, and all its statements once expanded
#: How deep ``eval``, ``bash -c`` and nested ``${A:-${B:-...}}`` defaults may go.
MAX_NESTING = 8
#: How many times one loop's body may be read (``while true`` without a ``break`` bash
#: certainly reaches never ends; no launch loops this often over what it is read from).
MAX_LOOP_ITERATIONS = 1024


@dataclass
class Unknown:
    """A variable whose value the reader cannot know (assigned from a command's output, or
    from another unknown value)."""

    why: str


class Refused(Exception):
    """A construct the reader does not read (``read_shell`` names the file and the statement)."""


class ReturnFromFunction(Exception):
    """``return`` in a function bash certainly reaches: the rest of its body is not read."""


class Exit(Exception):
    """``exit`` bash certainly reaches outside a subshell: the rest of the script is not read."""


class Break(Exception):
    """``break`` (``continue``: ``again`` True) in a loop bash certainly reaches, leaving
    ``levels`` loops (``break 2``)."""

    def __init__(self, again: bool = False, levels: int = 1):
        super().__init__()
        self.again, self.levels = again, levels


@dataclass
class Frame:
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
class Definition:
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
class Call:
    """A function being run: where its frames start and the values its ``local`` hides."""

    base: int
    saved: dict = field(default_factory=dict)  # name -> value before the call (None: unset)


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
            raise Refused(f"the brace expansion in {w.raw!r} is not read (vtrain reads "
                           "{N..M} and {a,b} as a whole word)")
        out.append(w)
    return out


class CompoundCommands:
    """The reader's compound commands (see the module doc); mixed into
    ``core.io.shell_reader._Reader``, whose state (``env``, ``frames``, ``functions``, ``body``,
    ``calls``, ``loops``, ``positional``, ``shell``, ``total``) and methods they use."""

    def _compound(self, tokens: list, i: int, keywords: list, chain: Any,
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
                raise Refused(f"a {lit} loop after {chain.op} is not read")
            if lit == "select":
                raise Refused("a select loop (a menu read from the terminal) is not read")
            self._list_item(keywords, chain, prefix, depth)  # then, else, {
            self.body = Definition(lit, self._active(), loop=True)
            return i + 1
        if lit == "case" or lit == "function" or (
                lit is not None and NAME.fullmatch(lit) and nxt == "("
                and tokens[i + 2:i + 3] == [")"]):
            if chain.op is not None:
                raise Refused(f"a {'case' if lit == 'case' else 'function definition'} after "
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
            raise Refused("a case is read only as 'case WORD in' on one line")
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
        self.frames.append(Frame("case", False, word=value))
        return i + 3

    def _pattern(self, tokens: list, i: int, case: Frame) -> int:
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
            raise Refused("a case pattern is read only as words joined by | and closed by ) "
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
                raise Refused("a function is read only as 'function NAME {' or 'NAME() {'")
            i += 2
            if tokens[i:i + 2] == ["(", ")"]:
                i += 2
        else:
            name = tokens[i].literal()
            i += 3
        self.body = Definition(name, self._active())
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
                raise Refused(f"function {body.name}: only a body in {{ ... }} is read")
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
    def _loop(self, loop: Definition, prefix: list[str] | None, depth: int) -> bool | None:
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
                raise Refused("a for loop is read only as 'for NAME in WORDS; do ... done' "
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
                self.env[name] = Unknown(missing[0])
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

    def _iterate(self, loop: Definition, prefix: list[str] | None, depth: int
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
        except Break as stop:
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
            raise Refused(f"the arithmetic command (( {text[:40]} )) is not read (vtrain reads "
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
        self.calls.append(Call(base))
        try:
            self._tokens(body.tokens, None, depth + 1)
        except ReturnFromFunction:
            pass
        finally:
            del self.frames[base:]
            self.positional = positional
            for var, old in self.calls.pop().saved.items():
                if old is None:
                    self.env.pop(var, None)
                else:
                    self.env[var] = old
