"""GitHub Markdown tables from DataFrames, without the optional ``tabulate`` dependency."""

from __future__ import annotations

from typing import Any


def markdown_table(df: Any, floatfmt: str = ".2f", index: bool = False) -> str:
    """``df`` (a pandas DataFrame) as a Markdown table; floats formatted with ``floatfmt``."""
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = [format(v, floatfmt) if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
