"""Cheap circuit measures logged into `metrics.jsonl` at every evaluation (`TrainConfig.eval_measures`).

A phase transition shows in these at the evaluation cadence, without a dense checkpoint
series. Each measure is the same computation as the standalone analysis that reports it on a
saved checkpoint (the `fingerprint` and `grads` analyses, with their default parameters), so
the logged value at step s equals that analysis on the checkpoint of step s:

* ``attn_pos0``: per head, the mean attention from the readout position to position 0 over the
  ``adv`` split (`interp.dissect.heads.attention_to_first`); keys ``adv/attn_pos0_L{l}H{h}``.
* ``ov_parity_rho``: per head, the OV parity rho from the weights, mod the number of classes,
  the readout token and sequence length read from the ``adv`` split
  (`interp.dissect.heads.ov_parity_rho`); keys ``weights/ov_parity_rho_L{l}H{h}``.
* ``grad_groups``: the cosine, amplification ``|g_b| / |g_a|`` and count-weighted amplification
  of the gradients of the ``train`` split's first two groups (e.g. consistent, opposing)
  over all parameters (`interp.dissect.gradient_groups`); keys ``train/grad_cos``,
  ``train/grad_amp``, ``train/grad_amp_weighted``.

They read only what the `Task` protocol gives (splits, their group masks) and the model's
config; the names a config may list are `interp.training.config.EVAL_MEASURES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from torch import nn

from interp.dissect.gradient_groups import gradient_stats, group_gradients
from interp.dissect.heads import attention_to_first, ov_parity_rho, readout_patterns
from interp.errors import ConfigError
from interp.splits import Split

Measure = Callable[[nn.Module, Mapping[str, Split], str], dict[str, float]]


def _heads(prefix: str, values) -> dict[str, float]:  # noqa: ANN001 - a [n_layers, n_heads] tensor
    return {
        f"{prefix}_L{layer}H{head}": float(values[layer, head])
        for layer in range(values.shape[0])
        for head in range(values.shape[1])
    }


def _attn_pos0(model: nn.Module, splits: Mapping[str, Split], loss: str) -> dict[str, float]:
    patterns = readout_patterns(model, splits["adv"].tokens)
    return _heads("adv/attn_pos0", attention_to_first(patterns))


def _ov_parity_rho(model: nn.Module, splits: Mapping[str, Split], loss: str) -> dict[str, float]:
    tokens = splits["adv"].tokens
    rho, _, _ = ov_parity_rho(model, model.cfg.d_vocab_out, int(tokens[0, -1]), tokens.shape[1])
    return _heads("weights/ov_parity_rho", rho)


def _grad_groups(model: nn.Module, splits: Mapping[str, Split], loss: str) -> dict[str, float]:
    train = splits["train"]
    mask_a, mask_b = list(train.groups.values())[:2]
    readout = getattr(model, "fast_readout", None)
    stats = gradient_stats(
        group_gradients(model, train.tokens, train.labels, mask_a, mask_b, loss, readout=readout)
    )
    return {
        "train/grad_cos": float(stats.cos[0]),
        "train/grad_amp": float(stats.amp[0]),
        "train/grad_amp_weighted": float(stats.amp_weighted[0]),
    }


MEASURES: dict[str, Measure] = {
    "attn_pos0": _attn_pos0,
    "ov_parity_rho": _ov_parity_rho,
    "grad_groups": _grad_groups,
}


def check_measures(names: Iterable[str], model: nn.Module, splits: Mapping[str, Split]) -> None:
    """Refuse measures the model or the task's splits cannot give, before training starts.

    Raises:
        ConfigError: Naming the measure and what it needs.
    """
    for name in names:
        if name in ("attn_pos0", "ov_parity_rho"):
            if not hasattr(model, "blocks"):
                raise ConfigError(f"eval measure {name!r} needs attention heads", "drop it for this model")
            if "adv" not in splits or len(splits["adv"]) == 0:
                raise ConfigError(f"eval measure {name!r} needs an 'adv' split", "drop it for this task")
            if len(splits["adv"].tokens[:, -1].unique()) != 1:
                raise ConfigError(f"eval measure {name!r} needs one readout token on the 'adv' split")
        if name == "grad_groups":
            groups = splits["train"].groups if "train" in splits else {}
            if len(groups) < 2 or not all(m.any() for m in list(groups.values())[:2]):
                raise ConfigError(
                    "eval measure 'grad_groups' needs a train split with two non-empty groups",
                    "drop it for this task (an MPSP task needs r strictly between 0 and 1)",
                )


def measure_record(
    model: nn.Module, splits: Mapping[str, Split], names: Iterable[str], loss: str
) -> dict[str, float]:
    """The measures `names` of `model` now, as flat metrics-record entries (see the module docstring)."""
    record: dict[str, float] = {}
    for name in names:
        record.update(MEASURES[name](model, splits, loss))
    return record
