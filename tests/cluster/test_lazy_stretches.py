"""Lazy decode stretches in clusters: continuing a stretch across routing decisions is exact.

A cluster's instances leave a fast-forwarded decode stretch that only the next routing decision
cut pending (``Engine.sync``). Records, step records, schedule logs, routers' views and the Route
environment's trajectories must equal those of applying every stretch at once, and of stepping.
"""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
from test_cluster_identity import jobs, tables_equal

from llmsched_gym.cluster import InstanceSpec
from llmsched_gym.cluster.cluster import Cluster
from llmsched_gym.cluster.records import cluster_result
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel

LINEAR = LinearCostModel(0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6, c_decode=1e-4)
CFG = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_gpu_blocks=120)


def workload(n: int, seed: int) -> list[RequestSpec]:
    """Requests with long decodes arriving densely (many stretches cut by arrivals)."""
    rng = np.random.default_rng(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.05))
        p = int(rng.integers(1, 40))
        o = int(rng.integers(1, 80))
        ids = tuple(int(x) for x in rng.integers(1, 20, p))
        out.append(RequestSpec(f"r{i}", round(t, 3), p, o, o, prompt_token_ids=ids))
    return out


def instances(n: int, scheduler: str = "vllm-v1") -> list[InstanceSpec]:
    return [InstanceSpec(f"i{k}", LINEAR, CFG, scheduler) for k in range(n)]


class _Counting:
    """A router that counts, at each decision, the instances holding a pending stretch."""

    def __init__(self, name: str) -> None:
        from llmsched_gym.cluster.routers import make_router

        self.inner = make_router(name)
        self.engines: list = []
        self.pending = 0

    def reset(self, instances, seed) -> None:
        reset = getattr(self.inner, "reset", None)
        if reset is not None:
            reset(instances, seed)

    def route(self, request, job, instances, now) -> int:
        self.pending += sum(e._plan is not None for e in self.engines)
        return self.inner.route(request, job, instances, now)


def run(items, specs, router, *, fast_forward=True, lazy=True, pd=None, logs=False, count=None):
    cluster = Cluster(
        specs,
        count or router,
        pd=pd,
        fast_forward=fast_forward,
        record_steps=True,
        lazy_stretches=lazy,
    )
    if count is not None:
        count.engines = [x.engine for x in cluster.instances]
    buffers = []
    if logs:
        for x in cluster.instances:
            buffers.append(io.StringIO())
            x.engine.schedule_log = buffers[-1]
    cluster.add(items)
    cluster.run()
    res = cluster_result(cluster, [x for x in items if not isinstance(x, RequestSpec)],
                         wall_s=0.0, record_steps=True)  # fmt: skip
    return res, [b.getvalue() for b in buffers]


def same_results(a, b) -> None:
    tables_equal(a.request_table, b.request_table)
    for k, v in a.summary.items():
        w = b.summary[k]
        assert v == w or (v != v and w != w), k
    for x, y in zip(a.steps, b.steps, strict=True):
        assert x.equals(y)


@pytest.mark.parametrize(
    "router", ["least-load:backlog", "round-robin", "least-load:kv", "least-load:requests"]
)
def test_lazy_equals_eager_and_stepping(router) -> None:
    items = workload(150, 3)
    count = _Counting(router)
    lazy, lazy_logs = run(items, instances(3), router, logs=True, count=count)
    assert count.pending > 50  # stretches stayed pending across decisions
    eager, eager_logs = run(items, instances(3), router, lazy=False, logs=True)
    stepped, stepped_logs = run(items, instances(3), router, fast_forward=False, logs=True)
    same_results(lazy, eager)
    same_results(lazy, stepped)
    assert lazy_logs == eager_logs == stepped_logs


def test_lazy_with_jobs_and_pd() -> None:
    items = workload(60, 5) + jobs(6)
    specs = instances(2) + [
        InstanceSpec("p0", LINEAR, CFG, "vllm-v1", role="prefill"),
        InstanceSpec("d0", LINEAR, CFG, "vllm-v1", role="decode"),
    ]
    count = _Counting("least-load:backlog")
    pd = {"kv_bytes_per_token": 4096, "link_gbps": 10.0}
    lazy, _ = run(items, specs, "least-load:backlog", pd=pd, count=count)
    assert count.pending > 0
    eager, _ = run(items, specs, "least-load:backlog", lazy=False, pd=pd)
    stepped, _ = run(items, specs, "least-load:backlog", fast_forward=False, pd=pd)
    same_results(lazy, eager)
    same_results(lazy, stepped)


def test_views_read_through_a_pending_stretch() -> None:
    """At every decision, lazy view reads equal the reads after applying the stretches."""
    cluster = Cluster(instances(3), "round-robin")
    cluster.add(workload(120, 7))
    pending = 0
    while (d := cluster.next_decision()) is not None:
        views = [x.view() for x in cluster.instances]
        lazy = [
            (v.now, v.num_running, v.num_prefill, v.num_free_blocks, v.num_waiting, v.backlog_s)
            for v in views
        ]
        pending += sum(x.engine._plan is not None for x in cluster.instances)
        synced = copy.deepcopy(cluster)
        synced.sync()
        assert all(x.engine._plan is None for x in synced.instances)
        for x in synced.instances:  # the applied state is the state stepping reaches
            e = x.engine
            assert e.kv.num_free_blocks == e.num_free_blocks
            assert e.running_prefills == sum(
                1 for r in e.running if r.num_tokens - r.num_computed_tokens > 1
            )
        fresh = [
            (v.now, v.num_running, v.num_prefill, v.num_free_blocks, v.num_waiting, v.backlog_s)
            for v in (x.view() for x in synced.instances)
        ]
        assert lazy == fresh
        cluster.dispatch(d.instances[0].index)
    assert pending > 20


