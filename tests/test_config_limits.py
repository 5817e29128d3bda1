"""Engine settings beyond what the compiled core's C integers hold: one error, compiled or pure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.errors import ConfigError
from llmsched_gym.simulation import simulate


@pytest.mark.parametrize(
    "key",
    ["max_num_batched_tokens", "max_num_seqs", "num_gpu_blocks", "long_prefill_token_threshold"],
)
def test_huge_settings_are_config_errors(key: str) -> None:
    with pytest.raises(
        ConfigError, match=rf"{key} must be .*2\*\*31 - 1|{key} must be an integer in"
    ):
        EngineConfig.from_dict({key: 10**30})


def test_huge_setting_in_a_run_is_not_an_overflow() -> None:
    spec = [{"request_id": "r", "arrival_time": 0.0, "prompt_len": 4, "output_len": 2}]
    from llmsched_gym.workloads.trace import request_from_dict

    with pytest.raises(ConfigError, match="max_num_batched_tokens must be at most"):
        simulate([request_from_dict(spec[0])], {"max_num_batched_tokens": 10**30})


SNIPPET = """
import json, sys
from llmsched_gym.simulation import simulate
from llmsched_gym.workloads.trace import request_from_dict
spec = request_from_dict({"request_id": "r", "arrival_time": 0.0, "prompt_len": 4, "output_len": 2})
out = []
for settings in ({"max_num_batched_tokens": 10**30}, {"num_gpu_blocks": 10**30}):
    try:
        simulate([spec], settings)
    except Exception as exc:
        out.append([type(exc).__name__, str(exc)])
