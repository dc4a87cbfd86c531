"""Profile stores: filter pipelines audited before any chunk is read, no HDF5 plugin loaded,
stored values of the right type, collective curves that rise with the size, efficiencies
inside physical bounds (the third round's store cases and their kinds)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

from core.store.format import ALLOWED_FILTERS, ProfileStoreError
from core.store.profile_store import CURVE_DIP_TOLERANCE, OP_MODEL_BOUND, STORE_BOUNDS, ProfileStore
from tests.conftest import EXAMPLES, ROOT, case_file

STORE = ROOT / "profiles" / "A100-SXM4-80GB.h5"
SESSION = EXAMPLES / "gpt3_1.3b_single_node.json"
FILTER_CASE = "s3/sec_store_unknown_filter_loads_plugins.h5"
BOOL_CASE = "s3/silent_store_efficiency_bool.h5"


# --------------------------------------------------------------------------- helpers

def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200", **(env or {})})


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vtrain: error: "), proc.stderr
    return lines[0]


def session_on(store: Path, tmp_path: Path) -> Path:
    """A copy of the example session whose ``cluster.profile_path`` is ``store``."""
    doc = json.loads(SESSION.read_text())
    doc["cluster"]["profile_path"] = str(store)
    path = tmp_path / "session.json"
    path.write_text(json.dumps(doc))
    return path


def copy_case(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / Path(name).name
    subprocess.run(["cp", "-P", str(case_file(name)), str(dst)], check=True)
    return dst


def plugin_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A folder holding a shared library whose constructor writes a marker file when any
    process loads it; (folder, marker). Skips without a C compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build a plugin library")
    folder, marker = tmp_path / "plugins", tmp_path / "LOADED"
    folder.mkdir()
    src = tmp_path / "plugin.c"
    src.write_text(textwrap.dedent(f"""\
        #include <stdio.h>
        __attribute__((constructor)) static void mark(void) {{
            FILE *f = fopen("{marker}", "w");
            if (f) {{ fputs("loaded\\n", f); fclose(f); }}
        }}
        """))
    for name in ("libh5evil.so", "libH5Zfilter.so"):
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(folder / name), str(src)], check=True)
    return folder, marker


def tiny(path: Path) -> Path:
    ProfileStore.open(STORE).save(path)
    return path


def refused(path: Path, *needles: str) -> str:
    with pytest.raises(ProfileStoreError) as err:
        ProfileStore._parse(path, path.read_bytes())  # no cache: the file itself is read
    msg = str(err.value)
    assert msg.startswith(str(path)) and "\n" not in msg, msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


def with_filters(ds: h5py.Dataset, filter_ids: list[int]) -> None:
    """Rewrite ``ds`` as a chunked float64 dataset whose pipeline holds ``filter_ids``
    (optional filters: HDF5 writes the chunks unfiltered when it lacks one)."""
    data = np.ascontiguousarray(ds[()], dtype=np.float64)
    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
    del parent[name]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((data.size,))
    for fid in filter_ids:
        dcpl.set_filter(fid, h5py.h5z.FLAG_OPTIONAL, (4,) if fid == 1 else ())
    space = h5py.h5s.create_simple((data.size,))
    h5py.h5d.create(parent.id, name.encode(), h5py.h5t.NATIVE_DOUBLE, space, dcpl=dcpl).write(
        h5py.h5s.ALL, h5py.h5s.ALL, data)


def first_op(f: h5py.File) -> h5py.Group:
    return f["ops"][next(iter(f["ops"]))]


def replace(ds: h5py.Dataset, data) -> None:
    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
    del parent[name]
    parent.create_dataset(name, data=data)


# --------------------------------------------------------------------------- handed cases

def test_case_unknown_filter_is_refused_by_name_and_no_plugin_is_loaded(tmp_path):
    store = copy_case(FILTER_CASE, tmp_path)
    folder, marker = plugin_folder(tmp_path)
    proc = cli("simulate", str(session_on(store, tmp_path)),
               env={"HDF5_PLUGIN_PATH": str(folder), "VTRAIN_CACHE_DIR": ""})
    line = one_line_error(proc)
    assert str(store) in line and "/ops/mlp_fwd/time_s" in line and "32026" in line
    assert not marker.exists()


def test_case_boolean_efficiency_is_refused_with_its_path(tmp_path):
    store = copy_case(BOOL_CASE, tmp_path)
    line = one_line_error(cli("simulate", str(session_on(store, tmp_path))))
    assert str(store) in line and "/op_model" in line and "p2p_efficiency" in line


# --------------------------------------------------------------------------- plugins

def _run_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_the_audit_reads_no_chunk_and_a_chunk_read_would_load_the_plugin(tmp_path):
    """The audit alone (plugin folders left as HDF5_PLUGIN_PATH sets them) refuses the
    store from its filter pipeline without loading anything; reading the chunk in the same
    setting does load the library, so the marker proves what it should."""
    store = copy_case(FILTER_CASE, tmp_path)
    folder, marker = plugin_folder(tmp_path)
    code = f"""
        import h5py, core.store.format as fmt
        fmt.load_h5py = lambda: h5py  # keep the plugin folders: test the audit alone
        f = h5py.File({str(store)!r}, "r")
        try:
            fmt.audit(f)
        except fmt.ProfileStoreError as exc:
            print("REFUSED", exc)
        import os
        print("MARKER", os.path.exists({str(marker)!r}))
        try:
            f["ops/mlp_fwd/time_s"][()]
        except OSError:
            pass
        print("AFTER READ", os.path.exists({str(marker)!r}))
        """
    proc = _run_python(code, {"HDF5_PLUGIN_PATH": str(folder), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("REFUSED /ops/mlp_fwd/time_s: filter 32026")
    assert lines[1:] == ["MARKER False", "AFTER READ True"]


def test_plugin_folders_are_emptied_even_when_h5py_was_imported_first(tmp_path):
    store = copy_case(FILTER_CASE, tmp_path)
    folder, marker = plugin_folder(tmp_path)
    code = f"""
        import os, h5py
        print("BEFORE", h5py.h5pl.size())
        import core.store.format as fmt
        h5 = fmt.load_h5py()
        print("AFTER", h5.h5pl.size())
        try:
            h5.File({str(store)!r}, "r")["ops/mlp_fwd/time_s"][()]
        except OSError:
            print("READ FAILED")
        print("MARKER", os.path.exists({str(marker)!r}))
        """
    proc = _run_python(code, {"HDF5_PLUGIN_PATH": str(folder), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["BEFORE 1", "AFTER 0", "READ FAILED", "MARKER False"]


def test_h5py_imported_by_the_store_module_sees_no_plugin_folder():
    code = """
        import os, sys
        import core.store.format as fmt
        assert "h5py" not in sys.modules
        h5 = fmt.load_h5py()
        print(h5.h5pl.size(), repr(os.environ["HDF5_PLUGIN_PATH"]), os.environ["HDF5_PLUGIN_PRELOAD"])
        """
    proc = _run_python(code, {"HDF5_PLUGIN_PATH": "/usr/local/hdf5/lib/plugin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "''", "::"]


def test_allowed_filters_are_h5pys_own():
    assert set(ALLOWED_FILTERS) == {h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE,
                                    h5py.h5z.FILTER_FLETCHER32, h5py.h5z.FILTER_LZF}


@pytest.mark.parametrize("filters,ok", [
    ([2, 1, 3], True),  # shuffle, gzip, fletcher32
    ([32000], True),  # lzf
    ([307], False),  # bzip2: a registered id, but a plugin h5py does not ship
    ([1, 32026], False),  # an unknown id after an allowed one
    ([65535], False),
])
def test_filter_pipelines(tmp_path, filters, ok):
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        ds = first_op(f)["time_s"]
        name, expected = ds.name, ds[()]
        with_filters(ds, filters)
    if ok:
        store = ProfileStore._parse(p, p.read_bytes())
        op = name.split("/")[2]
        assert np.array_equal(store.op_table(op)[1], expected)
    else:
        bad = [fid for fid in filters if fid not in ALLOWED_FILTERS][0]
        refused(p, name, f"filter {bad}")


# --------------------------------------------------------------------------- types

def _set_attr(node: str, name: str, value):
    return lambda f: f[node].attrs.__setitem__(name, value)


@pytest.mark.parametrize("change,needles", [
    (_set_attr("op_model", "collective_overhead_s", "1.0"), ("/op_model", "collective_overhead_s")),
    (_set_attr("op_model", "p2p_efficiency", True), ("/op_model", "p2p_efficiency")),
    (_set_attr("op_model", "gemm_half_size", np.bool_(True)), ("/op_model", "gemm_half_size")),
    (_set_attr("op_model", "some_new_parameter", "3"), ("/op_model", "some_new_parameter")),
    (_set_attr("peak_flops", "bf16", "3.12e14"), ("/peak_flops", "bf16")),
    (_set_attr("/", "memory_bytes", "85899345920"), ("memory_bytes",)),
    (_set_attr("/", "memory_bandwidth_bytes_per_s", True), ("memory_bandwidth_bytes_per_s",)),
    (_set_attr("/", "encoding-version", True), ("encoding-version",)),
    (_set_attr("ops", "encoding-version", "1"), ("/ops", "encoding-version")),
    (_set_attr("provenance", "peak_fraction_fitted", "false"), ("peak_fraction_fitted",)),
    (lambda f: replace(first_op(f)["time_s"], first_op(f)["time_s"][()].astype(np.float16)),
     ("/time_s", "float16")),
    (lambda f: replace(first_op(f)["b"], first_op(f)["b"][()].astype(np.float64)), ("/b", "float64")),
    (lambda f: replace(f["collectives/all_reduce/2/bytes"],
                       f["collectives/all_reduce/2/bytes"][()].astype(np.int64)),
     ("/collectives/all_reduce/2/bytes", "int64")),
    (lambda f: replace(f["residuals/measured_s"], f["residuals/measured_s"][()].astype("S24")),
     ("/residuals/measured_s",)),
    (lambda f: replace(f["residuals/row"], f["residuals/row"][()].astype(np.float64)),
     ("/residuals/row", "float64")),
    (lambda f: replace(f["residuals/set"], np.arange(f["residuals/set"].shape[0])),
     ("/residuals/set", "int64")),
    (lambda f: f["residuals"].attrs.__setitem__("procedure", 3), ("/residuals", "procedure")),
    (lambda f: first_op(f).attrs.__setitem__("axis", np.int64(3)), ("axis",)),
])
def test_values_of_the_wrong_type_are_refused_naming_their_path(tmp_path, change, needles):
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        change(f)
    refused(p, *needles)


def test_string_key_columns_and_float32_times_still_read(tmp_path):
    """The rules refuse the wrong types only: float32 times (exact in float64), unsigned
    integer keys and fixed-length byte-string key columns read as before."""
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        g = first_op(f)
        op = g.name.rsplit("/", 1)[1]
        t32 = g["time_s"][()].astype(np.float32)
        replace(g["time_s"], t32)
        replace(g["b"], g["b"][()].astype(np.uint32))
        replace(g["dtype"], g["dtype"].asstr()[()].astype("S8"))
    keys, time_s, _ = ProfileStore._parse(p, p.read_bytes()).op_table(op)
    assert np.array_equal(time_s, t32.astype(np.float64))
    assert keys["dtype"].dtype.kind == "U" and set(keys["dtype"]) <= {"bf16", "fp16", "fp32"}


@pytest.mark.parametrize("value", [-1, -(2**31), -(2**53)])
def test_negative_table_keys_are_refused(tmp_path, value):
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        g = first_op(f)
        h = g["h"][()].copy()
        h[0] = value
        replace(g["h"], h)
    refused(p, "'h'", "from 0")
    assert STORE_BOUNDS["key"][0] == 0


def test_a_string_flag_is_refused_in_the_base_provenance_too():
    with pytest.raises(ValueError, match="base_provenance"):
        ProfileStore("x", {"bf16": 1e15}, 2**36, 2e12,
                     {"method": "calibrated", "base_provenance": {"peak_fraction_fitted": "no"}})
    store = ProfileStore("x", {"bf16": 1e15}, 2**36, 2e12,
                         {"method": "calibrated", "base_provenance": {"peak_fraction_fitted": True}})
    assert store.provenance["base_provenance"]["peak_fraction_fitted"] is True


# --------------------------------------------------------------------------- curves

def _store() -> ProfileStore:
    return ProfileStore("x", {"bf16": 1e15}, 2**36, 2e12, {"method": "analytic"})


@pytest.mark.parametrize("times,ok", [
    ([1e-5, 2e-5, 4e-5, 8e-5], True),
    ([1e-5, 1e-5, 1e-5, 1e-5], True),  # flat: latency-bound sizes
    ([1e-5, 2e-5, 2e-5 * (1 - CURVE_DIP_TOLERANCE) * 1.01, 8e-5], True),  # a dip within the tolerance
    ([1e-5, 2e-5, 2e-5 * (1 - CURVE_DIP_TOLERANCE) * 0.99, 8e-5], False),
    ([8e-5, 4e-5, 2e-5, 1e-5], False),  # reversed
    ([1e-5, 0.9e-5, 0.8e-5, 0.7e-5], False),  # a slow decline, each step within the tolerance
])
def test_collective_time_must_not_fall_as_the_size_grows(times, ok):
    x = np.array([1e3, 1e4, 1e5, 1e6])
    st = _store()
    if ok:
        st.add_collective("all_reduce", 4, x, np.array(times))
        assert st.collective_curve("all_reduce", 4)[1].tolist() == times
    else:
        with pytest.raises(ValueError, match="all_reduce/4"):
            st.add_collective("all_reduce", 4, x, np.array(times))


def test_a_falling_curve_in_a_file_is_refused_naming_the_curve(tmp_path):
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        g = f["collectives/all_gather/4"]
        replace(g["time_s"], g["time_s"][()][::-1])
    refused(p, "/collectives/all_gather/4")


@pytest.mark.parametrize("name", ["+8", "8_0", "08", " 8"])
def test_curve_group_names_are_plain_decimals(tmp_path, name):
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        f["collectives/all_reduce"].move("8", name)
    refused(p, "/collectives/all_reduce/")


# --------------------------------------------------------------------------- efficiencies

@pytest.mark.parametrize("name,value,ok", [
    ("p2p_efficiency", 5e-324, False), ("memory_efficiency", 1e-300, False),
    ("gemm_efficiency_max", 0.0099, False), ("inter_node_efficiency", 0.01, True),
    ("all_to_all_efficiency", 1.0, True), ("peak_fraction", 1.0000001, False),
    ("fp8_gemm_efficiency", 5e-324, False), ("fp8_gemm_efficiency", 0.01, True),
    ("fp8_gemm_efficiency", 2.0, True), ("fp8_gemm_efficiency", 2.01, False),
])
def test_efficiencies_have_physical_bounds(tmp_path, name, value, ok):
    p = tiny(tmp_path / "s.h5")
    with h5py.File(p, "a") as f:
        f["op_model"].attrs[name] = value
    if ok:
        assert ProfileStore._parse(p, p.read_bytes()).op_model[name] == value
    else:
        refused(p, name)


def test_the_lowest_efficiencies_simulate_without_numpy_warnings():
    """Every efficiency at its lower bound is accepted and gives a finite, slower iteration
    with no numpy warning (5e-324 passed "above 0" and overflowed into warnings)."""
    from core.io.session import load_session
    from core.sim.simulate import simulate

    base = ProfileStore.open(STORE)
    lowest = {k: STORE_BOUNDS[b][0] for k, b in OP_MODEL_BOUND.items()
              if b in ("efficiency", "relative_efficiency")}

    def analytic(op_model):  # no op tables: every op is timed by the op model
        store = ProfileStore(base.device_name, dict(base.peak_flops), base.memory_bytes,
                             base.memory_bandwidth_bytes_per_s, {"method": "analytic"}, op_model)
        for kind, sizes in base.collective_kinds().items():
            for n in sizes:
                store.add_collective(kind, n, *base.collective_curve(kind, n))
        return store

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slow = simulate(load_session(SESSION), analytic({**base.op_model, **lowest}))
        fast = simulate(load_session(SESSION), analytic(base.op_model))
    slow_s, fast_s = slow.report.iteration_time_s, fast.report.iteration_time_s
    assert math.isfinite(slow_s) and slow_s > 10 * fast_s


# --------------------------------------------------------------------------- shipped stores

@pytest.mark.parametrize("path", sorted((ROOT / "profiles").glob("*.h5"))
                         + sorted((ROOT / "tests" / "data").glob("profile_store_v*.h5")),
                         ids=lambda p: p.name)
def test_shipped_stores_and_fixtures_pass_the_audit(path):
    store = ProfileStore._parse(path, path.read_bytes())
    assert store.op_names()
