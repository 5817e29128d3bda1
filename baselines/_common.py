"""Shared helpers of the training recipes: argument parsing, evaluation, result JSON."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import llmsched_gym.envs as E
from llmsched_gym.policies.registry import make_policy


def parser(description: str, env_id: str, overrides: dict[str, Any]) -> argparse.ArgumentParser:
    """Arguments every recipe takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--env-id", default=env_id, help="registered environment id")
    p.add_argument("--timesteps", type=int, default=20_000, help="training environment steps")
    p.add_argument("--seed", type=int, default=0, help="training and evaluation seed")
    p.add_argument(
        "--overrides",
        default=json.dumps(overrides),
        help="scenario_overrides as JSON (small workloads keep episodes short)",
    )
    p.add_argument("--out", type=Path, default=None, help="result JSON (default: print only)")
    return p


def quiet_logger(model: Any) -> Any:
    """Give ``model`` a logger that writes nothing.

    Without one, SB3's ``learn`` creates an empty ``SB3-<date>`` folder in the temp directory on
    every run even at ``verbose=0``.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def evaluate(
    env_id: str, overrides: dict[str, Any], agent: Any, seed: int, **env_kwargs: Any
) -> dict[str, float]:
    """Episode return of the trained agent and of vllm-v1 (PolicyAgent) on the same seed."""
    env = gym.make(env_id, scenario_overrides=overrides, **env_kwargs)
    trained = E.rollout(env, agent, seed=seed)
    reference = E.rollout(env, E.PolicyAgent(make_policy("vllm-v1")), seed=seed)
    return {
        "return": trained["return"],
        "return_vllm_v1": reference["return"],
        "steps": trained["steps"],
    }


def write(result: dict[str, Any], out: Path | None, started: float) -> dict[str, Any]:
    """Print the result and write it as JSON when asked."""
    result["wall_s"] = round(time.perf_counter() - started, 2)
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return result
