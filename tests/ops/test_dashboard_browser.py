"""The dashboard in a real browser: headless Chromium (Debian `chromium` + `chromium-driver`) via
Selenium, over a crafted run dir. Saves a screenshot under the test's tmp dir."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from legorl.ops.dashboard.server import start

from .rundir import base_record, make_run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e '.[dev]')")
if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    pytest.skip("Chromium not installed (apt-get install chromium chromium-driver; scripts/setup.sh does it)",
                allow_module_level=True)


class Server:
    """The dashboard on its own loop in a thread (the browser calls it while the test blocks)."""

    def __init__(self, runs_dir: Path):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, args=(runs_dir,), daemon=True)
        self.thread.start()
        assert self.ready.wait(30)

    def _main(self, runs_dir: Path) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner, self.url = self.loop.run_until_complete(start(runs_dir, port=0))
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def browser(tmp_path):
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'chrome-profile'}", "--window-size=1400,3200"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(options=opts, service=Service(DRIVER))
    yield drv
    drv.quit()


def wait_for(drv, script: str, timeout: float = 20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = drv.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script}")


def test_dashboard_in_chromium(tmp_path, browser, tiny_llama_dir):
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tiny_llama_dir / "tokenizer.json")).encode("Create /app/a.txt\necho hi > /app/a.txt").ids
    runs = tmp_path / "runs"
    # alpha mixes two harnesses (agent.mix): its steps carry rollout/harness/<label>/* (steps.harness_metrics)
    records = [{"step": s, **base_record(s), **{f"rollout/harness/{h}/{k}": v for h in ("builtin", "codex")
                                                 for k, v in (("share", 0.5), ("pass_rate", 0.1 * s),
                                                              ("policy_tokens_mean", 30.0))}} for s in range(1, 5)]
    records[-1].update({"val/pass_rate": 0.5, "val/score/mean": 0.5, "val/outcome/solved": 0.5,
                        "val/turns/mean": 2.5, "val/turns/response_mask_share": 0.2})
    alpha = make_run(runs, "alpha", steps=4, records=records, config={"model": {"path": str(tiny_llama_dir)}}, token_ids=ids)
    make_run(runs, "beta", steps=3)
    server = Server(runs)
    drv = browser
    try:
        drv.get(server.url + "?run=alpha&poll=100000")
        wait_for(drv, "return document.body.dataset.loaded === '1'")
        overview = drv.find_element("id", "overview").text
        assert "alpha" in overview and "4 / 10" in overview and "alive" in overview
        # curves: one SVG chart per present key, each with a drawn line
        n_curves = drv.execute_script("return document.querySelectorAll('#curves svg polyline').length")
        assert n_curves >= 7
        assert drv.execute_script("return document.querySelectorAll('#outcomes .chart-empty').length") == 0
        assert drv.execute_script("return document.querySelectorAll('#fidelity svg polyline').length") == 4
        harness_charts = drv.execute_script("return [...document.querySelectorAll('#outcomes .chart')].filter(c => "
                                            "c.dataset.title.includes('harness/*')).map(c => c.querySelectorAll("
                                            "'polyline').length)")
        assert harness_charts == [2, 2], harness_charts  # pass rate and policy tokens, one line per harness
        assert "pass_rate" in drv.find_element("id", "val-table").text
        # turns: per-trial counts and shares, for rollout (7 keys) and validation (2 keys)
        assert drv.execute_script("return document.querySelectorAll('#agent-turns svg polyline').length") == 9
        assert drv.execute_script("return document.querySelectorAll('#agent-turns .chart-empty').length") == 0
        assert "turns/response_mask_share" in drv.find_element("id", "val-table").text
        # the step budget: calls evicted from a full KV pool get their own chart
        titles = drv.execute_script("return [...document.querySelectorAll('#timing .chart')]"
                                    ".map(c => c.dataset.title)")
        assert any(t.startswith("budget/engine/preemptions") for t in titles), titles
        cells = drv.execute_script("return [...document.querySelectorAll('#task-grid td.cell')].map(c => c.textContent)")
        assert len(cells) == 8 and set(cells) == {"1/2"}
        # compare: every curve gets the other run as a second (dashed) line
        drv.execute_script("const s = document.querySelector('#compare-select'); s.value = 'beta'; s.onchange({target: s})")
        wait_for(drv, "return document.querySelectorAll('#curves svg polyline[stroke-dasharray=\"5 3\"]').length >= 7")
        # live: a new step appears on the next poll
        with (alpha / "logs" / "alpha.jsonl").open("a") as f:
            f.write(json.dumps({"step": 5, **base_record(5)}) + "\n")
        drv.execute_script("window.legorlDashboard.refresh()")
        wait_for(drv, "return document.querySelector('#overview').textContent.includes('5 / 10')")
        # trajectory: turns, then one span per token with its mask and logprob, decoded with the tokenizer
        drv.execute_script("document.querySelector('#task-grid td.cell[data-step=\"4\"]').click()")
        drv.execute_script("document.querySelector('#trial-table tr.clickable').click()")
        wait_for(drv, "return document.querySelectorAll('#tokens .tok').length > 0")
        toks = drv.execute_script("return [...document.querySelectorAll('#tokens .tok')].map(t => "
                                  "[t.textContent, t.dataset.mask, t.dataset.logprob])")
        assert len(toks) == len(ids)
        assert {m for _, m, _ in toks} == {"0", "1"} and all(lp for _, m, lp in toks if m == "1")
        assert "echo" in "".join(t for t, _, _ in toks)
        assert "assistant" in drv.find_element("id", "turns").text.lower()
        shot = tmp_path / "dashboard.png"
        drv.save_screenshot(str(shot))
        traj = tmp_path / "trajectory.png"
        drv.execute_script("document.querySelectorAll('main > section:not(#trials):not(#trajectory)')"
                           ".forEach(s => { s.style.display = 'none'; })")
        drv.save_screenshot(str(traj))
        assert shot.stat().st_size > 10_000 and traj.stat().st_size > 5_000
        print(f"screenshots: {shot} {traj}")
        errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        server.stop()
