"""Preempt candidates measured on three metrics at once (leaderboards/headroom-decisions.md).

Runs each method on a candidate suite's Preempt test workloads, as the harness does
(``simulate_workload`` of the policy ``resolve_policy`` / ``lookahead_ref`` builds), and keeps
from each run's summary mean e2e, p99 e2e, mean TTFT and ``num_preemptions``. Scores: geometric
mean over workloads of vllm-v1's metric over the method's (> 1 better).

    python leaderboards/headroom-candidates/preempt_probe.py SUITE_FILE [--all] [--methods A,B]
        [--horizon S] [--csv OUT.csv]

Default workloads: the first test seed of each (scenario, source) (the lookahead's sample
``quick-first`` widened to every scenario of the candidate); ``--all``: every test workload.
"""

import argparse
import csv
import time

from llmsched_gym.leaderboard.headroom import lookahead_ref
from llmsched_gym.leaderboard.policy import resolve_policy
from llmsched_gym.leaderboard.run import simulate_workload
from llmsched_gym.leaderboard.score import geometric_score
from llmsched_gym.leaderboard.suite import load_suite

METRICS = ("e2e_s_mean", "e2e_s_p99", "ttft_s_mean")
DEFAULT = "vllm-v1,rule:least-computed,rule:shortest-prompt,random,static-priority:shortest-output,lookahead"

p = argparse.ArgumentParser()
p.add_argument("suite")
p.add_argument("--all", action="store_true")
p.add_argument("--methods", default=DEFAULT)
p.add_argument("--horizon", type=float, default=None, help="lookahead horizon (s); default: end")
p.add_argument("--csv", default=None)
args = p.parse_args()

suite = load_suite(args.suite)
task = suite.task("Preempt")
ws = suite.workloads("test", tasks=["Preempt"])
if not args.all:
    firsts = {}
    for w in ws:
        firsts.setdefault((w.scenario_id, w.source), w)
    ws = list(firsts.values())
methods = args.methods.split(",")
rows = []
for w in ws:
    for m in methods:
        ref = lookahead_ref(args.horizon) if m == "lookahead" else resolve_policy(m, task)
        t = time.time()
        s = simulate_workload(task, ref.build(task, w.seed, w), w).summary
        row = {"workload": w.id, "method": ref.name, "wall_s": round(time.time() - t, 1)}
        row.update({k: s[k] for k in (*METRICS, "num_preemptions", "num_finished", "num_refused")})
        rows.append(row)
        print(
            w.id, ref.name, f"{row['wall_s']}s", *(f"{k} {s[k]:.3f}" for k in METRICS),
            f"preemptions {s['num_preemptions']}", flush=True,
        )
if args.csv:
    with open(args.csv, "w", newline="") as f:
        wr = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        wr.writeheader()
        wr.writerows(rows)

ref = {(r["workload"], k): r[k] for r in rows if r["method"] == "vllm-v1" for k in METRICS}
print("\n| method | " + " | ".join(METRICS) + " | workloads |")
print("|---|" + "---:|" * (len(METRICS) + 1))
for m in dict.fromkeys(r["method"] for r in rows):
    mine = [r for r in rows if r["method"] == m]
    cells = []
    for k in METRICS:
        sc = geometric_score(ref[(r["workload"], k)] / r[k] for r in mine)
        ci = f" [{sc.low:.3f}, {sc.high:.3f}]" if sc.n > 1 else ""
        cells.append(f"{sc.value:.3f}{ci}")
    print(f"| {m} | " + " | ".join(cells) + f" | {len(mine)} |")
print("\nvllm-v1 preemptions per workload:",
      {r["workload"]: r["num_preemptions"] for r in rows if r["method"] == "vllm-v1"})
