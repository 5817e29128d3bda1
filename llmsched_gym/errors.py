"""The project's small exception hierarchy (modelled on ``gymnasium.error``).

Every message names the offending field, the bad value, the limit and, where one exists, the fix.
"""

from __future__ import annotations


class LLMSchedError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(LLMSchedError, ValueError):
    """An engine, scenario or CLI setting is unknown, missing or out of range."""


class TraceError(LLMSchedError, ValueError):
    """A trace file or request is malformed; the message names file, line, field and value."""


class PolicyError(LLMSchedError, RuntimeError):
    """A scheduling policy asked the engine for something its budgets or state forbid."""


class CostModelError(LLMSchedError, ValueError):
    """A cost profile is unknown, malformed or cannot be evaluated."""
