"""The edge graph of a transformer, with positions, and runs with any set of edges patched.

Nodes, at every sequence position:

* **upstream nodes** (they write into the residual stream): the token embedding ``embed``, the
  positional embedding ``pos_embed``, every head's output ``L{l}H{h}`` (``z[h] @ W_O[h]``, its
  share of ``attn_out`` without ``b_O``) and every MLP ``MLP{l}``;
* **receivers** (they read the residual stream): every head's query, key and value inputs
  ``L{l}H{h}.q|k|v``, every MLP's input ``MLP{l}`` and the logits.

An edge ``u -> r @ p`` carries upstream node u's output at position p into receiver r's input at
the same position p: the residual stream is a sum over the nodes that wrote before r, position by
position. Attention moves information across positions only inside a head (from its key and value
inputs at every position to its output), so those moves are not edges. The logits are read at
the readout (last) position only, where every task reads its label, so the logits receive edges
there alone; every other receiver has edges at every position.

A run with a set of edges patched from a corrupted input is the clean run in which each
patched edge's receiver input loses the upstream node's *current* output at that position and
gains its output on the corrupted run (Conmy et al.'s and Hanna et al.'s convention): at the
receiver's hook (`blocks.{l}.hook_q_input` / `hook_k_input` / `hook_v_input`, per head, and
`blocks.{l}.hook_mlp_in`, which the split-input flags open, or the last block's
`hook_resid_post` for the logits) the input becomes ``input + sum_u w_u (corrupt_u - current_u)``.
Weights are per edge, 0 (clean) or 1 (patched); every edge patched gives exactly the corrupted
run, none the clean one. Many weight vectors ("variants") run in one batched forward pass.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.dissect.hooks import HookFn, checked_hooks
from interp.errors import ConfigError

QKV = ("q", "k", "v")
DEFAULT_MAX_ROWS = 8192  # rows (variants x pairs) in one forward pass


@dataclass(frozen=True)
class ReceiverGroup:
    """The receivers one hook writes: a head-kind of one layer (all heads), an MLP, or the logits.

    Attributes:
        hook: The hook the group's inputs are written at.
        kind: ``"q"``, ``"k"``, ``"v"``, ``"mlp"`` or ``"logits"``.
        layer: The receivers' layer (``n_layers`` for the logits).
        n_upstream: How many upstream nodes (a prefix of `EdgeGraph.upstream`) reach it.
        n_heads: Heads of a q/k/v group, else None.
        positions: Positions with edges.
        start: Index of the group's first edge in the flat edge list.
    """

    hook: str
    kind: str
    layer: int
    n_upstream: int
    n_heads: int | None
    positions: tuple[int, ...]
    start: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The group's edges as a grid: [upstream, position, (head)]."""
        return (self.n_upstream, len(self.positions), *((self.n_heads,) if self.n_heads else ()))

    @property
    def n_edges(self) -> int:
        """Number of edges into the group."""
        return int(torch.tensor(self.shape).prod())

    def receiver(self, head: int | None) -> str:
        """A receiver's name: ``L1H0.q``, ``MLP1`` or ``logits``."""
        if self.kind in QKV:
            return f"L{self.layer}H{head}.{self.kind}"
        return f"MLP{self.layer}" if self.kind == "mlp" else "logits"


@dataclass(frozen=True)
class Edge:
    """One edge: upstream node -> receiver at one position."""

    upstream: str
    receiver: str
    pos: int
    layer: int  # the receiver's layer (n_layers: logits)
    head: int | None  # the receiver's head (q/k/v)

    @property
    def name(self) -> str:
        """``embed->L0H1.k@2``."""
        return f"{self.upstream}->{self.receiver}@{self.pos}"


