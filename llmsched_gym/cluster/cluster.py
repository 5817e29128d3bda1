"""Many engines under one clock: routing in time order, jobs across instances, PD hand-offs.

Each instance IS an :class:`~llmsched_gym.core.engine.Engine` with its own config, cost model,
KV cache and local scheduler; the cluster only decides where requests go and when each engine
may advance. The loop takes events (arrivals to route, PD hand-offs) in the order of
``(time, sequence number)``: the requests added, from their list sorted by arrival, and the events
that arise during the run (job stages released, hand-offs) from a heap. A streamed workload
(``Cluster.stream``) takes the list's place, refilled batch by batch from its iterator as the
loop reaches the end of the batch, so the whole workload is never held:

* let ``t`` be the earliest event and ``s`` the earliest ``engine.next_event_time()`` (ties to
  the lowest instance index);
* if ``t <= s``, handle the event: an arrival is routed (the router picks an instance among the
  candidates, ``engine.enqueue(spec)``), a hand-off picks a decode instance and enqueues the
  continuation after the KV transfer;
* else advance that engine by one step or fast-forwarded stretch with ``until=t``, so no stretch
  runs past a routing decision.

With jobs or PD, a finish creates an arrival (a stage, a hand-off), so ``until`` is also bounded
by the other instances' next possible finishes (``Engine.next_finish_start``: a decode stretch's
last step); the steps that may finish run in the order of a lock-step loop (which bounds ``until``
by the other instances' next step starts, ``Cluster.wide_bound = False``), with the same results.

A router therefore sees each busy instance as of the end of the step it was running when the
request arrived (vLLM's router would see that step in flight); idle instances as they are.

Jobs use one global :class:`~llmsched_gym.core.job.JobTracker`: a finish listener on every engine
reports finished requests, and the stages they release go onto the heap as arrivals, so a
workflow's next stage may run on any instance (HexGen-Text2SQL's dispatcher routes each stage's
requests). Engines get a read-only view of the tracker, so local policies still see ``ctx.job``.

Everything is deterministic: heap ties go by sequence number, instance ties by index, and seeded
routers draw from the run's seed.

Size: one module because the workload's intake (``add``, ``stream``), the loop (``_advance``)
and the finish listener share the loop's private event state (the arrival list and its sequence
numbers, the heap, the pending decision); split, each part would reach into the others' state,
and the compiled loop would call across modules.
"""

from __future__ import annotations

import copy
import functools
import heapq
import itertools
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cython

from llmsched_gym._gc import gc_paused
from llmsched_gym.cluster.folded import Column, FinishedRecords
from llmsched_gym.cluster.pd import PDConfig, decode_spec, prefill_spec, transfer_seconds
from llmsched_gym.cluster.routers import InstanceView, LeastLoadRouter, make_router
from llmsched_gym.config import API_COST_MODEL, EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy
from llmsched_gym.core.job import Job, JobState, JobTracker
from llmsched_gym.core.request import Request, RequestSpec
from llmsched_gym.errors import ConfigError, PolicyError, TraceError
from llmsched_gym.kv.manager import cdiv

__all__ = [
    "ROLES",
    "Cluster",
    "FinishedRecords",
    "Instance",
    "InstanceSpec",
    "RECORDS",
    "RoutingDecision",
    "run_cluster",
]

ROLES = ("both", "prefill", "decode")
"""Instance roles: ``both`` serves whole requests; ``prefill`` / ``decode`` split them (PD)."""

_ARRIVAL, _HANDOFF = 0, 1

_FLUSH = 4096
"""Rows the finished-request columns buffer as Python objects before packing them."""

RECORDS = ("full", "summary")
"""What a cluster keeps of finished requests: every record field (``full``) or only what the
summary and the per-instance table read (``summary``; see ``Cluster``)."""

_STREAM_BATCH = 1024
"""Requests a streamed workload is pulled by (``Cluster.stream``)."""
_STREAM_SEQS = 1 << 40
"""Sequence numbers a stream reserves: its requests order before every event pushed after it
started, as the requests of a list added with ``add`` do."""
_TRIM = 1024
"""Admitted requests an engine's arrival list may hold before the cluster drops them
(``Cluster(keep_finished=False)``; ``_enqueue``)."""


@dataclass(frozen=True)
class InstanceSpec:
    """What one instance runs: cost model, engine settings, local scheduler, role."""

    name: str
    cost_model: Any = API_COST_MODEL
    """A cost-model spec string or a cost model object."""
    engine: EngineConfig | Mapping[str, Any] | None = None
    """vLLM engine settings; ``num_gpu_blocks`` is derived from the cost profile when unset."""
    scheduler: str | SchedulingPolicy = "vllm-v1"
    """A scheduler name, or a policy object (copied for every further instance that shares it)."""
    role: str = "both"


