"""``RecordTimeline``: an environment's episode as a schedule timeline, on demand.

A Gymnasium wrapper, like ``gymnasium.wrappers.RecordEpisodeStatistics``: at every reset it
attaches a fresh ``TimelineRecorder`` (``llmsched_gym/core/timeline.py``) to the episode's
engines (one; Route's: one per instance, one trace process each) before their first step;
``timeline()`` returns the episode so far as Chrome trace-event JSON and ``write_timeline(path)``
writes it. Requests the episode has not ended show as ``unfinished`` at the engine's clock.

>>> import gymnasium as gym
>>> env = RecordTimeline(gym.make("llmsched/Priority-chat-azure-conv-v0"))  # doctest: +SKIP
>>> obs, info = env.reset(seed=0)  # doctest: +SKIP
>>> ...  # steps  # doctest: +SKIP
>>> env.write_timeline("out/episode.json")  # open in https://ui.perfetto.dev  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym

from llmsched_gym.core.timeline import TimelineRecorder
from llmsched_gym.envs.base import LLMSchedEnv
from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.timeline import write_trace

__all__ = ["RecordTimeline"]


class RecordTimeline(gym.Wrapper):
    """Record each episode's schedule timeline (``timeline``, ``write_timeline``).

    Args:
        env: An llmsched environment on the simulator (``backend="sim"``), wrapped or not.

    Raises:
        ConfigError: ``env`` is not an llmsched environment, or runs on a live backend.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        if not isinstance(base, LLMSchedEnv):
            raise ConfigError(
                f"RecordTimeline wraps llmsched environments, got {type(base).__name__}"
            )
        if getattr(base, "backend", "sim") != "sim":
            raise ConfigError(
                f"RecordTimeline records the simulator's engines; this environment runs on the "
                f"{base.backend!r} backend (use backend='sim')"
            )
        self._recorder: TimelineRecorder | None = None
        base.engine_hooks.append(self._record)

    def _record(self, engines: list[tuple[str, Any]]) -> None:
        recorder = TimelineRecorder()
        for name, engine in engines:
            recorder.attach(engine, name)
        self._recorder = recorder

    def timeline(self) -> dict[str, Any]:
        """The current episode as Chrome trace-event JSON (``llmsched_gym/metrics/timeline.py``)."""
        if self._recorder is None:
            raise ConfigError("no episode to draw yet: call reset() first")
        base = self.env.unwrapped
        return self._recorder.trace(
            {"task": base.task, "scenario": base.scenario.name, "seed": base.workload_seed}
        )

    def write_timeline(self, path: str | os.PathLike[str]) -> Path:
        """Write the current episode's timeline to ``path`` (atomically; ``.gz``: gzip)."""
        return write_trace(self.timeline(), path)

    def close(self) -> None:
        """Stop recording (the hook leaves the environment) and close it."""
        hooks = self.env.unwrapped.engine_hooks
        if self._record in hooks:
            hooks.remove(self._record)
        super().close()
