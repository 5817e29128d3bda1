"""``llmsched/Priority-*-v0``: per-step priority scores over the top-K visible requests."""

from __future__ import annotations

from itertools import islice
from operator import ge
from typing import Any

import numpy as np
from gymnasium import spaces

from llmsched_gym.core.engine import StepContext
from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.envs.base import EnvPolicy, LLMSchedEnv, check_box, distinct_actions
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.vllm_v1 import drive, pack


LOOKAHEAD_CANDIDATES = (
    "vllm-v1",
    "static-priority:shortest-prompt",
    "static-priority:shortest-total",
    "static-priority:shortest-output",
)
"""Schedulers whose scores the lookahead oracle tries (``PriorityEnv.policy_action``'s ranks of
the visible rows)."""


class PriorityPolicy(EnvPolicy):
    """Packs the batch in the order of the scores the environment stored (vLLM-v1 rules)."""

    name = "env-priority"
    head_of_line = False  # any visible waiting request may go first

    def __init__(self, oracle: bool = False) -> None:
        super().__init__(oracle)
        self.running_order: list[Request] | None = None
        self.waiting_order: list[Request] | None = None

    def schedule(self, ctx: StepContext) -> None:
        """Phase (a) over running by score, victims lowest first, then waiting by score."""
        order = self.running_order
        if order is None:
            order = list(ctx.running)
        drive(pack(ctx, order, self.waiting_order), lambda req: _lowest(order))
        self.running_order = self.waiting_order = None


def _lowest(order: list[Request]) -> Request:
    """The running request with the lowest score: the last of ``order`` still running."""
    for req in reversed(order):
        if req.status is RequestStatus.RUNNING:
            return req
    raise AssertionError("a request needs blocks, so at least it is running")


