"""Sphinx configuration of the `interp` docs (built offline by `make docs`, warnings as errors)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "interp"
author = "the interp developers"
extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "analysis_pages",  # docs/_ext: one page per registered analysis, generated from the registry
    "cli_page",  # docs/_ext: docs/cli.md, generated from the click group
]
html_theme = "furo"
html_title = "interp"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "README.md"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type"]

# The kernels inherit two settings. TransformerLens imports tqdm.auto, which warns at import in
# a kernel without ipywidgets ("IProgress not found"), and its patching functions draw progress
# bars: on a static page both are stderr noise (with a path of the building machine in the
# warning), so the warning is filtered and progress bars are off (tqdm reads TQDM_DISABLE).
os.environ["PYTHONWARNINGS"] = ",".join(
    filter(None, [os.environ.get("PYTHONWARNINGS"), "ignore:IProgress not found"])
)
os.environ["TQDM_DISABLE"] = "1"

# Tutorials are executed at build time; INTERP_DOCS_TINY=1 (set by the test suite) shrinks them.
nb_execution_mode = os.environ.get("INTERP_DOCS_EXECUTE", "cache")
nb_execution_timeout = 900
nb_execution_in_temp = True  # tutorials write runs/ and out/: keep them out of the source tree
nb_execution_raise_on_error = True
nb_execution_show_tb = True

autosummary_generate = True  # docs/api.md: one page per module, recursively
autosummary_imported_members = False
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Attributes sections as fields of their class: as directives they would describe each dataclass
# field a second time beside autodoc's own entry (duplicate object warnings).
napoleon_use_ivar = True
nitpicky = False


# plotly's "notebook" renderer (the tutorials' figures) puts a MathJax <script> from a CDN before
# every figure. Our figures use no TeX, and the docs must work offline (a failed load is a
# console error on every page with a figure), so the built pages drop it.
_PLOTLY_MATHJAX = re.compile(
    r'<script src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]+"></script>'
)


def _offline_figures(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = _PLOTLY_MATHJAX.sub("", context["body"])


def setup(app) -> None:
    """Connect the page hook above (Sphinx calls `setup` of conf.py like an extension's)."""
    app.connect("html-page-context", _offline_figures)
