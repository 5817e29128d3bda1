"""The real traces shipped with the package, and readers for the raw formats they come in.

Each shipped trace is the unmodified source file, gzip-compressed, under
``llmsched_gym/data/traces/`` beside its licence (provenance in that folder's README). Prompts are
given as lengths: every prompt is unique (no prefix sharing) except in the Mooncake traces, whose
``hash_ids`` of 512-token blocks become ``block_hashes``.

Raw formats (``load_trace(path, trace_format=...)``):

* ``azure``: ``TIMESTAMP,ContextTokens,GeneratedTokens`` (Azure LLM inference trace 2023);
  arrival times are seconds after the earliest timestamp, exact to the file's 100 ns.
* ``vidur``: ``[arrived_at,]num_prefill_tokens,num_decode_tokens[,...]`` (Vidur's and
  Sarathi-Serve's processed traces); extra columns are ignored; without ``arrived_at`` every
  request arrives at 0 s.
* ``mooncake``: JSONL with ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import gzip
import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any, TextIO

from llmsched_gym import _json
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.workloads._validate import MAX_INT, FieldChecker, is_real, show

__all__ = ["RAW_FORMATS", "SHIPPED_TRACES", "TraceInfo", "list_traces", "trace_info"]

RAW_FORMATS: tuple[str, ...] = ("azure", "vidur", "mooncake")
"""Raw (non-contract) trace formats the readers understand."""

_MOONCAKE_BLOCK_SIZE = 512
"""Tokens per Mooncake ``hash_ids`` entry (Mooncake FAST'25 trace README)."""


@dataclass(frozen=True)
class TraceInfo:
    """A real trace shipped with the package."""

    name: str
    """Name accepted by ``load_trace``; request ids are ``f"{name}-{row}"`` (0-based)."""
    description: str
    """One line: what the trace is and what it contains."""
    file: str
    """Path of the shipped file under ``llmsched_gym/data/traces/``."""
    trace_format: str
    """One of ``RAW_FORMATS``."""
    num_requests: int
    """Number of requests (data rows) in the file."""
    source: str
    """Source repository, commit and path of the original file."""
    license: str
    """Licence of the data (the licence text is shipped beside the file)."""


_AZURE_SOURCE = "Azure/AzurePublicDataset@b469a113cedca53ddc3bdea71a143dc4b7d8700c:data/"
_VIDUR_SOURCE = "microsoft/vidur@7d47513363ec447a741ac5e47241580b47724fbf:data/processed_traces/"
_SARATHI_SOURCE = (
    "microsoft/sarathi-serve@72339db5b120614033b317880ad3a05a5e4c9415:data/processed_traces/"
)
_MOONCAKE_SOURCE = (
    "kvcache-ai/Mooncake@3b5a594133958449a1feaf1c9e0fc1b553e34a28:FAST25-release/traces/"
)

SHIPPED_TRACES: dict[str, TraceInfo] = {
    info.name: info
    for info in (
        TraceInfo(
            "splitwise-conv",
            "Azure 2023 conversation trace as Vidur processed it: 1 h of arrivals, prompt and "
            "output lengths",
            "vidur/splitwise_conv.csv.gz",
            "vidur",
            19_366,
            _VIDUR_SOURCE + "splitwise_conv.csv",
            "MIT (Vidur); data derived from the Azure trace, CC-BY-4.0",
        ),
        TraceInfo(
            "splitwise-code",
            "Azure 2023 coding trace as Vidur processed it: 1 h of arrivals, long prompts, short "
            "outputs",
            "vidur/splitwise_code.csv.gz",
            "vidur",
            8_819,
            _VIDUR_SOURCE + "splitwise_code.csv",
            "MIT (Vidur); data derived from the Azure trace, CC-BY-4.0",
        ),
        TraceInfo(
            "azure-conv-2023",
            "Azure LLM inference trace 2023, conversation: timestamps (relative to the first), "
            "context and generated tokens",
            "azure2023/AzureLLMInferenceTrace_conv.csv.gz",
            "azure",
            19_366,
            _AZURE_SOURCE + "AzureLLMInferenceTrace_conv.csv",
            "CC-BY-4.0",
        ),
        TraceInfo(
            "azure-code-2023",
            "Azure LLM inference trace 2023, code: timestamps (relative to the first), context "
            "and generated tokens",
            "azure2023/AzureLLMInferenceTrace_code.csv.gz",
            "azure",
            8_819,
            _AZURE_SOURCE + "AzureLLMInferenceTrace_code.csv",
            "CC-BY-4.0",
        ),
        TraceInfo(
            "mooncake-conversation",
            "Mooncake FAST'25 conversation trace: 1 h of arrivals, lengths and 512-token prefix "
            "block hashes (real prefix sharing)",
            "mooncake/conversation_trace.jsonl.gz",
            "mooncake",
            12_031,
            _MOONCAKE_SOURCE + "conversation_trace.jsonl",
            "Apache-2.0",
        ),
        TraceInfo(
            "mooncake-synthetic",
            "Mooncake FAST'25 synthetic trace: Poisson arrivals over public multi-turn datasets, "
            "lengths and 512-token prefix block hashes",
            "mooncake/synthetic_trace.jsonl.gz",
            "mooncake",
            3_993,
            _MOONCAKE_SOURCE + "synthetic_trace.jsonl",
            "Apache-2.0",
        ),
        TraceInfo(
            "sharegpt",
            "ShareGPT conversations (Llama-2 tokenizer, <= 8k tokens, Sarathi-Serve): prompt and "
            "output lengths, no timestamps (all arrive at 0 s)",
            "sarathi_serve/sharegpt_8k_filtered_stats_llama2_tokenizer.csv.gz",
            "vidur",
            30_731,
            _SARATHI_SOURCE + "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
            "Apache-2.0 (Sarathi-Serve); token counts only",
        ),
        TraceInfo(
            "arxiv-summarization",
            "arXiv summarization (Llama-2 tokenizer, <= 4k tokens, Vidur): long prompts, prompt "
            "and output lengths, no timestamps (all arrive at 0 s)",
            "vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv.gz",
            "vidur",
            28_257,
            _VIDUR_SOURCE + "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
            "MIT (Vidur); token counts only",
        ),
    )
}
"""The shipped traces by name."""


def list_traces() -> dict[str, str]:
    """Returns the shipped trace names, each with a one-line description."""
    return {
        name: f"{info.description} ({info.num_requests:,} requests; {info.license})"
        for name, info in SHIPPED_TRACES.items()
    }


def trace_info(name: str) -> TraceInfo:
    """Returns the full record (file, format, row count, source, licence) of a shipped trace.

    Raises:
        TraceError: If no shipped trace has that name.
    """
    try:
        return SHIPPED_TRACES[name]
    except KeyError:
        raise TraceError(
            f"no shipped trace named {name!r}; shipped traces: {', '.join(SHIPPED_TRACES)}"
        ) from None


def shipped_resource(info: TraceInfo) -> Any:
    """Returns the package resource (a ``Traversable``) holding a shipped trace's file."""
    resource = resources.files("llmsched_gym").joinpath("data").joinpath("traces")
    for part in info.file.split("/"):
        resource = resource.joinpath(part)
    return resource


@contextlib.contextmanager
def open_text(source: Any, label: str) -> Iterator[TextIO]:
    """Opens a trace file (a ``Path`` or package resource) as UTF-8 text, ungzipping ``.gz``.

    Line endings are returned untranslated (``newline=""``), as the csv module needs; a UTF-8
    byte-order mark is skipped.
    """
    try:
        raw = source.open("rb")
    except OSError as err:
        raise TraceError(f"{label}: cannot open the trace file ({err})") from None
    with raw:
        binary = gzip.GzipFile(fileobj=raw, mode="rb") if source.name.endswith(".gz") else raw
        with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as text:
            try:
                yield text
            except (OSError, EOFError) as err:  # a corrupt or truncated gzip stream
                raise TraceError(f"{label}: cannot read the trace file ({err})") from None
            except UnicodeDecodeError as err:
                raise TraceError(
                    f"{label}: not UTF-8 text ({err.reason}); is it a trace file?"
                ) from None


def read_raw(
    trace_format: str, source: Any, label: str, id_prefix: str, limit: int | None
) -> list[RequestSpec]:
    """Reads a raw-format trace into requests in file order.

    Args:
        trace_format: One of ``RAW_FORMATS``.
        source: A ``Path`` or package resource.
        label: File name used in error messages (``label:line: ...``).
        id_prefix: Request ids are ``f"{id_prefix}{row}"`` with ``row`` the 0-based data row.
        limit: Read at most this many requests.

    Returns:
        The requests in file order.
    """
    reader = _READERS[trace_format]
    with open_text(source, label) as text:
        return reader(text, label, id_prefix, limit)


# --- CSV formats -------------------------------------------------------------------------------
#
# Both CSV readers parse the whole file with the csv module and convert columns with C-level
# ``map``; only when that fast path finds something wrong do they re-read the file row by row to
# name the line, field and value (``_explain_csv``).


@dataclass(frozen=True)
class _CsvField:
    """How one CSV column is checked, for error messages."""

    column: str
    kind: str
    """``"int"`` (int >= 1), ``"seconds"`` (finite float >= 0) or ``"timestamp"``."""


def _csv_table(
    content: str, label: str, required: tuple[str, ...]
) -> tuple[dict[str, int], list[list[str]]]:
    """Parses CSV text into (column index by name, data rows); trailing blank lines are dropped."""
    try:
        rows = list(csv.reader(io.StringIO(content, newline="")))
    except csv.Error as err:
        raise TraceError(f"{label}: malformed CSV ({err})") from None
    if not rows:
        raise TraceError(f"{label}:1: empty file; expected a CSV header with {', '.join(required)}")
    header = rows[0]
    columns = {name.strip(): index for index, name in enumerate(header)}
    missing = [name for name in required if name not in columns]
    if missing:
        raise TraceError(
            f"{label}:1: CSV header must have column(s) {', '.join(map(repr, missing))}, "
            f"got {show(header)}"
        )
    data = rows[1:]
    while data and not data[-1]:
        data.pop()
    return columns, data


def _explain_csv(
    content: str, label: str, columns: dict[str, int], fields: tuple[_CsvField, ...]
) -> TraceError:
    """Re-reads CSV text row by row and returns the error for the first bad row."""
    reader = csv.reader(io.StringIO(content, newline=""))
    next(reader)
    width = len(columns)
    blank_line = 0
    day_cache: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        if not row:
            blank_line = blank_line or line
            continue
        if blank_line:
            return TraceError(
                f"{label}:{blank_line}: empty line in the middle of the trace; remove it"
            )
        where = f"{label}:{line}"
        if len(row) != width:
            return TraceError(
                f"{where}: row has {len(row)} fields, the header has {width}: {show(row)}"
            )
        for field in fields:
            cell = row[columns[field.column]]
            if field.kind == "timestamp":
                try:
                    _timestamp_ns(cell, day_cache)
                except ValueError:
                    return TraceError(
                        f"{where}: field {field.column!r} must be "
                        f"'YYYY-MM-DD HH:MM:SS[.fraction]', got {cell!r}"
                    )
                continue
            try:
                value = int(cell) if field.kind == "int" else float(cell)
            except ValueError:
                value = math.nan
            if field.kind == "int" and not value >= 1:
                return TraceError(
                    f"{where}: field {field.column!r} must be an int >= 1, got {show(cell)}"
                )
            if field.kind == "int" and value > MAX_INT:
                return TraceError(
                    f"{where}: field {field.column!r} must be an int <= {MAX_INT:,} (2**31 - 1), "
                    f"got {show(cell)}"
                )
            if field.kind == "seconds" and not (math.isfinite(value) and value >= 0):
                return TraceError(
                    f"{where}: field {field.column!r} must be a finite number >= 0, got {cell!r}"
                )
    return TraceError(f"{label}: malformed CSV")  # pragma: no cover - the fast path failed


def _positive_ints(column: tuple[str, ...] | list[str]) -> list[int]:
    """Converts a column to ints and checks each is >= 1 (ValueError otherwise)."""
    values = list(map(int, column))
    if values and (min(values) < 1 or max(values) > MAX_INT):
        raise ValueError("value out of [1, MAX_INT]")
    return values


def _make_specs(
    id_prefix: str, arrivals: list[float], prompt_lens: list[int], output_lens: list[int]
) -> list[RequestSpec]:
    """Builds length-only requests (``max_tokens = output_len``), ids numbered by row."""
    ids = [f"{id_prefix}{row}" for row in range(len(prompt_lens))]
    return list(map(RequestSpec, ids, arrivals, prompt_lens, output_lens, output_lens))


def _read_vidur(text: TextIO, label: str, id_prefix: str, limit: int | None) -> list[RequestSpec]:
    """Reads Vidur's processed traces (``[arrived_at,]num_prefill_tokens,num_decode_tokens``)."""
    content = text.read()
    columns, rows = _csv_table(content, label, ("num_prefill_tokens", "num_decode_tokens"))
    rows = rows[:limit]
    fields = (_CsvField("num_prefill_tokens", "int"), _CsvField("num_decode_tokens", "int"))
    if "arrived_at" in columns:
        fields = (_CsvField("arrived_at", "seconds"), *fields)
    try:
        if [] in rows or any(len(row) != len(columns) for row in rows):
            raise ValueError("ragged or blank row")
        prompt_lens = _positive_ints([row[columns["num_prefill_tokens"]] for row in rows])
        output_lens = _positive_ints([row[columns["num_decode_tokens"]] for row in rows])
        if "arrived_at" in columns:
            arrivals = list(map(float, [row[columns["arrived_at"]] for row in rows]))
            if not (all(map(math.isfinite, arrivals)) and all(map((0.0).__le__, arrivals))):
                raise ValueError("arrival out of range")
        else:
            arrivals = [0.0] * len(rows)
    except ValueError:
        raise _explain_csv(content, label, columns, fields) from None
    return _make_specs(id_prefix, arrivals, prompt_lens, output_lens)


def _timestamp_ns(cell: str, day_cache: dict[str, int]) -> int:
    """Parses ``YYYY-MM-DD HH:MM:SS[.fffffff]`` to integer nanoseconds (exact, no float)."""
    date, sep, clock = cell.strip().partition(" ")
    if not sep:
        date, sep, clock = cell.strip().partition("T")
    day = day_cache.get(date)
    if day is None:
        day = dt.date.fromisoformat(date).toordinal()
        day_cache[date] = day
    hours, minutes, seconds = clock.split(":")
    whole, _, fraction = seconds.partition(".")
    if len(fraction) > 9 or (fraction and not fraction.isdigit()) or not whole.isdigit():
        raise ValueError(cell)
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    return (((day * 24 + int(hours)) * 60 + int(minutes)) * 60 + int(whole)) * 10**9 + nanos


def _read_azure(text: TextIO, label: str, id_prefix: str, limit: int | None) -> list[RequestSpec]:
    """Reads the Azure LLM inference trace 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Arrival times are seconds after the earliest timestamp, computed in integer nanoseconds so
    the file's 100 ns resolution survives.
    """
    content = text.read()
    required = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    columns, rows = _csv_table(content, label, required)
    rows = rows[:limit]
    fields = (
        _CsvField("TIMESTAMP", "timestamp"),
        _CsvField("ContextTokens", "int"),
        _CsvField("GeneratedTokens", "int"),
    )
    day_cache: dict[str, int] = {}
    try:
        if [] in rows or any(len(row) != len(columns) for row in rows):
            raise ValueError("ragged or blank row")
        i_time = columns["TIMESTAMP"]
        stamps = [_timestamp_ns(row[i_time], day_cache) for row in rows]
        prompt_lens = _positive_ints([row[columns["ContextTokens"]] for row in rows])
        output_lens = _positive_ints([row[columns["GeneratedTokens"]] for row in rows])
    except ValueError:
        raise _explain_csv(content, label, columns, fields) from None
    start_ns = min(stamps, default=0)
    arrivals = [(stamp - start_ns) / 10**9 for stamp in stamps]
    return _make_specs(id_prefix, arrivals, prompt_lens, output_lens)


# --- Mooncake JSONL ------------------------------------------------------------------------------

_MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def json_lines(
    text: TextIO, label: str, fast: Callable[[str], Any] | None = None
) -> Iterator[tuple[int, str | None, Any]]:
    """Yields (line number, ``file:line`` label, parsed value) for each line of a JSONL file.

    Trailing blank lines are allowed; a blank line followed by another record is an error, as
    is a line that is not valid JSON. ``fast(line)``, if given, is tried first: a value other
    than None is yielded as the line's, with the label None (the caller builds it if it needs
    it), and the line is not decoded.
    """
    blank_line = 0
    for lineno, line in enumerate(text, start=1):
        if fast is not None and not blank_line:
            value = fast(line)
            if value is not None:
                yield lineno, None, value
                continue
        if not line.strip():
            blank_line = blank_line or lineno
            continue
        where = f"{label}:{lineno}"
        if blank_line:
            raise TraceError(
                f"{label}:{blank_line}: empty line in the middle of the trace (one JSON "
                f"object per line; the next request is on line {lineno}); remove it"
            )
        try:
            record = _json.loads(line)
        except json.JSONDecodeError as err:
            # Some of json's messages end in "at" ("Invalid control character at").
            reason = err.msg.removesuffix(" at")
            raise TraceError(
                f"{where}: invalid JSON ({reason} at column {err.colno}): {show(line.strip())}"
            ) from None
        except _json.DuplicateKeyError as dup:
            raise TraceError(
                f"{where}: field {show(dup.key)} appears twice in the JSON object; keep one of them"
            ) from None
        yield lineno, where, record


def _read_mooncake(
    text: TextIO, label: str, id_prefix: str, limit: int | None
) -> list[RequestSpec]:
    """Reads a Mooncake trace: ``timestamp`` (ms), lengths and 512-token prefix ``hash_ids``."""
    specs: list[RequestSpec] = []
    for _, where, record in json_lines(text, label):
        if not isinstance(record, dict):
            raise TraceError(f"{where}: a Mooncake line must be a JSON object, got {show(record)}")
        unknown = [key for key in record if key not in _MOONCAKE_FIELDS]
        if unknown:
            raise TraceError(
                f"{where}: unknown field {unknown[0]!r} in a Mooncake trace; known fields: "
                f"{', '.join(_MOONCAKE_FIELDS)}"
            )
        check = FieldChecker(record, where)
        timestamp = check.required("timestamp")
        if not is_real(timestamp) or not math.isfinite(timestamp) or timestamp < 0:
            raise check.fail("timestamp", "a finite number of milliseconds >= 0", timestamp)
        prompt_len = check.int_at_least("input_length", 1, check.required("input_length"))
        output_len = check.int_at_least("output_length", 1, check.required("output_length"))
        hash_ids = check.int_list("hash_ids", check.required("hash_ids"), minimum=None)
        max_blocks = -(-prompt_len // _MOONCAKE_BLOCK_SIZE)
        if len(hash_ids) > max_blocks:
            raise TraceError(
                f"{where}: field 'hash_ids' must have at most cdiv(input_length={prompt_len}, "
                f"{_MOONCAKE_BLOCK_SIZE}) = {max_blocks} entries, got {len(hash_ids)}"
            )
        specs.append(
            RequestSpec(
                f"{id_prefix}{len(specs)}",
                timestamp / 1000,
                prompt_len,
                output_len,
                output_len,
                None,
                hash_ids,
                _MOONCAKE_BLOCK_SIZE,
            )
        )
        if limit is not None and len(specs) >= limit:
            break
    return specs


_READERS: dict[str, Callable[[TextIO, str, str, int | None], list[RequestSpec]]] = {
    "azure": _read_azure,
    "vidur": _read_vidur,
    "mooncake": _read_mooncake,
}
