"""Hypothesis property tests: conservation invariants and fast-forward == step-by-step."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from llmsched_gym.config import EngineConfig
from llmsched_gym.core.engine import Engine
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.base import ConstantCostModel, LinearCostModel
from llmsched_gym.errors import PolicyError
from llmsched_gym.metrics.table import request_columns
from llmsched_gym.policies.registry import make_policy

POLICIES = [
    "vllm-v1", "vllm-v1-0.33", "vllm-v0", "sarathi", "static-priority:shortest-prompt",
    "vllm-0.6", "sarathi-0.6",
]  # fmt: skip
V06 = ["vllm-0.6", "sarathi-0.6"]
"""vLLM 0.6.6 block-manager policies (RelServe's baselines): watermark, worst-case append."""


@st.composite
def workloads(draw):
    bs = draw(st.sampled_from([1, 2, 4, 8, 16]))
    n = draw(st.integers(1, 25))
    prefixes = [tuple(draw(st.lists(st.integers(1, 9), min_size=0, max_size=24))) for _ in range(3)]
    specs, longest = [], 1
    for i in range(n):
        prefix = prefixes[draw(st.integers(0, 2))]
        suffix = tuple(draw(st.lists(st.integers(1, 50), min_size=0, max_size=30)))
        prompt = (prefix + suffix) or (1,)
        out = draw(st.integers(1, 40))
        arrival = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25, 7.0, 12.0]))
        specs.append(
            RequestSpec(f"r{i}", arrival, len(prompt), out, out + draw(st.integers(0, 3)),
                        prompt_token_ids=prompt, priority=draw(st.integers(0, 2)))
        )  # fmt: skip
        longest = max(longest, -(-(len(prompt) + out) // bs))
    budget = draw(st.integers(16, 128))
    cfg = EngineConfig(
        max_num_batched_tokens=budget,
        max_num_seqs=draw(st.integers(1, 12)),
        block_size=bs,
        num_gpu_blocks=longest + 1 + draw(st.integers(0, 3 * longest)),
        enable_prefix_caching=draw(st.booleans()),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 4, 16])),
    )
    return cfg, specs


