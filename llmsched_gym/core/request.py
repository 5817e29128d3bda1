"""Shared request vocabulary: what a trace says about a request (``RequestSpec``).

``RequestSpec`` is immutable and mirrors the trace contract in DESIGN.md. The engine wraps each spec
in its own mutable ``Request`` (``llmsched_gym.core.engine``); policies read that state through a
read-only view.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import cython


class RequestStatus(enum.IntEnum):
    """Lifecycle of a request inside one engine (vLLM's names)."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    FINISHED_ABORTED = 4
    """Cancelled by its client (``RequestSpec.cancel_time``) before it finished."""


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as the trace contract describes it.

    Exactly one of ``prompt_token_ids`` and (``prompt_len`` without token ids) describes the prompt;
    ``prompt_len`` is always set (``len(prompt_token_ids)`` when ids are given). A multi-turn
    trace's turn is resolved (``workloads.multiturn.resolve_turns``) before it becomes a spec of
    the engine: its ``prompt_token_ids`` then hold the whole history.
    """

    request_id: str
    """Unique id (the trace's ``request_id``)."""
    arrival_time: float
    """Arrival time in seconds from the start of the trace (>= 0)."""
    prompt_len: int
    """Number of prompt tokens (>= 1)."""
    output_len: int
    """Number of tokens the request really generates (>= 1); hidden from non-oracle policies."""
    max_tokens: int
    """The user's generation limit, visible to every policy (defaults to ``output_len``)."""
    prompt_token_ids: tuple[int, ...] | None = None
    """Prompt token ids, when the trace gives them (prefix sharing then follows the ids)."""
    block_hashes: tuple[int, ...] | None = None
    """Mooncake-style prefix hashes, one per ``hash_block_size`` prompt tokens (length traces)."""
    hash_block_size: int = 512
    """Tokens covered by one entry of ``block_hashes`` (Mooncake uses 512)."""
    priority: int = 0
    """Lower is served first, as in vLLM's priority policy."""
    weight: float = 1.0
    """Client weight (ProServe-style gains); not used by the engine."""
    slo_ttft_s: float | None = None
    """Time-to-first-token SLO in seconds."""
    slo_tpot_s: float | None = None
    """Time-per-output-token SLO in seconds."""
    deadline_s: float | None = None
    """Absolute deadline in seconds (same clock as ``arrival_time``)."""
    job_id: str | None = None
    """Job (relQuery, workflow) this request belongs to."""
    stage: str | None = None
    """Stage of the job that released this request."""
    client_id: str | None = None
    """Client that sent the request."""
    cancel_time: float | None = None
    """When the client cancels the request (disconnect, timeout), in seconds on the clock of
    ``arrival_time`` (>= it); None: never. The engine aborts it, as vLLM's engine core does
    (``Scheduler.finish_requests(..., FINISHED_ABORTED)``), before the first step starting at
    or after this time, unless it finished by then."""
    parent_request_id: str | None = None
    """The earlier turn this request continues (multi-turn traces): its prompt is the parent's
    prompt, then the parent's generated tokens, then this turn's tokens. A record of where the
    prompt came from; the engine reads only token ids."""
    output_token_ids: tuple[int, ...] | None = None
    """Ids of the tokens this request generates, when the workload fixes them (a parent of a
    multi-turn trace: a later turn's prompt holds them; at least ``min(output_len, max_tokens)``
    ids). Only with ``prompt_token_ids``. The prefix cache then keys the request's blocks full of
    prompt and generated tokens by content, as vLLM hashes every full block of a sequence, so a
    later request whose prompt holds the answer hits them; without them generated tokens are
    unique to their request."""


class Request:
    """A request's live state inside one engine (vLLM's ``Request``, trimmed to scheduling).

    Policies read these attributes and must not write them: the engine owns every counter.
    ``num_tokens`` is prompt plus generated tokens; ``num_computed_tokens`` catches up with it
    under the token budget (there is no prefill or decode phase, as in vLLM V1).

    The true output length lives in ``_output_len`` and is read by the engine only; policies
    that need it are oracles and ask ``StepContext.true_output_len`` (which checks the flag).
    """

    __slots__ = (
        "spec",
        "request_id",
        "seq",
        "arrival_time",
        "priority",
        "max_tokens",
        "num_prompt_tokens",
        "num_tokens",
        "num_output_tokens",
        "num_computed_tokens",
        "status",
        "num_preemptions",
        "blocks",
        "num_cached_blocks",
        "_keys",
        "_num_shareable_blocks",
        "_unique_entries",
        "_output_len",
        "first_scheduled_time",
        "first_token_time",
        "finish_time",
        "last_token_time",
        "num_cached_tokens",
        "num_computed_total",
        "scheduled_in_step",
        "num_external_tokens",
        "refill_tokens",
        "num_output_placeholders",
    )

    def __init__(self, spec: RequestSpec, seq: int, block_size: int) -> None:
        self.spec = spec
        self.request_id = spec.request_id
        self.seq = seq
        """Arrival sequence number: the engine's only tie-breaker besides ids."""
        self.arrival_time = spec.arrival_time
        self.priority = spec.priority
        self.max_tokens = spec.max_tokens
        self.num_prompt_tokens = spec.prompt_len
        self.num_tokens = spec.prompt_len
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.num_preemptions = 0
        self.blocks: list[int] = []
        """KV block ids in sequence order."""
        self.num_cached_blocks = 0
        """Leading blocks already registered in the prefix cache."""
        self._keys: list = []
        self._num_shareable_blocks = _num_shareable_blocks(spec, block_size)
        self._unique_entries: list[int | list[int]] = []
        """Per block index past the shareable prefix: packed (stamp, block) cache entries."""
        self._output_len = min(spec.output_len, spec.max_tokens)
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.last_token_time: float | None = None
        self.num_cached_tokens = -1
        """Prefix-hit tokens at the first admission (-1 until admitted)."""
        self.num_computed_total = 0
        """Every token the model computed for this request, refills included."""
        self.scheduled_in_step = -1
        self.num_external_tokens = 0
        """Prompt tokens whose KV arrived from another instance (PD hand-off; 0 otherwise)."""
        self.refill_tokens = -1
        """``num_tokens`` when last preempted (-1: never): equal while its refill runs."""
        self.num_output_placeholders = 0
        """Async scheduling only (vLLM's field): tokens in flight whose ids are not known yet."""

    @property
    def is_prefill_chunk(self) -> bool:
        """Whether more than one token remains to compute (prompt, chunk or refill)."""
        return self.num_tokens - self.num_computed_tokens > 1

    @property
    def in_prefill_phase(self) -> bool:
        """Whether the request has not sampled since its (re)admission (prompt or refill phase).

        True while its prompt, or its refill after a preemption, is still being computed, even
        when one token is left. vLLM V1 has no phases (a one-token item is a decode to its
        kernels, and the engine's step features count it so); cost models that price by phase,
        as Vidur does (InferMax's §3.2 model), read this (``phase_items``).
        """
        return self.num_output_tokens == 0 or self.num_tokens == self.refill_tokens

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens}, "
            f"output={self.num_output_tokens})"
        )

    def content_keys(self, n: int, block_size: int) -> list:
        """Prefix-cache keys of the first ``n`` blocks (n <= ``num_shareable_blocks``), kept.

        Only blocks of known content have a content key, chained over the prefix as vLLM's
        block hash is: blocks wholly inside a prompt given by token ids or Mooncake hashes, and,
        for a request whose generated ids are fixed (``RequestSpec.output_token_ids``), every
        block of prompt and generated tokens. Any other block holding generated tokens, or
        prompt tokens of a length-only trace, is unique to this request (such generated tokens
        are unique per request in the simulator, so this matches vLLM's chain hash exactly);
        those blocks are cached by stamp, not by key.
        """
        keys = self._keys
        if len(keys) < n:
            spec = self.spec
            parent = keys[-1] if keys else 0
            for j in range(len(keys), n):
                parent = _content_key(spec, j, block_size, parent)
                keys.append(parent)
        return keys

    @property
    def num_shareable_blocks(self) -> int:
        """Leading full prompt blocks whose content other requests may share."""
        return self._num_shareable_blocks


