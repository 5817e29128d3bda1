"""Record engines' schedules for a timeline (``metrics/timeline.py`` writes it as trace JSON).

A ``TimelineRecorder`` attached to an engine before its first step listens to it: its batch
listener (``Engine.batch_listeners``, policy-built steps only) sees admissions, resumptions,
preemptions and the prefill chunks of the requests still computing their prompt; its finish
listener sees every finish, fast-forwarded ones included; aborts are read from
``Engine.aborted``; the per-step slices and counters come from the engine's step records,
which attaching turns on. A fast-forwarded stretch runs only while every running request has one
token left to compute: it admits and preempts nobody, and the only phase change in it (a prompt
left with one token ends its prefill in the stretch's first step) is read back from the step
records (``resolve_stretch``). The recorder does nothing per step of a stretch, and a stepped
and a fast-forwarded run give the same timeline.

Cost: nothing when no recorder is attached (the engine tests one empty list per policy step).
Attached, a stepped step costs a look at each request it admitted, resumed, preempted or is
still prefilling, and a fast-forwarded stretch nothing but the step records.

>>> rec = TimelineRecorder()
>>> rec.attach(engine)  # doctest: +SKIP
>>> engine.run()  # doctest: +SKIP
>>> trace = rec.trace()  # {"traceEvents": [...], ...}  # doctest: +SKIP

Async scheduling (``EngineConfig.async_scheduling``) runs its own loop, which calls no batch
listener; attaching to such an engine raises a ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import Request
from llmsched_gym.core.steplog import new_step_records
from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.timeline import InstanceTimeline, RequestPhases, ms, trace_events

__all__ = ["TimelineRecorder"]


class _Life:
    """One request's phases so far; ``kind`` is the open one, begun at ``since``."""

    __slots__ = ("request_id", "arrival", "phases", "chunks", "kind", "since", "out", "tokens",
                 "num_chunks", "recompute")  # fmt: skip

    def __init__(self, req: Request) -> None:
        self.request_id = req.request_id
        self.arrival = req.arrival_time
        self.phases: list[tuple[str, float, float, dict[str, Any]]] = []
        self.chunks: list[tuple[float, float, int]] = []
        self.kind = "waiting"
        self.since = req.arrival_time
        self.out = 0
        """Output tokens when the open phase began (a decode phase's count)."""
        self.tokens = 0
        """Prompt tokens scheduled in the open prefill phase."""
        self.num_chunks = 0
        """Its chunks."""
        self.recompute = False

    def _args(self, out: int) -> dict[str, Any]:
        if self.kind == "prefill":
            return {"tokens": self.tokens, "chunks": self.num_chunks, "recompute": self.recompute}
        if self.kind == "decode":
            return {"tokens": out - self.out}
        return {}

    def switch(self, kind: str, at: float, out: int) -> None:
        """Close the open phase at ``at`` (a zero-length one is dropped) and open ``kind``."""
        if at > self.since:
            self.phases.append((self.kind, self.since, at, self._args(out)))
        if kind == "prefill":
            self.recompute = self.kind == "preempted"
            self.tokens = self.num_chunks = 0
        self.kind = kind
        self.since = at
        self.out = out

    def close(self, at: float, req: Request | None, status: str) -> RequestPhases:
        """The request's phases, ended at ``at`` (leaves this life as it is)."""
        phases = list(self.phases)
        out = req.num_output_tokens if req is not None else self.out
        if at > self.since:
            phases.append((self.kind, self.since, at, self._args(out)))
        return RequestPhases(
            self.request_id, self.arrival, at, status, phases, list(self.chunks),
            _request_args(req),
        )


def _request_args(req: Request | None) -> dict[str, Any]:
    """A request's slice ``args``: its tokens, preemptions and TTFT (when it has a token)."""
    if req is None:
        return {}
    args: dict[str, Any] = {
        "prompt_tokens": req.num_prompt_tokens,
        "output_tokens": req.num_output_tokens,
        "cached_tokens": max(req.num_cached_tokens, 0),
        "preemptions": req.num_preemptions,
    }
    if req.first_token_time is not None:
        args["ttft_ms"] = ms(req.first_token_time - req.arrival_time)
    return args


