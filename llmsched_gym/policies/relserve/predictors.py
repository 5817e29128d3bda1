"""RelServe's latency predictors (Eq. 9) and their fit on a vLLM-SP run.

L^prefill(uncached tokens) and L^decode(#running) are fitted by :func:`fit_latency_predictors`
from the per-step records of a vLLM-SP run, as the authors' ``slope_calc.py`` does
(``CSLabor/vllm_relserve@f643fc5``). Without explicit predictors a policy fits them on first
use (:func:`default_predictors`): one vLLM-SP run of a small calibration relQuery workload on the
engine's own cost model and config, cached per (cost model, config). That run drives an
:class:`~llmsched_gym.core.engine.Engine` directly, so the policy floor never calls the
``simulation`` floor above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.errors import ConfigError, LLMSchedError
from llmsched_gym.policies.relserve.vllm06 import VllmSPPolicy

__all__ = [
    "WARMUP_STEPS",
    "LatencyPredictors",
    "calibration_steps",
    "default_predictors",
    "fit_latency_predictors",
]

WARMUP_STEPS = 10
"""Steps dropped from the start of a fitting run (``slope_calc.py``)."""


@dataclass(frozen=True)
class LatencyPredictors:
    """Eq. 9: L^prefill(p) = α^p·utok(p) + β^p and L^decode(d) = α^d·req(d) + β^d (seconds)."""

    alpha_p: float
    beta_p: float
    alpha_d: float
    beta_d: float

    def prefill(self, uncached_tokens: float) -> float:
        """L^prefill of a batch with ``uncached_tokens`` tokens to compute."""
        return self.alpha_p * uncached_tokens + self.beta_p

    def decode(self, num_requests: float) -> float:
        """L^decode of a decode batch of ``num_requests`` sequences."""
        return self.alpha_d * num_requests + self.beta_d


def fit_latency_predictors(result: Any, warmup: int = WARMUP_STEPS) -> LatencyPredictors:
    """Fit Eq. 9 from a vLLM-SP run's step records, as the authors' ``slope_calc.py``.

    Args:
        result: A ``SimulationResult`` of ``simulate(..., record_steps=True)`` (or its ``steps``
            DataFrame) of a run without hybrid batches (``vllm-sp``, ``vllm-v0``).
        warmup: Leading steps dropped as warm-up (10 in the authors' script).

    Returns:
        ``np.polyfit(deg=1)`` of step time on uncached prefill tokens (prefill-only steps) and on
        the number of running sequences (decode-only steps).

    Raises:
        ConfigError: No step records, or fewer than two prefill or decode steps after warm-up.
    """
    steps = getattr(result, "steps", result)
    if steps is None:
        raise ConfigError("fit_latency_predictors needs step records (record_steps=True)")
    steps = steps.iloc[warmup:]
    pre = steps[(steps["num_prefill"] > 0) & (steps["num_decode"] == 0)]
    dec = steps[(steps["num_prefill"] == 0) & (steps["num_decode"] > 0)]
    if len(pre) < 2 or len(dec) < 2:
        raise ConfigError(
            f"fit_latency_predictors: need >= 2 prefill-only and decode-only steps after "
            f"{warmup} warm-up steps, got {len(pre)} and {len(dec)}"
        )
    ap, bp = np.polyfit(pre["num_scheduled_tokens"].to_numpy(float), pre["duration_s"], 1)
    ad, bd = np.polyfit(dec["num_decode"].to_numpy(float), dec["duration_s"], 1)
    return LatencyPredictors(float(ap), float(bp), float(ad), float(bd))


_FIT_CACHE: dict[tuple, LatencyPredictors] = {}


def default_predictors(cost_model: Any, config: EngineConfig) -> LatencyPredictors:
    """Predictors fitted on first use for an engine, cached per (cost model, config).

    Runs ``vllm-sp`` on a calibration workload (30 relQueries over all four tables at 1 rQ/s,
    seed 0, the engine's ``max_model_len`` rule taken as 2048 for OPT-sized budgets) with the
    engine's own cost model and config, and fits it with :func:`fit_latency_predictors`.
    Scenario runs that want the authors' exact procedure (same model, dataset and rate) pass
    predictors fitted on that scenario instead (see ``leaderboards/relserve/reproduce.py``).
    """
    key = (getattr(cost_model, "name", repr(cost_model)), tuple(sorted(config.to_dict().items())))
    if key not in _FIT_CACHE:
        from llmsched_gym.workloads.relquery import relquery_jobs

        mml = min(8192, config.max_num_batched_tokens)
        # On a KV cache smaller than the longest calibration request, the requests are capped
        # at what the cache holds (on larger ones the workload is unchanged).
        kv_tokens = (config.num_gpu_blocks - 1) * config.block_size
        try:
            try:
                jobs = relquery_jobs("all", 30, 1.0, seed=0, max_model_len=mml)
                res = calibration_steps(jobs, config, cost_model)
            except LLMSchedError:
                if kv_tokens >= mml:
                    raise
                jobs = relquery_jobs("all", 30, 1.0, seed=0, max_model_len=kv_tokens)
                res = calibration_steps(jobs, config, cost_model)
            _FIT_CACHE[key] = fit_latency_predictors(res)
        except LLMSchedError as exc:
            raise ConfigError(
                "relserve fits its latency predictors (Eq. 9) on an internal calibration run "
                "(30 relQueries of its own, ids rq*, under vllm-sp on this engine); that run "
                f"failed, so none of these requests is yours: {exc}. Give the engine more KV "
                "blocks (num_gpu_blocks) or a larger max_num_batched_tokens, or pass predictors "
                "fitted on your workload (RelServePolicy(predictors=...))"
            ) from None
    return _FIT_CACHE[key]


def calibration_steps(jobs: Any, config: EngineConfig, cost_model: Any) -> Any:
    """Step records (a ``steps`` DataFrame) of ``vllm-sp`` running ``jobs`` on one engine.

    What ``simulate(jobs, config, VllmSPPolicy(), cost_model, record_steps=True).steps`` gives
    for an ``EngineConfig`` and a cost model object: the jobs' requests are checked against
    ``max_model_len`` (a job cannot lose a request), then run to the end with fast-forward.
    """
    from llmsched_gym.metrics.records import steps_frame
    from llmsched_gym.metrics.table import step_table
    from llmsched_gym.workloads.stats import flatten_requests

    if config.max_model_len is not None:
        config.check_request_lengths(flatten_requests(jobs), "a job of the workload")
    engine = Engine(config, VllmSPPolicy(), cost_model, record_steps=True)
    engine.add_jobs(jobs)
    engine.run()
    return steps_frame(step_table(engine.step_columns()))
