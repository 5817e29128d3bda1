"""Live engines for the ``live`` tests.

vLLM takes seconds to import and start, so engines are shared across tests; ``live_engines``
holds at most one at a time (a small machine must never run two): asking for a different
configuration closes the current engine first.
"""

from __future__ import annotations

import importlib.util

import pytest

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = (
    "vLLM is not installed here: run .ci/setup_vllm_venv.sh and "
    "`.venv-vllm/bin/python -m pytest -m live tests/backends`"
)


def _small_config(**engine_overrides):
    """A tiny model (head_dim 64: the CPU attention kernel rejects some sizes, e.g. 16), 32-token
    blocks and a KV cache small enough to preempt."""
    from llmsched_gym.backends.vllm.engine import LiveEngineConfig
    from llmsched_gym.backends.vllm.model import TinyModelSpec
    from llmsched_gym.config import EngineConfig

    scheduler_cls = engine_overrides.pop("scheduler_cls", None)
    engine = dict(
        max_num_batched_tokens=256,
        max_num_seqs=16,
        block_size=32,
        num_gpu_blocks=41,
        enable_prefix_caching=True,
    )
    engine.update(engine_overrides)
    return LiveEngineConfig(
        engine=EngineConfig(**engine),
        max_model_len=512,
        tiny=TinyModelSpec(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        ),
        scheduler_cls=scheduler_cls,
    )


class EngineSlot:
    """Holds one live engine; ``get(config)`` reuses it or replaces it."""

    def __init__(self):
        self.engine = None
        self.config = None

    def get(self, config):
        from llmsched_gym.backends.vllm.engine import LiveEngine

        if self.engine is not None and self.config == config:
            return self.engine
        self.close()
        self.engine = LiveEngine(config)
        self.config = config
        return self.engine

    def close(self):
        if self.engine is not None:
            self.engine.close()
            self.engine = None


@pytest.fixture(scope="session")
def live_engines():
    if not HAS_VLLM:
        pytest.skip(SKIP_REASON)
    slot = EngineSlot()
    yield slot
    slot.close()


@pytest.fixture
def small_config():
    """Factory of small live-engine configs (keyword overrides of the engine settings)."""
    return _small_config


@pytest.fixture
def live_engine(live_engines):
    """The default small live engine (vLLM's own scheduler)."""
    return live_engines.get(_small_config())
