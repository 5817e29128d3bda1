"""HexGen-Text2SQL reference agent: Eq. 2-7 on hand-computed cases, metrics, the t-test trigger."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from _leaderboard import load_script

from llmsched_gym.cluster.cluster import InstanceSpec, run_cluster
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.hexgen import (
    HexGenCodeRouter,
    HexGenPQPolicy,
    HexGenWBRouter,
    StagePredictor,
    TCompModel,
    TemplateState,
    drain_bound_s,
    eq4_score,
    eq5_budget,
    eq6_urgency,
    hexgen_metrics,
    slo_attainment,
    stage_abbr,
)
from llmsched_gym.policies.hexgen.pricing import CODE_TABLE_SCALE
from llmsched_gym.policies.hexgen.tuning import (
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


def _kth_latency(arrival, finish, perm, target):
    lat = np.sort(np.asarray(finish)[list(perm)] - np.asarray(arrival))
    return lat[math.ceil(target * len(lat) - 1e-9) - 1]


def test_drain_bound_hand_computed_and_never_beaten_by_any_order():
    import itertools

    # 4 queries, 75%: k = 3, f_(3) = 120, last arrival 30 -> 90 s.
    arrival, finish = [0.0, 10.0, 20.0, 30.0], [130.0, 100.0, 120.0, 110.0]
    assert drain_bound_s(arrival, finish, 0.75) == pytest.approx(90.0)
    # 100%: the last completion minus the last arrival; an unfinished query -> inf.
    assert drain_bound_s(arrival, finish, 1.0) == pytest.approx(100.0)
    assert drain_bound_s(arrival, [100.0, np.nan, 120.0, 110.0], 1.0) == math.inf
    # No assignment of these completion times to queries (any local order at this throughput)
    # gets a deadline below the bound; FIFO (sorted to sorted) attains the 100% one exactly.
    rng = np.random.default_rng(0)
    for _ in range(30):
        a = np.sort(rng.uniform(0, 50, 6))
        f = rng.uniform(60, 200, 6)
        for q in (0.5, 0.8, 1.0):
            best = min(_kth_latency(a, f, p, q) for p in itertools.permutations(range(6)))
            assert best >= drain_bound_s(a, f, q) - 1e-9
        fifo = np.sort(f) - a
        assert fifo.max() >= drain_bound_s(a, f, 1.0) - 1e-9
    with pytest.raises(ConfigError):
        drain_bound_s([0.0], [1.0, 2.0])


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
    from llmsched_gym.policies.hexgen import HexGenTunedRouter

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


def test_tuned_router_by_name_gets_the_cluster_runner():
    from llmsched_gym.cluster.cluster import Cluster
    from llmsched_gym.policies.hexgen import HexGenTunedRouter

    insts = [InstanceSpec("a", "constant:0.01", {"num_gpu_blocks": 20000})]
    cluster = Cluster(insts, "hexgen-wb-tuned")
    assert isinstance(cluster.router, HexGenTunedRouter)
    assert cluster.router._run_cluster is run_cluster  # bound before reset, never imported
    loose = HexGenTunedRouter()
    with pytest.raises(ConfigError, match="bind_runner"):
        loose.replay_mean_latency([], 0.0)


# -- Hexgen-Flow's engine step (serial_prefill) --------------------------------------------------


class _Recording(HexGenPQPolicy):
    """Serial-prefill policy whose urgency is given per request id; records every step."""

    def __init__(self, urgencies=None, **kw):
        super().__init__(serial_prefill=True, **kw)
        self.urgencies = urgencies or {}
        self.steps: list[dict] = []

    def urgency(self, req, ctx):
        return self.urgencies.get(req.request_id, 0.0)

    def schedule(self, ctx):
        super().schedule(ctx)
        self.steps.append(
            {
                "admitted": [r.request_id for r, _ in ctx.new + ctx.resumed],
                "prefill": [r.request_id for r, n in ctx.scheduled.items() if n > 1],
                "decode": [r.request_id for r, n in ctx.scheduled.items() if n == 1],
                "running_before": len(ctx.running) - len(ctx.new) - len(ctx.resumed),
            }
        )


def _serial_engine(policy, specs, **cfg):
    from llmsched_gym.config import EngineConfig
    from llmsched_gym.core.engine import Engine

    config = EngineConfig.from_dict(
        {"max_num_batched_tokens": 2048, "num_gpu_blocks": 512, "block_size": 16, **cfg}
    )
    eng = Engine(config, policy, ConstantCostModel(0.01), fast_forward=False)
    eng.add_requests(specs)
    return eng


def _req(rid, arrival, prompt, out):
    return RequestSpec(rid, arrival, prompt_len=prompt, output_len=out, max_tokens=out)


def test_serial_prefill_one_admission_and_no_mixed_steps():
    specs = [_req(f"r{i}", 0.005 * i, 100 + 10 * i, 5 + i % 4) for i in range(12)]
    pol = _Recording()
    eng = _serial_engine(pol, specs)
    eng.run()
    assert len(eng.finished) == 12
    admitting = 0
    for s in pol.steps:
        assert len(s["admitted"]) <= 1  # at most one admission per step
        assert len(s["prefill"]) <= 1  # one prefill, alone
        assert not (s["prefill"] and s["decode"])  # decodes never share a step with a prefill
        admitting += bool(s["admitted"])
        if not s["prefill"] and s["decode"]:
            assert len(s["decode"]) == s["running_before"]  # a decode step takes every request
    assert admitting == 12
    # vLLM's own step batches them: several admissions in one step, decodes mixed in.
    plain = _Recording()
    plain.serial_prefill = False
    eng = _serial_engine(plain, specs)
    eng.run()
    assert max(len(s["admitted"]) for s in plain.steps) > 1


def test_serial_prefill_chunked_prompt_continues_alone():
    # a 5000-token prompt under a 2048-token budget: three prefill steps, nothing else in them
    specs = [_req("long", 0.0, 5000, 3), _req("short", 0.001, 50, 3)]
    pol = _Recording()
    eng = _serial_engine(pol, specs)
    eng.run()
    chunks = [s for s in pol.steps if s["prefill"] == ["long"]]
    assert len(chunks) == 3 and all(not s["decode"] for s in chunks)
    first_short = next(i for i, s in enumerate(pol.steps) if "short" in s["prefill"])
    last_chunk = max(i for i, s in enumerate(pol.steps) if s["prefill"] == ["long"])
    assert first_short > last_chunk


def test_serial_prefill_urgency_order_and_fcfs():
    # all arrive at 0: the urgency queue prefills them by decreasing urgency, FCFS by arrival
    specs = [_req(f"r{i}", 0.0, 64, 4) for i in range(5)]
    urg = {"r0": 1.0, "r1": 5.0, "r2": -3.0, "r3": 4.0, "r4": 2.0}
    pol = _Recording(urgencies=urg)
    _serial_engine(pol, specs).run()
    order = [s["admitted"][0] for s in pol.steps if s["admitted"]]
    assert order == ["r1", "r3", "r4", "r0", "r2"]
    fcfs = _Recording(urgencies=urg, fcfs=True)
    _serial_engine(fcfs, specs).run()
    assert [s["admitted"][0] for s in fcfs.steps if s["admitted"]] == [f"r{i}" for i in range(5)]


def test_serial_prefill_head_of_line_blocking():
    # 11 usable blocks of 16 tokens. "a" runs (3 blocks); "big" (most urgent, 150 tokens = 10
    # blocks) cannot fit while "a" holds its blocks; "small" (2 blocks) can.
    specs = [_req("a", 0.0, 40, 30), _req("big", 0.001, 150, 2), _req("small", 0.001, 20, 2)]
    urg = {"a": 9.0, "big": 5.0, "small": 1.0}
    hol = _Recording(urgencies=urg, head_of_line=True)
    _serial_engine(hol, specs, num_gpu_blocks=12).run()
    admitted = [s["admitted"][0] for s in hol.steps if s["admitted"]]
    assert admitted == ["a", "big", "small"]  # nothing passes the blocked most-urgent request
    i_big = next(i for i, s in enumerate(hol.steps) if s["admitted"] == ["big"])
    blocked = [s for s in hol.steps[1:i_big] if s["decode"]]
    assert blocked and all(s["decode"] == ["a"] for s in blocked)  # decode steps meanwhile
    skip = _Recording(urgencies=urg, head_of_line=False)
    _serial_engine(skip, specs, num_gpu_blocks=12).run()
    assert [s["admitted"][0] for s in skip.steps if s["admitted"]][:2] == ["a", "small"]


def test_serial_prefill_registered_and_validated():
    from llmsched_gym.policies.registry import make_policy

    pq = make_policy("hexgen-pq-serial")
    fc = make_policy("hexgen-fcfs-serial")
    assert pq.serial_prefill and pq.hol and not pq.fcfs
    assert fc.serial_prefill and fc.fcfs
    assert make_policy("hexgen-pq-admit1").max_admit == 1
    with pytest.raises(ConfigError):
        HexGenPQPolicy(serial_prefill=True, max_admit=1)


def test_code_cost_ratio_and_constant_decode():
    from llmsched_gym.policies.hexgen import CODE_DECODE_S, HexGenCodeCost, hexgen_cost

    a100 = "roofline:llama-3.1-70b@a100-80gb/tp8"
    ref = hexgen_cost(a100)
    six = hexgen_cost("roofline:llama-3.1-70b@a6000-48gb/tp8", "code-ratio")
    assert six.gpu == "a6000-48gb"
    for feats in ((1, 0, 3000, 0, 1), (32, 0, 96000, 0, 32), (4000, 16 * 10**6, 0, 1, 0)):
        assert six.step_time(*feats) == pytest.approx(ref.step_time(*feats) * 0.058 / 0.035)
    table = hexgen_cost("roofline:llama-3.1-70b@l40s-48gb/tp8", "code-table")
    assert table.step_time(1, 0, 3000, 0, 1) == pytest.approx(
        ref.step_time(1, 0, 3000, 0, 1) * 66.81 / 37.52
    )
    assert hexgen_cost(a100, "code-ratio").step_time(1, 0, 3000, 0, 1) == ref.step_time(
        1, 0, 3000, 0, 1
    )
    with pytest.raises(ConfigError):
        hexgen_cost(a100, "measured")
    own = hexgen_cost("roofline:llama-3.1-70b@a6000-48gb/tp8")
    assert six.num_gpu_blocks(16, 0.9) == own.num_gpu_blocks(16, 0.9)  # KV of its own GPU
    const = HexGenCodeCost(ConstantCostModel(0.5), decode_s=CODE_DECODE_S["a6000"])
    assert const.step_time(64, 0, 10**6, 0, 64) == 0.058  # decode: batch-independent
    assert const.step_time(65, 4096, 100, 1, 1) == 0.5  # a step with a prefill: the model
    got = const.step_times(
        np.array([1, 64, 65]), np.zeros(3), np.array([5, 10**6, 100]), np.array([0, 0, 1]),
        np.array([1, 64, 1]),
    )  # fmt: skip
    assert got.tolist() == [0.058, 0.058, 0.5]


def test_code_engine_cluster_run_and_tuner_code_score():
    from llmsched_gym.policies.hexgen import HexGenCodeCost, HexGenTunedRouter

    jobs = text2sql_jobs("trace3", num_queries=4, rate_per_s=1.0, seed=0, slo_base_s=50.0)
    fast = HexGenCodeCost(ConstantCostModel(0.01), decode_s=0.01)
    slow = HexGenCodeCost(ConstantCostModel(0.01), scale=2.0, decode_s=0.02)
    for router, pol in (
        ("round-robin", HexGenPQPolicy(fcfs=True, serial_prefill=True)),
        (HexGenCodeRouter(alpha=0.2), HexGenPQPolicy(serial_prefill=True, head_of_line=True)),
        (HexGenTunedRouter(window_s=5.0, score="code"), HexGenPQPolicy(serial_prefill=True)),
    ):
        specs = [
            InstanceSpec("fast", fast, {"num_gpu_blocks": 20000}, pol),
            InstanceSpec("slow", slow, {"num_gpu_blocks": 20000}, pol),
        ]
        m = hexgen_metrics(run_cluster(jobs, specs, router), 50.0)
        assert m["num_finished"] == 4
    assert router.events and router._code is not None
    assert router._code.alpha == router.alpha


def _reproduce_module():
    mod = load_script("hexgen", "reproduce.py", "hexgen_reproduce")
    mod.ensure_registered()
    return mod


@pytest.mark.slow
def test_code_engine_urgency_queue_lowers_latency_trace3():
    # Hexgen-Flow's engine (serial prefill, constant decode, its small KV): waiting queues form
    # and the urgency queue lowers the mean latency (leaderboard: 443.5 s vs 478.4 s).
    r = _reproduce_module()
    sc = r.scenario(1, 3, 0.5, 0)
    base = r.base_of(sc, "code-engine")
    lat = {}
    for name, pol in (("fcfs", r.fcfs_policy("code-engine")), ("pq", r.pq_policy("code-engine"))):
        res = r.run(sc, r.wb_router("code", 0.2), pol, "code-engine")
        m = hexgen_metrics(res, base)
        assert m["num_finished"] == m["num_queries"]
        lat[name] = m["mean_latency_s"]
    assert lat["pq"] < 0.97 * lat["fcfs"]


@pytest.mark.slow
def test_code_table_pricing_deadline_ratio_near_paper():
    # Slow GPUs priced at the code's fallback-table ratio: RR+FCFS / WB+PQ at 95% within
    # +-30% of the paper's 1.41x (leaderboard, Trace 3 Hetero-1 0.5 q/s).
    r = _reproduce_module()
    sc = r.scenario(1, 3, 0.5, 0)
    base = r.base_of(sc, "code-table")
    systems = r.systems(0.2, "code-table", "paper")
    d95 = {}
    for name in ("RR+FCFS", "WB+PQ"):
        mk_router, mk_policy = systems[name]
        d95[name] = hexgen_metrics(r.run(sc, mk_router(), mk_policy(), "code-table"), base)[
            "deadline_95_s"
        ]
    assert 0.7 * 1.41 <= d95["RR+FCFS"] / d95["WB+PQ"] <= 1.3 * 1.41


def test_reproduce_a100_card_variant_swaps_only_the_a100_and_its_reference():
    # queue probe part 4: the code's A100 is the 40 GB card (hardware_params.py:28-34); the
    # code-* modes must then scale the A6000 from that card, not from the shipped A100-80GB.
    r = _reproduce_module()
    default, card = r.scenario(1, 3, 0.5, 0), r.scenario(1, 3, 0.5, 0, a100="a100-40gb")
    assert [g["cost_model"] for g in card.cluster["instances"]] == [
        "roofline:llama-3.1-70b@a100-40gb/tp8",
        "roofline:llama-3.1-70b@a6000-48gb/tp8",
    ]
    assert card.cost_model.endswith("@a100-40gb/tp8")
    for sc, gpu in ((default, "a100-80gb"), (card, "a100-40gb")):
        a100, _, a6000, _ = r.instance_models(sc, "code-table")
        assert a100.speed.gpu == gpu and a6000.speed.gpu == gpu
        assert a6000.kv_model.gpu == "a6000-48gb"
        step = (10000, 10**8, 0, 1, 0)
        assert a6000.step_time(*step) == pytest.approx(
            a100.step_time(*step) * CODE_TABLE_SCALE["a6000"], rel=1e-9
        )
    # the 40 GB card is slower and holds far less KV than the 80 GB one
    assert r.base_of(card, "code-table") > r.base_of(default, "code-table")
    kv80 = r.instance_models(default, "code-table")[0].kv_model.num_gpu_blocks()
    kv40 = r.instance_models(card, "code-table")[0].kv_model.num_gpu_blocks()
    assert kv40 < 0.5 * kv80


class _CapProbe(HexGenPQPolicy):
    """Records the engine's running count after each schedule."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.peak = 0

    def schedule(self, ctx):
        super().schedule(ctx)
        self.peak = max(self.peak, len(ctx.running))


