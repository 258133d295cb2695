"""Analysis ``circuit``: score every edge of the graph with positions, keep a circuit, measure its faithfulness.

Pairs are each example of ``split`` (clean) with its counterfactual partner (corrupted,
`tasks.counterfactual`): label-flip partners for the rule's edges (the metric is the logit
difference between the two labels), shortcut-flip partners for the shortcut's edges (between
the two shortcut values; their labels are equal). For each pairing, every edge of
`interp.dissect.edges`'s graph is scored by exact edge patching, EAP and EAP-IG
(`interp.dissect.edge_attribution`), EAP's and EAP-IG's agreement with exact patching is
measured, and the top-k circuits by the chosen method's ``|score|`` get a faithfulness curve
(`interp.dissect.circuits`) and the smallest one reaching the chosen faithfulness.

Wraps `interp.dissect.edges`, `interp.dissect.edge_attribution`, `interp.dissect.circuits` and
`interp.dissect.patching` (the edge graph; exact, EAP and EAP-IG scores; faithfulness; the
clean/corrupted pairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.circuit_figure import graph_figure
from analyses.effects import MAX_EXAMPLES_HELP, SPLIT_HELP
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import check_choice, check_int, check_real, parse_choices, to_dict
from interp.dissect import circuits
from interp.dissect.edge_attribution import METHODS, agreement, exact_scores, gradient_scores
from interp.dissect.edges import EdgeGraph, edge_graph, with_split_inputs
from interp.dissect.hooks import has_mlps
from interp.dissect.patching import PatchPairs
from interp.errors import ConfigError
from interp.splits import Split
from tasks import MPSPTask, counterfactual
from tasks.counterfactuals import FLIPS

DEFINITION = """\
The graph has a node for the token and position embeddings, each head's output and its query, key
and value inputs, each MLP and the logits, at every position; an edge carries an upstream node's
output at position p into a later node's input at p through the residual stream. Each pair is an
example of the split (clean) and its counterfactual partner (corrupted); the metric is the logit
difference between the clean and the corrupted answer (labels for label-flip pairs, shortcut values
for shortcut-flip pairs). An edge's exact score is the change of the metric when that edge alone
takes its corrupted value (the receiver's input loses the upstream output of the clean run and
gains the corrupted one); EAP estimates every edge at once as the upstream change dotted with the
gradient at the receiver's input; EAP-IG averages that gradient over inputs interpolated from clean
to corrupted embeddings. A top-k circuit keeps the k edges of largest ``|score|``; its faithfulness is
(LD(circuit) - LD(corrupt)) / (LD(clean) - LD(corrupt)) with every other edge patched, undefined
below a 0.1-logit gap."""
REFERENCE = (
    'Syed, Rager and Conmy, "Attribution Patching Outperforms Automated Circuit Discovery" (2023); '
    'Hanna, Pezzelle and Belinkov, "Have Faith in Faithfulness: Going Beyond Circuit Overlap When '
    'Finding and Evaluating Circuits" (2024); Conmy, Mavor-Parker, Lynch, Heimersheim and '
    'Garriga-Alonso, "Towards Automated Circuit Discovery for Mechanistic Interpretability" (2023).'
)


@dataclass(frozen=True)
class Params:
    """Parameters of ``circuit``."""

    split: str = param(
        "adv", SPLIT_HELP.replace("patched (the target / corrupted inputs)", "explained (clean)")
    )
    flips: str = param("label,shortcut", "Comma-separated counterfactual pairings: label (rule), shortcut.")
    max_examples: int = param(512, MAX_EXAMPLES_HELP)
    seed: int = param(0, "Seed of the counterfactual edits.")
    steps: int = param(20, "EAP-IG integration steps (midpoint rule), >= 1.")
    method: str = param("exact", "Scores that rank edges into circuits: exact, eap or eap_ig.")
    faithfulness: float = param(0.9, "Target faithfulness of the smallest circuit, in (0, 1].")
    top_k: int = param(20, "k of the top-k overlap between estimates and exact patching.")

    def __post_init__(self) -> None:
        parse_choices(self.flips, FLIPS, "counterfactual flip")
        check_choice("circuit", "method", self.method, METHODS)
        check_int("circuit", "steps", self.steps, 1)
        check_int("circuit", "top_k", self.top_k, 1)
        check_int("circuit", "max_examples", self.max_examples, 0)
        check_real("circuit", "faithfulness", self.faithfulness, 0.0, 1.0, low_open=True)


@dataclass(frozen=True)
class CircuitResult(Result):
    """Edge scores, agreement, faithfulness curve and circuit of each pairing.

    Attributes:
        split: The clean split.
        flips: The pairings, in the order of the tensors' first axis.
        n_pairs: Pairs per pairing.
        n_layers: Blocks of the model.
        n_heads: Heads per block.
        n_pos: Sequence length.
        edge_upstream: Upstream node of each edge (``embed``, ``L0H1``, ``MLP0``, ...).
        edge_receiver: Receiver of each edge (``L1H0.q``, ``MLP1``, ``logits``).
        edge_pos: Position of each edge.
        clean_logit_diff: Mean LD of the clean runs per pairing.
        corrupt_logit_diff: Mean LD of the corrupted runs per pairing.
        exact: Exact edge-patching score per pairing and edge, [flip, edge] (LD change, logits).
        eap: EAP scores, [flip, edge].
        eap_ig: EAP-IG scores, [flip, edge].
        agreement: ``{flip: {"eap" | "eap_ig": {spearman, pearson, top_k_overlap, k}}}``.
        curve_sizes: Circuit sizes of the faithfulness curves.
        curve_faithfulness: Faithfulness per pairing and size, [flip, size] (NaN: undefined).
        curve_logit_diff: Mean LD of the circuit-only run, [flip, size].
        circuit_size: Smallest top-k circuit reaching the target faithfulness, per pairing (None: none).
        circuit_faithfulness: Its faithfulness (None: none).
        kept: 1 for the edges of that circuit (the top ``top_k`` when none reaches it), [flip, edge].
    """

    analysis: ClassVar[str] = "circuit"
    split: str
    flips: list[str]
    n_pairs: dict[str, int]
    n_layers: int
    n_heads: int
    n_pos: int
    edge_upstream: list[str]
    edge_receiver: list[str]
    edge_pos: list[int]
    clean_logit_diff: dict[str, float]
    corrupt_logit_diff: dict[str, float]
    exact: Tensor
    eap: Tensor
    eap_ig: Tensor
    agreement: dict[str, dict[str, dict[str, float]]]
    curve_sizes: list[int]
    curve_faithfulness: Tensor
    curve_logit_diff: Tensor
    circuit_size: dict[str, int | None]
    circuit_faithfulness: dict[str, float | None]
    kept: Tensor

    def gap_defined(self, flip: str) -> bool:
        """Whether the pairing's clean-corrupted gap reaches `circuits.MIN_GAP`."""
        return abs(self.clean_logit_diff[flip] - self.corrupt_logit_diff[flip]) >= circuits.MIN_GAP

    def undefined_note(self) -> str:
        """Which pairings' faithfulness is undefined, and why (empty when all are defined)."""
        bad = [f for f in self.flips if not self.gap_defined(f)]
        gaps = ", ".join(f"{f} {abs(self.clean_logit_diff[f] - self.corrupt_logit_diff[f]):.3g}" for f in bad)
        return (
            f"faithfulness undefined (|LD_clean - LD_corrupt| < {circuits.MIN_GAP} logits): {gaps}"
            if bad
            else ""
        )

    def agreement_columns(self, flip: str) -> dict[str, float]:
        """The pairing's agreement with exact patching as flat columns (``eap_spearman``, ...; NaN: undefined)."""
        return {
            f"{method}_{measure}": float("nan") if value is None else float(value)
            for method, values in self.agreement[flip].items()
            for measure, value in values.items()
            if measure in ("spearman", "top_k_overlap")
        }

    def to_frame(self) -> pd.DataFrame:
        """One row per pairing and edge: all three scores, whether the circuit keeps it, and the
        pairing's agreement columns (`agreement_columns`, repeated on its rows so that `evolve`'s
        per-step table carries them).
        """
        rows = []
        for i, flip in enumerate(self.flips):
            agree = self.agreement_columns(flip)
            for e, (up, rec, pos) in enumerate(zip(self.edge_upstream, self.edge_receiver, self.edge_pos)):
                rows.append(
                    {
                        "flip": flip,
                        "edge": f"{up}->{rec}@{pos}",
                        "upstream": up,
                        "receiver": rec,
                        "pos": pos,
                        "exact": self.exact[i, e].item(),
                        "eap": self.eap[i, e].item(),
                        "eap_ig": self.eap_ig[i, e].item(),
                        "kept": bool(self.kept[i, e]),
                        **agree,
                    }
                )
        frame = pd.DataFrame(rows)
        order = frame[self.params.get("method", "exact")].abs().sort_values(ascending=False, kind="stable")
        return frame.loc[order.index].reset_index(drop=True)

    def agreement_frame(self) -> pd.DataFrame:
        """One row per pairing and estimate: Spearman, Pearson and top-k overlap with exact patching."""
        rows = [
            {"flip": flip, "method": method, **values, "gap_defined": self.gap_defined(flip)}
            for flip, methods in self.agreement.items()
            for method, values in methods.items()
        ]
        return pd.DataFrame(rows)

    def faithfulness_frame(self) -> pd.DataFrame:
        """One row per pairing and circuit size: the circuit-only LD and its faithfulness."""
        rows = [
            {
                "flip": flip,
                "size": k,
                "logit_diff": self.curve_logit_diff[i, j].item(),
                "faithfulness": self.curve_faithfulness[i, j].item(),
            }
            for i, flip in enumerate(self.flips)
            for j, k in enumerate(self.curve_sizes)
        ]
        return pd.DataFrame(rows)

    def table(self, rows: int = 12) -> str:
        """Agreement, the smallest circuits, then the top edges (and why faithfulness is undefined)."""
        note = self.undefined_note()
        target = self.params.get("faithfulness")
        sizes = ", ".join(
            f"{f}: {self.circuit_size[f]} edges (faithfulness {self.circuit_faithfulness[f]:.3f})"
            if self.circuit_size[f] is not None
            else f"{f}: none"
            for f in self.flips
        )
        agreement = self.agreement_frame().to_string(index=False, float_format=lambda v: f"{v:.3g}")
        head = super().table(rows)
        return "\n".join(
            [*([note] if note else []), agreement, f"smallest circuit >= {target}: {sizes}", head]
        )

    def figure(self) -> go.Figure:
        """The graph per pairing (nodes by layer and position, edge width by ``|score|``, kept edges
        highlighted) above the faithfulness curves.
        """
        return graph_figure(self)


