"""Saves keep what the user set on a file, and never replace an input.

An existing file keeps its mode, a new one follows the umask; a save through a symbolic
link writes the file the link names (the link stays a link); loops and dangling links are
refused naming the path given; an output that is an input (by name, through a link, through
a hard link) is refused with exit status 2 before anything is written. Measurement CSVs are
bounded by row count (``core.accuracy.measured.MAX_ROWS``) and long validations show progress.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.util.atomic import atomic_target, same_file, save_target
from core.cli import main
from core.plan.session import Session
from core.io.session import load_session, save_session
from tests.conftest import EXAMPLES, ROOT

STORE = ROOT / "profiles" / "A100-SXM4-80GB.h5"
LAUNCH = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
          "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
          "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 1000\n")
AUTHORS_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
                  "sequence length,tensor parallelism,data parallelism,pipeline parallelism,"
                  "iteration time (ms)")
AUTHORS_ROW = "8,8,2,2048,16,20,1024,4,1,2,160.6027"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """``vtrain ARGS`` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vtrain: error: ") and "Traceback" not in err
    return lines[0]


# --------------------------------------------------------------------------- modes

@pytest.mark.parametrize("mode", [0o600, 0o755, 0o640, 0o400])
def test_a_save_keeps_the_mode_of_the_file_it_replaces(tmp_path, mode):
    target = tmp_path / "s.json"
    save_session(Session(), target)
    os.chmod(target, mode)
    if mode == 0o400 and os.geteuid() != 0:
        pytest.skip("a read-only file is refused to users (next test)")
    session = Session()
    session.model.num_layers = 7
    save_session(session, target)
    assert mode_of(target) == mode and load_session(target).model.num_layers == 7


