"""CHESS-style agentic Text-to-SQL workflows as jobs (HexGen-Text2SQL §2.1, §5.1).

Every query is a :class:`~llmsched_gym.core.job.Job` whose stages form a chain: schema linking
(``Information Retriever`` and ``extract_keywords`` calls), SQL-candidate generation (the calls of
one parallel stage), 0-10 self-correction rounds (``revise``), unit-test generation and evaluation
(``unit_tester``, ``generate_unit_test``, then the ``evaluate`` calls of one parallel stage). As in
the Hexgen-Flow simulator (``Relaxed-System-Lab/Hexgen-Flow@396a3ba``,
``core/request.py:222-233``), all
``generate_candidate_llama-agent`` calls form one parallel stage, all ``evaluate`` calls another,
and every other call is its own sequential stage released when its predecessor finishes.

The structure and lengths are resampled from statistics derived from the HexGen-Flow traces
(``llmsched_gym/data/text2sql/hexgen_flow_stats.json``, written by
``scripts/derive_text2sql_stats.py``; the traces themselves have no licence and are not shipped):

* the workflow *shape* (stages with multiplicities, e.g. ``IR KW IR×3 GC×2 RV×k UT GUT UT EV×n
  UT``) is drawn from the trace's empirical shape distribution, so the number ``k`` of revise
  rounds and the evaluate fan-out ``n`` follow the trace jointly;
* input/output lengths are drawn from per-slot empirical quantile tables (IR, UT and GC by
  position in the query, RV and EV pooled), with input lengths tied within a query by a one-factor
  Gaussian copula anchored on the first candidate's prompt (the schema size drives every long
  prompt); marginals are exact whatever the coupling.

With ``prompt_source="templates"`` the input lengths instead come from the shipped CHESS prompt
templates filled with a BIRD dev question and its database schema (token counts derived by the
script with the Llama-3 tokenizer HexGen used); output lengths stay resampled from the trace.

The whole structure, including the number of self-correction rounds, is fixed by the generator.
Non-oracle policies must only look at released stages (``JobState``); reading ``Job.stages``
ahead of release is an oracle's knowledge.

>>> from llmsched_gym.workloads.text2sql import text2sql_jobs
>>> jobs = text2sql_jobs("trace3", num_queries=3, rate_per_s=1.0, seed=0, slo_base_s=55.0)
>>> [s.name for s in jobs[0].stages][:6]
['IR0', 'KW0', 'IR1', 'IR2', 'IR3', 'GC0']
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from llmsched_gym.config import TEXT2SQL_SLO_COST_MODEL
from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import CostModel
from llmsched_gym.errors import ConfigError
from llmsched_gym.workloads.arrivals import arrival_times_s

__all__ = [
    "DEFAULT_COST_MODEL",
    "PARALLEL_STEPS",
    "STANDARD_WORKFLOW",
    "STEP_NAMES",
    "TRACES",
    "TRACE_DATABASES",
    "base_slo_s",
    "chess_prompts",
    "load_bird_questions",
    "load_hexgen_stats",
    "load_template_counts",
    "single_request_latency_s",
    "step_of_stage",
    "text2sql_jobs",
]

STEP_NAMES: dict[str, str] = {
    "IR": "Information Retriever",
    "KW": "extract_keywords",
    "GC": "generate_candidate_llama-agent",
    "RV": "revise",
    "UT": "unit_tester",
    "GUT": "generate_unit_test",
    "EV": "evaluate",
}
"""Short names of the CHESS agent calls and their ``step`` names in the HexGen-Flow traces."""

PARALLEL_STEPS: frozenset[str] = frozenset({"GC", "EV"})
"""Steps whose consecutive calls form one parallel stage (Hexgen-Flow
``core/request.py:222-233``)."""

POOLED_STEPS: frozenset[str] = frozenset({"RV", "EV"})
"""Steps with a variable call count, whose lengths are pooled over positions; other steps are
resampled per position (IR#0..3 grow by tool-call history, GC#0/#1 use different templates)."""

STANDARD_WORKFLOW: tuple[str, ...] = (
    "IR",
    "KW",
    "IR",
    "IR",
    "IR",
    "GC",
    "RV",
    "RV",
    "RV",
    "RV",
    "UT",
    "GUT",
    "UT",
    "EV",
    "UT",
)
"""The fixed 15-call template of the base SLO (Hexgen-Flow@396a3ba ``STANDARD_WORKFLOW`` in
``core/request.py``, summed in ``start_simulator.py:92-99``); each parallel stage (GC, EV) counts
once."""

TRACES: tuple[str, ...] = ("trace1", "trace2", "trace3", "financial", "formula1")
"""HexGen-Flow trace names (``input_file_<name>.json``)."""

TRACE_DATABASES: dict[str, tuple[str, ...]] = {
    "trace1": ("financial",),
    "trace2": ("formula_1",),
    "trace3": ("financial", "formula_1"),
    "financial": ("financial",),
    "formula1": ("formula_1",),
}
"""BIRD dev databases each trace draws its questions from (paper §5.1)."""

DEFAULT_COST_MODEL = TEXT2SQL_SLO_COST_MODEL
"""Cost model of the base SLO when the caller gives none: Llama-3.1-70B (paper §5.1), TP 8."""

PROMPT_SOURCES = ("trace", "templates")


def _data_text(*parts: str) -> str:
    node = resources.files("llmsched_gym").joinpath("/".join(("data", "text2sql", *parts)))
    return node.read_text(encoding="utf-8")


@functools.cache
def load_hexgen_stats() -> dict[str, Any]:
    """The derived HexGen-Flow statistics shipped with the package (``hexgen_flow_stats.json``)."""
    return json.loads(_data_text("hexgen_flow_stats.json"))


@functools.cache
def load_template_counts() -> dict[str, Any]:
    """Token counts of the filled CHESS templates per shipped BIRD question.

    Written by ``scripts/derive_text2sql_stats.py`` from :func:`chess_prompts` (shipped templates
    and BIRD subset) with the tokenizer it names under ``"tokenizer"``.
    """
    return json.loads(_data_text("chess_template_token_counts.json"))


@functools.cache
def _chess_template(name: str) -> str:
    return _data_text("chess", "templates", f"template_{name}.txt")


@functools.cache
def load_bird_questions() -> tuple[dict[str, Any], ...]:
    """The shipped BIRD dev questions (financial and formula_1; CC-BY-SA-4.0, see bird/NOTICE)."""
    return tuple(json.loads(_data_text("bird", "dev_questions.json")))


@functools.cache
def _bird_tables() -> dict[str, list[dict[str, Any]]]:
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in json.loads(_data_text("bird", "dev_tables.json")):
        tables.setdefault(table["db_id"], []).append(table)
    return tables


def _schema_text(db_id: str) -> str:
    """CREATE TABLE statements of a BIRD database, CHESS's ``DATABASE_SCHEMA`` layout.

    BIRD's value examples and column descriptions are not staged, so each column carries only
    its natural-language name as the comment.
    """
    parts = []
    for table in _bird_tables()[db_id]:
        cols = zip(
            table["column_names_original"],
            table["column_types"],
            table["column_names"],
            strict=True,
        )
        lines = [f"\t{name} {kind.upper()}, -- `{label}`" for name, kind, label in cols]
        parts.append(
            f"CREATE TABLE {table['table_name_original']}\n(\n" + "\n".join(lines) + "\n);"
        )
    return "\n\n".join(parts)


def _fill(template: str, values: Mapping[str, str]) -> str:
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


_AGENTS = {
    "IR": (
        "Information Retriever",
        "retrieve the most important entities and context relevant to the keywords of the "
        "question, through extracting keywords, retrieving entities, and retrieving context",
        ("extract_keywords", "retrieve_entity", "retrieve_context"),
    ),
    "UT": (
        "Unit Tester",
        "generate unit tests then evaluate them",
        ("generate_unit_test", "evaluate"),
    ),
}


def chess_prompts(question: Mapping[str, Any]) -> dict[str, str]:
    """The CHESS prompts of one BIRD question, filled from the shipped templates.

    Keys: ``IR`` and ``UT`` (the agent prompt, question-independent as in the traces), ``KW``
    (extract_keywords), ``GC0``/``GC1`` (candidate templates one and two: GC#1 of every trace is
    exactly the 3,866 template tokens shorter), ``RV`` (revise_one), ``GUT`` and ``EV``. Slots that
    hold runtime artefacts get stand-ins: candidate SQL = the gold SQL (twice), execution result
    and unit test = empty.

    Args:
        question: A BIRD record with ``db_id``, ``question``, ``evidence`` and ``sql``.

    Returns:
        Prompt text per slot.
    """
    schema = _schema_text(question["db_id"])
    sql = question["sql"]
    common = {"DATABASE_SCHEMA": schema, "QUESTION": question["question"]}
    common["HINT"] = question.get("evidence") or ""
    candidates = f"Candidate Response #1: {sql}\nCandidate Response #2: {sql}"
    prompts = {
        key: _fill(
            _chess_template("agent_prompt"),
            {"agent_name": name, "task": task, "tools": "\n".join(tools)},
        )
        for key, (name, task, tools) in _AGENTS.items()
    }
    prompts["KW"] = _fill(_chess_template("extract_keywords"), common)
    prompts["GC0"] = _fill(_chess_template("generate_candidate_one"), common)
    prompts["GC1"] = _fill(_chess_template("generate_candidate_two"), common)
    prompts["RV"] = _fill(_chess_template("revise_one"), {**common, "QUERY": sql, "RESULT": ""})
    prompts["GUT"] = _fill(
        _chess_template("generate_unit_tests"),
        {**common, "CANDIDATE_QUERIES": candidates, "UNIT_TEST_CAP": "3"},
    )
    prompts["EV"] = _fill(
        _chess_template("evaluate"),
        {**common, "CANDIDATE_RESPONSES": candidates, "UNIT_TEST": ""},
    )
    return prompts


def step_of_stage(stage: str) -> str:
    """The HexGen-Flow step name of a generated stage name (``"RV3"`` -> ``"revise"``)."""
    abbr = stage.rstrip("0123456789")
    if abbr not in STEP_NAMES or abbr == stage:
        raise ConfigError(f"stage must be a text2sql stage name such as 'RV3', got {stage!r}")
    return STEP_NAMES[abbr]


def single_request_latency_s(cost_model: CostModel, input_len: int, output_len: int) -> float:
    """Seconds one request takes alone on an idle engine under ``cost_model``.

    One prefill step of the whole prompt (which yields the first token), then ``output_len - 1``
    decode steps, the j-th reading ``input_len + j - 1`` KV tokens (DESIGN "Cost model").
    """
    prefill = cost_model.step_time(input_len, input_len * input_len, 0, 1, 0)
    n = output_len - 1
    if n <= 0:
        return float(prefill)
    kv = input_len + np.arange(n, dtype=np.int64)
    ones = np.ones(n, dtype=np.int64)
    decode = cost_model.step_times(ones, np.zeros(n, dtype=np.int64), kv, 0 * ones, ones)
    return float(prefill + float(np.sum(decode)))


def base_slo_s(cost_model: CostModel | str, trace: str = "trace3") -> float:
    """Base SLO: the single-query latency of the fixed 15-call template (HexGen-Text2SQL §5.1).

    Sum over ``STANDARD_WORKFLOW`` of the single-request latency at the step's stage-typical
    (input, output) pair, taken as the trace's rounded mean lengths of that step (Hexgen-Flow's
    ``EMPIRICAL_IO_LEN``; paper §5.1 "single-query processing latency").

    Args:
        cost_model: A cost model or a ``load_cost_model`` spec string.
        trace: HexGen-Flow trace whose mean lengths are used.

    Returns:
        Seconds.
    """
    model = _resolve_cost_model(cost_model)
    steps = _trace_stats(trace)["steps"]
    total = 0.0
    for abbr in STANDARD_WORKFLOW:
        io = steps[abbr]
        total += single_request_latency_s(
            model, max(1, round(io["input"]["mean"])), max(1, round(io["output"]["mean"]))
        )
    return total


def _resolve_cost_model(cost_model: CostModel | str) -> CostModel:
    if isinstance(cost_model, str):
        from llmsched_gym.cost.registry import load_cost_model

        return load_cost_model(cost_model)
    if not (hasattr(cost_model, "step_time") and hasattr(cost_model, "step_times")):
        raise ConfigError(
            f"cost_model must be a CostModel or a profile spec string, got {cost_model!r}"
        )
    return cost_model


def _trace_stats(trace: str) -> dict[str, Any]:
    if not isinstance(trace, str) or trace not in TRACES:
        raise ConfigError(f"trace must be one of {list(TRACES)}, got {trace!r}")
    return load_hexgen_stats()["traces"][trace]


@dataclass(frozen=True)
class _Table:
    """An empirical quantile function plus the call's copula coupling."""

    levels: np.ndarray
    input_q: np.ndarray
    output_q: np.ndarray
    loading: float
    within: float

    def sample(self, u: np.ndarray, which: str) -> np.ndarray:
        q = self.input_q if which == "input" else self.output_q
        return np.maximum(1, np.rint(np.interp(u, self.levels, q))).astype(np.int64)


@functools.cache
def _tables(trace: str) -> dict[str, _Table]:
    stats = _trace_stats(trace)
    levels = np.asarray(load_hexgen_stats()["quantile_levels"], dtype=np.float64)
    copula = stats["input_copula"]
    return {
        slot: _Table(
            levels,
            np.asarray(entry["input"]["quantiles"], dtype=np.float64),
            np.asarray(entry["output"]["quantiles"], dtype=np.float64),
            float(copula["loading"][slot]),
            float(copula["within_query"][slot]),
        )
        for slot, entry in stats["slots"].items()
    }


def _slot(abbr: str, occurrence: int) -> str:
    return abbr if abbr in POOLED_STEPS else f"{abbr}#{occurrence}"


def _template_slot(abbr: str, occurrence: int) -> str:
    return f"GC{occurrence}" if abbr == "GC" else abbr


_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _phi(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF, elementwise."""
    return 0.5 * _ERFC(-np.asarray(x, dtype=np.float64) / math.sqrt(2.0)).astype(np.float64)


def _check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def text2sql_jobs(
    trace: str = "trace3",
    num_queries: int | None = None,
    rate_per_s: float = 1.0,
    *,
    seed: int = 0,
    slo_scale: float = 5.0,
    cost_model: CostModel | str | None = None,
    slo_base_s: float | None = None,
    prompt_source: str = "trace",
    burstiness: float = 1.0,
    max_tokens: int | None = None,
    id_prefix: str = "t",
) -> list[Job]:
    """CHESS-style Text-to-SQL queries arriving by a Poisson process, as workflow jobs.

    Job ``j`` is ``f"{id_prefix}{j}"``; its stages are named by step and per-step index (``IR0``,
    ``KW0``, ``IR1``..``IR3``, ``GC0``, ``RV0``..``RV{k-1}``, ``UT0``, ``GUT0``, ``UT1``, ``EV0``,
    ``UT2``), each ``after`` its predecessor; request ids are ``f"{job}-{stage}-{i}"`` with release
    offset 0. Every request's ``deadline_s`` is the job's arrival plus its SLO.

    Args:
        trace: HexGen-Flow trace to follow (``TRACES``): trace1 (financial), trace2 (formula1),
            trace3 (both), or the raw financial / formula1 files.
        num_queries: Number of queries; None sends as many as the trace holds (as Hexgen-Flow
            does).
        rate_per_s: Mean query arrival rate (paper §5.1 uses 0.5 and 1.0).
        seed: Seed of ``numpy.random.default_rng``; arrivals and workflows use independent
            streams spawned from it.
        slo_scale: Multiple of the base SLO given to every job (paper Fig. 2 "SLO scale").
        cost_model: Cost model (or spec) of the base SLO (:func:`base_slo_s`); default
            ``DEFAULT_COST_MODEL``. Exclusive with ``slo_base_s``.
        slo_base_s: Base SLO in seconds instead of computing it (Hexgen-Flow's default is 52.95).
        prompt_source: ``"trace"`` resamples input lengths from the trace; ``"templates"`` uses
            the token counts of CHESS templates filled with a BIRD question of the trace's
            databases (drawn uniformly per query).
        burstiness: Gamma shape of the inter-arrival gaps (1.0 = Poisson).
        max_tokens: Visible generation limit of every request (outputs are capped to it);
            None sets it to each request's output length (the trace contract's default).
        id_prefix: Prefix of job ids.

    Returns:
        Jobs in arrival order, ``kind="text2sql"``, ``slo_e2e_s = slo_scale * base SLO``.

    Raises:
        ConfigError: If an argument is out of range; the message names it and its value.
    """
    stats = _trace_stats(trace)
    if num_queries is None:
        num_queries = int(stats["num_queries"])
    if isinstance(num_queries, bool) or not isinstance(num_queries, (int, np.integer)):
        raise ConfigError(f"num_queries must be an int >= 0 or None, got {num_queries!r}")
    if num_queries < 0:
        raise ConfigError(f"num_queries must be an int >= 0 or None, got {num_queries!r}")
    rate_per_s = _check_positive("rate_per_s", rate_per_s)
    burstiness = _check_positive("burstiness", burstiness)
    slo_scale = _check_positive("slo_scale", slo_scale)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be an int >= 0, got {seed!r}")
    if prompt_source not in PROMPT_SOURCES:
        raise ConfigError(
            f"prompt_source must be one of {list(PROMPT_SOURCES)}, got {prompt_source!r}"
        )
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ConfigError(f"max_tokens must be an int >= 1 or None, got {max_tokens!r}")
    if not isinstance(id_prefix, str) or not id_prefix or "-" in id_prefix:
        raise ConfigError(f"id_prefix must be a non-empty string without '-', got {id_prefix!r}")
    if slo_base_s is not None and cost_model is not None:
        raise ConfigError(
            f"give either cost_model ({cost_model!r}) or slo_base_s ({slo_base_s!r}), not both"
        )
    if slo_base_s is not None:
        base = _check_positive("slo_base_s", slo_base_s)
    else:
        base = base_slo_s(DEFAULT_COST_MODEL if cost_model is None else cost_model, trace)
    slo = slo_scale * base

    arrivals_seq, flow_seq = np.random.SeedSequence(int(seed)).spawn(2)
    arrival_seed = int(arrivals_seq.generate_state(1)[0])
    times = arrival_times_s(num_queries, rate_per_s, burstiness=burstiness, seed=arrival_seed)
    rng = np.random.default_rng(flow_seq)

    shapes = stats["shapes"]
    weights = np.asarray([s["count"] for s in shapes], dtype=np.float64)
    chosen = rng.choice(len(shapes), size=num_queries, p=weights / weights.sum())
    expanded = [_expand(s["groups"]) for s in shapes]
    calls = [expanded[int(i)] for i in chosen]
    inputs, outputs = _sample_lengths(calls, _tables(trace), rng)
    if prompt_source == "templates":
        counts = load_template_counts()["questions"]
        pool = [q for q in counts if q["db_id"] in TRACE_DATABASES[trace]]
        picks = rng.integers(len(pool), size=num_queries)
        inputs = [
            [int(pool[int(p)]["tokens"][_template_slot(a, o)]) for a, o in job_calls]
            for p, job_calls in zip(picks, calls, strict=True)
        ]

    jobs = []
    for j in range(num_queries):
        job_id = f"{id_prefix}{j}"
        arrival = float(times[j])
        groups = shapes[int(chosen[j])]["groups"]
        stages = _stages(job_id, groups, inputs[j], outputs[j], arrival + slo, max_tokens)
        jobs.append(Job(job_id, arrival, stages, kind="text2sql", slo_e2e_s=slo))
    return jobs


def _expand(groups: Sequence[Sequence[Any]]) -> list[tuple[str, int]]:
    """(step, occurrence within the query) of every call, in execution order."""
    seen: dict[str, int] = {}
    calls = []
    for abbr, mult in groups:
        for _ in range(int(mult)):
            calls.append((abbr, seen.get(abbr, 0)))
            seen[abbr] = seen.get(abbr, 0) + 1
    return calls


def _sample_lengths(
    calls: Sequence[Sequence[tuple[str, int]]],
    tables: Mapping[str, _Table],
    rng: np.random.Generator,
) -> tuple[list[list[int]], list[list[int]]]:
    """Lengths of every call of every query.

    Inputs follow a Gaussian copula: a call's normal score is ``λ z + sqrt(1 - λ²) (sqrt(ω) y
    + sqrt(1 - ω) ε)`` with ``z`` per query (anchored on GC#0's prompt), ``y`` per query and step
    (repeated RV/EV calls of a query look alike), ``ε`` per call, and the slot's derived loading
    ``λ`` and within-query correlation ``ω``; it is mapped through Φ and the slot's empirical
    quantile function, so each call's marginal is the trace's. Outputs are drawn independently.
    """
    steps = sorted(STEP_NAMES)
    step_index = {a: i for i, a in enumerate(steps)}
    sizes = [len(c) for c in calls]
    job = np.repeat(np.arange(len(calls)), sizes)
    flat = [call for job_calls in calls for call in job_calls]
    total = len(flat)
    z = rng.standard_normal(len(calls))
    y = rng.standard_normal((len(calls), len(steps)))
    eps = rng.standard_normal(total)
    u_out = rng.random(total)
    slot_of = np.array([_slot(a, o) for a, o in flat], dtype=object)
    step_of = np.array([step_index[a] for a, _ in flat], dtype=np.int64)
    inputs = np.empty(total, dtype=np.int64)
    outputs = np.empty(total, dtype=np.int64)
    for slot in sorted(set(slot_of.tolist())):
        t = tables[slot]
        mask = slot_of == slot
        own = math.sqrt(t.within) * y[job[mask], step_of[mask]]
        own = own + math.sqrt(1.0 - t.within) * eps[mask]
        score = t.loading * z[job[mask]] + math.sqrt(max(0.0, 1.0 - t.loading**2)) * own
        inputs[mask] = t.sample(_phi(score), "input")
        outputs[mask] = t.sample(u_out[mask], "output")
    bounds = np.cumsum([0, *sizes])
    split = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return (
        [inputs[a:b].tolist() for a, b in split],
        [outputs[a:b].tolist() for a, b in split],
    )


def _stages(
    job_id: str,
    groups: Sequence[Sequence[Any]],
    inputs: Sequence[int],
    outputs: Sequence[int],
    deadline: float,
    max_tokens: int | None,
) -> tuple[Stage, ...]:
    stages: list[Stage] = []
    index: dict[str, int] = {}
    call = 0

    def request(stage: str, i: int) -> RequestSpec:
        out = outputs[call] if max_tokens is None else min(outputs[call], max_tokens)
        return RequestSpec(
            f"{job_id}-{stage}-{i}",
            0.0,
            prompt_len=int(inputs[call]),
            output_len=int(out),
            max_tokens=int(out if max_tokens is None else max_tokens),
            deadline_s=deadline,
        )

    for abbr, mult in groups:
        width = int(mult) if abbr in PARALLEL_STEPS else 1
        for _ in range(int(mult) // width):
            name = f"{abbr}{index.get(abbr, 0)}"
            index[abbr] = index.get(abbr, 0) + 1
            specs = []
            for i in range(width):
                specs.append(request(name, i))
                call += 1
            after = (stages[-1].name,) if stages else ()
            stages.append(Stage(name, tuple(specs), after=after))
    return tuple(stages)
