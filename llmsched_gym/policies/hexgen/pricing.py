"""HexGen-Text2SQL's pricing as Hexgen-Flow's code prices steps (for the dispatcher's cost models).

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

from collections.abc import Mapping
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError

__all__ = [
    "CALIBRATIONS",
    "CODE_DECODE_S",
    "CODE_TABLE_SCALE",
    "REFERENCE_GPU",
    "HexGenCodeCost",
    "gpu_key",
    "hexgen_cost",
]

CODE_DECODE_S: dict[str, float] = {"a100": 0.035, "a6000": 0.058, "l40s": 0.0545, "l40": 0.0545}
"""Hexgen-Flow's measured per-token decode seconds per GPU (``obtain_latency.py``)."""

CODE_TABLE_SCALE: dict[str, float] = {"a100": 1.0, "a6000": 77.98 / 37.52, "l40s": 66.81 / 37.52}
"""Ratio of the 15-call standard workflow's single-request latency to the A100's in
Hexgen-Flow's fallback ``EMPIRICAL_TIME_*`` tables (``request.py``; A100 37.52 s, A6000
77.98 s, L40 66.81 s): A100/A6000 = 0.48, A100/L40 = 0.56."""

REFERENCE_GPU = "a100"
"""The GPU the code's ratios are relative to (its baseline engine)."""

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
    from llmsched_gym.cost.registry import as_cost_model

    if calibration not in CALIBRATIONS:
        raise ConfigError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if decode not in ("batched", "code-constant"):
        raise ConfigError(f"decode must be 'batched' or 'code-constant', got {decode!r}")
    model = as_cost_model(spec)
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
        speed = as_cost_model(reference)
        if calibration == "code-ratio":
            scale = CODE_DECODE_S[key] / CODE_DECODE_S[REFERENCE_GPU]
        else:
            scale = CODE_TABLE_SCALE[key]
    decode_s = CODE_DECODE_S[key] if decode == "code-constant" and key is not None else None
    return HexGenCodeCost(speed, scale=scale, decode_s=decode_s, kv_model=model)
