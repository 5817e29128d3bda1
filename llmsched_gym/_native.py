"""The compiled core: Cython builds of the hot modules, used only while they match their sources.

The simulator's hot path (requests, KV blocks, the engine loop, the cluster loop, routers'
backlog, the vLLM V1 and vLLM-0.6-style policies, the environments' step and observation code)
is plain Python that Cython can compile as is: the ``.pxd`` files next to those modules make
the hot classes extension types with C integer counters, and ``@cython.locals`` types the hot
loops. Compiled and pure runs are
bit-identical (floats keep their operation order: ``-ffp-contract=off -fno-fast-math``); the
compiled ones run the environments about 1.5-1.7x faster.

``python -m llmsched_gym.build_native`` (``scripts/setup.sh`` runs it) compiles the modules in
``MODULES`` next to their sources and records each source's hash. At import, ``install_guard``
(called first thing by ``llmsched_gym/__init__``) loads the compiled modules only while every
recorded hash matches its source; after an edit the whole core runs as pure Python, with a
warning, until the next build, so an editable checkout never runs stale compiled code.
``LLMSCHED_PURE=1`` runs everything as pure Python. Without Cython or a C compiler the build
fails with a message and the package stays pure Python.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

MODULES = (
    "llmsched_gym.core.request",
    "llmsched_gym.kv.block_pool",
    "llmsched_gym.kv.manager",
    "llmsched_gym.core.queues",
    "llmsched_gym.core.context",
    "llmsched_gym.core.pricing",
    "llmsched_gym.core.steplog",
    "llmsched_gym.core.engine",
    "llmsched_gym.core.fastforward",
    "llmsched_gym.core.async_loop",
    "llmsched_gym.cost.base",
    "llmsched_gym.cluster.cluster",
    "llmsched_gym.cluster.routers",
    "llmsched_gym.policies.vllm_v1",
    "llmsched_gym.policies.heuristics",
    "llmsched_gym.envs.observation",
    "llmsched_gym.envs.route_v0",
    "llmsched_gym.envs.priority_v0",
    "llmsched_gym.envs.reward",
    "llmsched_gym.envs.base",
)
"""Modules compiled by ``build`` (dotted names)."""

CFLAGS = ("-O1", "-ffp-contract=off", "-fno-fast-math")
"""C flags: no fused multiply-add or fast-math, so compiled floats equal the interpreter's."""

_ROOT = Path(__file__).resolve().parent
_MANIFEST = _ROOT / "_native.json"
PURE_ENV = "LLMSCHED_PURE"


def _source(name: str) -> Path:
    return _ROOT.parent.joinpath(*name.split(".")).with_suffix(".py")


def source_hash(name: str) -> str:
    """SHA-256 of a module's ``.py`` and (if any) ``.pxd`` source."""
    py = _source(name)
    h = hashlib.sha256(py.read_bytes())
    pxd = py.with_suffix(".pxd")
    if pxd.exists():
        h.update(pxd.read_bytes())
    return h.hexdigest()


def _compiled_files(name: str) -> list[Path]:
    py = _source(name)
    return [
        py.with_name(py.stem + suffix)
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if py.with_name(py.stem + suffix).exists()
    ]


def _manifest() -> dict[str, Any]:
    try:
        return json.loads(_MANIFEST.read_text())
    except (OSError, ValueError):
        return {}


def status() -> dict[str, str]:
    """Per module: ``compiled`` (a build matching the source), ``stale``, or ``pure`` (none)."""
    hashes = _manifest().get("modules", {})
    out = {}
    for name in MODULES:
        if not _compiled_files(name):
            out[name] = "pure"
        elif hashes.get(name) == source_hash(name):
            out[name] = "compiled"
        else:
            out[name] = "stale"
    return out


