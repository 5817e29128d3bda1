"""Each branch of GoRouting's instance selection (Alg. 2, code constants)."""

from __future__ import annotations

from llmsched_gym.policies.proserve import GoRouter


def test_light_branch_picks_least_exec():
    r = GoRouter()
    i = r.select(
        {0: 1.0, 1: 1.0, 2: 0.5}, {0: 0.05, 1: 0.02, 2: 0.0}, {0: 0.3, 1: 0.3, 2: 0.2}, 1.0
    )
    assert (i, r.last["branch"]) == (1, "light")  # 2 is not a candidate (0.5 <= 0.9)


def test_pack_branch_picks_heaviest_feasible():
    r = GoRouter()
    i = r.select({0: 1.0, 1: 1.0, 2: 1.0}, {0: 0.2, 1: 0.5, 2: 0.7}, {0: 0.3, 1: 0.6, 2: 0.9}, 1.0)
    assert (i, r.last["branch"]) == (1, "pack")


def test_all_heavy_branch():
    r = GoRouter()
    i = r.select({0: 1.0, 1: 1.0}, {0: 0.9, 1: 0.85}, {0: 1.0, 1: 0.95}, 1.0)
    assert (i, r.last["branch"]) == (1, "all-heavy")


def test_fallbacks():
    r = GoRouter()
    assert r.select({0: 0.0, 1: -1.0}, {0: 3.0, 1: 2.0}, {0: 4.0, 1: 3.0}, 1.0) == 1
    assert r.last["branch"] == "fallback-least-exec"
    rr = GoRouter(fallback="random", seed=0)
    assert rr.select({0: 0.0, 1: 0.0}, {0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0}, 1.0) in (0, 1)
    assert rr.last["branch"] == "fallback-random"


def test_random_fallback_spreads_over_all_prefill_instances():
    # Alg. 2 line 19: RANDOMSELECT(P) over every instance, not the least-exec one (the code's).
    rr = GoRouter(fallback="random", seed=0)
    delta, pre, post = {0: -1.0, 1: 0.0, 2: -2.0}, {0: 0.5, 1: 0.1, 2: 0.9}, {0: 1, 1: 1, 2: 1}
    picks = [rr.select(delta, pre, post, 0.2) for _ in range(600)]
    shares = [picks.count(i) / len(picks) for i in range(3)]
    assert all(0.25 < s < 0.42 for s in shares), shares
    assert GoRouter().select(delta, pre, post, 0.2) == 1  # code: least pre-insertion exec
