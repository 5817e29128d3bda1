"""Cost-model registry: turn a profile spec string into a CostModel.

Accepted specs (the ``--cost-model`` flag of ``llmsched-gym simulate``):

* ``constant:SECONDS``: every step costs SECONDS (``constant:1.0``), for tests;
* ``roofline:<model>@<gpu>[/tp<N>]``: the analytic roofline (``roofline:llama-2-70b@a100-80gb/tp2``;
  TP defaults to 1; model and GPU accept aliases such as ``a100`` or an HF repo id);
* a shipped fitted profile by name (``vidur:llama-2-70b@a100-80gb/tp2``; see :func:`list_profiles`);
* ``infermax:<model>`` (``infermax:llama-2-7b``, ``infermax:llama-3-70b``): InferMax's §3.2 cost
  model with the authors' coefficients (``llmsched_gym.cost.infermax``);
* a path to a profile YAML file (``kind: linear`` with the six coefficients; see
  ``llmsched_gym/cost/profiles/vidur-*.yaml`` for the format). A profile may add the item-level
  coefficients of :class:`~llmsched_gym.cost.base.ExtendedLinearCostModel` and a ``terms``
  mapping (``token_knee``, ``short_max_new_tokens``, ``long_min_cached``); it then loads as a
  :class:`ProfiledExtendedCostModel` (see ``torch-*.yaml``). ``kind: piecewise`` profiles
  (``torch-pw-*.yaml``) add the per-item prefill coefficients of
  :class:`~llmsched_gym.cost.base.PiecewiseCostModel` and ``token_knots`` / ``token_slopes``
  in ``terms``; they load as a :class:`ProfiledPiecewiseCostModel`.

Every model the registry returns, except ``constant``, carries ``.model``, ``.gpu`` and ``.tp``
(None when a user file omits them) and a
``.num_gpu_blocks(block_size, gpu_memory_utilization, ...)`` method, so the engine can size the KV
cache of the configuration the profile describes.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from llmsched_gym import _yaml
from llmsched_gym.config import VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS
from llmsched_gym.cost.base import (
    ConstantCostModel,
    CostModel,
    ExtendedLinearCostModel,
    LinearCostModel,
    PiecewiseCostModel,
)
from llmsched_gym.cost.capacity import MemoryOverheads, num_gpu_blocks
from llmsched_gym.cost.hardware import get_model, list_gpus, list_models, resolve_gpu, resolve_model
from llmsched_gym.cost.roofline import RooflineCostModel
from llmsched_gym.errors import CostModelError, show

__all__ = [
    "ProfileInfo",
    "ProfiledExtendedCostModel",
    "ProfiledPiecewiseCostModel",
    "ProfiledLinearCostModel",
    "as_cost_model",
    "list_profiles",
    "load_cost_model",
    "load_profile_file",
    "profile_info",
]

_ROOFLINE = re.compile(r"^roofline:(?P<model>[^@/]+)@(?P<gpu>[^/]+?)(?:/tp(?P<tp>\d+))?$")
_NAMED = re.compile(r"^(?P<prefix>[a-z0-9_-]+):(?P<model>[^@/]+)@(?P<gpu>[^/]+?)/tp(?P<tp>\d+)$")
_PROFILE_KEYS = {
    "kind",
    "name",
    "model",
    "gpu",
    "tp",
    "coefficients",
    "units",
    "fit",
    "source",
    "created",
    "script",
    "terms",
}


@dataclass(frozen=True)
class ProfileInfo:
    """What a profile spec describes (without building the model)."""

    name: str
    kind: str
    """``constant``, ``roofline``, ``linear`` or ``piecewise``."""
    model: str | None
    gpu: str | None
    tp: int | None
    path: str | None = None
    """The YAML file a linear profile came from."""
    source: dict[str, Any] = field(default_factory=dict)
    """Provenance recorded in the profile file (tables, commit, fit errors...)."""


class ProfiledLinearCostModel(LinearCostModel):
    """A :class:`LinearCostModel` loaded from a profile file, with what it was fitted for."""

    def __init__(
        self,
        coefficients: dict[str, float],
        name: str,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
        fit: dict[str, Any] | None = None,
        source: dict[str, Any] | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(**coefficients, name=name)
        self._set_provenance(model=model, gpu=gpu, tp=tp, fit=fit, source=source, path=path)

    def _set_provenance(self, **meta: Any) -> None:
        """What the profile was fitted for (model, gpu, tp, fit) and where it came from."""
        unknown = set(meta) - {"model", "gpu", "tp", "fit", "source", "path"}
        if unknown:
            raise TypeError(f"unknown profile provenance {sorted(unknown)}")
        self.model, self.gpu, self.tp = meta.get("model"), meta.get("gpu"), meta.get("tp")
        self.fit, self.source = dict(meta.get("fit") or {}), dict(meta.get("source") or {})
        self.path = meta.get("path")

    def num_gpu_blocks(
        self,
        block_size: int = 16,
        gpu_memory_utilization: float = 0.9,
        max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
        max_num_seqs: int = VLLM_MAX_NUM_SEQS,
        overheads: MemoryOverheads | None = None,
    ) -> int:
        """KV blocks vLLM would allocate for this profile's (model, GPU, TP)."""
        if self.model is None or self.gpu is None or self.tp is None:
            raise CostModelError(
                f"profile {self.name!r} does not name its model, gpu and tp, so its KV capacity is "
                "unknown; add them to the profile file or pass num_gpu_blocks explicitly"
            )
        return num_gpu_blocks(
            self.model,
            self.gpu,
            self.tp,
            block_size=block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            overheads=overheads,
        )

    def max_model_len(self) -> int | None:
        """vLLM's default ``max_model_len`` for this profile's model (its context length).

        None when the profile does not name a model of ``profiles/models.yaml``.
        """
        if self.model is None:
            return None
        try:
            return get_model(self.model).max_position_embeddings
        except CostModelError:
            return None

    def __repr__(self) -> str:
        return f"ProfiledLinearCostModel({self.name!r})"


