"""Trials per hour and step time: in-process vs 1 vs 2 engine replica actors on a local 3-node Ray cluster;
and (`--weights`) the weight sync alone: object store vs collective transport, 1 and 2 replicas.

    .venv/bin/python bench/cluster.py [--config examples/demo.toml] [--steps 2] [--variants in-process,ray-1,ray-2]
                                      [--set key=value ...]
    .venv/bin/python bench/cluster.py --weights [--syncs 3] [--update-groups 8]

`--weights` starts the same 3-node cluster once and, per setting, the run's own pieces (`RayRuntime`, a
`RayTrainer` with one rank, the model of `--config`) and times `push_weights` (the path `legorl train` takes
after each update: pause, every bucket to every replica, resume) `--syncs` times; the first is a warm-up. The
delta settings (`cluster.weight_delta=true`) run one real update (`--update-groups` demo-shaped GRPO groups of
bench/train.py, the config's lr) before each timed sync, so each sends what one step changed; the full settings send the same
bytes whatever changed, so they skip it. It prints seconds, bytes sent per replica and MB/s per replica per
setting (the median of the timed syncs), then one line per collective setting, fastest first:
`collective weight sync: X s (N MB, R replicas)`.

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
    "ray-1-collective": [*RAY, "serving.n_replicas=1", "cluster.weight_transport=collective"],
    "ray-2-collective": [*RAY, "serving.n_replicas=2", "serving.threads_per_replica=1",
                         "cluster.weight_transport=collective"],
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


_SYNC_CHILD = r"""
import asyncio, json, statistics, sys, tempfile
import ray
from ray.cluster_utils import Cluster
from legorl.config import load_config
from legorl.rundir import RunDir
from legorl.train.loop import start_runtime, start_trainer
from legorl.train.steps import push_weights
from legorl.serving.weight_sync import WeightSync
from legorl.models.store import resolve_model
from legorl.train.steps import learn
from types import SimpleNamespace
from transformers import AutoConfig
sys.path.insert(0, sys.argv[4])
from train import grouped_batch
update_groups = int(sys.argv[5])

config, syncs, settings = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"head": 1},
                                                        "object_store_memory": 1_500_000_000})
for _ in range(2):
    cluster.add_node(num_cpus=2, resources={"rollout": 1}, object_store_memory=1_500_000_000)
cluster.wait_for_nodes()
ray.init(address=cluster.address, log_to_driver=False)

async def one(overrides):
    cfg = load_config(config, overrides)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"output_dir": tmp})})
        if cfg.cluster.weight_delta:  # the bench batch's behaviour logprobs are placeholders: no rollout check
            cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"max_logprob_abs_diff": None})})
        run_dir = RunDir.of(cfg.run.output_dir, cfg.run.name)
        run_dir.root.mkdir(parents=True, exist_ok=True)
        runtime = await start_runtime(cfg, run_dir)
        trainer = None
        try:
            trainer = start_trainer(cfg, resolve_model(cfg.model.path))
            if hasattr(runtime, "attach_trainer"):
                runtime.attach_trainer(trainer)
            sync = WeightSync(runtime.engines)
            update = cfg.cluster.weight_delta
            if update:  # the demo's batch shape (bench/train.py)
                shape = SimpleNamespace(groups=update_groups, group_size=4, prompt=134, response=22, system=0)
                batch = grouped_batch(shape, AutoConfig.from_pretrained(resolve_model(cfg.model.path)).vocab_size)
            times, sent = [], []
            for i in range(syncs):
                if update and i > 0:
                    learn(trainer, batch)
                times.append(await push_weights(runtime, sync, trainer))
                sent.append(sync.last_bytes)
            health = await runtime.health()
            assert all(health["replicas"].values()) and set(health["versions"].values()) == {sync.version}, health
            return {"seconds": statistics.median(times[1:] or times), "all_s": times,
                    "bytes": statistics.median(sent[1:] or sent), "full_bytes": sync.last_full_bytes}
        finally:
            if trainer is not None:
                trainer.close()
            await runtime.close()

try:
    for name, overrides in settings.items():
        try:  # one setting failing (e.g. Ray's memory monitor killing an actor on a crowded machine) is reported
            print("RESULT " + json.dumps({"name": name, **asyncio.run(one(overrides))}), flush=True)
        except Exception as exc:
            print("RESULT " + json.dumps({"name": name, "error": repr(exc)[:300]}), flush=True)
