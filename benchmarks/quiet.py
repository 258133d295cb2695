"""The 2L2H training step measured by the protocol of `benchmarks/README.md`, in one go.

Run: `.venv/bin/python benchmarks/quiet.py [--pause PID ...] [--max-load 0.3] [--repeats 3]
[--threads 1 2] [--vocabs 64 32] [--force]`.

1. Pauses every process given with `--pause` and its descendants (`SIGSTOP`), and always
   resumes them (`SIGCONT`) at the end, on an error, on Ctrl-C and, at the latest, after
   `--max-pause` seconds (a watchdog thread; the measurement then stops).
2. Waits until the 1-minute load average is below `--max-load` (the load average decays
   over a minute or two after the pause); gives up after `--wait` seconds unless `--force`,
   in which case every line is labelled NOT QUIET.
3. Runs `--repeats` rounds; a round is one fresh process per thread count that measures the
   fp32 matmul peak (best of 8 `2048^3` products) and, for `mpsp-2l2h` at each vocabulary
   (study A's shapes: 16,384 examples of 5 integers), a full-batch AdamW step of TransformerLens's
   `HookedTransformer` (median of 3 after 1 warm-up) and of `fast_readout` in fp32, under
   bf16 autocast (only where the CPU computes bf16 natively, `interp.training.precision`: a
   note says when it is skipped), and in fp32 without its CSR path (`models.csr.ENABLED =
   False`: the step as it was before issue 24) (median of 5 after 2 warm-ups).
4. Prints per (vocabulary, threads, variant) the median over the rounds and the spread
   (min-max) of the step time, the peak beside it, the ratio against HookedTransformer (same
   round) and against the limit: `benchmarks.train_step.minimal_flops` / the fp32 peak of the
   same round. The target of issue 24 is a step within 2x of that limit.

Total time on 2 idle cores: about 3-5 minutes (most of it HookedTransformer's 1-thread steps).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRESET = "mpsp-2l2h"


def descendants(pids: list[int]) -> list[int]:
    """`pids` and every process whose ancestry reaches one of them (from /proc)."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:  # field 4 of /proc/PID/stat, after the parenthesised command name
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += [child for child, ppid in parent.items() if ppid == pid]
    return sorted(found)


class Paused:
    """Context: `SIGSTOP` the given processes on entry, `SIGCONT` them on exit or after `limit` s."""

    def __init__(self, pids: list[int], limit: float) -> None:
        self.pids, self.limit = descendants(pids) if pids else [], limit
        self.start = 0.0
        self._lock = threading.Lock()
        self._resumed = False
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Paused:
        self.start = time.monotonic()
        for pid in self.pids:
            self._signal(pid, signal.SIGSTOP)
        if self.pids:
            print(f"paused {len(self.pids)} processes: {' '.join(map(str, self.pids))}", flush=True)
            self._timer = threading.Timer(self.limit, self._watchdog)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _watchdog(self) -> None:
        print(f"\n--max-pause {self.limit:.0f} s reached: resuming and stopping", flush=True)
        self.resume()
        os.kill(os.getpid(), signal.SIGINT)

    def resume(self) -> None:
        """Send `SIGCONT` to every paused process, once."""
        with self._lock:
            if self._resumed:
                return
            self._resumed = True
        for pid in self.pids:
            self._signal(pid, signal.SIGCONT)
        if self.pids:
            print(f"resumed them after {time.monotonic() - self.start:.0f} s paused", flush=True)

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.resume()

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # ended meanwhile
            pass


def wait_for_quiet(max_load: float, wait: float) -> tuple[bool, float]:
    """Poll the 1-minute load average until it is below `max_load` or `wait` s passed."""
    deadline = time.monotonic() + wait
    while True:
        load = os.getloadavg()[0]
        if load < max_load or time.monotonic() >= deadline:
            return load < max_load, load
        print(f"  1-minute load {load:.2f} >= {max_load}: waiting", flush=True)
        time.sleep(10)


def child(threads: int, vocabs: list[int]) -> None:
    """One round on `threads` threads: print a JSON record of the peak and every step time."""
    import warnings

    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks.train_step import matmul_peak, minimal_flops, time_steps
    from interp.training.memory import keep_freed_memory
    from interp.training.precision import cpu_bf16
    from models import csr
    from models.convert import to_transformer_lens_config
    from models.fast_forward import fast_readout
    from models.presets import preset_config
    from models.transformer import Transformer
    from tasks import MPSPTask

    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")  # TransformerLens 3.x's deprecation warning
    from transformer_lens import HookedTransformer

    keep_freed_memory()
    record = {"threads": threads, "peak": matmul_peak(torch.float32), "steps": {}, "flops": {}}
    if not cpu_bf16().native:  # emulated bf16 is about 20x slower than fp32: not a row worth timing
        record["bf16_skipped"] = cpu_bf16().describe()
    for vocab in vocabs:
        task = MPSPTask(vocab=vocab)
        cfg = preset_config(PRESET, task)
        train = task.splits(0)["train"]
        tl, ours = HookedTransformer(to_transformer_lens_config(cfg)), Transformer(cfg, seed=0)
        record["flops"][str(vocab)] = minimal_flops(cfg, len(train))
        fast = lambda t, m=ours: fast_readout(m, t)  # noqa: E731
        variants = {  # readout, model, bf16, CSR path, warm-up steps, timed steps
            "HookedTransformer": (lambda t, m=tl: m(t)[:, -1], tl, False, True, 1, 3),
            "fast fp32": (fast, ours, False, True, 2, 5),
            "fast bf16": (fast, ours, True, True, 2, 5),
            "fast fp32, dense (before issue 24)": (fast, ours, False, False, 2, 5),
        }
        for label, (readout, model, bf16, sparse, warmup, repeats) in variants.items():
            if bf16 and "bf16_skipped" in record:
                continue
            csr.ENABLED = sparse
            record["steps"][f"{vocab} {label}"] = time_steps(
                readout,
                list(model.parameters()),
                train.tokens,
                train.labels,
                autocast=bf16,
                warmup=warmup,
                repeats=repeats,
            )
        csr.ENABLED = True
    print("RECORD " + json.dumps(record), flush=True)


