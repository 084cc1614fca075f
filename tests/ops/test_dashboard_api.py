"""The dashboard's JSON endpoints over a crafted run dir (no browser)."""

from __future__ import annotations

import json

from aiohttp.test_utils import TestClient, TestServer

from legorl.ops.dashboard.server import make_app

from .rundir import make_run


async def test_endpoints(tmp_path):
    make_run(tmp_path, "alpha", steps=3)
    run = make_run(tmp_path, "beta", steps=2)
    with (run / "logs" / "beta.jsonl").open("a") as f:
        f.write(json.dumps({"step": 3, "actor/grad_norm": float("nan")}) + "\n{\"step\": 4, \"tor")  # torn line
    async with TestClient(TestServer(make_app(tmp_path, decode_tokens=False))) as c:
        runs = await (await c.get("/api/runs")).json()
        assert [r["id"] for r in runs] == ["alpha", "beta"]
        assert runs[0]["step"] == 3 and runs[0]["total_steps"] == 10 and runs[0]["alive"]
        info = await (await c.get("/api/runs/alpha")).json()
        assert info["config"]["run"]["name"] == "alpha"
        metrics = await (await c.get("/api/runs/beta/metrics")).json()
        assert [m["step"] for m in metrics] == [1, 2, 3] and metrics[-1]["actor/grad_norm"] is None
        trials = await (await c.get("/api/runs/alpha/trials")).json()
        assert len(trials) == 12 and {t["kind"] for t in trials} == {"train"}
        path = trials[0]["path"]
        traj = await (await c.get("/api/runs/alpha/trajectory", params={"trial": path})).json()
        assert not traj["decoded"] and len(traj["tokens"]) == 12
        assert sum(t["mask"] for t in traj["tokens"]) == 6 and traj["messages"][-1]["role"] == "assistant"
        assert (await c.get("/api/runs/alpha/trajectory", params={"trial": "../../../etc"})).status == 400
        assert (await c.get("/api/runs/nope/metrics")).status == 404
        page = await (await c.get("/")).text()
        assert "/static/chart.js" in page and "http" not in page.replace("http-equiv", "")
        js = await (await c.get("/static/chart.js")).text()
        assert "LegoChart" in js


async def test_empty_and_fresh_runs(tmp_path):
    async with TestClient(TestServer(make_app(tmp_path / "nothing", decode_tokens=False))) as c:
        assert await (await c.get("/api/runs")).json() == []
    run = make_run(tmp_path, "fresh", records=[], trials=[])  # started: config.json, no step yet
    async with TestClient(TestServer(make_app(tmp_path, decode_tokens=False))) as c:
        (row,) = await (await c.get("/api/runs")).json()
        assert row["step"] is None and row["num_trials"] == 0 and row["eta_s"] is None
        assert await (await c.get("/api/runs/fresh/metrics")).json() == []
        (run / "trials" / "fresh" / "step_1" / "t0").mkdir(parents=True)  # a trial still running
        assert await (await c.get("/api/runs/fresh/trials")).json() == []
        assert (await c.get("/api/runs/fresh/trajectory", params={"trial": "step_1/t0"})).status == 404
