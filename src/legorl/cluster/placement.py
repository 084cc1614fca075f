"""Ray for a run: connect (or start a local cluster) and place each role's actors.

Each role (engine replicas, trainer ranks, sandbox hosts, the gateway) gets one placement group with a
bundle per actor, so an actor and what it allocates (a replica and its KV cache, a rank and its
GPU) land on one node, and the role's strategy spreads or packs them. A role that reserves nothing
(the CPU-only default: `num_cpus = 0`, no GPUs, no custom resources) needs no reservation: its
actors are scheduled with Ray's SPREAD / DEFAULT strategy instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from legorl.config.cluster import ClusterSection, RoleSection

PG_TIMEOUT_S = 120.0


class PlacementError(RuntimeError):
    """A role's actors cannot be placed (the cluster lacks the resources it asks for)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("cluster.runtime='ray' needs Ray: pip install 'legorl[ray]'") from None
    return ray


def connect(cluster: ClusterSection) -> bool:
    """Join `cluster.ray_address`, or start a local Ray; True when this call started it (stop it at the end)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = cluster.ray_address or os.environ.get("RAY_ADDRESS")  # RAY_ADDRESS: as `ray job submit` sets it
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    # "local", not None: with None Ray joins whichever cluster this machine started last (its /tmp/ray file, even a
    # dead one's), and then refuses num_cpus; a run without an address owns a private local Ray.
    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
    return True


def check_gateway_reachable(cluster: ClusterSection) -> None:
    """A loopback gateway cannot serve scaffolds on other machines: refuse to start rather than fail every trial."""
    ray = import_ray()
    if cluster.bind_host not in ("127.0.0.1", "localhost", "::1"):
        return
    ips = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")})
    if len(ips) > 1:
        raise PlacementError(
            f"cluster.bind_host={cluster.bind_host!r} but the Ray cluster spans {len(ips)} machines ({', '.join(ips)}): "
            "sandbox hosts there could not reach the gateway's proxy; set cluster.bind_host='0.0.0.0' (and open "
            "cluster.proxy_port between the nodes)")


def _bundle(role: RoleSection) -> dict[str, float]:
    b = {"CPU": role.num_cpus, "GPU": role.num_gpus, **role.resources}
    return {k: float(v) for k, v in b.items() if v}


@dataclass
class RolePlacement:
    """Where the `count` actors of one role go: `options(i)` are the `ray.remote` options of actor i."""

    name: str
    role: RoleSection
    count: int
    group: Any = None  # a Ray PlacementGroup, None when the role reserves nothing

    @classmethod
    def reserve(cls, name: str, role: RoleSection, count: int) -> RolePlacement:
        ray = import_ray()
        bundle = _bundle(role)
        if not bundle:
            return cls(name, role, count)
        from ray.util.placement_group import placement_group

        group = placement_group([dict(bundle) for _ in range(count)], strategy=role.strategy,
                                name=f"legorl-{name}")
        ready, _ = ray.wait([group.ready()], timeout=PG_TIMEOUT_S)
        if not ready:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(group)
            raise PlacementError(
                f"cluster: cannot place {count} {name} actor(s) of {bundle} each ({role.strategy}) within "
                f"{PG_TIMEOUT_S:.0f} s: the cluster has {ray.available_resources()}; lower cluster.{name}'s "
                "resources or add nodes")
        return cls(name, role, count, group)

    def options(self, index: int, **extra: Any) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": self.role.num_cpus, "num_gpus": self.role.num_gpus,
                                "resources": dict(self.role.resources), **extra}
        if self.group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self.group, placement_group_bundle_index=index)
        elif self.role.strategy in ("SPREAD", "STRICT_SPREAD"):
            opts["scheduling_strategy"] = "SPREAD"
        return opts

    def release(self) -> None:
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.group)
            except Exception:  # the cluster is already gone
                pass
            self.group = None
