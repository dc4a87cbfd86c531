"""User data is data wherever it is written: shell scripts and their comments, the terminal,
file names (core/util/text.py, one function per destination).

The export's script is checked the way it would be used: ``bash -n`` on it, then a run under
a stub ``torchrun`` on PATH that records its argv: nothing else runs (no PWNED file), torchrun
runs once, with exactly the arguments the session asks for.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core import cli
from core.plan.cluster import GPU_KINDS, ClusterConfig, CostConfig
from core.plan.model_config import ModelConfig
from core.plan.parallel import ParallelPlan
from core.plan.session import Session
from core.store.gpu_spec import GPU_SPECS_DIR, shipped_spec_path
from core.io.megatron.from_session import export_arguments
from core.io.session import load_any
from core.sim.simulate import PROFILES_DIR, profile_path
from core.util.text import file_name_part, printable, shell_comment, shell_word, terminal_text
from tests.conftest import ROOT, case_file

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash not installed")
STORE = ROOT / "profiles" / "A100-SXM4-80GB.h5"

#: Text that acts when written raw into a script, a comment or a terminal.
HOSTILE = [
    "GPT\ntouch PWNED_newline #",
    "x'; touch PWNED_squote; '",
    'x"; touch PWNED_dquote; "',
    "$(touch PWNED_subst)",
    "`touch PWNED_backtick`",
    "; touch PWNED_semicolon",
    "a\\\ntouch PWNED_backslash_newline",
    "\x1b[31mred\x1b[0m\x07\x1b]0;title\x07",
    "a\u2028touch PWNED_u2028",
    "a\u2029touch PWNED_u2029",
    "a\x85touch PWNED_nel",
    "a\rtouch PWNED_cr",
    "a\x0btouch PWNED_vt\x0ctouch PWNED_ff",
    "\u202eevil\u2066",
    "\ud800 lone surrogate",
    "a\n`touch PWNED_all`$(touch PWNED_all2)'\"\x1b[31m\u2028\x85\r;touch PWNED_all3",
]

# Characters that must never reach a terminal raw (a line break is allowed between lines).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                         "\u2066-\u2069\ud800-\udfff]")


def string_fields() -> list[tuple[str, str]]:
    """Every string field of a session, as (section, field); ``""`` for a top-level one."""
    out = [(sec, f.name) for sec, cls in (("model", ModelConfig), ("plan", ParallelPlan),
                                          ("cluster", ClusterConfig), ("cost", CostConfig))
           for f in dataclasses.fields(cls) if "str" in str(f.type)]
    out += [("", f.name) for f in dataclasses.fields(Session) if "str" in str(f.type)
            and "dict" not in str(f.type)]
    return out


#: Fields a user may fill with any text; a hostile value in any other is refused or exported.
FREE_TEXT = {("model", "name"), ("cluster", "gpu"), ("cluster", "profile_path"), ("", "notes")}


def base_doc() -> dict:
    """A session every string field of which can be set (selective recomputation for
    ``recompute_modules``, an own store so that ``cluster.gpu`` may be any text)."""
    doc = json.loads(case_file("s3/sec_export_newline_in_model_name.json").read_text())
    doc["model"]["name"] = "GPT-3 1.3B"
    doc["plan"]["recompute"] = "selective"
    doc["cluster"]["profile_path"] = str(STORE)
    return doc


def stub_bin(tmp: Path) -> Path:
    """A folder holding a ``torchrun`` (and ``python``) that record each call's argv."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("torchrun", "python", "python3"):
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho {name} >> "$STUB_LOG/calls"\n'
                        f'printf "%s\\0" "$@" > "$STUB_LOG/{name}.argv"\n')
        stub.chmod(0o755)
    return bin_dir


def run_script(script: Path, tmp: Path, shell: str = "bash") -> tuple[list[str], list[str]]:
    """Run ``script`` under ``shell`` in a fresh folder with the stubs first on PATH; returns
    (the stubs called, torchrun's argv). Fails if any PWNED file appears."""
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    log = tmp / "log"
    log.mkdir(exist_ok=True)
    bin_dir = tmp / "bin" if (tmp / "bin").exists() else stub_bin(tmp)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "LC_ALL": "C.UTF-8"}
    proc = subprocess.run([shell, str(script)], cwd=work, env=env, capture_output=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not [p for p in tmp.rglob("*PWNED*")], "the script ran a command from the session"
    calls = (log / "calls").read_text().split() if (log / "calls").exists() else []
    argv_file = log / "torchrun.argv"
    argv = argv_file.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1] \
        if argv_file.exists() else []
    return calls, argv


