"""Analysis ``path-patch``: path patching from every head to every later head's q / k / v and the logits.

The same pairs and metric as ``patch`` (`analyses.effects.pairs_for`); each effect is one edge
of the model's graph (`interp.dissect.path_patching`): the sender head's output takes its source
value as seen by the receiver only, every other head and MLP keeping its target-run output.
Uncertainty as in ``patch``: per-pair values, bootstrap intervals and (``permutations > 0``) a
permutation test over re-pairings.

Wraps `interp.dissect.path_patching` (the table in docs/architecture.md pairs every dissection
module with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses.base import Analysis, param
from analyses.effects import (
    STAT_KEYS,
    PairEffects,
    PairParams,
    add_interval_row,
    effect_stats,
    pairs_for,
)
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.dissect.path_patching import path_patch

DEFINITION = """\
For a sender head S and a receiver R (the query, key or value input of a head in a later layer,
or the logits), the target run is repeated with S's output replaced by its value on the paired
source run as R sees it, and with every other head and MLP keeping its target-run output: R's
input is recomputed from the target residual stream plus S's change of output (through the
LayerNorm before R), and the model then runs with only R's input replaced, everything after it
recomputed. The effect is the patched logit difference (source label minus target label at the
readout) and its recovery, as for activation patching; intervals are percentile bootstrap
intervals over pairs, p-values come from re-running the patch on pairs re-paired at random
within equal labels."""
REFERENCE = (
    'Wang, Variengien, Conmy, Shlegeris and Steinhardt, "Interpretability in the Wild: a Circuit for '
    'Indirect Object Identification in GPT-2 small" (2022); Goldowsky-Dill, MacLeod, Sato and Arora, '
    '"Localizing Model Behavior with Path Patching" (2023).'
)


@dataclass(frozen=True)
class Params(PairParams):
    """Parameters of ``path-patch``."""

    receivers: str = param(
        "q,k,v,logits", "Comma-separated receiver kinds: q, k, v (of later heads), logits."
    )


@dataclass(frozen=True)
class PathPatchResult(PairEffects):
    """Path-patching effect of every sender head on every receiver: the `PairEffects` fields
    with ``[*patches] = [sender, receiver]`` (NaN where there is no path).

    Attributes:
        senders: Sender heads (``L0H0``, ...), the first tensor axis.
        receivers: Receivers (``L1H0.q``, ..., ``logits``), the second axis.
    """

    analysis: ClassVar[str] = "path-patch"
    senders: list[str]
    receivers: list[str]

    def to_frame(self) -> pd.DataFrame:
        """One row per path (sender, receiver) that exists, largest |recovery| first."""
        keys = STAT_KEYS
        rows = [
            {"sender": sender, "receiver": receiver, **{k: getattr(self, k)[s, r].item() for k in keys}}
            for s, sender in enumerate(self.senders)
            for r, receiver in enumerate(self.receivers)
            if not self.logit_diff[s, r].isnan()
        ]
        frame = pd.DataFrame(rows, columns=["sender", "receiver", *keys])
        if not self.recovery_defined:
            frame[["recovery", "recovery_low", "recovery_high"]] = float("nan")
        frame["recovery_defined"] = self.recovery_defined
        order = frame["recovery"].abs().fillna(-1.0).sort_values(ascending=False, kind="stable").index
        return frame.loc[order].reset_index(drop=True)

    def figure(self) -> go.Figure:
        """A heatmap of recovery, sender x receiver, over every path's recovery with error bars."""
        ci = self.params.get("ci", 0.95)
        fig = make_subplots(
            rows=2,
            cols=1,
            row_heights=[0.6, 0.4],
            vertical_spacing=0.18,
            subplot_titles=["recovery per path", f"recovery with {ci:.0%} bootstrap intervals"],
        )
        shown = self.recovery if self.recovery_defined else self.recovery * float("nan")
        fig.add_trace(
            go.Heatmap(
                z=shown.tolist(),
                x=self.receivers,
                y=self.senders,
                colorscale="RdBu",
                zmid=0,
                colorbar={"title": "recovery", "len": 0.55, "y": 0.75},
                hovertemplate="sender %{y}<br>receiver %{x}<br>recovery %{z:.3f}<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.update_xaxes(title_text="receiver (layer, head, input)", row=1, col=1)
        fig.update_yaxes(title_text="sender (layer, head)", autorange="reversed", row=1, col=1)
        valid = ~self.logit_diff.isnan()
        labels = [
            f"{self.senders[s]}->{self.receivers[r]}" for s, r in valid.nonzero().tolist()
        ]  # row-major, as [valid]
        nan = 1.0 if self.recovery_defined else float("nan")
        values = {
            k: getattr(self, k)[valid] * (nan if k.startswith("recovery") else 1.0)
            for k in ("recovery", "recovery_low", "recovery_high", "p_value")
        }
        add_interval_row(fig, 2, 1, labels, values, ci)
        step = f", step {self.step}" if self.step is not None else ""
        fig.update_layout(
            title=f"Path patching {self.source} into {self.split}{step} ({self.n_pairs} pairs)",
            showlegend=False,
        )
        self.mark_undefined(fig)
        return fig


def compute(subject: Subject, params: Params) -> PathPatchResult:
    """Path-patch every head into every receiver of the kinds in `params.receivers`."""
    pairs = pairs_for(subject, params)
    effects = path_patch(subject.model, pairs, params.receivers)
    stats = effect_stats(
        effects.per_example,
        effects.source_per_example,
        effects.target_per_example,
        params,
        lambda other: path_patch(subject.model, other, params.receivers).logit_diff,
        pairs,
    )
    return PathPatchResult.from_pairs(
        subject,
        params,
        pairs,
        effects,
        stats,
        logit_diff=effects.logit_diff,
        recovery=effects.recovery,
        per_example=effects.per_example,
        senders=list(effects.senders),
        receivers=list(effects.receivers),
    )


ANALYSIS = Analysis(
    name="path-patch",
    summary=REGISTRY["path-patch"][1],
    params=Params,
    compute=compute,
    result=PathPatchResult,
    definition=DEFINITION,
    reference=REFERENCE,
)
