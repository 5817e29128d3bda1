"""Per-step probe of one single-node point: ProServe vs Sarathi-Priority (same seed).

Records, per engine step: real step time (the engine's cost model on the step's features), the
estimator's prediction (ProServe), t_budget, decodes / prefills / tokens, preemptions, KV usage,
queue lengths, the URGENT share of the queue and why ProServe's fill loop stopped. Prints a
summary per method (any label of ``reproduce.METHODS`` or ``reproduce.ABLATIONS``), where the
TDG is lost (first vs decode tokens, catch-up of late starters) and TTFT / TPOT misses by priority.
The fill-loop figures come from the policy itself (``SlideBatchingPolicy.record_fill``), so the
probed run makes exactly the registered policy's decisions.

    nice -n 19 .venv/bin/python leaderboards/proserve/knee_probe.py --rate 2.5
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reproduce as R  # noqa: E402

from llmsched_gym.core.engine import SchedulingPolicy, StepContext  # noqa: E402
from llmsched_gym.cost.registry import load_cost_model  # noqa: E402
from llmsched_gym.metrics.tdg import TDGCollector, TokenTimelineRecorder, tdg_summary  # noqa: E402
from llmsched_gym.policies.proserve import SlideBatchingPolicy  # noqa: E402
from llmsched_gym.policies.registry import make_policy  # noqa: E402
from llmsched_gym.scenarios.spec import load_scenario  # noqa: E402
from llmsched_gym.simulation import simulate  # noqa: E402


class Probe(SchedulingPolicy):
    """Wraps a policy; logs each step's features after the wrapped policy scheduled it."""

    fast_forward_safe = False

    def __init__(self, inner, model) -> None:
        self.inner, self.model, self.name = inner, model, inner.name
        self.rows: list[dict] = []
        self.acc: dict = {}  # request -> block-seconds held since its last (re)admission
        self.wasted = 0.0  # block-seconds of KV freed by preemption (recomputed later)
        self.victims: list[tuple] = []  # (now, output tokens, computed tokens, slack s, times)
        self.times_preempted: Counter = Counter()

    def queue_policy(self, config):
        """The wrapped policy's queue."""
        return self.inner.queue_policy(config)

    def reset(self, engine):
        """Reset the wrapped policy."""
        self.inner.reset(engine)

    def on_finish(self, req, now):
        """Forward to the wrapped policy."""
        self.inner.on_finish(req, now)

    def schedule(self, ctx: StepContext) -> None:
        """Schedule with the wrapped policy, then log the step."""
        nw, nr = len(ctx.waiting), len(ctx.running)
        before = {r: r.num_computed_tokens for r in ctx.running}
        mid = [r for r in ctx.running if r.num_tokens - r.num_computed_tokens > 1]
        pre_blocks, n_pre_run = sum(len(r.blocks) for r in mid), len(mid)
        self.inner.schedule(ctx)
        lost = sum(before.get(r, 0) for r in ctx.preempted)
        pol0 = self.inner.inner if hasattr(self.inner, "inner") else self.inner
        for r in ctx.preempted:
            self.wasted += self.acc.pop(r, 0.0)
            self.times_preempted[r.request_id] += 1
            slack = pol0.remaining(r, ctx.now) if isinstance(pol0, SlideBatchingPolicy) else np.nan
            self.victims.append(
                (
                    ctx.now,
                    r.num_output_tokens,
                    before.get(r, 0),
                    slack,
                    self.times_preempted[r.request_id],
                    r.priority,
                )
            )
        real = self.model.step_time(
            ctx._tokens, ctx._prefill_attn, ctx._decode_kv, ctx._num_prefill, ctx._num_decode
        )
        for r in ctx.running:
            self.acc[r] = self.acc.get(r, 0.0) + len(r.blocks) * real
        self.rows.append(
            {
                "now": ctx.now,
                "real": real,
                "est": pol0._last[1] if isinstance(pol0, SlideBatchingPolicy) else np.nan,
                **fill_row(pol0, ctx),
                "n_dec": ctx._num_decode,
                "n_pre": ctx._num_prefill,
                "tok": ctx._tokens,
                "pre_tok": ctx._tokens - ctx._num_decode,
                "preempt": len(ctx.preempted),
                "lost": lost,
                "pre_blocks": pre_blocks,
                "n_pre_run": n_pre_run,
                "kv": 1 - ctx.num_free_blocks / (ctx.num_gpu_blocks - 1),
                "waiting": nw,
                "running_before": nr,
                "running_after": len(ctx.running),
                "unsched_running": sum(1 for r in ctx.running if r not in ctx.scheduled),
                "unsched_decodes": sum(
                    1
                    for r in ctx.running
                    if r not in ctx.scheduled and r.num_tokens - r.num_computed_tokens == 1
                ),
            }
        )


