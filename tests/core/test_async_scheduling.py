"""``async_scheduling``: vLLM 0.32.0's AsyncScheduler in the simulator (``core/async_loop.py``).

Exactness against vLLM's own ``AsyncScheduler`` is the differential test's job
(``tests/differential``, mode ``async``); these tests pin the contract's visible effects and the
errors.
"""

from __future__ import annotations

import io
import json

import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.registry import load_cost_model
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.simulation import simulate


def _spec(rid: str, arrival: float, prompt: int, out: int) -> RequestSpec:
    return RequestSpec(rid, arrival, prompt, out, out)


def _run(specs: list[RequestSpec], **config) -> tuple[list[dict], Engine]:
    cfg = EngineConfig(block_size=4, num_gpu_blocks=64, **config)
    buf = io.StringIO()
    eng = Engine(cfg, make_policy("vllm-v1"), load_cost_model("constant:1.0"), schedule_log=buf)
    eng.add_requests(specs)
    eng.run()
    return [json.loads(line) for line in buf.getvalue().splitlines()], eng


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_bad_value_names_key_and_value(value) -> None:
    message = rf"async_scheduling must be true or false, got {value!r}"
    with pytest.raises(ConfigError, match=message):
        EngineConfig(async_scheduling=value)
    with pytest.raises(ConfigError, match="async_scheduling"):
        EngineConfig.from_dict({"async_scheduling": value})


def test_default_is_synchronous() -> None:
    assert EngineConfig().async_scheduling is False
    assert EngineConfig.from_dict({"async_scheduling": True}).async_scheduling is True


def test_single_request_decodes_one_step_ahead() -> None:
    """Prefill then decodes; the last token's batch finishes it; no extra step (max_tokens)."""
    log, eng = _run([_spec("a", 0.0, 4, 3)], async_scheduling=True)
    assert [line["time"] for line in log] == [0.0, 1.0, 2.0]
    assert [line["scheduled"] for line in log] == [{"a": 4}, {"a": 1}, {"a": 1}]
    assert [line["finished"] for line in log] == [[], [], ["a"]]
    (req,) = eng.finished
    assert req.first_token_time == 1.0 and req.finish_time == 3.0
    assert req.num_output_tokens == 3


def test_arrival_joins_one_step_later_than_sync() -> None:
    """Batch 1 is scheduled at t=0 while batch 0 runs: a request arriving at 0.5 waits for the
    schedule made at t=1, whose batch starts at t=2 (synchronously it joins the step at t=1)."""
    specs = [_spec("a", 0.0, 4, 5), _spec("b", 0.5, 4, 2)]
    sync_log, _ = _run(specs)
    async_log, _ = _run(specs, async_scheduling=True)
    first = {line["time"] for line in sync_log if "b" in line["new"]}
    assert first == {1.0}
    assert {line["time"] for line in async_log if "b" in line["new"]} == {2.0}


def test_sync_default_unchanged_by_the_key() -> None:
    specs = [_spec(f"r{i}", 0.25 * i, 5 + i, 3 + i % 4) for i in range(12)]
    log_default, _ = _run(specs)
    log_false, _ = _run(specs, async_scheduling=False)
    assert log_default == log_false


def test_async_conserves_requests_under_preemption() -> None:
    """A tight cache preempts; every request still finishes once with all its tokens."""
    specs = [_spec(f"r{i}", 0.0, 6 + i % 5, 4 + i % 7) for i in range(10)]
    cfg = EngineConfig(block_size=4, num_gpu_blocks=12, async_scheduling=True)
    eng = Engine(cfg, make_policy("vllm-v1"), load_cost_model("constant:1.0"))
    eng.add_requests(specs)
    eng.run()
    assert eng.num_preemptions > 0
    assert sorted(r.request_id for r in eng.finished) == sorted(s.request_id for s in specs)
    assert all(r.num_output_tokens == r.spec.output_len for r in eng.finished)
    assert eng.kv.num_free_blocks == 11


