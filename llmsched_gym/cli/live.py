"""CLI pieces of the live vLLM backend: ``calibrate --backend vllm`` and ``validate``.

``llmsched_gym.cli.calibrate`` wires them in. Nothing here imports vLLM until a command runs, so
the parser builds without it; a missing vLLM is reported with what to install.

``calibrate`` shares its parser with ``--backend torch``, so the live backend's options carry a
``--vllm-`` prefix there; ``validate`` is its own subcommand and uses plain names.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from llmsched_gym.backends.vllm._deps import INSTALL_HINT
from llmsched_gym.cli.common import positive_int
from llmsched_gym.errors import ConfigError

__all__ = ["add_calibrate_vllm_args", "add_validate_parser", "run_calibrate_vllm", "run_validate"]

DEFAULT_CALIBRATION_DIR = "out/calibrate/vllm"
"""Where ``calibrate --backend vllm`` writes by default (never the committed ``calibration/``)."""
DEFAULT_PROFILE = "calibration/vllm/profile.yaml"
"""The committed profile ``validate`` reads by default (read only)."""
DEFAULT_VALIDATE_DIR = "out/validate"
"""Where ``validate`` writes by default: ``out/validate/vllm-<trace>[-<scheduler>]``."""


def _add_engine_args(parser: argparse.ArgumentParser | Any, prefix: str = "") -> None:
    """Live engine and model settings (vLLM's names; defaults fit a 2-core CPU)."""
    p = f"--{prefix}"
    parser.add_argument(
        f"{p}max-num-batched-tokens",
        type=int,
        default=512,
        metavar="N",
        help="token budget of one live engine step (default 512)",
    )
    parser.add_argument(
        f"{p}max-num-seqs",
        type=int,
        default=32,
        metavar="N",
        help="most running requests (default 32)",
    )
    parser.add_argument(
        f"{p}block-size",
        type=int,
        default=32,
        metavar="N",
        help="KV block size in tokens; vLLM's CPU backend needs a multiple of 32 (default 32)",
    )
    parser.add_argument(
        f"{p}num-gpu-blocks",
        type=int,
        default=513,
        metavar="N",
        help="KV blocks including vLLM's null block (default 513)",
    )
    parser.add_argument(
        f"{p}max-model-len",
        type=int,
        default=1024,
        metavar="N",
        help="longest request (prompt + output) the live engine accepts (default 1024)",
    )
    parser.add_argument(
        f"{p}no-prefix-caching", action="store_true", help="disable vLLM's prefix caching"
    )
    parser.add_argument(
        f"{p}model",
        default=None,
        metavar="PATH",
        help="a model vLLM can load (default: a tiny Llama with random weights)",
    )
    parser.add_argument(
        f"{p}hidden-size",
        type=int,
        default=256,
        metavar="N",
        help="hidden size of the tiny random-weight model (default 256)",
    )
    parser.add_argument(
        f"{p}num-layers",
        type=int,
        default=2,
        metavar="N",
        help="layers of the tiny random-weight model (default 2)",
    )
    parser.add_argument(
        f"{p}dtype", default=None, help="model dtype (default: float32 on the CPU build)"
    )
    parser.add_argument(f"{p}device", default=None, help="vLLM device (default: vLLM's choice)")
    parser.add_argument(
        f"{p}timer",
        choices=("wall", "cpu"),
        default="wall",
        help="step timer: wall clock, or this process's CPU time (shared machines; default wall)",
    )


def _engine_config(args: argparse.Namespace, prefix: str = "") -> Any:
    from llmsched_gym.backends.vllm.engine import LiveEngineConfig
    from llmsched_gym.backends.vllm.model import TinyModelSpec
    from llmsched_gym.config import EngineConfig

    def get(name: str) -> Any:
        return getattr(args, (prefix + name).replace("-", "_"))

    hidden = get("hidden-size")
    return LiveEngineConfig(
        engine=EngineConfig(
            max_num_batched_tokens=get("max-num-batched-tokens"),
            max_num_seqs=get("max-num-seqs"),
            block_size=get("block-size"),
            num_gpu_blocks=get("num-gpu-blocks"),
            enable_prefix_caching=not get("no-prefix-caching"),
        ),
        max_model_len=get("max-model-len"),
        model=get("model"),
        tiny=TinyModelSpec(
            hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=get("num-layers")
        ),
        dtype=get("dtype"),
        device=get("device"),
    )


def add_calibrate_vllm_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--backend vllm`` options to the ``calibrate`` parser (all ``--vllm-`` prefixed)."""
    g = parser.add_argument_group("--backend vllm (live vLLM engine)")
    g.add_argument(
        "--vllm-repeats",
        type=int,
        default=3,
        metavar="N",
        help="runs of the probe design; each composition's mean time is one fitting row "
        "(default 3)",
    )
    g.add_argument(
        "--vllm-grid-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="thin the probe grid (< 1) for a quick run (default 1.0: the whole grid)",
    )
    g.add_argument(
        "--vllm-out",
        default=DEFAULT_CALIBRATION_DIR,
        metavar="DIR",
        help=f"where profile.yaml, report.md and steps.csv go (default {DEFAULT_CALIBRATION_DIR})",
    )
    _add_engine_args(g, prefix="vllm-")


def _no_vllm(command: str, err: ImportError) -> int:
    print(f"llmsched-gym {command}: error: {err}", file=sys.stderr)
    return 2


def run_calibrate_vllm(args: argparse.Namespace) -> int:
    """``llmsched-gym calibrate --backend vllm``: measure, fit, write; print the held-out MAPE."""
    from llmsched_gym.backends.vllm.calibrate import calibrate, write_calibration
    from llmsched_gym.backends.vllm.engine import LiveEngine

    config = _engine_config(args, prefix="vllm_")
    try:
        engine = LiveEngine(config)
    except ImportError as err:
        return _no_vllm("calibrate", err)
    with engine:
        result = calibrate(
            engine,
            repeats=args.vllm_repeats,
            seed=getattr(args, "seed", 0) or 0,
            scale=args.vllm_grid_scale,
            timer=args.vllm_timer,
            progress=lambda line: print(line, flush=True),
        )
    paths = write_calibration(result, args.vllm_out)
    f = result.fit
    print(
        f"{result.name}: {len(result.steps)} compositions, "
        f"{sum(len(s.times_s) for s in result.steps)} measured steps; held-out MAPE "
        f"{f.heldout.mape_pct:.2f}% (single steps {result.raw_heldout.mape_pct:.2f}%)"
    )
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    return 0


def default_validate_dir(trace: str, scheduler: str) -> str:
    """``validate``'s output folder when ``--out`` is not given (under ``out/``, git-ignored)."""
    stem = Path(trace).stem if Path(trace).suffix else trace
    policy_tag = "" if scheduler == "vllm-v1" else "-" + scheduler.replace(":", "-")
    return f"{DEFAULT_VALIDATE_DIR}/vllm-{stem}{policy_tag}"


def validate_table_text(table: Any) -> str:
    """The error table as printed: signed errors, (sim - live) / live, in percent."""
    cols = ["metric", "live_mean", "sim_mean", "mean_error_pct", "signed_error_pct_mean"]
    cols += ["signed_error_pct_p50", "signed_error_pct_p99"]
    shown = table[[c for c in cols if c in table.columns]].rename(
        columns={
            "mean_error_pct": "error_of_mean_pct",
            "signed_error_pct_mean": "error_pct_mean",
            "signed_error_pct_p50": "error_pct_p50",
            "signed_error_pct_p99": "error_pct_p99",
        }
    )

    def signed(x: float) -> str:
        return "" if x != x else f"{x:+.2f}"

    fmt = {c: signed for c in shown.columns if c.startswith("error")}
    fmt.update({c: "{:.4g}".format for c in ("live_mean", "sim_mean")})
    return (
        shown.to_string(index=False, formatters=fmt, na_rep="")
        + "\nerrors are signed, (sim - live) / live in percent: + means the simulator is slower"
    )


def add_validate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``validate`` subcommand (sets ``func=run_validate``) and return its parser."""
    p = subparsers.add_parser(
        "validate",
        help="run one trace on a live vLLM engine and in the simulator, and compare",
        description="Scale a shipped trace (or a trace file) to this machine, run it on a live "
        "vLLM engine and in the simulator with a calibrated profile and the same engine "
        "settings, and report per-request TTFT / TPOT / e2e errors (mean, p50, p99), the "
        "step-time error and whether scheduling decisions diverged, as tables and plots.",
    )
    p.add_argument(
        "--trace",
        default="splitwise-conv",
        help="shipped trace name or trace file (default splitwise-conv)",
    )
    p.add_argument(
        "--backend",
        choices=("vllm", "torch"),
        default="vllm",
        help="vllm (default): a live vLLM engine against the simulator. torch: trajectory "
        "validation of the profile's step times: simulate the trace, sample --steps executed "
        "steps with their items, time each whole step on --device with the torch profiler's "
        "kernels and compare (per-step MAPE, total-time error, region table, plot); "
        "--from-measured re-prices committed measurements instead (no torch needed)",
    )
    p.add_argument(
        "--num-requests",
        type=positive_int,
        default=None,
        metavar="N",
        help="the trace's first N requests (default 150; --backend torch: 1500)",
    )
    p.add_argument(
        "--load",
        type=float,
        default=0.5,
        help="offered load as a fraction of the profile's simulated capacity (default 0.5)",
    )
    p.add_argument(
        "--max-prompt",
        type=int,
        default=None,
        metavar="N",
        help="scale prompts to at most N tokens (default: 5/8 of --max-model-len)",
    )
    p.add_argument(
        "--max-output",
        type=int,
        default=96,
        metavar="N",
        help="scale outputs to at most N tokens (default 96)",
    )
    p.add_argument(
        "--cost-model",
        action="append",
        default=None,
        metavar="PROFILE",
        help=f"calibrated profile (path or name; default {DEFAULT_PROFILE}); ignored with "
        "--calibrate. --backend torch: repeatable, each profile priced along the same steps "
        f"(default {TORCH_DEFAULT_PROFILE})",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="calibrate on the same engine right before the run (avoids drift between runs)",
    )
    p.add_argument(
        "--calibration-repeats",
        type=int,
        default=2,
        metavar="N",
        help="with --calibrate: probe-design repeats before each live run (one fit on all; "
        "default 2)",
    )
    p.add_argument(
        "--no-interleave",
        action="store_true",
        help="with --calibrate: calibrate once before all runs instead of before each",
    )
    p.add_argument(
        "--scheduler",
        default="vllm-v1",
        metavar="POLICY",
        help="policy on both backends (default vLLM's own); any other runs inside vLLM through "
        "the project's step context (e.g. sarathi, proserve, infermax:evict-short)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        metavar="N",
        help="live runs: the median run's tables are shown, and the simulator's error against "
        "the mean over the runs (with its 95%% interval) is printed; over 10%% coefficient of "
        "variation between runs, no timing verdict is given (default 1)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=f"output folder (default {DEFAULT_VALIDATE_DIR}/vllm-<trace>[-<scheduler>])",
    )
    p.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        metavar="N",
        help="--backend torch: executed steps sampled from the schedule (default 120)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="--backend torch: seed of the step sample (default 0)",
    )
    p.add_argument(
        "--from-measured",
        metavar="DIR",
        help="--backend torch, analysis only: sampled_steps.json and traj-<model>.csv in DIR "
        "(e.g. calibration/data/torch/h200-141gb/trajectory) re-priced with --cost-model",
    )
    _add_engine_args(p)
    for action in p._actions:  # engine sizes: defaults depend on the backend
        if action.dest in _TORCH_ENGINE_DEFAULTS:
            action.help = f"{action.help}; --backend torch: {_TORCH_ENGINE_HELP[action.dest]}"
            action.default = None
        elif action.dest == "device":
            action.help = f"{action.help}; --backend torch: cpu (default) or cuda"
        elif action.dest == "model":
            action.help = (
                f"{action.help}; --backend torch: the model timed (default tiny-llama on cpu, "
                "the profile's on cuda)"
            )
    p.set_defaults(func=run_validate)
    return p


TORCH_DEFAULT_PROFILE = "torch:llama-3-8b@h200-141gb/tp1"
_VLLM_ENGINE_DEFAULTS = {"max_num_batched_tokens": 512, "max_num_seqs": 32, "num_gpu_blocks": 513}
_TORCH_ENGINE_DEFAULTS = {
    "max_num_batched_tokens": 4096,
    "max_num_seqs": 128,
    "num_gpu_blocks": None,
}
_TORCH_ENGINE_HELP = {
    "max_num_batched_tokens": "the simulated engine's (default 4096)",
    "max_num_seqs": "the simulated engine's (default 128)",
    "num_gpu_blocks": "the simulated engine's (default: derived from the profile's model and GPU)",
}
_VLLM_ONLY = {
    "load": 0.5, "max_prompt": None, "max_output": 96, "calibrate": False,
    "calibration_repeats": 2, "no_interleave": False, "scheduler": "vllm-v1", "runs": 1,
    "block_size": 32, "max_model_len": 1024, "no_prefix_caching": False, "hidden_size": 256,
    "num_layers": 2, "dtype": None, "timer": "wall",
}  # fmt: skip
_TORCH_ONLY = ("steps", "seed", "from_measured")


def _check_backend_options(args: argparse.Namespace) -> None:
    """Options of the other backend are refused by name (never silently ignored)."""
    if args.backend == "torch":
        wrong = [k for k, v in _VLLM_ONLY.items() if getattr(args, k) != v]
    else:
        wrong = [k for k in _TORCH_ONLY if getattr(args, k) is not None]
    if wrong:
        names = ", ".join("--" + k.replace("_", "-") for k in wrong)
        other = "vllm" if args.backend == "torch" else "torch"
        raise ConfigError(
            f"validate --backend {args.backend}: {names} only apply to --backend {other}"
        )


def run_validate_torch(args: argparse.Namespace) -> int:
    """``llmsched-gym validate --backend torch``: trajectory validation of cost profiles."""
    from types import SimpleNamespace

    from llmsched_gym.calibration import trajectory

    device = args.device or "cpu"
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"validate --backend torch: --device must be cpu or cuda, got {device!r}")
    trace = str(args.trace)
    stem = "measured" if args.from_measured else Path(trace).stem if Path(trace).suffix else trace
    sizes = {k: getattr(args, k) for k in _TORCH_ENGINE_DEFAULTS}
    sizes = {k: _TORCH_ENGINE_DEFAULTS[k] if v is None else v for k, v in sizes.items()}
    return trajectory.run(
        SimpleNamespace(
            trace=trace,
            limit=args.num_requests or 1500,
            cost_model=args.cost_model or [TORCH_DEFAULT_PROFILE],
            steps=args.steps or 120,
            device=device,
            model=args.model,
            seed=0 if args.seed is None else args.seed,
            from_measured=args.from_measured,
            out=args.out or f"{DEFAULT_VALIDATE_DIR}/torch-{stem}",
            **sizes,
        )
    )


def run_validate(args: argparse.Namespace) -> int:
    """``llmsched-gym validate``: run, compare, write, print the error table."""
    _check_backend_options(args)
    if args.backend == "torch":
        return run_validate_torch(args)
    from llmsched_gym.backends.vllm.validate import run_validation

    if args.cost_model is not None and len(args.cost_model) > 1:
        raise ConfigError(
            "validate --backend vllm: give one --cost-model (several: --backend torch)"
        )
    for key, value in _VLLM_ENGINE_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.num_requests is None:
        args.num_requests = 150
    trace = str(args.trace)
    out = args.out or default_validate_dir(trace, args.scheduler)
    from llmsched_gym.backends.vllm._deps import vllm_available

    if not vllm_available():
        return _no_vllm("validate", ImportError(INSTALL_HINT))
    result, paths = run_validation(
        trace,
        config=_engine_config(args),
        cost_model=None if args.calibrate else (args.cost_model or [DEFAULT_PROFILE])[0],
        calibrate_first=args.calibrate,
        calibration_repeats=args.calibration_repeats,
        num_requests=args.num_requests,
        load=args.load,
        max_prompt=args.max_prompt,
        max_output=args.max_output,
        timer=args.timer,
        runs=args.runs,
        interleave=not args.no_interleave,
        out_dir=out,
        scheduler=args.scheduler,
    )
    print(validate_table_text(result.table))
    d = result.divergence
    print(
        f"schedules: {d['live_steps']} live / {d['sim_steps']} simulated steps; "
        + (
            "identical"
            if not d["diverged"]
            else f"first divergence at step {d['first_divergent_step']}"
        )  # fmt: skip
    )
    info = result.info
    if info.get("noise_verdict"):
        print(f"no timing verdict: {info['noise_verdict']}")
    if len(info.get("runs", ())) > 1:
        print(
            f"e2e error per live run: {info['runs']} %; against the mean of the "
            f"{len(info['runs'])} runs (95% interval ±{info['live_mean_ci95_pct']:.1f}%): "
            f"{info['pooled_e2e_error_pct']:+.1f}%"
        )
    for kind, path in paths.items():
        print(f"  {kind}: {path}")
    return 0
