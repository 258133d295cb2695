"""Study B: is there a shorter road to decorrelated WLMD samples than protocol 2's long walk?

Protocol 2 walks one walker from the AdamW model until its cosine to that model is <= 0.9
(about 2.7e5 steps by the diffusive estimate, hours of one core a seed). Before seed 0's walk
starts, and before any retention number is seen, each variant below runs the entropy phase for
`steps` steps (10^4) on the pilot seed (100) only, and its cost is projected in core-hours per
decorrelated sample in the target bin (docs/study_b.md, "A shorter road?", has the rule):

* ``protocol-2``: protocol 2's walk itself (the reference);
* ``walkers-own-starts``: 3 walkers sharing S, walker i starting from its own AdamW model (init
  seed 100 + i, the same training set, so the same collective-variable space);
* ``random-starts``: 2 walkers sharing S, each from an independent random point on the sphere
  (an untrained model's weights projected onto it: cosine ~0 to any trained model from the
  start), on a grid wide enough to hold both the random start and the target bin;
* ``larger-dt``: dt 4e-4 (2x) with the thermostat coupling gamma 0.05 (1/2x).

Projection. A walker that starts at its AdamW model is decorrelated once its cosine to that
start is <= `TARGET_COSINE`: on the sphere of radius R the squared distance is
``2 R^2 (1 - cosine)``, which grows linearly in a diffusive walk; its rate is fitted over the
second half of the pilot and extrapolated. A walker from a random start is decorrelated from
step 0, and needs the steps until it first sits in the target window (train loss at the AdamW
model's, smooth accuracy at least its). Core-hours per sample = steps x CPU seconds per step
of the whole sampler / the samples those steps give (every walker for the walks from AdamW
models, the walkers in the window at the first arrival for random starts). A variant that gets
nowhere in the pilot has no projection.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_b.settings import PRESETS, StudyBSettings, WLMDSettings

PROTOCOL_2 = PRESETS["protocol-2"]  # the pilots' base settings (protocols/protocol-2.json)

TARGET_COSINE = 0.9
PILOT_SEED = 100
PILOT_FILE = "pilot.json"


@dataclass(frozen=True)
class Variant:
    """One road to decorrelated samples.

    Attributes:
        name: Its folder and row name.
        walkers: Walkers sharing S.
        starts: ``"adamw"`` (every walker at the pilot AdamW model), ``"own"`` (walker i at
            the AdamW model of init seed ``PILOT_SEED + i``) or ``"random"`` (walker i at an
            untrained model of init seed ``PILOT_SEED + 1000 + i``, on the sphere).
        dt: Verlet time step.
        gamma: Thermostat friction per step.
        overrides: Further `WLMDSettings` fields as ``(name, value)`` pairs (protocol 3's
            pilots: the edges, the schedule, the grid; `analyses.studies.study_b.diagnostics.cover`).
    """

    name: str
    walkers: int = 1
    starts: str = "adamw"
    dt: float = PROTOCOL_2.wlmd.dt
    gamma: float = PROTOCOL_2.wlmd.gamma
    overrides: tuple[tuple[str, Any], ...] = ()


VARIANTS = (
    Variant("protocol-2"),
    Variant("walkers-own-starts", walkers=3, starts="own"),
    Variant("random-starts", walkers=2, starts="random"),
    Variant("larger-dt", dt=4e-4, gamma=0.05),
)


def variant_settings(variant: Variant, steps: int, base: WLMDSettings = PROTOCOL_2.wlmd) -> WLMDSettings:
    """Protocol 2's walk with the variant's walkers, dt, gamma and overrides, for exactly
    `steps` entropy steps in 10 records (100 for random starts, whose first arrival is the
    measure, and for walks with overrides, whose coverage is: every 1,000 and 100 steps of a
    10^4-step pilot), and no production.
    """
    report = max(1, steps // (100 if variant.starts == "random" or variant.overrides else 10))
    return dataclasses.replace(
        base,
        **dict(variant.overrides),
        steps=steps,
        target_cosine=None,
        max_steps=None,
        walkers=variant.walkers,
        dt=variant.dt,
        gamma=variant.gamma,
        report_every=report,
        checkpoint_every=min(base.checkpoint_every, steps),
        production_steps=0,
        seed=PILOT_SEED,
    )


def squared_distance(cosine: float, radius: float) -> float:
    """Squared distance between two points of the sphere of `radius` at `cosine`."""
    return 2 * radius**2 * (1 - cosine)


def steps_to_decorrelate(records: Sequence[Mapping[str, Any]], radius: float) -> list[float]:
    """Per walker: the first recorded step with cosine <= `TARGET_COSINE`, else the step
    extrapolated from the squared distance's least-squares slope over the second half of the
    records (inf if it does not grow).
    """
    walkers = len(records[-1]["cosine"])
    target = squared_distance(TARGET_COSINE, radius)
    out = []
    for w in range(walkers):
        reached = [r["step"] for r in records if r["cosine"][w] <= TARGET_COSINE]
        if reached:
            out.append(float(reached[0]))
            continue
        late = [r for r in records if r["step"] >= records[-1]["step"] / 2]
        steps = [r["step"] for r in late]
        d2 = [r["distance"][w] ** 2 for r in late]
        slope = _slope(steps, d2)
        out.append(steps[-1] + (target - d2[-1]) / slope if slope > 0 else math.inf)
    return out


def _slope(x: Sequence[float], y: Sequence[float]) -> float:
    if len(x) < 2:
        return 0.0
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxx = sum((a - mx) ** 2 for a in x)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sxx if sxx else 0.0


def first_in_window(records: Sequence[Mapping[str, Any]], window: Sequence[float]) -> tuple[float, int]:
    """The first recorded step at which some walker's ``(x, y)`` is in `window`
    ``(x_lo, x_hi, y_lo, y_hi)``, and how many walkers are in it then; ``(inf, 0)`` if never.
    """
    x_lo, x_hi, y_lo, y_hi = window
    for record in records:
        inside = sum(x_lo <= x <= x_hi and y_lo <= y <= y_hi for x, y in zip(record["x"], record["y"]))
        if inside:
            return float(record["step"]), inside
    return math.inf, 0


def projection(pilot: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One variant's row: CPU seconds a step, the projected steps and core-hours per sample."""
    seconds = pilot["cpu_seconds"] / pilot["steps_timed"] if pilot["steps_timed"] else math.nan
    if pilot["starts"] == "random":
        steps, samples = first_in_window(records, pilot["window"])
        how = "first step in the target window"
    else:
        per_walker = steps_to_decorrelate(records, pilot["radius"])
        steps, samples = statistics.median(per_walker), len(per_walker)
        how = f"median walker's step to cosine {TARGET_COSINE}"
    hours = steps * seconds / 3600 / max(samples, 1) if math.isfinite(steps) else math.inf
    return {
        "variant": pilot["variant"],
        "walkers": pilot["walkers"],
        "steps run": records[-1]["step"],
        "CPU s / step": seconds,
        "projected steps": steps,
        "measured as": how,
        "core-hours / sample": hours,
        "largest cosine at the end": max(records[-1]["cosine"]),
        "walls": records[-1]["walls"],
    }