@pytest.mark.parametrize("name", ["sarathi", "static-priority:shortest-prompt"])
def test_other_schedulers_are_rejected(name) -> None:
    """Subclasses of vLLM V1's policy too: they change its rules (``is_vllm_v1``)."""
    cfg = EngineConfig(async_scheduling=True)
    with pytest.raises(ConfigError, match="async_scheduling=True needs the vllm-v1 scheduler"):
        Engine(cfg, make_policy(name), load_cost_model("constant:1.0"))


def test_step_by_step_callers_are_rejected() -> None:
    cfg = EngineConfig(async_scheduling=True)
    eng = Engine(cfg, make_policy("vllm-v1"), load_cost_model("constant:1.0"))
    eng.add_requests([_spec("a", 0.0, 4, 2)])
    for call in (eng.advance, eng.advance_to_decision, eng.step, eng.hold_step):
        with pytest.raises(ConfigError, match="async_scheduling=True is supported by Engine.run"):
            call()


def test_simulate_async_records() -> None:
    specs = [_spec(f"r{i}", 0.5 * i, 8, 4) for i in range(6)]
    result = simulate(specs, {"async_scheduling": True, "num_gpu_blocks": 64}, record_steps=True)
    assert result.summary["num_requests"] == 6
    assert result.config.async_scheduling is True
    assert int(result.steps["num_finished"].sum()) == 6


def test_environments_reject_async() -> None:
    pytest.importorskip("gymnasium")
    from llmsched_gym.envs.priority_v0 import PriorityEnv

    with pytest.raises(ConfigError, match=r"engine\.async_scheduling=True is not supported"):
        PriorityEnv(scenario_overrides={"engine.async_scheduling": True}, max_requests=4)


def test_live_backend_rejects_async() -> None:
    from llmsched_gym.backends.vllm.engine import LiveEngineConfig

    engine = EngineConfig(block_size=32, num_gpu_blocks=64, async_scheduling=True)
    with pytest.raises(ConfigError, match=r"async_scheduling=True is not supported by the live"):
        LiveEngineConfig(engine=engine)


