"""HexGen-Text2SQL's workload-balanced dispatcher (paper §4.1, Eq. 2-4) as cluster routers.

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

Pricing calibrated to Hexgen-Flow (:class:`HexGenCodeCost`, :func:`hexgen_cost`): the code
prices a decode step at a measured per-GPU constant (A100 0.035 s, A6000 0.058 s, L40S
0.0545 s; Hexgen-Flow@396a3ba ``core/obtain_latency.py``), whatever the batch.
``calibration="code-ratio"`` prices every step of an A6000/L40S instance as the A100 roofline's
times the code's ratio (0.058/0.035 = 1.66, 0.0545/0.035 = 1.56) while keeping its own KV
capacity; ``decode="code-constant"`` prices decode-only steps at the constant itself.
``calibration="code-table"`` scales by the ratio of the standard workflow's single-request
latency in the code's fallback tables instead
(A100/A6000 0.48, A100/L40 0.56; the roofline gives 0.43 and 0.49).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from llmsched_gym.cluster.routers import InstanceView, Router
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.workloads.text2sql import STANDARD_WORKFLOW, STEP_NAMES, load_hexgen_stats

__all__ = [
    "ALPHA_GRID",
    "DEFAULT_ALPHA",
    "DEFAULT_KAPPA",
    "CODE_DECODE_S",
    "HexGenCodeCost",
    "HexGenCodeRouter",
    "HexGenWBRouter",
    "StagePredictor",
    "TCompModel",
    "eq4_score",
    "gpu_key",
    "hexgen_cost",
    "register",
    "stage_abbr",
]

DEFAULT_KAPPA: dict[str, float] = {"a100": 1.0, "a6000": 0.5, "l40s": 0.5, "l40": 0.5}
"""Hexgen-Flow's per-GPU load weight (``workload_balance.py``); matched as a GPU-name prefix."""

CODE_DECODE_S: dict[str, float] = {"a100": 0.035, "a6000": 0.058, "l40s": 0.0545, "l40": 0.0545}
"""Hexgen-Flow's measured per-token decode seconds per GPU (``obtain_latency.py``)."""

CODE_TABLE_SCALE: dict[str, float] = {"a100": 1.0, "a6000": 77.98 / 37.52, "l40s": 66.81 / 37.52}
"""Ratio of the 15-call standard workflow's single-request latency to the A100's in
Hexgen-Flow's fallback ``EMPIRICAL_TIME_*`` tables (``request.py``; A100 37.52 s, A6000
77.98 s, L40 66.81 s): A100/A6000 = 0.48, A100/L40 = 0.56."""

REFERENCE_GPU = "a100"
"""The GPU the code's ratios are relative to (its baseline engine)."""

EPS_QUEUE_S = 1e-3
"""``t_queue`` floor of Eq. 4 (the paper leaves an empty queue's value open)."""


def stage_abbr(request_id: str) -> str | None:
    """Step abbreviation (``"RV"``) of a text2sql request id ``"{job}-{stage}-{i}"``, else None."""
    parts = request_id.rsplit("-", 2)
    if len(parts) != 3:
        return None
    abbr = parts[1].rstrip("0123456789")
    return abbr if abbr in STEP_NAMES else None


CALIBRATIONS = ("roofline", "code-ratio", "code-table")


def gpu_key(gpu: str | None, table: Mapping[str, float]) -> str | None:
    """Longest key of ``table`` that prefixes the GPU name (case-insensitive), else None."""
    g = (gpu or "").lower()
    for key in sorted(table, key=len, reverse=True):
        if g.startswith(key.lower()):
            return key
    return None


