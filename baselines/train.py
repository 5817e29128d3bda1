r"""Train an SB3 agent from a recipe config on a suite's train split; evaluate on its test split.

One runner for every learning recipe (RL-Zoo style: the algorithm, policy and hyperparameters
are data, in ``baselines/configs/<recipe>.yaml``, each value with the reason it was chosen):

    python baselines/train.py baselines/configs/ppo-priority.yaml --seeds 0-4

For each training seed it

1. builds ``n_envs`` ``TrainWorkloadEnv``\ s on the suite's **train** workloads of the config's
   (scenario, source) groups only (every workload is checked to be of the train split);
2. trains the config's algorithm (PPO, or MaskablePPO from sb3-contrib where the task has action
   masks) with one torch thread, printing progress;
3. writes a submission folder ``<out>/seed<S>/`` (``policy.pth``: the policy's weights;
   ``submission.yaml`` with ``policy: model`` and the ``model:`` spec the harness rebuilds the
   network from; ``train.json``) that ``llmsched-gym leaderboard evaluate`` takes as it is,
   and the learning curve (``learning_curve.csv`` / ``.png``: the return of every training
   episode against environment steps);
4. evaluates it through the leaderboard harness on the config's ``eval`` test workloads and
   scores it against the task's reference exactly as the leaderboard does (ratios to the
   reference's committed results, ``leaderboards/<task>/<reference>/results.csv``).

With several seeds it then writes ``<out>/summary.csv`` and ``summary.md``: each seed's score,
the geometric mean over seeds with its 95% t interval (the figure declared in advance as the
recipe's result), and the committed submissions of ``compare`` scored on the same workloads.
Results go under ``out/train/<recipe>/`` unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import progress_callback, quiet_logger, write_sb3_submission  # noqa: E402

from llmsched_gym.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG_KEYS = {
    "description": str,
    "task": str,
    "suite": str,
    "algorithm": str,
    "policy": str,
    "policy_kwargs": dict,
    "hyperparams": dict,
    "timesteps": int,
    "n_envs": int,
    "normalize_reward": bool,
    "train": dict,
    "eval": dict,
    "compare": list,
    "target": dict,
    "work_conserving": bool,
    "reward_baseline": str,
    "unbounded_scores": bool,
    "restarts": int,
    "validation_workloads": int,
    "warm_start": dict,
    "checkpoints": int,
}
REQUIRED = ("task", "algorithm", "policy", "timesteps", "train", "eval")
ALGORITHMS = {"PPO": "stable_baselines3", "MaskablePPO": "sb3_contrib"}
ROW_POLICIES = ("RowScorePolicy", "MaskableRowScorePolicy")
"""Policies of ``llmsched_gym.envs.sb3_policies``; any other name is SB3's own."""


