"""Token listeners and the TDG timeline: the same deliveries stepped, fast-forwarded or async."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.metrics.tdg import TDGCollector, TokenTimelineRecorder
from llmsched_gym.policies.registry import make_policy

MODEL = LinearCostModel(0.01, 1e-5, 1e-9, 3e-7, 1e-4, 2e-5)


def workload(n: int = 40, seed: int = 3) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.08, n))
    return [
        RequestSpec(
            f"r{i}",
            float(t[i]),
            int(rng.integers(5, 300)),
            int(rng.integers(1, 120)),
            200,
            slo_ttft_s=0.5,
            slo_tpot_s=0.03,
        )  # fmt: skip
        for i in range(n)
    ]


def config(**kw) -> EngineConfig:
    base = dict(max_num_batched_tokens=256, max_num_seqs=16, block_size=16, num_gpu_blocks=200)
    return EngineConfig(**{**base, **kw})


def timeline(fast_forward: bool, lazy: bool = False, **kw) -> tuple[dict, Engine]:
    eng = Engine(config(**kw), make_policy("vllm-v1"), MODEL, fast_forward=fast_forward)
    col = TDGCollector(keep_times=True)
    eng.token_listeners.append(col.on_tokens)
    eng.add_requests(workload())
    if lazy:  # a cluster's pending stretches, continued in small slices of the clock
        eng.lazy_stretches = True
        t = 0.0
        while eng.next_event_time() < float("inf") or eng._plan is not None:
            t += 0.013
            while eng.advance(t):
                pass
        eng.sync()
    else:
        eng.run()
    return col.times, eng


def check_against_records(times: dict, eng: Engine) -> None:
    for req in eng.finished:
        got = times[req.request_id]
        assert len(got) == req.num_output_tokens
        assert got[0] == req.first_token_time and got[-1] == req.finish_time
        assert all(a <= b for a, b in zip(got, got[1:]))


@pytest.mark.parametrize("kw", [{}, {"async_scheduling": True}], ids=["sync", "async"])
def test_fast_forwarded_stretches_deliver_what_stepping_delivers(kw) -> None:
    stepped, eng = timeline(False, **kw)
    check_against_records(stepped, eng)
    assert len(eng.finished) == 40 and eng.num_ff_steps == 0
    fast, eng = timeline(True, **kw)
    assert eng.num_ff_steps > 100  # the stretches' tokens come from the listener's stretch calls
    assert fast == stepped


def test_pending_stretches_deliver_what_stepping_delivers() -> None:
    stepped, _ = timeline(False)
    lazy, eng = timeline(True, lazy=True)
    assert eng.num_ff_steps > 100
    assert lazy == stepped


def test_recorder_wrapper_equals_the_listener() -> None:
    direct, _ = timeline(False)
    col = TDGCollector(keep_times=True)
    eng = Engine(config(), TokenTimelineRecorder(make_policy("vllm-v1"), col), MODEL)
    eng.add_requests(workload())
    eng.run()
    assert col.times == direct
    assert eng.num_ff_steps == 0  # as the wrapper always ran: fast-forward off
    ids = sorted(direct)
    gains = col.gains(ids, [1.0] * len(ids), 1.0, 1.0)
    assert 0 < gains.sum() <= sum(len(direct[r]) for r in ids)


def test_recorder_wrapper_is_refused_where_only_vllm_v1_runs() -> None:
    from llmsched_gym.errors import ConfigError

    with pytest.raises(ConfigError, match="async_scheduling=True needs the vllm-v1 scheduler"):
        Engine(
            config(async_scheduling=True),
            TokenTimelineRecorder(make_policy("vllm-v1"), TDGCollector()),
            MODEL,
        )
