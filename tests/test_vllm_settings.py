"""vLLM 0.32.0 settings the simulator does not model: accepted at vLLM's default, else refused.

The inventory (docs/vllm_config_inventory.md) lists every ``SchedulerConfig`` / ``CacheConfig``
field; these tests pin the rows marked "rejected".
"""

from __future__ import annotations

import io
import json

import pytest

from llmsched_gym.config import FIXED_SETTINGS, VLLM_KEY_HINTS, EngineConfig
from llmsched_gym.errors import ConfigError

BAD_VALUES = {
    "max_num_queued_reqs": [0, 100, "10"],
    "max_num_queued_tokens": [0, 4096],
    "scheduler_reserve_full_isl": [False, None],
    "max_num_scheduled_tokens": [512, 0],
    "max_num_active_seqs": [8],
    "watermark": [0.01, -1, True],
    "prefill_schedule_interval": [2, 0, True],
}


def test_every_fixed_setting_has_bad_values_here() -> None:
    assert BAD_VALUES.keys() == FIXED_SETTINGS.keys()


@pytest.mark.parametrize(
    ("key", "value"), [(k, v) for k, values in BAD_VALUES.items() for v in values]
)
def test_a_value_other_than_vllms_default_names_key_and_value(key, value) -> None:
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_dict({"max_num_seqs": 4, key: value}, source="cfg.yaml")
    message = str(err.value)
    assert message.startswith(f"cfg.yaml: {key}={value!r} is not supported")
    assert f"default {key}={FIXED_SETTINGS[key][0]!r}" in message


@pytest.mark.parametrize("key", sorted(FIXED_SETTINGS))
def test_vllms_default_is_accepted_and_changes_nothing(key) -> None:
    cfg = EngineConfig.from_dict({"max_num_seqs": 4, key: FIXED_SETTINGS[key][0]})
    assert cfg == EngineConfig(max_num_seqs=4)
    assert key not in cfg.to_dict()


def test_a_file_with_a_fixed_setting_is_read_and_a_bad_one_refused(tmp_path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"block_size": 8, "enable_chunked_prefill": True}))
    assert EngineConfig.from_file(good) == EngineConfig(block_size=8)
    bad = tmp_path / "bad.yaml"
    bad.write_text("block_size: 8\nwatermark: 0.05\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: watermark=0.05 is not supported"):
        EngineConfig.read_settings(bad)


def test_unknown_vllm_names_are_refused_with_value_and_hint() -> None:
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_dict({"gpu_memory_utilization": 0.5, "policy": "priority"})
    message = str(err.value)
    assert "gpu_memory_utilization=0.5 (it only sizes the KV cache: set num_gpu_blocks" in message
    assert "policy='priority' (vLLM's SchedulerConfig field; the engine-config key is " in message
    assert set(VLLM_KEY_HINTS).isdisjoint(EngineConfig.keys())
    assert set(VLLM_KEY_HINTS).isdisjoint(FIXED_SETTINGS)


@pytest.mark.parametrize("key", ["enable_chunked_prefill", "long_prefill_token_threshold_adaptive"])
@pytest.mark.parametrize("value", [0, "no", None])
def test_modelled_flags_bad_value_names_key_and_value(key, value) -> None:
    with pytest.raises(ConfigError, match=rf"{key} must be true or false, got {value!r}"):
        EngineConfig.from_dict({key: value})


def test_adaptive_threshold_floors_the_cap_at_a_fair_share() -> None:
    cfg = EngineConfig(max_num_batched_tokens=512, long_prefill_token_threshold=32)
    adaptive = cfg.replace(long_prefill_token_threshold_adaptive=True)
    assert [cfg.prefill_cap(n) for n in (1, 2, 8, 100)] == [0, 32, 32, 32]
    assert [adaptive.prefill_cap(n) for n in (1, 2, 8, 100)] == [0, 256, 64, 32]
    assert EngineConfig(long_prefill_token_threshold_adaptive=True).prefill_cap(2) == 0
    assert adaptive.to_dict()["long_prefill_token_threshold_adaptive"] is True
    assert "long_prefill_token_threshold_adaptive" not in cfg.to_dict()


def test_enable_chunked_prefill_off_follows_vllms_rules() -> None:
    cfg = EngineConfig.from_dict({"enable_chunked_prefill": False, "max_num_batched_tokens": 512})
    assert cfg.to_dict()["enable_chunked_prefill"] is False
    assert "enable_chunked_prefill" not in EngineConfig().to_dict()
    with pytest.raises(ConfigError, match=r"smaller than max_model_len \(1024\) with enable_chu"):
        cfg.replace(max_model_len=1024).verify_vllm_limits()
    cfg.replace(max_model_len=512).verify_vllm_limits()


def test_enable_chunked_prefill_off_admits_whole_prompts_only() -> None:
    from llmsched_gym.core.engine import Engine
    from llmsched_gym.core.request import RequestSpec
    from llmsched_gym.cost.base import ConstantCostModel
    from llmsched_gym.errors import TraceError
    from llmsched_gym.policies.registry import make_policy

    def run(chunked: bool) -> list[dict]:
        buf = io.StringIO()
        cfg = EngineConfig(
            max_num_batched_tokens=16, block_size=4, num_gpu_blocks=40,
            enable_chunked_prefill=chunked,
        )  # fmt: skip
        eng = Engine(cfg, make_policy("vllm-v1"), ConstantCostModel(1.0), schedule_log=buf)
        eng.add_requests([RequestSpec("a", 0.0, 10, 2, 2), RequestSpec("b", 0.0, 10, 2, 2)])
        eng.run()
        return [json.loads(line) for line in buf.getvalue().splitlines()]

    assert run(True)[0]["scheduled"] == {"a": 10, "b": 6}  # b's prompt is chunked
    assert run(False)[0]["scheduled"] == {"a": 10}  # b waits for a whole step's budget
    assert run(False)[1]["scheduled"] == {"a": 1, "b": 10}
    cfg = EngineConfig(max_num_batched_tokens=16, block_size=4, enable_chunked_prefill=False)
    with pytest.raises(ConfigError, match="enable_chunked_prefill=False is simulated for the vllm"):
        Engine(cfg, make_policy("sarathi"), ConstantCostModel(1.0))
    adaptive = EngineConfig(
        long_prefill_token_threshold=8, long_prefill_token_threshold_adaptive=True
    )
    with pytest.raises(ConfigError, match="long_prefill_token_threshold_adaptive=True is simul"):
        Engine(adaptive, make_policy("sarathi"), ConstantCostModel(1.0))
    eng = Engine(cfg, make_policy("vllm-v1"), ConstantCostModel(1.0))
    with pytest.raises(TraceError, match="can never be scheduled whole"):
        eng.add_requests([RequestSpec("long", 0.0, 16, 2, 2)])
