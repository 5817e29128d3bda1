"""Reproduce ProServe's Fig. 10-13 and 15 in simulation (TDG ratio, SLO attainment vs rate).

Usage::

    python leaderboards/proserve/reproduce.py --quick      # ~1-2 min: ShareGPT/Qwen2-7B, 3 rates
    python leaderboards/proserve/reproduce.py --medium     # all four configs, fewer rates
    python leaderboards/proserve/reproduce.py              # full sweep (see README for the time)

Writes ``*.csv``, ``findings.md`` and ``*.png`` into ``--out`` (default
``out/leaderboard/reproduce/proserve/`` under the repository root, ``quick/``, ``medium/`` or
``slo-<name>/`` below it); only ``--update`` writes into the committed ``results/`` (same
subfolders). The paper's numbers (Fig. 10's axis floors, the "up to" gains) come from
``experiments.yaml``; ``llmsched-gym leaderboard reproduce proserve`` runs this script as that
file declares and writes the headline table.
TDG is exact (every token's delivery time from ``TokenTimelineRecorder``, Eq. 3 with the paper's
buffered deadline); wp:wd = mean input / mean output length of the workload (§5.1).

Methods (paper §5.1) and how they map onto the simulator:

* vLLM-FCFS: ``vllm-v0`` (prefill-first, no chunking) on the FCFS queue.
* Sarathi-FCFS: ``sarathi`` (decode-first, chunked) on the FCFS queue, token budget "profiled
  from TBT": the largest chunk whose estimated step time (Eq. 4-7) is within the median TPOT SLO.
* Sarathi-Priority: ``sarathi-priority`` with the same token budget. Both keep the scenario's
  KV size (``tbt_overrides``): the budget does not buy them extra KV blocks.
* FairBatching: ``fairbatching``; Weighted VTC: ``wvtc`` (VTC's counter lift, weights 2:1).
* ProServe: ``proserve`` = SlideBatching as in Alg. 1 (no anti-starvation reordering), estimator
  factor fixed at 1.0 as in the authors' code. ``ProServe+starve`` adds xLLM @87e8d6e's
  "starved prefills first" rule; ``ProServe+momentum`` the paper's theta=0.9 correction.
* Ablations (Fig. 15, §5.4: the urgency partition removed, the latency budget kept):
  ``only-deadline`` (EDF over the whole queue, xLLM's ``deadline`` strategy), ``only-density``
  (density over the whole queue, xLLM's ``density`` strategy / Alg. 1 line 13), ``no-latency``
  (token budget only); ``only-density-decode-first`` is the earlier form of the density
  ablation (decodes first, xLLM's ``decode_density``), kept as a column for comparison.
* Clusters (Fig. 11/12): PD-disaggregated ShareGPT (2 prefill + 2 decode) and co-located Azure
  (4 instances); routers GoRouting (code fallback) vs MinLoad (``least-load:backlog``).
"""

from __future__ import annotations

import argparse
import collections
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

from llmsched_gym.cluster.routers import list_routers, register_router
from llmsched_gym.cost.registry import load_cost_model
from llmsched_gym.leaderboard.experiments import paper_table, paper_value
from llmsched_gym.metrics.tdg import TDGCollector, TokenTimelineRecorder, tdg_summary
from llmsched_gym.policies import proserve
from llmsched_gym.policies.proserve import LatencyEstimator
from llmsched_gym.policies.registry import list_policies, make_policy, register_policy
from llmsched_gym.scenarios.spec import load_scenario
from llmsched_gym.simulation import simulate

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parents[1] / "out" / "leaderboard" / "reproduce" / "proserve"
EXPERIMENTS_YAML = HERE / "experiments.yaml"
ENVS = HERE.parents[1] / "envs"
FCFS = {"engine.scheduling_policy": "fcfs"}

# label -> (policy, policy kwargs, engine overrides, use the TBT-profiled token budget)
METHODS: dict[str, tuple[str, dict, dict, bool]] = {
    "vLLM-FCFS": ("vllm-v0", {}, FCFS, False),
    "Sarathi-FCFS": ("sarathi", {}, FCFS, True),
    "Sarathi-Priority": ("sarathi-priority", {}, {}, True),
    "FairBatching": ("fairbatching", {}, {}, False),
    "Weighted VTC": ("wvtc", {}, {}, False),
    "ProServe": ("proserve", {}, {}, False),
    "ProServe+starve": ("proserve", {"starve_prevent": True}, {}, False),
}
BASELINES = ["vLLM-FCFS", "Sarathi-FCFS", "Sarathi-Priority", "FairBatching", "Weighted VTC"]
ABLATIONS: dict[str, tuple[str, dict, dict, bool]] = {
    "w/ only deadline": ("proserve", {"mode": "only-deadline"}, {}, False),
    "w/ only density": ("proserve", {"mode": "only-density"}, {}, False),
    "w/ only density, decodes first": (
        "proserve",
        {"mode": "only-density-decode-first"},
        {},
        False,
    ),
    "w/o latency-aware": ("proserve", {"latency_aware": False}, {}, False),
}
MOMENTUM = {"ProServe+momentum": ("proserve", {"theta": 0.9, "window": 100}, {}, False)}
# Not in the sweeps: xLLM MixScheduler's memory handling taken literally (``knee_probe.py``; the
# README's "Memory handling: decision").
MEMORY = {"ProServe+xllm-mix memory": ("proserve", {"memory": "xllm-mix"}, {}, False)}

