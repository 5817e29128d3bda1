"""Any project policy inside vLLM: its ``schedule(ctx)`` runs on vLLM's own queues and KV cache.

``policy_step_scheduler_cls(policy)`` returns a subclass of vLLM 0.32's ``Scheduler`` whose
``schedule()`` hands the step to the policy through :class:`LiveStepContext`, the simulator's
``StepContext`` interface (``llmsched_gym.core.engine``) implemented on vLLM's state:

* ``ctx.running`` / ``ctx.waiting`` are vLLM's running list and waiting queue, seen through
  :class:`LiveRequest` views that carry the simulator's ``Request`` attributes (one view per
  request for its whole life, so policies may key state by it);
* ``schedule_running``, ``admit``, ``preempt`` and ``lookup`` do what vLLM's ``schedule()`` does
  for the same decision: ``KVCacheManager.allocate_slots`` (with the full-sequence admission
  gate and prefix-cache hits from ``get_computed_blocks``), the request state changes, and vLLM's
  ``_preempt_request`` (recompute; back to the head of the waiting queue);
* the step's token budget, ``max_num_seqs`` and the other limits are vLLM's.

After the policy returns, the scheduler output is assembled the way vLLM's ``schedule()`` ends
(new and cached request data, ``_update_after_schedule``), so the model runner sees an ordinary
step. The same policy object therefore drives the simulator and a real engine: Sarathi, InferMax's
presets, ProServe's SlideBatching, RelServe, or a trained agent wrapped as a policy. Run with
``LiveRun(timer="model")`` the live clock advances by the cost model's step time, and a policy
whose decisions depend on time (deadlines, SLOs) makes the same decisions as in the simulator
step for step (tested).

What is not supported (refused at construction): speculative decoding, KV connectors, encoder
inputs, LoRA, pipeline parallelism, async scheduling and prefix replay windows — none of which
the simulator models.
"""

from __future__ import annotations

import time
from typing import Any

from llmsched_gym.backends.vllm._deps import import_vllm
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import (
    check_admit,
    check_admit_tokens,
    check_oracle,
    check_schedule_running,
)
from llmsched_gym.core.request import RequestStatus
from llmsched_gym.errors import ConfigError, PolicyError

__all__ = ["LiveRequest", "LiveStepContext", "policy_step_scheduler_cls"]

_WAITING_STATES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


class LiveRequest:
    """A vLLM request seen through the simulator's ``Request`` attributes.

    ``spec`` is the workload's ``RequestSpec`` (SLOs, weight, client, job fields) when the live
    run registered one, else a spec rebuilt from the vLLM request. ``max_tokens`` is the
    request's own cap and ``_output_len`` the length it generates (the live backend submits
    ``ignore_eos=True``: exactly its trace output length). ``first_token_time`` and
    ``last_token_time`` are on the live run's clock.
    """

    __slots__ = ("_r", "_sched", "seq", "spec")

    def __init__(self, request: Any, sched: Any, seq: int, spec: Any) -> None:
        self._r = request
        self._sched = sched
        self.seq = seq
        self.spec = spec

    def __repr__(self) -> str:
        return f"LiveRequest({self._r.request_id!r}, {self.status.name})"

    request_id = property(lambda self: self._r.request_id)
    arrival_time = property(lambda self: self.spec.arrival_time)
    priority = property(lambda self: self.spec.priority)
    max_tokens = property(lambda self: self.spec.max_tokens)
    _output_len = property(lambda self: self._r.max_tokens)
    num_prompt_tokens = property(lambda self: self._r.num_prompt_tokens)
    num_tokens = property(lambda self: self._r.num_tokens)
    num_computed_tokens = property(lambda self: self._r.num_computed_tokens)
    num_output_tokens = property(lambda self: self._r.num_output_tokens)
    num_preemptions = property(lambda self: self._r.num_preemptions)
    num_cached_tokens = property(lambda self: max(self._r.num_cached_tokens, 0))

    @property
    def status(self) -> RequestStatus:
        """The simulator's status of the request."""
        return self._sched._status_of(self._r)

    @property
    def blocks(self) -> list[int]:
        """The request's KV block ids (one attention group)."""
        return list(self._sched.kv_cache_manager.get_block_ids(self._r.request_id)[0])

    @property
    def first_token_time(self) -> float | None:
        """When its first output token was delivered (live clock), or None."""
        times = self._sched._token_times(self._r.request_id)
        return times[0] if times else None

    @property
    def last_token_time(self) -> float | None:
        """When its last output token was delivered (live clock), or None."""
        times = self._sched._token_times(self._r.request_id)
        return times[-1] if times else None


