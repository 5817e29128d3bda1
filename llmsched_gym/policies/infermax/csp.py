"""InferMax §5: the optimal schedule as a constraint satisfaction problem, solved with CP-SAT.

Variables (per request ``i`` and batch ``j``, ``j = 0`` the initial state), as in §5:
``S_ij`` (prompt + generated tokens after batch j, ``S_i0 = I_i``), ``m_ij`` (tokens in the KV
cache after batch j, ``m_i0 = 0``), ``c_ij`` (tokens processed in batch j), ``g_ij`` (a token is
generated) and ``e_ij`` (evicted at batch j). Constraints:

* termination ``Σ_j g_ij = O_i`` (O includes the last token);
* sequence length ``S_ij = S_i,j-1 + g_ij``;
* memory, Eq. (1): ``m_ij = 0`` if evicted, else ``m_i,j-1 + c_ij`` — and 0 once the request has
  finished (its KV is freed after its last batch; the paper leaves this implicit);
* tokens to process, Eq. (2): ``c_ij = 0`` if evicted, else ``c_ij <= S_i,j-1 - m_i,j-1``;
* token generation, Eq. (3): ``g_ij = 1`` iff ``c_ij >= 1`` and ``c_ij = S_i,j-1 - m_i,j-1``;
* batch constraints, Eq. (4): ``Σ_i c_ij <= C`` and ``Σ_i (m_i,j-1 + c_ij) <= M`` (the KV held
  *while* batch j runs, finishing requests included — what the engine allocates);
* where the paper is silent (its CSP code is not public): ``u_j = [batch j non-empty]`` with
  ``u_j >= u_j+1``, bias terms paid only by non-empty batches; ``J`` from the warm-start
  heuristic (plus slack).

Conditional constraints are posted with CP-SAT enforcement literals rather than Big-M (the
paper's Eq. (5) linearisation for Gurobi); they are equivalent. The objective is the total
latency ``Σ_j T_j`` under the §3.2 cost model (``llmsched_gym.cost.infermax``) with integer
coefficients in picoseconds (relative rounding < 1e-3); ``c²`` and ``c·m`` are CP-SAT integer
products. An item with ``c = 1`` is costed as a decode and ``c >= 2`` as a prefill chunk, like the
engine. The ``P`` constraint is left out (the §5.1 experiment has ``P = C``).

Warm start (§5: "initialize the variables with outputs from other schedulers"): the schedule of
a heuristic run of the engine (:func:`~llmsched_gym.policies.infermax.warm_start.
heuristic_schedule`, which simulates and so sits on the simulation floor) becomes the solver's
hint.
A time limit bounds the search; the result reports the incumbent, CP-SAT's lower bound and the
relative gap.

The module imports ``ortools`` lazily: install the ``bounds`` extra (``pip install
llmsched-gym[bounds]``). :func:`brute_force_optimum` (a Dijkstra search over schedule states) is a
solver-free reference for tiny instances.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmsched_gym.cost.base import items_step_time
from llmsched_gym.cost.infermax import InferMaxCostModel
from llmsched_gym.errors import ConfigError

__all__ = [
    "CSPResult",
    "Instance",
    "batch_cost",
    "brute_force_optimum",
    "schedule_latency",
    "solve_csp",
]

_PS_PER_MS = 1e9


@dataclass(frozen=True)
class Instance:
    """An offline instance: prompt and output sizes, KV capacity M and token budget C."""

    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    M: int
    C: int = 4096

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.outputs) or not self.inputs:
            raise ConfigError("inputs and outputs must be non-empty and of equal length")
        for i, o in zip(self.inputs, self.outputs, strict=True):
            if i < 1 or o < 1 or i + o - 1 > self.M:
                raise ConfigError(f"request (I={i}, O={o}) cannot fit M={self.M}")


Schedule = list[tuple[dict[int, int], list[int]]]
"""Per batch: ({request index: tokens processed}, [request indices evicted before it])."""


def batch_cost(model: InferMaxCostModel, items: Sequence[tuple[int, int]]) -> float:
    """Seconds of a batch of ``(c, m)`` items (``m`` = KV before it), exact ``Σ_p m``."""
    if not any(c for c, _ in items):
        return 0.0
    return items_step_time(model, items)


def schedule_latency(inst: Instance, schedule: Schedule, model: InferMaxCostModel) -> dict:
    """Replay a schedule, check it against the constraints, and cost it.

    Returns:
        ``latency_s``, ``num_batches``, ``num_evictions`` (of requests holding KV), per-request
        ``finish_s``.

    Raises:
        ConfigError: If the schedule violates a constraint or leaves a request unfinished.
    """
    n = len(inst.inputs)
    S = list(inst.inputs)
    m = [0] * n
    gen = [0] * n
    finish = [0.0] * n
    t = 0.0
    evictions = 0
    for j, (items, evicted) in enumerate(schedule):
        for i in evicted:
            if m[i] > 0:
                evictions += 1
            m[i] = 0
        if sum(items.values()) > inst.C:
            raise ConfigError(f"batch {j}: more than C tokens")
        if sum(m[i] + items.get(i, 0) for i in range(n) if gen[i] < inst.outputs[i]) > inst.M:
            raise ConfigError(f"batch {j}: KV exceeds M")
        costed = []
        for i, c in items.items():
            if gen[i] >= inst.outputs[i] or not 1 <= c <= S[i] - m[i]:
                raise ConfigError(f"batch {j}: request {i} cannot process {c} tokens")
            costed.append((c, m[i]))
        t += batch_cost(model, costed)
        for i, c in items.items():
            m[i] += c
            if m[i] == S[i]:
                S[i] += 1
                gen[i] += 1
                if gen[i] == inst.outputs[i]:
                    finish[i] = t
                    m[i] = 0
    if gen != list(inst.outputs):
        raise ConfigError("schedule leaves requests unfinished")
    return {
        "latency_s": t,
        "num_batches": len(schedule),
        "num_evictions": evictions,
        "finish_s": finish,
    }


@dataclass
class CSPResult:
    """What :func:`solve_csp` found."""

    status: str
    """``OPTIMAL``, ``FEASIBLE`` (time limit hit) or ``INFEASIBLE``/``UNKNOWN``."""
    latency_s: float
    """Float latency of the incumbent, re-costed exactly with the cost model."""
    lower_bound_s: float
    """CP-SAT's proven lower bound (integer-picosecond model)."""
    gap: float
    """Relative gap ``(incumbent - bound) / incumbent`` of the integer model."""
    num_batches: int
    num_evictions: int
    schedule: Schedule = field(repr=False)
    warm_start_latency_s: float | None = None
    wall_s: float = 0.0


