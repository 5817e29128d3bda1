"""Per-request, per-step and per-job records as pandas DataFrames (columns: ``columns.py``).

The engine hands over raw measurements; everything derived (TTFT, TPOT, end-to-end latency, SLO
outcome, job phases) is computed here, vectorised, so it has one definition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from llmsched_gym.metrics.columns import (
    DERIVED_REQUEST_COLUMNS,
    JobColumn,
    RequestColumn,
    StepColumn,
)
from llmsched_gym.metrics.slo import latency_slo_met, slo_outcome
from llmsched_gym.metrics.table import (
    FLOAT_REQUEST_COLUMNS,
    INT_REQUEST_COLUMNS,
    INT_STEP_COLUMNS,
    derived_request_columns,
)

__all__ = ["frame_from_table", "jobs_frame", "requests_frame", "slo_outcome", "steps_frame"]

RC = RequestColumn

_FLOAT_REQUEST_COLUMNS = tuple(c for c in FLOAT_REQUEST_COLUMNS if c not in DERIVED_REQUEST_COLUMNS)
_INT_REQUEST_COLUMNS = INT_REQUEST_COLUMNS
_OPTIONAL_REQUEST_DEFAULTS: dict[RequestColumn, Any] = {
    RC.PRIORITY: 0,
    RC.WEIGHT: 1.0,
    RC.SLO_TTFT_S: np.nan,
    RC.SLO_TPOT_S: np.nan,
    RC.DEADLINE_S: np.nan,
    RC.JOB_ID: None,
    RC.STAGE: None,
    RC.CLIENT_ID: None,
    RC.INSTANCE_ID: 0,
    RC.PREFILL_INSTANCE_ID: 0,
    RC.KV_TRANSFER_S: np.nan,
}
"""Request attributes that default as in the trace contract when the rows omit them."""

_RAW_REQUEST_COLUMNS = tuple(c for c in RequestColumn if c not in DERIVED_REQUEST_COLUMNS)
_REQUIRED_REQUEST_COLUMNS = tuple(
    c for c in _RAW_REQUEST_COLUMNS if c not in _OPTIONAL_REQUEST_DEFAULTS
)


def _check_names(given: Sequence[str], known: Sequence[str], what: str, fix: str) -> None:
    """Raises ValueError naming the first unknown column."""
    known_set = set(known)
    unknown = [name for name in given if name not in known_set]
    if unknown:
        raise ValueError(
            f"{what}: unknown column {unknown[0]!r}; known columns: {', '.join(known)}. {fix}"
        )


def _as_columns(rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Builds a raw frame from row dicts or from columns."""
    if isinstance(rows, Mapping):
        return pd.DataFrame(
            {str(k): list(v) if not isinstance(v, np.ndarray) else v for k, v in rows.items()}
        )
    return pd.DataFrame.from_records(list(rows))


def _to_dtype(frame: pd.DataFrame, column: str, kind: str, what: str) -> None:
    """Converts ``frame[column]`` to float64 or int64, naming the column on failure."""
    try:
        if kind == "float":
            frame[column] = pd.to_numeric(frame[column], errors="raise").astype(np.float64)
        else:
            values = pd.to_numeric(frame[column], errors="raise")
            if values.isna().any():
                bad = frame[column][values.isna()].iloc[0]
                raise ValueError(f"missing value {bad!r}")
            as_int = values.astype(np.int64)
            if not (as_int == values).all():
                raise ValueError("non-integer value")
            frame[column] = as_int
    except (TypeError, ValueError) as err:
        expectation = "numbers (None/NaN for missing)" if kind == "float" else "integers"
        raise ValueError(f"{what}: column {column!r} must hold {expectation}: {err}") from None


