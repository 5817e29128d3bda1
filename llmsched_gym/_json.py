"""JSON reading that refuses an object with a repeated key (``json`` keeps the last value)."""

from __future__ import annotations

import json
from typing import Any


class DuplicateKeyError(ValueError):
    """A JSON object repeats ``key``; the input is ambiguous."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {key[:60]!r} appears twice in a JSON object; keep one of them")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return record


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
"""One decoder for every call: ``json.loads`` with a hook builds a new one per call, a fifth of
the time of a short line (trace files have one object per line)."""


def loads(text: str) -> Any:
    """``json.loads`` that raises ``DuplicateKeyError`` for a repeated key in any object."""
    if type(text) is str and not text.startswith("\ufeff"):
        return _DECODER.decode(text)
    return json.loads(text, object_pairs_hook=_unique_keys)  # bytes, or json's BOM error
