"""``bench --vs-vidur``: Vidur's trace clip, the two command lines and the CPU-time probe."""

from __future__ import annotations

import sys

import pytest

from llmsched_gym.bench import (
    VS_VIDUR_ENGINE,
    child_cpu_seconds,
    our_command,
    vidur_clip,
    vidur_command,
)
from llmsched_gym.core.request import RequestSpec


def test_vidur_clip_cuts_the_prompt_by_the_excess() -> None:
    specs = [
        RequestSpec("a", 0.0, 4000, 200, 200),  # 104 over: the prompt loses 104
        RequestSpec("b", 1.0, 100, 50, 60),  # within: unchanged (max_tokens = output, as Vidur)
        RequestSpec("c", 2.0, 4096, 1, 1),  # one over
    ]
    a, b, c = vidur_clip(specs)
    assert (a.prompt_len, a.output_len, a.max_tokens) == (3896, 200, 200)
    assert (b.prompt_len, b.output_len, b.max_tokens) == (100, 50, 50)
    assert (c.prompt_len, c.output_len) == (4095, 1)
    with pytest.raises(ValueError, match="exceeds max_tokens"):
        vidur_clip([RequestSpec("d", 0.0, 10, 5000, 5000)])


def test_command_lines_carry_the_same_settings(tmp_path) -> None:
    ours = our_command(tmp_path / "t.jsonl", "vllm-v0", None)
    assert "--out" not in ours and ours[ours.index("--scheduler") + 1] == "vllm-v0"
    assert ours[ours.index("--num-gpu-blocks") + 1] == str(VS_VIDUR_ENGINE["num_gpu_blocks"])
    written = our_command(tmp_path / "t.jsonl", "vllm-v1", tmp_path / "o")
    assert "--record-steps" in written
    vidur = vidur_command("py", "linear_regression", False, tmp_path)
    assert vidur[vidur.index("--vllm_scheduler_config_batch_size_cap") + 1] == "128"
    assert "--no-metrics_config_write_metrics" in vidur
    assert not any(a.startswith("--random_forrest") for a in vidur)
    rf = vidur_command("py", "random_forrest", True, tmp_path)
    assert "--metrics_config_write_metrics" in rf and "--random_forrest" in " ".join(rf)


def test_child_cpu_seconds_counts_the_child_and_raises_on_failure() -> None:
    code = "s = 0\nfor i in range(3_000_000): s += i\nprint(s)"
    cpu, wall, out = child_cpu_seconds([sys.executable, "-c", code])
    assert out.strip() == str(sum(range(3_000_000))) and cpu > 0.0 and wall > 0.0
    with pytest.raises(RuntimeError, match="failed"):
        child_cpu_seconds([sys.executable, "-c", "raise SystemExit(3)"])
