"""fork() continues exactly like the original; the counterfactual tool's regrets are consistent."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym  # noqa: F401 - registers the ids
from llmsched_gym.counterfactual import counterfactual, fork, write_outputs
from llmsched_gym.envs.registration import registered_ids
from llmsched_gym.errors import ConfigError
from tests.envs.conftest import SMALL


def _scenario_of(eid: str) -> str:
    env = gym.make(eid, disable_env_checker=True)
    return env.unwrapped.scenario.name


def _action(env, i):
    masks = getattr(env, "action_masks", None)
    if masks is not None:
        valid = np.flatnonzero(masks())
        return int(valid[i % len(valid)]) if len(valid) else 0
    rng = np.random.default_rng(i)
    space = env.action_space
    return rng.uniform(space.low, space.high).astype(space.dtype)


def _trajectory(env, start, n):
    out = []
    for i in range(start, start + n):
        obs, r, term, trunc, info = env.step(_action(env, i))
        out.append((tuple(np.asarray(v).tobytes() for v in obs.values()), r, info["time_s"]))
        if term or trunc:
            break
    return out


IDS = [e for e in registered_ids() if "Hexgen" not in e and "Proserve" not in e][::3]


@pytest.mark.parametrize("eid", IDS, ids=[e.split("/")[1] for e in IDS])
def test_fork_of_an_env_continues_like_the_original(eid):
    scenario = _scenario_of(eid)
    env = gym.make(
        eid, scenario_overrides=SMALL.get(scenario, {"workload.num_requests": 40})
    ).unwrapped
    env.reset(seed=1)
    k = len(_trajectory(fork(env), 0, 30)) // 3  # fork a third of the way in (or at the start)
    _trajectory(env, 0, k)
    copy = fork(env)
    assert copy.items is env.items and copy.cost_model is env.cost_model  # shared, not copied
    expected = _trajectory(env, k, 60)
    assert expected
    assert _trajectory(copy, k, 60) == expected


def test_fork_of_an_engine_and_of_a_cluster_run_to_the_same_records():
    env = gym.make(
        "llmsched/Priority-ChatSharegptOverload-v0",
        scenario_overrides={"workload.num_requests": 60},
    ).unwrapped
    env.reset(seed=0)
    _trajectory(env, 0, 20)
    engine = fork(env.engine)
    # Both continue under the environment policy's default packing (no stored scores).
    env.engine.run()
    engine.run()
    key = lambda e: sorted((r.request_id, r.finish_time, r.num_preemptions) for r in e.finished)  # noqa: E731
    assert key(engine) == key(env.engine)

    route = gym.make(
        "llmsched/Route-ChatAzureConv4x-v0", scenario_overrides={"workload.num_requests": 60}
    ).unwrapped
    route.reset(seed=0)
    _trajectory(route, 0, 10)
    cluster = fork(route.cluster)
    route.cluster.run()
    cluster.run()

    def fin(c):
        return sorted(
            (r.request_id, r.finish_time, c.final[r.request_id])
            for inst in c.instances
            for r in inst.engine.finished
        )

    assert fin(cluster) == fin(route.cluster) and len(fin(cluster)) == 60


def test_counterfactual_regret_is_consistent(tmp_path):
    res = counterfactual(
        "chat-azure-conv-4x-v0",
        "round-robin",
        "route",
        overrides={"workload.num_requests": 120, "workload.rate_per_s": 40.0},
        points=6,
    )
    t = res.table
    assert len(t) == 6 and (t["regret"] >= 0).all() and (t["num_alternatives"] == 4).all()
    assert (
        t.loc[t["regret"] == 0, "policy_action"] == t.loc[t["regret"] == 0, "best_action"]
    ).all()
    paths = write_outputs(res, tmp_path)
    assert all(p.is_file() for p in paths)
    again = counterfactual(
        "chat-azure-conv-4x-v0",
        "round-robin",
        "route",
        overrides={"workload.num_requests": 120, "workload.rate_per_s": 40.0},
        points=6,
    )
    assert again.table.equals(t)  # deterministic


def test_counterfactual_preempt_and_bad_input():
    res = counterfactual(
        "chat-sharegpt-overload-v0",
        "vllm-v1",
        "preempt",
        overrides={
            "workload.num_requests": 120,
            "workload.rate_per_s": 2.0,
            "engine.num_gpu_blocks": 1025,
        },
        points=3,
    )
    assert len(res.table) == 3 and (res.table["regret"] >= 0).all()
    with pytest.raises(ConfigError, match="--decision must be one of"):
        counterfactual("chat-azure-conv-4x-v0", "round-robin", "admit")


def test_fork_inside_an_engine_step_continues_like_a_replay():
    # Preempt decides inside vLLM's packing loop (the engine step is half packed): a fork there
    # continues exactly as the original and as a fresh run given the same actions.
    kwargs = dict(
        scenario_overrides={
            "workload.num_requests": 120,
            "workload.rate_per_s": 2.0,
            "engine.num_gpu_blocks": 1025,
        }
    )
    env = gym.make("llmsched/Preempt-ChatSharegptOverload-v0", **kwargs).unwrapped
    env.reset(seed=0)
    before = _trajectory(env, 0, 5)
    assert len(before) == 5 and env.requester is not None  # waiting for a victim mid-step
    copy = fork(env)
    expected = _trajectory(env, 5, 40)
    assert len(expected) > 10 and _trajectory(copy, 5, 40) == expected
    fresh = gym.make("llmsched/Preempt-ChatSharegptOverload-v0", **kwargs).unwrapped
    fresh.reset(seed=0)
    assert _trajectory(fresh, 0, 45) == before + expected
    # To the end: the fork shares the requests that had finished with the original, which went
    # on; its records are still a fresh run's.
    for e in (env, copy, fresh):
        if not e._ended:
            _trajectory(e, 45, 10_000)
    assert _records(copy.engine) == _records(fresh.engine)
    assert len(_records(fresh.engine)) == 120


def _records(engine):
    return sorted(
        (r.request_id, r.arrival_time, r.first_token_time, r.finish_time, r.num_preemptions,
         r.num_output_tokens, r.num_cached_tokens)
        for r in engine.finished
    )  # fmt: skip
