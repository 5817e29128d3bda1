"""ServeGen client pools and the per-client generator."""

from __future__ import annotations

import copy
import gzip
import json
from importlib import resources

import numpy as np
import pytest

from llmsched_gym.errors import TraceError
from llmsched_gym.workloads import (
    SERVEGEN_MODELS,
    generate_servegen,
    iter_servegen,
    load_servegen,
)
from llmsched_gym.workloads.servegen import parse_pool


def test_pools_load() -> None:
    sizes = {
        "m-small": (43, 38, 1_209_600),
        "deepseek-r1": (73, 73, 86_400),
        "mm-image": (35, 35, 86_400),
    }
    for model in SERVEGEN_MODELS:
        pool = load_servegen(model)
        clients, with_lengths, horizon = sizes[model]
        assert len(pool.clients) == clients and pool.window_s == 600
        assert sum(c.has_lengths for c in pool.clients.values()) == with_lengths
        assert pool.horizon_s == horizon
    with pytest.raises(TraceError, match="no ServeGen model named 'm-huge'"):
        load_servegen("m-huge")


def test_generation_is_deterministic_and_per_client() -> None:
    kwargs = dict(start_s=36_000, duration_s=1_200)
    a = generate_servegen("mm-image", seed=5, **kwargs)
    assert a == generate_servegen("mm-image", seed=5, **kwargs)
    assert a != generate_servegen("mm-image", seed=6, **kwargs)
    times = [s.arrival_time for s in a]
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 1_200
    assert all(s.prompt_len >= 1 and s.output_len >= 1 for s in a)
    assert all(s.client_id.startswith("mm-image/") for s in a)
    # A client's stream does not depend on which other clients are generated.
    one = generate_servegen("mm-image", seed=5, clients=[3], **kwargs)
    mine = [(s.arrival_time, s.prompt_len, s.output_len) for s in a if s.client_id == "mm-image/3"]
    assert [(s.arrival_time, s.prompt_len, s.output_len) for s in one] == mine


def test_rates_follow_the_published_windows_and_scale() -> None:
    pool = load_servegen("deepseek-r1")
    expected = pool.expected_requests(36_000, 3_600)
    counts = [
        len(generate_servegen(pool, start_s=36_000, duration_s=3_600, seed=s)) for s in range(2)
    ]
    assert np.mean(counts) == pytest.approx(expected, rel=0.05)
    target = generate_servegen(pool, start_s=36_000, duration_s=3_600, target_rate_per_s=2.0)
    assert len(target) / 3_600 == pytest.approx(2.0, rel=0.15)
    half = generate_servegen(pool, start_s=36_000, duration_s=3_600, rate_scale=0.5, seed=1)
    assert len(half) == pytest.approx(expected / 2, rel=0.1)


def test_lengths_come_from_the_client_distribution() -> None:
    pool = load_servegen("mm-image")
    client = next(c for c in pool.clients.values() if c.windows)
    specs = generate_servegen(pool, clients=[client.client_id], duration_s=86_400, rate_scale=5.0)
    values, _ = client.lengths_at(client.windows[0].start_s)["output_tokens"]
    allowed = {
        max(1, int(v)) for ts in client.lengths for v in client.lengths[ts]["output_tokens"][0]
    }
    assert specs and {s.output_len for s in specs} <= allowed
    assert len(values) >= 1


def test_argument_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="duration_s must be a finite number > 0, got 0"):
        generate_servegen("mm-image", duration_s=0)
    with pytest.raises(ValueError, match="give at most one of rate_scale and target_rate_per_s"):
        generate_servegen("mm-image", rate_scale=1.0, target_rate_per_s=1.0)
    with pytest.raises(ValueError, match="clients: no client 999"):
        generate_servegen("mm-image", clients=[999])
    with pytest.raises(ValueError, match="seed must be an int >= 0, got -1"):
        generate_servegen("mm-image", seed=-1)


