"""Learned submissions: trained on train workloads only, and their committed results reproduce."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.agents import LinearRowScorer
from llmsched_gym.leaderboard.policy import resolve_policy
from llmsched_gym.leaderboard.submission import load_submission
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.training import (
    TrainWorkloadEnv,
    TrainWorkloads,
    check_train,
)
from llmsched_gym.leaderboard.validate import validate_submission

ROOT = Path(__file__).resolve().parents[2]
PRIORITY = ROOT / "leaderboards" / "priority"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "baselines" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def suite():
    return load_suite("llmsched-v1")


@pytest.fixture(scope="module")
def cem():
    return _load("cem_priority")


def test_cem_suite_workloads_are_train_split_only(suite, cem) -> None:
    workloads = TrainWorkloads(suite, "Priority", cem.SUITE_SCENARIOS, cem.SUITE_SOURCES, 2)
    test_ids = {w.id.replace("/test/", "/") for w in suite.workloads("test", tasks=["Priority"])}
    train_seeds = {
        (sc.id, src.name): set(src.train.seeds)
        for sc in suite.task("Priority").scenarios
        for src in sc.sources
        if src.train is not None
    }
    groups = set()
    for i in (*range(20), 499, 500, 10_000):
        batch = workloads.batch(i)
        assert batch == workloads.batch(i)  # deterministic
        assert len(batch) == 8
        for w in batch:
            assert w.split == "train" and w.task == "Priority"
            assert w.seed in train_seeds[(w.scenario_id, w.source)]
            assert w.id.replace("/train/", "/") not in test_ids
            groups.add((w.scenario_id, w.source))
    assert groups == {(sc, src) for sc in cem.SUITE_SCENARIOS for src in cem.SUITE_SOURCES}
    # Batch i holds seeds 2i and 2i + 1 of every group: iterations never reuse a workload early.
    assert [w.seed for w in workloads.batch(3)] == [6, 7] * 4
    # Two environments sharing the cycle see disjoint workloads that together cover it.
    first = [w.id for w, _ in zip(workloads.cycle(), range(16), strict=False)]
    even = [w.id for w, _ in zip(workloads.cycle(0, 2), range(8), strict=False)]
    odd = [w.id for w, _ in zip(workloads.cycle(1, 2), range(8), strict=False)]
    assert even == first[0::2] and odd == first[1::2]


def test_train_workloads_refuse_test_workloads(suite) -> None:
    test_workload = suite.workloads("test", tasks=["Priority"])[0]
    with pytest.raises(AssertionError, match="train split"):
        check_train(test_workload)
    with pytest.raises(ConfigError, match="azure-code"):  # a test-only (held-out) trace
        TrainWorkloads(suite, "Priority", ["chat-knee"], ["azure-code"])
    with pytest.raises(ConfigError, match="no train workloads"):
        TrainWorkloads(suite, "Priority", ["capped-knee"], ["sharegpt"])  # a Select scenario


def test_train_workload_env_runs_the_workload_seed(suite) -> None:
    workloads = TrainWorkloads(suite, "Priority", ["chat-knee"], ["sharegpt", "azure-conv"])
    env = TrainWorkloadEnv(workloads, start=1, stride=2)
    expected = [w for w, _ in zip(workloads.cycle(1, 2), range(2), strict=False)]
    for w in expected:
        obs, info = env.reset(seed=123)
        assert info["workload"] == w.id
        assert env.env.workload_seed == w.seed  # the harness runs scenario.simulate(seed=w.seed)
        assert env.observation_space.contains(obs)
    assert env.seen == expected


def test_cem_suite_mode_end_to_end(tmp_path, cem) -> None:
    folder = tmp_path / "cem-tiny"
    result = cem.main(
        ["--suite", "llmsched-v1", "--iterations", "1", "--population", "2", "--episodes", "1",
         "--submission", str(folder)]
    )  # fmt: skip
    assert result["iterations"] == 1 and result["env_steps"] > 0
    assert all("/train/" in w for w in result["train_check"]["workloads"])
    saved = json.loads((folder / "weights.json").read_text())
    assert saved["weights"] == result["weights"] and saved["train_seeds"] == [0]
    for name in ("policy.py", "submission.yaml", "README.md"):
        assert (folder / name).is_file()
    sub = load_submission(folder)
    assert sub.task == "Priority" and sub.policy == "policy.py:make" and not sub.oracle
    assert "train workloads" in sub.training
    assert LinearRowScorer.load(folder / "weights.json").as_dict() == pytest.approx(
        result["weights"]
    )
    _same_actions_as(folder, LinearRowScorer.load(folder / "weights.json"))


def _same_actions_as(folder: Path, scorer: LinearRowScorer, task: str = "Priority") -> None:
    """The submission's agent, run in its sandbox, answers as ``scorer`` does in this process."""
    from llmsched_gym.leaderboard.sandbox import SandboxedAgent, SandboxLimits

    sub = load_submission(folder)
    ref = sub.policy_ref(load_suite().task("Priority"))
    agent = SandboxedAgent(ref.entry, task, name=sub.method, limits=SandboxLimits())
    try:
        rng = np.random.default_rng(0)
        for _ in range(3):
            obs = {"requests": rng.normal(size=(16, len(scorer.as_dict()))).astype(np.float32)}
            action, _ = agent.predict(obs)
            assert action.dtype == np.float32 and np.array_equal(action, scorer(obs))
    finally:
        agent.close()


def test_committed_cem_submission_loads_its_weights(suite) -> None:
    from llmsched_gym.errors import SandboxError
    from llmsched_gym.leaderboard.sandbox import SandboxedAgent, SandboxLimits

    folder = PRIORITY / "cem-linear"
    saved = json.loads((folder / "weights.json").read_text())
    _same_actions_as(folder, LinearRowScorer.from_dict(saved["weights"]))
    ref = resolve_policy(str(folder), suite.task("Priority"))
    with pytest.raises(SandboxError, match="factory raised ValueError.*Priority"):
        SandboxedAgent(ref.entry, "Select", name="cem-linear", limits=SandboxLimits())


def test_committed_cem_submission_validates_on_the_quick_subset() -> None:
    assert validate_submission(PRIORITY / "cem-linear", quick=True) == []


@pytest.mark.slow
def test_committed_ppo_submission_validates_on_the_quick_subset() -> None:
    pytest.importorskip("stable_baselines3", reason="the PPO submission needs the [rl] extra")
    folder = PRIORITY / "ppo"
    assert (folder / "policy.pth").stat().st_size < 1_000_000
    assert validate_submission(folder, quick=True) == []


def test_select_suite_workloads_are_train_split_only(suite) -> None:
    mppo = _load("maskable_ppo_select")
    workloads = TrainWorkloads(suite, "Select", mppo.SUITE_SCENARIOS, mppo.SUITE_SOURCES)
    test_ids = {w.id.replace("/test/", "/") for w in suite.workloads("test", tasks=["Select"])}
    for w in (w for i in (0, 1, 999, 1000) for w in workloads.batch(i)):
        assert w.split == "train" and w.task == "Select"
        assert w.id.replace("/train/", "/") not in test_ids
        assert w.overrides["engine.max_num_seqs"] == 16  # the capped instance of the task