@dataclass(frozen=True)
class _Coefficients:
    """§3.2's coefficients as integer picoseconds per batch (all layers), for CP-SAT."""

    a_o: int
    b_o: int
    a_d: int
    b_d: int
    s_d: int
    a_p: int
    b_p: int
    s_p: int
    m_p: int

    @classmethod
    def of(cls, model: InferMaxCostModel) -> _Coefficients:
        """Rounded ``coefficient x layers`` in picoseconds (relative rounding < 1e-3)."""
        k = model.coef
        names = ("a_o", "b_o", "a_d", "b_d", "s_d", "a_p", "b_p", "s_p", "m_p")
        return cls(**{name: round(getattr(k, name) * k.num_layers * _PS_PER_MS) for name in names})


@dataclass
class _Model:
    """The CP-SAT model under construction: per-request state after each batch, and bounds."""

    cm: Any
    inst: Instance
    k: _Coefficients
    S: list[list[Any]]
    """``S[i][j]``: prompt + generated tokens of request i after batch j."""
    m: list[list[Any]]
    """``m[i][j]``: its KV tokens after batch j."""
    done: list[list[Any]]
    """``done[i][j]``: finished by the end of batch j."""
    c: dict = field(default_factory=dict)
    g: dict = field(default_factory=dict)
    e: dict = field(default_factory=dict)
    dec_ub: int = 0
    pre_ub: int = 0
    t_ub: int = 0

    @classmethod
    def new(cls, cp_model: Any, inst: Instance, k: _Coefficients) -> _Model:
        """The initial state (``S_i0 = I_i``, ``m_i0 = 0``) and the batch-time bounds."""
        cm = cp_model.CpModel()
        n = len(inst.inputs)
        model = cls(
            cm,
            inst,
            k,
            S=[[cm.NewConstant(inst.inputs[i])] for i in range(n)],
            m=[[cm.NewConstant(0)] for i in range(n)],
            done=[[cm.NewConstant(0)] for i in range(n)],
        )
        cmaxs = [min(inst.C, x) for x in model.smax]
        att_ub = sum(x * x + 2 * x * inst.M for x in cmaxs)
        model.dec_ub = k.a_d * n * inst.M + k.b_d
        model.pre_ub = k.a_p * att_ub + k.b_p
        t_ub = 10 * (
            k.a_o * inst.C
            + k.b_o
            + model.dec_ub
            + k.s_d * n
            + model.pre_ub
            + k.s_p * n
            + k.m_p * n * inst.M
        )
        model.t_ub = t_ub + model.dec_ub + model.pre_ub
        return model

    @property
    def smax(self) -> list[int]:
        """``I + O`` per request (its final sequence length)."""
        return [i + o for i, o in zip(self.inst.inputs, self.inst.outputs, strict=True)]

    def add_item(self, i: int, j: int, smax: int, f: dict[str, list]) -> None:
        """Request i in batch j: Eq. (1)-(3), its phase, and its cost features into ``f``."""
        cm, inst = self.cm, self.inst
        Sp, mp, dp = self.S[i][j - 1], self.m[i][j - 1], self.done[i][j - 1]
        cij = cm.NewIntVar(0, min(inst.C, smax), f"c{i}_{j}")
        gij = cm.NewBoolVar(f"g{i}_{j}")
        eij = cm.NewBoolVar(f"e{i}_{j}")
        dij = cm.NewBoolVar(f"d{i}_{j}")
        pij = cm.NewBoolVar(f"p{i}_{j}")
        self.c[i, j], self.g[i, j], self.e[i, j] = cij, gij, eij
        rem = cm.NewIntVar(0, smax, f"r{i}_{j}")
        cm.Add(rem == Sp - mp)
        # (2) tokens to process; finished requests process nothing.
        cm.Add(cij == 0).OnlyEnforceIf(eij)
        cm.Add(cij == 0).OnlyEnforceIf(dp)
        cm.Add(cij <= rem)
        # (3) token generation
        cm.Add(cij == rem).OnlyEnforceIf(gij)
        cm.Add(cij >= 1).OnlyEnforceIf(gij)
        cm.Add(cij <= rem - 1).OnlyEnforceIf(gij.Not(), dp.Not())
        cm.AddImplication(gij, eij.Not())
        # phase of the item for the cost model: c == 1 decode, c >= 2 prefill chunk
        cm.Add(cij == 1).OnlyEnforceIf(dij)
        cm.Add(cij != 1).OnlyEnforceIf(dij.Not())
        cm.Add(cij >= 2).OnlyEnforceIf(pij)
        cm.Add(cij <= 1).OnlyEnforceIf(pij.Not())
        # sequence length
        Sij = cm.NewIntVar(inst.inputs[i], smax, f"S{i}_{j}")
        cm.Add(Sij == Sp + gij)
        # termination bookkeeping: done after batch j iff O_i tokens generated
        gen = cm.NewIntVar(0, inst.outputs[i], f"gen{i}_{j}")
        cm.Add(gen == Sij - inst.inputs[i])
        dij_next = cm.NewBoolVar(f"done{i}_{j}")
        cm.Add(gen == inst.outputs[i]).OnlyEnforceIf(dij_next)
        cm.Add(gen <= inst.outputs[i] - 1).OnlyEnforceIf(dij_next.Not())
        # KV held while batch j runs (finishing requests included), then (1)
        held = cm.NewIntVar(0, inst.M, f"h{i}_{j}")
        cm.Add(held == 0).OnlyEnforceIf(eij)
        cm.Add(held == mp + cij).OnlyEnforceIf(eij.Not())
        mij = cm.NewIntVar(0, inst.M, f"m{i}_{j}")
        cm.Add(mij == 0).OnlyEnforceIf(dij_next)
        cm.Add(mij == held).OnlyEnforceIf(dij_next.Not())
        self.S[i].append(Sij)
        self.m[i].append(mij)
        self.done[i].append(dij_next)
        f["mem"].append(held)
        f["tok"].append(cij)
        f["nd"].append(dij)
        f["np"].append(pij)
        # cost features: decode KV read (m before), prefill attention c^2 + 2mc, prefill KV
        dkv = cm.NewIntVar(0, inst.M, f"dkv{i}_{j}")
        cm.Add(dkv == mp).OnlyEnforceIf(dij)
        cm.Add(dkv == 0).OnlyEnforceIf(dij.Not())
        f["dkv"].append(dkv)
        cmax = min(inst.C, smax)
        c2 = cm.NewIntVar(0, cmax * cmax, f"c2{i}_{j}")
        cm.AddMultiplicationEquality(c2, [cij, cij])
        cmp_ = cm.NewIntVar(0, cmax * inst.M, f"cm{i}_{j}")
        cm.AddMultiplicationEquality(cmp_, [cij, mp])
        att = cm.NewIntVar(0, cmax * cmax + 2 * cmax * inst.M, f"att{i}_{j}")
        cm.Add(att == c2 + 2 * cmp_).OnlyEnforceIf(pij)
        cm.Add(att == 0).OnlyEnforceIf(pij.Not())
        f["attn"].append(att)
        pkv = cm.NewIntVar(0, inst.M, f"pkv{i}_{j}")
        cm.Add(pkv == mp).OnlyEnforceIf(pij)
        cm.Add(pkv == 0).OnlyEnforceIf(pij.Not())
        f["pkv"].append(pkv)
        f["use"].append(cij)

    def batch_time(self, j: int, f: dict[str, list], u: Any) -> Any:
        """``10 T_j`` in picoseconds (§3.2; the 1.1 factors as +10% of the attention terms)."""
        cm, k = self.cm, self.k
        nd, np_ = sum(f["nd"]), sum(f["np"])
        any_d, many_d = cm.NewBoolVar(f"ad{j}"), cm.NewBoolVar(f"md{j}")
        any_p, many_p = cm.NewBoolVar(f"ap{j}"), cm.NewBoolVar(f"mp{j}")
        for flag, expr, lo in ((any_d, nd, 1), (many_d, nd, 2), (any_p, np_, 1), (many_p, np_, 2)):
            cm.Add(expr >= lo).OnlyEnforceIf(flag)
            cm.Add(expr <= lo - 1).OnlyEnforceIf(flag.Not())
        dkv_sum, att_sum = sum(f["dkv"]), sum(f["attn"])
        dec_core = cm.NewIntVar(0, self.dec_ub, f"dcore{j}")
        cm.Add(dec_core == k.a_d * dkv_sum + k.b_d).OnlyEnforceIf(any_d)
        cm.Add(dec_core == 0).OnlyEnforceIf(any_d.Not())
        pre_core = cm.NewIntVar(0, self.pre_ub, f"pcore{j}")
        cm.Add(pre_core == k.a_p * att_sum + k.b_p).OnlyEnforceIf(any_p)
        cm.Add(pre_core == 0).OnlyEnforceIf(any_p.Not())
        dec_x = cm.NewIntVar(0, self.dec_ub, f"dx{j}")
        cm.Add(dec_x == dec_core).OnlyEnforceIf(many_d)
        cm.Add(dec_x == 0).OnlyEnforceIf(many_d.Not())
        pre_x = cm.NewIntVar(0, self.pre_ub, f"px{j}")
        cm.Add(pre_x == pre_core).OnlyEnforceIf(many_p)
        cm.Add(pre_x == 0).OnlyEnforceIf(many_p.Not())
        # 10·T_j to keep the 0.1 factors integral
        t10 = cm.NewIntVar(0, self.t_ub, f"t{j}")
        cm.Add(
            t10
            == 10 * (k.a_o * sum(f["tok"]) + k.b_o * u)
            + 10 * dec_core
            + dec_x
            + 10 * k.s_d * nd
            + 10 * pre_core
            + pre_x
            + 10 * k.s_p * np_
            + 10 * k.m_p * sum(f["pkv"])
        )
        return t10

    def add_batches(self, J: int) -> list[Any]:
        """Batches 1..J: their items, Eq. (4), the non-empty prefix ``u``; their times."""
        cm, inst = self.cm, self.inst
        smax = self.smax
        cost_terms = []
        u_prev = None
        for j in range(1, J + 1):
            f: dict[str, list] = {
                k: [] for k in ("tok", "dkv", "attn", "pkv", "use", "nd", "np", "mem")
            }
            for i in range(len(inst.inputs)):
                self.add_item(i, j, smax[i], f)
            # (4) batch constraints
            cm.Add(sum(f["tok"]) <= inst.C)
            cm.Add(sum(f["mem"]) <= inst.M)
            u = cm.NewBoolVar(f"u{j}")
            cm.Add(sum(f["use"]) >= 1).OnlyEnforceIf(u)
            cm.Add(sum(f["use"]) == 0).OnlyEnforceIf(u.Not())
            if u_prev is not None:
                cm.AddImplication(u, u_prev)
            u_prev = u
            cost_terms.append(self.batch_time(j, f, u))
        return cost_terms

    def finish(self, J: int, allow_evictions: bool) -> None:
        """Termination, the eviction switch and symmetry breaking."""
        cm, inst = self.cm, self.inst
        n = len(inst.inputs)
        smax = self.smax
        for i in range(n):
            cm.Add(self.S[i][J] == smax[i])  # termination: Σ_j g_ij = O_i
        if not allow_evictions:
            for var in self.e.values():
                cm.Add(var == 0)
        # Symmetry breaking: identical requests are interchangeable, so relabel them by finish
        # order (request i finishes no later than the next identical one).
        for i in range(n - 1):
            if (inst.inputs[i], inst.outputs[i]) == (inst.inputs[i + 1], inst.outputs[i + 1]):
                for j in range(1, J + 1):
                    cm.AddImplication(self.done[i + 1][j], self.done[i][j])

    def schedule(self, solver: Any, J: int) -> Schedule:
        """The solved schedule (empty batches left out)."""
        n = len(self.inst.inputs)
        c, e, m = self.c, self.e, self.m
        sched: Schedule = []
        for j in range(1, J + 1):
            items = {i: solver.Value(c[i, j]) for i in range(n) if solver.Value(c[i, j]) > 0}
            ev = [i for i in range(n) if solver.Value(e[i, j]) and solver.Value(m[i][j - 1]) > 0]
            if items or ev:
                sched.append((items, ev))
        return sched


