"""The real traces shipped with the package and the raw formats they come in."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from llmsched_gym.errors import TraceError
from llmsched_gym.workloads import SHIPPED_TRACES, list_traces, load_trace, trace_info
from llmsched_gym.workloads.catalog import shipped_resource

EXPECTED_ROWS = {
    "splitwise-conv": 19_366,
    "splitwise-code": 8_819,
    "azure-conv-2023": 19_366,
    "azure-code-2023": 8_819,
    "mooncake-conversation": 12_031,
    "mooncake-synthetic": 3_993,
    "sharegpt": 30_731,
    "arxiv-summarization": 28_257,
}


def test_list_traces_names_and_descriptions() -> None:
    listing = list_traces()
    assert list(listing) == list(EXPECTED_ROWS)
    for name, line in listing.items():
        assert "\n" not in line and f"{EXPECTED_ROWS[name]:,} requests" in line
    assert trace_info("sharegpt").trace_format == "vidur"
    with pytest.raises(TraceError, match="no shipped trace named 'nope'"):
        trace_info("nope")


@pytest.mark.parametrize("name", list(EXPECTED_ROWS))
def test_shipped_trace_loads_with_sane_values(name: str) -> None:
    specs = load_trace(name)
    assert len(specs) == EXPECTED_ROWS[name] == SHIPPED_TRACES[name].num_requests
    assert len({s.request_id for s in specs}) == len(specs)
    assert {s.request_id for s in specs} == {f"{name}-{i}" for i in range(len(specs))}
    arrivals = [s.arrival_time for s in specs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert all(math.isfinite(t) for t in arrivals)
    for spec in specs:
        assert spec.prompt_len >= 1 and spec.output_len >= 1
        assert spec.max_tokens == spec.output_len and spec.prompt_token_ids is None
    if name.startswith("mooncake"):
        assert all(
            s.block_hashes is not None and len(s.block_hashes) == -(-s.prompt_len // 512)
            for s in specs
        )
        assert all(s.hash_block_size == 512 for s in specs)
    else:
        assert all(s.block_hashes is None for s in specs)
    if name in ("sharegpt", "arxiv-summarization"):
        assert arrivals[-1] == 0.0
    else:
        assert 1_000 < arrivals[-1] < 3_600  # about one hour


def test_first_rows_match_the_source_files() -> None:
    conv = load_trace("splitwise-conv")
    assert (conv[1].arrival_time, conv[1].prompt_len, conv[1].output_len) == (4.314579, 396, 109)
    azure = load_trace("azure-code-2023")
    # 18:17:04.0319600 - 18:17:03.9799600, exact to the file's 100 ns.
    assert (azure[1].arrival_time, azure[1].prompt_len, azure[1].output_len) == (0.052, 3180, 8)
    mooncake = load_trace("mooncake-conversation")
    assert mooncake[1].block_hashes == tuple([0, *range(14, 28)])
    assert mooncake[1].prompt_len == 7322 and mooncake[1].output_len == 490
    synthetic = load_trace("mooncake-synthetic")
    assert synthetic[2].arrival_time == 0.04  # 40 ms
    sharegpt = load_trace("sharegpt")
    assert (sharegpt[0].prompt_len, sharegpt[0].output_len) == (74, 918)


def test_splitwise_and_azure_are_the_same_requests() -> None:
    for splitwise, azure in (
        ("splitwise-conv", "azure-conv-2023"),
        ("splitwise-code", "azure-code-2023"),
    ):
        a, b = load_trace(splitwise), load_trace(azure)
        assert [(s.prompt_len, s.output_len) for s in a] == [
            (s.prompt_len, s.output_len) for s in b
        ]
        assert max(abs(x.arrival_time - y.arrival_time) for x, y in zip(a, b, strict=True)) < 1e-6


def test_mooncake_shares_prefixes() -> None:
    specs = load_trace("mooncake-conversation", limit=200)
    first_blocks = [s.block_hashes[0] for s in specs]
    assert len(set(first_blocks)) < len(first_blocks)  # real prefix sharing


def test_limit_and_arrivals_for_token_count_traces() -> None:
    arrivals = [0.5 * i for i in range(100)]
    specs = load_trace("sharegpt", limit=100, arrival_times_s=arrivals)
    assert [s.arrival_time for s in specs] == arrivals
    assert [s.request_id for s in specs] == [f"sharegpt-{i}" for i in range(100)]
    # The cached full trace is not affected by the override.
    assert load_trace("sharegpt", limit=100)[5].arrival_time == 0.0


def test_loading_splitwise_conv_uncached() -> None:
    """The uncached load (its speed is a benchmark figure: ``llmsched-gym bench``)."""
    from llmsched_gym.workloads import trace as trace_module

    trace_module._load_shipped.cache_clear()
    specs = load_trace("splitwise-conv")
    assert len(specs) == 19_366


def test_shipped_files_are_small_and_licensed() -> None:
    folder = Path(str(shipped_resource(SHIPPED_TRACES["sharegpt"]))).parent.parent
    total = sum(p.stat().st_size for p in folder.rglob("*.gz"))
    assert total < 8_000_000
    for info in SHIPPED_TRACES.values():
        directory = Path(str(shipped_resource(info))).parent
        assert list(directory.glob("LICENSE*")), f"no licence beside {info.file}"
    assert (folder / "README.md").is_file()


def test_shipped_name_rejects_a_different_format() -> None:
    with pytest.raises(TraceError, match="shipped trace 'sharegpt' is in format 'vidur'"):
        load_trace("sharegpt", trace_format="mooncake")


# --- malformed raw files -------------------------------------------------------------------------


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


VIDUR_CASES = [
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n1.0,x,3\n",
        3,
        "num_prefill_tokens",
        "'x'",
    ),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,2\n1.0,5,0\n",
        3,
        "num_decode_tokens",
        "'0'",
    ),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n-1,10,2\n", 2, "arrived_at", "'-1'"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens\nnan,10,2\n", 2, "arrived_at", "'nan'"),
    (
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10.5,2\n",
        2,
        "num_prefill_tokens",
        "'10.5'",
    ),
]


@pytest.mark.parametrize(("text", "line", "field", "shown"), VIDUR_CASES)
def test_malformed_vidur_rows(tmp_path: Path, text: str, line: int, field: str, shown: str) -> None:
    path = write(tmp_path, "v.csv", text)
    with pytest.raises(TraceError) as info:
        load_trace(path, trace_format="vidur")
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: field '{field}'"), message
    assert message.endswith(f"got {shown}"), message


def test_vidur_structure_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "a.csv", "num_prefill_tokens,num_decode_tokens\n1,2\n\n3,4\n")
    with pytest.raises(TraceError, match=r"a\.csv:3: empty line in the middle"):
        load_trace(path, trace_format="vidur")
    path = write(tmp_path, "b.csv", "num_prefill_tokens,num_decode_tokens\n1,2\n3\n")
    with pytest.raises(TraceError, match=r"b\.csv:3: row has 1 fields, the header has 2"):
        load_trace(path, trace_format="vidur")
    path = write(tmp_path, "c.csv", "prefill,num_decode_tokens\n1,2\n")
    with pytest.raises(
        TraceError, match=r"c\.csv:1: CSV header must have column\(s\) 'num_prefill_tokens'"
    ):
        load_trace(path, trace_format="vidur")
    path = write(tmp_path, "d.csv", "num_prefill_tokens,num_decode_tokens,x\n1,2,a\n5,6,b\n\n")
    specs = load_trace(path, trace_format="vidur")
    assert [(s.request_id, s.prompt_len, s.arrival_time) for s in specs] == [
        ("d-0", 1, 0.0),
        ("d-1", 5, 0.0),
    ]


def test_azure_format_by_path(tmp_path: Path) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        "2023-11-16 23:59:59.9999999,10,2\r\n"
        "2023-11-17 00:00:00.0000001,11,3\r\n"
        "2023-11-17 00:00:01,12,4"
    )
    path = tmp_path / "azure.csv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    specs = load_trace(path, trace_format="azure")
    assert [s.arrival_time for s in specs] == [0.0, 2e-7, 1.0000001]
    bad = write(
        tmp_path,
        "bad.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00,1,1\nyesterday,1,1\n",
    )
    with pytest.raises(
        TraceError,
        match=r"bad\.csv:3: field 'TIMESTAMP' must be 'YYYY-MM-DD HH:MM:SS\[\.fraction\]', "
        r"got 'yesterday'",
    ):
        load_trace(bad, trace_format="azure")
    bad = write(
        tmp_path, "bad2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 10:00:00,-5,1\n"
    )
    with pytest.raises(
        TraceError, match=r"bad2\.csv:2: field 'ContextTokens' must be an int >= 1, got '-5'"
    ):
        load_trace(bad, trace_format="azure")


MOONCAKE_GOOD = {"timestamp": 1500, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2, 3]}
MOONCAKE_CASES = [
    ({"timestamp": -1}, "timestamp", "-1"),
    ({"input_length": 0}, "input_length", "0"),
    ({"output_length": "5"}, "output_length", "'5'"),
    ({"hash_ids": [1, 2, 3, 4]}, "hash_ids", "got 4"),
    ({"hash_ids": [1, None]}, "hash_ids", "None"),
    ({"extra": 1}, "extra", "unknown field"),
]


@pytest.mark.parametrize(("overrides", "field", "shown"), MOONCAKE_CASES)
def test_malformed_mooncake_lines(tmp_path: Path, overrides: dict, field: str, shown: str) -> None:
    lines = [json.dumps(MOONCAKE_GOOD), json.dumps({**MOONCAKE_GOOD, **overrides})]
    path = write(tmp_path, "m.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(TraceError) as info:
        load_trace(path, trace_format="mooncake")
    message = str(info.value)
    assert message.startswith(f"{path}:2: ") and f"'{field}'" in message and shown in message, (
        message
    )


def test_mooncake_format_by_path(tmp_path: Path) -> None:
    path = write(tmp_path, "m.jsonl", json.dumps(MOONCAKE_GOOD) + "\n")
    (spec,) = load_trace(path, trace_format="mooncake")
    assert (
        spec.arrival_time == 1.5 and spec.block_hashes == (1, 2, 3) and spec.hash_block_size == 512
    )
    assert spec.request_id == "m-0"
