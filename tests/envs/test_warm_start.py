"""Warm starts from a rule (``baselines/warm_start.py``), the rules' tie sets, row ranks, and
the runner's checkpoint selection and paired verdict (``baselines/train.py``)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.agents import RuleAgent

ROOT = Path(__file__).resolve().parents[2] / "baselines"


def _module(name: str):
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location(f"llmsched_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_rank_targets_order_visible_rows_and_share_ties() -> None:
    ws = _module("warm_start")
    scores = np.array([[3.0, 1.0, 2.0, 9.0, 2.0]])
    mask = np.array([[1, 1, 1, 0, 1]], dtype=bool)
    t = ws.rank_targets(scores, mask)[0]
    # visible scores 3, 1, 2, 2: ranks 0, 3, 1.5, 1.5 of n = 4 -> 1 - 2 r / 3
    assert t.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0])
    assert ws.rank_targets(np.array([[5.0, 1.0]]), np.array([[1, 0]], bool)).tolist() == [[0, 0]]


def test_returns_to_go_restart_at_episode_ends() -> None:
    ws = _module("warm_start")
    r = np.array([1.0, 2.0, 3.0, 4.0])
    done = np.array([False, True, False, True])
    assert ws.returns_to_go(r, done, 1.0).tolist() == [3.0, 2.0, 7.0, 4.0]
    assert ws.returns_to_go(r, done, 0.5).tolist() == [2.0, 2.0, 5.0, 4.0]


@pytest.mark.parametrize(
    ("task", "rule"),
    [
        ("Select", "shortest-prompt"),
        ("Select", "shortest-remaining-prompt"),
        ("Preempt", "shortest-prompt"),
        ("Preempt", "least-computed"),
        ("Route", "least-backlog"),
    ],
)
def test_rule_ties_hold_its_own_action_and_only_equal_keys(task: str, rule: str) -> None:
    """On random tables with many equal keys: the rule's action is in its tie set, and every
    action of the set is one the rule would take were the rows reordered to put it first."""
    agent = RuleAgent(rule, task)
    rng = np.random.default_rng(0)
    table, k = ("instances", 4) if task == "Route" else ("requests", 16)
    width = 11 if task == "Route" else 12
    for _ in range(200):
        obs = {
            table: (rng.integers(0, 3, (k, width)) / 4).astype(np.float32),
            "mask": rng.integers(0, 2, k).astype(np.int8),
        }
        if not obs["mask"].any() and task != "Select":
            obs["mask"][0] = 1
        masks = np.concatenate([obs["mask"], [1]]) if task == "Select" else None
        action, _ = agent.predict(obs, action_masks=masks)
        tied = agent.ties(obs, masks)
        assert tied[action]
        for other in np.flatnonzero(tied):
            if other == action or other >= k:
                continue
            order = np.r_[other, np.delete(np.arange(k), other)]  # move `other` to the top
            moved = {key: v[order] for key, v in obs.items()}
            moved_masks = None if masks is None else np.r_[masks[:k][order], masks[k:]]
            assert agent.predict(moved, action_masks=moved_masks)[0] == 0
    with pytest.raises(ValueError, match="discrete row actions"):
        RuleAgent("shortest-prompt", "Priority").ties({}, None)


def test_least_backlog_rule_is_the_backlog_router_on_a_workload() -> None:
    """``rule:least-backlog`` reads the router's key from the observation: same schedule."""
    from llmsched_gym.leaderboard.run import run_workload
    from llmsched_gym.leaderboard.suite import load_suite

    suite = load_suite("llmsched-v2")
    w = next(x for x in suite.workloads("test", tasks=["Route"]) if "text2sql-knee" in x.id)
    a = run_workload(suite, "rule:least-backlog", w)
    b = run_workload(suite, "least-load:backlog", w)
    assert a["status"] == b["status"] == "ok"
    assert a["value"] == b["value"] and a["num_steps"] == b["num_steps"]
    assert a["kind"] == "agent"


def test_row_ranks_are_equivariant_and_count_visible_rows_only() -> None:
    torch = pytest.importorskip("torch")
    from llmsched_gym.envs.sb3_policies import row_ranks

    x = torch.tensor([[[3.0, 1.0], [1.0, 1.0], [2.0, 5.0], [9.0, 0.0]]])
    m = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    r = row_ranks(x, m)[0]
    assert r[:3].tolist() == [[1.0, 0.25], [0.0, 0.25], [0.5, 1.0]]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (5, 7, 3), generator=gen).float()
    m = torch.randint(0, 2, (5, 7), generator=gen).float()
    perm = torch.randperm(7, generator=gen)
    assert torch.equal(row_ranks(x[:, perm], m[:, perm]), row_ranks(x, m)[:, perm])


