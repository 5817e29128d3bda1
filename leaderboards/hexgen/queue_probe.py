"""Why the queue ablation (WB+FCFS vs WB+PQ, paper Fig. 4) shows no gain here (issue 10).

Usage::

    .venv/bin/python leaderboards/hexgen/queue_probe.py  # ~5 min -> results/full/queue_probe.md

1. Do local queues form? WB+PQ on Trace 3, Hetero-1, 0.5 q/s under ``code-table`` (vLLM V1
   batching) and ``code-engine`` (Hexgen-Flow's serial engine, its small KV): per instance the
   waiting-queue length seen at each scheduling step, the share of request latency spent
   waiting, and how often an admission with other requests waiting picks a request other than
   the FCFS choice.
2. What could any local order gain? WB+FCFS, WB+PQ and a diagnostic oldest-query-first order
   (urgency = query age, EDF with equal SLOs; not a paper system) over the 12 ``code-engine``
   configurations: 95% deadline and mean latency ratios, and each run's throughput against the
   arrival rate.
3. How much room does any order have? ``drain_bound_s``: no assignment of a run's completion
   times to its queries gets a 95% deadline below (95%-th completion) - (last arrival), so at an
   unchanged throughput no local queue can beat it. Reported for every run of 2 and 4.
4. Does the authors' A100 make queues form under vLLM batching? Hexgen-Flow models its A100 as
   the 40 GB card (``hardware_params.py:28-34``: 1555 GB/s, 40e9 bytes, "use 40G data"); ours
   is the 80 GB one. ``code-table`` over the 12 configurations with both cards: RR+FCFS,
   WB+FCFS, WB+PQ, oldest-query-first, queues on the A100s, and the bound.
``mid50_*``: the 95% deadline over the middle 50 queries only (``calculate_and_plot.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reproduce as R  # noqa: E402

from llmsched_gym.policies.hexgen import HexGenPQPolicy, drain_bound_s  # noqa: E402

HERE = Path(__file__).resolve().parent


class ProbePQ(HexGenPQPolicy):
    """HexGenPQPolicy recording, per scheduling step, the queue and the admission made."""

    log: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)

    def schedule(self, ctx: Any) -> None:
        """Record (waiting, admitted, admitted one is not the FCFS choice), then schedule."""
        waiting = list(ctx.waiting)
        super().schedule(ctx)
        new = [r for r, _ in ctx.new]
        fcfs_pick = set(waiting[: len(new)])
        ProbePQ.log[id(self)].append((len(waiting), len(new), bool(new) and set(new) != fcfs_pick))


class OldestQueryFirst(HexGenPQPolicy):
    """Diagnostic order: the oldest query's request first (urgency = query age)."""

    def urgency(self, req: Any, ctx: Any) -> float:
        """Query age instead of Eq. 6."""
        job = ctx.job(req)
        return ctx.now - (req.arrival_time if job is None else job.arrival_time)


def serial_kw(mode: str) -> dict[str, bool]:
    """The PQ's engine options under ``mode`` (as ``reproduce.pq_policy``)."""
    s = mode == "code-engine"
    return {"serial_prefill": s, "head_of_line": s}


def queue_stats(mode: str) -> pd.DataFrame:
    """Per-instance queue statistics of WB+PQ, Trace 3, Hetero-1, 0.5 q/s."""
    ProbePQ.log.clear()
    sc = R.scenario(1, 3, 0.5, 0)
    score = "code" if mode == "code-engine" else "paper"
    res = R.run(sc, R.wb_router(score, 0.2), ProbePQ(**serial_kw(mode)), mode)
    req = res.requests
    wait = req["first_scheduled_time_s"] - req["arrival_time_s"]
    rows = []
    for i, (name, log) in enumerate(zip(res.instances["name"], ProbePQ.log.values(), strict=True)):
        a = np.array(log, dtype=float)
        sel = req["instance_id"] == i
        contested = (a[:, 0] > a[:, 1]) & (a[:, 1] > 0)  # admitted while others kept waiting
        rows.append(
            {
                "mode": mode,
                "instance": str(name),
                "requests": int(sel.sum()),
                "steps_with_waiting_%": round(100 * float((a[:, 0] > 0).mean()), 1),
                "mean_waiting": round(float(a[:, 0].mean()), 2),
                "max_waiting": int(a[:, 0].max()),
                "mean_wait_s": round(float(wait[sel].mean()), 2),
                "wait_share_of_latency_%": round(
                    100 * float(wait[sel].sum() / req.loc[sel, "e2e_s"].sum()), 1
                ),
                "contested_admissions": int(contested.sum()),
                "pq_pick_not_fcfs": int((contested & (a[:, 2] > 0)).sum()),
            }
        )
    return pd.DataFrame(rows)


