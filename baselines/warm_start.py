"""Warm start from a rule: behaviour cloning of the actor, Monte-Carlo regression of the critic.

A recipe with a ``warm_start:`` section (``baselines/train.py``) first rolls the rule out on
train workloads, then fits the fresh SB3 policy to it before PPO fine-tunes (issue 40's route:
start from the rule, Pomerleau 1991 / Ross et al. 2011's behaviour cloning, then policy
gradient from that policy, as AlphaStar and many RL-from-demonstration recipes do):

* **actor**: Discrete actions (Select, Route; MaskablePPO) minimise the cross-entropy of the
  rule's action under the masked policy. Priority's Gaussian row scores regress their means on
  the rule's *ranking*: the visible row the rule serves ``r``-th of ``n`` gets the target
  ``1 - 2 r / (n - 1)``, so the targets keep one scale whatever the rule's keys are and PPO's
  exploration noise (``log_std_init``) has a known size against the gap between neighbours;
* **critic**: the value head regresses the return-to-go of the rule's episodes, in the reward
  PPO will see (after ``VecNormalize``, whose running return statistics are first filled from
  the same episodes), so the first policy-gradient steps start from a critic that knows the
  rule's returns rather than from zero, which would let advantage noise undo the clone.

The rule acts through the task's observation only (``llmsched_gym.leaderboard.agents.RuleAgent``),
so the warm-started policy reads nothing a submission may not read.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError

KEYS = {
    "expert": str,
    "episodes": int,
    "epochs": int,
    "batch_size": int,
    "learning_rate": float,
    "value": bool,
}
"""The ``warm_start:`` section's keys and types (``expert`` and ``episodes`` required)."""


def check(section: Any, where: str, task: str) -> dict[str, Any]:
    """The ``warm_start`` section, validated, with defaults filled in."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: warm_start must be a mapping, got {section!r}")
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: warm_start has unknown key(s) {unknown}; allowed {list(KEYS)}")
    for key in ("expert", "episodes"):
        if key not in section:
            raise ConfigError(f"{where}: warm_start.{key} is required")
    out = {"epochs": 10, "batch_size": 256, "learning_rate": 1e-3, "value": True, **section}
    for key, kind in KEYS.items():
        value = out[key]
        ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
        if not ok or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: warm_start.{key} must be a {kind.__name__}, got {value!r}")
    for key in ("episodes", "epochs", "batch_size"):
        if out[key] < 1:
            raise ConfigError(f"{where}: warm_start.{key} must be positive, got {out[key]}")
    if not 0 < float(out["learning_rate"]) < 1:
        raise ConfigError(f"{where}: warm_start.learning_rate must be in (0, 1)")
    if not out["expert"].startswith("rule:"):
        raise ConfigError(
            f"{where}: warm_start.expert must be a built-in rule 'rule:<name>' (it acts through "
            f"the observation, as the learner does), got {out['expert']!r}"
        )
    from llmsched_gym.leaderboard.agents import RuleAgent

    RuleAgent(out["expert"].removeprefix("rule:"), task)  # the error names the rules that fit
    return out


@dataclass
class Demonstrations:
    """The rule's decisions on train workloads: observations, actions, masks, rewards."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    masks: np.ndarray | None
    ties: np.ndarray | None
    """Discrete tasks: every action the rule ranks first (its own choice breaks ties by row
    order, which a permutation-invariant scorer cannot see)."""
    rewards: np.ndarray
    dones: np.ndarray
    workloads: list[str]
    ratios: list[float]
    cpu_s: float

    def __len__(self) -> int:
        return len(self.actions)


