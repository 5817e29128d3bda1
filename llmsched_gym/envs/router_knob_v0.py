"""``llmsched/Knob-<Cluster>-v0``: a cluster router's parameter per window (HexGen's alpha)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.envs.base import check_box
from llmsched_gym.envs.route_v0 import RouteEnv
from llmsched_gym.errors import ConfigError


class RouterKnobEnv(RouteEnv):
    """Set the cluster router's trade-off parameter for the next window of simulated time.

    ## Description

    The scenario's cluster runs as in ``simulate`` with the scenario's own router, which must
    expose ``set_alpha`` (HexGen-Text2SQL's workload-balanced dispatchers ``hexgen-wb`` and
    ``hexgen-wb-code``). Every environment step the agent sets ``alpha``; the router then routes
    every request (and released job stage) whose decision falls in the next ``window_s`` seconds
    of simulated time with it, and the step ends at the first routing decision at or after the
    window's end. This is the decision HexGen's online tuner makes (§4.3: a fresh alpha per
    100-second window, chosen by replaying the window in a simulator); an agent here learns it
    from the cluster's state instead. Holding the scenario's alpha for the whole episode gives
    exactly the records of ``simulate`` on the scenario.

    ## Action Space

    ``Box(0, 1, (1,), float32)``: alpha (in HexGen's Eq. 4, the weight of execution time against
    queueing). Values outside [0, 1] are clipped (documented, not an error); a wrong shape or a
    non-finite value raises ``InvalidActionError``.

    ## Observation Space

    As ``RouteEnv`` at the pending routing decision after the window (the request about to be
    routed, every instance's load and speed, the candidate mask).

    ## Rewards

    As ``RouteEnv``, per window: ``-reward_scale * (L(t_end) - L(t_start))`` with ``L`` the area
    under the number of arrived, unfinished units (jobs for Text-to-SQL workloads), so a drained
    episode returns ``-reward_scale * sum`` of job latencies. Every term is in ``info``.

    ## Episode End

    ``terminated`` when every request finished; ``truncated`` at ``max_sim_time_s`` or after
    ``max_episode_steps`` environment steps.

    ## Arguments

    ``gym.make("llmsched/Knob-HexgenHetero1Trace1-v0", window_s=100.0, reward="latency",
    reward_scale=0.01, max_requests=None, max_sim_time_s=None, max_episode_steps=None,
    scenario_overrides=None, render_mode=None)``.

    ## Version History

    * v0: initial version.
    """

    task = "Knob"
    cluster_task = True

    def __init__(
        self,
        scenario: Any = "hexgen-hetero1-trace1-v0",
        *,
        window_s: float = 100.0,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("strict_masks"):
            raise ConfigError("the router knob environment has no masked actions")
        if isinstance(window_s, bool) or not isinstance(window_s, (int, float)) or window_s <= 0:
            raise ConfigError(f"window_s must be a number of seconds > 0, got {window_s!r}")
        super().__init__(scenario, **kwargs)
        self.window_s = float(window_s)
        from llmsched_gym.cluster.routers import make_router

        router = self.scenario.cluster["router"]
        probe = make_router(router) if isinstance(router, str) else router
        if not callable(getattr(probe, "set_alpha", None)):
            raise ConfigError(
                f"scenario {self.scenario.name!r}: its router {router!r} has no set_alpha(); the "
                "router knob needs a tunable router (hexgen-wb, hexgen-wb-code)"
            )
        self.alpha = float(getattr(probe, "alpha", 0.0))

    def _make_action_space(self) -> spaces.Box:
        return spaces.Box(0.0, 1.0, (1,), np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode on a fresh cluster; alpha starts at the scenario's."""
        obs, info = super().reset(seed=seed, options=options)
        self.alpha = float(getattr(self.cluster.router, "alpha", self.alpha))
        info["alpha"] = self.alpha
        return obs, info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Route every decision of the next ``window_s`` seconds with alpha = ``action``."""
        self._routed = 0
        obs, reward, terminated, truncated, info = super().step(action)
        info.update(alpha=self.alpha, num_routed_in_window=self._routed)
        return obs, reward, terminated, truncated, info

    def _reset_task(self) -> None:
        self._routing = False
        self._routed = 0

    def _apply(self, action: Any) -> None:
        """Set the router's alpha; ``_advance`` then routes the window's requests with it."""
        alpha = float(np.clip(check_box(action, (1,), "Knob"), 0.0, 1.0)[0])
        self.cluster.router.set_alpha(alpha)
        self.alpha = alpha
        self._window_end = self._clock() + self.window_s
        self._routing = True

    def _advance(self) -> bool:
        """At reset: to the first decision. After an action: the router routes every decision
        before the window's end; False when the episode ends within it."""
        if not self._routing:
            return self._next()
        self._routing = False
        router = self.cluster.router
        more = True
        while more and self.decision is not None and self.decision.now < self._window_end:
            d = self.decision
            self.cluster.dispatch(router.route(d.request, d.job, d.instances, d.now))
            self._routed += 1
            more = self._next()
        return more and self.decision is not None

    action_masks = None  # a continuous action: no masks (RouteEnv's are per-request choices)

    def _check_action(self, action: Any) -> None:
        check_box(action, (1,), "Knob")


__all__ = ["RouterKnobEnv"]