def solve_csp(
    inst: Instance,
    model: InferMaxCostModel | None = None,
    *,
    warm_start: Schedule | None = None,
    num_batches: int | None = None,
    slack: int = 2,
    time_limit_s: float = 20.0,
    num_workers: int = 2,
    seed: int = 0,
    allow_evictions: bool = True,
) -> CSPResult:
    """Minimise the total latency of ``inst`` (§5) with CP-SAT.

    Args:
        inst: The instance.
        model: Cost model (default ``infermax:llama-2-7b``).
        warm_start: A feasible schedule used as the hint (e.g.
            :func:`~llmsched_gym.policies.infermax.warm_start.heuristic_schedule`).
        num_batches: ``J``; default: the warm start's batches + ``slack`` (or an upper bound).
        slack: Extra batches beyond the warm start's.
        time_limit_s: Solver time limit.
        num_workers: CP-SAT search workers.
        seed: CP-SAT random seed.
        allow_evictions: False forces every ``e_ij = 0`` (the best eviction-free schedule); a
            warm start with evictions is then dropped.

    Raises:
        ImportError: If ``ortools`` is not installed (extra ``bounds``).
    """
    import time

    from ortools.sat.python import cp_model

    model = model or InferMaxCostModel("llama-2-7b")
    if num_batches is None:
        if warm_start is not None:
            num_batches = len(warm_start) + slack
        else:
            num_batches = sum(inst.outputs) + len(inst.inputs)  # every request alone
    J = num_batches
    csp = _Model.new(cp_model, inst, _Coefficients.of(model))
    cm = csp.cm
    cost_terms = csp.add_batches(J)
    csp.finish(J, allow_evictions)
    cm.Minimize(sum(cost_terms))
    warm_latency = None
    if warm_start is not None:
        warm = schedule_latency(inst, warm_start, model)
        if allow_evictions or warm["num_evictions"] == 0:
            warm_latency = warm["latency_s"]
            _hint(cm, inst, _relabel(inst, warm_start), csp.c, csp.e, csp.g, J)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_search_workers = num_workers
    solver.parameters.random_seed = seed
    t0 = time.perf_counter()
    problem = cm.Validate()
    if problem:
        raise ConfigError(f"internal CSP model error: {problem}")
    status = solver.Solve(cm)
    wall = time.perf_counter() - t0
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CSPResult(name, float("nan"), float("nan"), float("nan"), 0, 0, [], warm_latency)
    sched = csp.schedule(solver, J)
    rep = schedule_latency(inst, sched, model)
    obj, bound = solver.ObjectiveValue(), solver.BestObjectiveBound()
    scale = 10 * _PS_PER_MS * 1000.0  # 10·ps -> s
    return CSPResult(
        status=name,
        latency_s=rep["latency_s"],
        lower_bound_s=bound / scale,
        gap=(obj - bound) / obj if obj > 0 else 0.0,
        num_batches=rep["num_batches"],
        num_evictions=rep["num_evictions"],
        schedule=sched,
        warm_start_latency_s=warm_latency,
        wall_s=wall,
    )


