"""Multi-turn conversations: later turns whose prompts hold the earlier turns' answers.

vLLM hashes every full block of a sequence, generated tokens included, so the next turn of a
chat, whose prompt is the conversation so far, hits the blocks of the previous turn's prompt
*and answer* while they are cached. The simulator reproduces this when the generated tokens
have ids (``RequestSpec.output_token_ids``); this module gives them ids and builds the turns:

* ``token_ids``: deterministic ids, a function of (request id, seed, position) only, drawn from
  ``[RESERVED_IDS, vocab_size)`` (default ``GENERATED_VOCAB_SIZE``: inside every common model's
  vocabulary, as real tokens are). Generated ids and the prompt ids synthesised for length-only
  turns come from different streams (``domain``).
* ``resolve_turns``: a trace's turns (``parent_request_id``) become ordinary specs: a parent
  gets ``output_token_ids`` (its ``output_len`` generated ids) and the prompt ids it lacked; a
  turn's prompt becomes parent prompt + parent answer + its own tokens. ``load_trace`` calls it.
* ``mooncake_sessions``: conversations of the shipped Mooncake conversation trace (turn
  structure recovered from its prefix hash ids), as jobs whose next turn is sent after the
  previous answer (``scenarios`` kind ``multiturn``).

A turn in the trace contract (``workloads.trace``): ``parent_request_id`` names the turn it
continues, and its prompt is given either as ``prompt_token_ids`` listing **only the new turn's
tokens** (appended after the history; may be empty) or as ``prompt_len``, the **total** prompt
length vLLM sees (history plus new turn; its new tokens then get deterministic ids). Either way
the resolved spec's ``prompt_len`` is the total and ``prompt_token_ids`` the whole prompt. A
parent or turn given by length only, or by Mooncake ``block_hashes``, gets deterministic prompt
ids (from its hashes when it has them, so prefixes equal by hash stay equal) and loses its
hashes: it then shares blocks with other conversation requests but not with requests still
described by hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError

__all__ = [
    "GENERATED_VOCAB_SIZE",
    "MAX_CONVERSATION_LEN",
    "RESERVED_IDS",
    "mooncake_parents",
    "mooncake_sessions",
    "resolve_turns",
    "splitmix64",
    "token_ids",
]

RESERVED_IDS = 16
"""Low ids (BOS, EOS, padding in real vocabularies) are never synthesised."""
GENERATED_VOCAB_SIZE = 32_000
"""Synthesised ids lie below this: Llama-2's vocabulary, the smallest of the common models."""

MAX_CONVERSATION_LEN = 2**24
"""Most tokens (prompt plus output) of one request of a conversation: 16,777,216.

A request alone is a length until the engine refuses one that cannot fit its KV cache, before
anything is allocated; a conversation's ids are built when the trace is read, about 60 bytes a
token while they are made (8 once made), so a turn of 2**31 - 1 tokens would ask for over 100
GiB before any engine saw it. ``resolve_turns`` checks every length against this first. It is
above every context vLLM serves (Llama 4 Scout's 10M tokens) and costs about 1 GiB to build.
"""

