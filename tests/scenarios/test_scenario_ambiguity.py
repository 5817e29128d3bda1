"""A scenario file must say one thing: its name matches its file, and no key appears twice."""

from __future__ import annotations

import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import load_scenario, scenario_path


def test_name_must_match_the_file(tmp_path) -> None:
    text = scenario_path("chat-sharegpt-v0").read_text()
    path = tmp_path / "my-copy-v0.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=r"my-copy-v0\.yaml:\d+: key 'name' is 'chat-sharegpt-v0'"
    ):
        load_scenario(path)


def test_duplicate_key_names_the_line(tmp_path) -> None:
    text = scenario_path("chat-sharegpt-v0").read_text()
    path = tmp_path / "chat-sharegpt-v0.yaml"
    path.write_text(text + "seed: 5\n")
    n = len(text.splitlines()) + 1
    with pytest.raises(ConfigError, match=rf"line {n}: duplicate key 'seed'"):
        load_scenario(path)
