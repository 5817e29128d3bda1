"""YAML reading with libyaml's C parser when PyYAML has it (much faster than pure Python)."""

from __future__ import annotations

from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` through the C loader when available: same documents, same types."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
