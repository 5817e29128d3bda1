"""ServeGen client pools: per-client arrival rates and length distributions, and a generator.

ServeGen (Xiang et al., "ServeGen: Workload Characterization and Generation of Large Language
Model Serving in Production", arXiv 2505.09999; alibaba/ServeGen, Apache-2.0) publishes, for each
anonymised client of a production model, one row per 10-minute window (request rate, the
inter-arrival CV, and a Gamma or Weibull fit of the inter-arrival times) and per 6-hour window the
empirical distributions of input and output lengths. Its finding is that a realistic workload is
a *mix of clients*, each bursty in its own way with its own lengths, not one Poisson process.

Three models are shipped (``SERVEGEN_MODELS``): ``m-small`` (language, 14 days, 43 clients of which
38 have length data), ``deepseek-r1`` (reasoning, 1 day, 73 clients) and ``mm-image``
(multimodal, 1 day, 35 clients). The data are re-encoded losslessly (see
``scripts/make_servegen_data.py``).

>>> from llmsched_gym.workloads import generate_servegen
>>> specs = generate_servegen("deepseek-r1", start_s=36_000, duration_s=600, seed=0)
>>> specs[0].client_id                                              # doctest: +SKIP
'deepseek-r1/35'

How ``generate_servegen`` builds requests (our generator, not a port of ServeGen's):

* **Arrivals.** For every client and every 10-minute window it is active in, arrivals form a
  renewal process that starts at the window start, with gaps from the window's fitted family
  (Gamma or Weibull) keeping the fitted *shape* (hence the window's burstiness) and a scale set so
  that the mean gap is ``1 / (rate * rate_scale)``; arrivals past the window's end are dropped.
  The expected number of requests therefore equals the published rate times the window.
* **Lengths.** Drawn independently per request from the client's length distribution of the
  6-hour window holding the arrival (the latest one starting at or before the 10-minute window;
  the earliest later one if none does). Language and reasoning: ``prompt_len = input_tokens``;
  multimodal: ``prompt_len = text_tokens`` plus one ``image/audio/video_tokens`` draw per item of
  the drawn ``*_count``. ``output_len = output_tokens`` (reasoning models: reasoning included).
  Lengths of 0 (present in the data) become 1, since a request has at least one prompt token and
  generates at least one token.
* **Determinism.** Each client draws from its own stream ``numpy.random.default_rng([seed,
  client])``, so a client's requests do not change when other clients are selected or dropped.

``iter_servegen`` yields the same kind of stream lazily, an hour (``chunk_s``) at a time, for
runs too long to hold as a list (``run_cluster`` streams it): a day of ``m-small`` at 12
requests/s is about a million requests. Each 10-minute window of each client draws from its own
stream ``numpy.random.default_rng([seed, client, window_start_s])``, so the requests do not
depend on ``chunk_s``; they are not ``generate_servegen``'s (whose windows share one stream per
client), but they follow the same rules.
"""

from __future__ import annotations

import bisect
import csv
import functools
import gzip
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.workloads._validate import is_int, is_real, show

__all__ = [
    "SERVEGEN_MODELS",
    "ServeGenClient",
    "ServeGenPool",
    "ServeGenWindow",
    "generate_servegen",
    "iter_servegen",
    "load_servegen",
]

SERVEGEN_MODELS: dict[str, str] = {
    "m-small": "language-m-small.json.gz",
    "deepseek-r1": "reason-deepseek-r1.json.gz",
    "mm-image": "multimodal-mm-image.json.gz",
}
"""Shipped ServeGen models and their files under ``llmsched_gym/data/traces/servegen/``."""

_PATTERNS = ("Gamma", "Weibull")
_MEDIA = ("image", "audio", "video")


@dataclass(frozen=True)
class ServeGenWindow:
    """One client's arrivals in one 10-minute window (a row of ServeGen's trace CSV)."""

    start_s: int
    """Window start, seconds from the start of the ServeGen trace."""
    rate_per_s: float
    """Mean request rate of the client in this window."""
    cv: float
    """Coefficient of variation of the observed inter-arrival times."""
    pattern: str
    """Fitted inter-arrival family: ``"Gamma"`` or ``"Weibull"``."""
    shape: float
    """Fitted shape (Gamma ``a`` or Weibull ``c``); kept by the generator."""
    scale: float
    """Fitted scale in seconds; the generator rescales it to match ``rate_per_s``."""