def test_a_file_this_user_may_not_write_is_refused_and_kept(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root may write any file")
    target = tmp_path / "s.json"
    save_session(Session(), target)
    os.chmod(target, 0o444)
    before = target.read_bytes()
    with pytest.raises(PermissionError) as err:
        save_session(Session(), target)
    assert err.value.filename == str(target) and target.read_bytes() == before


def test_an_exported_script_stays_executable_and_a_store_keeps_its_mode(tmp_path, capsys):
    script = tmp_path / "train.sh"
    assert run_cli(capsys, "export", "megatron-args", EXAMPLES / "gpt3_1.3b_single_node.json",
                   "--out", script)[0] == 0
    os.chmod(script, 0o750)
    script.write_text("old\n")
    assert run_cli(capsys, "export", "megatron-args", EXAMPLES / "gpt3_1.3b_single_node.json",
                   "--out", script)[0] == 0
    assert mode_of(script) == 0o750 and "torchrun" in script.read_text()
    store = tmp_path / "a.h5"
    shutil.copyfile(STORE, store)
    os.chmod(store, 0o600)
    from core.store.profile_store import ProfileStore
    ProfileStore.open(store).save(store)
    assert mode_of(store) == 0o600


@pytest.mark.parametrize("umask,expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_file_follows_the_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        save_session(Session(), tmp_path / "s.json")
        with atomic_target(tmp_path / "t.txt") as tmp:
            Path(tmp).write_text("x")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "s.json") == expected and mode_of(tmp_path / "t.txt") == expected


def test_the_owner_and_group_of_an_existing_file_are_kept_where_this_user_may_set_them(tmp_path):
    target = tmp_path / "s.json"
    save_session(Session(), target)
    if os.geteuid() == 0:  # root may give the file to anyone: it stays theirs
        owner = (1234, 4321)
    else:
        groups = [g for g in os.getgroups() if g != os.stat(target).st_gid]
        if not groups:
            pytest.skip("this user belongs to one group only")
        owner = (os.getuid(), groups[0])
    os.chown(target, *owner)
    os.chmod(target, 0o664)
    save_session(Session(), target)
    st = os.stat(target)
    assert (st.st_uid, st.st_gid) == owner and stat.S_IMODE(st.st_mode) == 0o664


# --------------------------------------------------------------------------- symbolic links

def test_a_save_through_a_link_writes_the_file_it_names_and_the_link_stays(tmp_path):
    real_dir, link_dir = tmp_path / "real", tmp_path / "links"
    real_dir.mkdir()
    link_dir.mkdir()
    target = real_dir / "s.json"
    save_session(Session(), target)
    os.chmod(target, 0o600)
    link = link_dir / "s.json"
    link.symlink_to(os.path.relpath(target, link_dir))
    chain = link_dir / "again.json"  # a link to a link
    chain.symlink_to("s.json")
    for i, path in enumerate((link, chain)):
        session = Session()
        session.model.num_layers = 3 + i
        save_session(session, path)
        assert link.is_symlink() and chain.is_symlink()
        assert os.readlink(link) == os.path.relpath(target, link_dir)
        assert load_session(target).model.num_layers == 3 + i and mode_of(target) == 0o600
    assert sorted(p.name for p in real_dir.iterdir()) == ["s.json"]  # no temporary file left
    assert sorted(p.name for p in link_dir.iterdir()) == ["again.json", "s.json"]
    assert save_target(chain) == target.resolve() and save_target(target) == target


def test_a_command_writes_through_a_link(tmp_path, capsys):
    (tmp_path / "launch.sh").write_text(LAUNCH)
    real = tmp_path / "sessions" / "s.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "s.json"
    link.symlink_to(real)
    code, _, err = run_cli(capsys, "import", "megatron-args", tmp_path / "launch.sh", "--out", link)
    assert code == 0, err
    assert link.is_symlink() and load_session(real).model.num_layers == 2


def test_a_killed_save_through_a_link_leaves_its_orphan_beside_the_target(tmp_path):
    code = ("import os, signal, sys\n"
            "from core.util.atomic import atomic_target\n"
            "with atomic_target(sys.argv[1]) as tmp:\n"
            "    open(tmp, 'w').write('partial')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "s.json"
    save_session(Session(), target)
    before = target.read_bytes()
    link = tmp_path / "s.json"
    link.symlink_to(target)
    proc = subprocess.run([sys.executable, "-c", code, str(link)], cwd=ROOT)
    assert proc.returncode == -9 and target.read_bytes() == before and link.is_symlink()
    assert len(list(target.parent.iterdir())) == 2  # the orphan lies beside the target
    save_session(Session(), link)
    assert [p.name for p in target.parent.iterdir()] == ["s.json"]


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_a_dangling_or_looping_link_is_refused_naming_the_path_given(tmp_path, capsys, kind):
    link = tmp_path / "s.json"
    secret = "secret-target-name"
    if kind == "dangling":
        link.symlink_to(tmp_path / secret / "x.json")
    else:
        (tmp_path / secret).symlink_to(link)
        link.symlink_to(tmp_path / secret)
    with pytest.raises(OSError) as err:
        save_session(Session(), link)
    assert err.value.filename == str(link) and secret not in str(err.value)
    code, _, stderr = run_cli(capsys, "import", "preset", "Llama 3 8B", "--out", link)
    line = one_line_error(code, stderr)
    assert str(link) in line and secret not in line
    assert link.is_symlink() and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["s.json"] + ([secret] if kind == "loop" else []))


def test_a_link_to_a_device_a_pipe_or_a_folder_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for name, to in (("null", Path("/dev/null")), ("fifo", fifo), ("dir", tmp_path)):
        link = tmp_path / f"to-{name}"
        link.symlink_to(to)
        with pytest.raises(OSError) as err:
            save_session(Session(), link)
        assert err.value.filename == str(link)
        assert link.is_symlink()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


# --------------------------------------------------------------------------- output == input

def _same_file_names(path: Path) -> list[Path]:
    """``path`` and other names of it: a link, a hard link, a spelling with ``..``."""
    link = path.parent / f"link-{path.name}"
    link.symlink_to(path.name)
    hard = path.parent / f"hard-{path.name}"
    os.link(path, hard)
    (path.parent / "sub").mkdir(exist_ok=True)
    return [path, link, hard, path.parent / "sub" / ".." / path.name]


def test_import_megatron_args_refuses_to_overwrite_its_launch_script(tmp_path, capsys):
    script = tmp_path / "train.sh"
    script.write_text(LAUNCH)
    os.chmod(script, 0o755)
    before = script.read_bytes()
    for out in _same_file_names(script):
        code, _, err = run_cli(capsys, "import", "megatron-args", script, "--out", out)
        line = one_line_error(code, err)
        assert str(out) in line and str(script) in line  # names both
        assert script.read_bytes() == before and mode_of(script) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hard-train.sh", "link-train.sh",
                                                          "sub", "train.sh"]
    code, _, err = run_cli(capsys, "import", "megatron-args", script, "--out", tmp_path / "s.json")
    assert code == 0, err  # another file is fine


