"""ProServe's Token-level Deadline-aware Gain (TDG, arXiv 2512.12928 Eq. 3) and SLO attainment.

For request r with priority weight w_p(r), TTFT SLO S1 and TPOT SLO S2, token i (1-based) is
delivered at t_i and has the deadline ``D_i = arrival + S1 + (i - 1) * S2`` (the paper's buffered
form). The gain is ``f(r) = sum_i w_r(i) * [t_i < D_i]`` with ``w_r(1) = wp * w_p(r)`` and
``w_r(i) = wd * w_p(r)`` for i > 1. ``Ideal_Gain = sum_r w_p(r) * (wp + wd * (n_r - 1))`` (every
token on time), ``TDG_Ratio = sum f / Ideal_Gain`` and ``Miss_TDG_Ratio = 1 - TDG_Ratio``.

Two ways to get the token times t_i:

* **Exact** (:meth:`TDGCollector.on_tokens`): a token listener of the engine
  (``Engine.token_listeners``, see ``core/steplog.py``), which calls it after every step with
  the requests that delivered a token and the step's end time, the token's delivery time. It
  costs O(1) per delivered token. Attach it with ``engine.token_listeners.append(
  collector.on_tokens)``, or wrap a policy in :class:`TokenTimelineRecorder` where only a policy
  can be handed over (a registered policy factory): the wrapper attaches the listener to each
  engine it runs on.
* **Records only** (:func:`tdg_uniform`): from per-request records (first-token and finish
  times, output tokens), assuming the decode tokens are evenly spaced between the first and last
  token (``t_i = t_1 + (i - 1) * TPOT``), closed form and vectorised. It is exact for the first
  token and for requests whose inter-token gaps are constant; otherwise a decode token's time is
  off by at most the spread of the request's gaps (a request that stalls then catches up is
  scored as if it had been smooth, so this can over- or under-count). Use it for quick looks; the
  reproduction uses the exact recorder.

SLO attainment follows ProServe §5.1: TTFT < S1 and TPOT < S2, both strictly (a request with one
output token has no TPOT and is judged on TTFT alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import Request
from llmsched_gym.metrics.slo import has_slo, request_slo_met

__all__ = [
    "TDGCollector",
    "TokenTimelineRecorder",
    "ideal_gain",
    "slo_attainment",
    "tdg_of_times",
    "tdg_summary",
    "tdg_uniform",
]


def tdg_of_times(
    times: Sequence[float],
    arrival: float,
    slo_ttft_s: float,
    slo_tpot_s: float,
    weight: float = 1.0,
    wp: float = 1.0,
    wd: float = 1.0,
) -> float:
    """TDG of one request from its token delivery times (Eq. 3, strict deadlines).

    Args:
        times: Absolute delivery time of each output token, in order.
        arrival: Arrival time of the request.
        slo_ttft_s: TTFT SLO (seconds).
        slo_tpot_s: TPOT SLO (seconds).
        weight: Priority weight w_p(r).
        wp: First-token weight.
        wd: Decode-token weight.

    Returns:
        The request's gain.
    """
    t = np.asarray(times, dtype=float)
    if t.size == 0:
        return 0.0
    deadlines = arrival + slo_ttft_s + np.arange(t.size) * slo_tpot_s
    ok = t < deadlines
    return float(weight * (wp * ok[0] + wd * np.count_nonzero(ok[1:])))


def ideal_gain(num_output: np.ndarray, weight: np.ndarray, wp: float, wd: float) -> np.ndarray:
    """Per-request gain with every token on time: ``w_p(r) * (wp + wd * (n_r - 1))``."""
    n = np.asarray(num_output, dtype=float)
    return np.asarray(weight, dtype=float) * np.where(n > 0, wp + wd * (n - 1), 0.0)


def slo_attainment(table: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per-request SLO met, the records' rule (``metrics.slo``), from a request table.

    A request counts as met when it has an SLO and meets it (TTFT < SLO and TPOT < SLO, strict;
    ``finish <= deadline_s`` where the table has deadlines); a request without any SLO counts as
    missed, so the mean over the table is the attainment of tables whose requests all have SLOs
    (ProServe's).

    Args:
        table: Per-request columns (``RequestColumn`` names): arrival, first token and finish
            times, output tokens and the SLO columns (``deadline_s`` optional).

    Returns:
        Boolean array, one per request.
    """
    a = np.asarray(table["arrival_time_s"], dtype=float)
    t1 = np.asarray(table["first_token_time_s"], dtype=float)
    tn = np.asarray(table["finish_time_s"], dtype=float)
    n = np.asarray(table["num_output_tokens"], dtype=float)
    s1 = np.asarray(table["slo_ttft_s"], dtype=float)
    s2 = np.asarray(table["slo_tpot_s"], dtype=float)
    d = (
        np.asarray(table["deadline_s"], dtype=float)
        if "deadline_s" in table
        else np.full_like(a, np.nan)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n > 1, (tn - t1) / (n - 1), np.nan)
    return request_slo_met(t1 - a, tpot, tn, s1, s2, d) & has_slo(s1, s2, d)


