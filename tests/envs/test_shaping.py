"""Reward shaping against a reference run (``envs.shaping``, ``TrainWorkloadEnv(baseline=)``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym.envs.adapters import PolicyAgent
from llmsched_gym.envs.shaping import LatencyCurve, ReferenceShaping
from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.leaderboard.training import TrainWorkloadEnv, TrainWorkloads
from llmsched_gym.policies.registry import make_policy


def _area(arrivals: list[float], finishes: list[float], t: float) -> float:
    """``L(t)`` by its definition: every arrived unit's time in the system up to ``t``."""
    return math.fsum(max(0.0, min(f, t) - a) for a, f in zip(arrivals, finishes, strict=True))


units = st.lists(
    st.tuples(
        st.floats(0, 100, allow_nan=False),
        st.one_of(st.floats(0, 50, allow_nan=False), st.just(math.inf)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(units=units, times=st.lists(st.floats(-5, 200, allow_nan=False), min_size=1, max_size=8))
def test_latency_curve_is_the_area_under_the_unfinished_count(units, times) -> None:
    arrivals = [a for a, _ in units]
    finishes = [a + d for a, d in units]
    curve = LatencyCurve(arrivals, finishes)
    for t in times:
        assert curve(t) == pytest.approx(_area(arrivals, finishes, t), rel=1e-9, abs=1e-6)
    done = [f - a for a, f in zip(arrivals, finishes, strict=True) if math.isfinite(f)]
    assert curve.total == pytest.approx(math.fsum(done), abs=1e-9)
    assert curve.num_open == len(units) - len(done)


def test_latency_curve_refuses_bad_runs() -> None:
    with pytest.raises(ValueError, match="2 arrivals but 1 finishes"):
        LatencyCurve([0.0, 1.0], [2.0])
    with pytest.raises(ValueError, match="before it arrives"):
        LatencyCurve([3.0], [2.0])
    with pytest.raises(ValueError, match="arrivals must be finite"):
        LatencyCurve([math.nan], [2.0])
    with pytest.raises(ValueError, match="nothing to scale"):
        ReferenceShaping(LatencyCurve([1.0], [1.0]), 0.0)


@pytest.fixture(scope="module")
def workloads():
    suite = load_suite("llmsched-v1")
    return TrainWorkloads(suite, "Priority", ["chat-knee"], ["sharegpt"])


def _episode(env: TrainWorkloadEnv, act) -> tuple[float, float]:
    """(shaped return, unshaped return) of one episode."""
    env.reset(seed=0)
    shaped = unshaped = 0.0
    while True:
        _, reward, terminated, truncated, info = env.step(act(env))
        shaped += reward
        unshaped += info["reward_unshaped"]
        if terminated or truncated:
            assert terminated
            return shaped, unshaped


def test_the_reference_itself_scores_zero_and_others_their_saving(workloads) -> None:
    """The shaped return of a drained episode is 1 - L / L_ref; the reference's own is 0."""
    env = TrainWorkloadEnv(workloads, baseline="reference")
    assert env.baseline == "vllm-v1"
    reference = PolicyAgent(make_policy("vllm-v1"))
    shaped, _ = _episode(env, lambda e: reference.act(e.env))
    assert shaped == pytest.approx(0.0, abs=1e-9)
    assert env.ratios == [pytest.approx(1.0, abs=1e-12)]

    rng = np.random.default_rng(7)
    shaped, unshaped = _episode(env, lambda e: rng.uniform(-1, 1, 16).astype(np.float32))
    latency = -unshaped / env.env.reward_scale
    ref_total = env._curve(env.workload).total
    assert shaped == pytest.approx(1.0 - latency / ref_total, rel=1e-9)
    assert env.ratios[-1] == pytest.approx(ref_total / latency, rel=1e-9)


def test_without_a_baseline_the_reward_is_the_tasks(workloads) -> None:
    env = TrainWorkloadEnv(workloads)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.zeros(16, np.float32))
    assert "reward_unshaped" not in info
    assert reward == info["reward_latency"]
    assert env.ratios == []


def test_bad_baselines_name_the_problem(workloads) -> None:
    with pytest.raises(ConfigError, match="not a registered scheduler for task Priority"):
        TrainWorkloadEnv(workloads, baseline="least-load:backlog")
    with pytest.raises(ConfigError, match=r"\['max_requests'\] would make"):
        TrainWorkloadEnv(workloads, baseline="reference", max_requests=10)


def test_unbounded_scores_keep_their_order(workloads) -> None:
    """Scores far outside [-1, 1] act as their order: no clipping into ties (issue 24)."""
    from llmsched_gym.leaderboard.training import SCORE_BOUND

    wide = TrainWorkloadEnv(workloads, unbounded_scores=True)
    assert wide.action_space.high[0] == SCORE_BOUND and wide.action_space.shape == (16,)
    scaled = TrainWorkloadEnv(workloads)
    rng = np.random.default_rng(3)
    wide.reset(seed=0)
    scaled.reset(seed=0)
    for _ in range(200):
        scores = rng.normal(0, 500, 16).astype(np.float32)
        a = wide.step(scores)
        b = scaled.step(scores / np.abs(scores).max())
        assert a[1] == b[1] and a[0]["requests"].tobytes() == b[0]["requests"].tobytes()
        if a[2] or a[3]:
            break
    with pytest.raises(ConfigError, match="unbounded_scores is for Priority's scores"):
        suite = load_suite("llmsched-v1")
        TrainWorkloadEnv(
            TrainWorkloads(suite, "Select", ["capped-knee"], ["sharegpt"]), unbounded_scores=True
        )


def test_discounted_shaping_shifts_every_discounted_return_by_the_start_potential(
    workloads,
) -> None:
    """With the learner's gamma: sum_k g^k r'_k = sum_k g^k r_k / L_ref - phi(t_0) exactly,
    whatever the policy (Ng et al. 1999), so the ranking of policies is unchanged."""
    gamma = 0.99
    env = TrainWorkloadEnv(workloads, baseline="reference", gamma=gamma)
    rng = np.random.default_rng(11)
    _, info = env.reset(seed=0)
    total = env._curve(env.workload).total
    phi0 = env._curve(env.workload)(info["time_s"]) / total
    shaped = plain = 0.0
    k = 0
    while True:
        _, r, terminated, truncated, info = env.step(rng.uniform(-1, 1, 16).astype(np.float32))
        shaped += gamma**k * r
        plain += gamma**k * -info["latency_area_s"] / total
        k += 1
        if terminated or truncated:
            break
    assert shaped == pytest.approx(plain - phi0, abs=1e-9)
    with pytest.raises(ValueError, match="gamma must be in"):
        ReferenceShaping(env._curve(env.workload), 0.0, gamma=0.0)
