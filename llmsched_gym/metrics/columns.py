"""Every record column and summary metric name, defined once (they are public CSV headers).

Each enum member is a ``str``, so ``df[RequestColumn.TTFT_S]`` and ``df["ttft_s"]`` are the same
column, and the member order is the column order of the frames and files. Times are seconds of
simulated time (``_s``); counts are tokens, requests or blocks (``num_``).

This module imports nothing heavy, so the engine can use the names without loading pandas.
"""

from __future__ import annotations

import enum

__all__ = [
    "DERIVED_REQUEST_COLUMNS",
    "JobColumn",
    "Metric",
    "RequestColumn",
    "StepColumn",
]


class _Name(str, enum.Enum):
    """A column name: a ``str`` that prints as its value."""

    def __str__(self) -> str:
        return self.value


class RequestColumn(_Name):
    """Columns of the per-request records (one row per request).

    Derived columns (computed by ``requests_frame``, never given by the engine):

    * ``ttft_s = first_token_time_s - arrival_time_s``
    * ``tpot_s = (finish_time_s - first_token_time_s) / (num_output_tokens - 1)``; NaN when the
      request produced a single token.
    * ``e2e_s = finish_time_s - arrival_time_s``
    * ``slo_met``: the request finished, ``ttft_s < slo_ttft_s`` (if set), ``tpot_s < slo_tpot_s``
      (if set; a NaN ``tpot_s`` counts as met) and ``finish_time_s <= deadline_s`` (if set);
      missing (``<NA>``) when the request has none of the three.
    """

    REQUEST_ID = "request_id"
    """The trace's ``request_id``."""
    ARRIVAL_TIME_S = "arrival_time_s"
    """When the request arrived."""
    FIRST_SCHEDULED_TIME_S = "first_scheduled_time_s"
    """Start of the first engine step that scheduled any of its tokens."""
    FIRST_TOKEN_TIME_S = "first_token_time_s"
    """End of the step that produced its first output token (the prompt's last chunk)."""
    FINISH_TIME_S = "finish_time_s"
    """End of the step that produced its last output token; NaN if it never finished."""
    TTFT_S = "ttft_s"
    """Time to first token (derived)."""
    TPOT_S = "tpot_s"
    """Mean time per output token after the first (derived)."""
    E2E_S = "e2e_s"
    """End-to-end latency (derived)."""
    NUM_PROMPT_TOKENS = "num_prompt_tokens"
    """Prompt length."""
    NUM_OUTPUT_TOKENS = "num_output_tokens"
    """Tokens generated."""
    NUM_CACHED_TOKENS = "num_cached_tokens"
    """Prefix-cache hit tokens at its first admission."""
    NUM_COMPUTED_TOKENS = "num_computed_tokens"
    """Every token the model computed for it, refills after preemption included."""
    NUM_REFILL_TOKENS = "num_refill_tokens"
    """Tokens recomputed after preemptions."""
    NUM_PREEMPTIONS = "num_preemptions"
    """Times it was preempted."""
    PRIORITY = "priority"
    """Trace priority (lower is served first)."""
    WEIGHT = "weight"
    """Trace weight."""
    SLO_TTFT_S = "slo_ttft_s"
    """TTFT SLO; NaN when none."""
    SLO_TPOT_S = "slo_tpot_s"
    """TPOT SLO; NaN when none."""
    DEADLINE_S = "deadline_s"
    """Absolute deadline; NaN when none."""
    SLO_MET = "slo_met"
    """Whether every SLO it has was met (derived; nullable boolean)."""
    JOB_ID = "job_id"
    """Job (relQuery, workflow) it belongs to, or missing."""
    STAGE = "stage"
    """Stage of the job that released it, or missing."""
    CLIENT_ID = "client_id"
    """Client that sent it, or missing."""
    INSTANCE_ID = "instance_id"
    """Instance that finished it (0 on a single engine; the decode instance under PD)."""
    PREFILL_INSTANCE_ID = "prefill_instance_id"
    """Instance that computed its prompt (differs from ``instance_id`` only under PD)."""
    KV_TRANSFER_S = "kv_transfer_s"
    """Seconds its KV cache spent moving from the prefill to the decode instance (NaN: none)."""


DERIVED_REQUEST_COLUMNS: tuple[RequestColumn, ...] = (
    RequestColumn.TTFT_S,
    RequestColumn.TPOT_S,
    RequestColumn.E2E_S,
    RequestColumn.SLO_MET,
)
"""Request columns computed by ``requests_frame`` from the others."""


class StepColumn(_Name):
    """Columns of the per-step records (one row per executed engine step)."""

    STEP = "step"
    """0-based count of executed steps."""
    TIME_S = "time_s"
    """Clock at the start of the step."""
    DURATION_S = "duration_s"
    """Step time from the cost model."""
    NUM_SCHEDULED_TOKENS = "num_scheduled_tokens"
    """Tokens computed in the step (all requests)."""
    NUM_PREFILL = "num_prefill"
    """Requests in the step still computing their prompt (or refill)."""
    NUM_DECODE = "num_decode"
    """Requests in the step generating one token."""
    NUM_NEW = "num_new"
    """Requests admitted for the first time in the step."""
    NUM_RESUMED = "num_resumed"
    """Preempted requests re-admitted in the step."""
    NUM_PREEMPTED = "num_preempted"
    """Requests preempted in the step."""
    NUM_FINISHED = "num_finished"
    """Requests finishing at the end of the step."""
    NUM_RUNNING = "num_running"
    """Running requests after the step."""
    NUM_WAITING = "num_waiting"
    """Waiting requests after the step."""
    NUM_FREE_BLOCKS = "num_free_blocks"
    """Free KV blocks after scheduling (vLLM's count: cached-but-unused blocks count as free)."""
    KV_CACHE_USAGE = "kv_cache_usage"
    """Fraction of usable KV blocks in use, in [0, 1]."""


