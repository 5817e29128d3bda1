"""GoRouting's per-decision branches on the PD ShareGPT scenario with nP + nD instances.

Runs ``proserve-pd-sharegpt-v0`` with the instance counts overridden, for each local policy x
router, and prints one JSON line per run: first-token TDG (overall, high, low priority), TDG,
SLO attainment and, for GoRouting, the share of prefill routing decisions per Alg. 2 branch
(``light``: L non-empty; ``pack``: heaviest of C - H; ``all-heavy``: least exec of C;
``fallback-*``: Delta_max <= 0) and how often the pick equals MinLoad's (``least-load:backlog``).

Usage::

    python leaderboards/proserve/gorouting_probe.py --P 4 --D 4 --rates 50 60 70
    options: --seed S, --csv results/pd_gorouting_probe.csv (appends), --n, --combos

Routers: ``golog`` = ``gorouting`` (the code's least-exec fallback), ``golog-random`` =
``gorouting-random`` (Alg. 2's random fallback), both with branch counting.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reproduce as R  # noqa: E402

from llmsched_gym.cluster.routers import list_routers, register_router  # noqa: E402
from llmsched_gym.cost.registry import load_cost_model  # noqa: E402
from llmsched_gym.metrics.tdg import TDGCollector, tdg_summary  # noqa: E402
from llmsched_gym.policies.proserve import GoRouter  # noqa: E402
from llmsched_gym.scenarios.spec import load_scenario  # noqa: E402

STATS: collections.Counter = collections.Counter()
BRANCHES = ("light", "pack", "all-heavy", "fallback-least-exec", "fallback-random")


class LoggingGoRouter(GoRouter):
    """GoRouter that counts Alg. 2 branches and agreement with MinLoad on prefill decisions."""

    def route(self, request, job, instances, now):  # noqa: D102
        i = super().route(request, job, instances, now)
        if instances and instances[0].role != "decode":
            STATS[self.last["branch"]] += 1
            minload = min(instances, key=lambda v: (v.backlog_s, v.index)).index
            STATS["same_as_minload"] += int(i == minload)
            STATS["n"] += 1
        return i


def main(argv=None) -> None:
    """Run the probe and print (and optionally append to a CSV) one row per run."""
    R._setup()
    for name, fb in (("golog", "least-exec"), ("golog-random", "random")):
        if name not in list_routers():
            register_router(
                name, lambda _fb=fb, **kw: LoggingGoRouter(fallback=_fb, **kw), "GoRouting, logged"
            )
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--P", type=int, default=2)
    ap.add_argument("--D", type=int, default=2)
    ap.add_argument("--rates", type=float, nargs="+", required=True)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--combos",
        nargs="+",
        default=[
            f"{p}:{r}"
            for p in ("proserve", "sarathi")
            for r in ("least-load:backlog", "golog", "golog-random")
        ],
        help="local:router pairs",
    )
    ap.add_argument("--csv", help="append rows to this CSV")
    a = ap.parse_args(argv)
    rows = []
    for rate in a.rates:
        for combo in a.combos:
            pol, router = combo.split(":", 1)
            STATS.clear()
            ov = {
                "workload.rate_per_s": rate,
                "workload.num_requests": a.n,
                "seed": a.seed,
                "cluster.instances": [
                    {"name": "prefill", "count": a.P, "role": "prefill"},
                    {"name": "decode", "count": a.D, "role": "decode"},
                ],
            }
            if pol == "sarathi":
                ov.update(R.FCFS)
            sc = load_scenario(R.ENVS / "proserve-pd-sharegpt-v0.yaml", ov)
            specs = sc.build_workload(sc.seed, cost_model=load_cost_model(sc.cost_model))
            wp, wd = R._weights(specs)
            R._COLLECTOR[0] = col = TDGCollector()
            col.set_arrivals({s.request_id: s.arrival_time for s in specs})
            t0 = time.perf_counter()
            tab = sc.simulate(scheduler=f"tdg+{pol}", router=router).request_table
            s = tdg_summary(
                tab, col.gains(list(tab["request_id"]), list(tab["weight"]), wp, wd), wp, wd
            )
            first = np.array([col.first_on_time.get(r, False) for r in tab["request_id"]], float)
            w = np.asarray(tab["weight"], float)
            hi = w > 1.5
            row = {
                "P": a.P,
                "D": a.D,
                "rate": rate,
                "seed": a.seed,
                "local": R.LOCAL_LABEL[pol],
                "router": router,
                "first_token_tdg": round(float((w * first).sum() / w.sum()), 4),
                "ft_high": round(float(first[hi].mean()), 4),
                "ft_low": round(float(first[~hi].mean()), 4),
                "tdg": round(s["tdg_ratio"], 4),
                "slo": round(s["slo_attainment"], 4),
                "sim_s": round(time.perf_counter() - t0, 1),
            }
            n = STATS["n"]
            for b in (*BRANCHES, "same_as_minload"):
                row[b] = round(STATS[b] / n, 3) if n else ""
            print(json.dumps(row), flush=True)
            rows.append(row)
    if a.csv:
        path = Path(a.csv)
        new = not path.exists()
        with open(path, "a", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0]))
            if new:
                wr.writeheader()
            wr.writerows(rows)


if __name__ == "__main__":
    main()