class _WaitingView:
    """vLLM's waiting queue as the simulator's queue: iteration in order, ``peek``, ``first``."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: LiveStepContext) -> None:
        self._ctx = ctx

    def _queue(self) -> Any:
        return self._ctx._sched.waiting

    def __len__(self) -> int:
        return len(self._queue())

    def __bool__(self) -> bool:
        return bool(self._queue())

    def __iter__(self) -> Any:
        view = self._ctx._sched._view
        return iter([view(r) for r in self._queue()])

    def __contains__(self, req: Any) -> bool:
        # vLLM keeps exactly its WAITING and PREEMPTED requests in this queue (the features
        # that park requests elsewhere, connectors and async loads, are refused).
        return isinstance(req, LiveRequest) and req.status in _WAITING_STATES

    def peek(self) -> LiveRequest:
        """The head of the queue (the next vLLM would admit)."""
        return self._ctx._sched._view(self._queue().peek_request())

    def first(self, k: int) -> list[LiveRequest]:
        """The first ``k`` requests in queue order."""
        out = []
        for r in self._queue():
            if len(out) >= k:
                break
            out.append(self._ctx._sched._view(r))
        return out


class LiveStepContext:
    """The simulator's ``StepContext`` on one vLLM ``schedule()`` call (see the module doc)."""

    def __init__(self, sched: Any, now: float, step: int) -> None:
        self._sched = sched
        self.config: EngineConfig = sched.llmsched_config
        self.block_size = self.config.block_size
        self.max_num_seqs = self.config.max_num_seqs
        self.now = now
        self.step = step
        self.token_budget = sched.max_num_scheduled_tokens
        self.scheduled: dict[LiveRequest, int] = {}
        self.new: list[tuple[LiveRequest, int]] = []
        self.resumed: list[tuple[LiveRequest, int]] = []
        self.preempted: list[LiveRequest] = []
        view = sched._view
        self.running: list[LiveRequest] = [view(r) for r in sched.running]
        """Running requests in vLLM's order; admit/preempt keep it equal to vLLM's list."""
        self.waiting = _WaitingView(self)
        self.num_eligible = len(sched.running) + len(sched.waiting)
        self.held = False
        # vLLM's per-step lists, filled by the calls below.
        self._new_reqs: list[Any] = []
        self._resumed_reqs: list[Any] = []
        self._running_reqs: list[Any] = []
        self._new_blocks: dict[str, Any] = {}
        self._num_tokens: dict[str, int] = {}
        self._timestamp = time.monotonic()

    # -- reading -----------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Free KV blocks now (cached-but-unused blocks count as free)."""
        return self._sched.kv_cache_manager.block_pool.get_num_free_blocks()

    @property
    def num_gpu_blocks(self) -> int:
        """Total KV blocks including the null block."""
        return self._sched.kv_cache_manager.block_pool.num_gpu_blocks

    def lookup(self, req: LiveRequest) -> tuple[Any, int]:
        """Prefix hit ``req`` would get if admitted now: (vLLM's hit blocks, hit tokens).

        A resumed request that kept computed tokens (none under recompute) reports them.
        """
        r = req._r
        if r.num_computed_tokens:
            return self._sched.kv_cache_manager.empty_kv_cache_blocks, r.num_computed_tokens
        blocks, tokens, _ = self._sched.kv_cache_manager.get_computed_blocks(r)
        return blocks, tokens

    def surely_blocked(self, req: LiveRequest) -> bool:
        """Never sure without a lookup here: ``admit`` decides (False means "maybe")."""
        return False

    def blocks_needed_to_admit(self, req: LiveRequest) -> int:
        """Free blocks the full-sequence admission gate would ask of ``req`` now.

        Blocks of the whole sequence beyond its prefix hit, plus the hit blocks that sit in the
        free queue (touching them takes them out of it), as the simulator's KV manager counts.
        """
        blocks, tokens = self.lookup(req)
        r = req._r
        need = -(-r.num_tokens // self.block_size)
        if r.num_computed_tokens or not tokens:
            return need
        hit = blocks.blocks[0]
        return need - len(hit) + sum(1 for b in hit if b.ref_cnt == 0)

    def job(self, req: LiveRequest) -> None:
        """Jobs (multi-stage workflows) do not run on the live backend."""
        return None

    def true_output_len(self, req: LiveRequest) -> int:
        """The request's real output length; only policies flagged ``oracle = True`` may ask."""
        check_oracle(self._sched.bound_policy, req)
        return req._output_len

    # -- acting ------------------------------------------------------------------------------
    def schedule_running(
        self, req: LiveRequest, num_tokens: int, num_lookahead_tokens: int = 0
    ) -> bool:
        """Schedule ``num_tokens`` more tokens of a running request; False if blocks run out."""
        r = req._r
        remaining = r.num_tokens - r.num_computed_tokens
        check_schedule_running(req, num_tokens, remaining, self.token_budget, self.scheduled)
        sched = self._sched
        new_blocks = sched.kv_cache_manager.allocate_slots(
            r,
            num_tokens,
            num_lookahead_tokens=max(num_lookahead_tokens, sched.num_lookahead_tokens),
        )
        if new_blocks is None:
            return False
        self._running_reqs.append(r)
        self._new_blocks[r.request_id] = new_blocks
        self._num_tokens[r.request_id] = num_tokens
        self.scheduled[req] = num_tokens
        self.token_budget -= num_tokens
        return True

    def schedule_in_order(
        self,
        reqs: Any,
        start: int = 0,
        *,
        threshold: int = 0,
        reserve: int = 0,
        decode: bool = True,
        prefill: bool = True,
    ) -> int:
        """``StepContext.schedule_in_order`` (same contract): ``reqs[start:]`` in order.

        Running requests get their tokens left, cut to ``threshold`` (when > 0) and to the
        budget above ``reserve``; others are skipped, as are decodes without ``decode`` and
        prefills without ``prefill``. Returns the index of the first request whose blocks ran
        out (nothing changed for it), or -1 when the loop ended.
        """
        for i in range(start, len(reqs)):
            avail = self.token_budget - reserve
            if avail <= 0:
                break
            req = reqs[i]
            if req.status is not RequestStatus.RUNNING:
                continue
            n = req.num_tokens - req.num_computed_tokens
            if n <= 0 or (n == 1 and not decode) or (n > 1 and not prefill):
                continue
            if 0 < threshold < n:
                n = threshold
            if not self.schedule_running(req, min(n, avail)):
                return i
        return -1

    def admit(
        self,
        req: LiveRequest,
        num_tokens: int | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = True,
        hit: tuple[Any, int] | None = None,
    ) -> int | None:
        """Admit a waiting request with its prefix hit; returns tokens scheduled, or None."""
        sched = self._sched
        r = req._r
        check_admit(req, len(sched.running), self.max_num_seqs)
        did_lookup = r.num_computed_tokens == 0
        blocks, hit_tokens = hit if hit is not None else self.lookup(req)
        kvm = sched.kv_cache_manager
        if not hasattr(blocks, "blocks"):  # the simulator's "no hit" ([], 0): no lookup made
            if hit_tokens:
                raise PolicyError(
                    f"admit({req.request_id!r}): hit must come from ctx.lookup (got {hit!r})"
                )
            blocks = kvm.empty_kv_cache_blocks
        remaining = r.num_tokens - hit_tokens
        n = min(remaining, self.token_budget) if num_tokens is None else num_tokens
        check_admit_tokens(req, num_tokens, n, remaining, self.token_budget)
        new_blocks = kvm.allocate_slots(
            r,
            n,
            num_new_computed_tokens=hit_tokens if did_lookup else 0,
            new_computed_blocks=blocks if did_lookup else kvm.empty_kv_cache_blocks,
            num_lookahead_tokens=max(num_lookahead_tokens, sched.num_lookahead_tokens),
            full_sequence_must_fit=full_sequence_must_fit,
            has_scheduled_reqs=bool(sched.running),
        )
        if new_blocks is None:
            return None
        if did_lookup:
            kvm.record_prefix_cache_stats(r, hit_tokens)
            if r.prefill_stats and r.num_preemptions <= 0:
                r.prefill_stats.set(
                    num_prompt_tokens=r.num_prompt_tokens,
                    num_local_cached_tokens=hit_tokens,
                    num_external_cached_tokens=0,
                )
        waiting = sched.waiting
        if waiting.peek_request() is r:
            waiting.pop_request()
        else:
            waiting.remove_request(r)
        sched.deferred_waiting.discard(r)
        sched.running.append(r)
        self.running.append(req)
        if sched.log_stats:
            from vllm.v1.engine import EngineCoreEventType

            r.record_event(EngineCoreEventType.SCHEDULED, self._timestamp)
        if r.status == sched._vllm_status.WAITING:
            self._new_reqs.append(r)
            self.new.append((req, hit_tokens))
        else:
            self._resumed_reqs.append(r)
            self.resumed.append((req, hit_tokens))
        self._new_blocks[r.request_id] = kvm.get_blocks(r.request_id)
        self._num_tokens[r.request_id] = n
        self.scheduled[req] = n
        self.token_budget -= n
        r.status = sched._vllm_status.RUNNING
        r.num_computed_tokens = hit_tokens
        if hit_tokens + n < r.num_tokens:
            sched._inflight_prefills.add(r)
        return n

    def preempt(self, req: LiveRequest) -> None:
        """Preempt a running request by recompute (vLLM's ``_preempt_request``).

        Tokens it was already scheduled this step return to the budget; it goes back to the
        head of the waiting queue (or into the priority heap).
        """
        sched = self._sched
        r = req._r
        if req.status is not RequestStatus.RUNNING:
            raise PolicyError(f"preempt({req.request_id!r}): request is not running")
        sched.running.remove(r)
        self.running.remove(req)
        n = self.scheduled.pop(req, 0)
        if n:
            self.token_budget += n
            rid = r.request_id
            self._num_tokens.pop(rid)
            self._new_blocks.pop(rid)
            for lst in (self._running_reqs, self._new_reqs, self._resumed_reqs):
                if r in lst:
                    lst.remove(r)
            self.new = [(v, h) for v, h in self.new if v is not req]
            self.resumed = [(v, h) for v, h in self.resumed if v is not req]
        sched._preempt_request(r, self._timestamp)
        self.preempted.append(req)


def _refuse_unsupported(sched: Any) -> None:
    """The step delegation covers what the simulator models; refuse the rest clearly."""
    problems = []
    if sched.num_spec_tokens:
        problems.append("speculative decoding")
    if sched.connector is not None or getattr(sched, "ec_connector", None) is not None:
        problems.append("a KV / encoder-cache connector")
    if sched.lora_config:
        problems.append("LoRA")
    if sched.use_pp:
        problems.append("pipeline parallelism")
    if sched.scheduler_config.async_scheduling:
        problems.append("async scheduling")
    if sched.prefix_replay_tokens:
        problems.append("prefix replay windows (sliding-window / Mamba models)")
    if getattr(sched, "need_mamba_block_aligned_split", False):
        problems.append("Mamba block-aligned chunking")
    if getattr(sched, "is_encoder_decoder", False):
        problems.append("encoder-decoder models")
    if problems:
        raise ConfigError(
            "a project policy schedules vLLM steps only for what the simulator models; this "
            "engine uses " + ", ".join(problems)
        )


class _EngineShim:
    """What ``SchedulingPolicy.reset(engine)`` reads, for a policy living inside vLLM."""

    def __init__(self, config: EngineConfig, cost_model: Any, policy: Any) -> None:
        self.config = config
        self._cost_model = cost_model
        self.policy = policy
        self.jobs = None

    @property
    def cost_model(self) -> Any:
        """The cost model given to ``policy_scheduler_cls``; an error names the fix if none."""
        if self._cost_model is None:
            raise ConfigError(
                f"policy {getattr(self.policy, 'name', self.policy)!r} reads the engine's cost "
                "model; inside vLLM pass one: policy_scheduler_cls(policy, cost_model=...)"
            )
        return self._cost_model


def policy_step_scheduler_cls(policy: Any, cost_model: Any = None) -> type:
    """A vLLM ``Scheduler`` subclass whose every step is ``policy.schedule(ctx)``.

    Args:
        policy: a project ``SchedulingPolicy`` object (the class holds it, so the engine must run
            in-process: the live backend's ``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
        cost_model: what the policy's ``reset`` gets as ``engine.cost_model`` (estimators such as
            ProServe's are fitted on it): a cost model or a profile spec; None means the policy
            needs none (a policy that reads it then fails with an error naming this).
    """
    import_vllm()
    from vllm.v1.core.sched.output import NewRequestData, SchedulerOutput
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.request import RequestStatus as VllmStatus

    if cost_model is not None and isinstance(cost_model, str):
        from llmsched_gym.cost.registry import load_cost_model

        cost_model = load_cost_model(cost_model)

    status_map = {
        VllmStatus.WAITING: RequestStatus.WAITING,
        VllmStatus.RUNNING: RequestStatus.RUNNING,
        VllmStatus.PREEMPTED: RequestStatus.PREEMPTED,
    }

    class PolicyStepScheduler(Scheduler):
        """vLLM's scheduler with each step's batch built by a project policy."""

        bound_policy = policy
        _vllm_status = VllmStatus

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _refuse_unsupported(self)
            sc = self.scheduler_config
            cc = self.cache_config
            self.llmsched_config = EngineConfig(
                max_num_batched_tokens=int(sc.max_num_batched_tokens),
                max_num_seqs=int(sc.max_num_seqs),
                block_size=int(cc.block_size),
                num_gpu_blocks=int(self.kv_cache_manager.block_pool.num_gpu_blocks),
                enable_prefix_caching=bool(cc.enable_prefix_caching),
                long_prefill_token_threshold=int(sc.long_prefill_token_threshold),
                scheduling_policy=str(sc.policy),
            )
            wanted = policy.queue_policy(self.llmsched_config)
            if wanted != str(sc.policy):
                raise ConfigError(
                    f"policy {policy.name!r} needs scheduling_policy={wanted!r}, the engine has "
                    f"{sc.policy!r}"
                )
            self._views: dict[str, LiveRequest] = {}
            self._next_seq = 0
            self.live_run: Any = None
            """The ``LiveRun`` replaying a workload here (clock, specs, token times), if any."""
            self._finished_views: list[LiveRequest] = []
            self.llmsched_step = 0
            self.reset_policy()

        def reset_policy(self) -> None:
            """``policy.reset`` as a simulator run starts it (each live run calls it first)."""
            self._finished_views = []
            self.llmsched_step = 0
            self._next_seq = 0
            policy.reset(_EngineShim(self.llmsched_config, cost_model, policy))

        # -- views -------------------------------------------------------------------------
        def _view(self, r: Any) -> LiveRequest:
            v = self._views.get(r.request_id)
            if v is None:
                raise ConfigError(f"request {r.request_id!r} was not added through this scheduler")
            return v

        def _status_of(self, r: Any) -> RequestStatus:
            s = status_map.get(r.status)
            if s is not None:
                return s
            return RequestStatus.FINISHED if r.is_finished() else RequestStatus.WAITING

        def _token_times(self, request_id: str) -> list[float]:
            run = self.live_run
            if run is None:
                return []
            st = run._states.get(request_id)
            return [] if st is None else st.token_times

        def add_request(self, request: Any) -> None:
            from llmsched_gym.core.request import RequestSpec

            run = self.live_run
            spec = None
            if run is not None and request.request_id in run._states:
                spec = run._states[request.request_id].spec
            if spec is None:
                spec = RequestSpec(
                    request.request_id,
                    float(request.arrival_time),
                    int(request.num_prompt_tokens),
                    int(request.max_tokens),
                    int(request.max_tokens),
                    priority=int(request.priority),
                )
            self._views[request.request_id] = LiveRequest(request, self, self._next_seq, spec)
            self._next_seq += 1
            super().add_request(request)

        def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            v = self._views.pop(request.request_id, None)
            if v is not None:
                self._finished_views.append(v)
            return super()._free_request(request, *args, **kwargs)

        def after_step(self, end: float) -> None:
            """The live run's step ended at ``end``: the policy's ``on_finish`` for finishers."""
            done, self._finished_views = self._finished_views, []
            for v in done:
                policy.on_finish(v, end)

        # -- the step ----------------------------------------------------------------------
        def schedule(self, throttle_prefills: bool = False) -> Any:
            self.current_step += 1
            self.kv_cache_manager.new_step_starts()
            now = self.live_run.now if self.live_run is not None else time.monotonic()
            ctx = LiveStepContext(self, now, self.llmsched_step)
            self.llmsched_step += 1
            if self._pause_state != self._paused_all:
                policy.schedule(ctx)
            return self._output(ctx)

        def _output(self, ctx: LiveStepContext) -> Any:
            """Assemble the scheduler output as the end of vLLM's ``schedule()`` does."""
            num_tokens = ctx._num_tokens
            total = sum(num_tokens.values())
            assert total <= self.max_num_scheduled_tokens
            assert len(self.running) <= self.max_num_running_reqs
            new_reqs, resumed, running = ctx._new_reqs, ctx._resumed_reqs, ctx._running_reqs
            blocks = ctx._new_blocks
            if self.use_v2_model_runner:
                new_reqs = new_reqs + resumed
                resumed = []
                new_data = [
                    NewRequestData.from_request(
                        r,
                        blocks[r.request_id].get_block_ids(),
                        r._all_token_ids,
                        uses_mrope=self.model_uses_mrope,
                    )
                    for r in new_reqs
                ]
            else:
                new_data = [
                    NewRequestData.from_request(
                        r, blocks[r.request_id].get_block_ids(), uses_mrope=self.model_uses_mrope
                    )
                    for r in new_reqs
                ]
            cached = self._make_cached_request_data(running, resumed, num_tokens, {}, blocks)
            if not self.use_v2_model_runner:
                self.prev_step_scheduled_req_ids.clear()
                self.prev_step_scheduled_req_ids.update(num_tokens.keys())
            self.kv_cache_manager.take_boundary_state_offloads()
            copies, cow_retained = self.kv_cache_manager.take_kv_cache_block_copies()
            if copies:
                self._free_cow_retained_blocks(cow_retained, self.sched_step_seq + 1)
            out = SchedulerOutput(
                scheduled_new_reqs=new_data,
                scheduled_cached_reqs=cached,
                num_scheduled_tokens=num_tokens,
                total_num_scheduled_tokens=total,
                scheduled_spec_decode_tokens={},
                scheduled_encoder_inputs={},
                scheduled_encoder_input_stats=None,
                preempted_req_ids=self.reset_preempted_req_ids,
                finished_req_ids=self.finished_req_ids,
                free_encoder_mm_hashes=self.encoder_cache_manager.get_freed_mm_hashes(),
                new_block_ids_to_zero=self._get_new_block_ids_to_zero(),
                has_sync_kv_loads=False,
                kv_cache_block_copies=copies or None,
                kv_connector_block_state=None,
                num_spec_tokens_to_schedule=self.num_spec_tokens,
                ec_manager_metadata=self.encoder_cache_manager.get_manager_metadata(),
            )
            if self.defer_block_free and total > 0:
                self.sched_step_seq += 1
            self._update_after_schedule(out)
            return out

    from vllm.v1.core.sched.interface import PauseState

    PolicyStepScheduler._paused_all = PauseState.PAUSED_ALL
    PolicyStepScheduler.__name__ = PolicyStepScheduler.__qualname__ = (
        f"PolicyStepScheduler[{getattr(policy, 'name', type(policy).__name__)}]"
    )
    return PolicyStepScheduler
