"""The live vLLM backend of the environments (``backend="vllm"``): engine, scores, decisions.

``LiveBackend`` owns one ``LiveEngine`` per environment (built at the first ``reset``, rebuilt
only when a later workload needs a longer ``max_model_len``, closed by ``env.close()``) and starts
one ``LiveRun`` per episode. The engine runs vLLM's own scheduler with
``scheduler_cls=policy_scheduler_cls(LiveScorePolicy)``: before every ``schedule()`` vLLM's
waiting queue is ordered, and its preemption victims chosen, by the agent's latest scores.
Observations and rewards come from the simulator's own builder and ledger, reading the run
through ``llmsched_gym.backends.vllm.view.LiveInstance``. Importing this module does not import
vLLM; building a ``LiveBackend`` checks that it is installed and otherwise raises an ImportError
that says what to install.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.job import Job
from llmsched_gym.core.request import RequestStatus
from llmsched_gym.errors import ConfigError
from llmsched_gym.policies.vllm_v1 import VllmV1Policy

LIVE_CLOCKS = ("engine", "wall")
DEFAULT_LIVE_KV_TOKENS = 32768
"""Default cap of the live engine's KV cache, in tokens (see ``live_engine_config``)."""
_LAST = 1 << 40


class LiveScorePolicy(VllmV1Policy):
    """vLLM V1 with the waiting order and the preemption victims an environment's scores give.

    ``set_scores`` (``priority_v0``) stores ``waiting_order`` (visible waiting rows, highest score
    first) and ``running_order`` (visible running rows by score, then the other running requests
    in admission order); ``prepare`` turns them into ranks over every waiting / running request
    (requests without a row follow in the default order). ``priority_key`` is the waiting rank
    (lowest first); ``victim_key`` the running rank (vLLM preempts the max: the last of
    ``running_order`` still running, as the simulator's ``PriorityPolicy`` does).
    """

    name = "env-priority-live"

    def __init__(self) -> None:
        super().__init__()
        self.running_order: list[Any] | None = None
        self.waiting_order: list[Any] | None = None
        self._waiting_rank: dict[str, int] = {}
        self._running_rank: dict[str, int] = {}

    def queue_policy(self, config: Any) -> str:
        """A priority queue: the ranks are written into vLLM's priorities for each step."""
        return "priority"

    def prepare(self, instance: Any) -> None:
        """Rank every waiting and running request for the next step, then forget the orders."""
        waiting = list(self.waiting_order or ())
        seen = {r.request_id for r in waiting}
        waiting += [r for r in instance.waiting if r.request_id not in seen]
        self._waiting_rank = {r.request_id: i for i, r in enumerate(waiting)}
        running = list(self.running_order) if self.running_order else list(instance.running)
        self._running_rank = {r.request_id: i for i, r in enumerate(running)}
        self.running_order = self.waiting_order = None

    def priority_key(self, req: Any) -> int:
        """Position in the step's waiting order (a request without one comes last)."""
        return self._waiting_rank.get(req.request_id, _LAST + req.seq)

    def victim_key(self, req: Any) -> int:
        """Position in the step's running order: vLLM preempts the max."""
        return self._running_rank.get(req.request_id, _LAST + req.seq)


def fcfs_key(req: Any) -> tuple:
    """vLLM's FCFS queue order.

    Preempted requests at the head (latest preemption first), then arrivals in order.
    """
    if req.status is RequestStatus.PREEMPTED:
        return (0, -req.preempt_stamp, 0.0, 0)
    return (1, 0, req.arrival_time, req.seq)


def priority_queue_key(req: Any) -> tuple:
    """vLLM's priority queue order: (priority, arrival_time, request_id)."""
    return (req.priority, req.arrival_time, req.request_id)


def longest_request(specs: Sequence[Any]) -> int:
    """Tokens of the longest request (prompt plus the tokens it generates)."""
    return max((s.prompt_len + min(s.output_len, s.max_tokens) for s in specs), default=1)


