"""PPO (Schulman et al., 2017, arXiv:1707.06347) on ``llmsched/Priority-ChatSharegptOverload-v0``.

The agent scores the top-K visible requests each decision step; the reward is minus the latency
area (episode return = -0.01 * total e2e seconds). The scenario is overloaded on purpose (ShareGPT
at 2.5x the instance's capacity): a queue builds, so the order matters (on the chat scenarios at
their own rates everything fits and every policy, random included, gets the same return).
Evaluated on five held-out workload seeds against vllm-v1 and a random agent.

    python baselines/ppo_priority.py --timesteps 20000 --out baselines/results/ppo_priority.json

**Suite mode** (``--suite llmsched-v1``) trains for the benchmark's leaderboard on the suite's
Priority train workloads only and writes a submission folder (``--submission``, default
``leaderboards/priority/ppo``): ``model.zip`` (a small ``MultiInputPolicy``, two hidden layers
of ``--hidden`` units for the actor and the critic), ``policy.py``, ``submission.yaml`` and
``train.json`` (command, seed, steps, wall and CPU time; the README is written by hand). Two
environments (``TrainWorkloadEnv``) reset onto the train workloads of the ``chat-knee`` and
``chat-overload`` scenarios and the ``sharegpt`` and ``azure-conv`` sources in a fixed cycle
(``TrainWorkloads.cycle``: train seed 0 of each of the four groups, then seed 1, ...;
environment ``i`` takes every second one from the ``i``-th);
every workload is checked to be of the train split, so no test workload (seeds 1000+, the
second half hour of the Azure trace, the azure-code and arxiv traces) is ever run::

    python baselines/ppo_priority.py --suite llmsched-v1 --timesteps 100000
    llmsched-gym leaderboard evaluate leaderboards/priority/ppo --task Priority --update
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
from _common import (  # noqa: E402
    add_suite_arguments,
    command_line,
    evaluate,
    parser,
    quiet_logger,
    write,
)

import llmsched_gym.envs  # noqa: E402,F401 - registers the ids

DEFAULT_OVERRIDES = {"workload.num_requests": 200}
SUITE_SCENARIOS = ("chat-knee", "chat-overload")
"""Suite mode's training scenarios (the same as ``cem_priority.py``'s)."""
SUITE_SOURCES = ("sharegpt", "azure-conv")
"""Suite mode's training sources: the two Priority sources with a train split."""
SUBMISSION = Path(__file__).resolve().parents[1] / "leaderboards" / "priority" / "ppo"
POLICY_PY = '''"""The ppo submission: an SB3 PPO policy (Schulman et al., 2017, arXiv:1707.06347).

``make`` loads ``model.zip`` next to this file, written by
``python baselines/ppo_priority.py --suite llmsched-v1``, on the CPU. The harness calls the
model's ``predict`` with ``deterministic=True`` (the mean action), wrapped as
``AgentPolicy(PriorityEnv, model)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make(task: str = "Priority") -> Any:
    """The trained PPO model for the Priority task (the only task it was trained for)."""
    if task != "Priority":
        raise ValueError(f"ppo is a Priority agent; got task {task!r}")
    import torch  # optional heavy dependencies (the [rl] extra)
    from stable_baselines3 import PPO

    torch.set_num_threads(1)
    return PPO.load(Path(__file__).with_name("model.zip"), device="cpu")
'''


def train_on_suite(args: Any, argv: list[str] | None) -> dict[str, Any]:
    """Suite mode: PPO on the suite's Priority train workloads; writes the submission folder."""
    import torch
    import yaml
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    import llmsched_gym.envs as E
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import (
        TrainWorkloadEnv,
        TrainWorkloads,
        env_class,
        reset_seed,
    )
    from llmsched_gym.policies.registry import make_policy

    torch.set_num_threads(1)  # a tiny MLP: one thread is fastest and leaves the other core free
    started, cpu_started = time.perf_counter(), time.process_time()
    suite = load_suite(args.suite)
    workloads = TrainWorkloads(suite, "Priority", args.scenarios, args.sources)
    envs = [TrainWorkloadEnv(workloads, start=i, stride=2) for i in range(2)]
    venv = DummyVecEnv([lambda e=e: e for e in envs])
    venv.seed(args.seed)
    arch = [args.hidden, args.hidden]
    model = PPO(
        "MultiInputPolicy",
        venv,
        n_steps=512,
        batch_size=128,
        seed=args.seed,
        verbose=0,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": arch, "vf": arch}},
    )
    quiet_logger(model)
    model.learn(total_timesteps=args.timesteps)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    episodes = sum(len(e.seen) for e in envs)
    folder = args.submission
    folder.mkdir(parents=True, exist_ok=True)
    model.save(folder / "model.zip")
    # Next unseen train seeds: a check on the train distribution (the held-out score is the
    # harness's). Ratio of vllm-v1's total latency to the model's, geometric mean.
    seen = sorted({w.seed for e in envs for w in e.seen})
    check = workloads.batch(seen[-1] + 1)  # batch i is train seed i of each group (per_group 1)
    logs = []
    for w in check:
        sc = w.scenario()
        task_env = env_class("Priority")(scenario=sc)
        seed = reset_seed(w, sc)
        mine = E.rollout(task_env, model, seed=seed)["return"]
        ref = E.rollout(task_env, E.PolicyAgent(make_policy("vllm-v1")), seed=seed)["return"]
        logs.append(math.log(ref / mine))
    command = command_line("ppo_priority.py", argv)
    # Each group's seeds are a prefix of its train seeds 0, 1, 2, ...: the two environments run
    # through the cycle at their own pace, so the group with shorter episodes gets further.
    per_group: dict[str, set[int]] = {f"{sc}/{src}": set() for sc, src in workloads.groups}
    for w in (w for e in envs for w in e.seen):
        per_group[f"{w.scenario_id}/{w.source}"].add(w.seed)
    seed_ranges = {g: f"{min(s)}-{max(s)}" for g, s in per_group.items()}
    result = {
        "algorithm": "PPO (Schulman et al. 2017, arXiv 1707.06347), SB3 MultiInputPolicy",
        "suite": suite.version,
        "task": "Priority",
        "command": command,
        "seed": args.seed,
        "timesteps": int(model.num_timesteps),
        "episodes": episodes,
        "net_arch": arch,
        "n_envs": 2,
        "n_steps": 512,
        "batch_size": 128,
        "train_seeds": seed_ranges,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "model_bytes": (folder / "model.zip").stat().st_size,
        "train_check": {
            "workloads": [w.id for w in check],
            "score_vs_vllm_v1": round(math.exp(sum(logs) / len(logs)), 4),
        },
    }
    (folder / "train.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (folder / "policy.py").write_text(POLICY_PY)
    meta = {
        "suite": suite.version,
        "task": "Priority",
        "method": folder.name,
        "policy": "policy.py:make",
        "oracle": False,
        "paper": None,
        "training": (
            f"PPO (Schulman et al. 2017, SB3 MultiInputPolicy, {arch} MLPs), "
            f"{result['timesteps']:,} steps on {suite.version} Priority train workloads only: "
            + ", ".join(f"{g} seeds {r}" for g, r in seed_ranges.items())
        ),
    }
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=1000))
    print(json.dumps(result, indent=2))
    return result


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
        return train_on_suite(args, argv)
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
    model.learn(total_timesteps=args.timesteps)
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
