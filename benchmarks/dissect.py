"""Time a full activation-patching sweep, ours against TransformerLens's `patching` functions.

Run: `.venv/bin/python benchmarks/dissect.py [--threads 2] [--repeats 5] [--examples 2048]
[--max-rows 8192] [--pairs cross|counterfactual] [--train-epochs 0]`.

The sweep (study A's "patching between splits"): on an `mpsp-2l2h` model (random init, or
trained full batch for `--train-epochs` epochs first), pairs `val -> adv` from
`interp.dissect.patching.cross_pairs` (labels differ; `--pairs cross`) or each adv example with its
label-flipped counterfactual partner as the source (`--pairs counterfactual`: one position
differs, so many patches change nothing and are skipped), the first `--examples` of them. Sites:
`resid_pre` at every layer x position and `z` (head outputs) at every layer x head.

* ours: `interp.dissect.patching.patch_sweep` (one cache run on the sources, one run on the targets,
  batched patched runs), everything included;
* TransformerLens: `run_with_cache` on the sources, then `get_act_patch_resid_pre` and
  `get_act_patch_attn_head_out_all_pos` with the same logit-difference metric.

Prints the median wall time of `--repeats` runs of each (after one warm-up), the ratio, and
the largest difference between the two results (they must agree to ~1e-5).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp.dissect.patching import aligned_pairs, cross_pairs, logit_diff, patch_sweep  # noqa: E402
from models import Transformer, preset_config  # noqa: E402
from tasks import MPSPTask, counterfactual  # noqa: E402


def _train(model: Transformer, split, epochs: int) -> None:
    """A few full-batch AdamW epochs, so the model has some structure to patch (optional)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.1)
    for _ in range(epochs):
        opt.zero_grad()
        F.cross_entropy(model.fast_readout(split.tokens), split.labels).backward()
        opt.step()


def _median_time(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tl-repeats", type=int, default=3)
    parser.add_argument("--examples", type=int, default=2048)
    parser.add_argument("--max-rows", type=int, default=8192)
    parser.add_argument("--train-epochs", type=int, default=0)
    parser.add_argument("--pairs", choices=("cross", "counterfactual"), default="cross")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformer_lens import patching as tl_patching

    task = MPSPTask()
    splits = task.splits(0)
    model = Transformer(preset_config("mpsp-2l2h", task), seed=0)
    _train(model, splits["train"], args.train_epochs)
    model.eval()
    if args.pairs == "cross":
        pairs = cross_pairs(splits["val"], splits["adv"], seed=0).head(args.examples)
    else:  # each adv example and its label-flipped partner (one position edited)
        partner = counterfactual(task, splits["adv"], flip="label")
        pairs = aligned_pairs(partner, splits["adv"], keep=partner.extras["valid"]).head(args.examples)

    def ours():
        return patch_sweep(model, pairs, ("resid_pre", "z"), max_rows=args.max_rows)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logit_diff(logits[:, -1], pairs.source_labels, pairs.target_labels)

    def theirs():
        with contextlib.redirect_stderr(io.StringIO()):  # TransformerLens's tqdm bars
            _, cache = model.run_with_cache(pairs.source_tokens)
            resid = tl_patching.get_act_patch_resid_pre(model, pairs.target_tokens, cache, metric)
            z = tl_patching.get_act_patch_attn_head_out_all_pos(model, pairs.target_tokens, cache, metric)
        return resid, z

    t_ours, sweep = _median_time(ours, args.repeats)
    t_tl, (resid, z) = _median_time(theirs, args.tl_repeats)
    diff = max((sweep.effects["resid_pre"].logit_diff - resid).abs().max().item(),
               (sweep.effects["z"].logit_diff - z).abs().max().item())
    n_patches = resid.numel() + z.numel()
    what = "val->adv" if args.pairs == "cross" else "counterfactual->adv"
    print(f"mpsp-2l2h, {len(pairs)} pairs {what}, {n_patches} patches (resid_pre {tuple(resid.shape)}, "
          f"z {tuple(z.shape)}), {args.threads} threads, train epochs {args.train_epochs}")
    print(f"interp.dissect.patching.patch_sweep   median {t_ours:.3f} s over {args.repeats}")
    print(f"transformer_lens.patching     median {t_tl:.3f} s over {args.tl_repeats}")
    print(f"speed-up {t_tl / t_ours:.1f}x; max |difference| of the logit differences {diff:.2e}")


if __name__ == "__main__":
    main()
