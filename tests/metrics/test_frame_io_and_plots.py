"""Atomic CSV/Parquet writing and plots: no half-written file, ever."""

from __future__ import annotations

import builtins
import gzip
import sys

import numpy as np
import pandas as pd
import pytest

from llmsched_gym.metrics import (
    read_frame,
    requests_frame,
    steps_frame,
    write_frame,
)
from llmsched_gym.metrics.plots import plot_comparison, plot_kv_usage


@pytest.fixture
def records(tiny_rows):
    return requests_frame(tiny_rows)


@pytest.mark.parametrize("name", ["r.csv", "r.csv.gz", "r.parquet"])
def test_round_trip(tmp_path, records, name) -> None:
    path = write_frame(records, tmp_path / name)
    assert [p.name for p in tmp_path.iterdir()] == [name]
    back = read_frame(path)
    assert list(back.columns) == list(records.columns)
    assert back["request_id"].tolist() == records["request_id"].tolist()
    assert back["slo_met"].tolist() == records["slo_met"].tolist()
    np.testing.assert_array_equal(back["tpot_s"].to_numpy(), records["tpot_s"].to_numpy())
    assert back["num_output_tokens"].tolist() == [5, 1, 3]
    assert back["client_id"].isna().tolist() == [True, True, False]


def test_csv_gz_is_deterministic(tmp_path, records) -> None:
    a = write_frame(records, tmp_path / "a.csv.gz").read_bytes()
    b = write_frame(records, tmp_path / "b.csv.gz").read_bytes()
    assert a == b and gzip.decompress(a).startswith(b"request_id,arrival_time_s,")


def test_unknown_suffix(tmp_path, records) -> None:
    with pytest.raises(ValueError, match=r"use a name ending in \.csv, \.csv\.gz, \.parquet"):
        write_frame(records, tmp_path / "r.xlsx")
    assert list(tmp_path.iterdir()) == []


def test_missing_directory(tmp_path, records) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist; create it first"):
        write_frame(records, tmp_path / "no" / "r.csv")


def test_parquet_without_pyarrow_names_the_extra(tmp_path, records, monkeypatch) -> None:
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("No module named 'pyarrow'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ImportError, match=r"pip install 'llmsched-gym\[parquet\]'"):
        write_frame(records, tmp_path / "r.parquet")
    assert list(tmp_path.iterdir()) == []


def test_unserialisable_column_leaves_no_file(tmp_path) -> None:
    df = pd.DataFrame({"a": [1, 2], "b": [object(), {1, 2}]})
    with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow raises
        write_frame(df, tmp_path / "bad.parquet")
    assert list(tmp_path.iterdir()) == []


def test_failing_writer_keeps_the_old_file(tmp_path, records, monkeypatch) -> None:
    target = write_frame(records, tmp_path / "r.csv")
    before = target.read_bytes()

    def half_then_fail(self, path, *args, **kwargs):
        with open(path, "w") as handle:
            handle.write("request_id,arr")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_frame(records.head(1), target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]
    with pytest.raises(OSError, match="disk full"):
        write_frame(records, tmp_path / "new.csv")
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


# --- plots --------------------------------------------------------------------------------------


def test_plot_comparison_png_and_pdf(tmp_path, records, make_row) -> None:
    other = requests_frame(
        [make_row(request_id=str(i), first_token_time_s=0.1 * (i + 1)) for i in range(5)]
    )
    png = plot_comparison({"vllm-v1": records, "sarathi": other}, tmp_path / "cmp.png", title="t")
    assert png.read_bytes().startswith(b"\x89PNG")
    pdf = plot_comparison({"vllm-v1": records}, tmp_path / "cmp.pdf")
    assert pdf.read_bytes().startswith(b"%PDF")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.pdf", "cmp.png"]


def test_plot_errors_leave_no_file(tmp_path, records) -> None:
    with pytest.raises(ValueError, match="no results given"):
        plot_comparison({}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="have no column 'ttft_s'"):
        plot_comparison({"a": records.drop(columns=["ttft_s"])}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="cannot tell the image format"):
        plot_comparison({"a": records}, tmp_path / "x.unknown")
    assert list(tmp_path.iterdir()) == []


def test_failing_savefig_leaves_no_file(tmp_path, records, monkeypatch) -> None:
    from matplotlib.figure import Figure

    def broken(self, fname, **kwargs):
        with open(fname, "wb") as handle:
            handle.write(b"\x89PNG partial")
        raise RuntimeError("renderer crashed")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(RuntimeError, match="renderer crashed"):
        plot_comparison({"a": records}, tmp_path / "x.png")
    assert list(tmp_path.iterdir()) == []


def test_plot_kv_usage(tmp_path, make_steps) -> None:
    steps = steps_frame(make_steps())
    path = plot_kv_usage(steps, tmp_path / "kv.png")
    assert path.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ValueError, match=r"lack column\(s\) kv_cache_usage"):
        plot_kv_usage(steps.drop(columns=["kv_cache_usage"]), tmp_path / "kv2.png")
    assert [p.name for p in tmp_path.iterdir()] == ["kv.png"]


def test_plot_kv_usage_thins_long_runs(tmp_path) -> None:
    n = 50_001
    cols = {
        name: np.zeros(n, dtype=np.int64)
        for name in (
            "step",
            "num_scheduled_tokens",
            "num_prefill",
            "num_decode",
            "num_new",
            "num_resumed",
            "num_preempted",
            "num_finished",
            "num_running",
            "num_waiting",
            "num_free_blocks",
        )
    }
    cols["step"] = np.arange(n)
    cols["time_s"] = np.arange(n) * 0.01
    cols["duration_s"] = np.full(n, 0.01)
    cols["kv_cache_usage"] = np.linspace(0, 1, n)
    assert plot_kv_usage(steps_frame(cols), tmp_path / "kv.svg").read_bytes().startswith(b"<?xml")
