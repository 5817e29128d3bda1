"""Deterministic prompt token ids for the live engine, keeping a trace's prefix sharing.

vLLM needs token ids; most shipped traces give lengths only. Ids are synthesised so that what the
simulator treats as shared is shared in vLLM too, and nothing else is:

* a trace with ``prompt_token_ids``: used as they are (ids at or above the model's vocabulary are
  folded into it, which keeps equal prefixes equal);
* a trace with Mooncake ``block_hashes``: token ``p`` is a function of (hash of the block covering
  ``p``, ``p``), so requests sharing leading hash ids share those tokens exactly;
* otherwise: a stream seeded by the request id, unique to the request.

The same ids are handed to the simulator in validation runs (``with_token_ids``), so both backends
see the same prefix-cache hits.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.workloads.multiturn import RESERVED_IDS
from llmsched_gym.workloads.multiturn import splitmix64 as _mix

_MASK = (1 << 64) - 1


def _token(key: int, vocab_size: int) -> int:
    return RESERVED_IDS + _mix(key) % (vocab_size - RESERVED_IDS)


def prompt_token_ids(spec: RequestSpec, vocab_size: int, seed: int = 0) -> list[int]:
    """The prompt ids of ``spec`` for a model with ``vocab_size`` ids (see the module docstring)."""
    if vocab_size <= RESERVED_IDS:
        raise ValueError(f"vocab_size must exceed {RESERVED_IDS}, got {vocab_size}")
    if spec.prompt_token_ids is not None:
        return [t if t < vocab_size else t % vocab_size for t in spec.prompt_token_ids]
    own = _mix(zlib.crc32(spec.request_id.encode()) ^ (seed << 32))
    out: list[int] = []
    hashes = spec.block_hashes or ()
    hbs = spec.hash_block_size
    for p in range(spec.prompt_len):
        j = p // hbs
        if j < len(hashes):
            key = _mix(_mix(hashes[j] & _MASK) ^ p ^ (seed << 40))
        else:
            key = _mix(own ^ p)
        out.append(_token(key, vocab_size))
    return out


def with_token_ids(
    specs: Sequence[RequestSpec], vocab_size: int, seed: int = 0
) -> list[RequestSpec]:
    """Copies of ``specs`` whose prompts are the live engine's token ids (block hashes dropped)."""
    return [
        dataclasses.replace(
            s,
            prompt_token_ids=tuple(prompt_token_ids(s, vocab_size, seed)),
            block_hashes=None,
        )
        for s in specs
    ]
