"""The leaderboard site's timeline page: one workload's schedule, drawn and downloadable.

A page source for ``site.build_site(extra=...)``: it runs a chosen suite workload (by default
the first quick Priority test workload at overload, where the schedule matters) under
``vllm-v1`` with the timeline recorder on (``llmsched_gym.metrics.timeline``), draws the first
``WINDOW_S`` seconds as inline SVG (the engine's steps, the KV cache and the queues, the first
``LANES`` request lanes with their phases) and writes the whole trace under ``traces/`` for
Perfetto or ``chrome://tracing``, which open it without a network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmsched_gym.errors import ConfigError
from llmsched_gym.leaderboard.site_html import esc

__all__ = [
    "LANES", "TRACES", "WINDOW_S", "default_workload", "timeline_pages", "timeline_stem",
    "timeline_svg",
]  # fmt: skip

TRACES = "traces"
"""The site's folder of trace files."""

WINDOW_S = 30.0
"""Seconds of simulated time the page draws (the file holds the whole run)."""

LANES = 40
"""Request lanes the page draws (the file holds them all)."""

_PHASE_CLASS = {"waiting": "wait", "prefill": "pre", "decode": "dec", "preempted": "pmt"}
_WIDTH, _LEFT = 960, 70


def default_workload(suite: Any) -> Any:
    """The first quick Priority test workload at overload (else the first quick one)."""
    quick = suite.workloads("test", tasks=["Priority"], quick=True)
    if not quick:
        raise ConfigError(f"suite {suite.version}: no quick Priority test workload to draw")
    return next((w for w in quick if w.level == "overload"), quick[0])


def timeline_stem(workload_id: str) -> str:
    """The page's and the trace file's name (without suffix) for a workload id."""
    parts = workload_id.lower().split("/")
    return "timeline-" + "-".join("".join(c if c.isalnum() else "-" for c in p) for p in parts)


def _workload(suite: Any, workload_id: str | None) -> Any:
    if workload_id is None:
        return default_workload(suite)
    every = suite.workloads("test")
    for w in every:
        if w.id == workload_id:
            return w
    near = [w.id for w in every if w.id.split("/")[0] == workload_id.split("/")[0]][:5]
    raise ConfigError(
        f"--timeline-workload {workload_id!r} is not a test workload of {suite.version} "
        f"(Task/scenario/source/test/seed), e.g. {near or [w.id for w in every[:3]]}"
    )


def timeline_pages(workload_id: str | None = None, scheduler: str = "vllm-v1") -> Any:
    """A ``PageSource``: the timeline page of ``workload_id`` (default ``default_workload``)."""

    def source(site: Any) -> list[Any]:
        from llmsched_gym.leaderboard.site import Page
        from llmsched_gym.metrics.timeline import write_trace
        from llmsched_gym.policies.registry import make_policy

        w = _workload(site.suite, workload_id)
        result = w.scenario().simulate(make_policy(scheduler), seed=w.seed, timeline=True)
        trace = result.timeline
        name = timeline_stem(w.id)
        (site.dest / TRACES).mkdir(exist_ok=True)
        write_trace(trace, site.dest / TRACES / f"{name}.json")
        s = result.summary
        body = (
            f"<h1>Timeline: {esc(w.id)} under {esc(scheduler)}</h1>\n"
            f"<p>Load level {esc(w.level)}; {s['num_finished']} requests finished, mean e2e "
            f"{s['e2e_s_mean']:.2f} s, {result.num_steps} engine steps. The first "
            f"{WINDOW_S:g} s of simulated time and the first {LANES} request lanes are drawn "
            "below; the whole run is in the trace file, which Perfetto "
            "(ui.perfetto.dev, or a local copy) and chrome://tracing open without a "
            "network.</p>\n"
            f'<p><a href="{TRACES}/{esc(name)}.json" download>Download the trace '
            f"({esc(name)}.json, Chrome trace-event JSON)</a></p>\n"
            + timeline_svg(trace)
        )
        summary = f"{w.id} under {scheduler}: steps, KV cache, queues and requests over time"
        return [Page(f"{name}.html", f"Timeline ({w.id})", body, "more", summary)]

    return source


