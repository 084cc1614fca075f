"""Per-harness figures on the shell set: each scaffold through `legorl eval` on the same few tasks and model.

    .venv/bin/python bench/harnesses.py [--harnesses builtin,mini-swe-agent,claude-code,opencode,codex,qwen-code]
        [--tasks builtin:shell-basics] [--limit 4] [--model smollm2-135m-instruct] [--max-turns 3]
        [--max-tokens 96] [--out /tmp/legorl-harnesses]

Runs one `legorl eval` per harness (one after the other, so each sees the machine alone apart from outside
load) and reads its trials back: pass@1, trials with a tool call, tokens per trial (all / sampled), time per
trial (wall, and the agent phase), the time to the first streamed event through the proxy (the session
counters `first_event_ms / streamed_calls`; a harness that does not stream has none), and fidelity: the mean
|Δlogp| between each trial's recorded sampling logprobs and a teacher-forced fp32 HF forward of the same
tokens at the sampling temperature (what the trainer recomputes). Install times are not measured here
(`time legorl agents install NAME --version V`).

    .venv/bin/python bench/harnesses.py --mix examples/agent-mix.toml [-k 4] [--limit 4]

runs the config's `[[agent.mix]]` through `legorl eval --config` (its training tasks, k attempts each: the
groups a step would sample) and prints the same figures split by the harness each trial ran.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what each harness is told the model's window is (SmolLM2: 8192); the rest are their adapters' defaults
OPTS = {"codex": ["context_window=8192"], "opencode": ["context_window=8192"]}


def run_eval(harness: str, args: argparse.Namespace, out: Path) -> float:
    cmd = [sys.executable, "-m", "legorl.cli", "eval", args.tasks, "--agent", harness, "--model", args.model,
           "--limit", str(args.limit), "--max-turns", str(args.max_turns), "--max-tokens", str(args.max_tokens),
           "-c", str(args.limit), "-t", str(args.temperature), "-o", str(out), "--timeout", str(args.timeout)]
    for o in OPTS.get(harness, []):
        cmd += ["--agent-opt", o]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    (out / "eval.log").parent.mkdir(parents=True, exist_ok=True)
    (out / "eval.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(f"{harness}: legorl eval failed ({proc.returncode}); see {out / 'eval.log'}", file=sys.stderr)
    return wall


def fidelity(model, traj: Path, temperature: float) -> float | None:
    import torch

    rec = json.loads(traj.read_text())
    deltas = []
    for b in rec["branches"]:
        ids, mask, lps = b["token_ids"], b["mask"], b["logprobs"]
        if not any(mask):
            continue
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float() / temperature
        ref = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
        deltas += [abs(lp - ref[i - 1]) for i, (m, lp) in enumerate(zip(mask, lps, strict=True))
                   if m and i > 0 and lp is not None]
    return sum(deltas) / len(deltas) if deltas else None


def run_mix(config: str, args: argparse.Namespace, out: Path) -> float:
    cmd = [sys.executable, "-m", "legorl.cli", "eval", "--config", config, "--split", "train", "-k", str(args.k),
           "--limit", str(args.limit), "-o", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(f"mix: legorl eval failed ({proc.returncode}); see {out / 'eval.log'}", file=sys.stderr)
    return time.monotonic() - t0


def summarize(harness: str, out: Path, wall: float, model, temperature: float, label: str | None = None) -> dict:
    paths = [p for p in out.rglob("result.json")]
    trials = [(p, json.loads(p.read_text())) for p in paths]
    trials = [(p, t) for p, t in trials if "trial_id" in t and (label is None or t["metadata"].get("harness") == label)]
    dirs = [p.parent for p, _ in trials]
    trials = [t for _, t in trials]
    counters = [t.get("metadata", {}).get("counters") or {} for t in trials]
    streamed = sum(c.get("streamed_calls", 0) for c in counters)
    fid = [f for d in dirs if (d / "proxy_trajectory.json").is_file()
           and (f := fidelity(model, d / "proxy_trajectory.json", temperature)) is not None]
    n = len(trials) or 1
    return {
        "harness": harness, "trials": len(trials), "wall_s": round(wall, 1),
        "pass@1": sum(1 for t in trials if (t.get("reward") or 0) > 0) / n,
        "outcomes": sorted({t.get("metadata", {}).get("exit_status", t.get("outcome")) for t in trials}),
        "with_tool_call": sum(1 for c in counters if c.get("tool_calls", 0) > 0),
        "calls_per_trial": sum(c.get("calls", 0) for c in counters) / n,
        "tokens_per_trial": sum(t.get("tokens", 0) for t in trials) / n,
        "sampled_per_trial": sum(t.get("policy_tokens", 0) for t in trials) / n,
        "trial_s_mean": statistics.mean([t["duration_s"] for t in trials]) if trials else None,
        "agent_s_p50": statistics.median([t["timings"]["agent"] for t in trials]) if trials else None,
        "ttft_ms": (sum(c.get("first_event_ms", 0) for c in counters) / streamed) if streamed else None,
        "streamed_calls": streamed,
        "fidelity_mean_abs_dlogp": max(fid) if fid else None,  # the worst trial's mean
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--harnesses", default="builtin,mini-swe-agent,claude-code,opencode,codex,qwen-code")
    ap.add_argument("--tasks", default="builtin:shell-basics")
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--timeout", type=float, default=600, help="agent time limit per trial (a loaded machine is slow)")
    ap.add_argument("--out", default="/tmp/legorl-harnesses")
    ap.add_argument("--mix", help="a run config with [[agent.mix]]: its split by harness instead")
    ap.add_argument("-k", type=int, default=4, help="with --mix: attempts per task")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from legorl.models import prepare_model

    torch.manual_seed(0)
    model = args.model
    if args.mix:
        from legorl.config import load_config

        model = load_config(args.mix).model.path
    hf = AutoModelForCausalLM.from_pretrained(prepare_model(model), dtype=torch.float32).eval()
    rows = []
    if args.mix:
        from legorl.config import load_config

        cfg = load_config(args.mix)
        out = Path(args.out) / "mix"
        wall = run_mix(args.mix, args, out)
        temp = cfg.rollout.temperature
        for h in cfg.agent.mix:
            row = summarize(h.name, out, wall, hf, temp, label=h.label or h.name)
            rows.append(row)
            print(json.dumps(row), flush=True)
        (Path(args.out) / "mix-summary.json").write_text(json.dumps(rows, indent=1))
        return
    for h in args.harnesses.split(","):
        out = Path(args.out) / h
        wall = run_eval(h, args, out)
        row = summarize(h, out, wall, hf, args.temperature)
        rows.append(row)
        print(json.dumps(row), flush=True)
    (Path(args.out) / "summary.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
