"""`llc`: the local learning coefficient of a checkpoint, with its chains' health.

``llc = n_beta * (E[L_n(w)] - L_n(w*))`` from localized SGLD chains around the checkpoint
(Lau et al. 2023; devinterp's `llc`), on any split of the run's task, optionally restricted
to a head (``L0H1``), an MLP or the embeddings, so that one curve per head can be drawn over
training (`evolve(run, "llc", restrict="L0H1")`). The loss sampled is the training loss of
the run (cross-entropy or MSE at the readout) on the split, without the run's weight decay
(`interp.dissect.learning_coefficient` says why; the ``negative`` flag says when it shows).
With `calibration`, the step size and n_beta come from an `llc-calibrate` result, and the
result records which.

Wraps `interp.dissect.learning_coefficient` (the table in docs/architecture.md pairs every dissection
module with the analyses that wrap it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from torch import Tensor, nn

from analyses.base import RESULT_FILE, Analysis, Result
from analyses.llc_params import Params
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.hooks import readout_of
from interp.dissect.learning_coefficient import FLAG_TEXT, Health, LLCEstimate, chain_frame, llc, llc_figure
from interp.errors import CheckpointError
from interp.metrics import mean_loss, per_example_loss


@dataclass(frozen=True)
class LLCResult(Result):
    """An LLC estimate of one checkpoint.

    Attributes:
        estimate: Mean over chains; `std` their spread, `se` = std / sqrt(chains).
        per_chain: Each chain's estimate.
        losses: Sampled minibatch losses, ``[chains, draws]``.
        init_loss: L_n(w*) over the whole split.
        n_beta: n * beta used; `step_size` likewise.
        sampled: The number of sampled weights (d).
        rhat: R-hat over chains (None with one chain); `ess` the bulk effective sample size.
        drift: n_beta * (last-quarter - first-quarter mean loss), mean over chains.
        flags: Raised health flags (`interp.dissect.chain_health`); empty: healthy.
        split: The split sampled on.
        calibration: The `llc-calibrate` result that chose step size and n_beta, or None.
    """

    analysis: ClassVar[str] = "llc"
    estimate: float
    std: float
    se: float
    per_chain: list[float]
    losses: Tensor
    init_loss: float
    n_beta: float
    step_size: float
    sampled: int
    rhat: float | None
    ess: float | None
    drift: float
    drift_se: float | None
    flags: list[str]
    split: str
    calibration: dict[str, Any] | None

    @property
    def health(self) -> Health:
        """The diagnostics, as `interp.dissect.chain_health.Health`."""
        return Health(self.rhat, self.ess, self.drift, self.drift_se, tuple(self.flags))

    def to_frame(self) -> pd.DataFrame:
        """One row per chain, with the estimate and its standard error on every row."""
        frame = chain_frame(self.per_chain, self.losses.numpy(), self.health)
        return frame.assign(estimate=self.estimate, se=self.se, n_beta=self.n_beta, step_size=self.step_size)

    def figure(self) -> go.Figure:
        """Chains' traces, the running estimate and the estimate (title: step, part, flags)."""
        part = self.params.get("restrict") or "whole model"
        step = "" if self.step is None else f"step {self.step}, "
        title = f"{step}{part}, {self.split}: "
        return llc_figure(
            self.losses.numpy(), self.init_loss, self.n_beta, self.estimate, self.se, title, self.health
        )

    def caption(self) -> str:
        """The estimate with its standard error, and what each raised flag means."""
        flags = "; ".join(f"{f}: {FLAG_TEXT[f]}" for f in self.flags) or "healthy"
        return f"{super().caption()}: LLC {self.estimate:.4g} ± {self.se:.2g} (se); {flags}"


def loss_of(loss: str, *, fast: bool = True, minibatch: bool = False):  # noqa: ANN201 - a closure
    """The run's training loss at the readout, as `llc`'s ``loss_fn(model, (tokens, labels))``.

    The forward is the model's training forward, `fast_readout`, where it has one (ours, when
    `fast`): the same logits as the hooked readout to 1e-5 in fp32, from a pass that does only
    the work a readout loss needs, with a hand-written backward, at a fraction of the hooked
    pass's cost (`benchmarks/llc.py`); `minibatch` tells it that each batch is a random one,
    used once. Otherwise the hooked readout (`readout_of`: ours, or a TransformerLens model's
    last position). The LLC needs no hooks: ``restrict`` masks weights, not activations.
    """

    def loss_fn(model: nn.Module, batch: tuple[Tensor, ...]) -> Tensor:
        fast_readout = getattr(model, "fast_readout", None) if fast else None
        if fast_readout is None:
            return mean_loss(readout_of(model)(batch[0]), batch[1], loss)
        return mean_loss(fast_readout(batch[0], minibatch=minibatch), batch[1], loss)

    return loss_fn


