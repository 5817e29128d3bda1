"""Build, inspect or remove the compiled core: ``python -m llmsched_gym.build_native [...]``.

See ``llmsched_gym._native``: the hot modules compiled with Cython, loaded only while they match
their sources. ``scripts/setup.sh`` runs the build; without Cython or a C compiler it prints why
and the package runs as pure Python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from llmsched_gym._native import build, clean, status


def main(argv: list[str] | None = None) -> int:
    """Build (default), ``status`` or ``clean``; returns the exit status."""
    p = argparse.ArgumentParser(
        prog="python -m llmsched_gym.build_native", description=__doc__.splitlines()[0]
    )
    p.add_argument("command", nargs="?", default="build", choices=["build", "status", "clean"])
    p.add_argument("--force", action="store_true", help="build: rebuild up-to-date modules too")
    p.add_argument("--verbose", action="store_true", help="build: show the compiler commands")
    p.add_argument(
        "--progress-fd",
        type=int,
        metavar="FD",
        help="build: write a line per compiled module to this open file descriptor (setup.sh "
        "shows them while the compiler's own output goes to its log)",
    )
    args = p.parse_args(argv)
    if args.command == "build":
        report = None
        if args.progress_fd is not None:
            try:
                stream = os.fdopen(args.progress_fd, "w", buffering=1, closefd=False)
            except OSError as exc:
                p.error(f"--progress-fd {args.progress_fd}: {exc.strerror}")
            started = time.perf_counter()

            def report(done: int, total: int, name: str) -> None:
                elapsed = time.perf_counter() - started
                stream.write(f"setup: compiled core  {done}/{total} {name} ({elapsed:.0f} s)\n")

        try:
            built = build(force=args.force, quiet=not args.verbose, progress=report)
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
