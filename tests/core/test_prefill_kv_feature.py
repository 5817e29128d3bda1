"""Cost models that ask for it get prefill_kv = Σ m over prefill items (context under chunks)."""

from __future__ import annotations

from engine_helpers import spec

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.policies.registry import make_policy


class Recorder:
    name = "recorder"
    uses_prefill_kv = True

    def __init__(self) -> None:
        self.calls = []

    def step_time(self, tokens, prefill_attn, decode_kv, num_prefill, num_decode, prefill_kv=0):
        self.calls.append((tokens, prefill_attn, decode_kv, num_prefill, num_decode, prefill_kv))
        return 1.0

    def step_times(self, *args):  # pragma: no cover - fast-forward is off here
        raise AssertionError


def test_prefill_kv_is_the_context_under_each_prefill_chunk() -> None:
    cfg = EngineConfig(max_num_batched_tokens=8, max_num_seqs=8, block_size=4, num_gpu_blocks=20)
    eng = Engine(cfg, make_policy("vllm-v1"), Recorder(), fast_forward=False)
    eng.add_requests([spec("a", 20, output_len=2)])  # chunks of 8, 8, 4 tokens
    eng.run()
    prefills = [c for c in eng.cost_model.calls if c[3]]
    assert [(c[0], c[5]) for c in prefills] == [(8, 0), (8, 8), (4, 16)]
    assert [c[1] for c in prefills] == [64, 64 + 2 * 8 * 8, 16 + 2 * 16 * 4]
