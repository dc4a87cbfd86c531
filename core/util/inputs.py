"""Reading input files defensively: regular files only, bounded sizes, bounded JSON nesting.

Every reader of a user's file (session, authors' JSON, job trace, measurement CSV,
nccl-tests output, profile store) comes through here before it parses anything:

* FIFOs, devices, sockets and folders are refused *before* they are opened for
  reading (opening a FIFO would block until a writer appears; a device can be
  endless), and again on the open descriptor (the path could have changed);
* a file larger than its kind's limit (:data:`MAX_BYTES`) is refused before it is
  read, so a mistaken path to a disk image cannot exhaust memory;
* JSON nested deeper than :data:`MAX_JSON_DEPTH` is refused before ``json`` parses
  it (Python's parser recurses and would raise ``RecursionError``); ``NaN`` and
  ``Infinity``, which are not JSON, are refused by name, and so is an integer beyond
  the range of a float (:data:`MAX_JSON_INTEGER`), before anything converts it.

Errors are raised as the caller's error class, with one line naming the file and the rule.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from core.util.text import printable, short_repr

__all__ = ["MAX_BYTES", "MAX_JSON_DEPTH", "read_bytes", "read_text", "read_json_file",
           "parse_json", "json_depth", "check_regular_file", "nonfinite_path", "strict_dumps",
           "NonFiniteError", "MAX_JSON_INTEGER", "describe_number", "parse_json_or_text", "duplicate_key_path",
           "read_toml_file", "json_object_pairs", "decimal_number", "DecimalUnderflowError",
           "MAX_YAML_NODES", "parse_yaml", "read_yaml_file",
           "HDF5_SIGNATURE"]

#: Largest file of each kind that is read, bytes. Sessions and configs are a few KB;
#: a measurement CSV or nccl-tests log a few hundred KB; profile stores a few MB.
MAX_BYTES = {
    "json": 16 * 2**20,
    "csv": 64 * 2**20,
    "text": 64 * 2**20,
    # a Megatron-Bridge run_config.yaml (core.io.bridge_import): tens of KB (a data blend of
    # 10,000 shards' paths, a megabyte); PyYAML's Python parser reads about 100 KB of nodes a
    # second (MAX_YAML_NODES stops it; 16 MiB froze the window a minute)
    "yaml": 4 * 2**20,
    "launch": 2**20,  # a launch script (core.io.shell_reader.MAX_LAUNCH_BYTES): a few KB
    "store": 512 * 2**20,
    # a PyTorch profiler (Kineto) trace of one rank, after gunzip: tens of MB for a few steps
    "trace": 256 * 2**20,
}
#: Deepest nesting of arrays and objects a JSON input may have (sessions need 4).
MAX_JSON_DEPTH = 64
#: The first bytes of an HDF5 file (the HDF5 File Format Specification, "Format Signature"): a
#: profile store given where a JSON file is read is named so.
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

#: Largest magnitude of a JSON integer that is read (the largest float, about 1.8e308): a
#: larger one cannot be a number of any field (``1e400`` is refused alike), and converting it
#: to a float would raise ``OverflowError``. Field bounds (``core.plan.fields.BOUNDS``) are far less.
MAX_JSON_INTEGER = int(sys.float_info.max)
#: Digits of :data:`MAX_JSON_INTEGER`: a longer literal is never turned into an int at all.
_MAX_INT_DIGITS = len(str(MAX_JSON_INTEGER))

#: A JSON string literal; one left open runs to the end of the text (JSON cannot parse it
#: anyway). Every ``"`` starts a match, so the scan is linear: with a closing quote required,
#: each of the many ``\\"`` of an open string would start a scan to the end (quadratic).
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.S)


#: A number as a text file (CSV cell, log column) writes it: ASCII digits, an optional sign,
#: point and exponent. Python's ``float()`` takes more: ``1_5`` (15), ``nan``, ``infinity``,
#: other scripts' digits.
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


class DecimalUnderflowError(ValueError):
    """A decimal that is not zero but below the smallest normal double (``1e-400``,
    ``0.000…01`` with 400 zeros): ``float()`` reads it as 0.0, a number the text does not
    give. Its text is the whole rule (:func:`underflow_rule`), for the caller to prefix with
    the file, field or option."""


def underflow_rule(text: str) -> str:
    """The words refusing the decimal ``text`` that reads as 0.0 though a digit of it is not
    0: ``'1e-400' is below 2.2e-308, the smallest normal double, in magnitude (it would read
    as 0): give 0 or a normal number``."""
    return (f"{short_repr(text.strip())} is below {sys.float_info.min:.2g}, the smallest normal "
            "double, in magnitude (it would read as 0): give 0 or a normal number")


def _underflows(text: str, value: float) -> bool:
    """Whether the decimal ``text`` (matching :data:`_DECIMAL`, or a JSON number) that
    ``float()`` read as ``value`` lost every digit: 0.0 from a significand with a nonzero
    digit (``1e-400``; never ``0e5`` or ``-0.0``)."""
    if value != 0.0:
        return False
    significand = text.strip().lower().partition("e")[0]
    return any(c in "123456789" for c in significand)


def decimal_number(text: str) -> float:
    """``text`` (surrounding blanks ignored) as a float when it is a decimal number
    (:data:`_DECIMAL`) or spells NaN or infinity (``nan``, ``inf``, ``-Infinity``: the caller
    refuses those by name, as it refuses ``1e400``, which is infinite); ValueError for any
    other text (``1_5``, which ``float()`` reads as 15, ``0x10``, other scripts' digits).
    A decimal of any length is read (the pattern and ``float()`` are linear in it): a
    401-digit integer is infinite, refused as such, never "not a number". A nonzero decimal
    below the smallest normal double that reads as 0.0 (``1e-400``) raises
    :class:`DecimalUnderflowError` (a ValueError; its text names the rule), never 0.0 that a
    caller would then call "0.0 is not a positive number"; a subnormal one (``1e-320``) is
    returned, for the caller's own rule."""
    t = text.strip()
    if t.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(t)
    if not _DECIMAL.fullmatch(t):
        raise ValueError(f"{t[:40]!r} is not a decimal number")
    value = float(t)
    if _underflows(t, value):
        raise DecimalUnderflowError(underflow_rule(t))
    return value


def _fail(error: type[Exception], path: Path, rule: str) -> Exception:
    return error(f"{path}: {rule}")


def check_regular_file(path: str | Path, error: type[Exception], max_bytes: int,
                       st: os.stat_result | None = None) -> os.stat_result:
    """Raise ``error`` unless ``path`` (or its ``st``) is a regular file of at most ``max_bytes``.

    Returns the ``os.stat`` result. A missing or unreadable path raises ``error`` too.
    """
    path = Path(path)
    if st is None:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _fail(error, path, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise _fail(error, path, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise _fail(error, path, "is not a regular file (a FIFO, device or socket is not read)")
    if st.st_size > max_bytes:
        raise _fail(error, path, f"is {st.st_size:,} bytes, more than the {max_bytes:,} bytes "
                                 "a file of this kind may have")
    return st


def read_bytes(path: str | Path, error: type[Exception], kind: str = "json") -> bytes:
    """The bytes of the regular file ``path``, at most ``MAX_BYTES[kind]`` of them.

    Raises ``error`` (naming the file) for a missing, unreadable, non-regular or too large file.
    """
    path = Path(path)
    limit = MAX_BYTES[kind]
    check_regular_file(path, error, limit)
    try:
        # O_NONBLOCK: should the path have become a FIFO since the check, open does not wait
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise _fail(error, path, f"cannot read: {exc.strerror or exc}") from None
    try:
        check_regular_file(path, error, limit, os.fstat(fd))
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise _fail(error, path, f"is more than the {limit:,} bytes a file of this kind "
                                         "may have")
            chunks.append(chunk)
    except OSError as exc:
        raise _fail(error, path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text(path: str | Path, error: type[Exception], kind: str = "text",
              encoding: str = "utf-8-sig") -> str:
    """The text of ``path`` (see :func:`read_bytes`); ``error`` if it is not ``encoding``."""
    data = read_bytes(path, error, kind)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise _fail(error, Path(path), f"is not {encoding.replace('-sig', '')} text "
                                       f"(byte {exc.start})") from None


def json_depth(data: bytes) -> int:
    """Deepest nesting of ``[`` and ``{`` in JSON text ``data`` (brackets in strings ignored).

    Linear in the size, without recursion (numpy over the bytes).
    """
    if b"[" not in data and b"{" not in data:
        return 0
    import numpy as np  # here: reading a file must not make ``vtrain --help`` load numpy

    stripped = _STRING.sub(b'""', data)
    a = np.frombuffer(stripped, dtype=np.uint8)
    step = (np.isin(a, (ord("["), ord("{"))).astype(np.int32)
            - np.isin(a, (ord("]"), ord("}"))).astype(np.int32))
    return int(np.cumsum(step).max(initial=0))


class _HugeInteger:
    """A JSON integer literal of more digits than any number (kept as its digit count only)."""

    __slots__ = ("digits", "negative")

    def __init__(self, text: str):
        self.negative = text.startswith("-")
        self.digits = len(text) - self.negative


class _TinyDecimal:
    """A JSON number literal that is not zero but reads as 0.0 (``1e-400``: below the smallest
    normal double), kept as its text for the refusal (:func:`underflow_rule`)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _parse_float(text: str) -> float | _TinyDecimal:
    """``json``'s float hook: a float, or a :class:`_TinyDecimal` for a nonzero literal that
    ``float()`` reads as 0.0."""
    value = float(text)
    return _TinyDecimal(text) if _underflows(text, value) else value


def _parse_int(text: str) -> int | _HugeInteger:
    """``json``'s integer hook: an int, or a :class:`_HugeInteger` for a literal too long to
    be a number (never converted: ``int()`` of 4,300 digits or more raises)."""
    return int(text) if len(text) <= _MAX_INT_DIGITS + 1 else _HugeInteger(text)


class _Duplicated(dict):
    """A JSON object that gave a key twice (``json`` would keep the last value silently); the
    first such key is ``duplicate``."""

    duplicate: str = ""


def _object(pairs: list[tuple[str, Any]]) -> dict:
    """``json``'s object hook: a dict, or a :class:`_Duplicated` one when a key repeats."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    out = _Duplicated(obj)
    out.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
    return out


def json_object_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """``json``'s ``object_pairs_hook`` that notes a repeated key: a dict, or a dict that
    :func:`duplicate_key_path` finds when a key of ``pairs`` repeats (``json`` would keep the
    last value silently)."""
    return _object(pairs)


def duplicate_key_path(doc: Any) -> str | None:
    """Dotted path (``model.num_layers``) of the first key a parsed document's object gives
    twice, or None. Iterative."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, _Duplicated):
            return f"{where}.{node.duplicate}" if where else node.duplicate
        if isinstance(node, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(node))))
    return None


def _too_large(node: Any) -> bool:
    """Whether ``node`` is an integer beyond :data:`MAX_JSON_INTEGER` in magnitude, or a
    nonzero decimal below the smallest normal double (a :class:`_TinyDecimal`)."""
    if isinstance(node, (_HugeInteger, _TinyDecimal)):
        return True
    return (isinstance(node, int) and not isinstance(node, bool)
            and not -MAX_JSON_INTEGER <= node <= MAX_JSON_INTEGER)


def describe_number(value: Any) -> str:
    """How a message shows a number that cannot be used: ``NaN``, ``Infinity``, ``-Infinity``,
    or ``an integer of 401 digits`` (never the digits themselves, nor a float conversion)."""
    if isinstance(value, _TinyDecimal):
        return short_repr(value.text)
    if isinstance(value, _HugeInteger) or (isinstance(value, int) and not isinstance(value, bool)):
        if isinstance(value, _HugeInteger):
            digits, negative = value.digits, value.negative
        else:  # exact below 4,000 digits; from the bit length above (str() of 4,300 raises)
            bits = abs(value).bit_length()
            digits = (len(str(abs(value))) if bits < 13_000
                      else max(1, int(bits * 0.30103) + 1))
            negative = value < 0
            if abs(value) < 10**18:
                return str(value)
        return f"{'a negative' if negative else 'an'} integer of about {digits:,} digits"
    value = float(value)
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def nonfinite_path(doc: Any) -> tuple[str, Any] | None:
    """Dotted path (``cost.price_per_gpu_hour_usd``, ``jobs[3].tokens``) and value of the first
    number in a parsed document that is not finite (``NaN``, ``Infinity``) or is an integer
    beyond :data:`MAX_JSON_INTEGER` in magnitude, or None. Iterative (the depth is bounded
    anyway); an integer is compared as an integer, never converted to a float."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node) or _too_large(node) or (
                type(node).__module__ == "numpy" and hasattr(node, "dtype")
                and node.dtype.kind == "f" and not math.isfinite(float(node))):
            return where or "(top level)", node
        if isinstance(node, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(node))))
    return None


def _refusal(value: Any) -> str:
    """The rule a value found by :func:`nonfinite_path` breaks."""
    if isinstance(value, _TinyDecimal):
        return underflow_rule(value.text)
    if isinstance(value, (int, _HugeInteger)) and not isinstance(value, bool):
        return (f"{describe_number(value)} is beyond the range of any number (at most about "
                "1.8e308 in magnitude)")
    return f"{describe_number(value)} must be a finite number"


def parse_json(data: bytes | str, where: str, error: type[Exception]) -> Any:
    """Parse JSON text strictly: nesting at most :data:`MAX_JSON_DEPTH`; ``NaN``, ``Infinity``,
    numbers too large for a float (``1e400``) and integers beyond :data:`MAX_JSON_INTEGER`
    (a 401-digit literal; it is never converted) are refused naming the key that holds them,
    and so is a key an object gives twice (``json`` would keep the last one silently: an
    edit to the first would be lost).

    Bytes are decoded before the nesting is counted: a binary file (an HDF5 profile store, a
    gzip file) is "not UTF-8 text", an HDF5 file named so, never "nested 73 levels deep" from
    the bracket bytes in its data.

    Raises ``error`` naming ``where`` on any problem (never ``RecursionError`` or
    ``OverflowError``).
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if isinstance(data, bytes):
        if raw.startswith(HDF5_SIGNATURE):
            raise error(f"{where}: an HDF5 file (such as a profile store), not JSON text")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise error(f"{where}: not a valid JSON file (not UTF-8 text at byte {exc.start})") from None
    else:
        text = data
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise error(f"{where}: JSON nested {depth} levels deep, more than {MAX_JSON_DEPTH}")
    try:
        doc = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                         object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise error(f"{where}: not a valid JSON file ({exc})") from None
    except ValueError as exc:  # pragma: no cover - long integers are kept as _HugeInteger
        raise error(f"{where}: not a valid JSON file ({exc})") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise error(f"{where}: JSON nested too deeply") from None
    bad = nonfinite_path(doc)
    if bad is not None:
        raise error(f"{where}: {bad[0]}: {_refusal(bad[1])}")
    twice = duplicate_key_path(doc)
    if twice is not None:
        raise error(f"{where}: {printable(twice)}: given twice in one object; a key is given "
                    "once (which value was meant is unknown)")
    return doc


def parse_json_or_text(text: str, error: type[Exception]) -> Any:
    """``text`` as a JSON value (``4``, ``true``, ``null``, ``"x"``, ``[1, 2]``) under the rules
    of :func:`parse_json`, or ``text`` itself when it is not JSON (``H100 SXM``): a command
    line's ``--set FIELD=VALUE``.

    Raises ``error`` with the rule alone (the caller names the option) for JSON nested deeper
    than :data:`MAX_JSON_DEPTH` (never ``RecursionError``), ``NaN``, ``Infinity``, ``1e400``
    and integers beyond :data:`MAX_JSON_INTEGER` (never taken as text, nor converted).
    """
    depth = json_depth(text.encode("utf-8", "surrogatepass"))
    if depth > MAX_JSON_DEPTH:
        raise error(f"JSON nested {depth} levels deep, more than {MAX_JSON_DEPTH}")
    try:
        value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                         object_pairs_hook=_object)
    except (ValueError, RecursionError):  # not JSON: the text itself
        return text
    bad = nonfinite_path(value)
    if bad is not None:
        inner = "" if bad[0] == "(top level)" else f"{bad[0]}: "
        raise error(f"{inner}{_refusal(bad[1])}")
    twice = duplicate_key_path(value)
    if twice is not None:
        raise error(f"{printable(twice)}: given twice in one object; a key is given once")
    return value


def _depth(doc: Any) -> int:
    """Deepest nesting of lists and dicts in a parsed document (iterative)."""
    deepest, stack = 0, [(doc, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def read_toml_file(path: str | Path, error: type[Exception]) -> dict[str, Any]:
    """Read and parse the TOML file ``path`` under the rules of the JSON readers: a regular
    file of bounded size (:func:`read_bytes`, ``json``'s limit: a FIFO never blocks), UTF-8,
    nesting (arrays, tables, dotted keys) at most :data:`MAX_JSON_DEPTH`, no ``nan`` or
    ``inf`` and no integer beyond :data:`MAX_JSON_INTEGER` (named by its dotted key).

    Raises ``error`` naming the file on any problem (never ``RecursionError``, or the
    ``ValueError`` of an integer of 4,300 digits or more).
    """
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    path = Path(path)
    data = read_bytes(path, error, "json")
    try:
        doc = tomllib.loads(data.decode("utf-8-sig"), parse_float=_parse_float)
    except UnicodeDecodeError as exc:
        raise _fail(error, path, f"is not TOML: not UTF-8 text at byte {exc.start}") from None
    except RecursionError:
        raise _fail(error, path, f"is not TOML this program reads: nested more than "
                                 f"{MAX_JSON_DEPTH} levels deep") from None
    except tomllib.TOMLDecodeError as exc:
        raise _fail(error, path, f"is not TOML: {exc}") from None
    except ValueError:  # int() of an integer literal of 4,300 digits or more
        raise _fail(error, path, "an integer of 4,300 digits or more is beyond the range of any "
                                 "number (at most about 1.8e308 in magnitude)") from None
    depth = _depth(doc)
    if depth > MAX_JSON_DEPTH:
        raise _fail(error, path, f"TOML nested {depth} levels deep, more than {MAX_JSON_DEPTH}")
    bad = nonfinite_path(doc)
    if bad is not None:
        raise _fail(error, path, f"{printable(bad[0])}: {_refusal(bad[1])}")
    return doc


def read_json_file(path: str | Path, error: type[Exception]) -> Any:
    """Read and parse the JSON file ``path`` (:func:`read_bytes`, then :func:`parse_json`)."""
    return parse_json(read_bytes(path, error, "json"), str(path), error)


class NonFiniteError(ValueError):
    """A document to be written holds Infinity or NaN (which JSON does not allow)."""


def strict_dumps(doc: Any, what: str = "result", **kwargs: Any) -> str:
    """``json.dumps(doc, allow_nan=False, **kwargs)``: strict JSON, never ``Infinity`` or ``NaN``.

    Raises
    ------
    NonFiniteError
        Naming the key (``what.key[3]``) that holds a non-finite number; nothing is written.
    """
    try:
        return json.dumps(doc, allow_nan=False, **kwargs)
    except ValueError:
        bad = nonfinite_path(doc)
        where = f"{what}.{bad[0]}" if bad else what
        value = describe_number(bad[1]) if bad else "a non-finite number"
        raise NonFiniteError(f"{where} is {value}, not a finite number; nothing written") from None


#: Most values (mappings, lists, scalars and keys, with every alias expanded) a YAML input may
#: hold: a Megatron-Bridge run_config.yaml holds a few hundred. Bounds the time and memory of
#: every walk over the parsed document, however its anchors and aliases nest ("billion laughs":
#: nine aliases of nine aliases ... expand a few hundred bytes to 9**9 values).
MAX_YAML_NODES = 100_000

#: The spellings of numbers that YAML 1.1 (PyYAML) and YAML 1.2 / JSON read alike: decimal
#: integers, decimal floats with a signed exponent (PyYAML reads ``1e3`` and ``1.0e3`` as text:
#: its float needs a point and a sign in the exponent), ``.inf`` and ``.nan``.
_YAML_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)", re.ASCII)
_YAML_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+][0-9]+)?"
                         r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", re.ASCII)
#: A plain scalar that YAML 1.2's core schema (and JSON, for the first) reads as a number
_YAML12_NUMBER = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                            r"|0o[0-7]+|0x[0-9a-fA-F]+", re.ASCII)
_YAML_TAG = "tag:yaml.org,2002:"


def _yaml_line(node: Any) -> int:
    return node.start_mark.line + 1


def _yaml_scalar_rule(node: Any, path: str, nonfinite_ok: Any) -> str | None:
    """The rule a scalar node breaks (None: none): a type JSON has not, or a spelling that YAML
    1.1 (PyYAML, as Megatron-Bridge reads it) and YAML 1.2 / JSON read differently."""
    tag, text = node.tag, node.value
    kind = tag[len(_YAML_TAG):] if tag.startswith(_YAML_TAG) else tag
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            word = "true" if text.lower() in ("yes", "on", "y") else "false"
            return (f"{printable(text)} is {word} to YAML 1.1 (PyYAML, which Megatron-Bridge "
                    f"reads the file with) and text to YAML 1.2: write {word}, or quote "
                    f"'{printable(text)}' for text")
    elif kind == "int":
        if _YAML_INT.fullmatch(text) is None:
            return (f"{printable(text)[:40]} is an integer to YAML 1.1 (PyYAML) written in "
                    "octal, hexadecimal, binary, base 60 or with underscores, which YAML 1.2 and "
                    "JSON read otherwise: write it in decimal, or quote it for text")
        if len(text.lstrip("+-")) > _MAX_INT_DIGITS:
            return (f"an integer of {len(text.lstrip('+-')):,} digits is beyond the range of any "
                    "number (at most about 1.8e308 in magnitude)")
    elif kind == "float":
        if _YAML_FLOAT.fullmatch(text) is None:
            return (f"{printable(text)[:40]} is a number to YAML 1.1 (PyYAML) written in base 60 "
                    "or with underscores, which YAML 1.2 and JSON read otherwise: write it as "
                    "a decimal (1.5, 1.0e-05), or quote it for text")
        bare = text.lower().lstrip("+-")
        value = (math.nan if bare == ".nan" else -math.inf if bare == ".inf" and text[0] == "-"
                 else math.inf if bare == ".inf" else float(text))
        if not math.isfinite(value) and not (value == math.inf and path in nonfinite_ok):
            return f"{describe_number(value)} ({printable(text)[:40]}) must be a finite number"
        if _underflows(text, value):  # 1.0e-400: never read as 0.0
            return underflow_rule(text)
    elif kind == "str":
        if not node.style and _YAML12_NUMBER.fullmatch(text):  # plain (libyaml: '')
            if text[:2] in ("0o", "0x"):
                number = int(text[2:], 8 if text[1] == "o" else 16)
                write = f"{number} (decimal)"
            elif text.lstrip("+-").isdigit():  # 09: no octal to YAML 1.1, so text
                number = int(text) if len(text) <= _MAX_INT_DIGITS else math.inf
                write = f"{number}"
            else:
                import yaml
                number = float(text)
                write = yaml.safe_dump(number).split("\n", 1)[0] if len(text) < 40 else "it"
            return (f"{text[:40]} is text to YAML 1.1 (PyYAML, which Megatron-Bridge reads the "
                    f"file with: its floats need a point and a signed exponent) but the number "
                    f"{describe_number(number) if not math.isfinite(number) else number} to "
                    f"YAML 1.2 and JSON: write {write} for the number, or quote "
                    f"'{text[:40]}' for text")
    elif kind != "null":
        return (f"a {printable(kind)[:40]} value is not read: a value is a string, number, "
                "true, false or null")
    return None


def _yaml_sizes(root: Any, where: str, error: type[Exception]) -> dict[int, int]:
    """Values under each node of a composed YAML graph, aliases expanded (by ``id``);
    iterative, linear in the distinct nodes. Raises ``error`` for an alias to a node that
    contains it (a recursive structure)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _yaml_children(node)
            sizes[key] = min(1 + sum(sizes[id(k)] for k in kids), 2 * MAX_YAML_NODES)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise error(f"{where}: line {_yaml_line(node)}: an alias refers to a mapping or list "
                        "that contains it (a recursive structure is no configuration)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _yaml_children(node) if id(k) not in sizes)
    return sizes


def _yaml_children(node: Any) -> list[Any]:
    import yaml
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_check(root: Any, where: str, error: type[Exception], nonfinite_ok: Any) -> None:
    """Walk a composed YAML graph (at most :data:`MAX_YAML_NODES` values, aliases expanded;
    iteratively) and raise ``error`` naming the YAML path and line of the first key that is
    not a string, a ``<<`` merge, a key given twice in one mapping, or a scalar that breaks
    :func:`_yaml_scalar_rule`."""
    import yaml
    sizes = _yaml_sizes(root, where, error)
    if sizes[id(root)] > MAX_YAML_NODES:
        path, node = "", root  # down the largest branch to where the expansion happens
        while True:
            kids = [(f"{path}.{k.value}" if path else str(k.value), v)
                    for k, v in node.value] if isinstance(node, yaml.MappingNode) else [
                (f"{path}[{i}]", v) for i, v in enumerate(node.value)]
            p, big = max(kids, key=lambda kv: sizes[id(kv[1])])
            if sizes[id(big)] <= MAX_YAML_NODES:
                break
            path, node = p, big
        raise error(f"{where}: {printable(path) or '(top level)'} (line {_yaml_line(node)}): "
                    f"more than {MAX_YAML_NODES:,} values with its aliases expanded (a "
                    "run_config.yaml holds a few hundred): anchors and aliases nested to "
                    "multiply (a 'billion laughs') are not read")
    stack: list[tuple[str, Any]] = [("", root)]
    while stack:
        path, node = stack.pop()
        at = printable(path) or "(top level)"
        if isinstance(node, yaml.ScalarNode):
            rule = _yaml_scalar_rule(node, path, nonfinite_ok)
            if rule is not None:
                raise error(f"{where}: {at} (line {_yaml_line(node)}): {rule}")
        elif isinstance(node, yaml.MappingNode):
            if node.tag != _YAML_TAG + "map":
                raise error(f"{where}: {at} (line {_yaml_line(node)}): a {printable(node.tag)} "
                            "mapping is not read: a mapping is a plain one")
            first: dict[str, int] = {}
            kids = []
            for k, v in node.value:
                if k.tag == _YAML_TAG + "merge":
                    raise error(f"{where}: {at} (line {_yaml_line(k)}): a '<<' merge key is not "
                                "read (keys it merges in yield to keys given: give each key once)")
                if not (isinstance(k, yaml.ScalarNode) and k.tag == _YAML_TAG + "str"):
                    shown = printable(k.value)[:40] if isinstance(k, yaml.ScalarNode) else (
                        "a mapping" if isinstance(k, yaml.MappingNode) else "a list")
                    raise error(f"{where}: {at} (line {_yaml_line(k)}): a key ({shown}) is not a "
                                "string (YAML 1.1 reads yes, no, on, off, null and numbers as "
                                "such): a key is a field's name; quote it")
                sub = f"{path}.{k.value}" if path else k.value
                if k.value in first:
                    raise error(f"{where}: {printable(sub)}: given twice in one mapping (lines "
                                f"{first[k.value]} and {_yaml_line(k)}); a key is given once "
                                "(which value was meant is unknown)")
                first[k.value] = _yaml_line(k)
                kids.append((sub, v))
            stack.extend(reversed(kids))
        elif isinstance(node, yaml.SequenceNode):
            if node.tag != _YAML_TAG + "seq":
                raise error(f"{where}: {at} (line {_yaml_line(node)}): a {printable(node.tag)} "
                            "list is not read: a list is a plain one")
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(node.value)]))


