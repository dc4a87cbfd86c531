"""core.util.inputs.parse_yaml / read_yaml_file (the reader of ``vtrain import bridge
RUN_CONFIG.yaml``): what PyYAML's ``safe_load`` reads silently or fails on with a traceback is
refused in one line naming the YAML path and line: a key given twice (safe_load keeps the last),
YAML 1.1 spellings that YAML 1.2 / JSON read otherwise (``no`` false, ``010`` octal 8, ``1e3``
text), billion-laughs aliases, nesting beyond MAX_JSON_DEPTH, non-JSON tags, a second document,
non-finite numbers; plus a fuzz of the reader (hypothesis) that it only ever returns or raises
the caller's error, quickly."""

from __future__ import annotations

import math
import os
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.util.inputs import MAX_JSON_DEPTH, MAX_YAML_NODES, parse_yaml, read_yaml_file


class Bad(ValueError):
    pass


def _refusal(text: str, **kw) -> str:
    with pytest.raises(Bad) as err:
        parse_yaml(text, "f.yaml", Bad, **kw)
    msg = str(err.value)
    assert msg.startswith("f.yaml: ") and "\n" not in msg
    return msg[len("f.yaml: "):]


def _laughs(levels: int) -> str:
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for i in range(levels):
        prev, cur = chr(97 + i), chr(98 + i)
        text += f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    return text


def test_a_key_given_twice_is_refused_naming_both_lines():
    """safe_load keeps the last value silently (here t = 2, not 1); JSON's readers refuse a key
    given twice (core.util.inputs.parse_json): so does the YAML reader, with both lines."""
    text = "model:\n  num_layers: 32\n  tensor_model_parallel_size: 1\n" \
           "  tensor_model_parallel_size: 2\ntrain: {}\n"
    assert yaml.safe_load(text)["model"]["tensor_model_parallel_size"] == 2  # what it fixes
    assert _refusal(text) == ("model.tensor_model_parallel_size: given twice in one mapping "
                              "(lines 3 and 4); a key is given once (which value was meant is "
                              "unknown)")
    # a whole section twice; and "a" and a, which are one key
    assert _refusal("train: {a: 1}\nmodel: {}\ntrain: {a: 2}\n").startswith(
        "train: given twice in one mapping (lines 1 and 3)")
    assert _refusal("x:\n  'a': 1\n  a: 1\n").startswith("x.a: given twice in one mapping "
                                                       "(lines 2 and 3)")


@pytest.mark.parametrize("value, meant, message", [
    ("no", False, "x.k (line 2): no is false to YAML 1.1 (PyYAML, which Megatron-Bridge reads "
     "the file with) and text to YAML 1.2: write false, or quote 'no' for text"),
    ("NO", False, "x.k (line 2): NO is false to YAML 1.1"),   # Norway's country code
    ("on", True, "x.k (line 2): on is true to YAML 1.1"),
    ("Yes", True, "x.k (line 2): Yes is true to YAML 1.1"),
    ("010", 8, "x.k (line 2): 010 is an integer to YAML 1.1 (PyYAML) written in octal"),
    ("0x20", 32, "x.k (line 2): 0x20 is an integer to YAML 1.1 (PyYAML) written in octal, "
     "hexadecimal"),
    ("3_2", 32, "x.k (line 2): 3_2 is an integer"),
    ("1:30", 90, "x.k (line 2): 1:30 is an integer"),
    ("1_0.5", 10.5, "x.k (line 2): 1_0.5 is a number to YAML 1.1 (PyYAML) written in base 60 "
     "or with underscores"),
    ("1e3", "1e3", "x.k (line 2): 1e3 is text to YAML 1.1 (PyYAML, which Megatron-Bridge reads "
     "the file with: its floats need a point and a signed exponent) but the number 1000.0 to "
     "YAML 1.2 and JSON: write 1000.0 for the number, or quote '1e3' for text"),
    ("1.0e3", "1.0e3", "but the number 1000.0 to YAML 1.2"),  # a point is not enough
    ("3e-4", "3e-4", "write 0.0003 for the number"),
    ("0o17", "0o17", "but the number 15 to YAML 1.2 and JSON: write 15 (decimal)"),
    ("09", "09", "but the number 9 to YAML 1.2 and JSON: write 9 for the number"),
    (".nan", math.nan, "x.k (line 2): NaN (.nan) must be a finite number"),
    ("-.inf", -math.inf, "x.k (line 2): -Infinity (-.inf) must be a finite number"),
    ("1" * 5000, None, "x.k (line 2): an integer of 5,000 digits is beyond the range of any "
     "number"),  # safe_load raises ValueError (int() of 4,300 digits or more)
    ("2001-12-14", None, "x.k (line 2): a timestamp value is not read: a value is a string, "
     "number, true, false or null"),
    ("!!binary aGVsbG8=", b"hello", "x.k (line 2): a binary value is not read"),
    ("!!python/name:os.system", None, "x.k (line 2): a python/name:os.system value is not read"),
    ("!!set {a, b}", {"a", "b"}, "x.k (line 2): a tag:yaml.org,2002:set mapping is not read"),
])
def test_yaml_11_spellings_are_refused_by_path_and_line(value, meant, message):
    text = f"x:\n  k: {value}\n"
    if meant is not None:  # what safe_load makes of it, silently
        got = yaml.safe_load(text)["x"]["k"]
        assert got == meant or (isinstance(meant, float) and math.isnan(meant) and got != got)
    assert message in _refusal(text)


