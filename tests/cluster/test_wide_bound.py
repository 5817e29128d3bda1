"""The cluster's wide causal bound: instances run ahead to the others' next possible finishes.

With jobs or PD, a finish on one instance creates an arrival (a stage, a hand-off) that may be
routed anywhere. ``Cluster.wide_bound`` lets an instance run past the others' next step starts,
up to their next possible finishes (``Engine.next_finish_start``); ``wide_bound = False`` is the
lock-step loop. Every record, step, schedule log, job, routing decision and environment
trajectory must be the same either way, while the wide bound makes far fewer engine advances.
"""

from __future__ import annotations

import copy
import hashlib
import io

import numpy as np
import pytest
from test_cluster_identity import jobs, tables_equal
from test_lazy_stretches import same_results

from llmsched_gym.cluster import InstanceSpec
from llmsched_gym.cluster.cluster import Cluster
from llmsched_gym.cluster.records import cluster_result
from llmsched_gym.cluster.routers import make_router
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.scenarios import load_scenario

FAST = LinearCostModel(0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6, c_decode=1e-4)
SLOW = LinearCostModel(0.013, c_tokens=2e-4, c_prefill_attn=1e-8, c_decode_kv=3e-6, c_decode=1e-4)
CFG = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_gpu_blocks=120)


def chains(n: int, seed: int, whole: bool = False) -> list[Job]:
    """Workflows of three stages with long decodes (stretches cut by other instances' finishes).

    ``whole``: jobs arrive at whole seconds.
    """
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        arrival = float(rng.uniform(0, 4))
        def r(s: str, i: int) -> RequestSpec:
            o = int(rng.integers(1, 150))
            return RequestSpec(f"c{j}-{s}-{i}", 0.0, int(rng.integers(2, 40)), o, o)

        out.append(
            Job(
                f"c{j}",
                arrival_time=float(round(arrival)) if whole else round(arrival, 3),
                stages=(
                    Stage("a", tuple(r("a", i) for i in range(int(rng.integers(1, 4))))),
                    Stage("b", (r("b", 0), r("b", 1)), after=("a",)),
                    Stage("c", (r("c", 0),), after=("b",)),
                ),
            )
        )
    return out


def singles(n: int, seed: int, whole: bool = False) -> list[RequestSpec]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        o = int(rng.integers(1, 80))
        arrival = float(rng.uniform(0, 4))
        arrival = float(round(arrival)) if whole else round(arrival, 3)
        out.append(RequestSpec(f"r{i}", arrival, int(rng.integers(1, 40)), o, o))
    return out


class _Log:
    """A router that records what each decision saw (time, request, every view's readings)."""

    def __init__(self, name: str) -> None:
        self.inner = make_router(name)
        self.seen: list[tuple] = []

    def reset(self, instances, seed) -> None:
        reset = getattr(self.inner, "reset", None)
        if reset is not None:
            reset(instances, seed)

    def route(self, request, job, instances, now) -> int:
        self.seen.append((
            now, request.request_id, None if job is None else repr(job),
            [(v.index, v.num_requests, v.num_free_blocks, v.backlog_s) for v in instances],
        ))  # fmt: skip
        return self.inner.route(request, job, instances, now)


def run(items, specs, router, *, wide: bool, pd=None) -> tuple:
    log = _Log(router)
    cluster = Cluster(specs, log, pd=pd, record_steps=True)
    cluster.wide_bound = wide
    buffers = []
    for x in cluster.instances:
        buffers.append(io.StringIO())
        x.engine.schedule_log = buffers[-1]
    cluster.add(items)
    cluster.run()
    res = cluster_result(cluster, [x for x in items if isinstance(x, Job)],
                         wall_s=0.0, record_steps=True)  # fmt: skip
    return res, [b.getvalue() for b in buffers], log.seen, cluster.num_advances


def assert_same(a: tuple, b: tuple) -> None:
    same_results(a[0], b[0])
    assert (a[0].jobs is None and b[0].jobs is None) or a[0].jobs.equals(b[0].jobs)
    assert a[1] == b[1]  # schedule logs
    assert a[2] == b[2]  # every routing decision's inputs


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("scheduler", "router"),
    [("vllm-v1", "round-robin"), ("vllm-v1", "least-load:backlog"), ("sarathi", "least-load:kv")],
)
def test_jobs_on_a_heterogeneous_cluster(seed, scheduler, router) -> None:
    items = chains(12, seed) + jobs(3) + singles(30, seed)
    specs = [
        InstanceSpec("f0", FAST, CFG, scheduler),
        InstanceSpec("s0", SLOW, CFG, scheduler),
        InstanceSpec("f1", FAST, CFG.replace(num_gpu_blocks=60), scheduler),
    ]
    wide = run(items, specs, router, wide=True)
    lock = run(items, specs, router, wide=False)
    assert_same(wide, lock)
    assert wide[3] < 0.6 * lock[3], (wide[3], lock[3])  # far fewer engine advances


@pytest.mark.parametrize("seed", [0, 3])
def test_ties_with_a_constant_cost(seed) -> None:
    """Whole-second steps: finishes and step starts tie across instances all the time."""
    items = chains(10, seed, whole=True) + singles(20, seed, whole=True)
    specs = [InstanceSpec(f"c{i}", "constant:1.0", CFG, "vllm-v1") for i in range(3)]
    assert_same(run(items, specs, "round-robin", wide=True),
                run(items, specs, "round-robin", wide=False))  # fmt: skip


