"""The engine's StepPricer: chosen once from the cost model's flags, then no probing."""

from __future__ import annotations

import numpy as np
import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.pricing import StepPricer, step_pricer
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import LinearCostModel
from llmsched_gym.cost.registry import load_cost_model
from llmsched_gym.policies.registry import make_policy


class CountingModel(LinearCostModel):
    """A linear model that counts every read of the optional capabilities."""

    def __init__(self) -> None:
        super().__init__(0.01, 1e-5, 1e-9, 3e-7, 1e-4, 2e-5)
        self.reads: dict[str, int] = {}

    def __getattribute__(self, key):
        if key in ("uses_prefill_kv", "phase_items", "item_priced", "decode_series_longest",
                   "decode_series", "prefill_item_terms"):  # fmt: skip
            reads = object.__getattribute__(self, "reads")
            reads[key] = reads.get(key, 0) + 1
        return object.__getattribute__(self, key)


def test_capabilities_are_read_when_the_engine_starts_only() -> None:
    model = CountingModel()
    cfg = EngineConfig(max_num_batched_tokens=256, max_num_seqs=16, block_size=16,
                       num_gpu_blocks=200)  # fmt: skip
    eng = Engine(cfg, make_policy("vllm-v1"), model)
    at_start = dict(model.reads)
    rng = np.random.default_rng(0)
    eng.add_requests(
        [RequestSpec(f"r{i}", 0.05 * i, int(rng.integers(5, 200)), 60, 60) for i in range(30)]
    )
    eng.run()
    assert eng.num_steps > 100 and eng.num_ff_steps > 50
    assert model.reads == at_start


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("constant:1.0", "StepPricer"),
        ("vidur:llama-2-7b@a100-80gb/tp1", "StepPricer"),
        ("infermax:llama-2-7b", "_ItemPricer"),  # phase_items (and uses_prefill_kv)
        ("torch:llama-2-7b@h200-141gb/tp1", "_ItemPricer"),
    ],
)
def test_each_kind_of_model_gets_its_pricer(spec, kind) -> None:
    model = load_cost_model(spec)
    pricer = step_pricer(model)
    assert isinstance(pricer, StepPricer) and type(pricer).__name__ == kind
    assert pricer.needs_longest == hasattr(model, "decode_series_longest")


def test_prefill_kv_models_get_the_sums_and_prefill_kv() -> None:
    class Model(LinearCostModel):
        uses_prefill_kv = True

        def step_time(self, tokens, attn, dkv, npf, ndc, prefill_kv=0):
            return 1.0 + prefill_kv

    assert type(step_pricer(Model(0.01))).__name__ == "_PrefillKVPricer"
