"""Engine settings with vLLM's names, units and defaults, validated at the boundary."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from llmsched_gym import _yaml
from llmsched_gym.errors import ConfigError

SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class EngineConfig:
    """Settings of one simulated engine instance (the keys of ``--engine-config``).

    Field names, meanings and defaults follow vLLM 0.32.0's ``SchedulerConfig`` and
    ``CacheConfig``; ``num_gpu_blocks`` counts vLLM's reserved null block.
    """

    max_num_batched_tokens: int = 8192
    """Token budget of one engine step (vLLM's chunked-prefill default for online serving)."""
    max_num_seqs: int = 256
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
    async_scheduling: bool = False
    """Schedule step N+1 before step N's output is known, as vLLM's ``AsyncScheduler`` does
    (vLLM 0.32.0 ``--async-scheduling``; its default on GPUs). Off by default: the simulator's
    published figures and the reference behaviour are vLLM's synchronous ``Scheduler``, which is
    what a CPU engine and ``async_scheduling=False`` run. See README, "Async scheduling"."""

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_gpu_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.num_gpu_blocks < 2:
            raise ConfigError(
                f"num_gpu_blocks must be >= 2 (block 0 is vLLM's reserved null block), "
                f"got {self.num_gpu_blocks}"
            )
        if not isinstance(self.enable_prefix_caching, bool):
            raise ConfigError(
                f"enable_prefix_caching must be true or false, got {self.enable_prefix_caching!r}"
            )
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ConfigError(
                f"scheduling_policy must be one of {SCHEDULING_POLICIES}, "
                f"got {self.scheduling_policy!r}"
            )
        if not isinstance(self.async_scheduling, bool):
            raise ConfigError(
                f"async_scheduling must be true or false, got {self.async_scheduling!r}"
            )
        t = self.long_prefill_token_threshold
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ConfigError(f"long_prefill_token_threshold must be an integer >= 0, got {t!r}")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The exact keys an engine-config file may hold."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "engine config") -> EngineConfig:
        """Build a config from a mapping; unknown keys are errors that name the key."""
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source}: expected a mapping of settings, got {type(data).__name__}"
            )
        unknown = sorted(set(data) - set(cls.keys()))
        if unknown:
            raise ConfigError(
                f"{source}: unknown key(s) {unknown}; allowed keys are {list(cls.keys())}"
            )
        try:
            return cls(**data)
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
                data = json.loads(text)
        except Exception as exc:  # noqa: BLE001 - any parse error becomes a ConfigError
            raise ConfigError(f"engine config {path} is not valid JSON/YAML: {exc}") from None
        data = data or {}
        cls.from_dict(data, source=str(path))  # validate
        return data

    def replace(self, **changes: Any) -> EngineConfig:
        """Return a copy with some fields changed (validated like the constructor)."""
        return self.from_dict({**asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (the engine-config file format)."""
        return asdict(self)
