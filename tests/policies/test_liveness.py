"""Reference policies stay live on inputs the fuzz found (issue 23)."""

from __future__ import annotations

import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.simulation import simulate
from llmsched_gym.workloads.trace import request_from_dict


def _one(prompt_len: int, output_len: int):
    return [
        request_from_dict(
            {
                "request_id": "a",
                "arrival_time": 0.0,
                "prompt_len": prompt_len,
                "output_len": output_len,
            }  # fmt: skip
        )
    ]


@pytest.mark.parametrize("step_s", [0.05, 0.2])
def test_proserve_serves_a_one_token_prompt_on_slow_steps(step_s: float) -> None:
    res = simulate(_one(1, 5), {}, "proserve", f"constant:{step_s}")
    assert res.summary["num_requests"] == 1
    assert res.request_table["e2e_s"][0] == pytest.approx(5 * step_s)


def test_relserve_on_a_small_kv_cache_runs() -> None:
    res = simulate(_one(10, 5), {"num_gpu_blocks": 20}, "relserve", "constant:0.05")
    assert res.summary["num_requests"] == 1


def test_relserve_internal_run_errors_say_they_are_internal() -> None:
    with pytest.raises(ConfigError, match="internal calibration run") as err:
        simulate(_one(10, 5), {"num_gpu_blocks": 5}, "relserve", "constant:0.05")
    assert "none of these requests is yours" in str(err.value)
