"""Pausing Python's cyclic garbage collector around allocation-heavy loops."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector (reference counting still frees everything) inside the block.

    Loading traces, running the engine and building records allocate hundreds of thousands of
    objects without reference cycles; the collections those allocations trigger rescan every live
    request each time and cost 10-20% of a run. Nested use is fine.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
