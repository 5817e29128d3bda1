"""Build, inspect or remove the compiled core: ``python -m llmsched_gym.build_native [...]``.

See ``llmsched_gym._native``: the hot modules compiled with Cython, loaded only while they match
their sources. ``scripts/setup.sh`` runs the build; without Cython or a C compiler it prints why
and the package runs as pure Python.
"""

from __future__ import annotations

import argparse
import sys

from llmsched_gym._native import build, clean, status


def main(argv: list[str] | None = None) -> int:
    """Build (default), ``status`` or ``clean``; returns the exit status."""
    p = argparse.ArgumentParser(
        prog="python -m llmsched_gym.build_native", description=__doc__.splitlines()[0]
    )
    p.add_argument("command", nargs="?", default="build", choices=["build", "status", "clean"])
    p.add_argument("--force", action="store_true", help="build: rebuild up-to-date modules too")
    p.add_argument("--verbose", action="store_true", help="build: show the compiler commands")
    args = p.parse_args(argv)
    if args.command == "build":
        try:
            built = build(force=args.force, quiet=not args.verbose)
        except Exception as exc:  # no compiler, no Cython: the package stays pure Python
            print(f"llmsched_gym: compiled core not built ({exc}); running pure Python")
            return 1
        print(f"compiled core: built {len(built)} modules" if built else "compiled core up to date")
        return 0
    if args.command == "status":
        for name, state in status().items():
            print(f"{state:9s} {name}")
        return 0
    for path in clean():
        print(f"removed {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