class Instance:
    """One running instance: its engine plus what records and routers need to know of it."""

    def __init__(self, index: int, spec: InstanceSpec, policy: SchedulingPolicy, engine: Engine):
        self.index = index
        self.name = spec.name
        self.role = spec.role
        self.engine = engine
        self.policy = policy
        model = engine.cost_model
        self.cost_model_name = getattr(model, "name", str(spec.cost_model))
        self.gpu: str | None = getattr(model, "gpu", None)
        self.model: str | None = getattr(model, "model", None)
        self.tp: int | None = getattr(model, "tp", None)
        self.busy_s = 0.0
        """Seconds the engine spent in steps (its clock minus idle jumps)."""
        self.num_prefill_copies = 0
        """PD prefill copies it ran."""
        self.num_finished = 0
        """Requests finished here (PD prefill copies included)."""
        self.itl_values = Column("d")
        self.itl_weights = Column("B")
        """The engine's inter-token gaps and multiplicities, packed as they come
        (``drain_itl``); the engine's own lists hold the newest ones."""

    def view(self) -> InstanceView:
        """A fresh read-only view for a routing decision."""
        return InstanceView(
            self.index, self.name, self.gpu, self.model, self.role, self.engine, self
        )

    def drain_itl(self) -> None:
        """Move the engine's inter-token samples into ``itl_values`` / ``itl_weights``.

        The engine's lists are emptied in place (its step loop appends to the same objects).
        """
        engine = self.engine
        values, weights = engine.itl_values, engine.itl_weights
        self.itl_values.buffer.extend(values)
        self.itl_weights.buffer.extend(weights)
        self.itl_values.flush()
        self.itl_weights.flush()
        values.clear()
        weights.clear()

    def itl(self) -> tuple[Any, Any]:
        """Every inter-token sample so far: (gaps float64, multiplicities int64)."""
        self.drain_itl()
        return self.itl_values.numpy("float64"), self.itl_weights.numpy("int64")

    def fits(self, prompt_len: int, output_len: int, max_tokens: int) -> bool:
        """Whether this instance takes such a request and can ever hold it.

        Prompt + ``max_tokens`` within its ``max_model_len`` (vLLM's rule), prompt and output
        within its KV cache.
        """
        cfg = self.engine.config
        if cfg.max_model_len is not None and prompt_len + max_tokens > cfg.max_model_len:
            return False
        return cdiv(prompt_len + output_len - 1, cfg.block_size) <= cfg.num_gpu_blocks - 1


def _fit_limits(entry: Sequence[Instance]) -> tuple[float, float] | None:
    """The tightest ``max_model_len`` and KV capacity (tokens) over ``entry`` (``fits``' limits).

    ``fits`` holds for a request when prompt + max_tokens is within the first and prompt +
    output - 1 within the second, for every instance at once. None for no instances.
    """
    if not entry:
        return None
    lens = [x.engine.config.max_model_len for x in entry]
    caps = [(x.engine.config.num_gpu_blocks - 1) * x.engine.config.block_size for x in entry]
    return (min(float("inf") if n is None else n for n in lens), min(caps))


@dataclass
class RoutingDecision:
    """A request waiting for a router: what ``Cluster.next_decision`` returns."""

    request: RequestSpec
    job: JobState | None
    instances: list[InstanceView]
    """The candidates (instances that take new requests and can hold this one)."""
    now: float


class _JobsView:
    """What an engine sees of the cluster's job tracker: lookups only, no releases."""

    def __init__(self, tracker: JobTracker) -> None:
        self._tracker = tracker

    def job_of(self, spec: RequestSpec) -> JobState | None:
        return self._tracker.job_of(spec)

    def on_finish(self, spec: RequestSpec, now: float) -> list[RequestSpec]:
        return []  # the cluster's finish listener releases stages (globally)

    @property
    def states(self) -> dict[str, JobState]:
        """Job states by id (the tracker's)."""
        return self._tracker.states

    @property
    def jobs(self) -> dict[str, Job]:
        """Jobs by id (the tracker's)."""
        return self._tracker.jobs


