"""RelServe relQuery workloads: templated LLM calls over the rows of a table (RelServe, PVLDB).

A relQuery (RelServe §2.1, Definition 2.1) fills one task template with N rows of a table and
sends the N requests at once. This generator follows RelServe's benchmark client
(``load_queries.py``, ``rel_bench.py`` at CSLabor/RelServe@162dd29) and §5.1 of the paper:

* N is uniform in ``1..100`` inclusive; the query type is uniform over the five types of §5.1
  (filtering ``binary``, ``classify``, ``regression``, ``summarize``, ``open``) whose
  ``max_tokens`` are 5, 10, 5, 50 and 100; with dataset ``"all"`` the table is uniform over the
  four datasets of Table 4.
* relQueries arrive as a renewal process with Gamma(shape = burstiness, scale = 1 / (rate ·
  burstiness)) gaps (Poisson for burstiness 1); the first arrives at 0 s.
* Rows: by default each relQuery draws its N rows at random from the table (first 10k rows,
  §5.1). RelServe's client instead calls ``table.sample(N, random_state=0)`` for *every*
  relQuery, i.e. the first N rows of one fixed permutation, so relQueries of the same template
  repeat each other's prompts; ``row_sampling="code"`` reproduces that. We default to the
  paper's description because the code's reuse raises the engine's hit ratio well above the 38%
  the paper measured (see ``scripts/relquery_report.py``).
* Prompt = OPT's chat format (``System:`` / ``Question:`` / ``Answer:``) around a fixed
  three-sentence system prompt and the filled template; requests of a relQuery are sorted by
  prompt (``inner_sort``), which puts rows sharing leading values side by side (the source of
  the ~38% prefix-cache hit ratio of §2.2, Figure 4). Requests with prompt + ``max_tokens`` >
  ``max_model_len`` − 10 are dropped, as the client does.

Prompt text (system prompt, template wording, chat format) is tokenized with the shipped GPT-2
BPE (OPT's BPE). Table cells are synthetic: the tables may not be shipped, so each cell is a
deterministic pseudo-random token-id sequence whose length and repetition across rows follow the
statistics ``scripts/derive_relational_stats.py`` derived from the real tables
(``llmsched_gym/data/relational/<dataset>.json``). Rows of one movie share the same ids for the
movie's synopsis, so prefix sharing has the tables' structure. The template wording is our own
paraphrase of RelServe's templates (same columns in the same order, similar length).

True output lengths (hidden from non-oracle policies) are drawn per request: with probability
``p`` the model runs to ``max_tokens``, else uniformly in ``1..max_tokens`` (outputs end at EOS
at temperature 0, so they are <= ``max_tokens``). ``p`` is calibrated per dataset to Table 4's
average output length (Amazon 18, Rotten 21, Beer 19, PDMX 23 tokens; :data:`PAPER_TABLE4`):

* ``output_lengths="table4"`` (default): for a uniform type mix, i.e. one request of each type.
  A drawn workload weights the types by relQuery size and count, so its realised mean differs
  (RelServe's scenarios: 1.26x Table 4; the authors' draws: 0.81-0.87x).
* ``output_lengths="table4-drawn"``: on the requests actually drawn, so the expected mean output
  over them equals Table 4's. Where that mean lies below the uniform draws' own mean, the mass
  goes to the other end instead: with probability ``q`` the model answers in one token, else
  uniformly. Both modes use the same random draws and differ only in this threshold
  (:func:`table4_output_calibration`).

>>> jobs = relquery_jobs("rotten", num_queries=3, rate_per_s=1.0, seed=0)
>>> [job.kind for job in jobs]
['relquery', 'relquery', 'relquery']
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from llmsched_gym.core.job import Job, Stage
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.workloads.tokenizer import BOS_TOKEN_ID, TOKENIZERS, encode

__all__ = [
    "DATASETS",
    "MAX_TOKENS",
    "QUERY_TYPES",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "OUTPUT_LENGTHS",
    "dataset_stats",
    "relquery_jobs",
    "table4_output_calibration",
    "template_segments",
]

DATASETS: tuple[str, ...] = ("amazon", "rotten", "beer", "pdmx")
"""The four tables of RelServe Table 4; ``"all"`` mixes them uniformly."""

QUERY_TYPES: tuple[str, ...] = ("binary", "classify", "regression", "summarize", "open")
"""The five query types of RelServe §5.1 (filtering, classification, rating, summary, open)."""

MAX_TOKENS: dict[str, int] = {
    "binary": 5,
    "classify": 10,
    "regression": 5,
    "summarize": 50,
    "open": 100,
}
"""Per-type output limit (RelServe §5.1: 5, 10, 5, 50 and 100 tokens)."""

SYSTEM_PROMPT = (
    "You are a helpful assistant who answers each question as briefly as possible.\n"
    "You must pay attention to the user's instructions about the output format and follow "
    "them strictly.\n"
    "Apply the same criteria consistently whenever you judge or predict a result."
)
"""Fixed three-sentence system prompt shared by every request (our wording)."""

CHAT_FORMAT = "System:\n{system}\n\nQuestion:\n{user}\n\nAnswer:\n"
"""The chat format RelServe's client installs for OPT (rendered with HF's trimmed blocks)."""

TABLE_ROWS = 10_000
"""Rows of each table (RelServe §5.1 keeps the first 10k rows)."""

TEMPLATES: dict[str, dict[str, str]] = {
    "rotten": {
        "binary": (
            "Judge whether the whole family could enjoy watching this movie together, using the "
            "movie information: [{movie_info}] and the user review: [{review_content}]. Reply "
            "with only 'Yes' or 'No' and nothing else."
        ),
        "classify": (
            "Using the movie's information: [{review_content}], assign it to one of these "
            "categories: 'Action', 'Thriller', 'Western', 'Horror', 'Comedy', 'Drama', 'Science "
            "Fiction', 'Romance', 'Crime', 'Animation', 'Documentary', 'Fantasy', 'Musical', "
            "'Adventure', 'Historical', 'Children', 'War', 'Music', 'Cyberpunk'. Reply with only "
            "the category and nothing else."
        ),
        "regression": (
            "Reply with only a number and nothing else for this task: give a satisfaction score "
            "from 0 (bad) to 5 (good) based on the review: [{review_content}] and the movie "
            "information: [{movie_info}]."
        ),
        "summarize": (
            "Summarize the user's review: [{review_content}] of the movie: [{movie_info}]."
        ),
        "open": (
            "Suggest some movies for the user based on the movie information: [{movie_info}] "
            "and the user's review: [{review_content}]."
        ),
    },
    "amazon": {
        "binary": (
            "Decide whether this product would suit kids based on its description: "
            "[{description}] and the user review: [{reviewText}], reply with only 'Yes' or 'No' "
            "and nothing else."
        ),
        "classify": (
            "Classify the sentiment of the user's review: [{reviewText}]. Reply with only "
            "'Negative', 'Positive', or 'Neutral' and nothing else."
        ),
        "regression": (
            "Estimate the overall rating of the music product from 0 (bad) to 5 (good) based on "
            "the reviewText: [{reviewText}]. Reply with nothing else but the number."
        ),
        "summarize": "Summarize the user's review: [{reviewText}] of the product: [{description}].",
        "open": (
            "Name the most likely target audience of the music product given its Format: "
            "[{Format}] and the user comment: [{reviewText}]."
        ),
    },
    "beer": {
        "binary": (
            "Given these details: the beer's name [{beer/name}], the beer's style "
            "[{beer/style}], the beer's ABV [{beer/ABV}], is this beer of European origin? "
            "Reply with only 'Yes' or 'No' and nothing else."
        ),
        "classify": (
            "Classify the sentiment of the user's review: [{review/text}], reply with only "
            "'Negative', 'Positive', or 'Neutral'."
        ),
        "regression": (
            "Estimate the user's overall rating of the beer from 0 (bad) to 20 (good) based on "
            "the reviewText: [{review/text}]. Reply with nothing else but the number."
        ),
        "summarize": (
            "Summarize the user's review of the beer so that the summary helps to explain the "
            "user's rating. The user's review is: [{review/text}]. The beer's details are: the "
            "beer's name [{beer/name}], the beer's style [{beer/style}], the beer's ABV "
            "[{beer/ABV}]. The user's rating of the beer is: [{review/overall}]."
        ),
        "open": (
            "From the brewer's point of view, what is the beer's biggest problem according to "
            "the user's review and per-aspect ratings? User's review: [{review/text}], "
            "appearance rating: {review/appearance}, aroma rating: {review/aroma}, palate "
            "rating: {review/palate}, taste rating: {review/taste}."
        ),
    },
    "pdmx": {
        "binary": (
            "Given the description [{description}] of the music [{songname}], does this song "
            "information refer to a specific person? Reply with only 'YES' or 'NO', nothing else."
        ),
        "classify": (
            "Classify the sentiment of the user's comment: [{comment}], reply with only "
            "'Negative', 'Positive', or 'Neutral' and nothing else."
        ),
        "regression": (
            "Estimate the music's rating in stars from 0 (bad) to 5 (good) based on the user's "
            "comment [{comment}] and the music's genres [{genres}], description "
            "[{description}]. Reply with nothing else but the number."
        ),
        "summarize": "Summarize the user's comment: [{comment}] on the music: [{description}].",
        "open": (
            "Name the most likely target audience of the music given its title [{songname}], "
            "artist name [{artistname}], composer name [{composername}], publisher "
            "[{publisher}], genres [{genres}], description [{description}], and the user "
            "comment: [{comment}]."
        ),
    },
}
"""Task templates per dataset and type; ``{column}`` is replaced by the row's cell."""

