"""Issue 50's reading (b): does an LLC stage boundary meet study A's phase-2 onset?

The reading's rules were fixed in docs/llc_readings.md before it ran: on each LLC curve of a
committed series (whole model, each head), boundaries by `interp.stages.find_stages` with
``method="llc"`` (smooth 1, plateau_tol 0.05, min_size 2) and ``method="changepoint"`` (its
default penalty); the onset is `find_rise(metrics, ("val/acc", "adv/acc"), 1.0, tol=0.05)` mapped
to the nearest checkpoint; a boundary *meets* the onset if it lies within `NEAR` checkpoints
(positions in the checkpoint list) of the onset's checkpoint. The primary reading is the
whole-model curve with the ``llc`` rule.

The records: one `evolve` table a curve (``llc.csv``: one row a chain and checkpoint, with the
estimate and its standard error), committed under ``results/llc/reading-b/SERIES/PART.csv``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from analyses.studies.study_a.evolution import phase2
from interp.dissect.llc_figures import checkpoint_frame
from interp.stages import find_stages
from interp.store.run_folder import read_done, read_metrics

if TYPE_CHECKING:
    import plotly.graph_objects as go

ROOT = Path(__file__).resolve().parents[3]
RECORDS = ROOT / "results" / "llc" / "reading-b"
"""The reading's committed records: ``SERIES/PART.csv`` and the calibration."""
SERIES = ROOT / "results" / "study-a" / "series"
"""The committed weight series whose metrics give the onsets."""

NEAR = 2
"""Checkpoints between a boundary and the onset's checkpoint that still count as meeting it."""

RULES = {
    "llc": {"method": "llc", "smooth": 1.0, "plateau_tol": 0.05, "min_size": 2},
    "changepoint": {"method": "changepoint"},
}
"""The preregistered rules, by name: `find_stages` options."""
EXPLORATORY = {"llc per checkpoint": {**RULES["llc"], "slope": "checkpoint"}}
"""Not preregistered: the ``llc`` rule with slopes per checkpoint, chosen after the near miss's
curve showed the log-step slope's blind spot (a collapse between two close checkpoints)."""


def onset_step(series: str | Path) -> int | None:
    """The series' phase-2 onset: study A's `phase2`, which is the reading's rule
    (`find_rise(metrics, ("val/acc", "adv/acc"), 1.0, tol=0.05)`).
    """
    rise = phase2(read_metrics(series))
    return None if rise is None else rise.onset


def curve_reading(
    table: pd.DataFrame, onset: int | None, rules: dict[str, dict[str, Any]] = RULES
) -> list[dict[str, Any]]:
    """Each rule on one curve: the boundaries, and whether one meets `onset`.

    Args:
        table: An `evolve` llc table (columns ``step``, ``estimate``, ``se``; a row a chain).
        onset: The phase-2 onset's epoch (None: the run had none).
        rules: `find_stages` options by rule name (`RULES`, or `EXPLORATORY`).

    Returns:
        One row a rule: ``rule``, ``boundaries`` (epochs), ``onset checkpoint``, ``nearest``
        (positions between the onset's checkpoint and the nearest boundary; None without either)
        and ``meets``.
    """
    per_step = checkpoint_frame(table)
    steps = per_step["step"].tolist()
    at = None if onset is None else min(range(len(steps)), key=lambda i: abs(steps[i] - onset))
    rows = []
    for rule, options in rules.items():
        stages = find_stages(per_step, ("estimate",), **options)
        distances = [abs(steps.index(b) - at) for b in stages.boundaries] if at is not None else []
        nearest = min(distances) if distances else None
        rows.append(
            {
                "rule": rule,
                "boundaries": list(stages.boundaries),
                "onset checkpoint": None if at is None else steps[at],
                "nearest": nearest,
                "meets": nearest is not None and nearest <= NEAR,
            }
        )
    return rows


def reading_b(
    records: str | Path = RECORDS, series_root: str | Path = SERIES, rules: dict[str, dict[str, Any]] = RULES
) -> pd.DataFrame:
    """Every committed curve's reading: one row a series, curve and rule.

    Args:
        records: ``results/llc/reading-b`` (``SERIES/PART.csv``).
        series_root: ``results/study-a/series`` (the series' metrics, for their onsets).
        rules: `find_stages` options by rule name: the preregistered `RULES` or `EXPLORATORY`.
    """
    rows = []
    for folder in sorted(p for p in Path(records).iterdir() if p.is_dir()):
        onset = onset_step(Path(series_root) / folder.name)
        for path in sorted(folder.glob("*.csv"), key=lambda p: (p.stem != "whole", p.stem)):
            table = pd.read_csv(path)
            for row in curve_reading(table, onset, rules):
                rows.append({"series": folder.name, "curve": path.stem, "onset": onset} | row)
    return pd.DataFrame(rows)


