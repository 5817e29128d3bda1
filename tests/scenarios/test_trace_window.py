"""The trace window (``start_s``/``duration_s``) built lazily equals the eager re-timing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios.kinds import _window
from llmsched_gym.workloads.arrivals import sample_requests


def _eager(specs, start_s, duration_s):
    """The window as the code before issue 40 built it: every request re-timed."""
    end = math.inf if duration_s is None else start_s + duration_s
    return [
        dataclasses.replace(s, arrival_time=s.arrival_time - start_s)
        for s in specs
        if start_s <= s.arrival_time < end
    ]


def _specs():
    times = [0.0, 0.5, 1.0, 1.0, 1.0, 2.5, 3.0, 3.0, 4.75, 6.0]
    return [
        RequestSpec(
            request_id=f"r{i}", arrival_time=t, prompt_len=3 + i, output_len=2, max_tokens=2
        )
        for i, t in enumerate(times)
    ]


@pytest.mark.parametrize(
    ("start_s", "duration_s"), [(0.0, None), (1.0, 2.0), (1.0, None), (0.3, 2.7), (3.0, 0.01)]
)
def test_window_equals_eager(start_s, duration_s):
    specs = _specs()
    lazy = _window(specs, start_s, duration_s, "t")
    eager = _eager(specs, start_s, duration_s)
    assert list(lazy) == eager
    assert len(lazy) == len(eager)
    assert lazy[-1] == eager[-1] and lazy[1:3] == eager[1:3]
    for n in range(len(eager) + 1):
        assert sample_requests(lazy, n, seed=7) == sample_requests(eager, n, seed=7)


def test_empty_window_is_an_error():
    with pytest.raises(ConfigError, match="no request arrives in the window"):
        _window(_specs(), 7.0, 1.0, "t")