class HexGenCodeCost:
    """A cost model re-priced as Hexgen-Flow prices steps (``core/obtain_latency.py``).

    ``step_time = scale * speed.step_time(...)``, except that with ``decode_s`` a decode-only
    step (no prefill item) costs ``decode_s`` whatever its batch size and context (the code's
    engine). KV capacity and identity (``gpu``, ``model``, ``tp``, ``num_gpu_blocks``...) come
    from ``kv_model`` (default ``speed``).

    Args:
        speed: The cost model whose step times are scaled.
        scale: Multiplier of every (non-constant) step time.
        decode_s: Seconds of a decode-only step, or None to price it by ``speed``.
        kv_model: The model that sizes the KV cache and names the GPU.
        name: Label (default derived).
    """

    decode_series = None  # no closed-form decode series: the engine prices step by step
    uses_prefill_kv = False

    def __init__(
        self,
        speed: Any,
        scale: float = 1.0,
        decode_s: float | None = None,
        kv_model: Any = None,
        name: str | None = None,
    ) -> None:
        if not scale > 0:
            raise ConfigError(f"scale must be > 0, got {scale!r}")
        if decode_s is not None and not decode_s > 0:
            raise ConfigError(f"decode_s must be > 0 or None, got {decode_s!r}")
        self.speed = speed
        self.kv_model = speed if kv_model is None else kv_model
        self.scale = float(scale)
        self.decode_s = None if decode_s is None else float(decode_s)
        self.gpu = getattr(self.kv_model, "gpu", None)
        self.model = getattr(self.kv_model, "model", None)
        self.tp = getattr(self.kv_model, "tp", None)
        base = getattr(speed, "name", type(speed).__name__)
        extra = f"x{self.scale:g}" + ("" if decode_s is None else f",decode={decode_s:g}s")
        self.name = name or f"{base}[{extra}]@{self.gpu}"

    def __getattr__(self, attr: str) -> Any:
        # KV sizing and anything else the engine asks of a profile come from kv_model.
        if attr.startswith("__") or "kv_model" not in self.__dict__:
            raise AttributeError(attr)
        return getattr(self.__dict__["kv_model"], attr)

    def step_time(
        self,
        num_tokens: int,
        prefill_attn: int,
        decode_kv: int,
        num_prefill: int,
        num_decode: int,
        **_: Any,
    ) -> float:
        """Seconds of one step (the constant for a decode-only step when ``decode_s`` is set)."""
        if self.decode_s is not None and num_prefill == 0 and num_decode > 0:
            return self.decode_s
        t = self.speed.step_time(num_tokens, prefill_attn, decode_kv, num_prefill, num_decode)
        return self.scale * t

    def step_times(self, num_tokens, prefill_attn, decode_kv, num_prefill, num_decode):
        """Vectorised :meth:`step_time` (element by element the same floats)."""
        t = self.scale * np.asarray(
            self.speed.step_times(num_tokens, prefill_attn, decode_kv, num_prefill, num_decode),
            dtype=np.float64,
        )
        if self.decode_s is None:
            return t
        dec = (np.asarray(num_prefill) == 0) & (np.asarray(num_decode) > 0)
        return np.where(dec, self.decode_s, t)


def hexgen_cost(
    spec: Any,
    calibration: str = "roofline",
    decode: str = "batched",
    reference: Any = None,
) -> Any:
    """An instance's cost model under a pricing mode (module docstring).

    Args:
        spec: The instance's cost model (object or spec string).
        calibration: ``"roofline"`` (the model as is) or ``"code-ratio"`` (the ``reference``
            model's step times times ``CODE_DECODE_S[gpu] / CODE_DECODE_S["a100"]``; KV capacity
            from ``spec``), or ``"code-table"`` (the same with ``CODE_TABLE_SCALE``, the code's
            single-request workflow latency ratio). GPUs missing from ``CODE_DECODE_S`` keep
            their own model.
        decode: ``"batched"`` (the cost model's batch-dependent decode) or ``"code-constant"``
            (a decode-only step costs ``CODE_DECODE_S[gpu]``, the code's engine).
        reference: The A100 model of ``"code-ratio"`` (default: ``spec`` with its GPU replaced
            by ``a100-80gb``; spec strings only).

    Returns:
        ``spec``'s model when both modes are the defaults, else a :class:`HexGenCodeCost`.
    """
    from llmsched_gym.cost.registry import load_cost_model

    if calibration not in CALIBRATIONS:
        raise ConfigError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if decode not in ("batched", "code-constant"):
        raise ConfigError(f"decode must be 'batched' or 'code-constant', got {decode!r}")
    model = load_cost_model(spec) if isinstance(spec, str) else spec
    if calibration == "roofline" and decode == "batched":
        return model
    key = gpu_key(getattr(model, "gpu", None), CODE_DECODE_S)
    speed, scale = model, 1.0
    if calibration != "roofline" and key is not None:
        if reference is None:
            if not isinstance(spec, str) or "@" not in spec:
                raise ConfigError("code-ratio needs a reference model for a non-string spec")
            head, _, tail = spec.partition("@")
            reference = f"{head}@a100-80gb" + (tail[tail.index("/") :] if "/" in tail else "")
        speed = load_cost_model(reference) if isinstance(reference, str) else reference
        if calibration == "code-ratio":
            scale = CODE_DECODE_S[key] / CODE_DECODE_S[REFERENCE_GPU]
        else:
            scale = CODE_TABLE_SCALE[key]
    decode_s = CODE_DECODE_S[key] if decode == "code-constant" and key is not None else None
    return HexGenCodeCost(speed, scale=scale, decode_s=decode_s, kv_model=model)


