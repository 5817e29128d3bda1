"""Fast tests of ProServe's TDG metric and SlideBatching pieces."""

from __future__ import annotations

import numpy as np
from _leaderboard import load_script

from llmsched_gym.core.request import Request, RequestSpec, RequestStatus
from llmsched_gym.metrics.tdg import slo_attainment, tdg_of_times, tdg_uniform
from llmsched_gym.policies.proserve import LatencyEstimator, SlideBatchingPolicy

COEF = {"tc": 0.01, "ap": 1e-8, "bp": 0.0, "cp": 1e-5, "ad": 0.0, "bd": 1e-3}


def _req(rid, arrival=0.0, prompt=100, out=10, weight=1.0, ttft=1.0, tpot=0.1, **state):
    spec = RequestSpec(
        request_id=rid,
        arrival_time=arrival,
        prompt_len=prompt,
        output_len=out,
        max_tokens=out,
        weight=weight,
        slo_ttft_s=ttft,
        slo_tpot_s=tpot,
    )
    r = Request(spec, 0, 16)
    for k, v in state.items():
        setattr(r, k, v)
    return r


def test_tdg_hand_computed():
    # deadlines: 1.0, 1.1, 1.2, 1.3; token 2 at 1.15 misses, token 4 at exactly 1.3 misses.
    g = tdg_of_times([0.5, 1.15, 1.19, 1.3], 0.0, 1.0, 0.1, weight=2.0, wp=3.0, wd=1.0)
    assert g == 2.0 * (3.0 + 1.0)


def test_tdg_uniform_matches_even_spacing_and_slo_strict():
    table = {
        "arrival_time_s": np.array([0.0, 0.0]),
        "first_token_time_s": np.array([0.5, 1.0]),
        "finish_time_s": np.array([0.5 + 3 * 0.2, 1.3]),
        "num_output_tokens": np.array([4, 4]),
        "slo_ttft_s": np.array([1.0, 1.0]),
        "slo_tpot_s": np.array([0.1, 0.1]),
        "weight": np.array([1.0, 1.0]),
    }
    gain, ideal = tdg_uniform(table)
    exact0 = tdg_of_times([0.5, 0.7, 0.9, 1.1], 0.0, 1.0, 0.1)
    exact1 = tdg_of_times([1.0, 1.1, 1.2, 1.3], 0.0, 1.0, 0.1)
    assert np.allclose(gain, [exact0, exact1]) and np.allclose(ideal, [4, 4])
    assert list(slo_attainment(table)) == [False, False]  # tpot 0.2; ttft == SLO is not < SLO


def _policy():
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF))
    return p


def test_urgent_partition_and_density_order():
    p = _policy()
    a = _req("a", prompt=100, ttft=0.05)  # tight: urgent
    b = _req("b", prompt=100, ttft=50.0)  # loose: normal
    c = _req("c", prompt=4000, ttft=0.05, weight=2.0)  # urgent, low density (long prefill)
    order, budget, _ = p.order([b, c, a], now=0.0)
    assert p.last_partition == {"a": "URGENT", "b": "NORMAL", "c": "URGENT"}
    assert [r.request_id for r in order] == ["a", "c", "b"]
    dec = _req(
        "d",
        prompt=100,
        ttft=0.05,
        tpot=0.001,  # its next token is due at TTFT + 1 x TPOT = 0.001 s: urgent
        status=RequestStatus.RUNNING,
        num_computed_tokens=100,
        num_tokens=101,
        num_output_tokens=1,
        first_token_time=0.0,
    )
    order, _, _ = p.order([a, dec], now=0.0)
    assert p.last_partition["d"] == "URGENT"
    assert order[0].request_id == "d"  # URGENT decodes first


def test_only_modes():
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-deadline")
    p.order([_req("a", ttft=0.01), _req("b", ttft=5.0)], 0.0)
    assert set(p.last_partition.values()) == {"NORMAL"}
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-density")
    p.order([_req("a", ttft=0.01), _req("b", ttft=5.0)], 0.0)
    assert set(p.last_partition.values()) == {"URGENT"}