def load_config(path: str | Path) -> dict[str, Any]:
    """A recipe config, validated: unknown keys, wrong types and missing fields are errors."""
    from llmsched_gym import _yaml

    path = Path(path)
    try:
        data = _yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read recipe config {path}: {exc.strerror}") from None
    except Exception as exc:  # noqa: BLE001 - any YAML error becomes a ConfigError
        raise ConfigError(f"recipe config {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe config is a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown}; allowed: {sorted(CONFIG_KEYS)}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ConfigError(f"{path}: missing key(s) {missing}")
    for key, kind in CONFIG_KEYS.items():
        value = data.get(key)
        if key in data and (not isinstance(value, kind) or kind is int and isinstance(value, bool)):
            raise ConfigError(f"{path}: {key} must be a {kind.__name__}, got {value!r}")
    if data["algorithm"] not in ALGORITHMS:
        raise ConfigError(
            f"{path}: algorithm must be one of {list(ALGORITHMS)}, got {data['algorithm']!r}"
        )
    if "groups" in data["train"]:
        value = data["train"]["groups"]
        if not isinstance(value, list) or not value or set(data["train"]) != {"groups"} or any(
            not isinstance(g, list) or len(g) != 2 or not all(isinstance(x, str) for x in g)
            for g in value
        ):
            raise ConfigError(
                f"{path}: train.groups must be a non-empty list of [scenario, source] pairs, "
                "given instead of train.scenarios and train.sources"
            )
    for key in () if "groups" in data["train"] else ("scenarios", "sources"):
        value = data["train"].get(key)
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{path}: train.{key} must be a non-empty list")
    target = data.get("target")
    if target is not None and "rule" in target:
        if not isinstance(target["rule"], str) or not isinstance(
            target.get("paired_low"), (int, float)
        ):
            raise ConfigError(
                f"{path}: a target against a rule needs rule (a committed method of the task, "
                "e.g. rule:shortest-prompt) and paired_low (the lower 95% end the paired ratio "
                f"must reach), got {target!r}"
            )
    elif target is not None and not isinstance(target.get("score_low"), (int, float)):
        raise ConfigError(f"{path}: target.score_low must be a number, got {target!r}")
    if data["policy"] in ROW_POLICIES and (data["policy"] == "MaskableRowScorePolicy") != (
        data["algorithm"] == "MaskablePPO"
    ):
        raise ConfigError(
            f"{path}: policy {data['policy']} goes with "
            f"{'MaskablePPO' if data['policy'].startswith('Maskable') else 'PPO'}, "
            f"not {data['algorithm']}"
        )
    if data.get("work_conserving") and data["task"] != "Select":
        raise ConfigError(f"{path}: work_conserving is a Select option, not {data['task']}'s")
    if data["timesteps"] < 1 or data.get("n_envs", 1) < 1:
        raise ConfigError(f"{path}: timesteps and n_envs must be positive")
    from llmsched_gym.leaderboard.suite import SUITE_VERSION

    data.setdefault("suite", SUITE_VERSION)  # the current suite (v1's recipes say so)
    data.setdefault("n_envs", 1)
    data.setdefault("normalize_reward", False)
    data.setdefault("hyperparams", {})
    data.setdefault("policy_kwargs", {})
    data.setdefault("compare", [])
    data.setdefault("work_conserving", False)
    data.setdefault("reward_baseline", None)
    data.setdefault("unbounded_scores", False)
    data.setdefault("restarts", 1)
    data.setdefault("validation_workloads", 6)
    data.setdefault("checkpoints", 0)
    if data["restarts"] < 1 or data["validation_workloads"] < 1:
        raise ConfigError(f"{path}: restarts and validation_workloads must be positive")
    if data["checkpoints"] < 0 or data["checkpoints"] and data["restarts"] > 1:
        raise ConfigError(
            f"{path}: checkpoints must be >= 0, and it selects within one run (restarts: 1)"
        )
    if "warm_start" in data:
        import warm_start

        data["warm_start"] = warm_start.check(data["warm_start"], str(path), data["task"])
    if data["unbounded_scores"] and data["task"] != "Priority":
        raise ConfigError(f"{path}: unbounded_scores is a Priority option, not {data['task']}'s")
    _hyperparams(data["hyperparams"], str(path))  # a bad schedule fails before any training
    data["name"] = path.stem
    return data


def _seeds(text: str) -> list[int]:
    """``0-4`` or ``0,2,5``."""
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            if hi < lo:
                raise ValueError
            return list(range(lo, hi + 1))
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seeds like 0-4 or 0,2,5, got {text!r}"
        ) from None


def _policy(cfg: dict[str, Any]) -> Any:
    if cfg["policy"] in ROW_POLICIES:
        from llmsched_gym.envs import sb3_policies

        return getattr(sb3_policies, cfg["policy"])
    return cfg["policy"]


def _hyperparams(hp: dict[str, Any], where: str) -> dict[str, Any]:
    """The config's hyperparameters for the algorithm: ``lin_<x>`` learning rates as schedules."""
    out = dict(hp)
    lr = out.get("learning_rate")
    if isinstance(lr, str):
        try:
            if not lr.startswith("lin_"):
                raise ValueError
            value = float(lr[4:])
            if not 0 < value < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"{where}: learning_rate must be a number or lin_<number in (0, 1)> (linear decay "
                f"to 0), got {lr!r}"
            ) from None
        from llmsched_gym.envs.sb3_policies import LinearSchedule

        out["learning_rate"] = LinearSchedule(value)
    return out


def _algorithm(name: str) -> type:
    import importlib

    try:
        return getattr(importlib.import_module(ALGORITHMS[name]), name)
    except ImportError as exc:
        raise ConfigError(
            f"{name} needs {ALGORITHMS[name]}: pip install -e '.[rl]' ({exc})"
        ) from None


def eval_workloads(suite: Any, cfg: dict[str, Any]) -> list[Any]:
    """The config's test workloads: ``eval.scenarios`` of the task (``all``: every one)."""
    wanted = cfg["eval"].get("scenarios", "all")
    ws = suite.workloads("test", tasks=[cfg["task"]])
    if wanted != "all":
        ws = [w for w in ws if w.scenario_id in wanted]
    if not ws:
        raise ConfigError(f"eval.scenarios {wanted!r} selects no test workload of {cfg['task']}")
    return ws


def committed_rows(task: Any, method: str, workload_ids: set[str]) -> list[dict[str, Any]]:
    """A committed submission's scored rows on the given workloads (its ``results.csv``)."""
    from llmsched_gym.leaderboard.cli import leaderboards_root
    from llmsched_gym.leaderboard.submission import read_results

    folder = leaderboards_root() / task.name.lower() / method.replace(":", "-")
    path = folder / "results.csv"
    if not path.is_file():
        raise ConfigError(f"compare: no committed results for {method!r} at {path}")
    return [r for r in read_results(path) if r["workload"] in workload_ids]


