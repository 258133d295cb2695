"""The mechanism-test section of docs/study_a.md builds before its results exist (it says they
are not in yet) and once they are committed (it shows the verdict and the figure): its cell runs
in a real kernel as the docs build runs it. `docs_section`'s two cases on a record made here are
tested in tests/unit/analyses/studies/test_mechanism.py.
"""

from __future__ import annotations

from tests.docs.kernel import ROOT, code_cells, execute, machine_paths, output_texts, problems


def test_the_mechanism_cell_runs_with_or_without_the_committed_record(tmp_path, monkeypatch):
    cells = [
        c for c in code_cells(ROOT / "docs" / "study_a.md") if 'docs_section(RESULTS / "mechanism")' in c
    ]
    assert len(cells) == 1, "docs/study_a.md has one mechanism-test cell"
    # MyST's cell options (``:tags: [remove-input]``) are not Python.
    source = "\n".join(line for line in cells[0].splitlines() if not line.startswith(":"))
    notebook = execute([source], tmp_path, monkeypatch)
    assert not problems(notebook, machine_paths(tmp_path))
    text = "\n".join(t for _, _, t in output_texts(notebook))
    if (ROOT / "results" / "study-a" / "mechanism" / "summary.json").is_file():
        assert "Verdict under the preregistered rule" in text and "application/vnd.plotly" in str(
            [kind for _, kind, _ in output_texts(notebook)]
        )
    else:
        assert "results are not in yet" in text
