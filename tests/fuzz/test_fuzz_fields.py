"""Hypothesis fuzz of the two boundaries every run crosses: a trace record and engine settings.

Any JSON value in any field is either accepted or refused with the package's own error, never
another exception (OverflowError from the compiled core, TypeError, ...).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym.config import EngineConfig
from llmsched_gym.errors import ConfigError, TraceError
from llmsched_gym.workloads.trace import CONTRACT_FIELDS, request_from_dict

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
C_INT_MAX = 2**31 - 1
BASE = {"request_id": "r", "arrival_time": 0.0, "prompt_len": 8, "output_len": 2}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(CONTRACT_FIELDS + ("bogus",)), json_values, max_size=5))
def test_trace_records(changes: dict) -> None:
    try:
        spec = request_from_dict({**BASE, **changes}, "fuzz.jsonl:1")
    except TraceError as exc:
        assert str(exc).startswith("fuzz.jsonl:1: ") and len(str(exc)) < 400
    else:  # what is accepted fits the compiled core's C integers
        assert max(spec.prompt_len, spec.output_len, spec.max_tokens) <= C_INT_MAX
        assert abs(spec.priority) <= C_INT_MAX


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(EngineConfig.keys() + ("bogus",)), json_values, max_size=4))
def test_engine_settings(changes: dict) -> None:
    try:
        cfg = EngineConfig.from_dict(changes)
        cfg.verify_vllm_limits()
    except ConfigError as exc:
        assert len(str(exc)) < 400
    else:
        assert max(cfg.max_num_batched_tokens, cfg.num_gpu_blocks, cfg.max_num_seqs) <= C_INT_MAX