@dataclass(frozen=True)
class ServeGenClient:
    """One ServeGen client: its active windows and its length distributions."""

    client_id: int
    """ServeGen's chunk number."""
    windows: tuple[ServeGenWindow, ...]
    """Windows with a non-zero rate, in time order."""
    lengths: Mapping[int, Mapping[str, tuple[np.ndarray, np.ndarray]]]
    """Length distributions by 6-hour window start: field -> (values, cumulative probability)."""

    @property
    def has_lengths(self) -> bool:
        """Whether the client has length data (5 ``m-small`` clients have none)."""
        return bool(self.lengths)

    def lengths_at(self, start_s: float) -> Mapping[str, tuple[np.ndarray, np.ndarray]]:
        """The length distributions used for a window starting at ``start_s``."""
        starts = sorted(self.lengths)
        earlier = [ts for ts in starts if ts <= start_s]
        return self.lengths[earlier[-1] if earlier else starts[0]]


@dataclass(frozen=True)
class ServeGenPool:
    """All clients of one ServeGen model."""

    model: str
    """Model name, a key of ``SERVEGEN_MODELS``."""
    category: str
    """``language``, ``reason`` or ``multimodal``."""
    window_s: int
    """Length of a rate window (600 s)."""
    horizon_s: int
    """End of the last window: the trace covers ``[0, horizon_s)``."""
    clients: Mapping[int, ServeGenClient]
    """Clients by id, ascending."""
    source: str
    """Repository, commit and folder of the original data."""

    def expected_requests(
        self,
        start_s: float = 0.0,
        duration_s: float | None = None,
        clients: Iterable[int] | None = None,
    ) -> float:
        """Expected number of requests in ``[start_s, start_s + duration_s)`` at rate scale 1.

        Only clients with length data count (the others generate nothing).
        """
        end = self.horizon_s if duration_s is None else start_s + duration_s
        total = 0.0
        for client in self._selected(clients):
            for w in client.windows:
                overlap = min(end, w.start_s + self.window_s) - max(start_s, w.start_s)
                if overlap > 0:
                    total += w.rate_per_s * overlap
        return total

    def _selected(self, clients: Iterable[int] | None) -> list[ServeGenClient]:
        if clients is None:
            return [c for c in self.clients.values() if c.has_lengths]
        chosen = []
        for cid in clients:
            client = self.clients.get(cid) if is_int(cid) else None
            if client is None:
                raise ValueError(
                    f"clients: no client {cid!r} in ServeGen model {self.model!r}; clients: "
                    f"{min(self.clients)}..{max(self.clients)}"
                )
            if not client.has_lengths:
                raise ValueError(
                    f"clients: client {cid} of ServeGen model {self.model!r} has no length data"
                )
            chosen.append(client)
        return chosen


def load_servegen(model: str) -> ServeGenPool:
    """Loads a shipped ServeGen model's client pool (cached per process).

    Args:
        model: A key of ``SERVEGEN_MODELS``.

    Raises:
        TraceError: For an unknown model, or a malformed file; the message names the file, the
            client, the line (trace CSV) or window (lengths) and the field.
    """
    if model not in SERVEGEN_MODELS:
        raise TraceError(
            f"no ServeGen model named {model!r}; shipped models: {', '.join(SERVEGEN_MODELS)}"
        )
    return _load_pool(model)


@functools.lru_cache(maxsize=4)
def _load_pool(model: str) -> ServeGenPool:
    name = SERVEGEN_MODELS[model]
    resource = resources.files("llmsched_gym").joinpath("data", "traces", "servegen", name)
    with resource.open("rb") as raw:
        data = json.loads(gzip.decompress(raw.read()))
    return parse_pool(data, name, model)


