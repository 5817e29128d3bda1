"""MaskablePPO (sb3-contrib; Huang & Ontañón, 2020, arXiv:2006.14171) on ``llmsched/Select-*``.

The agent builds each batch request by request with invalid picks masked out; the reward is
minus the latency area (return = -0.01 * total e2e seconds), on the overloaded ShareGPT scenario
(a queue builds, so the picks matter). Evaluated on five held-out
workload seeds against vllm-v1 and a random agent.

    python baselines/maskable_ppo_select.py --timesteps 20000 --out baselines/results/mppo.json
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

DEFAULT_OVERRIDES = {"workload.num_requests": 60}


def main(argv: list[str] | None = None) -> dict:
    """Train, evaluate, write the result JSON."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    env_id = "llmsched/Select-ChatSharegptOverload-v0"
    args = parser(__doc__.splitlines()[0], env_id, {}).parse_args(argv)
    overrides = json.loads(args.overrides) or DEFAULT_OVERRIDES
    started = time.perf_counter()
    venv = make_vec_env(
        lambda: gym.make(args.env_id, scenario_overrides=overrides, top_k=8),
        n_envs=2,
        seed=args.seed,
    )
    model = MaskablePPO(
        "MultiInputPolicy", venv, n_steps=256, batch_size=128, seed=args.seed, verbose=0
    )
    quiet_logger(model)
    model.learn(
        total_timesteps=args.timesteps,
        callback=progress_callback("MaskablePPO", args.timesteps),
    )
    result = evaluate(args.env_id, overrides, model, args.seed, args.eval_seeds, top_k=8)
    result.update(
        {
            "algorithm": "MaskablePPO",
            "env_id": args.env_id,
            "timesteps": args.timesteps,
            "seed": args.seed,
            "scenario_overrides": overrides,
        }
    )
    return write(result, args.out, started)


if __name__ == "__main__":
    main()
