"""Training's caches across resets (issue 40): what an episode returns does not depend on them."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.leaderboard import training
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.training import TrainWorkloadEnv, TrainWorkloads
from llmsched_gym.scenarios import spec


@pytest.fixture(scope="module")
def workloads():
    suite = load_suite("llmsched-v1")
    return TrainWorkloads(suite, "Priority", ["chat-knee"], ["sharegpt", "azure-conv"])


def _clear() -> None:
    spec._WORKLOAD_CACHE.clear()
    training._CURVES.clear()


def _run(workloads, episodes: int, **kwargs) -> tuple[list, list[dict]]:
    """Rewards, observations, flags and infos of ``episodes`` episodes with seeded scores."""
    env = TrainWorkloadEnv(workloads, baseline="reference", gamma=1.0, **kwargs)
    rng = np.random.default_rng(3)
    trace: list = []
    infos: list[dict] = []
    for _ in range(episodes):
        obs, info = env.reset()
        trace.append({k: v.copy() for k, v in obs.items()})
        infos.append(info)
        done = False
        while not done:
            obs, reward, term, trunc, info = env.step(rng.uniform(-1, 1, 16).astype(np.float32))
            trace.append((reward, term, trunc, {k: v.copy() for k, v in obs.items()}))
            infos.append(info)
            done = term or trunc
    return trace, infos


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict):
            x, y = (None, None, None, x), (None, None, None, y)
        assert x[:3] == y[:3]
        assert x[3].keys() == y[3].keys()
        for key in x[3]:
            assert np.array_equal(x[3][key], y[3][key])


def test_cached_and_uncached_episodes_are_identical(workloads) -> None:
    """Cold caches (every build and reference run fresh) and warm ones give the same bits."""
    _clear()
    cold, cold_infos = _run(workloads, 2)
    assert training._CURVES and spec._WORKLOAD_CACHE
    warm, warm_infos = _run(workloads, 2)
    _same(cold, warm)
    assert cold_infos == warm_infos


def test_lean_info_changes_only_the_infos_of_hot_steps(workloads) -> None:
    full, full_infos = _run(workloads, 1)
    lean, lean_infos = _run(workloads, 1, lean_info=True)
    _same(full, lean)
    assert lean_infos[0] == full_infos[0]  # reset
    assert all(i == {} for i in lean_infos[1:-1])
    assert lean_infos[-1] == full_infos[-1] and "reward_unshaped" in lean_infos[-1]


def test_the_reference_run_reuses_the_episodes_build(workloads) -> None:
    """One build per workload: the reference run takes the episode's cached workload."""
    _clear()
    env = TrainWorkloadEnv(workloads, baseline="reference")
    env.reset()
    assert len(spec._WORKLOAD_CACHE) == 1
    again = TrainWorkloadEnv(workloads, baseline="reference")
    again.reset()
    assert len(training._CURVES) == 1  # the second environment reuses the first's run


def test_workload_cache_is_bounded(workloads, monkeypatch) -> None:
    monkeypatch.setattr(spec, "_WORKLOAD_CACHE_SIZE", 2)
    _clear()
    env = TrainWorkloadEnv(workloads)
    for _ in range(4):
        env.reset()
    assert len(spec._WORKLOAD_CACHE) == 2