class Cluster:
    """Instances, a router and the global event loop (see the module docstring).

    Use ``run()`` with the router given here, or drive routing yourself (a Gymnasium routing
    env): ``while (d := cluster.next_decision()) is not None: cluster.dispatch(choice)``.

    Between decisions an instance may hold a decode stretch advanced on its clock but not yet
    applied to its requests (``lazy_stretches``; see ``Engine.sync``): ``InstanceView``'s
    counts, free blocks and backlog read through it, and ``Engine.running`` / ``Engine.kv``
    apply it first, so every reader sees the state stepping would have reached.
    ``lazy_stretches=False`` applies every stretch at once (same records, slower).

    Each request's record fields are folded into ``records`` (compact columns) as it finishes,
    and the engines' inter-token samples into typed arrays (``Instance.drain_itl``), so a long
    run holds tens of bytes per request. With ``keep_finished=False`` (``run_cluster``) the
    finished ``Request`` objects are dropped as well: the engines' ``finished`` lists stay
    empty, their arrival lists drop admitted specs, and ``order`` / ``final`` hold the requests
    not finished yet; ``True`` (default) keeps them for callers that read them (environments,
    forks, tests). ``records="summary"`` keeps no spec of a finished request either (only the
    numbers of ``FinishedRecords(keep_specs=False)``): the result then has the summary and the
    per-instance tables but no per-request records, and jobs and PD disaggregation, whose
    records need the specs, are refused.
    """

    wide_bound = True
    """With jobs or PD, let an instance run ahead of the others up to their next possible
    finishes (``_advance``); False runs them in lock-step (the reference; same results)."""

    def __init__(
        self,
        instances: Sequence[InstanceSpec | Mapping[str, Any]],
        router: Any = "round-robin",
        *,
        pd: PDConfig | Mapping[str, Any] | None = None,
        seed: int = 0,
        fast_forward: bool = True,
        record_steps: bool = False,
        lazy_stretches: bool = True,
        keep_finished: bool = True,
        records: str = "full",
    ) -> None:
        from llmsched_gym.cost.registry import as_cost_model
        from llmsched_gym.policies.registry import make_policy
        from llmsched_gym.simulation import resolve_config

        specs = [s if isinstance(s, InstanceSpec) else InstanceSpec(**s) for s in instances]
        if not specs:
            raise ConfigError("a cluster needs at least one instance, got none")
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"instance names must be unique, got duplicates {dup}")
        roles = {s.role for s in specs}
        for s in specs:
            if s.role not in ROLES:
                raise ConfigError(
                    f"instance {s.name!r}: role must be one of {list(ROLES)}, got {s.role!r}"
                )
        self.disaggregated = bool(roles & {"prefill", "decode"})
        if records not in RECORDS:
            raise ConfigError(f"records must be one of {list(RECORDS)}, got {records!r}")
        if records == "summary" and self.disaggregated:
            raise ConfigError(
                "records='summary' does not support PD disaggregation (a request's record "
                "merges its prefill and decode parts by request id); use records='full'"
            )
        if self.disaggregated:
            if "prefill" not in roles or "decode" not in roles:
                missing = "decode" if "prefill" in roles else "prefill"
                raise ConfigError(
                    f"PD disaggregation needs at least one prefill and one decode instance; no "
                    f"instance has role {missing!r} (roles: {names} -> "
                    f"{[s.role for s in specs]})"
                )
        if isinstance(pd, Mapping):
            pd = PDConfig(**pd)
        self.pd: PDConfig | None = (pd or PDConfig()) if self.disaggregated else None
        self.seed = seed
        self.router = make_router(router) if isinstance(router, str) else router
        if not callable(getattr(self.router, "route", None)):
            raise ConfigError(f"a router needs a route() method, got {type(self.router).__name__}")
        self.decode_router = None
        if self.pd is not None:
            self.decode_router = make_router(self.pd.decode_router)
        self.tracker = JobTracker()
        jobs_view = _JobsView(self.tracker)
        self.instances: list[Instance] = []
        used_policies: set[int] = set()
        for i, s in enumerate(specs):
            model = as_cost_model(s.cost_model, f"instance {s.name}: cost_model")
            cfg = resolve_config(
                dict(s.engine) if isinstance(s.engine, Mapping) else s.engine, model
            )
            if isinstance(s.scheduler, str):
                policy = make_policy(s.scheduler)
            else:
                policy = s.scheduler
                if id(policy) in used_policies:  # one policy object per engine
                    policy = copy.deepcopy(policy)
                used_policies.add(id(s.scheduler))
            engine = Engine(
                cfg, policy, model, fast_forward=fast_forward, record_steps=record_steps
            )
            engine.jobs = jobs_view  # type: ignore[assignment]  # lookups for ctx.job only
            # Decode stretches cut only by the next routing decision stay pending across it
            # (``Engine.sync``): an instance that gets no request continues its stretch
            # instead of applying it and starting a new one. Records are identical either way.
            engine.lazy_stretches = lazy_stretches
            inst = Instance(i, s, policy, engine)
            engine.finish_listeners.append(self._listener(inst))
            self.instances.append(inst)
        self.entry = [x for x in self.instances if x.role in ("both", "prefill")]
        """Instances that take new requests."""
        self.decoders = [x for x in self.instances if x.role == "decode"]
        self._fit_all = _fit_limits(self.entry) if not self.decoders else None
        """(shortest max_model_len, smallest KV cache in tokens) of the entry instances: a
        request within both fits every one of them (``_candidates``' shortcut)."""
        self._causal = bool(self.decoders)
        """Finishes create arrivals (PD hand-offs, job stages): bound stretches (see the loop)."""
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._arrivals: list[RequestSpec] = []
        """Requests added, sorted by arrival, routed from ``_next_arrival`` on: the events of
        the heap's keys ``(arrival_time, _arrivals_seq + position)``, without a tuple each."""
        self._next_arrival = 0
        self._arrivals_seq = 0
        self._stream: Iterator[Any] | None = None
        """A streamed workload's iterator while it has requests left (``stream``)."""
        self._stream_last: RequestSpec | None = None
        """The stream's latest request pulled (its arrival bounds the next one's)."""
        self.order: dict[str, int] = {}
        """Request id -> routing order (the row order of the records)."""
        self.num_routed = 0
        self.refused: list[RequestSpec] = []
        """Requests refused at the front door as longer than ``max_model_len`` (``add``)."""
        self._in_prefill: dict[str, RequestSpec] = {}
        """PD: request id -> original spec, while its copy runs on a prefill instance."""
        self.handoffs: dict[str, tuple[Request, int, float]] = {}
        """PD: request id -> (prefill Request, prefill instance, transfer seconds)."""
        self.final: dict[str, int] = {}
        """Request id -> instance that finished it (its record's ``instance_id``)."""
        self.finish_callbacks: list[Callable[[int], None]] = []
        self.keep_finished = keep_finished
        self.records = FinishedRecords(keep_specs=records == "full")
        """Every finished request's record fields (``cluster.records.cluster_result``)."""
        self._views = [x.view() for x in self.instances]
        """One view per instance, handed to every routing decision (``_decision``)."""
        self._entry_indices = frozenset(x.index for x in self.entry)
        self._pending: tuple[float, int, int, Any] | None = None
        self._pending_candidates: list[Instance] = []
        self._times: list[float] | None = None
        """Each instance's next event time, kept across decisions (``next_decision``)."""
        self._stale = -1
        """The instance whose next event time ``dispatch`` changed (-1: none)."""
        self.num_advances = 0
        """Engine advances (steps or pieces of stretches) the loop has made."""
        self._finish = array("d")
        self._finish_stop = array("d")
        """Each instance's ``Engine.next_finish_start`` and the stop it was priced to
        (``_advance``)."""
        self._counts: array | None = None
        """Each instance's outstanding requests (``InstanceView.num_requests``), kept up to date
        as engines move while ``run`` routes by least requests itself (``_least_requests``)."""
        self._reset_router(self.router)
        if self.decode_router is not None:
            self._reset_router(self.decode_router)

    def _reset_router(self, router: Any) -> None:
        bind = getattr(router, "bind_runner", None)
        if callable(bind):  # a router that replays workloads runs them through this module
            bind(run_cluster)
        reset = getattr(router, "reset", None)
        if callable(reset):
            reset([x.view() for x in self.instances], self.seed)

    # -- workload -----------------------------------------------------------------------------
    def add(self, items: Sequence[RequestSpec | Job]) -> None:
        """Add requests and jobs (root stages arrive with their job); checks routability.

        A request that every instance able to take it would refuse as longer than its
        ``max_model_len`` is refused here (``refused``), as vLLM's servers answer it with HTTP
        400; a job cannot lose a request, so in a job that is an error.
        """
        specs = []
        jobs = [x for x in items if isinstance(x, Job)]
        if jobs and not self.records.keep_specs:
            raise ConfigError(
                "records='summary' does not support jobs (job metrics are built from the "
                "per-request records); use records='full'"
            )
        for x in items:
            if isinstance(x, Job):
                continue
            if self._accept(x):
                specs.append(x)
        for job in jobs:
            for stage in job.stages:
                for x in stage.requests:
                    self._check_routable(x)
        specs.sort(key=lambda s: s.arrival_time)
        if self._stream is None and self._next_arrival == len(self._arrivals):  # the sorted list
            self._arrivals = specs
            self._next_arrival = 0
            self._arrivals_seq = self._seq
            self._seq += len(specs)
        else:  # the list is still being routed: these go on the heap, after it in ties
            for x in specs:
                self._push(x.arrival_time, _ARRIVAL, x)
        if jobs:
            self._causal = True
            for x in self.tracker.add(jobs):
                self._push(x.arrival_time, _ARRIVAL, x)

    def _accept(self, x: Any) -> bool:
        """Check a request added or streamed: True to route it, False if refused (``refused``).

        Raises for anything but a ``RequestSpec``, a ``cancel_time``, and a request no
        instance can ever hold.
        """
        if not isinstance(x, RequestSpec):
            raise ConfigError(f"a workload holds RequestSpecs and Jobs, got {type(x).__name__}")
        if x.cancel_time is not None:
            raise ConfigError(
                f"request {x.request_id!r} has a cancel_time: aborts are simulated on a "
                "single engine (simulate), not yet in a cluster; drop the field"
            )
        if self._candidates(x):
            return True
        if self._refusals(x):
            self.refused.append(x)
            return False
        self._check_routable(x)  # raises: no instance can ever hold it
        return False  # pragma: no cover - _check_routable raised

    def stream(self, specs: Iterable[RequestSpec]) -> None:
        """Route requests pulled lazily from ``specs``, an iterable sorted by arrival time.

        The workload is never held whole: the loop pulls ``_STREAM_BATCH`` requests at a time
        when it has routed the previous ones, so a generator (``iter_servegen``) can produce a
        day of traffic hour by hour. Each request is checked as ``add`` checks it, when pulled.
        The run is the one of ``add`` with the same requests as a list, except that a PD
        continuation's placeholder token id (unique either way) comes from another range.

        Raises:
            ConfigError: If a stream or an added list is still being routed, or (when pulled)
                an item is not a ``RequestSpec`` (jobs are added with ``add``).
            TraceError: When a pulled request arrives before the one pulled before it.
        """
        if self._stream is not None or self._next_arrival < len(self._arrivals):
            raise ConfigError(
                "stream(): the cluster is still routing an earlier workload (a stream or a list "
                "given to add()); stream one workload at a time, or add it with add()"
            )
        self._stream = iter(specs)
        self._stream_last = None
        self._arrivals = []
        self._next_arrival = 0
        self._arrivals_seq = self._seq
        self._seq += _STREAM_SEQS

    def _pull(self) -> None:
        """Refill ``_arrivals`` with the stream's next requests; end the stream when none are left.

        A batch's requests keep the sequence numbers that follow the previous batch's.
        """
        self._arrivals_seq += len(self._arrivals)
        batch: list[RequestSpec] = []
        last = self._stream_last
        while not batch:
            pulled = 0
            for x in itertools.islice(self._stream, _STREAM_BATCH):
                pulled += 1
                if isinstance(x, Job):
                    raise ConfigError(
                        f"a streamed workload holds RequestSpecs only, got job {x.job_id!r}; "
                        "add jobs with add() (or run_cluster with a list)"
                    )
                if (
                    isinstance(x, RequestSpec)
                    and last is not None
                    and (x.arrival_time < last.arrival_time)
                ):
                    raise TraceError(
                        f"streamed request {x.request_id!r} arrives at {x.arrival_time!r} s, "
                        f"before the request streamed before it ({last.request_id!r} at "
                        f"{last.arrival_time!r} s): a stream must be sorted by arrival_time; "
                        "sort it, or pass a list (run_cluster and add sort lists)"
                    )
                if self._accept(x):
                    batch.append(x)
                last = x
            if not pulled:
                self._stream = None  # exhausted: let the iterator go
                break
        self._stream_last = last
        self._arrivals = batch
        self._next_arrival = 0

    def _push(self, t: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._heap, (t, self._seq, kind, payload))
        self._seq += 1

    def _candidates(self, spec: RequestSpec) -> list[Instance]:
        out_len = min(spec.output_len, spec.max_tokens)
        fit_all = self._fit_all
        if fit_all is not None:  # within the tightest limits: every entry instance fits
            if spec.prompt_len + spec.max_tokens <= fit_all[0] and (
                spec.prompt_len + out_len - 1 <= fit_all[1]
            ):
                return self.entry  # (read-only)
        decodable = None
        out = []
        for x in self.entry:
            if x.role == "both":
                if x.fits(spec.prompt_len, out_len, spec.max_tokens):
                    out.append(x)
            elif x.fits(spec.prompt_len, 1, 1):  # the prefill copy (``prefill_spec``)
                if decodable is None:
                    decodable = out_len == 1 or any(
                        d.fits(spec.prompt_len, out_len, spec.max_tokens) for d in self.decoders
                    )
                if decodable:
                    out.append(x)
        return out

    def _refusals(self, spec: RequestSpec) -> list[str]:
        """vLLM's refusal of ``spec`` by each instance whose ``max_model_len`` it exceeds."""
        out = []
        for x in self.instances:
            reason = x.engine.config.refusal(spec)
            if reason is not None:
                out.append(f"{x.name}: {reason}")
        return out

    def _check_routable(self, spec: RequestSpec) -> None:
        if self._candidates(spec):
            return
        refusals = self._refusals(spec)
        if refusals:
            raise ConfigError(
                f"request {spec.request_id!r} of a job is longer than the max_model_len of the "
                f"instances that could serve it; {'; '.join(refusals)}"
            )
        out_len = min(spec.output_len, spec.max_tokens)
        sizes = ", ".join(
            f"{x.name}: {x.engine.config.num_gpu_blocks - 1} blocks of {x.engine.config.block_size}"
            for x in self.instances
        )
        raise TraceError(
            f"request {spec.request_id!r} is unroutable: prompt_len={spec.prompt_len} + "
            f"output_len={out_len} fits no instance's KV cache that could serve it ({sizes} "
            "usable); drop the request or give the instances more KV blocks"
        )

    # -- the loop -----------------------------------------------------------------------------
    def _listener(self, inst: Instance) -> Callable[[list[Request], float], None]:
        """``inst``'s finish listener, bound to this cluster.

        A bound method rather than a closure, so copies of the cluster (deepcopy, pickle) call
        their own handler, not the original's.
        """
        return functools.partial(self._on_finish, inst)

    @cython.locals(
        req=Request, engine=Engine, index=cython.long, keep=cython.bint, keep_specs=cython.bint
    )
    def _on_finish(self, inst: Instance, finished: list[Request], t: float) -> None:
        (arrival, scheduled, first_token, finish, prompt, output, cached, computed, preemptions,
         priority, external, instance, seq, order_col) = self.records.buffers  # fmt: skip
        records = self.records
        specs = records.specs
        keep_specs = records.keep_specs
        slo = records.slo_buffers
        order = self.order
        keep = self.keep_finished
        index = inst.index
        for req in finished:  # the record's fields (``FinishedRecords``)
            spec = req.spec
            if keep_specs:
                specs.append(spec)
            else:
                if slo is None and (
                    spec.slo_ttft_s is not None
                    or spec.slo_tpot_s is not None
                    or spec.deadline_s is not None
                ):
                    slo = records.start_slo()  # NaN for the rows so far, then each row's
                if slo is not None:
                    slo[0].append(spec.slo_ttft_s)
                    slo[1].append(spec.slo_tpot_s)
                    slo[2].append(spec.deadline_s)
            arrival.append(req.arrival_time)
            scheduled.append(req.first_scheduled_time)
            first_token.append(req.first_token_time)
            finish.append(req.finish_time)
            prompt.append(req.num_prompt_tokens)
            output.append(req.num_output_tokens)
            cached.append(req.num_cached_tokens if req.num_cached_tokens > 0 else 0)
            computed.append(req.num_computed_total)
            preemptions.append(req.num_preemptions)
            priority.append(req.priority)
            external.append(req.num_external_tokens)
            instance.append(index)
            seq.append(req.seq)
            order_col.append(order[req.request_id])
        inst.num_finished += len(finished)
        if len(arrival) >= _FLUSH:
            records.flush()
        engine = inst.engine
        if len(engine.itl_values) >= _FLUSH:
            inst.drain_itl()
        if not keep:
            engine.finished.clear()  # folded above: the Request objects may go
        for req in finished:
            rid = req.request_id
            if inst.role == "prefill":
                spec = self._in_prefill.pop(rid)
                if min(spec.output_len, spec.max_tokens) > 1:
                    self._push(t, _HANDOFF, (spec, req, inst.index))
                    continue
            if keep:
                self.final[rid] = index
            else:
                del order[rid]
            for callback in self.finish_callbacks:
                callback(1)
            released = self.tracker.on_finish(req.spec, t)
            for x in released:
                self._push(x.arrival_time, _ARRIVAL, x)

    def next_decision(self) -> RoutingDecision | None:
        """Advance every engine until a request must be routed; None when the run is over.

        The decision stays pending until ``dispatch``; calling this again returns it again.
        """
        if self._pending is not None or self._advance():
            return self._decision()
        return None

    @cython.locals(
        engine=Engine,
        i=cython.long,
        j=cython.long,
        n=cython.long,
        times=list,
        instances=list,
        s=cython.double,
        tj=cython.double,
        inf=cython.double,
        bound=cython.double,
        t_arr=cython.double,
        finish=cython.double[:],
        finish_stop=cython.double[:],
        wide=cython.bint,
        counts=object,
        views=list,
        view=InstanceView,
        arrivals=list,
        k=cython.long,
        t_list=cython.double,
        from_list=cython.bint,
        stale=cython.long,
        moves=cython.long,
    )
    def _advance(self) -> bool:
        """Advance engines until a request awaits routing (``_pending``); False at the end."""
        heap = self._heap
        instances = self.instances
        inf = float("inf")
        # Each engine's next event time (the clock when it has work, else its next arrival),
        # refreshed for the engine that moved: between two decisions only the cluster changes
        # its engines (advancing one, dispatching to one, or handing a PD request to one).
        times = self._times
        if times is None:
            times = [x.engine.next_event_time() for x in instances]
            self._times = times
        elif self._stale >= 0:
            times[self._stale] = instances[self._stale].engine.next_event_time()
        # Each engine's ``next_finish_start``, with the ``stop`` it was priced to (-inf: to
        # compute): valid until the engine moves or gets a request; recomputed with a later
        # stop when it was cut short and bounds another instance.
        finish = self._finish
        finish_stop = self._finish_stop
        wide = self.wide_bound
        if len(finish) != len(instances):
            finish = self._finish = array("d", [-inf] * len(instances))
            finish_stop = self._finish_stop = array("d", [-inf] * len(instances))
        counts = self._counts
        views = self._views
        stale = self._stale
        if stale >= 0:
            finish[stale] = finish_stop[stale] = -inf
            if counts is not None:
                view = views[stale]
                counts[stale] = view._num_requests()
        self._stale = -1
        moves = 0
        arrivals = self._arrivals
        while True:
            # The next arrival: the sorted list's or the heap's, by (time, sequence number).
            k = self._next_arrival
            if k == len(arrivals) and self._stream is not None:
                self._pull()
                arrivals = self._arrivals
                k = 0
            t_arr = heap[0][0] if heap else inf
            from_list = False
            if k < len(arrivals):
                t_list = arrivals[k].arrival_time
                if t_list < t_arr or (
                    t_list == t_arr and (not heap or self._arrivals_seq + k < heap[0][1])
                ):
                    t_arr = t_list
                    from_list = True
            s = times[0]  # the earliest instance, the first on ties
            i = 0
            n = len(times)
            for j in range(1, n):
                tj = times[j]
                if tj < s:
                    s = tj
                    i = j
            if from_list and t_arr <= s:
                self._next_arrival = k + 1
                event = (t_arr, self._arrivals_seq + k, _ARRIVAL, arrivals[k])
            elif heap and t_arr <= s:
                event = heapq.heappop(heap)
            else:
                event = None
            if event is not None:
                if event[2] == _HANDOFF:
                    self._handoff(event)
                    times = [x.engine.next_event_time() for x in instances]
                    self._times = times
                    for j in range(n):
                        finish[j] = finish_stop[j] = -inf
                    if counts is not None:
                        self._count_requests()
                        counts = self._counts
                    continue
                spec = event[3]
                candidates = self._candidates(spec)
                if not candidates:
                    self._check_routable(spec)
                self._pending = event
                self._pending_candidates = candidates
                self.num_advances += moves
                return True
            if s == inf:
                self.num_advances += moves
                return False
            inst = instances[i]
            engine = inst.engine
            # Without jobs or PD, arrivals are all known and only the next one bounds a
            # stretch. With them, a finish elsewhere can release a job stage or hand a PD
            # request over, so no instance runs a step starting at or after another's next step
            # that may finish a request (``finish``: ``Engine.next_finish_start``, the next step
            # itself unless the instance is in a decode stretch). Then every step that finishes
            # a request runs in the lock-step loop's order (start, then instance), and so do
            # the releases and hand-offs it pushes and the job states it changes; a step that
            # reads those states (a policy's ``ctx.job``: a stepped step, or the start of a
            # stretch) starts at an instance's next step, so every finish the lock-step loop
            # would run before it has run, and none after it. Only stretch steps, which read
            # nothing outside their engine, run ahead of the others' finishes.
            if self._causal:
                bound = t_arr
                for j in range(n):
                    if j == i:
                        continue
                    tj = times[j]
                    if wide:
                        tj = finish[j]
                        if tj < bound and tj >= finish_stop[j]:  # unknown or cut short
                            tj = instances[j].engine.next_finish_start(bound)
                            finish[j] = tj
                            finish_stop[j] = bound
                    if tj < bound:
                        bound = tj
            else:
                bound = t_arr
            if bound > s:
                if not engine.advance(bound):  # pragma: no cover - s < bound guarantees a step
                    raise RuntimeError(f"instance {inst.name!r} did not advance at t={s}")
            else:  # tied with another instance: one step starting at s is safe
                engine.step()
            moves += 1
            inst.busy_s += engine.now - s
            times[i] = engine.next_event_time()
            finish[i] = finish_stop[i] = -inf
            if counts is not None:
                view = views[i]
                counts[i] = view._num_requests()

    def sync(self) -> None:
        """Apply every instance's pending decode stretch (``Engine.sync``), e.g. before records."""
        for x in self.instances:
            x.engine.sync()

    @cython.locals(view=InstanceView, views=list, out=list)
    def _decision(self) -> RoutingDecision:
        t, _, _, spec = self._pending
        views = self._views
        out = [views[x.index] for x in self._pending_candidates]
        for view in out:
            view._backlog = None  # computed afresh for this decision
        return RoutingDecision(spec, self.tracker.job_of(spec), out, t)

    def dispatch(self, index: int) -> None:
        """Send the pending request to instance ``index`` (one of the decision's candidates)."""
        if self._pending is None:
            raise PolicyError("dispatch() without a pending routing decision (next_decision())")
        _, _, _, spec = self._pending
        candidates = self._pending_candidates
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or index not in (
                self._entry_indices if candidates is self.entry
                else [x.index for x in candidates]
            )
        ):  # fmt: skip
            raise PolicyError(
                f"router chose instance {index!r} for request {spec.request_id!r}; the "
                f"candidates are {[x.index for x in candidates]}"
            )
        self._pending = None
        self._stale = index
        inst = self.instances[index]
        self.order[spec.request_id] = self.num_routed
        self.num_routed += 1
        if inst.role == "prefill":
            self._in_prefill[spec.request_id] = spec
            inst.num_prefill_copies += 1
            self._enqueue(inst.engine, prefill_spec(spec), 0)
        else:
            self._enqueue(inst.engine, spec, 0)

    @cython.locals(engine=Engine)
    def _enqueue(self, engine: Engine, spec: RequestSpec, computed_tokens: int) -> None:
        """``engine.enqueue``; without ``keep_finished``, then drop the specs it has admitted.

        An engine keeps every request routed to it in its arrival list (``_pending``) and
        admits from ``_next_arrival`` on; everything reads the list from there, so the admitted
        head can go (it would hold every spec of a long run).
        """
        engine.enqueue(spec, computed_tokens)
        if not self.keep_finished and engine._next_arrival >= _TRIM:
            del engine._pending[: engine._next_arrival]
            engine._next_arrival = 0

    def _handoff(self, event: tuple[float, int, int, Any]) -> None:
        t, seq, _, (spec, prefill_req, p_index) = event
        out_len = min(spec.output_len, spec.max_tokens)
        views = [
            x.view() for x in self.decoders if x.fits(spec.prompt_len, out_len, spec.max_tokens)
        ]
        if not views:  # pragma: no cover - _candidates checked a decoder fits
            raise TraceError(f"request {spec.request_id!r}: no decode instance can hold it")
        index = self.decode_router.route(spec, self.tracker.job_of(spec), views, t)
        if index not in [v.index for v in views]:
            raise PolicyError(
                f"decode router chose instance {index!r} for request {spec.request_id!r}; the "
                f"candidates are {[v.index for v in views]}"
            )
        inst = self.instances[index]
        prefill = self.instances[p_index]
        xfer = transfer_seconds(
            spec.prompt_len, self.pd, prefill.engine.cost_model, inst.engine.cost_model
        )
        self.handoffs[spec.request_id] = (prefill_req, p_index, xfer)
        continuation = decode_spec(spec, t + xfer, token_id=-1 - seq)
        self._enqueue(inst.engine, continuation, spec.prompt_len)

    def run(self, progress: Callable[[int], None] | None = None) -> None:
        """Run to the end, routing every arrival with the cluster's router.

        ``least-load:requests`` over every instance (no PD) is decided here from per-instance
        counts kept as engines move (``_counts``): one pass over a C array per decision instead
        of 64 views, the same choice as ``LeastLoadRouter.route`` (the first lowest).
        """
        if progress is not None:
            self.finish_callbacks.append(progress)
        router = self.router
        route = router.route
        counting = (
            type(router) is LeastLoadRouter
            and router.metric == "requests"
            and len(self.entry) == len(self.instances)
        )
        with gc_paused():
            if counting:
                self._count_requests()
            try:
                while self._pending is not None or self._advance():
                    if counting and self._pending_candidates is self.entry:
                        self.dispatch(self._least_requests())
                    else:
                        d = self._decision()
                        self.dispatch(route(d.request, d.job, d.instances, d.now))
            finally:
                self._counts = None

    @cython.locals(view=InstanceView)
    def _count_requests(self) -> None:
        """Set ``_counts`` to every instance's outstanding requests."""
        counts = array("l")
        for view in self._views:
            counts.append(view._num_requests())
        self._counts = counts

    @cython.locals(
        counts=cython.long[:],
        i=cython.long,
        best=cython.long,
        n=cython.long,
        low=cython.long,
        c=cython.long,
    )
    def _least_requests(self) -> int:
        """The first instance with the fewest outstanding requests (``_counts``)."""
        counts = self._counts
        n = len(counts)
        best = 0
        low = counts[0]
        for i in range(1, n):
            c = counts[i]
            if c < low:
                low = c
                best = i
        return best


