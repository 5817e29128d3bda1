"""Small workloads per registered scenario, so that every env id is fast to test."""

from __future__ import annotations

SMALL = {
    "chat-azure-conv-v0": {"workload.limit": 40},
    "relquery-rotten-v0": {"workload.num_queries": 3},
    "priority-sharegpt-v0": {"workload.num_requests": 40},
    "priority-azure-conv-v0": {"workload.limit": 40},
    "infermax-offline-v0": {"workload.num_requests": 24},
}
"""scenario_overrides that keep an episode to a fraction of a second."""
