"""Study C's sweep grids: the noise sweep and the weight-decay regimes (`interp sweep --grid`)."""

from __future__ import annotations

from analyses.grids import Grid

GRIDS: dict[str, Grid] = {
    # Study C's noise sweep: the same initialisation for every xi of a seed.
    "study-c": Grid(presets=("quadratic-mlp",), axes={"xi": [0.0, 0.1, 0.2, 0.3, 0.35, 0.4, 0.5]}, seeds=5),
    # Study C's weight-decay regimes at xi = 0.35 (coexistence, partial / full inversion,
    # forgetting); checkpoints every 500 epochs so inversion can be measured over training.
    "study-c-wd": Grid(
        presets=("quadratic-mlp",),
        task={"xi": 0.35},
        train={"checkpoint_every": 500},
        axes={"weight_decay": [0.0, 1.0, 5.0, 15.0, 20.0]},
        seeds=1,
    ),
}