_MASK = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64 (golden-ratio increment, then its finaliser): a well-spread 64-bit function.

    The one home of the mixing function of every synthesised id (here and the live backend's
    ``backends.vllm.tokens``).
    """
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _mix_array(x: np.ndarray) -> np.ndarray:
    """``splitmix64`` over a uint64 array (numpy's unsigned arithmetic wraps modulo 2**64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _stream(name: str, seed: int, domain: str) -> int:
    """The 64-bit base of one id stream: BLAKE2b of ``domain``, ``seed`` and ``name``."""
    digest = hashlib.blake2b(f"{domain}\0{seed}\0{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@lru_cache(maxsize=4)
def _vocabulary(vocab_size: int) -> tuple[int, ...]:
    """One int object per id, so long tuples of ids share them (8 bytes per token)."""
    return tuple(range(vocab_size))


def _to_ids(values: np.ndarray, vocab_size: int) -> tuple[int, ...]:
    """Map 64-bit values to ids in ``[RESERVED_IDS, vocab_size)``, as one tuple."""
    span = np.uint64(vocab_size - RESERVED_IDS)
    ids = (values % span).astype(np.int64) + RESERVED_IDS
    return tuple(map(_vocabulary(vocab_size).__getitem__, ids.tolist()))


def _check_vocab(vocab_size: int) -> None:
    if not isinstance(vocab_size, int) or vocab_size <= RESERVED_IDS:
        raise ValueError(f"vocab_size must be an int > {RESERVED_IDS}, got {vocab_size!r}")


def token_ids(
    request_id: str,
    start: int,
    stop: int,
    *,
    seed: int = 0,
    domain: str = "output",
    vocab_size: int = GENERATED_VOCAB_SIZE,
) -> tuple[int, ...]:
    """Deterministic token ids of ``request_id`` at positions ``start .. stop - 1``.

    Token ``p`` is ``RESERVED_IDS + splitmix64(base ^ p) % (vocab_size - RESERVED_IDS)`` with
    ``base`` the 8-byte little-endian BLAKE2b digest of ``domain``, ``seed`` and ``request_id``
    joined by NUL characters (``_stream``): the same ids in every process and Python version.
    ``domain="output"`` gives a request's generated tokens (``p`` counts generated tokens from
    0); ``domain="prompt"`` the prompt tokens of a length-only request (``p`` is the position in
    the prompt).
    """
    _check_vocab(vocab_size)
    if stop <= start:
        return ()
    base = np.uint64(_stream(request_id, seed, domain))
    return _to_ids(_mix_array(np.arange(start, stop, dtype=np.uint64) ^ base), vocab_size)


def _hash_prompt_ids(spec: RequestSpec, start: int, seed: int, vocab_size: int) -> tuple[int, ...]:
    """Prompt ids ``start ..`` of a request given by Mooncake hashes (and length).

    A position covered by a hash id takes its token from (hash id, position), so requests with
    equal leading hash ids get equal leading tokens; positions past the hashes come from the
    request's own ``prompt`` stream.
    """
    hbs = spec.hash_block_size
    hashes = spec.block_hashes or ()
    covered = min(spec.prompt_len, len(hashes) * hbs)
    out: list[tuple[int, ...]] = []
    if start < covered:
        positions = np.arange(start, covered, dtype=np.uint64)
        bases = np.array(
            [_stream(str(h), seed, "hash") for h in hashes[start // hbs : -(-covered // hbs)]],
            dtype=np.uint64,
        )
        block = (positions // np.uint64(hbs)) - np.uint64(start // hbs)
        out.append(_to_ids(_mix_array(positions ^ bases[block.astype(np.int64)]), vocab_size))
    first_own = max(start, covered)
    out.append(
        token_ids(
            spec.request_id,
            first_own,
            spec.prompt_len,
            seed=seed,
            domain="prompt",
            vocab_size=vocab_size,
        )
    )
    return out[0] + out[1] if len(out) == 2 else out[-1]


def _own_prompt_ids(spec: RequestSpec, seed: int, vocab_size: int) -> tuple[int, ...]:
    """The whole prompt of a request that starts no conversation's history: ids, made if needed."""
    if spec.prompt_token_ids is not None:
        return spec.prompt_token_ids
    if spec.block_hashes:
        return _hash_prompt_ids(spec, 0, seed, vocab_size)
    return token_ids(
        spec.request_id, 0, spec.prompt_len, seed=seed, domain="prompt", vocab_size=vocab_size
    )


def _history_order(
    specs: Sequence[RequestSpec], by_id: Mapping[str, RequestSpec], where: Mapping[str, str]
) -> list[str]:
    """Every request id, each parent before its turns; errors name the request and the problem."""
    for spec in specs:
        pid = spec.parent_request_id
        if pid is None:
            continue
        at = where.get(spec.request_id, f"request {spec.request_id!r}")
        parent = by_id.get(pid)
        if parent is None:
            raise TraceError(
                f"{at}: field 'parent_request_id' names {pid!r}, which is not a request of the "
                "trace (a turn continues an earlier request of the same trace)"
            )
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the chain being walked, 2: placed in the order
    for spec in specs:
        chain: list[str] = []
        rid: str | None = spec.request_id
        while rid is not None and rid not in state:
            state[rid] = 1
            chain.append(rid)
            rid = by_id[rid].parent_request_id
        if rid is not None and state[rid] == 1:  # came back to the chain being walked
            cycle = [*chain[chain.index(rid) :], rid]
            at = where.get(rid, f"request {rid!r}")
            raise TraceError(
                f"{at}: field 'parent_request_id' makes a cycle: {' -> '.join(map(repr, cycle))} "
                "(each arrow points at the turn continued); a conversation must start somewhere"
            )
        for placed in reversed(chain):
            state[placed] = 2
            order.append(placed)
    return order


def _check_lengths(
    order: Sequence[str],
    members: set[str],
    by_id: Mapping[str, RequestSpec],
    where: Mapping[str, str],
) -> None:
    """Refuse, before any id is built, a conversation request that would be too long to build.

    Every member's resolved prompt (history plus new tokens) plus its output must stay within
    ``MAX_CONVERSATION_LEN``; lengths are added up in history order, parents first.
    """
    prompt: dict[str, int] = {}
    for rid in order:
        if rid not in members:
            continue
        spec = by_id[rid]
        at = where.get(rid, f"request {rid!r}")
        pid = spec.parent_request_id
        if pid is None:
            prompt[rid] = spec.prompt_len
        else:
            parent = by_id[pid]
            history = prompt[pid] + parent.output_len
            given = spec.prompt_token_ids is not None
            prompt[rid] = history + spec.prompt_len if given else max(spec.prompt_len, history)
        total = prompt[rid] + spec.output_len
        if total > MAX_CONVERSATION_LEN:
            what = "its history plus new prompt" if pid is not None else "its prompt"
            raise TraceError(
                f"{at}: request {rid!r} of a conversation is too long: {what} "
                f"({prompt[rid]:,} tokens) plus its output_len ({spec.output_len:,}) = "
                f"{total:,} tokens, above MAX_CONVERSATION_LEN = {MAX_CONVERSATION_LEN:,} "
                "(a conversation's token ids are built when the trace is read); shorten it"
            )


def resolve_turns(
    specs: Sequence[RequestSpec],
    *,
    seed: int = 0,
    vocab_size: int = GENERATED_VOCAB_SIZE,
    where: Mapping[str, str] | None = None,
    reuse_answers: bool = True,
) -> list[RequestSpec]:
    """Expand the turns of a trace (``parent_request_id``) into ordinary specs, in input order.

    A turn's spec, as ``request_from_dict`` reads it, holds only its new tokens
    (``prompt_token_ids``, possibly empty) or its total ``prompt_len``. Here every parent gets
    ``output_token_ids`` (``token_ids(parent, 0, output_len, seed=seed)``) and, when it has none,
    prompt ids; every turn's ``prompt_token_ids`` becomes parent prompt + parent answer + new
    tokens. Requests outside conversations are returned unchanged.

    Args:
        specs: The trace's requests (ids unique).
        seed: Seed of every synthesised id (the workload's seed; 0 for trace files).
        vocab_size: Synthesised ids lie in ``[RESERVED_IDS, vocab_size)``.
        where: Where each request was read (``"trace.jsonl:7"``), for error messages.
        reuse_answers: False gives each turn its own copy of the parent's answer (ids no other
            request has, as if the answer had differed): the history's prompt blocks are still
            shared, the answer's are not. For measuring what reusing answers gains.

    Returns:
        The resolved specs, one per input spec, in the same order.

    A replay is open-loop: a turn's prompt is what the trace says its client sent, whatever the
    schedule does to the parent. Its history holds the parent's ``output_len`` answer ids even
    when the parent has not generated them all when the turn arrives (it is still decoding, or
    its ``cancel_time`` aborts it first): the turn then hits only the parent blocks computed and
    cached by then and computes the rest as prompt, as vLLM would given the same prompt
    (differential-tested, cancelled parents included). A trace recorded from a service, where a
    cancelled request returns its partial output, gives such a parent the ``output_len`` its
    client received, so the turn holds exactly that; a turn released only once its parent
    finishes is a job stage (``mooncake_sessions``), where ``cancel_time`` is refused.

    Raises:
        TraceError: A parent that is not in ``specs``, a parent arriving after its turn, a
            cycle of parents, a turn whose ``prompt_len`` is shorter than its parent's prompt
            plus output, a turn given by ``block_hashes``, or a member longer than
            ``MAX_CONVERSATION_LEN`` tokens (prompt plus output; checked before any id is
            built); the message names the request.
    """
    _check_vocab(vocab_size)
    where = where or {}
    if not any(s.parent_request_id is not None for s in specs):
        return list(specs)
    by_id = {s.request_id: s for s in specs}
    order = _history_order(specs, by_id, where)
    parents = {s.parent_request_id for s in specs if s.parent_request_id is not None}
    members = parents | {s.request_id for s in specs if s.parent_request_id is not None}
    _check_lengths(order, members, by_id, where)
    resolved: dict[str, RequestSpec] = {}
    for rid in order:
        if rid not in members:
            continue  # outside every conversation: unchanged
        spec = by_id[rid]
        at = where.get(rid, f"request {rid!r}")
        pid = spec.parent_request_id
        if pid is None:
            ids = _own_prompt_ids(spec, seed, vocab_size)
        else:
            parent = resolved[pid]
            if parent.arrival_time > spec.arrival_time:
                raise TraceError(
                    f"{at}: request {rid!r} arrives at {spec.arrival_time!r} s, before its parent "
                    f"{pid!r} (arrival_time {parent.arrival_time!r} s); a turn cannot be sent "
                    "before the turn it continues"
                )
            if spec.block_hashes is not None:
                raise TraceError(
                    f"{at}: request {rid!r} continues {pid!r} and gives 'block_hashes'; a turn's "
                    "history is its parent's tokens: give its new tokens as 'prompt_token_ids' "
                    "or its total length as 'prompt_len'"
                )
            answer = parent.output_token_ids
            if answer is None or not reuse_answers:  # (reuse_answers=False: no output ids)
                answer = token_ids(
                    f"{pid}\0{rid}",
                    0,
                    parent.output_len,
                    seed=seed,
                    domain="answer-copy",
                    vocab_size=vocab_size,
                )
            history = parent.prompt_token_ids + answer
            if spec.prompt_token_ids is not None:  # the new turn's own tokens
                ids = history + spec.prompt_token_ids
            else:  # prompt_len is the total
                if spec.prompt_len < len(history):
                    raise TraceError(
                        f"{at}: request {rid!r} has prompt_len={spec.prompt_len}, shorter than "
                        f"its history: parent {pid!r}'s prompt ({parent.prompt_len} tokens) plus "
                        f"its output ({parent.output_len} tokens) = {len(history)}; a turn's "
                        "prompt_len counts the whole conversation so far plus the new turn"
                    )
                ids = history + token_ids(
                    rid,
                    len(history),
                    spec.prompt_len,
                    seed=seed,
                    domain="prompt",
                    vocab_size=vocab_size,
                )
        output = (
            token_ids(rid, 0, spec.output_len, seed=seed, vocab_size=vocab_size)
            if rid in parents and reuse_answers
            else None
        )
        resolved[rid] = dataclasses.replace(
            spec,
            prompt_len=len(ids),
            prompt_token_ids=ids,
            block_hashes=None,
            output_token_ids=output,
        )
    return [resolved.get(s.request_id, s) for s in specs]


# -- the Mooncake conversation trace as sessions ----------------------------------------------
MOONCAKE_BLOCK = 512
"""Tokens per Mooncake hash id."""
MIN_SHARED_BLOCKS = 2
"""A turn must repeat at least this many of its parent's full hash blocks: every request of the
conversation trace starts with the same block (a system prompt), which alone says nothing."""


def mooncake_parents(specs: Sequence[RequestSpec]) -> dict[str, str]:
    """Turn structure of a Mooncake trace: request id -> the earlier request it continues.

    Request B continues A when A is the latest earlier request whose full 512-token hash blocks
    (at least ``MIN_SHARED_BLOCKS``) are the longest such prefix of B's hash ids, and B's prompt
    holds A's prompt and answer (``B.prompt_len >= A.prompt_len + A.output_len``). A prompt that
    repeats a request's blocks but is shorter than its prompt plus answer starts a conversation
    of its own (its hash prefix is still shared).
    """
    latest: dict[tuple[int, ...], RequestSpec] = {}
    parents: dict[str, str] = {}
    for spec in specs:
        hashes = spec.block_hashes or ()
        for k in range(len(hashes), MIN_SHARED_BLOCKS - 1, -1):
            candidate = latest.get(hashes[:k])
            if candidate is not None:
                if spec.prompt_len >= candidate.prompt_len + candidate.output_len:
                    parents[spec.request_id] = candidate.request_id
                break
        full = min(len(hashes), spec.prompt_len // MOONCAKE_BLOCK)
        if full >= MIN_SHARED_BLOCKS:
            latest[tuple(hashes[:full])] = spec
    return parents


def mooncake_sessions(
    specs: Sequence[RequestSpec],
    *,
    seed: int = 0,
    rate_per_s: float | None = None,
    think_time_scale: float = 1.0,
    reuse_answers: bool = True,
    vocab_size: int = GENERATED_VOCAB_SIZE,
) -> list[Job]:
    """Conversations of a Mooncake trace as jobs: each next turn is sent after the answer.

    ``specs`` is (a prefix of) the Mooncake conversation trace, block hashes of 512 tokens
    (``load_trace("mooncake-conversation")``). Turn structure comes from ``mooncake_parents``;
    every prompt becomes token ids (``resolve_turns``; ids from the hashes, so Mooncake's
    shared prefixes stay shared, and each turn's prompt holds its parent's prompt and
    generated ids). One job per conversation (kind ``"session"``), arriving with its first
    turn; a turn is a stage released when its parent finishes, plus a think time: the trace's
    gap between the two turns' arrivals (which includes the answer's own time in Mooncake's
    service) times ``think_time_scale``.

    Args:
        specs: The trace's requests with their arrival times.
        seed: Seed of the synthesised ids.
        rate_per_s: Rescales the conversations' start times (their first turns' arrivals) to
            this mean rate (conversations per second); think times keep the trace's gaps.
            None keeps the trace's times.
        think_time_scale: Multiplies every think time (>= 0).
        reuse_answers: See ``resolve_turns`` (False: answers are not shared, for comparison).
        vocab_size: Synthesised ids lie below this.

    Returns:
        The jobs, ordered by arrival (ties by first request).
    """
    if not (isinstance(think_time_scale, int | float) and math.isfinite(think_time_scale)):
        raise ValueError(f"think_time_scale must be a finite number, got {think_time_scale!r}")
    if think_time_scale < 0:
        raise ValueError(f"think_time_scale must be >= 0, got {think_time_scale!r}")
    if rate_per_s is not None and not (
        isinstance(rate_per_s, int | float) and math.isfinite(rate_per_s) and rate_per_s > 0
    ):
        raise ValueError(f"rate_per_s must be a finite number > 0 or None, got {rate_per_s!r}")
    parents = mooncake_parents(specs)
    linked = [dataclasses.replace(s, parent_request_id=parents.get(s.request_id)) for s in specs]
    # A turn's spec from the trace gives its total prompt_len (what Mooncake logged).
    linked = [
        dataclasses.replace(s, block_hashes=None) if s.parent_request_id is not None else s
        for s in linked
    ]
    by_id = {s.request_id: s for s in linked}
    _check_lengths([s.request_id for s in linked], set(by_id), by_id, {})  # every one gets ids
    resolved = resolve_turns(linked, seed=seed, vocab_size=vocab_size, reuse_answers=reuse_answers)
    # Requests outside conversations get ids from their hashes too, so that every prefix equal
    # by hash (the system prompt every request starts with) stays shared.
    resolved = [
        s
        if s.prompt_token_ids is not None
        else dataclasses.replace(
            s, prompt_token_ids=_own_prompt_ids(s, seed, vocab_size), block_hashes=None
        )
        for s in resolved
    ]
    by_id = {s.request_id: s for s in resolved}
    root_of: dict[str, str] = {}
    members: dict[str, list[RequestSpec]] = {}
    for spec in resolved:  # arrival order: a parent comes before its turns
        pid = spec.parent_request_id
        root = spec.request_id if pid is None else root_of[pid]
        root_of[spec.request_id] = root
        members.setdefault(root, []).append(spec)
    starts = [by_id[root].arrival_time for root in members]
    stretch = 1.0
    if rate_per_s is not None and len(starts) > 1 and starts[-1] > starts[0]:
        stretch = (len(starts) - 1) / (starts[-1] - starts[0]) / rate_per_s
    jobs: list[Job] = []
    for root, turns in members.items():
        stages = []
        for spec in turns:
            pid = spec.parent_request_id
            if pid is None:
                offset, after = 0.0, ()
            else:
                offset = (spec.arrival_time - by_id[pid].arrival_time) * think_time_scale
                after = (pid,)
            stages.append(
                Stage(spec.request_id, (dataclasses.replace(spec, arrival_time=offset),), after)
            )
        start = by_id[root].arrival_time * stretch
        jobs.append(Job(f"session-{root}", start, tuple(stages), kind="session"))
    return jobs
