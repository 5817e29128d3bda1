"""Records of a cluster run: one request table over all instances, plus per-instance tables.

Rows are requests in routing order, each with the instance that finished it (``instance_id``).
A PD request is one row: arrival, first scheduling and first token from its prefill instance
(``prefill_instance_id``), finish from its decode instance, ``kv_transfer_s`` the KV transfer,
token counts summed over both parts. Its first inter-token gap (first token on the prefill
instance to second token on the decode instance) joins the ITL samples.

A cluster run with ``records="summary"`` has no per-request rows: ``cluster_result`` computes
the summary from the same columns in the same row order (so the same values, bit for bit) and
leaves ``request_table`` empty (``ClusterResult.requests`` says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmsched_gym._gc import return_free_memory
from llmsched_gym.cluster.folded import SLO_FIELDS, Column
from llmsched_gym.cluster.routers import router_name
from llmsched_gym.core.job import Job
from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.columns import Metric
from llmsched_gym.metrics.columns import RequestColumn as RC
from llmsched_gym.metrics.order_stats import itl_statistics
from llmsched_gym.metrics.results import RequestsFrameMixin
from llmsched_gym.metrics.table import spec_columns

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
    records: str = "full"
    """What the run kept (``run_cluster(records=)``): ``"summary"`` leaves ``request_table``
    empty and ``itl`` None."""
    timeline: dict[str, Any] | None = None
    """The schedule timeline (Chrome trace-event JSON) when the run recorded one."""
    _frame: Any = field(default=None, repr=False, compare=False)

    @property
    def requests(self) -> Any:
        """Per-request records as a DataFrame (``RequestColumn`` columns)."""
        if self.records == "summary":
            raise ConfigError(
                "this cluster run kept no per-request records (records='summary'): it has "
                "summary, instances and gpus only; run it with records='full' for them"
            )
        return super().requests

    @property
    def scheduler(self) -> str:
        """The local schedulers, joined (one name when all instances share it)."""
        return "+".join(dict.fromkeys(self.schedulers))

    @property
    def cost_model(self) -> str:
        """The instances' cost models, joined (one name when homogeneous)."""
        return "+".join(dict.fromkeys(self.cost_models))


def _merged_columns(cluster: Any) -> tuple[dict[str, Any], list[float]]:
    """Raw request columns of the finished requests in routing order, PD parts merged.

    Rows come from ``cluster.records`` (folded as requests finished). Their order is the one
    of reading each instance's finished requests by arrival ``seq``, instances in turn, then
    sorting stably by routing order (one instance: by ``seq`` alone); a PD prefill copy that
    handed off has no row of its own. Returns the columns (numpy arrays for the numbers,
    lists for the spec attributes) and the first inter-token gaps of PD requests.
    """
    rec = cluster.records
    cols = {name: c.numpy(np.float64 if c.data.typecode == "d" else np.int64)
            for name, c in rec.columns.items()}  # fmt: skip
    specs = rec.specs
    inst = cols["instance"]
    handoffs = cluster.handoffs
    rows = np.arange(len(specs))
    prefill = [x.index for x in cluster.instances if x.role == "prefill"]
    if prefill and handoffs:
        on_prefill = np.flatnonzero(np.isin(inst, prefill))
        copies = [k for k in on_prefill.tolist() if specs[k].request_id in handoffs]
        rows = np.setdiff1d(rows, np.asarray(copies, dtype=np.int64))
    seq = cols["seq"][rows]
    if len(cluster.instances) == 1:
        rows = rows[np.argsort(seq, kind="stable")]
    else:
        rows = rows[np.lexsort((seq, inst[rows], cols["order"][rows]))]
    cols = {name: values[rows] for name, values in cols.items()}
    specs = [specs[k] for k in rows.tolist()]
    inst = cols["instance"]
    prompt, output = cols["num_prompt_tokens"], cols["num_output_tokens"]
    cached, computed = cols["num_cached_tokens"], cols["num_computed_total"]
    # Refill: tokens computed beyond one pass over prompt + output (the last token is sampled,
    # never computed) minus the first prefix hit (``metrics.table.request_columns``).
    refill = computed - (prompt + output - 1 - cached)
    raw: dict[str, Any] = {
        RC.REQUEST_ID.value: [s.request_id for s in specs],
        RC.ARRIVAL_TIME_S.value: cols["arrival_time"],
        RC.FIRST_SCHEDULED_TIME_S.value: cols["first_scheduled_time"],
        RC.FIRST_TOKEN_TIME_S.value: cols["first_token_time"],
        RC.FINISH_TIME_S.value: cols["finish_time"],
        RC.NUM_PROMPT_TOKENS.value: prompt,
        RC.NUM_OUTPUT_TOKENS.value: output,
        RC.NUM_CACHED_TOKENS.value: cached,
        RC.NUM_COMPUTED_TOKENS.value: computed,
        RC.NUM_REFILL_TOKENS.value: refill,
        RC.NUM_PREEMPTIONS.value: cols["num_preemptions"],
        RC.PRIORITY.value: cols["priority"],
        **spec_columns(specs),
        RC.INSTANCE_ID.value: inst,
        RC.PREFILL_INSTANCE_ID.value: inst.copy(),
        RC.KV_TRANSFER_S.value: np.full(len(specs), np.nan),
    }
    gaps: list[float] = []
    decoders = [x.index for x in cluster.instances if x.role == "decode"]
    if decoders:
        on_decode = np.flatnonzero(np.isin(inst, decoders))
        # Instance by instance, each by arrival seq (the order the gaps were always taken in).
        on_decode = on_decode[np.lexsort((cols["seq"][on_decode], inst[on_decode]))]
        _merge_pd(raw, specs, on_decode.tolist(), handoffs, gaps)
    return raw, gaps


