"""What an engine reports about its steps: the schedule log, step records and listeners.

Every way to watch an engine is filled at the same points (a stepped step, each step of a
fast-forwarded stretch, an async batch's output) and reads the same whether steps were stepped
or fast-forwarded:

* the schedule log (``Engine(schedule_log=...)``): one JSON line per step, the format the
  differential test compares with vLLM (``step_line``, ``write_decode_lines``);
* step records (``Engine(record_steps=True)``): per-step columns named by ``StepColumn``
  (``new_step_records``, ``record_step``, ``record_decode_steps``; ``Engine.step_columns``);
* listeners, callables on the engine: ``Engine.finish_listeners`` get (finished requests, their
  finish time) after those free their blocks; ``Engine.token_listeners`` get (requests that
  each delivered one output token, its delivery time) after every step, once per step of a
  fast-forwarded stretch too (then with the engine's running list: read it, do not keep it).
  TDG's exact token timeline (``metrics/tdg.py``) is a token listener.
  ``Engine.batch_listeners`` get (the step's ``StepContext``, its end, the requests it
  finishes) after each step the policy built, before those finishers free their blocks: what
  was admitted, resumed, preempted and scheduled. A fast-forwarded stretch builds no batch
  and calls none: it only decodes the running requests (its finishes reach the finish
  listeners, its steps the records). The schedule timeline (``core/timeline.py``) is one.
"""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, Any

import cython

from llmsched_gym.metrics.columns import StepColumn

if TYPE_CHECKING:
    from llmsched_gym.core.context import StepContext

STEP_FIELDS = tuple(c.value for c in StepColumn if c is not StepColumn.KV_CACHE_USAGE)
"""Raw per-step columns the engine records; ``kv_cache_usage`` derives from num_free_blocks."""
STEP_DTYPES = {
    k: "float64" if k in (StepColumn.TIME_S.value, StepColumn.DURATION_S.value) else "int64"
    for k in STEP_FIELDS
}
"""The numpy dtype of each raw step column."""


def step_line(
    step: int,
    time: float,
    ctx: StepContext,
    finished: list[str],
    num_free: int,
    num_running: int,
    num_waiting: int,
) -> dict[str, Any]:
    """The schedule-log line of the batch built on ``ctx`` (``finished``: ids it finished)."""
    return batch_line(
        step,
        time,
        {r.request_id: n for r, n in ctx.scheduled.items()},
        {r.request_id: h for r, h in ctx.new},
        {r.request_id: h for r, h in ctx.resumed},
        [r.request_id for r in ctx.preempted],
        finished,
        num_free,
        num_running,
        num_waiting,
    )


def batch_line(
    step: int,
    time: float,
    scheduled: dict[str, int],
    new: dict[str, int],
    resumed: dict[str, int],
    preempted: list[str],
    finished: list[str],
    num_free: int,
    num_running: int,
    num_waiting: int,
) -> dict[str, Any]:
    """A schedule-log line from its fields (ids), in the log's key order."""
    return {
        "step": step,
        "time": time,
        "scheduled": scheduled,
        "new": new,
        "resumed": resumed,
        "preempted": preempted,
        "finished": finished,
        "num_free_blocks": num_free,
        "num_running": num_running,
        "num_waiting": num_waiting,
    }


def write_line(log: IO[str], line: dict[str, Any]) -> None:
    """Write one schedule-log line."""
    log.write(json.dumps(line) + "\n")


@cython.locals(base=cython.long, n=cython.long, count=cython.long, nf=cython.long, j=cython.long)
def write_decode_lines(
    log: IO[str],
    base: int,
    starts: list[float],
    free_after: list[int],
    ids: list[str],
    num_waiting: int,
    count: int,
    finished: list[str],
) -> None:
    """The lines of ``count`` decode steps from step ``base``: the running ``ids`` one token each.

    ``finished`` (ids) leave at the last of them. Byte-identical to ``step_line`` through
    ``write_line`` for the same steps, without building the dicts.
    """
    write = log.write
    scheduled = json.dumps(dict.fromkeys(ids, 1))
    n = len(ids)
    nf = len(finished)
    for j in range(count):
        last = j == count - 1
        write(
            f'{{"step": {base + j}, "time": {json.dumps(starts[j])}, '
            f'"scheduled": {scheduled}, "new": {{}}, "resumed": {{}}, "preempted": [], '
            f'"finished": {json.dumps(finished) if last else "[]"}, '
            f'"num_free_blocks": {free_after[j]}, '
            f'"num_running": {n - nf if last else n}, "num_waiting": {num_waiting}}}\n'
        )


def new_step_records() -> dict[str, list]:
    """Empty per-step columns (``STEP_FIELDS``).

    Lists: appending to one is several times cheaper than to a typed ``array`` (which parses
    each value), and ``Engine.step_columns`` reads them with ``np.fromiter`` of their dtype
    (``STEP_DTYPES``).
    """
    return {k: [] for k in STEP_FIELDS}


def record_step(
    records: dict[str, list],
    step: int,
    time: float,
    duration: float,
    num_scheduled_tokens: int,
    num_prefill: int,
    num_decode: int,
    num_new: int,
    num_resumed: int,
    num_preempted: int,
    num_finished: int,
    num_running: int,
    num_waiting: int,
    num_free_blocks: int,
) -> None:
    """Append one step's record (arguments in ``STEP_FIELDS`` order)."""
    records["step"].append(step)
    records["time_s"].append(time)
    records["duration_s"].append(duration)
    records["num_scheduled_tokens"].append(num_scheduled_tokens)
    records["num_prefill"].append(num_prefill)
    records["num_decode"].append(num_decode)
    records["num_new"].append(num_new)
    records["num_resumed"].append(num_resumed)
    records["num_preempted"].append(num_preempted)
    records["num_finished"].append(num_finished)
    records["num_running"].append(num_running)
    records["num_waiting"].append(num_waiting)
    records["num_free_blocks"].append(num_free_blocks)


@cython.locals(base=cython.long, n=cython.long, count=cython.long, num_finished=cython.long)
def record_decode_steps(
    records: dict[str, list],
    base: int,
    starts: list[float],
    durations: list[float],
    free_after: list[int],
    n: int,
    num_waiting: int,
    count: int,
    num_finished: int,
) -> None:
    """Append the records of ``count`` decode steps of ``n`` requests from step ``base``.

    ``num_finished`` of them finish at the last step.
    """
    records["step"].extend(range(base, base + count))
    records["time_s"].extend(starts[:count])
    records["duration_s"].extend(durations[:count])
    records["num_scheduled_tokens"].extend([n] * count)
    records["num_prefill"].extend([0] * count)
    records["num_decode"].extend([n] * count)
    for key in ("num_new", "num_resumed", "num_preempted"):
        records[key].extend([0] * count)
    records["num_finished"].extend([0] * (count - 1) + [num_finished])
    records["num_running"].extend([n] * (count - 1) + [n - num_finished])
    records["num_waiting"].extend([num_waiting] * count)
    records["num_free_blocks"].extend(free_after[:count])