PAPER_TABLE4: dict[str, tuple[int, int]] = {
    "amazon": (234, 18),
    "rotten": (215, 21),
    "beer": (174, 19),
    "pdmx": (158, 23),
}
"""RelServe Table 4 ("Datasets for experiments"): (average input length, average output
length) in tokens per dataset."""

OUTPUT_LENGTHS: tuple[str, ...] = ("table4", "table4-drawn", "max_tokens")
"""Modes of the true output lengths (:func:`relquery_jobs`, module docstring)."""


def table4_output_calibration(dataset: str, limits) -> float:
    """Signed end-point probability that sets the mean output over ``limits`` to Table 4's.

    ``limits`` are the ``max_tokens`` of the requests the mean is taken over. Each request's
    output is uniform in ``1..max_tokens`` except, with probability ``|c|``, ``max_tokens``
    (``c >= 0``) or one token (``c < 0``). The expected mean is linear in ``c`` on each side, so
    ``c`` is solved exactly and clipped to ``[-1, 1]`` (a target out of reach, e.g. above every
    request running to its limit, gives the nearest end).
    """
    if dataset not in PAPER_TABLE4:
        raise ConfigError(f"dataset must be one of {list(DATASETS)}, got {dataset!r}")
    lim = np.asarray(list(limits), dtype=np.float64)
    if lim.size == 0 or not np.all(lim >= 1):
        raise ConfigError(f"limits must be a non-empty list of max_tokens >= 1, got {limits!r}")
    target = PAPER_TABLE4[dataset][1]
    limit_mean = float(np.mean(lim))
    uniform_mean = float(np.mean((lim + 1) / 2))
    if target >= uniform_mean:
        if limit_mean == uniform_mean:
            return 0.0
        return min(1.0, (target - uniform_mean) / (limit_mean - uniform_mean))
    return -min(1.0, (uniform_mean - target) / (uniform_mean - 1.0))