finally:
    ray.shutdown()
    cluster.shutdown()
"""

SYNC_RAY = ["cluster.runtime=ray", "cluster.max_restarts=0", "trainer.n_ranks=1",
            'cluster.engines={resources={rollout=0.4},strategy="STRICT_SPREAD"}',
            'cluster.hosts={resources={rollout=0.4}}', 'cluster.trainer={resources={head=0.4}}',
            'cluster.gateway={resources={head=0.1}}', "serving.threads_per_replica=1"]
SYNC_SETTINGS = {f"{t}, {n} replica{'s' if n > 1 else ''}": [*SYNC_RAY, f"serving.n_replicas={n}",
                                                             f"cluster.weight_transport={t}"]
                 for t in ("object_store", "collective") for n in (1, 2)}
SYNC_SETTINGS.update({f"collective, {n} replica{'s' if n > 1 else ''}, delta": [
    *SYNC_SETTINGS[f"collective, {n} replica{'s' if n > 1 else ''}"], "cluster.weight_delta=true"] for n in (1, 2)})
SYNC_SETTINGS["collective, 1 replica, delta, bf16 replica"] = [*SYNC_SETTINGS["collective, 1 replica, delta"],
                                                               "serving.dtype=bfloat16"]


def run_weights(config: str, syncs: int, extra: list[str], update_groups: int = 8, only: str = "") -> None:
    import json
    import subprocess

    settings = {k: [*extra, *v] for k, v in SYNC_SETTINGS.items() if not only or k in only.split(";")}
    proc = subprocess.run([sys.executable, "-c", _SYNC_CHILD, config, str(syncs), json.dumps(settings),
                           str(Path(__file__).parent), str(update_groups)], capture_output=True, text=True)
    rows = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or len(rows) != len(settings):
        sys.exit(f"weight-sync bench failed (rc {proc.returncode}) after {[json.dumps(r) for r in rows]}:\n"
                 f"{proc.stderr[-4000:]}")
    for r in [r for r in rows if "error" in r]:
        print(f"{r['name']}: FAILED {r['error']}")
    rows = [r for r in rows if "error" not in r]
    print(f"{config}: weight sync, median of {max(syncs - 1, 1)} timed sync(s) after a warm-up")
    print(f"(MB: sent to each replica; delta settings: one real update on {update_groups} demo-shaped group(s) of 4 "
          "rows before each timed sync)")
    print(f"{'setting':40s} {'seconds':>9s} {'MB':>8s} {'of full':>8s} {'MB/s per replica':>17s}  all syncs (s)")
    for r in rows:
        mb = r["bytes"] / 1e6
        print(f"{r['name']:40s} {r['seconds']:9.2f} {mb:8.0f} {r['bytes'] / r['full_bytes']:8.2f} "
              f"{mb / r['seconds']:17.0f}  " + ", ".join(f"{t:.2f}" for t in r["all_s"]))
    obj = {r["name"].split(", ")[1]: r["seconds"] for r in rows if r["name"].startswith("object_store")}
    for r in sorted((r for r in rows if r["name"].startswith("collective")), key=lambda r: r["seconds"]):
        _, n, *rest = r["name"].split(", ")
        note = f" [{', '.join(rest)}: {r['bytes'] / r['full_bytes']:.0%} of {r['full_bytes'] / 1e6:.0f} MB]" \
            if rest else " [full]"
        print(f"collective weight sync: {r['seconds']:.2f} s ({r['bytes'] / 1e6:.0f} MB, {n}){note}; "
              + (f"object store {obj[n]:.2f} s ({obj[n] / r['seconds']:.1f}x)" if n in obj else "object store: -"))


def run_variant(config: str, overrides: list[str], steps: int, out_dir: str) -> dict:
    return demo_step.run_variant(config, overrides, steps, out_dir, child=_CHILD)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/demo.toml")
    ap.add_argument("--variants", default="in-process,ray-1,ray-2")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="key=value for every variant (repeatable)")
    ap.add_argument("--weights", action="store_true", help="time the weight sync alone, per transport")
    ap.add_argument("--syncs", type=int, default=3)
    ap.add_argument("--update-groups", type=int, default=8, help="--weights: GRPO groups in each delta update")
    ap.add_argument("--settings", default="", help="--weights: these settings only (names, ';'-separated)")
    args = ap.parse_args()
    if args.weights:
        run_weights(args.config, args.syncs, args.set, args.update_groups, args.settings)
        return
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