def fill_row(pol, ctx) -> dict:
    """SlideBatching's last fill (``record_fill``): t_budget, URGENT share, why the loop ended."""
    fill = getattr(pol, "last_fill", None)
    if not fill or fill["end"] == "empty":
        stop = "empty" if fill else ""
        return {"budget": np.nan, "urgent": np.nan, "sched_normal": np.nan, "stop": stop}
    part = pol.last_partition
    sched = list(ctx.scheduled)
    return {
        "budget": fill["t_budget"],
        "urgent": sum(v == "URGENT" for v in part.values()) / len(part),
        "sched_normal": (
            sum(part.get(r.request_id) == "NORMAL" for r in sched) / len(sched) if sched else np.nan
        ),
        "stop": fill["end"] + "".join(f"|{k}" for k in sorted(fill["skips"])),
    }


def run(cname: str, label: str, rate: float, n: int):
    """One point as ``reproduce.run_single`` runs it, probed: (rows, table, summary, config)."""
    env, over = R.CONFIGS[cname][:2]
    policy, kw, eng_over, tbt = {**R.METHODS, **R.ABLATIONS, **R.MEMORY}[label]
    ov = {**over, **eng_over, "workload.rate_per_s": rate, "workload.num_requests": n}
    sc = load_scenario(R.ENVS / f"{env}.yaml", ov)
    model = load_cost_model(sc.cost_model)
    specs = sc.build_workload(sc.seed, cost_model=model)
    wp, wd = R._weights(specs)
    if tbt:
        sc = load_scenario(R.ENVS / f"{env}.yaml", R.tbt_overrides(sc, model, specs, ov))
    col = TDGCollector()
    if policy == "proserve":
        inner = make_policy(policy, **{**kw, "wp": wp, "wd": wd})
    else:
        inner = make_policy(policy, **kw)
    if isinstance(inner, SlideBatchingPolicy):
        inner.record_fill = True  # the policy's own fill loop reports why it stopped
    probe = Probe(TokenTimelineRecorder(inner, col), model)
    res = simulate(specs, sc.engine_config(model), probe, model)
    tab = res.request_table
    g = col.gains(list(tab["request_id"]), list(tab["weight"]), wp, wd)
    s = tdg_summary(tab, g, wp, wd)
    s["split"] = gain_split(col, tab, wp, wd)
    return probe.rows, tab, s, sc.engine_config(model)


def gain_split(col: TDGCollector, tab, wp: float, wd: float) -> dict:
    """Where the TDG is lost: first vs decode tokens, and the decode tokens of late starters.

    Shares are of Ideal_Gain (every token on time, Eq. 3). ``late_decode_on_time``: of the
    requests whose first token missed its deadline, the share of their decode tokens that still
    met the buffered deadline ``arrival + TTFT + (i - 1) TPOT`` (the catch-up the smoothing
    buffer allows).
    """
    rid = list(tab["request_id"])
    w = np.asarray(tab["weight"], float)
    n = np.asarray(tab["num_output_tokens"], float)
    first = np.array([col.first_on_time.get(r, False) for r in rid], float)
    dec = np.array([col.decode_on_time.get(r, 0) for r in rid], float)
    ideal = (w * (wp + wd * (n - 1))).sum()
    late = first == 0
    nd = np.maximum(n - 1, 0)
    tpot = np.asarray(tab["tpot_s"], float) / np.asarray(tab["slo_tpot_s"], float)
    return {
        "first_share": float((w * wp).sum() / ideal),
        "first_lost": float((w * wp * (1 - first)).sum() / ideal),
        "decode_lost": float((w * wd * (nd - dec)).sum() / ideal),
        "late_frac": float(late.mean()),
        "late_decode_on_time": float(dec[late].sum() / max(nd[late].sum(), 1)),
        "tpot_over_slo_p50": float(np.nanmedian(tpot)),
    }


