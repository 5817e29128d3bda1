r"""Independent learners on a cluster: the router, then the instances' knobs (shared policy).

The multi-agent baseline of ``ClusterParallelEnv`` (a PettingZoo ``ParallelEnv`` where the
router and every instance's batching knobs are agents sharing one team reward, minus the latency
accrued). Two rounds of independent learning (Tan, ICML 1993), each agent group driven by one SB3
model through ``AgentGroupVecEnv`` while the other agents are fixed:

1. the **router** learns with MaskablePPO and the permutation-invariant row scorer over
   instances, the instances at vLLM V1's own knobs (full budget and sequence cap);
2. the **instances** learn one shared knob policy with PPO (every instance is one member of the
   group: parameter sharing), the router fixed to round 1's model.

Train workloads: the llmsched-v1 Route task's ``chat4x-overload`` train seeds of the 4-instance
Azure conversation trace (checked to be of the train split); evaluation on its test workloads,
the first ``--max-requests`` arrivals of each, against round-robin and ``least-load:backlog``
with vLLM's knobs. Scores: geometric mean over the test workloads of least-load:backlog's total
latency over the configuration's (above 1 is better), with a 95% t interval.

    python baselines/independent_cluster.py --router-steps 20000 --knob-steps 20000

Writes ``router.zip``, ``knobs.zip``, ``results.csv`` (every configuration's team return per
test workload), ``summary.md`` and ``learning_curve.png`` under ``--out`` (default
``out/train/independent-cluster``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import progress_callback, quiet_logger  # noqa: E402

SCENARIO, SOURCE = "chat4x-overload", "azure-conv-4x"


def workloads(split: str, count: int) -> list[Any]:
    """The first ``count`` Route workloads of ``SCENARIO`` x ``SOURCE`` of ``split``."""
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import check_train

    suite = load_suite()
    pool = (
        suite.train_workloads("Route")
        if split == "train"
        else suite.workloads("test", tasks=["Route"])
    )
    chosen = [w for w in pool if w.scenario_id == SCENARIO and w.source == SOURCE][:count]
    if split == "train":
        chosen = [check_train(w) for w in chosen]
    return chosen


def make_env(workload: Any, max_requests: int) -> tuple[Any, int]:
    """The parallel env on ``workload``'s scenario and the reset seed that runs its own seed."""
    from llmsched_gym.envs.multi_agent import ClusterParallelEnv
    from llmsched_gym.leaderboard.training import reset_seed

    scenario = workload.scenario()
    env = ClusterParallelEnv(scenario, max_requests=max_requests)
    return env, reset_seed(workload, scenario)


def episode_return(env: Any, seed: int, actors: dict[str, Any]) -> float:
    """The team return of one episode with every agent acting by ``actors``."""
    obs, infos = env.reset(seed=seed)
    total = 0.0
    while env.agents:
        actions = {a: actors[a](obs[a], infos.get(a, {})) for a in env.agents}
        obs, rewards, _, _, infos = env.step(actions)
        total += rewards["router"]
    return total


def train_round(
    algorithm: type,
    policy: Any,
    group: list[str],
    fixed: dict,
    train: list,
    args: Any,
    label: str,
    steps: int,
) -> tuple[Any, list[float]]:
    """Train one group for ``steps`` joint steps on the train workloads (seeds in order)."""
    from llmsched_gym.envs.sb3_multi_agent import AgentGroupVecEnv
    from llmsched_gym.leaderboard.training import reset_seed

    env, _ = make_env(train[0], args.max_requests)
    seeds = [reset_seed(w, env.route_env.scenario) for w in train]
    fixed_here = {a: f(env) for a, f in fixed.items()}
    venv = AgentGroupVecEnv(env, group, fixed_here, seeds=seeds)
    model = algorithm(
        policy, venv, n_steps=args.n_steps, batch_size=128, gamma=0.995, seed=args.seed,
        device="cpu", verbose=0,
    )  # fmt: skip
    quiet_logger(model)
    total = steps * len(group)  # SB3 counts one step per group member
    model.learn(total, callback=progress_callback(label, total, stream=sys.stderr))
    return model, list(venv.episode_returns)


