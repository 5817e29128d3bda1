"""Workloads: the trace contract, the shipped real traces and their readers.

>>> from llmsched_gym.workloads import load_trace, list_traces
>>> specs = load_trace("splitwise-conv")            # a shipped trace, by name
>>> specs = load_trace("my_trace.jsonl")            # a trace-contract file   # doctest: +SKIP
"""

from llmsched_gym.workloads.arrivals import arrival_times_s
from llmsched_gym.workloads.catalog import SHIPPED_TRACES, TraceInfo, list_traces, trace_info
from llmsched_gym.workloads.trace import (
    CONTRACT_FIELDS,
    TRACE_FORMATS,
    load_trace,
    request_from_dict,
    request_to_dict,
    save_trace,
)

__all__ = [
    "CONTRACT_FIELDS",
    "SHIPPED_TRACES",
    "TRACE_FORMATS",
    "TraceInfo",
    "arrival_times_s",
    "list_traces",
    "load_trace",
    "request_from_dict",
    "request_to_dict",
    "save_trace",
    "trace_info",
]
