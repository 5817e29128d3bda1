"""Learned submissions as weights: the model schema, the pickle refusal, and equivalence."""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.weights import check_model_spec, pickled_entries, scan_folder

ROOT = Path(__file__).resolve().parents[2]
LEADERBOARDS = ROOT / "leaderboards"
LEARNED = [
    "priority/ppo",
    "priority/ppo-shaped",
    "priority/ppo-shaped-restarts",
    "select/maskable-ppo",
    "select/maskable-ppo-shaped",
    "route/maskable-ppo-t2s",
    "route/maskable-ppo-t2s-restarts",
]
DROP = object()
GOOD = {
    "library": "stable-baselines3",
    "algorithm": "PPO",
    "policy": "MultiInputPolicy",
    "policy_kwargs": {"net_arch": {"pi": [32, 32], "vf": [32, 32]}, "activation_fn": "tanh"},
    "weights": "policy.pth",
    "top_k": 16,
}


class Payload:
    """Unpickling it creates ``marker``: the harmless stand-in for code a pickle runs."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "policy.pth").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": 1}, r"field 'model' has unknown key\(s\) \['extra'\]"),
        ({"weights": DROP}, "field 'model.weights' is required"),
        ({"algorithm": "A2C"}, "field 'model.algorithm' must be one of"),
        ({"library": "sb3-contrib"}, "field 'model.library' must be 'stable-baselines3' for PPO"),
        ({"policy": "MaskableRowScorePolicy"}, "field 'model.policy' must be one of"),
        ({"policy_kwargs": {"features_extractor_class": "x"}}, r"'model.policy_kwargs' has unknown"),
        ({"policy_kwargs": {"activation_fn": "os.system"}}, "'model.policy_kwargs.activation_fn'"),
        ({"policy_kwargs": {"net_arch": [32, "x"]}}, "'model.policy_kwargs.net_arch' must be"),
        ({"policy_kwargs": {"log_std_init": True}}, "'model.policy_kwargs.log_std_init' must be"),
        ({"weights": "../policy.pth"}, "'model.weights' must be a path inside the submission"),
        ({"weights": "/tmp/policy.pth"}, "'model.weights' must be a path inside the submission"),
        ({"weights": "other.pth"}, "'model.weights' 'other.pth': no such file"),
        ({"weights": "policy.zip"}, "'model.weights' must be a file name ending"),
        ({"top_k": True}, "'model.top_k' must be a positive integer"),
        ({"top_k": DROP, "instances": 4}, r"needs top_k \(not instances\) for task Priority"),
        ({"unbounded_scores": "yes"}, "'model.unbounded_scores' must be true or false"),
        ({"wrapper": "work-conserving"}, "'model.wrapper' 'work-conserving' is for Select"),
        ({"wrapper": "mine"}, "'model.wrapper' must be null or one of"),
    ],
)
def test_model_spec_errors_name_the_field(folder: Path, change: dict, message: str) -> None:
    spec = {k: v for k, v in {**GOOD, **change}.items() if v is not DROP}
    with pytest.raises(ConfigError, match=message):
        check_model_spec(spec, "sub.yaml", folder=folder, task="Priority")


def test_model_spec_task_bound_fields(folder: Path) -> None:
    assert check_model_spec(GOOD, "s", folder=folder, task="Priority")["wrapper"] is None
    route = {**GOOD, "algorithm": "MaskablePPO", "library": "sb3-contrib", "top_k": None}
    with pytest.raises(ConfigError, match=r"needs instances \(not top_k\) for task Route"):
        check_model_spec(route, "s", folder=folder, task="Route")
    assert check_model_spec({**route, "instances": 4}, "s", folder=folder, task="Route")
    with pytest.raises(ConfigError, match="'model.unbounded_scores' is for Priority's scores"):
        check_model_spec({**route, "instances": 4, "unbounded_scores": True}, "s", task="Route")
    outside = folder / "link.pth"
    outside.symlink_to(folder.parent / "elsewhere.pth")
    (folder.parent / "elsewhere.pth").write_bytes(b"")
    with pytest.raises(ConfigError, match="'model.weights' 'link.pth' resolves outside"):
        check_model_spec({**GOOD, "weights": "link.pth"}, "s", folder=folder)


def _submission(folder: Path, policy: str, model: dict | None = None) -> Path:
    import yaml

    meta = {"suite": "llmsched-v1", "task": "Priority", "method": "m", "policy": policy}
    if model is not None:
        meta["model"] = model
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return folder


def test_policy_model_and_the_model_field_go_together(folder: Path) -> None:
    from llmsched_gym.leaderboard.policy import load_submission

    for policy, model in (("model", None), ("policy.py:make", GOOD)):
        _submission(folder, policy, model)
        with pytest.raises(ConfigError, match="fields 'policy' and 'model' go together"):
            load_submission(folder)
    _submission(folder, "model", {**GOOD, "top_k": 0})
    with pytest.raises(ConfigError, match=r"submission.yaml: field 'model.top_k' must be a posi"):
        load_submission(folder)


def test_weights_module_and_a_model_submission_load_without_torch() -> None:
    """The base install has no torch: the module, and reading a learned submission, need none."""
    code = (
        "import sys; from llmsched_gym.leaderboard.policy import load_submission; "
        f"s = load_submission({str(LEADERBOARDS / 'priority' / 'ppo')!r}); "
        "assert s.model['algorithm'] == 'PPO'; "
        "assert not {'torch', 'stable_baselines3'} & set(sys.modules), 'imported torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _crafted_zip(path: Path, marker: Path) -> Path:
    """An SB3-style model.zip whose data JSON holds a payload that would create ``marker``."""
    payload = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    data = {
        "policy_class": {":type:": "<class 'abc.ABCMeta'>", ":serialized:": payload},
        "n_steps": 2048,
    }
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps(data))
    return path


def test_a_crafted_model_zip_is_refused_before_it_runs(tmp_path: Path, capsys) -> None:
    from llmsched_gym.cli.main import main

    marker = tmp_path / "ran"
    (tmp_path / "sub").mkdir()
    folder = _submission(tmp_path / "sub", "policy.py:make")
    (folder / "policy.py").write_text(
        "def make(task='Priority'):\n"
        "    from stable_baselines3 import PPO\n"
        "    from pathlib import Path\n"
        "    return PPO.load(Path(__file__).with_name('model.zip'), device='cpu')\n"
    )
    _crafted_zip(folder / "model.zip", marker)
    assert pickled_entries(folder / "model.zip") == [
        "data['policy_class'] (:serialized: <class 'abc.ABCMeta'>)"
    ]
    evaluate = ["evaluate", str(folder), "--task", "Priority", "--suite", "quick"]
    for command in (["validate", str(folder), "--quick"], evaluate):
        assert main(["leaderboard", *command, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "refused" in err and "model.zip: data['policy_class']" in err
        assert "--trust-pickle" in err
        assert not marker.exists()


def test_the_crafted_payload_is_live(tmp_path: Path) -> None:
    """What the refusal prevents: SB3's loader runs the payload (so the test above can fail)."""
    pytest.importorskip("stable_baselines3", reason="needs the [rl] extra")
    from stable_baselines3.common.save_util import load_from_zip_file

    marker = tmp_path / "ran"
    load_from_zip_file(_crafted_zip(tmp_path / "model.zip", marker), device="cpu")
    assert marker.exists()