_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
_VOCAB = (256, 50000)
"""Synthetic cell ids are drawn from ordinary GPT-2 word pieces (no bytes, no special ids)."""


@cache
def template_segments(
    dataset: str, query_type: str, tokenizer: str = "gpt2"
) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """Token ids of the fixed text around the cells of one template, and the cells' columns.

    The prompt is ``BOS + segment[0] + cell[0] + segment[1] + ... + segment[k]`` where the first
    segment starts with the chat format and system prompt and the last ends with ``Answer:``.
    Segments are tokenized apart from the cells (a cell boundary is a token boundary).
    """
    user = TEMPLATES[dataset][query_type]
    parts = _PLACEHOLDER.split(user)
    literals, columns = parts[0::2], tuple(parts[1::2])
    head, tail = CHAT_FORMAT.split("{user}")
    literals[0] = head.format(system=SYSTEM_PROMPT) + literals[0]
    literals[-1] = literals[-1] + tail
    segments = [encode(tokenizer, text) for text in literals]
    segments[0] = (BOS_TOKEN_ID[tokenizer], *segments[0])
    return tuple(segments), columns


@cache
def dataset_stats(dataset: str) -> dict:
    """The shipped derived statistics of one table (``data/relational/<dataset>.json``)."""
    if dataset not in DATASETS:
        raise ConfigError(f"dataset must be one of {[*DATASETS, 'all']}, got {dataset!r}")
    path = resources.files("llmsched_gym").joinpath("data", "relational", f"{dataset}.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _draw_lengths(rng: np.random.Generator, quantiles: dict, size: int) -> np.ndarray:
    """Token lengths by inverse-CDF sampling of the stored quantile function (>= 1)."""
    probs = np.asarray(quantiles["probs"], dtype=np.float64)
    values = np.asarray(quantiles["tokens"], dtype=np.float64)
    return np.maximum(1, np.rint(np.interp(rng.random(size), probs, values))).astype(np.int64)


@dataclass
class _Column:
    """Per-row value keys and token lengths of one column of a synthetic table."""

    keys: np.ndarray
    """Value id per row: rows with equal keys hold the same cell (same token ids)."""
    lengths: np.ndarray
    """Token length per value id."""


class _Table:
    """A synthetic table with the derived statistics of one real table; built from a seed.

    Entities (a movie, a product, a beer) own ``level: entity`` columns; ``level: row`` columns
    are drawn per row. Each column value is a frequent shared value (``common``), a missing
    cell (pandas formats NaN as ``nan``) or a value unique to its row or entity.
    """

    def __init__(self, dataset: str, stats: dict, seed: int, tokenizer: str) -> None:
        self.dataset = dataset
        self.seed = seed
        self.tokenizer = tokenizer
        rng = np.random.default_rng([seed, DATASETS.index(dataset), 1])
        n = int(stats["table_rows"])
        self.num_rows = n
        entity_of: dict[str, np.ndarray] = {}
        num_entities: dict[str, int] = {}
        for name in sorted(stats["entities"]):
            runs = stats["entities"][name]["group_sizes"]  # [[size, count], ...]
            sizes = np.repeat([r[0] for r in runs], [r[1] for r in runs]).astype(np.int64)
            ids = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))[:n]
            entity_of[name], num_entities[name] = ids, len(sizes)
        self.columns: dict[str, _Column] = {}
        self._nan = encode(tokenizer, "nan")
        for name in sorted(stats["columns"]):
            spec = stats["columns"][name]
            lengths_key = spec["tokens"][tokenizer]
            if spec["level"] == "entity":
                owner = entity_of[spec["entity"]]
                count = num_entities[spec["entity"]]
            else:
                owner, count = np.arange(n), n
            # Category per owner: 0 = missing, 1.. = common values, then unique.
            common = lengths_key["common"]
            probs = [spec["missing_frac"], *(c["frac"] for c in common)]
            probs.append(max(0.0, 1.0 - sum(probs)))
            cat = rng.choice(len(probs), size=count, p=np.asarray(probs) / sum(probs))
            unique_len = _draw_lengths(rng, lengths_key["unique"], count)
            # Value id per owner: missing -> 0, common j -> 1 + j, unique -> 1 + len(common) + i.
            k = 1 + len(common)
            value_of_owner = np.where(cat < k, cat, k + np.arange(count))
            lengths = np.concatenate(
                [[len(self._nan)], [c["tokens"] for c in common], unique_len]
            ).astype(np.int64)
            self.columns[name] = _Column(value_of_owner[owner], lengths)
        self.permutation = rng.permutation(n)
        self._cache: dict[tuple[str, int], tuple[int, ...]] = {}

    def cell(self, column: str, row: int) -> tuple[int, ...]:
        """Token ids of one cell; deterministic in (seed, dataset, column, value)."""
        col = self.columns[column]
        value = int(col.keys[row])
        key = (column, value)
        ids = self._cache.get(key)
        if ids is None:
            if value == 0:
                ids = self._nan
            else:
                col_index = sorted(self.columns).index(column)
                entropy = [self.seed, DATASETS.index(self.dataset), 2, col_index, value]
                rng = np.random.default_rng(entropy)
                ids = tuple(int(x) for x in rng.integers(*_VOCAB, size=int(col.lengths[value])))
            self._cache[key] = ids
        return ids


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise ConfigError(f"{name} must be {bound}, got {value!r}")
    return int(value)


