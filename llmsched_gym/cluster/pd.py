"""Prefill-decode (PD) disaggregation: the prefill copy, the KV transfer, the decode hand-off.

A request routed to a ``prefill`` instance runs there as a copy with ``output_len = max_tokens =
1``: its prompt and first token (the first token a user sees comes from the prefill instance, as
in ProServe's PD setting and DistServe). When that copy finishes at ``t``, the prompt's KV moves
to a ``decode`` instance, chosen by the decode router (default ``least-load:kv``: most free KV,
ProServe's ``get_min_load_decode_instance``), in ``transfer_s`` seconds. The request then joins
the decode instance at ``t + transfer_s`` as a continuation: its prompt is the original prompt
plus the first token, ``prompt_len`` tokens of it already computed (the transferred KV; the first
token's own KV is computed by the first decode step, which samples the second token), and it
generates the remaining ``output_len - 1`` tokens. See ``Engine.enqueue(..., computed_tokens=)``.

Transfer time: every tensor-parallel rank of the prefill instance sends its KV shard over its own
link, in parallel, so ``transfer_s = prompt_len * kv_bytes_per_token / (links * link_bytes_per_s)``
with ``kv_bytes_per_token = layers * kv_heads * head_dim * 2 * dtype_bytes`` (the whole model's
K and V of one token), ``links = min(tp_prefill, tp_decode)``, and one link's one-direction
bandwidth either ``link_gbps`` (Gbit/s, e.g. an RDMA NIC per GPU) or, by default, the slower
GPU's interconnect: NVLink when both instances fit in one NVLink domain
(``tp_prefill + tp_decode <= nvlink_max_gpus``), PCIe otherwise. Transfers do not contend for
links, and the decode instance reserves no blocks while the KV is in flight (simplifications).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from llmsched_gym.core.request import RequestSpec
from llmsched_gym.errors import ConfigError

__all__ = ["PDConfig", "decode_spec", "kv_bytes_per_token", "link_bytes_per_s", "prefill_spec"]


@dataclass(frozen=True)
class PDConfig:
    """Settings of PD disaggregation (the scenario's ``cluster.pd`` section)."""

    link_gbps: float | None = None
    """One GPU link's bandwidth in Gbit/s; None: from the GPUs' NVLink / PCIe data."""
    kv_bytes_per_token: int | None = None
    """Whole-model KV bytes of one token; None: from the prefill instance's model."""
    decode_router: str = "least-load:kv"
    """Router choosing the decode instance (default: most free KV)."""

    def __post_init__(self) -> None:
        if self.link_gbps is not None and not (
            isinstance(self.link_gbps, (int, float)) and 0 < self.link_gbps < float("inf")
        ):
            raise ConfigError(f"pd.link_gbps must be a number > 0, got {self.link_gbps!r}")
        if self.kv_bytes_per_token is not None and (
            isinstance(self.kv_bytes_per_token, bool)
            or not isinstance(self.kv_bytes_per_token, int)
            or self.kv_bytes_per_token < 1
        ):
            raise ConfigError(
                f"pd.kv_bytes_per_token must be an integer >= 1, got {self.kv_bytes_per_token!r}"
            )


def kv_bytes_per_token(model: str) -> int:
    """Whole-model K and V bytes of one token: ``layers * kv_heads * head_dim * 2 * dtype``."""
    from llmsched_gym.cost.hardware import get_model

    m = get_model(model)
    return m.num_hidden_layers * m.num_key_value_heads * m.head_dim * 2 * m.dtype_bytes


def link_bytes_per_s(gpu: str, tp_total: int) -> float:
    """One-direction bandwidth of one GPU's link to a peer (NVLink within a domain, else PCIe)."""
    from llmsched_gym.cost.hardware import get_gpu

    return get_gpu(gpu).link_bytes_per_s(tp_total)


def transfer_seconds(
    num_tokens: int, pd: PDConfig, prefill_model: Any, decode_model: Any, where: str = "pd"
) -> float:
    """Seconds to move ``num_tokens`` tokens of KV between two instances' cost models."""
    bytes_per_token = pd.kv_bytes_per_token
    if bytes_per_token is None:
        model = getattr(prefill_model, "model", None)
        if model is None:
            raise ConfigError(
                f"{where}: the prefill instance's cost model "
                f"{getattr(prefill_model, 'name', '?')!r}"
                " does not name its model, so KV bytes per token are unknown; set "
                "pd.kv_bytes_per_token"
            )
        bytes_per_token = kv_bytes_per_token(model)
    tp_p = getattr(prefill_model, "tp", None) or 1
    tp_d = getattr(decode_model, "tp", None) or 1
    links = min(tp_p, tp_d)
    if pd.link_gbps is not None:
        bw = pd.link_gbps * 1e9 / 8.0
    else:
        gpus = [getattr(prefill_model, "gpu", None), getattr(decode_model, "gpu", None)]
        if None in gpus:
            raise ConfigError(
                f"{where}: an instance's cost model does not name its GPU, so the link bandwidth "
                "is unknown; set pd.link_gbps"
            )
        bw = min(link_bytes_per_s(g, tp_p + tp_d) for g in gpus)
    return num_tokens * bytes_per_token / (links * bw)


def prefill_spec(spec: RequestSpec) -> RequestSpec:
    """The copy a prefill instance runs: the prompt and the first token only."""
    return dataclasses.replace(spec, output_len=1, max_tokens=1)


def decode_spec(spec: RequestSpec, arrival_time: float, token_id: int) -> RequestSpec:
    """The continuation a decode instance runs after the KV transfer.

    Its prompt is the original prompt plus the first generated token (``token_id``, unique per
    request so no other request shares the block holding it; the first of ``output_token_ids``
    when the request's generated ids are fixed); it generates the rest.
    """
    p = spec.prompt_len
    out = spec.output_token_ids
    if out is not None:
        token_id, out = out[0], out[1:]
    ids = None if spec.prompt_token_ids is None else (*spec.prompt_token_ids, token_id)
    hashes = spec.block_hashes
    if ids is None and hashes:
        # The prompt grows by one token: a Mooncake hash covering past the original prompt
        # would make a KV block holding the generated token look shareable; keep only hashes
        # lying wholly within the original prompt (fewer hits on the decode side, never false).
        hbs = spec.hash_block_size
        if len(hashes) * hbs > p:
            hashes = hashes[: p // hbs]
    return dataclasses.replace(
        spec,
        arrival_time=arrival_time,
        prompt_len=p + 1,
        prompt_token_ids=ids,
        block_hashes=hashes or None,
        output_len=spec.output_len - 1,
        max_tokens=spec.max_tokens - 1,
        output_token_ids=out,
    )
