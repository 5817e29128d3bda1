"""A newcomer's first hour with the CLI (issue 23): the main job, conventions, outputs, help."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmsched_gym.cli import common
from llmsched_gym.cli import main as cli
from llmsched_gym.cli.main import build_parser, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the main job -----------------------------------------------------------------------------


def test_default_compare_tells_a_story(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    code, stdout, _ = run(capsys, "compare", "--out", str(out), "--no-progress")
    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("chat-sharegpt-overload-v0 (1,000 requests) on vidur:llama-2-7b")
    assert "max_num_batched_tokens=8192" in lines[0]
    # the story names the measured part of the latency that moved: here the wait for a first step
    story = next(line for line in lines if " changes mean e2e latency by " in line)
    assert story.startswith("static-priority:shortest-prompt changes mean e2e latency by -40%")
    assert "waiting for a first step (arrival to first schedule) accounts for" in story
    # slo_attainment is 0.009 in every row: one line says which SLO and why.
    assert (
        "slo_attainment: the share of requests with TTFT < 1 s and TPOT < 0.05 s; under vllm-v1,"
        " 5.4% meet the TTFT bound" in stdout
    )
    assert "0.9% meet every bound: this load is beyond what the setting serves" in stdout
    rows = (out / "comparison.csv").read_text().splitlines()
    header = rows[0].split(",")
    same = {r.split(",")[0]: r.split(",")[header.index("same_as")] for r in rows[1:]}
    assert same["sarathi"] == "vllm-v1" and same["static-priority:shortest-prompt"] == ""
    assert (out / "comparison.png").stat().st_size > 10_000
    assert json.loads((out / "manifest.json").read_text())["files"] == [
        "comparison.csv",
        "comparison.png",
    ]


def test_compare_num_requests_shortens_the_default_scenario(tmp_path: Path, capsys) -> None:
    code, stdout, _ = run(
        capsys, "compare", "--num-requests", "100", "--out", str(tmp_path / "s"), "--no-progress"
    )
    assert code == 0 and stdout.startswith("chat-sharegpt-overload-v0 (100 requests)")


def test_compare_runs_a_cluster_scenario_as_a_cluster(tmp_path: Path, capsys) -> None:
    code, stdout, _ = run(
        capsys, "compare", "--scenario", "text2sql-hetero1-v0", "--set",
        "workload.num_queries=6", "--schedulers", "vllm-v1,sarathi", "--out",
        str(tmp_path / "c"), "--no-progress",
    )  # fmt: skip
    assert code == 0, stdout
    assert "4 instances" in stdout.splitlines()[0]
    assert "job_latency_s_mean" in stdout and "job_slo_attainment" in stdout


def test_compare_keeps_the_azure_trace_one_flag_away(tmp_path: Path, capsys) -> None:
    code, stdout, _ = run(
        capsys, "compare", "--trace", "splitwise-conv", "--num-requests", "50", "--schedulers",
        "vllm-v1,sarathi", "--out", str(tmp_path / "a"), "--no-progress",
    )  # fmt: skip
    assert code == 0
    assert "Every scheduler gives the same schedule" in stdout


# --- conventions ------------------------------------------------------------------------------


def test_version_and_envs(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("llmsched-gym 0.")
    code, stdout, _ = run(capsys, "envs", "--json")
    rows = json.loads(stdout)
    assert code == 0 and len(rows) == 53
    assert rows[0]["task"] == "Priority" and "Dict(" in rows[0]["observation_space"]


def test_set_json_and_router(tmp_path: Path, capsys) -> None:
    code, stdout, _ = run(
        capsys, "simulate", "--scenario", "chat-sharegpt-v0", "--set", "workload.num_requests=20",
        "--json", "--no-progress",
    )  # fmt: skip
    assert code == 0
    assert json.loads(stdout)["summary"]["num_requests"] == 20
    code, _, err = run(capsys, "simulate", "--set", "workload.num_requests=20")
    assert code == 2 and "--set overrides a scenario's fields; give --scenario" in err
    code, _, err = run(capsys, "simulate", "--scenario", "chat-sharegpt-v0", "--router", "random")
    assert code == 2 and "no cluster section" in err or "routes a cluster" in err
    code, stdout, _ = run(
        capsys, "simulate", "--scenario", "text2sql-hetero1-v0", "--set",
        "workload.num_queries=4", "--router", "round-robin", "--json", "--no-progress",
    )  # fmt: skip
    assert code == 0 and json.loads(stdout)["router"] == "round-robin"


def test_workloads_show_takes_set(capsys) -> None:
    code, stdout, _ = run(
        capsys, "workloads", "show", "chat-sharegpt-v0", "--set", "workload.num_requests=30"
    )
    assert code == 0 and stdout.splitlines()[1].split() == ["num_requests", "30"]


def test_num_requests_zero_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--num-requests", "0"])
    assert "--num-requests: must be an integer >= 1, got 0" in capsys.readouterr().err


def test_job_slo_outcome_in_the_console_summary(capsys) -> None:
    code, stdout, _ = run(capsys, "simulate", "--scenario", "text2sql-trace3-v0", "--no-progress")
    assert code == 0
    assert "job_slo_met" in stdout and "of 110 jobs with an SLO" in stdout
    assert "num_jobs                 110" in stdout


# --- outputs ----------------------------------------------------------------------------------


def test_output_paths_are_checked_before_the_run(tmp_path: Path, capsys, monkeypatch) -> None:
    def no_run(*a, **k):
        raise AssertionError("simulated before checking the output paths")

    monkeypatch.setattr("llmsched_gym.simulation.simulate", no_run)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, err = run(capsys, "simulate", "--num-requests", "5", "--out", str(a_file))
    assert code == 2 and "--out" in err and "is a file" in err
    code, _, err = run(capsys, "simulate", "--num-requests", "5", "--schedule-log", str(tmp_path))
    assert code == 2 and "--schedule-log" in err and "is a folder" in err
    code, _, err = run(capsys, "simulate", "--num-requests", "5", "--out", "/proc/x")
    assert code == 2 and "cannot create the output folder" in err and "Errno" not in err


def test_rerun_replaces_the_whole_set(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    base = ["simulate", "--num-requests", "30", "--out", str(out), "--no-progress"]
    assert run(capsys, *base, "--record-steps")[0] == 0
    assert (out / "steps.csv").exists()
    code, stdout, _ = run(capsys, *base)
    assert code == 0 and f"to {out}/" in stdout
    assert not (out / "steps.csv").exists()  # stale: this run does not produce it
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "requests.csv",
        "summary.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temporary folders left


def test_interrupt_is_one_line_and_keeps_the_old_set(tmp_path: Path, capsys, monkeypatch) -> None:
    out = tmp_path / "o"
    base = ["simulate", "--num-requests", "30", "--out", str(out), "--no-progress"]
    assert run(capsys, *base, "--record-steps")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("llmsched_gym.simulation.simulate", interrupted)
    code, stdout, err = run(capsys, *base)
    assert code == 130
    assert err.strip() == "llmsched-gym simulate: interrupted; no output written"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["o"]


def test_the_current_folder_is_never_replaced(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    for out in (".", str(tmp_path.parent)):
        code, _, err = run(capsys, "simulate", "--num-requests", "5", "--out", out)
        assert code == 2 and "holds the current folder" in err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_other_files_is_never_replaced(tmp_path: Path, capsys) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run(capsys, "simulate", "--num-requests", "5", "--out", str(tmp_path))
    assert code == 2 and "notes.txt" in err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_files_named_like_outputs_are_the_users_and_never_replaced(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    base = ["simulate", "--num-requests", "5", "--out", str(out), "--no-progress"]
    assert run(capsys, *base)[0] == 0
    for name in ("summary.analysis.md", "requests.2023-backup.csv", "steps.csv"):
        (out / name).write_text("mine")  # steps.csv: a known name the manifest does not list
        code, _, err = run(capsys, *base)
        assert code == 2 and name in err and "give a new or empty folder" in err
        assert (out / name).read_text() == "mine"
        (out / name).unlink()
    assert run(capsys, *base)[0] == 0


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_run_removes_the_temporary_folders_of_dead_runs_only(tmp_path: Path, capsys) -> None:
    out, host = tmp_path / "o", common._host()
    dead, live = _dead_pid(), os.getppid()
    stale = [f".o.partial-{dead}@{host}-abcd1234", f".o.old-{dead}@{host}-abcd1234",
             ".o.partial-oldstyle"]  # fmt: skip
    kept = [f".o.partial-{live}@{host}-abcd1234", f".o.partial-{dead}@elsewhere-abcd1234",
            ".o.partial-newstyle", ".o.partial-notmine", ".p.partial-abcdefgh"]  # fmt: skip
    for name in stale + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "requests.csv").write_text("x")
    two_days_ago = time.time() - 2 * 86400
    os.utime(tmp_path / ".o.partial-oldstyle", (two_days_ago, two_days_ago))
    code, _, _ = run(capsys, "simulate", "--num-requests", "5", "--out", str(out), "--no-progress")
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["o", *kept])


def test_a_run_killed_mid_swap_gets_its_old_set_back(tmp_path: Path) -> None:
    """Killed between commit's two renames: ``out`` is gone, its old set in ``.o.old-*/set``."""
    out = tmp_path / "o"
    old = tmp_path / f".o.old-{_dead_pid()}@{common._host()}-abcd1234"
    (old / "set").mkdir(parents=True)
    (old / "set" / "summary.json").write_text("{}")
    output = common.OutputSet(out).prepare()
    assert (out / "summary.json").read_text() == "{}" and not old.exists()
    output.discard()


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler for the test, as under a terminal: a shell starts a background
    job (``cmd &`` without job control) with SIGINT ignored, and Python keeps it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_during_the_swap_waits_for_it_and_says_what_was_written(
    tmp_path: Path, capsys, monkeypatch, python_ctrl_c
) -> None:
    out, plain = tmp_path / "o", ["manifest.json", "requests.csv", "summary.json"]
    base = ["simulate", "--num-requests", "30", "--out", str(out), "--no-progress"]
    assert run(capsys, *base, "--record-steps")[0] == 0
    replace = os.replace

    def interrupted_replace(src, dst):  # Ctrl-C right after the old set is moved aside
        replace(src, dst)
        if Path(src) == out:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(common.os, "replace", interrupted_replace)
    code, _, err = run(capsys, *base)
    assert code == 130
    assert err.strip() == f"llmsched-gym simulate: interrupted; wrote {out}/ (complete) before it"
    assert sorted(p.name for p in out.iterdir()) == plain

    def failing_replace(src, dst):  # the new set cannot be moved in: the old one comes back
        if Path(dst) == out and ".partial-" in str(src):
            raise OSError(28, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(common.os, "replace", failing_replace)
    code, _, err = run(capsys, *base, "--record-steps")
    assert code == 2 and "No space left on device" in err
    assert sorted(p.name for p in out.iterdir()) == plain
    assert [p.name for p in tmp_path.iterdir()] == ["o"]


# --- help -------------------------------------------------------------------------------------


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", sorted(set(_subparsers()) - {"leaderboard"}))
def test_every_option_has_help_and_its_default(command: str) -> None:
    parser = _subparsers()[command]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings and False:
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"{command} {name} has no help"
        default = action.default
        shown = default not in (None, False, [], argparse.SUPPRESS) and not isinstance(
            action, (argparse._StoreTrueAction, argparse._StoreFalseAction)
        )
        if shown:
            assert "default" in action.help, f"{command} {name}: help does not say its default"
    text = parser.format_help()
    assert "%%" not in text


def test_compare_help_has_one_budget_default() -> None:
    text = " ".join(_subparsers()["compare"].format_help().split())
    assert "default 8192" not in text
    assert "default: the scenario's, else 16384" in text


def test_list_profiles_describes_the_catalogue(capsys) -> None:
    code, stdout, _ = run(capsys, "list", "profiles")
    assert code == 0
    assert "roofline profiles" in stdout and "qwen3-32b" in stdout and "h200-141gb" in stdout


def test_no_internal_notes_in_user_text(capsys) -> None:
    texts = [p.format_help() for p in _subparsers().values()]
    code, stdout, _ = run(capsys, "list")
    texts.append(stdout)
    for text in texts:
        for note in ("NOTES §", "until clusters land", "(oracle) (oracle)"):
            assert note not in text
    assert cli  # the module under test
