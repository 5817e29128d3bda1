"""The workload kinds a scenario can name, each a thin adapter over ``llmsched_gym.workloads``.

Every kind declares its parameters (type, default, range) so a scenario is validated before any
data is read, and builds deterministically from ``(parameters, seed, cost model)``.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_gym.core.job import Job
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios.workload_kinds import (
    REQUIRED,
    WORKLOAD_KINDS,
    Param,
    WorkloadKind,
    positive,
)

_INT = (int,)
_NUM = (float, int)
_STR = (str,)
_BOOL = (bool,)
_ARRIVALS = ("replay", "poisson", "gamma")


def _one_of(values: tuple[str, ...], default: Any, doc: str) -> Param:
    return Param(_STR, default, lambda v: v in values, f"one of {list(values)}", doc)


def _build_trace(p: Mapping[str, Any], seed: int, cost_model: Any) -> list[RequestSpec]:
    from llmsched_gym.workloads import arrivals, priority
    from llmsched_gym.workloads.catalog import SHIPPED_TRACES
    from llmsched_gym.workloads.trace import load_trace, with_context_max_tokens

    # A shipped trace records no client limits: the default applies to every request, after
    # sampling (the same requests as without it, and 300 replaced specs instead of 30,000).
    context = p["default_max_tokens"]
    shipped = p["trace"] in SHIPPED_TRACES
    specs = list(
        load_trace(p["trace"], limit=p["limit"], default_max_tokens=None if shipped else context)
    )
    if p["start_s"] or p["duration_s"] is not None:
        specs = _window(specs, p["start_s"], p["duration_s"], p["trace"])
    if p["num_requests"] is not None:
        specs = arrivals.sample_requests(specs, p["num_requests"], seed=seed)
    specs = list(specs)  # a whole window (no num_requests) is re-timed here
    if shipped and context is not None:
        specs = [with_context_max_tokens(s, context) for s in specs]
    if p["arrival"] == "replay":
        if p["rate_per_s"] is not None:
            specs = arrivals.rescale_to_rate(specs, p["rate_per_s"])
    elif p["arrival"] == "poisson":
        specs = arrivals.poisson_arrivals(specs, p["rate_per_s"], seed=seed)
    else:
        specs = arrivals.gamma_arrivals(specs, p["rate_per_s"], p["cv"], seed=seed)
    if p["priority_classes"]:
        specs = priority.assign_priority_classes(specs, per_client=p["per_client"], seed=seed)
    if p["slo_scale"] is not None:
        specs = priority.assign_slos(
            specs,
            cost_model=cost_model,
            ttft_scale=p["slo_scale"],
            tpot_scale=p["slo_scale"],
        )
    return specs


class _Window(Sequence):
    """The requests of ``specs[lo:hi]`` re-timed by ``-start_s``, each built when it is read.

    ``sample_requests`` reads only the requests it picks, so a workload of 300 requests from a
    window of 11,000 builds 300 re-timed specs, not 11,000 (issue 40).
    """

    def __init__(self, specs: list[RequestSpec], lo: int, hi: int, start_s: float) -> None:
        self.specs, self.lo, self.hi, self.start_s = specs, lo, hi, start_s

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        s = self.specs[self.lo + i % len(self)]
        return dataclasses.replace(s, arrival_time=s.arrival_time - self.start_s)


def _window(
    specs: list[RequestSpec], start_s: float, duration_s: float | None, trace: str
) -> Sequence[RequestSpec]:
    """The requests arriving in ``[start_s, start_s + duration_s)``, re-timed to start at 0.

    Time windows of one real trace give train and held-out workloads that share a source but
    not a request (the leaderboard trains on one half hour of a trace and tests on the next).
    ``specs`` are sorted by arrival time (``load_trace``), so the window is a slice, found by
    bisection; its requests are re-timed lazily (``_Window``), in the same order and with the
    same arithmetic as re-timing every one of them.
    """
    end = math.inf if duration_s is None else start_s + duration_s
    lo = bisect.bisect_left(specs, start_s, key=_arrival)
    hi = bisect.bisect_left(specs, end, lo=lo, key=_arrival)
    if lo == hi:
        last = max((s.arrival_time for s in specs), default=0.0)
        raise ConfigError(
            f"trace {trace!r}: no request arrives in the window [{start_s:g}, {end:g}) s "
            f"(its arrivals span [0, {last:g}] s)"
        )
    return _Window(specs, lo, hi, start_s)


def _arrival(spec: RequestSpec) -> float:
    return spec.arrival_time


def _check_trace(p: Mapping[str, Any]) -> str | None:
    if p["arrival"] in ("poisson", "gamma") and p["rate_per_s"] is None:
        return f"arrival {p['arrival']!r} needs rate_per_s"
    limit, n = p["limit"], p["num_requests"]
    if limit is not None and n is not None and n > limit:
        return (
            f"num_requests ({n}) exceeds limit ({limit}): limit reads only the first N requests "
            "of the trace and num_requests samples from those; to shorten the workload, set "
            "num_requests alone"
        )
    return None


def _build_multiturn(p: Mapping[str, Any], seed: int, cost_model: Any) -> list[Job]:
    from llmsched_gym.workloads.multiturn import mooncake_sessions
    from llmsched_gym.workloads.trace import load_trace

    return mooncake_sessions(
        load_trace(p["trace"], limit=p["limit"]),
        seed=seed,
        rate_per_s=p["rate_per_s"],
        think_time_scale=p["think_time_scale"],
        reuse_answers=p["reuse_answers"],
    )


def _build_relquery(p: Mapping[str, Any], seed: int, cost_model: Any) -> list[Job]:
    from llmsched_gym.workloads.relquery import relquery_jobs

    return relquery_jobs(
        p["dataset"],
        p["num_queries"],
        p["rate_per_s"],
        seed=seed,
        max_model_len=p["max_model_len"],
        burstiness=p["burstiness"],
        row_sampling=p["row_sampling"],
        output_lengths=p["output_lengths"],
    )


def _build_text2sql(p: Mapping[str, Any], seed: int, cost_model: Any) -> list[Job]:
    from llmsched_gym.workloads.text2sql import text2sql_jobs

    return text2sql_jobs(
        p["trace"],
        p["num_queries"],
        p["rate_per_s"],
        seed=seed,
        slo_scale=p["slo_scale"],
        cost_model=None if p["slo_base_s"] is not None else cost_model,
        slo_base_s=p["slo_base_s"],
        prompt_source=p["prompt_source"],
        max_tokens=p["max_tokens"],
    )


def _build_grid(p: Mapping[str, Any], seed: int, cost_model: Any) -> list[RequestSpec]:
    from llmsched_gym.workloads.grids import infermax_mix, offline_batch

    if p["mix"] is not None:
        return infermax_mix(p["mix"], p["num_requests"], seed=seed)
    return offline_batch(p["num_requests"], p["input_len"], p["output_len"])


def _check_grid(p: Mapping[str, Any]) -> str | None:
    if p["mix"] is None and (p["input_len"] is None or p["output_len"] is None):
        return "needs input_len and output_len, or a mix such as 'LILO+SISO'"
    if p["mix"] is not None and (p["input_len"] is not None or p["output_len"] is not None):
        return "takes either a mix or input_len/output_len, not both"
    return None


def _build_servegen(p: Mapping[str, Any], seed: int, cost_model: Any) -> list[RequestSpec]:
    from llmsched_gym.workloads.servegen import generate_servegen

    return generate_servegen(
        p["model"],
        start_s=p["start_s"],
        duration_s=p["duration_s"],
        target_rate_per_s=p["target_rate_per_s"],
        seed=seed,
    )


WORKLOAD_KINDS.update(
    {
        "trace": WorkloadKind(
            "a shipped real trace (or a trace-contract file), replayed or re-timed",
            {
                "trace": Param(_STR, doc="shipped trace name or trace-contract file"),
                "limit": positive(_INT, None, "read only the first N requests"),
                "start_s": Param(
                    _NUM, 0.0, lambda v: v >= 0, ">= 0", "window start (s) in the trace's time"
                ),
                "duration_s": positive(_NUM, None, "window length (s); default: to the end"),
                "num_requests": positive(_INT, None, "sample N requests (seeded, order kept)"),
                "arrival": _one_of(_ARRIVALS, "replay", "replay timestamps, or re-draw them"),
                "rate_per_s": positive(_NUM, None, "target mean rate (rescales a replay)"),
                "cv": positive(_NUM, 1.0, "gamma coefficient of variation of the gaps"),
                "priority_classes": Param(_BOOL, False, doc="ProServe high/low classes (2:1)"),
                "per_client": Param(_BOOL, False, doc="one priority class per client"),
                "slo_scale": positive(_NUM, None, "TTFT/TPOT SLOs as multiples of unloaded"),
                "default_max_tokens": Param(
                    _INT,
                    None,
                    lambda v: v >= 2,
                    ">= 2",
                    "context length L: a request with no max_tokens gets L - prompt (vLLM's "
                    "default); unset: its true output length (legacy, seen by every policy)",
                ),
            },
            _build_trace,
            _check_trace,
        ),
        "multiturn": WorkloadKind(
            "conversations of the Mooncake conversation trace (turns found from its prefix "
            "hashes); each turn's prompt holds the earlier turns and answers, and is sent a "
            "think time after the previous answer (jobs)",
            {
                "trace": _one_of(("mooncake-conversation",), "mooncake-conversation", "source"),
                "limit": positive(_INT, 2000, "read the first N requests (ids cost memory)"),
                "rate_per_s": positive(_NUM, None, "conversations per second (rescaled starts)"),
                "think_time_scale": Param(
                    _NUM, 1.0, lambda v: v >= 0, ">= 0", "times the trace's gaps between turns"
                ),
                "reuse_answers": Param(
                    _BOOL, True, doc="turns hold their parents' generated ids (false: a copy)"
                ),
            },
            _build_multiturn,
        ),
        "relquery": WorkloadKind(
            "RelServe relQueries: one LLM call per table row, all rows together (jobs)",
            {
                "dataset": _one_of(
                    ("amazon", "rotten", "beer", "pdmx", "all"), REQUIRED, "RelServe Table 4 table"
                ),
                "num_queries": positive(_INT, 100, "relQueries"),
                "rate_per_s": positive(_NUM, 1.0, "relQueries per second (Poisson)"),
                "max_model_len": positive(_INT, 2048, "drop prompt+max_tokens > this - 10"),
                "burstiness": positive(_NUM, 1.0, "gamma shape of the gaps (1: Poisson)"),
                "row_sampling": _one_of(
                    ("independent", "code"), "independent", "fresh rows, or RelServe code's"
                ),
                "output_lengths": _one_of(
                    ("table4", "table4-drawn", "max_tokens"),
                    "table4",
                    "Table 4's mean for a uniform type mix, or on the drawn requests",
                ),
            },
            _build_relquery,
        ),
        "text2sql": WorkloadKind(
            "CHESS Text-to-SQL workflows from HexGen-Flow traces (DAG jobs with an SLO)",
            {
                "trace": _one_of(
                    ("trace1", "trace2", "trace3", "financial", "formula1"), "trace3", "source"
                ),
                "num_queries": positive(_INT, None, "queries (default: as many as the trace)"),
                "rate_per_s": positive(_NUM, 1.0, "queries per second (Poisson)"),
                "slo_scale": positive(_NUM, 5.0, "end-to-end SLO in base-SLO units"),
                "slo_base_s": positive(_NUM, None, "base SLO in s (default: from cost model)"),
                "prompt_source": _one_of(("trace", "templates"), "trace", "input lengths"),
                "max_tokens": positive(
                    _INT,
                    None,
                    "every call's visible limit (outputs capped to it); unset: each call's true "
                    "output (legacy, seen by every policy)",
                ),
            },
            _build_text2sql,
        ),
        "grid": WorkloadKind(
            "InferMax offline batch: B requests at t = 0, fixed sizes or a SISO/SILO/LISO/LILO mix",
            {
                "num_requests": positive(_INT, doc="batch size B"),
                "input_len": positive(_INT, None, "prompt tokens I"),
                "output_len": positive(_INT, None, "output tokens O"),
                "mix": Param(_STR, None, doc="InferMax groups, e.g. 'LILO+SISO'"),
            },
            _build_grid,
            _check_grid,
        ),
        "servegen": WorkloadKind(
            "ServeGen per-client rate and length distributions, generated per client",
            {
                "model": _one_of(("m-small", "deepseek-r1", "mm-image"), "m-small", "pool"),
                "start_s": Param(_NUM, 0.0, lambda v: v >= 0, ">= 0", "window start in s"),
                "duration_s": positive(_NUM, 600.0, "seconds of traffic"),
                "target_rate_per_s": positive(_NUM, None, "rescale the total rate"),
            },
            _build_servegen,
        ),
    }
)
