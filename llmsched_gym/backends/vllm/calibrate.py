"""Calibrate a linear cost profile from a live vLLM engine: designed batches, measured steps.

The live engine decides its own batches, so the design is a set of *probes*: request sets
submitted at chosen steps so that the engine's own scheduler builds the wanted compositions —

* ``prefill``: one prompt of ``c`` tokens on ``m`` prefix-cached tokens (a warm-up request first
  puts the ``m``-token prefix in the cache), for a grid of ``c`` and ``m``;
* ``multi``: two to four prompts in one step;
* ``decode``: ``B`` requests of context ``L`` admitted together, then their decode steps, for a
  grid of batch sizes and context lengths (plus, per batch size, the longest context the cache
  holds); each decoder outlives the batch's chunked prefill, so all ``B`` decode together;
* ``mixed``: ``B`` decoding requests, then a new prompt of ``c`` tokens joining them (chunked by
  the token budget when it does not fit), as vLLM's chunked prefill mixes them.

Every executed step is kept with its *actual* composition read from the scheduler's output (not
the intended one). The probe set runs ``repeats`` times (fresh token ids each time, repeats
interleaved so drift in a shared machine's load hits all probes alike); steps with the same
(probe, step) key have the same composition, and their mean time is one fitting row (the
profile predicts a step's expected time: latencies are sums of step times, and step times are
skewed to the slow side, so a median would under-predict them; on this project's machine by
about 5% on a trace run). The six coefficients are fitted with
``llmsched_gym.calibration.linearfit.fit_linear`` (relative-error NNLS, seeded held-out split).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import math
import os
import platform
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from llmsched_gym.calibration.linearfit import FEATURES, BatchSet, FitResult, FitStats, fit_linear
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError

__all__ = [
    "CalibrationResult",
    "calibrate",
    "hardware_info",
    "merge_calibrations",
    "probes",
    "profile_document",
    "write_calibration",
]

PROFILE_SCRIPT = "llmsched-gym calibrate --backend vllm"


@dataclass(frozen=True)
class Probe:
    """A request pattern that makes the engine execute wanted batch compositions.

    ``phases`` is a list of request groups; group ``i`` is submitted once the previous group's
    requests all reached their decode phase (or finished), then the run steps until idle.
    Prompts are token-id lists built per repeat (``build``).
    """

    key: str
    kind: str
    build: Callable[[int], list[list[tuple[list[int], int]]]]
    """repeat -> phases -> [(prompt ids, max_tokens)]."""


def _ids(rng: np.random.Generator, n: int, vocab: int) -> list[int]:
    return [int(x) for x in rng.integers(16, vocab, size=n)]


def probes(
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    block_size: int,
    vocab_size: int,
    kv_tokens: int,
    seed: int = 0,
    scale: float = 1.0,
) -> list[Probe]:
    """The probe design for an engine's limits (``scale`` < 1 keeps a thinned grid for tests).

    ``kv_tokens`` is the KV capacity in tokens; probes that would need more than 90% of it are
    left out, so the design never preempts.
    """
    budget, seqs, mlen, bs = max_num_batched_tokens, max_num_seqs, max_model_len, block_size
    capacity = int(0.9 * kv_tokens)
    out: list[Probe] = []

    def rng_for(key: str, repeat: int) -> np.random.Generator:
        return np.random.default_rng([seed, repeat, zlib.crc32(key.encode())])

    def thin(values: list[int]) -> list[int]:
        if scale >= 1.0:
            return values
        k = max(2, int(round(len(values) * scale)))
        idx = np.linspace(0, len(values) - 1, k).round().astype(int)
        return sorted({values[i] for i in idx})

    top = min(budget, mlen - 1)
    cs = thin(sorted({c for c in (4, 16, 48, 96, 160, 256, 384, 512, 768, 1024) if c <= top}
                     | {top}))  # fmt: skip
    ms = thin([m for m in (0, 4 * bs, 12 * bs) if m + 2 <= mlen])
    for c in cs:
        for m in ms:
            if c + m > mlen - 1:
                continue
            key = f"prefill:c{c}:m{m}"

            def build(r: int, c=c, m=m, key=key) -> list[list[tuple[list[int], int]]]:
                rng = rng_for(key, r)
                prefix = _ids(rng, m, vocab_size)
                phases = []
                if m:
                    phases.append([(prefix + _ids(rng, 1, vocab_size), 1)])
                phases.append([(prefix + _ids(rng, c, vocab_size), 1)])
                return phases

            out.append(Probe(key, "prefill", build))
    for k in thin([2, 3, 4]):
        for total in thin([64, budget // 2, budget]):
            if total // k < 2:
                continue
            key = f"multi:k{k}:t{total}"

            def build(r: int, k=k, total=total, key=key) -> list[list[tuple[list[int], int]]]:
                rng = rng_for(key, r)
                shape = rng_for(key + ":sizes", 0)  # the same sizes in every repeat
                cuts = np.sort(shape.choice(np.arange(1, total), size=k - 1, replace=False))
                sizes = np.diff(np.concatenate([[0], cuts, [total]]))
                return [[(_ids(rng, max(2, int(s)), vocab_size), 1) for s in sizes]]

            out.append(Probe(key, "multi", build))
    # Large decode batches dominate a loaded engine's time: sample them densely.
    sizes = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
    batch_sizes = thin(sorted({b for b in sizes if b <= seqs} | {seqs}))
    fractions = ((1, 64), (1, 8), (1, 4), (7, 16), (5, 8))
    contexts = thin(
        sorted({max(16, mlen * a // b) for a, b in fractions if mlen * a // b + 16 < mlen})
    )
    decode_steps = 10 if scale >= 1.0 else 4
    for b in batch_sizes:
        # Every decoder outlives the chunked prefill of all b prompts (ceil(b L / budget) steps),
        # then the b decode together for ``decode_steps`` steps: without the margin, the first
        # prompts finish before the last are prefilled and a large batch never decodes whole.
        # The largest context that fits in the cache is in the design too: a loaded engine
        # spends its time in full-batch decode steps over a nearly full cache.
        def keep_for(L: int, b: int = b) -> int:
            return math.ceil(b * L / budget) + decode_steps + 1

        def fits(L: int, b: int = b) -> bool:
            return b * (L + keep_for(L)) <= capacity and L + keep_for(L) < mlen

        full = max((L for L in range(bs, mlen, bs) if fits(L)), default=0)
        for L in sorted({*contexts, full} - {0}):
            if not fits(L):
                continue
            keep = keep_for(L)
            key = f"decode:b{b}:L{L}"

            def build(r: int, b=b, L=L, key=key, keep=keep):
                rng = rng_for(key, r)
                return [[(_ids(rng, L, vocab_size), keep) for _ in range(b)]]

            out.append(Probe(key, "decode", build))
    for b in thin([2, max(2, seqs // 4), max(2, seqs - 1)]):
        for L in thin([64, mlen // 3]):
            for c in thin([32, budget // 4, budget - b // 2]):
                # Decoders outlive the (chunked) prefill of all of them, then decode 4 more.
                keep = math.ceil(b * L / budget) + 4
                if c + 1 > mlen or c < 2 or b * (L + keep) + c > capacity:
                    continue
                key = f"mixed:b{b}:L{L}:c{c}"

                def build(r: int, b=b, L=L, c=c, key=key, keep=keep):
                    rng = rng_for(key, r)
                    decoders = [(_ids(rng, L, vocab_size), keep) for _ in range(b)]
                    return [decoders, [(_ids(rng, c, vocab_size), 1)]]

                out.append(Probe(key, "mixed", build))
    return out


@dataclass
class MeasuredStep:
    """One executed step of a probe: its composition and measured times over the repeats."""

    probe: str
    kind: str
    index: int
    c: list[int]
    m: list[int]
    times_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)


def _run_probe(run: Any, probe: Probe, repeat: int, tag: str) -> list[Any]:
    """Drive one probe on a live run; return every executed ``LiveStep``."""
    steps: list[Any] = []
    phases = probe.build(repeat)
    counter = 0
    for p, group in enumerate(phases):
        ids = []
        for ids_, max_tokens in group:
            rid = f"{tag}-{probe.key}-r{repeat}-p{p}-{counter}"
            counter += 1
            ids.append(rid)
            run.submit(
                RequestSpec(
                    request_id=rid,
                    arrival_time=0.0,
                    prompt_len=len(ids_),
                    output_len=max_tokens,
                    max_tokens=max_tokens,
                    prompt_token_ids=tuple(ids_),
                )
            )
        last = p == len(phases) - 1
        while True:
            rec = run.step()
            if rec is None:
                break
            steps.append(rec)
            if not last:
                states = [run.request_state(r) for r in ids]
                if all(
                    s["status"] == "finished"
                    or s.get("num_computed_tokens", 0) >= s.get("num_tokens", 0) - 1
                    for s in states
                ):
                    break
    return steps


@dataclass
class CalibrationResult:
    """Measured steps, the fit and its provenance."""

    steps: list[MeasuredStep]
    fit: FitResult
    raw_heldout: FitStats
    """Error of the fitted model on every individual measured step (no mean) of the held-out
    compositions: the noise floor of single steps on this machine."""
    engine: dict[str, Any]
    hardware: dict[str, Any]
    versions: dict[str, str]
    repeats: int
    timer: str
    wall_s: float
    name: str
    created: str

    @property
    def heldout_mape_pct(self) -> float:
        """Held-out MAPE (percent) of the fitted profile on mean step times per composition."""
        return self.fit.heldout.mape_pct

    def frame(self) -> Any:
        """The measured steps as a DataFrame (features, mean, median and per-repeat times)."""
        import pandas as pd

        feats = _features(self.steps)
        pred = self.fit.model.step_times(*(feats[f] for f in FEATURES))
        return pd.DataFrame(
            {
                "probe": [s.probe for s in self.steps],
                "kind": [s.kind for s in self.steps],
                "step": [s.index for s in self.steps],
                **feats,
                "mean_s": _targets(self.steps),
                "median_s": [float(np.median(s.times_s)) for s in self.steps],
                "predicted_s": pred,
                "times_s": [" ".join(f"{t:.6f}" for t in s.times_s) for s in self.steps],
            }
        )


def _targets(steps: Sequence[MeasuredStep]) -> np.ndarray:
    """Each composition's fitting target: the mean of its measured times (see the module doc)."""
    return np.asarray([float(np.mean(s.times_s)) for s in steps])


