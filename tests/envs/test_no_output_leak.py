"""No observation reveals a request's true output length unless the environment is an oracle.

Two workloads identical but for their requests' output lengths (same prompts, arrivals and
``max_tokens``) drive identical engines until the first request finishes: vLLM's scheduler never
reads the output length. So every non-oracle environment must give identical observations, step
for step, up to that point; the oracle column must differ.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmsched_gym.leaderboard.training import env_class
from llmsched_gym.scenarios import load_scenario

MIN_DECISIONS = {"Priority": 50, "Select": 50, "Preempt": 3, "Knob": 3}
TASKS = list(MIN_DECISIONS)


def _scenario(tmp_path, name: str, outputs: list[int]):
    trace = tmp_path / f"{name}.jsonl"
    rows = [
        {
            "request_id": f"r{i}",
            "arrival_time": 0.02 * i,
            "prompt_len": 40 + (37 * i) % 300,
            "output_len": out,
            "max_tokens": 500,
        }
        for i, out in enumerate(outputs)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / f"{name}-v0.yaml"
    spec.write_text(
        f"name: {name}-v0\ndescription: output-length leak probe\n"
        f"workload: {{kind: trace, trace: {trace}}}\n"
        "engine: {max_num_batched_tokens: 256, max_num_seqs: 8, num_gpu_blocks: 80, "
        "block_size: 16}\ncost_model: constant:0.01\n"
    )
    return load_scenario(spec)


def _action(task: str, env, step: int):
    if task == "Priority":
        return np.linspace(-1, 1, env.action_space.shape[0], dtype=np.float32)[::-1]
    if task == "Knob":
        return np.array([0.5 + 0.5 * (step % 2), 1.0], np.float32)
    valid = np.flatnonzero(env.unwrapped.action_masks())
    return int(valid[step % len(valid)])


@pytest.mark.parametrize("task", TASKS)
def test_output_lengths_stay_hidden_until_a_request_finishes(tmp_path, task: str) -> None:
    rng = np.random.default_rng(0)
    a = [int(x) for x in rng.integers(200, 400, 40)]
    b = [x + 37 for x in a]  # every request a different length, none finishing sooner
    cls = env_class(task)
    kw = {"window_s": 0.1} if task == "Knob" else {}  # ten decisions per simulated second
    envs = [cls(scenario=_scenario(tmp_path, n, out), **kw) for n, out in (("a", a), ("b", b))]
    obs = [e.reset(seed=0)[0] for e in envs]
    steps = 0
    while not any(e.unwrapped.engine.finished for e in envs):
        for key in obs[0]:
            assert np.array_equal(obs[0][key], obs[1][key]), (task, steps, key)
        act = _action(task, envs[0], steps)
        out = [e.step(act) for e in envs]
        if not any(e.unwrapped.engine.finished for e in envs):
            # equal up to rounding: fast-forward stretches end at finishes, so sums group apart
            assert out[0][1] == pytest.approx(out[1][1], rel=1e-9, abs=1e-12), (task, steps)
        obs = [o[0] for o in out]
        steps += 1
        if out[0][2] or out[0][3]:
            break
    assert steps >= MIN_DECISIONS[task]  # a real stretch of decisions before the first finish


def test_the_oracle_column_shows_them(tmp_path) -> None:
    a = [200 + i for i in range(40)]
    cls = env_class("Priority")
    pair = [
        cls(scenario=_scenario(tmp_path, n, out), oracle=True)
        for n, out in (("a", a), ("b", a[::-1]))
    ]
    first = [e.reset(seed=0)[0] for e in pair]
    assert first[0]["mask"].any()
    assert not np.array_equal(first[0]["requests"], first[1]["requests"])
