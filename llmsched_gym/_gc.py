"""Pausing the cyclic garbage collector around allocation-heavy loops; returning free memory."""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector (reference counting still frees everything) inside the block.

    Loading traces, running the engine and building records allocate hundreds of thousands of
    objects without reference cycles; the collections those allocations trigger rescan every live
    request each time and cost 10-20% of a run. Nested use is fine, and a collector that was
    off before the block stays off after it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _libc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on other C libraries."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


_TRIM = _libc_trim()


def return_free_memory() -> None:
    """Hand the C heap's free pages back to the operating system (glibc; elsewhere a no-op).

    Arrays of a few MiB live in glibc's heap, not in their own mappings, and freeing them
    leaves holes that stay resident: after a long run drops its packed columns (``release``
    in ``cluster.records``) the memory would still count against the process until reused.
    """
    if _TRIM is not None:
        _TRIM(0)
