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


def quiet_logger(model: Any) -> Any:
    """Give ``model`` a logger that writes nothing.

    Without one, SB3's ``learn`` creates an empty ``SB3-<date>`` folder in the temp directory on
    every run even at ``verbose=0``.
    """
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def progress_callback(label: str, total: int, every_s: float = 10.0, stream: Any = None) -> Any:
    """An SB3 callback printing training progress every ``every_s`` seconds and at the end.

    One line each: steps done of ``total``, the mean return of the episodes finished so far
    (from the vectorised env's ``episode`` infos; before the first one ends, the mean reward per
    step) and the time taken.
    """
    import sys

    from stable_baselines3.common.callbacks import BaseCallback

    out = stream or sys.stdout

    class _Progress(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.started = time.perf_counter()
            self.last = self.started
            self.returns: list[float] = []
            self.reward_sum = 0.0
            self.reward_count = 0
            self.printed_at = -1

        def _on_step(self) -> bool:
            rewards = self.locals.get("rewards")
            if rewards is not None:
                self.reward_sum += float(sum(rewards))
                self.reward_count += len(rewards)
            for info in self.locals.get("infos", ()):
                if "episode" in info:
                    self.returns.append(float(info["episode"]["r"]))
            now = time.perf_counter()
            if now - self.last >= every_s:
                self.last = now
                self._print()
            return True

        def _on_training_end(self) -> None:
            if self.printed_at != self.num_timesteps:
                self._print()

        def _print(self) -> None:
            self.printed_at = self.num_timesteps
            done = min(self.num_timesteps, total)
            if self.returns:
                ret = (
                    f"mean episode return {sum(self.returns) / len(self.returns):.2f} over "
                    f"{len(self.returns)} episodes"
                )
            elif self.reward_count:
                mean = self.reward_sum / self.reward_count
                ret = f"no episode finished yet, mean reward per step {mean:.4f}"
            else:
                ret = "no episode finished yet"
            print(
                f"{label}: {done:,} / {total:,} steps ({done / total:.0%}), {ret}, "
                f"{time.perf_counter() - self.started:.0f} s",
                file=out,
                flush=True,
            )

    return _Progress()


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
