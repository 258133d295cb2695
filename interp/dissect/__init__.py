"""Dissection primitives on one model: interventions, patching, ablation, head and gradient measures.

Tensors in, small dataclasses out; the registered analyses (`analyses/`) compose them. Importing
this package imports no torch; each name loads its module on first use.
"""

from interp.lazy import lazy_surface

_MODULES = {
    "interp.dissect.interventions": ("Intervention", "run_interventions"),
    "interp.dissect.patching": (
        "SITES",
        "PatchPairs",
        "PatchSweep",
        "SiteEffect",
        "aligned_pairs",
        "cross_pairs",
        "logit_diff",
        "patch_sweep",
        "recovery",
    ),
    "interp.dissect.ablation": ("AblationEffect", "Component", "ablate", "components"),
    "interp.dissect.pruning": ("prune_curve",),
    "interp.dissect.heads": (
        "attention_to_first",
        "ov_parity_rho",
        "qk_rho_empirical",
        "qk_rho_from_weights",
    ),
    "interp.dissect.gradient_groups": (
        "GradientStats",
        "GroupGradients",
        "gradient_stats",
        "group_gradients",
    ),
    "interp.dissect.fourier": ("fourier_amplitudes", "ipr", "neuron_ipr"),
    "interp.dissect.weights": ("effective_rank", "parameter_cosine", "transformer_ranks"),
    "interp.dissect.rank_stats": ("pearson", "rank_biserial", "rankdata", "spearman"),
    "interp.dissect.edges": ("EdgeGraph", "edge_graph", "run_with_edges", "with_split_inputs"),
    "interp.dissect.edge_attribution": ("agreement", "exact_scores", "gradient_scores"),
    "interp.dissect.circuits": ("faithfulness_curve", "smallest_faithful"),
    "interp.dissect.learning_coefficient": ("LLCEstimate", "default_n_beta", "llc", "reference_loss"),
    "interp.dissect.weight_parts": ("parse_restrict", "restrict_masks"),
}
_NAMES = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