def collect(env: Any, task: str, expert: str, episodes: int) -> Demonstrations:
    """Roll the rule out for ``episodes`` episodes of ``env`` (a ``TrainWorkloadEnv`` of
    ``task``)."""
    from llmsched_gym.leaderboard.agents import RuleAgent

    started = time.process_time()
    agent = RuleAgent(expert.removeprefix("rule:"), task)
    maskable = task != "Priority"  # Select and Route: MaskablePPO, masks from the env
    obs_rows: dict[str, list[np.ndarray]] = {}
    actions, masks, ties, rewards, dones, names = [], [], [], [], [], []
    for _ in range(episodes):
        obs, _info = env.reset()
        names.append(env.workload.id)
        done = False
        while not done:
            mask = np.asarray(env.action_masks(), dtype=bool) if maskable else None
            action, _ = agent.predict(obs, action_masks=mask)
            for key, value in obs.items():
                obs_rows.setdefault(key, []).append(np.asarray(value))
            actions.append(np.asarray(action))
            if maskable:
                masks.append(mask)
                tied = agent.ties(obs, mask)
                tied[int(action)] = True  # the rule's own action, whatever its key's ties
                ties.append(tied)
            obs, reward, terminated, truncated, _info = env.step(action)
            rewards.append(float(reward))
            done = bool(terminated or truncated)
            dones.append(done)
    return Demonstrations(
        obs={k: np.stack(v) for k, v in obs_rows.items()},
        actions=np.stack(actions),
        masks=np.stack(masks) if maskable else None,
        ties=np.stack(ties) if maskable else None,
        rewards=np.asarray(rewards, dtype=np.float64),
        dones=np.asarray(dones, dtype=bool),
        workloads=names,
        ratios=list(getattr(env, "ratios", [])),
        cpu_s=time.process_time() - started,
    )


