"""Reads of hidden truth in this process, counted so that a harness decides oracle status.

A policy may read a request's true output length (``StepContext.true_output_len``) or copy the
run to play out futures (``counterfactual.fork``, which sees future arrivals and output lengths)
only as an oracle. The gateways call ``note``; the leaderboard harness wraps each run in
``watching`` and marks the row oracle when anything was read, whatever the policy declares.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

__all__ = ["note", "watching"]

_READS: Counter[str] = Counter()


def note(what: str) -> None:
    """Count one read of hidden truth (``what``: e.g. ``"true output length"``, ``"fork"``)."""
    _READS[what] += 1


@contextlib.contextmanager
def watching() -> Iterator[Counter[str]]:
    """The reads made inside the block, by kind (filled when the block exits, errors too)."""
    before = Counter(_READS)
    seen: Counter[str] = Counter()
    try:
        yield seen
    finally:
        seen.update(_READS - before)
