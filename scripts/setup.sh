#!/usr/bin/env bash
# Set up llmsched_gym in ./.venv: PyTorch's CPU build first (pinned, so pip never resolves a CUDA
# build), then the package with its test extras, then the compiled core (Cython; skipped with a
# message when no C compiler is present: the package then runs as pure Python). Idempotent: a
# second run only re-checks, and rebuilds compiled modules whose sources changed.
#
# Prints one line per stage with its time; pip's and the compiler's own output goes to
# $VENV/setup.log (printed in full if a stage fails).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${LLMSCHED_VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
LOG="$VENV/setup.log"
: > "$LOG"

# stage NAME COMMAND...: run COMMAND with its output in the log; one line with the time taken.
stage() {
  local name=$1
  shift
  local start=$SECONDS
  if "$@" >>"$LOG" 2>&1; then
    printf 'setup: %-14s %4d s\n' "$name" $((SECONDS - start))
  else
    local rc=$?
    printf 'setup: %-14s failed after %d s; its output:\n' "$name" $((SECONDS - start))
    cat "$LOG"
    return "$rc"
  fi
}

total=$SECONDS
stamp="$VENV/.llmsched-setup"
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  stage "pip" "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch==2.13.0 is the CPU build on this machine; installing it first keeps every later
  # resolution (e.g. the [calibration] extra) from pulling several GB of CUDA packages.
  stage "torch" "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  stage "project" "$VENV/bin/python" -m pip install -q -e ".[test,parquet,rl,bounds]"
  echo "$want" > "$stamp"
else
  echo "setup: torch and project up to date"
fi
# The compiled core (llmsched_gym/_native.py): up-to-date modules are skipped.
if [ "${LLMSCHED_PURE:-0}" = "0" ]; then
  # fd 3 is the terminal: a line per compiled module while the compiler's output goes to the log
  if ! stage "compiled core" "$VENV/bin/python" -m llmsched_gym.build_native --progress-fd 3 3>&1
  then
    echo "setup: the compiled core was not built; everything runs as pure Python (same results)"
  fi
fi
echo "setup: done in $((SECONDS - total)) s ($VENV; details in $LOG)"
