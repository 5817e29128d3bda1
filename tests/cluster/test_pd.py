"""PD disaggregation: first token on the prefill instance, a visible KV transfer, decode elsewhere."""

from __future__ import annotations

import pytest

from llmsched_gym.cluster import InstanceSpec, run_cluster
from llmsched_gym.cluster.pd import decode_spec, kv_bytes_per_token
from llmsched_gym.core.request import RequestSpec
from llmsched_gym.cost.hardware import get_gpu, get_model
from llmsched_gym.errors import ConfigError

PD = {"kv_bytes_per_token": 1000, "link_gbps": 8.0}  # 1e9 bytes/s on one link


def insts(cost="constant:1.0", n_decode=1, blocks=200):
    out = [InstanceSpec("p", cost, {"num_gpu_blocks": blocks, "block_size": 16}, role="prefill")]
    out += [InstanceSpec(f"d{k}", cost, {"num_gpu_blocks": blocks, "block_size": 16},
                         role="decode") for k in range(n_decode)]  # fmt: skip
    return out


def test_one_request_timeline_by_hand() -> None:
    r = RequestSpec("r", 0.0, 100, 5, 5, prompt_token_ids=tuple(range(1, 101)))
    res = run_cluster([r], insts(), pd=PD)
    row = {k: v[0] for k, v in res.request_table.items()}
    xfer = 100 * 1000 / 1e9
    assert row["kv_transfer_s"] == pytest.approx(xfer)
    assert (row["prefill_instance_id"], row["instance_id"]) == (0, 1)
    assert row["first_token_time_s"] == 1.0  # one 1 s prefill step on the prefill instance
    assert row["ttft_s"] == 1.0
    # 4 more tokens, one per 1 s decode step, starting when the KV has arrived.
    assert row["finish_time_s"] == pytest.approx(1.0 + xfer + 4.0)
    assert row["num_output_tokens"] == 5 and row["num_prompt_tokens"] == 100
    assert row["num_computed_tokens"] == 100 + 4 and row["num_refill_tokens"] == 0
    assert row["tpot_s"] == pytest.approx((xfer + 4.0) / 4)
    inst = res.instances.set_index("name")
    assert inst.loc["p", "num_output_tokens"] == 1 and inst.loc["d0", "num_output_tokens"] == 4
    assert inst.loc["d0", "num_prompt_tokens"] == 1  # only the first token is computed there
    # The first inter-token gap (prefill instance -> decode instance) is an ITL sample.
    values, weights = res.itl
    assert sorted(values.tolist()) == pytest.approx(sorted([1.0 + xfer, 1.0, 1.0, 1.0]))


def test_transfer_time_from_model_and_gpu_data() -> None:
    cost = "roofline:llama-3.1-70b@a100-80gb/tp4"
    r = RequestSpec("r", 0.0, 1000, 3, 3)
    res = run_cluster([r], insts(cost, blocks=4000), pd={})
    m = get_model("llama-3.1-70b")
    per_token = m.num_hidden_layers * m.num_key_value_heads * m.head_dim * 2 * m.dtype_bytes
    assert kv_bytes_per_token("llama-3.1-70b") == per_token == 327680
    # TP4 + TP4 fit one 8-GPU NVLink domain: 4 links of NVLink, one direction each.
    bw = get_gpu("a100-80gb").nvlink_gbps_bidirectional * 1e9 / 2
    assert res.request_table["kv_transfer_s"][0] == pytest.approx(1000 * per_token / (4 * bw))
    res2 = run_cluster([r], insts(cost, blocks=4000), pd={"link_gbps": 100})
    assert res2.request_table["kv_transfer_s"][0] == pytest.approx(
        1000 * per_token / (4 * 100e9 / 8)
    )
    # TP8 + TP8 leave the NVLink domain: PCIe.
    cost8 = "roofline:llama-3.1-70b@a100-80gb/tp8"
    res3 = run_cluster([r], insts(cost8, blocks=4000), pd={})
    pcie = get_gpu("a100-80gb").pcie_gbps_bidirectional * 1e9 / 2
    assert res3.request_table["kv_transfer_s"][0] == pytest.approx(1000 * per_token / (8 * pcie))


def test_many_requests_exact_tokens_and_placement() -> None:
    items = [RequestSpec(f"r{i}", 0.1 * i, 30 + 11 * (i % 7), 1 + i % 13, 1 + i % 13)
             for i in range(50)]  # fmt: skip
    res = run_cluster(items, insts("constant:0.05", n_decode=3), pd=PD)
    t = res.request_table
    out = {r.request_id: r.output_len for r in items}
    assert dict(zip(t["request_id"].tolist(), t["num_output_tokens"].tolist())) == out
    multi = t["num_output_tokens"] > 1
    assert (t["prefill_instance_id"] == 0).all()
    assert set(t["instance_id"][multi].tolist()) == {1, 2, 3}  # spread over decode instances
    assert (t["instance_id"][~multi] == 0).all()  # a one-token request never leaves prefill
    assert (t["kv_transfer_s"][multi] > 0).all()
    assert (t["first_token_time_s"] + t["kv_transfer_s"] <= t["finish_time_s"])[multi].all()
    assert int(res.instances["num_output_tokens"].sum()) == sum(out.values())
    assert (t["num_refill_tokens"] == 0).all()


def test_both_role_instances_serve_whole_requests_next_to_pd() -> None:
    items = [RequestSpec(f"r{i}", 0.0, 40, 6, 6) for i in range(6)]
    spec = insts("constant:0.1") + [InstanceSpec("b", "constant:0.1", {"num_gpu_blocks": 200},
                                                 role="both")]  # fmt: skip
    res = run_cluster(items, spec, "round-robin", pd=PD)
    t = res.request_table
    whole = t["instance_id"] == 2
    assert whole.sum() == 3 and (t["prefill_instance_id"][whole] == 2).all()
    assert (t["kv_transfer_s"][whole] != t["kv_transfer_s"][whole]).all()  # NaN: no transfer


def test_pd_needs_kv_size_for_models_without_one() -> None:
    r = RequestSpec("r", 0.0, 10, 3, 3)
    with pytest.raises(ConfigError, match="pd.kv_bytes_per_token"):
        run_cluster([r], insts(), pd={"link_gbps": 10})
    with pytest.raises(ConfigError, match="needs at least one prefill and one decode"):
        run_cluster([r], insts()[:1])


def test_decode_continuation_keeps_fixed_generated_ids():
    """A request whose generated ids are fixed (a multi-turn parent) hands its first generated
    id to the decode instance, which generates the rest of the same ids."""
    spec = RequestSpec("p", 0.0, 3, 4, 4, prompt_token_ids=(1, 2, 3), output_token_ids=(7, 8, 9, 6))
    cont = decode_spec(spec, 2.0, token_id=-5)
    assert cont.prompt_token_ids == (1, 2, 3, 7)
    assert cont.output_token_ids == (8, 9, 6)
    assert (cont.prompt_len, cont.output_len, cont.max_tokens) == (4, 3, 3)
    plain = decode_spec(RequestSpec("q", 0.0, 3, 4, 4, prompt_token_ids=(1, 2, 3)), 2.0, -5)
    assert plain.prompt_token_ids == (1, 2, 3, -5) and plain.output_token_ids is None
