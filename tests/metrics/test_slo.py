"""The SLO-met rules: one definition, the same answer on floats (rewards) and arrays (records)."""

from __future__ import annotations

import itertools
import math

import numpy as np

from llmsched_gym.metrics.slo import has_slo, latency_slo_met, request_slo_met, slo_outcome
from llmsched_gym.metrics.tdg import slo_attainment
from llmsched_gym.policies.hexgen import slo_attainment as hexgen_attainment

NAN = math.nan


def test_request_rule_cases() -> None:
    # (ttft, tpot, finish, slo_ttft, slo_tpot, deadline) -> met
    cases = [
        ((0.5, 0.05, 9.0, 1.0, 0.1, NAN), True),
        ((1.0, 0.05, 9.0, 1.0, 0.1, NAN), False),  # ttft == SLO misses (strict)
        ((0.5, 0.1, 9.0, 1.0, 0.1, NAN), False),  # tpot == SLO misses (strict)
        ((0.5, NAN, 9.0, 1.0, 0.1, NAN), True),  # one output token meets any TPOT SLO
        ((0.5, 0.05, NAN, 1.0, 0.1, NAN), False),  # unfinished
        ((0.5, 0.05, 9.0, NAN, NAN, 9.0), True),  # deadline inclusive
        ((0.5, 0.05, 9.0, NAN, NAN, 8.9), False),
        ((9.0, 9.0, 9.0, NAN, NAN, NAN), True),  # no SLO: met (has_slo tells it apart)
    ]
    for args, met in cases:
        assert request_slo_met(*args) is met, args
    assert not has_slo(NAN, NAN, NAN) and has_slo(NAN, NAN, 1.0) and has_slo(1.0, NAN, NAN)
    assert latency_slo_met(2.0, 2.0) and not latency_slo_met(2.5, 2.0)
    assert not latency_slo_met(NAN, 2.0)


def test_floats_and_arrays_agree() -> None:
    values = (NAN, 0.0, 0.5, 1.0)
    rows = list(itertools.product(values, repeat=6))
    cols = [np.array(c, dtype=np.float64) for c in zip(*rows, strict=True)]
    met, has = slo_outcome(*cols)
    assert met.dtype == bool and has.dtype == bool
    for k, row in enumerate(rows):
        assert bool(met[k]) == request_slo_met(*row), row
        assert bool(has[k]) == has_slo(*row[3:]), row


def test_tdg_and_hexgen_attainment_use_the_rule() -> None:
    table = {
        "arrival_time_s": np.array([0.0, 0.0, 0.0]),
        "first_token_time_s": np.array([0.5, 0.5, 0.5]),
        "finish_time_s": np.array([0.8, 0.5, 9.0]),
        "num_output_tokens": np.array([4, 1, 4]),
        "slo_ttft_s": np.array([1.0, 1.0, NAN]),
        "slo_tpot_s": np.array([0.2, 0.2, NAN]),
    }
    assert slo_attainment(table).tolist() == [True, True, False]  # no SLO counts as missed
    lat = np.array([1.0, 2.0, NAN])
    assert hexgen_attainment(lat, 1.0, np.array([1.0, 2.0])).tolist() == [1 / 3, 2 / 3]
