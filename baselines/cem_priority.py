"""Noisy cross-entropy method over a linear row scorer on the Priority task.

Environment: ``llmsched/Priority-ChatSharegptOverload-v0``. A direct policy search: the noisy
cross-entropy method of Szita & Lőrincz (2006, "Learning Tetris using the noisy cross-entropy
method"). The agent scores each visible request with the same weights,
``score_k = tanh(w · requests[k])``, one weight per column of ``REQUEST_FEATURES``. The global
features are the same for every row, so they cannot change the order and are left out.

Each iteration draws ``--population`` weight vectors from a diagonal Gaussian, runs each one
deterministically on the same ``--episodes`` training workloads (common random numbers), and
refits the Gaussian to the best ``--elite`` fraction. The standard deviation gets a ``--noise``
floor so that the search does not collapse early. Training stops once ``--timesteps``
environment steps are spent. The final mean is evaluated on the held-out seeds
against vllm-v1, a random agent and the hand-written shortest-first rule.

    python baselines/cem_priority.py --out baselines/results/cem_priority.json

The trained scorer is a plain callable, so it also runs as a scheduling policy::

    from llmsched_gym.envs import AgentPolicy, PriorityEnv
    policy = AgentPolicy(PriorityEnv, LinearRowScorer(weights))

**Suite mode** (``--suite llmsched-v2``) trains for the benchmark's leaderboard on the suite's
train workloads only (``Suite.train_workloads("Priority")``) and writes a submission folder
(``--submission``, default ``leaderboards/priority/cem-linear``). The training workloads are
those of the ``chat-knee`` and ``chat-overload`` scenarios (load 1.0 and 2.5 of the measured
capacity) and the ``sharegpt`` and ``azure-conv`` sources (``--scenarios``, ``--sources``):
iteration ``i`` runs every candidate on train seeds ``i * E .. i * E + E - 1`` of each of the
four (scenario, source) groups, ``E = --episodes`` (``TrainWorkloads.batch``), so the 16
candidates of an iteration share their workloads and no workload is seen twice in the first
1,000 / E iterations. ``chat-under`` is left out (every policy ties there) and so are the test
workloads (held-out seeds, the second half hour of the Azure trace, the azure-code and arxiv
traces): every workload is checked to be of the train split. A candidate's objective is the
leaderboard's own score on its batch: the mean over workloads of
``log(vllm-v1's total latency / the candidate's)``, the log of the geometric-mean ratio, with
vllm-v1's latency run once per workload. The search runs ``--iterations`` iterations (default
16)::

    python baselines/cem_priority.py --suite llmsched-v2
    llmsched-gym leaderboard evaluate leaderboards/priority/cem-linear --task Priority --update
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
from _common import add_suite_arguments, command_line, evaluate, parser, write  # noqa: E402

import llmsched_gym.envs as E  # noqa: E402 - registers the ids
from llmsched_gym.envs.observation import REQUEST_FEATURES  # noqa: E402
from llmsched_gym.leaderboard.agents import LinearRowScorer  # noqa: E402
from llmsched_gym.leaderboard.suite import Workload, load_suite  # noqa: E402
from llmsched_gym.leaderboard.training import (  # noqa: E402
    TrainWorkloads,
    check_train,
    env_class,
    reset_seed,
)
from llmsched_gym.policies.registry import make_policy  # noqa: E402

DEFAULT_OVERRIDES = {"workload.num_requests": 200}
SUITE_SCENARIOS = ("chat-knee", "chat-overload")
"""Suite mode's training scenarios: at capacity and 2.5x over it (under it, every policy ties)."""
SUITE_SOURCES = ("sharegpt", "azure-conv")
"""Suite mode's training sources: the two Priority sources with a train split."""
SUBMISSION = Path(__file__).resolve().parents[1] / "leaderboards" / "priority" / "cem-linear"


SHORTEST_FIRST = LinearRowScorer(
    [-1.0 if f in ("prompt_tokens", "tokens_to_compute") else 0.0 for f in REQUEST_FEATURES]
)
"""The hand-written rule of ``baselines/README.md`` (prompt plus tokens left, shortest first)."""


