"""``compare``'s story line comes from the measured parts of the latency, or is not printed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmsched_gym.cli.compare import _comparison_story, latency_parts
from llmsched_gym.cli.main import main


def table(**rows: tuple[float, float, float, float]) -> pd.DataFrame:
    """Rows of (queue, prefill, decode, tpot) means; e2e is their sum, p99 twice it."""
    data = {
        name: {
            "queue_s_mean": q,
            "prefill_s_mean": p,
            "decode_s_mean": d,
            "tpot_s_mean": tpot,
            "e2e_s_mean": q + p + d,
            "e2e_s_p99": 2 * (q + p + d),
            "same_as": "",
        }
        for name, (q, p, d, tpot) in rows.items()
    }
    frame = pd.DataFrame.from_dict(data, orient="index")
    frame.index.name = "scheduler"
    return frame


def test_queueing_that_dominates_is_named_with_its_figures():
    story = _comparison_story(table(a=(10.0, 1.0, 5.0, 0.05), b=(4.0, 1.0, 5.5, 0.055)))
    assert story == (
        "b changes mean e2e latency by -34% (10.5 s against 16 s under a) and p99 by -34%; "
        "waiting for a first step (arrival to first schedule) accounts for -6.00 s of the "
        "-5.50 s: 4 s against 10 s on average."
    )


def test_batching_that_dominates_is_named_with_the_tpot():
    story = _comparison_story(
        table(a=(0.1, 0.2, 8.0, 0.037), b=(0.09, 0.2, 9.6, 0.045), c=(0.1, 0.2, 8.1, 0.038))
    )
    assert story is not None
    assert story.startswith("b changes mean e2e latency by +19% (9.89 s against 8.3 s under a)")
    assert "decoding (first token to finish) accounts for +1.60 s of the +1.59 s" in story
    assert story.endswith("mean TPOT 45.0 ms against 37.0 ms.")
    assert "queue" not in story


@pytest.mark.parametrize(
    "rows",
    [
        {"a": (1.0, 1.0, 1.0, 0.01), "b": (2.0, 1.0, 2.0, 0.02)},  # two parts share the change
        {"a": (1.0, 1.0, 5.0, 0.01), "b": (0.0, 1.0, 6.5, 0.02)},  # +1.5 decode, -1 queue
        {"a": (1.0, 1.0, 5.0, 0.01), "b": (2.0, 1.0, 4.0, 0.02)},  # the mean does not change
    ],
    ids=["split", "not-a-clear-majority", "no-change"],
)
def test_no_part_that_clearly_dominates_means_no_line(rows):
    assert _comparison_story(table(**rows)) is None


def test_missing_or_inconsistent_parts_mean_no_line():
    t = table(a=(10.0, 1.0, 5.0, 0.05), b=(4.0, 1.0, 5.5, 0.055))
    assert _comparison_story(t.drop(columns=["queue_s_mean", "prefill_s_mean"])) is None
    t.loc["b", "e2e_s_mean"] += 1.0  # the parts no longer add up to the mean
    assert _comparison_story(t) is None


def test_identical_schedules_say_so_with_the_measured_wait():
    t = table(a=(0.25, 1.0, 5.0, 0.05), b=(0.25, 1.0, 5.0, 0.05))
    t.loc["b", "same_as"] = "a"
    story = _comparison_story(t)
    assert story is not None and story.startswith("Every scheduler gives the same schedule")
    assert "a request waits 0.25 s on average for its first step" in story


def test_latency_parts_add_up_to_the_mean_e2e_of_finished_requests():
    records = {
        "arrival_time_s": np.array([0.0, 1.0, 2.0]),
        "first_scheduled_time_s": np.array([0.5, 1.0, 3.0]),
        "first_token_time_s": np.array([1.0, 1.5, 4.0]),
        "finish_time_s": np.array([3.0, 4.0, np.nan]),
        "kv_transfer_s": np.array([0.5, np.nan, np.nan]),
    }
    parts = latency_parts(records)
    assert parts == {
        "queue_s_mean": 0.25,
        "prefill_s_mean": 0.5,
        "decode_s_mean": 2.0,
        "kv_transfer_s_mean": 0.25,
    }
    assert sum(parts.values()) == pytest.approx(np.mean([3.0, 3.0]))
    assert latency_parts({}) == {}


def test_vllm_v0_against_v1_on_the_azure_trace_blames_decoding(tmp_path: Path, capsys):
    """The old line said "Rows differ because requests queue"; vllm-v0's TTFT is even lower."""
    code = main(
        ["compare", "--trace", "splitwise-conv", "--num-requests", "100", "--schedulers",
         "vllm-v1,vllm-v0", "--out", str(tmp_path / "a"), "--no-progress", "--json"]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["scheduler"]: r for r in out["rows"]}
    assert rows["vllm-v0"]["ttft_s_mean"] < rows["vllm-v1"]["ttft_s_mean"]
    assert rows["vllm-v0"]["e2e_s_mean"] > rows["vllm-v1"]["e2e_s_mean"]
    story = out["story"]
    assert "queue" not in story
    assert story.startswith("vllm-v0 changes mean e2e latency by +5%")
    assert "decoding (first token to finish) accounts for" in story and "mean TPOT" in story
    for r in rows.values():
        parts = r["queue_s_mean"] + r["prefill_s_mean"] + r["decode_s_mean"]
        assert parts == pytest.approx(r["e2e_s_mean"], rel=1e-9)
