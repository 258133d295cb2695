#!/usr/bin/env bash
# Issue 50's reading (a), as preregistered in docs/llc_readings.md: study C's quadratic MLP at
# xi = 0.35 (seeds 0-2, a checkpoint every 10 steps), the LLC calibrated on seed 0's last
# checkpoint, then every seed's curve at the checkpoints `reading_steps` picks, copied with the
# run's compact record to results/llc/reading-a/. Resumable at every step: training resumes from
# its last checkpoint, the calibration is skipped once written, evolve skips cached checkpoints.
#
#   scripts/long_runs/llc_reading_a.sh train        # the three runs
#   scripts/long_runs/llc_reading_a.sh calibrate    # once, after seed 0 has finished
#   scripts/long_runs/llc_reading_a.sh N            # seed N's curve (0, 1 or 2), and its records
#   scripts/long_runs/llc_reading_a.sh all          # each of the above in turn
#
# The runs and the evolve tables go under RUNS_DIR (default runs), outside git. CODE (default:
# this checkout) is the checkout whose code trains and estimates: a frozen worktree keeps later
# commits out of a reading that spans sessions.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
code=$(realpath "${CODE:-$repo}")
runs=$(realpath -m "${RUNS_DIR:-runs}")/llc-study-c
records=results/llc/reading-a
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

interp() { PYTHONPATH="$code" "$repo/.venv/bin/interp" "$@"; }

train() {
    interp train --preset quadratic-mlp --xi 0.35 --seeds 0-2 --jobs 1 --threads 1 --checkpoint-every 10 \
        --out "$runs" --no-progress
}

calibrate() {
    [[ -f $runs/seed_0/DONE ]] || { echo "$runs/seed_0 has not finished: run '$0 train' first" >&2; exit 2; }
    [[ -f $records/calibration/result.json ]] && return
    interp llc-calibrate --ckpt "$runs/seed_0" --split train --batch-size 0 --chains 4 --draws 100 --burn-in 50 \
        --seed 0 --step-sizes 1e-6,1e-5,1e-4 --n-betas 0.3x,1x --out "$runs/calibration"
    mkdir -p "$records" && rm -rf "$records/calibration" && cp -r "$runs/calibration" "$records/calibration"
}

curve() {
    local seed=$1 run=$runs/seed_$1
    [[ -f $run/DONE ]] || { echo "$run has not finished: run '$0 train' first" >&2; exit 2; }
    [[ -f $records/calibration/result.json ]] || { echo "no calibration yet: run '$0 calibrate' first" >&2; exit 2; }
    local steps
    steps=$(PYTHONPATH="$repo" .venv/bin/python -c "
import sys
from analyses.studies.study_c.llc_reading import reading_steps
from interp.store import list_checkpoints
print(','.join(map(str, reading_steps(list_checkpoints(sys.argv[1])))))" "$run")
    interp evolve --run "$run" --analysis llc --param calibration="$records/calibration" --param batch_size=0 \
        --checkpoints "$steps" --out "$run/llc"
    mkdir -p "$records/seed_$seed"
    cp "$run/llc/llc.csv" "$records/seed_$seed/llc.csv"
    PYTHONPATH="$repo" .venv/bin/python -c "
import sys
from interp.store.export import export_run
export_run(sys.argv[1], sys.argv[2])" "$run" "$records/seed_$seed/run"
}

case ${1:-} in
    train) train ;;
    calibrate) calibrate ;;
    0 | 1 | 2) curve "$1" ;;
    all) train && calibrate && for n in 0 1 2; do curve "$n"; done ;;
    *) echo "usage: $0 train|calibrate|0|1|2|all (got '${1:-}')" >&2; exit 2 ;;
esac