class ProfiledExtendedCostModel(ExtendedLinearCostModel, ProfiledLinearCostModel):
    """An :class:`~llmsched_gym.cost.base.ExtendedLinearCostModel` loaded from a profile file."""

    def __init__(
        self,
        coefficients: dict[str, float],
        name: str,
        model: str | None = None,
        gpu: str | None = None,
        tp: int | None = None,
        fit: dict[str, Any] | None = None,
        source: dict[str, Any] | None = None,
        path: str | None = None,
        terms: dict[str, int] | None = None,
    ) -> None:
        extra = {k: coefficients[k] for k in self.EXTRA_COEFFICIENTS if k in coefficients}
        base = {k: v for k, v in coefficients.items() if k not in extra}
        ProfiledLinearCostModel.__init__(self, base, name, model, gpu, tp, fit, source, path)
        self._init_terms(extra, dict(terms or {}))

    def __repr__(self) -> str:
        return f"ProfiledExtendedCostModel({self.name!r})"


class ProfiledPiecewiseCostModel(PiecewiseCostModel, ProfiledLinearCostModel):
    """A :class:`~llmsched_gym.cost.base.PiecewiseCostModel` loaded from a profile file.

    ``meta``: the provenance of :class:`ProfiledLinearCostModel` (model, gpu, tp, fit, source,
    path); ``terms``: the thresholds, ``token_knots`` and ``token_slopes``.
    """

    def __init__(
        self, coefficients: dict[str, float], name: str, terms: dict[str, Any], **meta: Any
    ) -> None:
        terms = dict(terms)
        PiecewiseCostModel.__init__(
            self,
            **coefficients,
            name=name,
            token_knots=terms.pop("token_knots"),
            token_slopes=terms.pop("token_slopes"),
            **terms,
        )
        self._set_provenance(**meta)

    def __repr__(self) -> str:
        return f"ProfiledPiecewiseCostModel({self.name!r})"


