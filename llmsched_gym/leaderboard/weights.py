"""Learned submissions as weights: the project builds the network, the folder ships numbers only.

SB3's ``model.zip`` stores cloudpickled objects (spaces, the policy class, schedules) in its
``data`` JSON, so loading one runs whatever code its author put there. A learned submission
instead ships a state dict (``policy.pth``, read with ``torch.load(weights_only=True)``) and
declares its architecture in ``submission.yaml`` with ``policy: model``::

    model:
      library: stable-baselines3      # or sb3-contrib (MaskablePPO)
      algorithm: PPO                  # PPO | MaskablePPO: what the policy class is built for
      policy: MultiInputPolicy        # SB3's, or RowScorePolicy / MaskableRowScorePolicy
      policy_kwargs: {net_arch: {pi: [32, 32], vf: [32, 32]}, activation_fn: tanh}
      weights: policy.pth             # the policy's state_dict(), relative to the folder
      top_k: 16                       # engine tasks: the environment's top_k in training
      instances: 4                    # Route instead: the cluster's instances in training
      unbounded_scores: false         # Priority: trained with TrainWorkloadEnv(unbounded_scores)
      wrapper: null                   # or work-conserving (Select)

Every name is looked up in a fixed table here (``POLICIES``, ``ACTIVATIONS``, ``WRAPPERS``):
no class path or code comes from the folder. ``build_agent`` builds the policy for the task's
spaces (``training.task_spaces``), loads the weights strictly and returns an agent with SB3's
``predict``, acting exactly as ``PPO.load(model.zip)`` did. ``scan_folder`` lists what in a
folder would unpickle code; the CLI refuses such a folder unless given ``--trust-pickle``.
torch and SB3 are imported inside the functions: the base install needs neither.
"""

from __future__ import annotations

import inspect
import io
import json
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.tasks import task_spec

__all__ = [
    "ACTIVATIONS",
    "MODEL_FIELDS",
    "MODEL_POLICY",
    "POLICIES",
    "WRAPPERS",
    "WeightsAgent",
    "build_agent",
    "build_policy",
    "check_model_spec",
    "load_weights",
    "model_spec",
    "pickled_entries",
    "refuse_pickled",
    "scan_folder",
    "write_weights",
]

MODEL_POLICY = "model"
"""The ``policy:`` of a submission that the project builds from its ``model:`` field."""

MODEL_FIELDS = (
    "library",
    "algorithm",
    "policy",
    "policy_kwargs",
    "weights",
    "top_k",
    "instances",
    "unbounded_scores",
    "wrapper",
)
_REQUIRED = ("library", "algorithm", "policy", "weights")

ALGORITHMS = {"PPO": "stable-baselines3", "MaskablePPO": "sb3-contrib"}
"""Algorithm -> the library (pip name) its policies come from."""

POLICIES = {
    ("PPO", "MultiInputPolicy"): "stable_baselines3.common.policies:MultiInputActorCriticPolicy",
    ("PPO", "RowScorePolicy"): "llmsched_gym.envs.sb3_policies:RowScorePolicy",
    ("MaskablePPO", "MultiInputPolicy"): (
        "sb3_contrib.common.maskable.policies:MaskableMultiInputActorCriticPolicy"
    ),
    ("MaskablePPO", "MaskableRowScorePolicy"): (
        "llmsched_gym.envs.sb3_policies:MaskableRowScorePolicy"
    ),
}
"""(algorithm, policy name) -> the policy class (SB3's aliases and the project's own)."""

ACTIVATIONS = {
    "tanh": "Tanh",
    "relu": "ReLU",
    "elu": "ELU",
    "leaky_relu": "LeakyReLU",
    "gelu": "GELU",
    "silu": "SiLU",
}
"""``policy_kwargs.activation_fn`` name -> ``torch.nn`` class."""

WRAPPERS = {"work-conserving": ("Select", "llmsched_gym.envs.select_v0:WorkConservingAgent")}
"""Wrapper name -> (the task it is for, the project class wrapping the agent)."""

_KWARG_TYPES: dict[str, tuple[type, ...]] = {
    "net_arch": (list, dict),
    "activation_fn": (str,),
    "log_std_init": (int, float),
    "use_sde": (bool,),
    "full_std": (bool,),
    "use_expln": (bool,),
    "squash_output": (bool,),
    "ortho_init": (bool,),
    "share_features_extractor": (bool,),
    "exploration": (str,),
    "features_extractor_kwargs": (dict,),
}
"""``policy_kwargs`` the schema takes: plain values of the policy constructors' arguments."""