def _summary_columns(cluster: Any) -> dict[str, np.ndarray]:
    """The columns ``summary_values`` reads, from a ``records="summary"`` cluster's records.

    The rows and their order are ``_merged_columns``' (no PD: each row is a whole request) and
    the values are converted as ``request_table`` converts them, so every summary statistic,
    sums and means included, is bit for bit the one of a ``records="full"`` run.
    """
    rec = cluster.records
    cols = rec.columns
    inst = cols["instance"].view()
    seq = cols["seq"].view()
    if len(cluster.instances) == 1:
        rows = np.argsort(seq, kind="stable")
    else:
        rows = np.lexsort((seq, inst, cols["order"].view()))
    del inst, seq

    def column(name: str, dtype: Any) -> np.ndarray:
        return cols[name].view()[rows].astype(dtype)

    prompt = column("num_prompt_tokens", np.int64)
    output = column("num_output_tokens", np.int64)
    cached = column("num_cached_tokens", np.int64)
    computed = column("num_computed_total", np.int64)
    out = {
        RC.ARRIVAL_TIME_S.value: column("arrival_time", np.float64),
        RC.FIRST_TOKEN_TIME_S.value: column("first_token_time", np.float64),
        RC.FINISH_TIME_S.value: column("finish_time", np.float64),
        RC.NUM_PROMPT_TOKENS.value: prompt,
        RC.NUM_OUTPUT_TOKENS.value: output,
        RC.NUM_CACHED_TOKENS.value: cached,
        RC.NUM_PREEMPTIONS.value: column("num_preemptions", np.int64),
        # Refill as ``_merged_columns`` computes it.
        RC.NUM_REFILL_TOKENS.value: computed - (prompt + output - 1 - cached),
    }
    slo_names = (RC.SLO_TTFT_S.value, RC.SLO_TPOT_S.value, RC.DEADLINE_S.value)
    for name, field_name in zip(slo_names, SLO_FIELDS, strict=True):
        if rec.slo_columns is None:  # no request had an SLO
            out[name] = np.full(len(rows), np.nan)
        else:
            out[name] = rec.slo_columns[field_name].view()[rows].astype(np.float64)
    return out


def _nan(value: float | None) -> float:
    return np.nan if value is None else value


