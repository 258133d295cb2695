"""One protocol-2 pilot injection on the pilot seed's AdamW model (issue 18).

Run: `PYTHONPATH=. python results/study-b/pilots/pilot.py SOURCE OUT LR KEEP_NORM MAX_STEPS [NOISE]`
(KEEP_NORM 1 or 0; NOISE random, square or sum). Prints the summary as one JSON line.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from analyses.studies.study_b import inject
from interp.training.config import finetune_config


def main() -> None:
    """Run the pilot named by the command line."""
    source, out, lr, keep, cap = (
        sys.argv[1],
        sys.argv[2],
        float(sys.argv[3]),
        sys.argv[4] == "1",
        int(sys.argv[5]),
    )
    noise = sys.argv[6] if len(sys.argv) > 6 else "random"
    torch.set_num_threads(1)
    start = time.time()
    config = finetune_config(lr=lr, epochs=cap, eval_every=100)
    summary = inject(out, source, noise, k=37, config=config, keep_norm=keep, seed=100)
    keys = ("reached", "steps", "train_acc_at_stop")
    print(
        json.dumps(
            {"lr": lr, "keep_norm": keep, "cap": cap, "noise": noise, "wall_s": round(time.time() - start)}
            | {k: summary[k] for k in keys}
        )
    )


if __name__ == "__main__":
    main()
