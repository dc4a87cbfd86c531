"""Bad input never crashes, hangs or lies: the handed cases of ../shared/cases and their kinds.

Each case must end with exit status 2 and one line on stderr naming the file, the field and
the rule; names from files print literally; stores never read other files; writers name
the file and leave the previous one intact.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.util import atomic
from core.util import inputs
from core.plan.fields import BOUNDS, ConfigError, check_value, section_errors
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.plan.rules import validate
from core.store.format import ProfileStoreError
from core.store.profile_store import ProfileStore
from core.io.session import SessionFileError, load_any, load_session, save_session, session_to_json
from core.sim.simulate import MAX_GRAPH_TASKS, simulate
from core.model.counts import num_parameters
from core.cli.common import apply_sets
from tests.conftest import EXAMPLES, ROOT

CASES = ROOT.parent / "shared" / "cases"
STORE = ROOT / "profiles" / "A100-SXM4-80GB.h5"


def case(name: str) -> Path:
    path = CASES / name
    if not path.exists():
        pytest.skip(f"shared case not present: {path}")
    return path


def cli(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vtrain: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# --------------------------------------------------------------------------- handed cases

BAD_CASES = [
    ("crash_authors_intra_bw_list.json", "intra_node_bandwidth: intra_node_bandwidth=[] must be a number"),
    ("crash_authors_num_layers_null.json", "num_layers: num_layers=null must be a positive integer"),
    ("crash_deep_nesting_1000.json", "JSON nested 1000 levels deep, more than 64"),
    ("hang_num_layers_2p63.json", "model.num_layers: num_layers=9223372036854775808 must be at most 10,000"),
    ("silent_intra_bw_denormal.json",
     "cluster.intra_node_bandwidth_gbytes_per_s: intra_node_bandwidth_gbytes_per_s=5e-324 must be at least 0.1"),
    ("silent_price_inf.json", "cost.price_per_gpu_hour_usd: Infinity must be a finite number"),
    ("silent_authors_use_checkpoint_false_string.json",
     'use_checkpoint: use_checkpoint="false" must be true or false'),
    ("silent_session_missing_num_layers.json", "model.num_layers: missing; a session file must give it"),
    ("sec_profile_path_relative.json", "cluster.profile_path: "),
]


@pytest.mark.parametrize("command", ["simulate", "sweep"])
@pytest.mark.parametrize("name,needle", BAD_CASES)
def test_handed_case_exits_2_with_one_line_naming_the_field(name, needle, command):
    path = case(name)
    line = assert_one_line_error(cli(command, str(path), "--json", timeout=60), needle)
    assert str(path) in line  # the file is named too


def test_profile_path_is_resolved_against_the_session_folder_and_tells_nothing(tmp_path):
    path = case("sec_profile_path_relative.json")
    # resolved against the case's folder (../../profiles from shared/cases), not the working
    # one; ".." taken textually, as the shell's logical paths (os.path.abspath, as
    # core.io.session does), so the name is the same when ../shared is a symbolic link
    expected = os.path.abspath(path.parent / "../../profiles/A100-SXM4-80GB.h5")
    line = assert_one_line_error(cli("simulate", str(path), cwd=ROOT / "core"))
    assert str(expected) in line and line.endswith("not a readable vTrain profile store")
    # a missing store and an existing file that is no store read alike
    doc = json.loads(path.read_text())
    (tmp_path / "text.h5").write_text("secret\n")
    lines = []
    for target in ("missing.h5", "text.h5"):
        doc["cluster"]["profile_path"] = target
        (tmp_path / "s.json").write_text(json.dumps(doc))
        lines.append(assert_one_line_error(cli("simulate", str(tmp_path / "s.json"))))
    assert lines[0].replace("missing.h5", "X") == lines[1].replace("text.h5", "X")
    # nothing but an .h5 file is opened, whatever it is
    doc["cluster"]["profile_path"] = "/etc/passwd"
    (tmp_path / "s.json").write_text(json.dumps(doc))
    assert_one_line_error(cli("simulate", str(tmp_path / "s.json")), "cluster.profile_path",
                          "not a readable vTrain profile store (a store is an .h5 file)")


def test_relative_profile_path_works_from_any_folder_and_saves_relative(tmp_path):
    (tmp_path / "stores").mkdir()
    shutil.copy(STORE, tmp_path / "stores" / "mine.h5")
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.cluster.profile_path = str(tmp_path / "stores" / "mine.h5")
    save_session(s, tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["cluster"]["profile_path"] == "stores/mine.h5"
    assert load_session(tmp_path / "s.json").cluster.profile_path == str(tmp_path / "stores" / "mine.h5")
    proc = cli("simulate", str(tmp_path / "s.json"), "--json", cwd=ROOT / "docs")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["profile"]["path"] == str(tmp_path / "stores" / "mine.h5")


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_markup_and_control_characters_in_names_print_literally(tmp_path, command):
    path = case("crash_rich_markup_model_name.json")
    proc = cli(command, str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("[/x] on ")
    doc = json.loads(path.read_text())
    doc["model"]["name"] = "[bold]evil\x1b[2J\x07\u202e[/bold]"
    (tmp_path / "s.json").write_text(json.dumps(doc))
    proc = cli(command, str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("[bold]evil\\x1b[2J\\x07\\u202e[/bold] on ")
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout and "\u202e" not in proc.stdout


def test_error_messages_never_carry_raw_control_characters(tmp_path):
    raw = json.loads(case("crash_authors_num_layers_null.json").read_text())
    raw["gpu_name"] = "\x1b[31mA100\n"
    raw["num_layers"] = 96
    raw["pipeline_scheduling"] = "zig\x1bzag"
    (tmp_path / "c.json").write_text(json.dumps(raw))
    line = assert_one_line_error(cli("simulate", str(tmp_path / "c.json")), "pipeline_scheduling")
    assert "\x1b" not in line


# --------------------------------------------------------------------------- readers

def test_fifos_devices_and_folders_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "session.json"
    os.mkfifo(fifo)
    for path in (fifo, Path("/dev/zero"), tmp_path):
        with pytest.raises(SessionFileError) as err:
            load_any(path)
        assert str(path) in str(err.value)
        assert "not a regular file" in str(err.value) or "is a folder" in str(err.value)
    assert_one_line_error(cli("simulate", str(fifo), timeout=30), "not a regular file")
    assert_one_line_error(cli("validate", str(fifo), timeout=30), "not a regular file")
    assert_one_line_error(cli("schedule", str(fifo), "--gpus", "8", timeout=30), "not a regular file")


def test_files_above_their_size_bound_are_refused_before_reading(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text(session_to_json(Session()) + " " * 2000)
    monkeypatch.setitem(inputs.MAX_BYTES, "json", 1000)
    with pytest.raises(SessionFileError, match=r"is [\d,]+ bytes, more than the 1,000 bytes"):
        load_any(path)


def test_a_subnormal_number_is_refused_by_every_float_field(tmp_path):
    """A subnormal float (0 < |x| < 2.2e-308) is refused by name in a field whose bounds would
    take it (the planner's margin allows 0 to 0.9: 1e-320 printed "margin 9.99989e-319 %");
    0 itself stays valid."""
    f = {x.name: x for x in dataclasses.fields(ClusterConfig)}["memory_reserve_fraction"]
    assert check_value("memory_reserve_fraction", f, 1e-320) == (
        "memory_reserve_fraction=1e-320 is a subnormal number (under 2.2e-308 in magnitude): "
        "give 0 or a normal number")
    assert check_value("memory_reserve_fraction", f, 0.0) is None
    assert check_value("memory_reserve_fraction", f, 0.05) is None
    assert_one_line_error(cli("simulate", str(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"), "--set",
                              "cluster.memory_reserve_fraction=1e-320"),
                          "cluster.memory_reserve_fraction", "subnormal")


@pytest.mark.parametrize("text,needle", [
    ('{"a": [1, NaN]}', "a[1]: NaN must be a finite number"),
    ('{"cost": {"training_tokens": 1e400}}', "cost.training_tokens: Infinity must be a finite number"),
    ('[' * 65 + ']' * 65, "nested 65 levels deep"),
    ('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', None),
    ('1' * 5000, "(top level)"),  # refused by magnitude, never converted
])
def test_json_parsing_bounds_depth_and_refuses_non_finite_numbers(text, needle):
    if needle is None:  # brackets inside strings do not count
        assert inputs.parse_json(text, "x", ValueError) == json.loads(text)
        return
    with pytest.raises(ValueError) as err:
        inputs.parse_json(text, "x", ValueError)
    assert needle in str(err.value) and str(err.value).startswith("x: ")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=300).filter(lambda b: not _is_utf8(b)))
def test_binary_bytes_are_not_utf8_whatever_brackets_they_hold(blob):
    """Bytes that are not UTF-8 are refused as such, before the nesting is counted: an HDF5
    store given as a session was "JSON nested 73 levels deep, more than 64" (the bracket
    bytes of its data), a rule the file does not break."""
    data = b"[" * 100 + blob + b"]" * 100
    with pytest.raises(ValueError) as err:
        inputs.parse_json(data, "x", ValueError)
    assert str(err.value).startswith("x: not a valid JSON file (not UTF-8 text at byte ")


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_an_hdf5_store_given_as_a_session_is_named_so(tmp_path):
    store = ROOT / "profiles" / "A100-SXM4-80GB.h5"
    assert store.read_bytes().startswith(inputs.HDF5_SIGNATURE)
    # a store's data bytes can hold more '[' than the nesting limit (the shipped A100 store's
    # did, and "JSON nested 73 levels deep" was reported): the signature decides first
    deep = tmp_path / "deep.h5"
    deep.write_bytes(inputs.HDF5_SIGNATURE + b"[" * (inputs.MAX_JSON_DEPTH + 9))
    assert inputs.json_depth(deep.read_bytes()) > inputs.MAX_JSON_DEPTH
    copy = tmp_path / "session.json"  # the name does not decide
    shutil.copy(store, copy)
    for path in (store, copy, deep):
        for command in ("simulate", "diff"):
            args = (command, str(path), str(EXAMPLES / "gpt3_1.3b_single_node.json"))
            line = assert_one_line_error(cli(*(args[:2] if command == "simulate" else args),
                                             timeout=60))
            assert line == f"vtrain: error: {path}: an HDF5 file (such as a profile store), not JSON text"
        with pytest.raises(SessionFileError, match="an HDF5 file"):
            load_session(path)


@pytest.mark.parametrize("text,path", [
    ('{"model": {"num_layers": 2, "num_layers": 24}}', "model.num_layers"),
    ('{"model": {}, "plan": {}, "model": {"name": "x"}}', "model"),
    ('{"jobs": [{"a": 1}, {"b": 1, "b": 1}]}', "jobs[1].b"),
])
def test_a_key_given_twice_is_refused_naming_it(text, path):
    """json keeps the last of two equal keys silently: an edit to the first was lost."""
    with pytest.raises(ValueError) as err:
        inputs.parse_json(text, "x", ValueError)
    assert str(err.value) == (f"x: {path}: given twice in one object; a key is given once "
                              "(which value was meant is unknown)")


def test_a_session_with_a_key_given_twice_exits_2(tmp_path):
    text = (EXAMPLES / "gpt3_1.3b_single_node.json").read_text()
    path = tmp_path / "twice.json"
    path.write_text(text.replace('"num_layers": 24,', '"num_layers": 2, "num_layers": 24,', 1))
    line = assert_one_line_error(cli("simulate", str(path), "--json", timeout=60))
    assert line == (f"vtrain: error: {path}: model.num_layers: given twice in one object; a key "
                    "is given once (which value was meant is unknown)")


def test_json_depth_counts_nesting_outside_strings():
    assert inputs.json_depth(b'{"a": [1, {"b": "]]]"}]}') == 3
    assert inputs.json_depth(b'"[\\"["') == 0
    assert inputs.json_depth(b"[" * 1000 + b"]" * 1000) == 1000
    # a string left open runs to the end: what follows it is not nesting
    assert inputs.json_depth(b'[["a\\"]", "[[[') == 2
    assert inputs.json_depth(b'[{"a": "x\\') == 2


def test_json_depth_is_linear_in_an_open_string_of_escaped_quotes(tmp_path):
    """``["\"\"\"...`` (80 KB, never closed) took 28 s to refuse: each escaped quote started
    a scan to the end for a closing one. 2 MB of them is refused as JSON at once."""
    import time
    path = tmp_path / "open_string.json"
    path.write_bytes(b'["' + b'\\"' * 2**20)
    start = time.monotonic()
    with pytest.raises(ValueError) as err:
        inputs.read_json_file(path, ValueError)
    assert time.monotonic() - start < 5
    assert str(err.value) == (f"{path}: not a valid JSON file (Unterminated string starting at: "
                              "line 1 column 2 (char 1))")


def test_every_numeric_field_declares_bounds_and_every_field_help():
    for cls in (ModelConfig, ParallelPlan, ClusterConfig, CostConfig):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), (cls.__name__, f.name)
            base = str(f.type).split("|")[0].strip()
            if base in ("int", "float") and "choices" not in f.metadata:
                bounded = isinstance(f.metadata.get("bounds"), type(BOUNDS["layers"])) or (
                    "min" in f.metadata and "max" in f.metadata)
                assert bounded, (cls.__name__, f.name)


def test_checks_are_driven_by_field_metadata():
    """A new field is checked by what it declares, with no code of its own."""
    @dataclasses.dataclass
    class Section:
        flag: bool = dataclasses.field(default=False, metadata={"help": "x"})
        stage: int = dataclasses.field(default=0, metadata={"help": "x", "choices": (0, 1, 2, 3)})
        size: int | None = dataclasses.field(default=None, metadata={"help": "x",
                                                                      "bounds": BOUNDS["layers"]})
        kind: str = dataclasses.field(default="a", metadata={"help": "x", "choices": ("a", "b")})
    ok = Section()
    assert section_errors("plan", ok) == []
    bad = Section(flag="false", stage=4, size=10**6, kind="c")
    assert [str(e) for e in section_errors("plan", bad)] == [
        'plan.flag: flag="false" must be true or false',
        "plan.stage: stage=4 is not one of 0, 1, 2, 3",
        "plan.size: size=1000000 must be at most 10,000 (the deepest published LLMs have 100 to "
        "200 layers)",
        'plan.kind: kind="c" is not one of a, b']
    f = next(x for x in dataclasses.fields(Section) if x.name == "flag")
    assert check_value("flag", f, 1) == "flag=1 must be true or false"


@pytest.mark.parametrize("section,name,value,needle", [
    ("model", "vocab_size", 2**31, "must be at most 2,147,483,647"),
    ("model", "hidden_size", True, "must be of type int"),
    ("plan", "global_batch_size", 1.5, "must be of type int"),
    ("plan", "precision", "fp4", "is not one of bf16, fp16, fp32, fp8"),
    ("cluster", "inter_node_bandwidth_gbits_per_s", 0, "must be at least 0.1"),
    ("cost", "price_per_gpu_hour_usd", -1, "must be zero or more"),
    ("cost", "training_tokens", "1e9", "must be of type float"),
])
def test_session_fields_are_checked_when_read(tmp_path, section, name, value, needle):
    doc = json.loads(session_to_json(Session()))
    doc[section][name] = value
    (tmp_path / "s.json").write_text(json.dumps(doc))
    with pytest.raises(SessionFileError) as err:
        load_session(tmp_path / "s.json")
    assert f"{section}.{name}: " in str(err.value) and needle in str(err.value)


def test_a_plan_too_large_to_simulate_is_refused_by_name_at_once():
    s = Session(ModelConfig("big", 10_000, 1024, 16, None, 2048, 50257),
                ParallelPlan(1, 1, 1, 1, 2**24, "1f1b", "none", "bf16"))
    assert validate(s) == []
    with pytest.raises(ConfigError, match=f"more than the {MAX_GRAPH_TASKS:,}"):
        simulate(s)


def test_measurement_csv_refuses_non_finite_values(tmp_path):
    from core.accuracy.measured import MeasurementFileError, read_measurements
    header = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
              "sequence length,tensor parallelism,data parallelism,pipeline parallelism,"
              "iteration time (ms)")
    (tmp_path / "m.csv").write_text(f"{header}\n8,64,1,2048,16,24,2048,8,1,1,inf\n")
    with pytest.raises(MeasurementFileError, match="row 1 \\(line 2\\), column 'iteration time \\(ms\\)'.*not a finite"):
        read_measurements(tmp_path / "m.csv")
    (tmp_path / "n.csv").write_text(f"{header}\n8,64,1,2048,16,99999999999,2048,8,1,1,100\n")
    (m,) = read_measurements(tmp_path / "n.csv")  # kept, skipped with the bound as reason
    assert "# layers=99999999999 must be at most 10,000" in m.skip_reason  # the file's name
    (tmp_path / "z.csv").write_bytes(header.encode() + b"\n8,64,\x00\n")
    assert_one_line_error(cli("validate", str(tmp_path / "z.csv")), "z.csv")


_AUTHORS_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
                   "sequence length,tensor parallelism,data parallelism,pipeline parallelism,"
                   "iteration time (ms)")


def test_text_numbers_are_decimal_digits_only(tmp_path):
    """float() reads "1_5" as 15: a measured time of 1_5 ms was predicted as 15 ms."""
    from core.accuracy.measured import MeasurementFileError, read_measurements
    from core.store.nccl_tests import NcclTestsError, read_nccl_tests
    path = tmp_path / "m.csv"
    path.write_text(f"{_AUTHORS_HEADER}\n8,64,1,2048,16,24,2048,8,1,1,1_5\n")
    with pytest.raises(MeasurementFileError) as err:
        read_measurements(path)
    assert str(err.value) == f"{path}: row 1 (line 2), column 'iteration time (ms)': '1_5' is not a number"
    nccl = tmp_path / "all_reduce_8gpu.csv"
    nccl.write_text("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n"
                    "1024,256,float,1_000,1,1,1\n")
    with pytest.raises(NcclTestsError, match="line 2: expected size"):
        read_nccl_tests(nccl)
    assert inputs.decimal_number(" -1.5e3 ") == -1500.0
    for text in ("1_5", "0x10", "١٢", "1.2.3", ""):
        with pytest.raises(ValueError):
            inputs.decimal_number(text)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=401, max_value=3000), st.integers(min_value=0, max_value=9),
       st.sampled_from(["", ".5", "e-380", "e-2900"]))
def test_a_long_decimal_is_a_number(digits, lead, tail):
    """A decimal of more than 400 characters was "'1000000000000000000000000000000000000000' is
    not a number" (its first 40 characters, a number): it is read, and the callers' own rules
    speak (a 401-digit integer is infinite; with an exponent it may be an ordinary value, or
    one below the smallest double, which is refused by that rule, never read as 0.0)."""
    text = str(lead or 1) + "0" * (digits - 1) + tail
    if float(text) == 0.0:  # 1e400e-2900: 1e-2500
        with pytest.raises(inputs.DecimalUnderflowError, match="smallest normal double"):
            inputs.decimal_number(text)
    else:
        assert inputs.decimal_number(text) == float(text)


def test_a_long_number_in_a_measurement_csv_is_named_by_its_rule(tmp_path):
    from core.accuracy.measured import MeasurementFileError, read_measurements
    path = tmp_path / "m.csv"
    big = "1" + "0" * 400
    path.write_text(f"{_AUTHORS_HEADER}\n8,64,1,2048,16,24,2048,8,1,1,{big}\n")
    with pytest.raises(MeasurementFileError) as err:
        read_measurements(path)
    assert str(err.value) == (f"{path}: row 1 (line 2), column 'iteration time (ms)': "
                              f"'{big[:27]}...{big[-28:]}' is not a finite number")
    path.write_text(f"{_AUTHORS_HEADER}\n8,64,1,2048,16,{'2' + '4' * 40},2048,8,1,1,100\n")
    with pytest.raises(MeasurementFileError) as err:
        read_measurements(path)
    assert str(err.value) == (f"{path}: row 1 (line 2), column '# layers': "
                              f"'{'2' + '4' * 40}' is an integer of 41 digits, beyond any field's bounds")
    # a long decimal that is an ordinary number is read as one
    path.write_text(f"{_AUTHORS_HEADER}\n8,64,1,2048,16,24,2048,8,1,1,{'1' + '0' * 500}e-498\n")
    (m,) = read_measurements(path)
    assert m.measured_iteration_time_s == pytest.approx(0.1)


def test_nccl_tests_output_refuses_absurd_rows(tmp_path):
    from core.store.nccl_tests import NcclTestsError, read_nccl_tests
    path = tmp_path / "all_reduce_8gpu.csv"
    path.write_text("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n"
                    "1024,256,float,inf,1,1,1\n")
    with pytest.raises(NcclTestsError, match="line 2: time inf s"):
        read_nccl_tests(path)
    path2 = tmp_path / "all_reduce_99999999gpu.csv"
    path2.write_text("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n"
                     "1024,256,float,1000,1,1,1\n")
    with pytest.raises(NcclTestsError, match="group size 99,999,999"):
        read_nccl_tests(path2)


_NCCL_2GPU = ("#  Rank  0 Group  0 Pid 1 on x device  0 [0x00] A100\n"
              "#  Rank  1 Group  0 Pid 1 on x device  1 [0x00] A100\n"
              "  1048576  262144  float  sum  -1  100.0  10.49  15.73  0  100.0  10.49  15.73  0\n"
              "  2097152  524288  float  sum  -1  150.0  13.98  20.97  0  150.0  13.98  20.97  0\n")


@pytest.mark.parametrize("extra, message", [
    # --knots 0 stored every size as if not given; --group-size 0 took the file's 2 GPUs;
    # --group-size 1 and --knots -1 were refused for another reason than theirs
    (["--knots", "0"], "--knots: 0 must be at least 2"),
    (["--knots", "-1"], "--knots: -1 must be at least 2"),
    (["--group-size", "0"], "--group-size: 0 must be from 2 to 1,048,576 GPUs"),
    (["--group-size", "1"], "--group-size: 1 must be from 2 to 1,048,576 GPUs"),
    ([], "size 1048576 bytes is measured twice (0.0001 s and 0.00015 s); one run per file"),
])
def test_nccl_tests_import_options_and_repeated_sizes_are_refused_by_name(tmp_path, extra,
                                                                           message):
    store = tmp_path / "s.h5"
    assert cli("profile", "generate", "--gpu", "A100-SXM4-80GB", "--out", str(store)).returncode == 0
    before = store.read_bytes()
    nccl = tmp_path / "all_reduce_2gpu.txt"
    text = _NCCL_2GPU
    if not extra:  # two runs pasted into one file: the second time of 1 MiB was dropped
        text += _NCCL_2GPU.splitlines(keepends=True)[2].replace("100.0", "150.0")
    nccl.write_text(text)
    line = assert_one_line_error(cli("profile", "import-nccl-tests", str(nccl), "--into",
                                     str(store), *extra))
    assert message in line, line
    assert store.read_bytes() == before


def test_job_trace_values_are_bounded(tmp_path):
    trace = [{"arrival_h": 0, "model": "GPT-3 1.3B", "global_batch_size": 64, "tokens": 1e300,
              "requested_gpus": 8}]
    (tmp_path / "t.json").write_text(json.dumps(trace))
    assert_one_line_error(cli("schedule", str(tmp_path / "t.json"), "--gpus", "8"),
                          "t.json[0].tokens: 1e+300 must be at most")


def test_job_trace_values_below_their_bound_are_refused():
    """1e-300 tokens was a job that takes no time (only the upper bound was checked)."""
    from core.studies.scheduler import _job_number
    errs: list = []
    _job_number({"tokens": 1e-300}, "t.json[0]", "tokens", errs)
    assert [str(e) for e in errs] == ["t.json[0].tokens: 1e-300 must be at least 1 (the largest "
                                      "published training runs use about 4e13 tokens)"]


# --------------------------------------------------------------------------- profile stores

def _tiny(path: Path) -> None:
    ProfileStore.open(STORE).save(path)


def _refused(path: Path, needle: str) -> None:
    with pytest.raises(ProfileStoreError) as err:
        ProfileStore.open(path)
    assert str(path) in str(err.value) and needle in str(err.value), str(err.value)


def test_external_links_storage_and_virtual_datasets_are_refused(tmp_path):
    secret = tmp_path / "secret.h5"
    with h5py.File(secret, "w") as f:
        f["x"] = np.arange(3.0)
    p = tmp_path / "link.h5"
    _tiny(p)
    with h5py.File(p, "a") as f:
        f["ops"]["evil"] = h5py.ExternalLink(str(secret), "/x")
    _refused(p, "an external link to another file")
    p = tmp_path / "soft.h5"
    _tiny(p)
    with h5py.File(p, "a") as f:
        f["ops"]["loop"] = h5py.SoftLink("/ops")
    _refused(p, "a soft link")
    p = tmp_path / "external.h5"
    _tiny(p)
    (tmp_path / "raw.bin").write_bytes(np.ones(4).tobytes())
    with h5py.File(p, "a") as f:
        op = next(iter(f["ops"]))
        del f["ops"][op]["time_s"]
        f["ops"][op].create_dataset("time_s", shape=(4,), dtype="f8",
                                    external=[(str(tmp_path / "raw.bin"), 0, 32)])
    _refused(p, "dataset stored in external files")
    p = tmp_path / "virtual.h5"
    _tiny(p)
    with h5py.File(p, "a") as f:
        layout = h5py.VirtualLayout(shape=(3,), dtype="f8")
        layout[:] = h5py.VirtualSource(str(secret), "x", shape=(3,))
        f["ops"].create_group("v").create_virtual_dataset("time_s", layout)
    _refused(p, "a virtual dataset")


@pytest.mark.parametrize("change,needle", [
    (lambda f: f["op_model"].attrs.__setitem__("gemm_efficiency_max", np.nan), "gemm_efficiency_max"),
    (lambda f: f["op_model"].attrs.__setitem__("memory_efficiency", -0.5), "memory_efficiency"),
    (lambda f: f["op_model"].attrs.__setitem__("inter_node_efficiency", 0.0), "inter_node_efficiency"),
    (lambda f: f.attrs.__setitem__("memory_bytes", np.inf), "memory_bytes"),
    (lambda f: f["peak_flops"].attrs.__setitem__("bf16", 1e300), "peak_flops"),
    (lambda f: _replace(f, "time_s", np.array([b"1"] * _rows(f)), None), "/time_s"),
    (lambda f: _replace(f, "time_s", np.full(_rows(f), np.nan), None), "positive and finite"),
    (lambda f: _replace(f, "time_s", None, 20_000_000), "more than 10,000,000"),
])
def test_corrupted_values_are_refused_with_the_reason(tmp_path, change, needle):
    p = tmp_path / "bad.h5"
    _tiny(p)
    with h5py.File(p, "a") as f:
        change(f)
    _refused(p, needle)


@pytest.mark.parametrize("change,needle", [
    # without its json-keys list, the JSON text was read as text: `profile show` exited 1
    # (AttributeError: 'str' object has no attribute 'get')
    (lambda f: f["provenance"].attrs.__delitem__("json-keys"),
     "provenance['cross_validation'] must be a JSON object, got str '{"),
    # a count as text: "0" read as a true value (one shape factor per shape)
    (lambda f: f["provenance"].attrs.__setitem__("num_shape_factors", "0"),
     "provenance['num_shape_factors'] must be a whole number at or above 0, got str '0'"),
])
def test_provenance_entries_read_as_structures_or_counts_are_refused_by_name(tmp_path, change,
                                                                              needle):
    p = tmp_path / "bad.h5"
    _tiny(p)
    with h5py.File(p, "a") as f:
        change(f)
    _refused(p, needle)
    line = assert_one_line_error(cli("profile", "show", str(p), timeout=60))
    assert line.startswith(f"vtrain: error: {p}: {needle}"), line


def _first_op(f):
    return f["ops"][next(iter(f["ops"]))]


def _rows(f) -> int:
    return _first_op(f)["time_s"].shape[0]


def _replace(f, name, data, size):
    g = _first_op(f)
    del g[name]
    if data is not None:
        g.create_dataset(name, data=data)
    else:  # an absurd size that costs no disk: compressed fill value
        g.create_dataset(name, shape=(size,), dtype="f8", chunks=(1 << 16,), compression="gzip")


def test_byte_flips_give_a_clean_error_or_a_valid_store(tmp_path):
    data = bytearray(STORE.read_bytes())
    rng = np.random.default_rng(13)
    outcomes = {"refused": 0, "read": 0}
    for k in range(40):
        flipped = bytearray(data)
        for pos in rng.integers(0, len(data), size=1 + k % 4):
            flipped[pos] ^= 1 << int(rng.integers(0, 8))
        p = tmp_path / f"flip{k}.h5"
        p.write_bytes(bytes(flipped))
        try:
            ProfileStore.open(p)
            outcomes["read"] += 1
        except ProfileStoreError as exc:
            assert str(p) in str(exc)
            outcomes["refused"] += 1
    assert sum(outcomes.values()) == 40


# --------------------------------------------------------------------------- writers

def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    store_path = tmp_path / "s.h5"
    _tiny(store_path)
    session_path = tmp_path / "s.json"
    save_session(Session(), session_path)
    before = store_path.read_bytes(), session_path.read_bytes()
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(OSError) as err:
        ProfileStore.open(store_path).save(store_path)
    assert err.value.filename == str(store_path) and err.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as err:
        save_session(Session(), session_path)
    assert err.value.filename == str(session_path)
    assert (store_path.read_bytes(), session_path.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5", "s.json"]


def test_writers_on_a_real_full_disk_exit_2_without_a_crash(tmp_path):
    """`profile generate` and `import-nccl-tests` died with SIGSEGV on a full disk (h5py)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        proc = cli("profile", "generate", "--gpu", "H100-SXM5-80GB", "--out", str(mnt / "g.h5"))
        assert proc.returncode == 0, proc.stderr  # fits
        (mnt / "fill").write_bytes(b"")
        with open(mnt / "fill", "wb") as fh:  # fill the rest of the disk
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        before = (mnt / "g.h5").read_bytes()
        assert_one_line_error(cli("profile", "generate", "--gpu", "A100-SXM4-80GB", "--out",
                                  str(mnt / "a.h5")), str(mnt / "a.h5"), "No space left on device")
        nccl = tmp_path / "all_reduce_2gpu.txt"
        nccl.write_text("#  Rank  0 Group  0 Pid 1 on x device  0 [0x00] A100\n"
                        "#  Rank  1 Group  0 Pid 1 on x device  1 [0x00] A100\n"
                        "  1048576  262144  float  sum  -1  100.0  10.49  15.73  0  100.0  10.49  15.73  0\n"
                        "  2097152  524288  float  sum  -1  150.0  13.98  20.97  0  150.0  13.98  20.97  0\n")
        proc = cli("profile", "import-nccl-tests", str(nccl), "--into", str(mnt / "g.h5"))
        assert proc.returncode == 2 and "No space left on device" in proc.stderr
        assert (mnt / "g.h5").read_bytes() == before
        assert sorted(p.name for p in mnt.iterdir()) == ["fill", "g.h5"]
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_orphaned_temporary_files_are_removed_by_the_next_save(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    orphan = tmp_path / f".s.json.{dead}.abc123xy.tmp"
    orphan.write_text("half a session")
    other = tmp_path / f".other.h5.{dead}.x9x9x9x9.tmp"
    other.write_bytes(b"\x89HDF")
    live = tmp_path / ".s.json.1.keepkeep.tmp"  # pid 1 runs: a save in progress elsewhere
    foreign = tmp_path / f".s.json.{dead}.not-ours.tmp"  # not a name this program makes
    foreign.write_text("")
    live.write_text("")
    unrelated = tmp_path / ".notes.tmp"
    unrelated.write_text("")
    save_session(Session(), tmp_path / "s.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".notes.tmp", live.name,
                                                                 foreign.name, "s.json"])
    assert atomic.remove_orphans(tmp_path) == []


def test_kill_9_during_save_leaves_an_orphan_that_the_next_save_removes(tmp_path):
    code = ("import os, signal, sys\n"
            "from core.util.atomic import atomic_target\n"
            "with atomic_target(sys.argv[1]) as tmp:\n"
            "    open(tmp, 'w').write('partial')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    target = tmp_path / "s.json"
    save_session(Session(), target)
    before = target.read_bytes()
    proc = subprocess.run([sys.executable, "-c", code, str(target)], cwd=ROOT)
    assert proc.returncode == -9
    assert target.read_bytes() == before and len(list(tmp_path.iterdir())) == 2
    save_session(Session(), target)
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_unwritable_output_is_one_line_naming_the_file(tmp_path):
    out = tmp_path / "no" / "such" / "folder" / "x.h5"
    assert_one_line_error(cli("profile", "generate", "--gpu", "A100-SXM4-80GB", "--out", str(out)),
                          str(out))


# --------------------------------------------------------------------------- command line

def test_every_subcommand_and_argument_has_help():
    import argparse
    from core.cli import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    if not helps.get(name):
                        missing.append(" ".join(path + [name]))
                    walk(sub, path + [name])
            elif not action.help:
                missing.append(" ".join(path) + " " + "/".join(action.option_strings or [action.dest]))

    walk(build_parser(), ["vtrain"])
    assert missing == []


@pytest.mark.parametrize("argv, message", [
    (["optimal", "{ex}", "--gpus", "8", "--flops", "-1e20"],
     "--flops: -1e+20 must be a positive, finite number of FLOPs"),
    # 1e400 reads as inf: it said 'inf must be a positive number', which inf is
    (["optimal", "{ex}", "--gpus", "8", "--flops", "1e400"],
     "--flops: inf must be a positive, finite number of FLOPs"),
    (["optimal", "{ex}", "--gpus", "8", "--gpu-hours", "inf"],
     "--gpu-hours: inf must be a positive, finite number of GPU-hours"),
    (["optimal", "{ex}", "--gpus", "8", "--days", "-inf"],
     "--days: -inf must be a number above 0 and at most 3,650"),
    (["sweep", "{ex}", "--gpus", "8", "--tokens", "-2.5E3"],
     "--tokens: -2500.0 must be a positive finite number"),
    (["sweep", "{ex}", "--gpus", "8", "--deadline-days", "-1e-3"],
     "--deadline-days: -0.001 must be a positive finite number"),
])
def test_a_negative_number_in_exponent_form_is_an_options_value(capsys, argv, message):
    """argparse reads only -5 and -.5 as negative numbers: "--flops -1e20" was "argument
    --flops: expected one argument", the rule unsaid. Every form of a negative float is the
    option's value, refused by the option's own check (exit 2, one line)."""
    from core.cli import build_parser, main
    ex = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main([a.format(ex=ex) for a in argv]) == 2
    assert capsys.readouterr().err == f"vtrain: error: {message}\n"
    # sub-sub-parsers too (vtrain import ..., export ..., trace ...)
    sub = build_parser()._subparsers._group_actions[0].choices["import"]
    verbs = sub._subparsers._group_actions[0].choices
    assert all(p._negative_number_matcher.match("-1e20") for p in verbs.values())


def test_report_shows_the_parameter_count():
    proc = cli("simulate", str(EXAMPLES / "gpt3_175b.json"))
    n = num_parameters(load_any(EXAMPLES / "gpt3_175b.json").model, 8)
    assert n == 174_615_846_912
    assert "Parameters" in proc.stdout and f"{n / 1e9:,.2f} B" in proc.stdout
    proc = cli("simulate", str(EXAMPLES / "gpt3_175b.json"), "--json")
    assert json.loads(proc.stdout)["num_parameters"] == n


def test_json_output_is_strict():
    from core.util.inputs import NonFiniteError, strict_dumps
    with pytest.raises(NonFiniteError, match=r"result.plans\[1\].mfu is NaN"):
        strict_dumps({"plans": [{"mfu": 0.5}, {"mfu": float("nan")}]})
    proc = cli("sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--json")
    json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the output"))


def test_sweep_warnings_name_the_plans_they_concern():
    from core.sim.comm import summarize_warnings
    from core.studies.sweep import SweepSpace, run_sweep
    s = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    s.plan.global_batch_size = 64  # the data-parallel all-reduce of 1.26 GiB > 1 GiB measured
    res = run_sweep(s, SweepSpace(max_gpus=8, micro_batch_sizes=(16, 32)))
    beyond = [w for w in res.warnings if "beyond the measured sizes" in w]
    assert beyond and all("; in " in w and " plan" in w for w in beyond)
    fits = {f"t={res.tensor_parallel[i]} p={res.pipeline_parallel[i]} d={res.data_parallel[i]} "
            f"b={res.micro_batch_size[i]}" for i in np.flatnonzero(res.fits_in_memory)}
    named = [" ".join(x.split()[:4]) for w in beyond
             for x in w.split(": ", 2)[-1].split(" and ")[0].split(", ")]
    assert named and set(named) <= fits
    folded = summarize_warnings(res.warnings)
    assert any("; in plans t=" in w for w in folded)


def test_hugging_face_config_values_are_bounded_and_named_by_their_keys(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2**63, "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008,
           "vocab_size": 32000, "max_position_embeddings": 4096, "hidden_act": "silu",
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(cli("import", "hf", str(tmp_path / "config.json"), "--json", timeout=60),
                          "config.json: num_hidden_layers: num_hidden_layers=9223372036854775808 "
                          "must be at most 10,000")


_HF_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32,
             "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
             "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 8192,
             "hidden_act": "silu", "tie_word_embeddings": False}
_HF_GEMMA3 = {"architectures": ["Gemma3ForCausalLM"], "attn_logit_softcapping": None,
              "final_logit_softcapping": None, "head_dim": 256, "hidden_activation":
              "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
              "max_position_embeddings": 32768, "model_type": "gemma3_text",
              "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
              "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144}


@pytest.mark.parametrize("cfg,rule", [
    # a list where the class name belongs: TypeError (unhashable), exit 1
    ({**_HF_LLAMA, "model_type": ["llama"]},
     'model_type: ["llama"] must be text (the name of the config\'s class, such as "llama")'),
    # Gemma 3 has no cap: anything but null was read as "off", though its code caps then
    ({**_HF_GEMMA3, "final_logit_softcapping": "x"},
     "final_logit_softcapping: 'x': a cap must be a positive number, or null for none"),
    ({**_HF_GEMMA3, "attn_logit_softcapping": -1},
     "attn_logit_softcapping: -1: a cap must be a positive number, or null for none"),
    # an unused window of the wrong type was read as "inactive"
    ({**_HF_LLAMA, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 128,
      "use_sliding_window": False, "sliding_window": "x"},
     "sliding_window: 'x': a window must be a positive integer, or null for none"),
])
def test_hugging_face_config_values_of_the_wrong_type_are_refused_by_key(cfg, rule):
    from core.io.hf_import import session_from_hf_config
    with pytest.raises(ConfigError) as err:
        session_from_hf_config(cfg, "config.json")
    assert str(err.value) == f"config.json: {rule}", str(err.value)


def test_a_save_never_replaces_a_device_or_a_pipe(tmp_path, capsys):
    """--out naming something that is not a regular file (/dev/null, a FIFO) is refused naming
    it; the rename would have replaced it (tester: `--out /dev/null` as root turned /dev/null
    into a regular file). The command exits 2 and the pipe is still a pipe."""
    import stat

    from core.cli import main
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as err:
        save_session(Session(), fifo)
    assert err.value.filename == str(fifo) and "not a regular file" in str(err.value)
    assert main(["import", "preset", "Llama 3 8B", "--out", str(fifo)]) == 2
    assert str(fifo) in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.parametrize("value,rule", [
    ("[" * 100_000, "JSON nested 100000 levels deep, more than 64"),  # was RecursionError, exit 1
    ("NaN", "NaN must be a finite number"),
    ("1e400", "Infinity must be a finite number"),
    ("9" * 5000, "an integer of about 5,000 digits is beyond the range of any number"),
    ("[1, [-Infinity]]", "[1][0]: -Infinity must be a finite number"),
])
def test_set_values_are_read_under_the_session_files_json_rules(value, rule):
    session = load_session(EXAMPLES / "gpt3_1.3b_single_node.json")
    with pytest.raises(ConfigError) as err:
        apply_sets(session, [f"model.num_layers={value}"])
    assert str(err.value).startswith(f"--set model.num_layers: {rule}"), str(err.value)


def test_a_field_set_twice_takes_the_last_value_as_repeated_options_do():
    session = load_session(EXAMPLES / "gpt3_1.3b_single_node.json")
    out = apply_sets(session, ["plan.tensor_parallel=4", "plan.tensor_parallel=8"])
    assert out.plan.tensor_parallel == 8


def test_set_value_nested_too_deeply_exits_2_naming_the_option():
    line = assert_one_line_error(cli("simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"),
                                     "--set", "model.name=" + "[" * 100_000, timeout=60))
    assert line == ("vtrain: error: --set model.name: JSON nested 100000 levels deep, "
                    "more than 64")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(["model.num_layers", "model.name", "plan.tensor_parallel",
                              "cluster.gpu", "cost.price_per_gpu_hour_usd",
                              "cluster.profile_path", "plan.recompute"]),
       value=st.one_of(st.text(max_size=40), st.recursive(
           st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                         max_size=3),
           max_leaves=8).map(lambda v: json.dumps(v))))
def test_fuzz_set_values_are_applied_or_refused_by_name(field, value):
    session = _SET_FUZZ_SESSION
    try:
        out = apply_sets(session, [f"{field}={value}"])
    except ConfigError as exc:
        assert str(exc).startswith(f"--set {field}: "), str(exc)
        return
    section, name = field.split(".")
    got = getattr(getattr(out, section), name)
    assert not isinstance(got, float) or math.isfinite(got)


_SET_FUZZ_SESSION = load_session(EXAMPLES / "gpt3_1.3b_single_node.json")


@pytest.mark.parametrize("args,line", [
    # float() and int() read Python's forms: 1_5 was a price of $15, 1_024 GPUs were 1024
    (["simulate", "{S}", "--price-per-gpu-hour", "1_5"],
     "vtrain simulate: error: argument --price-per-gpu-hour: '1_5' is not a number"),
    (["optimal", "{S}", "--gpus", "1_024", "--days", "3"],
     "vtrain optimal: error: argument --gpus: '1_024' is not a whole number"),
    (["sweep", "{S}", "--deadline-days", "1e-320"],
     "vtrain sweep: error: argument --deadline-days: '1e-320' is a subnormal number (under "
     "2.2e-308 in magnitude)"),
])
def test_number_options_take_decimal_digits_only(args, line):
    proc = cli(*[a.replace("{S}", str(EXAMPLES / "gpt3_1.3b_single_node.json")) for a in args],
               timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines()[-1] == line


def test_number_option_types_accept_what_a_user_writes():
    from core.cli.common import decimal_arg, integer_arg
    assert [decimal_arg(t) for t in ("2.5", "1e9", "-0.5", "300e9")] == [2.5, 1e9, -0.5, 300e9]
    assert [integer_arg(t) for t in ("1024", "+8", "-1", " 64 ")] == [1024, 8, -1, 64]


def test_integer_list_options_take_decimal_digits_only():
    """sweep --gpus 1_6 swept 16 GPUs (int() reads Python's digit groups)."""
    proc = cli("sweep", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--gpus", "1_6", timeout=60)
    assert_one_line_error(proc)
    assert proc.stderr == "vtrain: error: --gpus: '1_6' is not a comma-separated list of integers\n"


_RUNS = ("num_layers,hidden_size,num_attention_heads,seq_length,vocab_size,micro_batch_size,"
         "data_parallel,tensor_parallel,pipeline_parallel,global_batch_size,precision,gpu,"
         "recompute,measured_iteration_time_s\n"
         + "24,2048,16,2048,50257,4,2,2,2,256,bf16,A100-SXM4-80GB,full,5.0\n" * 3)


@pytest.mark.parametrize("args, message", [
    # 0 folds ran the plain validation (0 was the option's "not given"), exit 0
    (["validate", "{csv}", "--cross-validate", "0"], "--cross-validate: 0: needs at least 2 folds"),
    # inf and 1e308 (inf once multiplied) were "internal error: ValueError: Residuals are not
    # finite in the initial point", exit 1
    (["calibrate", "{csv}", "--profile", "profiles/A100-SXM4-80GB.h5", "--out", "{out}",
      "--file-weights", "inf"], "--file-weights: needs one positive finite weight per CSV (1), "
                                "got inf"),
])
def test_fold_counts_and_file_weights_out_of_range_are_refused_by_option(tmp_path, args, message):
    csv_path = tmp_path / "runs.csv"
    csv_path.write_text(_RUNS)
    out = tmp_path / "cal.h5"
    line = assert_one_line_error(cli(*[a.format(csv=csv_path, out=out) for a in args]))
    assert line == f"vtrain: error: {message}" and not out.exists()


def test_file_weights_count_by_their_ratio_even_near_the_float_limit():
    from core.accuracy.calibrate import balanced_weights
    # each file gets its share of the 5 runs' total weight: equal shares 2.5 / 3 and 2.5 / 2
    assert balanced_weights([3, 2], [1e308, 1e308]) == pytest.approx([5 / 6] * 3 + [1.25] * 2)
    assert balanced_weights([3, 2], [1, 4]) == pytest.approx([1 / 3] * 3 + [2.0] * 2)
    with pytest.raises(ValueError, match="positive finite"):
        balanced_weights([3, 2], [1, math.inf])


_TINY = "0." + "0" * 400 + "1"  # 1e-401 written out: below the smallest double, reads as 0.0
_TINY_RULE = ("is below 2.2e-308, the smallest normal double, in magnitude (it would read as "
              "0): give 0 or a normal number")


def test_a_decimal_below_the_smallest_double_is_named_never_read_as_zero(tmp_path):
    """``1e-400`` (or 0.000…01 with 400 zeros) reads as 0.0 in ``float()``, ``json``, ``tomllib``
    and PyYAML: ``--tokens 1e-400`` was refused as "--tokens=0.0 must be at least 1" (the user
    typed no 0) and a session's price of 1e-400 USD became a free GPU hour. Every number reader
    names the text and the rule instead; 0 written as such (``0e5``, ``-0.0``) and a subnormal
    (left to each field's rule) still read as before."""
    from core.cli.common import decimal_arg
    from core.store.nccl_tests import NcclTestsError, read_nccl_tests
    rule = f"'1e-400' {_TINY_RULE}"
    with pytest.raises(inputs.DecimalUnderflowError) as exc:
        inputs.decimal_number(" 1e-400 ")
    assert str(exc.value) == rule
    with pytest.raises(inputs.DecimalUnderflowError, match="smallest normal double"):
        inputs.decimal_number(_TINY)
    assert [inputs.decimal_number(t) for t in ("0e5", "-0.0", "000", "1e-320")] == [0.0, 0.0, 0.0,
                                                                                   1e-320]
    with pytest.raises(Exception) as exc:
        decimal_arg("-1e-400")
    assert str(exc.value) == f"'-1e-400' {_TINY_RULE}"
    # JSON (a session, --set), TOML and YAML: the key path is named
    with pytest.raises(SessionFileError) as exc:
        inputs.parse_json('{"cost": {"price_per_gpu_hour_usd": 1e-400}}', "s.json",
                          SessionFileError)
    assert str(exc.value) == f"s.json: cost.price_per_gpu_hour_usd: {rule}"
    assert inputs.parse_json('{"a": [0e5, 0.0, 1e-320]}', "s.json", SessionFileError) == {
        "a": [0.0, 0.0, 1e-320]}
    with pytest.raises(ValueError) as exc:
        inputs.parse_json_or_text("1e-400", ValueError)
    assert str(exc.value) == rule
    (tmp_path / "a.toml").write_text("[a]\nb = 1e-400\n")
    with pytest.raises(ValueError) as exc:
        inputs.read_toml_file(tmp_path / "a.toml", ValueError)
    assert str(exc.value) == f"{tmp_path / 'a.toml'}: a.b: {rule}"
    with pytest.raises(ValueError) as exc:
        inputs.parse_yaml("a:\n  b: 1.0e-400\n", "r.yaml", ValueError)
    assert str(exc.value) == f"r.yaml: a.b (line 2): '1.0e-400' {_TINY_RULE}"
    # an nccl-tests CSV: the line, never "expected size(B),count,..." nor a skipped row
    (tmp_path / "all_reduce_8gpu.csv").write_text("size(B),count,type,time(ns)\n"
                                                  "1048576,262144,float,1e-400\n")
    with pytest.raises(NcclTestsError) as exc:
        read_nccl_tests(tmp_path / "all_reduce_8gpu.csv")
    assert str(exc.value) == f"{tmp_path / 'all_reduce_8gpu.csv'}: line 2: {rule}"
    # a measurement file's cell and a price sheet's cell: the row and column named
    from core.accuracy.measured import MeasurementFileError, _number
    with pytest.raises(MeasurementFileError) as exc:
        _number("runs.csv: row 3, column 'time_s'", "1e-400")
    assert str(exc.value) == f"runs.csv: row 3, column 'time_s': {rule}"
    from core.io import price_sheet
    errors: list = []
    assert price_sheet._number("1e-400", "usd_per_gpu_hour", "p.csv: row 2", errors,
                               integer=False, bounds=(0, 1e3)) is None
    assert [(e.field, e.message) for e in errors] == [("p.csv: row 2: usd_per_gpu_hour", rule)]
    # the command line: one line, exit 2
    session = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    proc = cli("simulate", session, "--tokens", _TINY, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("vtrain simulate: error: argument --tokens: '0.000")
    assert proc.stderr.splitlines()[-1].endswith(f"0001' {_TINY_RULE}")
    proc = cli("simulate", session, "--set", "cost.price_per_gpu_hour_usd=1e-400", timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == f"vtrain: error: --set cost.price_per_gpu_hour_usd: {rule}\n"
