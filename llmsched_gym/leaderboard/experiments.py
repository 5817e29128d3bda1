"""Declared paper experiments: ``leaderboards/<paper>/experiments.yaml``, loaded and evaluated.

Each paper reproduction's headline findings are data: the paper's value, how ours is computed
from the reproduction's results CSVs, and the acceptance rule. ``evaluate`` turns a results
folder into one row per finding (paper, ours, rule, verdict); ``llmsched-gym leaderboard
reproduce`` (``llmsched_gym.leaderboard.reproduce``) writes them as ``headlines.csv`` /
``headlines.md``.

File layout::

    paper: relserve                 # the folder name under leaderboards/
    title: RelServe (PVLDB)
    results: results                # the committed results folder, relative to the paper folder
    quick_suffix: -quick            # optional: with --quick, X.csv is read as X-quick.csv
    runs:                           # the reproduction: independent units, then a serial finish
      quick: [[reproduce.py, --quick, --out, "{out}"]]
      full: [[reproduce.py, --settings, opt-amazon, --out, "{out}"], ...]
      finish: [[reproduce.py, --report, --out, "{out}"]]        # optional, after every unit
      finish_quick: [...]                                        # optional, after quick units
    experiments:
      - id: vs-vllm                 # unique within the file
        figure: Fig. 9              # the paper's figure or table
        setting: largest load of each setting
        finding: RelServe vs vLLM at the largest load      # the table's words
        paper: {value: [2.3, 3.1], unit: x, text: 2.3-3.1x}  # number or [low, high]; optional
                                    # max: the paper's maximum beside an average
        ours: QUERY
        format: "{lo:.2f}-{hi:.2f}x"  # how ours is printed (placeholders below)
        rule: {kind: band, tol: 0.3, direction: "> 1"}
        verdict: {inside: reproduced, band: ..., direction: ..., miss: not reproduced}

A QUERY (``ours``) is a small pipeline over the rows of CSV files:

1. ``file``: a CSV name or a list of names, relative to the results folder (rows concatenated);
2. ``where``: ``{column: value}`` (equality), ``{column: [v1, v2]}`` (membership) or
   ``{column: {">=": v}}`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``);
3. ``filter``: an EXPR that must hold for the row;
4. ``top``: ``{column: C, per: [cols]}``: keep the rows where C is largest within each group;
5. ``window``: ``{per: [cols], size: N, all: EXPR}``: keep only the groups of exactly N rows
   where EXPR holds for every row (e.g. the rates where every method is above an axis floor);
6. the measure, one of
   * ``column: EXPR``: one value per row;
   * ``ratio: {column: EXPR, by: [cols], num: WHERE, den: WHERE, num_reduce: R, den_reduce: R,
     minus_one: false}``: per group of ``by`` (a pairing key; not ``on``, which YAML reads as
     true), the numerator rows' EXPR over the denominator rows', each side reduced by R
     (``last``, the default, ``max``, ``min``, ``mean``, ``sum``); groups without both sides
     are skipped; ``den_by`` (a subset of ``by``, default ``by``) groups the denominator rows
     more coarsely (``den_by: []``: every numerator group over the same denominator rows);
     ``minus_one`` gives the relative gain ``num/den - 1``;
7. ``reduce``: over the measured values: ``first`` (one row expected), ``max``, ``min``,
   ``mean``, ``sum``, ``argmax`` / ``argmin`` (the value and its row's columns or group keys),
   ``range`` (every value; ``lo``, ``hi``, ``mean``), ``count`` (``count_if: EXPR`` of ``x``:
   ``k`` of ``n``).

``lookup: {name: {by: column, values: {key: number}}}`` adds per-row constants for EXPRs.

An EXPR is a Python-syntax expression over column names, numbers, ``+ - * /``, comparisons,
``and``/``or``/``not``, ``min``/``max``/``abs`` and ``col("a column-name")`` for names that are
not identifiers; nothing else is allowed.

Format placeholders: ``value`` (the reduced value), ``pct`` (100 x value), ``rest``
(100 - pct), ``lo``, ``hi``, ``mean``, ``n``, ``k``, and the argmax / first row's columns.

Rules (``rule.kind``):

* ``band``: ours (every value of a ``range``) against the paper's value or range widened by
  ``tol`` (relative, default 0.3) or ``abs_tol``, or an explicit ``accept: [lo, hi]``; with
  ``direction`` (e.g. ``"> 1"``) a value on the wrong side is a miss, and ``min_effect``
  (e.g. 0.5) flags a ratio in the band that shows less than that share of the paper's effect
  ``(ours - 1) / (paper - 1)``; ``direction_on: all`` checks the direction on every measured
  value (e.g. the band on the max over baselines, the direction on each). Verdict words:
  ``inside`` (within the paper's own range), ``band``, ``weak``, ``direction`` (right side,
  outside the band; ``{k}`` of ``{n}`` in band), ``miss``, ``missing``;
* ``direction``: ``cond`` (default ``"> 1"``) holds for ours (every value of a ``range``);
  words ``pass`` / ``fail`` / ``missing`` (the sign or order of a comparison; not yes / no,
  which YAML reads as booleans);
* ``count``: for ``reduce: count``: ``all`` (k = n), ``some`` (0 < k < n), ``none``.

Every rule takes an optional ``text``: the rule as the table prints it (default: generated,
e.g. "±30% of the paper; direction > 1"). Verdict words may use ``{k}``, ``{n}`` and the format
placeholders.
Size: one module because it is one small language (the file layout, the QUERY pipeline, the
EXPR evaluator and the rules above), documented here in one place; about a third of its lines
are this documentation and the validation errors that name a bad field.
"""

