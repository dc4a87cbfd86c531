"""Shared test helpers and paths."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from types import ModuleType
from pathlib import Path

import pytest

# The parsed profile-store cache (core.store.image.image_cache_dir) of this test run: a
# fresh folder, so tests never read or write the user's cache (the cache's own tests set
# VTRAIN_CACHE_DIR themselves).
_CACHE = tempfile.mkdtemp(prefix="vtrain-test-cache-")
os.environ["VTRAIN_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "vtrain-a100"
EXAMPLES = ROOT / "resources" / "examples"
CASES = ROOT.parent / "shared" / "cases"


def case_file(name: str) -> Path:
    """A handed case under ../shared/cases, skipping the test when the checkout lacks it."""
    path = CASES / name
    if not path.exists():
        pytest.skip(f"shared case not present: {path}")
    return path


def shared_file(*parts: str) -> Path:
    """A file under ../shared/data/vtrain-a100, skipping the test when the checkout lacks it."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not present: {path}")
    return path



def load_module(path: Path) -> ModuleType:
    """A script of scripts/ or benchmarks/ (no packages) as a module, registered in
    ``sys.modules`` under its file's stem (dataclasses of the module need that)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod
