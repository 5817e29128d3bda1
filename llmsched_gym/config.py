"""Engine settings with vLLM's names, units and defaults, validated at the boundary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from llmsched_gym import _json, _yaml
from llmsched_gym.errors import ConfigError, show

SCHEDULING_POLICIES = ("fcfs", "priority")
MAX_SETTING = 2**31 - 1
"""Largest integer setting: the compiled core holds them in C integers, so a larger value is
refused here, with the same error in pure Python."""


FIXED_SETTINGS: dict[str, tuple[Any, str]] = {
    "max_num_queued_reqs": (
        None,
        "vLLM's API server refuses requests (HTTP 503) by its own count of unfinished requests, "
        "which lags the engine core; the simulator has no API-server process",
    ),
    "max_num_queued_tokens": (
        None,
        "vLLM's API server refuses requests (HTTP 503) by its own count of prompt tokens still "
        "in prefill, which lags the engine core; the simulator has no API-server process",
    ),
    "scheduler_reserve_full_isl": (
        True,
        "the simulator admits a request as vLLM's default does, only when blocks for its whole "
        "prompt are free; the first-chunk-only check is not simulated",
    ),
    "max_num_scheduled_tokens": (
        None,
        "a scheduled-token budget below max_num_batched_tokens (speculative decoding) is not "
        "simulated; set max_num_batched_tokens instead",
    ),
    "max_num_active_seqs": (
        None,
        "a running-queue cap below max_num_seqs is not simulated; set max_num_seqs instead",
    ),
    "watermark": (
        0.0,
        "the share of KV blocks kept free when admitting is not simulated",
    ),
    "prefill_schedule_interval": (
        1,
        "data-parallel prefill throttling is not simulated (one engine per instance)",
    ),
}
"""vLLM 0.32.0 scheduler and cache settings that change scheduling decisions but that the
simulator does not model: an engine config may name them only with vLLM's default (what the
simulator does), and any other value is refused with an error naming the key and the value.
The inventory of every setting is in ``docs/vllm_config_inventory.md``."""


VLLM_KEY_HINTS: dict[str, str] = {
    "policy": "vLLM's SchedulerConfig field; the engine-config key is scheduling_policy",
    "num_gpu_blocks_override": "use num_gpu_blocks",
    "gpu_memory_utilization": "it only sizes the KV cache: set num_gpu_blocks (a cost "
    "profile derives it from GPU memory)",
    "kv_cache_memory_bytes": "it only sizes the KV cache: set num_gpu_blocks",
    "cache_dtype": "it only sizes the KV cache: set num_gpu_blocks",
    "sliding_window": "sliding-window attention is not simulated (one full-attention KV cache "
    "group)",
    "kv_offloading_size": "CPU KV-cache offloading is not simulated",
    "kv_offloading_backend": "CPU KV-cache offloading is not simulated",
    "prefix_match_unit": "prefix-cache hits land on block_size boundaries only",
    "scheduler_cls": "pick the scheduler with --scheduler (simulate's scheduler argument)",
    "stream_interval": "no effect on scheduling (API-server streaming); remove it",
    "prefix_caching_hash_algo": "no effect on scheduling (the simulator's prefix keys never "
    "collide); remove it",
    "disable_chunked_mm_input": "no effect on text-only requests; remove it",
    "disable_hybrid_kv_cache_manager": "no effect with one full-attention KV cache group; "
    "remove it",
}
"""Hints for vLLM setting names that are not engine-config keys (see the inventory)."""


def _unknown_keys_message(data: dict[str, Any], unknown: list, keys: tuple[str, ...]) -> str:
    """The error for keys that are neither settings nor ``FIXED_SETTINGS``: key=value, hint."""
    named = []
    for key in unknown:
        hint = VLLM_KEY_HINTS.get(key)
        named.append(f"{key}={show(data[key])}" + (f" ({hint})" if hint else ""))
    return f"unknown key(s) {'; '.join(named)}; allowed keys are {list(keys)}"


def _check_fixed(data: dict[str, Any], source: str) -> None:
    """Refuse a ``FIXED_SETTINGS`` key set to anything but vLLM's default (see there)."""
    for key in FIXED_SETTINGS.keys() & data.keys():
        default, reason = FIXED_SETTINGS[key]
        value = data[key]
        same_type = isinstance(value, bool) == isinstance(default, bool)
        if not (same_type and value == default and (value is None) == (default is None)):
            raise ConfigError(
                f"{source}: {key}={show(value)} is not supported: {reason}. Only vLLM's "
                f"default {key}={show(default)} is simulated; remove the key or set it to that"
            )


