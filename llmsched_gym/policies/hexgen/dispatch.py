"""HexGen-Text2SQL's workload-balanced dispatcher (paper §4.1, Eq. 2-4) as cluster routers.

The routers follow the cluster's router protocol (``route(request, job, instances, now)`` over
``llmsched_gym.cluster.InstanceView`` objects, ``reset(instances, seed)``) without importing the
cluster; they register with it through :func:`llmsched_gym.policies.hexgen.register_routers`.

Two modes:

``hexgen-wb`` (paper, Eq. 2-4)
    ``t_comp^m(q) = t_prefill^m(L_in) + t_decode^m(L_out_hat)`` on instance ``m``'s cost model,
    with ``L_out_hat`` the stage's mean output length in the HexGen-Flow trace statistics (the
    paper predicts lengths with Zheng et al.'s model; the code uses this mean). ``t_queue^m =
    sum t_comp^m`` over the requests queued on ``m`` (waiting and routed-not-yet-admitted) plus
    the remaining work of its running requests (``eps`` = 1 ms when it is 0). ``score = (1 -
    alpha) * beta / t_queue - alpha * t_comp``; the highest score wins (ties to the lowest
    index). ``beta``, which neither the paper nor the code sets, defaults to ``beta_scale *
    (median t_comp of the 15-call standard workflow on the fastest instance) ** 2``, putting
    both terms on one scale.

``hexgen-wb-code`` (``Relaxed-System-Lab/Hexgen-Flow@396a3ba``,
``core/policies/routing/workload_balance.py:60-87``)
    ``score(e) = alpha * t_emp(base, step) / t_emp(e, step) - (1 - alpha) * kappa_e * W_e /
    W_base`` with ``t_emp`` the single-request latency at the stage-typical (input, output)
    pair, ``W_e`` the *cumulative* ``t_emp`` ever assigned to ``e`` (never decremented),
    ``kappa`` 1 for A100 and 0.5 for A6000/L40S, the first instance as the baseline, and the
    very first request always sent to the baseline. No beta.

Both read only released requests and their prompt lengths; output lengths are predicted. The
``t_queue`` sum reads the instance's queues (the same engine state ``InstanceView.backlog_s``
reads); ``queue_metric="backlog"`` uses ``InstanceView.backlog_s`` instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.hexgen.tcomp import StagePredictor, TCompModel, stage_abbr
from llmsched_gym.workloads.text2sql import STANDARD_WORKFLOW

__all__ = [
    "ALPHA_GRID",
    "DEFAULT_ALPHA",
    "DEFAULT_KAPPA",
    "EPS_QUEUE_S",
    "HexGenCodeRouter",
    "HexGenWBRouter",
    "eq4_score",
]

DEFAULT_KAPPA: dict[str, float] = {"a100": 1.0, "a6000": 0.5, "l40s": 0.5, "l40": 0.5}
"""Hexgen-Flow's per-GPU load weight (``workload_balance.py``); matched as a GPU-name prefix."""

EPS_QUEUE_S = 1e-3
"""``t_queue`` floor of Eq. 4 (the paper leaves an empty queue's value open)."""


def eq4_score(alpha: float, beta: float, t_queue: float, t_comp: float, eps: float = EPS_QUEUE_S):
    """Paper Eq. 4: ``(1 - alpha) * beta / max(t_queue, eps) - alpha * t_comp``."""
    return (1.0 - alpha) * beta / max(t_queue, eps) - alpha * t_comp


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ConfigError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


class _HexGenBase:
    """Shared state: one Eq. 2 model per instance and the stage predictor."""

    oracle = False
    """Output lengths are predicted, never read (``Router.oracle``)."""

    def __init__(self, alpha: float = 0.0, trace: str = "trace3") -> None:
        self.alpha = _check_alpha(alpha)
        self.predictor = StagePredictor(trace)
        self._tcomp: dict[int, TCompModel] = {}

    def _model(self, view: Any) -> TCompModel:
        m = self._tcomp.get(view.index)
        if m is None:
            m = self._tcomp[view.index] = TCompModel(view.cost_model)
        return m

    def t_comp(self, view: Any, request: RequestSpec) -> float:
        """Eq. 2 of ``request`` on ``view``'s instance (predicted output length)."""
        out = self.predictor.output(stage_abbr(request.request_id))
        return self._model(view)(request.prompt_len, out)

    def reset(self, instances: Sequence[Any], seed: int) -> None:
        """Forget per-run state; build an Eq. 2 model per instance."""
        self._tcomp = {v.index: TCompModel(v.cost_model) for v in instances}


