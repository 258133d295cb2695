#!/usr/bin/env bash
# Issue 50's reading (b), as preregistered in docs/llc_readings.md: the LLC curve of a committed
# study-A series, whole model and each head, at the calibration's recommended setting, copied to
# results/llc/reading-b/SERIES/PART.csv. Resumable: evolve caches every finished checkpoint.
#
#   scripts/long_runs/llc_reading_b.sh calibrate           # once: results/llc/reading-b/calibration
#   scripts/long_runs/llc_reading_b.sh SERIES [PART ...]   # e.g. mpsp-2l2h-r0.9 (default parts: all)
#
# SERIES is a folder of results/study-a/series; PART is "whole" or a head (L0H0, ...). The
# evolve tables and their caches go under EVOLVE_DIR (default runs/llc-reading-b), outside git;
# CHECKPOINTS (evolve's --checkpoints, e.g. 0,150) limits a check to a few checkpoints, and then
# nothing is copied to the records.
set -euo pipefail
cd "$(dirname "$0")/../.."
INTERP=${INTERP:-.venv/bin/interp}
RECORDS=results/llc/reading-b
export OMP_NUM_THREADS=1

if [[ ${1:-} == calibrate ]]; then
    "$INTERP" llc-calibrate --ckpt results/study-a/series/mpsp-2l2h-r0.9 --split train \
        --batch-size 256 --chains 4 --draws 100 --burn-in 50 --seed 0 \
        --step-sizes 1e-6,3e-6,1e-5,3e-5 --n-betas 0.3x,1x --out "$RECORDS/calibration"
    exit
fi
series=${1:?give a series of results/study-a/series, or "calibrate"}
shift
run=results/study-a/series/$series
[[ -d $run ]] || { echo "$run: no such series (valid: $(ls results/study-a/series | tr '\n' ' '))" >&2; exit 2; }
parts=("$@")
if [[ ${#parts[@]} -eq 0 ]]; then  # the whole model and every head the series' config names
    parts=(whole $(.venv/bin/python -c "import json,sys; m=json.load(open(sys.argv[1]))['model']; print(' '.join(f'L{l}H{h}' for l in range(m['n_layers']) for h in range(m['n_heads'])))" "$run/config.json"))
fi
out=${EVOLVE_DIR:-runs/llc-reading-b}/$series
mkdir -p "$RECORDS/$series"
for part in "${parts[@]}"; do
    restrict=$([[ $part == whole ]] && echo "" || echo "$part")
    "$INTERP" evolve --run "$run" --analysis llc --param calibration="$RECORDS/calibration" \
        --param batch_size=256 --param restrict="$restrict" ${CHECKPOINTS:+--checkpoints "$CHECKPOINTS"} \
        --out "$out/$part"
    [[ -n ${CHECKPOINTS:-} ]] || cp "$out/$part/llc.csv" "$RECORDS/$series/$part.csv"
done
