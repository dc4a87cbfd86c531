"""The architecture is checked, not hoped for: layered packages, no import circle, documented packages.

docs/architecture.md draws the layers; pyproject.toml holds import-linter's contracts (after
napari's). grimp and import-linter come with the test extra (``pip install -e .[test]``), so
these tests run, never skip.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

from tests.conftest import ROOT

#: core's packages, lowest layer first (pyproject.toml's "layers" contract, read from the top).
LAYERS = ["core.util", "core.schedules", "core.plan", "core.model", "core.store", "core.sim",
          "core.io", "core.accuracy", "core.profiling", "core.studies", "core.cli"]


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("core", "vtrain_gui", cache_dir=None)


def test_import_contracts():
    """lint-imports keeps every contract of pyproject.toml (headless core, torch only in
    profiling, the layers) on this checkout's code."""
    lint = Path(sys.executable).parent / "lint-imports"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "core's packages are layers" in proc.stdout and "BROKEN" not in proc.stdout


def test_no_import_circle_anywhere():
    """No module reaches itself through imports, lazy ones inside functions included."""
    g = _graph()
    edges = [(m, i) for m in g.modules for i in g.find_modules_directly_imported_by(m)]
    circles = [sorted(c) for c in nx.strongly_connected_components(nx.DiGraph(edges)) if len(c) > 1]
    assert circles == []


def test_the_layer_checker_sees_a_planted_upward_import():
    """The layers contract is not vacuous: grimp finds a real lower -> higher chain once one is
    planted (core.util importing core.sim), and none today."""
    g = _graph()
    assert g.find_shortest_chain(importer="core.util.atomic", imported="core.sim.simulate") is None
    g.add_import(importer="core.util.atomic", imported="core.sim.simulate")
    assert g.find_shortest_chain(importer="core.util.atomic", imported="core.sim.simulate") is not None


@pytest.mark.parametrize("package", LAYERS)
def test_every_package_says_what_belongs_there(package):
    init = ROOT / Path(*package.split(".")) / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.split()) >= 15, f"{init}: the package docstring says what belongs there"


def test_the_packages_are_the_layers():
    """Every package directly under core is one layer of the contract (a new package gets a
    place in the layers, not a pass)."""
    found = {f"core.{p.name}" for p in (ROOT / "core").iterdir()
             if (p / "__init__.py").exists()}
    assert found == set(LAYERS)
    text = (ROOT / "pyproject.toml").read_text()
    for layer in LAYERS:
        assert f'"{layer}' in text or f"| {layer}" in text, layer


def test_the_cli_runs_from_a_fresh_interpreter():
    """The package layout installs as one console script; ``python -m core.cli --help`` works."""
    proc = subprocess.run([sys.executable, "-m", "core.cli", "--help"], cwd=ROOT,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and proc.stdout.startswith("usage: vtrain")


def test_every_user_error_the_cli_names_exists():
    """The CLI's bad-input exceptions are named by module and class (so that reporting one
    imports nothing): each name must resolve, or a moved class would become a traceback."""
    import importlib

    from core.cli import USER_ERRORS
    for module, name in USER_ERRORS:
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type) and issubclass(cls, Exception), (module, name)


def test_no_private_name_is_imported_from_another_module():
    """A name another module needs is public where it belongs (STYLE.md: "Private names
    imported across modules"): no ``from core.x import _name`` in core or the window."""
    found = []
    for root in ("core", "vtrain_gui"):
        for path in (ROOT / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0]
                                                         in ("core", "vtrain_gui")):
                    found += [f"{path.relative_to(ROOT)}: {a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []
