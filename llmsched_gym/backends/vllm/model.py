"""The model a live engine runs: a tiny Llama with random weights, or any model vLLM can load.

On a machine without a GPU the calibration and validation runs use a tiny Llama-architecture
model described by a hand-written ``config.json`` in a temporary folder and loaded with
``load_format="dummy"`` (random weights): real vLLM kernels, real scheduling, no download. On a GPU
machine the same spec scales up (or ``LiveEngineConfig.model`` names a real checkpoint).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from llmsched_gym.errors import ConfigError


@dataclass(frozen=True)
class TinyModelSpec:
    """Dimensions of a Llama-architecture model with random weights (its ``config.json``)."""

    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    vocab_size: int = 32000
    """Prompt token ids at or above this are folded into it (see ``tokens.prompt_token_ids``)."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"TinyModelSpec.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"TinyModelSpec: hidden_size={self.hidden_size} must be a multiple of "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"TinyModelSpec: num_attention_heads={self.num_attention_heads} must be a multiple "
                f"of num_key_value_heads={self.num_key_value_heads}"
            )

    def kv_cache_bytes(self, num_blocks: int, block_size: int, dtype: str) -> int:
        """Bytes of a KV cache of ``num_blocks`` blocks (K and V of every layer)."""
        itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 4)
        head_dim = self.hidden_size // self.num_attention_heads
        per_token = 2 * self.num_hidden_layers * self.num_key_value_heads * head_dim * itemsize
        return num_blocks * block_size * per_token

    def config_json(self, max_model_len: int, dtype: str) -> dict[str, object]:
        """The Hugging Face ``config.json`` of this model."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": max_model_len,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "torch_dtype": dtype,
        }

    def write(self, folder: str | Path, max_model_len: int, dtype: str) -> Path:
        """Write ``config.json`` into ``folder`` (created) and return the folder."""
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(
            json.dumps(self.config_json(max_model_len, dtype), indent=1), encoding="utf-8"
        )
        return path

    def describe(self) -> str:
        """A short label, e.g. ``tiny-llama-h256-l2``."""
        return f"tiny-llama-h{self.hidden_size}-l{self.num_hidden_layers}"