class JobColumn(_Name):
    """Columns of the per-job records (relQuery, workflow), after RelServe's Eq. (2).

    A job's prefill of request ``r`` ends when ``r``'s first token is produced, so:
    ``waiting = first start - arrival``, ``core running = last prefill end - first start``,
    ``tail running = finish - last prefill end``, and ``latency = finish - arrival`` is their sum.
    """

    JOB_ID = "job_id"
    """The requests' ``job_id``."""
    NUM_REQUESTS = "num_requests"
    """Requests in the job."""
    ARRIVAL_TIME_S = "arrival_time_s"
    """Earliest arrival of its requests."""
    FIRST_SCHEDULED_TIME_S = "first_scheduled_time_s"
    """Start of the first step that scheduled any of its requests (``start_ts(p_1)``)."""
    LAST_PREFILL_END_TIME_S = "last_prefill_end_time_s"
    """Latest first-token time of its requests (``end_ts(p_m)``)."""
    FINISH_TIME_S = "finish_time_s"
    """Latest finish of its requests (``end_ts(d_n)``)."""
    LATENCY_S = "latency_s"
    """``finish_time_s - arrival_time_s``."""
    WAITING_TIME_S = "waiting_time_s"
    """``first_scheduled_time_s - arrival_time_s``."""
    CORE_RUNNING_TIME_S = "core_running_time_s"
    """``last_prefill_end_time_s - first_scheduled_time_s``."""
    TAIL_RUNNING_TIME_S = "tail_running_time_s"
    """``finish_time_s - last_prefill_end_time_s``."""
    KIND = "kind"
    """What the job is (``relquery``, ``text2sql``, ...); empty when only requests were given."""
    NUM_STAGES = "num_stages"
    """Stages with at least one finished request."""
    SLO_E2E_S = "slo_e2e_s"
    """The job's end-to-end SLO in seconds (NaN if none)."""
    SLO_MET = "slo_met"
    """``latency_s <= slo_e2e_s``; an unfinished job misses it; NA without an SLO."""


class Metric(_Name):
    """Names of the run-level summary metrics (``summarize``), also the columns of ``compare``.

    Percentiles are numpy's default (linear interpolation between order statistics); the ITL
    percentiles are the same statistic over the gaps expanded by their multiplicities.
    """

    NUM_REQUESTS = "num_requests"
    """Requests in the records."""
    NUM_FINISHED = "num_finished"
    """Requests that finished."""
    DURATION_S = "duration_s"
    """From the first arrival to the last finish."""
    REQUEST_THROUGHPUT = "request_throughput"
    """Finished requests per second of ``duration_s``."""
    OUTPUT_TOKEN_THROUGHPUT = "output_token_throughput"
    """Output tokens of finished requests per second."""
    TOTAL_TOKEN_THROUGHPUT = "total_token_throughput"
    """Prompt plus output tokens of finished requests per second (vLLM's benchmark definition)."""
    TTFT_S_MEAN = "ttft_s_mean"
    TTFT_S_P50 = "ttft_s_p50"
    TTFT_S_P90 = "ttft_s_p90"
    TTFT_S_P99 = "ttft_s_p99"
    TPOT_S_MEAN = "tpot_s_mean"
    TPOT_S_P50 = "tpot_s_p50"
    TPOT_S_P90 = "tpot_s_p90"
    TPOT_S_P99 = "tpot_s_p99"
    ITL_S_MEAN = "itl_s_mean"
    ITL_S_P50 = "itl_s_p50"
    ITL_S_P90 = "itl_s_p90"
    ITL_S_P99 = "itl_s_p99"
    E2E_S_MEAN = "e2e_s_mean"
    E2E_S_P50 = "e2e_s_p50"
    E2E_S_P90 = "e2e_s_p90"
    E2E_S_P99 = "e2e_s_p99"
    GOODPUT = "goodput"
    """Requests per second that finished and met their SLOs (see ``summarize``)."""
    SLO_ATTAINMENT = "slo_attainment"
    """Fraction of SLO-bound requests that met their SLOs."""
    NUM_PREEMPTIONS = "num_preemptions"
    """Preemptions over all requests."""
    NUM_REFILL_TOKENS = "num_refill_tokens"
    """Tokens recomputed after preemptions, over all requests."""
    PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"
    """Sum of cached over sum of prompt tokens, at first admission."""
    KV_CACHE_USAGE_MEAN = "kv_cache_usage_mean"
    """Time-weighted mean KV cache usage over the steps (needs step records)."""
    KV_CACHE_USAGE_MAX = "kv_cache_usage_max"
    """Largest KV cache usage of any step (needs step records)."""
    NUM_JOBS = "num_jobs"
    """Distinct job ids."""
    JOB_LATENCY_S_MEAN = "job_latency_s_mean"
    """Mean job latency (RelServe's metric)."""
    JOB_LATENCY_S_P99 = "job_latency_s_p99"
    JOB_WAITING_TIME_S_MEAN = "job_waiting_time_s_mean"
    JOB_CORE_RUNNING_TIME_S_MEAN = "job_core_running_time_s_mean"
    JOB_TAIL_RUNNING_TIME_S_MEAN = "job_tail_running_time_s_mean"
