"""The docs stay true to the code: analysis pages match the registry, every CLI command the docs
name exists, every error class has its section (tutorials execute in test_executed_tutorials.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import interp.errors as errors
from analyses.registry import REGISTRY
from interp.cli import cli

DOCS = Path(__file__).resolve().parents[2] / "docs"
TUTORIALS = sorted((DOCS / "tutorials").glob("*.md"))


def _load_extension():
    import importlib.util

    spec = importlib.util.spec_from_file_location("analysis_pages", DOCS / "_ext" / "analysis_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_registered_analysis_has_a_generated_page_and_no_other(tmp_path):
    pages = _load_extension().write_pages(tmp_path)
    assert sorted(pages) == sorted(REGISTRY)
    assert sorted(p.stem for p in tmp_path.glob("*.md") if p.stem != "index") == sorted(REGISTRY)
    for name in REGISTRY:
        text = (tmp_path / f"{name}.md").read_text()
        assert f"interp {name} --ckpt" in text and REGISTRY[name][1] in text


# Analyses whose pages state the method's definition and its reference (every analysis added
# with attribution, path patching, logit attribution and the progress measures does).
DEFINED = ("patch", "attribute", "path-patch", "dla", "fourier", "progress", "circuit")


@pytest.mark.parametrize("name", DEFINED)
def test_analysis_pages_state_definition_and_reference(name, tmp_path):
    from analyses import get_analysis

    analysis = get_analysis(name)
    assert analysis.definition.strip() and analysis.reference.strip(), name
    text = _load_extension().page(name)
    assert "## Definition" in text and analysis.definition in text
    assert f"**Reference:** {analysis.reference}" in text
    assert "SCIENCE" not in analysis.definition + analysis.reference, "docs cite no file outside the repo"


def test_every_command_the_docs_name_exists():
    known = set(cli.list_commands(None))  # built-in commands and the registry's analyses
    named = set()
    for path in [*DOCS.rglob("*.md"), DOCS.parent / "README.md"]:
        if "_build" in path.parts or path == DOCS / "cli.md":
            continue  # cli.md is generated from the commands themselves, and lists the moved spellings
        # Commands appear at the start of a shell line or an inline code span.
        named |= set(re.findall(r"(?:^|`|bin/)interp ([a-z][a-z0-9-]+)", path.read_text(), re.MULTILINE))
    assert named, "the docs name no command at all?"
    assert named <= known, f"docs name commands that do not exist: {sorted(named - known)}"


def test_every_error_class_has_a_section_on_the_errors_page():
    text = (DOCS / "errors.md").read_text()
    classes = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, Exception) and c.__module__ == errors.__name__
    ]
    assert len(classes) >= 5
    for cls in classes:
        anchor = getattr(cls, "anchor", cls.__name__.lower())
        assert f"({anchor})=" in text and f"## {cls.__name__}" in text, cls.__name__


SUBMODULE_IMPORT = re.compile(r"^\s*(?:from\s+interp\.[\w.]+\s+import|import\s+interp\.)", re.MULTILINE)


@pytest.mark.parametrize("path", [*TUTORIALS, DOCS.parent / "README.md"], ids=lambda p: p.stem)
def test_tutorials_and_readme_import_interp_only_from_its_root(path):
    # `import interp` / `from interp import ...` is the notebook surface; submodule paths are
    # the layout, free to change.
    offenders = [line.strip() for line in SUBMODULE_IMPORT.findall(path.read_text())]
    assert not offenders, f"{path.name}: {offenders}"


def test_every_public_name_of_interp_and_its_subpackages_resolves_without_torch_until_used():
    import importlib
    import subprocess

    code = (
        "import sys, interp, interp.store, interp.training, interp.dissect, interp.wlmd, interp.sweep\n"
        "assert 'torch' not in sys.modules, 'importing the packages imported torch'\n"
        "for pkg in (interp, interp.store, interp.training, interp.dissect, interp.wlmd, interp.sweep):\n"
        "    assert set(pkg.__all__) <= set(dir(pkg))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for package in (
        "interp",
        "interp.store",
        "interp.training",
        "interp.dissect",
        "interp.wlmd",
        "interp.sweep",
    ):
        module = importlib.import_module(package)
        missing = [name for name in module.__all__ if getattr(module, name, None) is None]
        assert not missing, f"{package}: {missing}"


def _cli_page():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_page", DOCS / "_ext" / "cli_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_page_documents_every_command_and_option():
    import click

    cli_page = _cli_page()
    text = cli_page.page()
    ctx = click.Context(cli, info_name="interp")
    for name, command in cli_page.commands(cli, ctx):
        if name.split()[1] in REGISTRY:
            continue  # each analysis has its own generated page
        assert f"## `{name}`" in text, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert f"`{param.opts[0]}`" in text, f"{name} {param.opts[0]}"


def test_study_as_rates_table_is_the_report_of_the_committed_results():
    """docs/study_a.md quotes `interp report results/study-a` as it stands: the committed records
    and the page cannot drift apart (rebuild the table with `rate_markdown` after exporting runs).
    """
    from analyses.report.records import rate_markdown

    assert rate_markdown(DOCS.parent / "results" / "study-a") in (DOCS / "study_a.md").read_text()


def test_the_splits_page_says_the_consistent_count_rounds_half_to_even():
    from tasks import MPSPTask

    text = (DOCS / "concepts" / "splits.md").read_text()
    assert "half to even" in text and "`r = 0.5` with `n_train = 5` gives 2" in text
    assert "`n_train = 7`, 4" in text
    # ... as the code does: 2.5 -> 2 and 3.5 -> 4
    assert MPSPTask(r=0.5, n_train=5).n_consistent_train == 2
    assert MPSPTask(r=0.5, n_train=7).n_consistent_train == 4


def test_an_incremental_build_redraws_the_pages_that_read_new_records(tmp_path):
    """After new records land in results/, the pages drawn from them are re-read and their cached
    executions dropped; the other pages, and a build with unchanged records, are left alone.
    """
    import runpy
    from types import SimpleNamespace

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    conf = runpy.run_path(str(DOCS / "conf.py"))
    module = conf["_check_results"].__globals__  # the functions' own namespace
    root = tmp_path / "repo"
    (root / "results" / "study-a").mkdir(parents=True)
    (root / "results" / "study-a" / "DONE").write_text("{}")
    pages = {"study": root / "study.md", "other": root / "other.md"}
    pages["study"].write_text("load_results(RESULTS / 'headline')")
    pages["other"].write_text("no records here")
    cache = tmp_path / ".jupyter_cache"
    store = get_cache(str(cache))
    for page in pages.values():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(page.read_text(), execution_count=1)])
        store.cache_notebook_bundle(CacheBundleIn(nb, str(page)), check_validity=False)
    config = SimpleNamespace(nb_execution_mode="cache", nb_execution_cache_path=str(cache))
    app = SimpleNamespace(outdir=str(tmp_path / "html"), _warncount=0)
    (tmp_path / "html").mkdir()
    env = SimpleNamespace(found_docs={"study", "other"}, doc2path=lambda doc: pages[doc])
    saved = module["ROOT"]
    module["ROOT"] = root
    try:

        def build() -> list[str]:
            conf["_check_results"](app, config)
            outdated = conf["_pages_reading_results"](app, env, set(), set(), set())
            conf["_stamp_results"](app, None)
            return outdated

        assert build() == ["study"]  # the first build: no stamp yet
        assert [r.uri for r in store.list_cache_records()] == [str(pages["other"])]
        assert build() == []  # nothing changed since
        (root / "results" / "study-a" / "DONE").write_text('{"epochs": 3000}')
        app._warncount = 1  # a build that warned (failed under -W) ...
        assert build() == ["study"]
        app._warncount = 0
        assert build() == ["study"]  # ... leaves the page to be read again
        assert build() == []
    finally:
        module["ROOT"] = saved


REMEASURED_ON_THE_REPLACEMENT_MACHINE = {2}
"""Seeds whose protocol-4 injections ran on the machine that replaced the first (2026-12-04, 22:00 UTC)."""


@pytest.mark.parametrize(
    "records, page, kind",
    [
        ("protocol-2", "study_b_history.md", "difference"),
        ("protocol-2-remeasured", "study_b_history.md", "retention"),
        ("protocol-3", "study_b_history.md", "difference"),
        ("protocol-4", "study_b_history.md", "difference"),
        ("protocol-5", "study_b_history.md", "difference"),
        ("protocol-6", "study_b.md", "retention"),
        ("protocol-6", "study_b.md", "difference"),
    ],
)
def test_study_bs_tables_are_the_ones_the_committed_records_rebuild(records, page, kind):
    """docs/study_b.md quotes protocol 6's tables as `interp study-b records
    results/study-b/protocol-6` prints them; the history page quotes each earlier protocol's
    paired differences (the rule's input; protocol 2's re-measured seed has its retention rows
    only). Re-export and paste the tables again when records change.
    """
    from analyses.studies.study_b.tables import markdown_tables

    tables = markdown_tables(DOCS.parent / "results" / "study-b" / records).split("\n\n")
    assert tables[0].startswith("| noise |") and re.search(r"^\| random \| \d+ \|", tables[0], re.M)
    wanted = [
        t
        for t in tables
        if t.startswith("| noise |") and ("WLMD - AdamW" in t.splitlines()[0]) == (kind == "difference")
    ]
    assert wanted, kind
    text = (DOCS / page).read_text()
    for table in wanted:
        assert table in text, table.splitlines()[0]


def test_protocol_4_repeats_protocol_3_for_every_seed_whose_walk_ended_before_protocol_3s_budget():
    """Protocol 4 only raises protocol 3's budget, so a seed whose protocol-3 walk ended before
    that budget walked the same walk under both: its committed rows must be equal. Every
    seed's AdamW rows must be equal in both.
    """
    import pandas as pd

    from analyses.studies.study_b.settings import PRESETS

    base = DOCS.parent / "results" / "study-b"
    budget = PRESETS["protocol-3"].wlmd.budget()
    walks = pd.read_csv(base / "protocol-3" / "study_b_wlmd.csv")
    ended = set(walks.loc[walks["walk_steps"] < budget, "seed"])
    runs = {name: pd.read_csv(base / name / "study_b_runs.csv") for name in ("protocol-3", "protocol-4")}
    both = sorted(ended & set(runs["protocol-4"]["seed"]))
    assert both, "no seed to compare: protocol 4 has no record of a walk that ended early"
    for seed in both:
        rows = [frame[frame["seed"] == seed].reset_index(drop=True) for frame in runs.values()]
        pd.testing.assert_frame_equal(*rows)
    # Every seed starts from the same AdamW model under both, so on one machine its AdamW
    # injections are the same. Seed 2's protocol-4 injections ran on the machine that replaced
    # the first one, which rounds float32 otherwise: the same model, other numbers (the page
    # history page says so and quotes both).
    page = re.sub(r"\s+", " ", (DOCS / "study_b_history.md").read_text())
    for seed in sorted(set(runs["protocol-3"]["seed"]) & set(runs["protocol-4"]["seed"])):
        rows = [
            frame[(frame["seed"] == seed) & (frame["model"] == "adamw")].reset_index(drop=True)
            for frame in runs.values()
        ]
        assert len(rows[0]) == 3, seed
        if seed not in REMEASURED_ON_THE_REPLACEMENT_MACHINE:
            pd.testing.assert_frame_equal(*rows)
            continue
        same = ["seed", "model", "noise", "test_acc_before", "source"]
        pd.testing.assert_frame_equal(rows[0][same], rows[1][same])  # the same model injected
        random = [f"{frame.loc[frame['noise'] == 'random', 'test_acc_after'].item():.3f}" for frame in rows]
        assert f"kept {random[1]} of the task there and {random[0]} on the machine" in page


def test_protocol_3s_decision_is_the_one_the_committed_pilots_give():
    """docs/study_b_history.md names the variant that `decide_cover` takes from the committed
    pilot records, and quotes each recorded variant's coverage step.
    """
    from analyses.studies.study_b.diagnostics.cover import cover_table, decide_cover

    table = cover_table(DOCS.parent / "results" / "study-b" / "pilots" / "cover")
    adopted, _ = decide_cover(table)
    page = (DOCS / "study_b_history.md").read_text()
    assert f"**Decision: protocol 3 takes `{adopted}`.**" in page
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `")}
    for variant, step in zip(table["variant"], table["covered x at step"]):
        quoted = "**never**" if step == float("inf") else f"**{step:,.0f}**"
        assert quoted in rows[f"`{variant}`"], variant


def test_protocol_3s_preset_is_the_pilots_choice_with_the_documented_targets():
    """The `protocol-3` preset walks as the variant the committed pilots chose, on the pilots'
    starting settings otherwise, and docs/study_b_history.md states the targets and budget it holds.
    """
    from analyses.studies.study_b.diagnostics.cover import COVER_VARIANTS, cover_table, decide_cover
    from analyses.studies.study_b.settings import PRESETS

    adopted, _ = decide_cover(cover_table(DOCS.parent / "results" / "study-b" / "pilots" / "cover"))
    walk, before = PRESETS["protocol-3"].wlmd, PRESETS["protocol-2"].wlmd
    for name, value in next(v for v in COVER_VARIANTS if v.name == adopted).overrides:
        assert getattr(walk, name) == value, name
    page = (DOCS / "study_b_history.md").read_text()
    section = page[page.index("## Protocol 3: fixed before its seeds run") :]
    assert f"| entropy steps, at least | {before.steps:,} | {walk.steps:,} |" in section
    assert f"| step budget | {before.budget():,} | {walk.budget():,} |" in section
    assert f"ln f has been halved {walk.target_halvings} times |" in section
    assert f"its cosine is ≤ {walk.target_cosine}" in section
