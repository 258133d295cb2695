"""Study B measured: the whole protocol per seed at a configurable (CPU) scale, and its tables.

`measure(out, seeds, Protocol(...))` runs, for every seed, `analyses.studies.study_b`'s steps:
goldilocks AdamW -> WLMD on a grid confined to the functional region around it -> injection of
each noise type into both models; every step resumes or is skipped when complete. `table`,
`summary`, `wlmd_frame` and `rank_table` rebuild the results from the run folders without
retraining. Command line::

    python -m analyses.studies.study_b_measure OUT [--seeds 0 1 2] [--protocol JSON] [--table-only]

docs/study_b.md has the protocol's reasoning and the measured table.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from analyses.studies.study_b import (
    Region, cosine_frame, forgetting_figure, goldilocks, inject, rank_figure, rank_frame, source_cvs, wlmd_sample,
)
from interp.store import checkpoint_dir, list_checkpoints
from interp.config import from_dict, to_dict
from interp.errors import ConfigError, InterpError
from interp.training.config import FinetuneConfig
from interp.store.run_folder import is_done, read_config, read_done, read_metrics
from interp.text import format_table
from interp.wlmd.grid import Schedule
from interp.sweep.specs import seed_folder, seed_folders


NOISES = ("random", "square", "sum")
MODELS = ("adamw", "wlmd")
# SCIENCE.md, study B: original-task test accuracy after injecting *random* noise (the gap is
# said to narrow as the noise resembles the task; no numbers are given for square / sum).
REFERENCE = {"adamw": "< 0.75 (random)", "wlmd": "~0.95 (0.95-0.98, random)"}
RANK_MATRICES = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_E", "W_U")


@dataclass(frozen=True)
class Protocol:
    """Every setting of `measure` (defaults: the CPU-scale run of docs/study_b.md).

    Attributes:
        p: Modulus of ``x + y mod p``.
        train_frac: Train fraction of the task.
        weight_norm: Sphere radius of the AdamW run (and of WLMD).
        epochs: Full-batch epochs of the AdamW run.
        lr: AdamW learning rate of the AdamW run.
        model_overrides: `modadd-1l` config fields to change (empty: the preset).
        wlmd_steps: Steps of the WLMD entropy phase.
        production_steps: Steps of WLMD production (S frozen).
        n_walkers: WLMD walkers.
        dt: WLMD time step.
        gamma: WLMD thermostat friction.
        ln_f_max: Plateau of the ramp schedule (plateau = the whole entropy phase).
        x_below: The grid spans ``ln(train loss)`` from ``x0 - x_below`` ...
        x_above: ... to ``x0 + x_above`` (x0: the AdamW model's value).
        n_x: Bins along x.
        y_low: Lower grid edge of the smooth accuracy y (upper edge 10.2).
        n_y: Bins along y.
        window_x: Samples need ``|x - x0| <= window_x`` ...
        window_y: ... and ``y >= min(y0, window_y)``.
        every: Production looks at the walkers every this many steps.
        max_samples: Production stops after this many samples (the last one is injected).
        k: New tokens of the noise set.
        max_steps: Step cap of each injection.
        eval_every: Injection evaluation interval.
    """

    p: int = 67
    train_frac: float = 0.5
    weight_norm: float = 30.0
    epochs: int = 1000
    lr: float = 1.5e-3
    model_overrides: dict[str, Any] = field(default_factory=dict)
    wlmd_steps: int = 2000
    production_steps: int = 500
    n_walkers: int = 1
    dt: float = 2e-4
    gamma: float = 0.1
    ln_f_max: float = 0.01
    x_below: float = 0.75
    x_above: float = 0.25
    n_x: int = 4
    y_low: float = 9.5
    n_y: int = 7
    window_x: float = 0.25
    window_y: float = 9.9
    every: int = 50
    max_samples: int = 4
    k: int = 37
    max_steps: int = 2000
    eval_every: int = 50

    def region(self) -> Region:
        """The WLMD grid and window around the AdamW model.

        Narrow: the walk starts in the functional region (at the AdamW model) and the grid
        walls keep it there; a wide grid gives the same in-window distribution, only later (the
        walk has to come back). The upper x wall is the window's upper edge, where a nearly
        free walk piles up (more volume at higher loss), so it stays in the window.
        """
        return Region(self.x_below, self.x_above, self.y_low, (self.n_x, self.n_y), self.window_x, self.window_y)


def wlmd_samples(folder: str | Path, adamw: str | Path, seed: int, protocol: Protocol) -> list[Path]:
    """WLMD from `adamw` on the narrow grid into ``folder`` (reused if its production is DONE).

    Returns:
        The sample checkpoint folders (possibly none).
    """
    folder = Path(folder)
    if is_done(folder / "samples"):
        return [checkpoint_dir(folder / "samples", s) for s in list_checkpoints(folder / "samples")]
    schedule = Schedule(ln_f_max=protocol.ln_f_max, rise=min(100, protocol.wlmd_steps), plateau=protocol.wlmd_steps)
    _, samples = wlmd_sample(folder, adamw, steps=protocol.wlmd_steps, production_steps=protocol.production_steps,
                             n_walkers=protocol.n_walkers, region=protocol.region(), schedule=schedule, dt=protocol.dt,
                             gamma=protocol.gamma, every=protocol.every, max_samples=protocol.max_samples, seed=seed)
    return samples


def run_seed(out: str | Path, seed: int, protocol: Protocol = Protocol()) -> Path:
    """Goldilocks AdamW -> WLMD sample -> 3 noise types x 2 models of injection, for one seed.

    Every step resumes, or is skipped when its folder is complete. The injected WLMD model is
    the last production sample (the longest walk); without a sample only AdamW is injected
    (with a warning).

    Args:
        out: The parent folder; this seed writes ``out/seed_<seed>/{adamw, wlmd, inject-*}``.
        seed: Model init seed, WLMD seed and seed of the new embedding rows (data seed 0).
        protocol: Every other setting.

    Returns:
        The seed folder.
    """
    folder = seed_folder(out, seed)
    adamw = goldilocks(folder / "adamw", p=protocol.p, train_frac=protocol.train_frac, weight_norm=protocol.weight_norm,
                       epochs=protocol.epochs, lr=protocol.lr, seed=seed, model_overrides=protocol.model_overrides)
    samples = wlmd_samples(folder / "wlmd", adamw, seed, protocol)
    if not samples:
        warnings.warn(f"seed {seed}: no WLMD sample in the window; only the AdamW model is injected", stacklevel=2)
    sources = {"adamw": adamw, **({"wlmd": samples[-1]} if samples else {})}
    cfg = FinetuneConfig(max_steps=protocol.max_steps, eval_every=protocol.eval_every)
    for noise in NOISES:
        for label, source in sources.items():
            inject(folder / f"inject-{label}-{noise}", source, noise, k=protocol.k, config=cfg, seed=seed)
    return folder


def injection_row(run: str | Path) -> dict[str, Any]:
    """One finished injection run: its source, stop, original test accuracy before / after, cosine."""
    run = Path(run)
    config, done, records = read_config(run), read_done(run), read_metrics(run)
    source = config["injection"]["source"]
    cos = cosine_frame({"x": (source, run)}).iloc[0]
    return {"noise": config["injection"]["noise"], "test_acc_before": records[0]["test/acc"],
            "test_acc_after": done["final"]["test/acc"], "noise_acc_after": done["final"].get("train/noise/acc"),
            "reached": done["reached"], "steps": done["steps"], "cosine_before_after": float(cos["cosine"]),
            "distance_before_after": float(cos["distance"]), "source": source}


def table(out: str | Path) -> pd.DataFrame:
    """One row per (seed, model, noise) from the finished injection runs under ``out/seed_*``.

    ``retention`` is the original task's test accuracy at the stop divided by the one at the start.
    """
    rows = []
    for seed, folder in seed_folders(out).items():
        for label in MODELS:
            for noise in NOISES:
                run = folder / f"inject-{label}-{noise}"
                if is_done(run):
                    rows.append({"seed": seed, "model": label, **injection_row(run)})
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["retention"] = frame["test_acc_after"] / frame["test_acc_before"]
    return frame


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean (min, max) over seeds per noise and model of `table`'s rows, with the reference."""
    grouped = frame.groupby(["noise", "model"], sort=False)
    result = grouped.agg(seeds=("seed", "count"), test_acc_after=("test_acc_after", "mean"),
                         test_acc_after_min=("test_acc_after", "min"), test_acc_after_max=("test_acc_after", "max"),
                         reached=("reached", "sum"), steps=("steps", "mean"),
                         cosine_before_after=("cosine_before_after", "mean")).reset_index()
    result["reference"] = [REFERENCE[m] if n == "random" else "gap narrower than random"
                           for n, m in zip(result["noise"], result["model"])]
    return result


def wlmd_frame(out: str | Path) -> pd.DataFrame:
    """Per seed: the AdamW model's (x, y), the injected WLMD sample's, and the cosine between them."""
    rows = []
    for seed, folder in seed_folders(out).items():
        samples = folder / "wlmd" / "samples"
        if not is_done(samples) or not list_checkpoints(samples):
            rows.append({"seed": seed, "samples": 0})
            continue
        last = checkpoint_dir(samples, list_checkpoints(samples)[-1])
        entropy = read_metrics(folder / "wlmd" / "entropy")
        x0, y0 = source_cvs(folder / "adamw")
        x, y = source_cvs(last)
        cos = cosine_frame({"x": (folder / "adamw", last)}).iloc[0]
        rows.append({"seed": seed, "samples": len(list_checkpoints(samples)), "x_adamw": x0,
                     "y_adamw": y0, "x_wlmd": x, "y_wlmd": y, "cosine_adamw_wlmd": float(cos["cosine"]),
                     "distance_adamw_wlmd": float(cos["distance"]), "walls": entropy[-1]["walls"] if entropy else None,
                     "entropy_steps": entropy[-1]["step"] if entropy else 0})
    return pd.DataFrame(rows)


def _before_after(folder: Path, noise: str) -> dict[str, Path | str] | None:
    """``{"adamw before": source, "adamw after": run, "wlmd before": ..., ...}`` of a seed's
    `noise` injections, or None unless both are finished."""
    runs = {label: folder / f"inject-{label}-{noise}" for label in MODELS}
    if not all(is_done(run) for run in runs.values()):
        return None
    models: dict[str, Path | str] = {}
    for label, run in runs.items():
        models[f"{label} before"] = read_config(run)["injection"]["source"]
        models[f"{label} after"] = run
    return models


def rank_table(out: str | Path, noise: str = "random") -> pd.DataFrame:
    """Whole-layer effective ranks, mean over seeds: AdamW / WLMD before and after `noise` injection."""
    frames = []
    for seed, folder in seed_folders(out).items():
        models = _before_after(folder, noise)
        if models:
            frames.append(rank_frame(models).assign(seed=seed))
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames)
    frame = frame[frame["matrix"].isin(RANK_MATRICES)]
    return frame.groupby(["matrix", "layer"], sort=False).mean(numeric_only=True).drop(columns="seed").reset_index()