class HexGenWBRouter(_HexGenBase):
    """Paper Eq. 2-4 workload-balanced dispatch.

    Args:
        alpha: Weight of execution cost vs queueing (0: queue only, 1: speed only).
        beta: Numerator of the queue term in s^2; None derives it (``beta_scale`` times the
            squared median ``t_comp`` of the standard workflow on the fastest instance).
        beta_scale: Multiplier of the derived beta (e.g. 0.1, 1, 10).
        trace: Trace whose per-step mean outputs predict output lengths.
        queue_metric: ``"sum"`` (Eq. 3: sum of queued ``t_comp`` plus running remainders) or
            ``"backlog"`` (``InstanceView.backlog_s``).
        eps: Floor of ``t_queue`` in seconds.
    """

    def __init__(
        self,
        alpha: float = 0.0,
        beta: float | None = None,
        beta_scale: float = 1.0,
        trace: str = "trace3",
        queue_metric: str = "sum",
        eps: float = EPS_QUEUE_S,
    ) -> None:
        super().__init__(alpha, trace)
        if queue_metric not in ("sum", "backlog"):
            raise ConfigError(f"queue_metric must be 'sum' or 'backlog', got {queue_metric!r}")
        if beta is not None and not beta > 0:
            raise ConfigError(f"beta must be > 0 or None, got {beta!r}")
        if not beta_scale > 0:
            raise ConfigError(f"beta_scale must be > 0, got {beta_scale!r}")
        self.beta_given = beta
        self.beta = beta if beta is not None else 1.0
        self.beta_scale = float(beta_scale)
        self.queue_metric = queue_metric
        self.eps = float(eps)
        self.name = f"hexgen-wb(alpha={self.alpha:g})"

    def set_alpha(self, alpha: float) -> None:
        """Change alpha (the online tuner's knob)."""
        self.alpha = _check_alpha(alpha)
        self.name = f"hexgen-wb(alpha={self.alpha:g})"

    def derive_beta(self, instances: Sequence[Any]) -> float:
        """``beta_scale * (median over the 15-call workflow of t_comp on the fastest)^2``."""
        best: list[float] | None = None
        for v in instances:
            model = self._model(v)
            costs = sorted(model(*self.predictor.typical(a)) for a in STANDARD_WORKFLOW)
            if best is None or sum(costs) < sum(best):
                best = costs
        if not best:
            return 1.0
        median = best[len(best) // 2]
        return self.beta_scale * median * median

    def reset(self, instances: Sequence[Any], seed: int) -> None:
        """Per-run state; derive beta from the cluster's fastest instance unless given."""
        super().reset(instances, seed)
        self.beta = self.beta_given if self.beta_given is not None else self.derive_beta(instances)

    def t_queue(self, view: Any) -> float:
        """Eq. 3: seconds of queued plus in-flight work on ``view``'s instance."""
        if self.queue_metric == "backlog":
            return view.backlog_s
        model = self._model(view)
        engine = view._engine  # the state InstanceView.backlog_s reads
        total = 0.0
        for r in engine.running:
            out = self.predictor.output(stage_abbr(r.request_id))
            total += model.remaining(
                r.num_prompt_tokens, r.num_computed_tokens, r.num_output_tokens, out
            )
        for r in engine.waiting:
            out = self.predictor.output(stage_abbr(r.request_id))
            total += model(r.num_prompt_tokens, out)
        for s in engine._pending[engine._next_arrival :]:
            total += self.t_comp(view, s)
        return total

    def scores(self, request: RequestSpec, instances: Sequence[Any]) -> list[float]:
        """Eq. 4 score of every candidate, in ``instances`` order."""
        return [
            eq4_score(self.alpha, self.beta, self.t_queue(v), self.t_comp(v, request), self.eps)
            for v in instances
        ]

    def route(self, request, job, instances, now) -> int:
        """The candidate with the highest Eq. 4 score (lowest index on ties)."""
        if not self._tcomp:
            self.reset(instances, 0)
        scores = self.scores(request, instances)
        best = max(range(len(instances)), key=lambda i: (scores[i], -instances[i].index))
        return instances[best].index


class HexGenCodeRouter(_HexGenBase):
    """Hexgen-Flow's implemented dispatch score (cumulative assigned work, kappa, no beta).

    Args:
        alpha: Weight of suitability vs load.
        kappa: Load weight per GPU-name prefix (default ``DEFAULT_KAPPA``; unknown GPUs get 1).
        trace: Trace whose stage-typical (input, output) pairs price ``t_emp``.
    """

    def __init__(
        self,
        alpha: float = 0.0,
        kappa: Mapping[str, float] | None = None,
        trace: str = "trace3",
    ) -> None:
        super().__init__(alpha, trace)
        self.kappa = dict(DEFAULT_KAPPA if kappa is None else kappa)
        self.assigned: dict[int, float] = {}
        self.baseline: int | None = None
        self.name = f"hexgen-wb-code(alpha={self.alpha:g})"

    def set_alpha(self, alpha: float) -> None:
        """Change alpha."""
        self.alpha = _check_alpha(alpha)
        self.name = f"hexgen-wb-code(alpha={self.alpha:g})"

    def kappa_of(self, view: Any) -> float:
        """``kappa`` of the instance's GPU (longest matching prefix; 1.0 when unknown)."""
        gpu = (view.gpu or "").lower()
        for key in sorted(self.kappa, key=len, reverse=True):
            if gpu.startswith(key.lower()):
                return float(self.kappa[key])
        return 1.0

    def reset(self, instances: Sequence[Any], seed: int) -> None:
        """Zero the cumulative work; the first instance is the baseline."""
        super().reset(instances, seed)
        self.assigned = {v.index: 0.0 for v in instances}
        self.baseline = min(v.index for v in instances) if instances else None

    def t_emp(self, view: Any, request: RequestSpec) -> float:
        """Single-request latency at the stage-typical pair on ``view``'s instance."""
        abbr = stage_abbr(request.request_id)
        if abbr is None:
            return self._model(view)(request.prompt_len, self.predictor.output(None))
        return self._model(view)(*self.predictor.typical(abbr))

    def route(self, request, job, instances, now) -> int:
        """Hexgen-Flow's ``workload_balance`` choice."""
        if self.baseline is None:
            self.reset(instances, 0)
        by_index = {v.index: v for v in instances}
        base_view = by_index.get(self.baseline, instances[0])
        w_base = self.assigned.get(base_view.index, 0.0)
        if w_base <= 0.0 and base_view.index in by_index:
            chosen = base_view  # the very first request goes to the baseline
        else:
            t_base = self.t_emp(base_view, request)
            best, best_score = instances[0], -math.inf
            for v in instances:
                ratio = t_base / self.t_emp(v, request)
                load = self.kappa_of(v) * self.assigned.get(v.index, 0.0) / max(w_base, 1e-12)
                score = self.alpha * ratio - (1.0 - self.alpha) * load
                if score > best_score:
                    best, best_score = v, score
            chosen = best
        self.assigned[chosen.index] = self.assigned.get(chosen.index, 0.0) + self.t_emp(
            chosen, request
        )
        return chosen.index


DEFAULT_ALPHA = 0.2
"""Alpha of the registered ``hexgen-wb`` / ``hexgen-wb-code`` (inside the paper's tuned 0.1-0.4)."""

ALPHA_GRID: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(11))
"""Alphas registered as ``hexgen-wb:alpha=<a>`` (the Knob-alpha grid)."""