def requests_frame(
    rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]],
) -> pd.DataFrame:
    """Builds the per-request records, adding the derived columns.

    Args:
        rows: One dict per request, or one sequence per column, keyed by ``RequestColumn``
            values. Required: every non-derived column except the request attributes
            ``priority`` (default 0), ``weight`` (1.0), ``slo_ttft_s``, ``slo_tpot_s``,
            ``deadline_s`` (NaN: none), ``job_id``, ``stage`` and ``client_id`` (missing). Times
            of events that did not happen are None or NaN.

    Returns:
        A DataFrame with exactly the ``RequestColumn`` columns, in the enum's order: times and
        SLOs float64, counts and priority int64, ``slo_met`` nullable boolean.

    Raises:
        ValueError: For an unknown or missing column, a derived column given as input, or a
            column with values of the wrong kind; the message names the column.
    """
    what = "requests_frame"
    frame = _as_columns(rows)
    _check_names(
        list(frame.columns),
        list(RequestColumn),
        what,
        "Derived columns (ttft_s, tpot_s, e2e_s, slo_met) are computed here; do not pass them.",
    )
    derived = [c for c in DERIVED_REQUEST_COLUMNS if c in frame.columns]
    if derived:
        raise ValueError(
            f"{what}: column {derived[0].value!r} is derived (computed by requests_frame); "
            "remove it from the rows"
        )
    missing = [c.value for c in _REQUIRED_REQUEST_COLUMNS if c not in frame.columns]
    if missing and len(frame.columns) > 0:
        raise ValueError(
            f"{what}: missing required column(s) {', '.join(missing)}; the engine must record them"
        )
    if missing:  # no rows at all: an empty frame with the right columns
        frame = pd.DataFrame({c.value: pd.Series(dtype=object) for c in _REQUIRED_REQUEST_COLUMNS})
    for column, default in _OPTIONAL_REQUEST_DEFAULTS.items():
        if column not in frame.columns:
            frame[column.value] = default if len(frame) else pd.Series(dtype=object)
        elif default is not None and not (isinstance(default, float) and math.isnan(default)):
            # Rows that omit (or null) an attribute get its default, as in the trace contract.
            values = frame[column.value]
            frame[column.value] = values.astype(object).where(values.notna(), default)
    for column in _FLOAT_REQUEST_COLUMNS:
        _to_dtype(frame, column.value, "float", what)
    for column in _INT_REQUEST_COLUMNS:
        _to_dtype(frame, column.value, "int", what)
    not_str = frame[RC.REQUEST_ID.value].map(lambda v: not isinstance(v, str)).to_numpy(bool)
    if not_str.any():
        bad = frame[RC.REQUEST_ID.value][not_str].iloc[0]
        bad = bad.item() if isinstance(bad, np.generic) else bad
        raise ValueError(f"{what}: column 'request_id' must hold strings, got {bad!r}")

    derived = derived_request_columns(
        *(
            frame[c.value].to_numpy()
            for c in (
                RC.ARRIVAL_TIME_S,
                RC.FIRST_TOKEN_TIME_S,
                RC.FINISH_TIME_S,
                RC.NUM_OUTPUT_TOKENS,
                RC.SLO_TTFT_S,
                RC.SLO_TPOT_S,
                RC.DEADLINE_S,
            )
        )  # fmt: skip
    )
    for column in (RC.TTFT_S, RC.TPOT_S, RC.E2E_S):
        frame[column.value] = derived[column.value]
    met = pd.array(derived[RC.SLO_MET.value], dtype="boolean")
    met[~derived["_has_slo"]] = pd.NA
    frame[RC.SLO_MET.value] = met
    return frame[[c.value for c in RequestColumn]].reset_index(drop=True)


