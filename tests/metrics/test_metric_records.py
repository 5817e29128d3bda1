"""Record frames: column names and order, derived columns on hand-computed requests, validation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from llmsched_gym.metrics import (
    DERIVED_REQUEST_COLUMNS,
    JobColumn,
    Metric,
    RequestColumn,
    StepColumn,
    jobs_frame,
    requests_frame,
    steps_frame,
)

REQUEST_NAMES = [
    "request_id",
    "arrival_time_s",
    "first_scheduled_time_s",
    "first_token_time_s",
    "finish_time_s",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "num_prompt_tokens",
    "num_output_tokens",
    "num_cached_tokens",
    "num_computed_tokens",
    "num_refill_tokens",
    "num_preemptions",
    "priority",
    "weight",
    "slo_ttft_s",
    "slo_tpot_s",
    "deadline_s",
    "slo_met",
    "job_id",
    "stage",
    "client_id",
    "instance_id",
    "prefill_instance_id",
    "kv_transfer_s",
]
STEP_NAMES = [
    "step",
    "time_s",
    "duration_s",
    "num_scheduled_tokens",
    "num_prefill",
    "num_decode",
    "num_new",
    "num_resumed",
    "num_preempted",
    "num_finished",
    "num_running",
    "num_waiting",
    "num_free_blocks",
    "kv_cache_usage",
]


def test_column_names_are_the_public_contract() -> None:
    assert [c.value for c in RequestColumn] == REQUEST_NAMES
    assert [c.value for c in StepColumn] == STEP_NAMES
    assert RequestColumn.TTFT_S == "ttft_s" and str(RequestColumn.TTFT_S) == "ttft_s"
    assert f"{StepColumn.KV_CACHE_USAGE}" == "kv_cache_usage"
    assert {c.value for c in DERIVED_REQUEST_COLUMNS} == {"ttft_s", "tpot_s", "e2e_s", "slo_met"}
    for enum in (RequestColumn, StepColumn, JobColumn, Metric):
        values = [m.value for m in enum]
        assert len(values) == len(set(values))
        assert all(v == v.lower() and " " not in v for v in values)


def test_derived_columns_hand_computed(tiny_rows) -> None:
    df = requests_frame(tiny_rows)
    assert list(df.columns) == REQUEST_NAMES
    assert df["ttft_s"].tolist() == [1.0, 0.5, 2.0]
    assert df["tpot_s"].iloc[0] == 0.5 and math.isnan(df["tpot_s"].iloc[1])
    assert df["tpot_s"].iloc[2] == 1.0
    assert df["e2e_s"].tolist() == [3.0, 0.5, 4.0]
    # a: ttft 1.0 is not < 1.0; b: NaN tpot meets 0.1; c: tpot 1.0 is not < 1.0.
    assert df["slo_met"].tolist() == [False, True, False]
    assert str(df["slo_met"].dtype) == "boolean"
    assert df["priority"].tolist() == [2, 0, 0] and df["weight"].tolist() == [1.0, 1.0, 2.0]
    assert df["num_preemptions"].dtype == np.int64 and df["arrival_time_s"].dtype == np.float64
    assert df["client_id"].isna().tolist() == [True, True, False]
    assert df["instance_id"].tolist() == [0, 0, 0] and df["kv_transfer_s"].isna().all()


def test_slo_rules_edges(make_row) -> None:
    rows = [
        make_row(request_id="none"),  # no SLO: missing
        make_row(request_id="ttft-met", slo_ttft_s=1.01),
        make_row(request_id="deadline-exact", deadline_s=2.0),  # finish 2.0 <= 2.0
        make_row(request_id="deadline-missed", deadline_s=1.99),
        make_row(request_id="tpot-met", slo_tpot_s=1.01),  # tpot = 1.0
        make_row(request_id="unfinished", finish_time_s=None, slo_ttft_s=5.0),
        make_row(request_id="all", slo_ttft_s=2.0, slo_tpot_s=2.0, deadline_s=10.0),
    ]
    df = requests_frame(rows)
    met = df.set_index("request_id")["slo_met"]
    assert met["none"] is pd.NA
    assert met["ttft-met"] and met["deadline-exact"] and met["tpot-met"] and met["all"]
    assert not met["deadline-missed"] and not met["unfinished"]
    assert math.isnan(df.set_index("request_id").loc["unfinished", "e2e_s"])


def test_rows_and_columns_inputs_agree(tiny_rows) -> None:
    keys = sorted({k for row in tiny_rows for k in row})
    columns = {k: [row.get(k) for row in tiny_rows] for k in keys}
    for k in ("slo_ttft_s", "slo_tpot_s", "deadline_s"):
        columns[k] = [math.nan if v is None else v for v in columns[k]]
    columns["weight"] = [1.0 if v is None else v for v in columns["weight"]]
    columns["priority"] = [0 if v is None else v for v in columns["priority"]]
    pd.testing.assert_frame_equal(requests_frame(tiny_rows), requests_frame(columns))


def test_empty_records_have_all_columns() -> None:
    for rows in ([], {c.value: [] for c in RequestColumn if c not in DERIVED_REQUEST_COLUMNS}):
        df = requests_frame(rows)
        assert list(df.columns) == REQUEST_NAMES and len(df) == 0


def test_request_validation(make_row) -> None:
    with pytest.raises(ValueError, match=r"unknown column 'ttft'"):
        requests_frame([make_row(ttft=1.0)])
    with pytest.raises(ValueError, match=r"column 'ttft_s' is derived"):
        requests_frame([make_row(ttft_s=1.0)])
    row = make_row()
    del row["num_cached_tokens"]
    with pytest.raises(ValueError, match=r"missing required column\(s\) num_cached_tokens"):
        requests_frame([row])
    with pytest.raises(ValueError, match=r"column 'num_output_tokens' must hold integers"):
        requests_frame([make_row(num_output_tokens=2.5)])
    with pytest.raises(ValueError, match=r"column 'num_preemptions' must hold integers"):
        requests_frame([make_row(num_preemptions=None)])
    with pytest.raises(ValueError, match=r"column 'arrival_time_s' must hold numbers"):
        requests_frame([make_row(arrival_time_s="soon")])
    with pytest.raises(ValueError, match=r"column 'request_id' must hold strings, got 7"):
        requests_frame([make_row(request_id=7)])


def test_steps_frame(make_steps) -> None:
    df = steps_frame(make_steps())
    assert list(df.columns) == STEP_NAMES
    assert df["step"].dtype == np.int64 and df["kv_cache_usage"].dtype == np.float64
    cols = make_steps()
    del cols["num_new"]
    with pytest.raises(ValueError, match=r"missing column\(s\) num_new"):
        steps_frame(cols)
    cols = make_steps()
    cols["num_new"] = np.arange(3)
    with pytest.raises(ValueError, match="equal lengths"):
        steps_frame(cols)
    cols = make_steps()
    cols["bogus"] = np.arange(2)
    with pytest.raises(ValueError, match="unknown column 'bogus'"):
        steps_frame(cols)


def test_jobs_frame_phases(tiny_rows, make_row) -> None:
    rows = [*tiny_rows, make_row(request_id="solo")]
    jobs = jobs_frame(requests_frame(rows))
    assert list(jobs.columns) == [c.value for c in JobColumn]
    j1 = jobs.iloc[0].to_dict()
    # j1: a (arr 0, sched 0.5, first token 1.0, finish 3.0) and b (1.0, 1.0, 1.5, 1.5).
    assert j1["job_id"] == "j1" and j1["num_requests"] == 2
    assert (j1["arrival_time_s"], j1["first_scheduled_time_s"]) == (0.0, 0.5)
    assert (j1["last_prefill_end_time_s"], j1["finish_time_s"]) == (1.5, 3.0)
    assert (j1["waiting_time_s"], j1["core_running_time_s"], j1["tail_running_time_s"]) == (
        0.5,
        1.0,
        1.5,
    )
    assert j1["latency_s"] == 3.0
    assert jobs["job_id"].tolist() == ["j1", "j2"]  # "solo" has no job


def test_unfinished_request_makes_job_unfinished(make_row) -> None:
    rows = [
        make_row(request_id="a", job_id="j"),
        make_row(request_id="b", job_id="j", finish_time_s=None),
    ]
    jobs = jobs_frame(requests_frame(rows))
    assert math.isnan(jobs.loc[0, "finish_time_s"]) and math.isnan(jobs.loc[0, "latency_s"])
