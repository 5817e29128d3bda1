"""Drive vLLM 0.32.0's own scheduler over a trace and write a schedule log.

This is the oracle of the differential test (``tests/differential/test_vs_vllm.py``): it runs
vLLM's synchronous ``Scheduler`` (one full-attention KV cache group, no model, no GPU) the way
``EngineCore.step`` does, and records every ``schedule()`` call in the schedule-log format of the
simulator (see ``DESIGN.md``, "Contracts"). It needs only the standard library and vLLM, never
``llmsched_gym``, so that nothing of the simulator can leak into the reference behaviour.

Usage (with the virtualenv made by ``.ci/setup_vllm_venv.sh``)::

    .venv-vllm/bin/python tests/differential/vllm_oracle.py --trace T.jsonl \\
        --engine-config C.json --schedule-log L.jsonl [--step-time 1.0] [--max-steps N] \\
        [--summary S.json] [--async-scheduling]

    .venv-vllm/bin/python tests/differential/vllm_oracle.py --batch MANIFEST.jsonl

``--batch`` runs many traces in one process (vLLM takes seconds to import): each manifest line
is a JSON object with ``trace``, ``engine_config``, ``schedule_log`` and optional ``summary``
paths. A summary (steps, preemptions, resumed admissions, prefix-hit tokens) is printed as one
JSON line on stderr per trace, and written to ``--summary`` / ``summary`` when given.

The engine loop, one iteration per engine step:

1. every not-yet-added request with ``arrival_time <= clock`` joins, in trace order;
2. if nothing is running or waiting, the clock jumps to the next arrival (or the run ends);
3. ``schedule()``; one log line;
4. a ``ModelRunnerOutput`` samples one token for each scheduled request whose
   ``num_computed_tokens`` reached ``num_tokens`` (partial prefill chunks sample nothing); the
   token id is ``1_000_000 + index of the request in the trace``, so generated tokens never
   match a prompt token or another request's tokens;
5. ``update_from_output()``; ``clock += step_time``.

With ``--async-scheduling`` the oracle runs vLLM's ``AsyncScheduler`` instead and drives it as
``EngineCore.step_with_batch_queue`` does (batch queue of depth 2: step N+1 is scheduled before
step N's output is applied); ``_run_async`` defines the clock and what a log line means then.

Multi-turn traces (``parent_request_id``, the simulator's trace contract): a turn's prompt is its
parent's prompt, then the parent's generated tokens, then the turn's own ``prompt_token_ids``
(only its new tokens). A request some turn continues samples, instead of ``1_000_000 + index``,
the ids of ``generated_token_ids`` (written here again from the contract's definition, not
imported), so the turn's prompt holds exactly what vLLM generated for the parent. The summary's
``generated_ids_digest`` lets a test check that the simulator derived the same ids.

Requests are submitted with ``SamplingParams(max_tokens=min(output_len, max_tokens),
ignore_eos=True)``, so each generates exactly that many tokens. ``max_model_len`` is the longest
``prompt_len + max_tokens`` of the trace, so the ``max_model_len`` cap never binds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Fixed before vLLM is imported: a CPU-only, offline, single-threaded scheduler. The V1 model
# runner is forced because under the V2 model runner (the default where Triton is installed)
# vLLM reports resumed requests inside ``scheduled_new_reqs`` instead of in
# ``scheduled_cached_reqs.resumed_req_ids``; scheduling decisions are the same either way.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.output import SchedulerOutput  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

VLLM_VERSION = "0.32.0"
"""The vLLM release whose scheduler this oracle reproduces; any other version is refused."""

GENERATED_TOKEN_BASE = 1_000_000
"""Generated token ids are ``GENERATED_TOKEN_BASE + trace index``: unique to their request
(except for parents of multi-turn traces: ``generated_token_ids``)."""
RESERVED_IDS = 16
GENERATED_VOCAB_SIZE = 32_000
TOKEN_SEED = 0
"""The seed the simulator's ``load_trace`` uses for a trace file."""
_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """SplitMix64: golden-ratio increment, then its finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def generated_token_ids(request_id: str, n: int, seed: int = TOKEN_SEED) -> list[int]:
    """The trace contract's generated ids of a parent (``workloads.multiturn.token_ids``).

    Token ``p`` (0-based among the generated ones) is ``16 + mix(base ^ p) % (32000 - 16)``,
    ``base`` the 8-byte little-endian BLAKE2b digest of ``"output"``, the seed and the request
    id joined by NUL characters.
    """
    key = f"output\0{seed}\0{request_id}".encode()
    base = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    span = GENERATED_VOCAB_SIZE - RESERVED_IDS
    return [RESERVED_IDS + _mix(base ^ p) % span for p in range(n)]


ENGINE_CONFIG_KEYS = frozenset(
    {
        "max_num_batched_tokens",
        "max_num_seqs",
        "block_size",
        "num_gpu_blocks",
        "enable_prefix_caching",
        "scheduling_policy",
        "long_prefill_token_threshold",
    }
)
ENGINE_CONFIG_OPTIONAL_KEYS = frozenset(
    {"enable_chunked_prefill", "long_prefill_token_threshold_adaptive"}
)
"""Keys an engine config may leave out (vLLM's defaults: true and false)."""
TRACE_REQUIRED_KEYS = frozenset({"request_id", "arrival_time", "prompt_token_ids", "output_len"})
TRACE_OPTIONAL_KEYS = frozenset(
    {
        "max_tokens",
        "priority",
        "cancel_time",
        "parent_request_id",
        # Accepted (the trace contract allows them) but irrelevant to vLLM's scheduler.
        "weight",
        "slo_ttft_s",
        "slo_tpot_s",
        "deadline_s",
        "job_id",
        "stage",
        "client_id",
    }
)


class OracleError(Exception):
    """A bad input file, or vLLM behaving outside what the oracle can record."""


@dataclass(frozen=True)
class TraceRequest:
    """One trace line, validated.

    Attributes:
        index: 0-based position in the trace; names the request's generated token id.
        request_id: Unique id, used verbatim as vLLM's request id (ties in the priority
            queue are broken by comparing these strings).
        arrival_time_s: When the request arrives, in seconds.
        prompt_token_ids: The prompt.
        max_tokens: Tokens the request generates: ``min(output_len, max_tokens)``.
        priority: Lower is served first under the priority policy.
        cancel_time_s: When the client aborts it (None: never); see ``_abort_due``.
        parent_request_id: The turn this one continues (its prompt then starts with the
            parent's prompt and generated ids), or None.
        output_token_ids: What it samples, in order (``generated_token_ids`` for a parent).
    """

    index: int
    request_id: str
    arrival_time_s: float
    prompt_token_ids: list[int]
    max_tokens: int
    priority: int
    cancel_time_s: float | None = None
    parent_request_id: str | None = None
    output_token_ids: list[int] = field(default_factory=list)

    def token(self, position: int) -> int:
        """The id it samples as its ``position``-th generated token (0-based)."""
        if self.output_token_ids:
            return self.output_token_ids[position]
        return GENERATED_TOKEN_BASE + self.index


@dataclass(frozen=True)
class EngineSettings:
    """The engine-config file, validated; key names are vLLM's."""

    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    num_gpu_blocks: int
    enable_prefix_caching: bool
    scheduling_policy: str
    long_prefill_token_threshold: int
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold_adaptive: bool = False


@dataclass
class RunSummary:
    """Totals of one oracle run.

    Attributes:
        requests: Requests in the trace.
        steps: ``schedule()`` calls (log lines).
        empty_steps: Steps that scheduled no token.
        preemptions: Preemptions (a request preempted twice counts twice).
        new_admissions: First admissions (equals ``requests``).
        resumed_admissions: Re-admissions of preempted requests.
        prefix_hit_tokens: Prefix-cache hit tokens over all admissions.
        resumed_prefix_hit_tokens: The part of ``prefix_hit_tokens`` from resumed admissions.
        scheduled_tokens: Tokens scheduled over all steps.
        max_model_len: The ``max_model_len`` the scheduler ran with.
        final_time_s: The clock after the last step.
        wall_time_s: Wall-clock seconds of the run, vLLM import excluded.
        aborted: Ids of the requests aborted (``cancel_time``), in abort order.
        parents: Requests a turn of the trace continues (multi-turn traces).
        generated_ids_digest: ``generated_ids_digest`` of the trace ("" without parents).
        vllm_version: ``vllm.__version__``.
    """

    requests: int = 0
    steps: int = 0
    empty_steps: int = 0
    preemptions: int = 0
    new_admissions: int = 0
    resumed_admissions: int = 0
    prefix_hit_tokens: int = 0
    resumed_prefix_hit_tokens: int = 0
    scheduled_tokens: int = 0
    max_model_len: int = 0
    final_time_s: float = 0.0
    wall_time_s: float = 0.0
    aborted: list[str] = field(default_factory=list)
    parents: int = 0
    generated_ids_digest: str = ""
    vllm_version: str = field(default_factory=lambda: str(vllm.__version__))

    def count(self, record: dict[str, Any]) -> None:
        """Add one schedule-log line to the totals."""
        scheduled, new, resumed = record["scheduled"], record["new"], record["resumed"]
        self.steps += 1
        self.empty_steps += not scheduled
        self.preemptions += len(record["preempted"])
        self.new_admissions += len(new)
        self.resumed_admissions += len(resumed)
        self.prefix_hit_tokens += sum(new.values()) + sum(resumed.values())
        self.resumed_prefix_hit_tokens += sum(resumed.values())
        self.scheduled_tokens += sum(scheduled.values())


def load_trace(path: Path) -> list[TraceRequest]:
    """Read and validate a JSONL trace.

    Args:
        path: The trace file, one JSON object per line (blank lines are skipped).

    Returns:
        The requests in file order.

    Raises:
        OracleError: On a malformed line, naming the line and the field.
    """
    requests: list[TraceRequest] = []
    seen_ids: set[str] = set()
    with path.open(encoding="utf-8") as lines:
        for line_no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise OracleError(f"{where}: not JSON ({exc})") from exc
            if not isinstance(row, dict):
                raise OracleError(f"{where}: expected a JSON object")
            missing = TRACE_REQUIRED_KEYS - row.keys()
            if missing:
                raise OracleError(f"{where}: missing field(s) {sorted(missing)}")
            unknown = row.keys() - TRACE_REQUIRED_KEYS - TRACE_OPTIONAL_KEYS
            if unknown:
                raise OracleError(
                    f"{where}: unsupported field(s) {sorted(unknown)} (the oracle needs "
                    "prompt_token_ids, not prompt_len / block_hashes)"
                )
            request_id = row["request_id"]
            if not isinstance(request_id, str) or not request_id:
                raise OracleError(f"{where}: request_id must be a non-empty string")
            if request_id in seen_ids:
                raise OracleError(f"{where}: duplicate request_id {request_id!r}")
            seen_ids.add(request_id)
            arrival = row["arrival_time"]
            if isinstance(arrival, bool) or not isinstance(arrival, int | float):
                raise OracleError(f"{where}: arrival_time must be a number")
            if not math.isfinite(arrival) or arrival < 0:
                raise OracleError(f"{where}: arrival_time must be finite and >= 0")
            prompt = row["prompt_token_ids"]
            parent_id = row.get("parent_request_id")
            if parent_id is not None and (not isinstance(parent_id, str) or not parent_id):
                raise OracleError(f"{where}: parent_request_id must be a non-empty string")
            if (
                not isinstance(prompt, list)
                or not (prompt or parent_id)  # a turn may add no token of its own
                or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
            ):
                raise OracleError(f"{where}: prompt_token_ids must be a non-empty list of int")
            if any(t < 0 or t >= GENERATED_TOKEN_BASE for t in prompt):
                raise OracleError(
                    f"{where}: prompt_token_ids must lie in [0, {GENERATED_TOKEN_BASE})"
                )
            output_len = _positive_int(row["output_len"], where, "output_len")
            max_tokens = output_len
            if "max_tokens" in row:
                max_tokens = min(output_len, _positive_int(row["max_tokens"], where, "max_tokens"))
            priority = row.get("priority", 0)
            if isinstance(priority, bool) or not isinstance(priority, int):
                raise OracleError(f"{where}: priority must be an int")
            cancel = row.get("cancel_time")
            if cancel is not None and (
                isinstance(cancel, bool)
                or not isinstance(cancel, int | float)
                or not math.isfinite(cancel)
                or cancel < arrival
            ):
                raise OracleError(f"{where}: cancel_time must be a finite number >= arrival_time")
            requests.append(
                TraceRequest(
                    index=len(requests),
                    request_id=request_id,
                    arrival_time_s=float(arrival),
                    prompt_token_ids=list(prompt),
                    max_tokens=max_tokens,
                    priority=priority,
                    cancel_time_s=None if cancel is None else float(cancel),
                    parent_request_id=parent_id,
                )
            )
    if not requests:
        raise OracleError(f"{path}: the trace has no requests")
    return _resolve_turns(requests, path)


def _resolve_turns(requests: list[TraceRequest], path: Path) -> list[TraceRequest]:
    """Turns get their history (parent prompt + parent's generated ids); parents their ids."""
    by_id = {r.request_id: r for r in requests}
    parents = {r.parent_request_id for r in requests if r.parent_request_id is not None}
    if not parents:
        return requests
    unknown = parents - by_id.keys()
    if unknown:
        raise OracleError(f"{path}: parent_request_id names unknown requests {sorted(unknown)}")
    done: dict[str, TraceRequest] = {}

    def resolve(request: TraceRequest, depth: int = 0) -> TraceRequest:
        if request.request_id in done:
            return done[request.request_id]
        if depth > len(requests):
            raise OracleError(f"{path}: parent_request_id forms a cycle at {request.request_id}")
        prompt = request.prompt_token_ids
        if request.parent_request_id is not None:
            parent = resolve(by_id[request.parent_request_id], depth + 1)
            if parent.arrival_time_s > request.arrival_time_s:
                raise OracleError(f"{path}: {request.request_id} arrives before its parent")
            prompt = parent.prompt_token_ids + parent.output_token_ids + prompt
        output: list[int] = []
        if request.request_id in parents:
            output = generated_token_ids(request.request_id, request.max_tokens)
        done[request.request_id] = resolved = TraceRequest(
            **{**request.__dict__, "prompt_token_ids": prompt, "output_token_ids": output}
        )
        return resolved

    return [resolve(r) for r in requests]


def generated_ids_digest(trace: Sequence[TraceRequest]) -> str:
    """SHA-256 (first 16 hex digits) of every parent's generated ids, in trace order."""
    payload = {r.request_id: r.output_token_ids for r in trace if r.output_token_ids}
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:16]


