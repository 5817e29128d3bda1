"""The JSONL trace contract: validation errors name file, line, field and value; round trips."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import TraceError
from llmsched_gym.workloads import load_trace, request_from_dict, request_to_dict, save_trace

GOOD = {"request_id": "r0", "arrival_time": 0.5, "prompt_len": 10, "output_len": 3}


def write_lines(tmp_path: Path, lines: list[str], name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def records_file(tmp_path: Path, records: list[dict]) -> Path:
    return write_lines(tmp_path, [json.dumps(r) for r in records])


def test_minimal_trace_loads_with_defaults(tmp_path: Path) -> None:
    path = records_file(tmp_path, [GOOD])
    (spec,) = load_trace(path)
    assert spec == RequestSpec(
        request_id="r0", arrival_time=0.5, prompt_len=10, output_len=3, max_tokens=3
    )
    assert spec.hash_block_size == 512 and spec.priority == 0 and spec.weight == 1.0


def test_all_fields(tmp_path: Path) -> None:
    record = {
        "request_id": "a",
        "arrival_time": 1,
        "prompt_len": 1025,
        "block_hashes": [7, -3, 9],
        "hash_block_size": 512,
        "output_len": 4,
        "max_tokens": 16,
        "priority": -2,
        "weight": 2,
        "slo_ttft_s": 0.5,
        "slo_tpot_s": 0.05,
        "deadline_s": 30.0,
        "job_id": "job1",
        "stage": "schema",
        "client_id": "c9",
    }
    (spec,) = load_trace(records_file(tmp_path, [record]))
    assert spec.arrival_time == 1.0 and isinstance(spec.arrival_time, float)
    assert spec.block_hashes == (7, -3, 9) and spec.max_tokens == 16 and spec.priority == -2
    assert spec.weight == 2.0 and spec.deadline_s == 30.0 and spec.job_id == "job1"
    assert (spec.stage, spec.client_id, spec.slo_ttft_s, spec.slo_tpot_s) == (
        "schema",
        "c9",
        0.5,
        0.05,
    )


def test_prompt_token_ids(tmp_path: Path) -> None:
    records = [
        {"request_id": "a", "arrival_time": 0, "prompt_token_ids": [1, 2, 0], "output_len": 1},
        {
            "request_id": "b",
            "arrival_time": 0,
            "prompt_token_ids": [5, 6],
            "prompt_len": 2,
            "output_len": 2,
        },
    ]
    a, b = load_trace(records_file(tmp_path, records))
    assert a.prompt_token_ids == (1, 2, 0) and a.prompt_len == 3
    assert b.prompt_token_ids == (5, 6) and b.prompt_len == 2


def test_null_optional_fields_mean_default(tmp_path: Path) -> None:
    record = dict(GOOD, priority=None, max_tokens=None, slo_ttft_s=None, job_id=None)
    (spec,) = load_trace(records_file(tmp_path, [record]))
    assert spec.priority == 0 and spec.max_tokens == 3 and spec.slo_ttft_s is None


def test_sorted_stably_by_arrival(tmp_path: Path) -> None:
    records = [
        dict(GOOD, request_id="late", arrival_time=2.0),
        dict(GOOD, request_id="tie-first", arrival_time=1.0),
        dict(GOOD, request_id="early", arrival_time=0.0),
        dict(GOOD, request_id="tie-second", arrival_time=1.0),
    ]
    ids = [s.request_id for s in load_trace(records_file(tmp_path, records))]
    assert ids == ["early", "tie-first", "tie-second", "late"]


def test_trailing_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n  \n")
    assert len(load_trace(path)) == 1


def test_empty_file_is_an_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    assert load_trace(path) == []


# (record overrides, field named in the message, value shown in the message)
BAD_VALUES = [
    ({"output_len": -3}, "output_len", "-3"),
    ({"output_len": 0}, "output_len", "0"),
    ({"output_len": 2.0}, "output_len", "2.0"),
    ({"output_len": True}, "output_len", "True"),
    ({"output_len": "5"}, "output_len", "'5'"),
    ({"prompt_len": 0}, "prompt_len", "0"),
    ({"prompt_len": -1}, "prompt_len", "-1"),
    ({"prompt_len": False}, "prompt_len", "False"),
    ({"arrival_time": -0.1}, "arrival_time", "-0.1"),
    ({"arrival_time": "0"}, "arrival_time", "'0'"),
    ({"arrival_time": True}, "arrival_time", "True"),
    ({"arrival_time": float("nan")}, "arrival_time", "nan"),
    ({"arrival_time": float("inf")}, "arrival_time", "inf"),
    ({"request_id": 7}, "request_id", "7"),
    ({"request_id": ""}, "request_id", "''"),
    ({"max_tokens": 0}, "max_tokens", "0"),
    ({"max_tokens": 2}, "max_tokens", "2"),  # below output_len
    ({"priority": 1.5}, "priority", "1.5"),
    ({"priority": True}, "priority", "True"),
    ({"weight": 0}, "weight", "0"),
    ({"weight": -1.0}, "weight", "-1.0"),
    ({"weight": float("nan")}, "weight", "nan"),
    ({"slo_ttft_s": 0.0}, "slo_ttft_s", "0.0"),
    ({"slo_tpot_s": "fast"}, "slo_tpot_s", "'fast'"),
    ({"deadline_s": float("inf")}, "deadline_s", "inf"),
    ({"job_id": 3}, "job_id", "3"),
    ({"stage": ["a"]}, "stage", "['a']"),
    ({"client_id": False}, "client_id", "False"),
    ({"hash_block_size": 0}, "hash_block_size", "0"),
    ({"block_hashes": [1, "x"]}, "block_hashes", "'x'"),
    ({"block_hashes": [1, True]}, "block_hashes", "True"),
    ({"block_hashes": 5}, "block_hashes", "5"),
    ({"block_hashes": [1], "hash_block_size": 4, "prompt_len": 4}, None, None),  # fine
    ({"block_hashes": [1, 2], "hash_block_size": 4, "prompt_len": 4}, "block_hashes", "2"),
]


@pytest.mark.parametrize(("overrides", "field", "shown"), BAD_VALUES)
def test_bad_value_names_file_line_field_and_value(
    tmp_path: Path, overrides: dict, field: str | None, shown: str | None
) -> None:
    bad = {**GOOD, "request_id": "bad", **overrides}
    path = write_lines(tmp_path, [json.dumps(GOOD), json.dumps(bad)])
    if field is None:
        assert len(load_trace(path)) == 2
        return
    with pytest.raises(TraceError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: "), message
    assert f"'{field}'" in message, message
    assert shown in message, message


def test_error_message_format_matches_contract(tmp_path: Path) -> None:
    lines = [json.dumps(dict(GOOD, request_id=f"r{i}")) for i in range(16)]
    lines.append(json.dumps(dict(GOOD, request_id="r16", output_len=-3)))
    path = write_lines(tmp_path, lines)
    with pytest.raises(
        TraceError, match=r"trace\.jsonl:17: field 'output_len' must be an int >= 1, got -3$"
    ):
        load_trace(path)


def test_nan_literal_in_json(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path, ['{"request_id": "a", "arrival_time": NaN, "prompt_len": 1, "output_len": 1}']
    )
    with pytest.raises(
        TraceError, match=r":1: field 'arrival_time' must be a finite number >= 0, got nan"
    ):
        load_trace(path)


def test_unknown_field_suggests_the_right_one(tmp_path: Path) -> None:
    path = records_file(tmp_path, [dict(GOOD, ouptut_len=3)])
    with pytest.raises(
        TraceError, match=r":1: unknown field 'ouptut_len'; did you mean 'output_len'\?"
    ):
        load_trace(path)


def test_unknown_field_without_a_close_match_lists_fields(tmp_path: Path) -> None:
    path = records_file(tmp_path, [dict(GOOD, zzz=1)])
    with pytest.raises(TraceError, match=r"unknown field 'zzz'; known fields: request_id, "):
        load_trace(path)


@pytest.mark.parametrize("field", ["request_id", "arrival_time", "output_len"])
def test_missing_required_field(tmp_path: Path, field: str) -> None:
    record = {k: v for k, v in GOOD.items() if k != field}
    path = records_file(tmp_path, [record])
    with pytest.raises(TraceError, match=rf":1: required field '{field}' is missing"):
        load_trace(path)


def test_null_required_field(tmp_path: Path) -> None:
    path = records_file(tmp_path, [dict(GOOD, output_len=None)])
    with pytest.raises(TraceError, match=r":1: required field 'output_len' is null"):
        load_trace(path)


def test_missing_prompt(tmp_path: Path) -> None:
    record = {k: v for k, v in GOOD.items() if k != "prompt_len"}
    with pytest.raises(
        TraceError, match=r":1: missing the prompt: give 'prompt_token_ids' or 'prompt_len'"
    ):
        load_trace(records_file(tmp_path, [record]))


def test_prompt_ids_and_len_disagree(tmp_path: Path) -> None:
    record = dict(GOOD, prompt_token_ids=[1, 2, 3], prompt_len=4)
    with pytest.raises(
        TraceError, match=r":1: field 'prompt_len' must equal len\(prompt_token_ids\) = 3, got 4"
    ):
        load_trace(records_file(tmp_path, [record]))


def test_prompt_ids_bad_token(tmp_path: Path) -> None:
    record = {"request_id": "a", "arrival_time": 0, "prompt_token_ids": [1, -2], "output_len": 1}
    with pytest.raises(
        TraceError,
        match=r":1: field 'prompt_token_ids' must be a list of ints >= 0, got -2 at index 1",
    ):
        load_trace(records_file(tmp_path, [record]))


def test_prompt_ids_empty(tmp_path: Path) -> None:
    record = {"request_id": "a", "arrival_time": 0, "prompt_token_ids": [], "output_len": 1}
    with pytest.raises(TraceError, match=r"field 'prompt_token_ids' must be a non-empty list"):
        load_trace(records_file(tmp_path, [record]))


def test_block_hashes_with_token_ids(tmp_path: Path) -> None:
    record = {
        "request_id": "a",
        "arrival_time": 0,
        "prompt_token_ids": [1, 2],
        "block_hashes": [1],
        "output_len": 1,
    }
    with pytest.raises(
        TraceError, match=r":1: field 'block_hashes' is only allowed with 'prompt_len'"
    ):
        load_trace(records_file(tmp_path, [record]))


def test_block_hashes_too_long(tmp_path: Path) -> None:
    record = dict(GOOD, prompt_len=1025, block_hashes=[1, 2, 3, 4])
    with pytest.raises(
        TraceError,
        match=r"field 'block_hashes' must have at most "
        r"cdiv\(prompt_len=1025, hash_block_size=512\) = 3 entries, got 4",
    ):
        load_trace(records_file(tmp_path, [record]))


def test_duplicate_request_id_names_both_lines(tmp_path: Path) -> None:
    records = [GOOD, dict(GOOD, request_id="other"), GOOD]
    with pytest.raises(
        TraceError,
        match=r":3: field 'request_id' must be unique, got 'r0' \(first used on line 1\)",
    ):
        load_trace(records_file(tmp_path, records))


def test_empty_line_in_the_middle(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [json.dumps(GOOD), "", json.dumps(dict(GOOD, request_id="b"))])
    with pytest.raises(TraceError, match=r"trace\.jsonl:2: empty line in the middle of the trace"):
        load_trace(path)


def test_invalid_json(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [json.dumps(GOOD), '{"request_id": "b", "arrival_time": 0,'])
    with pytest.raises(TraceError, match=r"trace\.jsonl:2: invalid JSON \("):
        load_trace(path)


def test_line_not_an_object(tmp_path: Path) -> None:
    path = write_lines(tmp_path, ["[1, 2]"])
    with pytest.raises(TraceError, match=r":1: a trace line must be a JSON object, got \[1, 2\]"):
        load_trace(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(TraceError, match="not UTF-8 text"):
        load_trace(path)


def test_unknown_name_or_missing_file() -> None:
    with pytest.raises(
        TraceError, match=r"no shipped trace named 'sharegtp'.*did you mean 'sharegpt'"
    ):
        load_trace("sharegtp")


def test_bad_limit_and_format(tmp_path: Path) -> None:
    path = records_file(tmp_path, [GOOD])
    with pytest.raises(TraceError, match="limit must be an int >= 1"):
        load_trace(path, limit=0)
    with pytest.raises(TraceError, match="trace_format must be one of contract, azure"):
        load_trace(path, trace_format="csv")


def test_limit_reads_a_prefix(tmp_path: Path) -> None:
    records = [dict(GOOD, request_id=f"r{i}", arrival_time=float(10 - i)) for i in range(10)]
    specs = load_trace(records_file(tmp_path, records), limit=3)
    assert [s.request_id for s in specs] == ["r2", "r1", "r0"]


def test_arrival_override_in_file_order(tmp_path: Path) -> None:
    records = [dict(GOOD, request_id=f"r{i}", arrival_time=float(i)) for i in range(3)]
    path = records_file(tmp_path, records)
    specs = load_trace(path, arrival_times_s=[5.0, 1.0, 3.0])
    assert [(s.request_id, s.arrival_time) for s in specs] == [
        ("r1", 1.0),
        ("r2", 3.0),
        ("r0", 5.0),
    ]
    with pytest.raises(
        TraceError, match=r"arrival_times_s must have one value per request \(3\), got 2"
    ):
        load_trace(path, arrival_times_s=[1.0, 2.0])
    with pytest.raises(
        TraceError, match=r"arrival_times_s\[1\] must be a finite number >= 0, got -1"
    ):
        load_trace(path, arrival_times_s=[1.0, -1, 2.0])


def test_gzip_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps(GOOD) + "\n").encode()))
    assert load_trace(path)[0].request_id == "r0"


# --- save_trace ---------------------------------------------------------------------------------


def sample_specs() -> list[RequestSpec]:
    return [
        RequestSpec("b", 1.25, 3, 2, 2, prompt_token_ids=(4, 5, 6)),
        RequestSpec("a", 0.1 + 0.2, 1500, 7, 9, block_hashes=(11, 12, 13), priority=3),
        RequestSpec(
            "c",
            1.25,
            40,
            1,
            1,
            block_hashes=(1, 2),
            hash_block_size=16,
            weight=0.5,
            slo_ttft_s=0.2,
            slo_tpot_s=0.02,
            deadline_s=-1.5,
            job_id="j",
            stage="s",
            client_id="c",
        ),
        RequestSpec("d", 2.0, 8, 3, 3, hash_block_size=4),
    ]


@pytest.mark.parametrize("name", ["out.jsonl", "out.jsonl.gz"])
def test_save_load_round_trip(tmp_path: Path, name: str) -> None:
    specs = sample_specs()
    path = save_trace(specs, tmp_path / name)
    assert load_trace(path) == sorted(specs, key=lambda s: s.arrival_time)
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temp file left


def test_save_is_deterministic_and_omits_defaults(tmp_path: Path) -> None:
    a = save_trace(sample_specs(), tmp_path / "a.jsonl.gz").read_bytes()
    b = save_trace(sample_specs(), tmp_path / "b.jsonl.gz").read_bytes()
    assert a == b
    first = json.loads(gzip.decompress(a).decode().splitlines()[0])
    assert first == {
        "request_id": "b",
        "arrival_time": 1.25,
        "prompt_token_ids": [4, 5, 6],
        "output_len": 2,
    }


def test_save_rejects_invalid_spec_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "bad.jsonl"
    bad = [RequestSpec("a", 0.0, 10, 0, 0)]
    with pytest.raises(
        TraceError, match=r"request 0: field 'output_len' must be an int >= 1, got 0"
    ):
        save_trace(bad, target)
    dup = [RequestSpec("a", 0.0, 10, 1, 1), RequestSpec("a", 1.0, 10, 1, 1)]
    with pytest.raises(TraceError, match=r"request 1: field 'request_id' must be unique"):
        save_trace(dup, target)
    mismatch = [RequestSpec("a", 0.0, 5, 1, 1, prompt_token_ids=(1, 2))]
    with pytest.raises(TraceError, match=r"field 'prompt_len' must equal len\(prompt_token_ids\)"):
        save_trace(mismatch, target)
    assert list(tmp_path.iterdir()) == []


def test_save_replaces_existing_file_atomically(tmp_path: Path, monkeypatch) -> None:
    target = save_trace(sample_specs(), tmp_path / "t.jsonl")
    before = target.read_bytes()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_trace(sample_specs()[:1], target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_saved_file_has_normal_permissions(tmp_path: Path) -> None:
    target = save_trace(sample_specs(), tmp_path / "t.jsonl")
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


spec_strategy = st.builds(
    lambda rid, t, plen, out, extra, prio, ids: RequestSpec(
        request_id=rid,
        arrival_time=t,
        prompt_len=len(ids) if ids else plen,
        output_len=out,
        max_tokens=out + extra,
        prompt_token_ids=tuple(ids) if ids else None,
        priority=prio,
    ),
    st.text(min_size=1, max_size=8),
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.integers(1, 10_000),
    st.integers(1, 4096),
    st.integers(0, 10),
    st.integers(-5, 5),
    st.one_of(st.none(), st.lists(st.integers(0, 2**31), min_size=1, max_size=20)),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(spec_strategy, max_size=10, unique_by=lambda s: s.request_id))
def test_round_trip_property(specs: list[RequestSpec]) -> None:
    for spec in specs:
        assert request_from_dict(request_to_dict(spec)) == spec


@pytest.mark.parametrize(
    "record",
    [
        {"request_id": "a", "arrival_time": 1.5, "prompt_len": 3, "output_len": 2},
        {"request_id": "a", "arrival_time": 0.0, "prompt_len": 2**31 - 1, "output_len": 1},
        {"request_id": "a", "arrival_time": 2, "prompt_len": 3, "output_len": 2},  # int arrival
        {"request_id": "a", "arrival_time": 1.0, "prompt_len": True, "output_len": 2},
        {"request_id": "a", "arrival_time": 1.0, "prompt_len": 3, "output_len": 0},
        {"request_id": "a", "arrival_time": 1.0, "prompt_len": 2**31, "output_len": 2},
        {"request_id": "a", "arrival_time": -1.0, "prompt_len": 3, "output_len": 2},
        {"request_id": "a", "arrival_time": float("inf"), "prompt_len": 3, "output_len": 2},
        {"request_id": "a", "arrival_time": float("nan"), "prompt_len": 3, "output_len": 2},
        {"request_id": "", "arrival_time": 1.0, "prompt_len": 3, "output_len": 2},
        {"request_id": 7, "arrival_time": 1.0, "prompt_len": 3, "output_len": 2},
        {"request_id": "a", "arrival_time": 1.0, "prompt_len": 3, "max_tokens": 2},
    ],
)
def test_plain_record_fast_path_equals_the_full_checks(
    record: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four-field records take a shortcut (``_plain_spec``): same spec, or same error."""
    from llmsched_gym.workloads import trace

    plain = {"request_id": "a", "arrival_time": 0.5, "prompt_len": 3, "output_len": 2}
    assert trace._plain_spec(plain) is not None  # the shortcut is taken

    def outcome() -> object:
        try:
            spec = request_from_dict(record, "t.jsonl:1")
        except TraceError as err:
            return str(err)
        return spec, type(spec.arrival_time)

    fast = outcome()
    monkeypatch.setattr(trace, "_plain_spec", lambda record: None)
    assert fast == outcome()


