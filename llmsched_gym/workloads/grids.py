"""Offline grids: B requests at t = 0 with given input and output sizes (InferMax §4).

InferMax (Kim et al., EPFL, §4) analyses schedulers offline:
all B requests arrive before scheduling begins. §4.1–4.5 use fixed input size I and output size
O for every request (I, O from 1 to 1024, B = 32 and 1024); §4.6 mixes two of four groups with
``S = {8, 16}`` and ``L = {512, 1024}``:

* SISO: ``I ∈ S, O ∈ S``;  SILO: ``I ∈ S, O ∈ L``;
* LISO: ``I ∈ L, O ∈ S``;  LILO: ``I ∈ L, O ∈ L``;

"the requests in each workload are randomly shuffled, and the number of requests B varies from
16 to 1024" (infermax.txt, §4.6). The paper does not say how sizes are spread inside a group;
``infermax_mix`` splits B evenly between the two groups and, inside a group, evenly between the
four (I, O) combinations (earlier groups and combinations take the remainder), then shuffles
with the seed, so counts are exact and only the order is random.

>>> from llmsched_gym.workloads import infermax_mix, offline_batch
>>> specs = offline_batch(1024, input_len=512, output_len=32)
>>> mix = infermax_mix("LILO+SISO", 256, seed=0)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from llmsched_gym.core.request import RequestSpec

__all__ = [
    "INFERMAX_GROUPS",
    "INFERMAX_L",
    "INFERMAX_MIXES",
    "INFERMAX_S",
    "infermax_mix",
    "offline_batch",
    "offline_grid",
]

INFERMAX_S: tuple[int, ...] = (8, 16)
"""InferMax §4.6: the small sizes S."""
INFERMAX_L: tuple[int, ...] = (512, 1024)
"""InferMax §4.6: the large sizes L."""

INFERMAX_GROUPS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "SISO": (INFERMAX_S, INFERMAX_S),
    "SILO": (INFERMAX_S, INFERMAX_L),
    "LISO": (INFERMAX_L, INFERMAX_S),
    "LILO": (INFERMAX_L, INFERMAX_L),
}
"""Group name -> (input sizes, output sizes), InferMax §4.6."""

INFERMAX_MIXES: tuple[str, ...] = tuple(
    f"{a}+{b}" for a, b in itertools.combinations(INFERMAX_GROUPS, 2)
)
"""The six two-group workloads of InferMax Fig. 10-12."""


def _size(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _specs(sizes: Iterable[tuple[int, int]], id_prefix: str) -> list[RequestSpec]:
    return [
        RequestSpec(f"{id_prefix}{i}", 0.0, i_len, o_len, o_len)
        for i, (i_len, o_len) in enumerate(sizes)
    ]


def offline_batch(
    num_requests: int, input_len: int, output_len: int, *, id_prefix: str = "grid-"
) -> list[RequestSpec]:
    """``num_requests`` identical requests at t = 0 (InferMax §4.1: fixed I and O).

    Args:
        num_requests: B (>= 1).
        input_len: I, prompt tokens (>= 1).
        output_len: O, generated tokens including the last (>= 1).
        id_prefix: Request ids are ``f"{id_prefix}{i}"``.

    Raises:
        ValueError: If a size is not an int >= 1; the message names it.
    """
    b = _size("num_requests", num_requests)
    i_len, o_len = _size("input_len", input_len), _size("output_len", output_len)
    return _specs([(i_len, o_len)] * b, id_prefix)


def offline_grid(
    input_lens: Sequence[int], output_lens: Sequence[int], batch_sizes: Sequence[int]
) -> dict[tuple[int, int, int], list[RequestSpec]]:
    """Every offline batch of a grid, keyed ``(I, O, B)``.

    InferMax §4.1 sweeps I and O from 1 to 1024 with B in {32, 1024}.

    Request ids are ``grid-I<I>-O<O>-B<B>-<i>``.
    """
    grid = {}
    for i_len, o_len, b in itertools.product(input_lens, output_lens, batch_sizes):
        grid[(i_len, o_len, b)] = offline_batch(
            b, i_len, o_len, id_prefix=f"grid-I{i_len}-O{o_len}-B{b}-"
        )
    return grid


def _split(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal counts, the remainder to the first ones."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def infermax_mix(
    groups: str | Sequence[str],
    num_requests: int,
    *,
    seed: int = 0,
    shuffle: bool = True,
    id_prefix: str | None = None,
) -> list[RequestSpec]:
    """An InferMax §4.6 heterogeneous offline workload: B requests at t = 0, shuffled.

    Args:
        groups: ``"LILO+SISO"`` or ``["LILO", "SISO"]``: one or more of ``INFERMAX_GROUPS``.
        num_requests: B (the paper uses 16 to 1024).
        seed: Seed of the shuffle.
        shuffle: Shuffle the requests (the paper does); False keeps group order.
        id_prefix: Default ``"<groups>-"``, e.g. ``"LILO+SISO-7"``.

    Returns:
        B requests at t = 0; their order is the engine's arrival order.

    Raises:
        ValueError: For an unknown group name or a bad B; the message names the value.
    """
    names = groups.split("+") if isinstance(groups, str) else list(groups)
    if not names:
        raise ValueError("groups must name at least one of SISO, SILO, LISO, LILO")
    for name in names:
        if name not in INFERMAX_GROUPS:
            raise ValueError(
                f"groups: unknown InferMax group {name!r}; groups: {', '.join(INFERMAX_GROUPS)}"
            )
    b = _size("num_requests", num_requests)
    sizes: list[tuple[int, int]] = []
    for name, count in zip(names, _split(b, len(names)), strict=True):
        combos = list(itertools.product(*INFERMAX_GROUPS[name]))
        for combo, n in zip(combos, _split(count, len(combos)), strict=True):
            sizes.extend([combo] * n)
    if shuffle:
        order = np.random.default_rng(seed).permutation(len(sizes))
        sizes = [sizes[int(k)] for k in order]
    return _specs(sizes, f"{'+'.join(names)}-" if id_prefix is None else id_prefix)
