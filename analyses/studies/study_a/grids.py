"""Study A's sweep grids: the demo, the CPU-scale regimes, the map, the headline and its stages.

Each grid is a `analyses.grids.Grid` named as `interp sweep --grid NAME` knows it (the studies'
grids are collected in `analyses.studies.grids`). `PENDING` names grids that wait for a choice
not made yet (study A's V*, now made).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from analyses.grids import Grid
from interp.training.config import EVAL_MEASURES

# The cadence of study A's confirmation grids (the map, the headline and the stages after it).
_CONFIRMATION_TRAIN: dict[str, Any] = {
    "eval_every": 25,
    "eval_log_points": 40,
    "checkpoint_every": 100,
    "checkpoint_log_points": 20,
}

V_STAR: int | None = 32
"""Study A's headline vocabulary, chosen by the map's preregistered rule (docs/study_a.md;
`analyses.studies.study_a.stats.headline_vocabulary` on `results/study-a/map`: rule rate at
r = 0.9 minus r = 0.5 was -0.2, 0, +0.4 and 0 at vocab 16, 24, 32 and 48). The grids that run
at V* (the headline, `mechanism_max_grid`) exist in `GRIDS` only once it is set here."""


def mechanism_max_grid(vocab: int) -> Grid:
    """The max-shortcut side of study A's mechanism test (`analyses.studies.study_a.mechanism`) at `vocab`.

    `mpsp-2l2h`, shortcut max, r = 0.9, 3 seeds (seed indices 0-2 of sweep seed 600, which no
    other study-A grid uses), 1,500 epochs at the map's evaluation and checkpoint cadence (its
    runs compare with the map's positional-shortcut runs at the same vocabulary), with the
    circuit measures logged at every evaluation.
    """
    return Grid(
        presets=("mpsp-2l2h",),
        task={"shortcut": "max"},
        train={**_CONFIRMATION_TRAIN, "epochs": 1500, "eval_measures": list(EVAL_MEASURES)},
        axes={"vocab": [vocab], "r": [0.9]},
        seeds=3,
        sweep_seed=600,
    )


DEMO_EPOCHS = 400
"""Epochs of each demo run, chosen so that `make demo` ends within 10 minutes on 2 cores of an
AVX2 machine as well as an AVX-512 one (`benchmarks/demo_time.py` prints the estimate from the
committed records).