class StagePredictor:
    """Stage-typical lengths from the shipped HexGen-Flow statistics (the code's predictor).

    Args:
        trace: HexGen-Flow trace whose per-step means are used.
    """

    def __init__(self, trace: str = "trace3") -> None:
        steps = load_hexgen_stats()["traces"][trace]["steps"]
        self.trace = trace
        self.mean_input = {a: max(1, round(s["input"]["mean"])) for a, s in steps.items()}
        self.mean_output = {a: max(1, round(s["output"]["mean"])) for a, s in steps.items()}
        allout = [s["output"]["mean"] for s in steps.values()]
        self.default_output = max(1, round(sum(allout) / len(allout)))

    def output(self, abbr: str | None) -> int:
        """Predicted output tokens of a request of step ``abbr`` (overall mean when unknown)."""
        return self.mean_output.get(abbr, self.default_output) if abbr else self.default_output

    def typical(self, abbr: str) -> tuple[int, int]:
        """Stage-typical (input, output) pair of step ``abbr`` (Hexgen-Flow EMPIRICAL_IO_LEN)."""
        return self.mean_input[abbr], self.mean_output[abbr]


class TCompModel:
    """Eq. 2 on one cost model: ``t_prefill(L_in) + t_decode(L_out)``, memoised.

    Prefill is one step of the whole prompt; decode is ``L_out - 1`` single-request steps, each
    priced at the mean KV length ``L_in + (L_out - 2) / 2`` (exact for cost models linear in the
    KV length, e.g. the roofline's decode).
    """

    def __init__(self, cost_model: Any) -> None:
        self.cost_model = cost_model
        self._cache: dict[tuple[int, int], float] = {}

    def prefill(self, input_len: int) -> float:
        """Seconds of one prefill step of ``input_len`` tokens."""
        return float(self.cost_model.step_time(input_len, input_len * input_len, 0, 1, 0))

    def decode_step(self, kv_len: float) -> float:
        """Seconds of one decode step of one request reading ``kv_len`` KV tokens."""
        return float(self.cost_model.step_time(1, 0, kv_len, 0, 1))

    def __call__(self, input_len: int, output_len: int) -> float:
        """Seconds one request takes alone (Eq. 2)."""
        key = (int(input_len), int(output_len))
        hit = self._cache.get(key)
        if hit is None:
            n = max(0, key[1] - 1)
            hit = self.prefill(key[0])
            if n:
                hit += n * self.decode_step(key[0] + (n - 1) / 2)
            self._cache[key] = hit
        return hit

    def remaining(self, input_len: int, computed: int, generated: int, output_len: int) -> float:
        """Seconds left of a running request (prefill left, then predicted decode left)."""
        left = 0.0
        if computed < input_len:
            left += self.prefill(input_len - computed)
        n = output_len - max(generated, 1)
        if n > 0:
            left += n * self.decode_step(input_len + generated + (n - 1) / 2)
        return left


