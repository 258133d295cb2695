"""Cross-check `interp`'s LLC estimate against devinterp's on the same plain MLP checkpoint.

Run (devinterp is an optional extra, never part of the default install; install it into a venv
of its own with the CPU torch pinned so pip does not pull a CUDA build):

    python3 -m venv /tmp/devinterp-venv
    /tmp/devinterp-venv/bin/pip install torch==2.13.0 devinterp==2.0.1 arviz-stats
    PYTHONPATH=$PWD /tmp/devinterp-venv/bin/python benchmarks/llc_devinterp.py

(`pip install -e '.[devinterp]'` installs the same pin into a full environment.)

The checkpoint: a two-layer tanh MLP (8 -> 32 -> 4, 420 weights) trained with Adam to a near
minimum of the cross-entropy on 2,048 examples labelled by a random teacher MLP of the same
shape; the weights are rebuilt from `--seed` at every run, nothing is downloaded.

Both samplers then run localized SGLD on it with the **same** step size, ``n_beta`` (set
explicitly on both sides: devinterp's own default follows the batch size), localization, chains,
draws, burn-in and batch size, each chain on its own minibatches
(``match_sampling_input_ids_across_chains=False`` on devinterp's side, as `interp.llc` does),
and the same reference loss over the whole data (devinterp's ``num_init_loss_batches`` set to
cover one full pass, so its ``init_loss`` is ``L_n(w*)``, not one batch's). The two share the
update ``w <- w - eps/2 (n_beta grad L_B + gamma (w - w*)) + N(0, eps)`` but not their random
numbers, so the estimates agree only within their spreads over chains.

devinterp 2.0.1 feeds a loss function only ``input_ids`` and wants a per-token loss: each
example is encoded as the token pair ``[index, label]``, and its loss function looks the features
up by index, so both sides evaluate the identical loss. devinterp's reported ``llc_mean``
averages every step *including* burn-in (its ``compute_llc``); the script prints it and also
the mean over the draws only, which is what `interp.llc` reports.

Prints the CPU, both estimates with their standard deviation and standard error over chains,
and the seconds of each (one torch thread unless ``--threads``; devinterp also writes its
draws to a temporary zarr store, which is part of its time).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

D_IN, D_HIDDEN, N_CLASSES = 8, 32, 4


def cpu_line() -> str:
    """The CPU's model name, torch's CPU capability and the core count."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?"
    )
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{name}, torch capability {capability}, {os.cpu_count()} cores, {platform.machine()}"


def mlp() -> nn.Module:
    """The plain MLP: ``[batch, 8] -> [batch, 4]`` logits."""
    return nn.Sequential(nn.Linear(D_IN, D_HIDDEN), nn.Tanh(), nn.Linear(D_HIDDEN, N_CLASSES))