_NOT_SPEC = (
    "observation_space",
    "action_space",
    "lr_schedule",
    "optimizer_class",
    "optimizer_kwargs",
)
"""Constructor arguments the spec leaves out: the spaces are the task's, and the rest only
trains (an inference-only policy never steps its optimizer)."""

_WEIGHT_SUFFIXES = (".pth", ".pt")
_PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".dill")
_TORCH_SUFFIXES = (".pth", ".pt", ".ckpt", ".bin")


def _fail(where: str, key: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: field 'model.{key}' {problem}")


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value
    )


def _check_policy_kwargs(kwargs: Any, where: str) -> dict[str, Any]:
    if not isinstance(kwargs, Mapping):
        raise _fail(where, "policy_kwargs", f"must be a mapping, got {kwargs!r}")
    unknown = sorted(set(kwargs) - set(_KWARG_TYPES))
    if unknown:
        allowed = sorted(_KWARG_TYPES)
        raise _fail(where, "policy_kwargs", f"has unknown key(s) {unknown}; allowed: {allowed}")
    for key, value in kwargs.items():
        types = _KWARG_TYPES[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = " or ".join(t.__name__ for t in types)
            raise _fail(where, f"policy_kwargs.{key}", f"must be a {names}, got {value!r}")
    arch = kwargs.get("net_arch")
    split = isinstance(arch, Mapping) and set(arch) == {"pi", "vf"}
    if arch is not None and not (_int_list(arch) or (split and all(map(_int_list, arch.values())))):
        raise _fail(
            where,
            "policy_kwargs.net_arch",
            f"must be a list of positive layer sizes or {{pi: [...], vf: [...]}}, got {arch!r}",
        )
    act = kwargs.get("activation_fn")
    if act is not None and act not in ACTIVATIONS:
        names = sorted(ACTIVATIONS)
        raise _fail(where, "policy_kwargs.activation_fn", f"must be one of {names}, got {act!r}")
    for key, value in kwargs.get("features_extractor_kwargs", {}).items():
        if not isinstance(value, (int, float, bool)):
            key = f"policy_kwargs.features_extractor_kwargs.{key}"
            raise _fail(where, key, f"must be a number or true/false, got {value!r}")
    return dict(kwargs)


def _check_weights(name: Any, where: str, folder: Path | None) -> str:
    if not isinstance(name, str) or not name.endswith(_WEIGHT_SUFFIXES):
        raise _fail(
            where,
            "weights",
            f"must be a file name ending {list(_WEIGHT_SUFFIXES)} (a state dict that "
            f"torch.load reads with weights_only=True), got {name!r}",
        )
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise _fail(where, "weights", f"must be a path inside the submission folder, got {name!r}")
    if folder is not None:
        path = (folder / rel).resolve()
        if not path.is_relative_to(folder.resolve()):
            raise _fail(where, "weights", f"{name!r} resolves outside the folder, to {path}")
        if not path.is_file():
            raise _fail(where, "weights", f"{name!r}: no such file in {folder}")
    return name


def _count(spec: Mapping[str, Any], key: str, where: str) -> int:
    value = spec[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _fail(where, key, f"must be a positive integer, got {value!r}")
    return value


def check_model_spec(
    spec: Any, where: str, *, folder: Path | None = None, task: str | None = None
) -> dict[str, Any]:
    """The ``model:`` mapping of a submission, validated; errors name ``where`` and the field.

    With ``folder``, the weights file must exist inside it; with ``task``, ``top_k`` (engine
    tasks) or ``instances`` (Route) is the one required, and task-bound options must fit it.
    """
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: field 'model' must be a mapping of {list(MODEL_FIELDS)}")
    unknown = sorted(set(spec) - set(MODEL_FIELDS))
    if unknown:
        raise ConfigError(
            f"{where}: field 'model' has unknown key(s) {unknown}; allowed: {list(MODEL_FIELDS)}"
        )
    for key in _REQUIRED:
        if key not in spec:
            raise _fail(where, key, "is required")
    algorithm, library = spec["algorithm"], spec["library"]
    if algorithm not in ALGORITHMS:
        raise _fail(where, "algorithm", f"must be one of {list(ALGORITHMS)}, got {algorithm!r}")
    if library != ALGORITHMS[algorithm]:
        want = ALGORITHMS[algorithm]
        raise _fail(where, "library", f"must be {want!r} for {algorithm}, got {library!r}")
    names = [name for algo, name in POLICIES if algo == algorithm]
    if (algorithm, spec["policy"]) not in POLICIES:
        got = spec["policy"]
        raise _fail(where, "policy", f"must be one of {names} for {algorithm}, got {got!r}")
    out = {
        "library": library,
        "algorithm": algorithm,
        "policy": spec["policy"],
        "policy_kwargs": _check_policy_kwargs(spec.get("policy_kwargs", {}), where),
        "weights": _check_weights(spec["weights"], where, folder),
    }
    given = [k for k in ("top_k", "instances") if spec.get(k) is not None]
    if task is None:
        need, ok = "exactly one of top_k (engine tasks) or instances (Route)", len(given) == 1
    else:
        key = task_spec(task, where).size_key
        need, ok = f"{key} (not {'top_k' if key == 'instances' else 'instances'})", given == [key]
    if not ok:
        raise ConfigError(
            f"{where}: field 'model' needs {need} for task {task or '?'}, got {given or 'neither'}"
        )
    out[given[0]] = _count(spec, given[0], where)
    unbounded = spec.get("unbounded_scores", False)
    if not isinstance(unbounded, bool):
        raise _fail(where, "unbounded_scores", f"must be true or false, got {unbounded!r}")
    if unbounded and task is not None and task_spec(task, where).action != "scores":
        raise _fail(where, "unbounded_scores", f"is for Priority's scores, not task {task}")
    out["unbounded_scores"] = unbounded
    wrapper = spec.get("wrapper")
    if wrapper is not None and wrapper not in WRAPPERS:
        raise _fail(where, "wrapper", f"must be null or one of {list(WRAPPERS)}, got {wrapper!r}")
    if wrapper is not None and task not in (None, WRAPPERS[wrapper][0]):
        raise _fail(where, "wrapper", f"{wrapper!r} is for {WRAPPERS[wrapper][0]}, not {task}")
    out["wrapper"] = wrapper
    return out


def _attr(target: str) -> Any:
    import importlib

    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _import_rl(library: str) -> None:
    try:
        import stable_baselines3  # noqa: F401
        import torch  # noqa: F401

        if library == "sb3-contrib":
            import sb3_contrib  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"a learned submission needs torch and {library}: pip install -e '.[rl]' ({exc})"
        ) from None


def build_policy(spec: Mapping[str, Any], task: str) -> Any:
    """The SB3 policy ``spec`` (checked) declares, for ``task``'s spaces, untrained, on the CPU."""
    _import_rl(spec["library"])
    from torch import nn

    from llmsched_gym.leaderboard.spaces import task_spaces

    obs, act = task_spaces(
        task,
        top_k=spec.get("top_k"),
        instances=spec.get("instances"),
        unbounded_scores=spec["unbounded_scores"],
    )
    kwargs = dict(spec["policy_kwargs"])
    if "activation_fn" in kwargs:
        kwargs["activation_fn"] = getattr(nn, ACTIVATIONS[kwargs["activation_fn"]])
    cls = _attr(POLICIES[(spec["algorithm"], spec["policy"])])
    try:
        policy = cls(obs, act, lambda _: 0.0, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"model: {spec['policy']} does not take policy_kwargs {spec['policy_kwargs']}: {exc}"
        ) from None
    return policy.to("cpu")


def load_weights(path: Path) -> dict[str, Any]:
    """A state dict from ``path`` read with ``torch.load(weights_only=True)``: tensors only."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - pickled objects and broken files alike
        raise ConfigError(
            f"{path}: not a weights file torch.load(weights_only=True) reads (pickled objects "
            f"are refused): {_first_line(exc)}"
        ) from None
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConfigError(f"{path}: expected a state dict (parameter name -> tensor)")
    return dict(state)


def _load_state(policy: Any, state: Mapping[str, Any], path: Path) -> None:
    own = policy.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [
        f"{k}: file {tuple(state[k].shape)}, model {tuple(v.shape)}"
        for k, v in own.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        raise ConfigError(
            f"{path} does not fit the architecture the model field declares: missing keys "
            f"{missing[:8]}, unexpected keys {unexpected[:8]}, shape mismatches {shapes[:8]}"
        )
    policy.load_state_dict(state, strict=True)


class WeightsAgent:
    """An SB3 policy built from weights, with the ``predict`` of the model it came from.

    ``masked``: a MaskablePPO policy, which takes the action masks (``MaskablePPO.predict``);
    a PPO policy ignores them, as ``PPO.predict`` has none.
    """

    def __init__(self, policy: Any, *, masked: bool, top_k: int | None = None) -> None:
        self.policy = policy
        self.masked = masked
        if top_k is not None:
            self.top_k = top_k

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = True,
        action_masks: Any = None,
    ) -> Any:
        """SB3's ``predict``: the action (clipped into a Box space, as SB3 does) and state."""
        if self.masked:
            return self.policy.predict(
                observation, state, episode_start, deterministic, action_masks=action_masks
            )
        return self.policy.predict(observation, state, episode_start, deterministic)


def build_agent(folder: Path, model: Mapping[str, Any], task: str) -> Any:
    """The agent of a ``policy: model`` submission: its ``model`` spec built, its weights loaded.

    ``folder`` holds the weights; ``task`` (a suite task name) gives the spaces. The policy runs
    on the CPU with one torch thread, in evaluation mode.
    """
    folder = Path(folder)
    spec = check_model_spec(model, str(folder / "submission.yaml"), folder=folder, task=task)
    policy = build_policy(spec, task)
    import torch

    torch.set_num_threads(1)
    path = folder / spec["weights"]
    _load_state(policy, load_weights(path), path)
    policy.set_training_mode(False)
    top_k = spec.get("top_k")
    agent = WeightsAgent(policy, masked=spec["algorithm"] == "MaskablePPO", top_k=top_k)
    if spec["wrapper"] is not None:
        agent = _attr(WRAPPERS[spec["wrapper"]][1])(agent)
        agent.top_k = top_k  # the harness wraps the agent with the top_k it was trained with
    return agent


def _policy_name(policy: Any, algorithm: str) -> str:
    cls = type(policy)
    for (algo, name), target in POLICIES.items():
        if algo == algorithm and _attr(target) is cls:
            return name
    raise ConfigError(
        f"{cls.__module__}.{cls.__name__} is not a policy the project builds; known for "
        f"{algorithm}: {[n for a, n in POLICIES if a == algorithm]}"
    )


def model_spec(
    policy: Any, task: str, *, weights: str = "policy.pth", wrapper: str | None = None
) -> dict[str, Any]:
    """The ``model:`` spec of a trained SB3 ``policy`` for ``task``: what ``build_agent`` builds.

    Reads the policy's class, constructor arguments and spaces; an argument the schema cannot
    say (a class outside ``ACTIVATIONS``, a custom extractor) is an error naming it.
    """
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    from llmsched_gym.leaderboard.spaces import SCORE_BOUND

    algorithm = "MaskablePPO" if isinstance(policy, MaskableActorCriticPolicy) else "PPO"
    name = _policy_name(policy, algorithm)
    params = policy._get_constructor_parameters()
    untrained = type(policy)(policy.observation_space, policy.action_space, lambda _: 0.0)
    base = untrained._get_constructor_parameters()
    signature: dict[str, Any] = {}  # the constructors' own defaults (gSDE's when use_sde)
    for cls in reversed(type(policy).__mro__):
        for p in inspect.signature(cls.__init__).parameters.values():
            if p.default is not p.empty:
                signature[p.name] = p.default
    kwargs: dict[str, Any] = {}
    for key, value in params.items():
        if key in _NOT_SPEC:
            continue
        if value == base.get(key) or (key in signature and value == signature[key]):
            continue
        if key == "activation_fn":
            names = {v: k for k, v in ACTIVATIONS.items()}
            if value.__name__ not in names or value.__module__ != "torch.nn.modules.activation":
                raise ConfigError(f"activation_fn {value!r} is not one of {sorted(ACTIVATIONS)}")
            value = names[value.__name__]
        elif key not in _KWARG_TYPES:
            raise ConfigError(f"{name}'s argument {key}={value!r} is not in the model schema")
        kwargs[key] = value
    if kwargs.get("net_arch") is not None and isinstance(kwargs["net_arch"], Mapping):
        kwargs["net_arch"] = {k: list(v) for k, v in kwargs["net_arch"].items()}
    obs, act = policy.observation_space, policy.action_space
    spec: dict[str, Any] = {
        "library": ALGORITHMS[algorithm],
        "algorithm": algorithm,
        "policy": name,
        "policy_kwargs": kwargs,
        "weights": weights,
    }
    spec[task_spec(task).size_key] = int(obs["mask"].n)
    high = getattr(act, "high", None)
    spec["unbounded_scores"] = bool(high is not None and float(high.max()) == SCORE_BOUND)
    spec["wrapper"] = wrapper
    spec = check_model_spec(spec, "model_spec", task=task)
    built = build_policy(spec, task)
    if built.observation_space != obs or built.action_space != act:
        raise ConfigError(
            f"the policy's spaces ({obs}, {act}) are not {task}'s as the spec builds them "
            f"({built.observation_space}, {built.action_space})"
        )
    return spec


def write_weights(
    folder: Path, policy: Any, task: str, *, wrapper: str | None = None, weights: str = "policy.pth"
) -> dict[str, Any]:
    """Write ``policy``'s state dict to ``folder/weights``; its ``model:`` spec, checked.

    The spec is built back from the file (``build_agent``) before it is returned, so what is
    written is what the harness will load.
    """
    import torch

    spec = model_spec(policy, task, weights=weights, wrapper=wrapper)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().clone() for k, v in policy.state_dict().items()}
    torch.save(state, folder / weights)
    build_agent(folder, spec, task)
    return spec


