"""Create (or refresh) the baseline submission folders the suite declares, one per task x method.

Each folder gets a ``submission.yaml`` and a README (what the policy is, where it comes from);
its ``results.csv`` is written by the evaluation:

    python leaderboards/make_baselines.py                       # folders (existing ones kept)
    llmsched-gym leaderboard evaluate leaderboards/priority/* --task Priority --update
    llmsched-gym leaderboard show --update                      # the task READMEs and plots

Run from the repository root. ``--force`` rewrites existing submission.yaml / README files.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from llmsched_gym.leaderboard.suite import load_suite

PAPERS = {
    "relserve": "RelServe: Fast LLM Inference Serving on Relational Data (Zhang et al., PVLDB), "
    "Alg. 1 and Eq. 8-17",
    "relserve-pp": "RelServe (Zhang et al., PVLDB), its ablation with prefill always first",
    "vllm-sp": "RelServe (Zhang et al., PVLDB), its vLLM-SP baseline (static relQuery priority)",
    "infermax:evict-short": "Optimizing LLM Inference for Database Systems: Cost-Aware "
    "Scheduling for Concurrent Requests (Kim et al., InferMax), §6",
    "proserve": "ProServe: Unified Multi-Priority Request Scheduling for LLM Serving (Huang et "
    "al., arXiv 2512.12928), Alg. 1 SlideBatching",
    "hexgen-pq": "HexGen-Text2SQL: Optimizing LLM Inference Request Scheduling for Agentic "
    "Text-to-SQL Workflows (Peng et al.), Eq. 5-7 urgency queue",
    "gorouting": "ProServe: Unified Multi-Priority Request Scheduling for LLM Serving (Huang et "
    "al., arXiv 2512.12928), Alg. 2",
    "hexgen-wb": "HexGen-Text2SQL: Optimizing LLM Inference Request Scheduling for Agentic "
    "Text-to-SQL Workflows (Peng et al.), Eq. 2-4",
}


def folder_name(policy: str) -> str:
    """``static-priority:shortest-prompt`` -> ``static-priority-shortest-prompt``."""
    return re.sub(r"[^a-z0-9.]+", "-", policy.lower()).strip("-")


def describe(policy: str, interface: str, task: str) -> str:
    """The registry's one-line description of a policy, router or built-in rule."""
    if policy == "random":
        return "uniformly random actions in the task's action space (seeded per workload)"
    if policy.startswith("rule:"):
        from llmsched_gym.leaderboard.agents import RULES

        what = RULES[policy.removeprefix("rule:")][task]
        return f"a rule acting only through the task's action on the observation: {what}"
    if interface == "router":
        from llmsched_gym.cluster.routers import list_routers

        return list_routers().get(policy, policy)
    from llmsched_gym.policies.registry import list_policies

    return list_policies().get(policy, policy)


def main() -> int:
    """Write the folders; print what was written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="leaderboards", help="leaderboards folder")
    parser.add_argument("--force", action="store_true", help="rewrite existing files")
    args = parser.parse_args()
    suite = load_suite()
    for task in suite.tasks.values():
        for policy in task.baselines:
            folder = Path(args.root) / task.name.lower() / folder_name(policy)
            folder.mkdir(parents=True, exist_ok=True)
            text = describe(policy, task.interface, task.name)
            oracle = "(oracle)" in text
            text = text.replace(" (oracle)", "")
            paper = PAPERS.get(policy)
            yaml_path = folder / "submission.yaml"
            if args.force or not yaml_path.exists():
                yaml_path.write_text(
                    f"suite: {suite.version}\n"
                    f"task: {task.name}\n"
                    f"method: {policy}\n"
                    f"policy: {policy}\n"
                    f"oracle: {'true' if oracle else 'false'}\n"
                    f"paper: {paper!r}\n".replace("'", '"')
                    .replace('"None"', "null")
                    .replace("None", "null")
                    + "training: null\n"
                )
                print(f"wrote {yaml_path}")
            readme = folder / "README.md"
            if args.force or not readme.exists():
                ref = " (the task's reference)" if policy == task.reference else ""
                readme.write_text(
                    f"# {task.name}: {policy}{ref}\n\n"
                    f"A baseline of the {suite.version} suite: {text}.\n\n"
                    + (f"Source: {paper}.\n\n" if paper else "")
                    + (
                        "**Oracle**: it reads true output lengths; ranked apart.\n\n"
                        if oracle
                        else ""
                    )
                    + "Not trained: a fixed rule. Results: `results.csv` (one row per held-out "
                    "test workload), written by\n\n"
                    f"```bash\nllmsched-gym leaderboard evaluate leaderboards/{task.name.lower()}/"
                    f"{folder.name} --task {task.name} --update\n```\n\n"
                    "and re-checked by `llmsched-gym leaderboard validate "
                    f"leaderboards/{task.name.lower()}/{folder.name}`.\n"
                )
                print(f"wrote {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