def report(label: str, rows: list[dict], tab, s: dict, cfg) -> None:
    """Print one method's per-step summary and its TTFT / TPOT misses by priority."""
    a = {k: np.array([r[k] for r in rows]) for k in rows[0] if k != "stop"}
    busy = a["tok"] > 0
    real = a["real"][busy]
    usable = cfg.num_gpu_blocks - 1
    pr = [
        f"p{p} {b['tdg_ratio']:.3f}/{b['slo_attainment']:.3f}" for p, b in s["by_priority"].items()
    ]
    out = [
        f"\n=== {label}: TDG {s['tdg_ratio']:.3f} SLO {s['slo_attainment']:.3f} ({', '.join(pr)}); "
        f"max_num_batched_tokens {cfg.max_num_batched_tokens}, {cfg.num_gpu_blocks} KV blocks ===",
        f"  steps {len(rows)} (busy {busy.sum()}), span {a['now'][-1] - a['now'][0]:.1f}s, "
        f"busy {real.sum():.1f}s; step ms mean {real.mean() * 1e3:.1f} "
        f"p50 {np.median(real) * 1e3:.1f} p90 {np.percentile(real, 90) * 1e3:.1f}",
        f"  per step: tokens {a['tok'][busy].mean():.0f}, "
        f"prefill tokens {a['pre_tok'][busy].mean():.0f}, "
        f"decodes {a['n_dec'][busy].mean():.1f}, prefills {a['n_pre'][busy].mean():.2f}",
        f"  prefill tokens {a['pre_tok'].sum()}, decode tokens {a['n_dec'].sum()}, "
        f"{a['tok'].sum() / real.sum():.0f} tok/s busy",
        f"  preemptions {a['preempt'].sum()}, computed tokens lost {a['lost'].sum()}; mid-prefill "
        f"requests {a['n_pre_run'].mean():.2f} holding {a['pre_blocks'].mean() / usable:.3f} of KV",
        f"  KV usage mean {a['kv'].mean():.3f}, steps >= 0.95 {np.mean(a['kv'] >= 0.95):.3f}, "
        f">= 0.9 {np.mean(a['kv'] >= 0.9):.3f}",
        f"  waiting {a['waiting'].mean():.1f}, running {a['running_after'].mean():.1f}, "
        f"unscheduled decodes/step {a['unsched_decodes'].mean():.2f}",
    ]
    if not np.isnan(a["budget"]).all():
        q = real / a["est"][busy]
        b = a["budget"] * 1e3
        c = Counter(r["stop"] for r in rows if r["tok"] > 0)
        out += [
            f"  real/estimated step time mean {q.mean():.3f} (p10 {np.percentile(q, 10):.3f}, "
            f"p90 {np.percentile(q, 90):.3f}), MAPE {np.mean(np.abs(1 - 1 / q)):.3f}",
            f"  t_budget ms p10 {np.nanpercentile(b, 10):.0f} p50 {np.nanmedian(b):.0f} "
            f"p90 {np.nanpercentile(b, 90):.0f}",
            "  loop end | skips: " + ", ".join(f"{k} {v}" for k, v in c.most_common(12)),
            f"  URGENT share of the queue per busy step: mean {np.nanmean(a['urgent'][busy]):.3f}, "
            f"steps all URGENT {np.mean(a['urgent'][busy] >= 1.0):.3f}, steps all NORMAL "
            f"{np.mean(a['urgent'][busy] <= 0.0):.3f}; NORMAL share of scheduled requests "
            f"{np.nanmean(a['sched_normal'][busy]):.3f}",
        ]
    sp = s["split"]
    out.append(
        f"  gain: first tokens are {sp['first_share']:.3f} of Ideal; lost on first tokens "
        f"{sp['first_lost']:.3f}, on decode tokens {sp['decode_lost']:.3f}; "
        f"{sp['late_frac']:.3f} of requests start late and still get "
        f"{sp['late_decode_on_time']:.3f} of their decode tokens on time; "
        f"TPOT / TPOT-SLO p50 {sp['tpot_over_slo_p50']:.2f}"
    )
    met1 = tab["ttft_s"] < tab["slo_ttft_s"]
    met2 = (tab["num_output_tokens"] <= 1) | (tab["tpot_s"] < tab["slo_tpot_s"])
    for p in sorted(set(tab["priority"].tolist())):
        m = tab["priority"] == p
        t1, t2 = tab["ttft_s"][m], tab["tpot_s"][m] * 1e3
        out.append(
            f"  prio {p}: n {m.sum()}, TTFT miss {1 - met1[m].mean():.3f}, TPOT miss "
            f"{1 - met2[m].mean():.3f}, TTFT p50/p90 {np.median(t1):.3f}/"
            f"{np.percentile(t1, 90):.3f} s, TPOT p50/p90 {np.nanmedian(t2):.0f}/"
            f"{np.nanpercentile(t2, 90):.0f} ms"
        )
    print("\n".join(out))


def main() -> None:
    """Probe ``--methods`` at one point and print the summaries."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="Azure/Qwen3-32B")
    ap.add_argument("--rate", type=float, default=2.5)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument(
        "--methods",
        nargs="*",
        default=["ProServe", "Sarathi-Priority"],
        help="labels from reproduce.METHODS, reproduce.ABLATIONS or reproduce.MEMORY",
    )
    a = ap.parse_args()
    R._setup()
    for label in a.methods:
        rows, tab, s, cfg = run(a.config, label, a.rate, a.n)
        report(label, rows, tab, s, cfg)


if __name__ == "__main__":
    main()