def _merge_pd(
    raw: dict[str, Any], specs: list, rows: list[int], handoffs: dict, gaps: list
) -> None:
    """Rewrite decode instances' rows as whole requests (prefill part + decode part)."""
    first_token = raw[RC.FIRST_TOKEN_TIME_S.value]
    for k in rows:
        p, p_index, xfer = handoffs[specs[k].request_id]
        gaps.append(first_token[k] - _nan(p.first_token_time))
        out = p.num_output_tokens + int(raw[RC.NUM_OUTPUT_TOKENS.value][k])
        computed = p.num_computed_total + int(raw[RC.NUM_COMPUTED_TOKENS.value][k])
        raw[RC.ARRIVAL_TIME_S.value][k] = _nan(p.arrival_time)
        raw[RC.FIRST_SCHEDULED_TIME_S.value][k] = _nan(p.first_scheduled_time)
        first_token[k] = _nan(p.first_token_time)
        raw[RC.NUM_PROMPT_TOKENS.value][k] = p.num_prompt_tokens
        raw[RC.NUM_OUTPUT_TOKENS.value][k] = out
        raw[RC.NUM_CACHED_TOKENS.value][k] = p.num_cached_tokens
        raw[RC.NUM_COMPUTED_TOKENS.value][k] = computed
        raw[RC.NUM_REFILL_TOKENS.value][k] = computed - (
            p.num_prompt_tokens + out - 1 - p.num_cached_tokens
        )
        raw[RC.NUM_PREEMPTIONS.value][k] += p.num_preemptions
        raw[RC.PREFILL_INSTANCE_ID.value][k] = p_index
        raw[RC.KV_TRANSFER_S.value][k] = xfer


def instance_table(cluster: Any, makespan_s: float) -> Any:
    """Per-instance DataFrame: identity, requests, tokens, busy time, utilisation, throughput.

    ``num_requests`` counts requests finished on the instance (a PD request counts on its prefill
    instance as a prefill copy and on its decode instance); ``num_prompt_tokens`` counts prompt
    tokens prefilled there (transferred KV excluded); ``utilization = busy_s / makespan_s``.
    """
    import pandas as pd

    rows = []
    span = makespan_s if makespan_s > 0 else float("nan")
    rec = cluster.records
    inst = rec.columns["instance"].numpy(np.int64)
    n = len(cluster.instances)

    def per_instance(*names: str) -> list[int]:
        values = rec.columns[names[0]].numpy(np.int64)
        for name in names[1:]:
            values = values - rec.columns[name].numpy(np.int64)
        out = np.zeros(n, dtype=np.int64)
        np.add.at(out, inst, values)
        return out.tolist()

    prompts = per_instance("num_prompt_tokens", "num_external_tokens")
    outputs = per_instance("num_output_tokens")
    computed = per_instance("num_computed_total")
    for x in cluster.instances:
        e = x.engine
        output = outputs[x.index]
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
                "num_requests": x.num_finished,
                "num_prompt_tokens": prompts[x.index],
                "num_output_tokens": output,
                "num_computed_tokens": computed[x.index],
                "num_steps": e.num_steps,
                "num_preemptions": e.num_preemptions,
                "busy_s": x.busy_s,
                "utilization": x.busy_s / span,
                "request_throughput": x.num_finished / span,
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


