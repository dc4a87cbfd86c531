"""File > Open of the third round's bad inputs shows a message and leaves the open session alone.

Before, an authors' config with ``inter_node_bandwidth: null`` (TypeError) and a session whose
``profile_path`` names an unknown ``~user`` (RuntimeError) escaped ``open_path`` with no
message box; the core now raises its input errors for them and for the kind.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from core.io.session import load_any
from tests.conftest import CASES, EXAMPLES

EXAMPLE = EXAMPLES / "gpt3_1.3b_single_node.json"


def _case(name: str, tmp_path):
    src = CASES / "s3" / name
    if not os.path.lexists(src):
        pytest.skip(f"shared case not present: {src}")
    dst = tmp_path / name
    shutil.copy2(src, dst, follow_symlinks=False)
    return dst


def _session_with(tmp_path, name: str, profile_path=None, tensor_parallel=None):
    """The example with ``profile_path``, or with the number literal ``tensor_parallel``
    (text: json.dumps would not write 5,000 digits)."""
    doc = json.loads(EXAMPLE.read_text())
    if profile_path is not None:
        doc["cluster"]["profile_path"] = profile_path
    if tensor_parallel is not None:
        doc["plan"]["tensor_parallel"] = "@@NUMBER@@"
    path = tmp_path / name
    path.write_text(json.dumps(doc).replace('"@@NUMBER@@"', str(tensor_parallel)))
    return path


@pytest.mark.parametrize("make, field", [
    (lambda t: _case("crash_bigint_tensor_parallel.json", t), "plan.tensor_parallel"),
    (lambda t: _case("crash_profile_path_tilde_nouser.json", t), "cluster.profile_path"),
    (lambda t: _case("crash_authors_inter_node_bandwidth_null.json", t), "inter_node_bandwidth"),
    (lambda t: _session_with(t, "nul.json", profile_path="a\0b.h5"), "cluster.profile_path"),
    (lambda t: _session_with(t, "digits.json", tensor_parallel="9" * 5000),
     "plan.tensor_parallel"),
], ids=["bigint", "tilde", "authors-null", "nul-byte", "5000-digits"])
def test_opening_a_refused_file_shows_the_error_and_keeps_the_session(
        window, opened, tmp_path, message_boxes, make, field):
    bad = make(tmp_path)
    on_disk, edited = opened.read_bytes(), window.session().to_dict()
    assert not window.open_path(bad)
    (_, title, text), = message_boxes.of_kind("critical")
    assert str(bad) in text and field in text
    assert window.path == opened and window.isWindowModified()
    assert window.session().to_dict() == edited
    assert opened.read_bytes() == on_disk
    assert window.save_to(opened)  # Save writes the session shown, to its own file
    assert load_any(opened).to_dict() == edited
