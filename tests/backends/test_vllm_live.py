"""The live vLLM backend on a real engine (tiny random-weight model): records, decisions, fits.

Marked ``live``; they skip without vLLM (see ``conftest.py``). The whole set runs in well under
three minutes on two shared CPU cores; no assertion depends on speed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math

import numpy as np
import pytest

from llmsched_gym.core.request import RequestSpec

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = "vLLM is not installed here: run .ci/setup_vllm_venv.sh and use .venv-vllm/bin/python"

pytestmark = [pytest.mark.live, pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)]


def burst(n=10, seed=0):
    """``n`` requests arriving together: the schedule then cannot depend on step times."""
    rng = np.random.default_rng(seed)
    return [
        RequestSpec(
            f"q{i}",
            0.0,
            int(rng.integers(40, 200)),
            int(rng.integers(5, 60)),
            int(rng.integers(5, 60)) + 100,
        )  # fmt: skip
        for i in range(n)
    ]


def test_live_run_records_every_request_like_the_simulator(live_engine):
    specs = [RequestSpec(f"r{i}", 0.02 * i, 50 + 20 * i, 4 + i, 4 + i) for i in range(6)]
    res = live_engine.run(specs)
    df = res.requests.set_index("request_id")
    assert list(df.index) == [s.request_id for s in specs]
    for s in specs:
        row = df.loc[s.request_id]
        assert row.num_output_tokens == s.output_len
        assert 0 < row.ttft_s <= row.e2e_s
        assert row.first_scheduled_time_s >= s.arrival_time
        assert len(res.token_times[s.request_id]) == s.output_len
    assert res.summary["num_finished"] == 6 and res.summary["num_steps"] == res.num_steps
    assert math.isfinite(res.summary["tpot_s_mean"]) and math.isfinite(res.summary["itl_s_mean"])
    # every prompt token and every generated token but the last was computed exactly once
    for s in specs:
        assert df.loc[s.request_id].num_computed_tokens == s.prompt_len + s.output_len - 1
    # steps: times advance by the measured durations; compositions are (c >= 1, m >= 0)
    for a, b in zip(res.step_records, res.step_records[1:]):
        assert b.time_s >= a.time_s + a.duration_s - 1e-12
    assert all(c >= 1 and m >= 0 for s in res.step_records for _, c, m in s.items)
    assert res.steps["kv_cache_usage"].between(0, 1).all()


def test_prefix_cache_hits_are_read_from_the_engine(live_engine):
    shared = tuple(range(100, 196))  # 96 tokens = 3 full blocks of 32
    a = RequestSpec("a", 0.0, 100, 2, 2, prompt_token_ids=shared + (1, 2, 3, 4))
    b = RequestSpec("b", 1.0, 110, 2, 2, prompt_token_ids=shared + tuple(range(500, 514)))
    res = live_engine.run([a, b])
    df = res.requests.set_index("request_id")
    assert df.loc["a"].num_cached_tokens == 0
    assert df.loc["b"].num_cached_tokens == 96
    new_b = [s.new["b"] for s in res.step_records if "b" in s.new]
    assert new_b == [96]
    assert res.summary["prefix_cache_hits"] == 96


def test_live_decisions_equal_the_simulators_on_a_burst(live_engine, tmp_path):
    """All arrivals at t=0: vLLM's live schedule equals the simulator's vllm-v1, step for step,
    preemptions included (40 usable blocks of 32 tokens are too few for the burst)."""
    from llmsched_gym.backends.vllm.tokens import with_token_ids
    from llmsched_gym.simulation import simulate

    specs = with_token_ids(burst(12), live_engine.config.tiny.vocab_size)
    live = live_engine.run(specs)
    log = tmp_path / "sim.jsonl"
    simulate(specs, config=live_engine.config.engine, cost_model="constant:0.01", schedule_log=log)
    sim = [json.loads(x) for x in log.read_text().splitlines()]
    mine = live.schedule_log()
    keys = ("scheduled", "new", "resumed", "preempted", "finished", "num_free_blocks",
            "num_running", "num_waiting")  # fmt: skip
    assert len(mine) == len(sim)
    for a, b in zip(mine, sim):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}, a["step"]
    assert sum(len(x["preempted"]) for x in mine) > 0, "the burst should preempt"


def test_calibration_fits_and_writes_a_loadable_profile(live_engine, tmp_path):
    from llmsched_gym.backends.vllm.calibrate import calibrate, write_calibration
    from llmsched_gym.cost.registry import load_cost_model

    res = calibrate(live_engine, repeats=1, scale=0.3)
    assert len(res.steps) >= 10
    kinds = {s.kind for s in res.steps}
    assert kinds == {"prefill", "multi", "decode", "mixed"}
    assert math.isfinite(res.heldout_mape_pct)
    paths = write_calibration(res, tmp_path / "cal")
    model = load_cost_model(str(paths["profile"]))
    assert model.c0 > 0
    text = paths["profile"].read_text()
    assert "vllm:" in text and "hardware:" in text and "cpu:" in text
    assert "held-out" in paths["report"].read_text()


def test_validation_compares_both_backends(live_engine, tmp_path):
    from llmsched_gym.backends.vllm.validate import scale_trace, validate, write_validation
    from llmsched_gym.workloads.trace import load_trace

    specs = scale_trace(
        load_trace("splitwise-conv", limit=12), max_prompt=200, max_output=12, arrival_scale=0.01
    )
    res = validate(live_engine, specs, "constant:0.01", name="tiny")
    table = res.table.set_index("metric")
    for metric in ("ttft_s", "tpot_s", "e2e_s", "step_time_s"):
        assert math.isfinite(table.loc[metric, "mean_error_pct"])
    assert res.divergence["live_steps"] > 0
    paths = write_validation(res, tmp_path / "val")
    assert paths["latency_plot"].stat().st_size > 0
    assert "live vLLM vs simulator" in paths["report"].read_text()


@pytest.mark.parametrize("key", ["shortest-prompt", "priority"])
def test_one_policy_object_drives_both_backends(live_engines, small_config, tmp_path, key):
    """The same static-priority policy object schedules the simulator and, as vLLM's
    ``scheduler_cls``, the live engine: identical decisions on a burst, preemptions included."""
    from llmsched_gym.backends.vllm.scheduler import policy_scheduler_cls
    from llmsched_gym.backends.vllm.tokens import with_token_ids
    from llmsched_gym.policies.registry import make_policy
    from llmsched_gym.simulation import simulate

    policy = make_policy(f"static-priority:{key}")
    engine = live_engines.get(
        small_config(scheduling_policy="priority", scheduler_cls=policy_scheduler_cls(policy))
    )
    specs = burst(12, seed=3)
    specs = [dataclasses.replace(s, priority=i % 3) for i, s in enumerate(specs)]
    specs = with_token_ids(specs, engine.config.tiny.vocab_size)
    live = engine.run(specs)
    log = tmp_path / "sim.jsonl"
    simulate(specs, config=engine.config.engine, scheduler=policy, cost_model="constant:0.01",
             schedule_log=log)  # fmt: skip
    sim = [json.loads(x) for x in log.read_text().splitlines()]
    mine = live.schedule_log()
    keys = ("scheduled", "new", "resumed", "preempted", "finished", "num_free_blocks")
    assert [{k: a[k] for k in keys} for a in mine] == [{k: b[k] for k in keys} for b in sim]
    # the order really is the policy's: the first admissions follow its key
    first = list(mine[0]["new"])
    by_key = sorted(specs, key=lambda s: (s.prompt_len if key == "shortest-prompt" else
                                          s.priority, s.arrival_time, s.request_id))  # fmt: skip
    assert first == [s.request_id for s in by_key][: len(first)]


def shared_prefix_workload(n=16, seed=5):
    """Spread arrivals, three shared 96-token system prompts, SLOs and two priority classes: a
    workload where prefix hits, preemptions and the clock all shape the schedule."""
    rng = np.random.default_rng(seed)
    systems = [[int(t) for t in rng.integers(20, 400, 96)] for _ in range(3)]
    specs = []
    for i in range(n):
        tail = [int(t) for t in rng.integers(20, 400, int(rng.integers(10, 120)))]
        ids = systems[i % 3] + tail
        out = int(rng.integers(20, 80))
        specs.append(
            RequestSpec(f"q{i}", 0.004 * i, len(ids), out, out + 100, prompt_token_ids=tuple(ids),
                        priority=i % 2, weight=2.0 if i % 2 == 0 else 1.0, slo_ttft_s=0.05,
                        slo_tpot_s=0.01)
        )  # fmt: skip
    return specs


def live_clock_model():
    """The clock of ``timer="model"`` runs and of the simulator in these tests: the live CPU
    profile's coefficients (rounded, as first calibrated), fixed here so that re-calibrating the
    committed profile cannot change which decisions the tests exercise."""
    from llmsched_gym.cost.base import LinearCostModel

    return LinearCostModel(
        0.0055, c_tokens=4.3e-5, c_prefill_attn=1.2e-8, c_decode_kv=5e-7, c_prefill=4.3e-4,
        c_decode=3.6e-4, name="test-live-clock",
    )  # fmt: skip


def _logs_equal(live, specs, policy_name, config, tmp_path):
    from llmsched_gym.policies.registry import make_policy
    from llmsched_gym.simulation import simulate

    log = tmp_path / "sim.jsonl"
    simulate(specs, config=config, scheduler=make_policy(policy_name),
             cost_model=live_clock_model(), schedule_log=log)  # fmt: skip
    sim = [json.loads(x) for x in log.read_text().splitlines()]
    keys = ("time", "scheduled", "new", "resumed", "preempted", "finished", "num_free_blocks")
    mine = [{k: a[k] for k in keys} for a in live.schedule_log()]
    assert mine == [{k: b[k] for k in keys} for b in sim]
    return mine


@pytest.mark.parametrize(
    ("name", "evicts", "caches"),
    [
        ("sarathi", True, True),
        ("proserve", None, True),  # stops admitting at 95% KV: preempts only on some clocks
        ("infermax:evict-short", True, False),
        ("infermax:sarathi-ef", False, False),  # eviction-free; InferMax runs without caching
        ("vllm-v0", True, True),
    ],
)
def test_reference_agents_schedule_vllm_as_they_schedule_the_simulator(
    live_engines, small_config, tmp_path, name, evicts, caches
):
    """A policy that builds its own batches (Sarathi, ProServe's SlideBatching, InferMax's
    presets and evict-short) schedules a real vLLM engine through ``LiveStepContext``: with the
    simulator's clock (``timer="model"``) every step, prefix hit and preemption is the same."""
    from llmsched_gym.backends.vllm.scheduler import policy_scheduler_cls
    from llmsched_gym.backends.vllm.stepctx import LiveStepContext
    from llmsched_gym.policies.registry import make_policy

    policy = make_policy(name)
    cls = policy_scheduler_cls(policy, cost_model=live_clock_model())
    assert cls.__name__ == f"PolicyStepScheduler[{policy.name}]"
    engine = live_engines.get(small_config(scheduler_cls=cls))
    specs = shared_prefix_workload()
    live = engine.run(specs, timer="model", cost_model=live_clock_model())
    mine = _logs_equal(live, specs, name, engine.config.engine, tmp_path)
    assert sum(len(x["finished"]) for x in mine) == len(specs)
    if evicts is not None:  # the small cache fills up: preemptions happen, or must not (EF)
        assert (sum(len(x["preempted"]) for x in mine) > 0) == evicts
    assert (live.summary["prefix_cache_hit_rate"] > 0.2) == caches
    assert engine.scheduler.bound_policy is policy and LiveStepContext


def test_vllm_v1_run_as_a_policy_equals_vllm_s_own_scheduler(live_engines, small_config):
    """The simulator's vLLM V1 policy, driving vLLM through the step context, makes exactly the
    decisions of vLLM's own ``schedule()`` on the same engine settings (prefix hits and
    preemptions included): the adapter adds nothing of its own."""
    from llmsched_gym.backends.vllm.scheduler import policy_scheduler_cls
    from llmsched_gym.policies.registry import make_policy

    specs = shared_prefix_workload(seed=9)
    logs = []
    for cls in (None, policy_scheduler_cls(make_policy("vllm-v1"), mode="step")):
        engine = live_engines.get(small_config(scheduler_cls=cls))
        live = engine.run(specs, timer="model", cost_model=live_clock_model())
        logs.append(live.schedule_log())
    keys = ("time", "scheduled", "new", "resumed", "preempted", "finished", "num_free_blocks")
    a, b = ([{k: x[k] for k in keys} for x in log] for log in logs)
    assert a == b and sum(len(x["preempted"]) for x in a) >= 1
