"""``vtrain gui --screenshot`` with a session whose profile store cannot be read: bad input,
so exit status 2 and one line naming the file, the field and the rule (as ``simulate``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT


@pytest.mark.parametrize("store", ["garbage", None])  # a file that is not a store; no file
def test_screenshot_with_a_bad_store_exits_2_naming_it(tmp_path, store):
    doc = json.loads((EXAMPLES / "gpt3_1.3b_single_node.json").read_text())
    h5 = tmp_path / "store.h5"
    if store is not None:
        h5.write_text(store)
    doc["cluster"]["profile_path"] = str(h5)
    session = tmp_path / "session.json"
    session.write_text(json.dumps(doc))
    out = tmp_path / "shot.png"
    proc = subprocess.run([sys.executable, "-m", "core.cli", "gui", str(session),
                           "--screenshot", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("vtrain")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert str(session) in lines[0] and "cluster.profile_path" in lines[0] and str(h5) in lines[0]
    assert not out.exists()
    # the command line says the same about the same file
    sim = subprocess.run([sys.executable, "-m", "core.cli", "simulate", str(session)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert sim.returncode == 2 and lines[0].split(": ", 1)[1] in sim.stderr
