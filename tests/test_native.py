"""The compiled core's guard: compiled modules load only while they match their sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmsched_gym import _native

ROOT = Path(_native.__file__).resolve().parent
BUILT = all(state == "compiled" for state in _native.status().values())


def _fake_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package tree holding every compiled module's source, with ``_native`` pointed at it."""
    pkg = tmp_path / "llmsched_gym"
    for name in _native.MODULES:
        src = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(f"# {name}\n")
    monkeypatch.setattr(_native, "_ROOT", pkg)
    monkeypatch.setattr(_native, "_MANIFEST", pkg / "_native.json")
    return pkg


def test_status_follows_sources_and_manifest(tmp_path, monkeypatch) -> None:
    pkg = _fake_tree(tmp_path, monkeypatch)
    assert set(_native.status().values()) == {"pure"}  # nothing built
    name = "llmsched_gym.core.engine"
    so = pkg / "core" / ("engine" + _native.importlib.machinery.EXTENSION_SUFFIXES[0])
    so.write_bytes(b"")
    assert _native.status()[name] == "stale"  # built, but no record of what from
    manifest = {"modules": {name: _native.source_hash(name)}}
    (pkg / "_native.json").write_text(json.dumps(manifest))
    assert _native.status()[name] == "compiled"
    (pkg / "core" / "engine.pxd").write_text("cdef class Engine: pass\n")
    assert _native.status()[name] == "stale"  # the .pxd is part of the source
    manifest["modules"][name] = _native.source_hash(name)
    (pkg / "_native.json").write_text(json.dumps(manifest))
    assert _native.status()[name] == "compiled"
    (pkg / "core" / "engine.py").write_text("# edited\n")
    assert _native.status()[name] == "stale"
    assert _native.clean() == [so, pkg / "_native.json"]
    assert _native.status()[name] == "pure"


def _run(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(cwd), **env}
    full.pop(_native.PURE_ENV, None) if _native.PURE_ENV not in env else None
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=full, capture_output=True, text=True
    )


PROBE = (
    "import llmsched_gym.envs.route_v0, llmsched_gym.envs.priority_v0;"
    "import llmsched_gym.core.engine as e; from llmsched_gym import _native;"
    "print(_native.core(), e.__file__.endswith('.py'))"
)


@pytest.mark.skipif(not BUILT, reason="the compiled core is not built (scripts/setup.sh builds it)")
def test_compiled_pure_and_stale_loading(tmp_path) -> None:
    """A copy of the built package: compiled as built, pure on request, all pure after an edit."""
    shutil.copytree(ROOT, tmp_path / "llmsched_gym", ignore=shutil.ignore_patterns("__pycache__"))
    out = _run(PROBE, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["compiled", "False"]
    # core.fastforward cimports Engine while the engine imports it: either may come first.
    out = _run("import llmsched_gym.core.fastforward; " + PROBE, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["compiled", "False"]
    out = _run(PROBE, tmp_path, **{_native.PURE_ENV: "1"})
    assert out.stdout.split() == ["pure", "True"]
    assert "older than" not in out.stderr
    engine = tmp_path / "llmsched_gym" / "core" / "engine.py"
    engine.write_text(engine.read_text() + "\n# an edit after the build\n")
    out = _run(PROBE, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["pure", "True"]  # all or nothing: the modules cimport each other
    assert "older than the source of ['llmsched_gym.core.engine']" in out.stderr


def test_build_reports_each_module_on_the_progress_fd(monkeypatch, capsys) -> None:
    """``--progress-fd``: one line per compiled module on that descriptor (setup.sh's terminal),
    nothing of it on stdout, which setup.sh sends to its log; a closed descriptor is an error."""
    from llmsched_gym import build_native

    def fake_build(force: bool, quiet: bool, progress) -> list[str]:
        for i, name in enumerate(_native.MODULES[:2]):
            progress(i + 1, 2, name)
        return list(_native.MODULES[:2])

    monkeypatch.setattr(build_native, "build", fake_build)
    read, write = os.pipe()
    try:
        assert build_native.main(["build", "--progress-fd", str(write)]) == 0
    finally:
        os.close(write)
    with os.fdopen(read) as lines:
        got = lines.read().splitlines()
    assert [line.split(" (")[0] for line in got] == [
        f"setup: compiled core  {i + 1}/2 {name}" for i, name in enumerate(_native.MODULES[:2])
    ]
    assert capsys.readouterr().out == "compiled core: built 2 modules\n"
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    with pytest.raises(SystemExit) as exc:
        build_native.main(["build", "--progress-fd", str(closed)])
    assert exc.value.code == 2
    assert f"--progress-fd {closed}" in capsys.readouterr().err
