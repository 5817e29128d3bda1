#!/usr/bin/env bash
# Set up llmsched_gym in ./.venv: PyTorch's CPU build first (pinned, so pip never resolves a CUDA
# build), then the package with its test extras, then the compiled core (Cython; skipped with a
# message when no C compiler is present: the package then runs as pure Python). Idempotent: a
# second run only re-checks, and rebuilds compiled modules whose sources changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${LLMSCHED_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.llmsched-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  # torch==2.13.0 is the CPU build on this machine; installing it first keeps every later
  # resolution (e.g. the [calibration] extra) from pulling several GB of CUDA packages.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e ".[test,parquet,rl,bounds]"
  echo "$want" > "$stamp"
fi
# The compiled core (llmsched_gym/_native.py): up-to-date modules are skipped.
if [ "${LLMSCHED_PURE:-0}" = "0" ]; then
  "$VENV/bin/python" -m llmsched_gym.build_native || true
fi
