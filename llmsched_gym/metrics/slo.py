"""The SLO-met rules, written once: records, summaries, TDG tables, env rewards, HexGen's curves.

A **request** meets its SLOs when it finished, ``ttft < slo_ttft`` (strict), ``tpot < slo_tpot``
(strict; a request with one output token has no TPOT, NaN, and meets any TPOT SLO) and
``finish <= deadline``, each only where set (:func:`request_slo_met`). It *has* an SLO when any of
the three is set (:func:`has_slo`). A **job** (a query, a relQuery) meets its end-to-end SLO when
``latency <= slo_e2e`` (:func:`latency_slo_met`).

A missing SLO, deadline, time or latency is NaN. The functions use only comparisons and ``&`` /
``|``, so they take numpy arrays (the records, column by column) and Python floats (the env
rewards, request by request) alike and decide the same float inputs the same way; ``x != x``
is the NaN test that works for both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["has_slo", "latency_slo_met", "request_slo_met", "slo_outcome"]


def request_slo_met(
    ttft: Any, tpot: Any, finish: Any, slo_ttft: Any, slo_tpot: Any, deadline: Any
) -> Any:
    """Whether requests met every SLO they have (see the module docstring; NaN = none).

    Args:
        ttft: Time to first token (first token minus arrival), seconds.
        tpot: Mean time per output token after the first; NaN for a single-token request.
        finish: Finish time; NaN if the request did not finish.
        slo_ttft: TTFT SLO, or NaN.
        slo_tpot: TPOT SLO, or NaN.
        deadline: Absolute deadline, or NaN.

    Returns:
        A bool (floats in) or a boolean array (arrays in). A request without any SLO that
        finished counts as met here; :func:`has_slo` tells it apart.
    """
    return (
        (finish == finish)
        & ((ttft < slo_ttft) | (slo_ttft != slo_ttft))
        & ((tpot < slo_tpot) | (slo_tpot != slo_tpot) | (tpot != tpot))
        & ((finish <= deadline) | (deadline != deadline))
    )


def has_slo(slo_ttft: Any, slo_tpot: Any, deadline: Any) -> Any:
    """Whether a request has any SLO or deadline (each NaN when unset)."""
    return (slo_ttft == slo_ttft) | (slo_tpot == slo_tpot) | (deadline == deadline)


def latency_slo_met(latency: Any, slo: Any) -> Any:
    """Whether jobs met their end-to-end SLO: ``latency <= slo`` (NaN latency or SLO: no)."""
    return latency <= slo


def slo_outcome(
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    finish_time_s: np.ndarray,
    slo_ttft_s: np.ndarray,
    slo_tpot_s: np.ndarray,
    deadline_s: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(met, has_slo) per request (:func:`request_slo_met`, :func:`has_slo`) of record columns."""
    met = request_slo_met(ttft_s, tpot_s, finish_time_s, slo_ttft_s, slo_tpot_s, deadline_s)
    return met, has_slo(slo_ttft_s, slo_tpot_s, deadline_s)
