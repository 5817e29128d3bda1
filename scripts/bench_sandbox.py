"""Benchmark: a submission's agent in its sandbox against the same agent in this process.

Runs one workload of the submission's task with the agent built in this process (the harness
before the sandbox: ``AgentPolicy`` around the factory's agent) and in its sandbox
(``run_workload``'s path: ``SandboxedAgent``), alternating, ``--repeats`` times each, and prints
wall and CPU time (this process plus its reaped children) per engine step and per agent decision.
Both runs must give the same summary. Only for trusted folders: the in-process run imports the
submission's code here. Figures go into BENCHMARKS.md.

    .venv/bin/python scripts/bench_sandbox.py leaderboards/priority/cem-linear --repeats 3
    .venv/bin/python scripts/bench_sandbox.py leaderboards/priority/ppo --trust-pickle
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import resource
import statistics
import time

from llmsched_gym.envs.adapters import AgentPolicy
from llmsched_gym.leaderboard.policy import resolve_policy
from llmsched_gym.leaderboard.run import simulate_workload
from llmsched_gym.leaderboard.sandbox import SandboxLimits, close_policy
from llmsched_gym.leaderboard.submission import load_submission
from llmsched_gym.leaderboard.suite import TASK_ENVS, load_suite


class Counted:
    """Counts the decisions an agent policy asks for."""

    def __init__(self, agent: object) -> None:
        self.agent, self.calls = agent, 0
        self.top_k = getattr(agent, "top_k", 16)

    def predict(self, obs, deterministic=True, action_masks=None):  # noqa: D102
        self.calls += 1
        predict = getattr(self.agent, "predict", None)
        if predict is None:
            return self.agent(obs), None
        return predict(obs, deterministic=deterministic)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    """Print one line per run and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a submission folder with a file entry point")
    parser.add_argument("--workload", type=int, default=1, help="index in the quick subset")
    parser.add_argument("--repeats", type=int, default=3, help="alternating pairs")
    parser.add_argument("--trust-pickle", action="store_true", help="as leaderboard evaluate's")
    args = parser.parse_args()
    suite = load_suite()
    sub = load_submission(args.folder)
    task = suite.task(sub.task)
    w = suite.workloads("test", tasks=[task.name], quick=True)[args.workload]
    ref = resolve_policy(args.folder, task)
    path, _, attr = ref.entry.rpartition(":")
    spec = importlib.util.spec_from_file_location("_bench_submission", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module_name, _, cls = TASK_ENVS[task.name].partition(":")
    env_class = getattr(importlib.import_module(module_name), cls)
    print(f"{sub.method} on {w.id}")
    runs: dict[str, list[tuple[float, float, int, float]]] = {"in-process": [], "sandbox": []}
    decisions = 0  # the same in both runs (the rows are): counted in this process
    for _ in range(args.repeats):
        for how in runs:
            wall0, cpu0 = time.perf_counter(), _cpu()
            if how == "in-process":
                agent = Counted(getattr(module, attr)(task=task.name))
                policy = AgentPolicy(env_class, agent, top_k=agent.top_k, name=sub.method)
            else:
                policy = ref.build(
                    task, w.seed, w, limits=SandboxLimits.of(suite), trust_pickle=args.trust_pickle
                )
            built = time.perf_counter() - wall0
            try:
                result = simulate_workload(task, policy, w)
            finally:
                close_policy(policy)
            wall, cpu = time.perf_counter() - wall0, _cpu() - cpu0
            steps = int(result.summary["num_steps"])
            if how == "in-process":
                decisions = agent.calls
            runs[how].append((wall, cpu, steps, built))
            print(
                f"  {how:<10} wall {wall:7.3f} s (build {built:.3f} s)  cpu {cpu:7.3f} s  "
                f"steps {steps}  "
                f"decisions {decisions}  {result.summary[w.metric]!r}"
            )
    for how, rs in runs.items():
        wall = statistics.median(r[0] for r in rs)
        cpu = statistics.median(r[1] for r in rs)
        steps = rs[0][2]
        built = statistics.median(r[3] for r in rs)
        print(
            f"{how:<10} median wall {wall:.3f} s (build {built:.3f} s; {wall / steps * 1e6:.1f} "
            f"us/step, {(wall - built) / steps * 1e6:.1f} after build), cpu "
            f"{cpu:.3f} s ({cpu / steps * 1e6:.1f} us/step, "
            f"{cpu / decisions * 1e6:.1f} us/decision)"
        )


if __name__ == "__main__":
    main()
