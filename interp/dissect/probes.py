"""Linear probes: is a feature linearly decodable from an activation, on examples the probe never saw?

A probe is scikit-learn's `LogisticRegression` (L2-regularised, inverse strength ``C``) on
features centred and divided by one global scale (their RMS), fitted on one part of the
examples and scored on the rest. Its *direction* is the fitted weight vector (one scale for all
features, so it is also the direction in the raw activation space) normalised to length 1: one
row for a two-class target, one per class otherwise. Held-out accuracy is the measure; training
accuracy is reported beside it because it says nothing alone: n points in general position in
more than n - 1 dimensions are separable under *any* labelling (32 embedding rows in 64
dimensions, say), so a probe that fits its training set perfectly may have found nothing.

* `site_features`: the activation of a site (`interp.dissect.patching.SITES`, named and indexed
  as activation patching names them) at every index, one ``[batch, features]`` matrix each.
* `fit_probe`: one probe on a fixed train / test split of the examples (`held_out_split`).
* `embedding_probe`: a probe on the rows of an embedding matrix (one row per token value),
  scored on *held-out token values* by stratified k-fold cross-validation over the values, so
  it asks whether the labelling generalises across tokens rather than whether it can be fitted.
  `embedding_predictions` gives that cross-validation's verdict on each row (which values the
  probe gets right), so the accuracy can be read on any subset of the values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from interp.dissect.hooks import cache_activations
from interp.dissect.patching import SITES, hook_name, site_indices
from interp.errors import ConfigError


@dataclass(frozen=True)
class ProbeFit:
    """One fitted probe.

    Attributes:
        accuracy: Accuracy on the held-out examples (or values).
        train_accuracy: Accuracy on the examples it was fitted on (all values, for an embedding probe).
        direction: Unit rows in the raw feature space, [1, features] for two classes, else
            [n_classes, features].
        chance: The held-out frequency of the most common training class (what a constant guess scores).
    """

    accuracy: float
    train_accuracy: float
    direction: Float[Tensor, "rows features"]
    chance: float


@dataclass(frozen=True)
class _Fitted:
    """A fitted logistic regression with the centring and the one global scale it was fitted under."""

    logistic: Any
    mean: np.ndarray
    scale: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.logistic.predict((x - self.mean) / self.scale)

    def direction(self) -> Tensor:
        # One scale for every feature, so the direction in the raw space is the fitted one.
        coef = self.logistic.coef_
        norm = np.linalg.norm(coef, axis=1, keepdims=True)
        return torch.from_numpy(coef / np.where(norm > 0, norm, 1.0))


def _fit(x: np.ndarray, y: np.ndarray, c: float) -> _Fitted:
    """Logistic regression on features centred and divided by their RMS (one number).

    One global scale rather than a scale per feature keeps the probe rotation invariant: the
    residual stream has no privileged basis, and scaling each coordinate to unit variance would
    let noisy coordinates weigh as much as the one that carries the feature.
    """
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits  # installed with scikit-learn, which requires it

    mean = x.mean(0)
    rms = float(np.sqrt(np.mean((x - mean) ** 2)))
    scale = rms if rms > 0 else 1.0
    # One BLAS thread: these fits are tiny, and on a loaded machine a thread pool makes each
    # one 20x slower (measured: 390 ms against 16 ms for 32 rows x 64 features).
    with threadpool_limits(1):
        logistic = LogisticRegression(C=c, max_iter=5000).fit((x - mean) / scale, y)
    return _Fitted(logistic, mean, scale)


def _check_classes(labels: np.ndarray, what: str) -> None:
    if len(np.unique(labels)) < 2:
        raise ConfigError(
            f"{what} takes a single value on these examples, so there is nothing to probe",
            "choose another target, position or split",
        )


def held_out_split(n: int, test_frac: float, seed: int) -> tuple[Tensor, Tensor]:
    """A fixed random split of ``range(n)``: ``(train, test)`` index tensors, the test part
    ``round(test_frac * n)`` long (at least 1, leaving at least 1 to train on).
    """
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_test = min(max(round(test_frac * n), 1), n - 1)
    return order[n_test:], order[:n_test]


def fit_probe(
    features: Float[Tensor, "batch features"],
    labels: Int[Tensor, " batch"],
    train: Int[Tensor, " n_train"],
    test: Int[Tensor, " n_test"],
    c: float = 1.0,
    what: str = "the target",
) -> ProbeFit:
    """Fit a probe on the `train` rows and score it on the `test` rows.

    Raises:
        ConfigError: If the labels of the train rows take a single value.
    """
    x, y = features.detach().double().cpu().numpy(), labels.cpu().numpy()
    _check_classes(y[train.numpy()], what)
    probe = _fit(x[train.numpy()], y[train.numpy()], c)
    y_test = y[test.numpy()]
    majority = np.bincount(y[train.numpy()]).argmax()
    return ProbeFit(
        accuracy=float((probe.predict(x[test.numpy()]) == y_test).mean()),
        train_accuracy=float((probe.predict(x[train.numpy()]) == y[train.numpy()]).mean()),
        direction=probe.direction(),
        chance=float((y_test == majority).mean()),
    )


def embedding_probe(
    rows: Float[Tensor, "values d_model"],
    labels: Int[Tensor, " values"],
    folds: int = 5,
    c: float = 1.0,
    seed: int = 0,
) -> ProbeFit:
    """A probe on embedding rows, scored on held-out rows by stratified k-fold cross-validation.

    Every row is predicted once, by the probe fitted on the folds that do not hold it;
    `accuracy` is the fraction predicted right. `train_accuracy` and `direction` are those of
    one probe fitted on every row.

    Args:
        rows: One row per token value (e.g. ``W_E`` without the readout token's row).
        labels: The labelling to decode, e.g. token parity, [values].
        folds: Folds of the cross-validation, capped at the smaller class's size (at least 2).
        c: Inverse regularisation strength.
        seed: Seed of the fold assignment.

    Raises:
        ConfigError: If a class has fewer than 2 rows (nothing can be held out).
    """
    x, y = rows.detach().double().cpu().numpy(), labels.cpu().numpy()
    correct = embedding_predictions(rows, labels, folds, c, seed)
    full = _fit(x, y, c)
    return ProbeFit(
        accuracy=float(correct.double().mean()),
        train_accuracy=float((full.predict(x) == y).mean()),
        direction=full.direction(),
        chance=float(np.bincount(y).max() / len(y)),
    )


def embedding_predictions(
    rows: Float[Tensor, "values d_model"],
    labels: Int[Tensor, " values"],
    folds: int = 5,
    c: float = 1.0,
    seed: int = 0,
) -> Bool[Tensor, " values"]:
    """Whether each row is predicted right by the probe fitted on the folds that do not hold it
    (the cross-validation of `embedding_probe`, whose accuracy is the mean of this), [values].

    Raises:
        ConfigError: If a class has fewer than 2 rows (nothing can be held out).
    """
    from sklearn.model_selection import StratifiedKFold

    x, y = rows.detach().double().cpu().numpy(), labels.cpu().numpy()
    _check_classes(y, "the embedding labelling")
    smallest = int(np.bincount(y)[np.unique(y)].min())
    if smallest < 2:
        raise ConfigError(f"a class of the embedding labelling has {smallest} row", "it needs at least 2")
    cv = StratifiedKFold(n_splits=min(folds, smallest), shuffle=True, random_state=seed)
    predicted = np.empty_like(y)
    for train, test in cv.split(x, y):
        predicted[test] = _fit(x[train], y[train], c).predict(x[test])
    return torch.from_numpy(predicted == y)


def shuffled_embedding_accuracies(
    rows: Float[Tensor, "values d_model"],
    labels: Int[Tensor, " values"],
    shuffles: int,
    folds: int = 5,
    c: float = 1.0,
    seed: int = 0,
) -> Float[Tensor, " shuffles"]:
    """Held-out accuracy of `embedding_probe` on randomly permuted labels, `shuffles` times: the
    chance baseline of a probe with this many rows and dimensions (float64 [shuffles]).
    """
    gen = torch.Generator().manual_seed(seed)
    out = [
        embedding_probe(rows, labels[torch.randperm(len(labels), generator=gen)], folds, c, seed).accuracy
        for _ in range(shuffles)
    ]
    return torch.tensor(out, dtype=torch.float64)


@torch.no_grad()
def site_features(
    model: nn.Module,
    tokens: Int[Tensor, "batch pos"],
    site: str,
    indices: Sequence[tuple[int, ...]],
    chunk: int = 4096,
) -> list[Float[Tensor, "batch features"]]:
    """The activation of `site` at each index, flattened to one feature matrix per index.

    Args:
        model: A hooked transformer.
        tokens: Inputs, [batch, pos].
        site: A key of `interp.dissect.patching.SITES` (``resid_pre``, ``z_pos``, ...).
        indices: ``(layer, ...)`` indices as `interp.dissect.patching.site_indices` gives them.
        chunk: Largest batch run at once.

    Returns:
        One float64 tensor [batch, features] per index (``resid_*``: d_model; ``z_pos``: d_head;
        ``z``: pos * d_head; ``pattern``: query * key positions).
    """
    layers = sorted({index[0] for index in indices})
    names = {layer: hook_name(site, layer) for layer in layers}
    parts: list[list[Tensor]] = [[] for _ in indices]
    for start in range(0, len(tokens), chunk):
        _, cache = cache_activations(model, tokens[start : start + chunk], names.values())
        for out, (layer, *rest) in zip(parts, indices):
            act = cache[names[layer]]
            out.append(act[(slice(None), *SITES[site][2](*rest))].flatten(1).double())
    return [torch.cat(p) for p in parts]


def probe_indices(
    model: nn.Module, site: str, n_pos: int, positions: Sequence[int] | None
) -> list[tuple[int, ...]]:
    """`site_indices` of `site`, kept to `positions` (non-negative) on sites with a position axis."""
    axes = ("layer", *SITES[site][1])
    indices = site_indices(model, site, n_pos)
    if positions is None or "pos" not in axes:
        return indices
    at = axes.index("pos")
    return [index for index in indices if index[at] in set(positions)]
