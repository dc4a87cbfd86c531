"""Third round of hardening: bounds on numbers, paths and shell expansion.

Handed cases (``../shared/cases/s3``): a 401-digit JSON integer, a ``profile_path`` of an
unknown ``~user``, an authors' config with ``inter_node_bandwidth: null``, a Megatron launch
with a 4,300-digit ``$((...))`` and one whose variable doubles twenty times. Each is refused
with exit status 2 and one line naming the file and the field; the properties below check the
whole kind of each (every numeric field, every path string, random launch scripts).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.io.vtrain_json import vtrain_config_from_dict
from core.plan.cluster import ClusterConfig, CostConfig
from core.plan.fields import BOUNDS, ConfigError, field_kind
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.util.inputs import parse_json
from core.io.megatron.arguments import MegatronArgsError
from core.io.megatron.launch import read_launch
from core.io.megatron.to_session import import_file, session_from_launch
from core.io.shell_words import MAX_STATEMENT_BYTES, quote_state
from core.store.format import ProfileStoreError
from core.io.session import SessionFileError, load_any
from core.sim.simulate import session_profile
from tests.conftest import CASES, EXAMPLES
from tests.test_hardening import assert_one_line_error, cli

S3 = CASES / "s3"
EXAMPLE = EXAMPLES / "gpt3_1.3b_single_node.json"
TORCHRUN = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
            "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
            "--micro-batch-size 4 --global-batch-size 256 --tokenizer-type GPT2BPETokenizer "
            "--bf16 --tensor-model-parallel-size $T")
#: What the readers raise for bad input (the window's File > Open catches these).
INPUT_ERRORS = (SessionFileError, ConfigError, ProfileStoreError, MegatronArgsError)


def s3_case(name: str, tmp_path: Path) -> Path:
    """A copy of the handed case ``name`` (never followed if it is a link), or skip."""
    src = S3 / name
    if not os.path.lexists(src):
        pytest.skip(f"shared case not present: {src}")
    dst = tmp_path / name
    shutil.copy2(src, dst, follow_symlinks=False)
    return dst


def _session_doc() -> dict:
    return json.loads(EXAMPLE.read_text())


# --------------------------------------------------------------------------- the handed cases

@pytest.mark.parametrize("name, command, field", [
    ("crash_bigint_tensor_parallel.json", "simulate", "plan.tensor_parallel"),
    ("crash_profile_path_tilde_nouser.json", "simulate", "cluster.profile_path"),
    ("crash_authors_inter_node_bandwidth_null.json", "simulate", "inter_node_bandwidth"),
])
def test_handed_json_case_exits_2_naming_file_and_field(tmp_path, name, command, field):
    path = s3_case(name, tmp_path)
    assert_one_line_error(cli(command, str(path)), str(path), field)


@pytest.mark.parametrize("name, statement", [
    ("crash_megatron_arith_4300_digits.sh", "T=$((1"),
    ("hang_megatron_variable_doubling.sh", "A=$A$A"),
])
def test_handed_launch_case_exits_2_naming_file_and_statement(tmp_path, name, statement):
    path = s3_case(name, tmp_path)
    out = tmp_path / "out.json"
    proc = cli("import", "megatron-args", str(path), "--out", str(out), timeout=60)
    assert_one_line_error(proc, str(path), statement)
    assert not out.exists()  # nothing written


def test_doubling_script_is_refused_within_a_second(tmp_path):
    path = s3_case("hang_megatron_variable_doubling.sh", tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(MegatronArgsError):
        import_file(path)
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("name", ["crash_bigint_tensor_parallel.json",
                                  "crash_profile_path_tilde_nouser.json",
                                  "crash_authors_inter_node_bandwidth_null.json"])
def test_core_raises_the_input_errors_the_window_catches(tmp_path, name):
    """The window opens with ``load_any(validate=False)``: it must raise the project's input
    errors (never OverflowError, TypeError or RuntimeError)."""
    path = s3_case(name, tmp_path)
    for validate in (False, True):
        with pytest.raises((SessionFileError, ConfigError)) as err:
            load_any(path, validate=validate)
        assert str(path) in str(err.value)


# --------------------------------------------------------------------------- huge integers

def _numeric_fields() -> list[str]:
    out = []
    for section, cls in (("model", ModelConfig), ("plan", ParallelPlan),
                         ("cluster", ClusterConfig), ("cost", CostConfig)):
        out += [f"{section}.{f.name}" for f in __import__("dataclasses").fields(cls)
                if field_kind(f)[0] in ("int", "float")]
    return out


NUMERIC_FIELDS = _numeric_fields()
#: The authors' keys that hold numbers (core.io.vtrain_json._AUTHORS_FIELDS), and a valid config.
AUTHORS_NUMERIC = ["num_gpus", "tensor_parallel_size", "data_parallel_size",
                   "pipeline_parallel_size", "global_batch_size", "micro_batch_size", "num_layers",
                   "hidden_size", "num_attention_heads", "max_length", "ffn_hidden_size",
                   "vocab_size", "inter_node_bandwidth", "intra_node_bandwidth", "node_size"]
AUTHORS = {"num_gpus": 8, "gpu_name": "A100", "tensor_parallel_size": 2, "data_parallel_size": 2,
           "pipeline_parallel_size": 2, "global_batch_size": 64, "micro_batch_size": 2,
           "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "max_length": 2048,
           "use_gradient_bucket": False, "use_checkpoint": True, "pipeline_scheduling": "1f1b",
           "inter_node_bandwidth": 200, "intra_node_bandwidth": 150, "node_size": 8,
           "trace_path": "trace"}


def test_the_valid_templates_are_accepted(tmp_path):
    vtrain_config_from_dict(dict(AUTHORS))
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_session_doc()))
    load_any(path)


_FILE_DIR = Path(tempfile.mkdtemp(prefix="vtrain-bounds-"))


def _with_literal(doc: dict, where: list[str], literal: str) -> str:
    """``doc`` as JSON text with the number literal ``literal`` at the key path ``where``."""
    node = doc
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = "@@NUMBER@@"
    return json.dumps(doc).replace('"@@NUMBER@@"', literal)


huge_digits = st.integers(min_value=20, max_value=6000)


@settings(max_examples=30, deadline=None)
@given(field=st.sampled_from(NUMERIC_FIELDS), digits=huge_digits, negative=st.booleans())
def test_a_huge_integer_in_any_session_field_is_refused_by_magnitude(field, digits, negative):
    literal = ("-" if negative else "") + "9" * digits
    text = _with_literal(_session_doc(), field.split("."), literal)
    path = _FILE_DIR / "huge.json"
    path.write_text(text)
    for validate in (False, True):
        with pytest.raises((SessionFileError, ConfigError)) as err:
            load_any(path, validate=validate)
        assert str(path) in str(err.value) and field in str(err.value)
    # the same value built in code (the window, a script): check_value alone, no float()
    doc = _session_doc()
    section, name = field.split(".")
    doc[section][name] = -(10**digits - 1) if negative else 10**digits - 1
    with pytest.raises(ConfigError) as err:
        Session.from_dict({k: v for k, v in doc.items() if k not in ("format", "version")})
    assert field in str(err.value)


@settings(max_examples=30, deadline=None)
@given(key=st.sampled_from(AUTHORS_NUMERIC), digits=huge_digits, negative=st.booleans())
def test_a_huge_integer_in_any_authors_key_is_refused_by_magnitude(key, digits, negative):
    text = _with_literal(dict(AUTHORS), [key], ("-" if negative else "") + "9" * digits)
    path = _FILE_DIR / "authors.json"
    path.write_text(text)
    with pytest.raises((SessionFileError, ConfigError)) as err:
        load_any(path)
    assert str(path) in str(err.value) and key in str(err.value)
    value = 10**digits - 1
    with pytest.raises(ConfigError) as err:
        vtrain_config_from_dict({**AUTHORS, key: -value if negative else value})
    assert key in str(err.value)


@pytest.mark.parametrize("key", [k for k in AUTHORS_NUMERIC if k not in AUTHORS]
                         + ["inter_node_bandwidth", "intra_node_bandwidth", "node_size",
                            "num_gpus", "tensor_parallel_size"])
@pytest.mark.parametrize("value", [None, "8", [8], {"x": 8}, True])
def test_every_authors_key_with_null_or_a_wrong_type_is_refused_by_name(key, value):
    with pytest.raises(ConfigError) as err:
        vtrain_config_from_dict({**AUTHORS, key: value})
    assert [e.field for e in err.value.errors] == [key]


def test_integers_in_range_are_compared_exactly():
    """Bounds compare integers as integers: 2^63 is out of num_layers' bounds, and an
    integer just inside the largest bound is still accepted where it may be."""
    hi = int(BOUNDS["tokens"].hi)
    doc = _session_doc()
    doc["cost"]["training_tokens"] = hi
    assert Session.from_dict({k: v for k, v in doc.items()
                              if k not in ("format", "version")}).cost.training_tokens == hi
    for bad in (hi + 1, 2**63, 2**1100):
        doc["cost"]["training_tokens"] = bad
        with pytest.raises(ConfigError, match="cost.training_tokens"):
            Session.from_dict({k: v for k, v in doc.items() if k not in ("format", "version")})


def test_json_integers_beyond_a_float_are_refused_with_their_key():
    assert parse_json('{"a": [1, 17976931348623157' + "0" * 292 + "]}", "x", ValueError)
    for text, key in (('{"a": {"b": 2' + "0" * 308 + "}}", "a.b"),
                      ('[0, -' + "9" * 5000 + "]", "[1]"),
                      ('{"t": ' + "1" * 100_000 + "}", "t")):
        with pytest.raises(ValueError) as err:
            parse_json(text, "x.json", ValueError)
        assert str(err.value).startswith("x.json: " + key)
        assert len(str(err.value)) < 300  # the digits are counted, never printed


def test_readers_of_traces_and_csv_refuse_huge_integers(tmp_path):
    from core.studies.scheduler import read_jobs
    from core.accuracy.measured import MeasurementFileError, read_measurements
    trace = tmp_path / "jobs.json"
    trace.write_text('[{"name": "a", "arrival_h": 0, "model": "GPT-3 1.3B", '
                     '"global_batch_size": ' + "9" * 401 + ', "tokens": 1e9, '
                     '"requested_gpus": 8}]')
    with pytest.raises(ConfigError) as err:
        read_jobs(str(trace))
    assert "[0].global_batch_size" in str(err.value)
    header = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
              "sequence length,tensor parallelism,data parallelism,pipeline parallelism,"
              "iteration time (ms)")
    csv = tmp_path / "m.csv"
    csv.write_text(f"{header}\n{'9' * 5000},64,1,2048,16,24,2048,8,1,1,100\n")
    with pytest.raises(MeasurementFileError, match="# GPUs"):
        read_measurements(csv)


def test_hf_import_refuses_huge_integers(tmp_path):
    from core.io.hf_import import read_hf_config
    cfg = tmp_path / "config.json"
    cfg.write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama", '
                   '"hidden_size": ' + "9" * 401 + ', "num_hidden_layers": 32}')
    with pytest.raises((SessionFileError, ConfigError)) as err:
        read_hf_config(cfg)
    assert "hidden_size" in str(err.value) and str(cfg) in str(err.value)


# --------------------------------------------------------------------------- profile paths

@pytest.fixture(scope="module")
def path_dir():
    """A folder with a symlink loop and a link to another process's environment."""
    d = Path(tempfile.mkdtemp(prefix="vtrain-paths-"))
    os.symlink("loop.h5", d / "loop.h5")
    os.symlink("b.h5", d / "a.h5")
    os.symlink("a.h5", d / "b.h5")
    os.symlink(f"/proc/{os.getpid()}/environ", d / "env.h5")
    yield d
    shutil.rmtree(d)


