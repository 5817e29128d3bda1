"""Global routers: which instance of a cluster gets a new request.

A router is a policy like a local scheduler: any object with
``route(request, job, instances, now) -> int`` works. It sees the request (with its job, when it
belongs to one) and a read-only :class:`InstanceView` per candidate instance, and returns the
``index`` of the chosen view. Candidates are the instances that may take the request (role
``prefill`` or ``both``, or ``decode`` for a PD hand-off) and whose KV cache can hold it.

Built-ins (DESIGN.md baselines; ProServe's MinLoad is ``least-load``):

=====================  ==========================================================================
``round-robin``        instances in turn (HexGen-Text2SQL's vLLM baseline)
``random``             uniformly at random (seeded)
``least-load[:M]``     smallest load by metric ``M``: ``backlog`` (default; estimated seconds of
                       outstanding work), ``requests`` (waiting + running), ``kv`` (most free KV
                       tokens)
``power-of-two[:M]``   two distinct candidates at random (seeded), the less loaded by ``M``
=====================  ==========================================================================

Ties go to the lowest instance index. Seeded routers draw from ``numpy.random.default_rng`` seeded
by the run's seed (``reset``), so a run is deterministic under its seed.

Before a run the cluster calls two optional methods: ``bind_runner(run_cluster)`` for routers
that simulate what-ifs on a fresh copy of the cluster (HexGen-Text2SQL's α tuner replays
windows), so that they never import the cluster, then ``reset(instances, seed)``. The papers'
routers live with their policies (``llmsched_gym.policies.proserve``, ``...hexgen``) and are
registered here on first need (:func:`make_router`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import cython
import numpy as np

from llmsched_gym.core.engine import Engine
from llmsched_gym.core.job import JobState
from llmsched_gym.core.request import Request, RequestSpec
from llmsched_gym.errors import ConfigError

__all__ = [
    "LOAD_METRICS",
    "InstanceView",
    "LeastLoadRouter",
    "PowerOfTwoRouter",
    "RandomRouter",
    "RoundRobinRouter",
    "Router",
    "RouterProtocol",
    "estimate_backlog_s",
    "list_routers",
    "make_router",
    "register_router",
    "registered_policies",
    "router_name",
]

LOAD_METRICS = ("backlog", "requests", "kv")
"""Load measures of ``least-load`` and ``power-of-two``."""


def estimate_backlog_s(
    cost_model: Any,
    items: Sequence[tuple[int, int, int, int]],
    max_num_batched_tokens: int,
) -> float:
    """Seconds an instance needs to drain outstanding work, priced with its cost model.

    Each item is ``(prefill, context, decode, length)``: tokens still to prefill (prompt, chunk
    remainder or refill), tokens already in the KV cache before them, decode tokens still to
    generate after the prefill, and the sequence length when decoding starts. Decode tokens are
    bounded by ``max_tokens`` (what a non-oracle scheduler knows), never the true output length.

    The estimate assumes nothing else arrives and the engine batches perfectly:

    * prefills are packed into ``k_p = ceil(P / max_num_batched_tokens)`` steps, each priced as the
      mean prefill step (``P / k_p`` tokens, ``A / k_p`` attention work with
      ``A = sum(p * p + 2 * m * p)``, ``n_p / k_p`` prefill items);
    * all decodes run together for ``D_max`` steps (the longest remaining decode), each priced as
      the mean decode step (``D / D_max`` requests reading ``K / D_max`` KV tokens, with
      ``K = sum(d * L + d * (d - 1) / 2)``).

    For a linear cost model this is exactly the linear model summed over those steps; for others
    (roofline) it evaluates the model at the mean batches.

    Args:
        cost_model: The instance's cost model (``step_time`` with the five batch features).
        items: One ``(prefill, context, decode, length)`` per outstanding request.
        max_num_batched_tokens: The instance's token budget per step.

    Returns:
        Estimated seconds; 0.0 for an idle instance.
    """
    return _price(cost_model, _backlog_sums(items), max_num_batched_tokens)


_Sums = tuple[int, int, int, int, int, float]
"""Backlog accumulators: (prefill tokens P, attention work A, prefill items, decode tokens D,
longest decode D_max, decode KV reads K)."""


@cython.locals(
    p=cython.long,
    m=cython.long,
    d=cython.long,
    length=cython.long,
    p_tot=cython.long,
    attn=cython.long,
    n_p=cython.long,
    d_tot=cython.long,
    d_max=cython.long,
    kv=cython.double,
)
def _backlog_sums(
    items: Sequence[tuple[int, int, int, int]] | Any, sums: _Sums = (0, 0, 0, 0, 0, 0.0)
) -> _Sums:
    """Add ``items`` to the accumulators of :func:`estimate_backlog_s`, in order."""
    p_tot, attn, n_p, d_tot, d_max, kv = sums
    for p, m, d, length in items:
        if p == 1:  # one token to compute is a decode step (e.g. a PD hand-off's first step)
            p, d, length = 0, d + 1, m
        if p > 0:
            p_tot += p
            attn += p * p + 2 * m * p
            n_p += 1
        if d > 0:
            d_tot += d
            if d > d_max:
                d_max = d
            kv += d * length + d * (d - 1) / 2
    return p_tot, attn, n_p, d_tot, d_max, kv


@cython.locals(
    r=Request,
    lag=cython.long,
    t=cython.long,
    c=cython.long,
    p=cython.long,
    d=cython.long,
    p_tot=cython.long,
    attn=cython.long,
    n_p=cython.long,
    d_tot=cython.long,
    d_max=cython.long,
    kv=cython.double,
)
def _running_sums(running: Sequence[Any], lag: int = 0) -> _Sums:
    """``_backlog_sums`` of running requests' items, built inline (no tuple per request).

    Item of a running request: ``(left, computed, max_tokens - output - 1, num_tokens)`` while
    more than one token is left to compute, else ``(0, 0, max_tokens - output, num_tokens - 1)``
    (the same float operations in the same order as :func:`_backlog_sums` on those items).
    ``lag``: decode steps the counters lag behind the clock (``Engine.peek_running``).
    """
    p_tot = attn = n_p = d_tot = d_max = 0
    kv = 0.0
    for r in running:
        t = r.num_tokens + lag
        c = r.num_computed_tokens + lag
        p = t - c
        d = r.max_tokens - r.num_output_tokens - lag
        if p > 1:
            p_tot += p
            attn += p * p + 2 * c * p
            n_p += 1
            d -= 1
        else:
            t -= 1
        if d > 0:
            d_tot += d
            if d > d_max:
                d_max = d
            kv += d * t + d * (d - 1) / 2
    return p_tot, attn, n_p, d_tot, d_max, kv


def _engine_running_sums(engine: Any) -> _Sums:
    """``_running_sums`` of an engine's running requests at its clock.

    While a decode stretch is pending (``Engine.peek_running``) every item is a decode, and the
    sums are polynomials in the lag: their integer aggregates are kept in the stretch's memo
    once, so later decisions read them in O(1). ``kv`` is a sum of integers (``d * (d - 1)`` is
    even), so computing it exactly and converting once gives the float the loop would.
    """
    running, lag, memo = engine.peek_running()
    if memo is None:
        return _running_sums(running, lag)
    agg = memo.get("backlog")
    if agg is None:
        # At the stretch's start: d = tokens still allowed, t = context (num_tokens - 1).
        n = s_d = s_t = s_dt = s_dd = 0
        d_max = 0
        for r in running:
            d = r.max_tokens - r.num_output_tokens
            t = r.num_tokens - 1
            n += 1
            s_d += d
            s_t += t
            s_dt += d * t
            s_dd += d * d
            if d > d_max:
                d_max = d
        agg = memo["backlog"] = (n, s_d, s_t, s_dt, s_dd, d_max)
    n, s_d, s_t, s_dt, s_dd, d_max = agg
    # With e = d - lag (>= 1: no request finishes inside the stretch) and t + lag:
    # kv = sum e * (t + lag) + e * (e - 1) / 2.
    s_e = s_d - n * lag
    s_et = s_dt + lag * s_d - lag * s_t - n * lag * lag
    s_ee = s_dd - 2 * lag * s_d + n * lag * lag
    kv = s_et + (s_ee - s_e) // 2
    if kv >= 2**53:  # beyond exact floats: sum in the loop's order instead
        return _running_sums(running, lag)
    return 0, 0, 0, s_e, d_max - lag, float(kv)


def _price(cost_model: Any, sums: _Sums, max_num_batched_tokens: int) -> float:
    """The backlog in seconds from its accumulators (see :func:`estimate_backlog_s`)."""
    p_tot, attn, n_p, d_tot, d_max, kv = sums
    total = 0.0
    if p_tot:
        k = -(-p_tot // max_num_batched_tokens)
        total += k * cost_model.step_time(p_tot / k, attn / k, 0, n_p / k, 0)
    if d_max:
        n = d_tot / d_max
        total += d_max * cost_model.step_time(n, 0, kv / d_max, 0, n)
    return float(total)


class InstanceView:
    """Read-only state of one instance, as a router sees it at a routing decision.

    Counts include requests already routed here that have not joined the waiting queue yet
    (they arrived while a step was running, or are PD hand-offs still in transfer). Every
    property reads the instance live; a cluster hands the same view of an instance to every
    decision (``backlog_s`` is cached within one decision only).
    """

    __slots__ = ("index", "name", "gpu", "model", "role", "_engine", "_backlog", "_instance")

    def __init__(
        self,
        index: int,
        name: str,
        gpu: str | None,
        model: str | None,
        role: str,
        engine: Engine,
        instance: Any = None,
    ) -> None:
        self.index = index
        """Instance index in the cluster (what ``route`` returns)."""
        self.name = name
        """Instance name (from the cluster spec)."""
        self.gpu = gpu
        """GPU the instance's cost model describes (None for ``constant:`` models)."""
        self.model = model
        """Model the instance serves (None when its cost model does not say)."""
        self.role = role
        """``both``, ``prefill`` or ``decode`` (PD disaggregation)."""
        self._engine = engine
        self._backlog: float | None = None
        self._instance = instance
        """The cluster's ``Instance`` (its count of finished requests), or None: the engine's."""

    @property
    def now(self) -> float:
        """The instance's clock (end of its last step)."""
        return self._engine.now

    @property
    def num_pending(self) -> int:
        """Requests routed here that have not joined the waiting queue yet."""
        e = self._engine
        return len(e._pending) - e._next_arrival

    @property
    def num_waiting(self) -> int:
        """Waiting (and preempted) requests, plus routed ones not yet admitted to the queue."""
        return len(self._engine.waiting) + self.num_pending

    @property
    def num_running(self) -> int:
        """Requests in the running batch."""
        return self._engine.num_running

    @property
    def num_requests(self) -> int:
        """Outstanding requests: waiting + running."""
        return self.num_waiting + self.num_running

    @cython.locals(e=Engine)
    def _num_requests(self) -> int:
        """``num_requests`` as a C call (the least-load router's scan)."""
        e = self._engine
        return len(e.waiting) + len(e._pending) - e._next_arrival + len(e._running)

    @property
    def num_prefill(self) -> int:
        """Running requests with more than one token to compute (prompt, chunk or refill)."""
        return self._engine.running_prefills

    @property
    def num_decode(self) -> int:
        """Running requests generating one token per step."""
        return self.num_running - self.num_prefill

    @property
    def num_free_blocks(self) -> int:
        """Free KV blocks (cached-but-unused ones count as free)."""
        return self._engine.num_free_blocks

    @property
    def num_gpu_blocks(self) -> int:
        """KV blocks including vLLM's null block."""
        return self._engine.config.num_gpu_blocks

    @property
    def block_size(self) -> int:
        """Tokens per KV block."""
        return self._engine.config.block_size

    @property
    def free_kv_tokens(self) -> int:
        """Free KV capacity in tokens (``num_free_blocks * block_size``)."""
        return self.num_free_blocks * self.block_size

    @property
    def kv_usage(self) -> float:
        """Fraction of usable KV blocks in use."""
        return 1.0 - self.num_free_blocks / (self.num_gpu_blocks - 1)

    @property
    def num_finished(self) -> int:
        """Requests finished here so far."""
        if self._instance is not None:  # a cluster may drop finished requests (keep_finished)
            return self._instance.num_finished
        return len(self._engine.finished)

    @property
    def cost_model(self) -> Any:
        """The instance's cost model (price a request: ``cost_model.step_time(...)``)."""
        return self._engine.cost_model

    @property
    @cython.locals(e=Engine, r=Request, ext=cython.long, d=cython.long, items=list)
    def backlog_s(self) -> float:
        """Estimated seconds of outstanding work (see :func:`estimate_backlog_s`)."""
        if self._backlog is None:
            e = self._engine
            items: list[tuple[int, int, int, int]] = []
            for r in e.waiting:
                ext = r.num_external_tokens if r.num_output_tokens == 0 else 0
                d = r.max_tokens - r.num_output_tokens - 1
                items.append((r.num_tokens - ext, ext, d, r.num_tokens))
            external = e._external
            for s in e._pending[e._next_arrival :]:
                ext = external.get(s.request_id, 0) if external else 0
                items.append((s.prompt_len - ext, ext, s.max_tokens - 1, s.prompt_len))
            # Running requests first, then waiting, then routed-but-not-arrived (the order of
            # the float sums); running ones are summed without building their items.
            sums = _backlog_sums(items, _engine_running_sums(e))
            self._backlog = _price(e.cost_model, sums, e.config.max_num_batched_tokens)
        return self._backlog

    def load(self, metric: str) -> float:
        """This instance's load by ``metric`` (lower is less loaded); see ``LOAD_METRICS``."""
        if metric == "backlog":
            return self.backlog_s
        if metric == "requests":
            return float(self.num_requests)
        if metric == "kv":
            return -float(self.free_kv_tokens)
        raise ConfigError(f"unknown load metric {metric!r}; choose one of {list(LOAD_METRICS)}")

    def __repr__(self) -> str:
        return (
            f"InstanceView({self.index}, {self.name!r}, waiting={self.num_waiting}, "
            f"running={self.num_running}, free_blocks={self.num_free_blocks})"
        )


