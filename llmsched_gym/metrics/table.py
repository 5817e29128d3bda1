"""Per-request records as plain numpy columns: the pandas-free path of a run.

A *request table* is a dict from ``RequestColumn`` value to a numpy array, in the enum's order:
times and SLOs float64 (NaN: none), counts and priority int64, ids object (None: missing),
``slo_met`` object (True / False / None: no SLO). ``request_columns`` reads the raw columns off
the engine's finished requests; ``records.requests_frame`` turns a table into the DataFrame
users see; the derived columns have one definition, here. The CLI writes tables
directly (``write_table``), so a plain ``simulate`` never pays for importing pandas.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Mapping, Sequence
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.core.request import Request, RequestStatus
from llmsched_gym.metrics._atomic import atomic_output
from llmsched_gym.metrics.columns import DERIVED_REQUEST_COLUMNS, RequestColumn, StepColumn
from llmsched_gym.metrics.slo import slo_outcome

__all__ = [
    "FLOAT_REQUEST_COLUMNS",
    "INT_REQUEST_COLUMNS",
    "INT_STEP_COLUMNS",
    "derived_request_columns",
    "request_columns",
    "request_table",
    "spec_columns",
    "step_table",
    "write_table",
]

RC = RequestColumn
_SEQ = attrgetter("seq")

FLOAT_REQUEST_COLUMNS = (
    RC.ARRIVAL_TIME_S,
    RC.FIRST_SCHEDULED_TIME_S,
    RC.FIRST_TOKEN_TIME_S,
    RC.FINISH_TIME_S,
    RC.WEIGHT,
    RC.SLO_TTFT_S,
    RC.SLO_TPOT_S,
    RC.DEADLINE_S,
    RC.TTFT_S,
    RC.TPOT_S,
    RC.E2E_S,
    RC.KV_TRANSFER_S,
)
INT_REQUEST_COLUMNS = (
    RC.NUM_PROMPT_TOKENS,
    RC.NUM_OUTPUT_TOKENS,
    RC.NUM_CACHED_TOKENS,
    RC.NUM_COMPUTED_TOKENS,
    RC.NUM_REFILL_TOKENS,
    RC.NUM_PREEMPTIONS,
    RC.PRIORITY,
    RC.INSTANCE_ID,
    RC.PREFILL_INSTANCE_ID,
)


def spec_columns(specs: Sequence[Any]) -> dict[str, list]:
    """The record columns that come straight from the requests' specs (SLOs, job, client)."""
    return {
        RC.WEIGHT.value: [s.weight for s in specs],
        RC.SLO_TTFT_S.value: [s.slo_ttft_s for s in specs],
        RC.SLO_TPOT_S.value: [s.slo_tpot_s for s in specs],
        RC.DEADLINE_S.value: [s.deadline_s for s in specs],
        RC.JOB_ID.value: [s.job_id for s in specs],
        RC.STAGE.value: [s.stage for s in specs],
        RC.CLIENT_ID.value: [s.client_id for s in specs],
    }


def request_columns(
    finished: Sequence[Request], instance_id: int = 0, aborted: Sequence[Request] = ()
) -> dict[str, list]:
    """Per-request record columns (raw ones; derived columns are added by the frame).

    ``aborted`` requests (``RequestSpec.cancel_time``) get a row too, with ``finish_time_s``
    NaN (they never finished, so latency and throughput metrics leave them out), the tokens
    they got, and ``num_cached_tokens`` 0 if never admitted.
    """
    reqs = sorted([*finished, *aborted], key=_SEQ)
    specs = [r.spec for r in reqs]
    computed = [r.num_computed_total for r in reqs]
    done = [r.status is RequestStatus.FINISHED for r in reqs]
    cached = [max(r.num_cached_tokens, 0) for r in reqs]
    # Refill: tokens computed beyond one pass over prompt + output (the last token is sampled,
    # never computed) minus the first prefix hit, i.e. recomputation after preemption. For an
    # aborted request, beyond one pass over what it had when aborted (at least 0).
    refill = [
        c - (r.num_prompt_tokens + r.num_output_tokens - 1 - h)
        if d
        else max(0, c - (r.num_computed_tokens - h))
        for r, c, h, d in zip(reqs, computed, cached, done, strict=True)
    ]
    return {
        RC.REQUEST_ID.value: [r.request_id for r in reqs],
        RC.ARRIVAL_TIME_S.value: [r.arrival_time for r in reqs],
        RC.FIRST_SCHEDULED_TIME_S.value: [r.first_scheduled_time for r in reqs],
        RC.FIRST_TOKEN_TIME_S.value: [r.first_token_time for r in reqs],
        RC.FINISH_TIME_S.value: [
            r.finish_time if d else None for r, d in zip(reqs, done, strict=True)
        ],
        RC.NUM_PROMPT_TOKENS.value: [r.num_prompt_tokens for r in reqs],
        RC.NUM_OUTPUT_TOKENS.value: [r.num_output_tokens for r in reqs],
        RC.NUM_CACHED_TOKENS.value: cached,
        RC.NUM_COMPUTED_TOKENS.value: computed,
        RC.NUM_REFILL_TOKENS.value: refill,
        RC.NUM_PREEMPTIONS.value: [r.num_preemptions for r in reqs],
        RC.PRIORITY.value: [r.priority for r in reqs],
        **spec_columns(specs),
        RC.INSTANCE_ID.value: [instance_id] * len(reqs),
        RC.PREFILL_INSTANCE_ID.value: [instance_id] * len(reqs),
        RC.KV_TRANSFER_S.value: [None] * len(reqs),
    }


