"""Client aborts (``cancel_time``): vLLM's ``finish_requests(..., FINISHED_ABORTED)`` between steps.

The differential test (tests/differential, traces with ``cancel_time``) checks the schedules
against vLLM's own schedulers; these tests pin the engine's bookkeeping on tiny engines.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math

import pytest
from engine_helpers import spec, tiny_engine

from llmsched_gym.cluster import InstanceSpec
from llmsched_gym.cluster.cluster import Cluster
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestStatus
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.errors import ConfigError, TraceError
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.simulation import simulate
from llmsched_gym.workloads.trace import request_from_dict, request_to_dict


def cancelled(s, at):
    return dataclasses.replace(s, cancel_time=at)


def lines(buf):
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_running_request_is_aborted_at_the_first_step_start_at_or_after_cancel_time() -> None:
    eng, buf = tiny_engine(log=True)
    # Steps start at 0, 1, 2, ...; "a" decodes from step 1 on; cancelled at 2.5 -> gone at 3.
    eng.add_requests([cancelled(spec("a", 8, output_len=10), 2.5), spec("b", 8, output_len=6)])
    eng.run()
    (a,) = eng.aborted
    assert a.request_id == "a" and a.status is RequestStatus.FINISHED_ABORTED
    assert a.finish_time == 3.0 and a.num_output_tokens == 3
    log = lines(buf)
    assert [entry.get("aborted") for entry in log[:4]] == [None, None, None, ["a"]]
    assert "a" not in log[3]["scheduled"]
    assert [r.request_id for r in eng.finished] == ["b"]
    # Its blocks went back at the abort: "b" alone holds blocks in step 3 (2 + 1 for 8 + 3
    # tokens), and every block is free at the end.
    assert log[3]["num_free_blocks"] == 9 - 3
    assert eng._kv.pool.num_free == 9


def test_cancel_at_arrival_is_never_scheduled_and_a_finished_request_is_not_aborted() -> None:
    eng, buf = tiny_engine(log=True)
    eng.add_requests(
        [cancelled(spec("x", 8, arrival=1.0), 1.0), cancelled(spec("y", 4, output_len=2), 1.5)]
    )
    eng.run()
    assert [r.request_id for r in eng.aborted] == ["x"]
    assert eng.aborted[0].first_scheduled_time is None
    assert [r.request_id for r in eng.finished] == ["y"]  # finished at 2.0, cancel at 1.5 > 1.0
    assert all("x" not in entry["scheduled"] for entry in lines(buf))


def test_waiting_request_is_aborted_and_ties_go_in_arrival_order() -> None:
    eng, buf = tiny_engine(log=True, max_num_seqs=1)
    eng.add_requests(
        [
            spec("run", 4, output_len=5),
            cancelled(spec("w2", 4, arrival=0.5), 2.0),
            cancelled(spec("w1", 4, arrival=0.25), 2.0),
        ]
    )
    eng.run()
    assert [r.request_id for r in eng.aborted] == ["w1", "w2"]
    assert lines(buf)[2]["aborted"] == ["w1", "w2"]
    assert eng.waiting_tokens == 0 and eng.running_tokens == 0


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_fast_forward_and_stepping_abort_identically(async_scheduling) -> None:
    specs = [
        cancelled(spec(f"r{i}", 5 + i, output_len=40, arrival=i / 4), 3.0 + 2.5 * i)
        if i % 2
        else spec(f"r{i}", 5 + i, output_len=30, arrival=i / 4)
        for i in range(6)
    ]
    logs = []
    for ff in (True, False):
        buf = io.StringIO()
        eng = Engine(
            EngineConfig(
                max_num_batched_tokens=64, block_size=4, num_gpu_blocks=80,
                async_scheduling=async_scheduling,
            ),
            make_policy("vllm-v1"), ConstantCostModel(1.0), fast_forward=ff, schedule_log=buf,
        )  # fmt: skip
        eng.add_requests(specs)
        eng.run()
        logs.append(buf.getvalue())
        assert sorted(r.request_id for r in eng.aborted) == ["r1", "r3", "r5"]
        assert ff is False or eng.num_ff_steps > 0
    assert logs[0] == logs[1]


def test_records_and_summary_count_aborts() -> None:
    specs = [spec("done", 8, output_len=3), cancelled(spec("gone", 8, output_len=50), 4.0)]
    result = simulate(specs, {"max_num_batched_tokens": 64, "block_size": 4})
    table = result.request_table
    assert list(table["request_id"]) == ["done", "gone"]
    assert math.isnan(table["finish_time_s"][1]) and not math.isnan(table["finish_time_s"][0])
    # Prompt in the step [0, 1), then a token at the end of each step; aborted at 4.0.
    assert table["num_output_tokens"][1] == 4
    assert result.summary["num_aborted"] == 1
    assert result.summary["num_finished"] == 1


def test_trace_field_is_validated_and_round_trips() -> None:
    row = {"request_id": "r", "arrival_time": 2.0, "prompt_len": 4, "output_len": 2}
    spec_ = request_from_dict({**row, "cancel_time": 7.5})
    assert spec_.cancel_time == 7.5 and request_from_dict(request_to_dict(spec_)) == spec_
    assert request_from_dict(row).cancel_time is None
    with pytest.raises(TraceError, match=r"field 'cancel_time' must be a number >= arrival_time"):
        request_from_dict({**row, "cancel_time": 1.5})
    with pytest.raises(TraceError, match=r"field 'cancel_time' must be a finite number"):
        request_from_dict({**row, "cancel_time": "soon"})
    eng, _ = tiny_engine()
    with pytest.raises(TraceError, match=r"cancel_time=1.0 must be a number >= its arrival"):
        eng.add_requests([cancelled(spec("r", 4, arrival=2.0), 1.0)])


def test_jobs_and_clusters_refuse_cancel_times() -> None:
    eng, _ = tiny_engine()
    job = Job("j", 0.0, (Stage("s", (cancelled(spec("r", 4), 1.0),)),))
    with pytest.raises(ConfigError, match="job 'j': request 'r' has a cancel_time"):
        eng.add_jobs([job])
    cfg = EngineConfig(max_num_batched_tokens=64, block_size=4, num_gpu_blocks=20)
    cluster = Cluster([InstanceSpec("i0", ConstantCostModel(1.0), cfg, "vllm-v1")], "round-robin")
    with pytest.raises(ConfigError, match="request 'r' has a cancel_time"):
        cluster.add([cancelled(spec("r", 4), 1.0)])


def test_a_built_stage_or_a_job_line_may_not_carry_a_cancel_time() -> None:
    """A build stage's requests are checked at release; a trace line of a job when read."""
    eng, _ = tiny_engine()
    late = Stage("fix", after=("s",), build=lambda now: [cancelled(spec("r2", 4), 9.0)])
    eng.add_jobs([Job("j", 0.0, (Stage("s", (spec("r1", 4),)), late))])
    with pytest.raises(ConfigError, match="job 'j': stage 'fix' built request 'r2' with a "
                       "cancel_time; a job cannot lose a request"):  # fmt: skip
        eng.run()
    row = {"request_id": "r", "arrival_time": 0.0, "prompt_len": 4, "output_len": 2,
           "cancel_time": 1.0}  # fmt: skip
    with pytest.raises(ConfigError, match="request 'r' has a cancel_time and belongs to job 'q'"):
        simulate([dataclasses.replace(cancelled(spec("r", 4), 1.0), job_id="q")], {"block_size": 4})
    for field in ("job_id", "stage"):
        with pytest.raises(TraceError, match=rf"t\.jsonl:3: field 'cancel_time' is not allowed "
                           rf"on a request of a job \({field} 'q'\)"):  # fmt: skip
            request_from_dict({**row, field: "q"}, "t.jsonl:3")
