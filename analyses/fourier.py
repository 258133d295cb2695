"""Analysis ``fourier``: the Fourier structure of a modular-addition model (studies B and C).

The embeddings' power spectrum over the Fourier basis of Z_p, the key frequencies (chosen from
it, or given), and every neuron's best frequency with the fraction of its variance that
frequency explains (`interp.dissect.progress_measures`). Neurons: the MLP's ``hook_post`` at
the readout position (transformers, layer `layer`) or the squared hidden layer (quadratic MLP).
Over a run's checkpoints: ``interp evolve --analysis fourier`` (give ``--param
frequencies=...`` to hold the key frequencies fixed across checkpoints, as Nanda et al. do).
The helpers here (`modulus`, `grid_tokens`, `embedding_power`, `choose_keys`) serve ``progress`` too.

Wraps `interp.dissect.progress_measures` (the table in docs/architecture.md pairs every dissection
module with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor, nn

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.hooks import cache_activations
from interp.dissect.progress_measures import (
    frequency_power,
    key_frequencies,
    neuron_frequency_fve,
    parse_frequencies,
)
from interp.errors import ConfigError

FREQUENCIES_HELP = (
    "Key frequencies: 'auto' (from the embedding spectrum) or a comma-separated list, e.g. 14,35,41."
)
RATIO_HELP = (
    "With 'auto': key frequencies have more than this many times the mean embedding power per frequency."
)
REFERENCE = (
    'Nanda, Chan, Lieberum, Smith and Steinhardt, "Progress measures for grokking via mechanistic '
    'interpretability" (ICLR 2023).'
)
DEFINITION = """\
The embedding of each operand's p values (the transformer's W_E rows 0..p-1; the quadratic MLP's
two input matrices) is expressed in the orthonormal real Fourier basis of Z_p (constant,
cos(2 pi k x / p), sin(2 pi k x / p)); its power at frequency k is the squared norm of the cos
and sin coefficients, reported as a fraction of all non-constant power. Key frequencies are
those with more than `key_ratio` times the mean power per frequency (at least the strongest),
unless given. Each neuron's activation over all p x p inputs is expressed in the 2-D Fourier
basis; the fraction of its variance explained by frequency k is the squared norm of its
coefficients on the terms of frequency k (cos/sin of k x, of k y, and their four products)
divided by the squared norm of all non-constant coefficients. A neuron's frequency is the one
that explains the most."""


def modulus(subject: Subject) -> int:
    """The modulus p of a modular-addition subject.

    Raises:
        ConfigError: If the task is not modular addition.
    """
    if getattr(subject.task, "name", None) != "modadd":
        raise ConfigError(
            f"progress measures need a modular-addition task (modadd), not {subject.task.name!r}",
            "train with --task modadd (presets modadd-1l, quadratic-mlp)",
        )
    return subject.task.p


def grid_tokens(p: int) -> Tensor:
    """``[x, y, EQ]`` for every pair, rows ``x * p + y`` (EQ is token p)."""
    x, y = torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p)
    return torch.stack([x, y, torch.full_like(x, p)], 1)


def embedding_power(model: nn.Module, p: int) -> Tensor:
    """Power per frequency 1 .. p // 2 of the operand embeddings (both matrices of a quadratic MLP)."""
    if getattr(model.cfg, "kind", None) == "quadratic_mlp":  # a TransformerLens cfg has no kind
        return frequency_power(model.W_E_left[:p].detach()) + frequency_power(model.W_E_right[:p].detach())
    return frequency_power(model.W_E[:p].detach())


def choose_keys(model: nn.Module, p: int, frequencies: str, ratio: float) -> list[int]:
    """The given key frequencies, or those `key_frequencies` picks from the embedding spectrum."""
    given = parse_frequencies(frequencies, p)
    return given if given is not None else key_frequencies(embedding_power(model, p), ratio)


def neuron_activations(model: nn.Module, tokens: Tensor, layer: int) -> Tensor:
    """Hidden activations at the readout, [batch, neurons]: MLP ``hook_post`` of `layer`, or a
    quadratic MLP's ``hook_post``.
    """
    if getattr(model.cfg, "kind", None) == "quadratic_mlp":  # a TransformerLens cfg has no kind
        return cache_activations(model, tokens, ["hook_post"])[1]["hook_post"]
    n_layers = model.cfg.n_layers
    if not -n_layers <= layer < n_layers:
        raise ConfigError(
            f"layer={layer} is not a layer of this {n_layers}-layer model", f"use 0..{n_layers - 1} or -1"
        )
    name = f"blocks.{layer % n_layers}.mlp.hook_post"
    return cache_activations(model, tokens, [name])[1][name][:, -1]