def test_pickled_objects_in_weights_are_refused(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs the [rl] extra")
    from llmsched_gym.leaderboard.weights import build_agent, load_weights

    marker = tmp_path / "ran"
    torch.save({"w": torch.zeros(2), "evil": Payload(marker)}, tmp_path / "policy.pth")
    (found,) = pickled_entries(tmp_path / "policy.pth")
    assert "not loadable with torch.load(weights_only=True)" in found
    with pytest.raises(ConfigError, match=r"not a weights file torch.load\(weights_only=True\)"):
        load_weights(tmp_path / "policy.pth")
    with pytest.raises(ConfigError, match="pickled objects are refused"):
        build_agent(tmp_path, GOOD, "Priority")
    (tmp_path / "blob.bin2").write_bytes(pickle.dumps({"a": 1}))  # a pickle by its first bytes
    (tmp_path / "x.pkl").write_bytes(b"anything")
    assert scan_folder(tmp_path) == [
        "blob.bin2: a pickle (the whole file)",
        f"policy.pth: {found}",
        "x.pkl: a pickle (the whole file)",
    ]
    assert not marker.exists()


def test_weights_must_fit_the_declared_architecture(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs the [rl] extra")
    from llmsched_gym.leaderboard.policy import load_submission
    from llmsched_gym.leaderboard.weights import build_agent

    sub = load_submission(LEADERBOARDS / "priority" / "ppo")
    state = torch.load(sub.folder / "policy.pth", weights_only=True)
    del state["action_net.bias"]
    torch.save(state, tmp_path / "policy.pth")
    with pytest.raises(ConfigError, match=r"missing keys \['action_net.bias'\]"):
        build_agent(tmp_path, sub.model, "Priority")
    with pytest.raises(ConfigError, match=r"shape mismatches \['log_std: file \(16,\), model \(8,\)'"):
        build_agent(sub.folder, {**sub.model, "top_k": 8}, "Priority")


@pytest.mark.parametrize(
    ("task", "policy", "kwargs", "extra"),
    [
        ("Priority", "MultiInputPolicy", {"net_arch": [8], "activation_fn": "relu"}, {}),
        ("Priority", "RowScorePolicy", {"use_sde": True, "log_std_init": -1.0}, {"wide": True}),
        ("Select", "MaskableRowScorePolicy", {}, {"wrapper": "work-conserving"}),
        ("Route", "MaskableRowScorePolicy", {}, {}),
    ],
)
def test_written_weights_rebuild_the_same_agent(tmp_path, task, policy, kwargs, extra) -> None:
    """write_weights' spec and file give an agent acting as the policy it was written from
    (under the same action masks, for MaskablePPO)."""
    pytest.importorskip("sb3_contrib", reason="needs the [rl] extra")
    from torch import nn

    from llmsched_gym.leaderboard.training import task_spaces
    from llmsched_gym.leaderboard.weights import POLICIES, _attr, build_agent, write_weights

    algorithm = "PPO" if task == "Priority" else "MaskablePPO"
    wide = extra.get("wide", False)
    obs_space, act_space = task_spaces(task, top_k=8, instances=3, unbounded_scores=wide)
    built = dict(kwargs)
    if "activation_fn" in built:
        built["activation_fn"] = nn.ReLU
    original = _attr(POLICIES[(algorithm, policy)])(obs_space, act_space, lambda _: 3e-4, **built)
    spec = write_weights(tmp_path, original, task, wrapper=extra.get("wrapper"))
    if wide:  # scores beyond +-1 pass unclipped, as TrainWorkloadEnv(unbounded_scores) trained
        assert spec["policy_kwargs"]["exploration"] == "sde"
    assert spec["policy"] == policy and spec["policy_kwargs"].items() >= kwargs.items()
    assert spec.get("top_k", spec.get("instances")) == (3 if task == "Route" else 8)
    assert spec["unbounded_scores"] == wide
    agent = build_agent(tmp_path, spec, task)
    inner = agent.model if "wrapper" in extra else agent
    obs_space.seed(0)
    rng = np.random.default_rng(0)
    for _ in range(50):
        obs = obs_space.sample()
        kw = {}
        if algorithm == "MaskablePPO":
            kw["action_masks"] = rng.random(act_space.n) < 0.5
            kw["action_masks"][rng.integers(act_space.n)] = True
        a, _ = original.predict(obs, deterministic=True, **kw)
        b, _ = inner.predict(obs, deterministic=True, **kw)
        assert np.array_equal(a, b)
    assert scan_folder(tmp_path) == []


def test_committed_submissions_hold_no_pickles() -> None:
    """No folder under leaderboards/ needs --trust-pickle."""
    pytest.importorskip("torch", reason="checking .pth files needs torch")
    found = [f"{p.parent.name}: {e}" for p in LEADERBOARDS.glob("*/*/") for e in scan_folder(p)]
    assert found == []


def test_a_weights_built_agent_reproduces_its_committed_rows() -> None:
    """One quick test workload of a PPO (Priority) and a MaskablePPO (Route) submission."""
    pytest.importorskip("sb3_contrib", reason="the learned submissions need the [rl] extra")
    from llmsched_gym.leaderboard.run import VALIDATED_COLUMNS, run_workload
    from llmsched_gym.leaderboard.submission import compare_results, read_results
    from llmsched_gym.leaderboard.suite import load_suite

    for rel in ("priority/ppo", "route/maskable-ppo-t2s"):
        folder = LEADERBOARDS / rel
        committed = read_results(folder / "results.csv")
        suite = load_suite(committed[0]["suite"])
        w = suite.workloads("test", tasks=[committed[0]["task"]], quick=True)[0]
        row = run_workload(suite, str(folder), w)
        assert row["status"] == "ok", row["error"]
        mine = [r for r in committed if r["workload"] == w.id]
        assert len(mine) == 1
        assert compare_results(mine, [row], VALIDATED_COLUMNS) == []


@pytest.mark.parametrize("rel", LEARNED)
def test_learned_submissions_ship_weights_only(rel: str) -> None:
    """Every committed learned submission: ``policy: model``, a .pth, nothing that unpickles."""
    from llmsched_gym.leaderboard.policy import load_submission
    from llmsched_gym.leaderboard.weights import scan_folder

    folder = LEADERBOARDS / rel
    sub = load_submission(folder)
    assert sub.policy == "model" and sub.model is not None and sub.kind == "agent"
    assert (folder / sub.model["weights"]).is_file()
    assert scan_folder(folder) == []
    assert not list(folder.glob("*.py")) and not list(folder.glob("*.zip"))
