"""``llmsched/Route-*-v0``: which instance of a cluster serves each arriving request.

The environment sits on the routing decisions of a :class:`~llmsched_gym.cluster.Cluster`
(``next_decision()`` / ``dispatch()``): every arriving request and every released job stage
request is one step. ``RouteObserver`` builds the observation from the cluster's instances; it is
shared with ``AgentRouter`` (``llmsched_gym.envs.adapters``), which routes with a trained agent
inside ``simulate_cluster``.

Global features (``global``, shape ``(8,)``, all in [0, 1]):

====  =====================  ==========================================================
idx   name                   definition
====  =====================  ==========================================================
0     clock                  now / (now + 600 s)
1     num_waiting            waiting + routed-not-yet-queued requests, all instances,
                             n / (n + 64)
2     num_running            running requests / sum of max_num_seqs
3     kv_cache_usage         mean over instances of used / usable KV blocks
4     prefix_hit_rate        prefix-hit tokens / queried tokens so far, all instances
5     candidates             candidate instances / instances
6     gap                    seconds since the previous decision, g / (g + 1 s)
7     backlog                mean estimated backlog, b / (b + 10 s)
====  =====================  ==========================================================

Request features (``request``, shape ``(8,)``, ``(9,)`` with ``oracle=True``):

====  =====================  ======================================================  ===  ===
idx   name                   definition                                              min  max
====  =====================  ======================================================  ===  ===
0     prompt_tokens          prompt_len / (prompt_len + 1024)                        0    1
1     max_tokens             max_tokens / (max_tokens + 1024)                        0    1
2     priority               priority / (abs(priority) + 1) (lower is served first)  -1   1
3     slack                  seconds to the nearest of TTFT bound, deadline and job  -1   1
                             end-to-end SLO, s / (abs(s) + 1 s); 1 without SLO
4     job_progress           finished / released requests of its job (0: no job)     0    1
5     job_stages             finished stages of its job, n / (n + 4)                 0    1
6     in_job                 1 if the request is a job stage                         0    1
7     job_age                seconds since the job arrived, a / (a + 10 s)           0    1
8     output_tokens          (oracle only) min(output_len, max_tokens) / (x + 256)   0    1
====  =====================  ======================================================  ===  ===

Instance table (``instances``, shape ``(N, 11)``, all in [0, 1]; ``N`` instances in cluster
order):

====  =====================  ==========================================================
col   name                   definition
====  =====================  ==========================================================
0     num_waiting            waiting + routed-not-yet-queued, n / (n + 16)
1     num_running            running / max_num_seqs
2     kv_cache_usage         used / usable KV blocks
3     kv_room                free blocks / (free blocks + blocks the request needs);
                             0.5 means exactly enough for prompt + max_tokens
4     backlog                estimated seconds of outstanding work (the ``least-load``
                             router's ``backlog_s``), b / (b + 10 s)
5     num_prefill            running requests with > 1 token to compute, n / (n + 8)
6     num_decode             running requests decoding, n / (n + 64)
7     speed                  static GPU speed hint: fastest instance's time for a
                             reference batch / this instance's (1 = fastest)
8     role_prefill           1 for a PD prefill instance
9     role_decode            1 for a PD decode instance (never a candidate)
10    prefill_time           this request's prompt priced by the instance's cost
                             model as one prefill, t / (t + 1 s)
====  =====================  ==========================================================

``mask`` (``MultiBinary(N)``): the candidates, as ``action_masks()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import cython
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmsched_gym.core.hidden import note as note_hidden
from llmsched_gym.cluster.cluster import Cluster, RoutingDecision
from llmsched_gym.cluster.routers import InstanceView
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.job import Job
from llmsched_gym.envs.base import InvalidActionError, LLMSchedEnv, check_discrete
from llmsched_gym.envs.observation import _clip
from llmsched_gym.envs.reward import ClusterLedger

GLOBAL_FEATURES = (
    "clock",
    "num_waiting",
    "num_running",
    "kv_cache_usage",
    "prefix_hit_rate",
    "candidates",
    "gap",
    "backlog",
)
REQUEST_FEATURES = (
    "prompt_tokens",
    "max_tokens",
    "priority",
    "slack",
    "job_progress",
    "job_stages",
    "in_job",
    "job_age",
)
ORACLE_REQUEST_FEATURES = ("output_tokens",)
INSTANCE_FEATURES = (
    "num_waiting",
    "num_running",
    "kv_cache_usage",
    "kv_room",
    "backlog",
    "num_prefill",
    "num_decode",
    "speed",
    "role_prefill",
    "role_decode",
    "prefill_time",
)

_REF_PREFILL = 1024
_REF_DECODE_SEQS = 32
_REF_CONTEXT = 1024


def route_observation_space(num_instances: int, oracle: bool) -> spaces.Dict:
    """The Dict space of ``RouteEnv``'s observation."""
    nr = len(REQUEST_FEATURES) + (len(ORACLE_REQUEST_FEATURES) if oracle else 0)
    return spaces.Dict(
        {
            "global": spaces.Box(0.0, 1.0, (len(GLOBAL_FEATURES),), np.float32),
            "request": spaces.Box(-1.0, 1.0, (nr,), np.float32),
            "instances": spaces.Box(0.0, 1.0, (num_instances, len(INSTANCE_FEATURES)), np.float32),
            "mask": spaces.MultiBinary(num_instances),
        }
    )