def _train_workloads(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """``(suite, TrainWorkloads)`` of the config's train groups."""
    from llmsched_gym.leaderboard.suite import load_suite
    from llmsched_gym.leaderboard.training import TrainWorkloads

    suite = load_suite(cfg["suite"])
    train = cfg["train"]
    return suite, TrainWorkloads(
        suite,
        cfg["task"],
        train.get("scenarios", ()),
        train.get("sources", ()),
        groups=train.get("groups"),
    )


def make_envs(cfg: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
    """``(suite, train workloads, n_envs TrainWorkloadEnvs)`` as the config asks.

    The reward shaping gets the learner's own gamma (SB3's default 0.99 when the config
    leaves it out): potential-based shaping keeps the optimal policies only with it.
    """
    suite, workloads = _train_workloads(cfg)
    n = cfg["n_envs"]
    return suite, workloads, [_train_env(cfg, workloads, i, n) for i in range(n)]


def _train_env(cfg: dict[str, Any], workloads: Any, start: int, stride: int) -> Any:
    """One ``TrainWorkloadEnv`` of the config (position ``start`` of ``stride`` in the cycle)."""
    from llmsched_gym.leaderboard.training import TrainWorkloadEnv

    kwargs = {"work_conserving": True} if cfg["work_conserving"] else {}
    return TrainWorkloadEnv(
        workloads,
        start=start,
        stride=stride,
        baseline=cfg["reward_baseline"],
        gamma=cfg["hyperparams"].get("gamma", 0.99),
        unbounded_scores=cfg["unbounded_scores"],
        lean_info=True,  # SB3 deep-copies every step's infos; it reads only episode ends'
        **kwargs,
    )


def train_one(cfg: dict[str, Any], seed: int, folder: Path, timesteps: int) -> dict[str, Any]:
    """Train one seed, write the submission folder and the learning curve; the train record.

    With ``warm_start`` the policy is first fitted to a rule's decisions (``warm_start.py``);
    with ``checkpoints: k`` the policy is saved after every ``timesteps / k`` steps and the
    one (warm start included) that scores best against the task's reference on the held-back
    ``validation_workloads`` becomes the submission. All of it counts in ``cpu_s``.
    """
    import shutil

    import torch
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from llmsched_gym.leaderboard.policy import load_submission
    from llmsched_gym.leaderboard.weights import write_weights

    torch.set_num_threads(1)  # small networks: one thread is fastest and leaves a core free
    started, cpu_started = time.perf_counter(), cpu_seconds()
    suite, workloads, envs = make_envs(cfg)
    monitors = [Monitor(e) for e in envs]  # raw episode returns, before any normalisation
    venv = DummyVecEnv([lambda m=m: m for m in monitors])
    venv.seed(seed)
    hp = _hyperparams(cfg["hyperparams"], cfg["name"])
    if cfg["normalize_reward"]:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=hp.get("gamma", 0.99))
    algorithm = _algorithm(cfg["algorithm"])
    model = algorithm(
        _policy(cfg), venv, seed=seed, verbose=0, device="cpu",
        policy_kwargs=dict(cfg["policy_kwargs"]), **hp,
    )  # fmt: skip
    quiet_logger(model)
    wrapper = "work-conserving" if cfg["work_conserving"] else None
    held = validation_workloads(workloads, cfg["validation_workloads"])
    candidates: list[tuple[int, Path]] = []  # (steps, folder) of the policies to choose from

    def save(steps: int, name: str) -> None:
        sub = folder / "checkpoints" / name
        spec = write_weights(sub, model.policy, cfg["task"], wrapper=wrapper)
        _write_submission(cfg, seed, sub, suite, spec, f"checkpoint {name} ({steps:,} steps)")
        candidates.append((steps, sub))

    warm = None
    if cfg.get("warm_start"):
        import warm_start

        section = cfg["warm_start"]
        demo_env = _train_env(cfg, workloads, 0, 1)  # the cycle's first workloads
        demos = warm_start.collect(demo_env, cfg["task"], section["expert"], section["episodes"])
        warm = warm_start.fit(model, venv, demos, section, seed)
        warm.update(
            expert=section["expert"],
            decisions=len(demos),
            episodes=demos.workloads,
            collect_cpu_s=round(demos.cpu_s, 1),
            expert_vs_reference=[round(x, 4) for x in demos.ratios],
        )
        print(
            f"{cfg['name']} seed {seed}: warm start from {section['expert']} on "
            f"{len(demos.workloads)} episodes ({len(demos):,} decisions), agreement "
            f"{warm['agreement']:.3f}",
            file=sys.stderr,
        )
        if cfg["checkpoints"]:
            save(0, "warm")
    callbacks = [progress_callback(f"{cfg['name']} seed {seed}", timesteps, stream=sys.stderr)]
    if cfg["checkpoints"]:
        callbacks.append(_checkpoint_callback(timesteps, cfg["checkpoints"], save))
    model.learn(total_timesteps=timesteps, callback=callbacks)
    if cfg["checkpoints"] and (not candidates or candidates[-1][0] < model.num_timesteps):
        save(int(model.num_timesteps), "final")
    chosen, validation = None, []
    if not candidates:
        spec = write_weights(folder, model.policy, cfg["task"], wrapper=wrapper)
    else:
        check_unreached(cfg, held, {w.id for e in envs for w in e.seen})
        folders = [sub for _, sub in candidates]
        best, ratios, scores = best_on_validation(suite, cfg["task"], folders, held)
        chosen = folders[best].name
        shutil.copyfile(folders[best] / "policy.pth", folder / "policy.pth")
        spec = load_submission(folders[best]).model
        validation = [
            {
                "checkpoint": sub.name,
                "timesteps": steps,
                "validation_ratios": [round(x, 4) for x in ratios[sub]],
                "validation_score": round(sc, 4),
            }
            for (steps, sub), sc in zip(candidates, scores, strict=True)
        ]  # fmt: skip
    wall_s, cpu_s = time.perf_counter() - started, cpu_seconds() - cpu_started
    curve = _learning_curve(monitors, envs, folder, f"{cfg['name']} seed {seed} ({cfg['task']})")
    how = (
        f"{int(model.num_timesteps):,} steps on {suite.version} {cfg['task']} train workloads "
        f"only ({workloads.describe()})"
    )
    if warm:
        n = len(warm["episodes"])
        how = f"warm-started from {warm['expert']} on {n} train workloads, {how}"
    if chosen:
        how += f"; checkpoint {chosen} chosen on {len(held)} other train workloads"
    _write_submission(cfg, seed, folder, suite, spec, how)
    record = {
        "recipe": cfg["name"],
        "seed": seed,
        "timesteps": int(model.num_timesteps),
        "episodes": len(curve),
        "train_workloads": sorted({w.id for e in envs for w in e.seen}),
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "model_bytes": (folder / "policy.pth").stat().st_size,
        "config": {k: v for k, v in cfg.items() if k != "name"},
    }
    if warm:
        record["warm_start"] = warm
    if candidates:
        record.update(
            validation_workloads=sorted(w.id for w in held),
            checkpoints=validation,
            chosen_checkpoint=chosen,
        )
    (folder / "train.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def _checkpoint_callback(timesteps: int, count: int, save: Any) -> Any:
    """An SB3 callback calling ``save(steps, name)`` after every ``timesteps / count`` steps."""
    from stable_baselines3.common.callbacks import BaseCallback

    marks = [math.ceil(timesteps * (i + 1) / count) for i in range(count)]

    class Checkpoints(BaseCallback):
        def _on_step(self) -> bool:
            while marks and self.num_timesteps >= marks[0]:
                marks.pop(0)
                save(int(self.num_timesteps), f"step{self.num_timesteps}")
            return True

    return Checkpoints()


def validation_workloads(workloads: Any, count: int) -> list[Any]:
    """The last train seeds of each train group, ``count`` in all (groups in turn).

    The training cycle hands train seeds out from the first, so a run that has not gone round
    the cycle never saw these: they rank a seed's restarts without touching a test workload.
    """
    groups = list(workloads.groups.values())
    out = []
    back = 1
    while len(out) < count:
        for ws in groups:
            if back <= len(ws) and len(out) < count:
                out.append(ws[-back])
        if back > max(len(ws) for ws in groups):
            break
        back += 1
    return out


def validation_ratios(
    suite: Any, task: str, folders: list[Path | str], workloads: list[Any]
) -> dict[Any, list[float]]:
    """Each folder's ratios per workload: the task reference's metric over the folder's policy's.

    From the leaderboard harness's runs (deterministic, as the harness runs a submission). A
    folder may also be any policy spec the harness takes (a built-in scheduler or router name).
    """
    from llmsched_gym.leaderboard.run import run_all

    name = suite.task(task).reference
    reference = run_all(suite, [(name, w) for w in workloads], desc=name)
    out = {}
    for folder in folders:
        ref = trusted(folder)
        # Folders of older runs (SB3's model.zip: pickled entries) are this project's own too.
        rows = run_all(
            suite,
            [(ref, w) for w in workloads],
            desc=f"validate {Path(folder).name}",
            trust_pickle=True,
        )
        bad = [r for r in rows if r["status"] != "ok"]
        if bad:
            raise ConfigError(f"{folder}: {bad[0]['workload']} failed: {bad[0]['error']}")
        out[folder] = [a["value"] / b["value"] for a, b in zip(reference, rows, strict=True)]
    return out


def check_unreached(cfg: dict[str, Any], held: list[Any], trained_on: Any) -> None:
    """An error if training reached a held-back validation workload (ids in ``trained_on``)."""
    seen = {w.id for w in held} & set(trained_on)
    if seen:
        raise ConfigError(
            f"{cfg['name']}: training reached the validation workloads {sorted(seen)[:3]}; "
            "lower timesteps or validation_workloads"
        )


def best_on_validation(
    suite: Any, task: str, folders: list[Path], held: list[Any]
) -> tuple[int, dict[Any, list[float]], list[float]]:
    """``(index of the best folder, each folder's ratios, each folder's score)`` on ``held``."""
    from llmsched_gym.leaderboard.score import geometric_score

    ratios = validation_ratios(suite, task, folders, held)
    scores = [geometric_score(ratios[f]).value for f in folders]
    return max(range(len(folders)), key=lambda j: scores[j]), ratios, scores


def trusted(folder: Path | str) -> Any:
    """A weights folder this script trained, as a harness ``PolicyRef`` run in this process.

    The harness runs a submission's model in a sandboxed process, one message per decision
    (about 2 ms each here); weights this script has just written are its own, so its
    validation and test runs build the same agent (``weights.build_agent``: the same network,
    weights and one torch thread) here, several times faster, with the same actions. The
    leaderboard's own ``evaluate`` of a submitted seed runs it sandboxed again. Anything else
    (a built-in policy name, a folder of another kind) is returned as given, for the harness.
    """
    from llmsched_gym.leaderboard.policy import PolicyRef, load_submission, wrap_agent
    from llmsched_gym.leaderboard.weights import build_agent

    if not (Path(folder) / "submission.yaml").is_file():
        return str(folder)
    sub = load_submission(folder)
    if sub.model is None:
        return str(folder)

    class InProcessModel(PolicyRef):
        def build(self, task: Any, seed: int, workload: Any = None, **_: Any) -> Any:
            return wrap_agent(task, build_agent(Path(self.entry), self.model, task.name), self.name)

    return InProcessModel(str(folder), sub.method, "model", str(folder), model=sub.model)


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (sandboxes, workers)."""
    import os

    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def train_seed(cfg: dict[str, Any], seed: int, folder: Path, timesteps: int) -> dict[str, Any]:
    """Train one seed: one run, or with ``restarts`` k > 1 the best of k runs.

    The k runs have seeds ``seed``, ``seed + 1000``, ...; the one scoring best on held-back
    train workloads (``validation_workloads``) becomes the seed's submission. The CPU time
    counted is all of it: every run and the validation.
    """
    import shutil

    from llmsched_gym.leaderboard.policy import load_submission

    if cfg["restarts"] == 1:
        return train_one(cfg, seed, folder, timesteps)
    started, cpu_started = time.perf_counter(), cpu_seconds()
    suite, workloads = _train_workloads(cfg)
    held = validation_workloads(workloads, cfg["validation_workloads"])
    runs, folders = [], []
    for j in range(cfg["restarts"]):
        sub = folder / f"restart{j}"
        record = train_one(cfg, seed + 1000 * j, sub, timesteps)
        check_unreached(cfg, held, record["train_workloads"])
        runs.append(record)
        folders.append(sub)
    best, ratios, scores = best_on_validation(suite, cfg["task"], folders, held)
    for name in ("policy.pth", "learning_curve.csv", "learning_curve.png"):
        shutil.copyfile(folders[best] / name, folder / name)
    _write_submission(
        cfg, seed, folder, suite, load_submission(folders[best]).model,
        f"the best of {len(runs)} runs of {runs[best]['timesteps']:,} steps on {suite.version} "
        f"{cfg['task']} train workloads only ({workloads.describe()}), chosen on {len(held)} "
        "other train workloads",
    )  # fmt: skip
    wall_s, cpu_s = time.perf_counter() - started, cpu_seconds() - cpu_started
    record = {
        "recipe": cfg["name"],
        "seed": seed,
        "timesteps": sum(r["timesteps"] for r in runs),
        "episodes": runs[best]["episodes"],
        "train_workloads": sorted({w for r in runs for w in r["train_workloads"]}),
        "validation_workloads": sorted(w.id for w in held),
        "restarts": [
            {
                "seed": r["seed"],
                "timesteps": r["timesteps"],
                "cpu_s": r["cpu_s"],
                "validation_ratios": [round(x, 4) for x in ratios[f]],
                "validation_score": round(sc, 4),
            }
            for r, f, sc in zip(runs, folders, scores, strict=True)
        ],  # fmt: skip
        "chosen_restart": best,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 1),
        "model_bytes": (folder / "policy.pth").stat().st_size,
        "config": {k: v for k, v in cfg.items() if k != "name"},
    }
    (folder / "train.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def _write_submission(
    cfg: dict[str, Any], seed: int, folder: Path, suite: Any, spec: dict[str, Any], how: str
) -> None:
    """The seed folder's ``submission.yaml`` for the weights ``spec`` describes; ``how`` says
    what was trained."""
    name = cfg["algorithm"]
    write_sb3_submission(
        folder,
        spec,
        method=f"{cfg['name']}-seed{seed}",
        task=cfg["task"],
        suite=suite.version,
        training=(
            f"{name} ({CITATIONS[name]}; {cfg['policy']}), {how}; "
            f"recipe baselines/configs/{cfg['name']}.yaml, seed {seed}"
        ),
    )


CITATIONS = {
    "PPO": "Schulman et al., 2017, arXiv:1707.06347",
    "MaskablePPO": "PPO with invalid-action masking, Huang and Ontañón, 2020, arXiv:2006.14171",
}


def _learning_curve(
    monitors: list[Any], envs: list[Any], folder: Path, title: str
) -> list[dict[str, Any]]:
    """Every training episode's return against environment steps; CSV and PNG in ``folder``.

    The environments step in lockstep, so an episode of environment ``i`` that ends after its
    ``t``-th step ends at about ``t * n_envs`` steps in all. With a reward baseline the
    episode's return is the shaped one, and a second panel shows ``vs_reference``: the
    baseline's total latency over the agent's on the same workload (above 1: better), which,
    unlike the return, does not move with how loaded each train workload is.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    rows = []
    for i, (m, env) in enumerate(zip(monitors, envs, strict=True)):
        ends = np.cumsum(m.get_episode_lengths()) * len(monitors)
        for j, (step, ret) in enumerate(zip(ends, m.get_episode_rewards(), strict=True)):
            ratio = env.ratios[j] if j < len(env.ratios) else float("nan")  # [] without baseline
            row = {"env": i, "timesteps": int(step), "return": float(ret), "vs_reference": ratio}
            rows.append(row)
    rows.sort(key=lambda r: (r["timesteps"], r["env"]))
    frame = pd.DataFrame(rows, columns=["env", "timesteps", "return", "vs_reference"])
    frame.to_csv(folder / "learning_curve.csv", index=False)
    panels = [("return", "episode return (train workloads)")]
    if frame["vs_reference"].notna().any():
        panels.append(("vs_reference", f"{envs[0].baseline} latency / agent's (same workload)"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 3.2 * len(panels)), squeeze=False)
    for ax, (column, label) in zip(axes[:, 0], panels, strict=True):
        if len(frame):
            window = max(1, len(frame) // 20)
            ax.plot(frame["timesteps"], frame[column], ".", alpha=0.35, label="episode")
            smooth = frame[column].rolling(window, min_periods=1).mean()
            ax.plot(frame["timesteps"], smooth, "-", label=f"running mean of {window}")
            ax.legend()
        if column == "vs_reference":
            ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(label)
    axes[0, 0].set_title(f"Learning curve: {title}")
    fig.tight_layout()
    fig.savefig(folder / "learning_curve.png", dpi=110)
    plt.close(fig)
    return rows


def evaluate_folder(cfg: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """Scored harness rows of a trained submission folder on the config's test workloads."""
    from llmsched_gym.leaderboard.run import run_all
    from llmsched_gym.leaderboard.score import score_rows
    from llmsched_gym.leaderboard.submission import write_results
    from llmsched_gym.leaderboard.suite import load_suite

    suite = load_suite(cfg["suite"])
    task = suite.task(cfg["task"])
    ws = eval_workloads(suite, cfg)
    ref = trusted(folder)
    rows = run_all(suite, [(ref, w) for w in ws], desc=f"evaluate {folder.name}")
    ref = committed_rows(task, task.reference, {w.id for w in ws})
    scored = score_rows(rows, ref)
    write_results(scored, folder / "results.csv")
    return scored


def summarize(cfg: dict[str, Any], per_seed: dict[int, list[dict[str, Any]]], out: Path) -> str:
    """Per-seed scores, the across-seed geometric mean with its t interval, and comparisons."""
    import pandas as pd

    from llmsched_gym.leaderboard.score import geometric_score
    from llmsched_gym.leaderboard.suite import load_suite

    suite = load_suite(cfg["suite"])
    task = suite.task(cfg["task"])
    ids = {r["workload"] for rows in per_seed.values() for r in rows}
    table = []
    seed_scores = {}
    for seed, rows in per_seed.items():
        s = geometric_score(r["ratio"] for r in rows)
        seed_scores[seed] = s.value
        table.append({"method": f"{cfg['name']} seed {seed}", "score": s.text(), "n": s.n})
    across = geometric_score(seed_scores.values())
    table.insert(
        0,
        {
            "method": f"**{cfg['name']}: {len(per_seed)} seed{'s' if len(per_seed) > 1 else ''}**",
            "score": across.text(),
            "n": across.n,
        },
    )
    for method in cfg["compare"]:
        s = geometric_score(r["ratio"] for r in committed_rows(task, method, ids))
        table.append({"method": f"{method} (committed)", "score": s.text(), "n": s.n})
    frame = pd.DataFrame(table)
    frame.to_csv(out / "summary.csv", index=False)
    lines = [
        f"# {cfg['name']}: {task.name}, score against {task.reference} on "
        f"{len(ids)} test workloads ({cfg['eval'].get('scenarios', 'all')})",
        "",
        "Scores: geometric mean of the reference's metric over the method's (above 1 is better);"
        " a seed's interval is over workloads, the across-seed one over seeds.",
        "",
        "| method | score [95% CI] | n |",
        "|---|---:|---:|",
        *[f"| {r['method']} | {r['score']} | {r['n']} |" for r in table],
    ]
    target = cfg.get("target")
    if target and "rule" in target:
        lines += ["", *paired_lines(task, target, per_seed, out)]
    elif target and across.n < 2:
        lines += ["", f"Target ({target.get('text', '')}): needs two or more seeds to judge."]
    elif target:
        met = across.low >= float(target["score_low"])
        lines += [
            "",
            f"Target ({target.get('text', '')}): across-seed interval's lower end >= "
            f"{target['score_low']}: **{'met' if met else 'missed'}** "
            f"(lower end {across.low:.3f}).",
        ]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def paired_lines(
    task: Any, target: dict[str, Any], per_seed: dict[int, list[dict[str, Any]]], out: Path
) -> list[str]:
    """The learned agent against a rule, paired by workload: ratios, intervals and verdict.

    Per workload the ratio is the rule's metric over the agent's (above 1: the agent is
    better), i.e. the agent's score over the rule's. Two 95% t intervals on logs: over the
    seeds (each seed's geometric mean over workloads) and over the workloads (each workload's
    geometric mean over seeds, paired as ``leaderboard diff`` pairs). The verdict uses the
    lower of the two lower ends, declared before the seeds ran: "at or above" needs the
    across-seed geometric mean >= 1 and that end >= ``paired_low``; "above" needs it >= 1.02.
    """
    import numpy as np

    from llmsched_gym.leaderboard.score import geometric_score

    ids = {r["workload"] for rows in per_seed.values() for r in rows}
    rule = {r["workload"]: r for r in committed_rows(task, target["rule"], ids)}
    logs: dict[str, list[float]] = {}
    seed_means = []
    for rows in per_seed.values():
        mine = []
        for r in rows:
            if r["status"] == "ok" and r["workload"] in rule:
                x = math.log(rule[r["workload"]]["value"] / r["value"])
                mine.append(x)
                logs.setdefault(r["workload"], []).append(x)
        seed_means.append(math.exp(float(np.mean(mine))))
    failed = sum(r["status"] != "ok" for rows in per_seed.values() for r in rows)
    by_seed = geometric_score(seed_means)
    by_workload = geometric_score(math.exp(float(np.mean(v))) for v in logs.values())
    lows = [x for x in (by_seed.low, by_workload.low) if math.isfinite(x)]  # one seed: no interval
    low = min(lows) if lows else math.nan
    at = by_workload.value >= 1.0 and low >= float(target["paired_low"]) and not failed
    above = low >= 1.02 and not failed
    verdict = "above (lower end >= 1.02)" if above else "at or above" if at else "missed"
    (out / "paired.json").write_text(
        json.dumps(
            {
                "rule": target["rule"],
                "per_seed": dict(zip(map(str, per_seed), seed_means, strict=True)),
                "value": by_workload.value,
                "interval_over_seeds": [by_seed.low, by_seed.high],
                "interval_over_workloads": [by_workload.low, by_workload.high],
                "verdict": verdict,
            },
            indent=2,
        )
        + "\n"
    )
    return [
        f"Against {target['rule']} (paired by workload; above 1: the learned agent is better): "
        f"{by_workload.value:.3f}; 95% interval over seeds {by_seed.text().partition(' ')[2]}, "
        f"over workloads {by_workload.text().partition(' ')[2]}; per seed "
        + ", ".join(f"{x:.3f}" for x in seed_means)
        + (f"; {failed} failed runs" if failed else ""),
        "",
        f"Target ({target.get('text', '')}): **{verdict}** (lower end {low:.3f}; 'at or above' "
        f"needs the mean >= 1 and the lower end >= {target['paired_low']}).",
    ]


def plot_curves(cfg: dict[str, Any], out: Path, seeds: list[int]) -> Path | None:
    """The recipe's learning curves, every seed, with the rule's and the reference's lines.

    Top: each seed's policies along training (the warm start at 0 steps, then the
    checkpoints), scored deterministically against the task's reference on the held-back
    train workloads, beside the target rule scored on the same workloads (reference = 1).
    Bottom: the running mean of the training episodes' ``vs_reference`` (shaped recipes) or
    return, per seed. Written to ``out/curves.png``; ``None`` when no seed has checkpoints.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from llmsched_gym.leaderboard.run import run_all
    from llmsched_gym.leaderboard.score import geometric_score
    from llmsched_gym.leaderboard.suite import load_suite

    records = {}
    for seed in seeds:
        path = out / f"seed{seed}" / "train.json"
        if path.is_file():
            records[seed] = json.loads(path.read_text())
    records = {s: r for s, r in records.items() if r.get("checkpoints")}
    if not records:
        return None
    suite = load_suite(cfg["suite"])
    task = suite.task(cfg["task"])
    rule = (cfg.get("target") or {}).get("rule")
    held_ids = next(iter(records.values()))["validation_workloads"]
    held = [w for w in suite.train_workloads(task.name) if w.id in held_ids]
    lines = {f"{task.reference} (reference)": 1.0}
    if rule:
        rows = run_all(suite, [(p, w) for p in (task.reference, rule) for w in held], desc=rule)
        ref, mine = rows[: len(held)], rows[len(held) :]
        lines[f"{rule} (rule)"] = geometric_score(
            a["value"] / b["value"] for a, b in zip(ref, mine, strict=True)
        ).value
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 7))
    for seed, rec in records.items():
        pts = rec["checkpoints"]
        top.plot(
            [c["timesteps"] for c in pts], [c["validation_score"] for c in pts], "o-",
            label=f"seed {seed}",
        )  # fmt: skip
        curve = out / f"seed{seed}" / "learning_curve.csv"
        if curve.is_file():
            frame = pd.read_csv(curve)
            column = "vs_reference" if frame["vs_reference"].notna().any() else "return"
            window = max(1, len(frame) // 10)
            bottom.plot(
                frame["timesteps"], frame[column].rolling(window, min_periods=1).mean(),
                label=f"seed {seed}",
            )  # fmt: skip
            bottom.set_ylabel(f"training episodes' {column} (running mean)")
    for (name, value), style in zip(lines.items(), ("--", ":"), strict=False):
        top.axhline(value, color="grey" if "reference" in name else "black", ls=style, label=name)
    top.set_ylabel(f"score vs {task.reference}, {len(held)} held-back train workloads")
    top.set_title(f"{cfg['name']} ({task.name}): every seed along training")
    bottom.set_xlabel("environment steps (0: the warm start)")
    for ax in (top, bottom):
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finished(folder: Path) -> bool:
    """Whether a seed folder holds a finished run: its training record and its test results."""
    return (folder / "train.json").is_file() and (folder / "results.csv").is_file()


def main(argv: list[str] | None = None) -> int:
    """Train every seed, evaluate, summarise; 2 on a bad config."""
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", help="recipe config YAML (baselines/configs/*.yaml)")
    p.add_argument("--seeds", type=_seeds, default=[0], help="training seeds, e.g. 0-4 (default 0)")
    p.add_argument(
        "--timesteps", type=int, default=None, help="override the config's training steps"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="output folder (default out/train/<recipe>)"
    )
    p.add_argument(
        "--no-eval", action="store_true", help="train and save only; skip the test evaluation"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="read a seed whose folder already holds train.json and results.csv instead of"
        " retraining it (to add seeds to a stopped or partial run's summary)",
    )
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config)
        timesteps = args.timesteps if args.timesteps is not None else cfg["timesteps"]
        if timesteps < 1:
            raise ConfigError(f"--timesteps must be positive, got {timesteps}")
        out = args.out or Path("out/train") / cfg["name"]
        per_seed = {}
        for seed in args.seeds:
            folder = out / f"seed{seed}"
            if args.resume and not args.no_eval and _finished(folder):
                from llmsched_gym.leaderboard.submission import read_results

                per_seed[seed] = read_results(folder / "results.csv")
                print(f"seed {seed}: read {folder}/results.csv (--resume)", file=sys.stderr)
                text = summarize(cfg, per_seed, out)
                continue
            # A retrained seed's earlier test rows are not this model's (--resume reads them).
            (folder / "results.csv").unlink(missing_ok=True)
            record = train_seed(cfg, seed, folder, timesteps)
            print(
                f"seed {seed}: {record['timesteps']:,} steps, {record['episodes']} episodes, "
                f"{record['cpu_s']:.0f} CPU-s; wrote {folder}/",
                file=sys.stderr,
            )
            if not args.no_eval:
                per_seed[seed] = evaluate_folder(cfg, folder)
                text = summarize(cfg, per_seed, out)  # after every seed: a stopped run keeps it
        if per_seed:
            print(text)
            print(f"wrote {out}/summary.csv and summary.md")
            curves = plot_curves(cfg, out, args.seeds)
            if curves is not None:
                print(f"wrote {curves}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
