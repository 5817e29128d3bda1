"""Fingerprints of what the simulator produces, to prove a refactor changes nothing.

Writes one JSON of SHA-256 hashes: every shipped scenario's request table (the scenario run
with its own scheduler) and a trajectory of every registered environment (observations,
rewards and clock of a fixed, deterministic action sequence on a small workload). Run it before
and after a change and compare::

    python scripts/golden_results.py --out out/golden/before.json
    # ... change the code ...
    python scripts/golden_results.py --out out/golden/after.json --compare out/golden/before.json

``--compare`` prints every entry that differs and exits with status 1 if any does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np


def _update(h, value) -> None:
    """Feed a nested observation (dicts, arrays, scalars) into ``h`` in a fixed order."""
    if isinstance(value, dict):
        for key in sorted(value):
            h.update(str(key).encode())
            _update(h, value[key])
    elif isinstance(value, (list, tuple)):
        for item in value:
            _update(h, item)
    elif isinstance(value, np.ndarray):
        h.update(str(value.dtype).encode() + str(value.shape).encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())


def scenario_hash(name: str) -> str:
    """Hash of the scenario's request table, every column at full precision."""
    from llmsched_gym.scenarios.spec import load_scenario

    result = load_scenario(name).simulate()
    table = result.requests
    h = hashlib.sha256()
    h.update(",".join(map(str, table.columns)).encode())
    for col in table.columns:
        h.update(repr(table[col].tolist()).encode())
    return h.hexdigest()


def env_hash(eid: str, steps: int) -> str:
    """Hash of ``steps`` decisions of ``eid`` on its small test workload (two resets)."""
    import gymnasium as gym

    from llmsched_gym.envs.registration import (
        CLUSTER_SCENARIOS,
        PAPER_PAIRS,
        SCENARIOS,
        env_id,
    )
    from tests.envs.conftest import SMALL

    task = eid.split("/")[1].split("-")[0]
    scenarios = (*SCENARIOS, *CLUSTER_SCENARIOS, *(s for _, s in PAPER_PAIRS))
    scenario = next(s for s in scenarios if env_id(task, s) == eid)
    env = gym.make(eid, scenario_overrides=SMALL[scenario])
    h = hashlib.sha256()
    for seed in (0, 1):
        obs, info = env.reset(seed=seed)
        env.action_space.seed(seed)
        _update(h, obs)
        for i in range(steps):
            masks = getattr(env.unwrapped, "action_masks", None)
            if masks is not None:
                valid = np.flatnonzero(masks())
                action = int(valid[(i * 7 + seed) % len(valid)])
            else:
                action = env.action_space.sample()
            obs, reward, term, trunc, info = env.step(action)
            _update(h, obs)
            h.update(repr((float(reward), bool(term), bool(trunc), info.get("time_s"))).encode())
            if term or trunc:
                break
    env.close()
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    """Write the fingerprints; with ``--compare``, 1 when any differs from the earlier file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out/golden/results.json", help="where to write")
    parser.add_argument("--compare", help="a JSON written earlier: report what differs")
    parser.add_argument("--steps", type=int, default=400, help="decisions per env episode")
    parser.add_argument("--only", choices=("envs", "scenarios"), help="one half only")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

    from llmsched_gym.envs.registration import registered_ids
    from llmsched_gym.scenarios.spec import list_scenarios

    out: dict[str, str] = {}
    t0 = time.perf_counter()
    if args.only != "envs":
        for name in sorted(list_scenarios()):
            out[f"scenario:{name}"] = scenario_hash(name)
            print(f"scenario {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    if args.only != "scenarios":
        for eid in registered_ids():
            out[f"env:{eid}"] = env_hash(eid, args.steps)
        print(f"{len(registered_ids())} environments: {time.perf_counter() - t0:.0f} s")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)
    print(f"wrote {len(out)} fingerprints to {path}")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        keys = sorted(set(before) & set(out))
        diff = [k for k in keys if before[k] != out[k]]
        missing = sorted(set(before) ^ set(out))
        for k in diff:
            print(f"DIFFERS: {k}")
        for k in missing:
            print(f"only in one file: {k}")
        print(f"{len(keys) - len(diff)} of {len(keys)} identical")
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