def _check_positive(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating))
        or not (math.isfinite(value) and value > 0)
    ):
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def relquery_jobs(
    dataset: str,
    num_queries: int,
    rate_per_s: float,
    *,
    seed: int = 0,
    tokenizer: str = "gpt2",
    templates: tuple[str, ...] | list[str] = QUERY_TYPES,
    max_model_len: int = 2048,
    min_rows: int = 1,
    max_rows: int = 100,
    burstiness: float = 1.0,
    row_sampling: str = "independent",
    output_lengths: str = "table4",
    output_mix: Mapping[str, Sequence[int]] | None = None,
) -> list[Job]:
    """RelServe relQueries as one-stage jobs (``Stage("rows", ...)``, ``kind="relquery"``).

    Args:
        dataset: ``amazon``, ``rotten``, ``beer``, ``pdmx`` (RelServe Table 4) or ``all``
            (each relQuery picks one of the four uniformly).
        num_queries: Number of relQueries drawn (>= 1); one whose every request is too long for
            ``max_model_len`` is skipped, as the client does, and takes no arrival.
        rate_per_s: Mean relQuery arrival rate per second (finite, > 0).
        seed: Seed of every draw (``numpy.random.default_rng``), the synthetic tables included.
        tokenizer: Shipped tokenizer for the prompt text (``gpt2``: OPT's BPE).
        templates: Query types to draw from uniformly (subset of ``QUERY_TYPES``).
        max_model_len: Requests with prompt + ``max_tokens`` > ``max_model_len`` - 10 are
            dropped (RelServe's client uses 2048 for OPT-13B, 8192 otherwise).
        min_rows: Smallest relQuery size (RelServe: 1).
        max_rows: Largest relQuery size, inclusive (RelServe: 100; at most the table's rows).
        burstiness: Gamma shape of the inter-arrival gaps (1.0: Poisson).
        row_sampling: ``independent`` (default): fresh random rows per relQuery, as §5.1
            describes; ``code``: every relQuery on a table takes the first N rows of one fixed
            permutation, as RelServe's client does (``sample(N, random_state=0)``), which lets
            same-template relQueries reuse each other's prompts (a higher hit ratio than the
            38% of §2.2).
        output_lengths: ``table4``: true output lengths with Table 4's per-dataset mean for a
            uniform type mix; ``table4-drawn``: with Table 4's per-dataset mean over the drawn
            requests (module docstring); ``max_tokens``: every request generates
            ``max_tokens`` tokens.
        output_mix: Only with ``table4-drawn``: per dataset, the ``max_tokens`` of the requests
            the mean is calibrated over, for a workload assembled from several calls (RelServe's
            authors' draws, one call per relQuery); default: the requests this call keeps.

    Returns:
        Jobs ``rq0``, ``rq1``, ... in arrival order; request ids ``rq{j}-{i}`` in prompt order.

    Raises:
        ConfigError: An argument is unknown or out of range (a ``ValueError``); the message
            names it and its value.
    """
    if dataset != "all" and dataset not in DATASETS:
        raise ConfigError(f"dataset must be one of {[*DATASETS, 'all']}, got {dataset!r}")
    num_queries = _check_int("num_queries", num_queries, 1)
    rate = _check_positive("rate_per_s", rate_per_s)
    shape = _check_positive("burstiness", burstiness)
    seed = _check_int("seed", seed, 0)
    if tokenizer not in TOKENIZERS:
        raise ConfigError(f"tokenizer must be one of {sorted(TOKENIZERS)}, got {tokenizer!r}")
    if isinstance(templates, str) or not templates:
        raise ConfigError(
            f"templates must be a non-empty list of {list(QUERY_TYPES)}, got {templates!r}"
        )
    for t in templates:
        if t not in QUERY_TYPES:
            raise ConfigError(f"templates: unknown query type {t!r}; expected {list(QUERY_TYPES)}")
    max_model_len = _check_int("max_model_len", max_model_len, 12)
    min_rows = _check_int("min_rows", min_rows, 1, TABLE_ROWS)
    max_rows = _check_int("max_rows", max_rows, 1, TABLE_ROWS)
    if max_rows < min_rows:
        raise ConfigError(f"max_rows must be >= min_rows={min_rows}, got {max_rows!r}")
    if row_sampling not in ("code", "independent"):
        raise ConfigError(f"row_sampling must be 'code' or 'independent', got {row_sampling!r}")
    if output_lengths not in OUTPUT_LENGTHS:
        raise ConfigError(
            f"output_lengths must be one of {list(OUTPUT_LENGTHS)}, got {output_lengths!r}"
        )
    if output_mix is not None and output_lengths != "table4-drawn":
        raise ConfigError(
            f"output_mix applies to output_lengths='table4-drawn' only, got {output_lengths!r}"
        )

    rng = np.random.default_rng([seed, 0])
    names = DATASETS if dataset == "all" else (dataset,)
    picks = rng.integers(len(names), size=num_queries)
    sizes = rng.integers(min_rows, max_rows + 1, size=num_queries)
    types = rng.integers(len(templates), size=num_queries)
    tables: dict[str, _Table] = {}
    # Per request: (prompt ids, max_tokens, end-point draw, uniform length); outputs come after
    # the loop, once the drawn mix is known (``table4-drawn``).
    drafts: list[tuple[str, list[tuple[tuple[int, ...], int, float, int]]]] = []
    for j in range(num_queries):
        name = names[int(picks[j])]
        qtype = templates[int(types[j])]
        if name not in tables:
            tables[name] = _Table(name, dataset_stats(name), seed, tokenizer)
        table = tables[name]
        n = min(int(sizes[j]), table.num_rows)
        if row_sampling == "code":
            rows = table.permutation[:n]
        else:
            rows = rng.choice(table.num_rows, size=n, replace=False)
        segments, columns = template_segments(name, qtype, tokenizer)
        limit = MAX_TOKENS[qtype]
        ends = rng.random(n)
        uniform = rng.integers(1, limit + 1, size=n)
        query = []
        for row, end, out in zip(rows, ends, uniform, strict=True):
            ids: list[int] = list(segments[0])
            for col, seg in zip(columns, segments[1:], strict=True):
                ids.extend(table.cell(col, int(row)))
                ids.extend(seg)
            if len(ids) + limit > max_model_len - 10:
                continue
            query.append((tuple(ids), limit, float(end), int(out)))
        query.sort(key=lambda item: item[0])
        drafts.append((name, query))

    calibration = _output_calibration(drafts, output_lengths, output_mix)
    kept = [_with_outputs(query, calibration[name]) for name, query in drafts if query]
    gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=len(kept))
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if kept else np.zeros(0)
    jobs = []
    for j, (query, arrival) in enumerate(zip(kept, arrivals, strict=True)):
        job_id = f"rq{j}"
        specs = tuple(
            RequestSpec(
                request_id=f"{job_id}-{i}",
                arrival_time=0.0,
                prompt_len=len(ids),
                output_len=out,
                max_tokens=limit,
                prompt_token_ids=ids,
                job_id=job_id,
            )
            for i, (ids, out, limit) in enumerate(query)
        )
        jobs.append(Job(job_id, float(arrival), (Stage("rows", specs),), kind="relquery"))
    return jobs


