"""A ``LiveRun`` seen through the simulator's ``Engine`` / ``Request`` attributes.

The environments' observation builder (``llmsched_gym.envs.observation.Observer``), reward
ledger (``llmsched_gym.envs.reward.RewardLedger``), ``render`` and ``PolicyAgent`` read an engine
and its requests through a handful of attributes. ``LiveInstance`` presents a live run with those
attributes, read from vLLM's scheduler and the run's own records after every step, so the same
code builds observations and rewards on both backends. Nothing here imports vLLM: it only reads
objects a ``LiveRun`` already holds.

Mapping (simulator name: live source):

* ``now``: ``LiveRun.now`` (the run's clock: measured step times, idle jumps to arrivals);
* ``running``: vLLM's running queue, in its order (admission order);
* ``waiting``: vLLM's waiting requests in the order ``waiting_key`` gives (the environment sets
  it to the scenario's queue discipline);
* ``finished``: finished requests in finish order; ``num_steps``: executed steps;
* ``waiting_tokens`` / ``running_tokens``: sum of ``num_tokens`` over waiting requests / of
  ``num_tokens - num_computed_tokens`` over running ones (the simulator's counters);
* ``kv.pool.usage()``: ``LiveRun.kv_cache_usage``; ``kv.hits`` / ``kv.queries``: the run's
  prefix-cache counters (hit tokens / prompt tokens at first admissions);
* ``ctx.lookup(req)``: vLLM's own prefix-cache lookup (``KVCacheManager.get_computed_blocks``,
  read-only) for a waiting request; ``ctx.true_output_len(req)``: the tokens the request will
  generate (``ignore_eos``: its trace output length);
* per request (``LiveRequest``): status, token counts and ``num_computed_tokens`` from vLLM's
  ``Request``; cached tokens at first admission, preemptions, first-token and finish times from
  the run's records.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from llmsched_gym.core.request import RequestSpec, RequestStatus

__all__ = ["LiveInstance", "LiveRequest"]

_STATUS = {
    "pending": RequestStatus.WAITING,
    "waiting": RequestStatus.WAITING,
    "running": RequestStatus.RUNNING,
    "preempted": RequestStatus.PREEMPTED,
    "finished": RequestStatus.FINISHED,
}


class LiveRequest:
    """One request of a live run with the simulator ``Request``'s read-only attributes.

    ``max_tokens`` is the trace's ``max_tokens`` (what a scheduler may know), not the number of
    tokens vLLM was asked for (``min(output_len, max_tokens)``: the true output length, which only
    ``LiveInstance.ctx.true_output_len`` reveals).
    """

    __slots__ = ("_run", "_state", "spec", "request_id", "seq", "arrival_time", "priority",
                 "max_tokens", "num_prompt_tokens", "preempt_stamp")  # fmt: skip

    def __init__(self, run: Any, state: Any) -> None:
        spec: RequestSpec = state.spec
        self._run = run
        self._state = state
        self.spec = spec
        self.request_id = spec.request_id
        self.seq = state.seq
        self.arrival_time = spec.arrival_time
        self.priority = spec.priority
        self.max_tokens = spec.max_tokens
        self.num_prompt_tokens = spec.prompt_len
        self.preempt_stamp = -1
        """Index of this request's latest preemption in the run (-1: never preempted)."""

    def _vllm(self) -> Any:
        return self._run.engine.scheduler.requests.get(self.request_id)

    @property
    def status(self) -> RequestStatus:
        """Waiting, running, preempted (waiting again) or finished."""
        return _STATUS[self._state.status]

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens."""
        r = self._vllm()
        if r is not None:
            return r.num_tokens
        return self.num_prompt_tokens + len(self._state.token_times)

    @property
    def num_computed_tokens(self) -> int:
        """Tokens whose KV is computed (0 after a preemption)."""
        r = self._vllm()
        if r is not None:
            return r.num_computed_tokens
        st = self._state
        return self.num_prompt_tokens + len(st.token_times) - 1 if st.token_times else 0

    @property
    def num_output_tokens(self) -> int:
        """Generated tokens so far."""
        r = self._vllm()
        if r is not None:
            return len(r.output_token_ids)
        return len(self._state.token_times)

    @property
    def num_preemptions(self) -> int:
        """Times vLLM preempted the request."""
        return self._state.preemptions

    @property
    def num_cached_tokens(self) -> int:
        """Prefix-hit tokens at the first admission (-1 until admitted)."""
        return self._state.cached

    @property
    def first_token_time(self) -> float | None:
        """Clock at the first output token (None before it)."""
        times = self._state.token_times
        return times[0] if times else None

    @property
    def last_token_time(self) -> float | None:
        """Clock at the latest output token (None before the first)."""
        times = self._state.token_times
        return times[-1] if times else None

    @property
    def finish_time(self) -> float | None:
        """Clock at the finish (None until finished)."""
        f = self._state.finish
        return None if math.isnan(f) else f

    @property
    def is_prefill_chunk(self) -> bool:
        """Whether more than one token remains to compute."""
        return self.num_tokens - self.num_computed_tokens > 1

    def __repr__(self) -> str:
        return (
            f"LiveRequest({self.request_id!r}, status={self.status.name}, "
            f"computed={self.num_computed_tokens}/{self.num_tokens}, "
            f"output={self.num_output_tokens})"
        )


class _Pool:
    def __init__(self, run: Any) -> None:
        self._run = run

    def usage(self) -> float:
        return self._run.kv_cache_usage


class _KV:
    """``Engine.kv``'s counters: prefix-cache hit and queried tokens, and the block pool."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self.pool = _Pool(run)

    @property
    def hits(self) -> int:
        return self._run.prefix_cache_hits

    @property
    def queries(self) -> int:
        return self._run.prefix_cache_queries


