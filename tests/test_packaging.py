"""The wheel carries every subpackage and the shipped scenario specs."""

from __future__ import annotations

from pathlib import Path

import setuptools
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set(setuptools.find_packages(str(ROOT), include=["llmsched_gym*"]))
    assert found - listed == set(), "add these to [tool.setuptools].packages in pyproject.toml"


def test_scenario_specs_are_importable_as_package_data() -> None:
    from llmsched_gym.scenarios import list_scenarios

    names = list_scenarios()
    assert names, "no shipped scenarios found under envs/"
    assert {p.stem for p in (ROOT / "envs").glob("*.yaml")} == set(names)


def test_data_ships_by_package_data_without_setuptools_warnings() -> None:
    """Data folders are not packages: include-package-data stays off (else setuptools warns
    "Package would be ignored" once per folder, ~540 lines on set-up) and the package-data globs
    cover every shipped data file."""
    import fnmatch
    import subprocess

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool.get("include-package-data") is False
    globs = tool["package-data"]["llmsched_gym"]
    tracked = subprocess.run(
        ["git", "ls-files", "llmsched_gym"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    data = [p for p in tracked if not p.endswith(".py")]
    assert data
    for path in data:
        rel = path.removeprefix("llmsched_gym/")
        assert any(
            fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(rel, g.replace("**/", "")) for g in globs
        ), f"{path} is not covered by [tool.setuptools.package-data]"


def test_setup_prints_one_line_per_stage_with_its_time() -> None:
    text = (ROOT / "scripts" / "setup.sh").read_text()
    for name in ("torch", "project", "compiled core"):
        assert f'stage "{name}"' in text
    assert "setup.log" in text


def test_the_vllm_venv_installs_every_runtime_dependency() -> None:
    """``.ci/setup_vllm_venv.sh`` installs the project ``--no-deps`` and lists its runtime
    dependencies itself: each of pyproject's must be there, with the same specifier."""
    import re

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    script = (ROOT / ".ci" / "setup_vllm_venv.sh").read_text()
    body = script[script.index("install_project() {") :]
    body = body[: body.index("\n}\n")]
    listed = set(re.findall(r'"([A-Za-z0-9_.-]+[<>=!~][^"]*)"', body))
    missing = [d for d in deps if d.replace(" ", "") not in listed]
    assert not missing, f"add to install_project in .ci/setup_vllm_venv.sh: {missing}"
