"""Results display themselves in Jupyter: executed in a real kernel (nbclient), a `Result` as the
last expression of a cell shows its table (text/html) and its figure (plotly's MIME bundle), and
the study-A explorer shows a plotly figure with a checkpoint slider.
"""

from __future__ import annotations

import json

from tests.docs.kernel import execute, machine_paths, problems

TRAIN = """
import plotly.io as pio
pio.renderers.default = "plotly_mimetype"  # what JupyterLab and VS Code use
from interp import TrainConfig, train
from models import build_model, preset_config
from tasks import MPSPTask

task = MPSPTask(r=0.9, vocab=8, n_train=256, n_val=64, n_adv=64)
model = build_model(preset_config("mpsp-2l2h", task), seed=0)
train("run", model, task, TrainConfig(epochs=12, eval_every=4, checkpoint_log_points=3, seed=0), progress=False)
"""
RESULT = """
from analyses import get_analysis, load_subject
fingerprint = get_analysis("fingerprint")
fingerprint.compute(load_subject("run"), fingerprint.params(split="adv"))
"""
EXPLORER = """
from analyses.studies.study_a.evolution import attention_explorer
attention_explorer("run")
"""
PLOTLY = "application/vnd.plotly.v1+json"


def _mimes(cell) -> list[str]:
    return [mime for output in cell.outputs for mime in output.get("data", {})]


def test_a_result_and_the_explorer_display_themselves(tmp_path, monkeypatch):
    notebook = execute([TRAIN, RESULT, EXPLORER], tmp_path, monkeypatch, timeout=600)
    assert not problems(notebook, machine_paths(tmp_path))
    _, result_cell, explorer_cell = notebook.cells

    mimes = _mimes(result_cell)
    assert "text/html" in mimes and PLOTLY in mimes, mimes
    assert mimes.index("text/html") < mimes.index(PLOTLY), "the table comes before the figure"
    html = next(o["data"]["text/html"] for o in result_cell.outputs if "text/html" in o.get("data", {}))
    assert html.startswith("<p><b>fingerprint at step 12") and "<table" in html
    assert html.count("<tr") == 1 + 4, "a header and one row per head (2 layers x 2 heads)"

    bundles = [o["data"][PLOTLY] for o in explorer_cell.outputs if PLOTLY in o.get("data", {})]
    assert len(bundles) == 1, _mimes(explorer_cell)
    figure = bundles[0] if isinstance(bundles[0], dict) else json.loads(bundles[0])
    steps = [step["label"] for step in figure["layout"]["sliders"][0]["steps"]]
    assert len(steps) >= 3 and len(figure["frames"]) == len(steps), "one slider step per checkpoint"
