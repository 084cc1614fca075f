"""One Ray cluster for the whole `tests/cluster` package: three nodes started on this machine
(`ray.cluster_utils.Cluster`): a head node with resource `head` (driver, gateway, trainer ranks) and two
nodes with resource `rollout` (replicas, sandbox hosts). Starting Ray costs ~10 s per node here, so the
package's modules share it (tests/conftest.py keeps the package on one xdist worker);
`test_a_local_ray.py` sorts first because it checks the path where a run starts its own Ray."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1}})
    for _ in range(2):
        c.add_node(num_cpus=2, resources={"rollout": 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def local_ray(ray_cluster):
    """The `ray` module, connected to the package's cluster."""
    import ray

    return ray
