"""The one list of analyses: name -> (module, one-line summary).

Deliberately free of heavy imports: `interp --help` lists these commands without importing
torch. Each module named here defines `ANALYSIS` (an `analyses.base.Analysis`) named as its
entry (a test checks) and taking its summary from here, so the summary is written once; the
CLI subcommands, docs pages and integration tests are all generated from this dict.
"""

from __future__ import annotations

REGISTRY: dict[str, tuple[str, str]] = {
    "patch": (
        "analyses.patch",
        "Activation patching between splits: how much each site restores the source behaviour.",
    ),
    "path-patch": (
        "analyses.path_patch",
        "Path patching: each head's effect on each later head's query, key or value, and on the logits.",
    ),
    "attribute": (
        "analyses.attribute",
        "Attribution patching: the gradient estimate of activation patching at every site at once.",
    ),
    "circuit": (
        "analyses.circuit",
        "Edge circuits: exact edge patching, EAP and EAP-IG scores of every edge with positions, their "
        "agreement, and the faithfulness of the top-k circuits.",
    ),
    "dla": (
        "analyses.dla",
        "Direct logit attribution: each head, MLP (or neuron) and embedding's direct share of the label "
        "logit difference.",
    ),
    "ablate": (
        "analyses.ablate",
        "Zero- and mean-ablate every head and MLP: change in accuracy and loss per split.",
    ),
    "fingerprint": (
        "analyses.fingerprint",
        "Per-head circuit fingerprints: QK magnitude sorting, attention to position 0, OV parity.",
    ),
    "grads": (
        "analyses.grads",
        "Per-group gradient decomposition: conflict (cosine) and amplification per block.",
    ),
    "probe": (
        "analyses.probe",
        "Linear probes for a target at every site and position, and token parity from W_E on held-out values.",
    ),
    "rank": (
        "analyses.rank",
        "Effective rank (Roy-Vetterli) of every attention and MLP weight matrix, per head and per layer.",
    ),
    "drift": (
        "analyses.drift",
        "Cosine between the parameters and a reference checkpoint's, in total and per tensor.",
    ),
    "fourier": (
        "analyses.fourier",
        "Fourier structure of modular addition: embedding spectrum, key frequencies, each neuron's "
        "frequency.",
    ),
    "progress": (
        "analyses.progress",
        "Progress measures of modular addition: restricted and excluded loss at the key frequencies.",
    ),
    "ipr": (
        "analyses.ipr",
        "Per-neuron Fourier inverse participation ratio of a quadratic MLP (high = periodic, generalising).",
    ),
    "prune": (
        "analyses.prune",
        "Remove a quadratic MLP's hidden neurons lowest-IPR first: clean, corrupted and test accuracy.",
    ),
    "llc": (
        "analyses.llc",
        "Local learning coefficient by localized SGLD, whole model or one head / MLP / embedding, with "
        "chain health flags.",
    ),
    "llc-calibrate": (
        "analyses.llc_calibrate",
        "Sweep LLC step size x n_beta on one checkpoint: estimate and chain health per cell, and the "
        "recommended setting.",
    ),
}

EARLY_PARAMS: dict[str, tuple[str, str]] = {
    "llc": ("analyses.llc_params", "Params"),
    "llc-calibrate": ("analyses.llc_params", "CalibrateParams"),
}
"""Analyses whose `Params` live in a torch-free module (module, class): the CLI builds them from
the raw arguments before it loads torch, so a bad value fails in a fraction of a second."""
