"""The config-driven training runner (``baselines/train.py``) and its shipped recipe configs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from llmsched_gym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2] / "baselines"
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def _train():
    sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("llmsched_train_recipe", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_four_recipes_ship() -> None:
    """One recipe per learning task; a variant of one is named after it (e.g. ppo-priority-*)."""
    recipes = {"ppo-priority", "maskable-ppo-select", "maskable-ppo-route", "ppo-knob"}
    stems = {p.stem for p in CONFIGS}
    assert recipes <= stems
    assert all(any(s.startswith(r) for r in recipes) for s in stems)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_configs_are_runnable(path: Path) -> None:
    """Every config names train groups with train workloads, test workloads to evaluate on,
    committed results to compare with, and an algorithm that fits its task's action space."""
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import TrainWorkloads, env_class

    train = _train()
    cfg = train.load_config(path)
    suite = load_suite(cfg["suite"])
    task = suite.task(cfg["task"])
    _, workloads = train._train_workloads(cfg)
    assert isinstance(workloads, TrainWorkloads) and workloads.task == task.name
    ws = train.eval_workloads(suite, cfg)
    assert ws and all(w.split == "test" for w in ws)
    ids = {w.id for w in ws}
    for method in [task.reference, *cfg["compare"]]:
        assert len(train.committed_rows(task, method, ids)) == len(ids), method
    masked = hasattr(env_class(task.name), "action_masks")
    if cfg["algorithm"] == "MaskablePPO":
        assert masked


