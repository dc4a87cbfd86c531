"""The values a launch script's reader evaluates: integer ``$((...))`` arithmetic, ``[``/``[[``
tests of known strings and integers, and ``case`` patterns (:mod:`core.io.shell_reader` reads
the statements; this module holds its pure functions, bounded for any input).
"""

from __future__ import annotations

import ast
import operator
import re

__all__ = ["MAX_ARITH_TOKENS", "ARITH_LIMIT", "BINOPS", "Unbounded", "arith", "Element",
           "pattern_elements", "wildcard", "compare"]

MAX_ARITH_TOKENS = 512  # numbers, names and operators of one $((...))
#: Integers of ``$((...))`` and of counts: |x| < 2^63, the range of bash's 64-bit arithmetic.
ARITH_LIMIT = 2**63


class Unbounded(Exception):
    """A statement's expansion or arithmetic beyond the reader's bounds (these and
    :mod:`core.io.shell_reader`'s; ``read_launch`` names the file and the statement)."""


#: bash's integer operators as Python functions (``/`` is integer division in bash).
BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
          ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod}


def arith(expr: str) -> int | None:
    """Integer value of a bash ``$((...))`` expression of numbers and + - * / % (), or None
    when it is not such an expression (it then stays as written).

    Raises :class:`Unbounded` for more than :data:`MAX_ARITH_TOKENS` tokens, or a number
    or any intermediate result of :data:`ARITH_LIMIT` or more in magnitude (bash's 64-bit
    range; no launch means such a number), before Python computes anything larger.
    """
    if len(expr) > 32 * MAX_ARITH_TOKENS or \
            len(re.findall(r"\w+|[^\w\s]", expr)) > MAX_ARITH_TOKENS:
        raise Unbounded(f"$(({expr[:20]}...)) has more than {MAX_ARITH_TOKENS} terms and "
                         "operators, more than a launch's arithmetic needs")
    if re.search(r"\d{20}", expr):  # a literal of 20 digits or more is 2^63 or more
        raise Unbounded("arithmetic on a number of 20 digits or more, outside bash's 64-bit "
                         "range (|x| < 2^63) and any count a launch can mean")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None

    def bounded(x: int) -> int:
        if not -ARITH_LIMIT < x < ARITH_LIMIT:
            raise Unbounded("arithmetic with a result outside bash's 64-bit range "
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
