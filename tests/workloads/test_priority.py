"""ProServe priority classes, weights and SLOs."""

from __future__ import annotations

from collections import Counter

import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.workloads import (
    PriorityClass,
    assign_priority_classes,
    assign_slos,
    unloaded_tpot_s,
    unloaded_ttft_s,
)


def _specs(n: int, client: bool = False) -> list[RequestSpec]:
    return [
        RequestSpec(f"r{i}", float(i), 100 + i % 7, 10 + i % 3, 10 + i % 3,
                    client_id=f"c{i % 5}" if client else None)
        for i in range(n)
    ]  # fmt: skip


def test_default_classes_are_proserve() -> None:
    out = assign_priority_classes(_specs(4000), seed=0)
    assert out == assign_priority_classes(_specs(4000), seed=0)
    assert out != assign_priority_classes(_specs(4000), seed=1)
    pairs = Counter((s.priority, s.weight) for s in out)
    assert set(pairs) == {(0, 2.0), (1, 1.0)}
    assert pairs[(0, 2.0)] / 4000 == pytest.approx(0.5, abs=0.03)
    assert [s.request_id for s in out] == [f"r{i}" for i in range(4000)]


def test_per_client_classes() -> None:
    out = assign_priority_classes(_specs(100, client=True), per_client=True, seed=3)
    by_client = {}
    for s in out:
        assert by_client.setdefault(s.client_id, s.priority) == s.priority


def test_class_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"probabilities must sum to 1, got 0.9"):
        assign_priority_classes(_specs(3), [PriorityClass(0, 1.0, 0.9)])
    with pytest.raises(ValueError, match=r"classes\[1\].weight must be a finite number > 0, got 0"):
        assign_priority_classes(_specs(3), [PriorityClass(0, 1.0, 0.5), PriorityClass(1, 0, 0.5)])


def test_unloaded_latencies_from_the_cost_model() -> None:
    model = LinearCostModel(c0=0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6)
    # One step of 100 tokens: 0.01 + 100e-4 + 100**2 * 1e-8.
    assert unloaded_ttft_s(model, 100) == pytest.approx(0.01 + 0.01 + 1e-4)
    # Two chunks of 50: second chunk has 50 cached (attn 50*50 + 2*50*50).
    chunked = 2 * (0.01 + 50e-4) + (2500 + 2500 + 5000) * 1e-8
    assert unloaded_ttft_s(model, 100, chunk_size=50) == pytest.approx(chunked)
    # Decode at mid context 100 + (11 - 2) // 2 = 104.
    assert unloaded_tpot_s(model, 100, 11) == pytest.approx(0.01 + 1e-4 + 104e-6)


def test_assign_slos_seconds_and_multiples() -> None:
    out = assign_slos(_specs(10), ttft_s=1.0, tpot_s=0.05, with_deadline=True)
    assert {(s.slo_ttft_s, s.slo_tpot_s) for s in out} == {(1.0, 0.05)}
    assert out[3].deadline_s == pytest.approx(3.0 + 1.0 + (out[3].output_len - 1) * 0.05)
    model = LinearCostModel(c0=0.02, c_tokens=1e-4)
    per_request = assign_slos(_specs(10), cost_model=model, basis="request", ttft_scale=5)
    for s in per_request:
        assert s.slo_ttft_s == pytest.approx(5 * (0.02 + 1e-4 * s.prompt_len))
        assert s.slo_tpot_s == pytest.approx(5 * (0.02 + 1e-4))
    trace = assign_slos(_specs(10), cost_model=model, ttft_s=0.5)
    assert {s.slo_ttft_s for s in trace} == {0.5}
    assert len({s.slo_tpot_s for s in trace}) == 1
    with pytest.raises(ValueError, match="tpot_s is None and no cost_model"):
        assign_slos(_specs(2), ttft_s=1.0)
    with pytest.raises(ValueError, match="ttft_s must be a finite number > 0, got -2"):
        assign_slos(_specs(2), ttft_s=-2, tpot_s=1.0)
    with pytest.raises(ValueError, match="basis must be 'trace' or 'request', got 'x'"):
        assign_slos(_specs(2), ttft_s=1.0, tpot_s=1.0, basis="x")
