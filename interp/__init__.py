"""`interp`: a toolkit for the mechanistic interpretability of small models.

One import for notebooks: ``import interp`` gives the names a researcher types
(`interp.train`, `interp.TrainConfig`, `interp.open_run`, `interp.load_checkpoint`,
`interp.read_metrics`, `interp.patch_sweep`, ...); the rest of each subpackage is a dotted name
away (`interp.dissect.spearman`, `interp.wlmd.grid.deposit`). Nothing heavy is
imported until a name is first used, so `interp --help` starts in well under a second. The
concepts live in subpackages (`interp.store`, `interp.training`, `interp.dissect`,
`interp.wlmd`, `interp.sweep`, `interp.cli`); `docs/architecture.md` draws the layout.
Models, tasks and analyses are sibling packages (`models`, `tasks`, `analyses`).
"""

from interp.lazy import lazy_surface

__version__ = "0.1.0"

# What a researcher types, by the module or subpackage that defines it. The subpackages keep
# fuller surfaces (``interp.wlmd.grid.deposit``, ``interp.dissect.spearman``, ...); the root keeps
# room for the names other work adds (tests/unit/test_architecture.py caps it at 60).
_NAMES_BY_HOME = {
    "interp.splits": ("Split", "Task"),
    "interp.metrics": ("evaluate", "per_example_loss", "find_rise"),
    "interp.errors": ("InterpError", "ConfigError", "CheckpointError"),
    "interp.text": ("model_summary", "splits_table"),
    "interp.config": ("param", "to_dict"),
    "interp.store": (
        "open_run",
        "RunHandle",
        "read_run",
        "load_checkpoint",
        "list_checkpoints",
        "resolve_checkpoint",
        "read_config",
        "read_metrics",
        "export_weights",
    ),
    "interp.training": (
        "TrainConfig",
        "TrainLoop",
        "train",
        "train_vectorized",
        "finetune",
        "finetune_config",
    ),
    "interp.dissect": (
        "Intervention",
        "run_interventions",
        "patch_sweep",
        "aligned_pairs",
        "cross_pairs",
        "logit_diff",
        "ablate",
        "prune_curve",
        "group_gradients",
        "gradient_stats",
        "attention_to_first",
        "ov_parity_rho",
        "qk_rho_from_weights",
        "effective_rank",
        "parameter_cosine",
        "neuron_ipr",
        "edge_graph",
        "faithfulness_curve",
        "smallest_faithful",
        "llc",
    ),
    "interp.wlmd": ("WLMDConfig", "GridSpec", "Schedule", "ModelCVs", "wlmd_run", "wlmd_produce"),
    "interp.sweep": ("RunSpec", "run_sweep", "read_sweep"),
    "interp.stages": ("find_stages", "Stages"),
}
_NAMES = {name: home for home, names in _NAMES_BY_HOME.items() for name in names}

__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
__all__ = sorted(_NAMES)
