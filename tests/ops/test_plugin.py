"""The Claude Code plugin: the manifest parses and names existing skills, each skill has its
frontmatter, and every `legorl` command a skill runs exists (`--help`), preflight for real."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from legorl.cli import app

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "claude-code"
ROOT = PLUGIN.parents[1]
runner = CliRunner()


def skills() -> list[Path]:
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert re.fullmatch(r"[a-z0-9-]+", manifest["name"]) and manifest["description"]
    return [(PLUGIN / p).resolve() for p in manifest["skills"]]


def frontmatter(text: str) -> dict[str, str]:
    m = re.match(r"---\n(.*?)\n---\n", text, re.DOTALL)
    assert m, "SKILL.md must start with a --- frontmatter block"
    return dict(line.split(": ", 1) for line in m.group(1).splitlines() if ": " in line)


def commands(text: str) -> list[list[str]]:
    """`legorl ...` invocations in the skill's bash blocks (nohup/redirects/& stripped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            line = re.sub(r"^nohup\s+", "", line.strip()).split(">")[0].rstrip(" &")
            if line.startswith("legorl "):
                out.append(shlex.split(line)[1:])
    return out


def test_manifest_names_existing_skills():
    paths = skills()
    assert {p.name for p in paths} == {"legorl-check", "legorl-train", "legorl-status", "legorl-dashboard"}
    for p in paths:
        fm = frontmatter((p / "SKILL.md").read_text())
        assert fm["name"] == p.name and len(fm["description"]) > 40


@pytest.mark.parametrize("skill", ["legorl-check", "legorl-train", "legorl-status", "legorl-dashboard"])
def test_skill_commands_exist(skill):
    cmds = commands((PLUGIN / "skills" / skill / "SKILL.md").read_text())
    assert cmds, f"{skill} calls no legorl command"
    for argv in cmds:
        res = runner.invoke(app, [argv[0], "--help"])
        assert res.exit_code == 0, (argv, res.output)


def test_check_skill_runs_preflight_on_the_demo():
    cmds = commands((PLUGIN / "skills" / "legorl-check" / "SKILL.md").read_text())
    argv = next(c for c in cmds if "--structure-only" in c)
    argv = [str(ROOT / "examples" / "demo.toml") if a == "CONFIG" else a for a in argv]
    res = runner.invoke(app, argv)
    assert res.exit_code == 0 and "ok to start" in res.output, res.output
