#!/usr/bin/env bash
# Study A's stage (b) on one GPU (docs/study_a.md, "Stages after the headline": fixed before any
# of their runs): the named grids study-a-capacity, study-a-wd, study-a-ternary, study-a-max and
# study-a-vocab64, each as `interp sweep --grid G --out OUT/G --device cuda --jobs JOBS` (JOBS
# runs side by side on the one GPU, one CPU thread each: the seeds and data seeds are the
# grids' own, as in a CPU sweep of the same grid; the arithmetic is the GPU's), then one
# `interp report OUT`. A grid with a failed run does not stop the others; the script then ends
# with exit 1 after the report.
#
#   scripts/gpu/study_a.sh OUT                 # on the GPU machine (installs what is missing)
#   scripts/gpu/study_a.sh OUT --dry-run       # the same commands at toy scale on this CPU
#
# GRIDS="study-a-headline study-a-crossed" runs other named grids instead; JOBS (default 8) runs
# at a time. Rerunning the same line resumes (finished runs are skipped).
#
# The GPU machine has torch but not transformer-lens: with WHEELS=DIR (wheels made here by
# `pip download -d DIR -e . --no-deps` plus the dependencies torch does not bring) the project
# is installed from them without an index; otherwise pip uses the index if it can reach one.
set -euo pipefail
out=${1:?usage: scripts/gpu/study_a.sh OUT [--dry-run]}
mode=${2:-}
[ -z "$mode" ] || [ "$mode" = "--dry-run" ] || { echo "unknown option $mode (valid: --dry-run)" >&2; exit 2; }
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
read -ra grids <<<"${GRIDS:-study-a-capacity study-a-wd study-a-ternary study-a-max study-a-vocab64}"

if [ "$mode" = "--dry-run" ]; then
  device=cpu; jobs=${JOBS:-2}
  scale=(--seeds 1 --epochs "${EPOCHS:-4}" --set n_train=128 --set n_val=32 --set n_adv=32)
else
  device=cuda; jobs=${JOBS:-8}
  scale=()
  if ! "$PYTHON" -c "import transformer_lens, interp" 2>/dev/null; then
    if [ -n "${WHEELS:-}" ]; then
      "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" -e .
    else
      "$PYTHON" -m pip install -q -e .
    fi
  fi
  "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'"
fi

mkdir -p "$out"
start=$(date +%s)
failed=()
for grid in "${grids[@]}"; do  # a failed run does not cost the other grids their GPU time
  if "$PYTHON" -m interp sweep --grid "$grid" --out "$out/$grid" --device "$device" --jobs "$jobs" --threads 1 \
    "${scale[@]}" --no-report --no-progress > "$out/$grid.log" 2>&1; then
    echo "$grid: $(tail -1 "$out/$grid.log") ($(( $(date +%s) - start )) s so far)"
  else
    failed+=("$grid")
    echo "$grid: a run failed, see $out/$grid.log" >&2
  fi
done
echo "trained ${#grids[@]} grids in $(( $(date +%s) - start )) s (logs: $out/GRID.log)"
"$PYTHON" -m interp report "$out" --no-progress  # one report over every grid
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]} (rerun the same line to resume them)" >&2
  exit 1
fi
