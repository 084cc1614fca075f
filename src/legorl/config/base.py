"""The base of every run-config section: unknown keys refused, assignments validated, field docstrings kept.

Each component takes its own section (`StepTrainer(algorithm, trainer)`, the worker from `agent` +
`sandbox` + `rollout`), so a section says what one part needs and nothing else. Field docstrings
are the reference: `docs/configuration.md` is generated from them (`python -m legorl.config.docs`).
Knob names follow the field (verl/slime): `train_batch_size`, `n_resp_per_prompt`, `adv_estimator`...
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)
