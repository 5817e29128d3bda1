"""vLLM's waiting queues: FCFS (a deque; preempted requests go to the front) and priority (a heap).

Both iterate in service order. Ties are broken by the arrival sequence number, never by object
identity, so runs are deterministic.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from itertools import islice

from llmsched_gym.core.request import Request

PriorityKey = Callable[[Request], tuple]


def vllm_priority_key(req: Request) -> tuple:
    """vLLM's ``Request.__lt__`` order: (priority, arrival_time, request_id)."""
    return (req.priority, req.arrival_time, req.request_id)


class FCFSQueue:
    """First come, first served; ``prepend`` puts a preempted request at the head."""

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def add(self, req: Request) -> None:
        """Append a new arrival."""
        self._q.append(req)

    def prepend(self, req: Request) -> None:
        """Put a preempted request at the head."""
        self._q.appendleft(req)

    def peek(self) -> Request:
        """The head."""
        return self._q[0]

    def pop(self) -> Request:
        """Remove and return the head."""
        return self._q.popleft()

    def remove(self, req: Request) -> None:
        """Remove a request wherever it is (O(n))."""
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)

    def first(self, k: int) -> list[Request]:
        """The first ``k`` requests in service order."""
        return list(islice(self._q, k))


class PriorityQueue:
    """A heap by ``key(req)`` then arrival sequence; ``prepend`` is a plain insert, as in vLLM."""

    def __init__(self, key: PriorityKey = vllm_priority_key) -> None:
        self._key = key
        self._heap: list[tuple[tuple, int, Request]] = []

    def add(self, req: Request) -> None:
        """Insert by priority."""
        heapq.heappush(self._heap, (self._key(req), req.seq, req))

    prepend = add

    def peek(self) -> Request:
        """The highest-priority request."""
        return self._heap[0][2]

    def pop(self) -> Request:
        """Remove and return the highest-priority request."""
        return heapq.heappop(self._heap)[2]

    def remove(self, req: Request) -> None:
        """Remove a request wherever it is (O(n))."""
        self._heap = [e for e in self._heap if e[2] is not req]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (e[2] for e in sorted(self._heap, key=_entry_order))

    def first(self, k: int) -> list[Request]:
        """The first ``k`` requests in service order (without sorting the whole heap)."""
        return [e[2] for e in heapq.nsmallest(k, self._heap, key=_entry_order)]


def _entry_order(entry: tuple[tuple, int, Request]) -> tuple[tuple, int]:
    return entry[0], entry[1]