@pytest.mark.parametrize("text, value", [
    # what yaml.safe_dump writes (Megatron-Bridge's to_yaml), and spellings read alike
    ("k: true", True), ("k: False", False), ("k: null", None), ("k: ~", None), ("k:", None),
    ("k: 'null'", "null"), ("k: 'yes'", "yes"), ("k: '010'", "010"), ("k: 010x", "010x"),
    ("k: 1.0e-05", 1e-05), ("k: 1.0e+20", 1e20), ("k: -0", 0), ("k: .5", 0.5), ("k: 128256", 128256),
    ("k: [1, 2.5, a]", [1, 2.5, "a"]), ("k: NullTokenizer", "NullTokenizer"),
    ("\ufeffk: 1", 1),  # a byte-order mark
])
def test_what_safe_dump_writes_is_read(text, value):
    assert parse_yaml(text + "\n", "f.yaml", Bad) == {"k": value}


def test_inf_only_where_the_caller_allows_it():
    """optimizer.grad_norm_skip_threshold defaults to float('inf'): to_yaml writes .inf"""
    text = "optimizer:\n  grad_norm_skip_threshold: .inf\n"
    assert parse_yaml(text, "f.yaml", Bad, nonfinite_ok={"optimizer.grad_norm_skip_threshold"}) \
        == {"optimizer": {"grad_norm_skip_threshold": math.inf}}
    assert _refusal(text) == ("optimizer.grad_norm_skip_threshold (line 2): Infinity (.inf) "
                              "must be a finite number")
    assert "-Infinity" in _refusal("optimizer:\n  grad_norm_skip_threshold: -.inf\n",
                                   nonfinite_ok={"optimizer.grad_norm_skip_threshold"})


@pytest.mark.parametrize("text, message", [
    ("a: 1\n b: 2\n", "not YAML: line 2 column 3: mapping values are not allowed"),
    ("a: 1\n---\nb: 2\n", "line 2: a second YAML document (---): a file holds one"),
    ("a: 1\n---\n", "line 2: a second YAML document"),
    ("a:\n\tb: 1\n", "not YAML: line 2 column 1: found"),
    ("a: \x07\n", "not YAML: line 1: character #x0007 is not allowed in YAML"),
    ("1: a\n", "(top level) (line 1): a key (1) is not a string"),
    ("x:\n  yes: 1\n", "x (line 2): a key (yes) is not a string (YAML 1.1 reads yes, no, on, "
     "off, null and numbers as such): a key is a field's name; quote it"),
    ("x:\n  ? [a]\n  : 1\n", "x (line 2): a key (a list) is not a string"),
    ("x:\n  a: 1\n  <<: {b: 2}\n", "x (line 3): a '<<' merge key is not read"),
    ("a: &a [*a]\n", "line 1: an alias refers to a mapping or list that contains it"),
    ("a: !!python/object/apply:os.system ['echo hi']\n",
     "a (line 1): a tag:yaml.org,2002:python/object/apply:os.system list is not read"),
    ("a: !foo 1\n", "a (line 1): a !foo value is not read"),
])
def test_bad_documents_are_refused_in_one_line(text, message):
    assert message in _refusal(text)