from __future__ import annotations

import ast
import csv
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llmsched_gym.errors import ConfigError

REDUCERS = ("first", "max", "min", "mean", "sum", "argmax", "argmin", "range", "count")
GROUP_REDUCERS = ("last", "max", "min", "mean", "sum")
RULES = {
    "band": ("inside", "band", "weak", "direction", "miss", "missing"),
    "direction": ("pass", "fail", "missing"),
    "count": ("all", "some", "none", "missing"),
}
DEFAULT_WORDS = {
    "band": {
        "band": "within ±{tol_pct:g}%",
        "weak": "within ±{tol_pct:g}%, but < half the effect",
        "direction": "direction only",
        "miss": "not reproduced",
        "missing": "not run",
    },
    "direction": {"pass": "reproduced", "fail": "not reproduced", "missing": "not run"},
    "count": {
        "all": "reproduced",
        "some": "partly",
        "none": "not reproduced",
        "missing": "not run",
    },
}
OPS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
ENTRY_FIELDS = {"id", "figure", "setting", "finding", "paper", "ours", "format", "rule", "verdict"}
REQUIRED_FIELDS = ("id", "figure", "setting", "finding", "paper", "ours", "rule")
QUERY_FIELDS = {
    "file",
    "where",
    "filter",
    "top",
    "window",
    "lookup",
    "column",
    "ratio",
    "reduce",
    "count_if",
}
RATIO_FIELDS = {"column", "by", "den_by", "num", "den", "num_reduce", "den_reduce", "minus_one"}
TOP_FIELDS = {"id", "paper", "title", "results", "quick_suffix", "runs", "experiments"}
"""Top-level keys; keys starting with ``x-`` are free (YAML anchors for shared rules and words)."""


class ExperimentError(ConfigError):
    """A malformed experiments.yaml, or a query that does not fit its results CSVs."""


def _err(path: Path | str, entry: str | None, field: str, msg: str) -> ExperimentError:
    where = f"{path}" + (f": experiment {entry!r}" if entry else "") + f": field {field!r}"
    return ExperimentError(f"{where}: {msg}")


# -- expressions ---------------------------------------------------------------------------------
_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_CMP = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS = {"min": min, "max": max, "abs": abs}


