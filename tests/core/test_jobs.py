"""Jobs: DAG release order, release times, records, and bad job specs."""

from __future__ import annotations

import math

import pytest

from llmsched_gym.core.job import Job, JobTracker, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.policies.vllm_v1 import VllmV1Policy
from llmsched_gym.simulation import simulate

CFG = {"max_num_batched_tokens": 64, "max_num_seqs": 8, "block_size": 4, "num_gpu_blocks": 64}


def r(rid: str, prompt: int = 8, out: int = 2, offset: float = 0.0) -> RequestSpec:
    return RequestSpec(rid, offset, prompt_len=prompt, output_len=out, max_tokens=out)


def diamond(job_id: str = "j", arrival: float = 1.0) -> Job:
    return Job(
        job_id,
        arrival,
        stages=(
            Stage("a", (r(f"{job_id}-a"),)),
            Stage("b", (r(f"{job_id}-b0", out=3), r(f"{job_id}-b1", out=1)), after=("a",)),
            Stage("c", (r(f"{job_id}-c", out=5),), after=("a",)),
            Stage("d", (r(f"{job_id}-d", offset=0.5),), after=("b", "c")),
        ),
        kind="test",
        slo_e2e_s=100.0,
    )


def by_id(result):
    return result.requests.set_index("request_id")


def test_stage_released_when_its_last_predecessor_finishes() -> None:
    res = simulate([diamond()], CFG, "vllm-v1", "constant:1.0")
    rq = by_id(res)
    assert set(rq.index) == {"j-a", "j-b0", "j-b1", "j-c", "j-d"}
    a_end = rq.loc["j-a", "finish_time_s"]
    # Released at the finish of stage a (the step's end), so they join the very next step.
    for rid in ("j-b0", "j-b1", "j-c"):
        assert rq.loc[rid, "arrival_time_s"] == a_end
        assert rq.loc[rid, "first_scheduled_time_s"] == a_end
        assert rq.loc[rid, "stage"] in ("b", "c") and rq.loc[rid, "job_id"] == "j"
    bc_end = max(rq.loc[x, "finish_time_s"] for x in ("j-b0", "j-b1", "j-c"))
    # d carries a 0.5 s offset after its release.
    assert rq.loc["j-d", "arrival_time_s"] == bc_end + 0.5
    assert rq.loc["j-d", "first_scheduled_time_s"] >= bc_end + 0.5
    jobs = res.jobs
    assert list(jobs["job_id"]) == ["j"]
    row = jobs.iloc[0]
    assert row["kind"] == "test" and row["num_stages"] == 4 and row["num_requests"] == 5
    assert row["arrival_time_s"] == 1.0
    assert row["finish_time_s"] == rq["finish_time_s"].max()
    assert row["latency_s"] == row["finish_time_s"] - 1.0
    assert bool(row["slo_met"]) is True
    assert res.summary["num_jobs"] == 1


def test_jobs_identical_with_and_without_fast_forward() -> None:
    jobs = [diamond(f"j{i}", arrival=0.3 * i) for i in range(6)]
    a = simulate(jobs, CFG, "vllm-v1", "constant:0.1", fast_forward=True)
    b = simulate(jobs, CFG, "vllm-v1", "constant:0.1", fast_forward=False)
    assert a.requests.equals(b.requests)
    assert a.jobs.equals(b.jobs)


def test_build_stage_decides_at_release_and_empty_stage_passes_through() -> None:
    seen: list[float] = []

    def build(t: float):
        seen.append(t)
        return [r("late-0"), r("late-1")]

    job = Job(
        "w",
        0.0,
        stages=(
            Stage("first", (r("first"),)),
            Stage("nothing", (), after=("first",)),
            Stage("later", build=build, after=("nothing",)),
        ),
    )
    res = simulate([job], CFG, "vllm-v1", "constant:1.0")
    rq = by_id(res)
    assert seen == [rq.loc["first", "finish_time_s"]]
    assert rq.loc["late-0", "arrival_time_s"] == seen[0]
    assert res.jobs.iloc[0]["num_requests"] == 3


def test_jobs_and_plain_requests_mix() -> None:
    res = simulate([diamond(), r("solo", out=4)], CFG, "vllm-v1", "constant:1.0")
    assert len(res.requests) == 6
    assert list(res.jobs["job_id"]) == ["j"]


def test_policy_sees_only_released_stages() -> None:
    views = []

    class Spy(VllmV1Policy):
        def schedule(self, ctx):
            for req in list(ctx.running):
                job = ctx.job(req)
                views.append((job.num_released, tuple(job.stages_released)))
            super().schedule(ctx)

    simulate([diamond()], CFG, Spy(), "constant:1.0", fast_forward=False)
    assert views[0] == (1, ("a",))
    assert (4, ("a", "b", "c")) in views
    assert views[-1] == (5, ("a", "b", "c", "d"))


def test_tracker_release_order_by_hand() -> None:
    tracker = JobTracker()
    (a,) = tracker.add([diamond()])
    assert a.request_id == "j-a" and a.arrival_time == 1.0 and a.stage == "a"
    released = tracker.on_finish(a, 2.0)
    assert [s.request_id for s in released] == ["j-b0", "j-b1", "j-c"]
    assert tracker.on_finish(released[0], 3.0) == []
    assert tracker.on_finish(released[2], 4.0) == []
    (d,) = tracker.on_finish(released[1], 5.0)
    assert d.request_id == "j-d" and d.arrival_time == 5.5
    assert tracker.on_finish(d, 7.0) == []
    assert tracker.states["j"].finish_time == 7.0


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ((), "at least one stage"),
        ((Stage("a"), Stage("a")), "duplicate stage name 'a'"),
        ((Stage("a", after=("zz",)),), "unknown stage 'zz'"),
        ((Stage("a", after=("b",)), Stage("b", after=("a",))), "form a cycle"),
        ((Stage("a", (r("x", offset=-1.0),)),), "negative release offset"),
    ],
)
def test_bad_jobs_are_rejected(stages, message) -> None:
    with pytest.raises(TraceError, match=message):
        Job("bad", 0.0, stages=stages)


def test_duplicate_job_and_oversized_stage_request_are_rejected() -> None:
    with pytest.raises(TraceError, match="duplicate job_id 'j'"):
        JobTracker().add([diamond(), diamond()])
    huge = Job("h", 0.0, stages=(Stage("s", (r("x"),)), Stage("t", (r("big", 10_000),), ("s",))))
    with pytest.raises(TraceError, match="'big' can never fit the KV cache"):
        simulate([huge], CFG, "vllm-v1", "constant:1.0")


def test_unfinished_job_misses_its_slo() -> None:
    from llmsched_gym.metrics.records import jobs_frame, requests_frame
    from llmsched_gym.metrics.table import request_columns

    frame = requests_frame(request_columns([]))
    jobs = jobs_frame(frame, [diamond()])
    assert len(jobs) == 1 and math.isnan(jobs.loc[0, "latency_s"])
    assert bool(jobs.loc[0, "slo_met"]) is False