def tdg_uniform(
    table: Mapping[str, np.ndarray], wp: float = 1.0, wd: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Records-only TDG: decode tokens assumed evenly spaced (see the module docstring).

    Token i > 1 is on time iff ``(i - 1) * (g - S2) < arrival + S1 - t_1`` with
    ``g = (t_n - t_1) / (n - 1)``; the count of such i is computed in closed form.

    Args:
        table: Per-request columns as in :func:`slo_attainment`, plus ``weight``.
        wp: First-token weight.
        wd: Decode-token weight.

    Returns:
        ``(gain, ideal)`` per request.
    """
    a = np.asarray(table["arrival_time_s"], dtype=float)
    t1 = np.asarray(table["first_token_time_s"], dtype=float)
    tn = np.asarray(table["finish_time_s"], dtype=float)
    n = np.asarray(table["num_output_tokens"], dtype=np.int64)
    s1 = np.asarray(table["slo_ttft_s"], dtype=float)
    s2 = np.asarray(table["slo_tpot_s"], dtype=float)
    w = np.asarray(table["weight"], dtype=float)
    m = np.maximum(n - 1, 0)  # decode tokens
    g = np.where(m > 0, (tn - t1) / np.maximum(m, 1), 0.0)
    s = a + s1 - t1  # slack of the first token
    diff = g - s2
    with np.errstate(divide="ignore", invalid="ignore"):
        x = s / diff
    # diff > 0: k < x  -> count = clip(ceil(x) - 1, 0, m)
    cnt_pos = np.clip(np.ceil(x) - 1, 0, m)
    # diff < 0: k > x  -> count = m - clip(floor(x), 0, m)
    cnt_neg = m - np.clip(np.floor(x), 0, m)
    cnt_zero = np.where(s > 0, m, 0)
    cnt = np.where(diff > 0, cnt_pos, np.where(diff < 0, cnt_neg, cnt_zero))
    cnt = np.where(np.isfinite(cnt), cnt, 0)
    first = (t1 < a + s1).astype(float)
    gain = w * (wp * first * (n > 0) + wd * cnt)
    return gain, ideal_gain(n, w, wp, wd)


class TDGCollector:
    """Per-request token tallies, filled by ``on_tokens`` as an engine's token listener.

    Several engines (the instances of a cluster) may share one collector.
    """

    def __init__(self, keep_times: bool = False) -> None:
        self.keep_times = keep_times
        """Also keep every token's delivery time (tests, small runs)."""
        self.first_on_time: dict[str, bool] = {}
        self.decode_on_time: dict[str, int] = {}
        self.num_tokens: dict[str, int] = {}
        self.times: dict[str, list[float]] = {}
        self._arrival: dict[str, float] = {}

    def deliver(self, req: Request, t: float) -> None:
        """Record that ``req`` delivered its newest output token at time ``t``."""
        spec = req.spec
        rid = spec.request_id
        # A PD decode instance continues a request whose first token came from prefill: count
        # tokens per request id across instances.
        i = self.num_tokens.get(rid, 0) + 1
        self.num_tokens[rid] = i
        s1 = spec.slo_ttft_s if spec.slo_ttft_s is not None else float("inf")
        s2 = spec.slo_tpot_s if spec.slo_tpot_s is not None else float("inf")
        arrival = self._arrival.get(rid, spec.arrival_time)
        ok = t < arrival + s1 + (i - 1) * s2
        if i == 1:
            self.first_on_time[rid] = ok
        elif ok:
            self.decode_on_time[rid] = self.decode_on_time.get(rid, 0) + 1
        if self.keep_times:
            self.times.setdefault(rid, []).append(t)

    def on_tokens(self, reqs: Sequence[Request], t: float) -> None:
        """Token listener: each of ``reqs`` delivered one output token at ``t``."""
        deliver = self.deliver
        for req in reqs:
            deliver(req, t)

    def set_arrivals(self, arrivals: Mapping[str, float]) -> None:
        """Original arrival times by request id (PD hand-offs re-arrive on decode instances)."""
        self._arrival = dict(arrivals)

    def gains(
        self, request_ids: Sequence[str], weights: Sequence[float], wp: float, wd: float
    ) -> np.ndarray:
        """TDG per request, in the order of ``request_ids``."""
        fo, do = self.first_on_time, self.decode_on_time
        out = np.empty(len(request_ids))
        for j, (rid, w) in enumerate(zip(request_ids, weights, strict=True)):
            out[j] = w * (wp * fo.get(rid, False) + wd * do.get(rid, 0))
        return out


class TokenTimelineRecorder:
    """A policy wrapper that attaches a :class:`TDGCollector` to each engine it runs on.

    For callers that can hand the engine only a policy (a registered factory, a cluster's
    policy per instance); with an engine at hand, append ``collector.on_tokens`` to its
    ``token_listeners`` instead. Behaviour is the wrapped policy's, except that fast-forward is
    off, as it was when the timeline was recorded by the policy itself (stepped runs produce
    identical schedules). A PD hand-off's first decode-side token is the request's second
    only if the prefill instance delivered the first: tallies are per request id.
    """

    fast_forward_safe = False

    def __init__(self, inner: Any, collector: TDGCollector) -> None:
        self.inner = inner
        self.collector = collector
        self.name = inner.name
        self.oracle = getattr(inner, "oracle", False)
        self.head_of_line = getattr(inner, "head_of_line", False)

    def priority_key(self, req: Request) -> tuple:
        """The wrapped policy's key."""
        return self.inner.priority_key(req)

    def queue_policy(self, config: EngineConfig) -> str:
        """The wrapped policy's queue."""
        return self.inner.queue_policy(config)

    def is_vllm_v1(self) -> bool:
        """Never: the wrapper is not vLLM V1's scheduler itself."""
        return False

    def reset(self, engine: Any) -> None:
        """Listen to ``engine``'s tokens and reset the wrapped policy."""
        engine.token_listeners.append(self.collector.on_tokens)
        self.inner.reset(engine)

    def schedule(self, ctx: Any) -> None:
        """The wrapped policy's schedule."""
        self.inner.schedule(ctx)

    def on_finish(self, req: Request, now: float) -> None:
        """The wrapped policy's."""
        self.inner.on_finish(req, now)


def tdg_summary(
    table: Mapping[str, np.ndarray],
    gains: np.ndarray,
    wp: float = 1.0,
    wd: float = 1.0,
) -> dict[str, Any]:
    """TDG ratio, Miss-TDG ratio and SLO attainment, overall and per priority.

    Args:
        table: Per-request columns (``RequestColumn`` names) of the finished requests.
        gains: TDG per request, aligned with ``table``.
        wp: First-token weight.
        wd: Decode-token weight.

    Returns:
        ``tdg_ratio``, ``miss_tdg_ratio``, ``slo_attainment``, and the same per priority under
        ``by_priority`` (priority value -> dict).
    """
    w = np.asarray(table["weight"], dtype=float)
    n = np.asarray(table["num_output_tokens"])
    ideal = ideal_gain(n, w, wp, wd)
    met = slo_attainment(table)
    prio = np.asarray(table["priority"])
    out: dict[str, Any] = {}

    def block(mask: np.ndarray) -> dict[str, float]:
        ig = float(ideal[mask].sum())
        ratio = float(gains[mask].sum()) / ig if ig > 0 else float("nan")
        return {
            "tdg_ratio": ratio,
            "miss_tdg_ratio": 1.0 - ratio,
            "slo_attainment": float(met[mask].mean()) if mask.any() else float("nan"),
            "num_requests": int(mask.sum()),
        }

    out.update(block(np.ones(len(w), dtype=bool)))
    out["by_priority"] = {int(p): block(prio == p) for p in np.unique(prio)}
    return out