@runtime_checkable
class RouterProtocol(Protocol):
    """What the cluster needs of a router: ``route`` (``reset``, ``bind_runner`` optional)."""

    def route(
        self,
        request: RequestSpec,
        job: JobState | None,
        instances: Sequence[InstanceView],
        now: float,
    ) -> int:
        """The ``index`` of the chosen instance view."""
        ...


class Router:
    """Base class of routers (subclassing is optional: any object with ``route`` works)."""

    name = "router"
    oracle = False
    """Whether it reads true output lengths (never unflagged on a leaderboard)."""

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
        """Called once before a run with every instance and the run's seed."""

    def route(
        self,
        request: RequestSpec,
        job: JobState | None,
        instances: Sequence[InstanceView],
        now: float,
    ) -> int:
        """Pick an instance for ``request`` among ``instances``; returns its ``index``."""
        raise NotImplementedError


class RoundRobinRouter(Router):
    """Cycles through the cluster's instances, skipping those that are not candidates."""

    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
        """Start again at instance 0."""
        self._next = 0

    def route(self, request, job, instances, now) -> int:
        """The first candidate at or after the turn (cyclically by index)."""
        chosen = min(instances, key=lambda v: (v.index - self._next) % (1 << 30))
        self._next = chosen.index + 1
        return chosen.index


