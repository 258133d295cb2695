"""Health flags of an LLC estimate: can its chains be trusted?

devinterp's README calls the estimate "more of an art than a science"; these flags say when
a chain is visibly broken, each by one stated rule on the per-draw losses ``L_c,t`` of chain c:

* ``nan``: a loss is NaN or infinite (the step size is far too large).
* ``diverged``: the estimate exceeds ``d / 2`` (d the number of sampled weights) by more than two
  standard errors, or one chain's exceeds ``d``: no minimum of a loss that is locally a sum of
  squares allows more (the exact finite-temperature value is
  ``1/2 sum n*beta*h / (n*beta*h + gamma) < d/2``), so the chains left the basin or the step
  size's bias (variance ``1 / (a (1 - eps a / 4))`` along a direction of curvature a) dominates.
* ``negative``: the estimate is below 0: the chains found lower loss than ``w*``, so ``w*`` is
  not a local minimum of the sampled loss (a checkpoint of a run with weight decay, or one
  still training, is not one of the data loss alone); the number is then not an LLC.
* ``nonstationary``: the mean over chains of ``n_beta * (mean of the last quarter of the draws -
  mean of the first quarter)`` exceeds both 3 standard errors (over chains) and 10% of the
  estimate's magnitude: the chains were still moving (burn-in too short or step size too small).
* ``rhat``: rank-normalised split R-hat over chains above 1.01, and ``ess``: bulk effective
  sample size below 100 per chain, the thresholds of Vehtari et al. 2021 ("Rank-normalization,
  folding, and localization: an improved R-hat"), computed by arviz-stats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RHAT_MAX = 1.01
ESS_PER_CHAIN_MIN = 100
DRIFT_Z, DRIFT_FRACTION = 3.0, 0.1


@dataclass(frozen=True)
class Health:
    """The diagnostics of one estimate.

    Attributes:
        rhat: Rank-normalised split R-hat of the losses over chains (None with one chain).
        ess: Bulk effective sample size of the losses, all chains together.
        drift: ``n_beta * (last-quarter mean - first-quarter mean)``, mean over chains.
        drift_se: Its standard error over chains (None with one chain).
        flags: The names of the raised flags (see the module docstring), in a fixed order.
    """

    rhat: float | None
    ess: float | None
    drift: float
    drift_se: float | None
    flags: tuple[str, ...]

    @property
    def healthy(self) -> bool:
        """No flag raised."""
        return not self.flags


def assess(losses: np.ndarray, init_loss: float, n_beta: float, sampled: int) -> Health:
    """Health of chains whose per-draw losses are `losses`.

    Args:
        losses: ``[chains, draws]`` sampled losses.
        init_loss: ``L_n(w*)``.
        n_beta: n * beta.
        sampled: d, the number of sampled weights.
    """
    from arviz_stats.base import array_stats

    chains, draws = losses.shape
    flags = []
    if not np.isfinite(losses).all():
        return Health(None, None, math.nan, None, ("nan",))
    per_chain = n_beta * (losses.mean(axis=1) - init_loss)
    estimate = float(per_chain.mean())
    quarter = max(1, draws // 4)
    shift = n_beta * (losses[:, -quarter:].mean(axis=1) - losses[:, :quarter].mean(axis=1))
    drift = float(shift.mean())
    drift_se = float(shift.std(ddof=1) / math.sqrt(chains)) if chains > 1 else None
    # Chains whose losses do not vary (a step size far too small) give 0/0: NaN, which flags.
    with np.errstate(divide="ignore", invalid="ignore"):
        rhat = float(array_stats.rhat(losses)) if chains > 1 and draws >= 4 else None
        ess = float(array_stats.ess(losses)) if draws >= 4 else None
    se = float(per_chain.std(ddof=1) / math.sqrt(chains)) if chains > 1 else 0.0
    if estimate - 2 * se > sampled / 2 or (per_chain > sampled).any():
        flags.append("diverged")
    if estimate < 0:
        flags.append("negative")
    if abs(drift) > DRIFT_FRACTION * abs(estimate) and (drift_se is None or abs(drift) > DRIFT_Z * drift_se):
        flags.append("nonstationary")
    if rhat is not None and not rhat <= RHAT_MAX:
        flags.append("rhat")
    if ess is not None and not ess >= ESS_PER_CHAIN_MIN * chains:
        flags.append("ess")
    return Health(rhat, ess, drift, drift_se, tuple(flags))


FLAG_TEXT = {
    "nan": "a loss was NaN or infinite: lower the step size",
    "diverged": "a chain's estimate exceeds d/2: it left the basin; lower the step size",
    "negative": "the chains found lower loss than the checkpoint: it is not a minimum of the sampled loss "
    "(weight decay, or still training); the number is not an LLC",
    "nonstationary": "the loss still moved between the first and last quarter of the draws: burn in longer",
    "rhat": f"R-hat above {RHAT_MAX}: the chains disagree",
    "ess": f"effective sample size below {ESS_PER_CHAIN_MIN} per chain: draw more or step further",
}
"""One line per flag: what it means and what to do."""
