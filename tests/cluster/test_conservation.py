"""Conservation across instances: no request lost or duplicated, blocks used + free = capacity."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmsched_gym.cluster import Cluster, InstanceSpec
from llmsched_gym.cluster.records import cluster_result
from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel

COST = LinearCostModel(0.01, c_tokens=2e-4, c_decode_kv=1e-6)


def check_blocks(cluster: Cluster) -> None:
    for x in cluster.instances:
        pool = x.engine.kv.pool
        used = sum(1 for b in range(1, pool.num_gpu_blocks) if pool.ref_cnt[b] > 0)
        assert used + pool.num_free == pool.num_gpu_blocks - 1
        assert min(pool.ref_cnt) >= 0


@st.composite
def clusters(draw):
    n_inst = draw(st.integers(1, 4))
    pd = draw(st.booleans()) and n_inst >= 2
    roles = ["both"] * n_inst
    if pd:
        k = draw(st.integers(1, n_inst - 1))
        roles = ["prefill"] * k + ["decode"] * (n_inst - k)
        roles[draw(st.integers(0, n_inst - 1))] = draw(st.sampled_from(roles + ["both"]))
        if "prefill" not in roles or "decode" not in roles:
            roles = ["prefill"] + ["decode"] * (n_inst - 1)
    prefix = tuple(draw(st.lists(st.integers(1, 9), min_size=0, max_size=20)))
    items = []
    for i in range(draw(st.integers(1, 20))):
        tail = tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=30)))
        prompt = prefix[: draw(st.integers(0, len(prefix)))] + tail
        o = draw(st.integers(1, 25))
        t = draw(st.sampled_from([0.0, 0.05, 0.2, 0.5, 1.0]))
        items.append(RequestSpec(f"r{i}", t, len(prompt), o, o + draw(st.integers(0, 2)),
                                 prompt_token_ids=prompt))  # fmt: skip
    for j in range(draw(st.integers(0, 3))):
        mk = lambda s, i, p, o, j=j: RequestSpec(f"j{j}-{s}-{i}", 0.0, p, o, o)  # noqa: E731
        items.append(Job(f"j{j}", draw(st.sampled_from([0.0, 0.3])), (
            Stage("a", (mk("a", 0, 30, 5), mk("a", 1, 12, 2))),
            Stage("b", (mk("b", 0, 40, 3),), after=("a",)),
        )))  # fmt: skip
    insts = [
        InstanceSpec(f"i{k}", COST, {"num_gpu_blocks": draw(st.integers(20, 60)), "block_size": 4,
                                     "max_num_batched_tokens": draw(st.integers(16, 64)),
                                     "max_num_seqs": draw(st.integers(2, 8))},
                     draw(st.sampled_from(["vllm-v1", "sarathi"])), roles[k])
        for k in range(n_inst)
    ]  # fmt: skip
    choices = draw(st.lists(st.integers(0, 10), min_size=1, max_size=50))
    return insts, items, choices


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_request_lost_or_duplicated_and_blocks_conserved(case) -> None:
    insts, items, choices = case
    cluster = Cluster(insts, "round-robin", pd={"kv_bytes_per_token": 1000, "link_gbps": 8.0})
    cluster.add(items)
    k = 0
    while (d := cluster.next_decision()) is not None:
        cluster.dispatch(d.instances[choices[k % len(choices)] % len(d.instances)].index)
        k += 1
        check_blocks(cluster)
    check_blocks(cluster)
    for x in cluster.instances:  # all blocks back: cached-but-unused count as free
        assert x.engine.kv.pool.num_free == x.engine.config.num_gpu_blocks - 1
        assert not x.engine.running and not len(x.engine.waiting)
    res = cluster_result(cluster, [j for j in items if isinstance(j, Job)], wall_s=0.0,
                         record_steps=False)  # fmt: skip
    t = res.request_table
    expected = {}
    for it in items:
        for s in (
            [it] if isinstance(it, RequestSpec) else [r for st_ in it.stages for r in st_.requests]
        ):
            expected[s.request_id] = min(s.output_len, s.max_tokens)
    ids = t["request_id"].tolist()
    assert sorted(ids) == sorted(expected) and len(set(ids)) == len(ids)
    assert {i: o for i, o in zip(ids, t["num_output_tokens"].tolist())} == expected
    assert (t["num_refill_tokens"] >= 0).all()
    assert (t["first_token_time_s"] <= t["finish_time_s"]).all()
    assert int(res.instances["num_output_tokens"].sum()) == sum(expected.values())