class _PureFinder:
    """Import the listed modules from their ``.py`` files, past any compiled file beside them."""

    def __init__(self, names: set[str], why: str | None) -> None:
        self.names = names
        self.why = why
        """Why the compiled build is not used (warned at the first import), None if asked."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names:
            return None
        if self.why is not None:
            import warnings

            warnings.warn(
                f"llmsched_gym: {self.why}; running the pure-Python core "
                "(rebuild: python -m llmsched_gym.build_native)",
                stacklevel=2,
            )
            self.why = None
        return importlib.util.spec_from_file_location(fullname, _source(fullname))


_installed: _PureFinder | None = None


def install_guard() -> None:
    """Use the compiled modules only if all of them match their sources (module docstring).

    All or nothing: compiled modules share their extension types' memory layout (``cimport``),
    so one module running as pure Python makes its compiled importers fail to load.
    """
    global _installed
    if _installed is not None:
        return
    names = {name for name in MODULES if _compiled_files(name)}
    if not names:
        return  # never built: pure Python, nothing to bypass
    why = None
    if os.environ.get(PURE_ENV, "") in ("", "0"):
        state = status()
        behind = sorted(n for n, s in state.items() if s != "compiled")
        if not behind:
            return
        why = f"the compiled build is older than the source of {behind}"
    _installed = _PureFinder(names, why)
    sys.meta_path.insert(0, _installed)


def core() -> str:
    """Which core this process runs: ``compiled``, ``pure`` or ``mixed`` (loaded modules)."""
    loaded = [sys.modules[n] for n in MODULES if n in sys.modules]
    kinds = {getattr(m, "__file__", "").endswith(".py") for m in loaded}
    if kinds == {False}:
        return "compiled"
    if kinds == {True} or not kinds:
        return "pure"
    return "mixed"


def build(force: bool = False, quiet: bool = True, progress: Any = None) -> list[str]:
    """Compile ``MODULES`` next to their sources; returns the modules (re)built.

    Nothing is built while every module is up to date (unless ``force``); otherwise all of them
    are, together: a changed ``.pxd`` changes the layout its importers ``cimport``. Each
    compiled file is swapped in atomically (a running process keeps the file it loaded), then
    the manifest records the hashes of the sources it was built from. ``progress(done, total,
    name)`` is called after each module's C compilation (the build's minutes are spent there).
    """
    import shutil
    import tempfile
    import time

    try:
        from Cython.Build import cythonize
        from setuptools import Extension
        from setuptools import setup as _setup
    except ImportError as exc:
        raise RuntimeError(
            f"building the compiled core needs Cython and setuptools: {exc}"
        ) from exc
    state = status()
    if not force and all(x == "compiled" for x in state.values()):
        return []
    todo = list(MODULES)
    hashes = {n: source_hash(n) for n in todo}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llmsched-native-") as tmp:
        exts = [Extension(n, [str(_source(n))], extra_compile_args=[*CFLAGS, "-w"]) for n in todo]
        modules = cythonize(
            exts,
            build_dir=os.path.join(tmp, "c"),
            language_level=3,
            quiet=True,
            compiler_directives={"annotation_typing": False, "binding": True},
        )
        lib = os.path.join(tmp, "lib")
        args = ["build_ext", "-b", lib, "-t", os.path.join(tmp, "obj")]
        if quiet:
            args.insert(0, "-q")
        cwd = os.getcwd()
        try:
            os.chdir(_ROOT.parent)
            for i, module in enumerate(modules):  # one at a time, so progress can be told
                _setup(name="llmsched_gym_native", ext_modules=[module], script_args=args)
                if progress is not None:
                    progress(i + 1, len(modules), module.name)
        finally:
            os.chdir(cwd)
        for n in todo:
            rel = Path(*n.split("."))
            built = [p for p in Path(lib, rel.parent).glob(rel.name + ".*") if p.is_file()]
            if len(built) != 1:
                raise RuntimeError(f"build of {n} produced {built}")
            dst = _source(n).with_name(built[0].name)
            shutil.copy2(built[0], str(dst) + ".new")
            os.replace(str(dst) + ".new", dst)
    manifest = {"modules": hashes, "python": sys.version.split()[0]}
    tmp_manifest = _MANIFEST.with_suffix(".json.new")
    tmp_manifest.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp_manifest, _MANIFEST)
    if not quiet:
        print(f"compiled {len(todo)} modules in {time.perf_counter() - t0:.0f} s")
    return todo


def clean() -> list[Path]:
    """Remove the compiled files and the manifest (back to pure Python); returns what went."""
    gone = [p for n in MODULES for p in _compiled_files(n)]
    if _MANIFEST.exists():
        gone.append(_MANIFEST)
    for p in gone:
        p.unlink()
    return gone
