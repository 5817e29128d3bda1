"""Parts of the live vLLM backend that run without vLLM (the default test run)."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import numpy as np
import pytest

from llmsched_gym.backends.vllm import INSTALL_HINT, _deps
from llmsched_gym.backends.vllm.calibrate import probes
from llmsched_gym.backends.vllm.model import TinyModelSpec
from llmsched_gym.backends.vllm.tokens import prompt_token_ids, with_token_ids
from llmsched_gym.backends.vllm.validate import compare_schedules, pooled_error, scale_trace
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError


def spec(rid, prompt_len=100, out=8, **kw):
    return RequestSpec(rid, kw.pop("arrival_time", 0.0), prompt_len, out, out, **kw)


def test_importing_the_backend_does_not_import_vllm():
    code = (
        "import sys, llmsched_gym.backends.vllm as b, llmsched_gym.cli.live, "
        "llmsched_gym.backends.vllm.validate, llmsched_gym.backends.vllm.calibrate; "
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_vllm_names_the_extra_and_the_setup_script(monkeypatch):
    monkeypatch.setattr(_deps, "vllm_available", lambda: False)
    with pytest.raises(ImportError) as err:
        _deps.import_vllm()
    assert "llmsched-gym[vllm]" in str(err.value)
    assert ".ci/setup_vllm_venv.sh" in str(err.value)
    assert str(err.value) == INSTALL_HINT


def test_lazy_exports_resolve_and_unknown_names_fail():
    mod = importlib.import_module("llmsched_gym.backends.vllm")
    assert mod.TinyModelSpec is TinyModelSpec
    with pytest.raises(AttributeError):
        mod.NoSuchThing  # noqa: B018


def test_token_ids_are_deterministic_and_unique_per_request():
    a = prompt_token_ids(spec("a"), 32000)
    assert a == prompt_token_ids(spec("a"), 32000)
    b = prompt_token_ids(spec("b"), 32000)
    assert len(a) == 100 and a != b
    assert all(16 <= t < 32000 for t in a + b)


def test_token_ids_keep_mooncake_prefix_sharing():
    x = spec("x", 300, block_hashes=(7, 8, 9), hash_block_size=100)
    y = spec("y", 250, block_hashes=(7, 8, 5), hash_block_size=100)
    tx, ty = prompt_token_ids(x, 1000), prompt_token_ids(y, 1000)
    assert tx[:200] == ty[:200]
    assert tx[200:250] != ty[200:250]


def test_given_token_ids_are_kept_and_folded_into_the_vocabulary():
    s = spec("t", 3, prompt_token_ids=(5, 40000, 12))
    assert prompt_token_ids(s, 32000) == [5, 8000, 12]
    (r,) = with_token_ids([spec("u", 40)], 32000)
    assert r.prompt_token_ids is not None and len(r.prompt_token_ids) == 40 and r.prompt_len == 40


def test_tiny_model_spec_validates_and_writes_config(tmp_path):
    with pytest.raises(ConfigError, match="multiple of num_attention_heads"):
        TinyModelSpec(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ConfigError, match="positive integer"):
        TinyModelSpec(num_hidden_layers=0)
    folder = TinyModelSpec().write(tmp_path / "m", 512, "float32")
    text = (folder / "config.json").read_text()
    assert '"LlamaForCausalLM"' in text and '"max_position_embeddings": 512' in text


def test_scale_trace_fits_limits_and_stretches_arrivals():
    specs = [spec(f"r{i}", 100 * (i + 1), 10 * (i + 1), arrival_time=2.0 + i) for i in range(5)]
    out = scale_trace(specs, max_prompt=250, max_output=20, arrival_scale=0.5, num_requests=4)
    assert len(out) == 4
    assert max(s.prompt_len for s in out) == 250 and max(s.output_len for s in out) == 20
    assert [s.arrival_time for s in out] == [0.0, 0.5, 1.0, 1.5]
    assert all(s.max_tokens == s.output_len for s in out)
    hashed = scale_trace(
        [spec("h", 1024, 4, block_hashes=(1, 2), hash_block_size=512)],
        max_prompt=256,
        max_output=4,
    )[0]
    assert hashed.prompt_len == 256 and hashed.hash_block_size == 128
    with pytest.raises(ConfigError):
        scale_trace([], max_prompt=1, max_output=1)


def test_probe_design_stays_inside_the_engine_limits():
    design = probes(256, 16, 512, 32, 32000, kv_tokens=4096)
    kinds = {p.kind for p in design}
    assert kinds == {"prefill", "multi", "decode", "mixed"}
    for p in design:
        for phase in p.build(0):
            for ids, max_tokens in phase:
                assert len(ids) + max_tokens <= 512
        # the same shapes in every repeat, fresh tokens
        shape0 = [[(len(i), t) for i, t in ph] for ph in p.build(0)]
        shape1 = [[(len(i), t) for i, t in ph] for ph in p.build(1)]
        assert shape0 == shape1
    assert len(probes(256, 16, 512, 32, 32000, kv_tokens=4096, scale=0.3)) < len(design)


def test_compare_schedules_finds_the_first_divergence():
    a = [{"scheduled": {"x": 4}, "preempted": []}, {"scheduled": {"x": 1}, "preempted": []}]
    b = [{"scheduled": {"x": 4}, "preempted": []}, {"scheduled": {"x": 1, "y": 3}, "preempted": []}]
    d = compare_schedules(a, a)
    assert not d["diverged"] and d["first_divergent_step"] is None
    d = compare_schedules(a, b)
    assert d["diverged"] and d["first_divergent_step"] == 1 and d["identical_prefix_steps"] == 1
    assert np.isclose(d["same_request_set_share"], 0.5)


def test_cli_parsers_build_without_vllm():
    from llmsched_gym.cli.live import add_calibrate_vllm_args, add_validate_parser

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    cal = sub.add_parser("calibrate")
    cal.add_argument("--max-num-seqs", type=int, default=7)  # the torch backend's own flag
    add_calibrate_vllm_args(cal)
    add_validate_parser(sub)
    args = parser.parse_args(["calibrate", "--vllm-repeats", "2", "--vllm-block-size", "64"])
    assert args.vllm_repeats == 2 and args.vllm_block_size == 64 and args.max_num_seqs == 7
    args = parser.parse_args(["validate", "--trace", "sharegpt", "--load", "0.3", "--calibrate"])
    assert args.trace == "sharegpt" and args.load == 0.3 and args.calibrate
    assert args.func.__name__ == "run_validate"


def test_policy_check_and_dense_ranks_without_vllm():
    from types import SimpleNamespace

    from llmsched_gym.backends.vllm.scheduler import RequestView, _dense_ranks, check_policy
    from llmsched_gym.policies.registry import make_policy

    check_policy(make_policy("static-priority:shortest-prompt"))
    with pytest.raises(ConfigError, match="builds its own batches"):
        check_policy(make_policy("vllm-v0"))
    with pytest.raises(ConfigError, match="preemption rule"):
        check_policy(make_policy("vllm-v1-0.33"))
    reqs = [
        SimpleNamespace(request_id=rid, arrival_time=t, num_prompt_tokens=n, max_tokens=4)
        for rid, t, n in (("a", 0.0, 30), ("b", 1.0, 10), ("c", 2.0, 30))
    ]
    views = [RequestView(r, priority=p, seq=i) for i, (r, p) in enumerate(zip(reqs, (1, 0, 1)))]
    assert views[1].num_prompt_tokens == 10 and views[0]._output_len == 4
    assert _dense_ranks(views, lambda v: v.num_prompt_tokens) == {"b": 0, "a": 1, "c": 1}
    key = make_policy("static-priority:priority").priority_key
    assert _dense_ranks(views, key) == {"b": 0, "a": 1, "c": 2}


def test_cli_without_vllm_says_what_to_install(monkeypatch, capsys):
    from llmsched_gym.backends.vllm import _deps
    from llmsched_gym.cli.live import add_validate_parser

    monkeypatch.setattr(_deps, "vllm_available", lambda: False)
    parser = argparse.ArgumentParser()
    add_validate_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate"])
    assert args.func(args) == 2
    assert ".ci/setup_vllm_venv.sh" in capsys.readouterr().err


def test_merge_calibrations_pools_repeats_of_the_same_composition():
    from llmsched_gym.backends.vllm.calibrate import (
        CalibrationResult,
        MeasuredStep,
        _features,
        merge_calibrations,
    )
    from llmsched_gym.calibration.linearfit import FitStats, fit_linear

    def part(scale):
        steps = [
            MeasuredStep(
                f"p{i}", "decode", 0, [1] * (i + 1), [100] * (i + 1), [scale * (0.01 + 0.001 * i)]
            )
            for i in range(12)
        ]
        y = np.asarray([s.times_s[0] for s in steps])
        fit = fit_linear(_features(steps), y, "x")
        stats = FitStats.of(y, y)
        return CalibrationResult(steps, fit, stats, {}, {}, {}, 1, "wall", 1.0, "x", "today")

    merged = merge_calibrations([part(1.0), part(1.2), part(1.1)])
    assert len(merged.steps) == 12 and merged.repeats == 3
    assert all(len(s.times_s) == 3 for s in merged.steps)
    # pooled times; the fit targets their mean (1.1x, the middle part's scale)
    assert np.isclose(merged.steps[0].times_s[2], 0.011) and merged.heldout_mape_pct < 1.0
    got = merged.frame().set_index("probe")["mean_s"]
    assert np.allclose(
        [got[f"p{i}"] for i in range(12)], [1.1 * (0.01 + 0.001 * i) for i in range(12)]
    )


def test_calibration_targets_the_mean_step_time_not_the_median():
    """Step times are skewed to the slow side; latencies sum them, so the profile must predict
    the expected (mean) time: a median target under-predicts a skewed composition."""
    from llmsched_gym.backends.vllm.calibrate import MeasuredStep, _targets

    skewed = MeasuredStep("p", "decode", 0, [1], [10], [0.010, 0.010, 0.010, 0.011, 0.019])
    assert _targets([skewed])[0] == pytest.approx(0.012) != float(np.median(skewed.times_s))


def test_policy_inside_vllm_needs_a_cost_model_when_it_reads_one():
    """A policy whose reset reads the engine's cost model (ProServe's estimator) gets an error
    naming the fix inside vLLM; the scheduler-class factory checks its mode; reordering
    policies are told apart from batch builders."""
    from llmsched_gym.backends.vllm.scheduler import policy_scheduler_cls
    from llmsched_gym.backends.vllm.stepctx import _EngineShim
    from llmsched_gym.config import EngineConfig
    from llmsched_gym.errors import ConfigError
    from llmsched_gym.policies.registry import make_policy

    policy = make_policy("proserve")
    with pytest.raises(ConfigError, match="cost_model"):
        policy.reset(_EngineShim(EngineConfig(), None, policy))
    with pytest.raises(ConfigError, match="mode"):
        policy_scheduler_cls(policy, mode="fast")

    from llmsched_gym.backends.vllm.scheduler import is_reorder_policy

    assert is_reorder_policy(make_policy("static-priority:priority"))
    assert not is_reorder_policy(make_policy("sarathi"))


def test_pooled_error_compares_the_simulator_with_the_mean_of_the_live_runs():
    # Live runs 4.0, 4.4, 4.2 s (mean 4.2, sd 0.2): t(2) = 4.303 -> half-width 0.497 s = 11.8%.
    out = pooled_error([4.41, 4.41, 4.41], [4.0, 4.4, 4.2])
    assert out["live_e2e_mean_of_runs"] == pytest.approx(4.2)
    assert out["pooled_e2e_error_pct"] == pytest.approx(5.0)
    assert out["live_mean_ci95_pct"] == pytest.approx(4.303 * 0.2 / 3**0.5 / 4.2 * 100)
    # Faster simulator: negative; one run: no interval.
    one = pooled_error([3.9], [4.0])
    assert one["pooled_e2e_error_pct"] == pytest.approx(-2.5)
    assert np.isnan(one["live_mean_ci95_pct"])


def test_decode_probes_decode_the_whole_batch_together():
    # The simulator is vLLM's scheduler step for step: run each decode probe through it with the
    # live engine's limits and check that all B requests decode together for the designed steps
    # (a probe whose first decoders finish before the last prompt is prefilled never does).
    from llmsched_gym.config import EngineConfig
    from llmsched_gym.simulation import simulate

    budget, seqs, mlen, bs, blocks = 512, 32, 1024, 32, 513
    design = probes(budget, seqs, mlen, bs, 32000, kv_tokens=blocks * bs)
    decode = {p.key: p for p in design if p.kind == "decode"}
    assert "decode:b32:L416" in decode  # the longest context 32 decoders fit in the cache
    config = EngineConfig(
        max_num_batched_tokens=budget, max_num_seqs=seqs, block_size=bs, num_gpu_blocks=blocks
    )
    for key in ("decode:b32:L416", "decode:b32:L256", "decode:b24:L448", "decode:b2:L992"):
        (phase,) = decode[key].build(0)
        specs = [
            RequestSpec(f"r{i}", 0.0, len(ids), t, t, prompt_token_ids=tuple(ids))
            for i, (ids, t) in enumerate(phase)
        ]
        res = simulate(specs, config, fast_forward=False, record_steps=True)
        steps = res.steps
        whole = steps[(steps["num_prefill"] == 0) & (steps["num_decode"] == len(phase))]
        assert len(whole) >= 10, key
        assert res.summary["num_preemptions"] == 0, key


def test_tiny_model_kv_cache_bytes():
    # K and V, 2 layers, 4 KV heads of 64 dims, fp32: 4,096 bytes per token.
    spec = TinyModelSpec()
    assert spec.kv_cache_bytes(513, 32, "float32") == 513 * 32 * 4096
    assert spec.kv_cache_bytes(513, 32, "bfloat16") == 513 * 32 * 2048
