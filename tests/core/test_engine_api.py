"""The engine's incremental API (advance, advance_to_decision, enqueue, finish listeners)."""

from __future__ import annotations

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.metrics.table import request_columns
from llmsched_gym.policies.registry import make_policy

CFG = EngineConfig(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_gpu_blocks=40)
COST = LinearCostModel(0.01, c_tokens=1e-4, c_decode_kv=1e-6)


def specs(n=12):
    return [
        RequestSpec(f"r{i}", 0.05 * i, 10 + 5 * (i % 4), 3 + 9 * (i % 3), 3 + 9 * (i % 3))
        for i in range(n)
    ]


def engine():
    return Engine(CFG, make_policy("vllm-v1"), COST)


def test_decision_points_then_step_equal_run() -> None:
    a = engine()
    a.add_requests(specs())
    a.run()
    b = engine()
    b.add_requests(specs())
    decisions = 0
    while b.advance_to_decision():
        decisions += 1
        assert b.step()
    assert request_columns(a.finished) == request_columns(b.finished)
    assert a.num_steps == b.num_steps and b.num_ff_steps > 0
    assert decisions == b.num_steps - b.num_ff_steps


def test_advance_respects_until_and_next_event_time() -> None:
    e = engine()
    e.add_requests(specs())
    assert e.next_event_time() == 0.0
    while e.advance(until=0.2):
        pass
    assert 0.2 <= e.now or e.next_event_time() >= 0.2
    e.run()
    assert e.next_event_time() == float("inf") and len(e.finished) == 12


def test_enqueue_past_arrival_joins_next_step_and_listeners_fire() -> None:
    e = engine()
    seen = []
    e.finish_listeners.append(lambda reqs, t: seen.extend((r.request_id, t) for r in reqs))
    e.add_requests(specs(2))
    e.advance()
    late = RequestSpec("late", 0.0, 8, 2, 2)  # arrived at 0, routed after the first step began
    assert e.now > 0.0
    e.enqueue(late)
    e.run()
    rec = {r.request_id: r for r in e.finished}
    assert rec["late"].arrival_time == 0.0 and rec["late"].first_scheduled_time >= 0.01
    assert sorted(x for x, _ in seen) == ["late", "r0", "r1"]
    assert all(t == rec[x].finish_time for x, t in seen)


def test_step_columns_dtypes_and_values_stepped_or_fast_forwarded() -> None:
    """Step records read back as float64 times and int64 counts, the same with fast-forward."""
    import numpy as np

    cols = {}
    for ff in (False, True):
        eng = Engine(CFG, make_policy("vllm-v1"), COST, fast_forward=ff, record_steps=True)
        eng.add_requests(specs())
        eng.run()
        cols[ff] = eng.step_columns()
        assert len(cols[ff]["step"]) == eng.num_steps
        assert cols[ff]["step"].tolist() == list(range(eng.num_steps))
    for key, col in cols[True].items():
        float_col = key in ("time_s", "duration_s", "kv_cache_usage")
        assert col.dtype == (np.float64 if float_col else np.int64), key
        assert col.tolist() == cols[False][key].tolist(), key