def primary_summary(frame: pd.DataFrame) -> str:
    """`reading_b`'s primary readings in words (Markdown): a bullet a series (whole model, the
    ``llc`` rule), then how many of the series-curve-rule pairs that have an onset meet it.

    A series without a phase-2 onset (a run that never reached the rule) has nothing to meet: it
    is said so, and left out of the count.
    """
    lines = []
    for _, row in frame[(frame["curve"] == "whole") & (frame["rule"] == "llc")].iterrows():
        if pd.isna(row["onset"]):
            lines.append(
                f"* **Primary reading, {row['series']}**: no phase-2 onset (the run never reached the "
                "rule), so no boundary can meet one; its curve enters the second question below."
            )
            continue
        near = int(row["nearest"]) if pd.notna(row["nearest"]) else None
        where = (
            "there is no boundary"
            if near is None
            else f"the nearest boundary is {near} checkpoint{'' if near == 1 else 's'} from it"
        )
        lines.append(
            f"* **Primary reading, {row['series']}** (whole model, `llc` rule): a boundary "
            f"{'meets' if row['meets'] else 'does not meet'} the onset (epoch {int(row['onset']):,}, checkpoint "
            f"{int(row['onset checkpoint']):,}); {where} ({NEAR} or fewer meet it)."
        )
    onset = frame[frame["onset"].notna()]
    return "\n".join(lines) + (
        f"\n\nOver every curve and both rules of the series with an onset, {int(onset['meets'].sum())} of "
        f"{len(onset)} pairs meet it."
    )


def exploratory_summary(frame: pd.DataFrame) -> str:
    """`reading_b(rules=EXPLORATORY)` in words (Markdown): which series' whole-model boundary meets
    the onset with slopes per checkpoint, against the preregistered rule's count, and the count
    over every curve. Labelled exploratory: the rule was chosen after the records were read.
    """
    onset = frame[frame["onset"].notna()]
    whole = onset[onset["curve"] == "whole"]
    meets = ", ".join(f"`{s}`" for s in whole.loc[whole["meets"], "series"]) or "none"
    misses = "; ".join(
        f"`{r.series}`, {'no boundary' if pd.isna(r.nearest) else f'{int(r.nearest)} checkpoints'} from it"
        for r in whole[~whole["meets"]].itertuples()
    )
    return (
        f"*Exploratory* (chosen after reading the records, so not evidence): with slopes per checkpoint "
        f'(`slope="checkpoint"`, the rule otherwise as preregistered) the whole-model boundary meets '
        f"the onset in {int(whole['meets'].sum())} of {len(whole)} series ({meets})"
        + (f"; not in {misses}" if misses else "")
        + f". Over every curve, {int(onset['meets'].sum())} of {len(onset)} meet it."
    )


def last_estimate(table: pd.DataFrame) -> tuple[int, float, float]:
    """The curve's last checkpoint: its epoch, estimate and standard error over the chains."""
    row = table.loc[table["step"].idxmax()]
    return int(row["step"]), float(row["estimate"]), float(row["se"])


