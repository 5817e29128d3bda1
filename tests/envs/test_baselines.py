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


def test_cem_finds_the_maximum_of_a_quadratic() -> None:
    import numpy as np

    cem = _load("cem_priority").cem
    target = np.array([0.5, -1.5, 2.0])
    calls, seen = [], []

    def objective(x, it):
        calls.append(it)
        return -float(np.sum((x - target) ** 2))

    mean, history = cem(
        objective, 3, population=20, elite_frac=0.25, noise=0.01,
        budget=lambda: len(seen) < 30, rng=np.random.default_rng(0), on_iteration=seen.append,
    )  # fmt: skip
    assert np.allclose(mean, target, atol=0.05)
    assert len(history) == 30 and history == seen and len(calls) == 30 * 20
    assert history[-1]["mean_score"] > history[0]["mean_score"]


def test_cem_rejects_bad_settings() -> None:
    import numpy as np

    cem = _load("cem_priority").cem
    rng = np.random.default_rng(0)
    for kwargs, msg in (
        ({"population": 1, "elite_frac": 0.5, "noise": 0.0}, "population"),
        ({"population": 4, "elite_frac": 0.0, "noise": 0.0}, "elite_frac"),
        ({"population": 4, "elite_frac": 0.5, "noise": -1.0}, "noise"),
    ):
        with pytest.raises(ValueError, match=msg):
            cem(lambda x, it: 0.0, 2, budget=lambda: False, rng=rng, **kwargs)


def test_linear_row_scorer_ranks_rows_and_checks_shapes() -> None:
    import numpy as np

    from llmsched_gym.envs.observation import REQUEST_FEATURES

    mod = _load("cem_priority")
    table = np.zeros((4, len(REQUEST_FEATURES)), dtype=np.float32)
    p, left = REQUEST_FEATURES.index("prompt_tokens"), REQUEST_FEATURES.index("tokens_to_compute")
    table[:, p] = [0.9, 0.1, 0.5, 0.3]
    table[:, left] = [0.9, 0.1, 0.5, 0.3]
    scores = mod.SHORTEST_FIRST({"requests": table})
    assert scores.dtype == np.float32 and scores.shape == (4,)
    assert list(np.argsort(-scores)) == [1, 3, 2, 0]  # shortest first
    assert set(mod.SHORTEST_FIRST.as_dict()) == set(REQUEST_FEATURES)
    with pytest.raises(ValueError, match="finite"):
        mod.LinearRowScorer([0.0] * (len(REQUEST_FEATURES) - 1))
    with pytest.raises(ValueError, match="finite"):
        mod.LinearRowScorer([float("nan")] * len(REQUEST_FEATURES))
    with pytest.raises(ValueError, match="columns"):
        mod.SHORTEST_FIRST({"requests": np.zeros((4, 13), dtype=np.float32)})


@pytest.mark.slow
def test_cem_priority_recipe(tmp_path) -> None:
    out = tmp_path / "cem.json"
    result = _load("cem_priority").main(
        ["--timesteps", "1", "--population", "4", "--episodes", "1", "--eval-seeds", "1000",
         "--overrides", '{"workload.num_requests": 60}', "--out", str(out)]
    )  # fmt: skip
    saved = json.loads(out.read_text())
    assert saved["algorithm"].startswith("CEM") and saved["iterations"] == 1
    assert saved["timesteps"] > 0 and len(saved["weights"]) == 12
    for key in ("return", "return_vllm_v1", "return_random", "return_shortest_first"):
        assert math.isfinite(result[key]) and result[key] < 0


def test_committed_cem_result_reproduces() -> None:
    # The recorded scorer must still earn its recorded held-out return: if the environment's
    # semantics change, baselines/results/cem_priority.json must be regenerated.
    import gymnasium as gym

    import llmsched_gym.envs as E
    from llmsched_gym.envs.observation import REQUEST_FEATURES

    mod = _load("cem_priority")
    saved = json.loads((ROOT / "results" / "cem_priority.json").read_text())
    agent = mod.LinearRowScorer([saved["weights"][f] for f in REQUEST_FEATURES])
    env = gym.make(saved["env_id"], scenario_overrides=saved["scenario_overrides"])
    row = saved["per_seed"][0]
    assert E.rollout(env, agent, seed=row["seed"])["return"] == pytest.approx(row["return"])
    assert row["return"] > row["return_vllm_v1"]


def test_ppo_recipes_print_progress() -> None:
    """The PPO recipes pass a progress callback: one line per interval and one at the end."""
    import io
    import sys

    from stable_baselines3 import PPO

    sys.path.insert(0, str(ROOT))
    common = _load("_common")
    for name in ("ppo_priority", "maskable_ppo_select"):
        assert "callback=progress_callback(" in (ROOT / f"{name}.py").read_text()
    stream = io.StringIO()
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, seed=0, verbose=0)
    common.quiet_logger(model)
    model.learn(128, callback=common.progress_callback("PPO", 128, every_s=0.0, stream=stream))
    lines = stream.getvalue().splitlines()
    assert lines and lines[-1].startswith("PPO: 128 / 128 steps (100%), mean episode return")
