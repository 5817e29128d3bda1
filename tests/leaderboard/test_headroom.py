"""Rule agents, the two kinds of rows, unscored tasks and the headroom table (issue 39)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmsched_gym.envs.observation import REQUEST_FEATURES
from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.agents import RULES, RuleAgent
from llmsched_gym.leaderboard.headroom import (
    headroom_markdown,
    headroom_summary,
    read_headroom,
    task_headroom,
    write_headroom,
)
from llmsched_gym.leaderboard.policy import resolve_policy
from llmsched_gym.leaderboard.run import run_workload
from llmsched_gym.leaderboard.suite import load_suite, parse_suite

COL = {name: i for i, name in enumerate(REQUEST_FEATURES)}


def _obs(rows: list[dict[str, float]], k: int = 4) -> dict[str, np.ndarray]:
    table = np.zeros((k, len(REQUEST_FEATURES)), np.float32)
    for i, row in enumerate(rows):
        for name, value in row.items():
            table[i, COL[name]] = value
    mask = np.array([1] * len(rows) + [0] * (k - len(rows)), np.int8)
    return {"global": np.zeros(10, np.float32), "requests": table, "mask": mask}


# -- rules on observations ---------------------------------------------------------------------
def test_priority_rule_scores_shorter_prompts_higher():
    obs = _obs([{"prompt_tokens": 0.9}, {"prompt_tokens": 0.1}, {"prompt_tokens": 0.5}])
    scores, _ = RuleAgent("shortest-prompt", "Priority").predict(obs)
    assert scores.shape == (4,) and list(np.argsort(-scores[:3])) == [1, 2, 0]


def test_select_rule_keeps_running_first_then_shortest_and_closes_when_nothing_is_valid():
    agent = RuleAgent("shortest-prompt", "Select")
    obs = _obs(
        [{"prompt_tokens": 0.5}, {"prompt_tokens": 0.2}, {"prompt_tokens": 0.9, "is_running": 1}]
    )
    masks = np.array([1, 1, 1, 0, 1], bool)
    assert agent.predict(obs, action_masks=masks)[0] == 2  # the running row first
    masks[2] = False
    assert agent.predict(obs, action_masks=masks)[0] == 1  # then the shortest waiting prompt
    assert agent.predict(obs, action_masks=np.array([0, 0, 0, 0, 1], bool))[0] == 4  # close


def test_preempt_rules_pick_their_victims():
    obs = _obs(
        [
            {"prompt_tokens": 0.2, "computed_fraction": 1.0, "generated_tokens": 0.5},
            {"prompt_tokens": 0.8, "computed_fraction": 1.0},
            {"prompt_tokens": 0.5, "computed_fraction": 0.1},
        ]
    )
    assert RuleAgent("shortest-prompt", "Preempt").predict(obs)[0] == 1  # longest prompt
    assert RuleAgent("least-computed", "Preempt").predict(obs)[0] == 2  # least work lost


def test_batch_type_rules_follow_the_masks():
    obs = _obs([])
    prefill = RuleAgent("prefill-first", "BatchType")
    decode = RuleAgent("decode-first", "BatchType")
    assert prefill.predict(obs, action_masks=np.array([1, 1], bool))[0] == 0
    assert prefill.predict(obs, action_masks=np.array([0, 1], bool))[0] == 1
    assert decode.predict(obs, action_masks=np.array([1, 1], bool))[0] == 1
    assert decode.predict(obs, action_masks=np.array([1, 0], bool))[0] == 0


def test_rules_name_what_fits():
    with pytest.raises(ConfigError, match=r"unknown rule 'nope'; rules: \["):
        RuleAgent("nope", "Priority")
    with pytest.raises(ConfigError, match=r"no Route form .* Route rules: \[.least-backlog.\]"):
        RuleAgent("shortest-prompt", "Route")
    with pytest.raises(ConfigError, match=r"BatchType rules: \['decode-first', 'prefill-first'\]"):
        RuleAgent("shortest-prompt", "BatchType")


# -- rules in the harness ----------------------------------------------------------------------
def _tiny_suite(tasks: dict | None = None) -> dict:
    """One overloaded sharegpt scenario of 40 requests on 600 KV blocks (preemptions happen)."""
    scenario = {
        "id": "tiny",
        "base": "chat-sharegpt-overload-v0",
        "level": "overload",
        "load": 1.0,
        "quick": True,
        "overrides": {"engine.num_gpu_blocks": 600},
        "sources": ["s"],
        "capacity": {"s": 3.0},
    }

    def task(baselines, references):
        return {
            "decision": "d",
            "metric": "e2e_s_mean",
            "reference": "vllm-v1",
            "baselines": baselines,
            "references": references,
            "scenarios": [dict(scenario)],
        }

    return {
        "suite": "tiny-v1",
        "sources": {
            "s": {
                "overrides": {
                    "workload.trace": "sharegpt",
                    "workload.arrival": "poisson",
                    "workload.num_requests": 40,
                    "workload.default_max_tokens": 4096,
                },
                "train": {"seeds": [0]},
                "test": {"seeds": [1000]},
            }
        },
        "tasks": tasks
        or {
            "Preempt": task(
                ["vllm-v1", "rule:shortest-prompt", "static-priority:shortest-prompt"],
                ["vllm-v1", "static-priority:shortest-prompt"],
            )
        },
    }


@pytest.fixture(scope="module")
def tiny():
    tasks = {}
    for name in ("Priority", "Select", "Preempt", "BatchType", "Knob"):
        rules = [f"rule:{r}" for r, ts in RULES.items() if name in ts]
        tasks[name] = _tiny_suite()["tasks"]["Preempt"] | {"baselines": ["vllm-v1", *rules]}
        tasks[name]["references"] = ["vllm-v1"]
    return parse_suite(_tiny_suite(tasks), "tiny.yaml")


@pytest.mark.parametrize(
    "task, rule",
    # Route's rule runs on a cluster (test_warm_start: it is the least-load:backlog router)
    [(t, r) for r, ts in RULES.items() for t in ts if t != "Route"],
    ids=lambda x: str(x),
)
def test_each_rule_acts_deterministically_and_differs_from_the_reference(tiny, task, rule):
    w = tiny.workloads("test", tasks=[task])[0]
    ref = run_workload(tiny, "vllm-v1", w)
    rows = [run_workload(tiny, f"rule:{rule}", w) for _ in range(2)]
    assert rows[0]["status"] == "ok", rows[0]["error"]
    assert rows[0]["policy"] == f"rule:{rule}" and rows[0]["oracle"] is False
    assert rows[0]["value"] == rows[1]["value"]
    if rule != "half-seqs":  # 40 requests never fill half of max_num_seqs: the cap never binds
        assert rows[0]["value"] != ref["value"]


def test_resolve_policy_wraps_a_rule_as_an_agent(tiny):
    ref = resolve_policy("rule:shortest-prompt", tiny.task("Priority"))
    assert ref.name == "rule:shortest-prompt" and ref.kind == "rule"
    policy = ref.build(tiny.task("Priority"), seed=0)
    assert type(policy).__name__ == "AgentPolicy" and not policy.oracle
    with pytest.raises(ConfigError, match="no BatchType form"):
        resolve_policy("rule:shortest-prompt", tiny.task("BatchType"))


# -- kinds and unscored tasks in the suite -----------------------------------------------------
def test_kind_of_and_references_are_validated():
    suite = parse_suite(_tiny_suite(), "tiny.yaml")
    task = suite.task("Preempt")
    assert task.kind_of("static-priority:shortest-prompt") == "reference"
    assert task.kind_of("rule:shortest-prompt") == "agent"
    assert task.kind_of("my-submission") == "agent" and task.scored
    data = _tiny_suite()
    data["tasks"]["Preempt"]["references"] = ["proserve"]
    with pytest.raises(ConfigError, match=r"references \['proserve'\] are not among"):
        parse_suite(data, "tiny.yaml")


def test_unscored_tasks_need_their_reason():
    data = _tiny_suite()
    data["tasks"]["Preempt"]["scored"] = False
    with pytest.raises(ConfigError, match="needs unscored_reason"):
        parse_suite(data, "tiny.yaml")
    data["tasks"]["Preempt"]["unscored_reason"] = "headroom  0.4% on 3 workloads"
    task = parse_suite(data, "tiny.yaml").task("Preempt")
    assert not task.scored and task.unscored_reason == "headroom 0.4% on 3 workloads"
    del data["tasks"]["Preempt"]["scored"]
    with pytest.raises(ConfigError, match="only for a task with scored: false"):
        parse_suite(data, "tiny.yaml")


def test_shipped_suites_load_with_kinds():
    v1, v2 = load_suite("llmsched-v1"), load_suite("llmsched-v2")
    assert all(not t.references for t in v1.tasks.values())  # frozen: no kinds
    pri = v2.task("Priority")
    assert pri.kind_of("proserve") == "reference" and pri.kind_of("rule:shortest-prompt") == "agent"
    assert v2.task("Route").references == ()
    for task in v2.tasks.values():  # every rule baseline resolves for its task
        for spec in task.baselines:
            if spec.startswith("rule:"):
                resolve_policy(spec, task)


# -- the headroom table ------------------------------------------------------------------------
def _row(task, method, role, score, kind="agent", failed=0):
    return {
        "suite": "s-v1",
        "task": task,
        "scored": True,
        "split": "quick",
        "method": method,
        "role": role,
        "kind": kind,
        "oracle": role == "upper",
        "score": score,
        "score_low": math.nan,
        "score_high": math.nan,
        "num_workloads": 3,
        "num_failed": failed,
        "note": "",
    }


def test_headroom_is_the_best_upper_reference_minus_one(tmp_path):
    rows = [
        _row("Preempt", "vllm-v1", "reference", 1.0, "reference"),
        _row("Preempt", "rule:a", "agent", 1.05),
        _row("Preempt", "rule:b", "agent", 1.30, failed=1),  # failed: not the best agent
        _row("Preempt", "sarathi", "reference-kind", 0.98, "reference"),
        _row("Preempt", "static-priority:shortest-output", "upper", 1.20, "reference"),
        _row("Preempt", "lookahead:end", "upper", 1.01, "reference"),
        _row("Preempt", "infermax-csp", "upper", math.nan, "reference"),
    ]
    (s,) = headroom_summary(rows)
    assert (s["best_agent"], s["best_agent_score"]) == ("rule:a", 1.05)
    assert (s["best_reference_kind"], s["best_reference_kind_score"]) == ("sarathi", 0.98)
    assert s["best_upper"] == "static-priority:shortest-output"
    assert s["headroom"] == pytest.approx(0.20)
    assert s["decision_headroom"] == pytest.approx(0.05)  # the agent beats the lookahead here
    rows[5] = _row("Preempt", "lookahead:end", "upper", 1.08, "reference")
    assert headroom_summary(rows)[0]["decision_headroom"] == pytest.approx(0.08)
    paths = write_headroom(rows, tmp_path, "headroom")
    back = read_headroom(paths[0])
    assert headroom_summary(back)[0]["headroom"] == pytest.approx(0.20)
    text = paths[1].read_text()
    assert "### Headroom per task (s-v1)" in text and "| +20.0% | +8.0% |" in text
    assert "#### Preempt: every method" in text and "failed on 1" in text
    assert headroom_markdown(back, "s-v1") == text
    section = task_headroom(back, "s-v1", "Preempt")  # what 'show' adds to the task's README
    assert section.startswith("#### Headroom (s-v1)")
    assert task_headroom(back, "s-v2", "Preempt") == ""


def test_headroom_cli_on_a_tiny_suite(tmp_path, capsys):
    import json

    from llmsched_gym.cli.main import main

    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(_tiny_suite()))  # JSON is YAML
    out = tmp_path / "h"
    argv = ["leaderboard", "headroom", "--suite-file", str(path), "--quick", "--quiet"]
    assert main([*argv, "--lookahead", "quick", "--out", str(out)]) == 0
    rows = read_headroom(out / "headroom.csv")
    roles = {r["method"]: r["role"] for r in rows}
    assert roles == {
        "vllm-v1": "reference",
        "rule:shortest-prompt": "agent",
        "static-priority:shortest-prompt": "reference-kind",
        "static-priority:shortest-output": "upper",
        "lookahead:end": "upper",
        "infermax-csp": "upper",
    }
    (s,) = headroom_summary(rows)
    la = next(r for r in rows if r["method"] == "lookahead:end")
    assert la["score"] >= 1.0  # the rollout guarantee: never below its base (vllm-v1)
    assert math.isfinite(s["headroom"]) and "request x batch cells" in s["upper_notes"][
        "infermax-csp"
    ]
    printed = capsys.readouterr().out
    assert "### Headroom per task (tiny-v1)" in printed
    assert main([*argv, "--lookahead-horizon", "soon", "--out", str(out)]) == 2
    assert "--lookahead-horizon must be seconds or 'end', got 'soon'" in capsys.readouterr().err



def test_list_prints_the_committed_headroom_of_its_suite(tmp_path, monkeypatch, capsys):
    from llmsched_gym.leaderboard import cli

    rows = [
        _row("Preempt", "vllm-v1", "reference", 1.0, "reference"),
        _row("Preempt", "static-priority:shortest-output", "upper", 1.2, "reference"),
    ]
    write_headroom(rows, tmp_path, cli.HEADROOM_STEM)
    monkeypatch.setattr(cli, "leaderboards_root", lambda given=None: tmp_path)
    suite = parse_suite(_tiny_suite(), "tiny.yaml")
    cli._print_committed_headroom(suite, ["Preempt"])
    out = capsys.readouterr().out
    assert "headroom of s-v1:" in out  # another suite's table: a pointer, not its figures
    object.__setattr__(suite, "version", "s-v1")
    cli._print_committed_headroom(suite, ["Preempt"])
    out = capsys.readouterr().out
    assert "### Headroom per task (s-v1)" in out and "+20.0%" in out and "####" not in out
