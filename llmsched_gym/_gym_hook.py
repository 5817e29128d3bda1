"""Register the environments with Gymnasium without importing it on every ``import llmsched_gym``.

If Gymnasium is already imported, the ids are registered at once; otherwise a one-shot import
hook registers them right after ``import gymnasium`` completes. Either import order makes
``gym.make("llmsched/...")`` work, and a plain simulator run (the CLI) never pays for Gymnasium.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any


def _register() -> None:
    partial = sys.modules.get("llmsched_gym.envs.registration")
    if partial is not None and not hasattr(partial, "register_envs"):
        return  # Gymnasium is being imported by our own registration module: it registers then
    from llmsched_gym.envs.registration import register_envs

    register_envs()


class _AfterGymnasiumImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``gymnasium`` to register after it runs."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "gymnasium":
            return None
        sys.meta_path.remove(self)  # one shot; the real finders resolve the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_register(module: Any) -> None:
            exec_module(module)
            _register()

        loader.exec_module = exec_and_register  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Register now if Gymnasium is loaded, else as soon as it is imported."""
    if "gymnasium" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterGymnasiumImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterGymnasiumImport())
