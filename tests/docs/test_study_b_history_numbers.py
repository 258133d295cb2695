"""Numbers in docs/study_b_history.md's prose, each read back from the committed records of the
protocols and diagnostics it tells (results/study-b/: protocol-2 to protocol-6, protocol-2-walkers,
protocol-2-remeasured, protocol-6-models, pilots/). A page whose number differs from its record
fails here.

The page's tables of paired differences, its protocol-3 settings table (steps, budget and
targets) and the pilots' coverage steps are checked in tests/docs/test_docs.py. Not checked
anywhere, because no record holds them: protocol 1's numbers (its runs were never exported, as
the page says), the dates, times and commits of the sequence (git facts), the states' sizes and
the regeneration's timings.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pandas as pd

from analyses.studies.study_b.tables import read_frame, untested
from analyses.studies.study_b.verdict import verdict
from tests.docs.prose import ROOT, STUDY_B, joined, page_prose, regenerated_shift, span

NUMBERS = {1: "one", 2: "two", 3: "three"}


@cache
def _prose() -> str:
    return page_prose(ROOT / "docs" / "study_b_history.md")


def _prose_lines() -> list[str]:
    return (ROOT / "docs" / "study_b_history.md").read_text().splitlines()


def _settings(protocol: str) -> dict[str, Any]:
    return json.loads((STUDY_B / protocol / "settings.json").read_text())


def _walks(protocol: str) -> pd.DataFrame:
    return read_frame(STUDY_B / protocol / "study_b_wlmd.csv").set_index("seed")


def _walk(protocol: str, seed: int) -> list[dict[str, Any]]:
    return json.loads((STUDY_B / protocol / f"seed_{seed}" / "walk.json").read_text())


def _random(protocol: str) -> pd.DataFrame:
    """Test accuracy after random noise, one row per seed, one column per model."""
    runs = read_frame(STUDY_B / protocol / "study_b_runs.csv").query("noise == 'random'")
    return runs.pivot_table(index="seed", columns="model", values="test_acc_after")


def _testing(protocol: str) -> list[int]:
    """The seeds whose sample tests the claim, by `untested`."""
    settings = _settings(protocol)
    return [seed for seed, row in _walks(protocol).iterrows() if untested(row, settings) is None]


def _power(n: int) -> str:
    """``10⁵`` or ``3·10⁵``, as the page writes round step counts."""
    digits = len(str(n)) - 1
    lead, rest = divmod(n, 10**digits)
    assert rest == 0, n
    exponent = str(digits).translate(str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"10{exponent}" if lead == 1 else f"{lead}·10{exponent}"


def _outside_window(record: dict[str, Any], start: dict[str, Any], wlmd: dict[str, Any]) -> bool:
    """Whether walker 0 of a walk record lies outside the production window around its start
    (`analyses.studies.study_b.settings.WLMDSettings.window`: x within ``window_x`` of the
    start's, y at least the start's or ``window_y``, whichever is lower).
    """
    x0, y0 = start["x"][0], start["y"][0]
    return abs(record["x"][0] - x0) > wlmd["window_x"] or record["y"][0] < min(y0, wlmd["window_y"])


def test_the_sequence_tables_settings_and_readings():
    p2, p3, p4, p5 = (_settings(f"protocol-{n}") for n in (2, 3, 4, 5))
    prose = _prose()
    walk = p2["wlmd"]
    assert (
        f"walks of {_power(walk['steps'])}-{_power(walk['max_steps'])} steps to a cosine target of "
        f"{walk['target_cosine']}; injections to {p2['injection_target_acc']:.1%}, no cap below "
        f"{p2['max_steps']:,}"
    ) in prose
    walk = p3["wlmd"]
    assert walk["edges"] == "linear" and walk["flat_over"] == "x"  # "linear grid edges", "flat over x"
    assert (
        f"the classic ln f schedule from {walk['ln_f0']:.0f}, flat over x; targets: cosine ≤ "
        f"{walk['target_cosine']} and {walk['target_halvings']} halvings"
    ) in prose
    assert p4["wlmd"]["max_steps"] == 2 * walk["max_steps"]
    assert f"protocol 3 with twice the step budget ({p4['wlmd']['max_steps']:,})" in prose
    assert p5["wlmd"]["production_steps"] == 10 * p4["wlmd"]["production_steps"]
    assert f"protocol 4 with ten times the production steps ({p5['wlmd']['production_steps']:,})" in prose
    assert verdict(STUDY_B / "protocol-2").seeds == 0 and "| not tested: no walk met its targets |" in prose
    for n in (3, 4, 5):
        found, seeds = verdict(STUDY_B / f"protocol-{n}"), len(_walks(f"protocol-{n}"))
        of = f" of {NUMBERS[seeds]} tests the claim" if n == 3 else ""
        assert f"| {found.outcome}: {NUMBERS[found.seeds]} seed{of} |" in prose, n
    found = verdict(STUDY_B / "protocol-6")
    assert f"| **{found.outcome} as stated**: {NUMBERS[found.seeds]} seeds |" in prose


def test_one_walker_a_seed_and_protocol_2s_preregistered_settings():
    for n in range(2, 7):
        assert _settings(f"protocol-{n}")["wlmd"]["walkers"] == 1, n  # "one walker a seed"
    p2 = _settings("protocol-2")
    walk, prose = p2["wlmd"], _prose()
    assert (
        f"combined train accuracy above {p2['injection_target_acc']:.1%}) with the norm constraint dropped "
        f"and a cap of {p2['max_steps']:,} steps"
    ) in prose and not p2["injection_keep_norm"]
    assert (
        f"Walks run at least {_power(walk['steps'])} steps on protocol 1's narrow grid, then on in chunks "
        f"of {walk['report_every']:,} until the walker's cosine to its AdamW start is ≤ "
        f"{walk['target_cosine']} (budget {_power(walk['max_steps'])})"
    ) in prose
    assert f"its last histogram is {p2['target_flatness']:.0%} flat" in prose
    walkers = _settings("protocol-2-walkers")["wlmd"]["walkers"]
    assert f"a variant with {NUMBERS[walkers]} walkers" in prose
    assert len(_walk("protocol-2-walkers", 0)[-1]["x"]) == walkers


def test_protocol_2s_walks_stayed_at_the_wall_near_their_starts():
    walks, settings = _walks("protocol-2"), _settings("protocol-2")
    assert all(untested(row, settings) for _, row in walks.iterrows())  # "No walk met both targets"
    assert (walks["walk_flatness"] < 0.01).all()  # "the histograms never became flat"
    cosines = walks.loc[[0, 1], "walk_cosine_max"]
    assert f"(cosine {joined(cosines)} to their starts in seeds 0 and 1)" in _prose()
    x_above = settings["wlmd"]["x_above"]
    for seed in walks.index:  # "the walkers sat at the grid's upper wall"
        records = _walk("protocol-2", seed)
        assert abs(records[-1]["x"][0] - (records[0]["x"][0] + x_above)) < 1e-3, seed


def _machine_moves() -> list[pd.Series]:
    """Per move of a measurement to another machine, the same models' test accuracies after
    injection on both: protocol 2's seed 0 re-measured, protocol 4's seed 2 AdamW (re-injected on
    the replacement machine) against protocol 3's, and protocol 5's rows (the replacement
    machine) against protocol 4's for the seeds that had them.
    """
    key = ["seed", "model", "noise"]

    def acc(protocol: str) -> pd.Series:
        return read_frame(STUDY_B / protocol / "study_b_runs.csv").set_index(key)["test_acc_after"]

    remeasured = acc("protocol-2-remeasured")
    moves = [(remeasured - acc("protocol-2").loc[remeasured.index]).abs()]
    p3, p4, p5 = acc("protocol-3"), acc("protocol-4"), acc("protocol-5")
    seed_2 = p4.xs((2, "adamw"), level=["seed", "model"], drop_level=False)
    moves.append((seed_2 - p3.loc[seed_2.index]).abs())
    both = p5.index.intersection(p4.index).drop(seed_2.index)
    moves.append((p5.loc[both] - p4.loc[both]).abs())
    return moves


def test_the_same_models_on_another_machine():
    moves, prose = _machine_moves(), _prose()
    assert f"The same walk and the same models gave accuracies up to {moves[0].max():.2f} apart" in prose
    largest = max(move.max() for move in moves)
    assert f"gives accuracies up to {largest:.2f} apart" in prose
    random = [_random(p).loc[2, "adamw"] for p in ("protocol-4", "protocol-3")]
    assert f"kept {random[0]:.3f} of the task there and {random[1]:.3f} on the machine" in prose


def test_the_wall_diagnostic_on_protocol_2s_seed_0():
    wall = json.loads((STUDY_B / "pilots" / "wall" / "seed_0.json").read_text())
    assert wall["forces"]["flat"]["force"] == 0.0 and wall["forces"]["linear"]["force"] > 0  # "no bias force"
    assert "a walker pressed to the wall felt **no bias force at all**" in _prose()
    walk, records = _settings("protocol-2")["wlmd"], _walk("protocol-2", 0)
    assert walk["x_below"] + walk["x_above"] == 1  # the grid: "one unit of ln(loss)"
    assert "a flat histogram over one unit of ln(loss) needs S to span thousands" in _prose()
    top, below = records[-1]["S"][-1], records[-1]["S"][-2]
    built = max(a - b for a, b in zip(top, below))
    assert records[-1]["step"] == walk["max_steps"] and walk["rise"] > 0  # a ramp, then 1/t
    assert (
        f"protocol 2's ramp schedule (ln f {walk['ln_f_max']}, decaying as 1/t) had built a difference "
        f"of {built:.0f} between its two top x-bins in {_power(records[-1]['step'])} steps"
    ) in _prose()


def test_protocol_3s_pilots_and_its_settings_table():
    from analyses.studies.study_b.diagnostics.cover import COVER_STEPS, cover_table
    from interp.wlmd.grid import Schedule

    prose, flat = _prose(), Schedule().flatness
    seed = json.loads((STUDY_B / "pilots" / "adamw-seed100" / "config.json").read_text())["train"]["seed"]
    table = cover_table(STUDY_B / "pilots" / "cover").set_index("variant")
    assert (table["steps run"] == COVER_STEPS).all()
    assert f"Three variants on a pilot seed ({seed}), {COVER_STEPS:,} steps each" in prose
    assert f"(ln f halved when the histogram, summed over y, is {flat:.0%} flat over every x-bin)" in prose
    rows = {line.split("|")[1].strip(): line for line in _prose_lines() if line.startswith("| `")}
    for variant, row in table.iterrows():
        pilot = json.loads((STUDY_B / "pilots" / "cover" / variant / "pilot.json").read_text())
        ln_f0 = pilot["overrides"]["ln_f0"]
        assert rows[f"`{variant}`"].startswith(f"| `{variant}` | {ln_f0:.0f} |"), variant
        assert f": {row['x-bins']:.0f} bins |" in rows[f"`{variant}`"], variant
    p2, p3 = _settings("protocol-2")["wlmd"], _settings("protocol-3")["wlmd"]
    assert f"| ramp to {p2['ln_f_max']}, then 1/t |" in prose
    assert f"| classic: from {p3['ln_f0']:.0f}, halved whenever {flat:.0%} flat over every x-bin |" in prose
    assert (
        f"cosine ≤ {p3['target_cosine']} and flatness ≥ {_settings('protocol-2')['target_flatness']}" in prose
    )


def test_the_reading_kept_by_every_later_protocol():
    from analyses.studies.study_b.verdict import CLAIMED_GAP

    assert (
        "**supported** if it lies above 0, **contradicted** as stated if its upper end is below "
        f"{CLAIMED_GAP}, **undecided** otherwise"
    ) in _prose()


def test_the_last_stages_change_of_s_that_contradicts_the_four_halvings_argument():
    from analyses.studies.study_b import readings

    facts = readings.walk_facts(STUDY_B / "protocol-6")
    stated = f"S still changed by a median of {span(facts['S_change_median'])} per 1,000 steps"
    assert stated in _prose()


def test_protocol_3s_result():
    walks, walk = _walks("protocol-3"), _settings("protocol-3")["wlmd"]
    short = walks.loc[[0, 2]]  # "used their whole budget one halving short of the target"
    assert (short["walk_steps"] == walk["max_steps"]).all()
    assert (short["walk_halvings"] == walk["target_halvings"] - 1).all()
    assert walks.loc[2, "samples"] == 0  # "seed 2's production found no sample"
    assert _testing("protocol-3") == [1]
    one, acc = walks.loc[1], _random("protocol-3").loc[1]
    assert one["walk_halvings"] == walk["target_halvings"] and one["walk_cosine_max"] <= walk["target_cosine"]
    assert (
        f"Seed 1's walk met both targets at step {one['walk_steps']:,.0f} (cosine {one['walk_cosine_max']:.2f}) "
        f"and is the only row that tests the claim: it kept {acc['wlmd']:.3f} against AdamW's {acc['adamw']:.3f}"
    ) in _prose()


def test_protocol_3s_later_stages_grew_longer():
    halvings = [
        r["step"]
        for a, r in zip(_walk("protocol-3", 0), _walk("protocol-3", 0)[1:])
        if r["ln_f"] != a["ln_f"]
    ]
    stages = [b - a for a, b in zip([0, *halvings], halvings)]
    assert stages == sorted(stages) and len(stages) == 3
    assert f"(seed 0's: {joined(stages, '{:,}')} steps)" in _prose()
    budget = _settings("protocol-4")["wlmd"]["max_steps"]
    assert f"protocol 4 is protocol 3 with a budget of {budget:,} steps" in _prose()


def _held_from(records: list[dict[str, Any]], every: int) -> tuple[int, int]:
    """The first recorded step from which a walker was reflected at the wall at least 95% of the
    steps of every later record, and how many steps after it were not reflections.
    """
    moved = [r for a, r in zip(records, records[1:]) if r["walls"] - a["walls"] < 0.95 * every]
    start = moved[-1]["step"] if moved else records[0]["step"]
    first = next(r for r in records if r["step"] == start)
    return start, (records[-1]["step"] - start) - (records[-1]["walls"] - first["walls"])


def test_protocol_4s_result():
    walks, walk = _walks("protocol-4"), _settings("protocol-4")["wlmd"]
    zero, prose = walks.loc[0], _prose()
    assert (
        zero["walk_halvings"] == walk["target_halvings"] and zero["walk_cosine_max"] <= walk["target_cosine"]
    )
    assert zero["samples"] == 0
    assert (
        f"Seed 0's walk met both targets at step {zero['walk_steps']:,.0f} (cosine {zero['walk_cosine_max']:.2f}), "
        f"but its {walk['production_steps']:,} production steps found no sample"
    ) in prose
    records = _walk("protocol-4", 2)
    held, not_reflected = _held_from(records, walk["report_every"])
    assert records[-1]["step"] == walk["max_steps"]  # "ran to the budget"
    x_edge = records[0]["x"][0] + walk["x_above"]
    assert all(abs(r["x"][0] - x_edge) < 1e-3 for r in records if r["step"] >= held)  # "at the upper wall"
    assert (
        f"Seed 2's walker was held at the upper wall from step {held:,} (every later step but "
        f"{not_reflected} a reflection) and ran to the budget"
    ) in prose
    assert _testing("protocol-4") == [1]


def test_protocol_5s_reasons_and_result():
    p3, p4, p5 = (_settings(f"protocol-{n}")["wlmd"] for n in (3, 4, 5))
    failed = [("protocol-4", 0), ("protocol-3", 2)]  # "Two productions ... found nothing"
    for protocol, seed in failed:
        records = _walk(protocol, seed)
        assert _walks(protocol).loc[seed, "samples"] == 0
        assert _outside_window(records[-1], records[0], p4), (protocol, seed)
    assert p3["production_steps"] == p4["production_steps"]
    # The walks finished when protocol 5 was fixed: protocol 3's three and protocol 4's seed 0.
    finished = [("protocol-3", s) for s in range(3)] + [("protocol-4", 0)]
    longest = 0
    for protocol, seed in finished:
        records, run = _walk(protocol, seed), 0
        for record in records[1:]:
            run = run + 1 if _outside_window(record, records[0], p4) else 0
            longest = max(longest, run)
    prose = _prose()
    assert (
        f"found nothing in {p4['production_steps']:,} steps, while walkers stayed outside it for up to "
        f"{longest * p4['report_every']:,} steps in a row"
    ) in prose
    assert f"Protocol 5 is protocol 4 with up to {p5['production_steps']:,} production steps" in prose
    walks, acc = _walks("protocol-5"), _random("protocol-5").loc[1]
    assert (walks.loc[[0, 2], "samples"] == 0).all()
    assert f"Seeds 0's and 2's {p5['production_steps']:,} production steps found no sample" in prose
    assert f"kept {acc['wlmd']:.3f} against AdamW's {acc['adamw']:.3f}: undecided" in prose


def test_the_stuck_walker_freed_and_protocol_6s_walks():
    wall = STUDY_B / "pilots" / "wall"
    (kept,) = json.loads((wall / "protocol-4-seed_2-kept.json").read_text())["continuations"]
    (fresh,) = json.loads((wall / "protocol-4-seed_2-fresh.json").read_text())["continuations"]
    assert kept["from_step"] == fresh["from_step"] and kept["steps"] == fresh["steps"]
    assert kept["walls"] == kept["steps"] and kept["bins"] == 1  # the kept force: never moves
    assert min(fresh["x_range"]) < fresh["x_top_centre"] and fresh["bins"] > 1  # the fresh one: off the wall
    prose = _prose()
    assert f"a diagnostic on its state at step {fresh['from_step']:,}" in prose
    assert f"the force frees it within {fresh['steps']:,} steps" in prose
    for n in range(2, 6):  # "Every walk of protocols 1-5 ran with the defect"
        assert _settings(f"protocol-{n}")["wlmd"].get("wall_force", "kept") == "kept", n
    walk, walks = _settings("protocol-6")["wlmd"], _walks("protocol-6")
    assert walk["wall_force"] == "fresh"
    assert _testing("protocol-6") == [0, 1, 2] and (walks["samples"] == walk["max_samples"]).all()
    assert f"All three walks met both targets within {walks['walk_steps'].max():,} steps" in prose


def test_the_models_regenerated_from_protocol_6s_state():
    found = regenerated_shift()
    prose = _prose()
    assert f"differ from the records by up to {found['shift']:.3f}" in prose
    assert (
        f"On random noise WLMD - AdamW became +{found['mean']:.3f}, 95% t-interval "
        f"[{found['low']:.3f}, +{found['high']:.3f}]: still contradicted as stated"
    ) in prose and found["high"] < 0.2
    walks = _walks("protocol-6")
    for seed in walks.index:  # "a few 10⁻⁶ of ln(loss) from the recorded ones"
        log = (STUDY_B / "protocol-6-models" / f"seed_{seed}" / "wlmd-sample" / "metrics.jsonl").read_text()
        sample = json.loads(log.splitlines()[-1])
        assert 0 < abs(sample["x"] - walks.loc[seed, "x_wlmd"]) < 1e-5, seed
    assert "The samples came out a few 10⁻⁶ of ln(loss) from the recorded ones" in prose


def test_the_classic_schedules_error_by_halving_is_the_committed_toy_records():
    """The classic-schedule section quotes results/study-b/classic-toy/errors.csv (written by
    scripts/long_runs/study_b_classic_toy.py): its table and the numbers its prose reads off it.
    """
    import numpy as np

    from analyses.studies.study_b.diagnostics.classic_toy import table

    errors = pd.read_csv(STUDY_B / "classic-toy" / "errors.csv")
    page = (ROOT / "docs" / "study_b_history.md").read_text()
    assert table(errors) in page
    assert errors.groupby("seed")["finished"].last().all()  # every walk reached ln f below 1e-4
    at_stop = errors.query("halvings == 4")["max_deviation"]
    assert errors.query("halvings == 4")["ln_f"].eq(0.625).all()
    prose = _prose()
    assert f"the error in S was {at_stop.min():.2f}-{at_stop.max():.2f}" in prose
    ratio = at_stop / 0.625
    assert f"{np.floor(ratio.min()):.0f}-{np.ceil(ratio.max()):.0f} times its ln f" in prose
    centres = np.linspace(1.0, 4.0, 11)[:-1] + 0.15  # the toy's 10 bins of E from 1 to 4
    exact_span = 2 * np.log(centres[-1] / centres[0])  # (d/2 - 1) ln E with d = 6
    assert f"the exact `ln g` itself spans {exact_span:.1f}" in prose
    assert at_stop.min() > exact_span  # "more than the whole span of the exact ln g"
    worst = errors.groupby("halvings")["max_deviation"].max()
    first = int(worst[worst.lt(0.5)[::-1].cummin()[::-1]].index.min())  # below 0.5 from here on
    ln_f = errors.set_index("halvings")["ln_f"].groupby(level=0).first()[first]
    assert f"below 0.5 in every seed only from {first} halvings on (ln f {ln_f:.3g})" in prose
    last = errors.groupby("seed").tail(1)["max_deviation"]
    assert f"levels off there: {last.min():.2f}-{last.max():.2f} after the last halving" in prose