def frame_from_table(table: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """The per-request DataFrame of a request table (``table.request_table``).

    Dtypes as ``requests_frame`` gives them.
    """
    data = dict(table)
    data[RC.SLO_MET.value] = pd.array(list(table[RC.SLO_MET.value]), dtype="boolean")
    return pd.DataFrame(data, columns=[c.value for c in RequestColumn])


def steps_frame(columns: Mapping[str, np.ndarray | Sequence[Any]]) -> pd.DataFrame:
    """Builds the per-step records from one array per ``StepColumn``.

    Args:
        columns: Every ``StepColumn`` value mapped to an array with one entry per step.

    Returns:
        A DataFrame with the ``StepColumn`` columns in the enum's order (times and
        ``kv_cache_usage`` float64, counts int64).

    Raises:
        ValueError: For an unknown or missing column, columns of different lengths, or values of
            the wrong kind.
    """
    what = "steps_frame"
    _check_names([str(k) for k in columns], list(StepColumn), what, "")
    missing = [c.value for c in StepColumn if c.value not in columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {', '.join(missing)}")
    lengths = {str(k): len(v) for k, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{what}: columns must have equal lengths, got {lengths}")
    frame = pd.DataFrame({c.value: np.asarray(columns[c.value]) for c in StepColumn})
    for column in StepColumn:
        kind = "int" if column in INT_STEP_COLUMNS else "float"
        _to_dtype(frame, column.value, kind, what)
    return frame


def jobs_frame(requests: pd.DataFrame, jobs: Sequence[Any] | None = None) -> pd.DataFrame:
    """Per-job records (relQuery, workflow) from the per-request records.

    Requests without a ``job_id`` are left out. Phases follow RelServe (PVLDB, Eq. 2): waiting
    until the job's first scheduled step, core running until its last prefill ends (its last
    first token), tail running until its last request finishes.

    Args:
        requests: Records from ``requests_frame``.
        jobs: The ``Job`` objects, for the job's own arrival, kind, stage count and SLO; a job
            none of whose requests finished still gets a row (NaN times, SLO missed).

    Returns:
        One row per job, ordered by arrival then job id, with the ``JobColumn`` columns.
    """
    rows = requests.loc[
        requests[RC.JOB_ID.value].notna(),
        [
            RC.JOB_ID.value,
            RC.ARRIVAL_TIME_S.value,
            RC.FIRST_SCHEDULED_TIME_S.value,
            RC.FIRST_TOKEN_TIME_S.value,
            RC.FINISH_TIME_S.value,
        ],
    ].copy()
    # A job whose last request has not produced its first token (or finished) has no prefill end
    # (finish): NaN must win the max, so it travels as +inf through the groupby.
    for column in (RC.FIRST_TOKEN_TIME_S.value, RC.FINISH_TIME_S.value):
        rows[column] = rows[column].fillna(np.inf)
    grouped = rows.groupby(RC.JOB_ID.value, sort=False)
    frame = pd.DataFrame(
        {
            JobColumn.NUM_REQUESTS.value: grouped.size(),
            JobColumn.ARRIVAL_TIME_S.value: grouped[RC.ARRIVAL_TIME_S.value].min(),
            JobColumn.FIRST_SCHEDULED_TIME_S.value: grouped[RC.FIRST_SCHEDULED_TIME_S.value].min(),
            JobColumn.LAST_PREFILL_END_TIME_S.value: grouped[RC.FIRST_TOKEN_TIME_S.value]
            .max()
            .replace(np.inf, np.nan),
            JobColumn.FINISH_TIME_S.value: grouped[RC.FINISH_TIME_S.value]
            .max()
            .replace(np.inf, np.nan),
        }
    )
    frame.index.name = JobColumn.JOB_ID.value
    frame = frame.reset_index()
    arrival = frame[JobColumn.ARRIVAL_TIME_S.value]
    start = frame[JobColumn.FIRST_SCHEDULED_TIME_S.value]
    prefill_end = frame[JobColumn.LAST_PREFILL_END_TIME_S.value]
    finish = frame[JobColumn.FINISH_TIME_S.value]
    frame[JobColumn.LATENCY_S.value] = finish - arrival
    frame[JobColumn.WAITING_TIME_S.value] = start - arrival
    frame[JobColumn.CORE_RUNNING_TIME_S.value] = prefill_end - start
    frame[JobColumn.TAIL_RUNNING_TIME_S.value] = finish - prefill_end
    frame[JobColumn.NUM_REQUESTS.value] = frame[JobColumn.NUM_REQUESTS.value].astype(np.int64)
    frame[JobColumn.KIND.value] = ""
    stages = requests.groupby(RC.JOB_ID.value)[RC.STAGE.value].nunique()
    frame[JobColumn.NUM_STAGES.value] = (
        frame[JobColumn.JOB_ID.value].map(stages).fillna(0).astype(np.int64)
    )
    frame[JobColumn.SLO_E2E_S.value] = np.nan
    if jobs is not None:
        frame = _with_job_info(frame, jobs)
    slo = frame[JobColumn.SLO_E2E_S.value].to_numpy(np.float64)
    latency = frame[JobColumn.LATENCY_S.value].to_numpy(np.float64)
    met = pd.array(latency_slo_met(np.nan_to_num(latency, nan=np.inf), slo), dtype="boolean")
    met[np.isnan(slo)] = pd.NA
    frame[JobColumn.SLO_MET.value] = met
    frame = frame.sort_values(
        [JobColumn.ARRIVAL_TIME_S.value, JobColumn.JOB_ID.value], kind="stable"
    )
    return frame[[c.value for c in JobColumn]].reset_index(drop=True)


def _with_job_info(frame: pd.DataFrame, jobs: Sequence[Any]) -> pd.DataFrame:
    """Join the jobs' own arrival, kind and SLO; add rows for jobs with no finished request."""
    info = pd.DataFrame(
        {
            JobColumn.JOB_ID.value: [j.job_id for j in jobs],
            "_arrival": [float(j.arrival_time) for j in jobs],
            "_kind": [j.kind for j in jobs],
            "_slo": [np.nan if j.slo_e2e_s is None else float(j.slo_e2e_s) for j in jobs],
        }
    )
    frame = frame.merge(info, on=JobColumn.JOB_ID.value, how="outer")
    frame[JobColumn.ARRIVAL_TIME_S.value] = frame["_arrival"].fillna(
        frame[JobColumn.ARRIVAL_TIME_S.value]
    )
    frame[JobColumn.KIND.value] = frame["_kind"].fillna(frame[JobColumn.KIND.value]).fillna("")
    frame[JobColumn.SLO_E2E_S.value] = frame["_slo"]
    for c in (JobColumn.NUM_REQUESTS, JobColumn.NUM_STAGES):
        frame[c.value] = frame[c.value].fillna(0).astype(np.int64)
    arrival = frame[JobColumn.ARRIVAL_TIME_S.value]
    frame[JobColumn.LATENCY_S.value] = frame[JobColumn.FINISH_TIME_S.value] - arrival
    frame[JobColumn.WAITING_TIME_S.value] = frame[JobColumn.FIRST_SCHEDULED_TIME_S.value] - arrival
    return frame.drop(columns=["_arrival", "_kind", "_slo"])