def _num_shareable_blocks(spec: RequestSpec, block_size: int) -> int:
    if spec.prompt_token_ids is not None:
        out = spec.output_token_ids
        if out is not None:  # generated ids fixed: every full block of the sequence has a key
            return (spec.prompt_len + min(len(out), spec.output_len)) // block_size
        return spec.prompt_len // block_size
    if spec.block_hashes:
        return min(spec.prompt_len, len(spec.block_hashes) * spec.hash_block_size) // block_size
    return 0


def _content_key(spec: RequestSpec, j: int, block_size: int, parent):
    end = (j + 1) * block_size
    ids = spec.prompt_token_ids
    if ids is not None:
        p = spec.prompt_len
        # Deterministic across processes: hashes of ints and tuples of ints are not salted.
        if end <= p:
            return hash((parent, ids[end - block_size : end]))
        # A block reaching into the generated tokens (``output_token_ids`` given): the same
        # tuple of ids as a later prompt holding them, so the same key.
        start = end - block_size
        out = spec.output_token_ids
        block = out[start - p : end - p] if start >= p else ids[start:] + out[: end - p]
        return hash((parent, block))
    # Mooncake hash ids identify the whole prefix up to their block; the id covering the block's
    # last token plus the block's end position names its content.
    return ("h", spec.block_hashes[(end - 1) // spec.hash_block_size], end)


@cython.locals(i=cython.long, items=list)
def remove_identical(items: list, x: object) -> None:
    """``items.remove(x)`` by identity, which is ``remove`` for requests (they have no ``__eq__``).

    Compiled, a pointer comparison per element instead of a rich comparison before the match.
    """
    for i in range(len(items)):
        if items[i] is x:
            del items[i]
            return
    raise ValueError("remove_identical(items, x): x not in items")