@pytest.mark.parametrize(
    "text",
    ['{"a": 1, "b": [1, 2.5]}', '\ufeff{"a": 1}', b'{"a": 2}', "[1,", '{"a": {"b": 1}}', "7"],
)
def test_shared_decoder_answers_as_json_loads(text) -> None:
    """``_json.loads`` keeps one decoder: json.loads' values and errors (BOM, bytes) unchanged."""
    from llmsched_gym import _json

    def outcome(load) -> object:
        try:
            return load(text)
        except json.JSONDecodeError as err:
            return str(err)

    assert outcome(_json.loads) == outcome(json.loads)


_PLAIN_IDS = st.text(st.characters(codec="utf-8", exclude_characters='"\\'), min_size=1, max_size=8)
_NUMBERS = st.one_of(
    st.integers(-3, 2**31 + 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["1e999", "-0.0", "01", "1.", ".5", "1E+3", "2e-05", "3.0e10"]),
)


@given(
    rid=_PLAIN_IDS,
    arrival=_NUMBERS,
    prompt=_NUMBERS,
    output=_NUMBERS,
    end=st.sampled_from(["\n", "\r\n", "", " \n"]),
)
@settings(max_examples=400, deadline=None)
def test_plain_line_fast_path_equals_json(rid, arrival, prompt, output, end) -> None:
    """A line the fast path reads gives the spec json + request_from_dict give; any other
    line (escapes, signs, ints for the arrival, out-of-range values) is left to them."""
    from llmsched_gym import _json
    from llmsched_gym.workloads.trace import _plain_line

    line = (
        f'{{"request_id": {json.dumps(rid, ensure_ascii=False)}, "arrival_time": {arrival}, '
        f'"prompt_len": {prompt}, "output_len": {output}}}{end}'
    )
    fast = _plain_line(line)
    try:
        slow = request_from_dict(_json.loads(line))
    except (ValueError, TraceError):
        slow = None  # invalid JSON or values: the fast path must not accept it
    if fast is not None:
        assert fast == slow
        assert type(fast.arrival_time) is float and type(fast.prompt_len) is int
    plain = (
        (
            (type(arrival) is float and math.copysign(1.0, arrival) > 0)
            or arrival in ("1E+3", "2e-05", "3.0e10")  # JSON floats by their exponent
        )
        and all(type(n) is int and 1 <= n < 2**31 for n in (prompt, output))
        and "\\" not in json.dumps(rid, ensure_ascii=False)
        and end != " \n"
    )
    assert (fast is not None) == plain  # what save_trace writes takes the fast path