class PriorityEnv(LLMSchedEnv):
    """Score the visible requests; the engine packs the batch in score order.

    ## Description

    At every engine step whose schedule a decision can change (the steps the engine does not
    fast-forward), the agent gives one score per visible request. The environment's policy then
    packs the batch with vLLM-v1's rules in score order (higher first): running requests by score
    (each gets ``num_tokens - num_computed_tokens`` tokens, capped by the long-prefill threshold
    and the remaining budget); when KV blocks run out, the running request with the lowest score
    is preempted (recompute) and the allocation retried, a request that preempts itself ending
    the phase; then, only if nothing was preempted, waiting requests by score while sequences
    and budget remain, stopping at the first that cannot get blocks. Requests that are not
    visible come after the visible ones of their queue, in their default order (running:
    admission order, so the newest invisible running request is the first victim; waiting:
    queue order). Scores that follow the row order reproduce ``vllm-v1`` exactly under the FCFS
    queue (``PolicyAgent``); under the priority queue vLLM picks victims by (priority, arrival),
    which one score per request cannot express together with the admission order.

    Visible requests (rows): the first ``top_k`` waiting requests in queue order, then running
    requests in admission order, up to ``top_k`` rows.

    ## Action Space

    ``Box(-1, 1, (top_k,), float32)``: the score of each row. Only the order matters; values
    outside [-1, 1] are used as they are (no clipping changes an order), ties keep row order.
    Scores of empty rows are ignored. A wrong shape or a non-finite value raises
    ``InvalidActionError`` (a ``PolicyError`` and ``ValueError``).

    ## Observation Space

    ``Dict(global=Box(0, 1, (10,)), requests=Box(-1, 1, (top_k, 12)), mask=MultiBinary(top_k))``;
    the feature tables are in ``llmsched_gym.envs.observation`` (13 request columns with
    ``oracle=True``).

    ## Rewards

    With ``L(t)`` the area under the number of arrived, unfinished units (requests, or jobs
    when the workload has jobs) up to simulated time ``t``, and ``t_k`` the clock at decision
    ``k``::

        r_k = -reward_scale * (L(t_{k+1}) - L(t_k))          (reward="latency", default)

    so the return of an episode that drains is ``-reward_scale * sum_i e2e_i`` (``sum`` of job
    latencies with jobs). ``reward="slo"``: ``reward_scale`` per unit finishing within its SLOs
    (return ``reward_scale * slo_attainment * num_slo_units``); ``reward="goodput"``:
    ``reward_scale`` per finished unit meeting its SLOs or having none (return
    ``reward_scale * goodput * duration_s``). ``info`` holds every term: ``reward_latency``,
    ``reward_slo``, ``reward_goodput``, ``latency_area_s`` (unscaled ``L(t_{k+1}) - L(t_k)``).

    ## Starting State

    The scenario's workload built with seed ``scenario.seed + seed``; the engine at its first
    decision (the first arrivals have joined the waiting queue).

    ## Episode End

    ``terminated`` when every request finished; ``truncated`` when the next step would start at
    or after ``max_sim_time_s``, or after ``max_episode_steps`` environment steps.

    ## Backends

    ``backend="sim"`` (default) runs the simulator as described above. ``backend="vllm"`` runs
    the same task on a live vLLM 0.32 engine (``llmsched_gym.backends.vllm``; needs vLLM, see
    ``INSTALL_HINT``; the ImportError at construction says what to install). Spaces, observation
    layout and normalisation, reward definitions, ``info`` keys and the episode-end rules are the
    same; the observation and reward are built by the same code (``Observer``,
    ``RewardLedger``) reading the live run through ``backends.vllm.view.LiveInstance``.

    *Engine.* One ``LiveEngine`` per environment, built at the first ``reset`` (tens of seconds)
    and closed by ``close()``; each ``reset`` aborts the running episode and starts a new
    ``LiveRun`` on it (prefix cache emptied). Its settings are the scenario's, scaled to a tiny
    random-weight Llama (``envs.live.live_engine_config``): same ``max_num_batched_tokens``,
    ``max_num_seqs``, prefix caching and long-prefill threshold; ``block_size`` rounded up to a
    multiple of 32 on the CPU build; ``max_model_len`` the episode's longest request (the
    engine is rebuilt if a later episode needs more); KV capacity the scenario's, in tokens,
    capped at ``live_max_kv_tokens`` (default 32768) and never below one longest request.
    ``live_config`` (a ``LiveEngineConfig``) replaces all of this (its ``scheduling_policy``
    and ``scheduler_cls`` are still set as below). Requests are the scenario's
    workload (token ids from ``backends.vllm.tokens``, ``ignore_eos`` so each generates its
    trace output length); workloads with jobs are refused.

    *Time.* The clock is the live run's (``live_clock="engine"``, default): it advances by each
    step's measured wall time (``live_timer="cpu"``: the process's CPU time, for shared
    machines) and jumps to the next arrival when the engine is idle, so the agent's own time
    between steps does not count. ``live_clock="wall"`` uses real time since the episode
    started (idle waits sleep). Ages, slacks, the ``clock`` feature, the latency reward and
    ``max_sim_time_s`` all use this clock; step times are measured, so the live environment is
    nondeterministic (its ``spec.nondeterministic`` is True) even under a fixed seed.

    *Actions.* The scores drive vLLM's own scheduler, run with ``scheduling_policy="priority"``
    and ``scheduler_cls=policy_scheduler_cls(LiveScorePolicy)``: before each step the waiting
    requests get ranks (visible waiting rows by score, highest first, ties in row order; then
    the other waiting requests in the scenario's queue order) that vLLM's priority heap uses,
    and the running requests get ranks (visible running rows by score, then the other running
    requests in admission order) so that vLLM's victim, ``max(running, key=(priority,
    arrival))``, is the running request with the lowest score, as in the simulator. Differences
    from the simulator's packing, precisely: (1) phase (a) serves running requests in vLLM's
    running-queue order (admission order), not in score order, so the scores of running rows
    only choose victims; the order matters only when the token budget or KV blocks run out
    part way through the running queue; (2) the rest is vLLM's own ``schedule()`` under its
    priority policy (chunking, head-of-line admission, and a preempted victim that was
    already scheduled this step gives its tokens back to the budget).

    *Decisions.* The agent is asked before every engine step whose schedule the scores can
    change: a request is waiting, or a preemption is possible (the running requests' next
    chunks may need more blocks than are free). Other steps run without a decision, as the
    simulator fast-forwards. Rows and the ``waiting`` order follow the scenario's discipline
    (FCFS: preempted requests first, latest preemption first, then arrival order; priority:
    (priority, arrival, id)). Arrivals due by the clock join vLLM's waiting queue before the
    observation, so the rows are exactly what the next step schedules. Request columns read
    vLLM's ``Request`` (tokens, computed tokens) and the run's records (first-admission prefix
    hits, preemptions, token times); ``cached_fraction`` of a waiting row is vLLM's own
    prefix-cache lookup; ``remaining_output`` (``oracle=True``) is exact, since each request
    generates its trace output length.

    ## Arguments

    ``gym.make("llmsched/Priority-ChatAzureConv-v0", top_k=16, reward="latency",
    reward_scale=0.01, max_requests=None, max_sim_time_s=None, max_episode_steps=None,
    oracle=False, lookup_prefix=True, scenario_overrides=None, render_mode=None,
    backend="sim", live_config=None, live_clock="engine", live_timer="wall",
    live_max_kv_tokens=32768)`` (the ``live_*`` arguments need ``backend="vllm"``);
    ``scenario_overrides`` takes dotted scenario fields (``{"workload.limit": 200}``);
    ``max_requests`` keeps the first N workload items by arrival; ``lookup_prefix=False`` skips
    the prefix-cache lookups of waiting rows (faster; the ``cached_fraction`` column of waiting
    rows is then 0).

    ## Version History

    * v0: initial version.
    """

    task = "Priority"
    backends = ("sim", "vllm")

    def __init__(
        self,
        scenario: Any = "chat-azure-conv-v0",
        *,
        backend: str = "sim",
        live_config: Any = None,
        live_clock: str = "engine",
        live_timer: str = "wall",
        live_max_kv_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scenario, backend=backend, **kwargs)
        self._live: Any = None
        if backend == "vllm":
            from llmsched_gym.envs.live import DEFAULT_LIVE_KV_TOKENS, LiveBackend

            self._live = LiveBackend(
                self.config,
                config=live_config,
                clock=live_clock,
                timer=live_timer,
                max_kv_tokens=(
                    DEFAULT_LIVE_KV_TOKENS if live_max_kv_tokens is None else live_max_kv_tokens
                ),
                fcfs_default=self.config.scheduling_policy == "fcfs",
            )
        elif (live_config, live_clock, live_timer, live_max_kv_tokens) != (
            None,
            "engine",
            "wall",
            None,
        ):
            raise ConfigError("the live_* arguments need backend='vllm'")

    def _make_action_space(self) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (self.top_k,), np.float32)

    def _make_policy(self) -> PriorityPolicy:
        return PriorityPolicy(self.oracle)

    def _reset_task(self) -> None:
        self._policy = self.engine.policy

    def _start_engine(self, items: list) -> Any:
        if self._live is None:
            return super()._start_engine(items)
        return self._live.start(items)

    def _advance(self) -> bool:
        if self._live is not None:
            from llmsched_gym.envs.live import advance

            return advance(self.engine, self._policy, self._until(), fast_forward=True)
        return self.engine.advance_to_decision(self._until())

    def _apply(self, action: Any) -> None:
        scores = check_box(action, (self.top_k,), "Priority")
        set_scores(self.engine.policy, self._visible, scores, self.engine)
        if self._live is not None:
            self._policy.prepare(self.engine)
        self.engine.step()

    # -- the task outside its episode (``llmsched_gym.tasks``) ----------------------------------
    def policy_action(self, policy: Any) -> np.ndarray:
        """Scores that rank the visible rows as ``policy`` would: row order, except that a
        policy with its own priority queue (``static-priority:*``) orders the waiting rows by
        its key (first row 1.0, falling by 2/K per rank; empty rows -1)."""
        k = self.top_k
        visible = self._visible
        rows = list(range(len(visible)))
        if policy.queue_policy(self.config) == "priority":
            waiting_rows = [i for i in rows if visible[i].status.name != "RUNNING"]
            ranked = sorted(
                waiting_rows, key=lambda i: (policy.priority_key(visible[i]), visible[i].seq)
            )
            rows = ranked + rows[len(waiting_rows) :]
        scores = [-1.0] * k
        for rank, i in enumerate(rows):
            scores[i] = 1.0 - 2.0 * rank / k
        return np.array(scores, dtype=np.float32)

    def drive_agent(self, inner: Any, ctx: StepContext, decide: Any) -> None:
        """The agent scores the rows once; the step packs in that order."""
        scores = check_box(decide(), (self.top_k,), "Priority")
        set_scores(inner, self._visible, scores, self.engine)
        inner.schedule(ctx)

    @classmethod
    def random_action(
        cls, rng: np.random.Generator, top_k: int, obs: Any, action_masks: Any
    ) -> np.ndarray:
        """Scores uniform in [-1, 1]."""
        return rng.uniform(-1.0, 1.0, top_k).astype(np.float32)

    @classmethod
    def check_lookahead_candidates(cls, candidates: Any) -> tuple:
        """Scheduler names whose scores the lookahead tries (default ``LOOKAHEAD_CANDIDATES``)."""
        from llmsched_gym.policies.registry import list_policies

        names = LOOKAHEAD_CANDIDATES if candidates is None else candidates
        if isinstance(names, str) or not names:
            raise ConfigError(
                "LookaheadAgent: Priority candidates must be a non-empty list of scheduler "
                f"names, got {names!r}"
            )
        unknown = [n for n in names if n not in list_policies()]
        if unknown:
            raise ConfigError(
                f"LookaheadAgent: Priority candidates {unknown} are not registered schedulers "
                "(see 'llmsched-gym list schedulers')"
            )
        return tuple(names)

    def lookahead_options(self, own: Any, candidates: tuple) -> list[Any]:
        """The base's scores, then each candidate scheduler's (``policy_action``), deduplicated.

        ``candidates`` are the policies, built once per agent (``lookahead_actors``)."""
        return distinct_actions([own, *(self.policy_action(p) for p in candidates)])

    @classmethod
    def lookahead_actors(cls, candidates: tuple) -> tuple:
        """The candidate schedulers, built once."""
        from llmsched_gym.policies.registry import make_policy

        return tuple(make_policy(name) for name in candidates)

    def close(self) -> None:
        """Drop the engine (and shut a live engine down)."""
        super().close()
        if self._live is not None:
            self._live.close()


def set_scores(policy: PriorityPolicy, visible: list[Request], scores: Any, engine: Any) -> None:
    """Store the packing orders that ``scores`` (one per visible row) give."""
    n = len(visible)
    running = engine.running
    if n == 0:
        policy.running_order = policy.waiting_order = None
        return
    s = scores[:n].tolist()
    nw = 0
    while nw < n and visible[nw].status is not RequestStatus.RUNNING:
        nw += 1
    nr = n - nw
    if all(map(ge, s, islice(s, 1, None))):
        # Scores already non-increasing by row (e.g. ``PolicyAgent``): both orders are the row
        # order, as the stable sorts below would give, without sorting.
        policy.waiting_order = visible[:nw]
        policy.running_order = visible[nw:n] + running[nr:]
        return
    # Highest score first; sorting stays stable under reverse=True, so ties keep row order.
    key = s.__getitem__
    w_idx = sorted(range(nw), key=key, reverse=True)
    r_idx = sorted(range(nw, n), key=key, reverse=True)
    policy.waiting_order = [visible[i] for i in w_idx]
    policy.running_order = [visible[i] for i in r_idx] + running[nr:]
