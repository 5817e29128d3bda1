"""Reproduce ProServe's Fig. 10-13 and 15 in simulation (TDG ratio, SLO attainment vs rate).

Usage: ``python leaderboards/proserve/reproduce.py [--quick] [--out DIR]``. Writes
``results/*.csv`` and prints a findings table. TDG is exact (per-token times recorded by
``TokenTimelineRecorder``); wp:wd = mean input / mean output length of the workload (§5.1).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from llmsched_gym.cluster import gorouting
from llmsched_gym.cluster.routers import list_routers, register_router
from llmsched_gym.cost.registry import load_cost_model
from llmsched_gym.metrics.tdg import TDGCollector, TokenTimelineRecorder, tdg_summary
from llmsched_gym.policies import proserve
from llmsched_gym.policies.registry import list_policies, make_policy, register_policy
from llmsched_gym.scenarios.spec import load_scenario
from llmsched_gym.simulation import simulate

HERE = Path(__file__).resolve().parent
ENVS = HERE.parents[1] / "envs"
METHODS = ["proserve", "vllm-v1", "sarathi", "sarathi-priority", "fairbatching", "wvtc"]
ABLATION = ["proserve", "proserve-only-deadline", "proserve-only-density", "proserve-no-latency"]
_COLLECTOR: list[TDGCollector] = [TDGCollector()]


def _setup() -> None:
    if "proserve" not in list_policies():
        proserve.register(register_policy)
    if "gorouting" not in list_routers():
        gorouting.register(register_router)
    for name in list(list_policies()):
        if not name.startswith("tdg+") and f"tdg+{name}" not in list_policies():
            register_policy(
                f"tdg+{name}",
                lambda _n=name, **kw: TokenTimelineRecorder(make_policy(_n, **kw), _COLLECTOR[0]),
                f"{name} with the TDG recorder",
            )


def _weights(specs) -> tuple[float, float]:
    p = np.mean([s.prompt_len for s in specs])
    o = np.mean([s.output_len for s in specs])
    return float(p / o), 1.0


def run_single(env: str, method: str, rate: float, n: int, wpwd=None) -> dict:
    """One single-node run: exact TDG ratio and SLO attainment, overall and per priority."""
    sc = load_scenario(
        ENVS / f"{env}.yaml", {"workload.rate_per_s": rate, "workload.num_requests": n}
    )
    model = load_cost_model(sc.cost_model)
    specs = sc.build_workload(sc.seed, cost_model=model)
    wp, wd = wpwd or _weights(specs)
    col = TDGCollector()
    kw = {"wp": wp, "wd": wd} if method.startswith("proserve") else {}
    pol = TokenTimelineRecorder(make_policy(method, **kw), col)
    res = simulate(specs, sc.engine_config(model), pol, model)
    tab = res.request_table
    g = col.gains(list(tab["request_id"]), list(tab["weight"]), wp, wd)
    s = tdg_summary(tab, g, wp, wd)
    row = {
        "env": env,
        "method": method,
        "rate": rate,
        "n": n,
        "wp": round(wp, 3),
        "tdg_ratio": s["tdg_ratio"],
        "slo_attainment": s["slo_attainment"],
    }
    for p, b in s["by_priority"].items():
        row[f"tdg_p{p}"], row[f"slo_p{p}"] = b["tdg_ratio"], b["slo_attainment"]
    return row


def run_cluster(env: str, method: str, router: str, rate: float, n: int) -> dict:
    """One multi-instance run with ``router`` (GoRouting vs MinLoad)."""
    sc = load_scenario(
        ENVS / f"{env}.yaml", {"workload.rate_per_s": rate, "workload.num_requests": n}
    )
    model = load_cost_model(sc.cost_model)
    specs = sc.build_workload(sc.seed, cost_model=model)
    wp, wd = _weights(specs)
    _COLLECTOR[0] = col = TDGCollector()
    col.set_arrivals({s.request_id: s.arrival_time for s in specs})
    res = sc.simulate(scheduler=f"tdg+{method}", router=router)
    tab = res.request_table
    g = col.gains(list(tab["request_id"]), list(tab["weight"]), wp, wd)
    s = tdg_summary(tab, g, wp, wd)
    return {
        "env": env,
        "method": f"{method}+{router}",
        "rate": rate,
        "n": n,
        "tdg_ratio": s["tdg_ratio"],
        "slo_attainment": s["slo_attainment"],
    }


def _write(rows: list[dict], path: Path) -> None:
    keys = sorted(
        {k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99
    )
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def main(argv=None) -> None:
    """Run the sweeps, write CSVs to results/ and print the findings table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--skip-cluster", action="store_true")
    a = ap.parse_args(argv)
    _setup()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n = 500 if a.quick else 2000
    rates = [7.0, 10.0, 13.0] if a.quick else [7.0, 9.0, 11.0, 13.0, 15.0]
    env = "proserve-sharegpt-qwen2-7b-v0"
    rows = []
    for rate in rates:
        for m in METHODS:
            rows.append(run_single(env, m, rate, n))
            print(rows[-1], flush=True)
    _write(rows, out / "fig10_sharegpt.csv")
    abl = []
    for rate in rates:
        for m in ABLATION[1:]:
            abl.append(run_single(env, m, rate, n))
            print(abl[-1], flush=True)
    _write(abl, out / "fig15_ablation.csv")
    clus = []
    if not a.skip_cluster:
        for r in ["least-load:backlog", "gorouting"]:
            clus.append(
                run_cluster(
                    "proserve-colocated-azure-v0", "proserve", r, 40.0, 1500 if a.quick else 6000
                )
            )
            print(clus[-1], flush=True)
        _write(clus, out / "fig12_colocated.csv")
    findings(rows, abl, clus)


def findings(rows, abl, clus) -> None:
    """Print the paper-vs-ours table from the sweep rows."""
    import collections

    by = collections.defaultdict(dict)
    for r in rows + abl:
        by[r["rate"]][r["method"]] = r
    best_tdg = best_slo = 0.0
    for rate, d in sorted(by.items()):
        base = [v for k, v in d.items() if not k.startswith("proserve")]
        bt = max(b["tdg_ratio"] for b in base)
        bs = max(b["slo_attainment"] for b in base)
        best_tdg = max(best_tdg, d["proserve"]["tdg_ratio"] / bt - 1)
        best_slo = max(best_slo, d["proserve"]["slo_attainment"] / bs - 1)
        print(
            f"rate {rate}: "
            + ", ".join(
                f"{k} tdg={v['tdg_ratio']:.3f} slo={v['slo_attainment']:.3f}" for k, v in d.items()
            )
        )
    print("| finding | paper | ours |")
    print(f"| max TDG gain over best baseline | up to 35% | {best_tdg:+.1%} |")
    print(f"| max SLO-attainment gain over best baseline | up to 52% | {best_slo:+.1%} |")
    if clus:
        print(
            f"| GoRouting vs MinLoad (TDG) | better | "
            f"{clus[1]['tdg_ratio']:.3f} vs {clus[0]['tdg_ratio']:.3f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