@dataclass(frozen=True)
class Params:
    """Parameters of ``fourier``."""

    frequencies: str = param("auto", FREQUENCIES_HELP)
    key_ratio: float = param(3.0, RATIO_HELP)
    layer: int = param(-1, "Transformer layer whose MLP neurons are analysed (-1: the last).")


@dataclass(frozen=True)
class FourierResult(Result):
    """Embedding spectrum, key frequencies and per-neuron frequencies.

    Attributes:
        p: The modulus.
        key_frequencies: The key frequencies used.
        embed_power: Fraction of the embeddings' non-constant power at each frequency 1 .. p // 2.
        neuron_frequency: Each neuron's best frequency, [neurons].
        neuron_fve: Fraction of each neuron's variance its best frequency explains, [neurons].
        fve: Fraction explained by every frequency, [freq, neurons].
    """

    analysis: ClassVar[str] = "fourier"
    p: int
    key_frequencies: list[int]
    embed_power: Tensor
    neuron_frequency: Tensor
    neuron_fve: Tensor
    fve: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per frequency: embedding power, whether key, its neurons and their mean FVE."""
        rows = []
        for k in range(1, len(self.embed_power) + 1):
            mine = self.neuron_frequency == k
            rows.append(
                {
                    "frequency": k,
                    "embed_power": self.embed_power[k - 1].item(),
                    "key": k in self.key_frequencies,
                    "neurons": int(mine.sum()),
                    "mean_fve": self.neuron_fve[mine].mean().item() if mine.any() else None,
                }
            )
        frame = pd.DataFrame(rows)
        return frame.sort_values("embed_power", ascending=False, kind="stable").reset_index(drop=True)

    def figure(self) -> go.Figure:
        """Embedding power per frequency (keys marked), and each neuron's FVE by its frequency."""
        freqs = list(range(1, len(self.embed_power) + 1))
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=[
                "embedding power per frequency",
                "neurons: variance explained by their frequency",
            ],
        )
        colours = ["crimson" if k in self.key_frequencies else "steelblue" for k in freqs]
        fig.add_trace(
            go.Bar(
                x=freqs,
                y=self.embed_power.tolist(),
                marker_color=colours,
                hovertemplate="frequency %{x}<br>power fraction %{y:.3f}<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=self.neuron_frequency.tolist(),
                y=self.neuron_fve.tolist(),
                mode="markers",
                marker={"size": 5, "opacity": 0.6},
                text=[f"neuron {i}" for i in range(len(self.neuron_fve))],
                hovertemplate="%{text}<br>frequency %{x}<br>FVE %{y:.3f}<extra></extra>",
            ),
            row=1,
            col=2,
        )
        fig.update_xaxes(title_text="frequency k (cycles per p)", row=1, col=1)
        fig.update_xaxes(title_text="neuron's frequency", row=1, col=2)
        fig.update_yaxes(title_text="fraction of non-constant power", row=1, col=1)
        fig.update_yaxes(title_text="fraction of variance explained", range=[0, 1.02], row=1, col=2)
        step = f" at step {self.step}" if self.step is not None else ""
        fig.update_layout(
            title=f"Fourier structure (p = {self.p}){step}; key frequencies {self.key_frequencies}",
            showlegend=False,
        )
        return fig


@torch.no_grad()
def compute(subject: Subject, params: Params) -> FourierResult:
    """Spectrum, key frequencies and neuron frequencies of a modular-addition model."""
    p = modulus(subject)
    keys = choose_keys(subject.model, p, params.frequencies, params.key_ratio)
    power = embedding_power(subject.model, p)
    fve, best, best_fve = neuron_frequency_fve(
        neuron_activations(subject.model, grid_tokens(p), params.layer), p
    )
    return FourierResult(
        params=to_dict(params),
        step=subject.step,
        p=p,
        key_frequencies=keys,
        embed_power=(power / power.sum()).float(),
        neuron_frequency=best,
        neuron_fve=best_fve,
        fve=fve,
    )


ANALYSIS = Analysis(
    name="fourier",
    summary=REGISTRY["fourier"][1],
    params=Params,
    compute=compute,
    result=FourierResult,
    models=("transformer", "quadratic_mlp"),
    tasks=("modadd",),
    definition=DEFINITION,
    reference=REFERENCE,
)
