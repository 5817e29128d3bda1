"""Cluster records folded as requests finish (issue 29): the same records, bounded memory.

``Cluster`` folds each finished request into ``FinishedRecords`` (typed columns) and packs the
engines' inter-token samples into typed arrays; ``keep_finished=False`` (what ``run_cluster``
uses) also drops the finished ``Request`` objects. The records must equal those read off the
kept ``Request`` objects (``metrics.table.request_columns``, instance by instance, sorted by
routing order), with and without ``keep_finished``, with jobs and under PD disaggregation.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from test_cluster_identity import jobs, specs, tables_equal

from llmsched_gym.cluster import InstanceSpec
from llmsched_gym.cluster.cluster import Cluster, Column
from llmsched_gym.cluster.records import cluster_result
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import Request
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.metrics.table import request_columns, request_table

LINEAR = LinearCostModel(0.01, c_tokens=1e-4, c_prefill_attn=1e-8, c_decode_kv=1e-6, c_decode=1e-4)
CFG = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=4, num_gpu_blocks=120)


def _instances(pd: bool) -> list[InstanceSpec]:
    roles = ("prefill", "decode", "both") if pd else ("both", "both", "both")
    return [InstanceSpec(f"i{k}", LINEAR, CFG, "vllm-v1", role) for k, role in enumerate(roles)]


def _run(items: list, pd: bool, keep: bool) -> tuple[Cluster, object]:
    settings = {"kv_bytes_per_token": 100_000, "link_gbps": 100.0} if pd else None
    cluster = Cluster(_instances(pd), "least-load:backlog", pd=settings, keep_finished=keep)
    cluster.add(items)
    cluster.run()
    jobs_ = [x for x in items if not hasattr(x, "request_id")]
    return cluster, cluster_result(cluster, jobs_, wall_s=0.0, record_steps=False)


def _kept_table(cluster: Cluster) -> dict:
    """The request table read off the kept ``Request`` objects (the records before folding)."""
    parts, keys = [], []
    for inst in cluster.instances:
        cols = request_columns(inst.engine.finished, instance_id=inst.index)
        parts.append(cols)
        keys.extend(cluster.order[rid] for rid in cols["request_id"])
    order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable").tolist()
    merged = {name: [v for cols in parts for v in cols[name]] for name in parts[0]}
    return request_table({name: [values[i] for i in order] for name, values in merged.items()})


@pytest.mark.parametrize("workload", ["requests", "jobs"])
def test_folded_records_equal_the_requests_records(workload: str) -> None:
    items = specs(120, 3) if workload == "requests" else jobs(6)
    kept, result = _run(items, pd=False, keep=True)
    tables_equal(result.request_table, _kept_table(kept))
    itl_values = [v for x in kept.instances for v in x.engine.itl_values]
    assert len(itl_values) < len(result.itl[0])  # most were packed as they came
    _, dropped = _run(items, pd=False, keep=False)
    tables_equal(dropped.request_table, result.request_table)


@pytest.mark.parametrize("pd", [False, True])
def test_dropping_finished_requests_changes_no_record(pd: bool) -> None:
    items = specs(150, 7)
    a_cluster, a = _run(items, pd, keep=True)
    b_cluster, b = _run(items, pd, keep=False)
    tables_equal(a.request_table, b.request_table)
    for x, y in zip(a.itl, b.itl, strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    assert a.itl[1].dtype == np.int64 and a.itl[0].dtype == np.float64
    assert repr(a.summary) == repr(b.summary)
    assert a.instances.equals(b.instances)
    assert sum(len(x.engine.finished) for x in b_cluster.instances) == 0
    assert not b_cluster.order and not b_cluster.final
    assert len(a_cluster.final) == len(items)
    assert len(b_cluster.handoffs) > 0 if pd else not b_cluster.handoffs
    assert [v.num_finished for v in b_cluster._views] == [
        len(x.engine.finished) for x in a_cluster.instances
    ]


def _num_requests() -> int:
    """Live ``Request`` objects; ``type()``, since ``isinstance`` reads ``__class__`` of every
    object, which makes some (torch's deprecated module attributes) warn."""
    return sum(issubclass(type(o), Request) for o in gc.get_objects())


def test_finished_requests_are_released() -> None:
    """Without ``keep_finished`` no finished ``Request`` outlives its step."""
    items = specs(400, 11)
    gc.collect()
    before = _num_requests()
    cluster, _ = _run(items, pd=False, keep=False)
    gc.collect()
    alive = _num_requests() - before
    assert len(cluster.records) == len(items)
    assert alive <= 3 * CFG.max_num_seqs  # at most the last steps' batches, not 400
    kept, _ = _run(items, pd=False, keep=True)
    gc.collect()
    assert _num_requests() - before >= len(items)
    del kept


def test_column_widens_instead_of_truncating() -> None:
    col = Column("B")
    col.buffer.extend([1, 255])
    col.flush()
    col.buffer.extend([3, 70_000, 2**40])
    col.flush()
    assert col.data.typecode == "q"
    assert col.numpy(np.int64).tolist() == [1, 255, 3, 70_000, 2**40]
    floats = Column("d")
    floats.buffer.extend([0.5, None, 2])
    assert np.isnan(floats.numpy(np.float64)).tolist() == [False, True, False]
    big = Column("q")
    big.buffer.append(2**70)
    with pytest.raises(OverflowError):
        big.flush()
