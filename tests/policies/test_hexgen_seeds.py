"""HexGen-Text2SQL multi-seed statistics (leaderboards/hexgen/seeds.py) on hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from _leaderboard import load_script

S = load_script("hexgen", "seeds.py", "hexgen_seeds")


@pytest.mark.parametrize(
    ("p", "df", "q"),
    [(0.975, 1, 12.7062), (0.975, 3, 3.182446), (0.975, 10, 2.228139), (0.95, 5, 2.015048)],
)
def test_t_quantile_matches_tables(p, df, q):
    assert S.t_quantile(p, df) == pytest.approx(q, abs=1e-4)
    assert S.t_quantile(1 - p, df) == pytest.approx(-q, abs=1e-4)


def test_sign_test_p_hand_computed():
    # 9 wins, 1 loss: 2 * (C(10,0) + C(10,1)) / 2^10 = 22/1024.
    assert S.sign_test_p(9, 1) == pytest.approx(22 / 1024)
    assert S.sign_test_p(2, 1) == pytest.approx(1.0)  # 2 * 4/8, capped at 1
    assert math.isnan(S.sign_test_p(0, 0))


def test_log_ratio_stats_hand_computed():
    # Ratios 2, 1/2, 1, 4: logs a*(1, -1, 0, 2) with a = ln 2, mean a/2, so gmean sqrt(2);
    # sample sd a*sqrt(5/3), se a*sqrt(5/3)/2, t_{.975,3} = 3.182446.
    st = S.log_ratio_stats([2.0, 0.5, 1.0, 4.0])
    a = math.log(2.0)
    se = a * math.sqrt(5.0 / 3.0) / 2.0
    assert st["n"] == 4
    assert st["gmean"] == pytest.approx(math.sqrt(2.0))
    assert st["lo"] == pytest.approx(math.exp(a / 2 - 3.182446 * se), rel=1e-5)
    assert st["hi"] == pytest.approx(math.exp(a / 2 + 3.182446 * se), rel=1e-5)
    assert st["lo"] == pytest.approx(0.3404, abs=1e-3) and st["hi"] == pytest.approx(
        5.874, abs=1e-2
    )
    assert (st["wins"], st["ties"], st["losses"]) == (2, 1, 1)
    assert st["p_sign"] == pytest.approx(1.0)  # 2 wins vs 1 loss
    assert st["mean"] == pytest.approx(1.875) and st["max"] == 4.0 and st["min"] == 0.5
    assert 0.45 < st["p_t"] < 0.55  # t = 0.7746 on 3 df


def test_pair_ratios_orientation_and_pooled_stats():
    # Two seeds, one configuration at 1.0 q/s: every ratio is oriented so that > 1 = WB+PQ better.
    rows = []
    d95 = {"RR+FCFS": 300.0, "RR+PQ": 240.0, "WB+FCFS": 210.0, "WB+PQ": 200.0}
    thr = {"RR+FCFS": 0.1, "RR+PQ": 0.1, "WB+FCFS": 0.2, "WB+PQ": 0.2}
    for seed, scale in ((0, 1.0), (1, 1.1)):
        for name in d95:
            wbpq = name == "WB+PQ"
            rows.append(
                {
                    "seed": seed,
                    "hetero": 1,
                    "trace": 3,
                    "rate_qps": 1.0,
                    "system": name,
                    "deadline_95_s": d95[name] * (scale if wbpq else 1.0),
                    "deadline_99_s": d95[name],
                    "throughput_qps": thr[name],
                    "mean_latency_s": d95[name] / 2,
                }
            )
    runs = pd.DataFrame(rows)
    ratios = S.pair_ratios(runs)
    q = ratios[ratios["comparison"] == "queue deadline95 WB+FCFS/WB+PQ"].set_index("seed")["ratio"]
    assert q[0] == pytest.approx(1.05) and q[1] == pytest.approx(210 / 220)
    t = ratios[ratios["comparison"] == "throughput@1.0 WB+PQ/RR+FCFS"]["ratio"]
    assert list(t) == pytest.approx([2.0, 2.0])
    stats = S.ratio_stats_table(ratios)
    pooled = stats[
        (stats["comparison"] == "queue deadline95 WB+FCFS/WB+PQ")
        & (stats["group"] == "pooled (seed x config)")
    ].iloc[0]
    assert pooled["n"] == 2 and (pooled["wins"], pooled["losses"]) == (1, 1)
    assert pooled["gmean"] == pytest.approx(math.sqrt(1.05 * 210 / 220))
    assert pooled["ci95_lo"] < 1.0 < pooled["ci95_hi"]
    best = S.best_share(runs).set_index("system")
    assert best.loc["WB+PQ", "strictly_lowest"] == 1  # seed 0 only (seed 1: WB+FCFS 210 < 220)
    assert best.loc["WB+FCFS", "strictly_lowest"] == 1


def test_cap_table_pairs_each_cap_with_the_uncapped_vllm_baseline():
    # One seed, one configuration at 1.0 q/s; RR+FCFS (cap 0 = none) is shared by every cap.
    rows = [dict(seed=0, hetero=1, trace=3, rate_qps=1.0, system="RR+FCFS", cap=0,
                 deadline_95_s=400.0, throughput_qps=0.10)]  # fmt: skip
    for cap, fcfs, pq in ((4, 330.0, 300.0), (16, 240.0, 250.0)):
        for name, d in (("WB+FCFS", fcfs), ("WB+PQ", pq)):
            rows.append(dict(seed=0, hetero=1, trace=3, rate_qps=1.0, system=name, cap=cap,
                             deadline_95_s=d, throughput_qps=0.12))  # fmt: skip
    table = S.cap_table(pd.DataFrame(rows))
    pooled = table[table["group"] == "pooled (seed x config)"]
    t = pooled.set_index(["comparison", "cap"])["gmean"]
    assert t[("queue deadline95 WB+FCFS/WB+PQ", 4)] == pytest.approx(1.1)
    assert t[("queue deadline95 WB+FCFS/WB+PQ", 16)] == pytest.approx(0.96)
    assert t[("deadline95 RR+FCFS/WB+PQ", 16)] == pytest.approx(1.6)
    assert t[("throughput@1.0 WB+PQ/RR+FCFS", 4)] == pytest.approx(1.2)
    assert set(t.index.get_level_values("cap")) == {4, 16}
    # One by-seed row per (comparison, cap); with one configuration per seed it equals pooled.
    by_seed = table[table["group"] == "by seed (mean log over configs)"]
    assert len(by_seed) == len(pooled)
    assert by_seed["gmean"].to_numpy() == pytest.approx(pooled["gmean"].to_numpy())


def test_cap_table_by_seed_averages_each_seeds_configurations_first():
    # Two seeds x two configurations: the by-seed interval has n = 2 (seeds), pooled n = 4.
    rows = []
    for seed, ratios in ((0, (1.1, 1.3)), (1, (1.2, 1.0))):
        for hetero, ratio in zip((1, 2), ratios, strict=True):
            key = dict(seed=seed, hetero=hetero, trace=3, rate_qps=0.5, cap=8, throughput_qps=0.1)
            rows.append(key | dict(system="WB+PQ", deadline_95_s=100.0))
            rows.append(key | dict(system="WB+FCFS", deadline_95_s=100.0 * ratio))
            rows.append(key | dict(system="RR+FCFS", cap=0, deadline_95_s=150.0))
    table = S.cap_table(pd.DataFrame(rows))
    q = table[table["comparison"] == "queue deadline95 WB+FCFS/WB+PQ"].set_index("group")
    assert q.loc["pooled (seed x config)", "n"] == 4
    assert q.loc["by seed (mean log over configs)", "n"] == 2
    seed_means = [np.sqrt(1.1 * 1.3), np.sqrt(1.2 * 1.0)]
    assert q.loc["by seed (mean log over configs)", "gmean"] == pytest.approx(
        np.sqrt(seed_means[0] * seed_means[1])
    )
    assert (
        q.loc["by seed (mean log over configs)", "ci95_lo"]
        < q.loc["pooled (seed x config)", "ci95_lo"]
    )
