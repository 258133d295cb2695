#!/usr/bin/env bash
# Study A's preregistered map (docs/study_a.md), resumable: run it again to resume, on this
# machine or a fresh one. It trains from a frozen checkout of the preregistration commit
# (05c4fdd) in a worktree outside the repository, two runs at a time on one thread each, and
# samples each worker's CPU time into SWEEP/cpu_ledger.json (that checkout does not record it).
#   scripts/long_runs/study_a_map.sh [RUNS_DIR]        (default: ../runs beside the checkout)
# Export the records: .venv/bin/python scripts/export_results.py RUNS_DIR/study-a/map \
#   results/study-a/map --cpu-ledger RUNS_DIR/study-a/map/cpu_ledger.json
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
runs=$(realpath -m "${1:-$repo/../runs}")
frozen="$runs/frozen-05c4fdd"
mkdir -p "$runs/study-a/map"
[ -d "$frozen" ] || git -C "$repo" worktree add --detach "$frozen" 05c4fdd
pgrep -f "cpu_ledger.py $runs/study-a/map" >/dev/null ||
  nohup python3 "$repo/scripts/long_runs/cpu_ledger.py" "$runs/study-a/map" >"$runs/cpu_ledger.log" 2>&1 &
cd "$frozen"
export PYTHONPATH="$frozen" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
nohup "$repo/.venv/bin/interp" sweep --grid study-a-map --out "$runs/study-a/map" --jobs 2 --threads 1 \
  --no-progress >"$runs/map.log" 2>&1 &
echo "map sweep started (pid $!); log $runs/map.log"
