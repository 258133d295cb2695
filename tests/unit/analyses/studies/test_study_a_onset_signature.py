"""The onset signature's description (analyses/studies/study_a/onset_signature.py) on metrics
built here, where each of its three conditions is known by construction.
"""

from __future__ import annotations

import pandas as pd
import pytest

from analyses.studies.study_a.onset_signature import WINDOW, describe, signature_anywhere, signature_summary


def _records(acc, cos, amp, every=25):
    """Evaluations every `every` epochs with val and adv accuracy `acc` and the gradient measures."""
    return [
        {"step": every * i, "val/acc": 1.0, "adv/acc": a, "train/grad_cos": c, "train/grad_amp_weighted": m}
        for i, (a, c, m) in enumerate(zip(acc, cos, amp))
    ]


# phase 2: adv at 0 for evaluations 0-9, rising over 10-12, at 1 from 13 on
ACC = [0.0] * 10 + [0.3, 0.6, 0.9] + [1.0] * 5


def test_conflict_then_agreement_with_amplification_is_the_signature():
    cos = [0.5] * 6 + [-0.4] * 4 + [0.1, 0.3, 0.5] + [0.6] * 5
    amp = [1.0] * 7 + [1.6] * 3 + [1.2] * 8
    row = describe(_records(ACC, cos, amp))
    assert (row["onset"], row["end"]) == (225, 325)  # the last plateau evaluation, the first at >= 0.95
    assert (
        row["cos before (min)"] == -0.4 and row["cos during (max)"] == 0.6 and row["amp before (max)"] == 1.6
    )
    assert row["signature"] is True and row["signature anywhere"] is True


@pytest.mark.parametrize(
    "cos, amp, why",
    [
        ([0.5] * 18, [1.6] * 18, "no conflict before"),
        ([-0.4] * 18, [1.6] * 18, "no agreement during"),
        ([0.5] * 6 + [-0.4] * 4 + [0.5] * 8, [0.8] * 18, "not amplified"),
    ],
)
def test_each_missing_condition_breaks_the_signature(cos, amp, why):
    assert describe(_records(ACC, cos, amp))["signature"] is False, why


def test_only_the_window_before_the_onset_counts():
    early = [-0.4] + [0.5] * 17  # conflict long before the onset, outside the window
    amp = [1.6] * 18
    assert WINDOW < 9 and describe(_records(ACC, early, amp))["signature"] is False
    assert describe(_records(ACC, early, amp))["signature anywhere"] is True


def test_a_run_without_phase_2_is_described_by_the_signature_anywhere():
    flat = [0.0] * 18
    row = describe(_records(flat, [-0.2] * 9 + [0.2] * 9, [1.3] * 18))
    assert row["onset"] is None and row["signature"] is None and row["signature anywhere"] is True
    assert not signature_anywhere(_records(flat, [0.2] * 9 + [-0.2] * 9, [1.3] * 18))  # order matters
    assert not signature_anywhere(_records(flat, [-0.2] * 9 + [0.2] * 9, [0.9] * 18))  # never amplified


def test_the_summary_counts_per_cell():
    table = pd.DataFrame(
        [
            {
                "sweep": "s",
                "preset": "p",
                "r": 0.9,
                "seed": 0,
                "onset": 10,
                "signature": True,
                "signature anywhere": True,
            },
            {
                "sweep": "s",
                "preset": "p",
                "r": 0.9,
                "seed": 1,
                "onset": None,
                "signature": None,
                "signature anywhere": False,
            },
            {
                "sweep": "s",
                "preset": "p",
                "r": 0.5,
                "seed": 0,
                "onset": None,
                "signature": None,
                "signature anywhere": True,
            },
        ]
    )
    summary = signature_summary(table).set_index("r")
    assert summary.loc[0.9, "phase 2"] == "1/2" and summary.loc[0.9, "signature before the rule"] == "1/1"
    assert summary.loc[0.5, "phase 2"] == "0/1" and summary.loc[0.5, "signature anywhere"] == "1/1"