def _raw(model: str) -> dict:
    name = SERVEGEN_MODELS[model]
    path = resources.files("llmsched_gym").joinpath("data", "traces", "servegen", name)
    return json.loads(gzip.decompress(path.read_bytes()))


def test_malformed_rows_name_file_line_and_field() -> None:
    data = _raw("mm-image")
    bad = copy.deepcopy(data)
    lines = bad["clients"][0]["trace_csv"].splitlines()
    fields = lines[4].split(",")
    fields[1] = "-3"
    lines[4] = ",".join(fields)
    bad["clients"][0]["trace_csv"] = "\n".join(lines)
    cid = bad["clients"][0]["id"]
    with pytest.raises(
        TraceError, match=rf"f.gz: client {cid}: chunk-{cid}-trace.csv:5: field 'rate'.*got '-3'"
    ):
        parse_pool(bad, "f.gz", "mm-image")
    bad = copy.deepcopy(data)
    lines = bad["clients"][0]["trace_csv"].splitlines()
    lines[2] = "1200,0.5,1.0,Lognormal,1.0,1.0"
    bad["clients"][0]["trace_csv"] = "\n".join(lines)
    with pytest.raises(
        TraceError, match=r"trace.csv:3: field 'pattern' must be Gamma, Weibull or empty"
    ):
        parse_pool(bad, "f.gz", "mm-image")
    bad = copy.deepcopy(data)
    window = next(iter(bad["clients"][1]["dataset"]))
    pmf = bad["clients"][1]["dataset"][window]["output_tokens"]
    pmf.pop("c", None)
    pmf["p"] = [0.5] * len(pmf.get("dv", pmf.get("v")))
    pmf.pop("n", None)
    with pytest.raises(TraceError, match=rf"lengths window {window}: field 'output_tokens'"):
        parse_pool(bad, "f.gz", "mm-image")


def test_lazy_generation_is_deterministic_whatever_the_chunks() -> None:
    """``iter_servegen``: the same requests under a seed, for any chunk length, sorted."""
    kwargs = dict(start_s=36_300, duration_s=2_400, target_rate_per_s=5.0)
    a = list(iter_servegen("m-small", seed=4, **kwargs))
    assert a == list(iter_servegen("m-small", seed=4, **kwargs))
    assert a == list(iter_servegen("m-small", seed=4, chunk_s=250.0, **kwargs))
    assert a == list(iter_servegen("m-small", seed=4, chunk_s=1e6, **kwargs))
    assert a != list(iter_servegen("m-small", seed=5, **kwargs))
    times = [s.arrival_time for s in a]
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 2_400
    assert [s.request_id for s in a] == [f"servegen-m-small-{i}" for i in range(len(a))]
    assert 0.8 * 12_000 < len(a) < 1.2 * 12_000  # 5/s over 2,400 s, in expectation
    # At a fixed rate scale, a client's requests do not depend on the others selected.
    span = dict(start_s=36_300, duration_s=2_400, rate_scale=0.005, seed=4)
    every = list(iter_servegen("m-small", **span))
    one = list(iter_servegen("m-small", clients=[35], **span))
    assert one and [(s.arrival_time, s.prompt_len, s.output_len) for s in one] == [
        (s.arrival_time, s.prompt_len, s.output_len) for s in every if s.client_id == "m-small/35"
    ]


def test_lazy_generation_checks_its_arguments_when_called() -> None:
    with pytest.raises(ValueError, match="chunk_s must be a finite number > 0, got 0"):
        iter_servegen("m-small", duration_s=600, chunk_s=0)
    with pytest.raises(ValueError, match="duration_s must be a finite number > 0"):
        iter_servegen("m-small", duration_s=-1)
    with pytest.raises(ValueError, match="give at most one of rate_scale and target_rate_per_s"):
        iter_servegen("m-small", rate_scale=1.0, target_rate_per_s=2.0)
    with pytest.raises(TraceError, match="m-huge"):
        iter_servegen("m-huge")