@dataclass(frozen=True)
class EdgeGraph:
    """The edge graph of a transformer at a sequence length.

    Attributes:
        n_layers: Blocks.
        n_heads: Heads per block.
        n_pos: Sequence length.
        upstream: Upstream node names in forward order (embed, pos_embed, L0H0, ..., MLP0, L1H0, ...).
        groups: Receiver groups in forward order; their edges are contiguous in the flat order.
    """

    n_layers: int
    n_heads: int
    n_pos: int
    upstream: tuple[str, ...]
    groups: tuple[ReceiverGroup, ...]

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        return sum(g.n_edges for g in self.groups)

    def edges(self) -> list[Edge]:
        """Every edge, in the flat order (group, then upstream node, position, head)."""
        out = []
        for g in self.groups:
            for u in range(g.n_upstream):
                for p in g.positions:
                    for h in range(g.n_heads) if g.n_heads else (None,):
                        out.append(Edge(self.upstream[u], g.receiver(h), p, g.layer, h))
        return out

    def dense(self, group: ReceiverGroup, flat: Float[Tensor, "variant edge"]) -> Tensor:
        """A group's slice of per-edge values as a grid [variant, upstream, n_pos, (head)] (0 off its positions)."""
        block = flat[:, group.start : group.start + group.n_edges].reshape(len(flat), *group.shape)
        shape = (len(flat), group.n_upstream, self.n_pos, *group.shape[2:])
        out = flat.new_zeros(shape)
        out[:, :, list(group.positions)] = block
        return out

    def flatten(self, group: ReceiverGroup, grid: Float[Tensor, "upstream n_pos *head"]) -> Tensor:
        """The inverse of `dense` for one grid (no variant axis): the group's edges, flat."""
        return grid[:, list(group.positions)].reshape(-1)


def edge_graph(model: nn.Module, n_pos: int) -> EdgeGraph:
    """The edge graph of `model` (a `models.Transformer`) at sequence length `n_pos`."""
    cfg = model.cfg
    heads = cfg.n_heads
    upstream = ["embed"] + (["pos_embed"] if cfg.positional_embedding_type == "standard" else [])
    groups: list[ReceiverGroup] = []
    start = 0

    def add(hook: str, kind: str, layer: int, n_heads: int | None, positions: tuple[int, ...]) -> None:
        nonlocal start
        group = ReceiverGroup(hook, kind, layer, len(upstream), n_heads, positions, start)
        groups.append(group)
        start += group.n_edges

    every = tuple(range(n_pos))
    for layer in range(cfg.n_layers):
        for kind in QKV:
            add(f"blocks.{layer}.hook_{kind}_input", kind, layer, heads, every)
        upstream.extend(f"L{layer}H{h}" for h in range(heads))
        add(f"blocks.{layer}.hook_mlp_in", "mlp", layer, None, every)
        upstream.append(f"MLP{layer}")
    add(f"blocks.{cfg.n_layers - 1}.hook_resid_post", "logits", cfg.n_layers, None, (n_pos - 1,))
    return EdgeGraph(cfg.n_layers, heads, n_pos, tuple(upstream), tuple(groups))


def with_split_inputs(model: nn.Module) -> nn.Module:
    """`model` itself if its split-input hooks fire, else a copy with them switched on.

    The copy shares no parameters with `model` and computes the same function (the flags change
    no value); hook points replaced on `model` stay replaced on the copy.
    """
    cfg = model.cfg
    if cfg.use_split_qkv_input and cfg.use_hook_mlp_in:
        return model
    twin = copy.deepcopy(model)
    if hasattr(twin, "set_use_split_qkv_input"):  # TransformerLens's models switch them themselves
        try:
            twin.set_use_split_qkv_input(True)
            twin.set_use_hook_mlp_in(True)
        except NotImplementedError:  # 4.x's TransformerBridge over attention without them
            raise ConfigError(
                f"{type(model).__name__} has no hook on each head's query/key/value input",
                "edge patching needs per-head input hooks: use a model that has them "
                "(ours, or TransformerLens 3.x's HookedTransformer)",
            ) from None
        return twin
    new_cfg = dataclasses.replace(cfg, use_split_qkv_input=True, use_hook_mlp_in=True)
    for module in twin.modules():
        if getattr(module, "cfg", None) is not None and module.cfg == cfg:
            module.cfg = new_cfg
    return twin