def _open_with_profile(folder: Path, profile_path: str) -> str | None:
    """Load a session naming ``profile_path`` and open its store: None on success, else the
    message of the input error (anything else fails the test)."""
    doc = _session_doc()
    doc["cluster"]["profile_path"] = profile_path
    path = folder / "session.json"
    path.write_text(json.dumps(doc))
    try:
        session_profile(load_any(path))
    except INPUT_ERRORS as exc:
        assert str(path) in str(exc)
        return str(exc)
    return None


@pytest.mark.parametrize("profile_path", ["~nosuchuser_xyz/a.h5", "a\0b.h5", "loop.h5", "a.h5",
                                          "env.h5", "\ud800.h5", "x" * 4000 + ".h5"])
def test_unresolvable_profile_paths_are_refused_naming_the_path_given(path_dir, profile_path):
    message = _open_with_profile(path_dir, profile_path)
    assert message is not None and "cluster.profile_path" in message
    assert "environ" not in message and "/proc/" not in message  # never where a link points


def test_an_empty_profile_path_is_refused_not_read_as_none(path_dir):
    # "" was read as "no store of its own": the shipped store was used, exit 0
    message = _open_with_profile(path_dir, "")
    assert message is not None
    assert message.endswith('cluster.profile_path: profile_path="" is an empty path (null when '
                            'there is none)')
    assert _open_with_profile(path_dir, None) is None  # null: the shipped store


