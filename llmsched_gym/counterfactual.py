r"""Counterfactual forks: copy a run mid-way, try another decision, and measure the regret.

``fork(obj)`` copies an engine, a cluster or an environment mid-run so that the copy continues
exactly as the original would (tested against stepping both), while sharing what never changes:
the workload's request and job specs (frozen), the scenario and the cost model. Planners and
counterfactual analyses fork at a decision and step the copies.

``counterfactual(...)`` runs a policy through an environment and, at sampled decision points,
forks the environment once per alternative action (every candidate, or ``k`` sampled ones), takes
that alternative, lets the policy decide everything after it until the episode ends (or for a
horizon of decisions), and compares the returns: the **regret** of the policy's choice is the
best alternative's return minus the return of its own choice (0: the policy chose as well as
any alternative; the returns are minus the latency every request accrued, so regret is in
request-seconds once divided by the reward scale).

    llmsched-gym counterfactual --scenario chat-azure-conv-4x-v0 --policy least-load:backlog \\
        --decision route --num-requests 200 --points 20
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError

__all__ = ["DECISIONS", "CounterfactualResult", "counterfactual", "fork"]

DECISIONS = {
    "route": "Route",
    "preempt": "Preempt",
    "batch": "Select",
    "batchtype": "BatchType",
}
"""``--decision`` -> the environment task whose action is that decision."""


def _shared(obj: Any) -> dict[int, Any]:
    """Memo entries that make ``deepcopy`` share the immutable parts of a run.

    Also copies the engines' long flat lists (KV block tables, inter-token samples) up front with
    ``list.copy``: their elements are immutable, and ``deepcopy`` would visit each one (most of
    a fork's time on a cluster with tens of thousands of blocks per instance).
    """
    memo: dict[int, Any] = {}
    if isinstance(obj, tuple):
        for x in obj:
            memo.update(_shared(x))
        return memo
    for name in ("items", "cost_model", "scenario", "config", "observation_space", "action_space"):
        value = getattr(obj, name, None)
        if value is None:
            continue
        memo[id(value)] = value
        if name == "items":
            for x in value:
                memo[id(x)] = x
                for stage in getattr(x, "stages", ()):  # a job's stages and request specs
                    memo[id(stage)] = stage
                    for spec in stage.requests:
                        memo[id(spec)] = spec
                        # Released requests get new specs (absolute arrival times) that keep
                        # these tuples: share them, as deepcopy would walk every token.
                        for ids in (
                            spec.prompt_token_ids,
                            spec.block_hashes,
                            spec.output_token_ids,
                        ):
                            memo[id(ids)] = ids
    for engine in _engines(obj):
        for value in (engine.config, engine.cost_model):
            memo[id(value)] = value
        # A request that finished (or was aborted) is never changed again: share it.
        for done in (engine.finished, engine.aborted):
            for req in done:
                memo[id(req)] = req
        pool = engine.kv.pool
        flat = (pool.ref_cnt, pool.block_hash, pool.tag, pool._next, pool._prev)
        for lst in (*flat, engine.itl_values, engine.itl_weights):
            memo[id(lst)] = lst[:]  # lists and the pool's int arrays
    return memo


def _engines(obj: Any) -> list[Any]:
    """The engines of an engine, an environment or a cluster (a Route environment's too)."""
    from llmsched_gym.core.engine import Engine

    if isinstance(obj, Engine):
        return [obj]
    engine = getattr(obj, "engine", None)
    if isinstance(engine, Engine):
        return [engine]
    cluster = getattr(obj, "cluster", obj)
    return [inst.engine for inst in getattr(cluster, "instances", None) or ()]


def fork(obj: Any) -> Any:
    """A copy of an engine, cluster or environment that continues exactly as ``obj`` would.

    Workload specs, scenario, cost model, engine configuration, the spaces and the requests that
    already finished are shared (they are never changed again); everything that changes as the
    run goes on (live requests, queues, KV blocks, clocks, records, random generators, reward
    ledgers) is copied. An environment forks at any decision,
    inside an engine step too (Preempt's victim choice, Select's picks). ``obj`` may be a tuple,
    copied together: an environment and an agent that keeps references into it (a router bound
    to the environment's cluster) stay bound in the copy.
    """
    from llmsched_gym.core.hidden import note

    note("fork")  # a copy plays out future arrivals and output lengths: an oracle's read
    return copy.deepcopy(obj, _shared(obj))


@dataclass
class CounterfactualResult:
    """One row per sampled decision point, and the run's settings."""

    table: Any
    """point, decision, time_s, policy_action, best_action, num_alternatives, regret,
    regret_request_s, returns (per action)."""
    scenario: str
    policy: str
    decision: str

    def summary(self) -> dict[str, float]:
        """Mean, p50, p90 and max regret (request-seconds) and the share of regretful choices."""
        r = self.table["regret_request_s"].to_numpy(np.float64)
        return {
            "points": len(r),
            "mean_regret_request_s": float(r.mean()) if len(r) else math.nan,
            "p50_regret_request_s": float(np.percentile(r, 50)) if len(r) else math.nan,
            "p90_regret_request_s": float(np.percentile(r, 90)) if len(r) else math.nan,
            "max_regret_request_s": float(r.max()) if len(r) else math.nan,
            "share_with_regret": float(np.mean(r > 1e-9)) if len(r) else math.nan,
        }


def _make_agent(decision: str, policy: str) -> Any:
    from llmsched_gym.envs.adapters import PolicyAgent, RouterAgent

    if decision == "route":
        return RouterAgent(policy)
    from llmsched_gym.policies.registry import make_policy

    return PolicyAgent(make_policy(policy))


def _alternatives(env: Any) -> list[int]:
    masks = getattr(env, "action_masks", None)
    if masks is not None:
        return [int(a) for a in np.flatnonzero(masks())]
    return list(range(int(env.action_space.n)))


def _rollout_return(env: Any, agent: Any, first: Any, horizon: int | None) -> float:
    """Return of taking ``first`` now, then ``agent``'s actions, to the end or the horizon."""
    total, n = 0.0, 0
    action = first
    while True:
        _, reward, term, trunc, _ = env.step(action)
        total += reward
        n += 1
        if term or trunc or (horizon is not None and n >= horizon):
            return total
        action = agent.act(env)


def counterfactual(
    scenario: str,
    policy: str,
    decision: str,
    *,
    overrides: dict[str, Any] | None = None,
    points: int = 20,
    alternatives: int | None = None,
    horizon: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> CounterfactualResult:
    """Regret of ``policy``'s ``decision`` at ``points`` decision points sampled (seeded).

    Args:
        scenario: A shipped scenario (a cluster one for ``route``).
        policy: The policy whose choices are judged (a router for ``route``, else a scheduler).
        decision: ``route``, ``preempt``, ``batch`` (the next pick of a batch) or ``batchtype``.
        overrides: Scenario overrides (e.g. ``{"workload.num_requests": 200}``).
        points: Decision points to examine, drawn uniformly from the policy's run.
        alternatives: Examine ``k`` sampled alternatives besides the policy's (None: all).
        horizon: Decisions each fork runs after its alternative (None: to the episode's end).
        seed: Seed of the workload and of the point and alternative samples.
        progress: Show a progress bar over the points.
    """
    import pandas as pd
    from tqdm import tqdm

    from llmsched_gym.tasks import task_spec

    if decision not in DECISIONS:
        raise ConfigError(f"--decision must be one of {list(DECISIONS)}, got {decision!r}")
    if points < 1:
        raise ConfigError(f"--points must be >= 1, got {points}")
    task = DECISIONS[decision]
    env_class = task_spec(task).env_class()

    env = env_class(scenario=scenario, scenario_overrides=overrides or None)
    agent = _make_agent(decision, policy)
    # The policy's own run: how many decisions there are to sample from.
    env.reset(seed=seed)
    n = 0
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(agent.act(env))
        n += 1
        done = term or trunc
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(n, size=min(points, n), replace=False).tolist())
    env.reset(seed=seed)
    rows = []
    bar = tqdm(total=len(chosen), desc=f"counterfactual {decision}", disable=not progress)
    for i in range(n):
        action = agent.act(env)
        if i in chosen:
            alts = _alternatives(env)
            if alternatives is not None and len(alts) > alternatives + 1:
                others = [a for a in alts if a != int(action)]
                alts = [int(action), *rng.choice(others, alternatives, replace=False).tolist()]
            returns = {}
            for a in dict.fromkeys([int(action), *alts]):
                env2, agent2 = fork((env, agent))  # agents keep state (round-robin's turn)
                returns[a] = _rollout_return(env2, agent2, a, horizon)
            best = max(returns, key=lambda a: (returns[a], -a))
            regret = returns[best] - returns[int(action)]
            rows.append(
                {
                    "point": i,
                    "decision": decision,
                    "time_s": env._clock(),
                    "policy_action": int(action),
                    "best_action": best,
                    "num_alternatives": len(returns),
                    "regret": regret,
                    "regret_request_s": regret / env.reward_scale,
                    "returns": ";".join(f"{a}:{r:.6g}" for a, r in returns.items()),
                }
            )
            bar.update()
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break
    bar.close()
    return CounterfactualResult(pd.DataFrame(rows), scenario, policy, decision)


def write_outputs(result: CounterfactualResult, out: str | Path) -> list[Path]:
    """``regret.csv``, ``summary.md`` and ``regret.png`` under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmsched_gym._markdown import markdown_table

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result.table.to_csv(out / "regret.csv", index=False)
    s = result.summary()
    lines = [
        f"# Counterfactual regret: {result.policy}'s {result.decision} decisions on "
        f"{result.scenario}",
        "",
        "At each sampled decision point the environment is forked once per alternative; each "
        "fork takes its alternative and then follows the policy. Regret: the best fork's return "
        "minus the policy's choice's, in request-seconds of latency.",
        "",
        "| " + " | ".join(s) + " |",
        "|" + "---|" * len(s),
        "| " + " | ".join(f"{v:.4g}" for v in s.values()) + " |",
        "",
        markdown_table(result.table.drop(columns=["returns"]), floatfmt=".4g"),
        "",
        "![regret](regret.png)",
        "",
    ]
    (out / "summary.md").write_text("\n".join(lines))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    r = result.table["regret_request_s"].to_numpy(np.float64)
    ax.hist(r, bins=min(30, max(5, len(r))), color="tab:blue")
    ax.set_xlabel("regret of the policy's choice (request-seconds)")
    ax.set_ylabel("decision points")
    ax.set_title(
        f"{result.policy}: {result.decision} regret on {result.scenario}\n"
        f"mean {s['mean_regret_request_s']:.3g}, share with regret {s['share_with_regret']:.0%}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(out / "regret.png", dpi=110)
    plt.close(fig)
    return [out / "regret.csv", out / "summary.md", out / "regret.png"]
