"""Numbers in docs/study_b.md's prose, each read back from the committed records of protocol 6
(results/study-b/protocol-6/, and the models kept in results/study-b/protocol-6-models/). A page
whose number differs from its record fails here; so does a verdict that differs from the one
`analyses.studies.study_b.verdict.verdict` computes.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from analyses.studies.study_b import readings
from analyses.studies.study_b.tables import read_frame
from analyses.studies.study_b.verdict import verdict
from tests.docs.prose import ROOT, STUDY_B, joined, page_prose, regenerated_shift, span

RECORDS = STUDY_B / "protocol-6"
MODELS = STUDY_B / "protocol-6-models"
PAGE = (ROOT / "docs" / "study_b.md").read_text()


def _prose() -> str:
    return page_prose(ROOT / "docs" / "study_b.md")


def _runs() -> pd.DataFrame:
    return read_frame(RECORDS / "study_b_runs.csv")


def test_the_page_states_the_verdict_the_function_computes_with_its_reasons():
    found = verdict(RECORDS)
    assert found.outcome == "contradicted"  # what the page builds its prose on
    prose = _prose()
    assert f"That is: **{found.outcome}** as stated, because" in prose
    for reason in found.reasons:
        assert f'"{reason}"' in prose, reason
    assert "changes nothing here: protocol 6 meets one outcome only" in prose
    assert f"**+{found.mean:.3f}, 95% t-interval [{found.low:.3f}, +{found.high:.3f}]**" in prose


def test_each_seeds_retention_after_random_noise():
    acc = (
        _runs().query("noise == 'random'").pivot_table(index="seed", columns="model", values="test_acc_after")
    )
    stated = (
        f"the equilibrium samples kept {joined(acc['wlmd'])} of the task, their AdamW models "
        f"{joined(acc['adamw'])}"
    )
    assert stated in _prose()
    assert (acc["wlmd"] > acc["adamw"]).all() and (acc["adamw"] >= 0.75).all()  # "every sample kept more"


@pytest.mark.parametrize("noise", ["square", "sum"])
def test_the_other_noises_mean_differences(noise):
    acc = _runs().query("noise == @noise").pivot_table(index="seed", columns="model", values="test_acc_after")
    assert (
        f"{noise} noise{' gives' if noise == 'square' else ''} +{(acc['wlmd'] - acc['adamw']).mean():.3f}"
        in (_prose())
    )


def test_the_share_of_forgetting_avoided_and_the_ceiling():
    shares = readings.forgetting_avoided(RECORDS)
    summary = readings.summary_of_shares(shares)
    prose = _prose()
    assert f"the largest mean gap the three seeds allowed was {summary['mean_ceiling']:.3f}" in prose
    assert summary["mean_ceiling"] < 0.2  # "below the rule's 0.2"
    stated = (
        f"per seed `(W - A) / (1 - A)`: {joined(shares['share'])}, mean **{summary['mean']:.3f}, 95% "
        f"t-interval [{summary['low']:.3f}, +{summary['high']:.3f}]**"
    )
    assert stated in prose
    assert f"imply a share of about {summary['study']:.1f}" in prose
    assert (
        summary["high"] < 0.4 and 1 / 7 < summary["mean"] < 1 / 5
    )  # "at most about a third, most likely a sixth"


def test_raw_ranks_quoted_from_the_rank_table():
    ranks = read_frame(RECORDS / "study_b_ranks_random.csv").set_index("matrix")
    prose = _prose()
    q, w_in = ranks.loc["W_Q"], ranks.loc["W_in"]
    assert f"W_Q has raw rank {q['adamw before']:.1f} in the AdamW models and {q['wlmd before']:.1f}" in prose
    assert f"W_in has {w_in['adamw before']:.1f} and {w_in['wlmd before']:.1f}" in prose
    assert f"The samples' raw W_Q rank of {q['wlmd before']:.1f}" in prose


def test_a_gaussian_matrix_of_w_qs_shape_has_the_stated_effective_rank():
    import torch

    from interp.dissect.weights import effective_rank

    ranks = [
        effective_rank(torch.randn(128, 128, generator=torch.Generator().manual_seed(s))) for s in range(5)
    ]
    assert f"(128 × 128) has effective rank {sum(ranks) / len(ranks):.0f}" in _prose()


def test_movement_during_injection_and_the_steps_to_the_target():
    facts = readings.injection_facts(RECORDS)
    prose = _prose()
    wlmd, adamw = facts["wlmd"], facts["adamw"]
    assert f"{wlmd['cosine_mean']:.3f} for WLMD against {adamw['cosine_mean']:.3f} for AdamW" in prose
    runs = (
        _runs()
        .query("noise == 'random'")
        .pivot_table(index="seed", columns="model", values="cosine_before_after")
    )
    assert (runs["wlmd"] > runs["adamw"]).all()  # "higher in every seed"
    stated = (
        f"{wlmd['steps_min']}-{wlmd['steps_max']} for WLMD against "
        f"{adamw['steps_min']:,}-{adamw['steps_max']:,} for AdamW"
    )
    assert stated in prose
    others = (
        _runs().query("noise != 'random'").groupby(["noise", "model"])["cosine_before_after"].mean().unstack()
    )
    assert ((others["wlmd"] - others["adamw"]).abs() < 0.01).all()  # "within 0.01 on average"


def test_seed_2s_adamw_model_is_the_poorly_converged_one():
    walks = read_frame(RECORDS / "study_b_wlmd.csv").set_index("seed")
    stated = (
        f"Its ln(train loss) is {walks.loc[2, 'x_adamw']:.2f}, against {walks.loc[0, 'x_adamw']:.2f} and "
        f"{walks.loc[1, 'x_adamw']:.2f} for seeds 0 and 1 (its sample sits at {walks.loc[2, 'x_wlmd']:.2f})"
    )
    assert stated in _prose()
    cos = walks["cosine_adamw_wlmd"]
    assert f"cosine {cos.min():.2f}-{cos.max():.2f} from it" in _prose()


def test_what_the_walks_records_say_about_convergence():
    facts = readings.walk_facts(RECORDS)
    prose = _prose()
    assert (
        set(facts["final_ln_f"]) == {0.625} and "Every walk stopped at ln f 0.625, after 4 halvings" in prose
    )
    ends = (
        ", ".join(f"{h[-1]:,}" for h in facts["halvings"][:-1]) + f" and {facts['halvings'].iloc[-1][-1]:,}"
    )
    assert f"(at steps {ends})" in prose
    visited = facts["visited"].tolist()
    assert visited == [4, 4, 8] and "flat over 4 x-bins (seed 2: 8 bins)" in prose
    assert f"lowest y in the last stage was {facts['y_min'].min():.3f} or above" in prose
    (stage,) = set(facts["stage_ln_f"])
    ratio = facts["S_change_median"] / stage
    stated = (
        f"In the last stage (ln f {stage}) the shape of S still moved by a median of "
        f"{span(facts['S_change_median'])} per 1,000 steps (up to {facts['S_change_max'].max():.0f}), "
        f"{span(ratio)} times the stage's ln f"
    )
    assert stated in prose
    pairs = [f"{a:.3f} to {b:.3f}" for a, b in zip(facts["cosine_stage_start"], facts["cosine_end"])]
    assert f"({pairs[0]}, {pairs[1]} and {pairs[2]})" in prose
    assert (facts["cosine_end"] < facts["cosine_stage_start"]).all()


def test_the_samples_came_from_the_first_production_steps():
    settings = json.loads((RECORDS / "settings.json").read_text())["wlmd"]
    for seed in range(3):
        walk_end = json.loads((RECORDS / f"seed_{seed}" / "walk.json").read_text())[-1]["step"]
        log = [
            json.loads(line) for line in (MODELS / f"seed_{seed}" / "wlmd-sample" / "metrics.jsonl").open()
        ]
        assert len(log) == settings["max_samples"]
        assert max(r["sampler_step"] for r in log) - walk_end <= 200, seed
    assert (
        settings["max_samples"] == 4
        and "All four of each seed came from the first 200 production steps" in _prose()
    )


def test_the_regenerated_models_shift_as_stated():
    """The models kept in protocol-6-models were recomputed from the state on a later machine:
    the page quotes how far their accuracies moved and their random-noise difference.
    """
    found = regenerated_shift(RECORDS, MODELS)
    stated = (
        f"moved them by up to {found['shift']:.3f}, and the random-noise difference to +{found['mean']:.3f}, "
        f"95% t-interval [{found['low']:.3f}, +{found['high']:.3f}]"
    )
    assert stated in _prose() and found["high"] < 0.2  # "the same verdict"


def test_the_used_ranks_quoted_from_the_committed_table():
    means = readings.used_rank_means(RECORDS)
    ranks = read_frame(RECORDS / "used_ranks.csv").set_index(["seed", "model", "matrix"])
    prose = _prose()
    assert ((means.xs("W_Q", level="matrix")["used"] - 1).abs() < 1e-9).all()  # "rank 1 in every model"
    outside = means["outside_share"]
    assert (
        f"{outside[('wlmd', 'W_Q')]:.0%} of their W_Q's norm is in directions no input has, against "
        f"{outside[('adamw', 'W_Q')]:.0%} for AdamW"
    ) in prose
    used = means["used"]
    for matrix in ("W_K", "W_V", "W_in", "W_out"):  # "Before injection: W_K 58.3 against 3.9, ..."
        assert f"{matrix} {used[('wlmd', matrix)]:.1f} against {used[('adamw', matrix)]:.1f}" in prose, matrix
    spans = ranks.xs("W_in", level="matrix")["span"]
    wlmd, adamw = spans.xs("wlmd", level="model"), spans.xs("adamw", level="model")
    assert set(wlmd) == {128}
    assert (
        f"span all 128 dimensions in the samples and {adamw.min()}-{adamw.max()} in the AdamW models" in prose
    )


def test_every_script_the_reproduce_table_names_exists():
    scripts = re.findall(r"python (scripts/\S+\.py)", PAGE)
    assert scripts and all((ROOT / path).is_file() for path in scripts), scripts
