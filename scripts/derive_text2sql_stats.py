#!/usr/bin/env python
"""Derive the Text-to-SQL workload statistics and data files that llmsched_gym ships.

Reads the HexGen-Flow per-query CHESS traces (``input_file_<trace>.json``; no licence, so only
derived numbers are written, never the files) and writes
``llmsched_gym/data/text2sql/hexgen_flow_stats.json``: per trace the number of queries, the
calls-per-query distribution, the distribution of workflow shapes (stages with multiplicities),
of the revise rounds k and of the evaluate fan-out n, per step name and per slot (step and
position) the input/output length summaries with a 101-point empirical quantile table, and the
coupling of input lengths within a query (one-factor Gaussian copula anchored on GC#0, plus a
within-query factor for the repeated RV/EV calls). See HexGen-Text2SQL §2.1, §5.1 and
Hexgen-Flow@396a3ba ``core/request.py:222-233``.

With ``--bird`` and ``--chess`` it also copies the CHESS templates (Apache-2.0, with the licence)
and writes the BIRD dev subset (financial and formula_1 questions and schemas, CC-BY-SA-4.0) into
the package, then counts the tokens of the filled templates per question
(``chess_template_token_counts.json``) with ``--tokenizer`` (default: the Llama-3 tokenizer
HexGen-Flow counted with; needs the ``tokenizers`` package, skipped with a notice without it).

Usage (from the repository root)::

    .venv/bin/python scripts/derive_text2sql_stats.py [HEXGEN_FLOW_DIR]

The output is deterministic: the same inputs give byte-identical files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmsched_gym.workloads import text2sql as t2s  # noqa: E402

OUT = ROOT / "llmsched_gym" / "data" / "text2sql"
SHARED = ROOT.parent / "shared" / "data"
LEVELS = [i / 100 for i in range(101)]
SOURCE = {
    "repository": "Relaxed-System-Lab/Hexgen-Flow",
    "commit": "396a3babc9371eafaf765816236fdd9226f440d7",
    "path": "simulator/cli/input_file_<trace>.json",
    "licence": "none (all rights reserved): derived statistics only, the files are not shipped",
    "tokens": "Llama-3.1-70B tokenizer (Hexgen-Flow cli/count_tokens.py)",
}
BIRD_DATABASES = ("financial", "formula_1")
ABBR = {name: abbr for abbr, name in t2s.STEP_NAMES.items()}


def _r(x: float, nd: int = 4) -> float | int:
    v = round(float(x), nd)
    return int(v) if v.is_integer() else v


def _summary(values: list[int]) -> dict[str, Any]:
    a = np.asarray(values, dtype=np.float64)
    return {
        "count": len(values),
        "mean": _r(a.mean()),
        "std": _r(a.std()),
        "min": int(a.min()),
        "max": int(a.max()),
        "quantiles": [_r(v, 2) for v in np.quantile(a, LEVELS)],
    }


def _histogram(values: list[int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(Counter(values).items())}


def _dist(values: list[int]) -> dict[str, Any]:
    a = np.asarray(values, dtype=np.float64)
    return {
        "count": len(values),
        "mean": _r(a.mean()) if len(a) else None,
        "std": _r(a.std()) if len(a) else None,
        "histogram": _histogram(values),
    }


def _normal_scores(values: list[int]) -> np.ndarray:
    """Van der Waerden scores with mid-ranks for ties (all ties -> zeros)."""
    a = np.asarray(values, dtype=np.float64)
    order = np.argsort(a, kind="stable")
    ranks = np.empty(len(a))
    sorted_a = a[order]
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and sorted_a[j + 1] == sorted_a[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    nd = statistics.NormalDist()
    return np.array([nd.inv_cdf((r - 0.5) / len(a)) for r in ranks])


def _shape_groups(calls: list[str]) -> list[list[Any]]:
    groups: list[list[Any]] = []
    for abbr in calls:
        if groups and groups[-1][0] == abbr:
            groups[-1][1] += 1
        else:
            groups.append([abbr, 1])
    return groups


def _shape_text(groups: list[list[Any]]) -> str:
    return " ".join(a if m == 1 else f"{a}x{m}" for a, m in groups)


def _copula(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The input-length coupling within a query (Gaussian copula parameters).

    Per slot: the loading of its input normal score on the query's GC#0 score, and the
    within-query correlation of the residuals of repeated calls (RV, EV).
    """
    by_slot: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for rec in records:
        by_slot[rec["slot"]].append((rec["query"], rec["input"]))
    scores = {s: _normal_scores([v for _, v in rows]) for s, rows in by_slot.items()}
    anchor = {q: sc for (q, _), sc in zip(by_slot["GC#0"], scores["GC#0"], strict=True)}
    loading: dict[str, float] = {}
    within: dict[str, float] = {}
    for slot in sorted(by_slot):
        ns = scores[slot]
        zs = np.array([anchor[q] for q, _ in by_slot[slot]])
        if slot == "GC#0":
            loading[slot], within[slot] = 1.0, 0.0
            continue
        lam = 0.0
        if ns.std() > 0 and zs.std() > 0:
            lam = float(np.clip(np.corrcoef(ns, zs)[0, 1], -0.999, 0.999))
        loading[slot] = _r(lam)
        resid = ns - lam * zs
        num = den = 0.0
        groups: dict[int, list[float]] = defaultdict(list)
        for (q, _), r in zip(by_slot[slot], resid, strict=True):
            groups[q].append(float(r))
        for rs in groups.values():
            if len(rs) >= 2:
                total = sum(rs)
                sq = sum(r * r for r in rs)
                num += total * total - sq
                den += (len(rs) - 1) * sq
        within[slot] = _r(min(1.0, max(0.0, num / den))) if den > 0 else 0.0
    return {"anchor": "GC#0", "loading": loading, "within_query": within}


