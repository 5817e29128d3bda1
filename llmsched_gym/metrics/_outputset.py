"""Output folders written as a set: a temporary sibling folder swapped in when complete.

``OutputSet`` is what every command that writes a folder uses (``simulate --out``, ``compare``,
``leaderboard site``): readers see the old set or the new one, never a mix, and a folder holding
files the command did not write there is refused, never replaced. It lives on a low floor so the
leaderboard (floor 8) can use it as the command line (``llmsched_gym.cli.common``) does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics._atomic import _umask

MANIFEST = "manifest.json"
"""Written last into every output folder: the files of the set and the command that made them.
A folder without it is incomplete (or was not written by ``llmsched-gym``)."""

OUTPUT_STEMS = ("requests", "steps", "jobs", "instances", "summary", "comparison", "manifest")
"""Stems of the files the commands write (``OUTPUT_FILES`` names them in full)."""

OUTPUT_FILES = frozenset(
    [f"{stem}.{ext}" for stem in OUTPUT_STEMS[:4] for ext in ("csv", "parquet")]
    + ["summary.json", "comparison.csv", "comparison.png", MANIFEST]
)
"""Every file a command writes into an output folder. An existing ``--out`` folder is replaced
only when it holds nothing else: ``summary.analysis.md`` or ``requests.2023-backup.csv`` there are
the user's, and the folder is refused, never replaced."""

STALE_AFTER_S = 24 * 3600.0
"""A temporary folder of an older version (no process id in its name) untouched this long is
left over from a run that died, and the next run into the same folder removes it."""

COMMITTED: list[Path] = []
"""Output sets this process swapped in, in order; ``main`` tells the truth on a Ctrl-C with it."""


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"


def _temp_prefix(out: Path, kind: str) -> str:
    """``.NAME.KIND-PID@HOST-``: whose temporary folder it is, so a later run can tell it stale."""
    return f".{out.name}.{kind}-{os.getpid()}@{_host()}-"


def _owned(out: Path, names: Callable[[str], bool] | None = None) -> frozenset[str]:
    """The entries of ``out`` a command may replace.

    Default (``names`` None): its manifest's list, else ``OUTPUT_FILES``. With ``names`` (the
    entries a command writes, e.g. a site's pages and image folder): the manifest's entries that
    ``names`` accepts, and without a manifest none (a folder it did not write is never its own).
    """
    try:
        listed = json.loads((out / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        listed = None
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return OUTPUT_FILES if names is None else frozenset()
    accept = names or OUTPUT_FILES.__contains__
    return frozenset(n for n in listed if accept(n)) | {MANIFEST}


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process (PermissionError): alive
        return True
    return True


def _remove_stale(out: Path) -> None:
    """Removes the temporary folders beside ``out`` of runs that died (SIGKILL, power loss).

    A folder is stale when the process its name records (on this host) is gone, or, for a name
    without one (older versions), when untouched for ``STALE_AFTER_S``; a live run's folder and
    another host's are kept. A run killed between the two renames of ``commit`` left ``out``
    absent and the old set in ``.NAME.old-*/set``: that set is put back first.
    """
    name = re.escape(out.name)
    pattern = re.compile(rf"\.{name}\.(partial|old)-(?:(\d+)@([^/]*)-)?[a-z0-9_]{{8}}")
    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return
    now = time.time()
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or entry.is_symlink() or not entry.is_dir():
            continue
        kind, pid, host = m.groups()
        if pid is None:
            try:
                stale = now - entry.stat().st_mtime > STALE_AFTER_S
            except OSError:
                continue
        else:
            stale = host == _host() and not _alive(int(pid))
        if not stale:
            continue
        if kind == "old" and not out.exists() and (entry / "set").is_dir():
            with contextlib.suppress(OSError):
                os.replace(entry / "set", out)
        shutil.rmtree(entry, ignore_errors=True)


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Holds a Ctrl-C (SIGINT) back while the block runs, then delivers it.

    Only the main thread receives signals; elsewhere, or under a handler Python did not set,
    the block runs as it is.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, None)
        elif caught and previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGINT)