def _fit_config(cfg, specs, policy):
    """Configs the policy accepts: whole-sequence budgets, vLLM 0.6.6's chunk-size rule."""
    if policy in ("vllm-v0", "vllm-0.6"):  # no chunking: a resumed sequence must fit one step
        need = max(s.prompt_len + s.output_len for s in specs)
        cfg = cfg.replace(max_num_batched_tokens=max(cfg.max_num_batched_tokens, need))
    if policy == "sarathi-0.6" and cfg.enable_prefix_caching:  # chunks are whole blocks
        bs = cfg.block_size
        cfg = cfg.replace(max_num_batched_tokens=-(-cfg.max_num_batched_tokens // bs) * bs)
    return cfg


def _livelock(eng, err):
    """``sarathi-0.6``'s livelock error is an explicit outcome only for a genuine livelock."""
    if eng.policy.name != "sarathi-0.6" or "livelock" not in str(err):
        return False
    (rid,) = [r for r in eng.waiting if f"request {r.request_id!r} " in str(err)]
    usable, bs = eng.config.num_gpu_blocks - 1, eng.config.block_size
    # It preempted itself alone with no free block: its whole sequence fills the cache.
    assert -(-rid.num_tokens // bs) == usable
    assert not eng.running and eng.kv.pool.num_free == usable
    event("sarathi-0.6 livelock (explicit PolicyError)")
    return True


def _run(cfg, specs, policy, ff, cost, check=False):
    """Run to the end; returns (engine, schedule log, livelocked)."""
    cfg = _fit_config(cfg, specs, policy)
    log = io.StringIO()
    eng = Engine(
        cfg, make_policy(policy), cost, fast_forward=ff, schedule_log=log, record_steps=True
    )
    eng.add_requests(specs)
    try:
        _drive(eng, cfg, log, check)
    except PolicyError as err:
        if not _livelock(eng, err):
            raise
        return eng, log.getvalue(), True
    return eng, log.getvalue(), False


def _drive(eng, cfg, log, check):
    if check:
        usable = cfg.num_gpu_blocks - 1
        last_time = -1.0
        while eng.step():
            pool = eng.kv.pool
            used = sum(1 for b in range(1, cfg.num_gpu_blocks) if pool.ref_cnt[b] > 0)
            assert used + pool.num_free == usable
            assert min(pool.ref_cnt) >= 0
            assert len(pool.free_queue()) == pool.num_free
            assert all(pool.ref_cnt[b] == 0 for b in pool.free_queue())
            assert len(eng.running) <= cfg.max_num_seqs
            held = sum(len(r.blocks) for r in eng.running)
            assert held >= used  # shared prefix blocks are counted once in `used`
            assert eng.now > last_time
            last_time = eng.now
            _check_token_counters(eng)
        for line in log.getvalue().splitlines():
            assert sum(json.loads(line)["scheduled"].values()) <= cfg.max_num_batched_tokens
    else:
        eng.run()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(POLICIES))
def test_conservation(workload, policy):
    _check_conservation(workload, policy)


def _check_conservation(workload, policy):
    cfg, specs = workload
    eng, _, livelocked = _run(cfg, specs, policy, ff=False, cost=ConstantCostModel(1.0), check=True)
    if livelocked:
        return
    ids = [r.request_id for r in eng.finished]
    assert sorted(ids) == sorted(s.request_id for s in specs)  # none lost, none duplicated
    for r in eng.finished:
        assert r.num_output_tokens == min(r.spec.output_len, r.spec.max_tokens)
        assert r.num_tokens == r.num_prompt_tokens + r.num_output_tokens
        # prompt + refill tokens all computed: every token but the last sampled one, once per pass
        assert r.num_computed_total >= r.num_tokens - 1 - r.num_cached_tokens
        assert r.blocks == []
    assert eng.kv.pool.num_free == cfg.num_gpu_blocks - 1
    assert not eng.running and not eng.waiting


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(POLICIES), st.booleans())
def test_fast_forward_identical(workload, policy, linear):
    cfg, specs = workload
    cost = LinearCostModel(0.01, 1e-4, 1e-7, 3e-6, 1e-3, 2e-4) if linear else ConstantCostModel(0.5)
    slow, slow_log, slow_ll = _run(cfg, specs, policy, ff=False, cost=cost)
    fast, fast_log, fast_ll = _run(cfg, specs, policy, ff=True, cost=cost)
    assert fast_ll == slow_ll
    assert fast_log == slow_log
    assert request_columns(fast.finished) == request_columns(slow.finished)
    assert _expand(fast) == _expand(slow)
    _same_steps(fast, slow)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads(), st.sampled_from([*POLICIES, "vllm-v1 async", "vllm-v1-0.33 async"]), st.booleans()
)
def test_itl_samples_are_every_requests_token_gaps(workload, policy, ff):
    """The weighted ITL samples expand to the gaps between each request's token times (as a
    token listener sees them), whichever way the engine (sync or async) groups them: one sample
    per gap, each to rounding (a gap spanning one step is that step's duration, not a
    difference of times)."""
    cfg, specs = workload
    policy, _, asynchronous = policy.partition(" ")
    cfg = _fit_config(cfg, specs, policy).replace(async_scheduling=bool(asynchronous))
    cost = LinearCostModel(0.01, 1e-4, 1e-7, 3e-6, 1e-3, 2e-4)
    eng = Engine(cfg, make_policy(policy), cost, fast_forward=ff)
    times: dict[str, list[float]] = {}
    eng.token_listeners.append(
        lambda reqs, t: [times.setdefault(r.request_id, []).append(t) for r in reqs]
    )
    eng.add_requests(specs)
    try:
        eng.run()
    except PolicyError as err:
        if _livelock(eng, err):
            return
        raise
    gaps = sorted(b - a for ts in times.values() for a, b in zip(ts, ts[1:]))
    assert _expand(eng) == pytest.approx(gaps, rel=1e-12, abs=1e-12)
    assert all(w >= 1 for w in eng.itl_weights)