def cem(
    objective: Callable[[np.ndarray, int], float],
    dim: int,
    *,
    population: int,
    elite_frac: float,
    noise: float,
    budget: Callable[[], bool],
    rng: np.random.Generator,
    init_std: float = 1.0,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Maximise ``objective(x, iteration)`` with the noisy cross-entropy method.

    Each iteration samples ``population`` points from N(mean, diag(std²)), keeps the
    ``ceil(elite_frac * population)`` best (at least 2), and sets mean and std to theirs, the std
    plus ``noise`` (Szita & Lőrincz's constant noise). Runs while ``budget()`` is true, at least
    one iteration. Returns the final mean and one record per iteration.
    """
    if population < 2:
        raise ValueError(f"population must be >= 2, got {population}")
    if not 0.0 < elite_frac <= 1.0:
        raise ValueError(f"elite_frac must be in (0, 1], got {elite_frac}")
    if noise < 0.0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    n_elite = max(2, int(np.ceil(elite_frac * population)))
    mean, std = np.zeros(dim), np.full(dim, float(init_std))
    history: list[dict[str, Any]] = []
    it = 0
    while it == 0 or budget():
        xs = mean + std * rng.standard_normal((population, dim))
        scores = np.array([objective(x, it) for x in xs])
        elite = xs[np.argsort(scores, kind="stable")[-n_elite:]]
        mean, std = elite.mean(axis=0), elite.std(axis=0) + noise
        record = {
            "iteration": it,
            "best": float(scores.max()),
            "mean_score": float(scores.mean()),
            "mean": mean.tolist(),
        }
        history.append(record)
        if on_iteration is not None:
            on_iteration(record)
        it += 1
    return mean, history


class SuiteObjective:
    """The leaderboard's score of a scorer on a batch of train workloads, in log form.

    ``score(w, batch)`` is the mean over the batch of ``log(R_ref / R_w)``, where ``R`` is the
    episode return (-0.01 x the total end-to-end latency, so the ratio is vllm-v1's total
    latency over the candidate's: the leaderboard's ``e2e_s_mean`` ratio, all requests
    finishing). That is the log of the geometric-mean score the leaderboard ranks by. vllm-v1's
    return is computed once per workload. Environment steps are counted in ``steps``.
    """

    def __init__(self) -> None:
        self.envs: dict[tuple[str, str], Any] = {}
        self.reference: dict[str, float] = {}
        self.steps = 0

    def _run(self, agent: Any, w: Workload) -> float:
        check_train(w)
        key = (w.scenario_id, w.source)
        if key not in self.envs:
            self.envs[key] = env_class(w.task)(scenario=w.scenario())
        env = self.envs[key]
        out = E.rollout(env, agent, seed=reset_seed(w, env.scenario))
        self.steps += out["steps"]
        return out["return"]

    def reference_return(self, w: Workload) -> float:
        """vllm-v1's return on ``w`` (cached)."""
        if w.id not in self.reference:
            self.reference[w.id] = self._run(E.PolicyAgent(make_policy("vllm-v1")), w)
        return self.reference[w.id]

    def __call__(self, weights: np.ndarray, batch: Sequence[Workload]) -> float:
        """Mean log ratio of vllm-v1's latency to the scorer's over ``batch`` (higher is better)."""
        agent = LinearRowScorer(weights)
        logs = [np.log(self.reference_return(w) / self._run(agent, w)) for w in batch]
        return float(np.mean(logs))


def train_on_suite(args: Any, argv: list[str] | None) -> dict[str, Any]:
    """Suite mode: CEM on the suite's Priority train workloads; writes the submission folder."""
    from tqdm import tqdm

    started, cpu_started = time.perf_counter(), time.process_time()
    suite = load_suite(args.suite)
    workloads = TrainWorkloads(suite, "Priority", args.scenarios, args.sources, args.episodes)
    objective = SuiteObjective()
    bar = tqdm(total=args.iterations, unit="it", desc="CEM", leave=False)
    done: list[dict[str, Any]] = []

    def progress(record: dict[str, Any]) -> None:
        done.append(record)
        bar.update(1)
        bar.set_postfix(best=f"{record['best']:.3f}", mean=f"{record['mean_score']:.3f}")

    # Every candidate of iteration ``it`` runs on batch ``it`` (common random numbers).
    mean, history = cem(
        lambda w, it: objective(w, workloads.batch(it)),
        len(REQUEST_FEATURES),
        population=args.population,
        elite_frac=args.elite,
        noise=args.noise,
        budget=lambda: len(done) < args.iterations,
        rng=np.random.default_rng(args.seed),
        on_iteration=progress,
    )
    bar.close()
    train_steps = objective.steps
    wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    # The next batch of train seeds, unseen during the search: a check on the train distribution
    # (the held-out score comes from the harness, on the test workloads).
    check = workloads.batch(args.iterations)
    check_score = float(np.exp(objective(mean, check)))
    trained_on = sorted({w.id.rsplit("/", 1)[0] for it in range(args.iterations)
                         for w in workloads.batch(it)})  # fmt: skip
    seeds_used = sorted({w.seed for it in range(args.iterations) for w in workloads.batch(it)})
    command = command_line("cem_priority.py", argv)
    result = {
        "algorithm": "CEM (noisy cross-entropy method, Szita & Lorincz 2006), linear row scorer",
        "suite": suite.version,
        "task": "Priority",
        "command": command,
        "seed": args.seed,
        "iterations": len(history),
        "population": args.population,
        "elite_frac": args.elite,
        "noise": args.noise,
        "episodes_per_group": args.episodes,
        "train_groups": trained_on,
        "train_seeds": seeds_used,
        "env_steps": train_steps,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "train_check": {
            "workloads": [w.id for w in check],
            "score_vs_vllm_v1": round(check_score, 4),
        },
        "weights": LinearRowScorer(mean).as_dict(),
        "history": [{k: v for k, v in h.items() if k != "mean"} for h in history],
    }
    write_submission(args.submission, result, workloads.describe())
    print(json.dumps({k: v for k, v in result.items() if k != "history"}, indent=2))
    return result


POLICY_PY = '''"""The cem-linear submission: a linear row scorer learned by noisy cross-entropy.

``make`` loads ``weights.json`` next to this file, written by
``python baselines/cem_priority.py --suite llmsched-v2`` (Szita & Lőrincz, 2006, "Learning Tetris
using the noisy cross-entropy method", Neural Computation 18(12)). The scorer is a plain numpy
callable, observation -> action, which the harness wraps as ``AgentPolicy(PriorityEnv, agent)``.
"""

from __future__ import annotations

from pathlib import Path

from llmsched_gym.leaderboard.agents import LinearRowScorer


def make(task: str = "Priority") -> LinearRowScorer:
    """The trained scorer for the Priority task (the only task it was trained for)."""
    if task != "Priority":
        raise ValueError(f"cem-linear is a Priority agent; got task {task!r}")
    return LinearRowScorer.load(Path(__file__).with_name("weights.json"))
'''


def write_submission(folder: Path, result: dict[str, Any], trained_on: str) -> None:
    """Write ``weights.json``, ``policy.py``, ``submission.yaml`` and ``README.md`` to ``folder``.

    ``results.csv`` is the harness's: ``llmsched-gym leaderboard evaluate FOLDER --update``.
    """
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "weights.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (folder / "policy.py").write_text(POLICY_PY)
    seeds = result["train_seeds"]
    seed_text = (
        f"{seeds[0]}-{seeds[-1]}"
        if seeds == list(range(seeds[0], seeds[-1] + 1))
        else (", ".join(map(str, seeds)))
    )
    groups = ", ".join(g.split("/", 1)[1].rsplit("/", 1)[0] for g in result["train_groups"])
    training = (
        f"CEM (noisy cross-entropy, Szita & Lorincz 2006) over a linear row scorer, "
        f"{result['iterations']} iterations x {result['population']} candidates, on "
        f"{result['suite']} Priority train workloads only: {groups}, train seeds {seed_text}"
    )
    meta = {
        "suite": result["suite"],
        "task": "Priority",
        "method": folder.name,
        "policy": "policy.py:make",
        "oracle": False,
        "paper": None,
        "training": training,
    }
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, width=1000))
    rows = sorted(result["weights"].items(), key=lambda kv: -abs(kv[1]))
    table = "\n".join(f"| `{name}` | {w:+.3f} |" for name, w in rows)
    minutes = result["wall_s"] / 60
    readme = f"""# Priority: {folder.name}

A learned baseline of the {result["suite"]} suite: a linear row scorer, `score_k = tanh(w ·
requests[k])` with one weight per request feature shared by every row of the top-K table,
found by the noisy cross-entropy method (Szita & Lőrincz, 2006, "Learning Tetris using the
noisy cross-entropy method", Neural Computation 18(12)). `policy.py:make` loads the weights
from `weights.json`; the harness wraps the scorer as `AgentPolicy(PriorityEnv, agent)`.

## Training: train workloads only

{trained_on}: the {result["suite"]} Priority scenarios `chat-knee` (load 1.0) and
`chat-overload` (load 2.5) with the `sharegpt` and `azure-conv` sources, train seeds
{seed_text} of each (azure-conv: the trace's first half hour). Every workload is checked to
be of the train split; no test workload (seeds 1000+, the second half hour, the azure-code and
arxiv traces) and no `chat-under` workload was run. Iteration `i` runs all
{result["population"]} candidates on the same {result["episodes_per_group"]} train seed(s) of
each of the four groups (seeds `{result["episodes_per_group"]}i` onwards); a candidate's
objective is the leaderboard's score on them (the mean log of vllm-v1's total latency over
the candidate's). The elite is the best {result["elite_frac"]:.0%}, the noise floor
{result["noise"]}, the search starts at w = 0 with std 1 and the RNG seed is {result["seed"]}.

```bash
{result["command"]}
llmsched-gym leaderboard evaluate leaderboards/priority/{folder.name} --task Priority --update
```

{result["iterations"]} iterations, {result["env_steps"]:,} environment steps, {minutes:.1f} min wall
({result["cpu_s"]:.0f} CPU-s) on this project's 2-core machine, shared with other jobs (an upper
bound). On the next unseen batch of train seeds (`train_check` in `weights.json`) the scorer's
score against vllm-v1 is {result["train_check"]["score_vs_vllm_v1"]:.3f}.

## Learned weights

Features are the observation's normalised request columns (`REQUEST_FEATURES`).

| feature | weight |
|---|---:|
{table}

## Results

`results.csv` (one row per held-out test workload), written by the evaluate command above and
re-checked by `llmsched-gym leaderboard validate leaderboards/priority/{folder.name}`; the
score is on `leaderboards/priority/README.md`.
"""
    (folder / "README.md").write_text(readme)


