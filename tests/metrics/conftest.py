from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.metrics.columns import StepColumn


def request_row(**overrides):
    row = {
        "request_id": "r",
        "arrival_time_s": 0.0,
        "first_scheduled_time_s": 0.0,
        "first_token_time_s": 1.0,
        "finish_time_s": 2.0,
        "num_prompt_tokens": 10,
        "num_output_tokens": 2,
        "num_cached_tokens": 0,
        "num_computed_tokens": 11,
        "num_refill_tokens": 0,
        "num_preemptions": 0,
    }
    row.update(overrides)
    return row


@pytest.fixture(name="make_row")
def make_row_fixture():
    """Builds a complete raw request row, with overrides."""
    return request_row


@pytest.fixture(name="make_steps")
def make_steps_fixture():
    """Builds raw step columns: two steps of 1 s and 3 s at 20% and 60% KV usage."""
    return step_columns


@pytest.fixture
def tiny_rows():
    """Three requests with hand-computed metrics (see test_metric_records.py)."""
    return [
        # ttft 1.0, tpot (3 - 1) / 4 = 0.5, e2e 3.0; TTFT SLO 1.0 is missed (strict <).
        request_row(
            request_id="a",
            arrival_time_s=0.0,
            first_scheduled_time_s=0.5,
            first_token_time_s=1.0,
            finish_time_s=3.0,
            num_prompt_tokens=200,
            num_output_tokens=5,
            num_cached_tokens=100,
            num_computed_tokens=104,
            slo_ttft_s=1.0,
            priority=2,
            job_id="j1",
        ),
        # ttft 0.5, one token: tpot NaN (meets the TPOT SLO), e2e 0.5.
        request_row(
            request_id="b",
            arrival_time_s=1.0,
            first_scheduled_time_s=1.0,
            first_token_time_s=1.5,
            finish_time_s=1.5,
            num_prompt_tokens=100,
            num_output_tokens=1,
            num_cached_tokens=0,
            num_computed_tokens=100,
            slo_tpot_s=0.1,
            job_id="j1",
        ),
        # ttft 2.0, tpot (6 - 4) / 2 = 1.0 (not < 1.0), e2e 4.0; deadline 6.0 met (<=).
        request_row(
            request_id="c",
            arrival_time_s=2.0,
            first_scheduled_time_s=3.0,
            first_token_time_s=4.0,
            finish_time_s=6.0,
            num_prompt_tokens=100,
            num_output_tokens=3,
            num_cached_tokens=50,
            num_computed_tokens=52,
            num_refill_tokens=0,
            num_preemptions=1,
            slo_tpot_s=1.0,
            deadline_s=6.0,
            weight=2.0,
            job_id="j2",
            client_id="x",
        ),
    ]


def step_columns(n=2):
    cols = {c.value: np.arange(n) for c in StepColumn}
    cols["time_s"] = np.array([0.0, 1.0][:n])
    cols["duration_s"] = np.array([1.0, 3.0][:n])
    cols["kv_cache_usage"] = np.array([0.2, 0.6][:n])
    return cols
