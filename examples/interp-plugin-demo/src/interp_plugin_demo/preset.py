"""`demo-1l`: a one-layer, two-head transformer that trains on `demo-max` by default."""

from interp.plugins import Preset

PRESET = Preset(
    model={"kind": "transformer", "n_layers": 1, "n_heads": 2, "d_model": 32, "d_mlp": 64, "act_fn": "relu"},
    task={"name": "demo-max"},
    train={"epochs": 300, "lr": 3e-3, "weight_decay": 0.1, "eval_every": 50, "checkpoint_every": 100},
    summary="One layer, two heads, d_model 32: learns demo-max in a few hundred full-batch steps.",
)