class OutputSet:
    """An output folder written as a whole: readers see the old set or the new one, never a mix.

    ``prepare()`` (before the run) checks the path, removes temporary folders of dead runs
    (``_remove_stale``) and creates a temporary sibling folder named after this process; files
    go to ``path(name)``; ``commit()`` writes ``manifest.json`` and swaps the temporary folder in
    place of ``out`` (a Ctrl-C waits for the swap to end, and a failed swap puts the old set
    back), so files of an earlier run that this one does not produce are gone; ``discard()`` (on
    error or Ctrl-C) removes the temporary folder and leaves ``out`` as it was. An existing
    ``out`` holding any file but those its manifest lists (or, without one, ``OUTPUT_FILES``)
    is refused, never replaced. ``names`` (optional) says which top-level entries the command
    writes when they are not ``OUTPUT_FILES`` (see ``_owned``).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        flag: str = "--out",
        names: Callable[[str], bool] | None = None,
    ) -> None:
        self.out = Path(out)
        self.flag = flag
        self.names = names
        self._tmp: Path | None = None

    def prepare(self) -> OutputSet:
        """Checks ``out`` and creates the temporary folder (the pre-flight check of a run)."""
        out = self.out
        here = Path.cwd().resolve()
        if out.resolve() == here or out.resolve() in here.parents:
            raise ConfigError(
                f"{self.flag} {out}: the set replaces the whole folder, and this one holds the "
                "current folder; give a new folder, e.g. out/run1"
            )
        if out.exists() and not out.is_dir():
            raise ConfigError(f"{self.flag} {out}: is a file, not a folder; give a folder path")
        _remove_stale(out)
        if out.is_dir():
            owned = _owned(out, self.names)
            foreign = sorted(p.name for p in out.iterdir() if p.name not in owned)
            if foreign:
                raise ConfigError(
                    f"{self.flag} {out}: the folder holds files llmsched-gym did not write there "
                    f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); it "
                    "replaces the whole folder, so give a new or empty folder"
                )
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            self._tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(out, "partial"), dir=out.parent))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError(
                f"{self.flag} {out}: cannot create the output folder ({reason}); choose a "
                "writable folder, e.g. out/run1"
            ) from None
        os.chmod(self._tmp, 0o777 & ~_umask())
        return self

    def path(self, name: str) -> Path:
        """Where to write the set's file ``name`` during the run."""
        if self._tmp is None:
            raise RuntimeError("OutputSet.prepare() must be called first")
        return self._tmp / name

    def commit(self, command: str) -> Path:
        """Writes the manifest and swaps the new set in; returns the output folder."""
        if self._tmp is None:
            raise RuntimeError("OutputSet.prepare() must be called first")
        files = sorted(p.name for p in self._tmp.iterdir())
        (self._tmp / MANIFEST).write_text(
            json.dumps({"command": command, "files": files}, indent=2) + "\n"
        )
        old = None
        with _interrupts_deferred():  # between the two renames ``out`` is absent
            if self.out.exists():
                prefix = _temp_prefix(self.out, "old")
                old = Path(tempfile.mkdtemp(prefix=prefix, dir=self.out.parent))
                os.replace(self.out, old / "set")
            try:
                os.replace(self._tmp, self.out)
            except BaseException:
                if old is not None:
                    os.replace(old / "set", self.out)
                    old.rmdir()
                raise
            self._tmp = None
            COMMITTED.append(self.out)
            if old is not None:  # a few files; a run killed here leaves it to the next run
                shutil.rmtree(old, ignore_errors=True)
        return self.out

    def discard(self) -> None:
        """Removes the temporary folder (after an error or an interruption)."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> OutputSet:
        return self if self._tmp is not None else self.prepare()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.discard()
