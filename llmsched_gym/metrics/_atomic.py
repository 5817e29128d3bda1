"""Atomic file output: write a temporary file beside the target, then ``os.replace`` it.

Readers never see a half-written file; when writing fails, the temporary file is removed and an
existing file at the target is left untouched. Lives on the metrics floor (no pandas import) so
that every floor above can use it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_UMASK: int | None = None


def _umask() -> int:
    """Returns the process umask (read once; ``os.umask`` can only be read by setting it)."""
    global _UMASK
    if _UMASK is None:
        current = os.umask(0o022)
        os.umask(current)
        _UMASK = current
    return _UMASK


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary path in ``path``'s directory; moves it onto ``path`` on success.

    The temporary file gets the permissions a plain ``open(path, "w")`` would give (``0o666``
    less the umask) rather than ``mkstemp``'s private ``0o600``.

    Args:
        path: Destination file; its directory must exist.

    Yields:
        The temporary file's path; the caller writes the whole content there.

    Raises:
        FileNotFoundError: If the destination directory does not exist.
    """
    target = Path(path)
    directory = target.parent
    if not directory.is_dir():
        raise FileNotFoundError(
            f"cannot write {str(target)!r}: directory {str(directory)!r} does not exist; "
            "create it first"
        )
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    os.close(fd)
    tmp_path = Path(tmp_name)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise
