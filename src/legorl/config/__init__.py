"""The typed run config: one section per component (`trials`, `serving`, `cluster`, `training`; the whole run
in `run`), read from TOML layers (`loading`)."""

from legorl.config.cluster import ClusterSection, RoleSection
from legorl.config.loading import (
    MOVED_KEYS,
    ConfigError,
    ConfigKeyMoved,
    load_config,
    merge_layers,
    site_config_path,
)
from legorl.config.run import RunConfig
from legorl.config.serving import SchedulerSection, ServingSection, VLLMSection
from legorl.config.training import AlgorithmSection, AsyncTrainingSection, TrainerSection, WarmStartSection
from legorl.config.trials import (
    AgentSection,
    ModelSection,
    RolloutSection,
    RunSection,
    SandboxSection,
    TasksSection,
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
    "RoleSection",
    "RolloutSection",
    "RunConfig",
    "RunSection",
    "SandboxSection",
    "SchedulerSection",
    "ServingSection",
    "TasksSection",
    "TrainerSection",
    "VLLMSection",
    "WarmStartSection",
    "load_config",
    "merge_layers",
    "site_config_path",
]
