"""Reproduce RelServe's (PVLDB) Fig. 9-11 and headline numbers in simulation.

For every setting (model x dataset scenario) and load (relQueries/s) it runs vLLM (``vllm-0.6``:
FCFS, prefill-first, vLLM 0.6.6's block-manager checks), Sarathi (``sarathi-0.6``: vLLM 0.6.6
chunked prefill), vLLM-SP (``vllm-sp``) and RelServe (``relserve``), the same two baselines on the
engine's V1 KV checks for contrast (``vllm-v1gate``, ``sarathi-v1``), plus the ABA ablation
RelServe-PP / RelServe-DP (Fig. 10), and records the mean relQuery latency and its
waiting / core / tail breakdown (Eq. 2, Fig. 11). As the authors do (``slope_calc.py``), the
RelServe predictors L^prefill / L^decode are fitted on a vLLM-SP run of the same scenario and
rate, dropping the first 10 steps.

Usage::

    .venv/bin/python leaderboards/relserve/reproduce.py --quick
    .venv/bin/python leaderboards/relserve/reproduce.py --settings opt-amazon
    .venv/bin/python leaderboards/relserve/reproduce.py --settings all

Writes ``results/<setting>.csv`` (one row per setting, rate, policy) and prints / writes the
findings table ``results/findings[-quick].md`` computed from whatever CSVs are present.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

from llmsched_gym.policies.baselines import SarathiPolicy, VllmV0Policy
from llmsched_gym.policies.relserve import (
    RelServePolicy,
    Sarathi06Policy,
    VllmSPPolicy,
    fit_latency_predictors,
)
from llmsched_gym.scenarios.spec import load_scenario

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

OPT_RATES = [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
"""Table 6's loads for OPT-13B (Fig. 9's x-axis values are not given in the text)."""

SETTINGS: dict[str, tuple[str, list[float]]] = {
    "opt-amazon": ("relquery-amazon-v0", OPT_RATES),
    "opt-rotten": ("relquery-rotten-v0", OPT_RATES),
    "opt-beer": ("relquery-beer-v0", OPT_RATES),
    "opt-pdmx": ("relquery-pdmx-v0", OPT_RATES),
    "qwen-amazon": ("relserve-qwen-amazon-v0", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
    "llama-amazon": ("relserve-llama-amazon-v0", [0.1, 0.2, 0.3, 0.4]),
    "llama-pdmx": ("relserve-llama-pdmx-v0", [0.1, 0.2, 0.3, 0.4]),
}
"""Qwen / Llama loads (not in the paper's text) run from ~1 relQuery in flight to the point
where vLLM's mean latency is 30-45 s, as OPT's at 1.0 rQ/s, on the 40GB cards' KV capacity."""

MAIN = ["vllm", "sarathi", "vllm-sp", "relserve"]
ENGINE_GATE = ["vllm-v1gate", "sarathi-v1"]
"""vLLM / Sarathi with the engine's (vLLM V1) KV checks instead of vLLM 0.6.6's, for contrast."""
ABLATION = ["relserve-pp", "relserve-dp"]
FIELDS = [
    "setting", "scenario", "rate", "num_queries", "policy", "latency_s", "waiting_s", "core_s",
    "tail_s", "core_share", "max_latency_s", "num_preemptions", "wall_s",
]  # fmt: skip


def _policy(name: str, pred):
    # Every baseline runs with vLLM 0.6.6's block-manager checks (watermark, no prefix-hit
    # credit, worst-case append), as the authors' engine; "-v1" variants use the engine's.
    if name == "vllm":
        return VllmV0Policy(block_manager="v0.6")
    if name == "vllm-v1gate":
        return VllmV0Policy()
    if name == "sarathi":
        return Sarathi06Policy()
    if name == "sarathi-v1":
        return SarathiPolicy()
    if name == "vllm-sp":
        return VllmSPPolicy()
    variant = {"relserve": "ada", "relserve-pp": "pp", "relserve-dp": "dp"}[name]
    return RelServePolicy(pred, variant=variant)


def run_setting(setting: str, rates: list[float], num_queries: int, ablation: bool) -> list[dict]:
    """All policies at every rate of one setting; returns CSV rows."""
    scenario_name = SETTINGS[setting][0]
    rows = []
    for rate in rates:
        sc = load_scenario(
            scenario_name, {"workload.rate_per_s": rate, "workload.num_queries": num_queries}
        )
        t0 = time.perf_counter()
        sp = sc.simulate(VllmSPPolicy(), record_steps=True)
        pred = fit_latency_predictors(sp)
        results = {"vllm-sp": (sp, time.perf_counter() - t0)}
        for name in MAIN + ENGINE_GATE + (ABLATION if ablation else []):
            if name in results:
                continue
            t0 = time.perf_counter()
            results[name] = (sc.simulate(_policy(name, pred)), time.perf_counter() - t0)
        for name, (res, wall) in results.items():
            j = res.jobs
            rows.append(
                {
                    "setting": setting,
                    "scenario": scenario_name,
                    "rate": rate,
                    "num_queries": num_queries,
                    "policy": name,
                    "latency_s": float(j["latency_s"].mean()),
                    "waiting_s": float(j["waiting_time_s"].mean()),
                    "core_s": float(j["core_running_time_s"].mean()),
                    "tail_s": float(j["tail_running_time_s"].mean()),
                    "core_share": _core_share(j),
                    "max_latency_s": float(j["latency_s"].max()),
                    "num_preemptions": int(res.requests["num_preemptions"].sum()),
                    "wall_s": round(wall, 2),
                }
            )
            print(
                f"{setting:13s} rate={rate:<4} {name:12s} latency={rows[-1]['latency_s']:8.2f}s "
                f"(wait {rows[-1]['waiting_s']:.2f} core {rows[-1]['core_s']:.2f} "
                f"tail {rows[-1]['tail_s']:.2f})",
                flush=True,
            )
        print(f"  predictors {pred}", flush=True)
    return rows


def _core_share(jobs) -> float:
    """Mean over relQueries of core / (core + tail) (Fig. 5's per-relQuery normalisation)."""
    c = jobs["core_running_time_s"].to_numpy(float)
    t = jobs["tail_running_time_s"].to_numpy(float)
    ok = (c + t) > 0
    return float(np.mean(c[ok] / (c[ok] + t[ok]))) if ok.any() else float("nan")


def _read(paths: list[Path]) -> list[dict]:
    rows = []
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(f):
                for k in ("rate", "latency_s", "waiting_s", "core_s", "tail_s", "core_share"):
                    r[k] = float(r.get(k) or "nan")
                rows.append(r)
    return rows


def _at(rows, setting, rate, policy, key="latency_s"):
    for r in rows:
        if r["setting"] == setting and r["rate"] == rate and r["policy"] == policy:
            return r[key]
    return None


def _span(vals: list[float]) -> str:
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    return f"{lo:.2f}x" if abs(hi - lo) < 0.005 else f"{lo:.2f}-{hi:.2f}x"


def findings(rows: list[dict]) -> str:
    """The findings table (finding, paper, ours, verdict) from result rows."""
    settings = sorted({r["setting"] for r in rows})
    top = {s: max(r["rate"] for r in rows if r["setting"] == s) for s in settings}
    vs_vllm, vs_sp, sp_vllm, sar_vllm, abl_ok, abl_n = [], [], [], [], 0, 0
    for s in settings:
        rel = _at(rows, s, top[s], "relserve")
        v = _at(rows, s, top[s], "vllm")
        sp = _at(rows, s, top[s], "vllm-sp")
        sar = _at(rows, s, top[s], "sarathi")
        vs_vllm.append(v / rel)
        vs_sp.append(sp / rel)
        sp_vllm.append(v / sp)
        sar_vllm.append(sar / v)
        for rate in sorted({r["rate"] for r in rows if r["setting"] == s}):
            pp = _at(rows, s, rate, "relserve-pp")
            dp = _at(rows, s, rate, "relserve-dp")
            if pp is not None and dp is not None:
                abl_n += 1
                abl_ok += _at(rows, s, rate, "relserve") <= min(pp, dp) * 1.0001
    # Core:tail split of vLLM (paper: Amazon, OPT-13B, 1.0 rQ/s; here every setting's top load).
    splits = []
    for s in settings:
        c = _at(rows, s, top[s], "vllm", "core_s")
        t = _at(rows, s, top[s], "vllm", "tail_s")
        splits.append(100 * c / (c + t))
    # Fig. 11 (OPT, Beer; here every setting's top load): RelServe vs vLLM-SP per period.
    brk = []
    for s in settings:
        parts = [
            _at(rows, s, top[s], "relserve", k) / max(_at(rows, s, top[s], "vllm-sp", k), 1e-9)
            for k in ("waiting_s", "core_s", "tail_s")
        ]
        brk.append(parts)
    brk_m = np.mean(brk, axis=0) if brk else [float("nan")] * 3

    def verdict(vals: list[float], lo: float, hi: float) -> str:
        if not vals:
            return "n/a"
        if all(lo <= v <= hi for v in vals):
            return "reproduced"
        if all(0.7 * lo <= v <= 1.3 * hi for v in vals):
            return "within ±30% of the paper's range"
        inside = sum(0.7 * lo <= v <= 1.3 * hi for v in vals)
        if all(v > 1.0 for v in vals):
            return f"direction reproduced; {inside}/{len(vals)} settings within ±30%"
        return "not reproduced"

    split_s = ", ".join(
        f"{s}: {x:.0f}:{100 - x:.0f}" for s, x in zip(settings, splits, strict=True)
    )
    # Fig. 5's own setting (footnote 4): OPT-13B, Amazon, 1.0 rQ/s, per-relQuery normalised.
    fig5 = _at(rows, "opt-amazon", 1.0, "vllm", "core_share")
    fig5_s = "n/a" if fig5 is None else f"{100 * fig5:.0f}:{100 - 100 * fig5:.0f}"
    lines = [
        "| finding | paper | ours | verdict |",
        "|---|---|---|---|",
        f"| RelServe vs vLLM at the largest load | 2.3-3.1x | {_span(vs_vllm)} | "
        f"{verdict(vs_vllm, 2.3, 3.1)} |",
        f"| RelServe vs vLLM-SP at the largest load | 1.4-2.2x | {_span(vs_sp)} | "
        f"{verdict(vs_sp, 1.4, 2.2)} |",
        f"| vLLM-SP vs vLLM at the largest load | 1.6x (avg) | {_span(sp_vllm)} "
        f"(avg {np.mean(sp_vllm):.2f}x) | {verdict(sp_vllm, 1.3, 1.9)} |",
        f"| Sarathi vs vLLM (latency ratio) | similar (~1x) | {_span(sar_vllm)} | "
        f"{'reproduced' if all(0.8 <= x <= 1.25 for x in sar_vllm) else 'not reproduced'} |",
        f"| vLLM core:tail (Fig. 5: OPT/Amazon 1.0 rQ/s, mean of per-relQuery shares) | 54:46 | "
        f"{fig5_s} | "
        f"{'n/a' if fig5 is None else 'reproduced' if 0.45 <= fig5 <= 0.65 else 'not reproduced'}"
        " |",
        f"| vLLM core:tail, ratio of mean times (each setting's top load) | 54:46 | {split_s} | "
        f"{'reproduced' if all(45 <= x <= 65 for x in splits) else 'not reproduced'} |",
        f"| Fig. 10: RelServe <= PP and DP at every load | all settings | {abl_ok}/{abl_n} "
        f"points | {'reproduced' if abl_n and abl_ok == abl_n else 'partly' if abl_ok else 'n/a'}"
        " |",
        "| Fig. 11: RelServe/vLLM-SP waiting, core, tail (largest load, mean over settings) | "
        f"similar, shorter, shorter | {brk_m[0]:.2f}, {brk_m[1]:.2f}, {brk_m[2]:.2f} | "
        f"{_fig11(brk_m)} |",
    ]
    return "\n".join(lines) + "\n\n" + per_setting(rows, top)


def per_setting(rows: list[dict], top: dict[str, float]) -> str:
    """Mean latency (s) per policy at each setting's largest load, ratios and vLLM preemptions."""
    out = [
        "| setting | load | vLLM | Sarathi | vLLM-SP | RelServe | vLLM/RelServe | SP/RelServe | "
        "Sarathi/vLLM | vLLM core:tail per relQuery | vLLM preemptions (0.6 checks / V1 gate) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s, r in top.items():
        v, sa, sp, rel = (_at(rows, s, r, k) for k in ("vllm", "sarathi", "vllm-sp", "relserve"))
        if None in (v, sa, sp, rel):
            continue
        share = _at(rows, s, r, "vllm", "core_share")
        pre = _at(rows, s, r, "vllm", "num_preemptions")
        pre1 = _at(rows, s, r, "vllm-v1gate", "num_preemptions")
        out.append(
            f"| {s} | {r:g} | {v:.2f} | {sa:.2f} | {sp:.2f} | {rel:.2f} | {v / rel:.2f} | "
            f"{sp / rel:.2f} | {sa / v:.2f} | {100 * share:.0f}:{100 - 100 * share:.0f} | "
            f"{pre} / {pre1 if pre1 is not None else 'n/a'} |"
        )
    return "\n".join(out) + "\n"


def _fig11(ratios) -> str:
    """Verdict of Fig. 11: waiting similar (0.8-1.25x), core and tail shorter."""
    if not (ratios[1] < 1 and ratios[2] < 1):
        return "not reproduced"
    if 0.8 <= ratios[0] <= 1.25:
        return "reproduced"
    return "core/tail reproduced; waiting differs"


def main(argv: list[str] | None = None) -> int:
    """Run the chosen settings, write CSVs and the findings table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="OPT/Amazon, 40 relQueries, 2 loads")
    ap.add_argument("--settings", default="opt-amazon", help=f"comma list or all: {list(SETTINGS)}")
    ap.add_argument("--num-queries", type=int, default=100)
    ap.add_argument("--no-ablation", action="store_true")
    ap.add_argument("--report", action="store_true", help="only rebuild findings from the CSVs")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.quick:
        plan = {"opt-amazon": [0.5, 1.0]}
        nq, suffix = 40, "-quick"
    else:
        names = list(SETTINGS) if args.settings == "all" else args.settings.split(",")
        plan = {n: SETTINGS[n][1] for n in names}
        nq, suffix = args.num_queries, ""
    for setting, rates in plan.items():
        if args.report:
            break
        rows = run_setting(setting, rates, nq, not args.no_ablation)
        with open(RESULTS / f"{setting}{suffix}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
    paths = sorted(RESULTS.glob(f"*{suffix}.csv")) if suffix else [
        p for p in sorted(RESULTS.glob("*.csv")) if not p.stem.endswith("-quick")
    ]  # fmt: skip
    table = findings(_read(paths))
    (RESULTS / f"findings{suffix}.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