@pytest.mark.slow
def test_warm_start_clones_the_rule_and_the_runner_keeps_the_best_checkpoint(tmp_path) -> None:
    """A short Route run: the clone agrees with rule:least-backlog, the checkpoints are scored
    on held-back train workloads, the chosen one is the submission, and its validation score
    equals the rule's own on those workloads (it takes the rule's actions)."""
    pytest.importorskip("sb3_contrib", reason="the recipes need the [rl] extra")
    from llmsched_gym.leaderboard.run import run_all
    from llmsched_gym.leaderboard.submission import load_submission

    train = _module("train")
    cfg = train.load_config(ROOT / "configs" / "maskable-ppo-route-bc.yaml")
    cfg["warm_start"] = {**cfg["warm_start"], "episodes": 4, "epochs": 10}
    cfg["train"] = {"groups": [["text2sql-knee", "t2s-trace3"]]}
    cfg["validation_workloads"] = 1
    cfg["hyperparams"] = {**cfg["hyperparams"], "n_steps": 128, "batch_size": 64}
    record = train.train_one(cfg, 0, tmp_path / "seed0", 256)
    warm = record["warm_start"]
    assert warm["agreement"] >= 0.99 and warm["decisions"] > 1000
    assert [c["checkpoint"] for c in record["checkpoints"]][0] == "warm"
    best = max(record["checkpoints"], key=lambda c: c["validation_score"])
    assert record["chosen_checkpoint"] == best["checkpoint"]
    chosen = tmp_path / "seed0" / "checkpoints" / best["checkpoint"] / "policy.pth"
    assert (tmp_path / "seed0" / "policy.pth").read_bytes() == chosen.read_bytes()
    assert load_submission(tmp_path / "seed0").model["policy_kwargs"] == {
        "features_extractor_kwargs": {"relative": True}
    }
    suite, workloads = train._train_workloads(cfg)
    held = train.validation_workloads(workloads, 1)
    assert record["validation_workloads"] == [held[0].id]
    ref, rule = run_all(suite, [("round-robin", held[0]), ("rule:least-backlog", held[0])])
    first = record["checkpoints"][0]["validation_ratios"][0]
    assert first == pytest.approx(ref["value"] / rule["value"], rel=0.02)


def test_paired_verdict_against_a_rule(tmp_path) -> None:
    """The paired ratio is the rule's metric over the agent's per workload; 'at or above' and
    'above' follow the declared lower ends; a failed run is never 'at or above'."""
    from llmsched_gym.leaderboard.suite import load_suite

    train = _module("train")
    task = load_suite("llmsched-v2").task("Priority")
    ids = {w.id for w in load_suite("llmsched-v2").workloads("test", tasks=["Priority"])}
    rule = train.committed_rows(task, "rule:shortest-prompt", ids)
    target = {"rule": "rule:shortest-prompt", "paired_low": 0.98}

    def seeds(factors):
        return {
            s: [{**r, "value": r["value"] / f} for r in rule] for s, f in enumerate(factors)
        }

    text = "\n".join(train.paired_lines(task, target, seeds([1.05, 1.06, 1.04]), tmp_path))
    assert "**above (lower end >= 1.02)**" in text
    data = json.loads((tmp_path / "paired.json").read_text())
    assert data["value"] == pytest.approx(math.exp(np.mean(np.log([1.05, 1.06, 1.04]))))
    text = "\n".join(train.paired_lines(task, target, seeds([1.0, 1.002, 0.999]), tmp_path))
    assert "**at or above**" in text
    text = "\n".join(train.paired_lines(task, target, seeds([0.9, 1.1, 0.95]), tmp_path))
    assert "**missed**" in text
    failed = seeds([1.05, 1.05])
    failed[0][0] = {**failed[0][0], "status": "failed"}
    text = "\n".join(train.paired_lines(task, target, failed, tmp_path))
    assert "1 failed runs" in text and "**missed**" in text


def test_train_workloads_take_explicit_groups() -> None:
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import TrainWorkloads

    suite = load_suite("llmsched-v2")
    tw = TrainWorkloads(
        suite, "Route", groups=[("chat4x-knee", "azure-conv-4x"), ("text2sql-knee", "t2s-trace3")]
    )
    first = tw.batch(0)
    assert [w.scenario_id for w in first] == ["chat4x-knee", "text2sql-knee"]
    assert all(w.split == "train" for w in first)
    with pytest.raises(ConfigError, match=r"no train workloads for \['chat4x-knee/t2s-trace3'\]"):
        TrainWorkloads(suite, "Route", groups=[("chat4x-knee", "t2s-trace3")])
    with pytest.raises(ConfigError, match="must be \\(scenario, source\\) pairs"):
        TrainWorkloads(suite, "Route", groups=[("chat4x-knee",)])
