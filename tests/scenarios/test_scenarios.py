"""Scenario specs: every shipped one validates and builds deterministically; bad specs are
rejected naming the field; the CLI runs them."""

from __future__ import annotations

import json

import pytest
import yaml

from llmsched_gym.cli.main import main
from llmsched_gym.core.job import Job
from llmsched_gym.errors import ConfigError
from llmsched_gym.scenarios import list_scenarios, load_scenario
from llmsched_gym.scenarios.spec import Scenario

SHIPPED = list(list_scenarios())
PAPERS = {"relserve", "proserve", "hexgen-text2sql", "infermax"}

GOOD = {
    "name": "tiny-grid-v0",
    "description": "A tiny offline batch.",
    "workload": {"kind": "grid", "num_requests": 8, "input_len": 32, "output_len": 4},
    "engine": {
        "max_num_batched_tokens": 64,
        "max_num_seqs": 64,
        "num_gpu_blocks": 64,
        "block_size": 16,
    },
    "cost_model": "constant:0.01",
}


def test_every_paper_has_a_scenario_and_every_chat_trace_too() -> None:
    papers = {load_scenario(n).paper for n in SHIPPED}
    assert PAPERS <= papers
    chat_traces = {load_scenario(n).workload.get("trace") for n in SHIPPED if n.startswith("chat-")}
    assert {
        "azure-conv-2023", "azure-code-2023", "mooncake-conversation", "mooncake-synthetic",
        "sharegpt", "arxiv-summarization",
    } <= chat_traces  # fmt: skip


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_builds_the_same_workload_twice(name) -> None:
    sc = load_scenario(name)
    assert sc.name == name and sc.description
    a, b = sc.build_workload(), sc.build_workload()
    assert a == b and len(a) > 0
    sc.engine_config()  # engine settings and cost profile resolve


def test_seed_changes_generated_workloads() -> None:
    sc = load_scenario("relquery-beer-v0")
    a, b = sc.build_workload(0), sc.build_workload(1)
    assert all(isinstance(j, Job) for j in a) and a != b


def test_overrides_and_slo_stamping() -> None:
    sc = Scenario.from_dict({**GOOD, "slo": {"ttft_s": 1.0, "tpot_s": 0.5}})
    items = sc.build_workload()
    assert len(items) == 8 and all(r.slo_ttft_s == 1.0 and r.slo_tpot_s == 0.5 for r in items)
    sc2 = sc.with_overrides({"workload.num_requests": 3, "engine.max_num_seqs": 2})
    assert len(sc2.build_workload()) == 3 and sc2.engine_config().max_num_seqs == 2
    res = sc2.simulate()
    assert res.summary["num_finished"] == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"colour": "red"}, r"unknown field\(s\) \['colour'\]"),
        ({"name": "NoVersion"}, "name must look like"),
        ({"description": ""}, "description must be a non-empty string"),
        ({"paper": "mine"}, "paper must be one of"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"engine": {"max_num_batched_tokenz": 8}}, "unknown key"),
        ({"engine": {"block_size": 0}}, "block_size must be a positive integer, got 0"),
        ({"slo": {"ttft": 1}}, "unknown slo field 'ttft'"),
        ({"slo": {"ttft_s": -1}}, r"slo.ttft_s must be > 0, got -1"),
        ({"workload": {"kind": "magic"}}, r"workload.kind must be one of"),
        ({"workload": {"kind": "grid", "num_requests": 4}}, "needs input_len and output_len"),
        ({"workload": {**GOOD["workload"], "num_requests": "8"}}, r"num_requests must be int"),
        ({"workload": {**GOOD["workload"], "num_requests": 0}}, r"num_requests must be > 0, got 0"),
        ({"workload": {**GOOD["workload"], "extra": 1}}, r"unknown field\(s\) \['extra'\]"),
        ({"workload": {"kind": "relquery"}}, "needs field 'dataset'"),
        ({"workload": {"kind": "relquery", "dataset": "imdb"}}, r"dataset must be one of"),
        ({"workload": {"kind": "trace", "trace": "x", "arrival": "poisson"}}, "needs rate_per_s"),
        ({"workload": {"kind": "trace", "trace": "x", "cv": float("nan")}}, "must be finite"),
        (
            {"workload": {"kind": "trace", "trace": "x", "limit": 10, "num_requests": 20}},
            r"num_requests \(20\) exceeds limit \(10\)",
        ),
    ],
)
def test_bad_specs_name_the_field(change, message) -> None:
    with pytest.raises(ConfigError, match=message):
        Scenario.from_dict({**GOOD, **change}, source="bad.yaml")


