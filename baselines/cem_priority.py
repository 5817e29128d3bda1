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
from _common import evaluate, parser, write  # noqa: E402

import llmsched_gym.envs as E  # noqa: E402 - registers the ids
from llmsched_gym.envs.observation import REQUEST_FEATURES  # noqa: E402

DEFAULT_OVERRIDES = {"workload.num_requests": 200}


class LinearRowScorer:
    """Observation -> action for the Priority task: ``tanh(requests @ weights)`` per row.

    The same weights score every row, so the ranking does not depend on where a request sits
    in the table; invalid (padding) rows get scores too, which the environment ignores.
    """

    def __init__(self, weights: Sequence[float]) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(REQUEST_FEATURES),) or not np.all(np.isfinite(w)):
            raise ValueError(
                f"weights must be {len(REQUEST_FEATURES)} finite numbers (one per column of "
                f"REQUEST_FEATURES), got shape {w.shape}"
            )
        self.weights = w

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """The action: one score in (-1, 1) per row of the ``requests`` table."""
        table = obs["requests"]
        if table.shape[-1] != len(self.weights):
            raise ValueError(
                f"observation rows have {table.shape[-1]} columns, the scorer {len(self.weights)}"
                " (oracle environments add a column: train on the same environment)"
            )
        return np.tanh(table @ self.weights).astype(np.float32)

    def as_dict(self) -> dict[str, float]:
        """The weights by feature name."""
        return {name: float(x) for name, x in zip(REQUEST_FEATURES, self.weights, strict=True)}


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
    args = p.parse_args(argv)
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