def flip_pairs(task: Any, split: Any, flip: str, seed: int) -> PatchPairs:
    """Clean examples of `split` (source) with their `flip` partners (target), answers as labels.

    Label flips: the answers are the labels. Shortcut flips: the shortcut values (the labels
    are equal). Only examples with a valid partner are kept.
    """
    partner = counterfactual(task, split, flip=flip, seed=seed)
    keep = partner.extras["valid"].bool()
    clean, corrupt = (
        (s.labels if flip == "label" else s.extras["shortcut"])[keep].long() for s in (split, partner)
    )
    return PatchPairs(split.tokens[keep], partner.tokens[keep], clean, corrupt)


def _scores(model: Any, graph: Any, pairs: PatchPairs, steps: int) -> dict[str, Tensor]:
    return {
        "exact": exact_scores(model, graph, pairs),
        "eap": gradient_scores(model, graph, pairs).mean(0),
        "eap_ig": gradient_scores(model, graph, pairs, steps=steps).mean(0),
    }


def _checked_graph(subject: Subject, params: Params) -> tuple[list[str], Split, Any, EdgeGraph]:
    """The flips, split, split-input model and edge graph `compute` works on, after checking that
    the subject has them (an MPSP task, MLP blocks, at least `top_k` edges).
    """
    if not isinstance(subject.task, MPSPTask):
        raise ConfigError(f"circuit needs an MPSP task (counterfactual pairs), not {subject.task.name!r}")
    if not has_mlps(subject.model):
        raise ConfigError(
            "circuit needs a model with MLP blocks (its edge graph has an MLP node per layer); this "
            "TransformerLens model is attention-only (cfg.attn_only=True)",
            "use patch, path-patch, attribute, dla or ablate on it",
        )
    flips = list(parse_choices(params.flips, FLIPS, "counterfactual flip"))
    split = subject.split(params.split)
    model = with_split_inputs(subject.model)
    graph = edge_graph(model, split.tokens.shape[1])
    if params.top_k > graph.n_edges:
        raise ConfigError(
            f"circuit: top_k={params.top_k} exceeds the {graph.n_edges} edges of this model's graph",
            f"give a top_k from 1 to {graph.n_edges}",
        )
    return flips, split, model, graph


