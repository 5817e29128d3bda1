"""Conventions shared by the ``llmsched-gym`` commands: ``--set``, ``--json``, outputs, numbers.

Every command that takes a scenario accepts ``--set KEY=VALUE`` (dotted keys reach into
``workload``, ``engine``, ``slo`` and ``cluster``, as ``Scenario.with_overrides`` documents; the
value is read as YAML, so ``--set workload.num_requests=200`` is an int and
``--set engine.enable_prefix_caching=false`` a bool). Commands that print a summary accept
``--json`` to print it as one JSON document instead. Output paths are checked before anything
is simulated, and an output folder is written as a set: to a temporary sibling folder that
replaces the old one only when every file is written (``OutputSet``). Summaries and tables
print each metric's numbers one way (``format_value``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from llmsched_gym import _yaml
from llmsched_gym.errors import ConfigError, show
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


def positive_int(text: str) -> int:
    """``argparse`` type of a count such as ``--num-requests``: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """Adds the repeatable ``--set KEY=VALUE`` scenario override."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of the scenario (repeatable; dotted keys reach into workload, "
        "engine, slo and cluster, e.g. --set workload.num_requests=200 --set "
        "engine.max_num_seqs=64; VALUE is read as YAML)",
    )


def parse_overrides(items: Iterable[str] | None) -> dict[str, Any]:
    """``{key: value}`` from ``KEY=VALUE`` strings; values are parsed as YAML scalars or lists.

    Raises:
        ConfigError: An item without ``=``, an empty key, a key given twice, or a value that is
            not valid YAML.
    """
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"--set {show(item)}: expected KEY=VALUE, e.g. --set workload.num_requests=200"
            )
        if key in out:
            raise ConfigError(f"--set {key}: given twice; keep one")
        try:
            out[key] = _yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key}: value {show(text)} is not valid YAML: {exc}") from None
    return out


def add_json_argument(parser: argparse.ArgumentParser) -> None:
    """Adds ``--json``: print the summary as one JSON document instead of text."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the summary as one JSON document on stdout (progress stays on stderr)",
    )


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: numpy scalars become Python numbers, NaN and infinities become null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def print_json(payload: Any) -> None:
    """Prints ``payload`` as indented JSON (see ``jsonable``)."""
    print(json.dumps(jsonable(payload), indent=2))


def format_value(key: str, value: Any) -> str:
    """One format per metric: counts as integers with thousands separators, others to 4 places."""
    if isinstance(value, (bool, str)) or value is None:
        return str(value)
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    integral = isinstance(value, int) or kind in ("i", "u")
    if key.startswith(("num_", "total_")) or integral:
        return f"{int(value):,d}"
    return f"{value:,.4f}"


def format_frame(table: Any) -> str:
    """A table as text with one number format per column (see ``format_value``)."""
    formatters = {
        c: (lambda v, c=c: format_value(c, v))
        for c in table.columns
        if table[c].dtype.kind in "fiu"
    }
    return table.to_string(formatters=formatters)


def check_output_file(path: str | os.PathLike[str] | None, flag: str) -> Path | None:
    """Checks before a run that ``path`` can be written as a file; returns it as a Path.

    Raises:
        ConfigError: ``path`` is a folder, its folder is missing or not a folder, or it is not
            writable; the message names the flag.
    """
    if path is None:
        return None
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {p}: is a folder; give a file path, e.g. {p / 'out.jsonl'}")
    parent = p.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {p}: folder {parent} does not exist; create it first")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{p.name}.", delete=True):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{flag} {p}: cannot write in {parent} ({exc.strerror}); choose a writable path"
        ) from None
    return p


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"


def _temp_prefix(out: Path, kind: str) -> str:
    """``.NAME.KIND-PID@HOST-``: whose temporary folder it is, so a later run can tell it stale."""
    return f".{out.name}.{kind}-{os.getpid()}@{_host()}-"


def _owned(out: Path) -> frozenset[str]:
    """The files of ``out`` a command may replace: its manifest's list, else ``OUTPUT_FILES``."""
    try:
        listed = json.loads((out / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return OUTPUT_FILES
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        return OUTPUT_FILES
    return frozenset(n for n in listed if n in OUTPUT_FILES) | {MANIFEST}


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
    is refused, never replaced.
    """

    def __init__(self, out: str | os.PathLike[str], flag: str = "--out") -> None:
        self.out = Path(out)
        self.flag = flag
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
            owned = _owned(out)
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