def live_engine_config(
    engine: EngineConfig,
    specs: Sequence[Any],
    *,
    max_kv_tokens: int = DEFAULT_LIVE_KV_TOKENS,
    cpu: bool | None = None,
) -> Any:
    """The ``LiveEngineConfig`` a live environment runs: the scenario's settings, scaled.

    Kept as they are: ``max_num_batched_tokens``, ``max_num_seqs``, ``enable_prefix_caching``,
    ``long_prefill_token_threshold`` (clamped to ``max_model_len``, where it caps nothing
    anyway). Changed: ``scheduling_policy`` is ``priority`` (the scores are written into vLLM's
    priorities; the scenario's own discipline orders the requests without a score);
    ``block_size`` is rounded up to a multiple of 32 on the CPU build (its attention kernel needs
    it); ``max_model_len`` is the longest request of the workload rounded up to a block;
    ``num_gpu_blocks`` keeps the scenario's KV capacity in tokens, capped at ``max_kv_tokens``
    (a production GPU's KV cache does not fit a small machine's memory), and never below one
    request of ``max_model_len``. The model is the backend's tiny random-weight Llama
    (``TinyModelSpec()``).
    """
    from llmsched_gym.backends.vllm._deps import is_cpu_build
    from llmsched_gym.backends.vllm.engine import LiveEngineConfig

    if cpu is None:
        cpu = is_cpu_build()
    bs = engine.block_size
    if cpu and bs % 32:
        bs = 32 * math.ceil(bs / 32)
    max_model_len = bs * math.ceil(longest_request(specs) / bs)
    kv_tokens = min((engine.num_gpu_blocks - 1) * engine.block_size, max_kv_tokens)
    blocks = max(kv_tokens // bs, max_model_len // bs) + 1
    threshold = min(engine.long_prefill_token_threshold, max_model_len)
    live = engine.replace(
        block_size=bs,
        num_gpu_blocks=blocks,
        scheduling_policy="priority",
        long_prefill_token_threshold=threshold,
    )
    return LiveEngineConfig(engine=live, max_model_len=max_model_len)


class LiveBackend:
    """One environment's live engine and its current run (see the module docstring)."""

    def __init__(
        self,
        scenario_engine: EngineConfig,
        *,
        config: Any = None,
        clock: str = "engine",
        timer: str = "wall",
        max_kv_tokens: int = DEFAULT_LIVE_KV_TOKENS,
        fcfs_default: bool = True,
    ) -> None:
        from llmsched_gym.backends.vllm._deps import INSTALL_HINT, vllm_available

        if clock not in LIVE_CLOCKS:
            raise ConfigError(f"live_clock must be one of {LIVE_CLOCKS}, got {clock!r}")
        if timer not in ("wall", "cpu"):
            raise ConfigError(f"live_timer must be 'wall' or 'cpu', got {timer!r}")
        if clock == "wall" and timer == "cpu":
            raise ConfigError("live_clock='wall' needs live_timer='wall'")
        if isinstance(max_kv_tokens, bool) or not isinstance(max_kv_tokens, int):
            raise ConfigError(f"live_max_kv_tokens must be an integer, got {max_kv_tokens!r}")
        if max_kv_tokens < 1:
            raise ConfigError(f"live_max_kv_tokens must be >= 1, got {max_kv_tokens!r}")
        if config is not None:
            from llmsched_gym.backends.vllm.engine import LiveEngineConfig

            if not isinstance(config, LiveEngineConfig):
                raise ConfigError(
                    f"live_config must be a LiveEngineConfig, got {type(config).__name__}"
                )
        if not vllm_available():
            raise ImportError(f"backend='vllm': {INSTALL_HINT}")
        self.scenario_engine = scenario_engine
        self.user_config = config
        self.clock = clock
        self.timer = timer
        self.max_kv_tokens = max_kv_tokens
        self.waiting_key = fcfs_key if fcfs_default else priority_queue_key
        self.policy = LiveScorePolicy()
        self.engine: Any = None
        self.run: Any = None

    def _config_for(self, specs: Sequence[Any]) -> Any:
        from llmsched_gym.backends.vllm.scheduler import policy_scheduler_cls

        if self.user_config is not None:
            base = dataclasses.replace(
                self.user_config,
                engine=self.user_config.engine.replace(scheduling_policy="priority"),
            )
        else:
            base = live_engine_config(self.scenario_engine, specs, max_kv_tokens=self.max_kv_tokens)
        return dataclasses.replace(base, scheduler_cls=policy_scheduler_cls(self.policy))

    def start(self, items: Sequence[Any]) -> Any:
        """A fresh run of ``items`` on the engine (built or rebuilt if needed); its instance."""
        from llmsched_gym.backends.vllm.engine import LiveEngine
        from llmsched_gym.backends.vllm.view import LiveInstance

        if any(isinstance(x, Job) for x in items):
            raise ConfigError(
                "backend='vllm' replays plain requests; this scenario's workload has jobs "
                "(dependent requests), which the live backend does not release"
            )
        self.abort()
        need = longest_request(items)
        if self.engine is None or (
            self.user_config is None and self.engine.config.max_model_len < need
        ):
            self.close()
            self.engine = LiveEngine(self._config_for(items))
            self.engine.warmup()
        self.run = self.engine.start(items, clock=self.clock, timer=self.timer)
        return LiveInstance(self.run, self.policy, self.waiting_key)

    def abort(self) -> None:
        """Abort the current run, if any (its unfinished requests leave vLLM)."""
        if self.run is not None:
            self.run.abort()
            self.run = None

    def close(self) -> None:
        """Abort the run and shut the engine down."""
        self.abort()
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def no_preemption_possible(instance: Any) -> bool:
    """Whether the next step surely schedules every running request without a preemption.

    Each running request needs at most ``ceil((computed + n) / bs) - ceil(computed / bs)`` new
    blocks for ``n = min(tokens left, max_num_batched_tokens)`` (its blocks cover its computed
    tokens); when the free blocks (evictable cached ones included, as vLLM counts them) cover
    the sum, no allocation can fail.
    """
    cfg = instance.config
    bs = cfg.block_size
    m = cfg.max_num_batched_tokens
    need = 0
    for r in instance.running:
        computed = r.num_computed_tokens
        n = min(r.num_tokens - computed, m)
        need += -(-(computed + n) // bs) - (-(-computed // bs))
    return need <= instance.num_free_blocks


def advance(instance: Any, policy: LiveScorePolicy, until: float, fast_forward: bool) -> bool:
    """Run the live instance to its next decision; False when the episode cannot go on.

    A decision is due before a step whose schedule the scores can change: one with a waiting
    request (the scores order admission), or one that may need a victim. Other steps run at
    once (``fast_forward``). An idle engine jumps to the next arrival.
    """
    while True:
        instance.admit_arrivals()
        if instance.now >= until:
            return False
        if not instance.has_work:
            if instance.run.next_arrival_time >= until:
                return False
            if not instance.wait_for_arrival():
                return False
            continue
        if fast_forward and not instance.waiting and no_preemption_possible(instance):
            policy.prepare(instance)
            instance.step()
            continue
        return True
