"""Warm starts for InferMax's CSP bound (§5): the schedule a heuristic scheduler produces.

§5 initialises the solver "with outputs from other schedulers". :func:`heuristic_schedule` runs a
registered scheduler through ``simulate`` and reads its schedule log, so this module sits on the
simulation floor (above the policies), called by whoever sets up a bound
(``leaderboards/infermax/reproduce.py``), never by a policy.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.policies.infermax.csp import Instance, Schedule
from llmsched_gym.simulation import simulate

__all__ = ["heuristic_schedule"]


def heuristic_schedule(inst: Instance, scheduler: str) -> Schedule:
    """The schedule a registered scheduler produces on the engine (block size 1, no caching)."""
    specs = [
        RequestSpec(f"r{k}", 0.0, i, o, o)
        for k, (i, o) in enumerate(zip(inst.inputs, inst.outputs, strict=True))
    ]
    cfg = dict(
        max_num_batched_tokens=inst.C,
        block_size=1,
        num_gpu_blocks=inst.M + 1,
        max_num_seqs=1_000_000,
        enable_prefix_caching=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        simulate(specs, cfg, scheduler, "infermax:llama-2-7b", schedule_log=log)
        lines = [json.loads(x) for x in log.read_text().splitlines()]
    out: Schedule = []
    for line in lines:
        items = {int(k[1:]): v for k, v in line["scheduled"].items()}
        out.append((items, [int(k[1:]) for k in line["preempted"]]))
    return out
