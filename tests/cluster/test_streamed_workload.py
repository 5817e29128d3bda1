"""Long cluster runs in bounded memory (issue 29): streamed workloads and summary-only records.

``run_cluster`` streams any iterable that is not a list (``Cluster.stream``): the requests are
pulled in batches as the run reaches them and must come sorted by arrival. The run must equal
the one of the same requests given as a list, records and summary bit for bit.
``records="summary"`` keeps no spec of a finished request; its summary (means, sums and
percentiles) and per-instance tables must equal the full records' exactly.
"""

from __future__ import annotations

import dataclasses
import gc

import numpy as np
import pytest
from test_cluster_identity import jobs, specs, tables_equal

from llmsched_gym.cluster import InstanceSpec, run_cluster
from llmsched_gym.cluster.cluster import Cluster
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.errors import ConfigError, TraceError
from llmsched_gym.workloads import iter_servegen

LINEAR = LinearCostModel(0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6, c_decode=1e-4)
CFG = EngineConfig(
    max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_gpu_blocks=120, max_model_len=100
)
PD = {"kv_bytes_per_token": 100_000, "link_gbps": 100.0}


def _instances(kind: str) -> list[InstanceSpec]:
    roles = {
        "one": ("both",),
        "three": ("both", "both", "both"),
        "pd": ("prefill", "decode", "both"),
    }[kind]
    return [InstanceSpec(f"i{k}", LINEAR, CFG, "vllm-v1", role) for k, role in enumerate(roles)]


