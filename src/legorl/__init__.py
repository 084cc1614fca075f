"""legorl: online RL for LLM coding agents."""

__version__ = "0.1.0"
