"""The test suite checks tensor shapes: a call that breaks an annotation fails (pyproject's
``--jaxtyping-packages``), and configs still give their own one-line errors.
"""

from __future__ import annotations

import jaxtyping
import pytest
import torch

from interp.dissect.rank_stats import spearman
from interp.errors import ConfigError
from tasks import MPSPTask


def test_a_deliberately_wrong_shape_fails():
    # "... n" on both arguments: 3 and 4 values along the last dimension do not pair up.
    with pytest.raises(jaxtyping.TypeCheckError, match="spearman"):
        spearman(torch.zeros(3), torch.zeros(4))


def test_configs_keep_their_own_messages_under_the_type_checker():
    with pytest.raises(ConfigError, match=r"MPSPTask.r = '0.9' is invalid"):
        MPSPTask(r="0.9")
