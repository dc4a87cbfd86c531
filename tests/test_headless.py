"""The core is headless: it imports and simulates without Qt or torch, and shipped files stay readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from core.store.profile_store import ProfileStore
from core.store.profiles_gen import generate_store
from tests.conftest import EXAMPLES, ROOT

BLOCKER = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6', 'torch', 'vtrain_gui'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
"""


def test_core_imports_and_simulates_without_qt_or_torch():
    code = BLOCKER + f"""
import core.cli, core.sim.simulate, core.io.trace, core.store.profiles_gen
from core.io.session import load_any
r = core.sim.simulate.simulate(load_any({str(EXAMPLES / 'gpt3_1.3b_single_node.json')!r}))
assert r.report.iteration_time_s > 0
print('ok')
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


STARTUP = """
import contextlib, io, json, sys
import core.cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = core.cli.main(ARGS)
    except SystemExit as exc:  # --help
        code = exc.code
heavy = ("numpy", "h5py", "rich", "rich.table", "rich.progress", "matplotlib", "scipy", "networkx",
         "core.sim.simulate", "core.studies.scheduler", "core.studies.sweep", "core.studies.optimal", "core.accuracy.calibrate")
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules],
                  "out": out.getvalue()}))
"""


@pytest.mark.parametrize("args,loaded", [
    (["--help"], []),  # core.plan.rules' schedule rules import numpy only when they run
    (["simulate", "--help"], []),
    # the example runs without recomputation, which no A100 calibration run did: its band takes
    # the feature-transfer runs like it, a normal-theory band (Student's t quantile: scipy)
    (["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json"), "--json"],
     ["numpy", "scipy", "core.sim.simulate"]),
    (["simulate", str(EXAMPLES / "gpt3_1.3b_single_node.json")],
     ["numpy", "rich", "rich.table", "scipy", "core.sim.simulate"]),
], ids=["help", "simulate-help", "simulate-json", "simulate-tables"])
def test_cli_start_up_imports_only_what_the_command_uses(args, loaded, tmp_path):
    """In a fresh process: ``vtrain --help`` loads no h5py, rich or simulator; ``vtrain simulate``
    loads the simulator (and rich only to print tables), never matplotlib, scipy, networkx or
    the sweep, scheduler, study and calibration modules; no h5py either, even with an empty
    parsed-store cache (the shipped stores' images, ``profiles/images``, are read)."""
    code = STARTUP.replace("ARGS", repr(args))
    env = {**os.environ, "VTRAIN_CACHE_DIR": str(tmp_path / "cache")}
    for run in range(2 if "--help" not in args else 1):
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
        assert doc["code"] == 0, doc
        assert doc["loaded"] == loaded
    if "--help" in args:
        assert doc["out"].startswith("usage: vtrain")
    elif "--json" in args:
        assert json.loads(doc["out"])["iteration_time_s"] > 0
    else:
        assert "Iteration time" in doc["out"]


def test_schema_v1_fixture_still_opens():
    s = ProfileStore.open(ROOT / "tests" / "data" / "profile_store_v1.h5")
    assert s.device_name == "fixture-gpu" and s.provenance["method"] == "measured"
    lk = s.op_time("attention_fwd", dict(b=1, s=128, h=256, a=4, t=1, dtype="bf16"))
    assert lk.time_s == pytest.approx(1e-4) and not lk.extrapolated
    assert s.collective_time("all_reduce", 2, 1e6).time_s == pytest.approx(1e-4)


@pytest.mark.parametrize("gpu", ["H100-SXM5-80GB"])
def test_shipped_store_is_what_the_generator_writes(gpu):
    """The shipped store is calibrated from the generator's analytic store (docs/accuracy.md):
    its base is what the generator writes, its tables that model with the fitted parameters."""
    from core.accuracy.calibrate import apply_fit
    shipped = ProfileStore.open(ROOT / "profiles" / f"{gpu}.h5")
    fresh = generate_store(gpu, date=shipped.provenance["base_provenance"]["date"])
    assert shipped.provenance["base_provenance"] == fresh.provenance
    refit = apply_fit(fresh, shipped.op_model)
    assert shipped.op_names() == refit.op_names()
    for op in refit.op_names():
        k1, t1, a1 = shipped.op_table(op)
        k2, t2, a2 = refit.op_table(op)
        assert a1 == a2 and k1.keys() == k2.keys()
        np.testing.assert_allclose(t1, t2, rtol=1e-12)


def test_shipped_a100_store_is_calibrated_with_out_of_sample_figures():
    s = ProfileStore.open(ROOT / "profiles" / "A100-SXM4-80GB.h5")
    prov = s.provenance
    assert prov["method"] == "calibrated"
    assert "measured_single_node.csv" in prov["data"] and "measured_multi_node.csv" in prov["data"]
    cv = prov["cross_validation"]
    for name in ("measured_single_node.csv", "measured_multi_node.csv"):
        assert cv[name]["n"] > 0 and 0 < cv[name]["mape_percent"] < 10
    assert set(prov["parameters"]) >= {"gemm_efficiency_max", "memory_efficiency", "op_overhead_s"}
    # the collective curves are fits (12 knots), not the measured rows
    for n in range(2, 9):
        nbytes, _ = s.collective_curve("all_reduce", n)
        assert nbytes.size == 12


def test_screenshot_into_a_missing_folder_is_refused_before_the_window(tmp_path, capsys):
    """Bad input: exit 2 naming the folder (was exit 4 after the window had run)."""
    from core.cli import main
    out = tmp_path / "no-such-folder" / "a.png"
    assert main(["gui", "--screenshot", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--screenshot" in err and "does not exist" in err and str(out.parent) in err


def test_set_overrides_fields_without_editing_the_file(capsys):
    """vtrain simulate/sweep FILE --set SECTION.FIELD=VALUE: JSON or text values, checked as a
    session file's; bad ones exit 2 naming the --set (tester: no command-line override)."""
    import json

    from core.cli import main
    from tests.conftest import EXAMPLES
    path = str(EXAMPLES / "gpt3_1.3b_single_node.json")
    assert main(["simulate", path, "--json", "--set", "plan.pipeline_parallel=1",
                 "--set", "plan.data_parallel=4", "--set", "cluster.gpu=H100-SXM5-80GB"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["session"]["plan"]["pipeline_parallel"], doc["session"]["plan"]["data_parallel"],
            doc["session"]["cluster"]["gpu"]) == (1, 4, "H100-SXM5-80GB")
    for bad, words in ((["--set", "plan.tensor_parallel=two"],
                        "--set plan.tensor_parallel: must be of type int"),
                       (["--set", "plan.foo=1"], "--set plan.foo: unknown field"),
                       (["--set", "tensor_parallel=2"], "give SECTION.FIELD=VALUE")):
        assert main(["simulate", path, *bad]) == 2
        assert words in capsys.readouterr().err
    assert main(["sweep", path, "--json", "--workers", "1", "--set", "plan.global_batch_size=64",
                 "--gpus", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["num_plans"] > 0


def test_report_into_a_pipe_has_no_trailing_spaces(tmp_path):
    """`vtrain simulate FILE > out.txt`: each line as long as its text, no wider (rich pads every
    row of the report's grid to its widest row, 160 columns; tester: padding when piped), and
    the long error-band line is not hard-wrapped at 80 columns."""
    from tests.conftest import EXAMPLES
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "core.cli", "simulate",
                           str(EXAMPLES / "mtnlg_530b.json")], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln for ln in lines if ln != ln.rstrip(" ")] == []
    params = next(ln for ln in lines if ln.startswith("Parameters"))
    assert params.endswith("for t=8)") and len(params) < 80
    assert max(len(ln) for ln in lines) > 100  # the error band's line, wrapped at 160 not 80
    proc = subprocess.run([sys.executable, "-m", "core.cli", "simulate",  # COLUMNS: its width
                           str(EXAMPLES / "mtnlg_530b.json")], cwd=ROOT, capture_output=True,
                          text=True, env={**env, "COLUMNS": "80"})
    assert proc.returncode == 0 and [ln for ln in proc.stdout.splitlines()
                                     if ln != ln.rstrip(" ")] == []


def test_import_preset_writes_a_session_of_every_preset_that_simulates(tmp_path, capsys):
    """vtrain import preset NAME: the editor's presets from the command line (tester: only
    reachable in the window), with the default plan of an import, the GPU kind's node as its
    NVLink domain, names matched without case; an unknown name lists the presets (exit 2)."""
    import dataclasses
    import json

    from core.cli import main
    from core.plan.presets import MODEL_PRESETS
    from core.io.session import load_session
    out = tmp_path / "s.json"
    assert main(["import", "preset", "llama 3 70b", "--gpu", "GB200-NVL72", "--out", str(out),
                 "--seq-length", "16384"]) == 0
    s = load_session(out)
    assert s.model == dataclasses.replace(MODEL_PRESETS["Llama 3 70B"], seq_length=16384)
    assert (s.cluster.gpu, s.cluster.gpus_per_node, s.plan.num_gpus) == ("GB200-NVL72", 72, 8)
    assert "Llama 3 70B: plan t=8 p=1 d=1" in capsys.readouterr().out
    for name in MODEL_PRESETS:
        assert main(["import", "preset", name, "--out", str(out)]) == 0
        capsys.readouterr()
        assert main(["simulate", str(out), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["num_gpus"] == 8
    assert main(["import", "preset", "Llama 4", "--out", str(out)]) == 2
    assert "'Llama 4' is not a preset; the presets are GPT-3 1.3B" in capsys.readouterr().err
    # Llama 3.1 8B and 70B are presets (Llama 3's shapes, published in the Llama 3 paper's
    # Table 3 and the meta-llama/Llama-3.1-8B, -70B configs; only RoPE's scaling differs)
    for name, base in (("Llama 3.1 8B", "Llama 3 8B"), ("Llama 3.1 70B", "Llama 3 70B")):
        assert main(["import", "preset", name, "--out", str(out)]) == 0
        capsys.readouterr()
        got = load_session(out).model
        assert got.name == name and got.seq_length == 8192
        assert dataclasses.replace(got, name=base) == MODEL_PRESETS[base]
    # a name that is not one is refused, the closest named
    assert main(["import", "preset", "Llama 3.2 70B", "--out", str(out)]) == 2
    assert ("'Llama 3.2 70B' is not a preset (closest: 'Llama 3.1 70B', 'Llama 3 70B'); the "
            "presets are GPT-3 1.3B") in capsys.readouterr().err
    # hyphens, case and spacing ignored: the Hub's spelling names the preset
    assert main(["import", "preset", "qwen3 30b  a3b", "--out", str(out)]) == 0
    assert load_session(out).model == MODEL_PRESETS["Qwen3-30B-A3B"]


@pytest.mark.parametrize("argv, usage", [
    (["simulate", "x.json", "--sett", "plan.tensor_parallel=2"], "usage: vtrain simulate"),
    (["export", "megatron-args", "x.json", "--set", "plan.tensor_parallel=2"],
     "usage: vtrain export megatron-args"),
])
def test_an_unknown_option_shows_the_commands_own_usage(argv, usage, capsys):
    """argparse's exit 2 with the usage of the command given (its options), not the top
    level's ``vtrain [-h] COMMAND ...``."""
    from core.cli import main
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments: " + " ".join(argv[-2:]) in err
