"""Study B's settings: one WLMD settings dataclass, and the whole protocol's (no torch).

`WLMDSettings` holds every setting of a WLMD sampling run from a start model (the walk, its
grid and window relative to the start's collective variables, the ``ln f`` schedule, the
production): `analyses.studies.study_b.protocol.wlmd_sample` takes it, `interp study-b wlmd` generates its
options from it, and `StudyBSettings` nests it. Its defaults are the study's wide grid with
the time step the measured protocol used (2e-4); `CPU_WLMD` is the CPU-scale protocol's
narrow grid around the start (docs/study_b.md has the reasoning).

`StudyBSettings` is every setting of `analyses.studies.study_b.measure.measure`: the
goldilocks AdamW run, the WLMD settings and the noise injection. Protocols 2-6 are data, not
code: one JSON file each under ``protocols/`` (shipped with the package), read by
`load_protocol` into the `PRESETS` that ``interp study-b measure --preset`` names.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from interp.config import check_bool, check_choice, check_int, check_real, from_dict, param, to_dict
from interp.errors import ConfigError

if TYPE_CHECKING:
    from interp.training.config import TrainConfig
    from interp.wlmd.grid import GridSpec, Schedule

OWN_START_STRIDE = 1000  # walker i > 0 of seed s starts at the AdamW model of init seed s + 1000 i
Y_TOP = 10.2  # upper edge of the y grid: y = 10 * mean sigmoid(...) <= 10


@dataclass(frozen=True)
class WLMDSettings:
    """Every setting of a WLMD sampling run started from a trained model."""

    steps: int = param(20000, "Entropy-phase steps.")
    production_steps: int = param(5000, "Steps with S frozen, saving in-window snapshots.")
    walkers: int = param(2, "Walkers sharing S.")
    dt: float = param(2e-4, "Verlet time step (a parameter moves about dt * sqrt(P) per step).")
    gamma: float = param(0.1, "Thermostat friction per step, in (0, 1].")
    kT: float = param(1.0, "Thermostat temperature (velocity scale).")
    k: float = param(6.0, "Sharpness of the smooth accuracy: y = 10 * mean sigmoid(k * margin).")
    share_every: int = param(100, "Walkers average their S every this many steps.")
    ln_f_max: float = param(0.01, "Plateau of the ln f ramp schedule.")
    rise: int = param(100, "Steps of the ln f linear rise (capped at the entropy phase).")
    plateau: int | None = param(None, "Steps of the ln f plateau [default: the whole entropy phase].")
    x_below: float = param(8.0, "The grid of x = ln(train loss) starts at x0 - x_below (x0: the start's) ...")
    x_above: float = param(4.0, "... and ends at x0 + x_above.")
    y_low: float = param(0.0, f"Lower grid edge of the smooth accuracy y (the upper edge is {Y_TOP}).")
    bins: tuple[int, int] = param((24, 34), "Grid bins along x and y.")
    window_x: float = param(0.25, "Keep production snapshots with |x - x0| <= window_x ...")
    window_y: float = param(9.9, "... and y >= min(y0, window_y).")
    every: int = param(50, "Look for an in-window snapshot every this many production steps.")
    max_samples: int = param(10, "Stop production after this many snapshots.")
    checkpoint_every: int = param(1000, "Checkpoint the walk and production every this many steps.")
    seed: int = param(0, "Seed of the velocities and thermostat noise.")
    target_cosine: float | None = param(
        None,
        "Extend the entropy phase past `steps` until every walker's cosine to the start is <= this "
        "(None: exactly `steps`).",
    )
    target_walker: str = param(
        "every",
        "Whose cosine target_cosine asks for: every walker's, or the median walker's.",
        added=True,
    )
    max_steps: int | None = param(
        None, "Step budget of the entropy phase with target_cosine or target_halvings [default: steps]."
    )
    report_every: int = param(
        1000,
        "Record each walker's cosine to the start, the histogram's flatness and S's change every this many steps.",
    )
    engine: str = param(
        "loop",
        "How the walkers move: loop (one after the other) or vectorized (every walker's CVs and force "
        "in one vmap forward and backward: for a GPU). They agree only up to rounding, so a walk "
        "resumes only with the engine it started with.",
        added=True,
    )
    edges: str = param(
        "flat",
        "How the entropy S continues between the grid's outermost bin centres and its edges: flat "
        "(no bias force there, as every walk of protocols 1 and 2 ran) or linear (the outermost "
        "slope carried on, so the deposits push a walker at a wall back into the grid).",
        added=True,
    )
    ln_f_schedule: str = param(
        "ramp",
        "The ln f schedule: ramp (rise, plateau over the entropy phase, 1/t decay; ln_f_max, rise, "
        "plateau) or classic (start at ln_f0, halve whenever the histogram is 80% flat over the "
        "bins of flat_over, checked every 1,000 steps).",
        added=True,
    )
    ln_f0: float = param(1.0, "Starting ln f of the classic schedule.", added=True)
    flat_over: str = param(
        "visited",
        "Which bins a flatness counts: visited (the non-zero ones, as protocols 1 and 2 counted) or "
        "x (every x-bin of the histogram summed over y: 0 until the walk has covered the x range). "
        "The classic schedule halves on it, and every walk records it.",
        added=True,
    )
    wall_force: str = param(
        "fresh",
        "The force on a walker whose drift left the grid (undone, velocity reversed): fresh "
        "(recomputed under the current S, so the deposits made while it could not move push it "
        "off the wall) or kept (its last accepted step's, as every walk of protocols 1 to 5 ran).",
        absent="kept",
    )

    target_halvings: int | None = param(
        None,
        "With the classic schedule: extend the entropy phase past `steps` until ln f has been halved "
        "at least this many times (with target_cosine: until both hold; None: no halving target).",
        added=True,
    )

    def __post_init__(self) -> None:
        owner = "WLMDSettings"
        for name in (
            "steps",
            "walkers",
            "share_every",
            "every",
            "max_samples",
            "checkpoint_every",
            "report_every",
        ):
            check_int(owner, name, getattr(self, name), 1)
        if self.max_steps is not None:
            check_int(owner, "max_steps", self.max_steps, self.steps)
        if self.target_cosine is not None:
            check_real(owner, "target_cosine", self.target_cosine, -1, 1)
        if self.target_halvings is not None:
            check_int(owner, "target_halvings", self.target_halvings, 1)
        for name in ("production_steps", "rise", "seed"):
            check_int(owner, name, getattr(self, name), 0)
        if self.plateau is not None:
            check_int(owner, "plateau", self.plateau, 0)
        for name in ("dt", "kT", "k", "ln_f_max", "ln_f0", "x_below", "x_above"):
            check_real(owner, name, getattr(self, name), 0, float("inf"), low_open=True)
        check_real(owner, "gamma", self.gamma, 0, 1, low_open=True)
        check_choice(owner, "engine", self.engine, ("loop", "vectorized"))
        check_choice(owner, "edges", self.edges, ("flat", "linear"))  # interp.wlmd.grid.EDGES
        check_choice(owner, "wall_force", self.wall_force, ("kept", "fresh"))  # sampler.WALL_FORCES
        check_choice(owner, "target_walker", self.target_walker, ("every", "median"))
        check_choice(owner, "ln_f_schedule", self.ln_f_schedule, ("ramp", "classic"))
        check_choice(owner, "flat_over", self.flat_over, ("visited", "x"))  # interp.wlmd.grid.FLAT_OVER
        if self.target_halvings is not None and self.ln_f_schedule != "classic":
            raise ConfigError(
                f"WLMDSettings.target_halvings = {self.target_halvings} needs ln_f_schedule = 'classic' "
                f"(it is {self.ln_f_schedule!r})",
                "set ln_f_schedule to 'classic', or target_halvings to None",
            )
        check_real(owner, "window_x", self.window_x, 0, float("inf"))
        check_real(owner, "y_low", self.y_low, float("-inf"), Y_TOP, high_open=True)
        if not isinstance(self.bins, tuple) or len(self.bins) != 2:
            raise ConfigError(
                f"WLMDSettings.bins = {self.bins!r} is invalid", "use two integers >= 1 (bins along x, y)"
            )
        for n in self.bins:
            check_int(owner, "bins", n, 1)

    def grid(self, x0: float, y0: float) -> GridSpec:
        """The entropy grid around a start at ``(x0, y0)`` (y's lower edge is lowered to hold it)."""
        from interp.wlmd.grid import GridSpec

        return GridSpec(
            (x0 - self.x_below, x0 + self.x_above),
            (min(self.y_low, y0 - 0.05), Y_TOP),
            *self.bins,
            edges=self.edges,
        )

    def window(self, x0: float, y0: float) -> tuple[float, float, float, float]:
        """The production window ``(x_lo, x_hi, y_lo, y_hi)`` around a start at ``(x0, y0)``."""
        return x0 - self.window_x, x0 + self.window_x, min(y0, self.window_y), Y_TOP

    def walk_cosine(self, cosines: Sequence[float]) -> float:
        """The cosine `target_cosine` is compared with: the largest of the walkers' cosines to
        their starts (every walker must be that far), or their median.
        """
        if any(math.isnan(c) for c in cosines):  # a diverged walker never counts as decorrelated
            return math.nan
        return max(cosines) if self.target_walker == "every" else statistics.median(cosines)

    def halvings(self, ln_f: float) -> float:
        """How many times the classic schedule has halved `ln_f0` to reach `ln_f` (a walk record's
        ``ln_f``; infinite once the schedule has finished and records 0; 0 with the ramp).
        """
        if self.ln_f_schedule != "classic":
            return 0
        return math.inf if ln_f <= 0 else round(math.log2(self.ln_f0 / ln_f))

    def target_ln_f(self) -> float | None:
        """The ``ln f`` that `target_halvings` halvings of `ln_f0` reach (None without that target)."""
        return None if self.target_halvings is None else self.ln_f0 / 2**self.target_halvings

    def targets_met(self, record: Mapping[str, Any]) -> bool:
        """Whether a walk record (`interp.wlmd.sampler.walk_record`) meets the walk's targets:
        `target_cosine` (`walk_cosine`) and `target_halvings`, those that are set.
        """
        if self.target_cosine is not None and not self.walk_cosine(record["cosine"]) <= self.target_cosine:
            return False  # `not <=`: a NaN cosine never meets it
        return self.target_halvings is None or self.halvings(record["ln_f"]) >= self.target_halvings

    def budget(self) -> int:
        """The most entropy-phase steps: `steps`, or `max_steps` when a target may extend it."""
        targets = (self.target_cosine, self.target_halvings)
        return self.steps if targets == (None, None) or self.max_steps is None else self.max_steps

    def schedule(self) -> Schedule:
        """The ``ln f`` schedule: the ramp (rise, a plateau over the entropy phase, then a 1/t
        decay) or the classic one (`ln_f0`, halved whenever flat over `flat_over`'s bins).
        """
        from interp.wlmd.grid import Schedule

        if self.ln_f_schedule == "classic":
            return Schedule(kind="flat", ln_f0=self.ln_f0, flat_over=self.flat_over)
        plateau = self.steps if self.plateau is None else self.plateau
        return Schedule(
            ln_f_max=self.ln_f_max, rise=min(self.rise, self.steps), plateau=plateau, flat_over=self.flat_over
        )


CPU_WLMD = WLMDSettings(
    steps=2000,
    production_steps=500,
    walkers=1,
    x_below=0.75,
    x_above=0.25,
    y_low=9.5,
    bins=(4, 7),
    max_samples=4,
    wall_force="kept",
)
"""The CPU-scale protocol's WLMD: a short walk on a narrow grid around the AdamW model.

Narrow: the walk starts in the functional region (at the AdamW model) and the grid walls keep it
there; a wide grid gives the same in-window distribution, only later (the walk has to come
back). The upper x wall is the window's upper edge, where a nearly free walk piles up (more
volume at higher loss), so it stays in the window. A reflected walker keeps its force, as
protocols 1-5 (all built on these settings) ran; protocol 6 recomputes it."""


@dataclass(frozen=True)
class StudyBSettings:
    """Every setting of study B's measurement (defaults: the CPU-scale run of docs/study_b.md)."""

    p: int = param(67, "Modulus of x + y mod p.")
    train_frac: float = param(0.5, "Train fraction of the task.")
    weight_norm: float = param(30.0, "Sphere radius of the AdamW run (and of WLMD).")
    epochs: int = param(1000, "Full-batch epochs of the AdamW run.")
    lr: float = param(1.5e-3, "AdamW learning rate of the AdamW run.")
    model_overrides: dict[str, Any] = param(
        None, "modadd-1l config fields to change (empty: the preset).", factory=dict
    )
    wlmd: WLMDSettings = param(CPU_WLMD, "The WLMD settings (a nested object; see WLMDSettings).")
    k: int = param(37, "New tokens of the noise set.")
    max_steps: int = param(2000, "Step cap of each injection.")
    eval_every: int = param(50, "Injection evaluation interval.")
    injection_lr: float = param(1e-3, "AdamW learning rate of the injection.")
    injection_target_acc: float = param(
        0.998, "An injection stops once combined train accuracy is above this."
    )
    injection_keep_norm: bool = param(
        True, "Keep the injection on the extended model's sphere (False: drop the norm constraint)."
    )
    walker_starts: str = param(
        "source",
        "Where the walkers start: source (every walker at the seed's AdamW model) or own (walker "
        f"i > 0 at its own AdamW model, init seed seed + {OWN_START_STRIDE} i, the same training set "
        "and settings).",
        added=True,
    )
    target_flatness: float | None = param(
        None,
        "The flatness (min / mean of the visited bins' histogram) a walk must reach for its sample "
        "to test the claim: reported in the table, not a stop (None: no target).",
        added=True,
    )

    def __post_init__(self) -> None:
        owner = "StudyBSettings"
        for name in ("p", "epochs", "k", "max_steps", "eval_every"):
            check_int(owner, name, getattr(self, name), 1)
        for name in ("weight_norm", "lr", "injection_lr"):
            check_real(owner, name, getattr(self, name), 0, float("inf"), low_open=True)
        check_real(owner, "injection_target_acc", self.injection_target_acc, 0, 1, high_open=True)
        check_bool(owner, "injection_keep_norm", self.injection_keep_norm)
        check_choice(owner, "walker_starts", self.walker_starts, ("source", "own"))
        if self.target_flatness is not None:
            check_real(owner, "target_flatness", self.target_flatness, 0, 1)

    def start_seeds(self, seed: int) -> list[int]:
        """The init seeds of the AdamW models the walkers of `seed` start at (one per walker)."""
        if self.walker_starts == "source":
            return [seed] * self.wlmd.walkers
        return [seed + OWN_START_STRIDE * i for i in range(self.wlmd.walkers)]

    def finetune_config(self) -> TrainConfig:
        """The injections' fine-tuning config (the norm is set per source by `study_b.inject`)."""
        from interp.training.config import finetune_config

        return finetune_config(
            lr=self.injection_lr,
            epochs=self.max_steps,
            eval_every=self.eval_every,
            target_acc=self.injection_target_acc,
        )


def settings_with(overrides: Mapping[str, Any], base: StudyBSettings | None = None) -> StudyBSettings:
    """`base` (default: the defaults) with JSON `overrides`; a nested ``"wlmd"`` object changes
    only the WLMD fields it names.

    Raises:
        ConfigError: On an unknown key or an invalid value.
    """
    merged = to_dict(base or StudyBSettings())
    for key, value in overrides.items():
        if key == "wlmd" and isinstance(value, Mapping):
            merged["wlmd"] = {**merged["wlmd"], **value}
        else:
            merged[key] = value
    return from_dict(StudyBSettings, merged, where="the study-B settings")


PROTOCOLS = ("protocol-2", "protocol-2-walkers", "protocol-3", "protocol-4", "protocol-5", "protocol-6")
"""The protocols shipped as data, one ``protocols/<name>.json`` each (`to_dict` of its settings,
byte for byte the ``settings.json`` its records hold under ``results/study-b/<name>``);
``protocols/README.md`` says what each changed and why."""


def load_protocol(name: str) -> StudyBSettings:
    """The settings of protocol `name` (one of `PROTOCOLS`), read from its shipped JSON file.

    An absent key reads as `interp.config.from_dict` reads it in a run's ``settings.json``: its
    field's default, or its ``absent=`` value for a field whose default changed (protocols 2-5
    name no ``wall_force``, so they keep the force, as they ran).

    Raises:
        ConfigError: If `name` is not a shipped protocol, or its file does not hold valid settings.
    """
    if name not in PROTOCOLS:
        raise ConfigError(f"unknown study-B protocol {name!r}", f"choose from {', '.join(PROTOCOLS)}")
    path = resources.files(__package__).joinpath("protocols", f"{name}.json")
    return from_dict(StudyBSettings, json.loads(path.read_text()), where=f"protocol file {name}.json")


PRESETS = {"cpu": StudyBSettings(), **{name: load_protocol(name) for name in PROTOCOLS}}
"""The settings `interp study-b measure --preset` names: ``cpu`` (the defaults: protocol 1) and
every shipped protocol (`load_protocol`)."""
