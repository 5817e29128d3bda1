"""Trace files: the JSONL trace contract, plus the real traces shipped with the package.

The contract (DESIGN.md, "Trace file") is one JSON object per line::

    {"request_id": "r0", "arrival_time": 0.0, "prompt_len": 6758, "output_len": 500,
     "block_hashes": [0, 1, 2], "hash_block_size": 512, "priority": 0}

Fields (anything else is an error that names the line and the field):

==================  ========  ==========================================================
field               type      meaning and limits
==================  ========  ==========================================================
request_id          str       unique within the file
arrival_time        float     seconds from the start of the trace, finite, >= 0
prompt_token_ids    [int]     prompt token ids, each >= 0 (non-empty)
prompt_len          int       >= 1; given instead of, or agreeing with, prompt_token_ids
block_hashes        [int]     optional, only without prompt_token_ids: one prefix hash per
                              ``hash_block_size`` prompt tokens, at most
                              ``cdiv(prompt_len, hash_block_size)`` of them
hash_block_size     int       optional, >= 1, default 512 (Mooncake's block)
output_len          int       >= 1: tokens the request really generates
max_tokens          int       optional, >= output_len, default output_len
priority            int       optional, default 0 (lower is served first, as in vLLM)
weight              float     optional, finite, > 0, default 1.0
slo_ttft_s          float     optional, finite, > 0
slo_tpot_s          float     optional, finite, > 0
deadline_s          float     optional, finite (same clock as arrival_time)
cancel_time         float     optional, finite, >= arrival_time: when the client cancels
                              (disconnect or timeout, same clock as arrival_time); the
                              engine aborts the request, as vLLM does, at the first step
                              start at or after it unless it finished by then; not
                              with job_id or stage (a job cannot lose a request)
job_id, stage,      str       optional
client_id
parent_request_id   str       optional: the earlier request (turn) of the same trace this
                              one continues; see "Multi-turn conversations" below
==================  ========  ==========================================================

Every count and length (``prompt_len``, ``output_len``, ``max_tokens``, ``hash_block_size``) and
``priority`` are at most 2**31 - 1 in magnitude: the compiled core keeps them in C integers.
A JSON ``null`` in an optional field means "use the default". An object that repeats a key is an
error (``json`` alone would keep the last value). Blank lines at the end of the file
are ignored; a blank line followed by another request is an error.

Multi-turn conversations: a request with ``parent_request_id`` is the next turn of a chat. Its
prompt, as vLLM receives it, is the parent's prompt, then the parent's ``output_len`` generated
tokens, then the new turn's tokens. The line gives the new turn either as ``prompt_token_ids``,
**only the new turn's ids** (may be empty), or as ``prompt_len``, the **total** prompt length
(history plus new turn, at least the parent's ``prompt_len + output_len``; the new tokens then
get deterministic ids), not both, and no ``block_hashes``. The parent must be in the file and
arrive no later than the turn; parents may not form a cycle. A conversation's ids are built
when the file is read, so each of its requests holds at most ``MAX_CONVERSATION_LEN`` (2**24)
tokens, prompt plus output, checked before anything is built. The replay is open-loop: a turn's
history is the parent's whole ``output_len`` answer even if the parent is still decoding when the
turn arrives, or is aborted first by its ``cancel_time``; the turn then hits only what the parent
computed (for a cancelled parent, record the ``output_len`` its client received, as vLLM returns a
cancelled request's partial output). Generated tokens of a parent get
deterministic ids (``workloads.multiturn.token_ids``: a function of the request id, the
``seed`` of ``load_trace``, 0 by default, and the position, in ``[16, 32000)``), so the turn's
prompt holds exactly what the parent generated and hits the parent's cached blocks of prompt
*and answer*, as in vLLM. A parent given by length only gets deterministic prompt ids too, and
one given by ``block_hashes`` ids made from its hashes (it then shares blocks with the other
conversation requests, no longer with requests still described by hashes). ``load_trace``
returns every turn resolved: ``prompt_len`` the total, ``prompt_token_ids`` the whole prompt,
``output_token_ids`` set on parents; requests outside conversations are unchanged.

``load_trace`` also reads the shipped real traces by name (see ``list_traces``) and the raw
formats they come in (Azure 2023 CSV, Vidur's processed CSVs, Mooncake JSONL) by path.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import gzip
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

from llmsched_gym._gc import gc_paused
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.metrics._atomic import atomic_output
from llmsched_gym.workloads import catalog
from llmsched_gym.workloads._validate import MAX_INT, FieldChecker, is_int, show
from llmsched_gym.workloads.multiturn import resolve_turns

__all__ = [
    "CONTRACT_FIELDS",
    "TRACE_FORMATS",
    "load_trace",
    "request_from_dict",
    "request_to_dict",
    "save_trace",
]

CONTRACT_FIELDS: tuple[str, ...] = (
    "request_id",
    "arrival_time",
    "prompt_token_ids",
    "prompt_len",
    "block_hashes",
    "hash_block_size",
    "output_len",
    "max_tokens",
    "priority",
    "weight",
    "slo_ttft_s",
    "slo_tpot_s",
    "deadline_s",
    "cancel_time",
    "job_id",
    "stage",
    "client_id",
    "parent_request_id",
)
"""Every field of the trace contract, in the order ``save_trace`` writes them."""

_ALLOWED_FIELDS = frozenset(CONTRACT_FIELDS)
_DEFAULT_HASH_BLOCK_SIZE = 512

TRACE_FORMATS: tuple[str, ...] = ("contract", *catalog.RAW_FORMATS)
"""File formats ``load_trace(path, trace_format=...)`` reads: the JSONL contract and raw formats."""


def _plain_spec(record: dict) -> RequestSpec | None:
    """The spec of a record of exactly the four plain fields with valid values, else None.

    The common line of a length trace (``request_id``, float ``arrival_time``, ``prompt_len``,
    ``output_len``) checked in one expression: the same spec ``request_from_dict``'s full
    checks build (ids, lengths and arrival kept, every other field its default), about 5x
    faster. Anything else (more fields, an int arrival, a bad value) returns None and takes
    the full checks, which name the problem.
    """
    request_id = record.get("request_id")
    arrival = record.get("arrival_time")
    prompt = record.get("prompt_len")
    output = record.get("output_len")
    if (
        type(request_id) is str
        and request_id
        and type(arrival) is float
        and 0.0 <= arrival < math.inf
        and type(prompt) is int
        and 1 <= prompt <= MAX_INT
        and type(output) is int
        and 1 <= output <= MAX_INT
    ):
        return _build_plain_spec(request_id, arrival, prompt, output)
    return None


_PLAIN_LINE = re.compile(
    r'\{"request_id": "([^"\\\x00-\x1f]+)", '
    r'"arrival_time": ((?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)), '
    r'"prompt_len": ([1-9][0-9]{0,9}), "output_len": ([1-9][0-9]{0,9})\}\r?\n?'
)
"""A line exactly as ``save_trace`` writes the four plain fields: a JSON object of a string
without escapes, a float (a fraction or an exponent), and two positive integers."""


def _plain_spec_builder() -> Any:
    """A builder of ``RequestSpec(request_id, arrival, prompt, output, output)`` by its slots.

    It sets the frozen dataclass's slots directly, where the generated ``__init__`` calls
    ``object.__setattr__`` once per field (about 1.6x slower). Every field past the fifth gets
    its declared default, so a field added to ``RequestSpec`` is covered.
    """
    fields = dataclasses.fields(RequestSpec)
    if any(f.default is dataclasses.MISSING for f in fields[5:]) or any(
        f.default_factory is not dataclasses.MISSING for f in fields
    ):
        raise AssertionError("RequestSpec's fields past max_tokens need plain defaults")
    slot = [RequestSpec.__dict__[f.name].__set__ for f in fields]
    set_id, set_arrival, set_prompt, set_output, set_max = slot[:5]
    rest = [(setter, f.default) for setter, f in zip(slot[5:], fields[5:], strict=True)]
    new = object.__new__

    def build(request_id: str, arrival: float, prompt: int, output: int) -> RequestSpec:
        spec = new(RequestSpec)
        set_id(spec, request_id)
        set_arrival(spec, arrival)
        set_prompt(spec, prompt)
        set_output(spec, output)
        set_max(spec, output)
        for setter, value in rest:
            setter(spec, value)
        return spec

    return build


_build_plain_spec = _plain_spec_builder()


def _plain_line(line: str) -> RequestSpec | None:
    """The spec of a trace line written as ``_PLAIN_LINE``, without decoding JSON; else None.

    What ``json.loads`` then ``request_from_dict`` build from such a line (``float`` and ``int``
    parse the same digits as ``json``; the regex admits no repeated key, escape or sign), about
    3x faster; a value out of range returns None and takes the full checks, which name it.
    """
    m = _PLAIN_LINE.fullmatch(line)
    if m is None:
        return None
    request_id, arrival, prompt, output = m.groups()
    arrival = float(arrival)
    prompt, output = int(prompt), int(output)
    if arrival == math.inf or prompt > MAX_INT or output > MAX_INT:
        return None
    return _build_plain_spec(request_id, arrival, prompt, output)


def request_from_dict(record: Mapping[str, Any], where: str = "<request>") -> RequestSpec:
    """Validates one trace-contract record and builds its ``RequestSpec``.

    Args:
        record: The decoded JSON object of one trace line.
        where: Location prefix for error messages, e.g. ``"trace.jsonl:17"``.

    Returns:
        The immutable request. A turn (``parent_request_id`` set) is returned as its line gives
        it, not resolved: ``prompt_token_ids`` holds only the new turn's ids (``prompt_len`` is
        their number, possibly 0), or ``prompt_len`` is the total; ``load_trace`` resolves it
        with its parent (``workloads.multiturn.resolve_turns``).

    Raises:
        TraceError: For an unknown field, a missing required field, or a value of the wrong type
            or out of range; the message names ``where``, the field and the value.
    """
    if type(record) is dict and len(record) == 4:
        spec = _plain_spec(record)
        if spec is not None:
            return spec
    if not isinstance(record, Mapping):
        raise TraceError(f"{where}: a trace line must be a JSON object, got {show(record)}")
    unknown = [key for key in record if key not in _ALLOWED_FIELDS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), CONTRACT_FIELDS, n=1)
        hint = (
            f"; did you mean {close[0]!r}?"
            if close
            else f"; known fields: {', '.join(CONTRACT_FIELDS)}"
        )
        raise TraceError(f"{where}: unknown field {key!r}{hint}")
    rec = FieldChecker(record, where)

    request_id = rec.required("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise rec.fail("request_id", "a non-empty string", request_id)
    arrival_time = rec.finite_float("arrival_time", rec.required("arrival_time"), minimum=0.0)
    output_len = rec.int_at_least("output_len", 1, rec.required("output_len"))
    parent_request_id = record.get("parent_request_id")
    if parent_request_id is not None and (
        not isinstance(parent_request_id, str) or not parent_request_id
    ):
        raise rec.fail("parent_request_id", "a non-empty string (a request_id)", parent_request_id)

    token_ids_value = record.get("prompt_token_ids")
    prompt_len_value = record.get("prompt_len")
    prompt_token_ids: tuple[int, ...] | None = None
    if parent_request_id is not None and token_ids_value is not None:
        # A turn: the ids are the new turn's only (history comes from the parent).
        if prompt_len_value is not None:
            raise TraceError(
                f"{where}: a turn (parent_request_id {parent_request_id!r}) gives its new tokens "
                "as 'prompt_token_ids' or its total prompt length (history included) as "
                "'prompt_len', not both; drop one of them"
            )
        prompt_token_ids = rec.int_list("prompt_token_ids", token_ids_value, minimum=0)
        prompt_len = len(prompt_token_ids)
    elif token_ids_value is not None:
        prompt_token_ids = rec.int_list("prompt_token_ids", token_ids_value, minimum=0)
        if not prompt_token_ids:
            raise rec.fail("prompt_token_ids", "a non-empty list of ints >= 0", token_ids_value)
        prompt_len = len(prompt_token_ids)
        if prompt_len_value is not None and prompt_len_value != prompt_len:
            rec.int_at_least("prompt_len", 1, prompt_len_value)
            raise TraceError(
                f"{where}: field 'prompt_len' must equal len(prompt_token_ids) = {prompt_len}, "
                f"got {show(prompt_len_value)}; give one of the two, or make them agree"
            )
        if prompt_len_value is not None:
            rec.int_at_least("prompt_len", 1, prompt_len_value)  # rejects True == 1
    elif prompt_len_value is not None:
        prompt_len = rec.int_at_least("prompt_len", 1, prompt_len_value)
    else:
        raise TraceError(f"{where}: missing the prompt: give 'prompt_token_ids' or 'prompt_len'")

    hash_block_size_value = record.get("hash_block_size")
    hash_block_size = (
        _DEFAULT_HASH_BLOCK_SIZE
        if hash_block_size_value is None
        else rec.int_at_least("hash_block_size", 1, hash_block_size_value)
    )
    block_hashes: tuple[int, ...] | None = None
    if record.get("block_hashes") is not None:
        if prompt_token_ids is not None:
            raise TraceError(
                f"{where}: field 'block_hashes' is only allowed with 'prompt_len' and no "
                "'prompt_token_ids' (prefix sharing then follows the token ids); drop one of them"
            )
        block_hashes = rec.int_list("block_hashes", record["block_hashes"], minimum=None)
        max_blocks = -(-prompt_len // hash_block_size)
        if len(block_hashes) > max_blocks:
            raise TraceError(
                f"{where}: field 'block_hashes' must have at most cdiv(prompt_len={prompt_len}, "
                f"hash_block_size={hash_block_size}) = {max_blocks} entries, "
                f"got {len(block_hashes)}"
            )

    max_tokens_value = record.get("max_tokens")
    if max_tokens_value is None:
        max_tokens = output_len
    else:
        max_tokens = rec.int_at_least("max_tokens", 1, max_tokens_value)
        if max_tokens < output_len:
            raise TraceError(
                f"{where}: field 'max_tokens' must be >= output_len ({output_len}), got "
                f"{max_tokens}: a request cannot generate more tokens than its limit; raise "
                "max_tokens or lower output_len"
            )

    priority_value = record.get("priority")
    priority = 0 if priority_value is None else priority_value
    if not is_int(priority) or not -MAX_INT <= priority <= MAX_INT:
        raise rec.fail("priority", f"an int in [-{MAX_INT:,}, {MAX_INT:,}]", priority_value)
    weight_value = record.get("weight")
    weight = (
        1.0
        if weight_value is None
        else rec.finite_float("weight", weight_value, strictly_positive=True)
    )
    slo = {}
    for field in ("slo_ttft_s", "slo_tpot_s"):
        value = record.get(field)
        slo[field] = (
            None if value is None else rec.finite_float(field, value, strictly_positive=True)
        )
    deadline_value = record.get("deadline_s")
    deadline_s = None if deadline_value is None else rec.finite_float("deadline_s", deadline_value)
    cancel_value = record.get("cancel_time")
    cancel_time = None if cancel_value is None else rec.finite_float("cancel_time", cancel_value)
    if cancel_time is not None and cancel_time < arrival_time:
        raise rec.fail("cancel_time", f"a number >= arrival_time ({arrival_time!r})", cancel_value)
    job_id, stage = rec.optional_str("job_id"), rec.optional_str("stage")
    if cancel_time is not None and (job_id is not None or stage is not None):
        field, value = ("job_id", job_id) if job_id is not None else ("stage", stage)
        raise TraceError(
            f"{where}: field 'cancel_time' is not allowed on a request of a job ({field} "
            f"{value!r}): a job cannot lose a request (its latency would be undefined); "
            f"drop cancel_time, or {field}"
        )

    return RequestSpec(
        request_id=request_id,
        arrival_time=arrival_time,
        prompt_len=prompt_len,
        output_len=output_len,
        max_tokens=max_tokens,
        prompt_token_ids=prompt_token_ids,
        block_hashes=block_hashes,
        hash_block_size=hash_block_size,
        priority=priority,
        weight=weight,
        slo_ttft_s=slo["slo_ttft_s"],
        slo_tpot_s=slo["slo_tpot_s"],
        deadline_s=deadline_s,
        cancel_time=cancel_time,
        job_id=job_id,
        stage=stage,
        client_id=rec.optional_str("client_id"),
        parent_request_id=parent_request_id,
    )


def request_to_dict(spec: RequestSpec, history_len: int | None = None) -> dict[str, Any]:
    """Returns the trace-contract record of ``spec``, omitting fields at their defaults.

    The prompt is written as ``prompt_token_ids`` when the spec has them, else as ``prompt_len``
    (with ``block_hashes`` and ``hash_block_size`` when it has hashes), so that
    ``request_from_dict(request_to_dict(spec)) == spec``. ``output_token_ids`` are not part of
    the contract (``load_trace`` derives them) and are not written.

    Args:
        spec: The request.
        history_len: For a resolved turn (``parent_request_id`` set, the whole history in its
            prompt): how many of its prompt tokens are history (its parent's prompt plus
            output); the record then lists only the new turn's ids, as the contract wants.
            ``save_trace`` passes it. None writes the prompt as the spec holds it (a turn as
            ``request_from_dict`` returns it, not resolved).
    """
    record: dict[str, Any] = {
        "request_id": spec.request_id,
        "arrival_time": float(spec.arrival_time),
    }
    if spec.prompt_token_ids is not None:
        ids = spec.prompt_token_ids if history_len is None else spec.prompt_token_ids[history_len:]
        record["prompt_token_ids"] = [int(token) for token in ids]
    else:
        record["prompt_len"] = int(spec.prompt_len)
    if spec.block_hashes is not None:
        record["block_hashes"] = [int(h) for h in spec.block_hashes]
    if spec.block_hashes is not None or spec.hash_block_size != _DEFAULT_HASH_BLOCK_SIZE:
        record["hash_block_size"] = int(spec.hash_block_size)
    record["output_len"] = int(spec.output_len)
    if spec.max_tokens != spec.output_len:
        record["max_tokens"] = int(spec.max_tokens)
    if spec.priority != 0:
        record["priority"] = int(spec.priority)
    if spec.weight != 1.0:
        record["weight"] = float(spec.weight)
    for field in ("slo_ttft_s", "slo_tpot_s", "deadline_s", "cancel_time"):
        value = getattr(spec, field)
        if value is not None:
            record[field] = float(value)
    for field in ("job_id", "stage", "client_id", "parent_request_id"):
        value = getattr(spec, field)
        if value is not None:
            record[field] = value
    return record


def _read_contract(
    source: Any,
    label: str,
    limit: int | None,
    lines: dict[str, int] | None = None,
    default_max_tokens: int | None = None,
) -> list[RequestSpec]:
    """Reads a contract JSONL file (``source`` has ``.name`` and ``.open('rb')``).

    ``lines`` receives each request's line number, for the errors of ``resolve_turns``.
    ``default_max_tokens``: as ``load_trace``'s, for the lines that give no ``max_tokens``.
    """
    specs: list[RequestSpec] = []
    first_line: dict[str, int] = {} if lines is None else lines
    with catalog.open_text(source, label) as text:
        for lineno, where, record in catalog.json_lines(text, label, _plain_line):
            if where is None:  # a plain line: the four plain fields, no max_tokens
                spec = record
                given = False
            else:
                spec = request_from_dict(record, where)
                given = isinstance(record, Mapping) and record.get("max_tokens") is not None
            if default_max_tokens is not None and not given:
                spec = with_context_max_tokens(spec, default_max_tokens)
            if spec.request_id in first_line:
                where = where or f"{label}:{lineno}"
                raise TraceError(
                    f"{where}: field 'request_id' must be unique, got {spec.request_id!r} "
                    f"(first used on line {first_line[spec.request_id]})"
                )
            first_line[spec.request_id] = lineno
            specs.append(spec)
            if limit is not None and len(specs) >= limit:
                break
    return specs


def with_context_max_tokens(spec: RequestSpec, context_len: int) -> RequestSpec:
    """``spec`` with vLLM's default limit for a request that sets none: the context left.

    vLLM's OpenAI server gives a request without ``max_tokens`` ``max_model_len`` minus its
    prompt (at least 1). A trace that records no client limit must not stand in its true output
    length for it (the legacy rule): every policy sees ``max_tokens``, so that rule hands each
    one the answer. The output is cut at the limit, as vLLM ends such a request by length.
    """
    limit = max(1, context_len - spec.prompt_len)
    return dataclasses.replace(spec, max_tokens=limit, output_len=min(spec.output_len, limit))


def _with_arrivals(
    specs: list[RequestSpec], arrival_times_s: Sequence[float], label: str
) -> list[RequestSpec]:
    """Returns ``specs`` (file order) with their arrival times replaced, checking each value."""
    times = list(arrival_times_s)
    if len(times) != len(specs):
        raise TraceError(
            f"{label}: arrival_times_s must have one value per request ({len(specs)}), "
            f"got {len(times)} values"
        )
    replaced = []
    for index, (spec, time) in enumerate(zip(specs, times, strict=True)):
        try:
            value = float(time)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(time, bool) or not math.isfinite(value) or value < 0:
            raise TraceError(
                f"{label}: arrival_times_s[{index}] must be a finite number >= 0, got {show(time)}"
            )
        values = _SPEC_FIELDS(spec)
        replaced.append(RequestSpec(*values[:_ARRIVAL_INDEX], value, *values[_ARRIVAL_INDEX + 1 :]))
    return replaced


def load_trace(
    path_or_name: str | os.PathLike[str],
    *,
    trace_format: str | None = None,
    limit: int | None = None,
    arrival_times_s: Sequence[float] | None = None,
    seed: int = 0,
    default_max_tokens: int | None = None,
) -> list[RequestSpec]:
    """Loads a trace file or a shipped trace by name, validated and sorted by arrival time.

    Args:
        path_or_name: A shipped trace name (see ``list_traces``; names win over files of the same
            name) or the path of a trace file (``.gz`` is decompressed).
        trace_format: Format of a file given by path: ``"contract"`` (the JSONL trace contract,
            the default), ``"azure"`` (Azure LLM inference trace 2023 CSV), ``"vidur"`` (Vidur's
            processed CSVs: ``arrived_at`` optional, ``num_prefill_tokens``,
            ``num_decode_tokens``) or ``"mooncake"`` (Mooncake JSONL with ``hash_ids``). Must be
            None (or the trace's own format) for a shipped name.
        limit: Read only the first ``limit`` requests of the file (file order), e.g. for a quick
            run on a prefix of a long trace.
        arrival_times_s: Replaces the arrival times, one per request in file order (after
            ``limit``), e.g. Poisson arrivals for the token-count traces that have none.
        seed: Seed of the ids synthesised for multi-turn traces (generated tokens of parents,
            prompts given by length); see "Multi-turn conversations" in the module docstring.
        default_max_tokens: The limit of requests whose line gives no ``max_tokens``: None
            (legacy) uses the true output length, which every policy then reads; an int ``L``
            uses vLLM's server default, ``L`` minus the prompt (``with_context_max_tokens``),
            ``L`` being the served model's context length. Shipped traces record no limits.

    Returns:
        The requests sorted stably by ``arrival_time`` (ties keep file order), turns resolved.

    Raises:
        TraceError: For a malformed file; the message names the file, the 1-based line number,
            the field and the value, e.g. ``trace.jsonl:17: field 'output_len' must be an int
            >= 1, got -3``. Also for an unknown name or format, or a bad ``limit``, and for a
            bad turn (an unknown parent, one arriving later, a cycle, a prompt shorter than
            its history), naming the line and the request.
    """
    if limit is not None and (not is_int(limit) or limit < 1):
        raise TraceError(
            f"load_trace: limit must be an int >= 1 or None, got {show(limit)} (limit is the "
            "number of requests to read: --num-requests on the command line)"
        )
    if default_max_tokens is not None and (
        not is_int(default_max_tokens) or not 2 <= default_max_tokens <= MAX_INT
    ):
        raise TraceError(
            "load_trace: default_max_tokens must be None or a context length (an int in "
            f"[2, {MAX_INT:,}]), got {show(default_max_tokens)}"
        )
    if trace_format is not None and trace_format not in TRACE_FORMATS:
        raise TraceError(
            f"load_trace: trace_format must be one of {', '.join(TRACE_FORMATS)}, "
            f"got {trace_format!r}"
        )
    name = os.fspath(path_or_name)
    info = catalog.SHIPPED_TRACES.get(name)
    if info is not None:
        if trace_format not in (None, info.trace_format):
            raise TraceError(
                f"load_trace: shipped trace {name!r} is in format {info.trace_format!r}, got "
                f"trace_format={trace_format!r}; leave trace_format unset for a shipped name"
            )
        specs = list(_load_shipped(name, limit))
        if default_max_tokens is not None:
            specs = [with_context_max_tokens(s, default_max_tokens) for s in specs]
        label = info.file
    else:
        path = Path(name)
        if not path.is_file():
            close = difflib.get_close_matches(name, list(catalog.SHIPPED_TRACES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TraceError(
                f"load_trace: no shipped trace named {name!r} and no file at that path; {hint}"
                f"shipped traces: {', '.join(catalog.SHIPPED_TRACES)}"
            )
        label = name
        lines: dict[str, int] = {}
        with gc_paused():
            if (trace_format or "contract") == "contract":
                specs = _read_contract(path, name, limit, lines, default_max_tokens)
            else:
                specs = _read_file(trace_format, path, name, f"{path.name.split('.')[0]}-", limit)
                if default_max_tokens is not None:  # raw formats record no limits
                    specs = [with_context_max_tokens(s, default_max_tokens) for s in specs]
    if arrival_times_s is not None:
        specs = _with_arrivals(specs, arrival_times_s, label)
    if info is None and any(s.parent_request_id is not None for s in specs):
        where = {rid: f"{label}:{lineno}" for rid, lineno in lines.items()}
        try:
            specs = resolve_turns(specs, seed=seed, where=where)
        except TraceError as err:
            if limit is None or "not a request of the trace" not in str(err):
                raise
            raise TraceError(f"{err} (only the first limit={limit} requests were read)") from None
    specs.sort(key=_ARRIVAL)  # stable: ties keep file order
    return specs


_ARRIVAL = attrgetter("arrival_time")
_SPEC_FIELD_NAMES = tuple(field.name for field in dataclasses.fields(RequestSpec))
_SPEC_FIELDS = attrgetter(*_SPEC_FIELD_NAMES)
_ARRIVAL_INDEX = _SPEC_FIELD_NAMES.index("arrival_time")


def _read_file(
    trace_format: str, source: Any, label: str, id_prefix: str, limit: int | None
) -> list[RequestSpec]:
    """Reads a trace file of any supported format, in file order."""
    if trace_format == "contract":
        return _read_contract(source, label, limit)
    return catalog.read_raw(trace_format, source, label, id_prefix, limit)


@functools.lru_cache(maxsize=8)
def _load_shipped(name: str, limit: int | None) -> tuple[RequestSpec, ...]:
    """Reads a shipped trace once per process, in file order (the file and specs are immutable)."""
    info = catalog.SHIPPED_TRACES[name]
    source = catalog.shipped_resource(info)
    with gc_paused():
        return tuple(catalog.read_raw(info.trace_format, source, str(source), f"{name}-", limit))


def _holds_history(turn: RequestSpec, parent: RequestSpec) -> bool:
    """Whether a turn is resolved: its prompt starts with its parent's prompt (and is longer)."""
    ids, history = turn.prompt_token_ids, parent.prompt_token_ids
    return (
        ids is not None
        and history is not None
        and len(ids) >= parent.prompt_len + parent.output_len
        and ids[: parent.prompt_len] == history
    )


def save_trace(specs: Iterable[RequestSpec], path: str | os.PathLike[str]) -> Path:
    """Writes requests as a trace-contract JSONL file, atomically.

    Every request is checked with the loader's rules first, so ``load_trace`` reads back exactly
    ``specs`` (sorted by arrival time). The file is written to a temporary file in the same
    directory and moved into place with ``os.replace``: a reader never sees a half-written trace,
    and on error no file is left behind. A path ending in ``.gz`` is gzip-compressed
    (deterministically: no timestamp in the header).

    Turns are written as the contract wants them: a resolved turn (``load_trace``'s, its whole
    history in its prompt) whose parent is among ``specs`` lists only its new tokens; one whose
    parent is not is written as a request of its own (its whole prompt, no
    ``parent_request_id``). Generated ids (``output_token_ids``) are not written: ``load_trace``
    derives them again (with the same ``seed``).

    Args:
        specs: The requests, written in the given order.
        path: Destination file.

    Returns:
        The path written.

    Raises:
        TraceError: If a request breaks the contract or two share a ``request_id``; the message
            names its index in ``specs``.
    """
    target = Path(path)
    specs = list(specs)
    by_id = {s.request_id: s for s in specs}
    lines: list[str] = []
    seen: dict[str, int] = {}
    for index, spec in enumerate(specs):
        where = f"save_trace({target.name}): request {index}"
        if spec.prompt_token_ids is not None and len(spec.prompt_token_ids) != spec.prompt_len:
            raise TraceError(
                f"{where}: field 'prompt_len' must equal len(prompt_token_ids) = "
                f"{len(spec.prompt_token_ids)}, got {spec.prompt_len!r}"
            )
        history_len = None
        if spec.parent_request_id is not None:
            parent = by_id.get(spec.parent_request_id)
            if parent is None:
                spec = dataclasses.replace(spec, parent_request_id=None)  # noqa: PLW2901
            elif _holds_history(spec, parent):
                history_len = parent.prompt_len + parent.output_len
        record = request_to_dict(spec, history_len)
        request_from_dict(record, where)
        if spec.request_id in seen:
            raise TraceError(
                f"{where}: field 'request_id' must be unique, got {spec.request_id!r} "
                f"(also request {seen[spec.request_id]})"
            )
        seen[spec.request_id] = index
        lines.append(json.dumps(record, allow_nan=False))
    payload = ("\n".join(lines) + "\n" if lines else "").encode("utf-8")
    if target.name.endswith(".gz"):
        buffer = io.BytesIO()
        with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as gz:
            gz.write(payload)
        payload = buffer.getvalue()
    with atomic_output(target) as tmp_path:
        tmp_path.write_bytes(payload)
    return target