# --------------------------------------------------------------------------- the four writers

@needs_bash
@pytest.mark.parametrize("text", HOSTILE + ["plain", "", "--x=1,2", "it's", "\\", "é ü"])
def test_shell_word_is_one_word_bash_reads_back_exactly(tmp_path, text):
    word = shell_word(text)
    assert not RAW_CONTROL.search(word) and "\n" not in word
    proc = subprocess.run([BASH, "-c", f"printf '%s\\0' {word}"], cwd=tmp_path,
                          capture_output=True, env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text.encode("utf-8", "surrogatepass") + b"\0"
    assert not list(tmp_path.iterdir())


@needs_bash
@pytest.mark.parametrize("text", HOSTILE)
def test_shell_comment_is_one_line_that_runs_nothing(tmp_path, text):
    comment = shell_comment(text)
    assert comment.startswith("#") and not RAW_CONTROL.search(comment) and "\n" not in comment
    for shell in [BASH] + ([shutil.which("dash")] if shutil.which("dash") else []):
        proc = subprocess.run([shell, "-c", f"{comment}\necho ok"], cwd=tmp_path,
                              capture_output=True, text=True)
        assert (proc.returncode, proc.stdout) == (0, "ok\n"), proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("text", HOSTILE)
def test_terminal_text_keeps_lines_and_escapes_the_rest(text):
    shown = terminal_text(f"first\n{text}\nlast")
    assert not RAW_CONTROL.search(shown)
    lines = shown.split("\n")
    assert lines[0] == "first" and lines[-1] == "last"
    assert "\n".join(lines[1:-1]) == "\n".join(printable(x) for x in text.split("\n"))
    assert not RAW_CONTROL.search(printable(text)) and "\n" not in printable(text)


def test_file_name_part_stays_one_component_and_is_one_to_one(tmp_path):
    names = HOSTILE + ["../../etc/passwd", "..", ".", ".hidden", "a/b", "a\\b", "C:x", "a%2Fb",
                       "trailing.", "trailing ", "x" * 1000, "x" * 999 + "y", "", "A100-SXM4-80GB"]
    parts = [file_name_part(n) for n in names]
    assert len(set(parts)) == len(parts)
    for part in parts:
        assert part and "/" not in part and "\\" not in part and "\0" not in part
        assert not part.startswith(".") and not part.endswith((".", " "))
        assert len(part.encode("utf-8")) <= 200 and not RAW_CONTROL.search(part)
        assert (tmp_path / part).resolve().parent == tmp_path.resolve()
    for kind in GPU_KINDS:  # shipped kinds keep their files' names
        assert file_name_part(kind) == kind


@pytest.mark.parametrize("gpu", ["../../../tmp/x", "/etc/passwd", "..", "a/../../b"])
def test_store_and_spec_looked_up_by_gpu_name_stay_in_their_folders(tmp_path, gpu):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(base_doc()))
    s = load_any(path)
    s.cluster.gpu, s.cluster.profile_path = gpu, None
    assert profile_path(s).parent == PROFILES_DIR
    assert shipped_spec_path(gpu).parent == GPU_SPECS_DIR
    for kind in GPU_KINDS:
        s.cluster.gpu = kind
        assert profile_path(s) == PROFILES_DIR / f"{kind}.h5"


# --------------------------------------------------------------------------- the export

def export(doc: dict, tmp: Path, capsys) -> tuple[int, str, str, Path]:
    """Run ``vtrain export megatron-args`` in process on ``doc``, printing the script."""
    path = tmp / "session.json"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    rc = cli.main(["export", "megatron-args", str(path)])
    out, err = capsys.readouterr()
    return rc, out, err, path


