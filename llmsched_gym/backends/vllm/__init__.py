"""The live vLLM backend: real ``EngineCore`` steps behind the simulator's records and metrics.

Optional: it needs vLLM (``pip install 'llmsched-gym[vllm]'`` on a GPU machine, or
``bash .ci/setup_vllm_venv.sh`` for the CPU build in ``.venv-vllm``). Importing this package
does not import vLLM; building a ``LiveEngine`` does, and says what to install when it is absent.

* ``LiveEngine`` / ``LiveEngineConfig`` / ``LiveRun``: replay a workload on a live engine
  (``llmsched_gym.backends.vllm.engine``);
* ``calibrate``: fit a linear cost profile from measured live steps (``.calibrate``);
* ``validate``: the same trace on the live engine and in the simulator, compared (``.validate``);
* ``policy_scheduler_cls``: a vLLM ``scheduler_cls`` that runs a project policy (``.scheduler``):
  reordering policies feed vLLM's own ``schedule()`` their order and victims; any other policy
  (Sarathi, InferMax, ProServe, ...) builds every step itself on vLLM's queues and KV cache
  through ``LiveStepContext`` (``.stepctx``).
"""

from __future__ import annotations

import importlib
from typing import Any

from llmsched_gym.backends.vllm._deps import INSTALL_HINT, vllm_available

_LAZY = {
    "LiveEngine": "engine",
    "LiveEngineConfig": "engine",
    "LiveResult": "engine",
    "LiveRun": "engine",
    "LiveStep": "engine",
    "TinyModelSpec": "model",
    "CalibrationResult": "calibrate",
    "calibrate": "calibrate",
    "ValidationResult": "validate",
    "validate": "validate",
    "policy_scheduler_cls": "scheduler",
    "policy_step_scheduler_cls": "stepctx",
    "LiveStepContext": "stepctx",
}

__all__ = ["INSTALL_HINT", "vllm_available", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
