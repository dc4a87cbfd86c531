"""Every output path option of every command is checked before the work starts: a file in a
folder that does not exist (or cannot be written) exits 2 naming the option and the rule,
and nothing is computed (tester: a 30 s sweep ran, then failed on --out)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

EXAMPLE = "resources/examples/gpt3_1.3b_single_node.json"


def _commands(tmp_path):
    """(option, argv) of each output option, with the output in a missing folder."""
    missing = tmp_path / "no-such-folder"
    csv = tmp_path / "runs.csv"
    csv.write_text("gpu\n")
    hf = tmp_path / "config.json"
    hf.write_text("{}")
    args = tmp_path / "args.txt"
    args.write_text("--num-layers 2\n")
    out = lambda name: str(missing / name)  # noqa: E731
    return [
        ("--out", ["sweep", EXAMPLE, "--out", out("x.csv")]),
        ("--trace-out", ["simulate", EXAMPLE, "--trace-out", out("t.json")]),
        ("--out", ["export", "megatron-args", EXAMPLE, "--out", out("x.sh")]),
        ("--out", ["import", "hf", str(hf), "--out", out("s.json")]),
        ("--out", ["import", "preset", "Llama 3 8B", "--out", out("s.json")]),
        ("--out", ["import", "megatron-args", str(args), "--out", out("s.json")]),
        ("--out", ["validate", str(csv), "--out", out("p.csv")]),
        ("--plot", ["validate", str(csv), "--plot", out("p.png")]),
        ("--out", ["calibrate", str(csv), "--profile", str(csv), "--out", out("c.h5")]),
        ("--out", ["profile", "generate", "--gpu", "A100-SXM4-80GB", "--out", out("g.h5")]),
        ("--screenshot", ["gui", "--screenshot", out("a.png")]),
    ]


@pytest.mark.parametrize("index", range(11))
def test_an_output_in_a_missing_folder_is_refused_naming_the_option(tmp_path, capsys, index):
    from core.cli import main
    option, argv = _commands(tmp_path)[index]
    assert main(argv) == 2
    err = capsys.readouterr().err
    missing = str(tmp_path / "no-such-folder")
    assert f"{option} {missing}" in err and "does not exist" in err, err
    assert not (tmp_path / "no-such-folder").exists()


def test_the_sweep_is_not_run_when_its_out_cannot_be_written(tmp_path, monkeypatch):
    import core.studies.sweep as sweep

    def never(*a, **k):
        raise AssertionError("the sweep ran")
    monkeypatch.setattr(sweep, "run_sweep", never)
    from core.cli import main
    assert main(["sweep", EXAMPLE, "--out", str(tmp_path / "missing" / "x.csv")]) == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_output_in_a_read_only_folder_is_refused(tmp_path, capsys):
    from core.cli import main
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert main(["simulate", EXAMPLE, "--trace-out", str(folder / "t.json")]) == 2
        assert "--trace-out" in capsys.readouterr().err
    finally:
        folder.chmod(0o700)


def test_an_output_that_is_a_folder_is_refused(tmp_path, capsys):
    from core.cli import main
    assert main(["sweep", EXAMPLE, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path}" in err and "folder" in err


def test_calibrate_out_dir_may_be_made_but_not_under_a_file(tmp_path, capsys):
    """--out-dir is made (with its parents): refused only when it cannot be, before the fit."""
    from core.cli.common import check_outputs
    check_outputs([("--out-dir", tmp_path / "a" / "b")], [], folders=True)  # can be made
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(Exception) as err:
        check_outputs([("--out-dir", blocker / "b")], [], folders=True)
    assert "--out-dir" in str(err.value) and str(blocker) in str(err.value)


def test_an_output_under_a_file_is_refused(tmp_path, capsys):
    """A folder part that is a file (runs as root too, where a read-only folder is writable)."""
    from core.cli import main
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["simulate", EXAMPLE, "--trace-out", str(blocker / "t.json")]) == 2
    err = capsys.readouterr().err
    assert f"--trace-out {blocker / 't.json'}" in err and f"{blocker} is not a folder" in err
    assert blocker.read_text() == ""


@pytest.mark.parametrize("index", range(11))
def test_an_empty_output_path_is_refused_naming_the_option(tmp_path, capsys, monkeypatch, index):
    """``--out ""`` was taken as "not given": simulate --trace-out "" and sweep --out ""
    reported success with nothing written, gui --screenshot "" opened the window; import
    megatron-args and profile generate failed at the end on ".: Is a directory"."""
    from core.cli import main
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # gui --screenshot "" opened the window
    option, argv = _commands(tmp_path)[index]
    argv[argv.index(option) + 1] = ""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {option}: an empty path: give a file name" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.txt", "config.json", "runs.csv"]
    from core.cli.common import check_outputs  # the same rule for a caller of check_outputs
    from core.plan.fields import ConfigError
    with pytest.raises(ConfigError, match="an empty path"):
        check_outputs([(option, "")], [])


@pytest.mark.parametrize("argv, option", [
    # each was read as "not given": the shipped store, the default cluster, a new script
    (["simulate", EXAMPLE, "--profile", ""], "--profile"),
    (["sweep", EXAMPLE, "--profile", "", "--workers", "1"], "--profile"),
    (["schedule", "resources/traces/jobs_trace.json", "--gpus", "64", "--cluster", ""],
     "--cluster"),
    (["export", "megatron-args", EXAMPLE, "--into", "", "--out", "x.sh"], "--into"),
    (["simulate", ""], "PATH"),  # read the folder "."
])
def test_an_empty_input_path_is_refused_naming_the_option(capsys, argv, option):
    from core.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"error: argument {option}: an empty path" in capsys.readouterr().err


def _outputs_in(folder, tmp_path):
    """(option, argv) of every output option of every command, the output in ``folder``."""
    out = lambda name: str(folder / name)  # noqa: E731
    argvs = [(opt, [out(a.split("/")[-1]) if a.startswith(str(tmp_path / "no-such-folder"))
                    else a for a in argv]) for opt, argv in _commands(tmp_path)]
    return argvs + [
        ("--out", ["optimal", EXAMPLE, "--gpus", "8", "--days", "10", "--out", out("o.json")]),
        ("--out", ["sweep", EXAMPLE, "--pick", "fastest", "--out", out("s.json")]),
        ("--out-dir", ["calibrate", str(tmp_path / "runs.csv"), "--out-dir",
                       str(folder / "new" / "dir")]),
    ]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="a /proc file system (Linux)")
@pytest.mark.parametrize("index", range(14))
def test_an_output_in_proc_is_refused_before_the_work_as_root_too(tmp_path, capsys, monkeypatch,
                                                                  index):
    """Root's ``os.access`` says /proc is writable, yet no file can be made there: the sweep
    ran its whole study, then failed as "vtrain: error: /proc/x.json: No such file or
    directory", without naming --out. A trial save (a temporary file created and removed)
    refuses it first, naming the option and the rule, for every output option."""
    from core.cli import common, main
    # what root sees: os.access yes everywhere (so the test means the same for any user)
    monkeypatch.setattr(common.os, "access", lambda *a, **k: True)
    import core.studies.optimal as optimal
    import core.studies.sweep as sweep

    def never(*a, **k):
        raise AssertionError("the work ran")
    monkeypatch.setattr(sweep, "run_sweep", never)
    monkeypatch.setattr(optimal, "compute_optimal", never)
    option, argv = _outputs_in(Path("/proc"), tmp_path)[index]
    assert main(argv) == 2
    err = capsys.readouterr().err
    target = argv[argv.index(option) + 1]
    assert err == (f"vtrain: error: {option} {target}: cannot be written: No such file or "
                   "directory (a trial save before the work failed: a temporary file created "
                   "in the folder /proc and removed)\n"), err


def test_a_read_only_file_system_is_refused_and_a_writable_folder_left_as_it_was(
        tmp_path, monkeypatch):
    """The trial save is real: a folder whose file system refuses new files (EROFS, which
    ``os.access`` does not see) is refused; a writable folder keeps no trace of the trial,
    and an existing output keeps its contents."""
    import errno

    from core.cli.common import check_outputs
    from core.plan.fields import ConfigError
    from core.util import atomic
    ro = tmp_path / "ro"
    ro.mkdir()
    real = atomic._create_temporary

    def create(target, perms):
        if target.parent == ro:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(target, perms)
    monkeypatch.setattr(atomic, "_create_temporary", create)
    with pytest.raises(ConfigError) as err:
        check_outputs([("--out", ro / "x.csv")], [])
    assert str(err.value) == (f"--out {ro / 'x.csv'}: cannot be written: Read-only file system "
                              f"(a trial save before the work failed: a temporary file created "
                              f"in the folder {ro} and removed)")
    ok = tmp_path / "ok"
    ok.mkdir()
    kept = ok / "kept.csv"
    kept.write_text("a,b\n")
    check_outputs([("--out", ok / "new.csv"), ("--plot", kept)], [])
    assert sorted(p.name for p in ok.iterdir()) == ["kept.csv"] and kept.read_text() == "a,b\n"