def measure(out: str | Path, seeds: Sequence[int] = (0, 1, 2), protocol: Protocol = Protocol()) -> pd.DataFrame:
    """Run the protocol for every seed (resuming finished steps) and return `table`'s rows."""
    for seed in seeds:
        run_seed(out, seed, protocol)
    return table(out)


def write_figures(out: str | Path) -> list[Path]:
    """Per seed, the study's figures as HTML in ``out/seed<N>``: forgetting curves AdamW vs WLMD
    per noise type (`study_b.forgetting_figure`) and effective-rank bars before / after the
    random-noise injection (`study_b.rank_figure`). Runs that are not finished are skipped."""
    written = []
    for seed, folder in seed_folders(out).items():
        for noise in NOISES:
            runs = {label: folder / f"inject-{label}-{noise}" for label in MODELS}
            runs = {("AdamW" if label == "adamw" else "WLMD"): run for label, run in runs.items() if is_done(run)}
            if runs:
                path = folder / f"forgetting_{noise}.html"
                forgetting_figure(runs).update_layout(title=f"{folder.name}, {noise} noise").write_html(
                    path, include_plotlyjs="directory")
                written.append(path)
        models = _before_after(folder, "random")
        if models:
            path = folder / "ranks_random.html"
            rank_figure(models).write_html(path, include_plotlyjs="directory")
            written.append(path)
    return written