def test_plain_lines_and_full_lines_mix(tmp_path: Path) -> None:
    """save_trace's plain lines take the fast path, others the full checks, in one file; the
    errors still name the line (a duplicate id found on a fast line)."""
    specs = [
        RequestSpec("a", 0.5, 3, 4, 4),
        RequestSpec("b", 1.0, 5, 6, 9),  # max_tokens: a fifth field, full checks
        RequestSpec("ünï", 2e-5, 7, 8, 8),  # escaped by save_trace: full checks
        RequestSpec("d", 1e16, 9, 10, 10),
    ]
    path = save_trace(specs, tmp_path / "t.jsonl")
    assert load_trace(path) == sorted(specs, key=lambda s: s.arrival_time)
    path.write_text(
        path.read_text()
        + '{"request_id": "a", "arrival_time": 3.0, "prompt_len": 1, "output_len": 1}\n'
    )
    with pytest.raises(TraceError, match=r"t\.jsonl:5: field 'request_id' must be unique.*line 1"):
        load_trace(path)
    path.write_text(
        '{"request_id": "a", "arrival_time": 0.5, "prompt_len": 3, "output_len": 4}\n\n'
        '{"request_id": "b", "arrival_time": 0.5, "prompt_len": 3, "output_len": 4}\n'
    )
    with pytest.raises(TraceError, match=r"t\.jsonl:2: empty line in the middle"):
        load_trace(path)