def parse_yaml(text: str, where: str, error: type[Exception], *,
               nonfinite_ok: Any = ()) -> Any:
    """Parse one YAML document as PyYAML's ``safe_load`` would (YAML 1.1, no Python objects),
    refusing what it would read silently otherwise:

    * a second document (``---``), nesting deeper than :data:`MAX_JSON_DEPTH` (PyYAML's
      composer recurses), more than :data:`MAX_YAML_NODES` values with the aliases expanded
      (a "billion laughs"), and an alias to a node that contains it;
    * a key given twice in one mapping (``safe_load`` keeps the last one silently), a key that
      is not a string (``yes:`` is ``True``), a ``<<`` merge key;
    * a tag that is no JSON type (``!!python/object``, ``!!binary``, ``!!set``, a timestamp
      such as ``2001-12-14``), and scalars that YAML 1.1 and YAML 1.2 / JSON read differently:
      ``yes``/``no``/``on``/``off`` (booleans to 1.1), ``010`` (octal 8 to 1.1), ``0x1f``,
      ``3_2``, ``1:30`` (90), and ``1e3`` / ``1.0e3`` (text to 1.1, which needs a point and a
      signed exponent: ``1.0e+3``);
    * ``.nan`` and ``.inf`` except ``+.inf`` at a dotted path in ``nonfinite_ok``, and an integer
      too long to be a number (never converted).

    Returns the document (dicts with string keys, lists, str, int, float, bool, None). Raises
    ``error`` with one line ``WHERE: YAML.PATH (line N): rule`` on any problem (never
    ``RecursionError``, nor PyYAML's multi-line messages).
    """
    import yaml
    # libyaml's scanner and parser (PyYAML's own take ~50 s on 16 MiB of blank lines); the
    # resolver and constructor are PyYAML's SafeLoader's, as Megatron-Bridge's yaml.safe_load
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def not_yaml(exc: yaml.YAMLError) -> Exception:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        if mark is not None:
            say = f"line {mark.line + 1} column {mark.column + 1}: {exc.problem or exc}"
        elif isinstance(exc, yaml.reader.ReaderError):
            line = text.count("\n", 0, exc.position) + 1
            say = (f"line {line}: character #x{exc.character:04x} is not allowed in YAML"
                   if isinstance(exc.character, int) else f"line {line}: {exc.reason}")
        else:
            say = str(exc)
        return error(f"{where}: not YAML: {printable(' '.join(say.split()))}")

    # one pass over the events (the parser is a state machine: no recursion at any depth)
    depth, docs, events = 0, 0, 0
    try:
        for event in yaml.parse(text, Loader=loader_cls):
            events += 1
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise error(f"{where}: line {event.start_mark.line + 1}: YAML nested more "
                                f"than {MAX_JSON_DEPTH} levels deep")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.DocumentStartEvent):
                docs += 1
                if docs > 1:
                    raise error(f"{where}: line {event.start_mark.line + 1}: a second YAML "
                                "document (---): a file holds one")
            if events > MAX_YAML_NODES:  # bounds what is composed (an alias: one event)
                raise error(f"{where}: line {event.start_mark.line + 1}: more than "
                            f"{MAX_YAML_NODES:,} values (a run_config.yaml holds a few hundred)")
    except yaml.YAMLError as exc:
        raise not_yaml(exc) from None
    if docs == 0:
        return None
    loader = loader_cls(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _yaml_check(root, where, error, frozenset(nonfinite_ok))
        return loader.construct_document(root)
    except yaml.YAMLError as exc:
        raise not_yaml(exc) from None
    finally:
        loader.dispose()


def read_yaml_file(path: str | Path, error: type[Exception], *, nonfinite_ok: Any = ()) -> Any:
    """Read and parse the YAML file ``path``: a regular UTF-8 file of at most
    ``MAX_BYTES['yaml']`` (:func:`read_text`: a FIFO never blocks, a device is never read),
    then :func:`parse_yaml` (its rules; ``error`` names the file)."""
    return parse_yaml(read_text(path, error, "yaml", encoding="utf-8"), str(path), error,
                      nonfinite_ok=nonfinite_ok)
