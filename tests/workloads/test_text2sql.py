"""CHESS-style Text-to-SQL workflow jobs (``llmsched_gym.workloads.text2sql``)."""

from __future__ import annotations

import json
from collections import defaultdict
from importlib import resources

import pytest

from llmsched_gym.core.job import JobTracker
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.errors import ConfigError
from llmsched_gym.workloads import text2sql as t2s


def _key(jobs):
    return [
        (
            j.job_id,
            j.arrival_time,
            j.slo_e2e_s,
            [
                (s.name, s.after, [(r.request_id, r.prompt_len, r.output_len) for r in s.requests])
                for s in j.stages
            ],
        )
        for j in jobs
    ]


def test_deterministic_under_seed():
    a = t2s.text2sql_jobs("trace3", 40, 1.0, seed=7, slo_base_s=50.0)
    b = t2s.text2sql_jobs("trace3", 40, 1.0, seed=7, slo_base_s=50.0)
    c = t2s.text2sql_jobs("trace3", 40, 1.0, seed=8, slo_base_s=50.0)
    assert _key(a) == _key(b)
    assert _key(a) != _key(c)
    ta = t2s.text2sql_jobs("trace1", 20, seed=3, slo_base_s=1.0, prompt_source="templates")
    tb = t2s.text2sql_jobs("trace1", 20, seed=3, slo_base_s=1.0, prompt_source="templates")
    assert _key(ta) == _key(tb)


@pytest.mark.parametrize("trace", t2s.TRACES)
def test_dag_structure(trace):
    jobs = t2s.text2sql_jobs(trace, 200, 2.0, seed=1, slo_base_s=10.0, slo_scale=3.0)
    assert [j.arrival_time for j in jobs] == sorted(j.arrival_time for j in jobs)
    ids = set()
    for job in jobs:
        assert job.kind == "text2sql" and job.slo_e2e_s == pytest.approx(30.0)
        names = [s.name for s in job.stages]
        assert job.stages[0].after == ()
        for prev, stage in zip(job.stages, job.stages[1:], strict=False):
            assert stage.after == (prev.name,)
        steps = [n.rstrip("0123456789") for n in names]
        assert steps.count("GC") == 1 and len(job.stages[steps.index("GC")].requests) == 2
        assert steps.count("EV") <= 1
        if "EV" in steps:
            assert len(job.stages[steps.index("EV")].requests) >= 2
        for step, stage in zip(steps, job.stages, strict=True):
            if step not in t2s.PARALLEL_STEPS:
                assert len(stage.requests) == 1
        k = steps.count("RV")
        assert 0 <= k <= 10
        assert [n for n in names if n.startswith("RV")] == [f"RV{i}" for i in range(k)]
        assert steps.index("GC") < steps.index("UT")
        for stage in job.stages:
            for i, r in enumerate(stage.requests):
                assert r.request_id == f"{job.job_id}-{stage.name}-{i}"
                assert r.arrival_time == 0.0 and r.prompt_len >= 1 and r.output_len >= 1
                assert r.deadline_s == pytest.approx(job.arrival_time + job.slo_e2e_s)
                ids.add(r.request_id)
    assert len(ids) == sum(j.num_requests for j in jobs)


@pytest.mark.parametrize("trace", ["trace1", "trace3", "formula1"])
def test_reproduces_trace_within_ten_percent(trace):
    src = t2s.load_hexgen_stats()["traces"][trace]
    n = 2000
    jobs = t2s.text2sql_jobs(trace, n, seed=0, slo_base_s=1.0)
    calls, ins, outs = defaultdict(int), defaultdict(int), defaultdict(int)
    for job in jobs:
        for stage in job.stages:
            step = stage.name.rstrip("0123456789")
            for r in stage.requests:
                calls[step] += 1
                ins[step] += r.prompt_len
                outs[step] += r.output_len
    for step, s in src["steps"].items():
        assert calls[step] / n == pytest.approx(src["calls_per_query_by_step"][step], rel=0.1)
        assert ins[step] / calls[step] == pytest.approx(s["input"]["mean"], rel=0.1)
        assert outs[step] / calls[step] == pytest.approx(s["output"]["mean"], rel=0.1)


