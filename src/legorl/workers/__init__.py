"""Workers: the trial lifecycle (sandbox -> proxy session -> scaffold -> verifier), concurrency,
failure outcomes, the trajectory filter, and `legorl eval` / `legorl infer`.

    worker = AgentLoopWorker(WorkerConfig(scaffold="builtin"), ProxyEndpoints(proxy))
    results = await worker.run_trials([TrialSpec(task, attempt=i) for i in range(4)], on_result=cb)
    rollouts, stats = TrajectoryFilter()(results)
"""

from legorl.workers.config import WorkerConfig
from legorl.workers.endpoints import DirectEndpoints, EndpointProvider, NoEndpoints, ProxyEndpoints
from legorl.workers.filter import FilterStats, TrajectoryFilter
from legorl.workers.rollouts import RolloutError, build_rollout
from legorl.workers.types import INFRA_OUTCOMES, Outcome, TrialResult, TrialSpec
from legorl.workers.worker import AgentLoopWorker, run_trials

__all__ = [
    "INFRA_OUTCOMES",
    "AgentLoopWorker",
    "DirectEndpoints",
    "EndpointProvider",
    "FilterStats",
    "NoEndpoints",
    "Outcome",
    "ProxyEndpoints",
    "RolloutError",
    "TrajectoryFilter",
    "TrialResult",
    "TrialSpec",
    "WorkerConfig",
    "build_rollout",
    "run_trials",
]