def ablation() -> pd.DataFrame:
    """WB+FCFS, WB+PQ and oldest-query-first over the 12 ``code-engine`` configurations."""
    mode = "code-engine"
    rows = []
    for h in (1, 2):
        for tr in (1, 2, 3):
            for rate in (0.5, 1.0):
                sc = R.scenario(h, tr, rate, 0)
                base = R.base_of(sc, mode)
                row: dict[str, Any] = {"hetero": h, "trace": tr, "rate_qps": rate}
                for name, pol in (
                    ("FCFS", R.fcfs_policy(mode)),
                    ("PQ", R.pq_policy(mode)),
                    ("oldest", OldestQueryFirst(**serial_kw(mode))),
                ):
                    res = R.run(sc, R.wb_router("code", 0.2), pol, mode)
                    m = R.hexgen_metrics(res, base)
                    row[f"d95_{name}"] = round(m["deadline_95_s"], 1)
                    row[f"mid50_d95_{name}"] = round(mid50(res, base), 1)
                    row[f"bound95_{name}"] = round(bound(res), 1)
                    row[f"mean_{name}"] = round(m["mean_latency_s"], 1)
                    row[f"tput_{name}"] = round(m["throughput_qps"], 3)
                rows.append(row)
    df = pd.DataFrame(rows)
    for name in ("PQ", "oldest"):
        df[f"d95_FCFS/{name}"] = (df["d95_FCFS"] / df[f"d95_{name}"]).round(3)
        df[f"mean_FCFS/{name}"] = (df["mean_FCFS"] / df[f"mean_{name}"]).round(3)
    df["d95_FCFS/bound95_PQ"] = (df["d95_FCFS"] / df["bound95_PQ"]).round(3)
    df["mid50_d95_FCFS/PQ"] = (df["mid50_d95_FCFS"] / df["mid50_d95_PQ"]).round(3)
    return df


def mid50(res: Any, base: float) -> float:
    """95% deadline over the middle 50 queries (``calculate_and_plot.py``'s window 25-74)."""
    return R.hexgen_metrics(res, base, window=(25, 75))["deadline_95_s"]


def bound(res: Any) -> float:
    """``drain_bound_s`` of a run: the 95% deadline no order with its completions can beat."""
    return drain_bound_s(res.jobs["arrival_time_s"], res.jobs["finish_time_s"], 0.95)


def a100_card() -> pd.DataFrame:
    """``code-table`` with the shipped A100-80GB and the code's A100-40GB, 12 configs each."""
    mode = "code-table"
    rows = []
    for card in ("a100-80gb", "a100-40gb"):
        for h in (1, 2):
            for tr in (1, 2, 3):
                for rate in (0.5, 1.0):
                    sc = R.scenario(h, tr, rate, 0, a100=card)
                    base = R.base_of(sc, mode)
                    row: dict[str, Any] = {
                        "a100": card,
                        "hetero": h,
                        "trace": tr,
                        "rate_qps": rate,
                        "base_s": round(base, 1),
                    }
                    for name, router, pol in (
                        ("RR+FCFS", "round-robin", R.fcfs_policy(mode)),
                        ("FCFS", R.wb_router("paper", 0.2), R.fcfs_policy(mode)),
                        ("PQ", R.wb_router("paper", 0.2), ProbePQ()),
                        ("oldest", R.wb_router("paper", 0.2), OldestQueryFirst()),
                    ):
                        ProbePQ.log.clear()
                        res = R.run(sc, router, pol, mode)
                        m = R.hexgen_metrics(res, base)
                        row[f"d95_{name}"] = round(m["deadline_95_s"], 1)
                        row[f"tput_{name}"] = round(m["throughput_qps"], 3)
                        if name in ("FCFS", "PQ"):
                            row[f"mid50_d95_{name}"] = round(mid50(res, base), 1)
                        if name == "PQ":
                            row["bound95_PQ"] = round(bound(res), 1)
                            logs = list(ProbePQ.log.values())
                            a100 = [i for i, n in enumerate(res.instances["name"]) if "a100" in n]
                            row["a100_mean_waiting"] = round(
                                float(np.mean([np.mean([x[0] for x in logs[i]]) for i in a100])), 2
                            )
                            req = res.requests
                            wait = req["first_scheduled_time_s"] - req["arrival_time_s"]
                            share = float(wait.sum() / req["e2e_s"].sum())
                            row["wait_share_%"] = round(100 * share, 1)
                    rows.append(row)
    df = pd.DataFrame(rows)
    df["d95_RR+FCFS/PQ"] = (df["d95_RR+FCFS"] / df["d95_PQ"]).round(3)
    df["tput_PQ/RR+FCFS"] = (df["tput_PQ"] / df["tput_RR+FCFS"]).round(3)
    df["d95_FCFS/PQ"] = (df["d95_FCFS"] / df["d95_PQ"]).round(3)
    df["d95_FCFS/oldest"] = (df["d95_FCFS"] / df["d95_oldest"]).round(3)
    df["d95_FCFS/bound95_PQ"] = (df["d95_FCFS"] / df["bound95_PQ"]).round(3)
    df["mid50_d95_FCFS/PQ"] = (df["mid50_d95_FCFS"] / df["mid50_d95_PQ"]).round(3)
    return df