class Expr:
    """A parsed EXPR (see the module docstring): names, numbers, arithmetic, comparisons."""

    def __init__(self, text: str, path: Path | str, entry: str | None, field: str):
        """Parse and check ``text``; errors name ``path``, ``entry`` and ``field``."""
        self.text = str(text)
        try:
            self.tree = ast.parse(self.text, mode="eval").body
        except SyntaxError as e:
            raise _err(
                path, entry, field, f"cannot parse expression {self.text!r}: {e.msg}"
            ) from None
        self.names: set[str] = set()
        self._check(self.tree, path, entry, field)

    def _check(self, node: ast.AST, path, entry, field) -> None:
        ok = (
            ast.BinOp,
            ast.UnaryOp,
            ast.BoolOp,
            ast.Compare,
            ast.Name,
            ast.Constant,
            ast.Call,
            ast.Load,
            ast.And,
            ast.Or,
            ast.Not,
            ast.USub,
            *_BIN,
            *_CMP,
        )
        if not isinstance(node, ok):
            raise _err(
                path,
                entry,
                field,
                f"{type(node).__name__} is not allowed in "
                f"{self.text!r} (names, numbers, + - * /, comparisons, and/or/not, "
                "min/max/abs, col('name'))",
            )
        if isinstance(node, ast.Call):
            fn = node.func.id if isinstance(node.func, ast.Name) else None
            if fn == "col":
                if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
                    raise _err(path, entry, field, f"col() takes one quoted name in {self.text!r}")
                self.names.add(str(node.args[0].value))
                return
            if fn not in _FUNCS or node.keywords:
                raise _err(
                    path,
                    entry,
                    field,
                    f"unknown function {fn!r} in {self.text!r}; allowed: min, max, abs, col",
                )
            for a in node.args:
                self._check(a, path, entry, field)
            return
        if isinstance(node, ast.Name):
            self.names.add(node.id)
        for child in ast.iter_child_nodes(node):
            self._check(child, path, entry, field)

    def __call__(self, env: dict) -> Any:
        """Evaluate with names from ``env``."""
        return self._eval(self.tree, env)

    def _eval(self, n: ast.AST, env: dict) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            return env[n.id]
        if isinstance(n, ast.BinOp):
            a, b = self._eval(n.left, env), self._eval(n.right, env)
            if isinstance(n.op, ast.Div) and b == 0:
                return math.inf if a > 0 else (math.nan if a == 0 else -math.inf)
            return _BIN[type(n.op)](a, b)
        if isinstance(n, ast.UnaryOp):
            v = self._eval(n.operand, env)
            return -v if isinstance(n.op, ast.USub) else (not v)
        if isinstance(n, ast.BoolOp):
            vals = (self._eval(v, env) for v in n.values)
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        if isinstance(n, ast.Compare):
            left = self._eval(n.left, env)
            for op, right_n in zip(n.ops, n.comparators, strict=True):
                right = self._eval(right_n, env)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(n, ast.Call):
            if n.func.id == "col":
                return env[str(n.args[0].value)]
            return _FUNCS[n.func.id](*(self._eval(a, env) for a in n.args))
        raise TypeError(type(n).__name__)  # unreachable: _check admits nothing else


# -- the schema ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Experiment:
    """One declared finding: the paper's value, our query, the acceptance rule and its words."""

    id: str
    figure: str
    setting: str
    finding: str
    paper: dict
    ours: dict
    format: str
    rule: dict
    verdict: dict
    path: Path

    @property
    def paper_text(self) -> str:
        """The paper's value as the table prints it."""
        if "text" in self.paper:
            return str(self.paper["text"])
        v, unit = self.paper.get("value"), self.paper.get("unit", "")
        s = f"{v[0]:g}-{v[1]:g}" if isinstance(v, list) else f"{v:g}"
        return f"{s}{unit}"

    @property
    def paper_range(self) -> tuple[float, float] | None:
        """(low, high) of the paper's value; None when it is not a number."""
        v = self.paper.get("value")
        if isinstance(v, list):
            return float(v[0]), float(v[1])
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v), float(v)
        return None


@dataclass(frozen=True)
class Paper:
    """A paper's experiments.yaml: its runs and its experiments."""

    id: str
    title: str
    path: Path
    results: Path
    quick_suffix: str
    runs: dict
    experiments: tuple[Experiment, ...]