@pytest.mark.slow
@pytest.mark.parametrize("policy", V06)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_conservation_v06_focused(policy, workload):
    """300 examples per vLLM 0.6.6 policy (``-m slow``); each run must end (never hang)."""
    _check_conservation(workload, policy)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(V06))
def test_v06_runs_are_deterministic(workload, policy):
    """Two runs of a vLLM 0.6.6 policy give the same schedule, requests and steps."""
    cfg, specs = workload
    cost = LinearCostModel(0.01, 1e-4, 1e-7, 3e-6, 1e-3, 2e-4)
    a, a_log, a_ll = _run(cfg, specs, policy, ff=False, cost=cost)
    b, b_log, b_ll = _run(cfg, specs, policy, ff=False, cost=cost)
    assert a_ll == b_ll and a_log == b_log
    assert request_columns(a.finished) == request_columns(b.finished)
    _same_steps(a, b)


def _check_token_counters(eng):
    """The engine's incremental token totals equal the recomputed sums."""
    assert eng.waiting_tokens == sum(r.num_tokens - r.num_computed_tokens for r in eng.waiting)
    assert eng.running_tokens == sum(r.num_tokens - r.num_computed_tokens for r in eng.running)
    assert eng.running_prefills == sum(
        1 for r in eng.running if r.num_tokens - r.num_computed_tokens > 1
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(), st.sampled_from(POLICIES))
def test_token_counters_through_fast_forward(workload, policy):
    cfg, specs = workload
    cfg = _fit_config(cfg, specs, policy)
    eng = Engine(cfg, make_policy(policy), LinearCostModel(0.01, 1e-4, 1e-7, 3e-6, 1e-3, 2e-4))
    eng.add_requests(specs)
    try:
        while eng.advance():
            _check_token_counters(eng)
    except PolicyError as err:
        if not _livelock(eng, err):
            raise
        return
    assert eng.waiting_tokens == eng.running_tokens == eng.running_prefills == 0


def _same_steps(a, b):
    ca, cb = a.step_columns(), b.step_columns()
    assert ca.keys() == cb.keys()
    for key in ca:
        assert ca[key].tolist() == cb[key].tolist(), key


def _expand(eng):
    out = []
    for v, w in zip(eng.itl_values, eng.itl_weights):
        out.extend([v] * w)
    return sorted(out)


def test_fast_forward_identical_on_long_stretches():
    """Stretches longer than 256 steps take the vectorised path; it must match stepping too."""
    specs = [
        RequestSpec(f"long{i}", 0.25 * i, 17 + 13 * i, 700 + 97 * i, 700 + 97 * i) for i in range(6)
    ] + [RequestSpec("late", 900.0, 40, 30, 30)]
    cfg = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=16, num_gpu_blocks=400)
    cost = LinearCostModel(0.03, 2e-4, 1e-7, 3.3e-6, 1e-3, 2e-4)
    slow, slow_log, _ = _run(cfg, specs, "vllm-v1", ff=False, cost=cost)
    fast, fast_log, _ = _run(cfg, specs, "vllm-v1", ff=True, cost=cost)
    assert fast.num_ff_steps > 1000
    assert fast_log == slow_log
    assert request_columns(fast.finished) == request_columns(slow.finished)
    assert _expand(fast) == _expand(slow)
    _same_steps(fast, slow)


def test_run_until_stops_at_the_same_step_with_and_without_fast_forward():
    specs = [RequestSpec(f"r{i}", 0.1 * i, 30 + i, 300, 300) for i in range(5)]
    cfg = EngineConfig(max_num_batched_tokens=64, max_num_seqs=8, block_size=16, num_gpu_blocks=200)
    engines = []
    for ff in (False, True):
        eng = Engine(cfg, make_policy("vllm-v1"), ConstantCostModel(0.01), fast_forward=ff)
        eng.add_requests(specs)
        eng.run(until=1.5)
        engines.append(eng)
    assert engines[0].num_steps == engines[1].num_steps and engines[1].num_ff_steps > 0
    assert engines[0].now == engines[1].now >= 1.5
    assert [r.num_computed_tokens for r in engines[0].running] == [
        r.num_computed_tokens for r in engines[1].running
    ]