def test_pd_without_jobs() -> None:
    items = singles(60, 4)
    specs = [
        InstanceSpec("p0", FAST, CFG, "vllm-v1", role="prefill"),
        InstanceSpec("p1", SLOW, CFG, "vllm-v1", role="prefill"),
        InstanceSpec("d0", FAST, CFG, "vllm-v1", role="decode"),
        InstanceSpec("d1", SLOW, CFG, "vllm-v1", role="decode"),
    ]
    pd = {"kv_bytes_per_token": 4096, "link_gbps": 10.0}
    assert_same(run(items, specs, "round-robin", wide=True, pd=pd),
                run(items, specs, "round-robin", wide=False, pd=pd))  # fmt: skip


def _table_hash(result) -> str:
    h = hashlib.sha256()
    for frame in (result.requests, result.jobs):
        if frame is not None:
            for col in frame.columns:
                h.update(str(col).encode() + repr(frame[col].tolist()).encode())
    return h.hexdigest()


@pytest.mark.parametrize(
    ("scenario", "overrides", "seed"),
    [
        ("text2sql-hetero1-v0", {"workload.num_queries": 25}, 0),
        ("text2sql-hetero2-v0", {"workload.num_queries": 25}, 1),
        ("hexgen-hetero1-trace3-v0", {"workload.num_queries": 12}, 0),  # urgency reads jobs
        ("hexgen-hetero2-trace1-v0", {"workload.num_queries": 12}, 2),
        ("proserve-pd-sharegpt-v0", {"workload.num_requests": 80}, 0),
    ],
)
def test_scenarios_simulate_the_same(monkeypatch, scenario, overrides, seed) -> None:
    sc = load_scenario(scenario, overrides)
    wide = _table_hash(sc.simulate(seed=seed))
    monkeypatch.setattr(Cluster, "wide_bound", False)
    assert _table_hash(sc.simulate(seed=seed)) == wide


def _trajectory(scenario: str, overrides: dict, seed: int) -> list:
    from llmsched_gym.envs.route_v0 import RouteEnv

    env = RouteEnv(scenario, scenario_overrides=overrides)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out: list = [obs]
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
        out.append((obs, r, info))
        done = term or trunc
    out.append(env.records().request_table)
    return out


@pytest.mark.parametrize(
    ("scenario", "overrides", "seed"),
    [
        ("text2sql-hetero1-v0", {"workload.num_queries": 12}, 0),
        ("text2sql-hetero1-v0", {"workload.num_queries": 12}, 5),
        ("text2sql-hetero2-v0", {"workload.num_queries": 12}, 1),
        ("chat-azure-conv-4x-v0", {"workload.limit": 150}, 0),
    ],
)
def test_route_env_episodes_are_the_same(monkeypatch, scenario, overrides, seed) -> None:
    wide = _trajectory(scenario, overrides, seed)
    monkeypatch.setattr(Cluster, "wide_bound", False)
    lock = _trajectory(scenario, overrides, seed)
    assert len(wide) == len(lock)
    for x, y in zip(wide[:-1], lock[:-1], strict=True):
        ox, oy = (x, y) if isinstance(x, dict) else (x[0], y[0])
        for k in ox:
            np.testing.assert_array_equal(ox[k], oy[k], err_msg=k)
        if not isinstance(x, dict):
            assert x[1] == y[1] and x[2] == y[2]
    tables_equal(wide[-1], lock[-1])


def _engine_in_a_stretch() -> Engine:
    eng = Engine(CFG, make_policy("vllm-v1"), FAST, record_steps=True)
    eng.lazy_stretches = True
    eng.add_requests([RequestSpec(f"q{i}", 0.0, 10 + i, 30 + 7 * i, 30 + 7 * i)
                      for i in range(4)])  # fmt: skip
    eng.advance()  # the prefills
    assert eng.advance(eng.now + 0.02) and eng._plan is not None  # a stretch, cut short
    return eng


def test_next_finish_start_is_the_first_finishing_step() -> None:
    eng = _engine_in_a_stretch()
    ref = copy.deepcopy(eng)
    bound = eng.next_finish_start(float("inf"))
    assert bound > eng.now
    ref.sync()
    while True:  # step the copy to its first finish
        start, done = ref.now, len(ref.finished)
        ref.step()
        if len(ref.finished) > done:
            break
    assert start == bound
    assert eng.next_finish_start(bound) == bound  # priced once, kept


def test_pricing_ahead_changes_nothing() -> None:
    a = _engine_in_a_stretch()
    b = copy.deepcopy(a)
    a.next_finish_start(a.now + 0.1)  # partly priced ahead, then further
    a.next_finish_start(float("inf"))
    for until in (a.now + 0.05, a.now + 0.051, a.now + 0.3, float("inf")):
        while a.advance(until):
            pass
        while b.advance(until):
            pass
        assert a.now == b.now and len(a.finished) == len(b.finished)
    tables_equal(a.step_columns(), b.step_columns())
    assert a.itl_values == b.itl_values and a.itl_weights == b.itl_weights
    for x, y in zip(a.finished, b.finished, strict=True):
        assert (x.request_id, x.finish_time, x.first_token_time) == (
            y.request_id, y.finish_time, y.first_token_time)  # fmt: skip
