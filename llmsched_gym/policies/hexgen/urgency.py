"""HexGen-Text2SQL's local urgency queue (paper §4.2, Eq. 5-7).

Policy ``hexgen-pq`` runs vLLM V1's step (running requests first, FCFS preemption) but admits
waiting requests in decreasing urgency, recomputed at every step:

* Eq. 5, per-request SLO budget, fixed when the request's stage is released:
  ``budget = (T_SLO - elapsed) * t_bar(q) / (t_bar(q) + sum t_bar(s) for s in remaining)``,
  ``elapsed`` = stage release minus query arrival. ``remaining`` is the query's own copy of
  Hexgen-Flow's 15-call ``STANDARD_WORKFLOW`` (each parallel stage once) with the stages it has
  actually run consumed: a released stage of step ``k`` consumes the next ``k`` in the template
  and drops the template entries it skipped (so remaining ``RV`` rounds are dropped once the
  first ``UT`` runs, as in the code, and a missing ``KW`` is dropped when ``IR`` goes on).
  The released stages come from the job's global state, so every instance sees the same
  bookkeeping. ``template="shared"`` reproduces the code's shared list instead
  (``Relaxed-System-Lab/Hexgen-Flow@396a3ba`` ``core/request.py:219, 243-246``: one module-wide
  list that ``.remove()`` mutates; here one list per instance's policy).
  ``t_bar`` is ``t_comp`` (Eq. 2) averaged over ``cost_models`` (default: this instance's); the
  current request uses its prompt and predicted output, future stages their stage-typical pair.
* Eq. 6: ``U = t_comp^m(q) - (budget - tau)`` with ``tau`` = now minus the stage release.
* Eq. 7: highest urgency first (ties keep queue order). By default a request that does not fit
  is skipped and the next one tried; ``head_of_line=True`` stops at it (the code's behaviour).

Engine mode. By default the policy runs on vLLM V1's continuous batching (the paper deploys
vLLM instances). ``serial_prefill=True`` is Hexgen-Flow's engine step instead (Hexgen-Flow@396a3ba
``core/engine_optimized.py:186-219``, and ``engine.py`` for its RR+FCFS vLLM baseline), decided
by the policy while the engine only prices the batch:

1. a running request whose prompt is not fully computed (a prompt longer than the token budget,
   chunked) continues alone;
2. otherwise the most urgent waiting request (Eq. 7; the queue head with ``fcfs``) is prefilled
   *alone*: at most one admission per step, no decode in the same step. If it does not fit in
   KV memory, no prefill happens this step (the code's head-of-line blocking; with
   ``head_of_line=False`` the next most urgent one is tried instead);
3. otherwise one decode step for every running request (vLLM's running phase, FCFS preemption
   when blocks run out; the code lets such requests skip the step instead).

The code prices a decode step at a per-GPU constant whatever the batch (A100 0.035 s, A6000
0.058 s, L40S 0.0545 s); that is a cost-model property, offered as
:class:`~llmsched_gym.policies.hexgen.pricing.HexGenCodeCost` (``decode_s=...``), not a policy one.

``T_SLO`` is the job's end-to-end SLO (``slo_e2e_s``) unless ``slo_s`` fixes it (the code passes
the base SLO whatever scale is evaluated).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from llmsched_gym.core.engine import StepContext
from llmsched_gym.core.request import Request
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.hexgen.tcomp import StagePredictor, TCompModel, stage_abbr
from llmsched_gym.policies.vllm_v1 import VllmV1Policy
from llmsched_gym.workloads.text2sql import STANDARD_WORKFLOW

__all__ = ["TEMPLATES", "HexGenPQPolicy", "TemplateState", "eq5_budget", "eq6_urgency"]

TEMPLATES = ("per-query", "shared")


def eq5_budget(t_slo: float, elapsed: float, t_bar: float, t_bar_remaining: float) -> float:
    """Eq. 5: ``(T_SLO - elapsed) * t_bar / (t_bar + sum of remaining t_bar)``."""
    total = t_bar + t_bar_remaining
    return (t_slo - elapsed) * (t_bar / total if total > 0 else 1.0)


def eq6_urgency(t_comp: float, budget: float, tau: float) -> float:
    """Eq. 6: ``t_comp - (budget - tau)``."""
    return t_comp - (budget - tau)


class TemplateState:
    """Remaining steps of one query's standard workflow (each parallel stage once).

    Args:
        template: Step abbreviations in workflow order (default ``STANDARD_WORKFLOW``).
    """

    def __init__(self, template: Sequence[str] = STANDARD_WORKFLOW) -> None:
        self.remaining: list[str] = list(template)

    def consume(self, abbr: str) -> None:
        """A stage of step ``abbr`` started: drop the template up to and including its match.

        No match (e.g. a fifth revise round) consumes nothing.
        """
        try:
            i = self.remaining.index(abbr)
        except ValueError:
            return
        if abbr == "UT" or abbr in ("GC", "GUT", "EV"):
            del self.remaining[: i + 1]
        else:
            # IR/KW/RV: drop only skipped entries of the same phase before the match.
            del self.remaining[i]
            if abbr == "IR" and "KW" in self.remaining[:i]:
                self.remaining.remove("KW")

    def consume_shared(self, abbr: str) -> None:
        """The code's rule: remove one ``abbr``; at a ``UT`` remove every ``RV``."""
        if abbr == "UT":
            self.remaining[:] = [a for a in self.remaining if a != "RV"]
        if abbr in self.remaining:
            self.remaining.remove(abbr)