def derived_request_columns(
    arrival: np.ndarray,
    first_token: np.ndarray,
    finish: np.ndarray,
    num_output: np.ndarray,
    slo_ttft: np.ndarray,
    slo_tpot: np.ndarray,
    deadline: np.ndarray,
) -> dict[str, np.ndarray]:
    """TTFT, TPOT (over the gaps after the first token), end-to-end latency and SLO outcome.

    ``slo_met`` comes back as (met, has_slo) boolean arrays under that key's two halves:
    ``"slo_met"`` and ``"_has_slo"``.
    """
    ttft = first_token - arrival
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(num_output > 1, (finish - first_token) / (num_output - 1), np.nan)
    e2e = finish - arrival
    met, has_slo = slo_outcome(ttft, tpot, finish, slo_ttft, slo_tpot, deadline)
    return {RC.TTFT_S.value: ttft, RC.TPOT_S.value: tpot, RC.E2E_S.value: e2e,
            RC.SLO_MET.value: met, "_has_slo": has_slo}  # fmt: skip


INT_STEP_COLUMNS = frozenset(StepColumn) - {
    StepColumn.TIME_S,
    StepColumn.DURATION_S,
    StepColumn.KV_CACHE_USAGE,
}
"""Step columns held as int64 (the others float64)."""


def step_table(columns: Mapping[str, Sequence]) -> dict[str, np.ndarray]:
    """The per-step records as numpy columns in ``StepColumn`` order (ints int64, else float64).

    Trusted input (``Engine.step_columns``); ``records.steps_frame`` validates user columns and
    builds the DataFrame. ``write_table`` writes the bytes ``write_frame`` writes for that frame.
    """
    return {
        c.value: np.asarray(
            columns[c.value], dtype=np.int64 if c in INT_STEP_COLUMNS else np.float64
        )
        for c in StepColumn
    }


def _floats(values: Sequence) -> np.ndarray:
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        return values  # already a column (NaN: none), e.g. folded cluster records
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def request_table(raw: Mapping[str, Sequence]) -> dict[str, np.ndarray]:
    """The request table from the engine's raw per-request columns (every non-derived column).

    Trusted input (the engine's own); user-supplied rows go through ``requests_frame``, which
    validates them.
    """
    n = len(raw[RC.REQUEST_ID.value])
    table: dict[str, np.ndarray] = {}
    for column in RequestColumn:
        if column in DERIVED_REQUEST_COLUMNS:
            continue
        values = raw[column.value]
        if column in FLOAT_REQUEST_COLUMNS:
            table[column.value] = _floats(values)
        elif column in INT_REQUEST_COLUMNS:
            table[column.value] = np.array(values, dtype=np.int64).reshape(n)
        else:
            arr = np.empty(n, dtype=object)
            arr[:] = list(values)
            table[column.value] = arr
    derived = derived_request_columns(
        table[RC.ARRIVAL_TIME_S.value],
        table[RC.FIRST_TOKEN_TIME_S.value],
        table[RC.FINISH_TIME_S.value],
        table[RC.NUM_OUTPUT_TOKENS.value],
        table[RC.SLO_TTFT_S.value],
        table[RC.SLO_TPOT_S.value],
        table[RC.DEADLINE_S.value],
    )
    met = np.empty(n, dtype=object)
    met[:] = derived[RC.SLO_MET.value].tolist()
    met[~derived["_has_slo"]] = None
    derived[RC.SLO_MET.value] = met
    table.update({c.value: derived[c.value] for c in DERIVED_REQUEST_COLUMNS})
    return {c.value: table[c.value] for c in RequestColumn}


def _csv_cells(values: np.ndarray) -> list[str]:
    """A column as pandas' ``to_csv`` prints it.

    Numbers as ``str`` and ``repr`` print them (through orjson, see ``_float_cells``), NaN and
    None empty, text quoted (csv.QUOTE_MINIMAL) when it holds a comma, quote or line break.
    """
    if values.dtype == np.float64:
        return _float_cells(values)
    if values.dtype == np.int64:
        return _orjson_cells(values) if len(values) else []
    texts = ["" if v is None else str(v) for v in values.tolist()]
    if _NEEDS_QUOTES.search("\x00".join(texts)) is None:  # the usual case: no cell to quote
        return texts
    return list(map(_quote, texts))


