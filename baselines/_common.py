"""Shared helpers of the training recipes: argument parsing, evaluation, result JSON."""

from __future__ import annotations

import argparse
import json
import math
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


def write_sb3_submission(
    folder: Path, model: dict[str, Any], *, method: str, task: str, suite: str, training: str
) -> None:
    """``submission.yaml`` of an SB3 agent whose weights are in ``folder``: ``policy: model``.

    ``model``: the ``model:`` spec of the weights (``weights.write_weights`` returns it), from
    which the harness rebuilds the network; no pickled object and no code ship.
    """
    import yaml

    from llmsched_gym.leaderboard.weights import MODEL_POLICY

    meta = {
        "suite": suite,
        "task": task,
        "method": method,
        "policy": MODEL_POLICY,
        "model": dict(model),
        "oracle": False,
        "paper": None,
        "training": training,
    }
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=1000))


def train_sb3_on_suite(
    args: Any,
    argv: list[str] | None,
    *,
    algorithm: type,
    citation: str,
    task: str,
    script: str,
) -> dict[str, Any]:
    """Suite mode of the SB3 recipes: train on a suite's train workloads, write a submission.

    Two ``TrainWorkloadEnv`` environments reset onto the train workloads of ``args.scenarios``
    x ``args.sources`` in a fixed cycle (each checked to be of the train split); ``algorithm``
    (PPO or MaskablePPO) trains a ``MultiInputPolicy`` with two hidden layers of
    ``args.hidden`` units for ``args.timesteps`` steps on one torch thread. Writes
    ``policy.pth``, ``submission.yaml`` and ``train.json`` (command, seed, steps,
    wall and CPU time, seeds used, and the score against vllm-v1 on the next unseen train seeds)
    to ``args.submission``; ``results.csv`` is the harness's and the README is written by hand.
    """
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv

    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import (
        TrainWorkloadEnv,
        TrainWorkloads,
        env_class,
        reset_seed,
    )

    torch.set_num_threads(1)  # a tiny MLP: one thread is fastest and leaves the other core free
    started, cpu_started = time.perf_counter(), time.process_time()
    suite = load_suite(args.suite)
    workloads = TrainWorkloads(suite, task, args.scenarios, args.sources)
    envs = [TrainWorkloadEnv(workloads, start=i, stride=2) for i in range(2)]
    venv = DummyVecEnv([lambda e=e: e for e in envs])
    venv.seed(args.seed)
    arch = [args.hidden, args.hidden]
    n_steps, batch_size = 512, 128
    model = algorithm(
        "MultiInputPolicy",
        venv,
        n_steps=n_steps,
        batch_size=batch_size,
        seed=args.seed,
        verbose=0,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": arch, "vf": arch}},
    )
    quiet_logger(model)
    progress = progress_callback(algorithm.__name__, args.timesteps)
    model.learn(total_timesteps=args.timesteps, callback=progress)
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    folder = args.submission
    folder.mkdir(parents=True, exist_ok=True)
    # Each group's seeds are a prefix of its train seeds 0, 1, 2, ...: the two environments run
    # through the cycle at their own pace, so the group with shorter episodes gets further.
    per_group: dict[str, set[int]] = {f"{sc}/{src}": set() for sc, src in workloads.groups}
    for w in (w for e in envs for w in e.seen):
        per_group[f"{w.scenario_id}/{w.source}"].add(w.seed)
    seed_ranges = {g: f"{min(s)}-{max(s)}" if s else "none" for g, s in per_group.items()}
    # The next unseen train seeds: a check on the train distribution (the held-out score is the
    # harness's), as the geometric mean of vllm-v1's total latency over the model's.
    last = max(max(s, default=0) for s in per_group.values())
    check = workloads.batch(last + 1)  # batch i is train seed i of each group (per_group 1)
    logs = []
    for w in check:
        sc = w.scenario()
        task_env = env_class(task)(scenario=sc)
        seed = reset_seed(w, sc)
        mine = E.rollout(task_env, model, seed=seed)["return"]
        ref = E.rollout(task_env, E.PolicyAgent(make_policy("vllm-v1")), seed=seed)["return"]
        logs.append(math.log(ref / mine))
    name = algorithm.__name__
    result = {
        "algorithm": f"{name} ({citation}), SB3 MultiInputPolicy",
        "suite": suite.version,
        "task": task,
        "command": command_line(script, argv),
        "seed": args.seed,
        "timesteps": int(model.num_timesteps),
        "episodes": sum(len(e.seen) for e in envs),
        "net_arch": arch,
        "n_envs": len(envs),
        "n_steps": n_steps,
        "batch_size": batch_size,
        "train_seeds": seed_ranges,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "train_check": {
            "workloads": [w.id for w in check],
            "score_vs_vllm_v1": round(math.exp(sum(logs) / len(logs)), 4),
        },
    }
    from llmsched_gym.leaderboard.weights import write_weights

    write_sb3_submission(
        folder,
        write_weights(folder, model.policy, task),
        method=folder.name,
        task=task,
        suite=suite.version,
        training=(
            f"{name} ({citation}; SB3 MultiInputPolicy, {arch} MLPs), "
            f"{result['timesteps']:,} steps on {suite.version} {task} train workloads only: "
            + ", ".join(f"{g} seeds {r}" for g, r in seed_ranges.items())
        ),
    )
    result["model_bytes"] = (folder / "policy.pth").stat().st_size
    (folder / "train.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, indent=2))
    return result