def test_compiled_and_pure_cores_agree(tmp_path) -> None:
    """The compiled async loop writes the same schedule log and records as the pure one."""
    import os
    import subprocess
    import sys

    from llmsched_gym import _native

    if not all(state == "compiled" for state in _native.status().values()):
        pytest.skip("compiled core not built (python -m llmsched_gym.build_native)")
    code = (
        "import sys\n"
        "from llmsched_gym.core.request import RequestSpec\n"
        "from llmsched_gym.simulation import simulate\n"
        "specs = [RequestSpec(f'r{i}', 0.02 * i, 6 + i % 9, 3 + i % 11, 3 + i % 11)"
        " for i in range(60)]\n"
        "cfg = {'async_scheduling': True, 'block_size': 4, 'num_gpu_blocks': 14,"
        " 'max_num_batched_tokens': 24, 'scheduling_policy': sys.argv[2]}\n"
        "res = simulate(specs, cfg, 'vllm-v1', 'roofline:llama-2-7b@a100-80gb',"
        " schedule_log=sys.argv[1])\n"
        "print(res.requests.to_csv(index=False))\n"
    )
    for policy in ("fcfs", "priority"):
        outs = []
        for pure in ("0", "1"):
            env = {k: v for k, v in os.environ.items() if k != _native.PURE_ENV}
            if pure == "1":
                env[_native.PURE_ENV] = "1"
            log = tmp_path / f"log_{policy}_{pure}.jsonl"
            proc = subprocess.run(
                [sys.executable, "-c", code, str(log), policy],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            outs.append((proc.stdout, log.read_text()))
        assert outs[0] == outs[1]
        assert '"preempted": ["' in outs[0][1]  # the trace exercises preemption


def test_bench_async_reports_ratios(capsys) -> None:
    from llmsched_gym.bench import DECODE_PROFILE, bench_async, decode_heavy_trace

    figures = bench_async([("decode-heavy tiny", decode_heavy_trace(6), DECODE_PROFILE)])
    key = "decode-heavy tiny"
    assert set(figures) == {f"{key}.async_vs_sync_steps", f"{key}.async_vs_sync_ff_steps"}
    assert all(v > 0 for v in figures.values())
    assert "async/sync step rate" in capsys.readouterr().out


def _fast_forward_on_off(tmp_path, specs: list[RequestSpec], cfg: dict, cost_model: str) -> tuple:
    """Run with fast-forward on and off; assert the same log, records, ITLs and summary, and
    that the first run fast-forwarded. Returns both results."""
    runs = []
    for ff in (True, False):
        log = tmp_path / f"log_{ff}.jsonl"
        res = simulate(
            specs, cfg, "vllm-v1", cost_model, fast_forward=ff, schedule_log=log,
            record_steps=True,
        )  # fmt: skip
        runs.append((res, log.read_text()))
    (on, log_on), (off, log_off) = runs
    assert log_on == log_off
    assert on.requests.equals(off.requests)
    assert on.steps.equals(off.steps)
    assert on.itl[0].tolist() == off.itl[0].tolist()
    assert on.itl[1].tolist() == off.itl[1].tolist()
    assert on.summary == off.summary
    assert on.num_fast_forward_steps > 0
    return on, off


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
@pytest.mark.parametrize("caching", [True, False])
def test_fast_forward_equals_stepping(tmp_path, policy: str, caching: bool) -> None:
    """Async decode stretches advanced at once give the stepped run's log, records and ITLs."""
    import random

    rng = random.Random(7)
    specs = []
    t = 0.0
    for i in range(80):
        t += rng.choice([0.0, 0.01, 0.05, 0.3])
        prompt = tuple(rng.randint(1, 5) for _ in range(rng.randint(3, 40)))
        out = rng.randint(1, 60)
        specs.append(
            RequestSpec(f"r{i}", t, len(prompt), out, out, prompt_token_ids=prompt,
                        priority=rng.randint(0, 2))
        )  # fmt: skip
    cfg = {
        "async_scheduling": True,
        "block_size": 4,
        "num_gpu_blocks": 60,
        "max_num_batched_tokens": 48,
        "max_num_seqs": 12,
        "enable_prefix_caching": caching,
        "scheduling_policy": policy,
    }
    on, off = _fast_forward_on_off(tmp_path, specs, cfg, "roofline:llama-2-7b@a100-80gb")
    assert off.num_fast_forward_steps == 0


@pytest.mark.parametrize(
    "cost_model",
    [
        "roofline:llama-2-7b@a100-80gb",  # priced by sums
        "torch:llama-2-7b@h200-141gb/tp1",  # by items, with the longest context
        "infermax:llama-2-7b@a100-80gb",  # by items, a fresh request's decode as a prefill
    ],
)
def test_fast_forward_equals_stepping_at_stretch_ends(tmp_path, cost_model: str) -> None:
    """Stretches that start on a prefill's output, end with a finish, or end by an arrival
    give the stepped run's results, also when ``max_tokens`` exceeds the output (then the
    guard does not stop the finisher's last schedule and the stretch ends before it)."""
    import random

    rng = random.Random(11)
    specs = []
    t = 0.0
    for i in range(60):
        t += rng.choice([0.0, 0.02, 0.1, 0.4])
        out = rng.randint(1, 80)
        max_tokens = out + rng.choice([0, 0, 0, 1, 5])
        specs.append(RequestSpec(f"r{i}", t, rng.randint(1, 30), out, max_tokens))
    cfg = {
        "async_scheduling": True,
        "block_size": 4,
        "num_gpu_blocks": 90,
        "max_num_batched_tokens": 64,
        "max_num_seqs": 10,
    }
    _fast_forward_on_off(tmp_path, specs, cfg, cost_model)


def test_stretches_run_through_finishes() -> None:
    """An offline decode batch: async fast-forward steps no more batches than sync steps (its
    stretches end with their finishes and the next starts at once), same step count."""
    from llmsched_gym.bench import DECODE_PROFILE, offline_decode_batch

    specs = offline_decode_batch(16)
    runs = [
        simulate(specs, {"async_scheduling": asy}, "vllm-v1", DECODE_PROFILE)
        for asy in (False, True)
    ]
    sync, asy = runs
    assert asy.num_steps == sync.num_steps
    stepped = [r.num_steps - r.num_fast_forward_steps for r in runs]
    assert stepped[1] <= stepped[0], stepped
