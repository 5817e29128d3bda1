"""Oracle status is decided by the harness: any read of hidden truth marks the row oracle."""

from __future__ import annotations

import pytest

from llmsched_gym.core.hidden import note, watching
from llmsched_gym.leaderboard.run import blinded_overrides, run_workload
from llmsched_gym.leaderboard.suite import load_suite


def _knee(version: str):
    suite = load_suite(version)
    return suite, next(
        w for w in suite.workloads("test", tasks=["Priority"]) if w.scenario_id == "chat-knee"
    )


def test_shortest_total_is_detected_on_v1_and_clean_on_v2() -> None:
    """v1's max_tokens is the true output: prompt + max_tokens reads it; v2's is not."""
    suite, w = _knee("llmsched-v1")
    row = run_workload(suite, "static-priority:shortest-total", w)
    assert row["status"] == "ok" and row["oracle"] is True
    assert "max_tokens" in row["oracle_reason"]
    suite2, w2 = _knee("llmsched-v2")
    row2 = run_workload(suite2, "static-priority:shortest-total", w2)
    assert row2["status"] == "ok" and row2["oracle"] is False and row2["oracle_reason"] == ""


@pytest.mark.parametrize("version", ["llmsched-v1", "llmsched-v2"])
def test_the_reference_reads_nothing(version: str) -> None:
    suite, w = _knee(version)
    row = run_workload(suite, "vllm-v1", w)
    assert (row["oracle"], row["oracle_reason"], row["kind"]) == (False, "", "reference")


def test_true_output_reads_are_counted_whatever_is_declared() -> None:
    suite, w = _knee("llmsched-v2")
    row = run_workload(suite, "static-priority:shortest-output", w)
    assert row["oracle"] is True and "true output length" in row["oracle_reason"]


def test_only_v1_workloads_are_blinded() -> None:
    for version, leaky in (("llmsched-v1", True), ("llmsched-v2", False)):
        suite = load_suite(version)
        for w in suite.workloads("test", quick=True):
            blind = blinded_overrides(w.scenario())
            kind = w.scenario().workload["kind"]
            assert (blind is not None) == (leaky and kind in ("trace", "text2sql")), w.id


def test_watching_counts_reads_inside_the_block_only() -> None:
    note("fork")
    with watching() as seen:
        note("fork")
        note("true output length")
    note("fork")
    assert dict(seen) == {"fork": 1, "true output length": 1}
