"""Time one full-batch training step of the MPSP presets against TransformerLens and this CPU's limit.

Run: `.venv/bin/python benchmarks/train_step.py [--quick] [--presets mpsp-1l1h mpsp-2l2h]
[--batch 16384] [--threads 2] [--compile] [--default-malloc]`.

A step is: forward, cross-entropy at the last position, backward, AdamW(lr 1e-3, betas
(0.9, 0.98), weight decay 0.1) step, on a batch of random tokens (study A's training set is
16,384 examples, trained full batch). Variants:

  (a) TransformerLens 3.x `HookedTransformer` (from `models.convert.to_transformer_lens_config`),
      logits at every position as users normally compute them, then `[:, -1]`;
  (b) our hooked `Transformer`, `model(tokens)[:, -1]`;
  (c) `fast_readout`, fp32;
  (d) `fast_readout` under `torch.autocast("cpu", dtype=torch.bfloat16)`;
  (e) with `--compile`: `compiled_fast_readout` (torch.compile), fp32 and bf16.

Every variant runs in one process after `interp.training.memory.keep_freed_memory()` (the same
allocator help for TransformerLens as for ours); `--default-malloc` first repeats them with
glibc's default malloc. Each time is the median of N steps after warm-up steps.

Rates, two kinds:

* "model GFLOP/s" divides the *dense* work of the TransformerLens computation (3 x its forward
  matmul FLOPs at every position, 2 FLOPs per multiply-add) by the time, for every variant
  alike: a variant that skips work shows a higher "model" rate than the arithmetic it does;
* "done GFLOP/s" divides the matmul FLOPs the fast path actually performs (counted with
  `torch.utils.flop_counter` on one forward + backward) by its time, against the matmul peak
  of the dtype it runs in: how close the step is to this machine's limit.

The peaks are measured here (best of 8 `2048^3` matmuls in fp32 and in bf16 on the same
threads). Whether the CPU computes bf16 natively (AMX, AVX512-BF16 or none) is
`interp.training.precision.cpu_bf16`'s answer, printed with the kernel oneDNN picks for a bf16
matmul (`ONEDNN_VERBOSE`). Where bf16 is not native the bf16 peak and rows are skipped with a
note: emulated bf16 runs about 20x slower than fp32 (an AVX2 CPU, issue 51), and timing it took
most of the 14+ minutes `--quick` ran there. `INTERP_BF16=1` times them anyway.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp.training.memory import keep_freed_memory  # noqa: E402
from interp.training.precision import cpu_bf16  # noqa: E402
from models.config import TransformerConfig  # noqa: E402
from models.fast_forward import compiled_fast_readout, fast_readout  # noqa: E402
from models.presets import preset_config  # noqa: E402
from models.transformer import Transformer  # noqa: E402

TARGETS = {"mpsp-1l1h": 25.0, "mpsp-2l2h": 8.0}  # issue 13: fast vs HookedTransformer, best dtype


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


def minimal_flops(cfg: TransformerConfig, batch: int) -> float:
    """The step's minimal matmul FLOPs for a last-position loss (1 or 2 layers), from the shapes.

    Written before the CSR work of issue 24, so the limit (this count / the measured peak) does
    not move with the implementation. It counts what an exact step cannot skip, with the
    algebra `fast_readout` documents: per example, layer 0's attention mix (`S` query positions
    x `pos` keys x heads x d_model) and its MLP at the `S` positions that are not prefix
    tables, then the last layer at the readout (query, `W_K q`, scores, mix, `W_V W_O`, MLP) and
    the unembedding; per step, layer 0's (position, token) tables (Q, K, V, scores, `V W_O`)
    and the prefix tables. 2 FLOPs a multiply-add, 3x the forward (the two backward products
    of every matmul). Layer 0 at every position of every example (~18 GFLOP at vocab 64, the
    issue's estimate) is not minimal: the prefix tables already avoid it.
    """
    if cfg.n_layers > 2:
        raise ValueError(f"minimal_flops counts 1- and 2-layer models, got n_layers={cfg.n_layers}")
    from models.fast_forward import prefix_len

    P, D, H, dh, M, V = cfg.n_ctx, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_mlp, cfg.d_vocab

    def tables(n_pos: int, first: int) -> int:  # layer 0's (position, token) tables
        rows, queries = n_pos * V, (n_pos - first) * V
        return D * H * dh * (queries + 2 * rows) + queries * rows * H * dh + rows * H * dh * D

    head = 2 * D * M + D * cfg.d_vocab_out  # the last MLP and the unembedding, at the readout
    if cfg.n_layers == 1:  # layer 0 at the last position: the mix, then the head
        return 6.0 * (batch * (P * H * D + head) + tables(P, P - 1))
    n = prefix_len(cfg, batch, P)
    S = P - n
    last = D * H * dh + H * dh * D + 2 * P * D * H + H * D * D  # query, W_K q, scores, mix, W_V W_O
    per_example = S * P * H * D + S * 2 * D * M + last + head
    prefix = 0 if n == 0 else V**n * (n * n * H * D + n * 2 * D * M) + tables(n, 0)
    return 6.0 * (batch * per_example + tables(P, n) + prefix + H * D * dh * D)


def done_flops(model: Transformer, tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """Matmul FLOPs (mm, addmm, bmm, baddbmm) of one forward + backward of `fast_readout`."""
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(fast_readout(model, tokens), labels).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


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


def bf16_path() -> str:
    """Whether this CPU computes bf16 natively (`cpu_bf16`), with the kernel oneDNN runs."""
    probe = "import torch; a = torch.randn(512, 512).bfloat16(); a @ a"
    try:  # oneDNN prints the kernel it runs, e.g. brg_matmul:avx512_core_amx / avx512_core_bf16
        out = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "ONEDNN_VERBOSE": "1"},
            capture_output=True,
            check=False,
            text=True,
            timeout=120,
        ).stdout
        kernels = sorted(set(re.findall(r",matmul,([^,]+),", out)))
    except (OSError, subprocess.SubprocessError):
        kernels = []
    return f"{cpu_bf16().describe()}; oneDNN bf16 matmul: {', '.join(kernels) or 'none'}"


def bf16_timed() -> bool:
    """Whether to time bf16 (where it is native, or `INTERP_BF16=1`); prints a note if not."""
    support = cpu_bf16()
    if not support.native:
        print(
            f"bf16 rows skipped: {support.describe()}; emulated bf16 runs about 20x slower than fp32 "
            "(INTERP_BF16=1 times them anyway)"
        )
    return support.native


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

    return median_seconds(step, repeats, warmup)


def median_seconds(step: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall seconds of `step` over `repeats` calls, after `warmup` calls (NaN if none)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) if times else float("nan")


def _variants(
    name: str, models: dict, compiled: dict, use_compile: bool, bf16: bool
) -> list[tuple[str, Callable, list, bool]]:
    tl, ours = models[name]
    out = [
        ("(a) HookedTransformer [:, -1]", lambda t, m=tl: m(t)[:, -1], list(tl.parameters()), False),
        ("(b) ours, hooked forward", lambda t, m=ours: m(t)[:, -1], list(ours.parameters()), False),
        ("(c) fast_readout fp32", lambda t, m=ours: fast_readout(m, t), list(ours.parameters()), False),
        ("(d) fast_readout bf16", lambda t, m=ours: fast_readout(m, t), list(ours.parameters()), True),
    ]
    if use_compile:
        compiled.setdefault(name, compiled_fast_readout(ours))
        out += [
            ("(e) compiled fp32", compiled[name], list(ours.parameters()), False),
            ("(e) compiled bf16", compiled[name], list(ours.parameters()), True),
        ]
    return [variant for variant in out if bf16 or not variant[3]]


def run_pass(allocator: str, args, models: dict, compiled: dict, peaks: dict, rows: list) -> None:
    """Time every variant of every preset under the current allocator; append result rows."""
    warmup, repeats = (1, 3) if args.quick else (3, 10)
    gen = torch.Generator().manual_seed(0)
    for name in args.presets:
        ours = models[name][1]
        tokens = torch.randint(0, ours.cfg.d_vocab, (args.batch, ours.cfg.n_ctx), generator=gen)
        labels = torch.randint(0, ours.cfg.d_vocab_out, (args.batch,), generator=gen)
        flops, done = model_flops(ours.cfg, args.batch), done_flops(ours, tokens, labels)
        base = None
        variants = _variants(name, models, compiled, args.compile, "bf16" in peaks)
        for label, readout, params, autocast in variants:
            if label.startswith("(e)"):
                t0 = time.perf_counter()
                time_steps(readout, params, tokens, labels, autocast=autocast, warmup=1, repeats=0)
                print(f"  {name} {label}: compile + first step {time.perf_counter() - t0:.1f} s")
            sec = time_steps(
                readout, params, tokens, labels, autocast=autocast, warmup=warmup, repeats=repeats
            )
            base = base or sec
            dtype = "bf16" if autocast else "fp32"
            fast = label[:3] in ("(c)", "(d)", "(e)")
            row = (
                allocator,
                name,
                label,
                sec,
                base / sec,
                flops / sec / 1e9,
                done / sec / 1e9 if fast else float("nan"),
                dtype,
            )
            rows.append(row)
            print(
                f"  {allocator:17s} {name:10s} {label:30s} {sec:7.3f} s  x{base / sec:5.2f}  "
                f"{row[5]:6.1f} model GFLOP/s"
                + (
                    f"  {row[6]:6.1f} done GFLOP/s ({100 * row[6] * 1e9 / peaks[dtype]:.0f}% of {dtype} peak)"
                    if fast
                    else ""
                ),
                flush=True,
            )
        print(
            f"  {name}: the fast path does {done / 1e9:.2f} GFLOP of matmuls per step "
            f"(TransformerLens-equivalent dense work: {flops / 1e9:.2f} GFLOP)"
        )


def print_tables(rows: list, peaks: dict) -> None:
    """The Markdown table of every row, then the verdict per preset against the issue's target."""
    print()
    print(
        "| allocator | preset | variant | s / step | vs HookedTransformer | model GFLOP/s | done GFLOP/s "
        "| done / matmul peak of its dtype |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for allocator, name, label, sec, ratio, model_rate, done_rate, dtype in rows:
        share = "-" if math.isnan(done_rate) else f"{100 * done_rate * 1e9 / peaks[dtype]:.0f}% ({dtype})"
        done = "-" if math.isnan(done_rate) else f"{done_rate:.1f}"
        print(
            f"| {allocator} | {name} | {label} | {sec:.3f} | {ratio:.2f}x | {model_rate:.1f} | {done} "
            f"| {share} |"
        )
    print()
    for name in dict.fromkeys(r[1] for r in rows):
        last = rows[-1][0]  # the allocator of the last pass (keep_freed_memory where available)
        mine = [r for r in rows if r[1] == name and r[0] == last and r[2][:3] in ("(c)", "(d)", "(e)")]
        if mine:
            best = max(mine, key=lambda r: r[4])
            target = TARGETS.get(name)
            verdict = (
                ""
                if target is None
                else f" (target >= {target:g}x: {'met' if best[4] >= target else 'NOT met'})"
            )
            print(
                f"{name}: best fast variant {best[2]} at {best[4]:.2f}x HookedTransformer, "
                f"same allocator{verdict}"
            )


def main() -> None:
    """Parse the options, time every variant against HookedTransformer, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats after 1 warm-up (default 10 after 3)")
    parser.add_argument("--presets", nargs="+", default=["mpsp-1l1h", "mpsp-2l2h"])
    parser.add_argument("--batch", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also time the torch.compile variants")
    parser.add_argument(
        "--default-malloc", action="store_true", help="first time everything with glibc's defaults"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # TransformerLens 3.x's deprecation warning for HookedTransformer

    from transformer_lens import HookedTransformer

    from models.convert import to_transformer_lens_config

    print(
        f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}, "
        f"median of {3 if args.quick else 10} steps after {1 if args.quick else 3} warm-up"
    )
    print(f"bf16 path: {bf16_path()}")
    peaks = {"fp32": matmul_peak(torch.float32)}
    if bf16_timed():
        peaks["bf16"] = matmul_peak(torch.bfloat16)
    print(
        "matmul peak (2048^3): "
        + ", ".join(f"{dtype} {peak / 1e9:.0f} GFLOP/s" for dtype, peak in peaks.items())
    )
    task = _task()
    models = {}
    for name in args.presets:  # the same models (and compiled code) in every pass
        cfg = preset_config(name, task)
        models[name] = (HookedTransformer(to_transformer_lens_config(cfg)), Transformer(cfg, seed=0))
    rows: list = []
    compiled: dict = {}
    if args.default_malloc:
        run_pass("glibc default", args, models, compiled, peaks, rows)
    helped = keep_freed_memory()
    if not helped:
        print("mallopt unavailable: every variant runs with glibc's default malloc")
    run_pass("keep_freed_memory" if helped else "glibc default", args, models, compiled, peaks, rows)
    print_tables(rows, peaks)


if __name__ == "__main__":
    main()
