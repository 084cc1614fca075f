"""Placement sections: the runtime (in-process or Ray) and where each role's actors go."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from legorl.config.base import Section


class RoleSection(Section):
    """Where one role's Ray actors go: the resources each actor asks for and how they spread over nodes."""

    num_cpus: float = Field(0.0, ge=0.0)
    """Logical CPUs each actor reserves (0: none; set it on a real cluster so Ray does not overpack a node)."""
    num_gpus: float = Field(0.0, ge=0.0)
    """GPUs each actor reserves (an engine replica or a trainer rank on a GPU node: 1)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom Ray resources each actor asks for, e.g. `{rollout = 1}` to keep the role on nodes started with
    `ray start --resources='{"rollout": 8}'`."""
    strategy: Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"] = "SPREAD"
    """The role's placement group strategy over its actors (one bundle per actor)."""


class ClusterSection(Section):
    """Placement of the run's roles (docs/cluster.md). `local`: everything in this process (and trainer ranks as
    its child processes). `ray`: every role is a Ray actor: `serving.n_replicas` engine replicas, `trainer.n_ranks`
    trainer ranks, `sandbox_hosts` hosts that run trials (their sandboxes and scaffolds), and one gateway (proxy,
    balancer, session scheduler) that scaffolds reach over HTTP; the driver only coordinates."""

    runtime: Literal["local", "ray"] = "local"
    """`local`: this process; `ray`: each role as Ray actors (docs/cluster.md)."""
    ray_address: str | None = None
    """An existing Ray cluster (`ray start --head` prints it; `auto`: the one this machine started last). None: the
    `RAY_ADDRESS` variable's cluster when it is set, else a private local Ray for the run, even when another cluster
    is up here (stopped after the run)."""
    bind_host: str = "127.0.0.1"
    """Address the gateway's proxy listens on. Multi-node: `0.0.0.0` (scaffolds on other nodes reach it at its node's
    IP); the single-node default keeps it on loopback."""
    proxy_port: int = Field(0, ge=0, le=65535)
    """The gateway proxy's port (0: any free one; fix it when a firewall between nodes must let it through)."""
    sandbox_hosts: int = Field(1, ge=1)
    """AgentLoopWorker actors; a step's trials are spread over them (least loaded first)."""
    max_restarts: int = Field(3, ge=0)
    """How often Ray restarts a dead engine replica or sandbox host (a replica rejoins with the current weights)."""
    weight_transport: Literal["object_store", "collective"] = "object_store"
    """How weight buckets reach the engine replicas. `object_store`: trainer rank 0 puts each bucket in Ray's object
    store and every replica's node fetches it (Ray's object manager). `collective`: rank 0 sends each bucket straight
    to every replica over a torch.distributed pair group (gloo on CPU, NCCL when the trainer is on a GPU: untested),
    one bucket on the wire while the next is gathered; a revived replica gets a fresh group and a full sync. Embedded
    replicas only (vLLM replicas need `object_store`)."""
    weight_sync_timeout_s: float = Field(60.0, gt=0.0)
    """With `weight_transport = "collective"`: the bound on every transfer operation (forming a replica's group,
    each bucket's send and receive). A replica that passes it, or dies mid-sync, is marked dead (routing stops
    sending to it), the sync goes on with the others, and it is revived with a full sync."""
    weight_delta: bool = False
    """With `weight_transport = "collective"`: send each replica that holds the last version only what changed
    since (lossless: the 16-bit words of each bucket that differ, as a bitmask or positions plus their values,
    whichever is smaller; a bucket whose delta is not smaller goes whole). The weights go in `serving.dtype`
    (the cast the replica's copy would do), so with `serving.dtype = "bfloat16"` the fp32 master weights' bf16
    copy is what is compared: there most elements are bitwise unchanged step to step at small learning rates,
    while in fp32 nearly every element changes (docs/cluster.md has the measured shares). A revived, added or
    lagging replica gets a full sync. Costs trainer rank 0 one more copy of the weights in host memory (the version
    it last sent). Not with a LoRA adapter. `weight_sync/bytes` logs the bytes sent to a replica,
    `weight_sync/delta_share` their share of the full weights."""
    engines: RoleSection = RoleSection()
    """Engine replica actors."""
    trainer: RoleSection = RoleSection(strategy="PACK")
    """Trainer rank actors (one torch.distributed group: gloo on CPU, NCCL on GPU)."""
    hosts: RoleSection = RoleSection()
    """Sandbox host actors."""
    gateway: RoleSection = RoleSection()
    """The gateway actor (proxy + balancer + session scheduler)."""
