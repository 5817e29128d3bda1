"""Knob's lookahead oracle measured in KnobEnv itself (rollout), against vllm-v1 in the same env.

The harness cannot run it: Lockstep finds KnobEnv's decision 0 observed before the first
arrival joins, AgentPolicy's after (a pre-existing mismatch). Both episodes drain, so the ratio
of returns is vllm-v1's mean e2e over the lookahead's.
"""

import dataclasses
import sys
import time

from llmsched_gym.envs.adapters import PolicyAgent, rollout
from llmsched_gym.envs.knob_v0 import KnobEnv
from llmsched_gym.leaderboard.suite import load_suite
from llmsched_gym.lookahead import LookaheadAgent
from llmsched_gym.policies.registry import make_policy

suite = load_suite(sys.argv[1])
firsts = {}
for w in suite.workloads("test", tasks=["Knob"], quick=True):
    firsts.setdefault((w.scenario_id, w.source), w)
for w in firsts.values():
    t = time.time()
    out = {}
    agents = {"vllm-v1": PolicyAgent(make_policy("vllm-v1")), "lookahead": LookaheadAgent("Knob")}
    for name, agent in agents.items():
        env = KnobEnv(scenario=dataclasses.replace(w.scenario(), seed=0), oracle=True)
        r = rollout(env, agent, seed=w.seed)
        assert r["terminated"], (w.id, name)
        out[name] = r["return"]
    ratio = out["vllm-v1"] / out["lookahead"]
    print(w.id, f"vllm-v1/lookahead mean-e2e ratio {ratio:.4f}", out, f"{time.time() - t:.1f} s")
