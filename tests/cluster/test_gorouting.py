"""Each branch of GoRouting's instance selection (Alg. 2, code constants)."""

from __future__ import annotations

from llmsched_gym.cluster.gorouting import GoRouter


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