def run_rounds(args) -> list[dict]:
    """`args.repeats` rounds, each one fresh process per thread count, alternating."""
    records = []
    for r in range(args.repeats):
        for threads in args.threads:
            t0 = time.monotonic()
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(threads), "--vocabs", *map(str, args.vocabs)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            ).stdout
            record = json.loads(out.split("RECORD ", 1)[1])
            record["load"] = os.getloadavg()[0]
            records.append(record)
            print(
                f"  round {r + 1}, {threads} thread(s): {time.monotonic() - t0:.0f} s, "
                f"fp32 peak {record['peak'] / 1e9:.0f} GFLOP/s, load after {record['load']:.2f}",
                flush=True,
            )
    return records


def table(records: list[dict], quiet: bool) -> None:
    """The medians, spreads and ratios of every (vocabulary, threads, variant)."""
    label = "" if quiet else " NOT QUIET"
    print(
        f"\n| vocab | threads | variant | s / step, median (min-max) | fp32 peak GFLOP/s | "
        f"vs HookedTransformer | vs limit |{label}\n|---|---|---|---|---|---|---|"
    )
    threads = sorted({r["threads"] for r in records})
    for key in records[0]["steps"]:
        vocab, variant = key.split(" ", 1)
        for n in threads:
            mine = [r for r in records if r["threads"] == n]
            secs = [r["steps"][key] for r in mine]
            peaks = [r["peak"] for r in mine]
            vs_tl = [r["steps"][f"{vocab} HookedTransformer"] / r["steps"][key] for r in mine]
            vs_limit = [r["steps"][key] * r["peak"] / r["flops"][vocab] for r in mine]
            print(
                f"| {int(vocab) + 1} ({vocab} + SEP) | {n} | {variant} | {statistics.median(secs):.3f} "
                f"({min(secs):.3f}-{max(secs):.3f}) | {statistics.median(peaks) / 1e9:.0f} "
                f"({min(peaks) / 1e9:.0f}-{max(peaks) / 1e9:.0f}) | {statistics.median(vs_tl):.2f}x "
                f"({min(vs_tl):.2f}-{max(vs_tl):.2f}) | {statistics.median(vs_limit):.2f}x "
                f"({min(vs_limit):.2f}-{max(vs_limit):.2f}) |{label}"
            )
    for vocab in dict.fromkeys(k.split(" ", 1)[0] for k in records[0]["steps"]):
        print(f"minimal matmul work at vocab {vocab}: {records[0]['flops'][vocab] / 1e9:.2f} GFLOP per step")


def main() -> None:
    """Parse the options, pause, wait for a quiet machine, run the rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pause", type=int, nargs="*", default=[], help="PIDs to pause (and their children)")
    parser.add_argument("--max-pause", type=float, default=600.0, help="resume them after this long at most")
    parser.add_argument("--max-load", type=float, default=0.3)
    parser.add_argument("--wait", type=float, default=180.0, help="seconds to wait for the load to drop")
    parser.add_argument("--force", action="store_true", help="measure anyway, labelled NOT QUIET")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--vocabs", type=int, nargs="+", default=[64, 32])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.vocabs)
        return
    from importlib.metadata import version

    print(
        f"torch {version('torch')}, transformer-lens {version('transformer-lens')}, {PRESET}, "
        f"batch 16,384, {os.cpu_count()} CPUs; command: {' '.join(sys.argv)}",
        flush=True,
    )
    start = time.monotonic()
    with Paused(args.pause, args.max_pause):
        quiet, load = wait_for_quiet(args.max_load, args.wait)
        print(f"1-minute load at start: {load:.2f} ({'quiet' if quiet else 'NOT QUIET'})", flush=True)
        if not quiet and not args.force:
            sys.exit(f"load {load:.2f} >= {args.max_load} after {args.wait:.0f} s; --force to measure anyway")
        records = run_rounds(args)  # (the load after a round includes the round's own threads)
    if "bf16_skipped" in records[0]:
        print(f"bf16 rows skipped: {records[0]['bf16_skipped']} (INTERP_BF16=1 times them anyway)")
    table(records, quiet)
    print(f"\ntotal {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