def write_tables(out: str | Path) -> Path:
    """Write `table`, `summary`, `wlmd_frame` and `rank_table` as CSV and one text file into ``out``."""
    out = Path(out)
    frames = {"runs": table(out)}
    if len(frames["runs"]):
        frames["summary"] = summary(frames["runs"])
    frames |= {"wlmd": wlmd_frame(out), "ranks_random": rank_table(out, "random")}
    lines = []
    for name, frame in frames.items():
        frame.to_csv(out / f"study_b_{name}.csv", index=False)
        shown = frame.drop(columns=[c for c in ("source",) if c in frame.columns])
        table_text = format_table([str(c) for c in shown.columns], shown.to_numpy().tolist())
        lines += [f"## {name}", "", table_text, ""]
    (out / "study_b_tables.txt").write_text("\n".join(lines))
    return out / "study_b_tables.txt"


def main(argv: list[str] | None = None) -> None:
    """``python -m analyses.studies.study_b_measure OUT [--seeds 0 1 2] [--table-only] [--protocol JSON]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder of the seed runs (runs/study-b)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--table-only", action="store_true", help="only rebuild the tables from existing runs")
    parser.add_argument("--protocol", default="{}", help="JSON overrides of Protocol fields, e.g. '{\"dt\": 3e-4}'")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    try:
        _main(args)
    except InterpError as err:  # bad --protocol and the like: one line, exit 2 (as the CLI does)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"--protocol {text!r} is not JSON ({err})", 'give e.g. \'{"dt": 3e-4}\'') from None
    if not isinstance(value, dict):
        raise ConfigError(f"--protocol {text!r} is not a JSON object", 'give e.g. \'{"dt": 3e-4}\'')
    return value


def _main(args: argparse.Namespace) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        if not args.table_only:
            protocol = from_dict(Protocol, {**to_dict(Protocol()), **_json_object(args.protocol)}, where="--protocol")
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "protocol.json").write_text(json.dumps(to_dict(protocol), indent=1))
            measure(args.out, args.seeds, protocol)
        print(write_tables(args.out).read_text())
        print(f"figures: {len(write_figures(args.out))} HTML files in {args.out}/seed*/")
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    main()
