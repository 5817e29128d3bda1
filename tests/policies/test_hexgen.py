"""HexGen-Text2SQL reference agent: Eq. 2-7 on hand-computed cases, metrics, the t-test trigger."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from llmsched_gym.cluster.cluster import InstanceSpec, run_cluster
from llmsched_gym.cluster.hexgen import (
    HexGenCodeRouter,
    HexGenWBRouter,
    StagePredictor,
    TCompModel,
    eq4_score,
    stage_abbr,
)
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.policies.hexgen import (
    HexGenPQPolicy,
    TemplateState,
    eq5_budget,
    eq6_urgency,
    hexgen_metrics,
    slo_attainment,
)
from llmsched_gym.policies.hexgen_tuning import (
    betainc_regularized,
    coarse_to_fine,
    regression_detected,
    student_t_sf,
    welch_one_sided,
)
from llmsched_gym.workloads.text2sql import text2sql_jobs

# trace3 stage-mean outputs, rounded: IR 7, KW 49, GC 696, RV 156, UT 5, GUT 104, EV 30.
# Under constant:1 a request of output O costs 1 (prefill) + (O - 1) decode steps = O seconds.


def test_stage_predictor_and_tcomp_constant_model():
    p = StagePredictor("trace3")
    assert [p.output(a) for a in ("IR", "KW", "GC", "RV", "UT", "GUT", "EV")] == [
        7, 49, 696, 156, 5, 104, 30,
    ]  # fmt: skip
    model = TCompModel(ConstantCostModel(1.0))
    assert model(5000, 156) == 156.0
    assert model(10, 1) == 1.0
    # running: prompt done, 6 of 156 generated -> 150 decode steps left
    assert model.remaining(5000, 5000, 6, 156) == 150.0
    assert stage_abbr("t12-RV3-0") == "RV" and stage_abbr("plain") is None


def test_eq4_score_hand_computed():
    # (1 - 0.2) * 4 / 2 - 0.2 * 3 = 1.6 - 0.6
    assert eq4_score(0.2, 4.0, 2.0, 3.0) == pytest.approx(1.0)
    # an idle instance: t_queue floored at eps = 1 ms
    assert eq4_score(0.5, 1.0, 0.0, 2.0) == pytest.approx(0.5 * 1000 - 1.0)
    assert eq4_score(1.0, 4.0, 2.0, 3.0) == pytest.approx(-3.0)


class _Engine:
    def __init__(self, pending=()):
        self.running, self.waiting = [], []
        self._pending, self._next_arrival = list(pending), 0


def _view(index, seconds, pending=(), gpu="a100-80gb"):
    return SimpleNamespace(
        index=index,
        cost_model=ConstantCostModel(seconds),
        gpu=gpu,
        _engine=_Engine(pending),
        backlog_s=0.0,
    )


def _spec(rid, n_in=100, out=10):
    return RequestSpec(rid, 0.0, n_in, out, out)


def test_wb_router_trades_speed_against_queue():
    # fast instance 0 (0.01 s/step) holds one queued RV (156 steps = 1.56 s); slow instance 1
    # (0.02 s/step) is idle. A new RV costs 1.56 s on 0 and 3.12 s on 1.
    views = [_view(0, 0.01, [_spec("a-RV0-0")]), _view(1, 0.02)]
    req = _spec("b-RV0-0")
    r = HexGenWBRouter(alpha=0.2, beta=1.0)
    r.reset(views, 0)
    assert r.t_queue(views[0]) == pytest.approx(1.56)
    scores = r.scores(req, views)
    assert scores[0] == pytest.approx(0.8 / 1.56 - 0.2 * 1.56)
    assert scores[1] == pytest.approx(0.8 * 1000 - 0.2 * 3.12)
    assert r.route(req, None, views, 0.0) == 1  # queue term dominates
    r.set_alpha(1.0)
    assert r.route(req, None, views, 0.0) == 0  # speed only


def test_wb_router_derived_beta_is_squared_median_on_fastest():
    views = [_view(0, 0.02), _view(1, 0.01)]
    r = HexGenWBRouter(beta_scale=2.0)
    r.reset(views, 0)
    # standard workflow outputs on constant:0.01 -> costs 0.01 * O; median of 15 is UT..IR: 0.07
    costs = sorted(0.01 * StagePredictor().output(a) for a in
                   ("IR", "KW", "IR", "IR", "IR", "GC", "RV", "RV", "RV", "RV",
                    "UT", "GUT", "UT", "EV", "UT"))  # fmt: skip
    assert r.beta == pytest.approx(2.0 * costs[7] ** 2)


def test_code_router_cumulative_work_and_kappa():
    views = [_view(0, 0.01), _view(1, 0.02, gpu="a6000-48gb")]
    r = HexGenCodeRouter(alpha=0.0)
    r.reset(views, 0)
    assert r.kappa_of(views[1]) == 0.5
    # the very first request always goes to the baseline (instance 0)
    assert r.route(_spec("a-IR0-0"), None, views, 0.0) == 0
    w0 = r.assigned[0]
    assert w0 == pytest.approx(0.07)  # stage-typical IR output 7 -> 7 steps of 0.01 s
    # alpha 0: load only; instance 1 has W = 0 -> score 0 > -1
    assert r.route(_spec("b-IR0-0"), None, views, 0.0) == 1
    assert r.assigned[1] == pytest.approx(0.14)
    # load(1) = 0.5 * 0.14 / 0.07 = 1.0 = load(0): tie -> first (instance 0)
    assert r.route(_spec("c-IR0-0"), None, views, 0.0) == 0
    # work is never decremented
    assert r.assigned[0] == pytest.approx(0.14)


def test_eq5_eq6_hand_computed():
    assert eq5_budget(100.0, 20.0, 2.0, 6.0) == pytest.approx(20.0)  # 80 * 2 / 8
    assert eq6_urgency(3.0, 10.0, 4.0) == pytest.approx(-3.0)
    # paper Table 2, request 6: cost 3.2 s, budget 3.3 s, waited 27.0 s -> U = 26.9
    assert eq6_urgency(3.2, 3.3, 27.0) == pytest.approx(26.9)


def test_template_state_per_query():
    t = TemplateState()
    for a in ("IR", "KW", "IR", "IR", "IR", "GC", "RV"):
        t.consume(a)
    assert t.remaining == ["RV", "RV", "RV", "UT", "GUT", "UT", "EV", "UT"]
    t.consume("UT")  # remaining revise rounds are dropped at the first unit test
    assert t.remaining == ["GUT", "UT", "EV", "UT"]
    v = TemplateState()
    for a in ("IR", "IR", "IR", "IR"):  # the variant without extract_keywords
        v.consume(a)
    assert v.remaining[0] == "GC"
    w = TemplateState()
    for a in ("IR", "KW", "IR", "IR", "IR", "GC", *["RV"] * 6):  # more rounds than the template
        w.consume(a)
    assert w.remaining == ["UT", "GUT", "UT", "EV", "UT"]


def test_template_state_shared_code_rule():
    t = TemplateState()
    t.consume_shared("UT")
    assert "RV" not in t.remaining and t.remaining.count("UT") == 2


def test_pq_policy_budget_and_urgency_hand_computed():
    pol = HexGenPQPolicy(trace="trace3")
    pol.reset(SimpleNamespace(cost_model=ConstantCostModel(1.0)))
    job = SimpleNamespace(
        job_id="j",
        arrival_time=0.0,
        slo_e2e_s=1000.0,
        stages_released=["IR0", "KW0", "IR1", "IR2", "IR3", "GC0", "RV0"],
    )
    ctx = SimpleNamespace(now=150.0, job=lambda r: job)
    req = SimpleNamespace(request_id="j-RV0-0", num_prompt_tokens=7000, arrival_time=100.0)
    # remaining: RV RV RV UT GUT UT EV UT -> 3 * 156 + 5 + 104 + 5 + 30 + 5 = 617
    budget = 900.0 * 156.0 / (156.0 + 617.0)
    assert pol.urgency(req, ctx) == pytest.approx(156.0 - (budget - 50.0))
    # a later request of a fresh query (little elapsed, large remaining) is less urgent
    job2 = SimpleNamespace(
        job_id="k", arrival_time=140.0, slo_e2e_s=1000.0, stages_released=["IR0"]
    )
    req2 = SimpleNamespace(request_id="k-IR0-0", num_prompt_tokens=300, arrival_time=140.0)
    ctx2 = SimpleNamespace(now=150.0, job=lambda r: job2 if r is req2 else job)
    assert pol.urgency(req2, ctx2) < pol.urgency(req, ctx2)


def test_cluster_run_all_four_systems_small():
    jobs = text2sql_jobs("trace3", num_queries=4, rate_per_s=1.0, seed=0, slo_base_s=50.0)
    insts = [
        InstanceSpec("fast", "constant:0.01", {"num_gpu_blocks": 20000}),
        InstanceSpec("slow", "constant:0.02", {"num_gpu_blocks": 20000}),
    ]
    out = {}
    for name, router, pol in (
        ("rr-fcfs", "round-robin", "vllm-v1"),
        ("wb-pq", HexGenWBRouter(alpha=0.2), HexGenPQPolicy()),
        ("code-pqhol", HexGenCodeRouter(alpha=0.2), HexGenPQPolicy(head_of_line=True)),
        ("wb-shared", HexGenWBRouter(alpha=0.2), HexGenPQPolicy(template="shared")),
    ):
        specs = [InstanceSpec(i.name, i.cost_model, i.engine, pol) for i in insts]
        res = run_cluster(jobs, specs, router)
        m = hexgen_metrics(res, 50.0)
        assert m["num_finished"] == 4
        out[name] = m
    assert all(m["throughput_qps"] > 0 for m in out.values())


def test_attainment_and_min_scale():
    lat = np.array([10.0, 20.0, 30.0, 40.0, np.nan])
    att = slo_attainment(lat, 10.0, np.array([1.0, 2.5, 4.0, 100.0]))
    assert att.tolist() == [0.2, 0.4, 0.8, 0.8]
    res = SimpleNamespace(
        jobs=__import__("pandas").DataFrame(
            {
                "latency_s": np.arange(1.0, 101.0),
                "arrival_time_s": np.zeros(100),
                "finish_time_s": np.arange(1.0, 101.0),
            }
        )
    )
    m = hexgen_metrics(res, 2.0)
    assert m["deadline_95_s"] == pytest.approx(95.0) and m["min_scale_95"] == pytest.approx(47.5)
    assert m["deadline_99_s"] == pytest.approx(99.0)
    assert m["throughput_qps"] == pytest.approx(1.0)


def test_t_distribution_matches_known_values():
    assert betainc_regularized(2.0, 3.0, 0.4) == pytest.approx(0.5248, abs=1e-4)
    assert student_t_sf(0.0, 5.0) == pytest.approx(0.5)
    assert student_t_sf(2.015, 5.0) == pytest.approx(0.05, abs=5e-4)  # t_{0.95,5}
    assert student_t_sf(2.576, 1e6) == pytest.approx(0.005, abs=1e-4)
    assert student_t_sf(-1.0, 10.0) == pytest.approx(1.0 - student_t_sf(1.0, 10.0))


def test_welch_trigger():
    rng = np.random.default_rng(0)
    ref = rng.normal(100.0, 10.0, 40)
    same = rng.normal(100.0, 10.0, 40)
    worse = rng.normal(120.0, 10.0, 40)
    assert not regression_detected(same, ref)
    assert regression_detected(worse, ref)
    assert not regression_detected(ref, worse)  # one-sided: faster is no regression
    t, p = welch_one_sided([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert t == 0.0 and p == pytest.approx(0.5)
    assert math.isnan(welch_one_sided([1.0], [1.0, 2.0])[1])
    # hand: x = [3, 5], y = [1, 1, 2, 2]: se^2 = 2/2 + (1/3)/4 = 13/12; t = 2.5 / sqrt(13/12)
    t, _ = welch_one_sided([3.0, 5.0], [1.0, 1.0, 2.0, 2.0])
    assert t == pytest.approx(2.5 / math.sqrt(13 / 12))


def test_coarse_to_fine_search():
    best, values = coarse_to_fine(lambda a: (a - 0.33) ** 2)
    assert sorted(values) == [0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0]
    assert best == 0.3


def test_tuned_router_initial_tuning_and_trigger():
    from llmsched_gym.policies.hexgen_tuning import HexGenTunedRouter

    jobs = text2sql_jobs("trace3", num_queries=8, rate_per_s=0.5, seed=1, slo_base_s=50.0)
    insts = [
        InstanceSpec("fast", "constant:0.01", {"num_gpu_blocks": 20000}),
        InstanceSpec("slow", "constant:0.03", {"num_gpu_blocks": 20000}),
    ]
    router = HexGenTunedRouter(window_s=5.0)
    res = run_cluster(jobs, insts, router)
    assert res.jobs["latency_s"].notna().all()
    assert router.events and router.events[0].reason == "initial"
    assert router.alpha_trace[0] == (0.0, 0.0)  # starts at alpha = 0
    first = router.events[0]
    if first.values:
        assert set(first.values) >= {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}
        assert first.alpha == min(first.values, key=lambda a: (first.values[a], a))
    # every later tuning was triggered by a significant regression
    assert all(e.reason == "regression" and e.p_value < 0.01 for e in router.events[1:])
