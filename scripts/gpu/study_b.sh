#!/usr/bin/env bash
# Study B's protocol 2 on one GPU: 10 seeds, each one process of
# `interp study-b measure OUT --seeds N --preset protocol-2 --device cuda --vectorize --runs-only`
# (the AdamW run, the walk with the vectorised walker engine, production, the six injections),
# all side by side on the one GPU; then one `--table-only --export` over the seeds and
# `interp study-b records` of the export.
#
#   scripts/gpu/study_b.sh OUT                 # on the GPU machine (installs what is missing)
#   scripts/gpu/study_b.sh OUT --dry-run       # the same commands at tiny scale on this CPU
#
# Settings are protocol 2's (analyses/studies/study_b/protocols/protocol-2.json; PRESET=protocol-3 runs
# protocol 3, PRESET=protocol-2-walkers the shorter road that failed on seed 0, docs/study_b.md), with the walkers vectorised
# (recorded: settings wlmd.engine = vectorized, so OUT resumes only with this script or --vectorize). SEEDS="0 1 2" runs other seeds; EXPORT=DIR sets the records' folder
# [default: OUT/records]; SETTINGS='{"wlmd": {"walkers": 4}}' adds JSON overrides (a new OUT
# for other settings: a measured folder refuses them). Rerunning resumes every unfinished seed.
#
# The GPU machine has torch but not transformer-lens: with WHEELS=DIR (wheels made here by
# `pip download -d DIR -e . --no-deps` plus the dependencies torch does not bring) the project
# is installed from them without an index; otherwise pip uses the index if it can reach one.
set -euo pipefail
out=${1:?usage: scripts/gpu/study_b.sh OUT [--dry-run]}
mode=${2:-}
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}

if [ "$mode" = "--dry-run" ]; then
  device=cpu; seeds=${SEEDS:-0 1}
  # Toy scale (tests/integration/test_study_b_cli.py's): p = 7, a tiny model, a few steps of
  # everything; 2 walkers, so the vectorised engine moves more than one.
  settings=${SETTINGS:-'{"p": 7, "weight_norm": 6.0, "epochs": 20, "lr": 3e-2,
    "model_overrides": {"d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16},
    "wlmd": {"steps": 4, "max_steps": 6, "report_every": 2, "checkpoint_every": 2, "walkers": 2,
      "production_steps": 3, "dt": 1e-3, "every": 1, "max_samples": 1, "y_low": 0.0, "window_y": 0.0},
    "k": 3, "max_steps": 3, "eval_every": 1}'}
elif [ -z "$mode" ]; then
  device=cuda; seeds=${SEEDS:-0 1 2 3 4 5 6 7 8 9}
  settings=${SETTINGS:-'{}'}
  if ! "$PYTHON" -c "import transformer_lens, interp" 2>/dev/null; then
    if [ -n "${WHEELS:-}" ]; then
      "$PYTHON" -m pip install -q --no-index --find-links "$WHEELS" -e .
    else
      "$PYTHON" -m pip install -q -e .
    fi
  fi
  "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no GPU visible to torch'"
else
  echo "scripts/gpu/study_b.sh: unknown option '$mode' (valid: --dry-run)" >&2
  exit 2
fi

measure=("$PYTHON" -m interp study-b measure "$out" --preset "${PRESET:-protocol-2}" --vectorize --settings "$settings")
mkdir -p "$out/logs"
start=$(date +%s)
pids=()
for seed in $seeds; do
  "${measure[@]}" --seeds "$seed" --device "$device" --runs-only > "$out/logs/seed_$seed.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
echo "measured seeds ${seeds} in $(( $(date +%s) - start )) s (logs: $out/logs/)"
[ "$status" = 0 ] || { echo "a seed failed: see its log" >&2; exit 1; }
all=$(echo $seeds | tr ' ' ',')
export_dir=${EXPORT:-$out/records}
"${measure[@]}" --seeds "$all" --table-only --export "$export_dir"
"$PYTHON" -m interp study-b records "$export_dir"