def _session_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.json"
    shutil.copyfile(EXAMPLES / "gpt3_1.3b_single_node.json", path)
    return path


def _csv(tmp_path: Path, rows: int = 1) -> Path:
    path = tmp_path / "m.csv"
    path.write_text(AUTHORS_HEADER + "\n" + "\n".join([AUTHORS_ROW] * rows) + "\n")
    return path


def _hf_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                "hidden_size": 64, "intermediate_size": 256,
                                "num_attention_heads": 4, "num_hidden_layers": 2,
                                "num_key_value_heads": 4, "vocab_size": 1000,
                                "max_position_embeddings": 128}))
    return path


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "a.h5"
    shutil.copyfile(STORE, path)
    return path


def _nccl(tmp_path: Path) -> Path:
    path = tmp_path / "all_reduce_2gpu.txt"
    path.write_text("#  Rank  0 Group  0 Pid 1 on x device  0 [0x00] A100\n"
                    "#  Rank  1 Group  0 Pid 1 on x device  1 [0x00] A100\n"
                    "  1048576  262144  float  sum  -1  100.0  10.49  15.73  0  100.0  10.49  15.73  0\n")
    return path


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "gpu.json"
    shutil.copyfile(ROOT / "resources" / "gpu_specs" / "A100-SXM4-80GB.json", path)
    return path


# (make the input, the command with {in} for it)
IN_OUT_COMMANDS = [
    (_hf_config, ["import", "hf", "{in}", "--out", "{out}"]),
    (_session_file, ["export", "megatron-args", "{in}", "--out", "{out}"]),
    (_session_file, ["simulate", "{in}", "--trace-out", "{out}"]),
    (_store, ["simulate", EXAMPLES / "gpt3_1.3b_single_node.json", "--profile", "{in}",
              "--trace-out", "{out}"]),
    (_session_file, ["sweep", "{in}", "--gpus", "8", "--out", "{out}"]),
    (_csv, ["validate", "{in}", "--out", "{out}"]),
    (_csv, ["validate", "{in}", "--plot", "{out}"]),
    (_csv, ["calibrate", "{in}", "--profile", STORE, "--out", "{out}"]),
    (_store, ["calibrate", EXAMPLES.parent.parent / "missing.csv", "--profile", "{in}", "--out",
              "{out}"]),
    (_spec, ["profile", "generate", "--spec", "{in}", "--out", "{out}"]),
    (_nccl, ["profile", "import-nccl-tests", "{in}", "--into", "{out}"]),
    (_session_file, ["gui", "{in}", "--screenshot", "{out}"]),
]


@pytest.mark.parametrize("make,command", IN_OUT_COMMANDS,
                         ids=[" ".join(str(c) for c in cmd[:2]) + f" {cmd[-2]}"
                              for _, cmd in IN_OUT_COMMANDS])
def test_every_command_refuses_an_output_that_is_an_input(tmp_path, capsys, make, command):
    src = make(tmp_path)
    before = src.read_bytes()
    link = tmp_path / "link"
    link.symlink_to(src.name)
    for out in (src, link):
        args = [str(src) if a == "{in}" else str(out) if a == "{out}" else a for a in command]
        code, stdout, err = run_cli(capsys, *args)
        line = one_line_error(code, err)
        assert str(out) in line and str(src) in line and stdout == ""
        assert src.read_bytes() == before and link.is_symlink()


