"""Workers: the trial lifecycle (sandbox -> proxy session -> scaffold -> verifier), concurrency,
failure outcomes, the trajectory filter, and `legorl eval` / `legorl infer`.

    worker = AgentLoopWorker(WorkerConfig(scaffold="builtin"), ProxyEndpoints(proxy))
    results = await worker.run_trials([TrialSpec(task, attempt=i) for i in range(4)], on_result=cb)
    kept, stats = TrajectoryFilter()(results)   # trials to train on
"""

from legorl.trial import INFRA_OUTCOMES, Outcome, TrialResult, TrialSpec, TrialTokens
from legorl.workers.config import WorkerConfig
from legorl.workers.endpoints import DirectEndpoints, EndpointProvider, NoEndpoints, ProxyEndpoints
from legorl.workers.filter import FilterStats, TrajectoryFilter
from legorl.workers.tokens import TokensError, trial_tokens
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
    "TokensError",
    "TrajectoryFilter",
    "TrialResult",
    "TrialSpec",
    "TrialTokens",
    "WorkerConfig",
    "run_trials",
    "trial_tokens",
]
