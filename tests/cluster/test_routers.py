"""Built-in routers: expected choices on a hand-made state, seeded determinism, the backlog."""

from __future__ import annotations

import pytest

from llmsched_gym.cluster import (
    Cluster,
    InstanceSpec,
    estimate_backlog_s,
    list_routers,
    make_router,
    run_cluster,
)
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import ConstantCostModel, LinearCostModel
from llmsched_gym.errors import ConfigError, PolicyError


def spec(rid: str, p: int, o: int, t: float = 0.0) -> RequestSpec:
    return RequestSpec(rid, t, p, o, o)


def cluster(blocks=(100, 100, 400), cost="constant:0.1") -> Cluster:
    insts = [
        InstanceSpec(f"i{k}", cost, {"num_gpu_blocks": b, "block_size": 16})
        for k, b in enumerate(blocks)
    ]
    return Cluster(insts, "round-robin")


def loaded() -> Cluster:
    """i0: three short requests queued; i1: one long request; i2: idle, most KV."""
    c = cluster()
    e0, e1, _ = (x.engine for x in c.instances)
    for k in range(3):
        e0.enqueue(spec(f"a{k}", 16, 2))
    e1.enqueue(spec("b0", 1000, 200))
    return c


def views(c: Cluster):
    return [x.view() for x in c.instances]


def test_views_report_instance_state() -> None:
    v0, v1, v2 = views(loaded())
    assert (v0.num_waiting, v0.num_running, v0.num_requests) == (3, 0, 3)
    assert v1.num_requests == 1 and v2.num_requests == 0
    assert v2.num_free_blocks == 399 and v2.num_gpu_blocks == 400 and v2.free_kv_tokens == 399 * 16
    assert v2.backlog_s == 0.0
    # constant:0.1 -> one prefill step (within 8192 tokens) + decode steps of the longest request
    assert v0.backlog_s == pytest.approx(0.1 * (1 + 1))
    assert v1.backlog_s == pytest.approx(0.1 * (1 + 199))


def test_expected_choices_on_a_hand_made_state() -> None:
    c = loaded()
    r = spec("new", 10, 5)
    v = views(c)
    assert make_router("least-load:requests").route(r, None, v, 0.0) == 2
    assert make_router("least-load:backlog").route(r, None, v, 0.0) == 2
    assert make_router("least-load").route(r, None, v[:2], 0.0) == 0  # 0.2 s < 20 s
    assert make_router("least-load:kv").route(r, None, v, 0.0) == 2
    assert make_router("least-load:kv").route(r, None, v[:2], 0.0) == 0  # tie -> lowest index
    rr = make_router("round-robin")
    assert [rr.route(r, None, v, 0.0) for _ in range(4)] == [0, 1, 2, 0]
    assert rr.route(r, None, [v[0], v[2]], 0.0) == 2  # skips a non-candidate (1)
    p2 = make_router("power-of-two:requests")
    p2.reset(v, seed=0)
    for _ in range(20):  # with two candidates, the less loaded always wins
        assert p2.route(r, None, v[1:], 0.0) == 2
        assert p2.route(r, None, v, 0.0) != 0 or v[0].num_requests == 0


@pytest.mark.parametrize("name", ["random", "power-of-two", "power-of-two:kv"])
def test_seeded_routers_are_deterministic(name) -> None:
    v = views(loaded())
    r = spec("new", 10, 5)

    def picks(seed):
        router = make_router(name)
        router.reset(v, seed)
        return [router.route(r, None, v, 0.0) for _ in range(40)]

    assert picks(3) == picks(3)
    assert picks(3) != picks(4)
    assert set(picks(5)) <= {0, 1, 2}


@pytest.mark.parametrize("name", sorted(list_routers()))
def test_every_router_runs_deterministically(name) -> None:
    items = [spec(f"r{i}", 20 + 7 * (i % 5), 1 + i % 9, 0.05 * i) for i in range(60)]
    insts = [InstanceSpec(f"i{k}", "constant:0.02", {"num_gpu_blocks": 64, "block_size": 8})
             for k in range(3)]  # fmt: skip
    a = run_cluster(items, insts, name, seed=7)
    b = run_cluster(items, insts, name, seed=7)
    assert a.request_table["instance_id"].tolist() == b.request_table["instance_id"].tolist()
    assert a.summary == b.summary or all(
        a.summary[k] == b.summary[k] or a.summary[k] != a.summary[k] for k in a.summary
    )
    assert a.summary["num_finished"] == 60
    if name == "round-robin":
        assert a.request_table["instance_id"].tolist() == [i % 3 for i in range(60)]


def test_backlog_estimator_is_the_linear_model_summed() -> None:
    m = LinearCostModel(0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6,
                        c_prefill=2e-3, c_decode=3e-4)  # fmt: skip
    # Two prefills (100 on 0 cached, 50 on 20 cached) in one step; decodes of 4 and 2 tokens.
    items = [(100, 0, 4, 100), (50, 20, 2, 70)]
    got = estimate_backlog_s(m, items, max_num_batched_tokens=8192)
    prefill = 0.01 + 1e-4 * 150 + 1e-8 * (100 * 100 + 50 * 50 + 2 * 20 * 50) + 2e-3 * 2
    kv = (4 * 100 + 6) + (2 * 70 + 1)
    decode = 4 * 0.01 + 1e-4 * 6 + 1e-6 * kv + 3e-4 * 6
    assert got == pytest.approx(prefill + decode)
    # A small budget splits the prefill into steps: each pays the constant.
    assert estimate_backlog_s(m, items, 50) == pytest.approx(prefill + 2 * 0.01 + decode)
    assert estimate_backlog_s(ConstantCostModel(1.0), [], 8192) == 0.0


def test_custom_router_object_and_bad_choice() -> None:
    class Last:
        name = "last"

        def route(self, request, job, instances, now):
            return instances[-1].index

    items = [spec(f"r{i}", 10, 3, 0.1 * i) for i in range(5)]
    insts = [InstanceSpec(f"i{k}", "constant:0.05", {"num_gpu_blocks": 32}) for k in range(2)]
    res = run_cluster(items, insts, Last())
    assert set(res.request_table["instance_id"].tolist()) == {1} and res.router == "last"

    class Bad:
        def route(self, request, job, instances, now):
            return 7

    with pytest.raises(PolicyError, match="router chose instance 7"):
        run_cluster(items, insts, Bad())
    with pytest.raises(ConfigError, match="unknown router 'least-lod'.*did you mean"):
        make_router("least-lod")
