"""`probe`: linear probes for a named target at every site and position, and on the embedding.

Two questions, each answered on data the probe never saw (`interp.dissect.probes`):

* **Site probes.** For a target of the split's examples (the label, the shortcut, the parity of
  the token at one position, the number of odd tokens, ...) and every site and position (named
  as `interp patch --sites` names them: ``resid_pre`` at (layer, pos), ``z_pos`` at (layer, pos,
  head), ...), a logistic-regression probe fitted on a fixed part of the examples, with its
  accuracy on the rest and its direction.
* **The embedding probe.** Token parity from the rows of ``W_E`` (the readout token's row left
  out), scored on *held-out token values* by cross-validation over the values, beside two
  baselines: the same probe on randomly permuted parities (repeated, the chance level for this
  many rows and dimensions) and on the run's initial checkpoint (what a random embedding gives).
  The baselines are the point: 32 rows in 64 dimensions are linearly separable under any
  labelling, so training accuracy is 1 whatever the embedding encodes; only a held-out accuracy
  above both baselines says the embedding carries parity along a direction shared by the tokens.

Wraps `interp.dissect.probes`, `interp.dissect.patching` and `interp.dissect.heads` (the probes;
the site names `interp patch --sites` uses; the readout position's layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.heads import readout_layout
from interp.dissect.patching import SITES, parse_sites
from interp.dissect.probes import (
    embedding_probe,
    fit_probe,
    held_out_split,
    probe_indices,
    shuffled_embedding_accuracies,
    site_features,
)
from interp.errors import CheckpointError, ConfigError, did_you_mean
from interp.splits import Split
from interp.store import checkpoint_dir, list_checkpoints, load_checkpoint, run_of

DEFINITION = """\
A linear probe is a logistic regression (scikit-learn, L2 penalty, on centred features divided by one global scale) that
predicts a target from one activation. Site probes are fitted on a fixed random part of the
split's examples and scored on the rest (held-out accuracy), one per site and position; the
direction is the fitted weight vector in the activation's own space, normalised. The embedding
probe predicts token parity from the rows of W_E and is scored on held-out token values
(stratified k-fold cross-validation over the values), beside the same probe on permuted
parities and on the run's initial checkpoint: with fewer rows than dimensions any labelling can
be fitted, so only held-out accuracy above both baselines is evidence of an encoded feature."""
REFERENCE = (
    'Alain and Bengio, "Understanding intermediate layers using linear classifier probes" (2016); '
    'Hewitt and Liang, "Designing and Interpreting Probes with Control Tasks" (2019).'
)
TARGETS = {
    "label": "the example's label",
    "token-parity": "parity of the token at --token-pos",
    "odd-count": "number of odd tokens before the readout position",
}


@dataclass(frozen=True)
class Params:
    """Parameters of `probe`."""

    target: str = param(
        "token-parity",
        "What to decode: label, token-parity (of the token at token_pos), odd-count (odd tokens "
        "before the readout), or an integer extra of the split (study A: shortcut, argmax_pos).",
    )
    token_pos: int = param(0, "Position whose token's parity is the token-parity target.")
    sites: str = param(
        "resid_pre,resid_post",
        "Comma-separated sites: resid_pre, resid_mid, resid_post, attn_out, mlp_out, z, z_pos, pattern.",
    )
    positions: str = param("all", "Positions probed on sites with a position axis: all, or e.g. 0,-1.")
    split: str = param("train", "Split whose examples are probed.")
    max_examples: int = param(4096, "Probe at most this many of the split's examples (the first ones).")
    test_frac: float = param(0.25, "Fraction of the examples held out to score the site probes.")
    c: float = param(1.0, "Inverse L2 regularisation strength of the logistic regression.")
    folds: int = param(5, "Folds of the embedding probe's cross-validation over token values.")
    shuffles: int = param(10, "Label permutations of the embedding probe's shuffled baseline.")
    seed: int = param(0, "Seed of the example split, the folds and the permutations.")


@dataclass(frozen=True)
class ProbeResult(Result):
    """Site probes (flattened site after site) and the embedding probe with its baselines.

    Attributes:
        target: The decoded target; `token_pos` its position for token-parity.
        split: The probed split; `n_train` / `n_test` the examples fitted / held out.
        sites: The probed sites; `axes` names each site's index axes (``["layer", "pos"]``).
        probe_site: Each probe's site; `indices` its index (layer, then pos and/or head).
        accuracy: Held-out accuracy per probe, [n_probes]; `train_accuracy` on the fitted examples.
        chance: Per probe, the held-out accuracy of always guessing the commonest training class.
        directions: Unit probe directions, [n_probes, rows, features] (rows: 1 for a two-class
            target, else one per class; NaN beyond a probe's `dims`).
        dims: Features of each probe (the activation's size at its site).
        embed_accuracy: Token parity from W_E rows, accuracy on held-out token values.
        embed_train_accuracy: The same probe's accuracy on the values it was fitted on.
        embed_shuffled: Held-out accuracy on permuted parities, one per permutation, [shuffles].
        embed_initial_accuracy: Held-out accuracy on the run's initial checkpoint (None without one).
        embed_initial_step: That checkpoint's step.
        embed_direction: The embedding probe's unit direction in d_model, [d_model].
        embed_folds: Folds used (capped by the smaller parity class).
    """

    analysis: ClassVar[str] = "probe"
    target: str
    token_pos: int
    split: str
    n_train: int
    n_test: int
    sites: list[str]
    axes: dict[str, list[str]]
    probe_site: list[str]
    indices: list[list[int]]
    accuracy: Tensor
    train_accuracy: Tensor
    chance: Tensor
    directions: Tensor
    dims: list[int]
    embed_accuracy: float
    embed_train_accuracy: float
    embed_shuffled: Tensor
    embed_initial_accuracy: float | None
    embed_initial_step: int | None
    embed_direction: Tensor
    embed_folds: int

    def to_frame(self) -> pd.DataFrame:
        """One row per site probe (layer, pos and head where the site has them), then the
        embedding probe and its two baselines (probe ``W_E``, ``W_E shuffled``, ``W_E initial``).
        """
        rows = []
        for i, (site, index) in enumerate(zip(self.probe_site, self.indices)):
            where = dict(zip(self.axes[site], index))
            rows.append(
                {
                    "probe": site,
                    "layer": where.get("layer"),
                    "pos": where.get("pos"),
                    "head": where.get("head"),
                    "target": self.target,
                    "accuracy": float(self.accuracy[i]),
                    "train_accuracy": float(self.train_accuracy[i]),
                    "chance": float(self.chance[i]),
                }
            )
        embed = {"layer": None, "pos": None, "head": None, "target": "token-parity", "chance": 0.5}
        rows.append(
            {
                "probe": "W_E",
                **embed,
                "accuracy": self.embed_accuracy,
                "train_accuracy": self.embed_train_accuracy,
            }
        )
        shuffled = float(self.embed_shuffled.mean()) if len(self.embed_shuffled) else None
        rows.append({"probe": "W_E shuffled", **embed, "accuracy": shuffled, "train_accuracy": None})
        rows.append(
            {"probe": "W_E initial", **embed, "accuracy": self.embed_initial_accuracy, "train_accuracy": None}
        )
        return pd.DataFrame(rows)

    def figure(self) -> go.Figure:
        """One heatmap of held-out accuracy per site (rows: layer, or layer and head; columns:
        position or head), and bars of the embedding probe beside its baselines.
        """
        fig = make_subplots(
            rows=1,
            cols=len(self.sites) + 1,
            subplot_titles=[*self.sites, "token parity from W_E (held-out values)"],
        )
        frame = self.to_frame()
        for col, site in enumerate(self.sites, 1):
            part = frame[frame["probe"] == site]
            fig.add_trace(_site_heatmap(part, self.axes[site], col == 1), row=1, col=col)
        embed = frame[frame["probe"].str.startswith("W_E")]
        fig.add_bar(
            x=list(embed["probe"]),
            y=[v if v is not None else float("nan") for v in embed["accuracy"]],
            marker_color=["#1f77b4", "#999", "#bbb"],
            hovertemplate="%{x}<br>held-out accuracy %{y:.3f}<extra></extra>",
            showlegend=False,
            row=1,
            col=len(self.sites) + 1,
        )
        fig.add_hline(y=0.5, line_dash="dash", line_color="#999", row=1, col=len(self.sites) + 1)
        fig.update_yaxes(range=[0, 1.05], row=1, col=len(self.sites) + 1)
        step = "" if self.step is None else f", step {self.step}"
        fig.update_layout(
            title=f"Linear probes for {self.target} on split '{self.split}'{step} "
            f"(held-out accuracy, {self.n_test} test examples)",
            height=420,
        )
        return fig


def _site_heatmap(part: pd.DataFrame, axes: list[str], first: bool) -> go.Heatmap:
    """Held-out accuracy of one site's probes: columns are its last axis, rows the others."""
    column = axes[-1]
    rows = [a for a in axes if a != column]
    labels = [" ".join(f"{a[0].upper()}{int(r[a])}" for a in rows) for _, r in part.iterrows()]
    y = list(dict.fromkeys(labels))
    x = sorted({int(v) for v in part[column]})
    z = [[None] * len(x) for _ in y]
    for label, (_, row) in zip(labels, part.iterrows()):
        z[y.index(label)][x.index(int(row[column]))] = row["accuracy"]
    return go.Heatmap(
        z=z,
        x=[f"{column} {v}" for v in x],
        y=y,
        zmin=0,
        zmax=1,
        colorscale="Viridis",
        showscale=first,
        colorbar={"title": {"text": "held-out accuracy"}},
        hovertemplate="%{y}, %{x}<br>held-out accuracy %{z:.3f}<extra></extra>",
    )


def targets(split: Split, token_pos: int) -> dict[str, Tensor]:
    """Every probe target of `split`'s examples: `TARGETS` and its integer extras, int64 [batch]."""
    n_pos = split.tokens.shape[1]
    if not -n_pos <= token_pos < n_pos:
        raise ConfigError(f"token_pos={token_pos} is out of range", f"valid: {-n_pos}..{n_pos - 1}")
    out = {
        "label": split.labels,
        "token-parity": split.tokens[:, token_pos] % 2,
        "odd-count": (split.tokens[:, :-1] % 2).sum(1),
    }
    extras = {k: v for k, v in split.extras.items() if v.ndim == 1 and not v.is_floating_point()}
    return {**out, **extras}


def _positions(text: str, n_pos: int) -> list[int] | None:
    if text.strip() == "all":
        return None
    try:
        positions = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"positions={text!r} is not 'all' or a list of integers", "e.g. 0,-1") from None
    bad = [p for p in positions if not -n_pos <= p < n_pos]
    if bad or not positions:
        raise ConfigError(
            f"positions={text!r} names no position or one out of range", f"valid: {-n_pos}..{n_pos - 1}"
        )
    return sorted({p % n_pos for p in positions})


def _site_probes(subject: Subject, params: Params, labels: Tensor, tokens: Tensor) -> dict[str, list]:
    """Fit every site probe; returns lists per field of `ProbeResult`."""
    sites = list(parse_sites(params.sites))
    positions = _positions(params.positions, tokens.shape[1])
    train, test = held_out_split(len(tokens), params.test_frac, params.seed)
    out: dict[str, list] = {k: [] for k in ("probe_site", "indices", "fits", "n")}
    for site in sites:
        indices = probe_indices(subject.model, site, tokens.shape[1], positions)
        for index, features in zip(indices, site_features(subject.model, tokens, site, indices)):
            what = f"target {params.target!r}"
            out["fits"].append(fit_probe(features, labels, train, test, params.c, what))
            out["probe_site"].append(site)
            out["indices"].append(list(index))
    out["n"] = [len(train), len(test)]
    return out


def _padded(directions: list[Tensor]) -> Tensor:
    rows, dims = max(d.shape[0] for d in directions), max(d.shape[1] for d in directions)
    out = torch.full((len(directions), rows, dims), float("nan"), dtype=torch.float64)
    for i, d in enumerate(directions):
        out[i, : d.shape[0], : d.shape[1]] = d
    return out


def _initial_embedding(subject: Subject) -> tuple[Tensor | None, int | None]:
    """``W_E`` of the first checkpoint of the subject's run (None if it has no run)."""
    if subject.source is None:
        return None, None
    try:
        run = run_of(subject.source)
        steps = list_checkpoints(run)
        ckpt = load_checkpoint(checkpoint_dir(run, steps[0]), load_train_state=False)
    except (CheckpointError, IndexError, OSError):
        return None, None
    return ckpt.state_dict.get("embed.W_E"), ckpt.step


def _embedding_fields(subject: Subject, params: Params) -> dict:
    _, _, values = readout_layout(subject.model)
    parity = values % 2
    w_e = subject.model.W_E.detach()[values]
    fit = embedding_probe(w_e, parity, params.folds, params.c, params.seed)
    initial, initial_step = _initial_embedding(subject)
    initial_acc = None
    if initial is not None:
        initial_acc = embedding_probe(initial[values], parity, params.folds, params.c, params.seed).accuracy
    smallest = int(torch.bincount(parity).min())
    return {
        "embed_accuracy": fit.accuracy,
        "embed_train_accuracy": fit.train_accuracy,
        "embed_shuffled": shuffled_embedding_accuracies(
            w_e, parity, params.shuffles, params.folds, params.c, params.seed
        ),
        "embed_initial_accuracy": initial_acc,
        "embed_initial_step": initial_step,
        "embed_direction": fit.direction[0],
        "embed_folds": min(params.folds, smallest),
    }


def _check(params: Params) -> None:
    if not 0 < params.test_frac < 1:
        raise ConfigError(f"test_frac={params.test_frac} is out of range", "valid: strictly between 0 and 1")
    for name, low in (("max_examples", 2), ("folds", 2), ("shuffles", 0)):
        if getattr(params, name) < low:
            raise ConfigError(f"{name}={getattr(params, name)} is too small", f"valid: at least {low}")
    if params.c <= 0:
        raise ConfigError(f"c={params.c} is out of range", "valid: a positive number")


def compute(subject: Subject, params: Params) -> ProbeResult:
    """Fit the site probes for `params.target` and the embedding probe of token parity."""
    if not hasattr(subject.model, "blocks"):
        raise ConfigError(f"probe needs a transformer, not {type(subject.model).__name__}")
    _check(params)
    split = subject.split(params.split)
    tokens = split.tokens[: params.max_examples]
    available = targets(split.subset(torch.arange(len(tokens))), params.token_pos)
    if params.target not in available:
        raise ConfigError(
            f"target {params.target!r} is not a probe target of split {params.split!r}",
            did_you_mean(params.target, available),
        )
    sites = _site_probes(subject, params, available[params.target], tokens)
    fits = sites["fits"]
    return ProbeResult(
        params=to_dict(params),
        step=subject.step,
        target=params.target,
        token_pos=params.token_pos,
        split=params.split,
        n_train=sites["n"][0],
        n_test=sites["n"][1],
        sites=list(dict.fromkeys(sites["probe_site"])),
        axes={site: ["layer", *SITES[site][1]] for site in dict.fromkeys(sites["probe_site"])},
        probe_site=sites["probe_site"],
        indices=sites["indices"],
        accuracy=torch.tensor([f.accuracy for f in fits], dtype=torch.float64),
        train_accuracy=torch.tensor([f.train_accuracy for f in fits], dtype=torch.float64),
        chance=torch.tensor([f.chance for f in fits], dtype=torch.float64),
        directions=_padded([f.direction for f in fits]),
        dims=[f.direction.shape[1] for f in fits],
        **_embedding_fields(subject, params),
    )


ANALYSIS = Analysis(
    name="probe",
    summary=REGISTRY["probe"][1],
    params=Params,
    compute=compute,
    result=ProbeResult,
    definition=DEFINITION,
    reference=REFERENCE,
)

__all__ = ["ANALYSIS", "Params", "ProbeResult", "TARGETS", "compute", "targets"]