def _relabel(inst: Instance, schedule: Schedule) -> Schedule:
    """Relabel identical requests by finish order (to agree with the symmetry breaking)."""
    fin = schedule_latency(inst, schedule, InferMaxCostModel("llama-2-7b"))["finish_s"]
    n = len(inst.inputs)
    perm = list(range(n))
    start = 0
    while start < n:
        end = start
        key = (inst.inputs[start], inst.outputs[start])
        while end + 1 < n and (inst.inputs[end + 1], inst.outputs[end + 1]) == key:
            end += 1
        group = sorted(range(start, end + 1), key=lambda i: (fin[i], i))
        for new, old in zip(range(start, end + 1), group, strict=True):
            perm[old] = new
        start = end + 1
    return [
        ({perm[i]: v for i, v in items.items()}, [perm[i] for i in ev]) for items, ev in schedule
    ]


def _hint(cm, inst: Instance, schedule: Schedule, c, e, g, J: int) -> None:
    """Hint c, e, g from a schedule (batches beyond it are empty)."""
    n = len(inst.inputs)
    S = list(inst.inputs)
    m = [0] * n
    for j in range(1, J + 1):
        items, ev = schedule[j - 1] if j - 1 < len(schedule) else ({}, [])
        for i in range(n):
            ci = items.get(i, 0)
            evicted = i in ev
            if evicted:
                m[i] = 0
            gen = int(ci > 0 and m[i] + ci == S[i])
            cm.AddHint(c[i, j], ci)
            cm.AddHint(e[i, j], int(evicted))
            cm.AddHint(g[i, j], gen)
            m[i] += ci
            if gen:
                S[i] += 1
                if S[i] == inst.inputs[i] + inst.outputs[i]:
                    m[i] = 0


