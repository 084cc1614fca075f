"""The typed run config: one section per component (`sections`), read from TOML layers (`loading`)."""

from legorl.config.loading import (
    MOVED_KEYS,
    ConfigError,
    ConfigKeyMoved,
    load_config,
    merge_layers,
    site_config_path,
)
from legorl.config.sections import (
    AgentSection,
    AlgorithmSection,
    AsyncTrainingSection,
    ClusterSection,
    ModelSection,
    RolloutSection,
    RunConfig,
    RunSection,
    SandboxSection,
    SchedulerSection,
    ServingSection,
    TasksSection,
    TrainerSection,
    VLLMSection,
)

__all__ = [
    "MOVED_KEYS",
    "AgentSection",
    "AlgorithmSection",
    "AsyncTrainingSection",
    "ClusterSection",
    "ConfigError",
    "ConfigKeyMoved",
    "ModelSection",
    "RolloutSection",
    "RunConfig",
    "RunSection",
    "SandboxSection",
    "SchedulerSection",
    "ServingSection",
    "TasksSection",
    "TrainerSection",
    "VLLMSection",
    "load_config",
    "merge_layers",
    "site_config_path",
]
