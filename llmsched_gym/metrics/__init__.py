"""Metrics: record column names, request/step/job frames, summaries, comparison tables, plots.

The column enums load without pandas (the engine uses them); everything else is imported on
first use, so ``import llmsched_gym.metrics`` stays cheap.

>>> from llmsched_gym.metrics import RequestColumn, requests_frame, summarize  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from llmsched_gym.metrics.columns import (
    DERIVED_REQUEST_COLUMNS,
    JobColumn,
    Metric,
    RequestColumn,
    StepColumn,
)

_LAZY = {
    "requests_frame": "records",
    "steps_frame": "records",
    "jobs_frame": "records",
    "slo_outcome": "slo",
    "request_slo_met": "slo",
    "latency_slo_met": "slo",
    "summarize": "summary",
    "compare": "summary",
    "weighted_percentile": "summary",
    "DEFAULT_COMPARE_METRICS": "summary",
    "write_frame": "io",
    "read_frame": "io",
    "FRAME_SUFFIXES": "io",
    "plot_comparison": "plots",
    "plot_kv_usage": "plots",
}

__all__ = [
    "DERIVED_REQUEST_COLUMNS",
    "JobColumn",
    "Metric",
    "RequestColumn",
    "StepColumn",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmsched_gym.metrics' has no attribute {name!r}")
    return getattr(importlib.import_module(f"llmsched_gym.metrics.{module}"), name)
