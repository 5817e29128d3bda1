"""Agents that submissions and the suite load: small, dependency-free policies over the observation.

``LinearRowScorer`` is the Priority agent the noisy cross-entropy method learns
(``baselines/cem_priority.py``; Szita & Lőrincz, 2006, "Learning Tetris using the noisy
cross-entropy method", Neural Computation 18(12)). It lives in the package so that a
submission's ``policy.py`` imports it without reaching into ``baselines/``.

``RuleAgent`` holds the built-in rules (``rule:<name>`` on the command line and in the suite's
baselines, ``RULES``): deployable heuristics that act only through a task's action on the
observation, as a learned agent does, so learners are compared with rules of their own kind
rather than only with whole schedulers. They read no hidden truth (no oracle column).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.envs.observation import REQUEST_FEATURES
from llmsched_gym.errors import ConfigError

__all__ = ["RULES", "LinearRowScorer", "RuleAgent"]


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


_COL = {name: i for i, name in enumerate(REQUEST_FEATURES)}
PREFILL, DECODE = 0, 1  # BatchType's actions (``llmsched_gym.envs.batch_type_v0``)


def _unsquash(x: np.ndarray, scale: float) -> np.ndarray:
    """Invert the observation's ``n / (n + scale)`` squashing (``envs.observation``)."""
    x = np.minimum(np.asarray(x, dtype=np.float64), 1.0 - 1e-7)
    return scale * x / (1.0 - x)


def _computed_tokens(table: np.ndarray) -> np.ndarray:
    """Tokens each row has in the KV cache: computed fraction x (prompt + generated tokens)."""
    prompt = _unsquash(table[:, _COL["prompt_tokens"]], 1024.0)
    generated = _unsquash(table[:, _COL["generated_tokens"]], 256.0)
    return table[:, _COL["computed_fraction"]] * (prompt + generated)


RULES: dict[str, dict[str, str]] = {
    "shortest-prompt": {
        "Priority": "rows by prompt length, shortest first (running requests too: the longest "
        "prompt is the first victim)",
        "Select": "running rows first (vLLM's phase (a)), then the waiting row of shortest "
        "prompt; close only when no pick is valid",
        "Preempt": "evict the running row of longest prompt, as vLLM's priority preemption "
        "(max (priority, arrival)) does under shortest-prompt priorities",
    },
    "shortest-remaining-prompt": {
        "Priority": "rows by tokens left to compute, fewest first",
        "Select": "running rows first, then the waiting row with the fewest tokens left to "
        "compute; close only when no pick is valid",
    },
    "least-computed": {
        "Preempt": "evict the running row with the fewest computed tokens (the least work lost "
        "to recompute)",
    },
    "prefill-first": {"BatchType": "prefill-only whenever a prefill candidate exists"},
    "decode-first": {"BatchType": "decode-only whenever a decode candidate exists"},
    "least-backlog": {
        "Route": "the candidate instance with the least estimated backlog (the least-load:backlog "
        "router's key as the observation's instance table shows it; ties to the lower index)",
    },
    "half-budget": {"Knob": "half the token budget, every sequence slot, in every window"},
    "quarter-budget": {"Knob": "a quarter of the token budget, every sequence slot"},
    "half-seqs": {"Knob": "the whole token budget, half the sequence slots"},
}
"""Rule name -> task -> what the rule does there."""

_KNOB = {"half-budget": (0.5, 1.0), "quarter-budget": (0.25, 1.0), "half-seqs": (1.0, 0.5)}
"""Knob rules: fixed (token budget, sequence cap) fractions, the lookahead's other candidates
(``llmsched_gym.lookahead.KNOB_CANDIDATES``) played in every window."""


