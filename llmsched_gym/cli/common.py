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
import json
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from llmsched_gym import _yaml
from llmsched_gym.errors import ConfigError, show
from llmsched_gym.metrics._outputset import (  # noqa: F401 (re-exported for the commands)
    COMMITTED,
    MANIFEST,
    OUTPUT_FILES,
    OUTPUT_STEMS,
    STALE_AFTER_S,
    OutputSet,
    _host,
)


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