def rank_targets(scores: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row: ``1 - 2 r / (n - 1)`` for the visible row ranked ``r``-th (highest score first).

    Ties share their mean rank; invisible rows get 0 (they are left out of the loss).
    """
    out = np.zeros_like(scores, dtype=np.float32)
    for i in range(scores.shape[0]):
        rows = np.flatnonzero(mask[i])
        n = rows.size
        if n < 2:
            continue
        s = scores[i, rows].astype(np.float64)
        order = np.argsort(-s, kind="stable")
        ranks = np.empty(n)
        ranks[order] = np.arange(n, dtype=np.float64)
        for value in np.unique(s):  # ties: their mean rank
            tie = s == value
            if tie.sum() > 1:
                ranks[tie] = ranks[tie].mean()
        out[i, rows] = 1.0 - 2.0 * ranks / (n - 1)
    return out


def returns_to_go(rewards: np.ndarray, dones: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma G_{t+1}``, restarting after every episode end."""
    out = np.zeros_like(rewards)
    g = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if dones[t]:
            g = 0.0
        g = rewards[t] + gamma * g
        out[t] = g
    return out


def normalised_rewards(venv: Any, demos: Demonstrations, gamma: float) -> np.ndarray:
    """The rewards as PPO will see them: through ``venv``'s ``VecNormalize``, if it has one.

    The wrapper's running statistics of the discounted return are first updated with the
    demonstrations' returns (as its ``step_wait`` would have, one environment), so PPO starts
    with a reward scale already settled.
    """
    from stable_baselines3.common.vec_env import VecNormalize

    if not isinstance(venv, VecNormalize) or not venv.norm_reward:
        return demos.rewards
    running = np.zeros_like(demos.rewards)
    ret = 0.0
    for t, r in enumerate(demos.rewards):
        ret = ret * gamma + r
        running[t] = ret
        if demos.dones[t]:
            ret = 0.0
    venv.ret_rms.update(running)
    scale = np.sqrt(venv.ret_rms.var + venv.epsilon)
    return np.clip(demos.rewards / scale, -venv.clip_reward, venv.clip_reward)


def fit(
    model: Any, venv: Any, demos: Demonstrations, section: dict[str, Any], seed: int
) -> dict[str, Any]:
    """Fit ``model.policy`` to the demonstrations (actor, and critic if ``value``); a record."""
    import torch
    from stable_baselines3.common.utils import obs_as_tensor

    started = time.process_time()
    policy = model.policy
    policy.set_training_mode(True)
    box = demos.masks is None
    gamma = float(getattr(model, "gamma", 0.99))
    targets_v = returns_to_go(normalised_rewards(venv, demos, gamma), demos.dones, gamma)
    if box:
        target_a = rank_targets(demos.actions, demos.obs["mask"].astype(bool))
        row_mask = demos.obs["mask"].astype(np.float32)
    rng = np.random.default_rng(seed)
    optimiser = torch.optim.Adam(policy.parameters(), lr=float(section["learning_rate"]))
    n, batch = len(demos), int(section["batch_size"])
    history = []
    for _epoch in range(int(section["epochs"])):
        order = rng.permutation(n)
        totals = [0.0, 0.0]
        for lo in range(0, n, batch):
            idx = order[lo : lo + batch]
            obs = obs_as_tensor({k: v[idx] for k, v in demos.obs.items()}, policy.device)
            if box:
                dist = policy.get_distribution(obs)
                mean = dist.mode()
                m = torch.as_tensor(row_mask[idx])
                err = (mean - torch.as_tensor(target_a[idx])) ** 2 * m
                actor = err.sum() / m.sum().clamp(min=1.0)
            else:
                dist = policy.get_distribution(obs, action_masks=demos.masks[idx])
                logp = torch.log_softmax(dist.distribution.logits, dim=1)
                tied = torch.as_tensor(demos.ties[idx])
                # -log P(an action the rule ranks first): ties share the probability
                actor = -torch.logsumexp(logp.masked_fill(~tied, -torch.inf), dim=1).mean()
            loss = actor
            critic = torch.zeros(())
            if section["value"]:
                values = policy.predict_values(obs).flatten()
                target = torch.as_tensor(targets_v[idx], dtype=values.dtype)
                critic = ((values - target) ** 2).mean()
                loss = loss + 0.5 * critic
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            optimiser.step()
            totals[0] += float(actor.detach()) * len(idx)
            totals[1] += float(critic.detach()) * len(idx)
        history.append({"actor_loss": totals[0] / n, "value_loss": totals[1] / n})
    policy.set_training_mode(False)
    return {
        "agreement": agreement(policy, demos),
        "epochs": history,
        "fit_cpu_s": round(time.process_time() - started, 1),
    }


def agreement(policy: Any, demos: Demonstrations, limit: int = 20_000) -> float:
    """How often the policy's deterministic action is the rule's (first ``limit`` decisions).

    Discrete: the share of decisions whose action is one the rule ranks first. Priority: the
    share of pairs of visible rows that the policy's scores order as the rule's (Kendall's
    concordance; ties in the rule's keys left out).
    """
    import torch
    from stable_baselines3.common.utils import obs_as_tensor

    n = min(len(demos), limit)
    hits = total = 0.0
    with torch.no_grad():
        for lo in range(0, n, 1024):
            idx = np.arange(lo, min(n, lo + 1024))
            obs = obs_as_tensor({k: v[idx] for k, v in demos.obs.items()}, policy.device)
            if demos.masks is None:
                mean = policy.get_distribution(obs).mode().numpy()
                for i, j in enumerate(idx):
                    rows = np.flatnonzero(demos.obs["mask"][j])
                    a, p = demos.actions[j, rows], mean[i, rows]
                    da = np.sign(a[:, None] - a[None, :])
                    dp = np.sign(p[:, None] - p[None, :])
                    keep = da != 0
                    hits += float((da[keep] == dp[keep]).sum())
                    total += float(keep.sum())
            else:
                dist = policy.get_distribution(obs, action_masks=demos.masks[idx])
                chosen = dist.mode().numpy()
                hits += float(demos.ties[idx, chosen].sum())  # among the rule's first
                total += len(idx)
    return hits / total if total else math.nan