def test_billion_laughs_refused_quickly_naming_the_path():
    """Nine levels of nine aliases: 9**9 = 387,420,489 lists with the aliases expanded from a few
    hundred bytes; safe_load shares them, but any walk (repr in a message, a check) would not
    end. Refused before anything walks it, naming the first mapping key whose expansion is over
    MAX_YAML_NODES, in well under a second; four levels (9**4 = 6,561) are read."""
    t = time.perf_counter()
    msg = _refusal("laughs:\n" + "".join("  " + line + "\n" for line in
                                         _laughs(8).splitlines()))
    assert time.perf_counter() - t < 2
    # f: the first mapping key over the bound (9**6 = 531,441; e: 9**5 = 59,049)
    assert msg.startswith(f"laughs.f (line 7): more than {MAX_YAML_NODES:,} values with its "
                          "aliases expanded")
    assert len(parse_yaml(_laughs(3), "f.yaml", Bad)["d"]) == 9


def test_size_and_depth_bounds():
    """Beyond MAX_JSON_DEPTH nesting safe_load recurses (RecursionError at about 1,000 block
    levels); more than MAX_YAML_NODES values are refused while parsing (a run_config.yaml
    holds a few hundred)."""
    deep_block = "".join(" " * i + "a:\n" for i in range(3000)) + " " * 3000 + "b: 1\n"
    with pytest.raises(RecursionError):
        yaml.safe_load(deep_block)
    assert _refusal(deep_block) == f"line {MAX_JSON_DEPTH + 1}: YAML nested more than " \
                                   f"{MAX_JSON_DEPTH} levels deep"
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "\n"
    doc = parse_yaml(ok, "f.yaml", Bad)
    for _ in range(MAX_JSON_DEPTH - 1):
        doc = doc[0]
    assert doc == []
    assert "YAML nested more than" in _refusal(
        "a: " + "{a: " * 70 + "1" + "}" * 70 + "\n")
    assert _refusal("a: [" + ",".join(["1"] * MAX_YAML_NODES) + "]\n") == \
        f"line 1: more than {MAX_YAML_NODES:,} values (a run_config.yaml holds a few hundred)"


def test_files_that_are_not_files(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.yaml"
    os.symlink(loop, loop)
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes("a: 1\n".encode("utf-16"))
    for path, rule in ((fifo, "is not a regular file"), ("/dev/zero", "is not a regular file"),
                       (tmp_path, "is a folder, not a file"), (loop, "cannot read: "),
                       (utf16, "is not utf-8 text (byte 0)")):
        with pytest.raises(Bad) as err:
            read_yaml_file(path, Bad)
        assert str(err.value).startswith(f"{path}: {rule}")


_scalars = st.one_of(
    st.sampled_from(["yes", "no", "On", "010", "0x1f", "3_2", "1:30", "1e3", "1.0e3", "1.0e+3",
                     ".inf", ".nan", "~", "null", "'null'", "2001-12-14", "!!binary aGk=", "&a x",
                     "*a", "!!python/object:os.system", "<<", "? a", "- ", "---", "...", "{", "[",
                     "'", '"', "\t", "#", "|", ">", "%YAML 1.1", "@", "`", "\\", ":", ",", "1",
                     "a", "-1.5", "\ufeff", "\x00", "\x85", "\u2028"]),
    st.text(max_size=8))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 6), st.lists(_scalars, min_size=1, max_size=4)),
                max_size=20))
def test_fuzz_reader_returns_json_values_or_refuses_in_one_line(lines):
    """Random lines of YAML's pieces (indicators, anchors, aliases, tags, YAML 1.1 spellings):
    parse_yaml returns only what JSON holds (string keys, finite numbers) or raises the caller's
    error in one line naming the file; never another exception, never slowly."""
    text = "".join(" " * indent + " ".join(words) + "\n" for indent, words in lines)
    t = time.perf_counter()
    try:
        doc = parse_yaml(text, "f.yaml", Bad)
    except Bad as exc:
        assert str(exc).startswith("f.yaml: ") and "\n" not in str(exc)
        return
    finally:
        assert time.perf_counter() - t < 5
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            assert all(isinstance(k, str) for k in node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        else:
            assert node is None or isinstance(node, (str, bool, int)) or (
                isinstance(node, float) and math.isfinite(node)), repr(node)
