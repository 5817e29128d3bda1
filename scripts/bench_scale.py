"""Benchmark: a day of traffic on a 64-instance heterogeneous cluster with a router, one process.

The workload is a day of ServeGen's ``m-small`` language-model clients (86,400 s, rates scaled
to a mean of ``--rate`` requests/s: about 1M requests at the default 12), or the Azure 2023
conversation trace rescaled and repeated (``--source azure-conv``). The cluster is
``--instances`` Llama-3-8B instances, half on A100-80GB and half on H100-80GB (roofline cost
profiles, KV caches sized as vLLM sizes them, vLLM V1 scheduler), behind the
``least-load:requests`` router.

By default the run is the bounded-memory one: the workload is streamed into ``run_cluster``
(``iter_servegen``, generated an hour at a time as the run reaches it) and only the summary's
records are kept (``records="summary"``). ``--records full`` keeps every per-request record;
``--workload-list`` builds the whole workload as a list first (``generate_servegen``, whose
requests differ from ``iter_servegen``'s; sessions 13-14 measured ``--records full
--workload-list``). It prints the CPU seconds of building the workload (list only; a stream is
generated during the run, whose CPU seconds include it) and of the run (``run_cluster`` with
its result built), the peak RSS of the process, and the run's request, step and latency
figures; ``--json FILE`` writes them too.

    .venv/bin/python scripts/bench_scale.py                     # the day: ~1M requests
    .venv/bin/python scripts/bench_scale.py --duration-s 3600   # one hour, a quick check
    .venv/bin/python scripts/bench_scale.py --records full --workload-list   # sessions 13-14
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from llmsched_gym.cluster import InstanceSpec, run_cluster

GPUS = ("a100-80gb", "h100-80gb")
MODEL = "llama-3-8b"


def cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def workload(source: str, duration_s: float, rate: float, seed: int, *, stream: bool) -> Any:
    """The day's requests, sorted by arrival: an iterator (``stream``) or a list."""
    if source == "servegen":
        from llmsched_gym.workloads import generate_servegen, iter_servegen

        make = iter_servegen if stream else generate_servegen
        return make("m-small", duration_s=duration_s, target_rate_per_s=rate, seed=seed)
    repeated = _repeated_trace(duration_s, rate)
    return repeated if stream else list(repeated)


def _repeated_trace(duration_s: float, rate: float) -> Iterator:
    """The Azure conversation trace at ``rate``, repeated back to back until the span is covered."""
    from llmsched_gym.workloads.arrivals import rescale_to_rate
    from llmsched_gym.workloads.trace import load_trace

    base = rescale_to_rate(load_trace("splitwise-conv"), rate)
    span = base[-1].arrival_time - base[0].arrival_time + 1.0 / rate
    k = 0
    while True:
        for s in base:
            t = s.arrival_time + k * span
            if t >= duration_s:
                return
            yield type(s)(f"{s.request_id}-r{k}", t, s.prompt_len, s.output_len, s.max_tokens)
        k += 1


def instances(n: int) -> list[InstanceSpec]:
    """``n`` instances, half on each GPU of ``GPUS`` (the first half A100)."""
    if n < 2:
        raise SystemExit("--instances must be >= 2 (a heterogeneous cluster)")
    out = []
    for i in range(n):
        gpu = GPUS[0] if i < n // 2 else GPUS[1]
        out.append(
            InstanceSpec(
                f"{gpu}-{i}", f"roofline:{MODEL}@{gpu}", {"max_model_len": None}, "vllm-v1"
            )
        )
    return out


def main(argv: list[str] | None = None) -> dict:
    """Build the day's workload, run it on the cluster, print (and return) the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=("servegen", "azure-conv"), default="servegen")
    ap.add_argument("--duration-s", type=float, default=86_400.0, help="span (default a day)")
    ap.add_argument("--rate", type=float, default=12.0, help="mean requests/s (default 12)")
    ap.add_argument("--instances", type=int, default=64, help="instances (default 64)")
    ap.add_argument("--router", default="least-load:requests", help="router (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--records",
        choices=("summary", "full"),
        default="summary",
        help="records the run keeps: the summary's only (default, bounded memory) or every "
        "per-request record (run_cluster's records=)",
    )
    ap.add_argument(
        "--workload-list",
        action="store_true",
        help="build the whole workload as a list before the run (ServeGen: generate_servegen) "
        "instead of streaming it (iter_servegen)",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = ap.parse_args(argv)
    if args.json:  # before the minutes of the run, not after them
        try:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            ap.error(f"--json {args.json}: cannot create its folder ({exc.strerror})")

    stream = not args.workload_list
    c0 = cpu_s()
    specs = workload(args.source, args.duration_s, args.rate, args.seed, stream=stream)
    c1 = cpu_s()
    w0 = time.perf_counter()
    result = run_cluster(
        specs, instances(args.instances), args.router, seed=args.seed, records=args.records
    )
    wall = time.perf_counter() - w0
    c2 = cpu_s()
    s = result.summary
    figures = {
        "source": args.source,
        "duration_s": args.duration_s,
        "instances": args.instances,
        "router": args.router,
        "records": args.records,
        "workload": "stream" if stream else "list",
        "num_requests": int(s["num_requests"]),
        "num_steps": int(s["num_steps"]),
        "workload_cpu_s": None if stream else round(c1 - c0, 2),
        "run_cpu_s": round(c2 - c1, 2),
        "run_wall_s": round(wall, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "ttft_s_p50": s["ttft_s_p50"],
        "ttft_s_p99": s["ttft_s_p99"],
        "e2e_s_p99": s["e2e_s_p99"],
    }
    for k, v in figures.items():
        print(f"{k:<16} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
