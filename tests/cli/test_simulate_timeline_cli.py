"""``llmsched-gym simulate --timeline FILE``: the trace written, and bad paths refused early."""

from __future__ import annotations

import gzip
import json

import pytest

from llmsched_gym.cli.main import main
from llmsched_gym.metrics.timeline import check_trace

TRACE = [
    {"request_id": "a", "arrival_time": 0.0, "prompt_len": 30, "output_len": 4},
    {"request_id": "b", "arrival_time": 0.5, "prompt_len": 9, "output_len": 3},
]
CONFIG = {"max_num_batched_tokens": 16, "max_num_seqs": 4, "block_size": 4, "num_gpu_blocks": 16}


def _argv(tmp_path, *extra) -> list[str]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in TRACE))
    cfg = tmp_path / "engine.json"
    cfg.write_text(json.dumps(CONFIG))
    return ["simulate", "--trace", str(trace), "--engine-config", str(cfg), "--cost-model",
            "constant:1.0", "--no-progress", *extra]  # fmt: skip


def test_simulate_writes_a_timeline_perfetto_opens(tmp_path, capsys) -> None:
    path = tmp_path / "timeline.json"
    assert main(_argv(tmp_path, "--timeline", str(path))) == 0
    assert f"wrote the timeline {path}" in capsys.readouterr().out
    trace = json.loads(path.read_text())
    check_trace(trace)
    spans = {e["name"]: e for e in trace["traceEvents"] if e.get("cat") == "request"}
    assert set(spans) == {"a", "b"}
    # a: 30 prompt tokens in chunks of 16 (steps 0-1), then 3 more tokens; constant:1.0 steps.
    chunks = [e["args"]["tokens"] for e in trace["traceEvents"] if e.get("cat") == "chunk"]
    assert chunks[:2] == [16, 14]
    assert spans["a"]["ts"] == 0 and spans["a"]["dur"] == 5e6
    assert trace["otherData"]["scheduler"] == "vllm-v1"
    gz = tmp_path / "timeline.json.gz"
    assert main(_argv(tmp_path, "--timeline", str(gz))) == 0
    assert json.loads(gzip.decompress(gz.read_bytes())) == trace
    path.write_text("old")  # an existing file is replaced, as --schedule-log's is
    assert main(_argv(tmp_path, "--timeline", str(path))) == 0
    assert json.loads(path.read_text()) == trace


@pytest.mark.parametrize(
    ("where", "message"),
    [("missing/t.json", "--timeline {}: folder {} does not exist"), (".", "is a folder")],
)
def test_a_bad_timeline_path_fails_before_the_run(tmp_path, capsys, where, message) -> None:
    path = tmp_path / where
    assert main(_argv(tmp_path, "--timeline", str(path))) == 2
    err = capsys.readouterr().err
    assert message.format(path, path.parent) in err


def test_async_scheduling_is_refused(tmp_path, capsys) -> None:
    argv = _argv(tmp_path, "--timeline", str(tmp_path / "t.json"), "--async-scheduling")
    assert main(argv) == 2
    assert "timelines do not support async_scheduling" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_a_cluster_scenario_writes_one_process_per_instance(tmp_path) -> None:
    path = tmp_path / "cluster.json"
    argv = ["simulate", "--scenario", "chat-azure-conv-4x-v0", "--set", "workload.limit=30",
            "--timeline", str(path), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    trace = json.loads(path.read_text())
    check_trace(trace)
    pids = {e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert len(pids) == 4