def _itl_samples(
    instances: Sequence[Any], gaps: list[float], *, release: bool = False, narrow: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Every inter-token sample: instance by instance, then the PD first gaps (weight 1).

    Copied from each instance's packed columns straight into the float64 / int64 result, with
    no per-instance copies in between (28 M samples on a day of a 64-instance cluster).
    ``release`` empties each instance's columns once copied (the run is over), so they and the
    result are not held at once. ``narrow`` keeps the weights in the columns' integer type
    (uint8 unless one overflowed) instead of int64: the same multiplicities, 7 bytes a sample
    less, for a summary that does not keep them.
    """
    for x in instances:
        x.drain_itl()
    total = sum(len(x.itl_values) for x in instances) + len(gaps)
    wtype = np.int64
    if narrow:
        wtype = np.result_type(np.uint8, *[x.itl_weights.view().dtype for x in instances])
    values = np.empty(total, dtype=np.float64)
    weights = np.empty(total, dtype=wtype)
    at = 0
    for x in instances:
        v, w = x.itl_values.view(), x.itl_weights.view()
        n = len(v)
        values[at : at + n] = v
        weights[at : at + n] = w
        at += n
        if release:
            del v, w  # views of the arrays dropped next
            x.itl_values = Column("d")
            x.itl_weights = Column("B")
            return_free_memory()
    values[at:] = gaps
    weights[at:] = 1
    return values, weights


def _makespan(table: dict[str, np.ndarray]) -> float:
    """Last finish minus first arrival over the request table (0 for no rows)."""
    arrivals = table[RC.ARRIVAL_TIME_S.value]
    finishes = table[RC.FINISH_TIME_S.value]
    return float(np.nanmax(finishes) - np.nanmin(arrivals)) if len(arrivals) else 0.0


def _summary_only(cluster: Any, steps: Any) -> tuple[dict[str, Any], float]:
    """The summary and makespan of a ``records="summary"`` cluster, releasing as it goes.

    The request columns go before the inter-token samples are gathered, the instances'
    sample columns as they are copied, and the ITL statistics come from ``itl_statistics``
    (the values of ``summary_values``' without its per-bucket sorts), so the peak is the
    samples and one float64 copy of their weights.
    """
    from llmsched_gym.metrics.summary import summary_values

    table = _summary_columns(cluster)
    summary = summary_values(table, steps, itl=None)
    makespan = _makespan(table)
    del table
    values, weights = _itl_samples(cluster.instances, [], release=True, narrow=True)
    stats = itl_statistics(values, weights)
    names = (Metric.ITL_S_MEAN, Metric.ITL_S_P50, Metric.ITL_S_P90, Metric.ITL_S_P99)
    for name, value in zip(names, stats, strict=True):
        summary[name.value] = value
    return summary, makespan


def cluster_result(
    cluster: Any,
    jobs: Sequence[Job],
    *,
    wall_s: float,
    record_steps: bool,
    release_itl: bool = False,
):
    """Build the :class:`ClusterResult` of a finished ``Cluster``.

    ``release_itl`` empties the instances' inter-token columns as they are copied into the
    result (``run_cluster``, whose cluster is done), so the two are not held at once. A
    cluster with ``records="summary"`` gives a result without per-request records or ``itl``.
    """
    from llmsched_gym.metrics.summary import summary_values
    from llmsched_gym.metrics.table import request_table

    sync = getattr(cluster, "sync", None)
    if sync is not None:  # a truncated run may leave decode stretches pending
        sync()
    full = cluster.records.keep_specs
    steps = None
    if record_steps:
        from llmsched_gym.metrics.records import steps_frame

        steps = [steps_frame(x.engine.step_columns()) for x in cluster.instances]
    one = len(cluster.instances) == 1
    steps_one = steps[0] if steps and one else None
    if full:
        raw, gaps = _merged_columns(cluster)
        table = request_table(raw)
        del raw
        itl = _itl_samples(cluster.instances, gaps, release=release_itl)
        summary = summary_values(table, steps_one, itl=itl)
        makespan = _makespan(table)
    else:
        table, itl = {}, None
        summary, makespan = _summary_only(cluster, steps_one)
    engines = [x.engine for x in cluster.instances]
    summary["num_refused"] = len(cluster.refused)
    summary["num_aborted"] = sum(len(e.aborted) for e in engines)  # 0: clusters refuse cancels
    summary["num_steps"] = sum(e.num_steps for e in engines)
    summary["prefix_cache_queries"] = sum(e.kv.queries for e in engines)
    summary["prefix_cache_hits"] = sum(e.kv.hits for e in engines)
    instances = instance_table(cluster, makespan)
    result = ClusterResult(
        request_table=table,
        summary=summary,
        instances=instances,
        gpus=gpu_table(instances, makespan),
        stage_shares=stage_shares(table, [x.name for x in cluster.instances]) if full else None,
        itl=itl,
        steps=steps,
        router=router_name(cluster.router),
        schedulers=[getattr(x.policy, "name", type(x.policy).__name__) for x in cluster.instances],
        cost_models=[x.cost_model_name for x in cluster.instances],
        configs=[x.engine.config for x in cluster.instances],
        num_steps=summary["num_steps"],
        num_fast_forward_steps=sum(e.num_ff_steps for e in engines),
        wall_s=wall_s,
        records="full" if full else "summary",
    )
    if jobs:
        from llmsched_gym.metrics.records import jobs_frame

        result.jobs = jobs_frame(result.requests, jobs)
    return result