def main(argv: list[str] | None = None) -> int:
    """Train both rounds, evaluate every configuration, write the results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO

    from llmsched_gym.envs.sb3_multi_agent import default_knobs, model_actor, router_actor
    from llmsched_gym.envs.sb3_policies import MaskableRowScorePolicy
    from llmsched_gym.leaderboard.score import geometric_score

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--router-steps", type=int, default=20_000, help="round 1 router decisions")
    p.add_argument("--knob-steps", type=int, default=20_000, help="round 2 joint steps")
    p.add_argument("--max-requests", type=int, default=300, help="arrivals kept per workload")
    p.add_argument("--train-workloads", type=int, default=200, help="train seeds cycled")
    p.add_argument("--test-workloads", type=int, default=8, help="test workloads evaluated")
    p.add_argument("--n-steps", type=int, default=512, help="PPO rollout length")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out/train/independent-cluster"))
    args = p.parse_args(argv)
    for name in ("router_steps", "knob_steps", "max_requests", "train_workloads", "n_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    torch.set_num_threads(1)
    started = time.process_time()
    train, test = workloads("train", args.train_workloads), workloads("test", args.test_workloads)
    env0, _ = make_env(train[0], args.max_requests)
    instances = [a for a in env0.possible_agents if a != "router"]
    knobs = {a: (lambda _env: default_knobs) for a in instances}
    router, router_curve = train_round(
        MaskablePPO, MaskableRowScorePolicy, ["router"], knobs, train, args, "router",
        args.router_steps,
    )  # fmt: skip
    fixed_router = {"router": lambda _env: model_actor(router)}
    knob_model, knob_curve = train_round(
        PPO, "MultiInputPolicy", instances, fixed_router, train, args, "knobs", args.knob_steps
    )
    args.out.mkdir(parents=True, exist_ok=True)
    router.save(args.out / "router.zip")
    knob_model.save(args.out / "knobs.zip")

    def configuration(env: Any, name: str) -> dict[str, Any]:
        learned_knobs = model_actor(knob_model)
        routers = {
            "round-robin": router_actor(env, "round-robin"),
            "least-load:backlog": router_actor(env, "least-load:backlog"),
        }
        rt = routers.get(name.split(" + ")[0], model_actor(router))
        kb = learned_knobs if name.endswith("learned knobs") else default_knobs
        return {"router": rt, **{a: kb for a in instances}}

    names = [
        "round-robin + vLLM knobs",
        "least-load:backlog + vLLM knobs",
        "learned router + vLLM knobs",
        "learned router + learned knobs",
    ]
    rows = []
    for w in test:
        for name in names:
            env, seed = make_env(w, args.max_requests)
            ret = episode_return(env, seed, configuration(env, name))
            rows.append({"workload": w.id, "configuration": name, "return": ret})
    frame = pd.DataFrame(rows)
    frame.to_csv(args.out / "results.csv", index=False)
    ref = frame[frame.configuration == "least-load:backlog + vLLM knobs"].set_index("workload")
    lines = [
        f"# Independent learners on {SCENARIO} / {SOURCE} (first {args.max_requests} arrivals)",
        "",
        f"Router: {args.router_steps:,} decisions; knobs: {args.knob_steps:,} joint steps; seed "
        f"{args.seed}; {time.process_time() - started:.0f} CPU-s. Score: least-load:backlog's "
        f"total latency over the configuration's on {len(test)} test workloads (> 1 is better).",
        "",
        "| configuration | score [95% CI] |",
        "|---|---:|",
    ]
    for name in names:
        mine = frame[frame.configuration == name].set_index("workload")["return"]
        ratios = [ref.loc[w, "return"] / mine[w] for w in mine.index if mine[w] != 0]
        lines.append(f"| {name} | {geometric_score(ratios).text()} |")
    text = "\n".join(lines) + "\n"
    (args.out / "summary.md").write_text(text)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, curve, title in (
        (axes[0], router_curve, "round 1: router (MaskablePPO)"),
        (axes[1], knob_curve, "round 2: shared knobs (PPO)"),
    ):
        ax.plot(curve, ".", alpha=0.5)
        if curve:
            window = max(1, len(curve) // 10)
            ax.plot(pd.Series(curve).rolling(window, min_periods=1).mean(), "-")
        ax.set_xlabel("training episode")
        ax.set_ylabel("team return (train workloads)")
        ax.set_title(title)
    fig.suptitle(f"Independent learners on {SCENARIO} ({SOURCE}), seed {args.seed}")
    fig.tight_layout()
    fig.savefig(args.out / "learning_curve.png", dpi=110)
    plt.close(fig)
    print(text)
    print(f"wrote {args.out}/")
    return 0 if math.isfinite(frame["return"].sum()) else 1


if __name__ == "__main__":
    sys.exit(main())
