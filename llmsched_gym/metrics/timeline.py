"""Schedule timelines as Chrome trace-event JSON (Perfetto, ``chrome://tracing``).

A timeline is built from what a recorder (``core/timeline.py``) kept of a run: each instance's
per-step records and each request's phases. ``trace_events`` turns them into the trace-event
format's JSON object form::

    {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}

Times are simulated: ``ts`` and ``dur`` are microseconds of simulated time since t = 0, rounded
to the nanosecond (both ends of a slice are rounded, so slices that nest in time nest in the
file). Each instance is one process (``pid`` = its index) holding:

* thread 0, ``steps``: one complete event (``ph: "X"``, ``cat: "step"``) per engine step, named
  by what it computed (``prefill``, ``decode``, ``mixed`` or ``empty``: nothing scheduled, a
  step that only preempted), with ``args`` step, batch_size, tokens, prefill_tokens,
  decode_tokens (the engine's split: a request scheduled one token counts as decode),
  step_time_ms, num_new, num_resumed, num_preempted, num_finished. A fast-forwarded decode
  stretch shows as the steps it holds, one slice each: the timeline of a run does not depend
  on ``fast_forward``;
* threads 1..N, ``requests 1``..``requests N``: a small pool of lanes. A request takes the
  lowest lane free at its arrival and keeps it until it ends, so N is the largest number of
  requests present at once, not the number of requests. On its lane a request is one slice
  (``cat: "request"``, named by its id, ``args`` with its tokens, preemptions, status, TTFT
  and end-to-end time) holding its phases, which tile it without gaps: ``waiting`` (arrival
  to admission), ``prefill`` (admission to the end of the step that sampled its next token;
  ``prefill (recompute)`` after a preemption), ``decode`` (to its finish or preemption) and
  ``preempted`` (preemption to re-admission); each prefill holds its chunks (``cat:
  "chunk"``, one per step that scheduled prompt tokens, ``args.tokens``). An aborted request
  ends with an instant event (``ph: "i"``, ``cat: "abort"``) at the abort;
* counters (``ph: "C"``): ``KV blocks`` (``used`` and ``free``, stacking to the usable
  blocks: during each step, and 0 used after a step that leaves nothing running) and
  ``requests`` (``running`` and ``waiting`` after each step), written when they change;
* metadata events (``ph: "M"``) naming the process and its threads and ordering them.

``check_trace`` validates a trace against this schema (tests, and anyone who builds one).
"""

from __future__ import annotations

import gzip
import heapq
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = [
    "PHASES",
    "InstanceTimeline",
    "RequestPhases",
    "check_trace",
    "trace_events",
    "write_trace",
]

PHASES = ("waiting", "prefill", "decode", "preempted")
"""The phase categories (``cat``) that tile a request's slice, arrival to end."""
STEP_ARGS = (
    "step", "batch_size", "tokens", "prefill_tokens", "decode_tokens", "step_time_ms",
    "num_new", "num_resumed", "num_preempted", "num_finished",
)  # fmt: skip
"""The ``args`` of every step slice."""
STATUSES = ("finished", "aborted", "unfinished")
"""A request's ``args.status``: unfinished when the timeline was taken before it ended."""

@dataclass
class RequestPhases:
    """One request's life on one instance: its phases and prefill chunks (seconds)."""

    request_id: str
    arrival: float
    end: float
    """Its finish, abort, or (unfinished) the time the timeline was taken."""
    status: str
    phases: list[tuple[str, float, float, dict[str, Any]]]
    """(category in ``PHASES``, start, end, args), in time order, tiling arrival..end."""
    chunks: list[tuple[float, float, int]]
    """(start, end, tokens) of every prefill chunk, in time order."""
    args: dict[str, Any] = field(default_factory=dict)
    """Its slice's ``args`` besides request_id, status and e2e_ms."""


