"""Project policies inside vLLM: a ``scheduler_cls`` whose ordering and victims come from a policy.

``policy_scheduler_cls(policy)`` returns a subclass of vLLM's ``Scheduler`` bound to one project
policy object. Before every ``schedule()`` it asks the policy, through the same ``Request``
attributes the simulator's policies read (a read-only view of each vLLM request), for

* the order of the waiting queue (``policy.priority_key``): the waiting requests get dense ranks
  in that order, and vLLM's priority heap is rebuilt on them;
* the preemption order (``policy.victim_key``): running requests get dense ranks, so vLLM's
  "preempt ``max(running, key=(priority, arrival_time))``" takes the policy's victim;

then lets vLLM's own ``schedule()`` do the rest (budgets, chunking, KV allocation, admission
with its head-of-line rule, preemption by recompute, the output) and restores every request's
own priority afterwards. Admission, chunking and the phase structure stay vLLM's, so this covers
the policies whose ``schedule`` *is* vLLM V1's with their own order and victims: ``vllm-v1``
(FCFS or priority queue) and every ``static-priority:*`` key — the same objects the simulator
runs (``make_policy("static-priority:shortest-prompt")`` drives both backends). Policies that
change admission or chunk sizes (Sarathi, InferMax, ProServe, RelServe...) get
``llmsched_gym.backends.vllm.stepctx``'s scheduler instead, whose every step is the policy's
``schedule(ctx)`` on vLLM's queues and KV cache; ``policy_scheduler_cls`` picks the right one.
"""

from __future__ import annotations

import heapq
from typing import Any

from llmsched_gym.backends.vllm._deps import import_vllm
from llmsched_gym.errors import ConfigError

__all__ = ["RequestView", "check_policy", "is_reorder_policy", "policy_scheduler_cls"]


class RequestView:
    """A vLLM request seen through the simulator's ``Request`` attributes (read-only).

    ``priority`` is the request's own priority (not the rank the scheduler writes during a
    step); ``_output_len`` is ``max_tokens`` (the live backend submits ``ignore_eos=True``, so a
    request generates exactly that many tokens); ``seq`` is the order the scheduler first saw it.
    """

    __slots__ = ("_r", "priority", "seq")

    def __init__(self, request: Any, priority: int, seq: int) -> None:
        self._r = request
        self.priority = priority
        self.seq = seq

    request_id = property(lambda self: self._r.request_id)
    arrival_time = property(lambda self: self._r.arrival_time)
    num_prompt_tokens = property(lambda self: self._r.num_prompt_tokens)
    num_tokens = property(lambda self: self._r.num_tokens)
    num_computed_tokens = property(lambda self: self._r.num_computed_tokens)
    num_output_tokens = property(lambda self: len(self._r.output_token_ids))
    max_tokens = property(lambda self: self._r.max_tokens)
    _output_len = property(lambda self: self._r.max_tokens)
    num_preemptions = property(lambda self: self._r.num_preemptions)


def check_policy(policy: Any) -> None:
    """Refuse policies whose decisions go beyond vLLM V1's order and victims."""
    from llmsched_gym.policies.vllm_v1 import VllmV1Policy

    if not isinstance(policy, VllmV1Policy):
        raise ConfigError(
            f"policy {getattr(policy, 'name', policy)!r} builds its own batches; inside vLLM only "
            "policies that reorder vLLM V1 (vllm-v1, static-priority:*) run so far"
        )
    cls = type(policy)
    for method in ("schedule", "schedule_running_phase"):
        if getattr(cls, method) is not getattr(VllmV1Policy, method):
            raise ConfigError(
                f"policy {policy.name!r} overrides {method}(); inside vLLM only its priority_key "
                "and victim_key are used, so it would not behave as in the simulator"
            )
    if getattr(policy, "preemption_rule", "0.32") != "0.32":
        raise ConfigError("inside vLLM 0.32 the preemption rule is vLLM 0.32's ('0.32')")


def is_reorder_policy(policy: Any) -> bool:
    """Whether ``policy`` is vLLM V1's step with its own order and victims (``check_policy``)."""
    try:
        check_policy(policy)
    except ConfigError:
        return False
    return True


