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

EVAL_SEEDS = (1000, 1001, 1002, 1003, 1004)
"""Held-out evaluation seeds: workloads the agent never trained on (training uses ``--seed``)."""


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
    p.add_argument(
        "--eval-seeds",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        default=EVAL_SEEDS,
        help="comma-separated held-out evaluation seeds (default: 1000-1004)",
    )
    p.add_argument("--out", type=Path, default=None, help="result JSON (default: print only)")
    return p


def add_suite_arguments(
    p: argparse.ArgumentParser,
    task: str,
    scenarios: tuple[str, ...],
    sources: tuple[str, ...],
    submission: Path,
) -> None:
    """Suite mode's arguments: train on a suite's train workloads and write a submission."""
    p.add_argument(
        "--suite",
        default=None,
        help=f"train on this benchmark suite's {task} train workloads and write a submission",
    )
    p.add_argument(
        "--scenarios",
        type=lambda text: tuple(text.split(",")),
        default=scenarios,
        help="suite mode: comma-separated suite scenario ids to train on",
    )
    p.add_argument(
        "--sources",
        type=lambda text: tuple(text.split(",")),
        default=sources,
        help="suite mode: comma-separated sources to train on (train splits only)",
    )
    p.add_argument(
        "--submission", type=Path, default=submission, help="suite mode: submission folder"
    )


def command_line(script: str, argv: list[str] | None) -> str:
    """The command that ran ``script`` with ``argv`` (the process's own arguments if None)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python", f"baselines/{script}", *args])


def quiet_logger(model: Any) -> Any:
    """Give ``model`` a logger that writes nothing.

    Without one, SB3's ``learn`` creates an empty ``SB3-<date>`` folder in the temp directory on
    every run even at ``verbose=0``.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def evaluate(
    env_id: str,
    overrides: dict[str, Any],
    agent: Any,
    seed: int,
    eval_seeds: tuple[int, ...] = EVAL_SEEDS,
    **env_kwargs: Any,
) -> dict[str, Any]:
    """Episode returns of the trained agent, vllm-v1 and a random agent on held-out seeds.

    Each evaluation seed gives a fresh workload (scenario seed + seed) none of the training
    episodes saw. The random agent draws uniformly among valid actions (seeded), so its return
    says how much the decision matters on this workload. ``return*`` keys are means over the
    seeds; ``per_seed`` keeps each episode.
    """
    import numpy as np

    env = gym.make(env_id, scenario_overrides=overrides, **env_kwargs)
    rng = np.random.default_rng(seed)

    def random_action(_obs: Any) -> Any:
        masks = getattr(env.unwrapped, "action_masks", None)
        if masks is not None:
            return int(rng.choice(np.flatnonzero(masks())))
        return env.action_space.sample()

    rows = []
    for s in eval_seeds:
        env.action_space.seed(s)
        rows.append(
            {
                "seed": s,
                "return": E.rollout(env, agent, seed=s)["return"],
                "return_vllm_v1": E.rollout(env, E.PolicyAgent(make_policy("vllm-v1")), seed=s)[
                    "return"
                ],
                "return_random": E.rollout(env, random_action, seed=s)["return"],
            }
        )
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k != "seed"}
    return {**mean, "train_seed": seed, "eval_seeds": list(eval_seeds), "per_seed": rows}


def write(result: dict[str, Any], out: Path | None, started: float) -> dict[str, Any]:
    """Print the result and write it as JSON when asked."""
    result["wall_s"] = round(time.perf_counter() - started, 2)
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    return result
