"""Finished requests' record fields and inter-token samples, folded into compact columns.

A long cluster run keeps tens of bytes per finished request here instead of its ``Request``
object (``Cluster(keep_finished=False)``); ``cluster.records`` builds the tables from them. With
``keep_specs=False`` (``Cluster(records="summary")``) not even the spec is kept: only the numbers
the summary reads, and the SLO columns once some request has an SLO.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from llmsched_gym.core.request import RequestSpec

__all__ = ["FLOAT_FIELDS", "INT_FIELDS", "SLO_FIELDS", "Column", "FinishedRecords"]


class Column:
    """A growing column of numbers: a typed ``array`` plus a short list of values to add.

    Appending to ``buffer`` (a plain list) is cheap; ``flush`` packs it into ``data`` in one C
    call, so a value costs its item size (8 bytes for ``"d"``, 4 for ``"i"``, 1 for ``"B"``),
    not a Python object. An integer that does not fit the type code widens the column to
    ``"q"`` (int64, what the records hold); ``None`` in a float column is stored as NaN, as the
    records read it.
    """

    __slots__ = ("data", "buffer")

    def __init__(self, typecode: str) -> None:
        self.data = array(typecode)
        self.buffer: list = []

    def __len__(self) -> int:
        return len(self.data) + len(self.buffer)

    def flush(self) -> None:
        """Pack the buffered values into ``data``."""
        values = self.buffer
        if not values:
            return
        data = self.data
        try:
            data.fromlist(values)  # the array is unchanged when this fails
        except TypeError:
            if data.typecode != "d":
                raise
            data.fromlist([math.nan if v is None else v for v in values])
        except OverflowError:
            if data.typecode == "q":
                raise
            self.data = array("q", data)
            self.data.fromlist(values)
        values.clear()

    def numpy(self, dtype: Any) -> Any:
        """The whole column as a new numpy array of ``dtype``."""
        return self.view().astype(dtype)

    def view(self) -> Any:
        """The whole column as a numpy array over ``data``, without a copy.

        ``data`` cannot grow while the array lives: drop it before appending.
        """
        import numpy as np

        self.flush()
        data = self.data
        if not len(data):
            return np.zeros(0, dtype=_NUMPY_CODES[data.typecode])
        return np.frombuffer(data, dtype=_NUMPY_CODES[data.typecode])


_NUMPY_CODES = {"d": "float64", "q": "int64", "i": "int32", "B": "uint8"}

FLOAT_FIELDS = ("arrival_time", "first_scheduled_time", "first_token_time", "finish_time")
"""The float fields of a finished ``Request`` that its record reads."""
INT_FIELDS = (
    "num_prompt_tokens",
    "num_output_tokens",
    "num_cached_tokens",
    "num_computed_total",
    "num_preemptions",
    "priority",
    "num_external_tokens",
    "instance",
    "seq",
    "order",
)
"""The integer fields of a row: the ``Request``'s counters (``num_cached_tokens`` at least 0),
the instance it finished on, its arrival ``seq`` on that engine and its routing order."""
SLO_FIELDS = ("slo_ttft_s", "slo_tpot_s", "deadline_s")
"""The spec's SLO fields, kept as float columns (NaN for None) when the specs are not."""


class FinishedRecords:
    """What the records need of each finished request, folded into columns as it finishes.

    One row per request finished on an instance (a PD request has one on its prefill and one on
    its decode instance; ``cluster.records`` merges them): its spec (shared with the workload)
    and ``FLOAT_FIELDS`` / ``INT_FIELDS`` as ``Column``s, about 50 bytes a row, so a cluster
    can drop its finished ``Request`` objects (``Cluster(keep_finished=False)``).

    With ``keep_specs=False`` the spec is dropped too (the summary needs none of its text
    fields): a row is its numbers alone, plus ``SLO_FIELDS`` from the first request that has
    an SLO on (``slo_columns``; earlier rows read NaN), so the workload's specs can be freed
    as their requests finish.
    """

    def __init__(self, keep_specs: bool = True) -> None:
        self.keep_specs = keep_specs
        self.specs: list[RequestSpec] = []
        """Each row's ``Request.spec`` (empty without ``keep_specs``)."""
        self.columns = {name: Column("d") for name in FLOAT_FIELDS}
        self.columns.update({name: Column("i") for name in INT_FIELDS})
        self.buffers = tuple(c.buffer for c in self.columns.values())
        """The columns' buffers, ``FLOAT_FIELDS`` then ``INT_FIELDS`` (``Cluster._on_finish``)."""
        self.slo_columns: dict[str, Column] | None = None
        """``SLO_FIELDS`` columns without ``keep_specs``, from ``start_slo`` on (else None)."""
        self.slo_buffers: tuple[list, ...] | None = None
        """Their buffers, in ``SLO_FIELDS`` order (``Cluster._on_finish``)."""

    def __len__(self) -> int:
        return len(self.columns["order"])

    def start_slo(self) -> tuple[list, ...]:
        """Start the SLO columns, NaN for every row so far; returns their buffers."""
        self.slo_columns = {}
        rows = len(self)
        for name in SLO_FIELDS:
            column = Column("d")
            column.data = array("d", [math.nan]) * rows
            self.slo_columns[name] = column
        self.slo_buffers = tuple(c.buffer for c in self.slo_columns.values())
        return self.slo_buffers

    def flush(self) -> None:
        """Pack every buffered value into its typed array."""
        for column in self.columns.values():
            column.flush()
        if self.slo_columns is not None:
            for column in self.slo_columns.values():
                column.flush()
