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