def _decode(rid, weight=1.0, due=0.5):
    """A running request whose next token is due ``due`` s after t=0 (code deadline)."""
    return _req(
        rid,
        prompt=100,
        weight=weight,
        ttft=0.05,
        tpot=due,
        status=RequestStatus.RUNNING,
        num_computed_tokens=100,
        num_tokens=101,
        num_output_tokens=1,
        first_token_time=0.0,
    )


def test_only_density_is_pure_density_across_stages():
    # Fig. 15's "w/ only density" keeps only the density-first strategy (§5.4; xLLM's `density`
    # DensityComparator): one density order over decodes and prefills together. With COEF a decode
    # costs 1 ms; a 20-token weight-2 prefill costs ~0.2 ms, so its density is ~10x the decode's.
    dec = _decode("dec", weight=1.0, due=0.5)
    short = _req("short", prompt=20, weight=2.0, ttft=5.0)  # dense, far deadline
    long_ = _req("long", prompt=4000, weight=1.0, ttft=0.02)  # sparse, earliest deadline
    ids = lambda order: [r.request_id for r in order]  # noqa: E731
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-density")
    order, budget, info = p.order([long_, dec, short], 0.0)
    assert ids(order) == ["short", "dec", "long"]
    assert info[short][2] > info[dec][2] > info[long_][2]
    # The latency budget is not ablated: same t_budget as the full policy on the same queue.
    assert budget == _policy().order([long_, dec, short], 0.0)[1]
    # The earlier form (all URGENT under xLLM @87e8d6e's URGENT comparator) puts decodes first.
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-density-decode-first")
    assert ids(p.order([long_, dec, short], 0.0)[0]) == ["dec", "short", "long"]
    # "w/ only deadline" is EDF over everything: the 0.02 s prefill, the 0.5 s decode, then 5 s.
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), mode="only-deadline")
    assert ids(p.order([short, dec, long_], 0.0)[0]) == ["long", "dec", "short"]


def test_getmaxchunk():
    est = LatencyEstimator(COEF)
    c = est.max_chunk(0, 0.0234, 10_000)
    assert est.prefill(c, 0) <= 0.0234 < est.prefill(c + 1, 0)
    assert est.max_chunk(0, 1e9, 123) == 123 and est.max_chunk(0, float("inf"), 7) == 7
    assert est.max_chunk(0, 0.0, 100) == 0


def test_momentum():
    est = LatencyEstimator(COEF, theta=0.5, window=10)
    est.observe(real=0.2, est=0.1)
    assert abs(est.beta - 1.5) < 1e-12
    fixed = LatencyEstimator(COEF)
    fixed.observe(0.2, 0.1)
    assert fixed.beta == 1.0


def test_starvation_rule_is_opt_in():
    # Alg. 1: URGENT prefills by density only. xLLM @87e8d6e (starve_prevent=True): prefills later
    # than one TTFT SLO past their deadline go first, by remaining time.
    old = _req("old", arrival=0.0, prompt=4000, ttft=0.05)  # 2 SLOs overdue at t=0.15
    fresh = _req("fresh", arrival=0.14, prompt=100, ttft=0.05, weight=2.0)
    p = _policy()
    order, _, _ = p.order([old, fresh], now=0.15)
    assert [r.request_id for r in order] == ["fresh", "old"]
    p = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), starve_prevent=True)
    order, _, _ = p.order([old, fresh], now=0.15)
    assert [r.request_id for r in order] == ["old", "fresh"]