def _recorder(store: list[Tensor]) -> HookFn:
    def hook(act: Tensor, hook: object) -> None:
        store.append(act)

    return hook


def _head_recorder(store: list[Tensor], w_o: Tensor) -> HookFn:
    def hook(z: Tensor, hook: object) -> None:
        store.extend(torch.einsum("bphe,hed->hbpd", z, w_o).unbind(0))  # each head's output

    return hook


def upstream_hooks(model: nn.Module, store: list[Tensor]) -> list[tuple[str, HookFn]]:
    """Hooks appending every upstream node's output [batch, pos, d_model] to `store`, in `upstream` order."""
    hooks = [("hook_embed", _recorder(store))]
    if model.cfg.positional_embedding_type == "standard":
        hooks.append(("hook_pos_embed", _recorder(store)))
    for layer, block in enumerate(model.blocks):
        hooks.append((f"blocks.{layer}.attn.hook_z", _head_recorder(store, block.attn.W_O)))
        hooks.append((f"blocks.{layer}.hook_mlp_out", _recorder(store)))
    return hooks


@torch.no_grad()
def upstream_outputs(
    model: nn.Module, tokens: Int[Tensor, "batch pos"]
) -> Float[Tensor, "batch upstream pos d_model"]:
    """Every upstream node's output on `tokens` (model with split inputs, see `with_split_inputs`)."""
    store: list[Tensor] = []
    with checked_hooks(model, upstream_hooks(model, store)):
        model(tokens)
    return torch.stack([s.expand(len(tokens), -1, -1) for s in store], dim=1)


def _patcher(
    group: ReceiverGroup,
    store: list[Tensor],
    corrupt: Tensor,
    weights: Tensor,
) -> Callable[[Tensor, object], Tensor]:
    """The hook adding ``sum_u w_u (corrupt_u - current_u)`` to a group's inputs.

    `corrupt` is [batch, upstream, pos, d_model]; `weights` the group's grid [variant, upstream,
    pos, (head)]; the run's batch is variant-major (variant v's copy of pair b is row v * batch + b).
    """
    n_up = group.n_upstream

    def hook(act: Tensor, hook: object) -> Tensor:
        batch = corrupt.shape[0]
        current = torch.stack([s.expand(act.shape[0], -1, -1) for s in store[:n_up]], dim=1)
        delta = corrupt[:, :n_up].unsqueeze(0) - current.view(len(weights), batch, *current.shape[1:])
        if group.n_heads:
            add = torch.einsum("vuph,vbupd->vbphd", weights, delta)
        else:
            add = torch.einsum("vup,vbupd->vbpd", weights, delta)
        return act + add.reshape(act.shape)

    return hook


@torch.no_grad()
def run_with_edges(
    model: nn.Module,
    graph: EdgeGraph,
    clean_tokens: Int[Tensor, "batch pos"],
    corrupt: Float[Tensor, "batch upstream pos d_model"],
    weights: Float[Tensor, "variant edge"],
) -> Float[Tensor, "variant batch d_vocab_out"]:
    """Readout logits of the clean inputs with each variant's edges patched from the corrupted run.

    Args:
        model: A `models.Transformer` with split inputs (`with_split_inputs`).
        graph: Its `edge_graph`.
        clean_tokens: The clean inputs [batch, pos].
        corrupt: `upstream_outputs` of the corrupted inputs, aligned with `clean_tokens`.
        weights: Per variant and edge, 1 = patched, 0 = clean (values between interpolate).

    Returns:
        Readout logits of every variant and pair.
    """
    weights = weights.to(corrupt.dtype)
    store: list[Tensor] = []
    hooks = upstream_hooks(model, store)
    hooks += [(g.hook, _patcher(g, store, corrupt, graph.dense(g, weights))) for g in graph.groups]
    tokens = clean_tokens.repeat(len(weights), 1)
    with checked_hooks(model, hooks):
        logits = model(tokens)[:, -1]
    return logits.view(len(weights), len(clean_tokens), -1)
