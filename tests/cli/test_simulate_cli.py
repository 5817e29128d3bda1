"""``llmsched-gym simulate`` end to end: the contract's flags, outputs and error messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmsched_gym.cli.main import main

TRACE = [
    {
        "request_id": "a",
        "arrival_time": 0.0,
        "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "output_len": 4,
    },
    {
        "request_id": "b",
        "arrival_time": 0.5,
        "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8, 3],
        "output_len": 3,
    },
    {"request_id": "c", "arrival_time": 1.0, "prompt_len": 20, "output_len": 2, "priority": 1},
]
CONFIG = {
    "max_num_batched_tokens": 16, "max_num_seqs": 4, "block_size": 4, "num_gpu_blocks": 12,
    "enable_prefix_caching": True, "scheduling_policy": "fcfs", "long_prefill_token_threshold": 0,
}  # fmt: skip


def _write(tmp_path: Path, rows=TRACE, config=CONFIG) -> tuple[Path, Path]:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "engine.json"
    cfg.write_text(json.dumps(config))
    return trace, cfg


def _simulate(tmp_path, *extra) -> tuple[int, Path]:
    trace, cfg = _write(tmp_path)
    log = tmp_path / "log.jsonl"
    argv = ["simulate", "--trace", str(trace), "--engine-config", str(cfg), "--cost-model", "constant:1.0",
            "--schedule-log", str(log), "--out", str(tmp_path / "out"), "--no-progress", *extra]  # fmt: skip
    return main(argv), log


def test_simulate_writes_log_records_and_summary(tmp_path, capsys):
    rc, log = _simulate(tmp_path, "--record-steps")
    assert rc == 0
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines[0]["step"] == 0 and lines[0]["time"] == 0.0
    assert lines[0]["scheduled"] == {"a": 9} and lines[0]["new"] == {"a": 0}
    assert [x["time"] for x in lines] == [float(i) for i in range(len(lines))]  # constant:1.0
    # b (arrived at 0.5) and c (at 1.0) join the step starting at 1.0; b hits 2 blocks.
    assert lines[1]["new"] == {"b": 8, "c": 0}
    finished = [rid for x in lines for rid in x["finished"]]
    assert sorted(finished) == ["a", "b", "c"]
    out = tmp_path / "out"
    requests = (out / "requests.csv").read_text().splitlines()
    assert requests[0].startswith("request_id,") and len(requests) == 4
    assert (out / "steps.csv").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine_config"] == {**CONFIG, "async_scheduling": False}
    assert summary["summary"]["num_requests"] == 3
    assert "ttft_s_p99" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("rows", "config", "message"),
    [
        ([{**TRACE[0], "output_len": -3}], CONFIG, "trace.jsonl:1: field 'output_len'"),
        ([TRACE[0], {**TRACE[1], "colour": "red"}], CONFIG, "trace.jsonl:2"),
        (TRACE, {**CONFIG, "max_num_batched_token": 8}, "unknown key(s) max_num_batched_token=8"),
        (TRACE, {**CONFIG, "block_size": 0}, "block_size must be a positive integer, got 0"),
        ([{**TRACE[2], "prompt_len": 400}], CONFIG, "can never fit the KV cache"),
    ],
)
def test_bad_input_is_a_clear_error_and_leaves_no_files(tmp_path, capsys, rows, config, message):
    trace, cfg = _write(tmp_path, rows, config)
    log = tmp_path / "log.jsonl"
    rc = main(["simulate", "--trace", str(trace), "--engine-config", str(cfg), "--cost-model",
               "constant:1.0", "--schedule-log", str(log), "--out", str(tmp_path / "out"), "--no-progress"])  # fmt: skip
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not log.exists()
    leftovers = [
        p.name
        for p in tmp_path.rglob("*")
        if p.is_file() and p.name not in ("trace.jsonl", "engine.json")
    ]
    assert leftovers == []


def test_flags_override_engine_config_and_unknown_scheduler(tmp_path, capsys):
    rc, log = _simulate(tmp_path, "--max-num-batched-tokens", "4")
    assert rc == 0
    assert max(sum(json.loads(x)["scheduled"].values()) for x in log.read_text().splitlines()) <= 4
    rc, _ = _simulate(tmp_path, "--scheduler", "vllm-v2")
    assert rc == 2 and "unknown scheduler 'vllm-v2'" in capsys.readouterr().err


def test_help_explains_options_in_vllm_terms():
    out = subprocess.run(
        [sys.executable, "-m", "llmsched_gym", "simulate", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in ("--max-num-batched-tokens", "--num-gpu-blocks", "--enable-prefix-caching",
                 "--scheduling-policy", "--long-prefill-token-threshold", "--schedule-log"):  # fmt: skip
        assert flag in out


def test_deterministic_across_processes_and_hash_seeds(tmp_path):
    trace, cfg = _write(tmp_path)
    logs = []
    for seed in ("0", "12345"):
        log = tmp_path / f"log{seed}.jsonl"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run(
            [sys.executable, "-m", "llmsched_gym", "simulate", "--trace", str(trace), "--engine-config", str(cfg),
             "--cost-model", "vidur:llama-2-7b@a100-80gb/tp1", "--schedule-log", str(log), "--no-progress"],
            check=True, env=env, capture_output=True,
        )  # fmt: skip
        logs.append(log.read_bytes())
    assert logs[0] == logs[1] and len(logs[0]) > 0


def test_command_list_matches_the_full_parser() -> None:
    """``COMMANDS`` (what a light parser build trusts) lists every command, in --help order."""
    from llmsched_gym.cli.main import COMMANDS, _command_in, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert tuple(sub.choices) == COMMANDS
    assert _command_in(["simulate", "--trace", "x"]) == "simulate"
    assert _command_in(["--help"]) is None and _command_in(["simulat"]) is None
    light = next(a for a in build_parser("simulate")._actions if a.dest == "command")
    assert "leaderboard" not in light.choices and "simulate" in light.choices


@pytest.mark.parametrize(
    ("command", "preset", "expected"),
    [("simulate", None, "1"), ("compare", None, "1"), ("simulate", "4", "4"), ("list", None, None)],
)
def test_simulator_commands_ask_openblas_for_one_thread(command, preset, expected) -> None:
    """Before numpy loads, simulate/compare ask for one BLAS thread; a user's setting wins."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    code = (
        "import os, sys\n"
        "from llmsched_gym.cli import main\n"
        "assert 'numpy' not in sys.modules\n"
        f"main._one_blas_thread({command!r})\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == str(expected)


