"""Fingerprints of what the simulator produces, to prove a refactor changes nothing.

Writes one JSON of SHA-256 hashes: every shipped scenario's request table (the scenario run
with its own scheduler), a trajectory of every registered environment (observations,
rewards and clock of a fixed, deterministic action sequence on a small workload), and async
scheduling runs (``ASYNC_RUNS``: request table, step records, schedule log, ITLs and summary,
with fast-forward on and off, which must agree). Run it before and after a change and
compare::

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


ASYNC_SCENARIOS = (
    "chat-sharegpt-overload-v0",
    "chat-mooncake-synthetic-v0",
    "chat-multiturn-v0",
    "infermax-mix-lilo-siso-v0",
    "priority-azure-conv-v0",
    "relquery-beer-v0",
)
"""Single-engine ``vllm-v1`` scenarios run again with ``async_scheduling: true`` (overload and
preemption, heavy prefix sharing, generated tokens reused by later turns, an offline mix, the
priority queue, prefix-cached queries)."""
ASYNC_BENCH = ("splitwise-conv", "decode-online", "decode-offline", "memory-bound")
"""``llmsched_gym.bench``'s workloads (``bench_async`` times the first ones), run async."""
ASYNC_RUNS = (*(f"bench:{w}" for w in ASYNC_BENCH), *(f"scenario:{s}" for s in ASYNC_SCENARIOS))


def _async_workload(name: str) -> tuple:
    """(specs, engine config, cost model) of an ``ASYNC_RUNS`` entry, async scheduling on."""
    from llmsched_gym import bench
    from llmsched_gym.cost.registry import load_cost_model
    from llmsched_gym.scenarios.spec import load_scenario
    from llmsched_gym.workloads.trace import load_trace

    kind, _, what = name.partition(":")
    if kind == "scenario":
        scenario = load_scenario(what, {"engine.async_scheduling": True})
        model = load_cost_model(scenario.cost_model)
        return scenario.build_workload(cost_model=model), scenario.engine_config(model), model
    config = {"max_model_len": None, "async_scheduling": True}
    specs, profile = {
        "splitwise-conv": (lambda: load_trace("splitwise-conv"), bench.REFERENCE_PROFILE),
        "decode-online": (lambda: bench.decode_heavy_trace(600), bench.DECODE_PROFILE),
        "decode-offline": (bench.offline_decode_batch, bench.DECODE_PROFILE),
        "memory-bound": (
            lambda: bench.offline_decode_batch(256, max_output=4096),
            bench.DECODE_PROFILE,
        ),
    }[what]
    return specs(), config, load_cost_model(profile)


def async_hash(name: str, fast_forward: bool) -> str:
    """Hash of an async run's request table, step records, schedule log, ITLs and summary."""
    import tempfile

    from llmsched_gym.simulation import simulate

    specs, config, model = _async_workload(name)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        result = simulate(
            specs, config, "vllm-v1", model, fast_forward=fast_forward, schedule_log=log,
            record_steps=True,
        )  # fmt: skip
        h = hashlib.sha256(log.read_bytes())
    for table in (result.requests, result.steps):
        h.update(",".join(map(str, table.columns)).encode())
        for col in table.columns:
            h.update(repr(table[col].tolist()).encode())
    _update(h, list(result.itl))
    h.update(json.dumps(result.summary, sort_keys=True, default=repr).encode())
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
    parser.add_argument("--only", choices=("envs", "scenarios", "async"), help="one part only")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

    from llmsched_gym.envs.registration import registered_ids
    from llmsched_gym.scenarios.spec import list_scenarios

    out: dict[str, str] = {}
    t0 = time.perf_counter()
    status = 0
    if args.only in (None, "async"):
        for name in ASYNC_RUNS:
            on, off = (async_hash(name, ff) for ff in (True, False))
            out[f"async:{name}:ff-on"], out[f"async:{name}:ff-off"] = on, off
            if on != off:
                print(f"DIFFERS: async {name}: fast-forward on and off")
                status = 1
        seconds = time.perf_counter() - t0
        print(f"{len(ASYNC_RUNS)} async runs, fast-forward on and off: {seconds:.0f} s")
    if args.only in (None, "scenarios"):
        for name in sorted(list_scenarios()):
            out[f"scenario:{name}"] = scenario_hash(name)
            print(f"scenario {name}: {time.perf_counter() - t0:.0f} s", flush=True)
    if args.only in (None, "envs"):
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
        return 1 if diff else status
    return status


if __name__ == "__main__":
    raise SystemExit(main())
