"""Small workloads per registered scenario, so that every env id is fast to test."""

from __future__ import annotations

SMALL = {
    "chat-azure-conv-v0": {"workload.limit": 40},
    "chat-sharegpt-overload-v0": {"workload.num_requests": 40},
    "relquery-rotten-v0": {"workload.num_queries": 3},
    "priority-sharegpt-v0": {"workload.num_requests": 40},
    "priority-azure-conv-v0": {"workload.limit": 40},
    "infermax-offline-v0": {"workload.num_requests": 24},
    "text2sql-hetero1-v0": {"workload.num_queries": 2},
    "text2sql-hetero2-v0": {"workload.num_queries": 2},
    "chat-azure-conv-4x-v0": {"workload.limit": 40},
    **{f"relserve-{s}-v0": {"workload.num_queries": 2} for s in ("qwen-amazon", "llama-amazon")},
    "relserve-llama-pdmx-v0": {"workload.num_queries": 2},
    **{
        f"proserve-{s}-v0": {"workload.num_requests": 40}
        for s in (
            "sharegpt-qwen2-7b",
            "azure-qwen2-7b",
            "sharegpt-qwen3-32b",
            "colocated-azure",
            "pd-sharegpt",
        )
    },
    **{
        f"hexgen-hetero{h}-trace{t}-v0": {"workload.num_queries": 2}
        for h in (1, 2)
        for t in (1, 2, 3)
    },
}
"""scenario_overrides that keep an episode to a fraction of a second."""
