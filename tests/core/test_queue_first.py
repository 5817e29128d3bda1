"""``first(k)`` of the waiting queues equals the first k of their service-order iteration."""

from __future__ import annotations

import random

from llmsched_gym.core.queues import FCFSQueue, PriorityQueue
from llmsched_gym.core.request import Request, RequestSpec


def test_first_k_is_the_iteration_prefix() -> None:
    rng = random.Random(0)
    reqs = [
        Request(RequestSpec(f"r{i}", rng.choice([0.0, 1.0, 2.0]), 8, 2, 2,
                            priority=rng.randint(0, 2)), i, 4)
        for i in range(40)
    ]  # fmt: skip
    for queue in (FCFSQueue(), PriorityQueue()):
        for r in reqs[:30]:
            queue.add(r)
        for r in reqs[30:]:
            queue.prepend(r)
        queue.remove(reqs[7])
        for k in (0, 1, 5, 16, 39, 100):
            assert queue.first(k) == list(queue)[:k]