def test_cli_profile_option_names_the_path_given(tmp_path, path_dir):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_session_doc()))
    for name in ("env.h5", "loop.h5"):
        line = assert_one_line_error(cli("simulate", str(path), "--profile",
                                         str(path_dir / name)), name)
        assert "environ" not in line


path_text = st.one_of(
    st.text(max_size=40),
    st.text(max_size=20).map(lambda t: "~" + t),
    st.text(max_size=20).map(lambda t: t + "\0.h5"),
    st.integers(1, 5000).map(lambda n: "d/" * (n // 4) + "x.h5"),
    st.sampled_from(["loop.h5", "./a.h5", "sub/../loop.h5", "env.h5", "~", "~/", "/", ".h5",
                     "~nosuchuser_xyz", "~root/none.h5"]),
)


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(profile_path=path_text)
def test_any_profile_path_is_a_clean_refusal_or_a_store(path_dir, profile_path):
    message = _open_with_profile(path_dir, profile_path)
    if message is not None:
        assert "environ" not in message


# --------------------------------------------------------------------------- launch scripts

def _import(text: str) -> None:
    session_from_launch(read_launch(text, "launch.sh"), num_gpus=8)


@pytest.mark.parametrize("expr", ["99999999999*99999999999", "2*" * 70 + "2",
                                  "+".join(["1"] * 100_000), "-9223372036854775808",
                                  "1" * 4300])
def test_arithmetic_beyond_64_bits_or_long_is_refused(expr):
    with pytest.raises(MegatronArgsError) as err:
        _import(f"T=$(({expr}))\n{TORCHRUN}\n")
    assert str(err.value).startswith("launch.sh: statement 'T=$((")


def test_arithmetic_a_launch_means_still_works():
    launch = read_launch(f"N=4\nT=$((N*2/4))\n{TORCHRUN}\n", "launch.sh")
    assert session_from_launch(launch, num_gpus=8).session.plan.tensor_parallel == 2
    big = read_launch(f"T=$((9223372036854775807 - 9223372036854775805))\n{TORCHRUN}\n", "x")
    assert session_from_launch(big, num_gpus=8).session.plan.tensor_parallel == 2


def test_expansion_is_bounded_by_size_not_by_steps():
    value = "x" * 4096
    text = f"A={value}\n" + "B=" + "$A" * (MAX_STATEMENT_BYTES // 4096 + 1) + f"\nT=2\n{TORCHRUN}\n"
    with pytest.raises(MegatronArgsError, match="launch.sh: statement 'B="):
        _import(text)
    fine = f"A={value}\n" + "B=" + "$A" * 8 + f"\nT=2\n{TORCHRUN}\n"
    _import(fine)  # a few KB expanded is what launches do


def test_an_unclosed_quote_is_refused_quickly():
    text = 'A="' + "\nx" * 200_000 + f"\n{TORCHRUN}\n"
    t0 = time.perf_counter()
    with pytest.raises(MegatronArgsError, match="launch.sh: statement"):
        _import(text)
    assert time.perf_counter() - t0 < 2.0


def test_a_count_of_thousands_of_digits_is_refused():
    with pytest.raises(MegatronArgsError, match="--tensor-model-parallel-size"):
        _import(f"T={'9' * 5000}\n{TORCHRUN}\n")


arith = st.lists(st.tuples(st.sampled_from(["+", "-", "*", "/", "%"]),
                           st.integers(0, 10**25)), min_size=1, max_size=80).map(
    lambda terms: "".join(f"{op}{n}" for op, n in terms)[1:] or "1")
statement = st.one_of(
    st.just("A=$A$A"), st.just("B=$A$A$A$A$A"), st.just("A=$B$A"), st.just("export A=$A$B"),
    st.integers(0, 3000).map(lambda n: f"A={'x' * n}"),
    arith.map(lambda e: f"T=$(({e}))"),
    st.integers(1, 100_000).map(lambda n: "T=$((" + "+".join(["1"] * n) + "))"),
    st.just("T=$((A*A))"), st.just("T=2"),
)


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(statement, max_size=30))
def test_random_launch_scripts_finish_fast_with_a_session_or_a_refusal(lines):
    text = "A=xxxxxxxx\nB=yy\n" + "\n".join(lines) + "\n" + TORCHRUN + "\n"
    t0 = time.perf_counter()
    try:
        _import(text)
    except (MegatronArgsError, ConfigError) as exc:
        assert str(exc).startswith("launch.sh") and "\n" not in str(exc)
    assert time.perf_counter() - t0 < 2.0


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab '\"\\#\n", max_size=40), cut=st.integers(0, 40))
def test_quote_scanner_agrees_with_shlex_and_resumes(text, cut):
    """The scanner says what shlex.split says, and resumes at a line's end (as the reader of
    statements uses it: line by line)."""
    try:
        shlex.split(text, comments=True)
        closed = True
    except ValueError:
        closed = False
    assert (quote_state(text) is None) == closed
    cut = text.find("\n", min(cut, len(text)))
    cut = len(text) if cut < 0 else cut
    head, tail = text[:cut], text[cut:]
    assert quote_state(tail, quote_state(head)) == quote_state(text)


# --------------------------------------------------------------------------- vtrain diff

def test_diff_names_the_file_and_the_pinned_field(tmp_path):
    doc = _session_doc()
    pinned = {k: json.loads(json.dumps(doc[k])) for k in ("model", "plan", "cluster", "cost")
              if k in doc}
    pinned["plan"].update(global_batch_size=2**24, micro_batch_size=1, data_parallel=1)
    path = tmp_path / "pinned.json"
    path.write_text(json.dumps({**doc, "compare": {"pinned": pinned}}))
    assert_one_line_error(cli("diff", str(path)), str(path), "compare.pinned.plan.")
    pinned["plan"] = doc["plan"]
    pinned.setdefault("cluster", {})["profile_path"] = "no_such_store.h5"
    path.write_text(json.dumps({**doc, "compare": {"pinned": pinned}}))
    assert_one_line_error(cli("diff", str(path)), str(path),
                          "compare.pinned.cluster.profile_path")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
