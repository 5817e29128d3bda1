"""Suite and submission values are checked before any run; tasks keep the headroom they claim."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

from llmsched_gym import _yaml
from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.policy import load_submission
from llmsched_gym.leaderboard.suite import SUITE_VERSION, load_suite, parse_suite

ROOT = Path(__file__).resolve().parents[2]
SUITE_FILE = ROOT / "llmsched_gym" / "leaderboard" / "suites" / f"{SUITE_VERSION}.yaml"


@pytest.fixture(scope="module")
def data() -> dict:
    return _yaml.safe_load(SUITE_FILE.read_text())


def _refused(data: dict, edit, *words: str) -> None:
    bad = copy.deepcopy(data)
    edit(bad)
    with pytest.raises(ConfigError) as err:
        parse_suite(bad, "s.yaml")
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_the_shipped_suite_parses(data) -> None:
    assert parse_suite(data, "s.yaml").version == SUITE_VERSION


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("per_workload_s", -5, ("per_workload_s", "-5")),
        ("per_step_s", "fast", ("per_step_s", "'fast'")),
        ("per_step_s", math.inf, ("per_step_s", "finite")),
        ("per_workload_s", True, ("per_workload_s",)),
    ],
)
def test_limits_must_be_finite_seconds(data, key, value, words) -> None:
    _refused(data, lambda d: d.setdefault("limits", {}).__setitem__(key, value), *words)


@pytest.mark.parametrize("tie", [math.nan, -0.1, 1.0, "1%"])
def test_the_tie_threshold_is_a_fraction(data, tie) -> None:
    _refused(data, lambda d: d.__setitem__("tie_threshold", tie), "tie_threshold")


def test_a_missing_base_scenario_is_found_at_load_with_a_suggestion(data) -> None:
    def edit(d):
        d["tasks"]["Priority"]["scenarios"][0]["base"] = "chat-sharegpt-overlaod-v0"

    _refused(data, edit, "chat-sharegpt-overlaod-v0", "did you mean 'chat-sharegpt-overload-v0'")


def test_a_bad_override_is_found_at_load(data) -> None:
    def edit(d):
        d["sources"]["sharegpt"]["overrides"]["workload.default_max_tokens"] = 0

    _refused(data, edit, "sharegpt", "default_max_tokens")


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("task: [Priority]", ("'task' must be a non-empty string", "['Priority']")),
        ("kind: scheduler", ("'kind' must be one of",)),
        ("suite: 7", ("'suite' must be a non-empty string",)),
    ],
)
def test_submission_fields_name_what_is_wrong(tmp_path, line, words) -> None:
    fields = {"suite": SUITE_VERSION, "task": "Priority", "policy": "vllm-v1"}
    key = line.split(":")[0]
    text = "".join(f"{k}: {v}\n" for k, v in fields.items() if k != key) + line + "\n"
    (tmp_path / "submission.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_submission(tmp_path)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_every_scored_task_has_the_headroom_its_decision_claims() -> None:
    """The committed headroom table: 3% through the decision for every scored task.

    Through the decision: the best agent or the lookahead oracle, both acting only through the
    task's action (``leaderboards/headroom-decisions.md``); an unscored task says why.
    """
    from llmsched_gym.leaderboard.headroom import MIN_HEADROOM, headroom_summary, read_headroom

    suite = load_suite(SUITE_VERSION)
    rows = read_headroom(ROOT / "leaderboards" / "headroom.csv")
    summary = {s["task"]: s for s in headroom_summary(rows)}
    assert set(summary) == set(suite.tasks)
    for name, task in suite.tasks.items():
        if task.scored:
            assert summary[name]["decision_headroom"] >= MIN_HEADROOM, name
        else:
            assert task.unscored_reason and summary[name]["decision_headroom"] < MIN_HEADROOM, name


def test_rows_failing_for_an_input_error_make_evaluate_exit_nonzero(tmp_path, capsys) -> None:
    """A trace that is not there fails every row (TraceError): evaluate says so and exits 2."""
    from llmsched_gym.cli.main import main

    suite = tmp_path / "s.yaml"
    suite.write_text(
        "suite: s-1\nsources:\n  gone:\n    overrides: {workload.trace: "
        f"{tmp_path / 'missing.jsonl'}, workload.arrival: poisson, workload.num_requests: 20}}\n"
        "    test: {seeds: [1000]}\n"
        "tasks:\n  Priority:\n    decision: order\n    metric: e2e_s_mean\n"
        "    reference: vllm-v1\n    baselines: [vllm-v1]\n    scenarios:\n"
        "      - {id: a, base: chat-sharegpt-overload-v0, level: knee, load: 1.0,\n"
        "         sources: [gone], capacity: {gone: 1.0}}\n"
    )
    argv = ["leaderboard", "evaluate", "random", "--task", "Priority", "--suite-file", str(suite),
            "--out", str(tmp_path / "out"), "--quiet"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "failed for an input error" in err and "missing.jsonl" in err


def test_declared_references_must_be_what_the_harness_runs_as_whole_schedulers(data) -> None:
    """``references:`` and the rows' kinds come from one rule; a drifted list is refused."""
    _refused(data, lambda d: d["tasks"]["Priority"]["references"].remove("proserve"),
             "Priority.references must list exactly", "proserve")  # fmt: skip
    _refused(data, lambda d: d["tasks"]["Priority"]["references"].append("rule:shortest-prompt"),
             "Priority.references must list exactly")  # fmt: skip
    task = parse_suite(data, "s.yaml").task("Priority")
    assert [b for b in task.baselines if task.kind_of(b) == "reference"] == list(task.references)
    assert load_suite("llmsched-v1").task("Priority").kind_of("proserve") == "reference"
