"""The `[cluster]` section without a Ray cluster: what a config may say, and the actor options a role gets."""

from __future__ import annotations

import pytest

from legorl.cluster.placement import RolePlacement, _bundle
from legorl.config import RunConfig
from legorl.config.cluster import RoleSection


@pytest.mark.parametrize("key,value", [("sandbox_hosts", 2), ("ray_address", "auto"), ("bind_host", "0.0.0.0"),
                                       ("engines", {"num_gpus": 1}), ("weight_transport", "collective")])
def test_ray_only_settings_are_refused_on_the_local_runtime(key, value):
    with pytest.raises(ValueError, match=f"cluster.{key} only applies with cluster.runtime='ray'"):
        RunConfig.model_validate({"cluster": {key: value}})
    RunConfig.model_validate({"cluster": {"runtime": "ray", key: value}})


def test_the_collective_weight_transport_is_for_embedded_replicas():
    with pytest.raises(ValueError, match=r"cluster\.weight_transport='collective'"):
        RunConfig.model_validate({"cluster": {"runtime": "ray", "weight_transport": "collective"},
                                  "serving": {"engine": "vllm"}})
    with pytest.raises(ValueError, match="weight_sync_timeout_s"):
        RunConfig.model_validate({"cluster": {"runtime": "ray", "weight_sync_timeout_s": 0}})


def test_weight_deltas_need_the_collective_transport_and_no_adapter():
    ray = {"runtime": "ray", "weight_transport": "collective", "weight_delta": True}
    RunConfig.model_validate({"cluster": ray, "trainer": {"dtype": "bfloat16"}, "serving": {"dtype": "bfloat16"}})
    RunConfig.model_validate({"cluster": ray, "serving": {"dtype": "bfloat16"}})  # a bf16 copy of fp32 weights
    for extra, match in [({"cluster": {**ray, "weight_transport": "object_store"}}, "needs cluster.weight_transport"),
                         ({"cluster": ray, "model": {"lora": {"rank": 8}}}, "LoRA"),
                         ({"cluster": {"weight_delta": True}}, "only applies with cluster.runtime='ray'")]:
        with pytest.raises(ValueError, match=match):
            RunConfig.model_validate(extra)


def test_a_local_config_survives_its_own_json():
    """Trainer ranks and actors rebuild the config from its JSON, where every field is set."""
    cfg = RunConfig()
    assert RunConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_a_role_that_reserves_nothing_is_spread_without_a_placement_group():
    role = RoleSection()
    assert _bundle(role) == {}
    opts = RolePlacement("hosts", role, 2).options(1, max_restarts=3)
    assert opts == {"num_cpus": 0.0, "num_gpus": 0.0, "resources": {}, "scheduling_strategy": "SPREAD",
                    "max_restarts": 3}
    packed = RolePlacement("trainer", RoleSection(strategy="PACK"), 2).options(0)
    assert "scheduling_strategy" not in packed


def test_a_role_bundle_holds_what_it_reserves():
    role = RoleSection(num_cpus=2, num_gpus=1, resources={"rollout": 0.5})
    assert _bundle(role) == {"CPU": 2.0, "GPU": 1.0, "rollout": 0.5}