def _parse_piecewise(doc: dict[str, Any], where: str, **meta: Any) -> ProfiledPiecewiseCostModel:
    """The ``kind: piecewise`` part of :func:`_parse_profile` (keys here, values by the model)."""
    coef = doc.get("coefficients")
    allowed = set(LinearCostModel.COEFFICIENTS) | set(PiecewiseCostModel.EXTRA_COEFFICIENTS)
    if not isinstance(coef, dict) or not set(LinearCostModel.COEFFICIENTS) <= set(coef) <= allowed:
        got = sorted(coef) if isinstance(coef, dict) else show(coef)
        raise CostModelError(
            f"{where}: a piecewise profile's coefficients must map {sorted(allowed)} (the last "
            f"{len(PiecewiseCostModel.EXTRA_COEFFICIENTS)} optional) to seconds, got {got}"
        )
    terms = doc.get("terms")
    allowed_terms = {*PiecewiseCostModel.TERMS, "token_knots", "token_slopes"}
    if (
        not isinstance(terms, dict)
        or not {"token_knots", "token_slopes"} <= set(terms) <= allowed_terms
    ):
        raise CostModelError(
            f"{where}: a piecewise profile needs terms with token_knots and token_slopes (and "
            f"optionally {list(PiecewiseCostModel.TERMS)}), got {show(terms)}"
        )
    for key, value in coef.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CostModelError(f"{where}: coefficients.{key} must be a number, got {show(value)}")
    for key in ("token_knots", "token_slopes"):
        if not isinstance(terms[key], list):
            raise CostModelError(f"{where}: terms.{key} must be a list, got {show(terms[key])}")
    try:
        return ProfiledPiecewiseCostModel(
            {k: float(v) for k, v in coef.items()}, path=where, terms=terms, **meta
        )
    except CostModelError as err:
        raise CostModelError(f"{where}: {err}") from None


def _profile_dir_files() -> list[Any]:
    root = resources.files("llmsched_gym.cost").joinpath("profiles")
    return sorted(
        (
            p
            for p in root.iterdir()
            if p.name.endswith(".yaml") and p.name not in ("gpus.yaml", "models.yaml")
        ),
        key=lambda p: p.name,
    )


