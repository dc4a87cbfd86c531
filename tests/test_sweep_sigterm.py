"""A sweep with worker processes ends them with itself: SIGTERM of the command (a scheduler's
or ``kill``'s) cancels the sweep as Ctrl+C does, and a worker whose sweep process dies any
other way (SIGKILL) ends too. Before, only Ctrl+C was handled: a SIGTERM ended the command at
once and a worker in the middle of a chunk ran on (parent pid 1, 20 GB)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from core.io.session import save_session
from tests.conftest import ROOT
from tests.test_gpu_choice import HEADER, tiny_session

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")

#: The command, with every chunk sent to a worker made slow (it writes a file when it starts,
#: then sleeps two minutes): a worker is surely in the middle of a chunk when the signal comes.
SCRIPT = textwrap.dedent("""
    import sys, time
    import core.studies.sweep.run as run
    import core.studies.sweep.parallel as par
    run._PARALLEL_MIN_PLANS = 0          # this small sweep on the pool too
    real = par.solve_chunk
    def solve_chunk(*a, **k):
        open(sys.argv[1], "w").close()
        time.sleep(120)
        return real(*a, **k)
    solve_chunk.__module__, solve_chunk.__qualname__ = par.__name__, "solve_chunk"
    par.solve_chunk = solve_chunk        # what the pool's processes run (pickled by name)
    from core.cli import main
    sys.exit(main(sys.argv[2:]))
""")


def _start(tmp_path, args):
    cfg = tmp_path / "s.json"
    save_session(tiny_session("H100-SXM5-80GB"), cfg)
    marker = tmp_path / "worker-started"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(marker), "sweep", str(cfg),
                             *args(tmp_path), "--workers", "2", "--json"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline, "no worker started a chunk"
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children  # the pool's worker (and multiprocessing's resource tracker)
    return proc, children


def _alive(children) -> list:
    out = []
    for c in children:
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def _plain(tmp_path):
    return ["--max-gpus", "8"]


def _gpus_from(tmp_path):
    sheet = tmp_path / "p.csv"
    sheet.write_text(HEADER + "H100-SXM5-80GB,3.25,8,,test,2026-01-01\n")
    return ["--gpus-from", str(sheet)]


def _gone(children, wait_s: float = 5.0) -> bool:
    """Whether every process of ``children`` has ended within ``wait_s`` seconds."""
    deadline = time.time() + wait_s
    while _alive(children) and time.time() < deadline:
        time.sleep(0.05)
    return _alive(children) == []


@pytest.mark.parametrize("args", [_plain, _gpus_from], ids=["sweep", "gpus-from"])
def test_sigterm_cancels_the_sweep_and_ends_its_workers(tmp_path, args):
    proc, children = _start(tmp_path, args)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert "vtrain: sweep cancelled" in proc.stderr.read()
        assert _gone(children)
    finally:
        for c in _alive(children):
            c.kill()
        if proc.poll() is None:
            proc.kill()


def test_a_worker_ends_when_its_sweep_process_is_killed(tmp_path):
    """SIGKILL cannot be handled: the workers end by themselves (the kernel's parent-death
    signal, or their watchdog of their parent)."""
    proc, children = _start(tmp_path, _plain)
    try:
        proc.kill()
        proc.wait(timeout=10)
        assert _gone(children)
    finally:
        for c in _alive(children):
            c.kill()
