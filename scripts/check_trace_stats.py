#!/usr/bin/env python3
"""Checks the shipped traces against the raw files they came from, statistic by statistic.

For every staged raw trace under ``--data`` (default ``../shared/data/traces``) this script
computes, with plain ``csv``/``json`` parsing and its own arithmetic (no llmsched_gym loader, no
numpy), the request count, duration, mean rate ``(N - 1) / duration``, prompt/output length mean
and p50/p90/p99 (linear interpolation) and the prefix-sharing ratio (16-token blocks; see
``llmsched_gym.workloads.stats``), and prints them beside ``workload_stats`` of the trace loaded
by name. A third column says whether they agree (relative 1e-9).

For ServeGen, whose raw data are distributions, it checks that the shipped re-encoding decodes to
exactly the raw probabilities and fitted windows, and compares the expected request count and
mean lengths of a one-hour span (computed from the raw files) with a generated stream.

Usage::

    .venv/bin/python scripts/check_trace_stats.py [--data DIR]

Exit status 1 if any request-level statistic disagrees.
"""

from __future__ import annotations

import argparse
import ast
import csv
import datetime as dt
import io
import json
import math
import sys
import tarfile
from decimal import Decimal
from pathlib import Path

RAW = {
    "azure-conv-2023": ("azure2023/AzureLLMInferenceTrace_conv.csv", "azure"),
    "azure-code-2023": ("azure2023/AzureLLMInferenceTrace_code.csv", "azure"),
    "splitwise-conv": ("vidur/splitwise_conv.csv", "vidur"),
    "splitwise-code": ("vidur/splitwise_code.csv", "vidur"),
    "sharegpt": ("vidur/sharegpt_8k_filtered_stats_llama2_tokenizer.csv", "vidur"),
    "arxiv-summarization": (
        "vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        "vidur",
    ),
    "mooncake-conversation": ("mooncake/conversation_trace.jsonl", "mooncake"),
    "mooncake-synthetic": ("mooncake/synthetic_trace.jsonl", "mooncake"),
}
BLOCK = 16
KEYS = (
    "num_requests",
    "duration_s",
    "mean_rate_per_s",
    "prompt_len_mean",
    "prompt_len_p50",
    "prompt_len_p90",
    "prompt_len_p99",
    "output_len_mean",
    "output_len_p50",
    "output_len_p90",
    "output_len_p99",
    "prefix_sharing_ratio",
)


def read_raw(path: Path, kind: str) -> list[tuple[float, int, int, list[int] | None]]:
    """(arrival s, prompt, output, hash ids) per request, file order."""
    rows = []
    if kind == "azure":
        with path.open(newline="") as f:
            stamps = []
            for rec in csv.DictReader(f):
                date, clock = rec["TIMESTAMP"].split(" ")
                day = dt.date.fromisoformat(date).toordinal() * 86400
                h, m, sec = clock.split(":")
                stamps.append(Decimal(day + int(h) * 3600 + int(m) * 60) + Decimal(sec))
                rows.append([0.0, int(rec["ContextTokens"]), int(rec["GeneratedTokens"]), None])
        first = min(stamps)
        for row, stamp in zip(rows, stamps, strict=True):
            row[0] = float(stamp - first)
    elif kind == "vidur":
        with path.open(newline="") as f:
            for rec in csv.DictReader(f):
                arrival = float(rec["arrived_at"]) if "arrived_at" in rec else 0.0
                rows.append(
                    [arrival, int(rec["num_prefill_tokens"]), int(rec["num_decode_tokens"]), None]
                )
    else:
        with path.open() as f:
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    rows.append(
                        [
                            rec["timestamp"] / 1000,
                            rec["input_length"],
                            rec["output_length"],
                            rec["hash_ids"],
                        ]
                    )
    return [tuple(r) for r in rows]