class _Ctx:
    """The two ``StepContext`` reads the observation builder makes."""

    def __init__(self, run: Any) -> None:
        self._run = run

    def lookup(self, req: LiveRequest) -> tuple[None, int]:
        """(None, tokens a prefix-cache lookup would hit now) for a waiting request."""
        r = req._vllm()
        if r is None:
            return None, 0
        manager = self._run.engine.scheduler.kv_cache_manager
        return None, int(manager.get_computed_blocks(r)[1])

    def true_output_len(self, req: LiveRequest) -> int:
        """Tokens the request generates in all (``ignore_eos``: its trace output length)."""
        return req._state.max_tokens


class LiveInstance:
    """A ``LiveRun`` presented as the simulator's ``Engine`` (the attributes the environments read).

    ``step()`` runs one engine step, tells ``finish_listeners`` which requests finished (with the
    clock at the step's end, as the simulator does) and hands vLLM the arrivals that are due, so
    that between steps ``waiting`` is exactly what the next step schedules.
    """

    def __init__(
        self,
        run: Any,
        policy: Any = None,
        waiting_key: Callable[[LiveRequest], Any] | None = None,
    ) -> None:
        self.run = run
        self.policy = policy
        self.config = run.engine.config.engine
        self.jobs = None
        self.kv = _KV(run)
        self.ctx = _Ctx(run)
        self.finish_listeners: list[Callable[[list[LiveRequest], float], None]] = []
        self.finished: list[LiveRequest] = []
        self.waiting_key = waiting_key or (lambda r: (r.priority, r.arrival_time, r.request_id))
        self._views: dict[str, LiveRequest] = {}
        self._num_preemptions = 0
        self._cache: dict[str, list[LiveRequest]] = {}

    # -- requests --------------------------------------------------------------------------------
    def view(self, request_id: str) -> LiveRequest:
        """The ``LiveRequest`` of one request of the run."""
        v = self._views.get(request_id)
        if v is None:
            v = self._views[request_id] = LiveRequest(self.run, self.run._states[request_id])
        return v

    @property
    def now(self) -> float:
        """The run's clock."""
        return self.run.now

    @property
    def num_steps(self) -> int:
        """Executed engine steps."""
        return len(self.run.steps)

    @property
    def running(self) -> list[LiveRequest]:
        """vLLM's running queue, in its order (admission order)."""
        out = self._cache.get("running")
        if out is None:
            out = self._cache["running"] = [
                self.view(r.request_id) for r in self.run.engine.scheduler.running
            ]
        return out

    @property
    def waiting(self) -> list[LiveRequest]:
        """vLLM's waiting requests, sorted by ``waiting_key``."""
        out = self._cache.get("waiting")
        if out is None:
            sched = self.run.engine.scheduler
            reqs = list(sched.waiting) + list(getattr(sched, "kv_holding_waiting", ()))
            out = sorted((self.view(r.request_id) for r in reqs), key=self.waiting_key)
            self._cache["waiting"] = out
        return out

    @property
    def waiting_tokens(self) -> int:
        """Sum of ``num_tokens`` over waiting requests."""
        return sum(r.num_tokens for r in self.waiting)

    @property
    def running_tokens(self) -> int:
        """Tokens left to compute over running requests."""
        return sum(r.num_tokens - r.num_computed_tokens for r in self.running)

    @property
    def num_free_blocks(self) -> int:
        """Free KV blocks (evictable cached ones included)."""
        return self.run.num_free_blocks

    def next_event_time(self) -> float:
        """When the run next acts: now if it has work, else its next arrival (inf: drained)."""
        return self.run.next_event_time()

    @property
    def has_work(self) -> bool:
        """Whether vLLM holds unfinished requests."""
        return bool(self.run._unfinished())

    # -- stepping --------------------------------------------------------------------------------
    def _invalidate(self) -> None:
        self._cache.clear()

    def admit_arrivals(self) -> int:
        """Hand vLLM the requests that have arrived by now."""
        n = self.run.admit_arrivals()
        if n:
            self._invalidate()
        return n

    def wait_for_arrival(self) -> bool:
        """Idle: jump (or sleep) to the next arrival and admit it; False when none is left."""
        ok = self.run.wait_for_arrival()
        self._invalidate()
        return ok

    def step(self) -> Any:
        """One engine step (``LiveRun.step``), then finishes reported and due arrivals admitted."""
        rec = self.run.step()
        self._invalidate()
        if rec is None:
            return None
        for rid in rec.preempted:
            self.view(rid).preempt_stamp = self._num_preemptions
            self._num_preemptions += 1
        if rec.finished:
            done = [self.view(rid) for rid in rec.finished]
            self.finished.extend(done)
            for listener in self.finish_listeners:
                listener(done, self.run.now)
        self.admit_arrivals()
        return rec
