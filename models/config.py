"""Frozen configs of the model families, named with TransformerLens's vocabulary.

Field names follow `transformer_lens.HookedTransformerConfig` (`n_layers`, `d_head`,
`normalization_type`, `attention_dir`, ...) so that TransformerLens utilities reading
`model.cfg.<field>` work on our models, and so that conversion to and from TransformerLens is a
field-by-field copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from interp.config import check_bool, check_choice, check_int, from_dict, to_dict
from interp.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only transformer read out at the last position (studies A and B).

    Attributes:
        n_layers: Number of transformer blocks.
        n_heads: Attention heads per block.
        d_model: Width of the residual stream.
        d_mlp: Hidden width of each MLP.
        n_ctx: Maximum sequence length (rows of `W_pos`).
        d_vocab: Number of input tokens (rows of `W_E`).
        d_vocab_out: Number of output classes (columns of `W_U`).
        d_head: Width of each head; defaults to `d_model // n_heads`.
        normalization_type: ``"LN"`` (LayerNorm before attention, MLP and unembedding) or None.
        positional_embedding_type: ``"standard"`` (learned `W_pos`) or ``"none"``.
        attention_dir: ``"causal"`` or ``"bidirectional"``.
        act_fn: MLP activation, ``"relu"`` or ``"gelu"``.
        use_attn_result: Compute per-head outputs at `hook_result` (costs memory).
        use_split_qkv_input: Give each head its own copy of the residual stream as query, key
            and value input, at `blocks.{l}.hook_q_input` / `hook_k_input` / `hook_v_input`
            ([batch, pos, n_heads, d_model]; costs memory), as TransformerLens does. Edge
            patching writes there (`interp.dissect.edges`). Changes no value; left out of a
            stored config while False.
        use_hook_mlp_in: Call `blocks.{l}.hook_mlp_in` on a copy of the MLP's input
            ([batch, pos, d_model]), as TransformerLens does. Changes no value; left out of a
            stored config while False.
        eps: LayerNorm epsilon.
        init_range: Std of the normal init of weight matrices; defaults to `0.8 / sqrt(d_model)`
            (TransformerLens's GPT-2 init).
    """

    kind: ClassVar[str] = "transformer"

    n_layers: int
    n_heads: int
    d_model: int
    d_mlp: int
    n_ctx: int
    d_vocab: int
    d_vocab_out: int
    d_head: int | None = None
    normalization_type: str | None = "LN"
    positional_embedding_type: str = "standard"
    attention_dir: str = "causal"
    act_fn: str = "relu"
    use_attn_result: bool = False
    use_split_qkv_input: bool = field(default=False, metadata={"added": True})
    use_hook_mlp_in: bool = field(default=False, metadata={"added": True})
    eps: float = 1e-5
    init_range: float | None = None

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "d_model", "d_mlp", "n_ctx", "d_vocab", "d_vocab_out"):
            check_int("TransformerConfig", name, getattr(self, name), 1)
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ConfigError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}",
                    "set d_head explicitly",
                )
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        check_int("TransformerConfig", "d_head", self.d_head, 1)
        for name, choices in (
            ("normalization_type", ("LN", None)),
            ("positional_embedding_type", ("standard", "none")),
            ("attention_dir", ("causal", "bidirectional")),
            ("act_fn", ("relu", "gelu")),
        ):
            check_choice("TransformerConfig", name, getattr(self, name), choices)
        for name in ("use_attn_result", "use_split_qkv_input", "use_hook_mlp_in"):
            check_bool("TransformerConfig", name, getattr(self, name))
        if self.init_range is None:
            object.__setattr__(self, "init_range", 0.8 / self.d_model**0.5)

    @property
    def attn_only(self) -> bool:
        """Always False: every block has an MLP. TransformerLens's `ActivationCache` reads it
        (`decompose_resid`, `get_full_resid_decomposition`); it is not a field, so it never
        appears in a run's config.json.
        """
        return False

    @property
    def device(self) -> None:
        """Where TransformerLens tools (e.g. `patching`) allocate their result tensors.

        None means torch's default device. Architecture configs do not pin a device; a model
        moved with `.to()` still works because TransformerLens only reads this for outputs.
        """
        return None


@dataclass(frozen=True)
class QuadraticMLPConfig:
    """Study C's two-layer MLP with a square activation on two one-hot inputs.

    `h = (W_E_left[m] + W_E_right[n])^2`, `logits = h @ W_U`; no biases.

    Attributes:
        d_vocab: Number of input values per operand (p).
        d_vocab_out: Number of output classes (p).
        d_hidden: Hidden width N.
        init_std: Std of the normal init of every weight; defaults to `(16 N)^(-1/3)`.
    """

    kind: ClassVar[str] = "quadratic_mlp"

    d_vocab: int
    d_vocab_out: int
    d_hidden: int = 500
    init_std: float | None = None

    def __post_init__(self) -> None:
        for name in ("d_vocab", "d_vocab_out", "d_hidden"):
            check_int("QuadraticMLPConfig", name, getattr(self, name), 1)
        if self.init_std is None:
            object.__setattr__(self, "init_std", (16 * self.d_hidden) ** (-1 / 3))


ModelConfig = TransformerConfig | QuadraticMLPConfig

MODEL_CONFIGS: dict[str, type] = {
    TransformerConfig.kind: TransformerConfig,
    QuadraticMLPConfig.kind: QuadraticMLPConfig,
}
"""Model config classes by their ``kind`` (the key stored in a run's config.json)."""


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    """Return a JSON-ready dict of a model config, with its ``kind``."""
    return {"kind": cfg.kind, **to_dict(cfg)}


def config_from_dict(data: dict[str, Any], *, where: str | None = None) -> ModelConfig:
    """Rebuild a model config from `config_to_dict`'s output (strict: unknown keys are errors)."""
    data = dict(data)
    kind = data.pop("kind", None)
    if kind not in MODEL_CONFIGS:
        where_text = f" in {where}" if where else ""
        raise ConfigError(f"unknown model kind {kind!r}{where_text}", did_you_mean(str(kind), MODEL_CONFIGS))
    return from_dict(MODEL_CONFIGS[kind], data, where=where)