def _features(steps: Sequence[MeasuredStep]) -> dict[str, np.ndarray]:
    batch, cs, ms = [], [], []
    for b, s in enumerate(steps):
        batch += [b] * len(s.c)
        cs += s.c
        ms += s.m
    bset = BatchSet(
        batch=np.asarray(batch, dtype=np.int64),
        c=np.asarray(cs, dtype=np.int64),
        m=np.asarray(ms, dtype=np.int64),
        num_batches=len(steps),
    )
    return bset.features()


def hardware_info() -> dict[str, Any]:
    """What the measurements ran on: CPU model and cores (``/proc/cpuinfo``), GPU if any."""
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine()}
    cpu = None
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if cpu is None and line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                if not flags and line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    info["cpu"] = cpu or platform.processor() or "unknown"
    info["cpu_count"] = os.cpu_count()
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    info["cpu_flags"] = sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2")))
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_count"] = torch.cuda.device_count()
    except Exception:  # torch absent or broken: CPU info is enough
        pass
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def calibrate(
    engine: Any = None,
    *,
    repeats: int = 3,
    seed: int = 0,
    scale: float = 1.0,
    heldout_fraction: float = 0.2,
    name: str | None = None,
    timer: str = "wall",
    progress: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Run the probe design on a live engine and fit the linear cost profile.

    Args:
        engine: a ``LiveEngine`` (default: one built from ``LiveEngineConfig()``, closed after).
        repeats: runs of the whole design; each composition's mean time is one fitting row.
        seed: seed of the token ids and of the held-out split.
        scale: thins the grid (``< 1``) for quick runs and tests.
        heldout_fraction: share of compositions kept out of the fit.
        name: profile name (default ``vllm-live:<model>@<hardware>``).
        timer: ``wall`` (step wall-clock time) or ``cpu`` (this process's CPU time per step, for
            machines shared with other work; see ``LiveRun``).
        progress: called with a line of text per repeat.

    Returns:
        The measured steps and the fit (held-out MAPE in ``heldout_mape_pct``).
    """
    import time

    from llmsched_gym.backends.vllm.engine import LiveEngine

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an integer >= 1, got {repeats!r}")
    own = engine is None
    gc_was = gc.isenabled()
    engine = engine or LiveEngine()
    t0 = time.perf_counter()
    try:
        cfg = engine.config
        e = cfg.engine
        vocab = cfg.tiny.vocab_size if cfg.model is None else 30000
        design = probes(
            e.max_num_batched_tokens, e.max_num_seqs, cfg.max_model_len, e.block_size, vocab,
            (e.num_gpu_blocks - 1) * e.block_size, seed=seed, scale=scale,
        )  # fmt: skip
        measured: dict[tuple[str, int], MeasuredStep] = {}
        gc_was = gc.isenabled()
        gc.disable()  # collector pauses would land inside timed steps; collect between probes
        run = engine.start(timer=timer)
        # Warm-up: first steps after start-up pay one-off allocation costs; not recorded.
        for probe in design[:: max(1, len(design) // 4)]:
            _run_probe(run, probe, 10_000, "warmup")
        for r in range(repeats):
            order = np.random.default_rng([seed, r]).permutation(len(design))
            for i in order:
                probe = design[int(i)]
                gc.collect()
                for j, rec in enumerate(_run_probe(run, probe, r, "cal")):
                    items, dt = rec.items, rec.duration_s
                    if not items:
                        continue
                    c = [int(x[1]) for x in items]
                    m = [int(x[2]) for x in items]
                    key = (probe.key, j)
                    st = measured.get(key)
                    if st is None:
                        measured[key] = MeasuredStep(probe.key, probe.kind, j, c, m)
                    elif sorted(zip(st.c, st.m, strict=True)) != sorted(zip(c, m, strict=True)):
                        # composition differed between repeats: keep it as its own row
                        key = (f"{probe.key}#r{r}", j)
                        measured[key] = MeasuredStep(probe.key, probe.kind, j, c, m)
                    measured[key].times_s.append(dt)
                    measured[key].cpu_s.append(rec.cpu_s)
            if progress is not None:
                progress(f"repeat {r + 1}/{repeats}: {len(measured)} compositions")
        run.result()
        steps = sorted(measured.values(), key=lambda s: (s.probe, s.index))
        feats = _features(steps)
        targets = _targets(steps)
        label = name or f"vllm-live:{cfg.describe()['model']}@{_hw_slug()}"
        fit = fit_linear(feats, targets, label, seed=seed, heldout_fraction=heldout_fraction)
        raw = _raw_heldout(steps, feats, fit)
        return CalibrationResult(
            steps=steps,
            fit=fit,
            raw_heldout=raw,
            engine=cfg.describe(),
            hardware=hardware_info(),
            versions=dict(engine.versions),
            repeats=repeats,
            timer=timer,
            wall_s=time.perf_counter() - t0,
            name=label,
            created=_dt.date.today().isoformat(),
        )
    finally:
        if gc_was:
            gc.enable()
        if own:
            engine.close()


def merge_calibrations(parts: Sequence[CalibrationResult]) -> CalibrationResult:
    """One fit from several calibration runs on the same engine (their repeats pooled).

    Compositions measured in several parts pool their times (the mean then spans all parts),
    so a profile calibrated in parts interleaved with other runs reflects the machine's speed
    over the whole session. Seed, split share and name come from the first part.
    """
    if not parts:
        raise ConfigError("merge_calibrations needs at least one calibration")
    first = parts[0]
    pooled: dict[tuple, MeasuredStep] = {}
    for part in parts:
        for st in part.steps:
            key = (st.probe, st.index, tuple(sorted(zip(st.c, st.m, strict=True))))
            have = pooled.get(key)
            if have is None:
                pooled[key] = MeasuredStep(
                    st.probe, st.kind, st.index, list(st.c), list(st.m), list(st.times_s),
                    list(st.cpu_s),
                )  # fmt: skip
            else:
                have.times_s.extend(st.times_s)
                have.cpu_s.extend(st.cpu_s)
    steps = sorted(pooled.values(), key=lambda s: (s.probe, s.index))
    feats = _features(steps)
    targets = _targets(steps)
    fit = fit_linear(
        feats, targets, first.name, seed=first.fit.seed, heldout_fraction=first.fit.heldout_fraction
    )
    return dataclasses.replace(
        first,
        steps=steps,
        fit=fit,
        raw_heldout=_raw_heldout(steps, feats, fit),
        hardware=hardware_info(),
        repeats=sum(p.repeats for p in parts),
        wall_s=sum(p.wall_s for p in parts),
    )


def _raw_heldout(steps: Sequence[MeasuredStep], feats: dict, fit: FitResult) -> FitStats:
    """Held-out error against each single measured time (the split ``fit_linear`` used)."""
    n = len(steps)
    order = np.random.default_rng(fit.seed).permutation(n)
    held = order[: max(1, int(round(fit.heldout_fraction * n)))]
    pred = fit.model.step_times(*(feats[f] for f in FEATURES))
    p, t = [], []
    for i in held:
        for x in steps[int(i)].times_s:
            p.append(pred[int(i)])
            t.append(x)
    return FitStats.of(np.asarray(p), np.asarray(t))


def _hw_slug() -> str:
    info = hardware_info()
    label = info.get("gpu") or info["cpu"]
    slug = "".join(ch if ch.isalnum() else "-" for ch in str(label).lower()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return slug or "unknown"


def _stats(s: FitStats) -> dict[str, float]:
    return {
        "n": s.n,
        "mape_pct": round(float(s.mape_pct), 4),
        "p90_ape_pct": round(float(s.p90_ape_pct), 4),
        "max_ape_pct": round(float(s.max_ape_pct), 4),
    }


def profile_document(result: CalibrationResult) -> dict[str, Any]:
    """The profile YAML document (the registry's ``kind: linear`` format, with provenance).

    ``model``, ``gpu`` and ``tp`` are left out: the live model is not in the hardware catalogue,
    so the engine config must give ``num_gpu_blocks`` (the source records the live engine's).
    """
    kinds = sorted({s.kind for s in result.steps})
    return {
        "kind": "linear",
        "name": result.name,
        "coefficients": result.fit.model.coefficients(),
        "units": "seconds; features as defined in llmsched_gym/cost/base.py",
        "fit": {
            "method": "relative-error non-negative least squares (Lawson-Hanson), seeded split; "
            "one row per batch composition: the mean of its measured step times (the expected "
            "step time)",
            "seed": result.fit.seed,
            "heldout_fraction": result.fit.heldout_fraction,
            "train": _stats(result.fit.train),
            "heldout": _stats(result.fit.heldout),
            "heldout_single_steps": _stats(result.raw_heldout),
        },
        "source": {
            "data": "wall-clock times of real vLLM EngineCore steps (schedule + forward + sample + "
            "update), measured in-process by llmsched_gym.backends.vllm",
            "design": {
                "probe_kinds": kinds,
                "compositions": len(result.steps),
                "measured_steps": int(sum(len(s.times_s) for s in result.steps)),
                "repeats": result.repeats,
                "timer": result.timer,
            },
            "engine": result.engine,
            "hardware": result.hardware,
            "versions": result.versions,
            "wall_s": round(result.wall_s, 1),
        },
        "created": result.created,
        "script": PROFILE_SCRIPT,
    }


def write_calibration(result: CalibrationResult, out_dir: str | Path) -> dict[str, Path]:
    """Write ``profile.yaml``, ``report.md`` and ``steps.csv`` (small) under ``out_dir``."""
    import yaml

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = profile_document(result)
    header = (
        "# Linear cost profile fitted from a live vLLM engine. Generated by\n"
        f"# `{PROFILE_SCRIPT}`; do not edit by hand.\n"
        "# step_time_s = c0 + c_tokens*num_tokens + c_prefill_attn*prefill_attn\n"
        "#             + c_decode_kv*decode_kv + c_prefill*num_prefill + c_decode*num_decode\n"
    )
    profile = out / "profile.yaml"
    profile.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=100), "utf-8")
    frame = result.frame()
    steps_csv = out / "steps.csv"
    frame.to_csv(steps_csv, index=False, float_format="%.6g")
    report = out / "report.md"
    report.write_text(_report_markdown(result, frame), "utf-8")
    return {"profile": profile, "report": report, "steps": steps_csv}


def _report_markdown(result: CalibrationResult, frame: Any) -> str:
    f = result.fit
    coef = "\n".join(f"| `{k}` | {v:.6g} |" for k, v in f.model.coefficients().items())
    frame = frame.assign(ape_pct=(frame.predicted_s - frame.mean_s).abs() / frame.mean_s * 100)
    by_kind = frame.groupby("kind").agg(
        compositions=("ape_pct", "size"),
        median_ms=("median_s", lambda x: 1000 * float(np.median(x))),
        mape_pct=("ape_pct", "mean"),
        max_ape_pct=("ape_pct", "max"),
    )
    rows = "\n".join(
        f"| {k} | {int(r.compositions)} | {r.median_ms:.2f} | {r.mape_pct:.2f} | "
        f"{r.max_ape_pct:.2f} |"
        for k, r in by_kind.iterrows()
    )
    e = result.engine
    hw = result.hardware
    split_rows = "\n".join(
        f"| {label} | {st.n} | {st.mape_pct:.2f} | {st.p90_ape_pct:.2f} | {st.max_ape_pct:.2f} |"
        for label, st in (
            ("train (mean per composition)", f.train),
            ("**held-out (mean per composition)**", f.heldout),
            ("held-out single steps", result.raw_heldout),
        )
    )
    return f"""# Live vLLM calibration: `{result.name}`

Generated by `{PROFILE_SCRIPT}` on {result.created}; profile in `profile.yaml`, every measured
composition in `steps.csv`.

* Engine: vLLM {result.versions.get("vllm")} ({result.versions.get("vllm_build")}), torch
  {result.versions.get("torch")}; model `{e["model"]}` ({e["load_format"]} weights, dtype
  {e["dtype"]}); {e["engine"]}; max_model_len {e["max_model_len"]}.
* Hardware: {hw.get("gpu") or hw.get("cpu")}; {hw.get("cpus_usable", hw.get("cpu_count"))} usable
  CPU cores; load average at the end {hw.get("load_average")}.
* Design: {len(result.steps)} batch compositions from probes of kinds
  {", ".join(sorted({s.kind for s in result.steps}))}; each run {result.repeats} times
  ({sum(len(s.times_s) for s in result.steps)} measured steps, {result.wall_s:.0f} s).

## Fit (relative-error NNLS, seed {f.seed}, {f.heldout_fraction:.0%} held out)

| split | rows | MAPE % | p90 APE % | max APE % |
|---|---|---|---|---|
{split_rows}

The single-step row is the noise floor: the same composition measured again differs by about that
much on this machine (shared cores, no pinning), whatever the model.

| coefficient | value (s, per feature unit) |
|---|---|
{coef}

## Error by probe kind (all compositions)

| kind | compositions | median step ms | MAPE % | max APE % |
|---|---|---|---|---|
{rows}
"""
