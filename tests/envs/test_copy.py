"""Copies of an environment mid-episode (deepcopy, pickle) continue exactly as the original.

Planners (tree search, rollouts from a state) and vector-env workers rely on this. A copy must
own all of its state: a listener or callback still bound to the original would make the copy
diverge (or drive the original).
"""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest

import llmsched_gym  # noqa: F401 - registers the ids
from tests.envs.conftest import SMALL

CASES = [
    ("llmsched/Priority-ChatSharegptOverload-v0", "chat-sharegpt-overload-v0"),
    ("llmsched/Select-ChatAzureConv-v0", "chat-azure-conv-v0"),
    ("llmsched/Route-ChatAzureConv4x-v0", "chat-azure-conv-4x-v0"),
    ("llmsched/Route-ProservePdSharegpt-v0", "proserve-pd-sharegpt-v0"),
    ("llmsched/Route-Text2sqlHetero1-v0", "text2sql-hetero1-v0"),
]


def _action(env, i: int):
    masks = getattr(env, "action_masks", None)
    if masks is not None:
        valid = np.flatnonzero(masks())
        return int(valid[i % len(valid)])
    rng = np.random.default_rng(i)
    space = env.action_space
    return rng.uniform(space.low, space.high).astype(space.dtype)


def _run(env, start: int, n: int) -> list:
    out = []
    for i in range(start, start + n):
        obs, reward, term, trunc, info = env.step(_action(env, i))
        out.append(({k: v.tobytes() for k, v in obs.items()}, reward, info["time_s"]))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize(("eid", "scenario"), CASES, ids=[c[0].split("/")[1] for c in CASES])
def test_copies_continue_like_the_original(eid: str, scenario: str) -> None:
    env = gym.make(eid, scenario_overrides=SMALL[scenario]).unwrapped
    env.reset(seed=0)
    _run(env, 0, 15)
    deep = copy.deepcopy(env)
    pickled = pickle.loads(pickle.dumps(env))
    expected = _run(env, 15, 40)
    assert expected
    assert _run(deep, 15, 40) == expected
    assert _run(pickled, 15, 40) == expected