def _positive_int(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OracleError(f"{where}: {name} must be an int >= 1")
    return value


def load_engine_settings(path: Path) -> EngineSettings:
    """Read and validate an engine-config JSON file (exactly the contract's keys).

    Args:
        path: The JSON file.

    Returns:
        The settings.

    Raises:
        OracleError: On a missing, unknown or ill-typed key.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise OracleError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise OracleError(f"{path}: expected a JSON object")
    if not ENGINE_CONFIG_KEYS <= raw.keys() <= ENGINE_CONFIG_KEYS | ENGINE_CONFIG_OPTIONAL_KEYS:
        raise OracleError(
            f"{path}: keys must be exactly {sorted(ENGINE_CONFIG_KEYS)}, plus optionally "
            f"{sorted(ENGINE_CONFIG_OPTIONAL_KEYS)}; "
            f"missing {sorted(ENGINE_CONFIG_KEYS - raw.keys())}, unknown "
            f"{sorted(raw.keys() - ENGINE_CONFIG_KEYS - ENGINE_CONFIG_OPTIONAL_KEYS)}"
        )
    for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks"):
        _positive_int(raw[name], str(path), name)
    threshold = raw["long_prefill_token_threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
        raise OracleError(f"{path}: long_prefill_token_threshold must be an int >= 0")
    for name in (
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "long_prefill_token_threshold_adaptive",
    ):
        if not isinstance(raw.get(name, True), bool):
            raise OracleError(f"{path}: {name} must be true or false")
    if raw["scheduling_policy"] not in ("fcfs", "priority"):
        raise OracleError(f"{path}: scheduling_policy must be 'fcfs' or 'priority'")
    return EngineSettings(**raw)


@contextmanager
def _tiny_model_dir(max_model_len: int) -> Iterator[str]:
    """A throw-away model folder holding only a hand-written Llama ``config.json``.

    ``ModelConfig`` needs a model to read its architecture from; nothing is ever loaded or
    run. The vocabulary is large enough for the generated token ids.
    """
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 1,
        "vocab_size": 2 * GENERATED_TOKEN_BASE,
        "max_position_embeddings": max_model_len,
        "torch_dtype": "float32",
    }
    with tempfile.TemporaryDirectory(prefix="vllm-oracle-model-") as folder:
        Path(folder, "config.json").write_text(json.dumps(config), encoding="utf-8")
        yield folder


def build_scheduler(
    settings: EngineSettings, max_model_len: int, model_dir: str, async_scheduling: bool = False
) -> Scheduler:
    """Build vLLM's scheduler the way ``EngineCore`` does, minus the model.

    Args:
        settings: The engine settings.
        max_model_len: ``max_model_len`` of the model config.
        model_dir: A folder with a model ``config.json`` (see ``_tiny_model_dir``).
        async_scheduling: Build vLLM's ``AsyncScheduler`` with ``async_scheduling=True`` (the
            GPU default of vLLM 0.32.0) instead of the synchronous ``Scheduler``. The CPU
            platform turns the flag off while ``VllmConfig`` is built
            (``platforms/cpu.py``), so it is set again afterwards, as a GPU platform leaves it.

    Returns:
        A ``Scheduler`` (or ``AsyncScheduler``) over ``settings.num_gpu_blocks`` blocks (block 0
        is vLLM's null block) in one full-attention KV cache group.

    Raises:
        OracleError: If vLLM changed a setting it was given (e.g. a platform override).
    """
    model_config = ModelConfig(
        model=model_dir,
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        dtype="float32",
        seed=0,
    )
    try:
        # vLLM validates here, e.g. max_num_batched_tokens >= max_num_seqs and
        # long_prefill_token_threshold <= max_model_len (pydantic errors are ValueErrors).
        scheduler_config = SchedulerConfig(
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_num_seqs=settings.max_num_seqs,
            long_prefill_token_threshold=settings.long_prefill_token_threshold,
            enable_chunked_prefill=settings.enable_chunked_prefill,
            long_prefill_token_threshold_adaptive=settings.long_prefill_token_threshold_adaptive,
            policy=settings.scheduling_policy,
            async_scheduling=False,
        )
    except ValueError as exc:
        raise OracleError(f"vLLM rejects the engine config: {exc}") from exc
    cache_config = CacheConfig(
        block_size=settings.block_size,
        enable_prefix_caching=settings.enable_prefix_caching,
    )
    vllm_config = VllmConfig(
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
    )
    vllm_config.cache_config.num_gpu_blocks = settings.num_gpu_blocks
    if async_scheduling:
        vllm_config.scheduler_config.async_scheduling = True
    _check_config_kept(vllm_config, settings, max_model_len, async_scheduling)
    kv_cache_config = KVCacheConfig(
        num_blocks=settings.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                layer_names=["model.layers.0.self_attn.attn"],
                kv_cache_spec=FullAttentionSpec(
                    block_size=settings.block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            )
        ],
    )
    scheduler_cls = AsyncScheduler if async_scheduling else Scheduler
    return scheduler_cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=settings.block_size,
        hash_block_size=settings.block_size,
        log_stats=False,
    )


def _check_config_kept(
    vllm_config: VllmConfig,
    settings: EngineSettings,
    max_model_len: int,
    async_scheduling: bool = False,
) -> None:
    """Refuse to run if ``VllmConfig`` post-processing altered what the trace asks for."""
    sched = vllm_config.scheduler_config
    observed = {
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "max_num_seqs": sched.max_num_seqs,
        "block_size": vllm_config.cache_config.block_size,
        "enable_prefix_caching": vllm_config.cache_config.enable_prefix_caching,
        "scheduling_policy": sched.policy,
        "long_prefill_token_threshold": sched.long_prefill_token_threshold,
    }
    expected = {name: getattr(settings, name) for name in observed}
    extra = {
        "max_model_len": (vllm_config.model_config.max_model_len, max_model_len),
        "enable_chunked_prefill": (sched.enable_chunked_prefill, settings.enable_chunked_prefill),
        "async_scheduling": (bool(sched.async_scheduling), async_scheduling),
        "max_num_scheduled_tokens": (sched.max_num_scheduled_tokens, None),
        "max_num_active_seqs": (sched.max_num_active_seqs, None),
        "long_prefill_token_threshold_adaptive": (
            sched.long_prefill_token_threshold_adaptive,
            settings.long_prefill_token_threshold_adaptive,
        ),
        "scheduler_reserve_full_isl": (sched.scheduler_reserve_full_isl, True),
        "watermark": (sched.watermark, 0.0),
        "speculative_config": (vllm_config.speculative_config, None),
        "kv_transfer_config": (vllm_config.kv_transfer_config, None),
        "use_v2_model_runner": (vllm_config.use_v2_model_runner, False),
    }
    diffs = [
        f"{k}: asked {expected[k]!r}, got {v!r}" for k, v in observed.items() if v != expected[k]
    ]
    diffs += [
        f"{k}: expected {want!r}, got {got!r}" for k, (got, want) in extra.items() if got != want
    ]
    if diffs:
        raise OracleError("vLLM altered the engine configuration: " + "; ".join(diffs))


class _PreemptionRecorder:
    """Records, in order, the requests vLLM preempts.

    ``SchedulerOutput.preempted_req_ids`` is a set, so it loses the preemption order; the
    recorder wraps the scheduler's ``_preempt_request`` on the instance (the class is
    untouched) and the oracle checks the two agree as sets every step.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.order: list[str] = []
        original = scheduler._preempt_request

        def recording_preempt(request: Request, *args: Any, **kwargs: Any) -> None:
            self.order.append(request.request_id)
            original(request, *args, **kwargs)

        scheduler._preempt_request = recording_preempt  # type: ignore[method-assign]

    def take(self) -> list[str]:
        """Return the ids preempted since the last call, in preemption order."""
        taken, self.order = self.order, []
        return taken


