"""gym.make works after `import llmsched_gym` in either import order, without the simulator
paying for Gymnasium when no environment is used."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "llmsched first": "import llmsched_gym, sys; assert 'gymnasium' not in sys.modules\n"
    "import gymnasium as gym",
    "gymnasium first": "import gymnasium as gym, llmsched_gym",
    "envs package": "import llmsched_gym.envs, gymnasium as gym",
    "submodule first": "import llmsched_gym, gymnasium.spaces; import gymnasium as gym",
}


@pytest.mark.parametrize("code", CASES.values(), ids=CASES.keys())
def test_ids_are_registered_in_any_import_order(code) -> None:
    check = (
        code + "\nassert 'llmsched/Priority-ChatAzureConv-v0' in gym.registry"
        "\nassert 'llmsched/Route-Text2sqlHetero1-v0' in gym.registry"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


def test_the_simulator_cli_does_not_import_gymnasium() -> None:
    code = (
        "import sys; from llmsched_gym.cli.main import build_parser; build_parser()\n"
        "from llmsched_gym.simulation import simulate\n"
        "simulate('splitwise-conv', limit=5, cost_model='constant:0.1')\n"
        "assert 'gymnasium' not in sys.modules and 'pandas' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
