"""PPO (Schulman et al., 2017, arXiv:1707.06347) on ``llmsched/Priority-ChatSharegptOverload-v0``.

The agent scores the top-K visible requests each decision step; the reward is minus the latency
area (episode return = -0.01 * total e2e seconds). The scenario is overloaded on purpose (ShareGPT
at 2.5x the instance's capacity): a queue builds, so the order matters (on the chat scenarios at
their own rates everything fits and every policy, random included, gets the same return).
Evaluated on five held-out workload seeds against vllm-v1 and a random agent.

    python baselines/ppo_priority.py --timesteps 20000 --out baselines/results/ppo_priority.json

**Suite mode** (``--suite llmsched-v2``) trains for the benchmark's leaderboard on the suite's
Priority train workloads only and writes a submission folder (``--submission``, default
``leaderboards/priority/ppo``): ``policy.pth`` (the weights of a small ``MultiInputPolicy``,
two hidden layers of ``--hidden`` units for the actor and the critic), ``submission.yaml``
(``policy: model`` and the ``model:`` spec the harness rebuilds the network from) and
``train.json`` (command, seed, steps, wall and CPU time; the README is written by hand). Two
environments (``TrainWorkloadEnv``) reset onto the train workloads of the ``chat-knee`` and
``chat-overload`` scenarios and the ``sharegpt`` and ``azure-conv`` sources in a fixed cycle
(``TrainWorkloads.cycle``: train seed 0 of each of the four groups, then seed 1, ...;
environment ``i`` takes every second one from the ``i``-th);
every workload is checked to be of the train split, so no test workload (seeds 1000+, the
second half hour of the Azure trace, the azure-code and arxiv traces) is ever run::

    python baselines/ppo_priority.py --suite llmsched-v2 --timesteps 100000
    llmsched-gym leaderboard evaluate leaderboards/priority/ppo --task Priority --update
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
from _common import (  # noqa: E402
    add_suite_arguments,
    evaluate,
    parser,
    progress_callback,
    quiet_logger,
    train_sb3_on_suite,
    write,
)

import llmsched_gym.envs  # noqa: E402,F401 - registers the ids

DEFAULT_OVERRIDES = {"workload.num_requests": 200}
SUITE_SCENARIOS = ("chat-knee", "chat-overload")
"""Suite mode's training scenarios (the same as ``cem_priority.py``'s)."""
SUITE_SOURCES = ("sharegpt", "azure-conv")
"""Suite mode's training sources: the two Priority sources with a train split."""
SUBMISSION = Path(__file__).resolve().parents[1] / "leaderboards" / "priority" / "ppo"


def main(argv: list[str] | None = None) -> dict:
    """Train, evaluate, write the result JSON."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env_id = "llmsched/Priority-ChatSharegptOverload-v0"
    p = parser(__doc__.splitlines()[0], env_id, {})
    add_suite_arguments(p, "Priority", SUITE_SCENARIOS, SUITE_SOURCES, SUBMISSION)
    p.add_argument("--hidden", type=int, default=32, help="suite mode: units per hidden layer")
    args = p.parse_args(argv)
    if args.suite is not None:
        return train_sb3_on_suite(
            args,
            argv,
            algorithm=PPO,
            citation="Schulman et al., 2017, arXiv:1707.06347",
            task="Priority",
            script="ppo_priority.py",
        )
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