def _check_where(w: Any, path, eid, field) -> None:
    if not isinstance(w, dict):
        raise _err(path, eid, field, f"must be a mapping column -> value, got {w!r}")
    for col, v in w.items():
        if isinstance(v, dict):
            for op in v:
                if op not in OPS:
                    raise _err(
                        path,
                        eid,
                        f"{field}.{col}",
                        f"unknown operator {op!r}; choose from {', '.join(OPS)}",
                    )


def _check_query(q: Any, path, eid) -> None:
    if not isinstance(q, dict):
        raise _err(path, eid, "ours", f"must be a mapping (a query), got {q!r}")
    for k in q:
        if k not in QUERY_FIELDS:
            raise _err(path, eid, f"ours.{k}", f"unknown field; allowed: {sorted(QUERY_FIELDS)}")
    if "file" not in q:
        raise _err(path, eid, "ours.file", "missing: the results CSV(s) to read")
    if ("column" in q) == ("ratio" in q):
        raise _err(path, eid, "ours.column", "give exactly one measure: 'column' or 'ratio'")
    if "where" in q:
        _check_where(q["where"], path, eid, "ours.where")
    for k in ("filter", "column"):
        if k in q:
            Expr(q[k], path, eid, f"ours.{k}")
    if "top" in q and (not isinstance(q["top"], dict) or "column" not in q["top"]):
        raise _err(path, eid, "ours.top", "must be {column: C, per: [columns]}")
    if "window" in q:
        w = q["window"]
        if not isinstance(w, dict) or "per" not in w or "all" not in w:
            raise _err(path, eid, "ours.window", "must be {per: [columns], size: N, all: EXPR}")
        Expr(w["all"], path, eid, "ours.window.all")
    if "lookup" in q:
        for name, t in q["lookup"].items():
            if not isinstance(t, dict) or "by" not in t or "values" not in t:
                raise _err(path, eid, f"ours.lookup.{name}", "must be {by: column, values: {..}}")
    if "ratio" in q:
        r = q["ratio"]
        if not isinstance(r, dict):
            raise _err(path, eid, "ours.ratio", "must be a mapping")
        for k in r:
            if k not in RATIO_FIELDS:
                raise _err(
                    path, eid, f"ours.ratio.{k}", f"unknown field; allowed: {sorted(RATIO_FIELDS)}"
                )
        for k in ("column", "num", "den"):
            if k not in r:
                raise _err(path, eid, f"ours.ratio.{k}", "missing")
        Expr(r["column"], path, eid, "ours.ratio.column")
        _check_where(r["num"], path, eid, "ours.ratio.num")
        _check_where(r["den"], path, eid, "ours.ratio.den")
        for k in ("num_reduce", "den_reduce"):
            if r.get(k, "last") not in GROUP_REDUCERS:
                raise _err(
                    path,
                    eid,
                    f"ours.ratio.{k}",
                    f"unknown reduction {r[k]!r}; choose from {', '.join(GROUP_REDUCERS)}",
                )
    red = q.get("reduce", "first")
    if red not in REDUCERS:
        raise _err(
            path,
            eid,
            "ours.reduce",
            f"unknown reduction {red!r}; choose from {', '.join(REDUCERS)}",
        )
    if red == "count":
        Expr(q.get("count_if", "x"), path, eid, "ours.count_if")


def _check_rule(rule: Any, path, eid) -> None:
    if not isinstance(rule, dict) or "kind" not in rule:
        raise _err(path, eid, "rule", f"must be a mapping with 'kind' ({', '.join(RULES)})")
    if rule["kind"] not in RULES:
        raise _err(
            path, eid, "rule.kind", f"unknown rule {rule['kind']!r}; choose from {', '.join(RULES)}"
        )
    allowed = {
        "kind",
        "tol",
        "abs_tol",
        "accept",
        "direction",
        "direction_on",
        "min_effect",
        "cond",
        "text",
    }
    if rule.get("direction_on", "checked") not in ("checked", "all"):
        raise _err(
            path,
            eid,
            "rule.direction_on",
            f"{rule['direction_on']!r}: 'checked' "
            "(the values the band checks, default) or 'all' (every measured value)",
        )
    for k in rule:
        if k not in allowed:
            raise _err(path, eid, f"rule.{k}", f"unknown field; allowed: {sorted(allowed)}")
    for k in ("direction", "cond"):
        if k in rule:
            Expr(f"x {rule[k]}", path, eid, f"rule.{k}")


