"""Workloads: the trace contract, the shipped real traces and their readers, and generators.

>>> from llmsched_gym.workloads import load_trace, list_traces
>>> specs = load_trace("splitwise-conv")            # a shipped trace, by name
>>> specs = load_trace("my_trace.jsonl")            # a trace-contract file   # doctest: +SKIP

Generators and transforms: arrival processes and rate rescaling (``arrivals``), ServeGen client
pools (``servegen``), ProServe priority classes and SLOs (``priority``), InferMax offline grids
(``grids``), multi-turn conversations and deterministic token ids (``multiturn``), and trace
statistics (``stats``).
"""

from llmsched_gym.workloads.arrivals import (
    arrival_times_s,
    gamma_arrivals,
    mean_rate_per_s,
    poisson_arrivals,
    replay_arrivals,
    rescale_to_rate,
    sample_requests,
)
from llmsched_gym.workloads.catalog import SHIPPED_TRACES, TraceInfo, list_traces, trace_info
from llmsched_gym.workloads.grids import (
    INFERMAX_GROUPS,
    INFERMAX_MIXES,
    infermax_mix,
    offline_batch,
    offline_grid,
)
from llmsched_gym.workloads.priority import (
    PROSERVE_CLASSES,
    PriorityClass,
    assign_priority_classes,
    assign_slos,
    unloaded_tpot_s,
    unloaded_ttft_s,
)
from llmsched_gym.workloads.servegen import (
    SERVEGEN_MODELS,
    ServeGenPool,
    generate_servegen,
    iter_servegen,
    load_servegen,
)
from llmsched_gym.workloads.stats import (
    plot_length_histogram,
    prefix_sharing_ratio,
    stats_table,
    workload_stats,
)
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
    "INFERMAX_GROUPS",
    "INFERMAX_MIXES",
    "PROSERVE_CLASSES",
    "SERVEGEN_MODELS",
    "SHIPPED_TRACES",
    "TRACE_FORMATS",
    "PriorityClass",
    "ServeGenPool",
    "TraceInfo",
    "arrival_times_s",
    "assign_priority_classes",
    "assign_slos",
    "gamma_arrivals",
    "generate_servegen",
    "infermax_mix",
    "iter_servegen",
    "list_traces",
    "load_servegen",
    "load_trace",
    "mean_rate_per_s",
    "offline_batch",
    "offline_grid",
    "plot_length_histogram",
    "poisson_arrivals",
    "prefix_sharing_ratio",
    "replay_arrivals",
    "request_from_dict",
    "request_to_dict",
    "rescale_to_rate",
    "sample_requests",
    "save_trace",
    "stats_table",
    "trace_info",
    "unloaded_tpot_s",
    "unloaded_ttft_s",
    "workload_stats",
]
