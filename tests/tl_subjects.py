"""What the TransformerLens-subject oracles share (3.x's `HookedTransformer` in tests/oracle, 4.x's
`TransformerBridge` in tests/tl4): which analyses run on which task, at what size, and how two
results are compared.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from analyses import get_analysis
from interp.errors import ConfigError
from tasks import ModAddTask, MPSPTask

MPSP = MPSPTask(vocab=12, n=4, n_train=64, n_val=32, n_adv=32, r=0.75)
MODADD = ModAddTask(p=11, train_frac=0.6)

# The analyses of a transformer, by the task each runs on here; the rest refuse (REFUSED).
ON_MPSP = (
    "patch",
    "path-patch",
    "attribute",
    "circuit",
    "dla",
    "ablate",
    "fingerprint",
    "grads",
    "probe",
    "rank",
    "llc",
    "llc-calibrate",
)
ON_MODADD = ("fourier", "progress")
REFUSED = {
    "ipr": "needs study C's quadratic MLP",
    "prune": "needs study C's quadratic MLP",
    "drift": "needs --reference when the subject does not come from a checkpoint",
}

# Fewer of the costly repeats (EAP-IG steps, probe shuffles, chain steps): the comparison needs
# every code path, not precision.
PARAMS: dict[str, dict[str, Any]] = {
    "circuit": {"steps": 4, "flips": "label"},
    "probe": {"shuffles": 2, "folds": 3},
    "llc": {"chains": 2, "draws": 6, "burn_in": 4},
    "llc-calibrate": {"chains": 2, "draws": 6, "burn_in": 4, "step_sizes": "1e-4,1e-3", "n_betas": "1x"},
}


def params_of(analysis: Any) -> Any:
    """`analysis`'s parameters at the size of `PARAMS`."""
    return analysis.params(**PARAMS.get(analysis.name, {}))


def same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """The same columns and rows; numbers equal to 1e-4, everything else exactly."""
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    for column in a.columns:
        x, y = a[column].to_numpy(), b[column].to_numpy()
        if np.issubdtype(x.dtype, np.number) and np.issubdtype(y.dtype, np.number):
            np.testing.assert_allclose(x.astype(float), y.astype(float), rtol=1e-4, atol=1e-4, err_msg=column)
        else:
            assert list(x) == list(y), column


def assert_same_results(name: str, pairs: dict[str, tuple[Any, Any]], their_class: str) -> None:
    """Analysis `name` on the TransformerLens subject (of class `their_class`) equals it on ours
    holding the same weights, and its figure builds from their result.
    """
    analysis = get_analysis(name)
    theirs, ours = pairs["modadd" if name in ON_MODADD else "mpsp"]
    assert type(theirs.model).__name__ == their_class and type(ours.model).__name__ == "Transformer"
    torch.manual_seed(0)
    on_theirs = analysis.compute(theirs, params_of(analysis))
    torch.manual_seed(0)
    on_ours = analysis.compute(ours, params_of(analysis))
    same_frames(on_theirs.to_frame(), on_ours.to_frame())
    on_theirs.figure()


def assert_refused_in_one_line(name: str, subject: Any, match: str) -> None:
    """Analysis `name` refuses `subject` with a one-line `ConfigError` matching `match`."""
    analysis = get_analysis(name)
    with pytest.raises(ConfigError, match=match) as info:
        analysis.compute(subject, params_of(analysis))
    assert "\n" not in str(info.value)