def _dense_ranks(views: list[RequestView], key: Any) -> dict[str, int]:
    """Request id -> rank of its key (equal keys share a rank), lowest key first."""
    ranks: dict[str, int] = {}
    last = object()
    rank = -1
    for v in sorted(views, key=key):
        k = key(v)
        if k != last:
            rank += 1
            last = k
        ranks[v.request_id] = rank
    return ranks


def policy_scheduler_cls(policy: Any, cost_model: Any = None, mode: str = "auto") -> type:
    """A vLLM ``Scheduler`` subclass driven by ``policy`` (pass it as ``scheduler_cls``).

    ``mode="ranks"`` keeps vLLM's own ``schedule()`` and feeds it the policy's order and victims
    (only for ``is_reorder_policy`` policies); ``mode="step"`` runs the policy's ``schedule``
    on every step (``stepctx.policy_step_scheduler_cls``; ``cost_model`` is what its ``reset``
    sees as the engine's); ``auto`` takes ``ranks`` when it applies. The class holds the policy
    object itself, so it only works in-process (the live backend's
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``). The engine's ``scheduling_policy`` must be the
    policy's queue discipline (``priority`` for ``static-priority:*``); the scheduler checks.
    """
    if mode not in ("auto", "ranks", "step"):
        raise ConfigError(f"mode must be 'auto', 'ranks' or 'step', got {mode!r}")
    if mode == "step" or (mode == "auto" and not is_reorder_policy(policy)):
        from llmsched_gym.backends.vllm.stepctx import policy_step_scheduler_cls

        return policy_step_scheduler_cls(policy, cost_model)
    check_policy(policy)
    import_vllm()
    from vllm.v1.core.sched.request_queue import PriorityRequestQueue
    from vllm.v1.core.sched.scheduler import Scheduler

    class PolicyScheduler(Scheduler):
        """vLLM's scheduler with the waiting order and preemption victims of a project policy."""

        bound_policy = policy

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            cfg = self.scheduler_config
            wanted = policy.queue_policy(_QueueConfig(str(cfg.policy)))
            if wanted != str(cfg.policy):
                raise ConfigError(
                    f"policy {policy.name!r} needs scheduling_policy={wanted!r}, the engine has "
                    f"{cfg.policy!r}"
                )
            self._priority_queue = wanted == "priority"
            self._own_priority: dict[str, int] = {}
            self._seq: dict[str, int] = {}
            self._next_seq = 0

        def add_request(self, request: Any) -> None:
            self._own_priority[request.request_id] = request.priority
            self._seq[request.request_id] = self._next_seq
            self._next_seq += 1
            super().add_request(request)

        def _views(self, requests: Any) -> list[RequestView]:
            return [
                RequestView(r, self._own_priority[r.request_id], self._seq[r.request_id])
                for r in requests
            ]

        def schedule(self, *args: Any, **kwargs: Any) -> Any:
            if not self._priority_queue:  # FCFS: vLLM's order and victim are the policy's
                return super().schedule(*args, **kwargs)
            waiting = list(self.waiting)
            ranks = _dense_ranks(self._views(waiting), policy.priority_key)
            ranks.update(_dense_ranks(self._views(self.running), policy.victim_key))
            touched = waiting + list(self.running)
            for r in touched:
                r.priority = ranks[r.request_id]
            self._reheap()
            try:
                return super().schedule(*args, **kwargs)
            finally:
                for r in touched:
                    r.priority = self._own_priority[r.request_id]
                self._reheap()

        def _reheap(self) -> None:
            if isinstance(self.waiting, PriorityRequestQueue):
                heapq.heapify(self.waiting._heap)

        def _free_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            out = super()._free_request(request, *args, **kwargs)
            self._own_priority.pop(request.request_id, None)
            self._seq.pop(request.request_id, None)
            return out

    PolicyScheduler.__name__ = PolicyScheduler.__qualname__ = (
        f"PolicyScheduler[{getattr(policy, 'name', type(policy).__name__)}]"
    )
    return PolicyScheduler


class _QueueConfig:
    """The one config field ``SchedulingPolicy.queue_policy`` reads."""

    def __init__(self, scheduling_policy: str) -> None:
        self.scheduling_policy = scheduling_policy
