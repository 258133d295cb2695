"""`fingerprint`: circuit fingerprints of every attention head (study A).

One row per (layer, head): the QK Spearman rho of magnitude sorting from the weights and over a
split, the attention mass on position 0 over the split, and the OV parity rho. Phase 1 of study
A shows a shortcut circuit (high QK rho for the max shortcut, or attention on position 0 for
the first shortcut); phase 2, in generalising 2-layer runs, a head with high OV parity rho.
Definitions, and the direct-path approximation used for layers after the first, are in
`interp.dissect.heads`.

Wraps `interp.dissect.heads` (the table in docs/architecture.md pairs every dissection module with
the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.heads import (
    attention_to_first,
    ov_parity_rho,
    qk_rho_empirical,
    qk_rho_from_weights,
    readout_patterns,
)
from interp.errors import ConfigError

MEASURES = {
    "qk_rho_weights": "QK rho (weights)",
    "qk_rho_empirical": "QK rho (empirical)",
    "attn_pos0": "attention to position 0",
    "ov_parity_rho": "OV parity rho",
}


@dataclass(frozen=True)
class Params:
    """Parameters of `fingerprint`."""

    split: str = param(
        "adv", "Split whose examples the empirical measures (QK rho, attention to position 0) run on."
    )
    modulus: int = param(0, "Label modulus m of the OV parity rho (0: the model's number of output classes).")
    chunk: int = param(4096, "Largest batch run through the model at once.")


@dataclass(frozen=True)
class FingerprintResult(Result):
    """Fingerprints per layer and head; every tensor is [n_layers, n_heads] unless noted.

    Attributes:
        split: The split of the empirical measures.
        m: The label modulus of the OV parity rho.
        qk_rho_weights: Spearman rho of the weights-based readout attention score vs key value,
            pooled over key positions.
        qk_rho_weights_pos: The same per key position, [n_layers, n_heads, n_pos - 1].
        qk_rho_empirical: Spearman rho of the readout's attention weight vs key value over the split.
        attn_pos0: Mean attention weight from the readout to position 0 over the split.
        ov_parity_rho: Rank-biserial OV parity rho, best cyclic shift (|rho| for m = 2).
        ov_parity_shift: That shift (m = 2: 0 if the head pushes odd tokens towards class 1).
        ov_parity_rho_pos: `ov_parity_rho` per key position, [n_layers, n_heads, n_pos - 1].
    """

    analysis: ClassVar[str] = "fingerprint"
    split: str
    m: int
    qk_rho_weights: Tensor
    qk_rho_weights_pos: Tensor
    qk_rho_empirical: Tensor
    attn_pos0: Tensor
    ov_parity_rho: Tensor
    ov_parity_shift: Tensor
    ov_parity_rho_pos: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per (layer, head), in layer then head order."""
        n_layers, n_heads = self.qk_rho_weights.shape
        layer, head = torch.meshgrid(torch.arange(n_layers), torch.arange(n_heads), indexing="ij")
        columns = {"layer": layer.flatten().tolist(), "head": head.flatten().tolist()}
        for name in (*MEASURES, "ov_parity_shift"):
            columns[name] = getattr(self, name).flatten().tolist()
        return pd.DataFrame(columns)

    def figure(self) -> go.Figure:
        """Grouped bars: the four measures side by side for each head."""
        frame = self.to_frame()
        labels = [f"L{row.layer}H{row.head}" for row in frame.itertuples()]
        fig = go.Figure()
        for name, title in MEASURES.items():
            fig.add_bar(
                x=labels,
                y=frame[name],
                name=title,
                customdata=frame[["layer", "head"]].to_numpy(),
                hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<br>"
                + f"{title}: %{{y:.3f}}<extra></extra>",
            )
        step = "" if self.step is None else f", step {self.step}"
        fig.update_layout(
            barmode="group",
            title=f"Head fingerprints{step} (empirical measures on split '{self.split}', OV parity mod {self.m})",
            xaxis_title="layer L, head H",
            yaxis_title="rho / attention weight",
            yaxis_range=[-1.05, 1.05],
        )
        return fig


def _readout(split_tokens: Tensor, name: str) -> int:
    """The split's readout token, which every example must share."""
    last = split_tokens[:, -1].unique()
    if len(last) != 1:
        raise ConfigError(
            f"split {name!r} has {len(last)} different readout tokens",
            "fingerprint needs one readout token (study A's SEP)",
        )
    return int(last[0])


def compute(subject: Subject, params: Params) -> FingerprintResult:
    """Fingerprint every head of `subject.model` (a transformer)."""
    model = subject.model
    if not hasattr(model, "blocks"):
        raise ConfigError(f"fingerprint needs a transformer with attention heads, not {type(model).__name__}")
    split = subject.split(params.split)
    if len(split) == 0:
        raise ConfigError(f"split {params.split!r} is empty", "choose a split with examples")
    sep, n_pos = _readout(split.tokens, params.split), split.tokens.shape[1]
    qk_w, qk_w_pos = qk_rho_from_weights(model, sep, n_pos)
    patterns = readout_patterns(model, split.tokens, params.chunk)
    m = params.modulus or model.cfg.d_vocab_out
    if not 2 <= m <= model.cfg.d_vocab_out:
        raise ConfigError(
            f"modulus={params.modulus} is out of range",
            f"valid: 2..{model.cfg.d_vocab_out} (the classes), or 0",
        )
    ov, shift, ov_pos = ov_parity_rho(model, m, sep, n_pos)
    return FingerprintResult(
        params=to_dict(params),
        step=subject.step,
        split=params.split,
        m=m,
        qk_rho_weights=qk_w,
        qk_rho_weights_pos=qk_w_pos,
        qk_rho_empirical=qk_rho_empirical(patterns, split.tokens),
        attn_pos0=attention_to_first(patterns),
        ov_parity_rho=ov,
        ov_parity_shift=shift,
        ov_parity_rho_pos=ov_pos,
    )


ANALYSIS = Analysis(
    name="fingerprint",
    summary=REGISTRY["fingerprint"][1],
    params=Params,
    compute=compute,
    result=FingerprintResult,
)
