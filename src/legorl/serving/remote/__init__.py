"""A shared `legorl serve` as a training run's engine: the server's engine API (`api.py`), the run's client
(`engine.py`, `serving.engine = "remote"`) and what travels between them (`wire.py`)."""
