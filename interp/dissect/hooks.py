"""Hooks that cannot fail silently: every hook a dissection primitive registers must fire.

The failure hook libraries are known for is silence. A hook on a hook point that the forward
pass never calls (a module replaced after the model was built, an opt-in hook such as
`attn.hook_result` on a model without `use_attn_result`, a forward that skips hooks such as
`fast_readout`) leaves the run unpatched, and the analysis reports a patch with no effect.
`checked_hooks` closes that gap for every primitive in `interp.dissect`:

* a name that is no hook point of the model is refused before anything runs (with did-you-mean);
* each hook function is wrapped to record that it ran; when the body finishes, every hook that
  did not run is named in a `HookError`;
* the hooks are scoped by TransformerLens's `model.hooks(...)`, which removes exactly the hooks
  it added (those of its own context level) on exit, also when the forward pass or a hook
  raises, so hooks the caller registered before stay registered and keep working.

`run_with_checked_hooks` and `cache_activations` are the two shapes every primitive needs: a
forward pass with writing hooks, and a forward pass that records activations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.errors import HookError, did_you_mean

HookFn = Callable[[Tensor, Any], Tensor | None]


def check_hook_names(model: nn.Module, names: Iterable[str]) -> None:
    """Refuse names that are no hook point of `model`.

    Raises:
        HookError: Naming the first unknown hook, with the closest valid names.
    """
    valid = model.hook_dict
    for name in names:
        if name not in valid:
            raise HookError(
                f"no hook point named {name!r} on {type(model).__name__}", did_you_mean(name, valid)
            )


def _recording(name: str, fn: HookFn, fired: set[str]) -> HookFn:
    """`fn`, noting in `fired` that the hook `name` ran (before running it, so a hook that
    raises still counts as fired: its own error is the one to report).
    """

    def hook(act: Tensor, hook: Any) -> Tensor | None:
        fired.add(name)
        return fn(act, hook)

    return hook


@contextlib.contextmanager
def checked_hooks(model: nn.Module, fwd_hooks: Sequence[tuple[str, HookFn]]) -> Iterator[None]:
    """Register `fwd_hooks` for the body of the `with`, then require that each of them fired.

    Args:
        model: A TransformerLens `HookedRootModule` (`hook_dict`, `hooks()`).
        fwd_hooks: ``(hook name, function)`` pairs; names must be exact hook point names.

    Raises:
        HookError: Before the body, for an unknown name; after it, naming every hook that never
            ran. An exception raised inside the body (or by a hook) propagates unchanged, and
            the hooks are removed either way.
    """
    names = [name for name, _ in fwd_hooks]
    check_hook_names(model, names)
    fired: set[str] = set()
    with model.hooks(fwd_hooks=[(name, _recording(name, fn, fired)) for name, fn in fwd_hooks]):
        yield
    silent = [name for name in dict.fromkeys(names) if name not in fired]
    if silent:
        raise HookError(
            f"hook{'s' if len(silent) > 1 else ''} {', '.join(map(repr, silent))} registered on "
            f"{type(model).__name__} but never fired during the forward pass",
            "the hook point is not on the forward path: a module replaced after the model was built, an "
            "opt-in hook (e.g. hook_result needs use_attn_result=True), or a forward that skips hooks "
            "(fast_readout)",
        )


def run_with_checked_hooks(
    model: nn.Module, tokens: Int[Tensor, "batch pos"], fwd_hooks: Sequence[tuple[str, HookFn]]
) -> Float[Tensor, "batch_out *pos d_vocab_out"]:
    """`model(tokens)` with `fwd_hooks` registered, each required to fire (see `checked_hooks`).

    Logits at every position (a transformer) or at the readout only (the quadratic MLP). Their
    batch may differ from the tokens' when a hook copies the examples (`interp.dissect.interventions`).
    """
    with checked_hooks(model, fwd_hooks):
        return model(tokens)


def _saving(name: str, store: dict[str, Tensor], keep_graph: bool) -> HookFn:
    def hook(act: Tensor, hook: Any) -> Tensor | None:
        if not keep_graph:
            store[name] = act.detach()
            return None
        if not act.requires_grad:
            # Nothing before this hook needs a gradient (frozen weights, say), so the activation
            # can become a leaf of the graph: same values, and the gradient flows from here on.
            act = act.detach().requires_grad_(True)
        store[name] = act
        return act

    return hook


def cache_activations(
    model: nn.Module, tokens: Int[Tensor, "batch pos"], names: Iterable[str], *, keep_graph: bool = False
) -> tuple[Float[Tensor, "batch *pos d_vocab_out"], dict[str, Tensor]]:
    """Run `model` on `tokens` and return its output and the activations at `names`.

    Unlike `run_with_cache(names_filter=...)`, a name that matches no hook point, or a hook
    point that never fires, is an error rather than a missing cache entry.

    Args:
        model: A TransformerLens `HookedRootModule`.
        tokens: Inputs [batch, pos].
        names: Exact hook names.
        keep_graph: Keep the activations in the autograd graph (for gradients with respect to
            them, as attribution patching needs); otherwise they are detached.

    Returns:
        The model output and ``{hook name: activation}``.

    Raises:
        HookError: See `checked_hooks`.
    """
    store: dict[str, Tensor] = {}
    names = list(dict.fromkeys(names))
    logits = run_with_checked_hooks(
        model, tokens, [(name, _saving(name, store, keep_graph)) for name in names]
    )
    return logits, store


def has_mlps(model: nn.Module) -> bool:
    """Whether each block of `model` has an MLP (a TransformerLens model built with
    ``attn_only=True`` has none, so no ``hook_mlp_out`` or ``hook_resid_mid`` either).
    """
    return not getattr(model.cfg, "attn_only", False)


def readout_of(model: nn.Module) -> Callable[[Tensor], Tensor]:
    """Tokens [batch, pos] -> logits at the readout (last) position [batch, d_vocab_out]:
    ``model.readout`` where the model has one (ours), else ``model(tokens)[:, -1]`` (a
    TransformerLens `HookedTransformer`, whose forward on tokens adds no BOS).
    """
    readout = getattr(model, "readout", None)
    return readout if readout is not None else (lambda tokens: model(tokens)[:, -1])