def brute_force_optimum(inst: Instance, model: InferMaxCostModel | None = None) -> float:
    """Exact minimum total latency by Dijkstra over schedule states (tiny instances only).

    A state is, per request, ``(S, m)`` (finished requests ``(I + O, 0)``); a move is one batch:
    each unfinished request processes ``c in [0, S - m]`` tokens or is evicted (``m -> 0``),
    subject to C and M. Moves whose batch is empty are skipped (they cost nothing and change
    nothing).
    """
    import itertools

    model = model or InferMaxCostModel("llama-2-7b")
    final = tuple((i + o, 0) for i, o in zip(inst.inputs, inst.outputs, strict=True))
    start = tuple((i, 0) for i in inst.inputs)
    dist = {start: 0.0}
    heap = [(0.0, start)]
    while heap:
        d, state = heapq.heappop(heap)
        if state == final:
            return d
        if d > dist.get(state, float("inf")):
            continue
        options = []
        for i, (s, mm) in enumerate(state):
            if state[i] == final[i]:
                options.append([(0, False)])
                continue
            opts = [(cc, False) for cc in range(0, s - mm + 1)]
            if mm > 0:
                opts.append((0, True))
            options.append(opts)
        for choice in itertools.product(*options):
            if all(cc == 0 for cc, _ in choice):
                continue
            if sum(cc for cc, _ in choice) > inst.C:
                continue
            held = 0
            items = []
            nxt = []
            for i, (cc, ev) in enumerate(choice):
                s, mm = state[i]
                if state[i] == final[i]:
                    nxt.append(state[i])
                    continue
                mm = 0 if ev else mm
                held += mm + cc
                if cc:
                    items.append((cc, mm))
                mm += cc
                if mm == s:
                    s += 1
                    if s == final[i][0]:
                        mm = 0
                nxt.append((s, mm))
            if held > inst.M:
                continue
            nd = d + batch_cost(model, items)
            key = tuple(nxt)
            if nd < dist.get(key, float("inf")) - 1e-15:
                dist[key] = nd
                heapq.heappush(heap, (nd, key))
    raise ConfigError("no feasible schedule")
