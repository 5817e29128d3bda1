"""RelServe's Fig. 5 probe (leaderboards/relserve/tail_probe.py) on a hand-made step log."""

from __future__ import annotations

import pandas as pd
import pytest
from _leaderboard import load_script


def test_breakdown_splits_core_and_tail_into_prefill_and_decode_steps() -> None:
    probe = load_script("relserve", "tail_probe.py", "relserve_tail_probe")
    # Steps: P [0, 1), D [1, 1.5), P [1.5, 3), D [3, 3.5), D [3.5, 4), P [4, 6).
    steps = pd.DataFrame(
        {
            "time_s": [0.0, 1.0, 1.5, 3.0, 3.5, 4.0],
            "duration_s": [1.0, 0.5, 1.5, 0.5, 0.5, 2.0],
            "num_prefill": [3, 0, 2, 0, 0, 1],
        }
    )
    # Job A: core [0, 3) = P + D + P, tail [3, 4) = D + D.
    # Job B: core [1.5, 3) = P, tail [3, 6) = D + D + P.
    jobs = pd.DataFrame(
        {
            "first_scheduled_time_s": [0.0, 1.5],
            "last_prefill_end_time_s": [3.0, 3.0],
            "finish_time_s": [4.0, 6.0],
        }
    )
    out = probe.breakdown(jobs, steps)
    assert out["core_s"] == pytest.approx((3.0 + 1.5) / 2)
    assert out["core_prefill_steps_s"] == pytest.approx((2.5 + 1.5) / 2)
    assert out["core_decode_steps_s"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["tail_s"] == pytest.approx((1.0 + 3.0) / 2)
    assert out["tail_prefill_steps_s"] == pytest.approx((0.0 + 2.0) / 2)
    assert out["tail_decode_steps_s"] == pytest.approx((1.0 + 1.0) / 2)
    assert out["tail_decode_steps"] == pytest.approx(2.0)
