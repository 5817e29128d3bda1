"""``InstanceView.backlog_s`` sums running requests inline: it equals the estimator on items."""

from __future__ import annotations

from llmsched_gym.cluster import estimate_backlog_s


def _items(e) -> list[tuple[int, int, int, int]]:
    """Every outstanding request's item, built as ``estimate_backlog_s`` documents them."""
    items = []
    for r in e.running:
        left = r.num_tokens - r.num_computed_tokens
        d = r.max_tokens - r.num_output_tokens
        if left > 1:
            items.append((left, r.num_computed_tokens, d - 1, r.num_tokens))
        else:
            items.append((0, 0, d, r.num_tokens - 1))
    for r in e.waiting:
        ext = r.num_external_tokens if r.num_output_tokens == 0 else 0
        items.append(
            (r.num_tokens - ext, ext, r.max_tokens - r.num_output_tokens - 1, r.num_tokens)
        )
    for s in e._pending[e._next_arrival :]:
        ext = e._external.get(s.request_id, 0)
        items.append((s.prompt_len - ext, ext, s.max_tokens - 1, s.prompt_len))
    return items


def test_view_backlog_equals_the_estimator_on_items() -> None:
    from llmsched_gym.envs.route_v0 import RouteEnv

    for scenario in ("chat-azure-conv-4x-v0", "pd-azure-conv-v0"):
        env = RouteEnv(scenario, scenario_overrides={"workload.limit": 120})
        env.reset(seed=0)
        done, checked = False, 0
        while not done:
            for x, v in zip(env.cluster.instances, env.views, strict=True):
                e = x.engine
                want = estimate_backlog_s(e.cost_model, _items(e), e.config.max_num_batched_tokens)
                assert v.backlog_s == want  # bitwise: the same float operations in order
                checked += bool(e.running)
            _, _, term, trunc, _ = env.step(env._candidates[0])
            done = term or trunc
        assert checked > 50
