"""Cluster specs: errors that name the field; shipped cluster scenarios run from YAML and CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from llmsched_gym.cli.main import main
from llmsched_gym.cluster.spec import instance_specs, validate_cluster
from llmsched_gym.errors import ConfigError, TraceError
from llmsched_gym.scenarios import load_scenario
from llmsched_gym.scenarios.spec import Scenario

BASE = {
    "name": "tiny-cluster-v0",
    "description": "A tiny cluster.",
    "workload": {"kind": "grid", "num_requests": 12, "input_len": 64, "output_len": 8},
    "engine": {"max_num_batched_tokens": 256, "num_gpu_blocks": 64, "block_size": 16},
    "cost_model": "constant:0.01",
    "cluster": {"router": "least-load:requests", "instances": [{"name": "g", "count": 2}]},
}

GOOD_INSTANCE = {"name": "a", "cost_model": "roofline:llama-3.1-70b@a100-80gb/tp8"}


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        ({"instances": [{"name": "a", "cost_model": "roofline:llama-3.1-70b@a9000/tp8"}]},
         r"instances\[0\].cost_model 'roofline:llama-3.1-70b@a9000/tp8'.*unknown GPU 'a9000'"),
        ({"instances": []}, r"instances must be a non-empty list.*at least one instance"),
        ({"instances": [{"name": "a", "count": 0}]}, r"instances\[0\].count must be an integer >= 1, got 0"),
        ({"router": "fastest", "instances": [GOOD_INSTANCE]}, r"router: unknown router 'fastest'"),
        ({"instances": [{"name": "a", "role": "decoder"}]}, r"instances\[0\].role must be one of .*got 'decoder'"),
        ({"instances": [{"name": "a", "role": "prefill"}]}, r"no instance has role 'decode'"),
        ({"instances": [{"name": "a", "role": "decode"}, {"name": "b"}]}, r"no instance has role 'prefill'"),
        ({"instances": [{"name": "a"}], "pd": {"link_gbps": 10}}, r"pd is set but no instance has role"),
        ({"instances": [{"name": "a", "role": "prefill"}, {"name": "b", "role": "decode"}],
          "pd": {"link_gbps": -1}}, r"cluster.pd.link_gbps must be a number > 0, got -1"),
        ({"instances": [{"name": "a", "engine": {"gpu_memory": 3}}]}, r"instances\[0\].engine.*gpu_memory"),
        ({"instances": [{"name": "a", "scheduler": "vllm-v9"}]}, r"instances\[0\].scheduler must be one of"),
        ({"instances": [{"name": "a", "count": 2}, {"name": "a-1"}]}, r"instance name 'a-1' is used twice"),
        ({"instances": [{"name": "a", "gpu": "a100"}]}, r"instances\[0\]: unknown field\(s\) \['gpu'\]"),
        ({"nodes": []}, r"unknown field\(s\) \['nodes'\]"),
    ],
)  # fmt: skip
def test_bad_cluster_specs_name_the_field(cluster, message) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_cluster(cluster, "cluster")
    with pytest.raises(ConfigError, match="scenario <dict>: cluster"):
        Scenario.from_dict({**BASE, "cluster": cluster})


def test_defaults_and_expansion() -> None:
    c = validate_cluster(
        {"instances": [{"name": "a", "count": 2, "engine": {"max_num_seqs": 4}}, {"name": "b"}]},
        "cluster",
    )
    assert c["router"] == "round-robin" and c == validate_cluster(c, "again")  # round-trips
    specs = instance_specs(c, engine={"max_num_seqs": 8, "block_size": 32}, cost_model="constant:1",
                           scheduler="sarathi")  # fmt: skip
    assert [s.name for s in specs] == ["a-0", "a-1", "b"]
    assert specs[0].engine == {"max_num_seqs": 4, "block_size": 32}
    assert specs[2].engine == {"max_num_seqs": 8, "block_size": 32}
    assert {s.scheduler for s in specs} == {"sarathi"} and specs[0].role == "both"
    sc = Scenario.from_dict(BASE).with_overrides({"cluster.router": "power-of-two"})
    assert sc.cluster["router"] == "power-of-two"


def test_unroutable_request_is_an_error() -> None:
    data = {
        **BASE,
        "workload": {"kind": "grid", "num_requests": 2, "input_len": 2000, "output_len": 8},
    }
    with pytest.raises(
        TraceError, match="request .* is unroutable: prompt_len=2000 \\+ output_len=8"
    ):
        Scenario.from_dict(data).simulate()


def test_tiny_cluster_scenario_runs() -> None:
    res = Scenario.from_dict(BASE).simulate()
    assert res.summary["num_finished"] == 12
    assert res.request_table["instance_id"].tolist().count(0) == 6
    assert list(res.instances["name"]) == ["g-0", "g-1"]
    assert res.gpus["num_instances"].tolist() == [2]


def test_hetero_scenario_from_yaml_is_deterministic() -> None:
    sc = load_scenario("text2sql-hetero1-v0")
    assert [i["name"] for i in sc.cluster["instances"]] == ["a100", "a6000"]
    a, b = sc.simulate(), sc.simulate()
    for k in a.request_table:
        x, y = a.request_table[k], b.request_table[k]
        assert list(x) == list(y) if x.dtype == object else np.array_equal(x, y, equal_nan=True)
    assert a.summary["num_finished"] == a.summary["num_requests"] > 2000
    inst = a.instances
    assert list(inst["gpu"]) == ["a100-80gb", "a100-80gb", "a6000-48gb", "a6000-48gb"]
    assert (inst["num_requests"] > 0).all() and inst["num_requests"].sum() == a.summary[
        "num_requests"
    ]
    assert ((inst["utilization"] > 0) & (inst["utilization"] <= 1)).all()
    assert a.jobs is not None and len(a.jobs) == 110
    np.testing.assert_allclose(a.stage_shares.sum(axis=1), 1.0)
    assert set(a.gpus["gpu"]) == {"a100-80gb", "a6000-48gb"}
    c = sc.simulate(seed=1)
    assert c.summary["job_latency_s_mean"] != a.summary["job_latency_s_mean"]


def test_hetero_scenario_from_the_cli(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    args = ["simulate", "--scenario", "text2sql-hetero2-v0", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "router round-robin | 4 instances" in text and "l40s-48gb" in text
    for name in ("requests.csv", "jobs.csv", "instances.csv", "summary.json"):
        assert (out / name).stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["router"] == "round-robin" and len(summary["instances"]) == 4
    assert summary["summary"]["num_jobs"] == 110
    first = (out / "requests.csv").read_bytes()
    lines = (out / "instances.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("instance_id,name,role,gpu")
    assert main(args) == 0  # deterministic: same bytes again
    assert (out / "requests.csv").read_bytes() == first
    capsys.readouterr()
    assert (
        main(["simulate", "--scenario", "text2sql-hetero2-v0", "--cost-model", "constant:1"]) == 2
    )
    assert "is a cluster" in capsys.readouterr().err


def test_shipped_cluster_scenarios_validate() -> None:
    for name in ("text2sql-hetero1-v0", "text2sql-hetero2-v0", "chat-azure-conv-4x-v0",
                 "pd-azure-conv-v0"):  # fmt: skip
        sc = load_scenario(name)
        assert sc.cluster is not None and yaml.safe_dump(sc.to_dict())
    roles = [g["role"] for g in load_scenario("pd-azure-conv-v0").cluster["instances"]]
    assert roles == ["prefill", "decode"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["chat-azure-conv-4x-v0", "pd-azure-conv-v0"])
def test_large_cluster_scenarios_run(name) -> None:
    res = load_scenario(name).simulate()
    assert res.summary["num_finished"] == res.summary["num_requests"] == 19366
