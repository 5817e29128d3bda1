"""Run one trace through one engine: the library entry point behind ``llmsched-gym simulate``.

>>> from llmsched_gym.simulation import simulate
>>> result = simulate("splitwise-conv", scheduler="vllm-v1", cost_model="constant:0.02")
>>> result.summary["ttft_s_p99"]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym._gc import gc_paused
from llmsched_gym.config import API_COST_MODEL, EngineConfig
from llmsched_gym.core.engine import Engine, SchedulingPolicy
from llmsched_gym.core.job import Job
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.results import RequestsFrameMixin
from llmsched_gym.metrics.table import request_columns


@dataclass
class SimulationResult(RequestsFrameMixin):
    """Records of one run; ``requests`` and ``steps`` are DataFrames (columns: metrics enums).

    ``request_table`` and ``step_table`` hold the records as numpy columns; the ``requests``
    and ``steps`` DataFrames are built from them on first use (so runs that only write CSV
    never import pandas).
    """

    request_table: dict[str, np.ndarray]
    summary: dict[str, Any]
    step_table: dict[str, np.ndarray] | None = None
    """Per-step records as numpy columns (``record_steps``), else None; see ``steps``."""
    jobs: Any = None
    """Per-job records (``jobs_frame``) when the workload has jobs, else None."""
    itl: tuple[np.ndarray, np.ndarray] | None = None
    scheduler: str = ""
    cost_model: str = ""
    config: EngineConfig = field(default_factory=EngineConfig)
    num_steps: int = 0
    num_fast_forward_steps: int = 0
    wall_s: float = 0.0
    timeline: dict[str, Any] | None = None
    """The schedule timeline (Chrome trace-event JSON) of ``simulate(timeline=True)``."""
    _frame: Any = field(default=None, repr=False, compare=False)
    _steps: Any = field(default=None, repr=False, compare=False)

    @property
    def steps(self) -> Any:
        """Per-step records as a DataFrame (``StepColumn`` columns), None without them.

        Built from ``step_table`` on first use, so runs that only write CSV never import pandas.
        """
        if self._steps is None and self.step_table is not None:
            from llmsched_gym.metrics.records import steps_frame

            self._steps = steps_frame(self.step_table)
        return self._steps


def resolve_config(
    config: EngineConfig | dict | str | Path | None, cost_model: Any
) -> EngineConfig:
    """An EngineConfig from an object, mapping or file.

    ``num_gpu_blocks`` comes from the cost profile (as vLLM sizes its KV cache) when the config
    does not set it and the profile knows its model and GPU; the profile's ``num_gpu_blocks``
    gets the config's ``block_size``, ``max_num_batched_tokens`` and ``max_num_seqs`` (vLLM's
    profiling batch). ``max_model_len`` comes from the profile's model (its context length, as
    vLLM derives it) when the config has no such key; an explicit null keeps no limit. An
    ``EngineConfig`` object is taken as it is.
    """
    if isinstance(config, EngineConfig):
        return config
    if config is None:
        data: dict = {}
    elif isinstance(config, dict):
        data = dict(config)
    else:
        data = EngineConfig.from_file(config).to_dict()
    if "num_gpu_blocks" not in data:
        derive = getattr(cost_model, "num_gpu_blocks", None)
        if callable(derive):
            data["num_gpu_blocks"] = int(derive(**_capacity_kwargs(data)))
    if "max_model_len" not in data:
        context = getattr(cost_model, "max_model_len", None)
        if callable(context):
            data["max_model_len"] = context()
    return EngineConfig.from_dict(data)


def _capacity_kwargs(data: dict) -> dict[str, Any]:
    """The config's settings that size vLLM's KV cache (``num_gpu_blocks`` keyword arguments).

    vLLM profiles one forward pass of ``max_num_batched_tokens`` tokens and a sampler pass over
    ``max_num_seqs`` rows before sizing the cache, so both change the block count.
    """
    defaults = EngineConfig()
    return {
        name: data.get(name, getattr(defaults, name))
        for name in ("block_size", "max_num_batched_tokens", "max_num_seqs")
    }


def simulate(
    trace: str | Path | Sequence[RequestSpec | Job],
    config: EngineConfig | dict | str | Path | None = None,
    scheduler: str | SchedulingPolicy = "vllm-v1",
    cost_model: Any = API_COST_MODEL,
    *,
    fast_forward: bool = True,
    schedule_log: str | Path | None = None,
    record_steps: bool = False,
    limit: int | None = None,
    progress: bool = False,
    timeline: bool = False,
) -> SimulationResult:
    """Simulate ``trace`` (specs and jobs, a trace file, or a shipped trace name) on one engine.

    Jobs (``llmsched_gym.core.job.Job``) release their stages' requests as predecessors finish.

    Requests longer than ``max_model_len`` are refused, as vLLM's server refuses them, and the
    rest are served; ``summary["num_refused"]`` counts them. Requests whose ``cancel_time``
    comes before they finish are aborted (``summary["num_aborted"]``; their records have a
    NaN ``finish_time_s``). A job cannot lose a request, so an
    over-long request in a job is an error, and so is a ``cancel_time`` on a request of a job
    (``job_id`` or ``stage`` set, or a stage's).

    The schedule log (JSONL, one line per engine step, DESIGN.md contract) is written atomically:
    on any error no partial file is left behind.

    ``timeline=True`` records the schedule timeline into ``result.timeline``: Chrome
    trace-event JSON (``llmsched_gym/metrics/timeline.py``; write it with ``write_trace``).
    Not with ``async_scheduling`` (a ``ConfigError``).
    """
    from llmsched_gym.cost.registry import as_cost_model
    from llmsched_gym.metrics.summary import summary_values
    from llmsched_gym.metrics.table import request_table
    from llmsched_gym.policies.registry import make_policy
    from llmsched_gym.workloads.trace import load_trace

    model = as_cost_model(cost_model)
    cfg = resolve_config(config, model)
    policy = make_policy(scheduler) if isinstance(scheduler, str) else scheduler
    items = list(trace) if not isinstance(trace, (str, Path)) else load_trace(trace, limit=limit)
    specs = [x for x in items if not isinstance(x, Job)]
    jobs = [x for x in items if isinstance(x, Job)]
    if not specs and not jobs:
        if isinstance(trace, (str, Path)):
            raise ConfigError(
                f"trace {os.fspath(trace)} holds no requests (an empty file, or only blank "
                "lines); a trace has one JSON object per line"
            )
        raise ConfigError("the workload holds no requests; pass at least one RequestSpec or Job")
    for x in specs:
        if not isinstance(x, RequestSpec):
            raise ConfigError(f"a workload holds RequestSpecs and Jobs, got {type(x).__name__}")
        if x.cancel_time is not None and (x.job_id is not None or x.stage is not None):
            raise ConfigError(
                f"request {x.request_id!r} has a cancel_time and belongs to job "
                f"{x.job_id!r} (stage {x.stage!r}); a job cannot lose a request (its latency "
                "would be undefined): drop the cancel_time, or the job_id and stage"
            )
    specs, refused = cfg.admit(specs)
    if jobs and cfg.max_model_len is not None:
        from llmsched_gym.workloads.stats import flatten_requests

        cfg.check_request_lengths(flatten_requests(jobs), "a job of the workload")
    if not specs and not jobs:
        raise ConfigError(
            f"every request of the workload is longer than max_model_len ({cfg.max_model_len}), "
            f"so vLLM would refuse them all: {cfg.refusal(refused[0])} Set max_model_len "
            "higher, or to null for no limit"
        )
    with gc_paused():  # no reference cycles in the run or its records; see llmsched_gym._gc
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            log_file = None
            if schedule_log is not None:
                from llmsched_gym.metrics._atomic import atomic_output

                tmp = stack.enter_context(atomic_output(schedule_log))
                log_file = stack.enter_context(open(tmp, "w"))
            engine = Engine(
                cfg,
                policy,
                model,
                fast_forward=fast_forward,
                schedule_log=log_file,
                record_steps=record_steps,
            )
            recorder = None
            if timeline:
                from llmsched_gym.core.timeline import TimelineRecorder

                recorder = TimelineRecorder()
                recorder.attach(engine, f"{policy.name} ({getattr(model, 'name', cost_model)})")
            engine.add_requests(specs)
            if jobs:
                engine.add_jobs(jobs)
            bar = None
            if progress:
                from tqdm import tqdm

                total = len(specs) + sum(job.num_requests for job in jobs)
                bar = stack.enter_context(
                    tqdm(total=total, unit="req", desc=f"simulate {policy.name}", leave=False)
                )
            engine.run(progress=bar.update if bar is not None else None)
        wall = time.perf_counter() - t0
        table = request_table(request_columns(engine.finished, aborted=engine.aborted))
        steps = None
        if record_steps:
            from llmsched_gym.metrics.table import step_table

            steps = step_table(engine.step_columns())
        gaps, weights = engine.itl_values, engine.itl_weights  # lists: fromiter reads them fastest
        itl = (
            np.fromiter(gaps, np.float64, len(gaps)),
            np.fromiter(weights, np.int64, len(weights)),
        )
        summary = summary_values(table, steps, itl=itl)
        summary["num_refused"] = len(refused)
        summary["num_aborted"] = len(engine.aborted)
        summary["num_steps"] = engine.num_steps
        summary["prefix_cache_queries"] = engine.kv.queries
        summary["prefix_cache_hits"] = engine.kv.hits
        result = SimulationResult(
            request_table=table,
            summary=summary,
            step_table=steps,
            itl=itl,
            scheduler=policy.name,
            cost_model=getattr(model, "name", str(cost_model)),
            config=cfg,
            num_steps=engine.num_steps,
            num_fast_forward_steps=engine.num_ff_steps,
            wall_s=wall,
        )
        if jobs:
            from llmsched_gym.metrics.records import jobs_frame

            result.jobs = jobs_frame(result.requests, jobs)
        if recorder is not None:
            result.timeline = recorder.trace(
                {"scheduler": result.scheduler, "cost_model": result.cost_model}
            )
    return result