@dataclass
class InstanceTimeline:
    """What one instance contributes: its name, step records and requests."""

    name: str
    steps: Mapping[str, Sequence[Any]]
    """Per-step columns (``StepColumn`` names; numpy arrays, as ``Engine.step_columns``, or
    lists of Python numbers)."""
    requests: list[RequestPhases]
    num_gpu_blocks: int
    """The engine's blocks; one is vLLM's null block, so ``num_gpu_blocks - 1`` are usable."""


def _us(t: float) -> float:
    """Seconds as microseconds, rounded to the nanosecond (``round`` to an int: fast)."""
    return round(t * 1e9) / 1e3


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded to the nanosecond (the ``*_ms`` args)."""
    return round(seconds * 1e9) / 1e6


def _slice(name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict) -> dict:
    a = round(start * 1e9)
    return {
        "name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": a / 1e3,
        "dur": max(round(end * 1e9) - a, 0) / 1e3, "args": args,
    }  # fmt: skip


def _meta(kind: str, pid: int, tid: int | None, args: dict) -> dict:
    event: dict[str, Any] = {"name": kind, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _step_name(num_prefill: int, num_decode: int) -> str:
    if num_prefill and num_decode:
        return "mixed"
    if num_prefill:
        return "prefill"
    return "decode" if num_decode else "empty"


def _step_events(pid: int, inst: InstanceTimeline) -> list[dict]:
    """The step slices and both counters of one instance, in time order."""
    cols = {k: v.tolist() if hasattr(v, "tolist") else list(v) for k, v in inst.steps.items()}
    n = len(cols["step"])
    usable = max(inst.num_gpu_blocks - 1, 1)
    slices: list[dict] = []
    counters: list[dict] = []
    last_kv: int | None = None
    last_queues: tuple[int, int] | None = None
    for i in range(n):
        start = cols["time_s"][i]
        duration = cols["duration_s"][i]
        end = start + duration
        num_prefill = cols["num_prefill"][i]
        num_decode = cols["num_decode"][i]
        tokens = cols["num_scheduled_tokens"][i]
        args = {
            "step": cols["step"][i], "batch_size": num_prefill + num_decode, "tokens": tokens,
            "prefill_tokens": tokens - num_decode, "decode_tokens": num_decode,
            "step_time_ms": ms(duration), "num_new": cols["num_new"][i],
            "num_resumed": cols["num_resumed"][i], "num_preempted": cols["num_preempted"][i],
            "num_finished": cols["num_finished"][i],
        }  # fmt: skip
        slices.append(_slice(_step_name(num_prefill, num_decode), "step", pid, 0, start, end, args))
        used = usable - cols["num_free_blocks"][i]
        if used != last_kv:
            counters.append(_counter("KV blocks", pid, start, used, usable - used))
            last_kv = used
        running, waiting = cols["num_running"][i], cols["num_waiting"][i]
        if (running, waiting) != last_queues:
            counters.append(
                {"name": "requests", "ph": "C", "pid": pid, "ts": _us(end),
                 "args": {"running": running, "waiting": waiting}}
            )  # fmt: skip
            last_queues = (running, waiting)
        if running == 0 and last_kv != 0:  # nothing holds blocks once nothing runs
            counters.append(_counter("KV blocks", pid, end, 0, usable))
            last_kv = 0
    return slices + counters


def _counter(name: str, pid: int, t: float, used: int, free: int) -> dict:
    return {"name": name, "ph": "C", "pid": pid, "ts": _us(t), "args": {"used": used, "free": free}}


def _lanes(requests: Sequence[RequestPhases]) -> list[int]:
    """The lane (1-based) of each request: the lowest one free at its arrival."""
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival)
    busy: list[tuple[float, int]] = []  # (end, lane)
    free: list[int] = []
    lanes = [0] * len(requests)
    count = 0
    for i in order:
        r = requests[i]
        while busy and busy[0][0] <= r.arrival:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            count += 1
            lane = count
        lanes[i] = lane
        heapq.heappush(busy, (r.end, lane))
    return lanes


def _request_events(pid: int, tid: int, r: RequestPhases) -> list[dict]:
    """A request's slice, its phases and chunks (parents first), and its abort marker."""
    e2e_ms = ms(r.end - r.arrival)
    args = {"request_id": r.request_id, "status": r.status, "e2e_ms": e2e_ms, **r.args}
    events = [_slice(r.request_id, "request", pid, tid, r.arrival, r.end, args)]
    chunks = r.chunks
    k = 0
    for cat, start, end, phase_args in r.phases:
        name = "prefill (recompute)" if cat == "prefill" and phase_args.get("recompute") else cat
        events.append(_slice(name, cat, pid, tid, start, end, phase_args))
        if cat != "prefill":
            continue
        while k < len(chunks) and chunks[k][1] <= end:  # this prefill's chunks
            c_start, c_end, tokens = chunks[k]
            events.append(_slice("chunk", "chunk", pid, tid, c_start, c_end, {"tokens": tokens}))
            k += 1
    if r.status == "aborted":
        events.append(
            {"name": "aborted", "cat": "abort", "ph": "i", "s": "t", "pid": pid, "tid": tid,
             "ts": _us(r.end)}
        )  # fmt: skip
    return events


