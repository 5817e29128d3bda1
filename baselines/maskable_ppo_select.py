"""MaskablePPO (sb3-contrib; Huang & Ontañón, 2020, arXiv:2006.14171) on ``llmsched/Select-*``.

The agent builds each batch request by request with invalid picks masked out; the reward is
minus the latency area (return = -0.01 * total e2e seconds), on the overloaded ShareGPT scenario
(a queue builds, so the picks matter). Evaluated on five held-out
workload seeds against vllm-v1 and a random agent.

    python baselines/maskable_ppo_select.py --timesteps 20000 --out baselines/results/mppo.json

**Suite mode** (``--suite llmsched-v2``) trains for the benchmark's leaderboard on the suite's
Select train workloads only and writes a submission folder (``--submission``, default
``leaderboards/select/maskable-ppo``) with ``policy.pth`` (the weights: two hidden layers of
``--hidden`` units for the actor and the critic), ``submission.yaml`` and ``train.json``
(``_common.train_sb3_on_suite``; the README is written by hand). Two environments
(``TrainWorkloadEnv``, top-K 16 as the harness wraps agents) reset onto the train workloads of
the ``capped-knee`` and ``capped-overload`` scenarios (load 1.0 and 2.5 on the instance capped
at 16 sequences and 2,048 tokens per step) and the ``sharegpt`` and ``azure-conv`` sources in a
fixed cycle (train seed 0 of each of the four groups, then seed 1, ...); every workload is
checked to be of the train split, so no test workload (seeds 1000+, the second half hour of
the Azure trace, the arxiv trace) is ever run::

    python baselines/maskable_ppo_select.py --suite llmsched-v2 --timesteps 200000
    llmsched-gym leaderboard evaluate leaderboards/select/maskable-ppo --task Select --update

No Select submission is committed: at 200,000 steps the deterministic policy closes every batch
after one pick, so an episode serves one request per engine step and even the train check
(four train workloads) did not finish in six more CPU-minutes (``baselines/README.md``).
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

DEFAULT_OVERRIDES = {"workload.num_requests": 60}
SUITE_SCENARIOS = ("capped-knee", "capped-overload")
"""Suite mode's training scenarios: load 1.0 and 2.5 of the measured capacity."""
SUITE_SOURCES = ("sharegpt", "azure-conv")
"""Suite mode's training sources: the two Select sources with a train split."""
SUBMISSION = Path(__file__).resolve().parents[1] / "leaderboards" / "select" / "maskable-ppo"


def main(argv: list[str] | None = None) -> dict:
    """Train, evaluate, write the result JSON."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    env_id = "llmsched/Select-ChatSharegptOverload-v0"
    p = parser(__doc__.splitlines()[0], env_id, {})
    add_suite_arguments(p, "Select", SUITE_SCENARIOS, SUITE_SOURCES, SUBMISSION)
    p.add_argument("--hidden", type=int, default=32, help="suite mode: units per hidden layer")
    args = p.parse_args(argv)
    if args.suite is not None:
        return train_sb3_on_suite(
            args,
            argv,
            algorithm=MaskablePPO,
            citation="Huang & Ontañón, 2020, arXiv:2006.14171",
            task="Select",
            script="maskable_ppo_select.py",
        )
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
