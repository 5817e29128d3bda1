"""The pandas-free request table equals the DataFrame path, bytes on disk included."""

from __future__ import annotations

import gzip

from hypothesis import given, settings
from hypothesis import strategies as st

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.metrics.columns import Metric
from llmsched_gym.metrics.io import write_frame
from llmsched_gym.metrics.records import frame_from_table, requests_frame
from llmsched_gym.metrics.summary import summarize, summary_values
from llmsched_gym.metrics.table import request_columns, request_table, write_table
from llmsched_gym.simulation import simulate


def _run():
    specs = [
        RequestSpec(f"r{i}", 0.1 * i, 10 + 7 * i, 1 + (i % 5), 1 + (i % 5),
                    priority=i % 2, slo_ttft_s=0.5 if i % 3 else None,
                    slo_tpot_s=0.05 if i % 4 == 0 else None,
                    job_id=f"j{i % 3}" if i % 2 else None, client_id="c,1" if i == 3 else None)
        for i in range(12)
    ]  # fmt: skip
    cfg = {"max_num_batched_tokens": 32, "max_num_seqs": 4, "block_size": 4, "num_gpu_blocks": 40}
    return simulate(specs, cfg, "vllm-v1", "constant:0.05")


def test_table_frame_equals_validated_frame() -> None:
    res = _run()
    raw = request_columns([])  # column names only
    assert set(raw) <= set(res.request_table)
    via_rows = requests_frame({k: res.request_table[k] for k in raw})
    via_table = frame_from_table(res.request_table)
    assert via_table.equals(via_rows)
    assert list(via_table.dtypes) == list(via_rows.dtypes)
    assert res.requests.equals(via_rows)


def test_write_table_bytes_equal_write_frame(tmp_path) -> None:
    res = _run()
    for name in ("r.csv", "r.csv.gz"):
        write_table(res.request_table, tmp_path / f"table-{name}")
        write_frame(res.requests, tmp_path / f"frame-{name}")
        a, b = (tmp_path / f"table-{name}").read_bytes(), (tmp_path / f"frame-{name}").read_bytes()
        if name.endswith(".gz"):  # the same text (deflate blocks may differ with write chunking)
            a, b = gzip.decompress(a), gzip.decompress(b)
        assert a == b
    text = (tmp_path / "table-r.csv").read_text()
    assert '"c,1"' in text and text.endswith("\n")


def test_summary_from_table_equals_summary_from_frame() -> None:
    res = _run()
    a = summary_values(res.request_table, itl=res.itl)
    b = dict(summarize(res.requests, itl=res.itl))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), k
    assert a["num_jobs"] == 3


def test_empty_table() -> None:
    table = request_table(request_columns([]))
    assert frame_from_table(table).empty
    assert summary_values(table)["num_requests"] == 0


KV_MEAN, KV_MAX = Metric.KV_CACHE_USAGE_MEAN.value, Metric.KV_CACHE_USAGE_MAX.value


def _run_steps():
    specs = [RequestSpec(f"r{i}", 0.05 * i, 9 + 5 * i, 2 + i % 4, 2 + i % 4) for i in range(10)]
    cfg = {"max_num_batched_tokens": 24, "max_num_seqs": 3, "block_size": 4, "num_gpu_blocks": 20}
    return simulate(specs, cfg, "vllm-v1", "constant:0.05", record_steps=True)


def test_step_table_bytes_and_summary_equal_the_frame_path(tmp_path) -> None:
    from llmsched_gym.metrics.records import steps_frame

    res = _run_steps()
    assert res.step_table is not None and res._steps is None  # the frame is built on first use
    frame = steps_frame(res.step_table)
    assert res.steps.equals(frame) and list(res.steps.dtypes) == list(frame.dtypes)
    write_table(res.step_table, tmp_path / "table.csv")
    write_frame(res.steps, tmp_path / "frame.csv")
    assert (tmp_path / "table.csv").read_bytes() == (tmp_path / "frame.csv").read_bytes()
    a = summary_values(res.request_table, res.step_table, itl=res.itl)
    b = summary_values(res.request_table, res.steps, itl=res.itl)
    for k in a:
        assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), k
    assert 0.0 < a[KV_MEAN] <= a[KV_MAX] <= 1.0  # the steps were used


def test_simulate_out_writes_records_without_pandas(tmp_path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from llmsched_gym.cli.main import main\n"
        f"rc = main(['simulate', '--trace', 'splitwise-conv', '--num-requests', '50', "
        f"'--cost-model', 'constant:0.01', '--record-steps', '--no-progress', "
        f"'--out', {str(tmp_path / 'o')!r}])\n"
        "assert rc == 0, rc\n"
        "print(sorted(m for m in ('pandas', 'gymnasium', 'matplotlib', 'tokenizers', "
        "'llmsched_gym.leaderboard', 'llmsched_gym.calibration.torch_profile') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "o" / "steps.csv").read_text().startswith("step,time_s,")


def test_long_columns_print_as_pandas(tmp_path) -> None:
    """Long columns (numbers through orjson): the bytes pandas writes, NaN, -0.0, negative and
    64-bit ints, exponents and infinities included."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 5000
    ratios = rng.integers(0, 40, n) / 7.0
    with_nan = ratios.copy()
    with_nan[::9] = np.nan
    neg_zero = ratios.copy()
    neg_zero[::11] = -0.0
    columns = {
        "small_ints": rng.integers(0, 30, n),
        "wide_ints": rng.integers(0, n, n),  # past half the length: row by row
        "negative_ints": rng.integers(-5, 5, n),
        "wide64": rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
        "ratios": ratios,
        "with_nan": with_nan,
        "neg_zero": neg_zero,
        "distinct": rng.random(n),
        "exponents": rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n),
        "all_nan": np.full(n, np.nan),
        "infinite": np.where(rng.random(n) < 0.1, np.inf, -np.inf),
    }
    write_table(columns, tmp_path / "t.csv")
    pd.DataFrame(columns).to_csv(tmp_path / "f.csv", index=False, lineterminator="\n")
    assert (tmp_path / "t.csv").read_bytes() == (tmp_path / "f.csv").read_bytes()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), max_size=60),
    st.lists(st.integers(min_value=0, max_value=(1 << 64) - 1), max_size=60),
    st.lists(st.floats(min_value=1e-4, max_value=1e16), max_size=60),
)
def test_float_cells_are_repr(values, bits, positional) -> None:
    """Every float's cell is its ``repr`` (NaN empty): orjson's digits, and ``repr`` where the
    two forms part (exponents), over hypothesis' floats and arbitrary bit patterns."""
    import numpy as np

    from llmsched_gym.metrics.table import _float_cells

    column = np.concatenate(
        [
            np.array(values, dtype=np.float64),
            np.array(bits, dtype=np.uint64).view(np.float64),
            np.array(positional, dtype=np.float64),
        ]
    )
    assert _float_cells(column) == ["" if v != v else repr(v) for v in column.tolist()]
    assert _float_cells(column[::2]) == ["" if v != v else repr(v) for v in column[::2].tolist()]