def speed_hints(cost_models: Sequence[Any]) -> list[float]:
    """Static speed hints: the fastest instance's reference-batch time over each instance's.

    The reference is one ``1024``-token prefill step plus one decode step of 32 sequences at
    1024 tokens of context, priced by each instance's cost model.
    """
    times = []
    for model in cost_models:
        p = _REF_PREFILL
        t = model.step_time(p, p * p, 0, 1, 0)
        n = _REF_DECODE_SEQS
        t += model.step_time(n, 0, n * _REF_CONTEXT, 0, n)
        times.append(max(float(t), 1e-12))
    best = min(times)
    return [best / t for t in times]


class RouteObserver:
    """Builds ``RouteEnv`` observations from a cluster's instances (engines and views).

    Args:
        engines: Every instance's engine, in instance order.
        roles: Every instance's role.
        oracle: Add the true output length to the request features.
    """

    def __init__(self, engines: Sequence[Any], roles: Sequence[str], oracle: bool = False):
        self.engines = list(engines)
        self.n = len(self.engines)
        self.oracle = oracle
        self.num_request_features = len(REQUEST_FEATURES) + (
            len(ORACLE_REQUEST_FEATURES) if oracle else 0
        )
        self._seqs = [float(e.config.max_num_seqs) for e in self.engines]
        self._total_seqs = float(sum(self._seqs))
        self._usable = [float(max(1, e.config.num_gpu_blocks - 1)) for e in self.engines]
        self._bs = [e.config.block_size for e in self.engines]
        self._models = [e.cost_model for e in self.engines]
        self._static = [
            (speed, 1.0 if role == "prefill" else 0.0, 1.0 if role == "decode" else 0.0)
            for speed, role in zip(speed_hints(self._models), roles, strict=True)
        ]
        self._last_now = 0.0

    def reset(self) -> None:
        """Forget the previous decision's time (a new episode)."""
        self._last_now = 0.0

    @cython.locals(
        e=Engine,
        v=InstanceView,
        i=cython.long,
        n=cython.long,
        nw=cython.long,
        nr=cython.long,
        n_pre=cython.long,
        free=cython.long,
        bs=cython.long,
        need=cython.long,
        need_tokens=cython.long,
        prompt=cython.long,
        mt=cython.long,
        hits=cython.long,
        queries=cython.long,
        h=cython.long,
        waiting_total=cython.long,
        running_total=cython.long,
        usage=cython.double,
        backlog=cython.double,
        kv_total=cython.double,
        backlog_total=cython.double,
        t_pre=cython.double,
        rows=list,
        engines=list,
    )
    def observe(
        self,
        request: Any,
        job: Any,
        views: Sequence[InstanceView],
        candidates: Sequence[int],
        now: float,
    ) -> dict[str, np.ndarray]:
        """The observation of one routing decision.

        Args:
            request: The ``RequestSpec`` to route.
            job: Its ``JobState`` (None outside jobs).
            views: One fresh ``InstanceView`` per instance, in instance order.
            candidates: Indices of the candidate instances.
            now: The decision's time.
        """
        n = self.n
        prompt = request.prompt_len
        mt = request.max_tokens
        need_tokens = prompt + mt
        hits = queries = 0
        waiting_total = running_total = 0
        kv_total = backlog_total = 0.0
        rows: list[float] = []
        for i in range(n):
            e = self.engines[i]
            v = views[i]
            nw = len(e.waiting) + len(e._pending) - e._next_arrival
            # Engine-level reads that leave a pending decode stretch pending (``Engine.sync``).
            nr = e.num_running
            n_pre = e.running_prefills  # kept by the engine, no pass over running
            free = e.num_free_blocks
            usage = 1.0 - free / self._usable[i]
            bs = self._bs[i]
            need = -(-need_tokens // bs)
            backlog = v.backlog_s
            t_pre = float(self._models[i].step_time(prompt, prompt * prompt, 0, 1, 0))
            speed, is_pre, is_dec = self._static[i]
            rows += (
                nw / (nw + 16.0),
                min(1.0, nr / self._seqs[i]),
                usage,
                free / (free + need),
                backlog / (backlog + 10.0),
                n_pre / (n_pre + 8.0),
                (nr - n_pre) / (nr - n_pre + 64.0),
                speed,
                is_pre,
                is_dec,
                t_pre / (t_pre + 1.0),
            )
            h, q = e.prefix_cache_counts
            hits += h
            queries += q
            waiting_total += nw
            running_total += nr
            kv_total += usage
            backlog_total += backlog
        gap = max(0.0, now - self._last_now)
        self._last_now = now
        mean_backlog = backlog_total / n
        glob = [
            now / (now + 600.0) if now > 0 else 0.0,
            waiting_total / (waiting_total + 64.0),
            min(1.0, running_total / self._total_seqs),
            kv_total / n,
            min(1.0, hits / queries) if queries else 0.0,
            len(candidates) / n,
            gap / (gap + 1.0),
            mean_backlog / (mean_backlog + 10.0),
        ]
        req = _request_features(request, job, now, self.oracle)
        flat = np.array(glob + req + rows, dtype=np.float32)
        _clip(flat, -1.0, 1.0)
        g = len(glob)
        q = g + len(req)
        mask = np.zeros(n, dtype=np.int8)
        for i in candidates:
            mask[i] = 1
        return {
            "global": flat[:g],
            "request": flat[g:q],
            "instances": flat[q:].reshape(n, len(INSTANCE_FEATURES)),
            "mask": mask,
        }


def _request_features(request: Any, job: Any, now: float, oracle: bool) -> list[float]:
    """The ``request`` part of the observation (``REQUEST_FEATURES``), before clipping."""
    prompt = request.prompt_len
    mt = request.max_tokens
    slack = _slack(request, job, now)
    p = request.priority
    if job is not None:
        progress = job.num_finished / job.num_released if job.num_released else 0.0
        stages = len(job.stages_finished)
        age = max(0.0, now - job.arrival_time)
        job_feats = (progress, stages / (stages + 4.0), 1.0, age / (age + 10.0))
    else:
        job_feats = (0.0, 0.0, 0.0, 0.0)
    req = [
        prompt / (prompt + 1024.0),
        mt / (mt + 1024.0),
        p / (abs(p) + 1.0),
        slack / (abs(slack) + 1.0),
        *job_feats,
    ]
    if oracle:
        note_hidden("true output length")
        out = min(request.output_len, mt)
        req.append(out / (out + 256.0))
    return req


def _slack(request: Any, job: Any, now: float) -> float:
    """Seconds to the request's nearest SLO bound (TTFT, deadline, job SLO); 1e9 without."""
    bound = math.inf
    if request.slo_ttft_s is not None:
        bound = request.arrival_time + request.slo_ttft_s
    if request.deadline_s is not None:
        bound = min(bound, request.deadline_s)
    if job is not None and job.slo_e2e_s is not None:
        bound = min(bound, job.arrival_time + job.slo_e2e_s)
    if bound == math.inf:
        return 1e9
    return bound - now


class RouteEnv(LLMSchedEnv):
    """Route every arriving request (and released job stage) to one of a cluster's instances.

    ## Description

    The scenario's cluster (its ``cluster:`` section: instances with their own cost models,
    engine settings, local schedulers and roles) runs under one clock as in ``simulate``. Each
    request that arrives, and each job stage request its predecessors release, is one decision:
    the agent picks the instance that gets it; instances then schedule locally (their scheduler,
    ``vllm-v1`` by default) until the next request must be routed. PD scenarios route new
    requests to prefill instances; their hand-offs go to decode instances by the scenario's
    ``pd.decode_router``, as in ``simulate``. Playing a built-in router through the environment
    (``RouterAgent``) gives the same records as ``simulate_cluster`` with that router.

    ## Action Space

    ``Discrete(N)``, ``N`` the number of instances: the index of the chosen instance.
    ``action_masks()`` (and the observation's ``mask``) marks the candidates: instances whose
    role takes new requests (``both``, ``prefill``) and whose KV cache can ever hold the request.
    A masked choice is replaced by the first candidate (lowest index) and
    ``info["action_replaced"]`` is True; with ``strict_masks=True`` it raises
    ``InvalidActionError`` naming the candidates. A wrong type or out-of-range index raises.

    ## Observation Space

    ``Dict(global=Box(0, 1, (8,)), request=Box(-1, 1, (8,)), instances=Box(0, 1, (N, 11)),
    mask=MultiBinary(N))``; the feature tables are in ``llmsched_gym.envs.route_v0`` (9 request
    features with ``oracle=True``: the true output length, which is never shown otherwise).

    ## Rewards

    With ``L(t)`` the area under the number of arrived, unfinished units (requests, or jobs
    when the workload has jobs) up to simulated time ``t``, and ``t_k`` the time of routing
    decision ``k`` (the last ``t`` is the end of the run)::

        r_k = -reward_scale * (L(t_{k+1}) - L(t_k))          (reward="latency", default)

    so a drained episode returns ``-reward_scale * sum_i e2e_i`` (job latencies with jobs), the
    sum over the run's ``ClusterResult`` records. Instances may have run past ``t_k`` (a busy
    instance finishes the step it was in when the request arrived); their later finishes enter
    ``L`` only at the decision they precede, so each ``r_k`` is exactly the latency accrued in
    ``[t_k, t_{k+1})``. ``reward="slo"`` / ``"goodput"`` and the ``info`` terms are as in
    ``PriorityEnv`` (a PD request's TTFT is its prefill instance's first token, as the records).

    ## Starting State

    The scenario's workload built with seed ``scenario.seed + seed`` (seeded routers inside the
    cluster, e.g. a PD decode router, use the same seed); the cluster at its first routing
    decision.

    ## Episode End

    ``terminated`` when every request finished (after the last routing decision the cluster
    runs to the end within the last step); ``truncated`` when the next routing decision is at or
    after ``max_sim_time_s``, or after ``max_episode_steps`` environment steps.

    ## Arguments

    ``gym.make("llmsched/Route-ChatAzureConv4x-v0", reward="latency", reward_scale=0.01,
    max_requests=None, max_sim_time_s=None, max_episode_steps=None, oracle=False,
    strict_masks=False, scenario_overrides=None, render_mode=None)``; ``scenario_overrides``
    takes dotted scenario fields (``{"workload.limit": 200}``); ``max_requests`` keeps the first
    N workload items by arrival. ``records()`` returns the episode's ``ClusterResult``.

    ## Version History

    * v0: initial version.
    """

    task = "Route"
    cluster_task = True

    def __init__(
        self,
        scenario: Any = "chat-azure-conv-4x-v0",
        *,
        scenario_overrides: Any = None,
        reward: str = "latency",
        reward_scale: float = 0.01,
        max_requests: int | None = None,
        max_episode_steps: int | None = None,
        max_sim_time_s: float | None = None,
        oracle: bool = False,
        strict_masks: bool = False,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(
            scenario,
            scenario_overrides=scenario_overrides,
            reward=reward,
            reward_scale=reward_scale,
            max_requests=max_requests,
            max_episode_steps=max_episode_steps,
            max_sim_time_s=max_sim_time_s,
            oracle=oracle,
            strict_masks=strict_masks,
            render_mode=render_mode,
        )
        self.cluster: Cluster | None = None
        self.observer: RouteObserver | None = None
        self.decision: RoutingDecision | None = None
        self.views: list[InstanceView] = []
        self._candidates: list[int] = []
        self._end_time = 0.0
        self._chosen: int | None = None

    # -- spaces --------------------------------------------------------------------------------
    def _instance_specs(self) -> list[Any]:
        from llmsched_gym.cluster.spec import instance_specs

        sc = self.scenario
        return instance_specs(
            sc.cluster, engine=sc.engine, cost_model=sc.cost_model, scheduler=sc.scheduler
        )

    @property
    def num_instances(self) -> int:
        """Instances in the scenario's cluster (the action space's size)."""
        return sum(g["count"] for g in self.scenario.cluster["instances"])

    def _make_observation_space(self) -> spaces.Dict:
        return route_observation_space(self.num_instances, self.oracle)

    def _make_action_space(self) -> spaces.Discrete:
        return spaces.Discrete(self.num_instances)

    # -- the episode template's hooks (``LLMSchedEnv.reset`` / ``step``) --------------------
    def _start(self, items: list) -> None:
        """A fresh cluster holding the workload (seeded routers use the workload's seed)."""
        sc = self.scenario
        cluster = Cluster(
            self._instance_specs(),
            sc.cluster["router"],
            pd=sc.cluster.get("pd"),
            seed=self.workload_seed,
            fast_forward=True,
        )
        cluster.add(items)
        if self.engine_hooks:
            engines = [
                (f"{x.name} ({x.role}, {x.policy.name})", x.engine) for x in cluster.instances
            ]
            for hook in self.engine_hooks:
                hook(engines)
        self.cluster = cluster
        self.ledger = ClusterLedger(items, cluster)
        self.observer = RouteObserver(
            [x.engine for x in cluster.instances],
            [x.role for x in cluster.instances],
            oracle=self.oracle,
        )
        self._end_time = 0.0

    def _advance(self) -> bool:
        return self._next()

    def _drained(self) -> bool:
        return self.decision is None

    def _apply(self, action: Any) -> None:
        """Dispatch the pending request to instance ``action`` (a masked one: the first
        candidate, or ``InvalidActionError`` with ``strict_masks``)."""
        a = check_discrete(action, len(self.cluster.instances), "Route")
        if a not in self._candidates:
            self._masked(
                f"Route: instance {a} is masked for request "
                f"{self.decision.request.request_id!r}; candidates: {self._candidates} "
                "(see action_masks())"
            )
            a = self._candidates[0]
        self._chosen = a
        self.cluster.dispatch(a)

    def _next(self) -> bool:
        """Run the cluster to the next routing decision; False when the episode ends there."""
        d = self.cluster.next_decision()
        self.decision = d
        if d is None:
            self.views = []
            self._candidates = []
            self._end_time = max(x.engine.now for x in self.cluster.instances)
            return False
        views = [None] * len(self.cluster.instances)
        for v in d.instances:
            views[v.index] = v
        for i, v in enumerate(views):
            if v is None:
                views[i] = self.cluster.instances[i].view()
        self.views = views
        self._candidates = [v.index for v in d.instances]
        return d.now < self.max_sim_time_s

    def _clock(self) -> float:
        d = self.decision
        return d.now if d is not None else self._end_time

    def _observe(self) -> dict[str, np.ndarray]:
        d = self.decision
        if d is None:
            n = self.num_instances
            space = self.observation_space
            return {
                "global": np.zeros(space["global"].shape, np.float32),
                "request": np.zeros(space["request"].shape, np.float32),
                "instances": np.zeros(space["instances"].shape, np.float32),
                "mask": np.zeros(n, np.int8),
            }
        return self.observer.observe(d.request, d.job, self.views, self._candidates, d.now)

    def action_masks(self) -> np.ndarray:
        """The candidate instances of the pending request (all False once the run is over)."""
        mask = np.zeros(self.num_instances, dtype=bool)
        if self.decision is not None:
            mask[self._candidates] = True
        return mask

    def _info(self, terms: dict[str, float]) -> dict[str, Any]:
        c = self.cluster
        led = self.ledger
        info: dict[str, Any] = {
            "time_s": self._clock(),
            "num_routed": c.num_routed,
            "num_finished_requests": len(c.final),
            "num_finished_units": led.num_closed,
            "num_slo_met": led.num_slo_met,
            "num_good": led.num_good,
            "instance": -1 if self._chosen is None else self._chosen,
            "action_replaced": self._action_replaced,
        }
        info.update(terms)
        return info

    def render(self) -> str | None:
        """A compact text view: clock, the request to route, and every instance."""
        if self.cluster is None:
            return None
        d = self.decision
        head = f"{self.task} t={self._clock():.3f}s decisions={self._num_env_steps} "
        if d is not None:
            r = d.request
            head += f"request={r.request_id} prompt={r.prompt_len} max_tokens={r.max_tokens} "
        head += f"routed={self.cluster.num_routed} return={self._episode_return:.4g}"
        lines = [head]
        cands = set(self._candidates)
        for x in self.cluster.instances:
            e = x.engine
            usage = e.kv.pool.usage()
            backlog = self.views[x.index].backlog_s if self.views else 0.0
            lines.append(
                f"  [{x.index}]{'*' if x.index in cands else ' '} {x.name:<10} {x.role:<7} "
                f"waiting={len(e.waiting)} running={len(e.running)} kv={usage:.0%} "
                f"backlog={backlog:.2f}s finished={len(e.finished)}"
            )
        return self._emit("\n".join(lines))

    def close(self) -> None:
        """Drop the cluster."""
        super().close()
        self.cluster = None
        self.decision = None

    def records(self) -> Any:
        """The episode's ``ClusterResult`` (requests finished so far; all once it drained)."""
        from llmsched_gym.cluster.records import cluster_result

        if self.cluster is None:
            raise gym.error.ResetNeeded("no episode: call reset() first")
        jobs = [x for x in self.items if isinstance(x, Job)]
        return cluster_result(self.cluster, jobs, wall_s=0.0, record_steps=False)

    def _check_action(self, action: Any) -> None:
        check_discrete(action, self.num_instances, "Route")


__all__ = [
    "GLOBAL_FEATURES",
    "INSTANCE_FEATURES",
    "REQUEST_FEATURES",
    "InvalidActionError",
    "RouteEnv",
    "RouteObserver",
    "route_observation_space",
    "speed_hints",
]