# -- what would unpickle code --------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200] if text else ''}"


def _torch_entries(data: bytes) -> list[str]:
    try:
        import torch
    except ImportError:
        return ["a torch file, not checked (torch is not installed): may hold pickled objects"]
    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any refusal means it needs full unpickling
        return [f"not loadable with torch.load(weights_only=True) ({_first_line(exc)})"]
    return []


def _is_pickle(head: bytes) -> bool:
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _zip_entries(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            return _torch_entries(path.read_bytes())  # torch.save's own zip format
        out = []
        if "data" in names:  # SB3's save format: a JSON whose :serialized: values are pickles
            try:
                data = json.loads(zf.read("data"))
            except ValueError:
                data = None
            if not isinstance(data, Mapping):
                out.append("data (not SB3's JSON)")
            else:
                out += [
                    f"data[{key!r}] (:serialized: {value.get(':type:', '?')})"
                    for key, value in data.items()
                    if isinstance(value, Mapping) and ":serialized:" in value
                ]
        for name in names:
            with zf.open(name) as member:
                head = member.read(2)
            if name.endswith(_PICKLE_SUFFIXES) or _is_pickle(head):
                out.append(f"{name} (a pickle)")
            elif name.endswith(_TORCH_SUFFIXES):
                out += [f"{name}: {e}" for e in _torch_entries(zf.read(name))]
        return out


def pickled_entries(path: str | Path) -> list[str]:
    """What in file ``path`` would unpickle code when loaded (empty: nothing).

    SB3 zips: their ``data`` JSON's ``:serialized:`` entries (and members that are pickles);
    pickle files (by suffix or by the pickle protocol's first bytes); torch files that
    ``torch.load(weights_only=True)`` refuses. Nothing is unpickled to find out.
    """
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(4)
    if path.suffix in _TORCH_SUFFIXES:
        return _torch_entries(path.read_bytes())
    if path.suffix in _PICKLE_SUFFIXES or _is_pickle(head):
        return ["a pickle (the whole file)"]
    if head == b"PK\x03\x04" and zipfile.is_zipfile(path):
        return _zip_entries(path)
    return []


def scan_folder(folder: str | Path) -> list[str]:
    """``"<file>: <entries>"`` for every file under ``folder`` that holds pickled objects."""
    folder = Path(folder)
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found = pickled_entries(path)
        if found:
            out.append(f"{path.relative_to(folder)}: {', '.join(found)}")
    return out


def refuse_pickled(folder: str | Path, *, trust_pickle: bool = False) -> None:
    """A ``ConfigError`` naming the pickled files of submission ``folder``, unless trusted."""
    if trust_pickle:
        return
    found = scan_folder(folder)
    if found:
        raise ConfigError(
            f"{folder}: refused: loading these runs code from the folder: {'; '.join(found)}. "
            "Ship weights instead (policy: model with policy.pth: scripts/export_sb3_weights.py "
            "converts a model.zip), or pass --trust-pickle if you trust the folder's author"
        )
