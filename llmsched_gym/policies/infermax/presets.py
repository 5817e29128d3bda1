"""InferMax's scheduler knobs (:class:`InferMaxConfig`) and the paper's named configurations.

:data:`PRESETS` holds Table 1's rows (vLLM, Sarathi and their variants, each also with ``-ef``,
the eviction-free reservation of §4.1), §4.6's ranked schedulers and §6's evict-short; the
registry names them ``infermax:<preset>``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmsched_gym.errors import ConfigError

__all__ = ["PRESETS", "PRESET_HELP", "InferMaxConfig"]

PRIORITIES = ("prefill", "decode", "rank")
RUNNING_ORDERS = ("arrival", "processed")
RANK_KEYS = ("arrival", "input", "output")


@dataclass(frozen=True)
class InferMaxConfig:
    """Knobs of Alg. 1; the presets of Table 1, §4.6 and §6 are values of this.

    Attributes:
        priority: ``prefill`` (vLLM's ``[R_w, R_r]``), ``decode`` (Sarathi's
            ``[R_r^d, R_r^p, R_w]``) or ``rank`` (one group ``R_w ∪ R_r`` sorted by ``rank_key``).
        hybrid: Hybrid batching (prefills and decodes in one batch).
        chunked: Chunked prefill (``cand.c`` shrinks to ``P - Σ_B c``).
        prefill_tokens: ``P``; None means ``P = C`` (``max_num_batched_tokens``). Capped at C.
        eviction_free: Reserve ``I + O - 1`` KV tokens at admission (an oracle).
        running_order: ``arrival`` or ``processed`` (``m`` descending: evict-short).
        rank_key: For ``priority="rank"``: ``arrival`` (Rank_org), ``input`` (Rank_I) or
            ``output`` (Rank_O, an oracle).
        histogram: Gate admissions by the output-length histogram (evict-short).
        histogram_threshold: Prefills shorter than this ignore the histogram (code default 0).
    """

    priority: str = "prefill"
    hybrid: bool = False
    chunked: bool = False
    prefill_tokens: int | None = None
    eviction_free: bool = False
    running_order: str = "arrival"
    rank_key: str = "arrival"
    histogram: bool = False
    histogram_threshold: int = 0

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise ConfigError(f"priority must be one of {PRIORITIES}, got {self.priority!r}")
        if self.running_order not in RUNNING_ORDERS:
            raise ConfigError(
                f"running_order must be one of {RUNNING_ORDERS}, got {self.running_order!r}"
            )
        if self.rank_key not in RANK_KEYS:
            raise ConfigError(f"rank_key must be one of {RANK_KEYS}, got {self.rank_key!r}")
        p = self.prefill_tokens
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 1):
            raise ConfigError(f"prefill_tokens (P) must be a positive int or None, got {p!r}")
        if self.eviction_free and self.histogram:
            raise ConfigError("eviction_free and histogram are exclusive (EF reserves I + O - 1)")

    @property
    def oracle(self) -> bool:
        """Whether the configuration needs true output lengths."""
        return self.eviction_free or (self.priority == "rank" and self.rank_key == "output")


_SARATHI_P = 512
_BASE: dict[str, InferMaxConfig] = {
    # Table 1 rows: priority, hybrid batch, chunked prefill, P (None: P = C = 4096 in §4).
    "vllm": InferMaxConfig("prefill", hybrid=False, chunked=False),
    "sarathi": InferMaxConfig("decode", hybrid=True, chunked=True, prefill_tokens=_SARATHI_P),
    "sarathi-pc": InferMaxConfig("decode", hybrid=True, chunked=True),
    "sarathi-nocp": InferMaxConfig("decode", hybrid=True, chunked=False),
    "vllm-hy": InferMaxConfig("prefill", hybrid=True, chunked=False),
    "sarathi-nohy": InferMaxConfig("decode", hybrid=False, chunked=False),
}
PRESETS: dict[str, InferMaxConfig] = {}
for _name, _cfg in _BASE.items():
    PRESETS[_name] = _cfg
    PRESETS[f"{_name}-ef"] = replace(_cfg, eviction_free=True)
PRESETS.update(
    {
        # §4.6 ranked schedulers: one group, hybrid, chunked with P = C (the code's chunk size).
        "rank-org": InferMaxConfig("rank", hybrid=True, chunked=True, rank_key="arrival"),
        "rank-i": InferMaxConfig("rank", hybrid=True, chunked=True, rank_key="input"),
        "rank-o": InferMaxConfig("rank", hybrid=True, chunked=True, rank_key="output"),
        # §6 "ours": Sarathi grouping, P = C, sort running by m (desc), histogram gate.
        "evict-short": InferMaxConfig(
            "decode", hybrid=True, chunked=True, running_order="processed", histogram=True
        ),
        # Ablation: the sort alone (the code's ``sortI`` without ``histogram``).
        "evict-short-nohist": InferMaxConfig(
            "decode", hybrid=True, chunked=True, running_order="processed"
        ),
    }
)
"""Named configurations: Table 1 rows and their ``-ef`` variants, ranked, evict-short."""

PRESET_HELP: dict[str, str] = {
    "vllm": "InferMax Table 1 vLLM: prefill-first, no hybrid, no chunking, P = C",
    "sarathi": "InferMax Table 1 Sarathi: decode-first, hybrid, chunked, P = 512",
    "sarathi-pc": "InferMax Table 1 Sarathi_{P=C}: decode-first, hybrid, chunked, P = C",
    "sarathi-nocp": "InferMax Table 1 Sarathi_nocp: decode-first, hybrid, no chunking",
    "vllm-hy": "InferMax Table 1 vLLM_hy: prefill-first, hybrid, no chunking",
    "sarathi-nohy": "InferMax Table 1 Sarathi_nohy: decode-first, no hybrid, no chunking",
    "rank-org": "InferMax §4.6 Rank_org: one group by arrival, hybrid, chunked P = C",
    "rank-i": "InferMax §4.6 Rank_I: one group by initial input size",
    "rank-o": "InferMax §4.6 Rank_O: one group by output size (oracle)",
    "evict-short": "InferMax §6 ours: Sarathi P = C, running by m desc, evict shortest, histogram",
    "evict-short-nohist": "InferMax §6 sort only (no histogram gate)",
}
