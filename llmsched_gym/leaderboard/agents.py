"""Learned agents that submissions load: small, dependency-free policies over the observation.

``LinearRowScorer`` is the Priority agent the noisy cross-entropy method learns
(``baselines/cem_priority.py``; Szita & Lőrincz, 2006, "Learning Tetris using the noisy
cross-entropy method", Neural Computation 18(12)). It lives in the package so that a
submission's ``policy.py`` imports it without reaching into ``baselines/``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from llmsched_gym.envs.observation import REQUEST_FEATURES
from llmsched_gym.errors import ConfigError

__all__ = ["LinearRowScorer"]


class LinearRowScorer:
    """Observation -> action for the Priority task: ``tanh(requests @ weights)`` per row.

    The same weights score every row, so the ranking does not depend on where a request sits
    in the table; invalid (padding) rows get scores too, which the environment ignores. The
    global features are the same for every row, so they cannot change the order and are left
    out. The call is deterministic (numpy only), so a harness re-run reproduces exactly.
    """

    def __init__(self, weights: Sequence[float]) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(REQUEST_FEATURES),) or not np.all(np.isfinite(w)):
            raise ValueError(
                f"weights must be {len(REQUEST_FEATURES)} finite numbers (one per column of "
                f"REQUEST_FEATURES), got shape {w.shape}"
            )
        self.weights = w

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The action: one score in (-1, 1) per row of the ``requests`` table."""
        table = obs["requests"]
        if table.shape[-1] != len(self.weights):
            raise ValueError(
                f"observation rows have {table.shape[-1]} columns, the scorer {len(self.weights)}"
                " (oracle environments add a column: train on the same environment)"
            )
        return np.tanh(table @ self.weights).astype(np.float32)

    def as_dict(self) -> dict[str, float]:
        """The weights by feature name."""
        return {name: float(x) for name, x in zip(REQUEST_FEATURES, self.weights, strict=True)}

    @classmethod
    def from_dict(cls, weights: Mapping[str, float], where: str = "weights") -> LinearRowScorer:
        """A scorer from weights by feature name: exactly the names of ``REQUEST_FEATURES``."""
        missing = [f for f in REQUEST_FEATURES if f not in weights]
        unknown = sorted(set(weights) - set(REQUEST_FEATURES))
        if missing or unknown:
            raise ConfigError(
                f"{where}: need one weight per request feature {list(REQUEST_FEATURES)}; "
                f"missing {missing}, unknown {unknown}"
            )
        return cls([float(weights[f]) for f in REQUEST_FEATURES])

    @classmethod
    def load(cls, path: str | Path) -> LinearRowScorer:
        """A scorer from a JSON file whose ``weights`` field maps feature names to weights."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read the weights: {exc}") from None
        if not isinstance(data, Mapping) or not isinstance(data.get("weights"), Mapping):
            raise ConfigError(f"{path}: expected an object with a 'weights' mapping")
        return cls.from_dict(data["weights"], where=str(path))