def _sorted_specs(n: int, seed: int, *, slo_from: int | None = None) -> list[RequestSpec]:
    """``n`` requests sorted by arrival, one too long for ``max_model_len`` (refused), and
    from the ``slo_from``-th on a TTFT SLO on every other request and a deadline on every
    third."""
    out = sorted(specs(n, seed), key=lambda s: s.arrival_time)
    out[n // 2] = dataclasses.replace(out[n // 2], prompt_len=95, prompt_token_ids=(1,) * 95)
    if slo_from is not None:
        for i in range(slo_from, n):
            ttft = 0.5 if i % 2 else None
            deadline = out[i].arrival_time + 4.0 if i % 3 == 0 else None
            out[i] = dataclasses.replace(out[i], slo_ttft_s=ttft, deadline_s=deadline)
    return out


def _same_results(a, b) -> None:
    tables_equal(a.request_table, b.request_table)
    for x, y in zip(a.itl, b.itl, strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    assert repr(a.summary) == repr(b.summary)
    assert a.instances.equals(b.instances)


@pytest.mark.parametrize(
    ("kind", "router"),
    [("one", "round-robin"), ("three", "least-load:requests"), ("three", "power-of-two"),
     ("pd", "least-load:backlog")],
)  # fmt: skip
def test_streamed_workload_equals_the_list(kind: str, router: str) -> None:
    items = _sorted_specs(300, 5)
    pd = PD if kind == "pd" else None
    listed = run_cluster(items, _instances(kind), router, pd=pd, seed=3)
    streamed = run_cluster((x for x in items), _instances(kind), router, pd=pd, seed=3)
    _same_results(listed, streamed)
    assert streamed.summary["num_refused"] > 0  # (equal: the summaries are)


def test_stream_batches_and_a_later_add_keep_the_order() -> None:
    """Over several pulled batches, and with a list added while the stream is routed."""
    items = sorted(specs(2600, 9), key=lambda s: s.arrival_time)
    late = [dataclasses.replace(x, request_id=f"late-{x.request_id}") for x in items[::50]]
    a = Cluster(_instances("three"), "least-load:requests", keep_finished=False)
    a.add(items)
    a.add(late)  # (the first list is still being routed: these go on the heap)
    b = Cluster(_instances("three"), "least-load:requests", keep_finished=False)
    b.stream(iter(items))
    b.add(late)
    for cluster in (a, b):
        cluster.run()
    from llmsched_gym.cluster.records import cluster_result

    _same_results(*(cluster_result(c, [], wall_s=0.0, record_steps=False) for c in (a, b)))


@pytest.mark.parametrize("kind", ["one", "three"])
@pytest.mark.parametrize("slo_from", [None, 0, 170])
def test_summary_records_give_the_same_summary(kind: str, slo_from: int | None) -> None:
    items = _sorted_specs(300, 7, slo_from=slo_from)
    full = run_cluster(items, _instances(kind), "least-load:requests", seed=1)
    summary = run_cluster(iter(items), _instances(kind), "least-load:requests", seed=1,
                          records="summary")  # fmt: skip
    assert repr(summary.summary) == repr(full.summary)  # every value, bit for bit
    if slo_from is not None:
        assert not np.isnan(full.summary["slo_attainment"])
    assert summary.instances.equals(full.instances)
    assert summary.gpus.equals(full.gpus)
    assert summary.records == "summary" and summary.request_table == {} and summary.itl is None
    with pytest.raises(ConfigError, match="records='summary'.*records='full'"):
        _ = summary.requests


def test_bad_streams_and_records_are_refused() -> None:
    items = _sorted_specs(40, 2)
    unsorted = items[:30] + [dataclasses.replace(items[3], request_id="early")] + items[30:]
    with pytest.raises(TraceError, match="'early' arrives at .* before .*must be sorted"):
        run_cluster(iter(unsorted), _instances("three"))
    with pytest.raises(ConfigError, match="stream holds no requests"):
        run_cluster(iter([]), _instances("three"))
    with pytest.raises(ConfigError, match="workload holds no requests"):
        run_cluster([], _instances("three"))
    with pytest.raises(ConfigError, match="RequestSpecs only, got job 'j0'"):
        run_cluster(iter(jobs(2)), _instances("three"))
    with pytest.raises(ConfigError, match="a workload holds RequestSpecs and Jobs, got int"):
        run_cluster(iter([items[0], 7]), _instances("three"))
    with pytest.raises(ConfigError, match="records must be one of"):
        run_cluster(items, _instances("three"), records="none")
    with pytest.raises(ConfigError, match="records='summary' does not support jobs"):
        run_cluster(jobs(2), _instances("three"), records="summary")
    with pytest.raises(ConfigError, match="records='summary' does not support PD"):
        run_cluster(items, _instances("pd"), pd=PD, records="summary")
    cluster = Cluster(_instances("three"))
    cluster.add(items)
    with pytest.raises(ConfigError, match="still routing an earlier workload"):
        cluster.stream(iter(items))


def _live_specs() -> int:
    return sum(type(o) is RequestSpec for o in gc.get_objects())


def test_a_stream_holds_a_bounded_number_of_specs() -> None:
    """With records='summary' the specs go as their requests finish (and as routed, admitted)."""
    n = 12_000
    base = _sorted_specs(n, 13)
    spread = [dataclasses.replace(x, arrival_time=x.arrival_time * n / 300) for x in base]
    peak = [0]

    def lazy():  # each spec made when pulled, as a generator would
        for i, x in enumerate(spread):
            if i % 3000 == 2999:
                gc.collect()
                peak[0] = max(peak[0], _live_specs())
            yield dataclasses.replace(x)

    del base
    gc.collect()
    before = _live_specs()
    result = run_cluster(lazy(), _instances("three"), "least-load:requests", records="summary")
    assert result.summary["num_requests"] + result.summary["num_refused"] == n
    # The batch pulled ahead (1024) plus each engine's admitted specs before they are dropped
    # (1024 each), against the n the list and the full records would hold.
    assert peak[0] - before <= 1024 + 3 * 1024 + 3 * CFG.max_num_seqs + 100


def test_a_servegen_stream_runs_as_its_list() -> None:
    """``bench_scale.py``'s bounded run in small: ``iter_servegen`` streamed, summary records."""
    gpus = ("a100-80gb", "h100-80gb")
    cluster = [InstanceSpec(f"{g}-{i}", f"roofline:llama-3-8b@{g}", {"max_model_len": None})
               for i, g in enumerate(gpus)]  # fmt: skip
    kwargs = dict(duration_s=120.0, target_rate_per_s=4.0, seed=2)
    listed = run_cluster(list(iter_servegen("m-small", **kwargs)), cluster, "least-load:requests")
    streamed = run_cluster(iter_servegen("m-small", chunk_s=30.0, **kwargs), cluster,
                           "least-load:requests", records="summary")  # fmt: skip
    assert listed.summary["num_requests"] > 300
    assert repr(streamed.summary) == repr(listed.summary)
