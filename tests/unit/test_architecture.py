"""The package layout of DESIGN.md: import direction, and packages resolved from this checkout."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> top-level packages it must never import
FORBIDDEN = {
    "interp": {"models", "tasks", "analyses"},
    "models": {"tasks", "analyses"},
    "tasks": {"models", "analyses"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_direction(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[:2] == ("interp", "cli"):
            continue  # the composition root
        bad = _imports(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{relative} imports {sorted(bad)}")
    assert not offenders, offenders


@pytest.mark.parametrize("package", ["interp", "models", "tasks", "analyses"])
def test_packages_resolve_inside_the_checkout(package):
    # `models` and `tasks` are generic names: an unrelated installed package must not shadow them.
    module = importlib.import_module(package)
    assert Path(module.__file__).resolve().is_relative_to(ROOT / package)
