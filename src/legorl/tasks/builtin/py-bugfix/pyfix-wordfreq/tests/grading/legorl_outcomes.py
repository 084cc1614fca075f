"""pytest plugin (loaded with `-p legorl_outcomes`): write each test's final outcome as JSON.

Copied into converted tasks' tests/ dir. Exact node ids from pytest's own reports avoid parsing
console output, whose format varies across pytest versions. Standard library only.
"""

import json
import os

_outcomes = {}


def pytest_runtest_logreport(report):
    current = _outcomes.get(report.nodeid)
    if report.failed:
        _outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped and current not in ("failed", "error"):
        _outcomes[report.nodeid] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.passed and report.when == "call" and current is None:
        _outcomes[report.nodeid] = "xpassed" if hasattr(report, "wasxfail") else "passed"


def pytest_collectreport(report):
    if report.failed:
        _outcomes[report.nodeid or "<collection>"] = "collection-error"


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("LEGORL_OUTCOMES", "outcomes.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"exitstatus": int(exitstatus), "tests": _outcomes}, f, indent=1, sort_keys=True)
