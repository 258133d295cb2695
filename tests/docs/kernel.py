"""Run code cells as a notebook in a real Jupyter kernel (nbclient), as the docs build does,
and find what a reader must never see in the outputs: errors, warnings, tracebacks and paths
of the machine that ran them.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n(.*?)```", re.DOTALL)
# What the docs build sets for its kernels (docs/conf.py): TransformerLens's tqdm.auto import
# warns in a kernel without ipywidgets, and its patching functions draw progress bars.
KERNEL_ENV = {"PYTHONWARNINGS": "ignore:IProgress not found", "TQDM_DISABLE": "1"}
_NOISE = re.compile(r"Traceback \(most recent call last\)|\w+(Warning|Error): ")


def code_cells(path: Path) -> list[str]:
    """The code cells of a MyST notebook (docs/tutorials/*.md)."""
    return CODE_CELL.findall(path.read_text())


def execute(cells: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, timeout: int = 900):
    """Execute `cells` in a fresh python3 kernel started in `cwd`; return the executed notebook."""
    import nbclient  # the test extra: a missing one is a failure, not a skip
    import nbformat

    for name, value in KERNEL_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("INTERP_DOCS_TINY", "1")
    # The kernel imports this checkout, wherever pytest was started from.
    monkeypatch.setenv("PYTHONPATH", ":".join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = nbclient.NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()
    return notebook


def output_texts(notebook) -> list[tuple[int, str, str]]:
    """(cell index, kind, text) of every output: stream name or MIME type, and its text."""
    found = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream":
                found.append((index, output["name"], output["text"]))
            elif output["output_type"] == "error":
                found.append((index, "error", f"{output['ename']}: {output['evalue']}"))
            else:
                for mime, data in output.get("data", {}).items():
                    found.append((index, mime, data if isinstance(data, str) else str(data)))
    return found


def problems(notebook, machine_paths: list[str]) -> list[str]:
    """What must not show on a docs page: errors, anything on stderr, warnings or tracebacks in
    text, and paths of the machine (its checkout, temporary folder, environment, home).
    """
    found = []
    for index, kind, text in output_texts(notebook):
        if kind in ("error", "stderr"):
            found.append(f"cell {index} {kind}: {text[:300]}")
        elif kind in ("stdout", "text/plain") and _NOISE.search(text):
            found.append(f"cell {index} {kind} shows a warning or traceback: {text[:300]}")
        for path in machine_paths:
            if path and path in text:
                found.append(f"cell {index} {kind} shows the path {path!r}")
    return found


def machine_paths(cwd: Path) -> list[str]:
    """Paths of this machine that a page must never show."""
    return [
        str(ROOT),
        str(cwd),
        sys.prefix,
        str(Path.home()) + "/",
        "site-packages",
        tempfile.gettempdir() + "/",
    ]