def main(argv: list[str] | None = None) -> int:
    """Run both probes and write ``queue_probe.md`` (``--update``: ``results/full/``)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, default=None,
        help="output folder (default out/leaderboard/reproduce/hexgen/full/ under the repository)",
    )  # fmt: skip
    ap.add_argument(
        "--update", action="store_true", help="write into the committed results/full/ instead"
    )
    args = ap.parse_args(argv)
    if args.update and args.out:
        ap.error("--update writes into results/full/; drop --out")
    t0 = time.perf_counter()
    R.ensure_registered()
    stats = pd.concat([queue_stats(m) for m in ("code-table", "code-engine")], ignore_index=True)
    abl = ablation()
    cols = (
        "d95_FCFS/PQ",
        "mean_FCFS/PQ",
        "d95_FCFS/oldest",
        "mean_FCFS/oldest",
        "mid50_d95_FCFS/PQ",
    )
    summ = [f"{c}: avg {abl[c].mean():.3f}, max {abl[c].max():.3f}" for c in cols]
    summ.append(
        "d95_FCFS/bound95_PQ (most any order could gain at WB+PQ's completions): "
        f"avg {abl['d95_FCFS/bound95_PQ'].mean():.3f}, max {abl['d95_FCFS/bound95_PQ'].max():.3f}"
    )
    card = a100_card()
    card_cols = (
        "d95_RR+FCFS/PQ",
        "tput_PQ/RR+FCFS",
        "d95_FCFS/PQ",
        "d95_FCFS/oldest",
        "d95_FCFS/bound95_PQ",
        "mid50_d95_FCFS/PQ",
        "a100_mean_waiting",
        "wait_share_%",
    )
    card_summ = [
        f"{c} ({k}): avg {g[c].mean():.3f}, min {g[c].min():.3f}, max {g[c].max():.3f}"
        for k, g in card.groupby("a100", sort=False)
        for c in card_cols
    ]
    out = HERE / "results" / "full" if args.update else (args.out or R.DEFAULT_OUT / "full")
    out.mkdir(parents=True, exist_ok=True)
    text = [
        "# Queue probe (issue 10): do local queues form, and what can ordering gain?",
        "",
        f"Command: `.venv/bin/python leaderboards/hexgen/queue_probe.py` "
        f"({time.perf_counter() - t0:.0f} s).",
        "",
        "## WB+PQ queues, Trace 3, Hetero-1, 0.5 q/s",
        "",
        "`contested_admissions`: steps that admitted while other requests kept waiting; "
        "`pq_pick_not_fcfs`: of those, the ones where PQ admitted other than the FCFS choice.",
        "",
        R.markdown(stats),
        "",
        "## code-engine: WB+FCFS vs WB+PQ vs oldest-query-first (diagnostic), 12 configs",
        "",
        *[f"* {s}" for s in summ],
        "",
        R.markdown(abl),
        "",
        "## code-table (vLLM batching) with the A100-80GB vs the code's A100-40GB, 12 configs",
        "",
        "WB = Eq. 4 at alpha 0.2 (the mode's score); FCFS = `vllm-v1`; PQ = `hexgen-pq`; "
        "`a100_mean_waiting`: requests waiting per step on the A100 instances under WB+PQ; "
        "`wait_share_%`: waiting share of all request latency under WB+PQ.",
        "",
        *[f"* {s}" for s in card_summ],
        "",
        R.markdown(card),
        "",
    ]
    (out / "queue_probe.md").write_text("\n".join(text), encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