def main(argv: list[str] | None = None) -> dict:
    """Train, evaluate, write the result JSON."""
    from tqdm import tqdm

    env_id = "llmsched/Priority-ChatSharegptOverload-v0"
    p = parser(__doc__.splitlines()[0], env_id, {})
    p.set_defaults(timesteps=600_000)
    p.add_argument("--population", type=int, default=16, help="candidates per iteration")
    p.add_argument("--elite", type=float, default=0.25, help="fraction kept per iteration")
    p.add_argument("--noise", type=float, default=0.05, help="std floor added each iteration")
    p.add_argument("--episodes", type=int, default=2, help="training workloads per candidate")
    p.add_argument(
        "--train-seeds", type=int, default=4, help="training workloads: seeds SEED..SEED+N-1"
    )
    add_suite_arguments(p, "Priority", SUITE_SCENARIOS, SUITE_SOURCES, SUBMISSION)
    p.add_argument(
        "--iterations", type=int, default=16, help="suite mode: CEM iterations (the budget)"
    )
    args = p.parse_args(argv)
    if args.suite is not None:
        if args.iterations < 1 or args.episodes < 1 or args.population < 2:
            p.error("--iterations and --episodes must be >= 1, --population >= 2")
        return train_on_suite(args, argv)
    if args.episodes < 1 or args.train_seeds < 1 or args.timesteps < 1:
        p.error("--episodes, --train-seeds and --timesteps must be >= 1")
    overrides = json.loads(args.overrides) or DEFAULT_OVERRIDES
    started = time.perf_counter()
    env = gym.make(args.env_id, scenario_overrides=overrides)
    steps = 0

    def objective(w: np.ndarray, it: int) -> float:
        # Every candidate of an iteration sees the same workloads; they rotate between iterations.
        nonlocal steps
        total = 0.0
        for e in range(args.episodes):
            seed = args.seed + (it * args.episodes + e) % args.train_seeds
            out = E.rollout(env, LinearRowScorer(w), seed=seed)
            total += out["return"]
            steps += out["steps"]
        return total / args.episodes

    bar = tqdm(total=args.timesteps, unit="step", desc="CEM", leave=False)

    def progress(record: dict[str, Any]) -> None:
        bar.update(steps - bar.n)
        bar.set_postfix(best=f"{record['best']:.1f}", mean=f"{record['mean_score']:.1f}")

    mean, history = cem(
        objective,
        len(REQUEST_FEATURES),
        population=args.population,
        elite_frac=args.elite,
        noise=args.noise,
        budget=lambda: steps < args.timesteps,
        rng=np.random.default_rng(args.seed),
        on_iteration=progress,
    )
    bar.close()
    agent = LinearRowScorer(mean)
    result = evaluate(args.env_id, overrides, agent, args.seed, args.eval_seeds)
    for row in result["per_seed"]:
        row["return_shortest_first"] = E.rollout(env, SHORTEST_FIRST, seed=row["seed"])["return"]
    result["return_shortest_first"] = float(
        np.mean([r["return_shortest_first"] for r in result["per_seed"]])
    )
    result.update(
        {
            "algorithm": "CEM (noisy cross-entropy method, linear row scorer)",
            "env_id": args.env_id,
            "timesteps": steps,
            "iterations": len(history),
            "population": args.population,
            "elite_frac": args.elite,
            "noise": args.noise,
            "episodes_per_candidate": args.episodes,
            "train_seeds": [args.seed + i for i in range(args.train_seeds)],
            "seed": args.seed,
            "scenario_overrides": overrides,
            "weights": agent.as_dict(),
            "history": [{k: v for k, v in h.items() if k != "mean"} for h in history],
        }
    )
    return write(result, args.out, started)


if __name__ == "__main__":
    main()
