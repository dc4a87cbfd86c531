"""``vtrain validate``: a trial's faults (--profile of a GPU kind without a shipped store, the
cross-validated band's reason, unit slips, the defaults stated, GPU aliases, separators, R^2 of
one row). Small inputs are written by each test."""

from __future__ import annotations

import json

import pytest

from core.accuracy.measured import (MeasurementFileError, cell_text, default_origin,
                                    read_measurements, row_number_where, row_where)
from core.accuracy.validate import MEMORY_UNIT_SUSPECT_RATIO, TIME_UNIT_SUSPECT_RATIO
from core.cli import main as vtrain
from core.store.interval import min_residuals
from tests.conftest import ROOT

#: A GPT-3 3.6B row of the vTrain authors' multi-node file in the session-column layout
#: (measured 3.5665 s on 64 A100s), its GPU and time left to each test.
GPT_HEADER = ("name,num_layers,hidden_size,num_attention_heads,seq_length,vocab_size,"
              "attention_kernel,micro_batch_size,global_batch_size,tensor_parallel,"
              "pipeline_parallel,data_parallel,precision,recompute,gpu,measured_iteration_time_s")
GPT_ROWS = ("3.6B,30,3072,32,2048,50257,unfused,8,512,1,1,64,fp16,full,{gpu},{t1}\n"
            "3.6B,30,3072,32,2048,50257,unfused,4,512,1,1,64,fp16,full,{gpu},{t2}\n")
