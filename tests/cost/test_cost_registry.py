"""The registry of cost-model specs and the shipped profiles."""

from __future__ import annotations

import pytest
import yaml

from llmsched_gym.cost import (
    ConstantCostModel,
    CostModel,
    RooflineCostModel,
    list_profiles,
    load_cost_model,
    profile_info,
)
from llmsched_gym.cost.registry import ProfiledLinearCostModel
from llmsched_gym.errors import CostModelError

REQUIRED = [
    "vidur:llama-2-70b@a100-80gb/tp2",
    "vidur:llama-2-7b@a100-80gb/tp1",
    "vidur:llama-2-7b@h100-80gb/tp1",
    "vidur:llama-3-8b@a100-80gb/tp1",
    "vidur:llama-3-70b@a100-80gb/tp4",
]


def test_constant():
    model = load_cost_model("constant:1.0")
    assert isinstance(model, ConstantCostModel) and model.step_time(5, 0, 0, 1, 0) == 1.0
    with pytest.raises(CostModelError, match="constant:abc"):
        load_cost_model("constant:abc")
    with pytest.raises(CostModelError, match="> 0"):
        load_cost_model("constant:0")


def test_roofline_specs():
    model = load_cost_model("roofline:llama-2-70b@a100-80gb/tp2")
    assert isinstance(model, RooflineCostModel) and isinstance(model, CostModel)
    assert (model.model, model.gpu, model.tp) == ("llama-2-70b", "a100-80gb", 2)
    assert load_cost_model("roofline:Llama-2-7B@a100").tp == 1  # aliases, default TP
    with pytest.raises(CostModelError, match="roofline:llama-2-70b@a100-80gb/tp3"):
        load_cost_model("roofline:llama-2-70b@a100-80gb/tp3")
    with pytest.raises(CostModelError, match="did you mean 'h100"):
        load_cost_model("roofline:llama-2-7b@h10")
    with pytest.raises(CostModelError, match="does not parse"):
        load_cost_model("roofline:llama-2-7b")


def test_required_profiles_are_listed_and_load():
    names = list_profiles()
    assert set(REQUIRED) <= set(names)
    assert names == sorted(names)
    assert "roofline:llama-2-70b@a100-80gb/tp2" in list_profiles(include_roofline=True)


@pytest.mark.parametrize("name", list_profiles())
def test_every_shipped_profile_loads_with_provenance(name):
    model = load_cost_model(name)
    assert isinstance(model, ProfiledLinearCostModel) and model.name == name
    assert model.model and model.gpu and model.tp
    assert model.c0 > 0 and all(v >= 0 for v in model.coefficients().values())
    if name.startswith("vidur:"):
        assert "7d47513363ec447a741ac5e47241580b47724fbf" in model.source["data"]
        assert model.fit["heldout"]["mape_pct"] < 10.0
    else:  # measured on a GPU by `llmsched-gym calibrate --backend torch`
        assert name.startswith(("torch:", "torch-pw:"))
        assert model.source["hardware"]["gpu_name"] and model.source["hardware"]["torch"]
        assert 0 < model.fit["heldout"]["mape_pct"] < 100.0
    assert model.num_gpu_blocks(16, 0.9) > 0
    info = profile_info(name)
    assert (info.kind, info.model, info.gpu, info.tp) == (
        "piecewise" if name.startswith("torch-pw:") else "linear",
        model.model,
        model.gpu,
        model.tp,
    )
    # decode of one request is cheaper than a 2048-token prefill
    assert model.step_time(1, 0, 1000, 0, 1) < model.step_time(2048, 2048**2, 0, 1, 0)


def test_profile_names_accept_aliases():
    assert load_cost_model("vidur:Llama-2-70B@a100/tp2").name == "vidur:llama-2-70b@a100-80gb/tp2"


def test_profile_file_path(tmp_path):
    doc = {
        "kind": "linear",
        "name": "mine",
        "model": "llama-3-8b",
        "gpu": "h100",
        "tp": 1,
        "coefficients": {
            "c0": 0.005,
            "c_tokens": 1e-5,
            "c_prefill_attn": 1e-9,
            "c_decode_kv": 5e-8,
            "c_prefill": 0.0,
            "c_decode": 0.0,
        },
    }
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    model = load_cost_model(str(path))
    assert model.name == "mine" and model.gpu == "h100-80gb"
    assert model.step_time(10, 0, 0, 0, 10) == pytest.approx(0.005 + 1e-4)
    assert profile_info(str(path)).path == str(path)

    doc["coefficients"].pop("c_decode")
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CostModelError, match="coefficients must map exactly"):
        load_cost_model(str(path))
    with pytest.raises(CostModelError, match="does not exist"):
        load_cost_model(str(tmp_path / "nope.yaml"))


def test_unknown_spec_names_it_and_suggests():
    with pytest.raises(CostModelError) as err:
        load_cost_model("vidur:llama-2-70b@a100-80gb/tp8")
    msg = str(err.value)
    assert "'vidur:llama-2-70b@a100-80gb/tp8'" in msg
    assert "did you mean" in msg.lower() and "vidur:llama-2-70b@a100-80gb/tp2" in msg
    assert "constant:SECONDS" in msg and "roofline:" in msg


def test_profile_info_of_constant_and_roofline():
    assert profile_info("constant:0.5").kind == "constant"
    info = profile_info("roofline:qwen3-32b@h200")
    assert (info.model, info.gpu, info.tp) == ("qwen3-32b", "h200-141gb", 1)


def test_as_cost_model_is_the_one_place_a_spec_or_model_becomes_a_model():
    from llmsched_gym.cost.registry import as_cost_model

    model = as_cost_model("constant:0.02")
    assert model.step_time(1, 0, 0, 1, 0) == 0.02
    assert as_cost_model(model) is model
    with pytest.raises(CostModelError, match=r"instances\[2\]\.cost_model: expected a cost model"):
        as_cost_model(42, "instances[2].cost_model")
    with pytest.raises(CostModelError, match="constant needs a number"):
        as_cost_model("constant:fast")