def rule_contrast(records: str | Path = RECORDS, series_root: str | Path = SERIES) -> pd.DataFrame:
    """The second question: does the LLC differ between runs that find the rule and runs that do not?

    The preregistered rule (the last checkpoint's whole-model LLC differs by more than ``2 SE``
    between the two groups of the same architecture) applied to every pair of series of one
    architecture, one that reached the rule and one that did not, with
    ``SE = sqrt(se_a^2 + se_b^2)`` as in reading (a).

    Returns:
        One row a pair: ``architecture`` (``"2L2H"``), ``found`` and ``not found`` (the series),
        each one's last ``epoch``, ``llc`` and ``se``, ``difference`` (found minus not found),
        ``2 SE`` and ``differs``. Empty while no architecture has a series of each kind.
    """
    found: dict[str, list[dict[str, Any]]] = {}
    for folder in sorted(p for p in Path(records).iterdir() if (p / "whole.csv").is_file()):
        series = Path(series_root) / folder.name
        model = json.loads((series / "config.json").read_text())["model"]
        epoch, llc, se = last_estimate(pd.read_csv(folder / "whole.csv"))
        reached = read_done(series)["milestones"].get("rule", {}).get("step") is not None
        entry = {"series": folder.name, "epoch": epoch, "llc": llc, "se": se, "reached": reached}
        found.setdefault(f"{model['n_layers']}L{model['n_heads']}H", []).append(entry)
    rows = []
    for architecture, entries in found.items():
        for a in (e for e in entries if e["reached"]):
            for b in (e for e in entries if not e["reached"]):
                two_se = 2 * (a["se"] ** 2 + b["se"] ** 2) ** 0.5
                rows.append(
                    {"architecture": architecture, "found": a["series"], "not found": b["series"]}
                    | {
                        f"{k} ({side})": e[k]
                        for side, e in (("found", a), ("not", b))
                        for k in ("epoch", "llc", "se")
                    }
                    | {
                        "difference": a["llc"] - b["llc"],
                        "2 SE": two_se,
                        "differs": abs(a["llc"] - b["llc"]) > two_se,
                    }
                )
    return pd.DataFrame(rows)


def headline(frame: pd.DataFrame, pairs: pd.DataFrame) -> str:
    """Reading (b)'s two answers in one paragraph (Markdown), for the top of its page.

    Args:
        frame: `reading_b` with the preregistered rules.
        pairs: `rule_contrast`.
    """
    onset = frame[frame["onset"].notna()]
    primary = onset[(onset["curve"] == "whole") & (onset["rule"] == "llc")]
    text = (
        f"the whole-model LLC boundary met the phase-2 onset in **{int(primary['meets'].sum())} of "
        f"{len(primary)}** series with an onset (the primary reading), and {int(onset['meets'].sum())} "
        f"of {len(onset)} curve-and-rule pairs did over every curve (where chance makes hits likely)."
    )
    if pairs.empty:
        return text + " The second question waits for a series without the rule."
    differ = pairs[pairs["differs"]]
    higher = int((differ["difference"] > 0).sum())
    if 0 < higher < len(differ):
        direction = f" (the run with the rule higher in {higher} and lower in {len(differ) - higher}, so no direction)"
    else:
        direction = (
            f" (the run with the rule {'higher' if higher else 'lower'} in each)" if len(differ) else ""
        )
    return text + (
        f" Runs that found the rule against runs that did not, at the last checkpoint: {len(differ)} of "
        f"{len(pairs)} pairs differ by more than 2 SE{direction}."
    )


def reading_b_figure(records: str | Path = RECORDS, series_root: str | Path = SERIES) -> go.Figure:
    """The primary reading, drawn: each series' whole-model LLC over epochs (a log axis; the
    chains' standard error as bars), its phase-2 onset (red, dashed) and the ``llc`` rule's
    boundaries (grey, dotted), one panel a series.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    folders = sorted(p for p in Path(records).iterdir() if (p / "whole.csv").is_file())
    fig = make_subplots(
        rows=len(folders), cols=1, subplot_titles=[f.name for f in folders], vertical_spacing=0.08
    )
    for row, folder in enumerate(folders, start=1):
        table = pd.read_csv(folder / "whole.csv")
        per_step = checkpoint_frame(table)
        per_step = per_step[per_step["step"] > 0]  # a log axis has no epoch 0
        fig.add_trace(
            go.Scatter(
                x=per_step["step"], y=per_step["estimate"], error_y={"array": per_step["se"]},
                mode="lines+markers", name=folder.name, showlegend=False,
                hovertemplate="epoch %{x}<br>LLC %{y:.4g}<extra></extra>",
            ),
            row=row, col=1,
        )  # fmt: skip
        onset = onset_step(Path(series_root) / folder.name)
        (llc_rule,) = [r for r in curve_reading(table, onset) if r["rule"] == "llc"]
        for step in llc_rule["boundaries"]:
            fig.add_vline(x=step, line={"color": "grey", "dash": "dot"}, row=row, col=1)
        if onset is not None:
            fig.add_vline(x=onset, line={"color": "red", "dash": "dash"}, row=row, col=1)
        fig.update_xaxes(type="log", row=row, col=1)
        fig.update_yaxes(title_text="LLC (whole model)", row=row, col=1)
    fig.update_xaxes(
        title_text="epoch (red dashed: phase-2 onset; grey dotted: the llc rule's boundaries)",
        row=len(folders),
    )
    return fig.update_layout(height=280 * len(folders) + 80, margin={"t": 40})