# config -> (env file, scenario overrides, full rates, medium rates, quick rates, paper rates)
CONFIGS: dict[str, tuple[str, dict, list, list, list, str]] = {
    "ShareGPT/Qwen2-7B": (
        "proserve-sharegpt-qwen2-7b-v0",
        {},
        [6.0, 7.0, 8.0, 9.0, 10.0, 11.0],
        [7.0, 9.0, 10.0, 11.0],
        [8.0, 10.0, 12.0],
        "24-32",
    ),
    "Azure/Qwen2-7B": (
        "proserve-azure-qwen2-7b-v0",
        {},
        [10.0, 15.0, 20.0, 25.0, 30.0, 35.0],
        [15.0, 25.0, 30.0, 35.0],
        [],
        "8-18",
    ),
    "ShareGPT/Qwen3-32B": (
        "proserve-sharegpt-qwen3-32b-v0",
        {},
        [0.4, 0.6, 0.8, 1.0, 1.2],
        [0.5, 0.8, 1.1],
        [],
        "10-20",
    ),
    "Azure/Qwen3-32B": (
        "proserve-azure-qwen2-7b-v0",
        {"cost_model": "roofline:qwen3-32b@h100-80gb"},
        [1.0, 2.0, 3.0, 4.0, 5.0],
        [1.0, 3.0, 5.0],
        [],
        "4-12",
    ),
}
# Fig. 10's TDG / SLO-attainment y-axis floors (lowest tick) for the matching panel, read from the
# paper's figure text (experiments.yaml, ``tdg-gain``'s lookup tables). Every plotted point of a
# panel lies at or just above its floor, so the paper's rate range ends where the worst plotted
# method reaches it (see ``paper_window``).
_FT = paper_table(EXPERIMENTS_YAML, "tdg-gain", "floor_tdg")
_FS = paper_table(EXPERIMENTS_YAML, "tdg-gain", "floor_slo")
PAPER_AXIS_FLOOR = {c: (float(_FT[c]), float(_FS[c])) for c in _FT}
# Tick spacing of the same panels (TDG 0.6 0.7 ... 1.0; SLO 0.6 0.8 1.0 or 0.2 0.4 ... 1.0): the
# floors minus those of ``tdg-gain-one-tick``. A panel's lowest plotted point lies above its
# lowest tick minus one spacing (otherwise the axis would show one more tick), so the floors
# bound the paper's range from both sides: data >= floor (``paper_window``'s default) and
# data > floor - step (``axis_step=True``).
_FT1 = paper_table(EXPERIMENTS_YAML, "tdg-gain-one-tick", "floor_tdg")
_FS1 = paper_table(EXPERIMENTS_YAML, "tdg-gain-one-tick", "floor_slo")
PAPER_AXIS_STEP = {
    c: (round(_FT[c] - _FT1[c], 9), round(_FS[c] - _FS1[c], 9)) for c in PAPER_AXIS_FLOOR
}
PAPER_TDG_GAIN = float(paper_value(EXPERIMENTS_YAML, "tdg-gain")["value"])
"""Abstract / §1: "up to 35%" higher TDG than the best baseline."""
PAPER_SLO_GAIN = float(paper_value(EXPERIMENTS_YAML, "slo-gain")["value"])
"""Abstract / §1: "up to 52%" higher SLO attainment."""
# ``--slo xllm``: the SLOs of the authors' serving stack instead of 5x the unloaded latency
# (``weizhehuang0827/xllm-service@0f87e4bb``'s defaults: TTFT 1,000 ms, TPOT 50 ms per request).
SLO_VARIANTS: dict[str, dict] = {
    "xllm": {"workload.slo_scale": None, "slo.ttft_s": 1.0, "slo.tpot_s": 0.05},
}
# ``--fine``: extra rates (Fig. 10 methods only) around where the worst method crosses the floors.
FINE_RATES = {
    "ShareGPT/Qwen2-7B": [8.25, 8.5, 8.75, 9.25, 9.5],
    "Azure/Qwen2-7B": [16.0, 17.0, 18.0, 19.0],
    "ShareGPT/Qwen3-32B": [0.5, 0.65, 0.7],
    "Azure/Qwen3-32B": [2.25, 2.5, 2.75],
}
# Fig. 11 (PD) and Fig. 12 (co-located): env, scenario overrides, rates (full, medium, quick),
# local x router combos. The paper gives no PD cluster shape; 4P+4D is the same scenario with
# twice the instances, at the same per-prefill-instance loads as 2P+2D.
_PD_COMBOS = [
    (local, router)
    for local in ("sarathi", "proserve")
    for router in ("least-load:backlog", "gorouting", "gorouting-random")
]
CLUSTERS = {
    "PD ShareGPT (2P+2D)": (
        "proserve-pd-sharegpt-v0",
        {},
        [20.0, 25.0, 30.0, 35.0],
        [20.0, 30.0, 35.0],
        [],
        _PD_COMBOS,
    ),
    "PD ShareGPT (4P+4D)": (
        "proserve-pd-sharegpt-v0",
        {
            "cluster.instances": [
                {"name": "prefill", "count": 4, "role": "prefill"},
                {"name": "decode", "count": 4, "role": "decode"},
            ]
        },
        [40.0, 50.0, 60.0, 70.0],
        [50.0, 60.0, 70.0],
        [],
        _PD_COMBOS,
    ),
    "Co-located Azure (4 nodes)": (
        "proserve-colocated-azure-v0",
        {},
        [60.0, 80.0, 100.0, 120.0],
        [80.0, 100.0, 120.0],
        [100.0],
        [("sarathi-priority", "least-load:backlog"), ("sarathi-priority", "gorouting")]
        + [("proserve", "least-load:backlog"), ("proserve", "gorouting")],
    ),
}
LOCAL_LABEL = {
    "sarathi": "FCFS",
    "sarathi-priority": "Sarathi-Priority",
    "proserve": "SlideBatching",
}
ROUTER_LABEL = {
    "least-load:backlog": "MinLoad",
    "gorouting": "GoRouting",
    "gorouting-random": "GoRouting-random",
}
_COLLECTOR: list[TDGCollector] = [TDGCollector()]


def _setup() -> None:
    if "proserve" not in list_policies():
        proserve.register(register_policy)
    if "gorouting" not in list_routers():
        proserve.register_routers(register_router)
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


