#!/usr/bin/env bash
# Study A's confirmatory grid on one GPU: 2L2H and 1L1H at r = 0.9 and 0.5, 10 seeds a cell,
# each cell one vectorised group (`interp train --seeds ... --vectorize --device cuda`), the four
# groups run side by side on the one GPU, then `interp report` over the four folders.
#
#   scripts/gpu/study_a.sh OUT                 # on the GPU machine (installs what is missing)
#   scripts/gpu/study_a.sh OUT --dry-run       # the same commands at tiny scale on this CPU
#
# Training settings default to the study's own (full batch, AdamW lr 1e-3, weight decay 0.1,
# 15,000 epochs); override them for the setting the regime search chose (docs/study_a.md):
#   BATCH_SIZE=512 LR=1e-3 WEIGHT_DECAY=0.1 scripts/gpu/study_a.sh OUT
# Seeds 200-209 (disjoint from the search's); one data seed per cell (a vectorised group shares
# its data).
#
# The GPU machine has torch but not transformer-lens: with WHEELS=DIR (wheels made here by
# `pip download -d DIR -e . --no-deps` plus the dependencies torch does not bring) the project
# is installed from them without an index; otherwise pip uses the index if it can reach one.
set -euo pipefail
out=${1:?usage: scripts/gpu/study_a.sh OUT [--dry-run]}
mode=${2:-}
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}

if [ "$mode" = "--dry-run" ]; then
  device=cpu; seeds=0-1
  scale=(--vocab 8 --n 4 --n-train 128 --n-val 32 --n-adv 32 --epochs ${EPOCHS:-6} --eval-every 2)
else
  device=cuda; seeds=200-209
  scale=(--epochs ${EPOCHS:-15000})
  if ! "$PYTHON" -c "import transformer_lens, interp" 2>/dev/null; then
    if [ -n "${WHEELS:-}" ]; then
      "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" -e .
    else
      "$PYTHON" -m pip install -q -e .
    fi
  fi
  "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'"
fi

train=(--lr "${LR:-1e-3}" --weight-decay "${WEIGHT_DECAY:-0.1}")
[ -n "${BATCH_SIZE:-}" ] && train+=(--batch-size "$BATCH_SIZE")

start=$(date +%s)
pids=()
for preset in mpsp-2l2h mpsp-1l1h; do
  for r in 0.9 0.5; do
    "$PYTHON" -m interp train --preset "$preset" --r "$r" --seeds "$seeds" --vectorize --device "$device" \
      "${scale[@]}" "${train[@]}" --no-progress --out "$out/$preset/r=$r" > "$out.$preset.r$r.log" 2>&1 &
    pids+=($!)
  done
done
mkdir -p "$out"
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo "trained 4 groups in $(( $(date +%s) - start )) s (logs: $out.*.log)"
[ "$status" = 0 ] || { echo "a group failed: see the logs" >&2; exit 1; }
"$PYTHON" -m interp report "$out" --no-progress  # one report over the four groups
