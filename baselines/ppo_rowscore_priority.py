r"""PPO with the permutation-invariant row-scoring policy on the Priority task, train split only.

PPO (Schulman et al. 2017, arXiv 1707.06347) from stable-baselines3 with
``llmsched_gym.envs.sb3_policies.RowScorePolicy``: every visible request is scored by the same
network (a DeepSets encoder), the scores are the Gaussian's means, one log std is shared by all
rows. It trains on the llmsched-v1 suite's Priority **train** workloads of the ``chat-overload``
scenario and the ``sharegpt`` source (the first 200 train seeds, in order; each checked to be of
the train split), rewards normalised by ``VecNormalize`` (the environment's per-decision latency
reward, whose episode sum is minus the total latency), and is evaluated against ``vllm-v1`` on
every Priority test workload (21: three load levels x four sources) through the leaderboard
harness. Prints one JSON line: the settings, wall time, the geometric-mean ratio over all test
workloads (``geo``) and per workload (``per``; > 1 is better than vLLM).

    python baselines/ppo_rowscore_priority.py --timesteps 150000 --gamma 0.999 --log-std -2 \\
        --seed 0 >> baselines/results/ppo_rowscore_priority.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from llmsched_gym.envs.adapters import AgentPolicy
from llmsched_gym.envs.priority_v0 import PriorityEnv
from llmsched_gym.envs.sb3_policies import RowScorePolicy
from llmsched_gym.leaderboard.run import run_workload, simulate_workload
from llmsched_gym.leaderboard.suite import load_suite


class TrainCycle(gym.Wrapper):
    """Resets onto the given train workloads in a fixed cycle."""

    def __init__(self, workloads: list) -> None:
        self.workloads, self.i = workloads, 0
        scenario = workloads[0].scenario()
        super().__init__(PriorityEnv(scenario=scenario))
        self.base_seed = scenario.seed

    def reset(self, *, seed=None, options=None):  # noqa: D102 - gym.Wrapper's
        w = self.workloads[self.i % len(self.workloads)]
        self.i += 1
        return self.env.reset(seed=w.seed - self.base_seed)


def main() -> None:
    """Train, evaluate on the test split, print the JSON line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timesteps", type=int, default=150_000)
    p.add_argument("--gamma", type=float, default=0.999)
    p.add_argument("--log-std", type=float, default=-2.0, help="initial log std of the scores")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--n-steps", type=int, default=2048)
    p.add_argument("--no-norm", action="store_true", help="do not normalise rewards")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    suite = load_suite()
    train = [
        w for w in suite.train_workloads("Priority", "chat-overload") if w.source == "sharegpt"
    ][:200]
    assert all(w.split == "train" for w in train)
    venv = DummyVecEnv([lambda: TrainCycle(train)])
    if not args.no_norm:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=args.gamma)
    model = PPO(
        RowScorePolicy, venv, n_steps=args.n_steps, batch_size=256, gamma=args.gamma,
        gae_lambda=0.95, learning_rate=args.lr, seed=args.seed, device="cpu", verbose=0,
        policy_kwargs={"log_std_init": args.log_std},
    )  # fmt: skip
    t0 = time.time()
    model.learn(args.timesteps)
    wall = time.time() - t0
    # The model just trained is this script's own: it runs in this process (as the harness
    # would run it, through AgentPolicy), not in the sandbox a submission's code runs in.
    task = suite.task("Priority")
    per = []
    for w in suite.workloads("test", tasks=["Priority"]):
        agent = AgentPolicy(PriorityEnv, model, name="ppo-rowscore")
        mine = float(simulate_workload(task, agent, w).summary[w.metric])
        ref = run_workload(suite, "vllm-v1", w)
        per.append((w.id, ref["value"] / mine))
    geo = float(np.exp(np.mean(np.log([r for _, r in per]))))
    print(json.dumps({"argv": sys.argv[1:], "wall_s": round(wall, 1), "geo": geo, "per": per}))


if __name__ == "__main__":
    main()