@pytest.mark.parametrize("serial", [False, True])
def test_coordinator_cap_bounds_the_running_requests_and_queues_the_rest(serial):
    jobs = text2sql_jobs("trace3", num_queries=6, rate_per_s=5.0, seed=0, slo_base_s=50.0)
    insts = [InstanceSpec("one", "constant:0.01", {"num_gpu_blocks": 20000})]
    peaks = {}
    for cap in (2, None):
        pol = _CapProbe(max_running=cap, serial_prefill=serial, head_of_line=serial)
        res = run_cluster(jobs, [InstanceSpec(i.name, i.cost_model, i.engine, pol) for i in insts])
        assert hexgen_metrics(res, 50.0)["num_finished"] == 6
        peaks[cap] = pol.peak
    assert peaks[2] == 2 < peaks[None]
    for bad in (0, True, -3):
        with pytest.raises(ConfigError, match="max_running"):
            HexGenPQPolicy(max_running=bad)


def test_uncapped_fcfs_coordinator_is_vllm_v1():
    # The cap curve's WB+FCFS without a cap is the vLLM baseline's local step.
    jobs = text2sql_jobs("trace3", num_queries=4, rate_per_s=1.0, seed=0, slo_base_s=50.0)
    insts = [InstanceSpec("one", "constant:0.01", {"num_gpu_blocks": 20000})]
    lat = []
    for pol in ("vllm-v1", HexGenPQPolicy(fcfs=True)):
        res = run_cluster(jobs, [InstanceSpec(i.name, i.cost_model, i.engine, pol) for i in insts])
        lat.append(hexgen_metrics(res, 50.0)["mean_latency_s"])
    assert lat[0] == lat[1]
