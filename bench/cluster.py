"""Trials per hour and step time: in-process vs 1 vs 2 engine replica actors on a local 3-node Ray cluster.

    .venv/bin/python bench/cluster.py [--config examples/demo.toml] [--steps 2] [--variants in-process,ray-1,ray-2]
                                      [--set key=value ...]

Each variant runs `train()` for `--steps` steps in a fresh process. The Ray variants start a 3-node
cluster on this machine (`ray.cluster_utils.Cluster`: a head node for the driver, gateway and trainer
rank, two rollout nodes with a replica and a sandbox host each); all nodes share the same cores as the
in-process variant, so the ratio is the cost of the actors, the object store and the extra processes
(Ray's own daemons included), not a scale-out gain. Reported from the last step: step time, rollout
time, trials per hour (trials of the step / step time), weight-sync seconds and bytes, and the tokens
the engines decoded (rollout time follows them: the variants sample different trials, replica seeds
differ). Each simulated node has its own object store, so a weight bucket crosses from the head node
to each rollout node over Ray's object manager (TCP), as between real machines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import demo_step  # bench/ is not a package: found through the path above

RAY = ["cluster.runtime=ray", "cluster.sandbox_hosts=2", "cluster.max_restarts=0",
       'cluster.engines={resources={rollout=0.4},strategy="SPREAD"}',
       'cluster.hosts={resources={rollout=0.4},strategy="STRICT_SPREAD"}',
       'cluster.trainer={resources={head=0.4}}', 'cluster.gateway={resources={head=0.1}}']
VARIANTS = {
    "in-process": [],
    "ray-1": [*RAY, "serving.n_replicas=1"],
    "ray-2": [*RAY, "serving.n_replicas=2", "serving.threads_per_replica=1"],
}

_CHILD = r"""
import asyncio, json, sys
from legorl.config import load_config
from legorl.train.loop import train
cfg = load_config(sys.argv[1], sys.argv[3:])
cluster = None
if cfg.cluster.runtime == "ray":
    import ray
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1}})
    for _ in range(2):
        cluster.add_node(num_cpus=2, resources={"rollout": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
try:
    history = asyncio.run(train(cfg, overwrite=True, on_line=lambda _l: None, progress=False))
finally:
    if cluster is not None:
        ray.shutdown()
        cluster.shutdown()
print("RESULT " + json.dumps(history[-1]))
"""

KEYS = ("timing/step_s", "timing/rollout_s", "timing/update_s", "timing/weight_sync_s", "weight_sync/bytes",
        "trials_per_hour", "budget/engine/decode_tokens", "budget/engine/decode_tok_s", "rollout/pass_rate")


def run_variant(config: str, overrides: list[str], steps: int, out_dir: str) -> dict:
    return demo_step.run_variant(config, overrides, steps, out_dir, child=_CHILD)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/demo.toml")
    ap.add_argument("--variants", default="in-process,ray-1,ray-2")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="key=value for every variant (repeatable)")
    args = ap.parse_args()
    from legorl.config import load_config

    rows = {}
    for name in args.variants.split(","):
        cfg = load_config(args.config, [*args.set, *VARIANTS[name]])
        trials = cfg.trainer.train_batch_size * cfg.algorithm.n_resp_per_prompt
        with tempfile.TemporaryDirectory() as tmp:
            row = run_variant(args.config, [*args.set, *VARIANTS[name]], args.steps, tmp)
        row["trials_per_hour"] = 3600.0 * trials / row["timing/step_s"]
        rows[name] = row
        print(f"  {name}: step {row['timing/step_s']:.1f} s", flush=True)
    names = list(rows)
    print(f"{args.config}: last of {args.steps} step(s); {' | '.join(names)}")
    for k in (*KEYS, "wall/process_s"):
        vals = [rows[n].get(k, float("nan")) for n in names]
        print(f"{k:32s} " + " | ".join(f"{v:12.4g}" for v in vals))
    base = rows[names[0]]["timing/step_s"]
    print("step time vs " + names[0] + ": " + " | ".join(f"{rows[n]['timing/step_s'] / base:.2f}x" for n in names))


if __name__ == "__main__":
    main()