def tbt_token_budget(model, specs, cap: int) -> int:
    """Sarathi's "profiled token budget based on TBT" (§5.1).

    The largest chunk c (multiple of 64) with estimated step time ``t_c + prefill(c, 0)``
    (Eq. 4-7) within the median TPOT SLO.
    """
    est = LatencyEstimator.fit(model, cap)
    slo = float(np.median([s.slo_tpot_s for s in specs if s.slo_tpot_s is not None]))
    c = est.max_chunk(0, slo - est.t_c, cap)
    return int(max(64, min(cap, c // 64 * 64)))


def tbt_overrides(sc, model, specs, ov: dict) -> dict:
    """Overrides for a method with the TBT-profiled token budget, at the scenario's KV size.

    The token budget is a scheduling knob only: ``num_gpu_blocks`` stays what the scenario's own
    ``max_num_batched_tokens`` gives. Without the pin, the smaller budget shrinks the simulated
    vLLM activation reservation and hands the Sarathi baselines 22% more KV on Qwen3-32B (1,994 or
    1,998 blocks instead of 1,640; +1.7% on Qwen2-7B). The paper runs every method in one xLLM
    deployment (§5.1, "uniformly implemented within the xLLM framework"), so KV is the same for all.
    """
    cfg = sc.engine_config(model)
    return {
        **ov,
        "engine.max_num_batched_tokens": tbt_token_budget(model, specs, cfg.max_num_batched_tokens),
        "engine.num_gpu_blocks": cfg.num_gpu_blocks,
    }


def run_single(env: str, over: dict, label: str, spec: tuple, rate: float, n: int) -> dict:
    """One single-node run: exact TDG ratio and SLO attainment, overall and per priority."""
    policy, kw, eng_over, tbt = spec
    ov = {**over, **eng_over, "workload.rate_per_s": rate, "workload.num_requests": n}
    sc = load_scenario(ENVS / f"{env}.yaml", ov)
    model = load_cost_model(sc.cost_model)
    specs = sc.build_workload(sc.seed, cost_model=model)
    wp, wd = _weights(specs)
    if tbt:
        sc = load_scenario(ENVS / f"{env}.yaml", tbt_overrides(sc, model, specs, ov))
    col = TDGCollector()
    kw = dict(kw)  # ProServe's wp:wd: the policy's own default (online dataset ratio, §5.1)
    pol = TokenTimelineRecorder(make_policy(policy, **kw), col)
    t0 = time.perf_counter()
    res = simulate(specs, sc.engine_config(model), pol, model)
    tab = res.request_table
    g = col.gains(list(tab["request_id"]), list(tab["weight"]), wp, wd)
    s = tdg_summary(tab, g, wp, wd)
    row = {
        "config": "",
        "env": env,
        "method": label,
        "rate": rate,
        "n": n,
        "wp": round(wp, 3),
        "estimator": "momentum"
        if kw.get("theta")
        else ("fixed-1.0" if policy == "proserve" else ""),
        "tdg_ratio": s["tdg_ratio"],
        "slo_attainment": s["slo_attainment"],
    }
    for p, b in s["by_priority"].items():
        row[f"tdg_p{p}"], row[f"slo_p{p}"] = b["tdg_ratio"], b["slo_attainment"]
    row["sim_s"] = round(time.perf_counter() - t0, 2)
    return row


def run_cluster(
    env: str, policy: str, router: str, rate: float, n: int, over: dict | None = None
) -> dict:
    """One multi-instance run of ``policy`` on every instance with ``router``."""
    ov = {**(over or {}), "workload.rate_per_s": rate, "workload.num_requests": n}
    if policy == "sarathi":  # the FCFS local baseline runs on the FCFS queue
        ov.update(FCFS)
    sc = load_scenario(ENVS / f"{env}.yaml", ov)
    model = load_cost_model(sc.cost_model)
    specs = sc.build_workload(sc.seed, cost_model=model)
    wp, wd = _weights(specs)
    _COLLECTOR[0] = col = TDGCollector()
    col.set_arrivals({s.request_id: s.arrival_time for s in specs})
    t0 = time.perf_counter()
    res = sc.simulate(scheduler=f"tdg+{policy}", router=router)
    tab = res.request_table
    g = col.gains(list(tab["request_id"]), list(tab["weight"]), wp, wd)
    s = tdg_summary(tab, g, wp, wd)
    # First-token TDG (Fig. 11 reports only the prefill side for PD).
    first = np.array([col.first_on_time.get(r, False) for r in tab["request_id"]], float)
    w = np.asarray(tab["weight"], float)
    return {
        "config": "",
        "env": env,
        "method": f"{LOCAL_LABEL[policy]}+{ROUTER_LABEL[router]}",
        "rate": rate,
        "n": n,
        "tdg_ratio": s["tdg_ratio"],
        "first_token_tdg": float((w * first).sum() / w.sum()),
        "slo_attainment": s["slo_attainment"],
        "sim_s": round(time.perf_counter() - t0, 2),
    }


def _write(rows: list[dict], path: Path) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def main(argv=None) -> None:
    """Run the sweeps, write CSVs, findings.md and plots under ``--out``."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="ShareGPT/Qwen2-7B, 3 rates, 500 requests")
    g.add_argument("--medium", action="store_true", help="all configs, fewer rates and requests")
    ap.add_argument(
        "--out",
        help="output folder (default out/leaderboard/reproduce/proserve/ under the repository, "
        "its quick/, medium/ or slo-<name>/ subfolder)",
    )
    ap.add_argument(
        "--update", action="store_true",
        help="write into the committed results/ (its slo-<name>/ subfolder with --slo)",
    )  # fmt: skip
    ap.add_argument(
        "--no-report", action="store_true",
        help="only the CSVs: no findings.md, no plots (parallel units; a --replot run follows)",
    )  # fmt: skip
    ap.add_argument("--skip-cluster", action="store_true")
    ap.add_argument(
        "--fine",
        action="store_true",
        help="Fig. 10 methods at FINE_RATES (full-sweep sizes) -> fig10_fine.csv, then --replot",
    )
    ap.add_argument("--configs", nargs="*", help="subset of config names")
    ap.add_argument(
        "--methods",
        nargs="*",
        help="only these single-node methods (full-sweep sizes, no clusters): their rows replace "
        "the same (config, method) rows in --out's fig10_single_node.csv (ablation labels: "
        "fig15_ablation.csv; with --fine: fig10_fine.csv), then --replot",
    )
    ap.add_argument(
        "--clusters",
        nargs="*",
        help="only these cluster configs (no single-node runs); their rows replace the same "
        "configs' rows in --out's fig11_12_cluster.csv, then --replot",
    )
    ap.add_argument(
        "--replot", action="store_true", help="rebuild findings.md and plots from the CSVs in --out"
    )
    ap.add_argument(
        "--curves",
        action="store_true",
        help="the γ sweep and the SLO-multiplier curve (run_curves) -> curves.csv, curves.md "
        "(with --replot: curves.md from curves.csv)",
    )
    ap.add_argument(
        "--slo",
        choices=sorted(SLO_VARIANTS),
        help="Fig. 10's methods on the main and fine grids under these SLOs instead of the "
        "scenarios' 5x unloaded ones (xllm: TTFT 1 s, TPOT 50 ms) -> results/slo-<name>/",
    )
    a = ap.parse_args(argv)
    _setup()
    sub = "quick" if a.quick else ("medium" if a.medium else "")
    if a.slo:
        sub = f"slo-{a.slo}"
    if a.curves:
        sub = "curves"
    if a.update and (a.quick or a.medium):
        ap.error("--update writes the full results into results/; drop --quick / --medium")
    if a.update and a.out:
        ap.error("--update writes into results/; drop --out")
    out = Path(a.out) if a.out else (HERE / "results" if a.update else DEFAULT_OUT) / sub
    global _NO_REPORT
    _NO_REPORT = a.no_report
    out.mkdir(parents=True, exist_ok=True)
    if a.slo:
        if a.replot:
            print(slo_findings(_read(out / "fig10_single_node.csv"), a.slo))
            return
        print(run_slo_variant(out, a.slo, a.configs, a.methods))
        return
    if a.curves:
        if a.replot:
            rows = _read(out / "curves.csv")
            md = curves_findings(rows)
            (out / "curves.md").write_text(md)
            curves_plot(rows, out)
        else:
            md = run_curves(out, a.configs)
        print(md)
        return
    if a.replot:
        replot(out)
        return
    level = 0 if a.quick else (1 if a.medium else 2)
    if a.fine:
        run_fine(out, a.configs, a.methods)
        replot(out)
        return
    if a.methods:
        run_methods(out, a.methods, a.configs)
        replot(out)
        return
    n_single = {0: 500, 1: 600, 2: 1000}[level]
    n_32b = {0: 300, 1: 300, 2: 500}[level]
    n_cluster = {0: 1200, 1: 2000, 2: 3000}[level]
    jobs: list[tuple] = []
    for cname, (env, over, full, med, quick, _) in CONFIGS.items():
        if a.clusters or (a.configs and cname not in a.configs):
            continue
        rates = [quick, med, full][level]
        n = n_32b if "32B" in cname else n_single
        methods = {**METHODS, **ABLATIONS}
        if level == 2 or cname == "ShareGPT/Qwen2-7B":
            methods.update(MOMENTUM)
        for rate in rates:
            for label, spec in methods.items():
                jobs.append(("single", cname, env, over, label, spec, rate, n))
    if not a.skip_cluster:
        for cname, (env, cover, full, med, quick, combos) in CLUSTERS.items():
            if a.clusters and cname not in a.clusters:
                continue
            for rate in [quick, med, full][level]:
                for policy, router in combos:
                    jobs.append(("cluster", cname, env, cover, policy, router, rate, n_cluster))
    from tqdm import tqdm

    single, clus = [], []
    t0 = time.perf_counter()
    bar = tqdm(jobs, desc="proserve sweep", unit="run", file=sys.stderr, mininterval=2.0)
    for job in bar:
        bar.set_postfix_str(f"{job[1]} {job[-2]} {job[-4] if job[0] == 'cluster' else job[4]}"[:60])
        if job[0] == "single":
            _, cname, env, over, label, spec, rate, n = job
            row = run_single(env, over, label, spec, rate, n)
            row["config"] = cname
            single.append(row)
        else:
            _, cname, env, cover, policy, router, rate, n = job
            row = run_cluster(env, policy, router, rate, n, cover)
            row["config"] = cname
            clus.append(row)
    elapsed = time.perf_counter() - t0
    if a.clusters:
        cpath = out / "fig11_12_cluster.csv"
        old = [r for r in _read(cpath) if r["config"] not in a.clusters] if cpath.exists() else []
        _write(old + clus, cpath)
        replot(out)
        return
    main_rows = [r for r in single if r["method"] in METHODS or r["method"] in MOMENTUM]
    abl_rows = [r for r in single if r["method"] in ABLATIONS or r["method"] == "ProServe"]
    _write(main_rows, out / "fig10_single_node.csv")
    _write(abl_rows, out / "fig15_ablation.csv")
    if clus:
        _write(clus, out / "fig11_12_cluster.csv")
    if _NO_REPORT:
        return
    fpath = out / "fig10_fine.csv"
    md = findings(single, clus, level, elapsed, _read(fpath) if fpath.exists() else [])
    (out / "findings.md").write_text(md)
    print(md)
    plots(single, clus, out)


def _merge(rows: list[dict], path: Path) -> None:
    """Write ``rows`` over ``path``: same (config, method, rate) rows replaced in place."""
    new = {(r["config"], r["method"], float(r["rate"])): r for r in rows}
    old = _read(path) if path.exists() else []
    merged = [new.pop((r["config"], r["method"], float(r["rate"])), r) for r in old]
    _write(merged + list(new.values()), path)


def _run_points(jobs: list[tuple], specs: dict, desc: str, extra: dict | None = None) -> list[dict]:
    """``run_single`` for each (config, rate, label) at the full sweep's request counts.

    ``specs`` maps labels to method specs; ``extra`` adds scenario overrides to the config's.
    """
    from tqdm import tqdm

    rows = []
    for cname, rate, label in tqdm(jobs, desc=desc, file=sys.stderr):
        env, over = CONFIGS[cname][:2]
        n = 500 if "32B" in cname else 1000
        row = run_single(env, {**over, **(extra or {})}, label, specs[label], rate, n)
        row["config"] = cname
        rows.append(row)
    return rows


def run_methods(out: Path, methods: list[str], configs: list[str] | None = None) -> None:
    """Main-grid rows of ``methods`` (full-sweep sizes) -> merged into fig10_single_node.csv.

    Ablation labels (``ABLATIONS``) are merged into fig15_ablation.csv instead.
    """
    jobs = [
        (cname, rate, label)
        for cname, (_, _, full, *_rest) in CONFIGS.items()
        if not configs or cname in configs
        for rate in full
        for label in methods
    ]
    rows = _run_points(jobs, {**METHODS, **MOMENTUM, **ABLATIONS}, "proserve methods")
    main_rows = [r for r in rows if r["method"] not in ABLATIONS]
    if main_rows:
        _merge(main_rows, out / "fig10_single_node.csv")
    # fig15_ablation.csv carries ProServe beside its ablations, as the full sweep writes it.
    abl_rows = [r for r in rows if r["method"] in ABLATIONS or r["method"] == "ProServe"]
    if abl_rows:
        _merge(abl_rows, out / "fig15_ablation.csv")


def run_slo_variant(
    out: Path, variant: str, configs: list[str] | None = None, methods: list[str] | None = None
) -> str:
    """Fig. 10's six methods on the main and fine grids under ``SLO_VARIANTS[variant]``.

    Full-sweep request counts; writes ``fig10_single_node.csv`` and ``findings.md`` (every
    point, and ProServe's max gain over the best and the worst baseline inside the paper's
    plotted window, both bounds of ``paper_window``) under ``out``; returns the markdown.
    """
    jobs = [
        (cname, rate, label)
        for cname, (_, _, full, *_rest) in CONFIGS.items()
        if not configs or cname in configs
        for rate in sorted({*full, *FINE_RATES.get(cname, [])})
        for label in methods or [*BASELINES, "ProServe"]
    ]
    t0 = time.perf_counter()
    rows = _run_points(jobs, METHODS, f"proserve slo={variant}", SLO_VARIANTS[variant])
    if methods:  # only these methods' rows are replaced
        _merge(rows, out / "fig10_single_node.csv")
        rows = _read(out / "fig10_single_node.csv")
    else:
        _write(rows, out / "fig10_single_node.csv")
    md = slo_findings(rows, variant, None if methods else time.perf_counter() - t0)
    (out / "findings.md").write_text(md)
    return md


GAMMAS = [0.5, 1.0, 1.5, 2.0]
"""γ sweep (Alg. 1's urgency threshold ``remaining < γ·φ``; xLLM @87e8d6e's default 1.0)."""
SLO_MULTS = [2.0, 3.0, 5.0, 10.0]
"""SLO-multiplier curve: TTFT and TPOT SLOs at these multiples of the unloaded latency (the
scenarios' ``workload.slo_scale``; 5 is the main sweep's)."""


def curve_rates(cname: str) -> list[float]:
    """The curves' rate grid: the medium grid plus the full grid's lowest rate.

    The lowest full-grid rate is where every method meets its 5x SLOs.
    """
    _, _, full, med, *_ = CONFIGS[cname]
    return sorted({full[0], *med})


def run_curves(out: Path, configs: list[str] | None = None) -> str:
    """γ and SLO-multiplier curves -> ``curves.csv`` and ``curves.md`` under ``out``.

    Declared before running, and every point reported: each config at ``curve_rates`` with the
    medium sweep's request counts (600 Qwen2-7B / 300 Qwen3-32B); the five baselines and
    ProServe (γ = 1) at every SLO multiplier in ``SLO_MULTS``; ProServe at every γ in ``GAMMAS``
    at 5x. ``curves.md`` gives ProServe's TDG and SLO gain over the best baseline at every
    (config, rate) of each curve, and per curve point the range over rates.
    """
    from tqdm import tqdm

    cnames = [c for c in CONFIGS if not configs or c in configs]
    jobs = []
    for cname in cnames:
        for rate in curve_rates(cname):
            for mult in SLO_MULTS:
                for label in [*BASELINES, "ProServe"]:
                    jobs.append((cname, rate, mult, 1.0, label))
            for gamma in GAMMAS:
                if gamma != 1.0:
                    jobs.append((cname, rate, 5.0, gamma, "ProServe"))
    rows = []
    for cname, rate, mult, gamma, label in tqdm(jobs, desc="proserve curves", file=sys.stderr):
        env, over = CONFIGS[cname][:2]
        n = 300 if "32B" in cname else 600
        pol, kw, eng, tbt = METHODS[label]
        spec = (pol, {**kw, "gamma": gamma} if label == "ProServe" else kw, eng, tbt)
        row = run_single(env, {**over, "workload.slo_scale": mult}, label, spec, rate, n)
        row.update(config=cname, slo_mult=mult, gamma=gamma)
        rows.append(row)
    _write(rows, out / "curves.csv")
    md = curves_findings(rows)
    (out / "curves.md").write_text(md)
    curves_plot(rows, out)
    return md


def curve_gains(rows: list[dict]) -> list[dict]:
    """ProServe's gain over the best baseline per (config, rate, SLO multiplier, γ)."""
    base: dict = collections.defaultdict(dict)
    for r in rows:
        if r["method"] in BASELINES:
            base[(r["config"], float(r["rate"]), float(r["slo_mult"]))][r["method"]] = r
    out = []
    for r in rows:
        if r["method"] != "ProServe":
            continue
        b = base.get((r["config"], float(r["rate"]), float(r["slo_mult"])), {})
        if len(b) != len(BASELINES):
            continue
        best_t = max(x["tdg_ratio"] for x in b.values())
        best_s = max(x["slo_attainment"] for x in b.values())
        out.append(
            dict(
                config=r["config"],
                rate=float(r["rate"]),
                slo_mult=float(r["slo_mult"]),
                gamma=float(r["gamma"]),
                tdg=r["tdg_ratio"],
                best_tdg=best_t,
                tdg_gain=_gain(r["tdg_ratio"], best_t),
                slo=r["slo_attainment"],
                best_slo=best_s,
                slo_gain=_gain(r["slo_attainment"], best_s),
            )
        )
    return out


def curves_findings(rows: list[dict]) -> str:
    """``curves.md``: every point of the γ and SLO-multiplier curves, then per-curve ranges."""
    g = curve_gains(rows)
    lines = [
        "# ProServe: γ and SLO-multiplier curves",
        "",
        "ProServe's TDG ratio and SLO attainment against the best of the five baselines at the "
        "same (config, rate, SLO multiplier); every point of `curves.csv`.",
        "",
        "| curve | config | rate | ProServe TDG | best baseline TDG | TDG gain "
        "| ProServe SLO | best baseline SLO | SLO gain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in sorted(g, key=lambda x: (x["gamma"] != 1.0, x["slo_mult"], x["gamma"])):
        if x["gamma"] == 1.0:
            curve = f"SLO {x['slo_mult']:g}x"
        elif x["slo_mult"] == 5.0:
            curve = f"γ = {x['gamma']:g}"
        else:
            continue
        lines.append(
            f"| {curve} | {x['config']} | {x['rate']:g} | {x['tdg']:.3f} | {x['best_tdg']:.3f} "
            f"| {x['tdg_gain']:+.1%} | {x['slo']:.3f} | {x['best_slo']:.3f} "
            f"| {x['slo_gain']:+.1%} |"
        )
    lines += [
        "",
        "| curve point | TDG gain over the best baseline, min to max over (config, rate) "
        "| points with TDG gain < 0 | SLO gain, min to max |",
        "|---|---|---|---|",
    ]
    keys = [("SLO", m, 1.0) for m in SLO_MULTS] + [("γ", 5.0, y) for y in GAMMAS]
    for kind, m, y in keys:
        sub = [x for x in g if x["slo_mult"] == m and x["gamma"] == y]
        if not sub:
            continue
        name = f"SLO {m:g}x (γ = 1)" if kind == "SLO" else f"γ = {y:g} (SLO 5x)"
        tg = [x["tdg_gain"] for x in sub]
        sg = [x["slo_gain"] for x in sub]
        neg = [x for x in sub if x["tdg_gain"] < 0]
        where = ", ".join(f"{x['config']} {x['rate']:g} ({x['tdg_gain']:+.1%})" for x in neg)
        lines.append(
            f"| {name} | {min(tg):+.1%} to {max(tg):+.1%} | {len(neg)}/{len(sub)}"
            f"{': ' + where if where else ''} | {min(sg):+.1%} to {max(sg):+.1%} |"
        )
    return "\n".join(lines) + "\n"


def curves_plot(rows: list[dict], out: Path) -> None:
    """``curves.png``: ProServe's TDG gain over the best baseline vs rate, per config.

    Solid: the SLO multipliers at γ = 1; dashed: the γ values at 5x SLOs.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = curve_gains(rows)
    cnames = list(dict.fromkeys(x["config"] for x in g))
    fig, axes = plt.subplots(1, len(cnames), figsize=(4 * len(cnames), 3.2), squeeze=False)
    for ax, cname in zip(axes[0], cnames, strict=True):
        sub = [x for x in g if x["config"] == cname]
        for m in SLO_MULTS:
            pts = sorted(
                (x["rate"], x["tdg_gain"]) for x in sub if x["slo_mult"] == m and x["gamma"] == 1.0
            )
            ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=f"SLO {m:g}x")
        for y in GAMMAS:
            if y == 1.0:
                continue
            pts = sorted(
                (x["rate"], x["tdg_gain"]) for x in sub if x["slo_mult"] == 5.0 and x["gamma"] == y
            )
            ax.plot(*zip(*pts, strict=True), ls="--", lw=1, label=f"γ {y:g} (5x)")
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_title(cname, fontsize=9)
        ax.set_xlabel("rate (req/s)")
    axes[0][0].set_ylabel("TDG gain over the best baseline")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=90)
    plt.close(fig)


def _gain_cell(r: dict, key: str) -> str:
    """``paper_window``'s (gain, points, rate) for ``key`` as a table cell."""
    if key not in r:
        return "-"
    g, pts, rate = r[key]
    return f"{g:+.1%} ({pts:+.3f} at {rate:g})"


def slo_findings(rows: list[dict], variant: str, elapsed: float | None = None) -> str:
    """Markdown of an SLO-variant sweep: per point TDG / SLO attainment, then the window gains."""
    slo = SLO_VARIANTS[variant]
    lines = [
        f"# ProServe Fig. 10 methods under SLO variant `{variant}`",
        "",
        f"SLO overrides: `{slo}`"
        + (f"; {len(rows)} runs in {elapsed / 60:.1f} min." if elapsed is not None else "."),
        "",
        "| config | rate | " + " | ".join([*BASELINES, "ProServe"]) + " |",
        "|---|---|" + "---|" * (len(BASELINES) + 1),
    ]
    by = _by(rows)
    for cname, rates in by.items():
        for rate, d in sorted(rates.items()):
            cells = [
                f"{d[m]['tdg_ratio']:.3f} / {d[m]['slo_attainment']:.3f}" if m in d else "-"
                for m in [*BASELINES, "ProServe"]
            ]
            lines.append(f"| {cname} | {rate:g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Cells: TDG ratio / SLO attainment. Max gain of ProServe inside the paper's plotted "
        "window (`paper_window`: strict floors, and floors lowered by one tick):",
        "",
        "| config | bound | window (req/s) | TDG over best | TDG over worst | SLO over best |"
        " SLO over worst |",
        "|---|---|---|---|---|---|---|",
    ]
    windows = (("strict", paper_window(rows)), ("one tick", paper_window(rows, axis_step=True)))
    for bound, win in windows:
        for cname, r in win.items():
            cells = [_gain_cell(r, k) for k in ("tdg_best", "tdg_worst", "slo_best", "slo_worst")]
            rates_txt = ", ".join(f"{x:g}" for x in r["window"]) or "empty"
            lines.append(f"| {cname} | {bound} | {rates_txt} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_fine(out: Path, configs: list[str] | None = None, methods: list[str] | None = None) -> None:
    """Fig. 10 methods at ``FINE_RATES`` with the full sweep's request counts -> fig10_fine.csv.

    With ``configs`` or ``methods`` only those rows are rerun and merged into the file.
    """
    jobs = [
        (cname, rate, label)
        for cname, rates in FINE_RATES.items()
        if not configs or cname in configs
        for rate in rates
        for label in methods or [*BASELINES, "ProServe"]
    ]
    rows = _run_points(jobs, METHODS, "proserve fine grid")
    if configs or methods:
        _merge(rows, out / "fig10_fine.csv")
    else:
        _write(rows, out / "fig10_fine.csv")


# -- analysis -------------------------------------------------------------------------------
def _read(path: Path) -> list[dict]:
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            row: dict = {}
            for k, v in r.items():
                try:
                    row[k] = v if k in ("config", "env", "method", "estimator") else float(v)
                except ValueError:
                    row[k] = v
            rows.append(row)
    return rows


_NO_REPORT = False
"""``--no-report``: sweeps write only their CSVs (``replot`` does nothing)."""


def replot(out: Path) -> None:
    """Rebuild findings.md and the plots from the CSVs a sweep wrote to ``out``."""
    if _NO_REPORT:
        return
    single = _read(out / "fig10_single_node.csv")
    single += [r for r in _read(out / "fig15_ablation.csv") if r["method"] != "ProServe"]
    cpath = out / "fig11_12_cluster.csv"
    clus = _read(cpath) if cpath.exists() else []
    fpath = out / "findings.md"
    head = fpath.read_text().splitlines()[0] if fpath.exists() else ""
    level = 0 if "quick" in head else (1 if "medium" in head else 2)
    mins = float(head.split(", ")[-1].split(" min")[0]) if " min)" in head else 0.0
    fine_path = out / "fig10_fine.csv"
    fine = _read(fine_path) if fine_path.exists() else []
    md = findings(single, clus, level, mins * 60, fine)
    fpath.write_text(md)
    print(md)
    plots(single, clus, out)


# Fig. 15 as we read the bar labels (series-major: only deadline, only density, w/o
# latency-aware; low/medium/high load), normalised Miss-TDG of each variant over ProServe's:
# experiments.yaml, ``paper.levels`` of the fig15-* entries.
_FIG15_IDS = {
    "w/ only deadline": "fig15-only-deadline",
    "w/ only density": "fig15-only-density",
    "w/o latency-aware": "fig15-no-latency-aware",
}
_FIG15_LEVELS = {
    label: paper_value(EXPERIMENTS_YAML, exp_id)["levels"] for label, exp_id in _FIG15_IDS.items()
}
PAPER_FIG15 = {
    ds: {label: tuple(float(x) for x in lv[ds]) for label, lv in _FIG15_LEVELS.items()}
    for ds in ("ShareGPT", "Azure")
}
WINDOW = 0.6
"""Paper-like window: rates where the best baseline's TDG ratio is still >= 0.6 (Fig. 10's
baselines stay around or above 0.4-0.6; past that ours collapse and ratios explode)."""


def _by(rows: list[dict]) -> dict:
    d: dict = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in rows:
        d[r["config"]][r["rate"]][r["method"]] = r
    return d


def _gain(a: float, b: float) -> float:
    return a / b - 1 if b > 0 else (math.inf if a > 0 else 0.0)


def paper_window(rows: list[dict], slack: float = 0.0, axis_step: bool = False) -> dict[str, dict]:
    """ProServe's max gain per config over the rates Fig. 10 would have plotted.

    A rate is in the window when every Fig. 10 method (the five baselines and ProServe) has
    TDG ratio >= the paper panel's TDG axis floor - ``slack`` and SLO attainment >= its SLO
    axis floor - ``slack`` (``PAPER_AXIS_FLOOR``). With ``axis_step`` the floors are lowered by
    the panel's tick spacing instead (``PAPER_AXIS_STEP``; the bound is then strict: data >
    floor - step), the lowest the paper's plotted points can be. Per config: the window's rates
    and the largest relative gain of ProServe (TDG and SLO attainment, separately) over the best
    and over the worst baseline at the same rate, with the absolute gain in points at that rate.
    """
    out: dict[str, dict] = {}
    for cname, rates in _by(rows).items():
        ft, fs = PAPER_AXIS_FLOOR.get(cname, (0.0, 0.0))
        eps = 0.0
        if axis_step:
            st, ss = PAPER_AXIS_STEP.get(cname, (0.0, 0.0))
            ft, fs = round(ft - st, 9), round(fs - ss, 9)
            eps = 1e-9  # strictly above floor - step
        res: dict = {"window": [], "floors": (ft, fs)}
        for rate, d in sorted(rates.items()):
            if "ProServe" not in d or not all(b in d for b in BASELINES):
                continue
            ms = [*BASELINES, "ProServe"]
            if min(d[m]["tdg_ratio"] for m in ms) < ft - slack + eps - 1e-12:
                continue
            if min(d[m]["slo_attainment"] for m in ms) < fs - slack + eps - 1e-12:
                continue
            res["window"].append(rate)
            for key, met in (("tdg", "tdg_ratio"), ("slo", "slo_attainment")):
                p = d["ProServe"][met]
                vals = [d[b][met] for b in BASELINES]
                for ref, b in (("best", max(vals)), ("worst", min(vals))):
                    k = f"{key}_{ref}"
                    g = _gain(p, b)
                    if k not in res or g > res[k][0]:
                        res[k] = (g, p - b, rate)
        out[cname] = res
    return out


def findings(
    single: list[dict],
    clus: list[dict],
    level: int,
    elapsed: float,
    fine: list[dict] | None = None,
) -> str:
    """Markdown: tables per config, gains over the best baseline, per-priority, ablation."""
    by = _by(single)
    L = [
        f"# ProServe reproduction findings ({['quick', 'medium', 'full'][level]} sweep, "
        f"{elapsed / 60:.1f} min)",
        "",
        "TDG ratio / SLO attainment. `ProServe` = SlideBatching as in Alg. 1 with the code's "
        "fixed estimator factor 1.0; `ProServe+starve` adds xLLM's starved-prefill-first rule; "
        "`ProServe+momentum` uses the paper's theta=0.9 correction.",
        "",
    ]
    cols = BASELINES + ["ProServe", "ProServe+starve", "ProServe+momentum"]
    summary = []
    for cname, rates in by.items():
        L += [f"## {cname} (paper rates {CONFIGS[cname][5]} req/s on Ascend 910B)", ""]
        present = [c for c in cols if any(c in d for d in rates.values())]
        L.append("| rate | " + " | ".join(present) + " |")
        L.append("|---:|" + "---|" * len(present))
        best_t = best_s = -math.inf
        at_t = at_s = None
        win_t = win_s = -math.inf
        wat_t = wat_s = None
        for rate, d in sorted(rates.items()):
            cells = []
            bt = max(d[b]["tdg_ratio"] for b in BASELINES if b in d)
            bs = max(d[b]["slo_attainment"] for b in BASELINES if b in d)
            for c in present:
                if c not in d:
                    cells.append("")
                    continue
                t, s = d[c]["tdg_ratio"], d[c]["slo_attainment"]
                bold = c == "ProServe" and t >= bt
                cells.append(f"{'**' if bold else ''}{t:.3f} / {s:.3f}{'**' if bold else ''}")
            L.append(f"| {rate:g} | " + " | ".join(cells) + " |")
            p = d.get("ProServe")
            if p:
                gt, gs = _gain(p["tdg_ratio"], bt), _gain(p["slo_attainment"], bs)
                if gt > best_t:
                    best_t, at_t = gt, rate
                if gs > best_s:
                    best_s, at_s = gs, rate
                if bt >= WINDOW and gt > win_t:
                    win_t, wat_t = gt, rate
                if bt >= WINDOW and gs > win_s:
                    win_s, wat_s = gs, rate
        L.append("")
        lo, hi = min(rates), max(rates)
        shape = {
            b: (rates[lo][b]["tdg_ratio"], rates[hi][b]["tdg_ratio"])
            for b in BASELINES
            if b in rates[lo] and b in rates[hi]
        }
        prio = rates[hi].get("ProServe", {})
        summary.append(
            (cname, best_t, at_t, best_s, at_s, shape, prio, rates, win_t, wat_t, win_s, wat_s)
        )
    L += ["## Paper vs ours", "", "| finding | paper | ours | verdict |", "|---|---|---|---|"]

    def verdict(x: float, paper: float) -> str:
        return "within ±30%" if paper * 0.7 <= x <= paper * 1.3 else "outside ±30%"

    fig10 = [r for r in single if r["method"] in (*BASELINES, "ProServe")] + list(fine or [])
    for label, win in (
        ("paper's plotted range (all methods >= the axis floors)", paper_window(fig10)),
        ("widest range the axes allow (one tick lower)", paper_window(fig10, axis_step=True)),
    ):
        for key, metric, paper in (
            ("tdg_best", "TDG", PAPER_TDG_GAIN),
            ("slo_best", "SLO-attainment", PAPER_SLO_GAIN),
        ):
            hits = [(r[key][0], c, r[key][2]) for c, r in win.items() if key in r]
            if hits:
                g, c, at = max(hits)
                L.append(
                    f"| **max {metric} gain over the best baseline, {label}** | up to "
                    f"+{paper:.0%} | {g:+.1%} ({c}, {at:g} req/s) | {verdict(g, paper)} |"
                )
    wins = [(r[8], r[0], r[9]) for r in summary if r[9] is not None]
    wins_s = [(r[10], r[0], r[11]) for r in summary if r[11] is not None]
    if wins:
        g, c, at = max(wins)
        L.append(
            f"| old rule, past the paper's range: max TDG gain over the best baseline, best "
            f"baseline TDG >= {WINDOW} | up to +35% | {g:+.1%} ({c}, {at:g} req/s) | "
            f"{verdict(g, PAPER_TDG_GAIN)} |"
        )
    if wins_s:
        g, c, at = max(wins_s)
        L.append(
            f"| old rule: max SLO-attainment gain, same window | up to +52% | {g:+.1%} "
            f"({c}, {at:g} req/s) | {verdict(g, PAPER_SLO_GAIN)} |"
        )

    for row in summary:
        cname, bt, at_t, bs, at_s, shape, prio, rates, wt, wat_t, ws, wat_s = row
        if wat_t is not None:
            L.append(
                f"| {cname}: max TDG gain over the best baseline while its TDG >= {WINDOW} "
                f"| up to +35% | {wt:+.1%} at {wat_t:g} req/s | {verdict(wt, PAPER_TDG_GAIN)} |"
            )
        if wat_s is not None:
            L.append(
                f"| {cname}: max SLO-attainment gain, same window | up to +52% | "
                f"{ws:+.1%} at {wat_s:g} req/s | {verdict(ws, PAPER_SLO_GAIN)} |"
            )
        L.append(
            f"| {cname}: max TDG gain over all rates | up to +35% | {bt:+.1%} at {at_t:g} req/s "
            f"| {verdict(bt, PAPER_TDG_GAIN)} |"
        )
        L.append(
            f"| {cname}: max SLO-attainment gain over all rates | up to +52% | {bs:+.1%} at "
            f"{at_s:g} req/s | {verdict(bs, PAPER_SLO_GAIN)} |"
        )
        lo, hi = min(rates), max(rates)
        dl = [b for b in ("FairBatching", "Sarathi-FCFS") if b in shape]
        if dl and "ProServe" in rates[lo] and "ProServe" in rates[hi]:
            gap_lo = max(rates[lo]["ProServe"]["tdg_ratio"] - shape[b][0] for b in dl)
            gap_hi = max(rates[hi]["ProServe"]["tdg_ratio"] - shape[b][1] for b in dl)
            L.append(
                f"| {cname}: deadline-first baselines match at low load, collapse at high load | "
                f"yes | ProServe lead over {'/'.join(dl)}: {gap_lo:+.3f} at {lo:g}, "
                f"{gap_hi:+.3f} at {hi:g} req/s | "
                f"{'reproduced' if gap_lo < 0.02 and gap_hi > 0.05 else 'partly'} |"
            )
        if prio:
            h, lw = prio.get("tdg_p0", float("nan")), prio.get("tdg_p1", float("nan"))
            hs, ls = prio.get("slo_p0", float("nan")), prio.get("slo_p1", float("nan"))
            L.append(
                f"| {cname}: ProServe high vs low priority at {hi:g} req/s (Fig. 13) | high "
                f"slightly above low | TDG {h:.3f} vs {lw:.3f}, SLO {hs:.3f} vs {ls:.3f} | "
                f"{'reproduced' if h >= lw and hs >= ls else 'not reproduced'} |"
            )
    L += [
        "",
        "## Max gain in the paper's plotted range (Fig. 10 axis floors)",
        "",
        'The paper does not define its "up to +35% / +52%". Its Fig. 10 panels for our four '
        "configs put the TDG / SLO-attainment axis floors at the values below, and every plotted "
        "method stays above them, so its rate range ends where the *worst* method reaches the "
        "floor. Window: rates (main grid plus `fig10_fine.csv`) where all six Fig. 10 methods "
        "are at or above both floors. Gain = ProServe / baseline - 1 at the same rate "
        "(points = ProServe - baseline), max over the window. The lowest plotted point can sit "
        "up to one tick below the lowest tick (TDG ticks every 0.1, SLO every 0.2), so the second "
        "table lowers the floors by one tick (`axis_step`): the widest range the axes allow.",
        "",
        "| config | floors TDG/SLO | window (req/s) | TDG vs best | SLO vs best | TDG vs worst "
        "| SLO vs worst |",
        "|---|---|---|---|---|---|---|",
    ]
    wide = paper_window(fig10, axis_step=True)

    def _cell(r: dict, k: str) -> str:
        if k not in r:
            return "-"
        g, pts, at = r[k]
        return f"{g:+.1%} ({pts:+.3f}) @{at:g}"

    def _row(cname: str, r: dict, op: str) -> str:
        return (
            f"| {cname} | {op}{r['floors'][0]:.2g}/{op}{r['floors'][1]:.2g} | "
            f"{', '.join(f'{x:g}' for x in r['window']) or '-'} | {_cell(r, 'tdg_best')} | "
            f"{_cell(r, 'slo_best')} | {_cell(r, 'tdg_worst')} | {_cell(r, 'slo_worst')} |"
        )

    for cname, r in paper_window(fig10).items():
        L.append(_row(cname, r, ">="))
    L += [
        "",
        "One tick lower (every method's TDG > floor - 0.1 and SLO attainment > floor - 0.2):",
        "",
        "| config | floors TDG/SLO | window (req/s) | TDG vs best | SLO vs best | TDG vs worst "
        "| SLO vs worst |",
        "|---|---|---|---|---|---|---|",
    ]
    for cname, r in wide.items():
        L.append(_row(cname, r, ">"))
    L += ["", "## Per priority at the two highest rates (Fig. 13): TDG / SLO high | low", ""]
    for cname, rates in by.items():
        L.append(f"### {cname}")
        L += ["", "| rate | method | high | low |", "|---:|---|---|---|"]
        for rate in sorted(rates)[-2:]:
            for m in (
                "Sarathi-FCFS",
                "Sarathi-Priority",
                "Weighted VTC",
                "ProServe",
                "ProServe+starve",
            ):
                r = rates[rate].get(m)
                if r:
                    L.append(
                        f"| {rate:g} | {m} | {r['tdg_p0']:.3f} / {r['slo_p0']:.3f} | "
                        f"{r['tdg_p1']:.3f} / {r['slo_p1']:.3f} |"
                    )
        L.append("")
    L += [
        "## Ablation (Fig. 15): Miss-TDG normalised to full ProServe, ours (paper's)",
        "",
        "Paper load levels are its own low/medium/high rates; ours are the lowest, middle and "
        "highest rate of the sweep. Paper values as we read Fig. 15's bar labels. `w/ only "
        "density` orders the whole queue by density (§5.4, Alg. 1 line 13, xLLM's `density` "
        "strategy); `w/ only density, decodes first` is the earlier form (paper value repeated).",
        "",
        "| config | load | rate | " + " | ".join(ABLATIONS) + " |",
        "|---|---|---:|" + "---|" * len(ABLATIONS),
    ]
    for cname, rates in by.items():
        rs = sorted(rates)
        picks = {"low": rs[0], "medium": rs[len(rs) // 2], "high": rs[-1]}
        for load, rate in picks.items():
            d = rates[rate]
            if "ProServe" not in d:
                continue
            base = max(1 - d["ProServe"]["tdg_ratio"], 1e-4)
            paper = PAPER_FIG15[cname.split("/")[0]]
            k = ("low", "medium", "high").index(load)
            cells = [
                (f"{(1 - d[a]['tdg_ratio']) / base:.2f}x" if a in d else "-")
                + f" ({paper[a.split(',')[0]][k]:.2f}x)"
                for a in ABLATIONS
            ]
            L.append(f"| {cname} | {load} | {rate:g} | " + " | ".join(cells) + " |")
    L += [
        "",
        "Diagnostic (not in the paper, whose Fig. 15 plots Miss-TDG only): the same ablations on "
        "SLO attainment, (1 - SLO attainment) normalised to full ProServe's, at every rate. In our "
        "TDG the first token is 1-3% of Ideal_Gain (wp:wd = mean input / mean output, §5.1) and "
        "late starters catch up on decode tokens, so TTFT misses show here, not in Miss-TDG.",
        "",
        "| config | rate | " + " | ".join(ABLATIONS) + " |",
        "|---|---:|" + "---|" * len(ABLATIONS),
    ]
    for cname, rates in by.items():
        for rate, d in sorted(rates.items()):
            if "ProServe" not in d:
                continue
            base = max(1 - d["ProServe"]["slo_attainment"], 1e-4)
            cells = [
                f"{(1 - d[a]['slo_attainment']) / base:.2f}x" if a in d else "-" for a in ABLATIONS
            ]
            L.append(f"| {cname} | {rate:g} | " + " | ".join(cells) + " |")
    if clus:
        L += [
            "",
            "## Multi-node (Fig. 11 PD: first-token TDG; Fig. 12 co-located: Miss-TDG)",
            "",
            "| cluster | rate | method | TDG | first-token TDG | Miss-TDG | SLO |",
            "|---|---:|---|---|---|---|---|",
        ]
        for r in clus:
            L.append(
                f"| {r['config']} | {r['rate']:g} | {r['method']} | {r['tdg_ratio']:.3f} | "
                f"{r['first_token_tdg']:.3f} | {1 - r['tdg_ratio']:.3f} | "
                f"{r['slo_attainment']:.3f} |"
            )
        cb = _by(clus)
        L += [
            "",
            "| cluster | local | GoRouting better than MinLoad at | rates |",
            "|---|---|---|---|",
        ]
        for cname, rates in cb.items():
            for local in sorted({m.split("+")[0] for d in rates.values() for m in d}):
                wins = [
                    rate
                    for rate, d in sorted(rates.items())
                    if d[f"{local}+GoRouting"]["first_token_tdg" if "PD" in cname else "tdg_ratio"]
                    > d[f"{local}+MinLoad"]["first_token_tdg" if "PD" in cname else "tdg_ratio"]
                    + 1e-9
                ]
                L.append(f"| {cname} | {local} | {len(wins)}/{len(rates)} | {wins} |")
    return "\n".join(L) + "\n"


def plots(single: list[dict], clus: list[dict], out: Path) -> None:
    """Fig. 10-style lines, Fig. 13 per-priority bars, Fig. 15 ablation bars, Fig. 11/12 lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = _by(single)
    names = list(by)
    lines = BASELINES + ["ProServe", "ProServe+starve"]
    fig, ax = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6.5), squeeze=False)
    for j, cname in enumerate(names):
        rates = sorted(by[cname])
        for m in lines:
            xs = [r for r in rates if m in by[cname][r]]
            if not xs:
                continue
            sty = dict(marker="o", lw=2.2 if m == "ProServe" else 1.2)
            if m == "ProServe+starve":
                sty["ls"] = "--"
            ax[0][j].plot(xs, [by[cname][r][m]["tdg_ratio"] for r in xs], label=m, **sty)
            ax[1][j].plot(xs, [by[cname][r][m]["slo_attainment"] for r in xs], label=m, **sty)
        ax[0][j].set_title(cname)
        ax[1][j].set_xlabel("request rate (req/s)")
    ax[0][0].set_ylabel("TDG ratio")
    ax[1][0].set_ylabel("SLO attainment")
    ax[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig10_tdg_slo_vs_rate.png", dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6.0), squeeze=False)
    ms = ["Sarathi-FCFS", "Sarathi-Priority", "Weighted VTC", "ProServe", "ProServe+starve"]
    for j, cname in enumerate(names):
        rate = sorted(by[cname])[-2] if len(by[cname]) > 1 else sorted(by[cname])[-1]
        d = by[cname][rate]
        present = [m for m in ms if m in d]
        x = np.arange(len(present))
        for i, (key, title) in enumerate((("tdg", "TDG ratio"), ("slo", "SLO attainment"))):
            ax[i][j].bar(x - 0.2, [d[m][f"{key}_p0"] for m in present], 0.4, label="high")
            ax[i][j].bar(x + 0.2, [d[m][f"{key}_p1"] for m in present], 0.4, label="low")
            ax[i][j].set_xticks(x, [m.replace("-", "-\n") for m in present], fontsize=6)
            ax[i][j].set_ylabel(title)
        ax[0][j].set_title(f"{cname} @ {rate:g} req/s")
    ax[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig13_per_priority.png", dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    for j, cname in enumerate(names):
        rs = sorted(by[cname])
        picks = [("low", rs[0]), ("medium", rs[len(rs) // 2]), ("high", rs[-1])]
        x = np.arange(3)
        variants = [*ABLATIONS, "ProServe"]
        wbar = 0.8 / len(variants)
        for k, v in enumerate(variants):
            vals = []
            for _, r in picks:
                d = by[cname][r]
                base = max(1 - d["ProServe"]["tdg_ratio"], 1e-4)
                vals.append((1 - d[v]["tdg_ratio"]) / base if v in d else 0)
            ax[0][j].bar(x + (k - (len(variants) - 1) / 2) * wbar, vals, wbar, label=v)
        ax[0][j].set_xticks(x, [f"{lbl}\n{r:g}" for lbl, r in picks])
        ax[0][j].set_title(cname)
    ax[0][0].set_ylabel("normalised Miss-TDG")
    ax[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "fig15_ablation.png", dpi=90)
    plt.close(fig)

    if clus:
        cb = _by(clus)
        fig, ax = plt.subplots(1, len(cb), figsize=(4.6 * len(cb), 3.6), squeeze=False)
        for j, (cname, rates) in enumerate(cb.items()):
            key = "first_token_tdg" if "PD" in cname else "tdg_ratio"
            for m in sorted({m for d in rates.values() for m in d}):
                xs = sorted(r for r in rates if m in rates[r])
                ax[0][j].plot(xs, [rates[r][m][key] for r in xs], marker="o", label=m)
            ax[0][j].set_title(cname)
            ax[0][j].set_xlabel("request rate (req/s)")
            ax[0][j].set_ylabel("first-token TDG ratio" if "PD" in cname else "TDG ratio")
            ax[0][j].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "fig11_12_cluster.png", dpi=90)
        plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
