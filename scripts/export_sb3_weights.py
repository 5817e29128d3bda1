r"""Convert SB3 submissions (``model.zip`` + a ``policy.py`` loading it) to weights and a spec.

    python scripts/export_sb3_weights.py leaderboards/priority/my-ppo --trust-pickle --remove-old

For each FOLDER it loads ``model.zip`` with SB3 (this unpickles the zip's ``data``: run it only
on a model you trust, hence the required ``--trust-pickle``), writes the policy's state dict to
``policy.pth``, and sets ``policy: model`` and the ``model:`` spec in ``submission.yaml``
(``llmsched_gym.leaderboard.weights``). Before writing the yaml it checks that the agent built
from the file acts as the loaded model does on sampled observations. ``--remove-old`` then
deletes ``model.zip`` and the ``policy.py`` entry point that loaded it, so that the folder
passes the leaderboard's pickle check without ``--trust-pickle``. ``--wrapper work-conserving``:
a Select model trained with ``work_conserving=True`` (its ``policy.py`` wrapped it in
``WorkConservingAgent``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.errors import ConfigError

SAMPLES = 256
"""Observations sampled from the task's space to compare the two agents on."""


def load_trusted(path: Path) -> Any:
    """The SB3 algorithm saved at ``path`` (PPO or MaskablePPO, read from its policy class)."""
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
    from stable_baselines3 import PPO
    from stable_baselines3.common.save_util import load_from_zip_file

    data, _, _ = load_from_zip_file(path, device="cpu", load_data=True)
    masked = issubclass(data["policy_class"], MaskableActorCriticPolicy)
    return (MaskablePPO if masked else PPO).load(path, device="cpu")


def same_actions(model: Any, agent: Any, seed: int = 0) -> int:
    """Observations (of ``SAMPLES`` drawn) on which the two agents' actions differ."""
    space = model.observation_space
    space.seed(seed)
    differ = 0
    for _ in range(SAMPLES):
        obs = space.sample()
        a, _ = model.predict(obs, deterministic=True)
        b, _ = agent.predict(obs, deterministic=True)
        differ += not np.array_equal(np.asarray(a), np.asarray(b))
    return differ


def export(folder: Path, *, model_file: str, wrapper: str | None, remove_old: bool) -> dict:
    """Convert one submission folder; the ``model:`` spec written."""
    import yaml

    from llmsched_gym.leaderboard.policy import load_submission
    from llmsched_gym.leaderboard.weights import MODEL_POLICY, build_agent, write_weights

    sub = load_submission(folder)
    path = folder / model_file
    if not path.is_file():
        raise ConfigError(f"{folder}: no {model_file} to export")
    model = load_trusted(path)
    spec = write_weights(folder, model.policy, sub.task, wrapper=wrapper)
    agent = build_agent(folder, spec, sub.task)
    inner = agent.model if wrapper is not None else agent  # compare without the wrapper's masks
    differ = same_actions(model, inner)
    if differ:
        raise ConfigError(f"{folder}: the rebuilt agent differs on {differ}/{SAMPLES} samples")
    meta_path = folder / "submission.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    old = meta.get("policy", "")
    out: dict[str, Any] = {}
    for key, value in meta.items():
        out[key] = MODEL_POLICY if key == "policy" else value
        if key == "policy":
            out["model"] = spec
    meta_path.write_text(yaml.safe_dump(out, sort_keys=False, width=1000))
    if remove_old:
        path.unlink()
        entry = old.rpartition(":")[0]
        if entry.endswith(".py") and (folder / entry).is_file():
            (folder / entry).unlink()
    removed = f"; removed {model_file}" if remove_old else ""
    print(
        f"{folder}: wrote {spec['weights']} and submission.yaml (same actions on {SAMPLES} "
        f"sampled observations){removed}"
    )
    return spec


def main(argv: list[str] | None = None) -> int:
    """Export every folder; 2 on an error (named)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path, metavar="FOLDER", help="submission folders")
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="required: loading model.zip unpickles its data, which can run any code",
    )
    p.add_argument("--model", default="model.zip", help="the SB3 file in each folder")
    p.add_argument("--wrapper", choices=("work-conserving",), help="the agent's project wrapper")
    p.add_argument(
        "--remove-old",
        action="store_true",
        help="delete the model file and the policy.py entry point that loaded it",
    )
    args = p.parse_args(argv)
    if not args.trust_pickle:
        p.error("loading an SB3 model.zip runs code from it: pass --trust-pickle if you trust it")
    try:
        for folder in args.folders:
            export(folder, model_file=args.model, wrapper=args.wrapper, remove_old=args.remove_old)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
