"""The registry of workload kinds: what a scenario's ``workload.kind`` may name.

A kind declares its parameters (``Param``: types, default, range check) and how to build the
requests; ``llmsched_gym.scenarios.kinds`` registers the shipped ones in ``WORKLOAD_KINDS``, and
``llmsched_gym.scenarios.spec`` validates a scenario's workload against them. This module sits
below both, so that neither imports the other back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llmsched_gym.core.job import Job
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError, show

__all__ = ["REQUIRED", "WORKLOAD_KINDS", "Param", "WorkloadKind", "positive"]

REQUIRED = object()
"""Default of a parameter a scenario must set."""


@dataclass(frozen=True)
class Param:
    """One workload parameter: accepted types, default, and a range check with its wording."""

    types: tuple[type, ...]
    default: Any = REQUIRED
    check: Callable[[Any], bool] | None = None
    rule: str = ""
    doc: str = ""

    def validate(self, where: str, value: Any) -> Any:
        """The value, coerced (int to float where floats are wanted), or a ConfigError."""
        if value is None and self.default is None:
            return None
        ok_type = isinstance(value, self.types) and not (
            isinstance(value, bool) and bool not in self.types
        )
        if not ok_type:
            names = " or ".join(t.__name__ for t in self.types)
            raise ConfigError(f"{where} must be {names}, got {show(value)}")
        if float in self.types and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where} must be finite, got {show(value)}")
        if self.check is not None and not self.check(value):
            raise ConfigError(f"{where} must be {self.rule}, got {show(value)}")
        return value


def positive(types: tuple[type, ...], default: Any = REQUIRED, doc: str = "") -> Param:
    """A parameter that must be > 0."""
    return Param(types, default, lambda v: v > 0, "> 0", doc)


@dataclass(frozen=True)
class WorkloadKind:
    """A workload generator a scenario can name: its parameters and how to build it."""

    description: str
    params: Mapping[str, Param]
    build: Callable[[Mapping[str, Any], int, Any], list[RequestSpec | Job]]
    """``build(params, seed, cost_model)``: the requests and jobs."""
    check: Callable[[Mapping[str, Any]], str | None] | None = None
    """Cross-field check on validated parameters: a problem's wording, or None."""


WORKLOAD_KINDS: dict[str, WorkloadKind] = {}
"""Workload generators by ``workload.kind`` (filled by ``llmsched_gym.scenarios.kinds``)."""
