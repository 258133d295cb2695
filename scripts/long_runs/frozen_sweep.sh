#!/usr/bin/env bash
# A long sweep trained from a frozen checkout, resumable: run the same line again to resume, on
# this machine or a fresh one (a finished run is skipped, an unfinished one resumes from its
# last checkpoint).
#   scripts/long_runs/frozen_sweep.sh GRID COMMIT SWEEP [RUNS_DIR]
# trains the named grid GRID as of commit COMMIT (a worktree outside the repository, so later
# commits change nothing in a running study) into RUNS_DIR/SWEEP (RUNS_DIR defaults to ../runs
# beside the checkout), JOBS runs at a time (default 2) on one thread each, logging to
# RUNS_DIR/SWEEP.log. Runs record their own CPU time (compute.json). Export the records with
#   .venv/bin/python scripts/export_results.py RUNS_DIR/SWEEP results/SWEEP
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 GRID COMMIT SWEEP [RUNS_DIR]" >&2; exit 2; }
grid=$1 commit=$(git -C "$(dirname "$0")" rev-parse --short "$2") sweep=$3
repo=$(cd "$(dirname "$0")/../.." && pwd)
runs=$(realpath -m "${4:-$repo/../runs}")
frozen="$runs/frozen-$commit"
[ -d "$frozen" ] || git -C "$repo" worktree add --detach "$frozen" "$commit"
mkdir -p "$runs/$sweep"
cd "$frozen"
export PYTHONPATH="$frozen" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
log="$runs/$sweep.log"
mkdir -p "$(dirname "$log")"
nohup "$repo/.venv/bin/interp" sweep --grid "$grid" --out "$runs/$sweep" --jobs "${JOBS:-2}" \
  --threads 1 --no-progress >>"$log" 2>&1 &
echo "$grid from $commit: sweep started (pid $!) into $runs/$sweep; log $log"