#: An MI300X spec (a GPU kind without a shipped store), for `profile generate --spec`.
MI300X_SPEC = {
    "format": "vtrain-gpu-spec", "version": 1, "name": "MI300X-192GB",
    "peak_tflops": {"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, "memory_gib": 192,
    "memory_bandwidth_tbytes_per_s": 5.3, "nvlink_gbytes_per_s_bidirectional": 896,
    "gpus_per_nvlink_domain": 8, "nic_gbits_per_s": 400,
    "sources": {"peak_tflops": "data sheet", "memory": "data sheet", "nvlink": "data sheet",
                "nic": "assumed 8x400G"}}


#: The network of the rows of a kind without a reference node (the rules ask for it: 64 GPUs).
NETWORK = ",inter_node_bandwidth_gbits_per_s|,3200"


def _gpt_csv(tmp_path, name="runs.csv", gpu="A100-SXM4-80GB", t1="3.5665", t2="3.6383",
             extra=""):
    path = tmp_path / name
    path.write_text(GPT_HEADER + extra.split("|")[0] + "\n"
                    + "".join(line + (extra.split("|")[1] if extra else "") + "\n" for line in
                              GPT_ROWS.format(gpu=gpu, t1=t1, t2=t2).splitlines()))
    return path


def _json(capsys, argv) -> dict:
    assert vtrain(["validate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def mi300x_store(tmp_path_factory):
    """An analytic MI300X store (a kind with no shipped store), as `profile generate --spec`."""
    from core.store.profiles_gen import read_gpu_spec, store_from_spec
    folder = tmp_path_factory.mktemp("mi300x")
    spec = folder / "mi300x.json"
    spec.write_text(json.dumps(MI300X_SPEC))
    path = folder / "mi300x.h5"
    store_from_spec(read_gpu_spec(spec)).save(path)
    return path


def test_profile_predicts_the_rows_of_its_own_unshipped_kind(tmp_path, capsys, mi300x_store):
    """--profile supplies the store of rows of its GPU kind though the kind has no shipped
    store: they are predicted with it (its memory capacity too) and no warning is given;
    without --profile they are skipped for the kind (exit 2: none predicted)."""
    path = _gpt_csv(tmp_path, gpu="MI300X-192GB", extra=NETWORK)
    assert vtrain(["validate", str(path)]) == 2
    capsys.readouterr()
    doc = _json(capsys, [str(path), "--profile", str(mi300x_store)])
    assert doc["n"] == 2 and doc["skipped"] == 0 and doc["warnings"] == []
    assert {r["memory_capacity_gib"] for r in doc["rows"]} == {192.0}
    assert all(r["predicted_s"] > 0 for r in doc["rows"])


def test_profile_of_another_kind_is_used_with_a_warning_naming_both(tmp_path, capsys,
                                                                    mi300x_store):
    """A100 rows with an MI300X store are predicted with that store (as simulate --profile
    does), and one warning per GPU kind lists the rows and names both kinds."""
    path = _gpt_csv(tmp_path)
    own = _json(capsys, [str(path)])
    other = _json(capsys, [str(path), "--profile", str(mi300x_store)])
    assert own["warnings"] == []
    (w,) = other["warnings"]
    assert w["rows"] == [1, 2] and w["column"] == "gpu"
    assert "MI300X-192GB" in w["message"] and "A100-SXM4-80GB" in w["message"]
    assert [r["predicted_s"] for r in other["rows"]] != [r["predicted_s"] for r in own["rows"]]
    assert {r["memory_capacity_gib"] for r in other["rows"]} == {192.0}


def test_read_measurements_takes_the_profile_as_every_rows_store(tmp_path, mi300x_store):
    """The shared reader (validate and calibrate): ``profile_path`` is every row's
    cluster.profile_path before the rules, so a row of an unshipped kind is not skipped."""
    path = _gpt_csv(tmp_path, gpu="MI300X-192GB", extra=NETWORK)
    assert all(m.skip_reason for m in read_measurements(path))
    runs = read_measurements(path, profile_path=str(mi300x_store))
    assert [m.skip_reason for m in runs] == ["", ""]
    assert {m.session.cluster.profile_path for m in runs} == {str(mi300x_store)}


def test_cross_validated_band_gives_the_real_reason(tmp_path, capsys):
    """Too few out-of-fold residuals for a band: the reason is the count the band needs, not the
    shipped store's note (which has a band)."""
    path = _gpt_csv(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0]] + lines[1:] * 3) + "\n")  # 6 rows, 3 folds
    doc = _json(capsys, [str(path), "--cross-validate", "3"])
    assert doc["interval_coverage"] is None
    assert f"at least {min_residuals(0.9)} " in doc["interval_note"]
    assert vtrain(["validate", str(path), "--cross-validate", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert doc["interval_note"] in out


def test_milliseconds_in_the_seconds_column_are_warned_of(tmp_path, capsys):
    """A measured time about 1,000 times its prediction warns, naming row and column (the rows
    stay in the figures); times in seconds do not."""
    ok = _json(capsys, [str(_gpt_csv(tmp_path))])
    assert ok["warnings"] == []
    ms = _json(capsys, [str(_gpt_csv(tmp_path, "ms.csv", t1="3566.5", t2="3638.3"))])
    assert ms["n"] == 2
    assert [(w["rows"], w["column"]) for w in ms["warnings"]] == [
        ([1], "measured_iteration_time_s"), ([2], "measured_iteration_time_s")]
    assert all(r["measured_s"] / r["predicted_s"] >= TIME_UNIT_SUSPECT_RATIO for r in ms["rows"])


def test_mib_in_the_gib_column_is_warned_of(tmp_path, capsys):
    """A measured peak memory far above the GPU's whole memory (MiB given as GiB) warns, naming
    row and column; a plausible one does not."""
    path = tmp_path / "mem.csv"
    path.write_text(GPT_HEADER.replace("measured_iteration_time_s",
                                       "measured_memory_gib,memory_scale") + "\n"
                    + GPT_ROWS.format(gpu="A100-SXM4-80GB", t1="76288,nvidia-smi",
                                      t2="60.5,nvidia-smi"))
    doc = _json(capsys, [str(path)])
    assert [(w["rows"], w["column"]) for w in doc["warnings"]] == [([1], "measured_memory_gib")]
    assert doc["rows"][0]["measured_memory_gib"] > (MEMORY_UNIT_SUSPECT_RATIO
                                                    * doc["rows"][0]["memory_capacity_gib"])


def test_every_default_that_bears_on_the_time_is_stated(tmp_path, capsys):
    """The cluster's network and node size and the plan's gradient accumulation fusion are
    stated when absent; a row that states every default recorded reads back with none taken
    and the same prediction (the list is complete), and cost or label fields are not listed."""
    path = _gpt_csv(tmp_path)
    doc = _json(capsys, [str(path)])
    defaults = {k: v[0]["value"] for k, v in doc["defaults"].items()}
    assert defaults["inter_node_bandwidth_gbits_per_s"] == 1600.0  # 8 x 200 Gb/s (A100)
    assert defaults["gpus_per_node"] == 8
    assert defaults["gradient_accumulation_fusion"] is True
    assert default_origin("gpus_per_node") == "reference node"
    assert default_origin("gradient_accumulation_fusion") == "session"
    assert default_origin("activation") == "Megatron-LM"
    assert not {"name", "profile_path", "memory_reserve_fraction",
                "price_per_gpu_hour_usd"} & set(defaults)
    names = list(defaults)
    cells = ",".join(str(cell_text(defaults[k])) for k in names)
    stated = _gpt_csv(tmp_path, "stated.csv", extra="," + ",".join(names) + "|," + cells)
    assert all(m.defaults == {} for m in read_measurements(stated))
    again = _json(capsys, [str(stated)])
    assert again["defaults"] == {}
    assert [r["predicted_s"] for r in again["rows"]] == [r["predicted_s"] for r in doc["rows"]]
    assert vtrain(["validate", str(path)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "inter_node_bandwidth_gbits_per_s=1600.0" in text and "gpus_per_node=8" in text


@pytest.mark.parametrize("name,kind", [("H100", "H100-SXM5-80GB"),
                                       ("A100 80GB", "A100-SXM4-80GB")])
def test_a_gpu_alias_is_read_as_its_kind_and_noted(tmp_path, capsys, name, kind):
    """A CSV gpu that --set cluster.gpu= maps (core.plan.cluster.gpu_kind) is read as that kind,
    predicted as the row naming the kind, and noted with its row count."""
    alias = _json(capsys, [str(_gpt_csv(tmp_path, "alias.csv", gpu=name))])
    exact = _json(capsys, [str(_gpt_csv(tmp_path, "kind.csv", gpu=kind))])
    assert alias["gpu_names_read"] == [{"name": name, "kind": kind, "rows": 2}]
    assert exact["gpu_names_read"] == []
    assert [r["predicted_s"] for r in alias["rows"]] == [r["predicted_s"] for r in exact["rows"]]


def test_a_semicolon_separated_file_is_named_so(tmp_path, capsys):
    """A CSV written with ';' is refused as not comma-separated, not as one unknown column."""
    path = _gpt_csv(tmp_path)
    path.write_text(path.read_text().replace(",", ";"))
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert "';'" in str(exc.value) and "column" not in str(exc.value).split("(")[0]
    assert vtrain(["validate", str(path)]) == 2


def test_r2_of_one_row_is_not_a_number_printed(tmp_path, capsys):
    """R^2 of one row is undefined: None in --json, "n/a" in the text, never "nan"."""
    path = _gpt_csv(tmp_path)
    path.write_text("\n".join(path.read_text().splitlines()[:2]) + "\n")
    assert _json(capsys, [str(path)])["r2"] is None
    assert vtrain(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "n/a" in out and "nan" not in out


def test_a_spreadsheets_trailing_empty_columns_are_ignored(tmp_path):
    """Trailing commas a spreadsheet writes (columns with neither a name nor a value) read as
    the file without them, in the session-column and in the vTrain authors' layouts; an unnamed
    column holding a value is refused by its row and position."""
    from tests.conftest import shared_file
    clean = _gpt_csv(tmp_path)
    trail = tmp_path / "trail.csv"
    trail.write_bytes(b"".join(line + b",,\r\n" for line in clean.read_bytes().splitlines()))
    want = [(m.session, m.measured_iteration_time_s) for m in read_measurements(clean)]
    assert [(m.session, m.measured_iteration_time_s) for m in read_measurements(trail)] == want
    authors = shared_file("measured_single_node.csv").read_text().splitlines()[:4]
    (tmp_path / "a.csv").write_text("\n".join(authors) + "\n")
    (tmp_path / "a_trail.csv").write_text("".join(line + ",\n" for line in authors))
    runs = [read_measurements(tmp_path / n) for n in ("a.csv", "a_trail.csv")]
    assert [(m.session, m.measured_iteration_time_s) for m in runs[1]] == \
        [(m.session, m.measured_iteration_time_s) for m in runs[0]] and len(runs[0]) == 3
    lines = trail.read_text().splitlines()
    lines[2] += "7"  # row 2's second unnamed cell (column 18) holds a value
    trail.write_text("\n".join(lines) + "\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(trail)
    assert str(exc.value).startswith(f"{trail}: row 2 (line 3), column 18: '7' in a column without a name")


def test_a_json_array_is_named_not_read_as_a_csv(tmp_path, capsys):
    """A JSON array of records (json.dump of a list) is named as such, with what is read
    instead; it read as a one-line CSV ("a header and no data rows")."""
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"session": {}, "measured_iteration_time_s": 1.0}] * 2))
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value).startswith(f"{path}: a JSON array, not measured runs: vtrain validate "
                                     "and calibrate read JSON lines")
    assert vtrain(["validate", str(path)]) == 2
    assert "a JSON array" in capsys.readouterr().err


def test_in_sample_is_said_of_the_stores_own_file_names_only(tmp_path, capsys):
    """The headline calls the figures in-sample when the store was calibrated on a file of
    this name: the whole name (the A100 store's data lists measured_single_node.csv), not a
    part of it (a user's single_node.csv was told its figures were in-sample); with --profile
    it names the store's file."""
    for name, in_sample in (("single_node.csv", False), ("measured_single_node.csv", True)):
        path = _gpt_csv(tmp_path, name=name)
        assert vtrain(["validate", str(path)]) == 0
        head = capsys.readouterr().out.splitlines()[0]
        assert head.startswith(f"{name}: 2 rows predicted, 0 skipped; profile A100-SXM4-80GB "
                               "(calibrated)")
        assert ("calibrated on this file: in-sample figures" in head) is in_sample, head
    store = ROOT / "profiles" / "A100-SXM4-80GB.h5"
    assert vtrain(["validate", str(path), "--profile", str(store)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(
        "measured_single_node.csv: 2 rows predicted, 0 skipped; profile A100-SXM4-80GB.h5: "
        "A100-SXM4-80GB (calibrated), calibrated on this file")


def test_a_time_faster_than_the_gpus_peak_is_warned_of(tmp_path, capsys):
    """A measured time at which the model's FLOPs would run above the GPU's data-sheet peak
    (MFU > 1: another global batch than what ran, part of the step) is warned of by row; a
    factor 3.6 off the prediction is no unit slip, and it went unremarked."""
    from core.cli.validate import _mfu
    path = _gpt_csv(tmp_path, t2="1.0")
    runs = read_measurements(path)
    assert _mfu(runs[0].session, 3.5665) < 1 < _mfu(runs[1].session, 1.0)
    doc = _json(capsys, [str(path)])
    mfu = _mfu(runs[1].session, 1.0)
    assert doc["warnings"] == [{"rows": [2], "column": "measured_iteration_time_s", "message": (
        f"measured 1 s gives a model FLOPs utilization of {mfu:.0%} at the GPU's data-sheet "
        "peak, faster than the GPU can run the model's FLOPs: not the time of this plan's whole "
        "iteration (another global batch, micro-batch size or model shape than what ran, or "
        "part of the step?)")}]
    assert doc["rows"][1]["mfu_at_measured"] == pytest.approx(mfu)


def test_rows_that_repeat_an_earlier_row_are_warned_of(tmp_path, capsys):
    """A row pasted twice (the same session and measurement) is warned of by validate, naming
    the row it repeats (it counts twice in the figures, and its copy in another fold is a row
    the fit has seen), and by calibrate; the same plan measured to another time is no repeat."""
    path = _gpt_csv(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines + [lines[1], lines[1], lines[2].replace("3.6383", "3.7")])
                    + "\n")
    doc = _json(capsys, [str(path)])
    assert doc["n"] == 5 and doc["warnings"] == [
        {"rows": [3, 4], "column": "measured_iteration_time_s", "message": (
            "the same session and measurement as row 1 (line 2): counted again in every figure (and in "
            "--cross-validate, a copy in another fold is a row its fit has seen); delete the "
            "repeat unless the run was measured twice to the same figure")}]
    out = tmp_path / "s.h5"
    assert vtrain(["calibrate", str(path), "--profile", str(ROOT / "profiles" / "A100-SXM4-80GB.h5"),
                   "--out", str(out), "--folds", "0", "--json"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: {path}: rows 3 (line 4), 4 (line 5) repeat row 1 (line 2) (the same session and measurement): "
            "fitted again, and in the cross-validation a copy in another fold is a row its fit "
            "has seen") in err


def test_calibrate_warns_of_rows_that_repeat_another_files(tmp_path, capsys):
    """A file given to calibrate beside one that holds its rows (a month's file and the
    year's) is warned of once per file: its held-out rows are fitted from the other file."""
    year = _gpt_csv(tmp_path, name="year.csv")
    month = tmp_path / "month.csv"
    month.write_text("\n".join(year.read_text().splitlines()[:2]) + "\n")
    assert vtrain(["calibrate", str(year), str(month), "--profile",
                   str(ROOT / "profiles" / "A100-SXM4-80GB.h5"), "--out", str(tmp_path / "s.h5"),
                   "--folds", "0", "--json"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: {month}: row 1 (line 2) repeats rows of {year} (the same session and "
            "measurement): fitted again, and in the cross-validation a copy in another fold is "
            "a row its fit has seen") in err
    assert f"warning: {year}" not in err


@pytest.mark.parametrize("column,name,how", [
    ("measured_memory_gb", "measured_memory_gib", "GB x 0.9313, MiB / 1024, MB x 0.0009313"),
    ("measured_iteration_time_ms", "measured_iteration_time_s", "ms / 1000, us / 1e6, min x 60")])
def test_a_measurement_column_in_another_unit_says_to_convert_the_values(tmp_path, column, name,
                                                                         how):
    """A column named for another unit got "did you mean measured_memory_gib?": renamed, GB
    read as GiB is 7 % off, which no check can see. The message says the unit and how to
    convert (1 GB = 1e9 / 2^30 GiB); so does a JSON-lines key."""
    assert 1e9 / 2**30 == pytest.approx(0.9313, abs=1e-4)
    path = _gpt_csv(tmp_path)
    path.write_text(path.read_text().replace("measured_iteration_time_s", column))
    unit = "seconds" if name.endswith("_s") else "GiB (2^30 bytes)"
    hint = (f"; the measurement is read in {unit} from a column {name}: convert the values "
            f"({how}), not only the column's name")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value).startswith(f"{path}: column {column!r} is neither a session field")
    assert str(exc.value).endswith(hint)
    line = tmp_path / "runs.jsonl"
    line.write_text(json.dumps({"session": {}, column: 1.0}) + "\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(line)
    assert str(exc.value).startswith(f"{line}: line 1: unknown key {column!r}")
    assert str(exc.value).endswith(hint)


@pytest.mark.parametrize("above", ["sep=,", "Our cluster's runs, Nov 2026", "Runs,,,"])
def test_a_line_above_the_header_or_a_header_among_the_rows_is_named(tmp_path, above):
    """A title or a spreadsheet's 'sep=,' line above the header was read as the header: 'sep='
    refused as an unknown column, or the rows' cells as values of unnamed columns. The row of
    column names is named, and so is a header repeated among the rows (files concatenated)."""
    path = _gpt_csv(tmp_path)
    text = path.read_text()
    path.write_text(above + "\n" + text)
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: row 1 (line 2) holds column names (name, num_layers, hidden_size "
                              "...): the header must be the file's first line; delete the "
                              "line(s) above it (a title, a spreadsheet's 'sep=,' line)")
    path.write_text(text + text)
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: row 3 (line 4) holds column names (name, num_layers, hidden_size "
                              "...): a header among the data rows (files concatenated?); "
                              "delete it")


def test_rows_without_a_band_beside_rows_with_one_are_counted_and_explained(tmp_path, capsys):
    """The coverage is over the rows with a band ("100.0% of 5 rows" of 8): the rows without
    one are counted and the first one's reason given (it was said only when no row had one).
    On the H100 store a 64-GPU run has a band, a one-node run none (3 single-node residuals)."""
    path = _gpt_csv(tmp_path, gpu="H100-SXM5-80GB", t1="1.5", t2="9.0")
    path.write_text(path.read_text().replace(",4,512,1,1,64,", ",8,512,1,1,8,"))
    doc = _json(capsys, [str(path)])
    assert (doc["n"], doc["interval_rows"]) == (2, 1)
    assert doc["interval_note"].startswith("1 of 2 rows have none: ")
    assert doc["interval_note"].endswith("the H100-SXM5-80GB profile store (calibrated) has no "
                                         "scale-transfer residuals")
    assert vtrain(["validate", str(path)]) == 0
    assert " error band 1 of 2 rows have none: " in capsys.readouterr().out


def test_two_json_lines_records_of_one_row_number_are_refused(tmp_path):
    """Two records with one `row` (two files of rows 1..N concatenated) made every message
    about "row 1" name two runs; the second line is refused, naming the first."""
    sessions = ROOT.parent / "shared" / "data" / "public-modern" / "published_runs.sessions.jsonl"
    lines = sessions.read_text().splitlines()
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(lines[:3] + lines[:2]) + "\n")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: line 4, key 'row': 1 is line 1's row too; each record's "
                              "row must be its own (files concatenated? renumber the rows or "
                              "leave the key out: the line is the row)")
    records = [json.loads(line) for line in lines[:3] + lines[:2]]
    for r in records:
        del r["row"]  # the line is the row
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert [m.row for m in read_measurements(path)] == [1, 2, 3, 4, 5]


def test_calibrate_warns_of_milliseconds_in_the_seconds_column(tmp_path, capsys):
    """validate warned of a time 100 times its prediction; calibrate fitted it as it was (every
    parameter at a bound, blamed on "a term the op model lacks"). It warns by row, as validate."""
    path = _gpt_csv(tmp_path, t1="3566.5", t2="3.6383")
    assert vtrain(["calibrate", str(path), "--profile", str(ROOT / "profiles" / "A100-SXM4-80GB.h5"),
                   "--out", str(tmp_path / "s.h5"), "--folds", "0", "--json"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: {path}: row 1 (line 2), column measured_iteration_time_s: measured 3,566.5 is "
            in err and "milliseconds? the column is in seconds" in err)
    assert f"warning: {path}: row 2" not in err
    assert (f"warning: {path}: the fit takes these times as they are: convert the column, or the "
            "store's parameters are fitted to another unit") in err


def test_csv_messages_name_the_line_an_editor_shows(tmp_path, capsys):
    """Messages named a CSV row by its count of non-blank rows: with blank lines (and a quoted
    cell over two lines) above it, "row 2" was not the line to edit. They name the data row and
    the file's line, the header and blank lines counted: csv.reader's line_num where the
    record starts."""
    header = GPT_HEADER + ",notes"
    first, second = GPT_ROWS.format(gpu="A100-SXM4-80GB", t1="3.5665", t2="x").splitlines()
    path = tmp_path / "blank.csv"
    # line 1 header, 2 blank, 3-4 row 1 (its notes over two lines), 5-6 blank, 7 row 2
    path.write_bytes((f"{header}\r\n\r\n{first},\"two\r\nlines\"\r\n\r\n  \r\n"
                      f"{second},n\r\n").encode())
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: row 2 (line 7), column 'measured_iteration_time_s': "
                              "'x' is not a number")
    assert vtrain(["validate", str(path)]) == 2
    assert "row 2 (line 7), column 'measured_iteration_time_s'" in capsys.readouterr().err
    path.write_bytes(path.read_bytes().replace(b",x,n", b",3.6383,n"))
    assert [(m.row, m.line) for m in read_measurements(path)] == [(1, 3), (2, 7)]
    doc = _json(capsys, [str(path)])
    assert [(r["row"], r["line"]) for r in doc["rows"]] == [(1, 3), (2, 7)]
    # a skipped row is named the same way in the report
    path.write_bytes(path.read_bytes().replace(b",1,1,64,fp16,full,A100-SXM4-80GB,3.6383",
                                               b",3,1,64,fp16,full,A100-SXM4-80GB,3.6383"))
    assert vtrain(["validate", str(path)]) == 0
    assert "skipped row 2 (line 7): invalid plan" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("column,hint", [
    ("measured_iteration_time_s (s)", "; the header names a column by its name alone: name it "
     "measured_iteration_time_s (the name says the unit: seconds)"),
    ("measured_iteration_time_s [seconds]", "; the header names a column by its name alone: "
     "name it measured_iteration_time_s (the name says the unit: seconds)"),
    ("measured_iteration_time_s (ms)", "; a unit after the name: name the column "
     "measured_iteration_time_s, read in seconds, and convert the values if they are 'ms' "
     "(ms / 1000, us / 1e6, min x 60)"),
    ("iteration_time_ms", "; did you mean measured_iteration_time_s? (read in seconds: convert "
     "the values of another unit, ms / 1000, us / 1e6, min x 60)"),
    ("MEASURED_ITERATION_TIME_S", "; did you mean measured_iteration_time_s? (column names are "
     "lower case) (read in seconds: convert the values of another unit, ms / 1000, us / 1e6, "
     "min x 60)"),
])
def test_a_header_with_a_unit_or_in_capitals_is_told_what_to_write(tmp_path, column, hint):
    """A unit after a column's name ('measured_iteration_time_s (s)') was told to "convert the
    values (ms / 1000 ...)" though they are seconds; a name close to a measurement column
    ('iteration_time_ms') got the name alone (renamed, milliseconds read as seconds); a header
    in capitals no suggestion. Each is told the name to write and, where the unit may differ,
    to convert."""
    path = _gpt_csv(tmp_path)
    path.write_text(path.read_text().replace("measured_iteration_time_s", column, 1))
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: column {column!r} is neither a session field (model, "
                              "plan, cluster or cost; docs/accuracy.md) nor one of "
                              "measured_iteration_time_s, measured_memory_gib, memory_scale, "
                              f"source, assumptions, notes, recipe{hint}")
    assert vtrain(["validate", str(path)]) == 2


def test_a_column_named_twice_is_named_with_its_positions(tmp_path, capsys):
    """The same column twice read "columns 'tensor_parallel' and 'tensor_parallel' name the
    same field"; it names the column once and both positions."""
    path = _gpt_csv(tmp_path, extra=",tensor_parallel|,1")
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: column 'tensor_parallel' is given twice (columns 10 "
                              "and 17); keep one")
    path = _gpt_csv(tmp_path, extra=",plan.tensor_parallel|,1")
    with pytest.raises(MeasurementFileError, match="columns 'tensor_parallel' and "
                                                   "'plan.tensor_parallel' name the same field"):
        read_measurements(path)


def test_an_unreadable_csv_names_the_line(tmp_path):
    """A cell past the csv module's field limit (a log pasted in, an unclosed quote over the
    rest of the file) named the file alone; it names the line the row starts on."""
    path = _gpt_csv(tmp_path)
    with path.open("a") as f:
        f.write("\n\"" + "a" * 140_000 + "\",1\n")  # line 4 blank, line 5 the huge cell
    with pytest.raises(MeasurementFileError) as exc:
        read_measurements(path)
    assert str(exc.value) == (f"{path}: line 5: not a readable CSV file (field larger than "
                              "field limit (131072))")


def test_a_record_is_named_with_its_line_where_the_line_is_not_the_row():
    assert row_where(3, 5) == "row 3 (line 5)"
    assert row_number_where(3, 5) == "3 (line 5)"
    assert row_where(3, 3) == row_where(3) == "row 3"  # JSON lines: the line is the row
    assert row_number_where(12) == "12"


def test_out_with_a_suffix_other_than_csv_is_refused_before_any_work(tmp_path, capsys):
    """`--out rows.json` wrote CSV under a JSON name; it is refused by name (exit 2), nothing
    written; .csv and a name without a suffix write the CSV."""
    csv_path = _gpt_csv(tmp_path)
    for name in ("rows.json", "rows.txt"):
        assert vtrain(["validate", str(csv_path), "--out", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert f"--out: {tmp_path / name}: the rows are written as CSV; name the file .csv" in err
        assert not (tmp_path / name).exists()
    for name in ("rows.csv", "rows"):
        assert vtrain(["validate", str(csv_path), "--out", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_text().startswith("row,model,num_gpus,")
    capsys.readouterr()


def test_calibrate_refuses_a_file_given_twice_or_two_files_of_one_name(tmp_path, capsys):
    """``vtrain calibrate runs.csv runs.csv`` only warned of the repeats and wrote a store whose
    every residual row was there twice (its band moved); the same file by another path (a
    link) is refused alike, and so are two files of one name, whose rows the store (which
    records a run by its file's name and row) could not tell apart. Nothing is written."""
    import os
    path = _gpt_csv(tmp_path)
    store = str(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    out = tmp_path / "s.h5"
    link = tmp_path / "again.csv"
    os.symlink(path, link)
    (tmp_path / "b").mkdir()
    other = _gpt_csv(tmp_path / "b", t1="3.6")  # another file of the same name, runs.csv
    for given, said in (
            ([path, path], f"vtrain: error: {path}: the same file as {path}, given twice: its "
                           "rows would be fitted and counted in the error band twice; give each "
                           "file once"),
            ([path, link], f"vtrain: error: {link}: the same file as {path}, given twice: its "
                           "rows would be fitted and counted in the error band twice; give each "
                           "file once"),
            ([path, other], f"vtrain: error: {other}: has the name of {path} (runs.csv): the "
                            "store records each run by its file's name and row, and the two "
                            "files' rows would be one; give the files different names")):
        assert vtrain(["calibrate", *map(str, given), "--profile", store, "--out", str(out),
                       "--folds", "0"]) == 2
        assert " ".join(capsys.readouterr().err.split()) == said
        assert not out.exists()


def test_a_store_whose_residual_rows_repeat_is_refused_on_opening(tmp_path):
    """The shipped A100 store with each residual row given twice opened and gave another error
    band (3.86-6.09 s for 3.75-6.96 s): a repeated (set, file, row) is refused by name, from the
    file and from its cached image alike; the shipped stores hold none and open as before."""
    import glob

    import numpy as np

    from core.store.format import ProfileStoreError
    from core.store.profile_store import ProfileStore
    shipped = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    n = len(shipped.residuals)
    assert n == 1024
    for p in glob.glob(str(ROOT / "profiles" / "*.h5")):  # every shipped store still opens
        r = ProfileStore.open(p).residuals
        assert r is None or len(set(zip(r.set.tolist(), r.file.tolist(), r.row.tolist()))) == len(r)
    twice = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    twice.residuals = shipped.residuals.concat(shipped.residuals)
    path = tmp_path / "twice.h5"
    twice.save(path)
    with pytest.raises(ProfileStoreError) as exc:
        ProfileStore.open(path)
    assert str(exc.value) == (
        f"{path}: /residuals: rows 0 and 1024 are both row 1 of 'measured_single_node.csv' in "
        "set 'cross_validated': a run is recorded once (a repeat counts twice in the error band)")
    # an image of it (as the cache holds one made before the rule) is not taken either
    with pytest.raises(ValueError, match="rows 0 and 1024 are both row"):
        ProfileStore.from_image(twice.to_image())
    # one row repeated among the others is found too
    one = shipped.residuals.subset(np.r_[np.arange(n), 5])
    again = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    again.residuals = one
    again.save(tmp_path / "one.h5")
    with pytest.raises(ProfileStoreError, match=f"rows 5 and {n} are both row"):
        ProfileStore.open(tmp_path / "one.h5")
