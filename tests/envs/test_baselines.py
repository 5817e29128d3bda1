"""Smoke tests of the SB3 recipes in baselines/ (slow: they train ~2,000 steps each)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "baselines"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_ppo_priority_recipe(tmp_path) -> None:
    pytest.importorskip("stable_baselines3", reason="PPO needs the [rl] extra")
    out = tmp_path / "ppo.json"
    result = _load("ppo_priority").main(
        ["--timesteps", "2000", "--eval-seeds", "1000", "--out", str(out)]
    )
    assert json.loads(out.read_text())["algorithm"] == "PPO"
    assert math.isfinite(result["return"]) and result["return"] < 0


@pytest.mark.slow
def test_maskable_ppo_select_recipe(tmp_path) -> None:
    pytest.importorskip("sb3_contrib", reason="MaskablePPO needs the [rl] extra (sb3-contrib)")
    out = tmp_path / "mppo.json"
    result = _load("maskable_ppo_select").main(
        ["--timesteps", "2000", "--eval-seeds", "1000", "--out", str(out)]
    )
    assert json.loads(out.read_text())["algorithm"] == "MaskablePPO"
    assert math.isfinite(result["return"]) and result["return"] < 0
