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
# Several grids run one after another (a staged plan on one core) when GRID and SWEEP are
# comma-separated lists of the same length, e.g.
#   JOBS=1 scripts/long_runs/frozen_sweep.sh study-a-crossed,study-a-map-1l1h COMMIT \
#     study-a/crossed,study-a/map-1l1h
# (a grid that fails stops the chain, so a later grid never runs before an earlier one ends).
# On a fresh machine, runs whose records are committed as finished (results/SWEEP/.../DONE) are
# not trained again: their records are copied into RUNS_DIR/SWEEP first, and the sweep skips a
# finished run (their checkpoints are not committed, so they have none there).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 GRID[,GRID...] COMMIT SWEEP[,SWEEP...] [RUNS_DIR]" >&2; exit 2; }
IFS=, read -ra grids <<<"$1"
IFS=, read -ra sweeps <<<"$3"
[ ${#grids[@]} -eq ${#sweeps[@]} ] || {
  echo "$0: ${#grids[@]} grids ($1) but ${#sweeps[@]} sweep folders ($3): give one folder a grid" >&2
  exit 2
}
for name in "${grids[@]}" "${sweeps[@]}"; do
  [ -n "$name" ] || { echo "$0: an empty name in '$1' or '$3' (valid: comma-separated, none empty)" >&2; exit 2; }
done
commit=$(git -C "$(dirname "$0")" rev-parse --short "$2")
repo=$(cd "$(dirname "$0")/../.." && pwd)
runs=$(realpath -m "${4:-$repo/../runs}")
frozen="$runs/frozen-$commit"
[ -d "$frozen" ] || git -C "$repo" worktree add --detach "$frozen" "$commit"
for sweep in "${sweeps[@]}"; do  # this checkout's code, not the frozen one's: it only copies records
  mkdir -p "$runs/$sweep"
  "$repo/.venv/bin/python" "$repo/scripts/long_runs/take_records.py" "$repo/results/$sweep" "$runs/$sweep"
done
cd "$frozen"
export PYTHONPATH="$frozen" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
chain=()
for i in "${!grids[@]}"; do
  mkdir -p "$runs/${sweeps[$i]}" "$(dirname "$runs/${sweeps[$i]}.log")"
  chain+=("$(printf '%q ' "$repo/.venv/bin/interp" sweep --grid "${grids[$i]}" --out "$runs/${sweeps[$i]}" \
    --jobs "${JOBS:-2}" --threads 1 --no-progress)>>$(printf '%q' "$runs/${sweeps[$i]}.log") 2>&1")
done
joined=$(printf ' && %s' "${chain[@]}")
# Its own process group, so that one signal stops the chain and the sweep it is running (a
# stopped sweep saves a checkpoint in every run; rerunning this line resumes).
setsid nohup bash -c "${joined# && }" >/dev/null 2>&1 &
echo "${grids[*]} from $commit: started into $runs/{${sweeps[*]}}; logs beside them (SWEEP.log)"
echo "to stop it: kill -TERM -- -$!"