def derive_trace(path: Path) -> dict[str, Any]:
    """Statistics of one HexGen-Flow trace file."""
    queries = json.loads(path.read_text())
    shapes: Counter[str] = Counter()
    shape_groups: dict[str, list[list[Any]]] = {}
    per_step: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"input": [], "output": []})
    per_slot: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"input": [], "output": []})
    step_calls: dict[str, list[int]] = {abbr: [] for abbr in t2s.STEP_NAMES}
    calls_per_query, ks, ns, records = [], [], [], []
    prefixes: Counter[str] = Counter()
    tails: Counter[str] = Counter()
    for qi, query in enumerate(queries):
        calls = query["Text2SQLRequest"]
        abbrs = []
        seen: Counter[str] = Counter()
        for call in calls:
            if call["step"] not in ABBR:
                raise SystemExit(f"{path.name}: query {qi} has unknown step {call['step']!r}")
            abbr = ABBR[call["step"]]
            slot = abbr if abbr in t2s.POOLED_STEPS else f"{abbr}#{seen[abbr]}"
            seen[abbr] += 1
            abbrs.append(abbr)
            for d in (per_step[abbr], per_slot[slot]):
                d["input"].append(int(call["input_length"]))
                d["output"].append(int(call["output_length"]))
            records.append({"query": qi, "slot": slot, "input": int(call["input_length"])})
        groups = _shape_groups(abbrs)
        text = _shape_text(groups)
        shapes[text] += 1
        shape_groups[text] = groups
        calls_per_query.append(len(calls))
        for abbr in t2s.STEP_NAMES:
            step_calls[abbr].append(seen[abbr])
        ks.append(seen["RV"])
        if seen["EV"]:
            ns.append(seen["EV"])
        first_gc = next(i for i, g in enumerate(groups) if g[0] == "GC")
        last_core = max(i for i, g in enumerate(groups) if g[0] in ("GC", "RV"))
        prefixes[_shape_text(groups[:first_gc])] += 1
        tails[
            _shape_text([g if g[0] != "EV" else ["EVxn", 1] for g in groups[last_core + 1 :]])
        ] += 1
    nq = len(queries)
    ordered = sorted(shapes.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "file": path.name,
        "num_queries": nq,
        "num_calls": sum(calls_per_query),
        "calls_per_query": _dist(calls_per_query),
        "calls_per_query_by_step": {a: _r(sum(c) / nq) for a, c in step_calls.items()},
        "shapes": [{"text": t, "groups": shape_groups[t], "count": c} for t, c in ordered],
        "schema_linking_variants": dict(sorted(prefixes.items(), key=lambda kv: (-kv[1], kv[0]))),
        "tail_variants": dict(sorted(tails.items(), key=lambda kv: (-kv[1], kv[0]))),
        "revise_rounds_k": _dist(ks),
        "evaluate_fanout_n": {**_dist(ns), "queries_without_evaluate": nq - len(ns)},
        "steps": {
            a: {
                "name": t2s.STEP_NAMES[a],
                "calls": len(per_step[a]["input"]),
                "input": _summary(per_step[a]["input"]),
                "output": _summary(per_step[a]["output"]),
            }
            for a in t2s.STEP_NAMES
            if per_step[a]["input"]
        },
        "slots": {
            s: {"input": _summary(d["input"]), "output": _summary(d["output"])}
            for s, d in sorted(per_slot.items())
        },
        "input_copula": _copula(records),
    }


def _compact(doc: Any, indent: str = "") -> str:
    """JSON with one key per line and lists of scalars kept on one line."""
    inner = indent + " "
    if isinstance(doc, dict) and doc:
        items = [f"{inner}{json.dumps(k)}: {_compact(v, inner)}" for k, v in doc.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(doc, list) and any(isinstance(v, (dict, list)) for v in doc):
        if all(isinstance(v, list) and len(v) == 2 for v in doc):  # shape groups
            return json.dumps(doc, separators=(",", ":"))
        items = [inner + _compact(v, inner) for v in doc]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _write_json(path: Path, doc: Any, indent: int | None = 1) -> None:
    if indent is None:
        text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    else:
        text = _compact(doc)
    path.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size:,} bytes)")