@needs_bash
@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_every_string_field_hostile_exports_a_script_that_only_launches(tmp_path, capsys, value):
    fields = string_fields()
    assert FREE_TEXT <= set(fields)
    for n, (section, name) in enumerate(fields):
        tmp = tmp_path / f"{n}"
        tmp.mkdir()
        doc = base_doc()
        if section:
            doc[section][name] = value
        else:
            doc[name] = value
        rc, out, err, path = export(doc, tmp, capsys)
        where = f"{section}.{name}"
        assert not RAW_CONTROL.search(out) and not RAW_CONTROL.search(err), where
        if rc == 2:  # refused: one line, nothing printed
            # free text must export, but a path that no file name can hold (a NUL byte, a lone
            # surrogate) is refused by core.plan.fields.path_problem
            unnameable = "\0" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
            assert (section, name) not in FREE_TEXT or (
                name == "profile_path" and unnameable), (where, err)
            assert out == "" and len(err.splitlines()) == 1, where
            continue
        assert rc == 0, (where, err)
        script = tmp / "run.sh"
        script.write_text(out)
        syntax = subprocess.run([BASH, "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, (where, syntax.stderr)
        calls, argv = run_script(script, tmp)
        assert calls == ["torchrun"], where
        session = load_any(path)
        assert argv == ["--nnodes", "1", "--nproc-per-node", "8", "pretrain_gpt.py",
                        *export_arguments(session)], where
        if shutil.which("dash"):  # a POSIX sh runs the same single launch
            (tmp / "log" / "calls").unlink()
            calls, _ = run_script(script, tmp, "dash")
            assert calls == ["torchrun"], where


@needs_bash
def test_hostile_training_script_and_out_path(tmp_path, capsys):
    doc = base_doc()
    path = tmp_path / "session.json"
    path.write_text(json.dumps(doc))
    out_path = tmp_path / "run\x1b[2J.sh"
    rc = cli.main(["export", "megatron-args", str(path), "--script", "x.py; touch PWNED_script",
                   "--out", str(out_path)])
    out, err = capsys.readouterr()
    assert rc == 0 and not RAW_CONTROL.search(out) and "\\x1b[2J" in out
    calls, argv = run_script(out_path, tmp_path)
    assert calls == ["torchrun"] and argv[4] == "x.py; touch PWNED_script"


@needs_bash
def test_handed_case_newline_in_model_name(tmp_path):
    """The case of ../shared/cases/s3: the name's newline used to start a command."""
    path = case_file("s3/sec_export_newline_in_model_name.json")
    proc = subprocess.run([sys.executable, "-m", "core.cli", "export", "megatron-args", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert not RAW_CONTROL.search(proc.stdout)
    comments = [line for line in proc.stdout.splitlines() if line.startswith("#")]
    assert any(line.startswith(f"# {printable('GPT' + chr(10) + 'touch PWNED_name #')} on 8 x ")
               for line in comments)
    assert not any(line.startswith("touch") for line in proc.stdout.splitlines())
    script = tmp_path / "run.sh"
    script.write_text(proc.stdout)
    assert subprocess.run([BASH, "-n", str(script)]).returncode == 0
    calls, argv = run_script(script, tmp_path)
    assert calls == ["torchrun"]
    assert argv == ["--nnodes", "1", "--nproc-per-node", "8", "pretrain_gpt.py",
                    *export_arguments(load_any(path))]


def test_spreadsheet_cells_never_start_a_formula():
    from core.util.text import spreadsheet_cell
    assert spreadsheet_cell('=HYPERLINK("http://x","y")') == '\'=HYPERLINK("http://x","y")'
    assert [spreadsheet_cell(v) for v in ("+1+2", "@SUM(A1)", "-x", "\tx")] == [
        "'+1+2", "'@SUM(A1)", "'-x", "'\tx"]
    assert [spreadsheet_cell(v) for v in ("-72.905", "+3", "GPT-3", 5, None)] == [
        "-72.905", "+3", "GPT-3", 5, None]


def test_validate_out_writes_a_formula_like_model_name_as_text(tmp_path):
    """A model name "=HYPERLINK(...)" in a measurement CSV was written into validate --out's
    CSV as it was: a spreadsheet opening that file ran it as a formula."""
    import csv
    from core.cli import main
    src = tmp_path / "runs.csv"
    src.write_text("name,gpu,num_layers,hidden_size,num_attention_heads,seq_length,vocab_size,"
                   "micro_batch_size,global_batch_size,data_parallel,precision,"
                   "measured_iteration_time_s\n"
                   '"=HYPERLINK(""http://evil.example"",""x"")",H100-SXM5-80GB,2,1024,16,2048,'
                   "50257,1,8,8,bf16,0.05\n")
    out = tmp_path / "rows.csv"
    assert main(["validate", str(src), "--out", str(out), "--json"]) == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert rows[0]["model"] == "'=HYPERLINK(\"http://evil.example\",\"x\")"
    assert rows[0]["error_percent"].startswith("-")  # numbers stay numbers
