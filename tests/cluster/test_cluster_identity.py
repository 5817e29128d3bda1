"""A one-instance cluster is the plain engine: identical records, with and without jobs."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.cluster import InstanceSpec, run_cluster
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.simulation import simulate

LINEAR = LinearCostModel(0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6, c_decode=1e-4)


def tables_equal(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        x, y = a[k], b[k]
        if x.dtype == object:
            assert list(x) == list(y), k
        else:
            np.testing.assert_array_equal(x, y, err_msg=k)


def specs(n: int, seed: int) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    shared = tuple(int(t) for t in rng.integers(1, 50, 40))
    out = []
    for i in range(n):
        tail = tuple(int(t) for t in rng.integers(1, 50, int(rng.integers(1, 60))))
        prompt = shared[: int(rng.integers(0, 40))] + tail
        o = int(rng.integers(1, 30))
        out.append(
            RequestSpec(f"r{i}", float(np.round(rng.uniform(0, 3), 2)), len(prompt), o, o,
                        prompt_token_ids=prompt, priority=int(rng.integers(0, 3)))
        )  # fmt: skip
    return out


def jobs(n: int) -> list[Job]:
    def r(j: int, s: str, i: int, p: int, o: int, off: float = 0.0) -> RequestSpec:
        return RequestSpec(f"j{j}-{s}-{i}", off, p, o, o)

    out = []
    for j in range(n):
        out.append(
            Job(
                f"j{j}",
                arrival_time=0.3 * j,
                stages=(
                    Stage("a", (r(j, "a", 0, 50 + j, 3), r(j, "a", 1, 20, 7))),
                    Stage("b", (r(j, "b", 0, 80, 4, 0.1),), after=("a",)),
                    Stage("c", (r(j, "c", 0, 30, 2), r(j, "c", 1, 33, 9)), after=("a",)),
                    Stage("d", (r(j, "d", 0, 64, 5),), after=("b", "c")),
                ),
            )
        )
    return out


CFG = EngineConfig(max_num_batched_tokens=64, max_num_seqs=6, block_size=4, num_gpu_blocks=80)


@pytest.mark.parametrize("scheduler", ["vllm-v1", "sarathi", "vllm-v0"])
@pytest.mark.parametrize("fast_forward", [True, False])
def test_one_instance_equals_simulate(scheduler, fast_forward) -> None:
    cfg = CFG if scheduler != "vllm-v0" else CFG.replace(max_num_batched_tokens=200)
    items = specs(40, 1) + jobs(5)
    plain = simulate(items, cfg, scheduler, LINEAR, fast_forward=fast_forward)
    res = run_cluster(items, [InstanceSpec("only", LINEAR, cfg, scheduler)], "least-load",
                      fast_forward=fast_forward)  # fmt: skip
    tables_equal(plain.request_table, res.request_table)
    assert plain.summary.keys() == res.summary.keys()
    for k, v in plain.summary.items():
        assert v == res.summary[k] or (v != v and res.summary[k] != res.summary[k]), k
    assert plain.jobs.equals(res.jobs)
    assert res.num_steps == plain.num_steps
    assert set(res.request_table["instance_id"]) == {0}


def test_one_instance_scenario_workload_equals_simulate() -> None:
    from llmsched_gym.scenarios.spec import Scenario

    data = {
        "name": "tiny-t2s-v0",
        "description": "Text-to-SQL workflows.",
        "workload": {"kind": "text2sql", "trace": "trace3", "num_queries": 8, "rate_per_s": 1.0},
        "engine": {"max_num_batched_tokens": 8192},
        "cost_model": "roofline:llama-3.1-70b@a100-80gb/tp8",
    }
    plain = Scenario.from_dict(data).simulate()
    res = Scenario.from_dict({**data, "cluster": {"instances": [{"name": "a100"}]}}).simulate()
    tables_equal(plain.request_table, res.request_table)
    assert plain.jobs.equals(res.jobs)
    assert res.stage_shares is not None and (res.stage_shares["a100"] == 1.0).all()