def test_collector_is_left_off_only_by_the_console_scripts_own_simulate(tmp_path, capsys):
    """Called in-process, ``simulate`` restores the cyclic collector; as the process's entry
    point it leaves it off (the process ends next) and frees no cycles on the way out."""
    import gc

    assert gc.isenabled()
    rc, _ = _simulate(tmp_path)
    assert rc == 0 and gc.isenabled()
    trace, cfg = _write(tmp_path)
    probe = (
        "import gc, sys\n"
        "from llmsched_gym.cli import main as m\n"
        "sys.argv = ['llmsched-gym', 'simulate', '--trace', sys.argv[1], '--engine-config', "
        "sys.argv[2], '--cost-model', 'constant:1.0', '--no-progress', '--json']\n"
        "rc = m.main()\n"
        "print('ENABLED', gc.isenabled(), rc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(trace), str(cfg)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "ENABLED False 0"


def test_a_mistyped_option_gets_its_commands_usage_and_a_suggestion(capsys) -> None:
    """argparse hands unknown options to the top-level parser; the error is the command's own."""
    from llmsched_gym.cli.main import main

    for argv, command, close in (
        (["simulate", "--scenaro", "chat-sharegpt-overload-v0"], "simulate", "--scenario"),
        (["leaderboard", "validate", "x", "--quik"], "leaderboard validate", "--quick"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: llmsched-gym {command}"), err[:200]
        assert f"llmsched-gym {command}: error: unrecognized arguments" in err
        assert f"(did you mean {close}?)" in err


def test_a_mistyped_scenario_gets_a_suggestion() -> None:
    from llmsched_gym.errors import ConfigError
    from llmsched_gym.scenarios import load_scenario

    with pytest.raises(ConfigError, match="did you mean 'chat-sharegpt-overload-v0'"):
        load_scenario("chat-sharegpt-overlaod-v0")