Each of the two workers trains one two-layer and one one-layer run, so the demo lasts about (c_2 +
c_1) x epochs + a fixed part (start-up, the circuit evolution of every checkpoint, the report). With
the other core busy, as in the demo, the committed records (`compute.json` over epochs) give c_2 =
0.305 and c_1 = 0.059 CPU s an epoch on AVX-512 machines (the map's and the one-layer map's runs at
32 values, medians); a demo two-layer run on an AVX2 machine used 0.75 (2.46x). The 1,000-epoch demo
took 407 s on AVX-512 and 1,005 s on AVX2: fixed parts of about 43 s and 109 s. At 400 epochs: about
189 s and 468 s (209 s and 518 s at the slowest two-layer epoch recorded, 1.17x the median); 500
epochs could reach 621 s on AVX2. A run's start (its data, the dense early evaluations) cost about
11 CPU s on AVX-512 (measured under load), which the medians spread over 1,500 epochs: at 400 epochs
that adds about 10 s a worker (25 s on AVX2), still well inside the target. Nothing the demo showed
is lost: every two-layer r = 0.9 run at 32 values and weight decay 0.1 that reached the rule within
1,000 epochs had reached it by epoch 275 (7 of 27 in the headline, the map and the crossed grids;
the other two came at 1,025 and 2,950).
"""

PENDING: dict[str, str] = {}
"""Named grids that cannot be built yet: name -> what they wait for (`interp sweep` says it)."""

GRIDS: dict[str, Grid] = {
    # `interp study-a demo` (`make demo`): one seed per cell of study A's confirmation regime
    # (the positional shortcut, 32 values, the study's data scale); sweep seed 0, which no
    # confirmation grid uses. DEMO_EPOCHS says how its size was chosen. Checkpoints every 25
    # epochs (and 10 log-spaced ones) draw its circuit evolution.
    "demo": Grid(
        presets=("mpsp-1l1h", "mpsp-2l2h"),
        task={"shortcut": "first", "vocab": 32},
        train={
            "epochs": DEMO_EPOCHS,
            "eval_every": 25,
            "eval_log_points": 20,
            "checkpoint_every": 25,
            "checkpoint_log_points": 10,
        },
        axes={"r": [0.5, 0.9]},
        seeds=1,
    ),
    # Study A at CPU scale (docs/study_a.md): 8x fewer train examples, 4x smaller vocabulary,
    # 5x fewer epochs than the study; 10 seeds per cell.
    "study-a-cpu": Grid(
        presets=("mpsp-1l1h", "mpsp-2l2h"),
        task={"vocab": 16, "n_train": 2048, "n_val": 512, "n_adv": 512},
        train={"epochs": 3000, "eval_every": 50, "checkpoint_log_points": 12},
        axes={"r": [0.5, 0.9, 0.15]},
        seeds=10,
    ),
    # The study's full scale (GPU-sized): 1 vs 2 layers at r in {0.5, 0.9, 0.15}, 10 seeds.
    "study-a": Grid(presets=("mpsp-1l1h", "mpsp-2l2h"), axes={"r": [0.5, 0.9, 0.15]}, seeds=10),
    # Study A's preregistered regime search at the study's data scale (docs/study_a.md,
    # "Regime search"): two layers at r = 0.9 first, 2 seeds, run in this order; sweep seed 100
    # (the confirmatory grid uses another). Dense log-spaced checkpoints for the dissection.
    **{
        name: Grid(
            presets=("mpsp-2l2h",),
            train={**train, "checkpoint_log_points": 30, "checkpoint_every": 1000},
            axes={"r": [0.9]},
            seeds=2,
            sweep_seed=100,
        )
        for name, train in (
            ("study-a-search-1", {"batch_size": 512}),
            ("study-a-search-2", {"lr": 3e-3, "weight_decay": 0.4}),
            ("study-a-search-3", {"batch_size": 2048}),
        )
    },
    # Study A confirmed at CPU scale (docs/study_a.md, "Confirmation at CPU scale",
    # preregistered): the positional shortcut, 16,384 / 2,048 / 2,048 examples. Evaluation every
    # 25 epochs and checkpoints every 100 (plus log-spaced ones of each), so dissection and
    # circuit discovery can use these runs without retraining. The map first: where along the
    # vocabulary the two-layer contrast lives (sweep seed 300).
    "study-a-map": Grid(
        presets=("mpsp-2l2h",),
        task={"shortcut": "first"},
        train={**_CONFIRMATION_TRAIN, "epochs": 1500},
        axes={"vocab": [16, 24, 32, 48], "r": [0.9, 0.5]},
        seeds=5,
        sweep_seed=300,
    ),
    # Stage (a) after the headline: is it the training set or the initialisation? 4 data seeds
    # x 3 model seeds crossed, two layers at r = 0.9 (sweep seed 500), at V* = 32.
    "study-a-crossed": Grid(
        presets=("mpsp-2l2h",),
        task={"shortcut": "first", "vocab": 32},
        train={**_CONFIRMATION_TRAIN, "epochs": 1500},
        axes={"r": [0.9]},
        seeds=3,
        data_seeds=4,
        sweep_seed=500,
    ),
    # Stage (a), second: the map's one-layer cells (the same data seeds as the map's two-layer
    # runs, sweep seed 300, hence the same training sets), for the one-layer line of the vocabulary figure.
    "study-a-map-1l1h": Grid(
        presets=("mpsp-1l1h",),
        task={"shortcut": "first"},
        train={**_CONFIRMATION_TRAIN, "epochs": 1500},
        axes={"vocab": [16, 24, 32, 48], "r": [0.9, 0.5]},
        seeds=5,
        sweep_seed=300,
    ),
}


if V_STAR is None:
    PENDING["study-a-mechanism-max"] = (
        "waits for study A's headline vocabulary V*: set V_STAR in analyses/studies/grids.py once "
        "the map has chosen it (16, 24, 32 or 48)"
    )
else:
    GRIDS["study-a-mechanism-max"] = mechanism_max_grid(V_STAR)
    # The headline (docs/study_a.md, preregistered): both models at r = 0.9 and 0.5 at V*, 10
    # fresh seeds (sweep seed 400), 3,000 epochs, the circuit measures logged at every evaluation.
    GRIDS["study-a-headline"] = Grid(
        presets=("mpsp-2l2h", "mpsp-1l1h"),
        task={"shortcut": "first", "vocab": V_STAR},
        train={
            **_CONFIRMATION_TRAIN,
            "epochs": 3000,
            "eval_measures": ["attn_pos0", "ov_parity_rho", "grad_groups"],
        },
        axes={"r": [0.9, 0.5]},
        seeds=10,
        sweep_seed=400,
    )
    # Stage (a), third: below chance, r = 0.15 (the shortcut mostly disagrees with the label),
    # both models, the headline's seed indices 0-4 (sweep seed 400: the same data seeds and
    # initialisations as its first five seeds; the training sets differ, as r sets them), 3,000 epochs. The rule and the
    # inverted shortcut are told apart by val accuracy (`study_a_stats.outcome`).
    GRIDS["study-a-below-chance"] = dataclasses.replace(
        GRIDS["study-a-headline"], axes={"r": [0.15]}, seeds=5
    )
    # Stage (b) (docs/study_a.md, fixed before any of its runs; on a GPU: scripts/gpu/study_a.sh),
    # 5 seeds a cell at V*, 3,000 epochs, the headline's cadence and measures. Paired with the
    # headline's first five seeds (sweep seed 400: same data seeds and initialisations) where
    # one setting of the headline changes: weight decay 0.4 (the same training sets), and the
    # max shortcut (whose consistent examples, hence training sets, differ).
    _headline_5 = dataclasses.replace(GRIDS["study-a-headline"], seeds=5)
    GRIDS["study-a-wd"] = dataclasses.replace(
        _headline_5,
        presets=("mpsp-2l2h",),
        train={**_headline_5.train, "weight_decay": 0.4},
        axes={"r": [0.9]},
    )
    GRIDS["study-a-max"] = dataclasses.replace(_headline_5, task={**_headline_5.task, "shortcut": "max"})
    # Models or labels the headline does not have: fresh seeds (sweep seed 700, no other grid's).
    GRIDS["study-a-capacity"] = dataclasses.replace(
        _headline_5, presets=("mpsp-2l1h", "mpsp-1l2h"), sweep_seed=700
    )
    GRIDS["study-a-ternary"] = dataclasses.replace(
        _headline_5, task={**_headline_5.task, "label": "sum-mod3"}, axes={"r": [0.9, 1 / 3]}, sweep_seed=700
    )
    # The map one vocabulary further, both models: the map's cadence, 1,500 epochs, sweep seed 300.
    GRIDS["study-a-vocab64"] = dataclasses.replace(
        GRIDS["study-a-map"], presets=("mpsp-2l2h", "mpsp-1l1h"), axes={"vocab": [64], "r": [0.9, 0.5]}
    )
    # Study A decided (docs/study_a.md, "Weight decay or imbalance?", preregistered): one sweep
    # seed no grid used before, 800, shared by both stages, so seed index i is the same data seed
    # and initialisation in both and weight decay is paired on the two-layer seeds 0-9 of each r.
    # Stage 1, the weight-decay headline: both models, weight decay 0.4, 10 seeds, 4,000 epochs
    # (the latest rule at 0.4 so far came at epoch 1,950). Stage 2, the replication with power:
    # two layers at the headline's weight decay 0.1, 30 seeds, 3,000 epochs.
    GRIDS["study-a-wd-headline"] = dataclasses.replace(
        GRIDS["study-a-headline"],
        train={**GRIDS["study-a-headline"].train, "epochs": 4000, "weight_decay": 0.4},
        sweep_seed=800,
    )
    GRIDS["study-a-replication"] = dataclasses.replace(
        GRIDS["study-a-headline"], presets=("mpsp-2l2h",), seeds=30, sweep_seed=800
    )