def _output_calibration(
    drafts: list, mode: str, mix: Mapping[str, Sequence[int]] | None
) -> dict[str, float | None]:
    """Per dataset drawn: the signed end-point probability (``None``: ``max_tokens`` mode)."""
    names = sorted({name for name, query in drafts if query})
    if mode == "max_tokens":
        return dict.fromkeys(names)
    if mode == "table4":
        uniform_mix = [MAX_TOKENS[t] for t in QUERY_TYPES]
        return {name: table4_output_calibration(name, uniform_mix) for name in names}
    pool: dict[str, list[int]] = {}
    if mix is None:
        for name, query in drafts:
            pool.setdefault(name, []).extend(limit for _, limit, _, _ in query)
    else:
        unknown = sorted(set(mix) - set(DATASETS))
        if unknown:
            raise ConfigError(
                f"output_mix: unknown dataset(s) {unknown}; expected {list(DATASETS)}"
            )
        pool = {name: list(limits) for name, limits in mix.items()}
    missing = [name for name in names if name not in pool]
    if missing:
        raise ConfigError(f"output_mix has no requests for the drawn dataset(s) {missing}")
    return {name: table4_output_calibration(name, pool[name]) for name in names}


def _with_outputs(query: list, c: float | None) -> list[tuple[tuple[int, ...], int, int]]:
    """(prompt ids, true output, max_tokens) per request for end-point probability ``c``."""
    if c is None:
        return [(ids, limit, limit) for ids, limit, _, _ in query]
    return [
        (ids, (limit if c >= 0 else 1) if end < abs(c) else out, limit)
        for ids, limit, end, out in query
    ]
