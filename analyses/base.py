"""Analysis results and the analysis registry entry type.

Every analysis (docs/architecture.md) is a frozen `Params` dataclass, a pure compute function
`(subject, params) -> Result`, and a `Result` with `to_frame()`, `figure()`, `save(dir)` and
`load(dir)`. This module holds what they share:

* `Result`: subclass it as a frozen dataclass whose fields are tensors or JSON values
  (numbers, strings, lists, dicts). `save` writes `result.json` (the JSON fields, the params,
  a format version, the tensors' digest), `tensors.safetensors` (the tensor fields) and
  `figure.html`; `load` reads them back without unpickling anything, and refuses tensors that
  are not the ones the JSON was written with.
* `param(default, help)` (from `interp.config`): a field whose help text becomes the CLI's `--help`.
* `Analysis`: one registry entry; the registry itself is `analyses.registry.REGISTRY`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import safetensors.torch
import torch
from torch import Tensor

from interp.config import param, param_help
from interp.errors import CheckpointError, FormatVersionError
from interp.store.atomic import atomic_write_bytes, atomic_write_json

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

__all__ = ["Analysis", "Result", "param", "param_help", "RESULT_FILE", "FIGURE_FILE", "TENSORS_FILE"]

RESULT_FORMAT_VERSION = 1
RESULT_FILE, TENSORS_FILE, FIGURE_FILE = "result.json", "tensors.safetensors", "figure.html"
R = TypeVar("R", bound="Result")


@dataclass(frozen=True)
class Result:
    """Base class of analysis results (subclass as a frozen dataclass).

    Attributes:
        params: The analysis parameters, as a JSON dict (so the result says how it was made).
        step: Training step of the analysed checkpoint, if known.
    """

    analysis: ClassVar[str] = ""
    params: dict[str, Any]
    step: int | None

    def to_frame(self) -> pd.DataFrame:
        """The result as a tidy table (one row per measured quantity)."""
        raise NotImplementedError

    def figure(self) -> go.Figure:
        """The result as a plotly figure (never shown by the library)."""
        raise NotImplementedError

    def caption(self) -> str:
        """One line naming the result: the analysis, the step, the parameters."""
        step = "" if self.step is None else f" at step {self.step:,}"
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.analysis or type(self).__name__}{step} ({params})"

    def _repr_html_(self) -> str:
        """The caption and the table (first 30 rows): how Jupyter and HTML exporters show a result."""
        import html

        frame = self.to_frame()
        more = f"<p><small>{len(frame) - 30} more rows: .to_frame()</small></p>" if len(frame) > 30 else ""
        return (
            f"<p><b>{html.escape(self.caption())}</b></p>"
            + frame.head(30).to_html(index=False, float_format=lambda v: f"{v:.4g}")
            + more
        )

    def _ipython_display_(self) -> None:
        """In IPython / Jupyter, a result as the last expression of a cell shows its table, then
        its figure (in whatever renderer the notebook chose: the library never sets one).
        """
        from IPython.display import HTML, display

        display(HTML(self._repr_html_()))
        display(self.figure())

    def table(self, rows: int = 12) -> str:
        """A compact text table for the CLI (the first `rows` rows of `to_frame`)."""
        return self.to_frame().head(rows).to_string(index=False, float_format=lambda v: f"{v:.4g}")

    def save(self, folder: str | Path, *, figure: bool = True, durable: bool = True) -> Path:
        """Write `result.json`, `tensors.safetensors` and (if `figure`) `figure.html` into `folder`.

        The figure's plotly.js goes beside it once (`plotly.min.js`), so the folder works
        offline; caches of many results (`analyses.evolution`) skip the figure, and the fsyncs
        (`durable=False`: a power cut may lose a cached result, which `load` then refuses and the
        cache recomputes; see `interp.store.atomic`).
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        # Private copies: safetensors refuses fields that share memory (e.g. two views of one NaN tensor).
        tensors = {
            k: v.detach().cpu().clone(memory_format=torch.contiguous_format)
            for k, v in values.items()
            if isinstance(v, Tensor)
        }
        data = safetensors.torch.save(tensors)
        atomic_write_bytes(folder / TENSORS_FILE, data, durable=durable)
        fields = {k: v for k, v in values.items() if k not in tensors}
        atomic_write_json(
            folder / RESULT_FILE,
            {
                "format_version": RESULT_FORMAT_VERSION,
                "analysis": self.analysis,
                "fields": fields,
                "tensor_fields": sorted(tensors),
                # The tensors written with these fields: written second, the JSON can only name
                # the file beside it, and a lost or older tensors file is told apart when read.
                "tensors_sha256": hashlib.sha256(data).hexdigest(),
            },
            durable=durable,
        )
        if figure:
            self.figure().write_html(folder / FIGURE_FILE, include_plotlyjs="directory")
        return folder

    @classmethod
    def load(cls: type[R], folder: str | Path) -> R:
        """Read a result written by `save`.

        Raises:
            CheckpointError: If the folder holds no result, another analysis's result, or tensors
                that are not the ones its `result.json` was written with (a damaged or mixed folder).
            FormatVersionError: If it was written by a newer `interp`.
        """
        folder = Path(folder)
        try:
            data = json.loads((folder / RESULT_FILE).read_text())
            raw = (folder / TENSORS_FILE).read_bytes()
            digest = data.get("tensors_sha256")  # results saved before the digest have none
            if digest is not None and hashlib.sha256(raw).hexdigest() != digest:
                raise ValueError(f"{TENSORS_FILE} is not the file {RESULT_FILE} was written with")
            tensors = safetensors.torch.load(raw)
        except (OSError, ValueError, safetensors.SafetensorError) as err:
            raise CheckpointError(
                f"{folder} holds no readable analysis result: {err}", "run the analysis with --out first"
            ) from None
        if data.get("format_version", 0) > RESULT_FORMAT_VERSION:
            raise FormatVersionError(
                f"{folder / RESULT_FILE} has format_version {data['format_version']}", "upgrade interp"
            )
        if data.get("analysis") != cls.analysis:
            raise CheckpointError(f"{folder} holds a {data.get('analysis')!r} result, not {cls.analysis!r}")
        return cls(**data["fields"], **tensors)


@dataclass(frozen=True)
class Analysis:
    """One entry of the analysis registry.

    Attributes:
        name: The CLI subcommand and docs page name (e.g. ``"patch"``).
        summary: One line: what it measures.
        params: The frozen `Params` dataclass (fields made with `param`).
        compute: `(subject, params) -> Result`, pure.
        result: The `Result` subclass it returns (for `load`).
        models: The model kinds (``model.cfg.kind``) it applies to.
        tasks: The task families (``task.name``) it applies to; None: any.
        definition: What it computes, in a few sentences (its docs page shows it).
        reference: The papers that define the method, by authors and title.
        cache_key: ``params -> {result field: value}``: what decides a result beside its
            params, for inputs the params only name (`llc`'s calibration folder: the step size
            and n_beta it recommends now); `evolve` reuses a cached result only if its fields
            hold these values. None: the params alone.
    """

    name: str
    summary: str
    params: type
    compute: Callable[[Any, Any], Result]
    result: type[Result]
    models: tuple[str, ...] = ("transformer",)
    tasks: tuple[str, ...] | None = None
    definition: str = ""
    reference: str = ""
    cache_key: Callable[[Any], dict[str, Any]] | None = None
