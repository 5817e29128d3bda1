"""PPO (Schulman et al., 2017, arXiv:1707.06347) on ``llmsched/Priority-ChatSharegptOverload-v0``.

The agent scores the top-K visible requests each decision step; the reward is minus the latency
area (episode return = -0.01 * total e2e seconds). The scenario is overloaded on purpose (ShareGPT
at 2.5x the instance's capacity): a queue builds, so the order matters (on the chat scenarios at
their own rates everything fits and every policy, random included, gets the same return).
Evaluated on five held-out workload seeds against vllm-v1 and a random agent.

    python baselines/ppo_priority.py --timesteps 20000 --out baselines/results/ppo_priority.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
from _common import evaluate, parser, progress_callback, quiet_logger, write  # noqa: E402

import llmsched_gym.envs  # noqa: E402,F401 - registers the ids

DEFAULT_OVERRIDES = {"workload.num_requests": 200}


def main(argv: list[str] | None = None) -> dict:
    """Train, evaluate, write the result JSON."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env_id = "llmsched/Priority-ChatSharegptOverload-v0"
    args = parser(__doc__.splitlines()[0], env_id, {}).parse_args(argv)
    overrides = json.loads(args.overrides) or DEFAULT_OVERRIDES
    started = time.perf_counter()
    venv = make_vec_env(
        lambda: gym.make(args.env_id, scenario_overrides=overrides),
        n_envs=2,
        seed=args.seed,
    )
    # n_steps 256 x 2 envs per update: short rollouts so a few thousand steps make several updates.
    model = PPO("MultiInputPolicy", venv, n_steps=256, batch_size=128, seed=args.seed, verbose=0)
    quiet_logger(model)
    model.learn(
        total_timesteps=args.timesteps,
        callback=progress_callback("PPO", args.timesteps),
    )
    result = evaluate(args.env_id, overrides, model, args.seed, args.eval_seeds)
    result.update(
        {
            "algorithm": "PPO",
            "env_id": args.env_id,
            "timesteps": args.timesteps,
            "seed": args.seed,
            "scenario_overrides": overrides,
        }
    )
    return write(result, args.out, started)


if __name__ == "__main__":
    main()