def ship_chess(chess_dir: Path) -> None:
    """Copy the CHESS templates and their Apache-2.0 licence into the package."""
    dest = OUT / "chess" / "templates"
    dest.mkdir(parents=True, exist_ok=True)
    for src in sorted((chess_dir / "templates").glob("template_*.txt")):
        shutil.copyfile(src, dest / src.name)
    shutil.copyfile(chess_dir / "LICENSE-APACHE", OUT / "chess" / "LICENSE-APACHE")
    print(f"copied CHESS templates to {dest.relative_to(ROOT)}")


def ship_bird(bird_dir: Path) -> None:
    """Write the BIRD dev questions and schemas of the HexGen databases (financial, formula_1)."""
    dest = OUT / "bird"
    dest.mkdir(parents=True, exist_ok=True)
    keep = ("question_id", "db_id", "question", "evidence", "difficulty", "sql")
    questions = [
        {k: q[k] for k in keep}
        for q in json.loads((bird_dir / "dev.json").read_text())
        if q["db_id"] in BIRD_DATABASES
    ]
    tables = [
        t
        for t in json.loads((bird_dir / "dev_tables_by_table.json").read_text()).values()
        if t["db_id"] in BIRD_DATABASES
    ]
    _write_json(dest / "dev_questions.json", questions)
    _write_json(dest / "dev_tables.json", tables)


def count_template_tokens(tokenizer_path: Path) -> None:
    """Count the tokens of every shipped question's filled CHESS prompts."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("notice: `tokenizers` is not installed; template token counts not regenerated")
        return
    opener = gzip.open if tokenizer_path.suffix == ".gz" else open
    with opener(tokenizer_path, "rt", encoding="utf-8") as f:
        tok = Tokenizer.from_str(f.read())
    for fn in (t2s.load_bird_questions, t2s._bird_tables, t2s._chess_template):
        fn.cache_clear()
    rows = []
    for q in t2s.load_bird_questions():
        prompts = t2s.chess_prompts(q)
        tokens = {k: len(tok.encode(v, add_special_tokens=False).ids) for k, v in prompts.items()}
        rows.append({"question_id": q["question_id"], "db_id": q["db_id"], "tokens": tokens})
    name = tokenizer_path.name.split(".")[0]
    doc = {
        "tokenizer": name,
        "built_by": "scripts/derive_text2sql_stats.py from llmsched_gym.workloads.text2sql."
        "chess_prompts (shipped CHESS templates + shipped BIRD subset)",
        "questions": rows,
    }
    _write_json(OUT / "chess_template_token_counts.json", doc, indent=None)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "hexgen_flow_dir",
        nargs="?",
        type=Path,
        default=SHARED / "text2sql" / "hexgen_flow",
        help="folder with input_file_<trace>.json (default ../shared/data/text2sql/hexgen_flow)",
    )
    parser.add_argument("--chess", type=Path, default=SHARED / "text2sql" / "chess")
    parser.add_argument("--bird", type=Path, default=SHARED / "text2sql" / "bird")
    parser.add_argument(
        "--tokenizer", type=Path, default=SHARED / "tokenizers" / "llama3_tokenizer.json.gz"
    )
    parser.add_argument(
        "--stats-only", action="store_true", help="only write hexgen_flow_stats.json"
    )
    args = parser.parse_args(argv)
    src: Path = args.hexgen_flow_dir
    missing = [t for t in t2s.TRACES if not (src / f"input_file_{t}.json").is_file()]
    if missing:
        print(
            f"error: HexGen-Flow traces not found in {src} (missing "
            f"{', '.join(f'input_file_{t}.json' for t in missing)}); pass the folder that holds "
            "Relaxed-System-Lab/Hexgen-Flow's simulator/cli/input_file_*.json",
            file=sys.stderr,
        )
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    doc = {
        "source": SOURCE,
        "generated_by": "scripts/derive_text2sql_stats.py",
        "steps": t2s.STEP_NAMES,
        "pooled_steps": sorted(t2s.POOLED_STEPS),
        "parallel_steps": sorted(t2s.PARALLEL_STEPS),
        "quantile_levels": LEVELS,
        "traces": {t: derive_trace(src / f"input_file_{t}.json") for t in t2s.TRACES},
    }
    _write_json(OUT / "hexgen_flow_stats.json", doc)
    if args.stats_only:
        return 0
    for name, folder in (("--chess", args.chess), ("--bird", args.bird)):
        if not folder.is_dir():
            print(f"error: {name} folder {folder} not found", file=sys.stderr)
            return 2
    ship_chess(args.chess)
    ship_bird(args.bird)
    if args.tokenizer.is_file():
        count_template_tokens(args.tokenizer)
    else:
        print(f"notice: tokenizer {args.tokenizer} not found; template token counts kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
