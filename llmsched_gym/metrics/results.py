"""What run results share: the per-request DataFrame, built from the request table on first use.

Simulation, cluster and live results hold ``request_table`` (numpy columns,
``llmsched_gym.metrics.table``) and give ``requests`` as a DataFrame only when asked, so runs
that only write CSV never import pandas.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RequestsFrameMixin"]


class RequestsFrameMixin:
    """``requests``: the per-request DataFrame, built from ``request_table`` on first use."""

    request_table: dict[str, np.ndarray]
    _frame: Any

    @property
    def requests(self) -> Any:
        """Per-request records as a DataFrame (``RequestColumn`` columns)."""
        if self._frame is None:
            from llmsched_gym.metrics.records import frame_from_table

            self._frame = frame_from_table(self.request_table)
        return self._frame