VLLM_MAX_NUM_BATCHED_TOKENS = 8192
"""vLLM 0.32.0's token budget per step (``SchedulerConfig.max_num_batched_tokens`` for online
serving with chunked prefill): the one copy of it, which every default in the package reads."""

VLLM_MAX_NUM_SEQS = 256
"""vLLM 0.32.0's cap on running requests (``SchedulerConfig.max_num_seqs``): the one copy."""


# Default cost models, each named for where it applies: different entry points serve different
# users, so they keep different defaults (changing one would change every result computed without
# naming a model); every result records the model it ran (``SimulationResult.cost_model``, the
# command line's header lines).

API_COST_MODEL = "constant:1.0"
"""``simulate()``, ``run_cluster``, ``InstanceSpec`` and ``instance_specs`` without a model:
every step costs one second, so a schedule (which request runs in which step) is visible with no
profile; a timing result should name its model."""

CLI_COST_MODEL = "vidur:llama-2-70b@h100-80gb/tp4"
"""The command line's ``simulate``, ``compare`` and ``bench`` without ``--cost-model`` (and
without a scenario): Llama-2-70B on four H100-80GB (Vidur-composed profile)."""

SCENARIO_COST_MODEL = "vidur:llama-2-70b@a100-80gb/tp2"
"""A scenario file without ``cost_model``: Llama-2-70B on two A100-80GB (Vidur-composed)."""

TEXT2SQL_SLO_COST_MODEL = "roofline:llama-3.1-70b@a100-80gb/tp8"
"""The Text-to-SQL workloads' base SLO when the caller gives no model: Llama-3.1-70B on eight
A100-80GB (HexGen-Text2SQL, §5.1), priced by the roofline."""


