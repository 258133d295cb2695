"""Sphinx extension: one docs page per registered analysis, generated from the registry.

Nothing about an analysis is written by hand twice: its summary, parameters (from the `Params`
dataclass fields and their help texts), CLI and Python examples and result fields all come from
`analyses.registry.REGISTRY` and the modules it names. The pages are written into
`docs/analyses/` (git-ignored) when the build starts.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the page generator itself runs without Sphinx (the tests use it)
    from sphinx.application import Sphinx


def page(name: str) -> str:
    """The MyST markdown page of analysis `name`."""
    from analyses import get_analysis
    from analyses.base import Result, param_help

    analysis = get_analysis(name)
    helps = param_help(analysis.params)
    rows = "\n".join(
        f"| `--{f.name.replace('_', '-')}` | `{f.default!r}` | {helps[f.name]} |"
        for f in dataclasses.fields(analysis.params)
    )
    example = " ".join(
        f"--{f.name.replace('_', '-')} {f.default}" for f in dataclasses.fields(analysis.params)[:2]
    )
    base = {f.name for f in dataclasses.fields(Result)}
    result_fields = ", ".join(
        f"`{f.name}`" for f in dataclasses.fields(analysis.result) if f.name not in base
    )
    module = analysis.compute.__module__
    doc = inspect.getdoc(analysis.result) or ""
    return f"""# `{name}`

{analysis.summary}
{_definition(analysis)}
## From the command line

```bash
interp {name} --ckpt runs/x {example}
```

`--ckpt` takes a run folder (its latest checkpoint) or a checkpoint folder. The result is saved
to `--out` (default `RUN/analyses/{name}/step_N/`): `result.json`, `tensors.safetensors` and
`figure.html`; a table of the largest effects is printed.

| option | default | meaning |
|---|---|---|
{rows}

## From Python

```python
from analyses import get_analysis, load_subject

{name} = get_analysis("{name}")
result = {name}.compute(load_subject("runs/x"), {name}.params())
result.to_frame()   # a pandas DataFrame
result.figure()     # a plotly figure
result.save("out/{name}")
```

Over every checkpoint of a run: `interp evolve --run runs/x --analysis {name}`; over some of
them, `--checkpoints 100-300` (a range, steps, or both: `0,100-300`), from Python
`analyses.evolve("runs/x", "{name}", checkpoints="100-300")`.

## Result

`{analysis.result.__name__}` ({result_fields}).

{doc}

Implementation: `{module}`.
"""


def _definition(analysis) -> str:  # noqa: ANN001 - an analyses.base.Analysis
    """The page's "Definition" section (what the analysis computes, and the papers that define it)."""
    if not analysis.definition:
        return ""
    reference = f"\n\n**Reference:** {analysis.reference}" if analysis.reference else ""
    scope = f"\n\nApplies to models: {', '.join(analysis.models)}" + (
        f"; tasks: {', '.join(analysis.tasks)}." if analysis.tasks else "."
    )
    return f"\n## Definition\n\n{analysis.definition}{reference}{scope}\n"


def write_pages(folder: Path) -> list[str]:
    """Write one page per registered analysis and an index into `folder`; return the names."""
    from analyses.registry import REGISTRY

    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.md"):
        stale.unlink()
    for name in REGISTRY:
        (folder / f"{name}.md").write_text(page(name))
    listing = "\n".join(f"{name}" for name in REGISTRY)
    table = "\n".join(f"| [`{name}`]({name}.md) | {summary} |" for name, (_, summary) in REGISTRY.items())
    (folder / "index.md").write_text(
        "# Analyses\n\nEvery analysis registered in `analyses.registry`, generated from it.\n\n"
        f"| analysis | what it measures |\n|---|---|\n{table}\n\n```{{toctree}}\n:hidden:\n\n{listing}\n```\n"
    )
    return list(REGISTRY)


def _generate(app: Sphinx) -> None:
    write_pages(Path(app.srcdir) / "analyses")


def setup(app: Sphinx) -> dict:
    """Register the page generator with Sphinx."""
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "version": "1"}