class RuleAgent:
    """A built-in rule (``RULES``) for one task: SB3's ``predict`` over the observation.

    Keys read only the visible rows' columns (``REQUEST_FEATURES``); ties go to the earlier row
    (the environment's own order: queue order, admission order, vLLM's victim order), so the
    rule is deterministic.
    """

    def __init__(self, rule: str, task: str) -> None:
        tasks = RULES.get(rule)
        if tasks is None:
            raise ConfigError(f"unknown rule {rule!r}; rules: {sorted(RULES)}")
        if task not in tasks:
            fits = sorted(r for r, ts in RULES.items() if task in ts)
            raise ConfigError(
                f"rule {rule!r} has no {task} form (it acts in {sorted(tasks)}); {task} rules: "
                f"{fits or 'none'}"
            )
        self.rule, self.task = rule, task

    def _key(self, table: np.ndarray) -> np.ndarray:
        """Per row: lower is served first (Priority, Select) or evicted first (Preempt)."""
        if self.rule == "shortest-prompt":
            key = table[:, _COL["prompt_tokens"]]
            return -key if self.task == "Preempt" else key
        if self.rule == "shortest-remaining-prompt":
            return table[:, _COL["tokens_to_compute"]]
        return _computed_tokens(table)  # least-computed

    def predict(
        self, obs: Mapping[str, np.ndarray], deterministic: bool = True, action_masks: Any = None
    ) -> tuple[Any, None]:
        """The rule's action at ``obs`` (``action_masks`` as the environment's, when given)."""
        if self.task == "Knob":
            return np.array(_KNOB[self.rule], dtype=np.float32), None
        if self.task == "BatchType":
            masks = np.ones(2, bool) if action_masks is None else np.asarray(action_masks, bool)
            first = PREFILL if self.rule == "prefill-first" else DECODE
            return (first if masks[first] else 1 - first), None
        if self.task == "Priority":
            key = self._key(np.asarray(obs["requests"], dtype=np.float64))
            return (-key).astype(np.float32), None
        rows, keys, size = self._ranking(obs, action_masks)
        if rows.size == 0:  # Select: none left closes the batch (work-conserving)
            return (size - 1 if self.task == "Select" else 0), None
        return int(rows[_first(rows, keys)]), None

    def ties(self, obs: Mapping[str, np.ndarray], action_masks: Any = None) -> np.ndarray:
        """Every action the rule ranks first (Select, Preempt, Route), as a boolean vector.

        The rule's own action breaks ties by row order; an imitator that scores rows without
        their position (``envs.sb3_policies``) cannot see that order, so it is taught the
        whole set of equally good actions (``baselines/warm_start.py``).
        """
        if self.task not in ("Select", "Preempt", "Route"):
            raise ValueError(f"ties are for discrete row actions, not {self.task}'s")
        rows, keys, size = self._ranking(obs, action_masks)
        out = np.zeros(size, dtype=bool)
        if rows.size == 0:
            out[-1] = self.task == "Select"  # the stop action
            return out
        i = _first(rows, keys)
        out[rows[np.all([k == k[i] for k in keys], axis=0)]] = True
        return out

    def _ranking(
        self, obs: Mapping[str, np.ndarray], action_masks: Any
    ) -> tuple[np.ndarray, list[np.ndarray], int]:
        """``(candidate rows, their keys most significant first, number of actions)``.

        Lower keys go first; ``predict`` takes the first candidate (ties to the earlier row),
        ``ties`` every candidate with the same keys. Select: running rows before waiting ones
        (vLLM's phase (a)), then the rule's key, among the valid picks (plus a stop action);
        Preempt: the victim key among the visible rows; Route: the backlog among candidates.
        """
        if self.task == "Route":
            mask = np.asarray(obs["mask"] if action_masks is None else action_masks, dtype=bool)
            rows = np.flatnonzero(mask)
            backlog = np.asarray(obs["instances"], dtype=np.float64)[rows, _backlog_column()]
            return rows, [backlog], mask.shape[0]
        table = np.asarray(obs["requests"], dtype=np.float64)
        k = table.shape[0]
        key = self._key(table)
        rows = np.flatnonzero(np.asarray(obs["mask"], dtype=bool))
        if self.task == "Preempt":
            return rows, [key[rows]], k
        if action_masks is not None:
            rows = np.flatnonzero(np.asarray(action_masks)[:k])
        return rows, [table[rows, _COL["is_running"]] < 0.5, key[rows]], k + 1


def _first(rows: np.ndarray, keys: list[np.ndarray]) -> int:
    """Index (into ``rows``) of the candidate the keys rank first; ties to the earlier row."""
    return int(np.lexsort((rows, *reversed(keys)))[0])


def _backlog_column() -> int:
    from llmsched_gym.envs.route_v0 import INSTANCE_FEATURES

    return INSTANCE_FEATURES.index("backlog")