@dataclass(frozen=True)
class EngineConfig:
    """Settings of one simulated engine instance (the keys of ``--engine-config``).

    Field names, meanings and defaults follow vLLM 0.32.0's ``SchedulerConfig`` and
    ``CacheConfig``; ``num_gpu_blocks`` counts vLLM's reserved null block.
    """

    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS
    """Token budget of one engine step (vLLM's chunked-prefill default for online serving)."""
    max_num_seqs: int = VLLM_MAX_NUM_SEQS
    """Most requests in the running queue at once (vLLM's default)."""
    block_size: int = 16
    """Tokens per KV-cache block (vLLM's default on GPUs)."""
    num_gpu_blocks: int = 8192
    """KV-cache blocks including block 0, which vLLM reserves as the null block.

    A cost profile can derive it from GPU memory (``profile.num_gpu_blocks(...)``); the default is
    only a size that fits typical traces.
    """
    enable_prefix_caching: bool = True
    """Reuse full KV blocks across requests by chain hash (vLLM V1 default: on)."""
    scheduling_policy: str = "fcfs"
    """``fcfs`` or ``priority`` (lower ``priority`` first, then arrival time, then request id)."""
    long_prefill_token_threshold: int = 0
    """When > 0 and more than one request is running or waiting, cap each request's new tokens
    per step at this value (vLLM's partial-prefill knob); 0 disables the cap."""
    max_model_len: int | None = None
    """Longest request in tokens (prompt + max_tokens), vLLM's ``--max-model-len``.

    Where settings come from a file, a mapping or the CLI (``resolve_config``), an absent key is
    derived as vLLM derives it: the cost profile's model's context length
    (``max_position_embeddings``). ``null`` (None, also this class's default) sets no limit,
    a simulator-only choice that shipped scenarios whose traces outgrow their model's context
    make explicitly. A longer request is refused with vLLM's message (``admit``)."""
    async_scheduling: bool = False
    """Schedule step N+1 before step N's output is known, as vLLM's ``AsyncScheduler`` does
    (vLLM 0.32.0 ``--async-scheduling``; its default on GPUs). Off by default: the simulator's
    published figures and the reference behaviour are vLLM's synchronous ``Scheduler``, which is
    what a CPU engine and ``async_scheduling=False`` run. See README, "Async scheduling"."""
    long_prefill_token_threshold_adaptive: bool = False
    """vLLM's default. ``True`` (with a threshold > 0): the cap is at least
    ``max_num_batched_tokens // (running + waiting requests)`` (``prefill_cap``). Only the
    ``vllm-v1`` scheduler implements it."""
    enable_chunked_prefill: bool = True
    """vLLM's default. ``False``: a waiting (or preempted) request is admitted only if its
    tokens (capped by ``long_prefill_token_threshold``) fit the step's remaining token budget,
    and the waiting phase stops at the first that does not (``Scheduler.schedule``); vLLM then
    requires ``max_num_batched_tokens >= max_model_len``. Only the ``vllm-v1`` scheduler
    implements it."""

    def __post_init__(self) -> None:
        m = self.max_model_len
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or not 1 <= m):
            raise ConfigError(f"max_model_len must be a positive integer or null, got {show(m)}")
        if m is not None and m > MAX_SETTING:
            raise ConfigError(f"max_model_len must be at most {MAX_SETTING:,}, got {show(m)}")
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {show(value)}")
            if value > MAX_SETTING:
                raise ConfigError(
                    f"{name} must be at most {MAX_SETTING:,} (2**31 - 1), got {show(value)}"
                )
        if self.num_gpu_blocks < 2:
            raise ConfigError(
                f"num_gpu_blocks must be >= 2 (block 0 is vLLM's reserved null block), "
                f"got {self.num_gpu_blocks}"
            )
        if not isinstance(self.enable_prefix_caching, bool):
            raise ConfigError(
                "enable_prefix_caching must be true or false, got "
                f"{show(self.enable_prefix_caching)}"
            )
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(
                f"scheduling_policy must be one of {SCHEDULING_POLICIES}, "
                f"got {show(self.scheduling_policy)}"
            )
        if not isinstance(self.long_prefill_token_threshold_adaptive, bool):
            raise ConfigError(
                "long_prefill_token_threshold_adaptive must be true or false, got "
                f"{show(self.long_prefill_token_threshold_adaptive)}"
            )
        if not isinstance(self.enable_chunked_prefill, bool):
            raise ConfigError(
                "enable_chunked_prefill must be true or false, got "
                f"{show(self.enable_chunked_prefill)}"
            )
        if not isinstance(self.async_scheduling, bool):
            raise ConfigError(
                f"async_scheduling must be true or false, got {self.async_scheduling!r}"
            )
        t = self.long_prefill_token_threshold
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= MAX_SETTING:
            raise ConfigError(
                f"long_prefill_token_threshold must be an integer in [0, {MAX_SETTING:,}], "
                f"got {show(t)}"
            )

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The settings an engine-config file may hold.

        ``FIXED_SETTINGS`` keys may appear too, at their vLLM defaults only.
        """
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "engine config") -> EngineConfig:
        """Build a config from a mapping; unknown keys are errors that name the key.

        A ``FIXED_SETTINGS`` key is accepted at vLLM's default (which the simulator models) and
        refused with any other value, naming the key and the value.
        """
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source}: expected a mapping of settings, got {type(data).__name__}"
            )
        unknown = sorted(set(data) - set(cls.keys()) - FIXED_SETTINGS.keys(), key=str)
        if unknown:
            raise ConfigError(f"{source}: " + _unknown_keys_message(data, unknown, cls.keys()))
        _check_fixed(data, source)
        try:
            return cls(**{k: v for k, v in data.items() if k not in FIXED_SETTINGS})
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> EngineConfig:
        """Read a JSON or YAML engine-config file (by suffix; JSON otherwise)."""
        return cls.from_dict(cls.read_settings(path), source=str(path))

    @classmethod
    def read_settings(cls, path: str | Path) -> dict[str, Any]:
        """The settings a JSON/YAML engine-config file sets, validated, without defaults added."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read engine config {path}: {exc.strerror}") from None
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                data = _yaml.safe_load(text)
            else:
                data = _json.loads(text)
        except Exception as exc:  # noqa: BLE001 - any parse error becomes a ConfigError
            raise ConfigError(f"engine config {path} is not valid JSON/YAML: {exc}") from None
        data = data or {}
        cls.from_dict(data, source=str(path)).verify_vllm_limits(str(path))  # validate
        return data

    def replace(self, **changes: Any) -> EngineConfig:
        """Return a copy with some fields changed (validated like the constructor)."""
        return self.from_dict({**asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (the engine-config file format).

        An unset ``max_model_len``, and ``enable_chunked_prefill`` and
        ``long_prefill_token_threshold_adaptive`` at their defaults, are left out, so files and
        summaries keep their keys.
        """
        data = asdict(self)
        if data["max_model_len"] is None:
            del data["max_model_len"]
        if not data["long_prefill_token_threshold_adaptive"]:
            del data["long_prefill_token_threshold_adaptive"]
        if data["enable_chunked_prefill"]:
            del data["enable_chunked_prefill"]
        return data

    def prefill_cap(self, num_eligible: int) -> int:
        """The step's cap on one request's new tokens (0: none), as vLLM's ``schedule()``.

        ``long_prefill_token_threshold`` applies only when more than one request is running or
        waiting (``num_eligible``, counted when the step begins); adaptive, it is raised to the
        fair share ``max_num_batched_tokens // num_eligible``.
        """
        t = self.long_prefill_token_threshold if num_eligible > 1 else 0
        if t > 0 and self.long_prefill_token_threshold_adaptive:
            share = self.max_num_batched_tokens // num_eligible
            if share > t:
                t = share
        return t

    def verify_vllm_limits(self, source: str = "engine settings") -> None:
        """The cross-field checks vLLM's ``SchedulerConfig`` makes when a server starts.

        Run where a user's settings enter: the CLI, scenario files and engine-config files.
        ``EngineConfig(...)`` in Python keeps accepting engines vLLM would not start (the formal
        models of InferMax's analysis, tiny test engines).

        Raises:
            ConfigError: ``max_num_batched_tokens < max_num_seqs`` (vLLM: every running sequence
                must be able to get one token per step), or ``long_prefill_token_threshold``
                above ``max_model_len``.
        """
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"{source}: max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f"greater than or equal to max_num_seqs ({self.max_num_seqs}) (vLLM's rule); "
                "raise max_num_batched_tokens or lower max_num_seqs"
            )
        m = self.max_model_len
        if m is not None and not self.enable_chunked_prefill and self.max_num_batched_tokens < m:
            raise ConfigError(
                f"{source}: max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller "
                f"than max_model_len ({m}) with enable_chunked_prefill=false: vLLM then could "
                "not schedule the longest requests; raise max_num_batched_tokens or lower "
                "max_model_len (vLLM's rule)"
            )
        if m is not None and self.long_prefill_token_threshold > m:
            raise ConfigError(
                f"{source}: long_prefill_token_threshold ({self.long_prefill_token_threshold}) "
                f"must be at most max_model_len ({m})"
            )

    def refusal(self, spec: Any) -> str | None:
        """vLLM's message refusing ``spec``, or None when it fits ``max_model_len``.

        vLLM rejects a prompt longer than ``max_model_len`` ("The decoder prompt (length N) is
        longer than the maximum model length of M"), and a request whose prompt and
        ``max_tokens`` together exceed it (the OpenAI server's "maximum context length"); the
        server answers either with HTTP 400 and serves the other requests.
        """
        m = self.max_model_len
        if m is None:
            return None
        p = spec.prompt_len
        if p > m:
            return (
                f"The decoder prompt (length {p}) is longer than the maximum model length of "
                f"{m}. Make sure that `max_model_len` is no smaller than the number of text "
                "tokens."
            )
        if p + spec.max_tokens > m:
            return (
                f"This model's maximum context length is {m} tokens. However, you requested "
                f"{p + spec.max_tokens} tokens ({p} in the messages, {spec.max_tokens} in the "
                "completion). Please reduce the length of the messages or completion (or raise "
                "max_model_len)."
            )
        return None

    def admit(self, specs: Any) -> tuple[list, list]:
        """(admitted, refused): the requests vLLM's server would serve and those it refuses."""
        if self.max_model_len is None:
            return list(specs), []
        admitted, refused = [], []
        for spec in specs:
            (refused if self.refusal(spec) else admitted).append(spec)
        return admitted, refused

    def check_request_lengths(self, specs: Any, source: str = "the workload") -> None:
        """Raises on the first request longer than ``max_model_len`` (``refusal``'s message).

        For workloads that cannot lose a request (a job's stages) and for the engine itself,
        which sees only admitted requests.
        """
        if self.max_model_len is None:
            return
        for spec in specs:
            reason = self.refusal(spec)
            if reason is not None:
                raise ConfigError(f"{source}: request {spec.request_id!r}: {reason}")
