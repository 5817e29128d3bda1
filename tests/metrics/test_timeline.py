"""Schedule timelines (Chrome trace-event JSON): schema, spans against records, FF, cluster."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import defaultdict

import pytest

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.core.timeline import TimelineRecorder
from llmsched_gym.cost.base import ConstantCostModel
from llmsched_gym.errors import ConfigError
from llmsched_gym.metrics.timeline import PHASES, STEP_ARGS, check_trace, write_trace
from llmsched_gym.policies.registry import make_policy
from llmsched_gym.simulation import simulate

US = 1e6
TOL_US = 1e-2  # ts and dur are rounded to 1 ns; a sum of a few of them stays well within this

# A small KV cache (30 usable blocks of 4 tokens) and a 16-token budget: prompts take chunks,
# long outputs run the cache out (preemptions), and two requests are cancelled (aborts).
CONFIG = EngineConfig(
    max_num_batched_tokens=16, max_num_seqs=6, block_size=4, num_gpu_blocks=31,
    long_prefill_token_threshold=0,
)  # fmt: skip


def _specs() -> list[RequestSpec]:
    specs = [
        RequestSpec(f"r{i}", 0.05 * i, 9 + 7 * (i % 4), 12 + 9 * (i % 3), 64) for i in range(12)
    ]
    specs[5] = dataclasses.replace(specs[5], cancel_time=1.0)  # aborted while it runs or waits
    specs[11] = dataclasses.replace(specs[11], cancel_time=0.56)  # aborted while waiting
    specs.append(RequestSpec("late", 30.0, 17, 5, 64))  # after an idle gap
    return specs


def _run(specs=None, ff=True, config=CONFIG):
    eng = Engine(config, make_policy("vllm-v1"), ConstantCostModel(0.05), fast_forward=ff)
    rec = TimelineRecorder()
    rec.attach(eng, "tiny")
    eng.add_requests(_specs() if specs is None else specs)
    eng.run()
    return eng, rec.trace({"note": "test"})


def _by_request(trace):
    """request id -> (its slice, its phase slices, its chunk slices, its instant events)."""
    slices = [e for e in trace["traceEvents"] if e["ph"] in ("X", "i")]
    tracks = defaultdict(list)
    for e in slices:
        tracks[e["pid"], e["tid"]].append(e)
    out = {}
    for (_, tid), events in tracks.items():
        if tid == 0:
            continue
        current = None
        for e in events:  # a request's slice comes first, then what it holds
            if e.get("cat") == "request":
                current = out[e["args"]["request_id"]] = (e, [], [], [])
            elif e["ph"] == "i":
                current[3].append(e)
            else:
                (current[1] if e["cat"] in PHASES else current[2]).append(e)
    return out


def _first_token_us(phases) -> float:
    """The end of the first prefill that sampled (not cut short by a preemption)."""
    for a, b in zip(phases, [*phases[1:], None], strict=True):
        if a["cat"] == "prefill" and (b is None or b["cat"] != "preempted"):
            return a["ts"] + a["dur"]
    raise AssertionError("no prefill sampled")


def test_trace_has_the_fields_each_phase_needs_and_loads_as_json(tmp_path) -> None:
    _, trace = _run()
    path = write_trace(trace, tmp_path / "t.json")
    loaded = json.loads(path.read_text())
    assert loaded == trace
    check_trace(loaded)
    assert loaded["displayTimeUnit"] == "ms" and loaded["otherData"]["note"] == "test"
    events = loaded["traceEvents"]
    phases = {e["ph"] for e in events}
    assert phases == {"M", "X", "C", "i"}
    for e in events:
        assert isinstance(e["name"], str) and type(e["pid"]) is int
        if e["ph"] == "X":
            assert type(e["tid"]) is int and isinstance(e["cat"], str)
            assert isinstance(e["ts"], float | int) and e["dur"] >= 0
        if e["ph"] == "C":
            assert all(type(v) is int for v in e["args"].values())
    steps = [e for e in events if e.get("cat") == "step"]
    assert len(steps) == loaded["otherData"]["instances"][0]["num_steps"] > 0
    assert all(set(e["args"]) == set(STEP_ARGS) for e in steps)
    assert all(e["tid"] == 0 for e in steps)
    assert [e["args"]["step"] for e in steps] == list(range(len(steps)))
    names = {(e["name"], e.get("tid")): e["args"] for e in events if e["ph"] == "M"}
    assert names["process_name", None] == {"name": "tiny"}
    assert names["thread_name", 0] == {"name": "steps"}
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"KV blocks", "requests"}
    # KV counters stack to the usable blocks.
    assert all(
        e["args"]["used"] + e["args"]["free"] == 30 for e in events if e["name"] == "KV blocks"
    )
    gz = write_trace(trace, tmp_path / "t.json.gz")
    import gzip

    assert json.loads(gzip.decompress(gz.read_bytes())) == trace


def test_each_requests_spans_add_up_to_its_recorded_times() -> None:
    eng, trace = _run()
    spans = _by_request(trace)
    assert eng.num_preemptions >= 2 and len(eng.aborted) == 2
    seen_recompute = seen_chunks = 0
    for req in [*eng.finished, *eng.aborted]:
        whole, phases, chunks, marks = spans[req.request_id]
        assert whole["ts"] == pytest.approx(req.arrival_time * US, abs=TOL_US)
        assert whole["ts"] + whole["dur"] == pytest.approx(req.finish_time * US, abs=TOL_US)
        # The phases tile the request: back to back, from arrival to end, summing to e2e (a
        # request admitted at its arrival has no waiting phase: zero-length ones are left out).
        assert phases[0]["ts"] == whole["ts"] and all(p["dur"] > 0 for p in phases)
        for a, b in zip(phases, phases[1:], strict=False):
            assert a["ts"] + a["dur"] == pytest.approx(b["ts"], abs=TOL_US)
        total = sum(p["dur"] for p in phases)
        assert total == pytest.approx((req.finish_time - req.arrival_time) * US, abs=TOL_US)
        assert sum(p["cat"] == "preempted" for p in phases) == req.num_preemptions
        if req.first_token_time is not None:  # the first prefill not cut short ends with it
            end = _first_token_us(phases)
            assert end == pytest.approx(req.first_token_time * US, abs=TOL_US)
        for p in phases:
            if p["cat"] != "prefill":
                continue
            inside = [c for c in chunks if p["ts"] <= c["ts"] <= p["ts"] + p["dur"]]
            assert sum(c["args"]["tokens"] for c in inside) == p["args"]["tokens"]
            assert len(inside) == p["args"]["chunks"]
            seen_chunks += len(inside) > 1
            seen_recompute += p["args"]["recompute"]
        # Every token computed for it, in a prefill chunk or a decode step (one each).
        decoded = sum(p["args"]["tokens"] for p in phases if p["cat"] == "decode")
        prefilled = sum(p["args"]["tokens"] for p in phases if p["cat"] == "prefill")
        assert prefilled + decoded == req.num_computed_total
        sampled = sum(1 for a, b in zip(phases, [*phases[1:], None], strict=True)
                      if a["cat"] == "prefill" and (b is None or b["cat"] == "decode"))  # fmt: skip
        assert sampled + decoded == req.num_output_tokens
        if req in eng.aborted:
            assert whole["args"]["status"] == "aborted" and len(marks) == 1
            assert marks[0]["ts"] == pytest.approx(req.finish_time * US, abs=TOL_US)
            assert req.finish_time >= req.spec.cancel_time
        else:
            assert whole["args"]["status"] == "finished" and not marks
            assert whole["args"]["e2e_ms"] == pytest.approx(
                (req.finish_time - req.arrival_time) * 1e3
            )
    assert seen_recompute >= 1 and seen_chunks >= 1
    assert set(spans) == {s.request_id for s in _specs()}


def test_spans_match_simulate_records_ttft_and_e2e() -> None:
    result = simulate(_specs(), CONFIG, "vllm-v1", ConstantCostModel(0.05), timeline=True)
    check_trace(result.timeline)
    spans = _by_request(result.timeline)
    frame = result.requests.set_index("request_id")
    done = frame[frame["finish_time_s"].notna()]
    assert len(done) == len(frame) - 2
    for rid, row in done.iterrows():
        whole, phases, _, _ = spans[rid]
        assert sum(p["dur"] for p in phases) == pytest.approx(row["e2e_s"] * US, abs=TOL_US)
        ttft = _first_token_us(phases) - whole["ts"]
        assert ttft == pytest.approx(row["ttft_s"] * US, abs=TOL_US)
        assert whole["args"]["ttft_ms"] == pytest.approx(row["ttft_s"] * 1e3)
        assert whole["args"]["preemptions"] == row["num_preemptions"]
    assert result.summary["num_preemptions"] >= 2


def test_fast_forwarded_and_stepped_runs_give_the_same_timeline() -> None:
    ff_eng, ff = _run(ff=True)
    st_eng, st = _run(ff=False)
    assert ff_eng.num_ff_steps > 0 and st_eng.num_ff_steps == 0
    assert ff == st
    # A prompt left with one token after a chunk finishes it inside a fast-forwarded stretch
    # (every running request then has one token left): its prefill still ends right there.
    specs = [RequestSpec("a", 0.0, 8, 40, 64), RequestSpec("b", 0.0, 9, 30, 64)]
    cfg = dataclasses.replace(CONFIG, max_num_batched_tokens=16, num_gpu_blocks=64)
    ff_eng, ff = _run(specs, ff=True, config=cfg)
    _, st = _run(specs, ff=False, config=cfg)
    assert ff_eng.num_ff_steps > 0 and ff == st
    b = _by_request(ff)["b"]
    prefill = next(p for p in b[1] if p["cat"] == "prefill")
    assert [c["args"]["tokens"] for c in b[2]] == [8, 1] and prefill["args"]["chunks"] == 2
    b_req = next(r for r in ff_eng.finished if r.request_id == "b")
    first_token = b_req.first_token_time
    assert prefill["ts"] + prefill["dur"] == pytest.approx(first_token * US, abs=TOL_US)


def test_fast_forward_equality_on_a_scenario() -> None:
    from llmsched_gym.scenarios import load_scenario

    sc = load_scenario("chat-sharegpt-overload-v0", {"workload.num_requests": 150})
    ff = sc.simulate(timeline=True)
    st = sc.simulate(timeline=True, fast_forward=False)
    assert ff.num_fast_forward_steps > 0 and st.num_fast_forward_steps == 0
    assert ff.timeline == st.timeline
    check_trace(ff.timeline)


def test_lanes_are_reused_and_unfinished_requests_end_at_the_clock() -> None:
    specs = [RequestSpec(f"s{i}", 10.0 * i, 8, 3, 8) for i in range(5)]  # one at a time
    _, trace = _run(specs)
    assert trace["otherData"]["instances"][0]["num_request_lanes"] == 1
    eng = Engine(CONFIG, make_policy("vllm-v1"), ConstantCostModel(0.05))
    rec = TimelineRecorder()
    rec.attach(eng)
    eng.add_requests(_specs())
    eng.run(until=0.6)  # stop early: requests running, waiting and preempted
    trace = rec.trace()
    check_trace(trace)
    spans = _by_request(trace)
    status = {rid: s[0]["args"]["status"] for rid, s in spans.items()}
    live = {r.request_id for r in (*eng.running, *eng.waiting)}
    assert live and {rid for rid, st in status.items() if st == "unfinished"} == live
    assert "late" not in spans  # not arrived yet
    assert all(s[0]["ts"] + s[0]["dur"] <= eng.now * US + TOL_US for s in spans.values())
    eng.run()  # recording goes on
    assert {s[0]["args"]["status"] for s in _by_request(rec.trace()).values()} == {
        "finished", "aborted"
    }


def test_a_cluster_run_has_one_process_per_instance() -> None:
    from llmsched_gym.scenarios import load_scenario

    sc = load_scenario("chat-azure-conv-4x-v0", {"workload.num_requests": 60})
    result = sc.simulate(timeline=True)
    trace = result.timeline
    check_trace(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}  # fmt: skip
    assert sorted(names) == list(range(len(result.instances)))
    assert [n.split(" ")[0] for _, n in sorted(names.items())] == list(result.instances["name"])
    assert trace["otherData"]["router"] == result.router
    spans = _by_request(trace)
    assert len(spans) == len(result.requests) == 60
    pids = {s[0]["args"]["request_id"]: s[0]["pid"] for s in spans.values()}
    frame = result.requests.set_index("request_id")
    for rid, row in frame.iterrows():
        whole, phases, _, _ = spans[rid]
        assert pids[rid] == row["instance_id"]
        assert sum(p["dur"] for p in phases) == pytest.approx(row["e2e_s"] * US, abs=TOL_US)
    steps = defaultdict(int)
    for e in trace["traceEvents"]:
        if e.get("cat") == "step":
            steps[e["pid"]] += 1
    assert sum(steps.values()) == result.num_steps


def test_async_scheduling_is_refused_with_a_clear_error() -> None:
    cfg = dataclasses.replace(CONFIG, async_scheduling=True)
    with pytest.raises(ConfigError, match="async_scheduling"):
        simulate(_specs(), cfg, "vllm-v1", ConstantCostModel(0.05), timeline=True)
    assert simulate(_specs(), cfg, "vllm-v1", ConstantCostModel(0.05)).timeline is None


def test_attach_refuses_what_it_cannot_record() -> None:
    rec = TimelineRecorder()
    with pytest.raises(ConfigError, match="no engine"):
        rec.trace()
    with pytest.raises(ConfigError, match="simulated engines"):
        rec.attach(object())
    eng = Engine(CONFIG, make_policy("vllm-v1"), ConstantCostModel(0.05))
    eng.add_requests(_specs())
    rec.attach(eng)
    with pytest.raises(ConfigError, match="already"):
        rec.attach(eng)
    eng.step()
    with pytest.raises(ConfigError, match="before the engine's first step"):
        TimelineRecorder().attach(eng)
    plain = Engine(CONFIG, make_policy("vllm-v1"), ConstantCostModel(0.05))
    assert plain.batch_listeners == [] and plain._steps is None  # nothing unless asked


def _broken(trace, index, **change):
    bad = copy.deepcopy(trace)
    bad["traceEvents"][index].update(change)
    for key, value in change.items():
        if value is None:
            del bad["traceEvents"][index][key]
    return bad


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dur": None}, "dur must be"),
        ({"dur": -1.0}, "dur must be"),
        ({"ts": "0"}, "ts must be"),
        ({"tid": 1.5}, "'tid' must be int"),
        ({"ph": "B"}, "phase 'B'"),
        ({"cat": None}, "'cat' must be str"),
    ],
)
def test_check_trace_names_a_broken_event(change, message) -> None:
    _, trace = _run()
    check_trace(trace)
    i = next(i for i, e in enumerate(trace["traceEvents"]) if e.get("cat") == "step")
    with pytest.raises(ConfigError, match=f"traceEvents\\[{i}\\]: .*{message}"):
        check_trace(_broken(trace, i, **change))


def test_check_trace_catches_time_going_back_and_slices_that_do_not_nest() -> None:
    _, trace = _run()
    events = trace["traceEvents"]
    steps = [i for i, e in enumerate(events) if e.get("cat") == "step"]
    with pytest.raises(ConfigError, match="goes back in time"):
        check_trace(_broken(trace, steps[3], ts=events[steps[2]]["ts"] - 1.0))
    with pytest.raises(ConfigError, match="must nest"):
        check_trace(_broken(trace, steps[2], dur=events[steps[2]]["dur"] * 1.5))
    counter = next(i for i, e in enumerate(events) if e["ph"] == "C")
    with pytest.raises(ConfigError, match="counter's args"):
        check_trace(_broken(trace, counter, args={"used": "3"}))
    with pytest.raises(ConfigError, match="unknown metadata"):
        check_trace(_broken(trace, 0, name="process_labels"))
    with pytest.raises(ConfigError, match="traceEvents"):
        check_trace({"displayTimeUnit": "ms", "otherData": {}})
