"""`vtrain validate` with a measured peak memory column (measured_memory_gib + memory_scale)."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import ROOT
from core.cli import main
from core.accuracy.calibrate import measured_sessions
from core.sim.report import MEMORY_SCALES
from core.sim.simulate import session_profile, simulate, stage_memory
from core.accuracy.measured import MeasurementFileError, read_measurements

MEMORY_CSV = ROOT.parent / "shared" / "data" / "measured-memory" / "measured_memory.csv"

HEADER = ("vocab_size,gpu,gpus_per_node,num_layers,hidden_size,num_attention_heads,seq_length,"
          "global_batch_size,micro_batch_size,tensor_parallel,pipeline_parallel,data_parallel,"
          "recompute,precision,measured_iteration_time_s,measured_memory_gib,memory_scale")
PLAN = "50257,A100-SXM4-80GB,8,24,2048,16,1024,64,2,2,2,4,full,fp16"


def _two_rows(tmp_path, scale: str = "max_reserved"):
    path = tmp_path / "two.csv"
    path.write_text(f"{HEADER}\n{PLAN},0.5,,\n{PLAN},,30.0,{scale}\n")
    return path


def test_time_only_and_memory_only_rows(tmp_path, capsys):
    path = _two_rows(tmp_path)
    ms = read_measurements(path)
    assert [m.skip_reason for m in ms] == ["", ""]
    assert ms[0].has_time and math.isnan(ms[0].measured_memory_gib)
    assert not ms[1].has_time and (ms[1].measured_memory_gib, ms[1].memory_scale) == (30.0, "max_reserved")
    session = ms[0].session
    want_s = simulate(session, session_profile(session), 0.9).report.iteration_time_s
    want_gib = max(sm.at_scale("max_reserved") for sm in stage_memory(ms[1].session)) / 2**30
    # the memory row's plan is the time row's
    assert max(sm.reserved_bytes for sm in stage_memory(session)) / 2**30 == pytest.approx(want_gib)

    assert main(["validate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    r0, r1 = out["rows"]
    assert r0["predicted_s"] == pytest.approx(want_s)
    assert r0["error_percent"] == pytest.approx((want_s - 0.5) / 0.5 * 100)
    assert r0["measured_memory_gib"] is None and r0["memory_error_percent"] is None
    assert r1["measured_s"] is None and r1["error_percent"] is None
    assert r1["memory_scale"] == "max_reserved" and r1["measured_memory_gib"] == 30.0
    assert r1["predicted_memory_gib"] == pytest.approx(want_gib)
    err = (want_gib - 30.0) / 30.0 * 100
    assert r1["memory_error_percent"] == pytest.approx(err)
    # time metrics over the timed row only; memory metrics over the memory row
    assert out["n"] == 1 and out["skipped"] == 0
    assert out["mape_percent"] == pytest.approx(abs(want_s - 0.5) / 0.5 * 100)
    assert out["memory"]["n"] == 1 and out["memory"]["rows_by_scale"] == {"max_reserved": 1}
    assert out["memory"]["mape_percent"] == pytest.approx(abs(err))

    # the table shows both; --out carries the memory columns
    rows = tmp_path / "rows.csv"
    assert main(["validate", str(path), "--out", str(rows)]) == 0
    text = capsys.readouterr().out
    assert "1 rows predicted for time, 1 for memory" in text and "memory MAPE" in text
    lines = rows.read_text().splitlines()
    assert "memory_error_percent" in lines[0]
    assert f"{err:.3f}" in lines[2]

    # calibration takes the timed rows only
    sessions, measured = measured_sessions(ms)
    assert len(sessions) == 1 and measured.tolist() == [0.5]


def test_a_plot_of_memory_only_rows_is_said_not_written(tmp_path, capsys):
    """--plot draws measured against predicted times: a file of memory-only rows has none, and
    the plot asked for was silently not written (exit 0, no word); it is said on stderr."""
    path = tmp_path / "mem.csv"
    path.write_text(f"{HEADER}\n{PLAN},,30.0,max_reserved\n")
    plot = tmp_path / "p.png"
    assert main(["validate", str(path), "--plot", str(plot)]) == 0
    captured = capsys.readouterr()
    assert not plot.exists() and "0 rows predicted for time, 1 for memory" in captured.out
    err = " ".join(captured.err.split())
    assert err.startswith("--plot ") and err.endswith(
        "p.png: not written: no predicted row has a measured time (the plot is of iteration times)")
    assert main(["validate", str(_two_rows(tmp_path)), "--plot", str(plot)]) == 0
    assert plot.stat().st_size > 0 and capsys.readouterr().err == ""


def test_calibrate_on_memory_only_rows_says_why_none_is_usable(tmp_path, capsys):
    """A file of memory-only rows given to calibrate was refused as "no usable rows" without a
    why; the error says the rows measured memory only, which a fit of times cannot use."""
    path = tmp_path / "mem.csv"
    path.write_text(f"{HEADER}\n{PLAN},,30.0,max_reserved\n{PLAN},,31.0,max_allocated\n")
    why = (": no usable rows (2 rows measured peak memory only: a fit is of measured iteration "
           "times, and the memory model has no fitted parameter)")
    for how in (["--profile", str(ROOT / "profiles" / "A100-SXM4-80GB.h5"), "--out",
                 str(tmp_path / "s.h5")], ["--out-dir", str(tmp_path / "stores")]):
        assert main(["calibrate", str(path), *how]) == 2
        assert f"{path}{why}" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "s.h5").exists() and not (tmp_path / "stores").exists()
    assert main(["validate", str(path), "--cross-validate", "2"]) == 2
    assert ("--cross-validate: 0 usable rows: cross-validation needs at least 2 with a measured "
            "time (2 rows measured peak memory only: the fit is of iteration times)"
            ) in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("scale", MEMORY_SCALES)
def test_each_scale_is_the_memory_models(tmp_path, scale, capsys):
    path = _two_rows(tmp_path, scale)
    ms = read_measurements(path)
    want = max(sm.at_scale(scale) for sm in stage_memory(ms[1].session)) / 2**30
    assert main(["validate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][1]["predicted_memory_gib"] == pytest.approx(want)


def test_bad_or_missing_memory_scale_is_refused(tmp_path, capsys):
    path = _two_rows(tmp_path, "peak")
    with pytest.raises(MeasurementFileError, match="row 2 \\(line 3\\), column 'memory_scale': 'peak' is not one of "
                                                   "max_allocated, max_reserved, nvidia-smi"):
        read_measurements(path)
    assert main(["validate", str(path)]) == 2
    assert "'peak' is not one of" in capsys.readouterr().err
    path.write_text(f"{HEADER}\n{PLAN},0.5,30,\n")
    assert main(["validate", str(path)]) == 2
    assert "row 1 (line 2), column 'memory_scale': '' is not one of" in capsys.readouterr().err
    path.write_text(HEADER.removesuffix(",memory_scale") + f"\n{PLAN},0.5,30\n")
    assert main(["validate", str(path)]) == 2
    assert "needs a column 'memory_scale'" in capsys.readouterr().err


def test_a_row_needs_a_time_or_a_memory(tmp_path):
    path = tmp_path / "none.csv"
    path.write_text(f"{HEADER}\n{PLAN},,0,max_allocated\n")
    (m,) = read_measurements(path)
    assert m.skip_causes == ["measured memory not positive"]
    path.write_text(f"{HEADER}\n{PLAN},,0,max_allocated\n{PLAN},,,\n")
    with pytest.raises(MeasurementFileError, match="row 2 \\(line 3\\): neither measured_iteration_time_s nor "
                                                   "measured_memory_gib"):
        read_measurements(path)
    # a file without either column is no measurement file
    path.write_text("gpu,num_layers\nA100-SXM4-80GB,24\n")
    with pytest.raises(MeasurementFileError, match="needs a column measured_iteration_time_s \\(or "
                                                   "measured_memory_gib"):
        read_measurements(path)


def test_shared_measured_memory_file(capsys, tmp_path):
    """../shared/data/measured-memory/measured_memory.csv (the retired general layout), curated
    into measured runs (scripts/curate_runs.py, untied as its README says every row is): every
    row is predicted for memory, none for time."""
    if not MEMORY_CSV.exists():
        pytest.skip(f"shared data not present: {MEMORY_CSV}")
    import subprocess
    import sys
    runs = tmp_path / "memory.jsonl"
    runs.write_text(subprocess.run([sys.executable, str(ROOT / "scripts" / "curate_runs.py"),
                                    str(MEMORY_CSV), "--set", "tied_embeddings=n"],
                                   check=True, capture_output=True,
                                   text=True).stdout)
    assert main(["validate", str(runs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 0 and out["skipped"] == 0
    assert out["memory"]["n"] == 20
    assert out["memory"]["rows_by_scale"] == {"max_allocated": 12, "max_reserved": 8}
    assert out["memory"]["mape_percent"] == pytest.approx(1.18, abs=0.01)


def test_a_measured_memory_outside_a_gpus_bounds_is_skipped_by_name(tmp_path, capsys):
    """A measured peak memory of 1e-9 GiB (a byte), or a subnormal 5e-324, was predicted: its
    error was +7e11 % or +inf % (MAPE "inf %" with numpy's overflow warning, exit 0; with --json
    "result.memory.mape_percent is Infinity", naming no file, row or column), and 1e308 GiB was
    warned of as "inf times the GPU's whole memory". One GPU's peak memory lies within a GPU
    memory's bounds in a store, 1 MiB to 1 PiB; outside, the row is skipped with that rule."""
    from core.accuracy.measured import MEASURED_MEMORY_RANGE_GIB
    from core.store.profile_store import STORE_BOUNDS
    lo, hi, _ = STORE_BOUNDS["memory_bytes"]
    assert MEASURED_MEMORY_RANGE_GIB == (lo / 2**30, hi / 2**30) == (2.0**-10, 2.0**20)
    path = tmp_path / "m.csv"
    for bad in ("5e-324", "1e-9", "0.0009765", "1048577", "1e308"):
        path.write_text(f"{HEADER}\n{PLAN},,{bad},max_reserved\n")
        (m,) = read_measurements(path)
        assert m.skip_causes == ["measured memory out of range"], bad
        assert f"measured peak memory {float(bad):.4g} GiB is outside 2^-10 GiB (1 MiB)" in m.skip_reason
        assert main(["validate", str(path), "--json"]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "row 1 (line 2)" in err and "measured memory out of range 1" in err
    # a row with a time too: skipped whole, as a memory that is not positive
    path.write_text(f"{HEADER}\n{PLAN},0.5,1e-9,max_reserved\n{PLAN},0.5,30,max_reserved\n")
    assert main(["validate", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped"] == 1 and out["n"] == 1 and out["memory"]["n"] == 1
    # the bounds themselves are GPU memories: predicted, with a finite error
    want = max(sm.at_scale("max_reserved") for sm in stage_memory(read_measurements(path)[1].session)) / 2**30
    for edge in (2.0**-10, 2.0**20):
        path.write_text(f"{HEADER}\n{PLAN},,{edge!r},max_reserved\n")
        (m,) = read_measurements(path)
        assert m.skip_reason == ""
        assert main(["validate", str(path), "--json"]) == 0
        (row,) = json.loads(capsys.readouterr().out)["rows"]
        assert row["memory_error_percent"] == pytest.approx((want - edge) / edge * 100)


def test_a_jsonl_record_of_a_memory_outside_the_bounds_is_skipped(tmp_path):
    """The JSON-lines reader goes through the same rule as the CSV's."""
    from core.io.session import session_to_json
    (m,) = read_measurements(_two_rows(tmp_path))[:1]
    session = json.loads(session_to_json(m.session))
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps({"session": session, "measured_memory_gib": v,
                                          "memory_scale": "max_allocated"})
                              for v in (1e-9, 30.0, 2e6)) + "\n")
    runs = read_measurements(path)
    assert [r.skip_causes for r in runs] == [["measured memory out of range"], [],
                                             ["measured memory out of range"]]


def test_the_plot_is_written_in_the_format_its_name_says(tmp_path, capsys):
    """--plot wrote PNG bytes whatever the name: plot.svg and plot.txt held a PNG. The suffix
    now picks matplotlib's format; one it does not write is refused before the work."""
    path = _two_rows(tmp_path)
    signatures = {"plot.svg": b"<?xml", "plot.pdf": b"%PDF-", "plot.png": b"\x89PNG\r\n\x1a\n",
                  "plot": b"\x89PNG\r\n\x1a\n", "PLOT.SVG": b"<?xml"}
    for name, head in signatures.items():
        out = tmp_path / name
        assert main(["validate", str(path), "--plot", str(out)]) == 0
        assert out.read_bytes().startswith(head), name
    capsys.readouterr()
    bad = tmp_path / "plot.txt"
    assert main(["validate", str(path), "--plot", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not bad.exists()
    assert captured.err.startswith(f"vtrain: error: --plot: {bad}: '.txt' is not an image format "
                                   "matplotlib writes; give one of ")
    assert ".png" in captured.err and ".svg" in captured.err