class HexGenPQPolicy(VllmV1Policy):
    """Urgency-guided local priority queue (Eq. 5-7) on vLLM V1's step.

    Args:
        trace: Trace whose per-step means predict outputs and give stage-typical pairs.
        cost_models: Cost models (objects or spec strings) averaged into ``t_bar`` (Eq. 5's mean
            over instances); None uses this instance's.
        slo_s: Fixed ``T_SLO`` in seconds; None uses each job's ``slo_e2e_s``.
        head_of_line: Stop admitting at the most urgent request that does not fit (the code).
        template: ``"per-query"`` (paper, default) or ``"shared"`` (the code's shared list).
        fcfs: Admit in queue order instead (the WB+FCFS ablation through the same policy).
        max_admit: Admit at most this many waiting requests per step (None: as many as fit),
            still batched with the running requests' decodes (vLLM's step otherwise).
        serial_prefill: Hexgen-Flow's engine step (module docstring): one prefill alone per
            step, decode steps only when no prefill is chosen. Excludes ``max_admit``.
        max_running: Concurrency cap of a coordinator queue in front of the instance (None: no
            cap). The paper's local queue (§4.2, Fig. 1) holds requests until the instance takes
            them; under vLLM's continuous batching the engine takes every request that fits, so
            no queue forms and the order has nothing to act on. With a cap, at most
            ``max_running`` requests are inside the engine (running) and the rest wait in the
            queue, released by urgency (Eq. 7) or FCFS when a slot frees. A preempted request
            leaves its slot and re-enters the queue (vLLM puts it back to waiting).
    """

    name = "hexgen-pq"

    def __init__(
        self,
        trace: str = "trace3",
        cost_models: Sequence[Any] | None = None,
        slo_s: float | None = None,
        head_of_line: bool = False,
        template: str = "per-query",
        fcfs: bool = False,
        max_admit: int | None = None,
        serial_prefill: bool = False,
        max_running: int | None = None,
    ) -> None:
        super().__init__()
        if max_running is not None and (isinstance(max_running, bool) or int(max_running) < 1):
            raise ConfigError(f"max_running must be an int >= 1 or None, got {max_running!r}")
        self.max_running = None if max_running is None else int(max_running)
        if template not in TEMPLATES:
            raise ConfigError(f"template must be one of {TEMPLATES}, got {template!r}")
        if slo_s is not None and not slo_s > 0:
            raise ConfigError(f"slo_s must be > 0 or None, got {slo_s!r}")
        self.trace = trace
        self.predictor = StagePredictor(trace)
        self.cost_models_given = cost_models
        self.slo_s = slo_s
        self.hol = bool(head_of_line)
        self.template = template
        self.fcfs = bool(fcfs)
        if max_admit is not None and (isinstance(max_admit, bool) or int(max_admit) < 1):
            raise ConfigError(f"max_admit must be an int >= 1 or None, got {max_admit!r}")
        self.max_admit = None if max_admit is None else int(max_admit)
        self.serial_prefill = bool(serial_prefill)
        if self.serial_prefill and self.max_admit is not None:
            raise ConfigError("serial_prefill admits one request per step; drop max_admit")
        if self.fcfs:
            self.name = "hexgen-fcfs"
        if self.serial_prefill:
            self.name += "-serial"
        # The engine's fast-forward test must not assume queue-order admission.
        self.head_of_line = False
        self._local: TCompModel | None = None
        self._means: list[TCompModel] = []
        self._reset_state()

    def _reset_state(self) -> None:
        self._queries: dict[tuple[str, int], TemplateState] = {}
        self._seen_stages: set[tuple[str, str]] = set()
        self._shared = TemplateState()
        self._const: dict[str, tuple[float, float]] = {}
        """Per request id: (t_comp on this instance, budget + release time)."""

    def reset(self, engine: Any) -> None:
        """Bind to the engine's cost model; forget per-run state."""
        from llmsched_gym.cost.registry import as_cost_model

        self._local = TCompModel(engine.cost_model)
        if self.cost_models_given:
            self._means = [
                TCompModel(as_cost_model(m))
                for m in self.cost_models_given
            ]
        else:
            self._means = [self._local]
        self._reset_state()

    def t_bar(self, input_len: int, output_len: int) -> float:
        """Eq. 5's ``t_bar``: Eq. 2 averaged over the configured cost models."""
        return sum(m(input_len, output_len) for m in self._means) / len(self._means)

    def _remaining_t_bar(self, steps: Iterable[str]) -> float:
        return sum(self.t_bar(*self.predictor.typical(a)) for a in steps)

    def _remaining_steps(self, job: Any) -> list[str]:
        """Template steps left after the job's released stages (its current one included).

        Per query (default): the job's released stages, all instances' alike
        (``JobState.stages_released``), replayed on a fresh template. Shared (the code's bug):
        one list for every query this policy sees, each newly seen stage consumed once.
        """
        released = job.stages_released
        if self.template == "shared":
            for name in released:
                key = (job.job_id, name)
                if key not in self._seen_stages:
                    self._seen_stages.add(key)
                    self._shared.consume_shared(name.rstrip("0123456789"))
            return self._shared.remaining
        key = (job.job_id, len(released))
        cached = self._queries.get(key)
        if cached is None:
            state = TemplateState()
            for name in released:
                state.consume(name.rstrip("0123456789"))
            cached = self._queries[key] = state
        return cached.remaining

    def _constants(self, req: Request, ctx: StepContext) -> tuple[float, float]:
        """(t_comp on this instance, budget + release time) of ``req``, computed once."""
        c = self._const.get(req.request_id)
        if c is not None:
            return c
        abbr = stage_abbr(req.request_id)
        out = self.predictor.output(abbr)
        assert self._local is not None
        t_comp = self._local(req.num_prompt_tokens, out)
        job = ctx.job(req)
        release = req.arrival_time
        if job is None or abbr is None:
            budget = math.inf if job is None or job.slo_e2e_s is None else job.slo_e2e_s
        else:
            remaining = self._remaining_steps(job)
            t_slo = self.slo_s if self.slo_s is not None else job.slo_e2e_s
            if t_slo is None:
                budget = math.inf
            else:
                elapsed = release - job.arrival_time
                t_bar = self.t_bar(req.num_prompt_tokens, out)
                budget = eq5_budget(t_slo, elapsed, t_bar, self._remaining_t_bar(remaining))
        c = (t_comp, budget + release)
        self._const[req.request_id] = c
        return c

    def urgency(self, req: Request, ctx: StepContext) -> float:
        """Eq. 6 of a waiting request now."""
        t_comp, budget_plus_release = self._constants(req, ctx)
        budget = budget_plus_release - req.arrival_time
        return eq6_urgency(t_comp, budget, ctx.now - req.arrival_time)

    def admission_order(self, ctx: StepContext) -> list[Request]:
        """Waiting requests in admission order: Eq. 7 (urgency, ties by queue order) or FCFS."""
        waiting = ctx.waiting
        if self.fcfs:
            return list(waiting)
        keyed = [(-self.urgency(r, ctx), i, r) for i, r in enumerate(waiting)]
        keyed.sort(key=lambda x: (x[0], x[1]))
        return [r for _, _, r in keyed]

    def schedule(self, ctx: StepContext) -> None:
        """Running requests as vLLM V1, then admit waiting ones by urgency (Eq. 7)."""
        if self.serial_prefill:
            self._schedule_serial(ctx)
            return
        self.schedule_running_phase(ctx, priority=False)  # FCFS victims, whatever the queue
        if ctx.preempted:
            return
        waiting = ctx.waiting
        if not waiting:
            return
        order = self.admission_order(ctx)
        running = ctx.running
        threshold = ctx.config.long_prefill_token_threshold if ctx.num_eligible > 1 else 0
        admitted = 0
        cap = (
            ctx.max_num_seqs
            if self.max_running is None
            else min(ctx.max_num_seqs, self.max_running)
        )
        for req in order:
            if ctx.token_budget <= 0 or len(running) >= cap:
                break
            if self.max_admit is not None and admitted >= self.max_admit:
                break
            if ctx.surely_blocked(req):
                if self.hol or self.fcfs:
                    break
                continue
            hit = ctx.lookup(req)
            n = req.num_tokens - hit[1]
            if 0 < threshold < n:
                n = threshold
            if ctx.admit(req, min(n, ctx.token_budget), hit=hit) is None:
                if self.hol or self.fcfs:
                    break
                continue
            admitted += 1

    def _schedule_serial(self, ctx: StepContext) -> None:
        """Hexgen-Flow's step: one prefill alone, else one decode step of every running request."""
        running = ctx.running
        # 1. A partly prefilled running request (prompt longer than the budget) continues alone.
        for req in running:
            n = req.num_tokens - req.num_computed_tokens
            if n > 1:
                n = min(n, ctx.token_budget)
                while not ctx.schedule_running(req, n):
                    victim = running[-1]  # vLLM's FCFS victim
                    ctx.preempt(victim)
                    if victim is req:
                        break
                return
        # 2. The most urgent waiting request (the head under FCFS), prefilled alone.
        cap = (
            ctx.max_num_seqs
            if self.max_running is None
            else min(ctx.max_num_seqs, self.max_running)
        )
        if ctx.waiting and len(running) < cap:
            for req in self.admission_order(ctx):
                if not ctx.surely_blocked(req):
                    hit = ctx.lookup(req)
                    n = min(req.num_tokens - hit[1], ctx.token_budget)
                    if ctx.admit(req, n, hit=hit) is not None:
                        return
                if self.hol or self.fcfs:
                    break  # the code: no prefill this step, decode instead
        # 3. One decode step of every running request (all of them have one token left here).
        self.schedule_running_phase(ctx, priority=False)

    def on_finish(self, req: Request, now: float) -> None:
        """Drop the request's cached constants."""
        self._const.pop(req.request_id, None)
