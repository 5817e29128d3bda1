#!/usr/bin/env bash
# One GPU session in one command: measure (profiler version 2), fit, and trajectory-validate two
# models, everything under one folder. About 6-7 minutes on an H200 (2 models x ~2 min of
# profiling + ~1 min of trajectory timing). On a CPU, `--cpu` runs the same pipeline on the
# tiny test model in about a minute (tests/calibration/test_gpu_session.py).
#
#   bash scripts/gpu_session.sh out/gpu-h200             # on the lent GPU
#   bash scripts/gpu_session.sh /tmp/gpu-cpu --cpu       # the CI-sized rehearsal
#
# Then compare OUT/trajectory/<model>/report.md with calibration/reports/trajectory-h200/ and,
# if the refit is better, copy OUT/cal/<model>/{steps.csv,operators.csv,meta.json} into
# calibration/data/torch/h200-141gb/<model>/ and refit as calibration/README.md says.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: gpu_session.sh OUT_DIR [--cpu]}
PY=${PY:-.venv/bin/python}
if [ "${2:-}" = "--cpu" ]; then
  MODELS="tiny-llama"; DEVICE=cpu; EXTRA=(--small); TRAJ=(--steps 12 --max-num-batched-tokens 256 --num-gpu-blocks 4096)
  LIMITS=("splitwise-conv 60" "sharegpt 30")
else
  MODELS="llama-3-8b qwen2-7b"; DEVICE=cuda; EXTRA=(); TRAJ=(--steps 120)
  LIMITS=("splitwise-conv 1500" "sharegpt 400")
fi
mkdir -p "$OUT"
for m in $MODELS; do
  start=$(date +%s)
  "$PY" -m llmsched_gym calibrate --backend torch --model "$m" --device "$DEVICE" "${EXTRA[@]}" \
    --out "$OUT/cal"
  profile=$(ls "$OUT/cal/$m"/torch-*.yaml)
  for tl in "${LIMITS[@]}"; do
    set -- $tl
    "$PY" -m llmsched_gym.calibration.trajectory --trace "$1" --limit "$2" --device "$DEVICE" \
      --model "$m" --cost-model "$profile" "${TRAJ[@]}" --out "$OUT/trajectory/$m/$1"
  done
  echo "$m: $(( $(date +%s) - start )) s"
done
echo "wrote $OUT/cal/<model>/ (measurements, profile, report) and $OUT/trajectory/<model>/<trace>/"
