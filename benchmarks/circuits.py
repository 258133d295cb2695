"""Time edge scoring: exact patching of every edge vs EAP vs EAP-IG (issue 26).

Run: `.venv/bin/python benchmarks/circuits.py [--pairs 2048] [--steps 20] [--threads 1] [--repeats 3]`.

The model is study A's ``mpsp-2l2h`` preset (2 layers, 2 heads, d_model 64) on MPSP with vocab
32 and n = 5 (sequence length 6: 326 edges), at its seeded initialisation (the cost does not
depend on the weights); the pairs are the adv split's examples with their label-flip partners.
After a small warm-up each method runs `--repeats` times (interleaved, so a change of load
hits all three alike); the table gives each method's median wall time, the spread (min-max) of
its runs, and the ratio of exact patching's median to each estimate's, and the system load
average before and after, since a loaded machine makes every number slower (report it with
the numbers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from analyses.circuit import flip_pairs  # noqa: E402
from interp.dissect.edge_attribution import agreement, exact_scores, gradient_scores  # noqa: E402
from interp.dissect.edges import edge_graph, with_split_inputs  # noqa: E402
from models import build_model, preset_config  # noqa: E402
from tasks import MPSPTask  # noqa: E402


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    """Time the three methods on one model and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20, help="EAP-IG steps")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each method (median)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    task = MPSPTask(vocab=32, n=5, n_train=256, n_val=256, n_adv=args.pairs + 64)
    model = with_split_inputs(build_model(preset_config("mpsp-2l2h", task), seed=0).eval())
    pairs = flip_pairs(task, task.splits(0)["adv"], "label", seed=0).head(args.pairs)
    graph = edge_graph(model, task.n_ctx)
    methods = {
        "exact (every edge)": lambda: exact_scores(model, graph, pairs),
        "EAP": lambda: gradient_scores(model, graph, pairs).mean(0),
        f"EAP-IG ({args.steps} steps)": lambda: gradient_scores(model, graph, pairs, steps=args.steps).mean(
            0
        ),
    }
    load_before = os.getloadavg()
    gradient_scores(model, graph, pairs.head(16))  # warm-up
    times: dict[str, list[float]] = {name: [] for name in methods}
    scores = {}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            scores[name], seconds = _timed(fn)
            times[name].append(seconds)
    load_after = os.getloadavg()
    print(
        f"{len(pairs)} pairs, {graph.n_edges} edges, torch threads {torch.get_num_threads()}, "
        f"{os.cpu_count()} CPUs, {args.repeats} runs each; load average before {load_before[0]:.1f}, "
        f"after {load_after[0]:.1f}"
    )
    median = {name: statistics.median(t) for name, t in times.items()}
    exact_name = next(iter(methods))
    print(f"{'method':<24}{'median s':>10}{'min-max s':>18}{'exact / method':>16}")
    for name, t in times.items():
        spread = f"{min(t):.2f}-{max(t):.2f}"
        print(f"{name:<24}{median[name]:>10.2f}{spread:>18}{median[exact_name] / median[name]:>16.1f}")
    exact = scores[exact_name]
    for name in list(methods)[1:]:
        a = agreement(scores[name], exact, k=20)
        print(
            f"{name} vs exact (untrained model): Spearman {a.spearman:.3f} over {a.n_active} active edges, "
            f"top-{a.k} overlap {a.top_k_overlap:.2f}"
        )


if __name__ == "__main__":
    main()