class RandomRouter(Router):
    """A uniformly random candidate (seeded)."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
        """Seed from the constructor's seed, else the run's."""
        self._rng = np.random.default_rng([self.seed if self.seed is not None else seed, 1])

    def route(self, request, job, instances, now) -> int:
        """Draw one candidate."""
        return instances[int(self._rng.integers(len(instances)))].index


class LeastLoadRouter(Router):
    """The least loaded candidate by a metric (ProServe's MinLoad); ties to the lowest index."""

    def __init__(self, metric: str = "backlog") -> None:
        if metric not in LOAD_METRICS:
            raise ConfigError(
                f"least-load metric must be one of {list(LOAD_METRICS)}, got {metric!r}"
            )
        self.metric = metric
        self.name = f"least-load:{metric}"

    @cython.locals(v=InstanceView, best=InstanceView, load=cython.double, low=cython.double)
    def route(self, request, job, instances, now) -> int:
        """Minimise the load (``min`` by ``(load, index)``: the first lowest on ties)."""
        metric = self.metric
        if metric != "requests" or type(instances) is not list:
            return min(instances, key=lambda v: (v.load(metric), v.index)).index
        best = None
        low = 0.0
        for v in instances:  # the same choice, without a key tuple per view
            if type(v) is not InstanceView:
                return min(instances, key=lambda v: (v.load(metric), v.index)).index
            load = v._num_requests()
            if best is None or load < low or (load == low and v.index < best.index):
                best, low = v, load
        if best is None:
            raise ValueError("least-load: no candidate instances")
        return best.index


class PowerOfTwoRouter(Router):
    """Power of two choices: two distinct random candidates, the less loaded wins (seeded)."""

    def __init__(self, metric: str = "backlog", seed: int | None = None) -> None:
        if metric not in LOAD_METRICS:
            raise ConfigError(
                f"power-of-two metric must be one of {list(LOAD_METRICS)}, got {metric!r}"
            )
        self.metric = metric
        self.seed = seed
        self.name = f"power-of-two:{metric}"
        self._rng = np.random.default_rng(seed)

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
        """Seed from the constructor's seed, else the run's."""
        self._rng = np.random.default_rng([self.seed if self.seed is not None else seed, 2])

    def route(self, request, job, instances, now) -> int:
        """Sample two, keep the less loaded (lower index on ties)."""
        if len(instances) == 1:
            return instances[0].index
        i, j = self._rng.choice(len(instances), size=2, replace=False).tolist()
        a, b = instances[i], instances[j]
        return min((a, b), key=lambda v: (v.load(self.metric), v.index)).index


_REGISTRY: dict[str, tuple[Callable[..., Any], str]] = {}


def register_router(name: str, factory: Callable[..., Any], help: str) -> None:
    """Register a router under ``name``; duplicate names are errors."""
    if name in _REGISTRY:
        raise ConfigError(f"a router named {name!r} is already registered")
    _REGISTRY[name] = (factory, help)


register_router("round-robin", RoundRobinRouter, "instances in turn")
register_router("random", RandomRouter, "uniformly random instance (seeded)")
register_router("least-load", LeastLoadRouter, "least estimated backlog in seconds (MinLoad)")
register_router("power-of-two", PowerOfTwoRouter, "two random instances, the less loaded (backlog)")
for _metric in LOAD_METRICS:
    register_router(
        f"least-load:{_metric}",
        lambda _m=_metric, **kw: LeastLoadRouter(metric=_m, **kw),
        f"least load by {_metric}",
    )
    register_router(
        f"power-of-two:{_metric}",
        lambda _m=_metric, **kw: PowerOfTwoRouter(metric=_m, **kw),
        f"power of two choices by {_metric} (seeded)",
    )


def list_routers() -> dict[str, str]:
    """Registered router names with one-line descriptions."""
    _load_reference_routers()
    return {name: help for name, (_, help) in _REGISTRY.items()}


def registered_policies(router: bool) -> tuple[dict[str, str], str]:
    """The built-in routers (``router``) or registered schedulers, and which of the two.

    For checking a policy name a user gave for a task: ``(names with descriptions, what)``.
    """
    if router:
        return list_routers(), "router"
    from llmsched_gym.policies.registry import list_policies

    return list_policies(), "scheduler"


def make_router(name: str, **kwargs: Any) -> Any:
    """Build a registered router; unknown names list the choices."""
    if name not in _REGISTRY:
        _load_reference_routers()
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), _REGISTRY, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(f"unknown router {name!r}{hint}; available: {', '.join(_REGISTRY)}")
    return _REGISTRY[name][0](**kwargs)


def router_name(router: Any) -> str:
    """A router's display name (its ``name`` attribute, else its class name)."""
    name = getattr(router, "name", None)
    return name if isinstance(name, str) else type(router).__name__


_reference_loaded = False


def _load_reference_routers() -> None:
    """Register the papers' routers (ProServe's GoRouting, HexGen's dispatchers) on first need.

    Their packages live with the policies and register through this registry's
    ``register_router``, handed to them by the policies registry: the cluster names no paper.
    """
    global _reference_loaded
    if not _reference_loaded:
        _reference_loaded = True
        from llmsched_gym.policies.registry import register_reference_routers

        register_reference_routers(register_router)