def _admissions(
    output: SchedulerOutput, ever_preempted: set[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Split this step's admissions into first admissions and resumptions.

    In vLLM 0.32.0 (V1 model runner) first admissions are ``scheduled_new_reqs``
    (``NewRequestData``) and resumed ones are the ids in
    ``scheduled_cached_reqs.resumed_req_ids``. Both carry ``num_computed_tokens`` as it was
    before this step's tokens were added, i.e. the prefix-cache hit.

    Returns:
        ``(new, resumed)``: request id -> prefix-hit tokens, in scheduling order.

    Raises:
        OracleError: If vLLM's view disagrees with the preemption history.
    """
    new = {data.req_id: data.num_computed_tokens for data in output.scheduled_new_reqs}
    cached = output.scheduled_cached_reqs
    resumed = {
        req_id: num_computed
        for req_id, num_computed in zip(cached.req_ids, cached.num_computed_tokens, strict=True)
        if req_id in cached.resumed_req_ids
    }
    if any(req_id in ever_preempted for req_id in new):
        raise OracleError(f"a preempted request was reported as new: {sorted(new)}")
    if not ever_preempted.issuperset(resumed):
        raise OracleError(f"a never-preempted request was reported as resumed: {sorted(resumed)}")
    return new, resumed


def _block_hasher(scheduler: Scheduler, settings: EngineSettings) -> Any:
    """The request block hasher ``EngineCore`` makes: NONE_HASH seeded, scheduler block size."""
    if not settings.enable_prefix_caching:
        return None
    hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(settings.block_size, hash_fn)


def _add_arrived(
    scheduler: Scheduler,
    arrivals: Sequence[TraceRequest],
    next_arrival: int,
    clock: float,
    block_hasher: Any,
    vllm_requests: dict[str, Request],
) -> int:
    """Add the requests of ``arrivals[next_arrival:]`` that arrived by ``clock``, in trace order.

    Returns:
        The index of the first request not added yet.
    """
    joining = []
    while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_time_s <= clock:
        joining.append(arrivals[next_arrival])
        next_arrival += 1
    for spec in sorted(joining, key=lambda r: r.index):
        request = Request(
            request_id=spec.request_id,
            prompt_token_ids=list(spec.prompt_token_ids),
            sampling_params=SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True),
            pooling_params=None,
            arrival_time=spec.arrival_time_s,
            priority=spec.priority,
            block_hasher=block_hasher,
        )
        vllm_requests[spec.request_id] = request
        scheduler.add_request(request)
    return next_arrival


class _Aborts:
    """Client aborts (``cancel_time``), applied where ``EngineCore`` applies them.

    vLLM's engine core takes aborts from its input queue between steps, with new requests
    (``_process_input_queue`` before ``step`` / ``step_with_batch_queue``); each client's abort
    is its own ``Scheduler.finish_requests(request_id, FINISHED_ABORTED)`` call. Due aborts go
    earliest ``cancel_time`` first, ties in arrival order; a request that finished is ignored
    (``finish_requests`` returns nothing for it).
    """

    def __init__(self, trace: Sequence[TraceRequest]) -> None:
        self.due = sorted(
            (r for r in trace if r.cancel_time_s is not None),
            key=lambda r: (r.cancel_time_s, r.arrival_time_s, r.index),
        )
        self.next = 0
        self.unlogged: list[str] = []
        """Aborted since the last log line: that line's ``aborted``."""
        self.all: list[str] = []

    def apply(self, scheduler: Scheduler, clock: float) -> None:
        """Abort every added, unfinished request with ``cancel_time <= clock``."""
        while self.next < len(self.due) and self.due[self.next].cancel_time_s <= clock:
            spec = self.due[self.next]
            self.next += 1
            # (a request cancelled by now has arrived by now: cancel_time >= arrival_time)
            if scheduler.finish_requests(spec.request_id, RequestStatus.FINISHED_ABORTED):
                self.unlogged.append(spec.request_id)
                self.all.append(spec.request_id)

    def attach(self, record: dict[str, Any]) -> None:
        """Put the aborts since the last line on ``record`` (only when there are some)."""
        if self.unlogged:
            record["aborted"], self.unlogged = self.unlogged, []


def run_oracle(
    trace: Sequence[TraceRequest],
    settings: EngineSettings,
    schedule_log: Path,
    step_time_s: float = 1.0,
    max_steps: int | None = None,
    async_scheduling: bool = False,
) -> RunSummary:
    """Replay a trace through vLLM's scheduler, writing one log line per ``schedule()``.

    Args:
        trace: The requests, in trace order.
        settings: The engine settings.
        schedule_log: Output JSONL file.
        step_time_s: Simulated duration of every step, in seconds.
        max_steps: Stop with an error after this many steps (a guard against a livelock).
        async_scheduling: Drive vLLM's ``AsyncScheduler`` one step ahead with a batch queue of
            depth 2 (``_run_async``) instead of the synchronous ``Scheduler``.

    Returns:
        The run's totals.

    Raises:
        OracleError: If ``max_steps`` is reached, or a request ends in an unexpected state.
    """
    max_model_len = max(len(r.prompt_token_ids) + r.max_tokens for r in trace)
    run = _run_async if async_scheduling else _run
    with _tiny_model_dir(max_model_len) as model_dir:
        summary = run(
            trace, settings, schedule_log, step_time_s, max_steps, max_model_len, model_dir
        )
    summary.parents = sum(1 for r in trace if r.output_token_ids)
    summary.generated_ids_digest = generated_ids_digest(trace) if summary.parents else ""
    return summary


def _run(
    trace: Sequence[TraceRequest],
    settings: EngineSettings,
    schedule_log: Path,
    step_time_s: float,
    max_steps: int | None,
    max_model_len: int,
    model_dir: str,
) -> RunSummary:
    started = time.perf_counter()
    scheduler = build_scheduler(settings, max_model_len, model_dir)
    block_hasher = _block_hasher(scheduler, settings)
    preemptions = _PreemptionRecorder(scheduler)
    block_pool = scheduler.kv_cache_manager.block_pool
    by_id = {r.request_id: r for r in trace}
    vllm_requests: dict[str, Request] = {}
    ever_preempted: set[str] = set()
    finished: dict[str, int] = {}
    summary = RunSummary(requests=len(trace), max_model_len=max_model_len)

    # Arrival order; a step's newcomers then join in trace order (the trace need not be sorted).
    arrivals = sorted(trace, key=lambda r: (r.arrival_time_s, r.index))
    aborts = _Aborts(trace)
    clock = 0.0
    next_arrival = 0
    step = 0
    schedule_log.parent.mkdir(parents=True, exist_ok=True)
    with schedule_log.open("w", encoding="utf-8") as log:
        while True:
            next_arrival = _add_arrived(
                scheduler, arrivals, next_arrival, clock, block_hasher, vllm_requests
            )
            aborts.apply(scheduler, clock)
            if scheduler.get_num_unfinished_requests() == 0:
                if next_arrival == len(arrivals):
                    break
                clock = arrivals[next_arrival].arrival_time_s
                continue
            if max_steps is not None and step >= max_steps:
                raise OracleError(f"stopped after --max-steps={max_steps} steps at t={clock}")

            output = scheduler.schedule()
            num_free_blocks = block_pool.get_num_free_blocks()
            preempted = preemptions.take()
            if set(preempted) != set(output.preempted_req_ids or ()):
                raise OracleError(
                    f"step {step}: recorded preemptions {preempted} differ from "
                    f"SchedulerOutput.preempted_req_ids {sorted(output.preempted_req_ids or ())}"
                )
            ever_preempted.update(preempted)
            new, resumed = _admissions(output, ever_preempted)
            scheduled = dict(output.num_scheduled_tokens)

            req_ids = list(scheduled)
            sampled: list[list[int]] = []
            for req_id in req_ids:
                request = scheduler.requests[req_id]
                done_catching_up = request.num_computed_tokens >= request.num_tokens
                token = by_id[req_id].token(len(request.output_token_ids))
                sampled.append([token] if done_catching_up else [])
            model_output = ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
                sampled_token_ids=sampled,
            )
            engine_outputs = scheduler.update_from_output(output, model_output)
            finished_now = [
                out.request_id
                for outputs in engine_outputs.values()
                for out in outputs.outputs
                if out.finish_reason is not None
            ]
            for req_id in finished_now:
                if req_id in finished:
                    raise OracleError(f"step {step}: {req_id} finished twice")
                finished[req_id] = step
            num_running, num_waiting = scheduler.get_request_counts()

            record = {
                "step": step,
                "time": clock,
                "scheduled": scheduled,
                "new": new,
                "resumed": resumed,
                "preempted": preempted,
                "finished": finished_now,
                "num_free_blocks": num_free_blocks,
                "num_running": num_running,
                "num_waiting": num_waiting,
            }
            aborts.attach(record)
            log.write(json.dumps(record) + "\n")

            summary.count(record)
            step += 1
            clock += step_time_s

    _check_all_finished(trace, vllm_requests, finished, aborts.all)
    summary.aborted = aborts.all
    summary.final_time_s = clock
    summary.wall_time_s = time.perf_counter() - started
    return summary


BATCH_QUEUE_SIZE = 2
"""Depth of the engine core's batch queue under async scheduling (vLLM 0.32.0:
``max_concurrent_batches`` is 2 when ``async_scheduling`` is on and pipeline parallelism off)."""


@dataclass
class _Batch:
    """One scheduled batch waiting in the engine core's queue for its (fabricated) output.

    Attributes:
        output: What ``schedule()`` returned.
        samplers: Ids of the scheduled requests that sample a token when the batch executes:
            those that were not a partial prefill chunk right after the ``schedule()`` call
            (``Request.is_prefill_chunk``, set by ``Scheduler._update_after_schedule``).
        end_s: When the batch's execution ends on the simulated GPU.
        record: Its schedule-log line without ``finished``; None for a batch that is not logged.
    """

    output: SchedulerOutput
    samplers: set[str]
    end_s: float
    record: dict[str, Any] | None


def _run_async(
    trace: Sequence[TraceRequest],
    settings: EngineSettings,
    schedule_log: Path,
    step_time_s: float,
    max_steps: int | None,
    max_model_len: int,
    model_dir: str,
) -> RunSummary:
    """Drive vLLM's ``AsyncScheduler`` the way ``EngineCore.step_with_batch_queue`` does.

    vLLM 0.32.0, ``v1/engine/core.py``, ``step_with_batch_queue``: each call schedules a new
    batch if the scheduler has requests and returns at once while the queue (depth 2) has room
    and the batch has tokens or more requests remain; otherwise it blocks on the oldest batch
    and applies its output (``update_from_output``). So batch N+1 is scheduled before batch N's
    output is known. The simulated GPU runs one batch at a time:

    * ``now`` is the engine core's clock, ``gpu_free`` when the GPU finishes its last batch;
    * when the scheduler is empty and no batch is queued, ``now`` jumps to the next arrival;
    * every loop iteration first adds the requests with ``arrival_time <= now`` (trace order);
    * a batch scheduled at ``now`` starts at ``max(now, gpu_free)`` and lasts ``step_time_s``,
      or 0 s if it has no tokens (nothing is executed);
    * applying the oldest batch moves ``now`` to ``max(now, its end)``.

    One log line per batch that scheduled tokens or preempted a request, written when its
    output is applied: ``time`` is the batch's start; ``scheduled`` / ``new`` / ``resumed`` /
    ``preempted``, ``num_free_blocks``, ``num_running`` and ``num_waiting`` are read right after
    its ``schedule()`` call; ``finished`` lists the requests whose finish was detected when its
    output was applied. With a queue of depth 1 this is the synchronous oracle's log.
    """
    started = time.perf_counter()
    scheduler = build_scheduler(settings, max_model_len, model_dir, async_scheduling=True)
    block_hasher = _block_hasher(scheduler, settings)
    preemptions = _PreemptionRecorder(scheduler)
    block_pool = scheduler.kv_cache_manager.block_pool
    by_id = {r.request_id: r for r in trace}
    vllm_requests: dict[str, Request] = {}
    ever_preempted: set[str] = set()
    finished: dict[str, int] = {}
    summary = RunSummary(requests=len(trace), max_model_len=max_model_len)

    arrivals = sorted(trace, key=lambda r: (r.arrival_time_s, r.index))
    aborts = _Aborts(trace)
    now = gpu_free = 0.0
    next_arrival = 0
    num_schedules = 0
    step = 0
    queue: deque[_Batch] = deque()
    schedule_log.parent.mkdir(parents=True, exist_ok=True)
    with schedule_log.open("w", encoding="utf-8") as log:
        while next_arrival < len(arrivals) or scheduler.has_requests() or queue:
            if not scheduler.has_requests() and not queue:
                now = max(now, arrivals[next_arrival].arrival_time_s)
            next_arrival = _add_arrived(
                scheduler, arrivals, next_arrival, now, block_hasher, vllm_requests
            )
            aborts.apply(scheduler, now)
            if scheduler.has_requests():
                if max_steps is not None and num_schedules >= max_steps:
                    raise OracleError(f"stopped after --max-steps={max_steps} steps at t={now}")
                num_schedules += 1
                output = scheduler.schedule()
                num_free_blocks = block_pool.get_num_free_blocks()
                preempted = preemptions.take()
                if set(preempted) != set(output.preempted_req_ids or ()):
                    raise OracleError(
                        f"schedule {num_schedules}: recorded preemptions {preempted} differ "
                        f"from SchedulerOutput.preempted_req_ids "
                        f"{sorted(output.preempted_req_ids or ())}"
                    )
                ever_preempted.update(preempted)
                new, resumed = _admissions(output, ever_preempted)
                scheduled = dict(output.num_scheduled_tokens)
                num_running, num_waiting = scheduler.get_request_counts()
                has_tokens = output.total_num_scheduled_tokens > 0
                start = max(now, gpu_free)
                gpu_free = start + (step_time_s if has_tokens else 0.0)
                record = None
                if scheduled or preempted:
                    record = {
                        "step": -1,  # numbered when written
                        "time": start,
                        "scheduled": scheduled,
                        "new": new,
                        "resumed": resumed,
                        "preempted": preempted,
                        "finished": [],
                        "num_free_blocks": num_free_blocks,
                        "num_running": num_running,
                        "num_waiting": num_waiting,
                    }
                    aborts.attach(record)
                samplers = {
                    req_id
                    for req_id in scheduled
                    if not scheduler.requests[req_id].is_prefill_chunk
                }
                queue.append(_Batch(output, samplers, gpu_free, record))
                if len(queue) < BATCH_QUEUE_SIZE and (has_tokens or scheduler.has_requests()):
                    continue
            batch = queue.popleft()
            now = max(now, batch.end_s)
            req_ids = list(batch.output.num_scheduled_tokens)
            model_output = ModelRunnerOutput(
                req_ids=req_ids,
                req_id_to_index={req_id: i for i, req_id in enumerate(req_ids)},
                sampled_token_ids=[
                    # The token's position: what this request has received so far (outputs
                    # are applied in batch order, stale ones included).
                    [by_id[req_id].token(len(vllm_requests[req_id].output_token_ids))]
                    if req_id in batch.samplers
                    else []
                    for req_id in req_ids
                ],
            )
            engine_outputs = scheduler.update_from_output(batch.output, model_output)
            finished_now = [
                out.request_id
                for outputs in engine_outputs.values()
                for out in outputs.outputs
                if out.finish_reason is not None
            ]
            record = batch.record
            if record is None:
                if finished_now:
                    raise OracleError(f"an empty batch finished {finished_now} at t={now}")
                continue
            for req_id in finished_now:
                if req_id in finished:
                    raise OracleError(f"step {step}: {req_id} finished twice")
                finished[req_id] = step
            record["step"] = step
            record["finished"] = finished_now
            log.write(json.dumps(record) + "\n")

            summary.count(record)
            step += 1

    _check_all_finished(trace, vllm_requests, finished, aborts.all)
    summary.aborted = aborts.all
    summary.final_time_s = now
    summary.wall_time_s = time.perf_counter() - started
    return summary


def _check_all_finished(
    trace: Sequence[TraceRequest],
    vllm_requests: dict[str, Request],
    finished: dict[str, int],
    aborted: Sequence[str] = (),
) -> None:
    """Every request not aborted finished exactly once, with exactly ``max_tokens`` tokens."""
    aborted = set(aborted)
    if aborted & finished.keys():
        raise OracleError(f"aborted and finished: {sorted(aborted & finished.keys())}")
    for spec in trace:
        if spec.request_id in aborted:
            continue
        if spec.request_id not in finished:
            raise OracleError(f"{spec.request_id} never finished")
        request = vllm_requests[spec.request_id]
        expected = [spec.token(p) for p in range(spec.max_tokens)]
        if list(request.output_token_ids) != expected:
            raise OracleError(
                f"{spec.request_id} generated {len(request.output_token_ids)} tokens, "
                f"expected {spec.max_tokens}"
            )


def run_files(
    trace_path: Path,
    config_path: Path,
    log_path: Path,
    summary_path: Path | None,
    step_time_s: float,
    max_steps: int | None,
    async_scheduling: bool = False,
) -> RunSummary:
    """Run the oracle on one (trace, engine config) pair of files.

    Args:
        trace_path: Trace JSONL.
        config_path: Engine-config JSON.
        log_path: Schedule log to write.
        summary_path: Where to write the summary JSON, if anywhere.
        step_time_s: Seconds per step.
        max_steps: Step limit, or None.
        async_scheduling: Run vLLM's ``AsyncScheduler`` (see ``_run_async``).

    Returns:
        The run's totals (also printed as one JSON line on stderr).
    """
    summary = run_oracle(
        load_trace(trace_path),
        load_engine_settings(config_path),
        log_path,
        step_time_s=step_time_s,
        max_steps=max_steps,
        async_scheduling=async_scheduling,
    )
    payload = {"trace": str(trace_path), "async_scheduling": async_scheduling, **summary.__dict__}
    if summary_path is not None:
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(payload), file=sys.stderr)
    return summary


