"""Study B, protocol 3's pilots: can a walk cover the window's range of train loss at all?

Every protocol-2 walk sat at the upper ln-loss wall from its first 5,000 steps and never
flattened its histogram (`analyses.studies.study_b.diagnostics.wall` measured why: no bias force in the
outer half-bin, and a density of states that rises faster than protocol 2's ramp can build S).
Before a protocol 3 is fixed, each variant below runs the entropy phase for `COVER_STEPS` steps
on the pilot seed (100), from its AdamW model, with one walker, protocol 2's time step and
thermostat, and linear grid edges; docs/study_b.md ("Protocol 3: the pilots") has the plan and
the rule, written before they ran:

* ``classic-1``: the classic schedule, ``ln f`` starting at 1 and halved whenever the histogram
  summed over y is 80% flat over *every* x-bin (so it is not halved while the walker holds one
  bin), on protocol 2's grid (4 x-bins of ln train loss, ``x0 - 0.75`` to ``x0 + 0.25``);
* ``classic-10``: the same from ``ln f = 10``, which builds S ten times faster, more coarsely;
* ``narrow-classic-1``: ``classic-1`` on the production window's two x-bins only
  (``x0 - 0.25`` to ``x0 + 0.25``): half the range of S to build.

`cover_table` reads each variant's walk records: the first recorded step at which every x-bin
had been visited, the ``ln f`` halvings, the flatness over x-bins, the walker's ``x`` and
cosine at the end; `decide_cover` applies the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_b.diagnostics.pilots import Variant, pilot_frame
from analyses.studies.study_b.settings import WLMDSettings

COVER_STEPS = 20_000
"""Entropy steps of each protocol-3 pilot (records every 200 steps)."""

_CLASSIC_X = (("edges", "linear"), ("ln_f_schedule", "classic"), ("flat_over", "x"))

COVER_VARIANTS = (
    Variant("classic-1", overrides=(*_CLASSIC_X, ("ln_f0", 1.0))),
    Variant("classic-10", overrides=(*_CLASSIC_X, ("ln_f0", 10.0))),
    Variant("narrow-classic-1", overrides=(*_CLASSIC_X, ("ln_f0", 1.0), ("x_below", 0.25), ("bins", (2, 7)))),
)
"""Protocol 3's pilots, in the rule's order of preference (the least change from protocol 2 first)."""


def covered_at(records: Sequence[Mapping[str, Any]], ln_f0: float) -> float:
    """The first recorded step at which every x-bin had been visited (inf if none).

    The records' flatness counts every x-bin (``flat_over = "x"``), so it is above 0 once each
    has a visit; a halving of ``ln f`` below `ln_f0` resets the histogram, but needs a flat one
    first, so it also means the walk had covered x.
    """
    for record in records:
        if record["flatness"] > 0 or 0 < record["ln_f"] < ln_f0:
            return float(record["step"])
    return math.inf


def cover_row(pilot: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One variant's row of `cover_table`."""
    ln_f0 = float(pilot.get("overrides", {}).get("ln_f0", WLMDSettings().ln_f0))
    last = records[-1]
    ln_f = last["ln_f"]
    return {
        "variant": pilot["variant"],
        "x-bins": len(last["S"]),
        "steps run": last["step"],
        "CPU ms / step": 1000 * pilot["cpu_seconds"] / pilot["steps_timed"]
        if pilot["steps_timed"]
        else math.nan,
        "covered x at step": covered_at(records, ln_f0),
        "halvings": WLMDSettings(ln_f_schedule="classic", ln_f0=ln_f0).halvings(ln_f),
        "ln f at the end": ln_f,
        "flatness over x": last["flatness"],
        "x - x0 at the end": max(last["x"]) - pilot["start_cvs"][0],
        "cosine at the end": max(last["cosine"]),
        "walls": last["walls"],
    }


def cover_table(folder: str | Path, variants: Sequence[Variant] = COVER_VARIANTS) -> pd.DataFrame:
    """The coverage of every variant recorded under `folder` (a run or an exported folder).

    Raises:
        ConfigError: If a variant's `PILOT_FILE` is there without its walk's records.
    """
    return pilot_frame(folder, variants, cover_row)


def decide_cover(rows: pd.DataFrame, variants: Sequence[Variant] = COVER_VARIANTS) -> tuple[str | None, str]:
    """The rule of docs/study_b.md: protocol 3 takes the first variant, in `variants`' order,
    whose walker visited every x-bin of its grid within the pilot; if none did, no protocol 3
    comes from these pilots. Returns the variant (or None) and the reason, in words.
    """
    by_name = rows.set_index("variant") if len(rows) else None
    for variant in variants:
        if by_name is None or variant.name not in by_name.index:
            continue
        step = by_name.loc[variant.name, "covered x at step"]
        if math.isfinite(step):
            return variant.name, f"{variant.name} visited every x-bin by step {step:.0f}"
    tried = ", ".join(rows["variant"]) if len(rows) else "none"
    return None, f"no variant visited every x-bin within its pilot (ran: {tried})"