@functools.lru_cache(maxsize=1)
def _shipped() -> dict[str, tuple[str, dict[str, Any]]]:
    """Shipped fitted profiles: name -> (file name, parsed document). Duplicate names raise."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for p in _profile_dir_files():
        doc = _yaml.safe_load(p.read_text("utf-8"))
        name = doc.get("name") if isinstance(doc, dict) else None
        if not isinstance(name, str):
            raise CostModelError(f"shipped profile {p.name} has no string 'name'")
        if name in out:
            raise CostModelError(f"duplicate profile name {name!r} in {out[name][0]} and {p.name}")
        out[name] = (f"llmsched_gym/cost/profiles/{p.name}", doc)
    return out


def profile_file_stem(name: str) -> str:
    """Shipped file name of profile ``name``, without ``.yaml`` (``:@/`` become ``-``)."""
    return re.sub(r"[:@/]", "-", name)


def _shipped_by_file_name(name: str) -> tuple[dict[str, Any], str] | None:
    """Parse only the file whose name follows the shipped convention for ``name``, if it exists.

    ``vidur:llama-2-70b@a100-80gb/tp2`` lives in ``vidur-llama-2-70b-a100-80gb-tp2.yaml``; reading
    that one file instead of every profile keeps start-up cheap. The file's own ``name`` must
    match, otherwise the full scan (``_shipped``) decides.
    """
    file_name = profile_file_stem(name) + ".yaml"
    path = resources.files("llmsched_gym.cost").joinpath("profiles", file_name)
    if file_name in ("gpus.yaml", "models.yaml") or not path.is_file():
        return None
    doc = _yaml.safe_load(path.read_text("utf-8"))
    if not isinstance(doc, dict) or doc.get("name") != name:
        return None
    return doc, f"llmsched_gym/cost/profiles/{file_name}"


def _parse_profile(doc: Any, where: str) -> ProfiledLinearCostModel:
    if not isinstance(doc, dict):
        raise CostModelError(
            f"{where}: a profile file must be a YAML mapping, got {type(doc).__name__}"
        )
    unknown = set(doc) - _PROFILE_KEYS
    if unknown:
        raise CostModelError(
            f"{where}: unknown keys {sorted(unknown)}; allowed keys are {sorted(_PROFILE_KEYS)}"
        )
    if doc.get("kind") not in ("linear", "piecewise"):
        raise CostModelError(
            f"{where}: kind must be 'linear' or 'piecewise', got {show(doc.get('kind'))}"
        )
    model, gpu, tp = doc.get("model"), doc.get("gpu"), doc.get("tp")
    if model is not None:
        model = resolve_model(str(model))
    if gpu is not None:
        gpu = resolve_gpu(str(gpu))
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise CostModelError(f"{where}: tp must be a positive integer, got {show(tp)}")
    name = str(doc.get("name") or where)
    if doc["kind"] == "piecewise":
        return _parse_piecewise(
            doc, where, name=name, model=model, gpu=gpu, tp=tp, fit=doc.get("fit"),
            source=doc.get("source"),
        )  # fmt: skip
    coef = doc.get("coefficients")
    expected = set(LinearCostModel.COEFFICIENTS)
    extra = set(ExtendedLinearCostModel.EXTRA_COEFFICIENTS)
    if not isinstance(coef, dict) or not expected <= set(coef) <= expected | extra:
        got = sorted(coef) if isinstance(coef, dict) else coef
        raise CostModelError(
            f"{where}: coefficients must map exactly {sorted(expected)} (and optionally "
            f"{sorted(extra)}) to seconds, got {got}"
        )
    terms = doc.get("terms")
    if terms is not None and (
        not isinstance(terms, dict) or not set(terms) <= set(ExtendedLinearCostModel.TERMS)
    ):
        raise CostModelError(
            f"{where}: terms must map some of {list(ExtendedLinearCostModel.TERMS)} to integers, "
            f"got {show(terms)}"
        )
    for key, value in coef.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CostModelError(f"{where}: coefficients.{key} must be a number, got {show(value)}")
    try:
        if terms is not None or set(coef) & extra:
            return ProfiledExtendedCostModel(
                {k: float(v) for k, v in coef.items()},
                name=name,
                model=model,
                gpu=gpu,
                tp=tp,
                fit=doc.get("fit"),
                source=doc.get("source"),
                path=where,
                terms=terms,
            )
        return ProfiledLinearCostModel(
            {k: float(v) for k, v in coef.items()},
            name=name,
            model=model,
            gpu=gpu,
            tp=tp,
            fit=doc.get("fit"),
            source=doc.get("source"),
            path=where,
        )
    except CostModelError as err:
        raise CostModelError(f"{where}: {err}") from None


def load_profile_file(path: str | Path) -> ProfiledLinearCostModel:
    """Load a ``kind: linear`` profile YAML file."""
    p = Path(path)
    if not p.is_file():
        raise CostModelError(f"cost profile file {str(p)!r} does not exist")
    try:
        doc = _yaml.safe_load(p.read_text("utf-8"))
    except yaml.YAMLError as err:
        raise CostModelError(f"cost profile file {str(p)!r} is not valid YAML: {err}") from None
    return _parse_profile(doc, str(p))


def list_profiles(include_roofline: bool = False) -> list[str]:
    """Names of the shipped fitted profiles (sorted).

    Args:
        include_roofline: also list ``roofline:<model>@<gpu>/tp<N>`` for every shipped model and
            GPU and every TP in 1, 2, 4, 8 that the model's heads allow.
    """
    names = sorted(_shipped())
    if include_roofline:
        for m in list_models():
            spec = get_model(m)
            for g in list_gpus():
                for tp in (1, 2, 4, 8):
                    try:
                        spec.check_tp(tp)
                    except CostModelError:
                        continue
                    names.append(f"roofline:{m}@{g}/tp{tp}")
    return names


def _looks_like_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or ("/" in spec and Path(spec).exists())


def _canonical_name(spec: str) -> str:
    """``vidur:Llama-2-70B@a100/tp2`` -> ``vidur:llama-2-70b@a100-80gb/tp2`` (aliases resolved)."""
    match = _NAMED.match(spec)
    if not match:
        return spec
    try:
        model, gpu = resolve_model(match["model"]), resolve_gpu(match["gpu"])
    except CostModelError:
        return spec
    return f"{match['prefix']}:{model}@{gpu}/tp{int(match['tp'])}"


def _unknown_spec(spec: str) -> CostModelError:
    known = sorted(_shipped())
    close = difflib.get_close_matches(spec, known, n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return CostModelError(
        f"unknown cost model {spec!r}.{hint} Use constant:SECONDS, "
        "roofline:<model>@<gpu>[/tp<N>], a path to a profile YAML file, or one of the shipped "
        f"profiles: {', '.join(known)}. Models: {', '.join(list_models())}; GPUs: "
        f"{', '.join(list_gpus())}"
    )


def load_cost_model(spec: str) -> CostModel:
    """Build the cost model a spec string names; see the module docstring for the syntax.

    Raises:
        CostModelError: naming the bad spec, the accepted forms and the closest shipped names.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise CostModelError(f"cost model spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec.startswith("constant:"):
        value = spec[len("constant:") :]
        try:
            seconds = float(value)
        except ValueError:
            raise CostModelError(
                f"cost model {spec!r}: constant needs a number of seconds, e.g. constant:0.02"
            ) from None
        return ConstantCostModel(seconds)
    if spec.startswith("infermax:"):  # InferMax §3.2 model, authors' coefficients
        from llmsched_gym.cost.infermax import load_infermax

        return load_infermax(spec)
    if spec.startswith("roofline:"):
        match = _ROOFLINE.match(spec)
        if not match:
            raise CostModelError(
                f"cost model {spec!r} does not parse; write roofline:<model>@<gpu>[/tp<N>], e.g. "
                "roofline:llama-2-70b@a100-80gb/tp2"
            )
        tp = int(match["tp"]) if match["tp"] else 1
        try:
            return RooflineCostModel(match["model"], match["gpu"], tp)
        except CostModelError as err:
            raise CostModelError(f"cost model {spec!r}: {err}") from None
    canonical = _canonical_name(spec)
    direct = _shipped_by_file_name(canonical)
    if direct is not None:
        return _parse_profile(*direct)
    shipped = _shipped()
    if canonical in shipped:
        where, doc = shipped[canonical]
        return _parse_profile(doc, where)
    if _looks_like_path(spec):
        return load_profile_file(spec)
    raise _unknown_spec(spec)


def as_cost_model(model: str | Path | CostModel, where: str = "cost model") -> CostModel:
    """The cost model ``model`` names (a spec string or a profile path), or ``model`` itself
    when it already is one: the one place a ``str | CostModel`` argument becomes a model.

    Raises:
        CostModelError: for a bad spec, or an object without ``step_time`` / ``step_times``.
    """
    if isinstance(model, (str, Path)):
        return load_cost_model(str(model))
    if not callable(getattr(model, "step_time", None)):
        raise CostModelError(
            f"{where}: expected a cost model spec (e.g. 'constant:0.02', a profile name or "
            f"path) or an object with step_time(), got {type(model).__name__}"
        )
    return model


def profile_info(spec: str) -> ProfileInfo:
    """Describe what a spec names (model, GPU, TP, provenance) without needing its coefficients."""
    model = load_cost_model(spec)
    if isinstance(model, ConstantCostModel):
        return ProfileInfo(name=model.name, kind="constant", model=None, gpu=None, tp=None)
    if isinstance(model, RooflineCostModel):
        return ProfileInfo(
            name=model.name,
            kind="roofline",
            model=model.model,
            gpu=model.gpu,
            tp=model.tp,
            source=model.describe(),
        )
    if not isinstance(model, ProfiledLinearCostModel):  # pragma: no cover - every branch is above
        raise CostModelError(f"cost model {spec!r}: unexpected type {type(model).__name__}")
    return ProfileInfo(
        name=model.name,
        kind="piecewise" if isinstance(model, PiecewiseCostModel) else "linear",
        model=model.model,
        gpu=model.gpu,
        tp=model.tp,
        path=model.path,
        source={"fit": model.fit, **model.source},
    )
