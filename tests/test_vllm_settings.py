"""vLLM 0.32.0 settings the simulator does not model: accepted at vLLM's default, else refused.

The inventory (docs/vllm_config_inventory.md) lists every ``SchedulerConfig`` / ``CacheConfig``
field; these tests pin the rows marked "rejected".
"""

from __future__ import annotations

import json

import pytest

from llmsched_gym.config import FIXED_SETTINGS, VLLM_KEY_HINTS, EngineConfig
from llmsched_gym.errors import ConfigError

BAD_VALUES = {
    "enable_chunked_prefill": [False, 0, "no"],
    "long_prefill_token_threshold_adaptive": [True, 1],
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
