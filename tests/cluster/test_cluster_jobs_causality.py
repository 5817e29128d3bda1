"""Across instances, a stage is released at the latest finish of its predecessors (finishes are
reported out of time order) and no instance runs ahead of a release it could receive."""

from __future__ import annotations

from llmsched_gym.scenarios import load_scenario


def test_stage_release_is_the_latest_predecessor_finish_across_instances() -> None:
    sc = load_scenario("text2sql-hetero1-v0", {"workload.num_queries": 6})
    res = sc.simulate(seed=1)
    rq = res.requests
    assert rq["instance_id"].nunique() > 1
    workload = {j.job_id: j for j in sc.build_workload(1)}
    for job_id, rows in rq.groupby("job_id"):
        job = workload[job_id]
        finish = rows.groupby("stage")["finish_time_s"].max()
        arrival = rows.groupby("stage")["arrival_time_s"].min()
        for stage in job.stages:
            if stage.after:
                want = max(finish[d] for d in stage.after) + min(
                    (r.arrival_time for r in stage.requests), default=0.0
                )
                assert arrival[stage.name] == want, (job_id, stage.name)
    jobs = res.jobs.set_index("job_id")
    assert (jobs["finish_time_s"] == rq.groupby("job_id")["finish_time_s"].max()).all()


def test_no_request_is_scheduled_before_it_arrives() -> None:
    res = load_scenario("text2sql-hetero2-v0", {"workload.num_queries": 6}).simulate(seed=2)
    rq = res.requests
    assert (rq["first_scheduled_time_s"] >= rq["arrival_time_s"]).all()
