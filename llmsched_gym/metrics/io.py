"""Writing and reading record frames as CSV or Parquet, atomically.

The format follows the file name: ``.csv``, ``.csv.gz`` (gzip, deterministic: no timestamp) or
``.parquet`` (needs pyarrow: ``pip install 'llmsched-gym[parquet]'``). A file is written to a
temporary file in the same directory and moved into place with ``os.replace``, so a reader never
sees half a file and a failed write leaves no file behind (and an older file untouched).
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import pandas as pd

from llmsched_gym.metrics._atomic import atomic_output
from llmsched_gym.metrics.columns import RequestColumn

__all__ = ["FRAME_SUFFIXES", "read_frame", "write_frame"]

FRAME_SUFFIXES: tuple[str, ...] = (".csv", ".csv.gz", ".parquet")
"""File name endings ``write_frame`` and ``read_frame`` understand."""


def _frame_format(path: Path, caller: str) -> str:
    """Returns ``"csv"``, ``"csv.gz"`` or ``"parquet"`` from the file name."""
    name = path.name.lower()
    for suffix in (".csv.gz", ".csv", ".parquet"):
        if name.endswith(suffix):
            return suffix[1:]
    raise ValueError(
        f"{caller}: cannot tell the format of {str(path)!r} from its name; use a name ending in "
        f"{', '.join(FRAME_SUFFIXES)}"
    )


def _require_pyarrow(path: Path, caller: str) -> None:
    """Raises ImportError naming the extra to install when pyarrow is missing."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError(
            f"{caller}: {str(path)!r} is Parquet, which needs pyarrow; install it with "
            "pip install 'llmsched-gym[parquet]' (or use a .csv / .csv.gz name)"
        ) from None


def write_frame(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Writes a DataFrame as CSV or Parquet (chosen by the file name), atomically.

    The index is not written (records carry their ids as columns).

    Args:
        df: The frame to write.
        path: Destination; ``.csv``, ``.csv.gz`` or ``.parquet``. Its directory must exist.

    Returns:
        The path written.

    Raises:
        ValueError: If the name has none of the known suffixes.
        ImportError: For Parquet without pyarrow (the message names the ``parquet`` extra).
        Exception: Whatever the writer raises (e.g. pyarrow on a column it cannot serialise);
            no file is left at ``path`` and no temporary file remains.
    """
    target = Path(path)
    fmt = _frame_format(target, "write_frame")
    if fmt == "parquet":
        _require_pyarrow(target, "write_frame")
    with atomic_output(target) as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False, engine="pyarrow")
        elif fmt == "csv.gz":
            # Our own GzipFile: pandas' would record the temporary file's name in the header.
            with (
                open(tmp, "wb") as raw,
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as compressed,
                io.TextIOWrapper(compressed, encoding="utf-8", newline="") as text,
            ):
                df.to_csv(text, index=False)
        else:
            df.to_csv(tmp, index=False)
    return target


def read_frame(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Reads a frame written by ``write_frame``, restoring the record dtypes.

    CSV loses dtypes; for record columns they are restored: ``slo_met`` as a nullable boolean,
    and ``request_id``, ``job_id``, ``stage``, ``client_id`` as text even when they look numeric
    (missing stays missing).

    Args:
        path: A ``.csv``, ``.csv.gz`` or ``.parquet`` file.

    Returns:
        The frame.
    """
    source = Path(path)
    fmt = _frame_format(source, "read_frame")
    if fmt == "parquet":
        _require_pyarrow(source, "read_frame")
        return pd.read_parquet(source, engine="pyarrow")
    text_columns = [
        RequestColumn.REQUEST_ID.value,
        RequestColumn.JOB_ID.value,
        RequestColumn.STAGE.value,
        RequestColumn.CLIENT_ID.value,
    ]
    header = pd.read_csv(source, nrows=0).columns
    dtypes: dict[str, object] = {c: str for c in text_columns if c in header}
    if RequestColumn.SLO_MET.value in header:
        dtypes[RequestColumn.SLO_MET.value] = "boolean"
    return pd.read_csv(source, dtype=dtypes)