def stacked_loss_of(model: nn.Module, loss: str):  # noqa: ANN201 - a closure
    """The training loss of several chains in one pass (`llc`'s ``stacked``), or None where
    `model` has no stacked forward (`models.stacked_forward.supports`: our transformers of 1 or
    2 layers; others step their chains in a loop).
    """
    from models.stacked_forward import stacked_readout, supports

    if not supports(model):
        return None

    def stacked(model: nn.Module, params: dict[str, Tensor], batch: tuple[Tensor, ...]) -> Tensor:
        logits = stacked_readout(model, params, batch[0])  # [chains, batch, d_vocab_out]
        chains, size = batch[1].shape
        return (
            per_example_loss(logits.reshape(chains * size, -1), batch[1].reshape(-1), loss)
            .view(chains, size)
            .mean(1)
        )

    return stacked


def calibrated(params: Params) -> tuple[float, float, dict[str, Any] | None]:
    """The step size and n_beta to use (0: n / log n), and the calibration that chose them."""
    if not params.calibration:
        return params.step_size, params.n_beta, None
    path = Path(params.calibration)
    try:
        fields = json.loads((path / RESULT_FILE).read_text())["fields"]
        chosen = fields["recommended"]
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointError(
            f"{path} holds no llc-calibrate result", "run `interp llc-calibrate --ckpt RUN --out FOLDER`"
        ) from None
    return chosen["step_size"], chosen["n_beta"], {"folder": str(path), **chosen}


def calibration_key(params: Params) -> dict[str, Any]:
    """The `calibration` field a result of `params` holds: a cached result computed before its
    calibration folder was recomputed recommends other settings, and is not reused.
    """
    return {"calibration": calibrated(params)[2]}


def estimate(subject: Subject, params: Params, step_size: float, n_beta: float) -> LLCEstimate:
    """`llc` on `subject` with `params`, at the given step size and n_beta (0: n / log n)."""
    split = subject.split(params.split)
    with torch.enable_grad():
        return llc(
            subject.model,
            (split.tokens, split.labels),
            loss_of(subject.loss, minibatch=0 < params.batch_size < len(split)),
            step_size=step_size,
            n_beta=n_beta or None,
            localization=params.localization,
            chains=params.chains,
            draws=params.draws,
            burn_in=params.burn_in,
            batch_size=params.batch_size or None,
            seed=params.seed,
            sampler=params.sampler,
            restrict=params.restrict or None,
            vectorize=params.vectorize,
            stacked=stacked_loss_of(subject.model, subject.loss) if params.stack else None,
        )


def compute(subject: Subject, params: Params) -> LLCResult:
    """The LLC of `subject.model` on `params.split`."""
    step_size, n_beta, calibration = calibrated(params)
    est = estimate(subject, params, step_size, n_beta)
    health = est.health
    return LLCResult(
        params=to_dict(params),
        step=subject.step,
        estimate=est.estimate,
        std=est.std,
        se=est.se,
        per_chain=est.per_chain,
        losses=est.losses,
        init_loss=est.init_loss,
        n_beta=est.n_beta,
        step_size=step_size,
        sampled=est.sampled,
        rhat=health.rhat,
        ess=health.ess,
        drift=health.drift,
        drift_se=health.drift_se,
        flags=list(health.flags),
        split=params.split,
        calibration=calibration,
    )


ANALYSIS = Analysis(
    name="llc",
    summary=REGISTRY["llc"][1],
    params=Params,
    compute=compute,
    result=LLCResult,
    models=("transformer", "quadratic_mlp"),
    cache_key=calibration_key,
    definition="n_beta * (E[L_n(w)] - L_n(w*)), the expectation over localized SGLD chains around the "
    "checkpoint's weights w*, L_n(w*) over the whole split; per-chain traces and health flags "
    "(R-hat, ESS, drift, negative, divergence).",
    reference="Lau, Furman, Wang, Murfet, Wei: Quantifying degeneracy in singular models via the learning "
    "coefficient (2023); Watanabe: A widely applicable Bayesian information criterion (2013); Wang et al.: "
    "Differentiation and specialization of attention heads via the refined local learning coefficient (2024).",
)