def checkpoint(n: int, seed: int, epochs: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """Train the MLP on `n` teacher-labelled examples; returns (model, features [n, 8], labels [n])."""
    torch.manual_seed(seed)
    teacher = mlp()
    features = torch.randn(n, D_IN)
    with torch.no_grad():
        labels = torch.distributions.Categorical(logits=3 * teacher(features)).sample()
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(epochs):
        if epoch == epochs // 2:  # a smaller step for the second half: closer to the minimum
            opt.param_groups[0]["lr"] = 1e-3
        loss = F.cross_entropy(model(features), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, features, labels


def ours(model: nn.Module, features: torch.Tensor, labels: torch.Tensor, args: argparse.Namespace) -> dict:
    """`interp.llc` at the shared settings."""
    from interp.dissect.learning_coefficient import llc

    def loss_fn(module: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return F.cross_entropy(module(batch[0]), batch[1])

    start = time.perf_counter()
    est = llc(
        model, (features, labels), loss_fn, step_size=args.step_size, n_beta=args.n_beta,
        localization=args.localization, chains=args.chains, draws=args.draws, burn_in=args.burn_in,
        batch_size=args.batch, seed=args.seed,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    return {"per_chain": est.per_chain, "init_loss": est.init_loss, "seconds": seconds,
            "flags": est.health.flags, "rhat": est.health.rhat}  # fmt: skip


def theirs(model: nn.Module, features: torch.Tensor, labels: torch.Tensor, args: argparse.Namespace) -> dict:
    """The devinterp side: its `sample` + `compute_llc` (what its `llc()` runs) at the shared settings."""
    from datasets import Dataset
    from devinterp.slt.llc import compute_llc
    from devinterp.slt.sampling import sample

    n = features.shape[0]
    ids = torch.stack([torch.arange(n), labels], dim=1)  # each example as the "sequence" [index, label]
    dataset = Dataset.from_dict({"input_ids": ids.tolist()}).with_format("torch")

    def loss_fn(module: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        logits = module(features[input_ids[:, 0]])
        return F.cross_entropy(logits, input_ids[:, 1], reduction="none")[:, None]  # [batch, seq - 1 = 1]

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        samples = sample(
            model, dataset, {}, lr=args.step_size, n_beta=args.n_beta, localization=args.localization,
            num_chains=args.chains, num_draws=args.draws, num_burnin_steps=args.burn_in,
            batch_size=args.batch, num_init_loss_batches=n // args.batch, init_seed=args.seed,
            match_sampling_input_ids_across_chains=False, loss_fn=loss_fn, device="cpu",
            output_path=Path(folder) / "samples.zarr",
        )  # fmt: skip
        result = compute_llc(samples)
        # The draws only (after burn-in), as interp.llc reports: sampling_loss is [chain, draw, batch, pos].
        draws = samples.dataset.sampling_loss.mean(dim=["batch", "token_pos"]).values
        init_loss = float(result.init_loss)
        per_chain_all = [float(v) for v in result.llc_per_chain.values]
    seconds = time.perf_counter() - start
    per_chain = [args.n_beta * (float(row.mean()) - init_loss) for row in draws]
    return {"per_chain": per_chain, "per_chain_with_burn_in": per_chain_all, "init_loss": init_loss,
            "seconds": seconds}  # fmt: skip


def spread(values: list[float]) -> str:
    """Mean ± std (se) over chains."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {std:.3f} std ({std / math.sqrt(len(values)):.3f} se)"


def main() -> None:
    """Train the checkpoint, run both estimators, print both (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2048, help="examples (a multiple of --batch)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3000, help="full-batch Adam epochs of the checkpoint")
    parser.add_argument("--step-size", type=float, default=1e-4)
    parser.add_argument("--n-beta", type=float, default=0.0, help="0: n / log n")
    parser.add_argument("--localization", type=float, default=100.0)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.n % args.batch:
        parser.error(f"--n {args.n} is not a multiple of --batch {args.batch}")
    args.n_beta = args.n_beta or args.n / math.log(args.n)
    import devinterp

    version = getattr(devinterp, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("devinterp")
    print(f"CPU: {cpu_line()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
          f"devinterp {version}; 1-minute load {os.getloadavg()[0]:.2f}")  # fmt: skip
    model, features, labels = checkpoint(args.n, args.seed, args.epochs)
    with torch.no_grad():
        train_loss = float(F.cross_entropy(model(features), labels))
    print(f"checkpoint: MLP {D_IN}-{D_HIDDEN}-{N_CLASSES} (tanh), {sum(p.numel() for p in model.parameters())} "
          f"weights, {args.epochs} Adam epochs on n = {args.n}, loss {train_loss:.4f}")  # fmt: skip
    print(f"settings: step size {args.step_size:g}, n_beta {args.n_beta:.2f}, localization {args.localization:g}, "
          f"{args.chains} chains x {args.draws} draws after {args.burn_in} burn-in, batch {args.batch}")  # fmt: skip
    a = ours(model, features, labels, args)
    b = theirs(model, features, labels, args)
    print(f"interp.llc   : {spread(a['per_chain'])}, L_n(w*) {a['init_loss']:.5f}, {a['seconds']:.1f} s, "
          f"flags {list(a['flags']) or 'none'}, R-hat {a['rhat']:.3f}")  # fmt: skip
    print(f"devinterp    : {spread(b['per_chain'])} (draws only), L_n(w*) {b['init_loss']:.5f}, "
          f"{b['seconds']:.1f} s")  # fmt: skip
    print(f"devinterp llc_mean as reported (burn-in included): {spread(b['per_chain_with_burn_in'])}")
    se = math.hypot(*(statistics.stdev(x["per_chain"]) / math.sqrt(args.chains) for x in (a, b)))
    diff = statistics.fmean(a["per_chain"]) - statistics.fmean(b["per_chain"])
    print(f"difference (interp - devinterp, draws only): {diff:.3f} = {diff / se:.2f} combined se; "
          f"time devinterp / interp {b['seconds'] / a['seconds']:.2f}; "
          f"load after {os.getloadavg()[0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
