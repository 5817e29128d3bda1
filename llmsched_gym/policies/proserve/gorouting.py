"""ProServe's GoRouting (arXiv 2512.12928, Alg. 2) with the constants of the authors' code.

For each candidate instance p (prefill or co-located): the instance's prefill queue Q (waiting
requests plus running ones still prefilling, plus routed-but-not-yet-queued ones), its estimated
execution time ``exec(p) = sum est. prefill of Q + t_c * |Q|`` (co-located: plus ``n_d`` decode
steps' core time, ``n_d * b_d``-style, via the estimator), and
``ESTIMATEGAIN(Q) = sum of w_p(r) * wp over r in Q with 0.9 * remaining(r) > exec`` (a queue-wide
conservative test). ``Delta_p = gain(Q + req) - gain(Q)``; candidates C = {Delta_p > alpha *
Delta_max} (strict, as in the code); if Delta_max > 0: L = {p in C: exec(p) < mu * TTFT_SLO} ->
argmin exec; else C - H with H = {exec(p, req) > lambda * TTFT_SLO} -> argmax pre-insertion exec;
else argmin exec over C. If Delta_max <= 0: least exec (code) or random (paper,
``fallback="random"``). alpha = 0.9, mu = 0.1, lambda = 0.8. The elapsed-time compensation is
off, as in the code. Decode instances of a PD hand-off get the most free KV (``least-load:kv``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.policies.proserve.estimator import LatencyEstimator

__all__ = ["GoRouter", "register"]


class GoRouter:
    """GoRouting (Alg. 2) over ``InstanceView`` candidates."""

    name = "gorouting"

    def __init__(
        self,
        alpha: float = 0.9,
        mu: float = 0.1,
        lam: float = 0.8,
        fallback: str = "least-exec",
        default_ttft_s: float = 1.0,
        wp: float = 1.0,
        seed: int | None = None,
    ) -> None:
        if fallback not in ("least-exec", "random"):
            raise ValueError(f"fallback must be least-exec or random, got {fallback!r}")
        self.alpha, self.mu, self.lam, self.fallback = alpha, mu, lam, fallback
        self.default_ttft, self.wp = default_ttft_s, wp
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._est: dict[int, LatencyEstimator] = {}
        self.last: dict[str, Any] = {}

    def reset(self, instances: Sequence[Any], seed: int) -> None:
        """Reseed and drop fitted estimators."""
        self._rng = np.random.default_rng(seed if self._seed is None else self._seed)
        self._est = {}

    def _estimator(self, view: Any) -> LatencyEstimator:
        est = self._est.get(view.index)
        if est is None:
            est = LatencyEstimator.fit(view.cost_model)
            self._est[view.index] = est
        return est

    @staticmethod
    def prefill_queue(view: Any, now: float) -> list[tuple[int, int, float, float, float]]:
        """``(new tokens, cached, deadline, weight, ttft slo)`` of the instance's prefill work."""
        e = view._engine  # read-only peek at the instance's queues
        out = []
        for r in list(e.running) + list(e.waiting):
            left = r.num_tokens - r.num_computed_tokens
            if left > 1 and r.num_output_tokens == 0:
                s = r.spec
                slo = s.slo_ttft_s if s.slo_ttft_s is not None else 1.0
                out.append((left, r.num_computed_tokens, r.arrival_time + slo, s.weight, slo))
        for s in e._pending[e._next_arrival :]:
            slo = s.slo_ttft_s if s.slo_ttft_s is not None else 1.0
            out.append((s.prompt_len, 0, s.arrival_time + slo, s.weight, slo))
        return out

    def estimate_exec(self, view: Any, queue: list, est: LatencyEstimator) -> float:
        """ESTIMATEEXEC: sum of est. prefill times + t_c per queued request (+ decode steps)."""
        total = sum(est.prefill(n, m) for n, m, *_ in queue) + est.t_c * len(queue)
        if view.role == "both":
            nd = view.num_decode
            if nd:
                ctx = sum(r.num_computed_tokens for r in view._engine.running) / max(
                    view.num_running, 1
                )
                total += nd * est.decode(int(ctx))
        return total

    def estimate_gain(self, queue: list, exec_s: float, now: float) -> float:
        """ESTIMATEGAIN: first-token gain of requests whose 0.9 x remaining exceeds ``exec_s``."""
        return sum(self.wp * w for _, _, d, w, _ in queue if 0.9 * (d - now) > exec_s)

    def route(self, request: RequestSpec, job: Any, instances: Sequence[Any], now: float) -> int:
        """Pick the instance index for ``request`` (Alg. 2)."""
        if instances and instances[0].role == "decode":
            return max(instances, key=lambda v: (v.free_kv_tokens, -v.index)).index
        slo = request.slo_ttft_s if request.slo_ttft_s is not None else self.default_ttft
        item = (request.prompt_len, 0, request.arrival_time + slo, request.weight, slo)
        pre_exec, post_exec, delta = {}, {}, {}
        for v in instances:
            est = self._estimator(v)
            q = self.prefill_queue(v, now)
            e0 = self.estimate_exec(v, q, est)
            e1 = e0 + est.prefill(request.prompt_len, 0) + est.t_c
            pre_exec[v.index], post_exec[v.index] = e0, e1
            delta[v.index] = self.estimate_gain(q + [item], e1, now) - self.estimate_gain(
                q, e0, now
            )
        return self.select(delta, pre_exec, post_exec, slo)

    def select(
        self,
        delta: dict[int, float],
        pre_exec: dict[int, float],
        post_exec: dict[int, float],
        slo: float,
    ) -> int:
        """Alg. 2 lines 8-19 on per-instance gains and exec times; records the branch taken."""
        dmax = max(delta.values())
        if dmax <= 0:
            if self.fallback == "random":
                self.last = {"branch": "fallback-random"}
                keys = sorted(delta)
                return int(keys[self._rng.integers(len(keys))])
            self.last = {"branch": "fallback-least-exec"}
            return min(pre_exec, key=lambda i: (pre_exec[i], i))
        cands = [i for i in delta if delta[i] > self.alpha * dmax]
        light = [i for i in cands if pre_exec[i] < self.mu * slo]
        if light:
            self.last = {"branch": "light"}
            return min(light, key=lambda i: (pre_exec[i], i))
        ok = [i for i in cands if post_exec[i] <= self.lam * slo]
        if ok:
            self.last = {"branch": "pack"}
            return max(ok, key=lambda i: (pre_exec[i], -i))
        self.last = {"branch": "all-heavy"}
        return min(cands, key=lambda i: (pre_exec[i], i))


def register(register_router: Callable[..., None]) -> None:
    """Register ``gorouting`` (code fallback) and ``gorouting-random`` (paper fallback)."""
    register_router("gorouting", GoRouter, "ProServe GoRouting (alpha 0.9, mu 0.1, lambda 0.8)")
    register_router(
        "gorouting-random",
        lambda **kw: GoRouter(fallback="random", **kw),
        "GoRouting with Alg. 2's random fallback",
    )