def decide(rows: pd.DataFrame) -> tuple[str, str]:
    """The rule of docs/study_b.md: the variant with the fewest core-hours per sample is adopted
    if it needs at most half of protocol 2's; otherwise protocol 2 stays. Returns the adopted
    variant and the reason, in words.
    """
    reference = rows.set_index("variant").loc["protocol-2", "core-hours / sample"]
    others = rows[rows["variant"] != "protocol-2"].sort_values("core-hours / sample")
    best = others.iloc[0] if len(others) else None
    if (
        best is not None
        and math.isfinite(best["core-hours / sample"])
        and best["core-hours / sample"] <= reference / 2
    ):
        return best["variant"], (
            f"{best['variant']} projects {best['core-hours / sample']:.3g} core-hours a sample, at most "
            f"half of protocol 2's {reference:.3g}"
        )
    quoted = "none" if best is None else f"{best['variant']} at {best['core-hours / sample']:.3g}"
    return (
        "protocol-2",
        f"no variant projects at most half of protocol 2's {reference:.3g} core-hours (best: {quoted})",
    )


def run_pilots(
    out: str | Path,
    steps: int = 10_000,
    variants: Sequence[Variant] = VARIANTS,
    settings: StudyBSettings = PROTOCOL_2,
    table: Callable[[Path, Sequence[Variant]], pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Train the pilot AdamW models, run every variant's entropy phase, write ``OUT/pilots.csv``
    (the `table` of the folder: `pilot_table`'s projections by default).

    Resumable: the AdamW runs and the walks resume from their folders, and a variant whose
    `PILOT_FILE` exists is not run again. CPU seconds are the process's own clock over the
    steps this call ran (a resumed walk is timed over its remaining steps).
    """
    out = Path(out)
    for variant in variants:
        if not (out / variant.name / PILOT_FILE).exists():
            _run_variant(out, out / variant.name, variant, steps, settings)
    frame = (table or pilot_table)(out, variants)
    frame.to_csv(out / "pilots.csv", index=False)
    return frame


def _walk_records(folder: Path) -> list[dict[str, Any]]:
    from analyses.studies.study_b.protocol import walk_records

    return walk_records(folder)


@dataclass(frozen=True)
class _Walk:
    """What a variant's pilot walk is made of (`_walk_inputs`)."""

    reference: Path  # the pilot AdamW model: the window and grid lie around its (x, y)
    settings: WLMDSettings
    window: tuple[float, float, float, float]
    grid: Any  # GridSpec, or None for the settings' own grid
    starts: list[Path]  # one per walker
    start_cvs: tuple[float, float]  # the reference's (x, y)


def _walk_inputs(out: Path, variant: Variant, steps: int, settings: StudyBSettings) -> _Walk:
    """`variant`'s pilot walk, its AdamW models trained into `out` when missing."""
    from analyses.studies.study_b.measure import adamw_run
    from analyses.studies.study_b.protocol import first_checkpoint, grid_holding, source_cvs

    def adamw(seed: int, epochs: int = settings.epochs) -> Path:
        name = "adamw" if seed == PILOT_SEED and epochs == settings.epochs else f"model-{seed}-{epochs}"
        return adamw_run(out / name, seed, settings, epochs=epochs)

    reference = adamw(PILOT_SEED)
    wlmd = variant_settings(variant, steps, settings.wlmd)
    x0, y0 = source_cvs(reference, wlmd.k)
    window = wlmd.window(x0, y0)
    grid = None
    if variant.starts == "own":
        starts = [reference] + [adamw(PILOT_SEED + i) for i in range(1, variant.walkers)]
        grid = grid_holding(wlmd, (x0, y0), [source_cvs(s, wlmd.k) for s in starts])
    elif variant.starts == "random":
        # Step 0 of a run: the untrained weights, already projected onto the sphere. The
        # study's wide grid, so that the walk can come down to the target.
        starts = [first_checkpoint(adamw(PILOT_SEED + 1000 + i, epochs=1)) for i in range(variant.walkers)]
        grid = grid_holding(WLMDSettings(), (x0, y0), [source_cvs(s, wlmd.k) for s in starts])
    else:
        starts = [reference] * variant.walkers
    return _Walk(reference, wlmd, window, grid, starts, (x0, y0))


def _run_variant(out: Path, folder: Path, variant: Variant, steps: int, settings: StudyBSettings) -> None:
    from analyses.studies.study_b.protocol import wlmd_sample

    walk = _walk_inputs(out, variant, steps, settings)
    before = len(_walk_records(folder))
    cpu = time.process_time()
    wlmd_sample(folder, walk.starts[0], walk.settings, grid=walk.grid, window=walk.window, starts=walk.starts)
    cpu = time.process_time() - cpu
    records = _walk_records(folder)
    timed = records[-1]["step"] - (records[before - 1]["step"] if before else 0)
    if timed <= 0:  # the walk had ended before this call: no step to time it by
        from interp.errors import ConfigError

        raise ConfigError(
            f"{folder}'s walk had already finished, so its CPU time per step was not measured",
            f"delete {folder} and run the pilots again to time this variant",
        )
    pilot = {
        "variant": variant.name,
        "walkers": variant.walkers,
        "starts": variant.starts,
        "dt": variant.dt,
        "gamma": variant.gamma,
        **({"overrides": dict(variant.overrides)} if variant.overrides else {}),
        "radius": settings.weight_norm,
        "window": list(walk.window),
        "start_cvs": list(walk.start_cvs),
        "cpu_seconds": cpu,
        "steps_timed": timed,
    }
    (folder / PILOT_FILE).write_text(json.dumps(pilot, indent=1))


PRODUCTION_DIR = "production-check"
PRODUCTION_FILE = "production-check.json"


def production_check(
    out: str | Path, variant: Variant | str = "walkers-own-starts", settings: StudyBSettings = PROTOCOL_2
) -> dict[str, Any]:
    """The adopted variant's production phase on its finished pilot walk, and the check fixed
    for it (docs/study_b.md): it passes when every walker after the first (those that start
    at their own AdamW models) has at least one sample in the target window.

    Production runs with `settings`' own production (steps, look every, sample cap) and S frozen,
    from the end of the pilot walk (its length read from its records), into
    ``OUT/VARIANT/production-check`` (a second production beside the pilot's empty one); its
    summary, with each sample's cosine to its walker's start, is written to
    ``OUT/VARIANT/production-check.json`` and returned. Re-running reads it back.

    Raises:
        ConfigError: If `variant` is not a variant of `VARIANTS`, or its pilot walk has not been
            run (`run_pilots`).
    """
    import torch

    from analyses.studies.study_b.protocol import load_source, model_cvs, wlmd_sample
    from interp.errors import ConfigError
    from interp.store import load_checkpoint

    out = Path(out)
    if isinstance(variant, str):
        named = {v.name: v for v in VARIANTS}
        if variant not in named:
            raise ConfigError(f"no pilot variant {variant!r}", f"valid: {', '.join(named)}")
        variant = named[variant]
    folder = out / variant.name
    if (folder / PRODUCTION_FILE).exists():
        return json.loads((folder / PRODUCTION_FILE).read_text())
    records = _walk_records(folder)
    if not (folder / PILOT_FILE).exists() or not records:
        raise ConfigError(
            f"{folder} has no finished pilot walk ({PILOT_FILE})", "run the pilots first (run_pilots)"
        )
    walk = _walk_inputs(out, variant, records[-1]["step"], settings)
    production = dataclasses.replace(
        walk.settings,
        production_steps=settings.wlmd.production_steps,
        every=settings.wlmd.every,
        max_samples=settings.wlmd.max_samples,
    )
    _, saved = wlmd_sample(
        folder,
        walk.starts[0],
        production,
        grid=walk.grid,
        window=walk.window,
        starts=walk.starts,
        samples=PRODUCTION_DIR,
    )

    # Flattened as the sampler flattens (`ModelCVs.flatten`), in double as `walk_record` measures.
    def flat(path: str | Path) -> torch.Tensor:
        model, _, config = load_source(path)
        return model_cvs(model, config, production.k)[0].flatten().double()

    starts = [flat(s) for s in walk.starts]
    samples = []
    for path in saved:
        meta = load_checkpoint(path).meta
        cosine = torch.nn.functional.cosine_similarity(flat(path), starts[meta["walker"]], dim=0)
        samples.append({k: meta[k] for k in ("walker", "sampler_step", "x", "y")} | {"cosine": float(cosine)})
    walkers = range(1, variant.walkers)
    result = {
        "variant": variant.name,
        "window": list(walk.window),
        "production_steps": production.production_steps,
        "every": production.every,
        "max_samples": production.max_samples,
        "samples": samples,
        "passed": variant.walkers > 1 and all(any(s["walker"] == w for s in samples) for w in walkers),
    }
    (folder / PRODUCTION_FILE).write_text(json.dumps(result, indent=1))
    return result


def export_pilots(out: str | Path, dest: str | Path, variants: Sequence[Variant] = VARIANTS) -> Path:
    """Copy the compact records (each variant's `PILOT_FILE`, and its ``walk.json`` with the S
    grid in the last record only; no weights) from a `run_pilots` folder to `dest`, where
    `pilot_table` rebuilds the same table.
    """
    import shutil

    from analyses.studies.study_b.records import compact_walk
    from interp.store.atomic import atomic_write_json

    out, dest = Path(out), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for variant in variants:
        if (out / variant.name / PILOT_FILE).exists():
            (dest / variant.name).mkdir(exist_ok=True)
            shutil.copy(out / variant.name / PILOT_FILE, dest / variant.name / PILOT_FILE)
            atomic_write_json(
                dest / variant.name / "walk.json", compact_walk(_walk_records(out / variant.name))
            )
    return dest


def pilot_table(folder: str | Path, variants: Sequence[Variant] = VARIANTS) -> pd.DataFrame:
    """The projections of every variant recorded under `folder` (a run or an exported folder).

    Raises:
        ConfigError: If a variant's `PILOT_FILE` is there without its walk's records.
    """
    return pilot_frame(folder, variants, projection)


def pilot_frame(
    folder: str | Path,
    variants: Sequence[Variant],
    row: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], dict[str, Any]],
) -> pd.DataFrame:
    """One `row(pilot, records)` per variant recorded under `folder` (its `PILOT_FILE` and walk
    records), in `variants`' order; variants not run are left out.

    Raises:
        ConfigError: If a variant's `PILOT_FILE` is there without its walk's records.
    """
    from interp.errors import ConfigError

    folder, rows = Path(folder), []
    for variant in variants:
        if not (folder / variant.name / PILOT_FILE).exists():
            continue
        records = _walk_records(folder / variant.name)
        if not records:
            raise ConfigError(
                f"{folder / variant.name} has {PILOT_FILE} but no walk records (walk.json)",
                "copy the pilots with export_pilots (--export), which keeps both",
            )
        rows.append(row(json.loads((folder / variant.name / PILOT_FILE).read_text()), records))
    return pd.DataFrame(rows)