def parse_pool(data: Mapping[str, Any], label: str, model: str) -> ServeGenPool:
    """Builds a pool from the decoded shipped JSON, validating every row and distribution.

    Args:
        data: The decoded ``<category>-<model>.json.gz`` content.
        label: File name used in error messages.
        model: Model name recorded in the pool.
    """
    clients: dict[int, ServeGenClient] = {}
    window_s = horizon_s = 0
    for entry in data["clients"]:
        cid = entry["id"]
        where = f"{label}: client {cid}: chunk-{cid}-trace.csv"
        windows, step, horizon = _parse_trace_csv(entry["trace_csv"], where)
        if window_s and step != window_s:
            raise TraceError(f"{where}: windows of {step} s, other clients use {window_s} s")
        window_s, horizon_s = step, max(horizon_s, horizon)
        lengths = _parse_lengths(entry.get("dataset") or {}, f"{label}: client {cid}")
        clients[cid] = ServeGenClient(cid, windows, lengths)
    return ServeGenPool(
        model=model,
        category=data["category"],
        window_s=window_s,
        horizon_s=horizon_s,
        clients=dict(sorted(clients.items())),
        source=data["source"],
    )


def _parse_trace_csv(text: str, where: str) -> tuple[tuple[ServeGenWindow, ...], int, int]:
    """Parses ``timestamp,rate,cv,pattern,shape,scale`` rows; returns (windows, step, horizon)."""
    windows: list[ServeGenWindow] = []
    starts: list[int] = []
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        at = f"{where}:{lineno}"
        if len(row) != 6:
            raise TraceError(
                f"{at}: row must have 6 fields (timestamp, rate, cv, pattern, shape, scale), "
                f"got {len(row)}: {show(row)}"
            )
        ts_cell, rate_cell, cv_cell, pattern, shape_cell, scale_cell = row
        try:
            ts = int(ts_cell)
        except ValueError:
            ts = -1
        if ts < 0 or (starts and ts <= starts[-1]):
            raise TraceError(
                f"{at}: field 'timestamp' must be an int >= 0 larger than the previous row's, "
                f"got {ts_cell!r}"
            )
        starts.append(ts)
        rate = _cell_float(at, "rate", rate_cell, positive=False)
        if pattern == "":
            if rate != 0:
                raise TraceError(f"{at}: field 'pattern' is empty but 'rate' is {rate_cell!r}")
            continue
        if pattern not in _PATTERNS:
            raise TraceError(
                f"{at}: field 'pattern' must be Gamma, Weibull or empty, got {pattern!r}"
            )
        windows.append(
            ServeGenWindow(
                start_s=ts,
                rate_per_s=rate,
                cv=_cell_float(at, "cv", cv_cell, positive=False),
                pattern=pattern,
                shape=_cell_float(at, "shape", shape_cell, positive=True),
                scale=_cell_float(at, "scale", scale_cell, positive=True),
            )
        )
    if len(starts) < 2:
        raise TraceError(f"{where}: needs at least 2 rows to know the window length")
    steps = {b - a for a, b in zip(starts, starts[1:], strict=False)}
    if len(steps) != 1:
        raise TraceError(f"{where}: timestamps must be evenly spaced, got steps {sorted(steps)}")
    step = steps.pop()
    return tuple(w for w in windows if w.rate_per_s > 0), step, starts[-1] + step


def _cell_float(at: str, field: str, cell: str, *, positive: bool) -> float:
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise TraceError(f"{at}: field {field!r} must be a finite number {bound}, got {cell!r}")
    return value


