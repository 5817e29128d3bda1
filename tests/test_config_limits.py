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