def test_files_and_unknown_names(tmp_path) -> None:
    path = tmp_path / "tiny-grid-v0.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    assert load_scenario(path).name == "tiny-grid-v0"
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_scenario(tmp_path / "broken.yaml")
    with pytest.raises(ConfigError, match="unknown scenario 'nope-v0'; shipped scenarios: chat-"):
        load_scenario("nope-v0")


def test_cli_simulate_scenario_writes_job_records(tmp_path, capsys) -> None:
    spec = {
        **GOOD,
        "name": "tiny-relquery-v0",
        "workload": {"kind": "relquery", "dataset": "beer", "num_queries": 3, "rate_per_s": 1.0},
        "engine": {"max_num_batched_tokens": 2048, "num_gpu_blocks": 2000},
    }
    path = tmp_path / "tiny-relquery-v0.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    assert main(["simulate", "--scenario", str(path), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())["summary"]
    assert summary["num_jobs"] == 3
    jobs = (out / "jobs.csv").read_text().splitlines()
    assert len(jobs) == 4 and jobs[0].startswith("job_id,")
    # Flags override the scenario; --trace with --scenario is an error.
    assert main(["simulate", "--scenario", str(path), "--scheduler", "sarathi", "--seed", "3"]) == 0
    assert "sarathi" in capsys.readouterr().out
    assert main(["simulate", "--scenario", str(path), "--trace", "sharegpt"]) == 2
    assert "drop --trace" in capsys.readouterr().err
    assert main(["simulate", "--seed", "1", "--num-requests", "5"]) == 2


def test_cli_workloads_list_and_show(tmp_path, capsys) -> None:
    assert main(["workloads"]) == 0
    text = capsys.readouterr().out
    for word in ("relquery", "text2sql", "servegen", "mooncake-synthetic", "relquery-rotten-v0"):
        assert word in text
    plot = tmp_path / "h.png"
    assert main(["workloads", "show", "infermax-mix-lilo-siso-v0", "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "num_requests" in text and "prefix_sharing_ratio" in text and plot.stat().st_size > 0
    assert main(["workloads", "show", "mooncake-synthetic"]) == 0
    assert "0.6512" in capsys.readouterr().out
    assert main(["workloads", "show"]) == 2
    assert main(["workloads", "show", "nope-v0"]) == 2


# A bounded slice of each workload: the test proves every shipped scenario runs end to end under
# its own scheduler (and cluster); full-size runs are the reproduction scripts' job.
SMALL = {
    "trace": {"limit": 400},
    "relquery": {"num_queries": 8},
    "text2sql": {"num_queries": 8},
    "grid": {"num_requests": 64},
    "servegen": {"duration_s": 30.0},
    "multiturn": {"limit": 400},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_simulates(name) -> None:
    sc = load_scenario(name)
    kind = sc.workload["kind"]
    small = {f"workload.{k}": v for k, v in SMALL[kind].items()}
    if kind == "trace" and sc.workload.get("num_requests"):
        small = {"workload.num_requests": min(400, sc.workload["num_requests"])}
    if kind == "grid" and sc.workload.get("mix"):
        small = {"workload.num_requests": 64}
    res = load_scenario(name, small).simulate()
    assert res.summary["num_finished"] == res.summary["num_requests"] > 0
