"""Time one full-batch training step of the MPSP presets, five ways.

Run: `.venv/bin/python benchmarks/train_step.py [--quick] [--presets mpsp-1l1h mpsp-2l2h]
[--batch 16384] [--no-compile] [--threads 2]`.

A step is: forward, cross-entropy at the last position, backward, AdamW(lr 1e-3, betas
(0.9, 0.98), weight decay 0.1) step, on a batch of random tokens (study A's training set is
16,384 examples, trained full batch). Variants:

  (a) TransformerLens 3.x `HookedTransformer` (from `models.convert.to_transformer_lens_config`),
      logits at every position as users normally compute them, then `[:, -1]`;
  (b) our hooked `Transformer`, `model(tokens)[:, -1]`;
  (c) `fast_readout`, fp32;
  (d) `fast_readout` under `torch.autocast("cpu", dtype=torch.bfloat16)`;
  (e) `compiled_fast_readout` (torch.compile), fp32 and bf16.

Each is timed as the median of N steps after warm-up steps, first with glibc's default malloc
and then after `models.fast_forward.keep_freed_memory()` (process-wide, so it comes second).

FLOP convention: "model GFLOP/s" divides the *dense* work of the TransformerLens computation by
the measured time, for every variant alike: 3 x (forward matmul FLOPs of the hooked model at
every position: Q, K, V, O, attention scores and pattern @ V over all (query, key) pairs, MLP
in and out, unembedding; 2 FLOPs per multiply-add). So a variant that skips work shows a higher
"model" rate than the arithmetic it actually does. The peak is measured here: the median time of
a 2048 x 2048 x 2048 matmul in fp32 and in bf16 on the same threads (best of 8).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.config import TransformerConfig  # noqa: E402
from models.fast_forward import compiled_fast_readout, fast_readout, keep_freed_memory  # noqa: E402
from models.presets import preset_config  # noqa: E402
from models.transformer import Transformer  # noqa: E402


class _Dims:
    """MPSP task dimensions (5 integers in 0..63 plus SEP, binary label), if tasks/ is absent."""

    d_vocab, d_vocab_out, n_ctx = 65, 2, 6


def _task():
    try:
        from tasks import MPSPTask

        return MPSPTask()
    except Exception:  # noqa: BLE001 - tasks/ is optional here
        return _Dims()


def model_flops(cfg: TransformerConfig, batch: int) -> float:
    """3 x forward matmul FLOPs of the hooked model at every position (see module docstring)."""
    P, D, H, dh, M = cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp
    per_layer = 2 * P * (3 * D * H * dh + H * dh * D + 2 * D * M) + 2 * 2 * P * P * H * dh
    forward = batch * (cfg.n_layers * per_layer + 2 * P * D * cfg.d_vocab_out)
    return 3.0 * forward


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 8) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` (best of `repeats`, after 2 warm-ups)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / min(times)


def time_steps(
    readout: Callable[[torch.Tensor], torch.Tensor],
    params,
    tokens,
    labels,
    *,
    autocast: bool,
    warmup: int,
    repeats: int,
) -> float:
    """Median seconds of one training step."""
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.98), weight_decay=0.1)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = readout(tokens)
        F.cross_entropy(logits.float(), labels).backward()
        opt.step()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) if times else float("nan")


def main() -> None:
    """Parse the options, time every variant against HookedTransformer, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats after 1 warm-up (default 10 after 3)")
    parser.add_argument("--presets", nargs="+", default=["mpsp-1l1h", "mpsp-2l2h"])
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # TransformerLens 3.x's deprecation warning for HookedTransformer
    warmup, repeats = (1, 3) if args.quick else (3, 10)

    from transformer_lens import HookedTransformer

    from models.convert import to_transformer_lens_config

    peak32, peak16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
    print(
        f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}, "
        f"median of {repeats} steps after {warmup} warm-up"
    )
    print(f"matmul peak (2048^3): fp32 {peak32 / 1e9:.0f} GFLOP/s, bf16 {peak16 / 1e9:.0f} GFLOP/s")
    task = _task()
    gen = torch.Generator().manual_seed(0)

    rows: list[tuple[str, str, str, float, float, float]] = []
    compiled: dict[str, Callable] = {}
    models: dict[str, tuple[torch.nn.Module, Transformer]] = {}
    for allocator in ("glibc default", "keep_freed_memory"):
        if allocator == "keep_freed_memory" and not keep_freed_memory():
            print("mallopt unavailable: skipping the keep_freed_memory rows")
            break
        for name in args.presets:
            cfg = preset_config(name, task)
            tokens = torch.randint(0, cfg.d_vocab, (args.batch, cfg.n_ctx), generator=gen)
            labels = torch.randint(0, cfg.d_vocab_out, (args.batch,), generator=gen)
            flops = model_flops(cfg, args.batch)
            if name not in models:  # the same models (and compiled code) in both allocator passes
                models[name] = (HookedTransformer(to_transformer_lens_config(cfg)), Transformer(cfg, seed=0))
            tl, ours = models[name]
            variants: list[tuple[str, Callable, list, bool]] = [
                ("(a) HookedTransformer [:, -1]", lambda t, m=tl: m(t)[:, -1], list(tl.parameters()), False),
                ("(b) ours, hooked forward", lambda t, m=ours: m(t)[:, -1], list(ours.parameters()), False),
                (
                    "(c) fast_readout fp32",
                    lambda t, m=ours: fast_readout(m, t),
                    list(ours.parameters()),
                    False,
                ),
                (
                    "(d) fast_readout bf16",
                    lambda t, m=ours: fast_readout(m, t),
                    list(ours.parameters()),
                    True,
                ),
            ]
            if not args.no_compile:
                if name not in compiled:
                    compiled[name] = compiled_fast_readout(ours)
                variants += [
                    ("(e) compiled fp32", compiled[name], list(ours.parameters()), False),
                    ("(e) compiled bf16", compiled[name], list(ours.parameters()), True),
                ]
            base = None
            for label, readout, params, autocast in variants:
                if label.startswith("(e)"):
                    t0 = time.perf_counter()
                    time_steps(readout, params, tokens, labels, autocast=autocast, warmup=1, repeats=0)
                    print(f"  {name} {label}: compile + first step {time.perf_counter() - t0:.1f} s")
                sec = time_steps(
                    readout, params, tokens, labels, autocast=autocast, warmup=warmup, repeats=repeats
                )
                base = base or sec
                peak = peak16 if autocast else peak32
                rows.append((allocator, name, label, sec, base / sec, flops / sec / 1e9))
                print(
                    f"  {allocator:17s} {name:10s} {label:30s} {sec:7.3f} s  x{base / sec:5.2f}  "
                    f"{flops / sec / 1e9:6.1f} model GFLOP/s ({100 * flops / sec / peak:.0f}% of peak)",
                    flush=True,
                )

    print()
    print(
        "| allocator | preset | variant | s / step | vs HookedTransformer | model GFLOP/s "
        "| model rate / matmul peak (>100%: work skipped) |"
    )
    print("|---|---|---|---|---|---|---|")
    for allocator, name, label, sec, ratio, gflops in rows:
        peak = peak16 if "bf16" in label else peak32
        print(
            f"| {allocator} | {name} | {label} | {sec:.3f} | {ratio:.2f}x | {gflops:.1f} | "
            f"{100 * gflops * 1e9 / peak:.0f}% ({'bf16' if 'bf16' in label else 'fp32'}) |"
        )


if __name__ == "__main__":
    main()
