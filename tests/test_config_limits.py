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
    "key", ["max_num_batched_tokens", "max_num_seqs", "num_gpu_blocks", "long_prefill_token_threshold"]
)
def test_huge_settings_are_config_errors(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key} must be .*2\*\*31 - 1|{key} must be an integer in"):
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
