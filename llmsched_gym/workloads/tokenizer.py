"""Shipped real tokenizers, loaded offline with the ``tokenizers`` package.

Workloads whose prefix sharing must come from real text (RelServe relQueries) tokenize their
fixed prompt text with a real BPE, so block-hash prefix caching sees the same token ids a
served model would. Only the GPT-2 BPE is shipped: it is the BPE of OPT, the model RelServe
(PVLDB, §5.1, Table 3) reports first, and it is MIT-licensed (notice in
``data/tokenizers/LICENSE-whisper-MIT``). OPT's vocabulary assigns other ids to the same merges,
so token *counts* are OPT's exactly; the ids are GPT-2's.

>>> tok = load_tokenizer("gpt2")
>>> encode("gpt2", "Hello world")
(15496, 995)
"""

from __future__ import annotations

import gzip
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from llmsched_gym.errors import ConfigError

__all__ = ["BOS_TOKEN_ID", "TOKENIZERS", "encode", "load_tokenizer"]

TOKENIZERS: dict[str, str] = {"gpt2": "gpt2_tokenizer.json.gz"}
"""Shipped tokenizers: name -> file under ``llmsched_gym/data/tokenizers/``."""

BOS_TOKEN_ID: dict[str, int] = {"gpt2": 50256}
"""The id prepended to every prompt: GPT-2's ``<|endoftext|>`` stands in for OPT's ``</s>``
BOS, which OPT's tokenizer adds to every prompt (``add_special_tokens=True``)."""


@cache
def load_tokenizer(name: str = "gpt2") -> Any:
    """Load a shipped tokenizer (a ``tokenizers.Tokenizer``) by name; cached per process.

    Raises:
        ConfigError: ``name`` is not a shipped tokenizer, or the ``tokenizers`` package is
            missing.
    """
    if name not in TOKENIZERS:
        raise ConfigError(f"tokenizer must be one of {sorted(TOKENIZERS)}, got {name!r}")
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise ConfigError(
            "tokenizer: the 'tokenizers' package is required (pip install tokenizers)"
        ) from exc
    blob = resources.files("llmsched_gym").joinpath("data", "tokenizers", TOKENIZERS[name])
    return Tokenizer.from_str(gzip.decompress(blob.read_bytes()).decode("utf-8"))


@lru_cache(maxsize=4096)
def encode(name: str, text: str) -> tuple[int, ...]:
    """Token ids of ``text`` (no special tokens added); cached, as fixed prompt text repeats."""
    return tuple(load_tokenizer(name).encode(text, add_special_tokens=False).ids)