def run_cluster(
    items: Sequence[RequestSpec | Job] | Iterable[RequestSpec],
    instances: Sequence[InstanceSpec | Mapping[str, Any]],
    router: Any = "round-robin",
    *,
    pd: PDConfig | Mapping[str, Any] | None = None,
    seed: int = 0,
    fast_forward: bool = True,
    record_steps: bool = False,
    progress: bool = False,
    records: str = "full",
    timeline: bool = False,
) -> Any:
    """Simulate a workload on a cluster without a scenario; returns a ``ClusterResult``.

    Finished requests are folded into the records and dropped as they finish
    (``Cluster(keep_finished=False)``). A list (any ``Sequence``) is added whole and sorted by
    arrival; any other iterable (a generator, ``iter(list)``) is streamed (``Cluster.stream``):
    pulled in batches as the run reaches them, so it must be sorted by arrival time and hold
    requests only, and the workload is never held whole. A stream with ``records="summary"``
    runs in memory that grows by tens of bytes per request plus 9 bytes per inter-token sample
    (about one per instance step), which the exact ITL statistics need.

    Args:
        items: Requests and jobs (a list), or requests sorted by arrival (any other iterable).
        instances: One ``InstanceSpec`` (or mapping of its fields) per instance.
        router: A router name (``make_router``) or object with ``route``.
        pd: PD settings (used when some instance has role ``prefill`` / ``decode``).
        seed: Seed of the seeded routers.
        fast_forward: Let engines advance pure-decode stretches in closed form.
        record_steps: Keep per-step records of every instance.
        progress: Show a progress bar (tqdm) of finished requests.
        records: ``"full"`` (default): every per-request record (``result.requests``), ITL
            samples (``result.itl``) and job records. ``"summary"``: only what
            ``result.summary`` and the per-instance tables need (the same values, bit for bit);
            no per-request records, no ``itl``, no ``stage_shares``; refuses jobs and PD.
        timeline: Record the schedule timeline (``result.timeline``: Chrome trace-event JSON,
            one process per instance; ``llmsched_gym/core/timeline.py``).

    Raises:
        ConfigError: For an empty workload, a bad ``records``, or jobs or PD with
            ``records="summary"``; and, when pulled, for a streamed item that is not a
            ``RequestSpec``.
        TraceError: For a streamed request that arrives before the one streamed before it.
    """
    from llmsched_gym.cluster.records import cluster_result

    if records not in RECORDS:
        raise ConfigError(f"records must be one of {list(RECORDS)}, got {records!r}")
    streamed = not isinstance(items, Sequence)
    if streamed:
        stream = iter(items)
        first = next(stream, None)
        if first is None:
            raise ConfigError("the workload stream holds no requests (it was empty or exhausted)")
        jobs: list[Job] = []
    else:
        items = list(items)
        if not items:
            raise ConfigError("the workload holds no requests")
        jobs = [x for x in items if isinstance(x, Job)]
    with gc_paused():
        t0 = time.perf_counter()
        cluster = Cluster(
            instances, router, pd=pd, seed=seed, fast_forward=fast_forward,
            record_steps=record_steps, keep_finished=False, records=records,
        )  # fmt: skip
        recorder = None
        if timeline:
            from llmsched_gym.core.timeline import TimelineRecorder

            recorder = TimelineRecorder()
            for x in cluster.instances:
                recorder.attach(x.engine, f"{x.name} ({x.role}, {x.policy.name})")
        if streamed:
            cluster.stream(itertools.chain((first,), stream))
        else:
            cluster.add(items)
        if progress:
            from tqdm import tqdm

            total = None  # a stream's length is unknown
            if not streamed:
                total = sum(1 for x in items if not isinstance(x, Job)) + sum(
                    j.num_requests for j in jobs
                )
            with tqdm(total=total, unit="req", desc="simulate cluster", leave=False) as bar:
                cluster.run(progress=bar.update)
        else:
            cluster.run()
        wall = time.perf_counter() - t0
        result = cluster_result(
            cluster, jobs, wall_s=wall, record_steps=record_steps, release_itl=True
        )
        if recorder is not None:
            result.timeline = recorder.trace({"router": result.router})
        return result