print(json.dumps(out))
"""


def test_compiled_and_pure_raise_the_same_error() -> None:
    runs = []
    for pure in ("0", "1"):
        env = {**os.environ, "LLMSCHED_PURE": pure}
        proc = subprocess.run(
            [sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert runs[0] == runs[1]
    assert all(kind == "ConfigError" for kind, _ in runs[0])


def _spec(prompt_len: int, output_len: int = 4):
    from llmsched_gym.workloads.trace import request_from_dict

    return request_from_dict(
        {"request_id": "r", "arrival_time": 0.0, "prompt_len": prompt_len, "output_len": output_len}
    )


def test_max_model_len_refuses_longer_prompts_as_vllm_does() -> None:
    with pytest.raises(ConfigError, match=r"The decoder prompt \(length 5000\) is longer than the "
                       r"maximum model length of 4096"):  # fmt: skip
        simulate([_spec(5000)], {"max_model_len": 4096})
    with pytest.raises(ConfigError, match="maximum context length is 5002 tokens"):
        simulate([_spec(5000, 5)], {"max_model_len": 5002})
    res = simulate([_spec(5000, 5)], {"max_model_len": 5005}, cost_model="constant:0.01")
    assert res.summary["num_requests"] == 1
    assert "max_model_len" not in EngineConfig().to_dict()  # unset: no limit, files unchanged
    with pytest.raises(ConfigError, match="max_model_len must be a positive integer"):
        EngineConfig(max_model_len=0)


def test_vllm_budget_rule_at_the_cli(capsys) -> None:
    from llmsched_gym.cli.main import main

    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(100\) must be greater than "
                       r"or equal to max_num_seqs \(256\)"):  # fmt: skip
        EngineConfig(max_num_batched_tokens=100).verify_vllm_limits()
    code = main(["simulate", "--num-requests", "3", "--max-num-batched-tokens", "100"])
    assert code == 2
    assert "must be greater than or equal to max_num_seqs (256)" in capsys.readouterr().err
    EngineConfig(max_num_batched_tokens=256, max_num_seqs=256).verify_vllm_limits()


def test_block_size_flag_takes_vllm_sizes(capsys) -> None:
    from llmsched_gym.cli.main import main

    with pytest.raises(SystemExit):
        main(["simulate", "--num-requests", "3", "--block-size", "4"])
    assert "--block-size: invalid choice: 4" in capsys.readouterr().err
    assert main(["simulate", "--num-requests", "3", "--block-size", "32", "--no-progress"]) == 0


def _req(rid: str, prompt_len: int, max_tokens: int, t: float = 0.0):
    from llmsched_gym.core.request import RequestSpec

    return RequestSpec(rid, t, prompt_len, max_tokens, max_tokens)


def test_models_carry_their_context_length() -> None:
    from llmsched_gym.cost.hardware import get_model, list_models
    from llmsched_gym.cost.registry import load_cost_model

    assert get_model("llama-2-7b").max_position_embeddings == 4096
    assert get_model("opt-13b").max_position_embeddings == 2048
    assert all(get_model(m).max_position_embeddings >= 2048 for m in list_models())
    assert load_cost_model("vidur:llama-2-70b@h100-80gb/tp4").max_model_len() == 4096
    assert load_cost_model("roofline:llama-3-8b@h100-80gb").max_model_len() == 8192
    assert not hasattr(load_cost_model("constant:0.01"), "max_model_len")


def test_max_model_len_is_derived_from_the_profile_when_unset() -> None:
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.simulation import resolve_config

    model = load_cost_model("vidur:llama-2-7b@a100-80gb/tp1")
    assert resolve_config({}, model).max_model_len == 4096  # as vLLM derives it
    assert resolve_config(None, model).max_model_len == 4096
    assert resolve_config({"max_model_len": 2048}, model).max_model_len == 2048
    assert resolve_config({"max_model_len": None}, model).max_model_len is None  # explicit: none
    assert resolve_config(EngineConfig(), model).max_model_len is None  # an object as given
    assert resolve_config({}, load_cost_model("constant:0.01")).max_model_len is None


def test_over_long_requests_are_refused_and_the_rest_served() -> None:
    specs = [_req("a", 100, 10), _req("long", 4000, 100, 0.1), _req("b", 50, 5, 0.2)]
    res = simulate(specs, None, cost_model="vidur:llama-2-7b@a100-80gb/tp1")
    assert res.config.max_model_len == 4096
    assert res.summary["num_refused"] == 1
    assert sorted(res.requests["request_id"]) == ["a", "b"]
    lifted = simulate(specs, {"max_model_len": None}, cost_model="vidur:llama-2-7b@a100-80gb/tp1")
    assert lifted.summary["num_refused"] == 0 and len(lifted.requests) == 3


def test_a_job_cannot_lose_a_request() -> None:
    from llmsched_gym.core.job import Job, Stage

    job = Job("j", 0.0, [Stage("s", [_req("j-0", 100, 10), _req("j-1", 2000, 100)])])
    with pytest.raises(ConfigError, match=r"a job of the workload: request 'j-1': This model's "
                       r"maximum context length is 2048 tokens"):  # fmt: skip
        simulate([job], {"max_model_len": 2048}, cost_model="constant:0.01")


def test_the_engine_itself_refuses_an_over_long_request() -> None:
    from llmsched_gym.core.engine import Engine
    from llmsched_gym.cost.base import ConstantCostModel
    from llmsched_gym.policies.registry import make_policy

    engine = Engine(EngineConfig(max_model_len=64), make_policy("vllm-v1"), ConstantCostModel(0.01))
    with pytest.raises(ConfigError, match=r"engine: request 'x': The decoder prompt \(length 65\)"):
        engine.add_requests([_req("x", 65, 1)])
    with pytest.raises(ConfigError, match="maximum context length is 64 tokens"):
        engine.enqueue(_req("y", 60, 5))


def test_a_cluster_refuses_at_its_front_door() -> None:
    from llmsched_gym.cluster.cluster import run_cluster

    small = {"name": "small", "cost_model": "constant:0.01", "engine": {"max_model_len": 256}}
    big = {"name": "big", "cost_model": "constant:0.01", "engine": {"max_model_len": 1024}}
    specs = [_req("a", 100, 10), _req("mid", 500, 10, 0.1), _req("huge", 2000, 10, 0.2)]
    res = run_cluster(specs, [small, big], "round-robin")
    assert res.summary["num_refused"] == 1  # "huge" outgrows both; "mid" goes to "big" only
    rows = res.requests.set_index("request_id")
    assert sorted(rows.index) == ["a", "mid"] and rows.loc["mid", "instance_id"] == 1


def test_cli_reports_refusals_and_lifts_the_limit(tmp_path, capsys) -> None:
    from llmsched_gym.cli.main import main

    trace = tmp_path / "t.jsonl"
    rows = [
        {"request_id": "a", "arrival_time": 0.0, "prompt_len": 100, "output_len": 10},
        {"request_id": "b", "arrival_time": 0.1, "prompt_len": 4000, "output_len": 200},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["simulate", "--trace", str(trace), "--cost-model", "vidur:llama-2-7b@a100-80gb/tp1"]
    assert main([*base, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "| 1 requests |" in out and "refused 1 requests longer than max_model_len=4,096" in out
    assert main([*base, "--no-progress", "--max-model-len", "none"]) == 0
    out = capsys.readouterr().out
    assert "| 2 requests |" in out and "refused" not in out
    with pytest.raises(SystemExit):
        main([*base, "--max-model-len", "zero"])
    assert "expected a positive integer or 'none', got 'zero'" in capsys.readouterr().err


def test_vllm_budget_rule_in_files(tmp_path) -> None:
    from llmsched_gym.scenarios import load_scenario

    path = tmp_path / "engine.yaml"
    path.write_text("max_num_batched_tokens: 64\n")
    with pytest.raises(ConfigError, match=r"engine.yaml: max_num_batched_tokens \(64\) must be"):
        EngineConfig.from_file(path)
    scenario = tmp_path / "tiny-v0.yaml"
    scenario.write_text(
        "name: tiny-v0\ndescription: d\nworkload: {kind: grid, num_requests: 2, input_len: 8, "
        "output_len: 2}\nengine: {max_num_batched_tokens: 64}\ncost_model: constant:0.01\n"
    )
    with pytest.raises(ConfigError, match=r"tiny-v0.yaml: engine: max_num_batched_tokens \(64\)"):
        load_scenario(scenario)


@pytest.mark.slow
def test_every_shipped_scenario_serves_its_whole_workload() -> None:
    """No shipped scenario loses a request to its (derived) max_model_len: those whose traces
    outgrow their model's context say ``max_model_len: null``."""
    from llmsched_gym.scenarios import list_scenarios, load_scenario
    from llmsched_gym.workloads.stats import flatten_requests

    for name in list_scenarios():
        scenario = load_scenario(name)
        cfg = scenario.engine_config()
        admitted, refused = cfg.admit(flatten_requests(scenario.build_workload()))
        assert not refused, (name, cfg.max_model_len, refused[0])