def test_num_queries_default_and_slo_from_cost_model():
    jobs = t2s.text2sql_jobs("formula1", seed=0, cost_model=ConstantCostModel(0.5), slo_scale=2)
    assert len(jobs) == t2s.load_hexgen_stats()["traces"]["formula1"]["num_queries"]
    steps = t2s.load_hexgen_stats()["traces"]["formula1"]["steps"]
    # One step per prefill plus output-1 decode steps, 0.5 s each, over the 15-call template.
    expected = sum(0.5 * round(steps[a]["output"]["mean"]) for a in t2s.STANDARD_WORKFLOW)
    assert t2s.base_slo_s(ConstantCostModel(0.5), "formula1") == pytest.approx(expected)
    assert jobs[0].slo_e2e_s == pytest.approx(2 * expected)


def test_template_prompt_source():
    counts = t2s.load_template_counts()
    shipped = {(q["question_id"], q["db_id"]) for q in t2s.load_bird_questions()}
    assert {(q["question_id"], q["db_id"]) for q in counts["questions"]} == shipped
    fin = {q["question_id"]: q["tokens"] for q in counts["questions"] if q["db_id"] == "financial"}
    jobs = t2s.text2sql_jobs("trace1", 30, seed=2, slo_base_s=1.0, prompt_source="templates")
    for job in jobs:
        stage = {s.name: s for s in job.stages}
        gc = [r.prompt_len for r in stage["GC0"].requests]
        assert any(t["GC0"] == gc[0] and t["GC1"] == gc[1] for t in fin.values())
    prompts = t2s.chess_prompts(t2s.load_bird_questions()[0])
    assert set(prompts) == {"IR", "UT", "KW", "GC0", "GC1", "RV", "GUT", "EV"}
    assert all("{QUESTION}" not in p and "{DATABASE_SCHEMA}" not in p for p in prompts.values())


def test_job_tracker_releases_stages_in_order():
    jobs = t2s.text2sql_jobs("trace3", 5, seed=4, slo_base_s=1.0)
    tracker = JobTracker()
    pending = tracker.add(jobs)
    assert {r.stage for r in pending} == {"IR0"}
    order = defaultdict(list)
    now = 10.0
    while pending:
        spec = pending.pop(0)
        if not order[spec.job_id] or order[spec.job_id][-1] != spec.stage:
            order[spec.job_id].append(spec.stage)
        now += 1.0
        pending.extend(tracker.on_finish(spec, now))
    for job in jobs:
        assert order[job.job_id] == [s.name for s in job.stages]
        state = tracker.states[job.job_id]
        assert state.stages_finished == [s.name for s in job.stages]
        assert state.finish_time is not None and state.num_finished == job.num_requests


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"trace": "trace9"}, "trace"),
        ({"num_queries": -1}, "num_queries"),
        ({"num_queries": 2.5}, "num_queries"),
        ({"rate_per_s": 0.0}, "rate_per_s"),
        ({"rate_per_s": float("nan")}, "rate_per_s"),
        ({"slo_scale": -1.0}, "slo_scale"),
        ({"slo_base_s": 0.0}, "slo_base_s"),
        ({"prompt_source": "llm"}, "prompt_source"),
        ({"seed": -3}, "seed"),
        ({"burstiness": 0}, "burstiness"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"cost_model": object()}, "cost_model"),
        ({"cost_model": "constant:1", "slo_base_s": 5.0}, "cost_model"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        t2s.text2sql_jobs(**{"num_queries": 2, **kwargs})


def test_step_of_stage():
    assert t2s.step_of_stage("RV3") == "revise"
    assert t2s.step_of_stage("GC0") == "generate_candidate_llama-agent"
    with pytest.raises(ConfigError, match="stage"):
        t2s.step_of_stage("XX1")


def test_shipped_stats_cover_every_trace():
    doc = json.loads(
        resources.files("llmsched_gym")
        .joinpath("data/text2sql/hexgen_flow_stats.json")
        .read_text(encoding="utf-8")
    )
    assert set(doc["traces"]) == set(t2s.TRACES)
    for stats in doc["traces"].values():
        assert sum(s["count"] for s in stats["shapes"]) == stats["num_queries"]
        assert max(int(k) for k in stats["revise_rounds_k"]["histogram"]) <= 10
        for entry in stats["slots"].values():
            assert len(entry["input"]["quantiles"]) == len(doc["quantile_levels"])