def _parse_lengths(
    dataset: Mapping[str, Any], where: str
) -> dict[int, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Decodes the per-window pmfs; windows with an empty field are skipped (as ServeGen does)."""
    lengths: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for ts_text, fields in dataset.items():
        at = f"{where}: lengths window {ts_text}"
        try:
            ts = int(ts_text)
        except ValueError:
            raise TraceError(f"{at}: window start must be an int, got {ts_text!r}") from None
        if any(pmf is None for pmf in fields.values()):
            continue
        lengths[ts] = {
            field: _decode_pmf(pmf, f"{at}: field {field!r}") for field, pmf in fields.items()
        }
    return dict(sorted(lengths.items()))


def _decode_pmf(pmf: Mapping[str, Any], at: str) -> tuple[np.ndarray, np.ndarray]:
    """Returns (values, cumulative probabilities) of one encoded pmf, checking it."""
    if "dv" in pmf:
        deltas = pmf["dv"]
        if not all(is_int(d) for d in deltas) or any(d <= 0 for d in deltas[1:]) or deltas[0] < 0:
            raise TraceError(f"{at}: values must be increasing ints >= 0, got {show(deltas)}")
        values = np.cumsum(np.asarray(deltas, dtype=np.int64)).astype(np.float64)
    else:
        raw = pmf["v"]
        if not all(is_real(v) and math.isfinite(v) and v >= 0 for v in raw):
            raise TraceError(f"{at}: values must be finite numbers >= 0, got {show(raw)}")
        values = np.asarray(raw, dtype=np.float64)
    if "c" in pmf:
        counts, total = pmf["c"], pmf["n"]
        if not all(is_int(c) and c > 0 for c in counts) or sum(counts) != total:
            raise TraceError(
                f"{at}: counts must be ints > 0 summing to n={total}, got {show(counts)}"
            )
        probs = np.asarray(counts, dtype=np.float64) / float(total)
    else:
        probs = np.asarray(pmf["p"], dtype=np.float64)
        if not (np.all(np.isfinite(probs)) and np.all(probs > 0)):
            raise TraceError(f"{at}: probabilities must be finite and > 0, got {show(pmf['p'])}")
    if len(probs) != len(values) or not len(values):
        raise TraceError(f"{at}: {len(values)} values but {len(probs)} probabilities")
    cdf = np.cumsum(probs)
    if abs(cdf[-1] - 1.0) > 1e-6:
        raise TraceError(f"{at}: probabilities must sum to 1, got {cdf[-1]!r}")
    return values, cdf


def _draw(dist: tuple[np.ndarray, np.ndarray], rng: np.random.Generator, size: int) -> np.ndarray:
    """Inverse-CDF draws from a (values, cdf) pmf."""
    values, cdf = dist
    index = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
    return values[np.minimum(index, len(values) - 1)]


def _gaps(window: ServeGenWindow, rate: float, rng: np.random.Generator, size: int) -> np.ndarray:
    """Inter-arrival gaps with the window's fitted shape and mean ``1 / rate``."""
    if window.pattern == "Gamma":
        return rng.gamma(window.shape, 1.0 / (rate * window.shape), size)
    try:
        mean_unit = math.gamma(1.0 + 1.0 / window.shape)
    except OverflowError:
        raise TraceError(
            f"ServeGen window at {window.start_s} s: Weibull shape {window.shape!r} is too small"
        ) from None
    return rng.weibull(window.shape, size) / (rate * mean_unit)


def _check_number(name: str, value: Any, *, minimum: float, strict: bool) -> float:
    if (
        not is_real(value)
        or not math.isfinite(value)
        or value < minimum
        or (strict and value == minimum)
    ):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def _window_requests(
    pool: ServeGenPool,
    client: ServeGenClient,
    window: ServeGenWindow,
    scale: float,
    rng: np.random.Generator,
    start: float,
    end: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """One client's requests in one window, within ``[start, end)``: (arrivals, prompts, outputs).

    The renewal process starts at the window start and is cut at its end (module docstring);
    lengths are drawn after the arrivals, from the same ``rng``. None when no request falls in.
    """
    w_end = window.start_s + pool.window_s
    rate = window.rate_per_s * scale
    expected_n = rate * pool.window_s
    times: list[np.ndarray] = []
    clock = float(window.start_s)
    while clock < w_end:
        gaps = _gaps(window, rate, rng, int(expected_n * 1.25) + 16)
        arrivals = clock + np.cumsum(gaps)
        times.append(arrivals)
        clock = float(arrivals[-1])
    arrivals = np.concatenate(times)
    arrivals = arrivals[(arrivals < w_end) & (arrivals >= start) & (arrivals < end)]
    if not len(arrivals):
        return None
    prompts, outputs = _draw_lengths(client.lengths_at(window.start_s), rng, len(arrivals))
    return arrivals, prompts, outputs


def _rate_scale(
    pool: ServeGenPool,
    selected: list[ServeGenClient],
    start: float,
    duration: float,
    rate_scale: float | None,
    target_rate_per_s: float | None,
) -> float:
    """The factor on every client's rate: ``rate_scale``, or the one reaching the target rate."""
    if rate_scale is not None and target_rate_per_s is not None:
        raise ValueError("give at most one of rate_scale and target_rate_per_s")
    if rate_scale is not None:
        return _check_number("rate_scale", rate_scale, minimum=0.0, strict=True)
    if target_rate_per_s is None:
        return 1.0
    target = _check_number("target_rate_per_s", target_rate_per_s, minimum=0.0, strict=True)
    expected = pool.expected_requests(start, duration, [c.client_id for c in selected])
    if expected <= 0:
        raise ValueError(
            f"target_rate_per_s: the selected clients send no requests in "
            f"[{start:g}, {start + duration:g}) s, so no scaling reaches {target!r}"
        )
    return target * duration / expected


def generate_servegen(
    model: str | ServeGenPool,
    *,
    start_s: float = 0.0,
    duration_s: float = 3600.0,
    rate_scale: float | None = None,
    target_rate_per_s: float | None = None,
    clients: Iterable[int] | None = None,
    seed: int = 0,
) -> list[RequestSpec]:
    """Generates a request stream from ServeGen's per-client rates and length distributions.

    Args:
        model: A key of ``SERVEGEN_MODELS`` or a loaded pool.
        start_s: Start of the span within the ServeGen trace (seconds; e.g. 72000 = 20:00 on
            the first day). Arrival times are shifted so ``start_s`` becomes 0.
        duration_s: Length of the span (seconds, > 0).
        rate_scale: Multiplies every client's rate (default 1: the published rates).
        target_rate_per_s: Alternatively, the mean aggregate rate wanted over the span; the
            rates are scaled by one constant to reach it in expectation (as ProServe rescales
            traces). Give at most one of ``rate_scale`` and ``target_rate_per_s``.
        clients: Client ids to include (default: every client with length data).
        seed: Non-negative int; the same seed gives the same requests.

    Returns:
        Requests sorted by arrival time (ties by client id), ids ``servegen-<model>-<i>``,
        ``client_id`` ``"<model>/<client>"``.

    Raises:
        ValueError: For an argument out of range; the message names it and its value.
        TraceError: For an unknown model.
    """
    pool, start, duration, seed, selected = _check_args(model, start_s, duration_s, seed, clients)
    scale = _rate_scale(pool, selected, start, duration, rate_scale, target_rate_per_s)
    end = start + duration
    rows: list[tuple[float, int, int, int, int]] = []
    for client in selected:
        rng = np.random.default_rng([seed, client.client_id])
        for window in client.windows:
            w_end = window.start_s + pool.window_s
            if w_end <= start or window.start_s >= end:
                continue
            drawn = _window_requests(pool, client, window, scale, rng, start, end)
            if drawn is None:
                continue
            arrivals, prompts, outputs = drawn
            rows.extend(
                zip(
                    (arrivals - start).tolist(),
                    [client.client_id] * len(arrivals),
                    range(len(rows), len(rows) + len(arrivals)),
                    prompts.tolist(),
                    outputs.tolist(),
                    strict=True,
                )
            )
    rows.sort()
    prefix = f"servegen-{pool.model}-"
    return [
        RequestSpec(f"{prefix}{i}", t, prompt, output, output, client_id=f"{pool.model}/{cid}")
        for i, (t, cid, _, prompt, output) in enumerate(rows)
    ]


def _check_args(
    model: str | ServeGenPool, start_s: Any, duration_s: Any, seed: Any, clients: Any
) -> tuple[ServeGenPool, float, float, int, list[ServeGenClient]]:
    """The pool, checked start and duration, seed and selected clients of a generator call."""
    pool = model if isinstance(model, ServeGenPool) else load_servegen(model)
    start = _check_number("start_s", start_s, minimum=0.0, strict=False)
    duration = _check_number("duration_s", duration_s, minimum=0.0, strict=True)
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return pool, start, duration, seed, pool._selected(clients)


def iter_servegen(
    model: str | ServeGenPool,
    *,
    start_s: float = 0.0,
    duration_s: float = 86_400.0,
    rate_scale: float | None = None,
    target_rate_per_s: float | None = None,
    clients: Iterable[int] | None = None,
    seed: int = 0,
    chunk_s: float = 3600.0,
) -> Iterator[RequestSpec]:
    """Yields a ServeGen request stream lazily, ``chunk_s`` of arrivals at a time.

    For spans too long to hold as a list (``run_cluster`` streams any iterator): only one
    chunk's requests exist at once. The arguments are ``generate_servegen``'s (checked when
    called, not when iterated) and so are the rules, but every 10-minute window of every client
    draws from its own stream (``default_rng([seed, client, window_start_s])``, lengths after
    arrivals), so the requests are deterministic under ``seed`` and the same for every
    ``chunk_s``, though not ``generate_servegen``'s.

    Args:
        model: A key of ``SERVEGEN_MODELS`` or a loaded pool.
        start_s: Start of the span within the ServeGen trace (seconds; shifted to 0).
        duration_s: Length of the span (seconds, > 0; default a day).
        rate_scale: Multiplies every client's rate (default 1).
        target_rate_per_s: Alternatively, the mean aggregate rate wanted over the whole span.
        clients: Client ids to include (default: every client with length data).
        seed: Non-negative int; the same seed gives the same requests.
        chunk_s: Seconds of arrivals generated at a time (> 0; memory, not the requests).

    Returns:
        An iterator of requests sorted by arrival time (ties by client id), ids
        ``servegen-<model>-<i>`` numbered in that order, ``client_id`` ``"<model>/<client>"``.

    Raises:
        ValueError: For an argument out of range; the message names it and its value.
        TraceError: For an unknown model.
    """
    pool, start, duration, seed, selected = _check_args(model, start_s, duration_s, seed, clients)
    scale = _rate_scale(pool, selected, start, duration, rate_scale, target_rate_per_s)
    chunk = _check_number("chunk_s", chunk_s, minimum=0.0, strict=True)
    return _servegen_chunks(pool, selected, scale, seed, start, start + duration, chunk)


def _servegen_chunks(
    pool: ServeGenPool,
    selected: list[ServeGenClient],
    scale: float,
    seed: int,
    start: float,
    end: float,
    chunk: float,
) -> Iterator[RequestSpec]:
    """``iter_servegen``'s generator: the span cut into chunks, each sorted and yielded."""
    starts = {c.client_id: [w.start_s for w in c.windows] for c in selected}
    prefix = f"servegen-{pool.model}-"
    number = 0
    k = 0
    while True:
        lo = start + k * chunk
        if lo >= end:
            return
        hi = min(start + (k + 1) * chunk, end)
        k += 1
        rows: list[tuple[float, int, int, int, int]] = []
        for client in selected:
            cid = client.client_id
            # Windows overlapping [lo, hi): starting after lo - window_s and before hi.
            first = bisect.bisect_right(starts[cid], lo - pool.window_s)
            last = bisect.bisect_left(starts[cid], hi)
            for window in client.windows[first:last]:
                rng = np.random.default_rng([seed, cid, window.start_s])
                drawn = _window_requests(pool, client, window, scale, rng, start, end)
                if drawn is None:
                    continue
                arrivals, prompts, outputs = drawn  # the whole window's, cut to [lo, hi) here
                inside = (arrivals >= lo) & (arrivals < hi)
                n = int(inside.sum())
                rows.extend(
                    zip(
                        (arrivals[inside] - start).tolist(),
                        [cid] * n,
                        range(len(rows), len(rows) + n),
                        prompts[inside].tolist(),
                        outputs[inside].tolist(),
                        strict=True,
                    )
                )
        rows.sort()
        for t, cid, _, prompt, output in rows:
            yield RequestSpec(
                f"{prefix}{number}", t, prompt, output, output, client_id=f"{pool.model}/{cid}"
            )
            number += 1


def _draw_lengths(
    dists: Mapping[str, tuple[np.ndarray, np.ndarray]], rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draws (prompt, output) lengths for ``size`` requests, each at least 1."""
    if "text_tokens" in dists:
        prompts = _draw(dists["text_tokens"], rng, size)
        for media in _MEDIA:
            counts = _draw(dists[f"{media}_count"], rng, size).astype(np.int64)
            total = int(counts.sum())
            if total:
                tokens = _draw(dists[f"{media}_tokens"], rng, total)
                owner = np.repeat(np.arange(size), counts)
                prompts = prompts + np.bincount(owner, weights=tokens, minlength=size)
    else:
        prompts = _draw(dists["input_tokens"], rng, size)
    outputs = _draw(dists["output_tokens"], rng, size)
    return (
        np.maximum(prompts, 1).astype(np.int64),
        np.maximum(outputs, 1).astype(np.int64),
    )
