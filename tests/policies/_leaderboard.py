"""Load a script of ``leaderboards/<folder>/`` as a module for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

LEADERBOARDS = Path(__file__).resolve().parents[2] / "leaderboards"


def load_script(folder: str, script: str, name: str) -> ModuleType:
    """Execute ``leaderboards/<folder>/<script>`` as module ``name``.

    The scripts import their sibling ``reproduce`` through ``sys.path``. Another leaderboard's
    ``reproduce`` already in ``sys.modules`` is set aside while the script runs (or its
    ``import reproduce`` would get that one), and ``sys.path`` and ``sys.modules["reproduce"]``
    are restored afterwards, so each leaderboard's ``import reproduce`` stays its own.
    """
    here = LEADERBOARDS / folder
    path, before = list(sys.path), sys.modules.pop("reproduce", None)
    sys.path.insert(0, str(here))
    try:
        spec = importlib.util.spec_from_file_location(name, here / script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = path
        if before is None:
            sys.modules.pop("reproduce", None)
        else:
            sys.modules["reproduce"] = before
    return module