def _events(trace: Mapping[str, Any], pid: int = 0) -> list[Mapping[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("pid", 0) == pid]


def timeline_svg(trace: Mapping[str, Any], window_s: float = WINDOW_S, lanes: int = LANES) -> str:
    """The first ``window_s`` seconds of instance 0's trace: steps, counters, request lanes."""
    events = _events(trace)
    t0 = 0.0
    t1 = t0 + window_s * 1e6
    scale = (_WIDTH - _LEFT - 10) / (t1 - t0)

    def x(ts: float) -> float:
        return round(_LEFT + (min(max(ts, t0), t1) - t0) * scale, 2)

    parts: list[str] = []
    y = 4
    # Steps: one mark per step, its height the batch's tokens over the largest batch drawn.
    steps = [e for e in events if e.get("cat") == "step" and e["ts"] < t1]
    most = max((e["args"]["tokens"] for e in steps), default=1) or 1
    parts.append(_label(y + 20, "steps"))
    for e in steps:
        h = 30 * e["args"]["tokens"] / most
        parts.append(
            f'<rect class="st {esc(e["name"])}" x="{x(e["ts"])}" y="{y + 30 - h:.1f}" '
            f'width="{max(x(e["ts"] + e["dur"]) - x(e["ts"]), 0.3):.2f}" height="{h:.1f}"/>'
        )
    y += 40
    for name, keys in (("KV blocks", ("used", "free")), ("requests", ("running", "waiting"))):
        parts.append(_label(y + 20, name))
        parts += _counter(events, name, keys, x, t1, y)
        y += 40
    # One pass over the window's events: each lane's phases and abort marks, in trace order.
    lanes_seen: set[int] = set()
    by_lane: dict[int, list[Mapping[str, Any]]] = {}
    for e in events:
        tid = e.get("tid", 0)
        if tid <= 0:
            continue
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            lanes_seen.add(tid)
        elif e.get("ph") in ("X", "i") and e["ts"] < t1:
            by_lane.setdefault(tid, []).append(e)
    drawn = sorted(lanes_seen)[:lanes]
    for row, tid in enumerate(drawn):
        yy = y + row * 9
        marks = by_lane.get(tid, [])
        for e in marks:
            cls = _PHASE_CLASS.get(e.get("cat")) if e["ph"] == "X" else None
            if cls is None:
                continue
            w = max(x(e["ts"] + e["dur"]) - x(e["ts"]), 0.3)
            parts.append(
                f'<rect class="{cls}" x="{x(e["ts"])}" y="{yy}" width="{w:.2f}" height="7">'
                f"<title>{esc(e['name'])} {e['dur'] / 1e3:.1f} ms</title></rect>"
            )
        for e in marks:
            if e["ph"] == "i":
                parts.append(f'<circle class="abt" cx="{x(e["ts"])}" cy="{yy + 3.5}" r="3"/>')
    if drawn:
        parts.append(_label(y + 10, f"lanes 1-{len(drawn)}"))
    y += len(drawn) * 9 + 6
    ticks = [window_s * i / 6 for i in range(7)]
    parts += [
        f'<line class="tick" x1="{x(t * 1e6)}" x2="{x(t * 1e6)}" y1="0" y2="{y}"/>'
        f'<text x="{x(t * 1e6)}" y="{y + 12}" text-anchor="middle">{t:g} s</text>'
        for t in ticks
    ]
    legend = (
        '<p class="legend"><span class="wait">waiting</span> <span class="pre">prefill</span> '
        '<span class="dec">decode</span> <span class="pmt">preempted</span> '
        '<span class="abt">abort</span> · steps by batch tokens; counters stacked '
        "(used / free blocks, running / waiting requests)</p>"
    )
    style = (
        "<style>svg.timeline rect.wait,.legend .wait{fill:#c9c9c9;background:#c9c9c9}"
        "svg.timeline rect.pre,.legend .pre{fill:#4c78a8;background:#4c78a8;color:#fff}"
        "svg.timeline rect.dec,.legend .dec{fill:#59a14f;background:#59a14f;color:#fff}"
        "svg.timeline rect.pmt,.legend .pmt{fill:#e15759;background:#e15759;color:#fff}"
        "svg.timeline .abt,.legend .abt{fill:#000;background:#000;color:#fff}"
        "svg.timeline rect.st{fill:#777}svg.timeline .c0{fill:#4c78a8}"
        "svg.timeline .c1{fill:#d6dde8}svg.timeline .tick{stroke:#eee}"
        "svg.timeline text{font-size:10px}</style>"
    )
    return (
        f'{style}<svg class="timeline" width="{_WIDTH}" height="{y + 16}" '
        f'viewBox="0 0 {_WIDTH} {y + 16}" role="img" aria-label="schedule timeline">'
        + "".join(parts)
        + f"</svg>\n{legend}"
    )


def _label(y: float, text: str) -> str:
    return f'<text x="2" y="{y}">{esc(text)}</text>'


def _counter(
    events: Sequence[Mapping[str, Any]], name: str, keys: tuple[str, str], x: Any, t1: float,
    y: float,
) -> list[str]:
    """A stacked step chart of a two-series counter, scaled to its largest total drawn."""
    points = [e for e in events if e.get("ph") == "C" and e.get("name") == name and e["ts"] < t1]
    top = max((sum(e["args"].get(k, 0) for k in keys) for e in points), default=0) or 1
    out = []
    for i, e in enumerate(points):
        end = points[i + 1]["ts"] if i + 1 < len(points) else t1
        w = max(x(end) - x(e["ts"]), 0.0)
        if w <= 0:
            continue
        base = y + 30
        for j, k in enumerate(keys):
            h = 30 * e["args"].get(k, 0) / top
            base -= h
            out.append(
                f'<rect class="c{j}" x="{x(e["ts"])}" y="{base:.1f}" width="{w:.2f}" '
                f'height="{h:.1f}"/>'
            )
    return out