def _orjson_text(values: np.ndarray) -> str:
    """orjson's JSON of an int64 or float64 array (a column, or a matrix row by row)."""
    import orjson

    return orjson.dumps(np.ascontiguousarray(values), option=orjson.OPT_SERIALIZE_NUMPY).decode()


def _orjson_cells(values: np.ndarray) -> list[str]:
    """orjson's text of each element of a non-empty int64 or float64 column."""
    return _orjson_text(values)[1:-1].split(",")


def _positional(values: np.ndarray) -> np.ndarray:
    """Where ``repr`` prints a float as orjson does: no exponent (magnitude 0 or in range)."""
    size = np.abs(values)
    return (size < _POSITIONAL_BELOW) & ((size >= _POSITIONAL_FROM) | (size == 0))


def _float_cells(values: np.ndarray) -> list[str]:
    """A float column's cells: ``repr`` of each value, NaN empty.

    orjson prints a float64 array with the shortest digits that read back to the same double,
    as ``repr`` does, and for values from 1e-4 to 1e16 in the same positional form (property
    test: ``tests/metrics/test_table.py``), at ~1/25 of ``repr``'s CPU time per value. Values
    outside that range, where ``repr`` switches to an exponent, and NaN and infinities (orjson's
    ``null``) take ``repr`` one by one.
    """
    column = np.ascontiguousarray(values, dtype=np.float64)
    missing = np.isnan(column)
    if missing.all():  # also the empty column
        return [""] * len(column)
    cells = _orjson_cells(column)
    for i in np.flatnonzero(missing).tolist():
        cells[i] = ""
    for i in np.flatnonzero(~(_positional(column) | missing)).tolist():
        cells[i] = repr(float(column[i]))
    return cells


_POSITIONAL_FROM = 1e-4
_POSITIONAL_BELOW = 1e16
"""``repr`` prints a finite float without an exponent when its magnitude is 0 or in this range."""

_NEEDS_QUOTES = re.compile('[,"\r\n]')
"""A character that makes pandas quote a cell (csv.QUOTE_MINIMAL)."""


def _quote(text: str) -> str:
    if _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def _numeric_blocks(columns: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The columns in order, adjacent int64 columns grouped, and adjacent float64 ones."""
    blocks: list[list[np.ndarray]] = []
    for column in columns:
        kind = column.dtype if column.dtype in (np.int64, np.float64) else None
        if blocks and kind is not None and blocks[-1][0].dtype == kind:
            blocks[-1].append(column)
        else:
            blocks.append([column])
    return blocks


def _block_rows(block: list[np.ndarray]) -> list[str]:
    """Each row's cells of a block of adjacent columns (``_numeric_blocks``), comma-joined.

    Several columns of one numeric type print as one orjson matrix, split into rows: one pass in
    C instead of a string per cell and a join per row. A float block with a value that
    ``repr`` prints differently from orjson (an exponent, an infinity) goes column by column.
    """
    if len(block) == 1:
        return _csv_cells(block[0])
    matrix = np.column_stack(block)
    if matrix.dtype == np.float64 and not (_positional(matrix) | np.isnan(matrix)).all():
        return list(map(",".join, zip(*map(_float_cells, block), strict=True)))
    text = _orjson_text(matrix)
    if matrix.dtype == np.float64:
        text = text.replace("null", "")  # NaN, the only null left: an empty cell
    return text[2:-2].split("],[")


def write_table(table: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> Path:
    """Write a table as CSV (``.csv`` or ``.csv.gz``), atomically.

    The bytes equal what ``write_frame(requests_frame(...), path)`` writes for the same records.

    Args:
        table: Columns by name, all of one length (a request table, or any such dict).
        path: Destination ending in ``.csv`` or ``.csv.gz``; its directory must exist.

    Returns:
        The path written.
    """
    target = Path(path)
    name = target.name.lower()
    if not name.endswith((".csv", ".csv.gz")):
        raise ValueError(f"write_table: {str(path)!r} must end in .csv or .csv.gz")
    header = ",".join(_quote(name) for name in table)
    columns = [np.asarray(v) for v in table.values()]
    lengths = {len(c) for c in columns}
    if len(lengths) > 1:
        sizes = ", ".join(f"{k} {len(c)}" for k, c in zip(table, columns, strict=True))
        raise ValueError(f"write_table: columns differ in length ({sizes})")
    rows: Any = iter(())
    if lengths and lengths != {0}:
        blocks = [_block_rows(block) for block in _numeric_blocks(columns)]
        rows = iter(blocks[0]) if len(blocks) == 1 else map(",".join, zip(*blocks, strict=True))
    with atomic_output(target) as tmp, open(tmp, "wb") as raw:
        out: Any = raw
        if name.endswith(".gz"):
            out = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
        with out:
            out.write((header + "\n").encode())
            # A few thousand rows at a time: buffers the allocator reuses, not one of the
            # whole file's size in fresh pages (~15% of the writing on a 100k-row table).
            while chunk := list(islice(rows, _ROWS_PER_WRITE)):
                chunk.append("")
                out.write("\n".join(chunk).encode())
    return target


_ROWS_PER_WRITE = 2048
