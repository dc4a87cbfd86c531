"""The values a launch script's reader evaluates: integer ``$((...))`` arithmetic, ``[``/``[[``
tests of known strings and integers, and ``case`` patterns (:mod:`core.io.shell_reader` reads
the statements; this module holds its pure functions, bounded for any input).
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable

__all__ = ["MAX_ARITH_TOKENS", "MAX_ARITH_NESTING", "ARITH_LIMIT", "BINOPS", "Unbounded",
           "BashArithmeticError", "arith", "Element",
           "pattern_elements", "wildcard", "compare"]

MAX_ARITH_TOKENS = 512  # numbers, names and operators of one $((...))
#: Integers of ``$((...))`` and of counts: |x| < 2^63, the range of bash's 64-bit arithmetic.
ARITH_LIMIT = 2**63


class Unbounded(Exception):
    """A statement's expansion or arithmetic beyond the reader's bounds (these and
    :mod:`core.io.shell_reader`'s; ``read_launch`` names the file and the statement)."""


#: bash's integer operators as Python functions (``/`` is integer division in bash), for
#: readers of other arithmetic (:mod:`core.io.megatron.model_arguments`' list patterns).
BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}

#: Nesting of variables whose values are arithmetic (``A=B+1``, ``B=C*2`` ...) the reader
#: follows in one ``$((...))`` (bash's own limit is 1,024).
MAX_ARITH_NESTING = 16

_ARITH_TOKEN = re.compile(r"\s*(?:(?P<num>[0-9][0-9A-Za-z@_#]*)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                          r"|(?P<op>\*\*|[-+*/%()]))")


class BashArithmeticError(Exception):
    """A ``$((...))`` bash itself stops the script on (division by zero, a digit beyond its
    base, a negative exponent: bash prints the error and exits); ``read_launch`` names the
    file and the statement."""


class _NotEvaluated(Exception):
    """An operator, a name without a value or a form the reader does not evaluate."""


def _constant(token: str) -> int:
    """The value of a bash integer constant (``help let``): decimal, ``0`` octal, ``0x`` hex or
    ``BASE#DIGITS`` with BASE 2 to 64 and the digits 0-9, a-z, A-Z, @ and _ (letters of either
    case are 10-35 up to base 36). Raises :class:`BashArithmeticError` where bash does."""
    if len(token) > 70:  # base 2 needs at most 64 digits below 2^63
        raise Unbounded(f"arithmetic on a number of {len(token):,} characters, outside bash's "
                        "64-bit range (|x| < 2^63) and any count a launch can mean")
    if "#" in token:
        base_text, digits = token.split("#", 1)
        if not base_text.isdecimal() or not 2 <= int(base_text) <= 64:
            raise BashArithmeticError(f"{token}: invalid arithmetic base (bash takes 2 to 64)")
        base = int(base_text)
    elif token[:2] in ("0x", "0X"):
        base, digits = 16, token[2:]
    elif token[:1] == "0" and len(token) > 1:
        base, digits = 8, token[1:]
    else:
        base, digits = 10, token
    if not digits:
        raise BashArithmeticError(f"{token}: invalid integer constant")
    value = 0
    for c in digits:
        if "0" <= c <= "9":
            d = ord(c) - ord("0")
        elif "a" <= c <= "z":
            d = ord(c) - ord("a") + 10
        elif "A" <= c <= "Z":
            d = ord(c) - ord("A") + (36 if base > 36 else 10)
        else:
            d = {"@": 62, "_": 63}.get(c, 64)
        if d >= base:
            raise BashArithmeticError(f"{token}: value too great for base ({base})")
        value = value * base + d
    return value


def arith(expr: str, lookup: Callable[[str], str | None] = lambda name: None) -> int | None:
    """Integer value of a bash ``$((...))`` expression of integer constants (:func:`_constant`),
    variables, unary ``+ -``, ``**``, ``* / %``, ``+ -`` and parentheses, evaluated as bash
    does (64-bit integers; ``/`` and ``%`` truncate toward zero, as in C; ``**`` binds to the
    right and below the unary signs: ``-2**2`` is 4), or None when it holds another operator
    or a variable without a value (it then stays as written).

    ``lookup(name)`` gives a variable's value, None when it has none; the value is itself
    evaluated as arithmetic, as bash does (``A=1+2``: ``$((A*3))`` is 9), an empty one as 0.

    Raises :class:`Unbounded` for more than :data:`MAX_ARITH_TOKENS` tokens, or a number
    or any intermediate result of :data:`ARITH_LIMIT` or more in magnitude (bash's 64-bit
    range; no launch means such a number), before Python computes anything larger, and
    :class:`BashArithmeticError` where bash stops the script (division by zero, a digit
    beyond its base, a negative exponent).
    """
    if len(expr) > 32 * MAX_ARITH_TOKENS or \
            len(re.findall(r"\w+|[^\w\s]", expr)) > MAX_ARITH_TOKENS:
        raise Unbounded(f"$(({expr[:20]}...)) has more than {MAX_ARITH_TOKENS} terms and "
                        "operators, more than a launch's arithmetic needs")
    try:
        return _evaluate(expr, lookup, 0)
    except _NotEvaluated:
        return None
    except BashArithmeticError as exc:
        raise BashArithmeticError(f"$(({expr.strip()[:40]})): {exc}") from None
    except RecursionError:
        raise Unbounded(f"$(({expr[:20]}...)) nests its parentheses deeper than a launch's "
                        "arithmetic needs") from None


