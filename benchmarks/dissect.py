"""Time activation patching (ours against TransformerLens's `patching`) and attribution patching.

Run: `.venv/bin/python benchmarks/dissect.py [--threads 2] [--repeats 5] [--examples 2048]
[--max-rows 8192] [--pairs cross|counterfactual] [--train-epochs 0] [--ckpt RUN_OR_CHECKPOINT]`.

Part 2, attribution patching of every site (`interp.dissect.attribution.attribution_sweep`:
resid_pre/mid/post, attn_out, mlp_out at every layer x position, z and pattern at every layer x
head, z_pos at every layer x position x head) on the same pairs, against activation patching of
every site (`patch_sweep`). Prints both median times, the speed-up (target: attribution under
0.2 s on 2,048 pairs of a 2L2H model), and the Pearson correlation of the two per site. On a
random model the correlation says little; give `--train-epochs` or `--ckpt` (an `mpsp-2l2h` run
folder or checkpoint; its task's val -> adv pairs are used) for a trained one.

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

from interp.dissect.attribution import attribution_sweep  # noqa: E402
from interp.dissect.patching import SITES, aligned_pairs, cross_pairs, logit_diff, patch_sweep  # noqa: E402
from interp.dissect.rank_stats import pearson  # noqa: E402
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


def _attribution(model, pairs, args) -> None:
    """Part 2: attribution patching of every site against activation patching of every site."""
    sites = list(SITES)
    t_attr, estimate = _median_time(lambda: attribution_sweep(model, pairs, sites), args.repeats)
    t_act, actual = _median_time(
        lambda: patch_sweep(model, pairs, sites, max_rows=args.max_rows), args.act_repeats
    )
    n_patches = sum(e.logit_diff.numel() for e in actual.effects.values())
    print(f"every site ({len(sites)} sites, {n_patches} patches), {len(pairs)} pairs:")
    print(
        f"interp.dissect.attribution.attribution_sweep  median {t_attr:.3f} s over {args.repeats} "
        "(target < 0.2 s)"
    )
    print(f"interp.dissect.patching.patch_sweep           median {t_act:.3f} s over {args.act_repeats}")
    print(f"attribution speed-up over activation patching {t_act / t_attr:.1f}x")
    flat = {s: [x.effects[s].logit_diff.flatten() for x in (estimate, actual)] for s in sites}
    rs = {s: pearson(*flat[s]).item() for s in sites}
    everything = [torch.cat([flat[s][i] for s in sites]) for i in (0, 1)]
    print(
        "Pearson r (attribution vs activation patching, over each site's patches): "
        + ", ".join(f"{s} {r:.3f}" for s, r in rs.items())
        + f"; all {pearson(*everything).item():.3f}"
    )


def _model_and_splits(args):
    """An `mpsp-2l2h` model (from --ckpt, or random and trained --train-epochs) with its task and splits."""
    if args.ckpt:
        from analyses import load_subject

        subject = load_subject(args.ckpt)
        return subject.model.eval(), subject.task, subject.splits, f"checkpoint {subject.source}"
    task = MPSPTask()
    splits = task.splits(0)
    model = Transformer(preset_config("mpsp-2l2h", task), seed=0)
    _train(model, splits["train"], args.train_epochs)
    return model.eval(), task, splits, f"train epochs {args.train_epochs}"


def main() -> None:
    """Parse the options, time every variant, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tl-repeats", type=int, default=3)
    parser.add_argument("--examples", type=int, default=2048)
    parser.add_argument("--max-rows", type=int, default=8192)
    parser.add_argument("--train-epochs", type=int, default=0)
    parser.add_argument("--pairs", choices=("cross", "counterfactual"), default="cross")
    parser.add_argument("--act-repeats", type=int, default=1, help="Repeats of patching all sites.")
    parser.add_argument("--ckpt", default=None, help="A trained mpsp-2l2h run or checkpoint.")
    parser.add_argument("--skip-tl", action="store_true", help="Skip the TransformerLens comparison.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from transformer_lens import patching as tl_patching

    model, task, splits, origin = _model_and_splits(args)
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

    what = "val->adv" if args.pairs == "cross" else "counterfactual->adv"
    print(f"mpsp-2l2h, {len(pairs)} pairs {what}, {args.threads} threads, {origin}")
    if not args.skip_tl:
        t_ours, sweep = _median_time(ours, args.repeats)
        t_tl, (resid, z) = _median_time(theirs, args.tl_repeats)
        diff = max(
            (sweep.effects["resid_pre"].logit_diff - resid).abs().max().item(),
            (sweep.effects["z"].logit_diff - z).abs().max().item(),
        )
        print(
            f"resid_pre and z, {resid.numel() + z.numel()} patches "
            f"(resid_pre {tuple(resid.shape)}, z {tuple(z.shape)}):"
        )
        print(f"interp.dissect.patching.patch_sweep   median {t_ours:.3f} s over {args.repeats}")
        print(f"transformer_lens.patching     median {t_tl:.3f} s over {args.tl_repeats}")
        print(f"speed-up {t_tl / t_ours:.1f}x; max |difference| of the logit differences {diff:.2e}")
    _attribution(model, pairs, args)


if __name__ == "__main__":
    main()
