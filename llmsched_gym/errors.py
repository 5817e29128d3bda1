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


class SandboxError(LLMSchedError, RuntimeError):
    """A submission's code, running in its sandbox, broke a limit, died or answered wrongly."""


class CostModelError(LLMSchedError, ValueError):
    """A cost profile is unknown, malformed or cannot be evaluated."""


def show(value: object, limit: int = 60) -> str:
    """A ``repr`` of a bad value for an error message, cut to ``limit`` characters.

    Messages never render an unbounded value: a 10,000-element list (or an alias-expanded YAML
    value) would bury the field name and, at worst, take minutes to format.
    """
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        kind = type(value).__name__
        return f"<{kind} of {len(value):,} items>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