def test_bad_configs_name_the_problem(tmp_path) -> None:
    import yaml

    train = _train()
    good = yaml.safe_load((ROOT / "configs" / "ppo-priority.yaml").read_text())
    cases = [
        ({"extra": 1}, r"unknown key\(s\) \['extra'\]"),
        ({"algorithm": "A2C"}, "algorithm must be one of"),
        ({"timesteps": "many"}, "timesteps must be a int"),
        ({"timesteps": True}, "timesteps must be a int"),
        ({"target": {"text": "x"}}, "target.score_low must be a number"),
        ({"policy": "MaskableRowScorePolicy"}, "MaskableRowScorePolicy goes with MaskablePPO"),
        ({"train": {"scenarios": [], "sources": ["sharegpt"]}}, "train.scenarios must be a"),
        ({"work_conserving": True}, "work_conserving is a Select option, not Priority's"),
        ({"reward_baseline": 1}, "reward_baseline must be a str"),
        ({"train": {"groups": [["chat-knee"]]}}, r"train.groups must be a non-empty list of"),
        (
            {"train": {"groups": [["chat-knee", "sharegpt"]], "sources": ["sharegpt"]}},
            "given instead of train.scenarios and train.sources",
        ),
        ({"target": {"rule": 3, "paired_low": 0.98}}, "a target against a rule needs"),
        ({"target": {"rule": "rule:shortest-prompt"}}, "a target against a rule needs"),
        ({"checkpoints": 2, "restarts": 2}, "it selects within one run"),
        ({"warm_start": {"episodes": 2}}, r"warm_start.expert is required"),
        ({"warm_start": {"expert": "rule:x", "episodes": 2, "x": 1}}, "unknown key"),
        ({"warm_start": {"expert": "vllm-v1", "episodes": 2}}, "must be a built-in rule"),
        ({"warm_start": {"expert": "rule:least-backlog", "episodes": 2}}, "has no Priority form"),
        ({"warm_start": {"expert": "rule:shortest-prompt", "episodes": 0}}, "must be positive"),
        (
            {"warm_start": {"expert": "rule:shortest-prompt", "episodes": 1, "epochs": True}},
            "warm_start.epochs must be a int",
        ),
        (
            {
                "task": "Select",
                "algorithm": "MaskablePPO",
                "policy": "MaskableRowScorePolicy",
                "unbounded_scores": True,
            },
            "unbounded_scores is a Priority option, not Select's",
        ),
    ]
    for i, (change, message) in enumerate(cases):
        path = tmp_path / f"c{i}.yaml"
        path.write_text(yaml.safe_dump({**good, **change}))
        with pytest.raises(ConfigError, match=message):
            train.load_config(path)
    missing = tmp_path / "m.yaml"
    missing.write_text("task: Priority\n")
    with pytest.raises(ConfigError, match=r"missing key\(s\)"):
        train.load_config(missing)
    broken = tmp_path / "b.yaml"
    broken.write_text("task: [\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        train.load_config(broken)
    assert train.main([str(tmp_path / "none.yaml")]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo-priority", "maskable-ppo-select"])
def test_a_short_run_writes_a_valid_submission(tmp_path, name: str) -> None:
    pytest.importorskip("sb3_contrib", reason="the recipes need the [rl] extra")
    from llmsched_gym.leaderboard.submission import load_submission
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.weights import build_agent, scan_folder

    train = _train()
    cfg = train.load_config(ROOT / "configs" / f"{name}.yaml")
    cfg["hyperparams"] = {**cfg["hyperparams"], "n_steps": 128, "batch_size": 64}
    record = train.train_one(cfg, 0, tmp_path / "seed0", 256)
    assert record["timesteps"] == 256
    assert all(w.split("/")[3] == "train" for w in record["train_workloads"])
    sub = load_submission(tmp_path / "seed0")
    assert sub.task == cfg["task"]
    assert sub.policy == "model" and not (tmp_path / "seed0" / "policy.py").exists()
    assert (sub.model["wrapper"] == "work-conserving") == cfg["work_conserving"]
    assert f"recipe baselines/configs/{name}.yaml, seed 0" in sub.training
    assert scan_folder(tmp_path / "seed0") == []  # nothing pickled: no --trust-pickle needed
    ref = sub.policy_ref(load_suite().task(cfg["task"]))
    assert ref.kind == "model" and ref.model == sub.model  # built in the sandbox's child
    agent = build_agent(tmp_path / "seed0", sub.model, cfg["task"])
    assert agent.predict is not None
    assert (tmp_path / "seed0" / "learning_curve.png").stat().st_size > 0
    header = (tmp_path / "seed0" / "learning_curve.csv").read_text().splitlines()[0]
    assert header == "env,timesteps,return,vs_reference"


def test_resume_reads_finished_seeds_instead_of_retraining(tmp_path, capsys) -> None:
    """--resume summarises a committed seed's results without training it again."""
    import shutil

    train = _train()
    committed = ROOT / "results" / "maskable-ppo-select" / "seed0"
    shutil.copytree(committed, tmp_path / "seed0")
    code = train.main(
        [
            str(ROOT / "configs" / "maskable-ppo-select.yaml"),
            "--seeds",
            "0",
            "--resume",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    assert "read" in capsys.readouterr().err
    summary = (tmp_path / "summary.md").read_text()
    assert "maskable-ppo-select seed 0 | 1.140" in summary
    assert not (tmp_path / "seed0" / "policy.pth").exists()  # nothing was trained


def test_retraining_a_seed_drops_its_earlier_test_rows(tmp_path, monkeypatch) -> None:
    """A seed trained again (here with --no-eval) loses the results.csv of the model it
    replaces, so a later --resume cannot take those rows for the new model's."""
    train = _train()
    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "results.csv").write_text("stale\n")
    record = {"timesteps": 1, "episodes": 0, "cpu_s": 0.0}
    monkeypatch.setattr(train, "train_seed", lambda *args: record)
    config = str(ROOT / "configs" / "maskable-ppo-select.yaml")
    assert train.main([config, "--seeds", "0", "--no-eval", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "seed0" / "results.csv").exists()


def test_shaped_recipe_builds_its_envs_with_the_learners_gamma() -> None:
    """The shaping takes the config's gamma (Ng et al.: only the learner's own keeps the
    optimal policies), the baseline is the task's reference, and the scores are not clipped."""
    train = _train()
    cfg = train.load_config(ROOT / "configs" / "ppo-priority-shaped.yaml")
    _, workloads, envs = train.make_envs(cfg)
    assert len(envs) == cfg["n_envs"] == 8
    assert {e.gamma for e in envs} == {cfg["hyperparams"]["gamma"]} == {1.0}
    assert {e.baseline for e in envs} == {"vllm-v1"}
    assert envs[0].action_space.high[0] > 1
    seen = [w for e in envs for w in [next(e._source)]]
    assert len({w.id for w in seen}) == 8  # the environments split the train cycle
    plain = train.load_config(ROOT / "configs" / "ppo-priority.yaml")
    assert train.make_envs(plain)[2][0].baseline is None


def _probe_eval():
    spec = importlib.util.spec_from_file_location("llmsched_probe_eval", ROOT / "probe_eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_eval_scores_a_folder_on_train_workloads(capsys) -> None:
    """probe_eval runs a submission folder on train workloads past --skip (never test ones) and
    prints its ratios against vllm-v1; a bad count is refused."""
    probe_eval = _probe_eval()
    folder = Path(__file__).resolve().parents[2] / "leaderboards" / "select" / "maskable-ppo-shaped"
    with pytest.raises(SystemExit):
        probe_eval.main([str(folder), "--task", "Select", "--scenario", "capped-overload",
                         "--sources", "sharegpt", "--count", "0"])  # fmt: skip
    out = probe_eval.main([str(folder), "--task", "Select", "--scenario", "capped-overload",
                           "--sources", "sharegpt", "--skip", "3", "--count", "1"])  # fmt: skip
    (ratios,) = out.values()
    assert len(ratios) == 1 and 0.5 < ratios[0] < 2.0
    assert "geometric mean" in capsys.readouterr().out


@pytest.mark.slow
def test_restarts_keep_the_run_best_on_held_back_train_workloads(tmp_path) -> None:
    """restarts: k runs per seed, ranked on the last train seeds (never seen in training); the
    seed folder is the best run's submission and its record counts every run's steps."""
    pytest.importorskip("sb3_contrib", reason="the recipes need the [rl] extra")
    from llmsched_gym.leaderboard.submission import load_submission

    train = _train()
    cfg = train.load_config(ROOT / "configs" / "ppo-priority-shaped.yaml")
    cfg.update(restarts=2, validation_workloads=1, n_envs=2)
    cfg["hyperparams"] = {**cfg["hyperparams"], "n_steps": 64, "batch_size": 64}
    record = train.train_seed(cfg, 3, tmp_path / "seed3", 128)
    runs = record["restarts"]
    assert [r["seed"] for r in runs] == [3, 1003]
    assert record["timesteps"] == sum(r["timesteps"] for r in runs) == 256
    assert record["validation_workloads"] == ["Priority/chat-overload/sharegpt/train/999"]
    assert not set(record["validation_workloads"]) & set(record["train_workloads"])
    best = record["chosen_restart"]
    assert runs[best]["validation_score"] == max(r["validation_score"] for r in runs)
    chosen = (tmp_path / "seed3" / f"restart{best}" / "policy.pth").read_bytes()
    assert (tmp_path / "seed3" / "policy.pth").read_bytes() == chosen
    assert record["cpu_s"] >= sum(r["cpu_s"] for r in runs)
    sub = load_submission(tmp_path / "seed3")
    assert sub.task == "Priority" and sub.model["unbounded_scores"]
    with pytest.raises(ConfigError, match="restarts and validation_workloads must be positive"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(
            (ROOT / "configs" / "ppo-priority-shaped.yaml").read_text() + "restarts: 0\n"
        )
        train.load_config(bad)


def test_linear_learning_rate_schedule(tmp_path) -> None:
    """learning_rate: lin_<x> is a linear decay from x to 0 (a picklable package class); any
    other string is refused when the config loads."""
    from llmsched_gym.envs.sb3_policies import LinearSchedule

    train = _train()
    text = (ROOT / "configs" / "ppo-priority-shaped.yaml").read_text()
    good = tmp_path / "good.yaml"
    good.write_text(text.replace("learning_rate: 3.0e-4", "learning_rate: lin_3.0e-4"))
    schedule = train._hyperparams(train.load_config(good)["hyperparams"], "good")["learning_rate"]
    assert isinstance(schedule, LinearSchedule)
    assert schedule(1.0) == 3.0e-4 and schedule(0.5) == 1.5e-4 and schedule(0.0) == 0.0
    for value in ("lin_x", "cos_3e-4", "lin_2"):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text.replace("learning_rate: 3.0e-4", f"learning_rate: {value}"))
        with pytest.raises(ConfigError, match="learning_rate must be a number or lin_"):
            train.load_config(bad)
