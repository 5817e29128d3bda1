"""The bounded YAML loader every scenario, engine-config and cost-profile read goes through."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from llmsched_gym import _yaml
from llmsched_gym.config import EngineConfig
from llmsched_gym.cost.registry import load_cost_model
from llmsched_gym.errors import ConfigError, CostModelError
from llmsched_gym.scenarios import load_scenario

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from malformed_corpus import billion_laughs  # noqa: E402


def test_alias_bomb_is_refused_quickly() -> None:
    with pytest.raises(_yaml.YAMLLimitError, match="aliases .* expand the document"):
        _yaml.safe_load(billion_laughs())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", r"line 3: duplicate key 'a' \(first on line 1\)"),
        ("x:\n  y: 1\n  y: 2\n", r"line 3: duplicate key 'y'"),
        ("&a [*a]\n", "refers to a collection that contains it"),
        ("[" * 200 + "]" * 200, "nested more than 64 levels"),
    ],
)
def test_ambiguous_or_unbounded_documents(text: str, message: str) -> None:
    with pytest.raises(yaml.YAMLError, match=message):
        _yaml.safe_load(text)


def test_small_aliases_and_merge_keys_still_load() -> None:
    text = "base: &b {x: 1}\nuse: *b\nmerged:\n  <<: *b\n  y: 2\n"
    assert _yaml.safe_load(text) == yaml.safe_load(text)


def test_every_loader_refuses_the_bomb(tmp_path) -> None:
    bomb = billion_laughs()
    engine = tmp_path / "engine.yaml"
    engine.write_text(bomb)
    with pytest.raises(ConfigError, match="expand the document"):
        EngineConfig.from_file(engine)
    scenario = tmp_path / "bomb-v0.yaml"
    scenario.write_text(bomb)
    with pytest.raises(ConfigError, match="expand the document"):
        load_scenario(scenario)
    profile = tmp_path / "profile.yaml"
    profile.write_text(bomb)
    with pytest.raises(CostModelError, match="expand the document"):
        load_cost_model(str(profile))


def test_duplicate_engine_key_names_the_line(tmp_path) -> None:
    engine = tmp_path / "engine.yaml"
    engine.write_text("max_num_seqs: 8\nblock_size: 16\nmax_num_seqs: 16\n")
    with pytest.raises(ConfigError, match=r"line 3: duplicate key 'max_num_seqs'"):
        EngineConfig.from_file(engine)
