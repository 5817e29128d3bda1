"""Records of a cluster run: one request table over all instances, plus per-instance tables.

Rows are requests in routing order, each with the instance that finished it (``instance_id``).
A PD request is one row: arrival, first scheduling and first token from its prefill instance
(``prefill_instance_id``), finish from its decode instance, ``kv_transfer_s`` the KV transfer,
token counts summed over both parts. Its first inter-token gap (first token on the prefill
instance to second token on the decode instance) joins the ITL samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched_gym.cluster.routers import router_name
from llmsched_gym.core.job import Job
from llmsched_gym.metrics.columns import RequestColumn as RC
from llmsched_gym.metrics.results import RequestsFrameMixin
from llmsched_gym.metrics.table import request_columns

__all__ = ["ClusterResult", "cluster_result", "instance_table", "gpu_table", "stage_shares"]


@dataclass
class ClusterResult(RequestsFrameMixin):
    """Records of one cluster run (the cluster's ``SimulationResult``).

    ``request_table`` holds per-request numpy columns (``requests`` builds the DataFrame on first
    use); ``instances`` and ``gpus`` are per-instance and per-GPU-type DataFrames;
    ``stage_shares`` is HexGen-Text2SQL's Table 1 (share of each job stage kind per instance).
    """

    request_table: dict[str, np.ndarray]
    summary: dict[str, Any]
    instances: Any
    """Per-instance DataFrame: requests, tokens, busy time, utilisation, throughput."""
    gpus: Any
    """Per-GPU-type DataFrame (instances grouped by their cost model's GPU)."""
    stage_shares: Any = None
    """Stage kind x instance DataFrame of request shares (rows sum to 1); None without stages."""
    jobs: Any = None
    """Per-job records (``jobs_frame``) when the workload has jobs, else None."""
    itl: tuple[np.ndarray, np.ndarray] | None = None
    steps: list[Any] | None = None
    """Per-instance step DataFrames (``record_steps=True``), in instance order."""
    router: str = ""
    schedulers: list[str] = field(default_factory=list)
    cost_models: list[str] = field(default_factory=list)
    configs: list[Any] = field(default_factory=list)
    """Each instance's EngineConfig."""
    num_steps: int = 0
    num_fast_forward_steps: int = 0
    wall_s: float = 0.0
    _frame: Any = field(default=None, repr=False, compare=False)

    @property
    def scheduler(self) -> str:
        """The local schedulers, joined (one name when all instances share it)."""
        return "+".join(dict.fromkeys(self.schedulers))

    @property
    def cost_model(self) -> str:
        """The instances' cost models, joined (one name when homogeneous)."""
        return "+".join(dict.fromkeys(self.cost_models))


def _merged_columns(cluster: Any) -> tuple[dict[str, list], list[tuple[float, int]]]:
    """Raw request columns over all instances in routing order, PD parts merged.

    Returns the columns and the first inter-token gaps of PD requests as (gap, 1) runs.
    """
    handoffs = cluster.handoffs
    parts: list[dict[str, list]] = []
    keys: list[int] = []
    gaps: list[tuple[float, int]] = []
    for inst in cluster.instances:
        finished = inst.engine.finished
        if inst.role == "prefill":
            finished = [r for r in finished if r.request_id not in handoffs]
        cols = request_columns(finished, instance_id=inst.index)
        if inst.role == "decode":
            _merge_pd(cols, handoffs, gaps)
        parts.append(cols)
        keys.extend(cluster.order[rid] for rid in cols[RC.REQUEST_ID.value])
    order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable").tolist()
    merged: dict[str, list] = {}
    for name in parts[0]:
        values = [v for cols in parts for v in cols[name]]
        merged[name] = values if len(parts) == 1 else [values[i] for i in order]
    return merged, gaps


def _merge_pd(cols: dict[str, list], handoffs: dict, gaps: list) -> None:
    """Rewrite a decode instance's rows as whole requests (prefill part + decode part)."""
    ids = cols[RC.REQUEST_ID.value]
    for k, rid in enumerate(ids):
        p, p_index, xfer = handoffs[rid]
        decode_first = cols[RC.FIRST_TOKEN_TIME_S.value][k]
        gaps.append((decode_first - p.first_token_time, 1))
        out = p.num_output_tokens + cols[RC.NUM_OUTPUT_TOKENS.value][k]
        computed = p.num_computed_total + cols[RC.NUM_COMPUTED_TOKENS.value][k]
        cols[RC.ARRIVAL_TIME_S.value][k] = p.arrival_time
        cols[RC.FIRST_SCHEDULED_TIME_S.value][k] = p.first_scheduled_time
        cols[RC.FIRST_TOKEN_TIME_S.value][k] = p.first_token_time
        cols[RC.NUM_PROMPT_TOKENS.value][k] = p.num_prompt_tokens
        cols[RC.NUM_OUTPUT_TOKENS.value][k] = out
        cols[RC.NUM_CACHED_TOKENS.value][k] = p.num_cached_tokens
        cols[RC.NUM_COMPUTED_TOKENS.value][k] = computed
        cols[RC.NUM_REFILL_TOKENS.value][k] = computed - (
            p.num_prompt_tokens + out - 1 - p.num_cached_tokens
        )
        cols[RC.NUM_PREEMPTIONS.value][k] += p.num_preemptions
        cols[RC.PREFILL_INSTANCE_ID.value][k] = p_index
        cols[RC.KV_TRANSFER_S.value][k] = xfer


def instance_table(cluster: Any, makespan_s: float) -> Any:
    """Per-instance DataFrame: identity, requests, tokens, busy time, utilisation, throughput.

    ``num_requests`` counts requests finished on the instance (a PD request counts on its prefill
    instance as a prefill copy and on its decode instance); ``num_prompt_tokens`` counts prompt
    tokens prefilled there (transferred KV excluded); ``utilization = busy_s / makespan_s``.
    """
    import pandas as pd

    rows = []
    span = makespan_s if makespan_s > 0 else float("nan")
    for x in cluster.instances:
        e = x.engine
        fin = e.finished
        prompt = sum(r.num_prompt_tokens - r.num_external_tokens for r in fin)
        output = sum(r.num_output_tokens for r in fin)
        rows.append(
            {
                "instance_id": x.index,
                "name": x.name,
                "role": x.role,
                "gpu": x.gpu,
                "model": x.model,
                "tp": x.tp,
                "cost_model": x.cost_model_name,
                "scheduler": getattr(x.policy, "name", type(x.policy).__name__),
                "num_gpu_blocks": e.config.num_gpu_blocks,
                "num_requests": len(fin),
                "num_prompt_tokens": prompt,
                "num_output_tokens": output,
                "num_computed_tokens": sum(r.num_computed_total for r in fin),
                "num_steps": e.num_steps,
                "num_preemptions": e.num_preemptions,
                "busy_s": x.busy_s,
                "utilization": x.busy_s / span,
                "request_throughput": len(fin) / span,
                "output_token_throughput": output / span,
            }
        )
    frame = pd.DataFrame(rows)
    return frame.astype({"tp": "Int64"})


def gpu_table(instances: Any, makespan_s: float) -> Any:
    """Per-GPU-type DataFrame summed over instances (``utilization`` is their mean)."""
    span = makespan_s if makespan_s > 0 else float("nan")
    frame = instances.assign(gpu=instances["gpu"].fillna("unknown"))
    out = frame.groupby("gpu", sort=False).agg(
        num_instances=("instance_id", "size"),
        num_requests=("num_requests", "sum"),
        num_prompt_tokens=("num_prompt_tokens", "sum"),
        num_output_tokens=("num_output_tokens", "sum"),
        busy_s=("busy_s", "sum"),
    )
    out["utilization"] = out["busy_s"] / (out["num_instances"] * span)
    out["request_throughput"] = out["num_requests"] / span
    out["output_token_throughput"] = out["num_output_tokens"] / span
    return out.reset_index()


def stage_kind(stage: str) -> str:
    """A stage's kind: its name without a trailing round number (``"RV3"`` -> ``"RV"``)."""
    kind = stage.rstrip("0123456789")
    return kind or stage


def stage_shares(table: dict[str, np.ndarray], names: Sequence[str]) -> Any:
    """Share of each stage kind's requests per instance (HexGen-Text2SQL Table 1), or None."""
    import pandas as pd

    stages = table[RC.STAGE.value]
    mask = np.array([s is not None for s in stages], dtype=bool)
    if not mask.any():
        return None
    kinds = [stage_kind(str(s)) for s in stages[mask]]
    where = [names[i] for i in table[RC.INSTANCE_ID.value][mask].tolist()]
    shares = pd.crosstab(pd.Series(kinds, name="stage"), pd.Series(where, name="instance"),
                         normalize="index")  # fmt: skip
    return shares.reindex(columns=[n for n in names if n in shares.columns])


def cluster_result(cluster: Any, jobs: Sequence[Job], *, wall_s: float, record_steps: bool):
    """Build the :class:`ClusterResult` of a finished ``Cluster``."""
    from llmsched_gym.metrics.summary import summary_values
    from llmsched_gym.metrics.table import request_table

    sync = getattr(cluster, "sync", None)
    if sync is not None:  # a truncated run may leave decode stretches pending
        sync()
    raw, gaps = _merged_columns(cluster)
    table = request_table(raw)
    steps = None
    if record_steps:
        from llmsched_gym.metrics.records import steps_frame

        steps = [steps_frame(x.engine.step_columns()) for x in cluster.instances]
    values: list[float] = []
    weights: list[int] = []
    for x in cluster.instances:
        values.extend(x.engine.itl_values)
        weights.extend(x.engine.itl_weights)
    for gap, w in gaps:
        values.append(gap)
        weights.append(w)
    itl = (np.asarray(values), np.asarray(weights, dtype=np.int64))
    one = len(cluster.instances) == 1
    summary = summary_values(table, steps[0] if steps and one else None, itl=itl)
    engines = [x.engine for x in cluster.instances]
    summary["num_refused"] = len(cluster.refused)
    summary["num_aborted"] = sum(len(e.aborted) for e in engines)  # 0: clusters refuse cancels
    summary["num_steps"] = sum(e.num_steps for e in engines)
    summary["prefix_cache_queries"] = sum(e.kv.queries for e in engines)
    summary["prefix_cache_hits"] = sum(e.kv.hits for e in engines)
    arrivals = table[RC.ARRIVAL_TIME_S.value]
    finishes = table[RC.FINISH_TIME_S.value]
    makespan = float(np.nanmax(finishes) - np.nanmin(arrivals)) if len(arrivals) else 0.0
    instances = instance_table(cluster, makespan)
    result = ClusterResult(
        request_table=table,
        summary=summary,
        instances=instances,
        gpus=gpu_table(instances, makespan),
        stage_shares=stage_shares(table, [x.name for x in cluster.instances]),
        itl=itl,
        steps=steps,
        router=router_name(cluster.router),
        schedulers=[getattr(x.policy, "name", type(x.policy).__name__) for x in cluster.instances],
        cost_models=[x.cost_model_name for x in cluster.instances],
        configs=[x.engine.config for x in cluster.instances],
        num_steps=summary["num_steps"],
        num_fast_forward_steps=sum(e.num_ff_steps for e in engines),
        wall_s=wall_s,
    )
    if jobs:
        from llmsched_gym.metrics.records import jobs_frame

        result.jobs = jobs_frame(result.requests, jobs)
    return result
