"""Multi-seed statistics of the HexGen-Text2SQL reproduction (issue 10, ``code-table`` mode).

Usage::

    .venv/bin/python leaderboards/hexgen/seeds.py --seeds 0-19             # Fig. 2-4, ~90 s/seed
    .venv/bin/python leaderboards/hexgen/seeds.py --seeds 0-4 --part alpha # Fig. 5, ~4 min/seed
    .venv/bin/python leaderboards/hexgen/seeds.py --seeds 0-4 --part tune  # §4.3, ~100 s/seed
    .venv/bin/python leaderboards/hexgen/seeds.py --rescore                # tables from the CSVs

The workload seed changes the sampled CHESS workflows, their lengths and the Poisson arrivals
(``text2sql_jobs``). Each part runs ``reproduce.py``'s systems, scenarios and pricing
(``reproduce.systems`` / ``scenario`` / ``base_of`` / ``run``) for every seed and appends one row
per run to a raw CSV (``runs.csv``, ``alpha_runs.csv``, ``tuning_runs.csv``; seeds already
there are skipped). The statistics are always recomputed from all raw rows:

* every ratio is oriented so that ``> 1`` means WB+PQ is better (lower deadline, higher
  throughput), one ratio per (seed, configuration) pair;
* ``gmean`` and a t-interval on the log ratios pooled over the seed x configuration pairs
  (``pooled``; the pairs of one seed share workflow samples across clusters and rates, so this
  interval is optimistic) and over per-seed mean log ratios (``by seed``; seeds are
  independent, the conservative interval);
* a sign count: pairs in which WB+PQ is strictly better / tied / worse, with an exact
  two-sided sign-test p-value (ties dropped).

Writes ``results/full/<mode>/seeds/``: the raw CSVs, ``ratios.csv`` (one row per pair),
``stats.csv`` (per configuration and pooled), ``alpha.csv`` and ``seeds.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reproduce as R  # noqa: E402

from llmsched_gym.leaderboard.experiments import paper_value  # noqa: E402
from llmsched_gym.policies.hexgen import HexGenTunedRouter, hexgen_metrics  # noqa: E402
from llmsched_gym.policies.hexgen.tuning import student_t_sf  # noqa: E402

CONFIG = ["hetero", "trace", "rate_qps"]
HETEROS, TRACES, RATES = (1, 2), (1, 2, 3), (0.5, 1.0)
ALPHA_GRID = [round(0.1 * k, 1) for k in range(11)]


def _paper(exp_id: str) -> tuple[float, float]:
    """(average, maximum) the paper reports for experiment ``exp_id`` of experiments.yaml."""
    p = paper_value(R.HERE / "experiments.yaml", exp_id)
    return float(p["value"]), float(p["max"])


COMPARISONS = [
    # (name, metric, numerator system, denominator system, rates, paper avg, paper max)
    ("deadline95 RR+FCFS/WB+PQ", "deadline_95_s", "RR+FCFS", "WB+PQ", RATES,
     *_paper("deadline-code-table")),
    ("deadline99 RR+FCFS/WB+PQ", "deadline_99_s", "RR+FCFS", "WB+PQ", RATES,
     *_paper("deadline99-code-table")),
    ("throughput@1.0 WB+PQ/RR+FCFS", "throughput_qps", "WB+PQ", "RR+FCFS", (1.0,),
     *_paper("throughput-code-table")),
    ("dispatch deadline95 RR+PQ/WB+PQ", "deadline_95_s", "RR+PQ", "WB+PQ", RATES,
     *_paper("dispatch-code-table")),
    ("queue deadline95 WB+FCFS/WB+PQ", "deadline_95_s", "WB+FCFS", "WB+PQ", RATES,
     *_paper("queue-code-table")),
    ("queue mean latency WB+FCFS/WB+PQ", "mean_latency_s", "WB+FCFS", "WB+PQ", RATES, math.nan,
     math.nan),
]  # fmt: skip
"""Every ratio is ``numerator / denominator`` with ``> 1`` = WB+PQ better; the paper's average
and maximum come from experiments.yaml."""


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (``0 < p < 1``).

    Inverts ``student_t_sf`` (the tuner's own t CDF) by bisection; no SciPy.
    """
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p!r}, df={df!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_sf(hi, df) > 1.0 - p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if student_t_sf(mid, df) > 1.0 - p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign-test p-value of ``wins`` vs ``losses`` (ties already dropped)."""
    n = wins + losses
    if n == 0:
        return math.nan
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def log_ratio_stats(ratios: Any, level: float = 0.95) -> dict[str, float]:
    """Paired statistics of ratios (``> 1`` = better): geometric mean, t-interval, signs.

    Args:
        ratios: Positive finite ratios, one per pair.
        level: Two-sided confidence level of the interval on the mean log ratio.

    Returns:
        ``n``, ``gmean`` (exp of the mean log ratio), ``lo``/``hi`` (exp of the t-interval of
        the mean log ratio; NaN with fewer than two ratios), ``p_t`` (two-sided one-sample t-test
        of mean log ratio = 0), ``mean`` / ``max`` / ``min`` (arithmetic, of the ratios),
        ``wins`` / ``ties`` / ``losses`` (ratio > 1, = 1, < 1) and ``p_sign`` (exact two-sided
        sign test, ties dropped).
    """
    r = np.asarray(ratios, dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    n = int(r.size)
    out: dict[str, float] = {"n": n}
    if n == 0:
        return out | {k: math.nan for k in ("gmean", "lo", "hi", "p_t", "mean", "max", "min")}
    x = np.log(r)
    m = float(x.mean())
    out["gmean"] = math.exp(m)
    if n >= 2:
        se = float(x.std(ddof=1)) / math.sqrt(n)
        q = t_quantile(0.5 + level / 2.0, n - 1)
        out["lo"], out["hi"] = math.exp(m - q * se), math.exp(m + q * se)
        if se > 0:
            out["p_t"] = min(1.0, 2.0 * student_t_sf(abs(m) / se, n - 1))
        else:
            out["p_t"] = 0.0 if m != 0 else 1.0
    else:
        out["lo"] = out["hi"] = out["p_t"] = math.nan
    out["mean"], out["max"], out["min"] = float(r.mean()), float(r.max()), float(r.min())
    wins, losses = int((r > 1.0).sum()), int((r < 1.0).sum())
    out["wins"], out["ties"], out["losses"] = wins, n - wins - losses, losses
    out["p_sign"] = sign_test_p(wins, losses)
    return out


def pair_ratios(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (comparison, seed, configuration) with the ratio (``> 1`` = WB+PQ better)."""
    rows = []
    for name, metric, num, den, rates, _, _ in COMPARISONS:
        piv = runs[runs["rate_qps"].isin(rates)].pivot_table(
            index=["seed", *CONFIG], columns="system", values=metric
        )
        ratio = (piv[num] / piv[den]).rename("ratio").reset_index()
        ratio.insert(0, "comparison", name)
        rows.append(ratio)
    return pd.concat(rows, ignore_index=True)


def _row(label: str, name: str, st: dict[str, float], paper: tuple[float, float]) -> dict:
    return {
        "comparison": name,
        "group": label,
        "n": st["n"],
        "gmean": st["gmean"],
        "ci95_lo": st["lo"],
        "ci95_hi": st["hi"],
        "p_t": st.get("p_t", math.nan),
        "mean": st["mean"],
        "min": st["min"],
        "max": st["max"],
        "wins": st.get("wins", 0),
        "ties": st.get("ties", 0),
        "losses": st.get("losses", 0),
        "p_sign": st.get("p_sign", math.nan),
        "paper_avg": paper[0],
        "paper_max": paper[1],
    }


def ratio_stats_table(ratios: pd.DataFrame) -> pd.DataFrame:
    """Per-configuration (over seeds), pooled (over seed x config) and by-seed statistics.

    ``by seed``: the mean log ratio of each seed over its configurations, then the t-interval
    over seeds (``n`` = seeds; wins/losses count seeds). ``max`` of the pooled row is the
    largest per-configuration geometric mean (the paper's "max" is over configurations).
    """
    out = []
    for name, _, _, _, _, pavg, pmax in COMPARISONS:
        g = ratios[ratios["comparison"] == name]
        per_cfg = []
        for cfg, gc in g.groupby(CONFIG):
            st = log_ratio_stats(gc["ratio"])
            per_cfg.append(st["gmean"])
            label = f"H{cfg[0]} T{cfg[1]} {cfg[2]:g} q/s"
            out.append(_row(label, name, st, (pavg, pmax)))
        st = log_ratio_stats(g["ratio"])
        row = _row("pooled (seed x config)", name, st, (pavg, pmax))
        row["max_config_gmean"] = float(np.nanmax(per_cfg))
        out.append(row)
        by_seed = g.assign(lr=np.log(g["ratio"])).groupby("seed")["lr"].mean()
        st = log_ratio_stats(np.exp(by_seed.to_numpy()))
        out.append(_row("by seed (mean log over configs)", name, st, (pavg, pmax)))
    return pd.DataFrame(out)


def best_share(runs: pd.DataFrame) -> pd.DataFrame:
    """Share of (seed, configuration) runs where each system has the lowest 95% deadline."""
    piv = runs.pivot_table(index=["seed", *CONFIG], columns="system", values="deadline_95_s")
    lowest = piv.min(axis=1)
    rows = []
    for sysname in piv.columns:
        strict = (piv[sysname] == lowest) & ((piv == lowest.to_numpy()[:, None]).sum(axis=1) == 1)
        rows.append(
            {
                "system": sysname,
                "lowest_95_deadline": int((piv[sysname] == lowest).sum()),
                "strictly_lowest": int(strict.sum()),
                "pairs": len(piv),
            }
        )
    return pd.DataFrame(rows)


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"`` (or a mix) as a sorted list of seeds."""
    seeds: set[int] = set()
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            seeds.update(range(int(a), int(b) + 1))
        elif part.strip():
            seeds.add(int(part))
    return sorted(seeds)


def _load(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def _append(path: Path, rows: list[dict]) -> None:
    old = _load(path)
    new = pd.concat([old, pd.DataFrame(rows)], ignore_index=True)
    new.to_csv(path, index=False, float_format="%.6g")


def run_main(seed: int, mode: str, score: str, alpha: float) -> list[dict]:
    """The four systems over the 12 configurations at one seed (``reproduce.main``'s loop)."""
    rows = []
    for h, tr, rate, sc, base in _configs(seed, mode, TRACES):
        for name, (mk_router, mk_policy) in R.systems(alpha, mode, score).items():
            m = hexgen_metrics(R.run(sc, mk_router(), mk_policy(), mode), base)
            key = dict(seed=seed, hetero=h, trace=tr, rate_qps=rate, system=name)
            rows.append(_metric_row(key | {"base_slo_s": base}, m))
    return rows


def _configs(seed: int, mode: str, traces: tuple[int, ...]):
    """(hetero, trace, rate, scenario, base SLO) of every configuration over ``traces``."""
    for h in HETEROS:
        for tr in traces:
            for rate in RATES:
                sc = R.scenario(h, tr, rate, seed)
                yield h, tr, rate, sc, R.base_of(sc, mode)


def _metric_row(key: dict, m: dict) -> dict:
    """A raw-CSV row: ``key``'s columns, then the run's deadlines, throughput and counts."""
    return {
        **key,
        "deadline_95_s": m["deadline_95_s"],
        "deadline_99_s": m["deadline_99_s"],
        "throughput_qps": m["throughput_qps"],
        "mean_latency_s": m["mean_latency_s"],
        "finished": m["num_finished"],
        "queries": m["num_queries"],
    }


CAPS = (1, 2, 4, 8, 16, 32, 64)
"""Coordinator-queue concurrency caps of the ``cap`` part (``HexGenPQPolicy(max_running=)``)."""
CAP_TRACES = (3,)
"""Traces of the ``cap`` part: Trace 3 (the paper's headline trace, Fig. 2-4), both clusters and
both rates; declared before running, every cap and seed reported."""


def run_cap(seed: int, mode: str, score: str, alpha: float) -> list[dict]:
    """The paper's local queue as a coordinator queue with a concurrency cap (Fig. 1, §4.2).

    Under vLLM batching no local queue forms (every request that fits is admitted), so the
    queue order cannot matter. Here HexGen's systems (WB+FCFS, WB+PQ) hold at most ``cap``
    requests in each instance and queue the rest; RR+FCFS, the vLLM baseline, stays uncapped.
    One row per (configuration, system, cap); RR+FCFS has cap 0 (= none).
    """
    if mode == "code-engine":
        raise SystemExit("--part cap runs on vLLM batching; use --mode code-table or roofline")
    from llmsched_gym.policies.hexgen import HexGenPQPolicy

    rows = []
    for h, tr, rate, sc, base in _configs(seed, mode, CAP_TRACES):
        runs = [("RR+FCFS", 0, "round-robin", "vllm-v1")]
        for cap in CAPS:
            for name, fcfs in (("WB+FCFS", True), ("WB+PQ", False)):
                pol = HexGenPQPolicy(fcfs=fcfs, max_running=cap)
                runs.append((name, cap, R.wb_router(score, alpha), pol))
        for name, cap, router, pol in runs:
            m = hexgen_metrics(R.run(sc, router, pol, mode), base)
            key = dict(seed=seed, hetero=h, trace=tr, rate_qps=rate, system=name)
            rows.append(_metric_row(key | {"cap": cap}, m))
    return rows


CAP_COMPARISONS = [
    # (name, metric, numerator, denominator, rates); > 1 = WB+PQ better
    ("queue deadline95 WB+FCFS/WB+PQ", "deadline_95_s", "WB+FCFS", "WB+PQ", RATES),
    ("deadline95 RR+FCFS/WB+PQ", "deadline_95_s", "RR+FCFS", "WB+PQ", RATES),
    ("throughput@1.0 WB+PQ/RR+FCFS", "throughput_qps", "WB+PQ", "RR+FCFS", (1.0,)),
]


def cap_table(cap_runs: pd.DataFrame) -> pd.DataFrame:
    """Per (comparison, cap): paired statistics over the (seed, configuration) pairs, and by seed.

    WB+FCFS and WB+PQ at the same cap; RR+FCFS (uncapped) is the same run at every cap. The
    ``by seed`` row averages each seed's log ratios over its configurations first (n = seeds),
    as :func:`ratio_stats_table` does: the conservative interval.
    """
    out = []
    rr = cap_runs[cap_runs["system"] == "RR+FCFS"]
    for cap in CAPS:
        at = pd.concat([cap_runs[cap_runs["cap"] == cap], rr])
        if not (at["cap"] == cap).any():
            continue
        for name, metric, num, den, rates in CAP_COMPARISONS:
            piv = at[at["rate_qps"].isin(rates)].pivot_table(
                index=["seed", *CONFIG], columns="system", values=metric
            )
            if num not in piv or den not in piv:
                continue
            r = (piv[num] / piv[den]).dropna()
            st = log_ratio_stats(r)
            row = _row("pooled (seed x config)", name, st, (math.nan, math.nan))
            row["cap"] = cap
            row["seeds"] = int(r.reset_index()["seed"].nunique())
            out.append(row)
            by_seed = np.log(r).groupby(level="seed").mean()
            st = log_ratio_stats(np.exp(by_seed.to_numpy()))
            row = _row("by seed (mean log over configs)", name, st, (math.nan, math.nan))
            row["cap"] = cap
            row["seeds"] = len(by_seed)
            out.append(row)
    return pd.DataFrame(out)


def cap_markdown(table: pd.DataFrame) -> list[str]:
    """The cap curve as Markdown lines: per cap and comparison, the gmean with its pooled and
    by-seed 95% intervals and the pooled sign count (wins of n pairs)."""
    names = list(dict.fromkeys(table["comparison"]))
    lines = ["| cap | seeds | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    for cap, g in table.groupby("cap"):
        cells = []
        for name in names:
            rows = g[g["comparison"] == name].set_index("group")
            pooled = rows.loc["pooled (seed x config)"]
            seed = rows.loc["by seed (mean log over configs)"]
            cells.append(
                f"{pooled['gmean']:.3f}x [{pooled['ci95_lo']:.3f}, {pooled['ci95_hi']:.3f}]; by "
                f"seed [{seed['ci95_lo']:.3f}, {seed['ci95_hi']:.3f}]; better in "
                f"{int(pooled['wins'])} of {int(pooled['n'])}"
            )
        lines.append(f"| {cap} | {int(g['seeds'].max())} | " + " | ".join(cells) + " |")
    return lines


def plot_cap(out: Path, table: pd.DataFrame) -> None:
    """``cap.png``: each comparison's gmean against the cap, with its pooled 95% interval and
    (wider, grey) its by-seed one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(table["comparison"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        rows = table[table["comparison"] == name].sort_values("cap")
        for group, style in (
            ("by seed (mean log over configs)", {"color": "grey", "ls": "none", "elinewidth": 5}),
            ("pooled (seed x config)", {"marker": "o", "ms": 3, "capsize": 2}),
        ):
            g = rows[rows["group"] == group]
            yerr = [g["gmean"] - g["ci95_lo"], g["ci95_hi"] - g["gmean"]]
            ax.errorbar(g["cap"], g["gmean"], yerr=yerr, label=group.split(" (")[0], **style)
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("coordinator concurrency cap")
        ax.set_title(name, fontsize=8)
    axes[0][0].set_ylabel("ratio (> 1: WB+PQ better)")
    axes[0][0].legend(fontsize=7, title="95% interval", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "cap.png", dpi=90)
    plt.close(fig)


def run_alpha(seed: int, mode: str) -> list[dict]:
    """Offline α sweep of WB+PQ at 0.5 q/s, both scores (``reproduce.main``'s Fig. 5 loop)."""
    rows = []
    for h in HETEROS:
        for tr in TRACES:
            sc = R.scenario(h, tr, 0.5, seed)
            base = R.base_of(sc, mode)
            for a in ALPHA_GRID:
                for score in ("paper", "code"):
                    res = R.run(sc, R.wb_router(score, a), R.pq_policy(mode), mode)
                    m = hexgen_metrics(res, base)
                    rows.append(
                        {
                            "seed": seed,
                            "hetero": h,
                            "trace": tr,
                            "score": score,
                            "alpha": a,
                            "deadline_95_s": m["deadline_95_s"],
                            "mean_latency_s": m["mean_latency_s"],
                        }
                    )
    return rows


def run_tune(seed: int, mode: str, score: str) -> list[dict]:
    """The §4.3 online tuner at 0.5 q/s (``reproduce.main``'s tuning loop)."""
    rows = []
    for h in HETEROS:
        for tr in TRACES:
            sc = R.scenario(h, tr, 0.5, seed)
            base = R.base_of(sc, mode)
            router = HexGenTunedRouter(seed=seed, score=score)
            m = hexgen_metrics(R.run(sc, router, R.pq_policy(mode), mode), base)
            rows.append(
                {
                    "seed": seed,
                    "hetero": h,
                    "trace": tr,
                    "score": score,
                    "initial_tuned_alpha": router.events[0].alpha if router.events else math.nan,
                    "alpha_trace": ";".join(f"{t:.0f}:{a:.1f}" for t, a in router.alpha_trace),
                    "deadline_95_s": m["deadline_95_s"],
                }
            )
    return rows


def alpha_table(alpha_runs: pd.DataFrame) -> pd.DataFrame:
    """Offline best α per (score, cluster, trace): per seed, and of the seed-averaged curve.

    Ties go to the smaller α (as ``reproduce.findings_table``). ``curve_best`` minimises the
    geometric mean over seeds of the 95% deadline.
    """
    rows = []
    for (score, h, tr), g in alpha_runs.groupby(["score", "hetero", "trace"]):
        per_seed = [
            float(gs.sort_values(["deadline_95_s", "alpha"])["alpha"].iloc[0])
            for _, gs in g.groupby("seed")
        ]
        curve = g.assign(lg=np.log(g["deadline_95_s"])).groupby("alpha")["lg"].mean()
        best = float(curve.idxmin())
        rows.append(
            {
                "score": score,
                "hetero": h,
                "trace": tr,
                "seeds": len(per_seed),
                "best_alpha_per_seed": " ".join(f"{a:.1f}" for a in per_seed),
                "in_0.1-0.4": sum(0.1 - 1e-9 <= a <= 0.4 + 1e-9 for a in per_seed),
                "curve_best_alpha": best,
                "curve_gmean_d95_at_best_s": math.exp(float(curve.min())),
                "curve_gmean_d95_at_0.2_s": math.exp(float(curve.loc[0.2])),
                "curve_gmean_d95_at_0_s": math.exp(float(curve.loc[0.0])),
            }
        )
    return pd.DataFrame(rows)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.3g}" if 0 < abs(v) < 1e-2 else f"{v:.3f}"
    return str(v)


def write_md(
    out: Path, mode: str, runs, stats, best, alpha, tune, wall: str, cap: pd.DataFrame
) -> None:
    """``seeds.md``: pooled and per-configuration statistics, and the cap curve."""
    seeds = sorted(runs["seed"].unique()) if len(runs) else []
    lines = [
        f"# HexGen-Text2SQL over seeds (mode {mode}, WB alpha 0.2)",
        "",
        f"Seeds {', '.join(str(s) for s in seeds)} x 12 configurations (Hetero-1/2 x Traces 1-3 x"
        " 0.5/1.0 q/s); throughput at 1.0 q/s only (6 configurations). Every ratio is oriented"
        " so that > 1 means WB+PQ is better. gmean / CI: geometric mean and 95% t-interval of"
        " the ratio; wins / ties / losses: pairs where WB+PQ is strictly better / equal / worse;"
        " p_sign: exact two-sided sign test. `by seed` averages each seed's log ratios over its"
        " configurations first (n = seeds): seeds are independent, the pairs within a seed are"
        " not (H1 and H2 share the workload), so it is the conservative interval.",
        "",
        "Commands: `.venv/bin/python leaderboards/hexgen/seeds.py --seeds <S> --part "
        f"main|alpha|tune`, then `--rescore` ({wall}); wall times in the README.",
        "",
        "## Pooled",
        "",
    ]
    cols = ["comparison", "group", "n", "gmean", "ci95_lo", "ci95_hi", "p_t", "mean", "min"]
    cols += ["max", "max_config_gmean", "wins", "ties", "losses", "p_sign", "paper_avg"]
    cols += ["paper_max"]
    pooled = stats[~stats["group"].str.startswith("H")].reindex(columns=cols)
    lines += [R.markdown(pooled.map(_fmt)), ""]
    lines += ["## Lowest 95% deadline of the four systems (Fig. 4 order)", ""]
    lines += [R.markdown(best), ""]
    lines += ["## Per configuration (over seeds)", ""]
    per_cols = [c for c in cols if c not in ("max_config_gmean", "paper_avg", "paper_max")]
    per = stats[stats["group"].str.startswith("H")].reindex(columns=per_cols)
    lines += [R.markdown(per.map(_fmt)), ""]
    if len(alpha):
        lines += ["## Offline best alpha (WB+PQ, 0.5 q/s, 95% deadline)", ""]
        lines += [R.markdown(alpha.map(_fmt)), ""]
    if len(tune):
        lines += ["## Online-tuned alpha after the first 100 s (§4.3, 0.5 q/s)", ""]
        piv = tune.pivot_table(
            index=["hetero", "trace"], columns="seed", values="initial_tuned_alpha"
        )
        lines += [R.markdown(piv, index=True), ""]
    if len(cap):
        lines += [
            "## Coordinator-queue cap curve (`--part cap`: Trace 3, Hetero-1/2 x 0.5/1.0 q/s)",
            "",
            "gmean [pooled 95% interval]; by seed [95% interval over per-seed means]; pairs in"
            " which WB+PQ is strictly better. RR+FCFS (the vLLM baseline) is uncapped.",
            "",
            *cap_markdown(cap),
            "",
        ]
    (out / "seeds.md").write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run the requested part over the seeds, then rewrite the statistics."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-19", help="e.g. 0-19 or 0,2,5 (default 0-19)")
    ap.add_argument("--part", choices=("main", "alpha", "tune", "cap"), default="main")
    ap.add_argument("--mode", choices=tuple(R.PRICING), default="code-table")
    ap.add_argument("--alpha", type=float, default=0.2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rescore", action="store_true", help="only recompute the tables")
    ap.add_argument(
        "--no-stats", action="store_true",
        help="only append the part's raw runs (parallel units; a --rescore run follows)",
    )  # fmt: skip
    ap.add_argument(
        "--update", action="store_true",
        help="write into the committed results/full/<mode>/<seeds folder>/",
    )  # fmt: skip
    ap.add_argument(
        "--score",
        choices=("paper", "code"),
        default=None,
        help="WB score of the main runs and the tuner: Eq. 4 (paper) or Hexgen-Flow's cumulative "
        "score (code); default: code under code-engine, else paper. A non-default score writes "
        "to seeds-<score>/",
    )
    args = ap.parse_args(argv)
    default_score = "code" if args.mode == "code-engine" else "paper"
    score = args.score or default_score
    folder = "seeds" if score == default_score else f"seeds-{score}"
    if args.update and args.out:
        ap.error("--update writes into results/; drop --out")
    base = R.HERE / "results" if args.update else R.DEFAULT_OUT
    out = args.out or base / "full" / args.mode / folder
    out.mkdir(parents=True, exist_ok=True)
    R.ensure_registered()
    raw = {
        "main": "runs.csv",
        "alpha": "alpha_runs.csv",
        "tune": "tuning_runs.csv",
        "cap": "cap_runs.csv",
    }
    t0 = time.perf_counter()
    if not args.rescore:
        path = out / raw[args.part]
        done = set(_load(path).get("seed", pd.Series(dtype=int)).astype(int))
        for seed in parse_seeds(args.seeds):
            if seed in done:
                continue
            if args.part == "main":
                rows = run_main(seed, args.mode, score, args.alpha)
            elif args.part == "alpha":
                rows = run_alpha(seed, args.mode)
            elif args.part == "cap":
                rows = run_cap(seed, args.mode, score, args.alpha)
            else:
                rows = run_tune(seed, args.mode, score)
            _append(path, rows)
            print(f"{args.part} seed {seed} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.no_stats:
        return 0
    cap_runs = _load(out / "cap_runs.csv")
    cap = pd.DataFrame()
    if len(cap_runs):
        cap = cap_table(cap_runs)
        cap.to_csv(out / "cap.csv", index=False, float_format="%.4f")
        plot_cap(out, cap)
        cols = ["comparison", "group", "cap", "seeds", "n", "gmean", "ci95_lo", "ci95_hi"]
        print(cap[cols].to_string())
    runs = _load(out / "runs.csv")
    if not len(runs):
        return 0
    ratios = pair_ratios(runs)
    ratios.to_csv(out / "ratios.csv", index=False, float_format="%.5f")
    stats = ratio_stats_table(ratios)
    stats.to_csv(out / "stats.csv", index=False, float_format="%.4f")
    best = best_share(runs)
    alpha_runs = _load(out / "alpha_runs.csv")
    alpha = alpha_table(alpha_runs) if len(alpha_runs) else pd.DataFrame()
    if len(alpha):
        alpha.to_csv(out / "alpha.csv", index=False, float_format="%.4f")
    tune = _load(out / "tuning_runs.csv")
    wall = "rescored" if args.rescore else f"last part {time.perf_counter() - t0:.0f} s"
    write_md(out, f"{args.mode}, {score} score", runs, stats, best, alpha, tune, wall, cap)
    print(stats[~stats["group"].str.startswith("H")].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
