"""Cost models: a batch's features in, the engine step's duration in seconds out.

* :class:`CostModel` — the protocol (``step_time`` and its bit-identical vectorised twin
  ``step_times``);
* :class:`ConstantCostModel`, :class:`LinearCostModel` — the simple models, and
  :class:`ExtendedLinearCostModel` — linear plus a GEMM knee and item-level terms (``base.py``);
* :class:`RooflineCostModel` — analytic, from model shapes, GPU datasheet and TP (``roofline.py``);
* :func:`load_cost_model`, :func:`list_profiles`, :func:`profile_info` — the registry of specs
  (``constant:S``, ``roofline:<model>@<gpu>/tp<N>``, fitted ``vidur:...`` profiles, YAML paths);
* :func:`num_gpu_blocks`, :func:`kv_capacity` — KV-cache capacity as vLLM computes it;

The tools that make profiles (the torch profiler, the fits to measured or Vidur-composed step
times) live in :mod:`llmsched_gym.calibration`; this package holds only what the engine prices
with.
"""

from llmsched_gym.cost.base import (
    ConstantCostModel,
    CostModel,
    ExtendedLinearCostModel,
    LinearCostModel,
)
from llmsched_gym.cost.capacity import KVCapacity, MemoryOverheads, kv_capacity, num_gpu_blocks
from llmsched_gym.cost.hardware import (
    GPUSpec,
    ModelSpec,
    get_gpu,
    get_model,
    list_gpus,
    list_models,
)
from llmsched_gym.cost.registry import (
    ProfiledExtendedCostModel,
    ProfiledLinearCostModel,
    ProfileInfo,
    list_profiles,
    load_cost_model,
    load_profile_file,
    profile_info,
)
from llmsched_gym.cost.roofline import RooflineCostModel, RooflineParams

__all__ = [
    "ConstantCostModel",
    "CostModel",
    "ExtendedLinearCostModel",
    "GPUSpec",
    "KVCapacity",
    "LinearCostModel",
    "MemoryOverheads",
    "ModelSpec",
    "ProfileInfo",
    "ProfiledExtendedCostModel",
    "ProfiledLinearCostModel",
    "RooflineCostModel",
    "RooflineParams",
    "get_gpu",
    "get_model",
    "kv_capacity",
    "list_gpus",
    "list_models",
    "list_profiles",
    "load_cost_model",
    "load_profile_file",
    "num_gpu_blocks",
    "profile_info",
]