def load(path: Path | str) -> Paper:
    """Load and validate one experiments.yaml; errors name the file, the entry and the field."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ExperimentError(f"{path}: no such file") from None
    except yaml.YAMLError as e:
        raise ExperimentError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise _err(path, None, "<top>", "must be a mapping with 'paper' and 'experiments'")
    for k in doc:
        if k not in TOP_FIELDS and not str(k).startswith("x-"):
            raise _err(path, None, k, f"unknown top-level field; allowed: {sorted(TOP_FIELDS)}")
    for k in ("paper", "experiments"):
        if k not in doc:
            raise _err(path, None, k, "missing")
    exps, seen = [], set()
    if not isinstance(doc["experiments"], list):
        raise _err(path, None, "experiments", "must be a list of entries")
    for i, e in enumerate(doc["experiments"]):
        eid = e.get("id") if isinstance(e, dict) else None
        label = str(eid) if eid else f"#{i + 1}"
        if not isinstance(e, dict):
            raise _err(path, label, "<entry>", "must be a mapping")
        for k in e:
            if k not in ENTRY_FIELDS:
                raise _err(path, label, k, f"unknown field; allowed: {sorted(ENTRY_FIELDS)}")
        for k in REQUIRED_FIELDS:
            if k not in e:
                raise _err(path, label, k, "missing")
        if eid in seen:
            raise _err(path, label, "id", "duplicate id")
        seen.add(eid)
        p = e["paper"]
        if not isinstance(p, dict) or not ({"value", "text"} & set(p)):
            raise _err(path, label, "paper", "must be {value: number or [low, high], unit, text}")
        v = p.get("value")
        if isinstance(v, list) and (len(v) != 2 or not all(isinstance(x, (int, float)) for x in v)):
            raise _err(path, label, "paper.value", f"a range is [low, high], got {v!r}")
        _check_query(e["ours"], path, label)
        _check_rule(e["rule"], path, label)
        kind = e["rule"]["kind"]
        if (
            kind == "band"
            and Experiment(**_fill(e, path)).paper_range is None
            and ("accept" not in e["rule"])
        ):
            raise _err(
                path, label, "paper.value", "a band rule needs a numeric paper value or rule.accept"
            )
        if kind == "count" and e["ours"].get("reduce") != "count":
            raise _err(path, label, "rule.kind", "'count' needs ours.reduce: count")
        words = e.get("verdict", {})
        if not isinstance(words, dict):
            raise _err(path, label, "verdict", "must be a mapping outcome -> words")
        for k in words:
            if k not in RULES[kind]:
                raise _err(
                    path,
                    label,
                    f"verdict.{k}",
                    f"unknown outcome for rule {kind!r}; choose from {', '.join(RULES[kind])}",
                )
        exps.append(Experiment(**_fill(e, path)))
    base = path.parent
    return Paper(
        id=str(doc["paper"]),
        title=str(doc.get("title", doc["paper"])),
        path=path,
        results=base / str(doc.get("results", "results")),
        quick_suffix=str(doc.get("quick_suffix", "")),
        runs=dict(doc.get("runs") or {}),
        experiments=tuple(exps),
    )


def _fill(e: dict, path: Path) -> dict:
    return dict(
        id=str(e["id"]),
        figure=str(e["figure"]),
        setting=str(e["setting"]),
        finding=str(e["finding"]),
        paper=dict(e["paper"]),
        ours=dict(e["ours"]),
        format=str(e.get("format", "{value:.3g}")),
        rule=dict(e["rule"]),
        verdict=dict(e.get("verdict") or {}),
        path=path,
    )


# -- evaluation ----------------------------------------------------------------------------------
def _parse(v: str) -> Any:
    if v == "":
        return None
    if v in ("True", "False"):
        return v == "True"
    try:
        return float(v)
    except ValueError:
        return v


def read_rows(path: Path) -> tuple[list[dict], list[str]]:
    """Rows of a CSV with numbers and booleans parsed, and its columns."""
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        rows = [{k: _parse(v) for k, v in row.items()} for row in r]
        return rows, list(r.fieldnames or [])


def _match(row: dict, where: dict) -> bool:
    for col, v in where.items():
        x = row.get(col)
        if isinstance(v, dict):
            if x is None or not all(OPS[op](x, ref) for op, ref in v.items()):
                return False
        elif isinstance(v, list):
            if x not in v:
                return False
        elif x != v:
            return False
    return True


def _reduce_group(vals: list[float], how: str) -> float:
    if how == "last":
        return vals[-1]
    if how == "mean":
        return sum(vals) / len(vals)
    return {"max": max, "min": min, "sum": sum}[how](vals)


class _Missing(Exception):
    """No rows (files absent in a quick run, or nothing matched): the verdict is 'missing'."""


def query(exp: Experiment, results: Path, quick_suffix: str = "", quick: bool = False) -> dict:
    """Run ``exp.ours`` on the CSVs under ``results``: the reduced value and format context.

    With ``quick`` a missing file is skipped (a quick run writes fewer files) and X.csv is read
    as X{quick_suffix}.csv; otherwise a missing file is an error.
    """
    q, path, eid = exp.ours, exp.path, exp.id
    files = q["file"] if isinstance(q["file"], list) else [q["file"]]
    rows: list[dict] = []
    columns: set[str] = set()
    found = 0
    for name in files:
        p = results / name
        if quick_suffix:
            p = p.with_name(f"{p.stem}{quick_suffix}{p.suffix}")
        if not p.exists():
            if quick:
                continue
            raise _err(path, eid, "ours.file", f"{p} does not exist")
        found += 1
        r, cols = read_rows(p)
        rows += r
        columns |= set(cols)
    if not found:
        raise _Missing
    lookup = {n: (t["by"], t["values"]) for n, t in (q.get("lookup") or {}).items()}

    def need(names, field):
        for n in names:
            if n not in columns and n not in lookup and n not in ("x",):
                raise _err(
                    path,
                    eid,
                    field,
                    f"unknown CSV column {n!r} in {', '.join(files)} "
                    f"(columns: {', '.join(sorted(columns))})",
                )

    def env(row):
        e = dict(row)
        for n, (by, values) in lookup.items():
            key = row.get(by)
            if key not in values:
                raise _err(path, eid, f"ours.lookup.{n}", f"no value for {by}={key!r}")
            e[n] = values[key]
        return e

    where = q.get("where") or {}
    need(where, "ours.where")
    rows = [r for r in rows if _match(r, where)]
    if "filter" in q:
        f = Expr(q["filter"], path, eid, "ours.filter")
        need(f.names, "ours.filter")
        rows = [r for r in rows if f(env(r))]
    if "top" in q:
        col, per = q["top"]["column"], list(q["top"].get("per", []))
        need([col, *per], "ours.top")
        best: dict = {}
        for r in rows:
            k = tuple(r[c] for c in per)
            best[k] = max(best.get(k, -math.inf), r[col])
        rows = [r for r in rows if r[col] == best[tuple(r[c] for c in per)]]
    if "window" in q:
        w = q["window"]
        per = list(w["per"])
        test = Expr(w["all"], path, eid, "ours.window.all")
        need([*per, *test.names], "ours.window")
        groups: dict = {}
        for r in rows:
            groups.setdefault(tuple(r[c] for c in per), []).append(r)
        keep = {
            k
            for k, g in groups.items()
            if ("size" not in w or len(g) == int(w["size"])) and all(test(env(r)) for r in g)
        }
        rows = [r for r in rows if tuple(r[c] for c in per) in keep]
    series: list[tuple[dict, float]] = []  # (context, value)
    if "column" in q:
        e = Expr(q["column"], path, eid, "ours.column")
        need(e.names, "ours.column")
        series = [(r, e(env(r))) for r in rows]
    else:
        rq = q["ratio"]
        e = Expr(rq["column"], path, eid, "ours.ratio.column")
        on = list(rq.get("by", []))
        den_on = list(rq.get("den_by", on))
        if not set(den_on) <= set(on):
            raise _err(path, eid, "ours.ratio.den_by", f"{den_on} must be a subset of by: {on}")
        need([*e.names, *on], "ours.ratio.column")
        need(rq["num"], "ours.ratio.num")
        need(rq["den"], "ours.ratio.den")
        nums: dict = {}
        dens: dict = {}
        for r in rows:
            k = tuple(r[c] for c in on)
            if _match(r, rq["num"]):
                nums.setdefault(k, []).append(e(env(r)))
            if _match(r, rq["den"]):
                dens.setdefault(tuple(r[c] for c in den_on), []).append(e(env(r)))
        for k in nums:  # the numerator rows' order: the CSV's
            kd = tuple(dict(zip(on, k, strict=True))[c] for c in den_on)
            if kd not in dens:
                continue
            n = _reduce_group(nums[k], rq.get("num_reduce", "last"))
            d = _reduce_group(dens[kd], rq.get("den_reduce", "last"))
            v = n / d if d else (math.inf if n > 0 else math.nan)
            if rq.get("minus_one"):
                v -= 1.0
            series.append((dict(zip(on, k, strict=True)), v))
    if not series:
        raise _Missing
    red = q.get("reduce", "first")
    vals = [v for _, v in series]
    ctx: dict = {}
    if red == "first":
        if len(series) != 1:
            raise _err(
                path,
                eid,
                "ours.reduce",
                f"'first' needs exactly one row, got "
                f"{len(series)}; narrow 'where' or reduce with max/min/mean/range",
            )
        ctx, value = dict(series[0][0]), series[0][1]
    elif red in ("max", "min"):
        value = (max if red == "max" else min)(vals)
    elif red == "mean":
        value = sum(vals) / len(vals)
    elif red == "sum":
        value = sum(vals)
    elif red in ("argmax", "argmin"):
        c, value = (max if red == "argmax" else min)(series, key=lambda s: s[1])
        ctx = dict(c)
    elif red == "range":
        value = None
    else:  # count
        cond = Expr(q.get("count_if", "x"), path, eid, "ours.count_if")
        k = sum(1 for v in vals if cond({"x": v}))
        ctx.update(k=k)
        value = k
    # The first / argmax row's own columns win over these (a stats CSV has its own ``n``).
    for key, v in dict(n=len(vals), lo=min(vals), hi=max(vals), mean=sum(vals) / len(vals)).items():
        ctx.setdefault(key, v)
    if red == "count":
        ctx.update(n=len(vals))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ctx.update(value=value, pct=100 * value, rest=100 - 100 * value)
    else:
        ctx.update(value=value)
    return {"value": value, "values": vals, "ctx": ctx, "reduce": red}


def _rule_text(exp: Experiment) -> str:
    r = exp.rule
    if "text" in r:
        return str(r["text"])
    if r["kind"] == "band":
        if "accept" in r:
            s = f"in [{r['accept'][0]:g}, {r['accept'][1]:g}]"
        elif "abs_tol" in r:
            s = f"±{r['abs_tol']:g} of the paper"
        else:
            s = f"±{100 * float(r.get('tol', 0.3)):g}% of the paper"
        if "direction" in r:
            s += f"; direction {r['direction']}"
        if "min_effect" in r:
            s += f"; ≥ {100 * float(r['min_effect']):g}% of the effect"
        return s
    if r["kind"] == "direction":
        return f"ours {r.get('cond', '> 1')}"
    return f"every point: {exp.ours.get('count_if', 'x')}"


def judge(exp: Experiment, res: dict | None) -> str:
    """The verdict words of ``exp.rule`` for a query result (None: nothing to judge)."""
    kind = exp.rule["kind"]
    words = {**DEFAULT_WORDS[kind], **exp.verdict}
    tol = float(exp.rule.get("tol", 0.3))
    ctx = dict(res["ctx"]) if res else {}
    ctx.setdefault("tol_pct", 100 * tol)

    def say(outcome: str, **extra) -> str:
        return str(words.get(outcome, words.get("band", outcome))).format(**{**ctx, **extra})

    if res is None:
        return say("missing")
    value = res["value"]
    checked = res["values"] if res["reduce"] == "range" else [value]
    if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in checked):
        return say("missing")
    if kind == "count":
        k, n = ctx["k"], ctx["n"]
        return say("all" if k == n else "some" if k else "none")
    if kind == "direction":
        cond = Expr(f"x {exp.rule.get('cond', '> 1')}", exp.path, exp.id, "rule.cond")
        return say("pass" if all(cond({"x": v}) for v in checked) else "fail")
    lo, hi = exp.paper_range or (math.nan, math.nan)
    if "direction" in exp.rule:
        cond = Expr(f"x {exp.rule['direction']}", exp.path, exp.id, "rule.direction")
        dvals = res["values"] if exp.rule.get("direction_on") == "all" else checked
        if not all(cond({"x": v}) for v in dvals):
            return say("miss")
    if "accept" in exp.rule:
        a_lo, a_hi = (float(x) for x in exp.rule["accept"])
    elif "abs_tol" in exp.rule:
        a_lo, a_hi = lo - float(exp.rule["abs_tol"]), hi + float(exp.rule["abs_tol"])
    else:
        a_lo, a_hi = lo * (1 - tol), hi * (1 + tol)
    k = sum(a_lo <= v <= a_hi for v in checked)
    extra = {"k": k, "n": len(checked)}
    if all(lo <= v <= hi for v in checked) and "inside" in words:
        return say("inside", **extra)
    if k == len(checked):
        eff = exp.rule.get("min_effect")
        if eff is not None and lo > 1 and any((v - 1) / (lo - 1) < float(eff) for v in checked):
            return say("weak", **extra)
        return say("band", **extra)
    if "direction" in exp.rule:
        return say("direction", **extra)
    return say("miss", **extra)


def evaluate(paper: Paper, results: Path | None = None, quick: bool = False) -> list[dict]:
    """One row per experiment: id, figure, setting, finding, paper, ours, rule, verdict."""
    folder = Path(results) if results is not None else paper.results
    suffix = paper.quick_suffix if quick else ""
    out = []
    for exp in paper.experiments:
        try:
            res = query(exp, folder, suffix, quick)
        except _Missing:
            res = None
        if res is None:
            ours = "n/a"
        else:
            try:
                ours = exp.format.format(**res["ctx"])
            except (KeyError, ValueError, TypeError) as e:
                raise _err(
                    exp.path,
                    exp.id,
                    "format",
                    f"cannot format {exp.format!r} with {sorted(res['ctx'])}: {e}",
                ) from None
        out.append(
            dict(
                id=exp.id,
                figure=exp.figure,
                setting=exp.setting,
                finding=exp.finding,
                paper=exp.paper_text,
                ours=ours,
                rule=_rule_text(exp),
                verdict=judge(exp, res),
            )
        )
    return out


def markdown(rows: list[dict]) -> str:
    """The headline table in Markdown (the papers' READMEs carry the same table)."""
    cols = ("figure", "finding", "paper", "ours", "rule", "verdict")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(str(r[c]).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def paper_value(path: Path | str, exp_id: str) -> dict:
    """The ``paper`` mapping of experiment ``exp_id`` (for scripts that print paper numbers).

    Raises:
        ExperimentError: no such experiment in ``path``.
    """
    for exp in load(path).experiments:
        if exp.id == exp_id:
            return dict(exp.paper)
    raise ExperimentError(f"{path}: no experiment {exp_id!r}")


def paper_table(path: Path | str, exp_id: str, name: str) -> dict:
    """The ``ours.lookup.<name>.values`` table of experiment ``exp_id`` (paper numbers per key)."""
    for exp in load(path).experiments:
        if exp.id == exp_id:
            table = (exp.ours.get("lookup") or {}).get(name)
            if table is None:
                raise _err(path, exp_id, f"ours.lookup.{name}", "missing")
            return dict(table["values"])
    raise ExperimentError(f"{path}: no experiment {exp_id!r}")
