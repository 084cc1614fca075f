"""Harbor tasks as the field writes them, through the real `legorl eval` and `legorl tasks validate`.

The fixtures under harbor_tasks/ use today's schema the way Harbor's examples do: a Dockerfile with
apt-get / pip / useradd, per-phase network and users, env tables, a healthcheck, artifacts, a
verifier whose tool is missing, and one task too broken to load; and issue 30's features (FEATURES, plus
an image whose service never gets healthy).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from legorl.cli import app
from legorl.env import rootfs
from legorl.env.localbuild import cache_root

HERE = Path(__file__).parent / "harbor_tasks"
# issue 30: Docker ENV expansion, an ENTRYPOINT service + healthcheck, a server the agent leaves for
# test.sh, a separate verifier environment (oracle 1, no-op 0 each)
FEATURES = ("env-path-expansion", "entrypoint-service", "agent-server", "separate-verifier")
runner = CliRunner()
pytestmark = pytest.mark.skipif(not os.access("/usr/bin/bwrap", os.X_OK), reason="bubblewrap not installed")


def _trials(out: Path) -> dict[str, dict]:
    data = json.loads((out / "results.json").read_text())
    return {t["task_id"].split("/")[-1]: t for t in data["trials"]}


def test_validate_lists_every_problem_and_warns_on_unknown_keys() -> None:
    r = runner.invoke(app, ["tasks", "validate", str(HERE)])
    assert r.exit_code == 2
    assert "broken-schema/task.toml: [agent].timeout_sec must be a number" in r.output
    assert "broken-schema/task.toml: [environment].network_mode must be one of" in r.output
    assert "WARN " in r.output and "unknown key [environment].future_key" in r.output
    assert "2 problem(s) in 1 task(s); 8 valid task(s); 1 warning(s)" in r.output


def test_eval_oracle_and_noop_over_harbor_feature_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEGORL_BUILD_CACHE", str(tmp_path / "cache"))
    if os.geteuid() != 0 or not rootfs.available(cache_root()):
        pytest.skip("the apt/pip/useradd task needs root builds (root + overlayfs)")
    r = runner.invoke(app, ["eval", str(HERE), "--agent", "oracle", "-o", str(tmp_path / "oracle")])
    assert r.exit_code == 0, r.output
    assert "refused" in r.output and "broken-schema" in r.output  # reported, the others still ran
    got = _trials(tmp_path / "oracle")
    assert set(got) == {"apt-pip-user", "schema-features", "missing-verifier-tool", *FEATURES, "healthcheck-never-healthy"}
    offline = ("Temporary failure resolving", "Could not resolve", "Network is unreachable", "Failed to establish")
    if any(m in (got["apt-pip-user"].get("reason") or "") for m in offline):
        pytest.skip("apt/PyPI registries unreachable from this machine (the build needs them)")
    assert (got["apt-pip-user"]["outcome"], got["apt-pip-user"]["reward"]) == ("solved", 1.0), got["apt-pip-user"]
    sf = got["schema-features"]
    assert (sf["outcome"], sf["reward"]) == ("solved", 1.0), sf
    assert sf["metadata"]["healthcheck_attempts"] == 2  # failed once, passed before the agent ran
    assert any("FROM python:3.12-slim approximated" in n for n in sf["metadata"]["environment_notes"])
    tdir = Path(sf["artifacts_dir"])
    assert (tdir / "artifacts/app/report.txt").read_text() == "report for alice\n"
    assert (tdir / "logs/artifacts/data-copy.txt").read_text() == "payload\n"
    assert json.loads((tdir / "logs/verifier/reward.json").read_text())["reward"] == 1
    for name in FEATURES:  # issue 30's Harbor features: each solved by the oracle
        assert (got[name]["outcome"], got[name]["reward"]) == ("solved", 1.0), got[name]
    assert any("ENTRYPOINT/CMD in the background: python3 /app/service.py --port 8731" in n
               for n in got["entrypoint-service"]["metadata"]["environment_notes"])
    hc = got["healthcheck-never-healthy"]  # never healthy: refused in one line, the others still ran
    assert hc["outcome"] == "env_setup_failed" and "healthcheck failed 2 time(s)" in hc["reason"], hc
    assert "\n" not in hc["reason"]
    mv = got["missing-verifier-tool"]
    assert (mv["outcome"], mv["reward"]) == ("verifier_error", None) and "uvx: command not found" in mv["reason"]

    [layer] = [p for p in (tmp_path / "cache").iterdir() if (p / "upper/usr/games/sl").exists()]
    built = (layer / "meta.json").stat().st_mtime_ns
    r = runner.invoke(app, ["eval", str(HERE), "--agent", "nop", "-o", str(tmp_path / "nop")])
    assert r.exit_code == 0, r.output
    got = _trials(tmp_path / "nop")
    assert [got[t]["outcome"] for t in ("apt-pip-user", "schema-features", "missing-verifier-tool")] == [
        "failed", "failed", "verifier_error"]
    assert got["apt-pip-user"]["reward"] == 0.0
    assert {n: (got[n]["outcome"], got[n]["reward"]) for n in FEATURES} == {n: ("failed", 0.0) for n in FEATURES}
    assert got["healthcheck-never-healthy"]["outcome"] == "env_setup_failed"
    assert (layer / "meta.json").stat().st_mtime_ns == built  # the second trial did not rebuild
