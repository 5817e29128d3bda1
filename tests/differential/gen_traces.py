"""Random traces and engine configs for the differential test against vLLM's scheduler.

``generate(seed)`` returns a trace and an engine config chosen so that, over a few dozen
seeds, vLLM's scheduler goes through every path the simulator must reproduce: chunked prefill,
preemption under both policies (including a request preempting itself), resumed requests that
hit the prefix cache, prefix hits across requests admitted in the same step,
``long_prefill_token_threshold`` capping, ``max_num_seqs`` and token-budget limits, and
head-of-line blocking of the waiting queue; and the large regimes: block sizes 1 to 64,
``max_num_seqs`` 1 and 256, prompts of thousands of tokens (``regime`` ``long``), traces of
1,000+ requests (``many``), request ids whose string order is not arrival order, and arrivals
exactly on a step start or one ulp either side of it; and client aborts (``cancel_time``) of
waiting, running and prefilling requests; and ``enable_chunked_prefill: false`` (about one trace
in six) and ``long_prefill_token_threshold_adaptive: true``.

Only ``random.Random(seed)`` is used, so a seed always gives the same files. Arrival times are
multiples of 1/8 s (1/32 s in ``many`` traces), which binary floating point represents exactly,
or one ulp away from one (``_ulp_shifted``): the oracle and the simulator add 1.0 s per step and
compare the clock with arrivals exactly.

``generate_multiturn(seed)`` makes multi-turn traces instead (``parent_request_id``: each turn's
prompt holds its parent's prompt and generated tokens), for the multi-turn differential test.

Command line::

    # writes D/trace.jsonl and D/engine_config.json (--multiturn: a multi-turn trace)
    python tests/differential/gen_traces.py --seed 7 --out-dir D
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VOCAB_SIZE = 5000
"""Prompt token ids are drawn from 1..VOCAB_SIZE; generated tokens lie far above."""

BLOCK_SIZES = (1, 4, 8, 16, 16, 32, 64)
"""Drawn uniformly (16, vLLM's GPU default, twice)."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _arrival_times(rng: random.Random, n: int) -> list[float]:
    """Non-decreasing arrival times with ties and bursts, some at 0, in multiples of 1/8 s."""
    times: list[float] = []
    t = 0.0
    num_at_zero = rng.randint(1, max(1, n // 4))
    burst_left = 0
    for i in range(n):
        if i < num_at_zero:
            times.append(0.0)
            continue
        if burst_left > 0:
            burst_left -= 1
            if rng.random() < 0.6:
                times.append(t)  # a tie inside the burst
                continue
            t += rng.choice((0.125, 0.25, 0.5))
        else:
            kind = rng.random()
            if kind < 0.15:
                burst_left = rng.randint(2, 8)
            if kind < 0.35:
                t += rng.choice((0.0, 0.125, 0.25, 0.375, 0.5, 0.75))
            elif kind < 0.8:
                t += rng.choice((1.0, 1.0, 2.0, 3.0, 1.5, 2.5))
            else:
                t += float(rng.randint(4, 25))  # an idle gap: the clock jumps
        times.append(t)
    return times


def _prompts(rng: random.Random, n: int, block_size: int) -> list[list[int]]:
    """Prompts made of a few shared prefixes (whole or cut anywhere) and random suffixes."""

    def tokens(k: int) -> list[int]:
        return [rng.randint(1, VOCAB_SIZE) for _ in range(k)]

    prefixes = [tokens(rng.randint(block_size, 6 * block_size)) for _ in range(rng.randint(1, 4))]
    prompts: list[list[int]] = []
    for _ in range(n):
        roll = rng.random()
        if prompts and roll < 0.08:
            prompts.append(list(rng.choice(prompts)))  # identical prompt: hit capped at len - 1
            continue
        if roll < 0.75:
            prefix = rng.choice(prefixes)
            if rng.random() < 0.3:
                prefix = prefix[: rng.randint(1, len(prefix))]  # a partial last block
            suffix = tokens(rng.choice((0, rng.randint(1, 8), rng.randint(1, 48))))
            prompt = prefix + suffix
        else:
            prompt = tokens(rng.randint(1, 96))
        prompts.append(prompt or tokens(1))
    return prompts


def _long_prompts(rng: random.Random, n: int) -> list[list[int]]:
    """Prompts of 1,000-6,000 tokens: long shared prefixes (system prompts, documents)."""

    def tokens(k: int) -> list[int]:
        return [rng.randint(1, VOCAB_SIZE) for _ in range(k)]

    prefixes = [tokens(rng.randint(500, 3000)) for _ in range(rng.randint(1, 3))]
    prompts = []
    for _ in range(n):
        if rng.random() < 0.7:
            prompts.append(rng.choice(prefixes) + tokens(rng.randint(0, 3000)))
        else:
            prompts.append(tokens(rng.randint(1000, 6000)))
    return prompts


def regime(seed: int) -> str:
    """The kind of trace seed ``seed`` makes (``REGIMES``), a pure function of the seed.

    Seeds 7 and 32 modulo 50 make ``many`` traces (four in 100 seeds, two in 40); of the
    others, one in five makes ``long`` prompts and the rest ``mixed`` traces.
    """
    if seed % 50 in (7, 32):
        return "many"
    return "long" if seed % 5 == 3 else "mixed"


REGIMES = ("mixed", "long", "many")
"""``mixed``: 10-60 requests, prompts up to a few hundred tokens; ``long``: 6-20 requests with
prompts of thousands of tokens and ``long_prefill_token_threshold`` always set; ``many``:
1,000-1,400 short requests (queues of hundreds, ``max_num_seqs`` up to 256)."""


def _request_ids(rng: random.Random, n: int) -> list[str]:
    """Unique ids in one of several styles whose string order differs from arrival order.

    vLLM breaks (priority, arrival_time) ties by comparing ids as strings, so ``"req-10"``
    goes before ``"req-9"``, ``"Z"`` before ``"a"`` and ASCII before ``"é"``.
    """
    style = rng.choice(("plain", "plain", "reversed", "mixed"))
    if style == "plain":
        return [f"req-{i}" for i in range(n)]  # not zero-padded
    if style == "reversed":
        return [f"r{n - i:05d}" for i in range(n)]  # later arrivals sort first
    alphabet = "AZaz09-_.é"
    ids: list[str] = []
    seen: set[str] = set()
    while len(ids) < n:
        candidate = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
        if candidate not in seen:
            seen.add(candidate)
            ids.append(candidate)
    return ids


def _ulp_shifted(rng: random.Random, times: list[float]) -> list[float]:
    """Move some arrivals one ulp before or after their value (then re-sort).

    Generated step starts lie on the same 1/8 s grid as unshifted arrivals, so the shifted
    ones arrive one ulp before or after a step start: vLLM admits a request when
    ``arrival_time <= clock``, exactly.
    """
    shifted = []
    for t in times:
        roll = rng.random()
        if t > 0 and roll < 0.3:
            t = math.nextafter(t, -math.inf)
        elif roll < 0.6:
            t = math.nextafter(t, math.inf)
        shifted.append(t)
    return sorted(shifted)


def _cancel_times(rng: random.Random, arrivals: list[float]) -> list[float | None]:
    """Client aborts for about a quarter of the requests: at arrival, soon or late after it.

    Offsets are multiples of 1/8 s (so aborts land on step starts too), sometimes one ulp
    later; a cancel time is never before its arrival.
    """
    cancels: list[float | None] = []
    for t in arrivals:
        if rng.random() >= 0.25:
            cancels.append(None)
            continue
        offset = rng.choice((0.0, rng.randint(1, 16) / 8, float(rng.randint(2, 40))))
        cancel = t + offset
        if rng.random() < 0.2:
            cancel = math.nextafter(cancel, math.inf)
        cancels.append(cancel)
    return cancels


def _max_num_seqs(rng: random.Random, kind: str) -> int:
    if kind == "many":
        return rng.choice((16, 64, 256, 256))
    roll = rng.random()
    if roll < 0.1:
        return 1
    if roll < 0.2:
        return 256
    return rng.randint(2, 16)


def generate(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Build one random trace and its engine config.

    Args:
        seed: Any int; the same seed always gives the same result. ``regime(seed)`` picks the
            kind of trace.

    Returns:
        ``(rows, engine_config)``: trace rows in the trace contract (``request_id``,
        ``arrival_time``, ``prompt_token_ids``, ``output_len``, ``priority``; ``cancel_time`` on
        some requests of some traces), non-decreasing in ``arrival_time``, and an engine
        config with exactly the contract's keys (plus ``enable_chunked_prefill: false`` or
        ``long_prefill_token_threshold_adaptive: true`` in some). Every request fits the KV
        cache on its own: ``cdiv(prompt_len + output_len, block_size) <= num_gpu_blocks - 1``
        (block 0 is vLLM's null block).
    """
    rng = random.Random(seed)
    kind = regime(seed)
    # Policy and prefix caching follow the seed so that both values of each occur in every
    # run of consecutive seeds, and independently of each other.
    scheduling_policy = ("fcfs", "priority")[seed % 2]
    enable_prefix_caching = (seed // 2) % 3 != 2
    if kind == "long":
        block_size = rng.choice((16, 32, 64))
        num_requests = rng.randint(6, 20)
        prompts = _long_prompts(rng, num_requests)
    else:
        block_size = rng.choice(BLOCK_SIZES)
        num_requests = rng.randint(1000, 1400) if kind == "many" else rng.randint(10, 60)
        prompts = _prompts(rng, num_requests, block_size)
    output_lens = [rng.randint(1, 40) for _ in range(num_requests)]
    arrivals = _arrival_times(rng, num_requests)
    if kind == "many":  # hundreds queue up: 1,000+ requests over a few hundred seconds
        arrivals = [t / 4 for t in arrivals]
    if rng.random() < 0.5:
        arrivals = _ulp_shifted(rng, arrivals)
    num_priorities = rng.choice((1, 2, 3, 4))
    ids = _request_ids(rng, num_requests)
    cancels = _cancel_times(rng, arrivals) if rng.random() < 0.4 else [None] * num_requests
    rows = [
        {
            "request_id": ids[i],
            "arrival_time": arrivals[i],
            "prompt_token_ids": prompts[i],
            "output_len": output_lens[i],
            "priority": rng.randrange(num_priorities),
        }
        for i in range(num_requests)
    ]
    for row, cancel in zip(rows, cancels, strict=True):
        if cancel is not None:
            row["cancel_time"] = cancel

    max_model_len = max(len(p) + o for p, o in zip(prompts, output_lens, strict=True))
    max_request_blocks = _cdiv(max_model_len, block_size)
    # Tight caches preempt often; the roomiest still preempts now and then under bursts.
    slack = rng.choice(
        (0, 1, 2, max_request_blocks // 2, max_request_blocks, 3 * max_request_blocks)
    )
    if kind == "many":
        slack = rng.choice((max_request_blocks, 8 * max_request_blocks, 64 * max_request_blocks))
    num_gpu_blocks = max_request_blocks + 1 + slack

    max_num_seqs = _max_num_seqs(rng, kind)
    if kind == "long":
        max_num_batched_tokens = rng.choice((rng.randint(64, 512), rng.randint(512, 8192)))
    else:
        max_num_batched_tokens = rng.choice(
            (rng.randint(16, 48), rng.randint(16, 96), rng.randint(32, 256))
        )
    max_num_batched_tokens = max(max_num_batched_tokens, max_num_seqs)  # vLLM requires it
    long_prefill_token_threshold = 0
    if kind == "long":
        long_prefill_token_threshold = rng.choice((rng.randint(1, 64), rng.randint(64, 2048)))
    elif rng.random() < 0.5:
        long_prefill_token_threshold = rng.randint(1, 64)
    long_prefill_token_threshold = min(long_prefill_token_threshold, max_model_len)

    # vLLM without chunked prefill admits a waiting request only whole (and requires
    # max_num_batched_tokens >= max_model_len): about one trace in six.
    chunked = rng.random() >= 1 / 6
    if not chunked:
        max_num_batched_tokens = max(max_num_batched_tokens, max_model_len)
    engine_config = {
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
        "enable_prefix_caching": enable_prefix_caching,
        "scheduling_policy": scheduling_policy,
        "long_prefill_token_threshold": long_prefill_token_threshold,
    }
    if not chunked:
        engine_config["enable_chunked_prefill"] = False
    # The adaptive floor (max_num_batched_tokens // requests) on about a third of the traces
    # that set a threshold.
    if long_prefill_token_threshold > 0 and rng.random() < 1 / 3:
        engine_config["long_prefill_token_threshold_adaptive"] = True
    return rows, engine_config


MULTITURN_BLOCK_SIZES = (1, 2, 4, 8, 16, 16, 32)
"""Block sizes of multi-turn traces: small ones (answers span several blocks) and 16 twice."""


def _session_gap(rng: random.Random) -> float:
    """Seconds between a turn and the next one, in multiples of 1/8 s.

    Often while the parent still runs (its answer partly cached), often after it finished,
    sometimes at once or much later (its blocks may be evicted by then).
    """
    roll = rng.random()
    if roll < 0.1:
        return 0.0
    if roll < 0.4:
        return rng.randint(1, 40) / 8
    if roll < 0.85:
        return float(rng.randint(5, 60))
    return float(rng.randint(60, 400))


def generate_multiturn(seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Build one random multi-turn trace (``parent_request_id``) and its engine config.

    Sessions of 2-5 turns (sometimes a branch: a turn continuing an earlier turn than the
    last, as a regenerated answer), plus a few single requests; roots share a few system
    prompts. A turn's row lists only its new tokens (0-48 of them, sometimes none); its prompt
    as vLLM sees it is parent prompt + parent answer + those. Prefix caching is always on;
    block sizes ``MULTITURN_BLOCK_SIZES``; caches from tight (preemptions, evictions of
    answers) to roomy; both policies; about a third of the traces cancel some requests
    (parents too: a turn then hits only what its parent computed); some have
    ``long_prefill_token_threshold`` or ``enable_chunked_prefill: false``. Arrivals are
    multiples of 1/8 s.

    Returns:
        ``(rows, engine_config)`` as ``generate`` returns them; rows in arrival order.
    """
    rng = random.Random(f"multiturn-{seed}")
    block_size = rng.choice(MULTITURN_BLOCK_SIZES)

    def tokens(k: int) -> list[int]:
        return [rng.randint(1, VOCAB_SIZE) for _ in range(k)]

    systems = [tokens(rng.randint(1, 3 * block_size + 5)) for _ in range(rng.randint(1, 3))]
    # (arrival, parent index or None, own tokens, output_len, total prompt length)
    entries: list[list[Any]] = []
    t = 0.0
    for _ in range(rng.randint(3, 10)):
        t += rng.choice((0.0, 0.125, 0.5, 1.0, 2.0, float(rng.randint(3, 20))))
        root = len(entries)
        prompt = rng.choice(systems) + tokens(rng.randint(1, 40))
        entries.append([t, None, prompt, rng.randint(1, 40), len(prompt)])
        session = [root]
        for _ in range(rng.randint(1, 4)):
            parent = session[-1] if rng.random() >= 0.15 else rng.choice(session)
            own = tokens(rng.choice((0, rng.randint(1, 8), rng.randint(1, 48))))
            p_entry = entries[parent]
            total = p_entry[4] + p_entry[3] + len(own)
            arrival = max(p_entry[0] + _session_gap(rng), entries[session[-1]][0])
            session.append(len(entries))
            entries.append([arrival, parent, own, rng.randint(1, 40), total])
    for _ in range(rng.randint(0, 6)):  # single requests, some sharing a system prompt
        prompt = rng.choice(systems) + tokens(rng.randint(1, 30))
        entries.append(
            [rng.randint(0, int(t * 8) + 8) / 8, None, prompt, rng.randint(1, 40), len(prompt)]
        )
    order = sorted(range(len(entries)), key=lambda i: entries[i][0])  # stable: parents first
    ids = _request_ids(rng, len(entries))
    cancels = (
        _cancel_times(rng, [entries[i][0] for i in order])
        if rng.random() < 1 / 3
        else [None] * len(entries)
    )
    num_priorities = rng.choice((1, 2, 3))
    rows = []
    for i, cancel in zip(order, cancels, strict=True):
        arrival, parent, own, output_len, _ = entries[i]
        row: dict[str, Any] = {
            "request_id": ids[i],
            "arrival_time": arrival,
            "prompt_token_ids": own,
            "output_len": output_len,
            "priority": rng.randrange(num_priorities),
        }
        if parent is not None:
            row["parent_request_id"] = ids[parent]
        if cancel is not None:
            row["cancel_time"] = cancel
        rows.append(row)

    max_model_len = max(e[4] + e[3] for e in entries)
    max_request_blocks = _cdiv(max_model_len, block_size)
    slack = rng.choice(
        (0, 2, max_request_blocks // 2, max_request_blocks, 4 * max_request_blocks,
         16 * max_request_blocks)
    )  # fmt: skip
    max_num_seqs = _max_num_seqs(rng, "mixed")
    max_num_batched_tokens = max(
        rng.choice((rng.randint(16, 64), rng.randint(32, 256))), max_num_seqs
    )
    threshold = rng.randint(1, 64) if rng.random() < 0.3 else 0
    chunked = rng.random() >= 1 / 6
    if not chunked:
        max_num_batched_tokens = max(max_num_batched_tokens, max_model_len)
    engine_config: dict[str, Any] = {
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "block_size": block_size,
        "num_gpu_blocks": max_request_blocks + 1 + slack,
        "enable_prefix_caching": True,
        "scheduling_policy": ("fcfs", "priority")[seed % 2],
        "long_prefill_token_threshold": min(threshold, max_model_len),
    }
    if not chunked:
        engine_config["enable_chunked_prefill"] = False
    return rows, engine_config


def write(seed: int, out_dir: Path, multiturn: bool = False) -> tuple[Path, Path]:
    """Generate seed ``seed`` into ``out_dir``.

    Args:
        seed: The seed.
        out_dir: Created if missing.
        multiturn: Write ``generate_multiturn(seed)`` instead of ``generate(seed)``.

    Returns:
        Paths of ``trace.jsonl`` and ``engine_config.json``.
    """
    rows, engine_config = (generate_multiturn if multiturn else generate)(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    trace_path = out_dir / "trace.jsonl"
    config_path = out_dir / "engine_config.json"
    trace_path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config_path.write_text(json.dumps(engine_config, indent=2) + "\n", encoding="utf-8")
    return trace_path, config_path


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(description="Write a random trace and engine config.")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument(
        "--multiturn", action="store_true", help="a multi-turn trace (generate_multiturn)"
    )
    args = parser.parse_args(argv)
    trace_path, config_path = write(args.seed, args.out_dir, args.multiturn)
    print(f"{trace_path}\n{config_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