def compute(subject: Subject, params: Params) -> CircuitResult:
    """Score every edge for each pairing, compare the estimates, and find the circuits."""
    flips, split, model, graph = _checked_graph(subject, params)
    out: dict[str, Any] = {k: [] for k in ("exact", "eap", "eap_ig", "faith", "ld", "kept")}
    n_pairs, clean, corrupt, agree, size, faith = {}, {}, {}, {}, {}, {}
    for flip in flips:
        pairs = flip_pairs(subject.task, split, flip, params.seed).head(params.max_examples)
        if len(pairs) == 0:
            raise ConfigError(f"no {flip}-flip partners in split {params.split!r}")
        scores = _scores(model, graph, pairs, params.steps)
        curve = circuits.faithfulness_curve(model, graph, pairs, scores[params.method])
        size[flip], faith[flip] = circuits.smallest_faithful(
            model, graph, pairs, scores[params.method], curve, params.faithfulness
        )
        kept = torch.zeros(graph.n_edges)
        kept[circuits.ranking(scores[params.method])[: size[flip] or params.top_k]] = 1.0
        agree[flip] = {
            m: vars(agreement(scores[m], scores["exact"], params.top_k)) for m in ("eap", "eap_ig")
        }
        n_pairs[flip], clean[flip], corrupt[flip] = (
            len(pairs),
            curve.clean_logit_diff,
            curve.corrupt_logit_diff,
        )
        for key, value in (
            *scores.items(),
            ("faith", curve.faithfulness),
            ("ld", curve.logit_diff),
            ("kept", kept),
        ):
            out[key].append(value)
    edges = graph.edges()
    return CircuitResult(
        params=to_dict(params),
        step=subject.step,
        split=params.split,
        flips=flips,
        n_pairs=n_pairs,
        n_layers=graph.n_layers,
        n_heads=graph.n_heads,
        n_pos=graph.n_pos,
        edge_upstream=[e.upstream for e in edges],
        edge_receiver=[e.receiver for e in edges],
        edge_pos=[e.pos for e in edges],
        clean_logit_diff=clean,
        corrupt_logit_diff=corrupt,
        exact=torch.stack(out["exact"]),
        eap=torch.stack(out["eap"]),
        eap_ig=torch.stack(out["eap_ig"]),
        agreement=_json_safe(agree),
        curve_sizes=curve.sizes,
        curve_faithfulness=torch.stack(out["faith"]),
        curve_logit_diff=torch.stack(out["ld"]),
        circuit_size=size,
        circuit_faithfulness={f: (None if v != v else v) for f, v in faith.items()},
        kept=torch.stack(out["kept"]),
    )


def _json_safe(value: Any) -> Any:
    """NaN -> None, recursively (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return None if isinstance(value, float) and value != value else value


ANALYSIS = Analysis(
    name="circuit",
    summary=REGISTRY["circuit"][1],
    params=Params,
    compute=compute,
    result=CircuitResult,
    tasks=("mpsp",),
    definition=DEFINITION,
    reference=REFERENCE,
)