def test_reading_running_or_kv_applies_the_stretch() -> None:
    cluster = Cluster(instances(2), "round-robin")
    cluster.add(workload(80, 11))
    seen = 0
    while (d := cluster.next_decision()) is not None:
        for x in cluster.instances:
            e = x.engine
            if e._plan is None:
                continue
            seen += 1
            lag = e.peek_running()[1]
            assert lag > 0
            before = [r.num_output_tokens for r in e.peek_running()[0]]
            clone = pickle.loads(pickle.dumps(e))  # a pending stretch pickles
            assert [r.num_output_tokens for r in clone.running] == [b + lag for b in before]
            assert clone._plan is None and clone.peek_running()[1] == 0
            now = e.now
            assert e.kv.num_free_blocks >= 0  # reading kv applies it; the clock stays
            assert e._plan is None and e.now == now
            assert [r.num_output_tokens for r in e.running] == [b + lag for b in before]
        cluster.dispatch(d.instances[-1].index)
    assert seen > 10


def test_deepcopy_mid_run_continues_identically() -> None:
    items = workload(100, 13)
    a = Cluster(instances(3), "least-load:backlog", record_steps=True)
    a.add(items)
    for _ in range(40):
        d = a.next_decision()
        a.dispatch(a.router.route(d.request, d.job, d.instances, d.now))
    assert any(x.engine._plan is not None for x in a.instances)
    b = copy.deepcopy(a)
    a.run()
    b.run()
    same_results(
        cluster_result(a, [], wall_s=0.0, record_steps=True),
        cluster_result(b, [], wall_s=0.0, record_steps=True),
    )


def test_route_env_trajectory_is_the_same_without_lazy_stretches(monkeypatch) -> None:
    from llmsched_gym.envs import route_v0
    from llmsched_gym.envs.route_v0 import RouteEnv

    def trajectory(env: RouteEnv, seed: int) -> list:
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        out = [obs]
        done = False
        while not done:
            valid = np.flatnonzero(env.action_masks())
            obs, r, term, trunc, info = env.step(int(rng.choice(valid)))
            out.append((obs, r, info))
            done = term or trunc
        out.append(env.records().request_table)
        return out

    overrides = {"workload.limit": 300}
    lazy = trajectory(RouteEnv("chat-azure-conv-4x-v0", scenario_overrides=overrides), 0)

    class Eager(Cluster):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, lazy_stretches=False, **kwargs)

    monkeypatch.setattr(route_v0, "Cluster", Eager)
    eager = trajectory(RouteEnv("chat-azure-conv-4x-v0", scenario_overrides=overrides), 0)
    assert len(lazy) == len(eager)
    for x, y in zip(lazy[:-1], eager[:-1], strict=True):
        ox, oy = (x, y) if isinstance(x, dict) else (x[0], y[0])
        for k in ox:
            np.testing.assert_array_equal(ox[k], oy[k], err_msg=k)
        if not isinstance(x, dict):
            assert x[1] == y[1] and x[2] == y[2]
    tables_equal(lazy[-1], eager[-1])


def test_truncated_route_episode_records_apply_pending_stretches() -> None:
    from llmsched_gym.envs.route_v0 import RouteEnv

    env = RouteEnv(
        "chat-azure-conv-4x-v0",
        scenario_overrides={"workload.limit": 300},
        max_episode_steps=120,
    )
    env.reset(seed=1)
    trunc = False
    while not trunc:
        _, _, term, trunc, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
        assert not term
    records = env.records()
    assert all(x.engine._plan is None for x in env.cluster.instances)
    assert len(records.request_table["request_id"]) == sum(
        len(x.engine.finished) for x in env.cluster.instances
    )


@pytest.mark.parametrize("scale", [1, 10**6])
def test_backlog_aggregates_of_a_pending_stretch_equal_the_loop(scale) -> None:
    """The O(1) running sums of a pending stretch equal the loop's, bit for bit.

    ``scale`` 10**6 pushes ``kv`` past 2**53, where the loop's float sum is no longer exact and
    the aggregates must fall back to it.
    """
    from llmsched_gym.cluster.routers import _engine_running_sums, _running_sums
    from llmsched_gym.core.request import Request

    rng = np.random.default_rng(scale)
    reqs = []
    for _ in range(40):
        out = int(rng.integers(0, 50)) * scale
        t = int(rng.integers(1, 3000)) * scale + out
        mt = out + int(rng.integers(30, 400)) * scale
        r = Request(RequestSpec(f"r{len(reqs)}", 0.0, t - out, mt, mt), len(reqs), 16)
        r.num_tokens, r.num_computed_tokens, r.num_output_tokens = t, t - 1, out
        reqs.append(r)
    memo: dict = {}

    class Stub:
        lag = 0

        def peek_running(self):
            return reqs, self.lag, memo

    stub = Stub()
    for lag in range(1, 30):
        stub.lag = lag
        got, want = _engine_running_sums(stub), _running_sums(reqs, lag)
        assert got == want and [type(x) for x in got] == [type(x) for x in want]
    assert "backlog" in memo
    assert (_running_sums(reqs, 1)[5] >= 2**53) == (scale > 1)  # both paths ran