def test_the_store_a_session_names_is_an_input_too(tmp_path, capsys):
    store = _store(tmp_path)
    before = store.read_bytes()
    from core.io.session import load_any
    session = load_any(EXAMPLES / "gpt3_1.3b_single_node.json")
    session.cluster.profile_path = str(store)
    path = tmp_path / "s.json"
    save_session(session, path)
    for command in (["simulate", path, "--trace-out", store],
                    ["sweep", path, "--gpus", "8", "--out", store]):
        line = one_line_error(*run_cli(capsys, *command)[::2])
        assert str(store) in line
    assert store.read_bytes() == before


def test_two_outputs_that_are_one_file_are_refused(tmp_path, capsys):
    csv = _csv(tmp_path)
    out = tmp_path / "o"
    line = one_line_error(*run_cli(capsys, "validate", csv, "--out", out, "--plot", out)[::2])
    assert "--plot" in line and not out.exists()


def test_same_file_follows_links_and_hard_links(tmp_path):
    a = tmp_path / "a"
    a.write_text("x")
    names = _same_file_names(a)
    assert all(same_file(a, n) for n in names)
    b = tmp_path / "b"
    b.write_text("x")
    assert not same_file(a, b) and not same_file(a, tmp_path / "missing")
    assert same_file(tmp_path / "missing", tmp_path / "sub" / ".." / "missing")


# --------------------------------------------------------------------------- measurement rows

def test_a_csv_over_the_row_limit_is_refused_at_once(tmp_path, capsys):
    from core.accuracy.measured import MAX_ROWS
    assert MAX_ROWS == 10_000  # the documented bound (docs/simulator.md, Inputs)
    path = _csv(tmp_path, MAX_ROWS + 1)
    t0 = time.perf_counter()
    code, stdout, err = run_cli(capsys, "validate", path, "--json")
    line = one_line_error(code, err)
    assert time.perf_counter() - t0 < 5 and stdout == ""
    assert str(path) in line and f"{MAX_ROWS:,}" in line
    code, _, err = run_cli(capsys, "calibrate", path, "--profile", STORE, "--out", tmp_path / "c.h5")
    assert str(path) in one_line_error(code, err) and not (tmp_path / "c.h5").exists()


def test_the_row_limit_counts_data_rows(tmp_path, monkeypatch):
    from core.accuracy import measured
    monkeypatch.setattr(measured, "MAX_ROWS", 5)
    assert len(measured.read_measurements(_csv(tmp_path, 5))) == 5
    with pytest.raises(measured.MeasurementFileError):
        measured.read_measurements(_csv(tmp_path, 6))


def test_reading_and_predicting_rows_report_progress(tmp_path):
    from core.accuracy.measured import read_measurements
    from core.accuracy.validate import predict_rows
    calls = []
    ms = read_measurements(_csv(tmp_path, 120), lambda done, total: calls.append((done, total)))
    assert calls == [(50, 120), (100, 120), (120, 120)]
    calls.clear()
    result = predict_rows(ms, lambda s: 1.0, lambda done, total: calls.append((done, total)))
    assert calls == [(50, 120), (100, 120), (120, 120)] and result.used.all()


def test_progress_goes_to_stderr_when_long_and_never_into_json(tmp_path, capsys):
    from core.cli.common import row_progress
    with row_progress("predicting", json_output=False, long_s=0.0) as progress:
        progress(5, 10)
    out, err = capsys.readouterr()
    assert out == "" and "5 of 10 rows" in err
    with row_progress("predicting", json_output=True) as progress:
        assert progress is None
    code, out, err = run_cli(capsys, "validate", _csv(tmp_path, 3), "--json")
    assert code == 0 and err == "" and json.loads(out)["n"] == 3
