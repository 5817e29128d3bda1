"""HexGen-Text2SQL's request cost model (paper Eq. 2) and Hexgen-Flow's stage-length predictor.

``t_comp^m(q) = t_prefill^m(L_in) + t_decode^m(L_out_hat)`` on instance ``m``'s cost model
(:class:`TCompModel`), with ``L_out_hat`` the stage's mean output length in the HexGen-Flow trace
statistics (:class:`StagePredictor`; the paper predicts lengths with Zheng et al.'s model, the
code uses this mean). Both the dispatcher (:mod:`.dispatch`) and the urgency queue
(:mod:`.urgency`) price requests with them.
"""

from __future__ import annotations

from typing import Any

from llmsched_gym.workloads.text2sql import STEP_NAMES, load_hexgen_stats

__all__ = ["StagePredictor", "TCompModel", "stage_abbr"]


def stage_abbr(request_id: str) -> str | None:
    """Step abbreviation (``"RV"``) of a text2sql request id ``"{job}-{stage}-{i}"``, else None."""
    parts = request_id.rsplit("-", 2)
    if len(parts) != 3:
        return None
    abbr = parts[1].rstrip("0123456789")
    return abbr if abbr in STEP_NAMES else None


class StagePredictor:
    """Stage-typical lengths from the shipped HexGen-Flow statistics (the code's predictor).

    Args:
        trace: HexGen-Flow trace whose per-step means are used.
    """

    def __init__(self, trace: str = "trace3") -> None:
        steps = load_hexgen_stats()["traces"][trace]["steps"]
        self.trace = trace
        self.mean_input = {a: max(1, round(s["input"]["mean"])) for a, s in steps.items()}
        self.mean_output = {a: max(1, round(s["output"]["mean"])) for a, s in steps.items()}
        allout = [s["output"]["mean"] for s in steps.values()]
        self.default_output = max(1, round(sum(allout) / len(allout)))

    def output(self, abbr: str | None) -> int:
        """Predicted output tokens of a request of step ``abbr`` (overall mean when unknown)."""
        return self.mean_output.get(abbr, self.default_output) if abbr else self.default_output

    def typical(self, abbr: str) -> tuple[int, int]:
        """Stage-typical (input, output) pair of step ``abbr`` (Hexgen-Flow EMPIRICAL_IO_LEN)."""
        return self.mean_input[abbr], self.mean_output[abbr]


class TCompModel:
    """Eq. 2 on one cost model: ``t_prefill(L_in) + t_decode(L_out)``, memoised.

    Prefill is one step of the whole prompt; decode is ``L_out - 1`` single-request steps, each
    priced at the mean KV length ``L_in + (L_out - 2) / 2`` (exact for cost models linear in the
    KV length, e.g. the roofline's decode).
    """

    def __init__(self, cost_model: Any) -> None:
        self.cost_model = cost_model
        self._cache: dict[tuple[int, int], float] = {}

    def prefill(self, input_len: int) -> float:
        """Seconds of one prefill step of ``input_len`` tokens."""
        return float(self.cost_model.step_time(input_len, input_len * input_len, 0, 1, 0))

    def decode_step(self, kv_len: float) -> float:
        """Seconds of one decode step of one request reading ``kv_len`` KV tokens."""
        return float(self.cost_model.step_time(1, 0, kv_len, 0, 1))

    def __call__(self, input_len: int, output_len: int) -> float:
        """Seconds one request takes alone (Eq. 2)."""
        key = (int(input_len), int(output_len))
        hit = self._cache.get(key)
        if hit is None:
            n = max(0, key[1] - 1)
            hit = self.prefill(key[0])
            if n:
                hit += n * self.decode_step(key[0] + (n - 1) / 2)
            self._cache[key] = hit
        return hit

    def remaining(self, input_len: int, computed: int, generated: int, output_len: int) -> float:
        """Seconds left of a running request (prefill left, then predicted decode left)."""
        left = 0.0
        if computed < input_len:
            left += self.prefill(input_len - computed)
        n = output_len - max(generated, 1)
        if n > 0:
            left += n * self.decode_step(input_len + generated + (n - 1) / 2)
        return left