def trace_events(
    instances: Sequence[InstanceTimeline], other_data: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The trace-event JSON object of ``instances`` (the module docstring draws it).

    ``other_data`` (JSON values) joins ``otherData`` beside the clock's description and each
    instance's name, blocks, steps, requests and lanes.
    """
    events: list[dict] = []
    described = []
    for pid, inst in enumerate(instances):
        lanes = _lanes(inst.requests)
        num_lanes = max(lanes, default=0)
        events.append(_meta("process_name", pid, None, {"name": inst.name}))
        events.append(_meta("process_sort_index", pid, None, {"sort_index": pid}))
        events.append(_meta("thread_name", pid, 0, {"name": "steps"}))
        events.append(_meta("thread_sort_index", pid, 0, {"sort_index": 0}))
        for lane in range(1, num_lanes + 1):
            events.append(_meta("thread_name", pid, lane, {"name": f"requests {lane}"}))
            events.append(_meta("thread_sort_index", pid, lane, {"sort_index": lane}))
        events.extend(_step_events(pid, inst))
        by_lane: dict[int, list[RequestPhases]] = {}
        for r, lane in zip(inst.requests, lanes, strict=True):
            by_lane.setdefault(lane, []).append(r)
        for lane in sorted(by_lane):
            for r in sorted(by_lane[lane], key=lambda x: x.arrival):
                events.extend(_request_events(pid, lane, r))
        described.append(
            {"pid": pid, "name": inst.name, "num_gpu_blocks": inst.num_gpu_blocks,
             "num_steps": len(inst.steps["step"]), "num_requests": len(inst.requests),
             "num_request_lanes": num_lanes}
        )  # fmt: skip
    other = {
        "source": "llmsched_gym",
        "clock": "simulated time: ts and dur are microseconds since t = 0",
        "instances": described,
        **(other_data or {}),
    }
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_trace(trace: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``trace`` as compact JSON (gzip-compressed when ``path`` ends in ``.gz``).

    Atomic: an existing file is replaced only once the new one is complete. Returns the path.
    """
    from llmsched_gym.metrics._atomic import atomic_output

    target = Path(path)
    data = json.dumps(trace, separators=(",", ":"), allow_nan=False).encode()
    with atomic_output(target) as tmp:
        if target.suffix == ".gz":
            with gzip.open(tmp, "wb", compresslevel=6) as f:
                f.write(data)
        else:
            tmp.write_bytes(data)
    return target


_NUMBER = (int, float)


def _is_number(v: Any) -> bool:
    return isinstance(v, _NUMBER) and not isinstance(v, bool) and math.isfinite(v)


def check_trace(trace: Any) -> None:
    """Raise a ``ConfigError`` naming the first event that breaks the timeline's schema.

    Checks the top-level keys; the fields each phase requires and their types (``X``: name,
    cat, pid, tid, ts, dur >= 0, args; ``i``: scope ``t``; ``C``: numeric args; ``M``: a known
    metadata name and its argument); that ``ts`` never decreases along a thread's slices nor
    along a counter; and that slices on a thread nest (none ends inside another).
    """
    if not isinstance(trace, Mapping):
        raise ConfigError(f"a trace is a JSON object, got {type(trace).__name__}")
    for key, kind in (("traceEvents", list), ("displayTimeUnit", str), ("otherData", dict)):
        if not isinstance(trace.get(key), kind):
            raise ConfigError(f"trace: {key!r} must be a {kind.__name__}")
    if trace["displayTimeUnit"] not in ("ms", "ns"):
        raise ConfigError("trace: displayTimeUnit must be 'ms' or 'ns'")
    open_slices: dict[tuple[int, int], list[float]] = {}  # ends of the enclosing slices
    last_ts: dict[tuple, float] = {}
    for i, e in enumerate(trace["traceEvents"]):
        where = f"traceEvents[{i}]"
        if not isinstance(e, Mapping):
            raise ConfigError(f"{where}: an event is an object, got {type(e).__name__}")
        ph = e.get("ph")
        _require(e, where, "name", str)
        _require(e, where, "pid", int)
        if ph == "M":
            _check_meta(e, where)
            continue
        if ph not in ("X", "C", "i"):
            raise ConfigError(f"{where}: phase {ph!r} is not one a timeline writes (X, C, i, M)")
        if not _is_number(e.get("ts")) or e["ts"] < 0:
            raise ConfigError(f"{where}: ts must be a finite number >= 0, got {e.get('ts')!r}")
        ts = float(e["ts"])
        if ph == "C":
            args = e.get("args")
            if not isinstance(args, Mapping) or not args or not all(
                _is_number(v) for v in args.values()
            ):
                raise ConfigError(f"{where}: a counter's args are series -> numbers, got {args!r}")
            track: tuple = ("C", e["pid"], e["name"])
        else:
            _require(e, where, "tid", int)
            _require(e, where, "cat", str)
            track = ("T", e["pid"], e["tid"])
        if ts < last_ts.get(track, 0.0):
            raise ConfigError(f"{where}: ts {ts} goes back in time on its track {track[1:]}")
        last_ts[track] = ts
        if ph == "i" and e.get("s") != "t":
            raise ConfigError(f"{where}: an instant event here has scope 't', got {e.get('s')!r}")
        if ph != "X":
            continue
        if not _is_number(e.get("dur")) or e["dur"] < 0:
            raise ConfigError(f"{where}: dur must be a finite number >= 0, got {e.get('dur')!r}")
        _require(e, where, "args", Mapping)
        end = round(ts + float(e["dur"]), 3)  # the resolution: 1 ns
        stack = open_slices.setdefault((e["pid"], e["tid"]), [])
        while stack and stack[-1] <= ts:
            stack.pop()
        if stack and end > stack[-1]:
            raise ConfigError(
                f"{where}: slice [{ts}, {end}] ends after the slice that encloses its start "
                f"(ending {stack[-1]}): slices on a thread must nest"
            )
        stack.append(end)


_META_ARGS = {
    "process_name": ("name", str),
    "thread_name": ("name", str),
    "process_sort_index": ("sort_index", int),
    "thread_sort_index": ("sort_index", int),
}


def _check_meta(e: Mapping[str, Any], where: str) -> None:
    spec = _META_ARGS.get(e["name"])
    if spec is None:
        raise ConfigError(f"{where}: unknown metadata event {e['name']!r}")
    key, kind = spec
    args = e.get("args")
    if not isinstance(args, Mapping) or not isinstance(args.get(key), kind):
        raise ConfigError(f"{where}: {e['name']} needs args.{key} ({kind.__name__})")
    if e["name"].startswith("thread"):
        _require(e, where, "tid", int)


def _require(e: Mapping[str, Any], where: str, key: str, kind: type) -> None:
    value = e.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(
            f"{where}: {key!r} must be {kind.__name__}, got {type(value).__name__} {value!r}"
        )
