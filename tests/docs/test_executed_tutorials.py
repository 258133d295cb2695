"""Every tutorial executes in a real kernel at tiny scale, as the docs build runs it, and its
outputs show no error, warning, traceback or path of the machine that ran it.
"""

from __future__ import annotations

import pytest

from tests.docs.kernel import ROOT, code_cells, execute, machine_paths, problems

TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
# The two that train most (over 40 s each on 2 cores) run in `make test-slow`, which CI also
# runs; the docs build executes every tutorial again.
SLOW = {"study_a", "llc"}


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in SLOW else []) for p in TUTORIALS],
)
def test_tutorial_executes_and_its_outputs_are_clean(path, tmp_path, monkeypatch):
    cells = code_cells(path)
    assert cells, f"{path.name} has no code cells"
    notebook = execute(cells, tmp_path, monkeypatch)
    found = problems(notebook, machine_paths(tmp_path))
    assert not found, f"{path.name}:\n" + "\n".join(found)


def test_the_kernels_here_get_the_docs_builds_settings():
    from tests.docs.kernel import KERNEL_ENV

    conf = (ROOT / "docs" / "conf.py").read_text()
    for name, value in KERNEL_ENV.items():
        assert f'os.environ["{name}"]' in conf and f'"{value}"' in conf, name