def percentile(values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default 'linear')."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def sharing(rows: list, hash_block: int = 512) -> float:
    """Prefix-sharing ratio of 16-token blocks keyed by (hash-id prefix tuple, block end)."""
    total = sum(r[1] for r in rows)
    seen_upto: dict[tuple[int, ...], int] = {}
    shared = 0
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])
    for i in order:
        _, prompt, _, hashes = rows[i]
        if not hashes:
            continue
        full_end = min(prompt, len(hashes) * hash_block) // BLOCK * BLOCK
        ends_by_hash_block: dict[int, list[int]] = {}
        for end in range(BLOCK, full_end + 1, BLOCK):
            ends_by_hash_block.setdefault((end - 1) // hash_block, []).append(end)
        for k, ends in ends_by_hash_block.items():
            prefix = tuple(hashes[: k + 1])
            before = seen_upto.get(prefix, 0)
            shared += BLOCK * sum(1 for e in ends if e <= before)
            seen_upto[prefix] = max(before, ends[-1])
    return shared / total


def raw_stats(rows: list) -> dict[str, float]:
    """The statistics of ``read_raw`` rows, computed without numpy or the package."""
    n = len(rows)
    times = [r[0] for r in rows]
    duration = max(times) - min(times)
    out = {
        "num_requests": n,
        "duration_s": duration,
        "mean_rate_per_s": (n - 1) / duration if duration > 0 else math.nan,
    }
    for index, name in ((1, "prompt_len"), (2, "output_len")):
        values = [r[index] for r in rows]
        out[f"{name}_mean"] = sum(values) / n
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = percentile(values, q)
    out["prefix_sharing_ratio"] = sharing(rows)
    return out


def agree(a: float, b: float) -> bool:
    """Equal to a relative 1e-9 (NaN equals NaN)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def check_request_traces(data: Path) -> bool:
    """Prints raw-file vs loaded-trace statistics; True if all agree."""
    from llmsched_gym.workloads import load_trace, workload_stats

    ok = True
    print(f"{'trace':<22} {'statistic':<21} {'raw file':>16} {'llmsched_gym':>16}  match")
    for name, (rel, kind) in RAW.items():
        raw = raw_stats(read_raw(data / rel, kind))
        ours = workload_stats(load_trace(name))
        for key in KEYS:
            same = agree(raw[key], ours[key])
            ok &= same
            mark = "yes" if same else "NO"
            print(f"{name:<22} {key:<21} {raw[key]:>16.6g} {ours[key]:>16.6g}  {mark}")
    return ok


def _pmf_mean(text: str) -> tuple[float, dict]:
    pmf = ast.literal_eval(text)
    return sum(v * p for v, p in pmf.items()) / sum(pmf.values()), pmf


def check_servegen(data: Path, start: int = 36_000, duration: int = 3_600) -> bool:
    """Lossless decoding, then expected vs generated count and mean lengths for one hour."""
    import numpy as np

    from llmsched_gym.workloads import generate_servegen, load_servegen

    ok = True
    members: dict[str, bytes] = {}
    with tarfile.open(data / "servegen/servegen_subset.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                members[member.name] = tar.extractfile(member).read()
    folders = {"m-small": "language/m-small", "deepseek-r1": "reason/deepseek-r1",
               "mm-image": "multimodal/mm-image"}  # fmt: skip
    print(f"\nServeGen, span [{start}, {start + duration}) s, seed 0")
    print(f"{'model':<12} {'statistic':<18} {'raw files':>12} {'generated':>12}")
    for model, folder in folders.items():
        pool = load_servegen(model)
        exact = True
        expected_n = prompt_sum = output_sum = 0.0
        for name, blob in sorted(members.items()):
            parts = Path(name).name.split("-")
            if not name.startswith(f"data/{folder}/") or parts[2] != "trace.csv":
                continue
            cid = int(parts[1])
            dataset_name = f"data/{folder}/chunk-{cid}-dataset.json"
            dataset = json.loads(members[dataset_name]) if dataset_name in members else None
            client = pool.clients[cid]
            windows = {w.start_s: w for w in client.windows}
            usable = {}
            for ts, fields in (dataset or {}).items():
                if "{}" in fields.values():
                    continue
                usable[int(ts)] = fields
                for field, text in fields.items():
                    pmf = {v: p for v, p in ast.literal_eval(text).items() if p > 0}
                    values, cdf = client.lengths[int(ts)][field]
                    exact &= list(values) == [float(v) for v in pmf]
                    exact &= bool(np.array_equal(cdf, np.cumsum(list(pmf.values()))))
            for row in csv.reader(io.StringIO(blob.decode())):
                ts, rate = int(row[0]), float(row[1])
                if row[3]:
                    w = windows[ts]
                    exact &= (w.rate_per_s, w.pattern, w.shape, w.scale) == (
                        rate, row[3], float(row[4]), float(row[5]),
                    )  # fmt: skip
                overlap = min(ts + 600, start + duration) - max(ts, start)
                if rate <= 0 or overlap <= 0 or not usable:
                    continue
                earlier = [t for t in usable if t <= ts]
                fields = usable[max(earlier) if earlier else min(usable)]
                n = rate * overlap
                expected_n += n
                out_mean = _pmf_mean(fields["output_tokens"])[0]
                if "text_tokens" in fields:
                    p_mean = _pmf_mean(fields["text_tokens"])[0]
                    for media in ("image", "audio", "video"):
                        p_mean += (
                            _pmf_mean(fields[f"{media}_count"])[0]
                            * _pmf_mean(fields[f"{media}_tokens"])[0]
                        )
                else:
                    p_mean = _pmf_mean(fields["input_tokens"])[0]
                prompt_sum += n * p_mean
                output_sum += n * out_mean
        specs = generate_servegen(model, start_s=start, duration_s=duration, seed=0)
        got = {
            "requests": len(specs),
            "prompt_len_mean": sum(s.prompt_len for s in specs) / len(specs),
            "output_len_mean": sum(s.output_len for s in specs) / len(specs),
        }
        want = {
            "requests": expected_n,
            "prompt_len_mean": prompt_sum / expected_n,
            "output_len_mean": output_sum / expected_n,
        }
        for key in want:
            print(f"{model:<12} {key:<18} {want[key]:>12.6g} {got[key]:>12.6g}")
        print(f"{model:<12} {'decoded == raw':<18} {'':>12} {'yes' if exact else 'NO':>12}")
        ok &= exact
    return ok


def main() -> int:
    """Runs both checks; exit status 0 when everything agrees."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
    parser.add_argument("--data", type=Path, default=default, help="staged raw traces folder")
    args = parser.parse_args()
    ok = check_request_traces(args.data)
    ok &= check_servegen(args.data)
    print("\nall statistics agree" if ok else "\nMISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