class _Track:
    """The recorder's listeners on one engine and the lives they keep."""

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name
        self.lives: dict[str, _Life] = {}
        """Requests admitted and not ended, by id."""
        self.prefilling: dict[Request, _Life] = {}
        """Admitted (or resumed) requests that have not sampled since."""
        self.ended: list[RequestPhases] = []
        self.num_aborted = 0
        self.last_step = -1
        """The index of the last policy-built step."""
        engine.batch_listeners.append(self.on_batch)
        engine.finish_listeners.append(self.on_finish)

    def _life(self, req: Request) -> _Life:
        life = self.lives.get(req.request_id)
        if life is None:
            life = self.lives[req.request_id] = _Life(req)
        return life

    def take_aborts(self) -> None:
        """End the requests aborted since the last look (at their abort time)."""
        aborted = self.engine.aborted
        while self.num_aborted < len(aborted):
            req = aborted[self.num_aborted]
            self.num_aborted += 1
            self.prefilling.pop(req, None)
            life = self.lives.pop(req.request_id, None) or _Life(req)
            self.ended.append(life.close(req.finish_time, req, "aborted"))

    def resolve_stretch(self) -> None:
        """First tokens sampled in a fast-forwarded stretch since the last policy step.

        A stretch runs only when every running request has one token left to compute, so a
        request still prefilling then had one prompt token left: it computed it, and sampled,
        in the stretch's first step, the one after the last policy step.
        """
        sampled = [r for r, life in self.prefilling.items() if r.num_output_tokens > life.out]
        if not sampled:
            return
        records = self.engine._steps
        i = self.last_step + 1
        start = records["time_s"][i]
        end = start + records["duration_s"][i]
        for req in sampled:
            life = self.prefilling.pop(req)
            life.chunks.append((start, end, 1))
            life.tokens += 1
            life.num_chunks += 1
            life.switch("decode", end, life.out + 1)

    def on_batch(self, ctx: Any, end: float, finished: list[Request]) -> None:
        """A policy-built step ran from ``ctx.now`` to ``end`` (before its finishers leave)."""
        start = ctx.now
        if self.prefilling and ctx.step > self.last_step + 1:
            self.resolve_stretch()
        self.last_step = ctx.step
        if len(self.engine.aborted) > self.num_aborted:
            self.take_aborts()  # aborts come before the step, at its start
        # The step has sampled already: an admitted request's tokens before it are 0 (new) or
        # those it had when preempted (kept by its preempted phase).
        for req, _ in ctx.new:
            life = self._life(req)
            life.switch("prefill", start, 0)
            self.prefilling[req] = life
        for req, _ in ctx.resumed:
            life = self._life(req)
            life.switch("prefill", start, life.out)
            self.prefilling[req] = life
        if self.prefilling:
            scheduled = ctx.scheduled
            done = []
            for req, life in self.prefilling.items():
                n = scheduled.get(req, 0)
                if n:
                    life.chunks.append((start, end, n))
                    life.tokens += n
                    life.num_chunks += 1
                if req.num_output_tokens > life.out:  # it sampled at the end of this step
                    life.switch("decode", end, req.num_output_tokens)
                    done.append(req)
            for req in done:
                del self.prefilling[req]
        for req in ctx.preempted:
            self.prefilling.pop(req, None)
            self._life(req).switch("preempted", start, req.num_output_tokens)

    def on_finish(self, finished: list[Request], end: float) -> None:
        """Requests finished at ``end`` (a policy step's after ``on_batch``, or a stretch's)."""
        if self.prefilling:
            self.resolve_stretch()
        for req in finished:
            self.prefilling.pop(req, None)
            life = self.lives.pop(req.request_id, None) or _Life(req)
            self.ended.append(life.close(end, req, "finished"))

    def snapshot(self) -> InstanceTimeline:
        """This engine's timeline so far; requests not ended end at the clock (unfinished)."""
        eng = self.engine
        eng.sync()  # a pending decode stretch: its steps and finishes
        if self.prefilling:
            self.resolve_stretch()
        self.take_aborts()
        now = eng.now
        requests = list(self.ended)
        live = {r.request_id: r for r in (*eng.running, *eng.waiting)}
        for rid, life in self.lives.items():
            requests.append(life.close(max(now, life.since), live.get(rid), "unfinished"))
        for req in eng.waiting:  # never admitted
            if req.request_id not in self.lives:
                requests.append(_Life(req).close(max(now, req.arrival_time), req, "unfinished"))
        requests.sort(key=lambda r: r.arrival)
        return InstanceTimeline(
            self.name, eng.step_columns(), requests, eng.config.num_gpu_blocks
        )


class TimelineRecorder:
    """Records the schedules of one or more engines (one trace process each, in attach order)."""

    def __init__(self) -> None:
        self._tracks: list[_Track] = []

    def attach(self, engine: Any, name: str | None = None) -> None:
        """Listen to ``engine`` from now on; call it before the engine's first step.

        ``name`` labels its trace process (default ``instance N: <scheduler>``). Turns the
        engine's step records on if they are off (``Engine.step_columns`` then works too).

        Raises:
            ConfigError: ``engine`` is not a simulator ``Engine``, runs async scheduling,
                has stepped already, or is attached already.
        """
        if not isinstance(engine, Engine):
            raise ConfigError(
                "a timeline records simulated engines (llmsched_gym.core.engine.Engine), got "
                f"{type(engine).__name__}"
            )
        if engine.async_scheduling:
            raise ConfigError(
                "timelines do not support async_scheduling=True yet (the async loop runs its "
                "batches one ahead and calls no batch listener); set async_scheduling to false"
            )
        if engine.num_steps or engine._plan is not None:
            raise ConfigError(
                f"attach the timeline recorder before the engine's first step (it has run "
                f"{engine.num_steps} steps)"
            )
        if any(t.engine is engine for t in self._tracks):
            raise ConfigError("this engine is attached to the timeline recorder already")
        if engine._steps is None:
            engine._steps = new_step_records()
        index = len(self._tracks)
        label = name if name is not None else f"instance {index}: {engine.policy.name}"
        self._tracks.append(_Track(engine, label))

    def instances(self) -> list[InstanceTimeline]:
        """Each attached engine's steps and requests so far (the data ``trace`` draws)."""
        return [t.snapshot() for t in self._tracks]

    def trace(self, other_data: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The trace-event JSON object of what was recorded so far (``metrics/timeline.py``).

        Requests that have not ended (a run stopped early, an episode in progress) end at
        their engine's clock with status ``unfinished``. Recording goes on afterwards.
        """
        if not self._tracks:
            raise ConfigError("the timeline recorder is attached to no engine")
        return trace_events(self.instances(), other_data)