# -- Weighted VTC ------------------------------------------------------------------------------
def _run(specs, policy, queue="fcfs", seqs=32, budget=1024):
    from llmsched_gym.config import EngineConfig
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.simulation import simulate

    cfg = EngineConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=seqs,
        num_gpu_blocks=20000,
        scheduling_policy=queue,
    )
    tab = simulate(specs, cfg, policy, load_cost_model("roofline:qwen2-7b@h100-80gb")).request_table
    ttft = np.asarray(tab["first_token_time_s"]) - np.asarray(tab["arrival_time_s"])
    return ttft, np.asarray(tab["priority"]), np.asarray(tab["first_token_time_s"])


def _two_classes(n=200, rate=40.0, seed=0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    specs = []
    for i in range(n):
        hi = rng.random() < 0.5
        o = int(rng.integers(20, 200))
        specs.append(
            RequestSpec(
                f"r{i}",
                float(t[i]),
                int(rng.integers(100, 1500)),
                o,
                o,
                priority=0 if hi else 1,
                weight=2.0 if hi else 1.0,
            )
        )
    return specs


def test_record_fill_reports_the_loop_without_changing_it():
    specs = _two_classes(n=120, rate=60.0)
    plain = SlideBatchingPolicy()
    probed = SlideBatchingPolicy()
    probed.record_fill = True
    a, b = _run(specs, plain, budget=512), _run(specs, probed, budget=512)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert plain.last_fill == {}
    fill = probed.last_fill
    assert set(fill) == {"t_budget", "end", "skips"}
    assert fill["end"] in ("empty", "queue-exhausted", "t_budget", "token_budget", "min_chunk")


def test_wvtc_counter_lift_on_arrival():
    from llmsched_gym.policies.proserve import WeightedVTCPolicy

    p = WeightedVTCPolicy()
    p.counters = {0: 10.0, 1: 100.0}
    p._queued = {1: 3}  # low has waiting requests, high has none (it may still be running)
    p._arrive(_req("h", weight=2.0))  # priority 0 = the high client
    assert p.counters[0] == 100.0 and p._queued[0] == 1
    p._arrive(_req("h2", weight=2.0))  # high already waiting: no second lift
    assert p.counters[0] == 100.0 and p._queued[0] == 2


def test_wvtc_is_not_strict_priority_under_load():
    """Two classes (weights 2:1) competing under load: the weight-2 class demands ~1/2 of the
    tokens, below its 2/3 share. Without VTC's lift on arrival it banks credit forever and WVTC
    equals strict priority (vLLM V1 on the priority queue): the old implementation gave the same
    high-priority TTFT to within 1%. With the lift it gets ~2:1 service, not absolute precedence."""
    from llmsched_gym.policies.proserve import WeightedVTCPolicy
    from llmsched_gym.policies.vllm_v1 import VllmV1Policy

    specs = _two_classes()
    prio_ttft, pr, _ = _run(specs, VllmV1Policy(), queue="priority")
    vtc_ttft, pr2, _ = _run(specs, WeightedVTCPolicy())
    fcfs_ttft, pr3, _ = _run(specs, VllmV1Policy())
    hi_prio, hi_vtc, hi_fcfs = (
        x[p == 0].mean() for x, p in ((prio_ttft, pr), (vtc_ttft, pr2), (fcfs_ttft, pr3))
    )
    assert hi_vtc > 1.3 * hi_prio  # not strict priority
    assert hi_vtc < 0.5 * hi_fcfs  # still favours the weight-2 class
    lo_vtc = vtc_ttft[pr2 == 1].mean()
    assert hi_vtc < lo_vtc


def test_wvtc_two_to_one_share_when_both_backlogged():
    from llmsched_gym.policies.proserve import WeightedVTCPolicy

    specs = []
    for i in range(60):
        specs.append(RequestSpec(f"h{i}", 0.001 * i, 256, 64, 64, priority=0, weight=2.0))
        specs.append(RequestSpec(f"l{i}", 0.001 * i, 256, 64, 64, priority=1, weight=1.0))
    _, pr, first = _run(specs, WeightedVTCPolicy(), seqs=4, budget=512)
    head = pr[np.argsort(first, kind="stable")[:45]]
    assert 27 <= int((head == 0).sum()) <= 33  # ~2/3 of the first 45 admissions


def test_fairbatching_blocked_prefill_does_not_stall_running_decodes():
    # b (a prefill) is ordered before a's far-from-deadline decodes but cannot get KV until a
    # finishes; the old fill loop stopped at b, scheduled nothing and deadlocked.
    from llmsched_gym.config import EngineConfig
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.policies.proserve import FairBatchingPolicy
    from llmsched_gym.simulation import simulate

    specs = [
        RequestSpec("a", 0.0, 100, 150, 150, slo_ttft_s=10.0, slo_tpot_s=1.0),
        RequestSpec("b", 0.05, 200, 100, 100, slo_ttft_s=10.0, slo_tpot_s=1.0),
    ]
    cfg = EngineConfig(
        max_num_batched_tokens=512, max_num_seqs=8, num_gpu_blocks=20, scheduling_policy="fcfs"
    )
    model = load_cost_model("roofline:qwen2-7b@h100-80gb")
    tab = simulate(specs, cfg, FairBatchingPolicy(), model).request_table
    assert list(tab["num_output_tokens"]) == [150, 100]
    assert float(np.max(tab["tpot_s"])) < 0.05


def test_paper_window_uses_the_worst_method_and_the_axis_floors():
    R = load_script("proserve", "reproduce.py", "proserve_reproduce")
    cname = "ShareGPT/Qwen2-7B"  # floors: TDG 0.7, SLO attainment 0.6
    assert R.PAPER_AXIS_FLOOR[cname] == (0.7, 0.6)

    def rows(rate, base_tdg, base_slo, ps_tdg, ps_slo):
        out = [
            {"config": cname, "rate": rate, "method": b, "tdg_ratio": t, "slo_attainment": s}
            for b, t, s in zip(R.BASELINES, base_tdg, base_slo, strict=True)
        ]
        return out + [
            {
                "config": cname,
                "rate": rate,
                "method": "ProServe",
                "tdg_ratio": ps_tdg,
                "slo_attainment": ps_slo,
            }
        ]

    data = (
        rows(8.0, [0.8, 0.9, 0.75, 0.7, 0.8], [0.7, 0.8, 0.6, 0.65, 0.7], 0.95, 0.9)
        # rate 9: one baseline's TDG (0.65) is under the 0.7 floor -> outside the window
        + rows(9.0, [0.65, 0.9, 0.8, 0.8, 0.8], [0.7, 0.8, 0.7, 0.7, 0.7], 0.99, 0.99)
        # rate 7: TDG all fine but one SLO attainment (0.55) is under the 0.6 floor
        + rows(7.0, [0.8, 0.8, 0.8, 0.8, 0.8], [0.55, 0.8, 0.8, 0.8, 0.8], 0.99, 0.99)
    )
    r = R.paper_window(data)[cname]
    assert r["window"] == [8.0]
    g, pts, at = r["tdg_best"]
    assert at == 8.0 and abs(g - (0.95 / 0.9 - 1)) < 1e-12 and abs(pts - 0.05) < 1e-12
    g, pts, at = r["tdg_worst"]
    assert abs(g - (0.95 / 0.7 - 1)) < 1e-12 and abs(pts - 0.25) < 1e-12
    g, _, _ = r["slo_best"]
    assert abs(g - (0.9 / 0.8 - 1)) < 1e-12
    g, _, _ = r["slo_worst"]
    assert abs(g - 0.5) < 1e-12  # 0.9 / 0.6 - 1
    # Lowering both floors by 0.1 admits rates 7 and 9; the best TDG gain is then at 7
    # (0.99 / 0.8 - 1 = 23.75%, above rate 9's 0.99 / 0.9 - 1 = 10%).
    loose = R.paper_window(data, slack=0.1)[cname]
    assert loose["window"] == [7.0, 8.0, 9.0]
    assert loose["tdg_best"][2] == 7.0 and abs(loose["tdg_best"][0] - (0.99 / 0.8 - 1)) < 1e-12
    # One tick below the lowest tick (TDG step 0.1, SLO step 0.2; strict): rate 7's SLO 0.55 and
    # rate 9's TDG 0.65 are admitted; a TDG of exactly floor - step (0.6) is not.
    assert R.PAPER_AXIS_STEP[cname] == (0.1, 0.2)
    wide = R.paper_window(data, axis_step=True)[cname]
    assert wide["window"] == [7.0, 8.0, 9.0] and wide["floors"] == (0.6, 0.4)
    edge = rows(10.0, [0.6, 0.9, 0.9, 0.9, 0.9], [0.9] * 5, 0.99, 0.99)
    edge += rows(11.0, [0.61, 0.9, 0.9, 0.9, 0.9], [0.41] * 5, 0.99, 0.99)
    assert R.paper_window(edge, axis_step=True)[cname]["window"] == [11.0]


def test_slo_variant_findings_table_and_stamped_slos():
    R = load_script("proserve", "reproduce.py", "proserve_reproduce")
    cname = "ShareGPT/Qwen2-7B"
    methods = [*R.BASELINES, "ProServe"]
    rows = [
        {"config": cname, "rate": 8.0, "method": m, "tdg_ratio": t, "slo_attainment": a}
        for m, t, a in zip(
            methods, [0.8, 0.9, 0.75, 0.7, 0.8, 0.99], [0.7, 0.8, 0.6, 0.65, 0.7, 0.9]
        )
    ]
    md = R.slo_findings(rows, "xllm")
    # 0.99 / 0.9 - 1 = +10.0% over the best baseline, 0.99 / 0.7 - 1 = +41.4% over the worst.
    assert "| ShareGPT/Qwen2-7B | strict | 8 | +10.0% (+0.090 at 8) | +41.4% (+0.290 at 8) |" in md
    assert "| ShareGPT/Qwen2-7B | 8 | 0.800 / 0.700 |" in md
    # The variant's overrides replace the scenario's 5x-unloaded SLOs on every request.
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.scenarios.spec import load_scenario

    sc = load_scenario(
        R.ENVS / "proserve-sharegpt-qwen2-7b-v0.yaml",
        {**R.SLO_VARIANTS["xllm"], "workload.num_requests": 20},
    )
    specs = sc.build_workload(sc.seed, cost_model=load_cost_model(sc.cost_model))
    assert {(s.slo_ttft_s, s.slo_tpot_s) for s in specs} == {(1.0, 0.05)}


def test_tbt_token_budget_does_not_buy_the_sarathi_baselines_more_kv():
    # Azure/Qwen3-32B at 2.5 req/s, 500 requests (the fine-grid point where Sarathi "won").
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.scenarios.spec import load_scenario

    R = load_script("proserve", "reproduce.py", "proserve_reproduce")
    env, over = R.CONFIGS["Azure/Qwen3-32B"][:2]
    ov = {**over, "workload.num_requests": 500, "workload.rate_per_s": 2.5}
    sc = load_scenario(R.ENVS / f"{env}.yaml", ov)
    model = load_cost_model(sc.cost_model)
    specs = sc.build_workload(sc.seed, cost_model=model)
    assert sc.engine_config(model).max_num_batched_tokens == 8192
    assert sc.engine_config(model).num_gpu_blocks == 1640  # the README's 1,640 blocks
    # TBT budget by hand: the estimator's t_c + a c^2 + b c <= median TPOT SLO.
    est = LatencyEstimator.fit(model, 8192)
    slo = float(np.median([s.slo_tpot_s for s in specs]))
    a, b, budget = est.ap, est.cp, slo - est.t_c
    c = (-b + (b * b + 4 * a * budget) ** 0.5) / (2 * a)
    assert 1280 <= c < 1344  # -> 1280, a multiple of 64
    got = R.tbt_overrides(sc, model, specs, ov)
    assert got["engine.max_num_batched_tokens"] == 1280
    assert got["engine.num_gpu_blocks"] == 1640
    cfg = load_scenario(R.ENVS / f"{env}.yaml", got).engine_config(model)
    assert (cfg.max_num_batched_tokens, cfg.num_gpu_blocks) == (1280, 1640)
    # Without the pin the smaller activation reservation gives 22% more KV blocks: the artefact
    # that made Sarathi-Priority beat ProServe near the Qwen3-32B knee on the fine grid.
    loose = {**ov, "engine.max_num_batched_tokens": 1280}
    assert load_scenario(R.ENVS / f"{env}.yaml", loose).engine_config(model).num_gpu_blocks == 1994


def test_xllm_mix_memory_lets_an_urgent_prefill_preempt_the_tail():
    # 12 blocks of 16 tokens. "a" (loose SLOs, NORMAL) decodes and holds 7-13 blocks when "b"
    # arrives with a tight TTFT (URGENT, first in the order). Default (vLLM-style gate): b's
    # whole prompt does not fit and only running requests preempt, so b waits for a to finish.
    # memory="xllm-mix" (MixScheduler): b allocates its chunk, fails, and preempts a (tail).
    from llmsched_gym.config import EngineConfig
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.simulation import simulate

    specs = [
        RequestSpec("a", 0.0, 100, 90, 90, slo_ttft_s=10.0, slo_tpot_s=1.0),
        RequestSpec("b", 0.2, 100, 5, 5, slo_ttft_s=0.05, slo_tpot_s=1.0, weight=2.0),
    ]
    cfg = EngineConfig(
        max_num_batched_tokens=512, max_num_seqs=8, num_gpu_blocks=13, scheduling_policy="fcfs"
    )
    model = load_cost_model("roofline:qwen2-7b@h100-80gb")
    out = {}
    for memory in ("vllm", "xllm-mix"):
        tab = simulate(specs, cfg, SlideBatchingPolicy(memory=memory), model).request_table
        rid = list(tab["request_id"])
        a, b = rid.index("a"), rid.index("b")
        assert int(tab["num_output_tokens"][a]) == 90 and int(tab["num_output_tokens"][b]) == 5
        out[memory] = (
            int(tab["num_preemptions"][a]),
            float(tab["first_token_time_s"][b]),
            float(tab["finish_time_s"][a]),
        )
    pre, first_b, fin_a = out["vllm"]
    assert pre == 0 and first_b > fin_a  # b waited for a
    pre, first_b, fin_a = out["xllm-mix"]
    assert pre >= 1 and first_b < fin_a  # b preempted a


def test_knee_probe_gain_split_hand_computed():
    # Two requests, wp = 3, wd = 1. "a" (weight 2, 5 tokens): first on time, 3 of 4 decodes on
    # time. "b" (weight 1, 5 tokens): first late, 1 of 4 decodes on time (catch-up 1/4).
    from llmsched_gym.metrics.tdg import TDGCollector

    kp = load_script("proserve", "knee_probe.py", "proserve_knee_probe")
    col = TDGCollector()
    col.first_on_time = {"a": True, "b": False}
    col.decode_on_time = {"a": 3, "b": 1}
    tab = {
        "request_id": np.array(["a", "b"]),
        "weight": np.array([2.0, 1.0]),
        "num_output_tokens": np.array([5, 5]),
        "tpot_s": np.array([0.02, 0.06]),
        "slo_tpot_s": np.array([0.04, 0.04]),
    }
    sp = kp.gain_split(col, tab, wp=3.0, wd=1.0)
    ideal = 2 * (3 + 4) + 1 * (3 + 4)  # 21
    assert abs(sp["first_share"] - (2 * 3 + 3) / ideal) < 1e-12
    assert abs(sp["first_lost"] - 3 / ideal) < 1e-12  # b's first token
    assert abs(sp["decode_lost"] - (2 * 1 + 1 * 3) / ideal) < 1e-12
    assert sp["late_frac"] == 0.5 and sp["late_decode_on_time"] == 0.25
    assert abs(sp["tpot_over_slo_p50"] - 1.0) < 1e-12  # median of 0.5 and 1.5


def test_wp_default_is_the_online_dataset_ratio():
    # §5.1: wp:wd = mean input / mean output. The default estimates it from the prompts seen and
    # the outputs finished; 1:1 before the first finish; a number fixes it.
    p = _policy()
    assert p.wp_mode == "dataset" and (p.wp, p.wd) == (1.0, 1.0)
    a, b = _req("a", prompt=300), _req("b", prompt=100)
    p._update_wp([a, b])
    assert p.wp == 1.0  # nothing finished yet
    a.num_output_tokens = 10
    p.on_finish(a, 1.0)
    p._update_wp([b])  # b already counted: mean prompt (300 + 100) / 2 over mean output 10
    assert p.wp == 20.0
    # Decode weight wd, prefill weight wp: the density of a fresh prefill scales with wp.
    assert p.gain_weight(b) == 20.0 and p.gain_weight(a) == 1.0
    fixed = SlideBatchingPolicy(estimator=LatencyEstimator(COEF), wp=5.0)
    fixed._update_wp([a, b])  # not called by schedule() for a fixed wp, and harmless
    assert fixed.wp_mode == 5.0
    for bad in ({"wp": "mean"}, {"wp": 0.0}, {"wd": -1.0}):
        try:
            SlideBatchingPolicy(**bad)
        except ValueError as e:
            assert "wp" in str(e)
        else:
            raise AssertionError(f"{bad} accepted")


def test_registered_proserve_and_the_reproduction_share_the_wp_default():
    from llmsched_gym.policies.registry import make_policy

    R = load_script("proserve", "reproduce.py", "proserve_reproduce")
    assert make_policy("proserve").wp_mode == "dataset"
    # The reproduction passes no wp: every ProServe method and ablation runs the default.
    for spec in {**R.METHODS, **R.ABLATIONS, **R.MOMENTUM}.values():
        assert "wp" not in spec[1] and "wd" not in spec[1]


def test_curves_findings_report_every_point_and_the_negative_ones():
    R = load_script("proserve", "reproduce.py", "proserve_reproduce")
    cname = "ShareGPT/Qwen2-7B"
    rows = []
    for mult, pro in ((2.0, 0.76), (5.0, 0.99)):
        for m, t in zip(R.BASELINES, [0.8, 0.7, 0.6, 0.5, 0.4], strict=True):
            rows.append(dict(config=cname, rate=6.0, slo_mult=mult, gamma=1.0, method=m,
                             tdg_ratio=t, slo_attainment=t))  # fmt: skip
        rows.append(dict(config=cname, rate=6.0, slo_mult=mult, gamma=1.0, method="ProServe",
                         tdg_ratio=pro, slo_attainment=pro))  # fmt: skip
    rows.append(dict(config=cname, rate=6.0, slo_mult=5.0, gamma=2.0, method="ProServe",
                     tdg_ratio=0.88, slo_attainment=0.88))  # fmt: skip
    md = R.curves_findings(rows)
    # 0.76 / 0.8 - 1 = -5.0% at 2x; 0.99 / 0.8 - 1 = +23.7% at 5x; γ = 2: 0.88 / 0.8 - 1 = +10%.
    assert "| SLO 2x | ShareGPT/Qwen2-7B | 6 | 0.760 | 0.800 | -5.0% |" in md
    assert "| SLO 2x (γ = 1) | -5.0% to -5.0% | 1/1: ShareGPT/Qwen2-7B 6 (-5.0%) |" in md
    assert "| γ = 2 (SLO 5x) | +10.0% to +10.0% | 0/1 |" in md
    assert "| SLO 5x (γ = 1) | +23.7% to +23.7% | 0/1 |" in md
