"""Field checks shared by the trace readers: every error names the location, field and value."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from llmsched_gym.errors import TraceError, show

__all__ = ["MAX_INT", "FieldChecker", "is_int", "is_real", "show"]

MAX_INT = 2**31 - 1
"""Largest token count, length or size a trace or engine setting may hold.

The compiled core keeps these in C integers; bounding them here makes a value such as ``10**30`` the
same clear error with and without the compiled core (no context is near 2**31 tokens).
"""


def is_int(value: Any) -> bool:
    """True for a JSON integer (``bool`` is an ``int`` subclass in Python but not an int here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for a JSON number (int or float, not bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class FieldChecker:
    """Reads and checks the fields of one decoded trace line, naming ``where`` in every error."""

    __slots__ = ("record", "where")

    def __init__(self, record: Mapping[str, Any], where: str) -> None:
        self.record = record
        self.where = where

    def fail(self, field: str, expectation: str, value: Any) -> TraceError:
        """Builds the error for ``field`` holding ``value`` instead of ``expectation``."""
        return TraceError(f"{self.where}: field {field!r} must be {expectation}, got {show(value)}")

    def required(self, field: str) -> Any:
        """Returns a required field's value; a missing field or JSON null is an error."""
        value = self.record.get(field)
        if value is None:
            state = "is null" if field in self.record else "is missing"
            raise TraceError(f"{self.where}: required field {field!r} {state}")
        return value

    def int_at_least(self, field: str, minimum: int, value: Any) -> int:
        """Checks that ``value`` is an int in ``[minimum, MAX_INT]``."""
        if not is_int(value) or value < minimum:
            raise self.fail(field, f"an int >= {minimum}", value)
        if value > MAX_INT:
            raise self.fail(field, f"an int <= {MAX_INT:,} (2**31 - 1)", value)
        return value

    def finite_float(
        self,
        field: str,
        value: Any,
        *,
        minimum: float | None = None,
        strictly_positive: bool = False,
    ) -> float:
        """Checks that ``value`` is a finite number (optionally >= minimum or > 0)."""
        if strictly_positive:
            expectation = "a finite number > 0"
        elif minimum is not None:
            expectation = f"a finite number >= {minimum:g}"
        else:
            expectation = "a finite number"
        if not is_real(value) or not math.isfinite(value):
            raise self.fail(field, expectation, value)
        if (strictly_positive and value <= 0) or (minimum is not None and value < minimum):
            raise self.fail(field, expectation, value)
        return float(value)

    def int_list(self, field: str, value: Any, *, minimum: int | None) -> tuple[int, ...]:
        """Checks a list of ints (each >= ``minimum`` when given) and returns it as a tuple."""
        expectation = "a list of ints" + (f" >= {minimum}" if minimum is not None else "")
        if not isinstance(value, list):
            raise self.fail(field, expectation, value)
        for index, item in enumerate(value):
            if not is_int(item) or (minimum is not None and item < minimum):
                raise TraceError(
                    f"{self.where}: field {field!r} must be {expectation}, "
                    f"got {show(item)} at index {index}"
                )
        return tuple(value)

    def optional_str(self, field: str) -> str | None:
        """Returns an optional string field (None when absent or null)."""
        value = self.record.get(field)
        if value is not None and not isinstance(value, str):
            raise self.fail(field, "a string", value)
        return value