def _manifest_flag(entry: dict[str, Any], key: str, default: bool) -> bool:
    """A manifest line's boolean ``key`` (``default`` when absent); anything else is an error."""
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise OracleError(f"manifest key {key} must be true or false, got {value!r}")
    return value


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run vLLM 0.32.0's scheduler over a trace and write a schedule log."
    )
    parser.add_argument("--trace", type=Path, help="trace JSONL (token-id prompts)")
    parser.add_argument("--engine-config", type=Path, help="engine-config JSON")
    parser.add_argument("--schedule-log", type=Path, help="schedule log JSONL to write")
    parser.add_argument("--summary", type=Path, help="also write the run's totals here (JSON)")
    parser.add_argument(
        "--batch",
        type=Path,
        help="JSONL manifest of runs: {trace, engine_config, schedule_log[, summary]"
        "[, async_scheduling]} per line (a line's async_scheduling overrides the flag)",
    )
    parser.add_argument(
        "--async-scheduling",
        action="store_true",
        help="drive vLLM's AsyncScheduler one step ahead with a batch queue of depth 2, as "
        "EngineCore.step_with_batch_queue does (vLLM's GPU default); default: the synchronous "
        "Scheduler",
    )
    parser.add_argument("--step-time", type=float, default=1.0, help="seconds per step (1.0)")
    parser.add_argument(
        "--max-steps", type=int, default=1_000_000, help="fail after this many steps (1e6)"
    )
    args = parser.parse_args(argv)
    single = (args.trace, args.engine_config, args.schedule_log)
    if args.batch is None and None in single:
        parser.error("give --trace, --engine-config and --schedule-log, or --batch")
    if args.batch is not None and any(x is not None for x in (*single, args.summary)):
        parser.error("--batch excludes --trace, --engine-config, --schedule-log and --summary")
    if not (args.step_time > 0 and math.isfinite(args.step_time)):
        parser.error("--step-time must be a positive number")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    if not str(vllm.__version__).startswith(VLLM_VERSION):
        print(f"vllm_oracle: needs vLLM {VLLM_VERSION}, found {vllm.__version__}", file=sys.stderr)
        return 2
    args = _parse_args(argv)
    try:
        if args.batch is None:
            run_files(
                args.trace,
                args.engine_config,
                args.schedule_log,
                args.summary,
                args.step_time,
                args.max_steps,
                args.async_scheduling,
            )
            return 0
        for line_no, line in enumerate(args.batch.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            entry = json.loads(line)
            try:
                run_files(
                    Path(entry["trace"]),
                    Path(entry["engine_config"]),
                    Path(entry["schedule_log"]),
                    Path(entry["summary"]) if entry.get("summary") else None,
                    args.step_time,
                    args.max_steps,
                    _manifest_flag(entry, "async_scheduling", args.async_scheduling),
                )
            except OracleError as exc:
                raise OracleError(f"{args.batch}:{line_no}: {exc}") from exc
    except OracleError as exc:
        print(f"vllm_oracle: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