def _bounded(x: int) -> int:
    if not -ARITH_LIMIT < x < ARITH_LIMIT:
        raise Unbounded("arithmetic with a result outside bash's 64-bit range "
                        "(|x| < 2^63) and any count a launch can mean")
    return x


def _tokens(expr: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(expr):
        m = _ARITH_TOKEN.match(expr, i)
        if m is None or m.end() == i:
            if expr[i:].strip():
                raise _NotEvaluated
            break
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        i = m.end()
    return out


def _evaluate(expr: str, lookup: Callable[[str], str | None], depth: int) -> int:
    """:func:`arith`'s recursive descent (precedence of bash's ``help let``, the operators
    the reader evaluates)."""
    if depth > MAX_ARITH_NESTING:
        raise _NotEvaluated
    toks = _tokens(expr)
    if not toks:
        if depth:  # an empty variable is 0 in bash's arithmetic
            return 0
        raise _NotEvaluated
    pos = 0

    def peek() -> tuple[str, str] | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> tuple[str, str]:
        nonlocal pos
        if pos >= len(toks):
            raise _NotEvaluated
        pos += 1
        return toks[pos - 1]

    def operand() -> int:
        kind, text = take()
        if kind == "num":
            return _bounded(_constant(text))
        if kind == "name":
            value = lookup(text)
            if value is None:
                raise _NotEvaluated
            return _evaluate(value, lookup, depth + 1)
        if text == "(":
            value = additive()
            if take() != ("op", ")"):
                raise _NotEvaluated
            return value
        raise _NotEvaluated

    def unary() -> int:
        if peek() in (("op", "-"), ("op", "+")):
            sign = take()[1]
            value = unary()
            return -value if sign == "-" else value
        return operand()

    def power() -> int:
        base = unary()
        if peek() != ("op", "**"):
            return base
        take()
        exponent = power()  # right-associative
        if exponent < 0:
            raise BashArithmeticError("exponent less than 0")
        if exponent == 0:
            return 1
        if base in (0, 1):
            return base
        if base == -1:
            return -1 if exponent % 2 else 1
        if exponent >= 64:
            raise Unbounded("arithmetic with a result outside bash's 64-bit range "
                            "(|x| < 2^63) and any count a launch can mean")
        return _bounded(base ** exponent)

    def multiplicative() -> int:
        value = power()
        while peek() in (("op", "*"), ("op", "/"), ("op", "%")):
            op = take()[1]
            right = power()
            if op == "*":
                value = _bounded(value * right)
                continue
            if right == 0:
                raise BashArithmeticError("division by 0")
            q = abs(value) // abs(right)
            q = q if (value >= 0) == (right > 0) else -q  # C's division: toward zero
            value = _bounded(q if op == "/" else value - right * q)
        return value

    def additive() -> int:
        value = multiplicative()
        while peek() in (("op", "+"), ("op", "-")):
            op = take()[1]
            right = multiplicative()
            value = _bounded(value + right if op == "+" else value - right)
        return value

    result = additive()
    if pos != len(toks):
        raise _NotEvaluated
    return result


#: One character of a bash pattern: (negated, ranges) — a character c matches when it lies in
#: a range, unless negated: ``a`` is (False, (("a", "a"),)), ``?`` (True, ()), ``[!0-9]``
#: (True, (("0", "9"),)); ``*`` is the string "*".
Element = tuple[bool, tuple[tuple[str, str], ...]] | str


def pattern_elements(text: str, quoted: bool) -> list[Element] | None:
    """The elements of a bash pattern's text (``*``, ``?``, ``[abc]``, ``[!a-z]`` unless
    ``quoted``; other characters stand for themselves); None for a POSIX class ``[[:digit:]]``,
    which the reader does not read."""
    out: list[Element] = []
    i = 0
    while i < len(text):
        c = text[i]
        end = text.find("]", i + 2) if c == "[" and not quoted else -1
        if quoted or c not in "*?[" or (c == "[" and end < 0):
            out.append((False, ((c, c),)))
        elif c == "*":
            out.append("*")
        elif c == "?":
            out.append((True, ()))
        else:
            body = text[i + 1:end]
            if "[:" in body:
                return None
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            ranges, k = [], 0
            while k < len(body):
                if k + 2 < len(body) and body[k + 1] == "-":
                    ranges.append((body[k], body[k + 2]))
                    k += 3
                else:
                    ranges.append((body[k], body[k]))
                    k += 1
            out.append((negate, tuple(ranges)))
            i = end
        i += 1
    return out


def wildcard(pattern: list[Element], value: str) -> bool:
    """Whether ``value`` matches ``pattern`` (:func:`pattern_elements`) whole: the two-pointer match,
    going back only to the last ``*``, in O(len(pattern) * len(value)) steps for any input."""
    p = v = 0
    star, mark = -1, 0
    while v < len(value):
        e = pattern[p] if p < len(pattern) else None
        if e == "*":
            star, mark = p, v
            p += 1
        elif e is not None and any(lo <= value[v] <= hi for lo, hi in e[1]) != e[0]:
            p, v = p + 1, v + 1
        elif star >= 0:
            p, mark = star + 1, mark + 1
            v = mark
        else:
            return False
    return all(e == "*" for e in pattern[p:])


def compare(vals: list[str]) -> bool | None:
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
