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
# The docs and the generated CLI page list the built-in tasks, presets and analyses only: no
# plugin the building machine happens to have installed (`interp.plugins`).
os.environ["INTERP_NO_PLUGINS"] = "1"

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


# The study pages draw their tables and figures from the committed records under results/.
# Sphinx re-reads a page only when its source changed, and jupyter-cache keys a page on its code
# cells only, so after new records are exported an incremental build would show the old
# figures. When results/ changed since the last build, the pages that read it are re-read and
# their cached executions dropped (every other page stays as built).
def _results_digest() -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((ROOT / "results").rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _results_stamp(app) -> Path:
    return Path(app.outdir) / ".results.sha256"


def _reads_results(path: Path) -> bool:
    return path.exists() and re.search(r"RESULTS|results/", path.read_text(errors="replace")) is not None


def _check_results(app, config) -> None:
    stamp = _results_stamp(app)
    app.interp_results_digest = _results_digest()
    app.interp_results_changed = not stamp.exists() or stamp.read_text() != app.interp_results_digest
    cache = Path(config.nb_execution_cache_path or Path(app.outdir).parent / ".jupyter_cache")
    if app.interp_results_changed and config.nb_execution_mode == "cache" and cache.is_dir():
        from jupyter_cache import get_cache

        store = get_cache(str(cache))
        for record in store.list_cache_records():
            if _reads_results(Path(record.uri)):
                store.remove_cache(record.pk)


def _pages_reading_results(app, env, added, changed, removed) -> list[str]:
    if not app.interp_results_changed:
        return []
    return sorted(doc for doc in env.found_docs if _reads_results(Path(env.doc2path(doc))))


def _stamp_results(app, exception) -> None:
    # Only after a clean build: with -W a warning fails the build after this event, and a
    # stamp written then would let the next build skip the page that warned. (Sphinx keeps the
    # count in `_warncount`; without it, no stamp, so the pages are simply read again.)
    if exception is None and getattr(app, "_warncount", 1) == 0:
        _results_stamp(app).write_text(app.interp_results_digest)


def setup(app) -> None:
    """Connect the hooks above (Sphinx calls `setup` of conf.py like an extension's)."""
    app.connect("html-page-context", _offline_figures)
    app.connect("config-inited", _check_results)
    app.connect("env-get-outdated", _pages_reading_results)
    app.connect("build-finished", _stamp_results)