def eq4_score(alpha: float, beta: float, t_queue: float, t_comp: float, eps: float = EPS_QUEUE_S):
    """Paper Eq. 4: ``(1 - alpha) * beta / max(t_queue, eps) - alpha * t_comp``."""
    return (1.0 - alpha) * beta / max(t_queue, eps) - alpha * t_comp


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ConfigError(f"alpha must be a number in [0, 1], got {alpha!r}")
    return float(alpha)


class _HexGenBase(Router):
    """Shared state: one Eq. 2 model per instance and the stage predictor."""

    def __init__(self, alpha: float = 0.0, trace: str = "trace3") -> None:
        self.alpha = _check_alpha(alpha)
        self.predictor = StagePredictor(trace)
        self._tcomp: dict[int, TCompModel] = {}

    def _model(self, view: InstanceView) -> TCompModel:
        m = self._tcomp.get(view.index)
        if m is None:
            m = self._tcomp[view.index] = TCompModel(view.cost_model)
        return m

    def t_comp(self, view: InstanceView, request: RequestSpec) -> float:
        """Eq. 2 of ``request`` on ``view``'s instance (predicted output length)."""
        out = self.predictor.output(stage_abbr(request.request_id))
        return self._model(view)(request.prompt_len, out)

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
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

    def derive_beta(self, instances: Sequence[InstanceView]) -> float:
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

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
        """Per-run state; derive beta from the cluster's fastest instance unless given."""
        super().reset(instances, seed)
        self.beta = self.beta_given if self.beta_given is not None else self.derive_beta(instances)

    def t_queue(self, view: InstanceView) -> float:
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

    def scores(self, request: RequestSpec, instances: Sequence[InstanceView]) -> list[float]:
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

    def kappa_of(self, view: InstanceView) -> float:
        """``kappa`` of the instance's GPU (longest matching prefix; 1.0 when unknown)."""
        gpu = (view.gpu or "").lower()
        for key in sorted(self.kappa, key=len, reverse=True):
            if gpu.startswith(key.lower()):
                return float(self.kappa[key])
        return 1.0

    def reset(self, instances: Sequence[InstanceView], seed: int) -> None:
        """Zero the cumulative work; the first instance is the baseline."""
        super().reset(instances, seed)
        self.assigned = {v.index: 0.0 for v in instances}
        self.baseline = min(v.index for v in instances) if instances else None

    def t_emp(self, view: InstanceView, request: RequestSpec) -> float:
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


def _with_alpha(cls: type, alpha: float) -> Any:
    def factory(**kw: Any) -> Any:
        kw.setdefault("alpha", alpha)
        return cls(**kw)

    return factory


def register(register_router: Any) -> None:
    """Register the HexGen-Text2SQL routers with a router registry.

    Names: ``hexgen-wb`` (Eq. 4, ``alpha`` = ``DEFAULT_ALPHA``), ``hexgen-wb:alpha=<a>`` for
    ``a`` in ``ALPHA_GRID``, ``hexgen-wb-code`` (Hexgen-Flow's score, ``DEFAULT_ALPHA``) and
    ``hexgen-wb-tuned`` (Eq. 4 with §4.3's online tuning from alpha 0).

    Args:
        register_router: ``llmsched_gym.cluster.routers.register_router``.
    """
    from llmsched_gym.policies.hexgen_tuning import HexGenTunedRouter

    register_router(
        "hexgen-wb",
        _with_alpha(HexGenWBRouter, DEFAULT_ALPHA),
        f"HexGen-Text2SQL Eq. 4 workload-balanced dispatch (alpha {DEFAULT_ALPHA})",
    )
    for a in ALPHA_GRID:
        register_router(
            f"hexgen-wb:alpha={a:.1f}",
            _with_alpha(HexGenWBRouter, a),
            f"HexGen-Text2SQL Eq. 4 dispatch at alpha {a:.1f}",
        )
    register_router(
        "hexgen-wb-code",
        _with_alpha(HexGenCodeRouter, DEFAULT_ALPHA),
        f"HexGen-Flow's cumulative-work dispatch score (kappa, no beta; alpha {DEFAULT_ALPHA})",
    )
    register_router(
        "hexgen-wb-tuned",
        HexGenTunedRouter,
        "HexGen-Text2SQL Eq. 4 dispatch, alpha tuned online by replay (paper §4.3)",
    )
