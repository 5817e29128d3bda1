"""What knowing every request's true output length is worth through Select's decision (issue 40).

Declared before running (the issue's predictor route): a perfect output-length predictor is an
upper bound on any predictor offered to Select's agents. Two oracle agents act only through
Select's action, on an environment made with ``oracle=True`` (the ``remaining_output`` column):
running rows first (vLLM's phase (a), as every Select rule), then the waiting row with

* ``output``: the fewest true output tokens left;
* ``total``: the fewest tokens left to compute plus true output tokens left.

Each runs on llmsched-v2's Select test workloads beside ``rule:shortest-remaining-prompt`` (the
best agent-kind rule) and the reference ``vllm-v1``. Reported: each one's geometric-mean score
(the reference's mean e2e over its own), and the paired ratio of each oracle against the rule
with a 95% t-interval over workloads. If the oracles' paired ratio stays below 1.02, no
output-length predictor can lift a Select agent 2% above the rule.

    python scripts/select_output_oracle.py [--out out/select-output-oracle]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from llmsched_gym.envs.adapters import AgentPolicy
from llmsched_gym.envs.observation import ORACLE_FEATURES, REQUEST_FEATURES
from llmsched_gym.envs.select_v0 import SelectEnv
from llmsched_gym.leaderboard.agents import RuleAgent
from llmsched_gym.leaderboard.run import simulate_workload
from llmsched_gym.leaderboard.score import geometric_score
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.policies.registry import make_policy

_COL = {name: i for i, name in enumerate((*REQUEST_FEATURES, *ORACLE_FEATURES))}


class OutputOracle:
    """Running rows first, then the waiting row of least true output (``total``: plus the
    tokens left to compute); close when no pick is valid. Ties to the earlier row."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, obs: dict, mask: np.ndarray | None = None) -> int:
        table = np.asarray(obs["requests"], dtype=np.float64)
        k = table.shape[0]
        valid = np.flatnonzero(np.asarray(mask if mask is not None else obs["mask"])[:k])
        if valid.size == 0:
            return k
        out = table[valid, _COL["remaining_output"]]
        key = out + table[valid, _COL["tokens_to_compute"]] if self.key == "total" else out
        waiting = table[valid, _COL["is_running"]] < 0.5
        order = np.lexsort((valid, key, waiting))  # running first, then key, then row
        return int(valid[order[0]])

    def predict(self, obs: dict, deterministic: bool = True, action_masks=None):
        return self(obs, action_masks), None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/select-output-oracle")
    args = ap.parse_args()
    suite = load_suite()
    task = suite.task("Select")
    policies = {
        "vllm-v1": lambda: make_policy("vllm-v1"),
        "rule:shortest-remaining-prompt": lambda: AgentPolicy(
            SelectEnv, RuleAgent("shortest-remaining-prompt", "Select")
        ),
        "oracle:output": lambda: AgentPolicy(SelectEnv, OutputOracle("output"), oracle=True),
        "oracle:total": lambda: AgentPolicy(SelectEnv, OutputOracle("total"), oracle=True),
    }
    rows = []
    workloads = suite.workloads("test", tasks=["Select"])
    for w in tqdm(workloads, desc="Select test workloads"):
        for name, make in policies.items():
            res = simulate_workload(task, make(), w)
            rows.append({"workload": w.id, "level": w.level, "policy": name,
                         "e2e_s_mean": float(res.summary["e2e_s_mean"])})  # fmt: skip
    df = pd.DataFrame(rows).pivot(index="workload", columns="policy", values="e2e_s_mean")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "e2e_s_mean.csv")
    lines = ["| policy | score vs vllm-v1 | paired vs rule [95%] |", "|---|---:|---:|"]
    rule = df["rule:shortest-remaining-prompt"]
    for name in policies:
        score = math.exp(np.log(df["vllm-v1"] / df[name]).mean())
        p = geometric_score((rule / df[name]).to_numpy())
        lines.append(f"| {name} | {score:.3f} | {p.value:.4f} [{p.low:.4f}, {p.high:.4f}] |")
    text = f"Select, llmsched-v2 test split ({len(df)} workloads), mean e2e\n\n" + "\n".join(lines)
    (out / "summary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