@st.composite
def job_workloads(draw):
    """Random layered DAG jobs (fan-out, fan-in, empty stages) with shared prompt prefixes."""
    from llmsched_gym.core.job import Job, Stage

    jobs, longest = [], 1
    for j in range(draw(st.integers(1, 5))):
        stages, layer_prev = [], []
        for layer in range(draw(st.integers(1, 4))):
            names = []
            for s in range(draw(st.integers(1, 3))):
                name = f"L{layer}S{s}"
                reqs = []
                for i in range(draw(st.integers(0, 3))):
                    prompt = tuple(range(1, draw(st.integers(1, 40)) + 1))
                    out = draw(st.integers(1, 20))
                    offset = draw(st.sampled_from([0.0, 0.0, 0.3]))
                    reqs.append(
                        RequestSpec(f"j{j}-{name}-{i}", offset, len(prompt), out, out,
                                    prompt_token_ids=prompt)
                    )  # fmt: skip
                    longest = max(longest, -(-(len(prompt) + out) // 4))
                after = ()
                if layer_prev:
                    after = tuple(
                        sorted(set(draw(st.lists(st.sampled_from(layer_prev), max_size=2))))
                    )
                stages.append(Stage(name, tuple(reqs), after=after))
                names.append(name)
            layer_prev = names
        jobs.append(Job(f"j{j}", draw(st.sampled_from([0.0, 0.5, 2.0])), tuple(stages)))
    cfg = EngineConfig(
        max_num_batched_tokens=draw(st.integers(16, 64)),
        max_num_seqs=draw(st.integers(1, 6)),
        block_size=4,
        num_gpu_blocks=longest + 1 + draw(st.integers(0, 20)),
    )
    return cfg, jobs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_workloads())
def test_jobs_release_everything_once_and_fast_forward_is_identical(workload):
    cfg, jobs = workload
    engines = []
    for ff in (True, False):
        eng = Engine(cfg, make_policy("vllm-v1"), ConstantCostModel(0.1), fast_forward=ff)
        eng.add_jobs(jobs)
        eng.run()
        engines.append(eng)
    a, b = engines
    assert request_columns(a.finished) == request_columns(b.finished)
    want = sorted(s.request_id for job in jobs for st_ in job.stages for s in st_.requests)
    assert sorted(r.request_id for r in a.finished) == want
    for job in jobs:
        state = a.jobs.states[job.job_id]
        assert len(state.stages_finished) == len(job.stages)
        for stage in job.stages:  # nothing of a stage starts before its predecessors finished
            deps = [
                r for r in a.finished if r.spec.job_id == job.job_id and r.spec.stage in stage.after
            ]
            mine = [
                r for r in a.finished if r.spec.job_id == job.job_id and r.spec.stage == stage.name
            ]
            if deps and mine:
                assert min(r.arrival_time for r in mine) >= max(r.finish_time for r in deps)


@st.composite
def multiturn_workloads(draw):
    """Conversations of 2-5 turns (a turn's prompt holds its parent's prompt and answer, so it
    can hit the parent's blocks of generated tokens), with branches and single requests."""
    from llmsched_gym.workloads.multiturn import resolve_turns

    bs = draw(st.sampled_from([1, 2, 4, 8, 16]))
    raw, t = [], 0.0
    for s in range(draw(st.integers(1, 4))):
        t += draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))
        prompt = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=20)))
        out = draw(st.integers(1, 30))
        turns = [RequestSpec(f"s{s}t0", t, len(prompt), out, out, prompt_token_ids=prompt)]
        arrival = t
        for k in range(1, draw(st.integers(2, 5))):
            parent = turns[draw(st.integers(0, k - 1))] if draw(st.booleans()) else turns[-1]
            arrival += draw(st.sampled_from([0.0, 0.5, 2.0, 6.0, 40.0]))
            own = tuple(draw(st.lists(st.integers(1, 50), max_size=12)))
            out = draw(st.integers(1, 30))
            turns.append(
                RequestSpec(f"s{s}t{k}", arrival, len(own), out, out, prompt_token_ids=own,
                            parent_request_id=parent.request_id)
            )  # fmt: skip
        raw += turns
    for i in range(draw(st.integers(0, 3))):
        n, out = draw(st.integers(1, 30)), draw(st.integers(1, 30))
        raw.append(RequestSpec(f"x{i}", draw(st.sampled_from([0.0, 1.0, 5.0])), n, out, out))
    specs = resolve_turns(
        raw, seed=draw(st.integers(0, 3)), vocab_size=draw(st.sampled_from([17, 40, 32000]))
    )
    longest = max(-(-(s.prompt_len + s.output_len) // bs) for s in specs)
    cfg = EngineConfig(
        max_num_batched_tokens=draw(st.integers(16, 96)),
        max_num_seqs=draw(st.integers(1, 8)),
        block_size=bs,
        num_gpu_blocks=longest + 1 + draw(st.integers(0, 2 * longest)),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
    )
    return cfg, specs


# Found by Hypothesis: the turn is preempted, and resumes with a larger hit (its parent has
# registered more of the answer, all ids equal in a 17-id vocabulary, since).
_PREEMPTED_TURN = (
    EngineConfig(max_num_batched_tokens=16, max_num_seqs=2, block_size=2, num_gpu_blocks=11),
    [
        RequestSpec("s0t0", 0.0, 2, 17, 17, (1, 1), output_token_ids=(16,) * 17),
        RequestSpec("s0t1", 0.0, 19, 1, 1, (1, 1) + (16,) * 17, parent_request_id="s0t0"),
    ],
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(multiturn_workloads(), st.sampled_from(["vllm-v1", "sarathi", "vllm-v0"]))
@example(_PREEMPTED_TURN, "vllm-v1")
def test_multiturn_conservation(workload, policy):
    """Blocks and tokens are conserved when turns hit their parents' generated blocks.

    Every step keeps the block invariants (``_drive``); every request finishes once with its
    output; and at each admission, the prefix hit plus the tokens computed until the request
    leaves (preempted, or finished: every token but the last sampled one) cover what it had,
    so the record's cached tokens (first admission) plus computed tokens equal its sequence
    but the last token when it was never preempted. (A preempted turn may hit more on resume
    than at first: its parent has cached more of the answer since; ``_check_conservation``'s
    bound does not hold for it.)
    """
    cfg, specs = workload
    eng, log, livelocked = _run(
        cfg, specs, policy, ff=False, cost=ConstantCostModel(1.0), check=True
    )
    assert not livelocked
    assert sorted(r.request_id for r in eng.finished) == sorted(s.request_id for s in specs)
    assert eng.kv.pool.num_free == cfg.num_gpu_blocks - 1 and not eng.running and not eng.waiting
    done = {r.request_id: r for r in eng.finished}
    computed: dict[str, int] = {}
    scheduled: dict[str, int] = dict.fromkeys(done, 0)
    for line in map(json.loads, log.splitlines()):
        for rid in line["preempted"]:
            computed.pop(rid)
        for rid, hit in (*line["new"].items(), *line["resumed"].items()):
            computed[rid] = hit
        for rid, n in line["scheduled"].items():
            computed[rid] += n
            scheduled[rid] += n
        for rid in line["finished"]:
            r = done[rid]
            assert computed.pop(rid) == r.num_tokens - 1  # the last pass covered it all
    for rid, r in done.items():
        assert r.num_output_tokens == r.spec.output_len
        assert r.num_computed_total == scheduled[rid]
        if r.num_preemptions == 0:
            assert r.num_cached_tokens + r.num_computed_total == r.num_tokens - 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(multiturn_workloads(), st.booleans())
def test_multiturn_fast_forward_identical(workload, async_scheduling):
    """Fast-forward stops before a decoding parent extends a waiting turn's hit (sync, async)."""
    cfg, specs = workload
    cfg = cfg.replace(async_scheduling=async_scheduling)
    slow, slow_log, _ = _run(cfg, specs, "vllm-v1", ff=False, cost=ConstantCostModel(0.5))
    fast, fast_log, _ = _run(cfg, specs, "vllm-v1", ff=True, cost=ConstantCostModel(0.5))
    assert fast_log == slow_log
    assert request_columns(fast.finished) == request_columns(slow.finished)
    _same_steps(fast, slow)
