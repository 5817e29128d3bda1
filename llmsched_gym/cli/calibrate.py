"""``llmsched-gym calibrate`` and ``validate``: measure engine steps and fit a cost profile.

``calibrate`` times a random-weight model's operators with PyTorch (or drives a live vLLM
engine) over a designed grid of batches and fits a cost profile; ``validate`` replays a trace on
a live engine against the simulator (its parser is in ``cli.live``). Their options come from the
torch and live-vLLM helpers, which no other command needs: ``main`` imports this module only
when one of these two commands is named (``_DEFERRED``), so that ``simulate`` starts fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llmsched_gym.errors import ConfigError


def add_parsers(sub: Any) -> None:
    """``calibrate`` and ``validate`` (their options import the torch and live-vLLM helpers)."""
    p = sub.add_parser(
        "calibrate",
        help="measure a model's engine steps on this machine and fit a cost profile",
        description=(
            "--backend vllm: drive a live vLLM engine (see .ci/setup_vllm_venv.sh) through a "
            "designed grid of batch compositions and fit the profile from its measured steps "
            "(options --vllm-*). --backend torch: build a Llama-style model from its config with "
            "random weights, time its operators and whole engine steps over a designed grid "
            "(CUDA graphs and events on a GPU, perf_counter on a CPU), fit the linear cost "
            "profile on 80% of the measured steps, and report the held-out error by batch kind "
            "and token range, with a plot. --from DIR refits existing measurements "
            "(operators.csv, steps.csv, meta.json) without torch."
        ),
    )
    p.add_argument(
        "--backend",
        choices=("torch", "vllm"),
        default="torch",
        help="what to measure: a random-weight model's operators with PyTorch, or a live vLLM "
        "engine (default torch)",
    )
    from llmsched_gym.calibration import torch_profile
    from llmsched_gym.cli import live as live_cli

    torch_profile.add_arguments(p)
    live_cli.add_calibrate_vllm_args(p)
    p.add_argument(
        "--from",
        dest="from_dir",
        action="append",
        metavar="DIR",
        help="fit these measurement folders instead of measuring (repeatable)",
    )
    p.add_argument(
        "--out",
        default="out/calibrate",
        metavar="DIR",
        help="output folder (default out/calibrate)",
    )
    p.add_argument("--profile-dir", metavar="DIR", help="write the profile YAML here instead")
    p.add_argument("--report-dir", metavar="DIR", help="write the report and plot here instead")
    p.add_argument(
        "--vidur-dir",
        metavar="DIR",
        help="Vidur's data/profiling folder, to cross-check operator times in the report",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the train / held-out split (default 0)"
    )
    p.add_argument(
        "--form",
        choices=("extended", "piecewise", "linear"),
        default="extended",
        help="profile form to fit (--backend torch): extended (torch:*, the default), piecewise "
        "(torch-pw:*, piecewise token term and per-item prefill terms) or linear",
    )
    p.set_defaults(func=_cmd_calibrate)
    live_cli.add_validate_parser(sub)


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.backend == "vllm":
        from llmsched_gym.cli import live as live_cli

        return live_cli.run_calibrate_vllm(args)
    if args.backend != "torch":
        raise ConfigError(f"calibrate: unknown backend {args.backend!r}")
    from llmsched_gym.calibration import torch_fit
    from llmsched_gym.cost.registry import profile_file_stem

    out = Path(args.out)
    if args.from_dir:
        folders = [Path(d) for d in args.from_dir]
    else:
        from llmsched_gym.calibration import torch_profile

        torch = torch_profile._import_torch()
        folders = []
        for cfg in torch_profile.configs_from_args(args, torch.cuda.is_available()):
            print(f"measuring {cfg.model} on {cfg.device} ...", flush=True)
            folders.append(torch_profile.run_profile(cfg, out / cfg.model, progress=True))
    for folder in folders:
        meas = torch_fit.load_measurements(folder)
        tf = torch_fit.fit_measurements(meas, seed=args.seed, form=args.form)
        stem = profile_file_stem(torch_fit.profile_name(meas, args.form)[0])
        dest = out if args.from_dir else folder
        written = torch_fit.write_fit_outputs(
            tf,
            Path(args.profile_dir or dest) / f"{stem}.yaml",
            Path(args.report_dir or dest) / f"{stem}.md",
            vidur_dir=args.vidur_dir,
        )
        h, c = tf.fit.heldout, tf.composition
        print(
            f"{meas.meta['model']}: {meas.steps.num_batches} measured steps; held-out MAPE "
            f"{h.mape_pct:.2f}% (max {h.max_ape_pct:.1f}%), operator composition MAPE "
            f"{c.mape_pct:.2f}%"
        )
        for kind, path in written.items():
            print(f"  {kind}: {path}")
    return 0
